#!/bin/sh
# mkman.sh PROGRAM OUT.1 - the section-1 page of a tool that has no
# hand-written tools/man/PROGRAM.1 yet, made from its own --help (so the
# page never disagrees with the program).  Writes mdoc: NAME, SYNOPSIS
# (the usage lines), DESCRIPTION (the rest of --help, verbatim), SEE ALSO.
set -eu
prog=$1
out=$2
name=$(basename "$prog")
help=$("$prog" --help 2>&1) || true
first=$(printf '%s\n' "$help" | sed -n '/^usage:/d; /^ /d; p' | sed -n 1p)
{
	echo ".Dd $(date -u -r "$prog" '+%B %-d, %Y')"
	echo ".Dt $(echo "$name" | tr 'a-z' 'A-Z') 1"
	echo ".Os tickbus"
	echo ".Sh NAME"
	echo ".Nm $name"
	echo ".Nd $(printf '%s' "${first:-a tickbus tool}" | sed 's/[.:,]$//')"
	echo ".Sh SYNOPSIS"
	printf '%s\n' "$help" | sed -n 's/^usage: *//p; s/^       \(tb-\)/\1/p' |
	while IFS= read -r line; do
		echo ".Bd -literal"
		printf '%s\n' "$line" | sed 's/\\/\\e/g; s/^\./\\\&./'
		echo ".Ed"
	done
	echo ".Sh DESCRIPTION"
	echo "The text of"
	echo ".Nm"
	echo ".Fl -help :"
	echo ".Bd -literal"
	printf '%s\n' "$help" | sed '/^usage:/d; /^       tb-/d' |
		sed 's/\\/\\e/g; s/^\./\\\&./; s/^'"'"'/\\\&'"'"'/'
	echo ".Ed"
	echo ".Sh SEE ALSO"
	echo ".Xr tickbus.ini 5 ,"
	echo ".Xr tickbus 7"
} >"$out"
