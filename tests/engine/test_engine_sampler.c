/* test_engine_sampler — sampling on constructed logits.
 *
 * The logits below are log-probabilities of a known distribution over 8
 * tokens, p = {0.40, 0.25, 0.15, 0.10, 0.05, 0.03, 0.015, 0.005}, so the
 * sets each cut may return are known exactly:
 *   greedy               -> token 0 (lowest id on a tie)
 *   top_k = 3            -> {0, 1, 2}
 *   top_p = 0.70         -> {0, 1, 2} (0.40 + 0.25 = 0.65 < 0.70 <= 0.80)
 *   top_p = 0.64         -> {0, 1}    (0.40 < 0.64 <= 0.65)
 *   top_k = 4, top_p=0.5 -> {0, 1} (0.40/0.90 < 0.5 <= 0.65/0.90)
 * Over many draws every allowed token appears, nothing else does, and the
 * frequencies follow the renormalized probabilities (loose 5-sigma bounds,
 * so the test is deterministic for its fixed seed and not flaky by
 * construction). The same seed gives the same sequence; reseed restarts.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "phasemark/engine.h"
#include "pm_check.h"

#define NV 8
#define DRAWS 20000

static const double probs[NV] = {0.40, 0.25, 0.15, 0.10, 0.05, 0.03, 0.015, 0.005};

static llm_sampler *make(float temp, int32_t k, float p, uint64_t seed)
{
    llm_sampler_params sp = LLM_SAMPLER_PARAMS_INIT;
    sp.temperature = temp;
    sp.top_k = k;
    sp.top_p = p;
    sp.seed = seed;
    llm_sampler *s = NULL;
    REQUIRE(llm_sampler_create(&sp, NV, &s) == 0 && s);
    return s;
}

/* Draws DRAWS tokens; checks the support is exactly `allowed` (a bit set)
 * and the frequencies match probs renormalized over it. */
static void check_support(llm_sampler *s, const float *logits, unsigned allowed)
{
    long count[NV] = {0};
    for (int i = 0; i < DRAWS; i++) {
        int32_t t = llm_sample(s, logits);
        REQUIRE(t >= 0 && t < NV);
        count[t]++;
    }
    double mass = 0;
    for (int i = 0; i < NV; i++)
        if (allowed >> i & 1)
            mass += probs[i];
    for (int i = 0; i < NV; i++) {
        if (!(allowed >> i & 1)) {
            CHECK_INT_EQ(count[i], 0);
            continue;
        }
        double p = probs[i] / mass, want = p * DRAWS, sd = sqrt(DRAWS * p * (1 - p));
        CHECK(count[i] > 0);
        CHECK_NEAR((double)count[i], want, 5 * sd + 1);
    }
}

int main(void)
{
    float logits[NV];
    for (int i = 0; i < NV; i++)
        logits[i] = (float)log(probs[i]) + 3.0f; /* shift: softmax ignores it */

    llm_sampler *g = make(0.0f, 0, 1.0f, 1);
    CHECK_INT_EQ(llm_sample(g, logits), 0);
    float tie[NV] = {1, 5, 2, 5, 0, 0, 0, 5};
    CHECK_INT_EQ(llm_sample(g, tie), 1);
    llm_sampler_free(g);

    llm_sampler *full = make(1.0f, 0, 1.0f, 42);
    check_support(full, logits, 0xff);
    llm_sampler_free(full);

    llm_sampler *k3 = make(1.0f, 3, 1.0f, 43);
    check_support(k3, logits, 0x07);
    llm_sampler_free(k3);

    llm_sampler *p70 = make(1.0f, 0, 0.70f, 44);
    check_support(p70, logits, 0x07);
    llm_sampler_free(p70);

    llm_sampler *p64 = make(1.0f, 0, 0.64f, 45);
    check_support(p64, logits, 0x03);
    llm_sampler_free(p64);

    llm_sampler *kp = make(1.0f, 4, 0.5f, 46);
    check_support(kp, logits, 0x03);
    llm_sampler_free(kp);

    /* Temperature 0.5 squares the odds: p_i^2 / sum p^2 for token 0 is
     * 0.16 / 0.2532..., so it must dominate clearly more than at T = 1. */
    llm_sampler *cold = make(0.5f, 0, 1.0f, 47);
    long zero = 0;
    for (int i = 0; i < DRAWS; i++)
        zero += llm_sample(cold, logits) == 0;
    double sq = 0;
    for (int i = 0; i < NV; i++)
        sq += probs[i] * probs[i];
    double p0 = 0.16 / sq;
    CHECK_NEAR((double)zero, p0 * DRAWS, 5 * sqrt(DRAWS * p0 * (1 - p0)) + 1);
    llm_sampler_free(cold);

    /* Determinism: same seed, same sequence; reseed restarts it. */
    llm_sampler *a = make(0.8f, 5, 0.9f, 7), *b = make(0.8f, 5, 0.9f, 7);
    int32_t first[64];
    int same = 1;
    for (int i = 0; i < 64; i++) {
        first[i] = llm_sample(a, logits);
        same &= first[i] == llm_sample(b, logits);
    }
    CHECK(same);
    llm_sampler_reseed(a, 7);
    same = 1;
    for (int i = 0; i < 64; i++)
        same &= first[i] == llm_sample(a, logits);
    CHECK(same);
    llm_sampler *c = make(0.8f, 5, 0.9f, 8);
    int differ = 0;
    for (int i = 0; i < 64; i++)
        differ |= first[i] != llm_sample(c, logits);
    CHECK(differ);
    llm_sampler_free(a);
    llm_sampler_free(b);
    llm_sampler_free(c);

    /* Bad arguments. */
    llm_sampler *bad = (llm_sampler *)1;
    CHECK_INT_EQ(llm_sampler_create(NULL, 0, &bad), LLM_EINVAL);
    CHECK(bad == NULL);
    llm_sampler_params badp = LLM_SAMPLER_PARAMS_INIT;
    badp.temperature = NAN;
    CHECK_INT_EQ(llm_sampler_create(&badp, NV, &bad), LLM_EINVAL);
    CHECK_INT_EQ(llm_sample(NULL, logits), LLM_EINVAL);
    llm_sampler_free(NULL);
    return pm_check_result();
}
