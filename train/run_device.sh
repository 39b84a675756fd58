#!/usr/bin/env bash
# run_device.sh — the command the GPU machine runs: train, export, measure,
# then lay the results out for the trip back (the device tool returns at most
# 8 files of 16 MiB each from $OUT, so the target GGUF travels in pieces;
# join them with `cat target.gguf.part* > models/phasemark-kjv-target-q8_0.gguf`).
#
# Usage (repository root, corpus prepared by make_corpus.sh + prepare.py):
#   OUT=/some/dir train/run_device.sh [train.py options]
set -euo pipefail
out=${OUT:?set OUT to the directory that receives the results}
mkdir -p "$out"
work=$(mktemp -d)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
set -o pipefail
PYTHONUNBUFFERED=1 python3 train/train.py --out "$work" "$@" 2>&1 | tee "$out/train.log"
split -b 15M -d "$work/target.gguf" "$out/target.gguf.part"
cp "$work/draft.gguf" "$work/golden.json" "$work/stats.json" "$out/"
(cd "$work" && sha256sum target.gguf draft.gguf) >"$out/SHA256SUMS"
ls -l "$out"
