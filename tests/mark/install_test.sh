#!/bin/sh
# install_test.sh CMAKE BUILD_DIR EXAMPLES_DIR CC EXTRA_CFLAGS — packaging:
# install the marker layer into a temporary prefix, then build examples/
# against the installed copy twice (find_package and pkg-config) and run
# both programs. Everything happens under one temp dir, removed at exit.
set -eu
cmake=$1 build=$2 examples=$3 cc=$4 extra=${5:-}
tmp=$(mktemp -d /tmp/pm_install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

"$cmake" --install "$build" --prefix "$prefix" --component phasemark >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; exit 1; }
for f in include/phasemark/mark.h include/phasemark/phase.h; do
  [ -f "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
pc=$(find "$prefix" -name phasemark.pc | head -n 1)
cfg=$(find "$prefix" -name phasemarkConfig.cmake | head -n 1)
[ -n "$pc" ] && [ -n "$cfg" ] || { echo "package files missing"; find "$prefix"; exit 1; }
libdir=$(dirname "$(find "$prefix" -name 'libphasemark.so' | head -n 1)")

# 1. CMake package, nested configure of examples/ as its own project.
"$cmake" -S "$examples" -B "$tmp/ex-cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$extra" >"$tmp/cfg.log" 2>&1 ||
  { cat "$tmp/cfg.log"; exit 1; }
"$cmake" --build "$tmp/ex-cmake" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
exe=$tmp/ex-cmake/phasemark-example
out=$(PHASEMARK=0 "$exe" --prompt 11 --chunk 8 --tokens 3) || { echo "$out"; exit 1; }
echo "$out" | grep -q '^ranges=' || { echo "unexpected output: $out"; exit 1; }

# 2. pkg-config, compiler driven by hand.
if command -v pkg-config >/dev/null 2>&1; then
  flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs phasemark)
  # shellcheck disable=SC2086
  "$cc" -std=c11 $extra "$examples/synthetic_request.c" $flags -o "$tmp/ex-pc"
  out2=$(LD_LIBRARY_PATH=$libdir PHASEMARK=0 "$tmp/ex-pc" --prompt 11 --chunk 8 --tokens 3) ||
    { echo "$out2"; exit 1; }
  [ "$out" = "$out2" ] || { echo "outputs differ: '$out' vs '$out2'"; exit 1; }
else
  echo "pkg-config not installed: pkg-config half not run"
fi
echo "ok: installed to a temp prefix, example built with find_package and pkg-config"
