# test: timeout=120
"""test_grad_structure.py: scripts/grad_structure.py's measures, on matrices
whose answers are known by construction.

  - rows that are powers-of-two multiples of one row (an exact rank-one
    matrix u vᵀ with u_i = ±2^k_i): every row's exponents are the row
    above's plus one offset and its signs the row above's, flipped or not,
    so the row-predicted cost is exactly 7 bits (the mantissa) and the top
    singular value holds all the energy;
  - independent Gaussian rows: the row above tells nothing, so the
    row-predicted cost is above the exponent-only cost and the rank-one
    share is small;
  - the dump reader: a unit written the way `train --dump-tensors` writes
    it (one BF16 tensor per unit, the layout in the metadata) comes back as
    its tensors, and the shapes are inferred from the norm weight's length
    (w_down [dim, count/dim], the others [count/dim, dim]).
"""
import io
import os
import sys
import tempfile
from contextlib import redirect_stdout

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import grad_structure as gs  # noqa: E402
import plot_real_tensors as prt  # noqa: E402
from pycheck import check, failed  # noqa: E402


def bf16(x):
    """float32 -> bf16 bit patterns by truncation (exact for these inputs)."""
    return (np.asarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


rng = np.random.default_rng(7)
dim, rows = 64, 128
v = rng.standard_normal(dim).astype(np.float32)
k = rng.integers(-6, 7, size=rows)
sign = rng.choice([-1.0, 1.0], size=rows)
rank1 = bf16((sign * np.exp2(k))[:, None].astype(np.float32) * v[None, :]).reshape(rows, dim)
gauss = bf16(rng.standard_normal((rows, dim)).astype(np.float32))

bits = gs.row_predicted_bits(rank1)
check(abs(bits - 7.0) < 1e-9, "rank_one_rows_cost_7_bits", f"row-predicted {bits}")
e = (gauss.ravel() >> 7) & 0xFF
exp_only = 8 + gs.entropy(e)
bits_g = gs.row_predicted_bits(gauss)
check(bits_g > exp_only, "independent_rows_gain_nothing", f"row-predicted {bits_g} <= exponent-only {exp_only}")
check(abs(gs.entropy(np.array([1, 1, 2, 2])) - 1.0) < 1e-12, "entropy_of_two_equal_halves_is_one_bit")

# A unit as the trainer dumps it: norm, wq [rows, dim], w_down [dim, rows].
norm = bf16(np.ones(dim, dtype=np.float32))
v2 = rng.standard_normal(rows).astype(np.float32)
k2, sign2 = rng.integers(-6, 7, size=dim), rng.choice([-1.0, 1.0], size=dim)
w_down = bf16((sign2 * np.exp2(k2))[:, None].astype(np.float32) * v2[None, :]).reshape(dim, rows)
flat = np.concatenate([norm, rank1.ravel(), w_down.ravel()])
layout = f"u.attn_norm:0:{dim},u.wq:{dim}:{rows * dim},u.w_down:{dim + rows * dim}:{rows * dim}"
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "dump.safetensors")
    prt.write_safetensors(path, [("u", ("BF16", flat.tobytes()))], {"kind": "grads", "tensors.u": layout})
    tensors, meta = prt.load_safetensors(path)
    got = dict(gs.unit_tensors(tensors, meta, "u"))
    check(sorted(got) == ["u.attn_norm", "u.w_down", "u.wq"], "dump_reader_names", str(sorted(got)))
    check(np.array_equal(got["u.wq"], rank1.ravel()), "dump_reader_bytes")
    out = io.StringIO()
    sys.argv = ["grad_structure.py", path, "u"]
    with redirect_stdout(out):
        gs.main()
    lines = {ln.split()[0]: ln.split() for ln in out.getvalue().splitlines()[1:]}
    check(set(lines) == {"u.wq", "u.w_down"}, "norms_left_out", str(sorted(lines)))
    # w_down's rows (of length rows) are scaled copies: read as [rows, dim]
    # instead, consecutive rows would be halves of one row and cost more
    for name in ("u.wq", "u.w_down"):
        row_pred, share = float(lines[name][3]), float(lines[name][5])
        check(abs(row_pred - 7.0) < 0.005 and share > 0.999, f"shape_inferred_{name}", " ".join(lines[name]))

sys.exit(1 if failed() else 0)
