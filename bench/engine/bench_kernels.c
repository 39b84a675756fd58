/* bench_kernels — one thread's CPU matrix products per kernel set, side by
 * side: the row loop's matrix–vector product (llm_type_kernels.matvec) and,
 * for wide batches, the product the backend runs there (the set's batched
 * product on quantized activations, or rows to f32 in 256-row panels and
 * OpenBLAS sgemm on one thread, the set's gemm_nt in a build without it),
 * on one weight matrix per type.
 *
 *   bench_kernels [--sets avx2+vnni,avx512] [--types q8_0,f16,bf16,f32]
 *                 (also q2_K, q3_K, q4_K, q5_K, q6_K)
 *                 [--rows R] [--cols K] [--n 1,2,4,8,16,64] [--reps N]
 *                 [--wide-from W | --both] [--pages 4k,huge] [--clock wall|cpu]
 *
 * A repetition times every set once, in alternating order; each set keeps
 * its fastest repetition, which on a busy host is the one least disturbed.
 * One JSON line per (type, n, set): seconds per product, weight GB/s,
 * multiply-adds per second, and the ratio to the first set's time. The
 * default matrix (2048 x 2048) fits in L3, so this measures the kernels,
 * not the memory system; --rows 32000 gives a head-sized stream. A batch of
 * n rows takes the wide path from the backend's default thresholds (12
 * activation rows for quantized weights, 8 for float ones), or from W
 * rows for every type with --wide-from; --both times both paths of every
 * set at every n (alternating like the sets), to place the threshold.
 * --pages puts the weights on 4 KiB pages, on 2 MiB pages (anonymous
 * memory with MADV_NOHUGEPAGE / MADV_HUGEPAGE; Linux), or both, one copy
 * each, timed in alternation like the sets: with a head-sized matrix this
 * shows what the TLB costs a streaming kernel (under a VM's nested paging
 * the most of any single factor measured). Default: 4k. --clock cpu times
 * each product on the thread's CPU clock instead of the wall clock (on a
 * busy host that leaves out time spent descheduled; default wall).
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kernels.h"
#include "quant.h"

#if LLM_HAVE_OPENBLAS
#include <cblas.h>
#define GEMM_NAME "dequant+sgemm"
#else
#define GEMM_NAME "dequant+gemm_nt"
#endif

#define MAX_SETS 4
#define MAX_NS 8
#define MAX_N 64

typedef struct opts {
    char sets[MAX_SETS][16];
    int n_sets;
    char types[64];
    int64_t rows, cols;
    int ns[MAX_NS], n_ns, reps;
    int wide_from; /* 0: the backend's defaults */
    int both;      /* 1: both paths at every n */
    int pages[2], n_pages; /* 0: 4 KiB, 1: 2 MiB */
    int cpu_clock;         /* 1: the thread's CPU time, not wall time */
} opts;

/* Seconds on the wall clock, or on this thread's CPU clock: a product
 * runs on one thread, so its CPU time leaves out the time it spent
 * descheduled on a busy host (a stall on memory still counts). */
static double now_s(int cpu_clock)
{
    struct timespec ts;
    clock_gettime(cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The set named `name` built up from the scalar one; -1 when the CPU
 * cannot run it or no set has that name. */
static int make_set(const char *name, llm_kernels *k)
{
    llm_kernels_scalar(k);
    if (strcmp(name, "scalar") == 0)
        return 0;
    if (llm_kernels_avx2(k) != 0)
        return -1;
    if (strcmp(name, "avx2") == 0)
        return 0;
    if (llm_kernels_vnni(k) != 0)
        return -1;
    if (strcmp(name, "avx2+vnni") == 0)
        return 0;
    if (llm_kernels_avx512(k) != 0)
        return -1;
    return strcmp(name, "avx512") == 0 ? 0 : -1;
}

static int listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        p += len + (e ? 1 : 0);
    }
    return 0;
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_list(const char *s, int *out, int max, int lo, int hi, int *count)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", s);
    *count = 0;
    for (char *p = buf; *p;) {
        char *e = strchr(p, ',');
        int64_t v;
        if (e)
            *e = '\0';
        if (*count == max || parse_i64(p, lo, hi, &v))
            return -1;
        out[(*count)++] = (int)v;
        if (!e)
            break;
        p = e + 1;
    }
    return *count ? 0 : -1;
}

static int parse_sets(const char *s, opts *o)
{
    o->n_sets = 0;
    for (const char *p = s; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (o->n_sets == MAX_SETS || len == 0 || len >= sizeof o->sets[0])
            return -1;
        snprintf(o->sets[o->n_sets++], sizeof o->sets[0], "%.*s", (int)len, p);
        p += len + (e ? 1 : 0);
    }
    return o->n_sets ? 0 : -1;
}

static int parse_pages(const char *s, opts *o)
{
    o->n_pages = 0;
    if (listed(s, "4k"))
        o->pages[o->n_pages++] = 0;
    if (listed(s, "huge"))
        o->pages[o->n_pages++] = 1;
    return o->n_pages && (size_t)o->n_pages == 1 + (strchr(s, ',') != NULL) ? 0 : -1;
}

static int parse_opts(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->pages[0] = 0;
    o->n_pages = 1;
    parse_sets("avx2+vnni,avx512", o);
    snprintf(o->types, sizeof o->types, "q8_0,f16,bf16,f32");
    o->rows = 2048;
    o->cols = 2048;
    parse_list("1,2,4,8,16,64", o->ns, MAX_NS, 1, MAX_N, &o->n_ns);
    o->reps = 20;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
        if (!v && strcmp(a, "--both") != 0)
            return -1;
        i++;
        if (!strcmp(a, "--sets")) { if (parse_sets(v, o)) return -1; }
        else if (!strcmp(a, "--types")) snprintf(o->types, sizeof o->types, "%s", v);
        else if (!strcmp(a, "--rows")) { if (parse_i64(v, 16, 1 << 20, &o->rows)) return -1; }
        else if (!strcmp(a, "--cols")) {
            if (parse_i64(v, 256, 1 << 16, &x) || x % 256)
                return -1;
            o->cols = x;
        } else if (!strcmp(a, "--n")) { if (parse_list(v, o->ns, MAX_NS, 1, MAX_N, &o->n_ns)) return -1; }
        else if (!strcmp(a, "--reps")) { if (parse_i64(v, 1, 100000, &x)) return -1; o->reps = (int)x; }
        else if (!strcmp(a, "--both")) { o->both = 1; i--; }
        else if (!strcmp(a, "--wide-from")) { if (parse_i64(v, 1, MAX_N, &x)) return -1; o->wide_from = (int)x; }
        else if (!strcmp(a, "--pages")) { if (parse_pages(v, o)) return -1; }
        else if (!strcmp(a, "--clock") && !strcmp(v, "wall")) o->cpu_clock = 0;
        else if (!strcmp(a, "--clock") && !strcmp(v, "cpu")) o->cpu_clock = 1;
        else return -1;
    }
    return 0;
}

/* Buffers for one type's products; all owned here. */
typedef struct bufs {
    unsigned char *w;       /* the weights on pages[0]'s page size */
    unsigned char *wp[2];   /* [page kind]: 4 KiB, 2 MiB (NULL: not asked) */
    size_t wp_len;
    float *x, *y, *panel;
    llm_acts_scratch s;
} bufs;

/* One product of w (rows x cols) with n activation rows as the backend
 * would run it at width n under kernel set k (wide: from the set's gemm
 * threshold on). */
static void product(const llm_kernels *k, const llm_type_kernels *kt, const opts *o, size_t rb,
                    int32_t n, int wide, bufs *b)
{
    llm_acts a = {n, o->cols, b->x, NULL, NULL, NULL, NULL, NULL, NULL};
    if (kt->acts_q8)
        llm_acts_quantize(k, b->x, n, o->cols, &b->s, &a);
    if (!wide || kt->batched) {
        (wide ? kt->batched : kt->matvec)(b->w, rb, o->rows, &a, b->y, o->rows);
        return;
    }
    /* rows to f32 a 256-row panel at a time, then the set's own product */
    for (int64_t r = 0; r < o->rows; r += 256) {
        int64_t nr = o->rows - r < 256 ? o->rows - r : 256;
        const float *wp = (const float *)(const void *)(b->w + (size_t)r * rb);
        if (!kt->rows_f32) {
            kt->dequant(b->w + (size_t)r * rb, b->panel, (size_t)(nr * o->cols));
            wp = b->panel;
        }
#if LLM_HAVE_OPENBLAS
        (void)k;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, (int)nr, (int)o->cols, 1.0f, b->x,
                    (int)o->cols, wp, (int)o->cols, 0.0f, b->y + r, (int)o->rows);
#else
        k->gemm_nt(n, nr, o->cols, b->x, o->cols, wp, o->cols, b->y + r, o->rows);
#endif
    }
}

static int bench_type(uint32_t type, const char *tname, const opts *o, llm_kernels *sets,
                      int n_sets, bufs *b)
{
    uint64_t rb64;
    if (llm_type_row_bytes(type, (uint64_t)o->cols, &rb64) != 0)
        return -1;
    size_t rb = (size_t)rb64;
    float *row = malloc(sizeof(float) * (size_t)o->cols);
    if (!row)
        return -1;
    uint64_t rng = 0x243F6A8885A308D3ull;
    for (int64_t r = 0; r < o->rows; r++) {
        for (int64_t i = 0; i < o->cols; i++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            row[i] = (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        }
        llm_quantize_row(type, row, b->w + (size_t)r * rb, (size_t)o->cols);
    }
    free(row);
    for (int p = 0; p < 2; p++)
        if (b->wp[p] && b->wp[p] != b->w)
            memcpy(b->wp[p], b->w, (size_t)o->rows * rb);
    for (int ni = 0; ni < o->n_ns; ni++) {
        int32_t n = o->ns[ni];
        int wide = n >= (o->wide_from ? o->wide_from
                                      : llm_kernels_find(&sets[0], type)->acts_q8 ? 12 : 8);
        /* variants: (set, path, pages) triples, timed in turn */
        int vs[4 * MAX_SETS], vw[4 * MAX_SETS], vp[4 * MAX_SETS], nv = 0;
        for (int s = 0; s < n_sets; s++)
            for (int w = 0; w < 2; w++)
                for (int p = 0; p < o->n_pages; p++)
                    if (o->both ? 1 : w == wide) {
                        vs[nv] = s;
                        vw[nv] = w;
                        vp[nv++] = o->pages[p];
                    }
        double best[4 * MAX_SETS];
        unsigned char *home = b->w;
        for (int v = 0; v < nv; v++) {
            best[v] = 1e30;
            b->w = b->wp[vp[v]];
            product(&sets[vs[v]], llm_kernels_find(&sets[vs[v]], type), o, rb, n, vw[v], b);
        }
        for (int rep = 0; rep < o->reps; rep++)
            for (int i = 0; i < nv; i++) {
                int v = rep % 2 ? nv - 1 - i : i;
                b->w = b->wp[vp[v]];
                double t0 = now_s(o->cpu_clock);
                product(&sets[vs[v]], llm_kernels_find(&sets[vs[v]], type), o, rb, n, vw[v], b);
                double dt = now_s(o->cpu_clock) - t0;
                if (dt < best[v])
                    best[v] = dt;
            }
        b->w = home;
        for (int v = 0; v < nv; v++) {
            const llm_type_kernels *kt = llm_kernels_find(&sets[vs[v]], type);
            double macs = (double)o->rows * (double)o->cols * n;
            printf("{\"bench\":\"kernels\",\"type\":\"%s\",\"set\":\"%s\",\"rows\":%lld,\"cols\":%lld,"
                   "\"n\":%d,\"path\":\"%s\",\"pages\":\"%s\",\"reps\":%d,\"seconds\":%.6e,"
                   "\"clock\":\"%s\",\"weight_GBps\":%.3f,\"GMACps\":%.3f,\"time_vs_first\":%.3f}\n",
                   tname, sets[vs[v]].name, (long long)o->rows, (long long)o->cols, (int)n,
                   !vw[v] ? "matvec" : kt->batched ? "batched" : GEMM_NAME,
                   vp[v] ? "huge" : "4k", o->reps, best[v], o->cpu_clock ? "cpu" : "wall",
                   (double)rb * (double)o->rows / best[v] / 1e9, macs / best[v] / 1e9,
                   best[v] / best[0]);
        }
        fflush(stdout);
    }
    return 0;
}

/* Anonymous memory for the weights on 4 KiB (huge 0) or 2 MiB pages;
 * NULL when it cannot be mapped. Huge pages are advice: a kernel without
 * THP leaves 4 KiB ones (AnonHugePages in /proc/meminfo tells). */
static unsigned char *map_weights(size_t len, int huge)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
    (void)madvise(p, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#else
    (void)huge;
#endif
    return p;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse_opts(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: bench_kernels [--sets avx2+vnni,avx512] [--types q8_0,f16,bf16,f32] "
                        "[--rows R] [--cols K (multiple of 256)] [--n 1,2,4,8,16,64] [--reps N] "
                        "[--wide-from W | --both] [--pages 4k,huge] [--clock wall|cpu]\n");
        return 2;
    }
#if LLM_HAVE_OPENBLAS
    openblas_set_num_threads(1);
#endif
    llm_kernels sets[MAX_SETS];
    for (int s = 0; s < o.n_sets; s++)
        if (make_set(o.sets[s], &sets[s]) != 0) {
            fprintf(stderr, "bench_kernels: this CPU cannot run kernel set '%s' (or no set has "
                            "that name)\n", o.sets[s]);
            return 1;
        }
    size_t w = (size_t)o.cols, rows = (size_t)o.rows;
    bufs b;
    b.wp_len = rows * w * 4;
    b.wp[0] = b.wp[1] = NULL;
    for (int p = 0; p < o.n_pages; p++)
        b.wp[o.pages[p]] = map_weights(b.wp_len, o.pages[p]);
    b.w = b.wp[o.pages[0]];
    b.x = malloc(sizeof(float) * MAX_N * w);
    b.y = malloc(sizeof(float) * MAX_N * rows);
    b.panel = malloc(sizeof(float) * 256 * w);
    b.s.d = malloc(sizeof(float) * MAX_N * w / 32);
    b.s.q = malloc(MAX_N * w);
    b.s.dt = calloc(MAX_N * w / 32 + 8, sizeof(float));
    b.s.qb = malloc(MAX_N * w);
    b.s.xbias = malloc(sizeof(int32_t) * MAX_N * w / 4);
    b.s.xsum = malloc(sizeof(int32_t) * MAX_N * w / 32);
    int rc = 0;
    if (!b.w || (o.n_pages > 1 && !b.wp[o.pages[1]]) || !b.x || !b.y || !b.panel || !b.s.d || !b.s.q || !b.s.dt || !b.s.qb ||
        !b.s.xbias || !b.s.xsum) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        rc = 1;
    }
    for (size_t i = 0; rc == 0 && i < MAX_N * w; i++)
        b.x[i] = (float)((int)(i * 7919 % 201) - 100) / 50.0f;
    static const struct {
        const char *name;
        uint32_t type;
    } types[] = {{"q8_0", LLM_TYPE_Q8_0}, {"f16", LLM_TYPE_F16}, {"bf16", LLM_TYPE_BF16},
                 {"f32", LLM_TYPE_F32}, {"q4_K", LLM_TYPE_Q4_K}, {"q5_K", LLM_TYPE_Q5_K},
                 {"q6_K", LLM_TYPE_Q6_K}, {"q2_K", LLM_TYPE_Q2_K}, {"q3_K", LLM_TYPE_Q3_K}};
    for (size_t t = 0; rc == 0 && t < sizeof types / sizeof types[0]; t++)
        if (listed(o.types, types[t].name) &&
            bench_type(types[t].type, types[t].name, &o, sets, o.n_sets, &b) != 0)
            rc = 1;
    for (int p = 0; p < 2; p++)
        if (b.wp[p])
            munmap(b.wp[p], b.wp_len);
    free(b.x);
    free(b.y);
    free(b.panel);
    free(b.s.d);
    free(b.s.q);
    free(b.s.dt);
    free(b.s.qb);
    free(b.s.xbias);
    free(b.s.xsum);
    return rc;
}
