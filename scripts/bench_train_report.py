#!/usr/bin/env python3
"""bench_train_report.py — the table and the stacked-bar PNG of scripts/bench_train.sh runs.

    scripts/bench_train_report.py docs/bench/train_TAG.jsonl [-o docs/bench/train_TAG.png]

Per strategy and overlap setting, medians over the repetitions of each run's median step:
step time, compute (step - exposed communication), exposed all-gather, reduce-scatter and
bookkeeping time, codec time (on the progress threads, partly hidden), the time inside the
collectives, the overlap fraction and the load average. Then the ratios the issue asks for:
compressed against raw and native (overlap on), overlap on against off per strategy, auto
against the best fixed strategy. Prints a Markdown table.
"""
import argparse
import json
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ["native", "raw", "compressed", "auto"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl")
    ap.add_argument("-o", "--out")
    a = ap.parse_args()
    rows = [json.loads(l) for l in open(a.jsonl) if l.strip()]
    groups = {}
    for r in rows:
        groups.setdefault((r["strategy"], r["overlap_on"]), []).append(r)
    med = lambda rs, k: statistics.median(r.get(k, 0) for r in rs)
    keys = sorted(groups, key=lambda k: (k[1], ORDER.index(k[0]) if k[0] in ORDER else 9))
    print("| strategy | overlap | step ms | compute | exposed ag | exposed rs | exposed misc | codec | in collectives | overlap | wire ratio | runs | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    m = {}
    for k in keys:
        rs = groups[k]
        m[k] = {f: med(rs, f) for f in ("ms", "compute_ms", "exposed_allgather_ms", "exposed_reducescatter_ms",
                                         "exposed_misc_ms", "codec_ms", "comm_allgather_ms",
                                         "comm_reducescatter_ms", "overlap", "comm_ratio", "load")}
        x = m[k]
        print(f"| {k[0]} | {'on' if k[1] else 'off'} | {x['ms']:.0f} | {x['compute_ms']:.0f} | "
              f"{x['exposed_allgather_ms']:.0f} | {x['exposed_reducescatter_ms']:.0f} | {x['exposed_misc_ms']:.0f} | "
              f"{x['codec_ms']:.0f} | {x['comm_allgather_ms'] + x['comm_reducescatter_ms']:.0f} | "
              f"{100 * x['overlap']:.0f}% | {x['comm_ratio']:.3f} | {len(groups[k])} | "
              f"{min(r['load'] for r in groups[k]):.1f}-{max(r['load'] for r in groups[k]):.1f} |")
    print()
    ms = {k: v["ms"] for k, v in m.items()}
    if ("raw", False) in m:
        x = m[("raw", False)]
        wire = x["comm_allgather_ms"] + x["comm_reducescatter_ms"]
        print(f"- the config: compute {x['compute_ms']:.0f} ms, raw communication {wire:.0f} ms per step "
              f"(raw, overlap off: time inside the collectives) = {wire / max(x['compute_ms'], 1e-9):.2f}x compute")
    for ov in (True, False):
        tag = "on" if ov else "off"
        c, r, n = ms.get(("compressed", ov)), ms.get(("raw", ov)), ms.get(("native", ov))
        if c and r:
            print(f"- overlap {tag}: compressed vs raw {r / c:.3f}x" + (f", vs native {n / c:.3f}x" if n else ""))
        fixed = [ms[(s, ov)] for s in ("native", "raw", "compressed") if (s, ov) in ms]
        if ("auto", ov) in ms and fixed:
            print(f"- overlap {tag}: auto {ms[('auto', ov)]:.0f} ms against the best fixed {min(fixed):.0f} ms "
                  f"({ms[('auto', ov)] / min(fixed) - 1:+.1%})")
    for s in ORDER:
        if (s, True) in ms and (s, False) in ms:
            print(f"- {s}: overlap on vs off {ms[(s, False)] / ms[(s, True)]:.3f}x")
    if a.out:
        fig, ax = plt.subplots(figsize=(1.2 * len(keys) + 2, 4.5))
        parts = [("compute_ms", "compute", "#4c72b0"), ("exposed_allgather_ms", "exposed all-gather", "#dd8452"),
                 ("exposed_reducescatter_ms", "exposed reduce-scatter", "#8172b3"),
                 ("exposed_misc_ms", "exposed bookkeeping", "#bbbbbb")]
        for i, k in enumerate(keys):
            b = 0
            for f, lab, col in parts:
                ax.bar(i, m[k][f], bottom=b, color=col, label=lab if i == 0 else None)
                b += m[k][f]
            ax.plot([i - 0.4, i + 0.4], [m[k]["codec_ms"]] * 2, color="k", lw=1.5,
                    label="codec time (progress threads)" if i == 0 else None)
        ax.set_xticks(range(len(keys)))
        ax.set_xticklabels([f"{s}\noverlap {'on' if o else 'off'}" for s, o in keys], fontsize=8)
        ax.set_ylabel("ms per step (median)")
        ax.set_title(a.jsonl.split("/")[-1])
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(a.out, dpi=110)
        print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
