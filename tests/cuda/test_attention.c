/* test_attention — causal grouped-query attention on the device against a
 * double-precision host reference: split-K decode (one query; many pieces
 * of context), short verify batches, the tiled prefill kernel (full and
 * partial query tiles, an offset base, the widest head), and a captured
 * graph replayed at new positions from the device register.
 *
 * verify_rows: llm_cuda_attention_rows over 2, 9, 17 and 32 rows (q the
 * front of wider q/k/v rows, positions from the register) gives, row for
 * row, the bits of one-row llm_cuda_attention calls at base + i, in one
 * launch (rows_stationary) and in calls of 8 rows; 33 rows are refused.
 *
 * Tolerance: max |out - ref| <= 2e-5 (fp32 dot products, exp and sums over
 * at most a few thousand positions; values are O(1)); 5e-3 for the
 * tensor-core prefill path, whose products round operands to TF32.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"
#include "quant.h"

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

/* One attention call against the reference. q_stride > h*hd reads q from
 * wider rows whose tail is NaN (so reading past the heads shows); gemm
 * reserves the tensor-core path, chunk > 0 sets its query chunk. */
/* The split-K kernel the cases run: -1 the default, else tune.attn_decode. */
static int g_kernel = -1;

/* Sets the prefill chunk and the split-K cut (a negative value keeps the
 * default) and the split-K kernel of g_kernel. */
static void set_cut(llm_cuda *c, int32_t chunk, int32_t pieces)
{
    llm_cuda_tuning t;
    CT_OK(c, llm_cuda_get_tuning(c, &t));
    if (chunk >= 0)
        t.attn_chunk = chunk;
    if (pieces >= 0)
        t.attn_pieces = pieces;
    if (g_kernel >= 0)
        t.attn_decode = g_kernel;
    CT_OK(c, llm_cuda_set_tuning(c, &t));
}

static void attn_case_cut(shape s, uint64_t seed, int gemm, double tol, int32_t q_stride,
                          int32_t chunk, int32_t pieces)
{
    llm_cuda *c = ct_open(8, (int64_t)s.h * s.hd, s.ctx, s.h);
    if (gemm)
        CT_OK(c, llm_cuda_reserve_attention_gemm(c, s.n, s.ctx, s.h / s.kvh));
    set_cut(c, chunk, pieces);
    bufs b;
    setup(c, &s, seed, &b);
    int32_t qd = s.h * s.hd;
    float *dq = b.dq;
    if (q_stride > qd) {
        float *wide = malloc((size_t)s.n * q_stride * sizeof *wide);
        REQUIRE(wide);
        for (int32_t t = 0; t < s.n; t++)
            for (int32_t i = 0; i < q_stride; i++)
                wide[(size_t)t * q_stride + i] = i < qd ? b.q[(size_t)t * qd + i] : NAN;
        dq = ct_dev(c, (size_t)s.n * q_stride * sizeof(float));
        ct_put(c, dq, wide, (size_t)s.n * q_stride * sizeof(float));
        free(wide);
    }
    llm_cuda_attn a = {dq, b.dk, b.dv, b.dout, s.n, {s.pos0, NULL}, s.h, s.kvh, s.hd,
                       q_stride};
    CT_OK(c, llm_cuda_attention(c, &a));
    ct_get(c, b.o, b.dout, b.nq * sizeof(float));
    reference(&s, b.q, b.k, b.v, b.ref);
    double e = ct_max_err(b.o, b.ref, b.nq);
    printf("n %d heads %d/%d hd %d pos0 %u q_stride %d pieces %d kernel %d%s: max err %.3g\n",
           s.n, s.h, s.kvh, s.hd, s.pos0, q_stride, pieces, g_kernel,
           gemm ? " (tensor cores)" : "", e);
    CHECK(e <= tol);
    if (dq != b.dq)
        llm_cuda_mfree(c, dq);
    teardown(c, &b);
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    llm_cuda_free(c);
}

static void attn_case_full(shape s, uint64_t seed, int gemm, double tol, int32_t q_stride,
                           int32_t chunk)
{
    attn_case_cut(s, seed, gemm, tol, q_stride, chunk, -1);
}

static void attn_case_tol(shape s, uint64_t seed, int gemm, double tol)
{
    attn_case_full(s, seed, gemm, tol, 0, 0);
}

static void attn_case(shape s, uint64_t seed)
{
    attn_case_tol(s, seed, 0, 2e-5);
}

/* The cuBLAS path: TF32 operands (10-bit mantissas) in both products. The
 * reservations let 53 and 16 query rows into a chunk: 2 and 3 chunks, each
 * against the keys up to its last query. */
static void prefill_gemm(void)
{
    attn_case_tol((shape){100, 8, 2, 64, 20, 128}, 10, 1, 5e-3);
    attn_case_tol((shape){33, 4, 4, 128, 0, 64}, 11, 1, 5e-3);
}

/* Chunks of 7 rows (15 chunks, odd sizes, a short last one) after an
 * offset base, and a request for more rows than the room holds (capped at
 * 53). */
static void prefill_gemm_chunks(void)
{
    attn_case_full((shape){100, 8, 2, 64, 20, 128}, 12, 1, 5e-3, 0, 7);
    attn_case_full((shape){100, 8, 2, 64, 20, 128}, 13, 1, 5e-3, 0, 100);
}

/* Queries read from the front of fused q/k/v rows on every path. */
static void q_stride(void)
{
    attn_case_full((shape){3, 8, 2, 64, 90, 256}, 14, 0, 2e-5, 8 * 64 + 2 * 2 * 64, 0);
    attn_case_full((shape){40, 4, 2, 32, 7, 64}, 15, 0, 2e-5, 4 * 32 + 2 * 2 * 32, 0);
    attn_case_full((shape){70, 8, 2, 64, 0, 128}, 16, 1, 5e-3, 8 * 64 + 2 * 2 * 64, 0);
}

static void decode_mha(void) { attn_case((shape){1, 4, 4, 64, 100, 128}, 1); }
static void decode_gqa(void)
{
    attn_case((shape){1, 8, 2, 128, 700, 1024}, 2);
    attn_case((shape){1, 4, 2, 256, 300, 512}, 22); /* two float4s a lane */
    attn_case((shape){1, 4, 2, 6, 50, 128}, 23);    /* not a multiple of 4 wide */
}
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
static void graph_positions_cut(int32_t pieces)
{
    shape s = {1, 4, 2, 64, 0, 256};
    llm_cuda *c = ct_open(8, 256, s.ctx, s.h);
    set_cut(c, 0, pieces);
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
    llm_cuda_attn ga = {dq2, b.dk, b.dv, b.dout, 1, dynp, s.h, s.kvh, s.hd, 0};
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
        llm_cuda_attn da = {dq2, b.dk, b.dv, dout2, 1, hp, s.h, s.kvh, s.hd, 0};
        CT_OK(c, llm_cuda_copy(c, dq2, b.dq, b.nq * sizeof(float)));
        CT_OK(c, llm_cuda_rope(c, dq2, 1, s.h, s.h * s.hd, hp, df, 1.0f, s.hd));
        CT_OK(c, llm_cuda_attention(c, &da));
        ct_get(c, direct, dout2, b.nq * sizeof(float));
        int same = 1;
        for (size_t j = 0; j < b.nq; j++)
            same &= b.o[j] == direct[j];
        printf("graph replay at %u (pieces %d): %s\n", p, pieces,
               same ? "identical" : "DIFFERENT");
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

/* ---- a decode step of fused kernels ----------------------------------- */

enum { SD = 256, SH = 4, SKV = 2, SHD = 64, SFF = 512, SL = 2, SCTX = 64, SSTEPS = 6 };

typedef struct step_model {
    llm_cuda_weight qkv[SL], o[SL], gu[SL], down[SL];
    float *an[SL], *fn[SL], *kc[SL], *vc[SL];
    double *freq;
    float *x, *xb, *q, *att, *hb, *hb2;
} step_model;

static llm_cuda_weight step_weight(llm_cuda *c, int64_t rows, int64_t cols, uint64_t seed)
{
    llm_cuda_weight w;
    CT_OK(c, llm_cuda_weight_alloc(c, LLM_TYPE_BF16, cols, rows, &w));
    CT_OK(c, llm_cuda_fill_uniform(c, w.data, LLM_TYPE_BF16, (size_t)(rows * cols), seed,
                                   sqrtf(3.0f / (float)cols)));
    return w;
}

static void step_build(llm_cuda *c, step_model *m)
{
    ct_rng r = {555};
    float g[SD];
    double f[SHD / 2];
    for (int i = 0; i < SHD / 2; i++)
        f[i] = pow(10000.0, -2.0 * i / SHD);
    m->freq = ct_dev(c, sizeof f);
    ct_put(c, m->freq, f, sizeof f);
    for (int l = 0; l < SL; l++) {
        m->qkv[l] = step_weight(c, (SH + 2 * SKV) * SHD, SD, 10 + l);
        m->o[l] = step_weight(c, SD, SH * SHD, 20 + l);
        m->gu[l] = step_weight(c, 2 * SFF, SD, 30 + l);
        m->down[l] = step_weight(c, SD, SFF, 40 + l);
        m->an[l] = ct_dev(c, sizeof g);
        m->fn[l] = ct_dev(c, sizeof g);
        for (int i = 0; i < SD; i++)
            g[i] = 1.0f + ct_sym(&r, 0.2f);
        ct_put(c, m->an[l], g, sizeof g);
        for (int i = 0; i < SD; i++)
            g[i] = 1.0f + ct_sym(&r, 0.2f);
        ct_put(c, m->fn[l], g, sizeof g);
        m->kc[l] = ct_dev(c, SCTX * SKV * SHD * sizeof(float));
        m->vc[l] = ct_dev(c, SCTX * SKV * SHD * sizeof(float));
    }
    m->x = ct_dev(c, SD * sizeof(float));
    m->xb = ct_dev(c, SD * sizeof(float));
    m->q = ct_dev(c, (SH + 2 * SKV) * SHD * sizeof(float));
    m->att = ct_dev(c, SH * SHD * sizeof(float));
    m->hb = ct_dev(c, 2 * SFF * sizeof(float));
    m->hb2 = ct_dev(c, SFF * sizeof(float));
}

static void step_free(llm_cuda *c, step_model *m)
{
    for (int l = 0; l < SL; l++) {
        llm_cuda_weight_release(c, &m->qkv[l]), llm_cuda_weight_release(c, &m->o[l]);
        llm_cuda_weight_release(c, &m->gu[l]), llm_cuda_weight_release(c, &m->down[l]);
        llm_cuda_mfree(c, m->an[l]), llm_cuda_mfree(c, m->fn[l]);
        llm_cuda_mfree(c, m->kc[l]), llm_cuda_mfree(c, m->vc[l]);
    }
    void *b[] = {m->freq, m->x, m->xb, m->q, m->att, m->hb, m->hb2};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        llm_cuda_mfree(c, b[i]);
}

/* The five fused kernels a layer (as bench/cuda composes the decode step),
 * positions from the register, which advances. */
static void step_fused(llm_cuda *c, step_model *m)
{
    llm_cuda_positions p = {0, llm_cuda_pos(c)};
    for (int l = 0; l < SL; l++) {
        llm_cuda_rope_store rs = {p, m->freq, 1.0f, SH, SKV, SHD, m->kc[l], m->vc[l]};
        llm_cuda_mv_fuse fq = {LLM_CUDA_MV_NORM | LLM_CUDA_MV_ROPE_STORE, m->an[l], 1e-5f, &rs};
        llm_cuda_mv_fuse fa = {LLM_CUDA_MV_ACCUMULATE, NULL, 0.0f, NULL};
        llm_cuda_mv_fuse fg = {LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS, m->fn[l], 1e-5f, NULL};
        CT_OK(c, llm_cuda_matvec_fused(c, &m->qkv[l], m->x, m->q, &fq));
        llm_cuda_attn a = {m->q, m->kc[l], m->vc[l], m->att, 1, p, SH, SKV, SHD,
                           (SH + 2 * SKV) * SHD};
        CT_OK(c, llm_cuda_attention(c, &a));
        CT_OK(c, llm_cuda_matvec_fused(c, &m->o[l], m->att, m->x, &fa));
        CT_OK(c, llm_cuda_matvec_fused(c, &m->gu[l], m->x, m->hb, &fg));
        CT_OK(c, llm_cuda_matvec_fused(c, &m->down[l], m->hb, m->x, &fa));
    }
    CT_OK(c, llm_cuda_pos_advance(c, 1));
}

/* The same step from the unfused operations, at host position pos. */
static void step_plain(llm_cuda *c, step_model *m, uint32_t pos)
{
    llm_cuda_positions p = {pos, NULL};
    for (int l = 0; l < SL; l++) {
        CT_OK(c, llm_cuda_rmsnorm(c, m->xb, m->x, m->an[l], 1, SD, 1e-5f));
        CT_OK(c, llm_cuda_matmul(c, &m->qkv[l], m->xb, 1, m->q));
        CT_OK(c, llm_cuda_rope_qkv_store(c, m->q, 1, (SH + 2 * SKV) * SHD, SH, SKV, SHD, p,
                                         m->freq, 1.0f, m->kc[l], m->vc[l]));
        llm_cuda_attn a = {m->q, m->kc[l], m->vc[l], m->att, 1, p, SH, SKV, SHD,
                           (SH + 2 * SKV) * SHD};
        CT_OK(c, llm_cuda_attention(c, &a));
        CT_OK(c, llm_cuda_matmul_acc(c, &m->o[l], m->att, 1, m->x));
        CT_OK(c, llm_cuda_rmsnorm(c, m->xb, m->x, m->fn[l], 1, SD, 1e-5f));
        CT_OK(c, llm_cuda_matmul(c, &m->gu[l], m->xb, 1, m->hb));
        CT_OK(c, llm_cuda_swiglu_pairs(c, m->hb2, m->hb, SFF));
        CT_OK(c, llm_cuda_matmul_acc(c, &m->down[l], m->hb2, 1, m->x));
    }
}

static void set_pdl(llm_cuda *c, int on)
{
    llm_cuda_tuning t;
    CT_OK(c, llm_cuda_get_tuning(c, &t));
    t.pdl = on;
    CT_OK(c, llm_cuda_set_tuning(c, &t));
}

/* SSTEPS decode steps from position 0: states [SSTEPS][SD]. mode 0: a graph
 * captured with programmatic dependent launch, replayed; 1: direct fused
 * launches in plain stream order; 2: the unfused operations. */
static void step_run(llm_cuda *c, step_model *m, int mode, const float *x0, float *states)
{
    llm_cuda_graph *g = NULL;
    set_pdl(c, mode == 0);
    if (mode == 0) {
        CT_OK(c, llm_cuda_graph_begin(c));
        step_fused(c, m);
        CT_OK(c, llm_cuda_graph_end(c, &g));
    }
    for (int l = 0; l < SL; l++) {
        ct_poison(c, m->kc[l], SCTX * SKV * SHD);
        ct_poison(c, m->vc[l], SCTX * SKV * SHD);
    }
    ct_put(c, m->x, x0, SD * sizeof(float));
    CT_OK(c, llm_cuda_pos_set(c, 0));
    for (int t = 0; t < SSTEPS; t++) {
        if (mode == 0)
            CT_OK(c, llm_cuda_graph_launch(c, g));
        else if (mode == 1)
            step_fused(c, m);
        else
            step_plain(c, m, (uint32_t)t);
        ct_get(c, states + (size_t)t * SD, m->x, SD * sizeof(float));
    }
    llm_cuda_graph_free(g);
    set_pdl(c, 1);
}

/* The fused decode step replayed as a graph of dependent launches gives the
 * bits of the same kernels in plain stream order (a missing wait would show
 * as a race), and matches the unfused operations up to rounding. */
static void decode_step_pdl(void)
{
    llm_cuda *c = ct_open(8, 2 * SFF, SCTX, SH);
    step_model m;
    step_build(c, &m);
    ct_rng r = {77};
    float x0[SD];
    ct_fill(&r, x0, SD, 1.0f);
    float *s0 = malloc(3 * SSTEPS * SD * sizeof(float));
    REQUIRE(s0);
    float *s1 = s0 + SSTEPS * SD, *s2 = s1 + SSTEPS * SD;
    step_run(c, &m, 0, x0, s0);
    step_run(c, &m, 1, x0, s1);
    step_run(c, &m, 2, x0, s2);
    CHECK(memcmp(s0, s1, SSTEPS * SD * sizeof(float)) == 0);
    double *ref = malloc(SSTEPS * SD * sizeof(double));
    REQUIRE(ref);
    for (int i = 0; i < SSTEPS * SD; i++)
        ref[i] = s2[i];
    double e = ct_rel_err(s0, ref, SSTEPS * SD);
    printf("decode step, %d steps: graph with dependent launch %s direct; fused vs unfused "
           "rel err %.3g\n", SSTEPS,
           memcmp(s0, s1, SSTEPS * SD * sizeof(float)) ? "DIFFERS from" : "identical to", e);
    CHECK(e <= 2e-5);
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    free(ref);
    free(s0);
    step_free(c, &m);
    llm_cuda_free(c);
}

static void graph_positions(void)
{
    graph_positions_cut(-1); /* the default cut */
    graph_positions_cut(0);  /* the cut by the reservation */
}

/* The split-K cut that follows each row's context (tune.attn_pieces, 16 by
 * default) at other piece counts: long pieces, a verify batch, one piece a
 * block at most, graph replays; and the cut by the reservation. */
static void decode_pieces(void)
{
    attn_case_cut((shape){1, 4, 1, 64, 5000, 5120}, 17, 0, 2e-5, 0, 0, 4);
    attn_case_cut((shape){5, 8, 4, 96, 300, 512}, 18, 0, 2e-5, 0, 0, 3);
    attn_case_cut((shape){1, 8, 2, 128, 700, 1024}, 19, 0, 2e-5, 0, 0, 32);
    attn_case_cut((shape){1, 4, 1, 64, 5000, 5120}, 20, 0, 2e-5, 0, 0, 0);
    attn_case_cut((shape){5, 8, 4, 96, 300, 512}, 21, 0, 2e-5, 0, 0, 0);
    graph_positions_cut(3);
}

/* The block kernel (tune.attn_decode = 0) on the decode shapes. */
static void decode_block_kernel(void)
{
    g_kernel = 0;
    decode_mha();
    decode_gqa();
    decode_long();
    verify_split();
    graph_positions();
    decode_pieces();
    g_kernel = -1;
}

static void verify_rows_case(llm_cuda *c, int32_t n, int stationary)
{
    shape s = {n, 8, 4, 64, 127, 256};
    int32_t qd = s.h * s.hd, qs = qd + 2 * s.kvh * s.hd;
    bufs b;
    setup(c, &s, 40u + (uint64_t)n, &b);
    float *wide = malloc((size_t)n * qs * sizeof *wide);
    REQUIRE(wide);
    for (int32_t t = 0; t < n; t++)
        for (int32_t i = 0; i < qs; i++)
            wide[(size_t)t * qs + i] = i < qd ? b.q[(size_t)t * qd + i] : NAN;
    float *dq = ct_dev(c, (size_t)n * qs * sizeof(float));
    float *one = ct_dev(c, b.nq * sizeof(float));
    uint32_t *dpos = ct_dev(c, sizeof(uint32_t));
    ct_put(c, dq, wide, (size_t)n * qs * sizeof(float));
    uint32_t base = 100; /* rows at 127 .. 127 + n - 1: 27 from the register */
    ct_put(c, dpos, &base, sizeof base);
    ct_poison(c, one, b.nq);
    llm_cuda_tuning t;
    CT_OK(c, llm_cuda_get_tuning(c, &t));
    t.rows_stationary = stationary;
    CT_OK(c, llm_cuda_set_tuning(c, &t));
    llm_cuda_attn a = {dq, b.dk, b.dv, b.dout, n, {27, dpos}, s.h, s.kvh, s.hd, qs};
    CT_OK(c, llm_cuda_attention_rows(c, &a));
    for (int32_t i = 0; i < n; i++) {
        llm_cuda_attn a1 = {dq + (size_t)i * qs, b.dk, b.dv, one + (size_t)i * qd, 1,
                            {27u + (uint32_t)i, dpos}, s.h, s.kvh, s.hd, qs};
        CT_OK(c, llm_cuda_attention(c, &a1));
    }
    float *got = malloc(b.nq * sizeof *got);
    REQUIRE(got);
    ct_get(c, b.o, b.dout, b.nq * sizeof(float));
    ct_get(c, got, one, b.nq * sizeof(float));
    CHECK_INT_EQ(memcmp(b.o, got, b.nq * sizeof(float)), 0);
    reference(&s, b.q, b.k, b.v, b.ref); /* and both are the attention */
    CHECK(ct_max_err(b.o, b.ref, b.nq) <= 2e-5);
    free(got);
    free(wide);
    llm_cuda_mfree(c, dq);
    llm_cuda_mfree(c, one);
    llm_cuda_mfree(c, dpos);
    teardown(c, &b);
}

static void verify_rows(void)
{
    llm_cuda *c = ct_open(8, 8 * 64, 256, 8);
    static const int32_t ns[] = {2, 9, 17, 32};
    for (int st = 0; st <= 1; st++)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            verify_rows_case(c, ns[i], st);
    llm_cuda_attn a = {NULL, NULL, NULL, NULL, 33, {0, NULL}, 8, 4, 64, 0};
    CHECK_INT_EQ(llm_cuda_attention_rows(c, &a), LLM_EINVAL);
    llm_cuda_free(c);
}

static const ct_case cases[] = {
    {"decode_pieces", decode_pieces}, {"decode_block_kernel", decode_block_kernel},
    {"prefill_gemm_chunks", prefill_gemm_chunks}, {"q_stride", q_stride},
    {"decode_step_pdl", decode_step_pdl},
    {"decode_mha", decode_mha}, {"decode_gqa", decode_gqa},
    {"decode_long", decode_long}, {"verify_split", verify_split},
    {"prefill_tiled", prefill_tiled}, {"prefill_offset", prefill_offset},
    {"graph_positions", graph_positions}, {"prefill_gemm", prefill_gemm},
    {"verify_rows", verify_rows},
};

CT_MAIN(cases)
