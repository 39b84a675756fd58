/* cuda_ops.cu — the element-wise and row-wise operations of a layer:
 * RMSNorm, rotary embedding, SwiGLU, residual add and embedding lookup.
 *
 * Every kernel here may be launched as a programmatic dependent launch
 * (llm__launch): it lets its successor be scheduled at once and waits for
 * its predecessor before its first access to memory, so a chain of small
 * kernels pays no launch gap between them.
 *
 * They are memory-bound and small; what matters is one pass over the data,
 * fp32 arithmetic in the same order of operations as the CPU reference
 * (x * (1/rms) * weight; angle = (pos * scale) * inv_freq in double), and no
 * host-side dependence on positions when a graph replays them (positions
 * come from llm_cuda_positions).
 */
#include "cuda_internal.cuh"


/* One block per row; threads stride over the row twice (sum of squares,
 * then scale), so y may alias x. */
__global__ void rmsnorm_kernel(float *y, const float *x, const float *weight,
                               int32_t dim, float eps)
{
    llm__pdl_trigger();
    llm__pdl_wait();
    __shared__ float red[32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x)
        ss = fmaf(xr[i], xr[i], ss);
    ss = llm__block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x)
        yr[i] = xr[i] * inv * weight[i];
}

int llm_cuda_rmsnorm(llm_cuda *c, float *y, const float *x, const float *weight,
                     int32_t n, int32_t dim, float eps)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, y && x && weight && n > 0 && dim > 0);
    int threads = dim >= 4096 ? 1024 : dim >= 1024 ? 512 : 128;
    LLM_CU_TRY(c, llm__launch(c, rmsnorm_kernel, dim3((unsigned)n), dim3(threads), 0, y, x,
                              weight, dim, eps));
    LLM_CU_LAUNCHED(c, "rmsnorm_kernel");
    return 0;
}

/* One thread per rotated pair: (row, head, i). */
__global__ void rope_kernel(float *x, int32_t n, int32_t n_heads, int32_t stride,
                            llm_cuda_positions pos, const double *inv_freq,
                            float scale, int32_t head_dim)
{
    llm__pdl_trigger();
    llm__pdl_wait();
    int32_t half = head_dim / 2;
    size_t total = (size_t)n * (size_t)n_heads * (size_t)half;
    size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (t >= total)
        return;
    int32_t i = (int32_t)(t % (size_t)half);
    size_t rh = t / (size_t)half;
    int32_t h = (int32_t)(rh % (size_t)n_heads);
    int32_t r = (int32_t)(rh / (size_t)n_heads);
    uint32_t p = llm__base_pos(pos) + (uint32_t)r;
    double angle = ((double)p * (double)scale) * inv_freq[i];
    double sd, cd;
    sincos(angle, &sd, &cd);
    float s = (float)sd, co = (float)cd;
    float *v = x + (size_t)r * stride + (size_t)h * head_dim + 2 * i;
    float a = v[0], b = v[1];
    v[0] = a * co - b * s;
    v[1] = a * s + b * co;
}

int llm_cuda_rope(llm_cuda *c, float *x, int32_t n, int32_t n_heads,
                  int32_t stride, llm_cuda_positions pos, const double *inv_freq,
                  float scale, int32_t head_dim)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, x && inv_freq && n > 0 && n_heads > 0 && head_dim > 0);
    LLM_CU_ARG(c, head_dim % 2 == 0 && stride >= n_heads * head_dim);
    size_t total = (size_t)n * (size_t)n_heads * (size_t)(head_dim / 2);
    LLM_CU_TRY(c, llm__launch(c, rope_kernel, dim3(llm__cuda_blocks(total, 256)), dim3(256), 0,
                              x, n, n_heads, stride, pos, inv_freq, scale, head_dim));
    LLM_CU_LAUNCHED(c, "rope_kernel");
    return 0;
}

/* rope_kernel's rotation over half-split pairs: one thread per
 * (row, head, i), rotating x[i] with x[i + half]. */
__global__ void rope_neox_kernel(float *x, int32_t n, int32_t n_heads, int32_t stride,
                                 llm_cuda_positions pos, const double *inv_freq,
                                 float scale, int32_t head_dim)
{
    llm__pdl_trigger();
    llm__pdl_wait();
    int32_t half = head_dim / 2;
    size_t total = (size_t)n * (size_t)n_heads * (size_t)half;
    size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (t >= total)
        return;
    int32_t i = (int32_t)(t % (size_t)half);
    size_t rh = t / (size_t)half;
    int32_t h = (int32_t)(rh % (size_t)n_heads);
    int32_t r = (int32_t)(rh / (size_t)n_heads);
    uint32_t p = llm__base_pos(pos) + (uint32_t)r;
    double angle = ((double)p * (double)scale) * inv_freq[i];
    double sd, cd;
    sincos(angle, &sd, &cd);
    float s = (float)sd, co = (float)cd;
    float *v = x + (size_t)r * stride + (size_t)h * head_dim + i;
    float a = v[0], b = v[half];
    v[0] = a * co - b * s;
    v[half] = a * s + b * co;
}

int llm_cuda_rope_neox(llm_cuda *c, float *x, int32_t n, int32_t n_heads,
                       int32_t stride, llm_cuda_positions pos, const double *inv_freq,
                       float scale, int32_t head_dim)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, x && inv_freq && n > 0 && n_heads > 0 && head_dim > 0);
    LLM_CU_ARG(c, head_dim % 2 == 0 && stride >= n_heads * head_dim);
    size_t total = (size_t)n * (size_t)n_heads * (size_t)(head_dim / 2);
    LLM_CU_TRY(c, llm__launch(c, rope_neox_kernel, dim3(llm__cuda_blocks(total, 256)), dim3(256),
                              0, x, n, n_heads, stride, pos, inv_freq, scale, head_dim));
    LLM_CU_LAUNCHED(c, "rope_neox_kernel");
    return 0;
}

__global__ void kv_store_kernel(float *kc, float *vc, const float *k, const float *v,
                                int32_t n, int32_t kv_dim, int32_t src_stride,
                                llm_cuda_positions pos)
{
    llm__pdl_trigger();
    llm__pdl_wait();
    size_t total = (size_t)n * (size_t)kv_dim;
    size_t base = llm__base_pos(pos);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)kv_dim, d = i % (size_t)kv_dim;
        kc[(base + r) * kv_dim + d] = k[r * src_stride + d];
        vc[(base + r) * kv_dim + d] = v[r * src_stride + d];
    }
}

int llm_cuda_kv_store(llm_cuda *c, float *k_cache, float *v_cache, const float *k,
                      const float *v, int32_t n, int32_t kv_dim, int32_t src_stride,
                      llm_cuda_positions pos)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, k_cache && v_cache && k && v && n > 0 && kv_dim > 0);
    LLM_CU_ARG(c, src_stride >= kv_dim);
    size_t total = (size_t)n * (size_t)kv_dim;
    unsigned b = llm__cuda_blocks(total, 256), cap = (unsigned)c->sm_count * 16u;
    LLM_CU_TRY(c, llm__launch(c, kv_store_kernel, dim3(b < cap ? b : cap), dim3(256), 0,
                              k_cache, v_cache, k, v, n, kv_dim, src_stride, pos));
    LLM_CU_LAUNCHED(c, "kv_store_kernel");
    return 0;
}

/* One thread per rotated pair of q or k, plus the v copy. */
__global__ void rope_qkv_store_kernel(float *qkv, int32_t n, int32_t stride, int32_t nh,
                                      int32_t nkv, int32_t hd, llm_cuda_positions pos,
                                      const double *inv_freq, float scale, float *kc,
                                      float *vc)
{
    llm__pdl_trigger();
    llm__pdl_wait();
    int32_t half = hd / 2, kv_dim = nkv * hd;
    int32_t per_row = (nh + nkv) * half + kv_dim; /* pairs, then v elements */
    size_t total = (size_t)n * (size_t)per_row;
    size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (t >= total)
        return;
    int32_t r = (int32_t)(t / (size_t)per_row), e = (int32_t)(t % (size_t)per_row);
    uint32_t p = llm__base_pos(pos) + (uint32_t)r;
    float *row = qkv + (size_t)r * stride;
    if (e >= (nh + nkv) * half) { /* v */
        int32_t d = e - (nh + nkv) * half;
        vc[(size_t)p * kv_dim + d] = row[nh * hd + kv_dim + d];
        return;
    }
    int32_t h = e / half, i = e % half;
    double angle = ((double)p * (double)scale) * inv_freq[i];
    double sd, cd;
    sincos(angle, &sd, &cd);
    float s = (float)sd, co = (float)cd;
    float *v = row + (size_t)h * hd + 2 * i; /* k heads follow q heads */
    float a = v[0], b = v[1];
    float x0 = a * co - b * s, x1 = a * s + b * co;
    v[0] = x0;
    v[1] = x1;
    if (h >= nh) {
        float *kr = kc + (size_t)p * kv_dim + (size_t)(h - nh) * hd + 2 * i;
        kr[0] = x0;
        kr[1] = x1;
    }
}

int llm_cuda_rope_qkv_store(llm_cuda *c, float *qkv, int32_t n, int32_t stride,
                            int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                            llm_cuda_positions pos, const double *inv_freq, float scale,
                            float *k_cache, float *v_cache)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, qkv && inv_freq && k_cache && v_cache && n > 0 && n_heads > 0);
    LLM_CU_ARG(c, n_kv_heads > 0 && head_dim > 0 && head_dim % 2 == 0);
    LLM_CU_ARG(c, stride >= (n_heads + 2 * n_kv_heads) * head_dim);
    size_t per_row = (size_t)(n_heads + n_kv_heads) * (head_dim / 2) +
                     (size_t)n_kv_heads * head_dim;
    size_t total = (size_t)n * per_row;
    LLM_CU_TRY(c, llm__launch(c, rope_qkv_store_kernel, dim3(llm__cuda_blocks(total, 256)),
                              dim3(256), 0, qkv, n, stride, n_heads, n_kv_heads, head_dim, pos,
                              inv_freq, scale, k_cache, v_cache));
    LLM_CU_LAUNCHED(c, "rope_qkv_store_kernel");
    return 0;
}

__global__ void swiglu_pairs_kernel(float *out, const float *gu, size_t len)
{
    llm__pdl_trigger();
    llm__pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = gu[2 * i];
        out[i] = g / (1.0f + expf(-g)) * gu[2 * i + 1];
    }
}

__global__ void unpair_kernel(float *a, float *b, const float *ab, size_t len)
{
    llm__pdl_trigger();
    llm__pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x) {
        float2 v = reinterpret_cast<const float2 *>(ab)[i];
        a[i] = v.x;
        b[i] = v.y;
    }
}

__global__ void swiglu_kernel(float *gate, const float *up, size_t len)
{
    llm__pdl_trigger();
    llm__pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

__global__ void add_kernel(float *y, const float *x, size_t len)
{
    llm__pdl_trigger();
    llm__pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

static unsigned grid_for(const llm_cuda *c, size_t len)
{
    unsigned b = llm__cuda_blocks(len, 256), cap = (unsigned)c->sm_count * 16u;
    return b < cap ? b : cap;
}

__global__ void add_bias_kernel(float *y, const float *bias, size_t len, int32_t width)
{
    llm__pdl_trigger();
    llm__pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += bias[i % (size_t)width];
}

int llm_cuda_add_bias(llm_cuda *c, float *y, const float *bias, int32_t n, int32_t width)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, y && bias && n > 0 && width > 0);
    size_t len = (size_t)n * (size_t)width;
    LLM_CU_TRY(c, llm__launch(c, add_bias_kernel, dim3(grid_for(c, len)), dim3(256), 0, y, bias,
                              len, width));
    LLM_CU_LAUNCHED(c, "add_bias_kernel");
    return 0;
}

int llm_cuda_swiglu(llm_cuda *c, float *gate, const float *up, size_t len)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, gate && up);
    if (!len)
        return 0;
    LLM_CU_TRY(c, llm__launch(c, swiglu_kernel, dim3(grid_for(c, len)), dim3(256), 0, gate,
                              up, len));
    LLM_CU_LAUNCHED(c, "swiglu_kernel");
    return 0;
}

int llm_cuda_swiglu_pairs(llm_cuda *c, float *out, const float *gu, size_t len)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, out && gu);
    if (!len)
        return 0;
    LLM_CU_TRY(c, llm__launch(c, swiglu_pairs_kernel, dim3(grid_for(c, len)), dim3(256), 0,
                              out, gu, len));
    LLM_CU_LAUNCHED(c, "swiglu_pairs_kernel");
    return 0;
}

int llm_cuda_unpair(llm_cuda *c, float *a, float *b, const float *ab, size_t len)
{
    LLM_CU_ENTER(c);
    /* ab is read as float2 pairs: 8-byte alignment. */
    LLM_CU_ARG(c, a && b && ab && ((uintptr_t)ab & 7) == 0);
    if (!len)
        return 0;
    LLM_CU_TRY(c, llm__launch(c, unpair_kernel, dim3(grid_for(c, len)), dim3(256), 0,
                              a, b, ab, len));
    LLM_CU_LAUNCHED(c, "unpair_kernel");
    return 0;
}

int llm_cuda_add(llm_cuda *c, float *y, const float *x, size_t len)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, y && x);
    if (!len)
        return 0;
    LLM_CU_TRY(c, llm__launch(c, add_kernel, dim3(grid_for(c, len)), dim3(256), 0, y, x, len));
    LLM_CU_LAUNCHED(c, "add_kernel");
    return 0;
}

/* One block per token. */
__global__ void embed_kernel(const void *w, const uint16_t *scales, int type,
                             int64_t rows, int64_t cols, const int32_t *ids,
                             float *out)
{
    llm__pdl_trigger();
    llm__pdl_wait();
    int32_t id = ids[blockIdx.x];
    float *o = out + (size_t)blockIdx.x * (size_t)cols;
    bool ok = id >= 0 && id < rows;
    size_t base = ok ? (size_t)id * (size_t)cols : 0;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
        float v = 0.0f;
        if (ok) {
            size_t e = base + (size_t)i;
            if (type == LLM_TYPE_F32)
                v = ((const float *)w)[e];
            else if (type == LLM_TYPE_F16)
                v = __half2float(((const __half *)w)[e]);
            else if (type == LLM_TYPE_BF16)
                v = __bfloat162float(((const __nv_bfloat16 *)w)[e]);
            else if (type == LLM_TYPE_Q4_K || type == LLM__Q4K_GROUPED ||
                     type == LLM_TYPE_Q6_K || type == LLM__Q6K_GROUPED ||
                     type == LLM__Q5K_GROUPED)
                v = llm__kq_at(w, scales, type, id, cols, i);
            else
                v = (float)((const int8_t *)w)[e] *
                    __half2float(__ushort_as_half(scales[e / LLM_QK8_0]));
        }
        o[i] = v;
    }
}

int llm_cuda_embed(llm_cuda *c, const llm_cuda_weight *embd, const int32_t *ids,
                   int32_t n, float *out)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, embd && embd->data && ids && out && n > 0);
    LLM_CU_TRY(c, llm__launch(c, embed_kernel, dim3((unsigned)n), dim3(256), 0, embd->data,
                              embd->scales, llm__weight_code(embd), embd->rows, embd->cols, ids,
                              out));
    LLM_CU_LAUNCHED(c, "embed_kernel");
    return 0;
}
