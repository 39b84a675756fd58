#!/bin/bash
# run_kq4.sh — one device call for the grouped Q4_K decode kernel (issue
# 19): builds for sm_90a, runs the kernel and seam tests and the Q4_K_M
# engine case, then measures decode on synthetic 8B-wide files written here
# by pm-modelwriter (Q4_K_M and, for the copy-bandwidth reference, Q8_0;
# `layers` layers), each configuration in its own process, alternating
# over `rounds`:
#
#   - PHASEMARK_CUDA_KQ_LAYOUT=grouped (the default: one batch a lane) and
#     grouped2 (two batches a lane);
#   - with BASE_DIR (a directory holding another cuda_matmul.cu and
#     cuda_ctx.cu, e.g. the commit before a kernel change:
#       mkdir .kqbase && for f in cuda_matmul.cu cuda_ctx.cu; do
#         git show REV:src/engine/backends/cuda/$f > .kqbase/$f; done
#     untracked, so it travels to the device), the same tree with those
#     two files, built beside this one, as run "base";
#   - with ncu 1, Nsight Compute's time and DRAM bytes of the
#     matrix-vector kernels of one Q4_K_M decode step per layout (ncu.csv;
#     kernels serialized), and its full section set (stall reasons,
#     memory, occupancy) for the grouped Q4_K kernels of one layer
#     (ncu_full.csv).
#
# Files to $OUT: misc.log, build.log, tests.log, bench.jsonl (each line
# tagged with "run"), summary.txt, ncu.csv.
#
# Usage: bench/cuda/run_kq4.sh [decode_tokens] [reps] [rounds] [layers] [tests] [ncu] [BASE_DIR]
#        (defaults 64 3 2 8 1 1)
set -u
tokens=${1:-64}
reps=${2:-3}
rounds=${3:-2}
layers=${4:-8}
with_tests=${5:-1}
with_ncu=${6:-1}
base_dir=${7:-}
# shellcheck source=bench/cuda/bench_lib.sh
. bench/cuda/bench_lib.sh
pm_bench_start out-kq4

B=build-kq4
stamp "configure (8B width, $layers layers)"
pm_bench_writer "$B" || exit 1
M8="--dim 4096 --layers $layers --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --ctx 4096 --rope-base 500000"
pm_bench_synth "$B" "8b-q4_k_m q4_K_M $M8" "8b-q8_0 q8_0 $M8"
base_pid=
if [ -n "$base_dir" ]; then
  BT=/tmp/kq4-base
  rm -rf "$BT" && mkdir -p "$BT"
  tar --exclude="./build*" --exclude="./out*" -cf - . | (cd "$BT" && tar xf -)
  cp "$base_dir"/cuda_matmul.cu "$base_dir"/cuda_ctx.cu "$BT/src/engine/backends/cuda/"
  ( cd "$BT" && pm_device_configure bb "$out/build-base.log" -DPHASEMARK_BENCH=ON \
      -DPHASEMARK_CUDA_SPLIT_COMPILE=ON &&
    cmake --build bb -j"$jobs" --target bench_cuda_engine >> "$out/build-base.log" 2>&1
    echo "base build rc=$?" >> "$log" ) &
  base_pid=$!
fi
stamp "build"
cmake -S . -B "$B" -DPHASEMARK_CUDA_SPLIT_COMPILE=ON >> "$out/build.log" 2>&1
targets=(bench_cuda_engine)
[ "$with_tests" = 1 ] && targets+=(test_cuda_kernels test_cuda_seam test_cuda_engine)
pm_bench_build "$B" "${targets[@]}" || exit 1
stamp "built"
[ "$with_tests" = 1 ] &&
  pm_bench_ctest "$B" 200 '^cuda\.(kernels|seam)\.|^cuda\.engine\.engine_(q4_k_m|q5_k_m|q3_k_m)$'
stamp "tests done"
[ -n "$base_pid" ] && wait "$base_pid"
stamp "base built: $(grep 'base build' "$log")"
pm_bench_synth_wait "$B"

exe=$B/bench/cuda/bench_cuda_engine
: > "$jsonl"
F4=$B/synth-8b-q4_k_m.gguf
F8=$B/synth-8b-q8_0.gguf
for round in $(seq 1 "$rounds"); do
  for v in grouped grouped2; do
    pm_bench "$v" 90 PHASEMARK_CUDA_KQ_LAYOUT="$v" -- "$F4" 8b-q4km "$tokens" "$reps" 0 graph
  done
  if [ -n "$base_dir" ] && [ -x "$BT/bb/bench/cuda/bench_cuda_engine" ]; then
    exe=$BT/bb/bench/cuda/bench_cuda_engine
    pm_bench base 90 PHASEMARK_CUDA_KQ_LAYOUT=grouped -- "$F4" 8b-q4km "$tokens" "$reps" 0 graph
    exe=$B/bench/cuda/bench_cuda_engine
  fi
  [ "$round" = 1 ] && pm_bench q8 90 -- "$F8" 8b-q8 "$tokens" "$reps" 0 graph
done
if [ "$with_ncu" = 1 ]; then
  n=$((4 * layers + 1))
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  runs=("grouped $exe" "grouped2 $exe")
  [ -n "$base_dir" ] && runs+=("base $BT/bb/bench/cuda/bench_cuda_engine")
  for r in "${runs[@]}"; do
    read -r tag x <<< "$r"
    lay=$tag
    [ "$tag" = base ] && lay=grouped
    PHASEMARK_CUDA_KQ_LAYOUT=$lay timeout 90 "$NCU" --clock-control none -k regex:matvec_ \
      --launch-skip $((8 * n)) --launch-count "$n" --csv \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      "$x" "$F4" "q4km-$tag" 8 1 0 graph 2>> "$log" | sed "s/^/$tag,/" >> "$out/ncu.csv"
    stamp "ncu $tag rc=${PIPESTATUS[0]}"
  done
  timeout 120 "$NCU" --clock-control none --set full -k regex:matvec_kq4g_kernel \
    --launch-skip 40 --launch-count 4 --csv --page details \
    "$exe" "$F4" q4km-full 4 1 0 graph > "$out/ncu_full.csv" 2>> "$log"
  stamp "ncu full rc=$?"
fi
python3 bench/cuda/decode_summary.py "$jsonl" grouped > "$out/summary.txt" 2>> "$log"
cat "$out/summary.txt"
stamp "done"
