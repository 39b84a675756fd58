#!/bin/sh
# quiet.sh — issue 16's CPU benchmark in one run: phasemark's plain and
# speculative decoding (drafters model k = 1..4 and cost-aware, ngram,
# hybrid; model k = 1 and cost-aware again with the draft on threads of
# its own, "own": the A/B of sharing the target's) and llama.cpp's plain
# decode (llama-cli) and llama-speculative, all on the shipped KJV pair,
# the held-out prompts, greedy and T = 0.7 with a fixed seed, at THREADS
# engine threads.
#
#   bench/spec/quiet.sh BUILD_DIR LLAMA_BIN_DIR OUT_JSON
#
# Alternation: within phasemark, plain and speculative run back to back per
# prompt in one process (bench_drafters); within llama.cpp, llama-cli and
# then llama-speculative per prompt; the two engines take turns per
# temperature and per repetition, so load drift falls on all of them.
# Greedy parity: phasemark's speculative ids must equal its plain ids for
# every prompt (bench_drafters checks; a break fails the run); llama.cpp's
# speculative text is compared with its plain text (it may run a round
# past -n) and the rows say on how many prompts they agree.
#
# OUT_JSON's rows on a "cpu" device are replaced by this run's (rows of
# other devices stay; the contended rows of the earlier drafters run are
# kept once under "rows_cpu_previous"). Prints a summary table.
#
# Environment: N_PROMPTS (24), TOKENS (128), REPS (2), THREADS (2), SEED (7),
# LLAMA_K ("2 4": llama-speculative --draft-max values), LABEL (a note on
# every row, e.g. "smoke"), WRAP (a command prefix, e.g. "taskset -c 0,1").
# Budget: the defaults take about 6 minutes on a quiet 2-core host (the
# smoke setting, 2 prompts x 32 tokens x 1 rep, about 1 minute under load).
set -eu
[ $# -eq 3 ] || { echo "usage: $0 BUILD_DIR LLAMA_BIN_DIR OUT_JSON" >&2; exit 2; }
B=$1 L=$2 OUT=$3
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BD="$B/bench/spec/bench_drafters"
for f in "$BD" "$L/llama-cli" "$L/llama-speculative"; do
    [ -x "$f" ] || { echo "$0: $f: not an executable" >&2; exit 2; }
done
N=${N_PROMPTS:-24} TOK=${TOKENS:-128} REPS=${REPS:-2} TH=${THREADS:-2} SEED=${SEED:-7}
LK=${LLAMA_K:-"2 4"} WRAP=${WRAP:-}
TARGET="$SRC/models/phasemark-kjv-target-q8_0.gguf"
DRAFT="$SRC/models/phasemark-kjv-draft-f16.gguf"
PROMPTS="$SRC/bench/spec/heldout_prompts.tsv"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date +%s)

# One llama.cpp measurement: plain or spec, prompt text, temperature, k.
# Appends "KIND TEMP K PROMPT_INDEX" and the tool's stdout / stderr files.
llama_one() {
    kind=$1 temp=$2 k=$3 i=$4 text=$5
    base="$TMP/ll-$kind-$temp-$k-$i-$rep"
    # Pure temperature sampling, as phasemark's sampler does: no top-k,
    # top-p, min-p or penalties (llama.cpp's defaults would truncate).
    # Greedy: top-k 1, the argmax without sorting the whole vocabulary.
    if [ "$temp" = 0 ]; then
        samp="--temp 0 --top-k 1 --repeat-penalty 1 --seed $SEED"
    else
        samp="--temp $temp --top-k 0 --top-p 1 --min-p 0 --repeat-penalty 1 --seed $SEED"
    fi
    if [ "$kind" = plain ]; then
        # shellcheck disable=SC2086
        $WRAP "$L/llama-cli" -m "$TARGET" -p "$text" -n "$TOK" $samp -t "$TH" -c 512 \
            --ignore-eos -no-cnv </dev/null >"$base.out" 2>"$base.err" || true
    else
        # shellcheck disable=SC2086
        $WRAP "$L/llama-speculative" -m "$TARGET" -md "$DRAFT" -p "$text" -n "$TOK" $samp \
            -t "$TH" -td "$TH" -c 512 --draft-max "$k" --draft-min 0 --ignore-eos \
            </dev/null >"$base.out" 2>"$base.err" || true
    fi
    echo "$kind $temp $k $i $rep $base" >>"$TMP/llama.idx"
}

rep=1
while [ "$rep" -le "$REPS" ]; do
    for T in 0 0.7; do
        # shellcheck disable=SC2086
        $WRAP "$BD" --target "$TARGET" --draft "$DRAFT" --prompts "$PROMPTS" --tokens "$TOK" \
            --seed "$SEED" --n-prompts "$N" --threads "$TH" --temp "$T" \
            --config model:1 --config model:2 --config model:3 --config model:4 \
            --config model:4:cost --config ngram:4 --config ngram:8:cost \
            --config hybrid:4 --config hybrid:4:cost \
            --config model:1:own --config model:4:cost:own \
            >>"$TMP/pm.jsonl" 2>>"$TMP/pm.err" || echo "rep $rep T $T: bench_drafters exit $?" >>"$TMP/pm.err"
        i=0
        head -n "$N" "$PROMPTS" | cut -f2 >"$TMP/prompts.txt"
        while IFS= read -r text; do
            llama_one plain "$T" 0 "$i" "$text"
            for k in $LK; do
                llama_one spec "$T" "$k" "$i" "$text"
            done
            i=$((i + 1))
        done <"$TMP/prompts.txt"
    done
    rep=$((rep + 1))
done

LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$(($(date +%s) - T0))
[ -s "$TMP/pm.err" ] && cat "$TMP/pm.err" >&2
python3 "$SRC/bench/spec/quiet.py" --out "$OUT" --pm "$TMP/pm.jsonl" --llama "$TMP/llama.idx" \
    --load-start "$LOAD0" --load-end "$LOAD1" --elapsed "$ELAPSED" --threads "$TH" \
    --prompts "$N" --tokens "$TOK" --reps "$REPS" --seed "$SEED" --label "${LABEL:-}" \
    --commit "$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)"
