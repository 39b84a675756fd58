/* test_engine_verify — llm_verify's k rows equal k single decode steps
 * (bit for bit, at every width up to 17 and for every weight class: a
 * verify never takes the batched product that rounds differently, or
 * greedy speculative decoding would flip near-ties),
 * llm_session_truncate rolls back so the same tokens give the same rows
 * again, and different tokens after a rollback see none of the forgotten
 * ones (equal to a fresh session fed the same history).
 *
 *   test_engine_verify                      the synthetic cases
 *   test_engine_verify kjv SET MODEL.gguf   the shipped KJV target under the
 *       kernel set SET (native: the host's best; else PHASEMARK_ENGINE_KERNELS):
 *       after a 40-token history, verifies of 2, 5, 9 and 17 rows (one
 *       register tile, a tile and a part, two tiles and a row, three
 *       passes) each equal, byte for byte, the decode steps of the same
 *       tokens on a second session. Exits 77 when the model is absent or
 *       the CPU cannot run SET.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "model.h"
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

#define KJV_HIST 40
#define KJV_WMAX 17

/* Row t of every verify of the KJV target against its decode step. */
static int verify_kjv(const char *set, const char *path)
{
    if (access(path, R_OK) != 0)
        PM_SKIP("the shipped KJV target is absent");
    if (strcmp(set, "native") != 0)
        setenv("PHASEMARK_ENGINE_KERNELS", set, 1);
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.n_threads = 2;
    llm_model *m = NULL;
    char err[256];
    int rc = llm_model_open(path, &mo, &m, err, sizeof err);
    if (rc == LLM_EUNSUP && strcmp(set, "native") != 0) {
        fprintf(stderr, "%s\n", err);
        PM_SKIP("the CPU cannot run this kernel set");
    }
    REQUIRE(rc == 0);
    if (strcmp(set, "native") != 0)
        CHECK_STR_EQ(llm_cpu_backend_kernels(m->be), set);
    llm_model_info info;
    llm_model_get_info(m, &info);
    int32_t nv = info.n_vocab;
    CHECK_INT_EQ(nv, 4096);
    int32_t hist[KJV_HIST], toks[KJV_WMAX];
    for (int i = 0; i < KJV_HIST; i++)
        hist[i] = (int32_t)((i * 37 + 5) % nv);
    for (int i = 0; i < KJV_WMAX; i++)
        toks[i] = (int32_t)((i * 211 + 17) % nv);
    llm_session *a = synth_session(m, 128, KJV_WMAX, 1), *b = synth_session(m, 128, KJV_WMAX, 2);
    CHECK_INT_EQ(llm_prefill(a, hist, KJV_HIST, 0, NULL), 0);
    CHECK_INT_EQ(llm_prefill(b, hist, KJV_HIST, 0, NULL), 0);
    static float rows[KJV_WMAX * 4096];
    static const int widths[4] = {2, 5, 9, 17};
    int compared = 0;
    for (int wi = 0; wi < 4; wi++) {
        int w = widths[wi];
        const float *lg;
        CHECK_INT_EQ(llm_verify(a, toks, (size_t)w, &lg), 0);
        memcpy(rows, lg, (size_t)w * (size_t)nv * sizeof(float));
        for (int t = 0; t < w; t++) {
            CHECK_INT_EQ(llm_decode(b, toks[t], &lg), 0);
            if (memcmp(rows + (size_t)t * (size_t)nv, lg, (size_t)nv * sizeof(float)) != 0)
                fprintf(stderr, "%s: verify of %d, row %d is not the decode step's bits\n",
                        set, w, t);
            else
                compared++;
        }
        CHECK_INT_EQ(llm_session_truncate(a, KJV_HIST), 0);
        CHECK_INT_EQ(llm_session_truncate(b, KJV_HIST), 0);
    }
    CHECK_INT_EQ(compared, 2 + 5 + 9 + 17);
    llm_session_free(a);
    llm_session_free(b);
    llm_model_free(m);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "kjv") == 0)
        return verify_kjv(argv[2], argv[3]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_engine_verify [kjv SET MODEL.gguf]\n");
        return 2;
    }
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
