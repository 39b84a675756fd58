/* test_kernels — the CUDA backend's matmul, norm, RoPE, SwiGLU, add and
 * embedding kernels against host references in double.
 *
 * Tolerances (relative L2 error, ||out - ref|| / ||ref||):
 *   matrix-vector, all weight types: 2e-5 against the exact weights and
 *     fp32 activations (only fp32 accumulation order differs); one-row
 *     products over Q8 layout weights (Q8_0, Q4_0) with the int8 kernel
 *     on (the default): 2e-5 against the exact weights and the activation
 *     quantized per 32 values by the CPU backend's rule (q8_acts), which
 *     is what the kernel multiplies exactly in int32;
 *   cuBLAS products (more than LLM_CUDA_MATVEC_MAX rows): 1e-4 against a
 *     reference with bf16-rounded operands (what the device multiplies;
 *     F16 weights: the exact weights and fp16-rounded activations),
 *     and 1e-2 against the unrounded operands (bf16 operand rounding, the
 *     documented cost of the tensor-core path); fp32 weights: 2e-5;
 *   norms, RoPE, SwiGLU, add, embedding: 1e-6 (element-wise fp32).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"
#include "quant.h"

static double bf16_round(double v)
{
    return llm_bf16_to_f32(llm_f32_to_bf16((float)v));
}

static double fp16_round(double v)
{
    return llm_fp16_to_f32(llm_f32_to_fp16((float)v));
}

/* x quantized per 32 values as the CPU backend quantizes activations (d =
 * amax / 127 in float, q = nearest-even of x * (1 / d)) and dequantized:
 * exactly the activation the int8 kernel multiplies. n is a multiple of
 * 32. */
static void q8_acts(const float *x, int64_t n, double *out)
{
    for (int64_t b = 0; b < n; b += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[b + j]));
        float d = amax / 127.0f;
        float id = d > 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < 32; j++)
            out[b + j] = (double)nearbyintf(x[b + j] * id) * (double)d;
    }
}

static int is_kq(uint32_t type)
{
    return type == LLM_TYPE_Q4_K || type == LLM_TYPE_Q5_K || type == LLM_TYPE_Q6_K;
}

/* Whether a product over `type` runs on int8 activations: one row over
 * types uploaded into the Q8 layout (the tuning on, rows it takes, aligned
 * x), or up to LLM_CUDA_MATVEC_MAX rows over the native k-quant layouts
 * (each row on the one-row kernel). */
static int int8_path(llm_cuda *c, uint32_t type, int64_t cols, int32_t n, int x_off)
{
    llm_cuda_tuning t;
    CT_OK(c, llm_cuda_get_tuning(c, &t));
    if (is_kq(type))
        return t.kq_native && n <= LLM_CUDA_MATVEC_MAX && x_off == 0 &&
               cols <= LLM_CUDA_KQ_MAX_COLS;
    return t.q8_int8 && n == 1 && x_off == 0 && cols <= LLM_CUDA_Q8_INT8_MAX_COLS &&
           (type == LLM_TYPE_Q8_0 || type == LLM_TYPE_Q4_0);
}

/* One y = W x check (y += W x when acc, over random y): `n` activation
 * rows, x placed `x_off` floats into its buffer (a non-zero offset breaks
 * 16-byte alignment). */
static void matmul_case_acc(uint32_t type, int64_t rows, int64_t cols, int32_t n,
                            int x_off, int32_t max_n, int acc)
{
    llm_cuda *c = ct_open(max_n, cols, 64, 4);
    ct_rng r = {0x1234u + type * 7919u + (uint64_t)rows * 31u + (uint64_t)n};
    size_t nw = (size_t)rows * (size_t)cols, nx = (size_t)n * (size_t)cols;
    size_t ny = (size_t)n * (size_t)rows, rb = ct_row_bytes(type, cols);
    float *w = malloc(nw * sizeof *w), *x = malloc(nx * sizeof *x);
    float *y = malloc(ny * sizeof *y);
    double *deq = malloc(nw * sizeof *deq), *ref = malloc(ny * sizeof *ref);
    double *ref_b = malloc(ny * sizeof *ref_b);
    void *enc = malloc(rb * (size_t)rows);
    REQUIRE(w && x && y && deq && ref && ref_b && enc);
    ct_fill(&r, w, nw, 1.0f);
    ct_fill(&r, x, nx, 1.0f);
    ct_encode(type, w, rows, cols, enc, deq);
    double *xr = malloc(nx * sizeof *xr); /* the activation multiplied */
    REQUIRE(xr);
    int q8i = int8_path(c, type, cols, n, x_off);
    if (q8i)
        q8_acts(x, (int64_t)nx, xr); /* per 32 values: never across rows */
    else
        for (size_t i = 0; i < nx; i++)
            xr[i] = x[i];

    llm_cuda_weight dw;
    CT_OK(c, llm_cuda_weight_upload(c, type, enc, cols, rows, rb, &dw));
    float *dx = ct_dev(c, (nx + (size_t)x_off) * sizeof(float));
    float *dy = ct_dev(c, ny * sizeof(float));
    ct_put(c, dx + x_off, x, nx * sizeof *x);
    if (acc) {
        ct_fill(&r, y, ny, 4.0f);
        ct_put(c, dy, y, ny * sizeof *y);
        CT_OK(c, llm_cuda_matmul_acc(c, &dw, dx + x_off, n, dy));
    } else {
        ct_poison(c, dy, ny);
        CT_OK(c, llm_cuda_matmul(c, &dw, dx + x_off, n, dy));
    }

    llm_cuda_tuning tu;
    CT_OK(c, llm_cuda_get_tuning(c, &tu));
    int f16 = type == LLM_TYPE_F16 && tu.f16_direct; /* fp16 activations */
    for (int32_t t = 0; t < n; t++)
        for (int64_t o = 0; o < rows; o++) {
            double s = acc ? y[(size_t)t * rows + o] : 0.0, sb = s;
            for (int64_t k = 0; k < cols; k++) {
                double wv = deq[o * cols + k], xv = xr[(size_t)t * cols + k];
                s += wv * xv;
                sb += f16 ? wv * fp16_round(xv) : bf16_round(wv) * bf16_round(xv);
            }
            ref[(size_t)t * rows + o] = s;
            ref_b[(size_t)t * rows + o] = sb;
        }
    ct_get(c, y, dy, ny * sizeof *y);
    double e = ct_rel_err(y, ref, ny);
    /* k-quant products off the int8 kernel dequantize to bf16 for cuBLAS */
    int wide = (n > LLM_CUDA_MATVEC_MAX && type != LLM_TYPE_F32) || (is_kq(type) && !q8i);
    printf("type %u rows %lld cols %lld n %d%s%s: rel err %.3g", type,
           (long long)rows, (long long)cols, n, acc ? " (accumulate)" : "",
           q8i ? " (int8 activations)" : "", e);
    if (wide) {
        double eb = ct_rel_err(y, ref_b, ny);
        printf(" (vs bf16 operands %.3g)", eb);
        CHECK(eb <= 1e-4);
        CHECK(e <= 1e-2);
    } else {
        CHECK(e <= 2e-5);
    }
    printf("\n");
    llm_cuda_weight_release(c, &dw);
    llm_cuda_mfree(c, dx);
    llm_cuda_mfree(c, dy);
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    llm_cuda_free(c);
    free(w), free(x), free(y), free(deq), free(ref), free(ref_b), free(enc), free(xr);
}

static void matmul_case(uint32_t type, int64_t rows, int64_t cols, int32_t n,
                        int x_off, int32_t max_n)
{
    matmul_case_acc(type, rows, cols, n, x_off, max_n, 0);
}

/* y += W x on every path: the vector kernel, the general one, cuBLAS with
 * beta = 1 (bf16, dequantized chunks, fp32), and slices. */
static void matmul_acc(void)
{
    matmul_case_acc(LLM_TYPE_BF16, 301, 1024, 1, 0, 64, 1);
    matmul_case_acc(LLM_TYPE_Q8_0, 67, 512, 5, 0, 64, 1);
    matmul_case_acc(LLM_TYPE_F16, 45, 100, 2, 0, 64, 1);
    matmul_case_acc(LLM_TYPE_BF16, 200, 512, 37, 0, 64, 1);
    matmul_case_acc(LLM_TYPE_Q8_0, 210, 640, 20, 0, 64, 1);
    matmul_case_acc(LLM_TYPE_F32, 100, 384, 33, 0, 64, 1);
    matmul_case_acc(LLM_TYPE_BF16, 96, 256, 45, 0, 16, 1);
}

static void matvec_bf16(void) { matmul_case(LLM_TYPE_BF16, 301, 4096, 1, 0, 64); }
static void matvec_f16(void) { matmul_case(LLM_TYPE_F16, 257, 2048, 1, 0, 64); }
static void matvec_f32(void) { matmul_case(LLM_TYPE_F32, 130, 1024, 1, 0, 64); }
static void matvec_q8_0(void) { matmul_case(LLM_TYPE_Q8_0, 299, 4096, 1, 0, 64); }
static void matvec_q4_0(void) { matmul_case(LLM_TYPE_Q4_0, 97, 1024, 1, 0, 64); }

/* The int8 kernel over more row pairs than its grid has warps (each warp
 * takes several pairs, the last one alone), rows whose vectors do not
 * fill whole batches (416 columns: 26 vectors), accumulate; then the same
 * products with the tuning off, on the fp32-activation kernel, against the
 * exact activations. */
static void matvec_q8_0_int8(void)
{
    llm_cuda *c = ct_open(8, 64, 16, 4);
    int64_t rows = (int64_t)llm_cuda_sm_count(c) * 3 * 8 * 2 * 2 + 3;
    llm_cuda_free(c);
    matmul_case_acc(LLM_TYPE_Q8_0, rows, 416, 1, 0, 64, 0);
    matmul_case_acc(LLM_TYPE_Q8_0, rows, 416, 1, 0, 64, 1);
    matmul_case_acc(LLM_TYPE_Q4_0, 77, 4096 + 32, 1, 0, 64, 1);
    matmul_case_acc(LLM_TYPE_Q8_0, 33, 32, 1, 0, 64, 0); /* one block a row */
    REQUIRE(setenv("PHASEMARK_CUDA_Q8", "f32", 1) == 0); /* read at creation */
    matmul_case_acc(LLM_TYPE_Q8_0, rows, 416, 1, 0, 64, 1);
    matmul_case_acc(LLM_TYPE_Q4_0, 77, 4096 + 32, 1, 0, 64, 0);
    REQUIRE(unsetenv("PHASEMARK_CUDA_Q8") == 0);
}

/* The native k-quant layouts: an odd row count (a lone last row), more
 * row pairs than the grid has warps over one super-block a row, the 8B
 * model's widths (4096 and the FFN's 14336), accumulate, 2..8 rows (the
 * one-row kernel per row), a misaligned activation and 20 rows (both
 * dequantized to bf16 for cuBLAS). */
static void kq_cases(uint32_t type)
{
    llm_cuda *c = ct_open(8, 64, 16, 4);
    int64_t rows = (int64_t)llm_cuda_sm_count(c) * 2 * 8 * 2 * 2 + 3;
    llm_cuda_free(c);
    matmul_case_acc(type, 299, 4096, 1, 0, 64, 0);
    matmul_case_acc(type, rows, 256, 1, 0, 64, 1);
    matmul_case_acc(type, 64, 14336, 1, 0, 64, 0);
    matmul_case_acc(type, 67, 512, 3, 0, 64, 1);
    matmul_case_acc(type, 33, 768, LLM_CUDA_MATVEC_MAX, 0, 64, 0);
    matmul_case_acc(type, 45, 512, 1, 1, 64, 0);
    matmul_case_acc(type, 210, 768, 20, 0, 64, 1);
}

/* The k-quant kernel tests run on the native layouts whatever the
 * default (PHASEMARK_CUDA_KQ is read at creation). */
static void pin_native(void)
{
    REQUIRE(setenv("PHASEMARK_CUDA_KQ", "native", 1) == 0);
}

/* The Q4_K layouts and kernels of tuning kq_grouped (PHASEMARK_CUDA_KQ_LAYOUT, read at
 * creation): i = 0 the grouped layout, one batch a lane (the default), 1
 * the same with two, 2 the file's super-blocks; -1 unsets the switch. */
static void pin_kq_layout(int i)
{
    const char *v[] = {"grouped", "grouped2", "blocks"};
    REQUIRE(i < 0 ? unsetenv("PHASEMARK_CUDA_KQ_LAYOUT") == 0
                  : setenv("PHASEMARK_CUDA_KQ_LAYOUT", v[i], 1) == 0);
}

static void matvec_q4_k(void)
{
    pin_native();
    for (int i = 0; i < 3; i++) {
        pin_kq_layout(i);
        kq_cases(LLM_TYPE_Q4_K);
    }
    pin_kq_layout(-1);
}

static void matvec_q6_k(void)
{
    pin_native();
    kq_cases(LLM_TYPE_Q6_K);
}

/* Native Q5_K: its one layout, grouped, whatever kq_grouped says (the
 * grouped default and the file's blocks), on every kq_cases shape; then
 * its size and layout at allocation. */
static void matvec_q5_k(void)
{
    pin_native();
    pin_kq_layout(0);
    kq_cases(LLM_TYPE_Q5_K);
    pin_kq_layout(2);
    kq_cases(LLM_TYPE_Q5_K);
    pin_kq_layout(-1);
    llm_cuda *c = ct_open(8, 64, 16, 4);
    llm_cuda_weight w;
    CT_OK(c, llm_cuda_weight_alloc(c, LLM_TYPE_Q5_K, 512, 3, &w));
    CHECK_INT_EQ((int)w.bytes, 2 * 176 * 3);
    CHECK_INT_EQ((int)w.layout, (int)LLM_CUDA_LAYOUT_GROUPED);
    CHECK(w.scales == NULL);
    llm_cuda_weight_release(c, &w);
    llm_cuda_free(c);
}

/* One product over `type` (rows x cols, fused `flags`) with tuning mv_l2
 * at 0..3, mv_split off and on, and mv_blocks 1 (split off): the same
 * bits for each split setting (mv_l2 only asks L2 for bytes; a row pair's
 * sum does not depend on the grid), and finite (written). */
static void l2_case(uint32_t type, int64_t rows, int64_t cols, unsigned flags)
{
    llm_cuda *c = ct_open(8, cols, 16, 4);
    ct_rng r = {0x5150u + type * 131u + (uint64_t)rows};
    size_t nw = (size_t)rows * (size_t)cols, rb = ct_row_bytes(type, cols);
    float *w = malloc(nw * sizeof *w), *x = malloc((size_t)cols * sizeof *x);
    enum { NK = 10 };
    /* {mv_l2, mv_split, mv_blocks}; the first 4 and the last 2 give one set
     * of bits, the 4 with split-K (another order of the sums) another */
    const int conf[NK][3] = {{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {3, 0, 0}, {0, 1, 0},
                             {1, 1, 0}, {2, 1, 0}, {3, 1, 0}, {0, 0, 1}, {3, 0, 1}};
    float *g = malloc((size_t)cols * sizeof *g), *y = malloc(NK * (size_t)rows * sizeof *y);
    double *deq = malloc(nw * sizeof *deq);
    void *enc = malloc(rb * (size_t)rows);
    REQUIRE(w && x && g && y && deq && enc);
    ct_fill(&r, w, nw, 1.0f);
    ct_fill(&r, x, (size_t)cols, 1.0f);
    for (int64_t i = 0; i < cols; i++)
        g[i] = 1.0f + ct_sym(&r, 0.3f);
    ct_encode(type, w, rows, cols, enc, deq);
    llm_cuda_weight dw;
    CT_OK(c, llm_cuda_weight_upload(c, type, enc, cols, rows, rb, &dw));
    float *dx = ct_dev(c, (size_t)cols * sizeof(float));
    float *dg = ct_dev(c, (size_t)cols * sizeof(float));
    float *dy = ct_dev(c, (size_t)rows * sizeof(float));
    ct_put(c, dx, x, (size_t)cols * sizeof *x);
    ct_put(c, dg, g, (size_t)cols * sizeof *g);
    llm_cuda_mv_fuse f = {flags, dg, 1e-5f, NULL};
    llm_cuda_tuning t;
    CT_OK(c, llm_cuda_get_tuning(c, &t));
    for (int k = 0; k < NK; k++) {
        t.mv_l2 = conf[k][0];
        t.mv_split = conf[k][1];
        t.mv_blocks = conf[k][2];
        CT_OK(c, llm_cuda_set_tuning(c, &t));
        ct_poison(c, dy, (size_t)rows);
        CT_OK(c, llm_cuda_matvec_fused(c, &dw, dx, dy, &f));
        ct_get(c, y + (size_t)k * (size_t)rows, dy, (size_t)rows * sizeof *y);
    }
    int finite = 1;
    for (int64_t i = 0; i < rows; i++)
        finite &= isfinite(y[i]) != 0;
    CHECK(finite);
    for (int k = 1; k < NK; k++) {
        const float *ref = conf[k][1] ? y + 4 * (size_t)rows : y;
        CHECK(memcmp(ref, y + (size_t)k * (size_t)rows, (size_t)rows * sizeof *y) == 0);
    }
    printf("mv_l2 type %u rows %lld cols %lld flags %u: same bits at 0..3, one block\n", type,
           (long long)rows, (long long)cols, flags);
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    llm_cuda_weight_release(c, &dw);
    llm_cuda_mfree(c, dx), llm_cuda_mfree(c, dg), llm_cuda_mfree(c, dy);
    llm_cuda_free(c);
    free(w), free(x), free(g), free(y), free(deq), free(enc);
}

/* mv_l2 on the int8 Q8 kernel and the grouped k-quant kernels: more row
 * pairs than the grid has warps (each warp asks for its next pair), the
 * 8B model's widths, a lone last row, plain and with RMSNorm. */
static void matvec_l2(void)
{
    pin_native();
    pin_kq_layout(0);
    llm_cuda *c = ct_open(8, 64, 16, 4);
    int64_t rows = (int64_t)llm_cuda_sm_count(c) * 2 * 8 * 2 * 3 + 3;
    llm_cuda_free(c);
    const uint32_t types[] = {LLM_TYPE_Q8_0, LLM_TYPE_Q4_K, LLM_TYPE_Q5_K, LLM_TYPE_Q6_K};
    for (int i = 0; i < 4; i++) {
        l2_case(types[i], rows, 256, 0);
        l2_case(types[i], 301, 4096, LLM_CUDA_MV_NORM);
        l2_case(types[i], 64, 14336, 0);
    }
    pin_kq_layout(-1);
}

static void fused_shape_case(uint32_t type, unsigned flags, int ROWS, int COLS);

/* The context's prefetch distance is `want`. */
static void check_prefetch(llm_cuda *c, int want)
{
    llm_cuda_tuning t;
    CT_OK(c, llm_cuda_get_tuning(c, &t));
    CHECK_INT_EQ(t.mv_prefetch, want);
}

/* A row pair's columns split over 2..8 warps of a block (few pairs of
 * wide rows, a lone last row) and the same products with the split off,
 * on each batch size of the int8 Q8 kernel and on the native k-quant
 * layouts, plain, accumulating and fused (RMSNorm with SwiGLU pairs or
 * the residual add); then the int8 kernel asking L2 for weights ahead. */
static void matvec_split(void)
{
    const char *q8[] = {NULL, "int8u2", "int8u1"};
    pin_native();
    for (int i = 0; i < 3; i++)
        for (int split = 1; split >= 0; split--) {
            REQUIRE(q8[i] ? setenv("PHASEMARK_CUDA_Q8", q8[i], 1) == 0
                          : unsetenv("PHASEMARK_CUDA_Q8") == 0);
            REQUIRE(setenv("PHASEMARK_CUDA_MV_SPLIT", split ? "1" : "0", 1) == 0);
            matmul_case_acc(LLM_TYPE_Q8_0, 5, 8192 + 32, 1, 0, 64, 1);
            matmul_case_acc(LLM_TYPE_Q8_0, 299, 4096, 1, 0, 64, 0);
            fused_shape_case(LLM_TYPE_Q8_0, LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS, 6, 8192);
            if (i == 0) {
                matmul_case_acc(LLM_TYPE_Q4_K, 7, 14336, 1, 0, 64, 1);
                matmul_case_acc(LLM_TYPE_Q6_K, 7, 14336, 1, 0, 64, 0);
                fused_shape_case(LLM_TYPE_Q4_K, LLM_CUDA_MV_NORM | LLM_CUDA_MV_ACCUMULATE, 7,
                                 8192);
                fused_shape_case(LLM_TYPE_Q6_K, LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS, 6,
                                 8192);
                matmul_case_acc(LLM_TYPE_Q5_K, 7, 14336, 1, 0, 64, 1);
                fused_shape_case(LLM_TYPE_Q5_K, LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS, 6,
                                 8192);
            }
        }
    REQUIRE(unsetenv("PHASEMARK_CUDA_Q8") == 0 && unsetenv("PHASEMARK_CUDA_MV_SPLIT") == 0);
    /* L2 requests ahead of the loads, across a warp's row pairs and past
     * the last one (nothing is asked for there). */
    REQUIRE(setenv("PHASEMARK_CUDA_MV_PREFETCH", "3", 1) == 0);
    llm_cuda *c = ct_open(8, 64, 16, 4);
    int64_t rows = (int64_t)llm_cuda_sm_count(c) * 3 * 8 * 2 * 2 + 3;
    check_prefetch(c, 3);
    llm_cuda_free(c);
    matmul_case_acc(LLM_TYPE_Q8_0, rows, 416, 1, 0, 64, 1);
    matmul_case_acc(LLM_TYPE_Q8_0, 5, 8192 + 32, 1, 0, 64, 0);
    REQUIRE(unsetenv("PHASEMARK_CUDA_MV_PREFETCH") == 0);
}

static void matvec_batch(void)
{
    for (int32_t n = 2; n <= LLM_CUDA_MATVEC_MAX; n++)
        matmul_case(LLM_TYPE_BF16, 67, 768, n, 0, 64);
    matmul_case(LLM_TYPE_Q8_0, 67, 512, 5, 0, 64);
}

static void matvec_unaligned(void)
{
    matmul_case(LLM_TYPE_BF16, 45, 100, 1, 0, 64);  /* width not a multiple of 8 */
    matmul_case(LLM_TYPE_F16, 45, 256, 3, 1, 64);   /* activations misaligned */
    matmul_case(LLM_TYPE_F32, 45, 30, 2, 0, 64);
}

static void gemm_bf16(void) { matmul_case(LLM_TYPE_BF16, 200, 512, 37, 0, 64); }
static void gemm_f16(void) { matmul_case(LLM_TYPE_F16, 150, 512, 9, 0, 64); }
static void gemm_q8_0(void) { matmul_case(LLM_TYPE_Q8_0, 210, 640, 20, 0, 64); }
static void gemm_f32(void) { matmul_case(LLM_TYPE_F32, 100, 384, 33, 0, 64); }
/* More rows than the staging buffer holds: the product runs in slices. */
static void gemm_slices(void) { matmul_case(LLM_TYPE_BF16, 96, 256, 45, 0, 16); }

static void rmsnorm(void)
{
    enum { N = 3, DIM = 4096 };
    llm_cuda *c = ct_open(8, DIM, 16, 4);
    ct_rng r = {77};
    float *x = malloc(N * DIM * sizeof *x), *w = malloc(DIM * sizeof *w);
    float *y = malloc(N * DIM * sizeof *y);
    double *ref = malloc(N * DIM * sizeof *ref);
    REQUIRE(x && w && y && ref);
    ct_fill(&r, x, N * DIM, 3.0f);
    for (int i = 0; i < DIM; i++)
        w[i] = 1.0f + ct_sym(&r, 0.2f);
    float *dx = ct_dev(c, sizeof(float) * N * DIM), *dw = ct_dev(c, sizeof(float) * DIM);
    float *dy = ct_dev(c, sizeof(float) * N * DIM);
    ct_put(c, dx, x, sizeof(float) * N * DIM);
    ct_put(c, dw, w, sizeof(float) * DIM);
    ct_poison(c, dy, N * DIM);
    CT_OK(c, llm_cuda_rmsnorm(c, dy, dx, dw, N, DIM, 1e-5f));
    ct_get(c, y, dy, sizeof(float) * N * DIM);
    for (int t = 0; t < N; t++) {
        double ss = 0.0;
        for (int i = 0; i < DIM; i++)
            ss += (double)x[t * DIM + i] * x[t * DIM + i];
        double inv = 1.0 / sqrt(ss / DIM + 1e-5);
        for (int i = 0; i < DIM; i++)
            ref[t * DIM + i] = x[t * DIM + i] * inv * w[i];
    }
    double e = ct_rel_err(y, ref, N * DIM);
    printf("rmsnorm rel err %.3g\n", e);
    CHECK(e <= 1e-6);
    /* In place (y == x). */
    CT_OK(c, llm_cuda_rmsnorm(c, dx, dx, dw, N, DIM, 1e-5f));
    ct_get(c, y, dx, sizeof(float) * N * DIM);
    CHECK(ct_rel_err(y, ref, N * DIM) <= 1e-6);
    llm_cuda_mfree(c, dx), llm_cuda_mfree(c, dw), llm_cuda_mfree(c, dy);
    llm_cuda_free(c);
    free(x), free(w), free(y), free(ref);
}

/* RoPE on rows wider than their heads (stride > n_heads * head_dim), at a
 * large position (angles of thousands of radians), from a host base and
 * from the device register. */
static void rope(void)
{
    enum { N = 5, H = 4, HD = 64, STRIDE = H * HD + 32 };
    const uint32_t pos0 = 100000;
    const float scale = 0.25f;
    llm_cuda *c = ct_open(8, STRIDE, 16, H);
    ct_rng r = {5};
    float x[N * STRIDE], y[N * STRIDE];
    double ref[N * STRIDE], freq[HD / 2];
    ct_fill(&r, x, N * STRIDE, 2.0f);
    for (int i = 0; i < HD / 2; i++)
        freq[i] = pow(500000.0, -2.0 * i / HD);
    for (int t = 0; t < N; t++)
        for (int j = 0; j < STRIDE; j++)
            ref[t * STRIDE + j] = x[t * STRIDE + j]; /* the pad is untouched */
    for (int t = 0; t < N; t++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < HD / 2; i++) {
                double a = (double)(pos0 + (uint32_t)t) * scale * freq[i];
                double x0 = x[t * STRIDE + h * HD + 2 * i], x1 = x[t * STRIDE + h * HD + 2 * i + 1];
                ref[t * STRIDE + h * HD + 2 * i] = x0 * cos(a) - x1 * sin(a);
                ref[t * STRIDE + h * HD + 2 * i + 1] = x0 * sin(a) + x1 * cos(a);
            }
    float *dx = ct_dev(c, sizeof x);
    double *df = ct_dev(c, sizeof freq);
    ct_put(c, df, freq, sizeof freq);
    ct_put(c, dx, x, sizeof x);
    llm_cuda_positions p = {pos0, NULL};
    CT_OK(c, llm_cuda_rope(c, dx, N, H, STRIDE, p, df, scale, HD));
    ct_get(c, y, dx, sizeof y);
    double e = ct_max_err(y, ref, N * STRIDE);
    printf("rope max err %.3g\n", e);
    CHECK(e <= 1e-5);
    /* Same rotation with the base split between pos0 and the register. */
    ct_put(c, dx, x, sizeof x);
    CT_OK(c, llm_cuda_pos_set(c, pos0 - 7));
    llm_cuda_positions pr = {7, llm_cuda_pos(c)};
    CT_OK(c, llm_cuda_rope(c, dx, N, H, STRIDE, pr, df, scale, HD));
    ct_get(c, y, dx, sizeof y);
    CHECK(ct_max_err(y, ref, N * STRIDE) <= 1e-5);
    llm_cuda_mfree(c, dx), llm_cuda_mfree(c, df);
    llm_cuda_free(c);
}

static void swiglu_add(void)
{
    enum { L = 10007 };
    llm_cuda *c = ct_open(8, 64, 16, 4);
    ct_rng r = {9};
    float *g = malloc(L * sizeof *g), *u = malloc(L * sizeof *u), *o = malloc(L * sizeof *o);
    double *ref = malloc(L * sizeof *ref);
    REQUIRE(g && u && o && ref);
    ct_fill(&r, g, L, 8.0f);
    ct_fill(&r, u, L, 2.0f);
    float *dg = ct_dev(c, L * sizeof(float)), *du = ct_dev(c, L * sizeof(float));
    ct_put(c, dg, g, L * sizeof(float));
    ct_put(c, du, u, L * sizeof(float));
    CT_OK(c, llm_cuda_swiglu(c, dg, du, L));
    ct_get(c, o, dg, L * sizeof(float));
    for (int i = 0; i < L; i++)
        ref[i] = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
    double e = ct_rel_err(o, ref, L);
    printf("swiglu rel err %.3g\n", e);
    CHECK(e <= 1e-6);
    CT_OK(c, llm_cuda_add(c, dg, du, L));
    ct_get(c, o, dg, L * sizeof(float));
    for (int i = 0; i < L; i++)
        ref[i] += u[i];
    CHECK(ct_rel_err(o, ref, L) <= 1e-6);
    /* Interleaved pairs: out[i] = silu(gu[2i]) * gu[2i+1]. */
    ct_put(c, dg, g, L * sizeof(float));
    CT_OK(c, llm_cuda_swiglu_pairs(c, du, dg, L / 2));
    ct_get(c, o, du, (L / 2) * sizeof(float));
    for (int i = 0; i < L / 2; i++)
        ref[i] = g[2 * i] / (1.0 + exp(-(double)g[2 * i])) * g[2 * i + 1];
    CHECK(ct_rel_err(o, ref, L / 2) <= 1e-6);
    llm_cuda_mfree(c, dg), llm_cuda_mfree(c, du);
    llm_cuda_free(c);
    free(g), free(u), free(o), free(ref);
}

static void embed_type(llm_cuda *c, uint32_t type)
{
    enum { V = 50, N = 4, DMAX = 256 };
    const int D = is_kq(type) ? 256 : 96; /* k-quants: one super-block a row */
    ct_rng r = {11 + type};
    float w[V * DMAX], out[N * DMAX];
    double deq[V * DMAX], ref[N * DMAX];
    unsigned char enc[V * DMAX * 4];
    ct_fill(&r, w, V * D, 1.0f);
    size_t rb = ct_encode(type, w, V, D, enc, deq);
    llm_cuda_weight dw;
    CT_OK(c, llm_cuda_weight_upload(c, type, enc, D, V, rb, &dw));
    int32_t ids[N] = {3, 49, -1, 0}; /* -1: outside the table, zero row */
    int32_t *did = ct_dev(c, sizeof ids);
    float *dout = ct_dev(c, sizeof out);
    ct_put(c, did, ids, sizeof ids);
    CT_OK(c, llm_cuda_embed(c, &dw, did, N, dout));
    ct_get(c, out, dout, sizeof out);
    for (int t = 0; t < N; t++)
        for (int i = 0; i < D; i++)
            ref[t * D + i] = ids[t] < 0 ? 0.0 : deq[ids[t] * D + i];
    double e = ct_max_err(out, ref, N * D);
    printf("embed type %u max err %.3g\n", type, e);
    /* k-quant values take one fp32 rounding from the exact product */
    CHECK(is_kq(type) ? e <= 1e-6 : e == 0.0);
    llm_cuda_weight_release(c, &dw);
    llm_cuda_mfree(c, did), llm_cuda_mfree(c, dout);
}

static void embed(void)
{
    llm_cuda *c = ct_open(8, 128, 16, 4);
    embed_type(c, LLM_TYPE_F32);
    embed_type(c, LLM_TYPE_F16);
    embed_type(c, LLM_TYPE_BF16);
    embed_type(c, LLM_TYPE_Q8_0);
    embed_type(c, LLM_TYPE_Q4_0);
    embed_type(c, LLM_TYPE_Q4_K);
    embed_type(c, LLM_TYPE_Q5_K);
    embed_type(c, LLM_TYPE_Q6_K);
    llm_cuda_free(c);
}

/* The activation a fused product multiplies: x (times inv and g with
 * MV_NORM) in double; on the int8 kernel, x * g in float quantized as
 * q8_acts does, times inv (the kernel scales the finished dot products). */
static void q8_fused_acts(llm_cuda *c, uint32_t type, unsigned flags, const float *x,
                          const float *g, double inv, int cols, double *xn)
{
    int norm = (flags & LLM_CUDA_MV_NORM) != 0;
    if (!int8_path(c, type, cols, 1, 0)) {
        for (int i = 0; i < cols; i++)
            xn[i] = norm ? x[i] * inv * g[i] : x[i];
        return;
    }
    float *xg = malloc((size_t)cols * sizeof *xg);
    REQUIRE(xg);
    for (int i = 0; i < cols; i++)
        xg[i] = norm ? x[i] * g[i] : x[i];
    q8_acts(xg, cols, xn);
    for (int i = 0; i < cols; i++)
        xn[i] *= norm ? inv : 1.0;
    free(xg);
}

/* The decode fusions against the unfused definition in double, ROWS rows
 * of COLS columns. */
static void fused_shape_case(uint32_t type, unsigned flags, int ROWS, int COLS)
{
    llm_cuda *c = ct_open(8, COLS, 16, 4);
    ct_rng r = {4000u + type + flags * 17u};
    size_t rb = ct_row_bytes(type, COLS);
    float *w = malloc(sizeof(float) * ROWS * COLS), y0[300], y[300];
    float *x = malloc(sizeof(float) * COLS), *g = malloc(sizeof(float) * COLS);
    double *deq = malloc(sizeof(double) * ROWS * COLS), ref[300];
    double *xn = malloc(sizeof(double) * COLS);
    REQUIRE(ROWS <= 300);
    void *enc = malloc(rb * ROWS);
    REQUIRE(w && deq && enc && x && g && xn);
    ct_fill(&r, w, (size_t)ROWS * COLS, 1.0f);
    ct_fill(&r, x, COLS, 2.0f);
    ct_fill(&r, y0, ROWS, 1.0f);
    for (int i = 0; i < COLS; i++)
        g[i] = 1.0f + ct_sym(&r, 0.3f);
    ct_encode(type, w, ROWS, COLS, enc, deq);
    double ss = 0.0;
    for (int i = 0; i < COLS; i++)
        ss += (double)x[i] * x[i];
    double inv = 1.0 / sqrt(ss / COLS + 1e-5);
    q8_fused_acts(c, type, flags, x, g, inv, COLS, xn);
    int pairs = (flags & LLM_CUDA_MV_SWIGLU_PAIRS) != 0, nout = pairs ? ROWS / 2 : ROWS;
    for (int o = 0; o < nout; o++) {
        double d[2] = {0.0, 0.0};
        for (int k2 = 0; k2 <= pairs; k2++)
            for (int i = 0; i < COLS; i++)
                d[k2] += deq[(size_t)(pairs ? 2 * o + k2 : o) * COLS + i] * xn[i];
        double v = pairs ? d[0] / (1.0 + exp(-d[0])) * d[1] : d[0];
        ref[o] = (flags & LLM_CUDA_MV_ACCUMULATE) ? y0[o] + v : v;
    }
    llm_cuda_weight dw;
    CT_OK(c, llm_cuda_weight_upload(c, type, enc, COLS, ROWS, rb, &dw));
    size_t xb = sizeof(float) * (size_t)COLS;
    float *dx = ct_dev(c, xb), *dg = ct_dev(c, xb);
    float *dy = ct_dev(c, sizeof(float) * ROWS);
    ct_put(c, dx, x, xb);
    ct_put(c, dg, g, xb);
    ct_put(c, dy, y0, sizeof(float) * ROWS);
    llm_cuda_mv_fuse f = {flags, dg, 1e-5f, NULL};
    CT_OK(c, llm_cuda_matvec_fused(c, &dw, dx, dy, &f));
    ct_get(c, y, dy, sizeof(float) * ROWS);
    double e = ct_rel_err(y, ref, (size_t)nout);
    printf("fused type %u flags %u rows %d cols %d: rel err %.3g\n", type, flags, ROWS, COLS,
           e);
    CHECK(e <= 2e-5);
    if (pairs) /* the tail past rows/2 is not written */
        CHECK_NEAR(y[ROWS - 1], y0[ROWS - 1], 0.0);
    llm_cuda_weight_release(c, &dw);
    llm_cuda_mfree(c, dx), llm_cuda_mfree(c, dg), llm_cuda_mfree(c, dy);
    llm_cuda_free(c);
    free(w), free(deq), free(enc), free(x), free(g), free(xn);
}

static void fused_rows_case(uint32_t type, unsigned flags, int rows)
{
    fused_shape_case(type, flags, rows, 1024);
}

static void fused_case(uint32_t type, unsigned flags)
{
    fused_rows_case(type, flags, 258);
}

static void matvec_fused(void)
{
    fused_rows_case(LLM_TYPE_BF16, LLM_CUDA_MV_NORM, 257); /* odd: a lone last row */
    fused_rows_case(LLM_TYPE_BF16, LLM_CUDA_MV_NORM | LLM_CUDA_MV_ACCUMULATE, 9);
    const unsigned combos[] = {0, LLM_CUDA_MV_NORM, LLM_CUDA_MV_ACCUMULATE,
                               LLM_CUDA_MV_NORM | LLM_CUDA_MV_ACCUMULATE,
                               LLM_CUDA_MV_SWIGLU_PAIRS,
                               LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS,
                               LLM_CUDA_MV_ACCUMULATE | LLM_CUDA_MV_SWIGLU_PAIRS};
    for (size_t i = 0; i < sizeof combos / sizeof combos[0]; i++)
        fused_case(LLM_TYPE_BF16, combos[i]);
    fused_case(LLM_TYPE_Q8_0, LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS);
    fused_case(LLM_TYPE_F16, LLM_CUDA_MV_ACCUMULATE);
    fused_case(LLM_TYPE_F32, LLM_CUDA_MV_NORM);
    fused_case(LLM_TYPE_Q8_0, LLM_CUDA_MV_ACCUMULATE);
    fused_case(LLM_TYPE_F32, 0);
    /* Shapes the fused kernels refuse. */
    llm_cuda *c = ct_open(8, 64, 16, 4);
    llm_cuda_weight w;
    CT_OK(c, llm_cuda_weight_alloc(c, LLM_TYPE_BF16, 36, 3, &w));
    float *d = ct_dev(c, 256 * sizeof(float));
    llm_cuda_mv_fuse f = {LLM_CUDA_MV_SWIGLU_PAIRS, NULL, 0.0f, NULL};
    CHECK_INT_EQ(llm_cuda_matvec_fused(c, &w, d, d + 128, &f), LLM_EINVAL); /* odd rows, cols % 8 */
    f.flags = 16;
    CHECK_INT_EQ(llm_cuda_matvec_fused(c, &w, d, d + 128, &f), LLM_EINVAL);
    f.flags = LLM_CUDA_MV_ROPE_STORE; /* no rope arguments */
    CHECK_INT_EQ(llm_cuda_matvec_fused(c, &w, d, d + 128, &f), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    llm_cuda_weight_release(c, &w);
    llm_cuda_mfree(c, d);
    llm_cuda_free(c);
}

/* RoPE + cache store of [q | k | v] rows against the reference rotation. */
static void rope_qkv_store(void)
{
    enum { N = 3, H = 4, KVH = 2, HD = 32, W = (H + 2 * KVH) * HD, CTX = 64 };
    const uint32_t pos0 = 20;
    llm_cuda *c = ct_open(8, W, CTX, H);
    ct_rng r = {71};
    float x[N * W], y[N * W], kc[CTX * KVH * HD], vc[CTX * KVH * HD];
    double ref[N * W], freq[HD / 2];
    ct_fill(&r, x, N * W, 1.0f);
    for (int i = 0; i < HD / 2; i++)
        freq[i] = pow(10000.0, -2.0 * i / HD);
    for (int t = 0; t < N; t++)
        for (int j = 0; j < W; j++)
            ref[t * W + j] = x[t * W + j];
    for (int t = 0; t < N; t++)
        for (int h = 0; h < H + KVH; h++)
            for (int i = 0; i < HD / 2; i++) {
                double a = (double)(pos0 + (uint32_t)t) * freq[i];
                double x0 = x[t * W + h * HD + 2 * i], x1 = x[t * W + h * HD + 2 * i + 1];
                ref[t * W + h * HD + 2 * i] = x0 * cos(a) - x1 * sin(a);
                ref[t * W + h * HD + 2 * i + 1] = x0 * sin(a) + x1 * cos(a);
            }
    float *dx = ct_dev(c, sizeof x), *dk = ct_dev(c, sizeof kc), *dv = ct_dev(c, sizeof vc);
    double *df = ct_dev(c, sizeof freq);
    ct_put(c, dx, x, sizeof x);
    ct_put(c, df, freq, sizeof freq);
    ct_poison(c, dk, CTX * KVH * HD);
    ct_poison(c, dv, CTX * KVH * HD);
    CT_OK(c, llm_cuda_pos_set(c, pos0));
    llm_cuda_positions p = {0, llm_cuda_pos(c)};
    CT_OK(c, llm_cuda_rope_qkv_store(c, dx, N, W, H, KVH, HD, p, df, 1.0f, dk, dv));
    ct_get(c, y, dx, sizeof y);
    ct_get(c, kc, dk, sizeof kc);
    ct_get(c, vc, dv, sizeof vc);
    CHECK(ct_max_err(y, ref, N * W) <= 1e-5);
    for (int t = 0; t < N; t++)
        for (int d = 0; d < KVH * HD; d++) {
            CHECK_NEAR(kc[(pos0 + t) * KVH * HD + d], ref[t * W + H * HD + d], 1e-5);
            CHECK_NEAR(vc[(pos0 + t) * KVH * HD + d], x[t * W + (H + KVH) * HD + d], 0.0);
        }
    CHECK(isnan(kc[(pos0 - 1) * KVH * HD])); /* other rows untouched */
    llm_cuda_mfree(c, dx), llm_cuda_mfree(c, dk), llm_cuda_mfree(c, dv), llm_cuda_mfree(c, df);
    llm_cuda_free(c);
}

/* The q/k/v product with RoPE and the cache store in its epilogue, against
 * the product in double followed by the reference rotation, at a position
 * from the register. */
static void rope_store_case(uint32_t type, unsigned flags)
{
    enum { H = 4, KVH = 2, HD = 32, ROWS = (H + 2 * KVH) * HD, COLS = 512, CTX = 64 };
    const uint32_t pos = 37;
    llm_cuda *c = ct_open(8, COLS, CTX, H);
    ct_rng r = {900u + type + flags};
    size_t rb = ct_row_bytes(type, COLS);
    float *w = malloc(sizeof(float) * ROWS * COLS), x[COLS], g[COLS], y[ROWS];
    float kc[CTX * KVH * HD], vc[CTX * KVH * HD];
    double *deq = malloc(sizeof(double) * ROWS * COLS), ref[ROWS], xn[COLS], freq[HD / 2];
    void *enc = malloc(rb * ROWS);
    REQUIRE(w && deq && enc);
    ct_fill(&r, w, (size_t)ROWS * COLS, 1.0f);
    ct_fill(&r, x, COLS, 2.0f);
    for (int i = 0; i < COLS; i++)
        g[i] = 1.0f + ct_sym(&r, 0.3f);
    for (int i = 0; i < HD / 2; i++)
        freq[i] = pow(10000.0, -2.0 * i / HD);
    ct_encode(type, w, ROWS, COLS, enc, deq);
    double ss = 0.0;
    for (int i = 0; i < COLS; i++)
        ss += (double)x[i] * x[i];
    double inv = 1.0 / sqrt(ss / COLS + 1e-5);
    q8_fused_acts(c, type, flags, x, g, inv, COLS, xn);
    for (int o = 0; o < ROWS; o++) {
        ref[o] = 0.0;
        for (int i = 0; i < COLS; i++)
            ref[o] += deq[(size_t)o * COLS + i] * xn[i];
    }
    for (int h = 0; h < H + KVH; h++)
        for (int i = 0; i < HD / 2; i++) {
            double a = (double)pos * freq[i], x0 = ref[h * HD + 2 * i], x1 = ref[h * HD + 2 * i + 1];
            ref[h * HD + 2 * i] = x0 * cos(a) - x1 * sin(a);
            ref[h * HD + 2 * i + 1] = x0 * sin(a) + x1 * cos(a);
        }
    llm_cuda_weight dw;
    CT_OK(c, llm_cuda_weight_upload(c, type, enc, COLS, ROWS, rb, &dw));
    float *dx = ct_dev(c, sizeof x), *dg = ct_dev(c, sizeof g), *dy = ct_dev(c, sizeof y);
    float *dk = ct_dev(c, sizeof kc), *dv = ct_dev(c, sizeof vc);
    double *df = ct_dev(c, sizeof freq);
    ct_put(c, dx, x, sizeof x);
    ct_put(c, dg, g, sizeof g);
    ct_put(c, df, freq, sizeof freq);
    ct_poison(c, dy, ROWS);
    ct_poison(c, dk, CTX * KVH * HD);
    ct_poison(c, dv, CTX * KVH * HD);
    CT_OK(c, llm_cuda_pos_set(c, pos - 5));
    llm_cuda_rope_store rs = {{5, llm_cuda_pos(c)}, df, 1.0f, H, KVH, HD, dk, dv};
    llm_cuda_mv_fuse f = {flags, dg, 1e-5f, &rs};
    CT_OK(c, llm_cuda_matvec_fused(c, &dw, dx, dy, &f));
    ct_get(c, y, dy, sizeof y);
    ct_get(c, kc, dk, sizeof kc);
    ct_get(c, vc, dv, sizeof vc);
    double e = ct_rel_err(y, ref, ROWS);
    double ek = ct_rel_err(kc + pos * KVH * HD, ref + H * HD, KVH * HD);
    double ev = ct_rel_err(vc + pos * KVH * HD, ref + (H + KVH) * HD, KVH * HD);
    printf("rope store type %u flags %u: rel err q|k|v %.3g, k cache %.3g, v cache %.3g\n",
           type, flags, e, ek, ev);
    CHECK(e <= 2e-5 && ek <= 2e-5 && ev <= 2e-5);
    for (int d = 0; d < KVH * HD; d++) { /* the caches hold exactly what y holds */
        CHECK_NEAR(kc[pos * KVH * HD + d], y[H * HD + d], 0.0);
        CHECK_NEAR(vc[pos * KVH * HD + d], y[(H + KVH) * HD + d], 0.0);
    }
    CHECK(isnan(kc[(pos - 1) * KVH * HD]) && isnan(vc[(pos + 1) * KVH * HD]));
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    llm_cuda_weight_release(c, &dw);
    llm_cuda_mfree(c, dx), llm_cuda_mfree(c, dg), llm_cuda_mfree(c, dy);
    llm_cuda_mfree(c, dk), llm_cuda_mfree(c, dv), llm_cuda_mfree(c, df);
    llm_cuda_free(c);
    free(w), free(deq), free(enc);
}

static void matvec_rope_store(void)
{
    rope_store_case(LLM_TYPE_BF16, LLM_CUDA_MV_NORM | LLM_CUDA_MV_ROPE_STORE);
    rope_store_case(LLM_TYPE_BF16, LLM_CUDA_MV_ROPE_STORE);
    rope_store_case(LLM_TYPE_Q8_0, LLM_CUDA_MV_NORM | LLM_CUDA_MV_ROPE_STORE);
    rope_store_case(LLM_TYPE_F32, LLM_CUDA_MV_NORM | LLM_CUDA_MV_ROPE_STORE);
    /* A weight that is not stacked q/k/v of the stated heads is refused. */
    llm_cuda *c = ct_open(8, 64, 16, 4);
    llm_cuda_weight w;
    CT_OK(c, llm_cuda_weight_alloc(c, LLM_TYPE_BF16, 64, 250, &w));
    float *d = ct_dev(c, 512 * sizeof(float));
    llm_cuda_rope_store rs = {{0, NULL}, (const double *)d, 1.0f, 4, 2, 32, d, d};
    llm_cuda_mv_fuse f = {LLM_CUDA_MV_ROPE_STORE, NULL, 0.0f, &rs};
    CHECK_INT_EQ(llm_cuda_matvec_fused(c, &w, d, d + 256, &f), LLM_EINVAL);
    f.flags |= LLM_CUDA_MV_ACCUMULATE;
    CHECK_INT_EQ(llm_cuda_matvec_fused(c, &w, d, d + 256, &f), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    llm_cuda_weight_release(c, &w);
    llm_cuda_mfree(c, d);
    llm_cuda_free(c);
}

/* Every decode fusion over the native k-quant layouts, and a row the
 * fused kernel cannot hold refused. */
static void matvec_fused_kq(void)
{
    pin_native();
    const unsigned combos[] = {0, LLM_CUDA_MV_NORM, LLM_CUDA_MV_ACCUMULATE,
                               LLM_CUDA_MV_NORM | LLM_CUDA_MV_ACCUMULATE,
                               LLM_CUDA_MV_SWIGLU_PAIRS,
                               LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS,
                               LLM_CUDA_MV_ACCUMULATE | LLM_CUDA_MV_SWIGLU_PAIRS};
    for (size_t i = 0; i < sizeof combos / sizeof combos[0]; i++) {
        for (int k = 0; k < 3; k++) {
            pin_kq_layout(k);
            fused_case(LLM_TYPE_Q4_K, combos[i]);
        }
        pin_kq_layout(-1);
        fused_case(LLM_TYPE_Q6_K, combos[i]);
        fused_case(LLM_TYPE_Q5_K, combos[i]);
    }
    for (int k = 0; k < 3; k++) {
        pin_kq_layout(k);
        fused_rows_case(LLM_TYPE_Q4_K, LLM_CUDA_MV_NORM, 257);
        rope_store_case(LLM_TYPE_Q4_K, LLM_CUDA_MV_NORM | LLM_CUDA_MV_ROPE_STORE);
    }
    pin_kq_layout(-1);
    rope_store_case(LLM_TYPE_Q6_K, LLM_CUDA_MV_ROPE_STORE);
    fused_rows_case(LLM_TYPE_Q5_K, LLM_CUDA_MV_NORM, 257);
    rope_store_case(LLM_TYPE_Q5_K, LLM_CUDA_MV_NORM | LLM_CUDA_MV_ROPE_STORE);
    llm_cuda *c = ct_open(8, 64, 16, 4);
    llm_cuda_weight w;
    CT_OK(c, llm_cuda_weight_alloc(c, LLM_TYPE_Q4_K, LLM_CUDA_KQ_MAX_COLS + 256, 2, &w));
    CHECK_INT_EQ((int)w.bytes, (LLM_CUDA_KQ_MAX_COLS + 256) / 256 * 144 * 2);
    float *d = ct_dev(c, (LLM_CUDA_KQ_MAX_COLS + 512) * sizeof(float));
    llm_cuda_mv_fuse f = {0, NULL, 0.0f, NULL};
    CHECK_INT_EQ(llm_cuda_matvec_fused(c, &w, d, d + LLM_CUDA_KQ_MAX_COLS + 256, &f),
                 LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    llm_cuda_weight_release(c, &w);
    CT_OK(c, llm_cuda_weight_alloc(c, LLM_TYPE_Q6_K, 512, 3, &w));
    CHECK_INT_EQ((int)w.bytes, 2 * 208 * 3 + 2 * 2 * 3);
    llm_cuda_weight_release(c, &w);
    llm_cuda_mfree(c, d);
    llm_cuda_free(c);
}

/* One Q8_0 product (rows x cols, fused `flags`; with MV_ROPE_STORE the
 * rows are the stacked q/k/v of heads x 128 and kv x 128) through the
 * register kernel (mv_async 0) and through the async-copy kernel at 2, 4
 * and 8 stages, two blocks a multiprocessor (the default) and one: the
 * same bits in y and, with RoPE, in both caches, and the async-copy runs
 * are the ones that say they take the kernel. */
static void async_case(int64_t rows, int64_t cols, unsigned flags, int heads, int kv)
{
    enum { NK = 5, HD = 128, CTX = 8 };
    const uint32_t pos = 5;
    llm_cuda *c = ct_open(8, cols, CTX, heads ? heads : 4);
    ct_rng r = {0x7a3au + (uint64_t)rows * 7u + (uint64_t)cols + flags};
    size_t nw = (size_t)rows * (size_t)cols, rb = ct_row_bytes(LLM_TYPE_Q8_0, cols);
    size_t ny = (flags & LLM_CUDA_MV_SWIGLU_PAIRS) ? (size_t)rows / 2 : (size_t)rows;
    size_t nc = (size_t)CTX * (size_t)kv * HD;
    const int conf[NK][2] = {{0, 0}, {2, 0}, {4, 0}, {8, 0}, {3, 1}}; /* {mv_async, mv_blocks} */
    float *w = malloc(nw * sizeof *w), *x = malloc((size_t)cols * sizeof *x);
    float *g = malloc((size_t)cols * sizeof *g), *y0 = malloc(ny * sizeof *y0);
    float *y = malloc(NK * ny * sizeof *y), *kc = malloc(NK * (nc + 1) * sizeof *kc);
    float *vc = malloc(NK * (nc + 1) * sizeof *vc);
    double *deq = malloc(nw * sizeof *deq), freq[HD / 2];
    void *enc = malloc(rb * (size_t)rows);
    REQUIRE(w && x && g && y0 && y && kc && vc && deq && enc);
    ct_fill(&r, w, nw, 1.0f);
    ct_fill(&r, x, (size_t)cols, 2.0f);
    ct_fill(&r, y0, ny, 1.0f);
    for (int64_t i = 0; i < cols; i++)
        g[i] = 1.0f + ct_sym(&r, 0.3f);
    for (int i = 0; i < HD / 2; i++)
        freq[i] = pow(500000.0, -2.0 * i / HD);
    ct_encode(LLM_TYPE_Q8_0, w, rows, cols, enc, deq);
    llm_cuda_weight dw;
    CT_OK(c, llm_cuda_weight_upload(c, LLM_TYPE_Q8_0, enc, cols, rows, rb, &dw));
    float *dx = ct_dev(c, (size_t)cols * sizeof(float)), *dg = ct_dev(c, (size_t)cols * 4);
    float *dy = ct_dev(c, ny * sizeof(float));
    float *dk = ct_dev(c, (nc + 1) * sizeof(float)), *dv = ct_dev(c, (nc + 1) * sizeof(float));
    double *df = ct_dev(c, sizeof freq);
    ct_put(c, dx, x, (size_t)cols * sizeof *x);
    ct_put(c, dg, g, (size_t)cols * sizeof *g);
    ct_put(c, df, freq, sizeof freq);
    CT_OK(c, llm_cuda_pos_set(c, 0));
    llm_cuda_rope_store rs = {{pos, llm_cuda_pos(c)}, df, 1.0f, heads, kv, HD, dk, dv};
    llm_cuda_mv_fuse f = {flags, dg, 1e-5f, (flags & LLM_CUDA_MV_ROPE_STORE) ? &rs : NULL};
    llm_cuda_tuning t;
    CT_OK(c, llm_cuda_get_tuning(c, &t));
    for (int k = 0; k < NK; k++) {
        t.mv_async = conf[k][0];
        t.mv_blocks = conf[k][1];
        t.mv_split = 0;
        CT_OK(c, llm_cuda_set_tuning(c, &t));
        CHECK(strcmp(llm_cuda_matvec_kernel(c, &dw),
                     k ? "matvec_q8a_kernel" : "matvec_q8i_kernel") == 0);
        ct_put(c, dy, y0, ny * sizeof *y0);
        ct_poison(c, dk, nc + 1);
        ct_poison(c, dv, nc + 1);
        CT_OK(c, llm_cuda_matvec_fused(c, &dw, dx, dy, &f));
        ct_get(c, y + (size_t)k * ny, dy, ny * sizeof *y);
        ct_get(c, kc + (size_t)k * (nc + 1), dk, (nc + 1) * sizeof *kc);
        ct_get(c, vc + (size_t)k * (nc + 1), dv, (nc + 1) * sizeof *vc);
    }
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    int finite = 1;
    for (size_t i = 0; i < ny; i++)
        finite &= isfinite(y[i]) != 0;
    CHECK(finite);
    if (flags & LLM_CUDA_MV_ROPE_STORE) /* the stored position only */
        CHECK(isfinite(kc[pos * kv * HD]) && isnan(kc[(pos - 1) * kv * HD]));
    for (int k = 1; k < NK; k++) {
        CHECK(memcmp(y, y + (size_t)k * ny, ny * sizeof *y) == 0);
        CHECK(memcmp(kc, kc + (size_t)k * (nc + 1), (nc + 1) * sizeof *kc) == 0);
        CHECK(memcmp(vc, vc + (size_t)k * (nc + 1), (nc + 1) * sizeof *vc) == 0);
    }
    printf("mv_async rows %lld cols %lld flags %u: the register kernel's bits at 2, 4, 8 "
           "stages, 1 block\n", (long long)rows, (long long)cols, flags);
    llm_cuda_weight_release(c, &dw);
    llm_cuda_mfree(c, dx), llm_cuda_mfree(c, dg), llm_cuda_mfree(c, dy);
    llm_cuda_mfree(c, dk), llm_cuda_mfree(c, dv), llm_cuda_mfree(c, df);
    llm_cuda_free(c);
    free(w), free(x), free(g), free(y0), free(y), free(kc), free(vc), free(deq), free(enc);
}

/* The async-copy Q8 kernel: a lone chunk shorter than a stage, whole and
 * partial last chunks, more pairs than the grid's warps and fewer, a lone
 * last row, every fusion (the 8B q/k/v with RoPE), and the tuning's range;
 * a row that is not a multiple of 256 keeps the register kernel. */
static void matvec_async(void)
{
    llm_cuda *c = ct_open(8, 64, 16, 4);
    int64_t many = (int64_t)llm_cuda_sm_count(c) * 2 * 4 * 3 + 3;
    llm_cuda_tuning t;
    CT_OK(c, llm_cuda_get_tuning(c, &t));
    llm_cuda_tuning bad = t;
    bad.mv_async = 1;
    CHECK_INT_EQ(llm_cuda_set_tuning(c, &bad), LLM_EINVAL);
    bad.mv_async = LLM_CUDA_MV_ASYNC_MAX + 1;
    CHECK_INT_EQ(llm_cuda_set_tuning(c, &bad), LLM_EINVAL);
    llm_cuda_weight w;
    CT_OK(c, llm_cuda_weight_alloc(c, LLM_TYPE_Q8_0, 288, 4, &w));
    t.mv_async = 4;
    CT_OK(c, llm_cuda_set_tuning(c, &t));
    CHECK(strcmp(llm_cuda_matvec_kernel(c, &w), "matvec_q8i_kernel") == 0);
    llm_cuda_weight_release(c, &w);
    llm_cuda_free(c);
    async_case(many, 256, 0, 0, 0);
    async_case(301, 4096, LLM_CUDA_MV_NORM, 0, 0);
    async_case(64, 14336, LLM_CUDA_MV_ACCUMULATE, 0, 0);
    async_case(8194, 2304, LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS, 0, 0);
    async_case(130, 1280, LLM_CUDA_MV_SWIGLU_PAIRS | LLM_CUDA_MV_ACCUMULATE, 0, 0);
    async_case(7, 512, LLM_CUDA_MV_NORM | LLM_CUDA_MV_ACCUMULATE, 0, 0);
    async_case((32 + 2 * 8) * 128, 4096, LLM_CUDA_MV_NORM | LLM_CUDA_MV_ROPE_STORE, 32, 8);
}

/* A layer's o, gate/up and down (d wide, ffn f, o over a rows of width
 * `a`, then a fourth plain product over the result when four) as one chain
 * against the same products launched one by one: the same bits in the
 * residual and the SwiGLU vector. */
static void chain_case(int64_t d, int64_t f, int64_t a, int n)
{
    llm_cuda *c = ct_open(8, f > d ? f : d, 16, 4);
    ct_rng r = {0xc4a1u + (uint64_t)d + (uint64_t)f * 3u + (uint64_t)n};
    const int64_t rows[4] = {d, 2 * f, d, d}, cols[4] = {a, d, f, d};
    llm_cuda_weight w[4];
    for (int i = 0; i < 4; i++) {
        size_t nw = (size_t)rows[i] * (size_t)cols[i], rb = ct_row_bytes(LLM_TYPE_Q8_0, cols[i]);
        float *hw = malloc(nw * sizeof *hw);
        double *deq = malloc(nw * sizeof *deq);
        void *enc = malloc(rb * (size_t)rows[i]);
        REQUIRE(hw && deq && enc);
        ct_fill(&r, hw, nw, 1.0f);
        ct_encode(LLM_TYPE_Q8_0, hw, rows[i], cols[i], enc, deq);
        CT_OK(c, llm_cuda_weight_upload(c, LLM_TYPE_Q8_0, enc, cols[i], rows[i], rb, &w[i]));
        free(hw), free(deq), free(enc);
    }
    float *in = malloc((size_t)a * sizeof *in), *h0 = malloc((size_t)d * sizeof *h0);
    float *g = malloc((size_t)d * sizeof *g), *out[2][3];
    REQUIRE(in && h0 && g);
    ct_fill(&r, in, (size_t)a, 2.0f);
    ct_fill(&r, h0, (size_t)d, 2.0f);
    for (int64_t i = 0; i < d; i++)
        g[i] = 1.0f + ct_sym(&r, 0.3f);
    float *din = ct_dev(c, (size_t)a * 4), *dh = ct_dev(c, (size_t)d * 4);
    float *dg = ct_dev(c, (size_t)d * 4), *dt = ct_dev(c, (size_t)f * 4);
    float *dz = ct_dev(c, (size_t)d * 4);
    ct_put(c, din, in, (size_t)a * 4);
    ct_put(c, dg, g, (size_t)d * 4);
    llm_cuda_chain_step st[4] = {
        {&w[0], din, dh, {LLM_CUDA_MV_ACCUMULATE, NULL, 0.0f, NULL}},
        {&w[1], dh, dt, {LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS, dg, 1e-5f, NULL}},
        {&w[2], dt, dh, {LLM_CUDA_MV_ACCUMULATE, NULL, 0.0f, NULL}},
        {&w[3], dh, dz, {LLM_CUDA_MV_NORM, dg, 1e-5f, NULL}},
    };
    const size_t len[3] = {(size_t)d, (size_t)f, (size_t)d};
    float *dev_of[3] = {dh, dt, dz};
    for (int run = 0; run < 2; run++) {
        ct_put(c, dh, h0, (size_t)d * 4);
        ct_poison(c, dt, (size_t)f);
        ct_poison(c, dz, (size_t)d);
        if (run == 0)
            for (int i = 0; i < n; i++)
                CT_OK(c, llm_cuda_matvec_fused(c, st[i].w, st[i].x, st[i].y, &st[i].f));
        else
            CT_OK(c, llm_cuda_matvec_chain(c, st, n));
        for (int k = 0; k < 3; k++) {
            out[run][k] = malloc(len[k] * sizeof(float));
            REQUIRE(out[run][k]);
            ct_get(c, out[run][k], dev_of[k], len[k] * sizeof(float));
        }
    }
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    int finite = 1;
    for (int64_t i = 0; i < d; i++)
        finite &= isfinite(out[0][0][i]) != 0;
    CHECK(finite && (n < 2 || isfinite(out[0][1][0])) && (n < 4 || isfinite(out[0][2][0])));
    for (int k = 0; k < 3; k++)
        CHECK(memcmp(out[0][k], out[1][k], len[k] * sizeof(float)) == 0);
    printf("chain d %lld f %lld a %lld, %d steps: the one-by-one bits\n", (long long)d,
           (long long)f, (long long)a, n);
    for (int run = 0; run < 2; run++)
        for (int k = 0; k < 3; k++)
            free(out[run][k]);
    for (int i = 0; i < 4; i++)
        llm_cuda_weight_release(c, &w[i]);
    llm_cuda_mfree(c, din), llm_cuda_mfree(c, dh), llm_cuda_mfree(c, dg);
    llm_cuda_mfree(c, dt), llm_cuda_mfree(c, dz);
    llm_cuda_free(c);
    free(in), free(h0), free(g);
}

/* llm_cuda_matvec_chain: the 8B layer's widths (more gate/up pairs than
 * the grid has warps, fewer o and down pairs), a small layer, one and four
 * steps; what it refuses. */
static void matvec_chain(void)
{
    chain_case(4096, 14336, 4096, 3);
    chain_case(512, 1408, 512, 3);
    chain_case(512, 1408, 256, 4);
    chain_case(2048, 8192, 2048, 1);
    llm_cuda *c = ct_open(8, 64, 16, 4);
    llm_cuda_weight q, h;
    CT_OK(c, llm_cuda_weight_alloc(c, LLM_TYPE_Q8_0, 64, 4, &q));
    CT_OK(c, llm_cuda_weight_alloc(c, LLM_TYPE_F16, 64, 4, &h));
    float *dv = ct_dev(c, 256 * sizeof(float));
    llm_cuda_chain_step st[5];
    for (int i = 0; i < 5; i++) {
        llm_cuda_chain_step one = {&q, dv, dv + 128, {0, NULL, 0.0f, NULL}};
        st[i] = one;
    }
    CHECK_INT_EQ(llm_cuda_matvec_chain(c, st, 0), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_matvec_chain(c, st, LLM_CUDA_CHAIN_MAX + 1), LLM_EINVAL);
    st[1].f.flags = LLM_CUDA_MV_ROPE_STORE;
    CHECK_INT_EQ(llm_cuda_matvec_chain(c, st, 2), LLM_EINVAL);
    st[1].f.flags = LLM_CUDA_MV_SWIGLU_PAIRS | LLM_CUDA_MV_ACCUMULATE;
    CHECK_INT_EQ(llm_cuda_matvec_chain(c, st, 2), LLM_EINVAL);
    st[1].f.flags = 0;
    st[1].w = &h;
    CHECK_INT_EQ(llm_cuda_matvec_chain(c, st, 2), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    llm_cuda_weight_release(c, &q);
    llm_cuda_weight_release(c, &h);
    llm_cuda_mfree(c, dv);
    llm_cuda_free(c);
}

static const ct_case cases[] = {
    {"matmul_acc", matmul_acc}, {"matvec_rope_store", matvec_rope_store},
    {"matvec_fused", matvec_fused}, {"rope_qkv_store", rope_qkv_store},
    {"matvec_bf16", matvec_bf16}, {"matvec_f16", matvec_f16},
    {"matvec_f32", matvec_f32}, {"matvec_q8_0", matvec_q8_0},
    {"matvec_q4_0", matvec_q4_0}, {"matvec_q8_0_int8", matvec_q8_0_int8},
    {"matvec_batch", matvec_batch},
    {"matvec_unaligned", matvec_unaligned}, {"gemm_bf16", gemm_bf16},
    {"gemm_f16", gemm_f16}, {"gemm_q8_0", gemm_q8_0}, {"gemm_f32", gemm_f32},
    {"gemm_slices", gemm_slices}, {"rmsnorm", rmsnorm}, {"rope", rope},
    {"swiglu_add", swiglu_add}, {"embed", embed},
    {"matvec_q4_k", matvec_q4_k}, {"matvec_q6_k", matvec_q6_k},
    {"matvec_q5_k", matvec_q5_k}, {"matvec_l2", matvec_l2},
    {"matvec_fused_kq", matvec_fused_kq}, {"matvec_split", matvec_split},
    {"matvec_async", matvec_async}, {"matvec_chain", matvec_chain},
};

CT_MAIN(cases)
