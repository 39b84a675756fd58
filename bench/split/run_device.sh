#!/bin/bash
# run_device.sh — the layer-split benchmark and tests on a quiet host (the
# project's GPU machine: 16 idle cores, one H200), since the development VM
# is shared and loaded. Builds with the CUDA backend so that the
# heterogeneous cpu + cuda:0 placement is tested too; the benchmark is
# pinned to two cores (taskset -c 2,3) like bench/results/engine.md.
# Logs go to $OUT (the device tool's folder) or ./out-split. The configure
# step (sgemm shim without a system BLAS, pkg-config stubs for the parts not
# built) is bench/cuda/device_configure.sh.
set -u
out=${OUT:-$PWD/out-split}
mkdir -p "$out"
B=${PM_SPLIT_BUILD:-build-split-dev}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0))s] $*"; }

# shellcheck source=bench/cuda/device_configure.sh
. bench/cuda/device_configure.sh
cuda=ON
command -v nvcc >/dev/null || cuda=OFF
stamp "configure (cuda $cuda)"
: > "$out/build.log"
pm_device_configure "$B" "$out/build.log" -DPHASEMARK_CUDA=$cuda -DPHASEMARK_BENCH=ON ||
  { tail -40 "$out/build.log"; exit 1; }
cmake --build "$B" -j"$(nproc)" --target test_split test_spec_parity_split pm-shardd bench_split \
  phasemark_cli phasemark_recorder >> "$out/build.log" 2>&1 ||
  { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }
stamp built

if [ "${1:-all}" != bench ]; then
  (cd "$B" && ctest -R '^split_' --output-on-failure --timeout 120 -j8) > "$out/tests.log" 2>&1
  stamp "tests: $(grep -E 'tests passed|tests failed' "$out/tests.log")"
  "$B"/tests/split/test_split cuda > "$out/cuda.log" 2>&1
  stamp "cuda span: rc=$? $(tail -2 "$out/cuda.log" | tr '\n' ' ')"
fi
if [ "${1:-all}" != tests ]; then
  lscpu | grep -E "Model name|^CPU\(s\)" > "$out/env.txt"
  taskset -c 2,3 "$B"/bench/split/bench_split --reps 7 --tokens 64 --threads 2 \
    --types q8_0,f32 > "$out/split.jsonl" 2> "$out/bench.err"
  stamp "bench rc=$?"
  cat "$out/split.jsonl"
fi
