/* test_engine_gemm512 — the avx512 set's batched float product
 * (kernels_gemm_avx512.c) and when the CPU backend runs it.
 *
 * Cases (one per ctest entry):
 *   n1, n5, n13, n512  gemm_nt with that many activation rows, for every
 *            m in {1, 17, 64} weight rows and k in {1, 15, 64, 1000}
 *            (none a multiple of the 6 x 64 tile or of the 128-deep
 *            blocks but 64; 1000 spans eight blocks), leading dimensions
 *            wider than the rows, against sums in double. Each result must
 *            lie within gamma_k * sum_t |x_t w_t| of the exact sum, gamma_k
 *            = k u / (1 - k u) with u = 2^-24: the bound of a sum of
 *            exactly computed products added one at a time in f32, which
 *            is what one FMA chain is. The padding between rows of y must
 *            stay untouched, and y is overwritten, never accumulated into.
 *   chain    every result bit for bit the chain y = fmaf(x_t, w_t, y) over
 *            t = 0..k-1 from 0, computed here with libm's fmaf, on shapes
 *            whose k crosses block boundaries, and so the same whether the
 *            rows and columns are computed in one call or in pieces (as
 *            the backend's threads split a matrix into panels);
 *   empty    k = 0 writes zeros; n = 0 or m = 0 writes nothing;
 *   f16, bf16  the F16 and BF16 entries' gemm, which pack the 16-bit rows
 *            themselves, bit for bit the chain (libm's fmaf) over the rows
 *            dequantized;
 *   choice   the backend's default product: the avx512 set's own where
 *            OpenBLAS runs no AVX-512 core, OpenBLAS where it runs one.
 * Hosts without the avx512 set skip (77).
 *
 * usage: test_engine_gemm512 n1|n5|n13|n512|chain|empty|f16|bf16|choice
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "kernels.h"
#include "phasemark/engine.h"
#include "pm_check.h"
#include "quant.h"

static uint64_t rng = 88172645463325252ull;

static float uni(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* The avx512 set, or a skip. */
static void avx512_set(llm_kernels *k)
{
    llm_kernels_scalar(k);
    if (llm_kernels_avx2(k) != 0 || llm_kernels_vnni(k) != 0 || llm_kernels_avx512(k) != 0)
        PM_SKIP("this CPU cannot run the avx512 kernels");
    REQUIRE(strcmp(k->name, "avx512") == 0);
}

/* n x ld random floats (malloc'd; the caller frees). */
static float *random_rows(int64_t n, int64_t ld)
{
    float *p = malloc(sizeof(float) * (size_t)(n * ld + 1));
    REQUIRE(p != NULL);
    for (int64_t i = 0; i < n * ld; i++)
        p[i] = uni();
    return p;
}

#define SENTINEL 1234.5f

/* One shape against double sums, as the header says. */
static void check_shape(const llm_kernels *kset, int64_t n, int64_t m, int64_t k)
{
    int64_t ldx = k + 3, ldw = k + 5, ldy = m + 2;
    float *x = random_rows(n, ldx), *w = random_rows(m, ldw);
    float *y = malloc(sizeof(float) * (size_t)(n * ldy));
    REQUIRE(y != NULL);
    for (int64_t i = 0; i < n * ldy; i++)
        y[i] = SENTINEL;
    kset->gemm_nt(n, m, k, x, ldx, w, ldw, y, ldy);
    const double u = ldexp(1.0, -24), gamma = (double)k * u / (1.0 - (double)k * u);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = 0; j < m; j++) {
            double want = 0.0, mag = 0.0;
            for (int64_t t = 0; t < k; t++) {
                double p = (double)x[i * ldx + t] * w[j * ldw + t]; /* exact */
                want += p;
                mag += fabs(p);
            }
            /* The double sum's own error is within k 2^-53 mag. */
            double tol = gamma * mag + (double)k * ldexp(1.0, -53) * mag;
            double got = y[i * ldy + j];
            if (!(fabs(got - want) <= tol) && bad++ < 5)
                fprintf(stderr, "n=%lld m=%lld k=%lld y[%lld][%lld] = %.9g, want %.9g +- %.3g\n",
                        (long long)n, (long long)m, (long long)k, (long long)i, (long long)j,
                        got, want, tol);
        }
        for (int64_t j = m; j < ldy; j++)
            if (y[i * ldy + j] != SENTINEL && bad++ < 5)
                fprintf(stderr, "n=%lld m=%lld k=%lld: padding y[%lld][%lld] written\n",
                        (long long)n, (long long)m, (long long)k, (long long)i, (long long)j);
    }
    CHECK_INT_EQ(bad, 0);
    free(x);
    free(w);
    free(y);
}

static void test_rows(const llm_kernels *kset, int64_t n)
{
    static const int64_t ms[] = {1, 17, 64}, ks[] = {1, 15, 64, 1000};
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++)
            check_shape(kset, n, ms[a], ks[b]);
}

/* The FMA chain of one result, in libm's correctly rounded fmaf. */
static float chain(const float *x, const float *w, int64_t k)
{
    float s = 0.0f;
    for (int64_t t = 0; t < k; t++)
        s = fmaf(x[t], w[t], s);
    return s;
}

static void test_chain(const llm_kernels *kset)
{
    static const int64_t shapes[][3] = {{13, 100, 300}, {7, 64, 129}, {19, 130, 257}, {1, 3, 2048}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t n = shapes[si][0], m = shapes[si][1], k = shapes[si][2];
        float *x = random_rows(n, k), *w = random_rows(m, k);
        float *y = malloc(sizeof(float) * (size_t)(n * m));
        float *parts = malloc(sizeof(float) * (size_t)(n * m));
        REQUIRE(y && parts);
        kset->gemm_nt(n, m, k, x, k, w, k, y, m);
        /* Pieces: rows one at a time and then the rest; columns split at 7
         * and at 7 + 64 (a panel boundary that is no tile boundary). */
        int64_t cuts[] = {0, 7 < m ? 7 : m, 71 < m ? 71 : m, m};
        for (int c = 0; c < 3; c++) {
            int64_t j0 = cuts[c], mj = cuts[c + 1] - j0;
            if (mj == 0)
                continue;
            kset->gemm_nt(1, mj, k, x, k, w + j0 * k, k, parts + j0, m);
            if (n > 1)
                kset->gemm_nt(n - 1, mj, k, x + k, k, w + j0 * k, k, parts + m + j0, m);
        }
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++) {
                float want = chain(x + i * k, w + j * k, k);
                if ((memcmp(&y[i * m + j], &want, sizeof want) != 0 ||
                     memcmp(&parts[i * m + j], &want, sizeof want) != 0) &&
                    bad++ < 5)
                    fprintf(stderr, "n=%lld m=%lld k=%lld y[%lld][%lld]: %.9g / %.9g, chain %.9g\n",
                            (long long)n, (long long)m, (long long)k, (long long)i,
                            (long long)j, y[i * m + j], parts[i * m + j], want);
            }
        CHECK_INT_EQ(bad, 0);
        free(x);
        free(w);
        free(y);
        free(parts);
    }
}

static void test_empty(const llm_kernels *kset)
{
    float x[4] = {1, 2, 3, 4}, w[4] = {5, 6, 7, 8}, y[6];
    for (int i = 0; i < 6; i++)
        y[i] = SENTINEL;
    kset->gemm_nt(2, 2, 0, x, 2, w, 2, y, 3); /* k = 0: every y 0, padding kept */
    CHECK(y[0] == 0.0f && y[1] == 0.0f && y[3] == 0.0f && y[4] == 0.0f);
    CHECK(y[2] == SENTINEL && y[5] == SENTINEL);
    for (int i = 0; i < 6; i++)
        y[i] = SENTINEL;
    kset->gemm_nt(0, 2, 2, x, 2, w, 2, y, 3);
    kset->gemm_nt(2, 0, 2, x, 2, w, 2, y, 3);
    for (int i = 0; i < 6; i++)
        CHECK(y[i] == SENTINEL);
}

/* type's gemm on its 16-bit rows against the FMA chain over the same rows
 * as f32 (which gemm_nt must equal too: `chain`). */
static void test_half(const llm_kernels *kset, uint32_t type)
{
    static const int64_t shapes[][3] = {{13, 17, 15}, {6, 64, 64}, {5, 100, 1000}, {512, 65, 144}};
    const llm_type_kernels *kt = llm_kernels_find(kset, type);
    REQUIRE(kt && kt->gemm);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t n = shapes[si][0], m = shapes[si][1], k = shapes[si][2];
        float *x = random_rows(n, k), *w = random_rows(m, k);
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(m * k));
        float *y = malloc(sizeof(float) * (size_t)(n * m)), *want = malloc(sizeof(float) * (size_t)(n * m));
        REQUIRE(h && y && want);
        llm_quantize_row(type, w, h, (size_t)(m * k));
        llm_dequantize_row(type, h, w, (size_t)(m * k));
        kt->gemm(h, (size_t)k * sizeof(uint16_t), m, k, x, n, y, m);
        /* The independent chain over the dequantized rows, not gemm_nt's
         * output: both are this file's code. */
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++)
                want[i * m + j] = chain(x + i * k, w + j * k, k);
        CHECK(memcmp(y, want, sizeof(float) * (size_t)(n * m)) == 0);
        free(x);
        free(w);
        free(h);
        free(y);
        free(want);
    }
}

/* The product a fresh backend runs (its llm_cpu_backend_gemm), and with
 * the product forced to OpenBLAS, the core OpenBLAS runs ("" when the
 * build has none). */
static void backend_gemm(const char *force, char *gemm, size_t cap, char *core, size_t ccap)
{
    if (force)
        setenv("PHASEMARK_ENGINE_GEMM", force, 1);
    else
        unsetenv("PHASEMARK_ENGINE_GEMM");
    unsetenv("PHASEMARK_ENGINE_KERNELS");
    llm_backend *be = NULL;
    char err[256] = "";
    REQUIRE(llm_cpu_backend_create(1, 1, &be, err, sizeof err) == 0);
    snprintf(gemm, cap, "%s", llm_cpu_backend_gemm(be));
    snprintf(core, ccap, "%s", llm_cpu_backend_blas_core(be));
    be->ops->destroy(be);
}

static void test_choice(void)
{
    char gemm[64], core[64], dflt[64], dcore[64];
    backend_gemm("blas", gemm, sizeof gemm, core, sizeof core);
    backend_gemm(NULL, dflt, sizeof dflt, dcore, sizeof dcore);
    int wide = strcmp(core, "SkylakeX") == 0 || strcmp(core, "Cooperlake") == 0 ||
               strcmp(core, "SapphireRapids") == 0;
    fprintf(stderr, "OpenBLAS core \"%s\"; default product %s\n", core, dflt);
    /* No OpenBLAS in the build: the forced one is ours too. */
    CHECK_STR_EQ(dflt, strcmp(gemm, "openblas") != 0 || !wide ? "avx512" : "openblas");
    backend_gemm("own", gemm, sizeof gemm, core, sizeof core);
    CHECK_STR_EQ(gemm, "avx512");
    CHECK_STR_EQ(core, "");
    unsetenv("PHASEMARK_ENGINE_GEMM");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_engine_gemm512 n1|n5|n13|n512|chain|empty|f16|bf16|choice\n");
        return 2;
    }
    llm_kernels k;
    avx512_set(&k);
    const char *c = argv[1];
    if (c[0] == 'n' && c[1] >= '1' && c[1] <= '9') {
        char *end;
        long n = strtol(c + 1, &end, 10);
        REQUIRE(*end == '\0' && n > 0 && n <= 4096);
        test_rows(&k, n);
    } else if (strcmp(c, "chain") == 0) {
        test_chain(&k);
    } else if (strcmp(c, "empty") == 0) {
        test_empty(&k);
    } else if (strcmp(c, "f16") == 0) {
        test_half(&k, LLM_TYPE_F16);
    } else if (strcmp(c, "bf16") == 0) {
        test_half(&k, LLM_TYPE_BF16);
    } else if (strcmp(c, "choice") == 0) {
        test_choice();
    } else {
        fprintf(stderr, "test_engine_gemm512: unknown case '%s'\n", c);
        return 2;
    }
    return pm_check_result();
}
