#!/bin/bash
# Runs each libFuzzer target named on the command line (fuzz_<name>, built
# by `make fuzz` into $BUILD/fuzz/) from its checked-in corpus
# tests/fuzz/corpus/<name>/, for FUZZ_SECONDS each, or for FUZZ_RUNS
# executions each when that is set, and prints one line per target and a
# summary:
#   PASS  fuzz_<name>   <executions> runs in <s>s (<exec/s>/s), <n> new inputs
#   fuzz: N passed, N failed; <executions> runs in <s>s
# New inputs the fuzzer finds go to $BUILD/fuzz/corpus/<name>/ (copy the
# ones worth keeping into the checked-in corpus, a few at a time); a
# crash, leak or timeout is written to $BUILD/fuzz/artifacts/<name>-*,
# replayable with $BUILD/fuzz/fuzz_<name> FILE or, in the normal build,
# build/tests/fuzz_replay_<name> FILE.  The targets' own output (the
# messages of the parsers they feed) is closed (-close_fd_mask=3); the
# fuzzer's and the sanitizers' reports are not.
set -u
BUILD=${BUILD:-build/libfuzzer}
SECONDS_EACH=${FUZZ_SECONDS:-30}
RUNS_EACH=${FUZZ_RUNS:-}

if [ -n "$RUNS_EACH" ]; then
	bound=(-runs="$RUNS_EACH")
else
	bound=(-max_total_time="$SECONDS_EACH")
fi

pass=0 fail=0 failed="" total_runs=0 start=$(date +%s)
for name in "$@"; do
	bin=$BUILD/fuzz/fuzz_$name
	seeds=tests/fuzz/corpus/$name
	work=$BUILD/fuzz/corpus/$name
	log=$BUILD/fuzz/$name.log
	mkdir -p "$work" "$BUILD/fuzz/artifacts"
	if [ ! -d "$seeds" ]; then
		echo "FAIL  fuzz_$name: no corpus $seeds"
		fail=$((fail + 1)); failed="$failed $name"
		continue
	fi
	t0=$(date +%s.%N)
	# The first directory receives what is new; the seeds stay as they are.
	"$bin" "${bound[@]}" -timeout=10 -print_final_stats=1 -close_fd_mask=3 \
		-artifact_prefix="$BUILD/fuzz/artifacts/$name-" "$work" "$seeds" \
		>"$log" 2>&1
	rc=$?
	secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	if [ $rc -eq 0 ] && [ -n "$runs" ]; then
		pass=$((pass + 1))
		total_runs=$((total_runs + runs))
		printf 'PASS  fuzz_%-16s %10s runs in %6.1fs (%7.0f/s), %s new inputs\n' \
			"$name" "$runs" "$secs" \
			"$(awk -v r="$runs" -v s="$secs" 'BEGIN { print (s > 0 ? r / s : r) }')" \
			"$(find "$work" -type f | wc -l)"
	else
		fail=$((fail + 1)); failed="$failed $name"
		printf 'FAIL  fuzz_%s exit %d; last lines of %s:\n' "$name" "$rc" "$log"
		tail -n 40 "$log" | sed 's/^/      /'
	fi
done
echo "fuzz: $pass passed, $fail failed; $total_runs runs in $(( $(date +%s) - start ))s"
[ $fail -eq 0 ] || { echo "failed:$failed"; exit 1; }
