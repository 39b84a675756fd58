/* drafter.c — the drafters behind phasemark/spec.h: a draft model, an
 * n-gram lookup over prompt and history, the hybrid of the two, and a
 * caller's callback.
 *
 * The model drafter keeps its session a prefix of the generator's history:
 * each proposal first feeds it what it has not seen (the prompt in the
 * first round, in the target's prefill chunks, so a draft that is the
 * target's own model computes every position exactly as the target did;
 * then one token, or two after a round that accepted everything), then runs
 * k - 1 more forwards; observe cuts it back to what the target kept, so it
 * never holds a rejected token.
 *
 * The n-gram drafter runs no forward: the longest suffix of the history,
 * ngram_max tokens down to ngram_min, that occurred earlier, its most
 * recent occurrence first, proposes the tokens that followed that
 * occurrence. One pass over the history per round (a compare per token,
 * more only where the last token recurs); it allocates nothing.
 *
 * The block drafter runs its head (block_head.h) once per round. The
 * generator writes the target's features into the drafter's buffer
 * (pm__drafter_feat_buf) and then says which rows were committed
 * (pm__drafter_feat_commit); those rows stay pending until the next
 * proposal or the next request for the buffer, whichever comes first. Then
 * they are copied into a stage behind the rows staged before (up to
 * STAGE_ROWS; a prompt's rows go to the head's context directly), and the
 * stage is appended to the head's context at the next proposal, in one
 * batch: a plain stretch between rounds costs one batched append, not one
 * a step, and a round's context work runs inside its pm.draft leaf.
 * Invariant: the head's context, then the staged rows, then the pending
 * rows are the features of target positions 0..m-1 for some m <= the
 * target's position.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "block_head.h"
#include "draft_tree.h"
#include "drafter.h"
#include "errtext.h"
#include "model.h"
#include "phasemark/mark.h"
#include "session.h"

#define DRAFTER_ERR_MAX 256
#define NGRAM_MAX_DEFAULT 4
#define NGRAM_MIN_DEFAULT 2
#define HIST_MAX_DEFAULT 4096
/* Committed positions the block drafter holds back for one batched append
 * to the head's context: a plain stretch's rows, one a step, cost a
 * matrix-vector pass over the head's context weights each when appended
 * one by one, and about one pass per 8 rows together. */
#define STAGE_ROWS 64

struct llm_drafter {
    llm_drafter_params p;
    llm_session *draft; /* model, hybrid */
    pm__draft_plan last; /* the last plan (propose follows it) */
    size_t ngram_start;  /* the last plan's continuation in hist */
    uint32_t fed;        /* tokens the last model proposal caught up on */
    /* block */
    pm_block *blk;       /* the head, owned */
    const llm_model *target; /* the target model it reads (borrowed) */
    int32_t n_planes;    /* distinct target layers asked of a forward */
    int32_t planes[PM_BLOCK_MAX_FEAT];   /* those layers, ascending */
    int32_t plane_of[PM_BLOCK_MAX_FEAT]; /* head layer i's plane */
    float *feat;         /* [n_planes][feat_rows][dim], owned */
    size_t feat_rows;
    uint32_t pend_pos, pend_rows; /* committed rows waiting in feat */
    size_t pend_plane;   /* the rows per plane of the forward that wrote them */
    float *stage;        /* [n_planes][STAGE_ROWS][dim], owned: committed rows
                            of positions stage_pos.. copied out of feat */
    uint32_t stage_pos, stage_rows;
    char err[DRAFTER_ERR_MAX];
};

static const char *const kind_names[LLM_DRAFTER_COUNT] = {"model", "ngram", "hybrid", "block",
                                                          "custom"};

const char *llm_drafter_kind_name(int kind)
{
    return kind >= 0 && kind < LLM_DRAFTER_COUNT ? kind_names[kind] : "unknown";
}

int llm_drafter_kind_parse(const char *s)
{
    if (!s)
        return LLM_EINVAL;
    for (int k = 0; k < LLM_DRAFTER_COUNT; k++)
        if (k != LLM_DRAFTER_CUSTOM && !strcmp(s, kind_names[k]))
            return k;
    return LLM_EINVAL;
}

/* ---- creation ---------------------------------------------------------- */

/* The params as version 2 (a version 1 struct ends before head_path). */
static int read_params(const llm_drafter_params *p, llm_drafter_params *q, char *err,
                       size_t errlen)
{
    memset(q, 0, sizeof *q);
    if (p && p->version == 1 && p->size >= LLM_DRAFTER_PARAMS_V1_SIZE) {
        memcpy(q, p, LLM_DRAFTER_PARAMS_V1_SIZE);
        q->version = LLM_DRAFTER_PARAMS_VERSION;
        q->size = (uint16_t)sizeof *q;
        return 0;
    }
    if (!p || p->version != LLM_DRAFTER_PARAMS_VERSION || p->size < sizeof *p) {
        llm_errf(err, errlen, "drafter: params missing or of an unknown version");
        return LLM_EINVAL;
    }
    *q = *p;
    return 0;
}

/* A hybrid drafts with a block head instead of a model when given one. */
static int hybrid_head(const llm_drafter_params *p)
{
    return p->kind == LLM_DRAFTER_HYBRID && p->head_path;
}

static int check_params(const llm_drafter_params *p, char *err, size_t errlen)
{
    int model = p->kind == LLM_DRAFTER_MODEL || (p->kind == LLM_DRAFTER_HYBRID && !p->head_path);
    if (hybrid_head(p) && p->draft) {
        llm_errf(err, errlen, "drafter: hybrid takes a draft session or a block head, not both");
        return LLM_EINVAL;
    }
    if ((p->kind == LLM_DRAFTER_BLOCK || hybrid_head(p)) && (!p->head_path || !p->target)) {
        llm_errf(err, errlen, "drafter: %s needs a head file and the target session",
                 p->kind == LLM_DRAFTER_BLOCK ? "block" : "hybrid over a block head");
        return LLM_EINVAL;
    }
    if (p->kind < 0 || p->kind >= LLM_DRAFTER_COUNT) {
        llm_errf(err, errlen, "drafter: unknown kind %d", (int)p->kind);
        return LLM_EINVAL;
    }
    if (model && !p->draft) {
        llm_errf(err, errlen, "drafter: %s needs a draft session", kind_names[p->kind]);
        return LLM_EINVAL;
    }
    if (p->kind == LLM_DRAFTER_CUSTOM && !p->propose) {
        llm_errf(err, errlen, "drafter: custom needs a propose callback");
        return LLM_EINVAL;
    }
    return 0;
}

/* Fills the defaults and checks the n-gram bounds. */
static int resolve(llm_drafter_params *p, char *err, size_t errlen)
{
    if (p->ngram_max <= 0)
        p->ngram_max = NGRAM_MAX_DEFAULT;
    if (p->ngram_min <= 0)
        p->ngram_min = p->ngram_max < NGRAM_MIN_DEFAULT ? p->ngram_max : NGRAM_MIN_DEFAULT;
    if (p->hybrid_min <= 0)
        p->hybrid_min = PM__HYBRID_MIN_DEFAULT;
    if (p->hybrid_min > p->ngram_max)
        p->hybrid_min = p->ngram_max;
    if (p->ngram_min > p->ngram_max || p->hybrid_min < p->ngram_min) {
        llm_errf(err, errlen, "drafter: n-gram bounds %d..%d (hybrid %d) out of order",
                 (int)p->ngram_min, (int)p->ngram_max, (int)p->hybrid_min);
        return LLM_EINVAL;
    }
    if (p->n_hist_max == 0)
        p->n_hist_max = p->draft    ? llm_session_n_ctx(p->draft) + 1
                        : p->target ? llm_session_n_ctx(p->target) + 1
                                    : HIST_MAX_DEFAULT;
    return 0;
}

/* The block drafter's head and feature buffer: the head's layers asked of
 * the target in ascending order, each once, and its buffer for a forward
 * of up to the target's context (a prompt's prefill) or batch. */
static int open_block(llm_drafter *d, char *err, size_t errlen)
{
    llm_session *t = d->p.target;
    d->target = llm_session_model(t);
    /* The head's threads: the caller's, else the target's as it was
     * opened, else a CPU target's pool size; a device target's backend
     * counts 1 host thread, which is not the head's share (0: every
     * online CPU). */
    const llm_backend *tbe = d->target->be;
    int32_t threads = d->p.n_threads > 0           ? d->p.n_threads
                      : d->target->n_threads_opt > 0 ? d->target->n_threads_opt
                      : tbe->host_visible             ? tbe->n_threads
                                                      : 0;
    uint32_t n_ctx = llm_session_n_ctx(t);
    int rc = pm__block_open(d->p.head_path, d->target, n_ctx, threads, &d->blk, err, errlen);
    if (rc)
        return rc;
    /* The head runs between the target's forwards: on a CPU target, on
     * the target's threads (backend.h, llm_backend_share_threads). */
    llm_backend_share_threads(pm__block_backend(d->blk), d->target->be);
    const pm_block_info *in = pm__block_info(d->blk);
    for (int32_t l = 0; l < d->target->hp.n_layers; l++) {
        int used = 0;
        for (int32_t i = 0; i < in->n_feat; i++)
            if (in->feat_layers[i] == l) {
                d->plane_of[i] = d->n_planes;
                used = 1;
            }
        if (used)
            d->planes[d->n_planes++] = l;
    }
    uint32_t nb = llm_session_n_batch(t);
    d->feat_rows = n_ctx > nb ? n_ctx : nb;
    d->feat = malloc((size_t)d->n_planes * d->feat_rows * (size_t)in->dim * sizeof *d->feat);
    d->stage = malloc((size_t)d->n_planes * STAGE_ROWS * (size_t)in->dim * sizeof *d->stage);
    if (!d->feat || !d->stage) {
        llm_errf(err, errlen, "drafter: out of memory");
        return LLM_ENOMEM;
    }
    return 0;
}

int llm_drafter_create(const llm_drafter_params *p, llm_drafter **out, char *err,
                       size_t errlen)
{
    if (out)
        *out = NULL;
    if (!out) {
        llm_errf(err, errlen, "drafter: out is required");
        return LLM_EINVAL;
    }
    llm_drafter_params q;
    int rc = read_params(p, &q, err, errlen);
    if (rc == 0)
        rc = check_params(&q, err, errlen);
    if (rc)
        return rc;
    if (q.kind != LLM_DRAFTER_MODEL && q.kind != LLM_DRAFTER_HYBRID)
        q.draft = NULL;
    if (q.kind != LLM_DRAFTER_BLOCK && !hybrid_head(&q)) {
        q.target = NULL;
        q.head_path = NULL;
    }
    rc = resolve(&q, err, errlen);
    if (rc)
        return rc;
    llm_drafter *d = calloc(1, sizeof *d);
    if (!d) {
        llm_errf(err, errlen, "drafter: out of memory");
        return LLM_ENOMEM;
    }
    d->p = q;
    d->draft = q.draft;
    if (q.kind == LLM_DRAFTER_BLOCK || hybrid_head(&q)) {
        rc = open_block(d, err, errlen);
        if (rc) {
            llm_drafter_free(d);
            return rc;
        }
    }
    d->p.head_path = NULL; /* borrowed only during the call */
    if (d->draft) {
        /* Its forwards run inside the round's pm.draft leaf. */
        llm_session_set_quiet(d->draft, 1);
        llm_session_truncate(d->draft, 0); /* its history is unknown */
    }
    *out = d;
    return 0;
}

void llm_drafter_free(llm_drafter *d)
{
    if (!d)
        return;
    if (d->draft)
        llm_session_set_quiet(d->draft, 0);
    pm__block_free(d->blk);
    free(d->feat);
    free(d->stage);
    free(d);
}

int llm_drafter_get_kind(const llm_drafter *d)
{
    return d ? d->p.kind : LLM_EINVAL;
}

const char *llm_drafter_error(const llm_drafter *d)
{
    return d ? d->err : "no drafter";
}

llm_session *pm__drafter_session(const llm_drafter *d)
{
    return d->draft;
}

void pm__drafter_restart(llm_drafter *d)
{
    if (d->draft)
        llm_session_truncate(d->draft, 0);
    if (d->blk)
        pm__block_crop(d->blk, 0);
    d->pend_rows = 0;
    d->stage_rows = 0;
}

uint32_t pm__drafter_fed(const llm_drafter *d)
{
    return d->fed;
}

int32_t pm__drafter_room(const llm_drafter *d, size_t n_hist)
{
    if (d->blk)
        return pm__block_info(d->blk)->block_size;
    if (!d->draft)
        return INT32_MAX;
    /* The draft holds hist[0..n_hist) and d1..d(k-1): n_hist - 1 + k. */
    int64_t room = (int64_t)llm_session_n_ctx(d->draft) - ((int64_t)n_hist - 1);
    return room < 0 ? 0 : room > INT32_MAX ? INT32_MAX : (int32_t)room;
}

/* ---- n-gram lookup ----------------------------------------------------- */

int32_t pm__ngram_lookup(const int32_t *hist, size_t n_hist, int32_t ngram_min,
                         int32_t ngram_max, int32_t k, size_t *start, int32_t *n)
{
    *start = 0;
    *n = 0;
    if (ngram_min < 1)
        ngram_min = 1;
    if (ngram_max < ngram_min || n_hist < 2)
        return 0;
    /* One pass over the occurrence ends e, most recent first (e <=
     * n_hist - 2, so the continuation starts inside the history): len is
     * how many tokens ending at e equal the history's last ones (at most
     * ngram_max). The first e reaching a length is that length's most
     * recent occurrence, so the longest match is where best last rose; the
     * pass stops at the first e reaching ngram_max. A first-token compare
     * rejects almost every e, so this costs about one compare per history
     * token, not a memcmp per token and length. */
    const int32_t *suf = hist + n_hist - 1; /* suf[-i]: the i-th last token */
    size_t best_e = 0;
    int32_t best = 0;
    for (size_t e = n_hist - 1; e-- > 0;) {
        if (hist[e] != suf[0])
            continue;
        int32_t len = 1;
        while (len < ngram_max && (size_t)len <= e && hist[e - (size_t)len] == suf[-len])
            len++;
        if (len > best) {
            best = len;
            best_e = e;
        }
        if (best == ngram_max)
            break;
    }
    if (best < ngram_min)
        return 0;
    size_t c = best_e + 1;
    size_t avail = n_hist - c;
    *start = c;
    *n = (int32_t)(avail < (size_t)k ? avail : (size_t)k);
    return best;
}

/* ---- plan -------------------------------------------------------------- */

void pm__drafter_plan(llm_drafter *d, const pm__draft_round *r, int32_t k, int prefer,
                      pm__draft_plan *plan)
{
    const llm_drafter_params *p = &d->p;
    memset(plan, 0, sizeof *plan);
    plan->kind = p->kind != LLM_DRAFTER_HYBRID ? p->kind
                 : d->blk                      ? LLM_DRAFTER_BLOCK
                                               : LLM_DRAFTER_MODEL;
    plan->n = k;
    if (d->blk && k > pm__block_info(d->blk)->block_size)
        plan->n = pm__block_info(d->blk)->block_size; /* one forward: B rows at most */
    if (p->kind == LLM_DRAFTER_NGRAM || p->kind == LLM_DRAFTER_HYBRID) {
        plan->match = pm__ngram_lookup(r->hist, r->n_hist, p->ngram_min, p->ngram_max, k,
                                       &d->ngram_start, &plan->ngram_n);
        int take = p->kind == LLM_DRAFTER_NGRAM ||
                   (prefer == LLM_DRAFTER_NGRAM && plan->ngram_n > 0) ||
                   (prefer < 0 && plan->match >= p->hybrid_min && plan->ngram_n > 0);
        if (take) {
            plan->kind = LLM_DRAFTER_NGRAM;
            plan->n = plan->ngram_n;
        }
    }
    d->last = *plan;
}

/* ---- the draft model --------------------------------------------------- */

/* One draft forward for this round: its phase, the round's request id, and
 * its next token's id (greedy) or logits; rows 0 asks for nothing. */
static int draft_forward(llm_drafter *d, const pm__draft_round *r, pm_phase phase,
                         const int32_t *toks, size_t n, int32_t chunk, int32_t rows,
                         const float **logits, int32_t *id)
{
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.phase = phase;
    fp.request = r->req;
    fp.chunk = chunk;
    fp.output = rows == 0 ? LLM_OUTPUT_NONE : r->greedy ? LLM_OUTPUT_ARGMAX : LLM_OUTPUT_LOGITS;
    fp.rows = rows;
    int rc = llm_forward(d->draft, &fp, toks, n, logits, id);
    if (rc)
        llm_errf(d->err, sizeof d->err, "draft: %s", llm_session_error(d->draft));
    return rc;
}

/* Feeds the draft what it has not seen of hist and returns its next
 * logits (or greedy id); *fw counts the forwards. */
static int catch_up(llm_drafter *d, const pm__draft_round *r, const float **lg, int32_t *id,
                    uint32_t *fw)
{
    uint32_t hlen = (uint32_t)(r->n_hist - 1);
    uint32_t dpos = llm_session_pos(d->draft);
    int rc = 0;
    if (dpos > hlen) { /* only after a caller moved the history back */
        rc = llm_session_truncate(d->draft, hlen);
        dpos = hlen;
    }
    /* Every token fed counts, the prompt's too: the catch-up's time
     * includes the prompt's forward, and a probe's price counts the
     * tokens behind from the draft's position (spec_cost.h). */
    d->fed = hlen + 1 - dpos;
    if (rc == 0 && dpos >= r->pfx_start && dpos < r->pfx_end) {
        rc = draft_forward(d, r, PM_PHASE_EXACT, r->hist + dpos, (size_t)(r->pfx_end - dpos),
                           r->pfx_chunk, 0, NULL, NULL);
        dpos = r->pfx_end;
        (*fw)++;
    }
    size_t n = (size_t)(hlen + 1 - dpos);
    if (rc == 0) {
        rc = draft_forward(d, r, n == 1 ? PM_PHASE_DECODE : PM_PHASE_EXACT, r->hist + dpos, n, 0,
                           1, lg, id);
        (*fw)++;
    }
    return rc;
}

static int model_propose(llm_drafter *d, const pm__draft_round *r, int32_t k, int32_t *out,
                         uint32_t *fw)
{
    const float *lg = NULL;
    int32_t next = 0;
    int rc = catch_up(d, r, &lg, &next, fw);
    size_t nv = r->greedy ? 0 : (size_t)llm_sampler_n_vocab(r->sp);
    for (int32_t i = 0; rc == 0 && i < k; i++) {
        int32_t t = next;
        if (!r->greedy) {
            float *q = r->q + (size_t)i * nv;
            rc = llm_sampler_probs(r->sp, lg, q);
            t = rc ? rc : llm_sampler_draw(r->sp, q);
            if (t < 0) {
                llm_errf(d->err, sizeof d->err, "draft: sampling failed");
                return t;
            }
        }
        out[i] = t;
        if (i + 1 < k) {
            rc = draft_forward(d, r, PM_PHASE_DECODE, &out[i], 1, 0, 1, &lg, &next);
            (*fw)++;
        }
    }
    return rc;
}

/* ---- the block head ---------------------------------------------------- */

int32_t pm__drafter_feat_layers(const llm_drafter *d, const int32_t **layers)
{
    *layers = d->planes;
    return d->blk ? d->n_planes : 0;
}

const llm_model *pm__drafter_target(const llm_drafter *d)
{
    return d->blk ? d->target : NULL;
}

/* Appends rows of positions pos.. (planes of plane_rows rows at feat) to
 * the head's context. */
static int append_rows(llm_drafter *d, uint32_t pos, const float *feat, size_t plane_rows,
                       uint32_t rows)
{
    d->fed += rows;
    pm__block_crop(d->blk, pos);
    if (pm__block_ctx_len(d->blk) != pos) {
        llm_errf(d->err, sizeof d->err,
                 "block drafter: features of positions %u..%u never arrived",
                 (unsigned)pm__block_ctx_len(d->blk), (unsigned)pos - 1);
        return LLM_ESTATE;
    }
    int rc = pm__block_append(d->blk, feat, d->plane_of, plane_rows, rows);
    if (rc)
        llm_errf(d->err, sizeof d->err, "block drafter: the context holds no more positions");
    return rc;
}

/* Appends the staged rows to the head's context. */
static int flush_stage(llm_drafter *d)
{
    if (d->stage_rows == 0)
        return 0;
    uint32_t rows = d->stage_rows;
    d->stage_rows = 0;
    return append_rows(d, d->stage_pos, d->stage, STAGE_ROWS, rows);
}

/* Copies rows 0..rows-1 of every plane of feat (plane_rows rows a plane)
 * behind the staged ones. */
static void stage_copy(llm_drafter *d, size_t plane_rows, uint32_t rows)
{
    size_t dim = (size_t)pm__block_info(d->blk)->dim;
    for (int32_t p = 0; p < d->n_planes; p++)
        memcpy(d->stage + ((size_t)p * STAGE_ROWS + d->stage_rows) * dim,
               d->feat + (size_t)p * plane_rows * dim, (size_t)rows * dim * sizeof *d->stage);
    d->stage_rows += rows;
}

/* Takes the pending committed rows out of feat before it is written
 * again: behind the staged ones when they follow them and fit, else after
 * appending the staged ones; a prompt's rows, more than the stage holds,
 * go to the head's context at once. The head's context is complete only
 * after flush_stage (a proposal does it). */
static int take_pending(llm_drafter *d)
{
    if (d->pend_rows == 0)
        return 0;
    uint32_t pos = d->pend_pos, rows = d->pend_rows;
    d->pend_rows = 0;
    if (d->stage_rows && (pos != d->stage_pos + d->stage_rows ||
                          rows > STAGE_ROWS - d->stage_rows)) {
        int rc = flush_stage(d);
        if (rc)
            return rc;
    }
    if (rows > STAGE_ROWS)
        return append_rows(d, pos, d->feat, d->pend_plane, rows);
    if (d->stage_rows == 0)
        d->stage_pos = pos;
    stage_copy(d, d->pend_plane, rows);
    return 0;
}

float *pm__drafter_feat_buf(llm_drafter *d, size_t rows, size_t *cap)
{
    *cap = 0;
    if (!d->blk || rows > d->feat_rows || take_pending(d) != 0)
        return NULL;
    *cap = (size_t)d->n_planes * rows * (size_t)pm__block_info(d->blk)->dim;
    return d->feat;
}

void pm__drafter_feat_commit(llm_drafter *d, uint32_t pos, uint32_t rows, size_t plane_rows)
{
    if (!d->blk || rows == 0)
        return;
    d->pend_pos = pos;
    d->pend_rows = rows;
    d->pend_plane = plane_rows;
}

int pm__drafter_block_sync(llm_drafter *d)
{
    int rc = d->blk ? take_pending(d) : 0;
    return rc || !d->blk ? rc : flush_stage(d);
}

/* The first maximum's index, the sampler's greedy rule. */
static int32_t argmax_row(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* The head's forward of k block rows after the whole committed context
 * (pending and staged rows appended first), a chain's and a tree's alike;
 * *lg: k rows of logits, the head's. */
static int block_rows(llm_drafter *d, const pm__draft_round *r, int32_t k, const float **lg)
{
    d->fed = 0;
    int rc = take_pending(d);
    if (rc == 0)
        rc = flush_stage(d);
    if (rc)
        return rc;
    uint32_t ctx = (uint32_t)(r->n_hist - 1);
    if (pm__block_ctx_len(d->blk) != ctx) {
        llm_errf(d->err, sizeof d->err,
                 "block drafter: it holds features of %u positions, the history %u",
                 (unsigned)pm__block_ctx_len(d->blk), (unsigned)ctx);
        return LLM_ESTATE;
    }
    rc = pm__block_forward(d->blk, r->hist[r->n_hist - 1], k, lg);
    if (rc)
        llm_errf(d->err, sizeof d->err, "block drafter: its forward failed (%s)",
                 llm_strerror(rc));
    return rc;
}

static int block_propose(llm_drafter *d, const pm__draft_round *r, int32_t k, int32_t *out)
{
    const float *lg = NULL;
    int rc = block_rows(d, r, k, &lg);
    if (rc)
        return rc;
    size_t nv = (size_t)d->target->hp.n_vocab;
    for (int32_t i = 0; i < k; i++) {
        const float *row = lg + (size_t)i * nv;
        if (r->greedy) {
            out[i] = argmax_row(row, (int32_t)nv);
            continue;
        }
        /* Rows are independent given the context: each proposal is a draw
         * from its own row's q. */
        float *q = r->q + (size_t)i * nv;
        rc = llm_sampler_probs(r->sp, row, q);
        int32_t t = rc ? rc : llm_sampler_draw(r->sp, q);
        if (t < 0) {
            llm_errf(d->err, sizeof d->err, "block drafter: sampling failed");
            return t;
        }
        out[i] = t;
    }
    return 0;
}

int pm__drafter_block_tree(llm_drafter *d, const pm__draft_round *r, int32_t depth,
                           int32_t budget, int32_t width, llm_tree *tree, int32_t *tok)
{
    if (!d->blk || !r->greedy || depth < 1 || depth > pm__block_info(d->blk)->block_size) {
        llm_errf(d->err, sizeof d->err, "block drafter: a tree of depth %d is not one it can "
                 "propose", (int)depth);
        return LLM_EINVAL;
    }
    const float *lg = NULL;
    int rc = block_rows(d, r, depth, &lg);
    if (rc)
        return rc;
    pm__tree_build(lg, depth, d->target->hp.n_vocab, budget, width, tree, tok, NULL);
    return 0;
}

void pm__drafter_feat_keep(llm_drafter *d, const int32_t *rows, int32_t count,
                           size_t plane_rows)
{
    if (!d->blk)
        return;
    size_t dim = (size_t)pm__block_info(d->blk)->dim;
    for (int32_t p = 0; p < d->n_planes; p++) {
        float *plane = d->feat + (size_t)p * plane_rows * dim;
        /* Ascending, as the cache rows move (llm_session_keep_rows). */
        for (int32_t j = 0; j < count; j++)
            if (rows[j] != j)
                memcpy(plane + (size_t)j * dim, plane + (size_t)rows[j] * dim,
                       dim * sizeof(float));
    }
}

int pm__drafter_propose(llm_drafter *d, const pm__draft_round *r, const pm__draft_plan *plan,
                        int32_t *out, int *has_q, uint32_t *forwards)
{
    *has_q = 0;
    *forwards = 0;
    if (plan->n <= 0)
        return 0;
    switch (plan->kind) {
    case LLM_DRAFTER_MODEL:
        *has_q = !r->greedy;
        return model_propose(d, r, plan->n, out, forwards);
    case LLM_DRAFTER_NGRAM:
        memcpy(out, r->hist + d->ngram_start, (size_t)plan->n * sizeof *out);
        return 0;
    case LLM_DRAFTER_BLOCK:
        *has_q = !r->greedy;
        *forwards = 1;
        return block_propose(d, r, plan->n, out);
    case LLM_DRAFTER_CUSTOM: {
        int rc = d->p.propose(d->p.propose_user, r->hist, r->n_hist, plan->n, out);
        if (rc) {
            llm_errf(d->err, sizeof d->err, "proposer failed (%d)", rc);
            return rc < 0 ? rc : LLM_EINVAL;
        }
        return 0;
    }
    default:
        llm_errf(d->err, sizeof d->err, "drafter: kind %d cannot propose", (int)plan->kind);
        return LLM_EINVAL;
    }
}

/* ---- public proposing -------------------------------------------------- */

int llm_drafter_propose(llm_drafter *d, const int32_t *hist, size_t n_hist, int32_t k,
                        int32_t *out, int32_t *n_out, int32_t *kind_out)
{
    if (n_out)
        *n_out = 0;
    if (!d)
        return LLM_EINVAL;
    d->err[0] = '\0';
    if (!hist || !out || !n_out || k < 1 || n_hist == 0 || n_hist > d->p.n_hist_max) {
        llm_errf(d->err, sizeof d->err, "drafter: bad arguments to llm_drafter_propose");
        return LLM_EINVAL;
    }
    pm__draft_round r = {hist, n_hist, 1, 0, NULL, NULL, 0, 0, 0};
    pm__draft_plan plan;
    pm__drafter_plan(d, &r, k, -1, &plan);
    if (plan.kind == LLM_DRAFTER_MODEL && pm__drafter_room(d, n_hist) < plan.n)
        plan.n = pm__drafter_room(d, n_hist);
    int has_q = 0;
    uint32_t fw = 0;
    int rc = pm__drafter_propose(d, &r, &plan, out, &has_q, &fw);
    if (rc)
        return rc;
    *n_out = plan.n;
    if (kind_out)
        *kind_out = plan.kind;
    return 0;
}

int llm_drafter_observe(llm_drafter *d, int32_t accepted, uint32_t keep)
{
    (void)accepted; /* no drafter learns from it yet; the generator counts */
    if (!d)
        return LLM_EINVAL;
    if (d->blk) {
        /* Rows past keep were never committed: cut the pending ones and
         * the context alike. */
        if (d->pend_rows && d->pend_pos + d->pend_rows > keep)
            d->pend_rows = keep > d->pend_pos ? keep - d->pend_pos : 0;
        if (d->stage_rows && d->stage_pos + d->stage_rows > keep)
            d->stage_rows = keep > d->stage_pos ? keep - d->stage_pos : 0;
        pm__block_crop(d->blk, keep);
    }
    if (d->draft && llm_session_pos(d->draft) > keep) {
        int rc = llm_session_truncate(d->draft, keep);
        if (rc) {
            llm_errf(d->err, sizeof d->err, "draft: %s", llm_session_error(d->draft));
            return rc;
        }
    }
    return 0;
}
