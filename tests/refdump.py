"""refdump.py — what the model reference tests (test_model_ref.py: JAX;
test_hf_ref.py: Hugging Face transformers) share: running test_model's dump,
reading its files, the learning-rate schedule of its 10 training steps, and the
checks every reference makes the same way.

    from refdump import BIN, load, lr_at, dumped, check_grad, check_trajectory, main
"""
import contextlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from pycheck import check, failed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", "build")
BIN = os.path.join(ROOT if not os.path.isabs(BUILD) else "", BUILD, "tests", "test_model")


def load(d, name, dtype, shape=None):
    """A raw little-endian array test_model wrote into d."""
    a = np.fromfile(os.path.join(d, name), dtype=np.dtype(dtype).newbyteorder("<"))
    return a.reshape(shape) if shape is not None else a


def lr_at(s, tr):
    """runtime/optim.c's schedule for 0-based step s: linear warmup, cosine, min_lr."""
    lr, mn, w, tot = tr["lr"], tr["min_lr"], tr["warmup_steps"], tr["total_steps"]
    if s < w:
        return lr * (s + 1) / w
    if s >= tot:
        return mn
    return mn + (lr - mn) * 0.5 * (1 + np.cos(np.pi * (s - w) / (tot - w)))


@contextlib.contextmanager
def dumped(prefix, tag, flags):
    """test_model --dump-train into a scratch folder: yields (folder, index) or
    (None, None) after a FAIL line when the dump failed."""
    with tempfile.TemporaryDirectory(prefix="zrt_ref_") as d:
        r = subprocess.run([BIN, "--dump-train", d] + flags, capture_output=True, text=True,
                           timeout=120)
        if r.returncode != 0:
            check(False, f"{prefix}/{tag}/dump", f"rc {r.returncode}: {r.stderr.strip()[:300]}")
            yield None, None
        else:
            yield d, json.load(open(os.path.join(d, "index.json")))


def check_grad(prefix, tag, name, g_c, g_ref):
    """||g_c - g_ref|| / ||g_ref|| < 1e-4 (both zero counts as equal); returns it."""
    g_c, g_ref = g_c.astype(np.float64), np.asarray(g_ref, np.float64)
    n = np.linalg.norm(g_ref)
    rel = np.linalg.norm(g_c - g_ref) / n if n > 0 else (0.0 if not np.any(g_c) else np.inf)
    check(rel < 1e-4, f"{prefix}/{tag}/grad/{name}", f"relative error {rel:.3g} (|g| {n:.3g})")
    return rel


def check_trajectory(prefix, tag, ref, losses_c, losses_ref):
    """The 10 training losses agree within 1e-4 relative, and training moved."""
    rel = max(abs(a - b) / abs(b) for a, b in zip(losses_c, losses_ref))
    moved = losses_ref[-1] < losses_ref[0] - 1e-3
    print(f"  {tag}: 10-step losses {losses_ref[0]:.5f} -> {losses_ref[-1]:.5f}, "
          f"max relative C/{ref} diff {rel:.3g}")
    check(rel < 1e-4 and moved, f"{prefix}/{tag}/train_10_steps",
          f"max relative diff {rel:.3g}; C {list(np.round(losses_c, 5))} "
          f"{ref} {list(np.round(losses_ref, 5))}")


def main(prefix, configs, run_config):
    if not os.access(BIN, os.X_OK):
        check(False, f"{prefix}/binary", f"{BIN} not built")
        return 1
    for tag, flags in configs.items():
        run_config(tag, flags)
    return 1 if failed() else 0


if __name__ == "__main__":
    sys.exit("refdump.py is a module for the reference tests")
