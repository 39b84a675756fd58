/* bench_gemm — one thread's batched float product, the way the CPU
 * backend's prefill runs it (gemm_worker: 256 weight rows a call, all
 * activation rows at once), per implementation, side by side:
 *   sgemm        OpenBLAS sgemm on f32 rows (builds with OpenBLAS; its
 *                core is printed, the one choose_blas weighs);
 *   f16 sgemm    F16 rows dequantized a panel at a time, then sgemm;
 *   avx2         the avx2 sets' gemm_nt on f32 rows;
 *   avx512       the avx512 set's gemm_nt on f32 rows;
 *   avx512 f16   the avx512 F16 entry's gemm, packing the 16-bit rows.
 * A repetition times every variant once, in alternating order; each keeps
 * its fastest repetition. One JSON line per (k, variant): GFLOPS and the
 * time relative to the first variant. The matrix (--rows x k) is walked
 * panel by panel like a model's, so with the defaults (2048 rows) its
 * 6-64 MiB of f32 mostly come from memory or L3, not L2.
 *
 *   bench_gemm [--n 512] [--k 768,2048,8192] [--rows 2048] [--reps 5]
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "quant.h"

#if LLM_HAVE_OPENBLAS
#include <cblas.h>
#endif

#define PANEL 256
#define MAX_KS 8

enum { V_SGEMM, V_SGEMM_F16, V_AVX2, V_AVX512, V_AVX512_F16, N_VARIANTS };
static const char *const variant_name[N_VARIANTS] = {"sgemm", "f16 sgemm", "avx2", "avx512",
                                                     "avx512 f16"};

typedef struct bench {
    int64_t n, rows, k;
    float *x, *w, *y, *panel; /* [n][k], [rows][k], [n][rows], [PANEL][k] */
    uint16_t *h;              /* w as F16, [rows][k] */
    llm_kernels avx2, avx512;
    int have_avx512;
} bench;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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

/* A comma-separated list of k (16..65536) into ks; its length, or -1. */
static int parse_ks(const char *s, int64_t *ks)
{
    char buf[128];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", s);
    for (char *p = buf; *p; n++) {
        char *e = strchr(p, ',');
        if (e)
            *e = '\0';
        if (n == MAX_KS || parse_i64(p, 16, 65536, &ks[n]))
            return -1;
        if (!e)
            return n + 1;
        p = e + 1;
    }
    return n ? n : -1;
}

/* Whether variant v can run in this build on this CPU. */
static int runs(const bench *b, int v)
{
#if !LLM_HAVE_OPENBLAS
    if (v == V_SGEMM || v == V_SGEMM_F16)
        return 0;
#endif
    return v < V_AVX512 || b->have_avx512;
}

/* y [n][rows] = x [n][k] times w^T in 256-row panels, as variant v. */
static void product(bench *b, int v)
{
    const llm_type_kernels *f16 = llm_kernels_find(&b->avx512, LLM_TYPE_F16);
    for (int64_t r = 0; r < b->rows; r += PANEL) {
        int64_t nr = b->rows - r < PANEL ? b->rows - r : PANEL;
        const float *wp = b->w + r * b->k;
        float *y = b->y + r;
        switch (v) {
#if LLM_HAVE_OPENBLAS
        case V_SGEMM_F16:
            llm_dequantize_row(LLM_TYPE_F16, b->h + r * b->k, b->panel, (size_t)(nr * b->k));
            wp = b->panel;
            /* fall through */
        case V_SGEMM:
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b->n, (int)nr, (int)b->k,
                        1.0f, b->x, (int)b->k, wp, (int)b->k, 0.0f, y, (int)b->rows);
            break;
#endif
        case V_AVX2:
            b->avx2.gemm_nt(b->n, nr, b->k, b->x, b->k, wp, b->k, y, b->rows);
            break;
        case V_AVX512:
            b->avx512.gemm_nt(b->n, nr, b->k, b->x, b->k, wp, b->k, y, b->rows);
            break;
        case V_AVX512_F16:
            f16->gemm(b->h + r * b->k, (size_t)b->k * 2, nr, b->k, b->x, b->n, y, b->rows);
            break;
        default:
            break;
        }
    }
}

static void run_k(bench *b, int reps)
{
    uint64_t rng = 0x243F6A8885A308D3ull;
    for (int64_t i = 0; i < b->rows * b->k + b->n * b->k; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        float v = (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        if (i < b->rows * b->k)
            b->w[i] = v;
        else
            b->x[i - b->rows * b->k] = v;
    }
    llm_quantize_row(LLM_TYPE_F16, b->w, b->h, (size_t)(b->rows * b->k));
    double best[N_VARIANTS];
    for (int v = 0; v < N_VARIANTS; v++)
        best[v] = 1e30;
    for (int rep = 0; rep < reps; rep++)
        for (int i = 0; i < N_VARIANTS; i++) {
            int v = rep % 2 ? N_VARIANTS - 1 - i : i;
            if (!runs(b, v))
                continue;
            double t0 = now_s();
            product(b, v);
            double dt = now_s() - t0;
            best[v] = dt < best[v] ? dt : best[v];
        }
    double flops = 2.0 * (double)b->n * (double)b->rows * (double)b->k, first = 0.0;
    for (int v = 0; v < N_VARIANTS; v++) {
        if (!runs(b, v))
            continue;
        first = first > 0.0 ? first : best[v];
        printf("{\"bench\":\"gemm\",\"variant\":\"%s\",\"n\":%lld,\"rows\":%lld,\"k\":%lld,"
               "\"reps\":%d,\"seconds\":%.6e,\"GFLOPS\":%.1f,\"time_vs_first\":%.3f}\n",
               variant_name[v], (long long)b->n, (long long)b->rows, (long long)b->k, reps,
               best[v], flops / best[v] * 1e-9, best[v] / first);
    }
    fflush(stdout);
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_gemm [--n 512] [--k 768,2048,8192] [--rows 2048] [--reps 5]\n");
    return 2;
}

int main(int argc, char **argv)
{
    int64_t ks[MAX_KS] = {768, 2048, 8192}, reps = 5;
    int n_ks = 3;
    bench b;
    memset(&b, 0, sizeof b);
    b.n = 512;
    b.rows = 2048;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        }
        if (!v)
            return usage();
        if (!strcmp(a, "--n")) { if (parse_i64(v, 1, 8192, &b.n)) return usage(); }
        else if (!strcmp(a, "--rows")) { if (parse_i64(v, 1, 1 << 20, &b.rows)) return usage(); }
        else if (!strcmp(a, "--reps")) { if (parse_i64(v, 1, 1000, &reps)) return usage(); }
        else if (!strcmp(a, "--k")) { if ((n_ks = parse_ks(v, ks)) < 0) return usage(); }
        else return usage();
    }
    llm_kernels_scalar(&b.avx2);
    if (llm_kernels_avx2(&b.avx2) != 0) {
        fprintf(stderr, "bench_gemm: this CPU cannot run the avx2 kernels\n");
        return 1;
    }
    b.avx512 = b.avx2;
    b.have_avx512 = llm_kernels_vnni(&b.avx512) == 0 && llm_kernels_avx512(&b.avx512) == 0;
#if LLM_HAVE_OPENBLAS
    openblas_set_num_threads(1);
    fprintf(stderr, "bench_gemm: OpenBLAS core %s\n", openblas_get_corename());
#endif
    int64_t kmax = 0;
    for (int i = 0; i < n_ks; i++)
        kmax = ks[i] > kmax ? ks[i] : kmax;
    b.x = malloc(sizeof(float) * (size_t)(b.n * kmax));
    b.w = malloc(sizeof(float) * (size_t)(b.rows * kmax));
    b.y = malloc(sizeof(float) * (size_t)(b.n * b.rows));
    b.panel = malloc(sizeof(float) * (size_t)(PANEL * kmax));
    b.h = malloc(sizeof(uint16_t) * (size_t)(b.rows * kmax));
    int rc = 0;
    if (!b.x || !b.w || !b.y || !b.panel || !b.h) {
        fprintf(stderr, "bench_gemm: out of memory\n");
        rc = 1;
    }
    for (int i = 0; rc == 0 && i < n_ks; i++) {
        b.k = ks[i];
        run_k(&b, (int)reps);
    }
    free(b.x);
    free(b.w);
    free(b.y);
    free(b.panel);
    free(b.h);
    return rc;
}
