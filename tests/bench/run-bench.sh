#!/bin/bash
# Runs every benchmark in $BUILD/bench and writes one report,
# $BUILD/bench/report.md, with the machine's description at the top.
# Benchmarks measure against a floor in the same run; they are not tests.
set -u
BUILD=${BUILD:-build}
report=$BUILD/bench/report.md
mkdir -p "$BUILD/bench"
{
	echo "# tickbus benchmark report"
	echo
	echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "- cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') x $(nproc)"
	echo "- kernel: $(uname -r)"
	echo "- isolated cores: $(cat /sys/devices/system/cpu/isolated 2>/dev/null || echo none)"
	echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo
} >"$report"
# Latency benchmarks leave their distributions (.hgrm) here for the plots.
export TB_BENCH_HGRM_DIR="$BUILD/bench"
rm -f "$BUILD"/bench/shm-*.hgrm "$BUILD"/bench/tb-latency* "$BUILD"/bench/*.svg
status=0
for b in "$BUILD"/bench/bench_*; do
	[ -x "$b" ] || continue
	name=$(basename "$b")
	echo "== $name"
	{ echo "## $name"; echo; echo '```'; } >>"$report"
	"$b" 2>&1 | tee -a "$report"
	[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
	echo '```' >>"$report"
	echo >>"$report"
done
# Plots and tables, each figure beside its floor: tb-hist compare gives
# every percentile of each run and its ratio to the first column (the floor).
hist=$BUILD/bin/tb-hist
b=$BUILD/bench
if [ -x "$hist" ] && [ -s "$b/shm-floor-rtt.hgrm" ] && [ -s "$b/shm-tickbus-rtt.hgrm" ]; then
	{
		echo "## shm round trip against the floor (all runs merged)"
		echo
		"$hist" compare --markdown -l "floor (cache line)" -l "tickbus shm" \
			"$b/shm-floor-rtt.hgrm" "$b/shm-tickbus-rtt.hgrm"
		echo
	} >>"$report"
	if "$hist" plot -o "$b/shm-latency.svg" --title "shm round trip vs floor" \
		-l "floor (cache line)" -l "tickbus shm" \
		"$b/shm-floor-rtt.hgrm" "$b/shm-tickbus-rtt.hgrm" >/dev/null; then
		printf '![shm round trip](shm-latency.svg)\n\n' >>"$report"
	else
		status=1
	fi
fi
# tb-latency over shm: round trip for a sweep of sizes, beside the floor's
# round trip from bench_shm.
lat=$BUILD/bin/tb-latency
if [ -x "$lat" ] && [ -s "$b/shm-floor-rtt.hgrm" ]; then
	echo "== tb-latency"
	if "$lat" -n "${TB_BENCH_LAT_COUNT:-100000}" -w 10000 -s 64,512,4096 \
		--cores 0,1 --idle busy-spin --timeout-ms 60000 \
		--hgrm "$b/tb-latency.hgrm" --log "$b/tb-latency.hlog" \
		>"$b/tb-latency.out" 2>&1; then
		{
			echo "## tb-latency: shm round trip by message size, against the floor's round trip"
			echo
			echo '```'
			cat "$b/tb-latency.out"
			echo '```'
			echo
			"$hist" compare --markdown -l "floor RTT" -l "64 B" -l "512 B" \
				-l "4096 B" "$b/shm-floor-rtt.hgrm" "$b/tb-latency-64.hgrm" \
				"$b/tb-latency-512.hgrm" "$b/tb-latency-4096.hgrm"
			echo
		} >>"$report"
		"$hist" plot -o "$b/tb-latency.svg" --title "tb-latency shm round trip" \
			-l "floor RTT" -l "64 B" -l "512 B" -l "4096 B" \
			"$b/shm-floor-rtt.hgrm" "$b/tb-latency-64.hgrm" \
			"$b/tb-latency-512.hgrm" "$b/tb-latency-4096.hgrm" >/dev/null &&
			printf '![tb-latency round trip](tb-latency.svg)\n\n' >>"$report"
	else
		{ echo "## tb-latency: failed"; echo; echo '```'; cat "$b/tb-latency.out"; echo '```'; } >>"$report"
		status=1
	fi
fi
# tb-latency over every transport: 64-byte round trips, beside the floor's
# round trip and shm's.  rc and ud run on softrdma when there is no RDMA NIC
# (a software device: its figures are the cost of the emulation, not of a
# NIC); udp on loopback.
if [ -x "$lat" ] && [ -s "$b/shm-floor-rtt.hgrm" ] && [ -s "$b/tb-latency-64.hgrm" ]; then
	echo "== tb-latency by transport"
	cfgdir=$(mktemp -d /tmp/tickbus-bench.XXXXXX)
	if [ -z "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
		export LD_LIBRARY_PATH="$PWD/$BUILD/softrdma${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
		export SOFTRDMA_FABRIC="bench-$$"
		dev="softrdma (software RDMA device)"
	else
		dev="$(ls /sys/class/infiniband | head -n 1)"
	fi
	base=$((20000 + ($$ % 4000) * 4))
	labels=(-l "floor RTT" -l "shm")
	files=("$b/shm-floor-rtt.hgrm" "$b/tb-latency-64.hgrm")
	for t in rc ud udp; do
		for k in 0 1; do
			port=$base; base=$((base + 1))
			printf '[stream %s]\nid = %d\ntransport = %s\nring_size = 1M\n' \
				"$([ $k = 0 ] && echo ping || echo pong)" $((70 + k)) "$t"
			case $t in
			rc) printf 'control = 127.0.0.1:%d\ntoken = bench\n' "$port" ;;
			ud) printf 'group = 239.192.77.%d:%d\n' $((k + 1)) "$port" ;;
			udp) printf 'group = 239.192.78.%d:%d\ninterface = 127.0.0.1\nloopback = yes\n' \
				$((k + 1)) "$port" ;;
			esac
		done >"$cfgdir/$t.ini"
		if "$lat" -c "$cfgdir/$t.ini" -n "${TB_BENCH_LAT_COUNT:-100000}" -w 10000 \
			--cores 0,1 --idle busy-spin --timeout-ms 60000 \
			--hgrm "$b/tb-latency-$t.hgrm" >"$b/tb-latency-$t.out" 2>&1; then
			labels+=(-l "$t")
			files+=("$b/tb-latency-$t.hgrm")
		else
			echo "tb-latency over $t failed:"; cat "$b/tb-latency-$t.out"
			status=1
		fi
	done
	rm -rf "$cfgdir"
	{
		echo "## tb-latency: 64-byte round trip by transport (rc, ud on $dev)"
		echo
		"$hist" compare --markdown "${labels[@]}" "${files[@]}"
		echo
	} >>"$report"
	"$hist" plot -o "$b/transports.svg" --title "tb-latency round trip by transport" \
		"${labels[@]}" "${files[@]}" >/dev/null &&
		printf '![round trip by transport](transports.svg)\n\n' >>"$report"
fi
# rc one-way latency against perftest's ib_write_lat on the same device in
# the same run (the ratio; on softrdma, a software device's).
echo "== rc against ib_write_lat"
tests/bench/rc-perftest.sh "$BUILD" >>"$report" || status=1
# shm under constant laps: a writer at full speed, readers slowed at
# random, every delivered payload verified (make test runs a bounded one).
stress=$BUILD/tests/test_shm_stress
if [ -x "$stress" ]; then
	frames=${TB_BENCH_STRESS_FRAMES:-300000000}
	echo "== test_shm_stress ($frames frames)"
	{
		echo "## test_shm_stress: $frames frames, readers lapped at random"
		echo
		echo "reproduce: $stress --frames $frames"
		echo
		echo '```'
	} >>"$report"
	"$stress" --frames "$frames" 2>&1 | grep -v '^\[' | tee -a "$report"
	[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
	echo '```' >>"$report"
	echo >>"$report"
fi
echo "report: $report"
exit $status
