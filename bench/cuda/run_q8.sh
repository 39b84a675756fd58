#!/bin/bash
# run_q8.sh — one device call for issue #18's CUDA parts: builds for
# sm_90a, runs every CUDA test and test_split's cuda case, then measures on synthetic models written
# here (8B-shaped Q8_0 and F16, 1B-shaped Q8_0):
#
#   - decode tokens/s and the fraction of the copy bandwidth, the int8 Q8
#     kernel (default) against the fp32-activation one
#     (PHASEMARK_CUDA_Q8=f32) and against its variant with half the loads
#     in flight a warp and more warps (PHASEMARK_CUDA_Q8=int8u1), each in
#     its own process, alternating;
#   - prefill of 512 and 2048 tokens, F16 on its weights as they are
#     (default) against the old bf16 dequantization
#     (PHASEMARK_CUDA_F16_GEMM=bf16), and Q8_0;
#   - the first request of a fresh process (11-token prefill, one decode)
#     against warm ones, with the warm-up at model open (default) and
#     without it (PHASEMARK_CUDA_WARMUP=0).
#
# At most five files go to $OUT: misc.log, build.log, tests.log,
# bench.jsonl (each line tagged with "run"), summary.txt.
#
# Usage: bench/cuda/run_q8.sh [decode_tokens] [reps] [rounds]
#        (defaults 128 3 1; the whole call takes about 6-8 minutes)
set -u
tokens=${1:-128}
reps=${2:-3}
rounds=${3:-1}
# shellcheck source=bench/cuda/bench_lib.sh
. bench/cuda/bench_lib.sh
pm_bench_start out-q8

B=build-h200
stamp "configure"
pm_bench_writer "$B" || exit 1
M8="--dim 4096 --layers 32 --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --ctx 4096 --rope-base 500000"
M1="--dim 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --ctx 4096 --rope-base 500000 --tied"
# The three files are written side by side while the rest builds and the
# tests run (the writer is single-threaded).
pm_bench_synth "$B" "8b-q8_0 q8_0 $M8" "8b-f16 f16 $M8" "1b-q8_0 q8_0 $M1"
stamp "build"
targets=("${PM_DEVICE_TEST_TARGETS[@]}" bench_cuda_engine)
pm_bench_build "$B" "${targets[@]}" || exit 1
stamp "built"

pm_device_tests "$B" "$out/tests.log" | tee -a "$log"
stamp "tests done"

pm_bench_synth_wait "$B"

exe=$B/bench/cuda/bench_cuda_engine
: > "$jsonl"
F8=$B/synth-8b-q8_0.gguf
H8=$B/synth-8b-f16.gguf
F1=$B/synth-1b-q8_0.gguf
for _ in $(seq 1 "$rounds"); do
  pm_bench "q8-int8" 150 -- "$F8" llama-8b "$tokens" "$reps" 512,2048 graph
  pm_bench "q8-f32" 120 PHASEMARK_CUDA_Q8=f32 -- "$F8" llama-8b "$tokens" "$reps" 0 graph
  pm_bench "q8-int8u1" 120 PHASEMARK_CUDA_Q8=int8u1 -- "$F8" llama-8b "$tokens" "$reps" 0 graph
  pm_bench "q8-int8" 90 -- "$F1" llama-1b "$tokens" "$reps" 512,2048 graph
  pm_bench "q8-f32" 90 PHASEMARK_CUDA_Q8=f32 -- "$F1" llama-1b "$tokens" "$reps" 0 graph
  pm_bench "q8-int8u1" 90 PHASEMARK_CUDA_Q8=int8u1 -- "$F1" llama-1b "$tokens" "$reps" 0 graph
  pm_bench "f16-direct" 120 -- "$H8" llama-8b 32 "$reps" 512,2048 graph
  pm_bench "f16-bf16" 120 PHASEMARK_CUDA_F16_GEMM=bf16 -- "$H8" llama-8b 32 "$reps" 512,2048 graph
done
pm_bench "warm" 90 -- "$F8" llama-8b first 11
pm_bench "cold" 90 PHASEMARK_CUDA_WARMUP=0 -- "$F8" llama-8b first 11
pm_bench "warm" 60 -- "$F1" llama-1b first 11
pm_bench "cold" 60 PHASEMARK_CUDA_WARMUP=0 -- "$F1" llama-1b first 11
pm_bench "warm" 90 -- "$H8" llama-8b first 11

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
print("decode (graph mode): tokens/s, fraction of copy bandwidth")
for k in sorted(dec):
    t = med([r['tokens_per_s'] for r in dec[k]])
    f = med([r['fraction_of_copy_bw'] for r in dec[k]])
    print(f"  {k[0]:9s} {k[1]:5s} {k[2]:10s} {t:9.1f} tok/s  {f:.3f} of copy")
for m in sorted({k[0] for k in dec}):
    b = dec.get((m, 'Q8_0', 'q8-f32'))
    for v in ('q8-int8', 'q8-int8u1'):
        a = dec.get((m, 'Q8_0', v))
        if a and b:
            ta = med([r['tokens_per_s'] for r in a]); tb = med([r['tokens_per_s'] for r in b])
            ia = [r['last_token'] for r in a]; ib = [r['last_token'] for r in b]
            print(f"  {m} Q8_0 {v}/f32 = {ta / tb:.2f}x (last greedy token {ia}, f32 {ib})")
print("prefill (fused): tokens/s")
for k in sorted(pre):
    print(f"  {k[0]:9s} {k[1]:5s} {k[2]:5d} {k[3]:10s} {med(pre[k]):9.0f} tok/s")
for m, d, n in sorted({k[:3] for k in pre}):
    a = pre.get((m, d, n, 'f16-direct')); b = pre.get((m, d, n, 'f16-bf16'))
    if a and b:
        print(f"  {m} F16 {n}: direct/bf16 = {med(a) / med(b):.2f}x")
print("first request (11-token prefill, one decode) in a fresh process")
for r in rows:
    if r['bench'] == 'first_request':
        print(f"  {r['model']:9s} {r['dtype']:5s} warm-up {str(r['warmup']):5s} "
              f"({r['warmup_ms']:.1f} ms, open {r['open_s']:.1f} s): prefill first "
              f"{r['first_prefill_ms']:.2f} ms / warm {r['warm_prefill_ms']:.2f} ms = "
              f"{r['first_over_warm']:.2f}x; decode first {r['first_decode_ms']:.2f} ms / "
              f"warm {r['warm_decode_ms']:.2f} ms")
bw = [r['bandwidth_GBps'] for r in rows if r['bench'] == 'copy']
if bw:
    print(f"copy bandwidth (read + write): median {med(bw):.0f} GB/s over {len(bw)} processes")
PY
cat "$out/summary.txt"
stamp "done"
