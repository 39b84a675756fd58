#!/bin/sh
# timens_test.sh PHASEMARK PM_SHARDD PM_GENERATE MODEL
#
# A shard daemon whose CLOCK_BOOTTIME really is 5 s ahead: it runs in a
# time namespace of its own (unshare -T --boottime 5, which needs
# CAP_SYS_ADMIN; without it the test exits 77). Daemon and driver are
# captured apart, as on two hosts. The driver's clock probes give the
# daemon's capture an offset of -5 s within a stated bound, capture moves
# the daemon's ranges by it, and `phasemark check` over both captures finds
# every remote leaf inside the driver's phase range of its request (the
# cross-process phase rules), which fails without the move.
set -u
pm=$1 shardd=$2 gen=$3 model=$4
command -v pgrep >/dev/null || { echo "timens_test: no pgrep (procps); skipped"; exit 77; }
unshare -T --boottime 5 --fork true 2>/dev/null || {
    echo "timens_test: no time namespace here (unshare -T needs CAP_SYS_ADMIN); skipped"
    exit 77
}
dir=$(mktemp -d /tmp/pm_timens_XXXXXX)
spid=
cleanup() {
    [ -n "$spid" ] && kill -TERM "$spid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "timens_test: $*"; exit 1; }

# The namespace applies to unshare's child (--fork), the daemon.
"$pm" capture -o "$dir/shard" -- unshare -T --boottime 5 --fork \
    "$shardd" --model "$model" --layers 3-5 --shard 1 --listen "unix:$dir/s.sock" \
    >"$dir/shard.log" 2>&1 &
cap=$!
i=0
while [ ! -S "$dir/s.sock" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
[ -S "$dir/s.sock" ] || { cat "$dir/shard.log"; fail "the daemon did not listen"; }
ushare=$(pgrep -P "$cap")
spid=$(pgrep -P "$ushare")
[ -n "$spid" ] || fail "no daemon process under unshare"

"$pm" capture -o "$dir/driver" -- "$gen" -m "$model" -p "In the beginning" -n 8 \
    --placement "0-2@local,3-5@unix:$dir/s.sock" >"$dir/driver.log" 2>&1 ||
    { cat "$dir/driver.log"; fail "the driver failed"; }
# unshare waits for its child and ignores SIGTERM: stop the daemon itself.
kill -TERM "$spid"
spid=
wait "$cap"
line=$(grep "phasemark capture: clock: pid" "$dir/shard.log") ||
    { cat "$dir/shard.log"; fail "the daemon's capture states no clock shift"; }
echo "$line"
# "... shifted by -5000000401 ns +- 12629 ns (1 record)"
off=$(echo "$line" | sed -n 's/.*shifted by \(-[0-9]*\) ns +- \([0-9]*\) ns (1 record)$/\1/p')
bound=$(echo "$line" | sed -n 's/.*shifted by \(-[0-9]*\) ns +- \([0-9]*\) ns (1 record)$/\2/p')
[ -n "$off" ] && [ -n "$bound" ] || fail "unexpected clock line: $line"
miss=$((off + 5000000000))
[ "${miss#-}" -le "$bound" ] || fail "offset $off is not within $bound ns of -5 s"
[ "$bound" -lt 1000000000 ] || fail "bound $bound ns is a second or more"

# A prefill and 7 decode steps, each with a local leaf (driver) and a
# remote one (daemon).
out=$("$pm" check --expect "prefill=1,decode=7,layer_range:exact=2,layer_range:decode=14" \
      "$dir/driver" "$dir/shard") || { echo "$out"; fail "check over both captures"; }
echo "$out" | grep -q "^clock: pid [0-9]*: on the driver's clock, shifted by $off ns +- $bound ns (1 record)$" ||
    { echo "$out"; fail "check does not state the shift"; }
echo "$out" | grep -q "^warning: clock" && { echo "$out"; fail "check warns"; }
echo "$out" | tail -1
echo "timens_test: ok (offset $off ns +- $bound ns)"
