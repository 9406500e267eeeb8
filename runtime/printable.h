/*
 * printable.h — how a string from a file or the command line is shown:
 * zrt_printable (runtime/printable.c). Apart from log.h (which includes it)
 * so that the loaders' fuzz targets (tests/fuzz/) link it without MPI.
 */
#ifndef ZRT_PRINTABLE_H
#define ZRT_PRINTABLE_H
#include <stddef.h>

/* s as text that is safe to print: a name, key, value or path read from a
 * file or given on the command line may hold bytes a terminal obeys (ESC
 * sequences set its title and colours, move the cursor, or fake a log line
 * after a newline), so every error and log line quotes such a string
 * through this. Printable ASCII passes through unchanged, and so does valid
 * UTF-8 of printable characters ("é", "中"). Becomes \xNN (two lower-case
 * hex digits) per byte: the C0 controls 0x00-0x1f (tab and newline too),
 * DEL 0x7f, the C1 controls U+0080-U+009F, the characters that move text
 * (U+2028 and U+2029 line and paragraph separators; the bidirectional
 * marks, embeddings, overrides and isolates U+061C, U+200E-U+200F,
 * U+202A-U+202E, U+2066-U+2069), and every byte that is not part of valid
 * UTF-8 (a lone continuation byte, a cut sequence, an overlong form, a
 * surrogate, past U+10FFFF). A backslash becomes \\, so the result is
 * unambiguous: "\x1b" in it always means the byte 0x1b. For ASCII bytes
 * these are also the escapes of YAML's double-quoted scalars.
 *
 * The result goes into out[cap], always NUL-terminated; when it does not
 * fit it is cut between escapes (never inside one) and ends in "..."; the
 * return value is out (a NULL s gives "(null)"). zrt_printable_n reads n
 * bytes, NUL included, for strings that are not NUL-terminated.
 * Left out: other invisible or look-alike characters (zero-width spaces and
 * joiners, the byte-order mark, homoglyphs, combining marks), which cannot
 * move the cursor or change a terminal's state; quoting; line breaking. */
const char* zrt_printable(const char* s, char* out, size_t cap);
const char* zrt_printable_n(const void* s, size_t n, char* out, size_t cap);

/* zrt_printable into a temporary buffer of ZRT_PRINTABLE_CAP bytes that
 * lives until the end of the enclosing block, for use as an argument:
 *     zrt_errf(err, errlen, "tensor '%s': ...", PRINTABLE(t->name));  */
#define ZRT_PRINTABLE_CAP 1024
#define PRINTABLE(s) zrt_printable((s), (char[ZRT_PRINTABLE_CAP]){0}, ZRT_PRINTABLE_CAP)

/* s as a YAML double-quoted scalar that reads back to the same string
 * (config_print): printable characters as they are, '"' and '\\' escaped,
 * every other code point the escapes of zrt_printable leave out of the
 * text as YAML's \xNN or \uNNNN (U+FEFF, U+FFFE and U+FFFF too, which
 * YAML does not take raw). A byte that is not part of valid UTF-8 becomes
 * \xNN too, which YAML reads back as U+00NN: YAML cannot hold a lone byte.
 * Returns 0, or -1 when the result (at most 4 strlen(s) + 3 bytes) does not
 * fit out[cap]. */
int zrt_yaml_quoted(const char* s, char* out, size_t cap);

/* Cut off an incomplete UTF-8 sequence at the end of s (in place): what
 * a fixed-size message buffer leaves when vsnprintf stops inside a
 * multi-byte character of a printable string. Returns s. */
char* zrt_trim_utf8(char* s);

#endif
