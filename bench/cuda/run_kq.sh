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
# shellcheck source=bench/cuda/bench_lib.sh
. bench/cuda/bench_lib.sh
pm_bench_start out-kq

B=build-h200
stamp "configure (8B width, $layers layers)"
pm_bench_writer "$B" || exit 1
M8="--dim 4096 --layers $layers --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --ctx 4096 --rope-base 500000"
specs=("8b-q4_k_m q4_K_M $M8")
[ "$with_q8" = 1 ] && specs+=("8b-q8_0 q8_0 $M8")
pm_bench_synth "$B" "${specs[@]}"
stamp "build"
targets=(bench_cuda_engine)
[ "$with_tests" = 1 ] && targets+=("${PM_DEVICE_TEST_TARGETS[@]}")
pm_bench_build "$B" "${targets[@]}" || exit 1
stamp "built"

if [ "$with_tests" = 1 ]; then
  pm_device_tests "$B" "$out/tests.log" | tee -a "$log"
  stamp "tests done"
fi

pm_bench_synth_wait "$B"

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
