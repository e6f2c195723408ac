#!/bin/bash
# make test-rdma: the rc and ud scenarios on this machine's RDMA hardware,
# with rdma-core's own libibverbs (softrdma is kept out of the library
# path).
#
#   make test-rdma                 one host: the scenarios through the
#                                  NIC's own loopback
#   HOST=peer make test-rdma       two hosts: a publisher here and a
#                                  subscriber on `peer` (ssh), rc then ud
#
# It picks an active port explicitly (RDMA_DEVICE and RDMA_PORT choose one;
# otherwise the first ACTIVE port, Ethernet (RoCE) or InfiniBand) and
# prints what decides whether RDMA works there at all: the locked-memory
# limit and CAP_IPC_LOCK, the port's link layer, state, MTU, LID and its
# GID table with each entry's type and netdev.  Then it runs the scenarios
# on that port.  ud refuses InfiniBand ports (multicast there needs a
# subnet-manager join); on one, its scenario is reported as skipped.
#
# Two-host mode needs: ssh to HOST without a password, this build tree at
# the same path on HOST (or PEER_DIR), an RDMA device there, and the
# control port (PORT, default 18800) reachable from HOST.  LOCAL_ADDR is
# the address HOST reaches this one by (default: the source address of the
# route to HOST).
#
# Exit status: 0 all passed or skipped (the reason is printed), 1 a
# failure.
set -u
BUILD=${BUILD:-build}
HOST=${HOST:-}
PORT=${PORT:-18800}
PEER_DIR=${PEER_DIR:-$PWD}
COUNT=${COUNT:-200000}
SYS=/sys/class/infiniband

say() { echo "test-rdma: $*"; }

devs=$(ls "$SYS" 2>/dev/null)
if [ -z "$devs" ]; then
	say "skipped: this machine has no RDMA device ($SYS is empty or" \
	    "missing; the kernel sees no RDMA NIC, or its driver is not loaded)."
	say "the same scenarios run on softrdma in 'make test'."
	[ -n "$HOST" ] && say "two-host mode (HOST=$HOST) needs a device here" \
		"too: nothing was run on $HOST."
	exit 0
fi

# ------------------------------------------------------------ the port

port_state() { cat "$SYS/$1/ports/$2/state" 2>/dev/null; }
link_layer() { cat "$SYS/$1/ports/$2/link_layer" 2>/dev/null; }

dev=${RDMA_DEVICE:-} port=${RDMA_PORT:-}
if [ -z "$dev" ] || [ -z "$port" ]; then
	for d in ${RDMA_DEVICE:-$devs}; do
		for p in $(ls "$SYS/$d/ports" 2>/dev/null); do
			[ -n "${RDMA_PORT:-}" ] && [ "$p" != "$RDMA_PORT" ] && continue
			case $(port_state "$d" "$p") in
			*ACTIVE*) dev=$d port=$p; break 2 ;;
			esac
		done
	done
fi
if [ -z "$dev" ] || [ -z "$port" ]; then
	say "skipped: no ACTIVE port on ${RDMA_DEVICE:-any of: $devs}" \
	    "${RDMA_PORT:+(port $RDMA_PORT)}; states:"
	for d in $devs; do
		for p in $(ls "$SYS/$d/ports" 2>/dev/null); do
			say "  $d port $p: $(port_state "$d" "$p") ($(link_layer "$d" "$p"))"
		done
	done
	exit 0
fi
case $(port_state "$dev" "$port") in
*ACTIVE*) ;;
*) say "failed: $dev port $port is $(port_state "$dev" "$port"), not ACTIVE"
   exit 1 ;;
esac
ll=$(link_layer "$dev" "$port")
say "device $dev port $port: $ll, $(port_state "$dev" "$port")"

# What the port and the process can do.
memlock=$(ulimit -l)
capeff=$(awk '/^CapEff:/ { print $2 }' /proc/self/status)
if [ $(( 0x${capeff:-0} >> 14 & 1 )) -eq 1 ]; then
	say "locked memory: ulimit -l = $memlock KiB, CAP_IPC_LOCK held (no limit applies)"
else
	say "locked memory: ulimit -l = $memlock KiB, no CAP_IPC_LOCK"
	[ "$memlock" != unlimited ] && say "  every ring and queue is pinned" \
		"against it: raise it (ulimit -l, LimitMEMLOCK=) if set-up fails"
fi
if command -v ibv_devinfo >/dev/null 2>&1; then
	ibv_devinfo -d "$dev" -i "$port" 2>/dev/null |
		grep -E "^\s+(state|max_mtu|active_mtu|sm_lid|port_lid|link_layer):" |
		sed 's/^\s*/test-rdma:   /'
else
	say "  (ibv_devinfo is not installed: no MTU shown; apt-get install ibverbs-utils)"
fi
if [ "$ll" = InfiniBand ]; then
	say "  lid $(cat "$SYS/$dev/ports/$port/lid" 2>/dev/null)," \
	    "sm_lid $(cat "$SYS/$dev/ports/$port/sm_lid" 2>/dev/null)"
fi
say "GID table of $dev port $port (index: gid, type, netdev):"
for g in $(ls "$SYS/$dev/ports/$port/gids" 2>/dev/null | sort -n); do
	gid=$(cat "$SYS/$dev/ports/$port/gids/$g" 2>/dev/null)
	[ -z "$gid" ] || [ "$gid" = 0000:0000:0000:0000:0000:0000:0000:0000 ] && continue
	type=$(cat "$SYS/$dev/ports/$port/gid_attrs/types/$g" 2>/dev/null)
	ndev=$(cat "$SYS/$dev/ports/$port/gid_attrs/ndevs/$g" 2>/dev/null)
	say "  $g: $gid ${type:--} ${ndev:--}"
done
numa=$(cat "$SYS/$dev/device/numa_node" 2>/dev/null)
[ -n "$numa" ] && say "NUMA node of $dev: $numa (pin publisher_core /" \
	"subscriber_core to its cores: /sys/devices/system/node/node$numa/cpulist)"

# Keep any softrdma build out of the way of the real libibverbs.
export LD_LIBRARY_PATH=
export TB_BIN="$PWD/$BUILD/bin" TB_BUILD="$PWD/$BUILD" TICKBUS_QUIET=1
export TICKBUS_RDMA_DEVICE="$dev" TICKBUS_RDMA_PORT="$port"
status=0

# ------------------------------------------------------------- one host

if [ -z "$HOST" ]; then
	for t in test_rc_scenario test_rc_flood test_ud_scenario; do
		log="$BUILD/tests/$t.rdma.log"
		if [ "$t" = test_ud_scenario ] && [ "$ll" = InfiniBand ]; then
			say "SKIP  $t: ud refuses InfiniBand ports (multicast needs" \
			    "a subnet-manager join); use a RoCE port (RDMA_DEVICE=," \
			    "RDMA_PORT=)"
			continue
		fi
		"$BUILD/tests/$t" >"$log" 2>&1
		rc=$?
		case $rc in
		0) echo "PASS  $t (on $dev port $port)" ;;
		77) echo "SKIP  $t: $(tail -n 1 "$log")" ;;
		*) echo "FAIL  $t (on $dev port $port); see $log"; status=1 ;;
		esac
	done
	exit $status
fi

# ------------------------------------------------------------ two hosts

if ! ssh -o BatchMode=yes -o ConnectTimeout=5 "$HOST" true 2>/dev/null; then
	say "failed: cannot ssh to $HOST without a password (BatchMode)"
	exit 1
fi
if ! ssh "$HOST" test -x "$PEER_DIR/$BUILD/bin/tb-subscribe"; then
	say "failed: $HOST has no $PEER_DIR/$BUILD/bin/tb-subscribe (build" \
	    "the same tree there, or set PEER_DIR)"
	exit 1
fi
if [ -z "${LOCAL_ADDR:-}" ]; then
	peer_ip=$(getent ahostsv4 "$HOST" | awk 'NR == 1 { print $1 }')
	LOCAL_ADDR=$(ip -4 route get "$peer_ip" 2>/dev/null |
		     sed -n 's/.* src \([0-9.]*\).*/\1/p')
fi
say "two hosts: publisher here ($LOCAL_ADDR:$PORT), subscriber on $HOST"
say "$HOST's ports: $(ssh "$HOST" "for d in \$(ls $SYS); do for p in \$(ls $SYS/\$d/ports); do
	echo -n \"\$d/\$p \$(cat $SYS/\$d/ports/\$p/state) \$(cat $SYS/\$d/ports/\$p/link_layer); \"; done; done")"
conf=$(mktemp /tmp/tb-rdma.XXXXXX.ini)
trap 'rm -f "$conf"; ssh "$HOST" rm -f "$conf" 2>/dev/null' EXIT
cat >"$conf" <<EOF
[stream rc2]
id = 71
transport = rc
control = $LOCAL_ADDR:$PORT
token = test-rdma-token
ring_size = 4M
slow_consumer = backpressure
heartbeat_ms = 100
liveness_timeout_ms = 3000

[stream ud2]
id = 72
transport = ud
group = 239.192.72.1:$((PORT + 1))
EOF
scp -q "$conf" "$HOST:$conf" || { say "failed: cannot copy the config to $HOST"; exit 1; }
for s in rc2 ud2; do
	if [ "$s" = ud2 ] && [ "$ll" = InfiniBand ]; then
		say "SKIP  ud across hosts: ud refuses InfiniBand ports"
		continue
	fi
	ssh "$HOST" "cd $PEER_DIR && LD_LIBRARY_PATH= TICKBUS_QUIET=1 \
		$BUILD/bin/tb-subscribe -c $conf -s $s --count $COUNT \
		--timeout-ms 120000 --name $HOST" >"$BUILD/tests/rdma-$s.sub.out" 2>&1 &
	sub=$!
	out=$("$BUILD/bin/tb-publish" -c "$conf" -s "$s" --count "$COUNT" \
		--rate 100000 --start-delay-ms 2000 --linger-ms 500 2>&1)
	wait $sub
	sub_rc=$?
	pub_sum=$(echo "$out" | sed -n 's/.*checksum=\(0x[0-9a-f]*\).*/\1/p')
	sub_sum=$(sed -n 's/.*checksum=\(0x[0-9a-f]*\).*/\1/p' "$BUILD/tests/rdma-$s.sub.out")
	lost=$(sed -n 's/.* lost=\([0-9]*\).*/\1/p' "$BUILD/tests/rdma-$s.sub.out")
	if [ $sub_rc -eq 0 ] && [ -n "$pub_sum" ] && [ "$pub_sum" = "$sub_sum" ]; then
		echo "PASS  $s: $COUNT messages to $HOST, checksum $pub_sum"
	elif [ "$s" = ud2 ] && [ $sub_rc -eq 0 ] && [ "${lost:-0}" != 0 ]; then
		echo "PASS  $s: $COUNT messages to $HOST, $lost reported lost (ud" \
		     "is unreliable; every loss told)"
	else
		echo "FAIL  $s: subscriber exit $sub_rc, checksums $pub_sum vs" \
		     "${sub_sum:-none}; see $BUILD/tests/rdma-$s.sub.out"
		status=1
	fi
done
exit $status
