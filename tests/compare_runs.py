#!/usr/bin/env python3
"""compare_runs.py — compare two trainer JSON-lines logs (--log-json), for the shell tests.

    compare_runs.py A B exact            every step B logs: loss, grad_norm, lr, val_loss
                                         (and aux_loss for MoE) identical to A's, and the
                                         final param_hash identical
    compare_runs.py A B close TOL        every step B logs: relative loss difference <= TOL
    options:
      --same-steps     A and B must log the same steps (else B's steps must be in A's)
      --steps LO HI    B must log exactly steps LO..HI (a resumed run)
      --first-tol T    relative bound for the first step (close mode)

Prints one line (the worst relative loss difference, or what differs) and exits 0 when
the runs agree, 1 when they do not.
"""
import argparse
import json
import sys


def load(path):
    steps, final = {}, None
    for line in open(path):
        o = json.loads(line)
        if o.get("final"):
            final = o
        else:
            steps[o["step"]] = o
    return steps, final


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("mode", choices=("exact", "close"))
    ap.add_argument("tol", nargs="?", type=float, default=0.0)
    ap.add_argument("--same-steps", action="store_true")
    ap.add_argument("--steps", nargs=2, type=int)
    ap.add_argument("--first-tol", type=float)
    o = ap.parse_args()
    sa, fa = load(o.a)
    sb, fb = load(o.b)
    if not sb or any(s not in sa for s in sb) or (o.same_steps and sorted(sa) != sorted(sb)):
        print("steps differ: %s vs %s" % (sorted(sa), sorted(sb)))
        return 1
    if o.steps and (min(sb), max(sb)) != tuple(o.steps):
        print("steps %d..%d, expected %d..%d" % (min(sb), max(sb), *o.steps))
        return 1
    worst, first = 0.0, min(sb)
    for s in sorted(sb):
        keys = ("loss", "grad_norm", "lr", "val_loss", "aux_loss") if o.mode == "exact" else ("loss",)
        for k in keys:
            if k not in sa[s] and k not in sb[s]:
                continue
            x, y = sa[s].get(k), sb[s].get(k)
            if x is None or y is None:
                print("step %d: %s missing in one run" % (s, k))
                return 1
            if o.mode == "exact" and x != y:
                print("step %d %s: %r != %r" % (s, k, x, y))
                return 1
            rel = abs(x - y) / max(abs(x), 1e-30)
            worst = max(worst, rel)
            tol = o.first_tol if (s == first and o.first_tol is not None) else o.tol
            if o.mode == "close" and rel > tol:
                print("step %d %s: %r vs %r, relative %.3g" % (s, k, x, y, rel))
                return 1
    if o.mode == "exact" and (not fa or not fb or fa["param_hash"] != fb["param_hash"]):
        print("final hash %s != %s" % (fa and fa["param_hash"], fb and fb["param_hash"]))
        return 1
    print("max relative loss difference %.3g over %d steps" % (worst, len(sb)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
