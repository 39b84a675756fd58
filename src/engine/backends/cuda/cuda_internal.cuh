/* cuda_internal.cuh — what the CUDA backend's .cu files share: the context
 * layout, the error plumbing and small device helpers.
 *
 * Invariants. Every runtime call is checked through LLM_CU_TRY and every
 * launch through LLM_CU_LAUNCHED (cudaGetLastError right after it), so no
 * failure goes unseen. The first runtime failure is kept in the context
 * (sticky, see cuda_backend.h); out-of-memory from an allocation is not
 * sticky because the context stays usable after it. Scratch pointers are
 * sized by llm_cuda_reserve and never reallocated by an operation.
 */
#ifndef LLM_CUDA_INTERNAL_CUH
#define LLM_CUDA_INTERNAL_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>

#include <stddef.h>
#include <stdint.h>

#include "cuda_backend.h"
#include "phasemark/engine.h"

/* quant.h is C11; its _Static_assert is C++'s static_assert. Only its
 * inline parts and constants are used here (quant.c belongs to the engine
 * library, which links this one, not the other way round). */
#if defined(__cplusplus) && !defined(_Static_assert)
#define _Static_assert static_assert
#endif
#include "quant.h"

/* A bf16 copy of a quantized weight for wide products (cuda_matmul.cu):
 * the weight's data pointer and shape, and the copy [rows][cols]. */
typedef struct llm_cuda_wide {
    const void *data;
    uint32_t type;
    int64_t rows, cols;
    __nv_bfloat16 *bf16;
} llm_cuda_wide;

struct llm_cuda {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    int status;              /* sticky: 0 or the first failure's status */
    char msg[256];           /* the first failure's message */
    char name[256];          /* device name */
    int sm_count;
    uint64_t total_mem;
    int capturing;           /* 1 between graph_begin and graph_end */
    int pdl_ok;              /* the device can launch dependents early (cc >= 9.0) */
    llm_cuda_tuning tune;    /* see llm_cuda_set_tuning */
    uint32_t *d_pos;         /* the position register */
    cudaEvent_t ev[LLM_CUDA_EVENTS];

    /* Reserved limits and the scratch sized from them. */
    int32_t max_n;
    int64_t max_width;
    uint32_t max_ctx;
    int32_t max_heads;
    __nv_bfloat16 *x_bf16;   /* [max_n][max_width]: activations for cuBLAS */
    __nv_bfloat16 *w_bf16;   /* [LLM_CUDA_DEQ_ELEMS]: a dequantized weight chunk */
    float *attn_part;        /* split-K partials, see cuda_attention.cu */
    size_t attn_part_floats;
    unsigned *attn_count;    /* [LLM_CUDA_ATTN_ROWS_MAX][max_heads] pieces done,
                                zero between launches */
    int32_t attn_count_heads;
    float *attn_s;           /* prefill scores of one query chunk, all heads (optional) */
    size_t attn_s_floats;
    const void **attn_ptrs;  /* cuBLAS batch pointers: [LLM_CUDA_ATTN_MAX_CHUNKS][6][heads] */
    int32_t attn_ptr_heads;
    void *blas_ws;           /* cuBLAS workspace, fixed so graphs can hold it */
    llm_cuda_wide *wide;     /* [n_wide] bf16 copies (tune.wide_cache), owned here */
    int n_wide, cap_wide;
    unsigned *chain_bar;     /* [2] llm_cuda_matvec_chain's grid barrier: blocks
                                arrived (0 between barriers), generation */
    int32_t mv_rows;         /* activation rows of the fused product being
                                launched (llm_cuda_matvec_fused_rows); 0 or 1
                                between calls */
};

/* Frees every bf16 copy of the context's weights (llm_cuda_free). */
void llm__cuda_wide_free_all(llm_cuda *c);

/* The grid's y extent of a fused product: one block row per activation
 * row. */
static inline unsigned llm__mv_rows(const llm_cuda *c)
{
    return c->mv_rows > 1 ? (unsigned)c->mv_rows : 1u;
}

/* Whether a verify of n activation rows runs the weight-stationary
 * products and one attention launch (tune.rows_stationary): always (1),
 * never (0), or from LLM_CUDA_STATIONARY_ROWS rows up (2, the default).
 * Either way each row has the one-row launch's bits, so the choice only
 * moves time. With the Q8 products' fitted plans (tune.rows_plan 1) a
 * verify of any width pays on the H200 (KJV target: 155-187 us for 3 to
 * 9 rows, against 202-290 us with the per-row grid below 7 rows and the
 * fixed groups from 7, bench/results/cuda_rows.md). The fixed groups of up to 8 slots, which
 * the fp32/f16/bf16 products always take and Q8 under rows_plan 0, run
 * all 8 slots' work whatever the group's rows, so in auto they start at
 * LLM_CUDA_FIXED_GROUP_ROWS (where they tie the grid; 3 or 5 rows lose). */
#define LLM_CUDA_STATIONARY_ROWS 2
#define LLM_CUDA_FIXED_GROUP_ROWS 7
static inline int llm__rows_stationary(const llm_cuda *c, int32_t n)
{
    return c->tune.rows_stationary == 1 ||
           (c->tune.rows_stationary == 2 && n >= LLM_CUDA_STATIONARY_ROWS);
}

/* Elements of the dequantization chunk for wide products over non-bf16
 * weights: rows are converted this many at a time, so the chunk stays
 * bounded (32 MiB) whatever the matrix. */
#define LLM_CUDA_DEQ_ELEMS ((size_t)16 << 20)
#define LLM_CUDA_BLAS_WS_BYTES ((size_t)32 << 20)

/* Split-K attention: the shortest piece of context a block takes, the most
 * pieces a row is cut into (pieces grow past the minimum only for contexts
 * longer than their product), and the most query rows that take the
 * split-K path (longer batches take the tiled or tensor-core kernels). */
#define LLM_CUDA_ATTN_SPLIT_MIN 64
#define LLM_CUDA_ATTN_MAX_SPLITS 64
#define LLM_CUDA_ATTN_SPLITK_MAX_N 8
/* The most query rows one split-K launch of llm_cuda_attention_rows (a
 * verify) takes: the partials and the piece counters are sized for them. */
#define LLM_CUDA_ATTN_ROWS_MAX 32

/* Prefill attention on the tensor cores runs in query chunks, each against
 * the keys up to its last query only (causal block skipping); at most this
 * many chunks a call. */
#define LLM_CUDA_ATTN_MAX_CHUNKS 64

/* The piece length for a context of max_ctx positions: a function of the
 * reservation only, so a graph replay and a direct call cut the same way
 * and give bit-identical results. */
static inline uint32_t llm__attn_split_len(uint32_t max_ctx)
{
    uint32_t per = (max_ctx + LLM_CUDA_ATTN_MAX_SPLITS - 1) / LLM_CUDA_ATTN_MAX_SPLITS;
    per = (per + LLM_CUDA_ATTN_SPLIT_MIN - 1) / LLM_CUDA_ATTN_SPLIT_MIN * LLM_CUDA_ATTN_SPLIT_MIN;
    return per > LLM_CUDA_ATTN_SPLIT_MIN ? per : LLM_CUDA_ATTN_SPLIT_MIN;
}

/* The shortest piece of the cut that follows the context: a context up to
 * this long is one piece, which needs no merge. */
#define LLM_CUDA_ATTN_PIECE_MIN 128

/* The piece length of split-K decode attention for a row of len positions:
 * fixed_len when the cut follows the reservation; otherwise (pieces > 0,
 * tune.attn_pieces) the shortest multiple of LLM_CUDA_ATTN_PIECE_MIN that
 * cuts len into at most `pieces`. Both a graph replay and a direct call
 * derive it from the same numbers, so they cut alike. */
static inline __host__ __device__ uint32_t llm__attn_piece(uint32_t len, uint32_t fixed_len,
                                                           int32_t pieces)
{
    if (pieces <= 0)
        return fixed_len;
    uint32_t per = (len + (uint32_t)pieces - 1) / (uint32_t)pieces;
    per = (per + LLM_CUDA_ATTN_PIECE_MIN - 1) / LLM_CUDA_ATTN_PIECE_MIN * LLM_CUDA_ATTN_PIECE_MIN;
    return per > LLM_CUDA_ATTN_PIECE_MIN ? per : LLM_CUDA_ATTN_PIECE_MIN;
}

/* Records a failure: sets the sticky status when `sticky`, writes the
 * message, returns status. */
int llm__cuda_fail(llm_cuda *c, int status, int sticky, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Maps a runtime error to a status (memory: LLM_ENOMEM, else LLM_EBACKEND),
 * clears the runtime's last error and records it. */
int llm__cuda_rt_fail(llm_cuda *c, cudaError_t e, const char *what);
int llm__cuda_blas_fail(llm_cuda *c, cublasStatus_t s, const char *what);

/* Every operation starts here: NULL context is LLM_EINVAL, a sticky failure
 * is returned as is. */
#define LLM_CU_ENTER(c)                 \
    do {                                \
        if (!(c))                       \
            return LLM_EINVAL;          \
        if ((c)->status)                \
            return (c)->status;         \
    } while (0)

#define LLM_CU_TRY(c, call)                                  \
    do {                                                     \
        cudaError_t e_ = (call);                             \
        if (e_ != cudaSuccess)                               \
            return llm__cuda_rt_fail((c), e_, #call);        \
    } while (0)

#define LLM_CU_LAUNCHED(c, what)                             \
    do {                                                     \
        cudaError_t e_ = cudaGetLastError();                 \
        if (e_ != cudaSuccess)                               \
            return llm__cuda_rt_fail((c), e_, what);         \
    } while (0)

#define LLM_CU_BLAS(c, call)                                 \
    do {                                                     \
        cublasStatus_t s_ = (call);                          \
        if (s_ != CUBLAS_STATUS_SUCCESS)                     \
            return llm__cuda_blas_fail((c), s_, #call);      \
    } while (0)

#define LLM_CU_ARG(c, cond)                                               \
    do {                                                                  \
        if (!(cond))                                                      \
            return llm__cuda_fail((c), LLM_EINVAL, 0,                     \
                                  "invalid argument: %s", #cond);         \
    } while (0)

static inline unsigned llm__cuda_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 0x7fffffffu ? 0x7fffffffu : b);
}

#ifdef __CUDACC__
/* Launches kernel on the context's stream; with programmatic dependent
 * launch on (tune.pdl, Hopper and later) the kernel may start while its
 * predecessor in the stream is still running. Only kernels that call
 * llm__pdl_wait before touching anything an earlier kernel writes, and
 * before writing anything, may be launched this way; everything else uses
 * <<<>>> and keeps full stream order. The caller still checks the launch
 * with LLM_CU_LAUNCHED. */
template <typename... KArgs, typename... Args>
static inline cudaError_t llm__launch(const llm_cuda *c, void (*kernel)(KArgs...),
                                      dim3 grid, dim3 block, size_t smem, Args &&...args)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = c->pdl_ok && c->tune.pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<Args &&>(args)...);
}
#endif


/* Sizes attn_ptrs for the reserved heads once attention scores are
 * reserved (cuda_ctx.cu). */
int llm__cuda_grow_attn_ptrs(llm_cuda *c);

/* Converts f32 rows to bf16 (round to nearest even): dst [n][cols]. */
int llm__cuda_to_bf16(llm_cuda *c, __nv_bfloat16 *dst, const float *src,
                      size_t count);

#ifdef __CUDACC__
__device__ __forceinline__ float llm__warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float llm__warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over a block of blockDim.x threads (a multiple of 32, at most 1024);
 * every thread gets the result. `red` is __shared__ float[32]. */
__device__ __forceinline__ float llm__block_sum(float v, float *red)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = llm__warp_sum(v);
    __syncthreads(); /* red may still be read by a previous reduction */
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    int nw = blockDim.x >> 5;
    v = lane < nw ? red[lane] : 0.0f;
    return llm__warp_sum(v);
}

__device__ __forceinline__ float llm__block_max(float v, float *red)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = llm__warp_max(v);
    __syncthreads();
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    int nw = blockDim.x >> 5;
    v = lane < nw ? red[lane] : -INFINITY;
    return llm__warp_max(v);
}

__device__ __forceinline__ uint32_t llm__base_pos(llm_cuda_positions p)
{
    return p.pos0 + (p.dpos ? *p.dpos : 0u);
}

/* Programmatic dependent launch (see llm__launch). _wait blocks until every
 * kernel this one depends on has finished and its writes are visible (it
 * returns at once when the kernel was launched without the attribute);
 * _trigger lets the next kernel in the stream be scheduled once every block
 * of this one has triggered or exited. Neither gives memory ordering by
 * itself. Before sm_90 both are no-ops. */
__device__ __forceinline__ void llm__pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void llm__pdl_trigger(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Bytes of one super-block of the native k-quant layouts on the device
 * (cuda_matmul.cu): Q4_K's 144 as in the file; Q6_K's 210 less the fp16
 * d, which lives in the weight's scales array. */
#define LLM_CUDA_Q4K_BLOCK 144
#define LLM_CUDA_Q6K_BLOCK 208
#define LLM_CUDA_Q5K_BLOCK 176

/* The type code the per-element device readers take (llm__kq_at): the
 * weight's type, or LLM__Q4K_GROUPED / LLM__Q5K_GROUPED / LLM__Q6K_GROUPED
 * for a k-quant weight in the grouped layout (Q5_K has no other). */
#define LLM__Q4K_GROUPED ((int)LLM_TYPE_Q4_K | 0x100)
#define LLM__Q6K_GROUPED ((int)LLM_TYPE_Q6_K | 0x100)
#define LLM__Q5K_GROUPED ((int)LLM_TYPE_Q5_K | 0x100)

static inline int llm__weight_code(const llm_cuda_weight *w)
{
    return w->layout == LLM_CUDA_LAYOUT_GROUPED ? (int)w->type | 0x100 : (int)w->type;
}

/* Where nibble vector v (0..7: qs bytes 16v..16v+15 of the file's
 * super-block) of super-block sb (of nsb a row) lies in a row of the
 * grouped Q4_K layout, in 16-byte vectors from the row's start. Super-
 * blocks go in groups of G = 8 (fewer in a row's last group); in a group,
 * the vectors of half h (v & 1) of every sub-block pair p (v >> 1) come
 * as h * 4G + 4 * (sb % 8) + p, so that lane l of a warp reading vector
 * l, then vector 4G + l, holds both halves of pair l % 4 of super-block
 * l / 4. The 16-byte headers (d, dmin, scales) follow the row's 128 * nsb
 * bytes of nibbles, in super-block order. */
__host__ __device__ static inline int64_t llm__q4k_grouped_vec(int64_t nsb, int64_t sb, int v)
{
    int64_t g = sb / 8, G = nsb - 8 * g < 8 ? nsb - 8 * g : 8;
    return 64 * g + (v & 1) * 4 * G + 4 * (sb % 8) + (v >> 1);
}

/* The same for Q6_K: the 12 data vectors of a super-block, for unit u =
 * 2h + t (0..3: values 128h + 16t + 32i + 0..15 of the four quarters i),
 * are A = ql bytes 64h + 16t.. (quarters 0 and 2), B = ql 64h + 32 + 16t..
 * (1 and 3) and C = qh 32h + 16t.. (the two high bits of all four); kind
 * K (0, 1, 2 for A, B, C) of unit u of super-block sb lies at vector
 * 96g + K * 4G + 4 * (sb % 8) + u of its group. The 16 int8 scales of
 * each super-block follow the row's 192 * nsb bytes of data; d stays in
 * the weight's scales array. */
__host__ __device__ static inline int64_t llm__q6k_grouped_vec(int64_t nsb, int64_t sb, int kind,
                                                               int u)
{
    int64_t g = sb / 8, G = nsb - 8 * g < 8 ? nsb - 8 * g : 8;
    return 96 * g + kind * 4 * G + 4 * (sb % 8) + u;
}

/* The fifth bit of value l (0..31) of sub-block j (0..7) in the bits of a
 * grouped Q5_K super-block (8 bytes per sub-block pair j / 2: a word per
 * half l / 16, whose byte k holds in bit t the bit of value 4t + k of the
 * half for the even sub-block, in bit 4 + t for the odd one). */
__host__ __device__ static inline int llm__q5k_bit(const unsigned char *bits, int j, int l)
{
    int h = l / 16, t = (l % 16) / 4, k = l % 4;
    return (bits[8 * (j / 2) + 4 * h + k] >> (4 * (j & 1) + t)) & 1;
}

/* Element i of row `row` (cols wide) of a native k-quant weight, as the
 * CPU's dequantization computes it (quant_k.c): Q4_K d*sc*q - dmin*m, Q5_K
 * the same with q's fifth bit, Q6_K d*sc*(q-32). For the per-element paths
 * (embedding lookup, dequantization for cuBLAS). */
__device__ __forceinline__ float llm__kq_at(const void *w, const uint16_t *scales, int type,
                                            int64_t row, int64_t cols, int64_t i)
{
    int64_t nsb = cols / LLM_QK_K, sb = row * nsb + i / LLM_QK_K;
    int e = (int)(i % LLM_QK_K);
    if (type == (int)LLM_TYPE_Q4_K || type == LLM__Q4K_GROUPED || type == LLM__Q5K_GROUPED) {
        const unsigned char *b = (const unsigned char *)w + sb * LLM_CUDA_Q4K_BLOCK;
        int j = e / 32, l = e % 32, sc, m, q;
        if (type != (int)LLM_TYPE_Q4_K) {
            int64_t rb = type == LLM__Q5K_GROUPED ? LLM_CUDA_Q5K_BLOCK : LLM_CUDA_Q4K_BLOCK;
            const unsigned char *r = (const unsigned char *)w + row * nsb * rb;
            int64_t s = i / LLM_QK_K;
            q = r[16 * llm__q4k_grouped_vec(nsb, s, 2 * (j / 2) + l / 16) + l % 16];
            q = (j & 1) ? q >> 4 : q & 0x0f;
            if (type == LLM__Q5K_GROUPED)
                q |= llm__q5k_bit(r + 144 * nsb + 32 * s, j, l) << 4;
            b = r + 128 * nsb + 16 * s; /* the header */
        } else {
            q = b[16 + 32 * (j / 2) + l];
            q = (j & 1) ? q >> 4 : q & 0x0f;
        }
        const uint16_t *h = (const uint16_t *)b;
        const unsigned char *s = b + 4;
        if (j < 4) {
            sc = s[j] & 63;
            m = s[j + 4] & 63;
        } else {
            sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
            m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
        float d = __half2float(__ushort_as_half(h[0]));
        float dmin = __half2float(__ushort_as_half(h[1]));
        return d * (float)sc * (float)q - dmin * (float)m;
    }
    const unsigned char *b = (const unsigned char *)w + sb * LLM_CUDA_Q6K_BLOCK;
    int hh = e / 128, g = (e % 128) / 32, l = e % 32, lo, hi;
    signed char sc;
    if (type == LLM__Q6K_GROUPED) {
        const unsigned char *r = (const unsigned char *)w + row * nsb * LLM_CUDA_Q6K_BLOCK;
        int64_t s = i / LLM_QK_K;
        int u = 2 * hh + l / 16;
        lo = (r[16 * llm__q6k_grouped_vec(nsb, s, g & 1, u) + l % 16] >> (4 * (g >> 1))) & 0x0f;
        hi = (r[16 * llm__q6k_grouped_vec(nsb, s, 2, u) + l % 16] >> (2 * g)) & 3;
        sc = (signed char)r[192 * nsb + 16 * s + e / 16];
    } else {
        lo = (b[64 * hh + l + 32 * (g & 1)] >> (4 * (g >> 1))) & 0x0f;
        hi = (b[128 + 32 * hh + l] >> (2 * g)) & 3;
        sc = (signed char)b[192 + e / 16];
    }
    float d = __half2float(__ushort_as_half(scales[sb]));
    return d * (float)sc * (float)((lo | hi << 4) - 32);
}

/* Asks L2 for the line holding p. A hint only: it returns no data and L2
 * is the point of coherence, so it is safe on memory another kernel is
 * still writing (which is why the pre-wait phase of a dependent launch may
 * use it on anything). */
__device__ __forceinline__ void llm__prefetch_l2(const void *p)
{
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
#endif

#endif
