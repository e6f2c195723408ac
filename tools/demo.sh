#!/bin/bash
# make demo: the whole story on one host.
#
#   tb-feedsim --(MoldUDP64/ITCH over UDP, packets dropped)--> tb-feedhandler
#   tb-feedhandler --(market-data schema)--> stream md_rc (RDMA RC)
#                                        --> stream md_ud (RDMA UD, datagrams
#                                            dropped by softrdma)
#   md_rc --> tb-strategy "strategy-a"  --orders (UDP)--> tb-gateway
#   md_ud --> tb-strategy "strategy-b"  --orders (UDP)--> tb-gateway
#   md_ud --> tb-recoveryd (store; its own gaps filled from the feed
#             handler's retention) <--replay requests-- strategy-b
#
# RC and UD run on softrdma, tickbus's software RDMA device, when the
# machine has no RDMA NIC.  The feed handler re-requests the feed's gaps from
# the simulator's retransmission port; strategy-b recovers md_ud's gaps from
# tb-recoveryd.  At the end: tick to trade per hop for each strategy
# (p50/p99/p99.9/max), the gaps seen on the feed and on each stream and how
# they were recovered, the orders sent and acked, the histograms and an SVG
# plot of them.  Then tools/demo-recovery.sh: a lapped shm reader, a late
# joiner and a recovery service killed with SIGKILL.
#
#   DEMO_RATE=20000 DEMO_SECONDS=5 DEMO_FEED_DROP=0.01 DEMO_UD_DROP=0.001 \
#     tools/demo.sh
set -euo pipefail

BUILD=${BUILD:-build}
BIN=$BUILD/bin
CONFIG=${DEMO_CONFIG:-config/demo.ini}
RATE=${DEMO_RATE:-20000}
SECONDS_=${DEMO_SECONDS:-5}
FEED_DROP=${DEMO_FEED_DROP:-0.01}
UD_DROP=${DEMO_UD_DROP:-0.001}
COUNT=$((RATE * SECONDS_))
FEED_PORT=$((32000 + ($$ % 15000) * 2))
RETRANS_PORT=$((FEED_PORT + 1))
out=$(mktemp -d /tmp/tickbus-demo.XXXXXX)
# The demo's processes keep their counters files apart, for tb-stat.
export TICKBUS_COUNTERS_DIR=$out/counters
mkdir -p "$TICKBUS_COUNTERS_DIR"
pids=()

cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$out"
}
trap cleanup EXIT

if [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
	via="rc + ud on this machine's RDMA device"
else
	export LD_LIBRARY_PATH="$PWD/$BUILD/softrdma${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export SOFTRDMA_FABRIC="demo-$$"
	via="rc + ud on softrdma, tickbus's software RDMA device (this machine has no RDMA NIC)"
fi
echo "tickbus demo: transport $via"
echo "  tb-feedsim -> tb-feedhandler -> streams md_rc (rc) and md_ud (ud) of $CONFIG"
echo "  -> strategy-a (md_rc) and strategy-b (md_ud) -> tb-gateway;" \
	"tb-recoveryd stores md_ud and replays its gaps"
echo "  feed: $RATE msg/s for ${SECONDS_}s, ${FEED_DROP} of its packets dropped;" \
	"ud: ${UD_DROP} of datagrams dropped"
echo

stream_key() { # stream key: the value of key in [stream NAME] of $CONFIG
	awk -v want="[stream $1]" -v key="$2" '
		/^\[/ { in_s = ($0 == want) }
		in_s && $1 == key { sub(/^[^=]*= */, ""); sub(/,.*/, ""); print; exit }
	' "$CONFIG"
}

wait_for() { # file text seconds
	local i
	for ((i = 0; i < $3 * 20; i++)); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.05
	done
	echo "demo: timed out waiting for '$2' in $1:" >&2
	cat "$1" >&2
	return 1
}

"$BIN/tb-gateway" -p 0 >"$out/gateway.out" 2>&1 &
pids+=($!)
gw=$!
wait_for "$out/gateway.out" ready 10
gw_port=$(grep -o 'port=[0-9]*' "$out/gateway.out" | head -n 1 | cut -d= -f2)

limit_ms=$(((SECONDS_ + 60) * 1000))
st_pids=()
for s in a:md_rc b:md_ud; do
	name=strategy-${s%%:*}
	"$BIN/tb-strategy" -c "$CONFIG" -s "${s#*:}" -n "$name" \
		-g "127.0.0.1:$gw_port" --hgrm-dir "$out" --timeout-ms "$limit_ms" \
		--ack-wait-ms 1000 >"$out/$name.out" 2>&1 &
	pids+=($!)
	st_pids+=($!)
done
wait_for "$out/strategy-a.out" ready 10
wait_for "$out/strategy-b.out" ready 10

# md_ud's recovery service: strategy-b asks it for every gap.  Its own
# gaps (the same datagrams are lost to it) it fills from the feed handler's
# retention buffer.
"$BIN/tb-recoveryd" -c "$CONFIG" -s md_ud -d "$out/store" \
	-l "$(stream_key md_ud recovery)" >"$out/recoveryd.out" 2>&1 &
pids+=($!)
rd=$!
wait_for "$out/recoveryd.out" listening 10

# The loss on md_ud is injected at the publisher's side of softrdma, so the
# variable is given to the feed handler only.
SOFTRDMA_UD_DROP=$UD_DROP "$BIN/tb-feedhandler" -c "$CONFIG" -s md_rc -s md_ud \
	-g 127.0.0.1 -p "$FEED_PORT" -R "$RETRANS_PORT" --gap-timeout-ms 50 \
	--timeout-ms "$limit_ms" --linger-ms 500 >"$out/feedhandler.out" 2>&1 &
pids+=($!)
fh=$!
wait_for "$out/feedhandler.out" ready 10
# The rc strategy connects while the simulator sends heartbeats only.
"$BIN/tb-feedsim" -g 127.0.0.1 -p "$FEED_PORT" -R "$RETRANS_PORT" -N 8 \
	-n "$COUNT" -r "$RATE" --drop "$FEED_DROP" --start-delay-ms 1000 \
	--end-ms 5000 -s 7 >"$out/feedsim.out" 2>&1 &
pids+=($!)
sim=$!

# A line a second while the feed runs, from tb-stat: each process's
# messages per second on each stream (> publishes, < receives), and the
# recovery requests of those that have made any.
progress() {
	local t=0 line
	while kill -0 "$fh" 2>/dev/null; do
		line=$("$BIN/tb-stat" --once -d "$TICKBUS_COUNTERS_DIR" 2>/dev/null | awk '
			NR > 2 && $5 != "recovery" {
				p = $2; sub(/^tb-/, "", p)
				s = s sprintf("  %s%s%s %d/s", p,
					      $5 == "publisher" ? ">" : "<", $3, $7)
				if ($12 > 0) s = s sprintf(" (%d recovery requests)", $12)
			}
			END { print s }')
		t=$((t + 1))
		kill -0 "$fh" 2>/dev/null && echo "t=${t}s${line}"
	done
}
echo "running: feed for ${SECONDS_}s, then end of session ..."
progress &
prog=$!
pids+=($prog)
status=0
wait "$fh" || status=$?
kill "$prog" 2>/dev/null || true
wait "$prog" 2>/dev/null || true
for p in "${st_pids[@]}"; do wait "$p" || status=$?; done
kill -TERM "$sim" "$gw" "$rd" 2>/dev/null || true
wait "$sim" 2>/dev/null || true
wait "$gw" 2>/dev/null || true
wait "$rd" 2>/dev/null || true

field() { grep -o " $2=[^ ]*" "$1" | tail -n 1 | cut -d= -f2; }
us() { awk -v n="$1" 'BEGIN { if (n == "") print "-"; else printf "%.1f", n / 1000 }'; }

fh_out=$out/feedhandler.out
sim_out=$out/feedsim.out
echo
echo "== feed =="
echo "tb-feedsim: $(field "$sim_out" messages) messages, $(field "$sim_out" dropped) packets" \
	"dropped, $(field "$sim_out" requests) re-requests answered"
echo "tb-feedhandler: $(field "$fh_out" messages) sequences applied," \
	"$(field "$fh_out" feed_gaps) gaps detected, $(field "$fh_out" filled) filled by" \
	"retransmission, $(field "$fh_out" lost) lost, $(field "$fh_out" malformed) malformed packets"
echo "published: $(field "$fh_out" published) messages per stream ($(field "$fh_out" quotes)" \
	"Quote, $(field "$fh_out" trades) Trade, $(field "$fh_out" level_updates) BookLevelUpdate," \
	"$(field "$fh_out" instruments) InstrumentDefinition, $(field "$fh_out" statuses) TradingStatus)"

echo
echo "== tick to trade per hop (us; same-host clock) =="
printf '%-11s %-20s %7s %9s %9s %9s %9s\n' strategy hop orders p50 p99 p99.9 max
for s in strategy-a strategy-b; do
	f=$out/$s.out
	for hop in feed_to_publish publish_to_receive receive_to_decision \
		decision_to_send send_to_gateway tick_to_trade; do
		printf '%-11s %-20s %7s %9s %9s %9s %9s\n' "$s" "$hop" \
			"$(field "$f" "${hop}_count")" "$(us "$(field "$f" "${hop}_p50")")" \
			"$(us "$(field "$f" "${hop}_p99")")" "$(us "$(field "$f" "${hop}_p999")")" \
			"$(us "$(field "$f" "${hop}_max")")"
	done
done

echo
echo "== streams, gaps, recovery and orders =="
printf '%-11s %-6s %9s %5s %5s %10s %9s %9s %5s %7s %6s %s\n' strategy stream received \
	gaps laps recoveries replayed data_loss lost orders acks top-of-book
want=$(field "$fh_out" top_checksum)
for s in strategy-a:md_rc strategy-b:md_ud; do
	name=${s%%:*}
	f=$out/$name.out
	sum=$(field "$f" top_checksum)
	match=$([ "$sum" = "$want" ] && echo "matches the handler's" || echo DIFFERS)
	printf '%-11s %-6s %9s %5s %5s %10s %9s %9s %5s %7s %6s %s\n' "$name" "${s#*:}" \
		"$(field "$f" messages)" "$(field "$f" gaps)" "$(field "$f" laps)" \
		"$(field "$f" recoveries)" "$(field "$f" replayed)" "$(field "$f" data_loss)" \
		"$(field "$f" lost)" "$(field "$f" orders)" "$(field "$f" acks)" "$match"
	# rc is lossless and md_ud's gaps are recovered: both books must be
	# the handler's.
	[ "$match" = "matches the handler's" ] || status=1
done
echo "gateway: $(field "$out/gateway.out" orders) orders received, $(field "$out/gateway.out" acks) acked"
echo "(gaps, laps: reported to the strategy, none where recovery filled them first;" \
	"replayed: messages recovered, no order is sent on them; lost: given up)"
rd_line=$(grep -o 'stream md_ud: .*' "$out/recoveryd.out" | tail -n 1)
echo "tb-recoveryd: ${rd_line:-no summary (see $BUILD/demo/recoveryd.out)}"
grep -m 3 'from retention\|: hole ' "$out/recoveryd.out" | sed 's/^/  /' || true

mkdir -p "$BUILD/demo"
rm -f "$BUILD/demo"/*.hgrm
cp "$out"/*.hgrm "$BUILD/demo/" 2>/dev/null || true
for f in "$out"/*.out; do cp "$f" "$BUILD/demo/"; done
echo
echo "histograms: $BUILD/demo/strategy-{a,b}.<hop>.hgrm; program output: $BUILD/demo/*.out"
svg=$BUILD/demo/tick_to_trade.svg
if "$BIN/tb-hist" plot -o "$svg" --title "tickbus demo: tick to trade, same host" \
	-l "strategy-a (md_rc, rc)" "$BUILD/demo/strategy-a.tick_to_trade.hgrm" \
	-l "strategy-b (md_ud, ud)" "$BUILD/demo/strategy-b.tick_to_trade.hgrm" \
	>"$out/hist.out" 2>&1; then
	echo "SVG plot (open in a browser): $svg"
else
	echo "SVG plot: tb-hist failed:"; cat "$out/hist.out"
	status=1
fi

DEMO_RECOVERY_SECONDS=${DEMO_RECOVERY_SECONDS:-$SECONDS_} BUILD=$BUILD \
	tools/demo-recovery.sh || status=1
exit $status
