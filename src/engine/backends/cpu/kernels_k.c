/* kernels_k.c — the k-quants' CPU kernels (Q4_K, Q5_K, Q6_K): scalar
 * reference and AVX2, for both kernel sets (kernels.h).
 *
 * They read the activations quantized to blocks of 32 (llm_qrow), like the
 * Q8_0/Q4_0 kernels, which fits the k-quants' sub-blocks: a Q4_K/Q5_K
 * sub-block of 32 is one activation block, a Q6_K activation block covers
 * two 16-element sub-blocks. Per activation block b the product is
 *   Q4_K/Q5_K: d_x[b] * ((d * sc) * sum(q * x) - (dmin * m) * sum(x))
 *   Q6_K:      d_x[b] * (d * (sc0 * sum0((q - 32) * x) + sc1 * sum1(...)))
 * with the sums exact in int32, accumulated into one f32 in block order.
 * The AVX2 kernels compute only the integer sums with vectors (Q4_K/Q5_K:
 * all eight sub-blocks' sums of a super-block reduced together, which took
 * a 2-thread Q4_K decode from 21 to 52-62 tok/s here) and then run the
 * same float statements in the same order, so every result is bitwise
 * the scalar kernel's (tests: engine_matvec_*; floating-point contraction
 * is off: ISO C mode for GCC, the pragma below for clang).
 *
 * Rows to f32 (embedding rows, the batched product's panels) use the
 * reference conversions of quant_k.c.
 */
#include "kernels.h"

#include <string.h>

#include "quant.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

_Static_assert(LLM_ACTS_QK == 32, "k-quant sub-blocks pair with activation blocks of 32");

static float f16_at(const unsigned char *p)
{
    return llm_fp16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* The float part of one Q4_K/Q5_K sub-block (shared by both sets). */
static inline float k45_term(float dx, float d, float dmin, int sc, int m, int32_t isum, int32_t xsum)
{
    return dx * ((d * (float)sc) * (float)isum - (dmin * (float)m) * (float)xsum);
}

static inline float q6_term(float dx, float d, int sc0, int32_t s0, int sc1, int32_t s1)
{
    return dx * (d * (float)(sc0 * s0 + sc1 * s1));
}

/* ---- scalar ------------------------------------------------------------- */

static float dot_k45(const unsigned char *blk, const llm_qrow *x, int64_t n, int five)
{
    size_t bytes = five ? LLM_Q5_K_BYTES : LLM_Q4_K_BYTES;
    float s = 0.0f;
    for (int64_t sb = 0; sb < n / LLM_QK_K; sb++, blk += bytes) {
        float d = f16_at(blk), dmin = f16_at(blk + 2);
        const unsigned char *qh = blk + 16, *qs = blk + (five ? 48 : 16);
        for (int j = 0; j < 8; j++) {
            int64_t b = sb * 8 + j;
            const int8_t *xq = x->q + b * 32;
            const unsigned char *q = qs + 32 * (j / 2);
            int32_t isum = 0, xsum = 0;
            for (int l = 0; l < 32; l++) {
                int v = (q[l] >> (4 * (j & 1))) & 0x0f;
                if (five)
                    v |= ((qh[l] >> j) & 1) << 4;
                isum += v * xq[l];
                xsum += xq[l];
            }
            int sc, m;
            llm_q4k_scale_min(blk + 4, j, &sc, &m);
            s += k45_term(x->d[b], d, dmin, sc, m, isum, xsum);
        }
    }
    return s;
}

static float dot_q4_k(const void *w, const llm_qrow *x, int64_t n)
{
    return dot_k45(w, x, n, 0);
}

static float dot_q5_k(const void *w, const llm_qrow *x, int64_t n)
{
    return dot_k45(w, x, n, 1);
}

static float dot_q6_k(const void *w, const llm_qrow *x, int64_t n)
{
    const unsigned char *blk = w;
    float s = 0.0f;
    for (int64_t sb = 0; sb < n / LLM_QK_K; sb++, blk += LLM_Q6_K_BYTES) {
        const signed char *sc = (const signed char *)(blk + 192);
        float d = f16_at(blk + 208);
        for (int g8 = 0; g8 < 8; g8++) { /* activation block: elements 32*g8.. */
            int64_t b = sb * 8 + g8;
            const int8_t *xq = x->q + b * 32;
            int h = g8 / 4, g = g8 % 4;
            const unsigned char *ql = blk + 64 * h + 32 * (g & 1), *qh = blk + 128 + 32 * h;
            int32_t sum[2] = {0, 0};
            for (int l = 0; l < 32; l++) {
                int v = ((ql[l] >> (4 * (g >> 1))) & 0x0f) | (((qh[l] >> (2 * g)) & 3) << 4);
                sum[l / 16] += (v - 32) * xq[l];
            }
            s += q6_term(x->d[b], d, sc[2 * g8], sum[0], sc[2 * g8 + 1], sum[1]);
        }
    }
    return s;
}

LLM_MATVEC_BY_ROWS_QUANT(, matvec_q4_k, dot_q4_k)
LLM_MATVEC_BY_ROWS_QUANT(, matvec_q5_k, dot_q5_k)
LLM_MATVEC_BY_ROWS_QUANT(, matvec_q6_k, dot_q6_k)

void llm_kernels_add_k_scalar(llm_kernels *k)
{
    const llm_type_kernels e[] = {
        {LLM_TYPE_Q4_K, matvec_q4_k, llm_q4_k_to_f32, 1, 0, NULL, NULL},
        {LLM_TYPE_Q5_K, matvec_q5_k, llm_q5_k_to_f32, 1, 0, NULL, NULL},
        {LLM_TYPE_Q6_K, matvec_q6_k, llm_q6_k_to_f32, 1, 0, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++)
        (void)llm_kernels_set(k, &e[i]); /* 8 built-in types <= LLM_KERNEL_TYPES_MAX */
    llm_kernels_add_k23_scalar(k);
}

/* ---- AVX2 --------------------------------------------------------------- */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#define AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define PF_AHEAD 4096

/* sum(u[i] * x[i]) over 32 unsigned bytes u (< 64) and int8 x: maddubs
 * pairs stay within int16 (2 * 63 * 128). */
AVX2_FN static inline __m256i dot_u8_i8(__m256i u, __m256i x)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
}

/* The eight lane sums of v[0..7] (8 int32 lanes each) as one vector:
 * element j is the sum of v[j]'s lanes. Integer adds: exact, any order. */
AVX2_FN static inline __m256i hsum8x8(const __m256i *v)
{
    __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

AVX2_FN static float dot_k45_avx2(const unsigned char *blk, const llm_qrow *x, int64_t n, int five)
{
    size_t bytes = five ? LLM_Q5_K_BYTES : LLM_Q4_K_BYTES;
    const __m256i low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi8(1);
    float s = 0.0f;
    for (int64_t sb = 0; sb < n / LLM_QK_K; sb++, blk += bytes) {
        _mm_prefetch((const char *)blk + PF_AHEAD, _MM_HINT_T0);
        _mm_prefetch((const char *)blk + PF_AHEAD + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)blk + PF_AHEAD + 128, _MM_HINT_T0);
        float d = f16_at(blk), dmin = f16_at(blk + 2);
        const unsigned char *qs = blk + (five ? 48 : 16);
        const int8_t *xb = x->q + sb * LLM_QK_K;
        __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
        __m256i vi[8], vx[8];
        for (int p = 0; p < 4; p++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * p));
            __m256i v[2] = {_mm256_and_si256(raw, low), _mm256_and_si256(_mm256_srli_epi16(raw, 4), low)};
            for (int hbit = 0; hbit < 2; hbit++) {
                int j = 2 * p + hbit;
                if (five) {
                    /* Bit j of each qh byte becomes the value's bit 4. */
                    __m256i m = _mm256_set1_epi8((char)(1 << j));
                    __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, m), m);
                    v[hbit] = _mm256_or_si256(v[hbit], _mm256_and_si256(set, _mm256_set1_epi8(16)));
                }
                __m256i xv = _mm256_loadu_si256((const __m256i *)(xb + 32 * j));
                vi[j] = dot_u8_i8(v[hbit], xv);
                vx[j] = dot_u8_i8(ones, xv);
            }
        }
        int32_t isum[8], xsum[8];
        _mm256_storeu_si256((__m256i *)isum, hsum8x8(vi));
        _mm256_storeu_si256((__m256i *)xsum, hsum8x8(vx));
        for (int j = 0; j < 8; j++) {
            int sc, m;
            llm_q4k_scale_min(blk + 4, j, &sc, &m);
            s += k45_term(x->d[sb * 8 + j], d, dmin, sc, m, isum[j], xsum[j]);
        }
    }
    return s;
}

AVX2_FN static float dot_q4_k_avx2(const void *w, const llm_qrow *x, int64_t n)
{
    return dot_k45_avx2(w, x, n, 0);
}

AVX2_FN static float dot_q5_k_avx2(const void *w, const llm_qrow *x, int64_t n)
{
    return dot_k45_avx2(w, x, n, 1);
}

/* Q6_K: the 6-bit values (0..63) of one activation block, then
 * sum((v - 32) x) = sum(v x) - 32 sum(x) per 16-element half. */
AVX2_FN static float dot_q6_k_avx2(const void *w, const llm_qrow *x, int64_t n)
{
    const unsigned char *blk = w;
    const __m256i low = _mm256_set1_epi8(0x0f), three = _mm256_set1_epi8(3), ones = _mm256_set1_epi8(1);
    float s = 0.0f;
    for (int64_t sb = 0; sb < n / LLM_QK_K; sb++, blk += LLM_Q6_K_BYTES) {
        _mm_prefetch((const char *)blk + PF_AHEAD, _MM_HINT_T0);
        _mm_prefetch((const char *)blk + PF_AHEAD + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)blk + PF_AHEAD + 128, _MM_HINT_T0);
        _mm_prefetch((const char *)blk + PF_AHEAD + 192, _MM_HINT_T0);
        const signed char *sc = (const signed char *)(blk + 192);
        float d = f16_at(blk + 208);
        for (int g8 = 0; g8 < 8; g8++) {
            int64_t b = sb * 8 + g8;
            int h = g8 / 4, g = g8 % 4;
            __m256i ql = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32 * (g & 1)));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
            __m256i lo = _mm256_and_si256(g >> 1 ? _mm256_srli_epi16(ql, 4) : ql, low);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), three);
            __m256i v = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)); /* hi < 4: no byte carry */
            __m256i xv = _mm256_loadu_si256((const __m256i *)(x->q + b * 32));
            __m256i vx = dot_u8_i8(v, xv), xs = dot_u8_i8(ones, xv);
            /* madd leaves 8 lanes of 4 elements each: elements 0..15 are
             * the low 128 bits, 16..31 the high. */
            __m128i vx0 = _mm256_castsi256_si128(vx), vx1 = _mm256_extracti128_si256(vx, 1);
            __m128i xs0 = _mm256_castsi256_si128(xs), xs1 = _mm256_extracti128_si256(xs, 1);
            __m128i d0 = _mm_sub_epi32(vx0, _mm_slli_epi32(xs0, 5)), d1 = _mm_sub_epi32(vx1, _mm_slli_epi32(xs1, 5));
            d0 = _mm_add_epi32(d0, _mm_shuffle_epi32(d0, 0x4e));
            d0 = _mm_add_epi32(d0, _mm_shuffle_epi32(d0, 0xb1));
            d1 = _mm_add_epi32(d1, _mm_shuffle_epi32(d1, 0x4e));
            d1 = _mm_add_epi32(d1, _mm_shuffle_epi32(d1, 0xb1));
            s += q6_term(x->d[b], d, sc[2 * g8], _mm_cvtsi128_si32(d0), sc[2 * g8 + 1], _mm_cvtsi128_si32(d1));
        }
    }
    return s;
}

LLM_MATVEC_BY_ROWS_QUANT(AVX2_FN, matvec_q4_k_avx2, dot_q4_k_avx2)
LLM_MATVEC_BY_ROWS_QUANT(AVX2_FN, matvec_q5_k_avx2, dot_q5_k_avx2)
LLM_MATVEC_BY_ROWS_QUANT(AVX2_FN, matvec_q6_k_avx2, dot_q6_k_avx2)

void llm_kernels_add_k_avx2(llm_kernels *k)
{
    const llm_type_kernels e[] = {
        {LLM_TYPE_Q4_K, matvec_q4_k_avx2, llm_q4_k_to_f32, 1, 0, NULL, NULL},
        {LLM_TYPE_Q5_K, matvec_q5_k_avx2, llm_q5_k_to_f32, 1, 0, NULL, NULL},
        {LLM_TYPE_Q6_K, matvec_q6_k_avx2, llm_q6_k_to_f32, 1, 0, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++)
        (void)llm_kernels_set(k, &e[i]);
    llm_kernels_add_k23_avx2(k);
}

#else

void llm_kernels_add_k_avx2(llm_kernels *k)
{
    llm_kernels_add_k_scalar(k);
}

#endif
