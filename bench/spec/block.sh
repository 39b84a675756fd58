#!/bin/sh
# block.sh — the block drafter (issue 17) against plain decoding and the
# other drafters, with bench_drafters' protocol (held-out prompts, 128
# tokens, greedy and T = 0.7, plain and speculative alternating per
# prompt in one process). Prints bench_drafters' JSON lines.
#
#   bench/spec/block.sh BUILD_DIR [HEAD.gguf] [WRAP...]
#
# HEAD defaults to models/phasemark-kjv-block-f16.gguf; when that is
# absent a random head is written (pm-modelwriter, layers 1,3,5, block
# 16), which measures the head's cost, not a trained head's acceptance.
# HEAD_TYPE=q8_0 (or another pm-modelwriter type) re-encodes the head's
# matrices first (pm-modelwriter requant): on the CPU a Q8_0 head takes
# the same panels and chain as the target's Q8_0 products and half the
# F16 head's bytes. N_PROMPTS (default 12), THREADS (default 2) and REPS
# (default 1) come from the environment. "hybrid:K:block" rows are the
# hybrid over the same head (n-gram rounds where a match of 3 exists,
# else the head's).
set -eu
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [HEAD.gguf] [WRAP...]" >&2; exit 2; }
B=$1
shift
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TARGET=$SRC/models/phasemark-kjv-target-q8_0.gguf
HEAD=$SRC/models/phasemark-kjv-block-f16.gguf
if [ $# -ge 1 ] && [ -f "$1" ]; then HEAD=$1; shift; fi
if [ ! -f "$HEAD" ]; then
    HEAD=${TMPDIR:-/tmp}/pm_block_bench_head_$$.gguf
    trap 'rm -f "$HEAD"' EXIT
    "$B/tools/modelwriter/pm-modelwriter" synth --arch phasemark-block --target "$TARGET" \
        -o "$HEAD" --layers 1,3,5 --block-size 16 --seed 1
    echo "block.sh: no trained head; a random one (acceptance near 0)" >&2
fi
if [ -n "${HEAD_TYPE:-}" ]; then
    RQ=${TMPDIR:-/tmp}/pm_block_bench_head_${HEAD_TYPE}_$$.gguf
    trap 'rm -f "$RQ" "${TMPDIR:-/tmp}/pm_block_bench_head_$$.gguf"' EXIT
    "$B/tools/modelwriter/pm-modelwriter" requant -o "$RQ" --type "$HEAD_TYPE" "$HEAD"
    HEAD=$RQ
fi
BD="$B/bench/spec/bench_drafters"
COMMON="--target $TARGET --draft $SRC/models/phasemark-kjv-draft-f16.gguf --head $HEAD
        --prompts $SRC/bench/spec/heldout_prompts.tsv --tokens 128 --seed 7
        --n-prompts ${N_PROMPTS:-12} --threads ${THREADS:-2} --reps ${REPS:-1}"
# Tree rounds: "block:K:treeN" (a tree of up to N nodes no deeper than K,
# verified in one forward of N + 1 rows, each bitwise its decode step).
# A verify forward of up to 64 rows is bitwise its decode steps, so every
# greedy row must hold parity (bench_drafters exits 1 on a break; the
# script reports it and goes on). ":own" rows run the head on threads of its own
# instead of the target's (own_threads in the JSON): the A/B of sharing.
run() {
    "$@" || echo "block.sh: bench_drafters exited $? (a parity break is in its rows)" >&2
}
uptime >&2
# shellcheck disable=SC2086
run "$@" "$BD" $COMMON --temp 0 \
    --config block:2 --config block:4 --config block:6 --config block:8 --config block:10 \
    --config block:16 --config block:10:cost --config block:16:cost --config model:4 --config ngram:8 \
    --config block:4:own --config block:16:cost:own \
    --config hybrid:4:block --config hybrid:6:block --config hybrid:8:block:cost --config ngram:4
uptime >&2
# Tree rounds (greedy only) beside the chains of the same k, each config
# with its own plain runs: tokens_per_forward and speedup read side by side.
# shellcheck disable=SC2086
run "$@" "$BD" $COMMON --temp 0 \
    --config block:4 --config block:4:tree8 --config block:8 --config block:8:tree16 \
    --config block:8:tree32 --config block:10:tree32
uptime >&2
# shellcheck disable=SC2086
run "$@" "$BD" $COMMON --temp 0.7 \
    --config block:2 --config block:4 --config block:8 --config block:16:cost \
    --config model:4:cost --config hybrid:2:block
uptime >&2
