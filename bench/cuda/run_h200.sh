#!/bin/bash
# run_h200.sh — one device session for the CUDA backend: build (sm_90a), run
# every CUDA test (and the layer split's cuda span), compute-sanitizer
# memcheck over a subset of the tests, the benchmark and the transformers
# peer. Logs go to $OUT (the device tool's folder) or ./out-cuda.
#
# Usage: bench/cuda/run_h200.sh [all|tests|bench] [memcheck-filter]
# Env:   PHASEMARK_TEST_MODELS  folder holding stories260K.bin (optional)
#        PM_H200_BUILD          build folder (default build-h200)
#        PM_H200_PEER           0: skip the transformers peer
#
# The GPU machine lacks OpenBLAS, libmicrohttpd and jansson; the configure
# step is bench/cuda/device_configure.sh (an sgemm shim for the CPU
# reference, pkg-config stubs for the parts not built here).
set -u
what=${1:-all}
# sticky_error faults on purpose, so memcheck would flag it: left out.
mfilter=${2:-'^cuda\.kernels\.(matvec_fused|matvec_rope_store|matmul_acc|matvec_q8_0|gemm_q8_0|rope_qkv_store)$|^cuda\.attention\.|^cuda\.sample\.(argmax|sample_topp)$|^cuda\.seam\.|^cuda\.api\.(no_device_args|bad_args|reserve_limits)$|^cuda\.engine\.engine_(f32|q8_0)$'}
out=${OUT:-$PWD/out-cuda}
mkdir -p "$out"
B=${PM_H200_BUILD:-build-h200}
jobs=$(nproc)
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0))s] $*"; }
# shellcheck source=bench/cuda/device_configure.sh
. bench/cuda/device_configure.sh

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -2
} > "$out/env.txt" 2>&1

stamp configure
: > "$out/build.log"
pm_device_configure "$B" "$out/build.log" -DPHASEMARK_BENCH=ON ||
  { tail -40 "$out/build.log"; exit 1; }
targets=(test_cuda_kernels test_cuda_attention test_cuda_sample test_cuda_api test_cuda_seam
         test_cuda_engine bench_cuda_llama test_split)
stamp build
cmake --build "$B" -j"$jobs" --target "${targets[@]}" >> "$out/build.log" 2>&1 ||
  { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }
stamp built

export PHASEMARK_REPO_MODELS=$PWD/models
if [ "$what" = all ] || [ "$what" = tests ]; then
  (cd "$B" && ctest -R '^cuda\.' --output-on-failure --timeout 300 -j4) > "$out/tests.log" 2>&1
  stamp "tests: $(grep -E 'tests passed|tests failed' "$out/tests.log")"
  grep -hE "rel err|max err|near tie|greedy steps|graph replay|decode step|draws checked|FAIL|check failed" \
    "$B/Testing/Temporary/LastTest.log" > "$out/test_numbers.log" 2>/dev/null
  timeout 300 "$B/tests/split/test_split" cuda > "$out/split_cuda.log" 2>&1
  stamp "test_split cuda: rc=$? $(tail -2 "$out/split_cuda.log" | tr '\n' ' ')"
  # memcheck: every selected case under compute-sanitizer.
  : > "$out/memcheck.log"
  (cd "$B" && ctest -N -R "$mfilter" | sed -n 's/^ *Test *#[0-9]*: //p') | while read -r name; do
    exe=test_cuda_$(echo "$name" | cut -d. -f2)
    cas=$(echo "$name" | cut -d. -f3)
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 \
      "$B/tests/cuda/$exe" "$cas" > "$out/mc_one.log" 2>&1
    rc=$?
    echo "$name rc=$rc $(grep -E 'ERROR SUMMARY' "$out/mc_one.log" | tail -1)" >> "$out/memcheck.log"
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && tail -30 "$out/mc_one.log" >> "$out/memcheck.log"
  done
  rm -f "$out/mc_one.log"
  stamp "memcheck: $(grep -c 'rc=0 ' "$out/memcheck.log") clean of $(grep -c ' rc=' "$out/memcheck.log") cases"
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  "$B/bench/cuda/bench_cuda_llama" all 128 5 > "$out/bench.jsonl" 2>> "$out/errs.log"
  stamp "bench rc=$?"
  if [ "${PM_H200_PEER:-1}" != 0 ]; then
    PYTHONUNBUFFERED=1 timeout 240 python3 bench/cuda/peer_transformers.py all 64 3 \
      > "$out/peer.jsonl" 2>> "$out/errs.log"
    stamp "peer rc=$?"
  fi
  tail -5 "$out/errs.log"
fi
grep -v "rc=0 \|rc=77 " "$out/memcheck.log" 2>/dev/null | head -20
grep -E "FAIL|Failed|Exception" "$out/tests.log" 2>/dev/null | head -20
tail -30 "$out/test_numbers.log" 2>/dev/null
cat "$out/bench.jsonl" "$out/peer.jsonl" 2>/dev/null
true
