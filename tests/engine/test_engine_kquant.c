/* test_engine_kquant — the avx512 set's k-quant matrix–vector products
 * (kernels_kquant_avx512.c) and the switch that selects them.
 *
 * Those kernels compute the scalar kernels' exact integer sub-block sums
 * but add the per-block f32 terms in eight lanes, so they are held to a
 * tolerance, not bitwise: for every Q4_K, Q5_K and Q6_K result,
 *   |got - exact| <= 1e-5 * mag + 1e-6 and |got - scalar| <= 2e-5 * mag + 2e-6,
 * where exact is the dequantized weight row (quant_k.c) dotted in double
 * with the dequantized activations (d_x * q), mag the same sum of |terms|,
 * and scalar the scalar set's result. Shapes: rows that leave partial
 * tiles of four (1, 3, 4, 5, 13, 61), 1 to 9 super-blocks, 1 to 7
 * activation rows, weights with zero and extreme blocks; columns of y past
 * the rows stay untouched.
 *
 * What the backend's thread split relies on is bitwise: a result depends
 * only on its weight row and activation row, so each one computed alone
 * (one row, one activation) is the tiled result's bits. And through the
 * CPU backend at 1, 2 and 3 threads: PHASEMARK_ENGINE_KERNELS=avx512 runs
 * these kernels (their bits), avx2 the AVX2 ones (the other set's bits;
 * every kernel differs in some low bits on these shapes).
 *
 * A CPU without AVX-512 F/BW/VL/VNNI skips (exit 77).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_ops.h"
#include "kernels.h"
#include "model.h"
#include "phasemark/engine.h"
#include "pm_check.h"
#include "quant.h"

#define MAX_ROWS 61
#define MAX_LEN 2304 /* 9 super-blocks */
#define MAX_N 19
#define SENTINEL 12345.0f

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static double uni(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

typedef struct bufs {
    unsigned char *w;
    float *x, *y, *y2, *wf;
    llm_acts_scratch s;
} bufs;

static void scratch_alloc(llm_acts_scratch *s, int32_t n, int64_t len)
{
    s->d = malloc(sizeof(float) * (size_t)(n * len / 32));
    s->q = malloc((size_t)(n * len));
    s->dt = calloc((size_t)(n * len / 32 + 8), sizeof(float));
    s->qb = malloc((size_t)(n * len));
    s->xbias = malloc(sizeof(int32_t) * (size_t)(n * len / 4));
    s->xsum = malloc(sizeof(int32_t) * (size_t)(n * len / 32));
    REQUIRE(s->d && s->q && s->dt && s->qb && s->xbias && s->xsum);
}

static void scratch_free(llm_acts_scratch *s)
{
    free(s->d);
    free(s->q);
    free(s->dt);
    free(s->qb);
    free(s->xbias);
    free(s->xsum);
}

/* Random rows with a zero first block on every third row and one huge
 * element setting its block's scale on every fourth. */
static void fill(uint32_t type, bufs *b, size_t rb, int64_t rows, int64_t len)
{
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < len; i++)
            b->wf[i] = (float)uni();
        if (r % 3 == 1)
            for (int64_t i = 0; i < 32; i++)
                b->wf[i] = 0.0f;
        if (r % 4 == 2)
            b->wf[len - 1] = 100.0f;
        llm_quantize_row(type, b->wf, b->w + (size_t)r * rb, (size_t)len);
    }
    for (int64_t i = 0; i < MAX_N * len; i++)
        b->x[i] = (float)(2.0 * uni()) * (i % 11 == 0 ? 8.0f : 1.0f);
}

static void check_tolerance(const llm_kernels *k, const llm_kernels *ref, bufs *b)
{
    const uint32_t types[] = {LLM_TYPE_Q4_K, LLM_TYPE_Q5_K, LLM_TYPE_Q6_K};
    const int64_t lens[] = {256, 768, 2304};
    const int64_t rows[] = {1, 3, 4, 5, 13, 61};
    const int32_t ns[] = {1, 2, 7};
    /* (the batched product's own check covers larger batches) */
    int checked = 0;
    for (size_t ti = 0; ti < 3; ti++) {
        const llm_type_kernels *kt = llm_kernels_find(k, types[ti]), *rt = llm_kernels_find(ref, types[ti]);
        REQUIRE(kt && rt);
        for (size_t li = 0; li < 3; li++)
            for (size_t ri = 0; ri < 6; ri++)
                for (size_t ni = 0; ni < 3; ni++) {
                    int64_t len = lens[li], nr = rows[ri], ldy = nr + 3;
                    int32_t n = ns[ni];
                    uint64_t rb;
                    REQUIRE(llm_type_row_bytes(types[ti], (uint64_t)len, &rb) == 0);
                    fill(types[ti], b, (size_t)rb, nr, len);
                    llm_acts a;
                    llm_acts_quantize(ref, b->x, n, len, &b->s, &a);
                    for (int64_t i = 0; i < MAX_N * (MAX_ROWS + 3); i++)
                        b->y[i] = SENTINEL;
                    kt->matvec(b->w, (size_t)rb, nr, &a, b->y, ldy);
                    rt->matvec(b->w, (size_t)rb, nr, &a, b->y2, ldy);
                    int bad = 0;
                    for (int32_t t = 0; t < n; t++) {
                        for (int64_t r = 0; r < nr; r++) {
                            llm_dequantize_row(types[ti], b->w + (size_t)r * rb, b->wf, (size_t)len);
                            double sum = 0.0, mag = 0.0;
                            for (int64_t i = 0; i < len; i++) {
                                double xi = (double)a.d[t * (len / 32) + i / 32] * a.q[t * len + i];
                                sum += (double)b->wf[i] * xi;
                                mag += fabs((double)b->wf[i] * xi);
                            }
                            double got = b->y[t * ldy + r], want = b->y2[t * ldy + r];
                            if ((fabs(got - sum) > 1e-5 * mag + 1e-6 ||
                                 fabs(got - want) > 2e-5 * mag + 2e-6) && bad++ < 3)
                                fprintf(stderr, "%s len %lld rows %lld n %d y[%d][%lld]: %.9g, "
                                        "scalar %.9g, exact %.9g (mag %.3g)\n",
                                        llm_type_name(types[ti]), (long long)len, (long long)nr,
                                        (int)n, (int)t, (long long)r, got, want, sum, mag);
                            checked++;
                        }
                        for (int64_t r = nr; r < ldy; r++)
                            CHECK(b->y[t * ldy + r] == SENTINEL);
                    }
                    for (int64_t i = (int64_t)n * ldy; i < MAX_N * ldy; i++)
                        CHECK(b->y[i] == SENTINEL);
                    CHECK_INT_EQ(bad, 0);
                }
    }
    /* 3 types x 3 lengths x (1+3+4+5+13+61 rows) x (1+2+7) activations. */
    CHECK_INT_EQ(checked, 3 * 3 * 87 * 10);
}

/* The unsigned quant values (Q4_K: 0..15, Q5_K: 0..31, Q6_K: 0..63) of one
 * super-block, in element order, read from the block layout (quant.h). */
static void k_values(uint32_t type, const unsigned char *blk, int v[256])
{
    for (int e = 0; e < 256; e++) {
        if (type == LLM_TYPE_Q6_K) {
            int h = e / 128, q = (e % 128) / 32, l = e % 32;
            int lo = (blk[64 * h + 32 * (q & 1) + l] >> (4 * (q >> 1))) & 15;
            int hi = (blk[128 + 32 * h + l] >> (2 * q)) & 3;
            v[e] = lo | hi << 4;
        } else {
            int j = e / 32, l = e % 32;
            const unsigned char *qs = blk + (type == LLM_TYPE_Q5_K ? 48 : 16);
            v[e] = (qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 15;
            if (type == LLM_TYPE_Q5_K)
                v[e] |= ((blk[16 + l] >> j) & 1) << 4;
        }
    }
}

static float f16_at(const unsigned char *p)
{
    return llm_fp16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* The batched product's documented chain for one result (kernels_kquant_
 * avx512.c), in plain C with fmaf over exact integer sums. */
static float batched_chain(uint32_t type, const unsigned char *row, const llm_acts *a, int32_t t)
{
    size_t bytes = type == LLM_TYPE_Q4_K ? LLM_Q4_K_BYTES : type == LLM_TYPE_Q5_K ? LLM_Q5_K_BYTES
                                                                                 : LLM_Q6_K_BYTES;
    int64_t nb = a->len / 32;
    float acc = 0.0f;
    for (int64_t sb = 0; sb < a->len / 256; sb++) {
        const unsigned char *blk = row + (size_t)sb * bytes;
        int v[256];
        k_values(type, blk, v);
        for (int b = 0; b < 8; b++) {
            const int8_t *x = a->q + t * a->len + (sb * 8 + b) * 32;
            float dx = a->d[t * nb + sb * 8 + b];
            if (type == LLM_TYPE_Q6_K) {
                const signed char *sc = (const signed char *)(blk + 192);
                int32_t s0 = 0, s1 = 0;
                for (int l = 0; l < 16; l++) {
                    s0 += (v[32 * b + l] - 32) * x[l];
                    s1 += (v[32 * b + 16 + l] - 32) * x[16 + l];
                }
                acc = fmaf(f16_at(blk + 208) * dx, (float)(sc[2 * b] * s0 + sc[2 * b + 1] * s1), acc);
            } else {
                int sc, m;
                int32_t isum = 0, xs = 0;
                llm_q4k_scale_min(blk + 4, b, &sc, &m);
                for (int l = 0; l < 32; l++) {
                    isum += v[32 * b + l] * x[l];
                    xs += x[l];
                }
                float dxs = dx * (float)xs;
                acc = fmaf((f16_at(blk) * (float)sc) * dx, (float)isum, acc);
                acc = fmaf(-(f16_at(blk + 2) * (float)m), dxs, acc);
            }
        }
    }
    return acc;
}

/* The batched products (prefill) against batched_chain bitwise, and the
 * exact dot within the tolerance above: rows around the 16-row panels,
 * batches around the groups of four, columns past the rows untouched. */
static void check_batched(const llm_kernels *k, const llm_kernels *ref, bufs *b)
{
    const uint32_t types[] = {LLM_TYPE_Q4_K, LLM_TYPE_Q5_K, LLM_TYPE_Q6_K};
    const int64_t lens[] = {256, 2304};
    const int64_t rows[] = {1, 15, 16, 17, 61};
    const int32_t ns[] = {1, 4, 7, 19};
    int checked = 0;
    for (size_t ti = 0; ti < 3; ti++) {
        llm_matvec_fn bt = llm_kernels_find(k, types[ti])->batched;
        REQUIRE(bt);
        for (size_t li = 0; li < 2; li++)
            for (size_t ri = 0; ri < 5; ri++)
                for (size_t ni = 0; ni < 4; ni++) {
                    int64_t len = lens[li], nr = rows[ri], ldy = nr + 3;
                    int32_t n = ns[ni];
                    uint64_t rb;
                    REQUIRE(llm_type_row_bytes(types[ti], (uint64_t)len, &rb) == 0);
                    fill(types[ti], b, (size_t)rb, nr, len);
                    llm_acts a;
                    llm_acts_quantize(ref, b->x, n, len, &b->s, &a);
                    for (int64_t i = 0; i < MAX_N * (MAX_ROWS + 3); i++)
                        b->y[i] = SENTINEL;
                    bt(b->w, (size_t)rb, nr, &a, b->y, ldy);
                    int bad = 0;
                    for (int32_t t = 0; t < n; t++) {
                        for (int64_t r = 0; r < nr; r++) {
                            const unsigned char *row = b->w + (size_t)r * rb;
                            float want = batched_chain(types[ti], row, &a, t), got = b->y[t * ldy + r];
                            llm_dequantize_row(types[ti], row, b->wf, (size_t)len);
                            double sum = 0.0, mag = 0.0;
                            for (int64_t i = 0; i < len; i++) {
                                double xi = (double)a.d[t * (len / 32) + i / 32] * a.q[t * len + i];
                                sum += (double)b->wf[i] * xi;
                                mag += fabs((double)b->wf[i] * xi);
                            }
                            if ((memcmp(&got, &want, sizeof got) != 0 ||
                                 fabs((double)got - sum) > 1e-5 * mag + 1e-6) && bad++ < 3)
                                fprintf(stderr, "batched %s len %lld rows %lld n %d y[%d][%lld]: %.9g, "
                                        "chain %.9g, exact %.9g\n", llm_type_name(types[ti]),
                                        (long long)len, (long long)nr, (int)n, (int)t,
                                        (long long)r, got, want, sum);
                            checked++;
                        }
                        for (int64_t r = nr; r < ldy; r++)
                            CHECK(b->y[t * ldy + r] == SENTINEL);
                    }
                    for (int64_t i = (int64_t)n * ldy; i < MAX_N * ldy; i++)
                        CHECK(b->y[i] == SENTINEL);
                    CHECK_INT_EQ(bad, 0);
                }
    }
    /* 3 types x 2 lengths x (1+15+16+17+61 rows) x (1+4+7+19) activations. */
    CHECK_INT_EQ(checked, 3 * 2 * 110 * 31);
}

/* Each result computed alone (one weight row, one activation row
 * quantized alone) is bitwise the tiled result. */
static void check_alone(const llm_kernels *k, const llm_kernels *ref, bufs *b)
{
    const uint32_t types[] = {LLM_TYPE_Q4_K, LLM_TYPE_Q5_K, LLM_TYPE_Q6_K};
    enum { ROWS = 13, LEN = 768, N = 5, LDY = ROWS + 3 };
    llm_acts_scratch one;
    scratch_alloc(&one, 1, LEN);
    for (size_t ti = 0; ti < 3; ti++) {
        llm_matvec_fn mv = llm_kernels_find(k, types[ti])->matvec;
        uint64_t rb;
        REQUIRE(llm_type_row_bytes(types[ti], LEN, &rb) == 0);
        fill(types[ti], b, (size_t)rb, ROWS, LEN);
        llm_acts a;
        llm_acts_quantize(ref, b->x, N, LEN, &b->s, &a);
        mv(b->w, (size_t)rb, ROWS, &a, b->y, LDY);
        int bad = 0;
        for (int32_t t = 0; t < N; t++) {
            llm_acts a1;
            llm_acts_quantize(ref, b->x + t * LEN, 1, LEN, &one, &a1);
            for (int64_t r = 0; r < ROWS; r++) {
                float alone;
                mv(b->w + (size_t)r * rb, (size_t)rb, 1, &a1, &alone, 1);
                if (memcmp(&alone, &b->y[t * LDY + r], sizeof alone) != 0 && bad++ < 3)
                    fprintf(stderr, "%s y[%d][%lld]: tiled %.9g, alone %.9g\n",
                            llm_type_name(types[ti]), (int)t, (long long)r, b->y[t * LDY + r], alone);
            }
        }
        CHECK_INT_EQ(bad, 0);
    }
    scratch_free(&one);
}

/* llm_cpu_matmul under PHASEMARK_ENGINE_KERNELS=set at 1..3 threads: the
 * rows a backend computes are bitwise `want_set`'s kernel on the same
 * quantized activations (n below the batched product's threshold). */
static void check_backend(const char *set, const llm_kernels *want_set, bufs *b)
{
    enum { ROWS = 61, LEN = 2304, N = 2 };
    const uint32_t types[] = {LLM_TYPE_Q4_K, LLM_TYPE_Q5_K, LLM_TYPE_Q6_K};
    setenv("PHASEMARK_ENGINE_KERNELS", set, 1);
    for (int32_t threads = 1; threads <= 3; threads++) {
        llm_backend *be = NULL;
        char err[256] = "";
        REQUIRE(llm_cpu_backend_create(threads, 1, &be, err, sizeof err) == 0);
        CHECK_STR_EQ(llm_cpu_backend_kernels(be), want_set->name);
        REQUIRE(be->ops->reserve(be, 16, LEN) == 0);
        for (size_t ti = 0; ti < 3; ti++) {
            uint64_t rb;
            REQUIRE(llm_type_row_bytes(types[ti], LEN, &rb) == 0);
            fill(types[ti], b, (size_t)rb, ROWS, LEN);
            llm_tensor w = {b->w, types[ti], LEN, ROWS, (size_t)rb, NULL};
            llm_cpu_matmul(be, &w, b->x, N, b->y);
            llm_acts a;
            llm_acts_quantize(want_set, b->x, N, LEN, &b->s, &a);
            llm_kernels_find(want_set, types[ti])->matvec(b->w, (size_t)rb, ROWS, &a, b->y2, ROWS);
            CHECK(memcmp(b->y, b->y2, sizeof(float) * N * ROWS) == 0);
        }
        be->ops->destroy(be);
    }
    unsetenv("PHASEMARK_ENGINE_KERNELS");
}

int main(void)
{
    llm_kernels k, scalar, avx2;
    llm_kernels_scalar(&k);
    if (llm_kernels_avx2(&k) != 0 || llm_kernels_vnni(&k) != 0 || llm_kernels_avx512(&k) != 0)
        PM_SKIP("the CPU lacks AVX-512 F/BW/VL/VNNI");
    llm_kernels_scalar(&scalar);
    llm_kernels_scalar(&avx2);
    REQUIRE(llm_kernels_avx2(&avx2) == 0);
    /* The avx512 set carries its own k-quant products, the AVX2 set not. */
    const uint32_t types[] = {LLM_TYPE_Q4_K, LLM_TYPE_Q5_K, LLM_TYPE_Q6_K};
    for (size_t ti = 0; ti < 3; ti++) {
        const llm_type_kernels *e = llm_kernels_find(&k, types[ti]), *e2 = llm_kernels_find(&avx2, types[ti]);
        REQUIRE(e && e2);
        CHECK(e->matvec != e2->matvec);
        CHECK(e->dequant == e2->dequant);
        CHECK(e->acts_q8 == 1);
        CHECK(e->batched != NULL && e2->batched == NULL);
    }

    bufs b;
    b.w = malloc((size_t)MAX_ROWS * MAX_LEN);
    b.x = malloc(sizeof(float) * MAX_N * MAX_LEN);
    b.y = malloc(sizeof(float) * MAX_N * (MAX_ROWS + 3));
    b.y2 = malloc(sizeof(float) * MAX_N * (MAX_ROWS + 3));
    b.wf = malloc(sizeof(float) * MAX_LEN);
    REQUIRE(b.w && b.x && b.y && b.y2 && b.wf);
    scratch_alloc(&b.s, MAX_N, MAX_LEN);

    check_tolerance(&k, &scalar, &b);
    check_alone(&k, &scalar, &b);
    check_batched(&k, &scalar, &b);
    check_backend("avx512", &k, &b);
    check_backend("avx2", &avx2, &b);
    printf("avx512 k-quant products within tolerance of the scalar set\n");

    scratch_free(&b.s);
    free(b.w);
    free(b.x);
    free(b.y);
    free(b.y2);
    free(b.wf);
    return pm_check_result();
}
