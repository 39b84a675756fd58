/* format.c — range text without snprintf.
 *
 * Range text is built on every enabled push, so it is formatted by a few
 * lines of our own into the caller's stack buffer: no locale, no varargs
 * parsing, no allocation. The one rule that matters for the tools is the cut:
 * attributes go in whole or not at all, and after the first one that does
 * not fit nothing more is added, so a reader never sees half a key=value
 * pair and never sees a later attribute without an earlier one.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <string.h>

/* Longest decimal of a 64-bit value, sign included. */
enum { PM__DEC_MAX = 21 };

static size_t dec_u64(char *out, uint64_t v)
{
    char tmp[PM__DEC_MAX];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

static size_t dec_i64(char *out, int64_t v)
{
    if (v >= 0)
        return dec_u64(out, (uint64_t)v);
    out[0] = '-';
    /* Negate in unsigned arithmetic so INT64_MIN does not overflow. */
    return 1 + dec_u64(out + 1, (uint64_t)0 - (uint64_t)v);
}

void pm__text_init(pm__text *t, char *buf, size_t cap, const char *kind)
{
    t->buf = buf;
    t->cap = cap;
    t->len = 0;
    t->cut = 0;
    if (cap)
        buf[0] = '\0';
    pm__text_raw(t, kind);
}

void pm__text_raw(pm__text *t, const char *s)
{
    if (!t->cap)
        return;
    size_t room = t->cap - 1 - t->len;
    size_t n = strlen(s);
    if (n > room) {
        n = room;
        t->cut = 1;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

/* Appends " key=" + the value bytes when they all fit; else marks the cut. */
static void attr_bytes(pm__text *t, const char *key, const char *val, size_t vlen)
{
    if (t->cut || !t->cap)
        return;
    size_t klen = strlen(key);
    size_t need = 1 + klen + 1 + vlen;
    if (need > t->cap - 1 - t->len) {
        t->cut = 1;
        return;
    }
    char *p = t->buf + t->len;
    *p++ = ' ';
    memcpy(p, key, klen);
    p += klen;
    *p++ = '=';
    memcpy(p, val, vlen);
    t->len += need;
    t->buf[t->len] = '\0';
}

void pm__text_attr_str(pm__text *t, const char *key, const char *value)
{
    if (!value)
        value = "unknown";
    attr_bytes(t, key, value, strlen(value));
}

void pm__text_attr_u64(pm__text *t, const char *key, uint64_t value)
{
    char d[PM__DEC_MAX];
    attr_bytes(t, key, d, dec_u64(d, value));
}

void pm__text_attr_i64(pm__text *t, const char *key, int64_t value)
{
    char d[PM__DEC_MAX];
    attr_bytes(t, key, d, dec_i64(d, value));
}

void pm__text_attr_span(pm__text *t, const char *key, int64_t first, int64_t last)
{
    char d[2 * PM__DEC_MAX + 1];
    size_t n = dec_i64(d, first);
    d[n++] = '-';
    n += dec_i64(d + n, last);
    attr_bytes(t, key, d, n);
}

size_t pm__format_prefill(char *buf, size_t cap, uint64_t req, uint32_t pos, uint32_t tokens)
{
    pm__text t;
    pm__text_init(&t, buf, cap, "pm.prefill");
    pm__text_attr_str(&t, "mode", pm_phase_name(PM_PHASE_EXACT));
    pm__text_attr_u64(&t, "req", req);
    pm__text_attr_u64(&t, "pos", pos);
    pm__text_attr_u64(&t, "tokens", tokens);
    return t.len;
}

size_t pm__format_decode(char *buf, size_t cap, uint64_t req, uint32_t pos)
{
    pm__text t;
    pm__text_init(&t, buf, cap, "pm.decode");
    pm__text_attr_str(&t, "mode", pm_phase_name(PM_PHASE_DECODE));
    pm__text_attr_u64(&t, "req", req);
    pm__text_attr_u64(&t, "pos", pos);
    return t.len;
}

size_t pm__format_spec_decode(char *buf, size_t cap, uint64_t req, uint32_t draft)
{
    pm__text t;
    pm__text_init(&t, buf, cap, "pm.spec_decode");
    pm__text_attr_str(&t, "mode", pm_phase_name(PM_PHASE_BATCHED));
    pm__text_attr_u64(&t, "req", req);
    pm__text_attr_u64(&t, "draft", draft);
    return t.len;
}

size_t pm__format_draft(char *buf, size_t cap, uint64_t req, uint32_t tokens)
{
    pm__text t;
    pm__text_init(&t, buf, cap, "pm.draft");
    pm__text_attr_u64(&t, "req", req);
    pm__text_attr_u64(&t, "tokens", tokens);
    return t.len;
}

size_t pm__format_layer_range(char *buf, size_t cap, const pm_layer_attr *attr,
                              pm_phase mode)
{
    pm__text t;
    pm__text_init(&t, buf, cap, "pm.layer_range");
    pm__text_attr_str(&t, "mode", pm_phase_name(mode));
    pm__text_attr_span(&t, "layers", attr->first_layer, attr->last_layer);
    pm__text_attr_i64(&t, "shard", attr->shard);
    pm__text_attr_str(&t, "where", attr->where == PM_WHERE_REMOTE ? "remote" : "local");
    pm__text_attr_str(&t, "backend", attr->backend);
    pm__text_attr_u64(&t, "req", attr->req);
    pm__text_attr_u64(&t, "tokens", attr->tokens);
    return t.len;
}

size_t pm__format_copy(char *buf, size_t cap, const char *text)
{
    if (!cap)
        return 0;
    size_t n = strnlen(text, cap);
    if (n < cap) {
        memcpy(buf, text, n + 1);
        return n;
    }
    /* Too long: keep the longest prefix that ends before a space, so the
     * last key=value pair kept is whole. Text without any space is cut at
     * the byte, as it has no attributes to protect. */
    size_t end = cap - 1;
    while (end > 0 && text[end] != ' ')
        end--;
    if (end == 0)
        end = cap - 1;
    memcpy(buf, text, end);
    buf[end] = '\0';
    return end;
}
