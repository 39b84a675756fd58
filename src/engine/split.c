/* split.c — a session's shards and the forward chain over them (split.h).
 *
 * Local shards on the session's model share one workspace: a span leaves
 * its boundary activations in ws->x and the next local span starts from
 * them in place (llm_forward_in.act == NULL), so two local shards cost what
 * the monolithic forward costs plus one leaf range. Activations cross to
 * host memory only where the next shard needs them there (a remote shard,
 * or a local one on another backend). Logits come from the last shard's
 * workspace when it is local and host-visible, else from the split's own
 * host buffer.
 */
#include "split.h"

#include <stdlib.h>
#include <string.h>

#include "split_remote.h"

typedef struct shard {
    llm_shard_spec spec;
    llm_model *m;          /* local: the model it runs on (borrowed or own) */
    llm_model *own_model;  /* local on another backend: owned */
    llm_span span;         /* local: its KV cache */
    llm_workspace *ws;     /* local: &split->ws or &own_ws */
    llm_workspace own_ws;
    int has_span;
    llm_remote *remote;    /* remote: owned */
} shard;

struct llm_split {
    llm_model *m;          /* the session's model */
    int n;
    shard sh[LLM_SPLIT_MAX_SHARDS];
    llm_workspace ws;      /* shared by the local shards on m */
    int has_ws;
    float *act_host;       /* [n_batch][dim], activations off a device */
    float *logits_host;    /* [n_batch][n_vocab], or NULL when unneeded */
    uint32_t n_ctx;
    int32_t n_batch;
    uint64_t req;          /* the request id of the last forward */
};

int llm_split_n_shards(const llm_split *sp)
{
    return sp ? sp->n : 0;
}

long llm_split_shard_pid(const llm_split *sp, int i)
{
    return sp && i >= 0 && i < sp->n ? llm_remote_pid(sp->sh[i].remote) : 0;
}

/* "cuda" and "cuda:0" name the same device. */
static int same_backend(const char *a, const char *b)
{
    if (strcmp(a, "cuda") == 0)
        a = "cuda:0";
    if (strcmp(b, "cuda") == 0)
        b = "cuda:0";
    return strcmp(a, b) == 0;
}

/* A local shard on another backend (or with its own thread count) opens
 * the same file holding only its span. */
static int open_own_model(llm_split *sp, shard *sh, int idx, char *err, size_t errlen)
{
    llm_model_options o = LLM_MODEL_OPTIONS_INIT;
    o.backend = sh->spec.backend;
    o.n_threads = sh->spec.threads > 0 ? sh->spec.threads : sp->m->n_threads_opt;
    o.span_first = sh->spec.first;
    o.span_layers = sh->spec.last - sh->spec.first + 1;
    char why[200];
    int rc = llm_model_open(sp->m->path, &o, &sh->own_model, why, sizeof why);
    if (rc) {
        llm_errf(err, errlen, "shard %d (local:%s): %s", idx, sh->spec.backend, why);
        return rc;
    }
    sh->m = sh->own_model;
    return 0;
}

static int open_local(llm_split *sp, shard *sh, int idx, char *err, size_t errlen)
{
    int own = !same_backend(sh->spec.backend, sp->m->backend_name) || sh->spec.threads > 0;
    int rc = own ? open_own_model(sp, sh, idx, err, errlen) : 0;
    if (rc)
        return rc;
    if (!own) {
        sh->m = sp->m;
        if (!llm_model_has_layer(sp->m, sh->spec.first) || !llm_model_has_layer(sp->m, sh->spec.last)) {
            llm_errf(err, errlen, "shard %d (local): the model holds only layers %d-%d", idx,
                     (int)sp->m->span_first, (int)sp->m->span_last);
            return LLM_EINVAL;
        }
    }
    pthread_mutex_lock(&sh->m->lock); /* workspaces reserve backend scratch */
    rc = llm_span_init(&sh->span, sh->m, sh->spec.first, sh->spec.last, sp->n_ctx, err, errlen);
    if (rc == 0) {
        sh->has_span = 1;
        if (own) {
            rc = llm_workspace_init(&sh->own_ws, sh->m, sp->n_batch, sp->n_ctx, err, errlen);
            sh->ws = rc == 0 ? &sh->own_ws : NULL;
        } else if (!sp->has_ws) {
            rc = llm_workspace_init(&sp->ws, sh->m, sp->n_batch, sp->n_ctx, err, errlen);
            sp->has_ws = rc == 0;
        }
        if (!own)
            sh->ws = &sp->ws;
    }
    pthread_mutex_unlock(&sh->m->lock);
    sh->span.shard = idx;
    sh->span.where = PM_WHERE_LOCAL;
    return rc;
}

static int open_shard(llm_split *sp, int idx, char *err, size_t errlen)
{
    shard *sh = &sp->sh[idx];
    if (sh->spec.kind == LLM_SHARD_LOCAL)
        return open_local(sp, sh, idx, err, errlen);
    /* A spawned daemon works with the engine's thread count unless told:
     * the two take turns, never run at once. */
    if (sh->spec.kind == LLM_SHARD_SPAWN && sh->spec.threads <= 0)
        sh->spec.threads = sp->m->be->n_threads;
    llm_remote_params p = {idx, sp->m->path, sp->n_ctx, sp->n_batch, sp->m->hp.dim,
                           sp->m->hp.n_vocab, idx == sp->n - 1};
    return llm_remote_open(&sh->spec, &p, &sh->remote, err, errlen);
}

/* Host buffers: activations leaving a device backend, and logits that do
 * not come from a host-visible local workspace. */
static int alloc_host(llm_split *sp, char *err, size_t errlen)
{
    const shard *last = &sp->sh[sp->n - 1];
    int need_logits = !last->m || !last->m->be->host_visible;
    int need_act = 0;
    for (int i = 0; i + 1 < sp->n; i++)
        need_act |= sp->sh[i].m && !sp->sh[i].m->be->host_visible;
    size_t nb = (size_t)sp->n_batch;
    if (need_logits)
        sp->logits_host = malloc(nb * (size_t)sp->m->hp.n_vocab * sizeof(float));
    if (need_act)
        sp->act_host = malloc(nb * (size_t)sp->m->hp.dim * sizeof(float));
    if ((need_logits && !sp->logits_host) || (need_act && !sp->act_host)) {
        llm_errf(err, errlen, "split: out of memory (host buffers)");
        return LLM_ENOMEM;
    }
    return 0;
}

int llm_split_open(llm_model *m, const char *spec, uint32_t n_ctx, int32_t n_batch,
                   llm_split **out, char *err, size_t errlen)
{
    *out = NULL;
    llm_split *sp = calloc(1, sizeof *sp);
    if (!sp) {
        llm_errf(err, errlen, "split: out of memory");
        return LLM_ENOMEM;
    }
    llm_placement pl;
    int rc = llm_placement_parse(spec, m->hp.n_layers, &pl, err, errlen);
    if (rc) {
        free(sp);
        return rc;
    }
    sp->m = m;
    sp->n = pl.n;
    sp->n_ctx = n_ctx;
    sp->n_batch = n_batch;
    for (int i = 0; i < pl.n; i++)
        sp->sh[i].spec = pl.shard[i];
    for (int i = 0; rc == 0 && i < sp->n; i++)
        rc = open_shard(sp, i, err, errlen);
    if (rc == 0)
        rc = alloc_host(sp, err, errlen);
    if (rc) {
        llm_split_free(sp);
        return rc;
    }
    *out = sp;
    return 0;
}

void llm_split_free(llm_split *sp)
{
    if (!sp)
        return;
    /* Backend memory is released under its model's lock, as it was
     * allocated: another session may be mid-forward on that backend. */
    for (int i = 0; i < sp->n; i++) {
        shard *sh = &sp->sh[i];
        llm_remote_close(sh->remote);
        if (sh->m)
            pthread_mutex_lock(&sh->m->lock);
        if (sh->has_span)
            llm_span_release(&sh->span, sh->m);
        if (sh->ws == &sh->own_ws)
            llm_workspace_release(&sh->own_ws, sh->m);
        if (sh->m)
            pthread_mutex_unlock(&sh->m->lock);
        llm_model_free(sh->own_model);
    }
    if (sp->has_ws) {
        pthread_mutex_lock(&sp->m->lock);
        llm_workspace_release(&sp->ws, sp->m);
        pthread_mutex_unlock(&sp->m->lock);
    }
    free(sp->act_host);
    free(sp->logits_host);
    free(sp);
}

void llm_split_set_quiet(llm_split *sp, int quiet)
{
    for (int i = 0; i < sp->n; i++)
        sp->sh[i].span.quiet = quiet != 0;
}

/* Runs a local shard. *act: the previous shard's host activations (NULL:
 * in this shard's workspace already, or none for the first shard); on
 * return, this shard's, or NULL when the next shard shares the workspace.
 * The last shard sets *logits. */
static int run_local(llm_split *sp, int i, const llm_forward_in *in, const float **act,
                     const float **logits, char *err, size_t errlen)
{
    shard *sh = &sp->sh[i];
    llm_backend *be = sh->m->be;
    llm_forward_in fin = *in;
    fin.act = *act;
    pthread_mutex_lock(&sh->m->lock);
    llm_span_forward(sh->m, &sh->span, sh->ws, &fin);
    const shard *next = i + 1 < sp->n ? &sp->sh[i + 1] : NULL;
    size_t dim = (size_t)sh->m->hp.dim;
    if (!next) {
        *logits = sh->ws->logits;
        if (!be->host_visible) {
            size_t rows = in->logits == LLM_LOGITS_ALL ? (size_t)in->n : 1;
            be->ops->read(be, sp->logits_host, sh->ws->logits,
                          rows * (size_t)sh->m->hp.n_vocab * sizeof(float));
            *logits = sp->logits_host;
        }
    } else if (next->ws == sh->ws) {
        *act = NULL;
    } else if (be->host_visible) {
        *act = sh->ws->x;
    } else {
        be->ops->read(be, sp->act_host, sh->ws->x, (size_t)in->n * dim * sizeof(float));
        *act = sp->act_host;
    }
    char why[200];
    int rc = llm_model_backend_check(sh->m, why, sizeof why);
    pthread_mutex_unlock(&sh->m->lock);
    if (rc)
        llm_errf(err, errlen, "shard %d (local:%s): %s", i, sh->spec.backend, why);
    return rc;
}

static int run_remote(llm_split *sp, int i, const llm_forward_in *in, const float **act,
                      const float **logits, char *err, size_t errlen)
{
    const float *values;
    int rc = llm_remote_forward(sp->sh[i].remote, in, *act, &values, err, errlen);
    if (rc)
        return rc;
    if (i + 1 < sp->n) {
        *act = values;
        return 0;
    }
    size_t rows = in->logits == LLM_LOGITS_ALL ? (size_t)in->n : 1;
    memcpy(sp->logits_host, values, rows * (size_t)sp->m->hp.n_vocab * sizeof(float));
    *logits = sp->logits_host;
    return 0;
}

const float *llm_split_forward(llm_split *sp, const llm_forward_in *in, char *err,
                               size_t errlen)
{
    /* Every shard is told the phase, so it is checked once for all here,
     * the same rule a daemon applies to what it receives. */
    if (!pm_phase_is_shard_phase(in->phase)) {
        llm_errf(err, errlen, "split: phase %d is not a shard phase (exact, decode, verify)",
                 (int)in->phase);
        return NULL;
    }
    if (in->act || !in->tokens) {
        llm_errf(err, errlen, "split: a forward starts from token ids");
        return NULL;
    }
    sp->req = in->req;
    const float *act = NULL, *logits = NULL;
    for (int i = 0; i < sp->n; i++) {
        int rc = sp->sh[i].remote ? run_remote(sp, i, in, &act, &logits, err, errlen)
                                  : run_local(sp, i, in, &act, &logits, err, errlen);
        if (rc)
            return NULL;
    }
    return logits;
}

int llm_split_truncate(llm_split *sp, uint32_t pos, char *err, size_t errlen)
{
    int status = 0;
    for (int i = 0; i < sp->n; i++) {
        if (!sp->sh[i].remote)
            continue; /* a local cache is simply overwritten past pos */
        int rc = llm_remote_truncate(sp->sh[i].remote, sp->req, pos, err, errlen);
        if (rc && !status)
            status = rc;
    }
    return status;
}

void llm_split_reset(llm_split *sp)
{
    for (int i = 0; i < sp->n; i++)
        if (sp->sh[i].remote)
            llm_remote_reset(sp->sh[i].remote, sp->req);
}

int llm_split_send_raw(llm_split *sp, int i, uint16_t kind, const void *meta,
                       size_t meta_len, const void *body, size_t body_len, int *code,
                       char *text, size_t textlen, char *err, size_t errlen)
{
    if (!sp || i < 0 || i >= sp->n || !sp->sh[i].remote) {
        llm_errf(err, errlen, "split: shard %d is not remote", i);
        return LLM_EINVAL;
    }
    return llm_remote_send_raw(sp->sh[i].remote, kind, meta, meta_len, body, body_len, code,
                               text, textlen, err, errlen);
}
