/* cuda_attention.cu — causal grouped-query attention over the device KV
 * cache, for decode (one or a few queries) and prefill/verify (many).
 *
 * Decode has one query per head, so parallelism must come from the context:
 * the positions are cut into pieces, by default each row's actual context
 * into at most tune.attn_pieces pieces of at least LLM_CUDA_ATTN_PIECE_MIN
 * positions (or, with attn_pieces = 0, by the reserved context only). Each
 * block computes one (row, head, piece) partial softmax (max m, sum l,
 * weighted values acc); the last block of a (row, head) to finish, found
 * with a ticket counter, merges the pieces in piece order with the usual
 * rescaling (out = sum exp(m_s - M) acc_s / sum exp(m_s - M) l_s), so no
 * second kernel runs and the result does not depend on which block
 * finished last. A graph launches the blocks for the longest possible
 * context and those past a row's end return at once. The warp kernel
 * (default) keeps each warp's keys and values in flight together and
 * writes a one-piece row straight to the output; the block kernel is the
 * fallback for heads that are not a multiple of 4 wide. Both are launched
 * as dependent launches: before waiting for the q/k/v product they ask L2
 * for the cache rows earlier steps wrote.
 *
 * Prefill runs a tiled kernel: a block holds 16 queries of one head and
 * walks the keys in tiles of 32 through shared memory with an online
 * softmax, so each key is read once per 16 queries instead of once per
 * query. Shared-memory rows are padded by one float so that the threads of
 * a warp, which read different rows at the same column, hit different
 * banks. Everything is fp32.
 *
 * When llm_cuda_reserve_attention_gemm has reserved room for scores,
 * prefill instead runs on the tensor cores through cuBLAS: per chunk of
 * query rows, all heads in one batched product each (TF32 S = Q K^T over
 * the keys up to the chunk's last query only, a causal softmax kernel,
 * O = P V), several times faster for long prompts at a TF32 rounding of
 * the operands.
 */
#include "cuda_internal.cuh"

#include <math.h>

#define SK_THREADS 128
#define SK_WARPS (SK_THREADS / 32)
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
#pragma unroll 8
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

/* Before the dependent-launch wait: asks L2 for the key and value rows of
 * this piece that earlier steps wrote (positions below the base, read from
 * the register without waiting: a stale base only makes the hint less
 * useful, and a prefetch cannot return stale data). */
__device__ __forceinline__ void attn_prefetch(const float *k, const float *v,
                                              llm_cuda_positions pos, int r, int s,
                                              uint32_t fixed_len, int32_t pieces,
                                              size_t kv_stride, size_t head_off, int32_t hd)
{
    uint32_t base = pos.pos0 + (pos.dpos ? *(const volatile uint32_t *)pos.dpos : 0u);
    uint32_t split_len = llm__attn_piece(base + (uint32_t)r + 1, fixed_len, pieces);
    uint32_t p0 = (uint32_t)s * split_len;
    uint32_t end = min(base, p0 + split_len);
    if (p0 >= end)
        return;
    int lines = (hd * 4 + 127) / 128;
    int total = (int)(end - p0) * lines;
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
        size_t off = (size_t)(p0 + (uint32_t)(i / lines)) * kv_stride + head_off +
                     (size_t)(i % lines) * 32;
        llm__prefetch_l2(k + off);
        llm__prefetch_l2(v + off);
    }
}

/* The end of a split-K block whose piece partial is written: publish it,
 * take a ticket (the classic last-block reduction: every writer fences
 * before the barrier that precedes the atomic), and if this block finished
 * the (row, head) last, merge its `used` pieces into out in piece order and
 * return the counter to zero. Every thread of the block calls it. */
__device__ __forceinline__ void attn_merge_last(const float *__restrict__ part,
                                                float *__restrict__ out,
                                                unsigned *__restrict__ count,
                                                unsigned *ticket, int32_t n_heads, int32_t hd,
                                                int h, int r, uint32_t used)
{
    __threadfence();
    __syncthreads();
    unsigned *slot = count + (size_t)r * n_heads + h;
    if (threadIdx.x == 0)
        *ticket = atomicAdd(slot, 1u);
    __syncthreads();
    if (*ticket != used - 1)
        return;
    __threadfence();
    const float *pr = part + ((size_t)r * n_heads + h) * gridDim.y * (size_t)(hd + 2);
    float mx = -INFINITY;
    for (uint32_t t = 0; t < used; t++)
        mx = fmaxf(mx, __ldcg(pr + (size_t)t * (hd + 2)));
    float *o = out + (size_t)r * n_heads * hd + (size_t)h * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float num = 0.0f, den = 0.0f;
        for (uint32_t t = 0; t < used; t++) {
            const float *ps = pr + (size_t)t * (hd + 2);
            float w = expf(__ldcg(ps) - mx);
            num = fmaf(w, __ldcg(ps + 2 + d), num);
            den = fmaf(w, __ldcg(ps + 1), den);
        }
        o[d] = num / den;
    }
    if (threadIdx.x == 0)
        *slot = 0u;
}

#define SW_WARPS 8

/* The warp kernel (tune.attn_decode = 1): the same pieces, partials and
 * merge as attn_split_kernel, with fewer dependent steps. Each lane holds
 * NV4 float4s of the head (q in registers, no shared staging); a warp takes
 * KPW keys of each group of SW_WARPS * KPW consecutive keys (key = group +
 * warp + SW_WARPS * i) and issues all of their key and value loads at
 * once, reduces each score across the warp with shuffles, and keeps an
 * online softmax (m, l, acc) of its keys; the warps' states are combined
 * once through shared memory in warp order. A row whose context is one
 * piece writes its output directly, with no partial or ticket.
 * Preconditions (checked by the launcher): head_dim a multiple of 4 and
 * at most 128 * NV4, q, k, v 16-byte aligned, q_stride a multiple of 4. */
template <int NV4>
__global__ void __launch_bounds__(SW_WARPS * 32)
attn_warp_kernel(const float *__restrict__ q, const float *__restrict__ k,
                 const float *__restrict__ v, float *__restrict__ part,
                 float *__restrict__ out, unsigned *__restrict__ count,
                 llm_cuda_positions pos, int32_t n_heads, int32_t n_kv_heads, int32_t hd,
                 int32_t q_stride, uint32_t fixed_len, int32_t pieces)
{
    constexpr int KPW = 8 / NV4; /* keys a warp loads at once */
    __shared__ float wm[SW_WARPS], wl[SW_WARPS];
    __shared__ float4 wacc[SW_WARPS][LLM_CUDA_MAX_HEAD_DIM / 4];
    __shared__ unsigned ticket;
    llm__pdl_trigger();
    int h = blockIdx.x, s = blockIdx.y, r = blockIdx.z;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n4 = hd / 4;
    int kvh = h / (n_heads / n_kv_heads);
    size_t kv_stride = (size_t)n_kv_heads * hd;
    attn_prefetch(k, v, pos, r, s, fixed_len, pieces, kv_stride, (size_t)kvh * hd, hd);
    llm__pdl_wait();
    uint32_t len = llm__base_pos(pos) + (uint32_t)r + 1;
    uint32_t split_len = llm__attn_piece(len, fixed_len, pieces);
    uint32_t p0 = (uint32_t)s * split_len;
    if (p0 >= len)
        return;
    int cnt = (int)min(len - p0, split_len);
    const float4 *qr = reinterpret_cast<const float4 *>(q + (size_t)r * q_stride +
                                                        (size_t)h * hd);
    float4 qv[NV4];
    float4 acc[NV4];
#pragma unroll
    for (int t = 0; t < NV4; t++) {
        int i4 = lane + 32 * t;
        qv[t] = i4 < n4 ? qr[i4] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        acc[t] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float qscale = 1.0f / sqrtf((float)hd), m = -INFINITY, l = 0.0f;
    const float *kb = k + (size_t)kvh * hd + (size_t)p0 * kv_stride;
    const float *vb = v + (size_t)kvh * hd + (size_t)p0 * kv_stride;
    for (int g = 0; g < cnt; g += SW_WARPS * KPW) {
        float4 kk[KPW][NV4], vv[KPW][NV4];
#pragma unroll
        for (int i = 0; i < KPW; i++) {
            int key = g + warp + SW_WARPS * i;
#pragma unroll
            for (int t = 0; t < NV4; t++) {
                int i4 = lane + 32 * t;
                bool ok = key < cnt && i4 < n4;
                const float4 *kr = reinterpret_cast<const float4 *>(kb + (size_t)key * kv_stride);
                const float4 *vr = reinterpret_cast<const float4 *>(vb + (size_t)key * kv_stride);
                kk[i][t] = ok ? __ldg(kr + i4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                vv[i][t] = ok ? __ldg(vr + i4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
        float sc[KPW], gm = -INFINITY;
#pragma unroll
        for (int i = 0; i < KPW; i++) {
            float d = 0.0f;
#pragma unroll
            for (int t = 0; t < NV4; t++) {
                d = fmaf(qv[t].x, kk[i][t].x, d);
                d = fmaf(qv[t].y, kk[i][t].y, d);
                d = fmaf(qv[t].z, kk[i][t].z, d);
                d = fmaf(qv[t].w, kk[i][t].w, d);
            }
            d = llm__warp_sum(d);
            sc[i] = g + warp + SW_WARPS * i < cnt ? d * qscale : -INFINITY;
            gm = fmaxf(gm, sc[i]);
        }
        if (gm == -INFINITY)
            continue; /* none of this warp's keys in the group */
        float mnew = fmaxf(m, gm);
        float corr = expf(m - mnew); /* 0 while m is -inf */
        l *= corr;
#pragma unroll
        for (int t = 0; t < NV4; t++) {
            acc[t].x *= corr, acc[t].y *= corr, acc[t].z *= corr, acc[t].w *= corr;
        }
#pragma unroll
        for (int i = 0; i < KPW; i++) {
            float p = expf(sc[i] - mnew); /* 0 for a missing key */
            l += p;
#pragma unroll
            for (int t = 0; t < NV4; t++) {
                acc[t].x = fmaf(p, vv[i][t].x, acc[t].x);
                acc[t].y = fmaf(p, vv[i][t].y, acc[t].y);
                acc[t].z = fmaf(p, vv[i][t].z, acc[t].z);
                acc[t].w = fmaf(p, vv[i][t].w, acc[t].w);
            }
        }
        m = mnew;
    }
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
#pragma unroll
    for (int t = 0; t < NV4; t++)
        if (lane + 32 * t < n4)
            wacc[warp][lane + 32 * t] = acc[t];
    __syncthreads();
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < SW_WARPS; w++)
        mx = fmaxf(mx, wm[w]);
    float den = 0.0f;
#pragma unroll
    for (int w = 0; w < SW_WARPS; w++)
        den = fmaf(wm[w] == -INFINITY ? 0.0f : expf(wm[w] - mx), wl[w], den);
    uint32_t used = (len + split_len - 1) / split_len;
    float *mine = part + (((size_t)r * n_heads + h) * gridDim.y + s) * (size_t)(hd + 2);
    float *o = out + (size_t)r * n_heads * hd + (size_t)h * hd;
    for (int d = threadIdx.x; d < hd; d += SW_WARPS * 32) {
        float num = 0.0f;
#pragma unroll
        for (int w = 0; w < SW_WARPS; w++) {
            const float *wa = reinterpret_cast<const float *>(wacc[w]);
            num = fmaf(wm[w] == -INFINITY ? 0.0f : expf(wm[w] - mx), wa[d], num);
        }
        if (used == 1)
            o[d] = num / den;
        else
            mine[2 + d] = num;
    }
    if (used == 1)
        return;
    if (threadIdx.x == 0) {
        mine[0] = mx;
        mine[1] = den;
    }
    attn_merge_last(part, out, count, &ticket, n_heads, hd, h, r, used);
}

/* One (head, piece, row) of split-K decode attention: the partial softmax
 * of the piece (max m, sum l, weighted values acc) goes to
 * part + ((r*H + h)*gridDim.y + s)*(hd+2) as [m, l, acc...]; the last block
 * of (r, h) to finish (a ticket from count, which it returns to zero) merges
 * the pieces into out:
 *   out = sum_s exp(m_s - M) acc_s / sum_s exp(m_s - M) l_s.
 * The merge reads the pieces in order whichever block is last, so results
 * do not depend on scheduling, and a grid covering the whole reserved
 * context (graph replay) gives the bits of one covering the used pieces.
 * Pieces past the row's length touch nothing. Dynamic shared memory:
 * split_len scores. */
template <bool VEC>
__global__ void __launch_bounds__(SK_THREADS)
attn_split_kernel(const float *__restrict__ q, const float *__restrict__ k,
                  const float *__restrict__ v, float *__restrict__ part,
                  float *__restrict__ out, unsigned *__restrict__ count,
                  llm_cuda_positions pos, int32_t n_heads, int32_t n_kv_heads,
                  int32_t hd, int32_t q_stride, uint32_t fixed_len, int32_t pieces)
{
    extern __shared__ float sc[];
    __shared__ float qs[LLM_CUDA_MAX_HEAD_DIM];
    __shared__ float vsum[SK_WARPS * LLM_CUDA_MAX_HEAD_DIM];
    __shared__ float red[32];
    __shared__ unsigned ticket;
    llm__pdl_trigger();
    int h = blockIdx.x, s = blockIdx.y, r = blockIdx.z;
    int kvh = h / (n_heads / n_kv_heads);
    size_t kv_stride = (size_t)n_kv_heads * hd;
    attn_prefetch(k, v, pos, r, s, fixed_len, pieces, kv_stride, (size_t)kvh * hd, hd);
    llm__pdl_wait();
    uint32_t len = llm__base_pos(pos) + (uint32_t)r + 1; /* positions 0..qp */
    uint32_t split_len = llm__attn_piece(len, fixed_len, pieces);
    uint32_t p0 = (uint32_t)s * split_len;
    if (p0 >= len)
        return;
    uint32_t p1 = min(len, p0 + split_len);
    int cnt = (int)(p1 - p0);
    const float *qr = q + (size_t)r * q_stride + (size_t)h * hd;
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
    float *mine = part + (((size_t)r * n_heads + h) * gridDim.y + s) * (size_t)(hd + 2);
    const float *vb = v + (size_t)kvh * hd + (size_t)p0 * kv_stride;
    if (VEC) {
        /* Each warp takes every SK_WARPS-th key, each lane 4 dimensions
         * (16-byte loads, several keys in flight); the warps' sums are
         * added in a fixed order. */
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n4 = hd / 4;
        float4 a0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), a1 = a0;
#pragma unroll 4
        for (int i = warp; i < cnt; i += SK_WARPS) {
            float pw = sc[i];
            const float4 *vr = reinterpret_cast<const float4 *>(vb + (size_t)i * kv_stride);
            if (lane < n4) {
                float4 t = __ldg(vr + lane);
                a0.x = fmaf(pw, t.x, a0.x), a0.y = fmaf(pw, t.y, a0.y);
                a0.z = fmaf(pw, t.z, a0.z), a0.w = fmaf(pw, t.w, a0.w);
            }
            if (lane + 32 < n4) {
                float4 t = __ldg(vr + lane + 32);
                a1.x = fmaf(pw, t.x, a1.x), a1.y = fmaf(pw, t.y, a1.y);
                a1.z = fmaf(pw, t.z, a1.z), a1.w = fmaf(pw, t.w, a1.w);
            }
        }
        float *ws = vsum + warp * hd;
        if (lane < n4)
            reinterpret_cast<float4 *>(ws)[lane] = a0;
        if (lane + 32 < n4)
            reinterpret_cast<float4 *>(ws)[lane + 32] = a1;
        __syncthreads();
        for (int d = threadIdx.x; d < hd; d += SK_THREADS) {
            float acc = vsum[d];
#pragma unroll
            for (int w = 1; w < SK_WARPS; w++)
                acc += vsum[w * hd + d];
            mine[2 + d] = acc;
        }
    } else {
        for (int d = threadIdx.x; d < hd; d += SK_THREADS) {
            float acc = 0.0f;
#pragma unroll 4
            for (int i = 0; i < cnt; i++)
                acc = fmaf(sc[i], __ldg(vb + (size_t)i * kv_stride + d), acc);
            mine[2 + d] = acc;
        }
    }
    if (threadIdx.x == 0) {
        mine[0] = m;
        mine[1] = l;
    }
    attn_merge_last(part, out, count, &ticket, n_heads, hd, h, r,
                    (len + split_len - 1) / split_len);
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
                  int32_t n_kv_heads, int32_t hd, int32_t q_stride)
{
    extern __shared__ float sm[];
    const int ld = hd + 1;
    float *qs = sm, *kv = sm + TQ * ld, *ps = kv + TK * ld;
    int h = blockIdx.x, q0 = blockIdx.y * TQ, t = threadIdx.x;
    int qi = t >> 3, sub = t & 7; /* the row this thread serves, 8 lanes a row */
    int nq = min(TQ, n - q0);
    uint32_t base = llm__base_pos(pos);
    int kvh = h / (n_heads / n_kv_heads);
    size_t qstride = (size_t)q_stride, ostride = (size_t)n_heads * hd;
    size_t kstride = (size_t)n_kv_heads * hd;
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
    float *o = out + (size_t)(q0 + qi) * ostride + (size_t)h * hd;
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

/* Batch pointers of query chunk ci (rows t0.., keys 0..L-1 with
 * L = pos0 + t0 + rows) for head h: [0] K of its kv head, [1] its query
 * rows, [2] its scores S_h [rows][L] (chunk-local), [3] V, [4] S_h again as
 * the probabilities, [5] its output rows. ptrs [nchunks][6][n_heads]. */
__global__ void attn_ptrs_kernel(const void **ptrs, const float *q, const float *k,
                                 const float *v, float *out, float *s, int32_t n,
                                 int32_t chunk, uint32_t pos0, int32_t n_heads,
                                 int32_t group, int32_t hd, int32_t q_stride,
                                 int32_t kv_stride, int32_t nchunks)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nchunks * n_heads)
        return;
    int ci = i / n_heads, h = i % n_heads, g = h / group;
    int32_t t0 = ci * chunk, rows = min(chunk, n - t0);
    size_t L = (size_t)pos0 + (size_t)t0 + (size_t)rows;
    float *sh = s + (size_t)h * (size_t)rows * L;
    const void **p = ptrs + (size_t)ci * 6 * n_heads + h; /* list j at p[j * n_heads] */
    p[0] = k + (size_t)g * hd;
    p[n_heads] = q + (size_t)t0 * q_stride + (size_t)h * hd;
    p[2 * n_heads] = sh;
    p[3 * n_heads] = v + (size_t)g * hd;
    p[4 * n_heads] = sh;
    p[5 * n_heads] = out + (size_t)t0 * n_heads * hd + (size_t)h * hd;
}

/* Query rows per chunk of the tensor-core path, or 0 when the call does not
 * fit what was reserved or has fewer rows than tune.attn_gemm_min (then
 * the tiled kernel runs). A chunk holds the
 * scores of all heads for its rows against keys 0..pos0+t1-1, so causal
 * chunks skip the keys after their last query; the automatic size gives up
 * to 4 chunks of at least 512 rows (37% of the square skipped at pos0 = 0
 * for 4 chunks; measured on the H200, 2048-token 8B prefill: 4 chunks were
 * faster than 8 or 16, whose extra launches and smaller products cost more
 * than the scores they skip) and keeps short prompts in one. */
static int32_t attn_chunk_rows(const llm_cuda *c, const llm_cuda_attn *a)
{
    if (!c->attn_s || !c->attn_ptrs || a->pos.dpos || a->n_heads > c->attn_ptr_heads ||
        a->n < c->tune.attn_gemm_min)
        return 0;
    size_t L = (size_t)a->pos.pos0 + (size_t)a->n;
    size_t fit = c->attn_s_floats / (L * (size_t)a->n_heads);
    int32_t want = c->tune.attn_chunk;
    if (want <= 0) {
        want = (a->n + 3) / 4;
        want = (want + 15) / 16 * 16;
        want = want < 512 ? 512 : want;
    }
    int32_t rows = (size_t)want < fit ? want : (int32_t)fit;
    if (rows < 1 || (a->n + rows - 1) / rows > LLM_CUDA_ATTN_MAX_CHUNKS)
        return 0;
    return rows;
}

/* Per query chunk, all heads at once (one batched product each, K and V
 * shared within a group through the pointer lists): S = Q K^T, causal
 * softmax, O = P V. fp32 storage, TF32 tensor-core arithmetic with fp32
 * accumulation. The keys past a chunk's last query are never multiplied;
 * inside the chunk the causal mask is applied by the softmax. */
static int attn_gemm(llm_cuda *c, const llm_cuda_attn *a, int32_t chunk)
{
    int32_t hd = a->head_dim, H = a->n_heads, n = a->n;
    int32_t group = H / a->n_kv_heads, kvs = a->n_kv_heads * hd, os = H * hd;
    int32_t qs = a->q_stride ? a->q_stride : os;
    int32_t nchunks = (n + chunk - 1) / chunk;
    const float alpha = 1.0f / sqrtf((float)hd), one = 1.0f, zero = 0.0f;
    unsigned tot = (unsigned)(nchunks * H);
    attn_ptrs_kernel<<<(tot + 127) / 128, 128, 0, c->stream>>>(
        c->attn_ptrs, a->q, a->k, a->v, a->out, c->attn_s, n, chunk, a->pos.pos0, H,
        group, hd, qs, kvs, nchunks);
    LLM_CU_LAUNCHED(c, "attn_ptrs_kernel");
    for (int32_t ci = 0; ci < nchunks; ci++) {
        int32_t t0 = ci * chunk, rows = n - t0 < chunk ? n - t0 : chunk;
        uint32_t L = a->pos.pos0 + (uint32_t)t0 + (uint32_t)rows;
        const void **p = c->attn_ptrs + (size_t)ci * 6 * H;
        LLM_CU_BLAS(c, cublasGemmBatchedEx(
            c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)L, rows, hd, &alpha,
            p, CUDA_R_32F, kvs, p + H, CUDA_R_32F, qs, &zero,
            (void *const *)(p + 2 * H), CUDA_R_32F, (int)L, H,
            CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
        unsigned blocks = (unsigned)(H * rows);
        uint32_t qpos = a->pos.pos0 + (uint32_t)t0;
        if ((size_t)L * sizeof(float) <= 48 * 1024)
            softmax_causal_kernel<true><<<blocks, 256, (size_t)L * sizeof(float), c->stream>>>(
                c->attn_s, rows, L, qpos);
        else
            softmax_causal_kernel<false><<<blocks, 256, 0, c->stream>>>(c->attn_s, rows, L, qpos);
        LLM_CU_LAUNCHED(c, "softmax_causal_kernel");
        LLM_CU_BLAS(c, cublasGemmBatchedEx(
            c->blas, CUBLAS_OP_N, CUBLAS_OP_N, hd, rows, (int)L, &one,
            p + 3 * H, CUDA_R_32F, kvs, p + 4 * H, CUDA_R_32F, (int)L, &zero,
            (void *const *)(p + 5 * H), CUDA_R_32F, os, H,
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
    if (need > c->attn_s_floats) {
        float *s = NULL;
        LLM_CU_TRY(c, cudaSetDevice(c->device));
        LLM_CU_TRY(c, cudaStreamSynchronize(c->stream));
        LLM_CU_TRY(c, cudaMalloc((void **)&s, need * sizeof(float)));
        cudaFree(c->attn_s);
        c->attn_s = s;
        c->attn_s_floats = need;
    }
    return llm__cuda_grow_attn_ptrs(c);
}

/* The split-K cut of a call: the fixed piece length (0 when the length
 * follows each row's context, tune.attn_pieces), the blocks per row and
 * head, and the scores a block keeps in shared memory. */
typedef struct splitk_cut {
    uint32_t fixed_len;
    int32_t pieces;
    int ns;
    size_t smem;
} splitk_cut;

static splitk_cut splitk_plan(const llm_cuda *c, const llm_cuda_attn *a)
{
    splitk_cut k;
    /* With a device base the length is unknown here: cover the context. */
    uint64_t len = a->pos.dpos ? c->max_ctx : (uint64_t)a->pos.pos0 + a->n;
    k.pieces = c->tune.attn_pieces;
    if (k.pieces > 0) {
        uint64_t ns = (len + LLM_CUDA_ATTN_PIECE_MIN - 1) / LLM_CUDA_ATTN_PIECE_MIN;
        k.fixed_len = 0;
        k.ns = (int)(ns < (uint64_t)k.pieces ? ns : (uint64_t)k.pieces);
        k.smem = (size_t)llm__attn_piece(c->max_ctx, 0, k.pieces) * sizeof(float);
    } else {
        k.fixed_len = llm__attn_split_len(c->max_ctx);
        k.ns = (int)((len + k.fixed_len - 1) / k.fixed_len);
        k.smem = (size_t)k.fixed_len * sizeof(float);
    }
    return k;
}

static int check_attn(llm_cuda *c, const llm_cuda_attn *a)
{
    LLM_CU_ARG(c, a && a->q && a->k && a->v && a->out && a->n > 0);
    LLM_CU_ARG(c, a->n_heads > 0 && a->n_kv_heads > 0 &&
                      a->n_heads % a->n_kv_heads == 0);
    LLM_CU_ARG(c, a->head_dim > 0 && a->head_dim <= LLM_CUDA_MAX_HEAD_DIM);
    LLM_CU_ARG(c, a->q_stride == 0 || a->q_stride >= a->n_heads * a->head_dim);
    LLM_CU_ARG(c, a->n_heads <= c->max_heads && c->attn_part && c->attn_count);
    LLM_CU_ARG(c, (uint64_t)a->pos.pos0 + (uint64_t)a->n <= c->max_ctx);
    if (a->n <= LLM_CUDA_ATTN_SPLITK_MAX_N) {
        splitk_cut k = splitk_plan(c, a);
        LLM_CU_ARG(c, (uint64_t)a->n * a->n_heads * (uint64_t)k.ns * (a->head_dim + 2) <=
                          c->attn_part_floats);
    }
    return 0;
}

template <bool VEC>
static cudaError_t launch_split(llm_cuda *c, const llm_cuda_attn *a, const splitk_cut *k)
{
    if (k->smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(attn_split_kernel<VEC>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)k->smem);
        if (e != cudaSuccess)
            return e;
    }
    int32_t qs = a->q_stride ? a->q_stride : a->n_heads * a->head_dim;
    dim3 grid((unsigned)a->n_heads, (unsigned)k->ns, (unsigned)a->n);
    return llm__launch(c, attn_split_kernel<VEC>, grid, dim3(SK_THREADS), k->smem, a->q,
                       a->k, a->v, c->attn_part, a->out, c->attn_count, a->pos, a->n_heads,
                       a->n_kv_heads, a->head_dim, qs, k->fixed_len, k->pieces);
}

template <int NV4>
static cudaError_t launch_warp(llm_cuda *c, const llm_cuda_attn *a, const splitk_cut *k,
                               int32_t qs)
{
    dim3 grid((unsigned)a->n_heads, (unsigned)k->ns, (unsigned)a->n);
    return llm__launch(c, attn_warp_kernel<NV4>, grid, dim3(SW_WARPS * 32), 0, a->q, a->k,
                       a->v, c->attn_part, a->out, c->attn_count, a->pos, a->n_heads,
                       a->n_kv_heads, a->head_dim, qs, k->fixed_len, k->pieces);
}

static int attn_splitk(llm_cuda *c, const llm_cuda_attn *a)
{
    splitk_cut k = splitk_plan(c, a);
    int32_t qs = a->q_stride ? a->q_stride : a->n_heads * a->head_dim;
    int aligned = ((uintptr_t)a->k & 15) == 0 && ((uintptr_t)a->v & 15) == 0;
    if (c->tune.attn_decode == 1 && a->head_dim % 4 == 0 && qs % 4 == 0 && aligned &&
        ((uintptr_t)a->q & 15) == 0) {
        LLM_CU_TRY(c, a->head_dim <= 128 ? launch_warp<1>(c, a, &k, qs)
                                         : launch_warp<2>(c, a, &k, qs));
        LLM_CU_LAUNCHED(c, "attn_warp_kernel");
        return 0;
    }
    bool vec = a->head_dim % 8 == 0 && aligned;
    LLM_CU_TRY(c, vec ? launch_split<true>(c, a, &k) : launch_split<false>(c, a, &k));
    LLM_CU_LAUNCHED(c, "attn_split_kernel");
    return 0;
}

int llm_cuda_attention_rows(llm_cuda *c, const llm_cuda_attn *a)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, a && a->n > 0 && a->n <= LLM_CUDA_ATTN_ROWS_MAX);
    int32_t step = llm__rows_stationary(c, a->n) ? a->n : LLM_CUDA_ATTN_SPLITK_MAX_N;
    int32_t qs = a->q_stride ? a->q_stride : a->n_heads * a->head_dim;
    for (int32_t r0 = 0; r0 < a->n; r0 += step) {
        llm_cuda_attn p = *a;
        p.n = a->n - r0 < step ? a->n - r0 : step;
        p.pos.pos0 += (uint32_t)r0;
        p.q += (size_t)r0 * (size_t)qs;
        p.out += (size_t)r0 * (size_t)a->n_heads * (size_t)a->head_dim;
        int rc = check_attn(c, &p);
        if (rc)
            return rc;
        splitk_cut k = splitk_plan(c, &p);
        LLM_CU_ARG(c, (uint64_t)p.n * p.n_heads * (uint64_t)k.ns * (p.head_dim + 2) <=
                          c->attn_part_floats);
        rc = attn_splitk(c, &p);
        if (rc)
            return rc;
    }
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
        a->head_dim, a->q_stride ? a->q_stride : a->n_heads * a->head_dim);
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
    int32_t chunk = attn_chunk_rows(c, a);
    if (chunk > 0)
        return attn_gemm(c, a, chunk);
    return attn_tiled(c, a);
}
