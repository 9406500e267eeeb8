#!/usr/bin/env python3
# test: asan=no timeout=180
"""test_torch_baseline.py — scripts/torch_baseline.py (the PyTorch baseline of the GPU
machine) on the CPU: that it runs, what it writes, and that it trains the model our
trainer trains and counts its FLOPs as our trainer does.

  run/exit_0, run/step_lines     a 2-layer llama-tiny for 1 warmup + 2 steps
                                 (subprocess, as scripts/test_gpu.sh runs it)
  run/json_keys                  one JSON line with every key docs/BENCHMARKS.md's rows use
  run/tokens_per_s               > 0, and flops_per_s = flops_per_token x tokens_per_s
  run/batch_shape                batch_size, seq_len, grad_accum, tokens_per_step as --set
  run/mfu_over_peak              with --peak-tflops 1: mfu = flops_per_s / 1e12
  <cfg>/arch                     LlamaForCausalLM / Qwen3ForCausalLM / Qwen3MoeForCausalLM
  <cfg>/params_formula           the HF model's parameters = llama_num_params written
                                 out here from models/llama.c's layout (exact)
  <cfg>/params_trainer           = what build/train --plan 1 prints for the same config
                                 and --set (its "%.3f M parameters"); SKIP without
                                 BUILD/train
  <cfg>/flops_formula            the script's flops per token = llama_flops_per_token
                                 written out here (exact)
    for llama (the run's config), qwen3 (QK-norm, head_dim apart, untied) and moe
    (configs/qwen3-moe-tiny.yaml: a dense block among MoE blocks, tied)
  moe/trains                     one MoE step (aux loss in the loss), status ok
  data/byte_file                 --data reads a byte text file
  compile/failure_reported       torch.compile raising: exit 0, the eager row ok, the
                                 compile row status failed with the error, said on stdout
  config/unknown_key             --set model.dmi=3: exit 2, names the key, suggests model.dim
"""
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

import yaml
from pycheck import check, failed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(os.environ.get("BUILD", "build"))
SCRIPT = os.path.join(ROOT, "scripts", "torch_baseline.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import torch_baseline as tb  # noqa: E402

# name: (config, --set overrides)
CONFIGS = {
    "llama": ("configs/llama-tiny.yaml", {"model.n_layers": 2, "data.batch_size": 2,
                                          "data.seq_len": 64, "data.grad_accum": 2}),
    "qwen3": ("configs/llama-tiny.yaml", {"model.qk_norm": "true", "model.head_dim": 48,
                                          "model.tie_embeddings": "false", "model.n_layers": 3}),
    "moe": ("configs/qwen3-moe-tiny.yaml", {"data.seq_len": 32, "data.batch_size": 2}),
}


def sets_of(over):
    return [f"{k}={v}" for k, v in over.items()]


def model_keys(path, over):
    """The model keys of a config with its overrides, read here, build/train's defaults
    for the missing ones."""
    m = {"head_dim": 0, "qk_norm": False, "n_experts": 0, "n_experts_per_tok": 0,
         "moe_ffn_hidden": 0, "decoder_sparse_step": 1, "mlp_only_layers": [],
         "tie_embeddings": True}
    with open(os.path.join(ROOT, path)) as f:
        m.update(yaml.safe_load(f)["model"])
    for k, v in over.items():
        if k.startswith("model."):
            m[k[6:]] = {"true": True, "false": False}.get(v, v) if isinstance(v, str) else v
    return m


def is_moe(m, l):
    return (m["n_experts"] > 0 and l not in m["mlp_only_layers"]
            and (l + 1) % m["decoder_sparse_step"] == 0)


def num_params(m):
    """models/llama.c: llama_num_params over its unit layout (llama.h)."""
    C, V, L, F = m["dim"], m["vocab_size"], m["n_layers"], m["ffn_hidden"]
    hd = m["head_dim"] or C // m["n_heads"]
    QD, KVD, E, Fe = hd * m["n_heads"], hd * m["n_kv_heads"], m["n_experts"], m["moe_ffn_hidden"]
    n = V * C + C if m["tie_embeddings"] else V * C + (C + V * C)  # unit 0 (+ untied head)
    for l in range(L):
        n += C + QD * C + 2 * KVD * C + (2 * hd if m["qk_norm"] else 0) + C * QD + C
        n += E * C + E * 3 * Fe * C if is_moe(m, l) else 3 * F * C  # router + experts, or MLP
    return n


def flops_per_token(m, T):
    """models/llama.c: llama_flops_per_token."""
    C, V, L, F = m["dim"], m["vocab_size"], m["n_layers"], m["ffn_hidden"]
    hd = m["head_dim"] or C // m["n_heads"]
    QD, KVD = hd * m["n_heads"], hd * m["n_kv_heads"]
    n = 0
    for l in range(L):
        n += 2 * QD * C + 2 * KVD * C
        n += (m["n_experts"] * C + m["n_experts_per_tok"] * 3 * m["moe_ffn_hidden"] * C
              if is_moe(m, l) else 3 * F * C)
    return 6.0 * (n + V * C) + 12.0 * L * T * QD


def trainer_params(path, over):
    """build/train --plan 1's '# model: X M parameters', or None without the binary."""
    train = os.path.join(BUILD, "train")
    if not os.access(train, os.X_OK):
        return None
    cmd = [train, path, "--plan", "1"]
    for s in sets_of(over):
        cmd += ["--set", s]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    for line in out.splitlines():
        if line.startswith("# model:"):
            return line.split()[2]
    return "no '# model:' line in: " + out[-300:]


def model_checks(name, cfg, over, params, fpt, arch):
    want = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM",
            "moe": "Qwen3MoeForCausalLM"}[name]
    check(arch == want, f"{name}/arch", f"{arch}, expected {want}")
    m = model_keys(cfg, over)
    check(params == num_params(m), f"{name}/params_formula",
          f"HF model {params}, llama_num_params {num_params(m)}")
    got = trainer_params(cfg, over)
    if got is None:
        print(f"SKIP {name}/params_trainer: {BUILD}/train is not built")
    else:
        check(got == f"{params / 1e6:.3f}", f"{name}/params_trainer",
              f"build/train says {got} M, the HF model has {params}")
    T = int(over.get("data.seq_len", 0)) or yaml.safe_load(open(os.path.join(ROOT, cfg)))["data"]["seq_len"]
    check(fpt == flops_per_token(m, T), f"{name}/flops_formula",
          f"script {fpt}, llama_flops_per_token {flops_per_token(m, T)}")


def run_main(argv):
    """torch_baseline.main in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = tb.main(argv)
    return rc, out.getvalue(), err.getvalue()


def main():
    tmp = tempfile.mkdtemp(prefix="torch_baseline_")
    # ---- the script as scripts/test_gpu.sh runs it, on the CPU
    cfg, over = CONFIGS["llama"]
    js = os.path.join(tmp, "run.jsonl")
    cmd = [sys.executable, SCRIPT, cfg, "--device", "cpu", "--steps", "2", "--warmup", "1",
           "--peak-tflops", "1", "--json", js]
    for s in sets_of(over):
        cmd += ["--set", s]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "run/exit_0", f"exit {p.returncode}: {p.stderr[-500:]}")
    print(p.stdout, end="")
    steps = [l for l in p.stdout.splitlines() if l.startswith("torch eager step")]
    check(len(steps) == 3 and "(warmup)" in steps[0] and "# torch eager: median of 2 steps" in p.stdout,
          "run/step_lines", f"{len(steps)} step lines")
    rows = [json.loads(l) for l in open(js)] if os.path.exists(js) else []
    keys = {"config", "arch", "compile", "status", "params", "flops_per_token", "batch_size",
            "seq_len", "grad_accum", "tokens_per_step", "steps", "warmup", "step_ms_median",
            "step_ms", "tokens_per_s", "flops_per_s", "mfu", "peak_flops", "peak_source",
            "dtype", "device", "device_name", "torch", "transformers", "attn_implementation",
            "optimizer", "loss_first", "loss_last"}
    r = rows[0] if len(rows) == 1 else {}
    check(len(rows) == 1 and keys <= set(r) and r["status"] == "ok" and r["compile"] is False,
          "run/json_keys", f"{len(rows)} rows, missing {sorted(keys - set(r))}")
    if not r:
        sys.exit(1)
    check(r["tokens_per_s"] > 0 and
          abs(r["flops_per_s"] - r["flops_per_token"] * r["tokens_per_s"]) <= 1e-9 * r["flops_per_s"],
          "run/tokens_per_s", f"tokens_per_s {r['tokens_per_s']}, flops_per_s {r['flops_per_s']}")
    check((r["batch_size"], r["seq_len"], r["grad_accum"], r["tokens_per_step"]) == (2, 64, 2, 256),
          "run/batch_shape", str((r["batch_size"], r["seq_len"], r["grad_accum"], r["tokens_per_step"])))
    check(r["peak_flops"] == 1e12 and abs(r["mfu"] - r["flops_per_s"] / 1e12) <= 1e-12,
          "run/mfu_over_peak", f"peak {r['peak_flops']}, mfu {r['mfu']}")
    model_checks("llama", cfg, over, r["params"], r["flops_per_token"], r["arch"])

    # ---- the Qwen3 classes, in this process: the model built, counted, its FLOPs
    for name in ("qwen3", "moe"):
        cfg, over = CONFIGS[name]
        c, _ = tb.load_config(os.path.join(ROOT, cfg), sets_of(over))
        model, arch = tb.hf_model(c, "cpu", False)
        model_checks(name, cfg, over, tb.num_params(model), tb.flops_per_token(c, c["data.seq_len"]),
                     arch)
        del model
    cfg, over = CONFIGS["moe"]
    js = os.path.join(tmp, "moe.jsonl")
    rc, out, err = run_main([os.path.join(ROOT, cfg), "--device", "cpu", "--steps", "1",
                             "--warmup", "0", "--json", js] +
                            [a for s in sets_of(over) for a in ("--set", s)])
    mrow = json.loads(open(js).readline()) if rc == 0 else {}
    check(rc == 0 and mrow.get("status") == "ok" and mrow["loss_first"] > 0, "moe/trains",
          f"exit {rc}: {err[-300:]}")

    # ---- --data: a byte text file
    text = os.path.join(tmp, "corpus.txt")
    with open(text, "w") as f:
        f.write("the quick brown fox jumps over the lazy dog\n" * 40)
    cfg, over = CONFIGS["llama"]
    rc, out, err = run_main([os.path.join(ROOT, cfg), "--device", "cpu", "--steps", "1", "--warmup",
                             "0", "--data", "--set", f"data.path={text}"] +
                            [a for s in sets_of(over) for a in ("--set", s)])
    check(rc == 0 and "tokens of " + text in out, "data/byte_file", f"exit {rc}: {err[-300:]}")

    # ---- torch.compile failing (as offline machines can): reported, no crash
    import torch

    def broken(model, *a, **k):
        def fail(*a, **k):
            raise RuntimeError("backend compiler failed (planted)")
        return fail
    real, torch.compile = torch.compile, broken
    js = os.path.join(tmp, "compile.jsonl")
    try:
        rc, out, err = run_main([os.path.join(ROOT, cfg), "--device", "cpu", "--steps", "1",
                                 "--warmup", "1", "--compile", "--json", js] +
                                [a for s in sets_of(over) for a in ("--set", s)])
    finally:
        torch.compile = real
    rows = [json.loads(l) for l in open(js)] if rc == 0 else []
    check(rc == 0 and [x["status"] for x in rows] == ["ok", "failed"] and rows[1]["compile"]
          and "planted" in rows[1]["error"] and "torch.compile: failed in step 1" in out,
          "compile/failure_reported", f"exit {rc}, rows {[x.get('status') for x in rows]}: {out[-300:]}")

    # ---- a misspelt key
    rc, out, err = run_main([os.path.join(ROOT, "configs/llama-tiny.yaml"), "--set", "model.dmi=3"])
    check(rc == 2 and "'model.dmi'" in err and "model.dim" in err, "config/unknown_key",
          f"exit {rc}: {err}")
    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failed() else 0)


if __name__ == "__main__":
    main()
