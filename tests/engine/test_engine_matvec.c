/* test_engine_matvec — the register-blocked matrix–vector kernels against
 * the single-row dot kernels of the same set, bit for bit.
 *
 * The CPU backend's row loop multiplies each weight row with up to
 * LLM_ACTS_MAX activation rows in one kernel call (kernels.h,
 * llm_matvec_fn). Greedy parity between a verify and the decodes it
 * replaces, and every golden token test, rest on those results being
 * exactly the single-row kernel's, so this test compares with memcmp, not
 * a tolerance, for every weight type, on odd shapes: rows that leave
 * partial row tiles, activation counts that leave partial groups (1..19),
 * odd block counts (one accumulator of the pair gets the last block),
 * float rows with SIMD tails, all-zero and extreme weight blocks, and an
 * output stride wider than the rows (columns outside stay untouched).
 * The attention kernel is held the same way to the loop it replaces: dot,
 * expf and axpy per cached position. The k-quants' and Q4_1/Q5_0/Q5_1's
 * products are held to the scalar set's bit for bit (check_kquants), but
 * for the avx512 set's k-quants, held to a tolerance (test_engine_kquant).
 *
 * The avx512 set promises more: its float and Q4_0 matrix–vector products
 * are bit for bit the avx2+vnni set's (check_same_as), and its Q8_0
 * products (matvec, batched, on panels) are held to the sequence of float
 * operations they document, written here in plain C with fmaf over exact
 * integer block sums (check_q8_chain); the panel layout is checked byte
 * for byte (check_panel_layout).
 *
 *   test_engine_matvec scalar|avx2|vnni|avx512
 *
 * A set the CPU lacks is skipped (exit 77).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "pm_check.h"
#include "quant.h"

#define MAX_N 19
#define SENTINEL 12345.0f

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static double uni(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

typedef struct case_buf {
    unsigned char *w;  /* [rows][row_bytes] */
    float *x;          /* [MAX_N][len] */
    float *y;          /* [MAX_N][ldy] */
    llm_acts_scratch s;
} case_buf;

/* The single-row kernel of k for a weight type: a float one (xq NULL) or
 * a quantized one. */
static float dot_one(const llm_kernels *k, uint32_t type, const void *row, const float *x,
                     const llm_qrow *xq, int64_t len)
{
    switch (type) {
    case LLM_TYPE_F32: return k->dot_f32(row, x, len);
    case LLM_TYPE_F16: return k->dot_f16(row, x, len);
    case LLM_TYPE_BF16: return k->dot_bf16(row, x, len);
    case LLM_TYPE_Q8_0: return k->dot_q8_0(row, xq, len);
    case LLM_TYPE_Q4_0: return k->dot_q4_0(row, xq, len);
    default: REQUIRE(0 && "a type with a single-row kernel"); return 0.0f;
    }
}

/* The blocked kernel from k's per-type table (every built-in type has one). */
static llm_matvec_fn matvec_of(const llm_kernels *k, uint32_t type)
{
    const llm_type_kernels *kt = llm_kernels_find(k, type);
    REQUIRE(kt && kt->matvec);
    return kt->matvec;
}

static int is_quant(const llm_kernels *k, uint32_t type)
{
    return llm_kernels_find(k, type)->acts_q8;
}

/* Weights with an all-zero row part, a block at full scale and a few huge
 * values, so every block shape the kernels special-case is met. */
static void fill_weights(uint32_t type, unsigned char *w, size_t row_bytes, int64_t rows,
                         int64_t len)
{
    float *row = malloc(sizeof(float) * (size_t)len);
    REQUIRE(row);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < len; i++)
            row[i] = (float)uni();
        if (r % 3 == 1)
            for (int64_t i = 0; i < len && i < 32; i++)
                row[i] = 0.0f; /* a zero block: scale 0 */
        if (r % 4 == 2)
            row[len - 1] = 100.0f; /* one element sets its block's scale */
        llm_quantize_row(type, row, w + (size_t)r * row_bytes, (size_t)len);
    }
    free(row);
}

static void check_case(const llm_kernels *k, uint32_t type, int64_t rows, int64_t len,
                       case_buf *b)
{
    uint64_t rb64;
    REQUIRE(llm_type_row_bytes(type, (uint64_t)len, &rb64) == 0);
    size_t row_bytes = (size_t)rb64;
    int64_t ldy = rows + 3;
    fill_weights(type, b->w, row_bytes, rows, len);
    for (int64_t i = 0; i < MAX_N * len; i++)
        b->x[i] = (float)(2.0 * uni()) * (i % 11 == 0 ? 8.0f : 1.0f);
    llm_matvec_fn mv = matvec_of(k, type);
    for (int32_t n = 1; n <= MAX_N; n++) {
        llm_acts a = {n, len, b->x, NULL, NULL, NULL, NULL, NULL, NULL};
        if (is_quant(k, type))
            llm_acts_quantize(k, b->x, n, len, &b->s, &a);
        for (int64_t i = 0; i < MAX_N * ldy; i++)
            b->y[i] = SENTINEL;
        mv(b->w, row_bytes, rows, &a, b->y, ldy);
        int bad = 0;
        for (int32_t t = 0; t < n; t++) {
            llm_qrow xq = {a.d + t * (len / 32), a.q + t * len};
            for (int64_t r = 0; r < rows; r++) {
                float want = dot_one(k, type, b->w + (size_t)r * row_bytes, b->x + t * len,
                                     is_quant(k, type) ? &xq : NULL, len);
                float got = b->y[t * ldy + r];
                if (memcmp(&got, &want, sizeof got) != 0 && bad++ < 3)
                    fprintf(stderr, "%s type %u rows %lld len %lld n %d: y[%d][%lld] = %.9g, "
                            "single-row kernel %.9g\n", k->name, (unsigned)type, (long long)rows,
                            (long long)len, (int)n, (int)t, (long long)r, got, want);
            }
            for (int64_t r = rows; r < ldy; r++)
                CHECK(b->y[t * ldy + r] == SENTINEL);
        }
        for (int64_t i = (int64_t)n * ldy; i < MAX_N * ldy; i++)
            CHECK(b->y[i] == SENTINEL);
        CHECK_INT_EQ(bad, 0);
    }
}

/* The layouts llm_acts_quantize derives agree with its row-major d and q. */
static void check_layouts(const llm_kernels *k, case_buf *b)
{
    enum { N = 5, LEN = 96, NB = LEN / 32 };
    llm_acts a;
    for (int i = 0; i < N * LEN; i++)
        b->x[i] = (float)(3.0 * uni());
    llm_acts_quantize(k, b->x, N, LEN, &b->s, &a);
    for (int t = 0; t < N; t++)
        for (int bl = 0; bl < NB; bl++) {
            CHECK(a.dt[bl * N + t] == a.d[t * NB + bl]);
            const int8_t *q = a.q + t * LEN + bl * 32;
            CHECK(memcmp(a.qb + (bl * N + t) * 32, q, 32) == 0);
            int32_t sum = 0;
            for (int g = 0; g < 8; g++) {
                CHECK_INT_EQ(a.xbias[(bl * N + t) * 8 + g],
                             -128 * (q[4 * g] + q[4 * g + 1] + q[4 * g + 2] + q[4 * g + 3]));
                sum += q[4 * g] + q[4 * g + 1] + q[4 * g + 2] + q[4 * g + 3];
            }
            CHECK_INT_EQ(a.xsum[t * NB + bl], -128 * sum);
        }
}

/* k->attend against the loop over k's dot and axpy, bitwise, for head widths
 * on and off its fast path and every causal length up to 70. */
static void check_attend(const llm_kernels *k)
{
    enum { MAX_HD = 128, MAX_LEN = 70, STRIDE = 3 * MAX_HD };
    static float q[MAX_HD], kc[MAX_LEN * STRIDE], vc[MAX_LEN * STRIDE];
    static float sc[MAX_LEN], want_sc[MAX_LEN], out[MAX_HD], want[MAX_HD];
    const int32_t hds[] = {64, 128, 48, 8};
    for (int i = 0; i < MAX_LEN * STRIDE; i++) {
        kc[i] = (float)uni();
        vc[i] = (float)uni();
    }
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
        int32_t hd = hds[hi];
        float scale = 1.0f / sqrtf((float)hd);
        for (int i = 0; i < hd; i++)
            q[i] = (float)(2.0 * uni());
        for (uint32_t len = 1; len <= MAX_LEN; len++) {
            const float *kk = kc + hd, *vv = vc + hd; /* a kv head past the first */
            float mx = -INFINITY;
            for (uint32_t p = 0; p < len; p++) {
                want_sc[p] = k->dot(q, kk + p * STRIDE, hd) * scale;
                mx = fmaxf(mx, want_sc[p]);
            }
            float sum = k->softmax_exp(want_sc, len, mx);
            memset(want, 0, sizeof want);
            for (uint32_t p = 0; p < len; p++)
                k->axpy(want, want_sc[p] / sum, vv + p * STRIDE, hd);
            k->attend(q, kk, vv, STRIDE, len, hd, scale, sc, out);
            if (memcmp(out, want, (size_t)hd * sizeof(float)) != 0) {
                fprintf(stderr, "%s attend hd %d len %u: out[0] %.9g, loop %.9g\n", k->name,
                        (int)hd, (unsigned)len, out[0], want[0]);
                CHECK(0);
            }
        }
    }
}

/* |got - want| within rel (relative) of a double-precision reference
 * (1e-30 absolute: where e^-g overflows a float, a SwiGLU gives -0 for a
 * true -1e-37), or both NaN, or the same infinity. */
static int near_ref(float got, double want, double rel)
{
    if (isnan(want))
        return isnan(got);
    if (isinf(want))
        return isinf(got) && (got > 0) == (want > 0);
    return fabs((double)got - want) <= rel * fabs(want) + 1e-30;
}

/* The set's exponentials (and sum of squares) against double precision: softmax_exp's e_p
 * within relative 1.5e-7 (libm's expf: 6.0e-8; the avx512 set's, swept
 * over [-87, 0]: 7.9e-8, and 2.3e-7 without its r^7 term) and exactly 1
 * at the maximum, its
 * sum within 1e-6 of the double sum; swiglu within 1e-6 over a sweep that
 * reaches past the float range of e^x (+-120), at zero, and at +-inf
 * (-inf gives NaN) and NaN; and swiglu elementwise: a range in three pieces is bitwise the
 * whole (the pool splits it anywhere). */
static void check_exponentials(const llm_kernels *k)
{
    enum { N = 301 };
    static float sc[N], x[N], g[N], up[N], g2[N];
    const uint32_t lens[] = {1, 15, 16, 17, 40, N};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        uint32_t len = lens[li];
        float mx = -INFINITY;
        for (uint32_t p = 0; p < len; p++) {
            x[p] = sc[p] = (float)(30.0 * uni()) - (p == len / 2 ? 0.0f : 40.0f);
            mx = fmaxf(mx, sc[p]);
        }
        double want_sum = 0.0;
        float sum = k->softmax_exp(sc, len, mx);
        for (uint32_t p = 0; p < len; p++) {
            double want = exp((double)(x[p] - mx));
            want_sum += want;
            if (!near_ref(sc[p], want, 1.5e-7)) {
                fprintf(stderr, "%s softmax_exp len %u: e[%u] %.9g, exp %.9g\n", k->name,
                        (unsigned)len, (unsigned)p, sc[p], want);
                CHECK(0);
            }
            if (x[p] == mx)
                CHECK(sc[p] == 1.0f);
        }
        CHECK(near_ref(sum, want_sum, 1e-6));
    }
    for (int i = 0; i < N; i++) {
        g[i] = (float)(-120.0 + 240.0 * i / (N - 1));
        up[i] = (float)(1.0 + uni());
    }
    g[0] = -INFINITY;
    g[1] = NAN;
    g[2] = 0.0f;
    g[3] = 1e-30f;
    g[N - 1] = INFINITY;
    memcpy(g2, g, sizeof g);
    k->swiglu(g, up, N);
    for (int i = 0; i < N; i++) {
        /* -inf / (1 + inf) is NaN, in every set as in the formula. */
        double gi = g2[i], want = isinf(gi) ? (gi > 0 ? INFINITY : NAN)
                                            : gi / (1.0 + exp(-gi)) * up[i];
        if (!near_ref(g[i], want, 1e-6)) {
            fprintf(stderr, "%s swiglu(%.9g) * %.9g: %.9g, want %.9g\n", k->name, gi,
                    (double)up[i], (double)g[i], want);
            CHECK(0);
        }
    }
    /* RMSNorm's sum of squares, where the set has its own: each square
     * exact in double, so only the sum's rounding differs from a long
     * double sum in index order (relative 1e-15 over 301 terms). */
    if (k->sum_squares)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            long double want = 0.0L;
            for (uint32_t p = 0; p < lens[li]; p++)
                want += (long double)up[p] * up[p];
            double got = k->sum_squares(up, lens[li]);
            if (fabs(got - (double)want) > 1e-15 * (double)want) {
                fprintf(stderr, "%s sum_squares n %u: %.17g, want %.17Lg\n", k->name,
                        (unsigned)lens[li], got, want);
                CHECK(0);
            }
        }
    memcpy(x, g2, sizeof g2);
    k->swiglu(x, up, 7);
    k->swiglu(x + 7, up + 7, 100);
    k->swiglu(x + 107, up + 107, N - 107);
    CHECK(memcmp(x, g, sizeof g) == 0);
}

/* The k-quants (kernels_k.c) and Q4_1, Q5_0, Q5_1 (kernels_legacy.c, rows
 * of 1, 3, 9 and 24 blocks: the AVX2 kernel's groups of eight and their
 * remainders): k's products bitwise the scalar set's, which
 * in turn agree with the reference dequantization (quant_k.c) dotted in
 * double with the dequantized activations (d * q): the integer
 * decomposition of each sub-block is exact, so only f32 rounding of the
 * per-block terms remains (relative 1e-5 of the sum of |terms|). */
static void check_kquants(const llm_kernels *k, case_buf *b)
{
    llm_kernels ref;
    llm_kernels_scalar(&ref);
    const uint32_t types[] = {LLM_TYPE_Q4_K, LLM_TYPE_Q5_K, LLM_TYPE_Q6_K, LLM_TYPE_Q2_K, LLM_TYPE_Q3_K,
                              LLM_TYPE_Q4_1, LLM_TYPE_Q5_0, LLM_TYPE_Q5_1};
    enum { N_K = 5 }; /* the k-quants come first */
    const int64_t k_lens[] = {256, 512, 768}, legacy_lens[] = {32, 96, 288, 768};
    float *wf = malloc(sizeof(float) * 768), *y2 = malloc(sizeof(float) * MAX_N * 64);
    REQUIRE(wf && y2);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t li = 0; li < (ti < N_K ? 3u : 4u); li++) {
            int64_t len = ti < N_K ? k_lens[li] : legacy_lens[li], rows = 13, ldy = rows + 3;
            uint64_t rb;
            REQUIRE(llm_type_row_bytes(types[ti], (uint64_t)len, &rb) == 0);
            fill_weights(types[ti], b->w, (size_t)rb, rows, len);
            for (int64_t i = 0; i < MAX_N * len; i++)
                b->x[i] = (float)(2.0 * uni()) * (i % 11 == 0 ? 8.0f : 1.0f);
            for (int32_t n = 1; n <= MAX_N; n += 6) {
                llm_acts a;
                llm_acts_quantize(k, b->x, n, len, &b->s, &a);
                matvec_of(k, types[ti])(b->w, (size_t)rb, rows, &a, b->y, ldy);
                matvec_of(&ref, types[ti])(b->w, (size_t)rb, rows, &a, y2, ldy);
                for (int32_t t = 0; t < n; t++)
                    for (int64_t r = 0; r < rows; r++) {
                        float got = b->y[t * ldy + r], want = y2[t * ldy + r];
                        /* The avx512 set's k-quants: a tolerance instead
                         * (test_engine_kquant); the legacy types stay AVX2. */
                        int exact = ti >= N_K || strcmp(k->name, "avx512") != 0;
                        if (exact && memcmp(&got, &want, sizeof got) != 0) {
                            fprintf(stderr, "%s %s len %lld n %d y[%d][%lld] %.9g, scalar %.9g\n", k->name,
                                    llm_type_name(types[ti]), (long long)len, (int)n, (int)t, (long long)r,
                                    got, want);
                            CHECK(0);
                        }
                        llm_dequantize_row(types[ti], b->w + (size_t)r * rb, wf, (size_t)len);
                        double sum = 0.0, mag = 0.0;
                        for (int64_t i = 0; i < len; i++) {
                            double xi = (double)a.d[t * (len / 32) + i / 32] * a.q[t * len + i];
                            sum += (double)wf[i] * xi;
                            mag += fabs((double)wf[i] * xi);
                        }
                        CHECK_NEAR(want, sum, 1e-5 * mag + 1e-6);
                        CHECK_NEAR(got, sum, 1e-5 * mag + 1e-6);
                    }
            }
        }
    free(wf);
    free(y2);
}

/* Every type's matrix–vector product of k against ref's, bit for bit, on
 * the shapes of check_case (k promises to be ref's arithmetic). */
static void check_same_as(const llm_kernels *k, const llm_kernels *ref, const uint32_t *types,
                          size_t n_types, case_buf *b)
{
    const int64_t lens[] = {32, 64, 96, 288, 544, 1, 15, 16, 17, 40, 300};
    const int64_t rows[] = {1, 3, 5, 13, 61};
    float *y2 = malloc(sizeof(float) * MAX_N * (61 + 3));
    REQUIRE(y2);
    for (size_t ti = 0; ti < n_types; ti++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            int64_t len = lens[li];
            if (is_quant(k, types[ti]) && len % 32 != 0)
                continue;
            for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
                uint64_t rb;
                int64_t nr = rows[ri], ldy = nr + 3;
                REQUIRE(llm_type_row_bytes(types[ti], (uint64_t)len, &rb) == 0);
                fill_weights(types[ti], b->w, (size_t)rb, nr, len);
                for (int64_t i = 0; i < MAX_N * len; i++)
                    b->x[i] = (float)(2.0 * uni()) * (i % 11 == 0 ? 8.0f : 1.0f);
                for (int32_t n = 1; n <= MAX_N; n += 3) {
                    llm_acts a = {n, len, b->x, NULL, NULL, NULL, NULL, NULL, NULL};
                    if (is_quant(k, types[ti]))
                        llm_acts_quantize(ref, b->x, n, len, &b->s, &a);
                    matvec_of(k, types[ti])(b->w, (size_t)rb, nr, &a, b->y, ldy);
                    matvec_of(ref, types[ti])(b->w, (size_t)rb, nr, &a, y2, ldy);
                    int bad = 0;
                    for (int32_t t = 0; t < n; t++)
                        for (int64_t r = 0; r < nr; r++)
                            if (memcmp(&b->y[t * ldy + r], &y2[t * ldy + r], sizeof(float)) != 0 &&
                                bad++ < 3)
                                fprintf(stderr, "%s %s len %lld rows %lld n %d: y[%d][%lld] = %.9g, "
                                        "%s %.9g\n", k->name, llm_type_name(types[ti]),
                                        (long long)len, (long long)nr, (int)n, (int)t,
                                        (long long)r, b->y[t * ldy + r], ref->name,
                                        y2[t * ldy + r]);
                    CHECK_INT_EQ(bad, 0);
                }
            }
        }
    free(y2);
}

/* The Q8_0 products of k (its matvec, its batched product, and its panel
 * product on the panel layout, from the first panel and from the second)
 * against the sequence they promise (kernels.h, kernels_avx512.c): per
 * result, from 0, over the blocks in order,
 * acc = fmaf(d_w * d_x, (float)(exact integer block sum), acc). Row counts
 * around the 16-row panels, blocks around the 8-block chunks, and batch
 * sizes 1..MAX_N; columns of y outside the rows stay untouched. The same
 * results also lie within f32 rounding of the scalar single-row kernel. */
enum { Q8_MATVEC, Q8_BATCHED, Q8_PANELS, Q8_PANELS_FROM_16, Q8_VARIANTS };

static void check_q8_chain(const llm_kernels *k, const llm_kernels *ref, case_buf *b)
{
    const llm_type_kernels *kt = llm_kernels_find(k, LLM_TYPE_Q8_0);
    REQUIRE(kt && kt->batched && k->q8_0_panels);
    const int64_t lens[] = {32, 96, 256, 288, 544, 768};  /* 1, 3, 8, 9, 17, 24 blocks */
    const int64_t rows[] = {1, 7, 15, 16, 17, 33, 61};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
            for (int v = 0; v < Q8_VARIANTS; v++) {
                int64_t len = lens[li], nr = rows[ri], ldy = nr + 3, nb = len / 32;
                int64_t r0 = v == Q8_PANELS_FROM_16 ? 16 : 0; /* first row computed */
                if (r0 >= nr)
                    continue;
                uint64_t rb;
                REQUIRE(llm_type_row_bytes(LLM_TYPE_Q8_0, (uint64_t)len, &rb) == 0);
                fill_weights(LLM_TYPE_Q8_0, b->w, (size_t)rb, nr, len);
                unsigned char *packed = malloc(llm_q8_0_panel_bytes(nr, (size_t)rb));
                REQUIRE(packed);
                int64_t n_panels = (nr + 15) / 16;
                llm_q8_0_pack_panels(b->w, (size_t)rb, nr, 0, n_panels, packed);
                for (int64_t i = 0; i < MAX_N * len; i++)
                    b->x[i] = (float)(2.0 * uni()) * (i % 11 == 0 ? 8.0f : 1.0f);
                for (int32_t n = 1; n <= MAX_N; n += (n < 4 ? 1 : 5)) {
                    llm_acts a;
                    llm_acts_quantize(k, b->x, n, len, &b->s, &a);
                    for (int64_t i = 0; i < MAX_N * ldy; i++)
                        b->y[i] = SENTINEL;
                    if (v == Q8_MATVEC)
                        kt->matvec(b->w, (size_t)rb, nr, &a, b->y, ldy);
                    else if (v == Q8_BATCHED)
                        kt->batched(b->w, (size_t)rb, nr, &a, b->y, ldy);
                    else
                        k->q8_0_panels(packed + (size_t)r0 * rb, (size_t)rb, nr - r0, &a, b->y + r0, ldy);
                    int bad = 0;
                    for (int32_t t = 0; t < n; t++) {
                        for (int64_t r = 0; r < r0; r++)
                            CHECK(b->y[t * ldy + r] == SENTINEL);
                        for (int64_t r = r0; r < nr; r++) {
                            const unsigned char *row = b->w + (size_t)r * rb;
                            float want = 0.0f;
                            for (int64_t bl = 0; bl < nb; bl++) {
                                const unsigned char *blk = row + bl * 34;
                                uint16_t h;
                                memcpy(&h, blk, 2);
                                int32_t isum = 0;
                                for (int j = 0; j < 32; j++)
                                    isum += (int32_t)(int8_t)blk[2 + j] * a.q[t * len + bl * 32 + j];
                                float sc = llm_fp16_to_f32(h) * a.d[t * nb + bl];
                                want = fmaf(sc, (float)isum, want);
                            }
                            float got = b->y[t * ldy + r];
                            if (memcmp(&got, &want, sizeof got) != 0 && bad++ < 3)
                                fprintf(stderr, "%s q8_0 variant %d len %lld rows %lld n %d: y[%d][%lld] "
                                        "= %.9g, want %.9g\n", k->name, v, (long long)len, (long long)nr,
                                        (int)n, (int)t, (long long)r, got, want);
                            if (v == Q8_MATVEC && t == 0) {
                                llm_qrow x0 = {a.d, a.q};
                                float dot = k->dot_q8_0(row, &x0, len); /* the set's single row */
                                CHECK(memcmp(&dot, &want, sizeof dot) == 0);
                            }
                            llm_qrow xq = {a.d + t * nb, a.q + t * len};
                            float single = ref->dot_q8_0(row, &xq, len);
                            double mag = 0.0; /* sum of |w_i x_i| */
                            for (int64_t i = 0; i < len; i++) {
                                uint16_t h;
                                memcpy(&h, row + (i / 32) * 34, 2);
                                double wi = (double)llm_fp16_to_f32(h) * (int8_t)row[(i / 32) * 34 + 2 + i % 32];
                                mag += fabs(wi * a.d[t * nb + i / 32] * a.q[t * len + i]);
                            }
                            CHECK_NEAR(got, single, 1e-5 * mag + 1e-6);
                        }
                        for (int64_t r = nr; r < ldy; r++)
                            CHECK(b->y[t * ldy + r] == SENTINEL);
                    }
                    for (int64_t i = (int64_t)n * ldy; i < MAX_N * ldy; i++)
                        CHECK(b->y[i] == SENTINEL);
                    CHECK_INT_EQ(bad, 0);
                }
                free(packed);
            }
}

/* The panel layout itself, byte for byte (kernels.h): 17 rows of 2
 * blocks, so the second panel holds one row and 15 padding rows. */
static void check_panel_layout(void)
{
    enum { ROWS = 17, NB = 2, RB = NB * 34 };
    unsigned char w[ROWS * RB];
    for (int i = 0; i < ROWS * RB; i++)
        w[i] = (unsigned char)(i * 7 + 3);
    CHECK_INT_EQ((long long)llm_q8_0_panel_bytes(ROWS, RB), 32 * RB);
    CHECK_INT_EQ((long long)llm_q8_0_panel_bytes(16, RB), 16 * RB);
    unsigned char p[32 * RB];
    memset(p, 0xee, sizeof p);
    llm_q8_0_pack_panels(w, RB, ROWS, 0, 2, p);
    for (int pn = 0; pn < 2; pn++)
        for (int r = 0; r < 16; r++)
            for (int bl = 0; bl < NB; bl++) {
                int row = pn * 16 + r;
                const unsigned char *panel = p + pn * 16 * RB;
                for (int j = 0; j < 32; j++) {
                    unsigned char want = row < ROWS ? (unsigned char)(w[row * RB + bl * 34 + 2 + j] ^ 0x80) : 0x80;
                    CHECK_INT_EQ(panel[bl * 512 + (j / 4) * 64 + r * 4 + j % 4], want);
                }
                for (int i = 0; i < 2; i++)
                    CHECK_INT_EQ(panel[NB * 512 + (bl * 16 + r) * 2 + i], row < ROWS ? w[row * RB + bl * 34 + i] : 0);
            }
}

int main(int argc, char **argv)
{
    llm_kernels k;
    const char *set = argc > 1 ? argv[1] : "";
    int wide = strcmp(set, "avx512") == 0;
    llm_kernels_scalar(&k);
    if (strcmp(set, "avx2") == 0 || strcmp(set, "vnni") == 0 || wide) {
        if (llm_kernels_avx2(&k) != 0)
            PM_SKIP("the CPU lacks AVX2/FMA/F16C");
        if (strcmp(set, "avx2") != 0 && llm_kernels_vnni(&k) != 0)
            PM_SKIP("the CPU lacks AVX-512 VNNI (with F/BW/VL)");
        if (wide && llm_kernels_avx512(&k) != 0)
            PM_SKIP("the CPU lacks AVX-512 F/BW/VL/VNNI");
    } else if (strcmp(set, "scalar") != 0) {
        fprintf(stderr, "usage: test_engine_matvec scalar|avx2|vnni|avx512\n");
        return 2;
    }
    enum { MAX_ROWS = 61, MAX_LEN = 768 };
    case_buf b;
    b.w = malloc((size_t)MAX_ROWS * MAX_LEN * 4);
    b.x = malloc(sizeof(float) * MAX_N * MAX_LEN);
    b.y = malloc(sizeof(float) * MAX_N * (MAX_ROWS + 3));
    b.s.d = malloc(sizeof(float) * MAX_N * MAX_LEN / 32);
    b.s.q = malloc((size_t)MAX_N * MAX_LEN);
    b.s.dt = calloc(MAX_N * MAX_LEN / 32 + 8, sizeof(float));
    b.s.qb = malloc((size_t)MAX_N * MAX_LEN);
    b.s.xbias = malloc(sizeof(int32_t) * MAX_N * MAX_LEN / 4);
    b.s.xsum = malloc(sizeof(int32_t) * MAX_N * MAX_LEN / 32);
    REQUIRE(b.w && b.x && b.y && b.s.d && b.s.q && b.s.dt && b.s.qb && b.s.xbias && b.s.xsum);

    const uint32_t quant[] = {LLM_TYPE_Q8_0, LLM_TYPE_Q4_0};
    const int64_t quant_lens[] = {32, 64, 96, 288, 544};    /* 1, 2, 3, 9, 17 blocks */
    const uint32_t floats[] = {LLM_TYPE_F32, LLM_TYPE_F16, LLM_TYPE_BF16};
    const int64_t float_lens[] = {1, 15, 16, 17, 40, 256, 300}; /* SIMD tails */
    const int64_t rows[] = {1, 2, 3, 5, 7, 13, 61};
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t li = 0; li < sizeof quant_lens / sizeof quant_lens[0]; li++)
            for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
                check_case(&k, quant[ti], rows[ri], quant_lens[li], &b);
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t li = 0; li < sizeof float_lens / sizeof float_lens[0]; li++)
            for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
                check_case(&k, floats[ti], rows[ri], float_lens[li], &b);
    check_layouts(&k, &b);
    check_panel_layout();
    check_attend(&k);
    check_exponentials(&k);
    check_kquants(&k, &b);
    if (wide) {
        llm_kernels ref, scalar;
        llm_kernels_scalar(&ref);
        REQUIRE(llm_kernels_avx2(&ref) == 0 && llm_kernels_vnni(&ref) == 0);
        llm_kernels_scalar(&scalar);
        /* Q8_0 is its own chain (check_q8_chain), not avx2+vnni's. */
        const uint32_t all[] = {LLM_TYPE_F32, LLM_TYPE_F16, LLM_TYPE_BF16, LLM_TYPE_Q4_0};
        check_same_as(&k, &ref, all, sizeof all / sizeof all[0], &b);
        check_q8_chain(&k, &scalar, &b);
    }
    printf("%s: matrix-vector and attention kernels bitwise equal to the single-row loops\n",
           k.name);

    free(b.w);
    free(b.x);
    free(b.y);
    free(b.s.d);
    free(b.s.q);
    free(b.s.dt);
    free(b.s.qb);
    free(b.s.xbias);
    free(b.s.xsum);
    return pm_check_result();
}
