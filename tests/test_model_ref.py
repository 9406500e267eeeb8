#!/usr/bin/env python3
# test: asan=no timeout=300
"""test_model_ref.py — the dense Llama model checked against its own written
definition: an independent JAX implementation written here from docs/MODEL.md,
in our layout and our conventions, with no conversion in between.

Which test checks what (the Hugging Face references are the primary ones):
  test_hf_train.py   HF's Llama, Qwen3 and Qwen3-MoE imported, trained and exported
                     through build/train: logits, loss, gradients, 10 AdamW steps
  test_hf_ref.py     the MoE routing against Qwen3MoeForCausalLM
  this file          what those cannot see, since they reach HF through the RoPE row
                     permutation: that the model is the one docs/MODEL.md writes
                     down — RoPE on interleaved pairs (x[2i], x[2i+1]) at angle
                     t * theta^(-2i/hd) from a table computed in double and rounded
                     once, the RMSNorm, GQA and loss as stated — one config (tied
                     embeddings, GQA ratio 2, an odd sequence length); the untied
                     and larger configs it once had are HF's now

The C side ($BUILD/tests/test_model --dump-train DIR [flags]) writes the config,
every unit's initial weights, a batch, its logits, loss and every parameter
gradient, then the losses of 10 AdamW steps (warmup + cosine, weight decay,
global-norm clipping at 1.0), as raw little-endian float32/int32 files plus
index.json. This script loads the same weights, recomputes everything with
jax.numpy + jax.grad and a hand-written AdamW (no optax), and compares:

  logits           allclose rtol 1e-4, atol 1e-5
  loss             relative 1e-4 (and atol 1e-5)
  each gradient    ||g_c - g_jax|| / ||g_jax|| < 1e-4
  10-step losses   each within 1e-4 relative
"""
import os
import sys

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from pycheck import check  # noqa: E402
from refdump import check_grad, check_trajectory, dumped, load, lr_at, main  # noqa: E402

jax.config.update("jax_enable_x64", False)

CONFIGS = {
    # name: flags for test_model --dump-train
    "tied": ["--V", "61", "--C", "32", "--L", "2", "--H", "4", "--KV", "2", "--F", "48",
             "--T", "13", "--B", "3", "--tied", "1", "--theta", "10000"],
}



# ----------------------------------------------------------------- the model

def rmsnorm(x, w, eps):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, cos, sin):
    # x (B, T, NH, hd); rotate interleaved pairs (x[2i], x[2i+1])
    B, T, NH, hd = x.shape
    xp = x.reshape(B, T, NH, hd // 2, 2)
    x0, x1 = xp[..., 0], xp[..., 1]
    c = cos[None, :T, None, :]
    s = sin[None, :T, None, :]
    return jnp.stack([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1).reshape(B, T, NH, hd)


def forward(params, tokens, targets, cfg, cos, sin):
    C, H, KV = cfg["dim"], cfg["n_heads"], cfg["n_kv_heads"]
    hd, eps = C // H, cfg["norm_eps"]
    B, T = tokens.shape
    x = params["tok_emb"][tokens]  # (B, T, C)
    mask = jnp.tril(jnp.ones((T, T), dtype=bool))
    for l in range(cfg["n_layers"]):
        p = lambda n: params[f"layers.{l}.{n}"]  # noqa: E731
        h = rmsnorm(x, p("attn_norm"), eps)
        q = rope((h @ p("wq").T).reshape(B, T, H, hd), cos, sin)
        k = rope((h @ p("wk").T).reshape(B, T, KV, hd), cos, sin)
        v = (h @ p("wv").T).reshape(B, T, KV, hd)
        k = jnp.repeat(k, H // KV, axis=2)  # head h reads kv head h // (H/KV)
        v = jnp.repeat(v, H // KV, axis=2)
        s = jnp.einsum("bthd,bshd->bhts", q, k) / np.float32(np.sqrt(hd))
        s = jnp.where(mask[None, None], s, -jnp.inf)
        a = jax.nn.softmax(s, axis=-1)
        o = jnp.einsum("bhts,bshd->bthd", a, v).reshape(B, T, H * hd)
        x = x + o @ p("wo").T
        h = rmsnorm(x, p("mlp_norm"), eps)
        g = h @ p("w_gate").T
        u = h @ p("w_up").T
        x = x + (jax.nn.silu(g) * u) @ p("w_down").T
    x = rmsnorm(x, params["final_norm"], eps)
    head = params["tok_emb"] if cfg["tie_embeddings"] else params["lm_head"]
    logits = x @ head.T  # (B, T, V)
    valid = targets >= 0
    lse = jax.nn.logsumexp(logits, axis=-1)
    tl = jnp.take_along_axis(logits, jnp.maximum(targets, 0)[..., None], axis=-1)[..., 0]
    loss = jnp.sum(jnp.where(valid, lse - tl, 0.0)) / jnp.sum(valid)
    return loss, logits


# ------------------------------------------------------------------ AdamW

def train(params, vg, tr):
    m = {k: jnp.zeros_like(v) for k, v in params.items()}
    v2 = {k: jnp.zeros_like(v) for k, v in params.items()}
    b1, b2, eps, wd = tr["beta1"], tr["beta2"], tr["eps"], tr["weight_decay"]
    losses = []
    for s in range(tr["steps"]):
        (loss, _), g = vg(params)
        losses.append(float(loss))
        norm = float(jnp.sqrt(sum(jnp.sum(x.astype(jnp.float32) ** 2) for x in g.values())))
        clip = min(1.0, tr["clip"] / (norm + 1e-6))
        lr, t = np.float32(lr_at(s, tr)), s + 1
        bc1, bc2 = np.float32(1 - b1 ** t), np.float32(1 - b2 ** t)
        for k in params:
            gk = g[k] * np.float32(clip)
            m[k] = b1 * m[k] + (1 - b1) * gk
            v2[k] = b2 * v2[k] + (1 - b2) * gk * gk
            upd = (m[k] / bc1) / (jnp.sqrt(v2[k] / bc2) + eps)
            params[k] = params[k] - lr * (upd + wd * params[k])
    return losses


# ------------------------------------------------------------------ driver

def run_config(tag, flags):
    with dumped("ref", tag, flags) as (d, idx):
        if d is None:
            return
        cfg, B, T = idx["config"], idx["B"], idx["T"]
        V = cfg["vocab_size"]
        params, grads_c = {}, {}
        for unit in idx["units"]:
            pw = load(d, unit["params"], np.float32)
            gw = load(d, unit["grads"], np.float32)
            for t in unit["tensors"]:
                n, o = t["rows"] * t["cols"], t["offset"]
                shape = (t["rows"],) if t["cols"] == 1 else (t["rows"], t["cols"])
                params[t["name"]] = jnp.asarray(pw[o:o + n].reshape(shape))
                grads_c[t["name"]] = gw[o:o + n].reshape(shape)
        tokens = jnp.asarray(load(d, "tokens.bin", np.int32, (B, T)))
        targets = jnp.asarray(load(d, "targets.bin", np.int32, (B, T)))
        logits_c = load(d, "logits.bin", np.float32, (B, T, V))
        losses_c = load(d, "train_losses.bin", np.float32)

        hd = cfg["dim"] // cfg["n_heads"]
        freq = cfg["rope_theta"] ** (-2.0 * np.arange(hd // 2) / hd)
        ang = np.arange(T)[:, None] * freq[None, :]  # float64, then rounded once
        cos, sin = jnp.asarray(np.cos(ang), jnp.float32), jnp.asarray(np.sin(ang), jnp.float32)

        # one compiled function serves the comparison and the 10 training steps
        vg = jax.jit(jax.value_and_grad(lambda p: forward(p, tokens, targets, cfg, cos, sin),
                                        has_aux=True))
        (loss, logits), grads = vg(params)
        logits = np.asarray(logits)
        err = np.max(np.abs(logits - logits_c))
        check(np.allclose(logits_c, logits, rtol=1e-4, atol=1e-5), f"ref/{tag}/logits",
              f"max abs diff {err:.3g}")
        lj, lc = float(loss), idx["loss"]
        check(abs(lc - lj) <= 1e-5 + 1e-4 * abs(lj), f"ref/{tag}/loss", f"C {lc:.7f} jax {lj:.7f}")
        worst = (0.0, "")
        for name in grads_c:
            worst = max(worst, (check_grad("ref", tag, name, grads_c[name], grads[name]), name))
        print(f"  {tag}: logits max abs diff {err:.3g}, loss C {lc:.7f} jax {lj:.7f}, "
              f"worst gradient relative error {worst[0]:.3g} ({worst[1]})")
        losses_j = train(dict(params), vg, idx["train"])
        check_trajectory("ref", tag, "jax", losses_c, losses_j)


if __name__ == "__main__":
    sys.exit(main("ref", CONFIGS, run_config))
