/* kernels_avx2.c — AVX2/FMA/F16C kernels (see kernels.h).
 *
 * Each function carries a target attribute instead of the whole file being
 * built with -mavx2, so the library still runs on any x86-64 CPU: these are
 * only reached through the table that llm_kernels_avx2() fills after
 * __builtin_cpu_supports() said yes. On other architectures the file builds
 * to a selector that always declines.
 */
#include "kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <cpuid.h>
#include <immintrin.h>
#include <string.h>

#include "../quant.h"

#define AVX2_FN __attribute__((target("avx2,fma,f16c")))

/* Software prefetch distance into the weight stream, in bytes. Matrix rows
 * are read once, in address order, so the hardware streamer should suffice,
 * but it stops at every 4 KiB page boundary and a file mapping's pages are
 * scattered in physical memory: prefetching a page ahead took a single-core
 * Q8_0 matrix–vector product over the page cache from ~7 to ~11.5 GB/s
 * (2-core Xeon VM; bench/results/engine.md). Prefetches never fault, so
 * running past the end of a tensor is harmless. */
#define PF_AHEAD 4096

#define PREFETCH(p) _mm_prefetch((const char *)(p) + PF_AHEAD, _MM_HINT_T0)

AVX2_FN static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AVX2_FN static float dot_f32(const void *w, const float *x, int64_t n)
{
    const float *a = w;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        PREFETCH(a + i);
        PREFETCH(a + i + 16);
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(x + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(x + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(x + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), s0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++)
        s += a[i] * x[i];
    return s;
}

AVX2_FN static inline __m256 load_f16x8(const unsigned char *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

AVX2_FN static inline __m256 load_bf16x8(const unsigned char *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* Dot product of n 16-bit floats (F16 or BF16, widened by LOAD8 eight at
 * a time and by TO_F32 in the tail) with n f32 activations; two
 * accumulators hide the FMA latency. */
#define DEFINE_DOT_HALF(NAME, LOAD8, TO_F32)                                      \
    AVX2_FN static float NAME(const void *w, const float *x, int64_t n)           \
    {                                                                             \
        const unsigned char *p = w;                                               \
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();                \
        int64_t i = 0;                                                            \
        for (; i + 16 <= n; i += 16) {                                            \
            if ((i & 31) == 0)                                                    \
                PREFETCH(p + 2 * i);                                              \
            s0 = _mm256_fmadd_ps(LOAD8(p + 2 * i), _mm256_loadu_ps(x + i), s0);   \
            s1 = _mm256_fmadd_ps(LOAD8(p + 2 * i + 16), _mm256_loadu_ps(x + i + 8), s1); \
        }                                                                         \
        float s = hsum8(_mm256_add_ps(s0, s1));                                   \
        for (; i < n; i++) {                                                      \
            uint16_t h;                                                           \
            memcpy(&h, p + 2 * i, 2);                                             \
            s += TO_F32(h) * x[i];                                                \
        }                                                                         \
        return s;                                                                 \
    }

DEFINE_DOT_HALF(dot_f16, load_f16x8, llm_fp16_to_f32)
DEFINE_DOT_HALF(dot_bf16, load_bf16x8, llm_bf16_to_f32)

/* The exact int32 sums of 32 products of signed bytes, as 8 lanes.
 * maddubs wants unsigned x signed, so |w| times x with w's sign moved onto
 * x; pair sums stay within int16 because |w|,|x| <= 128 and at most one of
 * them reaches 128 (activations are in [-127,127]). */
AVX2_FN static inline __m256 block_dot_s8(__m256i w, __m256i x)
{
    __m256i aw = _mm256_sign_epi8(w, w);
    __m256i sx = _mm256_sign_epi8(x, w);
    __m256i p16 = _mm256_maddubs_epi16(aw, sx);
    __m256i p32 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
    return _mm256_cvtepi32_ps(p32);
}

AVX2_FN static inline float fp16_at(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

AVX2_FN static float dot_q8_0(const void *w, const llm_qrow *x, int64_t n)
{
    const unsigned char *blk = w;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t nb = n / LLM_QK, b = 0;
    for (; b + 2 <= nb; b += 2, blk += 2 * sizeof(llm_block_q8_0)) {
        const unsigned char *b1 = blk + sizeof(llm_block_q8_0);
        PREFETCH(blk);
        PREFETCH(blk + 64);
        __m256i w0 = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
        __m256i w1 = _mm256_loadu_si256((const __m256i *)(const void *)(b1 + 2));
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(x->q + b * LLM_QK));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(x->q + (b + 1) * LLM_QK));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16_at(blk) * x->d[b]), block_dot_s8(w0, x0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(fp16_at(b1) * x->d[b + 1]), block_dot_s8(w1, x1), acc1);
    }
    for (; b < nb; b++, blk += sizeof(llm_block_q8_0)) {
        __m256i w0 = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(x->q + b * LLM_QK));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16_at(blk) * x->d[b]), block_dot_s8(w0, x0), acc0);
    }
    return hsum8(_mm256_add_ps(acc0, acc1));
}

/* 16 bytes of nibbles -> 32 signed bytes in element order: low nibbles are
 * elements 0..15, high nibbles 16..31, each minus 8. */
AVX2_FN static inline __m256i unpack_q4(const unsigned char *qs)
{
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)qs);
    __m128i m = _mm_set1_epi8(0x0f);
    __m128i lo = _mm_and_si128(b, m);
    __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    __m256i v = _mm256_set_m128i(hi, lo);
    return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
}

AVX2_FN static float dot_q4_0(const void *w, const llm_qrow *x, int64_t n)
{
    const unsigned char *blk = w;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t nb = n / LLM_QK, b = 0;
    for (; b + 2 <= nb; b += 2, blk += 2 * sizeof(llm_block_q4_0)) {
        const unsigned char *b1 = blk + sizeof(llm_block_q4_0);
        PREFETCH(blk);
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(x->q + b * LLM_QK));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(x->q + (b + 1) * LLM_QK));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16_at(blk) * x->d[b]), block_dot_s8(unpack_q4(blk + 2), x0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(fp16_at(b1) * x->d[b + 1]), block_dot_s8(unpack_q4(b1 + 2), x1), acc1);
    }
    for (; b < nb; b++, blk += sizeof(llm_block_q4_0)) {
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(x->q + b * LLM_QK));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16_at(blk) * x->d[b]), block_dot_s8(unpack_q4(blk + 2), x0), acc0);
    }
    return hsum8(_mm256_add_ps(acc0, acc1));
}

AVX2_FN static void quantize_row(const float *x, int64_t n, float *d, int8_t *q)
{
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n / LLM_QK; b++) {
        const float *xb = x + b * LLM_QK;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, abs_mask), _mm256_and_ps(v1, abs_mask)),
                                 _mm256_max_ps(_mm256_and_ps(v2, abs_mask), _mm256_and_ps(v3, abs_mask)));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float db = _mm_cvtss_f32(h) / 127.0f;
        float id = db > 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        __m256 s = _mm256_set1_ps(id);
        /* cvtps rounds to nearest even, like the scalar nearbyintf. */
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, s));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, s));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, s));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, s));
        /* The packs work within 128-bit lanes; the permute restores order. */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        p = _mm256_permutevar8x32_epi32(p, order);
        _mm256_storeu_si256((__m256i *)(void *)(q + b * LLM_QK), p);
    }
}

AVX2_FN static void axpy(float *y, float s, const float *x, int64_t n)
{
    __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vs, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += s * x[i];
}

AVX2_FN static float dot(const float *a, const float *b, int64_t n)
{
    return dot_f32(a, b, n);
}

/* One 3x4 tile of gemm_nt: 12 accumulators, 3 activation rows and one
 * weight vector fill the 16 YMM registers; every weight load feeds three
 * FMAs and every activation load four. Written out by hand: as an array
 * the accumulators were not kept in registers (a third of the speed). */
#define TILE_COL(j, wrow)                                   \
    do {                                                    \
        __m256 wv = _mm256_loadu_ps((wrow) + kk);           \
        a0##j = _mm256_fmadd_ps(x0, wv, a0##j);             \
        a1##j = _mm256_fmadd_ps(x1, wv, a1##j);             \
        a2##j = _mm256_fmadd_ps(x2, wv, a2##j);             \
    } while (0)

AVX2_FN static void tile_3x4(int64_t k, const float *x, int64_t ldx, const float *w,
                             int64_t ldw, float *y, int64_t ldy, int accumulate)
{
    const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw;
    const float *r0 = x, *r1 = x + ldx, *r2 = x + 2 * ldx;
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;
    __m256 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
    __m256 a20 = a00, a21 = a00, a22 = a00, a23 = a00;
    int64_t kk = 0;
    for (; kk + 8 <= k; kk += 8) {
        __m256 x0 = _mm256_loadu_ps(r0 + kk);
        __m256 x1 = _mm256_loadu_ps(r1 + kk);
        __m256 x2 = _mm256_loadu_ps(r2 + kk);
        TILE_COL(0, w0);
        TILE_COL(1, w1);
        TILE_COL(2, w2);
        TILE_COL(3, w3);
    }
    __m256 acc[3][4] = {{a00, a01, a02, a03}, {a10, a11, a12, a13}, {a20, a21, a22, a23}};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            float s = hsum8(acc[i][j]);
            for (int64_t t = kk; t < k; t++)
                s += x[i * ldx + t] * w[j * ldw + t];
            y[i * ldy + j] = accumulate ? y[i * ldy + j] + s : s;
        }
}

/* Depth of one pass over k: a group of 4 weight rows (16 KiB) and an
 * activation tile (12 KiB) then share L1; without it k = 5632 (a
 * feed-forward down projection) ran at 45 instead of 60 GFLOPS a core. */
#define GEMM_KB 1024

AVX2_FN static void dot_cols(int64_t i, int64_t j0, int64_t j1, int64_t k, const float *x,
                             int64_t ldx, const float *w, int64_t ldw, float *y,
                             int64_t ldy, int accumulate)
{
    for (int64_t j = j0; j < j1; j++) {
        float s = dot_f32(w + j * ldw, x + i * ldx, k);
        y[i * ldy + j] = accumulate ? y[i * ldy + j] + s : s;
    }
}

/* Weight rows outermost in groups of 4: they stay in L1 while every
 * activation tile streams past from L2. */
AVX2_FN static void gemm_nt(int64_t n, int64_t m, int64_t k, const float *x, int64_t ldx,
                            const float *w, int64_t ldw, float *y, int64_t ldy)
{
    for (int64_t k0 = 0; k0 < k; k0 += GEMM_KB) {
        int64_t kb = k - k0 < GEMM_KB ? k - k0 : GEMM_KB;
        int acc = k0 > 0;
        const float *xk = x + k0, *wk = w + k0;
        int64_t j = 0;
        for (; j + 4 <= m; j += 4) {
            int64_t i = 0;
            for (; i + 3 <= n; i += 3)
                tile_3x4(kb, xk + i * ldx, ldx, wk + j * ldw, ldw, y + i * ldy + j, ldy, acc);
            for (; i < n; i++)
                dot_cols(i, j, j + 4, kb, xk, ldx, wk, ldw, y, ldy, acc);
        }
        for (int64_t i = 0; j < m && i < n; i++)
            dot_cols(i, j, m, kb, xk, ldx, wk, ldw, y, ldy, acc);
    }
}

/* 32 signed bytes times d into dst[0..32). */
AVX2_FN static inline void widen_s8(__m256i q, float d, float *dst)
{
    __m256 vd = _mm256_set1_ps(d);
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(dst, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
    _mm256_storeu_ps(dst + 24, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
}

AVX2_FN static void dequant_row(uint32_t type, const void *src, float *dst, int64_t n)
{
    const unsigned char *p = src;
    switch (type) {
    case LLM_TYPE_Q8_0:
        for (int64_t b = 0; b < n / LLM_QK; b++, p += sizeof(llm_block_q8_0))
            widen_s8(_mm256_loadu_si256((const __m256i *)(const void *)(p + 2)), fp16_at(p), dst + b * LLM_QK);
        return;
    case LLM_TYPE_Q4_0:
        for (int64_t b = 0; b < n / LLM_QK; b++, p += sizeof(llm_block_q4_0))
            widen_s8(unpack_q4(p + 2), fp16_at(p), dst + b * LLM_QK);
        return;
    case LLM_TYPE_F16:
        if (n % 8 == 0) {
            for (int64_t i = 0; i < n; i += 8)
                _mm256_storeu_ps(dst + i, load_f16x8(p + 2 * i));
            return;
        }
        break;
    case LLM_TYPE_BF16:
        if (n % 8 == 0) {
            for (int64_t i = 0; i < n; i += 8)
                _mm256_storeu_ps(dst + i, load_bf16x8(p + 2 * i));
            return;
        }
        break;
    default:
        break;
    }
    llm_dequantize_row(type, src, dst, (size_t)n);
}

/* F16C through CPUID (leaf 1, ECX bit 29): clang's __builtin_cpu_supports
 * does not know the "f16c" feature string, gcc's does. */
static int cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    return (c >> 29) & 1u;
}

int llm_kernels_avx2(llm_kernels *k)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !cpu_has_f16c())
        return -1;
    k->name = "avx2";
    k->dot_f32 = dot_f32;
    k->dot_f16 = dot_f16;
    k->dot_bf16 = dot_bf16;
    k->dot_q8_0 = dot_q8_0;
    k->dot_q4_0 = dot_q4_0;
    k->quantize_row = quantize_row;
    k->dot = dot;
    k->axpy = axpy;
    k->gemm_nt = gemm_nt;
    k->dequant_row = dequant_row;
    return 0;
}

#else

int llm_kernels_avx2(llm_kernels *k)
{
    (void)k;
    return -1;
}

#endif
