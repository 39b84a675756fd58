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
cmake --build "$B" -j"$(nproc)" --target "${PM_DEVICE_TEST_TARGETS[@]}" >> "$out/build.log" 2>&1 ||
  { grep -E "error" "$out/build.log" | head -40; exit 1; }
pm_device_tests "$B" "$out/tests.log"
