/*
 * fuzz_hf_config.c — libFuzzer target for the Hugging Face config.json
 * reader (runtime/hf.c: hf_read_config, hf_apply_config), which reads the
 * config.json of any model directory given as model.init_from. Issue 52,
 * item 2.
 *
 * Each input is written as config.json of a scratch directory. Then:
 *   - refused: the message is printable text (fuzz_util.h) and names the
 *     file (DIR/config.json);
 *   - accepted: the model is one llama_config_check accepts, every shape
 *     inside the ranges hf.c reads them with (the config keys' ranges of
 *     runtime/config.c), and hf_apply_config sets exactly that model on a
 *     default TrainConfig: what the reader accepts, the config's own checks
 *     (its key table) accept too, value for value.
 * Any violation aborts. Built with clang -fsanitize=fuzzer by
 * scripts/fuzz.sh, and with gcc plus replay_main.c by the Makefile.
 * fuzz-sources: runtime/hf.c runtime/config.c runtime/printable.c
 * fuzz-libs: libzrt
 */
#define FUZZ_NAME "fuzz_hf_config"
#include "fuzz_util.h"

#include "config.h"
#include "hf.h"

static void in_range(const char* what, long long v, long long lo, long long hi) {
    if (v < lo || v > hi) fail("an accepted value outside its range", what);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char path[512];
    write_scratch("config.json", data, size, path, sizeof path);
    HfArch arch;
    LlamaConfig m;
    char err[4096] = "";
    if (hf_read_config(scratch_dir(), &arch, &m, err, sizeof err)) {
        check_refusal(err, "config.json");
        return 0;
    }
    if (arch != HF_LLAMA && arch != HF_QWEN3 && arch != HF_QWEN3_MOE) fail("an unknown architecture", NULL);
    if (llama_config_check(&m, err, sizeof err)) fail("an accepted model llama_config_check refuses", err);
    in_range("vocab_size", m.vocab_size, 2, 1 << 24);
    in_range("hidden_size", m.dim, 1, 65536);
    in_range("intermediate_size", m.ffn_hidden, 1, 1 << 20);
    in_range("num_hidden_layers", m.n_layers, 1, 1024);
    in_range("num_attention_heads", m.n_heads, 1, 1024);
    in_range("num_key_value_heads", m.n_kv_heads, 1, m.n_heads);
    in_range("max_position_embeddings", m.max_seq_len, 1, 1 << 20);
    in_range("head_dim", llama_head_dim(&m), 2, 65536);
    if (llama_head_dim(&m) % 2) fail("an odd head_dim accepted", NULL);
    if (!(m.rope_theta >= 1.0f && m.rope_theta <= 1e12f)) fail("rope_theta out of [1, 1e12]", NULL);
    if (!(m.norm_eps >= 1e-12f && m.norm_eps <= 1.0f)) fail("rms_norm_eps out of [1e-12, 1]", NULL);
    if (m.qk_norm != (arch != HF_LLAMA)) fail("qk_norm does not follow the architecture", NULL);
    if ((m.n_experts > 0) != (arch == HF_QWEN3_MOE)) fail("experts in a dense architecture", NULL);
    if (m.n_experts > 0) {
        in_range("num_experts", m.n_experts, 1, 65536);
        in_range("num_experts_per_tok", m.n_experts_per_tok, 1, m.n_experts);
        in_range("moe_intermediate_size", m.moe_ffn_hidden, 1, 1 << 20);
        in_range("decoder_sparse_step", m.decoder_sparse_step, 1, 1024);
        if (!(m.router_aux_loss_coef >= 0.0f && m.router_aux_loss_coef <= 1000.0f))
            fail("router_aux_loss_coef out of [0, 1000]", NULL);
    }
    /* The same model through the config's key table. */
    static TrainConfig cfg;
    config_defaults(&cfg);
    if (hf_apply_config(&cfg, scratch_dir(), err, sizeof err)) {
        check_refusal(err, "config.json");
        fail("hf_apply_config refuses what hf_read_config accepts", err);
    }
    const LlamaConfig* c = &cfg.model;
    if (c->vocab_size != m.vocab_size || c->dim != m.dim || c->n_layers != m.n_layers ||
        c->n_heads != m.n_heads || c->n_kv_heads != m.n_kv_heads || c->ffn_hidden != m.ffn_hidden ||
        c->max_seq_len != m.max_seq_len || c->head_dim != m.head_dim ||
        c->rope_theta != m.rope_theta || c->norm_eps != m.norm_eps ||
        c->tie_embeddings != m.tie_embeddings || c->qk_norm != m.qk_norm ||
        c->n_experts != m.n_experts)
        fail("hf_apply_config set another model than hf_read_config read", NULL);
    if (m.n_experts > 0 &&
        (c->n_experts_per_tok != m.n_experts_per_tok || c->moe_ffn_hidden != m.moe_ffn_hidden ||
         c->decoder_sparse_step != m.decoder_sparse_step || c->norm_topk_prob != m.norm_topk_prob ||
         c->router_aux_loss_coef != m.router_aux_loss_coef ||
         memcmp(c->mlp_only_layers, m.mlp_only_layers, sizeof m.mlp_only_layers)))
        fail("hf_apply_config set other experts than hf_read_config read", NULL);
    return 0;
}
