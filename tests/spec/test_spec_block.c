/* test_spec_block — the block drafter's head (issue 17): its forward
 * against an independent computation, its context cache, and every
 * refusal of a head file.
 *
 *   hand      a tiny head (width 8, one layer, 2 heads over 1 kv head, ffn
 *             4, reading target layers 1 then 0) with chosen weights runs
 *             over the target's features of a 5-token prompt; its 4 rows
 *             of logits are held to this file's own double-precision
 *             computation of the head's formula (BLOCK.md), from the
 *             weights' formula, the target's embedding and output read
 *             from its file, and the features; the drafter's proposals are
 *             those rows' argmax
 *   crop      a forward after context positions were appended, cut back
 *             and replaced equals, bit for bit, a forward of a fresh head
 *             fed the surviving history only; the drafter drops pending
 *             rows past what the target kept
 *   stage     committed rows arriving as the generator hands them over (a
 *             prompt of 4, a verify of 3 of which 1 was kept, then 4
 *             plain steps) reach the head's context in one append at the
 *             proposal (the drafter reports 9 rows fed there), and the
 *             proposals are those of a fresh head fed all 9 at once
 *   refuse_*  a head that does not fit the target or is malformed or
 *             truncated is refused with exactly one line naming it
 *   target    a generator refuses a block drafter made for another target
 *   continue  three requests on one target without a reset (the first
 *             ending at a stop token, which the cache keeps) give the
 *             tokens and positions llm_generate gives, greedy: the
 *             features of each new prompt join the head's context after
 *             what the earlier requests committed
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block_files.h"
#include "block_head.h"
#include "drafter.h"
#include "gguf.h"
#include "model.h"
#include "pm_check.h"
#include "quant.h"
#include "spec_common.h"
#include "synth.h"

/* ---- the hand-computed forward ----------------------------------------- */

#define HD_DIM 8
#define HD_VOCAB 16
#define HD_FFN 4
#define HD_HEADS 2
#define HD_KV 1
#define HD_HDIM 4
#define HD_CTX 5 /* context positions: a prompt of 6 tokens, the last not fed */
#define HD_ROWS 4

static unsigned name_hash(const char *name)
{
    unsigned h = 0;
    for (const char *p = name; *p; p++)
        h += (unsigned char)*p;
    return h % 11u;
}

/* The chosen weights: small multiples of 1/10 for matrices, norms near 1,
 * mask_embd of order 1. */
static float chosen(void *user, const char *name, uint64_t row, uint64_t col)
{
    (void)user;
    unsigned h = name_hash(name);
    size_t len = strlen(name);
    int vector = len > 7 && (strstr(name, "norm") || strstr(name, "mask_embd"));
    if (vector && strstr(name, "mask_embd"))
        return (float)((int)((col * 5 + 1) % 7) - 3) / 3.0f;
    if (vector)
        return 1.0f + (float)((int)((col + h) % 5) - 2) / 10.0f;
    return (float)((int)((row * 7 + col * 3 + h) % 11) - 5) / 10.0f;
}

static double w_of(const char *name, int row, int col)
{
    return (double)chosen(NULL, name, (uint64_t)row, (uint64_t)col);
}

/* y[r] = sum_c W[r][c] x[c], W named `name` of rows x cols. */
static void ref_mat(const char *name, int rows, int cols, const double *x, double *y)
{
    for (int r = 0; r < rows; r++) {
        double s = 0.0;
        for (int c = 0; c < cols; c++)
            s += w_of(name, r, c) * x[c];
        y[r] = s;
    }
}

static void ref_rmsnorm(const char *wname, const double *x, double *y, int n, double eps)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double sc = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        y[i] = x[i] * sc * (wname ? w_of(wname, 0, i) : 1.0);
}

static void ref_rope(double *x, int n_heads, int pos)
{
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < HD_HDIM / 2; i++) {
            double a = pos * pow(10000.0, -2.0 * i / HD_HDIM);
            double *p = x + h * HD_HDIM + 2 * i;
            double x0 = p[0], x1 = p[1];
            p[0] = x0 * cos(a) - x1 * sin(a);
            p[1] = x0 * sin(a) + x1 * cos(a);
        }
}

/* The head's logits by BLOCK.md's formula. feat[l][j][d]: the target's
 * features of layer l (0, 1) at position j. */
static void ref_head(const float feat[2][HD_CTX][HD_DIM], const double *embd_last,
                     const float *out_w, double logits[HD_ROWS][HD_VOCAB])
{
    const double eps = 1e-5;
    static const int order[2] = {1, 0}; /* the head reads layer 1, then 0 */
    double c[HD_CTX][HD_DIM], x[HD_ROWS][HD_DIM];
    for (int j = 0; j < HD_CTX; j++) {
        double f[2 * HD_DIM], t[HD_DIM];
        for (int i = 0; i < 2; i++)
            for (int d = 0; d < HD_DIM; d++)
                f[i * HD_DIM + d] = feat[order[i]][j][d];
        ref_mat("fc.weight", HD_DIM, 2 * HD_DIM, f, t);
        ref_rmsnorm("fc_norm.weight", t, c[j], HD_DIM, eps);
    }
    for (int d = 0; d < HD_DIM; d++)
        x[0][d] = embd_last[d];
    for (int i = 1; i < HD_ROWS; i++)
        for (int d = 0; d < HD_DIM; d++)
            x[i][d] = w_of("mask_embd.weight", 0, d);
    /* Keys and values: context 0..HD_CTX-1, then the block rows. */
    enum { NK = HD_CTX + HD_ROWS };
    double k[NK][HD_KV * HD_HDIM], v[NK][HD_KV * HD_HDIM], q[HD_ROWS][HD_DIM];
    for (int j = 0; j < HD_CTX; j++) {
        double g[HD_DIM];
        ref_rmsnorm("blk.0.attn_norm.weight", c[j], g, HD_DIM, eps);
        ref_mat("blk.0.attn_k.weight", HD_KV * HD_HDIM, HD_DIM, g, k[j]);
        ref_mat("blk.0.attn_v.weight", HD_KV * HD_HDIM, HD_DIM, g, v[j]);
        ref_rope(k[j], HD_KV, j);
    }
    for (int i = 0; i < HD_ROWS; i++) {
        double h[HD_DIM];
        int pos = HD_CTX + i; /* n - 1 + i with n = HD_CTX + 1 */
        ref_rmsnorm("blk.0.attn_norm.weight", x[i], h, HD_DIM, eps);
        ref_mat("blk.0.attn_q.weight", HD_DIM, HD_DIM, h, q[i]);
        ref_mat("blk.0.attn_k.weight", HD_KV * HD_HDIM, HD_DIM, h, k[HD_CTX + i]);
        ref_mat("blk.0.attn_v.weight", HD_KV * HD_HDIM, HD_DIM, h, v[HD_CTX + i]);
        ref_rope(q[i], HD_HEADS, pos);
        ref_rope(k[HD_CTX + i], HD_KV, pos);
    }
    for (int i = 0; i < HD_ROWS; i++) {
        double att[HD_DIM], o[HD_DIM];
        for (int hh = 0; hh < HD_HEADS; hh++) {
            int kvh = hh / (HD_HEADS / HD_KV);
            double sc[NK], mx = -INFINITY, sum = 0.0;
            for (int p = 0; p < NK; p++) {
                double s = 0.0;
                for (int e = 0; e < HD_HDIM; e++)
                    s += q[i][hh * HD_HDIM + e] * k[p][kvh * HD_HDIM + e];
                sc[p] = s / sqrt((double)HD_HDIM);
                mx = sc[p] > mx ? sc[p] : mx;
            }
            for (int p = 0; p < NK; p++)
                sum += (sc[p] = exp(sc[p] - mx));
            for (int e = 0; e < HD_HDIM; e++) {
                double a = 0.0;
                for (int p = 0; p < NK; p++)
                    a += sc[p] / sum * v[p][kvh * HD_HDIM + e];
                att[hh * HD_HDIM + e] = a;
            }
        }
        ref_mat("blk.0.attn_output.weight", HD_DIM, HD_DIM, att, o);
        for (int d = 0; d < HD_DIM; d++)
            x[i][d] += o[d];
    }
    for (int i = 0; i < HD_ROWS; i++) {
        double u[HD_DIM], gt[HD_FFN], up[HD_FFN], dn[HD_DIM], xn[HD_DIM];
        ref_rmsnorm("blk.0.ffn_norm.weight", x[i], u, HD_DIM, eps);
        ref_mat("blk.0.ffn_gate.weight", HD_FFN, HD_DIM, u, gt);
        ref_mat("blk.0.ffn_up.weight", HD_FFN, HD_DIM, u, up);
        for (int e = 0; e < HD_FFN; e++)
            gt[e] = gt[e] / (1.0 + exp(-gt[e])) * up[e];
        ref_mat("blk.0.ffn_down.weight", HD_DIM, HD_FFN, gt, dn);
        for (int d = 0; d < HD_DIM; d++)
            x[i][d] += dn[d];
        ref_rmsnorm("output_norm.weight", x[i], xn, HD_DIM, eps);
        for (int t = 0; t < HD_VOCAB; t++) {
            double s = 0.0;
            for (int d = 0; d < HD_DIM; d++)
                s += (double)out_w[t * HD_DIM + d] * xn[d];
            logits[i][t] = s;
        }
    }
}

/* A tensor of the target file as f32 (synth writes these f32). */
static void read_f32(const char *path, const char *name, float *dst, size_t n)
{
    llm_gguf *g;
    char err[256];
    REQUIRE(llm_gguf_open(path, &g, err, sizeof err) == 0);
    const llm_gguf_tensor *t = llm_gguf_find_tensor(g, name);
    REQUIRE(t && t->type == LLM_TYPE_F32 && t->nbytes == n * sizeof(float));
    memcpy(dst, t->data, n * sizeof(float));
    llm_gguf_close(g);
}

static llm_model *hand_target(const char *path)
{
    synth_spec sp = synth_default();
    sp.hp.dim = HD_DIM;
    sp.hp.n_heads = 2;
    sp.hp.n_kv_heads = 1;
    sp.hp.ffn = 16;
    sp.hp.vocab = HD_VOCAB;
    sp.hp.n_layers = 2;
    REQUIRE(synth_write(path, &sp) == 0);
    return synth_open(path, 1);
}

/* The target's features of layers 0 and 1 over toks[0..n) into
 * feat[2][n][dim] (planes in ascending layer order). */
static void target_features(llm_session *s, const int32_t *toks, size_t n, float *feat,
                            size_t cap)
{
    static const int32_t layers[2] = {0, 1};
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.phase = PM_PHASE_EXACT;
    fp.output = LLM_OUTPUT_NONE;
    fp.n_features_layers = 2;
    fp.features_layers = layers;
    fp.features = feat;
    fp.features_cap = cap;
    REQUIRE(llm_forward(s, &fp, toks, n, NULL, NULL) == 0);
}

static int case_hand(void)
{
    char tp[512], hp[512];
    sc_path(tp, sizeof tp, "block_hand_target");
    sc_path(hp, sizeof hp, "block_hand_head");
    llm_model *m = hand_target(tp);
    bf_spec bs = bf_default(HD_DIM, HD_VOCAB, 2);
    bs.heads = HD_HEADS;
    bs.kv_heads = HD_KV;
    bs.ffn = HD_FFN;
    bs.block_size = HD_ROWS;
    bs.feat[0] = 1;
    bs.feat[1] = 0;
    bs.value = chosen;
    REQUIRE(bf_write(hp, &bs) == 0);

    static const int32_t prompt[HD_CTX + 1] = {3, 1, 4, 1, 5, 9};
    llm_session *s = sc_session(m, 32, 8, 1);
    float feat[2][HD_CTX][HD_DIM];
    target_features(s, prompt, HD_CTX, &feat[0][0][0], sizeof feat / sizeof(float));

    float embd[HD_VOCAB * HD_DIM], out_w[HD_VOCAB * HD_DIM];
    read_f32(tp, "token_embd.weight", embd, HD_VOCAB * HD_DIM);
    read_f32(tp, "output.weight", out_w, HD_VOCAB * HD_DIM);
    double last[HD_DIM];
    for (int d = 0; d < HD_DIM; d++)
        last[d] = embd[prompt[HD_CTX] * HD_DIM + d];
    double want[HD_ROWS][HD_VOCAB];
    ref_head((const float(*)[HD_CTX][HD_DIM])feat, last, out_w, want);

    /* The head on its own. */
    pm_block *b;
    char err[256];
    REQUIRE(pm__block_open(hp, m, 32, 1, &b, err, sizeof err) == 0);
    const pm_block_info *in = pm__block_info(b);
    CHECK_INT_EQ(in->n_feat, 2);
    CHECK_INT_EQ(in->feat_layers[0], 1);
    CHECK_INT_EQ(in->feat_layers[1], 0);
    CHECK_INT_EQ(in->block_size, HD_ROWS);
    CHECK_INT_EQ(in->head_dim, HD_HDIM);
    static const int32_t plane_of[2] = {1, 0};
    CHECK_INT_EQ(pm__block_append(b, &feat[0][0][0], plane_of, HD_CTX, HD_CTX), 0);
    CHECK_INT_EQ((int)pm__block_ctx_len(b), HD_CTX);
    const float *lg;
    CHECK_INT_EQ(pm__block_forward(b, prompt[HD_CTX], HD_ROWS, &lg), 0);
    double worst = 0.0;
    int32_t want_ids[HD_ROWS];
    for (int i = 0; i < HD_ROWS; i++) {
        int best = 0;
        for (int t = 0; t < HD_VOCAB; t++) {
            double e = fabs((double)lg[i * HD_VOCAB + t] - want[i][t]);
            worst = e > worst ? e : worst;
            CHECK_NEAR(lg[i * HD_VOCAB + t], want[i][t], 1e-4 * (1.0 + fabs(want[i][t])));
            best = want[i][t] > want[i][best] ? t : best;
        }
        want_ids[i] = best;
    }
    for (int i = 0; i < HD_ROWS; i++)
        fprintf(stderr, "hand: row %d logits %.4f %.4f %.4f %.4f ...\n", i, want[i][0], want[i][1],
                want[i][2], want[i][3]);
    fprintf(stderr, "hand: worst logit difference %.3g; rows' argmax %d %d %d %d\n", worst,
            (int)want_ids[0], (int)want_ids[1], (int)want_ids[2], (int)want_ids[3]);
    pm__block_free(b);

    /* Through the drafter: features from its buffer, proposals by
     * llm_drafter_propose (greedy). */
    llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
    dp.kind = LLM_DRAFTER_BLOCK;
    dp.head_path = hp;
    dp.target = s;
    llm_drafter *dr;
    REQUIRE(llm_drafter_create(&dp, &dr, err, sizeof err) == 0);
    const int32_t *layers;
    CHECK_INT_EQ(pm__drafter_feat_layers(dr, &layers), 2);
    CHECK_INT_EQ(layers[0], 0);
    CHECK_INT_EQ(layers[1], 1);
    size_t cap;
    float *buf = pm__drafter_feat_buf(dr, HD_CTX, &cap);
    REQUIRE(buf && cap == 2 * HD_CTX * HD_DIM);
    memcpy(buf, feat, sizeof feat);
    pm__drafter_feat_commit(dr, 0, HD_CTX, HD_CTX);
    int32_t out[HD_ROWS], n_out = 0, kind = -1;
    CHECK_INT_EQ(llm_drafter_propose(dr, prompt, HD_CTX + 1, 8, out, &n_out, &kind), 0);
    CHECK_INT_EQ(n_out, HD_ROWS); /* k = 8 is cut to the block size */
    CHECK_INT_EQ(kind, LLM_DRAFTER_BLOCK);
    for (int i = 0; i < HD_ROWS; i++)
        CHECK_INT_EQ(out[i], want_ids[i]);
    llm_drafter_free(dr);
    llm_session_free(s);
    llm_model_free(m);
    unlink(tp);
    unlink(hp);
    return 0;
}

/* ---- the context cache ------------------------------------------------- */

#define CR_N 10

static int case_crop(void)
{
    char tp[512], hp[512];
    sc_path(tp, sizeof tp, "block_crop_target");
    sc_path(hp, sizeof hp, "block_crop_head");
    synth_spec sp = synth_default();
    REQUIRE(synth_write(tp, &sp) == 0);
    llm_model *m = synth_open(tp, 1);
    bf_write_for(hp, m, 8, 7);
    static const int32_t toks[CR_N] = {5, 17, 99, 3, 42, 8, 120, 64, 2, 77};
    static const int32_t alt[CR_N] = {5, 17, 99, 3, 42, 8, 120, 11, 150, 77};
    llm_session *s = sc_session(m, 64, 16, 1);
    static float fa[2 * CR_N * 64], fb[2 * CR_N * 64];
    target_features(s, toks, CR_N, fa, sizeof fa / sizeof(float));
    llm_session_reset(s);
    target_features(s, alt, CR_N, fb, sizeof fb / sizeof(float));
    /* Plane p of a CR_N-row buffer, rows from r. */
    static float part[2 * CR_N * 64];
    static const int32_t plane_of[2] = {0, 1};
#define ROWS(src, r, n)                                                                  \
    do {                                                                                 \
        for (int p_ = 0; p_ < 2; p_++)                                                   \
            memcpy(part + (size_t)p_ * (n) * 64, (src) + ((size_t)p_ * CR_N + (r)) * 64, \
                   (size_t)(n) * 64 * sizeof(float));                                    \
    } while (0)
    char err[256];
    pm_block *a, *b;
    REQUIRE(pm__block_open(hp, m, 64, 1, &a, err, sizeof err) == 0);
    REQUIRE(pm__block_open(hp, m, 64, 1, &b, err, sizeof err) == 0);
    /* a: positions 0..5, then 6..9 of toks (a verify of 4 rows); the
     * target kept 7; then 7..8 of alt. */
    ROWS(fa, 0, 6);
    CHECK_INT_EQ(pm__block_append(a, part, plane_of, 6, 6), 0);
    ROWS(fa, 6, 4);
    CHECK_INT_EQ(pm__block_append(a, part, plane_of, 4, 4), 0);
    CHECK_INT_EQ((int)pm__block_ctx_len(a), 10);
    pm__block_crop(a, 7);
    CHECK_INT_EQ((int)pm__block_ctx_len(a), 7);
    pm__block_crop(a, 9); /* never grows */
    CHECK_INT_EQ((int)pm__block_ctx_len(a), 7);
    ROWS(fb, 7, 2);
    CHECK_INT_EQ(pm__block_append(a, part, plane_of, 2, 2), 0);
    /* b: the surviving history from scratch, in other batches. */
    ROWS(fa, 0, 3);
    CHECK_INT_EQ(pm__block_append(b, part, plane_of, 3, 3), 0);
    ROWS(fa, 3, 4);
    CHECK_INT_EQ(pm__block_append(b, part, plane_of, 4, 4), 0);
    ROWS(fb, 7, 2);
    CHECK_INT_EQ(pm__block_append(b, part, plane_of, 2, 2), 0);
    const float *la, *lb;
    static float keep[8 * 160];
    CHECK_INT_EQ(pm__block_forward(a, alt[9], 8, &la), 0);
    memcpy(keep, la, sizeof keep);
    CHECK_INT_EQ(pm__block_forward(b, alt[9], 8, &lb), 0);
    CHECK(memcmp(keep, lb, sizeof keep) == 0);
    /* The rows cut away mattered: without the crop the logits differ. */
    pm__block_crop(b, 7);
    ROWS(fa, 7, 2);
    CHECK_INT_EQ(pm__block_append(b, part, plane_of, 2, 2), 0);
    CHECK_INT_EQ(pm__block_forward(b, alt[9], 8, &lb), 0);
    CHECK(memcmp(keep, lb, sizeof keep) != 0);
    pm__block_free(a);
    pm__block_free(b);

    /* The drafter: committed rows 0..9 pending, the target keeps 7 (a
     * stop), then 7..8 of alt arrive: the same as the fresh head. */
    llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
    dp.kind = LLM_DRAFTER_BLOCK;
    dp.head_path = hp;
    dp.target = s;
    llm_drafter *dr;
    REQUIRE(llm_drafter_create(&dp, &dr, err, sizeof err) == 0);
    size_t cap;
    float *buf = pm__drafter_feat_buf(dr, CR_N, &cap);
    REQUIRE(buf);
    memcpy(buf, fa, sizeof fa);
    pm__drafter_feat_commit(dr, 0, CR_N, CR_N);
    CHECK_INT_EQ(llm_drafter_observe(dr, 0, 7), 0);
    buf = pm__drafter_feat_buf(dr, 2, &cap);
    REQUIRE(buf);
    ROWS(fb, 7, 2);
    memcpy(buf, part, 2 * 2 * 64 * sizeof(float));
    pm__drafter_feat_commit(dr, 7, 2, 2);
    int32_t hist[CR_N];
    memcpy(hist, alt, sizeof hist);
    int32_t out[8], n_out = 0, want[8];
    CHECK_INT_EQ(llm_drafter_propose(dr, hist, CR_N, 8, out, &n_out, NULL), 0);
    CHECK_INT_EQ(n_out, 8);
    for (int i = 0; i < 8; i++) {
        int best = 0;
        for (int t = 1; t < 160; t++)
            best = keep[i * 160 + t] > keep[i * 160 + best] ? t : best;
        want[i] = best;
        CHECK_INT_EQ(out[i], want[i]);
    }
    /* A history the features do not cover is refused, not guessed. */
    CHECK_INT_EQ(llm_drafter_propose(dr, hist, CR_N - 1, 8, out, &n_out, NULL), LLM_ESTATE);
    CHECK_STR_EQ(llm_drafter_error(dr),
                 "block drafter: it holds features of 9 positions, the history 8");
#undef ROWS
    llm_drafter_free(dr);
    llm_session_free(s);
    llm_model_free(m);
    unlink(tp);
    unlink(hp);
    return 0;
}

/* One forward's worth of features: rows r..r+n-1 of src (planes of CR_N
 * rows) into the drafter's buffer, committed as positions r.. (keep of
 * them). */
static void hand_over(llm_drafter *dr, const float *src, int r, int n, int keep)
{
    size_t cap;
    float *buf = pm__drafter_feat_buf(dr, (size_t)n, &cap);
    REQUIRE(buf && cap == (size_t)(2 * n * 64));
    for (int p = 0; p < 2; p++)
        memcpy(buf + (size_t)p * n * 64, src + ((size_t)p * CR_N + r) * 64,
               (size_t)n * 64 * sizeof(float));
    pm__drafter_feat_commit(dr, (uint32_t)r, (uint32_t)keep, (size_t)n);
}

static int case_stage(void)
{
    char tp[512], hp[512];
    sc_path(tp, sizeof tp, "block_stage_target");
    sc_path(hp, sizeof hp, "block_stage_head");
    synth_spec sp = synth_default();
    REQUIRE(synth_write(tp, &sp) == 0);
    llm_model *m = synth_open(tp, 1);
    bf_write_for(hp, m, 8, 7);
    static const int32_t toks[CR_N] = {5, 17, 99, 3, 42, 8, 120, 64, 2, 77};
    llm_session *s = sc_session(m, 64, 16, 1);
    static float fa[2 * CR_N * 64], all[2 * 9 * 64];
    target_features(s, toks, CR_N, fa, sizeof fa / sizeof(float));
    char err[256];
    llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
    dp.kind = LLM_DRAFTER_BLOCK;
    dp.head_path = hp;
    dp.target = s;
    llm_drafter *dr;
    REQUIRE(llm_drafter_create(&dp, &dr, err, sizeof err) == 0);
    hand_over(dr, fa, 0, 4, 4);          /* the prompt */
    hand_over(dr, fa, 4, 3, 1);          /* a verify of 3, position 4 kept */
    CHECK_INT_EQ(llm_drafter_observe(dr, 0, 5), 0);
    for (int r = 5; r < 9; r++)
        hand_over(dr, fa, r, 1, 1);      /* plain steps */
    int32_t out[8], n_out = 0;
    CHECK_INT_EQ(llm_drafter_propose(dr, toks, CR_N, 8, out, &n_out, NULL), 0);
    CHECK_INT_EQ(n_out, 8);
    CHECK_INT_EQ((int)pm__drafter_fed(dr), 9);
    /* A fresh head fed positions 0..8 in one append. */
    pm_block *b;
    REQUIRE(pm__block_open(hp, m, 64, 1, &b, err, sizeof err) == 0);
    static const int32_t plane_of[2] = {0, 1};
    for (int p = 0; p < 2; p++)
        memcpy(all + (size_t)p * 9 * 64, fa + (size_t)p * CR_N * 64, 9 * 64 * sizeof(float));
    CHECK_INT_EQ(pm__block_append(b, all, plane_of, 9, 9), 0);
    const float *lb;
    CHECK_INT_EQ(pm__block_forward(b, toks[9], 8, &lb), 0);
    for (int i = 0; i < 8; i++) {
        int best = 0;
        for (int t = 1; t < 160; t++)
            best = lb[i * 160 + t] > lb[i * 160 + best] ? t : best;
        CHECK_INT_EQ(out[i], best);
    }
    pm__block_free(b);
    llm_drafter_free(dr);
    llm_session_free(s);
    llm_model_free(m);
    unlink(tp);
    unlink(hp);
    return 0;
}

/* ---- refusals ---------------------------------------------------------- */

typedef struct refusal {
    const char *name;
    int status;
    const char *line;
} refusal;

static const refusal k_refusals[] = {
    {"arch", LLM_EFORMAT, "block head: architecture 'llama' is not phasemark-block"},
    {"vocab", LLM_EINVAL, "block head: vocab_size 161 does not match the target's 160"},
    {"width", LLM_EINVAL, "block head: embedding_length 32 does not match the target's 64"},
    {"target_width", LLM_EINVAL,
     "block head: target.embedding_length 65 does not match the target's 64"},
    {"layer", LLM_EINVAL, "block head: it reads target layer 4 but the target has 4"},
    {"no_layers", LLM_EFORMAT, "block head: it reads 0 target layers (1..8 allowed)"},
    {"nine_layers", LLM_EFORMAT, "block head: it reads 9 target layers (1..8 allowed)"},
    {"block0", LLM_EFORMAT, "block head: 'phasemark-block.block_size' must be an integer in 1..16"},
    {"block17", LLM_EFORMAT,
     "block head: 'phasemark-block.block_size' must be an integer in 1..16"},
    {"head_layers", LLM_EFORMAT,
     "block head: 'phasemark-block.block_count' must be an integer in 1..3"},
    {"missing", LLM_EFORMAT, "block head: tensor 'blk.0.ffn_up.weight' is missing"},
    {"shape", LLM_EFORMAT,
     "block head: tensor 'blk.0.attn_k.weight' is 64x33 (2 dims), expected 64x32"},
    {"type", LLM_EFORMAT, "block head: tensor 'fc.weight' has type q4_0 (f32, f16 or q8_0 expected)"},
    {"vector_type", LLM_EFORMAT, "block head: vector 'fc_norm.weight' has type f16 (f32 expected)"},
    {"truncated", LLM_EFORMAT,
     "block head: gguf: tensor 'output_norm.weight' data runs past end of file"},
};

/* Makes the head of refusal `name` at path. */
static void broken_head(const char *name, const char *path)
{
    bf_spec s = bf_default(64, 160, 4);
    if (!strcmp(name, "arch"))
        s.arch = "llama";
    else if (!strcmp(name, "vocab"))
        s.vocab = 161;
    else if (!strcmp(name, "width")) {
        s.dim = 32;
        s.ffn = 64;
    } else if (!strcmp(name, "target_width"))
        s.target_dim = 65;
    else if (!strcmp(name, "layer"))
        s.feat[1] = 4;
    else if (!strcmp(name, "no_layers"))
        s.n_feat = 0;
    else if (!strcmp(name, "nine_layers")) {
        s.n_feat = 9;
        for (int i = 0; i < 9; i++)
            s.feat[i] = i % 4;
    } else if (!strcmp(name, "block0"))
        s.block_size = 0;
    else if (!strcmp(name, "block17"))
        s.block_size = 17;
    else if (!strcmp(name, "head_layers"))
        s.n_layers = 4;
    else if (!strcmp(name, "missing"))
        s.omit = "blk.0.ffn_up.weight";
    else if (!strcmp(name, "shape"))
        s.reshape = "blk.0.attn_k.weight";
    else if (!strcmp(name, "type"))
        s.retype = "fc.weight";
    else if (!strcmp(name, "vector_type"))
        s.retype = "fc_norm.weight";
    REQUIRE(bf_write(path, &s) == 0);
    if (!strcmp(name, "truncated")) {
        FILE *f = fopen(path, "rb+");
        REQUIRE(f && fseek(f, 0, SEEK_END) == 0);
        long len = ftell(f);
        fclose(f);
        REQUIRE(len > 40 && truncate(path, len - 40) == 0);
    }
}

static int case_refuse(const char *name)
{
    const refusal *r = NULL;
    for (size_t i = 0; i < sizeof k_refusals / sizeof k_refusals[0]; i++)
        if (!strcmp(k_refusals[i].name, name))
            r = &k_refusals[i];
    if (!r)
        return 2;
    char tp[512], hp[512];
    sc_path(tp, sizeof tp, "block_refuse_target");
    sc_path(hp, sizeof hp, "block_refuse_head");
    synth_spec sp = synth_default();
    sp.hp.n_layers = 4;
    REQUIRE(synth_write(tp, &sp) == 0);
    llm_model *m = synth_open(tp, 1);
    llm_session *s = sc_session(m, 64, 16, 1);
    broken_head(name, hp);
    llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
    dp.kind = LLM_DRAFTER_BLOCK;
    dp.head_path = hp;
    dp.target = s;
    llm_drafter *dr = (llm_drafter *)&dp; /* must come back NULL */
    char err[256] = "";
    CHECK_INT_EQ(llm_drafter_create(&dp, &dr, err, sizeof err), r->status);
    CHECK(dr == NULL);
    CHECK_STR_EQ(err, r->line);
    CHECK(strchr(err, '\n') == NULL);
    llm_session_free(s);
    llm_model_free(m);
    unlink(tp);
    unlink(hp);
    return 0;
}

/* Arguments, and a drafter made for one target used with another. */
static int case_target(void)
{
    char tp[512], tp2[512], hp[512];
    sc_path(tp, sizeof tp, "block_target_a");
    sc_path(tp2, sizeof tp2, "block_target_b");
    sc_path(hp, sizeof hp, "block_target_head");
    synth_spec sp = synth_default();
    REQUIRE(synth_write(tp, &sp) == 0);
    sp.seed = 77;
    REQUIRE(synth_write(tp2, &sp) == 0);
    llm_model *m = synth_open(tp, 1), *m2 = synth_open(tp2, 1);
    bf_write_for(hp, m, 8, 3);
    llm_session *s = sc_session(m, 64, 16, 1), *s2 = sc_session(m2, 64, 16, 2);
    llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
    dp.kind = LLM_DRAFTER_BLOCK;
    llm_drafter *dr;
    char err[256];
    CHECK_INT_EQ(llm_drafter_create(&dp, &dr, err, sizeof err), LLM_EINVAL);
    CHECK_STR_EQ(err, "drafter: block needs a head file and the target session");
    CHECK_INT_EQ(llm_drafter_kind_parse("block"), LLM_DRAFTER_BLOCK);
    dp.head_path = hp;
    dp.target = s;
    REQUIRE(llm_drafter_create(&dp, &dr, err, sizeof err) == 0);
    llm_spec_params p = LLM_SPEC_PARAMS_INIT;
    p.drafter = dr;
    llm_spec *sd;
    CHECK_INT_EQ(llm_spec_create(s2, NULL, &p, &sd, err, sizeof err), LLM_EINVAL);
    CHECK_STR_EQ(err, "spec: the block drafter was made for another target model");
    CHECK_INT_EQ(llm_spec_create(s, NULL, &p, &sd, err, sizeof err), 0);
    llm_spec_free(sd);
    llm_drafter_free(dr);
    llm_session_free(s2);
    llm_session_free(s);
    llm_model_free(m2);
    llm_model_free(m);
    unlink(tp);
    unlink(tp2);
    unlink(hp);
    return 0;
}

static int collect(void *user, int32_t tok)
{
    sc_run *r = user;
    if (r->n < SC_MAX_OUT)
        r->ids[r->n++] = tok;
    return 0;
}

static int case_continue(void)
{
    char tp[512], hp[512];
    sc_path(tp, sizeof tp, "block_cont_target");
    sc_path(hp, sizeof hp, "block_cont_head");
    synth_spec sp = synth_default();
    sp.hp.n_layers = 3;
    REQUIRE(synth_write(tp, &sp) == 0);
    llm_model *m = synth_open(tp, 1);
    bf_write_for(hp, m, 8, 21);
    llm_session *ar = sc_session(m, 128, 16, 1), *t = sc_session(m, 128, 16, 2);
    llm_sampler *smp = sc_sampler(m, 0.0f, 0, 1.0f, 1);
    llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
    dp.kind = LLM_DRAFTER_BLOCK;
    dp.head_path = hp;
    dp.target = t;
    llm_drafter *dr;
    char err[256];
    REQUIRE(llm_drafter_create(&dp, &dr, err, sizeof err) == 0);
    llm_spec_params p = LLM_SPEC_PARAMS_INIT;
    p.k = 5;
    p.drafter = dr;
    llm_spec *sd;
    REQUIRE(llm_spec_create(t, NULL, &p, &sd, err, sizeof err) == 0);
    static const int32_t p1[4] = {7, 70, 140, 3}, p2[3] = {11, 12, 13}, p3[2] = {99, 1};
    const int32_t *prompts[3] = {p1, p2, p3};
    const size_t lens[3] = {4, 3, 2};
    /* The first request stops at a stop token: its plain run's 6th token
     * (or an earlier place that token takes). */
    sc_run first;
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = 20;
    REQUIRE(sc_run_ar(ar, smp, p1, 4, &gp, &first) == 0);
    REQUIRE(first.n == 20);
    int32_t stop = first.ids[5];
    llm_session_reset(ar);
    for (int r = 0; r < 3; r++) {
        sc_run a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        llm_generate_params g = LLM_GENERATE_PARAMS_INIT;
        g.max_tokens = 20;
        g.stop_tokens = &stop;
        g.n_stop_tokens = r == 0 ? 1 : 0;
        CHECK_INT_EQ(llm_generate(ar, smp, prompts[r], lens[r], &g, collect, &a, NULL, &a.reason), 0);
        CHECK_INT_EQ(llm_spec_generate(sd, smp, prompts[r], lens[r], &g, collect, &b, NULL,
                                       &b.reason), 0);
        a.end_pos = llm_session_pos(ar);
        b.end_pos = llm_session_pos(t);
        char what[32];
        snprintf(what, sizeof what, "request %d", r);
        CHECK(sc_same(&a, &b, what));
        if (r == 0) {
            int at = 0;
            while (first.ids[at] != stop)
                at++;
            CHECK_INT_EQ(a.reason, LLM_STOP_TOKEN);
            CHECK_INT_EQ((int)a.n, at); /* the stop token's first place */
        }
    }
    llm_spec_stats st;
    llm_spec_get_stats(sd, &st);
    CHECK(st.by[LLM_DRAFTER_BLOCK].rounds > 0);
    llm_spec_free(sd);
    llm_drafter_free(dr);
    llm_sampler_free(smp);
    llm_session_free(t);
    llm_session_free(ar);
    llm_model_free(m);
    unlink(tp);
    unlink(hp);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    if (!strcmp(argv[1], "hand"))
        case_hand();
    else if (!strcmp(argv[1], "crop"))
        case_crop();
    else if (!strcmp(argv[1], "target"))
        case_target();
    else if (!strcmp(argv[1], "continue"))
        case_continue();
    else if (!strcmp(argv[1], "stage"))
        case_stage();
    else if (!strncmp(argv[1], "refuse_", 7)) {
        if (case_refuse(argv[1] + 7) == 2)
            return 2;
    } else
        return 2;
    return pm_check_result();
}
