#!/bin/bash
# run_chain.sh — one device call for llm_cuda_matvec_chain (issue #18):
# builds for sm_90a, runs the kernel tests (matvec_chain: a chain's bits
# against its products launched one by one), then bench_cuda_chain on the
# 8B and 1B layer widths, 32 and 16 layers: a layer's o, gate/up and down
# one by one against one chain launch, graphs replayed alternately.
#
# Files to $OUT: misc.log, build.log, tests.log, bench.jsonl.
#
# Usage: bench/cuda/run_chain.sh [reps]     (default 20)
set -u
reps=${1:-20}
# shellcheck source=bench/cuda/bench_lib.sh
. bench/cuda/bench_lib.sh
pm_bench_start out-chain
B=build-chain
stamp "configure"
: > "$out/build.log"
pm_device_configure "$B" "$out/build.log" -DPHASEMARK_BENCH=ON || { tail -40 "$out/build.log"; exit 1; }
pm_bench_build "$B" test_cuda_kernels bench_cuda_chain || exit 1
stamp "built"
(cd "$B" && timeout 120 ctest --output-on-failure --timeout 100 -j6 -R '^cuda\.kernels\.') \
  > "$out/tests.log" 2>&1
grep -E 'tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run' "$out/tests.log" | tee -a "$log"
timeout 60 "$B/tests/cuda/test_cuda_kernels" matvec_chain >> "$out/tests.log" 2>&1
echo "matvec_chain alone: rc=$?" | tee -a "$log"
stamp "tests done"
: > "$out/bench.jsonl"
for round in 1 2; do
  timeout 120 "$B/bench/cuda/bench_cuda_chain" 32 "$reps" 4096 14336 >> "$out/bench.jsonl" 2>> "$log"
  stamp "8B round $round rc=$?"
  timeout 60 "$B/bench/cuda/bench_cuda_chain" 16 "$reps" 2048 8192 >> "$out/bench.jsonl" 2>> "$log"
  stamp "1B round $round rc=$?"
done
cat "$out/bench.jsonl"
stamp "done"
