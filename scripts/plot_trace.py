#!/usr/bin/env python3
"""plot_trace.py — one training step of a `build/train --trace FILE` trace as a PNG timeline.

    scripts/plot_trace.py TRACE.json [--step N] [-o step.png]

One band per rank: the compute track (forward and backward spans per unit, the waits on
collectives, data, the optimizer) above one row per communicator (all-gathers,
reduce-scatters, the expert exchange), each collective drawn where it ran on the wire
(ZipCCL runs a communicator's calls one at a time, in issue order). The step is the
"step N" span of rank 0 (default: the last step in the file). Prints the step's breakdown
per rank: compute time, the waits per kind, and each communicator's busy time.

Left out: more than one step per picture, flow arrows from issue to start.
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"fwd": "#4c72b0", "bwd": "#55a868", "wait": "#c44e52", "allgather": "#dd8452",
          "reducescatter": "#8172b3", "alltoall": "#937860", "other": "#bbbbbb"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--step", type=int, default=0)
    ap.add_argument("-o", "--out", default="step.png")
    a = ap.parse_args()
    ev = json.load(open(a.trace))["traceEvents"]
    names = {}
    for e in ev:
        if e["ph"] == "M" and e["name"] == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    steps = [e for e in ev if e["ph"] == "X" and e["pid"] == 0 and e["name"].startswith("step ")]
    if not steps:
        sys.exit("plot_trace: no 'step N' spans in the trace")
    st = [s for s in steps if int(s["name"].split()[1]) == a.step] if a.step else [steps[-1]]
    if not st:
        sys.exit(f"plot_trace: no step {a.step} (the trace has {steps[0]['name']} .. {steps[-1]['name']})")
    t0, t1 = st[0]["ts"], st[0]["ts"] + st[0]["dur"]
    ranks = sorted({p for p, _ in names})
    rows = []  # (label, pid, tid)
    for p in ranks:
        for (q, t), n in sorted(names.items()):
            if q == p:
                rows.append((f"rank {p} {n}", p, t))
    fig, ax = plt.subplots(figsize=(14, 0.45 * len(rows) + 1.5))
    y = {(p, t): len(rows) - 1 - i for i, (_, p, t) in enumerate(rows)}
    busy = {}
    for e in ev:
        if e["ph"] != "X" or (e["pid"], e["tid"]) not in y or e["name"].startswith("step "):
            continue
        s, d = e["ts"], e["dur"]
        if s + d < t0 or s > t1:
            continue
        cat = e.get("cat", "other")
        c = COLORS["fwd" if e["name"].startswith("fwd") else "bwd" if e["name"].startswith("bwd")
                   else cat if cat in COLORS else "other"]
        h = 0.8 if cat != "wait" else 0.35
        ax.broken_barh([((s - t0) / 1e3, d / 1e3)], (y[(e["pid"], e["tid"])] - h / 2, h), color=c,
                       edgecolor="none")
        key = (e["pid"], cat if e["tid"] == 0 else names[(e["pid"], e["tid"])])
        busy[key] = busy.get(key, 0) + d / 1e3
    ax.set_yticks(list(y.values()))
    ax.set_yticklabels([r[0] for r in rows], fontsize=8)
    ax.set_xlim(0, (t1 - t0) / 1e3)
    ax.set_xlabel(f"ms since the start of {st[0]['name']} (rank 0: {st[0]['dur'] / 1e3:.1f} ms)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=v) for v in COLORS.values()]
    ax.legend(handles, ["forward", "backward", "compute waits", "all-gather", "reduce-scatter",
                        "all-to-all", "data / optimizer"], loc="upper center", ncol=7, fontsize=8,
              bbox_to_anchor=(0.5, 1.02 + 0.3 / len(rows)))
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    for p in ranks:
        parts = ", ".join(f"{k[1]} {v:.1f} ms" for k, v in sorted(busy.items()) if k[0] == p)
        print(f"rank {p}: {parts}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
