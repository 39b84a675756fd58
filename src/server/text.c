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

int pms_utf8_repair(pms_buf *out, const char *text, size_t n)
{
    static const char repl[] = "\xEF\xBF\xBD";
    const unsigned char *p = (const unsigned char *)text;
    size_t i = 0, run = 0; /* run: valid bytes not yet copied, ending at i */
    while (i < n) {
        size_t want = lead_len(p[i]);
        int ok = want > 0;
        size_t got = ok ? scan_seq(p + i, n - i, want, &ok) : 1;
        if (ok && got == want) {
            i += got;
            run += got;
            continue;
        }
        if (pms_buf_append(out, p + i - run, run) || pms_buf_append(out, repl, 3))
            return -1;
        run = 0;
        i += got;
    }
    return pms_buf_append(out, p + i - run, run);
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
