#!/bin/sh
# run.sh — the speculative-decoding benchmark as recorded in
# bench/results/spec.json: (a) the shipped trained KJV pair (draft as
# shipped, F16) at 1 and 2 engine threads, k = 1..4 and adaptive, with the
# per-forward costs that bound the speedup; the same pair with the draft
# re-encoded to Q8_0 (a smaller draft, same vocabulary); (b) a synthetic
# stories110M-shaped F32 target (pm-modelwriter synth) with truncated-layer
# drafts made from it. Prints JSON lines (bench_spec's) on stdout.
#
#   bench/spec/run.sh BUILD_DIR [WRAP...]
#
# WRAP is a command prefix for every measurement, e.g. "taskset -c 2,3" to
# pin the run to two cores of a larger machine. THREADS (default "2 1") and
# SYNTH (default 1; 0 skips (b)) come from the environment. Needs BUILD_DIR's
# bench/spec/bench_spec and tools/modelwriter/pm-modelwriter.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [WRAP...]" >&2; exit 2; }
B=$1
shift
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BS="$B/bench/spec/bench_spec"
MW="$B/tools/modelwriter/pm-modelwriter"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
TARGET="$SRC/models/phasemark-kjv-target-q8_0.gguf"
DRAFT="$SRC/models/phasemark-kjv-draft-f16.gguf"
THREADS=${THREADS:-"2 1"}
"$BS" derive "$DRAFT" "$TMP/kjv-draft-q8_0.gguf" --type q8_0

# (a) the trained pair.
for T in $THREADS; do
    "$@" "$BS" cost --model "$TARGET" --draft "$DRAFT" --threads "$T" --reps 5
    "$@" "$BS" cost --model "$TARGET" --draft "$TMP/kjv-draft-q8_0.gguf" --threads "$T" --reps 5
    "$@" "$BS" run --target "$TARGET" --draft "$DRAFT" --k 1,2,3,4 --tokens 128 --reps 3 \
        --threads "$T" --label kjv-f16-draft
    "$@" "$BS" run --target "$TARGET" --draft "$DRAFT" --k 3 --adaptive --tokens 128 --reps 3 \
        --threads "$T" --label kjv-f16-draft-adaptive
    "$@" "$BS" run --target "$TARGET" --draft "$TMP/kjv-draft-q8_0.gguf" --k 2,3 --tokens 128 \
        --reps 3 --threads "$T" --label kjv-q8_0-draft
done

# (b) synthetic ~110M target (llama2.c stories110M's shape), truncated drafts.
[ "${SYNTH:-1}" = 0 ] && exit 0
"$MW" synth -o "$TMP/s110.gguf" --dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048 \
    --vocab 32000 --ctx 1024 --type f32 --seed 7 >/dev/null
"$@" "$BS" cost --model "$TMP/s110.gguf" --reps 1
for L in 2 6; do
    "$BS" derive "$TMP/s110.gguf" "$TMP/s110-l$L.gguf" --layers $L
    "$@" "$BS" run --target "$TMP/s110.gguf" --draft "$TMP/s110-l$L.gguf" --k 2 --tokens 16 \
        --reps 1 --label "synth110m-f32-trunc$L"
done
