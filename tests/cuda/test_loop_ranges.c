/* test_loop_ranges — the exact ranges the device loop (cuda_loop.h) emits.
 *
 * Linked with the in-executable ROCTX recorder (tests/common/pm_roctx_log.h)
 * and exported symbols, run with PHASEMARK=roctx. KJV target (and draft)
 * on cuda:0, request id 7, the prompt in one prefill, max_tokens 12, no
 * EOS stop. Expected sequences are derived from docs/cuda.md's rules and
 * the target's greedy ids (llm_generate's, taken before markers are
 * read), never from the loop's own counters except where the rule says a
 * count is the launches' (model rounds launched past the stop are marked).
 *
 *   plain   the prefill's two ranges, then 11 x (pm.decode at its position,
 *           its mode=decode leaf at depth 1).
 *   model   k = 3: per launched round pm.spec_decode, then at depth 1 the
 *           drafter=model leaf (the draft's prompt prefill inside the
 *           first one emits nothing) and one verify leaf of 4 tokens.
 *   ngram   k = 4: the n-gram rule replayed over the reference ids gives
 *           each round's proposal length and acceptance: a round is
 *           pm.spec_decode + drafter=ngram leaf + verify leaf, no match a
 *           plain pm.decode with its leaf; with the lookup on the device,
 *           every launched round is a round of k = 4.
 *   ranges_block (its own case) k = 4 with the shipped block head: per
 *           launched round pm.spec_decode, the drafter=block leaf, one
 *           verify leaf of 5 tokens.
 *   ranges_hybrid (its own case) k = 4, hybrid over the shipped head: the
 *           n-gram rule replayed over the reference ids picks each round's
 *           drafter (a match of 3: ngram rounds of the proposal's length,
 *           else block rounds of 4); a block round's commit is the ids
 *           that arrived with it.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_loop.h"
#include "cuda_test.h"
#include "drafter.h"
#include "model.h"
#include "phasemark/engine.h"
#include "phasemark/mark.h"
#include "phasemark/spec.h"
#include "pm_roctx_log.h"
#include "session.h"
#include "synth.h"

#ifndef PM_REPO_MODELS
#define PM_REPO_MODELS "models"
#endif

#define MAX_TOKENS 12
#define REQ 7
#define WANT_MAX PM_ROCTX_LOG_MAX

typedef struct want {
    char texts[WANT_MAX][PM_RANGE_TEXT_MAX];
    int depths[WANT_MAX];
    int n;
} want;

static void put(want *w, int depth, const char *text)
{
    REQUIRE(w->n < WANT_MAX);
    snprintf(w->texts[w->n], sizeof w->texts[w->n], "%s", text);
    w->depths[w->n++] = depth;
}

static void put_layer(want *w, const char *mode, int tokens)
{
    char t[PM_RANGE_TEXT_MAX];
    snprintf(t, sizeof t,
             "pm.layer_range mode=%s layers=0-5 shard=0 where=local backend=cuda:0 req=%d tokens=%d",
             mode, REQ, tokens);
    put(w, 1, t);
}

static void put_prefill(want *w, int n)
{
    char t[PM_RANGE_TEXT_MAX];
    snprintf(t, sizeof t, "pm.prefill mode=exact req=%d pos=0 tokens=%d", REQ, n);
    put(w, 0, t);
    put_layer(w, "exact", n);
}

static void put_decode(want *w, uint32_t pos)
{
    char t[PM_RANGE_TEXT_MAX];
    snprintf(t, sizeof t, "pm.decode mode=decode req=%d pos=%u", REQ, (unsigned)pos);
    put(w, 0, t);
    put_layer(w, "decode", 1);
}

static void put_round(want *w, int k, const char *drafter)
{
    char t[PM_RANGE_TEXT_MAX];
    snprintf(t, sizeof t, "pm.spec_decode mode=batched req=%d draft=%d", REQ, k);
    put(w, 0, t);
    snprintf(t, sizeof t, "pm.draft req=%d tokens=%d drafter=%s", REQ, k, drafter);
    put(w, 1, t);
    put_layer(w, "verify", k + 1);
}

static void check_sequence(const want *w, const char *what)
{
    CHECK_INT_EQ(pm_roctx.n_push, w->n);
    CHECK_INT_EQ(pm_roctx.n_pop, w->n);
    CHECK_INT_EQ(pm_roctx.depth, 0);
    for (int i = 0; i < w->n && i < pm_roctx.n_push; i++) {
        if (strcmp(pm_roctx.texts[i], w->texts[i]) != 0 || pm_roctx.depths[i] != w->depths[i])
            fprintf(stderr, "%s: range %d: \"%s\" at %d, want \"%s\" at %d\n", what, i,
                    pm_roctx.texts[i], pm_roctx.depths[i], w->texts[i], w->depths[i]);
        CHECK_STR_EQ(pm_roctx.texts[i], w->texts[i]);
        CHECK_INT_EQ(pm_roctx.depths[i], w->depths[i]);
    }
}

typedef struct ids {
    int32_t v[64];
    size_t n;
} ids;

static int collect(void *user, int32_t tok)
{
    ids *o = user;
    REQUIRE(o->n < 64);
    o->v[o->n++] = tok;
    return 0;
}

static llm_model *open_on_cuda(const char *file)
{
    const char *dir = getenv("PHASEMARK_REPO_MODELS");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : PM_REPO_MODELS, file);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "skipped: %s not present\n", path);
        exit(77);
    }
    llm_model_options o = LLM_MODEL_OPTIONS_INIT;
    o.backend = "cuda:0";
    llm_model *m = NULL;
    char err[256];
    if (llm_model_open(path, &o, &m, err, sizeof err) != 0) {
        fprintf(stderr, "open %s: %s\n", path, err);
        exit(1);
    }
    return m;
}

/* The n-gram rounds' ranges: the lookup replayed over the reference ids
 * (the loop's rule: at most k ids, none past max_tokens). */
static void expect_ngram(want *w, const int32_t *prompt, size_t n, const ids *ref, int32_t k)
{
    int32_t hist[128];
    memcpy(hist, prompt, n * sizeof *prompt);
    hist[n] = ref->v[0];
    size_t n_hist = n + 1, emitted = 1;
    uint32_t pos = (uint32_t)n;
    while (emitted < MAX_TOKENS) {
        int32_t cut = k, left = MAX_TOKENS - (int32_t)emitted;
        if (left - 1 < cut)
            cut = left - 1;
        size_t start = 0;
        int32_t j = 0;
        if (cut <= 0 || pm__ngram_lookup(hist, n_hist, 2, 4, cut, &start, &j) == 0)
            j = 0;
        int32_t a = 0; /* proposals equal to the reference's continuation */
        while (a < j && hist[start + (size_t)a] == ref->v[emitted + (size_t)a])
            a++;
        if (j == 0)
            put_decode(w, pos);
        else
            put_round(w, j, "ngram");
        for (int32_t i = 0; i <= a && emitted < MAX_TOKENS; i++) {
            hist[n_hist++] = ref->v[emitted++];
            pos++;
        }
    }
}

static void ranges(void)
{
#ifdef PHASEMARK_DISABLED
    fprintf(stderr, "skipped: markers are compiled out\n");
    exit(77);
#endif
    if (setenv("PHASEMARK", "roctx", 1) != 0)
        exit(1);
    ct_require_device();
    llm_model *tm = open_on_cuda("phasemark-kjv-target-q8_0.gguf");
    llm_model *dm = open_on_cuda("phasemark-kjv-draft-f16.gguf");
    llm_session *t = synth_session(tm, 256, 32, REQ), *d = synth_session(dm, 256, 32, 2);
    llm_session *ref_s = synth_session(tm, 256, 32, REQ);
    llm_sampler *sp = NULL;
    REQUIRE(llm_sampler_create(NULL, tm->hp.n_vocab, &sp) == 0);
    llm_cuda_loop *l = NULL;
    char err[256];
    REQUIRE(llm_cuda_loop_create(t, d, &l, err, sizeof err) == 0);
    int32_t prompt[64];
    size_t n = 0;
    const char *text = "And it came to pass, when the king heard";
    REQUIRE(llm_model_tokenize(tm, text, strlen(text), 1, prompt, 64, &n) == 0);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = MAX_TOKENS;
    gp.stop_at_eos = 0;
    ids ref = {{0}, 0};
    REQUIRE(llm_generate(ref_s, sp, prompt, n, &gp, collect, &ref, NULL, NULL) == 0);
    REQUIRE(ref.n == MAX_TOKENS);

    static want w;
    ids got = {{0}, 0};
    pm_roctx_log_clear();
    REQUIRE(llm_cuda_loop_generate(l, sp, 0, prompt, n, &gp, collect, &got, NULL, NULL) == 0);
    w.n = 0;
    put_prefill(&w, (int)n);
    for (uint32_t i = 0; i + 1 < MAX_TOKENS; i++)
        put_decode(&w, (uint32_t)n + i);
    check_sequence(&w, "plain");
    CHECK_INT_EQ(memcmp(got.v, ref.v, sizeof ref.v), 0);

    llm_cuda_loop_stats s0, s1;
    llm_cuda_loop_get_stats(l, &s0);
    got.n = 0;
    pm_roctx_log_clear();
    REQUIRE(llm_cuda_loop_generate(l, sp, 3, prompt, n, &gp, collect, &got, NULL, NULL) == 0);
    llm_cuda_loop_get_stats(l, &s1);
    w.n = 0;
    put_prefill(&w, (int)n);
    for (uint64_t r = 0; r < s1.rounds - s0.rounds; r++)
        put_round(&w, 3, "model");
    check_sequence(&w, "model");
    CHECK(s1.rounds - s0.rounds >= 3); /* 11 tokens at most 4 a round */
    CHECK_INT_EQ(memcmp(got.v, ref.v, sizeof ref.v), 0);

    REQUIRE(llm_cuda_loop_set_drafter(l, LLM_DRAFTER_NGRAM, 2, 4) == 0);
    got.n = 0;
    pm_roctx_log_clear();
    REQUIRE(llm_cuda_loop_generate(l, sp, 4, prompt, n, &gp, collect, &got, NULL, NULL) == 0);
    w.n = 0;
    put_prefill(&w, (int)n);
    expect_ngram(&w, prompt, n, &ref, 4);
    check_sequence(&w, "ngram");
    CHECK_INT_EQ(memcmp(got.v, ref.v, sizeof ref.v), 0);

    /* The lookup on the device: every launched round is marked as one of
     * k = 4 (the host does not know the proposal's length). */
    REQUIRE(llm_cuda_loop_set_ngram_device(l, 1) == 0);
    llm_cuda_loop_get_stats(l, &s0);
    got.n = 0;
    pm_roctx_log_clear();
    REQUIRE(llm_cuda_loop_generate(l, sp, 4, prompt, n, &gp, collect, &got, NULL, NULL) == 0);
    llm_cuda_loop_get_stats(l, &s1);
    w.n = 0;
    put_prefill(&w, (int)n);
    for (uint64_t r = 0; r < s1.rounds - s0.rounds; r++)
        put_round(&w, 4, "ngram");
    check_sequence(&w, "device ngram");
    CHECK_INT_EQ(memcmp(got.v, ref.v, sizeof ref.v), 0);

    llm_cuda_loop_free(l);
    llm_sampler_free(sp);
    llm_session_free(t);
    llm_session_free(d);
    llm_session_free(ref_s);
    llm_model_free(tm);
    llm_model_free(dm);
}

/* The KJV target with the shipped block head loaded into a loop, markers
 * recorded (skips without markers, a device or the head). */
typedef struct block_env {
    llm_model *tm;
    llm_session *t, *ref_s;
    llm_sampler *sp;
    llm_cuda_loop *l;
} block_env;

static void block_open(block_env *e)
{
#ifdef PHASEMARK_DISABLED
    fprintf(stderr, "skipped: markers are compiled out\n");
    exit(77);
#endif
    if (setenv("PHASEMARK", "roctx", 1) != 0)
        exit(1);
    ct_require_device();
    char hp[1024];
    const char *dir = getenv("PHASEMARK_REPO_MODELS");
    snprintf(hp, sizeof hp, "%s/phasemark-kjv-block-f16.gguf", dir && *dir ? dir : PM_REPO_MODELS);
    if (access(hp, R_OK) != 0) {
        fprintf(stderr, "skipped: %s not present\n", hp);
        exit(77);
    }
    e->tm = open_on_cuda("phasemark-kjv-target-q8_0.gguf");
    e->t = synth_session(e->tm, 256, 32, REQ);
    e->ref_s = synth_session(e->tm, 256, 32, REQ);
    e->sp = NULL;
    REQUIRE(llm_sampler_create(NULL, e->tm->hp.n_vocab, &e->sp) == 0);
    e->l = NULL;
    char err[256];
    REQUIRE(llm_cuda_loop_create(e->t, NULL, &e->l, err, sizeof err) == 0);
    REQUIRE(llm_cuda_loop_set_block(e->l, hp) == 0);
}

static void block_close(block_env *e)
{
    llm_cuda_loop_free(e->l);
    llm_sampler_free(e->sp);
    llm_session_free(e->t);
    llm_session_free(e->ref_s);
    llm_model_free(e->tm);
}

/* Block rounds (shipped head, k = 4): the prefill's two ranges (its
 * features are copies inside the same forward), then per launched round
 * pm.spec_decode, the drafter=block leaf (the head's graph) and one
 * verify leaf of 5 tokens; the ids are llm_generate's. */
static void ranges_block(void)
{
    block_env e;
    block_open(&e);
    llm_model *tm = e.tm;
    llm_session *ref_s = e.ref_s;
    llm_sampler *sp = e.sp;
    llm_cuda_loop *l = e.l;
    int32_t prompt[64];
    size_t n = 0;
    const char *text = "And it came to pass, when the king heard";
    REQUIRE(llm_model_tokenize(tm, text, strlen(text), 1, prompt, 64, &n) == 0);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = MAX_TOKENS;
    gp.stop_at_eos = 0;
    ids ref = {{0}, 0};
    REQUIRE(llm_generate(ref_s, sp, prompt, n, &gp, collect, &ref, NULL, NULL) == 0);
    REQUIRE(ref.n == MAX_TOKENS);
    static want w;
    ids got = {{0}, 0};
    llm_cuda_loop_stats s0, s1;
    llm_cuda_loop_get_stats(l, &s0);
    pm_roctx_log_clear();
    REQUIRE(llm_cuda_loop_generate(l, sp, 4, prompt, n, &gp, collect, &got, NULL, NULL) == 0);
    llm_cuda_loop_get_stats(l, &s1);
    w.n = 0;
    put_prefill(&w, (int)n);
    for (uint64_t r = 0; r < s1.rounds - s0.rounds; r++)
        put_round(&w, 4, "block");
    check_sequence(&w, "block");
    CHECK(s1.rounds - s0.rounds >= 3); /* 11 tokens at most 5 a round */
    CHECK_INT_EQ(memcmp(got.v, ref.v, sizeof ref.v), 0);
    block_close(&e);
}

/* Ids with the number of ranges pushed when each arrived: a round's ids
 * are emitted after its ranges and before the next round's, so ids that
 * share a count are one round's commit. */
typedef struct burst_ids {
    int32_t v[64];
    int pushed[64];
    size_t n;
} burst_ids;

static int collect_burst(void *user, int32_t tok)
{
    burst_ids *o = user;
    REQUIRE(o->n < 64);
    o->pushed[o->n] = pm_roctx.n_push;
    o->v[o->n++] = tok;
    return 0;
}

/* Hybrid rounds (shipped head, k = 4): the prefill's two ranges, then per
 * round, replayed over the reference ids, the n-gram lookup (bounds 2..4,
 * at most k ids, none past max_tokens): a match of 3 or more is an n-gram
 * round of the proposal's length (its leaf drafter=ngram, the verify of
 * j + 1 tokens) that commits the proposals equal to the reference's
 * continuation and one more; a shorter match a block round of k (leaf
 * drafter=block, verify of 5 tokens), whose commit is the ids that
 * arrived with it (1..5); one token left without a match, a plain step. */
static void ranges_hybrid(void)
{
    block_env e;
    block_open(&e);
    llm_model *tm = e.tm;
    llm_session *ref_s = e.ref_s;
    llm_sampler *sp = e.sp;
    llm_cuda_loop *l = e.l;
    REQUIRE(llm_cuda_loop_set_drafter(l, LLM_DRAFTER_HYBRID, 2, 4) == 0);
    /* Two prompts: one that mostly does not repeat itself (block rounds),
     * and one that does: a short P, the target's own greedy continuation
     * C of P, then P again (without its BOS), so that its continuation is
     * C again and the lookup finds it (n-gram rounds). */
    const char *texts[] = {"And it came to pass, when the king heard", "And the king said unto"};
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = MAX_TOKENS;
    gp.stop_at_eos = 0;
    int ngram_rounds = 0, block_rounds = 0;
    for (int p = 0; p < 2; p++) {
        int32_t prompt[64];
        size_t n = 0;
        REQUIRE(llm_model_tokenize(tm, texts[p], strlen(texts[p]), 1, prompt, 64, &n) == 0);
        if (p == 1) {
            ids c = {{0}, 0};
            llm_session_reset(ref_s);
            REQUIRE(llm_generate(ref_s, sp, prompt, n, &gp, collect, &c, NULL, NULL) == 0);
            REQUIRE(2 * n - 1 + c.n <= 32); /* one prefill chunk (the batch) */
            memcpy(prompt + n, c.v, c.n * sizeof *c.v);
            memcpy(prompt + n + c.n, prompt + 1, (n - 1) * sizeof *prompt);
            n = 2 * n - 1 + c.n;
        }
        ids ref = {{0}, 0};
        llm_session_reset(ref_s);
        REQUIRE(llm_generate(ref_s, sp, prompt, n, &gp, collect, &ref, NULL, NULL) == 0);
        REQUIRE(ref.n == MAX_TOKENS);
        static burst_ids got;
        memset(&got, 0, sizeof got);
        pm_roctx_log_clear();
        REQUIRE(llm_cuda_loop_generate(l, sp, 4, prompt, n, &gp, collect_burst, &got, NULL,
                                       NULL) == 0);
        CHECK_U64_EQ(got.n, MAX_TOKENS);
        CHECK_INT_EQ(memcmp(got.v, ref.v, MAX_TOKENS * sizeof *ref.v), 0);
        static want w;
        w.n = 0;
        put_prefill(&w, (int)n);
        int32_t hist[128];
        memcpy(hist, prompt, n * sizeof *prompt);
        hist[n] = ref.v[0];
        size_t n_hist = n + 1, emitted = 1;
        uint32_t pos = (uint32_t)n;
        while (emitted < MAX_TOKENS) {
            int32_t cut = 4, left = MAX_TOKENS - (int32_t)emitted;
            if (left - 1 < cut)
                cut = left - 1;
            size_t start = 0;
            int32_t j = 0;
            if (cut <= 0 || pm__ngram_lookup(hist, n_hist, 2, 4, cut, &start, &j) < 3)
                j = 0;
            size_t take = 0;
            if (j > 0) {
                int32_t a = 0;
                while (a < j && hist[start + (size_t)a] == ref.v[emitted + (size_t)a])
                    a++;
                put_round(&w, j, "ngram");
                take = (size_t)a + 1;
                ngram_rounds++;
            } else if (left > 1) {
                put_round(&w, 4, "block");
                while (emitted + take < got.n && got.pushed[emitted + take] == got.pushed[emitted])
                    take++;
                CHECK(take >= 1 && take <= 5);
                block_rounds++;
            } else {
                put_decode(&w, pos);
                take = 1;
            }
            for (size_t i = 0; i < take && emitted < MAX_TOKENS; i++) {
                hist[n_hist++] = ref.v[emitted++];
                pos++;
            }
        }
        check_sequence(&w, texts[p]);
    }
    CHECK(ngram_rounds > 0);
    CHECK(block_rounds > 0);
    printf("hybrid ranges: %d n-gram rounds, %d block rounds as replayed\n", ngram_rounds,
           block_rounds);
    block_close(&e);
}

static const ct_case cases[] = {
    {"ranges", ranges}, {"ranges_block", ranges_block}, {"ranges_hybrid", ranges_hybrid}};

CT_MAIN(cases)
