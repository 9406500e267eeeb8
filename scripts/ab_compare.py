#!/usr/bin/env python3
"""ab_compare.py — builds against each other, point by point, from the JSON
lines of scripts/auto_ab.sh (which alternates the builds run by run).

    scripts/ab_compare.py FILE.jsonl [--base LABEL] [--json]

For every (collective, bytes, strategy) it prints each build's median time
over its runs and the ratio to the base build's (default: the first label),
then per build the median and the spread of those ratios over all points.
Give the same binary twice under two labels (before=BIN before2=BIN
after=BIN2) and the second label's ratios are the same-build noise the
others' are to be read against.  --json prints one line per point instead.
"""
import json
import statistics as st
import sys


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    if not args:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    base = None
    if "--base" in argv:
        base = argv[argv.index("--base") + 1]
        args = [a for a in args if a != base]
    rows, labels = [], []
    for line in open(args[0]):
        j = json.loads(line)
        if "header" in j:
            continue
        rows.append(j)
        if j["version"] not in labels:
            labels.append(j["version"])
    base = base or labels[0]
    times = {}
    for r in rows:
        if r.get("wrong"):
            print("ab_compare.py: %s %s %d %s run %d had #wrong %d" % (r["version"], r["coll"], r["bytes"],
                  r["strategy"], r["run"], r["wrong"]), file=sys.stderr)
        times.setdefault((r["coll"], r["bytes"], r["strategy"]), {}).setdefault(r["version"], []).append(r["time_us"])
    others = [l for l in labels if l != base]
    ratios = {l: [] for l in others}
    if "--json" not in argv:
        print("%-28s %12s" % ("point", base + " us") + "".join("%16s" % (l + "/" + base) for l in others))
    for k in sorted(times):
        d = times[k]
        if base not in d:
            continue
        b = st.median(d[base])
        cells = {}
        for l in others:
            if l in d:
                cells[l] = st.median(d[l]) / b
                ratios[l].append(cells[l])
        if "--json" in argv:
            print(json.dumps({"coll": k[0], "bytes": k[1], "strategy": k[2], "base_us": b,
                              "ratio": {l: round(v, 4) for l, v in cells.items()}}))
        else:
            print("%-28s %12.1f" % ("%s %d %s" % k, b) +
                  "".join("%16s" % ("%.3f" % cells[l] if l in cells else "-") for l in others))
    if "--json" not in argv:
        print("\nper build, over all points: median ratio [quartiles] (points)")
        for l in others:
            x = sorted(ratios[l])
            if not x:
                continue
            q = st.quantiles(x, n=4) if len(x) > 1 else [x[0], x[0], x[0]]
            print("  %-12s %.3f [%.3f, %.3f] (%d)" % (l, st.median(x), q[0], q[2], len(x)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
