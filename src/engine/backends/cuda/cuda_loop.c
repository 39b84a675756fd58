/* cuda_loop.c — the device loop (cuda_loop.h): plain steps and greedy
 * speculative rounds recorded as CUDA graphs, launched in batches, read
 * back once per batch.
 *
 * Device state (one allocation on the target's device, loop-owned):
 *   tok    [1]            the plain step's token: embedded, then replaced
 *                         by the step's greedy id
 *   count  [1]            plain steps committed (the ring's write index)
 *   round  [1]            speculative rounds committed (the record index)
 *   vin    [K_MAX + 1]    a verify's input: the last committed token, then
 *                         the drafted ids (the draft's argmax writes them)
 *   din    [2]            the draft's two-row input: the token before the
 *                         last committed one, and that one
 *   g      [K_MAX + 1]    the verify rows' greedy ids
 *   ring   [RING]         plain tokens; rec [RECS][LLM_CUDA_LOOP_REC]
 * The positions are the two contexts' registers: the target's is the
 * target's filled cache length P (the next token is fed at P), the draft's
 * P - 1 at a round's start (its cache holds every position below).
 *
 * Batches never wrap the ring or the records (their sizes are multiples
 * of the batch), so one copy reads a batch.
 *
 * Block rounds keep everything on the target's context: the head's
 * context length is the target's register P (its caches hold the
 * positions the target has run), so the head's graph and the verify's
 * read the same register and need no draft register (the acceptance
 * writes the unused OFF_NOPOS, as n-gram rounds do).
 */
#define _POSIX_C_SOURCE 200809L
#include "cuda_loop.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "block_head.h"
#include "cuda_block.h"
#include "forward.h"
#include "model.h"
#include "phasemark/mark.h"
#include "runner.h"
#include "session.h"
#include "drafter.h"
#include "split.h"

#define LOOP_RING (LLM_CUDA_LOOP_BATCH * 64)
#define LOOP_RECS (LLM_CUDA_LOOP_BATCH * 4)

/* Int offsets into the device state. */
enum {
    OFF_TOK = 0,
    OFF_COUNT = 1,
    OFF_ROUND = 2,
    OFF_U = 3,      /* float: the plain or draft step's uniform */
    OFF_RNG = 4,    /* uint64 [2]: seed, counter (8-byte aligned: the
                       allocation is 256-byte aligned) */
    OFF_VIN = 8,
    OFF_DIN = OFF_VIN + LLM_CUDA_LOOP_K_MAX + 1,
    OFF_G = OFF_DIN + 2,
    OFF_NOPOS = OFF_G + LLM_CUDA_LOOP_K_MAX + 1, /* the draft register of
                                                    n-gram rounds (none) */
    OFF_KEFF = OFF_NOPOS + 1, /* a device n-gram round's proposal length */
    OFF_RING = OFF_G + LLM_CUDA_LOOP_K_MAX + 1 + 8, /* rounded past g */
    OFF_REC = OFF_RING + LOOP_RING,
    OFF_ACCEPT = OFF_REC + LOOP_RECS * LLM_CUDA_LOOP_REC, /* the sampled
                       acceptance's scratch (floats), its ticket zeroed */
    STATE_INTS = OFF_ACCEPT + LLM_CUDA_LOOP_ACCEPT_SCRATCH
};

/* One model's side of the loop. */
typedef struct loop_side {
    llm_session *s;
    llm_model *m;
    llm_backend *be;
    llm_cuda *cu;
    llm_span *span;
    llm_workspace *ws;
} loop_side;

struct llm_cuda_loop {
    loop_side t, d;         /* target; draft (d.s NULL: plain only) */
    int32_t *dev;           /* [STATE_INTS] on the device, owned */
    int32_t *host;          /* [STATE_INTS] page-locked, owned */
    /* Graphs, owned: [0] greedy, [1] sampled at temp (captured with it). */
    llm_cuda_graph *plain[2];
    llm_cuda_graph *draft[2][LLM_CUDA_LOOP_K_MAX + 1], *verify[2][LLM_CUDA_LOOP_K_MAX + 1];
    float temp;             /* the temperature the sampled graphs hold */
    float *dlog;            /* [K_MAX][n_vocab] the draft steps' logits
                               (sampled rounds), owned; NULL without a draft */
    unsigned gen_t, gen_d;  /* the backends' generations the graphs are of */
    llm_cuda_xevent *t2d, *d2t;
    /* N-gram rounds: verify graphs by width - 1 (0: a plain step), [0]
     * greedy, [1] sampled (q one-hot at the proposal), owned, the bounds,
     * and the host's copy of the history [n_ctx + 1]. */
    llm_cuda_graph *verify_ng[2][LLM_CUDA_LOOP_K_MAX + 1];
    int drafter;            /* LLM_DRAFTER_MODEL, _NGRAM, _BLOCK or _HYBRID */
    int32_t ngram_min, ngram_max;
    int32_t hybrid_min;     /* hybrid: the shortest match verified as such */
    int32_t *hist;          /* owned */
    int ngram_dev;          /* 1: n-gram rounds on the device */
    int32_t *dhist;         /* [n_ctx + K_MAX + 2] the device history, owned */
    llm_cuda_graph *verify_ngd[LLM_CUDA_LOOP_K_MAX + 1]; /* by k, owned */
    /* Block rounds: the head on the device (owned), the host buffer a
     * prefill's features land in ([n_planes][n_ctx][dim], owned), and per
     * k a head graph and a verify graph, [0] greedy, [1] sampled (owned). */
    llm_cuda_block *blk;
    float *blk_feat;
    llm_cuda_graph *bhead[2][LLM_CUDA_LOOP_K_MAX + 1], *bverify[2][LLM_CUDA_LOOP_K_MAX + 1];
    /* Sampled hybrid rounds the n-gram proposed (and its plain steps): the
     * block verify by width with the one-hot acceptance, owned. */
    llm_cuda_graph *bverify_oh[LLM_CUDA_LOOP_K_MAX + 1];
    uint32_t count, round;  /* host copies of the device counters */
    llm_cuda_loop_stats st;
    char err[256];
};

static int loop_fail(llm_cuda_loop *l, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int loop_fail(llm_cuda_loop *l, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->err, sizeof l->err, fmt, ap);
    va_end(ap);
    return rc;
}

/* A CUDA failure of a side: the backend's reason when it has one. */
static int side_fail(llm_cuda_loop *l, const loop_side *sd, int rc, const char *what)
{
    char why[200] = "";
    if (sd->be->ops->status(sd->be, why, sizeof why) == 0)
        snprintf(why, sizeof why, "%s", llm_cuda_error(sd->cu));
    loop_fail(l, LLM_EBACKEND, "device loop: %s: %s (%d)", what, why, rc);
    return LLM_EBACKEND;
}

static int side_init(llm_cuda_loop *l, loop_side *sd, llm_session *s, const char *who)
{
    sd->s = s;
    sd->m = (llm_model *)llm_session_model(s);
    sd->be = sd->m->be;
    sd->cu = llm_cuda_backend_context(sd->be);
    if (!sd->cu)
        return loop_fail(l, LLM_EUNSUP, "device loop: the %s session is not on a CUDA backend",
                         who);
    if (llm_split_local_parts(llm_session_split_any(s), &sd->span, &sd->ws) != 0)
        return loop_fail(l, LLM_EUNSUP, "device loop: the %s session is not monolithic", who);
    return 0;
}

/* Frees the greedy (s = 0) or sampled (s = 1) graphs. */
static void drop_graphs(llm_cuda_loop *l, int s)
{
    llm_cuda_graph_free(l->plain[s]);
    l->plain[s] = NULL;
    for (int k = 0; s == 0 && k <= LLM_CUDA_LOOP_K_MAX; k++) {
        llm_cuda_graph_free(l->verify_ngd[k]);
        l->verify_ngd[k] = NULL;
    }
    for (int k = 0; s == 1 && k <= LLM_CUDA_LOOP_K_MAX; k++) {
        llm_cuda_graph_free(l->bverify_oh[k]);
        l->bverify_oh[k] = NULL;
    }
    for (int k = 0; k <= LLM_CUDA_LOOP_K_MAX; k++) {
        llm_cuda_graph_free(l->verify_ng[s][k]);
        l->verify_ng[s][k] = NULL;
    }
    for (int k = 0; k <= LLM_CUDA_LOOP_K_MAX; k++) {
        llm_cuda_graph_free(l->draft[s][k]);
        llm_cuda_graph_free(l->verify[s][k]);
        llm_cuda_graph_free(l->bhead[s][k]);
        llm_cuda_graph_free(l->bverify[s][k]);
        l->draft[s][k] = l->verify[s][k] = NULL;
        l->bhead[s][k] = l->bverify[s][k] = NULL;
    }
}

void llm_cuda_loop_free(llm_cuda_loop *l)
{
    if (!l)
        return;
    drop_graphs(l, 0);
    drop_graphs(l, 1);
    llm_cuda_xevent_free(l->t2d);
    llm_cuda_xevent_free(l->d2t);
    free(l->hist);
    free(l->blk_feat);
    llm_cuda_block_free(l->blk);
    if (l->t.cu) {
        llm_cuda_mfree(l->t.cu, l->dhist);
        llm_cuda_mfree(l->t.cu, l->dlog);
        llm_cuda_mfree(l->t.cu, l->dev);
        llm_cuda_host_free(l->t.cu, l->host);
    }
    free(l);
}

int llm_cuda_loop_create(llm_session *target, llm_session *draft, llm_cuda_loop **out,
                         char *err, size_t errlen)
{
    if (!out)
        return LLM_EINVAL;
    *out = NULL;
    if (!target) {
        llm_errf(err, errlen, "device loop: a target session is required");
        return LLM_EINVAL;
    }
    llm_cuda_loop *l = calloc(1, sizeof *l);
    if (!l) {
        llm_errf(err, errlen, "device loop: out of memory");
        return LLM_ENOMEM;
    }
    int rc = side_init(l, &l->t, target, "target");
    if (rc == 0 && draft)
        rc = side_init(l, &l->d, draft, "draft");
    if (rc == 0 && draft && l->d.m->hp.n_vocab != l->t.m->hp.n_vocab)
        rc = loop_fail(l, LLM_EINVAL, "device loop: the draft's vocabulary (%d) is not the target's (%d)",
                       (int)l->d.m->hp.n_vocab, (int)l->t.m->hp.n_vocab);
    void *dev = NULL, *host = NULL;
    if (rc == 0 && (llm_cuda_bind(l->t.cu) != 0 ||
                    llm_cuda_malloc(l->t.cu, STATE_INTS * sizeof(int32_t), &dev) != 0 ||
                    llm_cuda_host_alloc(l->t.cu, STATE_INTS * sizeof(int32_t), &host) != 0))
        rc = loop_fail(l, LLM_ENOMEM, "device loop: no memory for its state");
    l->dev = dev;
    l->host = host;
    if (rc == 0) { /* a defined state, the acceptance's ticket zero */
        memset(host, 0, STATE_INTS * sizeof(int32_t));
        if (llm_cuda_upload(l->t.cu, dev, host, STATE_INTS * sizeof(int32_t)) != 0)
            rc = loop_fail(l, LLM_EBACKEND, "device loop: %s", llm_cuda_error(l->t.cu));
    }
    l->drafter = LLM_DRAFTER_MODEL;
    l->ngram_min = 2;
    l->ngram_max = 4;
    l->hybrid_min = PM__HYBRID_MIN_DEFAULT;
    if (rc == 0 && !(l->hist = malloc(((size_t)llm_session_n_ctx(target) + 1) * sizeof *l->hist)))
        rc = loop_fail(l, LLM_ENOMEM, "device loop: no memory for the history");
    void *dh = NULL;
    if (rc == 0 && llm_cuda_malloc(l->t.cu, ((size_t)llm_session_n_ctx(target) +
                                            LLM_CUDA_LOOP_K_MAX + 2) * sizeof(int32_t), &dh) != 0)
        rc = loop_fail(l, LLM_ENOMEM, "device loop: no memory for the device history");
    l->dhist = dh;
    void *dlog = NULL;
    if (rc == 0 && draft &&
        llm_cuda_malloc(l->t.cu, (size_t)LLM_CUDA_LOOP_K_MAX * (size_t)l->t.m->hp.n_vocab *
                                     sizeof(float), &dlog) != 0)
        rc = loop_fail(l, LLM_ENOMEM, "device loop: no memory for the draft's logits");
    l->dlog = dlog;
    if (rc == 0 && draft &&
        (llm_cuda_xevent_create(l->t.cu, &l->t2d) != 0 ||
         llm_cuda_xevent_create(l->t.cu, &l->d2t) != 0))
        rc = loop_fail(l, LLM_EBACKEND, "device loop: events: %s", llm_cuda_error(l->t.cu));
    if (rc) {
        llm_errf(err, errlen, "%s", l->err);
        llm_cuda_loop_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

int llm_cuda_loop_set_drafter(llm_cuda_loop *l, int kind, int32_t ngram_min,
                              int32_t ngram_max)
{
    if (!l)
        return LLM_EINVAL;
    int32_t hi = ngram_max > 0 ? ngram_max : 4, lo = ngram_min > 0 ? ngram_min : 2;
    if ((kind == LLM_DRAFTER_BLOCK || kind == LLM_DRAFTER_HYBRID) && !l->blk)
        return loop_fail(l, LLM_EINVAL, "device loop: the %s drafter needs a head "
                                        "(llm_cuda_loop_set_block)",
                         kind == LLM_DRAFTER_BLOCK ? "block" : "hybrid");
    if (kind != LLM_DRAFTER_MODEL && kind != LLM_DRAFTER_NGRAM && kind != LLM_DRAFTER_BLOCK &&
        kind != LLM_DRAFTER_HYBRID)
        return loop_fail(l, LLM_EINVAL,
                         "device loop: drafter %d is not model, ngram, block or hybrid", kind);
    if (lo > hi)
        return loop_fail(l, LLM_EINVAL, "device loop: n-gram bounds %d..%d out of order",
                         (int)lo, (int)hi);
    l->drafter = kind;
    l->ngram_min = lo;
    l->ngram_max = hi;
    l->hybrid_min = PM__HYBRID_MIN_DEFAULT;
    return 0;
}

int llm_cuda_loop_set_block(llm_cuda_loop *l, const char *head_path)
{
    if (!l || !head_path)
        return l ? loop_fail(l, LLM_EINVAL, "device loop: a head file is required") : LLM_EINVAL;
    loop_side *t = &l->t;
    uint32_t n_ctx = llm_session_n_ctx(t->s);
    pm_block *head = NULL;
    llm_cuda_block *hb = NULL;
    char err[256] = "";
    int rc = pm__block_open(head_path, t->m, n_ctx, 1, &head, err, sizeof err);
    if (rc == 0) {
        pthread_mutex_lock(&t->m->lock);
        rc = llm_cuda_block_create(t->cu, t->be, t->m, head, n_ctx, &hb, err, sizeof err);
        pthread_mutex_unlock(&t->m->lock);
    }
    pm__block_free(head);
    if (rc)
        return loop_fail(l, rc, "device loop: %s", err);
    const int32_t *layers = NULL;
    size_t cap = (size_t)llm_cuda_block_planes(hb, &layers) * n_ctx * (size_t)t->m->hp.dim;
    float *feat = malloc(cap * sizeof *feat);
    if (!feat) {
        llm_cuda_block_free(hb);
        return loop_fail(l, LLM_ENOMEM, "device loop: no memory for the head's features");
    }
    drop_graphs(l, 0);
    drop_graphs(l, 1);
    llm_cuda_block_free(l->blk);
    free(l->blk_feat);
    l->blk = hb;
    l->blk_feat = feat;
    l->drafter = LLM_DRAFTER_BLOCK;
    return 0;
}

int llm_cuda_loop_set_ngram_device(llm_cuda_loop *l, int on)
{
    if (!l || (on != 0 && on != 1))
        return LLM_EINVAL;
    l->ngram_dev = on;
    return 0;
}

/* Mean device microseconds of reps replays of g at pos. */
static int graph_us(llm_cuda *c, llm_cuda_graph *g, uint32_t pos, int32_t reps, double *us)
{
    double sum = 0.0;
    int rc = 0;
    for (int32_t r = 0; rc == 0 && r < reps; r++) {
        float ms = 0.0f;
        rc = llm_cuda_pos_set(c, pos);
        if (rc == 0)
            rc = llm_cuda_event_record(c, LLM_CUDA_EVENTS - 2);
        if (rc == 0)
            rc = llm_cuda_graph_launch(c, g);
        if (rc == 0)
            rc = llm_cuda_event_record(c, LLM_CUDA_EVENTS - 1);
        if (rc == 0)
            rc = llm_cuda_elapsed_ms(c, LLM_CUDA_EVENTS - 2, LLM_CUDA_EVENTS - 1, &ms);
        sum += (double)ms * 1000.0;
    }
    *us = reps > 0 ? sum / (double)reps : 0.0;
    return rc;
}

int llm_cuda_loop_block_costs(llm_cuda_loop *l, int32_t k, uint32_t pos, int32_t reps,
                              llm_cuda_loop_costs *out)
{
    if (!l || !out || reps < 1 || k < 1 || k > LLM_CUDA_LOOP_K_MAX)
        return l ? loop_fail(l, LLM_EINVAL, "device loop: bad cost arguments") : LLM_EINVAL;
    if (!l->blk || !l->bhead[0][k] || !l->bverify[0][k] || !l->plain[0])
        return loop_fail(l, LLM_EINVAL, "device loop: the greedy block graphs of k = %d and the "
                                        "plain graph are not captured", (int)k);
    if ((uint64_t)pos + (uint64_t)k + 1u > llm_session_n_ctx(l->t.s))
        return loop_fail(l, LLM_EINVAL, "device loop: position %u + %d rows pass the context",
                         (unsigned)pos, (int)k + 1);
    loop_side *t = &l->t;
    pthread_mutex_lock(&t->m->lock);
    int rc = llm_cuda_bind(t->cu);
    if (rc == 0)
        rc = graph_us(t->cu, l->bhead[0][k], pos, reps, &out->head_us);
    if (rc == 0)
        rc = graph_us(t->cu, l->bverify[0][k], pos, reps, &out->verify_us);
    if (rc == 0)
        rc = graph_us(t->cu, l->plain[0], pos, reps, &out->plain_us);
    out->head_sampled_us = out->verify_sampled_us = -1.0;
    if (rc == 0 && l->bhead[1][k] && l->bverify[1][k]) {
        rc = graph_us(t->cu, l->bhead[1][k], pos, reps, &out->head_sampled_us);
        if (rc == 0)
            rc = graph_us(t->cu, l->bverify[1][k], pos, reps, &out->verify_sampled_us);
    }
    pthread_mutex_unlock(&t->m->lock);
    return rc ? side_fail(l, t, rc, "cost replays") : 0;
}

const char *llm_cuda_loop_error(const llm_cuda_loop *l)
{
    return l ? l->err : "";
}

void llm_cuda_loop_get_stats(const llm_cuda_loop *l, llm_cuda_loop_stats *out)
{
    if (l && out)
        *out = l->st;
}

/* ---- capture ----------------------------------------------------------- */

/* Issues one quiet forward of n rows of side sd in loop mode, its ids read
 * from ids_dev on the device, the head over the last `rows` rows into the
 * workspace's logits, then (out_dev not NULL) their greedy ids into out_dev
 * or, when temp > 0 (one row), one draw at temp with a uniform from the
 * loop's generator. Inside a capture of sd's context. */
static int loop_forward_s(llm_cuda_loop *l, loop_side *sd, const int32_t *ids_dev, int32_t n,
                          int32_t rows, int32_t *out_dev, float temp);

/* loop_forward that also copies the residual stream after each of the
 * head's layers into the workspace's feature planes (hb not NULL). */
static int loop_forward_f(loop_side *sd, const int32_t *ids_dev, int32_t n, int32_t rows,
                          int32_t *out_dev, const llm_cuda_block *hb);

static int loop_forward(loop_side *sd, const int32_t *ids_dev, int32_t n, int32_t rows,
                        int32_t *out_dev)
{
    return loop_forward_f(sd, ids_dev, n, rows, out_dev, NULL);
}

static int loop_forward_f(loop_side *sd, const int32_t *ids_dev, int32_t n, int32_t rows,
                          int32_t *out_dev, const llm_cuda_block *hb)
{
    static const int32_t dummy[LLM_CUDA_LOOP_K_MAX + 1];
    llm_forward_in in;
    memset(&in, 0, sizeof in);
    in.phase = n == 1 ? PM_PHASE_DECODE : PM_PHASE_VERIFY;
    in.n = n;
    in.tokens = dummy; /* the seam embeds ids_dev instead */
    in.out.want = LLM_OUT_ARGMAX;
    in.out.rows = rows;
    if (hb) {
        const int32_t *layers = NULL;
        in.out.n_feat = llm_cuda_block_planes(hb, &layers);
        memcpy(in.out.feat, layers, (size_t)in.out.n_feat * sizeof *layers);
        in.out.want |= LLM_OUT_FEATURES;
    }
    int rc = llm_cuda_backend_set_loop(sd->be, 1, ids_dev);
    if (rc)
        return rc;
    int quiet = sd->span->quiet;
    sd->span->quiet = 1;
    llm_span_forward(sd->m, sd->span, sd->ws, &in);
    sd->span->quiet = quiet;
    (void)llm_cuda_backend_set_loop(sd->be, 0, NULL);
    if (sd->be->ops->status(sd->be, NULL, 0))
        return LLM_EBACKEND;
    return out_dev ? llm_cuda_argmax_scan(sd->cu, sd->ws->logits, rows, sd->m->hp.n_vocab,
                                          out_dev)
                   : 0;
}

static int loop_forward_s(llm_cuda_loop *l, loop_side *sd, const int32_t *ids_dev, int32_t n,
                          int32_t rows, int32_t *out_dev, float temp)
{
    if (!(temp > 0.0f) || !out_dev)
        return loop_forward(sd, ids_dev, n, rows, out_dev);
    int rc = loop_forward(sd, ids_dev, n, rows, NULL);
    float *u = (float *)(void *)(l->dev + OFF_U);
    llm_cuda_sampling s = {temp, 0, 1.0f, 0.0f, u};
    if (rc == 0)
        rc = llm_cuda_loop_rng(sd->cu, (uint64_t *)(void *)(l->dev + OFF_RNG), u);
    if (rc == 0)
        rc = llm_cuda_sample(sd->cu, sd->ws->logits, sd->m->hp.n_vocab, &s, out_dev);
    return rc;
}

/* Ends sd's capture into *g (a failed capture keeps no graph). */
static int capture_end(llm_cuda_loop *l, loop_side *sd, int rc, llm_cuda_graph **g,
                       const char *what)
{
    llm_cuda_graph *cg = NULL;
    int rc2 = llm_cuda_graph_end(sd->cu, &cg);
    if (rc == 0)
        rc = rc2;
    if (rc) {
        llm_cuda_graph_free(cg);
        return side_fail(l, sd, rc, what);
    }
    *g = cg;
    l->st.captures++;
    return 0;
}

/* The plain step: the token slot embedded, its greedy id written back
 * into the slot, committed to the ring, the register advanced. */
static int capture_plain(llm_cuda_loop *l, float temp)
{
    loop_side *t = &l->t;
    int32_t *tok = l->dev + OFF_TOK;
    int rc = llm_cuda_graph_begin(t->cu);
    if (rc)
        return side_fail(l, t, rc, "plain step capture");
    rc = loop_forward_s(l, t, tok, 1, 1, tok, temp);
    if (rc == 0)
        rc = llm_cuda_loop_commit1(t->cu, tok, l->dev + OFF_RING, LOOP_RING,
                                   (uint32_t *)(l->dev + OFF_COUNT));
    return capture_end(l, t, rc, &l->plain[temp > 0.0f], "plain step capture");
}

/* The draft's k steps: two rows (din: the token at P - 1 again, the last
 * committed at P) whose last row drafts vin[1], then one row per further
 * id, each embedding the previous one; the register moves with them. */
/* Sampled, each step's logits are kept in dlog[i] for the acceptance
 * (the copy before the draw, which reads them). */
static int capture_draft(llm_cuda_loop *l, int32_t k, float temp)
{
    loop_side *d = &l->d;
    int32_t *vin = l->dev + OFF_VIN;
    size_t row = (size_t)d->m->hp.n_vocab;
    int rc = llm_cuda_graph_begin(d->cu);
    if (rc)
        return side_fail(l, d, rc, "draft capture");
    for (int32_t i = 1; rc == 0 && i <= k; i++) {
        rc = i == 1 ? loop_forward(d, l->dev + OFF_DIN, 2, 1, NULL)
                    : loop_forward(d, vin + i - 1, 1, 1, NULL);
        if (rc == 0 && temp > 0.0f)
            rc = llm_cuda_copy(d->cu, l->dlog + (size_t)(i - 1) * row, d->ws->logits,
                               row * sizeof(float));
        if (rc == 0 && temp > 0.0f) {
            float *u = (float *)(void *)(l->dev + OFF_U);
            llm_cuda_sampling s = {temp, 0, 1.0f, 0.0f, u};
            rc = llm_cuda_loop_rng(d->cu, (uint64_t *)(void *)(l->dev + OFF_RNG), u);
            if (rc == 0)
                rc = llm_cuda_sample(d->cu, d->ws->logits, (int32_t)row, &s, vin + i);
        } else if (rc == 0) {
            rc = llm_cuda_argmax_scan(d->cu, d->ws->logits, 1, (int32_t)row, vin + i);
        }
        if (rc == 0)
            rc = llm_cuda_pos_advance(d->cu, i == 1 ? 2 : 1);
    }
    return capture_end(l, d, rc, &l->draft[temp > 0.0f][k], "draft capture");
}

/* The verify of k + 1 rows, their greedy ids and the acceptance. */
static int capture_verify(llm_cuda_loop *l, int32_t k, float temp)
{
    loop_side *t = &l->t;
    uint32_t *round = (uint32_t *)(l->dev + OFF_ROUND);
    int rc = llm_cuda_graph_begin(t->cu);
    if (rc)
        return side_fail(l, t, rc, "verify capture");
    if (temp > 0.0f) {
        rc = loop_forward(t, l->dev + OFF_VIN, k + 1, k + 1, NULL);
        if (rc == 0)
            rc = llm_cuda_loop_accept_sampled(
                t->cu, t->ws->logits, l->dlog, t->m->hp.n_vocab, temp,
                (uint64_t *)(void *)(l->dev + OFF_RNG), l->dev + OFF_VIN, l->dev + OFF_DIN, k,
                llm_cuda_loop_pos(l->d.cu), l->dev + OFF_REC, LOOP_RECS, round,
                (float *)(void *)(l->dev + OFF_ACCEPT));
    } else {
        rc = loop_forward(t, l->dev + OFF_VIN, k + 1, k + 1, l->dev + OFF_G);
        if (rc == 0)
            rc = llm_cuda_loop_accept(t->cu, l->dev + OFF_G, l->dev + OFF_VIN, l->dev + OFF_DIN,
                                      k, llm_cuda_loop_pos(l->d.cu), l->dev + OFF_REC,
                                      LOOP_RECS, round);
    }
    return capture_end(l, t, rc, &l->verify[temp > 0.0f][k], "verify capture");
}

/* The acceptance of a round whose j proposals the host made (q one-hot
 * at each), over the target's rows in its workspace: greedy against the
 * greedy ids at OFF_G, or sampled (temp > 0) against the logits. */
static int accept_proposed(llm_cuda_loop *l, int32_t j, float temp)
{
    loop_side *t = &l->t;
    uint32_t *round = (uint32_t *)(l->dev + OFF_ROUND);
    if (temp > 0.0f)
        return llm_cuda_loop_accept_sampled(
            t->cu, t->ws->logits, NULL, t->m->hp.n_vocab, temp,
            (uint64_t *)(void *)(l->dev + OFF_RNG), l->dev + OFF_VIN, l->dev + OFF_DIN, j,
            (uint32_t *)(l->dev + OFF_NOPOS), l->dev + OFF_REC, LOOP_RECS, round,
            (float *)(void *)(l->dev + OFF_ACCEPT));
    return llm_cuda_loop_accept(t->cu, l->dev + OFF_G, l->dev + OFF_VIN, l->dev + OFF_DIN, j,
                                (uint32_t *)(l->dev + OFF_NOPOS), l->dev + OFF_REC, LOOP_RECS,
                                round);
}

/* An n-gram round's verify of j + 1 rows (vin[0], then the j proposed
 * ids the host uploaded) and its acceptance, greedy or (temp > 0)
 * sampled; j = 0 is a plain step that commits the last token's successor.
 * No draft register. */
static int capture_verify_ng(llm_cuda_loop *l, int32_t j, float temp)
{
    loop_side *t = &l->t;
    int s = temp > 0.0f;
    int rc = llm_cuda_graph_begin(t->cu);
    if (rc)
        return side_fail(l, t, rc, "n-gram verify capture");
    rc = loop_forward(t, l->dev + OFF_VIN, j + 1, j + 1, s ? NULL : l->dev + OFF_G);
    if (rc == 0)
        rc = accept_proposed(l, j, temp);
    return capture_end(l, t, rc, &l->verify_ng[s][j], "n-gram verify capture");
}

/* A device n-gram round of k: the lookup over the device history, the
 * verify of k + 1 rows and the acceptance over the proposal's length. */
static int capture_verify_ngd(llm_cuda_loop *l, int32_t k)
{
    loop_side *t = &l->t;
    int rc = llm_cuda_graph_begin(t->cu);
    if (rc)
        return side_fail(l, t, rc, "device n-gram capture");
    rc = llm_cuda_loop_ngram_lookup(t->cu, l->dhist, l->ngram_min, l->ngram_max, k,
                                    l->dev + OFF_VIN, l->dev + OFF_KEFF);
    if (rc == 0)
        rc = loop_forward(t, l->dev + OFF_VIN, k + 1, k + 1, l->dev + OFF_G);
    if (rc == 0)
        rc = llm_cuda_loop_accept_ngram(t->cu, l->dev + OFF_G, l->dev + OFF_VIN,
                                        l->dev + OFF_KEFF, l->dhist, l->dev + OFF_REC, LOOP_RECS,
                                        (uint32_t *)(l->dev + OFF_ROUND));
    return capture_end(l, t, rc, &l->verify_ngd[k], "device n-gram capture");
}

/* A block round's head forward (the target's context; its register is
 * the head's context length P): k block rows from vin[0], the drafted ids
 * into vin[1..k], greedy (argmax of each row) or sampled (row i drawn
 * from softmax(logits_i / temp), each with its own uniform). The logits
 * stay in the head's buffer, the q rows of the sampled acceptance. */
static int capture_block_head(llm_cuda_loop *l, int32_t k, float temp)
{
    loop_side *t = &l->t;
    int32_t *vin = l->dev + OFF_VIN;
    int32_t v = t->m->hp.n_vocab;
    llm_cuda_positions pos = {0, llm_cuda_pos(t->cu)};
    int rc = llm_cuda_graph_begin(t->cu);
    if (rc)
        return side_fail(l, t, rc, "block head capture");
    rc = llm_cuda_block_forward(l->blk, vin, k, pos);
    const float *lg = llm_cuda_block_logits(l->blk);
    if (rc == 0 && !(temp > 0.0f))
        rc = llm_cuda_argmax_scan(t->cu, lg, k, v, vin + 1);
    else if (rc == 0)
        rc = llm_cuda_loop_draw_rows(t->cu, lg, k, v, temp,
                                     (uint64_t *)(void *)(l->dev + OFF_RNG), vin + 1);
    return capture_end(l, t, rc, &l->bhead[temp > 0.0f][k], "block head capture");
}

/* A block round's verify of k + 1 rows with the head's feature planes,
 * the head's context rows of all k + 1 positions (those past the accepted
 * ones are overwritten by later rounds before anything reads them), then
 * the acceptance, which moves the register: of the head's proposals, or
 * (proposed: a hybrid round the n-gram proposed, or its plain step, into
 * bverify_oh under sampling) of the host's. */
static int capture_block_verify(llm_cuda_loop *l, int32_t k, float temp, int proposed)
{
    loop_side *t = &l->t;
    uint32_t *round = (uint32_t *)(l->dev + OFF_ROUND);
    llm_cuda_positions pos = {0, llm_cuda_pos(t->cu)};
    int rc = llm_cuda_graph_begin(t->cu);
    if (rc)
        return side_fail(l, t, rc, "block verify capture");
    int s = temp > 0.0f;
    rc = loop_forward_f(t, l->dev + OFF_VIN, k + 1, k + 1, s ? NULL : l->dev + OFF_G, l->blk);
    if (rc == 0)
        rc = llm_cuda_block_append(l->blk, t->ws->feat, k + 1, k + 1, pos);
    if (rc == 0 && s && proposed) {
        rc = accept_proposed(l, k, temp);
        return capture_end(l, t, rc, &l->bverify_oh[k], "block verify capture");
    }
    if (rc == 0 && s)
        rc = llm_cuda_loop_accept_sampled(
            t->cu, t->ws->logits, llm_cuda_block_logits(l->blk), t->m->hp.n_vocab, temp,
            (uint64_t *)(void *)(l->dev + OFF_RNG), l->dev + OFF_VIN, l->dev + OFF_DIN, k,
            (uint32_t *)(l->dev + OFF_NOPOS), l->dev + OFF_REC, LOOP_RECS, round,
            (float *)(void *)(l->dev + OFF_ACCEPT));
    else if (rc == 0)
        rc = llm_cuda_loop_accept(t->cu, l->dev + OFF_G, l->dev + OFF_VIN, l->dev + OFF_DIN, k,
                                  (uint32_t *)(l->dev + OFF_NOPOS), l->dev + OFF_REC,
                                  LOOP_RECS, round);
    return capture_end(l, t, rc, &l->bverify[s][k], "block verify capture");
}

/* Drops every graph when a backend replaced buffers they use. */
static void graphs_check(llm_cuda_loop *l)
{
    unsigned gt = llm_cuda_backend_generation(l->t.be);
    unsigned gd = l->d.s ? llm_cuda_backend_generation(l->d.be) : 0u;
    if (gt == l->gen_t && gd == l->gen_d)
        return;
    drop_graphs(l, 0);
    drop_graphs(l, 1);
    l->gen_t = gt;
    l->gen_d = gd;
}

/* ---- generation ---------------------------------------------------------- */

/* The stop reason for tok, or -1 to emit it (generate.c's rule). */
static int stop_before(int32_t eos, const llm_generate_params *p, int32_t tok)
{
    if (p->stop_at_eos && eos >= 0 && tok == eos)
        return LLM_STOP_EOS;
    for (size_t i = 0; i < p->n_stop_tokens; i++)
        if (p->stop_tokens[i] == tok)
            return LLM_STOP_TOKEN;
    return -1;
}

/* Where a generation stands: what was emitted and why it ended. */
typedef struct gen_state {
    const llm_generate_params *p;
    int32_t eos;  /* the target's, -1 when it has none */
    llm_token_cb cb;
    void *user;
    size_t emitted;
    int reason; /* -1 while going on */
} gen_state;

/* Emits tok unless it stops the generation; 1 when it has ended. */
static int emit(gen_state *g, int32_t tok)
{
    int stop = stop_before(g->eos, g->p, tok);
    if (stop >= 0) {
        g->reason = stop;
        return 1;
    }
    g->emitted++;
    if (g->cb && g->cb(g->user, tok)) {
        g->reason = LLM_STOP_CALLBACK;
        return 1;
    }
    if (g->emitted >= (size_t)g->p->max_tokens) {
        g->reason = LLM_STOP_LENGTH;
        return 1;
    }
    return 0;
}

/* The prefill through the session's ordinary path, its greedy id in *tok. */
static int prefill(llm_session *s, uint64_t req, const int32_t *prompt, size_t n, int32_t chunk,
                   int32_t output, int32_t *tok)
{
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.phase = PM_PHASE_EXACT;
    fp.request = req;
    fp.chunk = chunk;
    fp.output = output;
    fp.rows = 1;
    return llm_forward(s, &fp, prompt, n, NULL, tok);
}

/* The leaf layer range of a forward of the target's one span. */
static pm_layer_attr layer_attr(const loop_side *t, pm_phase phase, uint64_t req,
                                uint32_t tokens)
{
    pm_layer_attr a = PM_LAYER_ATTR_INIT;
    a.phase = phase;
    a.first_layer = 0;
    a.last_layer = t->m->hp.n_layers - 1;
    a.shard = 0;
    a.where = PM_WHERE_LOCAL;
    a.backend = t->be->ops->name;
    a.req = req;
    a.tokens = tokens;
    return a;
}

/* The prompt's token drawn on the host from the prefill's logits, as
 * llm_generate draws it. */
static int prefill_sampled(llm_cuda_loop *l, llm_sampler *sp, uint64_t req,
                           const int32_t *prompt, size_t n, int32_t chunk, int32_t *tok)
{
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.phase = PM_PHASE_EXACT;
    fp.request = req;
    fp.chunk = chunk;
    fp.output = LLM_OUTPUT_LOGITS;
    fp.rows = 1;
    const float *logits = NULL;
    int rc = llm_forward(l->t.s, &fp, prompt, n, &logits, NULL);
    if (rc)
        return loop_fail(l, rc, "device loop: prefill: %s", llm_session_error(l->t.s));
    *tok = llm_sample(sp, logits);
    return *tok < 0 ? loop_fail(l, *tok, "device loop: sampling the prompt's token failed") : 0;
}

/* The device generator's seed: the sampler's seed and its next draw, so a
 * reseeded sampler repeats the run and successive calls differ. */
static int seed_rng(llm_cuda_loop *l, llm_sampler *sp, uint64_t seed)
{
    uint64_t *h = (uint64_t *)(void *)(l->host + OFF_RNG);
    h[0] = seed ^ (uint64_t)(llm_sampler_uniform(sp) * 9007199254740992.0);
    h[1] = 0;
    int rc = llm_cuda_upload(l->t.cu, l->dev + OFF_RNG, h, 2 * sizeof *h);
    return rc ? side_fail(l, &l->t, rc, "generator seed") : 0;
}

static int plain_loop(llm_cuda_loop *l, int s, uint64_t req, size_t n_prompt, gen_state *g,
                      int32_t tok)
{
    loop_side *t = &l->t;
    uint32_t pos = (uint32_t)n_prompt, n_ctx = llm_session_n_ctx(t->s);
    l->host[OFF_TOK] = tok;
    l->host[OFF_COUNT] = 0;
    llm_cuda_upload(t->cu, l->dev + OFF_TOK, l->host + OFF_TOK, 2 * sizeof(int32_t));
    llm_cuda_pos_set(t->cu, pos);
    l->count = 0;
    int rc = llm_cuda_status(t->cu);
    while (rc == 0 && g->reason < 0) {
        if (pos >= n_ctx) {
            g->reason = LLM_STOP_CONTEXT;
            break;
        }
        size_t left = (size_t)g->p->max_tokens - g->emitted;
        uint32_t steps = LLM_CUDA_LOOP_BATCH;
        if (left < steps)
            steps = (uint32_t)left;
        if (n_ctx - pos < steps)
            steps = n_ctx - pos;
        uint64_t t0 = llm_now_ns();
        uint32_t c0 = l->count % LOOP_RING;
        pthread_mutex_lock(&t->m->lock);
        pm_layer_attr la = layer_attr(t, PM_PHASE_DECODE, req, 1);
        for (uint32_t i = 0; rc == 0 && i < steps; i++) {
            int q = llm_session_quiet(t->s);
            pm_range r __attribute__((cleanup(pm_range_pop))) =
                q ? PM_RANGE_NONE : pm_decode_push(req, pos + i);
            pm_range lr __attribute__((cleanup(pm_range_pop))) =
                q ? PM_RANGE_NONE : pm_layer_range_push(&la);
            rc = llm_cuda_graph_launch(t->cu, l->plain[s]);
        }
        if (rc == 0)
            rc = llm_cuda_download(t->cu, l->host + OFF_RING + c0, l->dev + OFF_RING + c0,
                                   steps * sizeof(int32_t));
        pthread_mutex_unlock(&t->m->lock);
        if (rc)
            return side_fail(l, t, rc, "plain steps");
        l->st.readbacks++;
        l->st.plain_steps += steps;
        l->count += steps;
        uint32_t used = 0;
        while (used < steps && !emit(g, l->host[OFF_RING + c0 + used]))
            used++;
        used = used < steps ? used + 1 : steps; /* the step that ended it ran */
        pos += used;
        llm_session_device_moved(t->s, pos, 0, llm_now_ns() - t0, used);
    }
    /* Each step fed one token: the position is llm_generate's (every
     * emitted token fed but the last, or all of them when a token that
     * was not emitted ended it). */
    return rc;
}

/* rounds_next for a loop of one context of n_ctx positions. */
static uint32_t rounds_next_ctx(const llm_cuda_loop *l, int32_t k, uint32_t pos, size_t left,
                                uint32_t ctx);

/* Rounds to launch in the next batch: enough for the tokens left at the
 * acceptance so far, within the batch, the records before they wrap, and
 * the contexts (each round writes positions up to P + k). */
static uint32_t rounds_next(const llm_cuda_loop *l, int32_t k, uint32_t pos, size_t left)
{
    uint32_t ctx_t = llm_session_n_ctx(l->t.s), ctx_d = llm_session_n_ctx(l->d.s);
    return rounds_next_ctx(l, k, pos, left, ctx_t < ctx_d ? ctx_t : ctx_d);
}

static uint32_t rounds_next_ctx(const llm_cuda_loop *l, int32_t k, uint32_t pos, size_t left,
                                uint32_t ctx)
{
    double per = l->st.rounds ? (double)l->st.committed / (double)l->st.rounds
                              : (double)k / 2.0 + 1.0;
    if (per < 1.0)
        per = 1.0;
    uint32_t r = (uint32_t)((double)left / per) + 1u;
    uint32_t cap = LLM_CUDA_LOOP_BATCH / 2;
    if (r > cap)
        r = cap;
    uint32_t wrap = LOOP_RECS - l->round % LOOP_RECS;
    if (r > wrap)
        r = wrap;
    uint32_t need = (uint32_t)k + 1u; /* most positions a round moves */
    uint32_t room = pos + (uint32_t)k + 1u <= ctx ? (ctx - pos - (uint32_t)k - 1u) / need + 1u : 0u;
    return r < room ? r : room;
}

/* Launches and read-backs hold both models' locks (the draft's prefill,
 * through the session, takes its own). */
static void lock_models(llm_cuda_loop *l)
{
    pthread_mutex_lock(&l->t.m->lock);
    if (l->d.m != l->t.m)
        pthread_mutex_lock(&l->d.m->lock);
}

static void unlock_models(llm_cuda_loop *l)
{
    if (l->d.m != l->t.m)
        pthread_mutex_unlock(&l->d.m->lock);
    pthread_mutex_unlock(&l->t.m->lock);
}

static int spec_round_launch(llm_cuda_loop *l, int s, uint64_t req, int32_t k,
                             const pm_layer_attr *va, const int32_t *prompt, size_t n_prompt,
                             int first)
{
    loop_side *t = &l->t, *d = &l->d;
    pm_range sr __attribute__((cleanup(pm_range_pop))) =
        llm_session_quiet(t->s) ? PM_RANGE_NONE : pm_spec_decode_push(req, (uint32_t)k);
    int rc = 0;
    {
        pm_range dr __attribute__((cleanup(pm_range_pop))) =
            llm_session_quiet(t->s) ? PM_RANGE_NONE
                                    : pm_draft_by_push(req, (uint32_t)k, "model");
        if (first && n_prompt > 1) /* the draft catches up on the prompt */
            rc = prefill(d->s, req, prompt, n_prompt - 1, 0, LLM_OUTPUT_NONE, NULL);
        if (rc == 0 && first) {
            rc = llm_cuda_pos_set(d->cu, (uint32_t)n_prompt - 1u);
            if (rc)
                return side_fail(l, d, rc, "draft position");
        }
        if (rc)
            return loop_fail(l, rc, "device loop: draft prefill: %s", llm_session_error(d->s));
        lock_models(l);
        rc = llm_cuda_xwait(d->cu, t->cu, l->t2d);
        if (rc == 0)
            rc = llm_cuda_graph_launch(d->cu, l->draft[s][k]);
        unlock_models(l);
        if (rc)
            return side_fail(l, d, rc, "draft steps");
    }
    pm_range vr __attribute__((cleanup(pm_range_pop))) =
        llm_session_quiet(t->s) ? PM_RANGE_NONE : pm_layer_range_push(va);
    lock_models(l);
    rc = llm_cuda_xwait(t->cu, d->cu, l->d2t);
    if (rc == 0)
        rc = llm_cuda_graph_launch(t->cu, l->verify[s][k]);
    unlock_models(l);
    return rc ? side_fail(l, t, rc, "verify") : 0;
}

/* The batch's `rounds` records from r0, read back into l->host: each
 * checked, counted in the stats and its ids emitted until a stop. A round
 * drafted k ids, or (proposed: device n-gram rounds) the record's last int
 * of them; every round verified k + 1 rows. *fed: ids emitted, *rows:
 * verify rows run. 0, or LLM_EBACKEND on a record no round can write. */
static int take_records(llm_cuda_loop *l, gen_state *g, uint32_t r0, uint32_t rounds, int32_t k,
                        int proposed, uint32_t *fed, uint64_t *rows)
{
    l->st.readbacks++;
    l->st.rounds += rounds;
    l->round += rounds;
    for (uint32_t i = 0; i < rounds && g->reason < 0; i++) {
        const int32_t *rec = l->host + OFF_REC + (size_t)(r0 + i) * LLM_CUDA_LOOP_REC;
        int32_t cnt = rec[0], keff = proposed ? rec[LLM_CUDA_LOOP_REC - 1] : k;
        if (keff < 0 || keff > k || cnt < 1 || cnt > keff + 1)
            return loop_fail(l, LLM_EBACKEND,
                             "device loop: round record of %d tokens (%d proposed)", (int)cnt,
                             (int)keff);
        l->st.drafted += (uint64_t)keff;
        l->st.accepted += (uint64_t)(cnt - 1);
        l->st.committed += (uint64_t)cnt;
        *rows += (uint64_t)k + 1u;
        for (int32_t j = 0; j < cnt && g->reason < 0; j++) {
            (*fed)++;
            emit(g, rec[1 + j]);
        }
    }
    return 0;
}

static int spec_loop(llm_cuda_loop *l, int s, uint64_t req, int32_t k, const int32_t *prompt,
                     size_t n_prompt, gen_state *g, int32_t tok)
{
    loop_side *t = &l->t, *d = &l->d;
    uint32_t pos = (uint32_t)n_prompt;
    /* The state a first round starts from: din = {prompt's last, tok},
     * vin[0] = tok, the target at P = n_prompt (the draft's register is set
     * after its prompt prefill, inside the first round's draft leaf). */
    l->host[OFF_ROUND] = 0;
    l->host[OFF_VIN] = tok;
    l->host[OFF_DIN] = prompt[n_prompt - 1];
    l->host[OFF_DIN + 1] = tok;
    llm_cuda_upload(t->cu, l->dev + OFF_ROUND, l->host + OFF_ROUND, sizeof(int32_t));
    llm_cuda_upload(t->cu, l->dev + OFF_VIN, l->host + OFF_VIN, sizeof(int32_t));
    llm_cuda_upload(t->cu, l->dev + OFF_DIN, l->host + OFF_DIN, 2 * sizeof(int32_t));
    int rc = llm_cuda_pos_set(t->cu, pos);
    if (rc)
        return side_fail(l, t, rc, "state upload");
    l->round = 0;
    pm_layer_attr va = layer_attr(t, PM_PHASE_VERIFY, req, (uint32_t)k + 1u);
    int first = 1;
    while (rc == 0 && g->reason < 0) {
        uint32_t rounds = rounds_next(l, k, pos, (size_t)g->p->max_tokens - g->emitted);
        if (rounds == 0) {
            g->reason = LLM_STOP_CONTEXT;
            break;
        }
        uint64_t t0 = llm_now_ns();
        uint32_t r0 = l->round % LOOP_RECS;
        for (uint32_t i = 0; rc == 0 && i < rounds; i++, first = 0)
            rc = spec_round_launch(l, s, req, k, &va, prompt, n_prompt, first);
        if (rc)
            return rc;
        lock_models(l);
        rc = llm_cuda_download(t->cu, l->host + OFF_REC + (size_t)r0 * LLM_CUDA_LOOP_REC,
                               l->dev + OFF_REC + (size_t)r0 * LLM_CUDA_LOOP_REC,
                               (size_t)rounds * LLM_CUDA_LOOP_REC * sizeof(int32_t));
        unlock_models(l);
        if (rc)
            return side_fail(l, t, rc, "round records");
        uint32_t fed = 0;
        uint64_t rows = 0;
        rc = take_records(l, g, r0, rounds, k, 0, &fed, &rows);
        if (rc)
            return rc;
        pos += fed;
        llm_session_device_moved(t->s, pos, 1, llm_now_ns() - t0, rows);
    }
    /* pos counts the tokens after the first one read from the records, up
     * to the one that ended the generation: llm_generate's position either
     * way (see plain_loop). The draft's cache is valid below it. */
    llm_session_device_moved(t->s, pos, 1, 0, 0);
    llm_session_device_moved(d->s, pos - 1, 0, 0, 0);
    return rc;
}

/* The state rounds on the target alone start from: no record yet,
 * vin[0] = tok (the last committed id), the target's register at pos. */
static int rounds_start(llm_cuda_loop *l, int32_t tok, uint32_t pos)
{
    loop_side *t = &l->t;
    l->host[OFF_ROUND] = 0;
    l->host[OFF_VIN] = tok;
    llm_cuda_upload(t->cu, l->dev + OFF_ROUND, l->host + OFF_ROUND, sizeof(int32_t));
    llm_cuda_upload(t->cu, l->dev + OFF_VIN, l->host + OFF_VIN, sizeof(int32_t));
    int rc = llm_cuda_pos_set(t->cu, pos);
    if (rc)
        return side_fail(l, t, rc, "state upload");
    l->round = 0;
    return 0;
}

/* The prompt's prefill for block rounds: the target's forward with the
 * head's feature planes (positions 0..n-1, read back to the host), then
 * the head's context built from them on the device. The first token is
 * the prefill's greedy id, or (sampled) drawn on the host from its logits
 * as llm_generate draws it. */
static int block_prefill(llm_cuda_loop *l, llm_sampler *sp, int sampled, uint64_t req,
                         const int32_t *prompt, size_t n, int32_t chunk, int32_t *tok)
{
    loop_side *t = &l->t;
    const int32_t *layers = NULL;
    int32_t np = llm_cuda_block_planes(l->blk, &layers);
    if (n > llm_session_n_ctx(t->s)) /* the features buffer holds n_ctx rows */
        return loop_fail(l, LLM_ECTX, "device loop: a prompt of %zu tokens is over the context",
                         n);
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.phase = PM_PHASE_EXACT;
    fp.request = req;
    fp.chunk = chunk;
    fp.output = sampled ? LLM_OUTPUT_LOGITS : LLM_OUTPUT_ARGMAX;
    fp.rows = 1;
    fp.n_features_layers = np;
    fp.features_layers = layers;
    fp.features = l->blk_feat;
    fp.features_cap = (size_t)np * n * (size_t)t->m->hp.dim;
    const float *logits = NULL;
    int rc = llm_forward(t->s, &fp, prompt, n, sampled ? &logits : NULL, sampled ? NULL : tok);
    if (rc)
        return loop_fail(l, rc, "device loop: prefill: %s", llm_session_error(t->s));
    if (sampled) {
        *tok = llm_sample(sp, logits);
        if (*tok < 0)
            return loop_fail(l, *tok, "device loop: sampling the prompt's token failed");
    }
    pthread_mutex_lock(&t->m->lock);
    rc = llm_cuda_bind(t->cu);
    if (rc == 0)
        rc = llm_cuda_block_append_host(l->blk, l->blk_feat, n, (uint32_t)n, 0);
    pthread_mutex_unlock(&t->m->lock);
    return rc ? side_fail(l, t, rc, "the head's context") : 0;
}

/* Block rounds: per round the head's graph inside the round's draft leaf
 * and the verify's inside its verify leaf, both on the target's stream;
 * a batch of rounds, one read-back. */
static int block_loop(llm_cuda_loop *l, int s, uint64_t req, int32_t k, size_t n_prompt,
                      gen_state *g, int32_t tok)
{
    loop_side *t = &l->t;
    uint32_t pos = (uint32_t)n_prompt, n_ctx = llm_session_n_ctx(t->s);
    int rc = rounds_start(l, tok, pos);
    if (rc)
        return rc;
    pm_layer_attr va = layer_attr(t, PM_PHASE_VERIFY, req, (uint32_t)k + 1u);
    int q = llm_session_quiet(t->s);
    while (g->reason < 0) {
        uint32_t rounds = rounds_next_ctx(l, k, pos, (size_t)g->p->max_tokens - g->emitted,
                                          n_ctx);
        if (rounds == 0) {
            g->reason = LLM_STOP_CONTEXT;
            break;
        }
        uint64_t t0 = llm_now_ns();
        uint32_t r0 = l->round % LOOP_RECS;
        pthread_mutex_lock(&t->m->lock);
        for (uint32_t i = 0; rc == 0 && i < rounds; i++) {
            pm_range sr __attribute__((cleanup(pm_range_pop))) =
                q ? PM_RANGE_NONE : pm_spec_decode_push(req, (uint32_t)k);
            {
                pm_range dr __attribute__((cleanup(pm_range_pop))) =
                    q ? PM_RANGE_NONE : pm_draft_by_push(req, (uint32_t)k, "block");
                rc = llm_cuda_graph_launch(t->cu, l->bhead[s][k]);
            }
            pm_range vr __attribute__((cleanup(pm_range_pop))) =
                q || rc ? PM_RANGE_NONE : pm_layer_range_push(&va);
            if (rc == 0)
                rc = llm_cuda_graph_launch(t->cu, l->bverify[s][k]);
        }
        if (rc == 0)
            rc = llm_cuda_download(t->cu, l->host + OFF_REC + (size_t)r0 * LLM_CUDA_LOOP_REC,
                                   l->dev + OFF_REC + (size_t)r0 * LLM_CUDA_LOOP_REC,
                                   (size_t)rounds * LLM_CUDA_LOOP_REC * sizeof(int32_t));
        pthread_mutex_unlock(&t->m->lock);
        if (rc)
            return side_fail(l, t, rc, "block rounds");
        uint32_t fed = 0;
        uint64_t rows = 0;
        rc = take_records(l, g, r0, rounds, k, 0, &fed, &rows);
        if (rc)
            return rc;
        pos += fed;
        llm_session_device_moved(t->s, pos, 1, llm_now_ns() - t0, rows);
    }
    return rc;
}

/* N-gram rounds on the device: batches of rounds, one read-back a batch. */
static int ngram_dev_loop(llm_cuda_loop *l, uint64_t req, int32_t k, const int32_t *prompt,
                          size_t n_prompt, gen_state *g, int32_t tok)
{
    loop_side *t = &l->t;
    uint32_t pos = (uint32_t)n_prompt, n_ctx = llm_session_n_ctx(t->s);
    memcpy(l->hist, prompt, n_prompt * sizeof *prompt);
    l->hist[n_prompt] = tok;
    /* l->hist is pageable memory: the runtime stages the copy before the
     * call returns (the device history then grows on the device only). */
    llm_cuda_upload(t->cu, l->dhist, l->hist, (n_prompt + 1) * sizeof *prompt);
    int rc = rounds_start(l, tok, pos);
    if (rc)
        return rc;
    pm_layer_attr va = layer_attr(t, PM_PHASE_VERIFY, req, (uint32_t)k + 1u);
    int q = llm_session_quiet(t->s);
    while (g->reason < 0) {
        uint32_t rounds = rounds_next_ctx(l, k, pos, (size_t)g->p->max_tokens - g->emitted,
                                          n_ctx);
        if (rounds == 0) {
            g->reason = LLM_STOP_CONTEXT;
            break;
        }
        uint64_t t0 = llm_now_ns();
        uint32_t r0 = l->round % LOOP_RECS;
        pthread_mutex_lock(&t->m->lock);
        for (uint32_t i = 0; rc == 0 && i < rounds; i++) {
            pm_range sr __attribute__((cleanup(pm_range_pop))) =
                q ? PM_RANGE_NONE : pm_spec_decode_push(req, (uint32_t)k);
            {
                pm_range dr __attribute__((cleanup(pm_range_pop))) =
                    q ? PM_RANGE_NONE : pm_draft_by_push(req, (uint32_t)k, "ngram");
            }
            pm_range vr __attribute__((cleanup(pm_range_pop))) =
                q ? PM_RANGE_NONE : pm_layer_range_push(&va);
            rc = llm_cuda_graph_launch(t->cu, l->verify_ngd[k]);
        }
        if (rc == 0)
            rc = llm_cuda_download(t->cu, l->host + OFF_REC + (size_t)r0 * LLM_CUDA_LOOP_REC,
                                   l->dev + OFF_REC + (size_t)r0 * LLM_CUDA_LOOP_REC,
                                   (size_t)rounds * LLM_CUDA_LOOP_REC * sizeof(int32_t));
        pthread_mutex_unlock(&t->m->lock);
        if (rc)
            return side_fail(l, t, rc, "device n-gram rounds");
        uint32_t fed = 0;
        uint64_t rows = 0;
        rc = take_records(l, g, r0, rounds, k, 1, &fed, &rows);
        if (rc)
            return rc;
        pos += fed;
        llm_session_device_moved(t->s, pos, 1, llm_now_ns() - t0, rows);
    }
    return rc;
}

/* One round the host proposed, its record read back into l->host: w >= 1
 * drafted ids, by the head's graph `head` or (head NULL) the w ids in
 * l->host + OFF_VIN + 1 uploaded, then `verify` of w + 1 rows; w = 0 is a
 * plain step (verify of the last token's row). */
static int host_round(llm_cuda_loop *l, uint64_t req, int32_t w, llm_cuda_graph *head,
                      llm_cuda_graph *verify, uint32_t pos)
{
    loop_side *t = &l->t;
    int q = llm_session_quiet(t->s);
    pm_layer_attr la = layer_attr(t, w ? PM_PHASE_VERIFY : PM_PHASE_DECODE, req,
                                  (uint32_t)w + 1u);
    uint32_t r0 = l->round % LOOP_RECS;
    int rc = 0;
    pthread_mutex_lock(&t->m->lock);
    {
        pm_range r __attribute__((cleanup(pm_range_pop))) =
            q ? PM_RANGE_NONE : w ? pm_spec_decode_push(req, (uint32_t)w) : pm_decode_push(req, pos);
        if (w > 0) { /* an n-gram proposal is the host's: its leaf holds no forward */
            pm_range dr __attribute__((cleanup(pm_range_pop))) =
                q ? PM_RANGE_NONE : pm_draft_by_push(req, (uint32_t)w, head ? "block" : "ngram");
            rc = head ? llm_cuda_graph_launch(t->cu, head)
                      : llm_cuda_upload(t->cu, l->dev + OFF_VIN + 1, l->host + OFF_VIN + 1,
                                        (size_t)w * sizeof(int32_t));
        }
        pm_range lr __attribute__((cleanup(pm_range_pop))) =
            q ? PM_RANGE_NONE : pm_layer_range_push(&la);
        if (rc == 0)
            rc = llm_cuda_graph_launch(t->cu, verify);
    }
    if (rc == 0)
        rc = llm_cuda_download(t->cu, l->host + OFF_REC + (size_t)r0 * LLM_CUDA_LOOP_REC,
                               l->dev + OFF_REC + (size_t)r0 * LLM_CUDA_LOOP_REC,
                               LLM_CUDA_LOOP_REC * sizeof(int32_t));
    pthread_mutex_unlock(&t->m->lock);
    if (rc)
        return side_fail(l, t, rc, head ? "block round" : w ? "n-gram round" : "plain step");
    l->round++;
    l->st.readbacks++;
    return 0;
}

/* Rounds the host proposes from its copy of the history, one read-back a
 * round (the next lookup needs the committed ids).
 *
 * N-gram rounds (hybrid 0): the longest recent match's continuation, at
 * most k ids and none past max_tokens, verified by the target's graph of
 * that width; no match, a plain step.
 *
 * Hybrid rounds (hybrid 1): a match of at least l->hybrid_min tokens is
 * verified as the proposal, anything shorter gives the round to the block
 * head at k (drafter.c's rule for the hybrid over a head); with one token
 * left or no room for k + 1 positions a round without a match is a plain
 * step. Every kind runs the block verify of its width, so the head's
 * context gets the features of every position the target runs, whichever
 * drafter proposed. */
static int host_lookup_loop(llm_cuda_loop *l, uint64_t req, int32_t k, int hybrid, int s,
                            const int32_t *prompt, size_t n_prompt, gen_state *g, int32_t tok)
{
    loop_side *t = &l->t;
    uint32_t n_ctx = llm_session_n_ctx(t->s), pos = (uint32_t)n_prompt;
    memcpy(l->hist, prompt, n_prompt * sizeof *prompt);
    l->hist[n_prompt] = tok; /* the history the target has seen, then last */
    size_t n_hist = n_prompt + 1;
    int rc = rounds_start(l, tok, pos);
    if (rc)
        return rc;
    int32_t take_min = hybrid ? l->hybrid_min : 1;
    while (g->reason < 0) {
        if (pos >= n_ctx) {
            g->reason = LLM_STOP_CONTEXT;
            break;
        }
        uint64_t t0 = llm_now_ns();
        /* At most k ids, none past max_tokens, every row within the cache. */
        size_t left = (size_t)g->p->max_tokens - g->emitted;
        uint32_t room = n_ctx - pos - 1;
        int32_t cut = k;
        if (left - 1 < (size_t)cut)
            cut = (int32_t)(left - 1);
        if (room < (uint32_t)cut)
            cut = (int32_t)room;
        size_t start = 0;
        int32_t j = 0;
        if (cut > 0 && pm__ngram_lookup(l->hist, n_hist, l->ngram_min, l->ngram_max, cut, &start,
                                        &j) < take_min)
            j = 0;
        int blk = hybrid && j == 0 && left > 1 && room >= (uint32_t)k;
        int32_t w = blk ? k : j; /* the verify's drafted ids */
        memcpy(l->host + OFF_VIN + 1, l->hist + start, (size_t)j * sizeof(int32_t));
        llm_cuda_graph *verify = !hybrid ? l->verify_ng[s][w]
                                 : blk || !s ? l->bverify[s][w]
                                             : l->bverify_oh[w];
        rc = host_round(l, req, w, blk ? l->bhead[s][k] : NULL, verify, pos);
        if (rc)
            return rc;
        const int32_t *rec = l->host + OFF_REC + (size_t)((l->round - 1) % LOOP_RECS) *
                                                     LLM_CUDA_LOOP_REC;
        int32_t cnt = rec[0];
        if (cnt < 1 || cnt > w + 1)
            return loop_fail(l, LLM_EBACKEND, "device loop: round record of %d tokens", (int)cnt);
        if (w > 0) {
            l->st.rounds++;
            l->st.drafted += (uint64_t)w;
            l->st.accepted += (uint64_t)(cnt - 1);
            l->st.committed += (uint64_t)cnt;
            if (hybrid && !blk) {
                l->st.ngram_rounds++;
                l->st.ngram_drafted += (uint64_t)j;
                l->st.ngram_accepted += (uint64_t)(cnt - 1);
            }
        } else {
            l->st.plain_steps++;
        }
        uint32_t fed = 0;
        for (int32_t i = 0; i < cnt && g->reason < 0; i++) {
            fed++;
            l->hist[n_hist++] = rec[1 + i];
            emit(g, rec[1 + i]);
        }
        pos += fed;
        llm_session_device_moved(t->s, pos, w > 0, llm_now_ns() - t0, (uint64_t)w + 1u);
    }
    return 0;
}

int llm_cuda_loop_generate(llm_cuda_loop *l, llm_sampler *sp, int32_t k, const int32_t *prompt,
                           size_t n_prompt, const llm_generate_params *p, llm_token_cb cb,
                           void *user, size_t *n_generated, int *stop_reason)
{
    if (n_generated)
        *n_generated = 0;
    if (!l || !sp || !p || !prompt || n_prompt < 1 || p->version != LLM_GENERATE_PARAMS_VERSION ||
        p->size < offsetof(llm_generate_params, has_request) || p->max_tokens < 1 ||
        (p->n_stop_tokens && !p->stop_tokens))
        return l ? loop_fail(l, LLM_EINVAL, "device loop: bad arguments") : LLM_EINVAL;
    llm_sampler_params spp;
    llm_sampler_get_params(sp, &spp);
    int s = spp.temperature > 0.0f;
    if (s && ((spp.top_k > 0 && spp.top_k < l->t.m->hp.n_vocab) ||
              (spp.top_p > 0.0f && spp.top_p < 1.0f)))
        return loop_fail(l, LLM_EUNSUP, "device loop: a top-k or top-p cut is not supported; "
                                        "temperature only");
    if (llm_sampler_n_vocab(sp) != l->t.m->hp.n_vocab)
        return loop_fail(l, LLM_EINVAL, "device loop: the sampler's vocabulary is not the target's");
    int ngram = k > 0 && l->drafter == LLM_DRAFTER_NGRAM;
    int hyb = k > 0 && l->drafter == LLM_DRAFTER_HYBRID;
    int blk = k > 0 && (l->drafter == LLM_DRAFTER_BLOCK || hyb);
    if (ngram && s && l->ngram_dev)
        return loop_fail(l, LLM_EUNSUP, "device loop: n-gram rounds with the lookup on the "
                                        "device are greedy only");
    if (k < 0 || k > LLM_CUDA_LOOP_K_MAX || (k > 0 && !ngram && !blk && !l->d.s))
        return loop_fail(l, LLM_EINVAL, "device loop: k %d needs 0..%d and, above 0, a draft session",
                         (int)k, LLM_CUDA_LOOP_K_MAX);
    if (blk && k > llm_cuda_block_info(l->blk)->block_size)
        return loop_fail(l, LLM_EINVAL, "device loop: k %d is over the head's block size %d",
                         (int)k, (int)llm_cuda_block_info(l->blk)->block_size);
    if (k > 0 && (llm_session_n_batch(l->t.s) < (uint32_t)k + 1u ||
                  (!ngram && !blk && llm_session_n_batch(l->d.s) < 2)))
        return loop_fail(l, LLM_EINVAL, "device loop: the target's batch (%u) is below k + 1 = %d",
                         (unsigned)llm_session_n_batch(l->t.s), (int)k + 1);
    uint64_t req = llm_generate_request(l->t.s, p);
    llm_session_reset(l->t.s);
    if (l->d.s)
        llm_session_reset(l->d.s);
    int32_t tok = 0;
    int rc = blk ? block_prefill(l, sp, s, req, prompt, n_prompt, p->chunk, &tok)
             : s ? prefill_sampled(l, sp, req, prompt, n_prompt, p->chunk, &tok)
                 : prefill(l->t.s, req, prompt, n_prompt, p->chunk, LLM_OUTPUT_ARGMAX, &tok);
    if (rc && !s && !blk)
        loop_fail(l, rc, "device loop: prefill: %s", llm_session_error(l->t.s));
    if (rc)
        return rc;
    llm_model_info info;
    llm_model_get_info(l->t.m, &info);
    gen_state g = {p, info.eos, cb, user, 0, -1};
    if (emit(&g, tok))
        goto done;
    /* Captures hold the models' locks (as every forward does). */
    if (k > 0 && !ngram && !blk)
        lock_models(l);
    else
        pthread_mutex_lock(&l->t.m->lock);
    rc = llm_cuda_bind(l->t.cu);
    graphs_check(l);
    if (s && l->temp != spp.temperature) { /* the sampled graphs hold it */
        drop_graphs(l, 1);
        l->temp = spp.temperature;
    }
    if (rc == 0 && k == 0 && !l->plain[s])
        rc = llm_cuda_backend_loop_takes(l->t.be, l->t.m, l->t.span, 1)
                 ? capture_plain(l, s ? spp.temperature : 0.0f)
                 : loop_fail(l, LLM_EUNSUP, "device loop: the target does not take the fused step");
    if (rc == 0 && ngram && l->ngram_dev && !l->verify_ngd[k])
        rc = llm_cuda_backend_loop_takes(l->t.be, l->t.m, l->t.span, k + 1)
                 ? capture_verify_ngd(l, k)
                 : loop_fail(l, LLM_EUNSUP, "device loop: the target does not take the fused step at %d rows",
                             (int)k + 1);
    for (int32_t j = 0; rc == 0 && ngram && !l->ngram_dev && j <= k; j++)
        if (!l->verify_ng[s][j])
            rc = llm_cuda_backend_loop_takes(l->t.be, l->t.m, l->t.span, j + 1)
                     ? capture_verify_ng(l, j, s ? spp.temperature : 0.0f)
                     : loop_fail(l, LLM_EUNSUP, "device loop: the target does not take the fused step at %d rows",
                                 (int)j + 1);
    /* Block rounds capture the head and the verify at k; hybrid rounds
     * also every verify of the n-gram's proposals and the plain step
     * (sampled: with the one-hot acceptance, at k too). */
    for (int32_t j = hyb ? 0 : k; rc == 0 && blk && j <= k; j++) {
        int need_head = j == k && !l->bhead[s][k];
        int need_verify = (j == k || !s) && !l->bverify[s][j];
        int need_oh = hyb && s && !l->bverify_oh[j];
        if (!need_head && !need_verify && !need_oh)
            continue;
        if (!llm_cuda_backend_loop_takes(l->t.be, l->t.m, l->t.span, j + 1))
            rc = loop_fail(l, LLM_EUNSUP, "device loop: the target does not take the fused step at %d rows",
                           (int)j + 1);
        else if (llm_workspace_features(l->t.ws, l->t.m) != 0)
            rc = loop_fail(l, LLM_ENOMEM, "device loop: no memory for the target's features");
        if (rc == 0 && need_head)
            rc = capture_block_head(l, k, s ? spp.temperature : 0.0f);
        if (rc == 0 && need_verify)
            rc = capture_block_verify(l, j, s ? spp.temperature : 0.0f, 0);
        if (rc == 0 && need_oh)
            rc = capture_block_verify(l, j, spp.temperature, 1);
    }
    if (rc == 0 && k > 0 && !ngram && !blk && !l->verify[s][k]) {
        if (!llm_cuda_backend_loop_takes(l->t.be, l->t.m, l->t.span, k + 1) ||
            !llm_cuda_backend_loop_takes(l->d.be, l->d.m, l->d.span, 2))
            rc = loop_fail(l, LLM_EUNSUP, "device loop: a model does not take the fused step at k = %d",
                           (int)k);
        if (rc == 0)
            rc = capture_draft(l, k, s ? spp.temperature : 0.0f);
        if (rc == 0)
            rc = capture_verify(l, k, s ? spp.temperature : 0.0f);
    }
    if (k > 0 && !ngram && !blk)
        unlock_models(l);
    else
        pthread_mutex_unlock(&l->t.m->lock);
    if (rc == 0 && s)
        rc = seed_rng(l, sp, spp.seed);
    if (rc == 0 && k == 0) {
        rc = plain_loop(l, s, req, n_prompt, &g, tok);
    } else if (rc == 0 && ngram && l->ngram_dev) {
        rc = ngram_dev_loop(l, req, k, prompt, n_prompt, &g, tok);
    } else if (rc == 0 && ngram) {
        rc = host_lookup_loop(l, req, k, 0, s, prompt, n_prompt, &g, tok);
    } else if (rc == 0 && hyb) {
        rc = host_lookup_loop(l, req, k, 1, s, prompt, n_prompt, &g, tok);
    } else if (rc == 0 && blk) {
        rc = block_loop(l, s, req, k, n_prompt, &g, tok);
    } else if (rc == 0) {
        /* The draft's forwards all run inside the rounds' draft leaves. */
        int dq = llm_session_quiet(l->d.s);
        llm_session_set_quiet(l->d.s, 1);
        rc = spec_loop(l, s, req, k, prompt, n_prompt, &g, tok);
        llm_session_set_quiet(l->d.s, dq);
    }
done:
    if (n_generated)
        *n_generated = g.emitted;
    if (stop_reason)
        *stop_reason = g.reason < 0 ? LLM_STOP_LENGTH : g.reason;
    return rc;
}
