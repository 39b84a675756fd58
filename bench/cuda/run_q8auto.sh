#!/bin/bash
# run_q8auto.sh — one device call for two open questions of issue #18:
#
#   1. the per-product Q8 batch shape (PHASEMARK_CUDA_Q8=int8auto, tuning
#      q8_int8 4: the 2 KB batch where it runs every row pair of a product
#      in one round, the 8B q/k/v) against the default 4 KB batch, on a
#      synthetic 8B-wide Q8_0 file of `layers` layers written here by
#      pm-modelwriter, `rounds` rounds of default / int8auto alternating,
#      each configuration in its own process; first the bit test
#      cuda.loop.q8_auto_bits and the seam switches;
#   2. nvcc --split-compile: cuda_matmul.cu compiled serially and split,
#      timed, and their SASS compared (cuobjdump -sass, addresses and
#      the file name dropped), so PHASEMARK_CUDA_SPLIT_COMPILE can be
#      turned on for the device builds if the code is the same.
#
# Files to $OUT: misc.log, build.log, tests.log, bench.jsonl (each line
# tagged with "run"), summary.txt, sass.txt.
#
# Usage: bench/cuda/run_q8auto.sh [decode_tokens] [reps] [rounds] [layers]
#        (defaults 64 3 3 8; layers 32 is the 8B model)
set -u
tokens=${1:-64}
reps=${2:-3}
rounds=${3:-3}
layers=${4:-8}
# shellcheck source=bench/cuda/bench_lib.sh
. bench/cuda/bench_lib.sh
pm_bench_start out-q8auto

B=build-q8auto
stamp "configure (8B width, $layers layers)"
pm_bench_writer "$B" || exit 1
cmake "$B" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >> "$out/build.log" 2>&1
M8="--dim 4096 --layers $layers --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --ctx 4096 --rope-base 500000"
pm_bench_synth "$B" "8b-q8_0 q8_0 $M8"
stamp "build"
pm_bench_build "$B" bench_cuda_engine test_cuda_loop test_cuda_seam || exit 1
stamp "built"
export PHASEMARK_REPO_MODELS=$PWD/models
(cd "$B" && timeout 120 ctest --output-on-failure --timeout 100 \
   -R '^cuda\.(loop\.q8_auto_bits|seam\.seam_kernel_switches)$') > "$out/tests.log" 2>&1
grep -E 'tests passed|tests failed|\(Failed\)|Not Run' "$out/tests.log" | tee -a "$log"

# The split compile check while the file is written: the build's own
# command for cuda_matmul.cu, to two objects, serial and split.
cmd=$(python3 - "$B/compile_commands.json" <<'PY'
import json, sys
for e in json.load(open(sys.argv[1])):
    if e["file"].endswith("cuda_matmul.cu"):
        print(e["directory"] + "\t" + e["command"])
PY
)
dir=${cmd%%$'\t'*}
cc=${cmd#*$'\t'}
if [ -n "$cc" ]; then
  for mode in serial split; do
    extra=""
    [ "$mode" = split ] && extra="--split-compile=0"
    s0=$(date +%s)
    obj=$PWD/$B/mm_$mode.o
    (cd "$dir" && eval "${cc% -o *} -o $obj $extra") >> "$log" 2>&1
    stamp "cuda_matmul.cu $mode rc=$? in $(( $(date +%s) - s0 )) s"
  done
  CUOBJ=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
  for mode in serial split; do
    "$CUOBJ" -sass "$B/mm_$mode.o" 2>> "$log" |
      sed -E 's#/\*[0-9a-f]{4}\*/##; s#^\s+##; /^$/d; /[Ff]ile/d' > "$B/mm_$mode.sass"
  done
  {
    echo "serial: $(grep -c 'Function :' "$B/mm_serial.sass") functions, $(wc -l < "$B/mm_serial.sass") lines"
    echo "split:  $(grep -c 'Function :' "$B/mm_split.sass") functions, $(wc -l < "$B/mm_split.sass") lines"
    if cmp -s "$B/mm_serial.sass" "$B/mm_split.sass"; then echo "SASS identical"; else
      echo "SASS differs: $(diff "$B/mm_serial.sass" "$B/mm_split.sass" | grep -c '^[<>]') lines"; fi
  } | tee "$out/sass.txt" | tee -a "$log"
fi
pm_bench_synth_wait "$B"

exe=$B/bench/cuda/bench_cuda_engine
: > "$jsonl"
F8=$B/synth-8b-q8_0.gguf
for round in $(seq 1 "$rounds"); do
  pm_bench "u4" 60 -- "$F8" 8b-q8 "$tokens" "$reps" 0 graph
  pm_bench "auto" 60 PHASEMARK_CUDA_Q8=int8auto -- "$F8" 8b-q8 "$tokens" "$reps" 0 graph
done
python3 bench/cuda/decode_summary.py "$jsonl" u4 > "$out/summary.txt" 2>> "$log"
cat "$out/summary.txt"
stamp "done"
