#!/bin/sh
# cxx_check.sh COMPILER STD INCLUDE LIBDIR SRC [run|copy|c] [EXTRA_FLAGS]
# Compiles SRC with -Wall -Wextra -Wpedantic -Werror at -std=STD and runs
# it against libphasemark in LIBDIR. "copy": the copy of a scoped range
# must NOT compile. "c": SRC is C, checked for -Wpedantic cleanliness only.
# EXTRA_FLAGS: a sanitizer build's flags, so the program carries the same
# runtime as the library. Exit 77 when the compiler is absent.
set -u
cc=$1 std=$2 inc=$3 libdir=$4 src=$5 what=${6:-run} extra=${7:-}
command -v "$cc" >/dev/null 2>&1 || { echo "skipped: $cc not installed"; exit 77; }
out=$(mktemp /tmp/pm-cxx.XXXXXX) || exit 1
trap 'rm -f "$out"' EXIT
flags="-std=$std -Wall -Wextra -Wpedantic -Werror -I$inc"
case $what in
copy)
  if "$cc" $flags -DPM_COPY_MUST_FAIL -fsyntax-only "$src" 2>"$out"; then
    echo "copying pm::scoped_range compiled"; exit 1; fi
  grep -q "deleted" "$out" || { cat "$out"; echo "failed for another reason"; exit 1; }
  echo "ok: copy refused"; exit 0 ;;
compile)
  "$cc" $flags -fsyntax-only "$src" || exit 1
  echo "ok: compiles (run in the plain build)"; exit 0 ;;
c)
  "$cc" $flags -x c -fsyntax-only "$src" || exit 1
  echo "ok: C header pedantic-clean"; exit 0 ;;
esac
"$cc" $flags $extra -fvisibility=hidden -rdynamic "$src" -L"$libdir" -lphasemark -Wl,-rpath,"$libdir" \
  -o "$out" || exit 1
"$out"
