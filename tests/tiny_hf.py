"""tiny_hf.py — the tests' tiny Llama as Hugging Face's save_pretrained lays
it out: its config.json fields and its fp32 weights by HF name, drawn with
numpy (no torch), for the tests that build damaged Hugging Face directories
(tests/test_hf_errors.sh, tests/test_untrusted_names.sh)."""
import numpy as np

V, C, L, H, KV, F = 61, 32, 2, 4, 2, 48
HD = C // H
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V,
          "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
          "num_key_value_heads": KV, "max_position_embeddings": 64, "rms_norm_eps": 1e-05,
          "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu"}


def llama_weights(seed=0):
    """The weights (name -> float32 array, 0.05 N(0, 1)) and the generator
    that drew them, for the caller's further draws."""
    rng = np.random.default_rng(seed)
    t = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)}
    for l in range(L):
        p = f"model.layers.{l}."
        t.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                  p + "self_attn.q_proj.weight": (H * HD, C), p + "self_attn.k_proj.weight": (KV * HD, C),
                  p + "self_attn.v_proj.weight": (KV * HD, C), p + "self_attn.o_proj.weight": (C, H * HD),
                  p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                  p + "mlp.down_proj.weight": (C, F)})
    return {k: (0.05 * rng.standard_normal(s)).astype(np.float32) for k, s in t.items()}, rng
