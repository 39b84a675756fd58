#!/bin/bash
# run_h200.sh — one device session for the CUDA backend: build (sm_90a), run
# every CUDA test, compute-sanitizer memcheck over the tests, the benchmark
# and the transformers peer. Logs go to $OUT (the device tool's folder) or
# ./out-cuda.
#
# Usage: bench/cuda/run_h200.sh [all|tests|bench] [memcheck-filter]
# Env:   PHASEMARK_TEST_MODELS  folder holding stories260K.bin (optional)
#
# The GPU machine has no BLAS; the engine's CPU backend (the reference the
# CUDA results are compared with) then links bench/cuda/device/cblas_shim.c,
# a plain fp32 sgemm, through the engine's own PM_OPENBLAS_LIB and
# PM_CBLAS_INCLUDE cache variables.
set -u
what=${1:-all}
# sticky_error faults on purpose, so memcheck would flag it: left out.
mfilter=${2:-'^cuda\.(kernels|attention|sample|seam)\.|^cuda\.api\.(no_device_args|bad_args|reserve_limits|weight_upload_types)$|^cuda\.engine\.engine_(f32|q8_0)$'}
out=${OUT:-$PWD/out-cuda}
mkdir -p "$out"
B=build-h200
jobs=$(nproc)
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0))s] $*"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv > "$out/env.txt" 2>&1
nvcc --version | tail -2 >> "$out/env.txt"

blas_args=()
if [ -n "${PM_FORCE_SHIM:-}" ] || { ! pkg-config --exists openblas 2>/dev/null &&
   ! ls /usr/include/*/openblas*/cblas.h /usr/include/openblas/cblas.h >/dev/null 2>&1; }; then
  mkdir -p $B/shim
  gcc -O2 -fPIC -c bench/cuda/device/cblas_shim.c -o $B/shim/cblas_shim.o &&
    ar rcs $B/shim/libopenblas.a $B/shim/cblas_shim.o
  blas_args=(-DPM_CBLAS_INCLUDE="$PWD/bench/cuda/device" -DPM_OPENBLAS_LIB="$PWD/$B/shim/libopenblas.a")
  echo "no system BLAS: using the sgemm shim" >> "$out/env.txt"
fi

# Parts of the tree this run does not build (the HTTP server, the model
# tests) require libraries the GPU machine lacks at configure time; stub
# pkg-config entries let the whole tree configure, and only the CUDA targets
# and what they link are built.
mkdir -p $B/pcstub
for mod in libmicrohttpd jansson; do
  if ! pkg-config --exists $mod 2>/dev/null; then
    printf 'Name: %s\nDescription: configure-time stub (not built here)\nVersion: 0\nCflags:\nLibs:\n' \
      $mod > $B/pcstub/$mod.pc
  fi
done
export PKG_CONFIG_PATH=$PWD/$B/pcstub${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}

stamp configure
cmake -S . -B $B -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DPHASEMARK_CUDA=ON -DPHASEMARK_BENCH=ON "${blas_args[@]}" > "$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; exit 1; }
targets="test_cuda_kernels test_cuda_attention test_cuda_sample test_cuda_api test_cuda_seam test_cuda_engine bench_cuda_llama"
stamp build
cmake --build $B -j"$jobs" --target $targets >> "$out/build.log" 2>&1 ||
  { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }
stamp built

export PHASEMARK_REPO_MODELS=$PWD/models
if [ "$what" = all ] || [ "$what" = tests ]; then
  (cd $B && ctest -R '^cuda\.' --output-on-failure --timeout 300 -j4) > "$out/tests.log" 2>&1
  stamp "tests: $(grep -E 'tests passed|tests failed' "$out/tests.log")"
  grep -hE "rel err|max err|near tie|greedy steps|graph replay|draws checked|FAIL|check failed" \
    "$B/Testing/Temporary/LastTest.log" > "$out/test_numbers.log" 2>/dev/null
  # memcheck: every selected case under compute-sanitizer.
  : > "$out/memcheck.log"
  (cd $B && ctest -N -R "$mfilter" | sed -n 's/^ *Test *#[0-9]*: //p') | while read -r name; do
    exe=test_cuda_$(echo "$name" | cut -d. -f2)
    cas=$(echo "$name" | cut -d. -f3)
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 \
      "$B/tests/cuda/$exe" "$cas" > "$out/mc_one.log" 2>&1
    rc=$?
    echo "$name rc=$rc $(grep -E 'ERROR SUMMARY' "$out/mc_one.log" | tail -1)" >> "$out/memcheck.log"
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && tail -30 "$out/mc_one.log" >> "$out/memcheck.log"
  done
  rm -f "$out/mc_one.log"
  stamp "memcheck: $(grep -c 'rc=0 ' "$out/memcheck.log") clean of $(wc -l < "$out/memcheck.log") lines"
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  $B/bench/cuda/bench_cuda_llama all 128 5 > "$out/bench.jsonl" 2>> "$out/errs.log"
  stamp "bench rc=$?"
  PYTHONUNBUFFERED=1 timeout 240 python3 bench/cuda/peer_transformers.py all 64 3 \
    > "$out/peer.jsonl" 2>> "$out/errs.log"
  stamp "peer rc=$?"
  tail -5 "$out/errs.log"
fi
cat "$out/memcheck.log" 2>/dev/null | grep -v "rc=0 \|rc=77 " | head -20
cat "$out/test_numbers.log" 2>/dev/null | tail -30
cat "$out/bench.jsonl" "$out/peer.jsonl" 2>/dev/null
