/* cuda_loop.cu — the device loop's own kernels (cuda_loop.h): the token a
 * plain step feeds back, a speculative round's greedy acceptance and its
 * bookkeeping, and the ordering of one context's stream after another's.
 *
 * Every kernel here runs as one thread: each touches a handful of ints
 * (k <= LLM_CUDA_LOOP_K_MAX), and a launch inside a graph costs the same
 * whatever its width. What they keep on the device is what a host round
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
    LLM_CU_ARG(c, k >= 1 && k <= LLM_CUDA_LOOP_K_MAX);
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
