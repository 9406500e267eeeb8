#!/usr/bin/env python3
"""torch_baseline.py — the side-by-side baseline: our config's model trained by PyTorch.

    scripts/torch_baseline.py CONFIG.yaml [--set key=value ...] [--steps N] [--warmup W]
        [--device cuda|cpu] [--dtype bf16|fp32] [--compile] [--peak-tflops X]
        [--data] [--json FILE]

Builds the model of one of our configs as Hugging Face defines it
(LlamaForCausalLM; Qwen3ForCausalLM when model.qk_norm; Qwen3MoeForCausalLM when
model.n_experts > 0; the key mapping of runtime/hf.c's write_config) with SDPA
attention, and trains it the way build/train does, at the config's batch shape
(data.batch_size x data.seq_len, data.grad_accum micro-batches per step, one
rank): cross-entropy (+ router_aux_loss_coef x HF's aux loss for MoE), global-norm
clipping at optimizer.grad_clip, AdamW (fused=True on CUDA) with the config's
betas and eps and weight decay on matrices only (runtime/train.c:
optimizer_step), warmup + cosine learning rate (runtime/optim.c: adamw_lr);
bf16 autocast with --dtype bf16 (the default on CUDA; fp32 on the CPU), fp32
master weights, as our model.compute: bf16. train.recompute: full turns on HF's
gradient checkpointing. Tokens are random (seed data.seed) unless --data reads
data.path (byte text, or u16 / i32 token files).

It prints one line per step and a summary: median step time over --steps N
timed steps after --warmup W, tokens/s and model FLOP/s, and MFU against the
device's dense spec peak (--peak-tflops, or the table below by
torch.cuda.get_device_name(); no MFU for a device it does not know, nor for a
CPU). The model FLOPs per token are build/train's: llama_flops_per_token()
(models/llama.c; runtime/train_log.c: train_log_step multiplies it by the
tokens of a step), replicated in flops_per_token() below. Our trainer's log
line and JSON give MFU against the device's *measured* matmul peak instead;
compare tokens_per_s and flops_per_s, or its flops_per_s over the same spec
peak (scripts/test_train_gpu.sh prints both).

--compile adds a second row: the same model under torch.compile (a fresh model,
the same seed); when compilation fails (offline machines lack what it wants)
the row says why and the run still exits 0. --json FILE appends one JSON line
per row (docs/BENCHMARKS.md rows are made from them).

Needs torch, transformers and PyYAML (a dependency of transformers), nothing
of ours: it runs on the GPU machine beside the bundle (scripts/test_gpu.sh).
Leaves out: several ranks (FSDP, expert parallelism), the communication keys
(comm.*, parallelism.*: ignored), BPE text (--data refuses it), validation.
"""
import argparse
import difflib
import gc
import json
import math
import os
import platform
import statistics
import sys
import time

# ---------------------------------------------------------------- config

# The keys this script reads, with build/train's defaults (runtime/config.c:
# config_defaults) and types. A key of these sections that is not here is
# refused (a typo would otherwise train another model); UNUSED keys are
# known and do not change what is measured here.
KEYS = {
    "model.vocab_size": (int, 256), "model.dim": (int, 64), "model.n_layers": (int, 2),
    "model.n_heads": (int, 4), "model.n_kv_heads": (int, 2), "model.ffn_hidden": (int, 192),
    "model.max_seq_len": (int, 64), "model.rope_theta": (float, 10000.0),
    "model.norm_eps": (float, 1e-5), "model.tie_embeddings": (bool, True),
    "model.head_dim": (int, 0), "model.qk_norm": (bool, False), "model.n_experts": (int, 0),
    "model.n_experts_per_tok": (int, 0), "model.moe_ffn_hidden": (int, 0),
    "model.decoder_sparse_step": (int, 1), "model.mlp_only_layers": ("layers", []),
    "model.norm_topk_prob": (bool, False), "model.router_aux_loss_coef": (float, 0.001),
    "model.capacity_factor": (float, 0.0), "model.init_from": (str, ""),
    "model.compute": (str, "fp32"),
    "data.path": (str, "data/fortunes.txt"), "data.tokenizer": (str, "byte"),
    "data.seq_len": (int, 64), "data.batch_size": (int, 4), "data.grad_accum": (int, 1),
    "data.seed": (int, 1234),
    "train.steps": (int, 100), "train.seed": (int, 42), "train.recompute": (str, "none"),
    "optimizer.lr": (float, 1e-3), "optimizer.min_lr": (float, 1e-4),
    "optimizer.beta1": (float, 0.9), "optimizer.beta2": (float, 0.95),
    "optimizer.eps": (float, 1e-8), "optimizer.weight_decay": (float, 0.1),
    "optimizer.grad_clip": (float, 1.0),
    "schedule.warmup_steps": (int, 0), "schedule.total_steps": (int, 0),
}
UNUSED = {"data.bpe_merges", "data.val_fraction", "data.val_every", "data.val_batches",
          "train.logits_rows"}
SECTIONS = {k.split(".")[0] for k in KEYS}  # the others (comm, parallelism, ...) are ignored


class ConfigError(Exception):
    pass


def to_type(key, value, where):
    """A key's value (YAML scalar or --set text) in its type, as runtime/config.c's
    set_value reads the text: every scalar is text there."""
    typ = KEYS[key][0]
    text = value if isinstance(value, str) else json.dumps(value) if not isinstance(value, bool) \
        else ("true" if value else "false")
    try:
        if typ is bool:
            t = text.lower()
            if t in ("true", "yes", "on", "1"):
                return True
            if t in ("false", "no", "off", "0"):
                return False
            raise ValueError
        if typ == "layers":  # YAML [1, 3] or --set "1,3"
            items = value if isinstance(value, list) else [s for s in text.replace(",", " ").split()]
            return sorted({int(x) for x in items})
        if typ is int:
            return int(text)
        if typ is float:
            x = float(text)
            if not math.isfinite(x):
                raise ValueError
            return x
        return "" if value is None else str(value)
    except (ValueError, TypeError):
        want = {bool: "true or false", int: "an integer", float: "a number",
                "layers": "block indices"}.get(typ, "a string")
        raise ConfigError(f"{where}: key '{key}': expected {want}, got '{text}'")


def set_key(cfg, key, value, where, ignored):
    if key.split(".")[0] not in SECTIONS:
        ignored.append(key)
        return
    if key in UNUSED:
        return
    if key not in KEYS:
        near = difflib.get_close_matches(key, list(KEYS) + sorted(UNUSED), n=1)
        raise ConfigError(f"{where}: unknown key '{key}'" +
                          (f" (did you mean '{near[0]}'?)" if near else ""))
    cfg[key] = to_type(key, value, where)


def load_config(path, sets=()):
    """Our YAML config plus --set overrides -> {dotted key: value} over KEYS, and the
    --set keys this script ignores (announced by the caller)."""
    try:
        import yaml
    except ImportError:
        raise ConfigError("PyYAML is missing (pip install pyyaml; transformers depends on it, "
                          "so an environment with transformers normally has it)")
    try:
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}")
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not YAML: {e}")
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping of sections")
    cfg = {k: d for k, (_, d) in KEYS.items()}
    ignored = []

    def walk(prefix, node):
        for k, v in node.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict):
                walk(key, v)
            else:
                set_key(cfg, key, v, path, [])
    walk("", doc)
    for s in sets:
        if "=" not in s:
            raise ConfigError(f"--set {s}: expected key=value")
        k, v = s.split("=", 1)
        set_key(cfg, k.strip(), v, f"--set {s}", ignored)
    if cfg["model.init_from"]:
        from_hf_config(cfg, cfg["model.init_from"])
    check_config(cfg)
    return cfg, ignored


def from_hf_config(cfg, d):
    """model.init_from: the model keys from DIR/config.json (runtime/hf.c's mapping, read
    back); the weights are not loaded (a speed baseline trains from HF's init)."""
    p = os.path.join(d, "config.json")
    try:
        with open(p) as f:
            h = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"model.init_from: cannot read {p}: {e}")
    arch = (h.get("architectures") or [""])[0] or {
        "llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM",
        "qwen3_moe": "Qwen3MoeForCausalLM"}.get(h.get("model_type"), "")
    rope = (h.get("rope_parameters") or {}).get("rope_theta", h.get("rope_theta", 10000.0))
    m = {"vocab_size": h["vocab_size"], "dim": h["hidden_size"], "n_layers": h["num_hidden_layers"],
         "n_heads": h["num_attention_heads"],
         "n_kv_heads": h.get("num_key_value_heads") or h["num_attention_heads"],
         "ffn_hidden": h["intermediate_size"], "max_seq_len": h["max_position_embeddings"],
         "rope_theta": rope, "norm_eps": h["rms_norm_eps"],
         "tie_embeddings": bool(h.get("tie_word_embeddings", False)),
         "head_dim": h.get("head_dim") or 0, "qk_norm": arch != "LlamaForCausalLM"}
    if arch == "Qwen3MoeForCausalLM":
        m.update(n_experts=h.get("num_experts", h.get("num_local_experts")),
                 n_experts_per_tok=h["num_experts_per_tok"],
                 moe_ffn_hidden=h["moe_intermediate_size"],
                 decoder_sparse_step=h.get("decoder_sparse_step", 1),
                 mlp_only_layers=sorted(h.get("mlp_only_layers") or []),
                 norm_topk_prob=bool(h.get("norm_topk_prob", False)),
                 router_aux_loss_coef=h.get("router_aux_loss_coef", 0.001))
    elif arch not in ("LlamaForCausalLM", "Qwen3ForCausalLM"):
        raise ConfigError(f"{p}: architectures '{arch}' is not supported (LlamaForCausalLM, "
                          "Qwen3ForCausalLM, Qwen3MoeForCausalLM)")
    for k, v in m.items():
        cfg["model." + k] = to_type("model." + k, v, p)


def check_config(c):
    """What the HF model and the batch need (build/train checks more)."""
    def need(ok, why):
        if not ok:
            raise ConfigError(why)
    need(c["model.n_heads"] % c["model.n_kv_heads"] == 0,
         f"model.n_kv_heads {c['model.n_kv_heads']} does not divide model.n_heads {c['model.n_heads']}")
    need(c["model.head_dim"] or c["model.dim"] % c["model.n_heads"] == 0,
         "model.n_heads does not divide model.dim (set model.head_dim)")
    need(c["data.seq_len"] <= c["model.max_seq_len"],
         f"data.seq_len {c['data.seq_len']} > model.max_seq_len {c['model.max_seq_len']}")
    if c["model.n_experts"] > 0:
        need(1 <= c["model.n_experts_per_tok"] <= c["model.n_experts"],
             "model.n_experts_per_tok must be in [1, model.n_experts]")
        need(c["model.moe_ffn_hidden"] > 0, "model.moe_ffn_hidden must be > 0 with experts")
        need(c["model.qk_norm"], "a MoE model without model.qk_norm has no Hugging Face class "
             "(Qwen3MoeForCausalLM always norms q and k)")


# ---------------------------------------------------------------- the model's FLOPs

def head_dim(c):
    return c["model.head_dim"] or c["model.dim"] // c["model.n_heads"]


def moe_layers(c):
    """Block l is MoE when there are experts, l is not in mlp_only_layers and
    (l + 1) % decoder_sparse_step == 0 (models/llama.c: llama_layer_is_moe)."""
    if c["model.n_experts"] <= 0:
        return []
    only = set(c["model.mlp_only_layers"])
    return [l for l in range(c["model.n_layers"])
            if l not in only and (l + 1) % c["model.decoder_sparse_step"] == 0]


def flops_per_token(c, seq_len):
    """models/llama.c: llama_flops_per_token, term for term: 6 N + 12 L T d_attn, N the
    parameters in a matmul (the block matrices, the router and the k experts a token
    visits, the LM head once; not the embedding lookup nor the norms)."""
    C, hd, L = float(c["model.dim"]), float(head_dim(c)), float(c["model.n_layers"])
    QD, KVD = hd * c["model.n_heads"], hd * c["model.n_kv_heads"]
    F, n_moe = float(c["model.ffn_hidden"]), float(len(moe_layers(c)))
    attn = 2.0 * QD * C + 2.0 * KVD * C
    moe = c["model.n_experts"] * C + c["model.n_experts_per_tok"] * 3.0 * c["model.moe_ffn_hidden"] * C
    n_matmul = L * attn + (L - n_moe) * 3.0 * F * C + n_moe * moe + float(c["model.vocab_size"]) * C
    return 6.0 * n_matmul + 12.0 * L * float(seq_len) * QD


# ---------------------------------------------------------------- peaks

# Dense tensor-core (bf16) and CUDA-core (fp32, TF32 off: PyTorch's default for
# matmuls) peaks in TFLOP/s from NVIDIA's data sheets, by a piece of
# torch.cuda.get_device_name(); the first match wins.
PEAKS = [("GH200", "GH200", 989.5, 66.9), ("H200", "H200", 989.5, 66.9),
         ("H100 PCIe", "H100 PCIe", 756.5, 51.0), ("H100 NVL", "H100 NVL", 835.5, 60.0),
         ("H100", "H100 SXM", 989.5, 66.9), ("A100", "A100", 312.0, 19.5)]


def spec_peak(device_name, dtype):
    for piece, label, bf16, fp32 in PEAKS:
        if piece in device_name:
            return (bf16 if dtype == "bf16" else fp32) * 1e12, f"{label} {dtype} dense spec"
    return None, None


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} cpus)"
    except OSError:
        pass
    return platform.processor() or "cpu"


# ---------------------------------------------------------------- HF model

def hf_model(c, device, recompute):
    """(model, class name) on `device`, fp32 parameters, SDPA attention."""
    import torch
    import transformers
    major = int(transformers.__version__.split(".")[0])
    E = c["model.n_experts"]
    cls_name = ("Qwen3MoeForCausalLM" if E > 0 else
                "Qwen3ForCausalLM" if c["model.qk_norm"] else "LlamaForCausalLM")
    try:
        cls = getattr(transformers, cls_name)
        cfg_cls = getattr(transformers, cls_name.replace("ForCausalLM", "Config"))
    except AttributeError:
        raise ConfigError(f"transformers {transformers.__version__} has no {cls_name}")
    kw = dict(vocab_size=c["model.vocab_size"], hidden_size=c["model.dim"],
              intermediate_size=c["model.ffn_hidden"], num_hidden_layers=c["model.n_layers"],
              num_attention_heads=c["model.n_heads"], num_key_value_heads=c["model.n_kv_heads"],
              head_dim=head_dim(c), max_position_embeddings=c["model.max_seq_len"],
              rms_norm_eps=c["model.norm_eps"], tie_word_embeddings=c["model.tie_embeddings"],
              hidden_act="silu", attention_bias=False, attention_dropout=0.0, use_cache=False,
              pad_token_id=None, attn_implementation="sdpa")
    if major >= 5:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": c["model.rope_theta"]}
    else:
        kw["rope_theta"] = c["model.rope_theta"]
    if cls_name == "LlamaForCausalLM":
        kw["mlp_bias"] = False
    else:
        kw["use_sliding_window"] = False
    if E > 0:
        kw.update(num_experts=E, num_experts_per_tok=c["model.n_experts_per_tok"],
                  moe_intermediate_size=c["model.moe_ffn_hidden"],
                  decoder_sparse_step=c["model.decoder_sparse_step"],
                  mlp_only_layers=list(c["model.mlp_only_layers"]),
                  norm_topk_prob=c["model.norm_topk_prob"],
                  router_aux_loss_coef=c["model.router_aux_loss_coef"], output_router_logits=True)
    hc = cfg_cls(**kw)
    with torch.device(device):
        model = cls(hc)
    model.train()
    if recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, cls_name


def num_params(model):
    """Distinct parameters (a tied head counts once, as in llama_num_params)."""
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- training

def lr_at(c, step, total):
    """runtime/optim.c: adamw_lr (warmup clamped to the steps, as build/train does)."""
    lr, lo = c["optimizer.lr"], c["optimizer.min_lr"]
    warm = min(c["schedule.warmup_steps"], total)
    if step < warm:
        return lr * (step + 1) / warm
    if step >= total:
        return lo
    return lo + (lr - lo) * 0.5 * (1.0 + math.cos(math.pi * (step - warm) / (total - warm)))


def batches(c, device, use_data):
    """An endless supply of (inputs, targets) of shape (B, T): random tokens drawn on the
    device, or windows of T+1 tokens of data.path in file order."""
    import torch
    B, T, V = c["data.batch_size"], c["data.seq_len"], c["model.vocab_size"]
    if not use_data:
        g = torch.Generator(device=device)
        g.manual_seed(c["data.seed"])
        while True:
            tok = torch.randint(0, V, (B, T + 1), device=device, generator=g)
            yield tok[:, :-1], tok[:, 1:]
    path, tk = c["data.path"], c["data.tokenizer"]
    meta = path + ".json"
    if os.path.exists(meta):
        with open(meta) as f:
            tk = json.load(f).get("dtype", tk)
    width = {"byte": 1, "u16": 2, "i32": 4}.get(tk)
    if width is None:
        raise ConfigError(f"--data: data.tokenizer '{tk}' is not read here (byte text, u16 or i32 "
                          "token files); leave --data out for random tokens")
    import numpy as np
    dt = {1: np.uint8, 2: "<u2", 4: "<i4"}[width]
    ids = torch.from_numpy(np.fromfile(path, dtype=dt).astype(np.int64))
    n = (ids.numel() - 1) // T
    if n < B:
        raise ConfigError(f"--data: {path} holds {n} windows of {T + 1} tokens, fewer than a batch")
    if int(ids.max()) >= V:
        raise ConfigError(f"--data: {path} has token {int(ids.max())} >= model.vocab_size {V}")
    w = 0
    while True:
        rows = [ids[((w + i) % n) * T:((w + i) % n) * T + T + 1] for i in range(B)]
        w += B
        tok = torch.stack(rows).to(device, non_blocking=True)
        yield tok[:, :-1], tok[:, 1:]


def train_row(c, args, device, dtype, compile_it, peak, peak_label, log):
    """Build, (compile,) warm up and time one model; returns the JSON row."""
    import torch
    import torch.nn.functional as F
    torch.manual_seed(c["train.seed"])
    cuda = device.startswith("cuda")
    model, cls_name = hf_model(c, device, c["train.recompute"] == "full")
    n_params = num_params(model)
    moe = c["model.n_experts"] > 0
    coef = c["model.router_aux_loss_coef"]
    decay = [p for p in model.parameters() if p.dim() >= 2]
    keep = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["optimizer.weight_decay"]},
                             {"params": keep, "weight_decay": 0.0}],
                            lr=c["optimizer.lr"], betas=(c["optimizer.beta1"], c["optimizer.beta2"]),
                            eps=c["optimizer.eps"], fused=True if cuda else None)
    params = decay + keep
    clip = c["optimizer.grad_clip"] if c["optimizer.grad_clip"] > 0 else float("inf")
    fwd = model
    row = {"config": args.config, "arch": cls_name, "compile": compile_it}
    experts = getattr(model.config, "_experts_implementation", None) if moe else None
    if not compile_it:
        log(f"# model: {cls_name}, {n_params} parameters ({n_params / 1e6:.3f} M), attention "
            f"{model.config._attn_implementation}" + (f", experts {experts}" if moe else "") +
            (", gradient checkpointing (train.recompute: full)" if c["train.recompute"] == "full"
             else ""))
    B, T, A = c["data.batch_size"], c["data.seq_len"], c["data.grad_accum"]
    V = c["model.vocab_size"]
    tokens_step = B * T * A
    fpt = flops_per_token(c, T)
    data = batches(c, device, args.data)
    total = c["schedule.total_steps"] or c["train.steps"]
    autocast = torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16,
                              enabled=dtype == "bf16")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    name = "torch.compile" if compile_it else "torch eager"
    times, losses, first_s = [], [], None
    n_all = args.warmup + args.steps

    def failed(step, e):  # torch.compile raises many kinds, at the call or in a step
        why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
        log(f"# {name}: failed {'in step ' + str(step) if step else 'to start'} ({why[:300]}): "
            "no compile row")
        row.update(status="failed", error=why[:1000])
        return row
    if compile_it:
        try:
            fwd = torch.compile(model)
        except Exception as e:  # noqa: BLE001
            return failed(0, e)
    for s in range(n_all):
        lr = lr_at(c, s, total)
        for g in opt.param_groups:
            g["lr"] = lr
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss_sum = 0.0
        try:
            for _ in range(A):
                x, y = next(data)
                with autocast:
                    out = fwd(input_ids=x, use_cache=False)
                    loss = F.cross_entropy(out.logits.float().reshape(-1, V), y.reshape(-1))
                    if moe and getattr(out, "aux_loss", None) is not None:
                        loss = loss + coef * out.aux_loss
                (loss / A).backward()
                loss_sum = loss_sum + loss.detach()
            norm = torch.nn.utils.clip_grad_norm_(params, clip, foreach=True if cuda else None)
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss_v, norm_v = float(loss_sum) / A, float(norm)  # the step's one host read
        except Exception as e:  # noqa: BLE001
            if not compile_it:
                raise
            return failed(s + 1, e)
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if s == 0:
            first_s = dt
        warm = s < args.warmup
        if not warm:
            times.append(dt)
            losses.append(loss_v)
        tps, fl = tokens_step / dt, fpt * tokens_step / dt
        mfu = f" | MFU {100 * fl / peak:5.1f}%" if peak else ""
        log(f"{name} step {s + 1:3d}/{n_all}{' (warmup)' if warm else ''} | loss {loss_v:.4f} | "
            f"norm {norm_v:.4f} | lr {lr:.3e} | {dt * 1e3:8.1f} ms | {tps:9.0f} tok/s | "
            f"{fl / 1e12:7.3f} TFLOP/s{mfu}")
    med = statistics.median(times)
    tps, fl = tokens_step / med, fpt * tokens_step / med
    row.update(status="ok", params=n_params, flops_per_token=fpt, batch_size=B, seq_len=T,
               grad_accum=A, tokens_per_step=tokens_step, steps=args.steps, warmup=args.warmup,
               step_ms_median=med * 1e3, step_ms=[t * 1e3 for t in times],
               first_step_s=first_s, tokens_per_s=tps, flops_per_s=fl,
               mfu=fl / peak if peak else None, loss_first=losses[0], loss_last=losses[-1],
               attn_implementation=model.config._attn_implementation,
               optimizer="AdamW(fused)" if cuda else "AdamW(foreach)",
               recompute=c["train.recompute"] == "full")
    if moe:
        row["experts_implementation"] = experts
    if cuda:
        row["max_memory_bytes"] = torch.cuda.max_memory_allocated()
        row["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
    mfu = (f"MFU {100 * fl / peak:.1f}% of {peak / 1e12:.1f} TFLOP/s ({peak_label})" if peak
           else "MFU not printed (no peak: --peak-tflops X)")
    log(f"# {name}: median of {len(times)} steps {med * 1e3:.1f} ms | {tps:.0f} tok/s | "
        f"{fl / 1e12:.3f} TFLOP/s | {mfu}" +
        (f" | first step {first_s:.1f} s (compilation)" if compile_it else ""))
    del fwd, model, opt, params, decay, keep
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", help="one of our YAML configs (configs/*.yaml)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config key, as build/train's --set (model.*, data.*, "
                         "optimizer.*, schedule.*, train.*; others are ignored)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before them (default 3)")
    ap.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda if available")
    ap.add_argument("--dtype", choices=["bf16", "fp32"],
                    help="bf16: autocast, fp32 master weights (default on cuda); fp32 (default on cpu)")
    ap.add_argument("--compile", action="store_true", help="a second row under torch.compile")
    ap.add_argument("--peak-tflops", type=float, help="the peak for MFU (default: by device name)")
    ap.add_argument("--data", action="store_true",
                    help="train on data.path (byte text, u16 / i32 tokens), not random tokens")
    ap.add_argument("--json", metavar="FILE", help="append one JSON line per row")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")

    def log(s):
        print(s, flush=True)
    try:
        c, ignored = load_config(args.config, args.set)
    except ConfigError as e:
        print(f"torch_baseline: {e}", file=sys.stderr)
        return 2
    try:
        import torch
        import transformers
        from transformers.utils import logging as hf_logging
    except ImportError as e:
        print(f"torch_baseline: {e} (needs torch and transformers)", file=sys.stderr)
        return 2
    hf_logging.set_verbosity_error()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("torch_baseline: --device cuda: torch sees no CUDA device", file=sys.stderr)
        return 2
    dtype = args.dtype or ("bf16" if device == "cuda" else "fp32")
    dev_name = torch.cuda.get_device_name() if device == "cuda" else cpu_name()
    if args.peak_tflops:
        peak, peak_label = args.peak_tflops * 1e12, "--peak-tflops"
    elif device == "cuda":
        peak, peak_label = spec_peak(dev_name, dtype)
    else:
        peak, peak_label = None, None
    log(f"# torch_baseline: {args.config} on {device} ({dev_name}), {dtype}"
        f"{' autocast' if dtype == 'bf16' else ''}; torch {torch.__version__}, transformers "
        f"{transformers.__version__}")
    if ignored:
        log("# ignored (the baseline reads model, data, train, optimizer and schedule keys "
            f"only): {', '.join(ignored)}")
    if c["model.compute"] != dtype:
        log(f"# note: the config's model.compute is {c['model.compute']}, this run {dtype}: "
            f"compare with build/train --set model.compute={dtype}")
    if c["model.capacity_factor"] > 0:
        log("# note: model.capacity_factor is ignored: Hugging Face's MoE is dropless")
    if peak is None:
        log(f"# no peak for '{dev_name}' ({dtype}): MFU is not printed (--peak-tflops X gives one)")
    B, T, A = c["data.batch_size"], c["data.seq_len"], c["data.grad_accum"]
    log(f"# batch {B} x {T} x {A} accum = {B * T * A} tokens/step, model FLOPs per token "
        f"{flops_per_token(c, T):.6g} (models/llama.c: llama_flops_per_token), "
        f"{'tokens of ' + c['data.path'] if args.data else 'random tokens'}")
    rows = []
    for comp in ([False, True] if args.compile else [False]):
        try:
            row = train_row(c, args, device, dtype, comp, peak, peak_label, log)
        except ConfigError as e:
            print(f"torch_baseline: {e}", file=sys.stderr)
            return 2
        row.update(device=device, device_name=dev_name, dtype=dtype,
                   peak_flops=peak, peak_source=peak_label, torch=torch.__version__,
                   transformers=transformers.__version__, data="file" if args.data else "random")
        rows.append(row)
    if args.json:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
