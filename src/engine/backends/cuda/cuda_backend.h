/* cuda_backend.h — the CUDA backend's C-callable API (prefix llm_cuda_).
 *
 * The engine's C code never includes a CUDA header: everything it needs from
 * the GPU goes through this file, and the .cu files behind it are the only
 * CUDA-language sources. One llm_cuda context is one device, one stream, one
 * cuBLAS handle and the scratch every operation needs, reserved up front by
 * llm_cuda_reserve; operations then allocate nothing, so a decode step can
 * be captured into a CUDA graph and replayed.
 *
 * Ownership. The caller owns the context and every device buffer it gets
 * from llm_cuda_malloc (release with llm_cuda_mfree) and every uploaded
 * weight (llm_cuda_weight_release). Pointers passed to operations are device
 * pointers unless a parameter says "host".
 *
 * Threading. A context must be used by one thread at a time. Different
 * contexts (even on the same device) are independent.
 *
 * Errors. Every function returns 0 or a negative LLM_E* status
 * (phasemark/engine.h): LLM_EINVAL for a bad argument (nothing is launched),
 * LLM_ENOMEM when device memory runs out, LLM_EBACKEND when the CUDA runtime
 * or cuBLAS reports a failure. A runtime failure is sticky: the context
 * keeps the first error's status and message (llm_cuda_error), and every
 * later call fails fast with it, because after an asynchronous fault the
 * stream's results can no longer be trusted. Operations are asynchronous on
 * the context's stream; a fault inside a kernel surfaces at the next
 * synchronizing call (llm_cuda_sync, llm_cuda_download).
 *
 * Numerics. Every reduction accumulates in fp32. Weights are kept on the
 * device in their file type (F32, F16, BF16, Q8_0; Q4_0 is widened exactly
 * into the Q8_0 layout). Matrix–vector products (up to LLM_CUDA_MATVEC_MAX
 * rows of activations) read activations in fp32; wider products go through
 * cuBLAS with bf16 operands (fp32 weights: fp32 SGEMM) and fp32
 * accumulation. docs/cuda.md states the resulting tolerances.
 */
#ifndef LLM_CUDA_BACKEND_H
#define LLM_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Activation rows up to which matmul uses the bandwidth-bound matrix-vector
 * kernels (each weight read once for all rows); wider calls use cuBLAS. */
#define LLM_CUDA_MATVEC_MAX 8

/* Longest head the attention kernels take (any width up to this). */
#define LLM_CUDA_MAX_HEAD_DIM 256

typedef struct llm_cuda llm_cuda;

/* The number of visible CUDA devices in *count (0 when the driver or the
 * runtime is missing, which is not an error: the function returns 0 then
 * too, with err naming why). Thread-safe. */
int llm_cuda_device_count(int *count, char *err, size_t errlen);

/* Creates a context on device `device`: selects it, creates a non-blocking
 * stream, a cuBLAS handle bound to it and a device position register. On
 * failure *out is NULL and err holds one line. The caller owns *out. */
int llm_cuda_create(int device, llm_cuda **out, char *err, size_t errlen);

/* Destroys the context and its scratch (not the caller's buffers, which
 * must be released first). NULL is harmless. */
void llm_cuda_free(llm_cuda *c);

/* The sticky status (0 while healthy) and the first error's message ("" when
 * none). The string belongs to the context. */
int llm_cuda_status(const llm_cuda *c);
const char *llm_cuda_error(const llm_cuda *c);

/* The device's name (static for the context's life), multiprocessor count
 * and total memory in bytes. */
const char *llm_cuda_device_name(const llm_cuda *c);
int llm_cuda_sm_count(const llm_cuda *c);
uint64_t llm_cuda_total_mem(const llm_cuda *c);

/* Sizes the scratch: cuBLAS products stage max_n activation rows of at most
 * max_width columns at a time (wider batches run in slices of max_n rows),
 * and attention runs over up to max_ctx positions with up to max_heads query
 * heads. Grows, never shrinks; call at setup (it may allocate and
 * synchronize). A graph captured before a reservation that grew must be
 * captured again: it refers to the scratch that was replaced. */
int llm_cuda_reserve(llm_cuda *c, int32_t max_n, int64_t max_width,
                     uint32_t max_ctx, int32_t max_heads);

/* Makes the context's device current for the calling thread (the runtime's
 * current device is per thread; operations launch on it). */
int llm_cuda_bind(llm_cuda *c);

/* Launch choices, for benchmarks and comparisons (the defaults are what
 * the backend is measured with). pdl and mv_prefetch never change results;
 * attn_chunk and attn_pieces change the summation order only:
 *   pdl: 1 launches the decode-path kernels with programmatic dependent
 *     launch where the device has it (compute capability >= 9.0): a kernel
 *     starts while its predecessor finishes, streams the first of its
 *     weights and only then waits for its inputs. 0: plain stream order.
 *     Default 1.
 *   mv_prefetch: batches of weight rows (each 32 lanes x 16 bytes per
 *     unrolled load) a matrix-vector warp asks L2 for before it waits,
 *     beyond the batch it loads into registers; the int8 Q8 kernel also
 *     keeps asking that many batches ahead of the one it loads as it
 *     goes. 0..8, default 0; PHASEMARK_CUDA_MV_PREFETCH=0..8 at creation
 *     sets it.
 *   attn_chunk: query rows per chunk of the tensor-core prefill attention
 *     (0: automatic, at most 4 chunks of at least 512 rows; chunks never
 *     exceed what llm_cuda_reserve_attention_gemm reserved).
 *   attn_pieces: 0 cuts the context of split-K decode attention by the
 *     reservation (pieces of llm_cuda_reserve's max_ctx / 64, at least 64
 *     positions: a graph covers every piece of the reserved context);
 *     1..32 cuts each row's actual context into at most this many pieces
 *     of at least 128 positions, so a graph launches that many blocks a
 *     head whatever the reservation, and a context of up to 128 positions
 *     is one piece. Default 16.
 *   attn_decode: the split-K kernel: 1 (default) a warp takes 8 keys at a
 *     time with all their loads in flight, and a one-piece row needs no
 *     merge; 0 the block kernel (two threads a key, block-wide softmax).
 *     Heads that are not a multiple of 4 wide, or unaligned rows, always
 *     take the block kernel.
 *   attn_gemm_min: query rows from which a call of more than 8 rows runs
 *     on the tensor cores when llm_cuda_reserve_attention_gemm reserved
 *     room (fewer rows keep the exact-fp32 tiled kernel); 0 (default):
 *     every such call. Changes the arithmetic (TF32 vs fp32), so the
 *     engine's seam raises it to keep short prompts exact.
 *   q8_int8: 1 (default) a one-row product over Q8 layout weights (Q8_0,
 *     Q4_0 and the k-quants as uploaded) quantizes its activations to int8
 *     per 32 values with an fp32 scale, as the CPU backend does (the rule
 *     of its quantize_row: d = amax / 127, q = nearest-even of x / d), and
 *     multiplies with dp4a, 4 KB of weights a warp in flight; 3 the same
 *     kernel with 2 KB a warp and more warps, 2 with 1 KB (both for
 *     measurement); 4 per product, 2 KB where that puts every row pair of
 *     a one-row product in one round of the grid and 4 KB otherwise (for
 *     measurement: not yet timed); 0 the fp32-activation kernel. The same
 *     bits for 1..4 with mv_split off. Rows wider than
 *     LLM_CUDA_Q8_INT8_MAX_COLS and products of 2..8 activation rows keep
 *     the fp32 kernel. PHASEMARK_CUDA_Q8=f32 at creation sets 0, =int8u1
 *     sets 2, =int8u2 sets 3, =int8auto sets 4.
 *   mv_split: 1 the int8 and native k-quant one-row kernels split a row
 *     pair's columns over 1, 2, 4 or 8 warps of a block, chosen per launch
 *     from the pairs, the row width and the grid, so that the pairs spread
 *     evenly over the grid's warps; the warps' partial sums add in a fixed
 *     order. 0 (default: measured 2% faster on an 8B decode, see
 *     bench/results/cuda_q8.md) one warp a pair. PHASEMARK_CUDA_MV_SPLIT=1
 *     at creation sets 1.
 *   wide_cache: 1 (default) the first wide product (more than
 *     LLM_CUDA_MATVEC_MAX rows) over a Q8 layout or native k-quant weight
 *     converts the whole matrix to bf16 once, into a copy the context
 *     keeps until the weight is released, and every later wide product
 *     over it multiplies that copy (the same values the per-call
 *     dequantization gives); 2 bytes a weight of device memory (14 GB
 *     for an 8B model's layers, on top of its quantized weights; the head
 *     only when a wide product over it runs), taken only
 *     while at least a quarter of the device's memory stays free after it
 *     and never during a graph capture (else the product dequantizes a
 *     chunk of rows at a time, as with 0). One-row products keep reading
 *     the quantized weights. PHASEMARK_CUDA_WIDE=dequant at creation
 *     sets 0.
 *   f16_direct: 1 (default) a wide product over F16 weights runs on them
 *     as they are, with fp16 activations (clamped to +-65504) and fp32
 *     accumulation; 0 dequantizes the weights to bf16 per call and
 *     multiplies bf16 activations, as before. PHASEMARK_CUDA_F16_GEMM=bf16
 *     at creation sets 0.
 *   kq_native: 1 (default) the k-quants Q4_K, Q5_K and Q6_K upload into
 *     layouts of their own, the file's bytes (Q4_K: the super-blocks as
 *     they are; Q6_K: quants and scales as they are, the fp16 d in a
 *     separate array so that rows stay 16-byte aligned; Q5_K: grouped
 *     only, see kq_grouped), and one-row products over them
 *     run on int8 activations quantized as q8_int8 = 1 does, with dp4a on
 *     the nibbles; products of 2..8 rows run the one-row kernel per row,
 *     wider ones dequantize to bf16. 0 re-quantizes them to the Q8 layout
 *     at upload, as before. Read at upload: a weight
 *     keeps the layout it was uploaded with. PHASEMARK_CUDA_KQ=requant at
 *     creation sets 0.
 *   kq_grouped: how native Q4_K and Q6_K upload and decode. 1 (default):
 *     rows in the grouped layout (LLM_CUDA_LAYOUT_GROUPED: the same
 *     bytes, moved so that every 16-byte load of a warp is part of 512
 *     contiguous bytes) and their kernels for it; 2: the same, Q4_K
 *     loading two batches a lane at once; 0: the file's super-blocks as
 *     they are and the kernels before (Q5_K stays grouped: it has no
 *     other layout). Read at upload, as kq_native.
 *     PHASEMARK_CUDA_KQ_LAYOUT=blocks / grouped2 at creation set 0 / 2.
 *   mv_l2: how far ahead the int8 and grouped k-quant one-row kernels ask
 *     L2 for their weights. 0 (default): only a warp's first batch is
 *     loaded before the dependency wait, the next batch while the current
 *     one is used. 1: before the wait, a warp also asks L2 for the whole
 *     first row pair it takes (its part of the pair under split-K), so
 *     that the matrix streams while the earlier kernel finishes and this
 *     one quantizes its activation; 2: the same, and at the start of
 *     every pair the warp asks for its next pair; 3: its first two pairs
 *     before the wait, and at every pair's start the one two ahead.
 *     Prefetches only: the results are the same bits.
 *     PHASEMARK_CUDA_MV_L2=1..3 at creation.
 *   mv_blocks: 0 (default) the grid of those kernels has as many blocks a
 *     multiprocessor as their registers let run at once (2; the Q8
 *     kernel's 2, 3 or 4 by q8_int8); 1..4 at most that many, so that
 *     blocks of the next kernel find room to start (and load and prefetch
 *     their weights) while this one finishes. With mv_split off a row
 *     pair's sum does not depend on the grid: the same bits.
 *     PHASEMARK_CUDA_MV_BLOCKS=1..4 at creation.
 *   rows_stationary: 1 a fused product over 2..32 activation
 *     rows (llm_cuda_matvec_fused_rows, the speculative verify) over
 *     vector-layout weights runs weight-stationary kernels: a warp loads
 *     each weight vector once and applies it to a group of up to 8 rows
 *     (the int8 kernel quantizes each row of the group once per block),
 *     every row with the one-row kernel's arithmetic in the one-row
 *     kernel's order, so the rows keep their bits, and
 *     llm_cuda_attention_rows takes all rows in one launch; 0 every row
 *     re-runs the one-row grid (a grid row per activation row) and the
 *     attention runs 8 rows a call (the same bits); 2 (default)
 *     stationary from LLM_CUDA_STATIONARY_ROWS (2) rows up, except that
 *     products in fixed groups of 8 slots (fp32/f16/bf16 weights, Q8
 *     under rows_plan 0) start at LLM_CUDA_FIXED_GROUP_ROWS (7), below
 *     which a group's 8 slots of work cost more than the rows' grids
 *     (bench/results/cuda_verify.md, cuda_rows.md). PHASEMARK_CUDA_VERIFY=
 *     stationary at creation sets 1, =rows 0, anything else 2.
 *   rows_plan: how the weight-stationary Q8 products spread a verify's
 *     rows over the grid. 1 (default) fitted: per product, the fewest
 *     rows a warp (2 at least) whose groups of rows all fit the grid's
 *     one wave, with a lane batch of one vector for rows of up to 512
 *     columns (a warp's slots of work, one per row of its group, are
 *     what a verify of a small model waits on); short rows that fit no
 *     wave (an output head) take the least rounds x (slots + 2), wider
 *     ones the fixed plan. 0 fixed: groups of up to 8 rows, as even as
 *     they can be, every product alike. 2..8: exactly that many rows a
 *     group (tests and measurements). The same bits every way.
 *     PHASEMARK_CUDA_ROWS_PLAN=fixed at creation sets 0, =2..8 that size.
 *   mv_async: 0 (default) one-row products over Q8 layout weights run
 *     matvec_q8i_kernel (registers hold the bytes in flight); 2, 3, 4, 6
 *     or 8 a kernel that streams the weights into shared memory by async
 *     copies instead, that many stages of 4.25 KB a warp, 4 warps a block
 *     and two blocks a multiprocessor (or mv_blocks), with few registers,
 *     so that the next product's blocks can start and load while this one
 *     finishes (Hopper and later; with mv_split on, several activation
 *     rows, or rows whose width is not a multiple of 256, the register
 *     kernel runs). The same bits as q8_int8 = 1 with mv_split off.
 *     PHASEMARK_CUDA_MV_ASYNC=2..8 at creation (5 and 7 take 6 and 8).
 * A graph captured before a change keeps the choices it was captured
 * with. _get fills *t; _set returns LLM_EINVAL for values out of range. */
typedef struct llm_cuda_tuning {
    int pdl;
    int mv_prefetch;
    int32_t attn_chunk;
    int32_t attn_pieces;
    int attn_decode;
    int32_t attn_gemm_min;
    int q8_int8;
    int f16_direct;
    int kq_native;
    int mv_split;
    int wide_cache;
    int kq_grouped;
    int mv_l2;
    int mv_blocks;
    int rows_stationary;
    int mv_async;
    int rows_plan;
} llm_cuda_tuning;

/* The widest k-quant row the native one-row kernel takes (its quantized
 * activation, cols bytes, cols / 32 fp32 scales and cols / 16 int32 sums,
 * lives in 48 KB of shared memory; a multiple of 256). Wider one-row
 * products dequantize to bf16 through cuBLAS, and the fused products
 * refuse them. */
#define LLM_CUDA_KQ_MAX_COLS 35584

/* The widest Q8 row the int8-activation kernel takes (its quantized
 * activation, cols bytes and cols / 32 scales, lives in 48 KB of shared
 * memory). */
#define LLM_CUDA_Q8_INT8_MAX_COLS 43008

/* The most activation rows a warp of a weight-stationary product takes
 * (tuning rows_plan's largest forced group). */
#define LLM_CUDA_ROWS_GROUP_MAX 8

/* The most stages tuning mv_async takes. */
#define LLM_CUDA_MV_ASYNC_MAX 8

int llm_cuda_get_tuning(const llm_cuda *c, llm_cuda_tuning *t);
int llm_cuda_set_tuning(llm_cuda *c, const llm_cuda_tuning *t);
/* 1 when a verify of n rows runs the weight-stationary products under
 * c's tuning (rows_stationary, above), 0 when each row re-runs the grid. */
int llm_cuda_verify_stationary(const llm_cuda *c, int32_t n);

/* ---- memory ------------------------------------------------------------ */

/* Device allocation of `bytes` (> 0), 256-byte aligned; *out NULL on
 * failure. Synchronous; for setup only. */
int llm_cuda_malloc(llm_cuda *c, size_t bytes, void **out);
void llm_cuda_mfree(llm_cuda *c, void *p);

/* Page-locked host memory of `bytes` (> 0): copies between it and the
 * device run at bus speed, without the runtime staging them through its
 * own buffer. *out NULL on failure (out of memory is not sticky). Setup
 * only. Release with llm_cuda_host_free (NULL is harmless). */
int llm_cuda_host_alloc(llm_cuda *c, size_t bytes, void **out);
void llm_cuda_host_free(llm_cuda *c, void *p);

/* Host -> device copy, stream-ordered; the host buffer may be reused as soon
 * as the call returns. */
int llm_cuda_upload(llm_cuda *c, void *dst, const void *host_src,
                    size_t bytes);

/* Device -> host copy; waits for the stream, so every earlier operation has
 * finished (and any asynchronous fault is reported) when it returns. */
int llm_cuda_download(llm_cuda *c, void *host_dst, const void *src,
                      size_t bytes);

/* Device -> device copy, stream-ordered. */
int llm_cuda_copy(llm_cuda *c, void *dst, const void *src, size_t bytes);

/* Waits for every operation issued so far. */
int llm_cuda_sync(llm_cuda *c);

/* Fills n elements at dst with uniform values in [-scale, scale] from a
 * counter-based generator keyed by seed (the same seed gives the same
 * values). type is LLM_TYPE_F32, LLM_TYPE_F16 or LLM_TYPE_BF16. For
 * synthetic weights in tests and benchmarks. */
int llm_cuda_fill_uniform(llm_cuda *c, void *dst, uint32_t type, size_t n,
                          uint64_t seed, float scale);

/* ---- weights ----------------------------------------------------------- */

/* A weight matrix resident on the device: rows x cols (ggml ne1 x ne0). */
typedef struct llm_cuda_weight {
    uint32_t type;  /* device layout: LLM_TYPE_F32, F16, BF16, Q8_0, Q4_K, Q5_K
                       or Q6_K */
    int64_t rows;   /* output width */
    int64_t cols;   /* input width (row length) */
    void *data;     /* F32/F16/BF16: [rows][cols]; Q8_0: int8 [rows][cols];
                       Q4_K: [rows][cols/256] 144-byte super-blocks; Q6_K:
                       [rows][cols/256] 208 bytes (ql, qh, scales); Q5_K:
                       176 bytes a super-block, always grouped; the
                       k-quants' rows rearranged when `layout` says so */
    uint16_t *scales; /* Q8_0: fp16 [rows][cols/32]; Q6_K: fp16 d
                         [rows][cols/256]; else NULL */
    size_t bytes;   /* device bytes held */
    uint32_t layout; /* 0: the type's layout above; LLM_CUDA_LAYOUT_GROUPED:
                        Q4_K / Q6_K rows of the same bytes, the quants of
                        8 super-blocks regrouped for coalesced loads, then
                        every super-block's header (Q4_K, Q5_K: d, dmin and
                        scales; Q5_K then its fifth bits) or int8 scales
                        (Q6_K); docs/cuda.md,
                        "k-quant decode" */
} llm_cuda_weight;

/* llm_cuda_weight.layout of a Q4_K / Q6_K weight uploaded with tuning
 * kq_grouped >= 1, and of every Q5_K weight. */
#define LLM_CUDA_LAYOUT_GROUPED 1u

/* Uploads a host matrix stored as ggml rows (row_bytes apart) of `type`
 * (F32, F16, BF16, Q8_0, Q4_0). Q8_0 and Q4_0 are split into 16-byte
 * aligned quants and a scale array so the kernels read full vectors. The
 * host data is only read. On failure *w is zeroed. Setup only. */
int llm_cuda_weight_upload(llm_cuda *c, uint32_t type, const void *host,
                           int64_t cols, int64_t rows, size_t row_bytes,
                           llm_cuda_weight *w);

/* One host matrix of llm_cuda_weight_upload_parts: rows of row_bytes. */
typedef struct llm_cuda_weight_part {
    const void *host;
    int64_t rows;
    size_t row_bytes;
} llm_cuda_weight_part;

/* Uploads `count` (1..16) host matrices of one type and width into one
 * device weight, so that a single product reads them in one pass: stacked
 * (interleave 0: the parts' rows one after the other, as a layer's q, k and
 * v for LLM_CUDA_MV_ROPE_STORE) or interleaved (interleave 1, every part
 * with the same rows: row r of part i becomes row r * count + i, as gate
 * and up for LLM_CUDA_MV_SWIGLU_PAIRS). Types and failures as
 * llm_cuda_weight_upload; the caller owns *w. Setup only. */
int llm_cuda_weight_upload_parts(llm_cuda *c, uint32_t type, int64_t cols,
                                 const llm_cuda_weight_part *parts, int count,
                                 int interleave, llm_cuda_weight *w);

/* As llm_cuda_weight_upload_parts, part i of host type types[i]. Parts of
 * one type upload as that type does; parts of different types all go
 * into the Q8 layout, each re-quantized as its type's upload would
 * (LLM_EINVAL when a type has no such upload): the stacked q/k/v of a
 * Q4_K_M layer whose v is Q6_K, so that it still takes the fused decode
 * step, at Q8_0's bytes for those few rows. */
int llm_cuda_weight_upload_mixed(llm_cuda *c, const uint32_t *types, int64_t cols,
                                 const llm_cuda_weight_part *parts, int count,
                                 int interleave, llm_cuda_weight *w);

/* Whether llm_cuda_weight_upload_mixed stacks these types (count of them)
 * into one weight. */
int llm_cuda_weight_types_stack(const uint32_t *types, int count);

/* A view of rows row0..row0+rows-1 of w (no copy, nothing owned: it lives
 * as long as w and is never released). Pure host arithmetic. */
llm_cuda_weight llm_cuda_weight_rows(const llm_cuda_weight *w, int64_t row0, int64_t rows);

/* Allocates an uninitialized device weight of a device layout (for synthetic
 * models filled with llm_cuda_fill_uniform). */
int llm_cuda_weight_alloc(llm_cuda *c, uint32_t type, int64_t cols,
                          int64_t rows, llm_cuda_weight *w);

/* Frees a weight's device memory and zeroes *w. A zeroed weight is
 * harmless. */
void llm_cuda_weight_release(llm_cuda *c, llm_cuda_weight *w);

/* ---- operations (asynchronous on the context's stream) ----------------- */

/* Positions of a forward's rows: row i is at position base + i, where base
 * is pos0, plus *dpos when dpos is not NULL (a device register, so that a
 * captured graph replays at a new position; see llm_cuda_pos). */
typedef struct llm_cuda_positions {
    uint32_t pos0;
    const uint32_t *dpos;
} llm_cuda_positions;

/* y[i] = W x[i] for i < n: x [n][w->cols] f32, y [n][w->rows] f32; x and y
 * do not overlap. Batches wider than the reserved max_n run in slices. */
int llm_cuda_matmul(llm_cuda *c, const llm_cuda_weight *w, const float *x,
                    int32_t n, float *y);

/* y[i] += W x[i]: the same product added into y (the residual add folded
 * into the product: cuBLAS reads y in its epilogue instead of a separate
 * pass over both arrays). */
int llm_cuda_matmul_acc(llm_cuda *c, const llm_cuda_weight *w, const float *x,
                        int32_t n, float *y);

/* Decode-step fusions of one activation row (n = 1) into the matrix-vector
 * product, which save a kernel launch and a pass over memory each:
 *   LLM_CUDA_MV_NORM: the input is rmsnorm(x) * norm (eps), computed on the
 *     fly (as llm_cuda_rmsnorm would, up to summation order);
 *   LLM_CUDA_MV_ACCUMULATE: y += result (the residual add);
 *   LLM_CUDA_MV_SWIGLU_PAIRS: the weight's rows alternate gate and up
 *     (row 2i gate_i, row 2i+1 up_i) and y[i] = silu(gate_i . x) * (up_i . x),
 *     so y has rows/2 elements;
 *   LLM_CUDA_MV_ROPE_STORE: the weight is a layer's q, k and v matrices
 *     stacked (rows = (n_heads + 2 n_kv_heads) head_dim) and the result is
 *     what llm_cuda_rope_qkv_store makes of the plain product: q and k
 *     rotated in y, the rotated k and v also stored into the cache row of
 *     the position (f->rope). Not with ACCUMULATE or SWIGLU_PAIRS.
 * Requires the vector layout: cols a multiple of 8 (4 for F32), x and norm
 * 16-byte aligned; LLM_EINVAL otherwise. x and y do not overlap. */
enum {
    LLM_CUDA_MV_NORM = 1,
    LLM_CUDA_MV_ACCUMULATE = 2,
    LLM_CUDA_MV_SWIGLU_PAIRS = 4,
    LLM_CUDA_MV_ROPE_STORE = 8
};

/* The rotation and cache store of LLM_CUDA_MV_ROPE_STORE (one row, at
 * position base; see llm_cuda_rope_qkv_store). */
typedef struct llm_cuda_rope_store {
    llm_cuda_positions pos;
    const double *inv_freq; /* [head_dim/2] */
    float scale;
    int32_t n_heads, n_kv_heads, head_dim; /* head_dim even */
    float *k_cache, *v_cache;             /* [ctx][n_kv_heads*head_dim] */
} llm_cuda_rope_store;

typedef struct llm_cuda_mv_fuse {
    unsigned flags;
    const float *norm; /* [cols] RMSNorm weight (LLM_CUDA_MV_NORM) */
    float eps;
    const llm_cuda_rope_store *rope; /* LLM_CUDA_MV_ROPE_STORE; read at the call */
} llm_cuda_mv_fuse;

int llm_cuda_matvec_fused(llm_cuda *c, const llm_cuda_weight *w, const float *x,
                          float *y, const llm_cuda_mv_fuse *f);

/* The kernel a one-row fused product over w runs under the context's
 * tuning (llm_cuda_matvec_fused with one activation row): the name
 * LLM_CU_LAUNCHED reports, e.g. "matvec_q8a_kernel"; lets tests know which
 * path they compared. */
const char *llm_cuda_matvec_kernel(const llm_cuda *c, const llm_cuda_weight *w);

/* A chain of one-row fused products in one launch: steps[0..n-1] in
 * order, each step's x possibly an earlier step's y. Each step's y gets
 * the bits llm_cuda_matvec_fused gives it with the int8 kernel (tuning
 * q8_int8 = 1, split-K off), whatever the tuning. Between products the
 * launch's blocks meet at a grid-wide barrier instead of ending, so the
 * next product's weights are already on their way. Every weight Q8_0 on
 * the Q8 layout (at most LLM_CUDA_Q8_INT8_MAX_COLS wide), flags 0, NORM,
 * ACCUMULATE or NORM | SWIGLU_PAIRS (a layer's o, gate/up and down take
 * ACCUMULATE, NORM | SWIGLU_PAIRS, ACCUMULATE), x and the weight 16-byte
 * aligned, 1 <= n <= LLM_CUDA_CHAIN_MAX; LLM_EINVAL otherwise. A step's x
 * and y do not overlap; a later step may overwrite what an earlier one
 * read (the barrier orders them). */
#define LLM_CUDA_CHAIN_MAX 4
typedef struct llm_cuda_chain_step {
    const llm_cuda_weight *w;
    const float *x;
    float *y;
    llm_cuda_mv_fuse f;
} llm_cuda_chain_step;

int llm_cuda_matvec_chain(llm_cuda *c, const llm_cuda_chain_step *steps, int n);

/* llm_cuda_matvec_fused over n activation rows (1..LLM_CUDA_MV_ROWS_MAX):
 * x [n][w->cols], y [n][w->rows] (rows/2 with SWIGLU_PAIRS), row i at
 * position base + i for ROPE_STORE. Each row runs the one-row kernel's
 * very arithmetic (per lane the same chunks in the same order, the same
 * warp and split-K reductions, the same activation quantization), so row
 * i has the bits a one-row call on x[i] at that position gives: a verify
 * of n tokens then commits exactly what n decode steps would. With
 * tune.rows_stationary a warp applies each weight vector
 * it loads to a group of up to 8 rows, so the weights are read once per
 * group; else once per row, mostly from L2. Not for the native k-quant
 * layouts (LLM_EINVAL when n > 1). */
#define LLM_CUDA_MV_ROWS_MAX 32
int llm_cuda_matvec_fused_rows(llm_cuda *c, const llm_cuda_weight *w, const float *x,
                               int32_t n, float *y, const llm_cuda_mv_fuse *f);

/* out[i] = silu(gu[2i]) * gu[2i+1] for i < len: SwiGLU over interleaved
 * gate/up outputs (a product with a pair-interleaved weight, n rows). */
int llm_cuda_swiglu_pairs(llm_cuda *c, float *out, const float *gu, size_t len);

/* a[i] = ab[2i], b[i] = ab[2i+1] for i < len: splits the output of a
 * product with a pair-interleaved weight into its two halves (ab 8-byte
 * aligned; a, b do not overlap ab). */
int llm_cuda_unpair(llm_cuda *c, float *a, float *b, const float *ab, size_t len);

/* Decode-step RoPE and cache store in one kernel: rows [n][stride] hold q
 * (n_heads*head_dim), then k and v (n_kv_heads*head_dim each); q and k are
 * rotated in place and the rotated k and v stored into cache rows
 * base..base+n-1 ([ctx][n_kv_heads*head_dim]). */
int llm_cuda_rope_qkv_store(llm_cuda *c, float *qkv, int32_t n, int32_t stride,
                            int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                            llm_cuda_positions pos, const double *inv_freq,
                            float scale, float *k_cache, float *v_cache);

/* y[i] = x[i] / sqrt(mean(x[i]^2) + eps) * weight: [n][dim]; y may be x. */
int llm_cuda_rmsnorm(llm_cuda *c, float *y, const float *x,
                     const float *weight, int32_t n, int32_t dim, float eps);

/* Rotates n rows of `stride` floats, each holding n_heads heads of head_dim:
 * adjacent pairs (x[2i], x[2i+1]) by angle (pos * scale) * inv_freq[i],
 * computed in double (as the CPU reference does, so large positions keep
 * their angle exact); inv_freq is a device array [head_dim/2]. */
int llm_cuda_rope(llm_cuda *c, float *x, int32_t n, int32_t n_heads,
                  int32_t stride, llm_cuda_positions pos,
                  const double *inv_freq, float scale, int32_t head_dim);

/* llm_cuda_rope over half-split pairs (x[i], x[i + head_dim/2]) of each
 * head, the layout qwen2/qwen3 files keep (llm_hparams.rope_neox). */
int llm_cuda_rope_neox(llm_cuda *c, float *x, int32_t n, int32_t n_heads,
                       int32_t stride, llm_cuda_positions pos,
                       const double *inv_freq, float scale, int32_t head_dim);

/* y[r][i] += bias[i] for r < n, i < width: y [n][width] (q/k/v biases). */
int llm_cuda_add_bias(llm_cuda *c, float *y, const float *bias, int32_t n, int32_t width);

/* Stores n rows of keys and values (rows src_stride floats apart, kv_dim
 * used) into cache rows base..base+n-1 of k_cache and v_cache ([ctx][kv_dim]).
 * With positions from the register, a captured decode step writes each
 * replay's token where it belongs. */
int llm_cuda_kv_store(llm_cuda *c, float *k_cache, float *v_cache,
                      const float *k, const float *v, int32_t n, int32_t kv_dim,
                      int32_t src_stride, llm_cuda_positions pos);

/* gate[i] = silu(gate[i]) * up[i]; y[i] += x[i]. */
int llm_cuda_swiglu(llm_cuda *c, float *gate, const float *up, size_t len);
int llm_cuda_add(llm_cuda *c, float *y, const float *x, size_t len);

/* out[i] = row ids[i] of embd as f32 (ids: device int32 [n]). An id outside
 * the table gives a zero row (the engine validates ids first). */
int llm_cuda_embed(llm_cuda *c, const llm_cuda_weight *embd,
                   const int32_t *ids, int32_t n, float *out);

/* Causal grouped-query attention for n query rows at positions base..base+n-1
 * over a cache of [pos][n_kv_heads*head_dim] f32 keys and values filled up
 * to base+n-1; out may not alias q. Scores are dot(q, k) / sqrt(head_dim).
 * Short batches (n <= 8) split the context over blocks (split-K), the last
 * block of each head merging the pieces; longer ones run a tiled kernel
 * that reads each key tile once per 16 queries, or the tensor cores (see
 * llm_cuda_reserve_attention_gemm). head_dim is at most
 * LLM_CUDA_MAX_HEAD_DIM; base+n must not exceed the reserved max_ctx. */
typedef struct llm_cuda_attn {
    const float *q; /* [n][q_stride], the heads first in each row */
    const float *k; /* [ctx][n_kv_heads*head_dim] */
    const float *v; /* [ctx][n_kv_heads*head_dim] */
    float *out;     /* [n][n_heads*head_dim] */
    int32_t n;
    llm_cuda_positions pos;
    int32_t n_heads, n_kv_heads, head_dim;
    int32_t q_stride; /* floats between query rows; 0: n_heads*head_dim (so
                         q can be the front of fused q/k/v rows) */
} llm_cuda_attn;

int llm_cuda_attention(llm_cuda *c, const llm_cuda_attn *a);

/* llm_cuda_attention for the n (1..32) rows of a verify: every row on the
 * split-K path, so row i has the bits of a one-row call at base + i (a
 * row's pieces are cut by its own context, whatever the other rows).
 * With tune.rows_stationary one launch takes all n rows; else calls of
 * up to 8 rows each, as before (the same bits). LLM_EINVAL past 32 rows. */
int llm_cuda_attention_rows(llm_cuda *c, const llm_cuda_attn *a);

/* Reserves room for max_group * max_rows * max_ctx scores, which lets
 * attention of more than 8 rows run on the tensor cores through cuBLAS:
 * TF32 products (operands rounded to 10-bit mantissas, fp32 accumulation)
 * around a causal softmax, instead of the exact-fp32 tiled kernel. The
 * queries run in chunks of rows, all heads at once, each chunk against the
 * keys up to its last query only (with the default 4 chunks, 37% of the
 * square is skipped); a chunk's scores ([n_heads][rows][keys]) must fit the room, so the room a
 * group of max_rows queries needs over max_ctx keys lets n_heads/max_group
 * times fewer rows into a chunk. Calls that would need more than 64
 * chunks, take their base from the register, or have fewer rows than the
 * tuning's attn_gemm_min keep using the tiled kernel. Setup only (it may
 * allocate and synchronize). */
int llm_cuda_reserve_attention_gemm(llm_cuda *c, int32_t max_rows, uint32_t max_ctx,
                                    int32_t max_group);

/* out[r] = the index of the largest of logits[r][0..vocab) for r < n (the
 * lowest index on ties; NaN never wins). out: device int32 [n]. */
int llm_cuda_argmax(llm_cuda *c, const float *logits, int32_t n,
                    int32_t vocab, int32_t *out);

/* llm_cuda_argmax by the engine sampler's rule (sampler.c's host scan, which
 * keeps index 0 until a value compares strictly greater): the same answer,
 * except that a row whose logit 0 is NaN gives 0. The engine's greedy path
 * uses it, so a token taken on the device is the one the host would take
 * from the same logits. */
int llm_cuda_argmax_scan(llm_cuda *c, const float *logits, int32_t n,
                         int32_t vocab, int32_t *out);

/* Draws one token from softmax(logits / temperature) cut to the top_k most
 * likely (top_k <= 0: no cut) and then to the smallest set of most likely
 * tokens whose mass reaches top_p (top_p <= 0 or >= 1: no cut), using the
 * uniform number u in [0, 1) (a device float when u_dev is not NULL, else
 * the host value u). Tokens tied at a cut's boundary are all kept; the draw
 * walks the kept tokens in index order. temperature <= 0 is argmax. Writes
 * the token to out (device int32). */
typedef struct llm_cuda_sampling {
    float temperature;
    int32_t top_k;
    float top_p;
    float u;
    const float *u_dev;
} llm_cuda_sampling;

int llm_cuda_sample(llm_cuda *c, const float *logits, int32_t vocab,
                    const llm_cuda_sampling *s, int32_t *out);

/* ---- position register and graphs -------------------------------------- */

/* The context's device position register (a uint32 in device memory) for
 * llm_cuda_positions.dpos; _set writes it (stream-ordered), _advance adds
 * delta to it on the device (so a replayed graph can step itself). */
const uint32_t *llm_cuda_pos(const llm_cuda *c);
int llm_cuda_pos_set(llm_cuda *c, uint32_t pos);
int llm_cuda_pos_advance(llm_cuda *c, uint32_t delta);

typedef struct llm_cuda_graph llm_cuda_graph;

/* Begins capturing every operation issued on the context into a graph
 * instead of running it; _end stops, instantiates and returns it (the
 * caller owns *out). Operations captured must take their positions from the
 * register (dpos), and their sizes must stay fixed, since a replay repeats
 * the captured launches exactly. A failure during capture ends it. */
int llm_cuda_graph_begin(llm_cuda *c);
int llm_cuda_graph_end(llm_cuda *c, llm_cuda_graph **out);
int llm_cuda_graph_launch(llm_cuda *c, llm_cuda_graph *g);
void llm_cuda_graph_free(llm_cuda_graph *g);

/* ---- measurement (benchmarks) ------------------------------------------ */

/* Records event slot (0..LLM_CUDA_EVENTS-1) on the stream; _elapsed_ms waits
 * for slot b and gives the milliseconds between a and b. */
#define LLM_CUDA_EVENTS 8
int llm_cuda_event_record(llm_cuda *c, int slot);
int llm_cuda_elapsed_ms(llm_cuda *c, int a, int b, float *ms);

/* C = A^T B with bf16 operands, fp32 accumulation and fp32 output, all
 * column-major as cuBLAS sees them: A [k][m], B [k][n], C [m][n] (C[j][i] at
 * C + j*m + i). The plain cuBLAS product the prefill path is compared with. */
int llm_cuda_gemm_bf16(llm_cuda *c, int32_t m, int32_t n, int32_t k,
                       const void *a, const void *b, float *out);

/* ---- the engine's backend seam (src/engine/backend.h) ------------------- */

struct llm_backend;
struct llm_model;

/* Creates the CUDA implementation of the engine's backend seam on device
 * `device` (the registry, backend.c, parses "cuda" and "cuda:N").
 * Activations, the KV cache and weights live on that device; its prepare
 * uploads a model's weights once and records them in the model. The caller
 * owns *out (destroy through its ops). LLM_EBACKEND with a reason in err
 * when there is no such device, LLM_EINVAL for a negative one. */
int llm_cuda_backend_create(int device, struct llm_backend **out, char *err,
                            size_t errlen);

/* Layers below `layer` are prepared unfused (their q/k/v and gate/up as
 * separate matrices), so every forward of a span holding them runs op by
 * op: for tests of that path. Before prepare. LLM_EINVAL for a non-CUDA
 * backend or a negative layer. */
int llm_cuda_backend_set_fuse_from(struct llm_backend *be, int32_t layer);

/* Whether prepare runs the warm-up (1, the default; 0 skips it): after the
 * upload, a few quiet forwards of every path a request takes (prefills of
 * LLM_CUDA_PREFILL_TF32_MIN and 16 rows, a 4-row verify, two decode steps,
 * the argmax) on a small cache and workspace of its own, so that the
 * first request does not pay for loading kernels, cuBLAS's first kernel
 * choices and the first graph instantiation; on = 2 (the default) also
 * runs the first layer's wide products for every row count from 9 to 63,
 * so that a prompt of any such length finds cuBLAS's kernels loaded, 1
 * only the forwards. Nothing of it is kept (the counters stay as before
 * except warmups and warmup_us). The environment variable
 * PHASEMARK_CUDA_WARMUP=0 / 1 sets 0 / 1 at creation. Before prepare.
 * LLM_EINVAL for a non-CUDA backend or another value. */
int llm_cuda_backend_set_warmup(struct llm_backend *be, int on);

/* The seam's supports_type (backend.h): 1 when weights of ggml type `type`
 * upload to a device layout the kernels take (F32, F16, BF16, Q8_0, Q4_0;
 * the table in cuda_matmul.cu), else 0. Thread-safe. */
int llm_cuda_backend_supports_type(const struct llm_backend *be, uint32_t type);

/* How the seam runs a one-token forward (a decode step):
 *   LLM_CUDA_DECODE_OPS: op by op, as every other forward (the engine's
 *     generic path: RMSNorm, products, RoPE, attention, add, ...);
 *   LLM_CUDA_DECODE_FUSED: the span's fused kernels (five a layer: the
 *     q/k/v product with RMSNorm and RoPE + cache store, split-K attention,
 *     the output product adding into the residual, the gate/up product
 *     with RMSNorm and SwiGLU, the down product adding into the residual;
 *     the head as one product with the norm folded in), launched directly;
 *   LLM_CUDA_DECODE_GRAPH (the default): the same kernels captured once
 *     per (span, buffers) into a CUDA graph and replayed, the position in
 *     the context's register.
 * FUSED and GRAPH give identical bits; OPS differs by rounding (the norm
 * is applied as an epilogue scale). Layers whose weights the fused
 * kernels do not take (see docs/cuda.md) always run op by op. The
 * environment variable PHASEMARK_CUDA_DECODE=ops|fused|graph sets the
 * mode at creation. _set: LLM_EINVAL for a bad mode or a non-CUDA backend;
 * not thread-safe against a running forward (hold the model's lock). */
enum { LLM_CUDA_DECODE_OPS = 0, LLM_CUDA_DECODE_FUSED = 1, LLM_CUDA_DECODE_GRAPH = 2 };
int llm_cuda_backend_set_decode(struct llm_backend *be, int mode);

/* How the seam runs a forward of more rows than LLM_CUDA_MATVEC_MAX (a
 * prefill; shorter ones, verifies included, keep the paths above):
 *   LLM_CUDA_PREFILL_OPS: op by op, the engine's generic path, with every
 *     attention call on the exact-fp32 kernels (the seam's behaviour before
 *     the fused prefill, kept for comparison);
 *   LLM_CUDA_PREFILL_FUSED (the default): per layer RMSNorm, one product
 *     over the stacked q/k/v, RoPE + cache store, attention reading q from
 *     the q/k/v rows, the output product accumulated into the residual,
 *     RMSNorm, the gate/up pair product, SwiGLU over the pairs, the down
 *     product accumulated (the call sequence of bench_llama's prefill), on
 *     the fused weights prepare built; attention of at least
 *     LLM_CUDA_PREFILL_TF32_MIN rows runs on the tensor cores (TF32, see
 *     llm_cuda_reserve_attention_gemm) in this mode, on this path and on
 *     the op-by-op one alike.
 * A span with a layer prepare did not fuse runs op by op in either mode.
 * The environment variable PHASEMARK_CUDA_PREFILL=ops|fused sets the mode
 * at creation. _set: LLM_EINVAL for a bad mode or a non-CUDA backend;
 * not thread-safe against a running forward (hold the model's lock). */
enum { LLM_CUDA_PREFILL_OPS = 0, LLM_CUDA_PREFILL_FUSED = 1 };
int llm_cuda_backend_set_prefill(struct llm_backend *be, int mode);

/* Query rows from which the seam's attention runs on the tensor cores in
 * LLM_CUDA_PREFILL_FUSED mode. Below it the exact-fp32 tiled kernel keeps
 * short prompts (and the parity tests' prompts of up to 32 tokens) at the
 * fp32 tolerances; above it the TF32 products pay for their rounding
 * (10-bit mantissas) many times over in speed. */
#define LLM_CUDA_PREFILL_TF32_MIN 64

/* What the seam did with one-token forwards since creation. */
typedef struct llm_cuda_decode_stats {
    uint64_t captures; /* graphs captured (the first step of a span/buffers) */
    uint64_t replays;  /* steps run by launching a captured graph */
    uint64_t direct;   /* steps run as fused kernels launched directly */
    uint64_t declined; /* one-token forwards left to the op-by-op path
                          although the mode fuses (unfusable weights) */
    uint32_t fused_layers; /* layers whose fused weights prepare built */
    uint64_t argmaxes;     /* rows (tokens) the seam's argmax op took */
    uint64_t prefills;     /* multi-row forwards run on the fused prefill
                              path (LLM_CUDA_PREFILL_FUSED) */
    uint64_t warmups;      /* warm-ups run at prepare (none of their
                              forwards is counted above) */
    uint64_t warmup_us;    /* their wall time, microseconds */
} llm_cuda_decode_stats;
int llm_cuda_backend_decode_stats(struct llm_backend *be, llm_cuda_decode_stats *out);

/* The context behind a CUDA backend (for device-side sampling). */
llm_cuda *llm_cuda_backend_context(struct llm_backend *be);

/* Loop mode, for a device loop (cuda_loop.h) that captures forwards into
 * graphs of its own: while on, a forward of n rows runs the fused decode
 * step's kernels (n > 1: over n block rows, llm_cuda_matvec_fused_rows),
 * its positions from the context's register (row i at register + i) and
 * its token ids read from ids_dev (device int32 [n]) instead of uploaded;
 * nothing is looked up in or added to the seam's graph cache and the host
 * writes no position. A forward the fused step cannot take (see
 * _loop_takes) fails the backend (LLM_EUNSUP, sticky). Under the model's
 * lock; LLM_EINVAL for a non-CUDA backend or on not 0/1. */
struct llm_span;
int llm_cuda_backend_set_loop(struct llm_backend *be, int on, const int32_t *ids_dev);

/* 1 when a loop-mode forward of n rows over span (of model m) can run:
 * every layer fused in the vector layout, the head's matrix too, n at
 * most LLM_CUDA_MV_ROWS_MAX and (n > 1) no native k-quant layout. */
int llm_cuda_backend_loop_takes(struct llm_backend *be, const struct llm_model *m,
                                const struct llm_span *span, int32_t n);

/* The device copies of a model's token embedding and output matrix as
 * the seam prepared them (owned by the backend, valid while the model is
 * prepared on it), and whether the decode step's matrix-vector kernel
 * takes the output matrix (*output_mv): for the block drafter's head,
 * which shares both with its target. LLM_EINVAL for a non-CUDA backend or
 * an unprepared model, LLM_EUNSUP when the model's one span lacks either
 * end. */
int llm_cuda_backend_model_io(struct llm_backend *be, const struct llm_model *m,
                              const llm_cuda_weight **embd, const llm_cuda_weight **output,
                              int *output_mv);

/* A counter bumped whenever buffers a captured graph may refer to are
 * replaced (a reservation that grew): a graph captured at another value
 * must be captured again. */
unsigned llm_cuda_backend_generation(struct llm_backend *be);

#ifdef __cplusplus
}
#endif

#endif
