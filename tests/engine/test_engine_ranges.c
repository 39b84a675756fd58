/* test_engine_ranges — the exact ranges a request shape produces.
 *
 * This executable links the in-executable ROCTX recorder
 * (tests/common/pm_roctx_log.h) with exported symbols, so with
 * PHASEMARK=roctx the marker layer's process-global lookup (docs/markers.md, promise 4)
 * finds it: a recorder with no preload. Request shape: prompt 11 tokens in chunks of 4, 3 decode steps,
 * one verify of 3 tokens; a monolithic 2-layer model. Expected, in order:
 *   3 x (pm.prefill + one leaf layer_range mode=exact)
 *   3 x (pm.decode + one leaf layer_range mode=decode)
 *   1 x leaf layer_range mode=verify (the caller holds no phase range)
 * = 13 pushes and 13 pops, balanced, leaves at depth 1 under their phase.
 * Case "request": the id given to llm_forward, llm_generate and
 * llm_spec_generate is the one on every range, not the session's default.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phasemark/engine.h"
#include "phasemark/mark.h"
#include "phasemark/spec.h"
#include "pm_check.h"
#include "pm_roctx_log.h"
#include "synth.h"

/* Every range recorded since the last clear carries " req=R" and there
 * are `want` of them, balanced. */
static void expect_req(uint64_t req, int want, const char *what)
{
    char tag[32];
    snprintf(tag, sizeof tag, " req=%llu", (unsigned long long)req);
    CHECK_INT_EQ(pm_roctx.n_push, want);
    CHECK_INT_EQ(pm_roctx.n_pop, want);
    for (int i = 0; i < pm_roctx.n_push && i < PM_ROCTX_LOG_MAX; i++) {
        const char *at = strstr(pm_roctx.texts[i], tag);
        /* The id ends the number: req=42 must not match req=420. */
        int whole = at && (at[strlen(tag)] == ' ' || at[strlen(tag)] == '\0');
        if (!whole)
            fprintf(stderr, "%s: range %d '%s' lacks%s\n", what, i, pm_roctx.texts[i], tag);
        CHECK(whole);
    }
}

static int collect_none(void *user, int32_t tok)
{
    (void)user;
    (void)tok;
    return 0;
}

/* The request id is an argument of the forward: llm_forward, llm_generate
 * and llm_spec_generate put the id they are given on every range, while
 * the session's default id (7) is another. */
static int case_request(void)
{
    synth_spec sp = synth_default();
    char path[512];
    synth_path(path, sizeof path, "ranges_req");
    REQUIRE(synth_write(path, &sp) == 0);
    llm_model *m = synth_open(path, 2);
    llm_session *s = synth_session(m, 64, 16, 7), *d = synth_session(m, 64, 16, 7);
    int32_t prompt[5] = {3, 4, 5, 6, 7}, ids[3] = {0, 0, 0};
    const float *lg = NULL;
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.request = 42;
    fp.chunk = 4;
    pm_roctx_log_clear();
    CHECK_INT_EQ(llm_forward(s, &fp, prompt, 5, &lg, NULL), 0); /* 2 chunks: 2 + 2 */
    fp.phase = PM_PHASE_DECODE;
    fp.output = LLM_OUTPUT_ARGMAX;
    CHECK_INT_EQ(llm_forward(s, &fp, prompt, 1, NULL, ids), 0); /* 1 + 1 */
    fp.phase = PM_PHASE_VERIFY;
    fp.rows = 3;
    CHECK_INT_EQ(llm_forward(s, &fp, prompt, 3, NULL, ids), 0); /* one leaf */
    expect_req(42, 7, "llm_forward");
    CHECK_U64_EQ(llm_session_get_request(s), 7);

    llm_model_info info;
    llm_model_get_info(m, &info);
    llm_sampler *smp = NULL;
    REQUIRE(llm_sampler_create(NULL, info.n_vocab, &smp) == 0); /* greedy */
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = 3;
    gp.stop_at_eos = 0;
    gp.has_request = 1;
    gp.request = 99;
    llm_session_reset(s);
    pm_roctx_log_clear();
    CHECK_INT_EQ(llm_generate(s, smp, prompt, 5, &gp, collect_none, NULL, NULL, NULL), 0);
    expect_req(99, 2 + 2 * 2, "llm_generate"); /* prefill + 2 decodes, each with a leaf */

    llm_spec_params prm = LLM_SPEC_PARAMS_INIT;
    prm.k = 2;
    llm_spec *sd = NULL;
    char err[256];
    REQUIRE(llm_spec_create(s, d, &prm, &sd, err, sizeof err) == 0);
    llm_session_reset(s);
    gp.max_tokens = 4;
    gp.request = 123;
    pm_roctx_log_clear();
    CHECK_INT_EQ(llm_spec_generate(sd, smp, prompt, 5, &gp, collect_none, NULL, NULL, NULL), 0);
    /* The prompt (pm.prefill + leaf), then rounds of pm.spec_decode,
     * pm.draft and the verify leaf, or plain steps: at least one round. */
    CHECK(pm_roctx.n_push >= 5);
    expect_req(123, pm_roctx.n_push, "llm_spec_generate");
    llm_spec_free(sd);
    llm_sampler_free(smp);
    llm_session_free(d);
    llm_session_free(s);
    llm_model_free(m);
    unlink(path);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    if (setenv("PHASEMARK", "roctx", 1) != 0)
        return 1;
    REQUIRE(pm_enabled() == 1);
    CHECK_STR_EQ(pm_backend_name(), "roctx");
    if (argc > 1 && strcmp(argv[1], "request") == 0)
        return case_request();

    synth_spec sp = synth_default();
    char path[512];
    synth_path(path, sizeof path, "ranges");
    REQUIRE(synth_write(path, &sp) == 0);
    llm_model *m = synth_open(path, 2);
    llm_session *s = synth_session(m, 64, 16, 7);
    int32_t prompt[11];
    for (int i = 0; i < 11; i++)
        prompt[i] = i + 3;
    const float *lg;
    CHECK_INT_EQ(llm_prefill(s, prompt, 11, 4, &lg), 0);
    for (int i = 0; i < 3; i++)
        CHECK_INT_EQ(llm_decode(s, 20 + i, &lg), 0);
    int32_t draft[3] = {1, 2, 3};
    CHECK_INT_EQ(llm_verify(s, draft, 3, &lg), 0);

    static const char *const want[] = {
        "pm.prefill mode=exact req=7 pos=0 tokens=4",
        "pm.layer_range mode=exact layers=0-1 shard=0 where=local backend=cpu req=7 tokens=4",
        "pm.prefill mode=exact req=7 pos=4 tokens=4",
        "pm.layer_range mode=exact layers=0-1 shard=0 where=local backend=cpu req=7 tokens=4",
        "pm.prefill mode=exact req=7 pos=8 tokens=3",
        "pm.layer_range mode=exact layers=0-1 shard=0 where=local backend=cpu req=7 tokens=3",
        "pm.decode mode=decode req=7 pos=11",
        "pm.layer_range mode=decode layers=0-1 shard=0 where=local backend=cpu req=7 tokens=1",
        "pm.decode mode=decode req=7 pos=12",
        "pm.layer_range mode=decode layers=0-1 shard=0 where=local backend=cpu req=7 tokens=1",
        "pm.decode mode=decode req=7 pos=13",
        "pm.layer_range mode=decode layers=0-1 shard=0 where=local backend=cpu req=7 tokens=1",
        "pm.layer_range mode=verify layers=0-1 shard=0 where=local backend=cpu req=7 tokens=3",
    };
    static const int want_depth[] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
    int n_want = (int)(sizeof want / sizeof want[0]);
    CHECK_INT_EQ(pm_roctx.n_push, n_want);
    CHECK_INT_EQ(pm_roctx.n_pop, n_want);
    CHECK_INT_EQ(pm_roctx.depth, 0);
    for (int i = 0; i < n_want && i < pm_roctx.n_push; i++) {
        CHECK_STR_EQ(pm_roctx.texts[i], want[i]);
        CHECK_INT_EQ(pm_roctx.depths[i], want_depth[i]);
    }

    /* A failed call emits nothing. */
    int before = pm_roctx.n_push;
    int32_t bad = 100000;
    CHECK_INT_EQ(llm_decode(s, bad, &lg), LLM_ETOKEN);
    CHECK_INT_EQ(pm_roctx.n_push, before);

    llm_session_free(s);
    llm_model_free(m);
    unlink(path);
    return pm_check_result();
}
