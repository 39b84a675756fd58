/* kernels_legacy.c — CPU kernels of ggml's older 32-element block types
 * Q4_1, Q5_0, Q5_1: scalar reference and AVX2, for both kernel sets
 * (kernels.h).
 *
 * One weight block pairs with one activation block of 32 (llm_qrow), as
 * Q4_0 does. Per block b, with isum = sum(q * x_q) and xsum = sum(x_q)
 * exact in int32 (q the block's unsigned 4- or 5-bit values):
 *   Q5_0:      d * d_x[b] * (isum - 16 * xsum)
 *   Q4_1/Q5_1: d_x[b] * (d * isum + m * xsum)
 * accumulated into one f32 in block order. The _1 types' offset term uses
 * the activation block's quantized sum (d_x * xsum), the same rounding the
 * q * x part sees. The AVX2 product decodes each weight block once for
 * all activation rows (a verify's k+1 tokens), computes the integer sums
 * of eight blocks at a time, then those eight blocks' terms with the
 * scalar statement's multiplications and additions lane by lane (F16C
 * widens d and m exactly, as the scalar conversion does), and adds the
 * terms to each sum in block order, so every result is bitwise the scalar
 * kernel's (tests: engine_matvec_*; contraction is off: ISO C mode for
 * GCC, the pragma below for clang).
 *
 * Rows to f32 (embedding rows, the batched product's panels): the scalar
 * set uses the reference conversions of quant_legacy.c; the AVX2 set
 * widens eight values at a time with the reference's operations
 * ((float)q * d + m, d * (float)(q - 16)), bit for bit the same
 * (engine_kernels).
 */
#include "kernels.h"

#include "quant.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

_Static_assert(LLM_ACTS_QK == LLM_QK_LEGACY, "legacy blocks pair one for one with activation blocks");

enum { KIND_Q4_1, KIND_Q5_0, KIND_Q5_1 };

typedef struct legacy_layout {
    size_t bytes; /* per block */
    int qh;       /* offset of the fifth bits; 0: none */
    int qs;       /* offset of the nibbles */
    int has_m;    /* an fp16 m follows d */
} legacy_layout;

static const legacy_layout k_layout[] = {
    [KIND_Q4_1] = {LLM_Q4_1_BYTES, 0, 4, 1},
    [KIND_Q5_0] = {LLM_Q5_0_BYTES, 2, 6, 0},
    [KIND_Q5_1] = {LLM_Q5_1_BYTES, 4, 8, 1},
};

static float f16_at(const unsigned char *p)
{
    return llm_fp16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

static uint32_t u32_at(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* One block's float term (shared by both sets, so they agree bitwise). */
static inline float legacy_term(int kind, const unsigned char *blk, float dx, int32_t isum, int32_t xsum)
{
    float d = f16_at(blk);
    if (kind == KIND_Q5_0)
        return d * dx * (float)(isum - 16 * xsum);
    return dx * (d * (float)isum + f16_at(blk + 2) * (float)xsum);
}

/* ---- scalar ------------------------------------------------------------- */

static float dot_legacy(int kind, const unsigned char *blk, const llm_qrow *x, int64_t n)
{
    const legacy_layout *L = &k_layout[kind];
    float s = 0.0f;
    for (int64_t b = 0; b < n / LLM_QK_LEGACY; b++, blk += L->bytes) {
        const unsigned char *qs = blk + L->qs;
        uint32_t qh = L->qh ? u32_at(blk + L->qh) : 0;
        const int8_t *xq = x->q + b * LLM_QK_LEGACY;
        int32_t isum = 0, xsum = 0;
        for (int j = 0; j < LLM_QK_LEGACY; j++) {
            int v = (j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4) | (int)(((qh >> j) & 1u) << 4);
            isum += v * xq[j];
            xsum += xq[j];
        }
        s += legacy_term(kind, blk, x->d[b], isum, xsum);
    }
    return s;
}

static float dot_q4_1(const void *w, const llm_qrow *x, int64_t n) { return dot_legacy(KIND_Q4_1, w, x, n); }
static float dot_q5_0(const void *w, const llm_qrow *x, int64_t n) { return dot_legacy(KIND_Q5_0, w, x, n); }
static float dot_q5_1(const void *w, const llm_qrow *x, int64_t n) { return dot_legacy(KIND_Q5_1, w, x, n); }

LLM_MATVEC_BY_ROWS_QUANT(, matvec_q4_1, dot_q4_1)
LLM_MATVEC_BY_ROWS_QUANT(, matvec_q5_0, dot_q5_0)
LLM_MATVEC_BY_ROWS_QUANT(, matvec_q5_1, dot_q5_1)

void llm_kernels_add_legacy_scalar(llm_kernels *k)
{
    const llm_type_kernels e[] = {
        {LLM_TYPE_Q4_1, matvec_q4_1, llm_q4_1_to_f32, 1, 0, NULL, NULL},
        {LLM_TYPE_Q5_0, matvec_q5_0, llm_q5_0_to_f32, 1, 0, NULL, NULL},
        {LLM_TYPE_Q5_1, matvec_q5_1, llm_q5_1_to_f32, 1, 0, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++)
        (void)llm_kernels_set(k, &e[i]);
}

/* ---- AVX2 --------------------------------------------------------------- */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#define AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define PF_AHEAD 4096

/* The 32 values (0..31) of one block as unsigned bytes, element j in byte
 * j: the nibbles of 16 bytes (low ones first), plus bit j of qh as 16. */
AVX2_FN static inline __m256i legacy_values(const unsigned char *qs, uint32_t qh, int five)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    __m128i low = _mm_set1_epi8(0x0f);
    __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low), _mm_and_si128(raw, low));
    if (five) {
        /* Byte j takes qh's byte j/8, then tests bit j%8 of it. */
        const __m256i spread = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                                 0x0101010101010101LL, 0x0000000000000000LL);
        const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
        __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), spread);
        __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit);
        v = _mm256_or_si256(v, _mm256_and_si256(set, _mm256_set1_epi8(16)));
    }
    return v;
}

/* sum(u[i] * x[i]) in 8 int32 lanes: u < 32, so maddubs pairs stay within
 * int16 (2 * 31 * 128). */
AVX2_FN static inline __m256i dot_u8_i8(__m256i u, __m256i x)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
}

/* Element j: the sum of v[j]'s eight lanes. Integer adds: exact. */
AVX2_FN static inline __m256i hsum8x8(const __m256i *v)
{
    __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* The products of every weight row with every activation row of a: per
 * weight row, eight blocks are loaded and decoded once and applied to each
 * activation row in turn. For each (row, activation) pair the operations
 * are those of the scalar kernel, in its order: the integer sums of the
 * eight blocks (exact), their terms as legacy_term computes them, lane by
 * lane (F16C widens d and m exactly; no contraction), added to that pair's
 * sum in block order. Lanes past the row's last block hold zeros. */
AVX2_FN static void matvec_legacy_avx2(int kind, const void *w, size_t row_bytes, int64_t rows,
                                       const llm_acts *a, float *y, int64_t ldy)
{
    const legacy_layout *L = &k_layout[kind];
    const __m256i ones = _mm256_set1_epi8(1);
    int64_t nb = a->len / LLM_QK_LEGACY;
    float s[LLM_ACTS_MAX];
    for (int64_t r = 0; r < rows; r++) {
        const unsigned char *blk = (const unsigned char *)w + (size_t)r * row_bytes;
        for (int32_t t = 0; t < a->n; t++)
            s[t] = 0.0f;
        for (int64_t b0 = 0; b0 < nb; b0 += 8, blk += 8 * L->bytes) {
            int cnt = nb - b0 < 8 ? (int)(nb - b0) : 8;
            __m256i v[8];
            uint16_t dh[8] = {0}, mh[8] = {0};
            for (int j = 0; j < cnt; j++) {
                const unsigned char *p = blk + (size_t)j * L->bytes;
                _mm_prefetch((const char *)p + PF_AHEAD, _MM_HINT_T0);
                v[j] = legacy_values(p + L->qs, L->qh ? u32_at(p + L->qh) : 0, L->qh != 0);
                dh[j] = (uint16_t)(p[0] | (p[1] << 8));
                if (L->has_m)
                    mh[j] = (uint16_t)(p[2] | (p[3] << 8));
            }
            __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dh));
            __m256 m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)mh));
            for (int32_t t = 0; t < a->n; t++) {
                const int8_t *xq = a->q + t * a->len + b0 * LLM_QK_LEGACY;
                __m256i vi[8], vx[8];
                float dxs[8] = {0}, term[8];
                for (int j = 0; j < 8; j++) {
                    if (j >= cnt) {
                        vi[j] = vx[j] = _mm256_setzero_si256();
                        continue;
                    }
                    __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + j * LLM_QK_LEGACY));
                    vi[j] = dot_u8_i8(v[j], xv);
                    vx[j] = dot_u8_i8(ones, xv);
                    dxs[j] = a->d[t * nb + b0 + j];
                }
                __m256 dx = _mm256_loadu_ps(dxs);
                __m256i is = hsum8x8(vi), xs = hsum8x8(vx);
                __m256 e;
                if (kind == KIND_Q5_0)
                    e = _mm256_mul_ps(_mm256_mul_ps(d, dx),
                                      _mm256_cvtepi32_ps(_mm256_sub_epi32(is, _mm256_slli_epi32(xs, 4))));
                else
                    e = _mm256_mul_ps(dx, _mm256_add_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(is)),
                                                        _mm256_mul_ps(m, _mm256_cvtepi32_ps(xs))));
                _mm256_storeu_ps(term, e);
                for (int j = 0; j < cnt; j++)
                    s[t] += term[j];
            }
        }
        for (int32_t t = 0; t < a->n; t++)
            y[t * ldy + r] = s[t];
    }
}

/* Rows to f32, block by block: the reference conversion's operations on
 * eight lanes (no contraction), so the floats are bitwise its. */
AVX2_FN static void dequant_legacy_avx2(int kind, const unsigned char *blk, float *dst, size_t n)
{
    const legacy_layout *L = &k_layout[kind];
    for (size_t b = 0; b < n / LLM_QK_LEGACY; b++, blk += L->bytes, dst += LLM_QK_LEGACY) {
        uint32_t qh = L->qh ? u32_at(blk + L->qh) : 0;
        __m256i v = legacy_values(blk + L->qs, qh, L->qh != 0);
        __m256 d = _mm256_set1_ps(f16_at(blk));
        __m256 m = _mm256_set1_ps(L->has_m ? f16_at(blk + 2) : 0.0f);
        __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
        __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int g = 0; g < 4; g++) {
            __m256i q = _mm256_cvtepu8_epi32(part[g]);
            __m256 y;
            if (kind == KIND_Q5_0)
                y = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(q, _mm256_set1_epi32(16))));
            else
                y = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(q), d), m);
            _mm256_storeu_ps(dst + 8 * g, y);
        }
    }
}

AVX2_FN static void dequant_q4_1_avx2(const void *src, float *dst, size_t n)
{
    dequant_legacy_avx2(KIND_Q4_1, src, dst, n);
}

AVX2_FN static void dequant_q5_0_avx2(const void *src, float *dst, size_t n)
{
    dequant_legacy_avx2(KIND_Q5_0, src, dst, n);
}

AVX2_FN static void dequant_q5_1_avx2(const void *src, float *dst, size_t n)
{
    dequant_legacy_avx2(KIND_Q5_1, src, dst, n);
}

AVX2_FN static void matvec_q4_1_avx2(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                                     float *y, int64_t ldy)
{
    matvec_legacy_avx2(KIND_Q4_1, w, row_bytes, rows, a, y, ldy);
}

AVX2_FN static void matvec_q5_0_avx2(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                                     float *y, int64_t ldy)
{
    matvec_legacy_avx2(KIND_Q5_0, w, row_bytes, rows, a, y, ldy);
}

AVX2_FN static void matvec_q5_1_avx2(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                                     float *y, int64_t ldy)
{
    matvec_legacy_avx2(KIND_Q5_1, w, row_bytes, rows, a, y, ldy);
}

void llm_kernels_add_legacy_avx2(llm_kernels *k)
{
    const llm_type_kernels e[] = {
        {LLM_TYPE_Q4_1, matvec_q4_1_avx2, dequant_q4_1_avx2, 1, 0, NULL, NULL},
        {LLM_TYPE_Q5_0, matvec_q5_0_avx2, dequant_q5_0_avx2, 1, 0, NULL, NULL},
        {LLM_TYPE_Q5_1, matvec_q5_1_avx2, dequant_q5_1_avx2, 1, 0, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++)
        (void)llm_kernels_set(k, &e[i]);
}

#else

void llm_kernels_add_legacy_avx2(llm_kernels *k)
{
    llm_kernels_add_legacy_scalar(k);
}

#endif
