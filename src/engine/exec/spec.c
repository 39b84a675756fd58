/* spec.c — speculative decoding: a draft proposes, the target verifies.
 *
 * The generator drives both models through the public llm_forward and
 * llm_session_truncate, so a target session over a layer split is verified
 * through every shard. Every forward is told the generation's request id
 * (never read back from a session) and exactly what it must hand back:
 * under greedy sampling the rows' token ids (LLM_OUTPUT_ARGMAX: taken where
 * the logits are made when the session can, session.h; the ids llm_sample
 * would take from the logits, so the output is the same), otherwise rows of
 * logits, and nothing at all for the draft's catch-up over a prompt.
 *
 * State between rounds. hist[0..hlen) is exactly what the target's cache
 * holds (its position is hlen); `last` is the last emitted token, which
 * the target has not run yet. The draft's cache holds a prefix hist[0..dpos)
 * of it; a round first feeds the draft hist[dpos..hlen] (with hist[hlen] =
 * last), normally one token, two after a round that accepted everything,
 * the whole prompt in the first round. So the draft is fed the bonus /
 * correction token before it drafts again and never holds a token the
 * target rejected.
 *
 * One round with k drafts d1..dk: the draft runs k forwards (the feed, then
 * d1..d(k-1)); the target verifies [last, d1..dk] at hlen..hlen+k, whose
 * row i scores the token after position hlen+i. With a accepted the round
 * commits d1..da and c = the target's token at row a (a correction, or a
 * bonus when a = k). Both caches are cut back to the committed positions.
 *
 * A block drafter reads the target's own features instead of running a
 * draft session: every target forward (prefill, verify, plain step) asks
 * for the head's layers into the drafter's buffer, and once a round is
 * decided the generator commits the rows of the positions the target
 * keeps (pm__drafter_feat_commit); rejected rows are never committed.
 *
 * Memory. Every buffer (history, proposals, the k draft distributions, a
 * target distribution and a residual) is allocated at creation.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft_tree.h"
#include "drafter.h"
#include "model.h"
#include "phasemark/mark.h"
#include "phasemark/spec.h"
#include "session.h"
#include "spec_cost.h"
#include "tokenizer.h"

#define SPEC_ERR_MAX 256
/* Decay of the adaptive acceptance counts per round: about the last ten
 * rounds matter, so k follows a change of text within a few rounds. */
#define SPEC_DECAY 0.9

struct llm_spec {
    llm_session *target, *draft; /* draft: the drafter's session, or NULL */
    llm_drafter *dr;     /* who proposes */
    int own_dr;          /* dr was made from the params: freed with sd */
    int shared_threads;  /* the draft's model runs on the target's threads
                            (llm_session_share_threads), until freed */
    llm_spec_params p;
    int32_t n_vocab;
    int32_t k_cap;       /* largest k: target n_batch - 1 (and k_max) */
    int32_t k;           /* the next round's draft length */
    double cost;         /* adaptive: draft forward / target forward */
    double acc_w, rej_w; /* adaptive: decayed accepted / rejection counts */
    int32_t *hist;       /* [n_ctx + 1] tokens fed to the target, + last */
    uint32_t hlen;       /* target position == entries of hist in cache */
    uint32_t n_ctx;      /* target context */
    uint32_t pfx_start, pfx_end; /* the last prompt the target prefilled */
    int32_t pfx_chunk;   /* and the chunk it used */
    int32_t *vtok;       /* [k_cap + 1] the verify batch: last, d1..dk */
    int32_t *vgreedy;    /* [k_cap + 1] the target's greedy token per verify
                            row (greedy sampling) */
    int32_t *commit;     /* [k_cap + 1] tokens a round commits */
    int32_t *shadow;     /* [k_cap] cost-aware k: an n-gram proposal plain
                            steps test (spec_cost.h: shadow acceptance) */
    int32_t vrows;       /* the last verify's rows (its features' planes) */
    int has_q;           /* the round's proposals have q rows (sampled model) */
    float *q;            /* [k_cap][n_vocab] draft distributions */
    float *pr;           /* [n_vocab] target distribution */
    float *res;          /* [n_vocab] residual max(0, p - q) */
    llm_spec_stats st;
    pm__cost ct;         /* cost-aware k: measured costs, acceptance */
    pm__guard guard;     /* cost-aware k: its choices against plain decoding */
    pm__retire retire;   /* cost-aware k, block drafter: its head retired */
    int32_t tree_n;      /* tree rounds: most proposed nodes; 0: chains */
    llm_tree tree;       /* the tree round's shape (draft_tree.h) */
    int32_t ttok[LLM_TREE_MAX];    /* its nodes' tokens, ttok[0] = last */
    int32_t tgreedy[LLM_TREE_MAX]; /* the target's argmax per node */
    int32_t tpath[LLM_TREE_MAX];   /* the accepted path, root first */
    char err[SPEC_ERR_MAX];
};

/* What a generate call is doing: its parameters and running totals. */
typedef struct gen_run {
    llm_spec *sd;
    llm_sampler *sp;
    const llm_generate_params *gp;
    llm_token_cb cb;
    void *user;
    int greedy;      /* forwards hand back argmax ids instead of logits */
    int32_t n_feat;  /* target layers every target forward reports (the
                        block drafter's), 0: none */
    const int32_t *feat_layers;
    uint64_t req;    /* the request id of every range and forward */
    int32_t eos;
    size_t generated;
    int reason; /* LLM_STOP_* once stopped, else -1 */
} gen_run;

static int fail(llm_spec *sd, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(llm_spec *sd, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sd->err, sizeof sd->err, fmt, ap);
    va_end(ap);
    return status;
}

/* ---- vocabulary -------------------------------------------------------- */

/* The first token whose piece differs, or -1 when all n agree. */
static int32_t first_piece_difference(const struct llm_tokenizer *a,
                                      const struct llm_tokenizer *b, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        const char *pa, *pb;
        size_t la, lb;
        if (llm_tokenizer_piece(a, i, &pa, &la) != 0 || llm_tokenizer_piece(b, i, &pb, &lb) != 0)
            return i;
        if (la != lb || memcmp(pa, pb, la) != 0)
            return i;
    }
    return -1;
}

int llm_spec_check_vocab(const llm_model *target, const llm_model *draft, char *err,
                         size_t errlen)
{
    static const char *const what = "draft vocabulary differs from the target's";
    if (!target || !draft) {
        llm_errf(err, errlen, "spec: target and draft models are required");
        return LLM_EINVAL;
    }
    if (target->hp.n_vocab != draft->hp.n_vocab) {
        llm_errf(err, errlen, "%s: %d tokens, target %d", what, (int)draft->hp.n_vocab,
                 (int)target->hp.n_vocab);
        return LLM_EINVAL;
    }
    if (target->bos != draft->bos || target->eos != draft->eos) {
        llm_errf(err, errlen, "%s: BOS/EOS %d/%d, target %d/%d", what, (int)draft->bos,
                 (int)draft->eos, (int)target->bos, (int)target->eos);
        return LLM_EINVAL;
    }
    if (!target->tok != !draft->tok) {
        llm_errf(err, errlen, "%s: only the %s has a tokenizer, so its ids cannot be matched",
                 what, target->tok ? "target" : "draft");
        return LLM_EINVAL;
    }
    if (target->tok && !llm_tokenizer_equal(target->tok, draft->tok)) {
        int32_t i = first_piece_difference(target->tok, draft->tok, target->hp.n_vocab);
        if (i >= 0)
            llm_errf(err, errlen, "%s: token %d is a different piece", what, (int)i);
        else
            llm_errf(err, errlen, "%s: the tokenizer kinds differ", what);
        return LLM_EINVAL;
    }
    return 0;
}

/* ---- creation ---------------------------------------------------------- */

static int check_params(const llm_spec_params *p, int32_t k_cap, char *err, size_t errlen)
{
    if (p->k < 1 || p->k > k_cap) {
        llm_errf(err, errlen, "spec: k = %d is outside 1..%d (the target's batch less one)",
                 (int)p->k, (int)k_cap);
        return LLM_EINVAL;
    }
    if (p->adaptive < LLM_SPEC_ADAPT_OFF || p->adaptive > LLM_SPEC_ADAPT_COST) {
        llm_errf(err, errlen, "spec: adaptive = %d is not an LLM_SPEC_ADAPT_* mode",
                 (int)p->adaptive);
        return LLM_EINVAL;
    }
    if (p->adaptive && p->k_min > 0 && p->k_max > 0 && p->k_min > p->k_max) {
        llm_errf(err, errlen, "spec: k_min %d exceeds k_max %d", (int)p->k_min, (int)p->k_max);
        return LLM_EINVAL;
    }
    if (isnan(p->draft_cost)) {
        llm_errf(err, errlen, "spec: draft_cost is not a number");
        return LLM_EINVAL;
    }
    return 0;
}

/* Resolves the adaptive bounds and cost; k_cap becomes the largest k any
 * round may use (the buffers' size). */
static void resolve_k(llm_spec *sd, const llm_model *tm, const llm_model *dm)
{
    llm_spec_params *p = &sd->p;
    if (!p->adaptive) {
        p->k_min = p->k_max = p->k;
    } else if (p->adaptive == LLM_SPEC_ADAPT_COST) {
        /* k is the most any round drafts; the table picks below it. */
        if (p->k_min <= 0)
            p->k_min = 1;
        if (p->k_max <= 0)
            p->k_max = p->k;
        if (p->k_max > sd->k_cap)
            p->k_max = sd->k_cap;
        if (p->k_min > p->k_max)
            p->k_min = p->k_max;
    } else {
        if (p->k_min <= 0)
            p->k_min = 1;
        /* Default: up to 2k, but not past 6 unless k itself is: a verify
         * of up to 7 tokens runs the CPU backend's matrix-vector path,
         * bitwise equal to decode steps; a wider one takes its sgemm path,
         * which rounds differently (greedy parity can break at near-ties
         * with quantized weights) and costs several decodes more. */
        if (p->k_max <= 0)
            p->k_max = 2 * p->k < 6 ? 2 * p->k : (p->k > 6 ? p->k : 6);
        if (p->k_max > sd->k_cap)
            p->k_max = sd->k_cap;
        if (p->k_min > p->k_max)
            p->k_min = p->k_max;
    }
    sd->k_cap = p->k_max > p->k ? p->k_max : p->k;
    sd->k = p->k;
    if (p->draft_cost > 0.0f)
        sd->cost = p->draft_cost;
    else if (dm && tm->weight_bytes > 0)
        sd->cost = (double)dm->weight_bytes / (double)tm->weight_bytes;
    else
        sd->cost = 0.0; /* an external proposer: taken as free */
    pm__cost_init(&sd->ct, sd->cost);
    pm__guard_init(&sd->guard);
    pm__retire_init(&sd->retire);
}

static int alloc_buffers(llm_spec *sd)
{
    size_t kc = (size_t)sd->k_cap, nv = (size_t)sd->n_vocab;
    sd->hist = malloc(((size_t)sd->n_ctx + 1) * sizeof *sd->hist);
    sd->vtok = malloc((kc + 1) * sizeof *sd->vtok);
    sd->vgreedy = malloc((kc + 1) * sizeof *sd->vgreedy);
    sd->commit = malloc((kc + 1) * sizeof *sd->commit);
    sd->shadow = malloc(kc * sizeof *sd->shadow);
    sd->q = malloc(kc * nv * sizeof *sd->q);
    sd->pr = malloc(nv * sizeof *sd->pr);
    sd->res = malloc(nv * sizeof *sd->res);
    return sd->hist && sd->vtok && sd->vgreedy && sd->commit && sd->shadow && sd->q && sd->pr &&
                   sd->res
               ? 0 : LLM_ENOMEM;
}

/* The params as version 2: a version 1 caller's struct ends before
 * drafter, which is then NULL. */
static int read_params(const llm_spec_params *p, llm_spec_params *q, char *err, size_t errlen)
{
    llm_spec_params defaults = LLM_SPEC_PARAMS_INIT;
    if (!p) {
        *q = defaults;
        return 0;
    }
    if (p->version == 1 && p->size >= LLM_SPEC_PARAMS_V1_SIZE) {
        memcpy(q, p, LLM_SPEC_PARAMS_V1_SIZE);
        q->version = LLM_SPEC_PARAMS_VERSION;
        q->size = (uint16_t)sizeof *q;
        q->drafter = NULL;
        return 0;
    }
    if (p->version != LLM_SPEC_PARAMS_VERSION || p->size < sizeof(llm_spec_params)) {
        llm_errf(err, errlen, "spec: params version %u size %u not understood",
                 (unsigned)p->version, (unsigned)p->size);
        return LLM_EINVAL;
    }
    *q = *p;
    return 0;
}

/* The drafter the params name, or one made from the draft session or the
 * proposer (owned by the generator). */
static int make_drafter(llm_spec *sd, llm_session *draft, char *err, size_t errlen)
{
    if (sd->p.drafter) {
        sd->dr = sd->p.drafter;
        return 0;
    }
    llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
    dp.kind = sd->p.propose ? LLM_DRAFTER_CUSTOM : LLM_DRAFTER_MODEL;
    dp.draft = sd->p.propose ? NULL : draft;
    dp.propose = sd->p.propose;
    dp.propose_user = sd->p.propose_user;
    sd->own_dr = 1;
    return llm_drafter_create(&dp, &sd->dr, err, errlen);
}

int llm_spec_create(llm_session *target, llm_session *draft, const llm_spec_params *p,
                    llm_spec **out, char *err, size_t errlen)
{
    llm_spec_params q;
    if (out)
        *out = NULL;
    int rc = read_params(p, &q, err, errlen);
    if (rc)
        return rc;
    llm_session *ds = q.drafter ? pm__drafter_session(q.drafter) : q.propose ? NULL : draft;
    if (!target || !out || (!ds && !q.propose && !q.drafter) || ds == target) {
        llm_errf(err, errlen, "spec: a target, a distinct draft session (or a drafter) "
                              "and out are required");
        return LLM_EINVAL;
    }
    const llm_model *tm = llm_session_model(target);
    const llm_model *dm = ds ? llm_session_model(ds) : NULL;
    int32_t k_cap = (int32_t)llm_session_n_batch(target) - 1;
    rc = check_params(&q, k_cap, err, errlen);
    if (rc == 0 && dm)
        rc = llm_spec_check_vocab(tm, dm, err, errlen);
    if (rc == 0 && q.drafter && pm__drafter_target(q.drafter) &&
        pm__drafter_target(q.drafter) != tm) {
        llm_errf(err, errlen, "spec: the block drafter was made for another target model");
        rc = LLM_EINVAL;
    }
    if (rc)
        return rc;
    llm_spec *sd = calloc(1, sizeof *sd);
    if (!sd) {
        llm_errf(err, errlen, "spec: out of memory");
        return LLM_ENOMEM;
    }
    sd->target = target;
    sd->draft = ds;
    sd->p = q;
    sd->n_vocab = tm->hp.n_vocab;
    sd->n_ctx = llm_session_n_ctx(target);
    sd->k_cap = k_cap;
    resolve_k(sd, tm, dm);
    rc = make_drafter(sd, ds, err, errlen);
    if (rc == 0 && alloc_buffers(sd) != 0) {
        llm_errf(err, errlen, "spec: out of memory");
        rc = LLM_ENOMEM;
    }
    if (rc) {
        llm_spec_free(sd);
        return rc;
    }
    /* Draft and target forwards alternate on the same cores: one set of
     * workers serves both, so neither's workers spin against the other's
     * (docs/spec.md, "Threads"). */
    sd->shared_threads = ds && llm_session_share_threads(ds, target) == 1;
    sd->hlen = llm_session_pos(target);
    pm__drafter_restart(sd->dr); /* its history is unknown */
    llm_spec_reset_stats(sd);
    *out = sd;
    return 0;
}

void llm_spec_free(llm_spec *sd)
{
    if (!sd)
        return;
    if (sd->shared_threads)
        llm_session_share_threads(sd->draft, NULL); /* and its own threads */
    if (sd->own_dr)
        llm_drafter_free(sd->dr); /* gives the draft session its ranges back */
    free(sd->hist);
    free(sd->vtok);
    free(sd->vgreedy);
    free(sd->commit);
    free(sd->shadow);
    free(sd->q);
    free(sd->pr);
    free(sd->res);
    free(sd);
}

const char *llm_spec_error(const llm_spec *sd)
{
    return sd ? sd->err : "no generator";
}

void llm_spec_get_stats(const llm_spec *sd, llm_spec_stats *st)
{
    *st = sd->st;
    st->acceptance = st->drafted ? (double)st->accepted / (double)st->drafted : 0.0;
    st->tokens_per_round = st->rounds ? (double)st->committed / (double)st->rounds : 0.0;
    st->k = sd->k;
    st->drafter = llm_drafter_get_kind(sd->dr);
}

void llm_spec_reset_stats(llm_spec *sd)
{
    memset(&sd->st, 0, sizeof sd->st);
    sd->k = sd->p.k;
    sd->acc_w = sd->rej_w = 0.0;
}

/* ---- adaptive k -------------------------------------------------------- */

/* Expected tokens one round commits with k drafts at per-token acceptance
 * a, per target-forward of cost (the verify counts as one). */
static double round_value(double a, int32_t k, double cost)
{
    double tokens = a >= 1.0 ? (double)(k + 1) : (1.0 - pow(a, k + 1)) / (1.0 - a);
    return tokens / (1.0 + k * cost);
}

static void adapt_k(llm_spec *sd, int32_t k, int32_t accepted)
{
    sd->acc_w = sd->acc_w * SPEC_DECAY + accepted;
    sd->rej_w = sd->rej_w * SPEC_DECAY + (accepted < k ? 1.0 : 0.0);
    if (sd->p.adaptive != LLM_SPEC_ADAPT_ACCEPT)
        return;
    /* One pseudo-observation each way keeps a short all-accept streak from
     * reading as certainty. */
    double a = (sd->acc_w + 1.0) / (sd->acc_w + sd->rej_w + 2.0);
    int32_t best = sd->p.k_min;
    double best_v = -1.0;
    for (int32_t kk = sd->p.k_min; kk <= sd->p.k_max; kk++) {
        double v = round_value(a, kk, sd->cost);
        if (v > best_v) {
            best_v = v;
            best = kk;
        }
    }
    sd->k = best;
}

/* ---- emitting tokens --------------------------------------------------- */

static int is_stop(const gen_run *g, int32_t tok)
{
    if (g->gp->stop_at_eos && g->eos >= 0 && tok == g->eos)
        return LLM_STOP_EOS;
    for (size_t i = 0; i < g->gp->n_stop_tokens; i++)
        if (g->gp->stop_tokens[i] == tok)
            return LLM_STOP_TOKEN;
    return -1;
}

/* Hands tok to the caller as llm_generate would, vpos being the target's
 * position had it decoded every emitted token but this one. Returns 1 when
 * tok was emitted, 0 when it was a stop token; g->reason is set on a stop. */
static int emit(gen_run *g, int32_t tok, uint32_t vpos)
{
    int stop = is_stop(g, tok);
    if (stop >= 0) {
        g->reason = stop;
        return 0;
    }
    g->generated++;
    g->sd->st.generated++;
    if (g->cb && g->cb(g->user, tok))
        g->reason = LLM_STOP_CALLBACK;
    else if (g->generated >= (size_t)g->gp->max_tokens)
        g->reason = LLM_STOP_LENGTH;
    else if (vpos >= g->sd->n_ctx)
        g->reason = LLM_STOP_CONTEXT;
    return 1;
}

/* ---- sampling ---------------------------------------------------------- */

static int32_t sample_from(gen_run *g, const float *logits)
{
    uint64_t t0 = llm_now_ns();
    int32_t tok = llm_sample(g->sp, logits);
    llm_session_add_sample_ns(g->sd->target, llm_now_ns() - t0);
    return tok;
}

/* ---- forwards ---------------------------------------------------------- */

/* One forward of session s for this generation: its phase, the
 * generation's request id, and exactly what the caller needs of the last
 * `rows` positions (rows 0: nothing at all): under greedy sampling their
 * ids into ids, otherwise their logits into *logits. */
static int forward(const gen_run *g, llm_session *s, pm_phase phase, const int32_t *toks,
                   size_t n, int32_t chunk, int32_t rows, const float **logits, int32_t *ids)
{
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.phase = phase;
    fp.request = g->req;
    fp.chunk = chunk;
    fp.output = rows == 0 ? LLM_OUTPUT_NONE : g->greedy ? LLM_OUTPUT_ARGMAX : LLM_OUTPUT_LOGITS;
    fp.rows = rows;
    if (g->n_feat && s == g->sd->target) {
        /* The block drafter reads the target's features of every position
         * the target runs; the caller commits the rows that stand. */
        fp.n_features_layers = g->n_feat;
        fp.features_layers = g->feat_layers;
        fp.features = pm__drafter_feat_buf(g->sd->dr, n, &fp.features_cap);
        if (!fp.features)
            return fail(g->sd, LLM_ESTATE, "%s", llm_drafter_error(g->sd->dr)[0]
                                                   ? llm_drafter_error(g->sd->dr)
                                                   : "block drafter: no room for features");
    }
    return llm_forward(s, &fp, toks, n, logits, ids);
}

/* A target forward failed: its detail, unless the generator wrote one. */
static int target_fail(llm_spec *sd, int rc)
{
    return sd->err[0] ? rc : fail(sd, rc, "target: %s", llm_session_error(sd->target));
}

/* A forward handing back the next token: its id into *tok (greedy), or its
 * logits into *logits. */
static int forward_next(const gen_run *g, llm_session *s, pm_phase phase, const int32_t *toks,
                        size_t n, int32_t chunk, const float **logits, int32_t *tok)
{
    return forward(g, s, phase, toks, n, chunk, 1, logits, tok);
}

/* ---- the drafter ----------------------------------------------------- */

static void round_ctx(const gen_run *g, pm__draft_round *r)
{
    const llm_spec *sd = g->sd;
    *r = (pm__draft_round){sd->hist, (size_t)sd->hlen + 1, g->greedy, g->req, g->sp, sd->q,
                           sd->pfx_start, sd->pfx_end, sd->pfx_chunk};
}

/* Proposes plan->n tokens into sd->vtok[1..n], checking their ids. */
static int propose(gen_run *g, const pm__draft_plan *plan)
{
    llm_spec *sd = g->sd;
    pm__draft_round r;
    round_ctx(g, &r);
    uint32_t fw = 0;
    int rc = pm__drafter_propose(sd->dr, &r, plan, sd->vtok + 1, &sd->has_q, &fw);
    sd->st.by[plan->kind].forwards += fw;
    if (rc)
        return fail(sd, rc, "%s", llm_drafter_error(sd->dr));
    for (int32_t i = 1; i <= plan->n; i++)
        if (sd->vtok[i] < 0 || sd->vtok[i] >= sd->n_vocab)
            return fail(sd, LLM_ETOKEN, "proposer gave token %d outside the vocabulary",
                        (int)sd->vtok[i]);
    return 0;
}

/* ---- acceptance -------------------------------------------------------- */

/* Greedy: accept while the target's argmax (sd->vgreedy, one id per
 * verify row) agrees; the target's token at the first disagreement (or
 * after all k) is the round's last. */
static int32_t accept_greedy(gen_run *g, int32_t k, int32_t *last)
{
    llm_spec *sd = g->sd;
    int32_t i;
    for (i = 0; i < k && sd->vgreedy[i] == sd->vtok[1 + i]; i++)
        ;
    *last = sd->vgreedy[i];
    return i;
}

/* The rejection draw: from max(0, p - q) normalized, q being the draft's
 * distribution (NULL: a deterministic proposal d, q one-hot at d). When
 * p <= q everywhere, which only rounding can produce after a rejection,
 * p itself is the right law. */
static int32_t draw_residual(gen_run *g, const float *q, int32_t d)
{
    llm_spec *sd = g->sd;
    int any = 0;
    for (int32_t j = 0; j < sd->n_vocab; j++) {
        float qj = q ? q[j] : (j == d ? 1.0f : 0.0f);
        float r = sd->pr[j] - qj;
        sd->res[j] = r > 0.0f ? r : 0.0f;
        any |= sd->res[j] > 0.0f;
    }
    return llm_sampler_draw(g->sp, any ? sd->res : sd->pr);
}

/* Speculative sampling: accept d with probability min(1, p(d)/q(d)). */
static int32_t accept_sampled(gen_run *g, const float *rows, int32_t k, int32_t *last)
{
    llm_spec *sd = g->sd;
    size_t nv = (size_t)sd->n_vocab;
    for (int32_t i = 0; i < k; i++) {
        int rc = llm_sampler_probs(g->sp, rows + (size_t)i * nv, sd->pr);
        if (rc)
            return rc;
        int32_t d = sd->vtok[1 + i];
        const float *q = sd->has_q ? sd->q + (size_t)i * nv : NULL;
        double qd = q ? q[d] : 1.0;
        if (llm_sampler_uniform(g->sp) * qd < sd->pr[d])
            continue;
        *last = draw_residual(g, q, d);
        return *last < 0 ? *last : i;
    }
    int rc = llm_sampler_probs(g->sp, rows + (size_t)k * nv, sd->pr);
    if (rc)
        return rc;
    *last = llm_sampler_draw(g->sp, sd->pr);
    return *last < 0 ? *last : k;
}

/* ---- one round --------------------------------------------------------- */

/* Emits the round's n committed tokens, then cuts both caches back to
 * what llm_generate would hold: last and the tokens emitted before the
 * final one, plus that one too when a stop token ended the request. */
static int commit_round(gen_run *g, int32_t n)
{
    llm_spec *sd = g->sd;
    uint32_t base = sd->hlen; /* hist[base] is the round's `last` */
    int32_t e = 0;
    while (e < n && g->reason < 0) {
        e += emit(g, sd->commit[e], base + (uint32_t)e + 1);
    }
    int by_token = g->reason == LLM_STOP_EOS || g->reason == LLM_STOP_TOKEN;
    uint32_t keep = base + (uint32_t)e + (by_token ? 1u : 0u);
    if (g->reason < 0)
        keep = base + (uint32_t)n; /* last, then every commit but the new last */
    for (uint32_t j = base + 1; j < keep; j++)
        sd->hist[j] = sd->commit[j - base - 1];
    int rc = llm_session_truncate(sd->target, keep);
    if (rc)
        return target_fail(sd, rc);
    sd->hlen = keep;
    if (g->n_feat) /* a retired head's n-gram rounds leave it no features */
        pm__drafter_feat_commit(sd->dr, base, keep - base, (size_t)sd->vrows);
    rc = llm_drafter_observe(sd->dr, n - 1, keep);
    return rc ? fail(sd, rc, "%s", llm_drafter_error(sd->dr)) : 0;
}

/* Drafts the plan's k tokens, verifies them in one target forward and
 * decides. Fills sd->commit[0..*n) (the accepted drafts, then the target's
 * token). */
static int draft_and_verify(gen_run *g, const pm__draft_plan *plan, int32_t *n,
                            uint64_t *inner_ns)
{
    llm_spec *sd = g->sd;
    int32_t k = plan->n;
    llm_drafter_counts *by = &sd->st.by[plan->kind];
    uint64_t fw0 = by->forwards;
    uint64_t t0 = llm_now_ns();
    pm_range dr = pm_draft_by_push(g->req, (uint32_t)k, llm_drafter_kind_name(plan->kind));
    int rc = propose(g, plan);
    pm_range_pop(&dr);
    uint64_t t1 = llm_now_ns();
    sd->st.draft_ns += t1 - t0;
    by->ns += t1 - t0;
    /* A draft step's cost is learned from steady rounds only: a catch-up
     * over the prompt or over plain steps is no step's price. */
    int model = plan->kind == LLM_DRAFTER_MODEL, block = plan->kind == LLM_DRAFTER_BLOCK;
    uint32_t fed = model || block ? pm__drafter_fed(sd->dr) : 0, fw = (uint32_t)(by->forwards - fw0);
    int steady = model ? fed <= 2 : block ? fed <= (uint32_t)sd->k_cap + 1 : 1;
    if (rc == 0 && steady && block)
        pm__cost_head(&sd->ct, k, t1 - t0);
    else if (rc == 0 && steady)
        pm__cost_draft(&sd->ct, plan->kind, model ? fw : 1u, t1 - t0);
    else if (rc == 0 && model)
        pm__cost_catchup(&sd->ct, fed, fw, t1 - t0); /* what falling behind costs */
    if (rc)
        return rc;
    const float *rows = NULL;
    sd->vrows = k + 1;
    rc = forward(g, sd->target, PM_PHASE_VERIFY, sd->vtok, (size_t)k + 1, 0, k + 1, &rows,
                 sd->vgreedy);
    uint64_t t2 = llm_now_ns();
    sd->st.verify_ns += t2 - t1;
    if (rc)
        return target_fail(sd, rc);
    int32_t last = -1;
    int32_t a = g->greedy ? accept_greedy(g, k, &last) : accept_sampled(g, rows, k, &last);
    uint64_t t3 = llm_now_ns();
    sd->st.accept_ns += t3 - t2;
    /* A width's price is the target's whole side of the round: the verify
     * and deciding on it (under sampling, k + 1 rows' distributions), as a
     * plain step's is its forward and its draw. */
    pm__cost_verify(&sd->ct, k + 1, t3 - t1);
    *inner_ns = t3 - t0;
    if (a < 0)
        return fail(sd, a, "sampling failed");
    memcpy(sd->commit, sd->vtok + 1, (size_t)a * sizeof *sd->commit);
    sd->commit[a] = last;
    *n = a + 1;
    sd->st.rounds++;
    sd->st.drafted += (uint64_t)k;
    sd->st.accepted += (uint64_t)a;
    sd->st.committed += (uint64_t)a + 1;
    by->rounds++;
    by->drafted += (uint64_t)k;
    by->accepted += (uint64_t)a;
    pm__cost_accept(&sd->ct, plan->kind, k, a);
    adapt_k(sd, k, a);
    return 0;
}

/* One round after `last` as planned; *next is the round's final token
 * (the next round's `last` unless the request stopped). */
static int round_run(gen_run *g, int32_t last, const pm__draft_plan *plan, int32_t *next)
{
    llm_spec *sd = g->sd;
    uint64_t t0 = llm_now_ns(), inner = 0;
    sd->vtok[0] = last;
    pm_range rr = pm_spec_decode_push(g->req, (uint32_t)plan->n);
    int32_t n = 0;
    int rc = draft_and_verify(g, plan, &n, &inner);
    if (rc == 0) {
        *next = sd->commit[n - 1];
        rc = commit_round(g, n);
    }
    pm_range_pop(&rr);
    /* The round's tokens are the target's too (its greedy ones, or draws
     * of its law), so a shadow test reads them as it reads plain steps';
     * an n-gram round observes its own acceptance instead. */
    if (plan->kind == LLM_DRAFTER_NGRAM)
        pm__cost_shadow_drop(&sd->ct);
    for (int32_t i = 0; rc == 0 && i < n && sd->ct.shadow_n > 0; i++)
        pm__cost_shadow_step(&sd->ct, sd->commit[i] == sd->shadow[sd->ct.shadow_i]);
    /* The round's bookkeeping (ranges, committing, cutting both caches
     * back) is part of its price: a plain step pays none of it. */
    uint64_t total = llm_now_ns() - t0;
    if (rc == 0)
        pm__cost_overhead(&sd->ct, plan->kind, total > inner ? total - inner : 0);
    return rc;
}

/* A plain target step for `last` when there is no room to draft; returns
 * the next token or a negative status. */
static int32_t plain_step(gen_run *g, int32_t last)
{
    llm_spec *sd = g->sd;
    const float *lg = NULL;
    int32_t tok = 0;
    uint64_t t0 = llm_now_ns();
    int rc = forward_next(g, sd->target, PM_PHASE_DECODE, &last, 1, 0, &lg, &tok);
    if (rc)
        return target_fail(sd, rc);
    if (g->n_feat)
        pm__drafter_feat_commit(sd->dr, sd->hlen, 1, 1);
    sd->hist[sd->hlen++] = last;
    sd->st.steps++;
    if (!g->greedy)
        tok = sample_from(g, lg);
    pm__cost_verify(&sd->ct, 1, llm_now_ns() - t0);
    return tok;
}

/* The draft length this round may use: the chosen k, cut so the round can
 * commit no more than max_tokens and fits both contexts. */
static int32_t room_for_k(const gen_run *g)
{
    const llm_spec *sd = g->sd;
    int64_t k = sd->k;
    int64_t left = (int64_t)g->gp->max_tokens - (int64_t)g->generated; /* >= 1 */
    if (k > left - 1)
        k = left - 1;
    int64_t room = (int64_t)sd->n_ctx - (int64_t)sd->hlen - 1; /* after `last` */
    if (k > room)
        k = room;
    return k > 0 ? (int32_t)k : 0;
}

/* ---- tree rounds (draft_tree.h) --------------------------------------- */

/* Candidates a tree round keeps per head row. */
#define SPEC_TREE_WIDTH 4

int llm_spec_set_tree(llm_spec *sd, int32_t nodes, char *err, size_t errlen)
{
    if (!sd) {
        llm_errf(err, errlen, "spec: no generator");
        return LLM_EINVAL;
    }
    if (nodes < 0 || nodes > LLM_TREE_MAX - 1) {
        llm_errf(err, errlen, "spec: a draft tree of %d nodes: 1..%d may be (0: off)",
                 (int)nodes, LLM_TREE_MAX - 1);
        return LLM_EINVAL;
    }
    if (nodes == 0) {
        sd->tree_n = 0;
        return 0;
    }
    if (llm_drafter_get_kind(sd->dr) != LLM_DRAFTER_BLOCK) {
        llm_errf(err, errlen, "spec: a draft tree needs the block drafter, not %s",
                 llm_drafter_kind_name(llm_drafter_get_kind(sd->dr)));
        return LLM_EINVAL;
    }
    if (sd->p.adaptive != LLM_SPEC_ADAPT_OFF) {
        llm_errf(err, errlen, "spec: a draft tree takes a fixed k (adaptive k is on)");
        return LLM_EINVAL;
    }
    char why[200];
    int rc = llm_session_tree_support(sd->target, why, sizeof why);
    if (rc) {
        llm_errf(err, errlen, "spec: %s", why);
        return rc;
    }
    uint32_t nb = llm_session_n_batch(sd->target);
    if ((uint32_t)nodes + 1 > nb) {
        llm_errf(err, errlen, "spec: a draft tree of %d nodes needs a target batch of %d "
                 "(it has %u)", (int)nodes, (int)nodes + 1, (unsigned)nb);
        return LLM_EINVAL;
    }
    sd->tree_n = nodes;
    return 0;
}

/* The nodes a tree of `depth` rows grows to: the budget, unless the rows'
 * candidates run out first (one row holds only its width). */
static int32_t tree_nodes(int32_t budget, int32_t depth, int32_t width)
{
    int64_t cap = 0, level = 1;
    for (int32_t d = 0; d < depth && cap < budget; d++) {
        level *= width;
        cap += level;
    }
    return cap < budget ? (int32_t)cap : budget;
}

/* The tree verify: every node's argmax id into sd->tgreedy, the head's
 * features of every node into the drafter's buffer. */
static int tree_verify(gen_run *g)
{
    llm_spec *sd = g->sd;
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.phase = PM_PHASE_VERIFY;
    fp.request = g->req;
    fp.output = LLM_OUTPUT_ARGMAX;
    fp.rows = sd->tree.n;
    fp.n_features_layers = g->n_feat;
    fp.features_layers = g->feat_layers;
    fp.features = pm__drafter_feat_buf(sd->dr, (size_t)sd->tree.n, &fp.features_cap);
    if (!fp.features)
        return fail(sd, LLM_ESTATE, "%s", llm_drafter_error(sd->dr)[0]
                                               ? llm_drafter_error(sd->dr)
                                               : "block drafter: no room for features");
    int rc = llm_forward_tree(sd->target, &fp, sd->ttok, &sd->tree, NULL, sd->tgreedy);
    return rc ? target_fail(sd, rc) : 0;
}

/* One tree round after `last` with trees no deeper than depth: propose,
 * verify in one forward, keep the accepted path's cache and feature rows
 * at the positions they were computed for, commit. Ranges as a chain
 * round's: pm.spec_decode (draft = nodes) enclosing pm.draft and the
 * verify's leaf. */
static int tree_round(gen_run *g, int32_t last, int32_t depth, int32_t *next)
{
    llm_spec *sd = g->sd;
    int32_t room = (int32_t)(sd->n_ctx - sd->hlen - 1); /* >= depth >= 1 */
    int32_t budget = tree_nodes(sd->tree_n < room ? sd->tree_n : room, depth, SPEC_TREE_WIDTH);
    llm_drafter_counts *by = &sd->st.by[LLM_DRAFTER_BLOCK];
    pm__draft_round r;
    round_ctx(g, &r);
    sd->ttok[0] = last;
    pm_range rr = pm_spec_decode_push(g->req, (uint32_t)budget);
    uint64_t t0 = llm_now_ns();
    pm_range dr = pm_draft_by_push(g->req, (uint32_t)budget,
                                   llm_drafter_kind_name(LLM_DRAFTER_BLOCK));
    int rc = pm__drafter_block_tree(sd->dr, &r, depth, budget, SPEC_TREE_WIDTH, &sd->tree,
                                    sd->ttok);
    pm_range_pop(&dr);
    uint64_t t1 = llm_now_ns();
    sd->st.draft_ns += t1 - t0;
    by->ns += t1 - t0;
    by->forwards++;
    if (rc)
        rc = fail(sd, rc, "%s", llm_drafter_error(sd->dr));
    if (rc == 0) {
        sd->vrows = sd->tree.n;
        rc = tree_verify(g);
    }
    uint64_t t2 = llm_now_ns();
    sd->st.verify_ns += t2 - t1;
    int32_t a = 0, tok = -1;
    if (rc == 0) {
        a = pm__tree_accept(&sd->tree, sd->ttok, sd->tgreedy, sd->tpath, &tok);
        for (int32_t j = 1; j <= a; j++)
            sd->commit[j - 1] = sd->ttok[sd->tpath[j]];
        sd->commit[a] = tok;
        /* The accepted nodes' rows move to positions hlen+1..hlen+a, where
         * a decode step would have written them: bit for bit the same. */
        rc = llm_session_keep_rows(sd->target, sd->hlen, sd->tpath, a + 1);
        if (rc)
            rc = target_fail(sd, rc);
        pm__drafter_feat_keep(sd->dr, sd->tpath, a + 1, (size_t)sd->tree.n);
    }
    sd->st.accept_ns += llm_now_ns() - t2;
    if (rc == 0) {
        int32_t nodes = sd->tree.n - 1;
        sd->st.rounds++;
        sd->st.drafted += (uint64_t)nodes;
        sd->st.accepted += (uint64_t)a;
        sd->st.committed += (uint64_t)a + 1;
        by->rounds++;
        by->drafted += (uint64_t)nodes;
        by->accepted += (uint64_t)a;
        *next = tok;
        rc = commit_round(g, a + 1);
    }
    pm_range_pop(&rr);
    return rc;
}

/* ---- generate ---------------------------------------------------------- */

static int check_generate(llm_spec *sd, llm_sampler *sp, const int32_t *prompt, size_t n_prompt,
                          const llm_generate_params *p)
{
    if (!sp || !p || !prompt || n_prompt == 0 || p->version != LLM_GENERATE_PARAMS_VERSION ||
        p->size < offsetof(llm_generate_params, has_request) || p->max_tokens < 1 ||
        (p->n_stop_tokens && !p->stop_tokens))
        return fail(sd, LLM_EINVAL, "bad arguments to llm_spec_generate");
    if (llm_sampler_n_vocab(sp) != sd->n_vocab)
        return fail(sd, LLM_EINVAL, "the sampler's vocabulary (%d) is not the target's (%d)",
                    (int)llm_sampler_n_vocab(sp), (int)sd->n_vocab);
    return 0;
}

/* Lines the history up with the target: a target at position 0 restarts
 * it (and empties the draft); one moved elsewhere cannot be followed. */
static int sync_history(llm_spec *sd)
{
    uint32_t tpos = llm_session_pos(sd->target);
    if (tpos == 0) {
        sd->hlen = 0;
        pm__drafter_restart(sd->dr);
        pm__retire_restart(&sd->retire);
        return 0;
    }
    if (tpos != sd->hlen)
        return fail(sd, LLM_ESTATE,
                    "the target is at position %u but the generator fed it %u tokens; "
                    "reset the target session", (unsigned)tpos, (unsigned)sd->hlen);
    return 0;
}

/* Prefills the prompt on the target; *first is the first token. */
static int prefill_prompt(gen_run *g, const int32_t *prompt, size_t n, int32_t chunk,
                          int32_t *first)
{
    llm_spec *sd = g->sd;
    const float *logits = NULL;
    int rc = forward_next(g, sd->target, PM_PHASE_EXACT, prompt, n, chunk, &logits, first);
    if (rc)
        return target_fail(sd, rc);
    memcpy(sd->hist + sd->hlen, prompt, n * sizeof *prompt);
    if (g->n_feat)
        pm__drafter_feat_commit(sd->dr, sd->hlen, (uint32_t)n, n);
    sd->pfx_start = sd->hlen;
    sd->hlen += (uint32_t)n;
    sd->pfx_end = sd->hlen;
    /* The chunk llm_prefill actually used, for the draft to repeat. */
    int32_t nb = (int32_t)llm_session_n_batch(sd->target);
    sd->pfx_chunk = chunk > 0 && chunk < nb ? chunk : nb;
    if (!g->greedy) {
        *first = sample_from(g, logits);
        if (*first < 0)
            return fail(sd, *first, "sampling failed");
    }
    return 0;
}

/* The round kinds a drafter can plan: bits 1 << LLM_DRAFTER_*. */
static unsigned drafter_kinds(const llm_drafter *d)
{
    int kind = llm_drafter_get_kind(d);
    if (kind == LLM_DRAFTER_HYBRID)
        return 1u << (pm__drafter_target(d) ? LLM_DRAFTER_BLOCK : LLM_DRAFTER_MODEL) |
               1u << LLM_DRAFTER_NGRAM;
    return 1u << kind;
}

/* Tokens the model drafter must catch up on before it drafts, beyond a
 * steady round's one or two (spec_cost.h: behind). */
static uint32_t model_behind(const llm_spec *sd)
{
    llm_session *ds = pm__drafter_session(sd->dr);
    if (!ds)
        return 0;
    uint32_t pos = llm_session_pos(ds);
    uint32_t need = pos <= sd->hlen ? sd->hlen + 1 - pos : 1;
    return need > 2 ? need - 1 : 0;
}

/* A plain step or a model round is chosen while an n-gram proposal of n
 * tokens exists: keeps it for the tokens that follow to test (no forward:
 * a copy out of the history; spec_cost.h, shadow acceptance). */
static void shadow_ngram(llm_spec *sd, const pm__draft_round *r, int32_t n)
{
    if (!pm__cost_shadow_start(&sd->ct, n))
        return;
    pm__draft_plan sp;
    pm__drafter_plan(sd->dr, r, n, LLM_DRAFTER_NGRAM, &sp);
    int has_q = 0;
    uint32_t fw = 0;
    if (sp.kind != LLM_DRAFTER_NGRAM || sp.n != n ||
        pm__drafter_propose(sd->dr, r, &sp, sd->shadow, &has_q, &fw) != 0)
        pm__cost_shadow_drop(&sd->ct);
}

/* Cost-aware k: the table's choice of kind and k for this round, a probe
 * round, or a plain step (plan->n = 0). `avail` is the drafter's own plan,
 * which tells whether an n-gram proposal exists and how long it is. */
static void choose_by_cost(const gen_run *g, const pm__draft_round *r, int32_t k,
                           const pm__draft_plan *avail, pm__draft_plan *plan)
{
    llm_spec *sd = g->sd;
    int32_t kmax = sd->p.k_max < k ? sd->p.k_max : k;
    unsigned kinds = drafter_kinds(sd->dr);
    if (sd->retire.retired)
        kinds &= ~(1u << LLM_DRAFTER_BLOCK); /* a hybrid's n-gram drafts on */
    pm__cost_query q = {kinds, sd->p.k_min < kmax ? sd->p.k_min : kmax, kmax,
                        avail->ngram_n, model_behind(sd),
                        (int64_t)g->gp->max_tokens - (int64_t)g->generated};
    pm__cost_choice ch;
    pm__cost_next(&sd->ct, &q, &ch);
    if (ch.kind != LLM_DRAFTER_NGRAM && q.kinds & (1u << LLM_DRAFTER_NGRAM))
        shadow_ngram(sd, r, avail->ngram_n < kmax ? avail->ngram_n : kmax);
    if (ch.kind < 0) {
        *plan = *avail;
        plan->n = 0;
        return;
    }
    pm__drafter_plan(sd->dr, r, ch.k, ch.kind, plan);
}

/* Plans the round after `last` with at most k drafts: the drafter's own
 * rule, or cost-aware k's choice; plan->n = 0 asks for a plain step. */
static void plan_round(gen_run *g, int32_t k, pm__draft_plan *plan)
{
    llm_spec *sd = g->sd;
    pm__draft_round r;
    round_ctx(g, &r);
    pm__drafter_plan(sd->dr, &r, k, -1, plan);
    if (sd->p.adaptive == LLM_SPEC_ADAPT_COST) {
        pm__draft_plan avail = *plan;
        choose_by_cost(g, &r, k, &avail, plan);
    }
    int32_t room = pm__drafter_room(sd->dr, r.n_hist);
    if (plan->kind == LLM_DRAFTER_MODEL && plan->n > room)
        plan->n = room;
}

/* Rounds (or plain steps) after the first token until a stop. Under
 * cost-aware k each step is timed whole, planning to emitting, for the
 * guard (spec_cost.h), which may force plain steps. */
static int generate_loop(gen_run *g, int32_t last)
{
    llm_spec *sd = g->sd;
    int cost = sd->p.adaptive == LLM_SPEC_ADAPT_COST;
    /* Only a block head costs while it does not draft (spec_cost.h). */
    int upkeep = cost && pm__drafter_target(sd->dr) != NULL;
    /* A hybrid's n-gram costs nothing between its rounds: retiring the
     * head leaves it drafting. */
    int ngram_on = llm_drafter_get_kind(sd->dr) == LLM_DRAFTER_HYBRID;
    while (g->reason < 0) {
        int32_t k = room_for_k(g);
        pm__draft_plan plan = {0, 0, 0, 0};
        int forced = cost && pm__guard_forced(&sd->guard);
        int retired = upkeep && sd->retire.retired;
        uint64_t t0 = llm_now_ns();
        size_t gen0 = g->generated;
        sd->hist[sd->hlen] = last;
        if (k > 0 && !forced && (!retired || ngram_on))
            plan_round(g, k, &plan);
        if (plan.n == 0) {
            int32_t tok = plain_step(g, last);
            if (tok < 0)
                return tok;
            if (sd->ct.shadow_n > 0)
                pm__cost_shadow_step(&sd->ct, tok == sd->shadow[sd->ct.shadow_i]);
            emit(g, tok, g->sd->hlen);
            last = tok;
            if (cost)
                pm__guard_plain(&sd->guard, forced, llm_now_ns() - t0);
            if (retired)
                pm__retire_idle(&sd->retire, 1);
            else if (upkeep && k > 0 && pm__retire_step(&sd->retire, 1))
                g->n_feat = 0; /* no more features: the head is not fed again */
            continue;
        }
        int rc = sd->tree_n > 0 && plan.kind == LLM_DRAFTER_BLOCK
                     ? tree_round(g, last, plan.n, &last)
                     : round_run(g, last, &plan, &last);
        if (rc)
            return rc;
        if (cost)
            pm__guard_round(&sd->guard, llm_now_ns() - t0, (int32_t)(g->generated - gen0));
        if (retired)
            pm__retire_idle(&sd->retire, (int64_t)(g->generated - gen0));
        else if (upkeep)
            pm__retire_step(&sd->retire, 0);
    }
    return 0;
}

int llm_spec_generate(llm_spec *sd, llm_sampler *sp, const int32_t *prompt, size_t n_prompt,
                      const llm_generate_params *p, llm_token_cb cb, void *user,
                      size_t *n_generated, int *stop_reason)
{
    if (n_generated)
        *n_generated = 0;
    if (!sd)
        return LLM_EINVAL;
    sd->err[0] = '\0';
    int rc = check_generate(sd, sp, prompt, n_prompt, p);
    if (rc == 0)
        rc = sync_history(sd);
    if (rc)
        return rc;
    llm_sampler_params sprm;
    llm_sampler_get_params(sp, &sprm);
    llm_model_info info;
    llm_model_get_info(llm_session_model(sd->target), &info);
    /* Greedy ids are asked of both sessions' forwards: the sampler covers
     * the target's vocabulary (checked above), which is the draft's
     * (llm_spec_check_vocab). */
    if (sd->tree_n > 0 && sprm.temperature > 0.0f)
        return fail(sd, LLM_EINVAL, "a draft tree verifies greedy decoding only "
                    "(temperature %g)", (double)sprm.temperature);
    gen_run g = {sd, sp, p, cb, user, !(sprm.temperature > 0.0f), 0, NULL,
                 llm_generate_request(sd->target, p), info.eos, 0, -1};
    g.n_feat = pm__drafter_feat_layers(sd->dr, &g.feat_layers);
    if (sd->p.adaptive == LLM_SPEC_ADAPT_COST && sd->retire.retired)
        g.n_feat = 0; /* a retired head is not fed (spec_cost.h) */
    int32_t tok = 0;
    pm__cost_shadow_drop(&sd->ct); /* a test belongs to one history */
    pm__guard_break(&sd->guard);   /* the prefill comes between plain steps */
    rc = prefill_prompt(&g, prompt, n_prompt, p->chunk, &tok);
    if (rc == 0) {
        emit(&g, tok, sd->hlen);
        if (g.reason < 0)
            rc = generate_loop(&g, tok);
    }
    if (n_generated)
        *n_generated = g.generated;
    if (stop_reason)
        *stop_reason = g.reason < 0 ? LLM_STOP_LENGTH : g.reason;
    return rc;
}
