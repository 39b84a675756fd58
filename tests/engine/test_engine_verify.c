/* test_engine_verify — llm_verify's k rows equal k single decode steps
 * (bit for bit, at every width up to 17 and for every weight class: a
 * verify never takes the batched product that rounds differently, or
 * greedy speculative decoding would flip near-ties),
 * llm_session_truncate rolls back so the same tokens give the same rows
 * again, and different tokens after a rollback see none of the forgotten
 * ones (equal to a fresh session fed the same history).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phasemark/engine.h"
#include "pm_check.h"
#include "quant.h"
#include "synth.h"

#define K 5
#define V 160

static double diff(const float *a, const float *b, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++) {
        double d = a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];
        m = d > m ? d : m;
    }
    return m;
}

/* A verify of 17 rows (k 16, past both batched-product thresholds) over
 * weights of `type`: each row's logits are exactly the decode step's. */
static void verify_rows_bitwise(uint32_t type, const char *tag)
{
    enum { W = 17, P = 6 };
    synth_spec sp = synth_default();
    sp.type = type;
    char path[512];
    synth_path(path, sizeof path, tag);
    REQUIRE(synth_write(path, &sp) == 0);
    llm_model *m = synth_open(path, 2);
    int32_t prompt[P], draft[W];
    for (int i = 0; i < P; i++)
        prompt[i] = (i * 17 + 4) % V;
    for (int i = 0; i < W; i++)
        draft[i] = (i * 53 + 11) % V;
    llm_session *a = synth_session(m, 64, 32, 1), *b = synth_session(m, 64, 32, 2);
    static float rows[W][V];
    const float *lg;
    CHECK_INT_EQ(llm_prefill(a, prompt, P, 0, NULL), 0);
    CHECK_INT_EQ(llm_prefill(b, prompt, P, 0, NULL), 0);
    CHECK_INT_EQ(llm_verify(a, draft, W, &lg), 0);
    memcpy(rows, lg, sizeof rows);
    int differ = 0;
    for (int i = 0; i < W; i++) {
        CHECK_INT_EQ(llm_decode(b, draft[i], &lg), 0);
        if (memcmp(rows[i], lg, sizeof rows[i]) != 0) {
            fprintf(stderr, "%s: verify row %d of %d is not the decode step's bits\n", tag, i,
                    W);
            differ++;
        }
    }
    CHECK_INT_EQ(differ, 0);
    llm_session_free(a);
    llm_session_free(b);
    llm_model_free(m);
    unlink(path);
}

int main(void)
{
    verify_rows_bitwise(LLM_TYPE_F32, "verify-f32");
    verify_rows_bitwise(LLM_TYPE_F16, "verify-f16");
    verify_rows_bitwise(LLM_TYPE_Q8_0, "verify-q8_0");
    verify_rows_bitwise(LLM_TYPE_Q4_0, "verify-q4_0");

    synth_spec sp = synth_default();
    char path[512];
    synth_path(path, sizeof path, "verify");
    REQUIRE(synth_write(path, &sp) == 0);
    llm_model *m = synth_open(path, 2);
    int32_t prompt[10], draft[K] = {3, 141, 59, 26, 5}, other[K] = {8, 9, 7, 9, 3};
    for (int i = 0; i < 10; i++)
        prompt[i] = (i * 31 + 1) % V;

    llm_session *a = synth_session(m, 64, 16, 1), *b = synth_session(m, 64, 16, 2);
    static float rows[K][V], step[K][V];
    const float *lg;
    CHECK_INT_EQ(llm_prefill(a, prompt, 10, 0, NULL), 0);
    CHECK_INT_EQ(llm_prefill(b, prompt, 10, 0, NULL), 0);
    CHECK_INT_EQ(llm_verify(a, draft, K, &lg), 0);
    memcpy(rows, lg, sizeof rows);
    CHECK_INT_EQ(llm_session_pos(a), 10 + K);
    for (int i = 0; i < K; i++) {
        CHECK_INT_EQ(llm_decode(b, draft[i], &lg), 0);
        memcpy(step[i], lg, sizeof step[i]);
        CHECK_NEAR(diff(rows[i], step[i], V), 0.0, 1e-4);
    }

    /* Accept two drafted tokens, roll back the rest, verify again. */
    CHECK_INT_EQ(llm_session_truncate(a, 12), 0);
    CHECK_INT_EQ(llm_session_pos(a), 12);
    CHECK_INT_EQ(llm_verify(a, draft + 2, K - 2, &lg), 0);
    for (int i = 0; i < K - 2; i++)
        CHECK_NEAR(diff(lg + (size_t)i * V, step[i + 2], V), 0.0, 1e-4);

    /* Different continuation after rollback == fresh history. */
    CHECK_INT_EQ(llm_session_truncate(a, 10), 0);
    CHECK_INT_EQ(llm_verify(a, other, K, &lg), 0);
    llm_session *c = synth_session(m, 64, 16, 3);
    int32_t hist[10 + K];
    memcpy(hist, prompt, sizeof prompt);
    memcpy(hist + 10, other, sizeof other);
    const float *lc;
    CHECK_INT_EQ(llm_prefill(c, hist, 10 + K, 0, &lc), 0);
    CHECK_NEAR(diff(lg + (size_t)(K - 1) * V, lc, V), 0.0, 1e-4);

    /* Truncating forward is refused and changes nothing. */
    CHECK_INT_EQ(llm_session_truncate(a, 16), LLM_EINVAL);
    CHECK_INT_EQ(llm_session_pos(a), 15);
    CHECK(strlen(llm_session_error(a)) > 0);
    /* A verify wider than the batch is refused. */
    int32_t wide[17] = {0};
    CHECK_INT_EQ(llm_verify(a, wide, 17, &lg), LLM_EINVAL);

    llm_session_free(a);
    llm_session_free(b);
    llm_session_free(c);
    llm_model_free(m);
    unlink(path);
    return pm_check_result();
}
