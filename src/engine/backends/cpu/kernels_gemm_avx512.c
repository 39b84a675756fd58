/* kernels_gemm_avx512.c — the avx512 set's batched float product: its
 * gemm_nt, and the F16 and BF16 entries' gemm, which read the file's
 * 16-bit rows themselves instead of a dequantized f32 panel (kernels.h).
 *
 * Why it exists: a prefill's float products ran OpenBLAS's sgemm, and a
 * DYNAMIC_ARCH OpenBLAS that does not know the CPU runs an older core's
 * kernels (Debian's 0.3.21 on Zen 5: "Haswell", 256-bit), leaving half of
 * the 512-bit FMA units idle; the AVX2 set's gemm_nt is a dot-product
 * tile, no faster. This one is an outer-product kernel in the manner of
 * GotoBLAS and BLIS, on 512-bit vectors:
 *
 *   for each block of GEMM_KC along k:
 *     for each sliver of GEMM_NR weight rows:
 *       pack the sliver's block transposed, [kc][GEMM_NR] f32, on the
 *       stack (32 KiB: it stays in L1 while the activations stream past);
 *       for each tile of GEMM_MR activation rows: the micro-kernel.
 *
 * The micro-kernel holds a GEMM_MR x GEMM_NR tile of y in 24 of the 32
 * vector registers (a row of the tile is GEMM_NV vectors of 16 weight
 * rows) and per step of k loads GEMM_NV vectors of packed weights,
 * broadcasts one activation per tile row and issues GEMM_MR * GEMM_NV
 * FMAs: 24 FMAs for 10 loads. The activations are read in place, rows
 * ldx apart (a block is n x GEMM_KC floats, 256 KiB at n = 512, which
 * stays in L2 across the slivers): packing them too would cost the
 * backend a pass over all of x for every 256-row panel it hands over.
 * The weights are packed exactly once each, straight from F16 or BF16
 * rows when the type's entry is used, so a half-precision panel is
 * never written out as f32 in full.
 *
 * Arithmetic: every y[i][j] is one chain of FMAs over k in index order,
 * starting from 0 (carried across k blocks by storing the tile and
 * loading it back, which is exact), so a result depends on its row of x,
 * its row of w and k only: not on n, m, the tile, the panel or the thread
 * that computed it. Its error is that of a plain f32 dot product, at most
 * k * 2^-24 * sum |x w| (to first order). It is not bitwise the AVX2 set's
 * gemm_nt (eight-lane partial sums) nor OpenBLAS's sgemm.
 */
#include "kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#include "quant.h"

#define AVX512_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define ALWAYS_INLINE __attribute__((always_inline)) inline

/* Tile of y: GEMM_MR activation rows by GEMM_NR = 16 * GEMM_NV weight
 * rows, GEMM_MR * GEMM_NV accumulators. GEMM_KC: depth of a packed block,
 * GEMM_KC * GEMM_NR * 4 bytes = 32 KiB, within Zen 5's 48 KiB L1. */
#define GEMM_MR 6
#define GEMM_NV 4
#define GEMM_NR (16 * GEMM_NV)
#define GEMM_KC 128

/* How weight rows are stored. */
enum { ROWS_F32, ROWS_F16, ROWS_BF16 };

static inline __mmask16 tail_mask(int64_t left)
{
    return left >= 16 ? (__mmask16)0xffffu
                      : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
}

/* Elements i..i+15 of a row as f32, those outside mask zero (and not
 * read: masked loads do not fault). */
AVX512_FN static ALWAYS_INLINE __m512 load16(const unsigned char *row, int64_t i, __mmask16 mask,
                                             const int kind)
{
    if (kind == ROWS_F32)
        return _mm512_maskz_loadu_ps(mask, row + 4 * i);
    __m256i h = _mm256_maskz_loadu_epi16(mask, row + 2 * i);
    if (kind == ROWS_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* A 16 x 16 transpose: on return v[c] holds, in lane r, element c of the
 * input v[r]. Pairs, then quads of rows within 128-bit lanes, then the
 * 128-bit lanes themselves. */
AVX512_FN static ALWAYS_INLINE void transpose16(__m512 v[16])
{
    __m512 a[16], b[16];
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
        a[2 * p] = _mm512_unpacklo_ps(v[2 * p], v[2 * p + 1]);
        a[2 * p + 1] = _mm512_unpackhi_ps(v[2 * p], v[2 * p + 1]);
    }
    /* b[4q + c] holds, in 128-bit lane L, rows 4q..4q+3 of column 4L + c. */
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        b[4 * q] = _mm512_shuffle_ps(a[4 * q], a[4 * q + 2], 0x44);
        b[4 * q + 1] = _mm512_shuffle_ps(a[4 * q], a[4 * q + 2], 0xEE);
        b[4 * q + 2] = _mm512_shuffle_ps(a[4 * q + 1], a[4 * q + 3], 0x44);
        b[4 * q + 3] = _mm512_shuffle_ps(a[4 * q + 1], a[4 * q + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m512 e0 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0x44);
        __m512 e1 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0xEE);
        __m512 e2 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0x44);
        __m512 e3 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0xEE);
        v[c] = _mm512_shuffle_f32x4(e0, e2, 0x88);
        v[4 + c] = _mm512_shuffle_f32x4(e0, e2, 0xDD);
        v[8 + c] = _mm512_shuffle_f32x4(e1, e3, 0x88);
        v[12 + c] = _mm512_shuffle_f32x4(e1, e3, 0xDD);
    }
}

/* Rows 16g..16g+15 of the sliver (those from `rows` on zero), columns
 * c0..c0+15 of the block (those from kc on neither read nor written),
 * into bp[c * GEMM_NR + 16g + r]. */
AVX512_FN static ALWAYS_INLINE void pack16(const unsigned char *w, size_t row_bytes, int rows,
                                           int64_t k0, int c0, int kc, int g, float *bp,
                                           const int kind)
{
    __m512 v[16];
    __mmask16 mask = tail_mask(kc - c0);
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
        v[r] = 16 * g + r < rows
                   ? load16(w + (size_t)(16 * g + r) * row_bytes, k0 + c0, mask, kind)
                   : _mm512_setzero_ps();
    transpose16(v);
    float *dst = bp + (size_t)c0 * GEMM_NR + 16 * g;
    if (mask == 0xffffu) {
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++)
            _mm512_store_ps(dst + c * GEMM_NR, v[c]);
        return;
    }
    for (int c = 0; c < kc - c0; c++)
        _mm512_store_ps(dst + c * GEMM_NR, v[c]);
}

/* Columns [k0, k0 + kc) of weight rows [0, rows) (rows <= GEMM_NR; the
 * sliver's other rows zero) into bp [kc][GEMM_NR]. */
#define DEFINE_PACK(NAME, KIND)                                                            \
    AVX512_FN static void NAME(const unsigned char *w, size_t row_bytes, int rows,         \
                               int64_t k0, int kc, float *bp)                              \
    {                                                                                      \
        for (int g = 0; g < GEMM_NV; g++)                                                  \
            for (int c0 = 0; c0 < kc; c0 += 16)                                            \
                pack16(w, row_bytes, rows, k0, c0, kc, g, bp, KIND);                       \
    }

DEFINE_PACK(pack_f32, ROWS_F32)
DEFINE_PACK(pack_f16, ROWS_F16)
DEFINE_PACK(pack_bf16, ROWS_BF16)

typedef void (*pack_fn)(const unsigned char *w, size_t row_bytes, int rows, int64_t k0, int kc,
                        float *bp);

/* y[i][j] (i < MR, j < GEMM_NR where mask[j / 16] has bit j % 16) +=
 * sum over kk < kc of x[i * ldx + kk] * bp[kk * GEMM_NR + j], from zero
 * when first, else from y. */
AVX512_FN static ALWAYS_INLINE void micro(int kc, const float *x, int64_t ldx, const float *bp,
                                          float *y, int64_t ldy, const __mmask16 *mask,
                                          int first, const int MR)
{
    __m512 acc[GEMM_MR][GEMM_NV];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < GEMM_NV; v++)
            acc[i][v] = first ? _mm512_setzero_ps()
                              : _mm512_maskz_loadu_ps(mask[v], y + i * ldy + 16 * v);
    for (int kk = 0; kk < kc; kk++) {
        const float *b = bp + (size_t)kk * GEMM_NR;
        __m512 bv[GEMM_NV];
#pragma GCC unroll 4
        for (int v = 0; v < GEMM_NV; v++)
            bv[v] = _mm512_load_ps(b + 16 * v);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            __m512 a = _mm512_set1_ps(x[i * ldx + kk]);
#pragma GCC unroll 4
            for (int v = 0; v < GEMM_NV; v++)
                acc[i][v] = _mm512_fmadd_ps(a, bv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < GEMM_NV; v++)
            _mm512_mask_storeu_ps(y + i * ldy + 16 * v, mask[v], acc[i][v]);
}

/* One packed sliver against every activation row: whole tiles, then the
 * last n % GEMM_MR rows in one narrower tile. */
AVX512_FN static void sliver(int64_t n, int kc, const float *x, int64_t ldx, const float *bp,
                             float *y, int64_t ldy, const __mmask16 *mask, int first)
{
    int64_t i = 0;
    for (; i + GEMM_MR <= n; i += GEMM_MR)
        micro(kc, x + i * ldx, ldx, bp, y + i * ldy, ldy, mask, first, GEMM_MR);
    x += i * ldx;
    y += i * ldy;
    switch (n - i) {
    case 5: micro(kc, x, ldx, bp, y, ldy, mask, first, 5); break;
    case 4: micro(kc, x, ldx, bp, y, ldy, mask, first, 4); break;
    case 3: micro(kc, x, ldx, bp, y, ldy, mask, first, 3); break;
    case 2: micro(kc, x, ldx, bp, y, ldy, mask, first, 2); break;
    case 1: micro(kc, x, ldx, bp, y, ldy, mask, first, 1); break;
    default: break;
    }
}
_Static_assert(GEMM_MR == 6, "sliver's tail cases cover 1..GEMM_MR-1 rows");

/* y[i * ldy + j] = sum over t < k of x[i * ldx + t] * (row j of w)[t],
 * the rows of w row_bytes apart and read through pack. */
AVX512_FN static void gemm_rows(int64_t n, int64_t m, int64_t k, const float *x, int64_t ldx,
                                const unsigned char *w, size_t row_bytes, float *y, int64_t ldy,
                                pack_fn pack)
{
    float bp[GEMM_KC * GEMM_NR] __attribute__((aligned(64)));
    if (k <= 0) {
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++)
                y[i * ldy + j] = 0.0f;
        return;
    }
    for (int64_t k0 = 0; k0 < k; k0 += GEMM_KC) {
        int kc = k - k0 < GEMM_KC ? (int)(k - k0) : GEMM_KC;
        for (int64_t j0 = 0; j0 < m; j0 += GEMM_NR) {
            int nr = m - j0 < GEMM_NR ? (int)(m - j0) : GEMM_NR;
            __mmask16 mask[GEMM_NV];
            for (int v = 0; v < GEMM_NV; v++)
                mask[v] = tail_mask(nr - 16 * v);
            pack(w + (size_t)j0 * row_bytes, row_bytes, nr, k0, kc, bp);
            sliver(n, kc, x + k0, ldx, bp, y + j0, ldy, mask, k0 == 0);
        }
    }
}

static void gemm_nt(int64_t n, int64_t m, int64_t k, const float *x, int64_t ldx,
                    const float *w, int64_t ldw, float *y, int64_t ldy)
{
    gemm_rows(n, m, k, x, ldx, (const unsigned char *)w, (size_t)ldw * sizeof(float), y, ldy,
              pack_f32);
}

static void gemm_f16(const void *w, size_t row_bytes, int64_t rows, int64_t k, const float *x,
                     int64_t n, float *y, int64_t ldy)
{
    gemm_rows(n, rows, k, x, k, w, row_bytes, y, ldy, pack_f16);
}

static void gemm_bf16(const void *w, size_t row_bytes, int64_t rows, int64_t k, const float *x,
                      int64_t n, float *y, int64_t ldy)
{
    gemm_rows(n, rows, k, x, k, w, row_bytes, y, ldy, pack_bf16);
}

/* Sets the gemm of `type`'s entry, when k has one. */
static void set_gemm(llm_kernels *k, uint32_t type, llm_gemm_fn gemm)
{
    const llm_type_kernels *old = llm_kernels_find(k, type);
    if (!old)
        return;
    llm_type_kernels e = *old;
    e.gemm = gemm;
    (void)llm_kernels_set(k, &e); /* replaces: the table does not grow */
}

void llm_kernels_add_gemm_avx512(llm_kernels *k)
{
    k->gemm_nt = gemm_nt;
    set_gemm(k, LLM_TYPE_F16, gemm_f16);
    set_gemm(k, LLM_TYPE_BF16, gemm_bf16);
}

#else

void llm_kernels_add_gemm_avx512(llm_kernels *k)
{
    (void)k;
}

#endif
