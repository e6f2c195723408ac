#!/bin/bash
# Runs each libFuzzer target named on the command line (fuzz_<name>, built
# by `make fuzz` into $BUILD/fuzz/) for FUZZ_SECONDS from its checked-in
# corpus tests/fuzz/corpus/<name>/, and prints one line per target and a
# summary:
#   fuzz: N passed, N failed
# New inputs the fuzzer finds go to $BUILD/fuzz/corpus/<name>/ (copy the
# ones worth keeping into the checked-in corpus, a few at a time); a
# crash, leak or timeout is written to $BUILD/fuzz/artifacts/<name>-*,
# replayable with $BUILD/fuzz/fuzz_<name> FILE or, in the normal build,
# build/tests/fuzz_replay_<name> FILE.
set -u
BUILD=${BUILD:-build/libfuzzer}
SECONDS_EACH=${FUZZ_SECONDS:-30}

pass=0 fail=0 failed=""
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
	# The first directory receives what is new; the seeds stay as they are.
	"$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -print_final_stats=1 \
		-artifact_prefix="$BUILD/fuzz/artifacts/$name-" "$work" "$seeds" \
		>"$log" 2>&1
	rc=$?
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	if [ $rc -eq 0 ]; then
		pass=$((pass + 1))
		printf 'PASS  fuzz_%-24s %s runs in %ss, %s new inputs\n' "$name" \
			"${runs:-?}" "$SECONDS_EACH" "$(find "$work" -type f | wc -l)"
	else
		fail=$((fail + 1)); failed="$failed $name"
		printf 'FAIL  fuzz_%s exit %d; last lines of %s:\n' "$name" "$rc" "$log"
		tail -n 40 "$log" | sed 's/^/      /'
	fi
done
echo "fuzz: $pass passed, $fail failed"
[ $fail -eq 0 ] || { echo "failed:$failed"; exit 1; }
