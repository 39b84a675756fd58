#!/bin/bash
# run_step.sh — one device call: the sampled device rounds (issues 16/17)
# and where an 8B-wide decode step's time goes (issue 18).
#
#   1. builds every CUDA test, bench_cuda_loop, bench_cuda_engine and
#      pm-modelwriter for sm_90a; starts writing a synthetic 8B-wide Q8_0
#      file of LAYERS layers in the background;
#   2. the sampled law tests (PM_STEP_TESTS, "EXECUTABLE:CASE" words);
#   3. bench_cuda_loop on the shipped KJV pair over the Q8_0 block head,
#      greedy and T = 0.7, block and hybrid rounds at BLOCK_KS/HYBRID_KS;
#   4. on the synthetic file: decode tok/s against the copy bandwidth for
#      each PM_STEP_Q8 setting (PHASEMARK_CUDA_Q8 values, "-" the default),
#      alternating ROUNDS times, then Nsight Compute over every kernel of
#      one graph-replayed decode step for each PM_STEP_NCU_Q8 setting
#      (durations, serialized: the dependent launches' overlap is not in
#      them);
#   5. the cuda.* cases PM_STEP_SUITE matches (a ctest regex; default the
#      device loop's and the block head's) in the time left.
# Files in $OUT: step.log (the summary), loop.jsonl, engine.jsonl,
# ncu_<setting>.csv, tests.log; the rest in /tmp/step-work.
#
#   bash bench/cuda/run_step.sh
#
# Knobs: LAYERS (8), ROUNDS (1), TOKENS (128), REPS (2), BLOCK_KS (2,3,4,6,8),
# HYBRID_KS (3,4,8), PM_STEP_Q8 ("- int8auto"), PM_STEP_NCU_Q8 ("-": the
# settings Nsight Compute runs), PM_STEP_SECONDS (570).
set -u
out=${OUT:-$PWD/out/step}
work=/tmp/step-work
mkdir -p "$out" "$work"
log=$out/step.log
: > "$log"
B=build-step
export PHASEMARK_REPO_MODELS=$PWD/models
say() { echo "$@" | tee -a "$log"; }
# shellcheck source=bench/cuda/device_configure.sh
. bench/cuda/device_configure.sh
start=$(date +%s)
end=$(( start + ${PM_STEP_SECONDS:-570} ))
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tee -a "$log"
pm_device_build "$B" "$work/build.log" bench_cuda_loop bench_cuda_engine pm-modelwriter 2>&1 |
  tee -a "$log"
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
say "build: $(( $(date +%s) - start )) s"
synth=$work/synth-8b-q8_0.gguf
( $B/tools/modelwriter/pm-modelwriter synth -o "$synth" --dim 4096 --layers "${LAYERS:-8}" \
    --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --ctx 4096 --rope-base 500000 \
    --type q8_0 --seed 3 > "$work/synth.log" 2>&1; echo "rc=$?" >> "$work/synth.log" ) &
synth_pid=$!
t=$B/tests/cuda
for c in ${PM_STEP_TESTS:-test_cuda_loop:sampled_law_ngram test_cuda_block:sampled_law_hybrid \
         test_cuda_loop:sampled_law test_cuda_block:sampled_law}; do
  set -- ${c%%:*} ${c#*:}
  s0=$(date +%s)
  timeout 150 "$t/$1" "$2" > "$work/$1.$2.log" 2>&1
  say "$1 $2 rc=$? in $(( $(date +%s) - s0 )) s"
  grep -E "differ|FAIL|fail|chi2|acceptance|rounds" "$work/$1.$2.log" | head -8 | tee -a "$log"
done
wait "$synth_pid"
say "synth: $(tail -1 "$work/synth.log") $(stat -c %s "$synth" 2>/dev/null) bytes at $(( $(date +%s) - start )) s"
s0=$(date +%s)
timeout 200 "$B/bench/cuda/bench_cuda_loop" --target models/phasemark-kjv-target-q8_0.gguf \
  --draft models/phasemark-kjv-draft-f16.gguf --prompts bench/spec/heldout_prompts.tsv \
  --tokens "${TOKENS:-128}" --reps "${REPS:-2}" --n-prompts 24 --temp 0.7 --seed 7 --k 2 \
  --head models/phasemark-kjv-block-q8_0.gguf --block-k "${BLOCK_KS:-2,3,4,6,8}" \
  --hybrid-k "${HYBRID_KS:-3,4,8}" --block-only 1 > "$out/loop.jsonl" 2> "$work/loop.err"
say "bench_cuda_loop rc=$? in $(( $(date +%s) - s0 )) s"
tail -2 "$work/loop.err" | tee -a "$log"
python3 bench/cuda/loop_summary.py "$out/loop.jsonl" | tee -a "$log"
exe=$B/bench/cuda/bench_cuda_engine
: > "$out/engine.jsonl"
for round in $(seq 1 "${ROUNDS:-1}"); do
  for q in ${PM_STEP_Q8:-- int8auto}; do
    envs=()
    [ "$q" = - ] || envs=("PHASEMARK_CUDA_Q8=$q")
    timeout 90 env "${envs[@]}" "$exe" "$synth" "q8-$q" 128 3 0 graph 2>> "$work/engine.err" |
      sed "s/^{/{\"setting\":\"$q\",\"round\":$round,/" >> "$out/engine.jsonl"
    say "engine $q round $round rc=${PIPESTATUS[0]}"
  done
done
python3 - "$out/engine.jsonl" <<'PY' | tee -a "$log"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("bench") == "copy":
        print("  copy %s %.0f GB/s" % (r["setting"], r["bandwidth_GBps"]))
    elif r.get("bench") == "engine_decode":
        print("  decode %-9s round %d %s" % (r["setting"], r["round"],
              " ".join("%s=%s" % (k, r[k]) for k in r
                       if k in ("mode", "tokens_per_s", "fraction_of_copy_bw", "ids_equal_graph", "last_token"))))
PY
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for q in ${PM_STEP_NCU_Q8:--}; do
  [ $(( end - $(date +%s) )) -gt 120 ] || break
  envs=()
  [ "$q" = - ] || envs=("PHASEMARK_CUDA_Q8=$q")
  timeout 100 env "${envs[@]}" PHASEMARK_CUDA_WARMUP=0 "$NCU" --clock-control none \
    --launch-skip 150 --launch-count 150 \
    --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    "$exe" "$synth" "ncu" 8 1 0 graph > "$out/ncu_$q.csv" 2>> "$work/ncu.err"
  say "ncu $q rc=$?"
done
python3 - "$out"/ncu_*.csv <<'PY' | tee -a "$log"
import csv, sys, collections
for f in sys.argv[1:]:
    rows = [r for r in csv.reader(l for l in open(f) if l.startswith('"'))]
    if not rows:
        continue
    h = rows[0]
    ki, mi, vi, gi = (h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value"),
                      h.index("Grid Size"))
    agg = collections.OrderedDict()
    for r in rows[1:]:
        key = (r[ki].split("(")[0][:64], r[gi])
        a = agg.setdefault(key, {"n": 0})
        v = float(r[vi].replace(",", ""))
        if r[mi] == "gpu__time_duration.sum":
            a["n"] += 1
            a["ns"] = a.get("ns", 0.0) + v
        else:
            a["bytes"] = a.get("bytes", 0.0) + v
    print("==", f.split("/")[-1])
    for (k, g), a in agg.items():
        n = max(a["n"], 1)
        print("%-64s %-14s n=%3d mean %8.2f us  %7.1f MB  total %8.1f us"
              % (k, g, a["n"], a.get("ns", 0) / n / 1e3, a.get("bytes", 0) / n / 1e6,
                 a.get("ns", 0) / 1e3))
PY
left=$(( end - $(date +%s) ))
say "suite (${PM_STEP_SUITE:-^cuda\\.(loop|block)\\.}): $left s left"
if [ $left -gt 40 ]; then
  (cd "$B" && timeout $(( left - 10 )) ctest -R "${PM_STEP_SUITE:-^cuda\\.(loop|block)\\.}" \
     --output-on-failure --timeout 150 -j4) > "$out/tests.log" 2>&1
  grep -E 'tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run' "$out/tests.log" | tee -a "$log"
fi
say "total: $(( $(date +%s) - start )) s"
