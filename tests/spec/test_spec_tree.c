/* test_spec_tree — tree verification for the block drafter (issue 17).
 *
 *   mask TYPE   a hand-built tree of 8 nodes verified in one forward on a
 *               synthetic target of matrix type TYPE (f32, q8_0, or
 *               window: f32 with a sliding window of 6 positions, shorter
 *               than every node's keys, so the window cuts into them, or
 *               hd64: q8_0 with 64-wide heads, whose decode attention is
 *               the kernel set's register-blocked path): every
 *               node's logits row equals, byte for byte, the decode step
 *               at its depth's position after the prompt and its own
 *               ancestors, run on a fresh session.
 *   compact     after the verify, a path's cache rows are kept at the
 *               positions they were computed for (llm_session_keep_rows):
 *               the next decode steps equal a fresh session's that decoded
 *               the path, byte for byte; a malformed row list is refused.
 *   build       the tree grown from hand-made head logits (shape, tokens,
 *               and the score sum against the test's own softmax), and
 *               the greedy walk over a verdict.
 *   refuse      every refusal with its exact line: the node count, another
 *               drafter, adaptive k, a narrow target batch, a split target,
 *               temperature > 0, a malformed tree.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block_files.h"
#include "draft_tree.h"
#include "pm_check.h"
#include "session.h"
#include "spec_common.h"
#include "synth.h"

#define N_PROMPT 9
#define N_VOCAB 160

/* The hand-built tree: root 0; 1, 2 under it; 3, 4 under 1; 5 under 2;
 * 6 under 3; 7 under 6 (depth 4). */
static const int32_t k_parent[8] = {-1, 0, 0, 1, 1, 2, 3, 6};
static const int32_t k_tok[8] = {5, 17, 42, 99, 3, 150, 77, 8};

static llm_tree hand_tree(void)
{
    llm_tree t;
    memset(&t, 0, sizeof t);
    t.n = 8;
    for (int i = 0; i < 8; i++) {
        t.parent[i] = k_parent[i];
        t.depth[i] = i == 0 ? 0 : t.depth[k_parent[i]] + 1;
    }
    return t;
}

static void prompt_ids(int32_t *p)
{
    for (int i = 0; i < N_PROMPT; i++)
        p[i] = (int32_t)((i * 29 + 7) % N_VOCAB);
}

static llm_model *synth_target(const char *type, char *tp, size_t cap)
{
    char dp[512];
    sc_path(tp, cap, "tree_target");
    if (strcmp(type, "window") == 0 || strcmp(type, "hd64") == 0) {
        synth_spec sp = synth_default();
        sp.hp.n_layers = 4;
        if (strcmp(type, "window") == 0) {
            sp.hp.window = 6;
        } else {
            sp.hp.dim = 128;
            sp.hp.n_heads = 2;
            sp.hp.n_kv_heads = 1;
            sp.hp.ffn = 192;
            sp.type = synth_type("q8_0");
        }
        REQUIRE(synth_write(tp, &sp) == 0);
        return sc_open(tp);
    }
    sc_path(dp, sizeof dp, "tree_draft");
    sc_write_synth_pair(type, 4, 1, tp, dp);
    unlink(dp);
    return sc_open(tp);
}

/* The tree verify of hand_tree on s (prompt prefilled first): its logits
 * rows into out [8][N_VOCAB]. */
static void tree_logits(llm_session *s, const int32_t *prompt, float *out)
{
    llm_tree t = hand_tree();
    REQUIRE(llm_prefill(s, prompt, N_PROMPT, 0, NULL) == 0);
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.phase = PM_PHASE_VERIFY;
    fp.output = LLM_OUTPUT_LOGITS;
    fp.rows = 8;
    const float *lg = NULL;
    int rc = llm_forward_tree(s, &fp, k_tok, &t, &lg, NULL);
    if (rc)
        fprintf(stderr, "tree verify: %s\n", llm_session_error(s));
    REQUIRE(rc == 0 && lg);
    CHECK_INT_EQ((int)llm_session_pos(s), N_PROMPT + 8);
    memcpy(out, lg, sizeof(float) * 8 * N_VOCAB);
}

static int case_mask(const char *type)
{
    char tp[512];
    llm_model *m = synth_target(type, tp, sizeof tp);
    int32_t prompt[N_PROMPT];
    prompt_ids(prompt);
    static float rows[8 * N_VOCAB];
    llm_session *t = sc_session(m, 64, 16, 1);
    tree_logits(t, prompt, rows);
    llm_tree tr = hand_tree();
    llm_session *r = sc_session(m, 64, 16, 2);
    int same = 0;
    for (int i = 0; i < 8; i++) {
        int32_t path[LLM_TREE_MAX];
        int32_t d = llm_tree_path(&tr, i, path);
        llm_session_reset(r);
        REQUIRE(llm_prefill(r, prompt, N_PROMPT, 0, NULL) == 0);
        const float *lg = NULL;
        for (int32_t j = 0; j <= d; j++)
            REQUIRE(llm_decode(r, k_tok[path[j]], &lg) == 0);
        int eq = memcmp(lg, rows + (size_t)i * N_VOCAB, sizeof(float) * N_VOCAB) == 0;
        if (!eq)
            fprintf(stderr, "%s: node %d (depth %d) differs from its decode step\n", type, i,
                    (int)d);
        same += eq;
    }
    CHECK_INT_EQ(same, 8);
    llm_session_free(r);
    llm_session_free(t);
    llm_model_free(m);
    unlink(tp);
    return 0;
}

/* Keeps `path` (count nodes, root first) after the verify, then two
 * decode steps; the same two on a fresh session that decoded the path. */
static void compact_path(llm_model *m, const int32_t *prompt, const int32_t *path, int count)
{
    static float rows[8 * N_VOCAB], a[2][N_VOCAB];
    llm_session *t = sc_session(m, 64, 16, 1);
    tree_logits(t, prompt, rows);
    CHECK_INT_EQ(llm_session_keep_rows(t, N_PROMPT, path, count), 0);
    CHECK_INT_EQ(llm_session_truncate(t, N_PROMPT + (uint32_t)count), 0);
    const float *lg = NULL;
    REQUIRE(llm_decode(t, 33, &lg) == 0);
    memcpy(a[0], lg, sizeof a[0]);
    REQUIRE(llm_decode(t, 120, &lg) == 0);
    memcpy(a[1], lg, sizeof a[1]);
    llm_session *r = sc_session(m, 64, 16, 2);
    REQUIRE(llm_prefill(r, prompt, N_PROMPT, 0, NULL) == 0);
    for (int j = 0; j < count; j++)
        REQUIRE(llm_decode(r, k_tok[path[j]], &lg) == 0);
    REQUIRE(llm_decode(r, 33, &lg) == 0);
    CHECK(memcmp(lg, a[0], sizeof a[0]) == 0);
    REQUIRE(llm_decode(r, 120, &lg) == 0);
    CHECK(memcmp(lg, a[1], sizeof a[1]) == 0);
    CHECK_INT_EQ((int)llm_session_pos(t), (int)llm_session_pos(r));
    llm_session_free(r);
    llm_session_free(t);
}

static int case_compact(void)
{
    char tp[512];
    llm_model *m = synth_target("q8_0", tp, sizeof tp);
    int32_t prompt[N_PROMPT];
    prompt_ids(prompt);
    static const int32_t deep[5] = {0, 1, 3, 6, 7}; /* rows 3, 6, 7 move to 2, 3, 4 */
    static const int32_t side[3] = {0, 2, 5};       /* rows 2, 5 move to 1, 2 */
    static const int32_t root[1] = {0};
    compact_path(m, prompt, deep, 5);
    compact_path(m, prompt, side, 3);
    compact_path(m, prompt, root, 1);
    /* Out of order, below its index, or past the position: nothing moves. */
    static float rows[8 * N_VOCAB];
    llm_session *t = sc_session(m, 64, 16, 1);
    tree_logits(t, prompt, rows);
    static const int32_t bad_order[3] = {0, 5, 2}, bad_low[2] = {0, 0}, bad_past[2] = {0, 8};
    CHECK_INT_EQ(llm_session_keep_rows(t, N_PROMPT, bad_order, 3), LLM_EINVAL);
    CHECK_STR_EQ(llm_session_error(t),
                 "keep rows: row 2 (2) is out of order or past position 17");
    CHECK_INT_EQ(llm_session_keep_rows(t, N_PROMPT, bad_low, 2), LLM_EINVAL);
    CHECK_INT_EQ(llm_session_keep_rows(t, N_PROMPT, bad_past, 2), LLM_EINVAL);
    CHECK_STR_EQ(llm_session_error(t),
                 "keep rows: row 1 (8) is out of order or past position 17");
    llm_session_free(t);
    llm_model_free(m);
    unlink(tp);
    return 0;
}

static int case_build(void)
{
    /* Row 0 ranks ids 1 and 3 (tied at 2, the lower first), 2, then 0
     * (tied with 5 at 0); row 1 puts 0 far ahead. */
    static const float lg[2][6] = {{0, 2, 1, 2, -1, 0}, {3, 0, 0, 0, 0, 0}};
    double s0 = 2 * exp(2.0) + exp(1.0) + 2 + exp(-1.0), s1 = exp(3.0) + 5;
    double p1 = exp(2.0) / s0, p2 = exp(1.0) / s0, q0 = exp(3.0) / s1;
    llm_tree t;
    int32_t tok[LLM_TREE_MAX];
    double sum = 0.0;
    /* Best first: 1 (p1), 3 (p1), 0 under node 1 (p1 q0, before node 2's
     * equal child), 0 under node 2, then 2 (p2) under the root. */
    pm__tree_build(&lg[0][0], 2, 6, 5, 4, &t, tok, &sum);
    static const int32_t want_parent[6] = {-1, 0, 0, 1, 2, 0};
    static const int32_t want_depth[6] = {0, 1, 1, 2, 2, 1};
    static const int32_t want_tok[6] = {0, 1, 3, 0, 0, 2};
    CHECK_INT_EQ(t.n, 6);
    CHECK_INT_EQ(llm_tree_valid(&t), 0);
    for (int i = 0; i < 6 && i < t.n; i++) {
        CHECK_INT_EQ(t.parent[i], want_parent[i]);
        CHECK_INT_EQ(t.depth[i], want_depth[i]);
        if (i > 0)
            CHECK_INT_EQ(tok[i], want_tok[i]);
    }
    CHECK_NEAR(sum, 2 * p1 + 2 * p1 * q0 + p2, 1e-12);
    /* One row of width 2 holds two nodes, whatever the budget. */
    pm__tree_build(&lg[0][0], 1, 6, 30, 2, &t, tok, NULL);
    CHECK_INT_EQ(t.n, 3);
    CHECK_INT_EQ(tok[1], 1);
    CHECK_INT_EQ(tok[2], 3);
    /* The verdict: the root's argmax 3 is node 2, node 2's 0 is node 4,
     * node 4's 5 has no child there. */
    pm__tree_build(&lg[0][0], 2, 6, 5, 4, &t, tok, NULL);
    tok[0] = 9;
    static const int32_t vgreedy[6] = {3, 1, 0, 4, 5, 4};
    int32_t path[LLM_TREE_MAX], last = -1;
    CHECK_INT_EQ(pm__tree_accept(&t, tok, vgreedy, path, &last), 2);
    CHECK_INT_EQ(path[0], 0);
    CHECK_INT_EQ(path[1], 2);
    CHECK_INT_EQ(path[2], 4);
    CHECK_INT_EQ(last, 5);
    static const int32_t none[6] = {4, 0, 0, 0, 0, 0};
    CHECK_INT_EQ(pm__tree_accept(&t, tok, none, path, &last), 0);
    CHECK_INT_EQ(last, 4);
    return 0;
}

/* A generator over t with a drafter of `kind` (block: a random head). */
static llm_spec *make_spec(llm_session *t, int kind, int adaptive, const char *head,
                           llm_drafter **dr)
{
    llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
    dp.kind = kind;
    dp.head_path = kind == LLM_DRAFTER_BLOCK ? head : NULL;
    dp.target = kind == LLM_DRAFTER_BLOCK ? t : NULL;
    char err[256];
    if (llm_drafter_create(&dp, dr, err, sizeof err) != 0) {
        fprintf(stderr, "drafter: %s\n", err);
        exit(1);
    }
    llm_spec_params p = LLM_SPEC_PARAMS_INIT;
    p.k = 4;
    p.adaptive = adaptive;
    p.drafter = *dr;
    llm_spec *sd;
    if (llm_spec_create(t, NULL, &p, &sd, err, sizeof err) != 0) {
        fprintf(stderr, "spec: %s\n", err);
        exit(1);
    }
    return sd;
}

static void expect_refusal(llm_session *t, int kind, int adaptive, const char *head, int nodes,
                           int want_rc, const char *want)
{
    llm_drafter *dr;
    llm_spec *sd = make_spec(t, kind, adaptive, head, &dr);
    char err[256] = "";
    CHECK_INT_EQ(llm_spec_set_tree(sd, nodes, err, sizeof err), want_rc);
    CHECK_STR_EQ(err, want);
    llm_spec_free(sd);
    llm_drafter_free(dr);
}

static int case_refuse(void)
{
    char tp[512], hp[512];
    llm_model *m = synth_target("f32", tp, sizeof tp);
    sc_path(hp, sizeof hp, "tree_head");
    bf_write_for(hp, m, 8, 3);
    llm_session *t = sc_session(m, 64, 16, 1);
    expect_refusal(t, LLM_DRAFTER_BLOCK, 0, hp, 33, LLM_EINVAL,
                   "spec: a draft tree of 33 nodes: 1..32 may be (0: off)");
    expect_refusal(t, LLM_DRAFTER_BLOCK, 0, hp, -1, LLM_EINVAL,
                   "spec: a draft tree of -1 nodes: 1..32 may be (0: off)");
    expect_refusal(t, LLM_DRAFTER_NGRAM, 0, hp, 8, LLM_EINVAL,
                   "spec: a draft tree needs the block drafter, not ngram");
    expect_refusal(t, LLM_DRAFTER_BLOCK, LLM_SPEC_ADAPT_ACCEPT, hp, 8, LLM_EINVAL,
                   "spec: a draft tree takes a fixed k (adaptive k is on)");
    expect_refusal(t, LLM_DRAFTER_BLOCK, 0, hp, 16, LLM_EINVAL,
                   "spec: a draft tree of 16 nodes needs a target batch of 17 (it has 16)");
    /* A split of local CPU shards takes trees (each span reads the
     * forward's tree; tests/split runs its parity); a remote shard is
     * refused there, where a daemon can be spawned. */
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = 64;
    so.n_batch = 16;
    so.placement = "0-1@local,2-3@local";
    llm_session *split;
    char err[256];
    REQUIRE(llm_session_create(m, &so, &split, err, sizeof err) == 0);
    llm_drafter *sdr;
    llm_spec *ssd = make_spec(split, LLM_DRAFTER_BLOCK, 0, hp, &sdr);
    CHECK_INT_EQ(llm_spec_set_tree(ssd, 8, err, sizeof err), 0);
    llm_spec_free(ssd);
    llm_drafter_free(sdr);
    llm_session_free(split);
    /* Temperature > 0: llm_spec_generate refuses before any forward. */
    llm_drafter *dr;
    llm_spec *sd = make_spec(t, LLM_DRAFTER_BLOCK, 0, hp, &dr);
    CHECK_INT_EQ(llm_spec_set_tree(sd, 8, err, sizeof err), 0);
    llm_sampler *sp = sc_sampler(m, 0.7f, 0, 1.0f, 1);
    int32_t prompt[N_PROMPT];
    prompt_ids(prompt);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = 8;
    size_t n_gen = 99;
    CHECK_INT_EQ(llm_spec_generate(sd, sp, prompt, N_PROMPT, &gp, NULL, NULL, &n_gen, NULL),
                 LLM_EINVAL);
    CHECK_STR_EQ(llm_spec_error(sd), "a draft tree verifies greedy decoding only (temperature 0.7)");
    CHECK_INT_EQ((int)n_gen, 0);
    CHECK_INT_EQ((int)llm_session_pos(t), 0);
    /* Back to chains: the same generator runs. */
    CHECK_INT_EQ(llm_spec_set_tree(sd, 0, err, sizeof err), 0);
    CHECK_INT_EQ(llm_spec_generate(sd, sp, prompt, N_PROMPT, &gp, NULL, NULL, &n_gen, NULL), 0);
    CHECK_INT_EQ((int)n_gen, 8);
    llm_sampler_free(sp);
    llm_spec_free(sd);
    llm_drafter_free(dr);
    /* A malformed tree: a parent after its child. */
    llm_session_reset(t);
    REQUIRE(llm_prefill(t, prompt, N_PROMPT, 0, NULL) == 0);
    llm_tree bad = hand_tree();
    bad.parent[2] = 5;
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.phase = PM_PHASE_VERIFY;
    fp.output = LLM_OUTPUT_LOGITS;
    fp.rows = 8;
    const float *lg = NULL;
    CHECK_INT_EQ(llm_forward_tree(t, &fp, k_tok, &bad, &lg, NULL), LLM_EINVAL);
    CHECK_STR_EQ(llm_session_error(t), "tree verify: the tree is malformed");
    llm_tree good = hand_tree();
    fp.phase = PM_PHASE_EXACT;
    CHECK_INT_EQ(llm_forward_tree(t, &fp, k_tok, &good, &lg, NULL), LLM_EINVAL);
    CHECK_STR_EQ(llm_session_error(t), "tree verify: phase 1 is not verify");
    CHECK_INT_EQ((int)llm_session_pos(t), N_PROMPT);
    llm_session_free(t);
    llm_model_free(m);
    unlink(hp);
    unlink(tp);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "mask") == 0)
        case_mask(argv[2]);
    else if (argc == 2 && strcmp(argv[1], "compact") == 0)
        case_compact();
    else if (argc == 2 && strcmp(argv[1], "build") == 0)
        case_build();
    else if (argc == 2 && strcmp(argv[1], "refuse") == 0)
        case_refuse();
    else {
        fprintf(stderr, "usage: test_spec_tree mask f32|q8_0 | compact | build | refuse\n");
        return 2;
    }
    return pm_check_result();
}
