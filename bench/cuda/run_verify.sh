#!/bin/bash
# run_verify.sh — one device call for the verify's weight-stationary
# products (issues 16/17): builds the CUDA tests and bench_cuda_loop for
# sm_90a, runs the new exactness cases, then the device-loop bench twice in
# this same call (weight-stationary verify, then PHASEMARK_CUDA_VERIFY=rows,
# the per-row grid), then the loop/block/kernel/attention/seam test cases.
# Logs to $OUT, the bench's JSON lines to $OUT/loop (loop.stationary.jsonl,
# loop.rows.jsonl).
#
#   bash bench/cuda/run_verify.sh
#
# Knobs: PM_VERIFY_BUILD (build-verify), TOKENS (128), REPS (2), KS (2,4),
# BLOCK_KS (4,6,8,16), PM_VERIFY_CTEST=0 skips the ctest pass.
set -u
out=${OUT:-$PWD/out-verify}
mkdir -p "$out"
B=${PM_VERIFY_BUILD:-build-verify}
export PHASEMARK_REPO_MODELS=$PWD/models
# shellcheck source=bench/cuda/device_configure.sh
. bench/cuda/device_configure.sh
start=$(date +%s)
: > "$out/build.log"
pm_device_configure "$B" "$out/build.log" -DPHASEMARK_WERROR=ON ||
  { tail -40 "$out/build.log"; exit 1; }
cmake --build "$B" -j"$(nproc)" --target test_cuda_loop test_cuda_loop_ranges test_cuda_kernels \
  test_cuda_attention test_cuda_seam test_cuda_block test_cuda_greedy test_cuda_engine bench_cuda_loop \
  >> "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
t=$B/tests/cuda
for c in "test_cuda_loop rows_stationary" "test_cuda_loop rows_bits" \
         "test_cuda_attention verify_rows" "test_cuda_seam seam_kernel_switches"; do
  set -- $c
  timeout 120 "$t/$1" "$2" > "$out/$1.$2.log" 2>&1
  rc=$?
  echo "$1 $2 rc=$rc"
  [ $rc -ne 0 ] && tail -8 "$out/$1.$2.log"
done
OUT=$out/loop PM_LOOP_BUILD=$B PM_LOOP_TESTS=0 VERIFY_MODES="stationary rows" KS=${KS:-2,4} \
  BLOCK_KS=${BLOCK_KS:-4,6,8,16} TOKENS=${TOKENS:-128} REPS=${REPS:-2} \
  bash bench/cuda/run_loop.sh > "$out/run_loop.log" 2>&1
grep -E 'bench rc|verify products' "$out/run_loop.log"
grep -h '"costs"' "$out"/loop/loop.*.jsonl
if [ "${PM_VERIFY_CTEST:-1}" != 0 ]; then
  (cd "$B" && timeout 300 ctest -R 'cuda\.(loop|block|kernels|attention|seam)' \
     --output-on-failure --timeout 200 -j4) > "$out/ctest.log" 2>&1
  grep -E 'tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run' "$out/ctest.log"
fi
echo "total: $(( $(date +%s) - start )) s"
