#!/usr/bin/env python3
"""grad_structure.py: how much of a bf16 dump's redundancy an exponent code
cannot see (docs/lab/real_tensors.md, "Why zstd wins on early gradients").

For every matrix of one unit of a `build/train --dump-tensors` file (bf16),
prints in bits per element:

  exp-only   8 + H(exponent), the histogram taken per 16384-element chunk
             (what codec fast's T chunks approach: sign and mantissa raw)
  row-pred   7 + H(exponent residual) + H(sign residual), where the residual
             is against the row above with one offset per row (the mode of
             the row's exponent differences) and one sign flip per row (the
             majority): what a code that knew the matrix's row length and
             its near-rank-one structure could approach
  zstd-bg    16 / ratio of zstd-1 on the high and the low bytes apart
  rank1      the top singular value's share of the squared Frobenius norm

Shapes come from the dump alone: the model dimension is the length of the
unit's first norm weight; w_down is [dim, count/dim], every other matrix
[count/dim, dim].

usage: scripts/grad_structure.py DUMP.safetensors UNIT [UNIT ...]
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_real_tensors import load_safetensors  # noqa: E402

try:
    import zstandard
except ImportError:  # the zstd column is then left out
    zstandard = None

CHUNK = 16384


def entropy(x):
    _, c = np.unique(x, return_counts=True)
    p = c / c.sum()
    return float(-(p * np.log2(p)).sum())


def unit_tensors(tensors, meta, unit):
    """The tensors of one unit of a dump (load_safetensors' output), by the
    layout in its metadata, as bf16 bit patterns."""
    dt, raw = tensors[unit]
    if dt != "BF16":
        sys.exit(f"grad_structure: unit {unit} is {dt}, not BF16")
    flat = np.frombuffer(raw, dtype=np.uint16)
    for spec in meta["tensors." + unit].split(","):
        name, off, cnt = spec.rsplit(":", 2)
        yield name, flat[int(off):int(off) + int(cnt)]


def row_predicted_bits(m):
    """7 + H(exponent residual) + H(sign residual) against the row above."""
    m = m.astype(np.int64)
    e, s = (m >> 7) & 0xFF, m >> 15
    d = e[1:] - e[:-1]
    off = np.array([np.bincount(r - r.min()).argmax() + r.min() for r in d])
    flips = s[1:] ^ s[:-1]
    sigma = (flips.mean(axis=1) > 0.5).astype(np.int64)
    return 7 + entropy(d - off[:, None]) + entropy(flips ^ sigma[:, None])


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    tensors, meta = load_safetensors(sys.argv[1])
    cz = zstandard.ZstdCompressor(level=1) if zstandard else None
    print(f"{'tensor':24s} {'elements':>9s} {'exp-only':>8s} {'row-pred':>8s} {'zstd-bg':>8s} {'rank1':>6s}")
    for unit in sys.argv[2:]:
        ts = list(unit_tensors(tensors, meta, unit))
        dim = next((len(t) for name, t in ts if name.endswith("norm")), None)
        for name, t in ts:
            if name.endswith("norm") or dim is None or len(t) % dim:
                continue
            rows, cols = (dim, len(t) // dim) if name.endswith("w_down") else (len(t) // dim, dim)
            m = t.reshape(rows, cols)
            e = (t >> 7) & 0xFF
            exp_only = 8 + np.mean([entropy(e[i:i + CHUNK]) for i in range(0, len(t), CHUNK)])
            zbits = float("nan")
            if cz:
                hi, lo = (t >> 8).astype(np.uint8).tobytes(), (t & 0xFF).astype(np.uint8).tobytes()
                zbits = 8 * (len(cz.compress(hi)) + len(cz.compress(lo))) / len(t)
            x = (m.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
            sv = np.linalg.svd(x, compute_uv=False)
            rank1 = sv[0] ** 2 / (sv ** 2).sum()
            print(f"{name:24s} {len(t):9d} {exp_only:8.2f} {row_predicted_bits(m):8.2f} {zbits:8.2f} {rank1:6.3f}")


if __name__ == "__main__":
    main()
