/* cpu_backend.c — the CPU implementation of the backend seam (backend.h).
 *
 * Matrix products take one of two paths by batch width n:
 *  - n below a threshold (decode, short verify): a matrix–vector loop over
 *    weight rows, claimed in chunks by the pool's threads. The kernels are
 *    register-blocked: each weight block is loaded and decoded once and
 *    applied to up to 8 activation rows (and a few weight rows interleave
 *    when there are few activation rows), each result bitwise the
 *    single-row kernel's (kernels.h, llm_matvec_fn), so a verify's rows
 *    equal the decodes they stand for. Quantized weights meet activations
 *    quantized once per call (llm_acts_quantize).
 *  - otherwise (prefill, long verify): a matrix product on row panels of
 *    the weight, again claimed by the pool's threads. F32 weights are used
 *    in place; other types are dequantized a panel at a time into per-thread
 *    scratch. The product is OpenBLAS sgemm, running single-threaded inside
 *    our workers so that one pool owns the cores, or the kernels' own
 *    product when OpenBLAS would run a pre-AVX2 core, or an AVX2 one under
 *    the avx512 set (choose_blas). The avx512 set's own product reads F16
 *    and BF16 rows itself (llm_type_kernels.gemm), with no f32 panel.
 * Everything else (norms, rope, attention, SwiGLU) is O(n * width) or
 * O(n * ctx * width) and runs in plain loops, attention across the pool.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "backend.h"
#include "forward.h"
#include "quant.h"
#include "cpu_ops.h"
#include "cpu_backend.h"
#include "cpu_weights.h"
#include "kernels.h"
#include "pool.h"

#if LLM_HAVE_OPENBLAS
#include <cblas.h>
#endif

/* Batch widths from which the matrix product beats the row loop, per
 * weight class (defaults; see llm_cpu_backend_set_gemm_min). The row loop
 * reads each weight once for all rows, so its cost grows only by the
 * kernel's compute per extra row; the product must first dequantize every
 * quantized weight to f32, which it amortizes only over many rows.
 * Measured on the 2-vCPU VM, all matrices of a model per pass, 2 threads:
 * F32 110M, ms per row at 4/8/12 rows: loop 13.5/10.9/11.9, product
 * 15.7/9.2/7.1; Q8_0 110M at 8/12/16: loop 4.2/4.1/6.0, product 5.4/3.9/5.5;
 * Q8_0 1B at 8/16/24: loop 90/86/90, product 150/89/78. */
#define LLM_CPU_GEMM_MIN_FLOAT 8
#define LLM_CPU_GEMM_MIN_QUANT 12
/* Most rows the row loop takes (its activation scratch is sized for it). */
#define LLM_CPU_ROWS_MAX 64
_Static_assert(LLM_CPU_ROWS_MAX <= LLM_ACTS_MAX, "the kernels take every row the loop may");
/* Weight rows per matrix-product call (dequantized together when the
 * weights are not f32). */
#define LLM_CPU_PANEL 256
/* Rows per unit of work on the matrix–vector path: small enough that a
 * preempted thread holds up little, large enough (about 100 KiB of a 2048-
 * wide Q8_0 matrix) that claiming it costs nothing. (Finer units for small
 * matrices, about four per thread, measured no faster on the 4.7M draft:
 * its 128-row matrices are bound by the hand-off, not the split.) */
#define LLM_CPU_GRAIN 48
/* Weight rows per unit of the batched product on quantized activations
 * (kt->batched): a multiple of its 16-row panels, and 40-90 units per
 * matrix of the shapes benchmarked, so a preempted thread holds up little. */
#define LLM_CPU_QPANEL 64
/* The panel product is called at panel starts only. */
_Static_assert(LLM_CPU_GRAIN % LLM_Q8P_ROWS == 0 && LLM_CPU_QPANEL % LLM_Q8P_ROWS == 0,
               "row-loop units and batched units are whole Q8_0 panels");
/* Positions the RoPE angle table holds (see rope_table). */
#define ROPE_ROWS 64

typedef struct cpu_backend {
    llm_backend base;
    llm_pool *pool;     /* owned with every backend sharing it (llm_pool_ref) */
    int pool_shared;    /* pool is another backend's (llm_backend_share_threads) */
    llm_kernels k;
    int use_blas;       /* batched products: OpenBLAS (1) or k.gemm_nt (0) */
    size_t swiglu_grain; /* elements per unit of a parallel SwiGLU (k's cost) */
    int32_t gemm_min_float; /* rows from which F32/F16/BF16 weights use the
                               matrix product */
    int32_t gemm_min_quant; /* the same for Q8_0/Q4_0 */
    int weights_mode;   /* LLM_CPU_WEIGHTS_* (cpu_weights.h) */
    llm_cpu_weights weights; /* the float matrices' copy (prepare), or none */
    llm_type_kernels q8_0_panels; /* the Q8_0 entry on the arena's panels
                                     (when k.q8_0_panels) */
    const llm_cpu_weights *peer_weights; /* another backend's arena read too
                                            (llm_cpu_backend_read_weights) */
    int64_t max_width;  /* widest row reserved for */
    uint32_t n_ctx;     /* longest context reserved for */
    float *qd;          /* [ROWS_MAX][max_width/32] activation scales */
    int8_t *qq;         /* [ROWS_MAX][max_width] activation quants */
    float *qdt;         /* [max_width/32][ROWS_MAX] + 8: qd block-major */
    int8_t *qb;         /* [max_width/32][ROWS_MAX][32]: qq block-major */
    int32_t *xbias;     /* [max_width/32][ROWS_MAX][8] (llm_acts) */
    int32_t *xsum;      /* [ROWS_MAX][max_width/32] (llm_acts) */
    float *panel;       /* [n_threads][PANEL][max_width] */
    float *scores;      /* [n_threads][n_ctx] attention scores */
    /* RoPE cosines and sines of the last positions rotated (rope_table):
     * [rope_n_max][rope_half_max] each, valid for rope_n positions from
     * rope_pos0 under rope_inv_freq/rope_scale when rope_valid. */
    float *rope_cos, *rope_sin;
    int32_t rope_n_max, rope_half_max;
    int rope_valid;
    int32_t rope_n, rope_half;
    uint32_t rope_pos0;
    const double *rope_inv_freq;
    float rope_scale;
} cpu_backend;

static cpu_backend *cpu(llm_backend *be)
{
    return (cpu_backend *)(void *)be;
}

/* Whether w's bytes are a copy in this backend's arena (cpu_weights.h) or
 * in that of the CPU backend whose weights it reads (a block head's, the
 * target's: llm_cpu_backend_read_weights). A tensor's dev may belong to
 * another backend (a CUDA target's matrices, which a CPU block head
 * reads through the shared output head and embedding), so only a dev
 * inside one of those arenas is taken. */
static int copied_tensor(const cpu_backend *c, const llm_tensor *w)
{
    return llm_cpu_weights_holds(&c->weights, w) ||
           (c->peer_weights && llm_cpu_weights_holds(c->peer_weights, w));
}

/* The bytes the kernels read of w: its copy, else the mapping. */
static const unsigned char *wbytes(const cpu_backend *c, const llm_tensor *w)
{
    return (const unsigned char *)(copied_tensor(c, w) ? w->dev : w->data);
}

static void *alloc64(size_t bytes)
{
    size_t rounded = (bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, rounded ? rounded : 64);
}

/* ---- memory ------------------------------------------------------------ */

static void *cpu_alloc(llm_backend *be, size_t bytes)
{
    (void)be;
    void *p = alloc64(bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

static void cpu_free(llm_backend *be, void *p)
{
    (void)be;
    free(p);
}

static void cpu_copy(llm_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes)
        memmove(dst, src, bytes);
}

static int cpu_reserve(llm_backend *be, uint32_t n_ctx, int64_t max_width)
{
    cpu_backend *c = cpu(be);
    size_t nth = (size_t)c->base.n_threads;
    if (max_width > c->max_width) {
        size_t w = (size_t)max_width;
        size_t scales = LLM_CPU_ROWS_MAX * (w / LLM_ACTS_QK + 1);
        float *qd = alloc64(scales * sizeof(float));
        int8_t *qq = alloc64(LLM_CPU_ROWS_MAX * w);
        /* Zeroed: the kernels load 8 lanes of scales and use n of them. */
        float *qdt = cpu_alloc(be, (scales + 8) * sizeof(float));
        int8_t *qb = alloc64(LLM_CPU_ROWS_MAX * w);
        int32_t *xbias = alloc64(LLM_CPU_ROWS_MAX * w / 4 * sizeof(int32_t));
        int32_t *xsum = alloc64(scales * sizeof(int32_t));
        float *panel = alloc64(nth * LLM_CPU_PANEL * w * sizeof(float));
        if (!qd || !qq || !qdt || !qb || !xbias || !xsum || !panel) {
            free(qd);
            free(qq);
            free(qdt);
            free(qb);
            free(xbias);
            free(xsum);
            free(panel);
            return LLM_ENOMEM;
        }
        free(c->qd);
        free(c->qq);
        free(c->qdt);
        free(c->qb);
        free(c->xbias);
        free(c->xsum);
        free(c->panel);
        c->qd = qd;
        c->qq = qq;
        c->qdt = qdt;
        c->qb = qb;
        c->xbias = xbias;
        c->xsum = xsum;
        c->panel = panel;
        c->max_width = max_width;
    }
    if (max_width / 2 > c->rope_half_max) {
        /* Positions per table: a decode or verify fits; a longer prefill
         * chunk computes its angles in place (cpu_rope). */
        int32_t half = (int32_t)(max_width / 2);
        float *co = alloc64((size_t)ROPE_ROWS * (size_t)half * sizeof(float));
        float *si = alloc64((size_t)ROPE_ROWS * (size_t)half * sizeof(float));
        if (!co || !si) {
            free(co);
            free(si);
            return LLM_ENOMEM;
        }
        free(c->rope_cos);
        free(c->rope_sin);
        c->rope_cos = co;
        c->rope_sin = si;
        c->rope_n_max = ROPE_ROWS;
        c->rope_half_max = half;
        c->rope_valid = 0;
    }
    if (n_ctx > c->n_ctx) {
        float *scores = alloc64(nth * n_ctx * sizeof(float));
        if (!scores)
            return LLM_ENOMEM;
        free(c->scores);
        c->scores = scores;
        c->n_ctx = n_ctx;
    }
    return 0;
}

/* ---- embedding, norms, elementwise -------------------------------------- */

/* The kernels for w's type. The model's load checked that every tensor's
 * type has an entry (cpu_supports_type), so this finds one. */
static const llm_type_kernels *kernels_for(const cpu_backend *c, const llm_tensor *w)
{
    if (w->type == LLM_TYPE_Q8_0 && c->k.q8_0_panels && copied_tensor(c, w))
        return &c->q8_0_panels;
    return llm_kernels_find(&c->k, w->type);
}

static void cpu_embed(llm_backend *be, const llm_model *m, const int32_t *ids, int32_t n,
                      float *out)
{
    const llm_tensor *embd = &m->tok_embd;
    llm_dequant_fn dequant = kernels_for(cpu(be), embd)->dequant;
    for (int32_t i = 0; i < n; i++) {
        const unsigned char *row = wbytes(cpu(be), embd) +
                                   (size_t)ids[i] * embd->row_bytes;
        dequant(row, out + (size_t)i * embd->ne0, (size_t)embd->ne0);
    }
}

/* y = x / rms(x) * w for one row whose sum of squares is ss. */
static void rms_scale(float *y, const float *x, const float *w, int32_t dim, double ss,
                      float eps)
{
    float scale = (float)(1.0 / sqrt(ss / dim + eps));
    for (int32_t i = 0; i < dim; i++)
        y[i] = x[i] * scale * w[i];
}

/* Sums of squares in double (dim can be thousands of squares): the kernel
 * set's, or each row in index order, where a row's sum is a chain of
 * dependent adds, so four rows go through one loop side by side and their
 * chains overlap. */
void llm_cpu_rmsnorm(llm_backend *be, float *y, const float *x, const float *w,
                        int32_t n, int32_t dim, float eps)
{
    const cpu_backend *c = cpu(be);
    if (c->k.sum_squares) {
        for (int32_t t = 0; t < n; t++) {
            const float *xr = x + (size_t)t * dim;
            rms_scale(y + (size_t)t * dim, xr, w, dim, c->k.sum_squares(xr, dim), eps);
        }
        return;
    }
    int32_t t = 0;
    for (; t + 4 <= n; t += 4) {
        const float *x0 = x + (size_t)t * dim, *x1 = x0 + dim, *x2 = x1 + dim, *x3 = x2 + dim;
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        for (int32_t i = 0; i < dim; i++) {
            s0 += (double)x0[i] * x0[i];
            s1 += (double)x1[i] * x1[i];
            s2 += (double)x2[i] * x2[i];
            s3 += (double)x3[i] * x3[i];
        }
        rms_scale(y + (size_t)t * dim, x0, w, dim, s0, eps);
        rms_scale(y + (size_t)(t + 1) * dim, x1, w, dim, s1, eps);
        rms_scale(y + (size_t)(t + 2) * dim, x2, w, dim, s2, eps);
        rms_scale(y + (size_t)(t + 3) * dim, x3, w, dim, s3, eps);
    }
    for (; t < n; t++) {
        const float *xr = x + (size_t)t * dim;
        double ss = 0.0;
        for (int32_t i = 0; i < dim; i++)
            ss += (double)xr[i] * xr[i];
        rms_scale(y + (size_t)t * dim, xr, w, dim, ss, eps);
    }
}

/* The rotation angles' cosines and sines for positions pos0..pos0+n-1,
 * [n][head_dim/2] each, into the backend's table, unless the table already
 * holds them: a forward rotates q and then k at the same positions, and the
 * double-precision cos/sin were most of the rotation's cost. */
static void rope_table(cpu_backend *c, int32_t n, uint32_t pos0, const llm_rope *r)
{
    int32_t half = r->head_dim / 2;
    if (c->rope_valid && c->rope_n == n && c->rope_pos0 == pos0 &&
        c->rope_inv_freq == r->inv_freq && c->rope_scale == r->scale && c->rope_half == half)
        return;
    for (int32_t t = 0; t < n; t++) {
        double pos = (double)(pos0 + (uint32_t)t) * r->scale;
        for (int32_t i = 0; i < half; i++) {
            double a = pos * r->inv_freq[i];
            c->rope_cos[(size_t)t * half + i] = (float)cos(a);
            c->rope_sin[(size_t)t * half + i] = (float)sin(a);
        }
    }
    c->rope_valid = 1;
    c->rope_n = n;
    c->rope_pos0 = pos0;
    c->rope_inv_freq = r->inv_freq;
    c->rope_scale = r->scale;
    c->rope_half = half;
}

/* The two elements of pair i of a head: adjacent (the llama layout), or i
 * and i + half (neox). */
static inline size_t rope_lo(const llm_rope *r, int32_t i)
{
    return r->neox ? (size_t)i : 2 * (size_t)i;
}

static inline size_t rope_hi(const llm_rope *r, int32_t i)
{
    return r->neox ? (size_t)i + (size_t)(r->head_dim / 2) : 2 * (size_t)i + 1;
}

void llm_cpu_rope(llm_backend *be, float *x, int32_t n, int32_t n_heads,
                     int32_t stride, uint32_t pos0, const llm_rope *r)
{
    cpu_backend *c = cpu(be);
    int32_t half = r->head_dim / 2;
    if (half > c->rope_half_max || n > c->rope_n_max) {
        /* Beyond the reserved table (a caller that skipped reserve): the
         * same values, computed in place. */
        c->rope_valid = 0;
        for (int32_t t = 0; t < n; t++) {
            double pos = (double)(pos0 + (uint32_t)t) * r->scale;
            float *row = x + (size_t)t * stride;
            for (int32_t i = 0; i < half; i++) {
                double a = pos * r->inv_freq[i];
                float co = (float)cos(a), si = (float)sin(a);
                for (int32_t h = 0; h < n_heads; h++) {
                    float *p = row + (size_t)h * r->head_dim;
                    float x0 = p[rope_lo(r, i)], x1 = p[rope_hi(r, i)];
                    p[rope_lo(r, i)] = x0 * co - x1 * si;
                    p[rope_hi(r, i)] = x0 * si + x1 * co;
                }
            }
        }
        return;
    }
    rope_table(c, n, pos0, r);
    for (int32_t t = 0; t < n; t++) {
        float *row = x + (size_t)t * stride;
        const float *co = c->rope_cos + (size_t)t * half, *si = c->rope_sin + (size_t)t * half;
        for (int32_t h = 0; h < n_heads; h++) {
            float *p = row + (size_t)h * r->head_dim;
            if (r->neox) {
                float *p1 = p + half;
                for (int32_t i = 0; i < half; i++) {
                    float x0 = p[i], x1 = p1[i];
                    p[i] = x0 * co[i] - x1 * si[i];
                    p1[i] = x0 * si[i] + x1 * co[i];
                }
                continue;
            }
            for (int32_t i = 0; i < half; i++) {
                float x0 = p[2 * i], x1 = p[2 * i + 1];
                p[2 * i] = x0 * co[i] - x1 * si[i];
                p[2 * i + 1] = x0 * si[i] + x1 * co[i];
            }
        }
    }
}

/* Elements per unit of the parallel SwiGLU; one thread does it all below
 * two units. A pool hand-off costs about as much as 512 scalar expf, or
 * some 3000 elements of the avx512 set's vector SwiGLU (about 1 ns each:
 * its division is most of it). */
#define SWIGLU_GRAIN_SCALAR 1024
#define SWIGLU_GRAIN_VECTOR 2048

typedef struct swiglu_job {
    cpu_backend *c;
    float *gate;
    const float *up;
    size_t len, grain;
    llm_pool_counter next;
} swiglu_job;

static void swiglu_worker(void *ctx, int32_t ith, int32_t nth)
{
    swiglu_job *j = ctx;
    int64_t b, e;
    (void)ith;
    (void)nth;
    while (llm_pool_next(&j->next, (int64_t)j->len, (int64_t)j->grain, &b, &e))
        j->c->k.swiglu(j->gate + b, j->up + b, (size_t)(e - b));
}

void llm_cpu_swiglu(llm_backend *be, float *gate, const float *up, size_t len)
{
    cpu_backend *c = cpu(be);
    size_t grain = c->swiglu_grain;
    if (len < 2 * grain || c->base.n_threads == 1) {
        c->k.swiglu(gate, up, len);
        return;
    }
    swiglu_job j = {c, gate, up, len, grain, {0}};
    llm_pool_run(c->pool, swiglu_worker, &j);
}

void llm_cpu_add(llm_backend *be, float *y, const float *x, size_t len)
{
    (void)be;
    for (size_t i = 0; i < len; i++)
        y[i] += x[i];
}

void llm_cpu_add_bias(llm_backend *be, float *y, const float *bias, int32_t n, int32_t width)
{
    for (int32_t r = 0; r < n; r++)
        llm_cpu_add(be, y + (size_t)r * width, bias, (size_t)width);
}

void llm_cpu_rope_tree(llm_backend *be, float *x, const llm_tree *tree, int32_t n_heads,
                       int32_t stride, uint32_t pos0, const llm_rope *r)
{
    /* One row at a time: a decode step rotates its one row so, and a
     * tree's rows are few (the table is rebuilt per row; cheap next to
     * the products). */
    for (int32_t t = 0; t < tree->n; t++)
        llm_cpu_rope(be, x + (size_t)t * stride, 1, n_heads, stride,
                     pos0 + (uint32_t)tree->depth[t], r);
}

/* ---- attention ----------------------------------------------------------- */

typedef struct attn_job {
    cpu_backend *c;
    const llm_attn *a;
    llm_pool_counter next;
} attn_job;

static void attend_one(cpu_backend *c, const llm_attn *a, int32_t t,
                       int32_t h, float *sc)
{
    int32_t hd = a->head_dim, kv_dim = a->n_kv_heads * hd;
    int32_t kvh = h / (a->n_heads / a->n_kv_heads);
    const float *q = a->q + (size_t)t * a->n_heads * hd + (size_t)h * hd;
    float *out = a->out + (size_t)t * a->n_heads * hd + (size_t)h * hd;
    uint32_t len = a->pos0 + (uint32_t)t + 1; /* causal: keys 0..pos */
    /* A sliding window drops the keys before pos-window+1: the softmax runs
     * over the last `window` rows only. Without one, first is 0 and the
     * call (and its float order) is the unwindowed one. */
    size_t first = a->window && len > a->window ? len - a->window : 0;
    const float *k = a->k + first * kv_dim + (size_t)kvh * hd;
    const float *v = a->v + first * kv_dim + (size_t)kvh * hd;
    c->k.attend(q, k, v, kv_dim, len - (uint32_t)first, hd, 1.0f / sqrtf((float)hd), sc, out);
}

/* attend_one for tree node t: the kernel set's attend written over a
 * gathered key list (its contract, kernels.h: the loop over the set's dot
 * and axpy, in key order), so a node's output is bitwise the decode step's
 * at its position after the context and its ancestors. */
static void attend_tree_one(cpu_backend *c, const llm_attn *a, int32_t t, int32_t h, float *sc)
{
    int32_t hd = a->head_dim, kv_dim = a->n_kv_heads * hd;
    int32_t kvh = h / (a->n_heads / a->n_kv_heads);
    const float *q = a->q + (size_t)t * a->n_heads * hd + (size_t)h * hd;
    float *out = a->out + (size_t)t * a->n_heads * hd + (size_t)h * hd;
    int32_t path[LLM_TREE_MAX];
    int32_t d = llm_tree_path(a->tree, t, path);
    uint32_t len = a->pos0 + (uint32_t)d + 1; /* keys of position pos0 + d */
    uint32_t first = a->window && len > a->window ? len - a->window : 0;
    float scale = 1.0f / sqrtf((float)hd), mx = -INFINITY;
    for (uint32_t p = first; p < len; p++) {
        size_t row = p < a->pos0 ? p : a->pos0 + (size_t)path[p - a->pos0];
        float s = c->k.dot(q, a->k + row * kv_dim + (size_t)kvh * hd, hd) * scale;
        sc[p - first] = s;
        mx = fmaxf(mx, s);
    }
    float sum = c->k.softmax_exp(sc, len - first, mx);
    memset(out, 0, (size_t)hd * sizeof(float));
    for (uint32_t p = first; p < len; p++) {
        size_t row = p < a->pos0 ? p : a->pos0 + (size_t)path[p - a->pos0];
        c->k.axpy(out, sc[p - first] / sum, a->v + row * kv_dim + (size_t)kvh * hd, hd);
    }
}

static void attn_worker(void *ctx, int32_t ith, int32_t nth)
{
    attn_job *j = ctx;
    const llm_attn *a = j->a;
    float *sc = j->c->scores + (size_t)ith * j->c->n_ctx;
    int64_t b, e;
    (void)nth;
    while (llm_pool_next(&j->next, (int64_t)a->n * a->n_heads, 1, &b, &e))
        (a->tree ? attend_tree_one : attend_one)(j->c, a, (int32_t)(b / a->n_heads),
                                                 (int32_t)(b % a->n_heads), sc);
}

void llm_cpu_attention(llm_backend *be, const llm_attn *a)
{
    attn_job j = {cpu(be), a, {0}};
    llm_pool_run(j.c->pool, attn_worker, &j);
}

/* ---- matmul -------------------------------------------------------------- */

static int cpu_supports_type(const llm_backend *be, uint32_t type)
{
    return llm_kernels_find(&((const cpu_backend *)(const void *)be)->k, type) != NULL;
}

/* One weight of the batched product (n from the gemm threshold on). */
typedef struct gemm_job {
    cpu_backend *c;
    const llm_type_kernels *kt; /* w's type */
    const llm_tensor *w;
    const float *x;
    int32_t n;
    float *y;
    llm_pool_counter next;
} gemm_job;

static void gemm_worker(void *ctx, int32_t ith, int32_t nth)
{
    gemm_job *j = ctx;
    const llm_tensor *w = j->w;
    int64_t r, r1, k = w->ne0;
    float *panel = j->c->panel + (size_t)ith * LLM_CPU_PANEL * j->c->max_width;
    (void)nth;
    while (llm_pool_next(&j->next, w->ne1, LLM_CPU_PANEL, &r, &r1)) {
        int64_t rows = r1 - r;
        const unsigned char *src = wbytes(j->c, w) + (size_t)r * w->row_bytes;
        const float *wp = (const float *)(const void *)src;
        if (!j->c->use_blas && j->kt->gemm) {
            /* The set's own product, reading the rows as they are. */
            j->kt->gemm(src, w->row_bytes, rows, k, j->x, j->n, j->y + r, w->ne1);
            continue;
        }
        if (!j->kt->rows_f32) {
            j->kt->dequant(src, panel, (size_t)(rows * k));
            wp = panel;
        }
        /* y[:, r:r+rows] = x [n][k] * wp^T, wp [rows][k]. */
#if LLM_HAVE_OPENBLAS
        if (j->c->use_blas) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->n, (int)rows,
                        (int)k, 1.0f, j->x, (int)k, wp, (int)k, 0.0f, j->y + r,
                        (int)w->ne1);
            continue;
        }
#endif
        j->c->k.gemm_nt(j->n, rows, k, j->x, k, wp, k, j->y + r, w->ne1);
    }
}

/* The batched product of a type with a quantized one (kt->batched): the
 * activation rows in groups of LLM_CPU_ROWS_MAX (the quantized scratch's
 * size), each group's weight rows claimed LLM_CPU_QPANEL at a time. */
typedef struct qgemm_job {
    llm_matvec_fn batched;
    const llm_tensor *w;
    const unsigned char *wb; /* w's bytes (wbytes) */
    llm_acts acts;
    float *y; /* the group's first output row */
    llm_pool_counter next;
} qgemm_job;

static void qgemm_worker(void *ctx, int32_t ith, int32_t nth)
{
    qgemm_job *j = ctx;
    const llm_tensor *w = j->w;
    int64_t r, r1;
    (void)ith;
    (void)nth;
    while (llm_pool_next(&j->next, w->ne1, LLM_CPU_QPANEL, &r, &r1))
        j->batched(j->wb + (size_t)r * w->row_bytes, w->row_bytes,
                   r1 - r, &j->acts, j->y + r, w->ne1);
}

static void qgemm(cpu_backend *c, const llm_type_kernels *kt, const llm_tensor *w,
                  const float *x, int32_t n, float *y)
{
    llm_acts_scratch sc = {c->qd, c->qq, c->qdt, c->qb, c->xbias, c->xsum};
    for (int32_t t0 = 0; t0 < n; t0 += LLM_CPU_ROWS_MAX) {
        int32_t g = n - t0 < LLM_CPU_ROWS_MAX ? n - t0 : LLM_CPU_ROWS_MAX;
        qgemm_job j;
        memset(&j, 0, sizeof j);
        j.batched = kt->batched;
        j.w = w;
        j.wb = wbytes(c, w);
        j.y = y + (size_t)t0 * (size_t)w->ne1;
        llm_acts_quantize(&c->k, x + (size_t)t0 * (size_t)w->ne0, g, w->ne0, &sc, &j.acts);
        llm_pool_run(c->pool, qgemm_worker, &j);
    }
}

/* Weights of one row-loop pass (cpu_matmul_many: q/k/v share x). */
#define MV_MAX 3

/* The row loop over up to MV_MAX weights with one input: units of
 * LLM_CPU_GRAIN rows, numbered across the weights in turn (weight i owns
 * units [first[i], first[i + 1])), shared by the pool's threads as owned
 * parts (pool.h): each thread streams one contiguous run of rows, the way
 * a read-bandwidth probe does, and takes over what a preempted thread has
 * left. (Claiming every unit from one counter interleaves the threads
 * unit by unit.) */
typedef struct mv_job {
    llm_pool *pool;
    const llm_tensor *w[MV_MAX];
    const unsigned char *wb[MV_MAX]; /* w[i]'s bytes (wbytes) */
    float *y[MV_MAX];
    llm_matvec_fn matvec[MV_MAX]; /* the kernel for w[i]'s type */
    int64_t first[MV_MAX + 1];
    int32_t count;
    llm_acts acts; /* x in the kernels' layouts */
} mv_job;

static void matvec_worker(void *ctx, int32_t ith, int32_t nth)
{
    mv_job *j = ctx;
    int64_t u;
    int32_t visited = 0;
    (void)nth;
    while (llm_pool_owned_next(j->pool, ith, j->first[j->count], &visited, &u)) {
        int32_t i = 0;
        while (u >= j->first[i + 1])
            i++;
        const llm_tensor *w = j->w[i];
        int64_t r0 = (u - j->first[i]) * LLM_CPU_GRAIN;
        int64_t r1 = r0 + LLM_CPU_GRAIN < w->ne1 ? r0 + LLM_CPU_GRAIN : w->ne1;
        j->matvec[i](j->wb[i] + (size_t)r0 * w->row_bytes, w->row_bytes,
                     r1 - r0, &j->acts, j->y[i] + r0, w->ne1);
    }
}

/* exact: the rows must each equal a one-row product bit for bit (a
 * verify), which only the row loop gives; it takes up to LLM_CPU_ROWS_MAX
 * rows (a wider verify than that is not exact). */
static int takes_gemm(const cpu_backend *c, const llm_type_kernels *kt, int32_t n, int exact)
{
    if (exact && n <= LLM_CPU_ROWS_MAX)
        return 0;
    return n >= (kt->acts_q8 ? c->gemm_min_quant : c->gemm_min_float);
}

void llm_cpu_matmul(llm_backend *be, const llm_tensor *w, const float *x,
                       int32_t n, float *y)
{
    llm_cpu_matmul_rows(be, w, x, n, y, 0);
}

void llm_cpu_matmul_rows(llm_backend *be, const llm_tensor *w, const float *x, int32_t n,
                         float *y, int exact)
{
    cpu_backend *c = cpu(be);
    const llm_type_kernels *kt = kernels_for(c, w);
    if (takes_gemm(c, kt, n, exact) && kt->batched) {
        qgemm(c, kt, w, x, n, y);
        return;
    }
    if (takes_gemm(c, kt, n, exact)) {
        gemm_job j = {c, kt, w, x, n, y, {0}};
        llm_pool_run(c->pool, gemm_worker, &j);
        return;
    }
    float *const ys[1] = {y};
    const llm_tensor *const ws[1] = {w};
    llm_cpu_matmul_many_rows(be, ws, 1, x, n, ys, exact);
}

/* One hand-off to the pool and one quantization of x for all the weights
 * (each result is exactly cpu_matmul's: the same kernels on the same
 * quantized x); a weight for the batched product goes through it alone. */
void llm_cpu_matmul_many(llm_backend *be, const llm_tensor *const *w, int32_t count,
                            const float *x, int32_t n, float *const *y)
{
    llm_cpu_matmul_many_rows(be, w, count, x, n, y, 0);
}

void llm_cpu_matmul_many_rows(llm_backend *be, const llm_tensor *const *w, int32_t count,
                              const float *x, int32_t n, float *const *y, int exact)
{
    cpu_backend *c = cpu(be);
    mv_job j;
    memset(&j, 0, sizeof j);
    int quantized = 0;
    for (int32_t i = 0; i < count; i++) {
        const llm_type_kernels *kt = kernels_for(c, w[i]);
        if (takes_gemm(c, kt, n, exact) || j.count == MV_MAX) {
            llm_cpu_matmul_rows(be, w[i], x, n, y[i], exact);
            continue;
        }
        int32_t at = j.count++;
        j.w[at] = w[i];
        j.wb[at] = wbytes(c, w[i]);
        j.y[at] = y[i];
        j.matvec[at] = kt->matvec;
        j.first[at + 1] = j.first[at] + (w[i]->ne1 + LLM_CPU_GRAIN - 1) / LLM_CPU_GRAIN;
        quantized |= kt->acts_q8;
    }
    if (j.count == 0)
        return;
    j.acts.n = n;
    j.acts.len = j.w[0]->ne0;
    j.acts.x = x;
    if (quantized) {
        llm_acts_scratch sc = {c->qd, c->qq, c->qdt, c->qb, c->xbias, c->xsum};
        llm_acts_quantize(&c->k, x, n, j.w[0]->ne0, &sc, &j.acts);
    }
    j.pool = c->pool;
    llm_pool_run_owned(c->pool, matvec_worker, &j);
}

/* ---- lifetime -------------------------------------------------------------- */

static void cpu_destroy(llm_backend *be)
{
    if (!be)
        return;
    cpu_backend *c = cpu(be);
    llm_pool_free(c->pool);
    llm_cpu_weights_free(&c->weights);
    free(c->qd);
    free(c->qq);
    free(c->qdt);
    free(c->qb);
    free(c->xbias);
    free(c->xsum);
    free(c->panel);
    free(c->scores);
    free(c->rope_cos);
    free(c->rope_sin);
    free(c);
}

/* Float matrices are copied onto huge pages (cpu_weights.h) unless the
 * model already reads its file into memory of its own (no_mmap, which
 * gives that memory the same advice); Q8_0 matrices go into panels when
 * the kernel set reads them; other quantized weights stay in the file
 * mapping, where the kernels read them. Never fails: without the copy the
 * mapping serves. */
static int cpu_prepare(llm_backend *be, llm_model *m, char *err, size_t errlen)
{
    cpu_backend *c = cpu(be);
    (void)err;
    (void)errlen;
    if (!c->weights.base)
        llm_cpu_weights_copy(c->pool, m, c->weights_mode, !m->no_mmap, c->k.q8_0_panels != NULL,
                             &c->weights);
    return 0;
}

/* Every operation has finished when it returns; nothing can fail later. */
static int cpu_sync(llm_backend *be)
{
    (void)be;
    return 0;
}

static int cpu_status(llm_backend *be, char *err, size_t errlen)
{
    (void)be;
    (void)err;
    (void)errlen;
    return 0;
}

static const llm_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .prepare = cpu_prepare,
    .supports_type = cpu_supports_type,
    .reserve = cpu_reserve,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .write = cpu_copy,
    .read = cpu_copy,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .status = cpu_status,
    .embed = cpu_embed,
    .attention = llm_cpu_attention_block,
    .ffn = llm_cpu_ffn_block,
    .head = llm_cpu_head,
};

const char *llm_cpu_backend_kernels(const llm_backend *be)
{
    return ((const cpu_backend *)(const void *)be)->k.name;
}

#if LLM_HAVE_OPENBLAS
/* OpenBLAS cores without AVX2. A DYNAMIC_ARCH OpenBLAS falls back to one of
 * these when it does not recognize the CPU (a virtual machine that masks
 * the model, a CPU newer than the library): Debian's 0.3.21 picks
 * "Prescott" on the 2-core VM of bench/results/engine.md, whose SSE3 sgemm
 * ran 1B-model prefill 3x slower than its SkylakeX kernels. */
static int blas_core_is_weak(const char *core)
{
    static const char *const weak[] = {
        "Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
        "Katmai", "Coppermine", "Northwood", "Banias", "Sandybridge", "Generic"};
    for (size_t i = 0; core && i < sizeof weak / sizeof weak[0]; i++)
        if (strcmp(core, weak[i]) == 0)
            return 1;
    return !core;
}

/* OpenBLAS cores with AVX-512 kernels (0.3.21's list). A DYNAMIC_ARCH
 * OpenBLAS that does not know a newer AVX-512 CPU runs an AVX2 core on it:
 * Debian's 0.3.21 reports "Haswell" on the 2-core AMD EPYC (Zen 5, family
 * 26) of bench/results/cpu_gemm512.md, whose 512-bit FMA units its sgemm
 * then half uses. */
static int blas_core_is_avx512(const char *core)
{
    static const char *const wide[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; core && i < sizeof wide / sizeof wide[0]; i++)
        if (strcmp(core, wide[i]) == 0)
            return 1;
    return 0;
}

/* PHASEMARK_ENGINE_GEMM=blas|own forces the batched product; unset or
 * "auto": OpenBLAS, except where the set's own product is the faster one:
 *  - OpenBLAS runs a pre-AVX2 core while our SIMD kernels are active;
 *  - the avx512 set is active and OpenBLAS runs no AVX-512 core: the
 *    set's 512-bit product (kernels_gemm_avx512.c) ran 1.84-1.87x
 *    OpenBLAS's "Haswell" sgemm on one Zen 5 core, and prefill 1.58-1.71x
 *    faster on 1B and 110M F16/F32 models (1B F16: 129 against 76 tok/s;
 *    bench/results/cpu_gemm512.md). Against OpenBLAS's own AVX-512 cores
 *    it has not been measured, so those keep OpenBLAS.
 * Read once per backend, at creation. */
static int choose_blas(const llm_kernels *k)
{
    const char *env = getenv("PHASEMARK_ENGINE_GEMM");
    if (env && strcmp(env, "blas") == 0)
        return 1;
    if (env && strcmp(env, "own") == 0)
        return 0;
    const char *core = openblas_get_corename();
    if (strcmp(k->name, "avx512") == 0 && !blas_core_is_avx512(core))
        return 0;
    return !(strcmp(k->name, "scalar") != 0 && blas_core_is_weak(core));
}
#else
static int choose_blas(const llm_kernels *k)
{
    (void)k;
    return 0; /* built without OpenBLAS */
}
#endif

void llm_cpu_backend_copy_tensors(llm_backend *be, llm_tensor *const *t, int32_t n)
{
    if (!be || be->ops != &cpu_ops)
        return;
    cpu_backend *c = cpu(be);
    if (!c->weights.base)
        llm_cpu_weights_copy_tensors(c->pool, t, n, c->weights_mode, c->k.q8_0_panels != NULL,
                                     &c->weights);
}

int llm_cpu_backend_read_weights(llm_backend *be, const llm_backend *owner)
{
    if (!be || be->ops != &cpu_ops || !owner || owner->ops != &cpu_ops || be == owner)
        return 0;
    cpu_backend *c = cpu(be);
    const cpu_backend *o = (const cpu_backend *)(const void *)owner;
    /* Panels are only read by the set that wrote them. */
    if (strcmp(c->k.name, o->k.name) != 0)
        return 0;
    c->peer_weights = &o->weights;
    return 1;
}

void llm_cpu_backend_set_gemm_min(llm_backend *be, int32_t float_min, int32_t quant_min)
{
    cpu_backend *c = cpu(be);
    c->gemm_min_float = float_min < 1 ? 1 : float_min > LLM_CPU_ROWS_MAX ? LLM_CPU_ROWS_MAX : float_min;
    c->gemm_min_quant = quant_min < 1 ? 1 : quant_min > LLM_CPU_ROWS_MAX ? LLM_CPU_ROWS_MAX : quant_min;
}

size_t llm_cpu_backend_weights_copied(const llm_backend *be, int32_t *n_matrices)
{
    const cpu_backend *c = (const cpu_backend *)(const void *)be;
    if (n_matrices)
        *n_matrices = c->weights.n;
    return c->weights.bytes;
}

const char *llm_cpu_backend_gemm(const llm_backend *be)
{
    const cpu_backend *c = (const cpu_backend *)(const void *)be;
    return c->use_blas ? "openblas" : c->k.name;
}

const char *llm_cpu_backend_blas_core(const llm_backend *be)
{
#if LLM_HAVE_OPENBLAS
    const cpu_backend *c = (const cpu_backend *)(const void *)be;
    if (c->use_blas) {
        const char *core = openblas_get_corename();
        return core ? core : "";
    }
#else
    (void)be;
#endif
    return "";
}

/* Adds a caller's per-type kernels to the chosen set's table. */
static int add_kernels(cpu_backend *c, const llm_type_kernels *extra, size_t n_extra,
                       char *err, size_t errlen)
{
    for (size_t i = 0; i < n_extra; i++) {
        const llm_type_kernels *e = &extra[i];
        if (!e->matvec || !e->dequant) {
            llm_errf(err, errlen, "cpu backend: kernels for type %u lack a matvec or dequant",
                     (unsigned)e->type);
            return LLM_EINVAL;
        }
        if (llm_kernels_find(&c->k, e->type)) {
            llm_errf(err, errlen, "cpu backend: type %u already has kernels", (unsigned)e->type);
            return LLM_EINVAL;
        }
        if (llm_kernels_set(&c->k, e) != 0) {
            llm_errf(err, errlen, "cpu backend: more than %d types of kernels",
                     LLM_KERNEL_TYPES_MAX);
            return LLM_EINVAL;
        }
    }
    return 0;
}

/* The kernel sets from the portable one up, each built on the one before
 * it; a CPU takes the longest prefix of this ladder it supports. */
static const char *const kernel_ladder[] = {"scalar", "avx2", "avx2+vnni", "avx512"};

static int climb(llm_kernels *k, int step)
{
    switch (step) {
    case 1: return llm_kernels_avx2(k);
    case 2: return llm_kernels_vnni(k);
    case 3: return llm_kernels_avx512(k);
    default: return -1;
    }
}

/* simd 0: the scalar set. Otherwise PHASEMARK_ENGINE_KERNELS names the set
 * (read once per backend, at creation: a benchmark can open one model per
 * set in one process); unset, empty or "auto": the best this CPU runs. A
 * name that is no set, or a set this CPU cannot run, fails with one line. */
static int choose_kernels(llm_kernels *k, int simd, char *err, size_t errlen)
{
    const int n_sets = (int)(sizeof kernel_ladder / sizeof kernel_ladder[0]);
    llm_kernels_scalar(k);
    if (!simd)
        return 0;
    const char *want = getenv("PHASEMARK_ENGINE_KERNELS");
    if (!want || !*want || strcmp(want, "auto") == 0) {
        for (int step = 1; step < n_sets && climb(k, step) == 0; step++)
            ;
        return 0;
    }
    int target = -1;
    for (int i = 0; i < n_sets; i++)
        if (strcmp(want, kernel_ladder[i]) == 0)
            target = i;
    if (target < 0) {
        llm_errf(err, errlen, "cpu backend: PHASEMARK_ENGINE_KERNELS='%s' names no kernel set "
                 "(auto, scalar, avx2, avx2+vnni, avx512)", want);
        return LLM_EINVAL;
    }
    for (int step = 1; step <= target; step++) {
        if (climb(k, step) != 0) {
            llm_errf(err, errlen, "cpu backend: PHASEMARK_ENGINE_KERNELS=%s: this CPU cannot run "
                     "the %s kernels", want, kernel_ladder[step]);
            return LLM_EUNSUP;
        }
    }
    return 0;
}

/* PHASEMARK_ENGINE_PREFETCH=tile: the avx512 set's Q8_0 product with the
 * prefetch one tile ahead, as before (the same bits; a benchmark opens one
 * model each way in one process). Unset or anything else: the default.
 * Read once per backend, at creation. */
static void choose_prefetch(llm_kernels *k)
{
    const char *env = getenv("PHASEMARK_ENGINE_PREFETCH");
    if (env && strcmp(env, "tile") == 0)
        llm_kernels_avx512_near_prefetch(k);
}

/* Whether PHASEMARK_SHARE_THREADS allows sharing: unset or anything but
 * 0 / off / no / false does. */
static int share_allowed(void)
{
    const char *e = getenv("PHASEMARK_SHARE_THREADS");
    if (!e)
        return 1;
    static const char *const off[] = {"0", "off", "no", "false"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if (!strcasecmp(e, off[i]))
            return 0;
    return 1;
}

int llm_backend_share_threads(llm_backend *dst, llm_backend *src)
{
    if (!dst || dst->ops != &cpu_ops || (src && src->ops != &cpu_ops))
        return 0;
    cpu_backend *d = cpu(dst);
    llm_pool *p = NULL;
    if (src) {
        cpu_backend *s = cpu(src);
        if (s->pool == d->pool)
            return 1;
        /* The scratch is per thread of dst's count: the pool must match. */
        if (!share_allowed() || llm_pool_threads(s->pool) != d->base.n_threads)
            return 0;
        p = llm_pool_ref(s->pool);
    } else {
        if (!d->pool_shared)
            return 0;
        if (llm_pool_create(d->base.n_threads, &p) != 0)
            return LLM_ENOMEM; /* dst keeps the shared pool: still correct */
    }
    llm_pool_free(d->pool);
    d->pool = p;
    d->pool_shared = src != NULL;
    return 1;
}

int llm_cpu_backend_create(int32_t n_threads, int simd, llm_backend **out,
                           char *err, size_t errlen)
{
    return llm_cpu_backend_create_with(n_threads, simd, NULL, 0, out, err, errlen);
}

int llm_cpu_backend_create_with(int32_t n_threads, int simd, const llm_type_kernels *extra,
                                size_t n_extra, llm_backend **out, char *err, size_t errlen)
{
    *out = NULL;
    if (n_threads <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = online > 0 ? (int32_t)(online < 256 ? online : 256) : 1;
    }
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) {
        llm_errf(err, errlen, "cpu backend: out of memory");
        return LLM_ENOMEM;
    }
    c->base.ops = &cpu_ops;
    c->base.n_threads = n_threads;
    c->base.host_visible = 1;
    int rc = choose_kernels(&c->k, simd, err, errlen);
    if (rc == 0)
        choose_prefetch(&c->k);
    if (rc == 0)
        rc = add_kernels(c, extra, n_extra, err, errlen);
    if (rc == 0)
        rc = llm_cpu_weights_mode(&c->weights_mode, err, errlen);
    if (rc) {
        free(c);
        return rc;
    }
    if (llm_pool_create(n_threads, &c->pool) != 0) {
        free(c);
        llm_errf(err, errlen, "cpu backend: cannot start %d threads", (int)n_threads);
        return LLM_ENOMEM;
    }
#if LLM_HAVE_OPENBLAS
    openblas_set_num_threads(1);
#endif
    c->use_blas = choose_blas(&c->k);
    c->swiglu_grain = strcmp(c->k.name, "avx512") == 0 ? SWIGLU_GRAIN_VECTOR : SWIGLU_GRAIN_SCALAR;
    if (c->k.q8_0_panels) {
        c->q8_0_panels = *llm_kernels_find(&c->k, LLM_TYPE_Q8_0);
        c->q8_0_panels.matvec = c->q8_0_panels.batched = c->k.q8_0_panels;
    }
    c->gemm_min_float = LLM_CPU_GEMM_MIN_FLOAT;
    c->gemm_min_quant = LLM_CPU_GEMM_MIN_QUANT;
    *out = &c->base;
    return 0;
}
