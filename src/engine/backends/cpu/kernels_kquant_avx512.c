/* kernels_kquant_avx512.c — the avx512 set's matrix–vector products of the
 * k-quants (Q4_K, Q5_K, Q6_K) through AVX-512 VNNI (see kernels.h).
 *
 * The activations are the row loop's (llm_acts): quantized once per matmul
 * to 8-bit blocks of 32 with an f32 scale d_x[b] and the block's quant sum
 * (xsum, stored as -128 * sum). A Q4_K/Q5_K sub-block of 32 is one such
 * block and a Q6_K block covers two 16-element sub-blocks, so the integer
 * decomposition is kernels_k.c's:
 *   Q4_K/Q5_K: d_x[b] * ((d * sc) * sum(q * x) - (dmin * m) * sum(x))
 *   Q6_K:      d_x[b] * d * (sc0 * sum0((q - 32) * x) + sc1 * sum1(...))
 * What changes is how the sums become floats. The AVX2 kernel folds the
 * eight terms of a super-block into one f32 one after another (a chain of
 * dependent adds per weight row, with the 6-bit scales decoded one by one),
 * which bound a 2-thread Q4_K decode at 0.4-0.5 of llama.cpp's speed here.
 * This one keeps the whole super-block in vectors:
 *   - vpdpbusd multiplies 64 weight values (unsigned: nibbles, 5- or 6-bit
 *     values) by 64 activation bytes at a time, four products per 32-bit
 *     lane; a fixed shuffle-and-add tree reduces a super-block's four such
 *     vectors to one int32 per sub-block (exact);
 *   - the 6-bit scales and mins are unpacked with integer word operations
 *     into 8 lanes, and the eight terms are computed lane-parallel and
 *     added into an 8-lane f32 accumulator per (weight row, activation
 *     row), summed across lanes once at the end of the row;
 *   - Q6_K's "- 32" uses the activations' 16-element sums, computed once
 *     per super-block for the whole tile of weight rows.
 * Up to four weight rows share each super-block's activation loads and
 * per-block vectors, and each row's next tile is prefetched into L2 (as
 * kernels_avx512.c does for Q8_0).
 *
 * The integer sums are exactly the scalar kernel's; only the f32 rounding
 * of the per-block terms and their order of addition differ (eight lane
 * chains added pairwise at the end instead of one chain), so results agree
 * with the scalar set to f32 rounding of the sum of |terms|, not bitwise
 * (tests: engine_matvec_avx512 check_kquants, relative 1e-5 of that sum).
 * Each result still depends only on its own weight row and activation row,
 * never on the tile or thread that computed it.
 */
#include "kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>
#include <string.h>

#include "quant.h"

#define KQ_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define ALWAYS_INLINE __attribute__((always_inline)) inline

/* Weight rows per tile: they share the activation's loads and vectors.
 * With several activation rows, a tile's decoded weights are kept in
 * registers instead (KQ_TILE_MANY rows) and every activation row passes
 * over them. */
#define KQ_TILE 4
#define KQ_TILE_MANY 2

/* Prefetch the same bytes one tile of rows down into L2: rows are
 * contiguous, so that is the next tile's block, one tile ahead of each
 * row's stream whatever the row width (kernels_avx512.c, PREFETCH_TILE). */
#define KQ_PREFETCH(p, R, row_bytes) \
    _mm_prefetch((const char *)(p) + (size_t)(R) * (row_bytes), _MM_HINT_T1)

KQ_FN static ALWAYS_INLINE float f16_at(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

KQ_FN static ALWAYS_INLINE __m512i load512(const void *p)
{
    return _mm512_loadu_si512(p);
}

/* Two 32-byte pieces as one vector: lo in bytes 0..31, hi in 32..63. */
KQ_FN static ALWAYS_INLINE __m512i load2x256(const void *lo, const void *hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                              _mm256_loadu_si256((const __m256i *)hi), 1);
}

/* p0..p3 hold int32 partial sums in 128-bit lanes: lane l of vector v is
 * four partials of one group. Returns per 128-bit lane l the four groups'
 * totals [p0_l, p1_l, p2_l, p3_l]. Integer adds: exact in any order. */
KQ_FN static ALWAYS_INLINE __m512i reduce_lanes(__m512i p0, __m512i p1, __m512i p2, __m512i p3)
{
    __m512i e = _mm512_add_epi32(_mm512_unpacklo_epi32(p0, p1), _mm512_unpackhi_epi32(p0, p1));
    __m512i f = _mm512_add_epi32(_mm512_unpacklo_epi32(p2, p3), _mm512_unpackhi_epi32(p2, p3));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(e, f), _mm512_unpackhi_epi64(e, f));
}

/* Q4_K/Q5_K: p0 = sub-blocks (0 | 2), p1 = (1 | 3), p2 = (4 | 6),
 * p3 = (5 | 7), 8 partial lanes each: the eight sub-block sums in order. */
KQ_FN static ALWAYS_INLINE __m256i reduce_k45(__m512i p0, __m512i p1, __m512i p2, __m512i p3)
{
    __m512i g = reduce_lanes(p0, p1, p2, p3);
    /* 128-bit lanes 0+1 hold sub-blocks 0,1,4,5 and lanes 2+3 2,3,6,7. */
    __m512i h = _mm512_add_epi32(g, _mm512_shuffle_i32x4(g, g, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m512i order = _mm512_setr_epi32(0, 1, 8, 9, 2, 3, 10, 11, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, h));
}

/* Q6_K: p_k = elements 64k..64k+63, one 16-element sub-block per 128-bit
 * lane: the sixteen sub-block sums in order. */
KQ_FN static ALWAYS_INLINE __m512i reduce_q6(__m512i p0, __m512i p1, __m512i p2, __m512i p3)
{
    __m512i g = reduce_lanes(p0, p1, p2, p3); /* g[4l + k] = sub-block 4k + l */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_epi32(order, g);
}

KQ_FN static ALWAYS_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- Q4_K and Q5_K ------------------------------------------------------ */

/* One activation row's super-block, in the vectors every weight row uses. */
typedef struct k45_act {
    __m512i x[4];  /* activation bytes for p0..p3 of reduce_k45 */
    __m256 dx;     /* d_x of the eight blocks */
    __m256 dxsum;  /* d_x * sum(x) of the eight blocks */
} k45_act;

KQ_FN static ALWAYS_INLINE void k45_act_load(const llm_acts *a, int32_t t, int64_t sb, k45_act *v)
{
    int64_t nb = a->len / LLM_ACTS_QK;
    const int8_t *x = a->q + t * a->len + sb * LLM_QK_K;
    v->x[0] = load2x256(x, x + 64);
    v->x[1] = load2x256(x + 32, x + 96);
    v->x[2] = load2x256(x + 128, x + 192);
    v->x[3] = load2x256(x + 160, x + 224);
    v->dx = _mm256_loadu_ps(a->d + t * nb + sb * 8);
    /* xsum is -128 * sum: the convert is exact (|.| < 2^24), as is 1/128. */
    __m256 sum = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(a->xsum + t * nb + sb * 8))),
                               _mm256_set1_ps(-1.0f / 128.0f));
    v->dxsum = _mm256_mul_ps(v->dx, sum);
}

/* d * sc_j (lanes 0..7) and dmin * m_j (lanes 8..15) of a Q4_K/Q5_K
 * super-block. The 6-bit scales and mins are llm_q4k_scale_min's layout:
 * with the 12 bytes at blk + 4 as words a, b, c, sub-blocks 0..3 are the
 * low 6 bits of the bytes of a (scales) and b (mins); sub-blocks 4..7 take
 * the nibbles of c, low for scales and high for mins, with the top 2 bits
 * of the bytes of a and b above them. Unpacked here as four 32-bit lanes
 * [sc 0..3, sc 4..7, m 0..3, m 4..7] (the load's fourth word, the first
 * quants, is shuffled away). */
KQ_FN static ALWAYS_INLINE __m512 k45_scales(const unsigned char *blk)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(blk + 4));
    __m128i lo = _mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)), _mm_setr_epi32(0, 0, 0, 4));
    lo = _mm_and_si128(lo, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    __m128i hi = _mm_srli_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)), 2);
    hi = _mm_and_si128(hi, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    __m512 scm = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_or_si128(lo, hi)));
    /* fp16 d and dmin, broadcast as [d x 8, dmin x 8] */
    uint32_t dd;
    memcpy(&dd, blk, 4);
    __m512 ddv = _mm512_cvtph_ps(_mm256_set1_epi32((int)dd));
    ddv = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), ddv);
    return _mm512_mul_ps(scm, ddv);
}

/* One Q4_K/Q5_K super-block of one weight row, decoded for k45_apply. */
typedef struct k45_w {
    __m512i q[4];    /* values of sub-blocks (0|2), (1|3), (4|6), (5|7) */
    __m256 dsc, dm;  /* d * sc_j, dmin * m_j */
} k45_w;

KQ_FN static ALWAYS_INLINE void k45_decode(const unsigned char *blk, k45_w *o, const int five)
{
    const __m512i low = _mm512_set1_epi8(0x0f);
    const unsigned char *qs = blk + (five ? 48 : 16);
    __m512i raw0 = load512(qs), raw1 = load512(qs + 64);
    __m512i q[4] = {_mm512_and_si512(raw0, low), _mm512_and_si512(_mm512_srli_epi16(raw0, 4), low),
                    _mm512_and_si512(raw1, low), _mm512_and_si512(_mm512_srli_epi16(raw1, 4), low)};
    if (five) {
        /* Bit j of qh[l] is bit 4 of sub-block j's element l; q[k] holds
         * sub-blocks (0|2), (1|3), (4|6), (5|7), and q < 16, so the
         * masked add sets that bit. */
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16)));
        const __m512i sixteen = _mm512_set1_epi8(16);
#define KQ_SEL(lo, hi) _mm512_inserti64x4(_mm512_set1_epi8((char)(lo)), _mm256_set1_epi8((char)(hi)), 1)
        q[0] = _mm512_mask_add_epi8(q[0], _mm512_test_epi8_mask(qh, KQ_SEL(1, 4)), q[0], sixteen);
        q[1] = _mm512_mask_add_epi8(q[1], _mm512_test_epi8_mask(qh, KQ_SEL(2, 8)), q[1], sixteen);
        q[2] = _mm512_mask_add_epi8(q[2], _mm512_test_epi8_mask(qh, KQ_SEL(16, 64)), q[2], sixteen);
        q[3] = _mm512_mask_add_epi8(q[3], _mm512_test_epi8_mask(qh, KQ_SEL(32, 128)), q[3], sixteen);
#undef KQ_SEL
    }
    for (int k = 0; k < 4; k++)
        o->q[k] = q[k];
    __m512 scm = k45_scales(blk);
    o->dsc = _mm512_castps512_ps256(scm);
    o->dm = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(scm), 1));
}

/* Adds the super-block's eight terms, one per lane, to acc. */
KQ_FN static ALWAYS_INLINE __m256 k45_apply(const k45_w *o, const k45_act *v, __m256 acc)
{
    const __m512i zero = _mm512_setzero_si512();
    __m256i isum = reduce_k45(_mm512_dpbusd_epi32(zero, o->q[0], v->x[0]), _mm512_dpbusd_epi32(zero, o->q[1], v->x[1]),
                              _mm512_dpbusd_epi32(zero, o->q[2], v->x[2]), _mm512_dpbusd_epi32(zero, o->q[3], v->x[3]));
    acc = _mm256_fmadd_ps(_mm256_mul_ps(o->dsc, _mm256_cvtepi32_ps(isum)), v->dx, acc);
    return _mm256_fnmadd_ps(o->dm, v->dxsum, acc);
}

/* Several activation rows: each row tile's super-block is decoded once and
 * applied to every activation row, the accumulators waiting in acc_buf
 * between super-blocks. The operations per (weight row, activation row)
 * are k45_tile's, so the results are its bits. */
KQ_FN static ALWAYS_INLINE void k45_tile_many(const unsigned char *w, size_t row_bytes, const llm_acts *a,
                                              float *y, int64_t ldy, const int R, const int five)
{
    const size_t bytes = five ? LLM_Q5_K_BYTES : LLM_Q4_K_BYTES;
    __m256 acc_buf[LLM_ACTS_MAX][KQ_TILE_MANY];
    for (int32_t t = 0; t < a->n; t++)
        for (int r = 0; r < R; r++)
            acc_buf[t][r] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < a->len / LLM_QK_K; sb++) {
        k45_w o[KQ_TILE_MANY];
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            const unsigned char *blk = w + (size_t)r * row_bytes + (size_t)sb * bytes;
            KQ_PREFETCH(blk, R, row_bytes);
            KQ_PREFETCH(blk + 64, R, row_bytes);
            KQ_PREFETCH(blk + 128, R, row_bytes);
            k45_decode(blk, &o[r], five);
        }
        for (int32_t t = 0; t < a->n; t++) {
            k45_act v;
            k45_act_load(a, t, sb, &v);
#pragma GCC unroll 2
            for (int r = 0; r < R; r++)
                acc_buf[t][r] = k45_apply(&o[r], &v, acc_buf[t][r]);
        }
    }
    for (int32_t t = 0; t < a->n; t++)
        for (int r = 0; r < R; r++)
            y[t * ldy + r] = hsum8(acc_buf[t][r]);
}

/* R weight rows (1..KQ_TILE) against every activation row. */
KQ_FN static ALWAYS_INLINE void k45_tile(const unsigned char *w, size_t row_bytes, const llm_acts *a,
                                         float *y, int64_t ldy, const int R, const int five)
{
    const size_t bytes = five ? LLM_Q5_K_BYTES : LLM_Q4_K_BYTES;
    int64_t n_sb = a->len / LLM_QK_K;
    for (int32_t t = 0; t < a->n; t++) {
        __m256 acc[KQ_TILE];
        for (int r = 0; r < R; r++)
            acc[r] = _mm256_setzero_ps();
        for (int64_t sb = 0; sb < n_sb; sb++) {
            k45_act v;
            k45_act_load(a, t, sb, &v);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const unsigned char *blk = w + (size_t)r * row_bytes + (size_t)sb * bytes;
                if (t == 0) {
                    KQ_PREFETCH(blk, R, row_bytes);
                    KQ_PREFETCH(blk + 64, R, row_bytes);
                    KQ_PREFETCH(blk + 128, R, row_bytes);
                }
                k45_w o;
                k45_decode(blk, &o, five);
                acc[r] = k45_apply(&o, &v, acc[r]);
            }
        }
        for (int r = 0; r < R; r++)
            y[t * ldy + r] = hsum8(acc[r]);
    }
}

KQ_FN static ALWAYS_INLINE void k45_matvec(const void *w, size_t row_bytes, int64_t rows,
                                           const llm_acts *a, float *y, int64_t ldy, const int five)
{
    const unsigned char *p = w;
    int64_t r = 0;
    if (a->n > 1) {
        for (; r + KQ_TILE_MANY <= rows; r += KQ_TILE_MANY)
            k45_tile_many(p + (size_t)r * row_bytes, row_bytes, a, y + r, ldy, KQ_TILE_MANY, five);
        for (; r < rows; r++)
            k45_tile_many(p + (size_t)r * row_bytes, row_bytes, a, y + r, ldy, 1, five);
        return;
    }
    for (; r + KQ_TILE <= rows; r += KQ_TILE)
        k45_tile(p + (size_t)r * row_bytes, row_bytes, a, y + r, ldy, KQ_TILE, five);
    for (; r < rows; r++)
        k45_tile(p + (size_t)r * row_bytes, row_bytes, a, y + r, ldy, 1, five);
}

KQ_FN static void matvec_q4_k(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                              float *y, int64_t ldy)
{
    k45_matvec(w, row_bytes, rows, a, y, ldy, 0);
}

KQ_FN static void matvec_q5_k(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                              float *y, int64_t ldy)
{
    k45_matvec(w, row_bytes, rows, a, y, ldy, 1);
}

/* ---- Q6_K --------------------------------------------------------------- */

typedef struct q6_act {
    __m512i x[4];  /* elements 64k..64k+63 */
    __m512i xs32;  /* 32 * sum(x) of each 16-element sub-block */
    __m256 dx;     /* d_x of the eight blocks */
} q6_act;

KQ_FN static ALWAYS_INLINE void q6_act_load(const llm_acts *a, int32_t t, int64_t sb, q6_act *v)
{
    const int8_t *x = a->q + t * a->len + sb * LLM_QK_K;
    const __m512i zero = _mm512_setzero_si512(), ones = _mm512_set1_epi8(1);
    for (int k = 0; k < 4; k++)
        v->x[k] = load512(x + 64 * k);
    __m512i s = reduce_q6(_mm512_dpbusd_epi32(zero, ones, v->x[0]), _mm512_dpbusd_epi32(zero, ones, v->x[1]),
                          _mm512_dpbusd_epi32(zero, ones, v->x[2]), _mm512_dpbusd_epi32(zero, ones, v->x[3]));
    v->xs32 = _mm512_slli_epi32(s, 5);
    v->dx = _mm256_loadu_ps(a->d + t * (a->len / LLM_ACTS_QK) + sb * 8);
}

/* Adds one Q6_K super-block's eight block terms to acc. Element i of
 * 128-element half h, i = 32g + l: low bits from nibble g >> 1 of
 * ql[64h + 32(g & 1) + l], high bits 2g, 2g+1 of qh[32h + l]. So the 64
 * bytes ql[64h..] give elements 0..63 of the half in their low nibbles
 * and 64..127 in their high nibbles. */
KQ_FN static ALWAYS_INLINE __m256 q6_block(const unsigned char *blk, const q6_act *v, __m256 acc)
{
    const __m512i low = _mm512_set1_epi8(0x0f), hmask = _mm512_set1_epi8(0x30);
    /* Per 64-bit lane: bytes 0..31 take qh bits (0,1) resp. (4,5) into bits
     * 4,5, bytes 32..63 bits (2,3) resp. (6,7). */
    const __m512i up = _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2);
    const __m512i down = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
    __m512i q[4];
    for (int h = 0; h < 2; h++) {
        __m512i ql = load512(blk + 64 * h);
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
        __m512i hi0 = _mm512_and_si512(_mm512_sllv_epi64(qh, up), hmask);
        __m512i hi1 = _mm512_and_si512(_mm512_srlv_epi64(qh, down), hmask);
        q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low), hi0);
        q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low), hi1);
    }
    const __m512i zero = _mm512_setzero_si512();
    __m512i s = reduce_q6(_mm512_dpbusd_epi32(zero, q[0], v->x[0]), _mm512_dpbusd_epi32(zero, q[1], v->x[1]),
                          _mm512_dpbusd_epi32(zero, q[2], v->x[2]), _mm512_dpbusd_epi32(zero, q[3], v->x[3]));
    /* sc * sum((q - 32) x) per sub-block, then pairs: one int32 per block
     * of 32 (|.| < 2^24: 2 * 128 * 32 * 127 * 16). */
    __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 192)));
    __m512i t16 = _mm512_mullo_epi32(_mm512_sub_epi32(s, v->xs32), sc);
    __m256i t32 = _mm512_cvtepi64_epi32(_mm512_add_epi32(t16, _mm512_srli_epi64(t16, 32)));
    __m256 dt = _mm256_mul_ps(_mm256_set1_ps(f16_at(blk + 208)), _mm256_cvtepi32_ps(t32));
    return _mm256_fmadd_ps(dt, v->dx, acc);
}

KQ_FN static ALWAYS_INLINE void q6_tile(const unsigned char *w, size_t row_bytes, const llm_acts *a,
                                        float *y, int64_t ldy, const int R)
{
    int64_t n_sb = a->len / LLM_QK_K;
    for (int32_t t = 0; t < a->n; t++) {
        __m256 acc[KQ_TILE];
        for (int r = 0; r < R; r++)
            acc[r] = _mm256_setzero_ps();
        for (int64_t sb = 0; sb < n_sb; sb++) {
            q6_act v;
            q6_act_load(a, t, sb, &v);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const unsigned char *blk = w + (size_t)r * row_bytes + (size_t)sb * LLM_Q6_K_BYTES;
                if (t == 0) {
                    KQ_PREFETCH(blk, R, row_bytes);
                    KQ_PREFETCH(blk + 64, R, row_bytes);
                    KQ_PREFETCH(blk + 128, R, row_bytes);
                    KQ_PREFETCH(blk + 192, R, row_bytes);
                }
                acc[r] = q6_block(blk, &v, acc[r]);
            }
        }
        for (int r = 0; r < R; r++)
            y[t * ldy + r] = hsum8(acc[r]);
    }
}

KQ_FN static void matvec_q6_k(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                              float *y, int64_t ldy)
{
    const unsigned char *p = w;
    int64_t r = 0;
    for (; r + KQ_TILE <= rows; r += KQ_TILE)
        q6_tile(p + (size_t)r * row_bytes, row_bytes, a, y + r, ldy, KQ_TILE);
    for (; r < rows; r++)
        q6_tile(p + (size_t)r * row_bytes, row_bytes, a, y + r, ldy, 1);
}

/* ---- batched products (prefill) ---------------------------------------- */

/* As the batched Q8_0 product (kernels_avx512.c): a 32-bit lane is one of
 * 16 weight rows, and each super-block of those rows is repacked once per
 * call into a panel where wq[b][g] holds, in lane r, the four values
 * (unsigned: nibble, 5- or 6-bit) of row r's elements 32b+4g..32b+4g+3;
 * those come from one 32-bit word of each row's block, so the panel is
 * built with gathers. Every activation row then takes 8 vpdpbusd per
 * block of 32 against four broadcast activation bytes, with nothing to
 * reduce across lanes, and the per-row scales are lane vectors. The
 * activation rows (up to four at a time) share each panel load. Per
 * result, the float operations are one fixed chain over the blocks in
 * order, whatever the batch and the rows around it:
 *   Q4_K/Q5_K: acc = fma(d*sc * d_x, (float)isum, acc);
 *              acc = acc - (dmin*m) * (d_x * (float)sum(x))   (one fnmadd)
 *   Q6_K:      acc = fma(d * d_x, (float)(sc0 * s0 + sc1 * s1), acc)
 * with the integer sums exact (s0/s1: sum((q - 32) x) of each half). */

#define KP_ROWS 16

typedef struct kpanel {
    __m512i wq[8][8]; /* [block][group of 4] */
    __m512 s0[8];     /* Q4_K/Q5_K: d * sc_b; Q6_K: d (s0[0] only) */
    __m512 s1[8];     /* Q4_K/Q5_K: dmin * m_b */
    __m512i sc[16];   /* Q6_K: the 16 sub-block scales */
} kpanel;

/* Word `off` (bytes from each row's block start) of every row r < rows
 * (mask m; 0 elsewhere). */
KQ_FN static ALWAYS_INLINE __m512i gather_word(const unsigned char *blk, __m512i row_off, __mmask16 m,
                                               int off)
{
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, row_off, blk + off, 1);
}

/* (v >> shift) & mask in each 32-bit lane. */
KQ_FN static ALWAYS_INLINE __m512i bits(__m512i v, int shift, int mask)
{
    return _mm512_and_si512(_mm512_srli_epi32(v, (unsigned)shift), _mm512_set1_epi32(mask));
}

/* fp16 in bits 0..15 (hi = 0) or 16..31 (hi = 1) of each lane, as f32. */
KQ_FN static ALWAYS_INLINE __m512 lane_f16(__m512i v, const int hi)
{
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hi ? _mm512_srli_epi32(v, 16) : v));
}

/* Super-block `blk` (row 0's; rows row_off bytes apart) of a Q4_K/Q5_K
 * panel. Scales as llm_q4k_scale_min: with the 12 scale bytes as words
 * a, b, c, sub-blocks 0..3 are bytes of a (scales) and b (mins), low 6
 * bits; 4..7 the nibbles of c below the top 2 bits of a's and b's bytes. */
KQ_FN static ALWAYS_INLINE void kp_pack_k45(const unsigned char *blk, __m512i row_off, __mmask16 m,
                                            kpanel *p, const int five)
{
    __m512i dd = gather_word(blk, row_off, m, 0);
    __m512 d = lane_f16(dd, 0), dmin = lane_f16(dd, 1);
    __m512i a = gather_word(blk, row_off, m, 4), b = gather_word(blk, row_off, m, 8);
    __m512i c = gather_word(blk, row_off, m, 12);
    for (int j = 0; j < 4; j++) {
        __m512i sc_hi = _mm512_or_si512(bits(c, 8 * j, 15), bits(a, 8 * j + 2, 0x30));
        __m512i m_hi = _mm512_or_si512(bits(c, 8 * j + 4, 15), bits(b, 8 * j + 2, 0x30));
        p->s0[j] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(bits(a, 8 * j, 63)));
        p->s1[j] = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(bits(b, 8 * j, 63)));
        p->s0[4 + j] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc_hi));
        p->s1[4 + j] = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(m_hi));
    }
    const int qs = five ? 48 : 16;
    const __m512i low = _mm512_set1_epi32(0x0f0f0f0f);
    for (int g = 0; g < 8; g++) {
        __m512i qh = five ? gather_word(blk, row_off, m, 16 + 4 * g) : _mm512_setzero_si512();
        for (int pair = 0; pair < 4; pair++) {
            /* sub-blocks 2 pair (low nibbles) and 2 pair + 1 (high) */
            __m512i wv = gather_word(blk, row_off, m, qs + 32 * pair + 4 * g);
            __m512i v0 = _mm512_and_si512(wv, low), v1 = _mm512_and_si512(_mm512_srli_epi32(wv, 4), low);
            if (five) {
                v0 = _mm512_or_si512(v0, _mm512_slli_epi32(bits(qh, 2 * pair, 0x01010101), 4));
                v1 = _mm512_or_si512(v1, _mm512_slli_epi32(bits(qh, 2 * pair + 1, 0x01010101), 4));
            }
            p->wq[2 * pair][g] = v0;
            p->wq[2 * pair + 1][g] = v1;
        }
    }
}

/* The same for Q6_K: element 32 b + l of the super-block (b = 4h + q):
 * low bits from nibble q >> 1 of ql[64h + 32(q & 1) + l], high bits
 * 2q, 2q+1 of qh[32h + l]; int8 scales at 192, fp16 d at 208 (read as the
 * upper half of the word at 206, inside the block). */
KQ_FN static ALWAYS_INLINE void kp_pack_q6(const unsigned char *blk, __m512i row_off, __mmask16 m,
                                           kpanel *p)
{
    p->s0[0] = lane_f16(gather_word(blk, row_off, m, 206), 1);
    for (int w = 0; w < 4; w++) {
        __m512i sw = gather_word(blk, row_off, m, 192 + 4 * w);
        for (int k = 0; k < 4; k++)
            p->sc[4 * w + k] = _mm512_srai_epi32(_mm512_slli_epi32(sw, (unsigned)(24 - 8 * k)), 24);
    }
    const __m512i three = _mm512_set1_epi32(0x03030303);
    for (int h = 0; h < 2; h++)
        for (int g = 0; g < 8; g++) {
            __m512i qh = gather_word(blk, row_off, m, 128 + 32 * h + 4 * g);
            for (int odd = 0; odd < 2; odd++) {
                __m512i ql = gather_word(blk, row_off, m, 64 * h + 32 * odd + 4 * g);
                for (int top = 0; top < 2; top++) {
                    int q = 2 * top + odd;
                    __m512i hi = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, (unsigned)(2 * q)), three), 4);
                    p->wq[4 * h + q][g] = _mm512_or_si512(bits(ql, 4 * top, 0x0f0f0f0f), hi);
                }
            }
        }
}

KQ_FN static ALWAYS_INLINE __m512i bcast_word(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Activation rows t..t+TQ-1 against the panel of super-block sb; results
 * of earlier super-blocks wait in y (masked to the panel's rows m). */
KQ_FN static ALWAYS_INLINE void kp_rows(const kpanel *p, const llm_acts *a, int64_t sb, int32_t t,
                                        float *y, int64_t ldy, __mmask16 m, const int TQ, const int six)
{
    const int64_t len = a->len, nb = len / LLM_ACTS_QK;
    __m512 acc[4];
#pragma GCC unroll 4
    for (int q = 0; q < TQ; q++)
        acc[q] = sb == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, y + (t + q) * ldy);
    for (int b = 0; b < 8; b++) {
        int64_t blk = sb * 8 + b;
        __m512i s0[4], s1[4];
#pragma GCC unroll 4
        for (int q = 0; q < TQ; q++) {
            if (six) {
                /* -32 * sum(x) of each half: xbias holds -128 * the sums of
                 * its groups of four (exact multiples of 4). */
                const int32_t *xb = a->xbias + (blk * a->n + t + q) * 8;
                s0[q] = _mm512_set1_epi32((xb[0] + xb[1] + xb[2] + xb[3]) / 4);
                s1[q] = _mm512_set1_epi32((xb[4] + xb[5] + xb[6] + xb[7]) / 4);
            } else {
                s0[q] = s1[q] = _mm512_setzero_si512();
            }
        }
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m512i wv = p->wq[b][g];
#pragma GCC unroll 4
            for (int q = 0; q < TQ; q++) {
                __m512i xv = bcast_word(a->q + (t + q) * len + blk * LLM_ACTS_QK + 4 * g);
                if (six && g >= 4)
                    s1[q] = _mm512_dpbusd_epi32(s1[q], wv, xv);
                else
                    s0[q] = _mm512_dpbusd_epi32(s0[q], wv, xv);
            }
        }
#pragma GCC unroll 4
        for (int q = 0; q < TQ; q++) {
            float dx = a->d[(t + q) * nb + blk];
            if (six) {
                __m512i is = _mm512_add_epi32(_mm512_mullo_epi32(p->sc[2 * b], s0[q]),
                                              _mm512_mullo_epi32(p->sc[2 * b + 1], s1[q]));
                acc[q] = _mm512_fmadd_ps(_mm512_mul_ps(p->s0[0], _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(is), acc[q]);
            } else {
                /* xsum is -128 * sum(x): exact in f32, as is 1/128 */
                float dxs = dx * ((float)a->xsum[(t + q) * nb + blk] * (-1.0f / 128.0f));
                acc[q] = _mm512_fmadd_ps(_mm512_mul_ps(p->s0[b], _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(s0[q]), acc[q]);
                acc[q] = _mm512_fnmadd_ps(p->s1[b], _mm512_set1_ps(dxs), acc[q]);
            }
        }
    }
#pragma GCC unroll 4
    for (int q = 0; q < TQ; q++)
        _mm512_mask_storeu_ps(y + (t + q) * ldy, m, acc[q]);
}

/* type: 4, 5 or 6 (Q4_K, Q5_K, Q6_K). */
KQ_FN static ALWAYS_INLINE void kp_panel(const unsigned char *w, size_t row_bytes, int rows,
                                         const llm_acts *a, float *y, int64_t ldy, const int type)
{
    kpanel p;
    const size_t bytes = type == 4 ? LLM_Q4_K_BYTES : type == 5 ? LLM_Q5_K_BYTES : LLM_Q6_K_BYTES;
    const __mmask16 m = (__mmask16)(rows >= KP_ROWS ? 0xffffu : (1u << rows) - 1u);
    const __m512i row_off = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32((int)row_bytes));
    for (int64_t sb = 0; sb < a->len / LLM_QK_K; sb++) {
        const unsigned char *blk = w + (size_t)sb * bytes;
        if (type == 6)
            kp_pack_q6(blk, row_off, m, &p);
        else
            kp_pack_k45(blk, row_off, m, &p, type == 5);
        int32_t t = 0;
        for (; t + 4 <= a->n; t += 4)
            kp_rows(&p, a, sb, t, y, ldy, m, 4, type == 6);
        for (; t < a->n; t++)
            kp_rows(&p, a, sb, t, y, ldy, m, 1, type == 6);
    }
}

KQ_FN static ALWAYS_INLINE void kp_batched(const void *w, size_t row_bytes, int64_t rows,
                                           const llm_acts *a, float *y, int64_t ldy, const int type)
{
    const unsigned char *p = w;
    for (int64_t r = 0; r < rows; r += KP_ROWS) {
        int n = rows - r < KP_ROWS ? (int)(rows - r) : KP_ROWS;
        kp_panel(p + (size_t)r * row_bytes, row_bytes, n, a, y + r, ldy, type);
    }
}

KQ_FN static void batched_q4_k(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                               float *y, int64_t ldy)
{
    kp_batched(w, row_bytes, rows, a, y, ldy, 4);
}

KQ_FN static void batched_q5_k(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                               float *y, int64_t ldy)
{
    kp_batched(w, row_bytes, rows, a, y, ldy, 5);
}

KQ_FN static void batched_q6_k(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                               float *y, int64_t ldy)
{
    kp_batched(w, row_bytes, rows, a, y, ldy, 6);
}

/* Replaces the matvec of an entry the set already has (the AVX2 set's k-quant
 * entries), keeping its dequant and its batched product. */
static void replace_matvec(llm_kernels *k, uint32_t type, llm_matvec_fn matvec,
                           llm_matvec_fn batched)
{
    const llm_type_kernels *old = llm_kernels_find(k, type);
    if (!old)
        return;
    llm_type_kernels e = *old;
    e.matvec = matvec;
    e.batched = batched;
    (void)llm_kernels_set(k, &e); /* replaces: the table does not grow */
}

void llm_kernels_add_k_avx512(llm_kernels *k)
{
    replace_matvec(k, LLM_TYPE_Q4_K, matvec_q4_k, batched_q4_k);
    replace_matvec(k, LLM_TYPE_Q5_K, matvec_q5_k, batched_q5_k);
    replace_matvec(k, LLM_TYPE_Q6_K, matvec_q6_k, batched_q6_k);
    llm_kernels_add_k23_avx512(k);
}

#else

void llm_kernels_add_k_avx512(llm_kernels *k)
{
    (void)k;
}

#endif
