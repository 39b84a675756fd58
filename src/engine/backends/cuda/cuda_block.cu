/* cuda_block.cu — the two kernels the block drafter's head needs beyond
 * the decode step's own (cuda_block.h): attention without a causal mask,
 * its context length read from the position register, and the gather of
 * a target forward's feature planes into the head's rows.
 *
 * Attention layout. One block per (query head, row), BLOCK_ATTN_WARPS
 * warps; the lanes split head_dim (element e on lane e % 32, HDL elements
 * a lane), and a warp takes KPW keys of every BLOCK_ATTN_WARPS * KPW in
 * turn, issuing all their key and value loads at once, each score reduced
 * across the warp, with an online softmax (running maximum and sum) over
 * its keys. The warps' states are merged through shared memory at the
 * end. The context is short (the head's positions, a few hundred), so one
 * pass per block suffices and no split-K merge across blocks is needed.
 * (A first version took one key a lane, its whole dot product serial,
 * then the values one key after another: 21.5 us of a 72-84 us head
 * forward on the H200 for two layers, ncu, bench/results/cuda_hybrid.md.)
 */
#include "cuda_internal.cuh"
#include "cuda_block.h"

#define BLOCK_ATTN_WARPS 8
#define BLOCK_HD_MAX 256

template <int HDL, int KPW>
__global__ void __launch_bounds__(BLOCK_ATTN_WARPS * 32)
block_attn_kernel(const float *q, int32_t q_stride, const float *kc, const float *vc,
                  float *out, int32_t n, llm_cuda_positions pos, int32_t n_heads,
                  int32_t n_kv_heads, int32_t head_dim)
{
    __shared__ float ms[BLOCK_ATTN_WARPS], ls[BLOCK_ATTN_WARPS];
    __shared__ float accs[BLOCK_ATTN_WARPS][HDL * 32];
    int32_t h = blockIdx.x, row = blockIdx.y;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int32_t kvh = h / (n_heads / n_kv_heads), kvd = n_kv_heads * head_dim;
    uint32_t len = llm__base_pos(pos) + (uint32_t)n; /* every context and block row */
    float scale = rsqrtf((float)head_dim);
    const float *qr = q + (size_t)row * q_stride + (size_t)h * head_dim;
    const float *kb = kc + (size_t)kvh * head_dim, *vb = vc + (size_t)kvh * head_dim;
    float qv[HDL], acc[HDL];
#pragma unroll
    for (int t = 0; t < HDL; t++) {
        int32_t e = lane + 32 * t;
        qv[t] = e < head_dim ? qr[e] : 0.0f;
        acc[t] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (uint32_t g = 0; g < len; g += BLOCK_ATTN_WARPS * KPW) {
        float kk[KPW][HDL], vv[KPW][HDL];
#pragma unroll
        for (int i = 0; i < KPW; i++) {
            uint32_t j = g + (uint32_t)warp + (uint32_t)(BLOCK_ATTN_WARPS * i);
#pragma unroll
            for (int t = 0; t < HDL; t++) {
                int32_t e = lane + 32 * t;
                bool ok = j < len && e < head_dim;
                kk[i][t] = ok ? kb[(size_t)j * kvd + e] : 0.0f;
                vv[i][t] = ok ? vb[(size_t)j * kvd + e] : 0.0f;
            }
        }
        float sc[KPW], gm = -INFINITY;
#pragma unroll
        for (int i = 0; i < KPW; i++) {
            float d = 0.0f;
#pragma unroll
            for (int t = 0; t < HDL; t++)
                d = fmaf(qv[t], kk[i][t], d);
            d = llm__warp_sum(d); /* every lane holds the score */
            uint32_t j = g + (uint32_t)warp + (uint32_t)(BLOCK_ATTN_WARPS * i);
            sc[i] = j < len ? d * scale : -INFINITY;
            gm = fmaxf(gm, sc[i]);
        }
        if (gm == -INFINITY)
            continue; /* none of this warp's keys in the group (warp-uniform) */
        float nm = fmaxf(m, gm);
        float corr = expf(m - nm); /* 0 while m is -inf */
        l *= corr;
#pragma unroll
        for (int t = 0; t < HDL; t++)
            acc[t] *= corr;
#pragma unroll
        for (int i = 0; i < KPW; i++) {
            float p = expf(sc[i] - nm); /* 0 for a missing key */
            l += p;
#pragma unroll
            for (int t = 0; t < HDL; t++)
                acc[t] = fmaf(p, vv[i][t], acc[t]);
        }
        m = nm;
    }
    if (lane == 0) {
        ms[warp] = m;
        ls[warp] = l;
    }
#pragma unroll
    for (int t = 0; t < HDL; t++)
        accs[warp][lane + 32 * t] = acc[t];
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

template <int HDL, int KPW>
static void launch_block_attn(llm_cuda *c, const float *q, int32_t q_stride, const float *k,
                              const float *v, float *out, int32_t n, llm_cuda_positions pos,
                              int32_t n_heads, int32_t n_kv_heads, int32_t head_dim)
{
    dim3 grid((unsigned)n_heads, (unsigned)n);
    block_attn_kernel<HDL, KPW><<<grid, BLOCK_ATTN_WARPS * 32, 0, c->stream>>>(
        q, q_stride, k, v, out, n, pos, n_heads, n_kv_heads, head_dim);
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
    /* Elements a lane and keys a warp loads at once: about 16 values of
     * each of k and v in flight a lane whatever head_dim. */
    if (head_dim <= 32)
        launch_block_attn<1, 8>(c, q, q_stride, k, v, out, n, pos, n_heads, n_kv_heads, head_dim);
    else if (head_dim <= 64)
        launch_block_attn<2, 8>(c, q, q_stride, k, v, out, n, pos, n_heads, n_kv_heads, head_dim);
    else if (head_dim <= 128)
        launch_block_attn<4, 4>(c, q, q_stride, k, v, out, n, pos, n_heads, n_kv_heads, head_dim);
    else
        launch_block_attn<8, 2>(c, q, q_stride, k, v, out, n, pos, n_heads, n_kv_heads, head_dim);
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
