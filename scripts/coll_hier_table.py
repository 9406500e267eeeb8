#!/usr/bin/env python3
"""coll_hier_table.py — the hier vs flat vs native table of docs/BENCHMARKS.md
("Hierarchical designs") from zipccl-bench JSON lines of repeated runs on a
two-level emulated cluster (each row tagged "run": k; in files without the
tag, the k-th row of a (collective, size, entry) is run k).

    python3 scripts/coll_hier_table.py docs/bench/coll_hier_2x2_10gbit.jsonl

Per (collective, size): the median over the runs of each entry's time (ms per
call: the slowest rank's mean), the hier compressed design against the flat
compressed one (median and per run), the wire ratios, and #wrong summed.
With rows of strategy auto (scripts/bench_hier_coll.sh auto): a second
table, auto's median time, the design it settled on per run ("picked"), and
its median against the fastest fixed entry's.
"""
import json
import statistics
import sys

ENTRIES = [("native", None), ("raw", "default"), ("compressed", "default"), ("raw", "hier"),
           ("compressed", "hier")]
NAMES = ["native", "raw", "compressed", "raw:hier", "compressed:hier"]


def main(path):
    rows = [json.loads(l) for l in open(path) if '"coll"' in l]
    cells = {}
    for r in rows:
        key = (r["coll"], r["bytes"], r["strategy"], r.get("algo"))
        cells.setdefault(key, []).append(r)
        r.setdefault("run", len(cells[key]))  # untagged files: the k-th row of a key is run k
    colls = sorted({r["coll"] for r in rows}, key=["allgather", "reducescatter", "allreduce"].index)
    sizes = sorted({r["bytes"] for r in rows})
    print("| collective | bytes | " + " | ".join(NAMES) +
          " | compressed:hier vs compressed (runs) | wire ratio: compressed / compressed:hier |")
    print("|---|---:|" + "---:|" * len(NAMES) + "---|---|")
    wrong = 0
    for c in colls:
        for b in sizes:
            med, per = [], {}
            for e in ENTRIES:
                rs = cells.get((c, b) + e, [])
                wrong += sum(r.get("wrong", 0) for r in rs if e[0] != "native")
                per[e] = {r["run"]: r["time_us"] for r in rs}
                med.append(statistics.median(r["time_us"] for r in rs) / 1e3 if rs else float("nan"))
            runs = sorted(set(per[ENTRIES[2]]) & set(per[ENTRIES[4]]))
            x = [per[ENTRIES[2]][k] / per[ENTRIES[4]][k] for k in runs]
            ratio = lambda e: statistics.median(r["ratio"] for r in cells.get((c, b) + e, [{"ratio": 0}]))
            print(f"| {c} | {b >> 20} MiB | " + " | ".join(f"{m:.1f}" for m in med) +
                  f" | {med[2] / med[4]:.2f}x ({', '.join(f'{v:.2f}' for v in x)}) | "
                  f"{ratio(ENTRIES[2]):.2f} / {ratio(ENTRIES[4]):.2f} |")
    autos = [r for r in rows if r["strategy"] == "auto"]
    if autos:
        print("\n| collective | bytes | auto | picked (per run) | fastest fixed entry | auto / fastest |")
        print("|---|---:|---:|---|---|---:|")
        for c in colls:
            for b in sizes:
                rs = sorted((r for r in autos if r["coll"] == c and r["bytes"] == b), key=lambda r: r["run"])
                if not rs:
                    continue
                wrong += sum(r.get("wrong", 0) for r in rs)
                a = statistics.median(r["time_us"] for r in rs) / 1e3
                fixed = [(statistics.median(r["time_us"] for r in cells[(c, b) + e]) / 1e3, n)
                         for e, n in zip(ENTRIES, NAMES) if cells.get((c, b) + e)]
                t, n = min(fixed)
                print(f"| {c} | {b >> 20} MiB | {a:.1f} | {', '.join(r['picked'] for r in rs)} | {n} {t:.1f} | "
                      f"{a / t:.2f}x |")
    print(f"\n#wrong (every entry but native): {wrong}")


if __name__ == "__main__":
    main(sys.argv[1])
