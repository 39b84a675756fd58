#!/bin/bash
# run_kq.sh — one device call for the k-quant decode of issues #19/#18:
# builds for sm_90a, runs every CUDA test and test_split's cuda case, then
# measures on synthetic 8B-shaped files written here (Q4_K_M mix, Q8_0):
#
#   - decode tokens/s and the fraction of the copy bandwidth, computed
#     with the file's weight bytes read per token: Q4_K_M on the native
#     k-quant layouts (default) against the old re-quantization to the Q8
#     layout (PHASEMARK_CUDA_KQ=requant), each in its own process,
#     alternating over the rounds; Q8_0 once for reference;
#   - prefill of 512 tokens for both Q4_K_M layouts (the native one
#     dequantizes to bf16 per call).
#
# At most five files go to $OUT: misc.log, build.log, tests.log,
# bench.jsonl (each line tagged with "run"), summary.txt.
#
# Usage: bench/cuda/run_kq.sh [decode_tokens] [reps] [rounds] [tests] [layers] [q8] [prefill]
#        (defaults 128 3 1 1 32 1 512; tests 0 skips the test suite;
#        layers < 32 writes an 8B-wide file of fewer layers, q8 0 skips the
#        Q8_0 file, prefill 0 skips prefill; about 5 minutes with the
#        defaults, writing the two 8B files takes 3 of them)
set -u
tokens=${1:-128}
reps=${2:-3}
rounds=${3:-1}
with_tests=${4:-1}
layers=${5:-32}
with_q8=${6:-1}
prefill=${7:-512}
out=${OUT:-$PWD/out-kq}
mkdir -p "$out"
jobs=$(nproc)
t0=$(date +%s)
log=$out/misc.log
: > "$log"
jsonl=$out/bench.jsonl
# shellcheck source=bench/cuda/bench_lib.sh
. bench/cuda/bench_lib.sh
# shellcheck source=bench/cuda/device_configure.sh
. bench/cuda/device_configure.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv >> "$log" 2>&1

B=build-h200
: > "$out/build.log"
stamp "configure (8B width, $layers layers)"
pm_device_configure "$B" "$out/build.log" -DPHASEMARK_BENCH=ON || { tail -40 "$out/build.log"; exit 1; }
cmake --build "$B" -j"$jobs" --target pm-modelwriter >> "$out/build.log" 2>&1 ||
  { grep -E "error" "$out/build.log" | head -40; exit 1; }
MW=$B/tools/modelwriter/pm-modelwriter
M8="--dim 4096 --layers $layers --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --ctx 4096 --rope-base 500000"
synth_pids=()
specs=("8b-q4_k_m q4_K_M $M8")
[ "$with_q8" = 1 ] && specs+=("8b-q8_0 q8_0 $M8")
for spec in "${specs[@]}"; do
  # shellcheck disable=SC2086
  set -- $spec
  name=$1 type=$2
  shift 2
  ( "$MW" synth -o "$B/synth-$name.gguf" "$@" --type "$type" --seed 3 >> "$log" 2>&1
    echo "synth $name rc=$? at $(($(date +%s) - t0))s" >> "$log" ) &
  synth_pids+=($!)
done
stamp "build"
targets=(bench_cuda_engine)
[ "$with_tests" = 1 ] && targets+=("${PM_DEVICE_TEST_TARGETS[@]}")
cmake --build "$B" -j"$jobs" --target "${targets[@]}" >> "$out/build.log" 2>&1 ||
  { grep -E "error" "$out/build.log" | head -40; exit 1; }
stamp "built"

if [ "$with_tests" = 1 ]; then
  pm_device_tests "$B" "$out/tests.log" | tee -a "$log"
  stamp "tests done"
fi

for p in "${synth_pids[@]}"; do wait "$p"; done
stamp "synth done: $(ls -la "$B"/synth-*.gguf 2>&1 | awk '{print $5, $9}' | tr '\n' ' ')"

exe=$B/bench/cuda/bench_cuda_engine
: > "$jsonl"
F4=$B/synth-8b-q4_k_m.gguf
F8=$B/synth-8b-q8_0.gguf
for i in $(seq 1 "$rounds"); do
  pre=0
  [ "$i" = 1 ] && pre=$prefill
  pm_bench "kq-native" 90 -- "$F4" llama-8b "$tokens" "$reps" "$pre" graph
  pm_bench "kq-requant" 90 PHASEMARK_CUDA_KQ=requant -- "$F4" llama-8b "$tokens" "$reps" "$pre" graph
done
[ "$with_q8" = 1 ] && pm_bench "q8" 90 -- "$F8" llama-8b "$tokens" "$reps" 0 graph

python3 - "$out/bench.jsonl" > "$out/summary.txt" 2>> "$log" <<'PY'
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
def med(v):
    v = sorted(v)
    return v[len(v) // 2] if v else None
dec = collections.defaultdict(list)
pre = collections.defaultdict(list)
for r in rows:
    if r['bench'] == 'engine_decode':
        dec[(r['model'], r['dtype'], r['run'])].append(r)
    elif r['bench'] == 'engine_prefill':
        pre[(r['model'], r['dtype'], r['tokens'], r['run'])].append(r['tokens_per_s'])
print("decode (graph mode): tokens/s, file weight bytes a token, fraction of copy bandwidth")
for k in sorted(dec):
    t = med([r['tokens_per_s'] for r in dec[k]])
    f = med([r['fraction_of_copy_bw'] for r in dec[k]])
    b = dec[k][0]['weight_bytes_per_token']
    ids = [r['last_token'] for r in dec[k]]
    print(f"  {k[0]:9s} {k[1]:6s} {k[2]:11s} {t:8.1f} tok/s  {b / 1e9:.3f} GB  {f:.3f} of copy"
          f"  (last greedy tokens {ids})")
for m in sorted({k[0] for k in dec}):
    a = [v for k, v in dec.items() if k[0] == m and k[2] == 'kq-native']
    b = [v for k, v in dec.items() if k[0] == m and k[2] == 'kq-requant']
    if a and b:
        ta = med([r['tokens_per_s'] for r in a[0]]); tb = med([r['tokens_per_s'] for r in b[0]])
        print(f"  {m} Q4_K_M native/requant = {ta / tb:.2f}x")
print("prefill (fused): tokens/s")
for k in sorted(pre):
    print(f"  {k[0]:9s} {k[1]:6s} {k[2]:5d} {k[3]:11s} {med(pre[k]):9.0f} tok/s")
bw = [r['bandwidth_GBps'] for r in rows if r['bench'] == 'copy']
if bw:
    print(f"copy bandwidth (read + write): median {med(bw):.0f} GB/s over {len(bw)} processes")
PY
cat "$out/summary.txt"
stamp "done"
