# test: timeout=60
"""test_plot_coll.py — scripts/plot_coll.py's reading of a repeated sweep.

The verdict in docs/BENCHMARKS.md comes from this script, so its arithmetic
is checked on rows whose answers are worked out by hand below:
  - repetitions of a point merge into the median time, every design auto
    picked, #wrong summed;
  - auto against the best fixed entry, from the medians over the repetitions,
    counts a point above 1.03x as a miss and one at or below as within;
  - the per-run reading pairs a point's k-th rows of every entry (the k-th
    repetition), takes the median over the runs of auto / entry, and reports
    the worst entry: it differs from the ratio of medians when runs drift;
  - the Markdown tables keep one cell per column when auto's picks merge;
  - a sweep on 2 hosts gets sections and verdict lines of its own;
  - the repeated 1 Gbit/s target runs compare compressed with the faster of
    native and native-put per run, and with raw, against the issue's targets;
  - the compact tables of --doc (one per link) line up, mark auto above
    1.03x of the fastest fixed design in bold and name that design when it
    is none of native, raw and compressed;
  - --doc replaces only the Collectives section, keeping its notes and its
    hand-written <!-- kept --> subsections after the new tables.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import plot_coll as pc  # noqa: E402
from pycheck import check, failed  # noqa: E402


def row(coll, nbytes, strategy, t, picked=None, codec=None, algo=None, wrong=0):
    r = {"coll": coll, "dtype": "bf16", "bytes": nbytes, "nranks": 4, "strategy": strategy,
         "time_us": t, "ratio": 1.0, "wrong": wrong}
    if picked:
        r["picked"] = picked
    if codec:
        r["codec"] = codec
    if algo:
        r["algo"] = algo
    return r


# Two repetitions (the k-th row of an entry is repetition k).  AlltoAll 4096:
# run 1 auto 100, raw 110, native 90; run 2 auto 200, raw 190, native 300.
#   medians: auto 150, raw 150, native 195 -> auto / best fixed = 1.000
#   per run: vs raw 100/110, 200/190 -> median 0.9809; vs native 1.111, 0.667
#   -> 0.8889; worst entry 0.9809.
# AlltoAll 8192: auto 103.5 and 104, compressed/f3 100 and 100, raw 120 twice:
#   medians 103.75 / 100 = 1.0375 (a miss); per run the same, 1.0375.
rows = [
    row("alltoall", 4096, "auto", 100, picked="raw"), row("alltoall", 4096, "raw", 110),
    row("alltoall", 4096, "native", 90),
    row("alltoall", 8192, "auto", 103.5, picked="compressed/f3"),
    row("alltoall", 8192, "compressed", 100, codec="f3"), row("alltoall", 8192, "raw", 120),
    row("alltoall", 4096, "auto", 200, picked="native", wrong=0), row("alltoall", 4096, "raw", 190),
    row("alltoall", 4096, "native", 300, wrong=2),
    row("alltoall", 8192, "auto", 104, picked="compressed/f3"),
    row("alltoall", 8192, "compressed", 100, codec="f3"), row("alltoall", 8192, "raw", 120),
]

t = pc.table_by(rows)
a = t["alltoall"][4096]
check(a["auto"]["time_us"] == 150 and a["raw"]["time_us"] == 150 and a["native"]["time_us"] == 195,
      "merge_reps_median_time", str({v: r["time_us"] for v, r in a.items()}))
check(a["auto"]["picked"] == "raw | native", "merge_reps_lists_every_pick", a["auto"]["picked"])
check(a["native"]["wrong"] == 2, "merge_reps_sums_wrong", str(a["native"]["wrong"]))
check("compressed/f3" in t["alltoall"][8192], "variant_names_codec_entry", str(sorted(t["alltoall"][8192])))

# Every table row has as many cells as the header: the runs' picks ("raw |
# native" merged) must not add a column.
md = [ln for ln in pc.markdown_tables({}, rows) if ln.startswith("|")]
check(len({ln.count("|") for ln in md}) == 1 and any("raw; native" in ln for ln in md),
      "table_cells_line_up", "\n".join(md))

worst = sorted(pc.per_run_worst(rows))
check(len(worst) == 2 and abs(worst[0] - (100 / 110 + 200 / 190) / 2) < 1e-12 and abs(worst[1] - 1.0375) < 1e-12,
      "per_run_worst_pairs_runs", str(worst))

v = {name: (measured, ok) for name, measured, _, ok in pc.verdict([({"rate": "10gbit"}, rows)])}
every = v.get("10gbit all sizes: auto vs best fixed")
check(every is not None and every[1] is False and "within 3%: 1 of 2" in every[0],
      "verdict_counts_a_miss_above_3pct", str(every))
w = v.get("10gbit AlltoAll: auto vs best fixed, worst size")
check(w is not None and w[0].startswith("1.038x at 8K (best: compressed/f3)"), "verdict_worst_point_named", str(w))
pr = v.get("10gbit per run: auto vs each fixed entry of the same run")
check(pr is not None and "within 3%: 1 of 2" in pr[0] and pr[1] == "info", "verdict_per_run_line", str(pr))

# A sweep on 2 hosts (bench_sweep.sh --hosts 2) is a section of its own,
# "10gbit_2hosts", and its auto lines name the host count.
check(pc.rate_label({"rate": "10gbit", "hosts": 2}) == "10gbit_2hosts"
      and pc.rate_label({"rate": "none", "hosts": 4}) == "unthrottled", "rate_label_hosts",
      pc.rate_label({"rate": "10gbit", "hosts": 2}))
v2 = {name: ok for name, _, _, ok in pc.verdict([({"rate": "10gbit", "hosts": 2}, rows)])}
check(v2.get("10gbit, 2 hosts all sizes: auto vs best fixed") is False and not any(k.startswith("10gbit ") for k in v2),
      "verdict_2hosts_named_apart", str(sorted(v2)))

# The repeated 1 Gbit/s target runs (bench_targets.sh: rows carry "rep").
# AlltoAll, two runs: native 450/440, native-put 430/460 -> the faster per
# run 430/440, median 435; compressed 300/310, median 305 -> 1.426x (>= 1.40);
# raw 420/430 -> 425/305 = 1.393x (>= 1.35); per run vs native 1.433, 1.419.
trows = []
for rep, times in ((1, (450, 430, 300, 420)), (2, (440, 460, 310, 430))):
    for strat, tm in zip(("native", "native-put", "compressed", "raw"), times):
        trows.append(dict(row("alltoall", 64 << 20, strat, tm * 1e3), rep=rep))
tv = {name: (measured, ok) for name, measured, _, ok in pc.verdict([({"rate": "1gbit_targets"}, trows)])}
nat = tv.get("1gbit AlltoAll 64M/rank, 2 runs: compressed vs native")
check(nat is not None and nat[0] == "1.43x (per run 1.43, 1.42)" and nat[1] is True,
      "targets_vs_faster_native_per_run", str(nat))
raw = tv.get("1gbit AlltoAll 64M/rank, 2 runs: compressed vs raw")
check(raw is not None and raw[0].startswith("1.39x") and raw[1] is True, "targets_vs_raw", str(raw))
trows[2]["time_us"] = 320e3  # compressed 320/310 -> 435/315 = 1.381x: below 1.40
tv = {name: ok for name, _, _, ok in pc.verdict([({"rate": "1gbit_targets"}, trows)])}
check(tv.get("1gbit AlltoAll 64M/rank, 2 runs: compressed vs native") is False, "targets_miss_below_target",
      str(tv))

# The compact table (--doc without --full): a row per (collective, entry),
# a column per size.  AlltoAll 8192: auto 103.75 / compressed/f3 100 -> bold,
# named; 4096: auto 150 / raw 150 = 1.000, not bold.
ct = pc.compact_table(rows)
check(len({ln.count("|") for ln in ct}) == 1 and ct[0].startswith("| collective |") and "4K | 8K" in ct[0],
      "compact_cells_line_up", "\n".join(ct))
auto_row = [ln for ln in ct if "auto / fastest fixed" in ln]
check(len(auto_row) == 1 and "| 1.000 |" in auto_row[0] and "**1.038** (compressed/f3)" in auto_row[0],
      "compact_auto_row_marks_misses", str(auto_row))
sec = pc.render_compact([({"rate": "10gbit", "reps": 2}, rows)], [None], "")
check("| 10gbit | 4 | 1.019x | 1 of 2 |" in sec and "`scripts/bench_sweep.sh --rates 10gbit --reps 2`" in sec
      and "| MISS |" in sec, "compact_verdict_and_command", sec)

# --doc replaces the Collectives section but keeps its notes and its
# hand-written <!-- kept --> blocks, and leaves the other sections alone
import tempfile  # noqa: E402
with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as f:
    f.write("# Benchmarks\n\n## Codec\n\ncodec text\n\n## Collectives\n\nold table\n\n"
            "<!-- notes -->\nthe notes\n<!-- /notes -->\n\n<!-- kept -->\n### Hierarchical\n\nhier table\n"
            "<!-- /kept -->\n\n## Model\n\nmodel text\n")
    path = f.name
_, notes = pc.replace_section(path, "")
text, _ = pc.replace_section(path, "## Collectives\n\nnew table\n")
os.unlink(path)
check(notes == "the notes\n" and "new table" in text and "old table" not in text
      and "<!-- kept -->\n### Hierarchical\n\nhier table\n<!-- /kept -->" in text
      and text.index("new table") < text.index("hier table") < text.index("## Model")
      and "codec text" in text and "model text" in text, "doc_keeps_notes_and_kept_blocks", text)

print(f"{failed()} failed")
sys.exit(1 if failed() else 0)
