#!/usr/bin/env python3
"""plot_loss.py A.jsonl [B.jsonl ...] -o out.png — loss curves of trainer runs.

Reads the JSON-lines logs of build/train --log-json (one object per step,
a last {"final": ...} line) and draws each run's training loss (and its
validation loss, as markers, where logged) against the step, one colour per
run, labelled by file name. Uses matplotlib's Agg backend: no display needed.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    steps, loss, vsteps, vloss = [], [], [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                o = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON: {e}")
            if o.get("final"):
                continue
            if "step" not in o or "loss" not in o:
                sys.exit(f"{path}:{n}: no step/loss field")
            steps.append(o["step"])
            loss.append(o["loss"])
            if "val_loss" in o:
                vsteps.append(o["step"])
                vloss.append(o["val_loss"])
    if not steps:
        sys.exit(f"{path}: no step lines")
    return steps, loss, vsteps, vloss


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", help="JSON-lines logs from build/train --log-json")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--title", default="training loss")
    a = ap.parse_args()
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    for i, p in enumerate(a.logs):
        s, l, vs, vl = load(p)
        c = f"C{i}"
        label = os.path.basename(p)
        # A second run drawn dashed keeps bit-identical curves both visible.
        ax.plot(s, l, color=c, lw=1.4, ls="-" if i == 0 else "--", label=f"{label} (train)")
        if vs:
            ax.plot(vs, vl, "o", color=c, ms=4, label=f"{label} (val)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(a.title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.output)
    print(f"plot_loss: wrote {a.output}")


if __name__ == "__main__":
    main()
