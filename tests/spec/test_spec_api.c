/* test_spec_api — the generator's contract apart from parity on plain runs:
 *
 *   vocab_size       a draft with another vocabulary size is refused
 *   vocab_piece      a draft whose vocabulary differs in one piece (the KJV
 *                    draft with token 300 renamed) is refused, naming it
 *   vocab_tokenizer  an ids-only draft for a target with a tokenizer
 *   args             bad arguments, k bounds, sampler size, a target moved
 *                    behind the generator's back, proposer failures
 *   stops            every stop condition (stop token, EOS-like stop,
 *                    callback, context end, max_tokens 1) and a second
 *                    call continuing the same session give what
 *                    llm_generate gives: ids, stop reason, final position
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pm_check.h"
#include "spec_common.h"
#include "spec_models.h"
#include "synth.h"

static int contains(const char *s, const char *part)
{
    if (!strstr(s, part)) {
        fprintf(stderr, "'%s' does not contain '%s'\n", s, part);
        return 0;
    }
    return 1;
}

/* Tries llm_spec_create over fresh sessions of t and d; returns its status
 * with the error line in err. */
static int try_create(llm_model *t, llm_model *d, const llm_spec_params *p, char *err,
                      size_t errlen)
{
    llm_session *ts = sc_session(t, 64, 16, 1), *ds = sc_session(d, 64, 16, 2);
    llm_spec *sd = (llm_spec *)&sd; /* must come back NULL on failure */
    int rc = llm_spec_create(ts, ds, p, &sd, err, errlen);
    if (rc)
        CHECK(sd == NULL);
    llm_spec_free(sd);
    llm_session_free(ds);
    llm_session_free(ts);
    return rc;
}

static void case_vocab_size(void)
{
    char tp[512], dp[512], err[256];
    sc_path(tp, sizeof tp, "vs_target");
    sc_path(dp, sizeof dp, "vs_draft");
    synth_spec a = synth_default(), b = synth_default();
    b.hp.vocab = 200;
    REQUIRE(synth_write(tp, &a) == 0 && synth_write(dp, &b) == 0);
    llm_model *t = sc_open(tp), *d = sc_open(dp);
    CHECK_INT_EQ(try_create(t, d, NULL, err, sizeof err), LLM_EINVAL);
    CHECK(contains(err, "draft vocabulary differs from the target's: 200 tokens, target 160"));
    CHECK_INT_EQ(llm_spec_check_vocab(t, d, err, sizeof err), LLM_EINVAL);
    CHECK_INT_EQ(llm_spec_check_vocab(t, t, err, sizeof err), 0);
    llm_model_free(d);
    llm_model_free(t);
    unlink(tp);
    unlink(dp);
}

static void case_vocab_piece(void)
{
    char tp[512], dp[512], mp[512], err[256];
    if (sc_kjv_paths(tp, dp, sizeof tp) != 0)
        PM_SKIP("the shipped KJV models are not in models/");
    sc_path(mp, sizeof mp, "renamed_draft");
    spec_derive dv = {0, NULL, 300};
    REQUIRE(spec_derive_gguf(dp, mp, &dv, err, sizeof err) == 0);
    llm_model *t = sc_open(tp), *d = sc_open(dp), *m = sc_open(mp);
    CHECK_INT_EQ(llm_spec_check_vocab(t, d, err, sizeof err), 0);
    CHECK_INT_EQ(try_create(t, m, NULL, err, sizeof err), LLM_EINVAL);
    CHECK(contains(err, "draft vocabulary differs from the target's: token 300 is a different piece"));
    llm_model_free(m);
    llm_model_free(d);
    llm_model_free(t);
    unlink(mp);
}

static void case_vocab_tokenizer(void)
{
    char tp[512], dp[512], sp[512], err[256];
    if (sc_kjv_paths(tp, dp, sizeof tp) != 0)
        PM_SKIP("the shipped KJV models are not in models/");
    sc_path(sp, sizeof sp, "idsonly_draft");
    synth_spec s = synth_default();
    s.hp.vocab = 4096; /* the KJV size, but no tokenizer */
    REQUIRE(synth_write(sp, &s) == 0);
    llm_model *t = sc_open(tp), *d = sc_open(sp);
    /* BOS/EOS differ too (1/2 against none); either line names the draft. */
    CHECK_INT_EQ(try_create(t, d, NULL, err, sizeof err), LLM_EINVAL);
    CHECK(contains(err, "draft vocabulary differs from the target's"));
    llm_model_free(d);
    llm_model_free(t);
    unlink(sp);
}

static int fail_proposer(void *user, const int32_t *hist, size_t n, int32_t k, int32_t *out)
{
    (void)user;
    (void)hist;
    (void)n;
    (void)k;
    (void)out;
    return LLM_EBACKEND;
}

static int wild_proposer(void *user, const int32_t *hist, size_t n, int32_t k, int32_t *out)
{
    (void)user;
    (void)hist;
    (void)n;
    for (int32_t i = 0; i < k; i++)
        out[i] = 100000;
    return 0;
}

static void case_args(void)
{
    char tp[512], dp[512], err[256];
    sc_path(tp, sizeof tp, "args_target");
    sc_path(dp, sizeof dp, "args_draft");
    sc_write_synth_pair("f32", 2, 1, tp, dp);
    llm_model *t = sc_open(tp), *d = sc_open(dp);
    llm_session *ts = sc_session(t, 64, 16, 1), *ds = sc_session(d, 64, 16, 2);
    llm_spec *sd;
    llm_spec_params p = LLM_SPEC_PARAMS_INIT;
    CHECK_INT_EQ(llm_spec_create(NULL, ds, &p, &sd, err, sizeof err), LLM_EINVAL);
    CHECK_INT_EQ(llm_spec_create(ts, ts, &p, &sd, err, sizeof err), LLM_EINVAL);
    CHECK_INT_EQ(llm_spec_create(ts, NULL, &p, &sd, err, sizeof err), LLM_EINVAL);
    CHECK_INT_EQ(llm_spec_create(ts, ds, &p, NULL, err, sizeof err), LLM_EINVAL);
    p.k = 0;
    CHECK_INT_EQ(llm_spec_create(ts, ds, &p, &sd, err, sizeof err), LLM_EINVAL);
    CHECK(contains(err, "k = 0 is outside 1..15"));
    p.k = 16; /* the batch is 16: k + 1 tokens must fit one verify */
    CHECK_INT_EQ(llm_spec_create(ts, ds, &p, &sd, err, sizeof err), LLM_EINVAL);
    p.k = 15;
    CHECK_INT_EQ(llm_spec_create(ts, ds, &p, &sd, err, sizeof err), 0);
    llm_spec_free(sd);
    p.k = 4;
    p.adaptive = 1;
    p.k_min = 6;
    p.k_max = 3;
    CHECK_INT_EQ(llm_spec_create(ts, ds, &p, &sd, err, sizeof err), LLM_EINVAL);
    llm_spec_params old = p;
    old.version = 99;
    CHECK_INT_EQ(llm_spec_create(ts, ds, &old, &sd, err, sizeof err), LLM_EINVAL);

    /* Generation-time errors. */
    p = (llm_spec_params)LLM_SPEC_PARAMS_INIT;
    REQUIRE(llm_spec_create(ts, ds, &p, &sd, err, sizeof err) == 0);
    llm_sampler *good = sc_sampler(t, 0.0f, 0, 1.0f, 1), *wrong;
    REQUIRE(llm_sampler_create(NULL, 99, &wrong) == 0);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    int32_t prompt[3] = {4, 5, 6};
    size_t n = 7;
    CHECK_INT_EQ(llm_spec_generate(sd, wrong, prompt, 3, &gp, NULL, NULL, &n, NULL), LLM_EINVAL);
    CHECK(n == 0);
    CHECK(contains(llm_spec_error(sd), "vocabulary (99)"));
    gp.max_tokens = 0;
    CHECK_INT_EQ(llm_spec_generate(sd, good, prompt, 3, &gp, NULL, NULL, NULL, NULL), LLM_EINVAL);
    gp.max_tokens = 8;
    CHECK_INT_EQ(llm_spec_generate(sd, good, prompt, 0, &gp, NULL, NULL, NULL, NULL), LLM_EINVAL);
    CHECK_INT_EQ(llm_spec_generate(sd, good, prompt, 3, &gp, NULL, NULL, &n, NULL), 0);
    CHECK(n == 8);
    /* The target moved behind the generator's back. */
    const float *lg;
    CHECK_INT_EQ(llm_decode(ts, 3, &lg), 0);
    CHECK_INT_EQ(llm_spec_generate(sd, good, prompt, 3, &gp, NULL, NULL, NULL, NULL), LLM_ESTATE);
    CHECK(contains(llm_spec_error(sd), "reset the target session"));
    int32_t bad[2] = {1, 100000};
    llm_session_reset(ts);
    CHECK_INT_EQ(llm_spec_generate(sd, good, bad, 2, &gp, NULL, NULL, NULL, NULL), LLM_ETOKEN);
    CHECK(contains(llm_spec_error(sd), "target: "));
    llm_spec_free(sd);

    /* Proposers: a failure passes its status through; a bad id is refused. */
    p.propose = fail_proposer;
    REQUIRE(llm_spec_create(ts, NULL, &p, &sd, err, sizeof err) == 0);
    llm_session_reset(ts);
    CHECK_INT_EQ(llm_spec_generate(sd, good, prompt, 3, &gp, NULL, NULL, NULL, NULL), LLM_EBACKEND);
    llm_spec_free(sd);
    p.propose = wild_proposer;
    REQUIRE(llm_spec_create(ts, NULL, &p, &sd, err, sizeof err) == 0);
    llm_session_reset(ts);
    CHECK_INT_EQ(llm_spec_generate(sd, good, prompt, 3, &gp, NULL, NULL, NULL, NULL), LLM_ETOKEN);
    CHECK(contains(llm_spec_error(sd), "outside the vocabulary"));
    llm_spec_free(sd);
    llm_spec_free(NULL);
    CHECK_STR_EQ(llm_spec_error(NULL), "no generator");

    llm_sampler_free(wrong);
    llm_sampler_free(good);
    llm_session_free(ds);
    llm_session_free(ts);
    llm_model_free(d);
    llm_model_free(t);
    unlink(tp);
    unlink(dp);
}

/* ---- stop conditions --------------------------------------------------- */

typedef struct stopper {
    int after, seen;
} stopper;

static int stop_after(void *user, int32_t tok)
{
    (void)tok;
    stopper *s = user;
    return ++s->seen >= s->after;
}

/* Runs llm_generate and llm_spec_generate with the same arguments (a
 * callback that stops after `cb_after` tokens when > 0) from emptied
 * sessions and compares everything. */
static void same_stop(llm_session *ar, llm_session *t, llm_spec *sd, llm_sampler *sp,
                      const int32_t *prompt, size_t n, const llm_generate_params *gp,
                      int cb_after, int want_reason, const char *what)
{
    sc_run a, b;
    if (cb_after > 0) {
        stopper s1 = {cb_after, 0}, s2 = {cb_after, 0};
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        llm_session_reset(ar);
        llm_session_reset(t);
        CHECK_INT_EQ(llm_generate(ar, sp, prompt, n, gp, stop_after, &s1, &a.n, &a.reason), 0);
        CHECK_INT_EQ(llm_spec_generate(sd, sp, prompt, n, gp, stop_after, &s2, &b.n, &b.reason), 0);
        a.end_pos = llm_session_pos(ar);
        b.end_pos = llm_session_pos(t);
    } else {
        CHECK_INT_EQ(sc_run_ar(ar, sp, prompt, n, gp, &a), 0);
        CHECK_INT_EQ(sc_run_spec(sd, t, sp, prompt, n, gp, &b), 0);
    }
    CHECK(sc_same(&a, &b, what));
    CHECK_INT_EQ(b.reason, want_reason);
}

static void stops_with(llm_model *tm, llm_model *dm, int k)
{
    int32_t prompt[10];
    for (int i = 0; i < 10; i++)
        prompt[i] = (i * 13 + 2) % 160;
    llm_session *ar = sc_session(tm, 64, 16, 1), *t = sc_session(tm, 64, 16, 2);
    llm_session *d = sc_session(dm, 64, 16, 3);
    llm_sampler *sp = sc_sampler(tm, 0.0f, 0, 1.0f, 1);
    llm_spec_params p = LLM_SPEC_PARAMS_INIT;
    p.k = k;
    llm_spec *sd;
    char err[256];
    REQUIRE(llm_spec_create(t, d, &p, &sd, err, sizeof err) == 0);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = 30;
    sc_run ref;
    REQUIRE(sc_run_ar(ar, sp, prompt, 10, &gp, &ref) == 0 && ref.n == 30);

    /* A stop token: the first occurrence of the 6th token ends the run. */
    int32_t stop = ref.ids[5];
    gp.stop_tokens = &stop;
    gp.n_stop_tokens = 1;
    same_stop(ar, t, sd, sp, prompt, 10, &gp, 0, LLM_STOP_TOKEN, "stop token");
    /* A stop token that is the very first token: nothing is emitted. */
    stop = ref.ids[0];
    same_stop(ar, t, sd, sp, prompt, 10, &gp, 0, LLM_STOP_TOKEN, "first token stops");
    gp.n_stop_tokens = 0;
    gp.stop_tokens = NULL;
    same_stop(ar, t, sd, sp, prompt, 10, &gp, 7, LLM_STOP_CALLBACK, "callback");
    gp.max_tokens = 1;
    same_stop(ar, t, sd, sp, prompt, 10, &gp, 0, LLM_STOP_LENGTH, "one token");
    /* The context (64) fills: 10 prompt tokens, 54 more emitted. */
    gp.max_tokens = 100;
    same_stop(ar, t, sd, sp, prompt, 10, &gp, 0, LLM_STOP_CONTEXT, "context end");

    /* A second call continues the same sessions (no reset). */
    gp.max_tokens = 9;
    sc_run a1, b1, a2, b2;
    CHECK_INT_EQ(sc_run_ar(ar, sp, prompt, 10, &gp, &a1), 0);
    CHECK_INT_EQ(sc_run_spec(sd, t, sp, prompt, 10, &gp, &b1), 0);
    CHECK(sc_same(&a1, &b1, "first call"));
    int32_t more[3] = {7, 8, 9};
    memset(&a2, 0, sizeof a2);
    memset(&b2, 0, sizeof b2);
    CHECK_INT_EQ(llm_generate(ar, sp, more, 3, &gp, NULL, NULL, &a2.n, &a2.reason), 0);
    CHECK_INT_EQ(llm_spec_generate(sd, sp, more, 3, &gp, NULL, NULL, &b2.n, &b2.reason), 0);
    CHECK_INT_EQ(llm_session_pos(ar), llm_session_pos(t));
    CHECK_INT_EQ((int)a2.n, (int)b2.n);
    /* Same state: the next greedy token agrees too. */
    const float *la, *lb;
    CHECK_INT_EQ(llm_decode(ar, 11, &la), 0);
    CHECK_INT_EQ(llm_decode(t, 11, &lb), 0);
    CHECK_INT_EQ(llm_sample(sp, la), llm_sample(sp, lb));

    llm_spec_free(sd);
    llm_sampler_free(sp);
    llm_session_free(d);
    llm_session_free(t);
    llm_session_free(ar);
}

static void case_stops(void)
{
    char tp[512], dp[512];
    sc_path(tp, sizeof tp, "stops_target");
    sc_path(dp, sizeof dp, "stops_draft");
    sc_write_synth_pair("f32", 2, 1, tp, dp);
    llm_model *t = sc_open(tp), *d = sc_open(dp);
    stops_with(t, d, 4); /* a poor draft: mostly rejections */
    stops_with(t, t, 4); /* itself: every round accepts all */
    stops_with(t, t, 1);
    llm_model_free(d);
    llm_model_free(t);
    unlink(tp);
    unlink(dp);
}

/* llm_device_loop on CPU sessions (any build): argument errors, every
 * refusal's exact line in the order the checks run (params first, then
 * the backend), *out NULL after each, and the NULL handle's answers. */
static void case_device_loop(void)
{
    char tp[512], dp[512], err[256], why[256];
    sc_path(tp, sizeof tp, "loop_target");
    sc_path(dp, sizeof dp, "loop_draft");
    sc_write_synth_pair("f32", 2, 1, tp, dp);
    llm_model *t = sc_open(tp), *d = sc_open(dp);
    llm_session *ts = sc_session(t, 64, 16, 1), *ds = sc_session(d, 64, 16, 2);
    llm_device_loop *l = (llm_device_loop *)(void *)&err; /* must come back NULL */
    llm_device_loop_params p = LLM_DEVICE_LOOP_PARAMS_INIT;
    CHECK_INT_EQ(llm_device_loop_create(ts, NULL, &p, NULL, err, sizeof err), LLM_EINVAL);
    CHECK_INT_EQ(llm_device_loop_create(NULL, NULL, &p, &l, err, sizeof err), LLM_EINVAL);
    CHECK(l == NULL);
    CHECK_INT_EQ(llm_device_loop_create(ts, ts, &p, &l, err, sizeof err), LLM_EINVAL);
    llm_device_loop_params old = p;
    old.version = 9;
    CHECK_INT_EQ(llm_device_loop_create(ts, NULL, &old, &l, err, sizeof err), LLM_EINVAL);
    CHECK_STR_EQ(err, "device loop: params of version 9, size 32");
    CHECK_INT_EQ((int)sizeof p, 32);
    struct {
        int32_t drafter, k, adaptive;
        int has_draft, rc;
        const char *line;
    } refusals[] = {
        {-1, 4, 0, 0, LLM_EUNSUP, "device loop: the target runs on the cpu backend, not CUDA"},
        {LLM_DRAFTER_HYBRID, 4, 0, 1, LLM_EUNSUP,
         "device loop: its hybrid rounds need a block head, not a draft model"},
        {LLM_DRAFTER_CUSTOM, 4, 0, 1, LLM_EUNSUP,
         "device loop: the custom drafter has no device loop (model, ngram, block or hybrid)"},
        {LLM_DRAFTER_BLOCK, 4, 0, 0, LLM_EINVAL, "device loop: the block drafter needs a head file"},
        {LLM_DRAFTER_MODEL, 4, LLM_SPEC_ADAPT_COST, 1, LLM_EUNSUP,
         "device loop: its rounds draft a fixed k (no --adaptive-k or --cost-k)"},
        {LLM_DRAFTER_NGRAM, 0, 0, 0, LLM_EUNSUP, "device loop: k 0 is outside 1..16"},
        {LLM_DRAFTER_NGRAM, 17, 0, 0, LLM_EUNSUP, "device loop: k 17 is outside 1..16"},
        {LLM_DRAFTER_MODEL, 4, 0, 0, LLM_EINVAL, "device loop: the model drafter needs a draft session"},
        {LLM_DRAFTER_MODEL, 4, 0, 1, LLM_EUNSUP, "device loop: the target runs on the cpu backend, not CUDA"},
        {LLM_DRAFTER_NGRAM, 16, 0, 0, LLM_EUNSUP, "device loop: the target runs on the cpu backend, not CUDA"},
    };
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        p.drafter = refusals[i].drafter;
        p.k = refusals[i].k;
        p.adaptive = refusals[i].adaptive;
        l = (llm_device_loop *)(void *)&err;
        err[0] = 0;
        CHECK_INT_EQ(llm_device_loop_create(ts, refusals[i].has_draft ? ds : NULL, &p, &l, err, sizeof err),
                     refusals[i].rc);
        CHECK(l == NULL);
        CHECK_STR_EQ(err, refusals[i].line);
    }
    llm_sampler *sp = sc_sampler(t, 0.0f, 0, 1.0f, 1);
    CHECK_INT_EQ(llm_device_loop_takes(NULL, sp, why, sizeof why), 0);
    CHECK_STR_EQ(why, "device loop: no loop or sampler");
    CHECK_INT_EQ(llm_device_loop_generate(NULL, sp, NULL, 0, NULL, NULL, NULL, NULL, NULL), LLM_EINVAL);
    CHECK_STR_EQ(llm_device_loop_error(NULL), "");
    llm_device_loop_stats st;
    memset(&st, 0xff, sizeof st);
    llm_device_loop_get_stats(NULL, &st);
    CHECK_INT_EQ(st.drafter, -1);
    CHECK_INT_EQ(st.k, 0);
    CHECK_INT_EQ((long long)st.rounds, 0);
    CHECK_INT_EQ((long long)st.plain_steps, 0);
    llm_device_loop_free(NULL);
    llm_sampler_free(sp);
    llm_session_free(ts);
    llm_session_free(ds);
    llm_model_free(t);
    llm_model_free(d);
    unlink(tp);
    unlink(dp);
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    const char *c = argv[1];
    if (strcmp(c, "vocab_size") == 0)
        case_vocab_size();
    else if (strcmp(c, "vocab_piece") == 0)
        case_vocab_piece();
    else if (strcmp(c, "vocab_tokenizer") == 0)
        case_vocab_tokenizer();
    else if (strcmp(c, "args") == 0)
        case_args();
    else if (strcmp(c, "stops") == 0)
        case_stops();
    else if (strcmp(c, "device_loop") == 0)
        case_device_loop();
    else
        return 2;
    return pm_check_result();
}
