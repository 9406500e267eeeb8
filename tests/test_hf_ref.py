#!/usr/bin/env python3
# test: asan=no timeout=300
"""test_hf_ref.py — the Qwen3-MoE decoder (models/llama.c, models/moe.c) checked at the
model level against Hugging Face transformers' Qwen3MoeForCausalLM (torch, CPU, fp32,
eager attention): the router's choices and the load-balancing loss, which the
end-to-end reference (test_hf_train.py) cannot see from outside the trainer.

Which test checks what:
  test_hf_train.py  the primary reference: HF's own tiny Llama, Qwen3 and Qwen3-MoE
                    models imported by build/train (config.json and weights), logits,
                    loss, every gradient, 10 steps against torch.optim.AdamW, export
                    -> from_pretrained, import -> export bitwise
  this file         the MoE routing from our side of the hooks: top-k choices per
                    token and block, aux loss alone and in the loss, top-1 without
                    renormalisation, decoder_sparse_step 2, tied embeddings in a MoE
                    model; weights from our init (test_model --dump-train)
  test_model_ref.py the dense model against its own written definition (docs/MODEL.md,
                    JAX, no conversion)

The C side ($BUILD/tests/test_model --dump-train DIR [flags], see test_model.c)
writes the config, every unit's weights, a batch, its logits, cross-entropy,
load-balancing loss, each MoE block's router choices and every parameter gradient,
then the losses of 10 AdamW steps. This script builds the HF model from the same
config, loads the same weights under HF's names (hfmap.py: the names and the RoPE
row permutation, written from docs/MODEL.md), and compares:

  logits                 allclose rtol 1e-4, atol 1e-5
  cross-entropy          relative 1e-5 (atol 1e-6): the loss without the aux term
  aux loss (HF's aux_loss, load_balancing_loss_func)   relative 1e-5
  CE + router_aux_loss_coef * aux: the loss with it     relative 1e-5
  router top-k choices   identical, every token, every MoE block (as sets: HF's
                         topk order among equal weights is not ours to match)
  each gradient of CE + router_aux_loss_coef * aux      ||g_c - g_hf|| / ||g_hf|| < 1e-4
  10-step cross-entropies (hand-written AdamW, as test_model_ref.py)  relative 1e-4

Configs: top-2 with norm_topk_prob, a dense block among MoE blocks
(mlp_only_layers) and tied embeddings; top-1 without renormalisation,
decoder_sparse_step 2, untied; head_dim apart from dim / n_heads, QK-norm.
"""
import sys

import numpy as np
from pycheck import check
from refdump import check_grad, check_trajectory, dumped, load, lr_at, main

import torch  # noqa: E402
from hfmap import from_hf, hf_name_map, objective, to_hf  # noqa: E402
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM  # noqa: E402

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
}


def hf_model(cfg):
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
