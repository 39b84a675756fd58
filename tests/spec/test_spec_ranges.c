/* test_spec_ranges — the exact ranges a speculative request produces.
 *
 * This executable links the in-executable ROCTX recorder
 * (tests/common/pm_roctx_log.h) with exported symbols, so with
 * PHASEMARK=roctx the marker layer's process-global lookup finds it (as in
 * tests/engine/test_engine_ranges.c). Target: a monolithic
 * 2-block synthetic model, request id 7, prompt of 11 ids prefilled in
 * chunks of 4, k = 3, max_tokens = 12.
 *
 *   scripted   a proposer that knows the target's greedy continuation
 *              proposes a known number of correct tokens per round
 *              (3, 0, 2, 1), then wrong ones; the sequence is derived by
 *              hand below from the rules in docs/spec.md.
 *   ngram      the n-gram drafter (drafter=ngram leaves with no forward
 *              inside; plain steps where nothing matches) and
 *   hybrid     the hybrid with the target drafting for itself: the exact
 *              sequence derived from the target's output (expect_ranges),
 *              with pinned counts.
 *   block      the block drafter with a head whose output norm is zero, so
 *              its logits are all 0 and every proposal is token 0 (the
 *              first maximum): the exact sequence derived from the
 *              target's output as for ngram (expect_ranges), a head
 *              forward per round and nothing inside its pm.draft leaves.
 *   block_tree the same head with tree rounds of up to 6 nodes: its rows
 *              are uniform, so every tree holds the ids 0..3 at depth 1
 *              and, two rows deep or more, 0 and 1 under the first of
 *              them (draft_tree.h: ties go to the node added first); one
 *              pm.spec_decode per round (draft = the nodes) enclosing the
 *              pm.draft leaf and the verify's leaf of nodes + 1 tokens,
 *              the nodes counted as drafted.
 *   selfdraft  the target's own model drafts (acceptance 1): rounds of 3,
 *              3 and 2 drafts; the draft's forwards (its prompt prefill
 *              included) emit nothing inside the pm.draft leaves.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phasemark/mark.h"
#include "pm_check.h"
#include "pm_roctx_log.h"
#include "block_files.h"
#include "drafter.h"
#include "spec_common.h"


#define N_PROMPT 11
#define K 3
#define MAX_TOKENS 12
/* Pinned counts of the ngram and hybrid cases (see expect_ranges): the
 * n-gram drafter finds one match in this output (one round, nine plain
 * steps); the hybrid runs four rounds, one of them n-gram (accepted 3, 0,
 * 3, 1). */
#define NGRAM_ROUNDS 1
#define NGRAM_STEPS 9
#define HYBRID_ROUNDS 4
#define HYBRID_NGRAM 1
/* The block case: rounds of 3 drafts (2, then 1, near the end) that
 * commit one token each unless the output has 0s, then a plain step for
 * the last token: pinned from the output's values below. */
#define BLOCK_ROUNDS 10
/* block_tree: trees of up to 6 nodes; pinned as BLOCK_ROUNDS is (this
 * output, 119 23 119 23 119 31 130 76 123 5 52 12, has no id below 4, so
 * every tree is rejected at its root: acceptance and the kept rows are
 * held by test_spec_tree and the parity cases). */
#define TREE_NODES 6
#define TREE_ROUNDS 10

/* The scripted drafter: per round, `good[round]` correct tokens taken from
 * the target's greedy continuation, then wrong ones. */
typedef struct script {
    const int32_t *ref; /* the target's greedy continuation */
    size_t n_ref;
    int round;
} script;

static const int k_good[] = {3, 0, 2, 1};

static int scripted(void *user, const int32_t *hist, size_t n_hist, int32_t k, int32_t *out)
{
    script *s = user;
    (void)hist;
    size_t emitted = n_hist - N_PROMPT; /* hist ends with the last emitted token */
    int good = s->round < 4 ? k_good[s->round] : 0;
    s->round++;
    for (int32_t j = 0; j < k; j++) {
        size_t at = emitted + (size_t)j;
        int32_t right = at < s->n_ref ? s->ref[at] : 0;
        out[j] = j < good ? right : (right + 1) % 160;
    }
    return 0;
}

static void check_sequence(const char *const *want, const int *want_depth, int n_want)
{
    CHECK_INT_EQ(pm_roctx.n_push, n_want);
    CHECK_INT_EQ(pm_roctx.n_pop, n_want);
    CHECK_INT_EQ(pm_roctx.depth, 0);
    for (int i = 0; i < n_want && i < pm_roctx.n_push; i++) {
        CHECK_STR_EQ(pm_roctx.texts[i], want[i]);
        CHECK_INT_EQ(pm_roctx.depths[i], want_depth[i]);
    }
}

#define PREFILL_RANGES                                                                         \
    "pm.prefill mode=exact req=7 pos=0 tokens=4",                                              \
        "pm.layer_range mode=exact layers=0-1 shard=0 where=local backend=cpu req=7 tokens=4", \
        "pm.prefill mode=exact req=7 pos=4 tokens=4",                                          \
        "pm.layer_range mode=exact layers=0-1 shard=0 where=local backend=cpu req=7 tokens=4", \
        "pm.prefill mode=exact req=7 pos=8 tokens=3",                                          \
        "pm.layer_range mode=exact layers=0-1 shard=0 where=local backend=cpu req=7 tokens=3"
#define VERIFY(n) "pm.layer_range mode=verify layers=0-1 shard=0 where=local backend=cpu req=7 tokens=" #n

static int run_scripted(llm_model *m, const int32_t *prompt, const sc_run *ref)
{
    /* Tokens: 1 from the prefill; rounds of 3 drafts commit 4, 1 and 3
     * (9 so far); the fourth round may draft only 12 - 9 - 1 = 2 and
     * commits 2; the twelfth comes from a plain decode step of the token
     * at position 21 = 11 + 4 + 1 + 3 + 2. */
    static const char *const want[] = {
        PREFILL_RANGES,
        "pm.spec_decode mode=batched req=7 draft=3", "pm.draft req=7 tokens=3 drafter=custom", VERIFY(4),
        "pm.spec_decode mode=batched req=7 draft=3", "pm.draft req=7 tokens=3 drafter=custom", VERIFY(4),
        "pm.spec_decode mode=batched req=7 draft=3", "pm.draft req=7 tokens=3 drafter=custom", VERIFY(4),
        "pm.spec_decode mode=batched req=7 draft=2", "pm.draft req=7 tokens=2 drafter=custom", VERIFY(3),
        "pm.decode mode=decode req=7 pos=21",
        "pm.layer_range mode=decode layers=0-1 shard=0 where=local backend=cpu req=7 tokens=1",
    };
    static const int want_depth[] = {0, 1, 0, 1, 0, 1, 0, 1, 1, 0, 1, 1,
                                     0, 1, 1, 0, 1, 1, 0, 1};
    llm_session *t = sc_session(m, 64, 16, 7);
    llm_sampler *sp = sc_sampler(m, 0.0f, 0, 1.0f, 1);
    script sc = {ref->ids, ref->n, 0};
    llm_spec_params p = LLM_SPEC_PARAMS_INIT;
    p.k = K;
    p.propose = scripted;
    p.propose_user = &sc;
    llm_spec *sd;
    char err[256];
    REQUIRE(llm_spec_create(t, NULL, &p, &sd, err, sizeof err) == 0);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = MAX_TOKENS;
    gp.chunk = 4;
    sc_run r;
    pm_roctx_log_clear();
    CHECK_INT_EQ(sc_run_spec(sd, t, sp, prompt, N_PROMPT, &gp, &r), 0);
    check_sequence(want, want_depth, (int)(sizeof want / sizeof want[0]));
    CHECK(sc_same(ref, &r, "scripted"));
    llm_spec_stats st;
    llm_spec_get_stats(sd, &st);
    CHECK_U64_EQ(st.rounds, 4);
    CHECK_U64_EQ(st.drafted, 11);
    CHECK_U64_EQ(st.accepted, 6);
    CHECK_U64_EQ(st.committed, 10);
    CHECK_U64_EQ(st.steps, 1);
    CHECK_U64_EQ(st.generated, 12);
    CHECK_NEAR(st.acceptance, 6.0 / 11.0, 1e-12);
    CHECK_NEAR(st.tokens_per_round, 2.5, 1e-12);
    llm_spec_free(sd);
    llm_sampler_free(sp);
    llm_session_free(t);
    return 0;
}

static int run_selfdraft(llm_model *m, const int32_t *prompt, const sc_run *ref)
{
    /* Acceptance 1: rounds commit 4, 4, then 12 - 9 - 1 = 2 drafts and 3. */
    static const char *const want[] = {
        PREFILL_RANGES,
        "pm.spec_decode mode=batched req=7 draft=3", "pm.draft req=7 tokens=3 drafter=model", VERIFY(4),
        "pm.spec_decode mode=batched req=7 draft=3", "pm.draft req=7 tokens=3 drafter=model", VERIFY(4),
        "pm.spec_decode mode=batched req=7 draft=2", "pm.draft req=7 tokens=2 drafter=model", VERIFY(3),
    };
    static const int want_depth[] = {0, 1, 0, 1, 0, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1};
    llm_session *t = sc_session(m, 64, 16, 7);
    llm_session *d = sc_session(m, 64, 16, 99);
    llm_sampler *sp = sc_sampler(m, 0.0f, 0, 1.0f, 1);
    llm_spec_params p = LLM_SPEC_PARAMS_INIT;
    p.k = K;
    llm_spec *sd;
    char err[256];
    REQUIRE(llm_spec_create(t, d, &p, &sd, err, sizeof err) == 0);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = MAX_TOKENS;
    gp.chunk = 4;
    sc_run r;
    pm_roctx_log_clear();
    CHECK_INT_EQ(sc_run_spec(sd, t, sp, prompt, N_PROMPT, &gp, &r), 0);
    check_sequence(want, want_depth, (int)(sizeof want / sizeof want[0]));
    CHECK(sc_same(ref, &r, "selfdraft"));
    llm_spec_stats st;
    llm_spec_get_stats(sd, &st);
    CHECK_U64_EQ(st.rounds, 3);
    CHECK_U64_EQ(st.accepted, 8);
    CHECK_U64_EQ(st.steps, 0);
    /* Freed, the generator gives the draft session its ranges back. */
    llm_spec_free(sd);
    llm_session_reset(d);
    pm_roctx_log_clear();
    const float *lg;
    CHECK_INT_EQ(llm_decode(d, 5, &lg), 0);
    CHECK_INT_EQ(pm_roctx.n_push, 2);
    CHECK_STR_EQ(pm_roctx.texts[0], "pm.decode mode=decode req=99 pos=0");
    llm_sampler_free(sp);
    llm_session_free(d);
    llm_session_free(t);
    return 0;
}

/* ---- ngram and hybrid ------------------------------------------------ */

/* The ranges one request must produce, derived from the target's greedy
 * output by docs/spec.md's rules and the n-gram rule (drafter.c; its
 * proposals are checked on hand-worked histories in test_spec_drafter):
 * each round may draft K = min(k, max_tokens - generated - 1); the n-gram
 * lookup runs over prompt + output so far (suffixes of 4 down to 2
 * tokens); no proposal makes a plain step; a hybrid takes a match of 3 or
 * more, else its model, which here is the target itself and so has every
 * proposal accepted. A round's acceptance is the proposal's agreeing
 * prefix with the output. */
typedef struct expect {
    char texts[64][160];
    int depth[64];
    int n;
    int rounds, steps, ngram_rounds;
    int drafted;      /* tokens (tree nodes) proposed in all */
    int accepted[16]; /* per round */
} expect;

static void put(expect *e, int depth, const char *text)
{
    REQUIRE(e->n < 64);
    snprintf(e->texts[e->n], sizeof e->texts[0], "%s", text);
    e->depth[e->n++] = depth;
}

/* Accepted nodes of a block_tree round of `depth` rows at output index g
 * (the tree above). */
static int32_t tree_accepted(const sc_run *ref, size_t g, int32_t depth)
{
    int32_t y0 = ref->ids[g];
    if (y0 < 0 || y0 > 3)
        return 0;
    if (y0 != 0 || depth < 2)
        return 1;
    return ref->ids[g + 1] == 0 || ref->ids[g + 1] == 1 ? 2 : 1;
}

static void expect_ranges(int kind, const int32_t *prompt, const sc_run *ref, int tree,
                          expect *e)
{
    static const char *const prefill[] = {PREFILL_RANGES};
    int32_t hist[N_PROMPT + MAX_TOKENS];
    memcpy(hist, prompt, sizeof(int32_t) * N_PROMPT);
    memcpy(hist + N_PROMPT, ref->ids, sizeof(int32_t) * MAX_TOKENS);
    memset(e, 0, sizeof *e);
    for (int i = 0; i < 6; i++)
        put(e, i % 2, prefill[i]);
    size_t g = 1;
    unsigned pos = N_PROMPT;
    char t[160];
    while (g < MAX_TOKENS) {
        int32_t k = K < (int32_t)(MAX_TOKENS - g - 1) ? K : (int32_t)(MAX_TOKENS - g - 1);
        size_t start = 0;
        int32_t n = 0, m = 0;
        int ngram = 0;
        if (k > 0 && kind == LLM_DRAFTER_BLOCK) {
            n = k; /* within the head's block of 8 */
        } else if (k > 0) {
            m = pm__ngram_lookup(hist, N_PROMPT + g, 2, 4, k, &start, &n);
            ngram = kind == LLM_DRAFTER_NGRAM || (m >= 3 && n > 0);
            if (!ngram)
                n = k;
        }
        if (n == 0) {
            snprintf(t, sizeof t, "pm.decode mode=decode req=7 pos=%u", pos);
            put(e, 0, t);
            put(e, 1, "pm.layer_range mode=decode layers=0-1 shard=0 where=local backend=cpu req=7 "
                      "tokens=1");
            pos++, g++, e->steps++;
            continue;
        }
        int32_t a = 0;
        while (ngram && a < n && hist[start + (size_t)a] == ref->ids[g + (size_t)a])
            a++;
        while (kind == LLM_DRAFTER_BLOCK && a < n && ref->ids[g + (size_t)a] == 0)
            a++; /* the block head proposes token 0 throughout */
        if (!ngram && kind != LLM_DRAFTER_BLOCK)
            a = n;
        if (tree) { /* the tree's nodes: 4 in one row, else the budget */
            a = tree_accepted(ref, g, n);
            n = n == 1 ? 4 : tree;
        }
        snprintf(t, sizeof t, "pm.spec_decode mode=batched req=7 draft=%d", (int)n);
        put(e, 0, t);
        snprintf(t, sizeof t, "pm.draft req=7 tokens=%d drafter=%s", (int)n,
                 kind == LLM_DRAFTER_BLOCK ? "block" : ngram ? "ngram" : "model");
        put(e, 1, t);
        snprintf(t, sizeof t,
                 "pm.layer_range mode=verify layers=0-1 shard=0 where=local backend=cpu req=7 "
                 "tokens=%d", (int)n + 1);
        put(e, 1, t);
        e->accepted[e->rounds++] = a;
        e->drafted += n;
        e->ngram_rounds += ngram;
        g += (size_t)a + 1;
        pos += (unsigned)a + 1;
    }
}

/* A request through an llm_drafter of `kind` (hybrid: the target drafts
 * for itself), held to expect_ranges and to pinned counts. */
static int run_drafter(llm_model *m, int kind, const int32_t *prompt, const sc_run *ref,
                       int want_rounds, int want_steps, int want_ngram, int tree)
{
    expect e;
    expect_ranges(kind, prompt, ref, tree, &e);
    fprintf(stderr, "%s: %d rounds (%d ngram), %d steps; accepted", llm_drafter_kind_name(kind),
            e.rounds, e.ngram_rounds, e.steps);
    for (int i = 0; i < e.rounds; i++)
        fprintf(stderr, " %d", e.accepted[i]);
    fprintf(stderr, "\n");
    CHECK_INT_EQ(e.rounds, want_rounds);
    CHECK_INT_EQ(e.steps, want_steps);
    CHECK_INT_EQ(e.ngram_rounds, want_ngram);
    llm_session *t = sc_session(m, 64, 16, 7);
    llm_session *d = kind == LLM_DRAFTER_HYBRID ? sc_session(m, 64, 16, 99) : NULL;
    llm_sampler *sp = sc_sampler(m, 0.0f, 0, 1.0f, 1);
    llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
    dp.kind = kind;
    dp.draft = d;
    char hp[512] = "";
    if (kind == LLM_DRAFTER_BLOCK) {
        llm_model_info info;
        llm_model_get_info(m, &info);
        bf_spec bs = bf_default((uint32_t)info.dim, (uint32_t)info.n_vocab,
                                (uint32_t)info.n_layers);
        bs.zero = "output_norm.weight";
        sc_path(hp, sizeof hp, "ranges_head");
        REQUIRE(bf_write(hp, &bs) == 0);
        dp.head_path = hp;
        dp.target = t;
    }
    llm_drafter *dr;
    char err[256];
    REQUIRE(llm_drafter_create(&dp, &dr, err, sizeof err) == 0);
    llm_spec_params p = LLM_SPEC_PARAMS_INIT;
    p.k = K;
    p.drafter = dr;
    llm_spec *sd;
    REQUIRE(llm_spec_create(t, NULL, &p, &sd, err, sizeof err) == 0);
    if (tree)
        REQUIRE(llm_spec_set_tree(sd, tree, err, sizeof err) == 0);
    if (tree)
        REQUIRE(llm_spec_set_tree(sd, tree, err, sizeof err) == 0);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = MAX_TOKENS;
    gp.chunk = 4;
    sc_run r;
    pm_roctx_log_clear();
    CHECK_INT_EQ(sc_run_spec(sd, t, sp, prompt, N_PROMPT, &gp, &r), 0);
    const char *want[64];
    for (int i = 0; i < e.n; i++)
        want[i] = e.texts[i];
    check_sequence(want, e.depth, e.n);
    CHECK(sc_same(ref, &r, llm_drafter_kind_name(kind)));
    llm_spec_stats st;
    llm_spec_get_stats(sd, &st);
    CHECK_U64_EQ(st.rounds, (uint64_t)e.rounds);
    CHECK_U64_EQ(st.steps, (uint64_t)e.steps);
    CHECK_U64_EQ(st.by[LLM_DRAFTER_NGRAM].rounds, (uint64_t)e.ngram_rounds);
    CHECK_U64_EQ(st.by[LLM_DRAFTER_NGRAM].forwards, 0);
    if (kind == LLM_DRAFTER_BLOCK) {
        CHECK_U64_EQ(st.by[LLM_DRAFTER_BLOCK].rounds, (uint64_t)e.rounds);
        CHECK_U64_EQ(st.by[LLM_DRAFTER_BLOCK].forwards, (uint64_t)e.rounds);
        int acc = 0;
        for (int i = 0; i < e.rounds; i++)
            acc += e.accepted[i];
        CHECK_U64_EQ(st.accepted, (uint64_t)acc);
        CHECK_U64_EQ(st.drafted, (uint64_t)e.drafted);
        unlink(hp);
    }
    llm_spec_free(sd);
    llm_drafter_free(dr);
    llm_sampler_free(sp);
    llm_session_free(d);
    llm_session_free(t);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
#ifdef PHASEMARK_DISABLED
    PM_SKIP("markers are compiled out (PHASEMARK_MARKERS=OFF)");
#endif
    if (setenv("PHASEMARK", "roctx", 1) != 0)
        return 1;
    REQUIRE(pm_enabled() == 1);
    char tp[512], dp[512];
    sc_path(tp, sizeof tp, "ranges_target");
    sc_path(dp, sizeof dp, "ranges_draft");
    sc_write_synth_pair("f32", 2, 1, tp, dp);
    llm_model *m = sc_open(tp);
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++)
        prompt[i] = i + 3;
    /* The reference: the target alone, greedy. */
    llm_session *ar = sc_session(m, 64, 16, 7);
    llm_sampler *sp = sc_sampler(m, 0.0f, 0, 1.0f, 1);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = MAX_TOKENS;
    gp.chunk = 4;
    sc_run ref;
    REQUIRE(sc_run_ar(ar, sp, prompt, N_PROMPT, &gp, &ref) == 0);
    REQUIRE(ref.n == MAX_TOKENS);
    if (strcmp(argv[1], "scripted") == 0)
        run_scripted(m, prompt, &ref);
    else if (strcmp(argv[1], "ngram") == 0)
        run_drafter(m, LLM_DRAFTER_NGRAM, prompt, &ref, NGRAM_ROUNDS, NGRAM_STEPS, NGRAM_ROUNDS,
                    0);
    else if (strcmp(argv[1], "hybrid") == 0)
        run_drafter(m, LLM_DRAFTER_HYBRID, prompt, &ref, HYBRID_ROUNDS, 0, HYBRID_NGRAM, 0);
    else if (strcmp(argv[1], "block") == 0)
        run_drafter(m, LLM_DRAFTER_BLOCK, prompt, &ref, BLOCK_ROUNDS, 1, 0, 0);
    else if (strcmp(argv[1], "block_tree") == 0)
        run_drafter(m, LLM_DRAFTER_BLOCK, prompt, &ref, TREE_ROUNDS, 1, 0, TREE_NODES);
    else if (strcmp(argv[1], "selfdraft") == 0)
        run_selfdraft(m, prompt, &ref);
    else
        return 2;
    llm_sampler_free(sp);
    llm_session_free(ar);
    llm_model_free(m);
    unlink(tp);
    unlink(dp);
    return pm_check_result();
}
