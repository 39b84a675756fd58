# shellcheck shell=bash
# bench_lib.sh — sourced by the device benchmark scripts (run_q8.sh,
# run_kq.sh, run_fast.sh): their log stamp, their one bench process and
# their shared set-up (below).
# The caller sets t0 (its start, in seconds), log (the misc log), exe
# (bench_cuda_engine) and jsonl (the bench lines' file).
#
#   stamp TEXT...
#       one line, seconds since t0 first, to $log and stdout
#   pm_bench TAG SECONDS [VAR=VALUE...] -- ARGS...
#       one bench process with VAR=VALUE... in its environment, stopped
#       after SECONDS; its JSON lines go to $jsonl with "run":"TAG" first,
#       its stderr to $log.

# The caller sets t0 and log (above).
# shellcheck disable=SC2154
stamp() { echo "[$(($(date +%s) - t0))s] $*" | tee -a "$log"; }

pm_bench() {
  local tag=$1 lim=$2
  shift 2
  local envs=("PM_BENCH_RUN=$tag")
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout "$lim" "$exe" "$@" 2>> "$log" |
    sed "s/^{/{\"run\":\"$tag\",/" >> "$jsonl"
  stamp "$tag $* rc=${PIPESTATUS[0]}"
}

# The set-up every device benchmark script shares (run_q8.sh, run_kq.sh,
# run_fast.sh): sourcing this file also sources device_configure.sh.
#
#   pm_bench_start DEFAULT_OUT
#       out ($OUT or ./DEFAULT_OUT), jobs, t0, log, jsonl; the GPU's facts
#       into the log
#   pm_bench_writer BUILD
#       configures BUILD (sm_90a, benchmarks on) and builds pm-modelwriter;
#       sets MW. 1 (and the build log's errors on stdout) on a failure
#   pm_bench_synth BUILD "NAME TYPE WRITER-ARG..."...
#       writes each synthetic file BUILD/synth-NAME.gguf in the background
#       (the writer is single-threaded; the build and the tests run
#       meanwhile); their pids in synth_pids
#   pm_bench_build BUILD TARGET...
#       builds the targets; 1 (and the errors) on a failure
#   pm_bench_synth_wait BUILD
#       waits for pm_bench_synth's writers and stamps the files' sizes
#   pm_bench_ctest BUILD SECONDS REGEX
#       the ctest cases of BUILD matching REGEX, 8 at a time, all within
#       SECONDS (each within SECONDS - 20), into $out/tests.log; ctest's
#       verdict and failed cases on stdout and in the log

# shellcheck source=bench/cuda/device_configure.sh
. bench/cuda/device_configure.sh

pm_bench_start() {
  out=${OUT:-$PWD/$1}
  mkdir -p "$out"
  jobs=$(nproc)
  t0=$(date +%s)
  log=$out/misc.log
  : > "$log"
  jsonl=$out/bench.jsonl
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv >> "$log" 2>&1
}

pm_bench_writer() {
  local b=$1
  : > "$out/build.log"
  pm_device_configure "$b" "$out/build.log" -DPHASEMARK_BENCH=ON || { tail -40 "$out/build.log"; return 1; }
  cmake --build "$b" -j"$jobs" --target pm-modelwriter >> "$out/build.log" 2>&1 ||
    { grep -E "error" "$out/build.log" | head -40; return 1; }
  MW=$b/tools/modelwriter/pm-modelwriter
}

pm_bench_synth() {
  local b=$1 spec
  local -a a
  shift
  synth_pids=()
  for spec in "$@"; do
    read -r -a a <<< "$spec"
    ( "$MW" synth -o "$b/synth-${a[0]}.gguf" "${a[@]:2}" --type "${a[1]}" --seed 3 >> "$log" 2>&1
      echo "synth ${a[0]} rc=$? at $(($(date +%s) - t0))s" >> "$log" ) &
    synth_pids+=($!)
  done
}

pm_bench_build() {
  local b=$1
  shift
  cmake --build "$b" -j"$jobs" --target "$@" >> "$out/build.log" 2>&1 ||
    { grep -E "error" "$out/build.log" | head -40; return 1; }
}

pm_bench_synth_wait() {
  local p
  for p in "${synth_pids[@]}"; do wait "$p"; done
  stamp "synth done: $(ls -la "$1"/synth-*.gguf 2>&1 | awk '{print $5, $9}' | tr '\n' ' ')"
}

pm_bench_ctest() {
  local b=$1 lim=$2 re=$3
  export PHASEMARK_REPO_MODELS=$PWD/models
  (cd "$b" && timeout "$lim" ctest --output-on-failure --timeout $((lim - 20)) -j8 -R "$re") \
    > "$out/tests.log" 2>&1
  grep -E 'tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run' "$out/tests.log" | tee -a "$log"
}
