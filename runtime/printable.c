/*
 * printable.c — zrt_printable: a string from a file or the command line as
 * text that is safe to print (the rules are in printable.h). Leaves out
 * everything else a log line needs (log.c).
 */
#include "printable.h"

#include <stdio.h>
#include <string.h>

/* The length of the valid UTF-8 sequence at p (n bytes left) and its code
 * point, or 0 when the bytes there are not one (RFC 3629: no overlong
 * forms, no surrogates, nothing past U+10FFFF). */
static size_t utf8_sequence(const unsigned char* p, size_t n, unsigned* cp) {
    const unsigned c = p[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xbf, v;
    if (c >= 0xc2 && c <= 0xdf) len = 2, v = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, v = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, v = c & 0x07;
    else return 0;
    if (c == 0xe0) lo = 0xa0;      /* overlong below U+0800 */
    else if (c == 0xed) hi = 0x9f; /* U+D800-U+DFFF, surrogates */
    else if (c == 0xf0) lo = 0x90; /* overlong below U+10000 */
    else if (c == 0xf4) hi = 0x8f; /* past U+10FFFF */
    if (n < len || p[1] < lo || p[1] > hi) return 0;
    v = v << 6 | (p[1] & 0x3f);
    for (size_t i = 2; i < len; i++) {
        if (p[i] < 0x80 || p[i] > 0xbf) return 0;
        v = v << 6 | (p[i] & 0x3f);
    }
    *cp = v;
    return len;
}

/* Valid, but controls or characters that reorder or break the line. */
static int unprintable_code_point(unsigned cp) {
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0x61c || cp == 0x200e || cp == 0x200f ||
           cp == 0x2028 || cp == 0x2029 || (cp >= 0x202a && cp <= 0x202e) ||
           (cp >= 0x2066 && cp <= 0x2069);
}

/* The output for the input at p[0] (n bytes left) into piece[16]: its
 * length, and in *take how many input bytes it stands for. */
static size_t printable_piece(const unsigned char* p, size_t n, char* piece, size_t* take) {
    size_t len = 0;
    unsigned cp;
    if (p[0] >= 0x20 && p[0] < 0x7f) {
        *take = 1;
        if (p[0] == '\\') piece[len++] = '\\';
        piece[len++] = (char)p[0];
    } else if ((*take = utf8_sequence(p, n, &cp)) && !unprintable_code_point(cp)) {
        memcpy(piece, p, *take);
        len = *take;
    } else {
        if (!*take) *take = 1; /* not UTF-8: this byte alone */
        for (size_t k = 0; k < *take; k++)
            len += (size_t)snprintf(piece + len, 16 - len, "\\x%02x", p[k]);
    }
    return len;
}

const char* zrt_printable_n(const void* s, size_t n, char* out, size_t cap) {
    if (!cap) return "";
    if (!s) s = "(null)", n = 6;
    const unsigned char* p = s;
    char piece[16];
    size_t total = 0, take;
    for (size_t i = 0; i < n; i += take) total += printable_piece(p + i, n - i, piece, &take);
    /* When it all fits, all of it; else whole pieces and then "...". */
    const size_t room = total < cap ? cap - 1 : cap > 4 ? cap - 4 : 0;
    size_t used = 0;
    for (size_t i = 0; i < n; i += take) {
        const size_t len = printable_piece(p + i, n - i, piece, &take);
        if (used + len > room) break;
        memcpy(out + used, piece, len);
        used += len;
    }
    if (total >= cap)
        for (int d = 0; d < 3 && used + 1 < cap; d++) out[used++] = '.';
    out[used] = '\0';
    return out;
}

const char* zrt_printable(const char* s, char* out, size_t cap) {
    return zrt_printable_n(s ? s : "(null)", s ? strlen(s) : 6, out, cap);
}

char* zrt_trim_utf8(char* s) {
    size_t n = strlen(s), k = 0;
    /* back over at most 3 continuation bytes to the sequence's lead byte */
    while (k < n && k < 3 && ((unsigned char)s[n - 1 - k] & 0xc0) == 0x80) k++;
    if (k == n) return s;
    const unsigned char lead = (unsigned char)s[n - 1 - k];
    const size_t want = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    if (lead >= 0xc0 && k + 1 < want) s[n - 1 - k] = '\0'; /* cut inside it */
    return s;
}

int zrt_yaml_quoted(const char* s, char* out, size_t cap) {
    /* worst case: 4 bytes out per byte in, and the quotes */
    const unsigned char* p = (const unsigned char*)s;
    const size_t n = strlen(s);
    size_t used = 0, take;
    char piece[16];
    if (cap < 3) return -1;
    out[used++] = '"';
    for (size_t i = 0; i < n; i += take) {
        unsigned cp = p[i];
        size_t len = 0;
        take = p[i] < 0x80 ? 1 : utf8_sequence(p + i, n - i, &cp);
        const int lone = !take; /* not UTF-8: YAML has no escape for a byte */
        if (lone) take = 1, cp = p[i];
        if (cp == '"' || cp == '\\') {
            piece[len++] = '\\';
            piece[len++] = (char)cp;
        } else if (!lone && ((cp >= 0x20 && cp < 0x7f) ||
                   (cp >= 0xa0 && !unprintable_code_point(cp) && cp != 0xfeff && cp != 0xfffe &&
                    cp != 0xffff))) {
            memcpy(piece, p + i, take);
            len = take;
        } else { /* YAML's \x and \u name code points */
            len = (size_t)snprintf(piece, sizeof piece, cp < 0x100 ? "\\x%02x" : "\\u%04x", cp);
        }
        if (used + len + 2 > cap) return -1;
        memcpy(out + used, piece, len);
        used += len;
    }
    out[used++] = '"';
    out[used] = '\0';
    return 0;
}
