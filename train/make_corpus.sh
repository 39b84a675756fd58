#!/usr/bin/env bash
# make_corpus.sh — extract the King James Version text from Debian's
# bible-kjv-text package (via the `bible` program of bible-kjv) into one
# tab-separated file, one verse per line: book, chapter, verse, text.
#
# Why a TSV rather than prose: prepare.py needs the chapter boundaries (the
# train/validation/test split is by whole chapters, so no held-out verse has
# its neighbours in the training text) and verse boundaries (held-out
# prompts start at a verse).
#
# Usage: train/make_corpus.sh [OUTDIR]   (default: build-train/corpus)
# Needs: apt-get install bible-kjv   (pulls in bible-kjv-text)
set -euo pipefail

outdir=${1:-build-train/corpus}
if ! command -v bible >/dev/null 2>&1; then
    echo "make_corpus.sh: the 'bible' program is missing; run: apt-get install bible-kjv" >&2
    exit 1
fi
mkdir -p "$outdir"
tmp="$outdir/kjv.tsv.tmp.$$"
trap 'rm -f "$tmp"' EXIT

# -f turns pretty-printing off: one verse per line, "Ge1:1 In the beginning...".
# The reference is the first field; its book abbreviation may begin with a
# digit ("1Sm3:4"), so split on the LAST run of digits before the colon.
bible -f gen1:1-rev22:21 </dev/null | LC_ALL=C awk '
    {
        ref = $1
        text = substr($0, length(ref) + 2)
        if (!match(ref, /[0-9]+:[0-9]+$/)) { print "bad reference: " ref > "/dev/stderr"; exit 1 }
        book = substr(ref, 1, RSTART - 1)
        split(substr(ref, RSTART), cv, ":")
        gsub(/[ \t]+/, " ", text)
        sub(/^ /, "", text); sub(/ $/, "", text)
        if (book == "" || text == "") { print "empty field at line " NR > "/dev/stderr"; exit 1 }
        printf "%s\t%d\t%d\t%s\n", book, cv[1], cv[2], text
    }' >"$tmp"

verses=$(wc -l <"$tmp")
# The Authorized Version has 31102 verses; anything else means the package
# or the parsing changed, and every downstream number would silently move.
if [ "$verses" -ne 31102 ]; then
    echo "make_corpus.sh: expected 31102 verses, got $verses" >&2
    exit 1
fi
mv "$tmp" "$outdir/kjv.tsv"
trap - EXIT
pkgver=$(dpkg-query -W -f='${Version}' bible-kjv-text 2>/dev/null || echo unknown)
sha=$(sha256sum "$outdir/kjv.tsv" | cut -d' ' -f1)
printf 'bible-kjv-text %s\nverses %s\nsha256 %s\n' "$pkgver" "$verses" "$sha" >"$outdir/SOURCE"
echo "make_corpus.sh: wrote $outdir/kjv.tsv ($verses verses, bible-kjv-text $pkgver, sha256 $sha)"
