/*
 * config.c — YAML config reader (libyaml document API) and --set overrides.
 *
 * Every scalar key lives in one table (kKeys) with its type, its place in
 * TrainConfig and its range. The YAML walker flattens nested mappings into
 * dotted keys ("model.dim") and hands each scalar to the same setter that
 * `--set` uses, so both paths refuse the same things with the same words.
 * The one non-scalar key, comm.overrides, is a list of mappings read by hand.
 *
 * Left out: anchors and merge keys beyond libyaml's own resolution.
 */
#include "config.h"
#include "log.h"

#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

typedef enum { K_INT, K_I64, K_FLOAT, K_BOOL, K_STR, K_STRATEGY, K_CODEC, K_DTYPE } KeyType;

typedef struct {
    const char* name;
    KeyType type;
    size_t offset;
    double lo, hi;     /* numeric range, inclusive */
    size_t size;       /* K_STR: buffer size */
    const char* help;  /* shown with range errors */
} KeyDesc;

#define OFF(field) offsetof(TrainConfig, field)
#define SZ(field) sizeof(((TrainConfig*)0)->field)
static const KeyDesc kKeys[] = {
    {"model.vocab_size", K_INT, OFF(model.vocab_size), 2, 1 << 24, 0, "tokens in the vocabulary"},
    {"model.dim", K_INT, OFF(model.dim), 1, 65536, 0, "model width C"},
    {"model.n_layers", K_INT, OFF(model.n_layers), 1, 1024, 0, "transformer blocks"},
    {"model.n_heads", K_INT, OFF(model.n_heads), 1, 1024, 0, "attention heads"},
    {"model.n_kv_heads", K_INT, OFF(model.n_kv_heads), 1, 1024, 0, "key/value heads"},
    {"model.ffn_hidden", K_INT, OFF(model.ffn_hidden), 1, 1 << 20, 0, "SwiGLU hidden width"},
    {"model.max_seq_len", K_INT, OFF(model.max_seq_len), 1, 1 << 20, 0, "longest sequence"},
    {"model.rope_theta", K_FLOAT, OFF(model.rope_theta), 1, 1e12, 0, "RoPE base"},
    {"model.norm_eps", K_FLOAT, OFF(model.norm_eps), 1e-12, 1, 0, "RMSNorm epsilon"},
    {"model.tie_embeddings", K_BOOL, OFF(model.tie_embeddings), 0, 1, 0, ""},
    {"data.path", K_STR, OFF(data.path), 0, 0, SZ(data.path), "text or .bin token file"},
    {"data.tokenizer", K_STR, OFF(data.tokenizer), 0, 0, SZ(data.tokenizer), "byte|bpe|u16|i32"},
    {"data.bpe_merges", K_INT, OFF(data.bpe_merges), 1, 65536, 0, "BPE merges (tokenizer bpe)"},
    {"data.seq_len", K_INT, OFF(data.seq_len), 1, 1 << 20, 0, "tokens per sequence"},
    {"data.batch_size", K_INT, OFF(data.batch_size), 1, 1 << 16, 0, "sequences per rank"},
    {"data.grad_accum", K_INT, OFF(data.grad_accum), 1, 1 << 16, 0, "micro-batches per step"},
    {"data.val_fraction", K_FLOAT, OFF(data.val_fraction), 0, 0.5, 0, "validation share"},
    {"data.val_every", K_INT, OFF(data.val_every), 0, INT_MAX, 0, "0 disables validation"},
    {"data.val_batches", K_INT, OFF(data.val_batches), 1, 1 << 16, 0, ""},
    {"data.seed", K_I64, OFF(data.seed), 0, 9e18, 0, ""},
    {"train.steps", K_INT, OFF(train.steps), 1, INT_MAX, 0, "optimizer steps"},
    {"train.seed", K_I64, OFF(train.seed), 0, 9e18, 0, "parameter init seed"},
    {"optimizer.lr", K_FLOAT, OFF(optim.lr), 0, 10, 0, "peak learning rate"},
    {"optimizer.min_lr", K_FLOAT, OFF(optim.min_lr), 0, 10, 0, "lr at the end of the cosine"},
    {"optimizer.beta1", K_FLOAT, OFF(optim.beta1), 0, 0.999999, 0, ""},
    {"optimizer.beta2", K_FLOAT, OFF(optim.beta2), 0, 0.99999999, 0, ""},
    {"optimizer.eps", K_FLOAT, OFF(optim.eps), 0, 1, 0, ""},
    {"optimizer.weight_decay", K_FLOAT, OFF(optim.weight_decay), 0, 10, 0, ""},
    {"optimizer.grad_clip", K_FLOAT, OFF(optim.grad_clip), 0, 1e9, 0, "0 disables clipping"},
    {"schedule.warmup_steps", K_INT, OFF(schedule.warmup_steps), 0, INT_MAX, 0, ""},
    {"schedule.total_steps", K_INT, OFF(schedule.total_steps), 0, INT_MAX, 0,
     "cosine length, 0 = train.steps"},
    {"parallelism.fsdp", K_BOOL, OFF(parallel.fsdp), 1, 1, 0, "FSDP is the only mode"},
    {"parallelism.reshard_after_forward", K_BOOL, OFF(parallel.reshard_after_forward), 0, 1, 0,
     ""},
    {"parallelism.prefetch", K_BOOL, OFF(parallel.prefetch), 0, 1, 0, ""},
    {"comm.strategy", K_STRATEGY, OFF(comm.strategy), 1, 4, 0, "native|raw|compressed|auto"},
    {"comm.allgather", K_STRATEGY, OFF(comm.allgather), 0, 4, 0,
     "default|native|raw|compressed|auto"},
    {"comm.reducescatter", K_STRATEGY, OFF(comm.reducescatter), 0, 4, 0,
     "default|native|raw|compressed|auto"},
    {"comm.codec", K_CODEC, OFF(comm.codec), 0, 0, 0, "fast|dense|f3"},
    {"comm.param_dtype", K_DTYPE, OFF(comm.param_dtype), 0, 0, 0, "fp32|bf16"},
    {"comm.reduce_dtype", K_DTYPE, OFF(comm.reduce_dtype), 0, 0, 0, "fp32|bf16"},
    {"logging.every", K_INT, OFF(log.every), 1, INT_MAX, 0, ""},
    {"logging.json", K_STR, OFF(log.json), 0, 0, SZ(log.json), "JSON-lines log path"},
    {"checkpoint.dir", K_STR, OFF(ckpt.dir), 0, 0, SZ(ckpt.dir), "\"\" disables"},
    {"checkpoint.every", K_INT, OFF(ckpt.every), 0, INT_MAX, 0, "0: only at the end"},
    {"checkpoint.keep", K_INT, OFF(ckpt.keep), 0, INT_MAX, 0, "0 keeps all"},
};
#define N_KEYS (sizeof kKeys / sizeof kKeys[0])

static const char* const kSections[] = {"model",       "data", "train",   "optimizer",
                                        "schedule",    "parallelism", "comm",
                                        "logging",     "checkpoint"};

void config_defaults(TrainConfig* c) {
    memset(c, 0, sizeof *c);
    c->model = (LlamaConfig){.vocab_size = 256, .dim = 64, .n_layers = 2, .n_heads = 4,
                             .n_kv_heads = 2, .ffn_hidden = 192, .max_seq_len = 64,
                             .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tie_embeddings = 1};
    snprintf(c->data.path, sizeof c->data.path, "data/fortunes.txt");
    snprintf(c->data.tokenizer, sizeof c->data.tokenizer, "byte");
    c->data.bpe_merges = 512;
    c->data.seq_len = 64;
    c->data.batch_size = 4;
    c->data.grad_accum = 1;
    c->data.val_fraction = 0.05;
    c->data.val_every = 0;
    c->data.val_batches = 4;
    c->data.seed = 1234;
    c->train.steps = 100;
    c->train.seed = 42;
    c->optim.lr = 1e-3;
    c->optim.min_lr = 1e-4;
    c->optim.beta1 = 0.9;
    c->optim.beta2 = 0.95;
    c->optim.eps = 1e-8;
    c->optim.weight_decay = 0.1;
    c->optim.grad_clip = 1.0;
    c->schedule.warmup_steps = 0;
    c->schedule.total_steps = 0;
    c->parallel.fsdp = 1;
    c->parallel.reshard_after_forward = 1;
    c->parallel.prefetch = 1;
    c->comm.strategy = zipcclStrategyCompressed;
    c->comm.allgather = zipcclStrategyDefault;
    c->comm.reducescatter = zipcclStrategyDefault;
    c->comm.codec = zipcclCodecFast;
    c->comm.param_dtype = zipcclFloat32;
    c->comm.reduce_dtype = zipcclFloat32;
    c->log.every = 1;
    c->ckpt.every = 0;
    c->ckpt.keep = 2;
}


static const char* strategy_names[] = {"default", "native", "raw", "compressed", "auto"};

const char* config_codec_name(zipcclCodec_t c) {
    return zipcclCodecName(c == zipcclCodecDefault ? zipcclCodecFast : c);
}

static int parse_strategy(const char* v, int allow_default, zipcclStrategy_t* out) {
    for (int i = allow_default ? 0 : 1; i < 5; i++)
        if (!strcmp(v, strategy_names[i])) { *out = (zipcclStrategy_t)i; return 0; }
    return -1;
}

/* Set one key from its text value. `where` is "FILE:LINE" or "--set". */
static int set_key(TrainConfig* c, const KeyDesc* k, const char* v, const char* where, char* err,
                   size_t errlen) {
    char* base = (char*)c + k->offset;
    char* end = NULL;
    switch (k->type) {
    case K_INT:
    case K_I64: {
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno)
            return zrt_errf(err, errlen, "%s: key '%s': expected an integer, got '%s'", where,
                        k->name, v);
        if ((double)x < k->lo || (double)x > k->hi)
            return zrt_errf(err, errlen, "%s: key '%s': %lld is out of range [%.0f, %.0f]%s%s",
                        where, k->name, x, k->lo, k->hi, *k->help ? " — " : "", k->help);
        if (k->type == K_INT) *(int*)base = (int)x;
        else *(long long*)base = x;
        return 0;
    }
    case K_FLOAT: {
        errno = 0;
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x))
            return zrt_errf(err, errlen, "%s: key '%s': expected a number, got '%s'", where, k->name,
                        v);
        if (x < k->lo || x > k->hi)
            return zrt_errf(err, errlen, "%s: key '%s': %g is out of range [%g, %g]%s%s", where,
                        k->name, x, k->lo, k->hi, *k->help ? " — " : "", k->help);
        /* LlamaConfig holds floats; everything else is double. */
        if (!strncmp(k->name, "model.", 6)) *(float*)base = (float)x;
        else *(double*)base = x;
        return 0;
    }
    case K_BOOL: {
        int x;
        if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on") ||
            !strcmp(v, "1"))
            x = 1;
        else if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off") ||
                 !strcmp(v, "0"))
            x = 0;
        else
            return zrt_errf(err, errlen, "%s: key '%s': expected true or false, got '%s'", where,
                        k->name, v);
        if (x < k->lo || x > k->hi)
            return zrt_errf(err, errlen, "%s: key '%s': only %s is supported%s%s", where, k->name,
                        k->lo ? "true" : "false", *k->help ? " — " : "", k->help);
        *(int*)base = x;
        return 0;
    }
    case K_STR:
        if (strlen(v) >= k->size)
            return zrt_errf(err, errlen, "%s: key '%s': value longer than %zu characters", where,
                        k->name, k->size - 1);
        snprintf(base, k->size, "%s", v);
        return 0;
    case K_STRATEGY: {
        zipcclStrategy_t s;
        if (parse_strategy(v, k->lo == 0, &s))
            return zrt_errf(err, errlen, "%s: key '%s': unknown strategy '%s' (expected %s)", where,
                        k->name, v, k->help);
        *(zipcclStrategy_t*)base = s;
        return 0;
    }
    case K_CODEC:
        if (zipcclCodecParse(v, (zipcclCodec_t*)base) != zipcclSuccess)
            return zrt_errf(err, errlen, "%s: key '%s': unknown codec '%s' (expected fast|dense|f3)",
                        where, k->name, v);
        return 0;
    case K_DTYPE:
        if (!strcmp(v, "fp32")) *(zipcclDataType_t*)base = zipcclFloat32;
        else if (!strcmp(v, "bf16")) *(zipcclDataType_t*)base = zipcclBfloat16;
        else
            return zrt_errf(err, errlen, "%s: key '%s': unknown dtype '%s' (expected fp32|bf16)",
                        where, k->name, v);
        return 0;
    }
    return zrt_errf(err, errlen, "%s: key '%s': internal: bad key type", where, k->name);
}

static const KeyDesc* find_key(const char* name) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(kKeys[i].name, name)) return &kKeys[i];
    return NULL;
}

static int is_section(const char* s) {
    for (size_t i = 0; i < sizeof kSections / sizeof kSections[0]; i++)
        if (!strcmp(kSections[i], s)) return 1;
    return 0;
}

/* ---- YAML ---------------------------------------------------------------- */

typedef struct {
    yaml_document_t* doc;
    const char* file;
    char* err;
    size_t errlen;
} Walk;

static const char* scalar(yaml_node_t* n) { return (const char*)n->data.scalar.value; }

static int read_overrides(TrainConfig* c, Walk* w, yaml_node_t* seq) {
    if (seq->type != YAML_SEQUENCE_NODE)
        return zrt_errf(w->err, w->errlen,
                    "%s:%zu: key 'comm.overrides': expected a list of {pattern, strategy}",
                    w->file, seq->start_mark.line + 1);
    c->comm.n_overrides = 0;
    for (yaml_node_item_t* it = seq->data.sequence.items.start; it < seq->data.sequence.items.top;
         it++) {
        yaml_node_t* m = yaml_document_get_node(w->doc, *it);
        size_t line = m->start_mark.line + 1;
        if (m->type != YAML_MAPPING_NODE)
            return zrt_errf(w->err, w->errlen,
                        "%s:%zu: key 'comm.overrides': each entry is a mapping "
                        "{pattern: \"layers.1*\", strategy: raw}",
                        w->file, line);
        if (c->comm.n_overrides == CFG_MAX_OVERRIDES)
            return zrt_errf(w->err, w->errlen, "%s:%zu: key 'comm.overrides': more than %d entries",
                        w->file, line, CFG_MAX_OVERRIDES);
        CommOverride o = {.kind = -1, .strategy = zipcclStrategyDefault};
        for (yaml_node_pair_t* p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top;
             p++) {
            yaml_node_t* k = yaml_document_get_node(w->doc, p->key);
            yaml_node_t* v = yaml_document_get_node(w->doc, p->value);
            size_t kl = k->start_mark.line + 1;
            if (k->type != YAML_SCALAR_NODE || v->type != YAML_SCALAR_NODE)
                return zrt_errf(w->err, w->errlen,
                            "%s:%zu: key 'comm.overrides': keys and values must be scalars",
                            w->file, kl);
            const char* ks = scalar(k);
            const char* vs = scalar(v);
            if (!strcmp(ks, "pattern")) {
                if (strlen(vs) >= sizeof o.pattern || !*vs)
                    return zrt_errf(w->err, w->errlen,
                                "%s:%zu: key 'comm.overrides.pattern': empty or too long",
                                w->file, kl);
                snprintf(o.pattern, sizeof o.pattern, "%s", vs);
            } else if (!strcmp(ks, "strategy")) {
                if (parse_strategy(vs, 0, &o.strategy))
                    return zrt_errf(w->err, w->errlen,
                                "%s:%zu: key 'comm.overrides.strategy': unknown strategy '%s' "
                                "(expected native|raw|compressed|auto)",
                                w->file, kl, vs);
            } else if (!strcmp(ks, "kind")) {
                if (!strcmp(vs, "all")) o.kind = -1;
                else if (!strcmp(vs, "allgather")) o.kind = zipcclCollAllGather;
                else if (!strcmp(vs, "reducescatter")) o.kind = zipcclCollReduceScatter;
                else
                    return zrt_errf(w->err, w->errlen,
                                "%s:%zu: key 'comm.overrides.kind': unknown kind '%s' "
                                "(expected all|allgather|reducescatter)",
                                w->file, kl, vs);
            } else {
                return zrt_errf(w->err, w->errlen,
                            "%s:%zu: unknown key 'comm.overrides.%s' (expected pattern, "
                            "strategy, kind)",
                            w->file, kl, ks);
            }
        }
        if (!o.pattern[0] || o.strategy == zipcclStrategyDefault)
            return zrt_errf(w->err, w->errlen,
                        "%s:%zu: key 'comm.overrides': entry needs both pattern and strategy",
                        w->file, line);
        c->comm.overrides[c->comm.n_overrides++] = o;
    }
    return 0;
}

/* Walk a mapping node, prefix is "" at the root or "model." etc. */
static int walk_mapping(TrainConfig* c, Walk* w, yaml_node_t* map, const char* prefix) {
    for (yaml_node_pair_t* p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t* k = yaml_document_get_node(w->doc, p->key);
        yaml_node_t* v = yaml_document_get_node(w->doc, p->value);
        size_t line = k->start_mark.line + 1;
        if (k->type != YAML_SCALAR_NODE)
            return zrt_errf(w->err, w->errlen, "%s:%zu: keys must be plain names", w->file, line);
        char name[160];
        snprintf(name, sizeof name, "%s%s", prefix, scalar(k));
        if (!*prefix) {
            if (!is_section(name))
                return zrt_errf(w->err, w->errlen,
                            "%s:%zu: unknown key '%s' (sections: model, data, train, optimizer, "
                            "schedule, parallelism, comm, logging, checkpoint)",
                            w->file, line, name);
            if (v->type == YAML_SCALAR_NODE && !*scalar(v)) continue; /* empty section */
            if (v->type != YAML_MAPPING_NODE)
                return zrt_errf(w->err, w->errlen, "%s:%zu: key '%s': expected a mapping", w->file,
                            line, name);
            char sub[170];
            snprintf(sub, sizeof sub, "%s.", name);
            if (walk_mapping(c, w, v, sub)) return -1;
            continue;
        }
        if (!strcmp(name, "comm.overrides")) {
            if (read_overrides(c, w, v)) return -1;
            continue;
        }
        const KeyDesc* kd = find_key(name);
        if (!kd)
            return zrt_errf(w->err, w->errlen, "%s:%zu: unknown key '%s'", w->file, line, name);
        if (v->type != YAML_SCALAR_NODE)
            return zrt_errf(w->err, w->errlen, "%s:%zu: key '%s': expected a single value", w->file,
                        v->start_mark.line + 1, name);
        char where[CFG_PATH_MAX + 32];
        snprintf(where, sizeof where, "%s:%zu", w->file, v->start_mark.line + 1);
        if (set_key(c, kd, scalar(v), where, w->err, w->errlen)) return -1;
    }
    return 0;
}

int config_load(TrainConfig* c, const char* path, char* err, size_t errlen) {
    FILE* f = fopen(path, "rb");
    if (!f) return zrt_errf(err, errlen, "%s: cannot open config: %s", path, strerror(errno));
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        return zrt_errf(err, errlen, "%s: libyaml failed to initialise", path);
    }
    yaml_parser_set_input_file(&parser, f);
    int rc = 0;
    if (!yaml_parser_load(&parser, &doc)) {
        rc = zrt_errf(err, errlen, "%s:%zu:%zu: YAML syntax error: %s%s%s", path,
                  parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                  parser.problem ? parser.problem : "?", parser.context ? " " : "",
                  parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        fclose(f);
        return rc;
    }
    yaml_node_t* root = yaml_document_get_root_node(&doc);
    Walk w = {&doc, path, err, errlen};
    if (!root) rc = zrt_errf(err, errlen, "%s: empty config", path);
    else if (root->type != YAML_MAPPING_NODE)
        rc = zrt_errf(err, errlen, "%s:%zu: the top level must be a mapping of sections", path,
                  root->start_mark.line + 1);
    else rc = walk_mapping(c, &w, root, "");
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    fclose(f);
    if (!rc) snprintf(c->source, sizeof c->source, "%s", path);
    return rc;
}

int config_set(TrainConfig* c, const char* a, char* err, size_t errlen) {
    const char* eq = strchr(a, '=');
    if (!eq || eq == a)
        return zrt_errf(err, errlen, "--set '%s': expected dotted.key=value", a);
    char name[160];
    size_t n = (size_t)(eq - a);
    if (n >= sizeof name) return zrt_errf(err, errlen, "--set '%s': key too long", a);
    memcpy(name, a, n);
    name[n] = '\0';
    const KeyDesc* kd = find_key(name);
    if (!kd) return zrt_errf(err, errlen, "--set: unknown key '%s'", name);
    if (set_key(c, kd, eq + 1, "--set", err, errlen)) return -1;
    /* The command line's strategy is meant for A/B runs: it names the
     * strategy of every collective, so per-kind and per-layer choices from
     * the file step aside. */
    if (!strcmp(name, "comm.strategy")) c->comm.strategy_forced = 1;
    return 0;
}

int config_validate(const TrainConfig* c, char* err, size_t errlen) {
    char merr[256];
    const char* src = c->source[0] ? c->source : "config";
    if (llama_config_check(&c->model, merr, sizeof merr))
        return zrt_errf(err, errlen, "%s: model: %s", src, merr);
    if (c->data.seq_len > c->model.max_seq_len)
        return zrt_errf(err, errlen, "%s: key 'data.seq_len': %d exceeds model.max_seq_len %d", src,
                    c->data.seq_len, c->model.max_seq_len);
    if (strcmp(c->data.tokenizer, "byte") && strcmp(c->data.tokenizer, "bpe") &&
        strcmp(c->data.tokenizer, "u16") && strcmp(c->data.tokenizer, "i32"))
        return zrt_errf(err, errlen,
                    "%s: key 'data.tokenizer': unknown tokenizer '%s' (byte|bpe|u16|i32)", src,
                    c->data.tokenizer);
    if (!strcmp(c->data.tokenizer, "bpe") && c->model.vocab_size < 256 + c->data.bpe_merges)
        return zrt_errf(err, errlen,
                    "%s: key 'model.vocab_size': %d is too small for the bpe tokenizer with %d "
                    "merges (needs >= %d)",
                    src, c->model.vocab_size, c->data.bpe_merges, 256 + c->data.bpe_merges);
    if (!strcmp(c->data.tokenizer, "byte") && c->model.vocab_size < 256)
        return zrt_errf(err, errlen,
                    "%s: key 'model.vocab_size': %d is too small for the byte tokenizer (>= 256)",
                    src, c->model.vocab_size);
    if (c->optim.min_lr > c->optim.lr)
        return zrt_errf(err, errlen, "%s: key 'optimizer.min_lr': %g exceeds optimizer.lr %g", src,
                    c->optim.min_lr, c->optim.lr);
    if (!c->data.path[0]) return zrt_errf(err, errlen, "%s: key 'data.path' is empty", src);
    return 0;
}

zipcclStrategy_t config_strategy_for(const TrainConfig* c, zipcclCollKind_t kind,
                                     const char* unit_name) {
    if (c->comm.strategy_forced) return c->comm.strategy;
    zipcclStrategy_t s = c->comm.strategy;
    zipcclStrategy_t per_kind = kind == zipcclCollAllGather       ? c->comm.allgather
                                : kind == zipcclCollReduceScatter ? c->comm.reducescatter
                                                                  : zipcclStrategyDefault;
    if (per_kind != zipcclStrategyDefault) s = per_kind;
    /* Later overrides win, like later lines of a config usually do. */
    for (int i = 0; i < c->comm.n_overrides; i++) {
        const CommOverride* o = &c->comm.overrides[i];
        if ((o->kind < 0 || o->kind == (int)kind) && unit_name &&
            fnmatch(o->pattern, unit_name, 0) == 0)
            s = o->strategy;
    }
    return s;
}

void config_print(const TrainConfig* c, FILE* f) {
    const char* section = "";
    for (size_t i = 0; i < N_KEYS; i++) {
        const KeyDesc* k = &kKeys[i];
        const char* dot = strchr(k->name, '.');
        size_t sl = (size_t)(dot - k->name);
        if (strncmp(section, k->name, sl) || section[sl] != '.') {
            fprintf(f, "%.*s:\n", (int)sl, k->name);
            section = k->name;
        }
        const char* base = (const char*)c + k->offset;
        fprintf(f, "  %s: ", dot + 1);
        switch (k->type) {
        case K_INT: fprintf(f, "%d", *(const int*)base); break;
        case K_I64: fprintf(f, "%lld", *(const long long*)base); break;
        case K_FLOAT:
            if (!strncmp(k->name, "model.", 6)) fprintf(f, "%.9g", *(const float*)base);
            else fprintf(f, "%.9g", *(const double*)base);
            break;
        case K_BOOL: fprintf(f, "%s", *(const int*)base ? "true" : "false"); break;
        case K_STR: fprintf(f, "\"%s\"", base); break;
        case K_STRATEGY:
            /* A forced strategy prints as the only one, so the printout
             * reads back (checkpoints store it) to the same behaviour. */
            fprintf(f, "%s",
                    strategy_names[c->comm.strategy_forced && k->lo == 0
                                       ? zipcclStrategyDefault
                                       : *(const zipcclStrategy_t*)base]);
            break;
        case K_CODEC: fprintf(f, "%s", config_codec_name(*(const zipcclCodec_t*)base)); break;
        case K_DTYPE:
            fprintf(f, "%s", *(const zipcclDataType_t*)base == zipcclBfloat16 ? "bf16" : "fp32");
            break;
        }
        fprintf(f, "\n");
        if (!strcmp(k->name, "comm.reduce_dtype") && c->comm.n_overrides &&
            !c->comm.strategy_forced) {
            fprintf(f, "  overrides:\n");
            for (int j = 0; j < c->comm.n_overrides; j++) {
                const CommOverride* o = &c->comm.overrides[j];
                fprintf(f, "    - {pattern: \"%s\", strategy: %s, kind: %s}\n", o->pattern,
                        strategy_names[o->strategy],
                        o->kind < 0 ? "all" : o->kind == 0 ? "allgather" : "reducescatter");
            }
        }
    }
}
