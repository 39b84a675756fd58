/* format.c — range text without snprintf.
 *
 * Range text is built on every enabled structured push, so it is formatted
 * by a few lines of our own into the caller's stack buffer: no locale, no
 * varargs, no allocation, and no library call per piece (keys are literals
 * whose length the compiler knows; values are copied in one bounded pass).
 *
 * What is written comes from the range-kind table (kinds.h), which the
 * tools' parser reads too: one small writer per key is generated from
 * PM__KEYS, and one formatter per kind from PM__KINDS, calling the writers
 * of its keys in table order. Nothing below names a kind or a key.
 *
 * The one rule that matters for the tools is the cut: attributes go in
 * whole or not at all, and after the first one that does not fit nothing
 * more is added, so a reader never sees half a key=value pair and never
 * sees a later attribute without an earlier one.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <string.h>

/* Longest decimal of a 64-bit value, sign included. */
enum { PM__DEC_MAX = 21 };

/* Writes v's decimal digits ending just before end; returns the start. */
static char *dec_u64_back(char *end, uint64_t v)
{
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

static char *dec_i64_back(char *end, int64_t v)
{
    if (v >= 0)
        return dec_u64_back(end, (uint64_t)v);
    /* Negate in unsigned arithmetic so INT64_MIN does not overflow. */
    char *p = dec_u64_back(end, (uint64_t)0 - (uint64_t)v);
    *--p = '-';
    return p;
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

/* Appends prefix (plen bytes) then the NUL-terminated value, or nothing:
 * on overflow the text is restored to where it was and marked cut. */
static inline __attribute__((always_inline)) void attr_bytes(pm__text *t, const char *prefix,
                                                             size_t plen, const char *v)
{
    if (t->cut || !t->cap)
        return;
    char *p = t->buf + t->len;
    char *end = t->buf + t->cap - 1;
    if (plen > (size_t)(end - p))
        goto cut;
    memcpy(p, prefix, plen); /* plen is a literal's size: inlined moves */
    p += plen;
    for (; *v; v++) {
        if (p == end)
            goto cut;
        *p++ = *v;
    }
    *p = '\0';
    t->len = (size_t)(p - t->buf);
    return;
cut:
    t->buf[t->len] = '\0';
    t->cut = 1;
}

static inline void text_attr_str(pm__text *t, const char *prefix, size_t plen, const char *value)
{
    attr_bytes(t, prefix, plen, value ? value : "unknown");
}

static inline void text_attr_u64(pm__text *t, const char *prefix, size_t plen, uint64_t value)
{
    char d[PM__DEC_MAX + 1];
    d[PM__DEC_MAX] = '\0';
    attr_bytes(t, prefix, plen, dec_u64_back(d + PM__DEC_MAX, value));
}

static inline void text_attr_i64(pm__text *t, const char *prefix, size_t plen, int64_t value)
{
    char d[PM__DEC_MAX + 1];
    d[PM__DEC_MAX] = '\0';
    attr_bytes(t, prefix, plen, dec_i64_back(d + PM__DEC_MAX, value));
}

static inline void text_attr_span(pm__text *t, const char *prefix, size_t plen, int64_t first,
                        int64_t last)
{
    char d[2 * PM__DEC_MAX + 2];
    d[sizeof d - 1] = '\0';
    char *p = dec_i64_back(d + sizeof d - 1, last);
    *--p = '-';
    p = dec_i64_back(p, first);
    attr_bytes(t, prefix, plen, p);
}

/* " key=" as a literal and its length, for the helpers above. */
#define KEY(k) " " k "=", sizeof(" " k "=") - 1

/* The default prefix's heads are constants, so a process that never calls
 * pm_configure formats from read-only data and pm__set_prefix runs only
 * for an embedder's own prefix. */
#define HEAD_TEXT(ID, name, ...) [PM__KIND_##ID] = PHASEMARK_DEFAULT_PREFIX "." #name,
#define HEAD_LEN(ID, name, ...) [PM__KIND_##ID] = sizeof(PHASEMARK_DEFAULT_PREFIX "." #name) - 1,
pm__prefix_text pm__prefix = {
    .text = PHASEMARK_DEFAULT_PREFIX ".",
    .len = sizeof PHASEMARK_DEFAULT_PREFIX,
    .head = {PM__KINDS(HEAD_TEXT)},
    .head_len = {PM__KINDS(HEAD_LEN)},
};
#undef HEAD_LEN
#undef HEAD_TEXT
_Static_assert(sizeof PHASEMARK_DEFAULT_PREFIX - 1 <= PM__PREFIX_MAX,
               "PHASEMARK_DEFAULT_PREFIX is longer than PM__PREFIX_MAX");
#define HEAD_ROOM(ID, name, ...)                                            \
    _Static_assert(PM__PREFIX_MAX + 1 + sizeof(#name) <= PM__HEAD_CAP,      \
                   "the longest prefix and kind " #name " fit PM__HEAD_CAP");
PM__KINDS(HEAD_ROOM)
#undef HEAD_ROOM

static const char *const kind_name[PM__KIND_COUNT] = {
#define KIND_NAME(ID, name, ...) [PM__KIND_##ID] = #name,
    PM__KINDS(KIND_NAME)
#undef KIND_NAME
};

int pm__set_prefix(const char *s, size_t len)
{
    if (!pm__prefix_valid(s, len))
        return -1;
    memcpy(pm__prefix.text, s, len);
    pm__prefix.text[len] = PM__NAME_SEP;
    pm__prefix.text[len + 1] = '\0';
    pm__prefix.len = len + 1;
    for (int k = 0; k < PM__KIND_COUNT; k++) {
        char *h = pm__prefix.head[k];
        size_t klen = strlen(kind_name[k]);
        memset(h, 0, PM__HEAD_CAP);
        memcpy(h, pm__prefix.text, len + 1);
        memcpy(h + len + 1, kind_name[k], klen);
        pm__prefix.head_len[k] = (unsigned char)(len + 1 + klen);
    }
    return 0;
}

/* Starts a text with the head of `kind` under the prefix in force; every
 * kind fits any buffer of PM_RANGE_TEXT_MAX bytes (a prefix is at most
 * PM__PREFIX_MAX), and smaller buffers are cut at the byte. */
static inline void start(pm__text *t, char *buf, size_t cap, pm__kind kind)
{
    t->buf = buf;
    t->cap = cap;
    t->cut = 0;
    t->len = 0;
    if (__builtin_expect(cap >= PM__HEAD_CAP, 1)) {
        /* The whole padded head, NUL included: bytes past its length are
         * zeros inside the caller's buffer, overwritten by what follows. */
        memcpy(buf, pm__prefix.head[kind], PM__HEAD_CAP);
        t->len = pm__prefix.head_len[kind];
        return;
    }
    if (cap)
        buf[0] = '\0';
    pm__text_raw(t, pm__prefix.head[kind]);
}

_Static_assert(PM__HEAD_CAP <= PM_RANGE_TEXT_MAX, "a head fits a range text");

/* " key=R:T,R:T,..." for a batch's requests, whole or not at all. */
static void text_attr_reqs(pm__text *t, const char *prefix, size_t plen, const pm_batch_req *r,
                           uint32_t n)
{
    if (t->cut || !t->cap)
        return;
    size_t start_len = t->len;
    char *end = t->buf + t->cap - 1;
    if (plen > (size_t)(end - (t->buf + t->len)))
        goto cut;
    memcpy(t->buf + t->len, prefix, plen);
    t->len += plen;
    for (uint32_t i = 0; i < n; i++) {
        char d[2 * PM__DEC_MAX + 3];
        char *q = d + sizeof d;
        q = dec_u64_back(q, r[i].tokens);
        *--q = ':';
        q = dec_u64_back(q, r[i].req);
        if (i)
            *--q = ',';
        size_t dn = (size_t)(d + sizeof d - q);
        if (dn > (size_t)(end - (t->buf + t->len)))
            goto cut;
        memcpy(t->buf + t->len, q, dn);
        t->len += dn;
    }
    t->buf[t->len] = '\0';
    return;
cut:
    t->len = start_len;
    t->buf[t->len] = '\0';
    t->cut = 1;
}

/* How a value of each pm__vtype is written: x is the key's pm__values
 * field, mode the range's mode as its kind's formatter resolved it (MODE
 * writes that, not x). A UINT field that is signed in pm__values is written
 * with its sign. */
#define PUT_MODE(t, k, x, mode) text_attr_str((t), KEY(k), pm_phase_name(mode))
#define PUT_UINT(t, k, x, mode) \
    _Generic((x), int64_t: text_attr_i64, default: text_attr_u64)((t), KEY(k), (x))
#define PUT_SPAN(t, k, x, mode) text_attr_span((t), KEY(k), (x).first, (x).last)
#define PUT_WHERE(t, k, x, mode) \
    text_attr_str((t), KEY(k), pm__where_name((x) == PM_WHERE_REMOTE))
#define PUT_TEXT(t, k, x, mode) text_attr_str((t), KEY(k), (x))
#define PUT_REQS(t, k, x, mode) text_attr_reqs((t), KEY(k), v->reqs, v->nreqs)

_Static_assert(PM_WHERE_LOCAL == 0 && PM_WHERE_REMOTE == 1, "pm__where_name is indexed by pm_where");

/* put_<ID>(t, v, mode): appends " key=value" for one key of PM__KEYS. */
#define DEFINE_PUT(ID, name, type)                                                 \
    static inline void put_##ID(pm__text *t, const pm__values *v, pm_phase mode)  \
    {                                                                              \
        (void)v, (void)mode;                                                       \
        PUT_##type(t, #name, v->name, mode);                                       \
    }
PM__KEYS(DEFINE_PUT)
#undef DEFINE_PUT

/* pm__format_<name>(buf, cap, v): one kind of PM__KINDS, its literal name and
 * then its keys' writers in table order. A phase kind's mode is its phase,
 * a constant here, so its text is folded at compile time; any other kind's
 * mode is v->mode. */
#define PM__ATTR(ID) put_##ID(&t, v, mode);
#define PM__OPT(ID)                                   \
    if (!(v->omit & (1u << PM__KEY_##ID)))            \
        put_##ID(&t, v, mode);
#define DEFINE_FORMAT(ID, name, leaf, phase, modes, keys)                      \
    size_t pm__format_##name(char *buf, size_t cap, const pm__values *v)      \
    {                                                                          \
        const pm_phase mode = (phase) != PM_PHASE_NONE ? (phase) : v->mode;    \
        pm__text t;                                                            \
        start(&t, buf, cap, PM__KIND_##ID);                                    \
        keys                                                                   \
        return t.len;                                                          \
    }
PM__KINDS(DEFINE_FORMAT)
#undef DEFINE_FORMAT
#undef PM__OPT
#undef PM__ATTR

size_t pm__format(pm__kind kind, char *buf, size_t cap, const pm__values *v)
{
    switch (kind) {
#define FORMAT_CASE(ID, name, ...) \
    case PM__KIND_##ID:            \
        return pm__format_##name(buf, cap, v);
        PM__KINDS(FORMAT_CASE)
#undef FORMAT_CASE
    case PM__KIND_COUNT:
        break;
    }
    if (cap)
        buf[0] = '\0';
    return 0;
}
