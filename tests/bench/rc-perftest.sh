#!/bin/bash
# tickbus rc one-way latency against perftest's ib_write_lat on the same
# RDMA device, in the same run: the floor is what the device itself gives a
# WRITE ping-pong (ib_write_lat's typical = median of half round trips), the
# figure is tb-latency's rc ping-pong median halved (one stream each way,
# WRITE-with-immediate into the subscriber's ring, completion polled).
# Both at 64 bytes, busy-spin, cores 0 and 1; each measured RUNS times
# (default 5), interleaved, and the medians compared.
#
# On softrdma (no RDMA NIC here) both sides pay the emulation (a send
# engine thread per process, process_vm_writev), so the ratio says how much
# tickbus adds on the same software device, not what a NIC would show; the
# NIC goal (the provider's latency + 100 ns) can only be judged on one.
#
#   tests/bench/rc-perftest.sh [BUILD] >> report.md
# Prints a markdown section; exit 0, or 1 when a run failed (and says so).
set -u
BUILD=${1:-${BUILD:-build}}
RUNS=${TB_BENCH_PERFTEST_RUNS:-5}
COUNT=${TB_BENCH_PERFTEST_COUNT:-20000}
lat=$BUILD/bin/tb-latency

echo "## rc one-way latency against ib_write_lat (same device, same run)"
echo
if ! command -v ib_write_lat >/dev/null 2>&1 || [ ! -x "$lat" ]; then
	echo "not measured: ib_write_lat (perftest) or tb-latency is missing"
	echo
	exit 0
fi
if [ -z "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
	export LD_LIBRARY_PATH="$PWD/$BUILD/softrdma${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export SOFTRDMA_FABRIC="bench-perftest-$$"
	dev=softrdma0
	what="softrdma0, the software RDMA device (no RDMA NIC on this machine)"
else
	dev=$(ls /sys/class/infiniband | head -n 1)
	what="$dev"
fi
tmp=$(mktemp -d /tmp/tickbus-rcperf.XXXXXX)
spid=
trap '[ -n "$spid" ] && kill -9 "$spid" 2>/dev/null; rm -rf "$tmp"' EXIT
status=0

# One ib_write_lat run: its 64-byte typical latency in ns, or nothing.
perftest_once() {
	port=$(( (($$ + $1 * 7919) % 20000) + 30000 ))
	taskset -c 0 timeout 120 ib_write_lat -d "$dev" -s 64 -n "$COUNT" -p "$port" \
		>"$tmp/srv.log" 2>&1 &
	spid=$!
	for _ in $(seq 100); do
		if taskset -c 1 timeout 120 ib_write_lat -d "$dev" -s 64 -n "$COUNT" \
			-p "$port" 127.0.0.1 >"$tmp/cli.log" 2>&1; then
			break
		fi
		grep -q "Couldn't connect" "$tmp/cli.log" || break
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.1
	done
	wait "$spid" 2>/dev/null
	spid=
	awk -v n="$COUNT" '$1 == 64 && $2 == n && NF >= 5 { printf "%d\n", $5 * 1000 }' \
		"$tmp/cli.log"
}

# One tb-latency rc ping-pong: its median round trip / 2 in ns, or nothing.
tickbus_once() {
	base=$(( 20000 + (($$ + $1 * 131) % 4000) * 4 ))
	for k in 0 1; do
		printf '[stream %s]\nid = %d\ntransport = rc\nring_size = 1M\n' \
			"$([ $k = 0 ] && echo ping || echo pong)" $((80 + k))
		printf 'control = 127.0.0.1:%d\ntoken = bench\n' $((base + k))
	done >"$tmp/rc.ini"
	"$lat" -c "$tmp/rc.ini" -n "$COUNT" -w 2000 -s 64 --cores 0,1 \
		--idle busy-spin --timeout-ms 60000 >"$tmp/tb.out" 2>&1 || return
	sed -n 's/.* p50=\([0-9]*\).*/\1/p' "$tmp/tb.out" | head -n 1 |
		awk '{ printf "%d\n", $1 / 2 }'
}

median() {
	sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
: >"$tmp/p"
: >"$tmp/t"
for r in $(seq "$RUNS"); do
	p=$(perftest_once "$r")
	t=$(tickbus_once "$r")
	if [ -n "$p" ]; then echo "$p" >>"$tmp/p"; else
		echo "ib_write_lat run $r failed:"; sed 's/^/    /' "$tmp/cli.log"; status=1; fi
	if [ -n "$t" ]; then echo "$t" >>"$tmp/t"; else
		echo "tb-latency rc run $r failed:"; sed 's/^/    /' "$tmp/tb.out"; status=1; fi
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
pm=$(median <"$tmp/p")
tm=$(median <"$tmp/t")
echo "- device: $what"
echo "- 64-byte messages, $COUNT per run, $RUNS runs interleaved, medians;"
echo "  load average $load0 at start, $load1 at the end"
echo
echo "| | one-way latency (ns), median of runs | runs |"
echo "|---|---|---|"
echo "| floor: ib_write_lat (typical = median half round trip) | ${pm:-failed} | $(paste -sd' ' "$tmp/p") |"
echo "| tickbus rc (tb-latency ping-pong p50 / 2) | ${tm:-failed} | $(paste -sd' ' "$tmp/t") |"
if [ -n "$pm" ] && [ -n "$tm" ] && [ "$pm" -gt 0 ]; then
	ratio=$(awk -v a="$tm" -v b="$pm" 'BEGIN { printf "%.2f", a / b }')
	echo
	echo "tickbus rc / ib_write_lat = **$ratio** (tickbus adds $((tm - pm)) ns one way)."
	if [ "$dev" = softrdma0 ]; then
		echo "softrdma is a software device: both figures are dominated by its"
		echo "emulation (a send engine per process, process_vm_writev), so the"
		echo "ratio, not the nanoseconds, is the result; the NIC goal (provider"
		echo "+ 100 ns) needs a real NIC (make test-rdma on one)."
	fi
fi
echo
exit $status
