/* kernels.h — the CPU backend's inner loops: dot products of one weight row
 * with one activation row, per weight type, and the activation quantizer.
 *
 * Two implementations fill the same table: a portable scalar one (the
 * reference, built everywhere) and an AVX2/FMA/F16C one selected at run
 * time when the CPU has those features. Both take unaligned pointers.
 *
 * Quantized weights (Q8_0, Q4_0) are multiplied, as ggml does, with the
 * activation row quantized once per matmul to 8-bit blocks of 32 with an f32
 * scale (d = max|x| / 127, q = round-to-nearest-even(x / d)): each block's
 * dot product is then an exact integer sum scaled by d_w * d_x. The price is
 * the activation's rounding (a relative error of about 2^-8 per element,
 * averaging out over a row); docs/engine.md states the resulting tolerance.
 */
#ifndef LLM_CPU_KERNELS_H
#define LLM_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* An activation row quantized to blocks of 32: n/32 scales and n quants. */
typedef struct llm_qrow {
    const float *d;   /* [n/32] */
    const int8_t *q;  /* [n] */
} llm_qrow;

typedef struct llm_kernels {
    const char *name; /* "scalar" or "avx2" */
    float (*dot_f32)(const void *w, const float *x, int64_t n);
    float (*dot_f16)(const void *w, const float *x, int64_t n);
    float (*dot_bf16)(const void *w, const float *x, int64_t n);
    float (*dot_q8_0)(const void *w, const llm_qrow *x, int64_t n);
    float (*dot_q4_0)(const void *w, const llm_qrow *x, int64_t n);
    /* Quantizes n (a multiple of 32) floats into d[n/32], q[n]. */
    void (*quantize_row)(const float *x, int64_t n, float *d, int8_t *q);
    /* sum_i a[i] * b[i] and y[i] += s * x[i] over f32, for attention. */
    float (*dot)(const float *a, const float *b, int64_t n);
    void (*axpy)(float *y, float s, const float *x, int64_t n);
    /* y[i*ldy + j] = sum_k x[i*ldx + k] * w[j*ldw + k] for i < n, j < m:
     * both operands k-contiguous ("NT"), as activations and weight rows
     * are. The batched path's own product when no tuned BLAS is at hand. */
    void (*gemm_nt)(int64_t n, int64_t m, int64_t k, const float *x, int64_t ldx,
                    const float *w, int64_t ldw, float *y, int64_t ldy);
    /* n elements of a supported type to f32 (llm_dequantize_row's
     * contract; the AVX2 set widens 32-element blocks at a time). */
    void (*dequant_row)(uint32_t type, const void *src, float *dst, int64_t n);
} llm_kernels;

/* The portable kernels. */
void llm_kernels_scalar(llm_kernels *k);

/* The AVX2 kernels: 0 and *k filled when the CPU supports AVX2, FMA and
 * F16C (and the compiler could build them), else -1 and *k untouched. */
int llm_kernels_avx2(llm_kernels *k);

#endif
