/* bench_llama — the CUDA backend's speed on synthetic bf16 llama models
 * shaped like Llama-3.2-1B and Llama-3.1-8B, against the device's own
 * ceilings measured in the same run.
 *
 * Printed, one JSON object per line:
 *   {"bench":"copy", ...}     device-to-device copy bandwidth (bytes read +
 *                             written per second), the memory ceiling;
 *   {"bench":"gemm_peak",...} an 8192^3 bf16 cuBLAS product (fp32
 *                             accumulation), the matrix ceiling;
 *   {"bench":"decode",...}    greedy decode tokens/s of the whole per-token
 *                             stack (embedding, every layer, norm, head,
 *                             argmax) replayed as one CUDA graph, and the
 *                             same launched op by op, each with and without
 *                             programmatic dependent launch and with several
 *                             prefetch depths; weight bytes per token / time
 *                             as a fraction of the copy bandwidth;
 *   {"bench":"decode_check",...} whether the default graph and plain direct
 *                             launches give bit-identical logits;
 *   {"bench":"decode_products_only",...} the step's products alone;
 *   {"bench":"prefill",...}   one 2048-token prefill (cuBLAS products,
 *                             chunked causal attention on the tensor
 *                             cores), TFLOP/s against the peak, with the
 *                             products alone and the attention alone.
 *
 * The models are the llm_cuda operations composed the way the engine's
 * forward composes them, with random weights filled on the device, so the
 * numbers need no model file. The q/k/v matrices of a layer are stored as
 * one matrix (decode reads it in one pass and rotates/stores in its
 * epilogue; prefill multiplies it once and attention reads q from the
 * fused rows), and gate/up as one matrix with alternating rows (gate_i,
 * up_i), so SwiGLU folds into the decode product and follows the prefill
 * product as one pass over interleaved pairs. Residual adds fold into the
 * products (decode epilogue, cuBLAS beta = 1 in prefill). Prefill attention
 * runs on the tensor cores (llm_cuda_reserve_attention_gemm).
 *
 * Usage: bench_llama [1b|8b|all] [decode_tokens] [reps]
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "phasemark/engine.h"
#include "quant.h"

typedef struct shape {
    const char *name;
    int32_t dim, layers, heads, kv_heads, ffn, vocab, tied;
} shape;

static const shape shapes[] = {
    {"llama-1b", 2048, 16, 32, 8, 8192, 128256, 1},
    {"llama-8b", 4096, 32, 32, 8, 14336, 128256, 0},
};

#define PREFILL_N 2048
#define CTX 4096

typedef struct layer {
    llm_cuda_weight qkv, o, gu, down;
    llm_cuda_weight q, k, v; /* row views into qkv */
    float *attn_norm, *ffn_norm;
    float *kc, *vc; /* [CTX][kv_dim] */
} layer;

typedef struct model {
    shape s;
    int32_t hd, q_dim, kv_dim;
    llm_cuda_weight embd, out;
    float *out_norm;
    layer *L;
    double *freq;
    float *x, *xb, *xb2, *q, *att, *hb, *hb2, *logits;
    int32_t *tok;
    uint64_t weight_bytes; /* matrix bytes read per decode token */
} model;

static llm_cuda *cu;

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_llama: %s: %d (%s)\n", what, rc, llm_cuda_error(cu));
    exit(1);
}

#define OK(call)                  \
    do {                          \
        int rc_ = (call);         \
        if (rc_ != 0)             \
            die(#call, rc_);      \
    } while (0)

static void *dev(size_t bytes)
{
    void *p = NULL;
    OK(llm_cuda_malloc(cu, bytes, &p));
    return p;
}

static uint64_t seed_counter = 1;

/* A bf16 matrix with entries uniform in +-sqrt(3/cols) (unit-variance rows
 * so activations stay O(1) through the stack). */
static void random_weight(llm_cuda_weight *w, int64_t rows, int64_t cols)
{
    OK(llm_cuda_weight_alloc(cu, LLM_TYPE_BF16, cols, rows, w));
    OK(llm_cuda_fill_uniform(cu, w->data, LLM_TYPE_BF16, (size_t)rows * (size_t)cols,
                             seed_counter++, sqrtf(3.0f / (float)cols)));
}

static llm_cuda_weight view(const llm_cuda_weight *w, int64_t row0, int64_t rows)
{
    llm_cuda_weight v = *w;
    v.data = (char *)w->data + (size_t)row0 * (size_t)w->cols * 2;
    v.rows = rows;
    v.bytes = (size_t)rows * (size_t)w->cols * 2;
    return v;
}

static float *norm_vector(int32_t dim)
{
    float *h = malloc((size_t)dim * sizeof *h), *d = dev((size_t)dim * sizeof *d);
    if (!h)
        die("malloc", -1);
    for (int32_t i = 0; i < dim; i++)
        h[i] = 1.0f + 0.1f * sinf((float)i);
    OK(llm_cuda_upload(cu, d, h, (size_t)dim * sizeof *h));
    OK(llm_cuda_sync(cu));
    free(h);
    return d;
}

static void build(model *m, const shape *s)
{
    memset(m, 0, sizeof *m);
    m->s = *s;
    m->hd = s->dim / s->heads;
    m->q_dim = s->heads * m->hd;
    m->kv_dim = s->kv_heads * m->hd;
    random_weight(&m->embd, s->vocab, s->dim);
    if (s->tied)
        m->out = m->embd;
    else
        random_weight(&m->out, s->vocab, s->dim);
    m->out_norm = norm_vector(s->dim);
    m->L = calloc((size_t)s->layers, sizeof *m->L);
    if (!m->L)
        die("calloc", -1);
    for (int32_t l = 0; l < s->layers; l++) {
        layer *L = &m->L[l];
        random_weight(&L->qkv, m->q_dim + 2 * m->kv_dim, s->dim);
        random_weight(&L->o, s->dim, m->q_dim);
        random_weight(&L->gu, 2 * (int64_t)s->ffn, s->dim);
        random_weight(&L->down, s->dim, s->ffn);
        L->q = view(&L->qkv, 0, m->q_dim);
        L->k = view(&L->qkv, m->q_dim, m->kv_dim);
        L->v = view(&L->qkv, m->q_dim + m->kv_dim, m->kv_dim);
        L->attn_norm = norm_vector(s->dim);
        L->ffn_norm = norm_vector(s->dim);
        L->kc = dev((size_t)CTX * m->kv_dim * sizeof(float));
        L->vc = dev((size_t)CTX * m->kv_dim * sizeof(float));
        m->weight_bytes += L->qkv.bytes + L->o.bytes + L->gu.bytes + L->down.bytes;
    }
    m->weight_bytes += m->out.bytes;
    double *f = malloc((size_t)(m->hd / 2) * sizeof *f);
    if (!f)
        die("malloc", -1);
    for (int32_t i = 0; i < m->hd / 2; i++)
        f[i] = pow(500000.0, -2.0 * i / m->hd);
    m->freq = dev((size_t)(m->hd / 2) * sizeof *f);
    OK(llm_cuda_upload(cu, m->freq, f, (size_t)(m->hd / 2) * sizeof *f));
    free(f);
    size_t n = PREFILL_N;
    m->x = dev(n * s->dim * sizeof(float));
    m->xb = dev(n * s->dim * sizeof(float));
    m->xb2 = dev(n * s->dim * sizeof(float));
    m->q = dev(n * (m->q_dim + 2 * m->kv_dim) * sizeof(float));
    m->att = dev(n * m->q_dim * sizeof(float));
    m->hb = dev(n * 2 * (size_t)s->ffn * sizeof(float));
    m->hb2 = dev(n * (size_t)s->ffn * sizeof(float));
    m->logits = dev((size_t)s->vocab * sizeof(float));
    m->tok = dev(PREFILL_N * sizeof(int32_t));
    /* Defined contents everywhere (the products-only pass reads buffers the
     * step has not written). */
    float *bufs[] = {m->x, m->xb, m->xb2, m->q, m->att, m->hb, m->hb2};
    size_t lens[] = {n * s->dim, n * s->dim, n * s->dim, n * (m->q_dim + 2 * m->kv_dim),
                     n * m->q_dim, n * 2 * (size_t)s->ffn, n * (size_t)s->ffn};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        OK(llm_cuda_fill_uniform(cu, bufs[i], LLM_TYPE_F32, lens[i], seed_counter++, 1.0f));
    OK(llm_cuda_sync(cu));
}

static void release(model *m)
{
    for (int32_t l = 0; l < m->s.layers; l++) {
        layer *L = &m->L[l];
        llm_cuda_weight_release(cu, &L->qkv);
        llm_cuda_weight_release(cu, &L->o);
        llm_cuda_weight_release(cu, &L->gu);
        llm_cuda_weight_release(cu, &L->down);
        llm_cuda_mfree(cu, L->attn_norm);
        llm_cuda_mfree(cu, L->ffn_norm);
        llm_cuda_mfree(cu, L->kc);
        llm_cuda_mfree(cu, L->vc);
    }
    free(m->L);
    if (!m->s.tied)
        llm_cuda_weight_release(cu, &m->out);
    llm_cuda_weight_release(cu, &m->embd);
    void *bufs[] = {m->out_norm, m->freq, m->x, m->xb, m->xb2, m->q,
                    m->att, m->hb, m->hb2, m->logits, m->tok};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        llm_cuda_mfree(cu, bufs[i]);
}

/* One decode step for the token in m->tok[0] at the position in the
 * register; leaves the argmax in m->tok[0] and advances the register. Five
 * kernels a layer: the q/k/v product with the RMSNorm folded in and RoPE +
 * cache store in its epilogue, attention (split-K, the last block of each
 * head merging), the output product adding into the residual, the
 * gate/up product with RMSNorm and SwiGLU folded in, the down product
 * adding into the residual. */
#define DECODE_KERNELS_PER_LAYER 5

static void decode_step(model *m)
{
    const shape *s = &m->s;
    llm_cuda_positions p = {0, llm_cuda_pos(cu)};
    int32_t qkv_w = m->q_dim + 2 * m->kv_dim;
    OK(llm_cuda_embed(cu, &m->embd, m->tok, 1, m->x));
    for (int32_t l = 0; l < s->layers; l++) {
        layer *L = &m->L[l];
        llm_cuda_rope_store rs = {p, m->freq, 1.0f, s->heads, s->kv_heads, m->hd, L->kc, L->vc};
        llm_cuda_mv_fuse fq = {LLM_CUDA_MV_NORM | LLM_CUDA_MV_ROPE_STORE, L->attn_norm, 1e-5f,
                               &rs};
        llm_cuda_mv_fuse fa = {LLM_CUDA_MV_ACCUMULATE, NULL, 0.0f, NULL};
        llm_cuda_mv_fuse fg = {LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS, L->ffn_norm, 1e-5f,
                               NULL};
        OK(llm_cuda_matvec_fused(cu, &L->qkv, m->x, m->q, &fq));
        llm_cuda_attn a = {m->q, L->kc, L->vc, m->att, 1, p, s->heads, s->kv_heads, m->hd,
                           qkv_w};
        OK(llm_cuda_attention(cu, &a));
        OK(llm_cuda_matvec_fused(cu, &L->o, m->att, m->x, &fa));
        OK(llm_cuda_matvec_fused(cu, &L->gu, m->x, m->hb, &fg));
        OK(llm_cuda_matvec_fused(cu, &L->down, m->hb, m->x, &fa));
    }
    llm_cuda_mv_fuse fo = {LLM_CUDA_MV_NORM, m->out_norm, 1e-5f, NULL};
    OK(llm_cuda_matvec_fused(cu, &m->out, m->x, m->logits, &fo));
    OK(llm_cuda_argmax(cu, m->logits, 1, s->vocab, m->tok));
    OK(llm_cuda_pos_advance(cu, 1));
}

/* The same step's weight reads alone: every product, nothing else (the
 * ceiling the fused step is compared with). */
static void products_only(model *m)
{
    llm_cuda_mv_fuse f0 = {0, NULL, 0.0f, NULL};
    for (int32_t l = 0; l < m->s.layers; l++) {
        layer *L = &m->L[l];
        OK(llm_cuda_matvec_fused(cu, &L->qkv, m->x, m->q, &f0));
        OK(llm_cuda_matvec_fused(cu, &L->o, m->att, m->xb2, &f0));
        OK(llm_cuda_matvec_fused(cu, &L->gu, m->xb, m->hb, &f0));
        OK(llm_cuda_matvec_fused(cu, &L->down, m->hb2, m->xb2, &f0));
    }
    OK(llm_cuda_matvec_fused(cu, &m->out, m->xb, m->logits, &f0));
}

/* Prefill of n tokens at position 0 (host base), logits of the last row.
 * Per layer: RMSNorm, one q/k/v product (rows [n][q|k|v]), RoPE + cache
 * store over all rows, attention reading q from the fused rows, the output
 * product adding into the residual (cuBLAS beta = 1), RMSNorm, the
 * interleaved gate/up product, SwiGLU, the down product adding into the
 * residual. */
static void prefill(model *m, int32_t n)
{
    const shape *s = &m->s;
    llm_cuda_positions p = {0, NULL};
    int32_t qkv_w = m->q_dim + 2 * m->kv_dim;
    OK(llm_cuda_embed(cu, &m->embd, m->tok, n, m->x));
    for (int32_t l = 0; l < s->layers; l++) {
        layer *L = &m->L[l];
        OK(llm_cuda_rmsnorm(cu, m->xb, m->x, L->attn_norm, n, s->dim, 1e-5f));
        OK(llm_cuda_matmul(cu, &L->qkv, m->xb, n, m->q));
        OK(llm_cuda_rope_qkv_store(cu, m->q, n, qkv_w, s->heads, s->kv_heads, m->hd, p,
                                   m->freq, 1.0f, L->kc, L->vc));
        llm_cuda_attn a = {m->q, L->kc, L->vc, m->att, n, p, s->heads, s->kv_heads, m->hd,
                           qkv_w};
        OK(llm_cuda_attention(cu, &a));
        OK(llm_cuda_matmul_acc(cu, &L->o, m->att, n, m->x));
        OK(llm_cuda_rmsnorm(cu, m->xb, m->x, L->ffn_norm, n, s->dim, 1e-5f));
        OK(llm_cuda_matmul(cu, &L->gu, m->xb, n, m->hb)); /* gate/up interleaved */
        OK(llm_cuda_swiglu_pairs(cu, m->hb2, m->hb, (size_t)n * s->ffn));
        OK(llm_cuda_matmul_acc(cu, &L->down, m->hb2, n, m->x));
    }
    OK(llm_cuda_rmsnorm(cu, m->xb, m->x + (size_t)(n - 1) * s->dim, m->out_norm, 1,
                        s->dim, 1e-5f));
    OK(llm_cuda_matmul(cu, &m->out, m->xb, 1, m->logits));
}

/* The prefill's matrix products alone (the same calls, nothing between). */
static void prefill_products(model *m, int32_t n)
{
    for (int32_t l = 0; l < m->s.layers; l++) {
        layer *L = &m->L[l];
        OK(llm_cuda_matmul(cu, &L->qkv, m->xb, n, m->q));
        OK(llm_cuda_matmul_acc(cu, &L->o, m->att, n, m->xb2));
        OK(llm_cuda_matmul(cu, &L->gu, m->xb, n, m->hb));
        OK(llm_cuda_matmul_acc(cu, &L->down, m->hb2, n, m->xb2));
    }
}

/* The prefill's attention alone (every layer's call, on the caches the last
 * prefill filled). */
static void prefill_attention(model *m, int32_t n)
{
    const shape *s = &m->s;
    llm_cuda_positions p = {0, NULL};
    int32_t qkv_w = m->q_dim + 2 * m->kv_dim;
    for (int32_t l = 0; l < s->layers; l++) {
        layer *L = &m->L[l];
        llm_cuda_attn a = {m->q, L->kc, L->vc, m->att, n, p, s->heads, s->kv_heads, m->hd,
                           qkv_w};
        OK(llm_cuda_attention(cu, &a));
    }
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* Device copy of 2 GiB; bytes read + written per second. */
static double copy_bandwidth(int reps)
{
    size_t bytes = (size_t)2 << 30;
    void *a = dev(bytes), *b = dev(bytes);
    OK(llm_cuda_fill_uniform(cu, a, LLM_TYPE_F32, bytes / 4, 7, 1.0f));
    OK(llm_cuda_copy(cu, b, a, bytes)); /* warm-up */
    float t[32];
    for (int r = 0; r < reps; r++) {
        OK(llm_cuda_event_record(cu, 0));
        OK(llm_cuda_copy(cu, r % 2 ? a : b, r % 2 ? b : a, bytes));
        OK(llm_cuda_event_record(cu, 1));
        OK(llm_cuda_elapsed_ms(cu, 0, 1, &t[r]));
    }
    float ms = median(t, reps);
    double bw = 2.0 * (double)bytes / (ms * 1e-3);
    printf("{\"bench\":\"copy\",\"bytes\":%zu,\"median_ms\":%.4f,\"reps\":%d,"
           "\"bandwidth_GBps\":%.1f}\n", bytes, ms, reps, bw / 1e9);
    llm_cuda_mfree(cu, a);
    llm_cuda_mfree(cu, b);
    return bw;
}

/* 8192^3 bf16 product on random data. */
static double gemm_peak(int reps)
{
    const int32_t n = 8192;
    size_t e = (size_t)n * n;
    void *a = dev(e * 2), *b = dev(e * 2);
    float *c = dev(e * 4);
    OK(llm_cuda_fill_uniform(cu, a, LLM_TYPE_BF16, e, 11, 1.0f));
    OK(llm_cuda_fill_uniform(cu, b, LLM_TYPE_BF16, e, 12, 1.0f));
    for (int i = 0; i < 3; i++)
        OK(llm_cuda_gemm_bf16(cu, n, n, n, a, b, c));
    float t[32];
    for (int r = 0; r < reps; r++) {
        OK(llm_cuda_event_record(cu, 0));
        OK(llm_cuda_gemm_bf16(cu, n, n, n, a, b, c));
        OK(llm_cuda_event_record(cu, 1));
        OK(llm_cuda_elapsed_ms(cu, 0, 1, &t[r]));
    }
    float ms = median(t, reps);
    double flops = 2.0 * (double)n * n * n / (ms * 1e-3);
    printf("{\"bench\":\"gemm_peak\",\"m\":%d,\"n\":%d,\"k\":%d,\"median_ms\":%.4f,"
           "\"reps\":%d,\"TFLOPs\":%.1f}\n", n, n, n, ms, reps, flops / 1e12);
    llm_cuda_mfree(cu, a), llm_cuda_mfree(cu, b), llm_cuda_mfree(cu, c);
    return flops;
}

static void set_tokens(model *m, int32_t n)
{
    int32_t *h = malloc((size_t)n * sizeof *h);
    if (!h)
        die("malloc", -1);
    for (int32_t i = 0; i < n; i++)
        h[i] = (int32_t)((i * 7919 + 13) % m->s.vocab);
    OK(llm_cuda_upload(cu, m->tok, h, (size_t)n * sizeof *h));
    OK(llm_cuda_sync(cu));
    free(h);
}

/* Decode `steps` tokens from position start, graph replays or direct. */
static float time_decode(model *m, llm_cuda_graph *g, uint32_t start, int steps)
{
    OK(llm_cuda_pos_set(cu, start));
    OK(llm_cuda_event_record(cu, 0));
    for (int i = 0; i < steps; i++) {
        if (g)
            OK(llm_cuda_graph_launch(cu, g));
        else
            decode_step(m);
    }
    OK(llm_cuda_event_record(cu, 1));
    float ms;
    OK(llm_cuda_elapsed_ms(cu, 0, 1, &ms));
    return ms;
}

/* The launch variants timed for decode: programmatic dependent launch on
 * or off, how far ahead each matrix-vector warp prefetches before its
 * wait, how decode attention cuts the context (0: by the reservation; N:
 * each row's context into at most N pieces) and which split-K kernel runs
 * (1: the warp kernel, 0: the block kernel); the cut and the kernel change
 * the summation order and so may change the last token. The first is the
 * backend's default. */
typedef struct variant {
    const char *launch;
    int pdl, prefetch, pieces, kernel;
} variant;

static const variant variants[] = {
    {"graph", 1, 0, 16, 1}, {"direct", 1, 0, 16, 1}, {"graph", 0, 0, 16, 1},
    {"direct", 0, 0, 16, 1}, {"graph", 1, 0, 16, 0}, {"graph", 1, 0, 0, 0},
    {"graph", 1, 0, 0, 1}, {"graph", 1, 1, 16, 1},
};
#define NVAR (sizeof variants / sizeof variants[0])

static void set_variant(const variant *v)
{
    llm_cuda_tuning t;
    OK(llm_cuda_get_tuning(cu, &t));
    t.pdl = v->pdl;
    t.mv_prefetch = v->prefetch;
    t.attn_pieces = v->pieces;
    t.attn_decode = v->kernel;
    OK(llm_cuda_set_tuning(cu, &t));
}

static void set_chunk(int32_t chunk)
{
    llm_cuda_tuning t;
    OK(llm_cuda_get_tuning(cu, &t));
    t.attn_chunk = chunk;
    OK(llm_cuda_set_tuning(cu, &t));
}

/* Logits of one step for token 17 at position 40, graph or direct. */
static void one_step_logits(model *m, llm_cuda_graph *g, float *host)
{
    int32_t t = 17;
    OK(llm_cuda_upload(cu, m->tok, &t, sizeof t));
    OK(llm_cuda_pos_set(cu, 40));
    if (g)
        OK(llm_cuda_graph_launch(cu, g));
    else
        decode_step(m);
    OK(llm_cuda_download(cu, host, m->logits, (size_t)m->s.vocab * sizeof(float)));
}

/* Decode attention alone: every layer's call at the step's positions (the
 * caches the timed steps filled), as a graph; milliseconds per token. */
static void attention_only(model *m, int steps, int reps, int kernel)
{
    const shape *s = &m->s;
    llm_cuda_positions p = {0, llm_cuda_pos(cu)};
    llm_cuda_graph *g = NULL;
    OK(llm_cuda_graph_begin(cu));
    for (int32_t l = 0; l < s->layers; l++) {
        layer *L = &m->L[l];
        llm_cuda_attn a = {m->q, L->kc, L->vc, m->att, 1, p, s->heads, s->kv_heads, m->hd,
                           m->q_dim + 2 * m->kv_dim};
        OK(llm_cuda_attention(cu, &a));
    }
    OK(llm_cuda_pos_advance(cu, 1));
    OK(llm_cuda_graph_end(cu, &g));
    float t[32];
    for (int r = 0; r < reps; r++)
        t[r] = time_decode(m, g, 16, steps);
    float ms = median(t, reps);
    llm_cuda_graph_free(g);
    printf("{\"bench\":\"decode_attention_only\",\"model\":\"%s\",\"attn_decode\":%d,"
           "\"layers\":%d,\"tokens\":%d,\"reps\":%d,\"ms_per_token\":%.4f}\n", s->name, kernel,
           s->layers, steps, reps, ms / steps);
}

static void bench_decode(model *m, double copy_bw, int steps, int reps)
{
    set_tokens(m, 1);
    OK(llm_cuda_pos_set(cu, 0));
    decode_step(m); /* warm-up: module load, cuBLAS-free path */
    OK(llm_cuda_sync(cu));
    llm_cuda_graph *g[NVAR] = {NULL};
    for (size_t v = 0; v < NVAR; v++) {
        if (strcmp(variants[v].launch, "graph"))
            continue;
        set_variant(&variants[v]);
        OK(llm_cuda_graph_begin(cu));
        decode_step(m);
        OK(llm_cuda_graph_end(cu, &g[v]));
        (void)time_decode(m, g[v], 16, 8); /* warm the graph */
    }
    /* Every variant computes the same bits: the default graph against
     * plain direct launches, one step's logits. */
    float *la = malloc((size_t)m->s.vocab * sizeof(float));
    float *lb = malloc((size_t)m->s.vocab * sizeof(float));
    if (!la || !lb)
        die("malloc", -1);
    const variant plain = {"direct", 0, 0, variants[0].pieces, variants[0].kernel};
    set_variant(&variants[0]);
    one_step_logits(m, g[0], la);
    set_variant(&plain);
    one_step_logits(m, NULL, lb);
    int same = memcmp(la, lb, (size_t)m->s.vocab * sizeof(float)) == 0;
    printf("{\"bench\":\"decode_check\",\"model\":\"%s\",\"graph_pdl_vs_direct_plain\":\"%s\"}\n",
           m->s.name, same ? "identical" : "DIFFERENT");
    free(la);
    free(lb);
    float t[NVAR][32];
    int32_t last[NVAR];
    for (int r = 0; r < reps; r++)
        for (size_t v = 0; v < NVAR; v++) {
            set_variant(&variants[v]);
            set_tokens(m, 1);
            t[v][r] = time_decode(m, g[v], 16, steps);
            OK(llm_cuda_download(cu, &last[v], m->tok, sizeof last[v]));
        }
    for (int pdl = 1; pdl >= 0; pdl--) {
        llm_cuda_graph *gp = NULL;
        variant pv = variants[0];
        pv.pdl = pdl;
        set_variant(&pv);
        OK(llm_cuda_graph_begin(cu));
        products_only(m);
        OK(llm_cuda_graph_end(cu, &gp));
        float tp[32];
        OK(llm_cuda_graph_launch(cu, gp));
        for (int r = 0; r < reps; r++)
            tp[r] = time_decode(m, gp, 16, steps);
        float mp = median(tp, reps);
        llm_cuda_graph_free(gp);
        double tps = steps / (mp * 1e-3), wbw = (double)m->weight_bytes * tps;
        printf("{\"bench\":\"decode_products_only\",\"model\":\"%s\",\"pdl\":%d,\"tokens\":%d,"
               "\"reps\":%d,\"median_ms\":%.3f,\"tokens_per_s\":%.2f,\"weight_GBps\":%.1f,"
               "\"fraction_of_copy_bw\":%.3f}\n", m->s.name, pdl, steps, reps, mp, tps,
               wbw / 1e9, wbw / copy_bw);
    }
    for (int kern = 1; kern >= 0; kern--) {
        variant av = variants[0];
        av.kernel = kern;
        set_variant(&av);
        attention_only(m, steps, reps, kern);
    }
    set_variant(&variants[0]);
    for (size_t v = 0; v < NVAR; v++) {
        float ms = median(t[v], reps);
        double tps = steps / (ms * 1e-3);
        double wbw = (double)m->weight_bytes * tps;
        printf("{\"bench\":\"decode\",\"model\":\"%s\",\"dtype\":\"bf16\",\"launch\":\"%s\","
               "\"pdl\":%d,\"mv_prefetch\":%d,\"attn_pieces\":%d,\"attn_decode\":%d,"
               "\"kernels_per_token\":%d,"
               "\"tokens\":%d,\"reps\":%d,\"context_start\":16,\"median_ms\":%.3f,"
               "\"tokens_per_s\":%.2f,\"weight_bytes_per_token\":%llu,"
               "\"weight_GBps\":%.1f,\"fraction_of_copy_bw\":%.3f,\"last_token\":%d}\n",
               m->s.name, variants[v].launch, variants[v].pdl, variants[v].prefetch,
               variants[v].pieces, variants[v].kernel, DECODE_KERNELS_PER_LAYER * m->s.layers + 4, steps, reps, ms, tps,
               (unsigned long long)m->weight_bytes, wbw / 1e9, wbw / copy_bw, last[v]);
        llm_cuda_graph_free(g[v]);
    }
}

/* Median milliseconds of `reps` runs of fn(m, n). */
static float time_ms(void (*fn)(model *, int32_t), model *m, int32_t n, int reps)
{
    float t[32];
    for (int r = 0; r < reps; r++) {
        OK(llm_cuda_event_record(cu, 0));
        fn(m, n);
        OK(llm_cuda_event_record(cu, 1));
        OK(llm_cuda_elapsed_ms(cu, 0, 1, &t[r]));
    }
    return median(t, reps);
}

/* Query rows per chunk of prefill attention: the default (automatic) first,
 * then other cuts for comparison. */
static const int32_t chunks[] = {0, 256};

static void bench_prefill(model *m, double peak, int reps)
{
    const shape *s = &m->s;
    int32_t n = PREFILL_N;
    set_tokens(m, n);
    prefill(m, n); /* warm-up: cuBLAS heuristics and handles */
    OK(llm_cuda_sync(cu));
    float mp = time_ms(prefill_products, m, n, reps);
    /* Matrix FLOPs of every layer for n rows, causal attention (q k^T and
     * p v over n(n+1)/2 pairs per head), the head for one row. */
    double layer_params = (double)s->dim * (m->q_dim + 2.0 * m->kv_dim) +
                          (double)m->q_dim * s->dim + 3.0 * s->dim * s->ffn;
    double attn = 2.0 * 2.0 * ((double)n * (n + 1) / 2.0) * m->hd * s->heads;
    double flops = s->layers * (2.0 * n * layer_params + attn) + 2.0 * s->dim * s->vocab;
    double prate = s->layers * 2.0 * n * layer_params / (mp * 1e-3);
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        set_chunk(chunks[i]);
        prefill(m, n);
        float ms = time_ms(prefill, m, n, reps);
        float ma = time_ms(prefill_attention, m, n, reps);
        double rate = flops / (ms * 1e-3);
        printf("{\"bench\":\"prefill\",\"model\":\"%s\",\"dtype\":\"bf16\",\"tokens\":%d,"
               "\"attn_chunk\":%d,\"reps\":%d,\"median_ms\":%.3f,\"tokens_per_s\":%.0f,"
               "\"TFLOPs\":%.1f,\"fraction_of_gemm_peak\":%.3f,\"products_only_ms\":%.3f,"
               "\"products_only_TFLOPs\":%.1f,\"attention_only_ms\":%.3f}\n", s->name, n,
               chunks[i], reps, ms, n / (ms * 1e-3), rate / 1e12, rate / peak, mp,
               prate / 1e12, ma);
    }
    set_chunk(0);
}

static long arg_long(const char *s, long lo, long hi, const char *what)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        fprintf(stderr, "bench_llama: bad %s '%s' (%ld..%ld)\n", what, s, lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "all";
    int steps = argc > 2 ? (int)arg_long(argv[2], 1, 100000, "decode_tokens") : 128;
    int reps = argc > 3 ? (int)arg_long(argv[3], 1, 32, "reps") : 5;
    if (strcmp(which, "1b") && strcmp(which, "8b") && strcmp(which, "all")) {
        fprintf(stderr, "usage: bench_llama [1b|8b|all] [decode_tokens] [reps]\n");
        return 2;
    }
    int ndev = 0;
    char err[256];
    llm_cuda_device_count(&ndev, err, sizeof err);
    if (ndev <= 0) {
        fprintf(stderr, "bench_llama: no CUDA device (%s)\n", err);
        return 1;
    }
    if (llm_cuda_create(0, &cu, err, sizeof err) != 0) {
        fprintf(stderr, "bench_llama: %s\n", err);
        return 1;
    }
    printf("{\"bench\":\"device\",\"name\":\"%s\",\"sms\":%d,\"memory_GiB\":%.1f}\n",
           llm_cuda_device_name(cu), llm_cuda_sm_count(cu),
           (double)llm_cuda_total_mem(cu) / (1u << 30));
    OK(llm_cuda_reserve(cu, PREFILL_N, 2 * 14336, CTX, 32));
    /* Room for chunks of up to 512 query rows of all 32 heads. */
    OK(llm_cuda_reserve_attention_gemm(cu, PREFILL_N, PREFILL_N, 8));
    double bw = copy_bandwidth(reps * 2);
    double peak = gemm_peak(reps * 2);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (strcmp(which, "all") && strstr(shapes[i].name, which) == NULL)
            continue;
        model m;
        build(&m, &shapes[i]);
        bench_decode(&m, bw, steps, reps);
        bench_prefill(&m, peak, reps);
        release(&m);
    }
    llm_cuda_free(cu);
    return 0;
}
