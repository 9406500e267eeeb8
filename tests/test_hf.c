// test: timeout=120
/*
 * test_hf.c — runtime/hf.c on its own (and under ASan in the suite): the
 * config.json mapping and what it refuses, the tensor names and the RoPE row
 * permutation, export -> import round trips in fp32, bf16 and fp16, one file
 * and shards, per-expert and stacked experts, and bad weights refused by
 * name before anything is read; plus the token metadata of
 * scripts/prepare_data.py (runtime/data.c). The checks against transformers
 * itself are tests/test_hf_train.py's; bad input through build/train at 2
 * ranks is tests/test_hf_errors.sh's.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "data.h"
#include "hf.h"
#include "kernels.h"
#include "safetensors.h"
#include "testutil.h"

static char root[64];

static const char* path_of(const char* a, const char* b) {
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s%s%s", root, a, b ? "/" : "", b ? b : "");
    return buf[k];
}

static void write_text(const char* path, const char* text) {
    FILE* f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(2);
    }
    fputs(text, f);
    fclose(f);
}

static void mkdirs(const char* d) { mkdir(d, 0755); }

static void rm_rf(const char* d) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    if (system(cmd)) fprintf(stderr, "cannot remove %s\n", d);
}

/* A directory holding config.json with `body` inside the braces. */
static const char* config_dir(const char* name, const char* body) {
    const char* d = path_of(name, NULL);
    mkdirs(d);
    char text[8192];
    snprintf(text, sizeof text, "{%s}\n", body);
    write_text(path_of(name, "config.json"), text);
    return d;
}

#define LLAMA_BASE                                                                               \
    "\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": 40, " \
    "\"hidden_size\": 16, \"intermediate_size\": 24, \"num_hidden_layers\": 2, "                 \
    "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"max_position_embeddings\": 32, "  \
    "\"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": false"

/* config.json -> LlamaConfig, and what is refused. */
static void test_config(void) {
    char err[2048];
    HfArch a;
    LlamaConfig m;
    /* Llama-3 as published (transformers 4.x spelling) */
    const char* d = config_dir("llama3", LLAMA_BASE ", \"rope_scaling\": null, \"rope_theta\": "
                               "500000.0, \"torch_dtype\": \"bfloat16\", \"bos_token_id\": 128000, "
                               "\"eos_token_id\": [128001, 128009], \"hidden_act\": \"silu\", "
                               "\"attention_bias\": false, \"mlp_bias\": false, "
                               "\"pretraining_tp\": 1, \"initializer_range\": 0.02, "
                               "\"transformers_version\": \"4.40.0.dev0\", \"use_cache\": true");
    int rc = hf_read_config(d, &a, &m, err, sizeof err);
    CHECK(!rc && a == HF_LLAMA && m.vocab_size == 40 && m.dim == 16 && m.n_layers == 2 &&
              m.n_heads == 4 && m.n_kv_heads == 2 && m.ffn_hidden == 24 && m.max_seq_len == 32 &&
              m.rope_theta == 500000.0f && m.norm_eps == 1e-5f && !m.tie_embeddings &&
              m.head_dim == 4 && !m.qk_norm && m.n_experts == 0,
          "hf/config/llama3_4x", "rc %d %s (theta %g hd %d)", rc, err, (double)m.rope_theta,
          m.head_dim);
    /* Qwen3-MoE in transformers 5.x spelling; Qwen3's and Qwen3-MoE's head_dim defaults */
    d = config_dir("moe5", "\"architectures\": [\"Qwen3MoeForCausalLM\"], \"vocab_size\": 40, "
                   "\"hidden_size\": 16, \"intermediate_size\": 24, \"num_hidden_layers\": 3, "
                   "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_local_experts\": 6, "
                   "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 8, "
                   "\"mlp_only_layers\": [1], \"norm_topk_prob\": true, \"router_aux_loss_coef\": "
                   "0.01, \"rope_parameters\": {\"rope_theta\": 1000000.0, \"rope_type\": "
                   "\"default\"}, \"sliding_window\": null, \"use_sliding_window\": false, "
                   "\"output_router_logits\": false, \"dtype\": \"float32\"");
    rc = hf_read_config(d, &a, &m, err, sizeof err);
    CHECK(!rc && a == HF_QWEN3_MOE && m.n_experts == 6 && m.n_experts_per_tok == 2 &&
              m.moe_ffn_hidden == 8 && m.norm_topk_prob && m.qk_norm && m.head_dim == 4 &&
              m.rope_theta == 1e6f && m.norm_eps == 1e-6f && m.router_aux_loss_coef == 0.01f &&
              m.mlp_only_layers[0] == 2 && m.decoder_sparse_step == 1 && m.n_kv_heads == 2,
          "hf/config/qwen3_moe_5x", "rc %d %s", rc, err);
    d = config_dir("qwen3d", "\"architectures\": [\"Qwen3ForCausalLM\"], \"vocab_size\": 40, "
                   "\"hidden_size\": 16, \"intermediate_size\": 24, \"num_hidden_layers\": 2, "
                   "\"num_attention_heads\": 2, \"num_key_value_heads\": null, \"layer_types\": "
                   "[\"full_attention\", \"full_attention\"], \"max_window_layers\": 28");
    rc = hf_read_config(d, &a, &m, err, sizeof err);
    CHECK(!rc && a == HF_QWEN3 && m.head_dim == 128 && m.n_kv_heads == 2 && m.qk_norm &&
              m.max_seq_len == 32768 && m.rope_theta == 10000.0f,
          "hf/config/qwen3_defaults", "rc %d %s hd %d kv %d", rc, err, m.head_dim, m.n_kv_heads);

    /* refused, naming the file and the field */
    static const struct {
        const char* name;
        const char* body;
        const char* want;
    } bad[] = {
        {"rope_llama3", LLAMA_BASE ", \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"llama3\"}",
         "field 'rope_scaling': rope_type 'llama3' is not implemented"},
        {"rope_yarn", LLAMA_BASE ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4}",
         "field 'rope_parameters': rope_type 'yarn'"},
        {"rope_linear_old", LLAMA_BASE ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2}",
         "field 'rope_scaling': rope_type 'linear'"},
        {"rope_extra_key", LLAMA_BASE ", \"rope_parameters\": {\"rope_type\": \"default\", "
                           "\"factor\": 2.0}", "field 'rope_parameters': 'factor' is not implemented"},
        {"attention_bias", LLAMA_BASE ", \"attention_bias\": true", "field 'attention_bias': true"},
        {"mlp_bias", LLAMA_BASE ", \"mlp_bias\": true", "field 'mlp_bias': true"},
        {"sliding", LLAMA_BASE ", \"use_sliding_window\": true", "field 'use_sliding_window'"},
        {"layer_types", "\"architectures\": [\"Qwen3ForCausalLM\"], \"num_hidden_layers\": 2, "
                        "\"layer_types\": [\"full_attention\", \"sliding_attention\"]",
         "field 'layer_types': entry 1 is not \"full_attention\""},
        {"act", LLAMA_BASE ", \"hidden_act\": \"gelu\"", "field 'hidden_act': only \"silu\""},
        {"dropout", LLAMA_BASE ", \"attention_dropout\": 0.1", "field 'attention_dropout'"},
        {"partial_rope", LLAMA_BASE ", \"partial_rotary_factor\": 0.5", "field 'partial_rotary_factor'"},
        {"unknown", LLAMA_BASE ", \"frobnicate\": 3", "field 'frobnicate': not a field this import knows"},
        {"quantized", LLAMA_BASE ", \"quantization_config\": {\"bits\": 4}", "field 'quantization_config'"},
        {"mistral", "\"architectures\": [\"MistralForCausalLM\"]",
         "field 'architectures': 'MistralForCausalLM' is not supported"},
        {"model_type", "\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"qwen3\"",
         "field 'model_type': 'qwen3' does not go with architectures 'LlamaForCausalLM'"},
        {"no_arch", "\"hidden_size\": 16", "names no architecture"},
        {"float_int", LLAMA_BASE ", \"head_dim\": 2.5", "field 'head_dim': expected an integer"},
        {"moe_in_dense", LLAMA_BASE ", \"num_experts\": 8", "field 'num_experts': a mixture-of-experts field"},
        {"theta_twice", LLAMA_BASE ", \"rope_theta\": 10000.0, \"rope_parameters\": {\"rope_theta\": "
                        "500000.0, \"rope_type\": \"default\"}", "field 'rope_theta': 10000 contradicts"},
        {"bad_shape", LLAMA_BASE ", \"head_dim\": 5", "field 'head_dim': 5 is odd"},
        /* beyond model.rope_theta's and model.norm_eps's ranges, which
         * hf_apply_config then refused (fuzz_hf_config, issue 52) */
        {"theta_range", LLAMA_BASE ", \"rope_theta\": 1e30", "field 'rope_theta': 1e+30 is out of range"},
        {"theta_inner_range", LLAMA_BASE ", \"rope_parameters\": {\"rope_theta\": 1e13}",
         "field 'rope_parameters': 1e+13 is out of range"},
        {"eps_range", "\"architectures\": [\"LlamaForCausalLM\"], \"rms_norm_eps\": 1e-30",
         "field 'rms_norm_eps': 1e-30 is out of range"},
        {"heads_kv", "\"architectures\": [\"LlamaForCausalLM\"], \"num_attention_heads\": 4, "
                     "\"num_key_value_heads\": 3, \"hidden_size\": 16",
         "not one we can build: llama config: n_kv_heads 3 does not divide n_heads 4"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d = config_dir(bad[i].name, bad[i].body);
        rc = hf_read_config(d, &a, &m, err, sizeof err);
        char name[96];
        snprintf(name, sizeof name, "hf/config/refused/%s", bad[i].name);
        CHECK(rc && strstr(err, bad[i].want) && strstr(err, "config.json"), name, "rc %d: %s", rc,
              err);
    }
    d = config_dir("type_only", "\"model_type\": \"qwen3_moe\", \"hidden_size\": 16, "
                   "\"num_attention_heads\": 4, \"num_experts\": 4, \"num_experts_per_tok\": 1");
    rc = hf_read_config(d, &a, &m, err, sizeof err);
    CHECK(!rc && a == HF_QWEN3_MOE && m.n_experts == 4 && m.n_kv_heads == 4 && m.head_dim == 4,
          "hf/config/model_type_alone", "rc %d %s", rc, err);
    d = path_of("syntax", NULL);
    mkdirs(d);
    write_text(path_of("syntax", "config.json"), "{\"vocab_size\": 40,\n \"hidden_size\": }\n");
    rc = hf_read_config(d, &a, &m, err, sizeof err);
    CHECK(rc && strstr(err, "config.json:2:") && strstr(err, "not valid JSON"),
          "hf/config/refused/json_syntax_line", "%s", err);
    d = path_of("nothing", NULL);
    mkdirs(d);
    rc = hf_read_config(d, &a, &m, err, sizeof err);
    CHECK(rc && strstr(err, "nothing/config.json: cannot read"), "hf/config/refused/missing",
          "%s", err);
    rc = hf_read_config(path_of("no_such_dir", NULL), &a, &m, err, sizeof err);
    CHECK(rc && strstr(err, "not a directory"), "hf/config/refused/not_a_directory", "%s", err);
}

/* config.json into a run's config: agreeing YAML values pass, contradicting
 * ones name both places, the aux coefficient is the YAML's. */
static void test_apply(void) {
    const char* d = config_dir("apply", LLAMA_BASE ", \"rope_theta\": 500000.0");
    char err[2048], w[600];
    static TrainConfig c;
    const char* y = path_of("apply.yaml", NULL);
    write_text(y, "model:\n  dim: 16\n  n_layers: 2\n  head_dim: 0\ndata:\n  seq_len: 8\n  "
                  "tokenizer: i32\n");
    config_defaults(&c);
    int rc = config_load(&c, y, err, sizeof err) || hf_apply_config(&c, d, err, sizeof err);
    CHECK(!rc && c.model.vocab_size == 40 && c.model.rope_theta == 500000.0f &&
              c.model.head_dim == 4 && !config_validate(&c, err, sizeof err),
          "hf/apply/agreeing_yaml", "%s", err);
    config_where(&c, "model.vocab_size", w, sizeof w);
    CHECK(strstr(w, "apply/config.json: 'vocab_size'") != NULL, "hf/apply/origin_named", "%s", w);
    write_text(y, "model:\n  vocab_size: 40\n  dim: 32\n");
    config_defaults(&c);
    rc = config_load(&c, y, err, sizeof err) || hf_apply_config(&c, d, err, sizeof err);
    CHECK(rc && strstr(err, "apply.yaml:3: key 'model.dim': 32 contradicts") &&
              strstr(err, "apply/config.json: 'hidden_size', which says 16"),
          "hf/apply/contradiction_names_both", "%s", err);
    config_defaults(&c);
    rc = config_set(&c, "model.n_kv_heads=4", err, sizeof err) ||
         hf_apply_config(&c, d, err, sizeof err);
    CHECK(rc && strstr(err, "--set model.n_kv_heads=4: key 'model.n_kv_heads': 4 contradicts") &&
              strstr(err, "'num_key_value_heads', which says 2"),
          "hf/apply/set_contradiction", "%s", err);
    const char* dm = config_dir("apply_moe", "\"architectures\": [\"Qwen3MoeForCausalLM\"], "
                                "\"vocab_size\": 40, \"hidden_size\": 16, \"num_hidden_layers\": 2, "
                                "\"num_attention_heads\": 4, \"num_experts\": 4, "
                                "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 8, "
                                "\"router_aux_loss_coef\": 0.01");
    write_text(y, "model:\n  router_aux_loss_coef: 0.05\n  capacity_factor: 1.5\n");
    config_defaults(&c);
    rc = config_load(&c, y, err, sizeof err) || hf_apply_config(&c, dm, err, sizeof err);
    CHECK(!rc && c.model.router_aux_loss_coef == 0.05f && c.model.capacity_factor == 1.5f &&
              c.model.n_experts == 4 && c.model.n_kv_heads == 4,
          "hf/apply/training_keys_stay_ours", "rc %d %s aux %g kv %d", rc, err,
          (double)c.model.router_aux_loss_coef, c.model.n_kv_heads);
    config_defaults(&c);
    rc = hf_apply_config(&c, dm, err, sizeof err);
    CHECK(!rc && c.model.router_aux_loss_coef == 0.01f, "hf/apply/aux_default_from_config_json",
          "%s", err);
}

/* Names and the permutation. */
static void test_names(void) {
    size_t want[16] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
    int ok = 1;
    for (size_t i = 0; i < 16; i++) ok &= hf_rope_row(i, 8) == want[i];
    CHECK(ok, "hf/names/rope_rows", "HF row i of a head of 8 = our row 0 2 4 6 1 3 5 7");
    LlamaConfig m = {.vocab_size = 40, .dim = 16, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                     .ffn_hidden = 24, .max_seq_len = 32, .rope_theta = 1e4f, .norm_eps = 1e-6f,
                     .head_dim = 6, .qk_norm = 1, .n_experts = 4, .n_experts_per_tok = 2,
                     .moe_ffn_hidden = 8, .decoder_sparse_step = 1, .mlp_only_layers = {2}};
    HfPlace p;
    int rc = hf_place(&m, "layers.0.experts.3.w_up", 0, &p);
    CHECK(!rc && !strcmp(p.name, "model.layers.0.mlp.experts.3.up_proj.weight") && p.ndim == 2 &&
              p.shape[0] == 8 && p.shape[1] == 16 && !p.rope,
          "hf/names/expert_by_name", "%s", p.name);
    rc = hf_place(&m, "layers.0.experts.3.w_up", 1, &p);
    CHECK(!rc && !strcmp(p.name, "model.layers.0.mlp.experts.gate_up_proj") && p.ndim == 3 &&
              p.shape[0] == 4 && p.shape[1] == 16 && p.shape[2] == 16 &&
              p.offset == (3 * 2 + 1) * 8 * 16,
          "hf/names/expert_stacked_up_rows", "%s offset %zu", p.name, p.offset);
    rc = hf_place(&m, "layers.0.experts.2.w_down", 1, &p);
    CHECK(!rc && !strcmp(p.name, "model.layers.0.mlp.experts.down_proj") && p.shape[1] == 16 &&
              p.shape[2] == 8 && p.offset == 2 * 16 * 8,
          "hf/names/expert_stacked_down", "%s offset %zu", p.name, p.offset);
    rc = hf_place(&m, "layers.1.wq", 0, &p);
    CHECK(!rc && !strcmp(p.name, "model.layers.1.self_attn.q_proj.weight") && p.rope == 6 &&
              p.shape[0] == 24,
          "hf/names/q_permuted", "%s rope %d", p.name, p.rope);
    rc = hf_place(&m, "layers.1.k_norm", 0, &p);
    CHECK(!rc && p.rope == 6 && p.ndim == 1 && p.shape[0] == 6, "hf/names/k_norm_permuted", "%s",
          p.name);
    CHECK(hf_place(&m, "layers.0.w_gate", 0, &p) && hf_place(&m, "layers.5.wq", 0, &p) &&
              !hf_place(&m, "layers.0.router", 0, &p) && hf_place(&m, "layers.1.router", 0, &p) &&
              !hf_place(&m, "layers.1.w_gate", 0, &p) && hf_place(&m, "layers.0.routerx", 0, &p) &&
              hf_place(&m, "layers.1.experts.0.w_up", 0, &p),
          "hf/names/no_place_for_wrong_names",
          "dense MLP in a MoE block, router or experts in a dense one, block 5 of 2");
}

/* ---- round trips ---------------------------------------------------------- */

static float** random_units(const LlamaConfig* m, uint64_t seed) {
    const int n = llama_num_units(m);
    float** u = calloc((size_t)n, sizeof *u);
    uint64_t s = seed;
    for (int i = 0; i < n; i++) {
        const size_t k = llama_unit_numel(m, i);
        u[i] = malloc(k * sizeof(float));
        for (size_t j = 0; j < k; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            u[i][j] = ((float)(s >> 40) / (float)(1 << 24) - 0.5f) * 3.0f;
        }
    }
    return u;
}

static void free_units(const LlamaConfig* m, float** u) {
    if (!u) return;
    for (int i = 0; i < llama_num_units(m); i++) free(u[i]);
    free(u);
}

static float as_dtype(float x, zipcclDataType_t d) {
    if (d == zipcclBfloat16) return zipcclBf16ToFloat(zipcclFloatToBf16(x));
    if (d == zipcclFloat16) return (float)(_Float16)x;
    return x;
}

/* Import dir; NULL (and a FAIL naming why) on error. */
static float** import_dir(const char* dir, const LlamaConfig* m, const char* name, char* err,
                          size_t errlen, char* summary) {
    HfSource* s;
    if (hf_open(dir, m, &s, err, errlen)) return NULL;
    if (summary) snprintf(summary, 160, "%s", hf_source_summary(s));
    const int n = llama_num_units(m);
    float** u = calloc((size_t)n, sizeof *u);
    for (int i = 0; i < n; i++) {
        u[i] = malloc(llama_unit_numel(m, i) * sizeof(float));
        if (hf_read_unit(s, i, u[i], err, errlen)) {
            CHECK(0, name, "read unit %d: %s", i, err);
            hf_close(s);
            free_units(m, u);
            return NULL;
        }
    }
    hf_close(s);
    return u;
}

/* Every tensor of two HF directories: same names, dtypes, bytes. */
static int same_tensors(const char* a, const char* b, char* why, size_t n) {
    const char* dirs[2] = {a, b};
    st_file* files[2][64] = {{0}};
    int nf[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "ls '%s' | grep safetensors$", dirs[k]);
        FILE* p = popen(cmd, "r");
        char line[256];
        while (p && fgets(line, sizeof line, p) && nf[k] < 64) {
            line[strcspn(line, "\n")] = 0;
            char fp[1024], e[512];
            snprintf(fp, sizeof fp, "%s/%s", dirs[k], line);
            if (st_open(fp, &files[k][nf[k]], e, sizeof e) == 0) nf[k]++;
        }
        if (p) pclose(p);
    }
    size_t count[2] = {0, 0};
    int ok = 1;
    for (int i = 0; i < nf[0] && ok; i++)
        for (size_t t = 0; t < st_num_tensors(files[0][i]) && ok; t++) {
            const st_tensor* x = st_tensor_at(files[0][i], t);
            count[0]++;
            const st_tensor* y = NULL;
            int fy = -1;
            for (int j = 0; j < nf[1] && !y; j++)
                if ((y = st_find(files[1][j], x->name))) fy = j;
            if (!y || strcmp(x->dtype, y->dtype) || x->bytes != y->bytes) {
                snprintf(why, n, "%s: %s", x->name, y ? "dtype or size differ" : "missing");
                ok = 0;
                break;
            }
            char* bx = malloc(x->bytes + 1);
            char* by = malloc(y->bytes + 1);
            st_read(files[0][i], x, bx, x->bytes, NULL, 0);
            st_read(files[1][fy], y, by, y->bytes, NULL, 0);
            if (memcmp(bx, by, x->bytes)) {
                snprintf(why, n, "%s: bytes differ", x->name);
                ok = 0;
            }
            free(bx);
            free(by);
        }
    for (int j = 0; j < nf[1]; j++) count[1] += st_num_tensors(files[1][j]);
    if (ok && count[0] != count[1]) {
        snprintf(why, n, "%zu tensors against %zu", count[0], count[1]);
        ok = 0;
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < nf[k]; i++) st_close(files[k][i]);
    return ok;
}

static const LlamaConfig kLlama = {.vocab_size = 40, .dim = 16, .n_layers = 2, .n_heads = 4,
                                   .n_kv_heads = 2, .ffn_hidden = 24, .max_seq_len = 32,
                                   .rope_theta = 500000.0f, .norm_eps = 1e-5f};
static const LlamaConfig kQwen3 = {.vocab_size = 37, .dim = 16, .n_layers = 2, .n_heads = 2,
                                   .n_kv_heads = 1, .ffn_hidden = 20, .max_seq_len = 64,
                                   .rope_theta = 1e6f, .norm_eps = 1e-6f, .tie_embeddings = 1,
                                   .head_dim = 12, .qk_norm = 1};
static const LlamaConfig kMoe = {.vocab_size = 40, .dim = 16, .n_layers = 3, .n_heads = 4,
                                 .n_kv_heads = 2, .ffn_hidden = 24, .max_seq_len = 32,
                                 .rope_theta = 1e6f, .norm_eps = 1e-6f, .head_dim = 6, .qk_norm = 1,
                                 .n_experts = 4, .n_experts_per_tok = 2, .moe_ffn_hidden = 8,
                                 .decoder_sparse_step = 1, .norm_topk_prob = 1,
                                 .router_aux_loss_coef = 0.01f, .mlp_only_layers = {2}};

static void test_roundtrip(const char* tag, const LlamaConfig* m, zipcclDataType_t dt,
                           long long shard) {
    char name[128], err[2048], why[512], summary[160] = "";
    char a[64], b[64];
    snprintf(a, sizeof a, "rt_%s_a", tag);
    snprintf(b, sizeof b, "rt_%s_b", tag);
    float** u = random_units(m, 1234);
    HfExportOptions o = {dt, shard, NULL, NULL, -1, -1};
    int rc = hf_export(m, (const float* const*)u, &o, path_of(a, NULL), err, sizeof err);
    snprintf(name, sizeof name, "hf/roundtrip/%s/export", tag);
    CHECK(!rc, name, "%s", err);
    if (rc) return free_units(m, u);
    /* the config reads back as the same model */
    HfArch arch;
    LlamaConfig back;
    rc = hf_read_config(path_of(a, NULL), &arch, &back, err, sizeof err);
    snprintf(name, sizeof name, "hf/roundtrip/%s/config_reads_back", tag);
    CHECK(!rc && back.vocab_size == m->vocab_size && back.dim == m->dim &&
              back.n_layers == m->n_layers && back.n_heads == m->n_heads &&
              back.n_kv_heads == m->n_kv_heads && back.ffn_hidden == m->ffn_hidden &&
              back.max_seq_len == m->max_seq_len && back.rope_theta == m->rope_theta &&
              back.norm_eps == m->norm_eps && back.tie_embeddings == m->tie_embeddings &&
              back.head_dim == llama_head_dim(m) && back.qk_norm == m->qk_norm &&
              back.n_experts == m->n_experts &&
              (!m->n_experts || /* the MoE keys, for a MoE model */
               (back.n_experts_per_tok == m->n_experts_per_tok &&
                back.moe_ffn_hidden == m->moe_ffn_hidden &&
                back.decoder_sparse_step == m->decoder_sparse_step &&
                back.norm_topk_prob == m->norm_topk_prob &&
                back.router_aux_loss_coef == m->router_aux_loss_coef &&
                !memcmp(back.mlp_only_layers, m->mlp_only_layers, sizeof back.mlp_only_layers))),
          name, "rc %d %s", rc, rc ? err : "a field differs");
    snprintf(name, sizeof name, "hf/roundtrip/%s/import", tag);
    float** v = import_dir(path_of(a, NULL), m, name, err, sizeof err, summary);
    CHECK(v != NULL, name, "%s", err);
    if (!v) return free_units(m, u);
    size_t bad = 0, total = 0;
    for (int i = 0; i < llama_num_units(m); i++)
        for (size_t j = 0; j < llama_unit_numel(m, i); j++, total++) {
            const float x = as_dtype(u[i][j], dt);
            bad += memcmp(&x, &v[i][j], sizeof x) != 0;
        }
    snprintf(name, sizeof name, "hf/roundtrip/%s/values_exact", tag);
    CHECK(!bad, name, "%zu of %zu values differ from the %s rounding (%s)", bad, total,
          zipcclTypeName(dt), summary);
    /* import -> export: the same bytes */
    rc = hf_export(m, (const float* const*)v, &o, path_of(b, NULL), err, sizeof err);
    snprintf(name, sizeof name, "hf/roundtrip/%s/reexport_bitwise", tag);
    CHECK(!rc && same_tensors(path_of(a, NULL), path_of(b, NULL), why, sizeof why), name, "%s",
          rc ? err : why);
    free_units(m, u);
    free_units(m, v);
}

/* Sharding: files, index, and a stale export's shards removed. */
static void test_shards(void) {
    char err[2048];
    float** u = random_units(&kMoe, 7);
    HfExportOptions o = {zipcclFloat32, 3000, NULL, NULL, -1, -1};
    const char* d = path_of("shards", NULL);
    int rc = hf_export(&kMoe, (const float* const*)u, &o, d, err, sizeof err);
    /* HF's rule: tensors in order, a new file when the next would pass the
     * limit; the biggest tensor here, the embedding (2560 bytes), fits */
    int files = 0;
    char first[64];
    for (int k = 1; k < 100; k++) {
        snprintf(first, sizeof first, "model-%05d-of-", k);
        char cmd[600];
        snprintf(cmd, sizeof cmd, "ls %s | grep -q '^%s'", d, first);
        if (system(cmd)) break;
        files = k;
    }
    CHECK(!rc && files > 1 && !access(path_of("shards", "model.safetensors.index.json"), F_OK) &&
              access(path_of("shards", "model.safetensors"), F_OK),
          "hf/shards/index_and_files", "rc %d %s, %d files", rc, err, files);
    o.max_shard_bytes = 1 << 30;
    rc = hf_export(&kMoe, (const float* const*)u, &o, d, err, sizeof err);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q '^model-0'", d);
    CHECK(!rc && !access(path_of("shards", "model.safetensors"), F_OK) &&
              access(path_of("shards", "model.safetensors.index.json"), F_OK) && system(cmd),
          "hf/shards/stale_shards_removed", "%s", err);
    free_units(&kMoe, u);
}

/* The stacked experts of transformers 5.x, from a per-expert export. */
static void test_stacked(void) {
    char err[2048], summary[160] = "";
    float** u = random_units(&kMoe, 99);
    HfExportOptions o = {zipcclBfloat16, 1ll << 40, NULL, NULL, -1, -1};
    const char* d = path_of("stacked", NULL);
    if (hf_export(&kMoe, (const float* const*)u, &o, d, err, sizeof err)) {
        CHECK(0, "hf/stacked/export", "%s", err);
        return free_units(&kMoe, u);
    }
    st_file* f;
    st_open(path_of("stacked", "model.safetensors"), &f, err, sizeof err);
    st_writer* w = st_writer_begin();
    const int E = kMoe.n_experts, Fe = kMoe.moe_ffn_hidden, C = kMoe.dim;
    uint16_t* gu[3] = {0};
    uint16_t* dn[3] = {0};
    void* keep[512];
    int nk = 0;
    for (size_t i = 0; i < st_num_tensors(f); i++) {
        const st_tensor* t = st_tensor_at(f, i);
        if (strstr(t->name, ".experts.")) continue;
        void* buf = malloc(t->bytes);
        st_read(f, t, buf, t->bytes, NULL, 0);
        keep[nk++] = buf;
        st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, buf, t->bytes, NULL, 0);
    }
    for (int l = 0; l < 3; l++) {
        if (!llama_layer_is_moe(&kMoe, l)) continue;
        gu[l] = malloc((size_t)E * 2 * Fe * C * 2);
        dn[l] = malloc((size_t)E * C * Fe * 2);
        for (int e = 0; e < E; e++) {
            char n[128];
            snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.gate_proj.weight", l, e);
            st_read(f, st_find(f, n), gu[l] + (size_t)e * 2 * Fe * C, (size_t)Fe * C * 2, NULL, 0);
            snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.up_proj.weight", l, e);
            st_read(f, st_find(f, n), gu[l] + ((size_t)e * 2 + 1) * Fe * C, (size_t)Fe * C * 2,
                    NULL, 0);
            snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
            st_read(f, st_find(f, n), dn[l] + (size_t)e * C * Fe, (size_t)C * Fe * 2, NULL, 0);
        }
        char n[128];
        int64_t s1[3] = {E, 2 * Fe, C}, s2[3] = {E, C, Fe};
        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.gate_up_proj", l);
        st_writer_add(w, n, "BF16", 3, s1, gu[l], (size_t)E * 2 * Fe * C * 2, NULL, 0);
        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.down_proj", l);
        st_writer_add(w, n, "BF16", 3, s2, dn[l], (size_t)E * C * Fe * 2, NULL, 0);
    }
    st_close(f);
    st_writer_write(w, path_of("stacked", "model.safetensors"), err, sizeof err);
    st_writer_free(w);
    for (int i = 0; i < nk; i++) free(keep[i]);
    for (int l = 0; l < 3; l++) free(gu[l]), free(dn[l]);
    float** v = import_dir(d, &kMoe, "hf/stacked/import", err, sizeof err, summary);
    size_t bad = 0;
    for (int i = 0; v && i < llama_num_units(&kMoe); i++)
        for (size_t j = 0; j < llama_unit_numel(&kMoe, i); j++)
            bad += as_dtype(u[i][j], zipcclBfloat16) != v[i][j];
    CHECK(v && !bad && strstr(summary, "experts stacked"), "hf/stacked/import_equals_per_expert",
          "%s; %zu values differ (%s)", v ? "" : err, bad, summary);
    free_units(&kMoe, u);
    free_units(&kMoe, v);
}

/* ---- bad weights, refused before anything is read ----------------------------- */

/* A valid Llama export in dir `name` (fp32, shards of `shard` bytes). */
static const char* good_llama(const char* name, long long shard) {
    char err[2048];
    float** u = random_units(&kLlama, 5);
    HfExportOptions o = {zipcclFloat32, shard, NULL, NULL, -1, -1};
    const char* d = path_of(name, NULL);
    if (hf_export(&kLlama, (const float* const*)u, &o, d, err, sizeof err))
        CHECK(0, "hf/bad/setup", "%s", err);
    free_units(&kLlama, u);
    return d;
}

static void expect_refused(const char* name, const char* dir, const LlamaConfig* m,
                           const char* want1, const char* want2) {
    char err[2048] = "";
    HfSource* s = NULL;
    int rc = hf_open(dir, m, &s, err, sizeof err);
    if (!rc) { /* some faults show only when the data is read */
        float* full = malloc(llama_unit_numel(m, 0) * sizeof(float));
        rc = hf_read_unit(s, 0, full, err, sizeof err);
        free(full);
        hf_close(s);
    }
    CHECK(rc && strstr(err, want1) && (!want2 || strstr(err, want2)), name, "rc %d: %s", rc, err);
}

/* Rewrite dir/model.safetensors with tensor `name` replaced (dtype, shape)
 * or dropped (dtype NULL), or one added (add != NULL). */
static void rewrite(const char* dir, const char* name, const char* dtype, int64_t rows,
                    const char* add) {
    char p[600], err[512];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    st_file* f;
    if (st_open(p, &f, err, sizeof err)) return;
    st_writer* w = st_writer_begin();
    void* keep[256];
    int nk = 0;
    for (size_t i = 0; i < st_num_tensors(f); i++) {
        const st_tensor* t = st_tensor_at(f, i);
        void* buf = calloc(1, t->bytes + 64 * 64 * 8);
        st_read(f, t, buf, t->bytes, NULL, 0);
        keep[nk++] = buf;
        if (!strcmp(t->name, name)) {
            if (!dtype) continue;
            int64_t shape[2] = {rows ? rows : t->shape[0], t->ndim > 1 ? t->shape[1] : 1};
            st_writer_add(w, t->name, dtype, t->ndim, shape, buf,
                          (size_t)(shape[0] * (t->ndim > 1 ? shape[1] : 1)) * st_dtype_size(dtype),
                          NULL, 0);
        } else {
            st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, buf, t->bytes, NULL, 0);
        }
    }
    static float extra[16];
    if (add) {
        int64_t s[1] = {16};
        st_writer_add(w, add, "F32", 1, s, extra, sizeof extra, NULL, 0);
    }
    st_close(f);
    st_writer_write(w, p, err, sizeof err);
    st_writer_free(w);
    for (int i = 0; i < nk; i++) free(keep[i]);
}

static void test_bad_weights(void) {
    const char* d = good_llama("bad_shape", 1ll << 40);
    rewrite(d, "model.layers.1.self_attn.q_proj.weight", "F32", 12, NULL);
    expect_refused("hf/bad/wrong_shape", d, &kLlama,
                   "bad_shape/model.safetensors: tensor 'model.layers.1.self_attn.q_proj.weight' "
                   "has shape (12, 16), the model of config.json needs (16, 16)", NULL);
    d = good_llama("bad_dtype", 1ll << 40);
    rewrite(d, "model.norm.weight", "I32", 0, NULL);
    expect_refused("hf/bad/wrong_dtype", d, &kLlama,
                   "tensor 'model.norm.weight' is I32; the import reads F32, BF16 and F16", NULL);
    d = good_llama("bad_missing", 1ll << 40);
    rewrite(d, "lm_head.weight", NULL, 0, NULL);
    expect_refused("hf/bad/missing_tensor", d, &kLlama, "bad_missing: no tensor 'lm_head.weight'",
                   "our lm_head");
    d = good_llama("bad_extra", 1ll << 40);
    rewrite(d, "none", NULL, 0, "model.layers.0.self_attn.q_proj.bias");
    expect_refused("hf/bad/unexpected_tensor", d, &kLlama,
                   "tensor 'model.layers.0.self_attn.q_proj.bias' has no place in the model", NULL);
    d = good_llama("ok_inv_freq", 1ll << 40);
    rewrite(d, "none", NULL, 0, "model.layers.0.self_attn.rotary_emb.inv_freq");
    char err[2048];
    HfSource* s = NULL;
    CHECK(!hf_open(d, &kLlama, &s, err, sizeof err), "hf/bad/rotary_inv_freq_ignored", "%s", err);
    hf_close(s);

    /* shards: one missing, one cut short, the index naming the wrong file */
    d = good_llama("bad_shard", 4000);
    const char* victim = path_of("bad_shard", "model-00002-of-00007.safetensors");
    unlink(victim);
    expect_refused("hf/bad/missing_shard", d, &kLlama, "model-00002-of-00007.safetensors: the "
                   "shard is missing", "model.safetensors.index.json lists it");
    d = good_llama("cut_shard", 4000);
    victim = path_of("cut_shard", "model-00003-of-00007.safetensors");
    struct stat sb;
    stat(victim, &sb);
    if (truncate(victim, sb.st_size - 10)) perror("truncate");
    expect_refused("hf/bad/truncated_shard", d, &kLlama, "model-00003-of-00007.safetensors",
                   "file truncated?");
    d = good_llama("bad_index", 4000);
    FILE* fp = fopen(path_of("bad_index", "model.safetensors.index.json"), "r");
    char text[16384];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = 0;
    char* at = strstr(text, "\"model.norm.weight\": \"model-");
    if (at) memcpy(at + strlen("\"model.norm.weight\": \"model-0000"), "1", 1);
    write_text(path_of("bad_index", "model.safetensors.index.json"), text);
    expect_refused("hf/bad/index_names_wrong_shard", d, &kLlama,
                   "model-00001-of-00007.safetensors: no tensor 'model.norm.weight', which the "
                   "index places there", NULL);
    d = config_dir("no_weights", LLAMA_BASE);
    expect_refused("hf/bad/no_weights", d, &kLlama,
                   "no model.safetensors and no model.safetensors.index.json", NULL);
    write_text(path_of("no_weights", "pytorch_model.bin"), "pickle");
    expect_refused("hf/bad/pickle_named", d, &kLlama, "pytorch_model.bin, a pickle, is not read",
                   NULL);

    /* a tied model whose file has a head that is not the embedding */
    LlamaConfig tied = kLlama;
    tied.tie_embeddings = 1;
    d = good_llama("bad_tied", 1ll << 40);
    expect_refused("hf/bad/tied_head_differs", d, &tied,
                   "lm_head.weight differs from model.embed_tokens.weight", "tie_word_embeddings");
    /* ... and one whose head is the embedding, as some tied checkpoints ship */
    {
        float** u = random_units(&kLlama, 5);
        memcpy(u[llama_head_unit(&kLlama)] + kLlama.dim, u[0], /* lm_head := tok_emb */
               (size_t)kLlama.vocab_size * kLlama.dim * sizeof(float));
        HfExportOptions o = {zipcclFloat32, 1ll << 40, NULL, NULL, -1, -1};
        const char* dt = path_of("ok_tied_copy", NULL);
        char e2[2048];
        int rc = hf_export(&kLlama, (const float* const*)u, &o, dt, e2, sizeof e2);
        float** v = rc ? NULL : import_dir(dt, &tied, "hf/bad/tied_head_copy_accepted", e2,
                                           sizeof e2, NULL);
        CHECK(v && !memcmp(v[0], u[0], (size_t)kLlama.vocab_size * kLlama.dim * sizeof(float)),
              "hf/bad/tied_head_copy_accepted", "%s", e2);
        free_units(&kLlama, u);
        free_units(&tied, v);
    }
    /* a model other than config.json's (the layer count) */
    LlamaConfig three = kLlama;
    three.n_layers = 3;
    d = good_llama("bad_layers", 1ll << 40);
    expect_refused("hf/bad/fewer_layers_than_config", d, &three,
                   "no tensor 'model.layers.2.input_layernorm.weight'", NULL);
    LlamaConfig one = kLlama;
    one.n_layers = 1;
    expect_refused("hf/bad/more_layers_than_config", d, &one,
                   "tensor 'model.layers.1.", "has no place in the model");
}

static void test_export_refusals(void) {
    char err[2048];
    float** u = random_units(&kLlama, 3);
    u[1][5] = 70000.0f;
    HfExportOptions o = {zipcclFloat16, 1ll << 40, NULL, NULL, -1, -1};
    int rc = hf_export(&kLlama, (const float* const*)u, &o, path_of("fp16_over", NULL), err,
                       sizeof err);
    CHECK(rc && strstr(err, "export fp16: model.layers.0.") && strstr(err, "70000") &&
              strstr(err, "beyond fp16's largest value"),
          "hf/export/fp16_overflow_refused", "%s", err);
    free_units(&kLlama, u);
    LlamaConfig m = kMoe;
    m.qk_norm = 0;
    u = random_units(&m, 3);
    o.dtype = zipcclFloat32;
    rc = hf_export(&m, (const float* const*)u, &o, path_of("moe_noqk", NULL), err, sizeof err);
    CHECK(rc && strstr(err, "no Hugging Face architecture has experts without QK-norm"),
          "hf/export/moe_without_qk_norm_refused", "%s", err);
    free_units(&m, u);
}

/* The source directory: fields we do not own kept, tokenizer files copied. */
static void test_source_kept(void) {
    char err[2048];
    const char* src = config_dir("src", LLAMA_BASE ", \"bos_token_id\": 128000, \"eos_token_id\": "
                                 "[128001, 128009], \"rope_scaling\": null, \"rope_theta\": "
                                 "500000.0, \"torch_dtype\": \"bfloat16\"");
    write_text(path_of("src", "tokenizer.json"), "{\"version\": \"1.0\"}\n");
    write_text(path_of("src", "tokenizer_config.json"), "{\"eos_token\": \"<|eot_id|>\"}\n");
    float** u = random_units(&kLlama, 11);
    HfExportOptions o = {zipcclBfloat16, 1ll << 40, src, NULL, -1, -1};
    int rc = hf_export(&kLlama, (const float* const*)u, &o, path_of("kept", NULL), err, sizeof err);
    FILE* f = fopen(path_of("kept", "config.json"), "r");
    char text[8192] = "";
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = 0;
        fclose(f);
    }
    CHECK(!rc && strstr(text, "\"bos_token_id\": 128000") && strstr(text, "128009") &&
              strstr(text, "\"torch_dtype\": \"bfloat16\"") && strstr(text, "\"dtype\": \"bfloat16\"") &&
              strstr(text, "\"rope_theta\": 500000.0") && strstr(text, "\"rms_norm_eps\": 1e-05") &&
              !access(path_of("kept", "tokenizer.json"), F_OK) &&
              !access(path_of("kept", "tokenizer_config.json"), F_OK),
          "hf/export/source_fields_and_tokenizer_kept", "rc %d %s\n%s", rc, err, text);
    rc = hf_export(&kLlama, (const float* const*)u, &o, src, err, sizeof err);
    CHECK(rc && strstr(err, "is the directory the model came from") &&
              !access(path_of("src", "config.json"), F_OK),
          "hf/export/into_the_source_refused", "rc %d %s", rc, err);
    free_units(&kLlama, u);
}

/* scripts/prepare_data.py's PATH.json, as the trainer reads it. */
static void test_data_meta(void) {
    char err[2048], tok[512];
    DataMeta m;
    snprintf(tok, sizeof tok, "%s", path_of("tok.bin", NULL)); /* path_of's buffers rotate */
    uint16_t ids[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    FILE* f = fopen(tok, "wb");
    fwrite(ids, 2, 10, f);
    fclose(f);
    CHECK(!data_read_meta(tok, &m, err, sizeof err) && !m.present, "hf/data_meta/absent_is_fine",
          "%s", err);
    write_text(path_of("tok.bin.json", NULL),
               "{\"format\": \"zipccl-runtime-tokens-1\", \"dtype\": \"u16\", \"tokens\": 10, "
               "\"vocab_size\": 300, \"tokenizer_file\": \"tok.bin.tokenizer.json\", "
               "\"eos_id\": 0, \"bos_id\": null}");
    int rc = data_read_meta(tok, &m, err, sizeof err);
    CHECK(!rc && m.present && !strcmp(m.dtype, "u16") && m.tokens == 10 && m.vocab_size == 300 &&
              m.eos_id == 0 && m.bos_id == -1 &&
              strstr(m.tokenizer, "/tok.bin.tokenizer.json"),
          "hf/data_meta/read", "rc %d %s", rc, err);
    f = fopen(tok, "wb");
    fwrite(ids, 2, 9, f);
    fclose(f);
    rc = data_read_meta(tok, &m, err, sizeof err);
    CHECK(rc && strstr(err, "tok.bin: 18 bytes, but") && strstr(err, "says 10 u16 tokens") &&
              strstr(err, "truncated"),
          "hf/data_meta/truncated_tokens_refused", "%s", err);
    write_text(path_of("tok.bin.json", NULL), "{\"format\": \"zipccl-runtime-tokens-1\", "
               "\"dtype\": \"f32\", \"tokens\": 9, \"vocab_size\": 3}");
    rc = data_read_meta(tok, &m, err, sizeof err);
    CHECK(rc && strstr(err, "tok.bin.json: field 'dtype'"), "hf/data_meta/bad_dtype_refused", "%s",
          err);
    /* What fuzz_token_meta found accepted (issue 52): each refused by field. */
    static const struct {
        const char *json, *field, *name;
    } kBad[] = {
        {"\"tokens\": 4611686018427387904, \"vocab_size\": 3", "says 4611686018427387904",
         "tokens_times_width_overflow"},
        {"\"tokens\": 9, \"vocab_size\": 65537", "field 'vocab_size'", "vocab_past_u16"},
        {"\"tokens\": 9, \"vocab_size\": 3, \"eos_id\": 3", "field 'eos_id'", "eos_past_vocab"},
        {"\"tokens\": 9, \"vocab_size\": 3, \"bos_id\": \"1\"", "field 'bos_id'", "bos_not_int"},
        {"\"tokens\": 9, \"vocab_size\": 3, \"tokenizer_file\": \"../../etc/passwd\"",
         "field 'tokenizer_file'", "tokenizer_outside"},
        {"\"tokens\": 9, \"vocab_size\": 3, \"tokenizer_file\": 7", "field 'tokenizer_file'",
         "tokenizer_not_string"},
    };
    for (size_t i = 0; i < sizeof kBad / sizeof kBad[0]; i++) {
        char text[512], name[96];
        snprintf(text, sizeof text, "{\"format\": \"zipccl-runtime-tokens-1\", \"dtype\": \"u16\", %s}",
                 kBad[i].json);
        write_text(path_of("tok.bin.json", NULL), text);
        snprintf(name, sizeof name, "hf/data_meta/%s_refused", kBad[i].name);
        rc = data_read_meta(tok, &m, err, sizeof err);
        CHECK(rc && strstr(err, "tok.bin") && strstr(err, kBad[i].field), name, "rc %d %s", rc, err);
    }
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/zrt_hf_XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 2;
    }
    test_config();
    test_apply();
    test_names();
    test_roundtrip("llama_fp32", &kLlama, zipcclFloat32, 1ll << 40);
    test_roundtrip("llama_fp16", &kLlama, zipcclFloat16, 1ll << 40);
    test_roundtrip("qwen3_bf16_tied", &kQwen3, zipcclBfloat16, 1ll << 40);
    test_roundtrip("moe_fp32_shards", &kMoe, zipcclFloat32, 5000);
    test_roundtrip("moe_fp16", &kMoe, zipcclFloat16, 1ll << 40);
    test_shards();
    test_stacked();
    test_bad_weights();
    test_export_refusals();
    test_source_kept();
    test_data_meta();
    rm_rf(root);
    return tu_exit();
}
