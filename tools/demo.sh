#!/bin/bash
# make demo: the whole story on one host.
#
#   tb-feedsim --(MoldUDP64/ITCH, lines A and B, each losing packets)--+
#      +--> tb-feedhandler A (primary)   --> md_rc_a (rc), md_ud_a (ud), md_snap_a
#      +--> tb-feedhandler B (secondary) --> md_rc_b (rc), md_ud_b (ud), md_snap_b
#   both handlers publish the same messages under the same sequence numbers
#   in the epoch of the feed (config/failover.ini: md_rc = md_rc_a + md_rc_b,
#   md_ud = md_ud_a + md_ud_b, md_snap = md_snap_a + md_snap_b):
#   md_rc --> tb-strategy "strategy-a"  --orders (UDP)--> tb-gateway
#   md_ud --> tb-strategy "strategy-b"  --orders (UDP)--> tb-gateway
#   md_ud --> tb-recoveryd (store, through both copies; its own gaps filled
#             from either handler's retention) <--replay requests-- strategy-b
#
# Halfway through, feed handler A is killed with SIGKILL: both strategies
# go on from B and lose nothing, with no epoch change.  Later a third
# strategy, strategy-c, joins md_ud late from a book snapshot (md_snap).
# RC and UD run on softrdma, tickbus's software RDMA device, when the
# machine has no RDMA NIC.  Each handler arbitrates the feed's lines A and
# B and re-requests only what both lost; UD datagrams are dropped by
# softrdma at each handler independently, and what neither copy brings
# strategy-b recovers from tb-recoveryd.  At the end: what every strategy
# delivered against the surviving handler, tick to trade per hop (p50/p99/
# p99.9/max), the histograms and an SVG plot.  Then tools/demo-recovery.sh:
# a lapped shm reader, a late joiner and a recovery service killed with
# SIGKILL.
#
#   DEMO_RATE=20000 DEMO_SECONDS=5 DEMO_FEED_DROP=0.02 DEMO_UD_DROP=0.001 \
#     tools/demo.sh
set -euo pipefail

BUILD=${BUILD:-build}
BIN=$BUILD/bin
CONFIG=${DEMO_CONFIG:-config/failover.ini}
RATE=${DEMO_RATE:-20000}
SECONDS_=${DEMO_SECONDS:-5}
FEED_DROP=${DEMO_FEED_DROP:-0.02}
UD_DROP=${DEMO_UD_DROP:-0.001}
COUNT=$((RATE * SECONDS_))
SNAP_EVERY=$((COUNT / 10 > 1000 ? COUNT / 10 : 1000))
FEED_PORT=$((32000 + ($$ % 15000) * 2))
RETRANS_PORT=$((FEED_PORT + 1))
# The feed's two lines: multicast on this host only (sent and joined on
# 127.0.0.1), groups of this run's own.
GROUP_A=239.194.$(($$ % 250)).1
GROUP_B=239.194.$(($$ % 250)).2
SESSION=DEMO$(printf '%06d' $(($$ % 1000000)))
out=$(mktemp -d /tmp/tickbus-demo.XXXXXX)
# The demo's processes keep their counters files apart, for tb-stat.
export TICKBUS_COUNTERS_DIR=$out/counters
mkdir -p "$TICKBUS_COUNTERS_DIR"
pids=()

cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[ -s "$out/strategy-c.pid" ] && kill "$(cat "$out/strategy-c.pid")" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -f /dev/shm/tickbus.demo-snap-a /dev/shm/tickbus.demo-snap-b
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
echo "  tb-feedsim (lines A and B) -> tb-feedhandler A and B, one stream in one epoch"
echo "  -> strategy-a (md_rc) and strategy-b (md_ud) -> tb-gateway;" \
	"tb-recoveryd stores md_ud"
echo "  feed: $RATE msg/s for ${SECONDS_}s, each line losing ${FEED_DROP} of its packets;" \
	"ud: ${UD_DROP} of datagrams lost at each handler"
echo "  halfway: feed handler A killed (SIGKILL); later strategy-c joins from a snapshot"
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

# md_ud's recovery service: strategy-b asks it for every gap that neither
# handler's copy brought.  It stores the stream through both copies, and
# fills its own gaps from either handler's retention buffer.
"$BIN/tb-recoveryd" -c "$CONFIG" -s md_ud -d "$out/store" \
	-l "$(stream_key md_ud recovery)" >"$out/recoveryd.out" 2>&1 &
pids+=($!)
rd=$!
wait_for "$out/recoveryd.out" listening 10

# The two feed handlers: the same feed (lines A and B, arbitrated), the
# same session, so the same epoch.  The loss on md_ud is injected at each
# handler's side of softrdma, with a seed of its own.
handler() { # name streams... ; sets $fh_pid
	local name=$1 seed=$2
	shift 2
	SOFTRDMA_UD_DROP=$UD_DROP SOFTRDMA_SEED=$seed "$BIN/tb-feedhandler" \
		-c "$CONFIG" "$@" -g "$GROUP_A" --group-b "$GROUP_B" \
		-p "$FEED_PORT" -i 127.0.0.1 -R "$RETRANS_PORT" --session "$SESSION" \
		--gap-timeout-ms 50 --snapshot-every "$SNAP_EVERY" \
		--timeout-ms "$limit_ms" --linger-ms 500 >"$out/$name.out" 2>&1 &
	fh_pid=$!
	pids+=($fh_pid)
	wait_for "$out/$name.out" ready 10
}
handler feedhandler-a 11 -s md_rc_a -s md_ud_a --snapshot md_snap_a
fha=$fh_pid
handler feedhandler-b 22 -s md_rc_b -s md_ud_b --snapshot md_snap_b
fh=$fh_pid
# The rc strategy connects while the simulator sends heartbeats only.
"$BIN/tb-feedsim" -g "$GROUP_A" --group-b "$GROUP_B" -i 127.0.0.1 \
	-p "$FEED_PORT" -R "$RETRANS_PORT" --session "$SESSION" -N 8 \
	-n "$COUNT" -r "$RATE" --drop "$FEED_DROP" --drop-b "$FEED_DROP" \
	--jitter-b-us 100 --start-delay-ms 1000 --end-ms 5000 -s 7 \
	>"$out/feedsim.out" 2>&1 &
pids+=($!)
sim=$!

# Halfway, the primary dies; later a third strategy joins from a snapshot.
(
	sleep "$(awk -v s="$SECONDS_" 'BEGIN { print 1 + s / 2 }')"
	kill -KILL "$fha" 2>/dev/null && echo "t=$((1 + SECONDS_ / 2))s  feed handler A killed (SIGKILL)"
	sleep "$(awk -v s="$SECONDS_" 'BEGIN { print s / 4 }')"
	"$BIN/tb-strategy" -c "$CONFIG" -s md_ud --snapshot md_snap -n strategy-c \
		-g "127.0.0.1:$gw_port" --hgrm-dir "$out" --timeout-ms "$limit_ms" \
		--ack-wait-ms 1000 >"$out/strategy-c.out" 2>&1 &
	echo $! >"$out/strategy-c.pid"
	wait_for "$out/strategy-c.out" "joined snapshot" 30 >/dev/null 2>&1 &&
		echo "       strategy-c joined late from the snapshot at sequence" \
			"$(grep -o 'joined snapshot=[0-9]*' "$out/strategy-c.out" | cut -d= -f2)"
	wait
) &
events=$!
pids+=($events)

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
# (stderr: bash would tell of A's death when it reaps it)
{ wait "$fh" || status=$?; } 2>/dev/null
kill "$prog" 2>/dev/null || true
wait "$prog" 2>/dev/null || true
wait "$events" 2>/dev/null || true
{ wait "$fha" || true; } 2>/dev/null
for p in "${st_pids[@]}"; do wait "$p" || status=$?; done
wait_for "$out/strategy-c.out" "strategy: name" 60 || status=1
kill -TERM "$sim" "$gw" "$rd" 2>/dev/null || true
wait "$sim" 2>/dev/null || true
wait "$gw" 2>/dev/null || true
wait "$rd" 2>/dev/null || true

field() { grep -o " $2=[^ ]*" "$1" 2>/dev/null | tail -n 1 | cut -d= -f2 || true; }
us() { awk -v n="$1" 'BEGIN { if (n == "") print "-"; else printf "%.1f", n / 1000 }'; }

fh_out=$out/feedhandler-b.out
fa_out=$out/feedhandler-a.out
sim_out=$out/feedsim.out
echo
echo "== feed: lines A and B =="
echo "tb-feedsim: $(field "$sim_out" messages) messages; packets dropped: line A" \
	"$(field "$sim_out" dropped), line B $(field "$sim_out" dropped_b), both" \
	"$(field "$sim_out" dropped_both) ($(field "$sim_out" dropped_both_msgs) messages)"
echo "feed handler B: $(field "$fh_out" messages) sequences applied," \
	"$(field "$fh_out" requested_new) messages re-requested (what both lines lost)," \
	"$(field "$fh_out" lost) lost"
echo "  line A: won $(field "$fh_out" a_won), second $(field "$fh_out" a_lost) times" \
	"($(us "$(field "$fh_out" a_late_avg_ns)") us late on average);" \
	"line B: won $(field "$fh_out" b_won), second $(field "$fh_out" b_lost) times" \
	"($(us "$(field "$fh_out" b_late_avg_ns)") us late)"
echo "published by B: $(field "$fh_out" published) messages per stream ($(field "$fh_out" quotes)" \
	"Quote, $(field "$fh_out" trades) Trade, $(field "$fh_out" level_updates) BookLevelUpdate," \
	"$(field "$fh_out" instruments) InstrumentDefinition, $(field "$fh_out" statuses) TradingStatus)," \
	"$(field "$fh_out" snapshots) snapshots"

n=$(field "$fh_out" published)
ea=$(grep -o 'epoch=0x[0-9a-f]*' "$fa_out" | head -n 1 | cut -d= -f2 || true)
eb=$(field "$fh_out" epoch)
echo
echo "== failover: feed handler A killed halfway =="
echo "epoch of the feed: A $ea, B $eb$([ "$ea" = "$eb" ] && echo ' (the same)' || echo ' DIFFER')"
[ "$ea" = "$eb" ] || status=1
printf '%-11s %-6s %9s %15s %10s %6s %6s %5s %9s %s\n' strategy stream received \
	sequences seq_errors epochs deaths gaps data_loss "books (top, levels)"
want_top=$(field "$fh_out" top_checksum)
want_book=$(field "$fh_out" book_checksum)
for s in strategy-a:md_rc strategy-b:md_ud strategy-c:md_ud; do
	name=${s%%:*}
	f=$out/$name.out
	first=$(field "$f" first_seq)
	last=$(field "$f" last_seq)
	got=$(field "$f" messages)
	joined=$(field "$f" joined_at)
	expect=$((n - ${joined:-0}))
	books="DIFFER from B's"
	if [ "$(field "$f" top_checksum)" = "$want_top" ] &&
	   [ "$(field "$f" book_checksum)" = "$want_book" ]; then
		books="match B's"
	fi
	printf '%-11s %-6s %9s %15s %10s %6s %6s %5s %9s %s\n' "$name" "${s#*:}" \
		"$got" "$first..$last" "$(field "$f" seq_errors)" "$(field "$f" epochs)" \
		"$(field "$f" deaths)" "$(field "$f" gaps)" "$(field "$f" data_loss)" "$books"
	# Whole, in order, one epoch, nothing lost, B's books: or the demo
	# failed.
	if [ "$got" != "$expect" ] || [ "$first" != "$((${joined:-0} + 1))" ] ||
	   [ "$last" != "$n" ] || [ "$(field "$f" seq_errors)" != 0 ] ||
	   [ "$(field "$f" epochs)" != 0 ] || [ "$(field "$f" deaths)" != 0 ] ||
	   [ "$(field "$f" data_loss)" != 0 ] || [ "$books" != "match B's" ]; then
		echo "  $name: FAILED (expected $expect messages, ${joined:-0}+1..$n, nothing lost)"
		status=1
	fi
done
echo "(strategy-a and -b delivered 1..$n: the messages A published before it died, and B's"
echo " after, each once; no TB_NEW_EPOCH, no TB_PUBLISHER_DEAD, no gap told)"

f=$out/strategy-c.out
at=$(field "$f" joined_at)
echo
echo "== late join from a snapshot =="
snap_line=$(grep "snapshot id=.* seq=$at " "$fh_out" | head -n 1 || true)
echo "strategy-c: joined at the snapshot of sequence $at after $(field "$f" join_ms) ms" \
	"(caught up with the live stream after $(field "$f" caught_up_ms) ms), then" \
	"delivered $((at + 1))..$(field "$f" last_seq) ($(field "$f" messages) messages," \
	"$(field "$f" replayed) of them recovered), not the $n from 1"
if [ -n "$snap_line" ] && [ "$(grep -o 'joined snapshot=.*' "$f" | grep -o 'book_checksum=[^ ]*')" = \
	"$(echo "$snap_line" | grep -o 'book_checksum=[^ ]*')" ]; then
	echo "  its books at the snapshot are B's at sequence $at (book checksums match)"
else
	echo "  its books at the snapshot DIFFER from B's at sequence $at"
	status=1
fi

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
echo "== gaps, recovery and orders =="
printf '%-11s %-6s %10s %9s %9s %7s %6s\n' strategy stream recoveries replayed data_loss \
	orders acks
for s in strategy-a:md_rc strategy-b:md_ud strategy-c:md_ud; do
	name=${s%%:*}
	f=$out/$name.out
	printf '%-11s %-6s %10s %9s %9s %7s %6s\n' "$name" "${s#*:}" \
		"$(field "$f" recoveries)" "$(field "$f" replayed)" "$(field "$f" data_loss)" \
		"$(field "$f" orders)" "$(field "$f" acks)"
done
echo "gateway: $(field "$out/gateway.out" orders) orders received, $(field "$out/gateway.out" acks) acked"
echo "(recoveries: gaps neither handler's copy filled, recovered from tb-recoveryd;" \
	"replayed: messages recovered, no order is sent on them)"
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
