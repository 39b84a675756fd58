/* cuda_loop.cu — the device loop's own kernels (cuda_loop.h): the token a
 * plain step feeds back, a speculative round's greedy acceptance and its
 * bookkeeping, and the ordering of one context's stream after another's.
 *
 * The bookkeeping kernels run as one thread: each touches a handful of
 * ints (k <= LLM_CUDA_LOOP_K_MAX), and a launch inside a graph costs the
 * same whatever its width. The sampling kernels read whole rows of logits
 * and use a block a row. What they keep on the device is what a host round
 * trip would otherwise carry: the next token, the accepted count, both
 * models' positions (their contexts' registers) and the committed ids,
 * which the host reads back once per batch of steps or rounds.
 */
#include "cuda_internal.cuh"
#include "cuda_loop.h"

#include <stdlib.h>

/* One plain step's bookkeeping: the step's greedy token (tok, which the
 * next step embeds) is appended to the ring, and the position moves on. */
__global__ void loop_commit1_kernel(const int32_t *tok, int32_t *ring, uint32_t cap,
                                    uint32_t *count, uint32_t *pos)
{
    uint32_t i = *count;
    ring[i % cap] = *tok;
    *count = i + 1;
    *pos += 1;
}

int llm_cuda_loop_commit1(llm_cuda *c, const int32_t *tok, int32_t *ring, uint32_t cap,
                          uint32_t *count)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, tok && ring && cap > 0 && count);
    loop_commit1_kernel<<<1, 1, 0, c->stream>>>(tok, ring, cap, count, c->d_pos);
    LLM_CU_LAUNCHED(c, "loop_commit1_kernel");
    return 0;
}

/* A greedy round's acceptance (cuda_loop.h, llm_cuda_loop_accept). vin
 * holds what the verify fed: the last committed token, then the k drafted
 * ids; g the target's greedy id after each of those rows. */
__global__ void loop_accept_kernel(const int32_t *g, int32_t *vin, int32_t *din, int32_t k,
                                   uint32_t *tpos, uint32_t *dpos, int32_t *rec,
                                   uint32_t rec_cap, uint32_t *round)
{
    int32_t a = 0;
    while (a < k && vin[a + 1] == g[a])
        a++;
    int32_t next = g[a];
    int32_t *r = rec + (size_t)(*round % rec_cap) * LLM_CUDA_LOOP_REC;
    r[0] = a + 1;
    for (int32_t i = 0; i < a; i++)
        r[1 + i] = vin[1 + i];
    r[1 + a] = next;
    /* The next round's draft re-feeds the token before `next` (din[0], at
     * the draft's position P' - 1: a row it may hold already, written
     * again with the same bits) and then `next` itself. */
    din[0] = vin[a];
    din[1] = next;
    vin[0] = next;
    uint32_t p = *tpos + (uint32_t)a + 1u;
    *tpos = p;
    *dpos = p - 1u;
    *round += 1u;
}

int llm_cuda_loop_accept(llm_cuda *c, const int32_t *g, int32_t *vin, int32_t *din, int32_t k,
                         uint32_t *draft_pos, int32_t *rec, uint32_t rec_cap, uint32_t *round)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, g && vin && din && draft_pos && rec && round && rec_cap > 0);
    LLM_CU_ARG(c, k >= 0 && k <= LLM_CUDA_LOOP_K_MAX);
    loop_accept_kernel<<<1, 1, 0, c->stream>>>(g, vin, din, k, c->d_pos, draft_pos, rec,
                                               rec_cap, round);
    LLM_CU_LAUNCHED(c, "loop_accept_kernel");
    return 0;
}

uint32_t *llm_cuda_loop_pos(llm_cuda *c)
{
    return c ? c->d_pos : NULL;
}

struct llm_cuda_xevent {
    cudaEvent_t ev;
};

int llm_cuda_xevent_create(llm_cuda *c, llm_cuda_xevent **out)
{
    if (!out)
        return LLM_EINVAL;
    *out = NULL;
    LLM_CU_ENTER(c);
    llm_cuda_xevent *x = (llm_cuda_xevent *)calloc(1, sizeof *x);
    if (!x)
        return LLM_ENOMEM;
    cudaError_t e = cudaEventCreateWithFlags(&x->ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        free(x);
        return llm__cuda_rt_fail(c, e, "cudaEventCreateWithFlags");
    }
    *out = x;
    return 0;
}

void llm_cuda_xevent_free(llm_cuda_xevent *x)
{
    if (!x)
        return;
    cudaEventDestroy(x->ev);
    free(x);
}

int llm_cuda_xwait(llm_cuda *waiter, llm_cuda *signaler, llm_cuda_xevent *x)
{
    LLM_CU_ENTER(waiter);
    LLM_CU_ENTER(signaler);
    LLM_CU_ARG(waiter, x && !waiter->capturing && !signaler->capturing);
    LLM_CU_TRY(signaler, cudaEventRecord(x->ev, signaler->stream));
    LLM_CU_TRY(waiter, cudaStreamWaitEvent(waiter->stream, x->ev, 0));
    return 0;
}

/* ---- sampling ------------------------------------------------------------- */

/* The counter-th uniform of a seed, in [0, 1) with 24 bits: splitmix64
 * of seed + counter * golden ratio (a counter-based stream: the draws of a
 * generation depend on its seed and their order only). */
__device__ __forceinline__ float loop_uniform(uint64_t seed, uint64_t counter)
{
    uint64_t z = seed + (counter + 1u) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

__global__ void loop_rng_kernel(uint64_t *rng, float *u)
{
    *u = loop_uniform(rng[0], rng[1]);
    rng[1] += 1u;
}

int llm_cuda_loop_rng(llm_cuda *c, uint64_t *rng, float *u)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, rng && u);
    loop_rng_kernel<<<1, 1, 0, c->stream>>>(rng, u);
    LLM_CU_LAUNCHED(c, "loop_rng_kernel");
    return 0;
}

#define LOOP_THREADS 1024

/* A softmax's running pair: the largest logit m and z = the sum of
 * exp((x - m) / T) over what it has seen; _merge folds in another pair
 * (the same sum in either order: a + b is b + a). */
__device__ __forceinline__ void loop_stats_merge(float &m, float &z, float m2, float z2,
                                                 float inv_t)
{
    if (m2 > m) {
        z = z * expf((m - m2) * inv_t) + z2;
        m = m2;
    } else if (m2 > -INFINITY) {
        z += z2 * expf((m2 - m) * inv_t);
    }
}

/* The largest logit of a row and the sum of exp((x - max) / T) over it, in
 * one pass: each thread keeps its pair, the warps merge theirs, then every
 * thread merges the warps' pairs in warp order, so all get the same bits.
 * `red` is __shared__ float[64]. */
__device__ void loop_softmax_stats(const float *row, int32_t vocab, float inv_t, float *red,
                                   float *m_out, float *z_out)
{
    float m = -INFINITY, z = 0.0f;
    for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) {
        float x = row[i];
        if (x > m) {
            z = z * expf((m - x) * inv_t) + 1.0f;
            m = x;
        } else if (m > -INFINITY) {
            z += expf((x - m) * inv_t);
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), z2 = __shfl_xor_sync(0xffffffffu, z, o);
        loop_stats_merge(m, z, m2, z2, inv_t);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (int)(blockDim.x >> 5);
    __syncthreads(); /* red may still be read by a previous call */
    if (lane == 0) {
        red[warp] = m;
        red[32 + warp] = z;
    }
    __syncthreads();
    m = red[0];
    z = red[32];
    for (int w = 1; w < nw; w++)
        loop_stats_merge(m, z, red[w], red[32 + w], inv_t);
    *m_out = m;
    *z_out = z;
}

/* Draws from the unnormalized weights w(j) (j < vocab) with the uniform u:
 * the first index whose running sum, in index order, exceeds u * total.
 * Every thread of the block calls it; every thread gets the answer. A
 * thread takes a contiguous chunk; the chunks' bounds come from one scan
 * (warp shuffles, then the warps' totals summed in order by every thread),
 * so a chunk's end is, bit for bit, the next chunk's start and exactly one
 * chunk holds the target. `red` is __shared__ float[64]. */
template <typename W>
__device__ int32_t loop_draw(W w, int32_t vocab, float u, float *red, int *pick)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (int)(blockDim.x >> 5);
    int32_t per = (vocab + (int32_t)blockDim.x - 1) / (int32_t)blockDim.x;
    int32_t lo = (int32_t)threadIdx.x * per, hi = lo + per < vocab ? lo + per : vocab;
    float s = 0.0f;
    for (int32_t j = lo; j < hi; j++)
        s += w(j);
    float incl = s;
    for (int o = 1; o < 32; o <<= 1) {
        float n = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o)
            incl += n;
    }
    float excl = __shfl_up_sync(0xffffffffu, incl, 1);
    if (lane == 0)
        excl = 0.0f;
    __syncthreads(); /* red may still be read by a previous call */
    if (lane == 31)
        red[warp] = incl;
    if (threadIdx.x == 0)
        *pick = -1;
    __syncthreads();
    float before = 0.0f, total = 0.0f;
    for (int i = 0; i < nw; i++) {
        if (i == warp)
            before = total;
        total += red[i];
    }
    float target = u * total, acc = before + excl, end = before + incl;
    if (lo < hi && acc <= target && target < end) {
        int32_t j = lo;
        for (; j < hi - 1; j++) {
            acc += w(j);
            if (target < acc)
                break;
        }
        atomicMax(pick, j);
    }
    __syncthreads();
    int32_t r = *pick;
    if (r < 0) { /* rounding left the target at the total: the last weighted index */
        __syncthreads();
        if (threadIdx.x == 0)
            for (int32_t j = vocab - 1; j >= 0; j--)
                if (w(j) > 0.0f) {
                    *pick = j;
                    break;
                }
        __syncthreads();
        r = *pick < 0 ? 0 : *pick;
    }
    __syncthreads();
    return r;
}

/* A sampled round's acceptance (standard speculative sampling). Block b
 * takes the softmax pair of one row (b <= k: the target's row b, else the
 * draft's row b - k - 1) into stats; the last block to finish, by the
 * ticket, then runs the round's tests in order on those pairs, draws the
 * next id, does the bookkeeping and resets the ticket for the next launch.
 * dlog NULL: deterministic proposals (q one-hot at d, only the target's
 * k + 1 rows): d is kept when u < p(d), the residual is p without d. */
__global__ void __launch_bounds__(LOOP_THREADS)
loop_accept_sampled_kernel(const float *tlog, const float *dlog, int32_t vocab, float inv_t,
                           uint64_t *rng, int32_t *vin, int32_t *din, int32_t k,
                           uint32_t *tpos, uint32_t *dpos, int32_t *rec, uint32_t rec_cap,
                           uint32_t *round, float *stats, uint32_t *ticket)
{
    __shared__ float red[64];
    __shared__ int pick;
    __shared__ bool last;
    int32_t b = (int32_t)blockIdx.x;
    const float *row = b <= k ? tlog + (size_t)b * vocab : dlog + (size_t)(b - k - 1) * vocab;
    bool onehot = dlog == nullptr;
    float m, z;
    loop_softmax_stats(row, vocab, inv_t, red, &m, &z);
    if (threadIdx.x == 0) {
        stats[2 * b] = m;
        stats[2 * b + 1] = z;
        __threadfence(); /* the pair is seen before the ticket that counts it */
        last = atomicAdd(ticket, 1u) == gridDim.x - 1u;
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    const volatile float *st = stats;
    uint64_t seed = rng[0], ctr = rng[1];
    int32_t a = 0, next = 0;
    bool done = false;
    for (; a < k && !done; a++) {
        const float *pr = tlog + (size_t)a * vocab;
        const float *qr = onehot ? nullptr : dlog + (size_t)a * vocab;
        float mp = st[2 * a], zp = st[2 * a + 1];
        float mq = onehot ? 0.0f : st[2 * (k + 1 + a)], zq = onehot ? 1.0f : st[2 * (k + 1 + a) + 1];
        int32_t d = vin[a + 1];
        float p_d = expf((pr[d] - mp) * inv_t) / zp;
        float q_d = onehot ? 1.0f : expf((qr[d] - mq) * inv_t) / zq;
        float u = loop_uniform(seed, ctr++);
        if (u * q_d < p_d)
            continue; /* accepted with probability min(1, p/q) */
        float u2 = loop_uniform(seed, ctr++);
        auto resid = [&](int32_t j) {
            float q_j = onehot ? (j == d ? 1.0f : 0.0f) : expf((qr[j] - mq) * inv_t) / zq;
            float r = expf((pr[j] - mp) * inv_t) / zp - q_j;
            return r > 0.0f ? r : 0.0f;
        };
        next = loop_draw(resid, vocab, u2, red, &pick);
        done = true;
        break;
    }
    if (!done) { /* every draft accepted: the bonus token from p of row k */
        const float *pr = tlog + (size_t)k * vocab;
        float mp = st[2 * k];
        float u = loop_uniform(seed, ctr++);
        auto pw = [&](int32_t j) { return expf((pr[j] - mp) * inv_t); };
        next = loop_draw(pw, vocab, u, red, &pick);
        a = k;
    }
    if (threadIdx.x != 0)
        return;
    *ticket = 0u;
    rng[1] = ctr;
    int32_t *r = rec + (size_t)(*round % rec_cap) * LLM_CUDA_LOOP_REC;
    r[0] = a + 1;
    for (int32_t i = 0; i < a; i++)
        r[1 + i] = vin[1 + i];
    r[1 + a] = next;
    din[0] = vin[a];
    din[1] = next;
    vin[0] = next;
    uint32_t p = *tpos + (uint32_t)a + 1u;
    *tpos = p;
    *dpos = p - 1u;
    *round += 1u;
}

int llm_cuda_loop_accept_sampled(llm_cuda *c, const float *tlog, const float *dlog,
                                 int32_t vocab, float temperature, uint64_t *rng, int32_t *vin,
                                 int32_t *din, int32_t k, uint32_t *draft_pos, int32_t *rec,
                                 uint32_t rec_cap, uint32_t *round, float *scratch)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, tlog && rng && vin && din && draft_pos && rec && round && rec_cap > 0 &&
                      scratch);
    LLM_CU_ARG(c, k >= (dlog ? 1 : 0) && k <= LLM_CUDA_LOOP_K_MAX && vocab > 0 &&
                      temperature > 0.0f);
    loop_accept_sampled_kernel<<<(unsigned)(dlog ? 2 * k + 1 : k + 1), LOOP_THREADS, 0,
                                 c->stream>>>(
        tlog, dlog, vocab, 1.0f / temperature, rng, vin, din, k, c->d_pos, draft_pos, rec,
        rec_cap, round, scratch, (uint32_t *)(void *)(scratch + LLM_CUDA_LOOP_ACCEPT_PAIRS));
    LLM_CU_LAUNCHED(c, "loop_accept_sampled_kernel");
    return 0;
}

/* Row r of logits [rows][vocab] drawn from softmax(row / T) with the
 * (counter + r)-th uniform of the generator: one block a row, the rows at
 * once (the block drafter's proposals, independent given the context). */
__global__ void __launch_bounds__(LOOP_THREADS)
loop_draw_rows_kernel(const float *logits, int32_t vocab, float inv_t, const uint64_t *rng,
                      int32_t *out)
{
    __shared__ float red[64];
    __shared__ int pick;
    const float *row = logits + (size_t)blockIdx.x * vocab;
    float m, z;
    loop_softmax_stats(row, vocab, inv_t, red, &m, &z);
    float u = loop_uniform(rng[0], rng[1] + blockIdx.x);
    auto w = [&](int32_t j) { return expf((row[j] - m) * inv_t); };
    int32_t t = loop_draw(w, vocab, u, red, &pick);
    if (threadIdx.x == 0)
        out[blockIdx.x] = t;
}

/* The generator's counter past the draws of loop_draw_rows_kernel (a
 * kernel of its own: every row's block reads the counter first). */
__global__ void loop_rng_skip_kernel(uint64_t *rng, uint32_t n)
{
    rng[1] += n;
}

int llm_cuda_loop_draw_rows(llm_cuda *c, const float *logits, int32_t rows, int32_t vocab,
                            float temperature, uint64_t *rng, int32_t *out)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, logits && rng && out && rows >= 1 && vocab > 0 && temperature > 0.0f);
    loop_draw_rows_kernel<<<(unsigned)rows, LOOP_THREADS, 0, c->stream>>>(
        logits, vocab, 1.0f / temperature, rng, out);
    LLM_CU_LAUNCHED(c, "loop_draw_rows_kernel");
    loop_rng_skip_kernel<<<1, 1, 0, c->stream>>>(rng, (uint32_t)rows);
    LLM_CU_LAUNCHED(c, "loop_rng_skip_kernel");
    return 0;
}

/* ---- n-gram rounds on the device ------------------------------------------ */

#define NGRAM_THREADS 256

/* The n-gram rule of spec.h (pm__ngram_lookup) over the device history
 * hist[0..P] (hist[P] the last committed token, P the target's register):
 * the longest suffix of nmax down to nmin tokens that occurred before, its
 * most recent occurrence, proposes the tokens that followed it (at most
 * k, never past the history). vin[1..n] get them, vin[n+1..k] the last
 * token (rows the acceptance never reads past *keff = n). */
__global__ void __launch_bounds__(NGRAM_THREADS)
loop_ngram_lookup_kernel(const int32_t *hist, const uint32_t *tpos, int32_t nmin, int32_t nmax,
                         int32_t k, int32_t *vin, int32_t *keff)
{
    __shared__ int best;
    int64_t n_hist = (int64_t)*tpos + 1;
    for (int32_t m = nmax; m >= nmin && m >= 1; m--) {
        if ((int64_t)m >= n_hist)
            continue;
        int64_t suf = n_hist - m;
        if (threadIdx.x == 0)
            best = -1;
        __syncthreads();
        for (int64_t j = threadIdx.x; j < suf; j += blockDim.x) {
            bool eq = true;
            for (int32_t i = 0; i < m && eq; i++)
                eq = hist[j + i] == hist[suf + i];
            if (eq)
                atomicMax(&best, (int)j);
        }
        __syncthreads();
        int b = best;
        __syncthreads();
        if (b >= 0) {
            int64_t c = b + m, avail = n_hist - c;
            int32_t n = (int32_t)(avail < k ? avail : k);
            for (int32_t i = threadIdx.x; i < k; i += blockDim.x)
                vin[1 + i] = i < n ? hist[c + i] : hist[n_hist - 1];
            if (threadIdx.x == 0)
                *keff = n;
            return;
        }
    }
    __syncthreads();
    for (int32_t i = threadIdx.x; i < k; i += blockDim.x)
        vin[1 + i] = hist[n_hist - 1];
    if (threadIdx.x == 0)
        *keff = 0; /* no match: the round commits one token */
}

int llm_cuda_loop_ngram_lookup(llm_cuda *c, const int32_t *hist, int32_t nmin, int32_t nmax,
                               int32_t k, int32_t *vin, int32_t *keff)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, hist && vin && keff && k >= 1 && k <= LLM_CUDA_LOOP_K_MAX);
    LLM_CU_ARG(c, nmin >= 1 && nmin <= nmax);
    loop_ngram_lookup_kernel<<<1, NGRAM_THREADS, 0, c->stream>>>(hist, c->d_pos, nmin, nmax, k,
                                                                vin, keff);
    LLM_CU_LAUNCHED(c, "loop_ngram_lookup_kernel");
    return 0;
}

/* The greedy acceptance of a device n-gram round: as loop_accept_kernel
 * over the first *keff drafted rows, the committed ids also appended to
 * the history, and the proposal's length kept in the record. */
__global__ void loop_accept_ngram_kernel(const int32_t *g, int32_t *vin, const int32_t *keff,
                                         int32_t *hist, uint32_t *tpos, int32_t *rec,
                                         uint32_t rec_cap, uint32_t *round)
{
    int32_t k = *keff, a = 0;
    while (a < k && vin[a + 1] == g[a])
        a++;
    int32_t next = g[a];
    uint32_t p = *tpos;
    int32_t *r = rec + (size_t)(*round % rec_cap) * LLM_CUDA_LOOP_REC;
    r[0] = a + 1;
    for (int32_t i = 0; i < a; i++) {
        r[1 + i] = vin[1 + i];
        hist[p + 1u + (uint32_t)i] = vin[1 + i];
    }
    r[1 + a] = next;
    r[LLM_CUDA_LOOP_REC - 1] = k;
    hist[p + 1u + (uint32_t)a] = next;
    vin[0] = next;
    *tpos = p + (uint32_t)a + 1u;
    *round += 1u;
}

int llm_cuda_loop_accept_ngram(llm_cuda *c, const int32_t *g, int32_t *vin, const int32_t *keff,
                               int32_t *hist, int32_t *rec, uint32_t rec_cap, uint32_t *round)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, g && vin && keff && hist && rec && round && rec_cap > 0);
    loop_accept_ngram_kernel<<<1, 1, 0, c->stream>>>(g, vin, keff, hist, c->d_pos, rec, rec_cap,
                                                    round);
    LLM_CU_LAUNCHED(c, "loop_accept_ngram_kernel");
    return 0;
}
