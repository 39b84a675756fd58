#!/bin/sh
# off_check.sh EXE — case h: a program built with PHASEMARK_DISABLED refers
# to no phasemark symbol (nothing undefined named pm_*, no pm__gate) and
# runs with markers reported off.
set -u
exe=$1
undef=$(nm --undefined-only "$exe" | awk '{print $NF}' | sed 's/@.*//')
echo "$undef" | grep -q 'printf\|puts' || { echo "nm saw no libc import: check is not live"; exit 1; }
bad=$(echo "$undef" | grep -E '^pm_|^pm__')
if [ -n "$bad" ]; then echo "references to phasemark: $bad"; exit 1; fi
if nm "$exe" | grep -q 'pm__gate'; then echo "pm__gate present"; exit 1; fi
if readelf -d "$exe" | grep -q 'libphasemark'; then echo "links libphasemark"; exit 1; fi
out=$("$exe") || { echo "program failed: $out"; exit 1; }
[ "$out" = "backend=off enabled=0" ] || { echo "unexpected output: $out"; exit 1; }
echo "ok: no phasemark reference"
