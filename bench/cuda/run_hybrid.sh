#!/bin/bash
# run_hybrid.sh — one device call for the device loop's hybrid rounds and
# the verify's automatic choice of products (issues 16/17): builds every
# CUDA test and bench_cuda_loop for sm_90a, runs the new cases first, then
# bench_cuda_loop twice on the shipped KJV pair and head (block, hybrid and
# model rows with the costs row; then the n-gram rows), then the whole
# cuda.* suite and test_split's cuda case in the time left. Files in $OUT:
# hybrid.log (every step's summary), loop_block.jsonl, loop_ngram.jsonl,
# tests.log.
#
#   bash bench/cuda/run_hybrid.sh
#
# Knobs: PM_HYBRID_BUILD (build-hybrid), TOKENS (128), REPS (2),
# BLOCK_KS (4,6,8), HYBRID_KS (4,6,8), PM_HYBRID_SECONDS (570): the call's
# length the suite fits into.
set -u
out=${OUT:-$PWD/out-hybrid}
mkdir -p "$out"
log=$out/hybrid.log
B=${PM_HYBRID_BUILD:-build-hybrid}
export PHASEMARK_REPO_MODELS=$PWD/models
say() { echo "$@" | tee -a "$log"; }
# shellcheck source=bench/cuda/device_configure.sh
. bench/cuda/device_configure.sh
start=$(date +%s)
: > "$out/build.log"
pm_device_configure "$B" "$out/build.log" -DPHASEMARK_WERROR=ON -DPHASEMARK_BENCH=ON ||
  { tail -40 "$out/build.log" | tee -a "$log"; exit 1; }
cmake --build "$B" -j"$(nproc)" --target "${PM_DEVICE_TEST_TARGETS[@]}" bench_cuda_loop \
  >> "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -40 | tee -a "$log"; exit 1; }
say "build: $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tee -a "$log"
t=$B/tests/cuda
for c in "test_cuda_block loop_hybrid" "test_cuda_loop_ranges ranges_hybrid" \
         "test_cuda_seam seam_kernel_switches" "test_cuda_block refusals"; do
  set -- $c
  timeout 150 "$t/$1" "$2" > "$out/$1.$2.log" 2>&1
  rc=$?
  say "$1 $2 rc=$rc"
  grep -E "hybrid|FAIL|fail" "$out/$1.$2.log" | head -12 | tee -a "$log"
done
bench=$B/bench/cuda/bench_cuda_loop
common=(--target models/phasemark-kjv-target-q8_0.gguf --draft models/phasemark-kjv-draft-f16.gguf
        --prompts bench/spec/heldout_prompts.tsv --tokens "${TOKENS:-128}" --reps "${REPS:-2}"
        --n-prompts 24 --temp 0.7 --seed 7)
s0=$(date +%s)
timeout 200 "$bench" "${common[@]}" --k 2 --head models/phasemark-kjv-block-f16.gguf \
  --block-k "${BLOCK_KS:-4,6,8}" --hybrid-k "${HYBRID_KS:-4,6,8}" --block-only 1 \
  > "$out/loop_block.jsonl" 2> "$out/bench_block.err"
say "bench block/hybrid rc=$? in $(( $(date +%s) - s0 )) s"
tail -3 "$out/bench_block.err" | tee -a "$log"
s0=$(date +%s)
timeout 120 "$bench" "${common[@]}" --ngram-only 1 > "$out/loop_ngram.jsonl" 2> "$out/bench_ngram.err"
say "bench ngram rc=$? in $(( $(date +%s) - s0 )) s"
tail -3 "$out/bench_ngram.err" | tee -a "$log"
python3 - "$out/loop_block.jsonl" "$out/loop_ngram.jsonl" <<'PY' | tee -a "$log"
import json, sys
for f in sys.argv[1:]:
    for line in open(f):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("mode") == "costs":
            print("costs", json.dumps(r["us"]))
            continue
        print("%-19s %-7s k=%-2d T=%.1f plain %8.1f spec %8.1f  %.3fx acc %.3f tpr %.2f "
              "ngram %d/%d %s %s" % (r["mode"], r["drafter"], r["k"], r["temperature"],
              r["plain_tok_s"], r["spec_tok_s"], r["speedup"], r["acceptance"],
              r["tokens_per_round"], r.get("ngram_rounds", 0), r["rounds"], r.get("verify"),
              r["parity"]))
PY
left=$(( ${PM_HYBRID_SECONDS:-570} - ($(date +%s) - start) ))
say "suite: $left s left"
if [ $left -gt 60 ]; then
  (cd "$B" && timeout $(( left - 30 )) ctest -R '^cuda\.' --output-on-failure --timeout 150 -j4) \
    > "$out/tests.log" 2>&1
  grep -E 'tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run' "$out/tests.log" | tee -a "$log"
  left=$(( ${PM_HYBRID_SECONDS:-570} - ($(date +%s) - start) ))
  if [ $left -gt 25 ]; then
    timeout $(( left - 5 )) "$B/tests/split/test_split" cuda >> "$out/tests.log" 2>&1
    say "test_split cuda: rc=$?"
  fi
fi
say "total: $(( $(date +%s) - start )) s"
