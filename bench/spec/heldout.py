#!/usr/bin/env python3
"""heldout.py — the benchmark's held-out prompts, from the test split.

Reads kjv.tsv (train/make_corpus.sh), keeps the test chapters by the
split rule of train/prepare.py (chapter k of the whole Bible, counted
from 0, is test when k % 40 == 33; restated here so this needs no
numpy), and writes N prompts, evenly
spaced over the test chapters' verse openings: a verse followed by the
first 6 words of the next, one prompt per line as "REF<TAB>TEXT".
None of this text was trained on (models/README.md, the split).

Usage: bench/spec/heldout.py KJV_TSV [N] > bench/spec/heldout_prompts.tsv
"""
import sys

HEAD_WORDS = 6
SPLIT_MOD, TEST_REM = 40, 33


def read_chapters(path):
    """[(book, chapter, [verse texts])] in file (canonical) order."""
    chapters = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            book, chap, _verse, text = line.rstrip("\n").split("\t", 3)
            if not chapters or chapters[-1][:2] != (book, int(chap)):
                chapters.append((book, int(chap), []))
            chapters[-1][2].append(text)
    return chapters


def main():
    tsv = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 24
    chapters = read_chapters(tsv)
    test = [c for k, c in enumerate(chapters) if k % SPLIT_MOD == TEST_REM]
    spots = [(ci, vi) for ci, (_b, _c, vs) in enumerate(test) for vi in range(1, len(vs))]
    step = len(spots) / n
    for i in range(n):
        ci, vi = spots[int(i * step + step / 2)]
        book, chap, verses = test[ci]
        head = " ".join(verses[vi].split(" ")[:HEAD_WORDS])
        print(f"{book}{chap}:{vi + 1}\t{verses[vi - 1]} {head}")


if __name__ == "__main__":
    main()
