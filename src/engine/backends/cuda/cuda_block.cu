/* cuda_block.cu — the two kernels the block drafter's head needs beyond
 * the decode step's own (cuda_block.h): attention without a causal mask,
 * its context length read from the position register, and the gather of
 * a target forward's feature planes into the head's rows.
 *
 * Attention layout. One block per (query head, row), BLOCK_ATTN_WARPS
 * warps; a warp takes 32 keys at a time, one key a lane (the lane's dot
 * product over head_dim from the cache row), then accumulates the 32
 * values with the lanes splitting head_dim (element e on lane e % 32), an
 * online softmax keeping the running maximum and sum. The warps' partial
 * results are merged through shared memory at the end. The context is
 * short (the head's positions, a few hundred), so one pass per block
 * suffices and no split-K merge across blocks is needed.
 */
#include "cuda_internal.cuh"
#include "cuda_block.h"

#define BLOCK_ATTN_WARPS 4
#define BLOCK_HD_MAX 256
#define BLOCK_HD_LANE (BLOCK_HD_MAX / 32)

__global__ void __launch_bounds__(BLOCK_ATTN_WARPS * 32)
block_attn_kernel(const float *q, int32_t q_stride, const float *kc, const float *vc,
                  float *out, int32_t n, llm_cuda_positions pos, int32_t n_heads,
                  int32_t n_kv_heads, int32_t head_dim)
{
    __shared__ __align__(16) float qs[BLOCK_HD_MAX];
    __shared__ float ms[BLOCK_ATTN_WARPS], ls[BLOCK_ATTN_WARPS];
    __shared__ float accs[BLOCK_ATTN_WARPS][BLOCK_HD_MAX];
    int32_t h = blockIdx.x, row = blockIdx.y;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int32_t kvh = h / (n_heads / n_kv_heads), kvd = n_kv_heads * head_dim;
    uint32_t len = llm__base_pos(pos) + (uint32_t)n; /* every context and block row */
    float scale = rsqrtf((float)head_dim);
    for (int32_t e = threadIdx.x; e < head_dim; e += blockDim.x)
        qs[e] = q[(size_t)row * q_stride + (size_t)h * head_dim + e];
    __syncthreads();
    float m = -INFINITY, l = 0.0f, acc[BLOCK_HD_LANE];
#pragma unroll
    for (int t = 0; t < BLOCK_HD_LANE; t++)
        acc[t] = 0.0f;
    const float4 *q4 = (const float4 *)qs;
    for (uint32_t j0 = (uint32_t)warp * 32u; j0 < len; j0 += BLOCK_ATTN_WARPS * 32u) {
        uint32_t j = j0 + (uint32_t)lane;
        float s = -INFINITY;
        if (j < len) {
            const float4 *k4 = (const float4 *)(kc + (size_t)j * kvd + (size_t)kvh * head_dim);
            float d = 0.0f;
            for (int32_t e = 0; e < head_dim / 4; e++) {
                float4 a = q4[e], b = k4[e];
                d += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
            }
            s = d * scale;
        }
        float cm = llm__warp_max(s);
        float nm = fmaxf(m, cm);
        float corr = m == -INFINITY ? 0.0f : expf(m - nm);
        float p = j < len ? expf(s - nm) : 0.0f;
        l = l * corr + llm__warp_sum(p);
#pragma unroll
        for (int t = 0; t < BLOCK_HD_LANE; t++)
            acc[t] *= corr;
        uint32_t cnt = len - j0 < 32u ? len - j0 : 32u;
        for (uint32_t jj = 0; jj < cnt; jj++) {
            float pj = __shfl_sync(0xffffffffu, p, (int)jj);
            const float *vr = vc + (size_t)(j0 + jj) * kvd + (size_t)kvh * head_dim;
#pragma unroll
            for (int t = 0; t < BLOCK_HD_LANE; t++) {
                int32_t e = lane + 32 * t;
                if (e < head_dim)
                    acc[t] += pj * vr[e];
            }
        }
        m = nm;
    }
    if (lane == 0) {
        ms[warp] = m;
        ls[warp] = l;
    }
#pragma unroll
    for (int t = 0; t < BLOCK_HD_LANE; t++) {
        int32_t e = lane + 32 * t;
        if (e < head_dim)
            accs[warp][e] = acc[t];
    }
    __syncthreads();
    float gm = -INFINITY;
    for (int w = 0; w < BLOCK_ATTN_WARPS; w++)
        gm = fmaxf(gm, ms[w]);
    float den = 0.0f, wt[BLOCK_ATTN_WARPS];
    for (int w = 0; w < BLOCK_ATTN_WARPS; w++) {
        wt[w] = ms[w] == -INFINITY ? 0.0f : expf(ms[w] - gm);
        den += ls[w] * wt[w];
    }
    float *o = out + (size_t)row * n_heads * head_dim + (size_t)h * head_dim;
    for (int32_t e = threadIdx.x; e < head_dim; e += blockDim.x) {
        float num = 0.0f;
        for (int w = 0; w < BLOCK_ATTN_WARPS; w++)
            num += accs[w][e] * wt[w];
        o[e] = num / den;
    }
}

int llm_cuda_block_attention(llm_cuda *c, const float *q, int32_t q_stride, const float *k,
                             const float *v, float *out, int32_t n, llm_cuda_positions pos,
                             int32_t n_heads, int32_t n_kv_heads, int32_t head_dim)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, q && k && v && out && n >= 1 && n_heads >= 1 && n_kv_heads >= 1);
    LLM_CU_ARG(c, n_heads % n_kv_heads == 0 && head_dim >= 4 && head_dim % 4 == 0 &&
                      head_dim <= BLOCK_HD_MAX && q_stride % 4 == 0);
    LLM_CU_ARG(c, ((uintptr_t)k & 15) == 0 && ((uintptr_t)v & 15) == 0);
    dim3 grid((unsigned)n_heads, (unsigned)n);
    block_attn_kernel<<<grid, BLOCK_ATTN_WARPS * 32, 0, c->stream>>>(
        q, q_stride, k, v, out, n, pos, n_heads, n_kv_heads, head_dim);
    LLM_CU_LAUNCHED(c, "block_attn_kernel");
    return 0;
}

/* The head's layers, in its order, as planes of a target forward. */
typedef struct block_planes {
    int32_t of[8];
} block_planes;

__global__ void block_gather_kernel(float *dst, const float *src, int32_t plane_rows,
                                    int32_t dim, int32_t n_feat, block_planes pl)
{
    int32_t t = blockIdx.x;
    size_t w = (size_t)n_feat * dim;
    for (size_t i = threadIdx.x; i < w; i += blockDim.x) {
        int32_t f = (int32_t)(i / (size_t)dim), d = (int32_t)(i % (size_t)dim);
        dst[(size_t)t * w + i] = src[((size_t)pl.of[f] * plane_rows + t) * dim + d];
    }
}

int llm_cuda_block_gather(llm_cuda *c, float *dst, const float *src, int32_t plane_rows,
                          int32_t rows, int32_t dim, int32_t n_feat, const int32_t *plane_of)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, dst && src && plane_of && rows >= 1 && rows <= plane_rows && dim >= 1);
    LLM_CU_ARG(c, n_feat >= 1 && n_feat <= 8);
    block_planes pl;
    for (int32_t i = 0; i < 8; i++)
        pl.of[i] = i < n_feat ? plane_of[i] : 0;
    block_gather_kernel<<<(unsigned)rows, 256, 0, c->stream>>>(dst, src, plane_rows, dim,
                                                              n_feat, pl);
    LLM_CU_LAUNCHED(c, "block_gather_kernel");
    return 0;
}
