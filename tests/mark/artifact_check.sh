#!/bin/sh
# artifact_check.sh LIB — promise 6 of docs/markers.md on the built artifact: the marker
# library needs no CUDA/HIP/ROCTX/NVTX library, imports no such symbol and
# reads no clock (no clock import, no rdtsc instruction).
set -u
lib=$1
fail=0
[ -f "$lib" ] || { echo "no such library: $lib"; exit 1; }

needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
undef=$(nm -D --undefined-only "$lib" | awk '{print $NF}' | sed 's/@.*//')
# The check is only meaningful if the tools saw the imports we know exist.
echo "$needed" | grep -qx 'libc.so.6' || { echo "readelf found no libc NEEDED: check is not live"; exit 1; }
echo "$undef" | grep -qx 'dlopen' || { echo "nm found no dlopen import: check is not live"; exit 1; }

bad_needed=$(echo "$needed" | grep -Ei 'cuda|nvrtc|cupti|nvToolsExt|nvtx|amdhip|libhip|roctx|roctracer|rocprof')
if [ -n "$bad_needed" ]; then echo "forbidden NEEDED: $bad_needed"; fail=1; fi

bad_undef=$(echo "$undef" | grep -E '^(clock_gettime|clock_getres|clock|gettimeofday|time|ftime|timespec_get|times|getrusage|cuda.*|cu[A-Z].*|hip.*|roctx.*|nvtx.*)$')
if [ -n "$bad_undef" ]; then echo "forbidden imports: $bad_undef"; fail=1; fi

if objdump -d "$lib" | grep -Eq '[[:space:]]rdtscp?([[:space:]]|$)'; then
  echo "rdtsc instruction in $lib"; fail=1
fi
[ $fail -eq 0 ] && echo "ok: $(echo "$needed" | tr '\n' ' ')| $(echo "$undef" | wc -l) imports, none forbidden"
exit $fail
