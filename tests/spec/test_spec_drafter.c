/* test_spec_drafter — the drafters of phasemark/spec.h on their own.
 *
 *   ngram_lookup   the longest-suffix rule (pm__ngram_lookup) on
 *                  hand-worked histories: exact match lengths, starts and
 *                  proposed ids
 *   ngram_propose  the same through llm_drafter_propose (ngram drafter)
 *   hybrid         a hybrid takes the n-gram proposal for a match of at
 *                  least hybrid_min tokens, else the model's (whose ids
 *                  equal a model drafter's on the same history)
 *   args           creation and proposal errors, kind names
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block_files.h"
#include "drafter.h"
#include "pm_check.h"
#include "spec_common.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

typedef struct ngram_case {
    const char *what;
    int32_t hist[16];
    size_t n_hist;
    int32_t nmin, nmax, k;
    int32_t want_match;
    size_t want_start;
    int32_t want_n;
    int32_t want[8];
} ngram_case;

/* Worked by hand from the rule in drafter.c: the longest suffix first,
 * and among its earlier occurrences the most recent. */
static const ngram_case k_cases[] = {
    /* [5 6 7] recurs at 0: what followed it is 8 5 6 7. */
    {"trigram", {5, 6, 7, 8, 5, 6, 7}, 7, 2, 3, 4, 3, 3, 4, {8, 5, 6, 7}},
    {"trigram k2", {5, 6, 7, 8, 5, 6, 7}, 7, 2, 3, 2, 3, 3, 2, {8, 5}},
    /* [4 2 3] never recurs; [2 3] does at 4 and at 1: the one at 4 wins,
     * and only 3 tokens follow it before the history ends. */
    {"bigram recent", {1, 2, 3, 9, 2, 3, 4, 2, 3}, 9, 2, 3, 4, 2, 6, 3, {4, 2, 3}},
    {"none", {1, 2, 3, 4}, 4, 2, 3, 4, 0, 0, 0, {0}},
    {"none unigram", {1, 2, 3, 4}, 4, 1, 3, 4, 0, 0, 0, {0}},
    /* A run: [7 7] at 0 is followed by the last 7 itself. */
    {"run", {7, 7, 7}, 3, 2, 4, 4, 2, 2, 1, {7}},
    /* Only a unigram [5] recurs (at 4), followed by 9 2 6 5. */
    {"unigram", {3, 1, 4, 1, 5, 9, 2, 6, 5}, 9, 1, 3, 3, 1, 5, 3, {9, 2, 6}},
    {"one token", {42}, 1, 1, 4, 4, 0, 0, 0, {0}},
};

static int case_ngram_lookup(void)
{
    for (size_t c = 0; c < N(k_cases); c++) {
        const ngram_case *t = &k_cases[c];
        size_t start = 99;
        int32_t n = -1;
        int32_t m = pm__ngram_lookup(t->hist, t->n_hist, t->nmin, t->nmax, t->k, &start, &n);
        fprintf(stderr, "%s: match %d start %zu n %d\n", t->what, (int)m, start, (int)n);
        CHECK_INT_EQ(m, t->want_match);
        CHECK_INT_EQ(n, t->want_n);
        if (t->want_n > 0)
            CHECK_U64_EQ(start, t->want_start);
        for (int32_t i = 0; i < n && i < t->want_n; i++)
            CHECK_INT_EQ(t->hist[start + (size_t)i], t->want[i]);
    }
    return pm_check_result();
}

static int case_ngram_propose(void)
{
    for (size_t c = 0; c < N(k_cases); c++) {
        const ngram_case *t = &k_cases[c];
        llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
        dp.kind = LLM_DRAFTER_NGRAM;
        dp.ngram_min = t->nmin;
        dp.ngram_max = t->nmax;
        llm_drafter *d;
        char err[256];
        CHECK_INT_EQ(llm_drafter_create(&dp, &d, err, sizeof err), 0);
        int32_t out[8] = {0}, n = -1, kind = -1;
        CHECK_INT_EQ(llm_drafter_propose(d, t->hist, t->n_hist, t->k, out, &n, &kind), 0);
        CHECK_INT_EQ(n, t->want_n);
        CHECK_INT_EQ(kind, LLM_DRAFTER_NGRAM);
        for (int32_t i = 0; i < n && i < t->want_n; i++)
            CHECK_INT_EQ(out[i], t->want[i]);
        llm_drafter_free(d);
    }
    return pm_check_result();
}

static llm_drafter *make(int kind, llm_session *s)
{
    llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
    dp.kind = kind;
    dp.draft = s;
    llm_drafter *d;
    char err[256];
    if (llm_drafter_create(&dp, &d, err, sizeof err) != 0) {
        fprintf(stderr, "llm_drafter_create: %s\n", err);
        exit(1);
    }
    return d;
}

/* A trigram match (>= hybrid_min 3): a hybrid's proposal is the n-gram's,
 * 8 5 6 7 after 5 6 7 8 5 6 7. */
static void check_trigram(llm_drafter *hy)
{
    static const int32_t rep[] = {5, 6, 7, 8, 5, 6, 7};
    int32_t out[4], n = 0, kind = -1;
    CHECK_INT_EQ(llm_drafter_propose(hy, rep, N(rep), 4, out, &n, &kind), 0);
    CHECK_INT_EQ(kind, LLM_DRAFTER_NGRAM);
    CHECK_INT_EQ(n, 4);
    CHECK_INT_EQ(out[0], 8);
    CHECK_INT_EQ(out[3], 7);
}

static int case_hybrid(void)
{
    char tp[512], dp[512];
    sc_path(tp, sizeof tp, "drafter_target");
    sc_path(dp, sizeof dp, "drafter_draft");
    sc_write_synth_pair("f32", 2, 1, tp, dp);
    llm_model *m = sc_open(dp);
    llm_session *s1 = sc_session(m, 64, 16, 1), *s2 = sc_session(m, 64, 16, 2);
    llm_drafter *hy = make(LLM_DRAFTER_HYBRID, s1), *mo = make(LLM_DRAFTER_MODEL, s2);
    check_trigram(hy);
    CHECK_INT_EQ((int)llm_session_pos(s1), 0); /* no forward ran */
    int32_t out[4], n = 0, kind = -1;
    /* Only a bigram recurs: the model drafts, exactly as a model drafter. */
    static const int32_t two[] = {1, 2, 3, 9, 2, 3, 4, 2, 3};
    int32_t want[4], nw = 0, kw = -1;
    CHECK_INT_EQ(llm_drafter_propose(hy, two, N(two), 4, out, &n, &kind), 0);
    CHECK_INT_EQ(llm_drafter_propose(mo, two, N(two), 4, want, &nw, &kw), 0);
    CHECK_INT_EQ(kind, LLM_DRAFTER_MODEL);
    CHECK_INT_EQ(kw, LLM_DRAFTER_MODEL);
    CHECK_INT_EQ(n, 4);
    CHECK_INT_EQ(nw, 4);
    for (int i = 0; i < 4; i++)
        CHECK_INT_EQ(out[i], want[i]);
    /* The draft fed the history and k-1 drafts. */
    CHECK_INT_EQ((int)llm_session_pos(s1), (int)N(two) + 3);
    CHECK_INT_EQ(llm_drafter_observe(hy, 1, 5), 0);
    CHECK_INT_EQ((int)llm_session_pos(s1), 5);
    llm_drafter_free(hy);
    llm_drafter_free(mo);
    llm_session_free(s1);
    llm_session_free(s2);
    llm_model_free(m);
    unlink(tp);
    unlink(dp);
    return pm_check_result();
}

/* The hybrid over a block head: with a trigram match the n-gram's
 * proposal and no head forward; without one the head's round, which on a
 * history whose features never reached the head is refused with the
 * block drafter's own line (the proof that the head was asked). */
static int case_hybrid_head(void)
{
    char tp[512], dp_path[512], hp[512];
    sc_path(tp, sizeof tp, "drafter_hh_target");
    sc_path(dp_path, sizeof dp_path, "drafter_hh_draft");
    sc_path(hp, sizeof hp, "drafter_hh_head");
    sc_write_synth_pair("f32", 2, 1, tp, dp_path);
    llm_model *m = sc_open(tp);
    bf_write_for(hp, m, 8, 5);
    llm_session *t = sc_session(m, 64, 16, 1);
    llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
    dp.kind = LLM_DRAFTER_HYBRID;
    dp.head_path = hp;
    dp.target = t;
    llm_drafter *hy = NULL;
    char err[256];
    REQUIRE(llm_drafter_create(&dp, &hy, err, sizeof err) == 0);
    CHECK_INT_EQ(llm_drafter_get_kind(hy), LLM_DRAFTER_HYBRID);
    check_trigram(hy);
    int32_t out[4], n = 0, kind = -1;
    static const int32_t two[] = {1, 2, 3, 9, 2, 3, 4, 2, 3};
    CHECK_INT_EQ(llm_drafter_propose(hy, two, N(two), 4, out, &n, &kind), LLM_ESTATE);
    CHECK_INT_EQ(n, 0);
    CHECK_STR_EQ(llm_drafter_error(hy), "block drafter: it holds features of 0 positions, the history 8");
    llm_drafter_free(hy);
    llm_session_free(t);
    llm_model_free(m);
    unlink(tp);
    unlink(dp_path);
    unlink(hp);
    return pm_check_result();
}

static int case_args(void)
{
    llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
    llm_drafter *d = (llm_drafter *)&dp;
    char err[256];
    dp.kind = LLM_DRAFTER_MODEL;
    CHECK_INT_EQ(llm_drafter_create(&dp, &d, err, sizeof err), LLM_EINVAL);
    CHECK(d == NULL);
    CHECK_STR_EQ(err, "drafter: model needs a draft session");
    dp.kind = LLM_DRAFTER_BLOCK;
    CHECK_INT_EQ(llm_drafter_create(&dp, &d, err, sizeof err), LLM_EINVAL);
    CHECK_STR_EQ(err, "drafter: block needs a head file and the target session");
    dp.kind = LLM_DRAFTER_HYBRID;
    CHECK_INT_EQ(llm_drafter_create(&dp, &d, err, sizeof err), LLM_EINVAL);
    CHECK_STR_EQ(err, "drafter: hybrid needs a draft session");
    dp.head_path = "head.gguf";
    CHECK_INT_EQ(llm_drafter_create(&dp, &d, err, sizeof err), LLM_EINVAL);
    CHECK_STR_EQ(err, "drafter: hybrid over a block head needs a head file and the target session");
    dp.draft = (llm_session *)&dp; /* never read: refused first */
    CHECK_INT_EQ(llm_drafter_create(&dp, &d, err, sizeof err), LLM_EINVAL);
    CHECK_STR_EQ(err, "drafter: hybrid takes a draft session or a block head, not both");
    dp.draft = NULL;
    dp.head_path = NULL;
    dp.kind = LLM_DRAFTER_CUSTOM;
    CHECK_INT_EQ(llm_drafter_create(&dp, &d, err, sizeof err), LLM_EINVAL);
    CHECK_STR_EQ(err, "drafter: custom needs a propose callback");
    dp.kind = 9;
    CHECK_INT_EQ(llm_drafter_create(&dp, &d, err, sizeof err), LLM_EINVAL);
    CHECK_STR_EQ(err, "drafter: unknown kind 9");
    dp.kind = LLM_DRAFTER_NGRAM;
    dp.ngram_min = 3;
    dp.ngram_max = 2;
    CHECK_INT_EQ(llm_drafter_create(&dp, &d, err, sizeof err), LLM_EINVAL);
    CHECK_STR_EQ(err, "drafter: n-gram bounds 3..2 (hybrid 2) out of order");
    dp.version = 7;
    CHECK_INT_EQ(llm_drafter_create(&dp, &d, err, sizeof err), LLM_EINVAL);
    dp = (llm_drafter_params)LLM_DRAFTER_PARAMS_INIT;
    dp.kind = LLM_DRAFTER_NGRAM;
    dp.n_hist_max = 8;
    CHECK_INT_EQ(llm_drafter_create(&dp, &d, err, sizeof err), 0);
    int32_t h[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, out[4], n = 5;
    CHECK_INT_EQ(llm_drafter_propose(d, h, 9, 4, out, &n, NULL), LLM_EINVAL);
    CHECK_INT_EQ(n, 0);
    CHECK_STR_EQ(llm_drafter_error(d), "drafter: bad arguments to llm_drafter_propose");
    CHECK_INT_EQ(llm_drafter_propose(d, h, 8, 0, out, &n, NULL), LLM_EINVAL);
    CHECK_INT_EQ(llm_drafter_propose(d, h, 8, 4, out, &n, NULL), 0);
    CHECK_INT_EQ(n, 0);
    CHECK_INT_EQ(llm_drafter_get_kind(d), LLM_DRAFTER_NGRAM);
    llm_drafter_free(d);
    llm_drafter_free(NULL);
    CHECK_STR_EQ(llm_drafter_kind_name(LLM_DRAFTER_MODEL), "model");
    CHECK_STR_EQ(llm_drafter_kind_name(LLM_DRAFTER_NGRAM), "ngram");
    CHECK_STR_EQ(llm_drafter_kind_name(LLM_DRAFTER_HYBRID), "hybrid");
    CHECK_STR_EQ(llm_drafter_kind_name(LLM_DRAFTER_BLOCK), "block");
    CHECK_STR_EQ(llm_drafter_kind_name(-1), "unknown");
    CHECK_INT_EQ(llm_drafter_kind_parse("hybrid"), LLM_DRAFTER_HYBRID);
    CHECK_INT_EQ(llm_drafter_kind_parse("block"), LLM_DRAFTER_BLOCK);
    CHECK_INT_EQ(llm_drafter_kind_parse("custom"), LLM_EINVAL);
    /* A version 1 caller's shorter struct still creates its drafter. */
    dp = (llm_drafter_params)LLM_DRAFTER_PARAMS_INIT;
    dp.version = 1;
    dp.size = (uint16_t)LLM_DRAFTER_PARAMS_V1_SIZE;
    dp.kind = LLM_DRAFTER_NGRAM;
    CHECK_INT_EQ(llm_drafter_create(&dp, &d, err, sizeof err), 0);
    CHECK_INT_EQ(llm_drafter_get_kind(d), LLM_DRAFTER_NGRAM);
    llm_drafter_free(d);
    dp.size = (uint16_t)(LLM_DRAFTER_PARAMS_V1_SIZE - 1);
    CHECK_INT_EQ(llm_drafter_create(&dp, &d, err, sizeof err), LLM_EINVAL);
    CHECK_INT_EQ(llm_drafter_kind_parse("Model"), LLM_EINVAL);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_spec_drafter ngram_lookup|ngram_propose|hybrid|hybrid_head|args\n");
        return 2;
    }
    if (!strcmp(argv[1], "ngram_lookup"))
        return case_ngram_lookup();
    if (!strcmp(argv[1], "ngram_propose"))
        return case_ngram_propose();
    if (!strcmp(argv[1], "hybrid"))
        return case_hybrid();
    if (!strcmp(argv[1], "hybrid_head"))
        return case_hybrid_head();
    if (!strcmp(argv[1], "args"))
        return case_args();
    return 2;
}
