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
#include <math.h>
#include <string.h>

#include "quant.h"

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
    int64_t nb = n / LLM_QK8_0, b = 0;
    for (; b + 2 <= nb; b += 2, blk += 2 * sizeof(llm_block_q8_0)) {
        const unsigned char *b1 = blk + sizeof(llm_block_q8_0);
        PREFETCH(blk);
        PREFETCH(blk + 64);
        __m256i w0 = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
        __m256i w1 = _mm256_loadu_si256((const __m256i *)(const void *)(b1 + 2));
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(x->q + b * LLM_ACTS_QK));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(x->q + (b + 1) * LLM_ACTS_QK));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16_at(blk) * x->d[b]), block_dot_s8(w0, x0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(fp16_at(b1) * x->d[b + 1]), block_dot_s8(w1, x1), acc1);
    }
    for (; b < nb; b++, blk += sizeof(llm_block_q8_0)) {
        __m256i w0 = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(x->q + b * LLM_ACTS_QK));
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
    int64_t nb = n / LLM_QK4_0, b = 0;
    for (; b + 2 <= nb; b += 2, blk += 2 * sizeof(llm_block_q4_0)) {
        const unsigned char *b1 = blk + sizeof(llm_block_q4_0);
        PREFETCH(blk);
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(x->q + b * LLM_ACTS_QK));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(x->q + (b + 1) * LLM_ACTS_QK));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16_at(blk) * x->d[b]), block_dot_s8(unpack_q4(blk + 2), x0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(fp16_at(b1) * x->d[b + 1]), block_dot_s8(unpack_q4(b1 + 2), x1), acc1);
    }
    for (; b < nb; b++, blk += sizeof(llm_block_q4_0)) {
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(x->q + b * LLM_ACTS_QK));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16_at(blk) * x->d[b]), block_dot_s8(unpack_q4(blk + 2), x0), acc0);
    }
    return hsum8(_mm256_add_ps(acc0, acc1));
}

/* ---- register-blocked matrix–vector products ----------------------------
 *
 * A tile is R weight rows times T activation rows. Each weight block is
 * loaded and decoded once per tile and applied to every activation row;
 * each (weight row, activation row) keeps the single-row kernel's own
 * accumulators and updates them in the same order with the same float
 * operations, so every result is bit for bit the single-row kernel's
 * (kernels.h). R > 1 serves narrow T: independent accumulator chains hide
 * the FMA latency that bounds a single dot product. R and T are constants
 * at every call site, so the loops over them unroll and the accumulator
 * arrays live in registers. */
#define TILE_R_MAX 4
#define TILE_T_MAX 8

#define ALWAYS_INLINE __attribute__((always_inline)) inline

/* v = *p in every lane, by a load port (vbroadcastss m32). Through asm so
 * the compiler neither shuffles the value out of the product vector it was
 * stored from (two shuffle-port operations per activation row, the port
 * the integer products also need) nor hoists the T addresses into
 * registers (they are stack offsets). */
AVX2_FN static ALWAYS_INLINE __m256 broadcast_mem(const float *p)
{
    __m256 v;
    __asm__("vbroadcastss %1, %0" : "=x"(v) : "m"(*p));
    return v;
}

/* One Q8_0 block b of a tile into the accumulators acc (dot_q8_0's acc0 for
 * even b, acc1 for odd b): acc += (d_w * d_x) * (exact integer dot). */
AVX2_FN static ALWAYS_INLINE void q8_step(const unsigned char *w, size_t row_bytes,
                                          const llm_acts *a, int32_t t0, int64_t b,
                                          __m256 acc[TILE_R_MAX][TILE_T_MAX], const int R,
                                          const int T)
{
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t *xb = a->qb + (b * a->n + t0) * LLM_ACTS_QK;
    const float *db = a->dt + b * a->n + t0;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const unsigned char *blk = w + (size_t)r * row_bytes + (size_t)b * sizeof(llm_block_q8_0);
        if ((b & 1) == 0) {
            PREFETCH(blk);
            PREFETCH(blk + 64);
        }
        __m256i wv = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
        __m256i aw = _mm256_sign_epi8(wv, wv);
        float dw = fp16_at(blk);
        float sc[TILE_T_MAX];
        if (T == 1)
            sc[0] = dw * db[0];
        else
            _mm256_storeu_ps(sc, _mm256_mul_ps(_mm256_set1_ps(dw), _mm256_loadu_ps(db)));
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(xb + t * LLM_ACTS_QK));
            __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv));
            __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
            acc[r][t] = _mm256_fmadd_ps(broadcast_mem(&sc[t]), f, acc[r][t]);
        }
    }
}

/* NAME: R weight rows from w times activation rows t0..t0+T-1 into y,
 * Q8_0 blocks through STEP (one block into the accumulators; even blocks
 * into acc0, odd into acc1, as dot_q8_0 pairs them). ATTR: the target of
 * the instruction set STEP uses. */
#define DEFINE_Q8_TILE(ATTR, NAME, STEP)                                                \
    ATTR static ALWAYS_INLINE void NAME(const unsigned char *w, size_t row_bytes,       \
                                        const llm_acts *a, int32_t t0, float *y,        \
                                        int64_t ldy, const int R, const int T)          \
    {                                                                                   \
        __m256 acc0[TILE_R_MAX][TILE_T_MAX], acc1[TILE_R_MAX][TILE_T_MAX];              \
        int64_t nb = a->len / LLM_QK8_0, b = 0;                                         \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                             \
            _Pragma("GCC unroll 8") for (int t = 0; t < T; t++)                         \
                acc0[r][t] = acc1[r][t] = _mm256_setzero_ps();                          \
        for (; b + 2 <= nb; b += 2) {                                                   \
            STEP(w, row_bytes, a, t0, b, acc0, R, T);                                   \
            STEP(w, row_bytes, a, t0, b + 1, acc1, R, T);                               \
        }                                                                               \
        if (b < nb)                                                                     \
            STEP(w, row_bytes, a, t0, b, acc0, R, T);                                   \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                             \
            _Pragma("GCC unroll 8") for (int t = 0; t < T; t++)                         \
                y[(t0 + t) * ldy + r] = hsum8(_mm256_add_ps(acc0[r][t], acc1[r][t]));   \
    }

DEFINE_Q8_TILE(AVX2_FN, q8_tile, q8_step)

typedef void (*tile_fn)(const unsigned char *w, size_t row_bytes, int64_t rows,
                        const llm_acts *a, int32_t t0, float *y, int64_t ldy);

/* F16/BF16: the two accumulators of DEFINE_DOT_HALF per (weight row,
 * activation row), 16 elements a step, then its scalar tail. The activation
 * rows' loads are shared by the R weight rows, the widened weights by the
 * T activation rows. */
#define DEFINE_HALF_TILE(NAME, LOAD8, TO_F32)                                           \
    AVX2_FN static ALWAYS_INLINE void NAME(const unsigned char *w, size_t row_bytes,    \
                                           const llm_acts *a, int32_t t0, float *y,     \
                                           int64_t ldy, const int R, const int T)       \
    {                                                                                   \
        __m256 s0[TILE_R_MAX][TILE_T_MAX], s1[TILE_R_MAX][TILE_T_MAX];                  \
        int64_t n = a->len, i = 0;                                                      \
        const float *x = a->x + (int64_t)t0 * n;                                        \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                             \
            _Pragma("GCC unroll 8") for (int t = 0; t < T; t++)                         \
                s0[r][t] = s1[r][t] = _mm256_setzero_ps();                              \
        for (; i + 16 <= n; i += 16) {                                                  \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                       \
                const unsigned char *p = w + (size_t)r * row_bytes + 2 * i;             \
                if ((i & 31) == 0)                                                      \
                    PREFETCH(p);                                                        \
                __m256 w0 = LOAD8(p), w1 = LOAD8(p + 16);                               \
                _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {                   \
                    s0[r][t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * n + i), s0[r][t]); \
                    s1[r][t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + t * n + i + 8), s1[r][t]); \
                }                                                                       \
            }                                                                           \
        }                                                                               \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                             \
            _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {                       \
                const unsigned char *p = w + (size_t)r * row_bytes;                     \
                float s = hsum8(_mm256_add_ps(s0[r][t], s1[r][t]));                     \
                for (int64_t j = i; j < n; j++) {                                       \
                    uint16_t h;                                                         \
                    memcpy(&h, p + 2 * j, 2);                                           \
                    s += TO_F32(h) * x[t * n + j];                                      \
                }                                                                       \
                y[(t0 + t) * ldy + r] = s;                                              \
            }                                                                           \
    }

DEFINE_HALF_TILE(f16_tile, load_f16x8, llm_fp16_to_f32)
DEFINE_HALF_TILE(bf16_tile, load_bf16x8, llm_bf16_to_f32)

/* One instantiation of a tile per (R, T) over all rows of a chunk: tiles
 * of R rows, then the rows left over one at a time. */
#define TILE_OVER_ROWS(ATTR, TILE, R, T)                                                \
    ATTR static void TILE##_##R##x##T(const unsigned char *w, size_t row_bytes,         \
                                      int64_t rows, const llm_acts *a, int32_t t0,      \
                                      float *y, int64_t ldy)                            \
    {                                                                                   \
        int64_t r = 0;                                                                  \
        for (; r + (R) <= rows; r += (R))                                               \
            TILE(w + (size_t)r * row_bytes, row_bytes, a, t0, y + r, ldy, R, T);        \
        for (; r < rows; r++)                                                           \
            TILE(w + (size_t)r * row_bytes, row_bytes, a, t0, y + r, ldy, 1, T);        \
    }

TILE_OVER_ROWS(AVX2_FN, f16_tile, 4, 1)
TILE_OVER_ROWS(AVX2_FN, f16_tile, 2, 2)
TILE_OVER_ROWS(AVX2_FN, f16_tile, 1, 3)
TILE_OVER_ROWS(AVX2_FN, f16_tile, 1, 4)
TILE_OVER_ROWS(AVX2_FN, bf16_tile, 4, 1)
TILE_OVER_ROWS(AVX2_FN, bf16_tile, 2, 2)
TILE_OVER_ROWS(AVX2_FN, bf16_tile, 1, 3)
TILE_OVER_ROWS(AVX2_FN, bf16_tile, 1, 4)

/* Activation rows in groups of up to max_t, each group through
 * by_t[group size] over every row. */
static void tiles_by_groups(const tile_fn *by_t, int32_t max_t, const void *w,
                            size_t row_bytes, int64_t rows, const llm_acts *a, float *y,
                            int64_t ldy)
{
    for (int32_t t0 = 0; t0 < a->n;) {
        int32_t t = a->n - t0 > max_t ? max_t : a->n - t0;
        by_t[t](w, row_bytes, rows, a, t0, y, ldy);
        t0 += t;
    }
}

TILE_OVER_ROWS(AVX2_FN, q8_tile, 2, 1)
TILE_OVER_ROWS(AVX2_FN, q8_tile, 2, 2)
TILE_OVER_ROWS(AVX2_FN, q8_tile, 1, 3)
TILE_OVER_ROWS(AVX2_FN, q8_tile, 1, 4)

/* Groups of at most 4 activation rows (16 YMM registers: 8 accumulators,
 * the weight block in two forms, a product, the constant ones). */
static void matvec_q8_0(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                        float *y, int64_t ldy)
{
    static const tile_fn by_t[5] = {NULL, q8_tile_2x1, q8_tile_2x2, q8_tile_1x3, q8_tile_1x4};
    tiles_by_groups(by_t, 4, w, row_bytes, rows, a, y, ldy);
}

/* Groups of at most 4 activation rows: 8 accumulators and the two widened
 * weight vectors stay within the 16 YMM registers. */
static void matvec_f16(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                       float *y, int64_t ldy)
{
    static const tile_fn by_t[5] = {NULL, f16_tile_4x1, f16_tile_2x2, f16_tile_1x3, f16_tile_1x4};
    tiles_by_groups(by_t, 4, w, row_bytes, rows, a, y, ldy);
}

static void matvec_bf16(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                        float *y, int64_t ldy)
{
    static const tile_fn by_t[5] = {NULL, bf16_tile_4x1, bf16_tile_2x2, bf16_tile_1x3, bf16_tile_1x4};
    tiles_by_groups(by_t, 4, w, row_bytes, rows, a, y, ldy);
}

/* ---- AVX-512 VNNI on 256-bit vectors -------------------------------------
 *
 * vpdpbusd adds four products of unsigned and signed bytes straight into a
 * 32-bit lane: the same four-product groups as maddubs + madd, so with
 * exact integers the lanes equal the AVX2 kernel's, and the float
 * operations that follow are the same. The weights take the unsigned side
 * as w + 128 (one xor per weight block, shared by every activation row);
 * the lane then holds sum w x + 128 sum x, and starting it at
 * -128 sum x (llm_acts.xbias, computed once per product) leaves sum w x:
 * one instruction per activation row and block where AVX2 needs four.
 * EVEX encoding also gives 32 registers, so a tile holds 8 activation
 * rows. */
#define VNNI_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

VNNI_FN static ALWAYS_INLINE void q8v_step(const unsigned char *w, size_t row_bytes,
                                           const llm_acts *a, int32_t t0, int64_t b,
                                           __m256 acc[TILE_R_MAX][TILE_T_MAX], const int R,
                                           const int T)
{
    const float *db = a->dt + b * a->n + t0;
    const int8_t *xb = a->qb + (b * a->n + t0) * LLM_ACTS_QK;
    const int32_t *xbias = a->xbias + (b * a->n + t0) * 8;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const unsigned char *blk = w + (size_t)r * row_bytes + (size_t)b * sizeof(llm_block_q8_0);
        if ((b & 1) == 0) {
            PREFETCH(blk);
            PREFETCH(blk + 64);
        }
        __m256i wu = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)(blk + 2)),
                                      _mm256_set1_epi8((char)0x80));
        float dw = fp16_at(blk);
        /* Lane t: this block's scale product for activation row t0 + t
         * (each row's moved to all lanes by a shuffle, its own port). */
        __m256 sv = T == 1 ? _mm256_set1_ps(dw * db[0])
                           : _mm256_mul_ps(_mm256_set1_ps(dw), _mm256_loadu_ps(db));
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            __m256i p = _mm256_loadu_si256((const __m256i *)(const void *)(xbias + t * 8));
            p = _mm256_dpbusd_epi32(p, wu, _mm256_loadu_si256((const __m256i *)(const void *)(xb + t * LLM_ACTS_QK)));
            __m256 sc = T == 1 ? sv : _mm256_permutexvar_ps(_mm256_set1_epi32(t), sv);
            acc[r][t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(p), acc[r][t]);
        }
    }
}

DEFINE_Q8_TILE(VNNI_FN, q8v_tile, q8v_step)

TILE_OVER_ROWS(VNNI_FN, q8v_tile, 4, 1)
TILE_OVER_ROWS(VNNI_FN, q8v_tile, 4, 2)
TILE_OVER_ROWS(VNNI_FN, q8v_tile, 2, 3)
TILE_OVER_ROWS(VNNI_FN, q8v_tile, 2, 4)
TILE_OVER_ROWS(VNNI_FN, q8v_tile, 1, 5)
TILE_OVER_ROWS(VNNI_FN, q8v_tile, 1, 6)
TILE_OVER_ROWS(VNNI_FN, q8v_tile, 1, 7)
TILE_OVER_ROWS(VNNI_FN, q8v_tile, 1, 8)

static void matvec_q8_0_vnni(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                             float *y, int64_t ldy)
{
    static const tile_fn by_t[9] = {NULL, q8v_tile_4x1, q8v_tile_4x2, q8v_tile_2x3, q8v_tile_2x4,
                                    q8v_tile_1x5, q8v_tile_1x6, q8v_tile_1x7, q8v_tile_1x8};
    tiles_by_groups(by_t, 8, w, row_bytes, rows, a, y, ldy);
}

AVX2_FN static void quantize_row(const float *x, int64_t n, float *d, int8_t *q)
{
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n / LLM_ACTS_QK; b++) {
        const float *xb = x + b * LLM_ACTS_QK;
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
        _mm256_storeu_si256((__m256i *)(void *)(q + b * LLM_ACTS_QK), p);
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

/* ---- attention ---------------------------------------------------------- */

/* Two keys' scores at once, each exactly as dot_f32 forms it for a length
 * that is a multiple of 32 (four accumulators over 32-float steps, summed
 * (s0+s1)+(s2+s3)), then times scale. */
AVX2_FN static ALWAYS_INLINE void scores2(const float *q, const float *k0, const float *k1,
                                          int32_t hd, float scale, float *out)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (int32_t i = 0; i < hd; i += 32) {
        __m256 q0 = _mm256_loadu_ps(q + i), q1 = _mm256_loadu_ps(q + i + 8);
        __m256 q2 = _mm256_loadu_ps(q + i + 16), q3 = _mm256_loadu_ps(q + i + 24);
        a0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k0 + i), a0);
        a1 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(k0 + i + 8), a1);
        a2 = _mm256_fmadd_ps(q2, _mm256_loadu_ps(k0 + i + 16), a2);
        a3 = _mm256_fmadd_ps(q3, _mm256_loadu_ps(k0 + i + 24), a3);
        b0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k1 + i), b0);
        b1 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(k1 + i + 8), b1);
        b2 = _mm256_fmadd_ps(q2, _mm256_loadu_ps(k1 + i + 16), b2);
        b3 = _mm256_fmadd_ps(q3, _mm256_loadu_ps(k1 + i + 24), b3);
    }
    out[0] = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))) * scale;
    out[1] = hsum8(_mm256_add_ps(_mm256_add_ps(b0, b1), _mm256_add_ps(b2, b3))) * scale;
}

/* out[0..64) += w_p v_p for every p, each lane in p order as axpy would,
 * the 64 lanes held in registers across all p. */
AVX2_FN static ALWAYS_INLINE void weighted_sum64(const float *sc, const float *v, int64_t stride,
                                                 uint32_t len, float sum, float *out)
{
    __m256 o0 = _mm256_loadu_ps(out), o1 = _mm256_loadu_ps(out + 8);
    __m256 o2 = _mm256_loadu_ps(out + 16), o3 = _mm256_loadu_ps(out + 24);
    __m256 o4 = _mm256_loadu_ps(out + 32), o5 = _mm256_loadu_ps(out + 40);
    __m256 o6 = _mm256_loadu_ps(out + 48), o7 = _mm256_loadu_ps(out + 56);
    for (uint32_t p = 0; p < len; p++) {
        const float *vp = v + p * stride;
        __m256 w = _mm256_set1_ps(sc[p] / sum);
        o0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp), o0);
        o1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp + 8), o1);
        o2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp + 16), o2);
        o3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp + 24), o3);
        o4 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp + 32), o4);
        o5 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp + 40), o5);
        o6 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp + 48), o6);
        o7 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp + 56), o7);
    }
    _mm256_storeu_ps(out, o0);
    _mm256_storeu_ps(out + 8, o1);
    _mm256_storeu_ps(out + 16, o2);
    _mm256_storeu_ps(out + 24, o3);
    _mm256_storeu_ps(out + 32, o4);
    _mm256_storeu_ps(out + 40, o5);
    _mm256_storeu_ps(out + 48, o6);
    _mm256_storeu_ps(out + 56, o7);
}

/* The scalar set's attend over this set's dot and axpy: heads whose width
 * is not a multiple of 32 (64-wide heads take the fast path). */
AVX2_FN static void attend_generic(const float *q, const float *k, const float *v, int64_t stride,
                                   uint32_t len, int32_t hd, float scale, float *sc, float *out,
                                   float (*softmax_exp)(float *, uint32_t, float))
{
    float mx = -INFINITY;
    for (uint32_t p = 0; p < len; p++) {
        sc[p] = dot_f32(q, k + p * stride, hd) * scale;
        mx = fmaxf(mx, sc[p]);
    }
    float sum = softmax_exp(sc, len, mx);
    memset(out, 0, (size_t)hd * sizeof(float));
    for (uint32_t p = 0; p < len; p++)
        axpy(out, sc[p] / sum, v + p * stride, hd);
}

/* Scores two keys at a time and the weighted sum with the output in
 * registers, 64 lanes a pass: no call per key, and the loads of q shared
 * by two keys. Every float operation is attend_generic's, in its order
 * (the softmax loop is the same code). */
AVX2_FN void llm_attend_avx2(const float *q, const float *k, const float *v, int64_t stride,
                             uint32_t len, int32_t hd, float scale, float *sc, float *out,
                             float (*softmax_exp)(float *, uint32_t, float))
{
    if (hd % 64 != 0) {
        attend_generic(q, k, v, stride, len, hd, scale, sc, out, softmax_exp);
        return;
    }
    uint32_t p = 0;
    for (; p + 2 <= len; p += 2)
        scores2(q, k + p * stride, k + (p + 1) * stride, hd, scale, sc + p);
    if (p < len)
        sc[p] = dot_f32(q, k + p * stride, hd) * scale;
    float mx = -INFINITY;
    for (p = 0; p < len; p++)
        mx = fmaxf(mx, sc[p]);
    float sum = softmax_exp(sc, len, mx);
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int32_t i = 0; i < hd; i += 64)
        weighted_sum64(sc, v + i, stride, len, sum, out + i);
}

AVX2_FN static void attend(const float *q, const float *k, const float *v, int64_t stride,
                           uint32_t len, int32_t hd, float scale, float *sc, float *out)
{
    llm_attend_avx2(q, k, v, stride, len, hd, scale, sc, out, llm_softmax_exp_scalar);
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

/* Rows to f32 per type, bit for bit the reference conversions (quant.h):
 * the quantized ones widen a block at a time (one product d * q per
 * element, as the reference), the 16-bit floats eight at a time. */
AVX2_FN static void dequant_q8_0(const void *src, float *dst, size_t n)
{
    const unsigned char *p = src;
    for (size_t b = 0; b < n / LLM_QK8_0; b++, p += sizeof(llm_block_q8_0))
        widen_s8(_mm256_loadu_si256((const __m256i *)(const void *)(p + 2)), fp16_at(p), dst + b * LLM_QK8_0);
}

AVX2_FN static void dequant_q4_0(const void *src, float *dst, size_t n)
{
    const unsigned char *p = src;
    for (size_t b = 0; b < n / LLM_QK4_0; b++, p += sizeof(llm_block_q4_0))
        widen_s8(unpack_q4(p + 2), fp16_at(p), dst + b * LLM_QK4_0);
}

AVX2_FN static void dequant_f16(const void *src, float *dst, size_t n)
{
    const unsigned char *p = src;
    if (n % 8 != 0) {
        llm_dequantize_row(LLM_TYPE_F16, src, dst, n);
        return;
    }
    for (size_t i = 0; i < n; i += 8)
        _mm256_storeu_ps(dst + i, load_f16x8(p + 2 * i));
}

AVX2_FN static void dequant_bf16(const void *src, float *dst, size_t n)
{
    const unsigned char *p = src;
    if (n % 8 != 0) {
        llm_dequantize_row(LLM_TYPE_BF16, src, dst, n);
        return;
    }
    for (size_t i = 0; i < n; i += 8)
        _mm256_storeu_ps(dst + i, load_bf16x8(p + 2 * i));
}

LLM_MATVEC_BY_ROWS_FLOAT(AVX2_FN, matvec_f32, dot_f32)
LLM_MATVEC_BY_ROWS_QUANT(AVX2_FN, matvec_q4_0, dot_q4_0)

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
    k->attend = attend;
    /* The built-in types' entries (replacing the scalar set's): F32 rows
     * are read in place by the batched product, so the reference copy
     * serves them. */
    const llm_type_kernels e[] = {
        {LLM_TYPE_F32, matvec_f32, llm_type_find(NULL, LLM_TYPE_F32)->to_f32, 0, 1, NULL, NULL},
        {LLM_TYPE_F16, matvec_f16, dequant_f16, 0, 0, NULL, NULL},
        {LLM_TYPE_BF16, matvec_bf16, dequant_bf16, 0, 0, NULL, NULL},
        {LLM_TYPE_Q8_0, matvec_q8_0, dequant_q8_0, 1, 0, NULL, NULL},
        {LLM_TYPE_Q4_0, matvec_q4_0, dequant_q4_0, 1, 0, NULL, NULL},
    };
    k->n_types = 0;
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++)
        (void)llm_kernels_set(k, &e[i]); /* 5 <= LLM_KERNEL_TYPES_MAX */
    llm_kernels_add_k_avx2(k);
    llm_kernels_add_legacy_avx2(k);
    return 0;
}

int llm_kernels_vnni(llm_kernels *k)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512vnni"))
        return -1;
    const llm_type_kernels *q8 = llm_kernels_find(k, LLM_TYPE_Q8_0);
    if (!q8)
        return -1;
    llm_type_kernels e = *q8;
    e.matvec = matvec_q8_0_vnni;
    (void)llm_kernels_set(k, &e); /* replaces: the table does not grow */
    k->name = "avx2+vnni";
    return 0;
}

#else

int llm_kernels_avx2(llm_kernels *k)
{
    (void)k;
    return -1;
}

int llm_kernels_vnni(llm_kernels *k)
{
    (void)k;
    return -1;
}

#endif
