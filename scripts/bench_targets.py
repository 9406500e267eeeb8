#!/usr/bin/env python3
"""bench_targets.py FILE.jsonl — the 1 Gbit/s target verdict from repeated runs.

Reads the JSON lines scripts/bench_targets.sh wrote (zipccl-bench --json plus
a "rep" field), takes for every (collective, strategy) the median over the
repetitions of the bench's time (itself the median of its calls on the
slowest rank), and prints a Markdown table: each repetition's time, the
median, and compressed's speed-up against native and raw with the issue's
targets.  A speed-up is also given per repetition (compressed and the
baseline from the same run), since the link's behaviour drifts between runs.
The native baseline of a run is the faster of MPI's collective under the
cluster's btl_tcp_flags=send ("native") and under Open MPI's defaults
("native-put"), so the setting cannot flatter compressed.
"""
import json
import statistics
import sys

TARGETS = {  # collective: (vs native, vs raw)
    "allgather": (1.40, 1.35),
    "alltoall": (1.40, 1.35),
    "alltoallv": (1.40, 1.35),
    "reducescatter": (1.30, 1.25),
    "allreduce": (1.30, 1.25),
}
ORDER = ["allgather", "reducescatter", "allreduce", "alltoall", "alltoallv"]


def table(rows):
    """{(coll, strategy): {rep: ms}} from the rows (each the bench's median of
    its calls on the slowest rank), with "best-native" per run the faster of
    native and native-put; and #wrong summed."""
    t = {}
    wrong = 0
    for r in rows:
        if r.get("algo", "default") not in ("default", ""):
            continue
        t.setdefault((r["coll"], r["strategy"]), {})[r["rep"]] = r["time_us"] / 1e3
        wrong += int(r.get("wrong") or 0) if isinstance(r.get("wrong"), int) else 0
    for coll in ORDER:  # the native baseline: per run, the faster MPI setting
        a, b = t.get((coll, "native"), {}), t.get((coll, "native-put"), {})
        best = {k: min(v for v in (a.get(k), b.get(k)) if v is not None) for k in set(a) | set(b)}
        if best:
            t[(coll, "best-native")] = best
    return t, wrong


def speedup(t, coll, base):
    """compressed against base ("best-native" or "raw"): the median over the
    runs of base's time over that of compressed, and the per-run ratios
    (None when either was not run)."""
    c, b = t.get((coll, "compressed")), t.get((coll, base))
    if not c or not b:
        return None
    return (statistics.median(b.values()) / statistics.median(c.values()),
            {k: b[k] / c[k] for k in sorted(b) if k in c})


def main(path):
    rows = [json.loads(line) for line in open(path) if line.startswith('{"rep"')]
    if not rows:
        sys.exit(f"bench_targets.py: no result rows in {path}")
    t, wrong = table(rows)
    reps = sorted({r["rep"] for r in rows})
    print(f"| collective | strategy | {' | '.join(f'run {k} ms' for k in reps)} | median ms |")
    print("|---|---|" + "---:|" * (len(reps) + 1))
    for coll in ORDER:
        for s in ("native", "native-put", "raw", "compressed", "compressed:f3", "auto"):
            v = t.get((coll, s))
            if not v:
                continue
            cells = " | ".join(f"{v[k]:.0f}" if k in v else "" for k in reps)
            print(f"| {coll} | {s} | {cells} | {statistics.median(v.values()):.0f} |")
    print()
    print("| collective | compressed vs native (target) | per run | compressed vs raw (target) | per run |")
    print("|---|---|---|---|---|")
    for coll in ORDER:
        if not t.get((coll, "compressed")):
            continue
        cells = [coll]
        for base, target in zip(("best-native", "raw"), TARGETS[coll]):
            got = speedup(t, coll, base)
            if not got:
                cells += ["n/a", ""]
                continue
            sp, per = got
            mark = "✓" if sp >= target else "✗"
            cells += [f"{sp:.3f}x (≥ {target:.2f} {mark})", ", ".join(f"{x:.3f}x" for x in per.values())]
        print("| " + " | ".join(cells) + " |")
    if any(k[1] == "compressed:f3" for k in t):  # the codec's share: F2 (fast) against F3
        print("\n| collective | compressed:f3 vs native | compressed (fast, F2) vs compressed:f3 | per run |")
        print("|---|---|---|---|")
        for coll in ORDER:
            c, f3, nat = t.get((coll, "compressed")), t.get((coll, "compressed:f3")), t.get((coll, "best-native"))
            if not c or not f3 or not nat:
                continue
            per = ", ".join(f"{f3[k] / c[k]:.3f}x" for k in reps if k in f3 and k in c)
            print(f"| {coll} | {statistics.median(nat.values()) / statistics.median(f3.values()):.3f}x | "
                  f"{statistics.median(f3.values()) / statistics.median(c.values()):.3f}x | {per} |")
    print("\nnative baseline: per run, the faster of native and native-put")
    print(f"\n#wrong summed over every row: {wrong}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
