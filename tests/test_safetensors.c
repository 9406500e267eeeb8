// test: timeout=120
/*
 * test_safetensors.c — the safetensors reader/writer (runtime/safetensors.h).
 *
 * Run with no arguments it checks itself: writer -> reader round trips
 * (dtypes, scalars, empty tensors, escaped names, metadata, 8-byte aligned
 * data, atomic replace), writer argument errors, ~35 hand-made malformed files
 * that must be refused with a message naming the problem, and every
 * truncation plus thousands of byte mutations of a valid file (run under ASan
 * by the suite, so a stray read would show).
 *
 * Two more modes serve tests/test_safetensors.py, which checks the C code
 * against the reference `safetensors` Python package:
 *   test_safetensors write PATH   write the file the Python side expects
 *   test_safetensors dump PATH    list tensors and metadata, hex-encoded, with
 *                                 an FNV-1a-64 of each tensor's bytes
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"
#include "testutil.h"

/* The deterministic contents shared with test_safetensors.py: element i of
 * a tensor with salt s has the 32-bit pattern mix(i, s). */
static uint32_t mix(uint32_t i, uint32_t salt) {
    uint32_t x = (i + 1) * 2654435761u ^ (salt * 0x9E3779B9u);
    x ^= x >> 15;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    return x;
}

static uint64_t fnv1a64(const void* p, size_t n) {
    const unsigned char* b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static char tmpdir[64];

static const char* tmp_path(const char* leaf) {
    static char buf[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, leaf);
    return buf[k];
}

static int write_bytes(const char* path, const void* p, size_t n) {
    FILE* fp = fopen(path, "wb");
    if (!fp) return -1;
    size_t w = fwrite(p, 1, n, fp);
    return fclose(fp) || w != n ? -1 : 0;
}

static unsigned char* read_bytes(const char* path, size_t* n) {
    FILE* fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char* p = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(p, 1, (size_t)sz, fp);
    fclose(fp);
    return p;
}

/* ---- the file shared with the Python test ----------------------------- */

typedef struct {
    const char* name;
    const char* dtype;
    int ndim;
    int64_t shape[4];
    uint32_t salt;
} spec;

/* Finite values only: some readers canonicalise NaNs.  For 16-bit floats the
 * top exponent bit is cleared; F32 uses exactly representable small values. */
static const spec kSpecs[] = {
    {"embed.weight", "F32", 2, {3, 5}, 1},
    {"layers.0.attn.wq\"quoted\\back", "BF16", 1, {7}, 2},
    {"layers.0.mlp/w1 \xc3\xa9", "F16", 3, {2, 3, 4}, 3},
    {"step", "I64", 0, {0}, 4},
    {"mask", "U8", 2, {2, 2}, 5},
    {"empty", "F32", 2, {0, 3}, 6},
    {"ids", "I32", 1, {4}, 7},
};
#define NSPECS (sizeof kSpecs / sizeof kSpecs[0])

static size_t spec_numel(const spec* s) {
    size_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= (size_t)s->shape[d];
    return n;
}

static void* spec_data(const spec* s, size_t* bytes) {
    size_t n = spec_numel(s), es = st_dtype_size(s->dtype);
    *bytes = n * es;
    unsigned char* p = malloc(*bytes ? *bytes : 1);
    for (size_t i = 0; i < n; i++) {
        uint32_t m = mix((uint32_t)i, s->salt);
        if (!strcmp(s->dtype, "F32")) {
            float v = (float)((int)(m % 101) - 50) * 0.125f;
            memcpy(p + 4 * i, &v, 4);
        } else if (es == 2) {
            uint16_t v = (uint16_t)(m & 0xBFFF);
            memcpy(p + 2 * i, &v, 2);
        } else if (es == 8) {
            int64_t v = (int64_t)m - 2000000000;
            memcpy(p + 8 * i, &v, 8);
        } else if (es == 4) {
            int32_t v = (int32_t)m;
            memcpy(p + 4 * i, &v, 4);
        } else {
            p[i] = (unsigned char)m;
        }
    }
    return p;
}

static const char* kMeta[][2] = {
    {"format", "pt"},
    {"step", "42"},
    {"note", "quote\" backslash\\ newline\n tab\t unicode \xc3\xa9\xe2\x82\xac"},
};

static int write_spec_file(const char* path, char* err, size_t errlen) {
    st_writer* w = st_writer_begin();
    void* data[NSPECS];
    int rc = 0;
    for (size_t i = 0; i < NSPECS; i++) {
        size_t bytes;
        data[i] = spec_data(&kSpecs[i], &bytes);
        if (!rc)
            rc = st_writer_add(w, kSpecs[i].name, kSpecs[i].dtype, kSpecs[i].ndim,
                               kSpecs[i].shape, data[i], bytes, err, errlen);
    }
    for (size_t i = 0; i < 3 && !rc; i++)
        rc = st_writer_set_metadata(w, kMeta[i][0], kMeta[i][1], err, errlen);
    if (!rc) rc = st_writer_write(w, path, err, errlen);
    for (size_t i = 0; i < NSPECS; i++) free(data[i]);
    st_writer_free(w);
    return rc;
}

static void print_hex(const char* s) {
    for (; *s; s++) printf("%02x", (unsigned char)*s);
}

static int dump(const char* path) {
    char err[512];
    st_file* f;
    if (st_open(path, &f, err, sizeof err)) {
        printf("ERROR %s\n", err);
        return 1;
    }
    for (size_t i = 0; i < st_num_metadata(f); i++) {
        const char *k, *v;
        st_metadata_at(f, i, &k, &v);
        printf("META ");
        print_hex(k);
        printf(" ");
        print_hex(v);
        printf("\n");
    }
    for (size_t i = 0; i < st_num_tensors(f); i++) {
        const st_tensor* t = st_tensor_at(f, i);
        void* buf = malloc(t->bytes ? t->bytes : 1);
        if (st_read(f, t, buf, t->bytes, err, sizeof err)) {
            printf("ERROR %s\n", err);
            free(buf);
            st_close(f);
            return 1;
        }
        printf("TENSOR ");
        print_hex(t->name);
        printf(" %s ", t->dtype);
        for (int d = 0; d < t->ndim; d++) printf(d ? ",%lld" : "%lld", (long long)t->shape[d]);
        if (!t->ndim) printf("-");
        printf(" %llu %016llx\n", (unsigned long long)t->bytes,
               (unsigned long long)fnv1a64(buf, t->bytes));
        free(buf);
    }
    st_close(f);
    return 0;
}

/* ---- self checks ------------------------------------------------------- */

static void check_round_trip(void) {
    char err[512] = "";
    const char* path = tmp_path("rt.safetensors");
    int rc = write_spec_file(path, err, sizeof err);
    CHECK(rc == 0, "rt_write", "%s", err);
    if (rc) return;
    CHECK(access(tmp_path("rt.safetensors.tmp"), F_OK) != 0, "rt_no_tmp_left", "%s.tmp remains",
          path);

    size_t n;
    unsigned char* raw = read_bytes(path, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | raw[i];
    CHECK(n >= 8 && (8 + hl) % 8 == 0 && raw[8] == '{', "rt_header_aligned",
          "header length %llu, first byte 0x%02x", (unsigned long long)hl, raw[8]);
    free(raw);

    st_file* f;
    rc = st_open(path, &f, err, sizeof err);
    CHECK(rc == 0, "rt_open", "%s", err);
    if (rc) return;
    CHECK(st_num_tensors(f) == NSPECS, "rt_count", "%zu tensors", st_num_tensors(f));
    int all_ok = 1;
    for (size_t i = 0; i < NSPECS && i < st_num_tensors(f); i++) {
        const spec* s = &kSpecs[i];
        const st_tensor* t = st_find(f, s->name);
        size_t bytes;
        void* want = spec_data(s, &bytes);
        int ok = t && t == st_tensor_at(f, i) && !strcmp(t->dtype, s->dtype) &&
                 t->ndim == s->ndim && t->bytes == bytes && t->elem_size == st_dtype_size(s->dtype) &&
                 t->numel == spec_numel(s);
        for (int d = 0; ok && d < s->ndim; d++) ok = t->shape[d] == s->shape[d];
        if (ok) {
            void* got = malloc(bytes ? bytes : 1);
            ok = !st_read(f, t, got, bytes, err, sizeof err) && !memcmp(got, want, bytes);
            free(got);
        }
        if (!ok) printf("# tensor %zu (%s) differs\n", i, s->name);
        all_ok &= ok;
        free(want);
    }
    CHECK(all_ok, "rt_tensors", "a tensor's description or bytes differ");
    CHECK(st_find(f, "nope") == NULL && st_find(f, "embed.weigh") == NULL, "rt_find_missing",
          "found a tensor that is not there");
    int md_ok = st_num_metadata(f) == 3;
    for (int i = 0; i < 3 && md_ok; i++) {
        const char* v = st_get_metadata(f, kMeta[i][0]);
        md_ok = v && !strcmp(v, kMeta[i][1]);
    }
    CHECK(md_ok && !st_get_metadata(f, "absent"), "rt_metadata", "metadata differs");
    if (st_num_tensors(f)) {
        char small[4];
        const st_tensor* t = st_tensor_at(f, 0);
        int rc = st_read(f, t, small, sizeof small, err, sizeof err);
        CHECK(rc == -1 && strstr(err, "destination"), "rt_read_dst_too_small", "err='%s'", err);
    }
    st_close(f);

    /* Replacing an existing file, and a file without metadata or tensors. */
    st_writer* w = st_writer_begin();
    rc = st_writer_write(w, path, err, sizeof err);
    st_writer_free(w);
    rc = rc || st_open(path, &f, err, sizeof err);
    CHECK(rc == 0 && st_num_tensors(f) == 0 && st_num_metadata(f) == 0, "rt_empty_file_replaces",
          "rc=%d %s", rc, err);
    if (!rc) st_close(f);

    /* Reading after the file was truncated under us. */
    rc = write_spec_file(path, err, sizeof err);
    rc = rc || st_open(path, &f, err, sizeof err);
    if (!rc) {
        const st_tensor* t = st_find(f, "ids");
        rc = truncate(path, (off_t)t->offset);
        char buf[64];
        int r = st_read(f, t, buf, sizeof buf, err, sizeof err);
        CHECK(rc == 0 && r == -1 && strstr(err, "ids"), "read_after_truncate", "r=%d err='%s'", r,
              err);
        st_close(f);
    }
}

static void check_writer_errors(void) {
    char err[256];
    st_writer* w = st_writer_begin();
    int64_t shp[9] = {2, 2, 1, 1, 1, 1, 1, 1, 1};
    float d[4] = {0};
#define WCASE(label, call, expect)                                                      \
    do {                                                                               \
        err[0] = 0;                                                                    \
        int rc_ = (call);                                                              \
        CHECK(rc_ == -1 && strstr(err, expect), label, "rc=%d err='%s' (want '%s')", rc_, \
              err, expect);                                                            \
    } while (0)
    WCASE("w_bad_dtype", st_writer_add(w, "a", "F33", 1, shp, d, 8, err, sizeof err), "dtype");
    WCASE("w_bytes_mismatch", st_writer_add(w, "a", "F32", 2, shp, d, 12, err, sizeof err),
          "16 bytes");
    WCASE("w_too_many_dims", st_writer_add(w, "a", "F32", 9, shp, d, 16, err, sizeof err), "ndim");
    WCASE("w_negative_dim", st_writer_add(w, "a", "F32", 1, (int64_t[]){-2}, d, 8, err, sizeof err),
          "negative");
    WCASE("w_reserved_name",
          st_writer_add(w, "__metadata__", "F32", 1, shp, d, 8, err, sizeof err), "reserved");
    WCASE("w_empty_name", st_writer_add(w, "", "F32", 1, shp, d, 8, err, sizeof err), "empty");
    WCASE("w_null_data", st_writer_add(w, "a", "F32", 1, shp, NULL, 8, err, sizeof err), "null");
#undef WCASE
    int rc1 = st_writer_add(w, "a", "F32", 2, shp, d, 16, err, sizeof err);
    int rc2 = st_writer_add(w, "a", "F32", 1, shp, d, 8, err, sizeof err);
    CHECK(rc1 == 0 && rc2 == -1 && strstr(err, "twice"), "w_duplicate_name", "rc=%d,%d err='%s'",
          rc1, rc2, err);
    st_writer_set_metadata(w, "k", "v1", err, sizeof err);
    st_writer_set_metadata(w, "k", "v2", err, sizeof err);
    const char* path = tmp_path("md.safetensors");
    st_file* f;
    int rc = st_writer_write(w, path, err, sizeof err) || st_open(path, &f, err, sizeof err);
    CHECK(!rc && st_num_metadata(f) == 1 && !strcmp(st_get_metadata(f, "k"), "v2"),
          "w_metadata_replace", "%s", err);
    if (!rc) st_close(f);
    rc = st_writer_write(w, "/nonexistent-dir/x.safetensors", err, sizeof err);
    CHECK(rc == -1 && strstr(err, "nonexistent-dir"), "w_unwritable_path", "rc=%d err='%s'", rc,
          err);
    st_writer_free(w);
}

/* A file made of an 8-byte length, the header text and `data` bytes; hl
 * overrides the length field when nonzero. */
static void make_file(const char* path, const char* header, size_t data, uint64_t hl) {
    size_t h = strlen(header);
    size_t n = 8 + h + data;
    unsigned char* p = calloc(1, n);
    uint64_t len = hl ? hl : h;
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(len >> (8 * i));
    memcpy(p + 8, header, h);
    write_bytes(path, p, n);
    free(p);
}

static void check_malformed(void) {
    static const struct {
        const char* label;
        const char* header;
        size_t data;
        const char* expect;
    } cases[] = {
        {"bad_unclosed_object", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4,
         "expected"},
        {"bad_trailing_garbage", "{} x", 0, "after the header"},
        {"bad_not_object", "[1,2]", 0, "expected '{'"},
        {"bad_float_in_shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
         "fraction"},
        {"bad_leading_zero", "{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4,
         "leading zero"},
        {"bad_huge_integer",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", 4,
         "too large"},
        {"bad_negative_dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
         "negative"},
        {"bad_too_many_dims",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
         "more than"},
        {"bad_shape_overflow",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
         "overflow"},
        {"bad_unknown_dtype", "{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "unknown dtype"},
        {"bad_size_mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8,
         "span"},
        {"bad_offsets_past_end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
         "past the end"},
        {"bad_offsets_reversed", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 8,
         "bad data_offsets"},
        {"bad_offsets_count", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
         "2 entries"},
        {"bad_overlap",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}",
         8, "overlap"},
        {"bad_hole_between_tensors",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
         12, "between tensors"},
        {"bad_gap_before_first_tensor", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "first 4 bytes belong to no tensor"},
        {"bad_bytes_after_last_tensor", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         5, "1 bytes after the last tensor"},
        {"bad_data_without_tensors", "{}", 4, "no tensor in the header"},
        {"bad_duplicate_name",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "twice"},
        {"bad_unknown_field",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
         "unknown field"},
        {"bad_missing_field", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "lacks data_offsets"},
        {"bad_field_twice", "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}", 4, "twice"},
        {"bad_tensor_not_object", "{\"a\":[1]}", 0, "expected '{'"},
        {"bad_metadata_value", "{\"__metadata__\":{\"k\":1}}", 0, "must be a string"},
        {"bad_metadata_twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "twice"},
        {"bad_escape", "{\"a\\x\":{}}", 0, "invalid escape"},
        {"bad_lone_surrogate", "{\"a\\udc00\":{}}", 0, "surrogate"},
        {"bad_half_surrogate", "{\"a\\ud800x\":{}}", 0, "surrogate"},
        {"bad_control_char", "{\"a\x01\":{}}", 0, "control character"},
        {"bad_unterminated_string", "{\"abc", 0, "unterminated"},
        {"bad_true_literal", "{\"__metadata__\":{\"k\":true}}", 0, "must be a string"},
        {"bad_deep_nesting", "{\"a\":{\"dtype\":\"F32\",\"shape\":[[[[[[1]]]]]]}}", 0,
         "expected an integer"},
        {"bad_empty_header", "", 0, "expected '{'"},
        {"bad_nul_escape", "{\"a\\u0000\":{}}", 0, "u0000"},
    };
    char err[512];
    const char* path = tmp_path("bad.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        make_file(path, cases[i].header, cases[i].data, 0);
        st_file* f = NULL;
        err[0] = 0;
        int rc = st_open(path, &f, err, sizeof err);
        CHECK(rc == -1 && f == NULL && strstr(err, cases[i].expect), cases[i].label,
              "rc=%d err='%s' (want '%s')", rc, err, cases[i].expect);
        if (!rc) st_close(f);
    }

    struct {
        const char* label;
        size_t file_bytes;
        uint64_t hl;
        const char* expect;
    } lens[] = {
        {"bad_empty_file", 0, 0, "too short"},
        {"bad_short_file", 5, 0, "too short"},
        {"bad_huge_header_length", 64, 1ull << 40, "exceeds"},
        {"bad_max_header_length", 64, ~0ull, "exceeds"},
        {"bad_header_past_eof", 64, 1000, "runs past"},
    };
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        unsigned char buf[64] = {0};
        for (int b = 0; b < 8; b++) buf[b] = (unsigned char)(lens[i].hl >> (8 * b));
        memset(buf + 8, ' ', sizeof buf - 8);
        write_bytes(path, buf, lens[i].file_bytes);
        st_file* f = NULL;
        err[0] = 0;
        int rc = st_open(path, &f, err, sizeof err);
        CHECK(rc == -1 && strstr(err, lens[i].expect), lens[i].label, "rc=%d err='%s'", rc, err);
        if (!rc) st_close(f);
    }
    st_file* f = NULL;
    int rc = st_open(tmpdir, &f, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "regular"), "bad_directory", "err='%s'", err);
    rc = st_open(tmp_path("missing.safetensors"), &f, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "cannot open"), "bad_missing_file", "err='%s'", err);
}

/* Every prefix and many random byte mutations of a valid file: st_open either
 * refuses with a message, or accepts a file whose tensors all read back. */
static void check_mutations(void) {
    char err[512];
    const char* good = tmp_path("good.safetensors");
    const char* path = tmp_path("mut.safetensors");
    if (write_spec_file(good, err, sizeof err)) {
        CHECK(0, "mutations_setup", "%s", err);
        return;
    }
    size_t n;
    unsigned char* orig = read_bytes(good, &n);
    unsigned char* buf = malloc(n);
    int truncations_refused = 1, consistent = 1;
    for (size_t len = 0; len < n; len++) {
        write_bytes(path, orig, len);
        st_file* f;
        err[0] = 0;
        if (!st_open(path, &f, err, sizeof err)) {
            truncations_refused = 0;
            st_close(f);
        } else if (!err[0]) {
            consistent = 0;
        }
    }
    CHECK(truncations_refused && consistent, "truncated_prefixes_refused",
          "a truncated file was accepted or refused without a message");

    uint32_t seed = 12345;
    int accepted = 0, refused = 0;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, orig, n);
        int flips = 1 + iter % 3;
        for (int k = 0; k < flips; k++) {
            seed = seed * 1664525u + 1013904223u;
            size_t pos = (seed >> 8) % (n < 400 ? n : 400); /* mostly the header */
            seed = seed * 1664525u + 1013904223u;
            unsigned char flip = (unsigned char)(1u << (seed >> 29));
            buf[pos] = (iter & 1) ? (unsigned char)(seed >> 24) : buf[pos] ^ flip;
        }
        write_bytes(path, buf, n);
        st_file* f;
        err[0] = 0;
        if (st_open(path, &f, err, sizeof err)) {
            refused++;
            if (!err[0]) consistent = 0;
            continue;
        }
        accepted++;
        for (size_t i = 0; i < st_num_tensors(f); i++) {
            const st_tensor* t = st_tensor_at(f, i);
            if (t->offset + t->bytes > n || st_find(f, t->name) != t) consistent = 0;
            void* dst = malloc(t->bytes ? t->bytes : 1);
            if (st_read(f, t, dst, t->bytes, err, sizeof err)) consistent = 0;
            free(dst);
        }
        st_close(f);
    }
    CHECK(consistent && refused > 0, "mutations_safe",
          "accepted %d refused %d, inconsistent result seen", accepted, refused);
    free(orig);
    free(buf);
}

static void rm_tree(void) {
    const char* leaves[] = {"rt.safetensors", "md.safetensors", "bad.safetensors",
                            "good.safetensors", "mut.safetensors", "rt.safetensors.tmp"};
    for (size_t i = 0; i < sizeof leaves / sizeof leaves[0]; i++) unlink(tmp_path(leaves[i]));
    rmdir(tmpdir);
}

int main(int argc, char** argv) {
    if (argc == 3 && !strcmp(argv[1], "write")) {
        char err[512];
        if (write_spec_file(argv[2], err, sizeof err)) {
            printf("ERROR %s\n", err);
            return 1;
        }
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "dump")) return dump(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: %s [write PATH | dump PATH]\n", argv[0]);
        return 2;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_safetensors.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL setup: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    check_round_trip();
    check_writer_errors();
    check_malformed();
    check_mutations();
    rm_tree();
    return tu_exit();
}
