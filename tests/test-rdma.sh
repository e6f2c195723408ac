#!/bin/bash
# make test-rdma: the rc scenarios on this machine's first real RDMA device,
# with rdma-core's own libibverbs (softrdma is kept out of the library
# path).  Skips, with the reason, where the machine has no RDMA device.
#
# The scenarios use 127.0.0.1 for the control connection; the data path
# goes through the device (loopback through the NIC's port).
set -u
BUILD=${BUILD:-build}

devs=$(ls /sys/class/infiniband 2>/dev/null)
if [ -z "$devs" ]; then
	echo "test-rdma: skipped: this machine has no RDMA device" \
		"(/sys/class/infiniband is empty or missing)."
	echo "test-rdma: the same scenarios run on softrdma in 'make test'."
	exit 0
fi
first=$(echo "$devs" | head -n 1)
echo "test-rdma: running the rc scenarios on $first (of: $(echo $devs))"
# Keep any softrdma build out of the way of the real libibverbs.
export LD_LIBRARY_PATH=
export TB_BIN="$PWD/$BUILD/bin" TB_BUILD="$PWD/$BUILD" TICKBUS_QUIET=1
export TICKBUS_RDMA_DEVICE="$first"
status=0
for t in test_rc_scenario; do
	if "$BUILD/tests/$t" >"$BUILD/tests/$t.rdma.log" 2>&1; then
		echo "PASS  $t (on $first)"
	else
		echo "FAIL  $t (on $first); see $BUILD/tests/$t.rdma.log"
		status=1
	fi
done
exit $status
