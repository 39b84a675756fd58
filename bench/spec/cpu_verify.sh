#!/bin/sh
# cpu_verify.sh — what a verified row costs on the CPU (issue 17), the
# avx512 Q8_0 kernel's prefetch against its old distance (one tile ahead,
# PHASEMARK_ENGINE_PREFETCH=tile; the same bits), and what that does to
# the block drafter. Prints JSON lines (append them to
# bench/results/cpu_verify.jsonl).
#
#   bench/spec/cpu_verify.sh BUILD_DIR [WRAP...]
#
# 1. bench_spec widths --prefetch tile at THREADS and at 1 thread: a
#    decode and verifies of 1..17 rows, both distances taking turns in one
#    process (per width: ms, ratio to the arm's decode, per extra row).
# 2. bench_drafters on the held-out prompts (greedy, 128 tokens; plain and
#    speculative alternating per prompt in one process, so each speedup is
#    one run's ratio) for block 4, block 6, block cost<=16 and n-gram 4,
#    once per distance, the distances alternating over PASSES passes (a
#    process each: the kernel is chosen when the model opens). Each line
#    gets "arm" (default | tile) and "pass".
#
# N_PROMPTS (12), REPS (1), THREADS (2), PASSES (2), WIDTH_REPS (20) come
# from the environment. Quiet 2-core host: about 3 minutes.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [WRAP...]" >&2; exit 2; }
B=$1
shift
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TARGET=$SRC/models/phasemark-kjv-target-q8_0.gguf
HEAD=$SRC/models/phasemark-kjv-block-f16.gguf
THREADS=${THREADS:-2}
for f in "$TARGET" "$HEAD"; do
    [ -f "$f" ] || { echo "cpu_verify.sh: $f is missing" >&2; exit 1; }
done
uptime >&2
for th in "$THREADS" 1; do
    "$@" "$B/bench/spec/bench_spec" widths --model "$TARGET" --prefetch tile \
        --threads "$th" --reps "${WIDTH_REPS:-20}"
done
pass=1
while [ "$pass" -le "${PASSES:-2}" ]; do
    for arm in default tile; do
        if [ "$arm" = tile ]; then set_env="PHASEMARK_ENGINE_PREFETCH=tile"; else set_env="PHASEMARK_ENGINE_PREFETCH="; fi
        # shellcheck disable=SC2086
        env "$set_env" "$@" "$B/bench/spec/bench_drafters" --target "$TARGET" \
            --draft "$SRC/models/phasemark-kjv-draft-f16.gguf" --head "$HEAD" \
            --prompts "$SRC/bench/spec/heldout_prompts.tsv" --tokens 128 --seed 7 --temp 0 \
            --n-prompts "${N_PROMPTS:-12}" --threads "$THREADS" --reps "${REPS:-1}" \
            --config block:4 --config block:6 --config block:16:cost --config ngram:4 |
            sed "s/^{/{\"arm\":\"$arm\",\"pass\":$pass,/"
    done
    pass=$((pass + 1))
done
uptime >&2
