#!/bin/sh
# installed_test.sh CMAKE BUILD_DIR — the installed tree runs: install the
# whole build into a temporary prefix (the README's one recipe), then run
# every installed program from there with a clean environment (no
# LD_LIBRARY_PATH): --version (or --help for a program without it) must
# exit 0, each must carry RUNPATH $ORIGIN/../lib, and the installed
# phasemark must find its installed recorder (capture, then check).
set -eu
cmake=$1 build=$2
tmp=$(mktemp -d /tmp/pm_installed.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; exit 1; }
[ -d "$prefix/bin" ] || { echo "nothing installed in bin/"; exit 1; }
n=0
for exe in "$prefix"/bin/*; do
  name=$(basename "$exe")
  if command -v readelf >/dev/null 2>&1; then
    readelf -d "$exe" | grep -q 'R.*PATH.*\$ORIGIN/\.\./lib' ||
      { echo "$name: no RUNPATH \$ORIGIN/../lib"; readelf -d "$exe" | grep PATH; exit 1; }
  fi
  if env -u LD_LIBRARY_PATH "$exe" --version >"$tmp/out" 2>&1; then
    grep -q "^$name " "$tmp/out" || { echo "$name --version: $(cat "$tmp/out")"; exit 1; }
  elif ! env -u LD_LIBRARY_PATH "$exe" --help >"$tmp/out" 2>&1; then
    echo "$name does not run from the installed tree:"; cat "$tmp/out"; exit 1
  fi
  n=$((n + 1))
done
pm=$prefix/bin/phasemark
if [ -x "$pm" ]; then
  env -u LD_LIBRARY_PATH -u PHASEMARK_RECORDER "$pm" capture -o "$tmp/cap" -- true 2>"$tmp/cap.log" ||
    { echo "installed capture failed:"; cat "$tmp/cap.log"; exit 1; }
  env -u LD_LIBRARY_PATH "$pm" check "$tmp/cap" >"$tmp/check.log" 2>&1 ||
    { echo "installed check failed:"; cat "$tmp/check.log"; exit 1; }
fi
echo "ok: $n installed programs run from $prefix"
