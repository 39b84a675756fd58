/* test_engine_batched — the same tokens fed in different shapes give the
 * same logits and the same greedy continuation:
 *   batched:  one prefill of the prompt, then greedy decode;
 *   tokens:   the prompt one token at a time (chunk 1), then greedy decode;
 *   chunked:  the prompt in chunks of 13 (the first through the matrix
 *             product, the rest through the row loop, at shifted positions).
 * All three are fed the same continuation (the batched run's greedy
 * tokens), so every logits row is comparable. For f32-exact types the
 * greedy choices must be identical at every step. For quantized types the
 * shapes legitimately differ by up to the tolerance, and random synthetic
 * logits have top-1 margins as small as 0.05, so a race closer than the
 * two runs' actual disagreement at that step may go either way (and could,
 * under another CPU's rounding); the choices must agree everywhere else.
 * Usage: test_engine_batched TYPE. Tolerance on every logits row: 2e-4 for
 * f32-exact types; 0.1 for quantized types, whose single-token steps round
 * activations to 8 bits while batched steps do not (see test_engine_parity).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phasemark/engine.h"
#include "pm_check.h"
#include "quant.h"
#include "synth.h"

#define N_PROMPT 19
#define N_GEN 8

typedef struct trace {
    float logits[N_GEN + 1][512];
    int32_t tokens[N_GEN];
} trace;

static int32_t argmax(const float *x, int n)
{
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

/* forced: the tokens to feed (NULL: feed this run's own greedy choice). */
static void run(llm_model *m, const int32_t *prompt, int chunk, int vocab,
                const int32_t *forced, trace *t)
{
    llm_session *s = synth_session(m, 64, 32, 1);
    const float *lg = NULL;
    CHECK_INT_EQ(llm_prefill(s, prompt, N_PROMPT, chunk, &lg), 0);
    CHECK_INT_EQ(llm_session_pos(s), N_PROMPT);
    for (int i = 0; i < N_GEN; i++) {
        memcpy(t->logits[i], lg, (size_t)vocab * sizeof(float));
        t->tokens[i] = argmax(lg, vocab);
        CHECK_INT_EQ(llm_decode(s, forced ? forced[i] : t->tokens[i], &lg), 0);
    }
    memcpy(t->logits[N_GEN], lg, (size_t)vocab * sizeof(float));
    llm_session_free(s);
}

/* max |a - b| over row i. */
static double step_diff(const trace *a, const trace *b, int i, int vocab)
{
    double m = 0;
    for (int j = 0; j < vocab; j++) {
        double d = a->logits[i][j] - b->logits[i][j];
        d = d < 0 ? -d : d;
        m = d > m ? d : m;
    }
    return m;
}

/* Best minus second-best logit. */
static double margin(const float *x, int n)
{
    int32_t b = argmax(x, n);
    double second = -1e30;
    for (int i = 0; i < n; i++)
        if (i != b && x[i] > second)
            second = x[i];
    return x[b] - second;
}

static double max_diff(const trace *a, const trace *b, int vocab)
{
    double m = 0;
    for (int i = 0; i <= N_GEN; i++)
        for (int j = 0; j < vocab; j++) {
            double d = a->logits[i][j] - b->logits[i][j];
            d = d < 0 ? -d : d;
            m = d > m ? d : m;
        }
    return m;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s TYPE\n", argv[0]);
        return 2;
    }
    synth_spec sp = synth_default();
    sp.type = sp.embd_type = synth_type(argv[1]);
    char path[512];
    synth_path(path, sizeof path, "batched");
    REQUIRE(synth_write(path, &sp) == 0);
    llm_model *m = synth_open(path, 2);
    int V = sp.hp.vocab;
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++)
        prompt[i] = (i * 53 + 7) % V;
    static trace batched, tokens, chunked;
    run(m, prompt, 0, V, NULL, &batched);
    run(m, prompt, 1, V, batched.tokens, &tokens);
    run(m, prompt, 13, V, batched.tokens, &chunked);
    int quantized = !llm_type_find(NULL, sp.type)->is_float;
    double tol = quantized ? 0.1 : 2e-4;
    double d1 = max_diff(&batched, &tokens, V), d2 = max_diff(&batched, &chunked, V);
    printf("batched vs token-by-token %.3g, batched vs chunked %.3g\n", d1, d2);
    CHECK_NEAR(d1, 0.0, tol);
    /* Quantized types: the decode steps after either prefill round
     * activations to 8 bits, where f32-level differences can flip a
     * rounding, so the same tolerance applies. */
    CHECK_NEAR(d2, 0.0, tol);
    int exact = !quantized;
    const trace *others[2] = {&tokens, &chunked};
    for (int o = 0; o < 2; o++)
        for (int i = 0; i < N_GEN; i++) {
            double race = 2 * step_diff(&batched, others[o], i, V);
            if (!exact && margin(batched.logits[i], V) <= race) {
                printf("step %d: top-1 margin %.3g within the runs' disagreement %.3g\n", i,
                       margin(batched.logits[i], V), race);
                continue;
            }
            CHECK_INT_EQ(batched.tokens[i], others[o]->tokens[i]);
        }
    llm_model_free(m);
    unlink(path);
    return pm_check_result();
}
