/* kernels.h — the CPU backend's inner loops: dot products of one weight row
 * with one activation row, per weight type, and the activation quantizer.
 *
 * Kernel sets fill the same table, each built on the one before: the
 * portable scalar one (the reference, built everywhere), AVX2/FMA/F16C,
 * AVX2+VNNI and AVX-512, selected at run time by the CPU's features (the
 * CPU backend takes the best, or the set PHASEMARK_ENGINE_KERNELS names).
 * All take unaligned pointers.
 *
 * What the backend runs for a weight type is that type's entry in the set's
 * per-type table (llm_type_kernels: matrix–vector product, rows to f32,
 * activation layout); the backend finds it by type id and has nothing else
 * to say about types. A type without an entry has no CPU kernel: the model
 * refuses to load it (there is no fallback kernel).
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

/* Elements per block of the quantized activations (llm_acts, llm_qrow): the
 * activation blocks that the Q8_0 and Q4_0 kernels pair with their weight
 * blocks of the same size. */
#define LLM_ACTS_QK 32

/* An activation row quantized to blocks of 32: n/32 scales and n quants. */
typedef struct llm_qrow {
    const float *d;   /* [n/32] */
    const int8_t *q;  /* [n] */
} llm_qrow;

/* The activation rows of one matrix–vector product, in the layouts the
 * kernels read. Float weight types read x; quantized ones read the rest,
 * all filled from the same quantization (quantize_row per row):
 *   d, q   row-major, as llm_qrow (row t: d + t*len/32, q + t*len);
 *   dt     the scales block-major, dt[b * n + t] = d[t * len/32 + b], so that
 *          one vector load holds a block's scale for every row; readable
 *          for 8 floats past the last (kernels load 8 lanes, use n);
 *   qb     the quants block-major, block b of row t at qb + (b * n + t) * 32:
 *          a tile's rows of one block lie side by side, one pointer and
 *          constant offsets apart;
 *   xbias  -128 times the sum of each group of four quants of qb (the
 *          groups of a 32-bit lane), [len/32][n][8]: the VNNI kernels
 *          multiply w + 128 by q and start from this (an exact identity:
 *          sum (w+128) q - 128 sum q = sum w q);
 *   xsum   -128 times the sum of each whole block of q, row-major
 *          [n][len/32]: the same identity for kernels whose 32-bit lanes
 *          each hold one weight row (a block's eight groups in one lane).
 * n is at most LLM_ACTS_MAX. */
#define LLM_ACTS_MAX 64
typedef struct llm_acts {
    int32_t n;
    int64_t len;
    const float *x;    /* [n][len] */
    const float *d;    /* [n][len/32] */
    const int8_t *q;   /* [n][len] */
    const float *dt;   /* [len/32][n] + 8 */
    const int8_t *qb;  /* [len/32][n][32] */
    const int32_t *xbias; /* [len/32][n][8] */
    const int32_t *xsum;  /* [n][len/32] */
} llm_acts;

/* Caller-owned buffers for llm_acts_quantize, sized for n rows of len:
 * d [n*len/32], q [n*len], dt [n*len/32 + 8], qb [n*len], xbias [n*len/4],
 * xsum [n*len/32]. */
typedef struct llm_acts_scratch {
    float *d;
    int8_t *q;
    float *dt;
    int8_t *qb;
    int32_t *xbias;
    int32_t *xsum;
} llm_acts_scratch;

/* y[t * ldy + r] = row r of w (rows row_bytes apart) dotted with activation
 * row t, for r < rows and t < a->n. Every result is bit for bit what the
 * same set's single-row dot kernel returns for that row and activation:
 * the register-blocked kernels only share each weight block's load and
 * decoding between rows of activations (and interleave weight rows to
 * break dependency chains), keeping each dot's order of float operations. */
typedef void (*llm_matvec_fn)(const void *w, size_t row_bytes, int64_t rows,
                              const llm_acts *a, float *y, int64_t ldy);

/* n elements (whole blocks) of one type's rows to f32: that type's to_f32
 * (quant.h), bit for bit, perhaps faster. */
typedef void (*llm_dequant_fn)(const void *src, float *dst, size_t n);

/* y[t * ldy + r] = row r of w (rows row_bytes apart, k elements each)
 * dotted with activation row t (x + t * k, f32), for r < rows and t < n:
 * the batched float product read straight from a type's rows, packing
 * them itself, where the backend would otherwise dequantize a panel to
 * f32 and multiply that. */
typedef void (*llm_gemm_fn)(const void *w, size_t row_bytes, int64_t rows, int64_t k,
                            const float *x, int64_t n, float *y, int64_t ldy);

/* What the CPU backend runs for weights of one type. */
typedef struct llm_type_kernels {
    uint32_t type;          /* ggml type id (quant.h) */
    llm_matvec_fn matvec;   /* the row loop's product */
    llm_dequant_fn dequant; /* embedding rows, and the weight panels of the
                               batched product (unless rows_f32) */
    int acts_q8;            /* 1: matvec reads the activations quantized
                               (llm_acts d, q, dt, qb, xbias; rows are whole
                               blocks of LLM_ACTS_QK), and the batched product
                               starts later (the row loop then reads far fewer
                               bytes than a dequantized panel); 0: a->x only */
    int rows_f32;           /* 1: rows are f32 already; the batched product
                               reads them in place */
    llm_matvec_fn batched;  /* the batched product on quantized activations
                               (acts_q8 types; any rows, a->n up to
                               LLM_ACTS_MAX per call), replacing dequantized
                               panels and the f32 product; NULL: those.
                               Not bitwise the row loop (unless the set
                               makes them one kernel: the avx512 Q8_0
                               chain): each result is its own fixed
                               sequence of float operations, independent of
                               the batch and of the rows around it
                               (docs/engine.md, tolerances). */
    llm_gemm_fn gemm;       /* the batched float product on the rows as
                               they are (kernels_gemm_avx512.c: F16, BF16),
                               the set's own product in one, for when the
                               backend does not run OpenBLAS; NULL:
                               dequantized panels and gemm_nt. Its results
                               are gemm_nt's on the dequantized rows, bit
                               for bit. */
} llm_type_kernels;

/* Entries a kernel set's table holds (built-in types and a caller's). */
#define LLM_KERNEL_TYPES_MAX 24

typedef struct llm_kernels {
    const char *name; /* "scalar", "avx2", "avx2+vnni" or "avx512" */
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
     * are. The batched path's own product where OpenBLAS is not the
     * faster one (choose_blas, cpu_backend.c). */
    void (*gemm_nt)(int64_t n, int64_t m, int64_t k, const float *x, int64_t ldx,
                    const float *w, int64_t ldw, float *y, int64_t ldy);
    /* One attention head for one query: sc[p] = dot(q, k_p) * scale for
     * p < len (k_p = k + p * stride, hd floats), e_p = expf(sc[p] - max)
     * summed in index order, out = sum over p of axpy(out, e_p / sum, v_p)
     * from zero: the float operations of this set's dot and axpy, in that
     * order, so the result is bitwise the loop written with them. sc: [len]
     * scratch (left holding e_p). */
    void (*attend)(const float *q, const float *k, const float *v, int64_t stride,
                   uint32_t len, int32_t hd, float scale, float *sc, float *out);
    /* sc[p] = e^(sc[p] - mx) for p < len; returns their sum. The
     * softmax's exponentials in this set's arithmetic and order of
     * summation: attend's, and the tree attention's over gathered keys
     * (cpu_backend.c), which must stay bitwise one with it. */
    float (*softmax_exp)(float *sc, uint32_t len, float mx);
    /* gate[i] = gate[i] / (1 + e^-gate[i]) * up[i] for i < n, elementwise:
     * a result depends on neither n nor where the range starts (the pool
     * splits a SwiGLU anywhere). */
    void (*swiglu)(float *gate, const float *up, size_t n);
    /* sum of (double)x[i]^2 for i < n, in this set's order of summation
     * (RMSNorm's); NULL: the backend's loop, in index order. */
    double (*sum_squares)(const float *x, int64_t n);
    /* The Q8_0 product on matrices in the Q8_0 panel layout (below), or
     * NULL when the set reads Q8_0 rows only. Called, like a matvec, with
     * w at the panel of a row that is a multiple of LLM_Q8P_ROWS and
     * row_bytes the matrix's rows' (a panel is LLM_Q8P_ROWS rows' bytes);
     * its results are bit for bit the set's Q8_0 matvec's on the rows. */
    llm_matvec_fn q8_0_panels;
    /* The per-type table: n_types entries, one per type id. */
    llm_type_kernels types[LLM_KERNEL_TYPES_MAX];
    int32_t n_types;
} llm_kernels;

/* The Q8_0 panel layout: a matrix's rows in panels of LLM_Q8P_ROWS, a
 * panel of a matrix of nb blocks a row being nb * 512 quant bytes, then
 * nb * 16 fp16 scales. Quant byte i of group g (g < 8: bytes 4g..4g+3 of
 * a block) of row r of block b sits at b * 512 + g * 64 + r * 4 + i and
 * holds the row's quant plus 128 (an unsigned byte, the side vpdpbusd
 * multiplies unsigned); scale r of block b at nb * 512 + (b * 16 + r) * 2.
 * So a 64-byte vector holds four quants of all 16 rows, and a panel
 * takes the bytes of its 16 rows (34 a block a row). The last panel of a
 * matrix whose rows are no multiple of 16 is padded with zero rows
 * (scale 0). */
#define LLM_Q8P_ROWS 16

/* Bytes the panel layout of rows rows of row_bytes takes. */
size_t llm_q8_0_panel_bytes(int64_t rows, size_t row_bytes);

/* Writes panels [p0, p1) of the Q8_0 matrix src (rows rows of row_bytes)
 * in the panel layout into dst (the whole layout's start). */
void llm_q8_0_pack_panels(const void *src, size_t row_bytes, int64_t rows, int64_t p0,
                          int64_t p1, void *dst);

/* k's entry for ggml type `type`, or NULL when k has no kernels for it. */
const llm_type_kernels *llm_kernels_find(const llm_kernels *k, uint32_t type);

/* Puts e into k's table, replacing the entry for the same type. 0, or -1
 * when the table is full (k unchanged). */
int llm_kernels_set(llm_kernels *k, const llm_type_kernels *e);

/* Quantizes n rows of len (a multiple of 32) f32 activations x with k's
 * quantize_row and fills every quantized layout of *a (a->x = x too) in s.
 * Allocates nothing. */
void llm_acts_quantize(const llm_kernels *k, const float *x, int32_t n, int64_t len,
                       const llm_acts_scratch *s, llm_acts *a);

/* The portable kernels. */
void llm_kernels_scalar(llm_kernels *k);

/* The portable set's softmax_exp (expf, summed in index order): the
 * avx2 sets' too. */
float llm_softmax_exp_scalar(float *sc, uint32_t len, float mx);

/* The avx2 set's attend with the exponentials of softmax_exp (the avx512
 * set's attend: its scores and weighted sum are avx2's, whose float
 * operations are the avx2 dot's and axpy's, which the avx512 set keeps). */
void llm_attend_avx2(const float *q, const float *k, const float *v, int64_t stride,
                     uint32_t len, int32_t hd, float scale, float *sc, float *out,
                     float (*softmax_exp)(float *sc, uint32_t len, float mx));

/* The AVX2 kernels: 0 and *k filled when the CPU supports AVX2, FMA and
 * F16C (and the compiler could build them), else -1 and *k untouched. */
int llm_kernels_avx2(llm_kernels *k);

/* On top of a filled AVX2 set: the quantized matrix–vector products through
 * AVX-512 VNNI (on 256-bit vectors, which do not lower the clock) when the
 * CPU has AVX512F/BW/VL and VNNI; 0 and the entries replaced (name
 * "avx2+vnni"), else -1 and *k untouched. Results stay bit for bit the
 * AVX2 set's: the integer block sums are exact either way. */
int llm_kernels_vnni(llm_kernels *k);

/* On top of a filled AVX2+VNNI set (llm_kernels_vnni accepted it): the
 * F32, F16 and BF16 matrix–vector products on 512-bit vectors, and one
 * Q8_0 product for every row count on 8-bit activations, from rows or
 * from panels (kernels_avx512.c), when the CPU has AVX512F/BW/VL and
 * VNNI; 0 and the entries replaced (name "avx512"), else -1 and *k
 * untouched. The float matrix–vector products stay bit for bit the
 * AVX2+VNNI set's: each 512-bit accumulator holds two 256-bit accumulators
 * of the AVX2 kernel side by side, lane for lane the same operations,
 * summed in the same order at the end. The Q8_0 product is not: each
 * result is one chain over the blocks, acc = fma(d_w * d_x, (float)sum,
 * acc) with the exact integer block sum, the same for any batch (its
 * matvec, batched product, panel product and dot_q8_0 agree bit for bit).
 * Nor are the k-quants': the set also takes llm_kernels_add_k_avx512's. */
int llm_kernels_avx512(llm_kernels *k);

/* On a set that llm_kernels_avx512 accepted: the batched float product
 * on 512-bit vectors (kernels_gemm_avx512.c), replacing gemm_nt, and the
 * F16 and BF16 entries' gemm, which pack those rows without a dequantized
 * panel. Each result is one FMA chain over k in index order, whatever the
 * shape, tile or thread: not bitwise the AVX2 gemm_nt or OpenBLAS. */
void llm_kernels_add_gemm_avx512(llm_kernels *k);

/* On a set llm_kernels_avx512 filled: the F16 and BF16 matrix–vector
 * products with their stream prefetched one register tile ahead, as before
 * the deeper prefetch (kernels_avx512.c, stream_ahead), and the Q8_0 panel
 * product 8 KiB ahead instead of 32; bit for bit the same results. For
 * benchmarks (PHASEMARK_ENGINE_PREFETCH=tile); any other set: unchanged. */
void llm_kernels_avx512_near_prefetch(llm_kernels *k);

/* The k-quants' entries (kernels_k.c; Q2_K and Q3_K from kernels_k23.c),
 * added to a filled set: the scalar
 * products, or the AVX2 ones (bitwise the scalar ones; call only on a set
 * that llm_kernels_avx2 accepted). */
void llm_kernels_add_k_scalar(llm_kernels *k);
void llm_kernels_add_k_avx2(llm_kernels *k);

/* On a set that llm_kernels_avx512 accepted: the k-quants' matrix–vector
 * products through AVX-512 VNNI (kernels_kquant_avx512.c), replacing the
 * AVX2 ones (dequant and batched entries kept). Not bitwise the scalar
 * set: the same exact integer sums, the per-block f32 terms added in
 * eight lanes (agreement within f32 rounding of the sum of |terms|). */
void llm_kernels_add_k_avx512(llm_kernels *k);

/* The same for Q2_K and Q3_K (kernels_k23.c): the scalar products, the
 * AVX2 ones (bitwise the scalar ones), and on a set that
 * llm_kernels_avx512 accepted the AVX-512 VNNI ones (the same exact
 * integer sums and per-block f32 terms, added in eight lanes: agreement
 * within f32 rounding of the sum of |terms|). The k-quant adders above
 * call these. */
void llm_kernels_add_k23_scalar(llm_kernels *k);
void llm_kernels_add_k23_avx2(llm_kernels *k);
void llm_kernels_add_k23_avx512(llm_kernels *k);

/* The same for Q4_1, Q5_0, Q5_1 (kernels_legacy.c). */
void llm_kernels_add_legacy_scalar(llm_kernels *k);
void llm_kernels_add_legacy_avx2(llm_kernels *k);

/* Defines NAME, an llm_matvec_fn that calls a single-row kernel DOT for
 * every weight row and activation row: the matrix–vector product of the
 * types a set has no blocked kernel for. ATTR: the function's attributes
 * (the AVX2 set's target, so DOT inlines). FLOAT: DOT takes f32
 * activations; QUANT: an llm_qrow. */
#define LLM_MATVEC_BY_ROWS_FLOAT(ATTR, NAME, DOT)                              \
    ATTR static void NAME(const void *w, size_t row_bytes, int64_t rows,      \
                          const llm_acts *a, float *y, int64_t ldy)           \
    {                                                                         \
        const unsigned char *p = w;                                           \
        for (int64_t r = 0; r < rows; r++, p += row_bytes)                    \
            for (int32_t t = 0; t < a->n; t++)                                \
                y[t * ldy + r] = DOT(p, a->x + t * a->len, a->len);           \
    }
#define LLM_MATVEC_BY_ROWS_QUANT(ATTR, NAME, DOT)                              \
    ATTR static void NAME(const void *w, size_t row_bytes, int64_t rows,      \
                          const llm_acts *a, float *y, int64_t ldy)           \
    {                                                                         \
        const unsigned char *p = w;                                           \
        int64_t nb = a->len / LLM_ACTS_QK;                                    \
        for (int64_t r = 0; r < rows; r++, p += row_bytes)                    \
            for (int32_t t = 0; t < a->n; t++) {                              \
                llm_qrow xq = {a->d + t * nb, a->q + t * a->len};             \
                y[t * ldy + r] = DOT(p, &xq, a->len);                         \
            }                                                                 \
    }

#endif
