/*
 * hf.c — Hugging Face checkpoints in and out (hf.h has the map; this file
 * reads top to bottom: config.json -> our model, tensor names both ways,
 * import, export).
 *
 * JSON: config.json and model.safetensors.index.json are general JSON
 * (floats, booleans, null, nested objects), which the structure-directed
 * parser of safetensors.c refuses by design, so they go through Debian's
 * libjansson (strict, duplicate keys refused, errors with line and column);
 * config.json is written back by a small emitter of our own (sorted keys,
 * two-space indent, shortest round-trip numbers, as Python's json.dumps
 * writes it), because jansson prints reals with 17 digits.
 *
 * Floats: bf16 and fp16 widen to fp32 exactly and fp32 narrows to them
 * with round to nearest even, through comm/zipccl_float.h (the tree's one
 * home of those conversions).
 *
 * Messages quote every path, field name, value and tensor name that came
 * from the files or the command line through zrt_printable (log.h).
 *
 * Left out: see hf.h.
 */
#include "hf.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels.h"
#include "log.h"
#include "safetensors.h"

#define PATH_CAP 1400

static const struct {
    const char* cls;
    const char* model_type;
} kArchs[] = {{"LlamaForCausalLM", "llama"},
              {"Qwen3ForCausalLM", "qwen3"},
              {"Qwen3MoeForCausalLM", "qwen3_moe"}};

const char* hf_arch_name(HfArch a) { return kArchs[a].cls; }

/* x as Python's repr writes a float, which is what config.json files hold:
 * the fewest digits that read back to x, positional from 1e-4 to 1e16
 * ("10000.0", "0.001"), else exponential ("1e-06"). */
static void shortest(double x, char* buf, size_t n) {
    if (!isfinite(x)) {
        snprintf(buf, n, "%s", isnan(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity");
        return;
    }
    int p = 1;
    for (; p < 17; p++) {
        snprintf(buf, n, "%.*e", p - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    snprintf(buf, n, "%.*e", p - 1, x);
    const int e = atoi(strchr(buf, 'e') + 1);
    if (x == 0 || (e >= -4 && e < 16)) {
        snprintf(buf, n, "%.*f", p - 1 - e > 0 ? p - 1 - e : 0, x);
        if (!strchr(buf, '.')) snprintf(buf + strlen(buf), n - strlen(buf), ".0");
    }
}

/* ------------------------------------------------------------------------ */
/* config.json -> our model                                                 */
/* ------------------------------------------------------------------------ */

/* Fields that do not change the decoder's arithmetic: token ids, dtypes,
 * bookkeeping, generation defaults, PretrainedConfig's generic attributes.
 * pad_token_id is one: HF's embedding keeps the pad row's gradient at zero,
 * ours trains it like any row (docs/MODEL.md). */
static const char* const kIgnored[] = {
    "_name_or_path", "_commit_hash", "_attn_implementation", "_attn_implementation_autoset",
    "transformers_version", "dtype", "torch_dtype", "use_cache", "initializer_range",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "output_router_logits", "output_attentions", "output_hidden_states", "return_dict",
    "torchscript", "use_bfloat16", "tf_legacy_loss", "pruned_heads", "chunk_size_feed_forward",
    "is_encoder_decoder", "is_decoder", "add_cross_attention", "tie_encoder_decoder",
    "cross_attention_hidden_size", "id2label", "label2id", "problem_type", "finetuning_task",
    "tokenizer_class", "prefix", "task_specific_params", "max_length", "min_length",
    "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
    "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens",
    /* only with a sliding window, which use_sliding_window must leave off */
    "sliding_window", "max_window_layers",
    /* Llama: splits each projection into slices summed in the same order of
     * the same products; the same model */
    "pretraining_tp"};

typedef struct {
    const char* path; /* DIR/config.json, for messages */
    json_t* root;
    const char* used[64];
    int n_used;
    char* err;
    size_t errlen;
} Cfg;

static int cfg_fail(Cfg* c, const char* field, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int cfg_fail(Cfg* c, const char* field, const char* fmt, ...) {
    char what[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (field)
        return zrt_errf(c->err, c->errlen, "%s: field '%s': %s", PRINTABLE(c->path),
                        PRINTABLE(field), what);
    return zrt_errf(c->err, c->errlen, "%s: %s", PRINTABLE(c->path), what);
}

/* The field's value (NULL when absent or null), marked as read. */
static json_t* field(Cfg* c, const char* name) {
    if (c->n_used < (int)(sizeof c->used / sizeof c->used[0])) c->used[c->n_used++] = name;
    json_t* v = json_object_get(c->root, name);
    return v && !json_is_null(v) ? v : NULL;
}

static int get_int(Cfg* c, const char* name, long long def, long long lo, long long hi,
                   long long* out) {
    json_t* v = field(c, name);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v)) return cfg_fail(c, name, "expected an integer");
    *out = json_integer_value(v);
    if (*out < lo || *out > hi)
        return cfg_fail(c, name, "%lld is out of range [%lld, %lld]", *out, lo, hi);
    return 0;
}

static int get_num(Cfg* c, const char* name, double def, double* out) {
    json_t* v = field(c, name);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) return cfg_fail(c, name, "expected a number");
    *out = json_number_value(v);
    return 0;
}

/* A value the model keeps: inside the range the config key of the same
 * meaning takes (runtime/config.c's table), so that what this reader
 * accepts hf_apply_config can set. */
static int num_in(Cfg* c, const char* name, double x, double lo, double hi) {
    if (!(x >= lo && x <= hi)) return cfg_fail(c, name, "%g is out of range [%g, %g]", x, lo, hi);
    return 0;
}

static int get_bool(Cfg* c, const char* name, int def, int* out) {
    json_t* v = field(c, name);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return cfg_fail(c, name, "expected true or false");
    *out = json_is_true(v);
    return 0;
}

/* A field the model implements at one value only (or absent / null). */
static int want_false(Cfg* c, const char* name, const char* what) {
    int b;
    if (get_bool(c, name, 0, &b)) return -1;
    return b ? cfg_fail(c, name, "true is not implemented (%s)", what) : 0;
}

/* rope_parameters (transformers 5) or rope_scaling (4.x): the default RoPE
 * only; rope_theta may sit inside. */
static int check_rope_object(Cfg* c, const char* name, double* theta, int* have_theta) {
    json_t* o = field(c, name);
    if (!o) return 0;
    if (!json_is_object(o)) return cfg_fail(c, name, "expected an object or null");
    const char* type = NULL;
    json_t* t = json_object_get(o, "rope_type");
    if (!t) t = json_object_get(o, "type");
    if (t && !json_is_null(t)) {
        if (!json_is_string(t)) return cfg_fail(c, name, "rope_type must be a string");
        type = json_string_value(t);
        if (strcmp(type, "default"))
            return cfg_fail(c, name,
                            "rope_type '%s' is not implemented (only the default RoPE: no rope "
                            "scaling; docs/MODEL.md)",
                            PRINTABLE(type));
    }
    const char* k;
    json_t* v;
    json_object_foreach(o, k, v) {
        if (!strcmp(k, "rope_type") || !strcmp(k, "type")) continue;
        if (!strcmp(k, "rope_theta")) {
            if (!json_is_number(v)) return cfg_fail(c, name, "rope_theta must be a number");
            *theta = json_number_value(v);
            *have_theta = 1;
            continue;
        }
        if (!strcmp(k, "partial_rotary_factor") && json_is_number(v) &&
            json_number_value(v) == 1.0)
            continue;
        return cfg_fail(c, name, "'%s' is not implemented (only the default RoPE, rope_theta)",
                        PRINTABLE(k));
    }
    return 0;
}

/* Our value as config text, from HF's. */
typedef struct {
    const char* key;   /* ours, "model.dim" */
    const char* field; /* theirs, "hidden_size" */
    char text[1200];
} Mapped;

static int hf_read_config_full(const char* dir, HfArch* arch, LlamaConfig* m, Mapped* map, int* n_map,
                               int* aux_given, char* err, size_t errlen) {
    char path[PATH_CAP];
    snprintf(path, sizeof path, "%s/config.json", dir);
    struct stat sb;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return zrt_errf(err, errlen, "%s: not a directory (model.init_from wants a Hugging Face "
                        "model directory: config.json and model.safetensors)", PRINTABLE(dir));
    json_error_t je;
    json_t* root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (access(path, F_OK))
            return zrt_errf(err, errlen, "%s: cannot read: %s (a Hugging Face model directory "
                            "has a config.json)", PRINTABLE(path), strerror(errno));
        return zrt_errf(err, errlen, "%s:%d:%d: not valid JSON: %s", PRINTABLE(path), je.line,
                        je.column, PRINTABLE(je.text));
    }
    Cfg c = {path, root, {0}, 0, err, errlen};
    int rc = -1;
    if (!json_is_object(root)) {
        cfg_fail(&c, NULL, "the top level is not a JSON object");
        goto done;
    }
    /* The architecture: "architectures" (what from_pretrained names the
     * class by) and "model_type" (what AutoModelForCausalLM picks it by). */
    int a = -1;
    json_t* archs = field(&c, "architectures");
    if (archs) {
        if (!json_is_array(archs) || json_array_size(archs) != 1 ||
            !json_is_string(json_array_get(archs, 0))) {
            cfg_fail(&c, "architectures", "expected a list of one class name");
            goto done;
        }
        const char* cls = json_string_value(json_array_get(archs, 0));
        for (int i = 0; i < 3; i++)
            if (!strcmp(cls, kArchs[i].cls)) a = i;
        if (a < 0) {
            cfg_fail(&c, "architectures",
                     "'%s' is not supported (LlamaForCausalLM, Qwen3ForCausalLM, "
                     "Qwen3MoeForCausalLM)",
                     PRINTABLE(cls));
            goto done;
        }
    }
    json_t* mt = field(&c, "model_type");
    if (mt) {
        if (!json_is_string(mt)) {
            cfg_fail(&c, "model_type", "expected a string");
            goto done;
        }
        int b = -1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(json_string_value(mt), kArchs[i].model_type)) b = i;
        if (b < 0) {
            cfg_fail(&c, "model_type", "'%s' is not supported (llama, qwen3, qwen3_moe)",
                     PRINTABLE(json_string_value(mt)));
            goto done;
        }
        if (a >= 0 && a != b) {
            cfg_fail(&c, "model_type", "'%s' does not go with architectures '%s'",
                     PRINTABLE(json_string_value(mt)), kArchs[a].cls);
            goto done;
        }
        a = b;
    }
    if (a < 0) {
        cfg_fail(&c, NULL, "names no architecture (fields 'architectures' and 'model_type' are "
                 "missing)");
        goto done;
    }
    *arch = (HfArch)a;
    const int llama = a == HF_LLAMA, moe = a == HF_QWEN3_MOE;

    /* transformers 5.24's defaults for an absent (or null) field */
    long long V, C, F, L, H, KV, hd, T, E = 0, K = 0, Fe = 0, step = 1;
    double eps, theta = 10000.0, aux = 0.001;
    int tie, norm_topk = 0;
    if (get_int(&c, "vocab_size", llama ? 32000 : 151936, 2, 1 << 24, &V) ||
        get_int(&c, "hidden_size", llama ? 4096 : moe ? 2048 : 4096, 1, 65536, &C) ||
        get_int(&c, "intermediate_size", llama ? 11008 : moe ? 6144 : 22016, 1, 1 << 20, &F) ||
        get_int(&c, "num_hidden_layers", llama ? 32 : moe ? 24 : 32, 1, 1024, &L) ||
        get_int(&c, "num_attention_heads", 32, 1, 1024, &H) ||
        /* null means "as many as query heads" where post_init says so */
        get_int(&c, "num_key_value_heads",
                llama || (!moe && json_is_null(json_object_get(root, "num_key_value_heads"))) ? H
                : moe ? 4 : 32,
                1, 1024, &KV) ||
        get_int(&c, "max_position_embeddings", llama ? 2048 : 32768, 1, 1 << 20, &T) ||
        get_num(&c, "rms_norm_eps", 1e-6, &eps) ||
        get_bool(&c, "tie_word_embeddings", 0, &tie))
        goto done;
    if (get_int(&c, "head_dim", a == HF_QWEN3 ? 128 : C / H, 2, 65536, &hd)) goto done;
    if (hd % 2) {
        cfg_fail(&c, "head_dim", "%lld is odd: RoPE rotates pairs", hd);
        goto done;
    }

    /* What the decoder does not implement, refused by name. */
    json_t* act = field(&c, "hidden_act");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu"))) {
        cfg_fail(&c, "hidden_act", "only \"silu\" (SwiGLU) is implemented");
        goto done;
    }
    if (want_false(&c, "attention_bias", "no biases in the attention projections") ||
        want_false(&c, "mlp_bias", "no biases in the MLP") ||
        want_false(&c, "use_sliding_window", "no sliding-window attention"))
        goto done;
    double drop;
    if (get_num(&c, "attention_dropout", 0.0, &drop)) goto done;
    if (drop != 0.0) {
        cfg_fail(&c, "attention_dropout", "%g: dropout is not implemented (0 only)", drop);
        goto done;
    }
    json_t* lt = field(&c, "layer_types");
    if (lt) {
        size_t i;
        json_t* x;
        if (!json_is_array(lt) || json_array_size(lt) != (size_t)L) {
            cfg_fail(&c, "layer_types", "expected a list of num_hidden_layers (%lld) entries", L);
            goto done;
        }
        json_array_foreach(lt, i, x) {
            if (!json_is_string(x) || strcmp(json_string_value(x), "full_attention")) {
                cfg_fail(&c, "layer_types", "entry %zu is not \"full_attention\" (no sliding "
                         "windows)", i);
                goto done;
            }
        }
    }
    double partial;
    if (get_num(&c, "partial_rotary_factor", 1.0, &partial)) goto done;
    if (partial != 1.0) {
        cfg_fail(&c, "partial_rotary_factor", "%g: partial RoPE is not implemented", partial);
        goto done;
    }
    /* RoPE's base: rope_parameters (5.x), else rope_theta (4.x). */
    double top = 0, inner = 0;
    int have_top = 0, have_inner = 0, have_scaling_theta = 0;
    double scaling_theta = 0;
    json_t* rt = field(&c, "rope_theta");
    if (rt) {
        if (!json_is_number(rt)) {
            cfg_fail(&c, "rope_theta", "expected a number");
            goto done;
        }
        top = json_number_value(rt);
        have_top = 1;
    }
    if (check_rope_object(&c, "rope_parameters", &inner, &have_inner) ||
        check_rope_object(&c, "rope_scaling", &scaling_theta, &have_scaling_theta))
        goto done;
    if (have_inner && have_top && inner != top) {
        cfg_fail(&c, "rope_theta", "%g contradicts rope_parameters.rope_theta %g", top, inner);
        goto done;
    }
    theta = have_inner ? inner : have_top ? top : have_scaling_theta ? scaling_theta : theta;
    if (num_in(&c, have_inner ? "rope_parameters" : have_top ? "rope_theta" : "rope_scaling", theta,
               1.0, 1e12) ||
        num_in(&c, "rms_norm_eps", eps, 1e-12, 1.0))
        goto done;

    /* Mixture of experts (Qwen3-MoE): its fields in another architecture are
     * a mislabelled model, not something to drop. */
    static const char* const moe_fields[] = {"num_experts", "num_local_experts",
                                             "num_experts_per_tok", "moe_intermediate_size",
                                             "decoder_sparse_step", "mlp_only_layers",
                                             "norm_topk_prob", "router_aux_loss_coef"};
    uint64_t mlp_only[4] = {0};
    char only_text[1200] = "";
    *aux_given = 0;
    if (moe) {
        long long e1 = -1, e2 = -1;
        if (get_int(&c, "num_experts", -1, 1, 65536, &e1) ||
            get_int(&c, "num_local_experts", -1, 1, 65536, &e2))
            goto done;
        if (e1 > 0 && e2 > 0 && e1 != e2) {
            cfg_fail(&c, "num_local_experts", "%lld contradicts num_experts %lld", e2, e1);
            goto done;
        }
        E = e1 > 0 ? e1 : e2 > 0 ? e2 : 128;
        if (get_int(&c, "num_experts_per_tok", 8, 1, E, &K) ||
            get_int(&c, "moe_intermediate_size", 768, 1, 1 << 20, &Fe) ||
            get_int(&c, "decoder_sparse_step", 1, 1, 1024, &step) ||
            get_bool(&c, "norm_topk_prob", 0, &norm_topk))
            goto done;
        *aux_given = json_object_get(root, "router_aux_loss_coef") != NULL;
        if (get_num(&c, "router_aux_loss_coef", 0.001, &aux) ||
            num_in(&c, "router_aux_loss_coef", aux, 0.0, 1000.0))
            goto done;
        json_t* mo = field(&c, "mlp_only_layers");
        if (mo) {
            size_t i;
            json_t* x;
            if (!json_is_array(mo)) {
                cfg_fail(&c, "mlp_only_layers", "expected a list of layer indices");
                goto done;
            }
            size_t used = 0;
            json_array_foreach(mo, i, x) {
                if (!json_is_integer(x) || json_integer_value(x) < 0 ||
                    json_integer_value(x) >= L || json_integer_value(x) > 255) {
                    cfg_fail(&c, "mlp_only_layers", "entry %zu is not a layer index in [0, %lld)",
                             i, L < 256 ? L : 256);
                    goto done;
                }
                const long long l = json_integer_value(x);
                mlp_only[l / 64] |= 1ull << (l % 64);
                used += (size_t)snprintf(only_text + used, sizeof only_text - used, "%s%lld",
                                         used ? "," : "", l);
                if (used >= sizeof only_text) {
                    cfg_fail(&c, "mlp_only_layers", "too many entries");
                    goto done;
                }
            }
        }
    } else {
        for (size_t i = 0; i < sizeof moe_fields / sizeof moe_fields[0]; i++)
            if (json_object_get(root, moe_fields[i]) &&
                !json_is_null(json_object_get(root, moe_fields[i]))) {
                cfg_fail(&c, moe_fields[i], "a mixture-of-experts field, but the architecture "
                         "is %s (Qwen3MoeForCausalLM has experts)", kArchs[a].cls);
                goto done;
            }
    }

    /* Everything else: known and harmless, or refused by name. */
    {
        const char* k;
        json_t* v;
        json_object_foreach(root, k, v) {
            int known = 0;
            for (int i = 0; i < c.n_used && !known; i++) known = !strcmp(k, c.used[i]);
            for (size_t i = 0; i < sizeof kIgnored / sizeof kIgnored[0] && !known; i++)
                known = !strcmp(k, kIgnored[i]);
            if (!known) {
                cfg_fail(&c, k, "not a field this import knows (runtime/hf.c): it may change the "
                         "model, so the model is refused rather than built without it");
                goto done;
            }
        }
    }

    memset(m, 0, sizeof *m);
    m->vocab_size = (int)V;
    m->dim = (int)C;
    m->n_layers = (int)L;
    m->n_heads = (int)H;
    m->n_kv_heads = (int)KV;
    m->ffn_hidden = (int)F;
    m->max_seq_len = (int)T;
    m->rope_theta = (float)theta;
    m->norm_eps = (float)eps;
    m->tie_embeddings = tie;
    m->head_dim = (int)hd;
    m->qk_norm = !llama;
    m->n_experts = (int)E;
    m->n_experts_per_tok = (int)K;
    m->moe_ffn_hidden = (int)Fe;
    m->decoder_sparse_step = (int)step;
    m->norm_topk_prob = norm_topk;
    m->router_aux_loss_coef = moe ? (float)aux : 0.0f;
    memcpy(m->mlp_only_layers, mlp_only, sizeof mlp_only);
    {
        char merr[300];
        if (llama_config_check(m, merr, sizeof merr)) {
            cfg_fail(&c, NULL, "the model it describes is not one we can build: %s", merr);
            goto done;
        }
    }
    if (map) {
        int n = 0;
#define MAP(k, f, ...)                                                    \
    do {                                                                  \
        map[n].key = k;                                                   \
        map[n].field = f;                                                 \
        snprintf(map[n].text, sizeof map[n].text, __VA_ARGS__);           \
        n++;                                                              \
    } while (0)
        char num[64];
        MAP("model.vocab_size", "vocab_size", "%lld", V);
        MAP("model.dim", "hidden_size", "%lld", C);
        MAP("model.n_layers", "num_hidden_layers", "%lld", L);
        MAP("model.n_heads", "num_attention_heads", "%lld", H);
        MAP("model.n_kv_heads", "num_key_value_heads", "%lld", KV);
        MAP("model.head_dim", "head_dim", "%lld", hd);
        MAP("model.ffn_hidden", "intermediate_size", "%lld", F);
        MAP("model.max_seq_len", "max_position_embeddings", "%lld", T);
        shortest(theta, num, sizeof num);
        MAP("model.rope_theta", have_inner ? "rope_parameters" : "rope_theta", "%s", num);
        shortest(eps, num, sizeof num);
        MAP("model.norm_eps", "rms_norm_eps", "%s", num);
        MAP("model.tie_embeddings", "tie_word_embeddings", "%s", tie ? "true" : "false");
        MAP("model.qk_norm", "architectures", "%s", llama ? "false" : "true");
        MAP("model.n_experts", moe ? "num_experts" : "architectures", "%lld", E);
        if (moe) {
            MAP("model.n_experts_per_tok", "num_experts_per_tok", "%lld", K);
            MAP("model.moe_ffn_hidden", "moe_intermediate_size", "%lld", Fe);
            MAP("model.decoder_sparse_step", "decoder_sparse_step", "%lld", step);
            MAP("model.mlp_only_layers", "mlp_only_layers", "%s", only_text);
            MAP("model.norm_topk_prob", "norm_topk_prob", "%s", norm_topk ? "true" : "false");
            shortest(aux, num, sizeof num);
            MAP("model.router_aux_loss_coef", "router_aux_loss_coef", "%s", num);
        }
#undef MAP
        *n_map = n;
    }
    rc = 0;
done:
    json_decref(root);
    return rc;
}

int hf_read_config(const char* dir, HfArch* arch, LlamaConfig* model, char* err, size_t errlen) {
    int aux_given;
    return hf_read_config_full(dir, arch, model, NULL, NULL, &aux_given, err, errlen);
}

int hf_apply_config(TrainConfig* cfg, const char* dir, char* err, size_t errlen) {
    HfArch arch;
    LlamaConfig m;
    Mapped map[24];
    int n = 0, aux_given = 0;
    if (hf_read_config_full(dir, &arch, &m, map, &n, &aux_given, err, errlen)) return -1;
    for (int i = 0; i < n; i++) {
        /* A training choice, not the model's shape: the YAML's value stays. */
        if (!strcmp(map[i].key, "model.router_aux_loss_coef") &&
            config_given(cfg, "model.router_aux_loss_coef"))
            continue;
        char where[PATH_CAP + 96];
        if (!strcmp(map[i].field, "architectures")) /* what the class implies */
            snprintf(where, sizeof where, "%s/config.json: 'architectures' (%s)", PRINTABLE(dir),
                     kArchs[arch].cls);
        else
            snprintf(where, sizeof where, "%s/config.json: '%s'", PRINTABLE(dir), map[i].field);
        if (config_set_external(cfg, map[i].key, map[i].text, where, err, errlen)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* tensor names, both ways                                                  */
/* ------------------------------------------------------------------------ */

int hf_place(const LlamaConfig* m, const char* ours, int stacked, HfPlace* p) {
    const int64_t C = m->dim, hd = llama_head_dim(m), V = m->vocab_size, F = m->ffn_hidden,
                  E = m->n_experts, Fe = m->moe_ffn_hidden;
    memset(p, 0, sizeof *p);
#define SET(r, c, ...)                                              \
    do {                                                            \
        snprintf(p->name, sizeof p->name, __VA_ARGS__);             \
        p->ndim = (c) ? 2 : 1;                                      \
        p->shape[0] = (r);                                          \
        p->shape[1] = (c);                                          \
        return 0;                                                   \
    } while (0)
    if (!strcmp(ours, "tok_emb")) SET(V, C, "model.embed_tokens.weight");
    if (!strcmp(ours, "final_norm")) SET(C, 0, "model.norm.weight");
    if (!strcmp(ours, "lm_head")) SET(V, C, "lm_head.weight");
    int l, e, k = 0;
    char what[64];
    if (sscanf(ours, "layers.%d.experts.%d.%63s%n", &l, &e, what, &k) == 3 && !ours[k]) {
        if (l < 0 || l >= m->n_layers || e < 0 || e >= E || !llama_layer_is_moe(m, l)) return -1;
        const int gate = !strcmp(what, "w_gate"), up = !strcmp(what, "w_up"),
                  down = !strcmp(what, "w_down");
        if (!gate && !up && !down) return -1;
        if (!stacked) {
            if (down) SET(C, Fe, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
            SET(Fe, C, "model.layers.%d.mlp.experts.%d.%s_proj.weight", l, e, gate ? "gate" : "up");
        }
        p->ndim = 3;
        p->shape[0] = E;
        if (down) {
            snprintf(p->name, sizeof p->name, "model.layers.%d.mlp.experts.down_proj", l);
            p->shape[1] = C;
            p->shape[2] = Fe;
            p->offset = (size_t)e * (size_t)(C * Fe);
        } else {
            snprintf(p->name, sizeof p->name, "model.layers.%d.mlp.experts.gate_up_proj", l);
            p->shape[1] = 2 * Fe;
            p->shape[2] = C;
            p->offset = ((size_t)e * 2 + (up ? 1 : 0)) * (size_t)(Fe * C);
        }
        return 0;
    }
    if (sscanf(ours, "layers.%d.%63s%n", &l, what, &k) != 2 || ours[k] || l < 0 ||
        l >= m->n_layers)
        return -1;
    const int moe = llama_layer_is_moe(m, l);
    const int64_t QD = hd * m->n_heads, KVD = hd * m->n_kv_heads;
    const char* pre = "model.layers";
    if (!strcmp(what, "attn_norm")) SET(C, 0, "%s.%d.input_layernorm.weight", pre, l);
    if (!strcmp(what, "mlp_norm")) SET(C, 0, "%s.%d.post_attention_layernorm.weight", pre, l);
    if (!strcmp(what, "wv")) SET(KVD, C, "%s.%d.self_attn.v_proj.weight", pre, l);
    if (!strcmp(what, "wo")) SET(C, QD, "%s.%d.self_attn.o_proj.weight", pre, l);
    p->rope = (int)hd;
    if (!strcmp(what, "wq")) SET(QD, C, "%s.%d.self_attn.q_proj.weight", pre, l);
    if (!strcmp(what, "wk")) SET(KVD, C, "%s.%d.self_attn.k_proj.weight", pre, l);
    if (m->qk_norm && !strcmp(what, "q_norm")) SET(hd, 0, "%s.%d.self_attn.q_norm.weight", pre, l);
    if (m->qk_norm && !strcmp(what, "k_norm")) SET(hd, 0, "%s.%d.self_attn.k_norm.weight", pre, l);
    p->rope = 0;
    if (moe && !strcmp(what, "router")) SET(E, C, "%s.%d.mlp.gate.weight", pre, l);
    if (!moe && !strcmp(what, "w_gate")) SET(F, C, "%s.%d.mlp.gate_proj.weight", pre, l);
    if (!moe && !strcmp(what, "w_up")) SET(F, C, "%s.%d.mlp.up_proj.weight", pre, l);
    if (!moe && !strcmp(what, "w_down")) SET(C, F, "%s.%d.mlp.down_proj.weight", pre, l);
#undef SET
    return -1;
}

/* Every tensor of ours, in the order an HF checkpoint lists a model:
 * embedding, then per block its attention and MLP (experts included), the
 * final norm, the head. */
typedef struct {
    int unit;
    size_t off, numel, rows, cols; /* in the unit */
    char name[64];
} OurTensor;

static OurTensor* our_tensors(const LlamaConfig* m, int* count) {
    int total = 0;
    for (int u = 0; u < llama_num_units(m); u++)
        total += llama_unit_tensors(m, u, NULL, NULL, NULL, 0);
    OurTensor* out = zrt_calloc((size_t)total, sizeof *out, "tensor list");
    int n = 0;
    /* unit 0 first (tied: its final norm moves to the end below), then each
     * block followed by its experts, then the head (untied) */
    int order[FSDP_MAX_UNITS + 1], no = 0;
    order[no++] = 0;
    for (int l = 0; l < m->n_layers; l++) {
        order[no++] = 1 + l;
        const int xu = llama_expert_unit(m, l);
        if (xu > 0) order[no++] = xu;
    }
    if (llama_head_unit(m) != 0) order[no++] = llama_head_unit(m);
    for (int i = 0; i < no; i++) {
        const int u = order[i];
        const int nt = llama_unit_tensors(m, u, NULL, NULL, NULL, 0);
        char(*names)[64] = zrt_malloc((size_t)nt * sizeof *names, "tensor names");
        size_t* rows = zrt_malloc(2 * (size_t)nt * sizeof(size_t), "tensor shapes");
        llama_unit_tensors(m, u, names, rows, rows + nt, nt);
        size_t off = 0;
        for (int t = 0; t < nt; t++) {
            OurTensor* o = &out[n++];
            o->unit = u;
            o->off = off;
            o->rows = rows[t];
            o->cols = rows[nt + t];
            o->numel = o->rows * o->cols;
            snprintf(o->name, sizeof o->name, "%s", names[t]);
            off += o->numel;
        }
        free(names);
        free(rows);
    }
    /* final_norm (and lm_head) go last: a tied model's final norm sits in unit 0 */
    if (m->tie_embeddings) {
        OurTensor tail = out[1];
        memmove(out + 1, out + 2, (size_t)(n - 2) * sizeof *out);
        out[n - 1] = tail;
    }
    *count = n;
    return out;
}

/* ------------------------------------------------------------------------ */
/* import                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    const char* name; /* owned by its st_file */
    int file;
    const st_tensor* t;
    int used;
} SrcTensor;

struct HfSource {
    char dir[PATH_CAP];
    LlamaConfig m;
    int n_files;
    st_file** files;
    char (*file_names)[PATH_CAP];
    SrcTensor* t; /* sorted by name */
    size_t nt;
    unsigned char* stacked; /* per layer: 1 = experts as the stacked 5.x tensors */
    int head_copy;          /* a tied model's file also holds lm_head.weight */
    char summary[160];
};

static int cmp_src(const void* a, const void* b) {
    return strcmp(((const SrcTensor*)a)->name, ((const SrcTensor*)b)->name);
}

static SrcTensor* src_find(HfSource* s, const char* name) {
    SrcTensor key = {.name = name};
    return s->nt ? bsearch(&key, s->t, s->nt, sizeof *s->t, cmp_src) : NULL;
}

void hf_close(HfSource* s) {
    if (!s) return;
    for (int i = 0; i < s->n_files; i++) st_close(s->files[i]);
    free(s->files);
    free(s->file_names);
    free(s->t);
    free(s->stacked);
    free(s);
}

const char* hf_source_summary(const HfSource* s) { return s->summary; }

static int add_file(HfSource* s, const char* name, char* err, size_t errlen) {
    for (int i = 0; i < s->n_files; i++)
        if (!strcmp(s->file_names[i], name)) return i;
    if (!name[0] || strchr(name, '/') || !strcmp(name, "..") || !strcmp(name, "."))
        return zrt_errf(err, errlen, "%s/model.safetensors.index.json: shard name '%s' is not a "
                        "file name in the directory", PRINTABLE(s->dir), PRINTABLE(name)), -2;
    s->files = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *s->files);
    s->file_names = realloc(s->file_names, (size_t)(s->n_files + 1) * sizeof *s->file_names);
    trainCheck(s->files && s->file_names, "out of memory");
    char path[PATH_CAP * 2];
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    snprintf(s->file_names[s->n_files], PATH_CAP, "%s", name);
    char e[PATH_CAP + 600];
    if (st_open(path, &s->files[s->n_files], e, sizeof e)) {
        if (access(path, F_OK))
            zrt_errf(err, errlen, "%s: the shard is missing (%s/model.safetensors.index.json "
                     "lists it)", PRINTABLE(path), PRINTABLE(s->dir));
        else
            zrt_errf(err, errlen, "%s", e);
        return -2;
    }
    return s->n_files++;
}

int hf_open(const char* dir, const LlamaConfig* m, HfSource** out, char* err, size_t errlen) {
    *out = NULL;
    HfSource* s = zrt_calloc(1, sizeof *s, "HF source");
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    s->m = *m;
    s->stacked = zrt_calloc((size_t)m->n_layers + 1, 1, "layer flags");
    char path[PATH_CAP * 2];
    int rc = -1;
    json_t* index = NULL;

    /* The files, as from_pretrained finds them: one model.safetensors, else
     * the index and the shards it names. */
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (add_file(s, "model.safetensors", err, errlen) < 0) goto done;
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        json_error_t je;
        index = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
        if (!index) {
            char bin[PATH_CAP * 2];
            snprintf(bin, sizeof bin, "%s/pytorch_model.bin", dir);
            if (access(path, F_OK))
                zrt_errf(err, errlen, "%s: no model.safetensors and no model.safetensors.index.json"
                         "%s", PRINTABLE(dir), access(bin, F_OK) ? "" : " (pytorch_model.bin, a "
                         "pickle, is not read: save the model with safe_serialization)");
            else
                zrt_errf(err, errlen, "%s:%d:%d: not valid JSON: %s", PRINTABLE(path), je.line,
                         je.column, PRINTABLE(je.text));
            goto done;
        }
        json_t* wm = json_object_get(index, "weight_map");
        if (!json_is_object(wm) || !json_object_size(wm)) {
            zrt_errf(err, errlen, "%s: no \"weight_map\" object naming the shards",
                     PRINTABLE(path));
            goto done;
        }
        const char* k;
        json_t* v;
        json_object_foreach(wm, k, v) {
            if (!json_is_string(v)) {
                zrt_errf(err, errlen, "%s: weight_map entry '%s' is not a file name",
                         PRINTABLE(path), PRINTABLE(k));
                goto done;
            }
            int fi = add_file(s, json_string_value(v), err, errlen);
            if (fi < 0) goto done;
            if (!st_find(s->files[fi], k)) {
                zrt_errf(err, errlen, "%s/%s: no tensor '%s', which the index places there",
                         PRINTABLE(dir), PRINTABLE(s->file_names[fi]), PRINTABLE(k));
                goto done;
            }
        }
    }
    /* Every tensor of every file, by name. */
    for (int f = 0; f < s->n_files; f++) s->nt += st_num_tensors(s->files[f]);
    s->t = zrt_calloc(s->nt ? s->nt : 1, sizeof *s->t, "HF tensors");
    size_t n = 0;
    for (int f = 0; f < s->n_files; f++)
        for (size_t i = 0; i < st_num_tensors(s->files[f]); i++) {
            const st_tensor* t = st_tensor_at(s->files[f], i);
            s->t[n++] = (SrcTensor){t->name, f, t, 0};
        }
    qsort(s->t, s->nt, sizeof *s->t, cmp_src);
    for (size_t i = 1; i < s->nt; i++)
        if (!strcmp(s->t[i - 1].name, s->t[i].name)) {
            zrt_errf(err, errlen, "%s: tensor '%s' is in both %s and %s", PRINTABLE(dir),
                     PRINTABLE(s->t[i].name), PRINTABLE(s->file_names[s->t[i - 1].file]),
                     PRINTABLE(s->file_names[s->t[i].file]));
            goto done;
        }
    for (int l = 0; l < m->n_layers; l++) {
        char name[128];
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj", l);
        s->stacked[l] = llama_layer_is_moe(m, l) && src_find(s, name) != NULL;
    }

    /* Every tensor the model needs: there, a float dtype, the right shape. */
    int count;
    OurTensor* ours = our_tensors(m, &count);
    int dt_seen[3] = {0, 0, 0};
    for (int i = 0; i < count; i++) {
        HfPlace p;
        int l = -1;
        sscanf(ours[i].name, "layers.%d.", &l);
        trainCheck(!hf_place(m, ours[i].name, l >= 0 && s->stacked[l], &p),
                   "no HF name for %s", ours[i].name);
        SrcTensor* t = src_find(s, p.name);
        if (!t) {
            char also[200] = "";
            if (l >= 0 && strstr(p.name, ".experts."))
                snprintf(also, sizeof also, " (nor the stacked model.layers.%d.mlp.experts."
                         "gate_up_proj / down_proj)", l);
            zrt_errf(err, errlen, "%s: no tensor '%s'%s, which the model of config.json needs "
                     "for our %s", PRINTABLE(dir), p.name, also, ours[i].name);
            free(ours);
            goto done;
        }
        const char* fname = s->file_names[t->file];
        const char* dt = t->t->dtype;
        if (strcmp(dt, "F32") && strcmp(dt, "BF16") && strcmp(dt, "F16")) {
            zrt_errf(err, errlen, "%s/%s: tensor '%s' is %s; the import reads F32, BF16 and F16",
                     PRINTABLE(dir), PRINTABLE(fname), p.name, dt);
            free(ours);
            goto done;
        }
        dt_seen[!strcmp(dt, "F32") ? 0 : !strcmp(dt, "BF16") ? 1 : 2] = 1;
        int same = t->t->ndim == p.ndim;
        for (int d = 0; same && d < p.ndim; d++) same = t->t->shape[d] == p.shape[d];
        if (!same) {
            char got[96] = "", want[96] = "";
            size_t ug = 0, uw = 0;
            for (int d = 0; d < t->t->ndim && ug < sizeof got; d++)
                ug += (size_t)snprintf(got + ug, sizeof got - ug, "%s%lld", d ? ", " : "",
                                       (long long)t->t->shape[d]);
            for (int d = 0; d < p.ndim && uw < sizeof want; d++)
                uw += (size_t)snprintf(want + uw, sizeof want - uw, "%s%lld", d ? ", " : "",
                                       (long long)p.shape[d]);
            zrt_errf(err, errlen, "%s/%s: tensor '%s' has shape (%s), the model of config.json "
                     "needs (%s)", PRINTABLE(dir), PRINTABLE(fname), p.name, got, want);
            free(ours);
            goto done;
        }
        t->used = 1;
    }
    free(ours);
    /* A tied model's file may hold the head too (it must equal the
     * embedding: checked when read); rotary inv_freq buffers are derived
     * from rope_theta. Anything else would be dropped: refused. */
    SrcTensor* head = src_find(s, "lm_head.weight");
    if (m->tie_embeddings && head) {
        SrcTensor* emb = src_find(s, "model.embed_tokens.weight");
        if (head->t->numel != emb->t->numel) {
            zrt_errf(err, errlen, "%s/%s: tensor 'lm_head.weight' of a tied model "
                     "(tie_word_embeddings) has another shape than the embedding", PRINTABLE(dir),
                     PRINTABLE(s->file_names[head->file]));
            goto done;
        }
        head->used = 1;
        s->head_copy = 1;
    }
    for (size_t i = 0; i < s->nt; i++) {
        static const char inv[] = "rotary_emb.inv_freq";
        const size_t ln = strlen(s->t[i].name), li = sizeof inv - 1;
        if (!s->t[i].used && ln >= li && !strcmp(s->t[i].name + ln - li, inv)) s->t[i].used = 1;
        if (!s->t[i].used) {
            zrt_errf(err, errlen, "%s/%s: tensor '%s' has no place in the model of config.json "
                     "(%s, %d layers%s); refusing to leave it out", PRINTABLE(dir),
                     PRINTABLE(s->file_names[s->t[i].file]), PRINTABLE(s->t[i].name),
                     m->n_experts ? "Qwen3-MoE" : m->qk_norm ? "Qwen3" : "Llama", m->n_layers,
                     m->tie_embeddings ? ", tied embeddings" : "");
            goto done;
        }
    }
    int any_stacked = 0;
    for (int l = 0; l < m->n_layers; l++) any_stacked |= s->stacked[l];
    snprintf(s->summary, sizeof s->summary, "%d %s, %s%s%s%s%s%s", s->n_files,
             index ? "shards" : "file", dt_seen[0] ? "fp32" : "",
             dt_seen[0] && (dt_seen[1] || dt_seen[2]) ? " + " : "", dt_seen[1] ? "bf16" : "",
             dt_seen[1] && dt_seen[2] ? " + " : "", dt_seen[2] ? "fp16" : "",
             any_stacked ? ", experts stacked" : m->n_experts ? ", experts by name" : "");
    rc = 0;
done:
    json_decref(index);
    if (rc) hf_close(s);
    else *out = s;
    return rc;
}

/* n values of a tensor's dtype at src -> fp32, exactly. */
static void widen(float* dst, const void* src, size_t n, const char* dtype) {
    if (!strcmp(dtype, "F32")) {
        memcpy(dst, src, n * sizeof(float));
    } else if (!strcmp(dtype, "BF16")) {
        const uint16_t* h = src;
        for (size_t i = 0; i < n; i++) dst[i] = zipcclBf16ToFloat(h[i]);
    } else {
        const uint16_t* h = src;
        for (size_t i = 0; i < n; i++) dst[i] = zipcclFp16ToFloat(h[i]);
    }
}

/* Our tensor from its HF place: numel values into dst, rows permuted back. */
static int read_tensor(HfSource* s, const HfPlace* p, size_t rows, size_t cols, float* dst,
                       char* err, size_t errlen) {
    SrcTensor* t = src_find(s, p->name);
    const size_t n = rows * cols, es = t->t->elem_size;
    void* raw = zrt_malloc(n * es + 1, "tensor read");
    float* tmp = p->rope ? zrt_malloc(n * sizeof(float), "tensor read") : dst;
    char e[600];
    if (st_read_range(s->files[t->file], t->t, (uint64_t)p->offset * es, n * es, raw, e,
                      sizeof e)) {
        free(raw);
        if (tmp != dst) free(tmp);
        return zrt_errf(err, errlen, "%s/%s: %s", PRINTABLE(s->dir),
                        PRINTABLE(s->file_names[t->file]), e);
    }
    widen(tmp, raw, n, t->t->dtype);
    free(raw);
    if (p->rope) {
        for (size_t i = 0; i < rows; i++)
            memcpy(dst + hf_rope_row(i, (size_t)p->rope) * cols, tmp + i * cols,
                   cols * sizeof(float));
        free(tmp);
    }
    return 0;
}

int hf_read_unit(HfSource* s, int unit, float* full, char* err, size_t errlen) {
    const LlamaConfig* m = &s->m;
    const int nt = llama_unit_tensors(m, unit, NULL, NULL, NULL, 0);
    char(*names)[64] = zrt_malloc((size_t)nt * sizeof *names, "tensor names");
    size_t* rows = zrt_malloc(2 * (size_t)nt * sizeof(size_t), "tensor shapes");
    llama_unit_tensors(m, unit, names, rows, rows + nt, nt);
    const int l = llama_unit_layer(m, unit);
    size_t off = 0;
    int rc = 0;
    for (int t = 0; t < nt && !rc; t++) {
        HfPlace p;
        hf_place(m, names[t], l >= 0 && s->stacked[l], &p);
        rc = read_tensor(s, &p, rows[t], rows[nt + t], full + off, err, errlen);
        off += rows[t] * rows[nt + t];
    }
    if (!rc && unit == 0 && s->head_copy) {
        const size_t n = (size_t)m->vocab_size * m->dim;
        float* head = zrt_malloc(n * sizeof(float), "tied head");
        HfPlace p;
        hf_place(m, "lm_head", 0, &p);
        rc = read_tensor(s, &p, (size_t)m->vocab_size, (size_t)m->dim, head, err, errlen);
        if (!rc && memcmp(head, full, n * sizeof(float)))
            rc = zrt_errf(err, errlen,
                          "%s/%s: lm_head.weight differs from model.embed_tokens.weight, but "
                          "config.json ties them (tie_word_embeddings): which one is the model?",
                          PRINTABLE(s->dir),
                          PRINTABLE(s->file_names[src_find(s, "lm_head.weight")->file]));
        free(head);
    }
    free(names);
    free(rows);
    return rc;
}

int hf_load(Fsdp* f, HfSource* s, char* err, size_t errlen) {
    for (int u = 0; u < f->n_units; u++) {
        float* full = zrt_calloc(fsdp_full_floats(f, u), sizeof(float), "HF unit");
        int rc = hf_read_unit(s, u, full, err, errlen);
        if (!rc) fsdp_load_full(f, u, 0, full);
        free(full);
        if (rc) return rc;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* export                                                                   */
/* ------------------------------------------------------------------------ */

/* config.json as Python's json.dumps(indent=2, sort_keys=True) writes it,
 * which is what HF's save_pretrained produces. */
static int cmp_cstr(const void* a, const void* b) {
    return strcmp(*(const char* const*)a, *(const char* const*)b);
}

static void emit(FILE* fp, json_t* v, int indent) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const size_t n = json_object_size(v);
        if (!n) {
            fputs("{}", fp);
            return;
        }
        const char** keys = zrt_malloc(n * sizeof *keys, "json keys");
        size_t i = 0;
        const char* k;
        json_t* x;
        json_object_foreach(v, k, x) keys[i++] = k;
        qsort(keys, n, sizeof *keys, cmp_cstr);
        fputs("{\n", fp);
        for (i = 0; i < n; i++) {
            json_t* key = json_string(keys[i]);
            char* ks = json_dumps(key, JSON_ENCODE_ANY);
            fprintf(fp, "%*s%s: ", indent + 2, "", ks);
            free(ks);
            json_decref(key);
            emit(fp, json_object_get(v, keys[i]), indent + 2);
            fputs(i + 1 < n ? ",\n" : "\n", fp);
        }
        fprintf(fp, "%*s}", indent, "");
        free(keys);
        return;
    }
    case JSON_ARRAY: {
        const size_t n = json_array_size(v);
        if (!n) {
            fputs("[]", fp);
            return;
        }
        fputs("[\n", fp);
        for (size_t i = 0; i < n; i++) {
            fprintf(fp, "%*s", indent + 2, "");
            emit(fp, json_array_get(v, i), indent + 2);
            fputs(i + 1 < n ? ",\n" : "\n", fp);
        }
        fprintf(fp, "%*s]", indent, "");
        return;
    }
    case JSON_REAL: {
        char b[64];
        shortest(json_real_value(v), b, sizeof b);
        fputs(b, fp);
        return;
    }
    default: {
        char* s = json_dumps(v, JSON_ENCODE_ANY);
        fputs(s ? s : "null", fp);
        free(s);
        return;
    }
    }
}

/* A float of ours as the double its shortest text names (1e-06, not
 * 9.99999997e-07). */
static json_t* real_of_float(float x) {
    char b[64];
    for (int p = 1; p <= 9; p++) {
        snprintf(b, sizeof b, "%.*g", p, (double)x);
        if (strtof(b, NULL) == x) break;
    }
    return json_real(strtod(b, NULL));
}

static int write_json_file(json_t* root, const char* path, char* err, size_t errlen) {
    char tmp[PATH_CAP * 2 + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* fp = fopen(tmp, "w");
    if (!fp) return zrt_errf(err, errlen, "cannot write %s: %s", PRINTABLE(tmp), strerror(errno));
    emit(fp, root, 0);
    fputc('\n', fp);
    if (fclose(fp) || rename(tmp, path))
        return zrt_errf(err, errlen, "cannot write %s: %s", PRINTABLE(path), strerror(errno));
    return 0;
}

static void set(json_t* o, const char* k, json_t* v) { json_object_set_new(o, k, v); }

static int write_config(const LlamaConfig* m, HfArch arch, const HfExportOptions* opt, json_t* src,
                        const char* path, char* err, size_t errlen) {
    const zipcclDataType_t dtype = opt->dtype;
    json_t* o = src ? json_deep_copy(src) : json_object();
    if (!src) { /* what HF writes for a fresh model; the data's special tokens */
        set(o, "bos_token_id", opt->bos_id >= 0 ? json_integer(opt->bos_id) : json_null());
        set(o, "eos_token_id", opt->eos_id >= 0 ? json_integer(opt->eos_id) : json_null());
        set(o, "pad_token_id", json_null());
        set(o, "initializer_range", json_real(0.02));
        set(o, "use_cache", json_true());
    }
    json_t* a = json_array();
    json_array_append_new(a, json_string(kArchs[arch].cls));
    set(o, "architectures", a);
    set(o, "model_type", json_string(kArchs[arch].model_type));
    set(o, "vocab_size", json_integer(m->vocab_size));
    set(o, "hidden_size", json_integer(m->dim));
    set(o, "intermediate_size", json_integer(m->ffn_hidden));
    set(o, "num_hidden_layers", json_integer(m->n_layers));
    set(o, "num_attention_heads", json_integer(m->n_heads));
    set(o, "num_key_value_heads", json_integer(m->n_kv_heads));
    set(o, "head_dim", json_integer(llama_head_dim(m)));
    set(o, "max_position_embeddings", json_integer(m->max_seq_len));
    set(o, "rms_norm_eps", real_of_float(m->norm_eps));
    set(o, "tie_word_embeddings", json_boolean(m->tie_embeddings));
    set(o, "hidden_act", json_string("silu"));
    set(o, "attention_bias", json_false());
    set(o, "attention_dropout", json_real(0.0));
    /* both spellings of the RoPE base: rope_parameters (transformers 5),
     * rope_theta (4.x and the tools that read its configs) */
    json_t* rp = json_object();
    set(rp, "rope_theta", real_of_float(m->rope_theta));
    set(rp, "rope_type", json_string("default"));
    set(o, "rope_parameters", rp);
    set(o, "rope_theta", real_of_float(m->rope_theta));
    const char* dt = dtype == zipcclBfloat16 ? "bfloat16" : dtype == zipcclFloat16 ? "float16"
                                                                                  : "float32";
    set(o, "dtype", json_string(dt));
    if (json_object_get(o, "torch_dtype")) set(o, "torch_dtype", json_string(dt));
    if (arch == HF_LLAMA) {
        set(o, "mlp_bias", json_false());
    } else {
        set(o, "use_sliding_window", json_false());
        set(o, "sliding_window", json_null());
    }
    if (arch == HF_QWEN3_MOE) {
        /* the field name the source used (5.x writes num_local_experts,
         * published 4.x checkpoints num_experts, which 5.x maps) */
        const char* ek = json_object_get(o, "num_local_experts") && !json_object_get(o, "num_experts")
                             ? "num_local_experts" : "num_experts";
        set(o, ek, json_integer(m->n_experts));
        set(o, "num_experts_per_tok", json_integer(m->n_experts_per_tok));
        set(o, "moe_intermediate_size", json_integer(m->moe_ffn_hidden));
        set(o, "decoder_sparse_step", json_integer(m->decoder_sparse_step));
        set(o, "norm_topk_prob", json_boolean(m->norm_topk_prob));
        set(o, "router_aux_loss_coef", real_of_float(m->router_aux_loss_coef));
        json_t* only = json_array();
        for (int l = 0; l < m->n_layers && l < 256; l++)
            if (m->mlp_only_layers[l / 64] >> (l % 64) & 1)
                json_array_append_new(only, json_integer(l));
        set(o, "mlp_only_layers", only);
    }
    int rc = write_json_file(o, path, err, errlen);
    json_decref(o);
    return rc;
}

static void mkdir_p(const char* dir) {
    char tmp[PATH_CAP];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char* p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0755);
            *p = '/';
        }
    mkdir(tmp, 0755);
}

static int copy_file(const char* from, const char* to, char* err, size_t errlen) {
    FILE* in = fopen(from, "rb");
    if (!in) return zrt_errf(err, errlen, "cannot read %s: %s", PRINTABLE(from), strerror(errno));
    char tmp[PATH_CAP * 2 + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", to);
    FILE* out = fopen(tmp, "wb");
    if (!out) {
        fclose(in);
        return zrt_errf(err, errlen, "cannot write %s: %s", PRINTABLE(tmp), strerror(errno));
    }
    char buf[1 << 16];
    size_t n;
    int ok = 1;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) ok &= fwrite(buf, 1, n, out) == n;
    ok &= !ferror(in);
    fclose(in);
    if (fclose(out) || !ok || rename(tmp, to))
        return zrt_errf(err, errlen, "cannot write %s: %s", PRINTABLE(to), strerror(errno));
    return 0;
}

/* Files an inference server or an evaluation harness reads beside the
 * weights; copied from the model the run started from. */
static const char* const kTokenizerFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "vocab.json",     "merges.txt",            "generation_config.json",  "chat_template.jinja"};

/* Stale weights of an earlier export into the same directory. */
static void remove_old_weights(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return;
    struct dirent* e;
    char p[PATH_CAP * 2];
    while ((e = readdir(d))) {
        const char* n = e->d_name;
        int a, b, k = 0;
        if (!strcmp(n, "model.safetensors") || !strcmp(n, "model.safetensors.index.json") ||
            (sscanf(n, "model-%5d-of-%5d.safetensors%n", &a, &b, &k) == 2 && !n[k])) {
            snprintf(p, sizeof p, "%s/%s", dir, n);
            unlink(p);
        }
    }
    closedir(d);
}

static const float* units_get(void* ctx, int unit) { return ((const float* const*)ctx)[unit]; }

int hf_export(const LlamaConfig* m, const float* const* units, const HfExportOptions* o,
              const char* outdir, char* err, size_t errlen) {
    return hf_export_stream(m, units_get, (void*)units, o, outdir, err, errlen);
}

int hf_export_unit_order(const LlamaConfig* m, int* order, int max) {
    int count, n = 0;
    OurTensor* ts = our_tensors(m, &count);
    for (int i = 0; i < count; i++)
        if (i == 0 || ts[i].unit != ts[i - 1].unit) {
            if (n < max) order[n] = ts[i].unit;
            n++;
        }
    free(ts);
    return n;
}

int hf_export_stream(const LlamaConfig* m, HfUnitFn get, void* ctx, const HfExportOptions* o,
                     const char* outdir, char* err, size_t errlen) {
    HfArch arch;
    json_t* src = NULL;
    char path[PATH_CAP * 2];
    const int from = o->source_dir && o->source_dir[0];
    if (from) {
        LlamaConfig sm;
        if (hf_read_config(o->source_dir, &arch, &sm, err, errlen)) return -1;
        snprintf(path, sizeof path, "%s/config.json", o->source_dir);
        src = json_load_file(path, 0, NULL);
        if (!src) return zrt_errf(err, errlen, "%s: cannot read", PRINTABLE(path));
    } else if (m->n_experts > 0) {
        if (!m->qk_norm) {
            return zrt_errf(err, errlen,
                            "export: no Hugging Face architecture has experts without QK-norm "
                            "(Qwen3MoeForCausalLM normalises q and k; model.qk_norm is false)");
        }
        arch = HF_QWEN3_MOE;
    } else {
        arch = m->qk_norm ? HF_QWEN3 : HF_LLAMA;
    }
    if ((arch == HF_LLAMA) != !m->qk_norm || (arch == HF_QWEN3_MOE) != (m->n_experts > 0)) {
        json_decref(src);
        return zrt_errf(err, errlen, "export: the model (qk_norm %d, %d experts) is not a %s",
                        m->qk_norm, m->n_experts, kArchs[arch].cls);
    }
    if (from) {
        char a[PATH_MAX], b[PATH_MAX];
        if (realpath(o->source_dir, a) && realpath(outdir, b) && !strcmp(a, b)) {
            json_decref(src);
            return zrt_errf(err, errlen, "export: %s is the directory the model came from "
                            "(model.init_from); writing there would replace its weights",
                            PRINTABLE(outdir));
        }
    }
    const size_t es = zipcclTypeSize(o->dtype);
    const char* st_dtype = o->dtype == zipcclBfloat16 ? "BF16" : o->dtype == zipcclFloat16 ? "F16"
                                                                                          : "F32";
    mkdir_p(outdir);
    struct stat sb;
    if (stat(outdir, &sb) || !S_ISDIR(sb.st_mode)) {
        json_decref(src);
        return zrt_errf(err, errlen, "export: cannot create the directory %s: %s",
                        PRINTABLE(outdir), strerror(errno));
    }
    remove_old_weights(outdir);

    /* Plan the shards as HF does: tensors in order, a new file when the
     * next tensor would pass the limit. */
    int count;
    OurTensor* ts = our_tensors(m, &count);
    int* shard = zrt_malloc((size_t)count * sizeof(int), "shard plan");
    int n_shards = 0;
    unsigned long long in_shard = 0, total = 0;
    for (int i = 0; i < count; i++) {
        const unsigned long long b = ts[i].numel * es;
        if (i == 0 || (in_shard > 0 && in_shard + b > (unsigned long long)o->max_shard_bytes)) {
            n_shards++;
            in_shard = 0;
        }
        shard[i] = n_shards - 1;
        in_shard += b;
        total += b;
    }
    char(*fnames)[64] = zrt_malloc((size_t)n_shards * sizeof *fnames, "shard names");
    for (int k = 0; k < n_shards; k++) {
        if (n_shards == 1) snprintf(fnames[k], sizeof fnames[k], "model.safetensors");
        else snprintf(fnames[k], sizeof fnames[k], "model-%05d-of-%05d.safetensors", k + 1, n_shards);
    }
    int rc = 0;
    json_t* wmap = json_object();
    for (int k = 0, i = 0; k < n_shards && !rc; k++) {
        st_writer* w = st_writer_begin();
        trainCheck(w, "out of memory");
        void** bufs = zrt_calloc((size_t)count, sizeof(void*), "export buffers");
        int first = i;
        for (; i < count && shard[i] == k && !rc; i++) {
            const OurTensor* t = &ts[i];
            HfPlace p;
            trainCheck(!hf_place(m, t->name, 0, &p), "no HF name for %s", t->name);
            const float* base = get(ctx, t->unit);
            if (!base) {
                rc = zrt_errf(err, errlen, "export: the parameters of %s could not be read",
                              t->name);
                break;
            }
            const float* x = base + t->off;
            bufs[i] = zrt_malloc(t->numel * es + 1, "export tensor");
            for (size_t r = 0; r < t->rows && !rc; r++) {
                /* HF row r is our row perm(r) for q/k; others in order */
                const float* row = x + (p.rope ? hf_rope_row(r, (size_t)p.rope) : r) * t->cols;
                char* dst = (char*)bufs[i] + r * t->cols * es;
                if (o->dtype == zipcclFloat32) {
                    memcpy(dst, row, t->cols * sizeof(float));
                } else if (o->dtype == zipcclBfloat16) {
                    for (size_t c = 0; c < t->cols; c++) ((uint16_t*)dst)[c] = zipcclFloatToBf16(row[c]);
                } else {
                    for (size_t c = 0; c < t->cols; c++) {
                        if (isfinite(row[c]) && fabsf(row[c]) >= 65520.0f)
                            rc = zrt_errf(err, errlen,
                                          "export fp16: %s (our %s) holds %g, beyond fp16's "
                                          "largest value 65504; export bf16 or fp32 instead",
                                          p.name, t->name, (double)row[c]);
                        ((uint16_t*)dst)[c] = zipcclFloatToFp16(row[c]);
                    }
                }
            }
            if (rc) break;
            int64_t shape[2] = {p.shape[0], p.shape[1]};
            char e[400];
            if (st_writer_add(w, p.name, st_dtype, p.ndim, shape, bufs[i], t->numel * es, e,
                              sizeof e))
                rc = zrt_errf(err, errlen, "export: %s", e);
            json_object_set_new(wmap, p.name, json_string(fnames[k]));
        }
        if (!rc) {
            char e[PATH_CAP + 400];
            st_writer_set_metadata(w, "format", "pt", e, sizeof e);
            snprintf(path, sizeof path, "%s/%s", outdir, fnames[k]);
            if (st_writer_write(w, path, e, sizeof e)) rc = zrt_errf(err, errlen, "export: %s", e);
        }
        for (int j = first; j < count; j++) free(bufs[j]);
        free(bufs);
        st_writer_free(w);
    }
    if (!rc && n_shards > 1) {
        json_t* idx = json_object();
        json_t* md = json_object();
        unsigned long long params = 0;
        for (int i = 0; i < count; i++) params += ts[i].numel;
        set(md, "total_size", json_integer((json_int_t)total));
        set(md, "total_parameters", json_integer((json_int_t)params));
        set(idx, "metadata", md);
        set(idx, "weight_map", json_incref(wmap));
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", outdir);
        rc = write_json_file(idx, path, err, errlen);
        json_decref(idx);
    }
    json_decref(wmap);
    free(fnames);
    free(shard);
    free(ts);
    if (!rc) {
        snprintf(path, sizeof path, "%s/config.json", outdir);
        rc = write_config(m, arch, o, src, path, err, errlen);
    }
    json_decref(src);
    /* The tokenizer of the model it started from, else the data's. */
    int copied = 0;
    for (size_t i = 0; !rc && from && i < sizeof kTokenizerFiles / sizeof kTokenizerFiles[0]; i++) {
        char a[PATH_CAP * 2], b[PATH_CAP * 2];
        snprintf(a, sizeof a, "%s/%s", o->source_dir, kTokenizerFiles[i]);
        snprintf(b, sizeof b, "%s/%s", outdir, kTokenizerFiles[i]);
        if (access(a, R_OK)) continue;
        rc = copy_file(a, b, err, errlen);
        copied += !strcmp(kTokenizerFiles[i], "tokenizer.json");
    }
    if (!rc && !copied && o->tokenizer && o->tokenizer[0] && !access(o->tokenizer, R_OK)) {
        snprintf(path, sizeof path, "%s/tokenizer.json", outdir);
        rc = copy_file(o->tokenizer, path, err, errlen);
    }
    return rc;
}
