/* raw.c — reads one recorder file (tools/recorder/pmraw.h) into a trace.
 *
 * Pairing happens here, per thread: a push opens a range, a pop closes the
 * innermost open one of its thread (a pop with nothing open becomes a "pop
 * without push" row), start/stop ranges pair by id across threads. What is
 * still open at the end stays open (a crash, or a range never popped), so
 * `check` can report it.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "pmraw.h"
#include "pmt.h"

#define PMT_RAW_FILE_MAX ((size_t)1 << 34)
#define PMT_RAW_DOMAINS 256
#define PMT_RAW_DEPTH 4096

typedef struct raw_thread {
    uint32_t tid;
    size_t *open; /* indexes into the trace, innermost last */
    size_t nopen;
} raw_thread;

typedef struct raw_ctx {
    pmt_trace *t;
    const char *src;
    uint32_t pid;
    char *domains[PMT_RAW_DOMAINS];
    raw_thread *threads;
    size_t nthreads;
    size_t *started; /* open start/stop ranges, by trace index */
    size_t nstarted, started_cap;
} raw_ctx;

static const char *domain_name(const raw_ctx *c, unsigned d)
{
    if (c->domains[d])
        return c->domains[d];
    return d == PMR_DOMAIN_ROCTX ? "MARKER_CORE_API" : "NVTX";
}

static raw_thread *thread_of(raw_ctx *c, uint32_t tid)
{
    for (size_t i = 0; i < c->nthreads; i++)
        if (c->threads[i].tid == tid)
            return &c->threads[i];
    raw_thread *nt = realloc(c->threads, (c->nthreads + 1) * sizeof *nt);
    if (!nt)
        return NULL;
    c->threads = nt;
    raw_thread *th = &nt[c->nthreads++];
    th->tid = tid;
    th->nopen = 0;
    th->open = malloc(PMT_RAW_DEPTH * sizeof *th->open);
    if (!th->open) {
        c->nthreads--;
        return NULL;
    }
    return th;
}

/* Adds a range; its correlation id is the one `id` says (start/stop) or
 * the next free one, renumbered in time order by capture. */
static int add_range(raw_ctx *c, uint32_t tid, const pmr_event *ev, const char *name, size_t len,
                     uint64_t id, unsigned flags, uint64_t start, uint64_t end)
{
    char buf[PMR_NAME_MAX + 1];
    memcpy(buf, name, len);
    buf[len] = 0;
    pmt_range r = {buf, (char *)domain_name(c, ev->domain), c->pid, tid,
                   id ? id : c->t->n + 1, start, end, flags, c->src, 0};
    return pmt_trace_add(c->t, &r);
}

static int on_pop(raw_ctx *c, raw_thread *th, const pmr_event *ev)
{
    if (!th->nopen)
        return add_range(c, th->tid, ev, "", 0, 0, PMT_F_ORPHAN, 0, ev->ts);
    pmt_range *r = &c->t->r[th->open[--th->nopen]];
    r->end = ev->ts;
    r->flags &= ~(unsigned)PMT_F_OPEN;
    return 0;
}

static int on_stop(raw_ctx *c, uint32_t tid, const pmr_event *ev, uint64_t id)
{
    for (size_t i = 0; i < c->nstarted; i++) {
        pmt_range *r = &c->t->r[c->started[i]];
        if (r->corr == id && (r->flags & PMT_F_OPEN)) {
            r->end = ev->ts;
            r->flags &= ~(unsigned)PMT_F_OPEN;
            c->started[i] = c->started[--c->nstarted];
            return 0;
        }
    }
    return add_range(c, tid, ev, "", 0, id, PMT_F_ORPHAN, 0, ev->ts);
}

static int on_push(raw_ctx *c, raw_thread *th, const pmr_event *ev, const char *name, size_t len)
{
    if (th->nopen == PMT_RAW_DEPTH)
        return -1;
    th->open[th->nopen++] = c->t->n;
    return add_range(c, th->tid, ev, name, len, 0, PMT_F_OPEN, ev->ts, 0);
}

static int on_event(raw_ctx *c, raw_thread *th, const pmr_event *ev, const char *payload)
{
    uint64_t id = 0;
    if (ev->type == PMR_START || ev->type == PMR_STOP)
        memcpy(&id, payload, 8);
    switch (ev->type) {
    case PMR_PUSH:
        return on_push(c, th, ev, payload, ev->len);
    case PMR_POP:
        return on_pop(c, th, ev);
    case PMR_MARK:
        return add_range(c, th->tid, ev, payload, ev->len, 0, PMT_F_MARK, ev->ts, ev->ts);
    case PMR_START:
        if (c->nstarted == c->started_cap) {
            size_t ncap = c->started_cap ? c->started_cap * 2 : 64;
            size_t *ns = realloc(c->started, ncap * sizeof *ns);
            if (!ns)
                return -1;
            c->started = ns;
            c->started_cap = ncap;
        }
        c->started[c->nstarted++] = c->t->n;
        return add_range(c, th->tid, ev, payload + 8, ev->len, id, PMT_F_OPEN, ev->ts, 0);
    case PMR_STOP:
        return on_stop(c, th->tid, ev, id);
    case PMR_DOMAIN:
        if (ev->aux < PMT_RAW_DOMAINS && !c->domains[ev->aux])
            c->domains[ev->aux] = strndup(payload, ev->len);
        return 0;
    default:
        return -1;
    }
}

/* Walks the events of one chunk; -1 when they do not fit it exactly. */
static int chunk(raw_ctx *c, const pmr_chunk_hdr *h, const unsigned char *p, int pass)
{
    raw_thread *th = thread_of(c, h->tid);
    if (!th)
        return -1;
    if (h->thread_name[0]) {
        char name[17];
        memcpy(name, h->thread_name, 16);
        name[16] = 0;
        pmt_trace_label(c->t, c->pid, h->tid, name);
    }
    size_t off = 0;
    while (off < h->bytes) {
        pmr_event ev;
        if (h->bytes - off < sizeof ev)
            return -1;
        memcpy(&ev, p + off, sizeof ev);
        uint32_t idb = (ev.type == PMR_START || ev.type == PMR_STOP) ? 8 : 0;
        size_t need = sizeof ev + pmr_padded(idb + ev.len);
        if (ev.len > PMR_NAME_MAX || h->bytes - off < need)
            return -1;
        /* Pass 0 names the domains, so events of any thread can use them. */
        if ((pass == 0) == (ev.type == PMR_DOMAIN) &&
            on_event(c, th, &ev, (const char *)p + off + sizeof ev) < 0)
            return -1;
        off += need;
    }
    return 0;
}

static void ctx_free(raw_ctx *c)
{
    for (size_t i = 0; i < c->nthreads; i++)
        free(c->threads[i].open);
    for (int i = 0; i < PMT_RAW_DOMAINS; i++)
        free(c->domains[i]);
    free(c->threads);
    free(c->started);
}

static int header(raw_ctx *c, const char *buf, size_t len, const char *path, char *err, size_t errlen)
{
    pmr_file_hdr fh;
    if (len < sizeof fh || (memcpy(&fh, buf, sizeof fh), memcmp(fh.magic, PMR_FILE_MAGIC, 8) != 0)) {
        pmt_errf(err, errlen, "%s: not a phasemark raw file", path);
        return -1;
    }
    c->pid = fh.pid;
    char comm[17];
    memcpy(comm, fh.comm, 16);
    comm[16] = 0;
    return pmt_trace_label(c->t, fh.pid, 0, comm);
}

/* One pass over the chunks; 1 when the file is cut short after whole
 * chunks (reported on the last pass only). */
static int walk(raw_ctx *c, const char *buf, size_t len, const char *path, int pass, char *err,
                size_t errlen)
{
    size_t off = sizeof(pmr_file_hdr);
    int rc = 0;
    while (off < len) {
        pmr_chunk_hdr h;
        if (len - off < sizeof h || (memcpy(&h, buf + off, sizeof h), h.magic != PMR_CHUNK_MAGIC) ||
            h.bytes > PMR_CHUNK_MAX || len - off - sizeof h < h.bytes) {
            if (pass)
                pmt_errf(err, errlen, "%s: cut short or damaged at byte %zu of %zu; whole chunks kept",
                         path, off, len);
            rc = 1;
            break;
        }
        if (chunk(c, &h, (const unsigned char *)buf + off + sizeof h, pass) < 0) {
            pmt_errf(err, errlen, "%s: malformed events in the chunk at byte %zu", path, off);
            rc = -1;
            break;
        }
        off += sizeof h + h.bytes;
    }
    return rc;
}

int pmt_raw_load(pmt_trace *t, const char *path, char *err, size_t errlen)
{
    char *buf;
    size_t len;
    if (pmt_read_file(path, PMT_RAW_FILE_MAX, &buf, &len, err, errlen) < 0)
        return -1;
    int rc = pmt_raw_load_mem(t, path, buf, len, err, errlen);
    free(buf);
    return rc;
}

int pmt_raw_load_mem(pmt_trace *t, const char *path, const char *buf, size_t len, char *err,
                     size_t errlen)
{
    raw_ctx c;
    memset(&c, 0, sizeof c);
    c.t = t;
    c.src = pmt_trace_source(t, path);
    int rc = header(&c, buf, len, path, err, errlen);
    for (int pass = 0; pass < 2 && rc >= 0; pass++)
        rc = walk(&c, buf, len, path, pass, err, errlen);
    ctx_free(&c);
    return rc;
}

