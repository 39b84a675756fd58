#!/bin/bash
# run_loop_tools.sh — one device call for the device loop behind the tools
# (issue 16 item 2): pm-generate --device-loop on against off on the KJV
# pair (test_loop_tool cuda_plain, cuda_model, cuda_ngram, cuda_block,
# cuda_sampling)
# and pm-server with the loop (test_server_http device_loop_cuda and
# markers_loop); logs to $OUT, one "NAME rc=N" line each (77: skipped).
#
#   PM_LOOP_TOOLS_BIN=DIR bash bench/cuda/run_loop_tools.sh
#       DIR from bench/cuda/loop_tools_bundle.sh (bin/, lib/): every case
#   bash bench/cuda/run_loop_tools.sh
#       builds pm-generate and test_loop_tool here (build-loop-tools); the
#       server's cases need the bundle (no libmicrohttpd here) and are skipped
set -u
out=${OUT:-$PWD/out-loop-tools}
mkdir -p "$out"
export PHASEMARK_REPO_MODELS=$PWD/models
server=1
if [ -n "${PM_LOOP_TOOLS_BIN:-}" ]; then
  root=$(cd "$PM_LOOP_TOOLS_BIN" && pwd)
  bin=$root/bin
  export LD_LIBRARY_PATH=$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PHASEMARK_RECORDER=$root/lib/libphasemark_recorder.so
else
  B=${PM_LOOP_TOOLS_BUILD:-build-loop-tools}
  # shellcheck source=bench/cuda/device_configure.sh
  . bench/cuda/device_configure.sh
  : > "$out/build.log"
  pm_device_configure "$B" "$out/build.log" -DPHASEMARK_BENCH=OFF || { tail -40 "$out/build.log"; exit 1; }
  cmake --build "$B" -j"$(nproc)" --target pm-generate test_loop_tool >> "$out/build.log" 2>&1 ||
    { grep -E "error" "$out/build.log" | head -40; exit 1; }
  bin=$out/bin
  mkdir -p "$bin"
  cp "$B/tools/generate/pm-generate" "$B/tests/spec/test_loop_tool" "$bin/"
  export LD_LIBRARY_PATH=$PWD/$B/src/mark${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  server=0
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1

for c in cuda_plain cuda_model cuda_ngram cuda_block cuda_sampling; do
  timeout 200 "$bin/test_loop_tool" "$c" "$bin/pm-generate" > "$out/loop_tool.$c.log" 2>&1
  rc=$?
  echo "loop_tool_$c rc=$rc"
  [ $rc -ne 0 ] && [ $rc -ne 77 ] && tail -8 "$out/loop_tool.$c.log"
done
if [ $server = 0 ]; then
  echo "server_http_device_loop_cuda, server_http_markers_loop: not run (need PM_LOOP_TOOLS_BIN)"
  exit 0
fi
# test_server_http wants its synthetic models even for the GPU cases
# (tests/server/CMakeLists.txt writes the same ones).
m=$out/models
mkdir -p "$m"
"$bin/pm-modelwriter" synth -o "$m/server_tiny.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 \
  --ffn 128 --vocab 512 --ctx 256 --type f32 --seed 7 > "$out/models.log" 2>&1
"$bin/pm-modelwriter" synth -o "$m/server_slow.gguf" --dim 256 --layers 4 --heads 8 --kv-heads 4 \
  --ffn 768 --vocab 512 --ctx 4096 --type q8_0 --seed 3 >> "$out/models.log" 2>&1
for c in device_loop_cuda markers_loop; do
  timeout 300 "$bin/test_server_http" "$c" "$bin/pm-server" "$m/server_tiny.gguf" \
    "$m/server_slow.gguf" "$bin/pm-generate" "$bin/phasemark" > "$out/server_http.$c.log" 2>&1
  rc=$?
  echo "server_http_$c rc=$rc"
  [ $rc -ne 0 ] && [ $rc -ne 77 ] && tail -8 "$out/server_http.$c.log"
done
exit 0
