#!/bin/bash
# run_tests.sh — one device call that builds for sm_90a and runs every CUDA
# test and the layer split's cuda case (no benchmarks); logs to $OUT.
set -u
out=${OUT:-$PWD/out-tests}
mkdir -p "$out"
B=${PM_TESTS_BUILD:-build-h200}
# shellcheck source=bench/cuda/device_configure.sh
. bench/cuda/device_configure.sh
: > "$out/build.log"
pm_device_configure "$B" "$out/build.log" -DPHASEMARK_BENCH=OFF || { tail -40 "$out/build.log"; exit 1; }
targets=(test_cuda_kernels test_cuda_attention test_cuda_sample test_cuda_api test_cuda_seam
         test_cuda_engine test_cuda_features test_cuda_greedy test_split pm-shardd)
cmake --build "$B" -j"$(nproc)" --target "${targets[@]}" >> "$out/build.log" 2>&1 ||
  { grep -E "error" "$out/build.log" | head -40; exit 1; }
export PHASEMARK_REPO_MODELS=$PWD/models
(cd "$B" && ctest -R '^cuda\.' --output-on-failure --timeout 240 -j4) > "$out/tests.log" 2>&1
grep -E 'tests passed|tests failed|Failed|\(Failed\)' "$out/tests.log"
grep -hE "max logit|near tie|FAIL|check failed|differ" "$B/Testing/Temporary/LastTest.log" \
  > "$out/details.log" 2>/dev/null
timeout 240 "$B/tests/split/test_split" cuda > "$out/split.log" 2>&1
echo "test_split cuda: rc=$?"
