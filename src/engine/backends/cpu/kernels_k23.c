/* kernels_k23.c — the CPU kernels of the 2- and 3-bit k-quants (Q2_K,
 * Q3_K; layouts in quant.h): scalar reference, AVX2 and AVX-512 VNNI
 * (kernels.h).
 *
 * Like the other k-quants they read the activations quantized to blocks of
 * 32 (llm_qrow / llm_acts). A block of 32 activations covers two of these
 * types' 16-element sub-blocks, k0 = 2b and k1 = 2b + 1 of its super-block,
 * so per activation block b the product is
 *   Q2_K: d_x[b] * (d * (sc0 * sum0(q x) + sc1 * sum1(q x))
 *                   - dmin * (m0 * sum0(x) + m1 * sum1(x)))
 *   Q3_K: d_x[b] * (d * (sc0 * sum0(q x) + sc1 * sum1(q x)))
 * where sum0 / sum1 run over the block's first / second 16 elements, with
 * every parenthesised integer exact in int32 (|q x| summed over 32 stays
 * below 2^17, times a 6-bit scale below 2^23). Q3_K's q (-4..3) is taken
 * as u - 4 with u = q + 4 in 0..7 (an unsigned byte for maddubs/vpdpbusd):
 * sum(q x) = sum(u x) - 4 sum(x).
 *
 * The scalar kernel adds the per-block terms into one f32 in block order.
 * The AVX2 one computes only the integers with vectors (the scales are
 * multiplied in with madd, so one full-vector sum per block gives the
 * parenthesised sums) and then runs the scalar statements in the same
 * order: bitwise the scalar kernel (floating-point contraction is off: ISO
 * C mode for GCC, the pragma below for clang). The AVX-512 one computes
 * the same integers and the same per-block f32 terms, but adds them in
 * eight lanes (one per block of a super-block) summed at the end of the
 * row, as kernels_kquant_avx512.c does for the wider k-quants: agreement
 * with the scalar set within f32 rounding of the sum of |terms|.
 *
 * Rows to f32 (embedding rows, the batched product's panels: prefill) are
 * quant_k.c's reference conversions, in the avx512 set vectorized bit for
 * bit (engine_k23_avx512 compares them with memcmp).
 */
#include "kernels.h"

#include <string.h>

#include "quant.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

_Static_assert(LLM_ACTS_QK == 32, "an activation block covers two 16-element sub-blocks");

static float f16_at(const unsigned char *p)
{
    return llm_fp16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* The float part of one activation block (shared by every set). */
static inline float q2k_term(float dx, float d, float dmin, int32_t isc, int32_t ism)
{
    return dx * (d * (float)isc - dmin * (float)ism);
}

static inline float q3k_term(float dx, float d, int32_t isum)
{
    return dx * (d * (float)isum);
}

/* Q3_K's sixteen signed scales of one super-block, as the reference
 * decodes them (llm_q3k_scale). */
static void q3k_scales_ref(const unsigned char *blk, int sc[16])
{
    for (int k = 0; k < 16; k++)
        sc[k] = llm_q3k_scale(blk + 96, k);
}

/* The same sixteen 6-bit values (biased by 32), four at a time in 32-bit
 * words: with the 12 bytes as words a0, a1 (bytes 0..7) and c (8..11),
 * sub-blocks 0..3 are the low nibbles of a0's bytes under bits 0..1 of
 * c's, 4..7 the low nibbles of a1 under bits 2..3, 8..11 the high nibbles
 * of a0 under bits 4..5, 12..15 the high nibbles of a1 under bits 6..7
 * (llm_q3k_scale's layout; engine_k23_* and engine_matvec_* hold the
 * kernels that use this to the reference). */
static inline void q3k_scale_words(const unsigned char *blk, uint32_t w[4])
{
    uint32_t a0, a1, c;
    memcpy(&a0, blk + 96, 4);
    memcpy(&a1, blk + 100, 4);
    memcpy(&c, blk + 104, 4);
    const uint32_t lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    w[0] = (a0 & lo4) | ((c & lo2) << 4);
    w[1] = (a1 & lo4) | (((c >> 2) & lo2) << 4);
    w[2] = ((a0 >> 4) & lo4) | (((c >> 4) & lo2) << 4);
    w[3] = ((a1 >> 4) & lo4) | (((c >> 6) & lo2) << 4);
}

static inline void q3k_scales(const unsigned char *blk, int sc[16])
{
    uint32_t w[4];
    q3k_scale_words(blk, w);
    for (int k = 0; k < 16; k++) /* little-endian: byte k of w is sub-block k */
        sc[k] = (int)((w[k / 4] >> (8 * (k % 4))) & 0xffu) - 32;
}

/* ---- scalar ------------------------------------------------------------- */

/* Activation block b8 (0..7) of a super-block is element 32 * b8 + l; its
 * two low bits sit at bit 2 * (b8 % 4) of qs[32 * (b8 / 4) + l]. */
static float dot_q2_k(const void *w, const llm_qrow *x, int64_t n)
{
    const unsigned char *blk = w;
    float s = 0.0f;
    for (int64_t sb = 0; sb < n / LLM_QK_K; sb++, blk += LLM_Q2_K_BYTES) {
        float d = f16_at(blk + 80), dmin = f16_at(blk + 82);
        for (int b8 = 0; b8 < 8; b8++) {
            int64_t b = sb * 8 + b8;
            const int8_t *xq = x->q + b * 32;
            const unsigned char *qs = blk + 16 + 32 * (b8 / 4);
            int shift = 2 * (b8 % 4);
            int32_t qx[2] = {0, 0}, xs[2] = {0, 0};
            for (int l = 0; l < 32; l++) {
                qx[l / 16] += ((qs[l] >> shift) & 3) * xq[l];
                xs[l / 16] += xq[l];
            }
            int s0 = blk[2 * b8], s1 = blk[2 * b8 + 1];
            int32_t isc = (s0 & 15) * qx[0] + (s1 & 15) * qx[1];
            int32_t ism = (s0 >> 4) * xs[0] + (s1 >> 4) * xs[1];
            s += q2k_term(x->d[b], d, dmin, isc, ism);
        }
    }
    return s;
}

/* Element 32 * b8 + l's high bit is bit b8 of hmask[l]. */
static float dot_q3_k(const void *w, const llm_qrow *x, int64_t n)
{
    const unsigned char *blk = w;
    float s = 0.0f;
    for (int64_t sb = 0; sb < n / LLM_QK_K; sb++, blk += LLM_Q3_K_BYTES) {
        float d = f16_at(blk + 108);
        int sc[16];
        q3k_scales_ref(blk, sc);
        for (int b8 = 0; b8 < 8; b8++) {
            int64_t b = sb * 8 + b8;
            const int8_t *xq = x->q + b * 32;
            const unsigned char *qs = blk + 32 + 32 * (b8 / 4);
            int shift = 2 * (b8 % 4);
            int32_t qx[2] = {0, 0};
            for (int l = 0; l < 32; l++) {
                int q = ((qs[l] >> shift) & 3) - (((blk[l] >> b8) & 1) ? 0 : 4);
                qx[l / 16] += q * xq[l];
            }
            s += q3k_term(x->d[b], d, sc[2 * b8] * qx[0] + sc[2 * b8 + 1] * qx[1]);
        }
    }
    return s;
}

LLM_MATVEC_BY_ROWS_QUANT(, matvec_q2_k, dot_q2_k)
LLM_MATVEC_BY_ROWS_QUANT(, matvec_q3_k, dot_q3_k)

void llm_kernels_add_k23_scalar(llm_kernels *k)
{
    const llm_type_kernels e[] = {
        {LLM_TYPE_Q2_K, matvec_q2_k, llm_q2_k_to_f32, 1, 0, NULL, NULL},
        {LLM_TYPE_Q3_K, matvec_q3_k, llm_q3_k_to_f32, 1, 0, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++)
        (void)llm_kernels_set(k, &e[i]); /* 13 built-in types <= LLM_KERNEL_TYPES_MAX */
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

/* ---- AVX2 --------------------------------------------------------------- */

#define AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define PF_AHEAD 4096

/* The eight lane sums of v[0..7] (8 int32 lanes each) as one vector:
 * element j is the sum of v[j]'s lanes. Integer adds: exact, any order. */
AVX2_FN static inline __m256i hsum8x8(const __m256i *v)
{
    __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* 16-bit lanes: lo in the low 128 bits (elements 0..15 of a block after
 * maddubs), hi in the high 128 bits. */
AVX2_FN static inline __m256i pair16(int lo, int hi)
{
    return _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo));
}

/* sum over the block of u * x * (the weight of its half): maddubs pairs
 * stay within int16 (2 * 7 * 128), madd by the half's 16-bit factor. */
AVX2_FN static inline __m256i dot_weighted(__m256i u, __m256i x, __m256i f)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), f);
}

AVX2_FN static float dot_q2_k_avx2(const void *w, const llm_qrow *x, int64_t n)
{
    const unsigned char *blk = w;
    const __m256i three = _mm256_set1_epi8(3), ones = _mm256_set1_epi8(1);
    float s = 0.0f;
    for (int64_t sb = 0; sb < n / LLM_QK_K; sb++, blk += LLM_Q2_K_BYTES) {
        _mm_prefetch((const char *)blk + PF_AHEAD, _MM_HINT_T0);
        _mm_prefetch((const char *)blk + PF_AHEAD + 64, _MM_HINT_T0);
        float d = f16_at(blk + 80), dmin = f16_at(blk + 82);
        const int8_t *xb = x->q + sb * LLM_QK_K;
        __m256i raw[2] = {_mm256_loadu_si256((const __m256i *)(blk + 16)),
                          _mm256_loadu_si256((const __m256i *)(blk + 48))};
        __m256i vsc[8], vsm[8];
        for (int b8 = 0; b8 < 8; b8++) {
            __m256i u = _mm256_and_si256(_mm256_srli_epi16(raw[b8 / 4], 2 * (b8 % 4)), three);
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xb + 32 * b8));
            int s0 = blk[2 * b8], s1 = blk[2 * b8 + 1];
            vsc[b8] = dot_weighted(u, xv, pair16(s0 & 15, s1 & 15));
            vsm[b8] = dot_weighted(ones, xv, pair16(s0 >> 4, s1 >> 4));
        }
        int32_t isc[8], ism[8];
        _mm256_storeu_si256((__m256i *)isc, hsum8x8(vsc));
        _mm256_storeu_si256((__m256i *)ism, hsum8x8(vsm));
        for (int b8 = 0; b8 < 8; b8++)
            s += q2k_term(x->d[sb * 8 + b8], d, dmin, isc[b8], ism[b8]);
    }
    return s;
}

AVX2_FN static float dot_q3_k_avx2(const void *w, const llm_qrow *x, int64_t n)
{
    const unsigned char *blk = w;
    const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4), ones = _mm256_set1_epi8(1);
    float s = 0.0f;
    for (int64_t sb = 0; sb < n / LLM_QK_K; sb++, blk += LLM_Q3_K_BYTES) {
        _mm_prefetch((const char *)blk + PF_AHEAD, _MM_HINT_T0);
        _mm_prefetch((const char *)blk + PF_AHEAD + 64, _MM_HINT_T0);
        float d = f16_at(blk + 108);
        int sc[16];
        q3k_scales(blk, sc);
        const int8_t *xb = x->q + sb * LLM_QK_K;
        __m256i hm = _mm256_loadu_si256((const __m256i *)blk);
        __m256i raw[2] = {_mm256_loadu_si256((const __m256i *)(blk + 32)),
                          _mm256_loadu_si256((const __m256i *)(blk + 64))};
        __m256i v[8];
        for (int b8 = 0; b8 < 8; b8++) {
            __m256i lo = _mm256_and_si256(_mm256_srli_epi16(raw[b8 / 4], 2 * (b8 % 4)), three);
            __m256i m = _mm256_set1_epi8((char)(1 << b8));
            __m256i hi = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, m), m), four);
            __m256i u = _mm256_or_si256(lo, hi); /* q + 4 */
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xb + 32 * b8));
            __m256i f = pair16(sc[2 * b8], sc[2 * b8 + 1]);
            __m256i ux = dot_weighted(u, xv, f), xs = dot_weighted(ones, xv, f);
            v[b8] = _mm256_sub_epi32(ux, _mm256_slli_epi32(xs, 2));
        }
        int32_t isum[8];
        _mm256_storeu_si256((__m256i *)isum, hsum8x8(v));
        for (int b8 = 0; b8 < 8; b8++)
            s += q3k_term(x->d[sb * 8 + b8], d, isum[b8]);
    }
    return s;
}

LLM_MATVEC_BY_ROWS_QUANT(AVX2_FN, matvec_q2_k_avx2, dot_q2_k_avx2)
LLM_MATVEC_BY_ROWS_QUANT(AVX2_FN, matvec_q3_k_avx2, dot_q3_k_avx2)

void llm_kernels_add_k23_avx2(llm_kernels *k)
{
    const llm_type_kernels e[] = {
        {LLM_TYPE_Q2_K, matvec_q2_k_avx2, llm_q2_k_to_f32, 1, 0, NULL, NULL},
        {LLM_TYPE_Q3_K, matvec_q3_k_avx2, llm_q3_k_to_f32, 1, 0, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++)
        (void)llm_kernels_set(k, &e[i]);
}

/* ---- AVX-512 VNNI ------------------------------------------------------- *
 *
 * Per super-block, the 64 quant bytes are one vector: shifted right by 2j
 * and masked they hold activation block j (bytes 0..31) and block 4 + j
 * (bytes 32..63), which meet their 64 activation bytes in one vpdpbusd.
 * Each 128-bit lane of that result is one 16-element sub-block (4
 * partials per lane); a fixed shuffle-and-add tree turns the four results
 * into the sixteen sub-block sums, the scales are multiplied in as int32,
 * and adjacent sub-blocks are added into the eight blocks' integers (all
 * exact). The eight f32 terms are then formed as the scalar kernel forms
 * them, lane-parallel, and added into an 8-lane accumulator. */

#define K23_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define ALWAYS_INLINE __attribute__((always_inline)) inline

K23_FN static ALWAYS_INLINE __m512i load2x256(const void *lo, const void *hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                              _mm256_loadu_si256((const __m256i *)hi), 1);
}

/* p_j (j < 4): 128-bit lanes l = 0..3 hold sub-blocks 2j, 2j + 1, 8 + 2j,
 * 9 + 2j (four partials each). Returns the sixteen sub-block sums in
 * order. */
K23_FN static ALWAYS_INLINE __m512i reduce_sub16(__m512i p0, __m512i p1, __m512i p2, __m512i p3)
{
    __m512i e = _mm512_add_epi32(_mm512_unpacklo_epi32(p0, p1), _mm512_unpackhi_epi32(p0, p1));
    __m512i f = _mm512_add_epi32(_mm512_unpacklo_epi32(p2, p3), _mm512_unpackhi_epi32(p2, p3));
    /* g[4l + j] = the total of p_j's lane l */
    __m512i g = _mm512_add_epi32(_mm512_unpacklo_epi64(e, f), _mm512_unpackhi_epi64(e, f));
    const __m512i order = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    return _mm512_permutexvar_epi32(order, g);
}

/* Sub-blocks 2b and 2b + 1 added: the eight blocks' integers. */
K23_FN static ALWAYS_INLINE __m256i pairs_to_blocks(__m512i v)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    __m512i p = _mm512_permutexvar_epi32(even, v);
    return _mm256_add_epi32(_mm512_castsi512_si256(p), _mm512_extracti64x4_epi64(p, 1));
}

K23_FN static ALWAYS_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* One activation row's super-block: the bytes for each shift j (blocks j
 * and 4 + j) and the sixteen 16-element sums of x. */
typedef struct k23_act {
    __m512i x[4];
    __m512i xs;
    __m256 dx;
} k23_act;

K23_FN static ALWAYS_INLINE void k23_act_load(const llm_acts *a, int32_t t, int64_t sb, k23_act *v)
{
    int64_t nb = a->len / LLM_ACTS_QK;
    const int8_t *x = a->q + t * a->len + sb * LLM_QK_K;
    const __m512i ones = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
    __m512i s[4];
    for (int j = 0; j < 4; j++) {
        v->x[j] = load2x256(x + 32 * j, x + 128 + 32 * j);
        s[j] = _mm512_dpbusd_epi32(zero, ones, v->x[j]);
    }
    v->xs = reduce_sub16(s[0], s[1], s[2], s[3]);
    v->dx = _mm256_loadu_ps(a->d + t * nb + sb * 8);
}

/* The sixteen sub-block sums of u * x, u the values (0..7) at qs shifted
 * by 2j and masked, plus, for Q3_K, 4 where the high bit is set. */
K23_FN static ALWAYS_INLINE __m512i k23_ux(const unsigned char *qs, const unsigned char *hmask,
                                           const k23_act *v)
{
    const __m512i three = _mm512_set1_epi8(3), zero = _mm512_setzero_si512();
    __m512i raw = _mm512_loadu_si512(qs), hm = zero;
    if (hmask)
        hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)hmask));
    __m512i p[4];
    for (int j = 0; j < 4; j++) {
        __m512i u = _mm512_and_si512(_mm512_srli_epi16(raw, 2 * j), three);
        if (hmask) {
            /* bytes 0..31 (block j) test bit j, bytes 32..63 (block 4+j) bit 4+j */
            __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << j)),
                                             _mm256_set1_epi8((char)(1 << (4 + j))), 1);
            u = _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(hm, bit), u, _mm512_set1_epi8(4));
        }
        p[j] = _mm512_dpbusd_epi32(zero, u, v->x[j]);
    }
    return reduce_sub16(p[0], p[1], p[2], p[3]);
}

K23_FN static ALWAYS_INLINE __m256 q2k_block_terms(const unsigned char *blk, const k23_act *v)
{
    __m512i ux = k23_ux(blk + 16, NULL, v);
    __m512i sm = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)blk));
    __m512i sc = _mm512_and_si512(sm, _mm512_set1_epi32(15)), m = _mm512_srli_epi32(sm, 4);
    __m256i isc = pairs_to_blocks(_mm512_mullo_epi32(ux, sc));
    __m256i ism = pairs_to_blocks(_mm512_mullo_epi32(v->xs, m));
    uint16_t dh, mh;
    memcpy(&dh, blk + 80, 2);
    memcpy(&mh, blk + 82, 2);
    __m256 d = _mm256_set1_ps(_cvtsh_ss(dh)), dmin = _mm256_set1_ps(_cvtsh_ss(mh));
    __m256 t = _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(isc)), _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(ism)));
    return _mm256_mul_ps(v->dx, t);
}

K23_FN static ALWAYS_INLINE __m256 q3k_block_terms(const unsigned char *blk, const k23_act *v)
{
    __m512i ux = k23_ux(blk + 32, blk, v);
    uint32_t w[4];
    q3k_scale_words(blk, w);
    /* built in a register, not stored and reloaded (a 16-byte load of four
     * 4-byte stores stalls on store forwarding) */
    __m128i sc6 = _mm_setr_epi32((int)w[0], (int)w[1], (int)w[2], (int)w[3]);
    __m512i scv = _mm512_sub_epi32(_mm512_cvtepu8_epi32(sc6), _mm512_set1_epi32(32));
    __m512i q = _mm512_sub_epi32(ux, _mm512_slli_epi32(v->xs, 2)); /* sum(q x) per sub-block */
    __m256i isum = pairs_to_blocks(_mm512_mullo_epi32(q, scv));
    uint16_t dh;
    memcpy(&dh, blk + 108, 2);
    __m256 t = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(dh)), _mm256_cvtepi32_ps(isum));
    return _mm256_mul_ps(v->dx, t);
}

/* Up to K23_TILE weight rows share each super-block's activation vectors;
 * each row's bytes one tile down (the next tile's, rows being contiguous)
 * are prefetched into L2, as kernels_avx512.c does. */
#define K23_TILE 4
#define K23_ROWS(TERMS, BYTES, R)                                                         \
    for (int32_t t = 0; t < a->n; t++) {                                                  \
        __m256 acc[K23_TILE];                                                             \
        for (int i = 0; i < (R); i++)                                                     \
            acc[i] = _mm256_setzero_ps();                                                 \
        for (int64_t sb = 0; sb < nsb; sb++) {                                            \
            k23_act v;                                                                    \
            k23_act_load(a, t, sb, &v);                                                   \
            for (int i = 0; i < (R); i++) {                                               \
                const unsigned char *blk = row + (size_t)i * row_bytes + (size_t)sb * (BYTES); \
                if (t == 0) {                                                             \
                    _mm_prefetch((const char *)blk + (R) * row_bytes, _MM_HINT_T1);       \
                    _mm_prefetch((const char *)blk + (R) * row_bytes + 64, _MM_HINT_T1);  \
                }                                                                         \
                acc[i] = _mm256_add_ps(acc[i], TERMS(blk, &v));                           \
            }                                                                             \
        }                                                                                 \
        for (int i = 0; i < (R); i++)                                                     \
            y[t * ldy + r + i] = hsum8(acc[i]);                                           \
    }

#define K23_MATVEC(NAME, BYTES, TERMS)                                                      \
    K23_FN static void NAME(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a, \
                            float *y, int64_t ldy)                                          \
    {                                                                                       \
        int64_t nsb = a->len / LLM_QK_K, r = 0;                                             \
        for (; r + K23_TILE <= rows; r += K23_TILE) {                                       \
            const unsigned char *row = (const unsigned char *)w + (size_t)r * row_bytes;    \
            K23_ROWS(TERMS, BYTES, K23_TILE)                                                \
        }                                                                                   \
        for (; r < rows; r++) {                                                             \
            const unsigned char *row = (const unsigned char *)w + (size_t)r * row_bytes;    \
            K23_ROWS(TERMS, BYTES, 1)                                                       \
        }                                                                                   \
    }

K23_MATVEC(matvec_q2_k_avx512, LLM_Q2_K_BYTES, q2k_block_terms)
K23_MATVEC(matvec_q3_k_avx512, LLM_Q3_K_BYTES, q3k_block_terms)

/* Rows to f32 for the batched product's panels (prefill), bit for bit
 * quant_k.c's reference: per sub-block the same f32 scale products, per
 * element the same multiply and subtract, sixteen elements at a time (the
 * reference took a Q2_K prefill panel at half the speed of an F16 one). */
K23_FN static ALWAYS_INLINE void k23_store16(float *dst, __m128i q8, __m512 dl, __m512 ml,
                                             const int sub_m)
{
    __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q8));
    __m512 y = _mm512_mul_ps(dl, q);
    _mm512_storeu_ps(dst, sub_m ? _mm512_sub_ps(y, ml) : y);
}

K23_FN static void dequant_q2_k(const void *src, float *dst, size_t n)
{
    const unsigned char *s = src;
    const __m256i three = _mm256_set1_epi8(3);
    for (size_t b = 0; b < n / LLM_QK_K; b++, s += LLM_Q2_K_BYTES, dst += LLM_QK_K) {
        float d = f16_at(s + 80), dmin = f16_at(s + 82);
        for (int h = 0; h < 2; h++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(s + 16 + 32 * h));
            for (int g = 0; g < 4; g++) {
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * g), three);
                for (int half = 0; half < 2; half++) {
                    int k = 8 * h + 2 * g + half, sm = s[k];
                    __m512 dl = _mm512_set1_ps(d * (float)(sm & 0x0f));
                    __m512 ml = _mm512_set1_ps(dmin * (float)(sm >> 4));
                    __m128i q8 = half ? _mm256_extracti128_si256(q, 1) : _mm256_castsi256_si128(q);
                    k23_store16(dst + 128 * h + 32 * g + 16 * half, q8, dl, ml, 1);
                }
            }
        }
    }
}

K23_FN static void dequant_q3_k(const void *src, float *dst, size_t n)
{
    const unsigned char *s = src;
    const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), four = _mm256_set1_epi8(4);
    for (size_t b = 0; b < n / LLM_QK_K; b++, s += LLM_Q3_K_BYTES, dst += LLM_QK_K) {
        float d = f16_at(s + 108);
        int sc[16];
        q3k_scales(s, sc);
        __m256i hm = _mm256_loadu_si256((const __m256i *)s);
        for (int h = 0; h < 2; h++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(s + 32 + 32 * h));
            for (int g = 0; g < 4; g++) {
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * g), three);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + g), one);
                /* low - (high ? 0 : 4) = low + 4 * high - 4, in -4..3 */
                __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 2)), four);
                for (int half = 0; half < 2; half++) {
                    __m512 dl = _mm512_set1_ps(d * (float)sc[8 * h + 2 * g + half]);
                    __m128i q8 = half ? _mm256_extracti128_si256(q, 1) : _mm256_castsi256_si128(q);
                    k23_store16(dst + 128 * h + 32 * g + 16 * half, q8, dl, dl, 0);
                }
            }
        }
    }
}

static void replace_entry(llm_kernels *k, uint32_t type, llm_matvec_fn matvec, llm_dequant_fn dequant)
{
    const llm_type_kernels *old = llm_kernels_find(k, type);
    if (!old)
        return;
    llm_type_kernels e = *old;
    e.matvec = matvec;
    e.dequant = dequant;
    (void)llm_kernels_set(k, &e); /* replaces: the table does not grow */
}

void llm_kernels_add_k23_avx512(llm_kernels *k)
{
    replace_entry(k, LLM_TYPE_Q2_K, matvec_q2_k_avx512, dequant_q2_k);
    replace_entry(k, LLM_TYPE_Q3_K, matvec_q3_k_avx512, dequant_q3_k);
}

#else

void llm_kernels_add_k23_avx2(llm_kernels *k)
{
    llm_kernels_add_k23_scalar(k);
}

void llm_kernels_add_k23_avx512(llm_kernels *k)
{
    (void)k;
}

#endif
