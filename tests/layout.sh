#!/bin/bash
# test_layout: no include runs upward or sideways.  The layers, bottom up:
#   bus/include/tickbus/  the public headers: each other only
#   bus/                  the core, transports, recovery: bus/ and <tickbus/>
#   publisher/ subscriber/  the two halves of the API: bus/ and their own
#   tools/md/             the market-data applications: the public API, the
#                         generated schema, tools/md/ and the tools' shared
#                         headers (tools/cli.h, tools/hash.h) only
#   tools/                programs: anything below tests/
#   examples/             the public API only
#   tests/                anything
# Run from the top of the tree (tests/run-tests.sh does).  Prints every
# include that breaks a rule and exits 1 if there is one.
set -u
bad=0
refuse() { echo "layout: $1: #include \"$2\": $3"; bad=1; }

check() { # file allowed-regex why
	local f=$1 ok=$2 why=$3 inc
	while IFS= read -r inc; do
		[[ $inc =~ $ok ]] || refuse "$f" "$inc" "$why"
	done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
}

for f in bus/include/tickbus/*.h; do
	check "$f" '^[a-z_]+\.h$' "a public header includes only its siblings"
done
while IFS= read -r f; do
	check "$f" '^bus/' "bus/ includes only bus/ (and <tickbus/...>)"
done < <(find bus -name '*.[ch]' -not -path 'bus/include/*')
for f in publisher/*.[ch]; do
	check "$f" '^(bus|publisher)/' "publisher/ includes bus/ and publisher/ only"
done
for f in subscriber/*.[ch]; do
	check "$f" '^(bus|subscriber)/' "subscriber/ includes bus/ and subscriber/ only"
done
for f in tools/md/*.[ch]; do
	check "$f" '^(tools/md/|tools/cli\.h$|tools/hash\.h$|tickbus_schema(_v1)?\.h$)' \
		"tools/md/ is built on the public API and the generated schema"
done
for f in tools/*.[ch]; do
	check "$f" '^(bus|publisher|subscriber|tools)/|^tickbus_schema(_v1)?\.h$' \
		"a tool includes no test code"
done
for f in examples/*.c; do
	check "$f" '^$' "an example uses the public API only (<tickbus/...>)"
done
if [ $bad -eq 0 ]; then
	echo "layout: every include runs downward"
fi
exit $bad
