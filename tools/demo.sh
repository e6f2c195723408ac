#!/bin/bash
# make demo: a publisher sends quote-like messages at a fixed rate to two
# subscriber processes over RDMA RC (on softrdma, tickbus's software RDMA
# device, when the machine has no RDMA NIC; DEMO_STREAM=quotes for the
# shared-memory ring instead), each printing a line a
# second; at the end, a summary: messages sent and received per subscriber,
# gaps, and one-way latency percentiles from the publish timestamp.
#
#   DEMO_RATE=100000 DEMO_SECONDS=5 tools/demo.sh
set -euo pipefail

BUILD=${BUILD:-build}
BIN=$BUILD/bin
CONFIG=${DEMO_CONFIG:-config/demo.ini}
STREAM=${DEMO_STREAM:-quotes_rc}
RATE=${DEMO_RATE:-50000}
SECONDS_=${DEMO_SECONDS:-5}
COUNT=$((RATE * SECONDS_))
out=$(mktemp -d /tmp/tickbus-demo.XXXXXX)
pids=()

cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$out"
}
trap cleanup EXIT

transport=$(awk -v s="[stream $STREAM]" '$0 == s { f = 1; next } /^\[/ { f = 0 }
	f && $1 == "transport" { print $3 }' "$CONFIG")
if [ "$transport" = rc ] || [ "$transport" = ud ]; then
	if [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
		via="$transport on this machine's RDMA device"
	else
		export LD_LIBRARY_PATH="$PWD/$BUILD/softrdma${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
		export SOFTRDMA_FABRIC="demo-$$"
		via="$transport on softrdma, tickbus's software RDMA device (this machine has no RDMA NIC)"
	fi
else
	via="$transport (one host)"
fi
echo "tickbus demo: transport $via"
echo "  stream '$STREAM' from $CONFIG, $RATE msg/s for ${SECONDS_}s"
echo "  a publisher and two strategies, each pinned nowhere, idling spin-then-yield"
echo

for s in strategy-a strategy-b; do
	"$BIN/tb-subscribe" -c "$CONFIG" -s "$STREAM" --count "$COUNT" \
		--timeout-ms $(( (SECONDS_ + 30) * 1000 )) --latency --report \
		--hgrm "$out/$s.hgrm" --name "$s" >"$out/$s.out" 2>&1 &
	pids+=($!)
done
# The subscribers attach first, so they read the epoch from its first message
# (rc: they connect, and retry until the publisher listens).
sleep 0.3
"$BIN/tb-publish" -c "$CONFIG" -s "$STREAM" --count "$COUNT" --rate "$RATE" \
	--report --linger-ms 200 --start-delay-ms 1000 | tee "$out/pub.out" &
pids+=($!)
pub=$!
# Relay the subscribers' per-second lines while the publisher runs.
tail -q -n +1 -f "$out/strategy-a.out" "$out/strategy-b.out" --pid "$pub" 2>/dev/null \
	| grep --line-buffered ' t=' &
wait "$pub"
status=0
for i in 0 1; do wait "${pids[$i]}" || status=$?; done
sleep 0.2

field() { grep -o " $2=[^ ]*" "$1" | tail -n 1 | cut -d= -f2; }
us() { awk -v n="$1" 'BEGIN { if (n == "") print "-"; else printf "%.1f", n / 1000 }'; }

published=$(field "$out/pub.out" published)
checksum=$(field "$out/pub.out" checksum)
echo
echo "== summary =="
echo "published: $published messages, checksum $checksum"
printf '%-12s %10s %6s %6s %9s %9s %9s %9s %9s\n' subscriber delivered lost gaps checksum \
	"p50 us" "p99 us" "p99.9 us" "max us"
for s in strategy-a strategy-b; do
	f="$out/$s.out"
	sum=$(field "$f" checksum)
	match=$([ "$sum" = "$checksum" ] && echo match || echo DIFFERS)
	printf '%-12s %10s %6s %6s %9s %9s %9s %9s %9s\n' "$s" "$(field "$f" delivered)" \
		"$(field "$f" lost)" "$(( $(field "$f" gaps) + $(field "$f" laps) ))" "$match" \
		"$(us "$(field "$f" p50)")" "$(us "$(field "$f" p99)")" \
		"$(us "$(field "$f" p99.9)")" "$(us "$(field "$f" max)")"
	[ "$match" = match ] || status=1
done
mkdir -p "$BUILD/demo"
cp "$out"/*.hgrm "$BUILD/demo/" 2>/dev/null || true
echo "latency distributions: $BUILD/demo/strategy-a.hgrm, $BUILD/demo/strategy-b.hgrm"
echo "(one-way latency from the publish timestamp to the subscriber's poll, same-host TSC)"
BUILD=$BUILD tools/demo-recovery.sh || status=1
exit $status
