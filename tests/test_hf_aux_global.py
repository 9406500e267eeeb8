#!/usr/bin/env python3
# test: asan=no timeout=300
"""test_hf_aux_global.py — the MoE load-balancing loss over the global batch
(moe.aux_loss_scope) against Hugging Face's on the whole batch.

One tiny random Qwen3MoeForCausalLM (test_hf_train.py's "moe" model with the aux
coefficient raised to 0.5, so the aux term's share of the router gradient shows),
imported by build/train (model.init_from) and run for one step at 1, 2 and 4 ranks.
The reference is transformers' load_balancing_loss_func on the concatenation, in rank
order, of every rank's step-1 micro-batch (--dump-tensors), and the gradient of
CE + coef * aux of that whole batch: what HF computes when given the global batch.

  global/<n>r_ep<e>/aux_loss   the logged aux_loss equals HF's whole-batch aux,
                               relative 1e-5 (1, 2, 4 ranks at EP 1; 2 and 4 at EP 2)
  global/<n>r_ep<e>/grad/*     every gradient of the dense units (the routers among
                               them; at EP 1 the experts too) against HF's,
                               ||g - g_hf|| / ||g_hf|| < 1e-4
  one_rank_bitwise             at 1 rank global and rank give the same log line (loss,
                               aux, grad norm) and the same gradient bits
  rank_differs                 scope rank at 2 ranks: the logged aux and the routers'
                               gradient differ from HF's whole-batch ones (the check
                               above can fail)
"""
import json
import os
import sys
import tempfile

import numpy as np
from pycheck import check, failed
from refdump import check_grad

import torch  # noqa: E402
from hfmap import dense_layers, from_hf, hf_name_map, objective, our_units  # noqa: E402
from test_hf_train import (MODELS, TRAIN, corpus, hf_fp32, make_model, our_cfg,  # noqa: E402
                           read_st, run, yaml)
from safetensors import safe_open  # noqa: E402

COEF = 0.5


def ours(d, ranks, ep, scope, conf, src, tag):
    """One step: (log line 1, tokens (ranks*B, T), targets, grads by our tensor name)."""
    out, log = os.path.join(d, tag), os.path.join(d, tag + ".jsonl")
    if not run([TRAIN, conf, "--init-from", src, "--log-json", log, "--dump-tensors", "1", out,
                "--set", "train.steps=1", "--set", f"parallelism.ep={ep}",
                "--set", f"moe.aux_loss_scope={scope}",
                "--set", f"model.router_aux_loss_coef={COEF}"], f"hf_aux/{tag}/train", ranks=ranks):
        return None
    line = [json.loads(x) for x in open(log) if '"aux_loss"' in x][0]
    toks, tgts = [], []
    for r in range(ranks):
        b = read_st(os.path.join(out, f"step1_rank{r}_batch.safetensors"))
        toks.append(b["tokens"].long())
        tgts.append(b["targets"].long())
    # each rank's dump holds its own full gradient before the reduce (fsdp.c):
    # the step's is their mean
    gs = [read_st(os.path.join(out, f"step1_rank{r}_grads.safetensors")) for r in range(ranks)]
    g = {k: sum(x[k].double() for x in gs) / ranks for k in gs[0]}
    return line, torch.cat(toks), torch.cat(tgts), g


def split(cfg, flat, experts):
    """{our tensor name: array} of the units in flat (the expert units only if asked)."""
    out = {}
    for unit, tensors in our_units(cfg):
        if (".experts" in unit and not experts) or unit not in flat:
            continue
        a, off = flat[unit].numpy(), 0
        for name, r, c in tensors:
            out[name] = a[off:off + r * c].reshape((r,) if c == 1 else (r, c))
            off += r * c
    return out


def reference(src, tokens, targets):
    """HF's aux on the whole batch and the gradients of CE + COEF * aux: {HF name: grad}."""
    model = hf_fp32(src)
    loss, _, aux, _ = objective(model, tokens, targets, COEF, True)
    loss.backward()
    return float(aux.detach()), {k: p.grad.numpy() for k, p in model.named_parameters()}


def main():
    if not os.access(TRAIN, os.X_OK):
        check(False, "hf_aux/binaries", f"{TRAIN} not built")
        return 1
    cls, hc, dtype, _, _ = MODELS["moe"]
    cfg = our_cfg(hc)
    hd, Fe = cfg["head_dim"], cfg["moe_ffn_hidden"]
    names = hf_name_map(cfg, dense_layers(cfg), stacked=True)
    with tempfile.TemporaryDirectory(prefix="zrt_hfaux_") as d:
        src = os.path.join(d, "hf")
        make_model(cls, hc, dtype, None, src)
        tokfile = os.path.join(d, "tokens.bin")
        corpus(cfg["vocab_size"], 3000, seed=5).astype("<u2").tofile(tokfile)
        conf = yaml(d, tokfile)
        runs = {}
        for ranks, ep, scope in ((1, 1, "global"), (1, 1, "rank"), (2, 1, "global"),
                                 (2, 1, "rank"), (4, 1, "global"), (2, 2, "global"),
                                 (4, 2, "global")):
            tag = f"{scope}/{ranks}r_ep{ep}"
            runs[tag] = ours(d, ranks, ep, scope, conf, src, tag.replace("/", "_"))
            if runs[tag] is None:
                continue
            line, tokens, targets, g = runs[tag]
            aux_hf, grads_hf = reference(src, tokens, targets)
            ac = line["aux_loss"]
            relerr = abs(ac - aux_hf) / abs(aux_hf)
            gc = split(cfg, g, ep == 1)
            worst = (0.0, "")
            rmax = 0.0
            for name, a in gc.items():
                hf, how = names[name]
                want = from_hf(grads_hf[hf], how, hd, Fe)
                if scope == "global":
                    worst = max(worst, (check_grad("hf_aux", tag, name, a, want), name))
                elif name.endswith("router"):
                    w = np.asarray(want, np.float64)
                    rmax = max(rmax, np.linalg.norm(a - w) / np.linalg.norm(w))
            if scope == "global":
                check(relerr <= 1e-5, f"hf_aux/{tag}/aux_loss", f"ours {ac:.9g} HF {aux_hf:.9g}")
                print(f"  {tag}: aux ours {ac:.9g} HF (whole batch of {tokens.shape[0]} "
                      f"sequences) {aux_hf:.9g}, relative {relerr:.2g}; worst gradient "
                      f"relative error {worst[0]:.3g} ({worst[1]}), {len(gc)} tensors")
            elif ranks > 1:
                check(relerr > 1e-4 and rmax > 1e-3, f"hf_aux/{tag}/rank_differs",
                      f"aux relative {relerr:.3g}, router gradients relative {rmax:.3g}")
                print(f"  {tag}: aux ours {ac:.9g} HF whole batch {aux_hf:.9g}, relative "
                      f"{relerr:.2g}; router gradients worst relative {rmax:.3g}")
        a, b = runs.get("global/1r_ep1"), runs.get("rank/1r_ep1")
        if a and b:
            keys = ("loss", "aux_loss", "grad_norm")
            same = all(a[0].get(k) == b[0].get(k) for k in keys) and sorted(a[3]) == sorted(b[3]) \
                and all(torch.equal(a[3][k], b[3][k]) for k in a[3])
            check(same, "hf_aux/one_rank_bitwise",
                  f"global {[a[0].get(k) for k in keys]} rank {[b[0].get(k) for k in keys]}")
    return 1 if failed() else 0


if __name__ == "__main__":
    sys.exit(main())
