/* raw.c — reads one recorder file (tools/recorder/pmraw.h) into a trace.
 *
 * Pairing happens here, per thread: a push opens a range, a pop closes the
 * innermost open one of its thread (a pop with nothing open becomes a "pop
 * without push" row), start/stop ranges pair by id across threads. What is
 * still open at the end stays open (a crash, or a range never popped), so
 * `check` can report it.
 *
 * Each thread's events are a stream that continues across its chunks
 * (timestamps and names are differences from the previous event), so the
 * per-thread state lives in raw_thread. With the TSC clock, an event's
 * tick becomes CLOCK_BOOTTIME ns on the line through the calibration
 * points before and after it (pmraw.h); for the point after, a chunk is
 * scanned once for its points before its events are read.
 *
 * Clock records (pmraw.h) are collected in the last pass and applied once
 * the file is read: this file's ranges move onto the driver's clock
 * (pmt_clock_map), and the trace notes the process's boot and offset.
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
    /* The stream's state, carried from one chunk to the next (pmraw.h). */
    uint64_t tick;      /* the last event's tick */
    int ncal;           /* calibration points accepted so far (counts to 2) */
    pmr_cal prev, cur;  /* the last two accepted, cur the latest */
    uint32_t name_len;  /* the last name, base of the next one */
    char name[PMR_NAME_MAX + 1];
} raw_thread;

typedef struct raw_ctx {
    pmt_trace *t;
    const char *src;
    uint32_t pid;
    uint32_t clock; /* enum pmr_clock */
    char *domains[PMT_RAW_DOMAINS];
    raw_thread *threads;
    size_t nthreads;
    size_t *started; /* open start/stop ranges, by trace index */
    size_t nstarted, started_cap;
    pmr_cal *cals;   /* the current chunk's calibration points, in order */
    size_t ncals, cals_cap;
    size_t first;    /* the trace's first range from this file */
    uint8_t boot_id[16];
    pmt_clock_point *points; /* clock records */
    size_t npoints;
    uint64_t bound;  /* the largest bound of the records */
} raw_ctx;

/* One decoded event. For a name, text is the suffix after `prefix` bytes
 * of the stream's previous name; for DOMAIN it is the whole name. */
typedef struct raw_event {
    unsigned type, domain;
    uint64_t delta; /* all but CAL */
    pmr_cal cal;    /* CAL */
    uint64_t id;    /* START, STOP */
    uint32_t prefix;
    const unsigned char *text;
    uint32_t text_len;
} raw_event;

/* An event as the trace sees it: time in ns, the whole name. */
typedef struct raw_rec {
    unsigned type, domain;
    uint64_t ns, id;
    const char *name;
    size_t len;
} raw_rec;

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
    memset(th, 0, sizeof *th);
    th->tid = tid;
    th->open = malloc(PMT_RAW_DEPTH * sizeof *th->open);
    if (!th->open) {
        c->nthreads--;
        return NULL;
    }
    return th;
}

/* Adds a range; its correlation id is the one `id` says (start/stop) or
 * the next free one, renumbered in time order by capture. */
static int add_range(raw_ctx *c, uint32_t tid, const raw_rec *ev, const char *name, size_t len,
                     uint64_t id, unsigned flags, uint64_t start, uint64_t end)
{
    char buf[PMR_NAME_MAX + 1];
    memcpy(buf, name, len);
    buf[len] = 0;
    pmt_range r = {buf, (char *)domain_name(c, ev->domain), c->pid, tid,
                   id ? id : c->t->n + 1, start, end, flags, c->src, 0};
    return pmt_trace_add(c->t, &r);
}

static int on_pop(raw_ctx *c, raw_thread *th, const raw_rec *ev)
{
    if (!th->nopen)
        return add_range(c, th->tid, ev, "", 0, 0, PMT_F_ORPHAN, 0, ev->ns);
    pmt_range *r = &c->t->r[th->open[--th->nopen]];
    r->end = ev->ns;
    r->flags &= ~(unsigned)PMT_F_OPEN;
    return 0;
}

static int on_stop(raw_ctx *c, uint32_t tid, const raw_rec *ev)
{
    for (size_t i = 0; i < c->nstarted; i++) {
        pmt_range *r = &c->t->r[c->started[i]];
        if (r->corr == ev->id && (r->flags & PMT_F_OPEN)) {
            r->end = ev->ns;
            r->flags &= ~(unsigned)PMT_F_OPEN;
            c->started[i] = c->started[--c->nstarted];
            return 0;
        }
    }
    return add_range(c, tid, ev, "", 0, ev->id, PMT_F_ORPHAN, 0, ev->ns);
}

static int on_push(raw_ctx *c, raw_thread *th, const raw_rec *ev)
{
    if (th->nopen == PMT_RAW_DEPTH)
        return -1;
    th->open[th->nopen++] = c->t->n;
    return add_range(c, th->tid, ev, ev->name, ev->len, 0, PMT_F_OPEN, ev->ns, 0);
}

static int on_start(raw_ctx *c, raw_thread *th, const raw_rec *ev)
{
    if (c->nstarted == c->started_cap) {
        size_t ncap = c->started_cap ? c->started_cap * 2 : 64;
        size_t *ns = realloc(c->started, ncap * sizeof *ns);
        if (!ns)
            return -1;
        c->started = ns;
        c->started_cap = ncap;
    }
    c->started[c->nstarted++] = c->t->n;
    return add_range(c, th->tid, ev, ev->name, ev->len, ev->id, PMT_F_OPEN, ev->ns, 0);
}

static int on_event(raw_ctx *c, raw_thread *th, const raw_rec *ev)
{
    switch (ev->type) {
    case PMR_PUSH:
        return on_push(c, th, ev);
    case PMR_POP:
        return on_pop(c, th, ev);
    case PMR_MARK:
        return add_range(c, th->tid, ev, ev->name, ev->len, 0, PMT_F_MARK, ev->ns, ev->ns);
    case PMR_START:
        return on_start(c, th, ev);
    case PMR_STOP:
        return on_stop(c, th->tid, ev);
    default:
        return -1;
    }
}

/* An LEB128 varint at p[*off], at most 10 bytes and 64 bits. */
static int get_varint(const unsigned char *p, size_t n, size_t *off, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < PMR_VARINT_MAX; i++) {
        if (*off >= n)
            return -1;
        unsigned char b = p[(*off)++];
        if (i == PMR_VARINT_MAX - 1 && b > 1)
            return -1; /* more than 64 bits */
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

static uint64_t get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* A length varint no larger than max and than the bytes left. */
static int get_len(const unsigned char *p, size_t n, size_t *off, uint32_t max, uint32_t *out)
{
    uint64_t v;
    if (get_varint(p, n, off, &v) < 0 || v > max || v > n - *off)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* Decodes the event at p (n bytes left in the chunk). Returns its size,
 * or 0 when the bytes are not one whole event. */
static size_t parse_event(const unsigned char *p, size_t n, raw_event *ev)
{
    size_t off = 1;
    memset(ev, 0, sizeof *ev);
    ev->type = p[0] & PMR_TAG_TYPE_MASK;
    ev->domain = p[0] >> PMR_TAG_DOMAIN_SHIFT;
    if (ev->domain == PMR_TAG_DOMAIN_BYTE) {
        if (off >= n)
            return 0;
        ev->domain = p[off++];
    }
    if (ev->type == PMR_CAL) {
        if (n - off < 16)
            return 0;
        ev->cal.tsc = get_le64(p + off);
        ev->cal.ns = get_le64(p + off + 8);
        return off + 16;
    }
    if (ev->type < PMR_PUSH || get_varint(p, n, &off, &ev->delta) < 0)
        return 0;
    if ((ev->type == PMR_START || ev->type == PMR_STOP) && get_varint(p, n, &off, &ev->id) < 0)
        return 0;
    if (ev->type == PMR_PUSH || ev->type == PMR_MARK || ev->type == PMR_START) {
        uint64_t prefix;
        if (get_varint(p, n, &off, &prefix) < 0 || prefix > PMR_NAME_MAX)
            return 0;
        ev->prefix = (uint32_t)prefix;
        if (get_len(p, n, &off, PMR_NAME_MAX - ev->prefix, &ev->text_len) < 0)
            return 0;
    } else if (ev->type == PMR_DOMAIN && get_len(p, n, &off, PMR_NAME_MAX, &ev->text_len) < 0) {
        return 0;
    }
    ev->text = p + off;
    return off + ev->text_len;
}

/* Calibration points must run forward in both counts, or the line between
 * two would not be monotonic; one that does not (a point taken by another
 * thread's flush that reached the stream after a later one) is skipped. */
static int cal_follows(const raw_thread *th, pmr_cal x)
{
    return !th->ncal || (x.tsc > th->cur.tsc && x.ns >= th->cur.ns);
}

static void cal_accept(raw_thread *th, pmr_cal x)
{
    if (!cal_follows(th, x))
        return;
    th->prev = th->cur;
    th->cur = x;
    th->ncal += th->ncal < 2;
}

/* The chunk's calibration points in stream order: its CAL events, then
 * the point in its header. -1 on malformed events. */
static int collect_cals(raw_ctx *c, const pmr_chunk_hdr *h, const unsigned char *p)
{
    c->ncals = 0;
    for (size_t off = 0; off <= h->bytes;) {
        raw_event ev = {0};
        size_t used = 0;
        if (off < h->bytes) {
            used = parse_event(p + off, h->bytes - off, &ev);
            if (!used)
                return -1;
            if (ev.type != PMR_CAL) {
                off += used;
                continue;
            }
        } else {
            ev.cal = (pmr_cal){h->cal_tsc, h->cal_ns};
            used = 1;
        }
        if (c->ncals == c->cals_cap) {
            size_t ncap = c->cals_cap ? c->cals_cap * 2 : 16;
            pmr_cal *nc = realloc(c->cals, ncap * sizeof *nc);
            if (!nc)
                return -1;
            c->cals = nc;
            c->cals_cap = ncap;
        }
        c->cals[c->ncals++] = ev.cal;
        off += used;
    }
    return 0;
}

/* The ns of th's current tick (TSC clock): on the line through the
 * accepted points around it, the next one being the first point at or
 * after cals[*look] that follows cur. A tick before cur (an event stamped
 * just before another thread's flush took its point, recorded after it)
 * belongs to the segment before. With a single point there is no rate:
 * the tick gets that point's time. */
static int tick_ns(raw_ctx *c, raw_thread *th, size_t *look, uint64_t *ns)
{
    if (!th->ncal)
        return -1; /* a stream must start with a calibration point */
    while (*look < c->ncals && !cal_follows(th, c->cals[*look]))
        (*look)++;
    const pmr_cal *next = *look < c->ncals ? &c->cals[*look] : NULL;
    int before = th->tick < th->cur.tsc;
    if (th->ncal >= 2 && (before || !next))
        *ns = pmr_tick_to_ns(th->tick, th->prev, th->cur);
    else if (next)
        *ns = pmr_tick_to_ns(th->tick, th->cur, *next);
    else
        *ns = th->cur.ns;
    return 0;
}

/* Pass 1's handling of one event of th's stream. */
static int stream_event(raw_ctx *c, raw_thread *th, const raw_event *ev, size_t *ncal_seen,
                        size_t *look)
{
    if (ev->type == PMR_CAL) {
        th->tick = ev->cal.tsc;
        cal_accept(th, ev->cal);
        (*ncal_seen)++;
        if (*look < *ncal_seen)
            *look = *ncal_seen;
        return 0;
    }
    if (ev->type == PMR_DOMAIN)
        return 0;
    th->tick += ev->delta;
    raw_rec r = {ev->type, ev->domain, th->tick, ev->id, th->name, 0};
    if (c->clock == PMR_CLOCK_TSC && tick_ns(c, th, look, &r.ns) < 0)
        return -1;
    if (ev->type == PMR_PUSH || ev->type == PMR_MARK || ev->type == PMR_START) {
        if (ev->prefix > th->name_len)
            return -1;
        memcpy(th->name + ev->prefix, ev->text, ev->text_len);
        th->name_len = ev->prefix + ev->text_len;
        r.len = th->name_len;
    }
    return on_event(c, th, &r);
}

/* Walks the events of one chunk; -1 when they do not fit it exactly.
 * Pass 0 only names the domains, so events of any thread can use them. */
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
    if (pass == 1 && c->clock == PMR_CLOCK_TSC && collect_cals(c, h, p) < 0)
        return -1;
    size_t ncal_seen = 0, look = 0;
    for (size_t off = 0; off < h->bytes;) {
        raw_event ev;
        size_t used = parse_event(p + off, h->bytes - off, &ev);
        if (!used)
            return -1;
        off += used;
        if (pass == 1) {
            if (stream_event(c, th, &ev, &ncal_seen, &look) < 0)
                return -1;
        } else if (ev.type == PMR_DOMAIN && ev.domain < PMT_RAW_DOMAINS && !c->domains[ev.domain]) {
            c->domains[ev.domain] = strndup((const char *)ev.text, ev.text_len);
        }
    }
    if (pass == 1 && c->clock == PMR_CLOCK_TSC)
        cal_accept(th, (pmr_cal){h->cal_tsc, h->cal_ns});
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
    free(c->cals);
    free(c->points);
}

static int header(raw_ctx *c, const char *buf, size_t len, const char *path, char *err, size_t errlen)
{
    pmr_file_hdr fh;
    if (len < sizeof fh || (memcpy(&fh, buf, sizeof fh), memcmp(fh.magic, PMR_FILE_MAGIC, 8) != 0 &&
                                                         memcmp(fh.magic, PMR_FILE_MAGIC_03, 8) != 0)) {
        pmt_errf(err, errlen, "%s: not a phasemark raw file", path);
        return -1;
    }
    if (fh.clock != PMR_CLOCK_BOOTTIME && fh.clock != PMR_CLOCK_TSC) {
        pmt_errf(err, errlen, "%s: unknown clock %u", path, (unsigned)fh.clock);
        return -1;
    }
    c->pid = fh.pid;
    c->clock = fh.clock;
    if (memcmp(fh.magic, PMR_FILE_MAGIC, 8) == 0)
        memcpy(c->boot_id, fh.boot_id, 16);
    char comm[17];
    memcpy(comm, fh.comm, 16);
    comm[16] = 0;
    return pmt_trace_label(c->t, fh.pid, 0, comm);
}

/* A clock record: kept in the last pass. Offsets and bounds past 2^62 are
 * not something the wire can carry, so a file holding one is damaged. */
static int clock_chunk(raw_ctx *c, const pmr_chunk_hdr *h, const unsigned char *p, int pass)
{
    pmr_clock_rec r;
    if (h->bytes != sizeof r)
        return -1;
    memcpy(&r, p, sizeof r);
    if (r.offset_ns <= -(INT64_C(1) << 62) || r.offset_ns >= (INT64_C(1) << 62) ||
        r.bound_ns >= (UINT64_C(1) << 62))
        return -1;
    if (pass != 1)
        return 0;
    static const uint8_t zero[16];
    if (memcmp(r.driver_boot, zero, 16) != 0 && memcmp(r.driver_boot, c->boot_id, 16) == 0)
        return 0; /* the driver shares our clock: nothing to move */
    pmt_clock_point *np = realloc(c->points, (c->npoints + 1) * sizeof *np);
    if (!np)
        return -1;
    c->points = np;
    np[c->npoints++] = (pmt_clock_point){r.at_ns, r.offset_ns, r.bound_ns};
    if (r.bound_ns > c->bound)
        c->bound = r.bound_ns;
    return 0;
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
        if (len - off < sizeof h ||
            (memcpy(&h, buf + off, sizeof h), h.magic != PMR_CHUNK_MAGIC && h.magic != PMR_CLOCK_MAGIC) ||
            h.bytes > PMR_CHUNK_MAX || len - off - sizeof h < h.bytes) {
            if (pass)
                pmt_errf(err, errlen, "%s: cut short or damaged at byte %zu of %zu; whole chunks kept",
                         path, off, len);
            rc = 1;
            break;
        }
        if (h.magic == PMR_CLOCK_MAGIC) {
            if (clock_chunk(c, &h, (const unsigned char *)buf + off + sizeof h, pass) < 0) {
                pmt_errf(err, errlen, "%s: malformed clock record at byte %zu", path, off);
                rc = -1;
                break;
            }
        } else if (chunk(c, &h, (const unsigned char *)buf + off + sizeof h, pass) < 0) {
            pmt_errf(err, errlen, "%s: malformed events in the chunk at byte %zu", path, off);
            rc = -1;
            break;
        }
        off += sizeof h + h.bytes;
    }
    return rc;
}

/* Moves this file's ranges onto the driver's clock when it holds clock
 * records, and notes the process's clock facts in the trace. */
static int apply_clock(raw_ctx *c)
{
    /* A file of nothing (a fork child that exec'd at once) says nothing
     * about the process's clock: the image after the exec does. */
    if (c->first == c->t->n && !c->npoints)
        return 0;
    pmt_clock pc;
    memset(&pc, 0, sizeof pc);
    pc.pid = c->pid;
    memcpy(pc.boot_id, c->boot_id, 16);
    if (c->npoints) {
        pmt_clock_sort(c->points, c->npoints);
        for (size_t i = c->first; i < c->t->n; i++) {
            pmt_range *r = &c->t->r[i];
            if (!(r->flags & PMT_F_ORPHAN))
                r->start = pmt_clock_map(c->points, c->npoints, r->start);
            if (!(r->flags & PMT_F_OPEN))
                r->end = pmt_clock_map(c->points, c->npoints, r->end);
        }
        pc.shifted = 1;
        pc.offset_min = pc.offset_max = c->points[0].offset_ns;
        for (size_t i = 1; i < c->npoints; i++) {
            if (c->points[i].offset_ns < pc.offset_min)
                pc.offset_min = c->points[i].offset_ns;
            if (c->points[i].offset_ns > pc.offset_max)
                pc.offset_max = c->points[i].offset_ns;
        }
        pc.bound_ns = c->bound;
        pc.records = (uint32_t)c->npoints;
        pc.points = c->points;
        pc.npoints = c->npoints;
    }
    return pmt_clock_note(c->t, &pc);
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
    c.first = t->n;
    int rc = header(&c, buf, len, path, err, errlen);
    for (int pass = 0; pass < 2 && rc >= 0; pass++)
        rc = walk(&c, buf, len, path, pass, err, errlen);
    if (rc >= 0 && apply_clock(&c) < 0) {
        pmt_errf(err, errlen, "%s: out of memory", path);
        rc = -1;
    }
    ctx_free(&c);
    return rc;
}

