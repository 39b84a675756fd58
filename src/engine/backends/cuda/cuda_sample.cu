/* cuda_sample.cu — choosing the next token on the device: argmax, and
 * temperature / top-k / top-p sampling.
 *
 * Sampling needs no sort. Logits are mapped to order-preserving 32-bit keys,
 * and each cut is a threshold on the key found bit by bit from the top
 * (radix select): top-k keeps the largest key K with count(key >= K) >= k,
 * top-p the largest key P with mass(key >= P) >= top_p * Z among what top-k
 * kept. Both counts are monotone in the threshold, so 32 passes over the
 * vocabulary find each cut exactly; tokens tied at a boundary are all kept.
 * The draw then walks the kept tokens in index order with a block-wide
 * prefix sum. One block of SAMPLE_THREADS does a row; the whole thing is a
 * few tens of microseconds for a 128k vocabulary and allocates nothing.
 */
#include "cuda_internal.cuh"

#include <math.h>

#define SAMPLE_THREADS 1024

/* Float -> key with the same order (NaN maps below -inf: it never wins and
 * never survives a cut unless everything is NaN). */
__device__ __forceinline__ uint32_t key_of(float x)
{
    if (x != x)
        return 0u;
    uint32_t u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ bool better(float v, int i, float bv, int bi)
{
    return v > bv || (v == bv && i < bi);
}

/* Block-wide argmax of one row; the result is valid in thread 0. */
__device__ int block_argmax(const float *row, int32_t vocab)
{
    __shared__ float sv[32];
    __shared__ int si[32];
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    /* Unrolled so that several loads of a thread are in flight: one block
     * walks a whole 128k-entry row, and a load-compare chain would pay the
     * memory latency a hundred times. */
#pragma unroll 8
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        float x = row[i];
        if (x == x && better(x, i, bv, bi)) {
            bv = x;
            bi = i;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (better(ov, oi, bv, bi)) {
            bv = ov;
            bi = oi;
        }
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++)
            if (better(sv[w], si[w], bv, bi)) {
                bv = sv[w];
                bi = si[w];
            }
        if (bi == 0x7fffffff)
            bi = 0; /* every logit NaN */
    }
    return bi;
}

/* Launched as a dependent launch (llm__launch): the logits come from the
 * kernel before it. nan_first: a NaN at index 0 wins the row, as in a host
 * scan that starts from index 0 and moves on only to a strictly greater
 * value (no value compares greater than NaN). Elsewhere the two rules
 * agree: such a scan never moves to a NaN, and strict comparison keeps the
 * lowest index among equals, as better() does (+0 and -0 are equal). */
__global__ void argmax_kernel(const float *logits, int32_t vocab, int nan_first,
                              int32_t *out)
{
    llm__pdl_trigger();
    llm__pdl_wait();
    const float *row = logits + (size_t)blockIdx.x * vocab;
    int best = block_argmax(row, vocab);
    if (threadIdx.x == 0)
        out[blockIdx.x] = nan_first && row[0] != row[0] ? 0 : best;
}

static int argmax_rows(llm_cuda *c, const float *logits, int32_t n, int32_t vocab,
                       int nan_first, int32_t *out)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, logits && out && n > 0 && vocab > 0);
    LLM_CU_TRY(c, llm__launch(c, argmax_kernel, dim3((unsigned)n), dim3(SAMPLE_THREADS), 0,
                              logits, vocab, nan_first, out));
    LLM_CU_LAUNCHED(c, "argmax_kernel");
    return 0;
}

int llm_cuda_argmax(llm_cuda *c, const float *logits, int32_t n, int32_t vocab,
                    int32_t *out)
{
    return argmax_rows(c, logits, n, vocab, 0, out);
}

int llm_cuda_argmax_scan(llm_cuda *c, const float *logits, int32_t n, int32_t vocab,
                         int32_t *out)
{
    return argmax_rows(c, logits, n, vocab, 1, out);
}

__device__ __forceinline__ float block_sum_f(float v)
{
    __shared__ float red[32];
    return llm__block_sum(v, red);
}

/* Count of keys >= thr. */
__device__ float count_at_least(const float *row, int32_t vocab, uint32_t thr)
{
    float n = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        n += key_of(row[i]) >= thr ? 1.0f : 0.0f;
    return block_sum_f(n); /* exact: counts stay far below 2^24 */
}

/* Unnormalized probability of token i, 0 when its key is below thr. */
__device__ __forceinline__ float prob(float x, float m, float inv_t, uint32_t thr)
{
    return x == x && key_of(x) >= thr ? expf((x - m) * inv_t) : 0.0f;
}

__device__ float mass_at_least(const float *row, int32_t vocab, float m,
                               float inv_t, uint32_t thr)
{
    float s = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        s += prob(row[i], m, inv_t, thr);
    return block_sum_f(s);
}

__device__ float block_max_f(float v)
{
    __shared__ float red[32];
    return llm__block_max(v, red);
}

/* Exclusive prefix sum of one value per thread; *total gets the sum. */
__device__ float block_exclusive_scan(float v, float *total)
{
    __shared__ float warp_tot[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float incl = v;
    for (int o = 1; o < 32; o <<= 1) {
        float t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o)
            incl += t;
    }
    __syncthreads();
    if (lane == 31)
        warp_tot[warp] = incl;
    __syncthreads();
    float before = 0.0f, all = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
        if (w < warp)
            before += warp_tot[w];
        all += warp_tot[w];
    }
    *total = all;
    return before + incl - v;
}

/* Walks the kept tokens in index order: each thread owns a contiguous
 * segment and the one whose prefix range holds the target walks it. */
__device__ int draw_token(const float *row, int32_t vocab, float m, float inv_t,
                          uint32_t thr, float u)
{
    __shared__ int pick;
    __shared__ float next_prefix[SAMPLE_THREADS];
    int seg = (vocab + blockDim.x - 1) / blockDim.x;
    int lo = min(vocab, (int)threadIdx.x * seg), hi = min(vocab, lo + seg);
    float mine = 0.0f;
    int last_kept = -1;
    for (int i = lo; i < hi; i++) {
        float p = prob(row[i], m, inv_t, thr);
        mine += p;
        if (p > 0.0f)
            last_kept = i;
    }
    float total;
    float prefix = block_exclusive_scan(mine, &total);
    if (threadIdx.x == 0)
        pick = -1;
    next_prefix[threadIdx.x] = prefix;
    __syncthreads();
    float upper = threadIdx.x + 1 < blockDim.x ? next_prefix[threadIdx.x + 1] : total;
    float target = u * total;
    if (mine > 0.0f && target >= prefix && target < upper) {
        float acc = prefix;
        int got = last_kept; /* rounding fallback */
        for (int i = lo; i < hi; i++) {
            acc += prob(row[i], m, inv_t, thr);
            if (target < acc && prob(row[i], m, inv_t, thr) > 0.0f) {
                got = i;
                break;
            }
        }
        atomicMax(&pick, got);
    }
    __syncthreads();
    if (pick < 0) { /* target at or past the total by rounding: the last kept */
        __syncthreads();
        atomicMax(&pick, last_kept);
        __syncthreads();
    }
    return pick;
}

/* The largest key P with measure(P) >= goal, measure monotone decreasing. */
template <typename F>
__device__ uint32_t radix_threshold(F measure, float goal, uint32_t floor_key)
{
    uint32_t p = 0;
    for (int bit = 31; bit >= 0; bit--) {
        uint32_t cand = p | (1u << bit);
        if (measure(max(cand, floor_key)) >= goal)
            p = cand;
    }
    return max(p, floor_key);
}

__global__ void __launch_bounds__(SAMPLE_THREADS)
sample_kernel(const float *row, int32_t vocab, float temperature, int32_t top_k,
              float top_p, float u_host, const float *u_dev, int32_t *out)
{
    float u = u_dev ? *u_dev : u_host;
    u = fminf(fmaxf(u, 0.0f), 0.99999994f);
    float m = -INFINITY;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        float x = row[i];
        if (x == x)
            m = fmaxf(m, x);
    }
    m = block_max_f(m);
    float inv_t = 1.0f / temperature;
    uint32_t thr = 0;
    if (top_k > 0 && top_k < vocab)
        thr = radix_threshold(
            [&](uint32_t t) { return count_at_least(row, vocab, t); },
            (float)top_k, 0u);
    if (top_p > 0.0f && top_p < 1.0f) {
        float z = mass_at_least(row, vocab, m, inv_t, thr);
        thr = radix_threshold(
            [&](uint32_t t) { return mass_at_least(row, vocab, m, inv_t, t); },
            top_p * z, thr);
    }
    int tok = draw_token(row, vocab, m, inv_t, thr, u);
    if (threadIdx.x == 0)
        *out = tok < 0 ? 0 : tok;
}

int llm_cuda_sample(llm_cuda *c, const float *logits, int32_t vocab,
                    const llm_cuda_sampling *s, int32_t *out)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, logits && s && out && vocab > 0);
    if (!(s->temperature > 0.0f))
        return llm_cuda_argmax(c, logits, 1, vocab, out);
    sample_kernel<<<1, SAMPLE_THREADS, 0, c->stream>>>(
        logits, vocab, s->temperature, s->top_k, s->top_p, s->u, s->u_dev, out);
    LLM_CU_LAUNCHED(c, "sample_kernel");
    return 0;
}
