/* test_engine_generate — llm_generate's stop conditions and determinism.
 *
 * Greedy generation is checked against a loop of llm_prefill/llm_decode
 * and argmax written here; the stop reasons are driven by construction:
 * max_tokens, a stop token equal to the first greedy token (nothing
 * emitted), a callback that stops after two tokens, and a context that
 * fills. Sampled generation with one seed twice gives the same tokens.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phasemark/engine.h"
#include "pm_check.h"
#include "synth.h"

#define V 160

typedef struct sink {
    int32_t toks[64];
    size_t n;
    size_t stop_after; /* 0: never */
} sink;

static int collect(void *user, int32_t tok)
{
    sink *s = user;
    if (s->n < 64)
        s->toks[s->n] = tok;
    s->n++;
    return s->stop_after && s->n >= s->stop_after;
}

static int32_t argmax(const float *x)
{
    int32_t b = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static llm_sampler *sampler(float temp, uint64_t seed)
{
    llm_sampler_params p = LLM_SAMPLER_PARAMS_INIT;
    p.temperature = temp;
    p.top_k = 20;
    p.top_p = 0.95f;
    p.seed = seed;
    llm_sampler *s;
    REQUIRE(llm_sampler_create(&p, V, &s) == 0);
    return s;
}

int main(void)
{
    synth_spec sp = synth_default();
    char path[512];
    synth_path(path, sizeof path, "generate");
    REQUIRE(synth_write(path, &sp) == 0);
    llm_model *m = synth_open(path, 2);
    int32_t prompt[6] = {4, 8, 15, 16, 23, 42};

    /* The expected greedy continuation, by hand. */
    int32_t want[10];
    llm_session *ref = synth_session(m, 64, 16, 1);
    const float *lg;
    REQUIRE(llm_prefill(ref, prompt, 6, 0, &lg) == 0);
    for (int i = 0; i < 10; i++) {
        want[i] = argmax(lg);
        REQUIRE(llm_decode(ref, want[i], &lg) == 0);
    }
    llm_session_free(ref);

    llm_sampler *greedy = sampler(0.0f, 0);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = 10;
    gp.chunk = 4;
    size_t n = 0;
    int why = -1;
    sink out = {{0}, 0, 0};
    llm_session *s = synth_session(m, 64, 16, 2);
    CHECK_INT_EQ(llm_generate(s, greedy, prompt, 6, &gp, collect, &out, &n, &why), 0);
    CHECK_INT_EQ(n, 10);
    CHECK_INT_EQ(out.n, 10);
    CHECK_INT_EQ(why, LLM_STOP_LENGTH);
    for (int i = 0; i < 10; i++)
        CHECK_INT_EQ(out.toks[i], want[i]);
    llm_timings t;
    llm_session_get_timings(s, &t);
    CHECK_U64_EQ(t.prefill_tokens, 6);
    CHECK_U64_EQ(t.decode_tokens, 9); /* the last token is emitted, not fed */

    /* Stop token = the first greedy token: nothing is emitted. */
    llm_session_reset(s);
    int32_t stop = want[0];
    gp.stop_tokens = &stop;
    gp.n_stop_tokens = 1;
    out.n = 0;
    CHECK_INT_EQ(llm_generate(s, greedy, prompt, 6, &gp, collect, &out, &n, &why), 0);
    CHECK_INT_EQ(n, 0);
    CHECK_INT_EQ(out.n, 0);
    CHECK_INT_EQ(why, LLM_STOP_TOKEN);
    gp.stop_tokens = NULL;
    gp.n_stop_tokens = 0;

    /* The callback stops after two tokens. */
    llm_session_reset(s);
    out.n = 0;
    out.stop_after = 2;
    CHECK_INT_EQ(llm_generate(s, greedy, prompt, 6, &gp, collect, &out, &n, &why), 0);
    CHECK_INT_EQ(n, 2);
    CHECK_INT_EQ(why, LLM_STOP_CALLBACK);
    out.stop_after = 0;
    llm_session_free(s);

    /* The context fills: 6 prompt positions + 2 decoded = 8. */
    s = synth_session(m, 8, 8, 3);
    CHECK_INT_EQ(llm_generate(s, greedy, prompt, 6, &gp, NULL, NULL, &n, &why), 0);
    CHECK_INT_EQ(why, LLM_STOP_CONTEXT);
    CHECK_INT_EQ(n, 3);
    CHECK_INT_EQ(llm_session_pos(s), 8);
    llm_session_free(s);

    /* Seeded sampling is reproducible. */
    sink a = {{0}, 0, 0}, b = {{0}, 0, 0};
    llm_sampler *s1 = sampler(0.9f, 77), *s2 = sampler(0.9f, 77);
    s = synth_session(m, 64, 16, 4);
    CHECK_INT_EQ(llm_generate(s, s1, prompt, 6, &gp, collect, &a, NULL, NULL), 0);
    llm_session_reset(s);
    CHECK_INT_EQ(llm_generate(s, s2, prompt, 6, &gp, collect, &b, NULL, NULL), 0);
    CHECK_INT_EQ(a.n, b.n);
    CHECK(memcmp(a.toks, b.toks, a.n * sizeof(int32_t)) == 0);

    /* Bad parameters. */
    gp.max_tokens = 0;
    CHECK_INT_EQ(llm_generate(s, s1, prompt, 6, &gp, NULL, NULL, &n, &why), LLM_EINVAL);
    llm_session_free(s);
    llm_sampler_free(s1);
    llm_sampler_free(s2);
    llm_sampler_free(greedy);
    llm_model_free(m);
    unlink(path);
    return pm_check_result();
}
