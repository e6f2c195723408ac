#!/bin/sh
# perftest (Debian's perftest package), unmodified, with its defaults, on
# softrdma: server and client as two processes over loopback.
#   - ib_write_lat (RC), ib_send_lat (RC) and ib_send_lat -c UD;
#   - softrdma reports a ConnectX-5, so perftest takes its mlx5 defaults:
#     the ibv_wr_* API ("ibv_wr* API : ON"), inline 220 / 236 / 188;
#   - both ends must exit 0 and print a latency table (the 2-byte row:
#     1000 iterations and a typical latency).
# Every step has a timeout; whatever this script starts it kills.  Exit 77
# (skip) when perftest is not installed (tests/deps.sh installs it).

here=$(cd "$(dirname "$0")" && pwd)
: "${LD_LIBRARY_PATH:=$here/../softrdma}"
: "${SOFTRDMA_FABRIC:=perftest-$$}"
export LD_LIBRARY_PATH SOFTRDMA_FABRIC

for tool in ib_write_lat ib_send_lat timeout; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "SKIP: $tool is not installed (perftest, coreutils)"
		exit 77
	fi
done

tmp=$(mktemp -d /tmp/softrdma-perftest.XXXXXX)
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

# The 2-byte result row: "2 1000 t_min t_max t_typical ...": prints
# t_typical, or fails.
typical() {
	awk '$1 == 2 && $2 == 1000 && NF >= 5 { print $5; found = 1 }
	     END { exit !found }' "$1"
}

# $1 = tool, $2 = extra options, $3 = the inline size perftest must take
run() {
	tool=$1
	tries=0
	while :; do
		tries=$((tries + 1))
		[ $tries -gt 5 ] && fail "no free port for $tool $2"
		port=$(( (($$ + tries * 7919) % 20000) + 21000 ))
		timeout 60 $tool -d softrdma0 -p "$port" $2 >"$tmp/server.log" 2>&1 &
		spid=$!
		ok=
		i=0
		while [ $i -lt 100 ]; do
			kill -0 "$spid" 2>/dev/null || break
			if timeout 60 $tool -d softrdma0 -p "$port" $2 127.0.0.1 \
				>"$tmp/client.log" 2>&1; then
				ok=1
				break
			fi
			grep -q "Couldn't connect" "$tmp/client.log" ||
				fail "$tool $2 client failed"
			sleep 0.1
			i=$((i + 1))
		done
		if [ -n "$ok" ]; then
			wait "$spid"
			rc=$?
			spid=
			[ $rc -eq 0 ] || fail "$tool $2 server exited $rc"
			break
		fi
		wait "$spid" 2>/dev/null
		spid=
		grep -q "Couldn't listen\|Address already in use\|bind" "$tmp/server.log" ||
			fail "$tool $2 server failed"
	done
	grep -q 'ibv_wr\* API *: ON' "$tmp/client.log" ||
		fail "$tool $2 did not use the ibv_wr_* API"
	grep -q "Max inline data : $3\[B\]" "$tmp/client.log" ||
		fail "$tool $2: inline size is not perftest's mlx5 default ($3)"
	c=$(typical "$tmp/client.log") || fail "$tool $2: no latency row on the client"
	s=$(typical "$tmp/server.log") || fail "$tool $2: no latency row on the server"
	echo "ok - $tool $2: typical one-way latency $c us (client), $s us (server)"
}

run ib_write_lat "" 220
run ib_send_lat "" 236
run ib_send_lat "-c UD" 188

if [ -e "/dev/shm/softrdma.$SOFTRDMA_FABRIC" ]; then
	rm -f "/dev/shm/softrdma.$SOFTRDMA_FABRIC"
	fail "the fabric file was left in /dev/shm"
fi
exit 0
