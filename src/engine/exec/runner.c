/* runner.c — the span runner (runner.h): the one place that locks a model,
 * runs a span forward, takes the requested output and checks the backend.
 *
 * Invariants: the workspace and the host buffer are sized at creation for
 * n_batch rows, so a run allocates nothing; a run holds the model's lock
 * from the forward to the backend check, so what it reads back is the
 * forward's own output and a fault it reports is its own.
 */
#define _POSIX_C_SOURCE 200809L
#include "runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argmax.h"
#include "backend.h"
#include "model.h"

/* Rows of host_fast: a decode's one, or a verify of up to 15 drafted
 * tokens (8 MB for a 128256-word vocabulary). */
#define RUNNER_FAST_ROWS 16

struct llm_runner {
    llm_model *m;         /* borrowed */
    llm_workspace ws;     /* on m's backend, [n_batch] rows */
    float *host;          /* [n_batch][host_width] when the backend's memory
                             is not host memory; NULL otherwise */
    float *host_fast;     /* [fast_rows][host_width] of the backend's
                             host_alloc (page-locked on a device): what a
                             decode or a verify reads back every step */
    float *host_feat;     /* [LLM_FEATURES_MAX][n_batch][dim] when the
                             backend's memory is not host memory: features
                             read back; made with ws.feat at the first
                             forward that asks for features */
    size_t host_width;    /* floats per row of host and host_fast */
    int32_t fast_rows;
    int32_t n_batch;
    uint32_t n_ctx;
    int argmax_op;        /* 1: ARGMAX through be->ops->argmax when it exists */
};

static int ends_model(const llm_model *m, const llm_span *span)
{
    return span->last == m->hp.n_layers - 1;
}

int llm_runner_argmax_default(void)
{
    const char *da = getenv("PHASEMARK_DEVICE_ARGMAX");
    return !(da && strcmp(da, "0") == 0);
}

int llm_runner_create(llm_model *m, int32_t n_batch, uint32_t n_ctx, llm_runner **out,
                      char *err, size_t errlen)
{
    *out = NULL;
    if (!m || n_batch < 1 || n_ctx < 1) {
        llm_errf(err, errlen, "runner: a model, n_batch >= 1 and n_ctx >= 1 are required");
        return LLM_EINVAL;
    }
    llm_runner *r = calloc(1, sizeof *r);
    if (!r) {
        llm_errf(err, errlen, "runner: out of memory");
        return LLM_ENOMEM;
    }
    r->m = m;
    r->n_batch = n_batch;
    r->n_ctx = n_ctx;
    r->argmax_op = llm_runner_argmax_default();
    pthread_mutex_lock(&m->lock); /* reserve() grows the backend's scratch */
    int rc = llm_workspace_init(&r->ws, m, n_batch, n_ctx, err, errlen);
    pthread_mutex_unlock(&m->lock);
    if (rc) {
        free(r);
        return rc;
    }
    if (!m->be->host_visible) {
        int head = m->span_last == m->hp.n_layers - 1;
        int32_t w = head && m->hp.n_vocab > m->hp.dim ? m->hp.n_vocab : m->hp.dim;
        r->host_width = (size_t)w;
        r->host = malloc((size_t)n_batch * r->host_width * sizeof(float));
        /* Page-locked memory is scarce and slow to allocate, so only the
         * rows of a decode or a verify get it; a prefill reads one row. */
        r->fast_rows = n_batch < RUNNER_FAST_ROWS ? n_batch : RUNNER_FAST_ROWS;
        pthread_mutex_lock(&m->lock);
        r->host_fast = m->be->ops->host_alloc(
            m->be, (size_t)r->fast_rows * r->host_width * sizeof(float));
        pthread_mutex_unlock(&m->lock);
        if (!r->host || !r->host_fast) {
            llm_runner_free(r);
            llm_errf(err, errlen, "runner: out of memory (host buffer, %d rows of %d)",
                     (int)n_batch, (int)w);
            return LLM_ENOMEM;
        }
    }
    *out = r;
    return 0;
}

void llm_runner_free(llm_runner *r)
{
    if (!r)
        return;
    /* Backend memory is released under the model lock, like it was
     * allocated: a device backend's context serves one thread at a time,
     * and another runner may be mid-forward. */
    pthread_mutex_lock(&r->m->lock);
    llm_workspace_release(&r->ws, r->m);
    r->m->be->ops->host_free(r->m->be, r->host_fast);
    pthread_mutex_unlock(&r->m->lock);
    free(r->host);
    free(r->host_feat);
    free(r);
}

int llm_runner_span_create(llm_runner *r, int32_t first, int32_t last, int32_t shard,
                           pm_where where, llm_span **out, char *err, size_t errlen)
{
    *out = NULL;
    if (first < 0 || last < first || !llm_model_has_layer(r->m, first) ||
        !llm_model_has_layer(r->m, last)) {
        llm_errf(err, errlen, "the model holds only layers %d-%d", (int)r->m->span_first,
                 (int)r->m->span_last);
        return LLM_EINVAL;
    }
    llm_span *span = calloc(1, sizeof *span);
    if (!span) {
        llm_errf(err, errlen, "runner: out of memory");
        return LLM_ENOMEM;
    }
    pthread_mutex_lock(&r->m->lock); /* the cache is backend memory */
    int rc = llm_span_init(span, r->m, first, last, r->n_ctx, err, errlen);
    pthread_mutex_unlock(&r->m->lock);
    if (rc) {
        free(span);
        return rc;
    }
    span->shard = shard;
    span->where = where;
    *out = span;
    return 0;
}

void llm_runner_span_free(llm_runner *r, llm_span *span)
{
    if (!span)
        return;
    pthread_mutex_lock(&r->m->lock);
    llm_span_release(span, r->m);
    pthread_mutex_unlock(&r->m->lock);
    free(span);
}

void llm_runner_span_set_quiet(llm_span *span, int quiet)
{
    span->quiet = quiet != 0;
}

void llm_runner_set_argmax_op(llm_runner *r, int on)
{
    r->argmax_op = on != 0;
}

int llm_runner_argmax_on_device(const llm_runner *r)
{
    return r->argmax_op && r->m->be->ops->argmax != NULL;
}

llm_model *llm_runner_model(const llm_runner *r)
{
    return r->m;
}

llm_workspace *llm_runner_workspace(llm_runner *r)
{
    return &r->ws;
}

int llm_features_check(const llm_output *o, int32_t first, int32_t last, char *err,
                       size_t errlen)
{
    if (o->n_feat < 1 || o->n_feat > LLM_FEATURES_MAX) {
        llm_errf(err, errlen, "features of %d layers asked: 1 to %d may be", (int)o->n_feat,
                 LLM_FEATURES_MAX);
        return LLM_EINVAL;
    }
    for (int32_t j = 0; j < o->n_feat; j++) {
        int32_t l = o->feat[j];
        if (l < first || l > last) {
            llm_errf(err, errlen, "features of layer %d asked of layers %d-%d", (int)l,
                     (int)first, (int)last);
            return LLM_EINVAL;
        }
        if (j > 0 && l <= o->feat[j - 1]) {
            llm_errf(err, errlen, "features layers must be strictly ascending: %d after %d",
                     (int)l, (int)o->feat[j - 1]);
            return LLM_EINVAL;
        }
    }
    return 0;
}

/* The output request against the span, before anything runs. */
static int check_output(const llm_runner *r, const llm_span *span, const llm_forward_in *in,
                        char *err, size_t errlen)
{
    uint32_t want = in->out.want;
    if (want & ~(uint32_t)(LLM_OUT_ACTIVATIONS | LLM_OUT_LOGITS | LLM_OUT_ARGMAX |
                           LLM_OUT_FEATURES)) {
        llm_errf(err, errlen, "output request %u has unknown bits", (unsigned)want);
        return LLM_EINVAL;
    }
    if ((want & LLM_OUT_FEATURES) &&
        llm_features_check(&in->out, span->first, span->last, err, errlen) != 0)
        return LLM_EINVAL;
    if (!(want & (LLM_OUT_LOGITS | LLM_OUT_ARGMAX)))
        return 0;
    if (want & LLM_OUT_ACTIVATIONS) { /* one host buffer holds either */
        llm_errf(err, errlen, "output request %u: activations and logits/argmax are exclusive",
                 (unsigned)want);
        return LLM_EINVAL;
    }
    if (!ends_model(r->m, span)) {
        llm_errf(err, errlen, "layers %d-%d do not end the model: no logits or argmax",
                 (int)span->first, (int)span->last);
        return LLM_EINVAL;
    }
    if (in->out.rows < 1 || in->out.rows > in->n) {
        llm_errf(err, errlen, "output rows %d outside 1..%d (the forward's tokens)",
                 (int)in->out.rows, (int)in->n);
        return LLM_EINVAL;
    }
    return 0;
}

/* Where `rows` rows read back land: the page-locked buffer when they fit. */
static float *read_buffer(llm_runner *r, size_t rows)
{
    return rows <= (size_t)r->fast_rows ? r->host_fast : r->host;
}

/* Host copies of what was asked (model lock held). Returns the argmax op's
 * status (0 when it did not run). */
static int take_output(llm_runner *r, const llm_forward_in *in, llm_run_out *out)
{
    llm_backend *be = r->m->be;
    const llm_hparams *hp = &r->m->hp;
    uint32_t want = in->out.want;
    size_t rows = (size_t)in->out.rows, vocab = (size_t)hp->n_vocab;
    out->act = out->logits = out->feat = NULL;
    if (want & LLM_OUT_FEATURES) {
        out->feat = r->ws.feat;
        if (!be->host_visible) {
            be->ops->read(be, r->host_feat, r->ws.feat,
                          (size_t)in->out.n_feat * (size_t)in->n * (size_t)hp->dim *
                              sizeof(float));
            out->feat = r->host_feat;
        }
    }
    if (want & LLM_OUT_ACTIVATIONS) {
        out->act = r->ws.x;
        if (!be->host_visible) {
            float *dst = read_buffer(r, (size_t)in->n);
            be->ops->read(be, dst, r->ws.x, (size_t)in->n * (size_t)hp->dim * sizeof(float));
            out->act = dst;
        }
        return 0; /* never with logits (check_output) */
    }
    if (!(want & (LLM_OUT_LOGITS | LLM_OUT_ARGMAX)))
        return 0;
    /* The ids come from the op only when no host copy of the logits is
     * needed anyway; else from that copy, by the same rule. */
    if ((want & LLM_OUT_ARGMAX) && !(want & LLM_OUT_LOGITS) && llm_runner_argmax_on_device(r))
        return be->ops->argmax(be, r->ws.logits, (int32_t)rows, (int32_t)vocab, out->ids);
    const float *lg = r->ws.logits;
    if (!be->host_visible) {
        float *dst = read_buffer(r, rows);
        be->ops->read(be, dst, r->ws.logits, rows * vocab * sizeof(float));
        lg = dst;
    }
    if (want & LLM_OUT_LOGITS)
        out->logits = lg;
    for (size_t i = 0; (want & LLM_OUT_ARGMAX) && i < rows; i++)
        out->ids[i] = llm_argmax(lg + i * vocab, (int32_t)vocab);
    return 0;
}

/* The features buffers, on the backend and (when its memory is not host
 * memory) on the host, made at the first forward that asks for features
 * (model lock held). */
static int features_buffers(llm_runner *r)
{
    if (llm_workspace_features(&r->ws, r->m) != 0)
        return LLM_ENOMEM;
    if (r->m->be->host_visible || r->host_feat)
        return 0;
    r->host_feat = malloc(LLM_FEATURES_MAX * (size_t)r->n_batch * (size_t)r->m->hp.dim *
                          sizeof(float));
    return r->host_feat ? 0 : LLM_ENOMEM;
}

int llm_runner_run(llm_runner *r, llm_span *span, const llm_forward_in *in, llm_run_out *out,
                   char *err, size_t errlen)
{
    int rc = check_output(r, span, in, err, errlen);
    if (rc)
        return rc;
    if ((in->out.want & LLM_OUT_ARGMAX) && !out->ids) {
        llm_errf(err, errlen, "argmax asked with no room for the ids");
        return LLM_EINVAL;
    }
    llm_model *m = r->m;
    pthread_mutex_lock(&m->lock);
    if ((in->out.want & LLM_OUT_FEATURES) && features_buffers(r) != 0) {
        pthread_mutex_unlock(&m->lock);
        llm_errf(err, errlen, "runner: out of memory (features of %d rows)", (int)r->n_batch);
        return LLM_ENOMEM;
    }
    llm_span_forward(m, span, &r->ws, in);
    int op_rc = take_output(r, in, out);
    rc = llm_model_backend_check(m, err, errlen);
    pthread_mutex_unlock(&m->lock);
    if (rc)
        return LLM_EBACKEND;
    if (op_rc) {
        llm_errf(err, errlen, "backend %s: argmax failed (%d)", m->be->ops->name, op_rc);
        return LLM_EBACKEND;
    }
    int32_t vocab = m->hp.n_vocab;
    for (int32_t i = 0; (in->out.want & LLM_OUT_ARGMAX) && i < in->out.rows; i++)
        if (out->ids[i] < 0 || out->ids[i] >= vocab) {
            llm_errf(err, errlen, "backend %s: argmax gave %d for a vocabulary of %d",
                     m->be->ops->name, (int)out->ids[i], (int)vocab);
            return LLM_EBACKEND;
        }
    return 0;
}
