/* codec.c — frame headers, the incremental decoder and the metadata writer.
 *
 * The decoder follows hiredis' reader: bytes go in (copied, or received in
 * place through the reserve/commit hooks), whole frames come out, and
 * "incomplete" is the normal answer 0. A header is validated the moment its
 * 32 bytes are present, so a hostile length is refused before any buffer
 * grows for it. Errors are sticky.
 *
 * Invariants: rpos <= wpos <= cap <= bound; the frame handed out last
 * (pending bytes at rpos) stays put until the next feed/next/reserve call;
 * a frame is handed out only from an 8-byte aligned offset, so its body
 * (which starts at an 8-byte multiple within the frame) is aligned for
 * float and int32 views.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

_Static_assert(PMW_HEADER_SIZE == 32, "header layout in docs/wire.md");

/* Look-ahead the decoder may hold past one frame at the limits. */
#define PMW_LOOKAHEAD (64u * 1024u)
#define PMW_MIN_READ 4096u

struct pmw_decoder {
    pmw_limits lim;
    uint8_t *buf;
    size_t cap, rpos, wpos;
    size_t bound;       /* largest buffer ever allowed */
    size_t pending;     /* bytes of the frame handed out last */
    size_t frame_total; /* size of the frame at rpos; 0 = header not read */
    int err;
    char errmsg[160];
};

void pmw__fmt(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    if (!buf || len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

void pmw__diag(pmw_diag *d, int code, uint16_t tag, const char *fmt, ...)
{
    va_list ap;
    if (!d)
        return;
    d->code = code;
    d->tag = tag;
    va_start(ap, fmt);
    vsnprintf(d->text, sizeof d->text, fmt, ap);
    va_end(ap);
}

const char *pmw_strerror(int code)
{
    switch (code) {
    case PMW_OK: return "PMW_OK: success";
    case PMW_E_ARG: return "PMW_E_ARG: invalid argument";
    case PMW_E_NOMEM: return "PMW_E_NOMEM: out of memory";
    case PMW_E_IO: return "PMW_E_IO: socket or system error";
    case PMW_E_TIMEOUT: return "PMW_E_TIMEOUT: deadline passed";
    case PMW_E_CLOSED: return "PMW_E_CLOSED: peer closed the connection";
    case PMW_E_TRUNCATED: return "PMW_E_TRUNCATED: peer closed mid-frame";
    case PMW_E_BROKEN: return "PMW_E_BROKEN: connection already failed";
    case PMW_E_MAGIC: return "PMW_E_MAGIC: bad magic";
    case PMW_E_VERSION: return "PMW_E_VERSION: unknown protocol version";
    case PMW_E_META_LIMIT: return "PMW_E_META_LIMIT: metadata length over its bound";
    case PMW_E_BODY_LIMIT: return "PMW_E_BODY_LIMIT: body length over its bound";
    case PMW_E_HEADER: return "PMW_E_HEADER: reserved header field not zero";
    case PMW_E_KIND: return "PMW_E_KIND: message kind unknown or not allowed";
    case PMW_E_MISSING: return "PMW_E_MISSING: required tag missing";
    case PMW_E_REPEATED: return "PMW_E_REPEATED: tag repeated";
    case PMW_E_UNKNOWN_TAG: return "PMW_E_UNKNOWN_TAG: unknown tag";
    case PMW_E_PHASE: return "PMW_E_PHASE: invalid phase";
    case PMW_E_VALUE: return "PMW_E_VALUE: value out of range";
    case PMW_E_LENGTH: return "PMW_E_LENGTH: inconsistent length";
    case PMW_E_ENTRIES: return "PMW_E_ENTRIES: too many metadata entries";
    case PMW_E_SHM_REF: return "PMW_E_SHM_REF: shared reference out of bounds";
    case PMW_E_SEQUENCE: return "PMW_E_SEQUENCE: stale or duplicated sequence number";
    case PMW_E_AUTH: return "PMW_E_AUTH: authentication failed";
    case PMW_E_TRANSPORT: return "PMW_E_TRANSPORT: transport not possible";
    default: break;
    }
    return code <= PMW_E_APP_BASE ? "application error" : "unknown status";
}

int pmw_status_is_drainable(int code)
{
    return code <= PMW_E_KIND && code >= PMW_E_SEQUENCE;
}

void pmw_limits_default(pmw_limits *lim)
{
    if (!lim)
        return;
    lim->max_meta = 4096;
    lim->max_body = 64u * 1024u * 1024u;
    lim->max_entries = 32;
}

void pmw_header_encode(uint8_t *out, uint16_t kind, uint64_t seq, uint32_t meta_len,
                       uint32_t body_len)
{
    pmw__put32(out, PMW_MAGIC);
    pmw__put16(out + 4, PMW_VERSION);
    pmw__put16(out + 6, kind);
    pmw__put32(out + 8, meta_len);
    pmw__put32(out + 12, body_len);
    pmw__put64(out + 16, seq);
    pmw__put64(out + 24, 0);
}

/* ---- decoder ---------------------------------------------------------- */

int pmw_decoder_create(const pmw_limits *lim, pmw_decoder **out)
{
    if (!out)
        return PMW_E_ARG;
    *out = NULL;
    pmw_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return PMW_E_NOMEM;
    if (lim)
        d->lim = *lim;
    else
        pmw_limits_default(&d->lim);
    /* Sizes are computed in 64 bits: 32 + 2^32 + 7 + 2^32 cannot wrap. */
    uint64_t frame_max = (uint64_t)PMW_HEADER_SIZE + d->lim.max_meta + 7u + d->lim.max_body;
    uint64_t bound = frame_max + PMW_LOOKAHEAD;
    if (bound > (uint64_t)SIZE_MAX / 2) {
        free(d);
        return PMW_E_ARG;
    }
    d->bound = (size_t)bound;
    *out = d;
    return 0;
}

void pmw_decoder_destroy(pmw_decoder *dec)
{
    if (!dec)
        return;
    free(dec->buf);
    free(dec);
}

const char *pmw_decoder_error(const pmw_decoder *dec)
{
    return dec ? dec->errmsg : "";
}

size_t pmw_decoder_pending(const pmw_decoder *dec)
{
    return dec ? dec->wpos - dec->rpos - dec->pending : 0;
}

size_t pmw__decoder_frame_size(const pmw_decoder *dec)
{
    return dec->frame_total;
}

static int fail(pmw_decoder *d, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(pmw_decoder *d, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->errmsg, sizeof d->errmsg, fmt, ap);
    va_end(ap);
    d->err = code;
    return code;
}

/* Forgets the frame handed out last; its views die here. */
static void drop_pending(pmw_decoder *d)
{
    if (!d->pending)
        return;
    d->rpos += d->pending;
    d->pending = 0;
    d->frame_total = 0;
    if (d->rpos == d->wpos)
        d->rpos = d->wpos = 0;
}

static void compact(pmw_decoder *d)
{
    if (d->rpos == 0)
        return;
    memmove(d->buf, d->buf + d->rpos, d->wpos - d->rpos);
    d->wpos -= d->rpos;
    d->rpos = 0;
}

/* Makes room for `need` more bytes after wpos, never past the bound. */
static int make_room(pmw_decoder *d, size_t need)
{
    if (d->cap - d->wpos >= need)
        return 0;
    compact(d);
    if (d->cap - d->wpos >= need)
        return 0;
    if (need > d->bound - d->wpos)
        return fail(d, PMW_E_BODY_LIMIT, "decoder: %zu buffered bytes plus %zu exceed the %zu-byte bound",
                    d->wpos, need, d->bound);
    size_t want = d->wpos + need;
    size_t grown = d->cap < d->bound / 2 ? d->cap * 2 : d->bound;
    if (grown < want)
        grown = want;
    uint8_t *nb = realloc(d->buf, grown);
    if (!nb)
        return fail(d, PMW_E_NOMEM, "decoder: cannot grow buffer to %zu bytes", grown);
    d->buf = nb;
    d->cap = grown;
    return 0;
}

int pmw_decoder_feed(pmw_decoder *dec, const void *data, size_t len)
{
    if (!dec || (!data && len))
        return PMW_E_ARG;
    if (dec->err)
        return dec->err;
    drop_pending(dec);
    if (len == 0)
        return 0;
    int rc = make_room(dec, len);
    if (rc)
        return rc;
    memcpy(dec->buf + dec->wpos, data, len);
    dec->wpos += len;
    return 0;
}

int pmw__decoder_reserve(pmw_decoder *dec, uint8_t **ptr, size_t *len)
{
    if (dec->err)
        return dec->err;
    drop_pending(dec);
    size_t have = dec->wpos - dec->rpos;
    size_t target = dec->frame_total ? dec->frame_total : PMW_HEADER_SIZE;
    size_t need = target > have ? target - have : 0;
    if (need < PMW_MIN_READ)
        need = PMW_MIN_READ;
    if (need > dec->bound - have)
        need = dec->bound - have;
    int rc = make_room(dec, need);
    if (rc)
        return rc;
    *ptr = dec->buf + dec->wpos;
    *len = dec->cap - dec->wpos;
    return 0;
}

void pmw__decoder_commit(pmw_decoder *dec, size_t n)
{
    dec->wpos += n;
}

/* Magic and version are judged as soon as their bytes are in, so a peer
 * that speaks something else (an HTTP request is shorter than a header) is
 * refused at once instead of waiting out a deadline. */
static int check_prefix(pmw_decoder *d, const uint8_t *h, size_t have)
{
    if (have >= 4 && pmw__get32(h) != PMW_MAGIC)
        return fail(d, PMW_E_MAGIC, "bad magic 0x%08x (want 0x%08x, \"PMWF\")", pmw__get32(h),
                    PMW_MAGIC);
    if (have >= 6 && pmw__get16(h + 4) != PMW_VERSION)
        return fail(d, PMW_E_VERSION, "unknown protocol version %u (this side speaks %u)",
                    pmw__get16(h + 4), PMW_VERSION);
    return 0;
}

static int check_header(pmw_decoder *d, const uint8_t *h)
{
    int rc = check_prefix(d, h, PMW_HEADER_SIZE);
    if (rc)
        return rc;
    if (pmw__get64(h + 24) != 0)
        return fail(d, PMW_E_HEADER, "reserved header bytes 24..31 are not zero");
    uint32_t meta_len = pmw__get32(h + 8), body_len = pmw__get32(h + 12);
    if (meta_len > d->lim.max_meta)
        return fail(d, PMW_E_META_LIMIT, "metadata length %u over the limit %u",
                    meta_len, d->lim.max_meta);
    if (body_len > d->lim.max_body)
        return fail(d, PMW_E_BODY_LIMIT, "body length %u over the limit %u",
                    body_len, d->lim.max_body);
    d->frame_total = PMW_HEADER_SIZE + (size_t)meta_len + pmw_meta_pad(meta_len) + body_len;
    return 0;
}

static int pad_is_zero(const uint8_t *p, uint32_t n)
{
    uint8_t acc = 0;
    for (uint32_t i = 0; i < n; i++)
        acc |= p[i];
    return acc == 0;
}

int pmw_decoder_next(pmw_decoder *dec, pmw_frame *frame)
{
    if (!dec || !frame)
        return PMW_E_ARG;
    if (dec->err)
        return dec->err;
    drop_pending(dec);
    size_t have = dec->wpos - dec->rpos;
    if (have < PMW_HEADER_SIZE) /* a fresh decoder has no buffer yet */
        return check_prefix(dec, have ? dec->buf + dec->rpos : NULL, have);
    if (!dec->frame_total) {
        int rc = check_header(dec, dec->buf + dec->rpos);
        if (rc)
            return rc;
    }
    if (have < dec->frame_total)
        return 0;
    if (dec->rpos & 7u)
        compact(dec);
    const uint8_t *h = dec->buf + dec->rpos;
    uint32_t meta_len = pmw__get32(h + 8), pad = pmw_meta_pad(meta_len);
    frame->kind = pmw__get16(h + 6);
    frame->seq = pmw__get64(h + 16);
    frame->meta = h + PMW_HEADER_SIZE;
    frame->meta_len = meta_len;
    frame->pad_ok = pad_is_zero(frame->meta + meta_len, pad);
    frame->body = frame->meta + meta_len + pad;
    frame->body_len = pmw__get32(h + 12);
    dec->pending = dec->frame_total;
    return 1;
}

/* ---- metadata writer -------------------------------------------------- */

void pmw_meta_init(pmw_meta *w, void *buf, size_t cap)
{
    w->buf = buf;
    w->cap = buf ? cap : 0;
    w->len = 0;
    w->overflow = 0;
}

void pmw_meta_put(pmw_meta *w, uint16_t tag, const void *value, uint16_t len)
{
    if (w->cap - w->len < 4u + (size_t)len) {
        w->overflow = 1;
        return;
    }
    uint8_t *p = w->buf + w->len;
    pmw__put16(p, tag);
    pmw__put16(p + 2, len);
    if (len)
        memcpy(p + 4, value, len);
    w->len += 4u + len;
}

void pmw_meta_u8(pmw_meta *w, uint16_t tag, uint8_t v)
{
    pmw_meta_put(w, tag, &v, 1);
}

void pmw_meta_u16(pmw_meta *w, uint16_t tag, uint16_t v)
{
    uint8_t b[2];
    pmw__put16(b, v);
    pmw_meta_put(w, tag, b, 2);
}

void pmw_meta_u32(pmw_meta *w, uint16_t tag, uint32_t v)
{
    uint8_t b[4];
    pmw__put32(b, v);
    pmw_meta_put(w, tag, b, 4);
}

void pmw_meta_u64(pmw_meta *w, uint16_t tag, uint64_t v)
{
    uint8_t b[8];
    pmw__put64(b, v);
    pmw_meta_put(w, tag, b, 8);
}
