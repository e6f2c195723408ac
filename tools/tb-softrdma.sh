#!/bin/sh
# tb-softrdma - runs a command on softrdma, tickbus's software RDMA device:
# any verbs program (tickbus's tools, rdma-core's ibv_devices, perftest)
# then finds the device "softrdma0" instead of the NIC it lacks.
#
#   tb-softrdma [-f FABRIC] CMD [ARGS...]
#
# It puts softrdma's libibverbs.so.1 first in LD_LIBRARY_PATH and names the
# fabric (SOFTRDMA_FABRIC: processes meet only on the same one; default
# "tickbus", or the variable as already set).  The library is looked for
# beside this script's installation ($PREFIX/lib/tickbus/softrdma), so an
# installed tree can be moved (or staged with DESTDIR) and still work.
set -eu

usage() {
	echo "usage: tb-softrdma [-f FABRIC] CMD [ARGS...]"
	echo "Runs CMD with softrdma, the software RDMA device, as its libibverbs."
	echo "  -f, --fabric NAME  the fabric processes meet on (default:"
	echo "                     \$SOFTRDMA_FABRIC, else 'tickbus')"
}

fabric=${SOFTRDMA_FABRIC:-tickbus}
while [ $# -gt 0 ]; do
	case $1 in
	-f|--fabric)
		[ $# -ge 2 ] || { echo "tb-softrdma: $1 needs a name" >&2; exit 2; }
		fabric=$2; shift 2 ;;
	-h|--help) usage; exit 0 ;;
	--) shift; break ;;
	-*) echo "tb-softrdma: unknown option $1" >&2; usage >&2; exit 2 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { usage >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
lib="$here/../lib/tickbus/softrdma"
[ -f "$lib/libibverbs.so.1" ] || lib="@SOFTRDMA_LIBDIR@"
if [ ! -f "$lib/libibverbs.so.1" ]; then
	echo "tb-softrdma: no libibverbs.so.1 in $lib (make install puts it" \
		"there)" >&2
	exit 1
fi
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SOFTRDMA_FABRIC="$fabric"
exec "$@"
