/* kernels_scalar.c — the portable reference kernels (see kernels.h).
 *
 * Sums run in f32 in index order, with the quantized block sums in int32,
 * so they are the plain definition of each product; the SIMD kernels are
 * tested against these.
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

#include "quant.h"

_Static_assert(LLM_QK8_0 == LLM_ACTS_QK && LLM_QK4_0 == LLM_ACTS_QK,
               "the Q8_0/Q4_0 kernels pair one weight block with one activation block");

static float dot_f32(const void *w, const float *x, int64_t n)
{
    const float *a = w;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * x[i];
    return s;
}

static float dot_f16(const void *w, const float *x, int64_t n)
{
    const unsigned char *p = w;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        s += llm_fp16_to_f32(h) * x[i];
    }
    return s;
}

static float dot_bf16(const void *w, const float *x, int64_t n)
{
    const unsigned char *p = w;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        s += llm_bf16_to_f32(h) * x[i];
    }
    return s;
}

static float block_scale(const unsigned char *blk)
{
    uint16_t h;
    memcpy(&h, blk, 2);
    return llm_fp16_to_f32(h);
}

static float dot_q8_0(const void *w, const llm_qrow *x, int64_t n)
{
    const unsigned char *blk = w;
    float s = 0.0f;
    for (int64_t b = 0; b < n / LLM_QK8_0; b++, blk += sizeof(llm_block_q8_0)) {
        const int8_t *wq = (const int8_t *)(blk + 2);
        const int8_t *xq = x->q + b * LLM_QK8_0;
        int32_t acc = 0;
        for (int j = 0; j < LLM_QK8_0; j++)
            acc += (int32_t)wq[j] * (int32_t)xq[j];
        s += block_scale(blk) * x->d[b] * (float)acc;
    }
    return s;
}

static float dot_q4_0(const void *w, const llm_qrow *x, int64_t n)
{
    const unsigned char *blk = w;
    float s = 0.0f;
    for (int64_t b = 0; b < n / LLM_QK4_0; b++, blk += sizeof(llm_block_q4_0)) {
        const unsigned char *wq = blk + 2;
        const int8_t *xq = x->q + b * LLM_QK4_0;
        int32_t acc = 0;
        for (int j = 0; j < LLM_QK4_0 / 2; j++) {
            acc += ((int32_t)(wq[j] & 0x0f) - 8) * (int32_t)xq[j];
            acc += ((int32_t)(wq[j] >> 4) - 8) * (int32_t)xq[j + LLM_QK4_0 / 2];
        }
        s += block_scale(blk) * x->d[b] * (float)acc;
    }
    return s;
}

static void quantize_row(const float *x, int64_t n, float *d, int8_t *q)
{
    for (int64_t b = 0; b < n / LLM_ACTS_QK; b++) {
        const float *xb = x + b * LLM_ACTS_QK;
        float amax = 0.0f;
        for (int j = 0; j < LLM_ACTS_QK; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        float db = amax / 127.0f;
        float id = db > 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        for (int j = 0; j < LLM_ACTS_QK; j++)
            q[b * LLM_ACTS_QK + j] = (int8_t)nearbyintf(xb[j] * id);
    }
}

static float dot(const float *a, const float *b, int64_t n)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static void axpy(float *y, float s, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += s * x[i];
}

static void gemm_nt(int64_t n, int64_t m, int64_t k, const float *x, int64_t ldx,
                    const float *w, int64_t ldw, float *y, int64_t ldy)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++)
            y[i * ldy + j] = dot(x + i * ldx, w + j * ldw, k);
}

float llm_softmax_exp_scalar(float *sc, uint32_t len, float mx)
{
    float sum = 0.0f;
    for (uint32_t p = 0; p < len; p++) {
        sc[p] = expf(sc[p] - mx);
        sum += sc[p];
    }
    return sum;
}

static void swiglu(float *gate, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

static void attend(const float *q, const float *k, const float *v, int64_t stride, uint32_t len,
                   int32_t hd, float scale, float *sc, float *out)
{
    float mx = -INFINITY;
    for (uint32_t p = 0; p < len; p++) {
        sc[p] = dot(q, k + p * stride, hd) * scale;
        mx = fmaxf(mx, sc[p]);
    }
    float sum = llm_softmax_exp_scalar(sc, len, mx);
    memset(out, 0, (size_t)hd * sizeof(float));
    for (uint32_t p = 0; p < len; p++)
        axpy(out, sc[p] / sum, v + p * stride, hd);
}

void llm_acts_quantize(const llm_kernels *k, const float *x, int32_t n, int64_t len,
                       const llm_acts_scratch *s, llm_acts *a)
{
    int64_t nb = len / LLM_ACTS_QK;
    for (int32_t t = 0; t < n; t++) {
        k->quantize_row(x + t * len, len, s->d + t * nb, s->q + t * len);
        for (int64_t b = 0; b < nb; b++) {
            const int8_t *src = s->q + t * len + b * LLM_ACTS_QK;
            int32_t sum = 0;
            for (int j = 0; j < LLM_ACTS_QK; j++)
                sum += src[j];
            s->xsum[t * nb + b] = -128 * sum;
        }
    }
    for (int64_t b = 0; b < nb; b++)
        for (int32_t t = 0; t < n; t++) {
            const int8_t *src = s->q + t * len + b * LLM_ACTS_QK;
            int32_t *bias = s->xbias + (b * n + t) * 8;
            s->dt[b * n + t] = s->d[t * nb + b];
            memcpy(s->qb + (b * n + t) * LLM_ACTS_QK, src, LLM_ACTS_QK);
            for (int g = 0; g < 8; g++)
                bias[g] = -128 * (src[4 * g] + src[4 * g + 1] + src[4 * g + 2] + src[4 * g + 3]);
        }
    a->n = n;
    a->len = len;
    a->x = x;
    a->d = s->d;
    a->q = s->q;
    a->dt = s->dt;
    a->qb = s->qb;
    a->xbias = s->xbias;
    a->xsum = s->xsum;
}

LLM_MATVEC_BY_ROWS_FLOAT(, matvec_f32, dot_f32)
LLM_MATVEC_BY_ROWS_FLOAT(, matvec_f16, dot_f16)
LLM_MATVEC_BY_ROWS_FLOAT(, matvec_bf16, dot_bf16)
LLM_MATVEC_BY_ROWS_QUANT(, matvec_q8_0, dot_q8_0)
LLM_MATVEC_BY_ROWS_QUANT(, matvec_q4_0, dot_q4_0)

const llm_type_kernels *llm_kernels_find(const llm_kernels *k, uint32_t type)
{
    for (int32_t i = 0; i < k->n_types; i++)
        if (k->types[i].type == type)
            return &k->types[i];
    return NULL;
}

int llm_kernels_set(llm_kernels *k, const llm_type_kernels *e)
{
    for (int32_t i = 0; i < k->n_types; i++) {
        if (k->types[i].type == e->type) {
            k->types[i] = *e;
            return 0;
        }
    }
    if (k->n_types == LLM_KERNEL_TYPES_MAX)
        return -1;
    k->types[k->n_types++] = *e;
    return 0;
}

/* The built-in types' entries: this set's products, the reference
 * conversions (quant.h) for rows to f32. */
static void set_types(llm_kernels *k)
{
    const llm_type_kernels e[] = {
        {LLM_TYPE_F32, matvec_f32, llm_type_find(NULL, LLM_TYPE_F32)->to_f32, 0, 1, NULL, NULL},
        {LLM_TYPE_F16, matvec_f16, llm_type_find(NULL, LLM_TYPE_F16)->to_f32, 0, 0, NULL, NULL},
        {LLM_TYPE_BF16, matvec_bf16, llm_type_find(NULL, LLM_TYPE_BF16)->to_f32, 0, 0, NULL, NULL},
        {LLM_TYPE_Q8_0, matvec_q8_0, llm_type_find(NULL, LLM_TYPE_Q8_0)->to_f32, 1, 0, NULL, NULL},
        {LLM_TYPE_Q4_0, matvec_q4_0, llm_type_find(NULL, LLM_TYPE_Q4_0)->to_f32, 1, 0, NULL, NULL},
    };
    k->n_types = 0;
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++)
        (void)llm_kernels_set(k, &e[i]); /* 5 <= LLM_KERNEL_TYPES_MAX */
    llm_kernels_add_k_scalar(k);
    llm_kernels_add_legacy_scalar(k);
}

size_t llm_q8_0_panel_bytes(int64_t rows, size_t row_bytes)
{
    return (size_t)((rows + LLM_Q8P_ROWS - 1) / LLM_Q8P_ROWS) * LLM_Q8P_ROWS * row_bytes;
}

void llm_q8_0_pack_panels(const void *src, size_t row_bytes, int64_t rows, int64_t p0,
                          int64_t p1, void *dst)
{
    const int64_t nb = (int64_t)(row_bytes / sizeof(llm_block_q8_0));
    const size_t panel = (size_t)LLM_Q8P_ROWS * row_bytes;
    for (int64_t p = p0; p < p1; p++) {
        unsigned char *qs = (unsigned char *)dst + (size_t)p * panel;
        unsigned char *sc = qs + (size_t)nb * 512;
        for (int r = 0; r < LLM_Q8P_ROWS; r++) {
            int64_t row = p * LLM_Q8P_ROWS + r;
            const unsigned char *w = row < rows ? (const unsigned char *)src + (size_t)row * row_bytes : NULL;
            for (int64_t b = 0; b < nb; b++) {
                const unsigned char *blk = w ? w + (size_t)b * sizeof(llm_block_q8_0) : NULL;
                for (int j = 0; j < LLM_QK8_0; j++)
                    qs[b * 512 + (j / 4) * 64 + r * 4 + j % 4] =
                        blk ? (unsigned char)(blk[2 + j] ^ 0x80u) : 0x80u; /* 0 + 128 */
                if (blk)
                    memcpy(sc + (size_t)(b * LLM_Q8P_ROWS + r) * 2, blk, 2);
                else
                    memset(sc + (size_t)(b * LLM_Q8P_ROWS + r) * 2, 0, 2);
            }
        }
    }
}

void llm_kernels_scalar(llm_kernels *k)
{
    k->name = "scalar";
    k->q8_0_panels = NULL;
    k->dot_f32 = dot_f32;
    k->dot_f16 = dot_f16;
    k->dot_bf16 = dot_bf16;
    k->dot_q8_0 = dot_q8_0;
    k->dot_q4_0 = dot_q4_0;
    k->quantize_row = quantize_row;
    k->dot = dot;
    k->axpy = axpy;
    k->gemm_nt = gemm_nt;
    k->attend = attend;
    k->softmax_exp = llm_softmax_exp_scalar;
    k->swiglu = swiglu;
    k->sum_squares = NULL;
    set_types(k);
}
