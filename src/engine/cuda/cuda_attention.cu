/* cuda_attention.cu — causal grouped-query attention over the device KV
 * cache, for decode (one or a few queries) and prefill/verify (many).
 *
 * Decode has one query per head, so parallelism must come from the context:
 * the positions are cut into up to LLM_CUDA_ATTN_MAX_SPLITS pieces of at
 * least LLM_CUDA_ATTN_SPLIT_MIN positions (the cut depends on the reserved
 * context only); each block
 * computes one (row, head, piece) partial softmax (max m, sum l, weighted
 * values acc), and a second kernel merges the pieces with the usual
 * rescaling (out = sum exp(m_s - M) acc_s / sum exp(m_s - M) l_s). When the
 * base position comes from the device register (graph replay) the grid
 * covers the whole reserved context and pieces past the end write an empty
 * partial (m = -inf, l = 0), which the merge ignores.
 *
 * Prefill runs a tiled kernel: a block holds 16 queries of one head and
 * walks the keys in tiles of 32 through shared memory with an online
 * softmax, so each key is read once per 16 queries instead of once per
 * query. Shared-memory rows are padded by one float so that the threads of
 * a warp, which read different rows at the same column, hit different
 * banks. Everything is fp32.
 *
 * When llm_cuda_reserve_attention_gemm has reserved room for the score
 * matrix, prefill instead runs on the tensor cores through cuBLAS (TF32
 * products around a causal softmax kernel), which is several times faster
 * for long prompts at a TF32 rounding of the operands.
 */
#include "cuda_internal.cuh"

#include <math.h>

#define SK_THREADS 128
#define SK_KEYS (SK_THREADS / 2) /* keys scored at once: two threads a key */

/* Two threads score one key, each over half the head (16-byte loads when
 * VEC), so a block has 64 independent key rows in flight instead of a warp
 * walking keys one by one. */
template <bool VEC>
__device__ __forceinline__ float half_dot(const float *__restrict__ qs,
                                          const float *__restrict__ kr, int d0, int d1)
{
    float dot = 0.0f;
    if (VEC) {
        for (int d = d0; d < d1; d += 4) {
            float4 kv = __ldg(reinterpret_cast<const float4 *>(kr + d));
            dot = fmaf(qs[d], kv.x, dot);
            dot = fmaf(qs[d + 1], kv.y, dot);
            dot = fmaf(qs[d + 2], kv.z, dot);
            dot = fmaf(qs[d + 3], kv.w, dot);
        }
    } else {
        for (int d = d0; d < d1; d++)
            dot = fmaf(qs[d], __ldg(kr + d), dot);
    }
    return dot;
}

/* Partial of (row r, head h, split s) at part + ((r*H + h)*NS + s)*(hd+2):
 * [0] = m, [1] = l, [2..] = acc. Dynamic shared memory: split_len scores. */
template <bool VEC>
__global__ void __launch_bounds__(SK_THREADS)
attn_split_kernel(const float *__restrict__ q, const float *__restrict__ k,
                  const float *__restrict__ v, float *__restrict__ part,
                  llm_cuda_positions pos, int32_t n_heads, int32_t n_kv_heads,
                  int32_t hd, int32_t n_splits, uint32_t split_len)
{
    extern __shared__ float sc[];
    __shared__ float qs[LLM_CUDA_MAX_HEAD_DIM];
    __shared__ float red[32];
    int h = blockIdx.x, s = blockIdx.y, r = blockIdx.z;
    uint32_t len = llm__base_pos(pos) + (uint32_t)r + 1; /* positions 0..qp */
    uint32_t p0 = (uint32_t)s * split_len;
    float *out = part + (((size_t)r * n_heads + h) * n_splits + s) * (size_t)(hd + 2);
    if (p0 >= len) {
        if (threadIdx.x == 0) {
            out[0] = -INFINITY;
            out[1] = 0.0f;
        }
        return;
    }
    uint32_t p1 = min(len, p0 + split_len);
    int cnt = (int)(p1 - p0);
    int kvh = h / (n_heads / n_kv_heads);
    size_t kv_stride = (size_t)n_kv_heads * hd;
    const float *qr = q + (size_t)r * n_heads * hd + (size_t)h * hd;
    float qscale = 1.0f / sqrtf((float)hd);
    for (int d = threadIdx.x; d < hd; d += SK_THREADS)
        qs[d] = qr[d];
    __syncthreads();
    const float *kb = k + (size_t)kvh * hd + (size_t)p0 * kv_stride;
    int key = threadIdx.x >> 1, side = threadIdx.x & 1;
    int half = VEC ? hd / 2 : (hd + 1) / 2;
    int d0 = side * half, d1 = side ? hd : half;
    for (int base = 0; base < cnt; base += SK_KEYS) { /* uniform trip count */
        int i = base + key;
        float dot = i < cnt ? half_dot<VEC>(qs, kb + (size_t)i * kv_stride, d0, d1) : 0.0f;
        dot += __shfl_xor_sync(0xffffffffu, dot, 1);
        if (i < cnt && side == 0)
            sc[i] = dot * qscale;
    }
    __syncthreads();
    float m = -INFINITY;
    for (int i = threadIdx.x; i < cnt; i += SK_THREADS)
        m = fmaxf(m, sc[i]);
    m = llm__block_max(m, red);
    float l = 0.0f;
    for (int i = threadIdx.x; i < cnt; i += SK_THREADS) {
        float e = expf(sc[i] - m);
        sc[i] = e;
        l += e;
    }
    l = llm__block_sum(l, red); /* its barriers also publish sc */
    const float *vb = v + (size_t)kvh * hd + (size_t)p0 * kv_stride;
    for (int d = threadIdx.x; d < hd; d += SK_THREADS) {
        float acc = 0.0f;
#pragma unroll 4
        for (int i = 0; i < cnt; i++)
            acc = fmaf(sc[i], __ldg(vb + (size_t)i * kv_stride + d), acc);
        out[2 + d] = acc;
    }
    if (threadIdx.x == 0) {
        out[0] = m;
        out[1] = l;
    }
}

/* One block per (head, row); thread per output dimension. */
__global__ void attn_merge_kernel(const float *__restrict__ part,
                                  float *__restrict__ out, int32_t n_heads,
                                  int32_t hd, int32_t n_splits)
{
    int h = blockIdx.x, r = blockIdx.y;
    const float *pr = part + ((size_t)r * n_heads + h) * n_splits * (size_t)(hd + 2);
    float mx = -INFINITY;
    for (int s = 0; s < n_splits; s++)
        mx = fmaxf(mx, pr[(size_t)s * (hd + 2)]);
    float *o = out + (size_t)r * n_heads * hd + (size_t)h * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float num = 0.0f, den = 0.0f;
        for (int s = 0; s < n_splits; s++) {
            const float *ps = pr + (size_t)s * (hd + 2);
            if (ps[1] == 0.0f)
                continue; /* empty piece */
            float w = expf(ps[0] - mx);
            num = fmaf(w, ps[2 + d], num);
            den = fmaf(w, ps[1], den);
        }
        o[d] = num / den;
    }
}

#define TQ 16   /* queries per block */
#define TK 32   /* keys per tile */
#define TT 128  /* threads: 8 per query row */

/* Tiled causal attention; grid (heads, ceil(n/TQ)). Dynamic shared memory:
 * qs [TQ][hd+1], kv [TK][hd+1] (keys, then values), ps [TQ][TK]. */
__global__ void __launch_bounds__(TT)
attn_tiled_kernel(const float *__restrict__ q, const float *__restrict__ k,
                  const float *__restrict__ v, float *__restrict__ out,
                  int32_t n, llm_cuda_positions pos, int32_t n_heads,
                  int32_t n_kv_heads, int32_t hd)
{
    extern __shared__ float sm[];
    const int ld = hd + 1;
    float *qs = sm, *kv = sm + TQ * ld, *ps = kv + TK * ld;
    int h = blockIdx.x, q0 = blockIdx.y * TQ, t = threadIdx.x;
    int qi = t >> 3, sub = t & 7; /* the row this thread serves, 8 lanes a row */
    int nq = min(TQ, n - q0);
    uint32_t base = llm__base_pos(pos);
    int kvh = h / (n_heads / n_kv_heads);
    size_t qstride = (size_t)n_heads * hd, kstride = (size_t)n_kv_heads * hd;
    float qscale = 1.0f / sqrtf((float)hd);
    for (int i = t; i < TQ * hd; i += TT) {
        int r = i / hd, d = i % hd;
        qs[r * ld + d] = r < nq ? q[(size_t)(q0 + r) * qstride + (size_t)h * hd + d] : 0.0f;
    }
    uint32_t my_pos = base + (uint32_t)(q0 + qi);            /* this row's position */
    uint32_t last = base + (uint32_t)(q0 + nq - 1);          /* the block's last key */
    float m = -INFINITY, l = 0.0f;
    float acc[LLM_CUDA_MAX_HEAD_DIM / 8];
#pragma unroll
    for (int j = 0; j < LLM_CUDA_MAX_HEAD_DIM / 8; j++)
        acc[j] = 0.0f;
    const float *kb = k + (size_t)kvh * hd, *vb = v + (size_t)kvh * hd;
    for (uint32_t k0 = 0; k0 <= last; k0 += TK) {
        int nk = (int)min((uint32_t)TK, last + 1 - k0);
        __syncthreads(); /* the previous tile's values are consumed */
        for (int i = t; i < TK * hd; i += TT) {
            int r = i / hd, d = i % hd;
            kv[r * ld + d] = r < nk ? kb[(size_t)(k0 + r) * kstride + d] : 0.0f;
        }
        __syncthreads();
        float sv[TK / 8];
        float tmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < TK / 8; j++) {
            int kj = sub * (TK / 8) + j;
            uint32_t kp = k0 + (uint32_t)kj;
            float dot = -INFINITY;
            if (qi < nq && kj < nk && kp <= my_pos) {
                dot = 0.0f;
                for (int d = 0; d < hd; d++)
                    dot = fmaf(qs[qi * ld + d], kv[kj * ld + d], dot);
                dot *= qscale;
            }
            sv[j] = dot;
            tmax = fmaxf(tmax, dot);
        }
        /* The 8 lanes of a row are adjacent in one warp. */
        for (int o = 1; o < 8; o <<= 1)
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
        float mnew = fmaxf(m, tmax);
        float corr = mnew == -INFINITY ? 1.0f : expf(m - mnew);
        float psum = 0.0f;
#pragma unroll
        for (int j = 0; j < TK / 8; j++) {
            float p = sv[j] == -INFINITY ? 0.0f : expf(sv[j] - mnew);
            ps[qi * TK + sub * (TK / 8) + j] = p;
            psum += p;
        }
        for (int o = 1; o < 8; o <<= 1)
            psum += __shfl_xor_sync(0xffffffffu, psum, o);
        l = l * corr + psum;
        m = mnew;
        __syncthreads(); /* keys consumed; ps complete */
        for (int i = t; i < TK * hd; i += TT) {
            int r = i / hd, d = i % hd;
            kv[r * ld + d] = r < nk ? vb[(size_t)(k0 + r) * kstride + d] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < LLM_CUDA_MAX_HEAD_DIM / 8; j++) {
            int d = sub + 8 * j;
            if (d < hd) {
                float a = acc[j] * corr;
                for (int kj = 0; kj < nk; kj++)
                    a = fmaf(ps[qi * TK + kj], kv[kj * ld + d], a);
                acc[j] = a;
            }
        }
    }
    if (qi >= nq)
        return;
    float *o = out + (size_t)(q0 + qi) * qstride + (size_t)h * hd;
    float inv = 1.0f / l;
#pragma unroll
    for (int j = 0; j < LLM_CUDA_MAX_HEAD_DIM / 8; j++) {
        int d = sub + 8 * j;
        if (d < hd)
            o[d] = acc[j] * inv;
    }
}

/* ---- prefill through cuBLAS (tensor cores) ------------------------------ */

/* Rows r = j*n + t of S ([group*n][L]) hold query t's scores against keys
 * 0..L-1; keys after the query's position are masked. Each row becomes its
 * softmax (masked keys 0). One block per row; the row's valid part is read
 * once into shared memory (dynamic, L floats) when `cached`, else read
 * three times from global memory. */
template <bool CACHED>
__global__ void softmax_causal_kernel(float *s, int32_t n, uint32_t L, uint32_t pos0)
{
    extern __shared__ float rs[];
    __shared__ float red[32];
    int32_t t = blockIdx.x % n;
    uint32_t valid = pos0 + (uint32_t)t + 1;
    float *row = s + (size_t)blockIdx.x * L;
    const float *src = CACHED ? rs : row;
    float m = -INFINITY;
    for (uint32_t i = threadIdx.x; i < valid; i += blockDim.x) {
        float x = row[i];
        if (CACHED)
            rs[i] = x;
        m = fmaxf(m, x);
    }
    m = llm__block_max(m, red); /* its barriers publish rs */
    float sum = 0.0f;
    for (uint32_t i = threadIdx.x; i < valid; i += blockDim.x) {
        float e = expf(src[i] - m);
        if (CACHED)
            rs[i] = e;
        sum += e;
    }
    sum = llm__block_sum(sum, red);
    float inv = 1.0f / sum;
    for (uint32_t i = threadIdx.x; i < L; i += blockDim.x)
        row[i] = i < valid ? (CACHED ? rs[i] : expf(src[i] - m)) * inv : 0.0f;
}

/* Per kv head: S = Q_group K^T (one strided batch over the group's query
 * heads, K shared with stride 0), softmax, O_group = P V. fp32 storage,
 * TF32 tensor-core arithmetic with fp32 accumulation. Causal masking
 * happens in the softmax, so the products do the full square. */
static int attn_gemm(llm_cuda *c, const llm_cuda_attn *a)
{
    int32_t hd = a->head_dim, group = a->n_heads / a->n_kv_heads, n = a->n;
    uint32_t L = a->pos.pos0 + (uint32_t)n;
    long long kvs = (long long)a->n_kv_heads * hd, qs = (long long)a->n_heads * hd;
    const float alpha = 1.0f / sqrtf((float)hd), one = 1.0f, zero = 0.0f;
    for (int32_t g = 0; g < a->n_kv_heads; g++) {
        LLM_CU_BLAS(c, cublasGemmStridedBatchedEx(
            c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)L, n, hd, &alpha,
            a->k + (size_t)g * hd, CUDA_R_32F, (int)kvs, 0,
            a->q + (size_t)g * group * hd, CUDA_R_32F, (int)qs, hd, &zero,
            c->attn_s, CUDA_R_32F, (int)L, (long long)n * L, group,
            CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
        if ((size_t)L * sizeof(float) <= 48 * 1024)
            softmax_causal_kernel<true><<<(unsigned)(group * n), 256,
                                          (size_t)L * sizeof(float), c->stream>>>(
                c->attn_s, n, L, a->pos.pos0);
        else
            softmax_causal_kernel<false><<<(unsigned)(group * n), 256, 0, c->stream>>>(
                c->attn_s, n, L, a->pos.pos0);
        LLM_CU_LAUNCHED(c, "softmax_causal_kernel");
        LLM_CU_BLAS(c, cublasGemmStridedBatchedEx(
            c->blas, CUBLAS_OP_N, CUBLAS_OP_N, hd, n, (int)L, &one,
            a->v + (size_t)g * hd, CUDA_R_32F, (int)kvs, 0,
            c->attn_s, CUDA_R_32F, (int)L, (long long)n * L, &zero,
            a->out + (size_t)g * group * hd, CUDA_R_32F, (int)qs, hd, group,
            CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
    }
    return 0;
}

int llm_cuda_reserve_attention_gemm(llm_cuda *c, int32_t max_rows, uint32_t max_ctx,
                                    int32_t max_group)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, max_rows > 0 && max_ctx > 0 && max_group > 0 && !c->capturing);
    size_t need = (size_t)max_rows * (size_t)max_ctx * (size_t)max_group;
    if (need <= c->attn_s_floats)
        return 0;
    float *s = NULL;
    LLM_CU_TRY(c, cudaSetDevice(c->device));
    LLM_CU_TRY(c, cudaStreamSynchronize(c->stream));
    LLM_CU_TRY(c, cudaMalloc((void **)&s, need * sizeof(float)));
    cudaFree(c->attn_s);
    c->attn_s = s;
    c->attn_s_floats = need;
    return 0;
}

static int gemm_fits(const llm_cuda *c, const llm_cuda_attn *a)
{
    if (!c->attn_s || a->pos.dpos)
        return 0;
    size_t need = (size_t)a->n * ((size_t)a->pos.pos0 + (size_t)a->n) *
                  (size_t)(a->n_heads / a->n_kv_heads);
    return need <= c->attn_s_floats;
}

static int check_attn(llm_cuda *c, const llm_cuda_attn *a)
{
    LLM_CU_ARG(c, a && a->q && a->k && a->v && a->out && a->n > 0);
    LLM_CU_ARG(c, a->n_heads > 0 && a->n_kv_heads > 0 &&
                      a->n_heads % a->n_kv_heads == 0);
    LLM_CU_ARG(c, a->head_dim > 0 && a->head_dim <= LLM_CUDA_MAX_HEAD_DIM);
    LLM_CU_ARG(c, a->n_heads <= c->max_heads && c->attn_part);
    LLM_CU_ARG(c, (uint64_t)a->pos.pos0 + (uint64_t)a->n <= c->max_ctx);
    if (a->n <= LLM_CUDA_ATTN_SPLITK_MAX_N) {
        uint64_t len = a->pos.dpos ? c->max_ctx : (uint64_t)a->pos.pos0 + a->n;
        uint32_t split = llm__attn_split_len(c->max_ctx);
        uint64_t ns = (len + split - 1) / split;
        LLM_CU_ARG(c, (uint64_t)a->n * a->n_heads * ns * (a->head_dim + 2) <=
                          c->attn_part_floats);
    }
    return 0;
}

static int attn_splitk(llm_cuda *c, const llm_cuda_attn *a)
{
    /* With a device base the length is unknown here: cover the context. */
    uint64_t len = a->pos.dpos ? c->max_ctx : (uint64_t)a->pos.pos0 + a->n;
    uint32_t split = llm__attn_split_len(c->max_ctx);
    int ns = (int)((len + split - 1) / split);
    size_t smem = (size_t)split * sizeof(float);
    bool vec = a->head_dim % 8 == 0 && ((uintptr_t)a->k & 15) == 0;
    if (smem > 48 * 1024) {
        if (vec)
            LLM_CU_TRY(c, cudaFuncSetAttribute(attn_split_kernel<true>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)smem));
        else
            LLM_CU_TRY(c, cudaFuncSetAttribute(attn_split_kernel<false>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)smem));
    }
    dim3 grid((unsigned)a->n_heads, (unsigned)ns, (unsigned)a->n);
    if (vec)
        attn_split_kernel<true><<<grid, SK_THREADS, smem, c->stream>>>(
            a->q, a->k, a->v, c->attn_part, a->pos, a->n_heads, a->n_kv_heads,
            a->head_dim, ns, split);
    else
        attn_split_kernel<false><<<grid, SK_THREADS, smem, c->stream>>>(
            a->q, a->k, a->v, c->attn_part, a->pos, a->n_heads, a->n_kv_heads,
            a->head_dim, ns, split);
    LLM_CU_LAUNCHED(c, "attn_split_kernel");
    dim3 mgrid((unsigned)a->n_heads, (unsigned)a->n);
    attn_merge_kernel<<<mgrid, a->head_dim, 0, c->stream>>>(
        c->attn_part, a->out, a->n_heads, a->head_dim, ns);
    LLM_CU_LAUNCHED(c, "attn_merge_kernel");
    return 0;
}

static int attn_tiled(llm_cuda *c, const llm_cuda_attn *a)
{
    size_t smem = ((size_t)(TQ + TK) * (a->head_dim + 1) + TQ * TK) * sizeof(float);
    LLM_CU_TRY(c, cudaFuncSetAttribute(attn_tiled_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem));
    dim3 grid((unsigned)a->n_heads, (unsigned)((a->n + TQ - 1) / TQ));
    attn_tiled_kernel<<<grid, TT, smem, c->stream>>>(
        a->q, a->k, a->v, a->out, a->n, a->pos, a->n_heads, a->n_kv_heads,
        a->head_dim);
    LLM_CU_LAUNCHED(c, "attn_tiled_kernel");
    return 0;
}

int llm_cuda_attention(llm_cuda *c, const llm_cuda_attn *a)
{
    LLM_CU_ENTER(c);
    int rc = check_attn(c, a);
    if (rc)
        return rc;
    if (a->n <= LLM_CUDA_ATTN_SPLITK_MAX_N)
        return attn_splitk(c, a);
    if (gemm_fits(c, a))
        return attn_gemm(c, a);
    return attn_tiled(c, a);
}
