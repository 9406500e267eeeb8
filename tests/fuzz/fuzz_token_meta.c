/*
 * fuzz_token_meta.c — libFuzzer target for the token file's metadata
 * reader (runtime/data.c: data_read_meta), which reads PATH.json beside a
 * token file of scripts/prepare_data.py: its dtype, token count, the
 * tokenizer's vocabulary size and special ids, and the tokenizer.json it
 * names. (tokenizer.json itself is never parsed: the runtime only hashes
 * it, train_setup.c, to warn when the data's and the model's differ.)
 * Issue 52, item 2.
 *
 * Each input is written as tokens.bin.json of a scratch directory beside a
 * tokens.bin of 12 bytes (6 u16 or 3 i32 tokens). Then:
 *   - refused: the message is printable text (fuzz_util.h) and names the
 *     file (tokens.bin.json, or tokens.bin for a size that disagrees);
 *   - accepted: the dtype is u16 or i32, tokens x width is the file's 12
 *     bytes, vocab_size is one the dtype can hold, bos_id and eos_id are
 *     -1 or tokens of that vocabulary, and the tokenizer is a file in the
 *     tokens' directory (or none).
 * Any violation aborts. Built with clang -fsanitize=fuzzer by
 * scripts/fuzz.sh, and with gcc plus replay_main.c by the Makefile.
 * fuzz-sources: runtime/data.c runtime/printable.c
 * fuzz-libs: libzrt
 */
#define FUZZ_NAME "fuzz_token_meta"
#include "fuzz_util.h"

#include "data.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const uint8_t kTokens[12] = {1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0};
    char tokens[512], meta[512];
    write_scratch("tokens.bin", kTokens, sizeof kTokens, tokens, sizeof tokens);
    write_scratch("tokens.bin.json", data, size, meta, sizeof meta);
    DataMeta m;
    char err[4096] = "";
    if (data_read_meta(tokens, &m, err, sizeof err)) {
        check_refusal(err, "tokens.bin");
        return 0;
    }
    if (!m.present) fail("PATH.json not found", meta);
    if (strcmp(m.path, meta)) fail("the metadata's path is not PATH.json", m.path);
    const long long width = !strcmp(m.dtype, "u16") ? 2 : !strcmp(m.dtype, "i32") ? 4 : 0;
    if (!width) fail("an unknown dtype accepted", m.dtype);
    if (m.tokens != (long long)sizeof kTokens / width) fail("a token count the file does not hold accepted", NULL);
    if (m.vocab_size < 1 || m.vocab_size > (width == 2 ? 65536 : 2147483648ll))
        fail("a vocabulary the dtype cannot hold accepted", NULL);
    if (m.bos_id < -1 || m.bos_id >= m.vocab_size) fail("a bos_id outside the vocabulary accepted", NULL);
    if (m.eos_id < -1 || m.eos_id >= m.vocab_size) fail("an eos_id outside the vocabulary accepted", NULL);
    if (m.tokenizer[0]) {
        const size_t dl = strlen(scratch_dir());
        const char* name = m.tokenizer + dl + 1;
        if (strncmp(m.tokenizer, scratch_dir(), dl) || m.tokenizer[dl] != '/' || !name[0] ||
            strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
            fail("a tokenizer outside the tokens' directory accepted", m.tokenizer);
    }
    return 0;
}
