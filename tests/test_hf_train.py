#!/usr/bin/env python3
# test: asan=no timeout=300
"""test_hf_train.py — the primary model reference: tiny random Hugging Face models
(LlamaForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, made here by transformers
5.24 and saved with save_pretrained) imported by build/train (model.init_from),
trained, and exported back (checkpoint.hf, build/export-hf), everything against
transformers and torch in fp32 (CPU, eager attention).

Which test checks what:
  this file          import (config.json and weights: names, layouts, the RoPE q/k
                     row permutation, bf16 / fp16 / fp32 on disk, one file and
                     shards), the forward, the loss and every gradient, 10 training
                     steps against torch.optim.AdamW, export -> from_pretrained
  test_hf_ref.py     the MoE routing seen from the model (top-k choices, the aux loss,
                     more MoE configs), through test_model's dump
  test_model_ref.py  the dense model against its written definition (JAX)
  test_hf_errors.sh  bad input to the import and the export, refused by name

Per model (B = 2, T = 12, 1 rank unless said):
  import/weights_bitwise   the trainer's gathered step-1 weights (--dump-tensors) are
                           the file's, bit for bit, under the Python mapping of
                           hfmap.py (written from docs/MODEL.md, not from runtime/hf.c)
  logits                   allclose(rtol 1e-4, atol 1e-5) against HF's forward on the
                           trainer's own step-1 batch
  loss                     cross-entropy relative 1e-5 (atol 1e-6); MoE: the aux loss
                           relative 1e-5
  grad/<tensor>            every gradient of CE (+ coef * aux), ||g - g_hf|| / ||g_hf||
                           < 1e-4
  train_10_steps           each of 10 losses within 1e-4 relative of torch.optim.AdamW
                           (decay on matrices only, clip_grad_norm_ 1.0, warmup 3 +
                           cosine) on the batches the trainer read (--trace-data)
  trained_weights          the exported step-10 weights against torch's, per tensor
                           ||w - w_torch|| / ||w_torch|| < 1e-4
  export/from_pretrained   AutoModelForCausalLM.from_pretrained(step_10/hf): the
                           architecture, no missing / unexpected / mismatched keys
  export/logits            its logits against our forward with the same weights (the
                           run resumed for step 11, --dump-tensors 11): allclose as above
  export/tool_equals_hf    build/export-hf step_10 writes the same bytes as checkpoint.hf
  roundtrip_bitwise        import -> export (one step at lr 0) gives the source tensors
                           back bit for bit, in the source's dtype: Llama fp16, Qwen3
                           bf16, Qwen3-MoE fp32 in shards at 2 ranks with EP 2
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from pycheck import check, failed
from refdump import check_grad, lr_at

import torch  # noqa: E402
from hfmap import dense_layers, from_hf, hf_name_map, objective, split_units, to_hf  # noqa: E402
from safetensors import safe_open  # noqa: E402
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM,  # noqa: E402
                          Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", "build")
BUILD = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
TRAIN, EXPORT = os.path.join(BUILD, "train"), os.path.join(BUILD, "export-hf")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
           OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1",
           ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "detect_leaks=0"))
B, T, STEPS = 2, 12, 10
TR = {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 3, "total_steps": STEPS, "beta1": 0.9,
      "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "clip": 1.0}

MODELS = {
    # name: (HF class, config, dtype on disk, shard size for save_pretrained, round trip)
    "llama": (LlamaForCausalLM, LlamaConfig(
        vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        tie_word_embeddings=False, initializer_range=0.05, pad_token_id=None),
        torch.float32, None, "fp16"),
    "qwen3": (Qwen3ForCausalLM, Qwen3Config(
        vocab_size=53, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=12, max_position_embeddings=64,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=True, initializer_range=0.05),
        torch.bfloat16, None, "bf16"),
    "moe": (Qwen3MoeForCausalLM, Qwen3MoeConfig(
        vocab_size=61, hidden_size=32, intermediate_size=40, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=12, num_experts=6,
        num_experts_per_tok=2, moe_intermediate_size=20, decoder_sparse_step=1,
        mlp_only_layers=[2], norm_topk_prob=True, router_aux_loss_coef=0.01,
        max_position_embeddings=64, tie_word_embeddings=False, initializer_range=0.05),
        torch.float32, "40KB", "fp32"),
}


def run(cmd, what, ranks=1):
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-n", str(ranks)] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=120)
    if r.returncode != 0:
        check(False, what, f"exit {r.returncode}: {(r.stderr or r.stdout).strip()[-600:]}")
    return r.returncode == 0


def our_cfg(hc):
    """The model keys of hfmap's layout, from an HF config."""
    moe = hasattr(hc, "num_experts") or hasattr(hc, "num_local_experts")
    E = getattr(hc, "num_experts", getattr(hc, "num_local_experts", 0)) if moe else 0
    return {"vocab_size": hc.vocab_size, "dim": hc.hidden_size, "n_layers": hc.num_hidden_layers,
            "n_heads": hc.num_attention_heads, "n_kv_heads": hc.num_key_value_heads,
            "head_dim": hc.head_dim, "ffn_hidden": hc.intermediate_size, "n_experts": E,
            "moe_ffn_hidden": hc.moe_intermediate_size if moe else 0,
            "decoder_sparse_step": hc.decoder_sparse_step if moe else 1,
            "mlp_only": list(hc.mlp_only_layers) if moe else [],
            "tie_embeddings": bool(hc.tie_word_embeddings), "qk_norm": not isinstance(hc, LlamaConfig)}


def read_st(path):
    """{name: numpy array} of a safetensors file (bf16 widened to fp32 exactly)."""
    out = {}
    with safe_open(path, "pt") as f:
        for k in f.keys():
            out[k] = f.get_tensor(k)
    return out


def read_hf_dir(d):
    """Every tensor of an HF directory, one file or shards: {name: torch tensor}."""
    out = {}
    for n in sorted(os.listdir(d)):
        if n.endswith(".safetensors"):
            out.update(read_st(os.path.join(d, n)))
    return out


def corpus(V, n, seed):
    """Tokens from a noisy random successor table: learnable in 10 steps."""
    rng = np.random.default_rng(seed)
    nxt = rng.integers(0, V, V)
    t = np.zeros(n, np.int64)
    for i in range(1, n):
        t[i] = nxt[t[i - 1]] if rng.random() < 0.8 else rng.integers(0, V)
    return t


def make_model(cls, hc, dtype, shard, d):
    """A random HF model with every norm weight moved off 1 (so a wrong permutation of
    q_norm / k_norm shows), saved as save_pretrained writes it."""
    torch.manual_seed(1)
    m = cls(hc).float()
    with torch.no_grad():
        for p in m.parameters():
            if p.ndim == 1:
                p.add_(0.2 * torch.randn_like(p))
    kw = {"max_shard_size": shard} if shard else {}
    m.to(dtype).save_pretrained(d, **kw)


def hf_fp32(d):
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    return m.float().eval()


def yaml(d, tokens):
    p = os.path.join(d, "run.yaml")
    with open(p, "w") as f:
        f.write(f"""data:
  path: {tokens}
  tokenizer: u16
  seq_len: {T}
  batch_size: {B}
  val_fraction: 0
  seed: 7
train:
  steps: {STEPS}
optimizer:
  lr: {TR['lr']}
  min_lr: {TR['min_lr']}
  beta1: {TR['beta1']}
  beta2: {TR['beta2']}
  eps: {TR['eps']}
  weight_decay: {TR['weight_decay']}
  grad_clip: {TR['clip']}
schedule:
  warmup_steps: {TR['warmup_steps']}
  total_steps: {STEPS}
comm:
  param_dtype: fp32
  reduce_dtype: fp32
logging:
  every: 100
""")
    return p


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    n = np.linalg.norm(b)
    return np.linalg.norm(a - b) / n if n > 0 else float(np.linalg.norm(a))


def run_model(tag, cls, hc, dtype, shard, rt_dtype, work):
    d = os.path.join(work, tag)
    src = os.path.join(d, "hf")
    os.makedirs(d)
    make_model(cls, hc, dtype, shard, src)
    cfg = our_cfg(hc)
    moe = cfg["n_experts"] > 0
    coef = hc.router_aux_loss_coef if moe else 0.0
    hd, Fe = cfg["head_dim"], cfg["moe_ffn_hidden"]
    dense = dense_layers(cfg)
    toks = corpus(cfg["vocab_size"], 3000, seed=len(tag))
    tokfile = os.path.join(d, "tokens.bin")
    toks.astype("<u2").tofile(tokfile)
    conf = yaml(d, tokfile)
    log, trace, d1, d2 = (os.path.join(d, x) for x in ("log.jsonl", "trace.jsonl", "d1", "d2"))
    ck = os.path.join(d, "ck")
    if not run([TRAIN, conf, "--init-from", src, "--log-json", log, "--trace-data", trace,
                "--dump-tensors", "1", d1, "--set", f"checkpoint.dir={ck}",
                "--set", "checkpoint.hf=true"], f"hf_train/{tag}/train"):
        return
    lines = [json.loads(x) for x in open(log)]
    losses_c = [x["loss"] for x in lines if "loss" in x]

    # the weights the trainer computed with are the file's
    src_t = read_hf_dir(src)
    units = read_st(os.path.join(d1, "step1_rank0_params.safetensors"))
    ours = split_units(cfg, {k: v.numpy() for k, v in units.items()})
    names_file = hf_name_map(cfg, dense, stacked=False)
    bad = []
    for name, arr in ours.items():
        hf, how = names_file[name]
        vals, _ = to_hf(arr, how, hd, Fe)
        want = src_t[hf].float().numpy()
        if not np.array_equal(vals, want):
            bad.append(name)
    mapped = {names_file[n][0] for n in ours}
    check(not bad and mapped == set(src_t), f"hf_train/{tag}/import/weights_bitwise",
          f"differ: {bad[:4]}; HF tensors not mapped: {sorted(set(src_t) - mapped)[:4]}")

    # forward, loss, gradients on the trainer's own step-1 batch
    batch = read_st(os.path.join(d1, "step1_rank0_batch.safetensors"))
    tokens, targets = batch["tokens"].long(), batch["targets"].long()
    with safe_open(os.path.join(d1, "step1_rank0_batch.safetensors"), "pt") as f:
        loss_c = float(f.metadata()["loss"])
    model = hf_fp32(src)
    check(type(model).__name__ == cls.__name__, f"hf_train/{tag}/architecture", type(model).__name__)
    loss, ce, aux, logits = objective(model, tokens, targets, coef, moe)
    loss.backward()
    lg, lc = logits.detach().numpy(), batch["logits"].numpy()
    err = float(np.max(np.abs(lg - lc)))
    check(np.allclose(lc, lg, rtol=1e-4, atol=1e-5), f"hf_train/{tag}/logits", f"max abs diff {err:.3g}")
    lh = float(ce.detach())
    check(abs(loss_c - lh) <= 1e-6 + 1e-5 * abs(lh) and abs(losses_c[0] - lh) <= 1e-6 + 1e-5 * abs(lh),
          f"hf_train/{tag}/loss", f"ours {loss_c:.7f} (log {losses_c[0]:.7f}) HF {lh:.7f}")
    if moe:
        ac, ah = lines[0]["aux_loss"], float(aux.detach())
        check(abs(ac - ah) <= 1e-6 + 1e-5 * abs(ah), f"hf_train/{tag}/aux_loss",
              f"ours {ac:.7f} HF {ah:.7f}")
        print(f"  {tag}: aux loss ours {ac:.9g} HF {ah:.9g}")
    gunits = read_st(os.path.join(d1, "step1_rank0_grads.safetensors"))
    grads_c = split_units(cfg, {k: v.numpy() for k, v in gunits.items()})
    names_mem = hf_name_map(cfg, dense, stacked=True)
    hp = dict(model.named_parameters())
    worst = (0.0, "")
    for name, gc in grads_c.items():
        hf, how = names_mem[name]
        worst = max(worst, (check_grad("hf_train", tag, name, gc,
                                       from_hf(hp[hf].grad.numpy(), how, hd, Fe)), name))
    print(f"  {tag}: logits max abs diff {err:.3g}, CE ours {loss_c:.7f} HF {lh:.7f}, worst "
          f"gradient relative error {worst[0]:.3g} ({worst[1]})")

    # 10 steps of torch.optim.AdamW on the batches the trainer read
    windows = {}
    for x in map(json.loads, open(trace)):
        if x["split"] == "train":
            windows[x["step"]] = x["windows"]
    model = hf_fp32(src)
    params = [p for p in model.parameters()]
    opt = torch.optim.AdamW([{"params": [p for p in params if p.ndim >= 2]},
                             {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
                            lr=TR["lr"], betas=(TR["beta1"], TR["beta2"]), eps=TR["eps"],
                            weight_decay=TR["weight_decay"])
    losses_t = []
    for s in range(STEPS):
        w = windows[s + 1]
        tk = torch.tensor(np.stack([toks[i * T:i * T + T] for i in w]))
        tg = torch.tensor(np.stack([toks[i * T + 1:i * T + T + 1] for i in w]))
        opt.zero_grad()
        loss, ce, _, _ = objective(model, tk, tg, coef, moe)
        loss.backward()
        losses_t.append(float(ce.detach()))
        torch.nn.utils.clip_grad_norm_(params, TR["clip"])
        for g in opt.param_groups:
            g["lr"] = float(np.float32(lr_at(s, TR)))
        opt.step()
    r = max(abs(a - b) / abs(b) for a, b in zip(losses_c, losses_t))
    print(f"  {tag}: 10-step losses {losses_t[0]:.5f} -> {losses_t[-1]:.5f}, max relative "
          f"ours/torch diff {r:.3g}")
    check(len(losses_c) == STEPS and r < 1e-4 and losses_t[-1] < losses_t[0] - 1e-3,
          f"hf_train/{tag}/train_10_steps",
          f"max relative diff {r:.3g}; ours {np.round(losses_c, 5)} torch {np.round(losses_t, 5)}")

    # the exported step-10 weights: HF loads them, they are torch's, they compute ours
    out = os.path.join(ck, f"step_{STEPS:08d}", "hf")
    try:
        ex, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True,
                                                        attn_implementation="eager")
        keys_ok = not (info["missing_keys"] or info["unexpected_keys"] or
                       info["mismatched_keys"] or info["error_msgs"])
        check(keys_ok and type(ex).__name__ == cls.__name__ and ex.dtype == torch.float32,
              f"hf_train/{tag}/export/from_pretrained", f"{type(ex).__name__} {ex.dtype} {info}")
    except Exception as e:  # noqa: BLE001
        check(False, f"hf_train/{tag}/export/from_pretrained", repr(e)[:400])
        return
    mine, theirs = dict(ex.named_parameters()), dict(model.named_parameters())
    wr = max((rel(mine[k].detach().numpy(), theirs[k].detach().numpy()), k) for k in theirs)
    print(f"  {tag}: trained weights, worst relative difference ours/torch {wr[0]:.3g} ({wr[1]})")
    check(wr[0] < 1e-4, f"hf_train/{tag}/trained_weights", f"{wr[0]:.3g} ({wr[1]})")
    if run([TRAIN, conf, "--init-from", src, "--resume", ck, "--set", f"train.steps={STEPS + 1}",
            "--set", "checkpoint.dir=", "--dump-tensors", str(STEPS + 1), d2],
           f"hf_train/{tag}/resume_for_logits"):
        b2 = read_st(os.path.join(d2, f"step{STEPS + 1}_rank0_batch.safetensors"))
        with torch.no_grad():
            le = ex(input_ids=b2["tokens"].long()).logits.numpy()
        lc = b2["logits"].numpy()
        check(np.allclose(lc, le, rtol=1e-4, atol=1e-5), f"hf_train/{tag}/export/logits",
              f"max abs diff {np.max(np.abs(le - lc)):.3g}")
    tool = os.path.join(d, "tool")
    if run([EXPORT, ck, tool], f"hf_train/{tag}/export_tool"):
        same = sorted(os.listdir(tool)) == sorted(os.listdir(out)) and all(
            open(os.path.join(tool, n), "rb").read() == open(os.path.join(out, n), "rb").read()
            for n in os.listdir(out))
        check(same, f"hf_train/{tag}/export/tool_equals_hf",
              f"{sorted(os.listdir(tool))} vs {sorted(os.listdir(out))}")

    # import -> export, bit for bit, in the source's dtype
    rt = os.path.join(d, "rt")
    if rt_dtype == "fp16":
        rt_src = os.path.join(d, "hf16")
        make_model(cls, hc, torch.float16, None, rt_src)
    else:
        rt_src = src
    ranks, extra = (2, ["--set", "parallelism.ep=2", "--set", "checkpoint.hf_shard_bytes=40000"]) \
        if moe else (1, [])
    if run([TRAIN, conf, "--init-from", rt_src, "--set", "train.steps=1", "--set", "optimizer.lr=0",
            "--set", "optimizer.min_lr=0", "--set", f"checkpoint.dir={rt}",
            "--set", "checkpoint.hf=true", "--set", f"checkpoint.hf_dtype={rt_dtype}"] + extra,
           f"hf_train/{tag}/roundtrip_run", ranks=ranks):
        a, b = read_hf_dir(rt_src), read_hf_dir(os.path.join(rt, "step_00000001", "hf"))
        diff = [k for k in a if k not in b or a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])]
        shards = len([n for n in os.listdir(os.path.join(rt, "step_00000001", "hf"))
                      if n.endswith(".safetensors")])
        check(sorted(a) == sorted(b) and not diff, f"hf_train/{tag}/roundtrip_bitwise_{rt_dtype}",
              f"differ {diff[:4]}, only in the source {sorted(set(a) - set(b))[:4]}, "
              f"only in the export {sorted(set(b) - set(a))[:4]}")
        print(f"  {tag}: import -> export {rt_dtype} at {ranks} rank(s): {len(a)} tensors, "
              f"{shards} file(s), bitwise")


def main():
    for p in (TRAIN, EXPORT):
        if not os.access(p, os.X_OK):
            check(False, "hf_train/binaries", f"{p} not built")
            return 1
    with tempfile.TemporaryDirectory(prefix="zrt_hf_") as work:
        for tag, (cls, hc, dtype, shard, rt) in MODELS.items():
            run_model(tag, cls, hc, dtype, shard, rt, work)
    return 1 if failed() else 0


if __name__ == "__main__":
    sys.exit(main())
