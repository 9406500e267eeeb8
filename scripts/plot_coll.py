#!/usr/bin/env python3
"""plot_coll.py — render zipccl-bench JSON lines into figures, tables and a verdict.

    python3 scripts/plot_coll.py docs/bench/coll_1gbit.jsonl ... [--doc docs/BENCHMARKS.md]

Each input is one rate's sweep (scripts/bench_sweep.sh): an optional first line
{"header": ..., "rate": ...} and then one zipccl-bench --json row per line.
For each input it writes <input>.png (time vs size per strategy, one log-log
panel per collective), prints the verdict against the targets of the
collectives work, and with --doc replaces the "## Collectives" section of that
Markdown file (creating the file with a "# Benchmarks" title if needed).  Text
between "<!-- notes -->" and "<!-- /notes -->" in the old section is kept.

Repeated runs of a point (scripts/bench_sweep.sh --reps N) are merged: the
median over the runs of each run's time (itself the median over the bench's
iterations), and every design auto picked in them.  Beside the verdict, an
information line reads them run by run instead (per_run_worst).
"""
import json
import os
import re
import statistics
import sys

import bench_targets  # the 1 Gbit/s target points' repeated runs (scripts/bench_targets.sh)
from bench_targets import TARGETS  # coll: speed-up of compressed over (native, raw)

# Targets: 1 Gbit/s, 4 hosts, 64 MiB bf16 per rank.  AlltoAllv has no target
# of its own: it is held to AlltoAll's.
TARGET_BYTES = 64 << 20
AUTO_SLACK = 1.03  # auto may be at most 3% slower than the best fixed strategy
COLLS = ["allgather", "reducescatter", "allreduce", "alltoall", "alltoallv"]
COLL_TITLE = {"allgather": "AllGather", "reducescatter": "ReduceScatter",
              "allreduce": "AllReduce", "alltoall": "AlltoAll", "alltoallv": "AlltoAllv"}
STRATS = ["native", "raw", "compressed", "auto"]
COLOR = {"native": "tab:blue", "raw": "tab:orange", "compressed": "tab:green", "auto": "tab:red"}


def load(path):
    meta, rows = {}, []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            obj = json.loads(line)
            if "header" in obj:
                meta = obj
            elif "coll" in obj:
                rows.append(obj)
    if not meta.get("rate"):
        m = re.search(r"coll_(.+)\.jsonl$", path)
        meta["rate"] = m.group(1) if m else path
    return meta, rows


def variant(r):
    """Series name: the strategy, plus a compressed entry's codec other than
    fast and the algorithm when it was forced ("compressed/f3", "raw/ring")."""
    v = r["strategy"]
    if v == "compressed" and r.get("codec", "default") not in ("default", "fast"):
        v += "/" + r["codec"]
    a = r.get("algo", "default")
    return v if a == "default" else "%s/%s" % (v, a)


def rate_label(meta):
    """The section name: the rate, and the host count of a sweep on other
    than 4 hosts (bench_sweep.sh --hosts 2: "10gbit_2hosts")."""
    r = meta.get("rate", "?")
    r = "unthrottled" if r in ("none", "unthrottled") else r
    h = meta.get("hosts", 4)
    return r if h == 4 or r.endswith("hosts") else "%s_%dhosts" % (r, h)


def link_of(label):
    """A section name's rate and host count: ("10gbit", 2), ("1gbit", 4)."""
    m = re.match(r"(.*)_(\d+)hosts$", label)
    return (m.group(1), int(m.group(2))) if m else (label, 4)


def human(b):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= div and b % div == 0:
            return "%d%s" % (b // div, unit)
    return str(b)


def merge_reps(rs):
    """One row from the repetitions of a point (bench_sweep.sh --reps): the
    median time and ratio, every choice auto made, #wrong summed."""
    if len(rs) == 1:
        return rs[0]
    m = dict(rs[0])
    m["time_us"] = statistics.median(r["time_us"] for r in rs)
    m["ratio"] = statistics.median(r["ratio"] for r in rs)
    m["reps"] = len(rs)
    picks = []
    for r in rs:
        if r.get("picked") and r["picked"] not in picks:
            picks.append(r["picked"])
    if picks:
        m["picked"] = " | ".join(picks)
    m["wrong"] = None if any(r["wrong"] is None for r in rs) else sum(r["wrong"] for r in rs)
    return m


def by_point(rows):
    """{coll: {bytes: {variant: [rows, in the order of the repetitions]}}}."""
    t = {}
    for r in rows:
        t.setdefault(r["coll"], {}).setdefault(r["bytes"], {}).setdefault(variant(r), []).append(r)
    return t


def table_by(rows):
    """{coll: {bytes: {variant: row}}}, repetitions of a point merged."""
    t = by_point(rows)
    for sizes in t.values():
        for d in sizes.values():
            for v in d:
                d[v] = merge_reps(d[v])
    return t


def plot(path, meta, rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_coll.py: matplotlib missing, no figure for %s" % path, file=sys.stderr)
        return None
    t = table_by(rows)
    colls = [c for c in COLLS if c in t]
    if not colls:
        return None
    fig, axes = plt.subplots(2, 3, figsize=(14, 8), squeeze=False)
    for ax, coll in zip(axes.flat, colls):
        series = sorted({v for sizes in t[coll].values() for v in sizes},
                        key=lambda v: (STRATS.index(v.split("/")[0]) if v.split("/")[0] in STRATS else 9, v))
        for v in series:
            pts = sorted((b, d[v]["time_us"]) for b, d in t[coll].items() if v in d)
            ax.loglog([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                      linestyle=":" if v.endswith("/oneshot") else "--" if "/" in v else "-", label=v,
                      color=COLOR.get(v.split("/")[0], "tab:gray"))
        ax.set_title(COLL_TITLE[coll])
        ax.set_xlabel("bytes (nccl-tests convention)")
        ax.set_ylabel("time (us, median)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(colls):]:
        ax.axis("off")
    n = rows[0]["nranks"] if rows else "?"
    fig.suptitle("zipccl-bench, %s ranks (one per emulated host), link %s, bf16 Gaussian"
                 % (n, rate_label(meta)))
    fig.tight_layout()
    png = re.sub(r"\.jsonl$", "", path) + ".png"
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return png


def per_run_worst(rows):
    """Per point, auto against each fixed entry run by run (a point's k-th
    row of an entry is from the sweep's k-th repetition), the median over
    the runs, and the worst entry's: a reading of the repeated sweep that
    cancels the drift between runs, shown beside the verdict."""
    out = []
    for sizes in by_point(rows).values():
        for d in sizes.values():
            a = [r["time_us"] for r in d.get("auto", [])]
            if len(a) < 2 or len(d) < 2:
                continue
            out.append(max(statistics.median(x / r["time_us"] for x, r in zip(a, t))
                           for v, t in d.items() if v != "auto"))
    return out


def verdict(sets):
    """Rows of (check, measured, target, ok) over all rates given."""
    out = []
    for meta, rows in sets:
        rate = rate_label(meta)
        t = table_by(rows)
        if rate == "1gbit":
            for coll in COLLS:
                # 64 MiB per rank: AllGather's 'bytes' is the whole output, n x that.
                n = rows[0]["nranks"] if rows else 4
                want = TARGET_BYTES * n if coll == "allgather" else TARGET_BYTES
                d = t.get(coll, {}).get(want)
                label = "1gbit %s %s" % (COLL_TITLE[coll], human(want))
                if not d and coll == "allgather" and t.get(coll, {}).get(TARGET_BYTES):
                    d, label = t[coll][TARGET_BYTES], "1gbit AllGather 64M (16M/rank)"
                if not d:
                    continue
                tn, tr = TARGETS[coll]
                c = d.get("compressed")
                for base, target in (("native", tn), ("raw", tr)):
                    if c and base in d:
                        s = d[base]["time_us"] / c["time_us"]
                        out.append(("%s: compressed vs %s" % (label, base),
                                    "%.2fx" % s, ">= %.2fx" % target, s >= target))
                    else:
                        out.append(("%s: compressed vs %s" % (label, base),
                                    "not run", ">= %.2fx" % target, None))
        if rate == "1gbit_targets":  # the same points, run several times
            bt, _ = bench_targets.table(rows)
            runs = len({r.get("rep") for r in rows})
            for coll in COLLS:
                for base, target in zip(("best-native", "raw"), TARGETS[coll]):
                    got = bench_targets.speedup(bt, coll, base)
                    if got:
                        out.append(("1gbit %s 64M/rank, %d runs: compressed vs %s" % (
                                        COLL_TITLE[coll], runs, base.replace("best-", "")),
                                    "%.2fx (per run %s)" % (got[0], ", ".join("%.2f" % x for x in got[1].values())),
                                    ">= %.2fx" % target, got[0] >= target))
        link, hosts = link_of(rate)
        if link in ("10gbit", "unthrottled"):
            rate = link if hosts == 4 else "%s, %d hosts" % (link, hosts)
            every = []  # auto / best fixed at every (collective, size)
            eligible = []  # the same, without native reductions (auto never runs them, §7)
            strategies = []  # auto / best of the fixed strategies as such (native, raw, compressed)
            for coll in COLLS:
                if coll not in t:
                    continue
                worst, at, best_name = 0.0, None, ""
                for b, d in sorted(t[coll].items()):
                    # every fixed design timed in the run: the strategies and
                    # the forced-algorithm entries (raw/ring, ...)
                    fixed = {v: r["time_us"] for v, r in d.items() if v != "auto"}
                    if "auto" not in d or not fixed:
                        continue
                    name = min(fixed, key=fixed.get)
                    ratio = d["auto"]["time_us"] / fixed[name]
                    every.append(ratio)
                    plain = [fixed[v] for v in ("native", "raw", "compressed") if v in fixed]
                    if plain:
                        strategies.append(d["auto"]["time_us"] / min(plain))
                    if coll in ("reducescatter", "allreduce"):
                        fx = {v: x for v, x in fixed.items() if v != "native"}
                        eligible.append(d["auto"]["time_us"] / min(fx.values()) if fx else ratio)
                    else:
                        eligible.append(ratio)
                    if at is None or ratio > worst:
                        worst, at, best_name = ratio, b, name
                if at is None:
                    continue
                out.append(("%s %s: auto vs best fixed, worst size" % (rate, COLL_TITLE[coll]),
                            "%.3fx at %s (best: %s)" % (worst, human(at), best_name),
                            "<= %.2fx" % AUTO_SLACK, worst <= AUTO_SLACK))
            # Noise floor: where auto ran one design that was also timed as a
            # fixed entry of the same run, the two time the same code, so
            # their ratio shows what this machine can resolve.
            same = []
            for coll in COLLS:
                for b, d in t.get(coll, {}).items():
                    p = d.get("auto", {}).get("picked", "")
                    if p in d and p != "auto":
                        same.append(d["auto"]["time_us"] / d[p]["time_us"])
            if same:
                out.append(("%s same design: auto vs that design's own calls" % rate,
                            "median %.3fx, %.2f-%.2fx, within 3%%: %d of %d" % (
                                statistics.median(same), min(same), max(same),
                                sum(abs(x - 1) <= AUTO_SLACK - 1 for x in same), len(same)),
                            "(noise)", "info"))
            paired = per_run_worst(rows)
            if paired:
                out.append(("%s per run: auto vs each fixed entry of the same run" % rate,
                            "median %.3fx, within 3%%: %d of %d, within 10%%: %d" % (
                                statistics.median(paired), sum(x <= AUTO_SLACK for x in paired),
                                len(paired), sum(x <= 1.10 for x in paired)),
                            "(drift between runs cancelled)", "info"))
            if every:
                for what, ratios in (("best fixed", every), ("best design it may run", eligible),
                                     ("best of native, raw, compressed", strategies)):
                    k = sum(x <= AUTO_SLACK for x in ratios)
                    out.append(("%s all sizes: auto vs %s" % (rate, what),
                                "median %.3fx, within 3%%: %d of %d, within 10%%: %d" % (
                                    statistics.median(ratios), k, len(ratios), sum(x <= 1.10 for x in ratios)),
                                "all <= %.2fx" % AUTO_SLACK, k == len(ratios)))
    return out


def markdown_tables(meta, rows):
    t = table_by(rows)
    lines = []
    for coll in COLLS:
        if coll not in t:
            continue
        variants = sorted({v for d in t[coll].values() for v in d},
                          key=lambda v: (STRATS.index(v.split("/")[0]) if v.split("/")[0] in STRATS else 9, v))
        lines.append("**%s** (time in ms, median of the slowest rank; ratio and picked for auto)\n" % COLL_TITLE[coll])
        head = ["bytes"] + variants + ["compr. vs native", "compr. vs raw", "ratio", "auto picked", "#wrong"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for b in sorted(t[coll]):
            d = t[coll][b]
            cells = [human(b)]
            for v in variants:
                cells.append("%.3f" % (d[v]["time_us"] / 1e3) if v in d else "")
            c = d.get("compressed")
            cells.append("%.2fx" % (d["native"]["time_us"] / c["time_us"]) if c and "native" in d else "")
            cells.append("%.2fx" % (d["raw"]["time_us"] / c["time_us"]) if c and "raw" in d else "")
            cells.append("%.3f" % c["ratio"] if c else "")
            # the runs' picks, "; " apart: a "|" would split the cell
            cells.append(d["auto"].get("picked", "").replace(" | ", "; ") if "auto" in d else "")
            wrong = [r["wrong"] for r in d.values()]
            known = sum(w for w in wrong if w is not None)
            cells.append(str(known) + ("\*" if any(w is None for w in wrong) else ""))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if any(r["wrong"] is None for r in rows):
        lines.append("\\* native ReduceScatter/AllReduce (and auto when it picked native) are not "
                     "bit-comparable: MPI sums pairwise in its own order with a rounding at every "
                     "combine; differing elements vs raw: " +
                     ", ".join(dict.fromkeys(  # once per point, however many repetitions
                         "%s %s %s: %d" % (COLL_TITLE[r["coll"]], human(r["bytes"]), r["strategy"], r["differ"])
                         for r in rows if r["wrong"] is None and "differ" in r and r["bytes"] == max(
                             x["bytes"] for x in rows if x["coll"] == r["coll"]))) + " (largest size).")
        lines.append("")
    return lines


def iteration_tiers(rows):
    """Timed iterations by size, from the rows: "200 up to 1M, 20 at 4M-16M, 5 from 64M"."""
    by = {}
    for r in rows:
        if r.get("iters") is not None:
            by[r["bytes"]] = max(by.get(r["bytes"], 0), r["iters"])
    tiers = []  # [iters, first bytes, last bytes]
    for b in sorted(by):
        if tiers and tiers[-1][0] == by[b]:
            tiers[-1][2] = b
        else:
            tiers.append([by[b], b, b])
    parts = []
    for k, (it, lo, hi) in enumerate(tiers):
        if len(tiers) > 1 and k == 0:
            span = "up to " + human(hi)
        elif len(tiers) > 1 and k == len(tiers) - 1:
            span = "from " + human(lo)
        else:
            span = "at " + (human(lo) if lo == hi else "%s-%s" % (human(lo), human(hi)))
        parts.append("%d %s" % (it, span))
    return ", ".join(parts)


def render_section(sets, pngs, verdict_rows, notes):
    L = ["## Collectives", ""]
    burst = sorted({m.get("burst", "64kb") for m, _ in sets})
    tiers = {}  # tier text -> the rates timed that way
    for m, rows in sets:
        tiers.setdefault(iteration_tiers(rows), []).append(rate_label(m))
    iters = "timed iterations: " + (next(iter(tiers)) if len(tiers) == 1 else
                                    "; ".join("%s: %s" % (", ".join(v), k) for k, v in tiers.items()))
    L.append("Measured with `scripts/bench_sweep.sh`: an emulated cluster of 4 hosts (2 in the "
             "sections named `_2hosts`, `--hosts 2`) on one machine "
             "(`scripts/cluster.sh`: network namespaces on a bridge, every host link shaped in both "
             "directions with `tbf rate RATE burst %s latency 10ms`), one rank per host, "
             "`zipccl-bench -f 4 -w 1 -d bf16 --dist gaussian --sigma 0.02 --json` over all four "
             "strategies (%s; the strategies' timed calls interleaved round by round, so a "
             "burst of load hits them alike: in an order shuffled each round from the sweeps of "
             "2026-11-30 12:24 UTC on, rotated by one each round before), ReduceScatter and "
             "AllReduce with the ring design's `raw:ring` and `compressed:ring` in the same run. "
             "auto is compared with the fastest of every fixed design timed beside it. Sizes follow nccl-tests: 'bytes' is the whole "
             "output of AllGather, the whole input of ReduceScatter, the buffer of AllReduce and one "
             "rank's send buffer of the All-to-Alls (so 64M means 64 MiB per rank except for AllGather, "
             "16 MiB per rank). Times are the median of the slowest rank's time per iteration. "
             "#wrong counts elements that differ bit-wise from strategy raw, whose own result is "
             "checked against MPI's collective (AllGather, All-to-Alls) or against the documented "
             "reduction order recomputed by the bench (ReduceScatter, AllReduce); it must be 0. "
             "Raw data: `docs/bench/coll_<rate>.jsonl`." % ("/".join(burst), iters))
    L.append("")
    if notes:
        L += ["<!-- notes -->", notes.strip("\n"), "<!-- /notes -->", ""]
    L += ["### Verdict against the targets", ""]
    if verdict_rows:
        L += ["| check | measured | target | result |", "|---|---|---|---|"]
        for name, meas, target, ok in verdict_rows:
            L.append("| %s | %s | %s | %s |" % (name, meas, target,
                                                "not run" if ok is None else ok if isinstance(ok, str) else ("PASS" if ok else "MISS")))
    else:
        L.append("No sweep on record covers the target points yet.")
    L.append("")
    for (meta, rows), png in zip(sets, pngs):
        rate = rate_label(meta)
        L += ["### Link %s" % rate, ""]
        hdr = meta.get("header", "")
        if hdr:
            L += ["```", hdr.strip("\n"), "```", ""]
        extra = []
        if meta.get("link_probe"):
            extra.append("link probe (one TCP stream, host 1 -> host 0): %s" % meta["link_probe"].replace("cluster.sh: bw: ", ""))
        if meta.get("load_before"):
            extra.append("load average before / after the run: %s / %s"
                         % (meta["load_before"], meta.get("load_after", "?")))
        elif meta.get("load_after"):
            extra.append("load average after the run: %s" % meta["load_after"])
        if meta.get("seconds"):
            extra.append("sweep time: %d s" % meta["seconds"])
        if meta.get("reps", 1) > 1:
            extra.append("every point run %d times in a row: each cell is the median of the runs' "
                         "medians, and 'auto picked' lists every design auto settled on" % meta["reps"])
        if extra:
            L += ["; ".join(extra) + ".", ""]
        if png:
            L += ["![%s](%s)" % ("time vs size at " + rate, os.path.relpath(png, "docs")), ""]
        L += markdown_tables(meta, rows)
    return "\n".join(L).rstrip("\n") + "\n"


def replace_section(doc, section):
    text = open(doc).read() if os.path.exists(doc) else "# Benchmarks\n"
    m = re.search(r"^## Collectives[^\n]*\n", text, flags=re.M)
    if not m:
        return text.rstrip("\n") + "\n\n" + section, ""
    nxt = re.search(r"^## (?!#)", text[m.end():], flags=re.M)
    end = m.end() + nxt.start() if nxt else len(text)
    old = text[m.start():end]
    nm = re.search(r"<!-- notes -->\n(.*?)<!-- /notes -->", old, flags=re.S)
    return text[:m.start()] + section + ("\n" if nxt else "") + text[end:], nm.group(1) if nm else ""


def main(argv):
    doc = None
    paths = []
    i = 0
    while i < len(argv):
        if argv[i] == "--doc":
            doc = argv[i + 1]
            i += 2
        else:
            paths.append(argv[i])
            i += 1
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    order = {"1gbit": 0, "10gbit": 1, "unthrottled": 2, "10gbit_2hosts": 3, "unthrottled_2hosts": 4}
    sets = sorted((load(p) + (p,) for p in paths), key=lambda s: order.get(rate_label(s[0]), 9))
    pngs = [plot(p, meta, rows) for meta, rows, p in sets]
    sets = [(m, r) for m, r, _ in sets]
    vrows = verdict(sets)
    print("%-58s %-34s %-9s %s" % ("check", "measured", "target", "result"))
    for name, meas, target, ok in vrows:
        print("%-58s %-34s %-9s %s" % (name, meas, target, "not run" if ok is None else ok if isinstance(ok, str) else ("PASS" if ok else "MISS")))
    wrong = sum(r["wrong"] or 0 for _, rows in sets for r in rows)
    print("rows: %d, total #wrong: %d" % (sum(len(r) for _, r in sets), wrong))
    if doc:
        _, notes = replace_section(doc, "")
        text, _ = replace_section(doc, render_section(sets, pngs, vrows, notes))
        with open(doc, "w") as f:
            f.write(text)
        print("plot_coll.py: wrote the Collectives section of %s" % doc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
