#!/bin/bash
# run_device.sh — the layer-split benchmark and tests on a quiet host (the
# project's GPU machine: 16 idle cores, one H200), since the development VM
# is shared and loaded. Builds with the CUDA backend so that the
# heterogeneous cpu + cuda:0 placement is tested too; the benchmark is
# pinned to two cores (taskset -c 2,3) like bench/results/engine.md.
# Logs go to $OUT (the device tool's folder) or ./out-split.
set -u
out=${OUT:-$PWD/out-split}
mkdir -p "$out"
B=build-split-dev
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0))s] $*"; }

blas_args=()
if ! pkg-config --exists openblas 2>/dev/null &&
   ! ls /usr/include/*/openblas*/cblas.h /usr/include/openblas/cblas.h >/dev/null 2>&1; then
  mkdir -p $B/shim
  gcc -O2 -fPIC -c bench/cuda/device/cblas_shim.c -o $B/shim/cblas_shim.o &&
    ar rcs $B/shim/libopenblas.a $B/shim/cblas_shim.o
  blas_args=(-DPM_CBLAS_INCLUDE="$PWD/bench/cuda/device" -DPM_OPENBLAS_LIB="$PWD/$B/shim/libopenblas.a")
fi
mkdir -p $B/pcstub
for mod in libmicrohttpd jansson; do
  pkg-config --exists $mod 2>/dev/null ||
    printf 'Name: %s\nDescription: stub\nVersion: 0\nCflags:\nLibs:\n' $mod > $B/pcstub/$mod.pc
done
export PKG_CONFIG_PATH=$PWD/$B/pcstub${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}

cuda=ON
command -v nvcc >/dev/null || cuda=OFF
stamp "configure (cuda $cuda)"
cmake -S . -B $B -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DPHASEMARK_CUDA=$cuda -DPHASEMARK_BENCH=ON "${blas_args[@]}" > "$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; exit 1; }
cmake --build $B -j"$(nproc)" --target test_split pm-shardd bench_split phasemark_cli \
  phasemark_recorder >> "$out/build.log" 2>&1 ||
  { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }
stamp built

if [ "${1:-all}" != bench ]; then
  (cd $B && ctest -R '^split_' --output-on-failure --timeout 120 -j8) > "$out/tests.log" 2>&1
  stamp "tests: $(grep -E 'tests passed|tests failed' "$out/tests.log")"
  $B/tests/split/test_split cuda > "$out/cuda.log" 2>&1
  stamp "cuda span: rc=$? $(tail -2 "$out/cuda.log" | tr '\n' ' ')"
fi
if [ "${1:-all}" != tests ]; then
  lscpu | grep -E "Model name|^CPU\(s\)" > "$out/env.txt"
  taskset -c 2,3 $B/bench/split/bench_split --reps 7 --tokens 64 --threads 2 \
    --types q8_0,f32 > "$out/split.jsonl" 2> "$out/bench.err"
  stamp "bench rc=$?"
  cat "$out/split.jsonl"
fi
