#!/usr/bin/env python3
# test: asan=no timeout=300
"""test_hf_ref.py — the Llama, Qwen3 and Qwen3-MoE decoders checked against Hugging
Face transformers' own LlamaForCausalLM and Qwen3MoeForCausalLM (torch, CPU, fp32,
eager attention).

The C side ($BUILD/tests/test_model --dump-train DIR [flags], see test_model.c)
writes the config, every unit's weights, a batch, its logits, cross-entropy,
load-balancing loss, each MoE block's router choices and every parameter gradient,
then the losses of 10 AdamW steps. This script builds the HF model from the same
config, loads the same weights under HF's names (below), and compares:

  logits                 allclose rtol 1e-4, atol 1e-5
  cross-entropy          relative 1e-5 (atol 1e-6): the loss without the aux term
  aux loss (HF's aux_loss, load_balancing_loss_func)   relative 1e-5
  CE + router_aux_loss_coef * aux: the loss with it     relative 1e-5
  router top-k choices   identical, every token, every MoE block (as sets: HF's
                         topk order among equal weights is not ours to match)
  each gradient of CE + router_aux_loss_coef * aux      ||g_c - g_hf|| / ||g_hf|| < 1e-4
  10-step cross-entropies (hand-written AdamW, as test_model_ref.py)  relative 1e-4

Weight mapping (ours -> HF):
  tok_emb -> model.embed_tokens.weight; final_norm -> model.norm.weight; lm_head
  layers.l.{attn_norm,mlp_norm} -> input_layernorm, post_attention_layernorm
  layers.l.{wq,wk,wv,wo} -> self_attn.{q,k,v,o}_proj, q_norm/k_norm -> self_attn.{q,k}_norm
  layers.l.router -> mlp.gate.weight; experts e: w_gate, w_up stacked (gate rows first) ->
  mlp.experts.gate_up_proj[e], w_down -> mlp.experts.down_proj[e]; dense blocks:
  w_gate/w_up/w_down -> mlp.{gate,up,down}_proj
RoPE: ours rotates interleaved pairs (2i, 2i+1) of a head, HF rotate_half pairs
(i, i + hd/2); the q/k rows of every head (and the q_norm/k_norm weights) are
permuted ours[2i] -> hf[i], ours[2i+1] -> hf[i + hd/2] on the way in and back for
the gradients (HF's own Llama conversion does the same permutation).

Configs: top-2 with norm_topk_prob and a dense block among MoE blocks
(mlp_only_layers), top-1 without it (decoder_sparse_step 2), head_dim apart from
dim / n_heads, QK-norm always; a dense Qwen3 (n_experts 0) through the same model
class (every block in mlp_only_layers); and a Llama (no QK-norm) through
LlamaForCausalLM, tied and untied.
"""
import sys

import numpy as np
from pycheck import check
from refdump import check_grad, check_trajectory, dumped, load, lr_at, main

import torch  # noqa: E402
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen3MoeConfig,  # noqa: E402
                          Qwen3MoeForCausalLM)

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)


COMMON = ["--V", "61", "--C", "32", "--H", "4", "--KV", "2", "--hd", "12", "--qkn", "1",
          "--F", "40", "--T", "13", "--B", "3", "--theta", "1000000"]
CONFIGS = {
    # name: flags for test_model --dump-train
    "moe_top2_norm": COMMON + ["--L", "3", "--E", "6", "--K", "2", "--Fe", "20", "--sparse", "1",
                               "--normtopk", "1", "--mlponly", "2", "--aux", "0.01",
                               "--tied", "1"],
    "moe_top1_sparse2": COMMON + ["--L", "2", "--E", "4", "--K", "1", "--Fe", "24",
                                  "--sparse", "2", "--normtopk", "0", "--aux", "0.001",
                                  "--tied", "0"],
    "qwen3_dense": COMMON + ["--L", "2", "--tied", "0"],
    "llama_tied": ["--V", "61", "--C", "32", "--L", "2", "--H", "4", "--KV", "2", "--F", "48",
                   "--T", "13", "--B", "3", "--tied", "1", "--theta", "10000"],
    "llama_untied": ["--V", "53", "--C", "48", "--L", "3", "--H", "6", "--KV", "3", "--F", "40",
                     "--T", "11", "--B", "2", "--tied", "0", "--theta", "500000"],
}


def rope_perm(hd):
    """HF row i of a head comes from our row perm[i]."""
    return np.concatenate([np.arange(0, hd, 2), np.arange(1, hd, 2)])


def heads_perm(rows, hd):
    p = rope_perm(hd)
    return np.concatenate([h * hd + p for h in range(rows // hd)])


def hf_model(cfg):
    if not cfg["qk_norm"]:  # a Llama: HF's own class for it
        hc = LlamaConfig(
            vocab_size=cfg["vocab_size"], hidden_size=cfg["dim"],
            intermediate_size=cfg["ffn_hidden"], num_hidden_layers=cfg["n_layers"],
            num_attention_heads=cfg["n_heads"], num_key_value_heads=cfg["n_kv_heads"],
            head_dim=cfg["head_dim"], max_position_embeddings=cfg["max_seq_len"],
            rms_norm_eps=float(cfg["norm_eps"]), tie_word_embeddings=bool(cfg["tie_embeddings"]),
            rope_parameters={"rope_type": "default", "rope_theta": float(cfg["rope_theta"])},
            attention_bias=False, mlp_bias=False, attention_dropout=0.0)
        hc._attn_implementation = "eager"
        return LlamaForCausalLM(hc).float(), list(range(cfg["n_layers"]))
    L, E = cfg["n_layers"], cfg["n_experts"]
    mlp_only = [l for l in range(L) if E == 0 or (cfg["mlp_only_layers"] >> l) & 1]
    step = max(cfg["decoder_sparse_step"], 1)
    dense = [l for l in range(L) if l in mlp_only or (l + 1) % step]
    hc = Qwen3MoeConfig(
        vocab_size=cfg["vocab_size"], hidden_size=cfg["dim"], intermediate_size=cfg["ffn_hidden"],
        num_hidden_layers=L, num_attention_heads=cfg["n_heads"],
        num_key_value_heads=cfg["n_kv_heads"], head_dim=cfg["head_dim"],
        max_position_embeddings=cfg["max_seq_len"], rms_norm_eps=float(cfg["norm_eps"]),
        tie_word_embeddings=bool(cfg["tie_embeddings"]),
        rope_parameters={"rope_type": "default", "rope_theta": float(cfg["rope_theta"])},
        num_experts=max(E, 1), num_experts_per_tok=max(cfg["n_experts_per_tok"], 1),
        moe_intermediate_size=max(cfg["moe_ffn_hidden"], 1),
        decoder_sparse_step=max(cfg["decoder_sparse_step"], 1), mlp_only_layers=mlp_only,
        norm_topk_prob=bool(cfg["norm_topk_prob"]),
        router_aux_loss_coef=float(cfg["router_aux_loss_coef"]), output_router_logits=E > 0,
        attention_dropout=0.0)
    hc._attn_implementation = "eager"
    return Qwen3MoeForCausalLM(hc).float(), dense


def hf_name_map(cfg, dense):
    """our tensor name -> (HF parameter name, how: None | 'rope' | ('gate'|'up', e) | ('down', e))"""
    m = {"tok_emb": ("model.embed_tokens.weight", None), "final_norm": ("model.norm.weight", None)}
    if not cfg["tie_embeddings"]:
        m["lm_head"] = ("lm_head.weight", None)
    for l in range(cfg["n_layers"]):
        p = f"model.layers.{l}."
        m[f"layers.{l}.attn_norm"] = (p + "input_layernorm.weight", None)
        m[f"layers.{l}.mlp_norm"] = (p + "post_attention_layernorm.weight", None)
        for ours, hf, how in (("wq", "q_proj", "rope"), ("wk", "k_proj", "rope"),
                              ("wv", "v_proj", None), ("wo", "o_proj", None),
                              ("q_norm", "q_norm", "rope"), ("k_norm", "k_norm", "rope")):
            if cfg["qk_norm"] or ours not in ("q_norm", "k_norm"):
                m[f"layers.{l}.{ours}"] = (p + f"self_attn.{hf}.weight", how)
        if l in dense:
            for ours, hf in (("w_gate", "gate_proj"), ("w_up", "up_proj"), ("w_down", "down_proj")):
                m[f"layers.{l}.{ours}"] = (p + f"mlp.{hf}.weight", None)
        else:
            m[f"layers.{l}.router"] = (p + "mlp.gate.weight", None)
            for e in range(cfg["n_experts"]):
                q = f"layers.{l}.experts.{e}."
                m[q + "w_gate"] = (p + "mlp.experts.gate_up_proj", ("gate", e))
                m[q + "w_up"] = (p + "mlp.experts.gate_up_proj", ("up", e))
                m[q + "w_down"] = (p + "mlp.experts.down_proj", ("down", e))
    return m


def to_hf(arr, how, hd, Fe):
    """Our tensor as the HF slice it fills: (values, index into the HF tensor)."""
    if how == "rope":
        return arr[heads_perm(arr.shape[0], hd)], slice(None)
    if how is None:
        return arr, slice(None)
    kind, e = how
    if kind == "gate":
        return arr, (e, slice(0, Fe))
    if kind == "up":
        return arr, (e, slice(Fe, 2 * Fe))
    return arr, (e,)


def from_hf(t, how, hd, Fe):
    """The HF gradient of our tensor, in our layout."""
    if how == "rope":
        inv = np.argsort(heads_perm(t.shape[0], hd))
        return t[inv]
    if how is None:
        return t
    kind, e = how
    if kind == "gate":
        return t[e, :Fe]
    if kind == "up":
        return t[e, Fe:2 * Fe]
    return t[e]


def objective(model, tokens, targets, coef, moe):
    out = model(input_ids=tokens, output_router_logits=moe)
    logits = out.logits
    valid = targets >= 0
    ce = torch.nn.functional.cross_entropy(logits[valid], targets[valid])
    aux = out.aux_loss if moe else torch.zeros(())
    return ce + coef * aux, ce, aux, logits


def train(model, tokens, targets, coef, moe, tr):
    """The dump's 10 steps: global-norm clip, then AdamW with decoupled weight
    decay on every tensor, warmup + cosine, as runtime/optim.c (and test_model_ref.py)."""
    params = [p for p in model.parameters()]
    mom = [torch.zeros_like(p) for p in params]
    vel = [torch.zeros_like(p) for p in params]
    b1, b2, eps, wd = tr["beta1"], tr["beta2"], tr["eps"], tr["weight_decay"]
    losses = []
    for s in range(tr["steps"]):
        model.zero_grad()
        loss, ce, _, _ = objective(model, tokens, targets, coef, moe)
        loss.backward()
        losses.append(float(ce.detach()))
        with torch.no_grad():
            norm = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params)))
            clip = min(1.0, tr["clip"] / (norm + 1e-6))
            lr, t = np.float32(lr_at(s, tr)), s + 1
            bc1, bc2 = np.float32(1 - b1 ** t), np.float32(1 - b2 ** t)
            for p, m, v in zip(params, mom, vel):
                g = p.grad * np.float32(clip)
                m.mul_(b1).add_((1 - b1) * g)
                v.mul_(b2).add_((1 - b2) * g * g)
                upd = (m / float(bc1)) / (torch.sqrt(v / float(bc2)) + eps)
                p.sub_(float(lr) * (upd + wd * p))
    return losses


def run_config(tag, flags):
    with dumped("hf", tag, flags) as (d, idx):
        if d is None:
            return
        cfg, B, T = idx["config"], idx["B"], idx["T"]
        V, hd, Fe, moe = cfg["vocab_size"], cfg["head_dim"], cfg["moe_ffn_hidden"], cfg["n_experts"] > 0
        model, dense = hf_model(cfg)
        names = hf_name_map(cfg, dense)
        hf_params = dict(model.named_parameters())
        ours, grads_c, filled = {}, {}, set()
        for unit in idx["units"]:
            pw = load(d, unit["params"], np.float32)
            gw = load(d, unit["grads"], np.float32)
            for t in unit["tensors"]:
                n, o = t["rows"] * t["cols"], t["offset"]
                shape = (t["rows"],) if t["cols"] == 1 else (t["rows"], t["cols"])
                ours[t["name"]] = pw[o:o + n].reshape(shape)
                grads_c[t["name"]] = gw[o:o + n].reshape(shape)
        with torch.no_grad():
            for name, arr in ours.items():
                hf, how = names[name]
                vals, at = to_hf(arr, how, hd, Fe)
                hf_params[hf][at] = torch.from_numpy(vals.copy())
                filled.add(hf)
        unmapped = set(ours) - set(names)
        missing = set(hf_params) - filled - ({"lm_head.weight"} if cfg["tie_embeddings"] else set())
        check(not unmapped and not missing, f"hf/{tag}/every_weight_mapped",
              f"ours unmapped {sorted(unmapped)[:5]}, HF left random {sorted(missing)[:5]}")
        tokens = torch.from_numpy(load(d, "tokens.bin", np.int32, (B, T)).astype(np.int64))
        targets = torch.from_numpy(load(d, "targets.bin", np.int32, (B, T)).astype(np.int64))
        logits_c = load(d, "logits.bin", np.float32, (B, T, V))
        losses_c = load(d, "train_losses.bin", np.float32)
        coef = cfg["router_aux_loss_coef"]

        loss, ce, aux, logits = objective(model, tokens, targets, coef, moe)
        loss.backward()
        logits = logits.detach().numpy()
        err = np.max(np.abs(logits - logits_c))
        check(np.allclose(logits_c, logits, rtol=1e-4, atol=1e-5), f"hf/{tag}/logits",
              f"max abs diff {err:.3g}")
        lc, lh = idx["loss"], float(ce.detach())
        check(abs(lc - lh) <= 1e-6 + 1e-5 * abs(lh), f"hf/{tag}/cross_entropy",
              f"C {lc:.7f} HF {lh:.7f}")
        if moe:
            ac, ah = idx["aux_loss"], float(aux.detach())
            check(abs(ac - ah) <= 1e-6 + 1e-5 * abs(ah), f"hf/{tag}/aux_loss",
                  f"C {ac:.7f} HF {ah:.7f}")
            tc, th = lc + coef * ac, float(loss.detach())
            check(abs(tc - th) <= 1e-6 + 1e-5 * abs(th), f"hf/{tag}/loss_with_aux",
                  f"C {tc:.7f} HF {th:.7f}")
            # the router's choices: HF's router logits -> softmax -> top-k
            with torch.no_grad():
                out = model(input_ids=tokens, output_router_logits=True)
            k = cfg["n_experts_per_tok"]
            same, blocks = 0, idx["moe_blocks"]
            for i, rl in enumerate(out.router_logits):
                hf_k = torch.topk(torch.softmax(rl.float(), -1), k, dim=-1).indices.numpy()
                ours_k = load(d, f"routing_{i}.bin", np.int32, (B * T, k))
                same += sum(set(a) == set(b) for a, b in zip(hf_k.tolist(), ours_k.tolist()))
            check(len(out.router_logits) == blocks and same == blocks * B * T,
                  f"hf/{tag}/router_topk_choices",
                  f"{same} of {blocks * B * T} tokens chose the same experts ({blocks} blocks, "
                  f"HF {len(out.router_logits)})")
        else:
            ac = ah = 0.0
        worst = (0.0, "")
        for name, gc in grads_c.items():
            hf, how = names[name]
            gh = from_hf(hf_params[hf].grad.numpy(), how, hd, Fe)
            worst = max(worst, (check_grad("hf", tag, name, gc, gh), name))
        print(f"  {tag}: logits max abs diff {err:.3g}, CE C {lc:.7f} HF {lh:.7f}, aux C {ac:.7f} "
              f"HF {ah:.7f}, worst gradient relative error {worst[0]:.3g} ({worst[1]})")
        losses_h = train(model, tokens, targets, coef, moe, idx["train"])
        check_trajectory("hf", tag, "HF", losses_c, losses_h)


if __name__ == "__main__":
    sys.exit(main("hf", CONFIGS, run_config))
