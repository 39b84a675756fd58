#!/bin/bash
# loop_tools_bundle.sh — run on the BUILD machine (not the GPU one): builds
# what bench/cuda/run_loop_tools.sh runs on the GPU machine, which lacks
# libmicrohttpd, jansson and OpenBLAS, so pm-server and its HTTP test cannot
# be built there. Configures a CUDA build for sm_90a whose CPU backend links
# bench/cuda/device/cblas_shim.c instead of OpenBLAS (pkg-config sees every
# module but openblas), builds the tools and the two test programs, and
# copies them, stripped, with the shared libraries the GPU machine lacks
# into DEST (bin/ and lib/).
#
#   bash bench/cuda/loop_tools_bundle.sh [BUILD_DIR [DEST]]
#        defaults: /tmp/b-loop-tools and .try/loopwire/loop-tools
#   JOBS=N  parallel build jobs (default 1: the build machine is shared)
set -eu
B=${1:-/tmp/b-loop-tools}
DEST=${2:-.try/loopwire/loop-tools}
src=$PWD
mkdir -p "$B/shim" "$B/pkgconfig"
gcc -O2 -fPIC -c bench/cuda/device/cblas_shim.c -o "$B/shim/cblas_shim.o"
ar rcs "$B/shim/libopenblas.a" "$B/shim/cblas_shim.o"
# Every module's .pc file but OpenBLAS's, so the engine takes the shim.
for d in /usr/lib/x86_64-linux-gnu/pkgconfig /usr/share/pkgconfig /usr/lib/pkgconfig; do
  [ -d "$d" ] || continue
  for pc in "$d"/*.pc; do
    [ -e "$pc" ] || continue
    case $(basename "$pc") in openblas*) ;; *) cp -n "$pc" "$B/pkgconfig/" ;; esac
  done
done
export PKG_CONFIG_LIBDIR=$B/pkgconfig
cmake -S "$src" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DPHASEMARK_CUDA=ON -DPHASEMARK_BENCH=OFF -DPM_CBLAS_INCLUDE="$src/bench/cuda/device" \
  -DPM_OPENBLAS_LIB="$B/shim/libopenblas.a" > "$B/bundle-configure.log"
cmake --build "$B" -j"${JOBS:-1}" --target pm-generate pm-server pm-modelwriter phasemark_cli \
  phasemark_recorder test_loop_tool test_server_http > "$B/bundle-build.log"
mkdir -p "$DEST/bin" "$DEST/lib"
for f in tools/generate/pm-generate tools/server/pm-server tools/modelwriter/pm-modelwriter \
         tools/phasemark/phasemark tests/spec/test_loop_tool tests/server/test_server_http; do
  strip -o "$DEST/bin/$(basename "$f")" "$B/$f"
done
cp -L "$(find "$B" -name libphasemark_recorder.so | head -1)" "$DEST/lib/"
cp -L "$B/src/mark/libphasemark.so.0" "$DEST/lib/"
# What the binaries load from the system beyond glibc, the C++ runtime and
# CUDA (which the GPU machine has): libmicrohttpd, jansson and their chain.
for lib in $(ldd "$DEST/bin/pm-server" "$DEST/bin/test_server_http" "$DEST/bin/phasemark" |
             awk '/=> \// {print $3}' | sort -u); do
  case $(basename "$lib") in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++*|libgcc_s*|libcu*|libphasemark*) ;;
    *) cp -L "$lib" "$DEST/lib/" ;;
  esac
done
du -sh "$DEST"
