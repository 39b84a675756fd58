#!/usr/bin/env bash
# run_block_device.sh — the command the GPU machine runs for the block drafter
# head: build its data from the shipped target, train, export, measure, and
# lay out the results in $OUT (block.gguf, block-stats.json, the log).
#
# Usage (repository root; corpus prepared by make_corpus.sh + prepare.py):
#   OUT=/some/dir train/run_block_device.sh [train_block.py options]
# train_block.py writes straight into $OUT, each file as soon as it exists
# (head-state.npz, F16, when training ends; block.gguf; block-stats.json
# after every measure), so a run cut short still returns what it made.
set -euo pipefail
out=${OUT:?set OUT to the directory that receives the results}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
rc=0
PYTHONUNBUFFERED=1 python3 train/train_block.py --out "$out" "$@" 2>&1 | tee "$out/block-train.log" || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "run_block_device.sh: train_block.py failed ($rc)" >&2
    exit "$rc"
fi
(cd "$out" && sha256sum block.gguf) >"$out/SHA256SUMS"
ls -l "$out"
