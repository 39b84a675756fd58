/* test_spec_parity — greedy speculative decoding emits exactly the target's
 * own greedy tokens (llm_generate on the same model), with the same stop
 * reason and the same final target position, on 20 prompts, in every
 * placement of the target.
 *
 *   test_spec_parity synth TYPE K [OPT...]     synthetic target (4 blocks)
 *                                              with its 1-block truncation
 *   test_spec_parity kjv K [OPT...]            the shipped trained pair
 *
 * OPT: "adaptive" (acceptance-driven k), "cost" (cost-aware k),
 * "drafter=model|ngram|hybrid|block" (an llm_drafter of that kind proposes;
 * block: a random head of block size 8 written for the target, whose
 * proposals are mostly rejected, which parity does not mind; default: the
 * draft session given to llm_spec_create), "shipped-head" (kjv, with
 * drafter=block: the trained head models/phasemark-kjv-block-f16.gguf,
 * whose rounds must then commit more than 2 tokens each: PyTorch measured
 * 2.83 tokens per target forward at b = 4 and 3.12 at b = 8 on held-out
 * chapters, models/README.md, where a random head commits 1.02; these
 * requests stop after 16 tokens, which cuts the last round short),
 * "shipped-head-q8" (the same with models/phasemark-kjv-block-q8_0.gguf,
 * the trained head re-encoded to Q8_0 by pm-modelwriter requant),
 * "tree=N" (drafter=block, monolithic: tree rounds of up to N nodes,
 * llm_spec_set_tree; still one head forward per round), "over-head"
 * (drafter=hybrid over a block head instead of the draft model: a random
 * head, or with shipped-head the trained one).
 *   test_spec_parity self synth TYPE K | self kjv K   the target drafts for itself:
 *                                              acceptance exactly 1.0
 *
 * The kjv cases also hold the output to models/golden.json's target
 * continuations (PyTorch, float32), an independent reference.
 *
 * Placements: the target session comes from k_placements[]; adding a
 * placement (two local shards, local + remote over shared memory, when
 * the layer split provides them) is one line there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block_files.h"
#include "pm_check.h"
#include "pm_kjv_prompts.h"
#include "spec_common.h"

#define N_PROMPTS PM_KJV_PROMPTS

typedef struct placement {
    const char *name;
    llm_session *(*make)(llm_model *m, int n_ctx, int n_batch, uint64_t req);
} placement;

/* Layer-split placements of the target (docs/split.md): half the layers
 * per shard, both local, or the second half in a shard daemon the session
 * spawns, over the shared-memory transport. */
#ifdef PM_SPEC_SPLIT_PLACEMENTS
static llm_session *split_session(llm_model *m, int n_ctx, int n_batch, uint64_t req,
                                  const char *second)
{
    llm_model_info info;
    llm_model_get_info(m, &info);
    int h = info.n_layers / 2;
    if (h < 1)
        return sc_session(m, n_ctx, n_batch, req);
    char spec[128], err[512];
    snprintf(spec, sizeof spec, "0-%d@local,%d-%d@%s", h - 1, h, (int)info.n_layers - 1, second);
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = n_ctx;
    so.n_batch = n_batch;
    so.request = req;
    so.placement = spec;
    llm_session *s;
    if (llm_session_create(m, &so, &s, err, sizeof err) != 0) {
        fprintf(stderr, "session over %s: %s\n", spec, err);
        exit(1);
    }
    return s;
}

static llm_session *split_local2(llm_model *m, int n_ctx, int n_batch, uint64_t req)
{
    return split_session(m, n_ctx, n_batch, req, "local");
}

static llm_session *split_shared(llm_model *m, int n_ctx, int n_batch, uint64_t req)
{
    return split_session(m, n_ctx, n_batch, req, "spawn?transport=shared");
}
#endif

/* The split placements cost a daemon and its round trips per session, so
 * they run in their own executable (tests/split builds this file again
 * with PM_SPEC_SPLIT_PLACEMENTS), keeping this one's time as it was. */
static const placement k_placements[] = {
#ifndef PM_SPEC_SPLIT_PLACEMENTS
    {"monolithic", sc_session},
#else
    {"2 local shards", split_local2},
    {"local + remote (shared)", split_shared},
#endif
};

#define N_PLACEMENTS (sizeof k_placements / sizeof k_placements[0])

typedef struct prompt {
    int32_t ids[64];
    size_t n;
} prompt;

typedef struct setup {
    llm_model *target, *draft;
    prompt prompts[N_PROMPTS];
    int max_tokens, stop_at_eos, n_ctx;
    int self;
    int light; /* 6 prompts: self-drafting, and the KJV adaptive case */
    int drafter; /* LLM_DRAFTER_*, or -1: the draft session itself */
    char head[1024]; /* drafter=block, or hybrid over-head: the head's file */
    int over_head;    /* drafter=hybrid over a block head, not the draft */
    int shipped_head; /* the trained head, not a random one: 1 F16, 2 Q8_0 */
    int tree;         /* tree=N: tree rounds of up to N nodes (block) */
} setup;

/* 20 prompts of 1..17 ids over the synthetic vocabulary of 160. */
static void synth_prompts(setup *su)
{
    for (int p = 0; p < N_PROMPTS; p++) {
        prompt *pr = &su->prompts[p];
        pr->n = (size_t)(1 + (p * 7) % 17);
        for (size_t i = 0; i < pr->n; i++)
            pr->ids[i] = (int32_t)((p * 37 + (int)i * 11 + 5) % 160);
    }
}


static void kjv_prompts(setup *su)
{
    for (int p = 0; p < N_PROMPTS; p++) {
        prompt *pr = &su->prompts[p];
        const char *t = pm_kjv_prompts[p];
        REQUIRE(llm_model_tokenize(su->target, t, strlen(t), 1, pr->ids, 64, &pr->n) == 0);
    }
}

/* Golden greedy continuations of the first three prompts (models/golden.json,
 * computed by train/train.py in PyTorch float32 from the shipped weights). */
static const int32_t k_golden[3][32] = {
    {261, 1219, 4049, 270, 261, 1219, 372, 347, 1215, 4049, 722, 372, 387, 652, 301, 602,
     1261, 4049, 722, 372, 387, 652, 301, 602, 1261, 4049, 722, 372, 387, 652, 301, 602},
    {1271, 270, 1447, 368, 4049, 552, 4049, 454, 495, 271, 261, 495, 271, 438, 427, 493,
     325, 534, 4049, 270, 338, 301, 427, 1051, 271, 341, 427, 1442, 659, 4057, 300, 338},
    {2505, 325, 261, 495, 271, 438, 4049, 552, 4049, 454, 495, 271, 438, 4049, 270, 261,
     495, 271, 438, 4049, 270, 261, 495, 271, 438, 4049, 270, 261, 495, 271, 438, 4049},
};

/* Steps whose golden top-1 margin is below 0.12 logits: twice the engine's
 * Q8_0 logit error (docs/engine.md), so a different summation order (a
 * thread count, a shard split) may legitimately flip them. A first
 * difference there ends the comparison; anywhere else it is a failure. */
static const int k_tiny_margin[3][4] = {{6, 9, -1}, {0, 27, 28, -1}, {-1}};

static int tiny_margin(int which, int step)
{
    for (int i = 0; k_tiny_margin[which][i] >= 0; i++)
        if (k_tiny_margin[which][i] == step)
            return 1;
    return 0;
}

static int check_golden(llm_spec *sd, llm_session *t, llm_sampler *sp, const setup *su)
{
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = 32;
    gp.stop_at_eos = 0;
    int ok = 1;
    for (int p = 0; p < 3; p++) {
        sc_run r;
        CHECK_INT_EQ(sc_run_spec(sd, t, sp, su->prompts[p].ids, su->prompts[p].n, &gp, &r), 0);
        CHECK_INT_EQ((int)r.n, 32);
        for (int i = 0; i < 32 && i < (int)r.n; i++)
            if (r.ids[i] != k_golden[p][i]) {
                int flip = tiny_margin(p, i);
                fprintf(stderr, "golden prompt %d: token %d is %d, want %d%s\n", p, i,
                        (int)r.ids[i], (int)k_golden[p][i],
                        flip ? " (a near-tie in the reference: comparison ends)" : "");
                ok &= flip;
                break;
            }
    }
    CHECK(ok);
    return ok;
}

static void run_placement(const placement *pl, setup *su, const llm_spec_params *sprm, int golden)
{
    llm_session *ar = pl->make(su->target, su->n_ctx, 64, 1);
    llm_session *t = pl->make(su->target, su->n_ctx, 64, 2);
    llm_session *d = sc_session(su->draft, su->n_ctx, 64, 3);
    llm_sampler *sp = sc_sampler(su->target, 0.0f, 0, 1.0f, 1);
    llm_spec *sd;
    llm_drafter *dr = NULL;
    char err[256];
    llm_spec_params sp2 = *sprm;
    if (su->drafter >= 0) {
        llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
        dp.kind = su->drafter;
        dp.draft = su->over_head ? NULL : d;
        dp.head_path = su->head[0] ? su->head : NULL;
        dp.target = t;
        if (llm_drafter_create(&dp, &dr, err, sizeof err) != 0) {
            fprintf(stderr, "llm_drafter_create: %s\n", err);
            exit(1);
        }
        sp2.drafter = dr;
    }
    int rc = llm_spec_create(t, d, &sp2, &sd, err, sizeof err);
    if (rc == 0 && su->tree)
        rc = llm_spec_set_tree(sd, su->tree, err, sizeof err);
    if (rc) {
        fprintf(stderr, "llm_spec_create: %s\n", err);
        exit(1);
    }
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = su->max_tokens;
    gp.stop_at_eos = su->stop_at_eos;
    /* Self-drafting needs no breadth (every round accepts all) and the
     * KJV adaptive case repeats the KJV k=4 case's prompts with another k
     * schedule, so they run the first 6 prompts (the sanitizer run of the
     * suite pays for every KJV token); the parity cases run all 20. */
    int n_prompts = su->light ? 6 : N_PROMPTS;
    int same = 0;
    for (int p = 0; p < n_prompts; p++) {
        sc_run a, b;
        char what[96];
        snprintf(what, sizeof what, "%s prompt %d", pl->name, p);
        CHECK_INT_EQ(sc_run_ar(ar, sp, su->prompts[p].ids, su->prompts[p].n, &gp, &a), 0);
        CHECK_INT_EQ(sc_run_spec(sd, t, sp, su->prompts[p].ids, su->prompts[p].n, &gp, &b), 0);
        same += sc_same(&a, &b, what);
    }
    CHECK_INT_EQ(same, n_prompts);
    llm_spec_stats st;
    llm_spec_get_stats(sd, &st);
    fprintf(stderr, "%s: rounds %llu drafted %llu accepted %llu (%.3f) tokens/round %.2f steps %llu\n",
            pl->name, (unsigned long long)st.rounds, (unsigned long long)st.drafted,
            (unsigned long long)st.accepted, st.acceptance, st.tokens_per_round,
            (unsigned long long)st.steps);
    CHECK(st.rounds > 0);
    CHECK_U64_EQ(st.committed, st.accepted + st.rounds);
    uint64_t by_rounds = 0, by_drafted = 0, by_accepted = 0;
    for (int i = 0; i < LLM_DRAFTER_COUNT; i++) {
        by_rounds += st.by[i].rounds;
        by_drafted += st.by[i].drafted;
        by_accepted += st.by[i].accepted;
    }
    CHECK_U64_EQ(by_rounds, st.rounds);
    CHECK_U64_EQ(by_drafted, st.drafted);
    CHECK_U64_EQ(by_accepted, st.accepted);
    if (su->drafter == LLM_DRAFTER_NGRAM)
        CHECK_U64_EQ(st.by[LLM_DRAFTER_MODEL].rounds, 0);
    if (su->over_head) {
        /* The n-gram's rounds and the head's, one head forward each. */
        CHECK_U64_EQ(st.by[LLM_DRAFTER_MODEL].rounds, 0);
        CHECK_U64_EQ(st.by[LLM_DRAFTER_NGRAM].rounds + st.by[LLM_DRAFTER_BLOCK].rounds, st.rounds);
        CHECK_U64_EQ(st.by[LLM_DRAFTER_BLOCK].forwards, st.by[LLM_DRAFTER_BLOCK].rounds);
        CHECK(st.by[LLM_DRAFTER_BLOCK].rounds > 0);
    }
    if (su->drafter == LLM_DRAFTER_BLOCK) {
        /* One head forward per round, every round the block's. */
        CHECK_U64_EQ(st.by[LLM_DRAFTER_BLOCK].rounds, st.rounds);
        CHECK_U64_EQ(st.by[LLM_DRAFTER_BLOCK].forwards, st.rounds);
        /* Trees: measured 2.89 (k 4, 8 nodes), 3.18 (k 8, 16) and 3.32
         * (k 8, 32) against the chain's 2.43 and 2.56. */
        if (su->shipped_head)
            CHECK(st.tokens_per_round > (su->tree ? 2.7 : 2.0));
    }
    if (su->self) {
        CHECK_U64_EQ(st.accepted, st.drafted);
        CHECK(st.acceptance == 1.0);
    }
    if (golden)
        check_golden(sd, t, sp, su);
    llm_spec_free(sd);
    llm_drafter_free(dr);
    llm_sampler_free(sp);
    llm_session_free(d);
    llm_session_free(t);
    llm_session_free(ar);
}

static int usage(void)
{
    fprintf(stderr, "usage: test_spec_parity synth TYPE K [OPT...] | kjv K [OPT...] | "
                    "self synth TYPE K | self kjv K\n"
                    "  OPT: adaptive | cost | drafter=model|ngram|hybrid|block | over-head\n");
    return 2;
}

/* "N" of tree=N: 1..32 into *out; -1 otherwise. */
static int tree_nodes(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 1 || v > 32)
        return -1;
    *out = (int)v;
    return 0;
}

/* The options after K into *adaptive and su->drafter; -1 on an unknown one. */
static int parse_opts(int argc, char **argv, int *adaptive, setup *su)
{
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "adaptive") == 0)
            *adaptive = LLM_SPEC_ADAPT_ACCEPT;
        else if (strcmp(argv[i], "cost") == 0)
            *adaptive = LLM_SPEC_ADAPT_COST;
        else if (strcmp(argv[i], "shipped-head") == 0)
            su->shipped_head = 1;
        else if (strcmp(argv[i], "shipped-head-q8") == 0)
            su->shipped_head = 2;
        else if (strcmp(argv[i], "over-head") == 0)
            su->over_head = 1;
        else if (strncmp(argv[i], "tree=", 5) == 0 && tree_nodes(argv[i] + 5, &su->tree) == 0)
            ;
        else if (strncmp(argv[i], "drafter=", 8) == 0 &&
                 (su->drafter = llm_drafter_kind_parse(argv[i] + 8)) >= 0)
            ;
        else
            return -1;
    }
    return 0;
}

static int parse_k(const char *s)
{
    char *end;
    long k = strtol(s, &end, 10);
    return *end || k < 1 || k > 63 ? -1 : (int)k;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return usage();
    setup su;
    memset(&su, 0, sizeof su);
    su.drafter = -1;
    char tp[512], dp[512];
    int synth = 0, k, golden = 0, adaptive = 0;
    const char *kind = argv[1];
    if (strcmp(kind, "self") == 0) {
        if (argc < 4)
            return usage();
        su.self = 1;
        kind = argv[2];
        argv++;
        argc--;
    }
    if (strcmp(kind, "synth") == 0) {
        if (argc < 4 || (k = parse_k(argv[3])) < 0)
            return usage();
        if (parse_opts(argc - 4, argv + 4, &adaptive, &su))
            return usage();
        sc_path(tp, sizeof tp, "parity_target");
        sc_path(dp, sizeof dp, "parity_draft");
        sc_write_synth_pair(su.self ? "f32" : argv[2], 4, 1, tp, dp);
        su.light = su.self;
        synth = 1;
        su.max_tokens = 32;
        su.n_ctx = 256;
    } else if (strcmp(kind, "kjv") == 0) {
        if ((k = parse_k(argv[2])) < 0)
            return usage();
        if (parse_opts(argc - 3, argv + 3, &adaptive, &su))
            return usage();
        su.light = su.self || adaptive == LLM_SPEC_ADAPT_ACCEPT;
        if (sc_kjv_paths(tp, dp, sizeof tp) != 0)
            PM_SKIP("the shipped KJV models are not in models/");
        su.max_tokens = 16;
        su.stop_at_eos = 1;
        su.n_ctx = 512;
        golden = 1;
    } else {
        return usage();
    }
    su.target = sc_open(tp);
    su.draft = su.self ? su.target : sc_open(dp);
    if (synth)
        synth_prompts(&su);
    else
        kjv_prompts(&su);
    if (su.over_head && su.drafter != LLM_DRAFTER_HYBRID)
        return usage();
    int wants_head = su.drafter == LLM_DRAFTER_BLOCK || su.over_head;
    if (wants_head && su.shipped_head) {
        const char *slash = strrchr(tp, '/');
        snprintf(su.head, sizeof su.head, "%.*s/phasemark-kjv-block-%s.gguf",
                 slash ? (int)(slash - tp) : 1, slash ? tp : ".",
                 su.shipped_head == 2 ? "q8_0" : "f16");
        if (synth || access(su.head, R_OK) != 0)
            PM_SKIP("the shipped block head is not in models/ (or the target is synthetic)");
    } else if (wants_head) {
        sc_path(su.head, sizeof su.head, "parity_head");
        bf_write_for(su.head, su.target, 8, 5);
    }
    llm_spec_params sprm = LLM_SPEC_PARAMS_INIT;
    sprm.k = k;
    sprm.adaptive = adaptive;
    /* The golden ids are checked once (monolithic); every placement is
     * held to the autoregressive run of the same placement. */
    for (size_t i = 0; i < N_PLACEMENTS; i++)
        run_placement(&k_placements[i], &su, &sprm, golden && i == 0);
    if (su.draft != su.target)
        llm_model_free(su.draft);
    llm_model_free(su.target);
    if (synth) {
        unlink(tp);
        unlink(dp);
    }
    if (su.head[0] && !su.shipped_head)
        unlink(su.head);
    return pm_check_result();
}
