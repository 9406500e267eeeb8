#!/usr/bin/env python3
"""plot_coll.py — render zipccl-bench JSON lines into figures, tables and a verdict.

    python3 scripts/plot_coll.py docs/bench/coll_1gbit.jsonl ... [--doc docs/BENCHMARKS.md]
                                 [--full] [--no-plot]

Each input is one rate's sweep (scripts/bench_sweep.sh): an optional first line
{"header": ..., "rate": ...} and then one zipccl-bench --json row per line.
For each input it writes <input>.png (time vs size per strategy, one log-log
panel per collective), prints the verdict against the targets of the
collectives work, and with --doc replaces the "## Collectives" section of that
Markdown file (creating the file with a "# Benchmarks" title if needed).  Text
between "<!-- notes -->" and "<!-- /notes -->" in the old section is kept, and
blocks between "<!-- kept -->" and "<!-- /kept -->" (hand-written subsections)
follow the new section unchanged.

The section is compact by default: one table per link (rows: collective x
native, raw, compressed, auto, compressed's speed-ups and auto against the
fastest fixed design; columns: sizes), the command, machine and date of the
sweep, and one verdict for all links.  --full writes every row of every
design instead (the tables of earlier versions of this script).  --no-plot
keeps the PNGs on disk as they are (and links them if they exist).

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


def auto_stats(rows):
    """auto against the fixed designs over every (collective, size) of a
    sweep: {"every", "eligible", "strategies": [ratios], "worst": {coll:
    (ratio, bytes, best name)}, "same": [ratios], "paired": [ratios]}."""
    t = table_by(rows)
    every, eligible, strategies, worst = [], [], [], {}
    for coll in COLLS:
        for b, d in sorted(t.get(coll, {}).items()):
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
            if coll not in worst or ratio > worst[coll][0]:
                worst[coll] = (ratio, b, name)
    # Noise floor: where auto ran one design that was also timed as a
    # fixed entry of the same run, the two time the same code, so their
    # ratio shows what this machine can resolve.
    same = []
    for coll in COLLS:
        for b, d in t.get(coll, {}).items():
            p = d.get("auto", {}).get("picked", "")
            if p in d and p != "auto":
                same.append(d["auto"]["time_us"] / d[p]["time_us"])
    return {"every": every, "eligible": eligible, "strategies": strategies, "worst": worst,
            "same": same, "paired": per_run_worst(rows)}


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
            st = auto_stats(rows)
            every, eligible, strategies, same = st["every"], st["eligible"], st["strategies"], st["same"]
            for coll in COLLS:
                if coll not in st["worst"]:
                    continue
                worst, at, best_name = st["worst"][coll]
                out.append(("%s %s: auto vs best fixed, worst size" % (rate, COLL_TITLE[coll]),
                            "%.3fx at %s (best: %s)" % (worst, human(at), best_name),
                            "<= %.2fx" % AUTO_SLACK, worst <= AUTO_SLACK))
            if same:
                out.append(("%s same design: auto vs that design's own calls" % rate,
                            "median %.3fx, %.2f-%.2fx, within 3%%: %d of %d" % (
                                statistics.median(same), min(same), max(same),
                                sum(abs(x - 1) <= AUTO_SLACK - 1 for x in same), len(same)),
                            "(noise)", "info"))
            paired = st["paired"]
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


def fmt_ms(us):
    """A time in ms to about three significant digits (the tables' unit)."""
    ms = us / 1e3
    return "%.0f" % ms if ms >= 100 else "%.1f" % ms if ms >= 10 else "%.2f" % ms if ms >= 1 else "%.3f" % ms


def header_fields(meta):
    """(date, machine) from a sweep's zipccl-bench header lines."""
    hdr = meta.get("header", "") or ""
    date = re.search(r"^# date (\S+)", hdr, flags=re.M)
    mach = re.search(r"^# machine (.*?)(?:, load [\d. ]+)?$", hdr, flags=re.M)
    return (date.group(1) if date else meta.get("date", "?"), mach.group(1) if mach else "?")


def sweep_command(meta, rate):
    """The command that writes a link's file, from what its header records."""
    if rate == "1gbit_targets":
        m = re.search(r"reps (\d+) iters (\d+)", meta.get("header", ""))
        return "scripts/bench_targets.sh" + (" --reps %s --iters %s" % m.groups() if m else "")
    link, hosts = link_of(rate)
    cmd = "scripts/bench_sweep.sh --rates %s" % ("none" if link == "unthrottled" else link)
    if hosts != 4:
        cmd += " --hosts %d" % hosts
    if meta.get("reps", 1) > 1:
        cmd += " --reps %d" % meta["reps"]
    return cmd


def compact_table(rows):
    """One table for a sweep: a row per (collective, strategy) with its time
    at every size, then compressed's speed-ups against native and raw and
    auto against the fastest fixed design of the point (every design timed,
    ring, one-shot and f3 included, named when it is none of native, raw and
    compressed; bold above 1.03x)."""
    t = table_by(rows)
    sizes = sorted({b for c in t.values() for b in c})
    L = ["| collective | entry (ms, or speed-up) | " + " | ".join(human(b) for b in sizes) + " |",
         "|---|---|" + "---:|" * len(sizes)]
    for coll in COLLS:
        if coll not in t:
            continue
        first = True
        for s in ("native", "raw", "compressed", "auto"):
            if not any(s in d for d in t[coll].values()):
                continue
            cells = [fmt_ms(t[coll][b][s]["time_us"]) if b in t[coll] and s in t[coll][b] else ""
                     for b in sizes]
            L.append("| %s | %s | %s |" % (COLL_TITLE[coll] if first else "", s, " | ".join(cells)))
            first = False
        cells, cells_a = [], []
        for b in sizes:
            d = t[coll].get(b, {})
            c = d.get("compressed")
            cells.append("%.2f / %.2f" % (d["native"]["time_us"] / c["time_us"], d["raw"]["time_us"] / c["time_us"])
                         if c and "native" in d and "raw" in d else "")
            fixed = {v: r["time_us"] for v, r in d.items() if v != "auto"}
            if "auto" in d and fixed:
                name = min(fixed, key=fixed.get)
                x = d["auto"]["time_us"] / fixed[name]
                cells_a.append(("**%.3f**" if x > AUTO_SLACK else "%.3f") % x
                               + ("" if name in ("native", "raw", "compressed") else " (%s)" % name))
            else:
                cells_a.append("")
        L.append("| | compressed vs native / raw | %s |" % " | ".join(cells))
        if any(cells_a):
            L.append("| | auto / fastest fixed | %s |" % " | ".join(cells_a))
    return L


def targets_table(rows):
    """The repeated 1 Gbit/s target points (bench_targets.sh): each
    strategy's median over the runs, ms."""
    bt, _ = bench_targets.table(rows)
    strats = [s for s in ("native", "native-put", "raw", "compressed", "compressed:f3", "auto")
              if any((c, s) in bt for c in COLLS)]
    L = ["| collective | " + " | ".join(strats) + " |", "|---|" + "---:|" * len(strats)]
    for coll in COLLS:
        if any((coll, s) in bt for s in strats):
            L.append("| %s | %s |" % (COLL_TITLE[coll], " | ".join(
                "%.0f" % statistics.median(bt[(coll, s)].values()) if (coll, s) in bt else "" for s in strats)))
    return L


def compact_verdict(sets):
    """The verdict, one table for the 1 Gbit/s targets and one for auto."""
    L = []
    by = {rate_label(m): rows for m, rows in sets}
    if "1gbit" in by or "1gbit_targets" in by:
        runs = len({r.get("rep") for r in by.get("1gbit_targets", [])})
        L += ["**1 Gbit/s, 4 hosts, 64 MiB per rank**: compressed against native (the faster of "
              "native and native-put in the repeated runs) and against raw.", "",
              "| collective | target vs native / raw | %d runs: vs native (per run) | vs raw (per run) "
              "| one sweep: vs native / raw | result |" % runs, "|---|---|---|---|---|---|"]
        bt = bench_targets.table(by["1gbit_targets"])[0] if "1gbit_targets" in by else {}
        t1 = table_by(by.get("1gbit", []))
        n = by["1gbit"][0]["nranks"] if by.get("1gbit") else 4
        for coll in COLLS:
            tn, tr = TARGETS[coll]
            cells, oks = [COLL_TITLE[coll], "%.2f / %.2f" % (tn, tr)], []
            for base, target in (("best-native", tn), ("raw", tr)):
                got = bench_targets.speedup(bt, coll, base) if bt else None
                cells.append("%.2fx (%s)" % (got[0], ", ".join("%.2f" % x for x in got[1].values()))
                             if got else "not run")
                if got:
                    oks.append(got[0] >= target)
            d = t1.get(coll, {}).get(TARGET_BYTES * n if coll == "allgather" else TARGET_BYTES, {})
            c = d.get("compressed")
            if c and "native" in d and "raw" in d:
                sn, sr = d["native"]["time_us"] / c["time_us"], d["raw"]["time_us"] / c["time_us"]
                cells.append("%.2fx / %.2fx" % (sn, sr))
                oks += [sn >= tn, sr >= tr]
            else:
                cells.append("not run")
            cells.append("PASS" if oks and all(oks) else "MISS" if oks else "not run")
            L.append("| " + " | ".join(cells) + " |")
        L.append("")
    autos = [(rate_label(m), rows) for m, rows in sets if link_of(rate_label(m))[0] in ("10gbit", "unthrottled")]
    if autos:
        L += ["**auto** against the fastest fixed design timed beside it (every design: ring, one-shot "
              "and f3 entries included), over every (collective, size) point; target: within 3% at every "
              "point. \"per run\" pairs each entry's k-th run with auto's k-th (drift between runs "
              "cancelled); \"noise\" is auto against the timed calls of the one design it ran, the same "
              "code timed twice.", "",
              "| link | hosts | median | within 3% | within 10% | worst | vs best of native, raw, compressed: "
              "median, within 3% | per run: within 3% / 10% | noise (within 3%) | result |",
              "|---|---:|---:|---:|---:|---|---|---|---|---|"]
        for rate, rows in autos:
            st = auto_stats(rows)
            e, sg, pr, sm = st["every"], st["strategies"], st["paired"], st["same"]
            if not e:
                continue
            wc = max(st["worst"], key=lambda c: st["worst"][c][0])
            w = st["worst"][wc]
            link, hosts = link_of(rate)
            k = sum(x <= AUTO_SLACK for x in e)
            L.append("| %s | %d | %.3fx | %d of %d | %d | %.2fx (%s %s) | %s | %s | %s | %s |" % (
                link, hosts, statistics.median(e), k, len(e), sum(x <= 1.10 for x in e), w[0],
                COLL_TITLE[wc], human(w[1]),
                "%.3fx, %d" % (statistics.median(sg), sum(x <= AUTO_SLACK for x in sg)) if sg else "",
                "%d / %d" % (sum(x <= AUTO_SLACK for x in pr), sum(x <= 1.10 for x in pr)) if pr else "",
                "%.2f-%.2fx (%d of %d)" % (min(sm), max(sm), sum(abs(x - 1) <= AUTO_SLACK - 1 for x in sm), len(sm))
                if sm else "", "PASS" if k == len(e) else "MISS"))
        L.append("")
    return L


def render_compact(sets, pngs, notes):
    L = ["## Collectives", "", method_text(sets), ""]
    if notes:
        L += ["<!-- notes -->", notes.strip("\n"), "<!-- /notes -->", ""]
    charts = ["[%s](%s)" % (rate_label(m), os.path.relpath(png, "docs"))
              for (m, _), png in zip(sets, pngs) if png and rate_label(m) != "1gbit_targets"]
    if charts:  # one line for the figures: the tables carry the numbers
        L += ["Charts, time against size for every entry: " + ", ".join(charts) + ".", ""]
    L += ["### Verdict against the targets", ""]
    L += compact_verdict(sets) or ["No sweep on record covers the target points yet.", ""]
    for (meta, rows), png in zip(sets, pngs):
        rate = rate_label(meta)
        date, machine = header_fields(meta)
        L += ["### Link %s" % rate, ""]
        facts = ["`%s`" % sweep_command(meta, rate), date.replace("T", " ").replace("Z", " UTC")]
        if machine != "?":
            facts.append(machine)
        if rows and rate != "1gbit_targets":
            facts.append("%d hosts" % rows[0]["nranks"])
        if meta.get("link_probe"):
            facts.append("link probe %s" % re.sub(r".*= ([\d.]+ MB/s).*", r"\1", meta["link_probe"]))
        if meta.get("load_before"):
            facts.append("load %s before" % meta["load_before"].split()[0]
                         + (", %s after" % meta["load_after"].split()[0] if meta.get("load_after") else ""))
        if meta.get("seconds"):
            facts.append("%d s" % meta["seconds"])
        if meta.get("reps", 1) > 1:
            facts.append("each cell the median of %d runs" % meta["reps"])
        tiers = iteration_tiers(rows)
        if tiers and rate != "1gbit_targets":
            facts.append("timed calls: " + tiers)
        wrong = sum(r["wrong"] or 0 for r in rows)
        facts.append("#wrong %d in %d rows" % (wrong, len(rows)))
        L += ["; ".join(facts) + ".", ""]
        L += targets_table(rows) if rate == "1gbit_targets" else compact_table(rows)
        L.append("")
    return "\n".join(L).rstrip("\n") + "\n"


def method_text(sets):
    """The section's opening paragraph: how every sweep was measured."""
    burst = sorted({m.get("burst", "64kb") for m, _ in sets})
    return ("Measured with `scripts/bench_sweep.sh` (each link's command is given with its table): "
            "an emulated cluster of 4 hosts (2 in the links named `_2hosts`) on one machine "
            "(`scripts/cluster.sh`: network namespaces on a bridge, every host link shaped in both "
            "directions with `tbf rate RATE burst %s latency 10ms`), one rank per host, "
            "`zipccl-bench -f 4 -w 1 -d bf16 --dist gaussian --sigma 0.02 --json` over the four "
            "strategies and every other fixed design auto may run, timed beside it: "
            "`compressed:f3` at every size, the ring design of ReduceScatter and AllReduce "
            "(`raw:ring`, `compressed:ring`) and, up to 1 MiB, the one-shot AllGather and AllReduce "
            "(`raw:oneshot`, `compressed:oneshot`). The timed calls of all entries are interleaved "
            "in an order shuffled each round, so a burst of load hits them alike. Sizes follow "
            "nccl-tests: 'bytes' is the whole output of AllGather, the whole input of ReduceScatter, "
            "the buffer of AllReduce and one rank's send buffer of the All-to-Alls (so 64M means "
            "64 MiB per rank except for AllGather, 16 MiB per rank). Times are the median of the "
            "slowest rank's time per call, in ms. #wrong counts elements that differ bit-wise from "
            "strategy raw, whose own result is checked against MPI's collective (AllGather, "
            "All-to-Alls) or against the documented reduction order recomputed by the bench "
            "(ReduceScatter, AllReduce); it must be 0 (native ReduceScatter and AllReduce are not "
            "bit-comparable: MPI rounds at every pairwise combine in its own order). Raw data: "
            "`docs/bench/coll_<link>.jsonl`; every design's row with the wire ratio and auto's "
            "picks: `python3 scripts/plot_coll.py docs/bench/coll_*.jsonl --full --no-plot "
            "--doc FILE`." % "/".join(burst))


def render_section(sets, pngs, verdict_rows, notes):
    L = ["## Collectives", "", method_text(sets)]
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
        if iteration_tiers(rows):
            extra.append("timed calls: " + iteration_tiers(rows))
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
    """The doc with its "## Collectives" section replaced by `section`, and the
    old section's notes. Blocks between "<!-- kept -->" and "<!-- /kept -->"
    in the old section (subsections written by hand: other benchmarks' tables)
    follow the new one unchanged."""
    text = open(doc).read() if os.path.exists(doc) else "# Benchmarks\n"
    m = re.search(r"^## Collectives[^\n]*\n", text, flags=re.M)
    if not m:
        return text.rstrip("\n") + "\n\n" + section, ""
    nxt = re.search(r"^## (?!#)", text[m.end():], flags=re.M)
    end = m.end() + nxt.start() if nxt else len(text)
    old = text[m.start():end]
    nm = re.search(r"<!-- notes -->\n(.*?)<!-- /notes -->", old, flags=re.S)
    kept = "".join("\n" + k.group(0).rstrip("\n") + "\n"
                   for k in re.finditer(r"<!-- kept -->\n.*?<!-- /kept -->", old, flags=re.S))
    return (text[:m.start()] + section + kept + ("\n" if nxt else "") + text[end:],
            nm.group(1) if nm else "")


def main(argv):
    doc = None
    paths = []
    full = noplot = False
    i = 0
    while i < len(argv):
        if argv[i] == "--doc":
            doc = argv[i + 1]
            i += 2
        elif argv[i] in ("--full", "--no-plot"):
            full, noplot = full or argv[i] == "--full", noplot or argv[i] == "--no-plot"
            i += 1
        else:
            paths.append(argv[i])
            i += 1
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    order = {"1gbit": 0, "1gbit_targets": 1, "10gbit": 2, "unthrottled": 3, "10gbit_2hosts": 4,
             "unthrottled_2hosts": 5}
    sets = sorted((load(p) + (p,) for p in paths), key=lambda s: order.get(rate_label(s[0]), 9))
    if noplot:  # the figures on disk, as they are
        pngs = [png if os.path.exists(png) else None
                for png in (re.sub(r"\.jsonl$", "", p) + ".png" for _, _, p in sets)]
    else:
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
        section = render_section(sets, pngs, vrows, notes) if full else render_compact(sets, pngs, notes)
        text, _ = replace_section(doc, section)
        with open(doc, "w") as f:
            f.write(text)
        print("plot_coll.py: wrote the Collectives section of %s" % doc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
