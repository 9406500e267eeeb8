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
    (w_down [dim, count/dim], the others [count/dim, dim]);
  - plot_real_tensors.py --to-bf16 (the 100M corpus's bf16 gradients, made
    from its fp32 ones) rounds as torch's float32 -> bfloat16 does (nearest
    even; ties, the largest finite values, infinities, subnormals), keeps
    a NaN a NaN and the layout metadata as it was.
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

# --to-bf16 against torch's rounding
import torch  # noqa: E402
u = np.concatenate([rng.integers(0, 2**32, size=20000, dtype=np.uint64).astype(np.uint32),
                    np.array([0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000,
                              0x7F800000, 0xFF800000, 0x00000001, 0x80008000, 0, 0x80000000], dtype=np.uint32)])
nan = (u & 0x7FFFFFFF) > 0x7F800000
with tempfile.TemporaryDirectory() as tmp:
    src, dst = os.path.join(tmp, "f32.safetensors"), os.path.join(tmp, "bf16.safetensors")
    meta = {"kind": "grads", "tensors.u": f"u.w:0:{len(u)}"}
    prt.write_safetensors(src, [("u", ("F32", u.astype("<u4").tobytes()))], meta)
    prt.to_bf16(src, dst)
    got, meta2 = prt.load_safetensors(dst)
    dt, raw = got["u"]
    r = np.frombuffer(raw, dtype="<u2")
    want = torch.from_numpy(u.view(np.float32).copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    bad = np.flatnonzero((r != want) & ~nan)
    check(dt == "BF16" and len(r) == len(u) and bad.size == 0, "to_bf16_rounds_as_torch",
          f"{dt}, {bad.size} of {len(u)} differ" + (f", first {u[bad[0]]:#010x} -> {r[bad[0]]:#06x} "
                                                     f"(torch {want[bad[0]]:#06x})" if bad.size else ""))
    rn = r[nan]
    check(nan.any() and bool(np.all(((rn & 0x7F80) == 0x7F80) & ((rn & 0x7F) != 0))), "to_bf16_keeps_nan_nan")
    check(meta2 == meta, "to_bf16_keeps_the_layout", str(meta2))

sys.exit(1 if failed() else 0)
