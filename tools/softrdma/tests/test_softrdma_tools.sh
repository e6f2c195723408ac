#!/bin/sh
# softrdma under rdma-core's own, unmodified tools:
#   - ibv_devices lists softrdma0;
#   - ibv_rc_pingpong runs server and client as two processes on softrdma0,
#     polling and with completion events (-e); both must exit 0;
#   - ibv_ud_pingpong likewise, over UD QPs and address handles.
# Every step has a timeout; whatever this script starts it kills.
# Exit 77 (skip) when the tools are not installed.

here=$(cd "$(dirname "$0")" && pwd)
: "${LD_LIBRARY_PATH:=$here/../softrdma}"
: "${SOFTRDMA_FABRIC:=tools-$$}"
export LD_LIBRARY_PATH SOFTRDMA_FABRIC

for tool in ibv_devices ibv_rc_pingpong ibv_ud_pingpong timeout; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "SKIP: $tool is not installed (ibverbs-utils, coreutils)"
		exit 77
	fi
done

tmp=$(mktemp -d /tmp/softrdma-tools.XXXXXX)
spid=
cleanup() {
	[ -n "$spid" ] && kill -9 "$spid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
	echo "FAIL: $*"
	for f in "$tmp"/*.log; do
		[ -f "$f" ] && { echo "--- $f"; cat "$f"; }
	done
	exit 1
}

# 1. the device list
timeout 10 ibv_devices >"$tmp/devices.log" 2>&1 || fail "ibv_devices exited $?"
grep -q 'softrdma0' "$tmp/devices.log" || fail "ibv_devices does not list softrdma0"
echo "ok - ibv_devices lists softrdma0"

# 2. ping-pong: $1 = extra options, $2 = the tool (default ibv_rc_pingpong)
pingpong() {
	pp=${2:-ibv_rc_pingpong}
	tries=0
	while :; do
		tries=$((tries + 1))
		[ $tries -gt 5 ] && fail "no free port for $pp"
		port=$(( (($$ + tries * 7919) % 20000) + 20000 ))
		timeout 30 $pp -d softrdma0 -g 0 -n 1000 -p "$port" $1 \
			>"$tmp/server.log" 2>&1 &
		spid=$!
		# The client retries until the server listens (or has died).
		ok=
		i=0
		while [ $i -lt 100 ]; do
			if ! kill -0 "$spid" 2>/dev/null; then
				break # server exited: port taken, or a failure
			fi
			if timeout 30 $pp -d softrdma0 -g 0 -n 1000 \
				-p "$port" $1 127.0.0.1 >"$tmp/client.log" 2>&1; then
				ok=1
				break
			fi
			grep -q "Couldn't connect" "$tmp/client.log" ||
				fail "$pp client $1 failed"
			sleep 0.1
			i=$((i + 1))
		done
		if [ -n "$ok" ]; then
			wait "$spid"
			rc=$?
			spid=
			[ $rc -eq 0 ] || fail "$pp server $1 exited $rc"
			break
		fi
		wait "$spid" 2>/dev/null
		spid=
		grep -q "Couldn't listen" "$tmp/server.log" ||
			fail "$pp server $1 failed"
	done
	grep -q '1000 iters' "$tmp/server.log" || fail "server did not finish 1000 iterations"
	grep -q '1000 iters' "$tmp/client.log" || fail "client did not finish 1000 iterations"
	echo "ok - $pp $1: $(grep 'iters' "$tmp/client.log")"
}

pingpong ""
pingpong "-e"
pingpong "-s 64"
pingpong "" ibv_ud_pingpong
pingpong "-e" ibv_ud_pingpong
pingpong "-s 1024" ibv_ud_pingpong

if [ -e "/dev/shm/softrdma.$SOFTRDMA_FABRIC" ]; then
	rm -f "/dev/shm/softrdma.$SOFTRDMA_FABRIC"
	fail "the fabric file was left in /dev/shm"
fi
exit 0
