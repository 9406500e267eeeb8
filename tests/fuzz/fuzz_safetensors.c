/*
 * fuzz_safetensors.c — libFuzzer target for the safetensors reader
 * (runtime/safetensors.c), which opens files from strangers (--init-from,
 * checkpoints copied between clusters). Issue 52, item 2.
 *
 * Each input is written to a memory file and opened with st_open. Then:
 *   - refused: the error message must be printable text (no control byte
 *     but none at all, no invalid UTF-8: runtime/printable.h), whatever
 *     bytes the header held;
 *   - accepted: every tensor's shape, element count, byte count and data
 *     range must be consistent and inside the file; every tensor is read
 *     whole and in two ranges, which must agree; the metadata is walked.
 * Any violation aborts, which libFuzzer reports as a crash. Built with
 * clang -fsanitize=fuzzer by scripts/fuzz.sh, and with gcc plus
 * replay_main.c by the Makefile (the committed corpus replayed in make test).
 * fuzz-sources: runtime/safetensors.c runtime/printable.c
 */
#define FUZZ_NAME "fuzz_safetensors"
#include "fuzz_util.h" /* fail, check_printable */

#include <sys/mman.h>

#include "safetensors.h"

static int g_fd = -1;
static char g_path[64];

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (g_fd < 0) {
        g_fd = memfd_create("fuzz_safetensors", 0);
        if (g_fd < 0) fail("memfd_create", NULL);
        snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
    }
    if (ftruncate(g_fd, 0) || (size && pwrite(g_fd, data, size, 0) != (ssize_t)size))
        fail("writing the memory file", NULL);
    st_file* f = NULL;
    char err[512] = "";
    if (st_open(g_path, &f, err, sizeof err)) {
        if (!err[0]) fail("refused without a message", NULL);
        check_printable(err);
        return 0;
    }
    for (size_t i = 0; i < st_num_tensors(f); i++) {
        const st_tensor* t = st_tensor_at(f, i);
        if (!t || !t->name) fail("a tensor without a name", NULL);
        if (st_find(f, t->name) != t) fail("st_find does not find a tensor by its own name", NULL);
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS) fail("ndim out of range", t->name);
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0) fail("a negative dimension accepted", t->name);
            numel *= (uint64_t)t->shape[d];
        }
        if (numel != t->numel || t->numel * t->elem_size != t->bytes) fail("numel or bytes inconsistent", t->name);
        if (t->offset > size || t->bytes > size - t->offset) fail("data past the end of the file accepted", t->name);
        uint8_t* whole = malloc(t->bytes ? t->bytes : 1);
        if (!whole) fail("out of memory", NULL);
        if (st_read(f, t, whole, t->bytes, err, sizeof err)) fail("st_read failed on an accepted tensor", err);
        if (t->bytes && memcmp(whole, data + t->offset, t->bytes)) fail("st_read returned other bytes", t->name);
        const uint64_t half = t->bytes / 2;
        uint8_t* part = malloc(t->bytes ? t->bytes : 1);
        if (!part) fail("out of memory", NULL);
        if (st_read_range(f, t, 0, half, part, err, sizeof err) ||
            st_read_range(f, t, half, t->bytes - half, part + half, err, sizeof err))
            fail("st_read_range failed on an accepted tensor", err);
        if (t->bytes && memcmp(whole, part, t->bytes)) fail("ranges differ from the whole", t->name);
        if (st_read_range(f, t, t->bytes, 1, part, err, sizeof err) == 0) fail("a range past the tensor accepted", t->name);
        check_printable(err);
        free(part);
        free(whole);
    }
    for (size_t i = 0; i < st_num_metadata(f); i++) {
        const char *k = NULL, *v = NULL;
        if (st_metadata_at(f, i, &k, &v) || !k || !v) fail("a metadata entry without key or value", NULL);
        if (st_get_metadata(f, k) == NULL) fail("st_get_metadata does not find a key it listed", NULL);
    }
    st_close(f);
    return 0;
}
