#!/bin/bash
# run_loop.sh — one device call for the device loop (issue 16 item 2):
# builds for sm_90a (or takes prebuilt binaries), runs the loop's tests and
# the CUDA cases its kernel change touches, then bench_cuda_loop on the
# shipped KJV pair; logs and JSON lines to $OUT.
#
#   bash bench/cuda/run_loop.sh                      # configure + build in build-loop
#   PM_LOOP_BIN=DIR bash bench/cuda/run_loop.sh      # binaries (and libphasemark.so.0) in DIR
#
# Knobs: TOKENS (128), REPS (2), N_PROMPTS (24), KS (1,2,3,4,6,8),
# PM_LOOP_TESTS=0 skips the tests, PM_LOOP_CASES names the loop's cases to
# run (default: all), NGRAM_ONLY=1 benches the baseline and n-gram rows only.
# Block drafter (issues 16/17): HEAD (default models/phasemark-kjv-block-f16.gguf;
# HEAD= for none) adds block rows at BLOCK_KS (4,6,8,12,16), the head's
# cost row and hybrid rows (n-gram, else the head) at HYBRID_KS (4,8);
# BLOCK_ONLY=1 runs the baseline, block, hybrid and model rows only;
# PM_BLOCK_TESTS=1 runs only the block drafter's tests (cuda.block.*,
# cuda.loop.ranges_block). The bench's rows go to $OUT/loop.jsonl;
# VERIFY_MODES (below) compares the verify's products in one call.
set -u
out=${OUT:-$PWD/out-loop}
mkdir -p "$out"
export PHASEMARK_REPO_MODELS=$PWD/models
if [ -n "${PM_LOOP_BIN:-}" ]; then
  bin=$(cd "$PM_LOOP_BIN" && pwd)
  export LD_LIBRARY_PATH=$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  t=$bin
  bench=$bin/bench_cuda_loop
else
  B=${PM_LOOP_BUILD:-build-loop}
  # shellcheck source=bench/cuda/device_configure.sh
  . bench/cuda/device_configure.sh
  : > "$out/build.log"
  pm_device_configure "$B" "$out/build.log" || { tail -40 "$out/build.log"; exit 1; }
  cmake --build "$B" -j"$(nproc)" --target test_cuda_loop test_cuda_loop_ranges test_cuda_kernels \
    test_cuda_greedy test_cuda_engine test_cuda_block bench_cuda_loop >> "$out/build.log" 2>&1 ||
    { grep -E "error" "$out/build.log" | head -40; exit 1; }
  t=$B/tests/cuda
  bench=$B/bench/cuda/bench_cuda_loop
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader > "$out/gpu.txt" 2>&1

run_cases() { # exe case...
  local exe=$1 c rc
  shift
  for c in "$@"; do
    timeout 150 "$t/$exe" "$c" > "$out/$exe.$c.log" 2>&1
    rc=$?
    echo "$exe $c rc=$rc"
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && tail -5 "$out/$exe.$c.log"
  done
}

if [ "${PM_LOOP_TESTS:-1}" != 0 ] && [ "${PM_BLOCK_TESTS:-0}" = 1 ]; then
  run_cases test_cuda_block head_parity loop_kjv sampled_law refusals
  run_cases test_cuda_loop_ranges ranges ranges_block
elif [ "${PM_LOOP_TESTS:-1}" != 0 ] && [ -n "${PM_LOOP_CASES:-}" ]; then
  # shellcheck disable=SC2086
  run_cases test_cuda_loop $PM_LOOP_CASES
elif [ "${PM_LOOP_TESTS:-1}" != 0 ]; then
  # shellcheck disable=SC2086
  run_cases test_cuda_loop ${PM_LOOP_CASES:-rows_bits rows_stationary plain_kjv spec_kjv ngram_kjv stops sampled_law refusals_cpu refusals}
  run_cases test_cuda_loop_ranges ranges ranges_block
  run_cases test_cuda_block head_parity loop_kjv sampled_law refusals
  run_cases test_cuda_kernels matvec_fused rope_qkv_store matmul_acc matvec_rope_store \
    matvec_bf16 matvec_f16 matvec_f32 matvec_q8_0 matvec_q4_0 matvec_q8_0_int8 matvec_batch \
    matvec_unaligned matvec_q4_k matvec_q6_k matvec_fused_kq
  run_cases test_cuda_greedy argmax_rule generate_kjv_target generate_kjv_draft generate_synth \
    spec_kjv
  run_cases test_cuda_engine engine_f32 engine_f16 engine_q8_0 engine_kjv_target engine_kjv_draft \
    engine_session_api engine_graph_cache engine_q4_k_m
fi
head=${HEAD-models/phasemark-kjv-block-f16.gguf}
block_args=()
[ -n "$head" ] && block_args=(--head "$head" --block-k "${BLOCK_KS:-4,6,8,12,16}"
  --hybrid-k "${HYBRID_KS:-4,8}" --block-only "${BLOCK_ONLY:-0}")
run_bench() { # jsonl log
  local start rc
  start=$(date +%s)
  "$bench" --target models/phasemark-kjv-target-q8_0.gguf --draft models/phasemark-kjv-draft-f16.gguf \
    --prompts bench/spec/heldout_prompts.tsv --tokens "${TOKENS:-128}" --reps "${REPS:-2}" \
    --n-prompts "${N_PROMPTS:-24}" --k "${KS:-1,2,3,4,6,8}" --temp 0.7 --seed 7 \
    --ngram-only "${NGRAM_ONLY:-0}" "${block_args[@]}" > "$1" 2> "$2"
  rc=$?
  echo "bench rc=$rc in $(( $(date +%s) - start )) s"
  cat "$1" "$2"
}
# VERIFY_MODES="stationary rows" benches each verify product in turn, in
# this one call (PHASEMARK_CUDA_VERIFY=<mode>: stationary the weight-
# stationary products, rows the per-row grid, auto stationary from 7 rows
# up, the default); every row of loop.<mode>.jsonl names its "verify".
if [ -n "${VERIFY_MODES:-}" ]; then
  for mode in $VERIFY_MODES; do
    export PHASEMARK_CUDA_VERIFY=$mode
    echo "verify products: $mode"
    run_bench "$out/loop.$mode.raw" "$out/bench.$mode.log"
    cp "$out/loop.$mode.raw" "$out/loop.$mode.jsonl"
  done
  unset PHASEMARK_CUDA_VERIFY
else
  run_bench "$out/loop.jsonl" "$out/bench.log"
fi
