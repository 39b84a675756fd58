/* check.c — trace verification: balance, ordering, per-thread nesting,
 * leaves enclosing nothing, the name grammar, the phase rules, and expected
 * counts.
 *
 * Nesting is checked per (process, thread) over the closed ranges sorted
 * by start (longer first on ties): a stack of enclosing ranges is kept; a
 * range that starts inside the top one must also end inside it (else a
 * partial overlap), and a leaf (pm.draft, pm.layer_range) may enclose no
 * phasemark range and no range of positive length (another tool's
 * zero-length marks inside a leaf are harmless).
 *
 * Phase rules tie each layer range to the phase range it ran for. A leaf
 * with req=R and mode exact, decode or verify must lie, in time, inside a
 * prefill, decode or spec_decode range of request R respectively; a leaf
 * with batch=B inside the batch range B, with the batch's mode and tokens.
 * The enclosing range may be on any thread of any process (a shard daemon
 * runs its layers for the engine's phase), so the match is by request or
 * batch id and time, all processes sharing CLOCK_BOOTTIME. A batch range's
 * reqs must add up to its tokens.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "pmt.h"

#define PMT_CHECK_DEPTH 4096

typedef struct counts {
    uint64_t kind[PMT_K_COUNT + 1];
    struct {
        int kind;
        char mode[16];
        uint64_t n;
    } km[64];
    size_t nkm;
    struct proc_count {
        uint32_t pid;
        uint64_t n;
    } proc[256];
    size_t nproc;
} counts;

static void violation(FILE *out, size_t *nv, const pmt_range *r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void violation(FILE *out, size_t *nv, const pmt_range *r, const char *fmt, ...)
{
    (*nv)++;
    if (!out)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(out, "violation: ");
    vfprintf(out, fmt, ap);
    va_end(ap);
    fprintf(out, " (pid %u tid %u, %s:%zu)\n", r->pid, r->tid, r->source ? r->source : "?",
            r->line);
}

static void count(counts *c, const pmt_range *r, const pmt_name *nm)
{
    c->kind[nm->kind]++;
    size_t i;
    for (i = 0; i < c->nkm; i++)
        if (c->km[i].kind == nm->kind && strcmp(c->km[i].mode, nm->mode) == 0)
            break;
    if (i == c->nkm && c->nkm < 64) {
        c->km[i].kind = nm->kind;
        memcpy(c->km[i].mode, nm->mode, sizeof nm->mode);
        c->km[c->nkm++].n = 0;
    }
    if (i < c->nkm)
        c->km[i].n++;
    for (i = 0; i < c->nproc; i++)
        if (c->proc[i].pid == r->pid)
            break;
    if (i == c->nproc && c->nproc < 256)
        c->proc[c->nproc++] = (struct proc_count){r->pid, 0};
    if (i < c->nproc)
        c->proc[i].n++;
}

static int cmp_nest(const void *a, const void *b)
{
    const pmt_range *x = *(const pmt_range *const *)a, *y = *(const pmt_range *const *)b;
    int c = pmt_range_cmp_nested(x, y);
    return c ? c : (x > y) - (x < y);
}

static int is_leaf(const pmt_range *r)
{
    pmt_name nm;
    return pmt_name_parse(r->name, &nm, NULL, 0) == 0 && pmt_kind_is_leaf(nm.kind);
}

/* A range that must not sit inside a leaf. */
static int counts_as_child(const pmt_range *r)
{
    return pmt_name_is_ours(r->name) || (r->end > r->start && !(r->flags & PMT_F_MARK));
}

static void check_nesting(const pmt_trace *t, FILE *out, size_t *nv)
{
    const pmt_range **v = malloc((t->n ? t->n : 1) * sizeof *v);
    const pmt_range **stack = malloc(PMT_CHECK_DEPTH * sizeof *stack);
    size_t n = 0, depth = 0;
    for (size_t i = 0; v && i < t->n; i++)
        if (!(t->r[i].flags & (PMT_F_OPEN | PMT_F_ORPHAN)) && t->r[i].start <= t->r[i].end)
            v[n++] = &t->r[i];
    if (!v || !stack) {
        violation(out, nv, t->r, "out of memory checking nesting");
        n = 0;
    }
    if (n)
        qsort(v, n, sizeof *v, cmp_nest);
    for (size_t i = 0; i < n; i++) {
        const pmt_range *r = v[i];
        if (i && (v[i - 1]->pid != r->pid || v[i - 1]->tid != r->tid))
            depth = 0;
        while (depth && stack[depth - 1]->end <= r->start)
            depth--;
        if (depth) {
            const pmt_range *top = stack[depth - 1];
            if (r->end > top->end)
                violation(out, nv, r, "partial overlap: '%s' and '%s' overlap without nesting",
                          top->name, r->name);
            else if (is_leaf(top) && counts_as_child(r))
                violation(out, nv, r, "leaf '%s' encloses '%s'", top->name, r->name);
        }
        if (depth < PMT_CHECK_DEPTH)
            stack[depth++] = r;
    }
    free(v);
    free(stack);
}

/* ---- phase rules ---- */

/* A phase range (prefill, decode, spec_decode, batch) as the rules need
 * it: kind, the id leaves name it by (req, or batch for a batch range),
 * its mode and tokens. maxend: the latest end among this entry and the
 * ones before it in its (kind, id) group, so the search stops early. */
typedef struct phase_ref {
    int kind;
    uint64_t id;
    unsigned mode;
    uint64_t tokens;
    const pmt_range *r;
    uint64_t maxend;
} phase_ref;

static int cmp_phase(const void *a, const void *b)
{
    const phase_ref *x = a, *y = b;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    if (x->r->start != y->r->start)
        return x->r->start < y->r->start ? -1 : 1;
    return (x->r > y->r) - (x->r < y->r);
}

static int closed(const pmt_range *r)
{
    return !(r->flags & (PMT_F_OPEN | PMT_F_ORPHAN)) && r->start <= r->end;
}

/* The phase range of (kind, id) that encloses [start, end], or NULL. */
static const phase_ref *enclosing(const phase_ref *v, size_t n, int kind, uint64_t id,
                                  const pmt_range *leaf)
{
    size_t lo = 0, hi = n; /* first entry after (kind, id, leaf->start) */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const phase_ref *m = &v[mid];
        int before = m->kind < kind || (m->kind == kind && (m->id < id || (m->id == id &&
                                                                m->r->start <= leaf->start)));
        if (before)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i-- > 0;) {
        if (v[i].kind != kind || v[i].id != id || v[i].maxend < leaf->end)
            return NULL;
        if (v[i].r->end >= leaf->end)
            return &v[i];
    }
    return NULL;
}

/* The prefix in force, for messages. */
static const char *pfx(void)
{
    static char p[PM__PREFIX_MAX + 1];
    return pmt_prefix(p, sizeof p);
}

/* A range of `kind` on the leaf's own thread that encloses it, whatever its
 * id: what the leaf most likely ran for when the ids disagree. */
static const phase_ref *same_thread(const phase_ref *v, size_t n, int kind, const pmt_range *leaf)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].kind == kind && v[i].r->pid == leaf->pid && v[i].r->tid == leaf->tid &&
            v[i].r->start <= leaf->start && v[i].r->end >= leaf->end)
            return &v[i];
    return NULL;
}

static void check_leaf(const phase_ref *v, size_t n, const pmt_range *r, const pmt_name *nm,
                       FILE *out, size_t *nv)
{
    unsigned mode = (unsigned)nm->attr[PM__KEY_MODE].u;
    if (PMT_HAS(nm, BATCH)) {
        uint64_t b = nm->attr[PM__KEY_BATCH].u;
        const phase_ref *p = enclosing(v, n, PMT_K_BATCH, b, r);
        if (!p)
            violation(out, nv, r, "phase: '%s' is not inside %s.batch batch=%llu", r->name, pfx(),
                      (unsigned long long)b);
        else if (p->mode != mode)
            violation(out, nv, r, "phase: '%s' has mode=%s but its batch has mode=%s", r->name,
                      pm_phase_name(mode), pm_phase_name(p->mode));
        else if (PMT_HAS(nm, TOKENS) && nm->attr[PM__KEY_TOKENS].u != p->tokens)
            violation(out, nv, r, "phase: '%s' has tokens=%llu but its batch has tokens=%llu",
                      r->name, (unsigned long long)nm->attr[PM__KEY_TOKENS].u,
                      (unsigned long long)p->tokens);
        return;
    }
    if (!PMT_HAS(nm, REQ)) {
        violation(out, nv, r, "phase: '%s' names neither req nor batch", r->name);
        return;
    }
    int want = mode == PM_PHASE_EXACT    ? PMT_K_PREFILL
               : mode == PM_PHASE_DECODE ? PMT_K_DECODE
                                         : PMT_K_SPEC_DECODE;
    uint64_t req = nm->attr[PM__KEY_REQ].u;
    if (enclosing(v, n, want, req, r))
        return;
    const phase_ref *mine = same_thread(v, n, want, r);
    if (mine)
        violation(out, nv, r, "phase: '%s' has req=%llu but its %s.%s has req=%llu", r->name,
                  (unsigned long long)req, pfx(), pmt_kind_name(want),
                  (unsigned long long)mine->id);
    else
        violation(out, nv, r, "phase: %s leaf '%s' is not inside a %s.%s of req=%llu",
                  pm_phase_name(mode), r->name, pfx(), pmt_kind_name(want),
                  (unsigned long long)req);
}

static void check_phases(const pmt_trace *t, FILE *out, size_t *nv)
{
    phase_ref *v = malloc((t->n ? t->n : 1) * sizeof *v);
    size_t n = 0;
    if (!v) {
        violation(out, nv, t->r, "out of memory checking phases");
        return;
    }
    for (size_t i = 0; i < t->n; i++) {
        const pmt_range *r = &t->r[i];
        pmt_name nm;
        if (!closed(r) || pmt_name_parse(r->name, &nm, NULL, 0) < 0)
            continue;
        int k = nm.kind;
        if (k == PMT_K_BATCH && PMT_HAS(&nm, REQS) && PMT_HAS(&nm, TOKENS) &&
            nm.attr[PM__KEY_REQS].last != nm.attr[PM__KEY_TOKENS].u)
            violation(out, nv, r, "phase: '%s' has tokens=%llu but its reqs add up to %llu",
                      r->name, (unsigned long long)nm.attr[PM__KEY_TOKENS].u,
                      (unsigned long long)nm.attr[PM__KEY_REQS].last);
        if (k == PMT_K_BATCH && !PMT_HAS(&nm, REQS))
            violation(out, nv, r, "phase: '%s' names no reqs", r->name);
        if (k != PMT_K_PREFILL && k != PMT_K_DECODE && k != PMT_K_SPEC_DECODE && k != PMT_K_BATCH)
            continue;
        int by_batch = k == PMT_K_BATCH;
        if (!(by_batch ? PMT_HAS(&nm, BATCH) : PMT_HAS(&nm, REQ)))
            continue;
        v[n++] = (phase_ref){k, nm.attr[by_batch ? PM__KEY_BATCH : PM__KEY_REQ].u,
                             (unsigned)nm.attr[PM__KEY_MODE].u, nm.attr[PM__KEY_TOKENS].u, r, 0};
    }
    qsort(v, n, sizeof *v, cmp_phase);
    for (size_t i = 0; i < n; i++) {
        int same = i && v[i - 1].kind == v[i].kind && v[i - 1].id == v[i].id;
        v[i].maxend = same && v[i - 1].maxend > v[i].r->end ? v[i - 1].maxend : v[i].r->end;
    }
    for (size_t i = 0; i < t->n; i++) {
        const pmt_range *r = &t->r[i];
        pmt_name nm;
        if (closed(r) && pmt_name_parse(r->name, &nm, NULL, 0) == 0 &&
            nm.kind == PMT_K_LAYER_RANGE && PMT_HAS(&nm, MODE))
            check_leaf(v, n, r, &nm, out, nv);
    }
    free(v);
}

static void print_counts(const counts *c, const pmt_trace *t, FILE *f)
{
    fprintf(f, "%-14s %-8s %10s\n", "kind", "mode", "count");
    for (int k = PMT_K_PREFILL; k < PMT_K_COUNT; k++) {
        if (!c->kind[k])
            continue;
        fprintf(f, "%-14s %-8s %10llu\n", pmt_kind_name(k), "*", (unsigned long long)c->kind[k]);
        for (size_t i = 0; i < c->nkm; i++)
            if (c->km[i].kind == k && c->km[i].mode[0])
                fprintf(f, "%-14s %-8s %10llu\n", "", c->km[i].mode, (unsigned long long)c->km[i].n);
    }
    if (c->kind[PMT_K_OTHER])
        fprintf(f, "%-14s %-8s %10llu\n", "(other)", "", (unsigned long long)c->kind[PMT_K_OTHER]);
    for (size_t i = 0; i < c->nproc; i++) {
        const char *name = pmt_trace_label_of(t, c->proc[i].pid, 0);
        fprintf(f, "process %u%s%s%s: %llu ranges\n", c->proc[i].pid, name ? " (" : "",
                name ? name : "", name ? ")" : "", (unsigned long long)c->proc[i].n);
    }
}

static void check_expect(const counts *c, const pmt_expect *ex, size_t nex, FILE *out, size_t *nv)
{
    for (size_t i = 0; i < nex; i++) {
        int kind = ex[i].kind == PMT_K_COUNT ? PMT_K_OTHER : ex[i].kind;
        uint64_t got = 0;
        if (!ex[i].mode[0])
            got = c->kind[kind];
        for (size_t j = 0; ex[i].mode[0] && j < c->nkm; j++)
            if (c->km[j].kind == kind && strcmp(c->km[j].mode, ex[i].mode) == 0)
                got = c->km[j].n;
        if (got == ex[i].count)
            continue;
        (*nv)++;
        if (out)
            fprintf(out, "violation: expected %s%s%s=%llu, found %llu\n",
                    ex[i].kind == PMT_K_COUNT ? "other" : pmt_kind_name(kind),
                    ex[i].mode[0] ? ":" : "", ex[i].mode, (unsigned long long)ex[i].count,
                    (unsigned long long)got);
    }
}

size_t pmt_check(const pmt_trace *t, const pmt_expect *ex, size_t nex, FILE *out, FILE *summary)
{
    size_t nv = 0;
    counts *c = calloc(1, sizeof *c);
    if (!c)
        return 1;
    for (size_t i = 0; i < t->n; i++) {
        const pmt_range *r = &t->r[i];
        pmt_name nm;
        char err[200];
        if (r->flags & PMT_F_ORPHAN) {
            violation(out, &nv, r, "unbalanced: a pop without a matching push");
            continue;
        }
        if (r->flags & PMT_F_OPEN)
            violation(out, &nv, r, "unbalanced: '%s' is never closed", r->name);
        else if (r->start > r->end)
            violation(out, &nv, r, "ordering: '%s' ends before it starts", r->name);
        if (pmt_name_parse(r->name, &nm, err, sizeof err) < 0) {
            violation(out, &nv, r, "bad name '%s': %s", r->name, err);
            continue;
        }
        count(c, r, &nm);
    }
    check_nesting(t, out, &nv);
    check_phases(t, out, &nv);
    check_expect(c, ex, nex, out, &nv);
    if (summary)
        print_counts(c, t, summary);
    free(c);
    return nv;
}

int pmt_expect_parse(const char *spec, pmt_expect *out, size_t *n, char *err, size_t errlen)
{
    *n = 0;
    const char *p = spec;
    while (*p) {
        size_t len = strcspn(p, ",");
        const char *eq = memchr(p, '=', len), *colon = memchr(p, ':', len);
        if (*n == PMT_EXPECT_MAX || !eq || (colon && colon > eq)) {
            pmt_errf(err, errlen, "bad --expect item '%.*s' (want kind=N or kind:mode=N)", (int)len, p);
            return -1;
        }
        pmt_expect *e = &out[*n];
        memset(e, 0, sizeof *e);
        size_t klen = (size_t)((colon ? colon : eq) - p);
        e->kind = (klen == 5 && memcmp(p, "other", 5) == 0) ? PMT_K_COUNT : pmt_kind_parse(p, klen);
        size_t mlen = colon ? (size_t)(eq - colon - 1) : 0;
        if (e->kind < 0 || (colon && (!mlen || mlen >= sizeof e->mode)) ||
            pmt_parse_u64(eq + 1, len - (size_t)(eq - p) - 1, &e->count) < 0) {
            pmt_errf(err, errlen, "bad --expect item '%.*s'", (int)len, p);
            return -1;
        }
        if (colon)
            memcpy(e->mode, colon + 1, mlen);
        (*n)++;
        if (p[len] == ',' && !p[len + 1]) {
            pmt_errf(err, errlen, "--expect ends with ','");
            return -1;
        }
        p += len + (p[len] == ',');
    }
    return 0;
}
