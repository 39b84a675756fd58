#!/bin/bash
# run_seam.sh — one device session for the engine's fused CUDA decode step
# (issue #8): build for sm_90a, every CUDA test and the layer split's cuda
# span, the library benchmark (bench_cuda_llama) and the engine benchmark
# (bench_cuda_engine, with llm_generate's device vs host argmax) on synthetic bf16 GGUF files shaped like Llama-3.2-1B
# and Llama-3.1-8B, written on the machine by pm-modelwriter while the
# tests run; a short memcheck if time is left. At most six files go to
# $OUT (the device tool returns eight): misc.log, build.log, tests.log,
# bench.jsonl, summary.json, memcheck.log.
#
# Usage: bench/cuda/run_seam.sh [decode_tokens] [reps]
# Env:   PM_SEAM_BUILD   build folder (default build-h200)
#        PM_SEAM_BUDGET  seconds after which optional steps are skipped (480)
set -u
tokens=${1:-128}
reps=${2:-5}
out=${OUT:-$PWD/out-seam}
mkdir -p "$out"
B=${PM_SEAM_BUILD:-build-h200}
budget=${PM_SEAM_BUDGET:-480}
jobs=$(nproc)
t0=$(date +%s)
log=$out/misc.log
stamp() { echo "[$(($(date +%s) - t0))s] $*" | tee -a "$log"; }
# shellcheck source=bench/cuda/device_configure.sh
. bench/cuda/device_configure.sh

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -2
  df -h . | tail -1
} >> "$log" 2>&1

stamp configure
: > "$out/build.log"
pm_device_configure "$B" "$out/build.log" -DPHASEMARK_BENCH=ON ||
  { tail -40 "$out/build.log"; exit 1; }
cmake --build "$B" -j"$jobs" --target pm-modelwriter >> "$out/build.log" 2>&1 ||
  { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }
# The model files: single-threaded generation, written while the rest
# builds and the tests run (8B bf16 is about 16 GB).
MW=$B/tools/modelwriter/pm-modelwriter
(
  "$MW" synth -o "$B/synth-1b-bf16.gguf" --dim 2048 --layers 16 --heads 32 --kv-heads 8 \
    --ffn 8192 --vocab 128256 --ctx 4096 --type bf16 --seed 1 --tied --rope-base 500000 &&
  "$MW" synth -o "$B/synth-8b-bf16.gguf" --dim 4096 --layers 32 --heads 32 --kv-heads 8 \
    --ffn 14336 --vocab 128256 --ctx 4096 --type bf16 --seed 2 --rope-base 500000
  echo "synth rc=$? at $(($(date +%s) - t0))s" >> "$log"
) &
synth_pid=$!
targets=(test_cuda_kernels test_cuda_attention test_cuda_sample test_cuda_api test_cuda_seam
         test_cuda_engine test_cuda_greedy bench_cuda_llama bench_cuda_engine test_split)
stamp build
cmake --build "$B" -j"$jobs" --target "${targets[@]}" >> "$out/build.log" 2>&1 ||
  { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }
stamp built

export PHASEMARK_REPO_MODELS=$PWD/models
(cd "$B" && ctest -R '^cuda\.' --output-on-failure --timeout 240 -j4) > "$out/tests.log" 2>&1
stamp "tests: $(grep -E 'tests passed|tests failed' "$out/tests.log")"
grep -hE "rel err|max err|near tie|greedy steps|graph|ops vs graph|decode step|FAIL|check failed|differ|device argmax" \
  "$B/Testing/Temporary/LastTest.log" >> "$out/tests.log" 2>/dev/null
timeout 240 "$B/tests/split/test_split" cuda > "$out/split.log" 2>&1
stamp "test_split cuda: rc=$? $(tail -2 "$out/split.log" | tr '\n' ' ')"
cat "$out/split.log" >> "$out/tests.log"
rm -f "$out/split.log"

: > "$out/bench.jsonl"
timeout 200 "$B/bench/cuda/bench_cuda_llama" all "$tokens" "$reps" >> "$out/bench.jsonl" 2>> "$log"
stamp "bench_cuda_llama rc=$?"
wait $synth_pid
stamp "synth done: $(ls -la "$B"/synth-*.gguf 2>&1 | awk '{print $5, $9}' | tr '\n' ' ')"
for m in 1b 8b; do
  timeout 200 "$B/bench/cuda/bench_cuda_engine" "$B/synth-$m-bf16.gguf" "llama-$m" "$tokens" "$reps" \
    >> "$out/bench.jsonl" 2>> "$log"
  stamp "bench_cuda_engine $m rc=$?"
done

python3 - "$out/bench.jsonl" > "$out/summary.json" 2>> "$log" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
lib = {r["model"]: r for r in rows if r.get("bench") == "decode" and r["launch"] == "graph"
       and r["pdl"] == 1 and r["mv_prefetch"] == 0 and r["attn_pieces"] == 16
       and r["attn_decode"] == 1}
out = []
for r in rows:
    if r.get("bench") != "engine_decode":
        continue
    l = lib.get(r["model"])
    out.append({"model": r["model"], "mode": r["mode"], "engine_tok_s": r["tokens_per_s"],
                "engine_wall_tok_s": r["wall_tokens_per_s"],
                "engine_fraction_of_copy_bw": r["fraction_of_copy_bw"],
                "library_tok_s": l and l["tokens_per_s"],
                "library_fraction_of_copy_bw": l and l["fraction_of_copy_bw"],
                "engine_over_library": l and round(r["tokens_per_s"] / l["tokens_per_s"], 3)})
gen = {(r["model"], r["argmax"]): r for r in rows if r.get("bench") == "engine_generate"}
for (model, how), r in sorted(gen.items()):
    host = gen.get((model, "host"))
    out.append({"model": model, "generate_argmax": how, "generate_tok_s": r["tokens_per_s"],
                "generate_decode_tok_s": r["decode_tokens_per_s"],
                "ids_equal_device": r["ids_equal_device"],
                "over_host_argmax": host and round(r["tokens_per_s"] / host["tokens_per_s"], 3)})
print(json.dumps(out, indent=1))
EOF
stamp summary

if [ $(($(date +%s) - t0)) -lt "$budget" ]; then
  : > "$out/memcheck.log"
  for c in "api weight_upload_parts" "engine engine_graph_cache" "engine engine_bf16"; do
    set -- $c
    timeout 90 compute-sanitizer --tool memcheck --error-exitcode 99 \
      "$B/tests/cuda/test_cuda_$1" "$2" > "$out/mc_one.log" 2>&1
    rc=$?
    echo "cuda.$1.$2 rc=$rc $(grep -E 'ERROR SUMMARY' "$out/mc_one.log" | tail -1)" >> "$out/memcheck.log"
    [ $rc -ne 0 ] && tail -20 "$out/mc_one.log" >> "$out/memcheck.log"
    [ $(($(date +%s) - t0)) -ge "$budget" ] && break
  done
  rm -f "$out/mc_one.log"
  stamp "memcheck: $(tr '\n' ';' < "$out/memcheck.log")"
fi
rm -f "$B"/synth-*.gguf
grep -E "Failed|FAIL|\*\*\*" "$out/tests.log" | head -20
grep -E "ops vs graph|graph cache" "$out/tests.log" | head -20
cat "$out/summary.json"
grep -E '"engine_decode"|"engine_generate"|"copy"|"decode_check"' "$out/bench.jsonl"
grep -E '"bench":"decode".*"launch":"graph","pdl":1,"mv_prefetch":0,"attn_pieces":16,"attn_decode":1' "$out/bench.jsonl"
true
