/* split.c — a session's shards and the forward chain over them (split.h).
 *
 * Local shards run through span runners (runner.h), one per model: the
 * local shards on the session's model share its runner, so a span leaves
 * its boundary activations in the workspace and the next local span starts
 * from them in place (llm_forward_in.act == NULL), and two local shards
 * cost what the monolithic forward costs plus one leaf range. Each shard is
 * asked explicitly for its output: activations on the host only where the
 * next shard needs them there (a remote shard, or a local one on another
 * runner), and from the last shard the caller's request. A remote last
 * shard's logits are copied into the split's own host buffer, so they
 * outlive the next call on its connection (a truncate between the forward
 * and the read).
 */
#include "split.h"

#include <stdlib.h>
#include <string.h>

#include "argmax.h"
#include "backend_name.h"
#include "runner.h"
#include "split_remote.h"

typedef struct shard {
    llm_shard_spec spec;
    llm_model *own_model;  /* local on another backend: owned */
    llm_runner *runner;    /* local: one of the split's runners (borrowed) */
    llm_span *span;        /* local: its KV cache (owned) */
    llm_remote *remote;    /* remote: owned */
    llm_shard_counts counts;
} shard;

struct llm_split {
    llm_model *m;          /* the session's model */
    int n;
    shard sh[LLM_SPLIT_MAX_SHARDS];
    /* One runner per model the local shards run on: the session's model
     * (shared by every local shard on it: one workspace) and each own
     * model. Owned. */
    llm_runner *runners[LLM_SPLIT_MAX_SHARDS];
    int n_runners;
    float *logits_host;    /* [n_batch][n_vocab] when the last shard is
                              remote, else NULL */
    int32_t *ids_host;     /* [n_batch]: argmax ids asked of a remote last
                              shard as logits (argmax_op off) */
    uint32_t n_ctx;
    int32_t n_batch;
    int monolithic;        /* opened by llm_split_open_monolithic */
    int argmax_op;         /* argmax where the logits are (runner op, daemon) */
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

int llm_split_shard_counts(const llm_split *sp, int i, llm_shard_counts *out)
{
    if (!sp || i < 0 || i >= sp->n)
        return LLM_EINVAL;
    *out = sp->sh[i].counts;
    return 0;
}

/* The error line's name for shard i ("shard 1 (local:cpu): "); none for a
 * monolithic session, whose one shard is the session itself. */
static void local_fail(const llm_split *sp, int i, const char *why, char *err, size_t errlen)
{
    if (sp->monolithic)
        llm_errf(err, errlen, "%s", why);
    else
        llm_errf(err, errlen, "shard %d (local:%s): %s", i, sp->sh[i].spec.backend, why);
}

/* The runner of model m, made on first use. */
static int runner_for(llm_split *sp, llm_model *m, llm_runner **out, char *err, size_t errlen)
{
    for (int i = 0; i < sp->n_runners; i++)
        if (llm_runner_model(sp->runners[i]) == m) {
            *out = sp->runners[i];
            return 0;
        }
    int rc = llm_runner_create(m, sp->n_batch, sp->n_ctx, out, err, errlen);
    if (rc == 0)
        sp->runners[sp->n_runners++] = *out;
    return rc;
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
    if (rc)
        llm_errf(err, errlen, "shard %d (local:%s): %s", idx, sh->spec.backend, why);
    return rc;
}

/* 1 when the shard's backend is the session model's own ("cuda" and
 * "cuda:0" are one device). */
static int on_session_backend(const llm_split *sp, const shard *sh)
{
    llm_backend_name a, b;
    return llm_backend_name_parse(sh->spec.backend, &a, NULL, 0) == 0 &&
           llm_backend_name_parse(sp->m->backend_name, &b, NULL, 0) == 0 &&
           llm_backend_name_same(&a, &b);
}

static int open_local(llm_split *sp, shard *sh, int idx, char *err, size_t errlen)
{
    int own = !on_session_backend(sp, sh) || sh->spec.threads > 0;
    int rc = own ? open_own_model(sp, sh, idx, err, errlen) : 0;
    if (rc)
        return rc;
    llm_model *m = own ? sh->own_model : sp->m;
    char why[200];
    rc = runner_for(sp, m, &sh->runner, why, sizeof why);
    if (rc == 0)
        rc = llm_runner_span_create(sh->runner, sh->spec.first, sh->spec.last, idx,
                                    PM_WHERE_LOCAL, &sh->span, why, sizeof why);
    if (rc && sp->monolithic)
        llm_errf(err, errlen, "%s", why);
    else if (rc)
        llm_errf(err, errlen, "shard %d (local%s%s): %s", idx, own ? ":" : "",
                 own ? sh->spec.backend : "", why);
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
                           sp->m->hp.n_vocab};
    return llm_remote_open(&sh->spec, &p, &sh->remote, err, errlen);
}

/* Host buffers for a remote last shard's output, which must outlive the
 * next call on its connection (llm_split_forward's contract). */
static int alloc_host(llm_split *sp, char *err, size_t errlen)
{
    if (!sp->sh[sp->n - 1].remote)
        return 0;
    size_t nb = (size_t)sp->n_batch;
    sp->logits_host = malloc(nb * (size_t)sp->m->hp.n_vocab * sizeof(float));
    sp->ids_host = malloc(nb * sizeof *sp->ids_host);
    if (!sp->logits_host || !sp->ids_host) {
        llm_errf(err, errlen, "split: out of memory (host buffers)");
        return LLM_ENOMEM;
    }
    return 0;
}

static int open_placement(llm_model *m, const llm_placement *pl, uint32_t n_ctx,
                          int32_t n_batch, int monolithic, llm_split **out, char *err,
                          size_t errlen)
{
    *out = NULL;
    llm_split *sp = calloc(1, sizeof *sp);
    if (!sp) {
        llm_errf(err, errlen, "split: out of memory");
        return LLM_ENOMEM;
    }
    sp->m = m;
    sp->n = pl->n;
    sp->n_ctx = n_ctx;
    sp->n_batch = n_batch;
    sp->monolithic = monolithic;
    for (int i = 0; i < pl->n; i++)
        sp->sh[i].spec = pl->shard[i];
    int rc = 0;
    for (int i = 0; rc == 0 && i < sp->n; i++)
        rc = open_shard(sp, i, err, errlen);
    if (rc == 0)
        rc = alloc_host(sp, err, errlen);
    if (rc) {
        llm_split_free(sp);
        return rc;
    }
    /* Remote shards follow the switch the runners started with. */
    sp->argmax_op = llm_runner_argmax_default();
    *out = sp;
    return 0;
}

int llm_split_open(llm_model *m, const char *spec, uint32_t n_ctx, int32_t n_batch,
                   llm_split **out, char *err, size_t errlen)
{
    *out = NULL;
    llm_placement pl;
    int rc = llm_placement_parse(spec, m->hp.n_layers, &pl, err, errlen);
    return rc ? rc : open_placement(m, &pl, n_ctx, n_batch, 0, out, err, errlen);
}

int llm_split_local_parts(llm_split *sp, llm_span **span, llm_workspace **ws)
{
    if (!sp || sp->n != 1 || sp->sh[0].remote || !sp->sh[0].span || sp->sh[0].own_model ||
        sp->sh[0].spec.first != 0 || sp->sh[0].spec.last != sp->m->hp.n_layers - 1)
        return LLM_EINVAL;
    *span = sp->sh[0].span;
    *ws = llm_runner_workspace(sp->sh[0].runner);
    return 0;
}

/* The model a local shard's span runs on. */
static llm_model *shard_model(const llm_split *sp, const shard *sh)
{
    return sh->own_model ? sh->own_model : sp->m;
}

int llm_split_tree_support(const llm_split *sp, char *err, size_t errlen)
{
    if (!sp) {
        llm_errf(err, errlen, "tree verify: no split");
        return LLM_EINVAL;
    }
    for (int i = 0; i < sp->n; i++) {
        const shard *sh = &sp->sh[i];
        if (sh->remote)
            continue; /* the daemon checks its own backend and says so */
        const char *be = shard_model(sp, sh)->be->ops->name;
        if (strcmp(be, "cpu") != 0) {
            if (sp->n == 1)
                llm_errf(err, errlen, "tree verify needs a CPU target: this one runs on %s", be);
            else
                llm_errf(err, errlen, "tree verify needs CPU shards: shard %d runs on %s", i, be);
            return LLM_EUNSUP;
        }
    }
    return 0;
}

int llm_split_keep_rows(llm_split *sp, uint32_t pos0, const int32_t *rows, int32_t count, char *err,
                        size_t errlen)
{
    if (!sp || !rows || count < 1 || count > LLM_TREE_MAX)
        return LLM_EINVAL;
    for (int i = 0; i < sp->n; i++) {
        shard *sh = &sp->sh[i];
        if (sh->remote) {
            int rc = llm_remote_keep(sh->remote, sp->req, pos0, rows, count, err, errlen);
            if (rc)
                return rc;
            continue;
        }
        llm_span_keep_rows(shard_model(sp, sh), sh->span, pos0, rows, count);
    }
    return 0;
}

int llm_split_open_monolithic(llm_model *m, uint32_t n_ctx, int32_t n_batch, llm_split **out,
                              char *err, size_t errlen)
{
    llm_placement pl;
    memset(&pl, 0, sizeof pl);
    pl.n = 1;
    pl.shard[0].first = 0;
    pl.shard[0].last = m->hp.n_layers - 1;
    pl.shard[0].kind = LLM_SHARD_LOCAL;
    llm_backend_name bn;
    if (llm_backend_name_parse(m->backend_name, &bn, err, errlen) != 0)
        return LLM_EBACKEND;
    memcpy(pl.shard[0].backend, bn.text, strlen(bn.text) + 1);
    return open_placement(m, &pl, n_ctx, n_batch, 1, out, err, errlen);
}

void llm_split_free(llm_split *sp)
{
    if (!sp)
        return;
    for (int i = 0; i < sp->n; i++) {
        shard *sh = &sp->sh[i];
        llm_remote_close(sh->remote);
        if (sh->span)
            llm_runner_span_free(sh->runner, sh->span);
    }
    for (int i = 0; i < sp->n_runners; i++)
        llm_runner_free(sp->runners[i]);
    for (int i = 0; i < sp->n; i++)
        llm_model_free(sp->sh[i].own_model);
    free(sp->logits_host);
    free(sp->ids_host);
    free(sp);
}

void llm_split_set_quiet(llm_split *sp, int quiet)
{
    for (int i = 0; i < sp->n; i++)
        if (sp->sh[i].span)
            llm_runner_span_set_quiet(sp->sh[i].span, quiet);
}

void llm_split_set_argmax_op(llm_split *sp, int on)
{
    sp->argmax_op = on != 0;
    for (int i = 0; i < sp->n_runners; i++)
        llm_runner_set_argmax_op(sp->runners[i], on);
}

int llm_split_argmax_on_device(const llm_split *sp)
{
    const shard *last = &sp->sh[sp->n - 1];
    return last->remote ? sp->argmax_op : llm_runner_argmax_on_device(last->runner);
}

static void count(shard *sh, const llm_output *o, int32_t n)
{
    sh->counts.forwards++;
    sh->counts.activations += (o->want & LLM_OUT_ACTIVATIONS) != 0;
    sh->counts.logits += (o->want & LLM_OUT_LOGITS) != 0;
    sh->counts.argmax += (o->want & LLM_OUT_ARGMAX) != 0;
    sh->counts.rows += (uint64_t)(o->want & LLM_OUT_ACTIVATIONS ? n
                                  : o->want ? o->rows : 0);
}

/* The asked feature layers that shard i holds, into o (FEATURES set only
 * when there are some). Returns the index in in->out.feat of the first. */
static int32_t shard_features(const llm_split *sp, int i, const llm_forward_in *in,
                              llm_output *o)
{
    const llm_shard_spec *spec = &sp->sh[i].spec;
    int32_t first = -1;
    o->n_feat = 0;
    for (int32_t j = 0; (in->out.want & LLM_OUT_FEATURES) && j < in->out.n_feat; j++) {
        int32_t l = in->out.feat[j];
        if (l < spec->first || l > spec->last)
            continue;
        if (first < 0)
            first = j;
        o->feat[o->n_feat++] = l;
    }
    o->want &= ~(uint32_t)LLM_OUT_FEATURES;
    if (o->n_feat > 0)
        o->want |= LLM_OUT_FEATURES;
    return first;
}

/* What shard i hands on: the caller's request from the last shard, else
 * activations, on the host unless the next shard runs on the same runner
 * (then they stay in its workspace: want 0); and features of the asked
 * layers it holds. */
static llm_output shard_output(const llm_split *sp, int i, const llm_forward_in *in)
{
    llm_output o = {0, in->n, 0, {0}};
    if (i + 1 == sp->n) {
        o = in->out;
    } else {
        const shard *sh = &sp->sh[i], *next = &sp->sh[i + 1];
        if (!sh->runner || sh->runner != next->runner)
            o.want = LLM_OUT_ACTIVATIONS;
    }
    (void)shard_features(sp, i, in, &o);
    return o;
}

/* Copies a shard's features ([o->n_feat][n][dim], host) into the caller's
 * planes, starting at the request's index j0. */
static void put_features(const llm_split *sp, const llm_output *o, int32_t j0, int32_t n,
                         const float *feat, llm_split_result *res)
{
    size_t dim = (size_t)sp->m->hp.dim, plane = (size_t)n * dim;
    for (int32_t j = 0; j < o->n_feat; j++)
        memcpy(res->feat + (size_t)(j0 + j) * res->feat_ld * dim, feat + (size_t)j * plane,
               plane * sizeof(float));
}

/* Runs local shard i. *act: the previous shard's host activations (NULL:
 * in this shard's workspace already, or none for the first shard); on
 * return, this shard's, or NULL when the next shard shares the runner. */
static int run_local(llm_split *sp, int i, const llm_forward_in *in, const float **act,
                     llm_split_result *res, char *err, size_t errlen)
{
    shard *sh = &sp->sh[i];
    llm_forward_in fin = *in;
    fin.act = *act;
    fin.out = shard_output(sp, i, in);
    int32_t j0 = shard_features(sp, i, in, &fin.out);
    llm_run_out ro = {res->ids, NULL, NULL, NULL};
    char why[200];
    count(sh, &fin.out, in->n);
    int rc = llm_runner_run(sh->runner, sh->span, &fin, &ro, why, sizeof why);
    if (rc) {
        local_fail(sp, i, why, err, errlen);
        return rc;
    }
    *act = ro.act;
    if (i + 1 == sp->n)
        res->logits = ro.logits;
    if (fin.out.want & LLM_OUT_FEATURES)
        put_features(sp, &fin.out, j0, in->n, ro.feat, res);
    return 0;
}

/* What a remote shard is asked for: activations before the last; from the
 * last, what the caller wants, except that "nothing" (or features alone)
 * adds one argmax id (the wire's cheapest reply) and, with the argmax
 * switched off, ids are taken here from logits. */
static llm_output remote_output(const llm_split *sp, int i, const llm_forward_in *in)
{
    llm_output o = shard_output(sp, i, in);
    if (i + 1 < sp->n)
        return o;
    if ((o.want & ~(uint32_t)LLM_OUT_FEATURES) == 0) {
        o.want |= LLM_OUT_ARGMAX;
        o.rows = 1;
    } else if ((o.want & LLM_OUT_ARGMAX) && !sp->argmax_op) {
        o.want = (o.want & ~(uint32_t)LLM_OUT_ARGMAX) | LLM_OUT_LOGITS;
    }
    return o;
}

static int run_remote(llm_split *sp, int i, const llm_forward_in *in, const float **act,
                      llm_split_result *res, char *err, size_t errlen)
{
    shard *sh = &sp->sh[i];
    llm_forward_in fin = *in;
    fin.out = remote_output(sp, i, in);
    int32_t j0 = shard_features(sp, i, in, &fin.out);
    llm_remote_reply rep;
    count(sh, &fin.out, in->n);
    int rc = llm_remote_forward(sh->remote, &fin, *act, &rep, err, errlen);
    if (rc)
        return rc;
    if (fin.out.want & LLM_OUT_FEATURES)
        put_features(sp, &fin.out, j0, in->n, rep.feat, res);
    if (i + 1 < sp->n) {
        *act = rep.values;
        return 0;
    }
    size_t rows = (size_t)fin.out.rows, vocab = (size_t)sp->m->hp.n_vocab;
    uint32_t want = in->out.want;
    if (fin.out.want & LLM_OUT_LOGITS) {
        memcpy(sp->logits_host, rep.values, rows * vocab * sizeof(float));
        res->logits = want & LLM_OUT_LOGITS ? sp->logits_host : NULL;
    }
    for (size_t r = 0; (want & LLM_OUT_ARGMAX) && r < rows; r++)
        res->ids[r] = fin.out.want & LLM_OUT_ARGMAX
                          ? rep.ids[r]
                          : llm_argmax(sp->logits_host + r * vocab, (int32_t)vocab);
    return 0;
}

int llm_split_forward(llm_split *sp, const llm_forward_in *in, llm_split_result *res,
                      char *err, size_t errlen)
{
    res->logits = NULL;
    /* Every shard is told the phase, so it is checked once for all here,
     * the same rule a daemon applies to what it receives. */
    if (!pm_phase_is_shard_phase(in->phase)) {
        llm_errf(err, errlen, "split: phase %d is not a shard phase (exact, decode, verify)",
                 (int)in->phase);
        return LLM_EINVAL;
    }
    if (in->act || !in->tokens) {
        llm_errf(err, errlen, "split: a forward starts from token ids");
        return LLM_EINVAL;
    }
    uint32_t want = in->out.want, head = want & (LLM_OUT_LOGITS | LLM_OUT_ARGMAX);
    if ((want & ~(uint32_t)(LLM_OUT_LOGITS | LLM_OUT_ARGMAX | LLM_OUT_FEATURES)) ||
        (head && (in->out.rows < 1 || in->out.rows > in->n)) ||
        ((want & LLM_OUT_ARGMAX) && !res->ids)) {
        llm_errf(err, errlen, "split: output request %u of %d rows is not one a forward of %d "
                 "tokens can give", (unsigned)want, (int)in->out.rows, (int)in->n);
        return LLM_EINVAL;
    }
    if (want & LLM_OUT_FEATURES) {
        char why[160];
        if (llm_features_check(&in->out, 0, sp->m->hp.n_layers - 1, why, sizeof why) != 0) {
            llm_errf(err, errlen, "split: %s", why);
            return LLM_EINVAL;
        }
        if (!res->feat || res->feat_ld < (size_t)in->n) {
            llm_errf(err, errlen, "split: features asked with no room for them");
            return LLM_EINVAL;
        }
    }
    sp->req = in->req;
    const float *act = NULL;
    for (int i = 0; i < sp->n; i++) {
        int rc = sp->sh[i].remote ? run_remote(sp, i, in, &act, res, err, errlen)
                                  : run_local(sp, i, in, &act, res, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
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
