#!/bin/bash
# run_kern.sh — one device call for the decode kernels and the first
# request of issues #18 and #19: builds for sm_90a, runs the CUDA tests
# the kernels touch, then measures on synthetic files written here by
# pm-modelwriter (8B width: the Q4_K_M mix and Q8_0, `layers` layers;
# the 1B shape in Q8_0), each configuration in its own process:
#
#   - Q4_K_M decode (tokens/s, the fraction of the copy bandwidth in the
#     file's bytes): the grouped Q4_K layout (default), the same with two
#     batches a load (PHASEMARK_CUDA_KQ_LAYOUT=grouped2), the file's super-
#     blocks and the kernel before (PHASEMARK_CUDA_KQ_LAYOUT=blocks), and the
#     re-quantization to Q8 (PHASEMARK_CUDA_KQ=requant), alternating over
#     the rounds;
#   - Q8_0 decode once (the reference in the same call);
#   - the first request of a fresh process (11-token prefill, one decode)
#     with the warm-up's product shapes (default) and without them
#     (PHASEMARK_CUDA_WARMUP=1), and a 16-token prompt (a row count the
#     warm-up forwards ran), on the 8B-wide Q8_0 file and the 1B one.
#
#   - with ncu 1, Nsight Compute's time, DRAM bytes and throughput of the
#     matrix-vector kernels of one Q4_K_M decode step (ncu.csv).
#
# At most six files go to $OUT: misc.log, build.log, tests.log,
# bench.jsonl (each line tagged with "run"), summary.txt, ncu.csv.
#
# Usage: bench/cuda/run_kern.sh [decode_tokens] [reps] [rounds] [tests] [layers] [ncu]
#        (defaults 128 3 2 1 32 0; tests 0 skips the tests, 1 runs the
#        kernel, seam and warm-up / Q4_K_M engine cases, 2 every cuda.*
#        test and test_split cuda; layers < 32 writes 8B-wide files of
#        fewer layers, which take less time to write: about 3 minutes
#        for 32)
set -u
tokens=${1:-128}
reps=${2:-3}
rounds=${3:-2}
with_tests=${4:-1}
layers=${5:-32}
with_ncu=${6:-0}
# shellcheck source=bench/cuda/bench_lib.sh
. bench/cuda/bench_lib.sh
pm_bench_start out-kern

B=build-h200
stamp "configure (8B width, $layers layers)"
pm_bench_writer "$B" || exit 1
M8="--dim 4096 --layers $layers --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --ctx 4096 --rope-base 500000"
M1="--dim 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --ctx 4096 --rope-base 500000 --tied"
pm_bench_synth "$B" "8b-q4_k_m q4_K_M $M8" "8b-q8_0 q8_0 $M8" "1b-q8_0 q8_0 $M1"
stamp "build"
targets=(bench_cuda_engine)
if [ "$with_tests" = 2 ]; then
  targets+=("${PM_DEVICE_TEST_TARGETS[@]}")
elif [ "$with_tests" = 1 ]; then
  targets+=(test_cuda_kernels test_cuda_seam test_cuda_engine)
fi
pm_bench_build "$B" "${targets[@]}" || exit 1
stamp "built"
export PHASEMARK_REPO_MODELS=$PWD/models
if [ "$with_tests" = 2 ]; then
  pm_device_tests "$B" "$out/tests.log" | tee -a "$log"
elif [ "$with_tests" = 1 ]; then
  (cd "$B" && timeout 200 ctest --output-on-failure --timeout 150 -j4 \
     -R '^cuda\.(kernels|seam)\.|^cuda\.engine\.engine_(warmup|q4_k_m)$') \
    > "$out/tests.log" 2>&1
  grep -E 'tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run' "$out/tests.log" | tee -a "$log"
fi
stamp "tests done"
pm_bench_synth_wait "$B"

exe=$B/bench/cuda/bench_cuda_engine
: > "$jsonl"
F4=$B/synth-8b-q4_k_m.gguf
F8=$B/synth-8b-q8_0.gguf
F1=$B/synth-1b-q8_0.gguf
for _ in $(seq 1 "$rounds"); do
  pm_bench "grouped" 90 -- "$F4" llama-8b "$tokens" "$reps" 0 graph
  pm_bench "blocks" 90 PHASEMARK_CUDA_KQ_LAYOUT=blocks -- "$F4" llama-8b "$tokens" "$reps" 0 graph
  pm_bench "grouped2" 90 PHASEMARK_CUDA_KQ_LAYOUT=grouped2 -- "$F4" llama-8b "$tokens" "$reps" 0 graph
done
pm_bench "requant" 90 PHASEMARK_CUDA_KQ=requant -- "$F4" llama-8b "$tokens" "$reps" 0 graph
pm_bench "q8" 90 -- "$F8" llama-8b "$tokens" "$reps" 0 graph
for _ in $(seq 1 "$rounds"); do
  for f in "$F1 llama-1b" "$F8 llama-8b"; do
    read -r file label <<< "$f"
    pm_bench "warm2" 60 -- "$file" "$label" first 11
    pm_bench "warm1" 60 PHASEMARK_CUDA_WARMUP=1 -- "$file" "$label" first 11
  done
done
pm_bench "warm2-16" 60 -- "$F1" llama-1b first 16
pm_bench "warm1-16" 60 PHASEMARK_CUDA_WARMUP=1 -- "$F1" llama-1b first 16
if [ "$with_ncu" = 1 ]; then
  # One decode step's matrix-vector kernels (4 a layer and the head),
  # past the warm-up's and the first steps' launches.
  n=$((4 * layers + 1))
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout 90 "$NCU" --clock-control none -k regex:matvec_ --launch-skip $((8 * n)) --launch-count "$n" \
    --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active \
    "$exe" "$F4" llama-8b 8 1 0 graph > "$out/ncu.csv" 2>> "$log"
  stamp "ncu rc=$?"
fi

python3 - "$jsonl" > "$out/summary.txt" 2>> "$log" <<'PY'
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
def med(v):
    v = sorted(v)
    return v[len(v) // 2] if v else None
dec = collections.defaultdict(list)
for r in rows:
    if r['bench'] == 'engine_decode':
        dec[(r['model'], r['dtype'], r['run'])].append(r)
print("decode (graph mode): tokens/s, file weight bytes a token, fraction of copy bandwidth")
for k in sorted(dec):
    t = med([r['tokens_per_s'] for r in dec[k]])
    f = med([r['fraction_of_copy_bw'] for r in dec[k]])
    b = dec[k][0]['weight_bytes_per_token']
    ids = [r['last_token'] for r in dec[k]]
    print(f"  {k[0]:9s} {k[1]:6s} {k[2]:10s} {t:8.1f} tok/s  {b / 1e9:.3f} GB  {f:.3f} of copy"
          f"  (runs {len(dec[k])}, last greedy tokens {ids})")
def tps(d, run):
    v = [r['tokens_per_s'] for k, rs in dec.items() if k[1] == d and k[2] == run for r in rs]
    return med(v)
base = tps('mixed', 'blocks')
for run in ('grouped', 'grouped2', 'requant'):
    t = tps('mixed', run)
    if t and base:
        print(f"  Q4_K_M {run}/blocks = {t / base:.3f}x")
print("first request in a fresh process: first / warm prefill, first / warm decode")
for r in rows:
    if r['bench'] == 'first_request':
        print(f"  {r['run']:9s} {r['model']:9s} prompt {r['prompt']:2d} warm-up {r['warmup_ms']:6.1f} ms:"
              f" prefill {r['first_prefill_ms']:.2f} / {r['warm_prefill_ms']:.2f} ms ="
              f" {r['first_over_warm']:.2f}x; decode {r['first_decode_ms']:.2f} /"
              f" {r['warm_decode_ms']:.2f} ms")
bw = [r['bandwidth_GBps'] for r in rows if r['bench'] == 'copy']
if bw:
    print(f"copy bandwidth (read + write): median {med(bw):.0f} GB/s over {len(bw)} processes")
PY
cat "$out/summary.txt"
stamp "done"
