/* kernels_avx512.c — AVX-512 kernels on 512-bit vectors (see kernels.h).
 *
 * Three kinds of kernel live here, all with the prefetch described at
 * PREFETCH_TILE (the main gain when weights stream from memory), which the
 * F16 and BF16 tiles run further ahead for short rows (stream_ahead).
 *
 * The matrix–vector products of F32, F16 and BF16 are the AVX2 set's,
 * widened: where the AVX2 kernel keeps a pair of 256-bit accumulators
 * (F16/BF16: elements i..i+7 and i+8..i+15 of each step of 16; F32: s0/s1
 * and s2/s3 of each step of 32), one 512-bit accumulator holds both halves
 * side by side, so every lane sees the very same multiplies and adds in the
 * same order, and the pair is added (low + high) before the same 8-lane
 * horizontal sum. Results are therefore bit for bit the AVX2+VNNI set's,
 * and the locked logits of that set hold for this one (tests:
 * engine_matvec_avx512, engine_lock_*). The gain is half the instructions
 * per weight and 32 registers, so a tile takes up to 8 activation rows
 * (AVX2: 4), and F32 gets a register-blocked tile (AVX2: a row at a time).
 *
 * The Q8_0 products are new arithmetic, one kernel for every row count
 * (decode, verify, prefill), from the file's rows or from the backend's
 * panel copy: see the Q8_0 section below.
 *
 * The set's batched float product (gemm_nt, and the F16/BF16 entries'
 * gemm) lives in kernels_gemm_avx512.c, added by llm_kernels_avx512.
 */
#include "kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant.h"

#define AVX512_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define ALWAYS_INLINE __attribute__((always_inline)) inline

/* Software prefetch one tile ahead, into L2. A tile reads R weight rows
 * side by side, and rows are contiguous, so the bytes at the same offset R
 * rows down belong to the next tile: prefetching there runs exactly one
 * tile ahead of every stream, whatever the row width. The AVX2 kernels'
 * fixed 4 KiB into L1 lands mostly inside the current tile when rows are
 * shorter than 4 KiB (2176 bytes for a 2048-wide Q8_0 row). One Zen 4 core
 * streaming a 32768 x 2048 Q8_0 matrix from memory on the busy VM
 * (bench_kernels, alternating in one process): 9-17 GB/s against 3.5-5
 * GB/s with the AVX2 prefetch; 4 KiB into L2 alone gave 0.65-1.2 of the
 * AVX2 time, one tile into L1 0.7-0.9. */
#define PREFETCH_TILE(p, R, row_bytes) \
    _mm_prefetch((const char *)(p) + (size_t)(R) * (row_bytes), _MM_HINT_T1)

#define TILE_R_MAX 8
#define TILE_T_MAX 8

/* How far the F16 and BF16 tiles prefetch their stream: as many whole
 * rows as STREAM_AHEAD bytes take, but at least the next tile and at most
 * TILES_AHEAD tiles. One tile ahead (PREFETCH_TILE, which the F32 tile
 * keeps) suits wide rows: eight 2048-wide F16 rows are 32 KiB, and that
 * distance is kept for them. Short rows were slow: the rule was found on
 * the row-loop Q8_0 tiles the panels replaced, whose decode tile of 4 of
 * the KJV target's 544-byte rows prefetched 2.2 KiB ahead, and a verify's
 * tile, one weight row at a time (R = 1 from 5 activation rows), a single
 * row, issued about one row's compute (50-70 ns) before it is read, no
 * more than the L3's latency, with the target's 21 MB of weights living
 * in the L3; it holds for the F16 block head's 1 KiB rows (2 KiB ahead at
 * 4 rows, 1 KiB at 8). What covers the latency is bytes in flight, so the
 * distance is set in bytes; the cap keeps a verify's slow, compute-bound
 * tiles from running 16 rows ahead, which measured no better than 4 (and
 * up to 5 % slower). Only prefetch addresses change: every result is bit
 * for bit the same. Measured: bench_spec widths --prefetch tile
 * (bench/results/cpu_verify.md). */
#define STREAM_AHEAD 8192
#define TILES_AHEAD 4

static inline size_t stream_ahead(size_t row_bytes, int R)
{
    size_t rows = (STREAM_AHEAD + row_bytes - 1) / row_bytes;
    size_t lo = (size_t)R, hi = (size_t)(TILES_AHEAD * R);
    rows = rows < lo ? lo : rows > hi ? hi : rows;
    return rows * row_bytes;
}

AVX512_FN static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AVX512_FN static inline __m256 lo256(__m512 z)
{
    return _mm512_castps512_ps256(z);
}

AVX512_FN static inline __m256 hi256(__m512 z)
{
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1));
}

/* The AVX2 kernels' final sum of an accumulator pair (acc0 + acc1), the
 * pair being the halves of z. */
AVX512_FN static inline float hsum_pair(__m512 z)
{
    return hsum8(_mm256_add_ps(lo256(z), hi256(z)));
}

AVX512_FN static inline __m256i load256(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

AVX512_FN static inline float fp16_at(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* ---- F32 ------------------------------------------------------------------ */

/* kernels_avx2.c's dot_f32 with s0|s1 in z01 and s2|s3 in z23: this set's
 * single-row F32 kernel (the row loop runs f32_tile, its blocked twin). */
AVX512_FN static float dot_f32(const void *w, const float *x, int64_t n)
{
    const float *a = w;
    __m512 z01 = _mm512_setzero_ps(), z23 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch((const char *)(a + i) + 4096, _MM_HINT_T0);
        _mm_prefetch((const char *)(a + i + 16) + 4096, _MM_HINT_T0);
        z01 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(x + i), z01);
        z23 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(x + i + 16), z23);
    }
    __m256 s0 = lo256(z01), s1 = hi256(z01), s2 = lo256(z23), s3 = hi256(z23);
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), s0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++)
        s += a[i] * x[i];
    return s;
}

/* dot_f32 for R weight rows times T activation rows: the weight loads are
 * shared by the T rows, the activation loads by the R rows, and the
 * stream is prefetched one tile ahead. */
AVX512_FN static ALWAYS_INLINE void f32_tile(const unsigned char *w, size_t row_bytes,
                                             const llm_acts *a, int32_t t0, float *y,
                                             int64_t ldy, const int R, const int T)
{
    __m512 z01[TILE_R_MAX][TILE_T_MAX], z23[TILE_R_MAX][TILE_T_MAX];
    int64_t n = a->len, i = 0;
    const float *x = a->x + (int64_t)t0 * n;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            z01[r][t] = z23[r][t] = _mm512_setzero_ps();
    for (; i + 32 <= n; i += 32) {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const float *p = (const float *)(const void *)(w + (size_t)r * row_bytes) + i;
            PREFETCH_TILE(p, R, row_bytes);
            PREFETCH_TILE(p + 16, R, row_bytes);
            __m512 w0 = _mm512_loadu_ps(p), w1 = _mm512_loadu_ps(p + 16);
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                z01[r][t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + t * n + i), z01[r][t]);
                z23[r][t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + t * n + i + 16), z23[r][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const float *p = (const float *)(const void *)(w + (size_t)r * row_bytes);
            const float *xt = x + t * n;
            __m256 s0 = lo256(z01[r][t]), s1 = hi256(z01[r][t]);
            __m256 s2 = lo256(z23[r][t]), s3 = hi256(z23[r][t]);
            int64_t j = i;
            for (; j + 8 <= n; j += 8)
                s0 = _mm256_fmadd_ps(_mm256_loadu_ps(p + j), _mm256_loadu_ps(xt + j), s0);
            float sum = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
            for (; j < n; j++)
                sum += p[j] * xt[j];
            y[(t0 + t) * ldy + r] = sum;
        }
}

/* ---- F16 and BF16 --------------------------------------------------------- */

AVX512_FN static inline __m512 load_f16x16(const unsigned char *p)
{
    return _mm512_cvtph_ps(load256(p));
}

AVX512_FN static inline __m512 load_bf16x16(const unsigned char *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load256(p)), 16));
}

/* kernels_avx2.c's DEFINE_HALF_TILE with each (s0, s1) pair in one
 * vector: lanes 0..7 take elements i..i+7, lanes 8..15 i+8..i+15. */
#define DEFINE_HALF_TILE(NAME, LOAD16, TO_F32, AHEAD)                                   \
    AVX512_FN static ALWAYS_INLINE void NAME(const unsigned char *w, size_t row_bytes,  \
                                             const llm_acts *a, int32_t t0, float *y,   \
                                             int64_t ldy, const int R, const int T)     \
    {                                                                                   \
        __m512 s[TILE_R_MAX][TILE_T_MAX];                                               \
        int64_t n = a->len, i = 0;                                                      \
        const float *x = a->x + (int64_t)t0 * n;                                        \
        const size_t ahead = AHEAD;                                                     \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                             \
            _Pragma("GCC unroll 8") for (int t = 0; t < T; t++)                         \
                s[r][t] = _mm512_setzero_ps();                                          \
        for (; i + 16 <= n; i += 16) {                                                  \
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                       \
                const unsigned char *p = w + (size_t)r * row_bytes + 2 * i;             \
                if ((i & 31) == 0)                                                      \
                    _mm_prefetch((const char *)p + ahead, _MM_HINT_T1);                 \
                __m512 wv = LOAD16(p);                                                  \
                _Pragma("GCC unroll 8") for (int t = 0; t < T; t++)                     \
                    s[r][t] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + t * n + i), s[r][t]); \
            }                                                                           \
        }                                                                               \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                             \
            _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {                       \
                const unsigned char *p = w + (size_t)r * row_bytes;                     \
                float sum = hsum_pair(s[r][t]);                                         \
                for (int64_t j = i; j < n; j++) {                                       \
                    uint16_t h;                                                         \
                    memcpy(&h, p + 2 * j, 2);                                           \
                    sum += TO_F32(h) * x[t * n + j];                                    \
                }                                                                       \
                y[(t0 + t) * ldy + r] = sum;                                            \
            }                                                                           \
    }

DEFINE_HALF_TILE(f16_tile, load_f16x16, llm_fp16_to_f32, stream_ahead(row_bytes, R))
DEFINE_HALF_TILE(bf16_tile, load_bf16x16, llm_bf16_to_f32, stream_ahead(row_bytes, R))
/* One tile ahead, as before stream_ahead (PHASEMARK_ENGINE_PREFETCH=tile). */
DEFINE_HALF_TILE(f16n_tile, load_f16x16, llm_fp16_to_f32, (size_t)R * row_bytes)
DEFINE_HALF_TILE(bf16n_tile, load_bf16x16, llm_bf16_to_f32, (size_t)R * row_bytes)

typedef void (*tile_fn)(const unsigned char *w, size_t row_bytes, int64_t rows,
                        const llm_acts *a, int32_t t0, float *y, int64_t ldy);

#define TILE_OVER_ROWS(TILE, R, T)                                                      \
    AVX512_FN static void TILE##_##R##x##T(const unsigned char *w, size_t row_bytes,    \
                                           int64_t rows, const llm_acts *a, int32_t t0, \
                                           float *y, int64_t ldy)                       \
    {                                                                                   \
        int64_t r = 0;                                                                  \
        for (; r + (R) <= rows; r += (R))                                               \
            TILE(w + (size_t)r * row_bytes, row_bytes, a, t0, y + r, ldy, R, T);        \
        for (; r < rows; r++)                                                           \
            TILE(w + (size_t)r * row_bytes, row_bytes, a, t0, y + r, ldy, 1, T);        \
    }

/* Tile shapes per activation-row count: R x T accumulators (at most 8)
 * leave registers for the weights and activations; R > 1 gives narrow
 * batches independent chains. R1 is the rows of the one-activation tile
 * (decode), which only streams weights: the F16/BF16 tiles take 8 rows
 * there, F32 4. Why 8 helps the 16-bit types is not settled; the
 * likely reason: a 2048-wide F16 row is one 4 KiB page, so a tile of R
 * rows streams R pages side by side, and with 8 the core keeps more of
 * them (and their page walks) in flight, the prefetch running 8 rows,
 * 32 KiB, ahead. Measured on this VM's Zen 4 core, one
 * thread streaming a 1B model's F16 matrices (2.2 GB, CPU time per pass,
 * best of 4-6 alternating passes, host busy): 8 rows 1.08-1.31x the
 * 4-row tile, 6, 12 and 16 rows no better, 8 rows without the prefetch
 * 0.84-1.0x. Each row's chain of operations is unchanged, so results
 * stay bit for bit the same. */
#define TILES_BY_T(TILE, R1)                                                            \
    TILE_OVER_ROWS(TILE, R1, 1)                                                         \
    TILE_OVER_ROWS(TILE, 4, 2)                                                          \
    TILE_OVER_ROWS(TILE, 2, 3)                                                          \
    TILE_OVER_ROWS(TILE, 2, 4)                                                          \
    TILE_OVER_ROWS(TILE, 1, 5)                                                          \
    TILE_OVER_ROWS(TILE, 1, 6)                                                          \
    TILE_OVER_ROWS(TILE, 1, 7)                                                          \
    TILE_OVER_ROWS(TILE, 1, 8)                                                          \
    static const tile_fn TILE##_by_t[9] = {NULL,         TILE##_##R1##x1, TILE##_4x2,   \
                                           TILE##_2x3,   TILE##_2x4, TILE##_1x5,        \
                                           TILE##_1x6,   TILE##_1x7, TILE##_1x8};

TILES_BY_T(f16_tile, 8)
TILES_BY_T(bf16_tile, 8)
TILES_BY_T(f16n_tile, 8)
TILES_BY_T(bf16n_tile, 8)
TILES_BY_T(f32_tile, 4)

/* Activation rows in groups of up to 8, each group over every row. */
static void tiles_by_groups(const tile_fn *by_t, const void *w, size_t row_bytes, int64_t rows,
                            const llm_acts *a, float *y, int64_t ldy)
{
    for (int32_t t0 = 0; t0 < a->n;) {
        int32_t t = a->n - t0 > TILE_T_MAX ? TILE_T_MAX : a->n - t0;
        by_t[t](w, row_bytes, rows, a, t0, y, ldy);
        t0 += t;
    }
}

static void matvec_f32(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                       float *y, int64_t ldy)
{
    tiles_by_groups(f32_tile_by_t, w, row_bytes, rows, a, y, ldy);
}

static void matvec_f16(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                       float *y, int64_t ldy)
{
    tiles_by_groups(f16_tile_by_t, w, row_bytes, rows, a, y, ldy);
}

static void matvec_bf16(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                        float *y, int64_t ldy)
{
    tiles_by_groups(bf16_tile_by_t, w, row_bytes, rows, a, y, ldy);
}

static void matvec_f16_near(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                            float *y, int64_t ldy)
{
    tiles_by_groups(f16n_tile_by_t, w, row_bytes, rows, a, y, ldy);
}

static void matvec_bf16_near(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                             float *y, int64_t ldy)
{
    tiles_by_groups(bf16n_tile_by_t, w, row_bytes, rows, a, y, ldy);
}

/* ---- Q8_0 ---------------------------------------------------------------------
 *
 * One product for every row count. The AVX2+VNNI row loop gives each
 * (weight row, activation row) pair its own vector of partial sums, which
 * must be reduced across lanes at the end and re-scaled per block with a
 * broadcast; with several activation rows that bookkeeping dominates, and
 * a verify's rows cost a decode's compute each. Here a 32-bit lane is one
 * weight row instead: 16 rows side by side, a vector holding four bytes of
 * each (the panel layout, kernels.h), and one vpdpbusd against four
 * broadcast activation bytes does 64 multiply-adds with nothing to reduce.
 * Per block and activation row that is 8 vpdpbusd, one convert, one scale
 * product and one FMA for 16 weight rows. The integer block sums are
 * exact, and each result is one fixed chain over the blocks,
 * acc = fma(d_w * d_x, (float)sum, acc), whatever the batch: a verify's
 * rows are bit for bit decode steps and a prefill's, on the same kernel.
 *
 * The CPU backend keeps its Q8_0 matrices in the panel layout
 * (cpu_weights.h), where matmul_q8_0_panels reads them as one stream. Rows
 * in the file's layout (no copy) are transposed into the same layout on
 * the stack, 8 blocks of 16 rows at a time, as they are read
 * (matvec_q8_0): the same results, at about twice a decode's time. */

/* Weight rows per panel (one per 32-bit lane) and blocks per chunk: 8
 * blocks of 16 rows are 4 KiB of quants, which stay in L1 while every
 * activation row passes over them. */
#define QP_ROWS LLM_Q8P_ROWS
#define QP_KB 8
#define QP_BLOCK (QP_ROWS * LLM_QK8_0) /* quant bytes of a block of a panel */
/* Activation rows one pass takes: 8 accumulators and up to 8 partial
 * sums hold half of the 32 vector registers. */
#define QP_TQ_MAX 8

/* The 8x8 transposes of 32-bit elements in both 256-bit halves at once:
 * on return v[g] holds, in half h, element g of the inputs' half h. */
AVX512_FN static ALWAYS_INLINE void transpose8x8_halves(__m512i v[8])
{
    __m512i t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    /* u[j] (j < 4) has elements j | j+4 of inputs 0..3 per 128-bit lane,
     * u[4 + j] the same of inputs 4..7: interleave their 128-bit lanes. */
    const __m512i lo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
    const __m512i hi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    for (int j = 0; j < 4; j++) {
        v[j] = _mm512_permutex2var_epi64(u[j], lo, u[4 + j]);
        v[4 + j] = _mm512_permutex2var_epi64(u[j], hi, u[4 + j]);
    }
}

/* Blocks kb..kb+nk-1 of `rows` (<= 16) weight rows in the file's layout,
 * into the panel layout's chunk: wq[j * 8 + g] the quants of group g of
 * block kb + j, wh[j * 16 + r] row r's scale. Missing rows are zero
 * weights with scale 0, as in a packed panel. */
AVX512_FN static void qp_pack(const unsigned char *w, size_t row_bytes, int rows, int64_t kb,
                              int nk, __m512i *wq, uint16_t *wh)
{
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    for (int j = 0; j < nk; j++) {
        size_t off = (size_t)(kb + j) * sizeof(llm_block_q8_0);
        __m512i v[8];
        for (int i = 0; i < 8; i++) {
            __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
            if (i < rows)
                lo = load256(w + (size_t)i * row_bytes + off + 2);
            if (i + 8 < rows)
                hi = load256(w + (size_t)(i + 8) * row_bytes + off + 2);
            v[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        }
        transpose8x8_halves(v);
        for (int g = 0; g < 8; g++)
            wq[j * 8 + g] = _mm512_xor_si512(v[g], bias);
        for (int r = 0; r < QP_ROWS; r++)
            if (r < rows)
                memcpy(&wh[j * QP_ROWS + r], w + (size_t)r * row_bytes + off, 2);
            else
                wh[j * QP_ROWS + r] = 0;
    }
}

AVX512_FN static inline __m512i bcast_i32(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Activation rows t..t+TQ-1 over a chunk of nk blocks (kb on) in the panel
 * layout (wq: its quants, 64-byte vectors; wh: its scales): per block, the
 * exact sum over the block of w * x (the 8 groups of four bytes, from
 * a->xsum's -128 * sum x), times d_w * d_x, into one FMA chain per result.
 * TQ rows share every weight load. Results of earlier chunks wait in y
 * (masked to the panel's rows m). */
AVX512_FN static ALWAYS_INLINE void qp_rows(const __m512i *wq, const uint16_t *wh, int nk,
                                            const llm_acts *a, int64_t kb, int32_t t, float *y,
                                            int64_t ldy, __mmask16 m, const int TQ)
{
    const int64_t len = a->len, nb = len / LLM_QK8_0;
    __m512 acc[8];
#pragma GCC unroll 8
    for (int q = 0; q < TQ; q++)
        acc[q] = kb == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, y + (t + q) * ldy);
    /* Each block's integer sum in two chains, four for one or two rows
     * (exact in any order): eight dependent vpdpbusd are about 40 cycles
     * of latency, which a few rows' chains do not hide. */
    const int SPLIT = TQ <= 2 ? 4 : 2;
    for (int j = 0; j < nk; j++) {
        const __m512 ws = _mm512_cvtph_ps(load256(wh + j * QP_ROWS));
        __m512i p[8], c[8][4];
#pragma GCC unroll 8
        for (int q = 0; q < TQ; q++) {
            c[q][0] = _mm512_set1_epi32(a->xsum[(t + q) * nb + kb + j]);
#pragma GCC unroll 4
            for (int h = 1; h < SPLIT; h++)
                c[q][h] = _mm512_setzero_si512();
        }
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m512i wv = _mm512_loadu_si512(wq + j * 8 + g);
#pragma GCC unroll 8
            for (int q = 0; q < TQ; q++)
                c[q][g % SPLIT] = _mm512_dpbusd_epi32(
                    c[q][g % SPLIT], wv, bcast_i32(a->q + (t + q) * len + (kb + j) * LLM_ACTS_QK + 4 * g));
        }
#pragma GCC unroll 8
        for (int q = 0; q < TQ; q++) {
            if (SPLIT == 4)
                p[q] = _mm512_add_epi32(_mm512_add_epi32(c[q][0], c[q][1]),
                                        _mm512_add_epi32(c[q][2], c[q][3]));
            else
                p[q] = _mm512_add_epi32(c[q][0], c[q][1]);
        }
#pragma GCC unroll 8
        for (int q = 0; q < TQ; q++) {
            __m512 sc = _mm512_mul_ps(ws, _mm512_set1_ps(a->d[(t + q) * nb + kb + j]));
            acc[q] = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(p[q]), acc[q]);
        }
    }
#pragma GCC unroll 8
    for (int q = 0; q < TQ; q++)
        _mm512_mask_storeu_ps(y + (t + q) * ldy, m, acc[q]);
}

/* Every activation row over one chunk: eight rows a pass, then the rest
 * in one pass of their own count. A verify's k + 1 rows (5, 7, 9) so pay
 * one or two passes over the chunk, not a pass per row beyond a multiple
 * of four: each pass re-reads the chunk and restarts its chains. Which
 * rows share a pass changes no result (each row's chain is its own). */
AVX512_FN static ALWAYS_INLINE void qp_chunk(const __m512i *wq, const uint16_t *wh, int nk,
                                             const llm_acts *a, int64_t kb, float *y, int64_t ldy,
                                             __mmask16 m)
{
    int32_t t = 0;
    for (; t + QP_TQ_MAX <= a->n; t += QP_TQ_MAX)
        qp_rows(wq, wh, nk, a, kb, t, y, ldy, m, QP_TQ_MAX);
    switch (a->n - t) {
    case 8: qp_rows(wq, wh, nk, a, kb, t, y, ldy, m, 8); break;
    case 7: qp_rows(wq, wh, nk, a, kb, t, y, ldy, m, 7); break;
    case 6: qp_rows(wq, wh, nk, a, kb, t, y, ldy, m, 6); break;
    case 5: qp_rows(wq, wh, nk, a, kb, t, y, ldy, m, 5); break;
    case 4: qp_rows(wq, wh, nk, a, kb, t, y, ldy, m, 4); break;
    case 3: qp_rows(wq, wh, nk, a, kb, t, y, ldy, m, 3); break;
    case 2: qp_rows(wq, wh, nk, a, kb, t, y, ldy, m, 2); break;
    case 1: qp_rows(wq, wh, nk, a, kb, t, y, ldy, m, 1); break;
    default: break;
    }
}

/* y[t * ldy + r] for r < rows (<= 16), t < a->n, from rows in the file's
 * layout, each chunk transposed onto the stack first. The rows are
 * strided 16 ways, which the hardware prefetchers do not follow: the
 * same chunk of the next panel is asked for into L2 as this one is read
 * (without it, from the L3, four times slower). */
AVX512_FN static void qp_panel(const unsigned char *w, size_t row_bytes, int rows,
                               const llm_acts *a, float *y, int64_t ldy)
{
    __m512i wq[QP_KB * 8];
    uint16_t wh[QP_KB * QP_ROWS];
    const int64_t nb = a->len / LLM_QK8_0;
    const __mmask16 m = (__mmask16)(rows >= QP_ROWS ? 0xffffu : (1u << rows) - 1u);
    for (int64_t kb = 0; kb < nb; kb += QP_KB) {
        int nk = nb - kb < QP_KB ? (int)(nb - kb) : QP_KB;
        size_t o0 = (size_t)kb * sizeof(llm_block_q8_0), o1 = o0 + (size_t)nk * sizeof(llm_block_q8_0);
        for (int r = 0; r < QP_ROWS; r++)
            for (size_t o = o0 & ~(size_t)63; o < o1; o += 64)
                _mm_prefetch((const char *)w + (size_t)(r + QP_ROWS) * row_bytes + o, _MM_HINT_T1);
        qp_pack(w, row_bytes, rows, kb, nk, wq, wh);
        qp_chunk(wq, wh, nk, a, kb, y, ldy, m);
    }
}

static void matvec_q8_0(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                        float *y, int64_t ldy)
{
    const unsigned char *p = w;
    for (int64_t r = 0; r < rows; r += QP_ROWS) {
        int n = rows - r < QP_ROWS ? (int)(rows - r) : QP_ROWS;
        qp_panel(p + (size_t)r * row_bytes, row_bytes, n, a, y + r, ldy);
    }
}

/* How far ahead of its reads the panel product asks for its stream (one
 * contiguous run of quants, then of scales, a panel after another), into
 * L2. The row loop's tiles ran four rows ahead, about 8 KiB, on each of
 * their four streams; one stream needs the bytes in flight in one place.
 * PHASEMARK_ENGINE_PREFETCH=tile keeps 8 KiB (QP_AHEAD_NEAR), so that one
 * process can measure both (bench_spec widths --prefetch tile). */
#define QP_AHEAD 32768
#define QP_AHEAD_NEAR 8192

/* matvec_q8_0 on the panel layout: w at the panel of a row that is a
 * multiple of 16, `rows` rows from there (the last panel's padding rows
 * are computed and not stored). */
#define DEFINE_Q8_PANELS(NAME, AHEAD)                                                         \
    AVX512_FN static void NAME(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a, \
                               float *y, int64_t ldy)                                         \
    {                                                                                         \
        const int64_t nb = a->len / LLM_QK8_0;                                                \
        const size_t panel = (size_t)QP_ROWS * row_bytes;                                     \
        for (int64_t r = 0; r < rows; r += QP_ROWS) {                                         \
            const unsigned char *pw = (const unsigned char *)w + (size_t)(r / QP_ROWS) * panel; \
            const uint16_t *wh = (const uint16_t *)(const void *)(pw + (size_t)nb * QP_BLOCK); \
            const int n = rows - r < QP_ROWS ? (int)(rows - r) : QP_ROWS;                     \
            const __mmask16 m = (__mmask16)(n >= QP_ROWS ? 0xffffu : (1u << n) - 1u);         \
            for (int64_t kb = 0; kb < nb; kb += QP_KB) {                                      \
                int nk = nb - kb < QP_KB ? (int)(nb - kb) : QP_KB;                            \
                const unsigned char *q = pw + (size_t)kb * QP_BLOCK;                          \
                const char *sc = (const char *)(wh + kb * QP_ROWS);                           \
                for (int j = 0; j < nk * QP_BLOCK; j += 64)                                   \
                    _mm_prefetch((const char *)q + j + (AHEAD), _MM_HINT_T1);                 \
                for (int j = 0; j < nk * QP_ROWS * 2; j += 64)                                \
                    _mm_prefetch(sc + j + (AHEAD), _MM_HINT_T1);                              \
                qp_chunk((const __m512i *)(const void *)q, wh + kb * QP_ROWS, nk, a, kb, y + r, ldy, m); \
            }                                                                                 \
        }                                                                                     \
    }

DEFINE_Q8_PANELS(matmul_q8_0_panels, QP_AHEAD)
DEFINE_Q8_PANELS(matmul_q8_0_panels_near, QP_AHEAD_NEAR)

/* The chain for one row: the reference the other Q8_0 kernels of this set
 * equal (kernels.h, dot_q8_0), its integer block sums by widening
 * multiply-adds. */
AVX512_FN static float dot_q8_0(const void *w, const llm_qrow *x, int64_t n)
{
    const unsigned char *blk = w;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / LLM_QK8_0; b++, blk += sizeof(llm_block_q8_0)) {
        __m512i wv = _mm512_cvtepi8_epi16(load256(blk + 2));
        __m512i xv = _mm512_cvtepi8_epi16(load256(x->q + b * LLM_QK8_0));
        int32_t sum = _mm512_reduce_add_epi32(_mm512_madd_epi16(wv, xv));
        acc = fmaf(fp16_at(blk) * x->d[b], (float)sum, acc);
    }
    return acc;
}

/* ---- exponentials: SwiGLU and the softmax ---------------------------------
 *
 * The avx2 sets call libm's expf once per element, a scalar call of some
 * 20 cycles: at verify widths the SwiGLU and the attention's softmax cost
 * as much as a quarter of the Q8_0 products. Here e^x is 16 lanes at a
 * time: x = n ln 2 + r with n = round(x / ln 2) and |r| <= ln 2 / 2 (ln 2
 * in two parts, so r is exact to a few ulp of x), e^r by its Taylor
 * series to r^7 (truncation below 1e-8, relative), scaled by 2^n with
 * vscalefps, which also gives 0 and inf past the float range. Within
 * about 2 ulp of expf; every element takes the same operations whatever
 * its lane, so a result depends on its input only. */

AVX512_FN static ALWAYS_INLINE __m512 exp16(__m512 x)
{
    /* min and max return their second operand when one is NaN: a NaN
     * stays NaN, while +-inf are clamped into range (2^128 and 2^-150
     * still round to inf and 0). */
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), _mm512_min_ps(_mm512_set1_ps(89.0f), x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

static inline __mmask16 tail_mask(size_t left)
{
    return left >= 16 ? (__mmask16)0xffffu : (__mmask16)((1u << left) - 1u);
}

/* Partial sums in 16 lanes, folded in a fixed order at the end. */
AVX512_FN static float softmax_exp(float *sc, uint32_t len, float mx)
{
    const __m512 m = _mm512_set1_ps(mx);
    __m512 acc = _mm512_setzero_ps();
    for (uint32_t p = 0; p < len; p += 16) {
        const __mmask16 k = tail_mask(len - p);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, sc + p), m));
        _mm512_mask_storeu_ps(sc + p, k, e);
        acc = _mm512_mask_add_ps(acc, k, acc, e);
    }
    __m256 h = _mm256_add_ps(lo256(acc), hi256(acc));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

AVX512_FN static void swiglu(float *gate, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        __m512 g = _mm512_maskz_loadu_ps(k, gate + i);
        __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
        __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
        _mm512_mask_storeu_ps(gate + i, k, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, up + i)));
    }
}

static void attend(const float *q, const float *k, const float *v, int64_t stride, uint32_t len,
                   int32_t hd, float scale, float *sc, float *out)
{
    llm_attend_avx2(q, k, v, stride, len, hd, scale, sc, out, softmax_exp);
}

/* RMSNorm's sum of squares: each square is exact in double, summed in 16
 * lanes (two vectors of 8) and folded in a fixed order, instead of the
 * backend's one chain of dependent adds a row (about 2000 cycles for a
 * 512-wide row; here about 130). */
AVX512_FN static double sum_squares(const float *x, int64_t n)
{
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        const __m512 v = _mm512_maskz_loadu_ps(tail_mask((size_t)(n - i)), x + i);
        const __m512d lo = _mm512_cvtps_pd(lo256(v)), hi = _mm512_cvtps_pd(hi256(v));
        a0 = _mm512_fmadd_pd(lo, lo, a0);
        a1 = _mm512_fmadd_pd(hi, hi, a1);
    }
    const __m512d a = _mm512_add_pd(a0, a1);
    const __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(a), _mm512_extractf64x4_pd(a, 1));
    const __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
    return _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));
}

/* ---- rows to f32 ------------------------------------------------------------ */

AVX512_FN static void dequant_f16(const void *src, float *dst, size_t n)
{
    const unsigned char *p = src;
    if (n % 16 != 0) {
        llm_dequantize_row(LLM_TYPE_F16, src, dst, n);
        return;
    }
    for (size_t i = 0; i < n; i += 16)
        _mm512_storeu_ps(dst + i, load_f16x16(p + 2 * i));
}

AVX512_FN static void dequant_bf16(const void *src, float *dst, size_t n)
{
    const unsigned char *p = src;
    if (n % 16 != 0) {
        llm_dequantize_row(LLM_TYPE_BF16, src, dst, n);
        return;
    }
    for (size_t i = 0; i < n; i += 16)
        _mm512_storeu_ps(dst + i, load_bf16x16(p + 2 * i));
}

/* Replaces the matvec, dequant and batched product of `type`'s entry with
 * those given (NULL: kept). */
static void replace(llm_kernels *k, uint32_t type, llm_matvec_fn matvec, llm_dequant_fn dequant,
                    llm_matvec_fn batched)
{
    const llm_type_kernels *old = llm_kernels_find(k, type);
    if (!old)
        return;
    llm_type_kernels e = *old;
    if (matvec)
        e.matvec = matvec;
    if (dequant)
        e.dequant = dequant;
    if (batched)
        e.batched = batched;
    (void)llm_kernels_set(k, &e); /* replaces: the table does not grow */
}

int llm_kernels_avx512(llm_kernels *k)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512vnni"))
        return -1;
    if (strcmp(k->name, "avx2+vnni") != 0)
        return -1;
    k->name = "avx512";
    k->dot_f32 = dot_f32;
    k->dot_q8_0 = dot_q8_0;
    k->q8_0_panels = matmul_q8_0_panels;
    k->softmax_exp = softmax_exp;
    k->swiglu = swiglu;
    k->sum_squares = sum_squares;
    k->attend = attend;
    replace(k, LLM_TYPE_F32, matvec_f32, NULL, NULL);
    replace(k, LLM_TYPE_F16, matvec_f16, dequant_f16, NULL);
    replace(k, LLM_TYPE_BF16, matvec_bf16, dequant_bf16, NULL);
    replace(k, LLM_TYPE_Q8_0, matvec_q8_0, NULL, matvec_q8_0);
    llm_kernels_add_k_avx512(k);
    llm_kernels_add_gemm_avx512(k);
    return 0;
}

void llm_kernels_avx512_near_prefetch(llm_kernels *k)
{
    if (strcmp(k->name, "avx512") != 0)
        return;
    k->q8_0_panels = matmul_q8_0_panels_near;
    replace(k, LLM_TYPE_F16, matvec_f16_near, NULL, NULL);
    replace(k, LLM_TYPE_BF16, matvec_bf16_near, NULL, NULL);
}

#else

int llm_kernels_avx512(llm_kernels *k)
{
    (void)k;
    return -1;
}

void llm_kernels_avx512_near_prefetch(llm_kernels *k)
{
    (void)k;
}

#endif
