/* attrib.c — time per request, with batched forwards shared by tokens.
 *
 * A phase range of one request (prefill, decode, spec_decode with req=R)
 * gives its whole duration, and its projected GPU time when a projection is
 * given, to R. A batch range gives each request of its reqs list a share
 * in proportion to that request's tokens, split in integer nanoseconds so
 * the shares add up exactly: each gets floor(total * tokens / sum), and the
 * nanoseconds left over go one each to the entries in list order. Leaves
 * are not counted: their time is already inside their phase's.
 */
#include <stdlib.h>
#include <string.h>

#include "pmt.h"

static pmt_req_share *find_or_add(pmt_req_share **v, size_t *n, size_t *cap, uint64_t req)
{
    for (size_t i = 0; i < *n; i++)
        if ((*v)[i].req == req)
            return &(*v)[i];
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        pmt_req_share *nv = realloc(*v, nc * sizeof *nv);
        if (!nv)
            return NULL;
        *v = nv;
        *cap = nc;
    }
    pmt_req_share *s = &(*v)[(*n)++];
    memset(s, 0, sizeof *s);
    s->req = req;
    return s;
}

/* total * part / whole without overflow for the values a trace holds
 * (ns totals below 2^64, tokens below 2^32). */
static uint64_t share_of(uint64_t total, uint64_t part, uint64_t whole)
{
    return (uint64_t)((unsigned __int128)total * part / whole);
}

/* Adds one batch's time and GPU time to its requests; -1 out of memory. */
static int add_batch(pmt_req_share **v, size_t *n, size_t *cap, const pmt_attr *reqs,
                     uint64_t ns, uint64_t gpu)
{
    const char *end = reqs->text + reqs->len;
    uint64_t whole = reqs->last, req, tokens, given_ns = 0, given_gpu = 0;
    for (int pass = 0; pass < 2; pass++) {
        const char *p = reqs->text;
        while (pmt_reqs_next(&p, end, &req, &tokens) > 0) {
            pmt_req_share *s = find_or_add(v, n, cap, req);
            if (!s)
                return -1;
            if (pass == 0) {
                uint64_t a = whole ? share_of(ns, tokens, whole) : 0;
                uint64_t g = whole ? share_of(gpu, tokens, whole) : 0;
                s->ns += a, s->gpu_ns += g, s->tokens += tokens, s->ranges++;
                given_ns += a, given_gpu += g;
                continue;
            }
            /* The remainder, one ns each in list order. */
            if (given_ns < ns)
                s->ns++, given_ns++;
            if (given_gpu < gpu)
                s->gpu_ns++, given_gpu++;
        }
    }
    return 0;
}

static int cmp_req(const void *a, const void *b)
{
    const pmt_req_share *x = a, *y = b;
    return x->req < y->req ? -1 : x->req > y->req;
}

int pmt_request_shares(const pmt_trace *t, const pmt_projection *p, pmt_req_share **out,
                       size_t *nout)
{
    pmt_req_share *v = NULL;
    size_t n = 0, cap = 0;
    *out = NULL;
    *nout = 0;
    for (size_t i = 0; i < t->n; i++) {
        const pmt_range *r = &t->r[i];
        pmt_name nm;
        if ((r->flags & (PMT_F_OPEN | PMT_F_ORPHAN)) || r->start > r->end ||
            pmt_name_parse(r->name, &nm, NULL, 0) < 0)
            continue;
        uint64_t ns = r->end - r->start, gpu = p && p->range_gpu_ns ? p->range_gpu_ns[i] : 0;
        if (nm.kind == PMT_K_BATCH && PMT_HAS(&nm, REQS)) {
            if (add_batch(&v, &n, &cap, &nm.attr[PM__KEY_REQS], ns, gpu) < 0)
                goto oom;
            continue;
        }
        if ((nm.kind != PMT_K_PREFILL && nm.kind != PMT_K_DECODE &&
             nm.kind != PMT_K_SPEC_DECODE) || !PMT_HAS(&nm, REQ))
            continue;
        pmt_req_share *s = find_or_add(&v, &n, &cap, nm.attr[PM__KEY_REQ].u);
        if (!s)
            goto oom;
        s->ns += ns, s->gpu_ns += gpu, s->ranges++;
        if (PMT_HAS(&nm, TOKENS))
            s->tokens += nm.attr[PM__KEY_TOKENS].u;
        else if (nm.kind == PMT_K_DECODE)
            s->tokens += 1;
    }
    if (n)
        qsort(v, n, sizeof *v, cmp_req);
    *out = v;
    *nout = n;
    return 0;
oom:
    free(v);
    return -1;
}
