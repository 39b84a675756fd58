# shellcheck shell=bash
# bench_lib.sh — sourced by the device benchmark scripts (run_q8.sh,
# run_kq.sh, run_fast.sh): their log stamp and their one bench process.
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
