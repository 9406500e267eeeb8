#!/usr/bin/env python3
"""auto_rank_check.py - how well auto's exploration ranks designs, offline.

Reads explorations recorded with their benchmark (docs/lab/data/
auto_explore_ranking.jsonl: per run, collective and size, every candidate's
agreed exploration runs and the median of 200 timed calls of every fixed entry
of the same zipccl-bench run) and prints, per ranking rule, the regret: the
timed median of the design the rule picks over the fastest timed candidate.

  scripts/auto_rank_check.py [FILE] [--json]

Rules compared (comm/tune/switcher.c uses the lower median):
  lower-median   each candidate's lower median of its runs
  paired         most pairwise wins, a win = median of per-round ratios < 1
  round-norm     median of each run over its round's median
  minimum, mean, trimmed mean (middle half)
Then the lower median over 3, 5, 7, 11 and 21 consecutive rounds (the runs
per candidate auto takes by size), and auto's own timed median over the timed
median of the design the lower median picks (what auto's calls cost beyond
the design they run).  Last, the close-contender rule of comm/tune/switcher.c
(k rounds, then as many again for every candidate within 5, 10 or 15% of the
fastest when there are two or more) beside k rounds and 2k rounds for every
candidate, on the same disjoint windows of 2k rounds, with the extra calls
per bucket it costs.
"""
import json
import random
import statistics
import sys

# switcher.c's design names -> zipccl-bench's entry names (plot_coll.variant)
ENTRY = {"native": "native", "raw": "raw", "compressed/fast": "compressed",
         "compressed/f3": "compressed/f3", "compressed/dense": "compressed/dense",
         "raw/ring": "raw/ring", "compressed/fast/ring": "compressed/ring",
         "raw/oneshot": "raw/oneshot", "compressed/fast/oneshot": "compressed/oneshot"}


def lower_median(v):
    s = sorted(v)
    return s[(len(s) - 1) // 2]


def pick_lower_median(runs):
    return min(range(len(runs)), key=lambda i: lower_median(runs[i]))


def pick_paired(runs):
    n = len(runs)
    wins = [sum(1 for j in range(n) if j != i and
                statistics.median(a / b for a, b in zip(runs[i], runs[j])) < 1) for i in range(n)]
    return max(range(n), key=lambda i: (wins[i], -lower_median(runs[i])))


def pick_round_norm(runs):
    rounds = [statistics.median(r[k] for r in runs) for k in range(len(runs[0]))]
    return min(range(len(runs)), key=lambda i: statistics.median(x / g for x, g in zip(runs[i], rounds)))


def trimmed(v):
    s = sorted(v)
    k = len(s) // 4 if len(s) > 4 else 0
    return statistics.mean(s[k:len(s) - k])


RULES = {
    "lower-median": pick_lower_median,
    "paired": pick_paired,
    "round-norm": pick_round_norm,
    "minimum": lambda runs: min(range(len(runs)), key=lambda i: min(runs[i])),
    "mean": lambda runs: min(range(len(runs)), key=lambda i: statistics.mean(runs[i])),
    "trimmed mean": lambda runs: min(range(len(runs)), key=lambda i: trimmed(runs[i])),
}


def load(path):
    points = []
    for line in open(path):
        o = json.loads(line)
        if "runs_us" not in o:
            continue
        names = [ENTRY.get(d) for d in o["designs"]]
        if any(n not in o["timed_us"] for n in names):
            continue  # a candidate without a fixed entry: its timed median is unknown
        points.append((o, [o["timed_us"][n] for n in names]))
    return points


def pick_contenders(runs, k, margin):
    """switcher.c's rule on runs[i][0:2k]: returns (pick, extra runs taken)."""
    first = [lower_median(r[:k]) for r in runs]
    best = min(first)
    close = [i for i in range(len(runs)) if first[i] <= (1 + margin) * best]
    if len(close) < 2:
        return first.index(best), 0
    return min(close, key=lambda i: lower_median(runs[i][:2 * k])), k * len(close)


def summary(name, regrets, emit):
    row = {"rule": name, "n": len(regrets), "mean": statistics.mean(regrets),
           "median": statistics.median(regrets),
           "over_3pct": sum(r > 1.03 for r in regrets) / len(regrets),
           "over_10pct": sum(r > 1.10 for r in regrets) / len(regrets)}
    emit(row, "%-26s %5d %8.4f %8.4f %9.3f %9.3f" % (name, row["n"], row["mean"], row["median"],
                                                    row["over_3pct"], row["over_10pct"]))


def main(argv):
    as_json = "--json" in argv
    args = [a for a in argv if a != "--json"]
    points = load(args[0] if args else "docs/lab/data/auto_explore_ranking.jsonl")
    if not points:
        sys.exit("auto_rank_check.py: no usable explorations")

    def emit(row, text):
        print(json.dumps(row) if as_json else text)

    if not as_json:
        print("# %d explorations; regret = timed median of the pick / fastest timed candidate" % len(points))
        print("%-26s %5s %8s %8s %9s %9s" % ("rule", "n", "mean", "median", ">1.03", ">1.10"))
    for name, rule in RULES.items():
        summary(name, [timed[rule(o["runs_us"])] / min(timed) for o, timed in points], emit)
    rng = random.Random(1)
    for k in (3, 5, 7, 11, 21):
        regrets = []
        for o, timed in points:
            runs = o["runs_us"]
            if len(runs[0]) < 21:
                continue
            for _ in range(50):  # 50 windows of k consecutive rounds per exploration
                a = rng.randrange(0, len(runs[0]) - k + 1)
                regrets.append(timed[pick_lower_median([r[a:a + k] for r in runs])] / min(timed))
        summary("lower-median, %d rounds" % k, regrets, emit)
    own = []
    for o, timed in points:
        entry = ENTRY[o["designs"][pick_lower_median(o["runs_us"])]]
        if "auto" in o["timed_us"]:
            own.append(o["timed_us"]["auto"] / o["timed_us"][entry])
    if own:
        summary("auto / the design it picked", own, emit)
    for k in (5, 7):
        windows = [(timed, [r[a:a + 2 * k] for r in o["runs_us"]]) for o, timed in points
                   for a in range(0, len(o["runs_us"][0]) - 2 * k + 1, 2 * k)]
        summary("lower-median, %d rounds (windows of %d)" % (k, 2 * k),
                [t[pick_lower_median([r[:k] for r in w])] / min(t) for t, w in windows], emit)
        summary("lower-median, %d rounds" % (2 * k),
                [t[pick_lower_median(w)] / min(t) for t, w in windows], emit)
        for margin in (0.05, 0.10, 0.15):
            picks = [pick_contenders(w, k, margin) for t, w in windows]
            summary("%d rounds + contenders within %d%% (%.1f more calls)"
                    % (k, round(margin * 100), statistics.mean(x for _, x in picks)),
                    [t[p] / min(t) for (t, _), (p, _) in zip(windows, picks)], emit)


if __name__ == "__main__":
    main(sys.argv[1:])
