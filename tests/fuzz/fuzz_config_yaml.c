/*
 * fuzz_config_yaml.c — libFuzzer target for the YAML config reader and the
 * command line's --set overrides (runtime/config.c: config_load,
 * config_set, config_validate, config_print). Issue 52, item 2.
 *
 * An input is "SETS\0YAML": the bytes before the first NUL are --set
 * assignments, one a line, applied after the YAML is read; without a NUL
 * the whole input is the YAML. The YAML is written as config.yaml of a
 * scratch directory. Then:
 *   - refused: the message is printable text (fuzz_util.h) and names where
 *     the value came from: the file (config.yaml) or the assignment
 *     ("--set"); config_validate's, printable and not empty;
 *   - accepted: config_print writes a YAML that config_load reads back to
 *     a config that prints the same text (unless a --set string is not
 *     UTF-8, which YAML cannot hold: its lone bytes print as \xNN, which
 *     read back as other characters, or are refused as too long); when config_validate accepted
 *     the config, it accepts the one read back too, config_resume_check
 *     finds nothing changed, and llama_config_check passes the model.
 * Any violation aborts. Built with clang -fsanitize=fuzzer by
 * scripts/fuzz.sh, and with gcc plus replay_main.c by the Makefile.
 * fuzz-sources: runtime/config.c runtime/printable.c
 * fuzz-libs: libzrt -lyaml
 */
#define FUZZ_NAME "fuzz_config_yaml"
#include "fuzz_util.h"

#include "config.h"

/* 1 if s[0..n) is valid UTF-8 (a --set string that is not has no YAML
 * form: config_print shows it escaped, and it reads back as other text). */
static int utf8_valid(const uint8_t* s, size_t n) {
    for (size_t i = 0; i < n;) {
        const unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                   : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!len || i + len > n) return 0;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xc0) != 0x80) return 0;
        if ((c == 0xe0 && s[i + 1] < 0xa0) || (c == 0xed && s[i + 1] > 0x9f) ||
            (c == 0xf0 && s[i + 1] < 0x90) || (c == 0xf4 && s[i + 1] > 0x8f))
            return 0;
        i += len;
    }
    return 1;
}

/* config_print of c as text (malloc'ed), through a scratch file. */
static char* printed(const TrainConfig* c, const char* name) {
    char path[512];
    write_scratch(name, "", 0, path, sizeof path);
    FILE* f = fopen(path, "w");
    if (!f) fail("opening a scratch file", path);
    config_print(c, f);
    const long n = ftell(f);
    if (fclose(f) || n < 0) fail("config_print", path);
    char* text = malloc((size_t)n + 1);
    f = fopen(path, "rb");
    if (!text || !f || fread(text, 1, (size_t)n, f) != (size_t)n) fail("reading back", path);
    fclose(f);
    text[n] = '\0';
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const uint8_t* nul = memchr(data, 0, size);
    const uint8_t* yaml = nul ? nul + 1 : data;
    const size_t sets_len = nul ? (size_t)(nul - data) : 0;
    char path[512];
    write_scratch("config.yaml", yaml, size - (size_t)(yaml - data), path, sizeof path);
    static TrainConfig c, back;
    char err[4096] = "";
    config_defaults(&c);
    if (config_load(&c, path, err, sizeof err)) {
        check_refusal(err, "config.yaml");
        return 0;
    }
    /* the --set lines */
    for (size_t i = 0; i < sets_len;) {
        size_t e = i;
        while (e < sets_len && data[e] != '\n') e++;
        char set[1024];
        if (e - i < sizeof set) {
            memcpy(set, data + i, e - i);
            set[e - i] = '\0';
            if (config_set(&c, set, err, sizeof err)) {
                check_refusal(err, "--set");
                return 0;
            }
        }
        i = e + 1;
    }
    err[0] = '\0';
    const int valid = config_validate(&c, err, sizeof err) == 0;
    if (!valid) check_refusal(err, NULL);
    else if (llama_config_check(&c.model, err, sizeof err))
        fail("config_validate accepts a model llama_config_check refuses", err);
    /* What it prints reads back to the same config. */
    char* text = printed(&c, "printed.yaml");
    char ppath[512];
    snprintf(ppath, sizeof ppath, "%s/printed.yaml", scratch_dir());
    config_defaults(&back);
    const int exact = utf8_valid(data, sets_len);
    if (!exact) { /* lone bytes read back as other, longer text: maybe too long */
        if (config_load(&back, ppath, err, sizeof err)) check_refusal(err, "printed.yaml");
        free(text);
        return 0;
    }
    if (config_load(&back, ppath, err, sizeof err)) {
        fprintf(stderr, "%s\n", text);
        fail("config_print wrote a config config_load refuses", err);
    }
    char* again = printed(&back, "again.yaml");
    if (strcmp(text, again)) {
        fprintf(stderr, "--- printed\n%s--- read back and printed\n%s", text, again);
        fail("config_print, config_load, config_print is not the same text", NULL);
    }
    /* An invalid config need not survive (a MoE key given to a dense
     * model is not printed); a valid one must, whole. */
    static char notes[16384];
    if (valid && config_validate(&back, err, sizeof err))
        fail("config_validate refuses the printout of a config it accepted", err);
    if (valid && config_resume_check(&c, 1, &back, 1, notes, sizeof notes, err, sizeof err))
        fail("config_resume_check finds the printed config changed", err);
    free(text);
    free(again);
    return 0;
}
