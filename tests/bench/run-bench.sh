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
echo "report: $report"
exit $status
