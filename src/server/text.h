/* text.h — bounded byte buffers, UTF-8 repair and stop-string matching.
 *
 * Generated text arrives one token at a time and a token may be a single
 * byte of a multi-byte character (byte-fallback vocabularies), so what is
 * sent to a client must stop at character boundaries and must not run into
 * a stop string that is still being completed. These helpers answer "how
 * much of the text is safe to send now" and turn raw bytes into valid
 * UTF-8 for JSON (invalid sequences become U+FFFD).
 *
 * A pms_buf owns its bytes and never grows past its limit; an append that
 * would is refused whole (-1) and leaves the buffer unchanged. Not
 * thread-safe; the owner serializes.
 */
#ifndef PM_SERVER_TEXT_H
#define PM_SERVER_TEXT_H

#include <stddef.h>

typedef struct pms_buf {
    char *p;      /* NUL-terminated when cap > 0 */
    size_t n;     /* bytes used (NUL excluded) */
    size_t cap;   /* bytes allocated */
    size_t limit; /* most bytes n may reach; 0: no limit */
} pms_buf;

void pms_buf_init(pms_buf *b, size_t limit);
void pms_buf_free(pms_buf *b);
/* Appends n bytes. 0, or -1 (over the limit or out of memory). */
int pms_buf_append(pms_buf *b, const void *data, size_t n);
int pms_buf_puts(pms_buf *b, const char *s);
/* Appends formatted text (printf-style, bounded by the limit). */
int pms_buf_printf(pms_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Makes room for `more` bytes beyond n (and the NUL). 0 or -1. */
int pms_buf_reserve(pms_buf *b, size_t more);
/* Forgets the contents, keeps the allocation. */
void pms_buf_clear(pms_buf *b);

/* The length of the longest prefix of p[0..n) that does not end inside an
 * incomplete UTF-8 sequence. Invalid bytes count as complete (they will be
 * replaced), so only a truncated but so-far-valid tail of at most 3 bytes
 * is held back. */
size_t pms_utf8_complete(const char *p, size_t n);

/* Appends p[0..n) to out as valid UTF-8: each invalid or truncated
 * sequence (overlong forms, surrogates and code points above U+10FFFF
 * included) becomes U+FFFD. 0 or -1 as pms_buf_append. */
int pms_utf8_repair(pms_buf *out, const char *p, size_t n);

/* Appends p[0..n) to out as a quoted JSON string: '"' and '\\' escaped,
 * control characters as \n, \t, ... or \u00XX, invalid UTF-8 replaced
 * by U+FFFD as pms_utf8_repair does. Allocates only when out must grow.
 * 0 or -1 as pms_buf_append. */
int pms_json_quote(pms_buf *out, const char *p, size_t n);

/* Stop strings: the earliest offset >= from at which any of the n stops
 * begins in text[0..len), or (size_t)-1 when none occurs. Empty stops are
 * never matched. */
size_t pms_stop_find(const char *text, size_t len, size_t from, const char *const *stops,
                     const size_t *stop_lens, size_t n);

/* The length of the longest suffix of text[0..len) that is a proper
 * prefix of some stop string: bytes a streaming response must hold back
 * because the next token could complete a stop. */
size_t pms_stop_holdback(const char *text, size_t len, const char *const *stops,
                         const size_t *stop_lens, size_t n);

#endif
