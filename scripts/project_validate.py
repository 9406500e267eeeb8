#!/usr/bin/env python3
"""project_validate.py — the projection (build/train CONFIG --project) against
measured step times on the emulated clusters (docs/SCALE.md "Validation").

Measured: the JSON lines of scripts/bench_train.sh (docs/bench/train_*.jsonl),
the median step time over repetitions per (file, strategy, overlap). Per
emulated cluster (CLUSTERS: 4 hosts x 1 rank, dense and MoE, 2 hosts x 2
ranks, dense and MoE, 4 hosts x 2 ranks, dense), each case
runs the projection with the case's config, link rate and knobs, then
  - fits, on that cluster's raw runs only, the compute rate (from the raw
    run's measured compute time without overlap), the MPI efficiency of the
    link (so that run takes its measured time; per link rate, on that
    rate's raw run), and the two contentions (with overlap: compute slowed
    while a collective runs, so that the run's compute time is the measured
    one, and collectives slowed while compute runs, so that its step is);
    MoE also the load imbalance (cluster.maxvio, from the raw run's
    measured wait for the busiest rank's experts);
  - checks every compressed case with those constants (the projection's
    plan column: the run's own strategy and algorithm per unit): projected vs
    measured step time (error %), and the speedup over raw at the same
    overlap, projected vs measured.
Prints the tables and writes JSON lines (--out). Exit status 1 when a checked
case misses the issue's targets (15% step time, 0.05 speedup) and --strict.

usage: scripts/project_validate.py [--build build] [--out FILE] [--only 4x1|moe-4x1|moe-2x2|4x2|2x2] [--strict]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One emulated cluster per link rate: the rate one bulk TCP stream gets on
# it (scripts/cluster.sh bulk: 1 Gbit/s -> ~119 MB/s; 10 Gbit/s: the
# ping-pong's 0.6-1.1 GB/s on that VM, the middle taken), before the fitted
# MPI efficiency.
LINK_GBIT = {"1gbit": 0.95, "10gbit": 6.8}

# Per emulated cluster: its cluster file and its cases, (bench file,
# strategy[/algo], overlap on?, extra --set, fitted?). The first case is the
# raw run without overlap, the second the raw run with it.


def two_level(f):
    """A two-level cluster's cases in bench file f: raw off and on (fitted),
    flat compressed and hier with overlap (checked)."""
    return [(f, "raw", False, [], True), (f, "raw", True, [], True),
            (f, "compressed", True, [], False), (f, "compressed/hier", True, [], False)]


CLUSTERS = {
    "4x1": ("configs/cluster/emu-4x1.yaml", [
        ("train_commbound_1gbit.jsonl", "raw", False, [], True),
        ("train_commbound_1gbit.jsonl", "raw", True, [], True),
        ("train_commbound_1gbit.jsonl", "compressed", False, [], False),
        ("train_commbound_1gbit.jsonl", "compressed", True, [], False),
        ("train_commbound_1gbit_fp32.jsonl", "raw", True, ["comm.reduce_dtype=fp32"], False),
        ("train_commbound_1gbit_fp32.jsonl", "compressed", True, ["comm.reduce_dtype=fp32"], False),
        ("train_commbound_10gbit.jsonl", "raw", True, [], True),
        ("train_commbound_10gbit.jsonl", "compressed", True, [], False),
    ]),
    # qwen3-moe-100m at EP 4 across 4 hosts (runs with ZRT_EP_SYNC=1): the
    # expert exchange on the links, the waits for the busiest rank's
    # experts as cluster.maxvio
    "moe-4x1": ("configs/cluster/emu-4x1.yaml", [
        ("train_moe100m_1gbit.jsonl", "raw", False, [], True),
        ("train_moe100m_1gbit.jsonl", "raw", True, [], True),
        ("train_moe100m_1gbit.jsonl", "compressed", True, [], False),
    ]),
    # the same model at EP 4 on 2 hosts x 2 ranks: the exchange crosses
    # the host link for half the experts (raw inside a host with hier)
    "moe-2x2": ("configs/cluster/emu-2x2.yaml", two_level("train_moe100m_2x2_1gbit.jsonl")),
    # the dense comm-bound model on 4 hosts x 2 ranks (8 ranks on 2 cores)
    "4x2": ("configs/cluster/emu-4x2.yaml", two_level("train_commbound_4x2_1gbit.jsonl")),
    "2x2": ("configs/cluster/emu-2x2.yaml", two_level("train_commbound_2x2_1gbit.jsonl") + [
        ("train_commbound_2x2_1gbit.jsonl", "compressed/hier", False, [], False),
        ("train_commbound_2x2_10gbit.jsonl", "raw", False, [], True),
        ("train_commbound_2x2_10gbit.jsonl", "raw", True, [], False),
        ("train_commbound_2x2_10gbit.jsonl", "compressed", True, [], False),
        ("train_commbound_2x2_10gbit.jsonl", "compressed/hier", True, [], False),
        ("train_commbound_2x2_10gbit.jsonl", "compressed/hier", False, [], False),
    ]),
}


def measured(path, strategy, overlap):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    rows = [r for r in rows if r["strategy"] == strategy and r["overlap_on"] == overlap]
    if not rows:
        sys.exit(f"project_validate: no {strategy} overlap={overlap} rows in {path}")
    return (statistics.median(r["ms"] for r in rows) / 1e3,
            statistics.median(r["compute_ms"] for r in rows) / 1e3, rows[0]["config"], rows[0]["rate"])


def sync_of(path, strategy, overlap):
    """A MoE case's measured wait for the busiest rank's experts per step
    (alltoall_sync_ms, runs with ZRT_EP_SYNC=1), seconds; 0 otherwise."""
    rows = [json.loads(l) for l in open(path) if l.strip()]
    rows = [r for r in rows if r["strategy"] == strategy and r["overlap_on"] == overlap]
    return statistics.median(r.get("alltoall_sync_ms", 0) for r in rows) / 1e3


def project(build, config, sets, cluster):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as tmp:
        cmd = [os.path.join(build, "train"), config, "--project", cluster,
               "--log-json", tmp.name]
        for s in sets:
            cmd += ["--set", s]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"project_validate: {' '.join(cmd)} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
        row = json.loads(open(tmp.name).readline())
        flops = toks = None
        for line in out.stdout.splitlines():
            if line.startswith("# the run:"):
                flops = float(line.split(" GFLOP per token")[0].rsplit(" ", 1)[1]) * 1e9
                # "B x T tokens per GPU per micro-batch, A micro-batches"
                m = re.search(r"(\d+) x (\d+) tokens per GPU per micro-batch, (\d+) micro-batches", line)
                toks = int(m.group(1)) * int(m.group(2)) * int(m.group(3))
        return row, flops, toks


def bisect(f, lo, hi, it=50):
    """x in [lo, hi] with f(x) = 0, f increasing."""
    for _ in range(it):
        mid = (lo + hi) / 2
        if f(mid) > 0:
            hi = mid
        else:
            lo = mid
    return (lo + hi) / 2


def validate(a, name, cluster, cases, out):
    """Fit on the cluster's raw cases, check the others; returns the worst
    step-time error and speedup difference of the checked cases."""
    meas = {}
    for c in cases:
        meas[c[:3]] = measured(os.path.join(ROOT, "docs/bench", c[0]), c[1], c[2])

    def sets_of(c, rate_gbit, mfu, cont, ccomm=0.0, maxvio=0.0):
        # the run's own plan: its strategy and algorithm, priced in the
        # projection's plan column; MoE: the runs' measured MaxVio
        f, strat, ov, extra, _ = c
        algo = [f"comm.algo={strat.split('/')[1]}"] if "/" in strat else []
        return [f"cluster.inter_gbit={rate_gbit}", f"cluster.mfu={mfu}", f"cluster.contention={cont}",
                f"cluster.comm_contention={ccomm}", f"comm.strategy={strat.split('/')[0]}",
                f"parallelism.overlap={'true' if ov else 'false'}", f"cluster.maxvio={maxvio}"] + algo + extra

    # 1. the compute rate: the raw run without overlap, its measured compute
    base = cases[0]
    step0, comp0, config, rate = meas[base[:3]]
    _, flops_tok, toks = project(a.build, config, sets_of(base, LINK_GBIT[rate], 0.01, 0), cluster)
    mfu = flops_tok * toks / (comp0 * 1e12)  # cluster.peak_tflops 1 in the emu-*.yaml files
    # 1'. MoE: the load imbalance (cluster.maxvio) as the projection takes
    #    it, the experts' compute slowed by 1 + maxvio: fitted so that the
    #    raw run's compute grows by its measured wait for the busiest rank
    #    (ZRT_EP_SYNC=1's alltoall_sync_ms; the step log's MaxVio is the
    #    worst block's busiest expert, not a rank's mean slowdown)
    maxvio = 0.0
    wait0 = sync_of(os.path.join(ROOT, "docs/bench", base[0]), base[1], base[2])
    if wait0 > 0:
        def comp_at(mv):
            row, _, _ = project(a.build, config, sets_of(base, LINK_GBIT[rate], mfu, 0, 0, mv), cluster)
            return row["raw_s"] - row["raw_exposed_s"]
        maxvio = bisect(lambda mv: comp_at(mv) - (comp0 + wait0), 0.0, 20.0, 25)

    effs = {}  # per link rate: its fitted MPI efficiency

    def run_at(c, eff, cont, ccomm):
        rate_key = meas[c[:3]][3]
        e = eff if eff is not None else effs[rate_key]
        row, _, _ = project(a.build, config, sets_of(c, LINK_GBIT[rate_key] * e, mfu, cont, ccomm, maxvio),
                            cluster)
        return row

    def step_at(c, eff, cont, ccomm):
        return run_at(c, eff, cont, ccomm)["plan_s"]

    # 2. the link's MPI efficiency: that run's step (nothing overlaps: compute + comm)
    eff = bisect(lambda e: step0 - step_at(base, e, 0, 0), 0.05, 2.0, 30)
    # 3. the contentions: the raw run with overlap, its compute and its step
    on = cases[1]
    step_on, comp_on = meas[on[:3]][0], meas[on[:3]][1]
    cont = ccomm = 0.0
    for _ in range(4):
        def comp_of(x):  # baseline raw in the emu-*.yaml files: the raw column is the plan's
            row = run_at(on, eff, x, ccomm)
            return row["raw_s"] - row["raw_exposed_s"]
        cont = bisect(lambda x: comp_of(x) - comp_on, 0.0, 3.0, 25)
        ccomm = bisect(lambda x: step_at(on, eff, cont, x) - step_on, 0.0, 20.0, 25)
    effs[rate] = eff
    # 4. every other link rate's efficiency: its cluster's raw run (the
    #    link is an input measured per cluster; on this VM 10 Gbit/s is
    #    CPU-bound, so what MPI gets there is far below the line rate)
    for c in cases:
        rk = meas[c[:3]][3]
        if c[4] and c[1] == "raw" and rk not in effs:
            effs[rk] = bisect(lambda e: meas[c[:3]][0] - step_at(c, e, cont, ccomm), 0.02, 2.0, 30)

    print(f"\n## {name} ({cluster})\n")
    print(f"# fitted on the raw runs: compute {flops_tok * toks / 1e9:.2f} GFLOP per rank-step at "
          f"{mfu * 1e3:.2f} GFLOP/s; contention: compute {cont:.3f}, collectives {ccomm:.3f}; link "
          "efficiency per rate " + ", ".join(f"{k} {v:.3f}" for k, v in effs.items()) +
          (f"; MaxVio {maxvio:.2f} (fitted to the measured wait {wait0 * 1e3:.0f} ms)" if maxvio else ""))
    print("| bench file | strategy | overlap | fitted | measured ms | projected ms | error |")
    print("|---|---|---|---|---|---|---|")
    worst_step = 0.0
    proj = {}
    for c in cases:
        m = meas[c[:3]][0]
        p = step_at(c, None, cont, ccomm)
        proj[c[:3]] = p
        err = (p - m) / m
        if not c[4]:
            worst_step = max(worst_step, abs(err))
        print(f"| {c[0]} | {c[1]} | {'on' if c[2] else 'off'} | {'yes' if c[4] else 'no'} | {m * 1e3:.0f} | "
              f"{p * 1e3:.0f} | {err * 100:+.1f}% |")
        if out:
            out.write(json.dumps({"cluster": name, "case": c[0], "strategy": c[1], "overlap": c[2],
                                  "fitted": c[4], "measured_s": m, "projected_s": p, "error": err,
                                  "mfu": mfu, "link_efficiency": effs[meas[c[:3]][3]], "contention": cont,
                                  "comm_contention": ccomm}) + "\n")
    print()
    print("| bench file | way | overlap | measured speedup over raw | projected | difference |")
    print("|---|---|---|---|---|---|")
    worst_x = 0.0
    for c in cases:
        raw_key = (c[0], "raw", c[2])
        if c[1] == "raw" or raw_key not in meas:
            continue
        mx = meas[raw_key][0] / meas[c[:3]][0]
        px = proj[raw_key] / proj[c[:3]]
        worst_x = max(worst_x, abs(px - mx))
        print(f"| {c[0]} | {c[1]} | {'on' if c[2] else 'off'} | {mx:.3f}x | {px:.3f}x | {px - mx:+.3f} |")
        if out:
            out.write(json.dumps({"cluster": name, "case": c[0], "strategy": c[1], "overlap": c[2],
                                  "measured_speedup": mx, "projected_speedup": px}) + "\n")
    return worst_step, worst_x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default=None)
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--only", default=None, help="one cluster of CLUSTERS")
    a = ap.parse_args()
    out = open(a.out, "w") if a.out else None
    worst_step = worst_x = 0.0
    for name, (cluster, cases) in CLUSTERS.items():
        if a.only and name != a.only:
            continue
        s, x = validate(a, name, cluster, cases, out)
        worst_step, worst_x = max(worst_step, s), max(worst_x, x)
    print(f"\n# checked cases: worst step-time error {worst_step * 100:.1f}% (target 15%), worst speedup "
          f"difference {worst_x:.3f} (target 0.05)")
    if a.strict and (worst_step > 0.15 or worst_x > 0.05):
        sys.exit(1)


if __name__ == "__main__":
    main()
