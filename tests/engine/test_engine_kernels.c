/* test_engine_kernels — the CPU kernels against definitions computed here
 * in double, and the AVX2 set against the scalar set:
 *   - dot products for f32/f16/bf16 rows (lengths with SIMD tails);
 *   - q8_0/q4_0 rows times a quantized activation: the exact integer sums
 *     scaled per block;
 *   - the activation quantizer: scale = max|x|/127 and round-half-even,
 *     bit-identical between the two sets;
 *   - the NT matrix product and panel dequantization of the batched path;
 *   - the thread pool's slices cover 0..n exactly once;
 *   - its owned claims: each thread takes its own contiguous part front to
 *     back, then what is left of the others in turn, and across a run
 *     every unit is claimed exactly once whatever the interleaving.
 * When the CPU lacks AVX2 the SIMD comparisons are reported and skipped;
 * the scalar checks still run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "pool.h"
#include "pm_check.h"
#include "quant.h"

static uint64_t rng = 88172645463325252ull;

static double uni(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static double half(uint16_t h)
{
    int e = (h >> 10) & 31, f = h & 1023;
    double v = e ? ldexp(1024 + f, e - 25) : ldexp(f, -24);
    return h >> 15 ? -v : v;
}

/* Relative closeness for sums of n products of unit-sized terms. */
static void check_close(double got, double want, int64_t n, const char *what)
{
    double tol = 1e-5 * sqrt((double)n) * (1.0 + fabs(want));
    if (fabs(got - want) > tol)
        fprintf(stderr, "%s n=%lld: %.9g vs %.9g\n", what, (long long)n, got, want);
    CHECK(fabs(got - want) <= tol);
}

static void test_float_dots(const llm_kernels *k)
{
    int64_t lens[] = {1, 7, 8, 31, 32, 75, 256, 1000};
    static float w[1000], x[1000];
    static uint16_t h[1000], b[1000];
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        int64_t n = lens[li];
        double sf = 0, sh = 0, sb = 0;
        for (int64_t i = 0; i < n; i++) {
            w[i] = (float)uni();
            x[i] = (float)uni();
            h[i] = llm_f32_to_fp16(w[i]);
            b[i] = llm_f32_to_bf16(w[i]);
            uint32_t u = (uint32_t)b[i] << 16;
            float bf;
            memcpy(&bf, &u, 4);
            sf += (double)w[i] * x[i];
            sh += half(h[i]) * x[i];
            sb += (double)bf * x[i];
        }
        check_close(k->dot_f32(w, x, n), sf, n, "dot_f32");
        check_close(k->dot(w, x, n), sf, n, "dot");
        check_close(k->dot_f16(h, x, n), sh, n, "dot_f16");
        check_close(k->dot_bf16(b, x, n), sb, n, "dot_bf16");
        static float y[1000];
        for (int64_t i = 0; i < n; i++)
            y[i] = 1.0f;
        k->axpy(y, 0.5f, x, n);
        for (int64_t i = 0; i < n; i++)
            CHECK_NEAR(y[i], 1.0 + 0.5 * x[i], 1e-6);
    }
}

/* Quantized rows: the expectation uses the dequantized block values and
 * the quantized activation exactly as the kernel sees them. */
static void test_quant_dots(const llm_kernels *k)
{
    enum { N = 512, NB = N / 32 };
    static float w[N], x[N], xd[NB];
    static int8_t xq[N];
    static unsigned char q8[NB * 34], q4[NB * 18];
    for (int i = 0; i < N; i++) {
        w[i] = (float)uni();
        x[i] = (float)(3.0 * uni());
    }
    w[5] = 0; /* an all-zero block must not poison the sum */
    for (int i = 64; i < 96; i++)
        w[i] = 0;
    llm_quantize_row(LLM_TYPE_Q8_0, w, q8, N);
    llm_quantize_row(LLM_TYPE_Q4_0, w, q4, N);
    k->quantize_row(x, N, xd, xq);
    llm_qrow xr = {xd, xq};
    double s8 = 0, s4 = 0;
    for (int b = 0; b < NB; b++) {
        const unsigned char *b8 = q8 + 34 * b, *b4 = q4 + 18 * b;
        double d8 = half((uint16_t)(b8[0] | b8[1] << 8)), d4 = half((uint16_t)(b4[0] | b4[1] << 8));
        long a8 = 0, a4 = 0;
        for (int j = 0; j < 32; j++)
            a8 += (long)(int8_t)b8[2 + j] * xq[32 * b + j];
        for (int j = 0; j < 16; j++) {
            a4 += (long)((b4[2 + j] & 15) - 8) * xq[32 * b + j];
            a4 += (long)((b4[2 + j] >> 4) - 8) * xq[32 * b + j + 16];
        }
        s8 += d8 * xd[b] * a8;
        s4 += d4 * xd[b] * a4;
    }
    check_close(k->dot_q8_0(q8, &xr, N), s8, N, "dot_q8_0");
    check_close(k->dot_q4_0(q4, &xr, N), s4, N, "dot_q4_0");
}

static void test_quantizer(const llm_kernels *k)
{
    enum { N = 96 };
    float x[N], d[N / 32];
    int8_t q[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(10.0 * uni());
    for (int i = 32; i < 64; i++)
        x[i] = 0; /* zero block: scale 0, quants 0 */
    x[70] = 127.0f;
    x[71] = 0.5f;  /* exactly half a step at scale 1: rounds to even 0 */
    x[72] = 1.5f;  /* rounds to 2 */
    x[73] = -2.5f; /* rounds to -2 */
    k->quantize_row(x, N, d, q);
    CHECK(d[1] == 0.0f);
    for (int i = 32; i < 64; i++)
        CHECK_INT_EQ(q[i], 0);
    CHECK(d[2] == 1.0f);
    CHECK_INT_EQ(q[70], 127);
    CHECK_INT_EQ(q[71], 0);
    CHECK_INT_EQ(q[72], 2);
    CHECK_INT_EQ(q[73], -2);
    for (int b = 0; b < N / 32; b++)
        for (int j = 0; j < 32; j++) {
            float v = x[32 * b + j];
            double want = d[b] > 0 ? nearbyint(v * (1.0f / d[b])) : 0;
            CHECK_INT_EQ(q[32 * b + j], (long)want);
        }
}

/* Both sets quantize identically (the engine's decode must not depend on
 * which set the CPU picked beyond f32 summation order). */
static void test_sets_agree(const llm_kernels *a, const llm_kernels *b)
{
    enum { N = 1024 };
    static float x[N], da[N / 32], db[N / 32];
    static int8_t qa[N], qb[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(uni() * (i % 7 + 1));
    a->quantize_row(x, N, da, qa);
    b->quantize_row(x, N, db, qb);
    CHECK(memcmp(da, db, sizeof da) == 0);
    CHECK(memcmp(qa, qb, sizeof qa) == 0);
}

/* gemm_nt against double sums, on shapes with every kind of edge: rows not
 * a multiple of the 3x4 tile, k not a multiple of 8 and k spanning more
 * than one cache block. */
static void test_gemm(const llm_kernels *k)
{
    int64_t shapes[][3] = {{1, 1, 1}, {7, 10, 77}, {3, 4, 8}, {5, 9, 2100}, {12, 8, 64}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t n = shapes[si][0], m = shapes[si][1], kk = shapes[si][2];
        int64_t ldx = kk + 3, ldw = kk + 5, ldy = m + 2;
        float *x = malloc(sizeof(float) * (size_t)(n * ldx));
        float *w = malloc(sizeof(float) * (size_t)(m * ldw));
        float *y = malloc(sizeof(float) * (size_t)(n * ldy));
        REQUIRE(x && w && y);
        for (int64_t i = 0; i < n * ldx; i++)
            x[i] = (float)uni();
        for (int64_t i = 0; i < m * ldw; i++)
            w[i] = (float)uni();
        for (int64_t i = 0; i < n * ldy; i++)
            y[i] = 1234.0f; /* must be overwritten, not accumulated into */
        k->gemm_nt(n, m, kk, x, ldx, w, ldw, y, ldy);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++) {
                double want = 0;
                for (int64_t t = 0; t < kk; t++)
                    want += (double)x[i * ldx + t] * w[j * ldw + t];
                check_close(y[i * ldy + j], want, kk, "gemm_nt");
            }
        free(x);
        free(w);
        free(y);
    }
}

/* The kernel set's dequantization equals the model-file code's, bit for
 * bit (both are exact: fp16 scale times an integer, or a widening; Q4_1 /
 * Q5_1's q*d + m rounds twice, in the same order on both sides). */
static void test_dequant(const llm_kernels *k)
{
    enum { N = 256 };
    static float src[N], want[N], got[N];
    static unsigned char buf[N * 4];
    uint32_t types[] = {LLM_TYPE_F16,  LLM_TYPE_BF16, LLM_TYPE_Q8_0, LLM_TYPE_Q4_0,
                        LLM_TYPE_F32,  LLM_TYPE_Q4_1, LLM_TYPE_Q5_0, LLM_TYPE_Q5_1};
    for (int i = 0; i < N; i++)
        src[i] = (float)(4.0 * uni());
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        llm_quantize_row(types[t], src, buf, N);
        llm_dequantize_row(types[t], buf, want, N);
        const llm_type_kernels *kt = llm_kernels_find(k, types[t]);
        REQUIRE(kt && kt->dequant);
        kt->dequant(buf, got, N);
        CHECK(memcmp(want, got, sizeof want) == 0);
    }
}

typedef struct cover {
    int hits[1000];
} cover;

static void mark_slice(void *ctx, int32_t ith, int32_t nth)
{
    cover *c = ctx;
    int64_t b, e;
    llm_pool_slice(1000, 16, ith, nth, &b, &e);
    for (int64_t i = b; i < e; i++)
        __atomic_fetch_add(&c->hits[i], 1, __ATOMIC_RELAXED);
}

static void test_pool(void)
{
    for (int32_t n = 1; n <= 4; n++) {
        llm_pool *p;
        REQUIRE(llm_pool_create(n, &p) == 0);
        CHECK_INT_EQ(llm_pool_threads(p), n);
        for (int round = 0; round < 50; round++) {
            cover c;
            memset(&c, 0, sizeof c);
            llm_pool_run(p, mark_slice, &c);
            for (int i = 0; i < 1000; i++)
                CHECK_INT_EQ(c.hits[i], 1);
        }
        llm_pool_free(p);
    }
    llm_pool *bad;
    CHECK(llm_pool_create(0, &bad) < 0 && bad == NULL);
    llm_pool_free(NULL);
}

/* Claims of thread ith until none is left, into out (at most cap). */
static int drain(llm_pool *p, int32_t ith, int64_t units, int32_t *visited, int64_t *out,
                 int cap)
{
    int n = 0;
    int64_t u;
    while (n < cap && llm_pool_owned_next(p, ith, units, visited, &u))
        out[n++] = u;
    return n;
}

/* The claim order, driven from one thread so that it is exact: parts of
 * 10 units over 3 threads are [0,3) [3,6) [6,10). */
static void test_owned_order(void)
{
    llm_pool *p;
    REQUIRE(llm_pool_create(3, &p) == 0);
    int64_t got[16];
    int32_t v0 = 0, v1 = 0, v2 = 0;
    int64_t u;
    /* Thread 1 takes two of its own units; thread 0 then drains: its own
     * part, the one unit left of part 1, all of part 2. */
    CHECK(llm_pool_owned_next(p, 1, 10, &v1, &u) == 1);
    CHECK_INT_EQ(u, 3);
    CHECK(llm_pool_owned_next(p, 1, 10, &v1, &u) == 1);
    CHECK_INT_EQ(u, 4);
    static const int64_t want0[] = {0, 1, 2, 5, 6, 7, 8, 9};
    CHECK_INT_EQ(drain(p, 0, 10, &v0, got, 16), 8);
    CHECK(memcmp(got, want0, sizeof want0) == 0);
    CHECK_INT_EQ(drain(p, 1, 10, &v1, got, 16), 0);
    CHECK_INT_EQ(drain(p, 2, 10, &v2, got, 16), 0);

    /* After a reset thread 2 steals from part 0 (2 + 1 wraps to 0). */
    llm_pool_owned_reset(p);
    v0 = v1 = v2 = 0;
    static const int64_t want2[] = {6, 7, 8, 9, 0, 1, 2, 3, 4, 5};
    CHECK_INT_EQ(drain(p, 2, 10, &v2, got, 16), 10);
    CHECK(memcmp(got, want2, sizeof want2) == 0);

    /* Fewer units than threads: part 0 is empty, so thread 0's first
     * claim is unit 0 of part 1 ([0,0) [0,1) [1,2)). */
    llm_pool_owned_reset(p);
    v0 = 0;
    static const int64_t want_small[] = {0, 1};
    CHECK_INT_EQ(drain(p, 0, 2, &v0, got, 16), 2);
    CHECK(memcmp(got, want_small, sizeof want_small) == 0);
    llm_pool_owned_reset(p);
    v0 = 0;
    CHECK_INT_EQ(drain(p, 0, 0, &v0, got, 16), 0);
    llm_pool_free(p);
}

typedef struct owned_cover {
    llm_pool *pool;
    int64_t units;
    int hits[1000];
} owned_cover;

static void mark_owned(void *ctx, int32_t ith, int32_t nth)
{
    owned_cover *c = ctx;
    int32_t visited = 0;
    int64_t u;
    (void)nth;
    while (llm_pool_owned_next(c->pool, ith, c->units, &visited, &u))
        __atomic_fetch_add(&c->hits[u], 1, __ATOMIC_RELAXED);
}

/* Every unit exactly once across real runs, for unit counts below, at and
 * above the thread count. */
static void test_owned_cover(void)
{
    static const int64_t counts[] = {0, 1, 3, 7, 96, 1000};
    for (int32_t n = 1; n <= 4; n++) {
        llm_pool *p;
        REQUIRE(llm_pool_create(n, &p) == 0);
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
            for (int round = 0; round < 20; round++) {
                owned_cover c;
                memset(&c, 0, sizeof c);
                c.pool = p;
                c.units = counts[k];
                llm_pool_owned_reset(p);
                llm_pool_run(p, mark_owned, &c);
                for (int64_t i = 0; i < 1000; i++)
                    CHECK_INT_EQ(c.hits[i], i < counts[k] ? 1 : 0);
            }
        llm_pool_free(p);
    }
}

int main(void)
{
    llm_kernels scalar, simd;
    llm_kernels_scalar(&scalar);
    test_float_dots(&scalar);
    test_quant_dots(&scalar);
    test_quantizer(&scalar);
    test_gemm(&scalar);
    test_dequant(&scalar);
    if (llm_kernels_avx2(&simd) == 0) {
        CHECK_STR_EQ(simd.name, "avx2");
        test_float_dots(&simd);
        test_quant_dots(&simd);
        test_quantizer(&simd);
        test_sets_agree(&scalar, &simd);
        test_gemm(&simd);
        test_dequant(&simd);
    } else {
        printf("AVX2 kernels unavailable on this CPU: scalar checks only\n");
    }
    test_pool();
    test_owned_order();
    test_owned_cover();
    return pm_check_result();
}
