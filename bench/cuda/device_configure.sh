# shellcheck shell=bash
# device_configure.sh — sourced, not run: configures the tree for the GPU
# machine, which lacks OpenBLAS, libmicrohttpd, jansson and nettle.
#
#   . bench/cuda/device_configure.sh
#   pm_device_configure BUILD_DIR LOG [CMAKE_ARG...]     # 0 ok, else cmake's status
#   cmake --build BUILD_DIR --target "${PM_DEVICE_TEST_TARGETS[@]}"
#   pm_device_tests BUILD_DIR TESTS_LOG                  # prints the summary lines
#   pm_device_build BUILD_DIR LOG TARGET...   # configure (-Werror, benches) + build
#   pm_device_suite_until BUILD_DIR TESTS_LOG END        # the suite, time-boxed
#
# Without a system BLAS, the engine's CPU backend (the reference CUDA results
# are compared with) links bench/cuda/device/cblas_shim.c, a plain fp32
# sgemm, through the engine's PM_OPENBLAS_LIB / PM_CBLAS_INCLUDE cache
# variables (PM_FORCE_SHIM=1 forces it). Parts that need libmicrohttpd or
# jansson get configure-time pkg-config stubs so that the whole tree
# configures; callers then build only the targets that do not need them.
# Run from the repository root; the caller's shell gets PKG_CONFIG_PATH.

pm_device_configure() {
  local b=$1 log=$2
  shift 2
  local blas_args=()
  mkdir -p "$b"
  if [ -n "${PM_FORCE_SHIM:-}" ] || { ! pkg-config --exists openblas 2>/dev/null &&
     ! ls /usr/include/*/openblas*/cblas.h /usr/include/openblas/cblas.h >/dev/null 2>&1; }; then
    mkdir -p "$b/shim"
    gcc -O2 -fPIC -c bench/cuda/device/cblas_shim.c -o "$b/shim/cblas_shim.o" &&
      ar rcs "$b/shim/libopenblas.a" "$b/shim/cblas_shim.o" || return 1
    blas_args=(-DPM_CBLAS_INCLUDE="$PWD/bench/cuda/device" -DPM_OPENBLAS_LIB="$PWD/$b/shim/libopenblas.a")
    echo "no system BLAS: using the sgemm shim" >> "$log"
  fi
  mkdir -p "$b/pcstub"
  local mod
  for mod in libmicrohttpd jansson nettle; do
    pkg-config --exists $mod 2>/dev/null ||
      printf 'Name: %s\nDescription: configure-time stub (not built here)\nVersion: 0\nCflags:\nLibs:\n' \
        $mod > "$b/pcstub/$mod.pc"
  done
  export PKG_CONFIG_PATH=$PWD/$b/pcstub${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DPHASEMARK_CUDA=ON "${blas_args[@]}" "$@" >> "$log" 2>&1
}

# Every CUDA test executable and what test_split's cuda case needs: one
# list, so a new cuda.* test is built by every device script (a missing
# executable is a "Not Run" failure of ctest -R '^cuda\.').
# shellcheck disable=SC2034
PM_DEVICE_TEST_TARGETS=(test_cuda_kernels test_cuda_attention test_cuda_sample test_cuda_api
                        test_cuda_seam test_cuda_engine test_cuda_features test_cuda_greedy
                        test_cuda_loop test_cuda_loop_ranges test_cuda_block test_split
                        pm-shardd)

# Runs every cuda.* case in BUILD_DIR, then test_split's cuda case, into
# TESTS_LOG (with the tolerance lines the tests print); prints ctest's
# verdict, its failed cases and test_split's status.
pm_device_tests() {
  local b=$1 log=$2
  export PHASEMARK_REPO_MODELS=$PWD/models
  (cd "$b" && timeout 240 ctest -R '^cuda\.' --output-on-failure --timeout 200 -j4) > "$log" 2>&1
  grep -E 'tests passed|tests failed' "$log"
  grep -E '\(Failed\)|\(Timeout\)|\(SEGFAULT\)|Not Run' "$log"
  grep -hE 'rel err|max logit|near tie|warm-up|capture|FAIL|check failed|differ|tol' \
    "$b/Testing/Temporary/LastTest.log" >> "$log" 2>/dev/null
  timeout 120 "$b/tests/split/test_split" cuda >> "$log" 2>&1
  echo "test_split cuda: rc=$?"
}

# Configures BUILD_DIR with -Werror and the benchmarks and builds every CUDA
# test executable and the extra TARGETs, into LOG; on failure prints the
# configure log's tail or the compiler's errors and returns 1. The CUDA
# sources compile split (PM_DEVICE_SPLIT=OFF: serially): cuda_matmul.cu
# takes 68 s instead of 182 s there; its SASS is the serial build's but for
# 104 of 1.74 million lines (bench/results/cuda_sample.md).
pm_device_build() {
  local b=$1 log=$2
  shift 2
  : > "$log"
  pm_device_configure "$b" "$log" -DPHASEMARK_WERROR=ON -DPHASEMARK_BENCH=ON \
    -DPHASEMARK_CUDA_SPLIT_COMPILE="${PM_DEVICE_SPLIT:-ON}" ||
    { tail -40 "$log"; return 1; }
  cmake --build "$b" -j"$(nproc)" --target "${PM_DEVICE_TEST_TARGETS[@]}" "$@" >> "$log" 2>&1 ||
    { grep -E "error" "$log" | head -40; return 1; }
}

# The cuda.* suite, then test_split's cuda case, into TESTS_LOG, each only
# if it can finish before END (seconds since the epoch: the caller's device
# call ends then); prints the seconds left, ctest's verdict and failed
# cases, and test_split's status.
pm_device_suite_until() {
  local b=$1 log=$2 end=$3
  local left=$(( end - $(date +%s) ))
  echo "suite: $left s left"
  [ $left -gt 60 ] || return 0
  export PHASEMARK_REPO_MODELS=$PWD/models
  (cd "$b" && timeout $(( left - 30 )) ctest -R '^cuda\.' --output-on-failure --timeout 150 -j4) \
    > "$log" 2>&1
  grep -E 'tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run' "$log"
  left=$(( end - $(date +%s) ))
  if [ $left -gt 25 ]; then
    timeout $(( left - 5 )) "$b/tests/split/test_split" cuda >> "$log" 2>&1
    echo "test_split cuda: rc=$?"
  fi
}
