/* gpu.c — GPU activity traces and their projection onto phase ranges.
 *
 * Activities (kernels, memory copies) come from rocprofv3's kernel and
 * memory-copy CSVs or from our CUPTI recorder's CSVs (same column names);
 * launch calls come from an API CSV (rocprofv3's HIP API trace, or our
 * CUDA API trace), joined to activities by Correlation_Id.
 *
 * Projection, as Nsight Systems projects NVTX ranges onto the GPU: an
 * activity belongs to every range that encloses its launch call's start on
 * the same process and thread. Ranges are swept per thread in start order
 * with a stack, so the cost is O((ranges + activities) log n).
 */
#define _GNU_SOURCE
#define PMT_PROJ_DEPTH 4096 /* nesting kept per thread while sweeping */
#include <stdlib.h>
#include <string.h>

#include "pmt.h"

void pmt_gpu_init(pmt_gpu *g)
{
    memset(g, 0, sizeof *g);
}

void pmt_gpu_free(pmt_gpu *g)
{
    for (size_t i = 0; i < g->nact; i++)
        free(g->act[i].name);
    free(g->act);
    free(g->api);
    pmt_gpu_init(g);
}

static int grow(void **p, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 256;
    void *np = realloc(*p, ncap * elem);
    if (!np)
        return -1;
    *p = np;
    *cap = ncap;
    return 0;
}

int pmt_gpu_add_api(pmt_gpu *g, const pmt_api *a)
{
    if (grow((void **)&g->api, &g->api_cap, g->napi, sizeof *g->api) < 0)
        return -1;
    g->api[g->napi++] = *a;
    return 0;
}

int pmt_gpu_add_activity(pmt_gpu *g, const pmt_activity *a)
{
    if (grow((void **)&g->act, &g->act_cap, g->nact, sizeof *g->act) < 0)
        return -1;
    char *name = strdup(a->name ? a->name : "");
    if (!name)
        return -1;
    g->act[g->nact] = *a;
    g->act[g->nact++].name = name;
    return 0;
}

typedef struct cols {
    int corr, start, end, tid, pid, name, stream;
} cols;

static int u64_at(char **f, size_t nf, int col, uint64_t *out, int optional)
{
    if (col < 0 || (size_t)col >= nf)
        return optional ? 0 : -1;
    if (optional && !*f[col])
        return 0;
    return pmt_parse_u64(f[col], strlen(f[col]), out);
}

static int row(pmt_gpu *g, int is_api, int kind, const cols *k, char **f, size_t nf)
{
    uint64_t corr = 0, start = 0, end = 0, tid = 0, pid = 0, stream = 0;
    if (u64_at(f, nf, k->corr, &corr, 0) < 0 || u64_at(f, nf, k->start, &start, 0) < 0 ||
        u64_at(f, nf, k->end, &end, 0) < 0 || u64_at(f, nf, k->tid, &tid, 1) < 0 ||
        u64_at(f, nf, k->pid, &pid, 1) < 0 || u64_at(f, nf, k->stream, &stream, 1) < 0 ||
        tid > UINT32_MAX || pid > UINT32_MAX || stream > 0xFFFF)
        return -2;
    if (is_api) {
        if (grow((void **)&g->api, &g->api_cap, g->napi, sizeof *g->api) < 0)
            return -1;
        g->api[g->napi++] = (pmt_api){(uint32_t)pid, (uint32_t)tid, corr, start, end};
        return 0;
    }
    if (grow((void **)&g->act, &g->act_cap, g->nact, sizeof *g->act) < 0)
        return -1;
    char *name = strdup(k->name >= 0 && (size_t)k->name < nf ? f[k->name] : "");
    if (!name)
        return -1;
    g->act[g->nact++] = (pmt_activity){kind, corr, start, end, (uint32_t)tid, (uint32_t)pid,
                                       (uint32_t)stream, name};
    return 0;
}

static int load(pmt_gpu *g, pmt_csv *c, char *err, size_t errlen)
{
    int kernel = pmt_csv_col(c, "Kernel_Name"), dir = pmt_csv_col(c, "Direction");
    int func = pmt_csv_col(c, "Function");
    int is_api = kernel < 0 && dir < 0 && func >= 0;
    int kind = kernel >= 0 ? PMT_ACT_KERNEL : PMT_ACT_COPY;
    cols k = {pmt_csv_col(c, "Correlation_Id"), pmt_csv_col(c, "Start_Timestamp"),
              pmt_csv_col(c, "End_Timestamp"), pmt_csv_col(c, "Thread_Id"),
              pmt_csv_col(c, "Process_Id"), kernel >= 0 ? kernel : dir >= 0 ? dir : func,
              pmt_csv_col(c, "Stream_Id")};
    if ((kernel < 0 && dir < 0 && func < 0) || k.corr < 0 || k.start < 0 || k.end < 0) {
        pmt_errf(err, errlen, "%s: not a kernel, memory-copy or API trace (columns)", c->path);
        return -1;
    }
    char *f[PMT_CSV_MAX_FIELDS];
    size_t nf;
    int rc;
    while ((rc = pmt_csv_next(c, f, &nf, err, errlen)) > 0) {
        int r = row(g, is_api, kind, &k, f, nf);
        if (r == -2)
            pmt_errf(err, errlen, "%s:%zu: missing or non-numeric id/timestamp", c->path, c->line);
        else if (r < 0)
            pmt_errf(err, errlen, "out of memory");
        if (r < 0)
            return -1;
    }
    return rc;
}

int pmt_gpu_load_text(pmt_gpu *g, const char *name, const char *text, size_t len, char *err,
                      size_t errlen)
{
    pmt_csv c;
    if (pmt_csv_open_text(&c, name, text, len, err, errlen) < 0)
        return -1;
    int rc = load(g, &c, err, errlen);
    pmt_csv_close(&c);
    return rc;
}

int pmt_gpu_load(pmt_gpu *g, const char *path, char *err, size_t errlen)
{
    pmt_csv c;
    if (pmt_csv_open(&c, path, err, errlen) < 0)
        return -1;
    int rc = load(g, &c, err, errlen);
    pmt_csv_close(&c);
    return rc;
}

/* ---- projection ---- */

typedef struct launch {
    uint32_t pid, tid;
    uint64_t ts, dur;
} launch;

static int cmp_api_corr(const void *a, const void *b)
{
    const pmt_api *x = a, *y = b;
    return x->corr < y->corr ? -1 : x->corr > y->corr;
}

static int cmp_launch(const void *a, const void *b)
{
    const launch *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

/* The launch call of activity a: same correlation id, the launching
 * thread's record when the activity names its thread. */
static const pmt_api *find_api(const pmt_api *api, size_t n, const pmt_activity *a)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (api[mid].corr < a->corr)
            lo = mid + 1;
        else
            hi = mid;
    }
    const pmt_api *first = lo < n && api[lo].corr == a->corr ? &api[lo] : NULL;
    for (size_t i = lo; a->tid && i < n && api[i].corr == a->corr; i++)
        if (api[i].tid == a->tid)
            return &api[i];
    return first;
}

static int same_thread(const pmt_range *r, const launch *l)
{
    return r->pid == l->pid && r->tid == l->tid;
}

static int before_thread(const pmt_range *r, const launch *l)
{
    return r->pid < l->pid || (r->pid == l->pid && r->tid < l->tid);
}

static void sweep(const pmt_trace *t, const size_t *order, size_t nr, const launch *ls,
                  size_t nl, size_t *stack, pmt_projection *p)
{
    size_t ri = 0, depth = 0;
    for (size_t i = 0; i < nl; i++) {
        const launch *l = &ls[i];
        if (i && (ls[i - 1].pid != l->pid || ls[i - 1].tid != l->tid))
            depth = 0;
        while (ri < nr && before_thread(&t->r[order[ri]], l))
            ri++;
        for (; ri < nr && same_thread(&t->r[order[ri]], l) && t->r[order[ri]].start <= l->ts; ri++) {
            while (depth && t->r[stack[depth - 1]].end < t->r[order[ri]].start)
                depth--;
            if (depth < PMT_PROJ_DEPTH)
                stack[depth++] = order[ri];
        }
        while (depth && t->r[stack[depth - 1]].end < l->ts)
            depth--;
        int covered = 0;
        for (size_t d = 0; d < depth; d++) {
            p->range_gpu_ns[stack[d]] += l->dur;
            covered |= pmt_name_is_ours(t->r[stack[d]].name);
        }
        if (covered) {
            p->covered_ns += l->dur;
            p->ncovered++;
        }
    }
}

int pmt_project(const pmt_trace *t, const pmt_gpu *g, pmt_projection *p)
{
    memset(p, 0, sizeof *p);
    p->range_gpu_ns = calloc(t->n ? t->n : 1, sizeof *p->range_gpu_ns);
    pmt_api *api = malloc((g->napi ? g->napi : 1) * sizeof *api);
    launch *ls = malloc((g->nact ? g->nact : 1) * sizeof *ls);
    size_t *order = malloc((t->n ? t->n : 1) * sizeof *order);
    size_t *stack = malloc(PMT_PROJ_DEPTH * sizeof *stack);
    int rc = -1;
    if (!p->range_gpu_ns || !api || !ls || !order || !stack)
        goto done;
    if (g->napi)
        memcpy(api, g->api, g->napi * sizeof *api);
    qsort(api, g->napi, sizeof *api, cmp_api_corr);
    size_t nl = 0, nr = 0;
    for (size_t i = 0; i < g->nact; i++) {
        const pmt_activity *a = &g->act[i];
        uint64_t dur = a->end > a->start ? a->end - a->start : 0;
        p->total_ns += dur;
        p->nact++;
        const pmt_api *call = find_api(api, g->napi, a);
        if (!call)
            continue;
        p->matched_ns += dur;
        p->nmatched++;
        ls[nl++] = (launch){call->pid, call->tid, call->start, dur};
    }
    for (size_t i = 0; i < t->n; i++)
        if (!(t->r[i].flags & (PMT_F_OPEN | PMT_F_ORPHAN | PMT_F_MARK)) && t->r[i].start <= t->r[i].end)
            order[nr++] = i;
    pmt_trace_sort_nested(t, order, nr);
    qsort(ls, nl, sizeof *ls, cmp_launch);
    sweep(t, order, nr, ls, nl, stack, p);
    p->uncovered_ns = p->total_ns - p->covered_ns;
    rc = 0;
done:
    free(api);
    free(ls);
    free(order);
    free(stack);
    if (rc < 0)
        pmt_projection_free(p);
    return rc;
}

void pmt_projection_free(pmt_projection *p)
{
    free(p->range_gpu_ns);
    memset(p, 0, sizeof *p);
}
