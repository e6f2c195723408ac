#!/usr/bin/python3
"""Reads tb-doctor's --json (a file, or stdin) with Python's json module and
prints one line per check, "ID SUBJECT VERDICT" ("-" for no subject), then
"summary OK WARN FAIL SKIPPED"; exits 1 if the JSON does not parse or lacks
a field, or the summary disagrees with the checks.  Used by
tests/scenario/test_tools_doctor.c."""
import json
import sys

try:
    d = json.load(open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin)
    count = {"ok": 0, "warn": 0, "fail": 0, "skipped": 0}
    for c in d["checks"]:
        assert c["verdict"] in count, c
        assert c["saw"], c
        assert ("why" if c["verdict"] == "skipped" else "fix") in c, c
        if c["verdict"] != "ok":
            assert c.get("why") or c.get("fix"), c
        count[c["verdict"]] += 1
        print(c["id"], c["subject"] or "-", c["verdict"])
    assert d["summary"] == count, (d["summary"], count)
    print("summary %d %d %d %d" % (count["ok"], count["warn"], count["fail"],
                                   count["skipped"]))
except Exception as e:  # any refusal: not JSON, a field missing or wrong
    print("bad tb-doctor JSON: %r" % e, file=sys.stderr)
    sys.exit(1)
