/* argmax.h — the greedy rule, written once.
 *
 * The index of the first maximum of x[0..n): the scan keeps index 0 until
 * a later value compares strictly greater, so the lowest index wins ties, a
 * NaN never wins after index 0, and a NaN at index 0 wins outright (nothing
 * compares greater than it). The host sampler's greedy draw (sampler.c),
 * the runner's host fallback (runner.c) and every backend's optional
 * argmax op (backend.h) follow exactly this rule, so a greedy token is the
 * same wherever it is taken. Pure; n >= 1.
 */
#ifndef LLM_ARGMAX_H
#define LLM_ARGMAX_H

#include <stdint.h>

static inline int32_t llm_argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

#endif
