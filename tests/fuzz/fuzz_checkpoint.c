/*
 * fuzz_checkpoint.c — libFuzzer target for what --resume reads of a
 * checkpoint (runtime/checkpoint.c): DIR/latest, manifest.json (every file
 * checked against its size and hash), state.json, config.yaml, and the
 * per-rank slice metadata of format 2's rank files ("<unit>": "lo hi"),
 * through checkpoint_open, checkpoint_reader_open and checkpoint_read_unit
 * (what build/export-hf runs; checkpoint_load reads the same ranges into
 * FSDP shards, which needs ranks). Issue 52, item 2.
 *
 * An input is its files joined by the line "--8<--" (SEP: "\n--8<--\n"),
 * in the order manifest.json, state.json, config.yaml,
 * rank_00000.safetensors, rank_00001.safetensors, latest (missing ones are
 * not written). A manifest that starts with '!' is
 * replaced by the true manifest of the files written, so that the fuzzer
 * gets past the hashes to the files they guard. Then:
 *   - refused: the message is printable text (fuzz_util.h) and names the
 *     checkpoint's directory;
 *   - accepted: step, samples and the rank count are in range, and every
 *     unit of the model its config.yaml describes (up to 2^20 values) is
 *     read, or refused with a printable message naming the directory.
 * Any violation aborts. Built with clang -fsanitize=fuzzer by
 * scripts/fuzz.sh, and with gcc plus replay_main.c by the Makefile.
 * fuzz-sources: runtime/checkpoint.c runtime/config.c runtime/printable.c
 * fuzz-libs: libzrt
 */
#define FUZZ_NAME "fuzz_checkpoint"
#include "fuzz_util.h"

#include <inttypes.h>

#include "checkpoint.h"
#include "log.h"

static const char* const kFiles[] = {"manifest.json",          "state.json",
                                     "config.yaml",            "rank_00000.safetensors",
                                     "rank_00001.safetensors", "latest"};
enum { N_FILES = sizeof kFiles / sizeof kFiles[0] };

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    clear_scratch();
    const uint8_t* part[N_FILES] = {0};
    size_t len[N_FILES] = {0};
    int n = 0;
    static const char kSep[] = "\n--8<--\n";
    const size_t sep = sizeof kSep - 1;
    for (size_t i = 0; n < N_FILES && i <= size;) {
        const uint8_t* at = memmem(data + i, size - i, kSep, sep);
        const size_t e = at ? (size_t)(at - data) : size;
        part[n] = data + i;
        len[n++] = e - i;
        i = e + sep;
    }
    char path[512];
    for (int f = 1; f < n; f++) write_scratch(kFiles[f], part[f], len[f], path, sizeof path);
    if (n > 0 && len[0] && part[0][0] == '!') { /* the true manifest of files 1-4 */
        char text[2048];
        size_t used = (size_t)snprintf(text, sizeof text, "{\"format\": 2, \"files\": [\n");
        for (int f = 1; f < n && f < 5; f++) {
            snprintf(path, sizeof path, "%s/%s", scratch_dir(), kFiles[f]);
            uint64_t h;
            size_t bytes;
            if (zrt_file_fnv1a64(path, &h, &bytes)) fail("hashing a scratch file", path);
            used += (size_t)snprintf(text + used, sizeof text - used,
                                     "  {\"name\": \"%s\", \"bytes\": %zu, \"fnv1a64\": \"%016" PRIx64
                                     "\"}%s\n", kFiles[f], bytes, h, f + 1 < n && f < 4 ? "," : "");
        }
        snprintf(text + used, sizeof text - used, "]}\n");
        write_scratch(kFiles[0], text, strlen(text), path, sizeof path);
    } else if (n > 0) {
        write_scratch(kFiles[0], part[0], len[0], path, sizeof path);
    }
    static CheckpointInfo ck;
    char err[4096] = "";
    if (checkpoint_open(scratch_dir(), &ck, err, sizeof err)) {
        check_refusal(err, scratch_dir());
        return 0;
    }
    if (ck.st.step < 0 || ck.st.samples < 0 || ck.nranks < 1 || ck.nranks > CHECKPOINT_MAX_RANKS)
        fail("state.json out of range accepted", NULL);
    if (llama_config_check(&ck.cfg.model, err, sizeof err)) return 0; /* not a model to read */
    CheckpointReader* r;
    if (checkpoint_reader_open(&ck, &r, err, sizeof err)) {
        check_refusal(err, scratch_dir());
        return 0;
    }
    const int units = llama_num_units(&ck.cfg.model);
    for (int u = 0; u < units; u++) {
        const size_t numel = llama_unit_numel(&ck.cfg.model, u);
        if (numel > (1u << 20)) continue;
        float* out = malloc(numel * sizeof(float) + 1);
        if (!out) fail("out of memory", NULL);
        err[0] = '\0';
        if (checkpoint_read_unit(r, u, out, err, sizeof err)) check_refusal(err, scratch_dir());
        free(out);
    }
    checkpoint_reader_close(r);
    return 0;
}
