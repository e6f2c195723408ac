#!/bin/sh
# Installs the Debian packages tickbus builds and tests with, if any is
# missing.  As root it runs apt-get; otherwise it prints the command to run.
#   tests/deps.sh           install what is missing
#   tests/deps.sh --check   only report; exit 1 if something is missing
set -eu

# clang (with its libFuzzer runtime, libclang-common-*-dev) is for
# `make fuzz` only.  The operator's kit is checked with real tools:
# python3-prometheus-client parses tb-stat's metrics, mandoc lints the man
# pages, tshark runs the Wireshark dissector (installed without the setuid
# dumpcap question: see below), systemd-analyze verifies the unit.
# perftest (ib_write_lat, ib_send_lat) runs on softrdma in `make test`
# (test_softrdma_perftest) and is the floor of the rc latency in `make bench`.
PKGS="build-essential pkg-config libibverbs-dev ibverbs-utils libnuma-dev \
libcmocka-dev libinih-dev libxml2-dev zlib1g-dev nettle-dev valgrind \
iproute2 procps clang python3-prometheus-client mandoc tshark systemd perftest"

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
		missing="$missing $p"
	fi
done

[ -z "$missing" ] && exit 0

if [ "${1:-}" = "--check" ]; then
	echo "missing packages:$missing"
	exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
	echo "tickbus: installing:$missing"
	export DEBIAN_FRONTEND=noninteractive
	# wireshark-common asks whether non-root users may capture; no.
	echo "wireshark-common wireshark-common/install-setuid boolean false" |
		debconf-set-selections 2>/dev/null || true
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing
else
	echo "tickbus: missing Debian packages; run as root:"
	echo "  apt-get update && apt-get install -y$missing"
	exit 1
fi
