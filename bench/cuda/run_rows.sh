#!/bin/bash
# run_rows.sh — one device call for the verify's fitted row plans (issues
# 16/17): builds every CUDA test and bench_cuda_loop for sm_90a, runs the
# plans' bit tests, then bench_cuda_loop on the shipped KJV pair and head
# once per setting in PM_ROWS_SETTINGS (environment assignments, "-" for
# the defaults, HEAD=q8_0 the defaults over the Q8_0 head instead of the
# F16 one), in that order, then Nsight Compute over the first block
# rounds' kernels per PM_ROWS_NCU_SETTINGS (NAME:ASSIGNMENT, "-" for the
# defaults; the default and the fixed plan), then the whole
# cuda.* suite and test_split's cuda case in the time left.
# Files in $OUT: rows.log (every step's summary), loop.jsonl (every
# setting's rows, each with its "setting"), ncu_<NAME>.csv, tests.log; the rest in $WORK
# (/tmp/rows-work).
#
#   bash bench/cuda/run_rows.sh
#
# Knobs: PM_ROWS_TESTS (the cases run first, "EXECUTABLE:CASE" words),
# PM_ROWS_BUILD (build-rows), TOKENS (128), REPS (2), BLOCK_KS
# (6,8), HYBRID_KS (8), PM_ROWS_NCU (1), PM_ROWS_SUITE (1), PM_ROWS_SECONDS
# (580): the call's length the suite fits into.
set -u
out=${OUT:-$PWD/out-rows}
work=${WORK:-/tmp/rows-work}
mkdir -p "$out" "$work"
: > "$out/loop.jsonl"
log=$out/rows.log
B=${PM_ROWS_BUILD:-build-rows}
export PHASEMARK_REPO_MODELS=$PWD/models
say() { echo "$@" | tee -a "$log"; }
# shellcheck source=bench/cuda/device_configure.sh
. bench/cuda/device_configure.sh
start=$(date +%s)
pm_device_build "$B" "$work/build.log" bench_cuda_loop 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
say "build: $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tee -a "$log"
t=$B/tests/cuda
for c in ${PM_ROWS_TESTS:-test_cuda_loop:rows_stationary test_cuda_seam:seam_kernel_switches \
         test_cuda_loop:rows_bits}; do
  set -- ${c%%:*} ${c#*:}
  s0=$(date +%s)
  timeout 200 "$t/$1" "$2" > "$work/$1.$2.log" 2>&1
  say "$1 $2 rc=$? in $(( $(date +%s) - s0 )) s"
  grep -E "differ|FAIL|fail|chi2|acceptance" "$work/$1.$2.log" | head -12 | tee -a "$log"
done
bench=$B/bench/cuda/bench_cuda_loop
common=(--target models/phasemark-kjv-target-q8_0.gguf --draft models/phasemark-kjv-draft-f16.gguf
        --prompts bench/spec/heldout_prompts.tsv --tokens "${TOKENS:-128}" --reps "${REPS:-2}"
        --n-prompts 24 --temp 0.7 --seed 7 --k 2
        --block-k "${BLOCK_KS:-6,8}" --hybrid-k "${HYBRID_KS:-8}" --block-only 1)
i=0
for setting in ${PM_ROWS_SETTINGS:-- PHASEMARK_CUDA_ROWS_PLAN=fixed - PHASEMARK_CUDA_VERIFY=stationary}; do
  s0=$(date +%s)
  envs=()
  head=(--head models/phasemark-kjv-block-f16.gguf)
  case $setting in
    -) ;;
    HEAD=*) head=(--head "models/phasemark-kjv-block-${setting#HEAD=}.gguf") ;;
    *) envs=("$setting") ;;
  esac
  timeout 150 env "${envs[@]}" "$bench" "${common[@]}" "${head[@]}" > "$work/loop_$i.jsonl" \
    2> "$work/bench_$i.err"
  say "bench $i ($setting) rc=$? in $(( $(date +%s) - s0 )) s"
  tail -2 "$work/bench_$i.err" | tee -a "$log"
  python3 - "$work/loop_$i.jsonl" "$setting" "$out/loop.jsonl" <<'PY' | tee -a "$log"
import json, sys
sink = open(sys.argv[3], "a")
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    r["setting"] = sys.argv[2]
    sink.write(json.dumps(r) + "\n")
    if r.get("mode") == "costs":
        print("  costs", json.dumps(r["us"]))
        continue
    print("  %-19s %-7s k=%-2d T=%.1f plain %8.1f spec %8.1f  %.3fx acc %.3f tpr %.2f %s %s"
          % (r["mode"], r["drafter"], r["k"], r["temperature"], r["plain_tok_s"],
             r["spec_tok_s"], r["speedup"], r["acceptance"], r["tokens_per_round"],
             r.get("verify"), r["parity"]))
PY
  i=$((i + 1))
done
if [ "${PM_ROWS_NCU:-1}" = 1 ] && command -v ncu > /dev/null; then
  short=(--target models/phasemark-kjv-target-q8_0.gguf --draft models/phasemark-kjv-draft-f16.gguf
         --prompts bench/spec/heldout_prompts.tsv --tokens 48 --reps 1 --n-prompts 1 --k 2
         --head models/phasemark-kjv-block-f16.gguf --block-k 8 --hybrid-k 8 --block-only 1)
  for v in ${PM_ROWS_NCU_SETTINGS:-fitted:- fixed:PHASEMARK_CUDA_ROWS_PLAN=fixed}; do
    set -- ${v%%:*} ${v#*:}
    envs=()
    [ "$2" = - ] || envs=("$2")
    PHASEMARK=nvtx timeout -k 5 90 env "${envs[@]}" ncu --nvtx \
      --nvtx-include "regex:phasemark@pm\\.spec_decode.*/" --launch-count 240 \
      --clock-control none --metrics gpu__time_duration.sum --csv \
      --log-file "$out/ncu_$1.csv" "$bench" "${short[@]}" > "$work/ncu_$1.log" 2>&1
    say "ncu $1 rc=$?"
  done
  python3 - "$out"/ncu_*.csv <<'PY' | tee -a "$log"
import csv, sys, collections
for f in sys.argv[1:]:
    try:
        rows = [r for r in csv.reader(l for l in open(f) if l.startswith('"'))]
    except OSError:
        continue
    if not rows:
        continue
    head = rows[0]
    ki, vi, gi = head.index("Kernel Name"), head.index("Metric Value"), head.index("Grid Size")
    ri = [i for i, h in enumerate(head) if "Push/Pop_Range" in h][0]
    agg = collections.OrderedDict()
    for r in rows[1:]:
        leaf = "draft" if "pm.draft" in r[ri] else "verify"
        key = (leaf, r[ki].split("(")[0][:58], r[gi])
        a = agg.setdefault(key, [0, 0.0])
        a[0] += 1
        a[1] += float(r[vi].replace(",", "")) / 1000.0
    print("==", f.split("/")[-1])
    for (leaf, k, g), (n, us) in agg.items():
        print("%-6s %-58s %-12s n=%4d mean %7.2f us total %8.1f" % (leaf, k, g, n, us / n, us))
PY
fi
if [ "${PM_ROWS_SUITE:-1}" = 1 ]; then
  pm_device_suite_until "$B" "$out/tests.log" $(( start + ${PM_ROWS_SECONDS:-580} )) | tee -a "$log"
fi
say "total: $(( $(date +%s) - start )) s"
