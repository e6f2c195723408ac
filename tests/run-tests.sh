#!/bin/bash
# Runs each test binary given on the command line, each with its own
# SOFTRDMA_FABRIC and a time limit, and prints one summary line:
#   tests: N passed, N failed, N skipped
# Exit status 77 from a test means "skipped" (the machine lacks something;
# the test says what).  Set TB_TEST_FILTER=regex to run a subset.
set -u
BUILD=${BUILD:-build}
TIMEOUT=${TB_TEST_TIMEOUT:-600}
export LD_LIBRARY_PATH="$PWD/$BUILD/softrdma${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TB_BIN="$PWD/$BUILD/bin"
export TB_BUILD="$PWD/$BUILD"
export TICKBUS_QUIET=1
# ASan: fail on leaks too; softrdma's own library is not instrumented.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

pass=0 fail=0 skip=0 failed=""
for t in "$@"; do
	name=$(basename "$t")
	if [ -n "${TB_TEST_FILTER:-}" ] && ! [[ $name =~ $TB_TEST_FILTER ]]; then
		continue
	fi
	export SOFTRDMA_FABRIC="tbtest-$$-$name"
	log="$BUILD/tests/$name.log"
	start=$(date +%s%N)
	timeout -k 10 "$TIMEOUT" "$t" >"$log" 2>&1
	rc=$?
	secs=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
	case $rc in
	0) pass=$((pass + 1)); printf 'PASS  %-40s %6ss\n' "$name" "$secs" ;;
	77) skip=$((skip + 1)); printf 'SKIP  %-40s %s\n' "$name" "$(tail -n 1 "$log")" ;;
	*) fail=$((fail + 1)); failed="$failed $name"
	   printf 'FAIL  %-40s exit %d\n' "$name" "$rc"
	   # The failed checks first: a long tail may be cut short where
	   # it is shown (a CI excerpt), and they are what tells why.
	   grep -E -m 12 'error: |Failure|\[  ERROR   \]|\[  FAILED  \] [a-z]|runtime error|AddressSanitizer' \
		"$log" | sed 's/^/   !  /'
	   echo "      last lines of $log:"
	   tail -n 30 "$log" | sed 's/^/      /' ;;
	esac
	# The fabric's file (tools/softrdma/fabric.c: /dev/shm/softrdma.NAME),
	# which a test that crashed or failed an assertion leaves behind.
	rm -f /dev/shm/softrdma."$SOFTRDMA_FABRIC" 2>/dev/null
done
echo "tests: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] || { echo "failed:$failed"; exit 1; }
