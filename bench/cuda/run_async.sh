#!/bin/bash
# run_async.sh — one device call for the async-copy Q8 decode kernel (issue
# #18's 0.8 of copy): builds for sm_90a, runs every CUDA test and
# test_split's cuda case at the default tuning (tests 1; 2 only the
# kernel tests), then the kernel, engine and greedy tests again with
# PHASEMARK_CUDA_MV_ASYNC=3 (every one-row Q8 product on the new kernel);
# then measures decode on synthetic 8B (`layers` layers) and 1B Q8_0 files
# written here, each configuration in its own process, alternating over
# the rounds:
#
#   - q8i: the register-fed kernel (mv_async 0);
#   - aS-bB: PHASEMARK_CUDA_MV_ASYNC=S stages a warp, B blocks an SM
#     (PHASEMARK_CUDA_MV_BLOCKS=B).
#
# Files to $OUT: misc.log, build.log, tests.log, tests_async.log,
# bench.jsonl (each line tagged with "run"), summary.txt.
#
# Usage: bench/cuda/run_async.sh [decode_tokens] [reps] [rounds] [layers] [tests]
#        (defaults 128 3 2 32 1; tests 0 skips them, 2 runs only the kernel tests)
set -u
tokens=${1:-128}
reps=${2:-3}
rounds=${3:-2}
layers=${4:-32}
with_tests=${5:-1}
# shellcheck source=bench/cuda/bench_lib.sh
. bench/cuda/bench_lib.sh
pm_bench_start out-async

B=build-async
stamp "configure (8B: $layers layers)"
pm_bench_writer "$B" || exit 1
M8="--dim 4096 --layers $layers --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --ctx 4096 --rope-base 500000"
M1="--dim 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --ctx 4096 --rope-base 500000 --tied"
pm_bench_synth "$B" "8b-q8_0 q8_0 $M8" "1b-q8_0 q8_0 $M1"
stamp "build"
targets=(bench_cuda_engine)
[ "$with_tests" != 0 ] && targets+=("${PM_DEVICE_TEST_TARGETS[@]}")
pm_bench_build "$B" "${targets[@]}" || exit 1
stamp "built"
export PHASEMARK_REPO_MODELS=$PWD/models
if [ "$with_tests" = 1 ]; then
  pm_device_tests "$B" "$out/tests.log" | tee -a "$log"
  stamp "tests done"
elif [ "$with_tests" = 2 ]; then
  (cd "$B" && timeout 100 ctest --output-on-failure --timeout 90 -j6 -R '^cuda\.kernels\.') \
    > "$out/tests.log" 2>&1
  grep -E 'tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run' "$out/tests.log" | tee -a "$log"
fi
if [ "$with_tests" != 0 ]; then
  (cd "$B" && PHASEMARK_CUDA_MV_ASYNC=3 timeout 200 ctest --output-on-failure --timeout 150 -j6 \
     -R '^cuda\.(kernels|engine|greedy|loop|block|features)\.') > "$out/tests_async.log" 2>&1
  grep -E 'tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run' "$out/tests_async.log" |
    sed 's/^/MV_ASYNC=3: /' | tee -a "$log"
  stamp "tests with MV_ASYNC=3 done"
fi
pm_bench_synth_wait "$B"

exe=$B/bench/cuda/bench_cuda_engine
: > "$jsonl"
F8=$B/synth-8b-q8_0.gguf
F1=$B/synth-1b-q8_0.gguf
variants=("q8i 0 0" "a2-b2 2 2" "a3-b2 3 2" "a4-b2 4 2" "a3-b3 3 3" "a2-b4 2 4")
for round in $(seq 1 "$rounds"); do
  order=("${variants[@]}")
  if [ $((round % 2)) = 0 ]; then # the other order every second round
    order=()
    for ((i = ${#variants[@]} - 1; i >= 0; i--)); do order+=("${variants[$i]}"); done
  fi
  for v in "${order[@]}"; do
    read -r tag st nb <<< "$v"
    envs=(PHASEMARK_CUDA_MV_BLOCKS="$nb")
    [ "$st" != 0 ] && envs+=(PHASEMARK_CUDA_MV_ASYNC="$st")
    pm_bench "$tag" 90 "${envs[@]}" -- "$F8" 8b-q8 "$tokens" "$reps" 0 graph
    pm_bench "$tag" 60 "${envs[@]}" -- "$F1" 1b-q8 "$tokens" "$reps" 0 graph
  done
done

python3 bench/cuda/decode_summary.py "$jsonl" q8i > "$out/summary.txt" 2>> "$log"
cat "$out/summary.txt"
stamp "done"
