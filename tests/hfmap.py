"""hfmap.py — the Python side of the Hugging Face mapping, written from docs/MODEL.md
("Hugging Face checkpoints") independently of runtime/hf.c, shared by the HF
reference tests (test_hf_ref.py: the model through test_model's dump;
test_hf_train.py: import, training and export through build/train and
build/export-hf).

    from hfmap import our_units, hf_name_map, to_hf, from_hf, objective, dense_layers

Our layout (unit by unit, tensors in order, row-major fp32):
  "outer"             tok_emb (V, C) [| final_norm (C), if tied]
  "layers.l"          attn_norm | wq | wk | wv | [q_norm | k_norm] | wo | mlp_norm |
                      dense: w_gate | w_up | w_down   MoE: router (E, C)
  "layers.l.experts"  per expert e: w_gate (Fe, C) | w_up (Fe, C) | w_down (C, Fe)
  "head"              final_norm (C) | lm_head (V, C)   (untied only, the last unit)
HF's names and the RoPE row permutation: hf_name_map and to_hf below.
"""
import numpy as np
import torch


def dense_layers(cfg):
    """Blocks with a dense MLP (HF's rule: MoE when (l+1) % step == 0 and l not in mlp_only)."""
    L, E = cfg["n_layers"], cfg["n_experts"]
    step = max(cfg.get("decoder_sparse_step", 1), 1)
    only = cfg.get("mlp_only", [])
    return [l for l in range(L) if E == 0 or l in only or (l + 1) % step]


def our_units(cfg):
    """[(unit name, [(tensor name, rows, cols)])] in unit order: what the trainer's
    --dump-tensors files hold per unit (concatenated, then padded)."""
    V, C, L, H, KV = cfg["vocab_size"], cfg["dim"], cfg["n_layers"], cfg["n_heads"], cfg["n_kv_heads"]
    hd, F, E, Fe = cfg["head_dim"], cfg["ffn_hidden"], cfg["n_experts"], cfg["moe_ffn_hidden"]
    dense = dense_layers(cfg)
    tied = cfg["tie_embeddings"]
    units = [("outer", [("tok_emb", V, C)] + ([("final_norm", C, 1)] if tied else []))]
    for l in range(L):
        p = f"layers.{l}."
        t = [(p + "attn_norm", C, 1), (p + "wq", H * hd, C), (p + "wk", KV * hd, C),
             (p + "wv", KV * hd, C)]
        if cfg["qk_norm"]:
            t += [(p + "q_norm", hd, 1), (p + "k_norm", hd, 1)]
        t += [(p + "wo", C, H * hd), (p + "mlp_norm", C, 1)]
        t += ([(p + "w_gate", F, C), (p + "w_up", F, C), (p + "w_down", C, F)] if l in dense
              else [(p + "router", E, C)])
        units.append((f"layers.{l}", t))
    for l in range(L):
        if l not in dense:
            units.append((f"layers.{l}.experts",
                          [t for e in range(E) for t in
                           ((f"layers.{l}.experts.{e}.w_gate", Fe, C),
                            (f"layers.{l}.experts.{e}.w_up", Fe, C),
                            (f"layers.{l}.experts.{e}.w_down", C, Fe))]))
    if not tied:
        units.append(("head", [("final_norm", C, 1), ("lm_head", V, C)]))
    return units


def split_units(cfg, flat_by_unit):
    """{unit name: flat array} -> {tensor name: array in our layout}."""
    out = {}
    for unit, tensors in our_units(cfg):
        flat, off = flat_by_unit[unit], 0
        for name, r, c in tensors:
            out[name] = flat[off:off + r * c].reshape((r,) if c == 1 else (r, c))
            off += r * c
    return out


def rope_perm(hd):
    """HF row i of a head comes from our row perm[i]."""
    return np.concatenate([np.arange(0, hd, 2), np.arange(1, hd, 2)])


def heads_perm(rows, hd):
    p = rope_perm(hd)
    return np.concatenate([h * hd + p for h in range(rows // hd)])


def hf_name_map(cfg, dense, stacked=True):
    """our tensor name -> (HF parameter name, how: None | 'rope' | ('gate'|'up'|'down', e)).
    stacked: the experts as transformers 5.x holds them in memory
    (mlp.experts.gate_up_proj (E, 2Fe, C), mlp.experts.down_proj (E, C, Fe)); else the
    per-expert names save_pretrained writes (mlp.experts.e.{gate,up,down}_proj.weight)."""
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
                if stacked:
                    m[q + "w_gate"] = (p + "mlp.experts.gate_up_proj", ("gate", e))
                    m[q + "w_up"] = (p + "mlp.experts.gate_up_proj", ("up", e))
                    m[q + "w_down"] = (p + "mlp.experts.down_proj", ("down", e))
                else:
                    for ours, hf in (("w_gate", "gate_proj"), ("w_up", "up_proj"),
                                     ("w_down", "down_proj")):
                        m[q + ours] = (p + f"mlp.experts.{e}.{hf}.weight", None)
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
    """An HF tensor (a weight or its gradient) of our tensor, in our layout."""
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
    """CE over targets >= 0 (+ coef * HF's load-balancing loss for MoE): (loss, ce, aux, logits)."""
    out = model(input_ids=tokens, output_router_logits=moe) if moe else model(input_ids=tokens)
    logits = out.logits
    valid = targets >= 0
    ce = torch.nn.functional.cross_entropy(logits[valid], targets[valid])
    aux = out.aux_loss if moe else torch.zeros(())
    return ce + coef * aux, ce, aux, logits
