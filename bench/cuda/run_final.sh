#!/bin/bash
# run_final.sh — one short GPU session closing issue 8's tool items and
# measuring speculative decoding on CUDA (results: bench/results/cuda_final.*):
#
#   1. build the needed targets for sm_90a (pm-generate, pm-shardd, the
#      phasemark CLI, the marker and CUPTI recorders, test_cuda_engine,
#      test_split);
#   2. Nsight Compute with NVTX filtering on the phasemark domain: only the
#      kernels launched inside pm.prefill (then pm.decode) ranges are
#      profiled; their count and names are compared with CUPTI's record of
#      the same request (kernels whose launch call lies inside such a range);
#   3. CUDA runtime + driver API calls of one request by function (CUPTI
#      callbacks), markers off, on through ROCTX, on through NVTX, off again;
#   4. greedy ids of heterogeneous placements (CPU + CUDA shard in one
#      process, both orders; local CPU + spawned and external CUDA daemons)
#      against monolithic CPU, for the KJV target (Q8_0) and draft (F16);
#   5. autoregressive vs speculative (k = 2, 3, 4) tokens/s on cuda:0;
#   6. cuda.engine.engine_stories (stories260K from $PM_STORIES_DIR).
#
# Every step is independent and bounded by `timeout`; a step is skipped when
# the time left ($PM_FINAL_BUDGET_S from the start) is below its estimate.
# The tables are rewritten after every step, so a run cut short still
# returns what it measured. Output ($OUT or ./out-final), 7 files:
# summary.txt, build.log, steps.log, ncu_prefill.csv, ncu_decode.csv,
# tables.txt, results.json (bench/cuda/final_tables.py).
#
# Env: PM_FINAL_BACKEND (default cuda:0; "cpu" exercises the flow on a
# machine without a GPU), PM_FINAL_BUDGET_S (default 170), PM_FINAL_BUILD
# (default build-final), PM_STORIES_DIR (default build-cudadata).
set -u
out=${OUT:-$PWD/out-final}
mkdir -p "$out"
B=${PM_FINAL_BUILD:-build-final}
BE=${PM_FINAL_BACKEND:-cuda:0}
budget=${PM_FINAL_BUDGET_S:-170}
stories=${PM_STORIES_DIR:-$PWD/build-cudadata}
W=$PWD/$B/final-work
S=$out/summary.txt
L=$out/steps.log
t0=$(date +%s)
: > "$S"
: > "$L"

stamp() { echo "[$(($(date +%s) - t0))s] $*" | tee -a "$S"; }
left() { echo $((budget - ($(date +%s) - t0))); }
# room SECONDS WHAT: 0 when that much time is left, else notes the skip.
room() {
  [ "$(left)" -ge "$1" ] && return 0
  stamp "SKIP $2: $(left)s left, needs ~$1s"
  return 1
}
# lim SECONDS: a step's limit, never past the budget.
lim() { local l; l=$(left); [ "$l" -lt "$1" ] && echo $((l > 5 ? l : 5)) || echo "$1"; }
logged() { echo "+ $*" >> "$L"; timeout -k 5 "$@" >> "$L" 2>&1; }
tables() { python3 bench/cuda/final_tables.py "$W" "$out/tables.txt" "$out/results.json" >> "$L" 2>&1; }

T=$PWD/models/phasemark-kjv-target-q8_0.gguf
D=$PWD/models/phasemark-kjv-draft-f16.gguf
PMG=$PWD/$B/tools/generate/pm-generate
SHD=$PWD/$B/tools/shardd/pm-shardd
PHM=$PWD/$B/tools/phasemark/phasemark
REC=$PWD/$B/tools/recorder/libphasemark_recorder.so
CUPTI=$PWD/$B/tools/cupti/libphasemark_cupti.so
PROMPTS=("And it came to pass, when the king heard" "In the beginning God created"
         "Thus saith the LORD of hosts,")
# The request every tool step runs: 11 prompt tokens in two prefill chunks
# (8 + 3), then 3 decode steps.
REQ=(-m "$T" -p "${PROMPTS[0]}" --chunk 8 -n 4 --ids --backend "$BE")

# gen SECONDS NAME ARG...: pm-generate, ids to NAME.ids, stderr to NAME.err
# (and to steps.log).
gen() {
  local l=$1 name=$2
  shift 2
  echo "+ pm-generate $*" >> "$L"
  timeout -k 5 "$l" "$PMG" "$@" > "$name.ids" 2> "$name.err"
  local rc=$?
  [ $rc -ne 0 ] && echo "rc=$rc" >> "$name.err"
  cat "$name.err" >> "$L"
  return $rc
}

build() {
  stamp "configure"
  : > "$out/build.log"
  timeout 90 bash -c '. bench/cuda/device_configure.sh && pm_device_configure "$@"' _ \
    "$B" "$out/build.log" -DPHASEMARK_BENCH=OFF -DBUILD_TESTING=ON ||
    { stamp "configure FAILED: $(tail -3 "$out/build.log" | tr '\n' ' ')"; return 1; }
  stamp "build"
  # -k: a target that fails does not stop the others; each step checks its
  # own binaries.
  timeout "$(lim 150)" cmake --build "$B" -j"$(nproc)" --target pm-generate pm-shardd \
    phasemark_cli phasemark_recorder phasemark_cupti test_cuda_engine test_split \
    -- -k >> "$out/build.log" 2>&1
  stamp "build rc=$?: $(grep -cE '(error|Error)[: ]' "$out/build.log") error lines"
  local f
  for f in "$PMG" "$SHD" "$PHM" "$REC" "$CUPTI" "$B/tests/cuda/test_cuda_engine"; do
    [ -e "$f" ] || stamp "missing after build: $f"
  done
}

# ncu PHASE: profile only the kernels launched inside pm.PHASE ranges.
ncu_step() {
  local phase=$1
  room 40 "ncu $phase" || return
  command -v ncu > /dev/null || { stamp "ncu $phase: ncu not found"; return; }
  echo "+ ncu $phase" >> "$L"
  PHASEMARK=nvtx timeout -k 5 "$(lim 75)" ncu --nvtx --nvtx-include "regex:phasemark@pm\\.$phase.*/" \
    --clock-control none --metrics gpu__time_duration.sum --print-kernel-base mangled --csv \
    --log-file "$W/ncu_$phase.csv" "$PMG" "${REQ[@]}" >> "$L" 2>&1
  local rc=$?
  cp "$W/ncu_$phase.csv" "$out/" 2> /dev/null
  stamp "ncu $phase rc=$rc: $(grep -c '"gpu__time_duration.sum"' "$W/ncu_$phase.csv" 2> /dev/null) kernels profiled"
}

# API calls of one request: CUPTI in every run, the marker recorder
# preloaded in every run (so that markers are the only difference).
api_off() {
  mkdir -p "$W/api_$1"
  logged "$(lim 30)" env PHASEMARK=0 LD_PRELOAD="$REC" NVTX_INJECTION64_PATH="$REC" \
    PHASEMARK_CAPTURE_DIR="$W/api_$1" CUDA_INJECTION64_PATH="$CUPTI" "$PMG" "${REQ[@]}"
  stamp "api $1 rc=$?: $(cat "$W"/api_"$1"/*.api.csv 2> /dev/null | grep -c API) calls"
}
api_on() {
  logged "$(lim 30)" env PHASEMARK="$2" PHASEMARK_RECORDER="$REC" PHASEMARK_CUPTI="$CUPTI" \
    "$PHM" capture --kernels -o "$W/api_$1" -- "$PMG" "${REQ[@]}"
  stamp "api $1 rc=$?: $(grep -c API "$W/api_$1/cuda_api_trace.csv" 2> /dev/null) calls," \
    "$(grep -c pm. "$W/api_$1/marker_api_trace.csv" 2> /dev/null) ranges"
}
api_step() {
  room 40 "API counts" || return
  api_off off
  api_on roctx 1
  api_on nvtx nvtx
  api_off off2
}

# hetero_step MODEL SUBDIR SPLIT LAST: greedy ids of every placement of
# MODEL (layers 0..SPLIT-1 and SPLIT..LAST) into $W/SUBDIR. Runs: name, the
# model's backend, the placement (none: monolithic).
HTAGS=(mono_cpu mono_cuda cpu_then_cuda cuda_then_cpu cpu_spawn_cuda cpu_unix_cuda)
hetero_step() {
  local model=$1 sub=$2 split=$3 last=$4
  room 30 "hetero $sub" || return
  local sock=$W/shard_$sub.sock pid p i ready a="0-$((split - 1))" b="$split-$last"
  local hbe=(cpu "$BE" cpu cpu cpu cpu)
  local hpl=("" "" "$a@local:cpu,$b@local:$BE" "$a@local:$BE,$b@local:cpu"
             "$a@local,$b@spawn:$BE?transport=shared" "$a@local,$b@unix:$sock")
  mkdir -p "$W/$sub"
  echo "+ pm-shardd (external, $BE, $sub)" >> "$L"
  timeout -k 5 "$(lim 90)" "$SHD" --model "$model" --layers "$b" --shard 1 --listen "unix:$sock" \
    --backend "$BE" --ready-fd 3 3> "$W/ready_$sub.txt" >> "$L" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do grep -q ready "$W/ready_$sub.txt" 2> /dev/null && break; sleep 0.2; done
  ready=$(cat "$W/ready_$sub.txt" 2> /dev/null)
  stamp "external daemon (pid $pid, $sub): ${ready:-not ready after 20 s}"
  for p in 0 1 2; do
    for i in "${!HTAGS[@]}"; do
      [ "${HTAGS[$i]}" = cpu_unix_cuda ] && [ -z "$ready" ] && continue
      gen "$(lim 30)" "$W/$sub/${HTAGS[$i]}.$p" -m "$model" -p "${PROMPTS[$p]}" -n 24 --ids \
        --chunk 8 --backend "${hbe[$i]}" ${hpl[$i]:+--placement "${hpl[$i]}"}
    done
  done
  kill "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
  tables
  stamp "hetero $sub: $(grep -c " match " "$out/tables.txt") match, $(grep -c DIFFERS "$out/tables.txt") differ (all models so far)"
}

spec_step() {
  room 30 "spec" || return
  local p k
  mkdir -p "$W/spec"
  for p in 0 1 2; do
    gen "$(lim 30)" "$W/spec/ar.$p" -m "$T" -p "${PROMPTS[$p]}" -n 128 --ids --backend "$BE"
    for k in 2 3 4; do
      gen "$(lim 30)" "$W/spec/k$k.$p" -m "$T" -p "${PROMPTS[$p]}" -n 128 --ids --backend "$BE" \
        --draft "$D" --draft-k "$k"
    done
  done
  tables
  stamp "spec: $(grep -A6 'speculative decoding' "$out/tables.txt" | tail -n +2 | tr -s ' ' | tr '\n' ';')"
}

stories_step() {
  room 15 "engine_stories" || return
  PHASEMARK_TEST_MODELS=$stories logged "$(lim 60)" "$B/tests/cuda/test_cuda_engine" engine_stories
  stamp "cuda.engine.engine_stories rc=$? (0 pass, 77 skip) with $stories"
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -1
  ncu --version | tail -1
} >> "$S" 2>&1
rm -rf "$W"
mkdir -p "$W"
build
ncu_step prefill
ncu_step decode
api_step
tables
stamp "tables: api identical=$(grep -o '"identical": [a-z]*' "$out/results.json")"
# The KJV target (Q8_0, 6 layers): the CPU quantizes activations and the GPU
# does not, so near ties may flip; the draft (F16, 5 layers) should match.
hetero_step "$T" hetero 3 5
hetero_step "$D" hetero_f16 2 4
spec_step
stories_step
tables
stamp "done"
cat "$out/tables.txt"
