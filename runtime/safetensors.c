/*
 * safetensors.c — reader and writer of the safetensors format (safetensors.h).
 *
 * The file reads top to bottom: dtypes and error helpers, the writer (JSON
 * emission, atomic write), a small strict JSON parser that understands
 * exactly the header's grammar, and the reader (parse, validate, pread).
 *
 * The parser is structure-directed rather than a general JSON library: the
 * header is an object of tensor objects plus one string->string metadata
 * object, so it only needs objects, arrays of integers and strings with
 * escapes.  Anything else (floats, true/false/null, unknown tensor fields,
 * duplicate keys, nesting deeper than the format has) is refused with the
 * byte position, which is what a user debugging a broken dump wants.
 *
 * Names, keys and paths are quoted in messages through zrt_printable
 * (log.h): a header's strings are the file's to choose, escape sequences
 * included.
 *
 * Left out: byte-level UTF-8 validation of names (they are passed through),
 * "\u0000" inside strings (C strings cannot hold it), memory mapping.
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

/* ------------------------------------------------------------------------ */
/* dtypes, errors, small helpers                                            */
/* ------------------------------------------------------------------------ */

static const struct {
    const char* name;
    size_t size;
} kDtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8},
};

size_t st_dtype_size(const char* dtype) {
    if (!dtype) return 0;
    for (size_t i = 0; i < sizeof kDtypes / sizeof kDtypes[0]; i++)
        if (!strcmp(dtype, kDtypes[i].name)) return kDtypes[i].size;
    return 0;
}

__attribute__((format(printf, 3, 4))) static int st_fail(char* err, size_t errlen,
                                                         const char* fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        zrt_trim_utf8(err); /* a cut message ends between characters */
    }
    return -1;
}

static char* st_strdup(const char* s) {
    size_t n = strlen(s) + 1;
    char* d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* product(shape) × elem_size with overflow detection; -1 on overflow or a
 * negative dimension (the message says which). */
static int shape_bytes(int ndim, const int64_t* shape, size_t elem_size, uint64_t* numel,
                       uint64_t* bytes, char* err, size_t errlen) {
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return st_fail(err, errlen, "dimension %d is negative (%lld)", d,
                                         (long long)shape[d]);
        if (__builtin_mul_overflow(n, (uint64_t)shape[d], &n))
            return st_fail(err, errlen, "shape product overflows 64 bits");
    }
    uint64_t b;
    if (__builtin_mul_overflow(n, (uint64_t)elem_size, &b))
        return st_fail(err, errlen, "shape product x dtype size overflows 64 bits");
    *numel = n;
    *bytes = b;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* writer                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    char* name;
    char dtype[8];
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void* data;
    size_t bytes;
} wtensor;

typedef struct {
    char* key;
    char* value;
} kv;

struct st_writer {
    wtensor* t;
    size_t nt, tcap;
    kv* md;
    size_t nmd, mdcap;
};

st_writer* st_writer_begin(void) { return calloc(1, sizeof(st_writer)); }

void st_writer_free(st_writer* w) {
    if (!w) return;
    for (size_t i = 0; i < w->nt; i++) free(w->t[i].name);
    for (size_t i = 0; i < w->nmd; i++) free(w->md[i].key), free(w->md[i].value);
    free(w->t);
    free(w->md);
    free(w);
}

int st_writer_add(st_writer* w, const char* name, const char* dtype, int ndim,
                  const int64_t* shape, const void* data, size_t bytes, char* err,
                  size_t errlen) {
    if (!w || !name || !dtype) return st_fail(err, errlen, "st_writer_add: null argument");
    if (!name[0]) return st_fail(err, errlen, "tensor name is empty");
    if (!strcmp(name, "__metadata__"))
        return st_fail(err, errlen, "\"__metadata__\" is reserved, not a tensor name");
    size_t es = st_dtype_size(dtype);
    if (!es)
        return st_fail(err, errlen, "tensor '%s': unknown dtype '%s'", PRINTABLE(name),
                       PRINTABLE(dtype));
    if (ndim < 0 || ndim > ST_MAX_DIMS)
        return st_fail(err, errlen, "tensor '%s': ndim %d outside 0..%d", PRINTABLE(name), ndim,
                       ST_MAX_DIMS);
    if (ndim > 0 && !shape)
        return st_fail(err, errlen, "tensor '%s': null shape", PRINTABLE(name));
    uint64_t numel, want;
    char why[128];
    if (shape_bytes(ndim, shape, es, &numel, &want, why, sizeof why))
        return st_fail(err, errlen, "tensor '%s': %s", PRINTABLE(name), why);
    if (want != (uint64_t)bytes)
        return st_fail(err, errlen, "tensor '%s': shape x %s size is %llu bytes, got %zu",
                       PRINTABLE(name), dtype, (unsigned long long)want, bytes);
    if (bytes && !data) return st_fail(err, errlen, "tensor '%s': null data", PRINTABLE(name));
    for (size_t i = 0; i < w->nt; i++)
        if (!strcmp(w->t[i].name, name))
            return st_fail(err, errlen, "tensor '%s' added twice", PRINTABLE(name));
    if (w->nt == w->tcap) {
        size_t cap = w->tcap ? 2 * w->tcap : 16;
        wtensor* t = realloc(w->t, cap * sizeof *t);
        if (!t) return st_fail(err, errlen, "out of memory");
        w->t = t, w->tcap = cap;
    }
    wtensor* t = &w->t[w->nt];
    memset(t, 0, sizeof *t);
    if (!(t->name = st_strdup(name))) return st_fail(err, errlen, "out of memory");
    snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->data = data;
    t->bytes = bytes;
    w->nt++;
    return 0;
}

int st_writer_set_metadata(st_writer* w, const char* key, const char* value, char* err,
                           size_t errlen) {
    if (!w || !key || !value) return st_fail(err, errlen, "st_writer_set_metadata: null argument");
    char* v = st_strdup(value);
    if (!v) return st_fail(err, errlen, "out of memory");
    for (size_t i = 0; i < w->nmd; i++)
        if (!strcmp(w->md[i].key, key)) {
            free(w->md[i].value);
            w->md[i].value = v;
            return 0;
        }
    if (w->nmd == w->mdcap) {
        size_t cap = w->mdcap ? 2 * w->mdcap : 8;
        kv* md = realloc(w->md, cap * sizeof *md);
        if (!md) return free(v), st_fail(err, errlen, "out of memory");
        w->md = md, w->mdcap = cap;
    }
    char* k = st_strdup(key);
    if (!k) return free(v), st_fail(err, errlen, "out of memory");
    w->md[w->nmd++] = (kv){k, v};
    return 0;
}

/* A growable byte string for the header; `oom` sticks once set so callers
 * check it once at the end. */
typedef struct {
    char* p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_put(sbuf* b, const char* s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char* p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf* b, const char* fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof tmp) b->oom = 1; /* only used for numbers */
    else sb_put(b, tmp, (size_t)n);
}

/* JSON string literal: quote, backslash and control bytes escaped, bytes
 * >= 0x80 passed through (UTF-8 stays UTF-8). */
static void sb_json_string(sbuf* b, const char* s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
        } else if (c < 0x20) {
            sb_printf(b, "\\u%04x", c);
        } else {
            sb_put(b, (const char*)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int write_all(FILE* fp, const void* p, size_t n) {
    return fwrite(p, 1, n, fp) == n ? 0 : -1;
}

int st_writer_write(st_writer* w, const char* path, char* err, size_t errlen) {
    if (!w || !path) return st_fail(err, errlen, "st_writer_write: null argument");
    sbuf h = {0};
    sb_put(&h, "{", 1);
    if (w->nmd) {
        sb_put(&h, "\"__metadata__\":{", 16);
        for (size_t i = 0; i < w->nmd; i++) {
            if (i) sb_put(&h, ",", 1);
            sb_json_string(&h, w->md[i].key);
            sb_put(&h, ":", 1);
            sb_json_string(&h, w->md[i].value);
        }
        sb_put(&h, "}", 1);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->nt; i++) {
        const wtensor* t = &w->t[i];
        if (i || w->nmd) sb_put(&h, ",", 1);
        sb_json_string(&h, t->name);
        sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", t->dtype);
        for (int d = 0; d < t->ndim; d++)
            sb_printf(&h, d ? ",%lld" : "%lld", (long long)t->shape[d]);
        sb_printf(&h, "],\"data_offsets\":[%llu,", (unsigned long long)off);
        off += t->bytes;
        sb_printf(&h, "%llu]}", (unsigned long long)off);
    }
    sb_put(&h, "}", 1);
    /* Pad with spaces so the data starts 8-byte aligned, as the reference
     * writer does: a reader that maps the file can then use it in place. */
    while (!h.oom && (8 + h.len) % 8) sb_put(&h, " ", 1);
    if (h.oom) return free(h.p), st_fail(err, errlen, "out of memory building the header");
    if (h.len > ST_MAX_HEADER_BYTES)
        return free(h.p), st_fail(err, errlen, "header of %zu bytes exceeds the %u-byte limit",
                                  h.len, ST_MAX_HEADER_BYTES);

    size_t plen = strlen(path);
    char* tmp = malloc(plen + 5);
    if (!tmp) return free(h.p), st_fail(err, errlen, "out of memory");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE* fp = fopen(tmp, "wb");
    if (!fp) {
        st_fail(err, errlen, "cannot create '%s': %s", PRINTABLE(tmp), strerror(errno));
        return free(tmp), free(h.p), -1;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    int bad = write_all(fp, len8, 8) || write_all(fp, h.p, h.len);
    for (size_t i = 0; i < w->nt && !bad; i++)
        if (w->t[i].bytes) bad = write_all(fp, w->t[i].data, w->t[i].bytes);
    int saved = errno;
    if (!bad && fflush(fp)) bad = 1, saved = errno;
    if (!bad && fsync(fileno(fp))) bad = 1, saved = errno;
    if (fclose(fp) && !bad) bad = 1, saved = errno;
    if (!bad && rename(tmp, path)) {
        st_fail(err, errlen, "cannot rename '%s' to '%s': %s", PRINTABLE(tmp), PRINTABLE(path),
                strerror(errno));
        unlink(tmp);
        return free(tmp), free(h.p), -1;
    }
    if (bad) {
        st_fail(err, errlen, "writing '%s' failed: %s", PRINTABLE(tmp), strerror(saved));
        unlink(tmp);
        return free(tmp), free(h.p), -1;
    }
    free(tmp);
    free(h.p);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* strict JSON for the header                                               */
/* ------------------------------------------------------------------------ */

typedef struct {
    const char* p;
    const char* begin;
    const char* end;
    char* err;
    size_t errlen;
} jparser;

__attribute__((format(printf, 2, 3))) static int jfail(jparser* j, const char* fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    zrt_trim_utf8(msg);
    return st_fail(j->err, j->errlen, "header JSON, byte %zu: %s", (size_t)(j->p - j->begin), msg);
}

static void jws(jparser* j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

/* Skip whitespace, then require character c. */
static int jexpect(jparser* j, char c) {
    jws(j);
    if (j->p >= j->end) return jfail(j, "expected '%c', found end of header", c);
    if (*j->p != c) {
        char found[8];
        return jfail(j, "expected '%c', found '%s'", c,
                     zrt_printable_n(j->p, 1, found, sizeof found));
    }
    j->p++;
    return 0;
}

/* Skip whitespace; 1 and consume if the next character is c, else 0. */
static int jaccept(jparser* j, char c) {
    jws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return 1;
    }
    return 0;
}

static int hex4(const char* s, unsigned* out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* Parse a string literal into a malloc'ed UTF-8 C string (escapes decoded).
 * The decoded form is never longer than the literal, which sizes the buffer. */
static int jstring(jparser* j, char** out) {
    jws(j);
    if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a string");
    const char* start = ++j->p;
    const char* q = start;
    while (q < j->end && *q != '"') q += (*q == '\\') ? 2 : 1;
    if (q >= j->end) return jfail(j, "unterminated string");
    char* s = malloc((size_t)(q - start) + 1);
    if (!s) return jfail(j, "out of memory");
    size_t n = 0;
    while (*j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20) return free(s), jfail(j, "unescaped control character 0x%02x in string", c);
        if (c != '\\') {
            s[n++] = (char)c;
            j->p++;
            continue;
        }
        char e = j->p[1];
        j->p += 2;
        switch (e) {
        case '"': s[n++] = '"'; break;
        case '\\': s[n++] = '\\'; break;
        case '/': s[n++] = '/'; break;
        case 'b': s[n++] = '\b'; break;
        case 'f': s[n++] = '\f'; break;
        case 'n': s[n++] = '\n'; break;
        case 'r': s[n++] = '\r'; break;
        case 't': s[n++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (j->end - j->p < 4 || hex4(j->p, &cp))
                return free(s), jfail(j, "bad \\u escape (want 4 hex digits)");
            j->p += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return free(s), jfail(j, "lone low surrogate \\u%04x", cp);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' ||
                    hex4(j->p + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return free(s), jfail(j, "high surrogate \\u%04x without its low half", cp);
                j->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0) return free(s), jfail(j, "\\u0000 in a string is not supported");
            if (cp < 0x80) {
                s[n++] = (char)cp;
            } else if (cp < 0x800) {
                s[n++] = (char)(0xC0 | (cp >> 6));
                s[n++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                s[n++] = (char)(0xE0 | (cp >> 12));
                s[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                s[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                s[n++] = (char)(0xF0 | (cp >> 18));
                s[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                s[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                s[n++] = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default:
            j->p -= 2;
            char shown[8];
            return free(s), jfail(j, "invalid escape '\\%s'",
                                  zrt_printable_n(&e, 1, shown, sizeof shown));
        }
    }
    j->p++; /* closing quote */
    s[n] = 0;
    *out = s;
    return 0;
}

/* A JSON integer (no fraction, no exponent, no leading zeros) in int64. */
static int jint(jparser* j, int64_t* out) {
    jws(j);
    int neg = 0;
    if (j->p < j->end && *j->p == '-') neg = 1, j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jfail(j, "expected an integer");
    if (*j->p == '0' && j->p + 1 < j->end && j->p[1] >= '0' && j->p[1] <= '9')
        return jfail(j, "integer with a leading zero");
    uint64_t v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (v > (UINT64_C(1) << 63) / 10) return jfail(j, "integer too large");
        v = v * 10 + (uint64_t)(*j->p++ - '0');
    }
    if (v > (uint64_t)INT64_MAX + (uint64_t)neg) return jfail(j, "integer too large");
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return jfail(j, "expected an integer, found a number with a fraction or exponent");
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* [int, int, ...] into a[0..max); *n receives the count. */
static int jint_array(jparser* j, int64_t* a, int max, int* n, const char* what) {
    if (jexpect(j, '[')) return -1;
    *n = 0;
    if (jaccept(j, ']')) return 0;
    do {
        if (*n == max) return jfail(j, "%s has more than %d entries", what, max);
        if (jint(j, &a[(*n)++])) return -1;
    } while (jaccept(j, ','));
    return jexpect(j, ']');
}

/* ------------------------------------------------------------------------ */
/* reader                                                                   */
/* ------------------------------------------------------------------------ */

struct st_file {
    int fd;
    uint64_t file_size;
    uint64_t data_start; /* 8 + header length */
    st_tensor* t;
    size_t nt, tcap;
    const st_tensor** by_name; /* sorted by name, for st_find */
    kv* md;
    size_t nmd, mdcap;
    int have_md;
};

/* One tensor entry: {"dtype": ..., "shape": [...], "data_offsets": [b, e]},
 * fields in any order, each exactly once. */
static int parse_tensor(jparser* j, st_file* f, char* name) {
    if (f->nt == f->tcap) {
        size_t cap = f->tcap ? 2 * f->tcap : 16;
        st_tensor* t = realloc(f->t, cap * sizeof *t);
        if (!t) return free(name), jfail(j, "out of memory");
        f->t = t, f->tcap = cap;
    }
    st_tensor* t = &f->t[f->nt++];
    memset(t, 0, sizeof *t);
    t->name = name; /* owned by f from here on, freed by st_close */
    int have_dtype = 0, have_shape = 0, have_offsets = 0, noff = 0;
    int64_t off[2] = {0, 0};
    if (jexpect(j, '{')) return -1;
    if (jaccept(j, '}')) return jfail(j, "tensor '%s' has no fields", PRINTABLE(name));
    do {
        char* key;
        if (jstring(j, &key)) return -1;
        if (jexpect(j, ':')) return free(key), -1;
        if (!strcmp(key, "dtype")) {
            char* dt;
            if (have_dtype++)
                return free(key), jfail(j, "tensor '%s': dtype given twice", PRINTABLE(name));
            if (jstring(j, &dt)) return free(key), -1;
            t->elem_size = st_dtype_size(dt);
            if (!t->elem_size) {
                char shown[40];
                jfail(j, "tensor '%s': unknown dtype '%s'", PRINTABLE(name),
                      zrt_printable(dt, shown, sizeof shown));
                return free(dt), free(key), -1;
            }
            snprintf(t->dtype, sizeof t->dtype, "%s", dt);
            free(dt);
        } else if (!strcmp(key, "shape")) {
            if (have_shape++)
                return free(key), jfail(j, "tensor '%s': shape given twice", PRINTABLE(name));
            if (jint_array(j, t->shape, ST_MAX_DIMS, &t->ndim, "shape")) return free(key), -1;
        } else if (!strcmp(key, "data_offsets")) {
            if (have_offsets++)
                return free(key),
                       jfail(j, "tensor '%s': data_offsets given twice", PRINTABLE(name));
            if (jint_array(j, off, 2, &noff, "data_offsets")) return free(key), -1;
            if (noff != 2)
                return free(key),
                       jfail(j, "tensor '%s': data_offsets needs 2 entries", PRINTABLE(name));
        } else {
            char shown[72];
            jfail(j, "tensor '%s': unknown field '%s'", PRINTABLE(name),
                  zrt_printable(key, shown, sizeof shown));
            return free(key), -1;
        }
        free(key);
    } while (jaccept(j, ','));
    if (jexpect(j, '}')) return -1;
    if (!have_dtype || !have_shape || !have_offsets)
        return jfail(j, "tensor '%s' lacks %s", PRINTABLE(name),
                     !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");

    /* Semantics: sizes agree and the bytes lie inside the data section. */
    char why[128];
    if (shape_bytes(t->ndim, t->shape, t->elem_size, &t->numel, &t->bytes, why, sizeof why))
        return st_fail(j->err, j->errlen, "tensor '%s': %s", PRINTABLE(name), why);
    uint64_t data_size = f->file_size - f->data_start;
    if (off[0] < 0 || off[1] < off[0])
        return st_fail(j->err, j->errlen, "tensor '%s': bad data_offsets [%lld, %lld]",
                       PRINTABLE(name),
                       (long long)off[0], (long long)off[1]);
    if ((uint64_t)off[1] > data_size)
        return st_fail(j->err, j->errlen,
                       "tensor '%s': data_offsets [%lld, %lld] run past the end of the data "
                       "(%llu bytes; file truncated?)",
                       PRINTABLE(name), (long long)off[0], (long long)off[1],
                       (unsigned long long)data_size);
    if ((uint64_t)(off[1] - off[0]) != t->bytes)
        return st_fail(j->err, j->errlen,
                       "tensor '%s': shape x %s size is %llu bytes but data_offsets span %llu",
                       PRINTABLE(name), t->dtype, (unsigned long long)t->bytes,
                       (unsigned long long)(off[1] - off[0]));
    t->offset = f->data_start + (uint64_t)off[0];
    return 0;
}

static int parse_metadata(jparser* j, st_file* f) {
    if (f->have_md++) return jfail(j, "__metadata__ given twice");
    if (jexpect(j, '{')) return -1;
    if (jaccept(j, '}')) return 0;
    do {
        char *k, *v;
        if (jstring(j, &k)) return -1;
        if (jexpect(j, ':')) return free(k), -1;
        jws(j);
        if (j->p < j->end && *j->p != '"') {
            char shown[72];
            jfail(j, "__metadata__ value of '%s' must be a string",
                  zrt_printable(k, shown, sizeof shown));
            return free(k), -1;
        }
        if (jstring(j, &v)) return free(k), -1;
        for (size_t i = 0; i < f->nmd; i++)
            if (!strcmp(f->md[i].key, k)) {
                char shown[72];
                jfail(j, "__metadata__ key '%s' given twice",
                      zrt_printable(k, shown, sizeof shown));
                return free(k), free(v), -1;
            }
        if (f->nmd == f->mdcap) {
            size_t cap = f->mdcap ? 2 * f->mdcap : 8;
            kv* md = realloc(f->md, cap * sizeof *md);
            if (!md) return free(k), free(v), jfail(j, "out of memory");
            f->md = md, f->mdcap = cap;
        }
        f->md[f->nmd++] = (kv){k, v};
    } while (jaccept(j, ','));
    return jexpect(j, '}');
}

static int parse_header(jparser* j, st_file* f) {
    if (jexpect(j, '{')) return -1;
    if (!jaccept(j, '}')) {
        do {
            char* key;
            if (jstring(j, &key)) return -1;
            if (jexpect(j, ':')) return free(key), -1;
            if (!strcmp(key, "__metadata__")) {
                free(key);
                if (parse_metadata(j, f)) return -1;
            } else if (parse_tensor(j, f, key)) {
                return -1;
            }
        } while (jaccept(j, ','));
        if (jexpect(j, '}')) return -1;
    }
    jws(j); /* the header may be padded with spaces */
    if (j->p != j->end) return jfail(j, "unexpected data after the header object");
    return 0;
}

static int cmp_name(const void* a, const void* b) {
    return strcmp((*(const st_tensor* const*)a)->name, (*(const st_tensor* const*)b)->name);
}
static int cmp_offset(const void* a, const void* b) {
    const st_tensor* x = *(const st_tensor* const*)a;
    const st_tensor* y = *(const st_tensor* const*)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Duplicate names, overlapping byte ranges, and a data region the tensors
 * do not index entirely, checked over sorted views. The format (and the
 * reference implementation) wants the byte buffer indexed without holes or
 * trailing bytes: what no tensor covers is either a polyglot file or a
 * damaged one; a header length one byte short, for one, shifts every tensor
 * by a byte and leaves one trailing, and would load as other numbers. */
static int check_tensor_set(st_file* f, char* err, size_t errlen) {
    const uint64_t data_size = f->file_size - f->data_start;
    if (!f->nt)
        return data_size ? st_fail(err, errlen, "%llu bytes of data but no tensor in the header",
                                   (unsigned long long)data_size)
                         : 0;
    const st_tensor** by_off = malloc(f->nt * sizeof *by_off);
    f->by_name = malloc(f->nt * sizeof *f->by_name);
    if (!by_off || !f->by_name) return free(by_off), st_fail(err, errlen, "out of memory");
    for (size_t i = 0; i < f->nt; i++) by_off[i] = f->by_name[i] = &f->t[i];
    qsort(f->by_name, f->nt, sizeof *by_off, cmp_name);
    qsort(by_off, f->nt, sizeof *by_off, cmp_offset);
    for (size_t i = 1; i < f->nt; i++)
        if (!strcmp(f->by_name[i - 1]->name, f->by_name[i]->name))
            return free(by_off), st_fail(err, errlen, "tensor '%s' appears twice in the header",
                                         PRINTABLE(f->by_name[i]->name));
    int rc = 0;
    if (by_off[0]->offset != f->data_start)
        rc = st_fail(err, errlen, "the data's first %llu bytes belong to no tensor (the first, '%s', "
                     "starts at data offset %llu)",
                     (unsigned long long)(by_off[0]->offset - f->data_start), PRINTABLE(by_off[0]->name),
                     (unsigned long long)(by_off[0]->offset - f->data_start));
    for (size_t i = 1; i < f->nt && !rc; i++) {
        const uint64_t end = by_off[i - 1]->offset + by_off[i - 1]->bytes;
        if (end > by_off[i]->offset)
            rc = st_fail(err, errlen, "tensors '%s' and '%s' overlap in the file",
                         PRINTABLE(by_off[i - 1]->name), PRINTABLE(by_off[i]->name));
        else if (end < by_off[i]->offset)
            rc = st_fail(err, errlen, "%llu bytes between tensors '%s' and '%s' belong to no tensor",
                         (unsigned long long)(by_off[i]->offset - end), PRINTABLE(by_off[i - 1]->name),
                         PRINTABLE(by_off[i]->name));
    }
    const st_tensor* last = by_off[f->nt - 1];
    if (!rc && last->offset + last->bytes != f->file_size)
        rc = st_fail(err, errlen, "%llu bytes after the last tensor ('%s') belong to no tensor (the header "
                     "length may be wrong)",
                     (unsigned long long)(f->file_size - last->offset - last->bytes), PRINTABLE(last->name));
    free(by_off);
    return rc;
}

/* pread until n bytes or failure; returns bytes read (short on EOF). */
static size_t pread_full(int fd, void* dst, size_t n, uint64_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char*)dst + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    return got;
}

int st_open(const char* path, st_file** out, char* err, size_t errlen) {
    if (!path || !out) return st_fail(err, errlen, "st_open: null argument");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return st_fail(err, errlen, "cannot open '%s': %s", PRINTABLE(path), strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return st_fail(err, errlen, "'%s' is not a regular file", PRINTABLE(path));
    }
    st_file* f = calloc(1, sizeof *f);
    if (!f) return close(fd), st_fail(err, errlen, "out of memory");
    f->fd = fd;
    f->file_size = (uint64_t)sb.st_size;

    unsigned char len8[8];
    if (f->file_size < 8 || pread_full(fd, len8, 8, 0) != 8) {
        st_fail(err, errlen, "'%s': %llu bytes, too short for the 8-byte header length",
                PRINTABLE(path),
                (unsigned long long)f->file_size);
        return st_close(f), -1;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | len8[i];
    if (n > ST_MAX_HEADER_BYTES) {
        st_fail(err, errlen, "'%s': header length %llu exceeds the %u-byte limit (not a "
                "safetensors file?)", PRINTABLE(path), (unsigned long long)n, ST_MAX_HEADER_BYTES);
        return st_close(f), -1;
    }
    if (n > f->file_size - 8) {
        st_fail(err, errlen, "'%s': header length %llu runs past the end of the %llu-byte file",
                PRINTABLE(path), (unsigned long long)n, (unsigned long long)f->file_size);
        return st_close(f), -1;
    }
    f->data_start = 8 + n;
    char* h = malloc(n ? n : 1);
    if (!h) return st_close(f), st_fail(err, errlen, "out of memory for a %llu-byte header",
                                        (unsigned long long)n);
    if (pread_full(fd, h, n, 8) != n) {
        free(h);
        st_fail(err, errlen, "'%s': cannot read the header: %s", PRINTABLE(path), strerror(errno));
        return st_close(f), -1;
    }
    jparser j = {h, h, h + n, err, errlen};
    char why[512];
    j.err = why, j.errlen = sizeof why;
    int bad = parse_header(&j, f) || check_tensor_set(f, why, sizeof why);
    free(h);
    if (bad) {
        st_fail(err, errlen, "'%s': %s", PRINTABLE(path), why);
        return st_close(f), -1;
    }
    *out = f;
    return 0;
}

size_t st_num_tensors(const st_file* f) { return f ? f->nt : 0; }

const st_tensor* st_tensor_at(const st_file* f, size_t i) {
    return f && i < f->nt ? &f->t[i] : NULL;
}

const st_tensor* st_find(const st_file* f, const char* name) {
    if (!f || !name || !f->nt) return NULL;
    size_t lo = 0, hi = f->nt;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->by_name[mid]->name, name);
        if (!c) return f->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int st_read(const st_file* f, const st_tensor* t, void* dst, size_t dst_capacity, char* err,
            size_t errlen) {
    if (!f || !t || (!dst && t->bytes)) return st_fail(err, errlen, "st_read: null argument");
    if (t < f->t || t >= f->t + f->nt)
        return st_fail(err, errlen, "st_read: tensor does not belong to this file");
    if (dst_capacity < t->bytes)
        return st_fail(err, errlen, "tensor '%s' has %llu bytes, destination holds %zu",
                       PRINTABLE(t->name),
                       (unsigned long long)t->bytes, dst_capacity);
    errno = 0;
    size_t got = pread_full(f->fd, dst, (size_t)t->bytes, t->offset);
    if (got != t->bytes)
        return st_fail(err, errlen, "tensor '%s': read %zu of %llu bytes at offset %llu (%s)",
                       PRINTABLE(t->name), got, (unsigned long long)t->bytes,
                       (unsigned long long)t->offset, errno ? strerror(errno) : "end of file");
    return 0;
}

int st_read_range(const st_file* f, const st_tensor* t, uint64_t begin, size_t n, void* dst,
                  char* err, size_t errlen) {
    if (!f || !t || (!dst && n)) return st_fail(err, errlen, "st_read_range: null argument");
    if (t < f->t || t >= f->t + f->nt)
        return st_fail(err, errlen, "st_read_range: tensor does not belong to this file");
    if (begin > t->bytes || n > t->bytes - begin)
        return st_fail(err, errlen, "tensor '%s': bytes [%llu, %llu) lie outside its %llu bytes",
                       PRINTABLE(t->name), (unsigned long long)begin,
                       (unsigned long long)(begin + n),
                       (unsigned long long)t->bytes);
    errno = 0;
    size_t got = pread_full(f->fd, dst, n, t->offset + begin);
    if (got != n)
        return st_fail(err, errlen, "tensor '%s': read %zu of %zu bytes at offset %llu (%s)",
                       PRINTABLE(t->name), got, n, (unsigned long long)(t->offset + begin),
                       errno ? strerror(errno) : "end of file");
    return 0;
}

const char* st_get_metadata(const st_file* f, const char* key) {
    if (!f || !key) return NULL;
    for (size_t i = 0; i < f->nmd; i++)
        if (!strcmp(f->md[i].key, key)) return f->md[i].value;
    return NULL;
}

size_t st_num_metadata(const st_file* f) { return f ? f->nmd : 0; }

int st_metadata_at(const st_file* f, size_t i, const char** key, const char** value) {
    if (!f || i >= f->nmd) return -1;
    if (key) *key = f->md[i].key;
    if (value) *value = f->md[i].value;
    return 0;
}

void st_close(st_file* f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (size_t i = 0; i < f->nt; i++) free((char*)f->t[i].name);
    for (size_t i = 0; i < f->nmd; i++) free(f->md[i].key), free(f->md[i].value);
    free(f->t);
    free(f->by_name);
    free(f->md);
    free(f);
}
