/* cuda_matmul.cu — weights on the device and y = W x.
 *
 * Decode (and verify up to LLM_CUDA_MATVEC_MAX rows) is bound by reading the
 * weights once: a warp owns one output row, every lane streams 16-byte
 * vectors of the row (several loads in flight before the first use) past
 * the L1 cache, multiplies them with fp32 activations read through the
 * cache (shared by every warp of the SM), and the warp reduces its fp32
 * partial sums with shuffles. All activation rows of a call are done in the
 * same pass, so a verify of k+1 tokens costs one read of the weights. The
 * kernels are dependent launches (llm__launch): each warp loads its first
 * batch of weights, which no earlier kernel writes, before waiting for the
 * kernel that produces its activations, and lets the next kernel be
 * scheduled once its own weights are all requested.
 *
 * One-row products over Q8 layout weights take their own kernel on int8
 * activations (matvec_q8i_kernel, below), unless the tuning says otherwise.
 * Q4_K and Q6_K keep the file's blocks on the device and have one of their
 * own (matvec_kq_kernel), which up to LLM_CUDA_MATVEC_MAX rows runs once
 * per row.
 *
 * Wider products (prefill) go through cuBLAS with fp32 accumulation: bf16
 * weights with bf16 activations, F16 weights as they are with fp16
 * activations, Q8 and k-quant weights on a bf16 copy made at their first
 * wide product (tune.wide_cache) or, without one, dequantized to bf16 a
 * bounded chunk of rows at a time into reserved scratch. FP32 weights use
 * an fp32 GEMM.
 *
 * Q8_0 lives on the device as two arrays, int8 quants [rows][cols] and fp16
 * scales [rows][cols/32], instead of ggml's interleaved 34-byte blocks, so
 * that every quant load is an aligned 16-byte vector.
 *
 * Types are chosen by table, never by a default case: k_uploads says which
 * host (ggml) types upload and into which device layout, k_layouts what
 * each device layout is and which kernels run it. A type in neither has no
 * CUDA kernel (llm_cuda_backend_supports_type), and the model refuses it
 * at load.
 */
#include "cuda_internal.cuh"

#include <stdlib.h>
#include <string.h>


/* ---- device layouts ---------------------------------------------------- */

/* The kernels' template argument per device layout: elements per 16-byte
 * vector and bytes per element of data. */
enum { WT_F32, WT_F16, WT_BF16, WT_Q8, WT_COUNT };

template <int WT> struct wt_info;
template <> struct wt_info<WT_F32> { static constexpr int chunk = 4, bytes = 4; };
template <> struct wt_info<WT_F16> { static constexpr int chunk = 8, bytes = 2; };
template <> struct wt_info<WT_BF16> { static constexpr int chunk = 8, bytes = 2; };
template <> struct wt_info<WT_Q8> { static constexpr int chunk = 16, bytes = 1; };

/* How a wide product takes a layout: fp32 GEMM on the weights as they are
 * (exact), bf16 GEMM on them as they are, fp16 GEMM on them as they are
 * (fp16 activations; bf16 on dequantized chunks when the tuning's
 * f16_direct is off), or bf16 GEMM on a dequantized chunk of rows. */
enum { GEMM_F32, GEMM_BF16, GEMM_F16, GEMM_DEQUANT };

/* The native k-quant layouts (kq_native): their one-row kernel's template
 * argument. */
enum { KQ_NONE = -1, KQ_Q4K = 0, KQ_Q6K = 1, KQ_Q5K = 2 };

/* One device layout (llm_cuda_weight.type): rows are whole blocks of blk
 * elements, blk_bytes of data each (plain types: blocks of one element). */
typedef struct layout_info {
    uint32_t dtype;    /* the layout's type id */
    int wt;            /* the vector kernels' template argument (WT_*); -1: none */
    int kq;            /* KQ_*: a native k-quant layout */
    int64_t blk;       /* elements per block */
    size_t blk_bytes;  /* bytes of data per block */
    int chunk;         /* elements per 16-byte vector (k-quants: per block) */
    int scaled;        /* 1: an fp16 scale per block in `scales` */
    int gemm;          /* GEMM_* */
} layout_info;

static const layout_info k_layouts[] = {
    {LLM_TYPE_F32, WT_F32, KQ_NONE, 1, wt_info<WT_F32>::bytes, wt_info<WT_F32>::chunk, 0,
     GEMM_F32},
    {LLM_TYPE_F16, WT_F16, KQ_NONE, 1, wt_info<WT_F16>::bytes, wt_info<WT_F16>::chunk, 0,
     GEMM_F16},
    {LLM_TYPE_BF16, WT_BF16, KQ_NONE, 1, wt_info<WT_BF16>::bytes, wt_info<WT_BF16>::chunk, 0,
     GEMM_BF16},
    {LLM_TYPE_Q8_0, WT_Q8, KQ_NONE, LLM_QK8_0, LLM_QK8_0, wt_info<WT_Q8>::chunk, 1,
     GEMM_DEQUANT},
    {LLM_TYPE_Q4_K, -1, KQ_Q4K, LLM_QK_K, LLM_CUDA_Q4K_BLOCK, LLM_QK_K, 0, GEMM_DEQUANT},
    {LLM_TYPE_Q6_K, -1, KQ_Q6K, LLM_QK_K, LLM_CUDA_Q6K_BLOCK, LLM_QK_K, 1, GEMM_DEQUANT},
    {LLM_TYPE_Q5_K, -1, KQ_Q5K, LLM_QK_K, LLM_CUDA_Q5K_BLOCK, LLM_QK_K, 0, GEMM_DEQUANT},
};

/* Bytes of data, and fp16 scales, of one row of `cols` elements. */
static size_t layout_row_bytes(const layout_info *l, int64_t cols)
{
    return (size_t)(cols / l->blk) * l->blk_bytes;
}

static size_t layout_row_scales(const layout_info *l, int64_t cols)
{
    return l->scaled ? (size_t)(cols / l->blk) : 0;
}

static const layout_info *find_layout(uint32_t dtype)
{
    for (size_t i = 0; i < sizeof k_layouts / sizeof k_layouts[0]; i++)
        if (k_layouts[i].dtype == dtype)
            return &k_layouts[i];
    return NULL;
}

/* Whether w is a weight of a known layout with its scales when it needs
 * them (the products' argument check). */
static int weight_ok(const llm_cuda_weight *w)
{
    const layout_info *l = find_layout(w->type);
    return l && (!l->scaled || w->scales);
}

/* ---- host types -------------------------------------------------------- */

/* Splits one ggml block into int8 quants and fp16 scales of Q8 layout
 * blocks: block_elems / LLM_QK8_0 of them (one for Q8_0/Q4_0, eight for a
 * k-quant super-block), q[block_elems] and d[block_elems / LLM_QK8_0]. */
typedef void (*split_fn)(const unsigned char *blk, int8_t *q, uint16_t *d);

static void split_q8_0(const unsigned char *blk, int8_t *q, uint16_t *d)
{
    memcpy(d, blk, 2);
    memcpy(q, blk + 2, LLM_QK8_0);
}

/* Q4_0: nibble - 8 is exact in int8 with the same d. */
static void split_q4_0(const unsigned char *blk, int8_t *q, uint16_t *d)
{
    memcpy(d, blk, 2);
    for (int j = 0; j < LLM_QK4_0 / 2; j++) {
        q[j] = (int8_t)((blk[2 + j] & 0x0f) - 8);
        q[j + LLM_QK4_0 / 2] = (int8_t)((blk[2 + j] >> 4) - 8);
    }
}

static_assert(LLM_QK4_0 == LLM_QK8_0, "Q4_0 blocks become Q8 layout blocks one for one");

/* The k-quants without a native layout (Q2_K, Q3_K, Q5_K, and Q4_K/Q6_K with the
 * tuning's kq_native off): a super-block of 256 is dequantized on the host (the reference conversion, quant_k.c) and
 * re-quantized to eight Q8_0 blocks (the reference Q8_0 quantizer), so a
 * Q4_K_M file runs on the device's Q8 kernels. The cost, stated: device
 * memory and decode bandwidth of Q8_0 (8.5 bits a weight against Q4_K's
 * 4.5 and Q6_K's 6.56, so about 1.9x a Q4_K_M file's bytes), a second
 * rounding of every weight (half a Q8_0 step, under 0.4% of each block's
 * largest value), and host time at prepare to dequantize and quantize
 * every weight once. */
static void split_k(uint32_t type, const unsigned char *blk, int8_t *q, uint16_t *d)
{
    float x[LLM_QK_K];
    unsigned char q8[sizeof(llm_block_q8_0)];
    llm_dequantize_row(type, blk, x, LLM_QK_K);
    for (int b = 0; b < LLM_QK_K / LLM_QK8_0; b++) {
        llm_quantize_row(LLM_TYPE_Q8_0, x + b * LLM_QK8_0, q8, LLM_QK8_0);
        split_q8_0(q8, q + b * LLM_QK8_0, d + b);
    }
}

static void split_q4_k(const unsigned char *blk, int8_t *q, uint16_t *d)
{
    split_k(LLM_TYPE_Q4_K, blk, q, d);
}

static void split_q5_k(const unsigned char *blk, int8_t *q, uint16_t *d)
{
    split_k(LLM_TYPE_Q5_K, blk, q, d);
}

/* Q2_K and Q3_K (2.6 and 3.4 bits a weight) take the same re-quantized
 * route: on the device they cost Q8_0's bytes, so they run, not fast. */
static void split_q2_k(const unsigned char *blk, int8_t *q, uint16_t *d)
{
    split_k(LLM_TYPE_Q2_K, blk, q, d);
}

static void split_q3_k(const unsigned char *blk, int8_t *q, uint16_t *d)
{
    split_k(LLM_TYPE_Q3_K, blk, q, d);
}

static void split_q6_k(const unsigned char *blk, int8_t *q, uint16_t *d)
{
    split_k(LLM_TYPE_Q6_K, blk, q, d);
}

/* Q5_0: q - 16 (-16..15) is exact in int8 with the same d, as Q4_0. */
static void split_q5_0(const unsigned char *blk, int8_t *q, uint16_t *d)
{
    uint32_t qh = (uint32_t)blk[2] | ((uint32_t)blk[3] << 8) | ((uint32_t)blk[4] << 16) |
                  ((uint32_t)blk[5] << 24);
    memcpy(d, blk, 2);
    for (int j = 0; j < LLM_QK_LEGACY; j++) {
        int v = j < 16 ? (blk[6 + j] & 0x0f) : (blk[6 + j - 16] >> 4);
        q[j] = (int8_t)((v | (int)(((qh >> j) & 1u) << 4)) - 16);
    }
}

/* Q4_1 / Q5_1 carry an offset m per block, which the Q8 layout has no
 * place for: each block of 32 is dequantized (quant_legacy.c) and
 * re-quantized to one Q8_0 block, as the k-quants are. The cost: Q8_0's
 * 8.5 bits a weight against 5 (Q4_1) and 6 (Q5_1), and a second rounding
 * of half a Q8_0 step. */
static void split_requant32(uint32_t type, const unsigned char *blk, int8_t *q, uint16_t *d)
{
    float x[LLM_QK8_0];
    unsigned char q8[sizeof(llm_block_q8_0)];
    llm_dequantize_row(type, blk, x, LLM_QK8_0);
    llm_quantize_row(LLM_TYPE_Q8_0, x, q8, LLM_QK8_0);
    split_q8_0(q8, q, d);
}

static void split_q4_1(const unsigned char *blk, int8_t *q, uint16_t *d)
{
    split_requant32(LLM_TYPE_Q4_1, blk, q, d);
}

static void split_q5_1(const unsigned char *blk, int8_t *q, uint16_t *d)
{
    split_requant32(LLM_TYPE_Q5_1, blk, q, d);
}

static_assert(LLM_QK_LEGACY == LLM_QK8_0, "Q4_1/Q5_0/Q5_1 blocks become Q8 layout blocks one for one");

/* The host types that upload: the device layout each is stored in, and how
 * its blocks split into that layout's quants and scales (NULL: the rows are
 * copied as they are). */
typedef struct upload_type {
    uint32_t type;  /* ggml type id */
    uint32_t dtype; /* device layout */
    split_fn split;
} upload_type;

static const upload_type k_uploads[] = {
    {LLM_TYPE_F32, LLM_TYPE_F32, NULL},
    {LLM_TYPE_F16, LLM_TYPE_F16, NULL},
    {LLM_TYPE_BF16, LLM_TYPE_BF16, NULL},
    {LLM_TYPE_Q8_0, LLM_TYPE_Q8_0, split_q8_0},
    {LLM_TYPE_Q4_0, LLM_TYPE_Q8_0, split_q4_0},
    {LLM_TYPE_Q4_1, LLM_TYPE_Q8_0, split_q4_1},
    {LLM_TYPE_Q5_0, LLM_TYPE_Q8_0, split_q5_0},
    {LLM_TYPE_Q5_1, LLM_TYPE_Q8_0, split_q5_1},
    {LLM_TYPE_Q4_K, LLM_TYPE_Q8_0, split_q4_k},
    {LLM_TYPE_Q5_K, LLM_TYPE_Q8_0, split_q5_k},
    {LLM_TYPE_Q6_K, LLM_TYPE_Q8_0, split_q6_k},
    {LLM_TYPE_Q2_K, LLM_TYPE_Q8_0, split_q2_k},
    {LLM_TYPE_Q3_K, LLM_TYPE_Q8_0, split_q3_k},
};

static const upload_type *find_upload(uint32_t type)
{
    for (size_t i = 0; i < sizeof k_uploads / sizeof k_uploads[0]; i++)
        if (k_uploads[i].type == type)
            return &k_uploads[i];
    return NULL;
}

/* The k-quants that keep a layout of their own on the device (tuning
 * kq_native): the file's super-blocks, with only what would break 16-byte
 * alignment moved apart. repack splits one super-block into the layout's
 * data and scales; NULL: rows are copied as they are (or, grouped,
 * regrouped by upload_grouped). Q5_K has the grouped layout only
 * (llm_cuda_weight_alloc sets it whatever kq_grouped says). */
typedef void (*repack_fn)(const unsigned char *blk, unsigned char *q, uint16_t *d);

/* Q6_K: ql, qh and the scales (208 bytes) stay together, d moves to the
 * scales array (210-byte blocks would misalign every other row). */
static void repack_q6_k(const unsigned char *blk, unsigned char *q, uint16_t *d)
{
    memcpy(q, blk, LLM_CUDA_Q6K_BLOCK);
    memcpy(d, blk + LLM_CUDA_Q6K_BLOCK, 2);
}

static_assert(LLM_Q4_K_BYTES == LLM_CUDA_Q4K_BLOCK && LLM_Q4_K_BYTES % 16 == 0,
              "Q4_K super-blocks are used as they are, 16-byte aligned");
static_assert(LLM_Q6_K_BYTES == LLM_CUDA_Q6K_BLOCK + 2 && LLM_CUDA_Q6K_BLOCK % 16 == 0,
              "Q6_K super-blocks lose only their d");
static_assert(LLM_Q5_K_BYTES == LLM_CUDA_Q5K_BLOCK && LLM_CUDA_Q5K_BLOCK % 16 == 0,
              "Q5_K super-blocks keep their size, regrouped");

typedef struct native_type {
    uint32_t type; /* ggml type id, also the device layout's */
    repack_fn repack;
} native_type;

static const native_type k_natives[] = {
    {LLM_TYPE_Q4_K, NULL},
    {LLM_TYPE_Q6_K, repack_q6_k},
    {LLM_TYPE_Q5_K, NULL},
};

static const native_type *find_native(const llm_cuda *c, uint32_t type)
{
    if (!c->tune.kq_native)
        return NULL;
    for (size_t i = 0; i < sizeof k_natives / sizeof k_natives[0]; i++)
        if (k_natives[i].type == type)
            return &k_natives[i];
    return NULL;
}

int llm_cuda_backend_supports_type(const struct llm_backend *be, uint32_t type)
{
    (void)be; /* every device takes the same types */
    return find_upload(type) != NULL;
}

/* ---- weights ----------------------------------------------------------- */

int llm_cuda_weight_alloc(llm_cuda *c, uint32_t type, int64_t cols,
                          int64_t rows, llm_cuda_weight *w)
{
    if (!w)
        return LLM_EINVAL;
    memset(w, 0, sizeof *w);
    LLM_CU_ENTER(c);
    const layout_info *l = find_layout(type);
    LLM_CU_ARG(c, l && cols > 0 && rows > 0);
    LLM_CU_ARG(c, cols % l->blk == 0);
    LLM_CU_ARG(c, cols <= ((int64_t)1 << 40) / rows);
    size_t nbytes = layout_row_bytes(l, cols) * (size_t)rows;
    size_t nscale = layout_row_scales(l, cols) * (size_t)rows;
    void *data = NULL, *scales = NULL;
    int rc = llm_cuda_malloc(c, nbytes, &data);
    if (rc == 0 && nscale)
        rc = llm_cuda_malloc(c, nscale * 2, &scales);
    if (rc) {
        llm_cuda_mfree(c, data);
        return rc;
    }
    w->type = type;
    w->rows = rows;
    w->cols = cols;
    w->data = data;
    w->scales = (uint16_t *)scales;
    w->bytes = nbytes + nscale * 2;
    if (l->kq == KQ_Q5K) /* its only layout */
        w->layout = LLM_CUDA_LAYOUT_GROUPED;
    return 0;
}

static void wide_drop(llm_cuda *c, const llm_cuda_weight *w);

void llm_cuda_weight_release(llm_cuda *c, llm_cuda_weight *w)
{
    if (!w)
        return;
    wide_drop(c, w);
    llm_cuda_mfree(c, w->data);
    llm_cuda_mfree(c, w->scales);
    memset(w, 0, sizeof *w);
}

/* Splits `nrows` ggml rows of a blocked type into quants and scales on the
 * host, block by block through u->split. */
static void repack_rows(const upload_type *u, const unsigned char *src, size_t row_bytes,
                        int64_t cols, int64_t nrows, int8_t *q, uint16_t *d)
{
    const llm_type_traits *tt = llm_type_find(NULL, u->type);
    int64_t nb = cols / LLM_QK8_0, per = tt->block_elems / LLM_QK8_0;
    for (int64_t r = 0; r < nrows; r++) {
        const unsigned char *blk = src + (size_t)r * row_bytes;
        for (int64_t b = 0; b < nb; b += per, blk += tt->block_bytes)
            u->split(blk, q + r * cols + b * LLM_QK8_0, &d[r * nb + b]);
    }
}

/* Where an upload puts a host matrix's rows in a device weight: host row r
 * goes to device row row0 + r * step (step 1: a plain or stacked upload;
 * step 2: rows interleaved with another matrix's). */
typedef struct row_place {
    int64_t row0, step, rows;
} row_place;

/* Host -> device rows of `bytes` each, source rows spitch apart, device
 * rows placed as pl says within an array of dpitch-byte rows. Rows with a
 * stride on the device (interleaving) are uploaded contiguously into a
 * bounded temporary device buffer and spread by a device-to-device 2D copy:
 * a strided copy straight from pageable host memory may go row by row. */
static int upload_placed(llm_cuda *c, void *dst, size_t dpitch, const void *src,
                         size_t spitch, size_t bytes, row_place pl)
{
    char *d = (char *)dst + (size_t)pl.row0 * dpitch;
    if (pl.step == 1 && spitch == bytes)
        return llm_cuda_upload(c, d, src, bytes * (size_t)pl.rows);
    if (pl.step == 1) {
        LLM_CU_TRY(c, cudaMemcpy2DAsync(d, dpitch, src, spitch, bytes, (size_t)pl.rows,
                                        cudaMemcpyHostToDevice, c->stream));
        return 0;
    }
    int64_t chunk = (int64_t)(((size_t)32 << 20) / bytes);
    chunk = chunk < 1 ? 1 : chunk > pl.rows ? pl.rows : chunk;
    void *tmp = NULL;
    int rc = llm_cuda_malloc(c, (size_t)chunk * bytes, &tmp);
    for (int64_t r0 = 0; rc == 0 && r0 < pl.rows; r0 += chunk) {
        int64_t nr = pl.rows - r0 < chunk ? pl.rows - r0 : chunk;
        row_place flat = {0, 1, nr};
        rc = upload_placed(c, tmp, bytes, (const char *)src + (size_t)r0 * spitch, spitch,
                           bytes, flat);
        cudaError_t e = cudaSuccess;
        if (rc == 0)
            e = cudaMemcpy2DAsync(d + (size_t)(r0 * pl.step) * dpitch, dpitch * (size_t)pl.step,
                                  tmp, bytes, bytes, (size_t)nr, cudaMemcpyDeviceToDevice,
                                  c->stream);
        if (e != cudaSuccess)
            rc = llm__cuda_rt_fail(c, e, "cudaMemcpy2DAsync");
    }
    llm_cuda_mfree(c, tmp); /* synchronizes: the copies from it are done */
    return rc;
}

/* Uploads quantized rows through a bounded host staging buffer. */
static int upload_quant(llm_cuda *c, const upload_type *u, const void *host,
                        size_t row_bytes, llm_cuda_weight *w, row_place pl)
{
    int64_t nb = w->cols / LLM_QK8_0;
    size_t per_row = (size_t)w->cols + (size_t)nb * 2;
    int64_t chunk = (int64_t)(((size_t)8 << 20) / per_row);
    if (chunk < 1)
        chunk = 1;
    if (chunk > pl.rows)
        chunk = pl.rows;
    unsigned char *stage = (unsigned char *)malloc((size_t)chunk * per_row);
    if (!stage)
        return llm__cuda_fail(c, LLM_ENOMEM, 0, "out of host memory");
    int rc = 0;
    for (int64_t r0 = 0; r0 < pl.rows && rc == 0; r0 += chunk) {
        int64_t nr = pl.rows - r0 < chunk ? pl.rows - r0 : chunk;
        int8_t *q = (int8_t *)stage;
        uint16_t *d = (uint16_t *)(stage + (size_t)nr * (size_t)w->cols);
        repack_rows(u, (const unsigned char *)host + (size_t)r0 * row_bytes,
                    row_bytes, w->cols, nr, q, d);
        row_place sub = {pl.row0 + r0 * pl.step, pl.step, nr};
        rc = upload_placed(c, w->data, (size_t)w->cols, q, (size_t)w->cols,
                           (size_t)w->cols, sub);
        if (rc == 0)
            rc = upload_placed(c, w->scales, (size_t)nb * 2, d, (size_t)nb * 2,
                               (size_t)nb * 2, sub);
        /* The staging buffer is refilled next: the copies from it (pageable
         * memory, staged by the runtime) have been taken by now. */
    }
    free(stage);
    return rc;
}

/* One file row of Q4_K super-blocks (nsb of them) into the grouped
 * layout (llm__q4k_grouped_vec): the same bytes, moved. */
static void group_q4k_row(const unsigned char *src, unsigned char *dst, uint16_t *d,
                          int64_t nsb)
{
    (void)d; /* Q4_K keeps d and dmin in its headers */
    for (int64_t sb = 0; sb < nsb; sb++, src += LLM_Q4_K_BYTES) {
        memcpy(dst + 128 * nsb + 16 * sb, src, 16);
        for (int v = 0; v < 8; v++)
            memcpy(dst + 16 * llm__q4k_grouped_vec(nsb, sb, v), src + 16 + 16 * v, 16);
    }
}

/* One file row of Q5_K super-blocks (d, dmin, scales, qh[32], qs[128])
 * into its grouped layout: the nibbles and headers where the grouped Q4_K
 * layout has them, then per super-block the fifth bits, 8 bytes per
 * sub-block pair p (llm__q5k_bits). */
static void group_q5k_row(const unsigned char *src, unsigned char *dst, int64_t nsb)
{
    for (int64_t sb = 0; sb < nsb; sb++, src += LLM_Q5_K_BYTES) {
        const unsigned char *qh = src + 16;
        unsigned char *bits = dst + 144 * nsb + 32 * sb;
        memcpy(dst + 128 * nsb + 16 * sb, src, 16);
        for (int v = 0; v < 8; v++)
            memcpy(dst + 16 * llm__q4k_grouped_vec(nsb, sb, v), src + 48 + 16 * v, 16);
        memset(bits, 0, 32);
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++) {
                int h = l / 16, w = (l % 16) / 4, k = l % 4;
                int b0 = (qh[l] >> (2 * p)) & 1, b1 = (qh[l] >> (2 * p + 1)) & 1;
                bits[8 * p + 4 * h + k] |= (unsigned char)(b0 << w | b1 << (4 + w));
            }
    }
}

/* One file row of Q6_K super-blocks into the grouped layout
 * (llm__q6k_grouped_vec), each d into d[sb]. */
static void group_q6k_row(const unsigned char *src, unsigned char *dst, uint16_t *d,
                          int64_t nsb)
{
    for (int64_t sb = 0; sb < nsb; sb++, src += LLM_Q6_K_BYTES) {
        for (int u = 0; u < 4; u++) {
            int h = u >> 1, t = u & 1;
            memcpy(dst + 16 * llm__q6k_grouped_vec(nsb, sb, 0, u), src + 64 * h + 16 * t, 16);
            memcpy(dst + 16 * llm__q6k_grouped_vec(nsb, sb, 1, u), src + 64 * h + 32 + 16 * t,
                   16);
            memcpy(dst + 16 * llm__q6k_grouped_vec(nsb, sb, 2, u), src + 128 + 32 * h + 16 * t,
                   16);
        }
        memcpy(dst + 192 * nsb + 16 * sb, src + 192, 16);
        memcpy(&d[sb], src + LLM_CUDA_Q6K_BLOCK, 2);
    }
}

/* Native k-quant rows into the grouped layout through a bounded staging
 * buffer: data rows of rb bytes, then (Q6_K) their fp16 d. */
static int upload_grouped(llm_cuda *c, const layout_info *l, const void *host,
                          size_t row_bytes, llm_cuda_weight *w, row_place pl)
{
    int64_t nsb = w->cols / LLM_QK_K;
    size_t rb = layout_row_bytes(l, w->cols), rs = layout_row_scales(l, w->cols) * 2;
    int64_t chunk = (int64_t)(((size_t)8 << 20) / (rb + rs));
    chunk = chunk < 1 ? 1 : chunk > pl.rows ? pl.rows : chunk;
    unsigned char *stage = (unsigned char *)malloc((size_t)chunk * (rb + rs));
    if (!stage)
        return llm__cuda_fail(c, LLM_ENOMEM, 0, "out of host memory");
    int rc = 0;
    for (int64_t r0 = 0; r0 < pl.rows && rc == 0; r0 += chunk) {
        int64_t nr = pl.rows - r0 < chunk ? pl.rows - r0 : chunk;
        uint16_t *d = (uint16_t *)(stage + (size_t)nr * rb);
        for (int64_t r = 0; r < nr; r++) {
            const unsigned char *src = (const unsigned char *)host + (size_t)(r0 + r) * row_bytes;
            if (l->kq == KQ_Q4K)
                group_q4k_row(src, stage + (size_t)r * rb, NULL, nsb);
            else if (l->kq == KQ_Q5K)
                group_q5k_row(src, stage + (size_t)r * rb, nsb);
            else
                group_q6k_row(src, stage + (size_t)r * rb, d + r * nsb, nsb);
        }
        row_place sub = {pl.row0 + r0 * pl.step, pl.step, nr};
        rc = upload_placed(c, w->data, rb, stage, rb, rb, sub);
        if (rc == 0 && rs)
            rc = upload_placed(c, w->scales, rs, d, rs, rs, sub);
        /* upload_placed's copies from pageable memory have taken the
         * staging bytes before it returns */
    }
    free(stage);
    return rc;
}

/* Uploads native k-quant rows, through a bounded host staging buffer when
 * their blocks are repacked. */
static int upload_native(llm_cuda *c, const native_type *nt, const void *host,
                         size_t row_bytes, llm_cuda_weight *w, row_place pl)
{
    const layout_info *l = find_layout(nt->type);
    size_t rb = layout_row_bytes(l, w->cols), rs = layout_row_scales(l, w->cols) * 2;
    if (w->layout == LLM_CUDA_LAYOUT_GROUPED)
        return upload_grouped(c, l, host, row_bytes, w, pl);
    if (!nt->repack)
        return upload_placed(c, w->data, rb, host, row_bytes, rb, pl);
    int64_t nb = w->cols / l->blk;
    int64_t chunk = (int64_t)(((size_t)8 << 20) / (rb + rs));
    chunk = chunk < 1 ? 1 : chunk > pl.rows ? pl.rows : chunk;
    unsigned char *stage = (unsigned char *)malloc((size_t)chunk * (rb + rs));
    if (!stage)
        return llm__cuda_fail(c, LLM_ENOMEM, 0, "out of host memory");
    const llm_type_traits *tt = llm_type_find(NULL, nt->type);
    int rc = 0;
    for (int64_t r0 = 0; r0 < pl.rows && rc == 0; r0 += chunk) {
        int64_t nr = pl.rows - r0 < chunk ? pl.rows - r0 : chunk;
        unsigned char *q = stage;
        uint16_t *d = (uint16_t *)(stage + (size_t)nr * rb);
        for (int64_t r = 0; r < nr; r++) {
            const unsigned char *blk = (const unsigned char *)host + (size_t)(r0 + r) * row_bytes;
            for (int64_t b = 0; b < nb; b++, blk += tt->block_bytes)
                nt->repack(blk, q + (size_t)r * rb + (size_t)b * l->blk_bytes, d + r * nb + b);
        }
        row_place sub = {pl.row0 + r0 * pl.step, pl.step, nr};
        rc = upload_placed(c, w->data, rb, q, rb, rb, sub);
        if (rc == 0)
            rc = upload_placed(c, w->scales, rs, d, rs, rs, sub);
    }
    free(stage);
    return rc;
}

/* Bytes of one ggml row of `type` with `cols` elements (the type's traits,
 * quant.h); 0 when the type is not uploadable or cols does not fit its
 * blocks. */
static uint64_t file_row_bytes(uint32_t type, int64_t cols)
{
    const llm_type_traits *tt = llm_type_find(NULL, type);
    uint64_t bytes;
    if (!find_upload(type) || !tt || cols <= 0 ||
        llm_type_traits_row_bytes(tt, (uint64_t)cols, &bytes) != 0)
        return 0;
    return bytes;
}

/* Checks one host matrix of `type` with `cols` columns and row_bytes-byte
 * rows; the bytes of its rows on the device (0 when unsupported). */
static int part_ok(llm_cuda *c, uint32_t type, int64_t cols, size_t row_bytes)
{
    uint64_t need = file_row_bytes(type, cols);
    if (need == 0 || need > row_bytes)
        return llm__cuda_fail(c, LLM_EINVAL, 0,
                              "weight upload: type %u with %lld columns and "
                              "%zu-byte rows is not supported", type,
                              (long long)cols, row_bytes);
    return 0;
}

/* Uploads one host matrix into the rows pl names of an allocated weight. */
static int upload_part(llm_cuda *c, const upload_type *u, const void *host, size_t row_bytes,
                       llm_cuda_weight *w, row_place pl)
{
    if (u->split)
        return upload_quant(c, u, host, row_bytes, w, pl);
    size_t need = (size_t)file_row_bytes(u->type, w->cols);
    return upload_placed(c, w->data, need, host, row_bytes, need, pl);
}

int llm_cuda_weight_upload(llm_cuda *c, uint32_t type, const void *host,
                           int64_t cols, int64_t rows, size_t row_bytes,
                           llm_cuda_weight *w)
{
    llm_cuda_weight_part p = {host, rows, row_bytes};
    return llm_cuda_weight_upload_parts(c, type, cols, &p, 1, 0, w);
}

/* Whether the parts' types are not all one. */
static int types_mixed(const uint32_t *types, int count)
{
    for (int i = 1; i < count; i++)
        if (types[i] != types[0])
            return 1;
    return 0;
}

int llm_cuda_weight_types_stack(const uint32_t *types, int count)
{
    if (!types || count <= 0)
        return 0;
    if (!types_mixed(types, count))
        return find_upload(types[0]) != NULL;
    for (int i = 0; i < count; i++) {
        const upload_type *u = find_upload(types[i]);
        if (!u || u->dtype != LLM_TYPE_Q8_0)
            return 0;
    }
    return 1;
}

int llm_cuda_weight_upload_mixed(llm_cuda *c, const uint32_t *types, int64_t cols,
                                 const llm_cuda_weight_part *parts, int count,
                                 int interleave, llm_cuda_weight *w)
{
    if (!w)
        return LLM_EINVAL;
    memset(w, 0, sizeof *w);
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, types && parts && count > 0 && count <= 16 && cols > 0);
    LLM_CU_ARG(c, llm_cuda_weight_types_stack(types, count));
    int mixed = types_mixed(types, count);
    int64_t rows = 0;
    for (int i = 0; i < count; i++) {
        LLM_CU_ARG(c, parts[i].host && parts[i].rows > 0);
        LLM_CU_ARG(c, !interleave || parts[i].rows == parts[0].rows);
        LLM_CU_ARG(c, parts[i].rows <= ((int64_t)1 << 40) - rows);
        int rc = part_ok(c, types[i], cols, parts[i].row_bytes);
        if (rc)
            return rc;
        rows += parts[i].rows;
    }
    /* Mixed parts: every one through its Q8 layout split (types_stack). */
    const native_type *nt = mixed ? NULL : find_native(c, types[0]);
    int rc = llm_cuda_weight_alloc(c, nt ? nt->type : find_upload(types[0])->dtype, cols,
                                   rows, w);
    if (rc)
        return rc;
    if (nt && c->tune.kq_grouped >= 1)
        w->layout = LLM_CUDA_LAYOUT_GROUPED;
    int64_t row0 = 0;
    for (int i = 0; i < count && rc == 0; i++) {
        row_place pl = {interleave ? i : row0, interleave ? count : 1, parts[i].rows};
        rc = nt ? upload_native(c, nt, parts[i].host, parts[i].row_bytes, w, pl)
                : upload_part(c, find_upload(types[i]), parts[i].host, parts[i].row_bytes, w,
                              pl);
        row0 += parts[i].rows;
    }
    if (rc == 0)
        rc = llm_cuda_sync(c); /* the staging buffer and mapping may go now */
    if (rc)
        llm_cuda_weight_release(c, w);
    return rc;
}

int llm_cuda_weight_upload_parts(llm_cuda *c, uint32_t type, int64_t cols,
                                 const llm_cuda_weight_part *parts, int count,
                                 int interleave, llm_cuda_weight *w)
{
    uint32_t types[16];
    if (count > 0 && count <= 16)
        for (int i = 0; i < count; i++)
            types[i] = type;
    else
        types[0] = type; /* the count check refuses it */
    return llm_cuda_weight_upload_mixed(c, types, cols, parts, count, interleave, w);
}

llm_cuda_weight llm_cuda_weight_rows(const llm_cuda_weight *w, int64_t row0, int64_t rows)
{
    llm_cuda_weight v = *w;
    const layout_info *l = find_layout(w->type);
    size_t rb = l ? layout_row_bytes(l, w->cols) : 0, rs = l ? layout_row_scales(l, w->cols) : 0;
    v.data = (char *)w->data + (size_t)row0 * rb;
    v.scales = w->scales ? w->scales + (size_t)row0 * rs : NULL;
    v.rows = rows;
    v.bytes = (size_t)rows * (rb + rs * 2);
    return v;
}

/* ---- matrix-vector ----------------------------------------------------- */

/* A 16-byte weight load that bypasses L1: each weight byte is used once, and
 * L1 is better left to the activations every warp re-reads. */
__device__ __forceinline__ uint4 ld_stream(const uint4 *p)
{
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

/* Expands one 16-byte weight vector into floats (Q8_0: unscaled quants). */
template <int WT>
__device__ __forceinline__ void unpack(uint4 v, float *f)
{
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
    if (WT == WT_F32) {
#pragma unroll
        for (int i = 0; i < 4; i++)
            f[i] = __uint_as_float(u[i]);
    } else if (WT == WT_BF16) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[2 * i] = __uint_as_float(u[i] << 16);
            f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
        }
    } else if (WT == WT_F16) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            __half2 h = *reinterpret_cast<const __half2 *>(&u[i]);
            float2 t = __half22float2(h);
            f[2 * i] = t.x;
            f[2 * i + 1] = t.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 16; i++)
            f[i] = (float)(int8_t)(u[i >> 2] >> (8 * (i & 3)));
    }
}

/* acc[v] += dot(weight chunk j, x[v] chunk j) for every activation row. */
template <int WT, int NV>
__device__ __forceinline__ void chunk_dot(uint4 wv, int64_t j, const float *__restrict__ x,
                                          int64_t cols, const uint16_t *__restrict__ srow,
                                          float *acc)
{
    constexpr int CH = wt_info<WT>::chunk;
    float wf[CH];
    unpack<WT>(wv, wf);
    float scale = 1.0f;
    if (WT == WT_Q8)
        scale = __half2float(__ushort_as_half(__ldg(srow + (j * CH) / LLM_QK8_0)));
#pragma unroll
    for (int v = 0; v < NV; v++) {
        const float4 *xv = reinterpret_cast<const float4 *>(x + v * cols + j * CH);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < CH / 4; i++) {
            float4 a = __ldg(xv + i);
            s = fmaf(wf[4 * i], a.x, s);
            s = fmaf(wf[4 * i + 1], a.y, s);
            s = fmaf(wf[4 * i + 2], a.z, s);
            s = fmaf(wf[4 * i + 3], a.w, s);
        }
        acc[v] = fmaf(s, scale, acc[v]);
    }
}

/* Before a dependent launch's wait: asks L2 for the `batches` loads of
 * U x 32 vectors that follow the batch already loaded into registers, one
 * lane per 128-byte line. Weights never depend on an earlier kernel. */
template <int U>
__device__ __forceinline__ void mv_prefetch(const uint4 *wr, int lane, int64_t nch,
                                            int batches)
{
    if (lane & 7)
        return;
    for (int b = 1; b <= batches; b++)
#pragma unroll
        for (int u = 0; u < U; u++) {
            int64_t idx = lane + ((int64_t)b * U + u) * 32;
            if (idx < nch)
                llm__prefetch_l2(wr + idx);
        }
}

#define MV_WARPS 4
#define MV_UNROLL 4

/* y[v][row] = dot(W[row], x[v]) (plus y[v][row] when acc_out); one warp per
 * row, MV_WARPS rows a block. The first unrolled batch of weights is loaded
 * before the dependent-launch wait, so with programmatic dependent launch
 * the weight stream starts while the previous kernel drains.
 * Preconditions (checked by the launcher): cols is a multiple of the chunk,
 * rows start 16-byte aligned, x is 16-byte aligned. */
template <int WT, int NV>
__global__ void __launch_bounds__(MV_WARPS * 32)
matvec_kernel(const void *__restrict__ w, const uint16_t *__restrict__ scales,
              const float *__restrict__ x, float *__restrict__ y, int64_t rows,
              int64_t cols, int acc_out, int prefetch)
{
    constexpr int CH = wt_info<WT>::chunk;
    int lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (row >= rows)
        return; /* touches nothing; the grid's other warps wait */
    const uint4 *wr = reinterpret_cast<const uint4 *>(
        (const char *)w + row * cols * wt_info<WT>::bytes);
    const uint16_t *srow = WT == WT_Q8 ? scales + row * (cols / LLM_QK8_0) : nullptr;
    int64_t nch = cols / CH;
    uint4 wv[MV_UNROLL];
    bool first = lane + (MV_UNROLL - 1) * 32 < nch;
    if (first)
#pragma unroll
        for (int u = 0; u < MV_UNROLL; u++)
            wv[u] = ld_stream(wr + lane + u * 32);
    mv_prefetch<MV_UNROLL>(wr, lane, nch, prefetch);
    llm__pdl_wait();
    float acc[NV];
#pragma unroll
    for (int v = 0; v < NV; v++)
        acc[v] = 0.0f;
    int64_t j = lane;
    if (first) {
#pragma unroll
        for (int u = 0; u < MV_UNROLL; u++)
            chunk_dot<WT, NV>(wv[u], j + u * 32, x, cols, srow, acc);
        j += MV_UNROLL * 32;
    }
    for (; j + (MV_UNROLL - 1) * 32 < nch; j += MV_UNROLL * 32) {
#pragma unroll
        for (int u = 0; u < MV_UNROLL; u++)
            wv[u] = ld_stream(wr + j + u * 32);
#pragma unroll
        for (int u = 0; u < MV_UNROLL; u++)
            chunk_dot<WT, NV>(wv[u], j + u * 32, x, cols, srow, acc);
    }
    for (; j < nch; j += 32)
        chunk_dot<WT, NV>(ld_stream(wr + j), j, x, cols, srow, acc);
    llm__pdl_trigger();
#pragma unroll
    for (int v = 0; v < NV; v++) {
        float s = llm__warp_sum(acc[v]);
        if (lane == 0)
            y[v * rows + row] = acc_out ? y[v * rows + row] + s : s;
    }
}

__device__ __forceinline__ float weight_at(const void *w, const uint16_t *scales,
                                           int type, int64_t row, int64_t cols,
                                           int64_t i)
{
    int64_t e = row * cols + i;
    switch (type) {
    case LLM_TYPE_F32: return ((const float *)w)[e];
    case LLM_TYPE_F16: return __half2float(((const __half *)w)[e]);
    case LLM_TYPE_BF16: return __bfloat162float(((const __nv_bfloat16 *)w)[e]);
    case LLM_TYPE_Q4_K:
    case LLM__Q4K_GROUPED:
    case LLM_TYPE_Q6_K:
    case LLM__Q6K_GROUPED:
    case LLM__Q5K_GROUPED: return llm__kq_at(w, scales, type, row, cols, i);
    default:
        return (float)((const int8_t *)w)[e] *
               __half2float(__ushort_as_half(scales[row * (cols / LLM_QK8_0) + i / LLM_QK8_0]));
    }
}

/* The general path for shapes the vector kernel cannot take (odd widths,
 * unaligned activations): element by element, still a warp per row.
 * Launched in plain stream order. */
__global__ void matvec_any_kernel(const void *__restrict__ w,
                                  const uint16_t *__restrict__ scales, int type,
                                  const float *__restrict__ x, float *__restrict__ y,
                                  int64_t rows, int64_t cols, int nv, int acc_out)
{
    int lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (row >= rows)
        return;
    for (int v = 0; v < nv; v++) {
        float s = 0.0f;
        for (int64_t i = lane; i < cols; i += 32)
            s = fmaf(weight_at(w, scales, type, row, cols, i), x[v * cols + i], s);
        s = llm__warp_sum(s);
        if (lane == 0)
            y[v * rows + row] = acc_out ? y[v * rows + row] + s : s;
    }
}

template <int WT>
static cudaError_t launch_vec(const llm_cuda *c, const llm_cuda_weight *w, const float *x,
                              int32_t n, float *y, int acc_out)
{
    dim3 grid(llm__cuda_blocks((size_t)w->rows, MV_WARPS)), b(MV_WARPS * 32);
    int pf = c->tune.mv_prefetch;
#define LLM_MV_CASE(NV)                                                         \
    case NV:                                                                    \
        return llm__launch(c, matvec_kernel<WT, NV>, grid, b, 0, w->data,       \
                           w->scales, x, y, w->rows, w->cols, acc_out, pf);
    switch (n) {
        LLM_MV_CASE(1) LLM_MV_CASE(2) LLM_MV_CASE(3) LLM_MV_CASE(4)
        LLM_MV_CASE(5) LLM_MV_CASE(6) LLM_MV_CASE(7) LLM_MV_CASE(8)
    default: return cudaErrorInvalidValue;
    }
#undef LLM_MV_CASE
}

typedef cudaError_t (*vec_launch_fn)(const llm_cuda *c, const llm_cuda_weight *w,
                                     const float *x, int32_t n, float *y, int acc_out);

/* The vector kernels per device layout, by WT_*. */
static const vec_launch_fn k_vec_launch[WT_COUNT] = {
    launch_vec<WT_F32>, launch_vec<WT_F16>, launch_vec<WT_BF16>, launch_vec<WT_Q8>};

static int matvec(llm_cuda *c, const llm_cuda_weight *w, const float *x,
                  int32_t n, float *y, int acc_out)
{
    const layout_info *l = find_layout(w->type); /* matmul: weight_ok */
    int vec = w->cols % l->chunk == 0 && ((uintptr_t)x & 15) == 0 &&
              ((uintptr_t)w->data & 15) == 0;
    if (!vec) {
        matvec_any_kernel<<<llm__cuda_blocks((size_t)w->rows, MV_WARPS),
                            MV_WARPS * 32, 0, c->stream>>>(
            w->data, w->scales, llm__weight_code(w), x, y, w->rows, w->cols, n, acc_out);
        LLM_CU_LAUNCHED(c, "matvec_any_kernel");
        return 0;
    }
    LLM_CU_TRY(c, k_vec_launch[l->wt](c, w, x, n, y, acc_out));
    LLM_CU_LAUNCHED(c, "matvec_kernel");
    return 0;
}

/* ---- fused decode matrix-vector ---------------------------------------- */

/* The decode step's small kernels between the products cost more than their
 * work (each a launch and a drain of the GPU); these variants fold them into
 * the product: RMSNorm (the weight applied to x on the fly, the 1/rms scale
 * to the finished dot products: W (x * inv * g) = inv * W (x * g), so the sum
 * of squares is gathered from the x chunks the main loop reads anyway and no
 * block waits on a reduction before streaming weights), a residual-add
 * epilogue (y += W x), SwiGLU over interleaved gate/up rows (a warp computes
 * rows 2p and 2p+1 and writes silu(g) * u), and RoPE with the KV-cache
 * store over stacked q/k/v rows (a warp's two rows are one rotated pair,
 * since heads have even width). */
enum { MV_NORM = LLM_CUDA_MV_NORM, MV_ACC = LLM_CUDA_MV_ACCUMULATE,
       MV_PAIRS = LLM_CUDA_MV_SWIGLU_PAIRS, MV_ROPE = LLM_CUDA_MV_ROPE_STORE };

#define MVF_WARPS 8

/* acc[r] += dot(weight chunk j of row r, x * g) for the R rows of a warp,
 * reading x (and g) once for all of them; ss += x . x over the chunk when
 * normalizing. */
template <int WT, int FLAGS, int R>
__device__ __forceinline__ void fused_chunk(const uint4 *wv, int64_t j,
                                            const float *__restrict__ x,
                                            const float *__restrict__ g,
                                            const uint16_t *const *sr, float *acc, float &ss)
{
    constexpr int CH = wt_info<WT>::chunk;
    float wf[R][CH];
#pragma unroll
    for (int r = 0; r < R; r++)
        unpack<WT>(wv[r], wf[r]);
    const float4 *xv = reinterpret_cast<const float4 *>(x + j * CH);
    const float4 *gv = reinterpret_cast<const float4 *>(g + j * CH);
    float s[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        s[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < CH / 4; i++) {
        float4 a = __ldg(xv + i);
        if (FLAGS & MV_NORM) {
            ss = fmaf(a.x, a.x, fmaf(a.y, a.y, fmaf(a.z, a.z, fmaf(a.w, a.w, ss))));
            float4 b = __ldg(gv + i);
            a.x *= b.x;
            a.y *= b.y;
            a.z *= b.z;
            a.w *= b.w;
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            s[r] = fmaf(wf[r][4 * i], a.x, s[r]);
            s[r] = fmaf(wf[r][4 * i + 1], a.y, s[r]);
            s[r] = fmaf(wf[r][4 * i + 2], a.z, s[r]);
            s[r] = fmaf(wf[r][4 * i + 3], a.w, s[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (WT == WT_Q8)
            s[r] *= __half2float(__ushort_as_half(__ldg(sr[r] + (j * CH) / LLM_QK8_0)));
        acc[r] += s[r];
    }
}

/* Rows per warp: two whenever an epilogue pairs rows or the norm's x
 * traffic is worth sharing. */
template <int FLAGS> struct fused_rows {
    static constexpr int value = (FLAGS & (MV_NORM | MV_PAIRS | MV_ROPE)) ? 2 : 1;
};

/* The RoPE + cache-store epilogue for rows e, e+1 (e even) of stacked q/k/v
 * values a, b: the arithmetic of rope_qkv_store_kernel. */
__device__ __forceinline__ void rope_store_pair(const llm_cuda_rope_store &rp, int64_t e,
                                                float a, float b, float *__restrict__ y)
{
    int32_t hd = rp.head_dim;
    int64_t qd = (int64_t)rp.n_heads * hd, kd = (int64_t)rp.n_kv_heads * hd;
    uint32_t p = llm__base_pos(rp.pos);
    if (e >= qd + kd) { /* v */
        y[e] = a;
        y[e + 1] = b;
        float *vr = rp.v_cache + (size_t)p * (size_t)kd + (size_t)(e - qd - kd);
        vr[0] = a;
        vr[1] = b;
        return;
    }
    int32_t i = (int32_t)(e % hd) / 2;
    double angle = ((double)p * (double)rp.scale) * rp.inv_freq[i];
    double sd, cd;
    sincos(angle, &sd, &cd);
    float s = (float)sd, co = (float)cd;
    float x0 = a * co - b * s, x1 = a * s + b * co;
    y[e] = x0;
    y[e + 1] = x1;
    if (e >= qd) {
        float *kr = rp.k_cache + (size_t)p * (size_t)kd + (size_t)(e - qd);
        kr[0] = x0;
        kr[1] = x1;
    }
}

/* Activation row blockIdx.y of a product over several rows
 * (llm_cuda_matvec_fused_rows): its input row, its output row and its
 * position, so that every row runs exactly the one-row arithmetic. Row 0
 * (every one-row launch) is unchanged. */
#define MV_ROW_OFFSET(FLAGS, x, y, rp, rows, cols)                                    \
    do {                                                                            \
        size_t r_ = blockIdx.y;                                                     \
        x += r_ * (size_t)(cols);                                                   \
        y += r_ * (size_t)(((FLAGS) & MV_PAIRS) ? (rows) / 2 : (rows));             \
        rp.pos.pos0 += (uint32_t)r_;                                                \
    } while (0)

/* The sums of a fused warp's R rows from the lanes' partial dot products
 * acc and sum of squares ss: the warp sums and the RMSNorm scale, in
 * every lane (each lane's own association of the sums: the rows' values
 * are lane 0's). */
template <int FLAGS, int R>
__device__ __forceinline__ void fused_sums(float *acc, float ss, int64_t cols, float eps)
{
#pragma unroll
    for (int r = 0; r < R; r++)
        acc[r] = llm__warp_sum(acc[r]);
    if (FLAGS & MV_NORM) {
        /* The lanes read every chunk of x once: ss is the whole row's. */
        float inv = 1.0f / sqrtf(llm__warp_sum(ss) / (float)cols + eps);
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[r] = __fmul_rn(acc[r], inv); /* never fused with fused_store's add */
    }
}

/* The end of R rows from row0 (nr of them real) with values acc: RoPE and
 * the cache store, SwiGLU, or a plain (accumulating) store, as FLAGS say.
 * One lane. */
template <int FLAGS, int R>
__device__ __forceinline__ void fused_store(const llm_cuda_rope_store &rp, float *__restrict__ y,
                                            int64_t row0, int nr, const float *acc)
{
    if (FLAGS & MV_ROPE) {
        rope_store_pair(rp, row0, acc[0], acc[R - 1], y);
    } else if (FLAGS & MV_PAIRS) {
        float h = acc[0] / (1.0f + expf(-acc[0])) * acc[R - 1];
        y[row0 / 2] = (FLAGS & MV_ACC) ? y[row0 / 2] + h : h;
    } else {
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < nr)
                y[row0 + r] = (FLAGS & MV_ACC) ? __fadd_rn(y[row0 + r], acc[r]) : acc[r];
    }
}

template <int WT, int FLAGS>
__global__ void __launch_bounds__(MVF_WARPS * 32)
matvec_fused_kernel(const void *__restrict__ w, const uint16_t *__restrict__ scales,
                    const float *__restrict__ x, const float *__restrict__ g, float eps,
                    float *__restrict__ y, int64_t rows, int64_t cols, int prefetch,
                    llm_cuda_rope_store rp)
{
    constexpr int CH = wt_info<WT>::chunk;
    constexpr int R = fused_rows<FLAGS>::value;
    constexpr int U = R == 2 ? 2 : MV_UNROLL;
    MV_ROW_OFFSET(FLAGS, x, y, rp, rows, cols);
    int lane = threadIdx.x & 31;
    int64_t row0 = ((int64_t)blockIdx.x * MVF_WARPS + (threadIdx.x >> 5)) * R;
    if (row0 >= rows)
        return; /* touches nothing; the grid's other warps wait */
    /* An odd last row (no pairing) repeats row0 and is not stored. */
    int nr = row0 + 1 < rows ? R : 1;
    const uint4 *wr[R];
    const uint16_t *sr[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        int64_t row = r < nr ? row0 + r : row0;
        wr[r] = reinterpret_cast<const uint4 *>((const char *)w +
                                                row * cols * wt_info<WT>::bytes);
        sr[r] = WT == WT_Q8 ? scales + row * (cols / LLM_QK8_0) : nullptr;
    }
    int64_t nch = cols / CH;
    /* Weights do not depend on the previous kernel: start streaming them
     * before waiting for it. */
    uint4 wv[U][R];
    bool first = lane + (U - 1) * 32 < nch;
    if (first)
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++)
                wv[u][r] = ld_stream(wr[r] + lane + u * 32);
#pragma unroll
    for (int r = 0; r < R; r++)
        mv_prefetch<U>(wr[r], lane, nch, prefetch);
    llm__pdl_wait();
    float acc[R], ss = 0.0f;
#pragma unroll
    for (int r = 0; r < R; r++)
        acc[r] = 0.0f;
    int64_t j = lane;
    if (first) {
#pragma unroll
        for (int u = 0; u < U; u++)
            fused_chunk<WT, FLAGS, R>(wv[u], j + u * 32, x, g, sr, acc, ss);
        j += U * 32;
    }
    for (; j + (U - 1) * 32 < nch; j += U * 32) {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++)
                wv[u][r] = ld_stream(wr[r] + j + u * 32);
#pragma unroll
        for (int u = 0; u < U; u++)
            fused_chunk<WT, FLAGS, R>(wv[u], j + u * 32, x, g, sr, acc, ss);
    }
    for (; j < nch; j += 32) {
        uint4 w1[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            w1[r] = ld_stream(wr[r] + j);
        fused_chunk<WT, FLAGS, R>(w1, j, x, g, sr, acc, ss);
    }
    llm__pdl_trigger();
    fused_sums<FLAGS, R>(acc, ss, cols, eps);
    if (lane == 0)
        fused_store<FLAGS, R>(rp, y, row0, nr, acc);
}

/* ---- weight-stationary products over several activation rows ----------- */

/* A verify of n rows (llm_cuda_matvec_fused_rows) through the one-row
 * kernels re-runs their whole grid per row (a grid row per activation
 * row): every row pays the weights' stream from L2 and, for the int8
 * kernel, the block's quantization again. The kernels below keep the
 * one-row grid and give each warp a group of up to MV_GROUP activation
 * rows (grid row blockIdx.y takes rows r0 .. r0 + nv - 1): a weight batch
 * loaded once is multiplied with every row of the group. Per row, each
 * lane meets the same chunks in the same order, the warp, split-K and
 * norm reductions are the one-row kernel's, and the epilogue is the same
 * code, so row r has exactly the bits of a one-row launch on x[r] at
 * position pos0 + r (tests/cuda/test_loop.c rows_stationary). */
#define MV_GROUP LLM_CUDA_ROWS_GROUP_MAX

/* The first row and the row count of grid row blockIdx.y's group: groups
 * of `per` rows, the last one shorter. */
__device__ __forceinline__ int32_t mv_group_rows(int32_t n, int32_t per, int32_t &r0)
{
    r0 = (int32_t)blockIdx.y * per;
    return n - r0 < per ? n - r0 : per;
}

/* Rows per group of a weight-stationary product over c->mv_rows
 * activation rows in fixed groups, each row needing row_smem bytes of
 * shared memory (0: none), and the groups (*groups, the grid's y extent);
 * 0 when each row re-runs the one-row grid instead: one row,
 * llm__rows_stationary off, fewer than LLM_CUDA_FIXED_GROUP_ROWS rows in
 * auto, or fewer than two rows' activations fit the shared memory beside
 * the kernel's own 2 KB. Groups are as even as they can be (17 rows: 6,
 * 6, 5). */
static int32_t mv_group_per(const llm_cuda *c, size_t row_smem, unsigned *groups)
{
    int32_t n = c->mv_rows, cap = MV_GROUP;
    if (n < 2 || !llm__rows_stationary(c, n) ||
        (c->tune.rows_stationary == 2 && n < LLM_CUDA_FIXED_GROUP_ROWS))
        return 0;
    if (row_smem) {
        size_t fit = (48 * 1024 - 2048) / row_smem;
        if (fit < (size_t)cap)
            cap = (int32_t)fit;
    }
    if (cap < 2)
        return 0;
    int32_t g = (n + cap - 1) / cap;
    *groups = (unsigned)g;
    return (n + g - 1) / g;
}

/* matvec_fused_kernel over a group of nv <= NV activation rows: each
 * weight batch a warp loads meets every row of the group, chunk by chunk
 * in the one-row order (x of row v at x + v * cols, its sum of squares in
 * ss[v]). */
template <int WT, int FLAGS, int NV>
__global__ void __launch_bounds__(MVF_WARPS * 32)
matvec_fused_rows_kernel(const void *__restrict__ w, const uint16_t *__restrict__ scales,
                         const float *__restrict__ x, const float *__restrict__ g, float eps,
                         float *__restrict__ y, int64_t rows, int64_t cols, int prefetch,
                         llm_cuda_rope_store rp, int32_t n, int32_t per)
{
    constexpr int CH = wt_info<WT>::chunk;
    constexpr int R = fused_rows<FLAGS>::value;
    constexpr int U = R == 2 ? 2 : MV_UNROLL;
    int32_t r0;
    int nv = mv_group_rows(n, per, r0);
    int64_t yw = (FLAGS & MV_PAIRS) ? rows / 2 : rows;
    x += (size_t)r0 * (size_t)cols;
    y += (size_t)r0 * (size_t)yw;
    rp.pos.pos0 += (uint32_t)r0;
    int lane = threadIdx.x & 31;
    int64_t row0 = ((int64_t)blockIdx.x * MVF_WARPS + (threadIdx.x >> 5)) * R;
    if (row0 >= rows)
        return; /* touches nothing; the grid's other warps wait */
    int nr = row0 + 1 < rows ? R : 1;
    const uint4 *wr[R];
    const uint16_t *sr[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        int64_t row = r < nr ? row0 + r : row0;
        wr[r] = reinterpret_cast<const uint4 *>((const char *)w +
                                                row * cols * wt_info<WT>::bytes);
        sr[r] = WT == WT_Q8 ? scales + row * (cols / LLM_QK8_0) : nullptr;
    }
    int64_t nch = cols / CH;
    uint4 wv[U][R];
    bool first = lane + (U - 1) * 32 < nch;
    if (first)
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++)
                wv[u][r] = ld_stream(wr[r] + lane + u * 32);
#pragma unroll
    for (int r = 0; r < R; r++)
        mv_prefetch<U>(wr[r], lane, nch, prefetch);
    llm__pdl_wait();
    /* Every slot runs (rows past nv repeat row nv - 1, unused): no branch
     * keeps the rows' work from overlapping. */
    const float *xr[NV];
    float acc[NV][R], ss[NV];
#pragma unroll
    for (int v = 0; v < NV; v++) {
        xr[v] = x + (v < nv ? v : nv - 1) * cols;
        ss[v] = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[v][r] = 0.0f;
    }
    int64_t j = lane;
    if (first) {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int v = 0; v < NV; v++)
                fused_chunk<WT, FLAGS, R>(wv[u], j + u * 32, xr[v], g, sr, acc[v], ss[v]);
        j += U * 32;
    }
    for (; j + (U - 1) * 32 < nch; j += U * 32) {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++)
                wv[u][r] = ld_stream(wr[r] + j + u * 32);
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int v = 0; v < NV; v++)
                fused_chunk<WT, FLAGS, R>(wv[u], j + u * 32, xr[v], g, sr, acc[v], ss[v]);
    }
    for (; j < nch; j += 32) {
        uint4 w1[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            w1[r] = ld_stream(wr[r] + j);
#pragma unroll
        for (int v = 0; v < NV; v++)
            fused_chunk<WT, FLAGS, R>(w1, j, xr[v], g, sr, acc[v], ss[v]);
    }
    llm__pdl_trigger();
    /* Row v's values are lane 0's sums, as the one-row kernel stores them;
     * lane v takes them, so the rows' epilogues run side by side. */
    float a[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        a[r] = 0.0f;
#pragma unroll
    for (int v = 0; v < NV; v++) {
        fused_sums<FLAGS, R>(acc[v], ss[v], cols, eps);
#pragma unroll
        for (int r = 0; r < R; r++) {
            float t = __shfl_sync(0xffffffffu, acc[v][r], 0);
            a[r] = lane == v ? t : a[r];
        }
    }
    if (lane < nv) {
        llm_cuda_rope_store rv = rp;
        rv.pos.pos0 += (uint32_t)lane;
        fused_store<FLAGS, R>(rv, y + lane * yw, row0, nr, a);
    }
}

template <int WT, int FLAGS>
static cudaError_t launch_fused(const llm_cuda *c, const llm_cuda_weight *w, const float *x,
                                const llm_cuda_mv_fuse *f, float *y)
{
    constexpr int R = fused_rows<FLAGS>::value;
    int64_t warps = (w->rows + R - 1) / R;
    llm_cuda_rope_store rp;
    memset(&rp, 0, sizeof rp);
    if (FLAGS & MV_ROPE)
        rp = *f->rope;
    unsigned groups = 1;
    int32_t per = mv_group_per(c, 0, &groups);
    if (per > 0)
        return llm__launch(c, matvec_fused_rows_kernel<WT, FLAGS, MV_GROUP>,
                           dim3(llm__cuda_blocks((size_t)warps, MVF_WARPS), groups),
                           dim3(MVF_WARPS * 32), 0, w->data, w->scales, x, f->norm, f->eps, y,
                           w->rows, w->cols, c->tune.mv_prefetch, rp, c->mv_rows, per);
    return llm__launch(c, matvec_fused_kernel<WT, FLAGS>,
                       dim3(llm__cuda_blocks((size_t)warps, MVF_WARPS), llm__mv_rows(c)),
                       dim3(MVF_WARPS * 32),
                       0, w->data, w->scales, x, f->norm, f->eps, y, w->rows, w->cols,
                       c->tune.mv_prefetch, rp);
}

/* The fused flag sets the one-row kernels are built for: calls
 * launch(mv_flag_set<FLAGS>()) for flags, cudaErrorInvalidValue for any
 * other set. */
template <int F> struct mv_flag_set {
    static constexpr int value = F;
};

template <typename Launch>
static cudaError_t mv_flags_dispatch(unsigned flags, Launch launch)
{
    switch (flags) {
    case 0: return launch(mv_flag_set<0>());
    case MV_NORM: return launch(mv_flag_set<MV_NORM>());
    case MV_ACC: return launch(mv_flag_set<MV_ACC>());
    case MV_NORM | MV_ACC: return launch(mv_flag_set<MV_NORM | MV_ACC>());
    case MV_PAIRS: return launch(mv_flag_set<MV_PAIRS>());
    case MV_NORM | MV_PAIRS: return launch(mv_flag_set<MV_NORM | MV_PAIRS>());
    case MV_ACC | MV_PAIRS: return launch(mv_flag_set<MV_ACC | MV_PAIRS>());
    case MV_NORM | MV_ACC | MV_PAIRS: return launch(mv_flag_set<MV_NORM | MV_ACC | MV_PAIRS>());
    case MV_ROPE: return launch(mv_flag_set<MV_ROPE>());
    case MV_NORM | MV_ROPE: return launch(mv_flag_set<MV_NORM | MV_ROPE>());
    default: return cudaErrorInvalidValue;
    }
}

template <int WT>
static cudaError_t launch_fused_type(const llm_cuda *c, const llm_cuda_weight *w,
                                     const float *x, const llm_cuda_mv_fuse *f, float *y)
{
    return mv_flags_dispatch(f->flags, [&](auto fl) {
        return launch_fused<WT, decltype(fl)::value>(c, w, x, f, y);
    });
}

typedef cudaError_t (*fused_launch_fn)(const llm_cuda *c, const llm_cuda_weight *w,
                                       const float *x, const llm_cuda_mv_fuse *f, float *y);

/* The fused vector kernels per device layout, by WT_*. */
static const fused_launch_fn k_fused_launch[WT_COUNT] = {
    launch_fused_type<WT_F32>, launch_fused_type<WT_F16>, launch_fused_type<WT_BF16>,
    launch_fused_type<WT_Q8>};

/* ---- Q8 decode on int8 activations -------------------------------------- */

/* The fp32-activation kernels above spend, per 16-byte vector of Q8 weights,
 * 16 int-to-float conversions (a quarter-rate instruction) and 64 bytes of
 * activation reads, and reach about 0.4 of the copy bandwidth on an 8B
 * model. This kernel reads the activation once per block, quantizes it into
 * shared memory as the CPU backend does (32 values per fp32 scale, d =
 * amax / 127, q = nearest-even of x / d), and multiplies each 16-byte
 * weight vector with four dp4a against 16 bytes of shared memory: one
 * conversion per half block instead of sixteen.
 *
 * The grid holds q8i_shape<U>::blocks x multiprocessors blocks at most; a
 * group of ks warps of a block (split-K: ks = 1, 2, 4 or 8) takes row
 * pairs (2g, 2g+1) strided over every group of the grid, so the
 * quantization is paid once per block, not per row. The warps of a group
 * take alternate runs of 32 vectors of the pair's rows and add their
 * partial sums in shared memory in a fixed order (the result does not
 * depend on timing); with tune.mv_split, ks is chosen per launch so that
 * the pairs spread evenly over the warps of the grid (mv_split_log2),
 * else it is 1 (the default: 2% faster on the H200's 8B decode). A warp
 * has two
 * batches of weights in flight: the one it multiplies and the next one
 * (the next pair's first batch at a pair's end). The first batch is loaded
 * before the dependent-launch wait. RMSNorm is applied as in the fused
 * kernels: W (x * g * inv) = inv * W (x * g), with the sum of squares of x
 * gathered by the block from the x it reads anyway (every block sums in
 * the same order, so every block gets the same inv). */
#define Q8I_WARPS 8

/* Vectors a lane loads per row and batch (U), and the blocks per
 * multiprocessor that leaves registers for: U = 4 (the default, tuning
 * q8_int8 = 1) keeps 4 KB a warp in flight with 16 warps an SM; U = 2
 * (q8_int8 = 3) 2 KB with 24 warps; U = 1 (q8_int8 = 2) 1 KB with 32. The
 * others are kept for measurement. */
template <int U> struct q8i_shape;
template <> struct q8i_shape<4> { static constexpr int blocks = 2; };
template <> struct q8i_shape<2> { static constexpr int blocks = 3; };
template <> struct q8i_shape<1> { static constexpr int blocks = 4; };

static_assert(LLM_CUDA_Q8_INT8_MAX_COLS + LLM_CUDA_Q8_INT8_MAX_COLS / LLM_QK8_0 * 4 <=
                  48 * 1024,
              "the quantized activation fits the default shared memory");

/* Where a warp's vectors lie in a batch: vector base + off + lane + step u
 * (u < U) of each row; off = 32 x the warp's place in its split-K group,
 * step = 32 x the group's warps. */
typedef struct mv_lanes {
    int64_t off, step;
} mv_lanes;

/* One batch of a row pair: U 16-byte vectors and their scales a row. */
template <int U> struct q8i_batch {
    uint4 w[U][2];
    uint16_t d[U][2];
};

/* Loads the batch of row pair gi at `base`; vectors past the row are not
 * loaded (q8i_dot skips them). */
template <int U>
__device__ __forceinline__ void q8i_load(q8i_batch<U> &b, const int8_t *__restrict__ w,
                                         const uint16_t *__restrict__ scales, int64_t rows,
                                         int64_t cols, int64_t nch, int64_t gi, int64_t base,
                                         int lane, mv_lanes ml)
{
    int64_t r0 = 2 * gi, r1 = r0 + 1 < rows ? r0 + 1 : r0;
    const uint4 *w0 = reinterpret_cast<const uint4 *>(w + r0 * cols);
    const uint4 *w1 = reinterpret_cast<const uint4 *>(w + r1 * cols);
    const uint16_t *s0 = scales + r0 * (cols / LLM_QK8_0), *s1 = scales + r1 * (cols / LLM_QK8_0);
#pragma unroll
    for (int u = 0; u < U; u++) {
        int64_t j = base + ml.off + lane + ml.step * u;
        if (j < nch) {
            b.w[u][0] = ld_stream(w0 + j);
            b.w[u][1] = ld_stream(w1 + j);
            b.d[u][0] = __ldg(s0 + (j >> 1));
            b.d[u][1] = __ldg(s1 + (j >> 1));
        }
    }
}

/* The exact int sum of 16 signed byte products (four dp4a). */
__device__ __forceinline__ int i8_dot16(uint4 w, uint4 x)
{
    int s = __dp4a((int)w.x, (int)x.x, 0);
    s = __dp4a((int)w.y, (int)x.y, s);
    s = __dp4a((int)w.z, (int)x.z, s);
    return __dp4a((int)w.w, (int)x.w, s);
}

/* acc[r] += the batch's half-block dot products with the quantized x. */
template <int U>
__device__ __forceinline__ void q8i_dot(const q8i_batch<U> &b, const int8_t *xq, const float *xd,
                                        int64_t nch, int64_t base, int lane, mv_lanes ml,
                                        float *acc)
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        int64_t j = base + ml.off + lane + ml.step * u;
        if (j < nch) {
            uint4 xv = *reinterpret_cast<const uint4 *>(xq + 16 * j);
            float dx = xd[j >> 1];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                int s = i8_dot16(b.w[u][r], xv);
                float dw = __half2float(__ushort_as_half(b.d[u][r]));
                acc[r] = fmaf((float)s, dw * dx, acc[r]);
            }
        }
    }
}

/* Asks L2 for the batch `ahead` batches past batch bi of pair gi in the
 * warp's sequence of (pair, batch) (spp batches a pair, pairs gi, gi +
 * stride, ...), so that more bytes are on their way than the registers
 * hold; one lane per 128-byte line. Nothing past the last pair. */
template <int U>
__device__ __forceinline__ void q8i_prefetch(const int8_t *__restrict__ w, int64_t rows,
                                             int64_t cols, int64_t nch, int64_t pairs,
                                             int64_t gi, int64_t bi, int64_t spp,
                                             int64_t stride, int64_t span, int ahead, int lane,
                                             mv_lanes ml)
{
    if (ahead <= 0 || (lane & 7))
        return;
    int64_t t = bi + ahead, g = gi + t / spp * stride;
    if (g >= pairs)
        return;
    int64_t base = t % spp * span, r0 = 2 * g, r1 = r0 + 1 < rows ? r0 + 1 : r0;
    const uint4 *w0 = reinterpret_cast<const uint4 *>(w + r0 * cols);
    const uint4 *w1 = reinterpret_cast<const uint4 *>(w + r1 * cols);
#pragma unroll
    for (int u = 0; u < U; u++) {
        int64_t j = base + ml.off + lane + ml.step * u;
        if (j < nch) {
            llm__prefetch_l2(w0 + j);
            llm__prefetch_l2(w1 + j);
        }
    }
}

/* The split-K group of a warp: 1 << ks_log2 warps of the block, the pair
 * index it starts at and the stride over the grid's groups. */
typedef struct mv_group {
    int64_t gi, stride;
    mv_lanes ml;
} mv_group;

__device__ __forceinline__ mv_group mv_group_of(int ks_log2, int warp)
{
    mv_group g;
    int64_t per_block = Q8I_WARPS >> ks_log2;
    g.gi = (int64_t)blockIdx.x * per_block + (warp >> ks_log2);
    g.stride = (int64_t)gridDim.x * per_block;
    g.ml.off = 32 * (int64_t)(warp & ((1 << ks_log2) - 1));
    g.ml.step = (int64_t)32 << ks_log2;
    return g;
}

/* Asks L2 for the weights of row pair gi (tuning mv_l2): the pair's rows
 * are rb contiguous bytes each from w (and rs bytes of scales each from
 * s, when there are some), and the warps of a split-K group (ml) take
 * every (1 << ks)-th 4 KB of them, one 128-byte line a lane. Prefetches
 * hold no registers, so a warp can have its whole pair on the way before
 * it waits for its activation. */
__device__ __forceinline__ void mv_l2_span(const void *p, int64_t bytes, int lane, mv_lanes ml)
{
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)127, end = (uintptr_t)p + (uintptr_t)bytes;
    for (a += (uintptr_t)(ml.off + lane) * 128; a < end; a += (uintptr_t)ml.step * 128)
        llm__prefetch_l2((const void *)a);
}

/* The pairs a warp asks L2 for before its dependency wait (mv_l2 1 and
 * 2: its first; 3: its first two), and how far past the pair it starts
 * it asks for another (2: the next; 3: the one after). */
__device__ __forceinline__ int mv_l2_first(int l2)
{
    return l2 >= 3 ? 2 : l2 ? 1 : 0;
}

__device__ __forceinline__ int64_t mv_l2_ahead(int l2)
{
    return l2 >= 2 ? l2 - 1 : 0;
}

__device__ __forceinline__ void mv_l2_pair(const void *w, int64_t rb, const void *s, int64_t rs,
                                           int64_t rows, int64_t gi, int lane, mv_lanes ml)
{
    int64_t r0 = 2 * gi, n = r0 + 1 < rows ? 2 : 1;
    mv_l2_span((const char *)w + r0 * rb, n * rb, lane, ml);
    if (s)
        mv_l2_span((const char *)s + r0 * rs, n * rs, lane, ml);
}

/* Adds the partial sums a0, a1 of a split-K group's warps (the warp sums,
 * in every lane) in the order of the warps, through part[par] (par
 * alternates per pair, so a slot is rewritten only after the group has
 * passed the next pair's barrier). All lanes of the group's warps call it;
 * true in the group's first warp, which then holds the row pair's sums. */
__device__ __forceinline__ bool mv_split_sum(float (*part)[2], int ks_log2, int warp, int lane,
                                             float &a0, float &a1)
{
    if (ks_log2 == 0)
        return true;
    if (lane == 0) {
        part[warp][0] = a0;
        part[warp][1] = a1;
    }
    int ks = 1 << ks_log2, first = warp & ~(ks - 1);
    /* Named barrier 1 + group (0 is __syncthreads'), the group's threads. */
    asm volatile("bar.sync %0, %1;" ::"r"(1 + (warp >> ks_log2)), "r"(32 * ks) : "memory");
    if (warp != first)
        return false;
    a0 = 0.0f;
    a1 = 0.0f;
    for (int i = 0; i < ks; i++) {
        a0 += part[first + i][0];
        a1 += part[first + i][1];
    }
    return true;
}

/* The end of a row pair (2gi, 2gi+1) with dot products a0, a1 (lane 0 of
 * the warp that holds them): the RMSNorm scale, then RoPE and the cache
 * store, SwiGLU, or a plain (accumulating) store, as FLAGS say. */
template <int FLAGS>
__device__ __forceinline__ void mv_pair_out(const llm_cuda_rope_store &rp, float *__restrict__ y,
                                            int64_t gi, int64_t rows, float inv, float a0,
                                            float a1)
{
    /* The scale and the residual add are rounded one by one (never fused
     * into one fma), so every kernel that ends here stores the same bits
     * whatever the compiler contracts in its own context. */
    if (FLAGS & MV_NORM) {
        a0 = __fmul_rn(a0, inv);
        a1 = __fmul_rn(a1, inv);
    }
    int64_t row0 = 2 * gi;
    if (FLAGS & MV_ROPE) {
        rope_store_pair(rp, row0, a0, a1, y);
    } else if (FLAGS & MV_PAIRS) {
        float h = a0 / (1.0f + expf(-a0)) * a1;
        y[gi] = (FLAGS & MV_ACC) ? y[gi] + h : h;
    } else {
        y[row0] = (FLAGS & MV_ACC) ? __fadd_rn(y[row0], a0) : a0;
        if (row0 + 1 < rows)
            y[row0 + 1] = (FLAGS & MV_ACC) ? __fadd_rn(y[row0 + 1], a1) : a1;
    }
}
/* nearest-even of v * id as an int8 byte: |v * id| <= 127, and adding
 * 1.5 * 2^23 leaves an integer in the low mantissa bits (the same rounding
 * as the CPU's nearbyintf of the rounded product). */
__device__ __forceinline__ uint32_t q8i_round(float v, float id)
{
    float t = __fadd_rn(__fmul_rn(v, id), 12582912.0f);
    return (uint32_t)(__float_as_int(t) - 0x4B400000) & 0xffu;
}

/* One float4 of x (times g with MV_NORM) quantized: the block of 32 is
 * held by 8 consecutive lanes (all 32 lanes call this together). */
__device__ __forceinline__ void q8i_quant4(float4 v, bool ok, int64_t f, int lane, int8_t *xq,
                                           float *xd)
{
    float m = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
    float d = __fdiv_rn(m, 127.0f);
    float id = d > 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    if (ok) {
        uint32_t p = q8i_round(v.x, id) | q8i_round(v.y, id) << 8 | q8i_round(v.z, id) << 16 |
                     q8i_round(v.w, id) << 24;
        reinterpret_cast<uint32_t *>(xq)[f] = p;
        if ((lane & 7) == 0)
            xd[f >> 3] = d;
    }
}

/* The block quantizes x (times g with MV_NORM) into xq [cols] and xd
 * [cols / 32], and each warp leaves its share of the sum of squares in
 * red[warp] (MV_NORM); no barrier, so that a block can quantize several
 * rows before one barrier (q8i_inv then reads red). cols is a multiple of
 * 32, so 8 consecutive lanes hold one block of 32 values. A thread issues
 * G float4 loads (and G of g) before it uses the first: the prologue is a
 * few round trips to L2, not one per float4 (G x 8 warps x 32 lanes x 4
 * values: 4096 columns with the norm, 8192 without, in one round). NC
 * false reads x with coherent loads, for an x that other blocks of the
 * same launch wrote (llm_cuda_matvec_chain). */
template <int FLAGS, bool NC = true>
__device__ __forceinline__ void q8i_quant_row(const float *__restrict__ x,
                                              const float *__restrict__ g, int64_t cols,
                                              int8_t *xq, float *xd, float *red, int lane,
                                              int warp)
{
    constexpr int G = (FLAGS & MV_NORM) ? 4 : 8, STEP = Q8I_WARPS * 32;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    const float4 *g4 = reinterpret_cast<const float4 *>(g);
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    int64_t nf = cols / 4;
    float ss = 0.0f;
    for (int64_t b = (int64_t)warp * 32 + lane; b - lane < nf; b += (int64_t)G * STEP) {
        float4 v[G];
#pragma unroll
        for (int i = 0; i < G; i++) /* whole groups of 8 lanes: nf is a multiple of 8 */
            v[i] = b + i * STEP < nf ? (NC ? __ldg(x4 + b + i * STEP) : x4[b + i * STEP]) : zero;
        if (FLAGS & MV_NORM) {
            float4 gv[G];
#pragma unroll
            for (int i = 0; i < G; i++)
                gv[i] = b + i * STEP < nf ? __ldg(g4 + b + i * STEP) : zero;
#pragma unroll
            for (int i = 0; i < G; i++) {
                ss = fmaf(v[i].x, v[i].x,
                          fmaf(v[i].y, v[i].y, fmaf(v[i].z, v[i].z, fmaf(v[i].w, v[i].w, ss))));
                v[i].x = __fmul_rn(v[i].x, gv[i].x);
                v[i].y = __fmul_rn(v[i].y, gv[i].y);
                v[i].z = __fmul_rn(v[i].z, gv[i].z);
                v[i].w = __fmul_rn(v[i].w, gv[i].w);
            }
        }
#pragma unroll
        for (int i = 0; i < G; i++)
            q8i_quant4(v[i], b + i * STEP < nf, b + i * STEP, lane, xq, xd);
    }
    if (FLAGS & MV_NORM) {
        ss = llm__warp_sum(ss);
        if (lane == 0)
            red[warp] = ss;
    }
}

/* q8i_quant_row for the NV rows of a group at once (x [nv][cols]; rows
 * past nv load zeros and store nothing), so that the rows' loads and
 * arithmetic overlap instead of running one after another. A thread meets,
 * per row, the same float4s in the same order as in q8i_quant_row (how
 * many it loads at once changes no operation, and a zero float4 adds
 * nothing to the sum of squares), so each row gets q8i_quant_row's bytes
 * (xq [NV][cols], xd [NV][cols / 32]) and red[v][warp]. */
template <int FLAGS, int NV>
__device__ __forceinline__ void q8i_quant_rows(const float *__restrict__ x,
                                               const float *__restrict__ g, int64_t cols,
                                               int nv, int8_t *xq, float *xd,
                                               float (*red)[Q8I_WARPS], int lane, int warp)
{
    constexpr int STEP = Q8I_WARPS * 32;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    const float4 *g4 = reinterpret_cast<const float4 *>(g);
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    int64_t nf = cols / 4, xdw = cols / LLM_QK8_0;
    float ss[NV];
#pragma unroll
    for (int v = 0; v < NV; v++)
        ss[v] = 0.0f;
    for (int64_t b = (int64_t)warp * 32 + lane; b - lane < nf; b += STEP) {
        bool in = b < nf; /* whole groups of 8 lanes: nf is a multiple of 8 */
        float4 t[NV];
#pragma unroll
        for (int v = 0; v < NV; v++)
            t[v] = in && v < nv ? __ldg(x4 + v * nf + b) : zero;
        if (FLAGS & MV_NORM) {
            float4 gv = in ? __ldg(g4 + b) : zero;
#pragma unroll
            for (int v = 0; v < NV; v++) {
                ss[v] = fmaf(t[v].x, t[v].x,
                             fmaf(t[v].y, t[v].y,
                                  fmaf(t[v].z, t[v].z, fmaf(t[v].w, t[v].w, ss[v]))));
                t[v].x = __fmul_rn(t[v].x, gv.x);
                t[v].y = __fmul_rn(t[v].y, gv.y);
                t[v].z = __fmul_rn(t[v].z, gv.z);
                t[v].w = __fmul_rn(t[v].w, gv.w);
            }
        }
#pragma unroll
        for (int v = 0; v < NV; v++)
            q8i_quant4(t[v], in && v < nv, b, lane, xq + v * cols, xd + v * xdw);
    }
    if (FLAGS & MV_NORM)
#pragma unroll
        for (int v = 0; v < NV; v++) {
            ss[v] = llm__warp_sum(ss[v]);
            if (lane == 0 && v < nv)
                red[v][warp] = ss[v];
        }
}

/* The RMSNorm scale from the warps' sums of squares in red (after the
 * barrier that follows q8i_quant_row); 1 without MV_NORM. */
template <int FLAGS>
__device__ __forceinline__ float q8i_inv(const float *red, float eps, int64_t cols)
{
    float inv = 1.0f;
    if (FLAGS & MV_NORM) {
        float t = 0.0f;
#pragma unroll
        for (int i = 0; i < Q8I_WARPS; i++)
            t += red[i];
        inv = 1.0f / sqrtf(t / (float)cols + eps);
    }
    return inv;
}

/* q8i_quant_row, the barrier, q8i_inv: returns the RMSNorm scale (1
 * without MV_NORM). Every thread of the block must call it. */
template <int FLAGS>
__device__ __forceinline__ float q8i_quantize(const float *__restrict__ x,
                                              const float *__restrict__ g, float eps,
                                              int64_t cols, int8_t *xq, float *xd,
                                              float *red, int lane, int warp)
{
    q8i_quant_row<FLAGS>(x, g, cols, xq, xd, red, lane, warp);
    __syncthreads();
    return q8i_inv<FLAGS>(red, eps, cols);
}

/* The row pairs of a warp (gr.gi, gr.gi + gr.stride, ...) once the block
 * holds the quantized x (xq, xd) and the RMSNorm scale inv, the first
 * batch of the first pair in cur: each pair's dot products, their split-K
 * sum (part, ks_log2) and epilogue, the next batch in flight while one is
 * multiplied (with mv_prefetch's `ahead` and mv_l2's L2 requests).
 * loads_done() runs once the warp has issued its last weight load. The
 * loop of matvec_q8i_kernel and of llm_cuda_matvec_chain's products. */
template <int FLAGS, int U, typename Done>
__device__ __forceinline__ void q8i_pairs(const int8_t *__restrict__ w,
                                          const uint16_t *__restrict__ scales, int64_t rows,
                                          int64_t cols, float *__restrict__ y,
                                          const llm_cuda_rope_store &rp, float inv,
                                          const int8_t *xq, const float *xd, mv_group gr,
                                          int ks_log2, int ahead, int l2,
                                          float (*part)[Q8I_WARPS][2], q8i_batch<U> &cur,
                                          int lane, int warp, Done loads_done)
{
    int64_t pairs = (rows + 1) / 2, nch = cols / 16, gi = gr.gi;
    int64_t span = (int64_t)32 * U << ks_log2, spp = (nch + span - 1) / span;
    for (int par = 0;; par ^= 1) {
        float acc[2] = {0.0f, 0.0f};
        int64_t next = gi + gr.stride;
        int64_t ga = gi + mv_l2_ahead(l2) * gr.stride;
        if (ga > gi && ga < pairs)
            mv_l2_pair(w, cols, scales, cols / LLM_QK8_0 * 2, rows, ga, lane, gr.ml);
        for (int64_t base = 0, bi = 0; base < nch; base += span, bi++) {
            int64_t nbase = base + span;
            bool more = nbase < nch, load = more || next < pairs;
            q8i_batch<U> nb;
            if (load) {
                q8i_load(nb, w, scales, rows, cols, nch, more ? gi : next, more ? nbase : 0,
                         lane, gr.ml);
                q8i_prefetch<U>(w, rows, cols, nch, pairs, gi, bi + 1, spp, gr.stride, span,
                                ahead, lane, gr.ml);
            } else
                loads_done();
            q8i_dot(cur, xq, xd, nch, base, lane, gr.ml, acc);
            if (load)
                cur = nb;
        }
        float a0 = llm__warp_sum(acc[0]), a1 = llm__warp_sum(acc[1]);
        if (mv_split_sum(part[par], ks_log2, warp, lane, a0, a1) && lane == 0)
            mv_pair_out<FLAGS>(rp, y, gi, rows, inv, a0, a1);
        if (next >= pairs)
            return;
        gi = next;
    }
}

template <int FLAGS, int U>
__global__ void __launch_bounds__(Q8I_WARPS * 32, q8i_shape<U>::blocks)
matvec_q8i_kernel(const int8_t *__restrict__ w, const uint16_t *__restrict__ scales,
                  const float *__restrict__ x, const float *__restrict__ g, float eps,
                  float *__restrict__ y, int64_t rows, int64_t cols, int ks_log2,
                  int ahead, int l2, llm_cuda_rope_store rp)
{
    extern __shared__ uint4 q8i_smem[]; /* xq [cols] int8, then xd [cols / 32] */
    __shared__ float red[Q8I_WARPS];
    __shared__ float part[2][Q8I_WARPS][2];
    int8_t *xq = reinterpret_cast<int8_t *>(q8i_smem);
    float *xd = reinterpret_cast<float *>(xq + cols);
    MV_ROW_OFFSET(FLAGS, x, y, rp, rows, cols);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int64_t pairs = (rows + 1) / 2, nch = cols / 16;
    mv_group gr = mv_group_of(ks_log2, warp);
    int64_t gi = gr.gi, span = (int64_t)32 * U << ks_log2, spp = (nch + span - 1) / span;
    q8i_batch<U> cur;
    if (gi < pairs) { /* weights never depend on an earlier kernel */
        q8i_load(cur, w, scales, rows, cols, nch, gi, 0, lane, gr.ml);
        for (int a = 1; a <= ahead; a++)
            q8i_prefetch<U>(w, rows, cols, nch, pairs, gi, 0, spp, gr.stride, span, a, lane,
                            gr.ml);
        for (int a = 0; a < mv_l2_first(l2) && gi + a * gr.stride < pairs; a++)
            mv_l2_pair(w, cols, scales, cols / LLM_QK8_0 * 2, rows,
                       gi + a * gr.stride, lane, gr.ml);
    }
    llm__pdl_wait();
    float inv = q8i_quantize<FLAGS>(x, g, eps, cols, xq, xd, red, lane, warp);
    if (gi >= pairs) {
        llm__pdl_trigger();
        return; /* after the barrier: the block's other warps have their x */
    }
    q8i_pairs<FLAGS, U>(w, scales, rows, cols, y, rp, inv, xq, xd, gr, ks_log2, ahead, l2, part,
                        cur, lane, warp, [] { llm__pdl_trigger(); });
}

/* mv_split_sum for the NV rows of a group (nv of them live), each row's
 * partial sums added in the one-row order. */
template <int NV>
__device__ __forceinline__ bool mv_split_sum_rows(float (*part)[NV][2], int ks_log2, int warp,
                                                  int lane, float (*a)[2], int nv)
{
    if (ks_log2 == 0)
        return true;
    if (lane == 0)
#pragma unroll
        for (int v = 0; v < NV; v++)
            if (v < nv) {
                part[warp][v][0] = a[v][0];
                part[warp][v][1] = a[v][1];
            }
    int ks = 1 << ks_log2, first = warp & ~(ks - 1);
    asm volatile("bar.sync %0, %1;" ::"r"(1 + (warp >> ks_log2)), "r"(32 * ks) : "memory");
    if (warp != first)
        return false;
#pragma unroll
    for (int v = 0; v < NV; v++) {
        a[v][0] = 0.0f;
        a[v][1] = 0.0f;
        for (int i = 0; i < ks; i++) {
            a[v][0] += part[first + i][v][0];
            a[v][1] += part[first + i][v][1];
        }
    }
    return true;
}

/* Blocks a multiprocessor of matvec_q8i_rows_kernel<FLAGS, U, NV>, its
 * launch bound: a batch of one vector a lane (U = 1) and a few rows leave
 * registers for more blocks, which is what lets a verify's groups of rows
 * share one wave (q8i_rows_plan). */
__host__ __device__ constexpr int q8i_rows_blocks(int u, int nv)
{
    return u == 1 ? (nv <= 3 ? 4 : nv <= 5 ? 3 : 2) : 2;
}

/* matvec_q8i_kernel over a group of nv <= NV activation rows: the block
 * quantizes each row once (xq [nv][cols], then xd [nv][cols / 32]; one
 * barrier for all), then every warp's weight batch meets each row's
 * quantized x in turn. */
template <int FLAGS, int U, int NV>
__global__ void __launch_bounds__(Q8I_WARPS * 32, q8i_rows_blocks(U, NV))
matvec_q8i_rows_kernel(const int8_t *__restrict__ w, const uint16_t *__restrict__ scales,
                       const float *__restrict__ x, const float *__restrict__ g, float eps,
                       float *__restrict__ y, int64_t rows, int64_t cols, int ks_log2,
                       int ahead, llm_cuda_rope_store rp, int32_t n, int32_t per)
{
    extern __shared__ uint4 q8i_smem[];
    __shared__ float red[NV][Q8I_WARPS];
    __shared__ float part[2][Q8I_WARPS][NV][2];
    int32_t r0;
    int nv = mv_group_rows(n, per, r0);
    int64_t yw = (FLAGS & MV_PAIRS) ? rows / 2 : rows;
    x += (size_t)r0 * (size_t)cols;
    y += (size_t)r0 * (size_t)yw;
    rp.pos.pos0 += (uint32_t)r0;
    int8_t *xq = reinterpret_cast<int8_t *>(q8i_smem);
    float *xd = reinterpret_cast<float *>(xq + (size_t)per * (size_t)cols);
    int64_t xdw = cols / LLM_QK8_0;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int64_t pairs = (rows + 1) / 2, nch = cols / 16;
    mv_group gr = mv_group_of(ks_log2, warp);
    int64_t gi = gr.gi, span = (int64_t)32 * U << ks_log2, spp = (nch + span - 1) / span;
    q8i_batch<U> cur;
    if (gi < pairs) { /* weights never depend on an earlier kernel */
        q8i_load(cur, w, scales, rows, cols, nch, gi, 0, lane, gr.ml);
        for (int a = 1; a <= ahead; a++)
            q8i_prefetch<U>(w, rows, cols, nch, pairs, gi, 0, spp, gr.stride, span, a, lane,
                            gr.ml);
    }
    llm__pdl_wait();
    q8i_quant_rows<FLAGS, NV>(x, g, cols, nv, xq, xd, red, lane, warp);
    __syncthreads();
    if (gi >= pairs) {
        llm__pdl_trigger();
        return; /* after the barrier: the block's other warps have their x */
    }
    for (int par = 0;; par ^= 1) {
        float acc[NV][2];
#pragma unroll
        for (int v = 0; v < NV; v++)
            acc[v][0] = acc[v][1] = 0.0f;
        int64_t next = gi + gr.stride;
        for (int64_t base = 0, bi = 0; base < nch; base += span, bi++) {
            int64_t nbase = base + span;
            bool more = nbase < nch, load = more || next < pairs;
            q8i_batch<U> nb;
            if (load) {
                q8i_load(nb, w, scales, rows, cols, nch, more ? gi : next, more ? nbase : 0,
                         lane, gr.ml);
                q8i_prefetch<U>(w, rows, cols, nch, pairs, gi, bi + 1, spp, gr.stride, span,
                                ahead, lane, gr.ml);
            } else
                llm__pdl_trigger(); /* every weight load of this warp is issued */
            /* Every slot runs (rows past nv repeat row nv - 1, unused): no
             * branch keeps the rows' work from overlapping. */
#pragma unroll
            for (int v = 0; v < NV; v++) {
                int vs = v < nv ? v : nv - 1;
                q8i_dot(cur, xq + vs * cols, xd + vs * xdw, nch, base, lane, gr.ml, acc[v]);
            }
            if (load)
                cur = nb;
        }
#pragma unroll
        for (int v = 0; v < NV; v++) {
            acc[v][0] = llm__warp_sum(acc[v][0]);
            acc[v][1] = llm__warp_sum(acc[v][1]);
        }
        if (mv_split_sum_rows<NV>(part[par], ks_log2, warp, lane, acc, nv)) {
            /* Row v's sums are lane 0's, as the one-row kernel stores them;
             * lane v takes them, so the rows' epilogues run side by side. */
            float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
            for (int v = 0; v < NV; v++) {
                float t0 = __shfl_sync(0xffffffffu, acc[v][0], 0);
                float t1 = __shfl_sync(0xffffffffu, acc[v][1], 0);
                a0 = lane == v ? t0 : a0;
                a1 = lane == v ? t1 : a1;
            }
            if (lane < nv) {
                llm_cuda_rope_store rv = rp;
                rv.pos.pos0 += (uint32_t)lane;
                mv_pair_out<FLAGS>(rv, y + lane * yw, gi, rows,
                                   q8i_inv<FLAGS>(red[lane], eps, cols), a0, a1);
            }
        }
        if (next >= pairs)
            return;
        gi = next;
    }
}

/* The split-K factor (log2) for `pairs` row pairs of `nvec` vectors (or
 * units) each, `per_batch` of them a warp's batch, on a grid of at most
 * `warps` warps: the one with the fewest sequential batches a warp, a
 * pair's reduction counted as half a batch; ties keep the smaller. */
static int mv_split_log2(const llm_cuda *c, int64_t pairs, int64_t nvec, int64_t per_batch,
                         int64_t warps)
{
    if (!c->tune.mv_split)
        return 0;
    int best = 0;
    int64_t best_cost = -1;
    for (int l = 0; (1 << l) <= Q8I_WARPS; l++) {
        int64_t groups = warps >> l;
        int64_t rounds = (pairs + groups - 1) / groups;
        int64_t batches = (nvec + (per_batch << l) - 1) / (per_batch << l);
        int64_t cost = rounds * (2 * batches + 1);
        if (best_cost < 0 || cost < best_cost) {
            best = l;
            best_cost = cost;
        }
    }
    return best;
}

/* The grid of a pair kernel: at most `per_sm` blocks a multiprocessor
 * (fewer when tuning mv_blocks says so), no more than the pairs' groups
 * need. */
static unsigned mv_pair_blocks(const llm_cuda *c, int64_t pairs, int ks_log2, int per_sm)
{
    if (c->tune.mv_blocks && c->tune.mv_blocks < per_sm)
        per_sm = c->tune.mv_blocks;
    int64_t per_block = Q8I_WARPS >> ks_log2;
    int64_t blocks = (pairs + per_block - 1) / per_block;
    int64_t cap = (int64_t)c->sm_count * per_sm;
    return (unsigned)(blocks < cap ? blocks : cap);
}

/* How a weight-stationary Q8 product spreads a verify's c->mv_rows
 * activation rows over the grid: groups of `per` rows (the last one
 * shorter), one grid row a group, `nv` slots of work a warp (the
 * instantiated size at or above per), batches of `u` vectors a lane.
 * per 0: no stationary product, the one-row grid (a grid row per
 * activation row). */
typedef struct q8i_rows_plan {
    int32_t per;
    unsigned groups;
    int u, nv;
} q8i_rows_plan;

/* The slot counts matvec_q8i_rows_kernel is built with, per batch shape:
 * the smallest at or above per, 0 for none. */
static int q8i_rows_slots(int u, int32_t per)
{
    static const int one[] = {2, 3, 4, 5, 8}, four[] = {2, 4, 8};
    const int *set = u == 1 ? one : four;
    size_t count = u == 1 ? sizeof one / sizeof one[0] : sizeof four / sizeof four[0];
    for (size_t i = 0; i < count; i++)
        if (set[i] >= per)
            return set[i];
    return 0;
}

/* The plan (tuning rows_plan) for `pairs` row pairs of `cols` columns,
 * row_smem bytes of quantized activation a row and split-K ks_log2.
 * Fitted, from the H200's kernel times on the KJV target (verify of 9
 * rows, bench/results/cuda_rows.md): of groups of 2 to MV_GROUP rows, the
 * fewest rows a group whose blocks (groups x one group's blocks) are all
 * resident at once, each warp then taking one pair; a lane batch of one
 * vector when a row is at most 32 vectors (512 columns: one batch covers
 * it, and the registers it leaves give 3-4 blocks a multiprocessor). One
 * row a group, the one-row kernel's grid, costs more than two (6.8 us
 * against 4.9 for a 512 x 512 product). Where no group size fits one wave
 * and rows are that short (an output head), the least of rounds x
 * (slots + 2) (head 4096 x 512: 3 rows a group in 2 rounds 7.8 us, 2 in 3
 * rounds 9.8, the fixed groups 12.2); wider rows that fit no wave stream
 * from memory, and keep the fixed groups, as do tuning 0 and a forced size
 * the shared memory cannot hold. */
static q8i_rows_plan q8i_plan_rows(const llm_cuda *c, int64_t pairs, int64_t cols,
                                   size_t row_smem, int ks_log2)
{
    q8i_rows_plan none = {0, 1, 4, MV_GROUP}, fixed = none;
    int32_t n = c->mv_rows;
    if (n < 2 || !llm__rows_stationary(c, n))
        return none;
    fixed.per = mv_group_per(c, row_smem, &fixed.groups);
    if (c->tune.rows_plan == 0)
        return fixed;
    int32_t fit = (int32_t)((48 * 1024 - 2048) / row_smem);
    int u = cols / 16 <= 32 ? 1 : 4;
    int64_t per_block = Q8I_WARPS >> ks_log2, group_blocks = (pairs + per_block - 1) / per_block;
    if (c->tune.rows_plan >= 2) {
        int32_t per = c->tune.rows_plan < n ? c->tune.rows_plan : n;
        q8i_rows_plan p = {per, (unsigned)((n + per - 1) / per), u, q8i_rows_slots(u, per)};
        return per <= fit && per >= 2 ? p : fixed;
    }
    q8i_rows_plan best = fixed;
    int64_t best_cost = -1;
    for (int32_t g = (n + 1) / 2; g >= 1; g--) {
        int32_t per = (n + g - 1) / g;
        if (per > MV_GROUP || per > fit)
            break;
        q8i_rows_plan p = {per, (unsigned)((n + per - 1) / per), u, q8i_rows_slots(u, per)};
        int64_t cap = (int64_t)c->sm_count * q8i_rows_blocks(u, p.nv);
        int64_t wave = (cap + p.groups - 1) / p.groups;
        int64_t rounds = (group_blocks + wave - 1) / wave;
        if (rounds == 1)
            return p;
        int64_t cost = rounds * (p.nv + 2);
        if (u == 1 && (best_cost < 0 || cost < best_cost)) {
            best = p;
            best_cost = cost;
        }
    }
    return best;
}

/* The one-row kernel at batch shape U over every activation row (a grid
 * row each), split-K ks_log2 as the caller chose it. */
template <int FLAGS, int U>
static cudaError_t launch_q8i_one(const llm_cuda *c, const llm_cuda_weight *w, const float *x,
                                  const llm_cuda_mv_fuse *f, float *y, int ks,
                                  const llm_cuda_rope_store &rp)
{
    int64_t pairs = (w->rows + 1) / 2;
    size_t smem = (size_t)w->cols + (size_t)(w->cols / LLM_QK8_0) * sizeof(float);
    return llm__launch(c, matvec_q8i_kernel<FLAGS, U>,
                       dim3(mv_pair_blocks(c, pairs, ks, q8i_shape<U>::blocks), llm__mv_rows(c)),
                       dim3(Q8I_WARPS * 32), smem, (const int8_t *)w->data, w->scales, x,
                       (FLAGS & MV_NORM) ? f->norm : (const float *)nullptr,
                       (FLAGS & MV_NORM) ? f->eps : 0.0f, y, w->rows, w->cols, ks,
                       c->tune.mv_prefetch, c->tune.mv_l2, rp);
}

/* The weight-stationary kernel with NV slots at batch shape U for plan p.
 * A lane's chunk order does not depend on U: ks alone shapes the sums. The
 * groups share one wave of the grid (a warp then takes more pairs in turn,
 * which no sum depends on). */
template <int FLAGS, int U, int NV>
static cudaError_t launch_q8i_rows(const llm_cuda *c, const llm_cuda_weight *w, const float *x,
                                   const llm_cuda_mv_fuse *f, float *y, int ks,
                                   const llm_cuda_rope_store &rp, const q8i_rows_plan &p)
{
    int64_t pairs = (w->rows + 1) / 2;
    size_t smem = (size_t)w->cols + (size_t)(w->cols / LLM_QK8_0) * sizeof(float);
    constexpr int per_sm = q8i_rows_blocks(U, NV);
    unsigned blocks = mv_pair_blocks(c, pairs, ks, per_sm);
    unsigned wave = ((unsigned)c->sm_count * per_sm + p.groups - 1) / p.groups;
    return llm__launch(c, matvec_q8i_rows_kernel<FLAGS, U, NV>,
                       dim3(blocks < wave ? blocks : wave, p.groups), dim3(Q8I_WARPS * 32),
                       smem * (size_t)p.per, (const int8_t *)w->data, w->scales, x,
                       (FLAGS & MV_NORM) ? f->norm : (const float *)nullptr,
                       (FLAGS & MV_NORM) ? f->eps : 0.0f, y, w->rows, w->cols, ks,
                       c->tune.mv_prefetch, rp, c->mv_rows, p.per);
}

template <int FLAGS, int U>
static cudaError_t launch_q8i_u(const llm_cuda *c, const llm_cuda_weight *w, const float *x,
                                const llm_cuda_mv_fuse *f, float *y)
{
    int64_t pairs = (w->rows + 1) / 2;
    int ks = mv_split_log2(c, pairs, w->cols / 16, 32 * U,
                           (int64_t)c->sm_count * q8i_shape<U>::blocks * Q8I_WARPS);
    size_t smem = (size_t)w->cols + (size_t)(w->cols / LLM_QK8_0) * sizeof(float);
    llm_cuda_rope_store rp;
    memset(&rp, 0, sizeof rp);
    if (FLAGS & MV_ROPE)
        rp = *f->rope;
    q8i_rows_plan p = q8i_plan_rows(c, pairs, w->cols, smem, ks);
    if (p.per > 1) {
        switch (p.u * 16 + p.nv) {
        case 16 + 2: return launch_q8i_rows<FLAGS, 1, 2>(c, w, x, f, y, ks, rp, p);
        case 16 + 3: return launch_q8i_rows<FLAGS, 1, 3>(c, w, x, f, y, ks, rp, p);
        case 16 + 4: return launch_q8i_rows<FLAGS, 1, 4>(c, w, x, f, y, ks, rp, p);
        case 16 + 5: return launch_q8i_rows<FLAGS, 1, 5>(c, w, x, f, y, ks, rp, p);
        case 16 + 8: return launch_q8i_rows<FLAGS, 1, 8>(c, w, x, f, y, ks, rp, p);
        case 64 + 2: return launch_q8i_rows<FLAGS, 4, 2>(c, w, x, f, y, ks, rp, p);
        case 64 + 4: return launch_q8i_rows<FLAGS, 4, 4>(c, w, x, f, y, ks, rp, p);
        default: return launch_q8i_rows<FLAGS, 4, MV_GROUP>(c, w, x, f, y, ks, rp, p);
        }
    }
    return launch_q8i_one<FLAGS, U>(c, w, x, f, y, ks, rp);
}

/* tuning q8_int8 4: the batch shape per one-row product. A grid of 2
 * blocks a multiprocessor (U = 4) takes 16 warps an SM; where a matrix has
 * more row pairs than that but no more than 3 blocks' worth (24 warps an
 * SM, U = 2), the narrower batch runs every pair in one round instead of
 * giving a third of the warps a second pair (an 8B model's q/k/v: 3072
 * pairs on 132 SMs). Split-K sums depend on the batch shape's grid, so with
 * mv_split on, and for verify rows, it stays U = 4. */
static int q8i_auto_u(const llm_cuda *c, const llm_cuda_weight *w)
{
    int64_t pairs = (w->rows + 1) / 2, sm_warps = (int64_t)c->sm_count * Q8I_WARPS;
    if (c->tune.mv_split || c->mv_rows > 1)
        return 4;
    return pairs > sm_warps * q8i_shape<4>::blocks && pairs <= sm_warps * q8i_shape<2>::blocks
               ? 2
               : 4;
}

template <int FLAGS>
static cudaError_t launch_q8i(const llm_cuda *c, const llm_cuda_weight *w, const float *x,
                              const llm_cuda_mv_fuse *f, float *y)
{
    switch (c->tune.q8_int8) {
    case 2: return launch_q8i_u<FLAGS, 1>(c, w, x, f, y);
    case 3: return launch_q8i_u<FLAGS, 2>(c, w, x, f, y);
    case 4:
        return q8i_auto_u(c, w) == 2 ? launch_q8i_u<FLAGS, 2>(c, w, x, f, y)
                                     : launch_q8i_u<FLAGS, 4>(c, w, x, f, y);
    default: return launch_q8i_u<FLAGS, 4>(c, w, x, f, y);
    }
}

/* ---- the Q8 one-row product fed by async copies (tuning mv_async) ------- */

/* Why a second one-row Q8 kernel: matvec_q8i_kernel keeps its bytes in
 * flight in registers (about 125 a thread at two blocks an SM), so the next
 * kernel's blocks cannot become resident before this one's blocks exit,
 * and every product pays its start, its activation's quantization and its
 * first loads with the memory idle: about 7 us a product on an 8B model's
 * small matrices (bench/results/cuda_kern.md). Here the bytes in flight
 * live in shared memory: each warp runs a ring of S stages, a stage
 * holding one chunk of its row pair (Q8A_VECS 16-byte vectors of each of
 * the two rows and their scales), filled by cp.async (each lane copies the
 * vectors it multiplies, lanes 0-15 the scales) and waited for with
 * cp.async.wait_group. A block needs few registers, so a dependent
 * product's block can start beside it and fill its own ring before its
 * dependency wait.
 *
 * The bits are matvec_q8i_kernel's with split-K off: a warp takes whole
 * pairs, its lanes the vectors lane + 32k in increasing k (chunk after
 * chunk), and the activation is quantized by q8i_quant_row as for 8 warps
 * (each of the block's 4 warps plays two of them), so the sum of squares
 * adds in the same order. */
#define Q8A_WARPS 4
#define Q8A_VECS 128
/* A stage: the two rows' vectors, then the two rows' Q8A_VECS / 2 fp16
 * scales. */
#define Q8A_STAGE (2 * 16 * Q8A_VECS + 2 * Q8A_VECS)

static_assert(Q8A_VECS % 32 == 0 && Q8A_WARPS * 2 == Q8I_WARPS,
              "a lane's vectors and the quantization's warps as matvec_q8i_kernel's");

/* cp.async exists from sm_80 on; q8a_takes needs sm_90, and an older
 * target's build keeps the kernel's shape with these empty. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define Q8A_ASM asm volatile
#else
#define Q8A_ASM(...) ((void)0)
#endif

/* 16 bytes from global src to shared dst, bypassing L1 (each byte is read
 * once). */
__device__ __forceinline__ void q8a_copy16(void *dst, const void *src)
{
    Q8A_ASM("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(src)
                 : "memory");
}

__device__ __forceinline__ void q8a_commit(void)
{
    Q8A_ASM("cp.async.commit_group;" ::: "memory");
}

/* Until at most N of this thread's groups are in flight. */
template <int N> __device__ __forceinline__ void q8a_wait(void)
{
    Q8A_ASM("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* A warp's walk over its items: chunk c of pair gi, the pairs gi0,
 * gi0 + stride, ... each cut into cpp chunks of at most Q8A_VECS vectors. */
typedef struct q8a_walk {
    int64_t stride, cpp, nch, rows, cols, items;
} q8a_walk;

typedef struct q8a_item {
    int64_t gi, c, t;
} q8a_item;

__device__ __forceinline__ void q8a_next(const q8a_walk &k, q8a_item &it)
{
    it.t++;
    if (++it.c == k.cpp) {
        it.c = 0;
        it.gi += k.stride;
    }
}

__device__ __forceinline__ int64_t q8a_nvec(const q8a_walk &k, int64_t c)
{
    int64_t left = k.nch - c * Q8A_VECS;
    return left < Q8A_VECS ? left : Q8A_VECS;
}

/* Every lane: its copies of item it (nothing past the warp's last item)
 * into stage st, then one commit, so that each item is one group. */
__device__ __forceinline__ void q8a_issue(const q8a_walk &k, const int8_t *__restrict__ w,
                                          const uint16_t *__restrict__ scales,
                                          const q8a_item &it, unsigned char *st, int lane)
{
    if (it.t < k.items) {
        int64_t nvec = q8a_nvec(k, it.c), r0 = 2 * it.gi, r1 = r0 + 1 < k.rows ? r0 + 1 : r0;
        int64_t v0 = it.c * Q8A_VECS;
        const int8_t *w0 = w + r0 * k.cols + 16 * v0, *w1 = w + r1 * k.cols + 16 * v0;
#pragma unroll
        for (int u = 0; u < Q8A_VECS / 32; u++) {
            int jl = lane + 32 * u;
            if (jl < nvec) {
                q8a_copy16(st + 16 * jl, w0 + 16 * jl);
                q8a_copy16(st + 16 * (Q8A_VECS + jl), w1 + 16 * jl);
            }
        }
        /* nvec scale bytes a row (nvec / 2 fp16), 16 a lane: lanes 0-7 the
         * first row's, 8-15 the second's */
        int part = lane & 7;
        if (lane < 16 && 16 * part < nvec) {
            int64_t srow = k.cols / LLM_QK8_0, r = lane < 8 ? r0 : r1;
            const unsigned char *src =
                reinterpret_cast<const unsigned char *>(scales + r * srow + v0 / 2);
            q8a_copy16(st + 32 * Q8A_VECS + (lane < 8 ? 0 : Q8A_VECS) + 16 * part,
                       src + 16 * part);
        }
    }
    q8a_commit();
}

/* acc[r] += a stage's dot products with the quantized x: q8i_dot's
 * arithmetic, vector v0 + lane + 32u of each row. */
__device__ __forceinline__ void q8a_dot(const unsigned char *st, const int8_t *xq,
                                        const float *xd, int64_t v0, int64_t nvec, int lane,
                                        float *acc)
{
    const uint16_t *sd = reinterpret_cast<const uint16_t *>(st + 32 * Q8A_VECS);
#pragma unroll
    for (int u = 0; u < Q8A_VECS / 32; u++) {
        int jl = lane + 32 * u;
        if (jl < nvec) {
            int64_t j = v0 + jl;
            uint4 xv = *reinterpret_cast<const uint4 *>(xq + 16 * j);
            float dx = xd[j >> 1];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                uint4 wv = *reinterpret_cast<const uint4 *>(st + 16 * (r * Q8A_VECS + jl));
                int s = i8_dot16(wv, xv);
                float dw = __half2float(__ushort_as_half(sd[r * (Q8A_VECS / 2) + (jl >> 1)]));
                acc[r] = fmaf((float)s, dw * dx, acc[r]);
            }
        }
    }
}

/* Bytes of the quantized activation at the start of the dynamic shared
 * memory, rounded so that the rings start 128-byte aligned. */
static __host__ __device__ inline size_t q8a_x_bytes(int64_t cols)
{
    size_t b = (size_t)cols + (size_t)(cols / LLM_QK8_0) * sizeof(float);
    return (b + 127) & ~(size_t)127;
}

template <int FLAGS, int S>
__global__ void __launch_bounds__(Q8A_WARPS * 32)
matvec_q8a_kernel(const int8_t *__restrict__ w, const uint16_t *__restrict__ scales,
                  const float *__restrict__ x, const float *__restrict__ g, float eps,
                  float *__restrict__ y, int64_t rows, int64_t cols, llm_cuda_rope_store rp)
{
    extern __shared__ __align__(128) unsigned char q8a_smem[];
    __shared__ float red[Q8I_WARPS];
    int8_t *xq = reinterpret_cast<int8_t *>(q8a_smem);
    float *xd = reinterpret_cast<float *>(xq + cols);
    MV_ROW_OFFSET(FLAGS, x, y, rp, rows, cols);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned char *ring = q8a_smem + q8a_x_bytes(cols) + (size_t)warp * S * Q8A_STAGE;
    q8a_walk k;
    int64_t gi0 = (int64_t)blockIdx.x * Q8A_WARPS + warp;
    k.stride = (int64_t)gridDim.x * Q8A_WARPS;
    k.nch = cols / 16;
    k.cpp = (k.nch + Q8A_VECS - 1) / Q8A_VECS;
    k.rows = rows;
    k.cols = cols;
    int64_t pairs = (rows + 1) / 2;
    int64_t mine = gi0 < pairs ? (pairs - gi0 + k.stride - 1) / k.stride : 0;
    k.items = mine * k.cpp;
    q8a_item use = {gi0, 0, 0}, fill = {gi0, 0, 0};
    /* weights never depend on an earlier kernel: S groups before the wait */
#pragma unroll
    for (int s = 0; s < S; s++, q8a_next(k, fill))
        q8a_issue(k, w, scales, fill, ring + s * Q8A_STAGE, lane);
    if (fill.t >= k.items)
        llm__pdl_trigger(); /* every copy of this warp is issued */
    llm__pdl_wait();
    for (int v = warp; v < Q8I_WARPS; v += Q8A_WARPS)
        q8i_quant_row<FLAGS>(x, g, cols, xq, xd, red, lane, v);
    __syncthreads();
    float inv = q8i_inv<FLAGS>(red, eps, cols);
    float acc[2] = {0.0f, 0.0f};
    for (int s = 0; use.t < k.items; s = s + 1 == S ? 0 : s + 1) {
        unsigned char *st = ring + (size_t)s * Q8A_STAGE;
        q8a_wait<S - 1>(); /* one group an item: item use.t has landed */
        __syncwarp();      /* and every lane's part of it is visible */
        q8a_dot(st, xq, xd, use.c * Q8A_VECS, q8a_nvec(k, use.c), lane, acc);
        __syncwarp(); /* every lane is done with the stage before it is refilled */
        q8a_issue(k, w, scales, fill, st, lane);
        q8a_next(k, fill);
        if (fill.t == k.items)
            llm__pdl_trigger();
        if (use.c == k.cpp - 1) {
            float a0 = llm__warp_sum(acc[0]), a1 = llm__warp_sum(acc[1]);
            if (lane == 0)
                mv_pair_out<FLAGS>(rp, y, use.gi, rows, inv, a0, a1);
            acc[0] = 0.0f;
            acc[1] = 0.0f;
        }
        q8a_next(k, use);
    }
    q8a_wait<0>();
}

/* Whether the async-copy kernel takes this one-row product: the tuning on
 * (and split-K off, whose sums it does not make), one activation row, and
 * rows whose chunks and scales are whole 16-byte runs (cols a multiple of
 * 256, both arrays 16-byte aligned). */
static int q8a_takes(const llm_cuda *c, const llm_cuda_weight *w)
{
    return c->tune.mv_async && !c->tune.mv_split && c->pdl_ok && c->mv_rows <= 1 &&
           w->cols % 256 == 0 && w->scales && ((uintptr_t)w->scales & 15) == 0 &&
           ((uintptr_t)w->data & 15) == 0;
}

template <int FLAGS, int S>
static cudaError_t launch_q8a_s(const llm_cuda *c, const llm_cuda_weight *w, const float *x,
                                const llm_cuda_mv_fuse *f, float *y)
{
    size_t smem = q8a_x_bytes(w->cols) + (size_t)Q8A_WARPS * S * Q8A_STAGE;
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(matvec_q8a_kernel<FLAGS, S>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem);
        if (e != cudaSuccess)
            return e;
    }
    llm_cuda_rope_store rp;
    memset(&rp, 0, sizeof rp);
    if (FLAGS & MV_ROPE)
        rp = *f->rope;
    int64_t pairs = (w->rows + 1) / 2;
    int64_t need = (pairs + Q8A_WARPS - 1) / Q8A_WARPS;
    int64_t cap = (int64_t)c->sm_count * (c->tune.mv_blocks ? c->tune.mv_blocks : 2);
    return llm__launch(c, matvec_q8a_kernel<FLAGS, S>, dim3((unsigned)(need < cap ? need : cap)),
                       dim3(Q8A_WARPS * 32), smem, (const int8_t *)w->data, w->scales, x,
                       (FLAGS & MV_NORM) ? f->norm : (const float *)nullptr,
                       (FLAGS & MV_NORM) ? f->eps : 0.0f, y, w->rows, w->cols, rp);
}

template <int FLAGS>
static cudaError_t launch_q8_one(const llm_cuda *c, const llm_cuda_weight *w, const float *x,
                                 const llm_cuda_mv_fuse *f, float *y)
{
    if (!q8a_takes(c, w))
        return launch_q8i<FLAGS>(c, w, x, f, y);
    switch (c->tune.mv_async) {
    case 2: return launch_q8a_s<FLAGS, 2>(c, w, x, f, y);
    case 3: return launch_q8a_s<FLAGS, 3>(c, w, x, f, y);
    case 4: return launch_q8a_s<FLAGS, 4>(c, w, x, f, y);
    case 5:
    case 6: return launch_q8a_s<FLAGS, 6>(c, w, x, f, y);
    default: return launch_q8a_s<FLAGS, 8>(c, w, x, f, y);
    }
}

/* ---- a chain of one-row Q8 products in one launch (llm_cuda_matvec_chain) */

/* Why: launched one by one, every product pays its start, its activation's
 * quantization and its first loads with the memory idle (about 7 us a
 * product on the 8B shapes, bench/results/cuda_kern.md), and the register
 * file the loads need keeps the next launch's blocks from starting early.
 * A chain of products that depend on one another only through their
 * vectors (a layer's o, gate/up and down) runs here in one grid that stays
 * resident: between two products its blocks meet at a grid-wide barrier,
 * and every warp has its first batch of the next product's weights in
 * registers before it arrives (weights never depend on the chain).
 * Each product's bits are matvec_q8i_kernel's with split-K off: the same
 * pairs of a warp, the same lane order, the same quantization, read from x
 * with coherent loads since other blocks of this launch wrote it. */
typedef struct chain_dev_step {
    const int8_t *w;
    const uint16_t *scales;
    const float *x, *g;
    float *y;
    int64_t rows, cols;
    float eps;
    int flags;
} chain_dev_step;

typedef struct chain_dev {
    chain_dev_step s[LLM_CUDA_CHAIN_MAX];
    int n;
} chain_dev;

/* Every block of the grid arrives before any leaves; what a block wrote
 * before it arrives is visible to every block after. bar[0] counts the
 * blocks arrived and is back at 0 when the last one arrives; bar[1] is the
 * generation the others wait to see change. */
__device__ __forceinline__ void chain_barrier(unsigned *bar)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned *gen = bar + 1;
        unsigned g = *gen; /* read before arriving: it cannot move before */
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            while (*gen == g)
                __nanosleep(20);
        }
        __threadfence();
    }
    __syncthreads();
}

/* Asks L2 for the calling warp's first row pair of step s (its weights and
 * scales), so that the loads after the next barrier find them there. */
__device__ __forceinline__ void chain_prefetch(const chain_dev_step &s, int64_t gi0, int lane)
{
    const mv_lanes ml = {0, 32};
    if (gi0 < (s.rows + 1) / 2)
        mv_l2_pair(s.w, s.cols, s.scales, s.cols / LLM_QK8_0 * 2, s.rows, gi0, lane, ml);
}

/* One product of the chain for the calling warp (pairs gi0, gi0 + stride,
 * ...): matvec_q8i_kernel's loop after its dependency wait. Step I is a
 * constant, so the step's fields stay kernel parameters (a parameter
 * indexed at run time would be copied to local memory, and fields held in
 * registers would spill the loop's batches). Once its last weight load is
 * issued, the warp asks L2 for its first pair of step I + 1 (when there
 * is one) or lets the next kernel start. Every thread of the block calls
 * it. */
template <int FLAGS, int I>
__device__ __forceinline__ void chain_product(const chain_dev &d, int8_t *xq, float *red,
                                              float (*part)[Q8I_WARPS][2], int lane, int warp,
                                              int64_t gi0, int64_t stride)
{
    constexpr int U = 4, NX = I + 1 < LLM_CUDA_CHAIN_MAX ? I + 1 : I;
    const mv_lanes ml = {0, 32};
    const chain_dev_step &s = d.s[I];
    bool has_next = I + 1 < d.n;
    auto loads_done = [&] {
        if (has_next)
            chain_prefetch(d.s[NX], gi0, lane);
        else
            llm__pdl_trigger();
    };
    float *xd = reinterpret_cast<float *>(xq + s.cols);
    q8i_batch<U> cur;
    bool mine = gi0 < (s.rows + 1) / 2;
    if (mine)
        q8i_load(cur, s.w, s.scales, s.rows, s.cols, s.cols / 16, gi0, 0, lane, ml);
    q8i_quant_row<FLAGS, false>(s.x, s.g, s.cols, xq, xd, red, lane, warp);
    __syncthreads();
    float inv = q8i_inv<FLAGS>(red, s.eps, s.cols);
    if (!mine) {
        loads_done();
        return;
    }
    llm_cuda_rope_store rp;
    memset(&rp, 0, sizeof rp);
    mv_group gr = {gi0, stride, ml};
    q8i_pairs<FLAGS, U>(s.w, s.scales, s.rows, s.cols, s.y, rp, inv, xq, xd, gr, 0, 0, 0, part,
                        cur, lane, warp, loads_done);
}

/* Step I with the flags it was given (the four the chain takes). */
template <int I>
__device__ __forceinline__ void chain_run(const chain_dev &d, int8_t *xq, float *red,
                                          float (*part)[Q8I_WARPS][2], int lane, int warp,
                                          int64_t gi0, int64_t stride, unsigned *bar)
{
    if (I >= d.n)
        return;
    if (I > 0)
        chain_barrier(bar);
    switch (d.s[I].flags) {
    case 0: chain_product<0, I>(d, xq, red, part, lane, warp, gi0, stride); break;
    case MV_NORM: chain_product<MV_NORM, I>(d, xq, red, part, lane, warp, gi0, stride); break;
    case MV_ACC: chain_product<MV_ACC, I>(d, xq, red, part, lane, warp, gi0, stride); break;
    default:
        chain_product<MV_NORM | MV_PAIRS, I>(d, xq, red, part, lane, warp, gi0, stride);
        break;
    }
}

static_assert(LLM_CUDA_CHAIN_MAX == 4, "matvec_chain_kernel runs every step");

__global__ void __launch_bounds__(Q8I_WARPS * 32, 2) matvec_chain_kernel(chain_dev d,
                                                                          unsigned *bar)
{
    extern __shared__ uint4 chain_smem[]; /* xq [cols] int8, then xd [cols / 32] */
    __shared__ float red[Q8I_WARPS];
    __shared__ float part[2][Q8I_WARPS][2]; /* q8i_pairs' split-K sums: unused at ks 0 */
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int64_t gi0 = (int64_t)blockIdx.x * Q8I_WARPS + warp, stride = (int64_t)gridDim.x * Q8I_WARPS;
    int8_t *xq = reinterpret_cast<int8_t *>(chain_smem);
    chain_prefetch(d.s[0], gi0, lane); /* weights never depend on an earlier kernel */
    llm__pdl_wait();
    chain_run<0>(d, xq, red, part, lane, warp, gi0, stride, bar);
    chain_run<1>(d, xq, red, part, lane, warp, gi0, stride, bar);
    chain_run<2>(d, xq, red, part, lane, warp, gi0, stride, bar);
    chain_run<3>(d, xq, red, part, lane, warp, gi0, stride, bar);
}

/* Whether the int8-activation kernel runs a one-row product over w: Q8
 * layout, the tuning on, a row whose quantized activation fits (the
 * callers have checked 16-byte alignment of x and the weight). */
static int q8i_takes(const llm_cuda *c, const llm_cuda_weight *w)
{
    return w->type == LLM_TYPE_Q8_0 && c->tune.q8_int8 && w->cols <= LLM_CUDA_Q8_INT8_MAX_COLS;
}

static cudaError_t launch_q8i_flags(const llm_cuda *c, const llm_cuda_weight *w,
                                    const float *x, const llm_cuda_mv_fuse *f, float *y)
{
    return mv_flags_dispatch(f->flags, [&](auto fl) {
        return launch_q8_one<decltype(fl)::value>(c, w, x, f, y);
    });
}

/* ---- k-quant decode on their native layouts ------------------------------ */

/* One-row products over the native Q4_K and Q6_K layouts (kq_native) read
 * the file's bytes once (4.5 and 6.56 bits a weight, against the 8.5 of
 * the Q8 layout they were once re-quantized to). The activation is
 * quantized as matvec_q8i_kernel does (q8i_quantize, the same code), and
 * the block also keeps the int sum of every 16 quantized values, so the
 * per-sub-block offsets cost one multiply: for a Q4_K sub-block of 32,
 * sum((d*sc*q - dmin*m) * dx*xq) = dx * (d*sc * dot(q, xq) - dmin*m *
 * sum(xq)), dot(q, xq) by dp4a on the nibbles; for Q6_K, per 16 values,
 * dx * d*sc * (dot(q6, xq) - 32 sum(xq)), q6 = the low 4 and high 2 bits
 * put together (0..63).
 *
 * The grid, the pairing of rows and the split-K groups are
 * matvec_q8i_kernel's. A lane's unit of work: Q4_K two 16-byte vectors of
 * nibbles (64 values: two whole sub-blocks, so one scale and min decode
 * serves 32 values) and the super-block's 16-byte header (d, dmin,
 * scales; its 4 lanes read the same header in one request); Q6_K the
 * three vectors that hold 64 values (16 of each quarter of a half
 * super-block: ql of two quarters, ql of the other two, their qh) and the
 * 16 scale bytes. A warp's request is whole super-blocks, 1152 and 1664
 * contiguous bytes. */

template <int KT> struct kq_info;
template <> struct kq_info<KQ_Q4K> {
    static constexpr int units = 4, vecs = LLM_CUDA_Q4K_BLOCK / 16, U = 1, blocks = 2;
};
template <> struct kq_info<KQ_Q6K> {
    static constexpr int units = 4, vecs = LLM_CUDA_Q6K_BLOCK / 16, U = 1, blocks = 2;
};

static_assert(LLM_CUDA_KQ_MAX_COLS % LLM_QK_K == 0 &&
                  LLM_CUDA_KQ_MAX_COLS + LLM_CUDA_KQ_MAX_COLS / 32 * 4 +
                          LLM_CUDA_KQ_MAX_COLS / 16 * 4 <= 48 * 1024,
              "the k-quant kernel's activation fits the default shared memory");

/* One batch of a row pair: U units a row (Q4_K uses v[.][.][0..2]). */
template <int KT> struct kq_batch {
    uint4 v[kq_info<KT>::U][2][4];
    uint16_t d[kq_info<KT>::U][2];
};

/* The order a Q4_K lane reads its four 16-value x runs in (r: bit 0 swaps
 * the two vectors, bit 1 the two sub-blocks): chosen by the unit's place
 * so that, at each of the four steps, the 32 lanes of a warp (8
 * super-blocks x 4 units) spread over all 8 16-byte bank groups of shared
 * memory, 4 lanes each, the fewest a 512-byte read can take. */
__device__ __forceinline__ int kq_q4k_order(int64_t j)
{
    return (int)((j >> 1) & 1) | (int)(((j >> 2) & 1) << 1);
}

template <int KT>
__device__ __forceinline__ void kq_load(kq_batch<KT> &b, const uint4 *__restrict__ w,
                                        const uint16_t *__restrict__ scales, int64_t rows,
                                        int64_t nsb, int64_t nu, int64_t gi, int64_t base,
                                        int lane, mv_lanes ml)
{
    constexpr int UN = kq_info<KT>::units, V = kq_info<KT>::vecs;
    int64_t r0 = 2 * gi, r1 = r0 + 1 < rows ? r0 + 1 : r0;
#pragma unroll
    for (int u = 0; u < kq_info<KT>::U; u++) {
        int64_t j = base + ml.off + lane + ml.step * u;
        if (j < nu) {
            int64_t sb = j / UN;
            int k = (int)(j % UN);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const uint4 *p = w + ((r ? r1 : r0) * nsb + sb) * V;
                if (KT == KQ_Q4K) {
                    int o = kq_q4k_order(j) & 1;
                    b.v[u][r][0] = ld_stream(p + 1 + 2 * k + o);
                    b.v[u][r][1] = ld_stream(p + 2 + 2 * k - o);
                    b.v[u][r][2] = ld_stream(p);
                } else {
                    int h = k >> 1, o = k & 1;
                    b.v[u][r][0] = ld_stream(p + 4 * h + o);     /* ql, quarters 0 and 2 */
                    b.v[u][r][1] = ld_stream(p + 4 * h + 2 + o); /* ql, quarters 1 and 3 */
                    b.v[u][r][2] = ld_stream(p + 8 + 2 * h + o); /* qh */
                    b.v[u][r][3] = ld_stream(p + 12);            /* scales */
                    b.d[u][r] = __ldg(scales + (r ? r1 : r0) * nsb + sb);
                }
            }
        }
    }
}

__device__ __forceinline__ uint4 kq_mask(uint4 v, int shift, uint32_t mask)
{
    return make_uint4((v.x >> shift) & mask, (v.y >> shift) & mask, (v.z >> shift) & mask,
                      (v.w >> shift) & mask);
}

/* Sub-block s's (0..7) 6-bit scale and min from the Q4_K header words
 * y, z, w (the 12 scale bytes): llm_q4k_scale_min's rule. */
__device__ __forceinline__ void kq_scale_min(uint4 hd, int s, float &sc, float &m)
{
    int t = 8 * (s & 3);
    uint32_t yb = hd.y >> t, zb = hd.z >> t, wb = hd.w >> t;
    if (s < 4) {
        sc = (float)(yb & 63);
        m = (float)(zb & 63);
    } else {
        sc = (float)((wb & 15) | ((yb >> 2) & 0x30));
        m = (float)(((wb >> 4) & 15) | ((zb >> 2) & 0x30));
    }
}

template <int KT>
__device__ __forceinline__ void kq_dot(const kq_batch<KT> &b, const int8_t *xq, const float *xd,
                                       const int *xs, int64_t nu, int64_t base, int lane,
                                       mv_lanes ml, float *acc)
{
    constexpr int UN = kq_info<KT>::units;
#pragma unroll
    for (int u = 0; u < kq_info<KT>::U; u++) {
        int64_t j = base + ml.off + lane + ml.step * u;
        if (j >= nu)
            continue;
        int64_t e0 = j / UN * LLM_QK_K;
        int k = (int)(j % UN);
        if (KT == KQ_Q4K) {
            /* Unit k: the 32 bytes of values 64k.. (sub-block 2k in the low
             * nibbles, 2k+1 in the high ones); v[0] holds values 16o.. of
             * both and v[1] the other 16 (o = order bit 0). Step t reads
             * sub-block 2k + (t >> 1 ^ r1), half t & 1 ^ o. */
            int ord = kq_q4k_order(j), o = ord & 1, r1 = ord >> 1;
            int64_t ea = e0 + 64 * k + 32 * r1, eb = e0 + 64 * k + 32 * (r1 ^ 1);
            float dxa = xd[ea >> 5], dxb = xd[eb >> 5];
            int2 tsa = *reinterpret_cast<const int2 *>(xs + (ea >> 4));
            int2 tsb = *reinterpret_cast<const int2 *>(xs + (eb >> 4));
            float ta = (float)(tsa.x + tsa.y), tb = (float)(tsb.x + tsb.y);
            uint4 x0 = *reinterpret_cast<const uint4 *>(xq + ea + 16 * o);
            uint4 x1 = *reinterpret_cast<const uint4 *>(xq + ea + 16 * (o ^ 1));
            uint4 x2 = *reinterpret_cast<const uint4 *>(xq + eb + 16 * o);
            uint4 x3 = *reinterpret_cast<const uint4 *>(xq + eb + 16 * (o ^ 1));
            int sha = 4 * r1, shb = 4 * (r1 ^ 1);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                uint4 q0 = b.v[u][r][0], q1 = b.v[u][r][1], hd = b.v[u][r][2];
                int sa = i8_dot16(kq_mask(q0, sha, 0x0f0f0f0fu), x0);
                sa += i8_dot16(kq_mask(q1, sha, 0x0f0f0f0fu), x1);
                int sb = i8_dot16(kq_mask(q0, shb, 0x0f0f0f0fu), x2);
                sb += i8_dot16(kq_mask(q1, shb, 0x0f0f0f0fu), x3);
                float d = __half2float(__ushort_as_half((uint16_t)(hd.x & 0xffff)));
                float dm = __half2float(__ushort_as_half((uint16_t)(hd.x >> 16)));
                float sca, ma, scb, mb;
                kq_scale_min(hd, 2 * k + r1, sca, ma);
                kq_scale_min(hd, 2 * k + (r1 ^ 1), scb, mb);
                float va = fmaf(d * sca, (float)sa, -(dm * ma) * ta);
                float vb = fmaf(d * scb, (float)sb, -(dm * mb) * tb);
                acc[r] = fmaf(va, dxa, fmaf(vb, dxb, acc[r]));
            }
        } else {
            int h = k >> 1, o = k & 1;
#pragma unroll
            for (int g = 0; g < 4; g++) {
                int64_t e = e0 + 128 * h + 32 * g + 16 * o;
                uint4 xv = *reinterpret_cast<const uint4 *>(xq + e);
                float dx = xd[e >> 5];
                int t = 32 * xs[e >> 4];
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    uint4 ql = kq_mask(b.v[u][r][g & 1], 4 * (g >> 1), 0x0f0f0f0fu);
                    uint4 qh = kq_mask(b.v[u][r][2], 2 * g, 0x03030303u);
                    uint4 q6 = make_uint4(ql.x | qh.x << 4, ql.y | qh.y << 4, ql.z | qh.z << 4,
                                          ql.w | qh.w << 4);
                    /* scale byte 8h + 2g + o of the 16 */
                    uint4 sv = b.v[u][r][3];
                    uint32_t sw = h ? ((g >> 1) ? sv.w : sv.z) : ((g >> 1) ? sv.y : sv.x);
                    float sc = (float)(int8_t)(sw >> (8 * (2 * (g & 1) + o)));
                    float d = __half2float(__ushort_as_half(b.d[u][r]));
                    acc[r] = fmaf(d * sc * dx, (float)(i8_dot16(q6, xv) - t), acc[r]);
                }
            }
        }
    }
}

template <int KT, int FLAGS>
__global__ void __launch_bounds__(Q8I_WARPS * 32, kq_info<KT>::blocks)
matvec_kq_kernel(const uint4 *__restrict__ w, const uint16_t *__restrict__ scales,
                 const float *__restrict__ x, const float *__restrict__ g, float eps,
                 float *__restrict__ y, int64_t rows, int64_t cols, int ks_log2,
                 llm_cuda_rope_store rp)
{
    extern __shared__ uint4 kq_smem[]; /* xq [cols], xd [cols / 32], xs [cols / 16] */
    __shared__ float red[Q8I_WARPS];
    __shared__ float part[2][Q8I_WARPS][2];
    constexpr int U = kq_info<KT>::U;
    int8_t *xq = reinterpret_cast<int8_t *>(kq_smem);
    float *xd = reinterpret_cast<float *>(xq + cols);
    int *xs = reinterpret_cast<int *>(xd + cols / 32);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int64_t pairs = (rows + 1) / 2, nsb = cols / LLM_QK_K, nu = nsb * kq_info<KT>::units;
    mv_group gr = mv_group_of(ks_log2, warp);
    int64_t gi = gr.gi, span = (int64_t)32 * U << ks_log2;
    kq_batch<KT> cur;
    if (gi < pairs) /* weights never depend on an earlier kernel */
        kq_load<KT>(cur, w, scales, rows, nsb, nu, gi, 0, lane, gr.ml);
    llm__pdl_wait();
    float inv = q8i_quantize<FLAGS>(x, g, eps, cols, xq, xd, red, lane, warp);
    for (int64_t i = threadIdx.x; i < cols / 16; i += blockDim.x)
        xs[i] = i8_dot16(make_uint4(0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u),
                         *reinterpret_cast<const uint4 *>(xq + 16 * i));
    __syncthreads();
    if (gi >= pairs) {
        llm__pdl_trigger();
        return; /* after the barriers: the block's other warps have their x */
    }
    for (int par = 0;; par ^= 1) {
        float acc[2] = {0.0f, 0.0f};
        int64_t next = gi + gr.stride;
        for (int64_t base = 0; base < nu; base += span) {
            int64_t nbase = base + span;
            bool more = nbase < nu, load = more || next < pairs;
            kq_batch<KT> nb;
            if (load)
                kq_load<KT>(nb, w, scales, rows, nsb, nu, more ? gi : next, more ? nbase : 0,
                            lane, gr.ml);
            else
                llm__pdl_trigger(); /* every weight load of this warp is issued */
            kq_dot<KT>(cur, xq, xd, xs, nu, base, lane, gr.ml, acc);
            if (load)
                cur = nb;
        }
        float a0 = llm__warp_sum(acc[0]), a1 = llm__warp_sum(acc[1]);
        if (mv_split_sum(part[par], ks_log2, warp, lane, a0, a1) && lane == 0)
            mv_pair_out<FLAGS>(rp, y, gi, rows, inv, a0, a1);
        if (next >= pairs)
            return;
        gi = next;
    }
}

template <int KT, int FLAGS>
static cudaError_t launch_kq(const llm_cuda *c, const llm_cuda_weight *w, const float *x,
                             const llm_cuda_mv_fuse *f, float *y)
{
    int64_t pairs = (w->rows + 1) / 2;
    int ks = mv_split_log2(c, pairs, w->cols / LLM_QK_K * kq_info<KT>::units,
                           32 * kq_info<KT>::U,
                           (int64_t)c->sm_count * kq_info<KT>::blocks * Q8I_WARPS);
    size_t smem = (size_t)w->cols + (size_t)(w->cols / 32) * sizeof(float) +
                  (size_t)(w->cols / 16) * sizeof(int);
    llm_cuda_rope_store rp;
    memset(&rp, 0, sizeof rp);
    if (FLAGS & MV_ROPE)
        rp = *f->rope;
    return llm__launch(c, matvec_kq_kernel<KT, FLAGS>,
                       dim3(mv_pair_blocks(c, pairs, ks, kq_info<KT>::blocks)),
                       dim3(Q8I_WARPS * 32), smem, (const uint4 *)w->data,
                       (const uint16_t *)w->scales, x,
                       (FLAGS & MV_NORM) ? f->norm : (const float *)nullptr,
                       (FLAGS & MV_NORM) ? f->eps : 0.0f, y, w->rows, w->cols, ks, rp);
}

template <int KT>
static cudaError_t launch_kq_type(const llm_cuda *c, const llm_cuda_weight *w, const float *x,
                                  const llm_cuda_mv_fuse *f, float *y)
{
    return mv_flags_dispatch(f->flags, [&](auto fl) {
        return launch_kq<KT, decltype(fl)::value>(c, w, x, f, y);
    });
}
/* ---- Q4_K decode on the grouped layout ------------------------------------ */

/* matvec_kq_kernel on Q4_K reads the file's 144-byte super-blocks: a
 * lane's two nibble vectors and its header are three 16-byte loads into
 * three halves of different 32-byte sectors, so a warp asks L2 for most
 * sectors twice, and it decodes through masks and shifts per nibble
 * half. The grouped layout (tune.kq_grouped >= 1, llm__q4k_grouped_vec) holds the
 * same bytes with each of a warp's loads 512 contiguous bytes of nibbles
 * (the headers after the row's nibbles, 64 contiguous bytes a load), and
 * this kernel keeps matvec_kq_kernel's unit of work: a lane takes both
 * halves of one sub-block pair (64 values, one decode of two scales and
 * mins) and reads its four 16-value runs of x in the same conflict-free
 * order. A nibble half is one AND: the low nibbles as they are, the high
 * ones as 16 x q with dp4a taking them unsigned (dp4a.u32.s32) and the
 * sum shifted back by 4, which is exact. The activation is quantized as
 * the Q8 kernel does; xm keeps dx times the int sum of each 32 values
 * for the mins. Per sub-block of 32 and row:
 * dx * (d*sc*dot(q, xq) - dmin*m*sum(xq)) = d * sc*dot * dx - dmin * m * xm.
 * U sub-block pairs a lane and row are loaded per batch (tune.kq_grouped = 1: one,
 * 2: two), with the next batch in flight as in the other pair kernels.
 *
 * The four lanes of a super-block each load one 4-byte word of its header
 * and take the other three from their neighbours by shuffles when they
 * use it: a batch then holds 9 registers a row instead of 12, since
 * registers held by loads in flight bound the bytes a multiprocessor
 * keeps in flight, and grouped2's two batches a lane then fit without
 * spilling (ptxas, sm_90a: 104 registers at one batch, 105-114 before;
 * 128 at two, 0-28 bytes spilled, 112-132 before). */
template <int U> struct kq4g_batch {
    uint4 q[U][2][2];  /* [unit][row][the half read first, the other] */
    uint32_t h[U][2];  /* [unit][row] word (lane & 3) of the super-block's header */
};

/* A 4-byte weight load past L1 (ld_stream's, for one header word). */
__device__ __forceinline__ uint32_t ld_stream1(const uint32_t *p)
{
    uint32_t r;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
}

template <int U>
__device__ __forceinline__ void kq4g_load(kq4g_batch<U> &b, const uint4 *__restrict__ w,
                                          int64_t rows, int64_t nsb, int64_t nu, int64_t gi,
                                          int64_t base, int lane, mv_lanes ml)
{
    int64_t r0 = 2 * gi, r1 = r0 + 1 < rows ? r0 + 1 : r0;
    int64_t rv = nsb * (LLM_CUDA_Q4K_BLOCK / 16); /* vectors a row */
#pragma unroll
    for (int u = 0; u < U; u++) {
        int64_t j = base + ml.off + lane + ml.step * u;
        if (j < nu) {
            int64_t g = j >> 5, G = nsb - 8 * g < 8 ? nsb - 8 * g : 8;
            int o = kq_q4k_order(j) & 1;
            int64_t v0 = 64 * g + (j & 31), v1 = v0 + 4 * G;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const uint4 *p = w + (r ? r1 : r0) * rv;
                b.q[u][r][0] = ld_stream(p + (o ? v1 : v0));
                b.q[u][r][1] = ld_stream(p + (o ? v0 : v1));
                b.h[u][r] = ld_stream1(reinterpret_cast<const uint32_t *>(p + 8 * nsb) + j);
            }
        }
    }
}

/* dp4a of unsigned bytes a with signed bytes b. */
__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c)
{
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

__device__ __forceinline__ int kq4g_dot16(uint4 q, uint32_t m, uint4 x, int s)
{
    s = dp4a_us(q.x & m, x.x, s);
    s = dp4a_us(q.y & m, x.y, s);
    s = dp4a_us(q.z & m, x.z, s);
    return dp4a_us(q.w & m, x.w, s);
}

template <int U>
__device__ __forceinline__ void kq4g_dot(const kq4g_batch<U> &b, const int8_t *xq,
                                         const float *xd, const float *xm, int64_t nu,
                                         int64_t base, int lane, mv_lanes ml, float *acc)
{
    /* Lane constants (j and lane agree mod 32): the pair p, the order of
     * its reads (o: the half read first, r1: sub-block 2p + r1 is "a"),
     * and the scale decode of pair p's two sub-blocks 2p, 2p+1
     * (llm_q4k_scale_min's rule on the header words y, z, w, two bytes at
     * a time: p < 2 their 6 low bits, p >= 2 4 bits of w and 2 of y or z). */
    int ord = kq_q4k_order(lane), o = ord & 1, r1 = ord >> 1, p = lane & 3, hp = p >> 1;
    uint32_t ma = r1 ? 0xf0f0f0f0u : 0x0f0f0f0fu, mb = ~ma;
    int sha = 4 * r1, shb = 4 - sha, s16 = 16 * (p & 1), sb2 = s16 + 2, sm = s16 + 4 * hp;
    uint32_t mlo = hp ? 0x0f0fu : 0x3f3fu, mhi = hp ? 0x3030u : 0u;
    uint32_t sela = r1 ? 0x4441u : 0x4440u, selb = r1 ? 0x4440u : 0x4441u;
    int g4 = lane & ~3; /* the first lane of this lane's super-block */
#pragma unroll
    for (int u = 0; u < U; u++) {
        /* Every lane shuffles (a whole group of four is in or out of the
         * row together, nu being a multiple of 4), before any leaves. */
        uint4 hw[2];
#pragma unroll
        for (int r = 0; r < 2; r++)
            hw[r] = make_uint4(__shfl_sync(0xffffffffu, b.h[u][r], g4),
                               __shfl_sync(0xffffffffu, b.h[u][r], g4 + 1),
                               __shfl_sync(0xffffffffu, b.h[u][r], g4 + 2),
                               __shfl_sync(0xffffffffu, b.h[u][r], g4 + 3));
        int64_t j = base + ml.off + lane + ml.step * u;
        if (j >= nu)
            continue;
        int64_t ka = 8 * (j >> 2) + 2 * p + r1, kb = ka ^ 1; /* blocks of 32 in the row */
        float dxa = xd[ka], dxb = xd[kb], xma = xm[ka], xmb = xm[kb];
        const uint4 *xa = reinterpret_cast<const uint4 *>(xq + 32 * ka);
        const uint4 *xb = reinterpret_cast<const uint4 *>(xq + 32 * kb);
        uint4 x0 = xa[o], x1 = xa[o ^ 1], x2 = xb[o], x3 = xb[o ^ 1];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            uint4 q0 = b.q[u][r][0], q1 = b.q[u][r][1], hd = hw[r];
            int ia = kq4g_dot16(q1, ma, x1, kq4g_dot16(q0, ma, x0, 0)) >> sha;
            int ib = kq4g_dot16(q1, mb, x3, kq4g_dot16(q0, mb, x2, 0)) >> shb;
            uint32_t sc2 = (((hp ? hd.w : hd.y) >> s16) & mlo) | ((hd.y >> sb2) & mhi);
            uint32_t m2 = (((hp ? hd.w : hd.z) >> sm) & mlo) | ((hd.z >> sb2) & mhi);
            int sca = (int)__byte_perm(sc2, 0, sela), scb = (int)__byte_perm(sc2, 0, selb);
            int mna = (int)__byte_perm(m2, 0, sela), mnb = (int)__byte_perm(m2, 0, selb);
            float d = __half2float(__ushort_as_half((uint16_t)(hd.x & 0xffff)));
            float dm = __half2float(__ushort_as_half((uint16_t)(hd.x >> 16)));
            float fd = fmaf((float)(ia * sca), dxa, (float)(ib * scb) * dxb);
            float fm = fmaf((float)mna, xma, (float)mnb * xmb);
            acc[r] = fmaf(d, fd, fmaf(-dm, fm, acc[r]));
        }
    }
}

template <int FLAGS, int U>
__global__ void __launch_bounds__(Q8I_WARPS * 32, 2)
matvec_kq4g_kernel(const uint4 *__restrict__ w, const float *__restrict__ x,
                   const float *__restrict__ g, float eps, float *__restrict__ y, int64_t rows,
                   int64_t cols, int ks_log2, int l2, llm_cuda_rope_store rp)
{
    extern __shared__ uint4 kq4g_smem[]; /* xq [cols], xd [cols / 32], xm [cols / 32] */
    __shared__ float red[Q8I_WARPS];
    __shared__ float part[2][Q8I_WARPS][2];
    int8_t *xq = reinterpret_cast<int8_t *>(kq4g_smem);
    float *xd = reinterpret_cast<float *>(xq + cols);
    float *xm = xd + cols / 32;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int64_t pairs = (rows + 1) / 2, nsb = cols / LLM_QK_K, nu = nsb * 4;
    mv_group gr = mv_group_of(ks_log2, warp);
    int64_t gi = gr.gi, span = (int64_t)32 * U << ks_log2;
    kq4g_batch<U> cur;
    if (gi < pairs) { /* weights never depend on an earlier kernel */
        kq4g_load<U>(cur, w, rows, nsb, nu, gi, 0, lane, gr.ml);
        for (int a = 0; a < mv_l2_first(l2) && gi + a * gr.stride < pairs; a++)
            mv_l2_pair(w, nsb * LLM_CUDA_Q4K_BLOCK, nullptr, 0, rows,
                       gi + a * gr.stride, lane, gr.ml);
    }
    llm__pdl_wait();
    float inv = q8i_quantize<FLAGS>(x, g, eps, cols, xq, xd, red, lane, warp);
    for (int64_t i = threadIdx.x; i < cols / 32; i += blockDim.x) {
        const uint4 *v = reinterpret_cast<const uint4 *>(xq + 32 * i);
        uint4 one = make_uint4(0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u);
        xm[i] = xd[i] * (float)(i8_dot16(one, v[0]) + i8_dot16(one, v[1]));
    }
    __syncthreads();
    if (gi >= pairs) {
        llm__pdl_trigger();
        return; /* after the barriers: the block's other warps have their x */
    }
    for (int par = 0;; par ^= 1) {
        float acc[2] = {0.0f, 0.0f};
        int64_t next = gi + gr.stride;
        int64_t ga = gi + mv_l2_ahead(l2) * gr.stride;
        if (ga > gi && ga < pairs)
            mv_l2_pair(w, nsb * LLM_CUDA_Q4K_BLOCK, nullptr, 0, rows, ga, lane, gr.ml);
        for (int64_t base = 0; base < nu; base += span) {
            int64_t nbase = base + span;
            bool more = nbase < nu, load = more || next < pairs;
            kq4g_batch<U> nb;
            if (load)
                kq4g_load<U>(nb, w, rows, nsb, nu, more ? gi : next, more ? nbase : 0, lane,
                             gr.ml);
            else
                llm__pdl_trigger(); /* every weight load of this warp is issued */
            kq4g_dot<U>(cur, xq, xd, xm, nu, base, lane, gr.ml, acc);
            if (load)
                cur = nb;
        }
        float a0 = llm__warp_sum(acc[0]), a1 = llm__warp_sum(acc[1]);
        if (mv_split_sum(part[par], ks_log2, warp, lane, a0, a1) && lane == 0)
            mv_pair_out<FLAGS>(rp, y, gi, rows, inv, a0, a1);
        if (next >= pairs)
            return;
        gi = next;
    }
}

template <int FLAGS, int U>
static cudaError_t launch_kq4g(const llm_cuda *c, const llm_cuda_weight *w, const float *x,
                               const llm_cuda_mv_fuse *f, float *y)
{
    int64_t pairs = (w->rows + 1) / 2;
    int ks = mv_split_log2(c, pairs, w->cols / LLM_QK_K * 4, 32 * U,
                           (int64_t)c->sm_count * 2 * Q8I_WARPS);
    size_t smem = (size_t)w->cols + (size_t)(w->cols / 32) * 2 * sizeof(float);
    llm_cuda_rope_store rp;
    memset(&rp, 0, sizeof rp);
    if (FLAGS & MV_ROPE)
        rp = *f->rope;
    return llm__launch(c, matvec_kq4g_kernel<FLAGS, U>, dim3(mv_pair_blocks(c, pairs, ks, 2)),
                       dim3(Q8I_WARPS * 32), smem, (const uint4 *)w->data, x,
                       (FLAGS & MV_NORM) ? f->norm : (const float *)nullptr,
                       (FLAGS & MV_NORM) ? f->eps : 0.0f, y, w->rows, w->cols, ks,
                       c->tune.mv_l2, rp);
}

template <int U>
static cudaError_t launch_kq4g_u(const llm_cuda *c, const llm_cuda_weight *w, const float *x,
                                 const llm_cuda_mv_fuse *f, float *y)
{
    return mv_flags_dispatch(f->flags, [&](auto fl) {
        return launch_kq4g<decltype(fl)::value, U>(c, w, x, f, y);
    });
}

/* ---- Q5_K decode on its grouped layout ------------------------------------ */

/* Q5_K is Q4_K with a fifth bit per value (5.5 bits a weight). Its grouped
 * layout (group_q5k_row) keeps the nibbles and headers where the grouped
 * Q4_K layout has them and adds, per super-block, the fifth bits packed
 * per sub-block pair p and half h into one word (llm__q5k_bits): byte k,
 * bit t holds the bit of value 4t + k of the half of sub-block 2p, bit
 * 4 + t that of sub-block 2p + 1, so that the bits of dp4a word t of
 * either sub-block are one shift and one AND away, already in bit 4 of
 * each byte. A lane's unit is kq4g's (one sub-block pair, both halves, one
 * scale decode) plus 8 bytes of bits, so a warp's loads stay 512 (nibbles),
 * 64 (headers, 4 lanes a header) and 256 (bits) contiguous bytes. The
 * values 0..31 go to dp4a as signed bytes; per sub-block of 32 and row,
 * as Q4_K: d * sc * dot * dx - dmin * m * xm. */
struct kq5g_batch {
    uint4 q[2][2]; /* [row][the half read first, the other] */
    uint4 h[2];    /* [row] the super-block's header */
    uint2 b[2];    /* [row] the pair's fifth bits, half 0 and half 1 */
};

/* An 8-byte weight load past L1 (ld_stream's, for the fifth bits). */
__device__ __forceinline__ uint2 ld_stream2(const uint2 *p)
{
    uint2 r;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];"
                 : "=r"(r.x), "=r"(r.y)
                 : "l"(p));
    return r;
}

__device__ __forceinline__ void kq5g_load(kq5g_batch &b, const uint4 *__restrict__ w,
                                          int64_t rows, int64_t nsb, int64_t nu, int64_t gi,
                                          int64_t base, int lane, mv_lanes ml)
{
    int64_t r0 = 2 * gi, r1 = r0 + 1 < rows ? r0 + 1 : r0;
    int64_t rv = nsb * (LLM_CUDA_Q5K_BLOCK / 16), j = base + ml.off + lane;
    if (j >= nu)
        return;
    int64_t g = j >> 5, G = nsb - 8 * g < 8 ? nsb - 8 * g : 8;
    int o = kq_q4k_order(j) & 1;
    int64_t v0 = 64 * g + (j & 31), v1 = v0 + 4 * G;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const uint4 *p = w + (r ? r1 : r0) * rv;
        b.q[r][0] = ld_stream(p + (o ? v1 : v0));
        b.q[r][1] = ld_stream(p + (o ? v0 : v1));
        b.h[r] = ld_stream(p + 8 * nsb + (j >> 2));
        b.b[r] = ld_stream2(reinterpret_cast<const uint2 *>(p + 9 * nsb) + j);
    }
}

/* The two sub-blocks' dot products over one 16-byte half: q its nibbles,
 * X its fifth bits, xa / xb the x of the same half of sub-block a (2p +
 * r1) and b (the other). */
__device__ __forceinline__ void kq5g_dot16(uint4 q, uint32_t X, int r1, uint4 xa, uint4 xb,
                                           int &ia, int &ib)
{
    const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
    const int xaw[4] = {(int)xa.x, (int)xa.y, (int)xa.z, (int)xa.w};
    const int xbw[4] = {(int)xb.x, (int)xb.y, (int)xb.z, (int)xb.w};
#pragma unroll
    for (int t = 0; t < 4; t++) {
        uint32_t lo = (qw[t] & 0x0f0f0f0fu) | ((X << (4 - t)) & 0x10101010u);
        uint32_t hi = ((qw[t] >> 4) & 0x0f0f0f0fu) | ((X >> t) & 0x10101010u);
        ia = __dp4a((int)(r1 ? hi : lo), xaw[t], ia);
        ib = __dp4a((int)(r1 ? lo : hi), xbw[t], ib);
    }
}

__device__ __forceinline__ void kq5g_dot(const kq5g_batch &b, const int8_t *xq, const float *xd,
                                         const float *xm, int64_t nu, int64_t base, int lane,
                                         mv_lanes ml, float *acc)
{
    int64_t j = base + ml.off + lane;
    if (j >= nu)
        return;
    /* kq4g_dot's lane constants and scale decode */
    int ord = kq_q4k_order(lane), o = ord & 1, r1 = ord >> 1, p = lane & 3, hp = p >> 1;
    int s16 = 16 * (p & 1), sb2 = s16 + 2, sm = s16 + 4 * hp;
    uint32_t mlo = hp ? 0x0f0fu : 0x3f3fu, mhi = hp ? 0x3030u : 0u;
    uint32_t sela = r1 ? 0x4441u : 0x4440u, selb = r1 ? 0x4440u : 0x4441u;
    int64_t ka = 8 * (j >> 2) + 2 * p + r1, kb = ka ^ 1;
    float dxa = xd[ka], dxb = xd[kb], xma = xm[ka], xmb = xm[kb];
    const uint4 *xa = reinterpret_cast<const uint4 *>(xq + 32 * ka);
    const uint4 *xb = reinterpret_cast<const uint4 *>(xq + 32 * kb);
    uint4 x0 = xa[o], x1 = xa[o ^ 1], x2 = xb[o], x3 = xb[o ^ 1];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        uint4 hd = b.h[r];
        uint32_t X0 = o ? b.b[r].y : b.b[r].x, X1 = o ? b.b[r].x : b.b[r].y;
        int ia = 0, ib = 0;
        kq5g_dot16(b.q[r][0], X0, r1, x0, x2, ia, ib);
        kq5g_dot16(b.q[r][1], X1, r1, x1, x3, ia, ib);
        uint32_t sc2 = (((hp ? hd.w : hd.y) >> s16) & mlo) | ((hd.y >> sb2) & mhi);
        uint32_t m2 = (((hp ? hd.w : hd.z) >> sm) & mlo) | ((hd.z >> sb2) & mhi);
        int sca = (int)__byte_perm(sc2, 0, sela), scb = (int)__byte_perm(sc2, 0, selb);
        int mna = (int)__byte_perm(m2, 0, sela), mnb = (int)__byte_perm(m2, 0, selb);
        float d = __half2float(__ushort_as_half((uint16_t)(hd.x & 0xffff)));
        float dm = __half2float(__ushort_as_half((uint16_t)(hd.x >> 16)));
        float fd = fmaf((float)(ia * sca), dxa, (float)(ib * scb) * dxb);
        float fm = fmaf((float)mna, xma, (float)mnb * xmb);
        acc[r] = fmaf(d, fd, fmaf(-dm, fm, acc[r]));
    }
}

template <int FLAGS>
__global__ void __launch_bounds__(Q8I_WARPS * 32, 2)
matvec_kq5g_kernel(const uint4 *__restrict__ w, const float *__restrict__ x,
                   const float *__restrict__ g, float eps, float *__restrict__ y, int64_t rows,
                   int64_t cols, int ks_log2, int l2, llm_cuda_rope_store rp)
{
    extern __shared__ uint4 kq5g_smem[]; /* xq [cols], xd [cols / 32], xm [cols / 32] */
    __shared__ float red[Q8I_WARPS];
    __shared__ float part[2][Q8I_WARPS][2];
    int8_t *xq = reinterpret_cast<int8_t *>(kq5g_smem);
    float *xd = reinterpret_cast<float *>(xq + cols);
    float *xm = xd + cols / 32;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int64_t pairs = (rows + 1) / 2, nsb = cols / LLM_QK_K, nu = nsb * 4;
    mv_group gr = mv_group_of(ks_log2, warp);
    int64_t gi = gr.gi, span = (int64_t)32 << ks_log2;
    kq5g_batch cur;
    if (gi < pairs) { /* weights never depend on an earlier kernel */
        kq5g_load(cur, w, rows, nsb, nu, gi, 0, lane, gr.ml);
        for (int a = 0; a < mv_l2_first(l2) && gi + a * gr.stride < pairs; a++)
            mv_l2_pair(w, nsb * LLM_CUDA_Q5K_BLOCK, nullptr, 0, rows,
                       gi + a * gr.stride, lane, gr.ml);
    }
    llm__pdl_wait();
    float inv = q8i_quantize<FLAGS>(x, g, eps, cols, xq, xd, red, lane, warp);
    for (int64_t i = threadIdx.x; i < cols / 32; i += blockDim.x) {
        const uint4 *v = reinterpret_cast<const uint4 *>(xq + 32 * i);
        uint4 one = make_uint4(0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u);
        xm[i] = xd[i] * (float)(i8_dot16(one, v[0]) + i8_dot16(one, v[1]));
    }
    __syncthreads();
    if (gi >= pairs) {
        llm__pdl_trigger();
        return; /* after the barriers: the block's other warps have their x */
    }
    for (int par = 0;; par ^= 1) {
        float acc[2] = {0.0f, 0.0f};
        int64_t next = gi + gr.stride;
        int64_t ga = gi + mv_l2_ahead(l2) * gr.stride;
        if (ga > gi && ga < pairs)
            mv_l2_pair(w, nsb * LLM_CUDA_Q5K_BLOCK, nullptr, 0, rows, ga, lane, gr.ml);
        for (int64_t base = 0; base < nu; base += span) {
            int64_t nbase = base + span;
            bool more = nbase < nu, load = more || next < pairs;
            kq5g_batch nb;
            if (load)
                kq5g_load(nb, w, rows, nsb, nu, more ? gi : next, more ? nbase : 0, lane,
                          gr.ml);
            else
                llm__pdl_trigger(); /* every weight load of this warp is issued */
            kq5g_dot(cur, xq, xd, xm, nu, base, lane, gr.ml, acc);
            if (load)
                cur = nb;
        }
        float a0 = llm__warp_sum(acc[0]), a1 = llm__warp_sum(acc[1]);
        if (mv_split_sum(part[par], ks_log2, warp, lane, a0, a1) && lane == 0)
            mv_pair_out<FLAGS>(rp, y, gi, rows, inv, a0, a1);
        if (next >= pairs)
            return;
        gi = next;
    }
}

template <int FLAGS>
static cudaError_t launch_kq5g(const llm_cuda *c, const llm_cuda_weight *w, const float *x,
                               const llm_cuda_mv_fuse *f, float *y)
{
    int64_t pairs = (w->rows + 1) / 2;
    int ks = mv_split_log2(c, pairs, w->cols / LLM_QK_K * 4, 32,
                           (int64_t)c->sm_count * 2 * Q8I_WARPS);
    size_t smem = (size_t)w->cols + (size_t)(w->cols / 32) * 2 * sizeof(float);
    llm_cuda_rope_store rp;
    memset(&rp, 0, sizeof rp);
    if (FLAGS & MV_ROPE)
        rp = *f->rope;
    return llm__launch(c, matvec_kq5g_kernel<FLAGS>, dim3(mv_pair_blocks(c, pairs, ks, 2)),
                       dim3(Q8I_WARPS * 32), smem, (const uint4 *)w->data, x,
                       (FLAGS & MV_NORM) ? f->norm : (const float *)nullptr,
                       (FLAGS & MV_NORM) ? f->eps : 0.0f, y, w->rows, w->cols, ks,
                       c->tune.mv_l2, rp);
}

static cudaError_t launch_kq5g_flags(const llm_cuda *c, const llm_cuda_weight *w,
                                     const float *x, const llm_cuda_mv_fuse *f, float *y)
{
    return mv_flags_dispatch(f->flags, [&](auto fl) {
        return launch_kq5g<decltype(fl)::value>(c, w, x, f, y);
    });
}

/* ---- Q6_K decode on the grouped layout ------------------------------------ */

/* The same for Q6_K (llm__q6k_grouped_vec): a lane's unit stays
 * matvec_kq_kernel's (16 values of each quarter of half h, 48 bytes of
 * data and 4 scales), its three data vectors are three 512-byte loads of
 * the warp, and the 6-bit values are put together a word at a time with
 * one shift and one three-way logic operation each (quarter 0: A & 0x0f
 * | C << 4 & 0x30, 1: B & 0x0f | C << 2 & 0x30, 2: A >> 4 & 0x0f | C &
 * 0x30, 3: B >> 4 & 0x0f | C >> 2 & 0x30). Per quarter and row:
 * d * sc * dx * (dot(q6, xq) - 32 sum(xq)), summed in int up to the dx. */
struct kq6g_batch {
    uint4 v[2][3];   /* [row] A, B, C */
    uint2 s[2];      /* [row] scale bytes 8h .. 8h + 7 */
    uint16_t d[2];   /* [row] the super-block's fp16 d */
};

__device__ __forceinline__ void kq6g_load(kq6g_batch &b, const uint4 *__restrict__ w,
                                          const uint16_t *__restrict__ scales, int64_t rows,
                                          int64_t nsb, int64_t nu, int64_t gi, int64_t base,
                                          int lane, mv_lanes ml)
{
    int64_t r0 = 2 * gi, r1 = r0 + 1 < rows ? r0 + 1 : r0;
    int64_t rv = nsb * (LLM_CUDA_Q6K_BLOCK / 16), j = base + ml.off + lane;
    if (j >= nu)
        return;
    int64_t g = j >> 5, G = nsb - 8 * g < 8 ? nsb - 8 * g : 8, v0 = 96 * g + (j & 31);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int64_t row = r ? r1 : r0;
        const uint4 *p = w + row * rv;
        b.v[r][0] = ld_stream(p + v0);
        b.v[r][1] = ld_stream(p + v0 + 4 * G);
        b.v[r][2] = ld_stream(p + v0 + 8 * G);
        b.s[r] = __ldg(reinterpret_cast<const uint2 *>(p + 12 * nsb + (j >> 2)) + ((j >> 1) & 1));
        b.d[r] = __ldg(scales + row * nsb + (j >> 2));
    }
}

__device__ __forceinline__ void kq6g_dot(const kq6g_batch &b, const int8_t *xq, const float *xd,
                                         const int *xs, int64_t nu, int64_t base, int lane,
                                         mv_lanes ml, float *acc)
{
    int64_t j = base + ml.off + lane;
    if (j >= nu)
        return;
    int h = (lane >> 1) & 1, t = lane & 1; /* unit 2h + t = j & 3 */
    int64_t sb = j >> 2, k32 = 8 * sb + 4 * h, k16 = 16 * sb + 8 * h + t;
    const int8_t *xe = xq + 256 * sb + 128 * h + 16 * t;
    uint4 x[4];
    float dx[4];
    int ts[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        x[i] = *reinterpret_cast<const uint4 *>(xe + 32 * i);
        dx[i] = xd[k32 + i];
        ts[i] = 32 * xs[k16 + 2 * i];
    }
    const uint32_t lo = 0x0f0f0f0fu, hi = 0x30303030u;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const uint4 A = b.v[r][0], B = b.v[r][1], C = b.v[r][2];
        uint4 q[4];
        q[0] = make_uint4((A.x & lo) | ((C.x << 4) & hi), (A.y & lo) | ((C.y << 4) & hi),
                          (A.z & lo) | ((C.z << 4) & hi), (A.w & lo) | ((C.w << 4) & hi));
        q[1] = make_uint4((B.x & lo) | ((C.x << 2) & hi), (B.y & lo) | ((C.y << 2) & hi),
                          (B.z & lo) | ((C.z << 2) & hi), (B.w & lo) | ((C.w << 2) & hi));
        q[2] = make_uint4(((A.x >> 4) & lo) | (C.x & hi), ((A.y >> 4) & lo) | (C.y & hi),
                          ((A.z >> 4) & lo) | (C.z & hi), ((A.w >> 4) & lo) | (C.w & hi));
        q[3] = make_uint4(((B.x >> 4) & lo) | ((C.x >> 2) & hi),
                          ((B.y >> 4) & lo) | ((C.y >> 2) & hi),
                          ((B.z >> 4) & lo) | ((C.z >> 2) & hi),
                          ((B.w >> 4) & lo) | ((C.w >> 2) & hi));
        /* scale 8h + t + 2i: byte t (i even) or t + 2 (i odd) of word i >> 1 */
        const uint32_t sw[2] = {b.s[r].x, b.s[r].y};
        float f = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int sc = (int)(int8_t)(sw[i >> 1] >> (8 * (t + 2 * (i & 1))));
            f = fmaf((float)(sc * (i8_dot16(q[i], x[i]) - ts[i])), dx[i], f);
        }
        acc[r] = fmaf(__half2float(__ushort_as_half(b.d[r])), f, acc[r]);
    }
}

template <int FLAGS>
__global__ void __launch_bounds__(Q8I_WARPS * 32, 2)
matvec_kq6g_kernel(const uint4 *__restrict__ w, const uint16_t *__restrict__ scales,
                   const float *__restrict__ x, const float *__restrict__ g, float eps,
                   float *__restrict__ y, int64_t rows, int64_t cols, int ks_log2, int l2,
                   llm_cuda_rope_store rp)
{
    extern __shared__ uint4 kq6g_smem[]; /* xq [cols], xd [cols / 32], xs [cols / 16] */
    __shared__ float red[Q8I_WARPS];
    __shared__ float part[2][Q8I_WARPS][2];
    int8_t *xq = reinterpret_cast<int8_t *>(kq6g_smem);
    float *xd = reinterpret_cast<float *>(xq + cols);
    int *xs = reinterpret_cast<int *>(xd + cols / 32);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int64_t pairs = (rows + 1) / 2, nsb = cols / LLM_QK_K, nu = nsb * 4;
    mv_group gr = mv_group_of(ks_log2, warp);
    int64_t gi = gr.gi, span = (int64_t)32 << ks_log2;
    kq6g_batch cur;
    if (gi < pairs) { /* weights never depend on an earlier kernel */
        kq6g_load(cur, w, scales, rows, nsb, nu, gi, 0, lane, gr.ml);
        for (int a = 0; a < mv_l2_first(l2) && gi + a * gr.stride < pairs; a++)
            mv_l2_pair(w, nsb * LLM_CUDA_Q6K_BLOCK, scales, nsb * 2, rows,
                       gi + a * gr.stride, lane, gr.ml);
    }
    llm__pdl_wait();
    float inv = q8i_quantize<FLAGS>(x, g, eps, cols, xq, xd, red, lane, warp);
    for (int64_t i = threadIdx.x; i < cols / 16; i += blockDim.x)
        xs[i] = i8_dot16(make_uint4(0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u),
                         *reinterpret_cast<const uint4 *>(xq + 16 * i));
    __syncthreads();
    if (gi >= pairs) {
        llm__pdl_trigger();
        return; /* after the barriers: the block's other warps have their x */
    }
    for (int par = 0;; par ^= 1) {
        float acc[2] = {0.0f, 0.0f};
        int64_t next = gi + gr.stride;
        int64_t ga = gi + mv_l2_ahead(l2) * gr.stride;
        if (ga > gi && ga < pairs)
            mv_l2_pair(w, nsb * LLM_CUDA_Q6K_BLOCK, scales, nsb * 2, rows, ga, lane, gr.ml);
        for (int64_t base = 0; base < nu; base += span) {
            int64_t nbase = base + span;
            bool more = nbase < nu, load = more || next < pairs;
            kq6g_batch nb;
            if (load)
                kq6g_load(nb, w, scales, rows, nsb, nu, more ? gi : next, more ? nbase : 0, lane,
                          gr.ml);
            else
                llm__pdl_trigger(); /* every weight load of this warp is issued */
            kq6g_dot(cur, xq, xd, xs, nu, base, lane, gr.ml, acc);
            if (load)
                cur = nb;
        }
        float a0 = llm__warp_sum(acc[0]), a1 = llm__warp_sum(acc[1]);
        if (mv_split_sum(part[par], ks_log2, warp, lane, a0, a1) && lane == 0)
            mv_pair_out<FLAGS>(rp, y, gi, rows, inv, a0, a1);
        if (next >= pairs)
            return;
        gi = next;
    }
}

template <int FLAGS>
static cudaError_t launch_kq6g(const llm_cuda *c, const llm_cuda_weight *w, const float *x,
                               const llm_cuda_mv_fuse *f, float *y)
{
    int64_t pairs = (w->rows + 1) / 2;
    int ks = mv_split_log2(c, pairs, w->cols / LLM_QK_K * 4, 32,
                           (int64_t)c->sm_count * 2 * Q8I_WARPS);
    size_t smem = (size_t)w->cols + (size_t)(w->cols / 32) * sizeof(float) +
                  (size_t)(w->cols / 16) * sizeof(int);
    llm_cuda_rope_store rp;
    memset(&rp, 0, sizeof rp);
    if (FLAGS & MV_ROPE)
        rp = *f->rope;
    return llm__launch(c, matvec_kq6g_kernel<FLAGS>, dim3(mv_pair_blocks(c, pairs, ks, 2)),
                       dim3(Q8I_WARPS * 32), smem, (const uint4 *)w->data,
                       (const uint16_t *)w->scales, x,
                       (FLAGS & MV_NORM) ? f->norm : (const float *)nullptr,
                       (FLAGS & MV_NORM) ? f->eps : 0.0f, y, w->rows, w->cols, ks,
                       c->tune.mv_l2, rp);
}

static cudaError_t launch_kq6g_flags(const llm_cuda *c, const llm_cuda_weight *w,
                                     const float *x, const llm_cuda_mv_fuse *f, float *y)
{
    return mv_flags_dispatch(f->flags, [&](auto fl) {
        return launch_kq6g<decltype(fl)::value>(c, w, x, f, y);
    });
}

/* Whether the native k-quant kernel takes a one-row product over w with
 * activation x (16-byte aligned, a row that fits its shared memory). */
static int kq_takes(const llm_cuda_weight *w, const float *x)
{
    const layout_info *l = find_layout(w->type);
    return l && l->kq != KQ_NONE && w->cols <= LLM_CUDA_KQ_MAX_COLS &&
           ((uintptr_t)x & 15) == 0 && ((uintptr_t)w->data & 15) == 0;
}

static cudaError_t launch_kq_flags(const llm_cuda *c, const llm_cuda_weight *w, const float *x,
                                   const llm_cuda_mv_fuse *f, float *y)
{
    if (w->layout == LLM_CUDA_LAYOUT_GROUPED) { /* the layout it was uploaded with */
        if (w->type == LLM_TYPE_Q6_K)
            return launch_kq6g_flags(c, w, x, f, y);
        if (w->type == LLM_TYPE_Q5_K)
            return launch_kq5g_flags(c, w, x, f, y);
        return c->tune.kq_grouped == 2 ? launch_kq4g_u<2>(c, w, x, f, y)
                                       : launch_kq4g_u<1>(c, w, x, f, y);
    }
    switch (find_layout(w->type)->kq) {
    case KQ_Q4K: return launch_kq_type<KQ_Q4K>(c, w, x, f, y);
    case KQ_Q6K: return launch_kq_type<KQ_Q6K>(c, w, x, f, y);
    default: return cudaErrorInvalidValue; /* Q5_K is always grouped */
    }
}

/* The rope-store arguments: a whole stacked q/k/v matrix of even heads. */
static int rope_store_ok(const llm_cuda_weight *w, const llm_cuda_mv_fuse *f)
{
    const llm_cuda_rope_store *r = f->rope;
    if (!(f->flags & MV_ROPE))
        return 1;
    if (!r || (f->flags & (MV_ACC | MV_PAIRS)) || !r->inv_freq || !r->k_cache || !r->v_cache)
        return 0;
    if (r->n_heads <= 0 || r->n_kv_heads <= 0 || r->head_dim <= 0 || r->head_dim % 2)
        return 0;
    return w->rows == ((int64_t)r->n_heads + 2 * (int64_t)r->n_kv_heads) * r->head_dim;
}

const char *llm_cuda_matvec_kernel(const llm_cuda *c, const llm_cuda_weight *w)
{
    const layout_info *l = w ? find_layout(w->type) : NULL;
    if (!l)
        return "none";
    if (l->kq != KQ_NONE)
        return "matvec_kq_kernel";
    if (q8i_takes(c, w))
        return q8a_takes(c, w) ? "matvec_q8a_kernel" : "matvec_q8i_kernel";
    return "matvec_fused_kernel";
}

int llm_cuda_matvec_fused_rows(llm_cuda *c, const llm_cuda_weight *w, const float *x,
                               int32_t n, float *y, const llm_cuda_mv_fuse *f)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, n >= 1 && n <= LLM_CUDA_MV_ROWS_MAX && w);
    LLM_CU_ARG(c, n == 1 || (find_layout(w->type) && find_layout(w->type)->kq == KQ_NONE));
    c->mv_rows = n;
    int rc = llm_cuda_matvec_fused(c, w, x, y, f);
    c->mv_rows = 1;
    return rc;
}

int llm_cuda_matvec_fused(llm_cuda *c, const llm_cuda_weight *w, const float *x,
                          float *y, const llm_cuda_mv_fuse *f)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, w && w->data && x && y && f && (f->flags & ~15u) == 0);
    LLM_CU_ARG(c, weight_ok(w));
    LLM_CU_ARG(c, !(f->flags & MV_NORM) || (f->norm && ((uintptr_t)f->norm & 15) == 0));
    LLM_CU_ARG(c, !(f->flags & MV_PAIRS) || w->rows % 2 == 0);
    LLM_CU_ARG(c, rope_store_ok(w, f));
    const layout_info *l = find_layout(w->type);
    LLM_CU_ARG(c, w->cols % l->chunk == 0 && ((uintptr_t)x & 15) == 0 &&
                      ((uintptr_t)w->data & 15) == 0);
    if (l->kq != KQ_NONE) { /* no other kernel reads these layouts fused */
        LLM_CU_ARG(c, kq_takes(w, x));
        LLM_CU_TRY(c, launch_kq_flags(c, w, x, f, y));
        LLM_CU_LAUNCHED(c, "matvec_kq_kernel");
        return 0;
    }
    if (q8i_takes(c, w)) {
        LLM_CU_TRY(c, launch_q8i_flags(c, w, x, f, y));
        LLM_CU_LAUNCHED(c, llm_cuda_matvec_kernel(c, w));
        return 0;
    }
    LLM_CU_TRY(c, k_fused_launch[l->wt](c, w, x, f, y));
    LLM_CU_LAUNCHED(c, "matvec_fused_kernel");
    return 0;
}

int llm_cuda_matvec_chain(llm_cuda *c, const llm_cuda_chain_step *steps, int n)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, steps && n >= 1 && n <= LLM_CUDA_CHAIN_MAX);
    chain_dev d;
    memset(&d, 0, sizeof d);
    d.n = n;
    int64_t max_cols = 0, max_pairs = 0;
    for (int i = 0; i < n; i++) {
        const llm_cuda_chain_step *st = &steps[i];
        const llm_cuda_weight *w = st->w;
        LLM_CU_ARG(c, w && w->data && st->x && st->y && weight_ok(w));
        LLM_CU_ARG(c, w->type == LLM_TYPE_Q8_0 && w->scales &&
                          w->cols <= LLM_CUDA_Q8_INT8_MAX_COLS && w->cols % 32 == 0);
        unsigned fl = st->f.flags;
        LLM_CU_ARG(c, fl == 0 || fl == MV_NORM || fl == MV_ACC || fl == (MV_NORM | MV_PAIRS));
        LLM_CU_ARG(c, !(st->f.flags & MV_NORM) ||
                          (st->f.norm && ((uintptr_t)st->f.norm & 15) == 0));
        LLM_CU_ARG(c, !(st->f.flags & MV_PAIRS) || w->rows % 2 == 0);
        LLM_CU_ARG(c, ((uintptr_t)st->x & 15) == 0 && ((uintptr_t)w->data & 15) == 0);
        chain_dev_step *ds = &d.s[i];
        ds->w = (const int8_t *)w->data;
        ds->scales = w->scales;
        ds->x = st->x;
        ds->g = (st->f.flags & MV_NORM) ? st->f.norm : NULL;
        ds->y = st->y;
        ds->rows = w->rows;
        ds->cols = w->cols;
        ds->eps = (st->f.flags & MV_NORM) ? st->f.eps : 0.0f;
        ds->flags = (int)st->f.flags;
        if (w->cols > max_cols)
            max_cols = w->cols;
        if ((w->rows + 1) / 2 > max_pairs)
            max_pairs = (w->rows + 1) / 2;
    }
    size_t smem = (size_t)max_cols + (size_t)(max_cols / LLM_QK8_0) * sizeof(float);
    /* Every block must be resident at once for the barrier. */
    int per_sm = 0;
    LLM_CU_TRY(c, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, matvec_chain_kernel,
                                                                Q8I_WARPS * 32, smem));
    LLM_CU_ARG(c, per_sm >= 1);
    int64_t need = (max_pairs + Q8I_WARPS - 1) / Q8I_WARPS;
    int64_t cap = (int64_t)c->sm_count * (per_sm < 2 ? per_sm : 2);
    LLM_CU_TRY(c, llm__launch(c, matvec_chain_kernel, dim3((unsigned)(need < cap ? need : cap)),
                              dim3(Q8I_WARPS * 32), smem, d, c->chain_bar));
    LLM_CU_LAUNCHED(c, "matvec_chain_kernel");
    return 0;
}

/* ---- wide products through cuBLAS -------------------------------------- */

__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

int llm__cuda_to_bf16(llm_cuda *c, __nv_bfloat16 *dst, const float *src,
                      size_t count)
{
    unsigned blocks = llm__cuda_blocks(count, 256);
    unsigned cap = (unsigned)c->sm_count * 8u;
    to_bf16_kernel<<<blocks < cap ? blocks : cap, 256, 0, c->stream>>>(dst, src, count);
    LLM_CU_LAUNCHED(c, "to_bf16_kernel");
    return 0;
}

/* fp16 activations for a product over F16 weights; values past the fp16
 * range are clamped to +-65504 (the largest finite fp16) rather than
 * becoming infinities. */
__global__ void to_f16_kernel(__half *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(fminf(fmaxf(src[i], -65504.0f), 65504.0f));
}

static int to_f16(llm_cuda *c, __half *dst, const float *src, size_t count)
{
    unsigned blocks = llm__cuda_blocks(count, 256);
    unsigned cap = (unsigned)c->sm_count * 8u;
    to_f16_kernel<<<blocks < cap ? blocks : cap, 256, 0, c->stream>>>(dst, src, count);
    LLM_CU_LAUNCHED(c, "to_f16_kernel");
    return 0;
}

/* Rows [r0, r0+nr) of w as bf16 into dst [nr][cols]. */
__global__ void dequant_bf16_kernel(__nv_bfloat16 *dst, const void *w,
                                    const uint16_t *scales, int type, int64_t r0,
                                    int64_t nr, int64_t cols)
{
    size_t n = (size_t)nr * (size_t)cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int64_t r = (int64_t)(i / (size_t)cols), k = (int64_t)(i % (size_t)cols);
        dst[i] = __float2bfloat16_rn(weight_at(w, scales, type, r0 + r, cols, k));
    }
}

/* Rows [r0, r0+nr) of a Q8 layout weight as bf16 into dst [nr][cols]: a
 * thread per 16-byte vector of quants (half a block, one scale), 32 bytes
 * of bf16 out; the values of dequant_bf16_kernel, without its per-element
 * division and type switch. nvec = nr * vpr vectors, vpr = cols / 16. */
__global__ void dequant_q8_bf16_kernel(__nv_bfloat16 *dst, const int8_t *__restrict__ q,
                                       const uint16_t *__restrict__ scales, int64_t r0,
                                       uint32_t nvec, uint32_t vpr)
{
    for (uint32_t v = blockIdx.x * blockDim.x + threadIdx.x; v < nvec;
         v += gridDim.x * blockDim.x) {
        uint32_t r = v / vpr, j = v - r * vpr;
        int64_t row = r0 + (int64_t)r;
        uint4 w = ld_stream(reinterpret_cast<const uint4 *>(q + row * (int64_t)vpr * 16) + j);
        float d = __half2float(__ushort_as_half(__ldg(scales + row * (int64_t)(vpr / 2) + j / 2)));
        const uint32_t u[4] = {w.x, w.y, w.z, w.w};
        uint32_t o[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float a = (float)(int8_t)(u[i >> 1] >> (16 * (i & 1)));
            float b = (float)(int8_t)(u[i >> 1] >> (16 * (i & 1) + 8));
            __nv_bfloat162 h = __floats2bfloat162_rn(a * d, b * d);
            o[i] = *reinterpret_cast<uint32_t *>(&h);
        }
        uint4 *out = reinterpret_cast<uint4 *>(dst + (size_t)v * 16);
        out[0] = make_uint4(o[0], o[1], o[2], o[3]);
        out[1] = make_uint4(o[4], o[5], o[6], o[7]);
    }
}

/* ---- bf16 copies for wide products (tune.wide_cache) --------------------- */

/* The copy that holds w's rows: one made for w, or for a weight whose rows
 * w views (llm_cuda_weight_rows); NULL when none. */
static const __nv_bfloat16 *wide_find(const llm_cuda *c, const llm_cuda_weight *w)
{
    const layout_info *l = find_layout(w->type);
    size_t rb = layout_row_bytes(l, w->cols);
    for (int i = 0; i < c->n_wide; i++) {
        const llm_cuda_wide *e = &c->wide[i];
        const char *d0 = (const char *)e->data, *d = (const char *)w->data;
        if (e->type != w->type || e->cols != w->cols || d < d0 ||
            (size_t)(d - d0) % rb != 0)
            continue;
        int64_t r0 = (int64_t)((size_t)(d - d0) / rb);
        if (r0 + w->rows <= e->rows)
            return e->bf16 + (size_t)r0 * (size_t)w->cols;
    }
    return NULL;
}

/* Rows [0, rows) of w as bf16 into dst [rows][cols], a bounded chunk of
 * rows a launch (the Q8 kernel counts vectors in 32 bits). */
static int dequant_rows(llm_cuda *c, const llm_cuda_weight *w, __nv_bfloat16 *dst, int64_t r0,
                        int64_t rows)
{
    int64_t k = w->cols, chunk = (int64_t)(LLM_CUDA_DEQ_ELEMS / (size_t)k);
    LLM_CU_ARG(c, chunk > 0);
    unsigned cap = (unsigned)c->sm_count * 8u;
    for (int64_t a = r0; a < r0 + rows; a += chunk) {
        int64_t nr = r0 + rows - a < chunk ? r0 + rows - a : chunk;
        size_t cnt = (size_t)nr * (size_t)k;
        __nv_bfloat16 *out = dst + (size_t)(a - r0) * (size_t)k;
        if (w->type == LLM_TYPE_Q8_0) { /* cnt / 16 < 2^32: cnt <= LLM_CUDA_DEQ_ELEMS */
            unsigned blocks = llm__cuda_blocks(cnt / 16, 256);
            dequant_q8_bf16_kernel<<<blocks < cap ? blocks : cap, 256, 0, c->stream>>>(
                out, (const int8_t *)w->data, w->scales, a, (uint32_t)(cnt / 16),
                (uint32_t)(k / 16));
            LLM_CU_LAUNCHED(c, "dequant_q8_bf16_kernel");
        } else {
            unsigned blocks = llm__cuda_blocks(cnt, 256);
            dequant_bf16_kernel<<<blocks < cap ? blocks : cap, 256, 0, c->stream>>>(
                out, w->data, w->scales, llm__weight_code(w), a, nr, k);
            LLM_CU_LAUNCHED(c, "dequant_bf16_kernel");
        }
    }
    return 0;
}

/* The bf16 copy of a quantized weight for a wide product, made at its
 * first one when the tuning asks for it, no graph is being captured and
 * at least a quarter of the device's memory stays free after it; NULL
 * (the caller dequantizes per call) otherwise. A copy that cannot be made
 * is no failure: the memory checks and a refused allocation leave the
 * context's status as it was. */
static const __nv_bfloat16 *wide_copy(llm_cuda *c, const llm_cuda_weight *w)
{
    if (!c->tune.wide_cache || c->capturing)
        return NULL;
    const __nv_bfloat16 *have = wide_find(c, w);
    if (have)
        return have;
    size_t bytes = (size_t)w->rows * (size_t)w->cols * sizeof(__nv_bfloat16);
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess || free_b < bytes ||
        free_b - bytes < total_b / 4) {
        (void)cudaGetLastError();
        return NULL;
    }
    if (c->n_wide == c->cap_wide) {
        int cap = c->cap_wide ? 2 * c->cap_wide : 64;
        llm_cuda_wide *grown = (llm_cuda_wide *)realloc(c->wide, (size_t)cap * sizeof *grown);
        if (!grown)
            return NULL;
        c->wide = grown;
        c->cap_wide = cap;
    }
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    if (dequant_rows(c, w, (__nv_bfloat16 *)p, 0, w->rows) != 0) {
        cudaFree(p);
        return NULL; /* the launch failure is the context's status */
    }
    llm_cuda_wide *e = &c->wide[c->n_wide++];
    e->data = w->data;
    e->type = w->type;
    e->rows = w->rows;
    e->cols = w->cols;
    e->bf16 = (__nv_bfloat16 *)p;
    return e->bf16;
}

/* Frees the copies made for w or for views of its rows (at its release). */
static void wide_drop(llm_cuda *c, const llm_cuda_weight *w)
{
    const layout_info *l = find_layout(w->type);
    if (!c || !w->data || !l)
        return;
    const char *d0 = (const char *)w->data;
    const char *d1 = d0 + layout_row_bytes(l, w->cols) * (size_t)w->rows;
    int keep = 0;
    for (int i = 0; i < c->n_wide; i++) {
        const char *d = (const char *)c->wide[i].data;
        if (d >= d0 && d < d1)
            llm_cuda_mfree(c, c->wide[i].bf16);
        else
            c->wide[keep++] = c->wide[i];
    }
    c->n_wide = keep;
}

void llm__cuda_wide_free_all(llm_cuda *c)
{
    for (int i = 0; i < c->n_wide; i++)
        cudaFree(c->wide[i].bf16);
    free(c->wide);
    c->wide = NULL;
    c->n_wide = c->cap_wide = 0;
}

/* C (m x n, column-major, ldc) = op(A)^T B (+ C when acc) with A [k][m]
 * (lda = k) and B [k][n] (ldb = k) of `ab` type, fp32 accumulation and
 * output. */
static int gemm_tn(llm_cuda *c, int m, int n, int k, const void *a,
                   cudaDataType_t ab, const void *b, float *out, int ldc, int acc)
{
    const float one = 1.0f, zero = 0.0f;
    LLM_CU_BLAS(c, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one,
                                a, ab, k, b, ab, k, acc ? &one : &zero, out, CUDA_R_32F,
                                ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

static int gemm_slice(llm_cuda *c, const llm_cuda_weight *w, const float *x,
                      int32_t n, float *y, int acc)
{
    LLM_CU_ARG(c, w->rows <= 0x7fffffff && w->cols <= 0x7fffffff);
    int m = (int)w->rows, k = (int)w->cols;
    int how = find_layout(w->type)->gemm; /* matmul: weight_ok */
    if (how == GEMM_F32) /* exact fp32 path: no tensor-core rounding */
        return gemm_tn(c, m, n, k, w->data, CUDA_R_32F, x, y, m, acc);
    if (how == GEMM_F16 && c->tune.f16_direct) {
        /* The bf16 staging buffer holds the fp16 activations (same size). */
        __half *xh = reinterpret_cast<__half *>(c->x_bf16);
        int rc = to_f16(c, xh, x, (size_t)n * (size_t)k);
        return rc ? rc : gemm_tn(c, m, n, k, w->data, CUDA_R_16F, xh, y, m, acc);
    }
    if (how == GEMM_F16)
        how = GEMM_DEQUANT;
    int rc = llm__cuda_to_bf16(c, c->x_bf16, x, (size_t)n * (size_t)k);
    if (rc)
        return rc;
    if (how == GEMM_BF16)
        return gemm_tn(c, m, n, k, w->data, CUDA_R_16BF, c->x_bf16, y, m, acc);
    const __nv_bfloat16 *copy =
        find_layout(w->type)->gemm == GEMM_DEQUANT ? wide_copy(c, w) : NULL;
    if (copy)
        return gemm_tn(c, m, n, k, copy, CUDA_R_16BF, c->x_bf16, y, m, acc);
    if (c->status)
        return c->status; /* a failed copy's launch */
    int64_t chunk = (int64_t)(LLM_CUDA_DEQ_ELEMS / (size_t)k);
    LLM_CU_ARG(c, chunk > 0);
    for (int64_t r0 = 0; r0 < w->rows; r0 += chunk) {
        int64_t nr = w->rows - r0 < chunk ? w->rows - r0 : chunk;
        rc = dequant_rows(c, w, c->w_bf16, r0, nr);
        if (rc == 0)
            rc = gemm_tn(c, (int)nr, n, k, c->w_bf16, CUDA_R_16BF, c->x_bf16, y + r0, m, acc);
        if (rc)
            return rc;
    }
    return 0;
}

/* Batches wider than the staging buffer run in slices of max_n rows. */
static int gemm_wide(llm_cuda *c, const llm_cuda_weight *w, const float *x,
                     int32_t n, float *y, int acc)
{
    LLM_CU_ARG(c, w->cols <= c->max_width && c->x_bf16 && c->w_bf16);
    for (int32_t t0 = 0; t0 < n; t0 += c->max_n) {
        int32_t nt = n - t0 < c->max_n ? n - t0 : c->max_n;
        int rc = gemm_slice(c, w, x + (size_t)t0 * (size_t)w->cols, nt,
                            y + (size_t)t0 * (size_t)w->rows, acc);
        if (rc)
            return rc;
    }
    return 0;
}

static int matmul(llm_cuda *c, const llm_cuda_weight *w, const float *x, int32_t n,
                  float *y, int acc)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, w && w->data && x && y && n > 0);
    LLM_CU_ARG(c, weight_ok(w));
    if (n == 1 && q8i_takes(c, w) && ((uintptr_t)x & 15) == 0 &&
        ((uintptr_t)w->data & 15) == 0) {
        llm_cuda_mv_fuse f = {acc ? (unsigned)MV_ACC : 0u, NULL, 0.0f, NULL};
        LLM_CU_TRY(c, launch_q8i_flags(c, w, x, &f, y));
        LLM_CU_LAUNCHED(c, "matvec_q8i_kernel");
        return 0;
    }
    if (find_layout(w->type)->kq != KQ_NONE) {
        /* Up to LLM_CUDA_MATVEC_MAX rows, a read of the native weights per
         * row costs no more than dequantizing them to bf16 for cuBLAS, and
         * a verify row gets the same numbers as a decode step. */
        if (n > LLM_CUDA_MATVEC_MAX || !kq_takes(w, x))
            return gemm_wide(c, w, x, n, y, acc);
        llm_cuda_mv_fuse f = {acc ? (unsigned)MV_ACC : 0u, NULL, 0.0f, NULL};
        for (int32_t v = 0; v < n; v++) {
            LLM_CU_TRY(c, launch_kq_flags(c, w, x + (size_t)v * (size_t)w->cols, &f,
                                          y + (size_t)v * (size_t)w->rows));
            LLM_CU_LAUNCHED(c, "matvec_kq_kernel");
        }
        return 0;
    }
    if (n <= LLM_CUDA_MATVEC_MAX)
        return matvec(c, w, x, n, y, acc);
    return gemm_wide(c, w, x, n, y, acc);
}

int llm_cuda_matmul(llm_cuda *c, const llm_cuda_weight *w, const float *x,
                    int32_t n, float *y)
{
    return matmul(c, w, x, n, y, 0);
}

int llm_cuda_matmul_acc(llm_cuda *c, const llm_cuda_weight *w, const float *x,
                        int32_t n, float *y)
{
    return matmul(c, w, x, n, y, 1);
}

int llm_cuda_gemm_bf16(llm_cuda *c, int32_t m, int32_t n, int32_t k,
                       const void *a, const void *b, float *out)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, a && b && out && m > 0 && n > 0 && k > 0);
    return gemm_tn(c, m, n, k, a, CUDA_R_16BF, b, out, m, 0);
}
