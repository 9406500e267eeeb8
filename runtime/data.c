/*
 * data.c — load a token file, split it, and hand each rank its sequences.
 *
 * The sampling rule (data.h) is the whole story: a global order that only
 * depends on (seed, epoch), cut into global micro-batches, strided over
 * ranks. Everything here is plain arithmetic so the trainer can jump to any
 * step on resume without replaying the data.
 *
 * Paths and what the token metadata says are quoted in messages through
 * zrt_printable (log.h).
 */
#include "data.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* splitmix64: tiny, seedable, good enough to shuffle windows. */
static uint64_t splitmix64(uint64_t* s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- byte-pair encoding ----------------------------------------------------
 *
 * Training is the textbook loop, kept simple and exact: count every adjacent
 * pair of the current sequence, merge the most frequent pair (ties go to the
 * smaller pair id a*V+b, so the result never depends on anything but the
 * text), rewrite the sequence, repeat. Counting and resetting touch only the
 * pairs present, so a merge costs two passes over the sequence. The training
 * split is encoded by training itself; the validation split gets the merges
 * applied in order. */

typedef struct {
    uint32_t (*merges)[2]; /* merge m makes token 256+m from (left, right) */
    int n_merges;
} Bpe;

/* Rewrite seq[0..*n) replacing every (a, b) with t, left to right. */
static void bpe_apply_one(int* seq, size_t* n, int a, int b, int t) {
    size_t j = 0, L = *n;
    for (size_t i = 0; i < L;) {
        if (i + 1 < L && seq[i] == a && seq[i + 1] == b) {
            seq[j++] = t;
            i += 2;
        } else {
            seq[j++] = seq[i++];
        }
    }
    *n = j;
}

static int bpe_train(Bpe* bpe, int* seq, size_t* n, int M) {
    const size_t V = 256 + (size_t)M;
    uint32_t* counts = calloc(V * V, sizeof(uint32_t));
    bpe->merges = calloc((size_t)M, sizeof bpe->merges[0]);
    if (!counts || !bpe->merges) {
        free(counts);
        return -1;
    }
    bpe->n_merges = 0;
    for (int m = 0; m < M; m++) {
        size_t L = *n, best = 0;
        uint32_t bestc = 0;
        for (size_t i = 0; i + 1 < L; i++) {
            size_t id = (size_t)seq[i] * V + (size_t)seq[i + 1];
            uint32_t c = ++counts[id];
            if (c > bestc || (c == bestc && id < best)) {
                bestc = c;
                best = id;
            }
        }
        for (size_t i = 0; i + 1 < L; i++) counts[(size_t)seq[i] * V + (size_t)seq[i + 1]] = 0;
        if (bestc < 2) break; /* nothing left worth a token */
        int a = (int)(best / V), b = (int)(best % V);
        bpe->merges[m][0] = (uint32_t)a;
        bpe->merges[m][1] = (uint32_t)b;
        bpe->n_merges = m + 1;
        bpe_apply_one(seq, n, a, b, 256 + m);
    }
    free(counts);
    return 0;
}

/* Bytes of token t, appended to out (for the vocab file). */
static size_t bpe_bytes(const Bpe* bpe, int t, unsigned char* out, size_t cap) {
    if (t < 256) {
        if (cap) out[0] = (unsigned char)t;
        return 1;
    }
    size_t k = bpe_bytes(bpe, (int)bpe->merges[t - 256][0], out, cap);
    return k + bpe_bytes(bpe, (int)bpe->merges[t - 256][1], out + (k < cap ? k : cap),
                         k < cap ? cap - k : 0);
}

static void bpe_write_vocab(const Bpe* bpe, const char* path) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE* f = fopen(tmp, "w");
    if (!f) return; /* the vocab file is for people; training does not need it */
    fprintf(f, "# byte-pair vocabulary: id left right bytes (C-escaped); ids 0-255 are bytes\n");
    for (int m = 0; m < bpe->n_merges; m++) {
        unsigned char b[256];
        size_t k = bpe_bytes(bpe, 256 + m, b, sizeof b);
        fprintf(f, "%d %u %u \"", 256 + m, bpe->merges[m][0], bpe->merges[m][1]);
        for (size_t i = 0; i < k && i < sizeof b; i++) {
            if (b[i] == '"' || b[i] == '\\') fprintf(f, "\\%c", b[i]);
            else if (b[i] >= 32 && b[i] < 127) fputc(b[i], f);
            else fprintf(f, "\\x%02x", b[i]);
        }
        fprintf(f, "%s\"\n", k > sizeof b ? "..." : "");
    }
    if (fclose(f) == 0) rename(tmp, path);
    else remove(tmp);
}

/* Cache layout (little-endian host order; it never leaves this machine):
 *   "ZRTBPE1\0" u64 text_bytes u64 text_fnv u64 split_byte u32 M u32 n_merges
 *   n_merges x (u32 left, u32 right)  u64 n_train u64 n_val  tokens as u32 */
#define BPE_MAGIC "ZRTBPE1"

static uint64_t fnv64(const unsigned char* p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static int bpe_cache_load(Dataset* d, const char* cpath, uint64_t bytes, uint64_t h,
                          uint64_t split, uint32_t M) {
    FILE* f = fopen(cpath, "rb");
    if (!f) return -1;
    char magic[8];
    uint64_t hb, hh, hs, nt, nv;
    uint32_t hm, nm;
    int ok = fread(magic, 8, 1, f) == 1 && !memcmp(magic, BPE_MAGIC, 8) &&
             fread(&hb, 8, 1, f) == 1 && fread(&hh, 8, 1, f) == 1 && fread(&hs, 8, 1, f) == 1 &&
             fread(&hm, 4, 1, f) == 1 && fread(&nm, 4, 1, f) == 1 && hb == bytes && hh == h &&
             hs == split && hm == M && nm <= M && fseek(f, (long)nm * 8, SEEK_CUR) == 0 &&
             fread(&nt, 8, 1, f) == 1 && fread(&nv, 8, 1, f) == 1 && nt + nv <= bytes;
    if (ok) {
        d->tokens = malloc((size_t)(nt + nv) * sizeof(int) + 1);
        ok = d->tokens && fread(d->tokens, sizeof(int), (size_t)(nt + nv), f) == nt + nv;
        for (uint64_t i = 0; ok && i < nt + nv; i++) ok = d->tokens[i] >= 0 && d->tokens[i] < 256 + (int)nm;
        if (ok) {
            d->n_tokens = (size_t)(nt + nv);
            d->n_train = (size_t)nt;
        } else {
            free(d->tokens);
            d->tokens = NULL;
        }
    }
    fclose(f);
    return ok ? 0 : -1;
}

static void bpe_cache_save(const Dataset* d, const Bpe* bpe, const char* cpath, uint64_t bytes,
                           uint64_t h, uint64_t split, uint32_t M) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", cpath, (int)getpid());
    FILE* f = fopen(tmp, "wb");
    if (!f) return; /* no cache: the next run trains again */
    uint32_t nm = (uint32_t)bpe->n_merges;
    uint64_t nt = d->n_train, nv = d->n_tokens - d->n_train;
    int ok = fwrite(BPE_MAGIC, 8, 1, f) == 1 && fwrite(&bytes, 8, 1, f) == 1 &&
             fwrite(&h, 8, 1, f) == 1 && fwrite(&split, 8, 1, f) == 1 &&
             fwrite(&M, 4, 1, f) == 1 && fwrite(&nm, 4, 1, f) == 1 &&
             (nm == 0 || fwrite(bpe->merges, 8, nm, f) == nm) && fwrite(&nt, 8, 1, f) == 1 &&
             fwrite(&nv, 8, 1, f) == 1 &&
             fwrite(d->tokens, sizeof(int), d->n_tokens, f) == d->n_tokens;
    /* Ranks that train at the same time each write their own temporary file
     * and rename it: the cache is always one whole, identical file. */
    if (fclose(f) == 0 && ok) rename(tmp, cpath);
    else remove(tmp);
}

static int bpe_open(Dataset* d, const char* path, const unsigned char* text, size_t n, int M,
                    double val_fraction, char* err, size_t errlen) {
    const uint64_t split = n - (size_t)((double)n * val_fraction);
    const uint64_t h = fnv64(text, n);
    char cpath[1100], vpath[1100];
    snprintf(cpath, sizeof cpath, "%s.bpe%d.cache", path, M);
    snprintf(vpath, sizeof vpath, "%s.bpe%d.vocab", path, M);
    if (bpe_cache_load(d, cpath, n, h, split, (uint32_t)M) == 0) {
        d->bpe_cached = 1;
        return 0;
    }
    d->tokens = malloc(n * sizeof(int) + 1);
    if (!d->tokens)
        return zrt_errf(err, errlen, "%s: out of memory for %zu tokens", PRINTABLE(path), n);
    for (size_t i = 0; i < n; i++) d->tokens[i] = text[i];
    size_t nt = (size_t)split, nv = n - (size_t)split;
    Bpe bpe = {0};
    if (bpe_train(&bpe, d->tokens, &nt, M))
        return zrt_errf(err, errlen, "%s: out of memory training the BPE", PRINTABLE(path));
    /* Validation bytes follow the (shrunken) training tokens. */
    memmove(d->tokens + nt, d->tokens + split, nv * sizeof(int));
    for (int m = 0; m < bpe.n_merges; m++)
        bpe_apply_one(d->tokens + nt, &nv, (int)bpe.merges[m][0], (int)bpe.merges[m][1], 256 + m);
    d->n_train = nt;
    d->n_tokens = nt + nv;
    bpe_cache_save(d, &bpe, cpath, n, h, split, (uint32_t)M);
    bpe_write_vocab(&bpe, vpath);
    free(bpe.merges);
    return 0;
}

int data_open(Dataset* d, const char* path, const char* tokenizer, int bpe_merges, int vocab,
              int T, double val_fraction, uint64_t seed, char* err, size_t errlen) {
    memset(d, 0, sizeof *d);
    d->perm_epoch = -1;
    FILE* f = fopen(path, "rb");
    if (!f)
        return zrt_errf(err, errlen,
                    "%s: cannot open data file: %s (the default corpus is made by "
                    "scripts/prepare_data.sh)",
                    PRINTABLE(path), strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return zrt_errf(err, errlen, "%s: cannot seek: %s", PRINTABLE(path), strerror(errno));
    }
    long sz = ftell(f);
    rewind(f);
    size_t width = !strcmp(tokenizer, "u16") ? 2 : !strcmp(tokenizer, "i32") ? 4 : 1;
    if (sz <= 0 || (size_t)sz % width) {
        fclose(f);
        return zrt_errf(err, errlen, "%s: %ld bytes is not a whole number of %zu-byte tokens",
                        PRINTABLE(path), sz, width);
    }
    size_t n = (size_t)sz / width;
    unsigned char* raw = malloc((size_t)sz);
    if (!raw || fread(raw, 1, (size_t)sz, f) != (size_t)sz) {
        free(raw);
        fclose(f);
        return zrt_errf(err, errlen, "%s: cannot read %ld bytes", PRINTABLE(path), sz);
    }
    fclose(f);
    if (!strcmp(tokenizer, "bpe")) {
        int rc = bpe_open(d, path, raw, n, bpe_merges, val_fraction, err, errlen);
        free(raw);
        if (rc) {
            data_close(d);
            return rc;
        }
    } else {
        d->tokens = malloc(n * sizeof(int) + 1);
        if (!d->tokens) {
            free(raw);
            return zrt_errf(err, errlen, "%s: out of memory for %zu tokens", PRINTABLE(path), n);
        }
        for (size_t i = 0; i < n; i++) {
            if (width == 1) d->tokens[i] = raw[i];
            else if (width == 2) d->tokens[i] = raw[2 * i] | (raw[2 * i + 1] << 8);
            else {
                uint32_t u = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 |
                             (uint32_t)raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24;
                d->tokens[i] = (int32_t)u;
            }
        }
        free(raw);
        d->n_tokens = n;
        d->n_train = n - (size_t)((double)n * val_fraction);
    }
    for (size_t i = 0; i < d->n_tokens; i++) {
        if (d->tokens[i] < 0 || d->tokens[i] >= vocab) {
            long long t = d->tokens[i];
            data_close(d);
            return zrt_errf(err, errlen, "%s: token %lld at index %zu is outside the vocabulary [0, %d)",
                        PRINTABLE(path), t, i, vocab);
        }
    }
    n = d->n_tokens;
    d->T = T;
    d->seed = seed;
    size_t n_val = n - d->n_train;
    d->n_windows[0] = d->n_train > (size_t)T ? (d->n_train - 1) / (size_t)T : 0;
    d->n_windows[1] = n_val > (size_t)T ? (n_val - 1) / (size_t)T : 0;
    if (d->n_windows[0] < 1) {
        data_close(d);
        return zrt_errf(err, errlen, "%s: %zu training tokens do not fill one sequence of %d",
                        PRINTABLE(path), d->n_train, T + 1);
    }
    if (val_fraction > 0 && d->n_windows[1] < 1) {
        data_close(d);
        return zrt_errf(err, errlen,
                    "%s: validation split (%zu tokens) does not fill one sequence of %d; raise "
                    "data.val_fraction or set it to 0",
                    PRINTABLE(path), n_val, T + 1);
    }
    d->perm = malloc(d->n_windows[0] * sizeof(uint32_t));
    if (!d->perm) {
        data_close(d);
        return zrt_errf(err, errlen, "out of memory for the sample order");
    }
    return 0;
}

void data_close(Dataset* d) {
    free(d->tokens);
    free(d->perm);
    memset(d, 0, sizeof *d);
}

/* Fisher-Yates over the windows, seeded by (seed, epoch) only: the state
 * starts at seed * 0x100000001b3 XOR epoch (mod 2^64) and position i, from
 * W-1 down to 1, swaps with splitmix64() mod (i+1). docs/RUNTIME.md states
 * the same so that an independent reader (tests/test_data_order.py) can
 * rebuild the order. */
static void build_perm(Dataset* d, long long epoch) {
    size_t W = d->n_windows[0];
    uint64_t s = d->seed * 0x100000001b3ull ^ (uint64_t)epoch;
    for (size_t i = 0; i < W; i++) d->perm[i] = (uint32_t)i;
    for (size_t i = W - 1; i > 0; i--) {
        size_t j = (size_t)(splitmix64(&s) % (i + 1));
        uint32_t t = d->perm[i];
        d->perm[i] = d->perm[j];
        d->perm[j] = t;
    }
    d->perm_epoch = epoch;
}

void data_batch(Dataset* d, int split, long long first, int rank, int nranks, int B, int* tokens,
                int* targets, long long* windows) {
    const int T = d->T;
    for (int b = 0; b < B; b++) {
        const long long g = d->rank_blocks ? first + (long long)rank * B + b
                                           : first + rank + (long long)b * nranks; /* global sample index */
        long long w;
        size_t start;
        if (split == 0) {
            const long long W = (long long)d->n_windows[0];
            const long long epoch = g / W;
            if (epoch != d->perm_epoch) build_perm(d, epoch);
            w = d->perm[g % W];
            start = (size_t)w * (size_t)T;
        } else {
            w = g % (long long)d->n_windows[1];
            start = d->n_train + (size_t)w * (size_t)T;
        }
        if (windows) windows[b] = w;
        memcpy(tokens + (size_t)b * T, d->tokens + start, (size_t)T * sizeof(int));
        memcpy(targets + (size_t)b * T, d->tokens + start + 1, (size_t)T * sizeof(int));
    }
}

uint64_t data_hash(const Dataset* d) {
    uint64_t h = ZRT_FNV_INIT;
    for (size_t i = 0; i < d->n_tokens; i++) {
        uint32_t t = (uint32_t)d->tokens[i];
        unsigned char b[4] = {(unsigned char)t, (unsigned char)(t >> 8), (unsigned char)(t >> 16),
                              (unsigned char)(t >> 24)};
        h = zrt_fnv1a64(h, b, 4);
    }
    uint64_t split = d->n_train;
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(split >> (8 * i));
    return zrt_fnv1a64(h, b, 8);
}

int data_read_meta(const char* path, DataMeta* m, char* err, size_t errlen) {
    memset(m, 0, sizeof *m);
    snprintf(m->path, sizeof m->path, "%s.json", path);
    if (access(m->path, F_OK)) return 0;
    m->present = 1;
    json_error_t je;
    json_t* o = json_load_file(m->path, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return zrt_errf(err, errlen, "%s:%d:%d: not valid JSON: %s", PRINTABLE(m->path), je.line,
                        je.column, PRINTABLE(je.text));
    int rc = -1;
    json_t* f = json_object_get(o, "format");
    json_t* dt = json_object_get(o, "dtype");
    json_t* n = json_object_get(o, "tokens");
    json_t* v = json_object_get(o, "vocab_size");
    json_t* tf = json_object_get(o, "tokenizer_file");
    m->bos_id = m->eos_id = -1;
    if (!json_is_object(o) || !json_is_string(f) ||
        strcmp(json_string_value(f), "zipccl-runtime-tokens-1")) {
        zrt_errf(err, errlen, "%s: not token metadata of scripts/prepare_data.py (\"format\": "
                 "\"zipccl-runtime-tokens-1\")", PRINTABLE(m->path));
        goto done;
    }
    if (!json_is_string(dt) || (strcmp(json_string_value(dt), "u16") &&
                                strcmp(json_string_value(dt), "i32"))) {
        zrt_errf(err, errlen, "%s: field 'dtype' must be \"u16\" or \"i32\"", PRINTABLE(m->path));
        goto done;
    }
    if (!json_is_integer(n) || json_integer_value(n) < 1 || !json_is_integer(v) ||
        json_integer_value(v) < 1) {
        zrt_errf(err, errlen, "%s: fields 'tokens' and 'vocab_size' must be integers >= 1",
                 PRINTABLE(m->path));
        goto done;
    }
    snprintf(m->dtype, sizeof m->dtype, "%s", json_string_value(dt));
    m->tokens = json_integer_value(n);
    m->vocab_size = json_integer_value(v);
    const long long width = !strcmp(m->dtype, "u16") ? 2 : 4;
    /* ids are u16, or i32 >= 0: the vocabulary they can index */
    const long long max_vocab = width == 2 ? 65536 : 2147483648ll;
    if (m->vocab_size > max_vocab) {
        zrt_errf(err, errlen, "%s: field 'vocab_size': %lld is more than %s ids can tell apart "
                 "(%lld)", PRINTABLE(m->path), m->vocab_size, m->dtype, max_vocab);
        goto done;
    }
    static const char* const kIds[2] = {"bos_id", "eos_id"};
    long long* ids[2] = {&m->bos_id, &m->eos_id};
    for (int i = 0; i < 2; i++) {
        json_t* id = json_object_get(o, kIds[i]);
        *ids[i] = -1;
        if (!id || json_is_null(id)) continue;
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= m->vocab_size) {
            zrt_errf(err, errlen, "%s: field '%s' must be null or a token id in [0, vocab_size "
                     "%lld)", PRINTABLE(m->path), kIds[i], m->vocab_size);
            goto done;
        }
        *ids[i] = json_integer_value(id);
    }
    if (tf && !json_is_null(tf)) {
        /* a file beside the tokens (prepare_data.py writes its base name):
         * a name, not a path that reaches elsewhere */
        const char* name = json_is_string(tf) ? json_string_value(tf) : NULL;
        const char* slash = strrchr(path, '/');
        const int dirlen = slash ? (int)(slash - path + 1) : 0;
        if (!name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..") ||
            strlen(name) > 255) {
            zrt_errf(err, errlen, "%s: field 'tokenizer_file' must be the name of a file beside "
                     "the tokens (no '/', at most 255 bytes)", PRINTABLE(m->path));
            goto done;
        }
        if (name[0] && (size_t)snprintf(m->tokenizer, sizeof m->tokenizer, "%.*s%s", dirlen, path,
                                        name) >= sizeof m->tokenizer) {
            zrt_errf(err, errlen, "%s: field 'tokenizer_file': the path %s%s is too long",
                     PRINTABLE(m->path), PRINTABLE(path), PRINTABLE(name));
            goto done;
        }
    }
    struct stat sb;
    if (stat(path, &sb)) {
        zrt_errf(err, errlen, "%s: cannot read the tokens %s describes: %s", PRINTABLE(path),
                 PRINTABLE(m->path), strerror(errno));
        goto done;
    }
    if ((long long)sb.st_size % width || (long long)sb.st_size / width != m->tokens) {
        /* tokens x width only where it does not overflow */
        char want[40] = "";
        if (m->tokens <= LLONG_MAX / width)
            snprintf(want, sizeof want, " (%lld bytes)", m->tokens * width);
        zrt_errf(err, errlen,
                 "%s: %lld bytes, but %s says %lld %s tokens%s: the token file is truncated, or "
                 "not the one its metadata describes",
                 PRINTABLE(path), (long long)sb.st_size, PRINTABLE(m->path), m->tokens, m->dtype,
                 want);
        goto done;
    }
    rc = 0;
done:
    json_decref(o);
    return rc;
}
