#!/usr/bin/python3
"""Parses a Prometheus text exposition with the prometheus_client library
(Debian's python3-prometheus-client) and prints every sample on one line,
labels sorted, so that a C test can look for exact lines:

    family TYPE name{k="v",...} value

Exit status: 0 parsed, 1 the parser refused the text (its message on
stderr), 77 the library is missing.  The text comes from the file named on
the command line, or stdin.
"""
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("python3-prometheus-client is not installed "
          "(apt-get install python3-prometheus-client)")
    sys.exit(77)


def main():
    text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser's refusal, whatever its class
        print("parse error: %s" % e, file=sys.stderr)
        return 1
    seen = set()
    for fam in families:
        if fam.name in seen:
            print("family %s appears twice" % fam.name, file=sys.stderr)
            return 1
        seen.add(fam.name)
        for s in fam.samples:
            labels = ",".join('%s="%s"' % (k, s.labels[k])
                              for k in sorted(s.labels))
            print("%s %s %s{%s} %r" % (fam.name, fam.type, s.name, labels,
                                       float(s.value)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
