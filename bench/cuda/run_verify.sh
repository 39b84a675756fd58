#!/bin/bash
# run_verify.sh — one device call for the verify's weight-stationary
# products (issues 16/17): builds the CUDA tests and bench_cuda_loop for
# sm_90a, runs the new exactness cases, then the device-loop bench twice in
# this same call (PHASEMARK_CUDA_VERIFY=stationary, the weight-stationary
# verify, then =rows, the per-row grid), then the loop/block/kernel test
# cases (the loop's parity cases once more with the stationary verify).
# Four files come back in $OUT: verify.log (every step's summary), loop.stationary.jsonl,
# loop.rows.jsonl (the bench's rows, each starting with its "verify" mode)
# and ctest.log; the rest stays in $WORK (/tmp/verify-work).
#
#   bash bench/cuda/run_verify.sh
#
# Knobs: PM_VERIFY_BUILD (build-verify), TOKENS (128), REPS (2), KS (2,4),
# BLOCK_KS (4,6,8,16), PM_VERIFY_CTEST=0 skips the ctest pass,
# PM_VERIFY_SECONDS (560) the call's length the ctest pass fits into.
set -u
out=${OUT:-$PWD/out-verify}
work=${WORK:-/tmp/verify-work}
mkdir -p "$out" "$work"
log=$out/verify.log
B=${PM_VERIFY_BUILD:-build-verify}
export PHASEMARK_REPO_MODELS=$PWD/models
say() { echo "$@" | tee -a "$log"; }
# shellcheck source=bench/cuda/device_configure.sh
. bench/cuda/device_configure.sh
start=$(date +%s)
: > "$work/build.log"
pm_device_configure "$B" "$work/build.log" -DPHASEMARK_WERROR=ON ||
  { tail -40 "$work/build.log" | tee -a "$log"; exit 1; }
cmake --build "$B" -j"$(nproc)" --target test_cuda_loop test_cuda_loop_ranges test_cuda_kernels \
  test_cuda_attention test_cuda_seam test_cuda_block test_cuda_greedy test_cuda_engine bench_cuda_loop \
  >> "$work/build.log" 2>&1 || { grep -E "error" "$work/build.log" | head -40 | tee -a "$log"; exit 1; }
say "build: $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tee -a "$log"
t=$B/tests/cuda
for c in "test_cuda_loop rows_stationary" "test_cuda_loop rows_bits" \
         "test_cuda_attention verify_rows" "test_cuda_seam seam_kernel_switches"; do
  set -- $c
  timeout 120 "$t/$1" "$2" > "$work/$1.$2.log" 2>&1
  rc=$?
  say "$1 $2 rc=$rc"
  [ $rc -ne 0 ] && tail -8 "$work/$1.$2.log" | tee -a "$log"
done
# The block and model rows (with the costs row) of both modes first, then
# the n-gram rows of both: a call cut short still has the pairs that
# matter most. Each mode's rows are appended to $OUT/loop.<mode>.jsonl.
for part in block ngram; do
  for mode in stationary rows; do
    if [ $part = block ]; then sel=(BLOCK_ONLY=1); else sel=(NGRAM_ONLY=1 HEAD=); fi
    env OUT="$work/loop-$part-$mode" PM_LOOP_BUILD="$B" PM_LOOP_TESTS=0 VERIFY_MODES=$mode \
      KS="${KS:-2,4}" BLOCK_KS="${BLOCK_KS:-4,6,8,16}" TOKENS="${TOKENS:-128}" \
      REPS="${REPS:-2}" "${sel[@]}" bash bench/cuda/run_loop.sh > "$work/run_loop.$part.$mode.log" 2>&1
    cat "$work/loop-$part-$mode/loop.$mode.jsonl" >> "$out/loop.$mode.jsonl" 2>/dev/null
    say "$part rows, $mode products:"
    grep -E 'bench rc|error|refus' "$work/run_loop.$part.$mode.log" | tee -a "$log"
    grep -h '"costs"' "$work/loop-$part-$mode/loop.$mode.jsonl" 2>/dev/null | tee -a "$log"
  done
done
# The ctest pass gets what is left of PM_VERIFY_SECONDS (default 560) of
# this call, so that its summary still comes back.
left=$(( ${PM_VERIFY_SECONDS:-560} - ($(date +%s) - start) ))
if [ "${PM_VERIFY_CTEST:-1}" != 0 ] && [ $left -gt 20 ]; then
  say "ctest: $left s left"
  # The loop's parity cases with the weight-stationary verify, then all.
  (cd "$B" && PHASEMARK_CUDA_VERIFY=stationary timeout $(( left / 2 )) ctest \
     -R 'cuda\.(loop\.(plain|spec|ngram|stops)|block\.loop)' --output-on-failure --timeout 100 -j4
   timeout $(( left / 2 - 5 )) ctest -R 'cuda\.(loop|block|kernels)' --output-on-failure \
     --timeout 200 -j4) > "$out/ctest.log" 2>&1
  grep -E 'tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Passed|\*\*\*' "$out/ctest.log" |
    tee -a "$log"
fi
say "total: $(( $(date +%s) - start )) s"
