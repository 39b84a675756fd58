/* test_attention — causal grouped-query attention on the device against a
 * double-precision host reference: split-K decode (one query; many pieces
 * of context), short verify batches, the tiled prefill kernel (full and
 * partial query tiles, an offset base, the widest head), and a captured
 * graph replayed at new positions from the device register.
 *
 * Tolerance: max |out - ref| <= 2e-5 (fp32 dot products, exp and sums over
 * at most a few thousand positions; values are O(1)); 5e-3 for the
 * tensor-core prefill path, whose products round operands to TF32.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_test.h"

typedef struct shape {
    int32_t n, h, kvh, hd;
    uint32_t pos0, ctx;
} shape;

static void reference(const shape *s, const float *q, const float *k,
                      const float *v, double *out)
{
    int32_t qd = s->h * s->hd, kd = s->kvh * s->hd;
    double *sc = malloc(((size_t)s->pos0 + (size_t)s->n) * sizeof *sc);
    REQUIRE(sc);
    for (int32_t t = 0; t < s->n; t++)
        for (int32_t h = 0; h < s->h; h++) {
            int32_t g = h / (s->h / s->kvh);
            uint32_t len = s->pos0 + (uint32_t)t + 1;
            double mx = -INFINITY, sum = 0.0;
            for (uint32_t p = 0; p < len; p++) {
                double d = 0.0;
                for (int32_t i = 0; i < s->hd; i++)
                    d += (double)q[(size_t)t * qd + h * s->hd + i] *
                         k[(size_t)p * kd + g * s->hd + i];
                sc[p] = d / sqrt((double)s->hd);
                mx = fmax(mx, sc[p]);
            }
            for (uint32_t p = 0; p < len; p++) {
                sc[p] = exp(sc[p] - mx);
                sum += sc[p];
            }
            for (int32_t i = 0; i < s->hd; i++) {
                double o = 0.0;
                for (uint32_t p = 0; p < len; p++)
                    o += sc[p] * v[(size_t)p * kd + g * s->hd + i];
                out[(size_t)t * qd + h * s->hd + i] = o / sum;
            }
        }
    free(sc);
}

typedef struct bufs {
    float *q, *k, *v, *o;      /* host */
    float *dq, *dk, *dv, *dout; /* device */
    double *ref;
    size_t nq, nkv;
} bufs;

static void setup(llm_cuda *c, const shape *s, uint64_t seed, bufs *b)
{
    ct_rng r = {seed};
    b->nq = (size_t)s->n * s->h * s->hd;
    b->nkv = (size_t)s->ctx * s->kvh * s->hd;
    b->q = malloc(b->nq * sizeof(float));
    b->o = malloc(b->nq * sizeof(float));
    b->k = malloc(b->nkv * sizeof(float));
    b->v = malloc(b->nkv * sizeof(float));
    b->ref = malloc(b->nq * sizeof(double));
    REQUIRE(b->q && b->o && b->k && b->v && b->ref);
    ct_fill(&r, b->q, b->nq, 2.0f);
    ct_fill(&r, b->k, b->nkv, 2.0f);
    ct_fill(&r, b->v, b->nkv, 1.0f);
    b->dq = ct_dev(c, b->nq * sizeof(float));
    b->dout = ct_dev(c, b->nq * sizeof(float));
    b->dk = ct_dev(c, b->nkv * sizeof(float));
    b->dv = ct_dev(c, b->nkv * sizeof(float));
    ct_put(c, b->dq, b->q, b->nq * sizeof(float));
    ct_put(c, b->dk, b->k, b->nkv * sizeof(float));
    ct_put(c, b->dv, b->v, b->nkv * sizeof(float));
    ct_poison(c, b->dout, b->nq);
}

static void teardown(llm_cuda *c, bufs *b)
{
    llm_cuda_mfree(c, b->dq), llm_cuda_mfree(c, b->dk);
    llm_cuda_mfree(c, b->dv), llm_cuda_mfree(c, b->dout);
    free(b->q), free(b->k), free(b->v), free(b->o), free(b->ref);
}

static void attn_case_tol(shape s, uint64_t seed, int gemm, double tol)
{
    llm_cuda *c = ct_open(8, (int64_t)s.h * s.hd, s.ctx, s.h);
    if (gemm)
        CT_OK(c, llm_cuda_reserve_attention_gemm(c, s.n, s.ctx, s.h / s.kvh));
    bufs b;
    setup(c, &s, seed, &b);
    llm_cuda_attn a = {b.dq, b.dk, b.dv, b.dout, s.n, {s.pos0, NULL}, s.h, s.kvh, s.hd};
    CT_OK(c, llm_cuda_attention(c, &a));
    ct_get(c, b.o, b.dout, b.nq * sizeof(float));
    reference(&s, b.q, b.k, b.v, b.ref);
    double e = ct_max_err(b.o, b.ref, b.nq);
    printf("n %d heads %d/%d hd %d pos0 %u%s: max err %.3g\n", s.n, s.h, s.kvh,
           s.hd, s.pos0, gemm ? " (tensor cores)" : "", e);
    CHECK(e <= tol);
    teardown(c, &b);
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    llm_cuda_free(c);
}

static void attn_case(shape s, uint64_t seed)
{
    attn_case_tol(s, seed, 0, 2e-5);
}

/* The cuBLAS path: TF32 operands (10-bit mantissas) in both products. */
static void prefill_gemm(void)
{
    attn_case_tol((shape){100, 8, 2, 64, 20, 128}, 10, 1, 5e-3);
    attn_case_tol((shape){33, 4, 4, 128, 0, 64}, 11, 1, 5e-3);
}

static void decode_mha(void) { attn_case((shape){1, 4, 4, 64, 100, 128}, 1); }
static void decode_gqa(void) { attn_case((shape){1, 8, 2, 128, 700, 1024}, 2); }
static void decode_long(void)
{
    attn_case((shape){1, 4, 1, 64, 5000, 5120}, 3);
    attn_case((shape){1, 8, 4, 8, 300, 512}, 4); /* a narrow head (8) */
}
static void verify_split(void) { attn_case((shape){5, 8, 4, 96, 300, 512}, 5); }
static void prefill_tiled(void)
{
    attn_case((shape){70, 4, 2, 128, 0, 128}, 6);
    attn_case((shape){40, 8, 4, 16, 0, 64}, 7);
}
static void prefill_offset(void) { attn_case((shape){40, 2, 1, 256, 123, 256}, 8); }

/* A decode step (RoPE on q, attention) captured once with positions from
 * the register, replayed at three positions; each replay must equal the
 * direct computation at that position. */
static void graph_positions(void)
{
    shape s = {1, 4, 2, 64, 0, 256};
    llm_cuda *c = ct_open(8, 256, s.ctx, s.h);
    bufs b;
    setup(c, &s, 9, &b);
    double freq[32];
    for (int i = 0; i < 32; i++)
        freq[i] = pow(10000.0, -2.0 * i / 64);
    double *df = ct_dev(c, sizeof freq);
    ct_put(c, df, freq, sizeof freq);
    float *dq2 = ct_dev(c, b.nq * sizeof(float)), *dout2 = ct_dev(c, b.nq * sizeof(float));
    float *direct = malloc(b.nq * sizeof(float));
    REQUIRE(direct);

    llm_cuda_graph *g = NULL;
    llm_cuda_positions dynp = {0, llm_cuda_pos(c)};
    llm_cuda_attn ga = {dq2, b.dk, b.dv, b.dout, 1, dynp, s.h, s.kvh, s.hd};
    CT_OK(c, llm_cuda_graph_begin(c));
    CT_OK(c, llm_cuda_copy(c, dq2, b.dq, b.nq * sizeof(float)));
    CT_OK(c, llm_cuda_rope(c, dq2, 1, s.h, s.h * s.hd, dynp, df, 1.0f, s.hd));
    CT_OK(c, llm_cuda_attention(c, &ga));
    CT_OK(c, llm_cuda_graph_end(c, &g));

    const uint32_t positions[] = {10, 11, 200};
    for (size_t i = 0; i < 3; i++) {
        uint32_t p = positions[i];
        CT_OK(c, llm_cuda_pos_set(c, p));
        CT_OK(c, llm_cuda_graph_launch(c, g));
        ct_get(c, b.o, b.dout, b.nq * sizeof(float));
        /* Direct, with the base on the host. */
        llm_cuda_positions hp = {p, NULL};
        llm_cuda_attn da = {dq2, b.dk, b.dv, dout2, 1, hp, s.h, s.kvh, s.hd};
        CT_OK(c, llm_cuda_copy(c, dq2, b.dq, b.nq * sizeof(float)));
        CT_OK(c, llm_cuda_rope(c, dq2, 1, s.h, s.h * s.hd, hp, df, 1.0f, s.hd));
        CT_OK(c, llm_cuda_attention(c, &da));
        ct_get(c, direct, dout2, b.nq * sizeof(float));
        int same = 1;
        for (size_t j = 0; j < b.nq; j++)
            same &= b.o[j] == direct[j];
        printf("graph replay at %u: %s\n", p, same ? "identical" : "DIFFERENT");
        CHECK(same);
    }
    /* The register can also step itself inside a stream. */
    CT_OK(c, llm_cuda_pos_set(c, 5));
    CT_OK(c, llm_cuda_pos_advance(c, 3));
    uint32_t got = 0;
    ct_get(c, &got, llm_cuda_pos(c), sizeof got);
    CHECK_INT_EQ(got, 8);
    llm_cuda_graph_free(g);
    llm_cuda_mfree(c, df), llm_cuda_mfree(c, dq2), llm_cuda_mfree(c, dout2);
    free(direct);
    teardown(c, &b);
    llm_cuda_free(c);
}

static const ct_case cases[] = {
    {"decode_mha", decode_mha}, {"decode_gqa", decode_gqa},
    {"decode_long", decode_long}, {"verify_split", verify_split},
    {"prefill_tiled", prefill_tiled}, {"prefill_offset", prefill_offset},
    {"graph_positions", graph_positions}, {"prefill_gemm", prefill_gemm},
};

CT_MAIN(cases)
