#!/bin/bash
# The gap-recovery part of `make demo`: gaps injected and recovered.
#
# Two tb-recoveryd instances store a shm stream; a strategy that stalls for a
# second every 30,000 messages is lapped by the ring (1 MiB) again and again,
# and a late joiner asks to start from sequence 1.  Recovery service A is
# killed with SIGKILL a second in, so both fail over to B.  Both strategies
# should deliver every message, in order, with the publisher's checksum.
#
#   DEMO_RECOVERY_RATE=20000 DEMO_RECOVERY_SECONDS=5 tools/demo-recovery.sh
set -euo pipefail

BUILD=${BUILD:-build}
BIN=$BUILD/bin
RATE=${DEMO_RECOVERY_RATE:-20000}
SECS=${DEMO_RECOVERY_SECONDS:-5}
COUNT=$((RATE * SECS))
out=$(mktemp -d /tmp/tickbus-demo-recovery.XXXXXX)
pids=()

cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -f "/dev/shm/tickbus-demo-recovery.$$"
	rm -rf "$out"
}
trap cleanup EXIT

# Three loopback ports, from a range the kernel does not hand out itself.
base=$((20000 + (RANDOM % 1000) * 3))
pa=$base; pb=$((base + 1)); pr=$((base + 2))
cat >"$out/demo.ini" <<EOF
[stream quotes]
id = 1
transport = shm
ring_size = 1M
shm_path = /dev/shm/tickbus-demo-recovery.$$
token = demo-token
retention = 100000
retention_endpoint = 127.0.0.1:$pr
recovery = 127.0.0.1:$pa,127.0.0.1:$pb
EOF

echo
echo "tickbus demo, gap recovery: $RATE msg/s for ${SECS}s on a 1 MiB shm ring"
echo "  recovery services A (:$pa) and B (:$pb); A is killed with SIGKILL after 1 s"
echo "  'staller' sleeps 1 s every 30,000 messages (lapped each time); 'joiner' starts"
echo "  2.5 s late from sequence 1"
"$BIN/tb-recoveryd" -c "$out/demo.ini" -s quotes -d "$out/store-a" -l "127.0.0.1:$pa" >"$out/a.out" 2>&1 &
pid_a=$!; pids+=($pid_a)
"$BIN/tb-recoveryd" -c "$out/demo.ini" -s quotes -d "$out/store-b" -l "127.0.0.1:$pb" >"$out/b.out" 2>&1 &
pid_b=$!; pids+=($pid_b)
"$BIN/tb-subscribe" -c "$out/demo.ini" -s quotes --count "$COUNT" --name staller \
	--stall-every 30000 --stall-ms 1000 --timeout-ms 120000 >"$out/staller.out" 2>&1 &
pid_s=$!; pids+=($pid_s)
"$BIN/tb-publish" -c "$out/demo.ini" -s quotes --count "$COUNT" --rate "$RATE" \
	--start-delay-ms 300 --linger-ms 3000 >"$out/pub.out" 2>&1 &
pid_p=$!; pids+=($pid_p)
sleep 1
kill -9 "$pid_a"
wait "$pid_a" 2>/dev/null || true
echo "  killed recovery service A"
sleep 1.5
"$BIN/tb-subscribe" -c "$out/demo.ini" -s quotes --count "$COUNT" --name joiner \
	--start-at 1 --timeout-ms 120000 >"$out/joiner.out" 2>&1 &
pid_j=$!; pids+=($pid_j)
status=0
wait "$pid_p" || status=1
wait "$pid_s" || status=1
wait "$pid_j" || status=1
kill -TERM "$pid_b"
wait "$pid_b" || true

field() { grep -o " $2=[^ ]*" "$1" | tail -n 1 | cut -d= -f2; }
checksum=$(field "$out/pub.out" checksum)
echo
echo "== recovery summary =="
echo "published: $(field "$out/pub.out" published) messages, checksum $checksum"
printf '%-10s %10s %10s %11s %6s %9s\n' subscriber delivered replayed data_losses lost checksum
for s in staller joiner; do
	f="$out/$s.out"
	match=$([ "$(field "$f" checksum)" = "$checksum" ] && echo match || echo DIFFERS)
	printf '%-10s %10s %10s %11s %6s %9s\n' "$s" "$(field "$f" delivered)" \
		"$(field "$f" replayed)" "$(field "$f" data_losses)" "$(field "$f" lost)" "$match"
	[ "$match" = match ] || status=1
done
echo "service B: $(grep -o 'stored=.*' "$out/b.out" | tail -n 1)"
exit $status
