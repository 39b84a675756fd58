/* text.c — bounded buffers, UTF-8 repair, stop strings (see text.h). */
#include "text.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pms_buf_init(pms_buf *b, size_t limit)
{
    b->p = NULL;
    b->n = 0;
    b->cap = 0;
    b->limit = limit;
}

void pms_buf_free(pms_buf *b)
{
    free(b->p);
    pms_buf_init(b, b->limit);
}

void pms_buf_clear(pms_buf *b)
{
    b->n = 0;
    if (b->cap)
        b->p[0] = 0;
}

/* Makes room for `more` bytes plus the NUL, doubling so that a stream of
 * small appends costs amortized O(1). */
int pms_buf_reserve(pms_buf *b, size_t more)
{
    if (more > SIZE_MAX / 2 - b->n || (b->limit && b->n + more > b->limit))
        return -1;
    size_t need = b->n + more + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int pms_buf_append(pms_buf *b, const void *data, size_t n)
{
    if (pms_buf_reserve(b, n))
        return -1;
    if (n)
        memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int pms_buf_puts(pms_buf *b, const char *s)
{
    return pms_buf_append(b, s, strlen(s));
}

int pms_buf_printf(pms_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0 || pms_buf_reserve(b, (size_t)len))
        return -1;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)len + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)len;
    return 0;
}

/* Length of the sequence a lead byte announces; 0 for a byte that cannot
 * begin one (a continuation byte, 0xC0/0xC1, 0xF5..0xFF). */
static size_t lead_len(unsigned char c)
{
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 0;
}

/* The valid range of the second byte, which excludes overlong forms,
 * surrogates and code points past U+10FFFF (RFC 3629, section 4). */
static int second_ok(unsigned char lead, unsigned char c)
{
    unsigned char lo = 0x80, hi = 0xBF;
    if (lead == 0xE0)
        lo = 0xA0;
    else if (lead == 0xED)
        hi = 0x9F;
    else if (lead == 0xF0)
        lo = 0x90;
    else if (lead == 0xF4)
        hi = 0x8F;
    return c >= lo && c <= hi;
}

/* How many bytes of a well-formed prefix p[0..n) of the sequence starting
 * at p holds (1..want); *ok says whether they are all valid. */
static size_t scan_seq(const unsigned char *p, size_t n, size_t want, int *ok)
{
    size_t i = 1;
    *ok = 1;
    for (; i < want && i < n; i++) {
        int good = i == 1 ? second_ok(p[0], p[1]) : (p[i] & 0xC0) == 0x80;
        if (!good) {
            *ok = 0;
            return i;
        }
    }
    return i;
}

size_t pms_utf8_complete(const char *text, size_t n)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t start = n > 3 ? n - 3 : 0;
    for (size_t i = n; i-- > start;) {
        size_t want = lead_len(p[i]);
        if (want == 0 && (p[i] & 0xC0) == 0x80)
            continue; /* a continuation: look further back for its lead */
        if (want <= 1)
            return n;
        int ok;
        size_t got = scan_seq(p + i, n - i, want, &ok);
        return ok && got < want ? i : n;
    }
    return n;
}

/* Walks text as UTF-8: emit(ctx, bytes, len) for each run of valid
 * sequences and emit(ctx, NULL, 0) for each invalid or truncated one. */
typedef int (*utf8_emit)(void *ctx, const unsigned char *p, size_t n);

static int utf8_walk(const char *text, size_t n, utf8_emit emit, void *ctx)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t i = 0, run = 0; /* run: valid bytes not yet emitted, ending at i */
    while (i < n) {
        size_t want = lead_len(p[i]);
        int ok = want > 0;
        size_t got = ok ? scan_seq(p + i, n - i, want, &ok) : 1;
        if (ok && got == want) {
            i += got;
            run += got;
            continue;
        }
        if ((run && emit(ctx, p + i - run, run)) || emit(ctx, NULL, 0))
            return -1;
        run = 0;
        i += got;
    }
    return run ? emit(ctx, p + i - run, run) : 0;
}

static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */

static int emit_raw(void *ctx, const unsigned char *p, size_t n)
{
    return p ? pms_buf_append(ctx, p, n) : pms_buf_append(ctx, replacement, 3);
}

int pms_utf8_repair(pms_buf *out, const char *text, size_t n)
{
    return utf8_walk(text, n, emit_raw, out);
}

/* RFC 8259, section 7: quotation mark, reverse solidus and the control
 * characters U+0000..U+001F must be escaped; everything else may appear
 * as is. */
static int emit_json(void *ctx, const unsigned char *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    pms_buf *out = ctx;
    if (!p)
        return pms_buf_append(out, replacement, 3);
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        char esc[6] = {'\\', (char)c, 0, 0, 0, 0};
        size_t len = 2;
        if (c == '\n' || c == '\t' || c == '\r' || c == '\b' || c == '\f')
            esc[1] = c == '\n' ? 'n' : c == '\t' ? 't' : c == '\r' ? 'r' : c == '\b' ? 'b' : 'f';
        else if (c < 0x20) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            len = 6;
        }
        if (pms_buf_append(out, p + start, i - start) || pms_buf_append(out, esc, len))
            return -1;
        start = i + 1;
    }
    return pms_buf_append(out, p + start, n - start);
}

int pms_json_quote(pms_buf *out, const char *text, size_t n)
{
    return pms_buf_append(out, "\"", 1) || utf8_walk(text, n, emit_json, out) || pms_buf_append(out, "\"", 1) ? -1
                                                                                                        : 0;
}

size_t pms_stop_find(const char *text, size_t len, size_t from, const char *const *stops,
                     const size_t *stop_lens, size_t n)
{
    size_t best = (size_t)-1;
    for (size_t k = 0; k < n; k++) {
        size_t sl = stop_lens[k];
        if (sl == 0 || sl > len)
            continue;
        for (size_t i = from; i + sl <= len && i < best; i++) {
            if (memcmp(text + i, stops[k], sl) == 0) {
                best = i;
                break;
            }
        }
    }
    return best;
}

size_t pms_stop_holdback(const char *text, size_t len, const char *const *stops,
                         const size_t *stop_lens, size_t n)
{
    size_t hold = 0;
    for (size_t k = 0; k < n; k++) {
        size_t sl = stop_lens[k];
        for (size_t m = sl > 0 ? sl - 1 : 0; m > hold; m--) {
            if (m <= len && memcmp(text + len - m, stops[k], m) == 0) {
                hold = m;
                break;
            }
        }
    }
    return hold;
}
