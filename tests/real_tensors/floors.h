/* tests/test_real_tensors.c: per-tensor ratio floors (fast, dense), measured on
 * the sample minus 0.01, rounded down (2026-12-02: fast at the lattice sample,
 * dense with the tail classes of format version 4). */
{"grads.bf16.llama-tiny.step10.tok_emb", 1.48, 1.44},
{"grads.bf16.llama-tiny.step300.tok_emb", 1.06, 1.12},
{"grads.bf16.llama-tiny.step300.layers.1.wo", 1.46, 1.46},
{"grads.bf16.llama-tiny.step150.layers.2.w_down", 1.43, 1.44},
{"grads.bf16.llama-100m.step2.layers.5.wq", 1.41, 1.43},
{"grads.bf16.llama-100m.step2.layers.9.w_gate", 1.34, 1.38},
{"grads.bf16.qwen3-moe-tiny.step150.layers.1.experts.0.w_up", 1.38, 1.41},
{"grads.fp32.llama-tiny.step300.layers.1.w_gate", 1.17, 1.17},
{"grads.fp32.llama-tiny.step150.layers.3.wo", 1.18, 1.18},
{"params.bf16.llama-tiny.step300.layers.1.wq", 1.49, 1.49},
{"params.fp32.llama-tiny.step300.layers.2.w_up", 1.18, 1.18},
