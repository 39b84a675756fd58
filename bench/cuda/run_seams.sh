#!/bin/bash
# run_seams.sh — one device call that measures the engine's CUDA forward
# before and after a change, side by side on one machine (issue #15: the
# forward rebuilt as backend blocks must not be slower).
#
# Builds this tree and an earlier one (a `git archive` of the commit to
# compare with, unpacked into $1) for sm_90a; writes synthetic bf16 GGUF
# files shaped like Llama-3.2-1B and Llama-3.1-8B with this tree's
# pm-modelwriter while the builds and this tree's CUDA tests run; then
# runs bench_cuda_engine on each file, alternating before/after, so that
# drift of the machine shows up in both. At most five files go to $OUT:
# misc.log, build.log, tests.log, bench.jsonl (each line tagged with
# "tree"), summary.txt.
#
# Usage: bench/cuda/run_seams.sh BEFORE_DIR [decode_tokens] [reps] [rounds]
set -u
before=${1:?usage: run_seams.sh BEFORE_DIR [decode_tokens] [reps] [rounds]}
tokens=${2:-128}
reps=${3:-3}
rounds=${4:-2}
out=${OUT:-$PWD/out-seams}
mkdir -p "$out"
jobs=$(nproc)
t0=$(date +%s)
log=$out/misc.log
stamp() { echo "[$(($(date +%s) - t0))s] $*" | tee -a "$log"; }
# shellcheck source=bench/cuda/device_configure.sh
. bench/cuda/device_configure.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv >> "$log" 2>&1

A=build-h200
: > "$out/build.log"
stamp "configure after"
pm_device_configure "$A" "$out/build.log" -DPHASEMARK_BENCH=ON || { tail -40 "$out/build.log"; exit 1; }
cmake --build "$A" -j"$jobs" --target pm-modelwriter >> "$out/build.log" 2>&1 ||
  { grep -E "error" "$out/build.log" | head -40; exit 1; }
MW=$A/tools/modelwriter/pm-modelwriter
(
  "$MW" synth -o "$A/synth-1b-bf16.gguf" --dim 2048 --layers 16 --heads 32 --kv-heads 8 \
    --ffn 8192 --vocab 128256 --ctx 4096 --type bf16 --seed 1 --tied --rope-base 500000 &&
  "$MW" synth -o "$A/synth-8b-bf16.gguf" --dim 4096 --layers 32 --heads 32 --kv-heads 8 \
    --ffn 14336 --vocab 128256 --ctx 4096 --type bf16 --seed 2 --rope-base 500000
  echo "synth rc=$? at $(($(date +%s) - t0))s" >> "$log"
) &
synth_pid=$!
stamp "build after"
targets=("${PM_DEVICE_TEST_TARGETS[@]}" bench_cuda_engine)
cmake --build "$A" -j"$jobs" --target "${targets[@]}" >> "$out/build.log" 2>&1 ||
  { grep -E "error" "$out/build.log" | head -40; exit 1; }
stamp "build before"
(
  cd "$before" &&
  pm_device_configure build-h200 "$out/build.log" -DPHASEMARK_BENCH=ON &&
  cmake --build build-h200 -j"$jobs" --target bench_cuda_engine >> "$out/build.log" 2>&1
) || { grep -E "error" "$out/build.log" | tail -40; exit 1; }
stamp built

pm_device_tests "$A" "$out/tests.log" | tee -a "$log"
stamp "tests done"

wait $synth_pid
stamp "synth done: $(ls -la "$A"/synth-*.gguf 2>&1 | awk '{print $5}' | tr '\n' ' ')"
: > "$out/bench.jsonl"
for r in $(seq 1 "$rounds"); do
  for tree in before after; do
    exe=$A/bench/cuda/bench_cuda_engine
    [ "$tree" = before ] && exe=$before/build-h200/bench/cuda/bench_cuda_engine
    for m in 1b 8b; do
      pre=0
      [ "$m" = 8b ] && pre=2048
      timeout 150 "$exe" "$A/synth-$m-bf16.gguf" "llama-$m" "$tokens" "$reps" "$pre" 2>> "$log" |
        sed "s/^{/{\"tree\":\"$tree\",\"round\":$r,/" >> "$out/bench.jsonl"
      stamp "round $r $tree $m rc=${PIPESTATUS[0]}"
    done
  done
done
python3 - "$out/bench.jsonl" > "$out/summary.txt" 2>> "$log" <<'PY'
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
acc = collections.defaultdict(list)
for r in rows:
    key = (r['bench'], r.get('model', ''), r.get('mode', r.get('argmax', '')))
    val = r.get('tokens_per_s') if r['bench'] != 'engine_prefill' else r.get('median_ms')
    if val is not None:
        acc[key + (r['tree'],)].append(val)
for key in sorted({k[:3] for k in acc}):
    b, a = acc.get(key + ('before',), []), acc.get(key + ('after',), [])
    if b and a:
        mb, ma = sorted(b)[len(b) // 2], sorted(a)[len(a) // 2]
        print(f"{key[0]:18s} {key[1]:9s} {key[2]:7s} before {mb:9.2f} after {ma:9.2f} "
              f"after/before {ma / mb:.3f}  (before {b}, after {a})")
PY
cat "$out/summary.txt"
stamp done
