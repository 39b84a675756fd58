#!/bin/sh
# ab_decode.sh — plain decoding before and after a change, side by side:
# two bench_spec binaries (one built from the older tree) alternate
# `bench_spec loop --n 0` (a decode after a 32-token history, median of
# 2000) ROUNDS times per thread count, so both see the same machine state.
# Prints bench_spec's JSON lines with "build":"a"|"b" added.
#
#   bench/spec/ab_decode.sh BENCH_A BENCH_B [MODEL]
#
# ROUNDS (default 5) and THREADS (default "1 2") come from the environment.
# An older tree's bench_spec may lack `loop`: build the current
# bench/spec/bench_spec.c against the older tree's headers and engine
# library instead (bench/results/spec.md says how it was done).
set -eu
[ $# -ge 2 ] || { echo "usage: $0 BENCH_A BENCH_B [MODEL]" >&2; exit 2; }
A=$1
B=$2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
MODEL=${3:-$SRC/models/phasemark-kjv-target-q8_0.gguf}
for T in ${THREADS:-1 2}; do
    i=0
    while [ "$i" -lt "${ROUNDS:-5}" ]; do
        for side in a b; do
            if [ "$side" = a ]; then bin=$A; else bin=$B; fi
            "$bin" loop --model "$MODEL" --n 0 --reps 2000 --threads "$T" |
                sed "s/^{/{\"build\":\"$side\",/"
        done
        i=$((i + 1))
    done
done
