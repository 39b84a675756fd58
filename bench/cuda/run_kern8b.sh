#!/bin/bash
# run_kern8b.sh — one device call for the 8B-shape decode kernels
# (issues #18 and #19): builds for sm_90a, runs the kernel and seam tests
# and the k-quant engine cases, then measures decode on synthetic 8B-wide
# files written here by pm-modelwriter (Q4_K_M, Q8_0 and Q5_K_M, `layers`
# layers), each configuration in its own process:
#
#   - tuning mv_l2 (PHASEMARK_CUDA_MV_L2) 0 (default: a warp loads its
#     first batch before the dependency wait), 1 (it also asks L2 for its
#     whole first row pair there), 2 (and for its next pair at the start
#     of every pair) and 3 (its first two pairs, then two ahead), and
#     mv_blocks 1 (PHASEMARK_CUDA_MV_BLOCKS=1: one block a multiprocessor,
#     room for the next kernel's) with mv_l2 3, alternating over the
#     rounds, on the Q4_K_M and Q8_0 files (Q5_K_M in the first round);
#   - Q5_K_M on the re-quantization to Q8 (PHASEMARK_CUDA_KQ=requant, what
#     Q5_K ran on before its native layout) once, last;
#   - with ncu 1, Nsight Compute's time and DRAM bytes of the matrix-vector
#     kernels of one Q4_K_M and one Q5_K_M decode step at mv_l2 0 and 1
#     (ncu.csv; kernels serialized, so the dependent launches' overlap is
#     not in it). rounds 0 writes only the Q5_K_M file and runs only this.
#
# Files to $OUT: misc.log, build.log, tests.log, bench.jsonl (each line
# tagged with "run"), summary.txt, ncu.csv.
#
# Usage: bench/cuda/run_kern8b.sh [decode_tokens] [reps] [rounds] [layers] [tests] [ncu]
#        (defaults 64 3 2 8 1 0; tests 0 skips them; layers 32 is the 8B
#        model, about 3 minutes of writing the files; `0 3 0 8 0 1`: the
#        Nsight Compute lines of Q5_K_M alone)
set -u
tokens=${1:-64}
reps=${2:-3}
rounds=${3:-2}
layers=${4:-8}
with_tests=${5:-1}
with_ncu=${6:-0}
# shellcheck source=bench/cuda/bench_lib.sh
. bench/cuda/bench_lib.sh
pm_bench_start out-kern8b

B=build-kern8b
stamp "configure (8B width, $layers layers)"
pm_bench_writer "$B" || exit 1
M8="--dim 4096 --layers $layers --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --ctx 4096 --rope-base 500000"
if [ "$rounds" = 0 ]; then # Nsight Compute on the Q5_K_M file only
  pm_bench_synth "$B" "8b-q5_k_m q5_K_M $M8"
else
  pm_bench_synth "$B" "8b-q4_k_m q4_K_M $M8" "8b-q8_0 q8_0 $M8" "8b-q5_k_m q5_K_M $M8"
fi
stamp "build"
targets=(bench_cuda_engine)
[ "$with_tests" = 1 ] && targets+=(test_cuda_kernels test_cuda_seam test_cuda_engine)
pm_bench_build "$B" "${targets[@]}" || exit 1
stamp "built"
[ "$with_tests" = 1 ] &&
  pm_bench_ctest "$B" 150 '^cuda\.(kernels|seam)\.|^cuda\.engine\.engine_(warmup|q4_k_m|q5_k_m|q3_k_m)$'
stamp "tests done"
pm_bench_synth_wait "$B"

exe=$B/bench/cuda/bench_cuda_engine
: > "$jsonl"
F4=$B/synth-8b-q4_k_m.gguf
F8=$B/synth-8b-q8_0.gguf
F5=$B/synth-8b-q5_k_m.gguf
for round in $(seq 1 "$rounds"); do
  files=("$F4 8b-q4km" "$F8 8b-q8")
  [ "$round" = 1 ] && files+=("$F5 8b-q5km") # Q5_K_M once a variant
  for v in "l2-0 0 0" "l2-1 1 0" "l2-2 2 0" "l2-3 3 0" "b1-l2-3 3 1"; do
    read -r tag l2 nb <<< "$v"
    for f in "${files[@]}"; do
      read -r file label <<< "$f"
      pm_bench "$tag" 60 PHASEMARK_CUDA_MV_L2="$l2" PHASEMARK_CUDA_MV_BLOCKS="$nb" -- \
        "$file" "$label" "$tokens" "$reps" 0 graph
    done
  done
done
if [ "$with_ncu" = 1 ]; then
  n=$((4 * layers + 1))
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  ncu_files=("$F4 q4km" "$F5 q5km")
  [ "$rounds" = 0 ] && ncu_files=("$F5 q5km")
  for f in "${ncu_files[@]}"; do
    read -r file tag <<< "$f"
    for l2 in 0 1; do
      PHASEMARK_CUDA_MV_L2=$l2 timeout 60 "$NCU" --clock-control none -k regex:matvec_ \
        --launch-skip $((8 * n)) --launch-count "$n" --csv \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum \
        "$exe" "$file" "$tag-l2$l2" 8 1 0 graph 2>> "$log" | sed "s/^/$tag-l2$l2,/" >> "$out/ncu.csv"
      stamp "ncu $tag l2=$l2 rc=${PIPESTATUS[0]}"
    done
  done
fi
[ "$rounds" = 0 ] ||
  pm_bench "requant" 60 PHASEMARK_CUDA_KQ=requant -- "$F5" 8b-q5km "$tokens" "$reps" 0 graph

python3 bench/cuda/decode_summary.py "$jsonl" l2-0 > "$out/summary.txt" 2>> "$log"
cat "$out/summary.txt"
stamp "done"
