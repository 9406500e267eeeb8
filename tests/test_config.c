/*
 * test_config.c — unit tests of the trainer's config reader (runtime/config.c).
 *
 * Each case writes a small YAML file and checks what config_load() made of
 * it against the values written in the text (the independent reference),
 * and that bad files are refused with the file, the line and the key; that
 * errors name the --set they came from and suggest the nearest known key;
 * and what config_resume_check lets a resumed run change. Also
 * zrt_printable (runtime/log.c), through which these messages quote what
 * the file or the command line said: byte by byte against its rules.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "testutil.h"

static char g_path[64];

static const char* write_yaml(const char* text) {
    snprintf(g_path, sizeof g_path, "/tmp/test_config_%d.yaml", (int)getpid());
    FILE* f = fopen(g_path, "w");
    if (!f) return NULL;
    fputs(text, f);
    fclose(f);
    return g_path;
}

/* Load text over the defaults; returns config_load's result, err filled. */
static int load(const char* text, TrainConfig* c, char* err, size_t n) {
    config_defaults(c);
    err[0] = '\0';
    return config_load(c, write_yaml(text), err, n);
}

/* The error must be refused and mention every fragment. */
static void expect_error(const char* name, const char* text, const char* frag1,
                         const char* frag2) {
    TrainConfig c;
    char err[512];
    int rc = load(text, &c, err, sizeof err);
    CHECK(rc == -1 && strstr(err, frag1) && (!frag2 || strstr(err, frag2)), name,
          "rc %d, error '%s', wanted '%s' and '%s'", rc, err, frag1, frag2 ? frag2 : "");
}

/* zrt_printable_n of the literal's bytes (cap bytes of output) must give want. */
#define LIT(s) s, sizeof(s) - 1
static void expect_printable(const char* name, const char* in, size_t n, size_t cap,
                             const char* want) {
    char out[256];
    memset(out, 'Z', sizeof out);
    zrt_printable_n(in, n, out, cap);
    CHECK(!strcmp(out, want) && out[cap] == 'Z', name, "got '%s', want '%s'", out, want);
}

/* zrt_trim_utf8: a message cut inside a multi-byte character loses the
 * partial character, a whole one stays (a fuzz_safetensors finding: a
 * 512-byte error cut a name's printable UTF-8). */
static void trim_checks(void) {
    static const struct { const char *in, *want; } cases[] = {
        {"ab\xc3", "ab"}, {"ab\xc3\xa9", "ab\xc3\xa9"}, {"ab\xe4\xb8", "ab"}, {"ab\xe4\xb8\xad", "ab\xe4\xb8\xad"},
        {"x\xf0\x9f\x98", "x"}, {"x\xf0\x9f\x98\x80", "x\xf0\x9f\x98\x80"}, {"plain", "plain"}, {"", ""}};
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char b[32];
        snprintf(b, sizeof b, "%s", cases[i].in);
        ok &= !strcmp(zrt_trim_utf8(b), cases[i].want);
    }
    CHECK(ok, "printable_trim_cut_character", "a cut character stayed or a whole one went");
    char err[12];
    zrt_errf(err, sizeof err, "tensor %s", "\xe4\xb8\xad\xe6\x96\x87"); /* cut after one of two characters */
    CHECK(!strcmp(err, "tensor \xe4\xb8\xad"), "errf_cut_ends_between_characters", "got '%s'", err);
}

static void printable_checks(void) {
    trim_checks();
    static const char* const same[] = {"model.layers.0.mlp.up_proj.weight", "/tmp/run 1/x.yaml",
                                       "caf\xc3\xa9", "\xe4\xb8\xad\xe6\x96\x87",
                                       "\xf0\x9f\x98\x80", "~!@#$%^&*()_+{}|:\"<>?`-=[];',./"};
    int ok = 1;
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        char out[128];
        ok &= !strcmp(zrt_printable(same[i], out, sizeof out), same[i]);
    }
    CHECK(ok, "printable_passes_ascii_and_utf8", "a printable string changed");
    expect_printable("printable_escape_sequence", LIT("\x1b]0;pwned\x07\x1b[31mEVIL"), 64,
                     "\\x1b]0;pwned\\x07\\x1b[31mEVIL");
    expect_printable("printable_c0_del_nul", LIT("a\tb\nc\rd\x7f\x01\x00" "e"), 64,
                     "a\\x09b\\x0ac\\x0dd\\x7f\\x01\\x00e");
    expect_printable("printable_backslash_doubled", LIT("C:\\x1b"), 64, "C:\\\\x1b");
    expect_printable("printable_c1_controls", LIT("\xc2\x9b" "31m\xc2\x80\xc2\x9f\xc2\xa0"), 64,
                     "\\xc2\\x9b31m\\xc2\\x80\\xc2\\x9f\xc2\xa0");
    expect_printable("printable_bidi_and_line_separators",
                     LIT("a\xe2\x80\xae" "b\xe2\x81\xa6" "c\xe2\x80\xa8" "d\xe2\x80\x8f"), 64,
                     "a\\xe2\\x80\\xaeb\\xe2\\x81\\xa6c\\xe2\\x80\\xa8d\\xe2\\x80\\x8f");
    expect_printable("printable_lone_continuation", LIT("a\x80" "b\xbf"), 64, "a\\x80b\\xbf");
    expect_printable("printable_cut_sequence", LIT("\xe4\xb8" "a\xf0\x9f\x98"), 64,
                     "\\xe4\\xb8a\\xf0\\x9f\\x98");
    expect_printable("printable_overlong", LIT("\xc0\xaf\xc1\xbf\xe0\x80\xaf\xf0\x80\x80\xaf"), 64,
                     "\\xc0\\xaf\\xc1\\xbf\\xe0\\x80\\xaf\\xf0\\x80\\x80\\xaf");
    expect_printable("printable_surrogate_and_past_max", LIT("\xed\xa0\x80\xf4\x90\x80\x80\xf5\xff"),
                     64, "\\xed\\xa0\\x80\\xf4\\x90\\x80\\x80\\xf5\\xff");
    expect_printable("printable_last_code_points", LIT("\xf4\x8f\xbf\xbf\xed\x9f\xbf"), 64,
                     "\xf4\x8f\xbf\xbf\xed\x9f\xbf");
    /* cut between escapes, never inside one, and marked */
    expect_printable("printable_fits_exactly", LIT("abcdefghi"), 10, "abcdefghi");
    expect_printable("printable_truncated", LIT("abcdefghij"), 10, "abcdef...");
    expect_printable("printable_truncated_at_escape", LIT("abcd\x1bxyz"), 10, "abcd...");
    expect_printable("printable_truncated_at_utf8", LIT("abcd\xe4\xb8\xadxy"), 9, "abcd...");
    expect_printable("printable_tiny_buffer", LIT("abcdef"), 3, "..");
    char out[8];
    CHECK(!strcmp(zrt_printable(NULL, out, sizeof out), "(null)"), "printable_null", "%s", out);
    CHECK(!strcmp(PRINTABLE("x\x1b"), "x\\x1b"), "printable_macro", "%s", PRINTABLE("x\x1b"));
}

int main(void) {
    TrainConfig c;
    char err[512];
    printable_checks();

    /* A full file: every section, nested and flow style, comments. */
    int rc = load("# comment\n"
                  "model:\n"
                  "  vocab_size: 300\n"
                  "  dim: 96\n"
                  "  n_layers: 3\n"
                  "  n_heads: 6\n"
                  "  n_kv_heads: 2\n"
                  "  ffn_hidden: 200\n"
                  "  max_seq_len: 48\n"
                  "  rope_theta: 500000\n"
                  "  norm_eps: 1.0e-6\n"
                  "  tie_embeddings: false\n"
                  "data: {path: x.bin, tokenizer: u16, seq_len: 40, batch_size: 3, grad_accum: 5,\n"
                  "       val_fraction: 0.1, val_every: 7, val_batches: 2, seed: 99}\n"
                  "train: {steps: 123, seed: 77}\n"
                  "optimizer: {lr: 0.002, min_lr: 0.0001, beta1: 0.8, beta2: 0.99, eps: 1e-7,\n"
                  "            weight_decay: 0.05, grad_clip: 0.5}\n"
                  "schedule: {warmup_steps: 11, total_steps: 200}\n"
                  "parallelism: {fsdp: true, reshard_after_forward: false, prefetch: no}\n"
                  "comm:\n"
                  "  strategy: raw\n"
                  "  allgather: compressed\n"
                  "  reducescatter: default\n"
                  "  codec: dense\n"
                  "  param_dtype: bf16\n"
                  "  reduce_dtype: bf16\n"
                  "  overrides:\n"
                  "    - {pattern: \"layers.1*\", strategy: native}\n"
                  "    - {pattern: \"outer\", strategy: auto, kind: reducescatter}\n"
                  "logging: {every: 4, json: log.jsonl}\n"
                  "checkpoint: {dir: ck, every: 50, keep: 3}\n",
                  &c, err, sizeof err);
    CHECK(rc == 0, "full_file_loads", "%s", err);
    CHECK(c.model.vocab_size == 300 && c.model.dim == 96 && c.model.n_layers == 3 &&
              c.model.n_heads == 6 && c.model.n_kv_heads == 2 && c.model.ffn_hidden == 200 &&
              c.model.max_seq_len == 48 && c.model.rope_theta == 500000.0f &&
              c.model.norm_eps == 1.0e-6f && c.model.tie_embeddings == 0,
          "model_section", "got dim %d layers %d", c.model.dim, c.model.n_layers);
    CHECK(!strcmp(c.data.path, "x.bin") && !strcmp(c.data.tokenizer, "u16") &&
              c.data.seq_len == 40 && c.data.batch_size == 3 && c.data.grad_accum == 5 &&
              c.data.val_fraction == 0.1 && c.data.val_every == 7 && c.data.val_batches == 2 &&
              c.data.seed == 99,
          "data_section_flow_style", "path '%s' seq %d", c.data.path, c.data.seq_len);
    CHECK(c.train.steps == 123 && c.train.seed == 77 && c.schedule.warmup_steps == 11 &&
              c.schedule.total_steps == 200,
          "train_schedule", "steps %d", c.train.steps);
    CHECK(c.optim.lr == 0.002 && c.optim.min_lr == 0.0001 && c.optim.beta1 == 0.8 &&
              c.optim.beta2 == 0.99 && c.optim.eps == 1e-7 && c.optim.weight_decay == 0.05 &&
              c.optim.grad_clip == 0.5,
          "optimizer_section", "lr %g", c.optim.lr);
    CHECK(c.parallel.fsdp == 1 && c.parallel.reshard_after_forward == 0 && c.parallel.prefetch == 0,
          "parallelism_bools", "reshard %d prefetch %d", c.parallel.reshard_after_forward,
          c.parallel.prefetch);
    CHECK(c.comm.strategy == zipcclStrategyRaw && c.comm.allgather == zipcclStrategyCompressed &&
              c.comm.reducescatter == zipcclStrategyDefault && c.comm.codec == zipcclCodecDense &&
              c.comm.param_dtype == zipcclBfloat16 && c.comm.reduce_dtype == zipcclBfloat16 &&
              c.comm.n_overrides == 2,
          "comm_section", "strategy %d overrides %d", c.comm.strategy, c.comm.n_overrides);
    CHECK(c.log.every == 4 && !strcmp(c.log.json, "log.jsonl") && !strcmp(c.ckpt.dir, "ck") &&
              c.ckpt.every == 50 && c.ckpt.keep == 3,
          "logging_checkpoint", "every %d dir '%s'", c.log.every, c.ckpt.dir);

    /* Strategy resolution: per kind, then overrides by fnmatch, later wins. */
    CHECK(config_strategy_for(&c, zipcclCollAllGather, "layers.0") == zipcclStrategyCompressed &&
              config_strategy_for(&c, zipcclCollReduceScatter, "layers.0") == zipcclStrategyRaw &&
              config_strategy_for(&c, zipcclCollAllGather, "layers.1") == zipcclStrategyNative &&
              config_strategy_for(&c, zipcclCollReduceScatter, "layers.12") == zipcclStrategyNative &&
              config_strategy_for(&c, zipcclCollAllGather, "layers.2") == zipcclStrategyCompressed &&
              config_strategy_for(&c, zipcclCollReduceScatter, "outer") == zipcclStrategyAuto &&
              config_strategy_for(&c, zipcclCollAllGather, "outer") == zipcclStrategyCompressed,
          "strategy_resolution", "per-kind / override resolution wrong");

    /* --set: same checks, and comm.strategy wins over everything. */
    CHECK(config_set(&c, "train.steps=9", err, sizeof err) == 0 && c.train.steps == 9,
          "set_int", "%s", err);
    CHECK(config_set(&c, "optimizer.lr=0.5", err, sizeof err) == 0 && c.optim.lr == 0.5,
          "set_float", "%s", err);
    CHECK(config_set(&c, "comm.strategy=compressed", err, sizeof err) == 0 &&
              config_strategy_for(&c, zipcclCollAllGather, "layers.1") == zipcclStrategyCompressed &&
              config_strategy_for(&c, zipcclCollReduceScatter, "outer") ==
                  zipcclStrategyCompressed,
          "set_strategy_forces_all", "%s", err);
    CHECK(config_set(&c, "model.dimx=3", err, sizeof err) == -1 &&
              strstr(err, "unknown key 'model.dimx'"),
          "set_unknown_key", "%s", err);
    CHECK(config_set(&c, "data.seq_len=abc", err, sizeof err) == -1 &&
              strstr(err, "key 'data.seq_len': expected an integer"),
          "set_wrong_type", "%s", err);
    CHECK(config_set(&c, "data.val_fraction=0.9", err, sizeof err) == -1 &&
              strstr(err, "out of range"),
          "set_out_of_range", "%s", err);
    CHECK(config_set(&c, "noequals", err, sizeof err) == -1, "set_malformed", "%s", err);

    /* The printout reads back to the same values. */
    {
        TrainConfig a, b;
        char path2[80];
        config_defaults(&a);
        config_set(&a, "model.dim=48", err, sizeof err);
        config_set(&a, "comm.reduce_dtype=bf16", err, sizeof err);
        config_set(&a, "data.path=some file.txt", err, sizeof err);
        snprintf(path2, sizeof path2, "/tmp/test_config_print_%d.yaml", (int)getpid());
        FILE* f = fopen(path2, "w");
        config_print(&a, f);
        fclose(f);
        config_defaults(&b);
        int r = config_load(&b, path2, err, sizeof err);
        unlink(path2);
        CHECK(r == 0 && b.model.dim == 48 && b.comm.reduce_dtype == zipcclBfloat16 &&
                  !strcmp(b.data.path, "some file.txt") && b.optim.lr == a.optim.lr &&
                  b.model.norm_eps == a.model.norm_eps && b.data.seed == a.data.seed,
              "print_reads_back", "%s", err);
    }

    /* What fuzz_config_yaml found (issue 52): a string with a quote or an
     * escaped character printed as YAML that did not read back (a quote
     * ended the scalar; \xe2 read as U+00E2), and a dense model's printout
     * held the MoE keys config_validate refuses given to it. (A --set path
     * that is not UTF-8 stays allowed, and prints escaped: YAML cannot hold
     * it; test_untrusted_names gives one.) */
    {
        TrainConfig a, b;
        char path2[80];
        config_defaults(&a);
        int r = config_set(&a, "data.path=a\"b\tc\xe2\x80\xae\\d\xc3\xa9", err, sizeof err);
        snprintf(path2, sizeof path2, "/tmp/test_config_quote_%d.yaml", (int)getpid());
        FILE* f = fopen(path2, "w");
        config_print(&a, f);
        fclose(f);
        config_defaults(&b);
        r = r || config_load(&b, path2, err, sizeof err);
        CHECK(r == 0 && !strcmp(b.data.path, a.data.path), "print_quotes_strings", "%s", err);
        CHECK(r == 0 && config_validate(&a, err, sizeof err) == 0 &&
                  config_validate(&b, err, sizeof err) == 0,
              "dense_printout_validates", "%s", err);
        unlink(path2);
    }

    /* Refusals, each naming file, line and key. */
    expect_error("unknown_key_line", "model:\n  dim: 64\n  depth: 3\n", ":3: unknown key 'model.depth'",
                 g_path);
    expect_error("unknown_section", "train:\n  steps: 3\nmodle:\n  dim: 4\n",
                 ":3: unknown key 'modle'", NULL);
    expect_error("wrong_type_int", "train:\n  steps: 3.5\n",
                 ":2: key 'train.steps': expected an integer, got '3.5'", NULL);
    expect_error("wrong_type_bool", "model:\n  tie_embeddings: maybe\n",
                 ":2: key 'model.tie_embeddings': expected true or false", NULL);
    expect_error("out_of_range_int", "data:\n  batch_size: 0\n",
                 ":2: key 'data.batch_size': 0 is out of range", NULL);
    expect_error("out_of_range_float", "optimizer:\n  beta2: 1.5\n",
                 ":2: key 'optimizer.beta2': 1.5 is out of range", NULL);
    expect_error("nan_refused", "optimizer:\n  lr: .nan\n", "key 'optimizer.lr': expected a number",
                 NULL);
    expect_error("fsdp_false_refused", "parallelism:\n  fsdp: false\n",
                 "key 'parallelism.fsdp': only true is supported", NULL);
    expect_error("bad_dtype", "comm:\n  param_dtype: fp8\n", ":2: key 'comm.param_dtype': unknown dtype 'fp8'",
                 NULL);
    expect_error("bad_codec", "comm:\n  codec: zstd\n", "unknown codec 'zstd'", NULL);
    expect_error("section_not_mapping", "model: 3\n", ":1: key 'model': expected a mapping", NULL);
    expect_error("value_not_scalar", "model:\n  dim: [1, 2]\n", ":2: key 'model.dim': expected a single value",
                 NULL);
    expect_error("override_without_strategy", "comm:\n  overrides:\n    - {pattern: outer}\n",
                 ":3: key 'comm.overrides': entry needs both pattern and strategy", NULL);
    expect_error("override_not_list", "comm:\n  overrides: raw\n", "key 'comm.overrides': expected a list",
                 NULL);
    expect_error("syntax_error", "model:\n  dim: 4\n   bad indent: [\n", "YAML syntax error", NULL);
    expect_error("top_not_mapping", "- a\n- b\n", "the top level must be a mapping", NULL);
    {
        TrainConfig d;
        config_defaults(&d);
        int r = config_load(&d, "/nonexistent/dir/x.yaml", err, sizeof err);
        CHECK(r == -1 && strstr(err, "/nonexistent/dir/x.yaml: cannot open config"),
              "missing_file", "%s", err);
    }
    /* Cross-field checks after loading. */
    {
        TrainConfig d;
        config_defaults(&d);
        config_set(&d, "data.seq_len=128", err, sizeof err); /* > max_seq_len 64 */
        CHECK(config_validate(&d, err, sizeof err) == -1 && strstr(err, "data.seq_len"),
              "validate_seq_len", "%s", err);
        config_defaults(&d);
        CHECK(config_validate(&d, err, sizeof err) == 0, "defaults_valid", "%s", err);
        /* moe.overlap_chunks: 1..64, and only where an expert exchange runs */
        CHECK(d.moe.overlap_chunks == 1, "overlap_chunks_default_1", "%d", d.moe.overlap_chunks);
        CHECK(config_set(&d, "moe.overlap_chunks=0", err, sizeof err) == -1 &&
                  strstr(err, "key 'moe.overlap_chunks': 0 is out of range [1, 64]"),
              "overlap_chunks_0_refused", "%s", err);
        CHECK(config_set(&d, "moe.overlap_chunks=-3", err, sizeof err) == -1 &&
                  strstr(err, "key 'moe.overlap_chunks'"),
              "overlap_chunks_negative_refused", "%s", err);
        CHECK(config_set(&d, "moe.overlap_chunks=100000", err, sizeof err) == -1 &&
                  strstr(err, "key 'moe.overlap_chunks': 100000 is out of range"),
              "overlap_chunks_absurd_refused", "%s", err);
        CHECK(config_set(&d, "moe.overlap_chunks=4", err, sizeof err) == 0 &&
                  config_validate(&d, err, sizeof err) == -1 &&
                  strstr(err, "key 'moe.overlap_chunks': 4 chunks asked for") &&
                  strstr(err, "dense model"),
              "overlap_chunks_on_dense_refused", "%s", err);
        config_set(&d, "model.n_experts=4", err, sizeof err);
        config_set(&d, "model.n_experts_per_tok=2", err, sizeof err);
        config_set(&d, "model.moe_ffn_hidden=32", err, sizeof err);
        CHECK(config_validate(&d, err, sizeof err) == -1 &&
                  strstr(err, "key 'moe.overlap_chunks'") && strstr(err, "parallelism.ep is 1"),
              "overlap_chunks_at_ep1_refused", "%s", err);
        config_set(&d, "parallelism.ep=2", err, sizeof err);
        CHECK(config_validate(&d, err, sizeof err) == 0 && d.moe.overlap_chunks == 4,
              "overlap_chunks_with_ep2_accepted", "%s", err);
        /* moe.aux_loss_scope: global (default) | rank, MoE models only */
        CHECK(!strcmp(d.moe.aux_loss_scope, "global"), "aux_loss_scope_default_global", "%s",
              d.moe.aux_loss_scope);
        CHECK(config_set(&d, "moe.aux_loss_scope=rank", err, sizeof err) == 0 &&
                  config_validate(&d, err, sizeof err) == 0 && !strcmp(d.moe.aux_loss_scope, "rank"),
              "aux_loss_scope_rank_accepted", "%s", err);
        CHECK(config_set(&d, "moe.aux_loss_scope=batch", err, sizeof err) == 0 &&
                  config_validate(&d, err, sizeof err) == -1 &&
                  strstr(err, "--set moe.aux_loss_scope=batch") &&
                  strstr(err, "key 'moe.aux_loss_scope': unknown scope 'batch' (global|rank)"),
              "aux_loss_scope_unknown_refused", "%s", err);
        config_defaults(&d);
        CHECK(config_set(&d, "moe.aux_loss_scope=rank", err, sizeof err) == 0 &&
                  config_validate(&d, err, sizeof err) == -1 &&
                  strstr(err, "key 'moe.aux_loss_scope' is for mixture-of-experts models"),
              "aux_loss_scope_on_dense_refused", "%s", err);
    }
    /* Where a value came from: errors name the --set assignment or the
     * file's line, and unknown keys suggest the nearest known one. */
    CHECK(config_set(&c, "data.seq_len=abc", err, sizeof err) == -1 &&
              !strncmp(err, "--set data.seq_len=abc: key 'data.seq_len'", 41),
          "set_error_names_the_assignment", "%s", err);
    CHECK(config_set(&c, "train.stepz=3", err, sizeof err) == -1 &&
              strstr(err, "--set train.stepz=3: unknown key 'train.stepz' (did you mean "
                          "'train.steps'?)"),
          "set_unknown_key_suggests", "%s", err);
    CHECK(config_set(&c, "optimizer.seq_len=3", err, sizeof err) == -1 &&
              strstr(err, "(did you mean 'data.seq_len'?)"),
          "set_key_in_other_section_suggests", "%s", err);
    CHECK(config_set(&c, "model.depth=3", err, sizeof err) == -1 && !strstr(err, "did you mean"),
          "set_unrelated_key_no_suggestion", "%s", err);
    expect_error("unknown_key_suggests", "model:\n  n_layer: 3\n",
                 ":2: unknown key 'model.n_layer' (did you mean 'model.n_layers'?)", NULL);
    expect_error("unknown_section_suggests", "modle:\n  dim: 4\n", "(did you mean 'model'?)", NULL);
    {
        TrainConfig d;
        char w[400];
        config_defaults(&d);
        CHECK(config_load(&d, write_yaml("model:\n  max_seq_len: 16\ndata:\n  seq_len: 8\n"), err,
                          sizeof err) == 0,
              "origin_file_loads", "%s", err);
        char want_line[128];
        snprintf(want_line, sizeof want_line, "%s:4", g_path);
        CHECK(!strcmp(config_where(&d, "data.seq_len", w, sizeof w), want_line),
              "where_file_line", "'%s', want '%s'", w, want_line);
        CHECK(!strcmp(config_where(&d, "data.batch_size", w, sizeof w), g_path),
              "where_default_is_the_file", "'%s'", w);
        config_set(&d, "data.seq_len=32", err, sizeof err);
        CHECK(config_validate(&d, err, sizeof err) == -1 &&
                  !strncmp(err, "--set data.seq_len=32: key 'data.seq_len': 32 exceeds "
                                "model.max_seq_len 16 (", 63) &&
                  strstr(err, want_line) == NULL && strstr(err, ":2)"),
              "validate_blames_the_set", "%s", err);
        config_defaults(&d);
        config_load(&d, write_yaml("model:\n  max_seq_len: 16\ndata:\n  seq_len: 32\n"), err,
                    sizeof err);
        CHECK(config_validate(&d, err, sizeof err) == -1 && strstr(err, want_line) == err &&
                  strstr(err, ":2)"),
              "validate_blames_the_file_line", "%s", err);
        config_defaults(&d);
        config_load(&d, write_yaml("model:\n  dim: 64\n"), err, sizeof err);
        config_set(&d, "model.n_heads=3", err, sizeof err);
        config_validate(&d, err, sizeof err);
        CHECK(strstr(err, "with --set model.n_heads=3: model:") != NULL,
              "validate_model_names_sets", "%s", err);
    }
    /* checkpoint.allow_changes: a YAML list or comma text of known keys
     * that may change; model keys never may. */
    {
        TrainConfig d;
        config_defaults(&d);
        int r = config_load(&d, write_yaml("checkpoint:\n  allow_changes: [optimizer.lr, "
                                           "data.batch_size]\n"),
                            err, sizeof err);
        CHECK(r == 0 && !strcmp(d.ckpt.allow_changes, "optimizer.lr,data.batch_size") &&
                  config_validate(&d, err, sizeof err) == 0,
              "allow_changes_yaml_list", "rc %d '%s' %s", r, d.ckpt.allow_changes, err);
        config_set(&d, "checkpoint.allow_changes=optimizer.lr, model.dim", err, sizeof err);
        CHECK(config_validate(&d, err, sizeof err) == -1 &&
                  strstr(err, "'model.dim' can never change when resuming"),
              "allow_changes_refuses_model_keys", "%s", err);
        config_set(&d, "checkpoint.allow_changes=optimizer.lrr", err, sizeof err);
        CHECK(config_validate(&d, err, sizeof err) == -1 &&
                  strstr(err, "unknown key 'optimizer.lrr' (did you mean 'optimizer.lr'?)"),
              "allow_changes_unknown_key", "%s", err);
    }
    /* The printout holds every value exactly (checkpoints are compared by
     * it): a double needing 17 digits reads back to the same bits. */
    {
        TrainConfig a, b;
        char path2[80];
        config_defaults(&a);
        a.optim.lr = 1.0 / 3.0;
        a.optim.eps = 1.0 / 7.0 * 1e-8;
        a.model.norm_eps = 1.0f / 3.0f;
        snprintf(path2, sizeof path2, "/tmp/test_config_exact_%d.yaml", (int)getpid());
        FILE* f = fopen(path2, "w");
        config_print(&a, f);
        fclose(f);
        config_defaults(&b);
        int r = config_load(&b, path2, err, sizeof err);
        unlink(path2);
        CHECK(r == 0 && b.optim.lr == a.optim.lr && b.optim.eps == a.optim.eps &&
                  b.model.norm_eps == a.model.norm_eps,
              "print_is_exact", "lr %.17g vs %.17g", b.optim.lr, a.optim.lr);
    }
    /* Resuming: the checkpoint's config against the run's. */
    {
        static TrainConfig saved, now;
        char notes[4096], err[4096]; /* a refusal lists every key */
        config_defaults(&saved);
        saved.schedule.total_steps = 0;
        saved.train.steps = 100;
        now = saved;
        CHECK(config_resume_check(&saved, 2, &now, 2, notes, sizeof notes, err, sizeof err) == 0 &&
                  !notes[0],
              "resume_same_config", "%s / %s", err, notes);
        config_set(&now, "model.n_layers=3", err, sizeof err);
        config_set(&now, "model.rope_theta=500000", err, sizeof err);
        config_set(&now, "data.seed=7", err, sizeof err);
        config_set(&now, "comm.param_dtype=bf16", err, sizeof err);
        int r = config_resume_check(&saved, 2, &now, 2, notes, sizeof notes, err, sizeof err);
        CHECK(r == -1 &&
                  strstr(err, "model.n_layers: 2 in the checkpoint, 3 now "
                              "(--set model.n_layers=3)") &&
                  strstr(err, "model.rope_theta: 10000 in the checkpoint, 500000 now") &&
                  strstr(err, "data.seed: 1234 in the checkpoint, 7 now") &&
                  strstr(err, "comm.param_dtype: fp32 in the checkpoint, bf16 now"),
              "resume_names_every_refused_key", "%s", err);
        now = saved;
        config_set(&now, "comm.param_dtype=bf16", err, sizeof err);
        config_set(&now, "checkpoint.allow_changes=comm.param_dtype", err, sizeof err);
        r = config_resume_check(&saved, 2, &now, 2, notes, sizeof notes, err, sizeof err);
        CHECK(r == 0 && strstr(notes, "# warning: resume: comm.param_dtype fp32 -> bf16"),
              "resume_allowed_change_warns", "%d %s / %s", r, err, notes);
        /* The global batch: the same batch cut otherwise is free. */
        now = saved;
        config_set(&now, "data.batch_size=2", err, sizeof err);
        r = config_resume_check(&saved, 2, &now, 4, notes, sizeof notes, err, sizeof err);
        CHECK(r == 0 && strstr(notes, "global batch 8 sequences per step as before"),
              "resume_other_rank_count_same_batch", "%d %s / %s", r, err, notes);
        r = config_resume_check(&saved, 2, &now, 2, notes, sizeof notes, err, sizeof err);
        CHECK(r == -1 && strstr(err, "global batch: 8 sequences per step in the checkpoint"),
              "resume_global_batch_refused", "%d %s", r, err);
        config_set(&now, "checkpoint.allow_changes=data.grad_accum", err, sizeof err);
        r = config_resume_check(&saved, 2, &now, 2, notes, sizeof notes, err, sizeof err);
        CHECK(r == 0 && strstr(notes, "# warning: resume: global batch 8 -> 4"),
              "resume_global_batch_allowed", "%d %s / %s", r, err, notes);
        /* The schedule length follows train.steps when total_steps is 0. */
        now = saved;
        config_set(&now, "train.steps=200", err, sizeof err);
        r = config_resume_check(&saved, 2, &now, 2, notes, sizeof notes, err, sizeof err);
        CHECK(r == -1 && strstr(err, "schedule runs over 100 steps in the checkpoint, 200 now") &&
                  strstr(err, "schedule.total_steps: 100"),
              "resume_schedule_length_refused", "%d %s", r, err);
        config_set(&now, "schedule.total_steps=100", err, sizeof err);
        r = config_resume_check(&saved, 2, &now, 2, notes, sizeof notes, err, sizeof err);
        CHECK(r == 0 && strstr(notes, "train.steps 100 -> 200"), "resume_more_steps_same_schedule",
              "%d %s / %s", r, err, notes);
        /* Lossless choices are free, and said. */
        now = saved;
        config_set(&now, "comm.strategy=raw", err, sizeof err);
        config_set(&now, "logging.every=10", err, sizeof err);
        r = config_resume_check(&saved, 2, &now, 2, notes, sizeof notes, err, sizeof err);
        CHECK(r == 0 && strstr(notes, "comm.strategy compressed -> raw") &&
                  strstr(notes, "logging.every 1 -> 10") && !strstr(notes, "warning"),
              "resume_free_changes_noted", "%d %s / %s", r, err, notes);
    }
    unlink(g_path);
    return tu_exit();
}
