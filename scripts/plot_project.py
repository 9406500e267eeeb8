#!/usr/bin/env python3
"""plot_project.py — the map of docs/SCALE.md: where lossless compression pays
for Llama-3-8B and Qwen3-30B-A3B on 8-1024 GPUs (build/train CONFIG
--project), with today's GPU codec (configs/cluster/h100-ib400.yaml) and a
1 TB/s codec (configs/cluster/h100-ib400-codec1tb.yaml), at NIC rates of 25,
100 and 400 Gbit/s; and the NIC rate at which each reaches the paper's
end-to-end 1.18x on 64 GPUs.

Writes JSON lines (--out, one per model x codec x NIC x GPU count), a PNG
(--png: speedup against GPU count, one panel per model and codec, the band
shaded), and prints the markdown tables docs/SCALE.md quotes.

usage: scripts/plot_project.py [--build build] [--out docs/bench/project_map.jsonl]
                               [--png docs/bench/project_map.png]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = [("Llama-3-8B", "configs/llama3-8b.yaml"), ("Qwen3-30B-A3B", "configs/qwen3-30b-a3b.yaml")]
CODECS = [("today's codec (161/266 GB/s, 0.4 ms/call, serial)", "configs/cluster/h100-ib400.yaml"),
          ("1 TB/s codec (30 us/call, pipelined)", "configs/cluster/h100-ib400-codec1tb.yaml")]
NICS = [25, 100, 400]


def project(build, cfg, cluster, sets):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as tmp:
        cmd = [os.path.join(build, "train"), cfg, "--project", cluster, "--log-json", tmp.name,
               "--set", "model.compute=bf16"]
        for s in sets:
            cmd += ["--set", s]
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"plot_project: {' '.join(cmd)} failed:\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
        return [json.loads(l) for l in open(tmp.name)]


def rate_for(build, cfg, cluster, gpus, target):
    """The NIC rate (Gbit/s) at which the speedup at `gpus` reaches target, or None."""
    def x(g):
        return project(build, cfg, cluster, [f"cluster.gpus_min={gpus}", f"cluster.gpus_max={gpus}",
                                             f"cluster.inter_gbit={g}"])[0]["speedup"]
    lo, hi = math.log(0.1), math.log(1000)
    if x(math.exp(lo)) < target:
        return None
    if x(math.exp(hi)) >= target:
        return math.inf
    for _ in range(30):
        mid = (lo + hi) / 2
        if x(math.exp(mid)) >= target:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default="docs/bench/project_map.jsonl")
    ap.add_argument("--png", default="docs/bench/project_map.png")
    a = ap.parse_args()
    rows = []
    for mname, cfg in MODELS:
        for cname, cl in CODECS:
            for nic in NICS:
                for r in project(a.build, cfg, cl, [f"cluster.inter_gbit={nic}"]):
                    r.update(model=mname, codec=cname, nic_gbit=nic)
                    rows.append(r)
    with open(os.path.join(ROOT, a.out), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    # the tables
    for mname, _ in MODELS:
        for cname, _ in CODECS:
            print(f"\n**{mname}, {cname}**: speedup of the best compressed way over NCCL (band), best way\n")
            gpus = sorted({r["gpus"] for r in rows})
            print("| NIC | " + " | ".join(str(g) for g in gpus) + " |")
            print("|---|" + "---|" * len(gpus))
            for nic in NICS:
                cells = []
                for g in gpus:
                    r = next(r for r in rows if r["model"] == mname and r["codec"] == cname and
                             r["nic_gbit"] == nic and r["gpus"] == g)
                    cells.append(f"{r['speedup']:.2f} ({r['speedup_lo']:.2f}-{r['speedup_hi']:.2f}) {r['best']}")
                print(f"| {nic} Gbit/s | " + " | ".join(cells) + " |")
    print("\nThe paper's end-to-end 1.18x at 64 GPUs: the NIC rate (Gbit/s) below which the projection "
          "reaches it\n")
    print("| model | " + " | ".join(c for c, _ in CODECS) + " |")
    print("|---|" + "---|" * len(CODECS))
    for mname, cfg in MODELS:
        cells = []
        for _, cl in CODECS:
            g = rate_for(a.build, cfg, cl, 64, 1.18)
            cells.append("never (below 0.1)" if g is None else "any" if math.isinf(g) else f"{g:.3g}")
        print(f"| {mname} | " + " | ".join(cells) + " |")
    if a.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axs = plt.subplots(len(MODELS), len(CODECS), figsize=(12, 8), sharex=True)
        for i, (mname, _) in enumerate(MODELS):
            for j, (cname, _) in enumerate(CODECS):
                ax = axs[i][j]
                for nic in NICS:
                    rs = sorted((r for r in rows if r["model"] == mname and r["codec"] == cname and
                                 r["nic_gbit"] == nic), key=lambda r: r["gpus"])
                    g = [r["gpus"] for r in rs]
                    ax.plot(g, [r["speedup"] for r in rs], marker="o", label=f"{nic} Gbit/s NIC")
                    ax.fill_between(g, [r["speedup_lo"] for r in rs], [r["speedup_hi"] for r in rs], alpha=0.2)
                ax.axhline(1.0, color="gray", lw=0.8)
                ax.set_xscale("log", base=2)
                ax.set_title(f"{mname}\n{cname}", fontsize=9)
                ax.set_ylabel("step speedup vs NCCL")
                ax.set_xlabel("GPUs (8 per node)")
                ax.legend(fontsize=8)
        fig.suptitle("Projected end-to-end speedup of lossless compression (build/train --project; docs/SCALE.md)")
        fig.tight_layout()
        fig.savefig(os.path.join(ROOT, a.png), dpi=90)
        print(f"\n# wrote {a.png}")


if __name__ == "__main__":
    main()
