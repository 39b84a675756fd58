#!/bin/bash
# run_hybrid.sh — one device call for the device loop's hybrid rounds and
# the verify's automatic choice of products (issues 16/17): builds every
# CUDA test and bench_cuda_loop for sm_90a, runs the new cases first, then
# bench_cuda_loop twice on the shipped KJV pair and head (block, hybrid and
# model rows with the costs row; then the n-gram rows), then the whole
# cuda.* suite and test_split's cuda case in the time left. With
# PM_HYBRID_NCU=1 (default), Nsight Compute times every kernel of the first
# block rounds (k = 8) and of the first plain steps before the suite, and
# the stall reasons of a verify's and a plain step's first layer.
# Files in $OUT: hybrid.log (every step's summary), loop_block.jsonl,
# loop_ngram.jsonl, ncu_spec.csv, ncu_decode.csv, ncu_vdetail.csv,
# ncu_ddetail.csv, tests.log; the rest in
# $WORK (/tmp/hybrid-work).
#
#   bash bench/cuda/run_hybrid.sh
#
# Knobs: PM_HYBRID_BUILD (build-hybrid), TOKENS (128), REPS (2),
# BLOCK_KS (4,6,8), HYBRID_KS (4,6,8), PM_HYBRID_SECONDS (570): the call's
# length the suite fits into.
set -u
out=${OUT:-$PWD/out-hybrid}
work=${WORK:-/tmp/hybrid-work}
mkdir -p "$out" "$work"
log=$out/hybrid.log
B=${PM_HYBRID_BUILD:-build-hybrid}
export PHASEMARK_REPO_MODELS=$PWD/models
say() { echo "$@" | tee -a "$log"; }
# shellcheck source=bench/cuda/device_configure.sh
. bench/cuda/device_configure.sh
start=$(date +%s)
pm_device_build "$B" "$work/build.log" bench_cuda_loop 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
say "build: $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tee -a "$log"
t=$B/tests/cuda
for c in "test_cuda_block loop_hybrid" "test_cuda_loop_ranges ranges_hybrid" \
         "test_cuda_seam seam_kernel_switches" "test_cuda_block refusals"; do
  set -- $c
  timeout 150 "$t/$1" "$2" > "$work/$1.$2.log" 2>&1
  rc=$?
  say "$1 $2 rc=$rc"
  grep -E "hybrid|FAIL|fail" "$work/$1.$2.log" | head -12 | tee -a "$log"
done
bench=$B/bench/cuda/bench_cuda_loop
common=(--target models/phasemark-kjv-target-q8_0.gguf --draft models/phasemark-kjv-draft-f16.gguf
        --prompts bench/spec/heldout_prompts.tsv --tokens "${TOKENS:-128}" --reps "${REPS:-2}"
        --n-prompts 24 --temp 0.7 --seed 7)
s0=$(date +%s)
timeout 200 "$bench" "${common[@]}" --k 2 --head models/phasemark-kjv-block-f16.gguf \
  --block-k "${BLOCK_KS:-4,6,8}" --hybrid-k "${HYBRID_KS:-4,6,8}" --block-only 1 \
  > "$out/loop_block.jsonl" 2> "$work/bench_block.err"
say "bench block/hybrid rc=$? in $(( $(date +%s) - s0 )) s"
tail -3 "$work/bench_block.err" | tee -a "$log"
s0=$(date +%s)
timeout 120 "$bench" "${common[@]}" --ngram-only 1 > "$out/loop_ngram.jsonl" 2> "$work/bench_ngram.err"
say "bench ngram rc=$? in $(( $(date +%s) - s0 )) s"
tail -3 "$work/bench_ngram.err" | tee -a "$log"
python3 bench/cuda/loop_summary.py "$out/loop_block.jsonl" "$out/loop_ngram.jsonl" | tee -a "$log"
# ncu NAME RANGE COUNT ARGS...: the kernels inside pm.RANGE ranges, the
# first COUNT of them, each one's duration, into $OUT/ncu_NAME.csv.
ncu_run() {
  local name=$1 range=$2 count=$3
  shift 3
  command -v ncu > /dev/null || { say "ncu: not found"; return; }
  PHASEMARK=nvtx timeout -k 5 90 ncu --nvtx --nvtx-include "regex:phasemark@pm\\.$range.*/" \
    --launch-count "$count" --clock-control none --metrics gpu__time_duration.sum --csv \
    --log-file "$out/ncu_$name.csv" "$bench" "$@" > "$work/ncu_$name.log" 2>&1
  say "ncu $name rc=$?: $(grep -c '"gpu__time_duration.sum"' "$out/ncu_$name.csv" 2> /dev/null) kernels"
}
if [ "${PM_HYBRID_NCU:-1}" = 1 ]; then
  short=(--target models/phasemark-kjv-target-q8_0.gguf --draft models/phasemark-kjv-draft-f16.gguf
         --prompts bench/spec/heldout_prompts.tsv --tokens 48 --reps 1 --n-prompts 1 --k 2
         --head models/phasemark-kjv-block-f16.gguf --block-k 8 --hybrid-k 8 --block-only 1)
  ncu_run spec spec_decode 240 "${short[@]}"
  ncu_run decode decode 120 "${short[@]}"
  # Why a verify row group's kernels take longer than the one-row ones:
  # the first verify's embedding and first layer (past the round's 13
  # head kernels), and a plain step's first layer, with stall reasons.
  for d in "vdetail spec_decode 13" "ddetail decode 1"; do
    set -- $d
    PHASEMARK=nvtx timeout -k 5 90 ncu --nvtx --nvtx-include "regex:phasemark@pm\\.$2.*/" \
      --launch-skip "$3" --launch-count 5 --clock-control none --section SpeedOfLight \
      --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
      --csv --page details --log-file "$out/ncu_$1.csv" "$bench" "${short[@]}" \
      > "$work/ncu_$1.log" 2>&1
    say "ncu $1 rc=$?"
  done
  python3 - "$out/ncu_spec.csv" "$out/ncu_decode.csv" <<'PY' | tee -a "$log"
import csv, sys, collections
for f in sys.argv[1:]:
    try:
        rows = [r for r in csv.reader(l for l in open(f) if l.startswith('"'))]
    except OSError:
        continue
    if not rows:
        continue
    head = rows[0]
    ki, vi = head.index("Kernel Name"), head.index("Metric Value")
    ri = [i for i, h in enumerate(head) if "Push/Pop_Range" in h][0]
    agg = collections.OrderedDict()
    for r in rows[1:]:
        rng = r[ri]
        leaf = "draft" if "pm.draft" in rng else "verify" if "mode=verify" in rng else "decode"
        key = (leaf, r[ki].split("(")[0][:60])
        us = float(r[vi].replace(",", "")) / 1000.0
        a = agg.setdefault(key, [0, 0.0])
        a[0] += 1
        a[1] += us
    print("==", f.split("/")[-1])
    for (leaf, k), (n, us) in agg.items():
        print("%-7s %-60s n=%4d mean %7.2f us total %9.1f" % (leaf, k, n, us / n, us))
PY
fi
pm_device_suite_until "$B" "$out/tests.log" $(( start + ${PM_HYBRID_SECONDS:-570} )) | tee -a "$log"
say "total: $(( $(date +%s) - start )) s"
