/* report.c — time per kind, mode, shard and layer span, with GPU time
 * projected onto them, and an SVG timeline.
 *
 * Groups: "prefill", "prefill mode=exact", "layer_range shard=1",
 * "layer_range shard=1 layers=12-23", ... and "(other)" for ranges of other
 * tools. A range counts in each group it matches, so shares of nested
 * groups add up to more than 100%. Share is of the trace's wall span (first
 * start to last end over all closed ranges); GPU share is of all activity
 * time. Percentiles are nearest-rank.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "pmt.h"

#define PMT_GROUP_KEY 96

typedef struct group {
    char key[PMT_GROUP_KEY];
    uint64_t *dur;
    size_t n, cap;
    uint64_t total, gpu;
} group;

typedef struct groups {
    group *g;
    size_t n, cap;
} groups;

static group *group_of(groups *gs, const char *key)
{
    for (size_t i = 0; i < gs->n; i++)
        if (strcmp(gs->g[i].key, key) == 0)
            return &gs->g[i];
    if (gs->n == gs->cap) {
        size_t ncap = gs->cap ? gs->cap * 2 : 32;
        group *ng = realloc(gs->g, ncap * sizeof *ng);
        if (!ng)
            return NULL;
        gs->g = ng;
        gs->cap = ncap;
    }
    group *g = &gs->g[gs->n++];
    memset(g, 0, sizeof *g);
    snprintf(g->key, sizeof g->key, "%s", key);
    return g;
}

static int add(groups *gs, const char *key, uint64_t dur, uint64_t gpu)
{
    group *g = group_of(gs, key);
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

/* Adds one range to each group it belongs to. */
static int classify(groups *gs, const pmt_range *r, uint64_t gpu)
{
    pmt_name nm;
    char key[PMT_GROUP_KEY];
    uint64_t dur = r->end - r->start;
    if (pmt_name_parse(r->name, &nm, NULL, 0) < 0)
        return add(gs, "(bad name)", dur, gpu);
    if (nm.kind == PMT_K_OTHER)
        return add(gs, "(other)", dur, gpu);
    const char *k = pmt_kind_name(nm.kind);
    int rc = add(gs, k, dur, gpu);
    if (nm.mode[0]) {
        snprintf(key, sizeof key, "%s mode=%s", k, nm.mode);
        rc |= add(gs, key, dur, gpu);
    }
    if (PMT_HAS(&nm, SHARD)) {
        const pmt_attr *shard = &nm.attr[PM__KEY_SHARD], *layers = &nm.attr[PM__KEY_LAYERS];
        snprintf(key, sizeof key, "%s shard=%llu", k, (unsigned long long)shard->u);
        rc |= add(gs, key, dur, gpu);
        if (PMT_HAS(&nm, LAYERS)) {
            snprintf(key, sizeof key, "%s shard=%llu layers=%llu-%llu", k,
                     (unsigned long long)shard->u, (unsigned long long)layers->u,
                     (unsigned long long)layers->last);
            rc |= add(gs, key, dur, gpu);
        }
    }
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_group(const void *a, const void *b)
{
    return strcmp(((const group *)a)->key, ((const group *)b)->key);
}

static uint64_t pct(const uint64_t *sorted, size_t n, unsigned p)
{
    size_t rank = (n * p + 99) / 100; /* ceil(n * p / 100), 1-based */
    return sorted[rank ? rank - 1 : 0];
}

static void print_group(const group *g, uint64_t wall, uint64_t gpu_total, int json, FILE *f)
{
    uint64_t p50 = pct(g->dur, g->n, 50), p99 = pct(g->dur, g->n, 99);
    double share = wall ? (double)g->total / (double)wall : 0;
    double gshare = gpu_total ? (double)g->gpu / (double)gpu_total : 0;
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
    fprintf(f, "%-40s %7zu %11.3f %10.3f %10.3f %10.3f %6.1f%%", g->key, g->n, g->total / 1e6,
            (double)g->total / (double)g->n / 1e3, p50 / 1e3, p99 / 1e3, share * 100);
    if (gpu_total)
        fprintf(f, " %11.3f %6.1f%%", g->gpu / 1e6, gshare * 100);
    fputc('\n', f);
}

static void print_footer(uint64_t wall, const pmt_projection *p, int json, FILE *f)
{
    double unc = p && p->total_ns ? (double)p->uncovered_ns / (double)p->total_ns : 0;
    if (json) {
        fprintf(f, "{\"wall_ns\":%llu", (unsigned long long)wall);
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
    fprintf(f, "wall span: %.3f ms\n", wall / 1e6);
    if (p)
        fprintf(f, "GPU: %zu activities, %.3f ms; launch found for %zu; outside every phase: "
                   "%.3f ms (%.1f%% of GPU time)\n",
                p->nact, p->total_ns / 1e6, p->nmatched, p->uncovered_ns / 1e6, unc * 100);
}

int pmt_report(const pmt_trace *t, const pmt_projection *p, const pmt_report_opts *o, FILE *f)
{
    groups gs = {0};
    uint64_t t0 = UINT64_MAX, t1 = 0;
    int rc = 0;
    for (size_t i = 0; i < t->n && rc == 0; i++) {
        const pmt_range *r = &t->r[i];
        if ((r->flags & (PMT_F_OPEN | PMT_F_ORPHAN | PMT_F_MARK)) || r->start > r->end)
            continue;
        t0 = r->start < t0 ? r->start : t0;
        t1 = r->end > t1 ? r->end : t1;
        rc = classify(&gs, r, p ? p->range_gpu_ns[i] : 0);
    }
    uint64_t wall = t1 > t0 ? t1 - t0 : 0;
    uint64_t gpu_total = p ? p->total_ns : 0;
    if (gs.n)
        qsort(gs.g, gs.n, sizeof *gs.g, cmp_group);
    if (!o->json) {
        fprintf(f, "%-40s %7s %11s %10s %10s %10s %7s", "group", "count", "total_ms", "mean_us",
                "p50_us", "p99_us", "share");
        if (gpu_total)
            fprintf(f, " %11s %7s", "gpu_ms", "gpu%");
        fputc('\n', f);
    }
    for (size_t i = 0; i < gs.n; i++) {
        qsort(gs.g[i].dur, gs.g[i].n, sizeof *gs.g[i].dur, cmp_u64);
        print_group(&gs.g[i], wall, gpu_total, o->json, f);
        free(gs.g[i].dur);
    }
    free(gs.g);
    print_footer(wall, p, o->json, f);
    return rc ? -1 : (ferror(f) ? -1 : 0);
}
