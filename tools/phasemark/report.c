/* report.c — time per group of ranges, with GPU time projected onto them,
 * and a per-request table (time to first token and its parts, decode rate,
 * speculative rounds).
 *
 * Groups (--group-by): by default "prefill", "prefill mode=exact",
 * "layer_range shard=1", "layer_range shard=1 layers=12-23", ... and
 * "(other)" for ranges of other tools; or one family: kind (and mode),
 * shard, layers, req ("req=3 decode"), process ("pid=100 decode"). A range
 * counts in each group it matches. Rows are sorted by total time, largest
 * first.
 *
 * Share has one meaning: a group's total over the summed wall span of the
 * lanes, a lane being one process and thread and its span the first start
 * to the last end of its selected ranges. Ranges of one kind never overlap
 * on a lane, so a kind's share is at most 100% however many workers run at
 * once; nested kinds (a prefill and its layer ranges) each count, so the
 * column does not add up to 100%. GPU share is of all activity time.
 * Percentiles are nearest-rank.
 *
 * Selection (--req, --window) keeps a closed range when its name has that
 * req and its start lies in the window (ns after the trace's first start);
 * a range that starts in the window counts whole.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pmt.h"

/* ---- options ---- */

int pmt_group_by_parse(const char *s, int *out)
{
    static const char *const names[] = {"all", "kind", "shard", "layers", "req", "process"};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    return -1;
}

/* One end of a window: digits, an optional fraction, an optional unit. */
static int window_end(const char *s, size_t len, uint64_t *out)
{
    static const struct {
        const char *unit;
        double mul;
    } units[] = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
    char tmp[48];
    if (!len || len >= sizeof tmp)
        return -1;
    memcpy(tmp, s, len);
    tmp[len] = 0;
    if (tmp[0] < '0' || tmp[0] > '9')
        return -1;
    char *end;
    errno = 0;
    double v = strtod(tmp, &end);
    double mul = *end ? 0 : 1;
    for (size_t i = 0; *end && i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].unit) == 0)
            mul = units[i].mul;
    if (errno || mul == 0 || v * mul > 1.8e19)
        return -1;
    *out = (uint64_t)(v * mul + 0.5);
    return 0;
}

int pmt_window_parse(const char *s, uint64_t *w0, uint64_t *w1, char *err, size_t errlen)
{
    const char *dots = strstr(s, "..");
    *w0 = 0;
    *w1 = UINT64_MAX;
    if (!dots || (dots == s && !dots[2]) ||
        (dots > s && window_end(s, (size_t)(dots - s), w0) < 0) ||
        (dots[2] && window_end(dots + 2, strlen(dots + 2), w1) < 0) || *w0 >= *w1) {
        pmt_errf(err, errlen, "bad --window '%s' (want T0..T1, e.g. 2ms..5ms, 100us.., ..1s; "
                              "bare numbers are ns after the trace's first start)", s);
        return -1;
    }
    return 0;
}

/* ---- selection ---- */

static int closed(const pmt_range *r)
{
    return !(r->flags & (PMT_F_OPEN | PMT_F_ORPHAN | PMT_F_MARK)) && r->start <= r->end;
}

static uint64_t first_start(const pmt_trace *t)
{
    uint64_t t0 = UINT64_MAX;
    for (size_t i = 0; i < t->n; i++)
        if (closed(&t->r[i]) && t->r[i].start < t0)
            t0 = t->r[i].start;
    return t0;
}

/* 1 when o keeps the closed range r; nm is its parsed name (or NULL when
 * it does not parse). */
static int selected(const pmt_range *r, const pmt_name *nm, const pmt_report_opts *o, uint64_t t0)
{
    if (o->has_req && (!nm || !PMT_HAS(nm, REQ) || nm->attr[PM__KEY_REQ].u != o->req))
        return 0;
    if (o->has_window && (r->start - t0 < o->w0 || r->start - t0 >= o->w1))
        return 0;
    return 1;
}

/* ---- groups ---- */

static uint64_t hash_key(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int rehash(pmt_groups *gs)
{
    size_t ns = gs->nslot ? gs->nslot * 2 : 64;
    size_t *slot = calloc(ns, sizeof *slot);
    if (!slot)
        return -1;
    for (size_t i = 0; i < gs->n; i++) {
        size_t h = (size_t)hash_key(gs->g[i].key) & (ns - 1);
        while (slot[h])
            h = (h + 1) & (ns - 1);
        slot[h] = i + 1;
    }
    free(gs->slot);
    gs->slot = slot;
    gs->nslot = ns;
    return 0;
}

static pmt_group *group_of(pmt_groups *gs, const char *key)
{
    if ((gs->n + 1) * 2 > gs->nslot && rehash(gs) < 0)
        return NULL;
    size_t h = (size_t)hash_key(key) & (gs->nslot - 1);
    for (; gs->slot[h]; h = (h + 1) & (gs->nslot - 1))
        if (strcmp(gs->g[gs->slot[h] - 1].key, key) == 0)
            return &gs->g[gs->slot[h] - 1];
    if (gs->n == gs->cap) {
        size_t ncap = gs->cap ? gs->cap * 2 : 32;
        pmt_group *ng = realloc(gs->g, ncap * sizeof *ng);
        if (!ng)
            return NULL;
        gs->g = ng;
        gs->cap = ncap;
    }
    pmt_group *g = &gs->g[gs->n];
    memset(g, 0, sizeof *g);
    snprintf(g->key, sizeof g->key, "%s", key);
    gs->slot[h] = ++gs->n;
    return g;
}

static int add(pmt_groups *gs, const char *key, uint64_t dur, uint64_t gpu)
{
    pmt_group *g = group_of(gs, key);
    if (!g)
        return -1;
    if (g->n == g->cap) {
        size_t ncap = g->cap ? g->cap * 2 : 64;
        uint64_t *nd = realloc(g->dur, ncap * sizeof *nd);
        if (!nd)
            return -1;
        g->dur = nd;
        g->cap = ncap;
    }
    g->dur[g->n++] = dur;
    g->total += dur;
    g->gpu += gpu;
    return 0;
}

/* Adds one range to each group it belongs to under o->group_by. */
static int classify(pmt_groups *gs, const pmt_range *r, const pmt_name *nm, int by, uint64_t gpu)
{
    char key[PMT_GROUP_KEY];
    uint64_t dur = r->end - r->start;
    const char *k = !nm ? "(bad name)" : nm->kind == PMT_K_OTHER ? "(other)" : pmt_kind_name(nm->kind);
    int ours = nm && nm->kind != PMT_K_OTHER;
    int has_shard = ours && PMT_HAS(nm, SHARD), has_layers = has_shard && PMT_HAS(nm, LAYERS);
    unsigned long long shard = has_shard ? (unsigned long long)nm->attr[PM__KEY_SHARD].u : 0;
    int rc = 0;
    switch (by) {
    case PMT_BY_REQ:
        if (!ours || !PMT_HAS(nm, REQ))
            return 0;
        snprintf(key, sizeof key, "req=%llu %s", (unsigned long long)nm->attr[PM__KEY_REQ].u, k);
        return add(gs, key, dur, gpu);
    case PMT_BY_PROCESS:
        snprintf(key, sizeof key, "pid=%u %s", r->pid, k);
        return add(gs, key, dur, gpu);
    case PMT_BY_SHARD:
        if (!has_shard)
            return 0;
        snprintf(key, sizeof key, "%s shard=%llu", k, shard);
        return add(gs, key, dur, gpu);
    case PMT_BY_LAYERS:
        if (!has_layers)
            return 0;
        break;
    default:
        rc = add(gs, k, dur, gpu);
        if (ours && nm->mode[0]) {
            snprintf(key, sizeof key, "%s mode=%s", k, nm->mode);
            rc |= add(gs, key, dur, gpu);
        }
        if (by == PMT_BY_KIND || !has_shard)
            return rc;
        snprintf(key, sizeof key, "%s shard=%llu", k, shard);
        rc |= add(gs, key, dur, gpu);
        if (!has_layers)
            return rc;
    }
    const pmt_attr *layers = &nm->attr[PM__KEY_LAYERS];
    snprintf(key, sizeof key, "%s shard=%llu layers=%llu-%llu", k, shard,
             (unsigned long long)layers->u, (unsigned long long)layers->last);
    return rc | add(gs, key, dur, gpu);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_group(const void *a, const void *b)
{
    const pmt_group *x = a, *y = b;
    if (x->total != y->total)
        return x->total > y->total ? -1 : 1;
    return strcmp(x->key, y->key);
}

uint64_t pmt_pct(const uint64_t *sorted, size_t n, unsigned p)
{
    size_t rank = (n * p + 99) / 100; /* ceil(n * p / 100), 1-based */
    return sorted[rank ? rank - 1 : 0];
}

typedef struct lane_span {
    uint32_t pid, tid;
    uint64_t first, last;
} lane_span;

static int cmp_lane(const void *a, const void *b)
{
    const lane_span *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->tid < y->tid ? -1 : x->tid > y->tid;
}

/* Sums each lane's span over the selected ranges (sel[i] set). */
static int lane_spans(const pmt_trace *t, const unsigned char *sel, pmt_groups *gs)
{
    lane_span *ls = malloc((t->n ? t->n : 1) * sizeof *ls);
    size_t n = 0;
    if (!ls)
        return -1;
    for (size_t i = 0; i < t->n; i++)
        if (sel[i])
            ls[n++] = (lane_span){t->r[i].pid, t->r[i].tid, t->r[i].start, t->r[i].end};
    qsort(ls, n, sizeof *ls, cmp_lane);
    uint64_t t0 = UINT64_MAX, t1 = 0;
    for (size_t i = 0; i < n;) {
        uint64_t f = ls[i].first, l = ls[i].last;
        size_t j = i;
        for (; j < n && ls[j].pid == ls[i].pid && ls[j].tid == ls[i].tid; j++) {
            f = ls[j].first < f ? ls[j].first : f;
            l = ls[j].last > l ? ls[j].last : l;
        }
        gs->lane_span += l - f;
        gs->lanes++;
        t0 = f < t0 ? f : t0;
        t1 = l > t1 ? l : t1;
        i = j;
    }
    gs->wall = t1 > t0 ? t1 - t0 : 0;
    free(ls);
    return 0;
}

int pmt_groups_build(const pmt_trace *t, const pmt_projection *p, const pmt_report_opts *o,
                     pmt_groups *gs)
{
    memset(gs, 0, sizeof *gs);
    unsigned char *sel = calloc(t->n ? t->n : 1, 1);
    uint64_t t0 = first_start(t);
    int rc = sel ? 0 : -1;
    for (size_t i = 0; i < t->n && rc == 0; i++) {
        const pmt_range *r = &t->r[i];
        pmt_name nm;
        if (!closed(r))
            continue;
        int ok = pmt_name_parse(r->name, &nm, NULL, 0) == 0;
        if (!selected(r, ok ? &nm : NULL, o, t0))
            continue;
        sel[i] = 1;
        rc = classify(gs, r, ok ? &nm : NULL, o->group_by, p ? p->range_gpu_ns[i] : 0);
    }
    if (rc == 0)
        rc = lane_spans(t, sel, gs);
    free(sel);
    free(gs->slot);
    gs->slot = NULL;
    gs->nslot = 0;
    gs->gpu_total = p ? p->total_ns : 0;
    for (size_t i = 0; i < gs->n; i++)
        qsort(gs->g[i].dur, gs->g[i].n, sizeof *gs->g[i].dur, cmp_u64);
    if (gs->n)
        qsort(gs->g, gs->n, sizeof *gs->g, cmp_group);
    if (rc < 0)
        pmt_groups_free(gs);
    return rc;
}

void pmt_groups_free(pmt_groups *gs)
{
    for (size_t i = 0; i < gs->n; i++)
        free(gs->g[i].dur);
    free(gs->g);
    free(gs->slot);
    memset(gs, 0, sizeof *gs);
}

const pmt_group *pmt_groups_find(const pmt_groups *gs, const char *key)
{
    for (size_t i = 0; i < gs->n; i++)
        if (strcmp(gs->g[i].key, key) == 0)
            return &gs->g[i];
    return NULL;
}

/* ---- requests ---- */

static int cmp_request(const void *a, const void *b)
{
    const pmt_request *x = a, *y = b;
    return x->req < y->req ? -1 : x->req > y->req;
}

/* The entry of req in rs[0..*n), added when new (rs has room for it). */
static pmt_request *request_of(pmt_request *rs, size_t *n, uint64_t req, size_t *last)
{
    if (*last < *n && rs[*last].req == req)
        return &rs[*last];
    for (size_t i = 0; i < *n; i++)
        if (rs[i].req == req) {
            *last = i;
            return &rs[i];
        }
    memset(&rs[*n], 0, sizeof rs[*n]);
    rs[*n].req = req;
    *last = *n;
    return &rs[(*n)++];
}

static void request_add(pmt_request *q, const pmt_range *r, const pmt_name *nm)
{
    if (nm->kind == PMT_K_PREFILL) {
        if (!q->prefill_chunks || r->start < q->first_start)
            q->first_start = r->start;
        q->prefill_chunks++;
        q->prefill_ns += r->end - r->start;
        return;
    }
    if (!q->first_decode_end || r->start < q->first_decode_start) {
        q->first_decode_start = r->start;
        q->first_decode_end = r->end;
    }
    if (nm->kind == PMT_K_SPEC_DECODE) {
        q->spec_rounds++;
        q->drafted += PMT_HAS(nm, DRAFT) ? nm->attr[PM__KEY_DRAFT].u : 0;
        return;
    }
    if (!q->decode_steps || r->start < q->decode_first)
        q->decode_first = r->start;
    if (r->end > q->decode_last)
        q->decode_last = r->end;
    q->decode_steps++;
}

/* The prefill end that precedes the first decode step. */
static void request_prefill_end(pmt_request *rs, size_t n, const pmt_trace *t)
{
    for (size_t i = 0; i < t->n; i++) {
        const pmt_range *r = &t->r[i];
        pmt_name nm;
        if (!closed(r) || pmt_name_parse(r->name, &nm, NULL, 0) < 0 || nm.kind != PMT_K_PREFILL ||
            !PMT_HAS(&nm, REQ))
            continue;
        pmt_request key = {.req = nm.attr[PM__KEY_REQ].u};
        pmt_request *q = bsearch(&key, rs, n, sizeof *rs, cmp_request);
        if (q && r->end > q->prefill_end && (!q->first_decode_end || r->end <= q->first_decode_start))
            q->prefill_end = r->end;
    }
}

int pmt_requests(const pmt_trace *t, const pmt_report_opts *o, pmt_request **out, size_t *nout)
{
    pmt_request *rs = malloc((t->n ? t->n : 1) * sizeof *rs);
    size_t n = 0, last = 0;
    uint64_t t0 = first_start(t);
    *out = NULL;
    *nout = 0;
    if (!rs)
        return -1;
    for (size_t i = 0; i < t->n; i++) {
        const pmt_range *r = &t->r[i];
        pmt_name nm;
        if (!closed(r) || pmt_name_parse(r->name, &nm, NULL, 0) < 0 || !selected(r, &nm, o, t0) ||
            !PMT_HAS(&nm, REQ) ||
            (nm.kind != PMT_K_PREFILL && nm.kind != PMT_K_DECODE && nm.kind != PMT_K_SPEC_DECODE))
            continue;
        request_add(request_of(rs, &n, nm.attr[PM__KEY_REQ].u, &last), r, &nm);
    }
    qsort(rs, n, sizeof *rs, cmp_request);
    request_prefill_end(rs, n, t);
    *out = rs;
    *nout = n;
    return 0;
}

/* ---- printing ---- */

static void print_group(const pmt_group *g, const pmt_groups *gs, int json, FILE *f)
{
    uint64_t p50 = pmt_pct(g->dur, g->n, 50), p99 = pmt_pct(g->dur, g->n, 99);
    double share = gs->lane_span ? (double)g->total / (double)gs->lane_span : 0;
    double gshare = gs->gpu_total ? (double)g->gpu / (double)gs->gpu_total : 0;
    if (json) {
        fputs("{\"group\":", f);
        pmt_json_put(f, g->key);
        fprintf(f, ",\"count\":%zu,\"total_ns\":%llu,\"mean_ns\":%llu,\"p50_ns\":%llu,"
                   "\"p99_ns\":%llu,\"share\":%.6f,\"gpu_ns\":%llu,\"gpu_share\":%.6f}\n",
                g->n, (unsigned long long)g->total, (unsigned long long)(g->total / g->n),
                (unsigned long long)p50, (unsigned long long)p99, share,
                (unsigned long long)g->gpu, gshare);
        return;
    }
    fprintf(f, "%-44s %7zu %11.3f %10.3f %10.3f %10.3f %6.1f%%", g->key, g->n, g->total / 1e6,
            (double)g->total / (double)g->n / 1e3, p50 / 1e3, p99 / 1e3, share * 100);
    if (gs->gpu_total)
        fprintf(f, " %11.3f %6.1f%%", g->gpu / 1e6, gshare * 100);
    fputc('\n', f);
}

static double tok_per_s(const pmt_request *q)
{
    uint64_t span = q->decode_last - q->decode_first;
    return q->decode_steps && span ? (double)q->decode_steps * 1e9 / (double)span : 0;
}

/* TTFT runs from the first prefill's start to the end of the first decode
 * step (or speculative round); 0 when either is missing. */
static uint64_t ttft(const pmt_request *q)
{
    return q->prefill_chunks && q->first_decode_end > q->first_start ? q->first_decode_end - q->first_start
                                                                     : 0;
}

/* A request's time: its phase ranges whole and its share of every batched
 * forward it was in, by tokens (pmt_request_shares). */
static void print_request(const pmt_request *q, const pmt_req_share *sh, int gpu, int json,
                          FILE *f)
{
    uint64_t gap = q->prefill_chunks && q->prefill_end && q->first_decode_start > q->prefill_end
                       ? q->first_decode_start - q->prefill_end : 0;
    uint64_t first = q->first_decode_end - q->first_decode_start;
    if (json) {
        fprintf(f, "{\"req\":%llu,\"ttft_ns\":%llu,\"queue_ns\":null,\"prefill_ns\":%llu,"
                   "\"prefill_chunks\":%zu,\"gap_ns\":%llu,\"first_decode_ns\":%llu,"
                   "\"decode_steps\":%zu,\"decode_tok_s\":%.3f,\"spec_rounds\":%zu,\"drafted\":%llu,"
                   "\"accepted\":null,\"time_ns\":%llu,\"tokens\":%llu,\"ranges\":%llu,\"gpu_ns\":",
                (unsigned long long)q->req, (unsigned long long)ttft(q),
                (unsigned long long)q->prefill_ns, q->prefill_chunks, (unsigned long long)gap,
                (unsigned long long)first, q->decode_steps, tok_per_s(q), q->spec_rounds,
                (unsigned long long)q->drafted, (unsigned long long)sh->ns,
                (unsigned long long)sh->tokens, (unsigned long long)sh->ranges);
        if (gpu)
            fprintf(f, "%llu}\n", (unsigned long long)sh->gpu_ns);
        else
            fputs("null}\n", f);
        return;
    }
    fprintf(f, "%10llu %10.3f %8s %10.3f %6zu %9.3f %10.3f %7zu %10.1f %6zu %8llu %10.3f %7llu",
            (unsigned long long)q->req, ttft(q) / 1e6, "-", q->prefill_ns / 1e6, q->prefill_chunks,
            gap / 1e6, first / 1e6, q->decode_steps, tok_per_s(q), q->spec_rounds,
            (unsigned long long)q->drafted, sh->ns / 1e6, (unsigned long long)sh->tokens);
    if (gpu)
        fprintf(f, " %10.3f", sh->gpu_ns / 1e6);
    fputc('\n', f);
}

/* The trace's ranges that start in o's window, and their GPU time, as a
 * trace and projection of their own for pmt_request_shares (the ranges are
 * shallow copies: names stay the trace's). No window: t and p themselves. */
static int window_view(const pmt_trace *t, const pmt_projection *p, const pmt_report_opts *o,
                       pmt_trace *vt, pmt_projection *vp)
{
    memset(vt, 0, sizeof *vt);
    memset(vp, 0, sizeof *vp);
    if (!o->has_window) {
        *vt = *t;
        if (p)
            *vp = *p;
        return 0;
    }
    uint64_t t0 = first_start(t);
    vt->r = malloc((t->n ? t->n : 1) * sizeof *vt->r);
    vp->range_gpu_ns = calloc(t->n ? t->n : 1, sizeof *vp->range_gpu_ns);
    if (!vt->r || !vp->range_gpu_ns) {
        free(vt->r);
        free(vp->range_gpu_ns);
        return -1;
    }
    for (size_t i = 0; i < t->n; i++) {
        if (!selected(&t->r[i], NULL, o, t0))
            continue;
        if (p && p->range_gpu_ns)
            vp->range_gpu_ns[vt->n] = p->range_gpu_ns[i];
        vt->r[vt->n++] = t->r[i];
    }
    return 0;
}

/* Rows: every request with a phase range of its own (pmt_requests) or a
 * share of a batched forward (pmt_request_shares), by id, so a batched
 * trace gets one row per request it served. --req keeps that request's
 * row, its shares of batches included. */
static int print_requests(const pmt_trace *t, const pmt_projection *p, const pmt_report_opts *o,
                          FILE *f)
{
    pmt_request *rs;
    pmt_req_share *sh = NULL;
    size_t n, nsh = 0;
    pmt_report_opts wo = *o;
    wo.has_req = 0; /* batch ranges carry reqs=, not req=: select by window only */
    pmt_trace vt;
    pmt_projection vp;
    if (pmt_requests(t, o, &rs, &n) < 0)
        return -1;
    if (window_view(t, p, &wo, &vt, &vp) < 0 ||
        pmt_request_shares(&vt, p ? &vp : NULL, &sh, &nsh) < 0) {
        if (o->has_window) {
            free(vt.r);
            free(vp.range_gpu_ns);
        }
        free(rs);
        return -1;
    }
    if (o->has_window) {
        free(vt.r);
        free(vp.range_gpu_ns);
    }
    size_t rows = 0;
    for (size_t i = 0, j = 0; i < n || j < nsh;) {
        int take_q = i < n && (j >= nsh || rs[i].req <= sh[j].req);
        int take_s = j < nsh && (i >= n || sh[j].req <= rs[i].req);
        pmt_request q0 = {.req = take_q ? rs[i].req : sh[j].req};
        pmt_req_share s0 = {.req = q0.req};
        const pmt_request *q = take_q ? &rs[i] : &q0;
        const pmt_req_share *s = take_s ? &sh[j] : &s0;
        i += (size_t)take_q;
        j += (size_t)take_s;
        if (o->has_req && q->req != o->req)
            continue;
        if (!rows++ && !o->json) {
            fprintf(f, "\nper request (ms; TTFT = first prefill start to the end of the first "
                       "decode step; queue is not marked)\n%10s %10s %8s %10s %6s %9s %10s %7s "
                       "%10s %6s %8s %10s %7s",
                    "req", "ttft", "queue", "prefill", "chunks", "gap", "1st_dec", "steps", "tok/s",
                    "spec", "drafted", "time", "tokens");
            if (p)
                fprintf(f, " %10s", "gpu");
            fputc('\n', f);
        }
        print_request(q, s, p != NULL, o->json, f);
    }
    if (rows && !o->json)
        fputs("(spec: speculative rounds, drafted: tokens drafted in them; acceptance is not in "
              "the markers; time, tokens, gpu: its phase ranges, and its share by tokens of each "
              "batched forward it was in)\n", f);
    free(sh);
    free(rs);
    return 0;
}

static void print_footer(const pmt_groups *gs, const pmt_projection *p, const pmt_report_opts *o,
                         FILE *f)
{
    double unc = p && p->total_ns ? (double)p->uncovered_ns / (double)p->total_ns : 0;
    if (o->json) {
        fprintf(f, "{\"wall_ns\":%llu,\"lane_span_ns\":%llu,\"lanes\":%zu,\"violations\":%zu",
                (unsigned long long)gs->wall, (unsigned long long)gs->lane_span, gs->lanes,
                o->violations);
        if (p)
            fprintf(f, ",\"gpu_total_ns\":%llu,\"gpu_matched_ns\":%llu,\"gpu_covered_ns\":%llu,"
                       "\"gpu_uncovered_ns\":%llu,\"gpu_uncovered_share\":%.6f,\"activities\":%zu,"
                       "\"matched\":%zu",
                    (unsigned long long)p->total_ns, (unsigned long long)p->matched_ns,
                    (unsigned long long)p->covered_ns, (unsigned long long)p->uncovered_ns, unc,
                    p->nact, p->nmatched);
        fputs("}\n", f);
        return;
    }
    fprintf(f, "wall span: %.3f ms; share = total / %.3f ms, the summed wall span of %zu lanes "
               "(process and thread)\n",
            gs->wall / 1e6, gs->lane_span / 1e6, gs->lanes);
    if (p)
        fprintf(f, "GPU: %zu activities, %.3f ms; launch found for %zu; outside every phase: "
                   "%.3f ms (%.1f%% of GPU time)\n",
                p->nact, p->total_ns / 1e6, p->nmatched, p->uncovered_ns / 1e6, unc * 100);
}

int pmt_report(const pmt_trace *t, const pmt_projection *p, const pmt_report_opts *o, FILE *f)
{
    pmt_groups gs;
    if (pmt_groups_build(t, p, o, &gs) < 0)
        return -1;
    if (!o->json) {
        fprintf(f, "%-44s %7s %11s %10s %10s %10s %7s", "group", "count", "total_ms", "mean_us",
                "p50_us", "p99_us", "share");
        if (gs.gpu_total)
            fprintf(f, " %11s %7s", "gpu_ms", "gpu%");
        fputc('\n', f);
    }
    for (size_t i = 0; i < gs.n; i++)
        print_group(&gs.g[i], &gs, o->json, f);
    print_footer(&gs, p, o, f);
    int rc = o->no_requests ? 0 : print_requests(t, p, o, f);
    pmt_groups_free(&gs);
    return rc < 0 || ferror(f) ? -1 : 0;
}
