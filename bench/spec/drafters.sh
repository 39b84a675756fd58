#!/bin/sh
# drafters.sh — issue 16's benchmark: every drafter against plain decoding
# on held-out prompts (bench/spec/heldout_prompts.tsv, from the test
# chapters), 128 tokens, greedy and T = 0.7 with a fixed seed, one process
# per temperature, plain and speculative alternating per prompt. Prints
# bench_drafters' JSON lines, then the load average.
#
#   bench/spec/drafters.sh BUILD_DIR [WRAP...]
#
# N_PROMPTS (default 12) and THREADS (default 2) come from the environment.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [WRAP...]" >&2; exit 2; }
B=$1
shift
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BD="$B/bench/spec/bench_drafters"
COMMON="--target $SRC/models/phasemark-kjv-target-q8_0.gguf
        --draft $SRC/models/phasemark-kjv-draft-f16.gguf
        --prompts $SRC/bench/spec/heldout_prompts.tsv --tokens 128 --seed 7
        --n-prompts ${N_PROMPTS:-12} --threads ${THREADS:-2}"
uptime >&2
# shellcheck disable=SC2086
"$@" "$BD" $COMMON --temp 0 \
    --config model:1 --config model:2 --config model:4 \
    --config ngram:2 --config ngram:4 --config ngram:8 \
    --config hybrid:2 --config hybrid:4 \
    --config model:4:cost --config ngram:8:cost --config hybrid:4:cost
uptime >&2
# shellcheck disable=SC2086
"$@" "$BD" $COMMON --temp 0.7 \
    --config model:2 --config ngram:4 --config hybrid:4 \
    --config model:4:cost --config ngram:8:cost --config hybrid:4:cost
uptime >&2
