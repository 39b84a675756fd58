#!/bin/sh
# run_timeline.sh — the timeline picture of 1M ranges: bench_timeline's
# sizes and times, then how long headless Chromium takes to open the HTML
# file and paint it (a screenshot), three times. The machine is shared:
# the load average is printed before and after, to go with the numbers.
# usage: bench/tools/run_timeline.sh BUILD_DIR [REPS]
set -eu
build=${1:?usage: run_timeline.sh BUILD_DIR [REPS]}
reps=${2:-5}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
out=$(PM_BENCH_KEEP=1 "$build/bench/tools/bench_timeline" 100 2499 "$reps" 2>&1)
echo "$out" | grep -v '^bench_timeline: kept'
dir=$(echo "$out" | sed -n 's/^bench_timeline: kept //p')
# Chromium's time for a near-empty page, then for the picture: the
# difference is what the picture costs the browser.
shot() { # FILE LABEL
  prof=$(mktemp -d)
  t0=$(date +%s.%N)
  timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$prof" --screenshot="$dir/shot.png" --window-size=1400,900 \
    "file://$1" >/dev/null 2>&1
  t1=$(date +%s.%N)
  rm -rf "$prof"
  echo "{\"page\":\"$2\",\"chromium_screenshot_s\":$(awk "BEGIN{printf \"%.2f\", $t1 - $t0}"),\"png_bytes\":$(stat -c %s "$dir/shot.png")}"
}
if command -v chromium >/dev/null 2>&1; then
  printf '<!DOCTYPE html><html><body><p>empty</p></body></html>\n' >"$dir/empty.html"
  for i in 1 2 3; do
    shot "$dir/empty.html" empty
    shot "$dir/t.html" 1M-ranges
  done
else
  echo "chromium not installed: browser time not measured"
fi
rm -rf "$dir"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
