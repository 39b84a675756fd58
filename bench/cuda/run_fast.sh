#!/bin/bash
# run_fast.sh — one device call for the decode and prefill speed targets
# of issues #18 and #19: builds for sm_90a, runs every CUDA test and
# test_split's cuda case, then measures on synthetic files written here
# by pm-modelwriter (8B shape: Q8_0 and the Q4_K_M mix; 1B shape: Q8_0),
# each configuration in its own process:
#
#   - Q8_0 decode (tokens/s and the fraction of the copy bandwidth): the
#     default int8 kernel (4 KB a warp in flight, a warp a row pair)
#     against the one before it (PHASEMARK_CUDA_Q8=int8u2: 2 KB a warp),
#     with split-K (PHASEMARK_CUDA_MV_SPLIT=1) on either, and with L2
#     requests 2 batches ahead of the loads (PHASEMARK_CUDA_MV_PREFETCH=2);
#   - Q4_K_M decode on the native layouts (default) and re-quantized to
#     Q8 (PHASEMARK_CUDA_KQ=requant), the native one with split-K;
#   - prefill of 512 tokens with the bf16 copies made once (default)
#     against the per-call dequantization (PHASEMARK_CUDA_WIDE=dequant);
#   - the first request of a fresh process (11-token prefill, one decode)
#     against warm ones.
#
# At most five files go to $OUT: misc.log, build.log, tests.log,
# bench.jsonl (each line tagged with "run"), summary.txt.
#
# Usage: bench/cuda/run_fast.sh [decode_tokens] [reps] [tests]
#        (defaults 128 3 1; tests 0 skips the test suite; writing the
#        files takes about 3 minutes, the tests run meanwhile)
set -u
tokens=${1:-128}
reps=${2:-3}
with_tests=${3:-1}
# shellcheck source=bench/cuda/bench_lib.sh
. bench/cuda/bench_lib.sh
pm_bench_start out-fast

B=build-h200
stamp "configure"
pm_bench_writer "$B" || exit 1
M8="--dim 4096 --layers 32 --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --ctx 4096 --rope-base 500000"
M1="--dim 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --ctx 4096 --rope-base 500000 --tied"
pm_bench_synth "$B" "8b-q8_0 q8_0 $M8" "8b-q4_k_m q4_K_M $M8" "1b-q8_0 q8_0 $M1"
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
F8=$B/synth-8b-q8_0.gguf
F4=$B/synth-8b-q4_k_m.gguf
F1=$B/synth-1b-q8_0.gguf
OLD=(PHASEMARK_CUDA_Q8=int8u2 PHASEMARK_CUDA_WIDE=dequant)
# Most wanted first: a call stopped at its limit keeps what ran.
pm_bench "new" 90 -- "$F8" llama-8b "$tokens" "$reps" 512 graph
pm_bench "old" 90 "${OLD[@]}" -- "$F8" llama-8b "$tokens" "$reps" 512 graph
pm_bench "native" 90 -- "$F4" llama-8b "$tokens" "$reps" 512 graph
pm_bench "requant" 90 PHASEMARK_CUDA_KQ=requant -- "$F4" llama-8b "$tokens" "$reps" 512 graph
pm_bench "new" 90 -- "$F1" llama-1b "$tokens" "$reps" 512 graph
pm_bench "old" 90 "${OLD[@]}" -- "$F1" llama-1b "$tokens" "$reps" 512 graph
pm_bench "u4-split" 90 PHASEMARK_CUDA_MV_SPLIT=1 -- "$F8" llama-8b "$tokens" "$reps" 0 graph
pm_bench "u2-split" 90 PHASEMARK_CUDA_Q8=int8u2 PHASEMARK_CUDA_MV_SPLIT=1 -- \
  "$F8" llama-8b "$tokens" "$reps" 0 graph
pm_bench "pf2" 90 PHASEMARK_CUDA_MV_PREFETCH=2 -- "$F8" llama-8b "$tokens" "$reps" 0 graph
pm_bench "native-split-dequant" 90 PHASEMARK_CUDA_MV_SPLIT=1 PHASEMARK_CUDA_WIDE=dequant -- \
  "$F4" llama-8b "$tokens" "$reps" 512 graph
pm_bench "first" 60 -- "$F8" llama-8b first 11
pm_bench "first" 60 -- "$F1" llama-1b first 11

python3 - "$jsonl" > "$out/summary.txt" 2>> "$log" <<'PY'
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
bw = [r['bandwidth_GBps'] for r in rows if r['bench'] == 'copy']
print("decode (graph mode): tokens/s, file weight bytes a token, fraction of copy bandwidth")
for k in sorted(dec):
    t = med([r['tokens_per_s'] for r in dec[k]])
    f = med([r['fraction_of_copy_bw'] for r in dec[k]])
    b = dec[k][0]['weight_bytes_per_token']
    ids = [r['last_token'] for r in dec[k]]
    print(f"  {k[0]:9s} {k[1]:6s} {k[2]:22s} {t:8.1f} tok/s  {b / 1e9:.3f} GB  {f:.3f} of copy"
          f"  (last greedy tokens {ids})")
def tps(m, d, run):
    v = dec.get((m, d, run))
    return med([r['tokens_per_s'] for r in v]) if v else None
for m, d, a, b in (('llama-8b', 'Q8_0', 'new', 'old'), ('llama-1b', 'Q8_0', 'new', 'old'),
                   ('llama-8b', 'Q4_K_M', 'native', 'requant')):
    ta, tb = tps(m, d, a), tps(m, d, b)
    if ta and tb:
        print(f"  {m} {d} decode {a}/{b} = {ta / tb:.2f}x")
print("prefill (fused): tokens/s")
for k in sorted(pre):
    print(f"  {k[0]:9s} {k[1]:6s} {k[2]:5d} {k[3]:22s} {med(pre[k]):9.0f} tok/s")
print("first request (11-token prefill, one decode) in a fresh process")
for r in rows:
    if r['bench'] == 'first_request':
        print(f"  {r['model']:9s} {r['dtype']:5s} warm-up {str(r['warmup']):5s} "
              f"({r['warmup_ms']:.1f} ms, open {r['open_s']:.1f} s): prefill first "
              f"{r['first_prefill_ms']:.2f} ms / warm {r['warm_prefill_ms']:.2f} ms = "
              f"{r['first_over_warm']:.2f}x; decode first {r['first_decode_ms']:.2f} ms / "
              f"warm {r['warm_decode_ms']:.2f} ms")
if bw:
    print(f"copy bandwidth (read + write): median {med(bw):.0f} GB/s over {len(bw)} processes")
PY
cat "$out/summary.txt"
stamp "done"
