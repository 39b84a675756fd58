/* session.c — sessions: one KV cache, one workspace, a position.
 *
 * A session runs the monolithic placement, one span over all layers on the
 * model's backend, unless its options name a placement: then a layer split
 * (split.h) owns the shards, their KV caches and buffers, and the session
 * keeps only the position, the phase ranges and the timings, so every call
 * below behaves the same over any placement. Every forward goes through
 * run_forward(), which (monolithic) holds
 * the model lock (sessions over one model may live on different threads;
 * the backend is not reentrant), advances the position and accounts time.
 * Arguments are validated before anything runs, so a failed call leaves the
 * session exactly as it was.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "forward.h"
#include "model.h"
#include "session.h"
#include "split.h"

/* Longest detail line a session keeps. */
#define SESSION_ERR_MAX 256

struct llm_session {
    llm_model *m;
    llm_span span;      /* layers 0..L-1, shard 0, local (monolithic) */
    llm_workspace ws;   /* monolithic only */
    llm_split *split;   /* owned; NULL: monolithic */
    uint32_t n_ctx;     /* cache positions (every shard's) */
    int32_t n_batch;    /* most tokens in one forward */
    int quiet;          /* no ranges (llm_session_set_quiet) */
    uint32_t pos;       /* filled cache positions */
    uint64_t req;
    llm_timings t;
    float *logits_host; /* [n_batch][n_vocab] when the backend's memory is
                           not host memory; NULL otherwise */
    int device_argmax;  /* 1: greedy tokens may be taken by the backend's
                           argmax op (llm_session_set_device_argmax) */
    char err[SESSION_ERR_MAX];
};

uint64_t llm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int fail(llm_session *s, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(llm_session *s, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return status;
}

int llm_session_create(llm_model *m, const llm_session_options *opt,
                       llm_session **out, char *err, size_t errlen)
{
    llm_session_options defaults = LLM_SESSION_OPTIONS_INIT;
    if (out)
        *out = NULL;
    if (!m || !out) {
        llm_errf(err, errlen, "session: model and out are required");
        return LLM_EINVAL;
    }
    if (!opt)
        opt = &defaults;
    if (opt->version != LLM_SESSION_OPTIONS_VERSION ||
        opt->size < offsetof(llm_session_options, placement)) {
        llm_errf(err, errlen, "session: options version %u size %u not understood",
                 (unsigned)opt->version, (unsigned)opt->size);
        return LLM_EINVAL;
    }
    int32_t n_ctx = opt->n_ctx > 0 && opt->n_ctx < m->hp.n_ctx_train ? opt->n_ctx : m->hp.n_ctx_train;
    int32_t n_batch = opt->n_batch > 0 ? opt->n_batch : 512;
    if (n_batch > n_ctx)
        n_batch = n_ctx;
    llm_session *s = calloc(1, sizeof *s);
    if (!s) {
        llm_errf(err, errlen, "session: out of memory");
        return LLM_ENOMEM;
    }
    s->m = m;
    s->req = opt->request;
    s->n_ctx = (uint32_t)n_ctx;
    s->n_batch = n_batch;
    /* Read once here, never per token: PHASEMARK_DEVICE_ARGMAX=0 keeps
     * greedy decoding on the host path (for A/B runs). */
    const char *da = getenv("PHASEMARK_DEVICE_ARGMAX");
    s->device_argmax = !(da && strcmp(da, "0") == 0);
    const char *placement = opt->size >= sizeof(llm_session_options) ? opt->placement : NULL;
    if (placement && placement[0]) {
        int rc = llm_split_open(m, placement, (uint32_t)n_ctx, n_batch, &s->split, err, errlen);
        if (rc) {
            free(s);
            return rc;
        }
        *out = s;
        return 0;
    }
    if (m->span_first != 0 || m->span_last != m->hp.n_layers - 1) {
        llm_errf(err, errlen, "session: the model holds only layers %d-%d; a monolithic session needs all %d",
                 (int)m->span_first, (int)m->span_last, (int)m->hp.n_layers);
        free(s);
        return LLM_EINVAL;
    }
    pthread_mutex_lock(&m->lock); /* reserve() grows the backend's scratch */
    int rc = llm_span_init(&s->span, m, 0, m->hp.n_layers - 1, (uint32_t)n_ctx, err, errlen);
    if (rc == 0) {
        rc = llm_workspace_init(&s->ws, m, n_batch, (uint32_t)n_ctx, err, errlen);
        if (rc)
            llm_span_release(&s->span, m);
    }
    pthread_mutex_unlock(&m->lock);
    if (rc == 0 && !m->be->host_visible) {
        s->logits_host = malloc((size_t)n_batch * (size_t)m->hp.n_vocab * sizeof(float));
        if (!s->logits_host) {
            llm_errf(err, errlen, "session: out of memory (logits)");
            llm_session_free(s);
            return LLM_ENOMEM;
        }
    }
    if (rc) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void llm_session_free(llm_session *s)
{
    if (!s)
        return;
    if (s->split) {
        llm_split_free(s->split);
        free(s);
        return;
    }
    /* Backend memory is released under the model lock, like it was
     * allocated: a device backend's context serves one thread at a time,
     * and another session may be mid-forward. */
    pthread_mutex_lock(&s->m->lock);
    llm_workspace_release(&s->ws, s->m);
    llm_span_release(&s->span, s->m);
    pthread_mutex_unlock(&s->m->lock);
    free(s->logits_host);
    free(s);
}

const char *llm_session_error(const llm_session *s)
{
    return s ? s->err : "no session";
}

void llm_session_set_request(llm_session *s, uint64_t request)
{
    s->req = request;
}

uint64_t llm_session_get_request(const llm_session *s)
{
    return s->req;
}

void llm_session_set_quiet(llm_session *s, int quiet)
{
    s->quiet = quiet != 0;
    s->span.quiet = s->quiet;
    if (s->split)
        llm_split_set_quiet(s->split, s->quiet);
}

uint32_t llm_session_pos(const llm_session *s)
{
    return s->pos;
}

uint32_t llm_session_n_ctx(const llm_session *s)
{
    return s->n_ctx;
}

uint32_t llm_session_n_batch(const llm_session *s)
{
    return (uint32_t)s->n_batch;
}

const llm_model *llm_session_model(const llm_session *s)
{
    return s->m;
}

llm_split *llm_session_split(const llm_session *s)
{
    return s ? s->split : NULL;
}

/* Rejects a forward of n tokens that would not fit or names a bad id. */
static int check_tokens(llm_session *s, const int32_t *tokens, size_t n,
                        size_t limit)
{
    if (!tokens || n == 0)
        return fail(s, LLM_EINVAL, "no tokens given");
    if (n > s->n_ctx - s->pos)
        return fail(s, LLM_ECTX, "%zu tokens at position %u exceed the context of %u",
                    n, (unsigned)s->pos, (unsigned)s->n_ctx);
    if (n > limit)
        return fail(s, LLM_EINVAL, "%zu tokens exceed the batch of %zu", n, limit);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->m->hp.n_vocab)
            return fail(s, LLM_ETOKEN, "token %d at index %zu is outside the vocabulary of %d",
                        (int)tokens[i], i, (int)s->m->hp.n_vocab);
    return 0;
}

/* What a forward hands back: the host logits (one row, or n rows for
 * LLM_LOGITS_ALL), nothing (a prefill chunk before the last, under the
 * greedy path), or the rows' greedy tokens through the backend's argmax
 * op, the logits left unread in backend memory. */
typedef enum fwd_want { FWD_LOGITS, FWD_NOTHING, FWD_ARGMAX } fwd_want;

/* One forward of n tokens at s->pos; the caller pushed the phase range.
 * Sets *logits (FWD_LOGITS) or tok[0..rows) (FWD_ARGMAX, monolithic
 * sessions whose backend has the op only; rows is 1, or n for
 * LLM_LOGITS_ALL) and returns 0, or returns LLM_EBACKEND with s->err set
 * when a backend faulted (the position does not move). */
static int run_forward(llm_session *s, const int32_t *tokens, int32_t n, pm_phase phase,
                       llm_logits_mode mode, fwd_want want, const float **logits,
                       int32_t *tok)
{
    llm_forward_in in = {phase, s->req, s->pos, n, tokens, NULL, mode};
    if (s->split) {
        const float *split_out = llm_split_forward(s->split, &in, s->err, sizeof s->err);
        if (!split_out)
            return LLM_EBACKEND;
        s->pos += (uint32_t)n;
        *logits = split_out;
        return 0;
    }
    llm_backend *be = s->m->be;
    const float *out = s->ws.logits;
    int32_t n_vocab = s->m->hp.n_vocab, rows = mode == LLM_LOGITS_ALL ? n : 1;
    int op_rc = 0;
    pthread_mutex_lock(&s->m->lock);
    llm_span_forward(s->m, &s->span, &s->ws, &in);
    if (want == FWD_ARGMAX) {
        op_rc = be->ops->argmax(be, s->ws.logits, rows, n_vocab, tok);
    } else if (want == FWD_LOGITS && !be->host_visible) {
        be->ops->read(be, s->logits_host, s->ws.logits,
                      (size_t)rows * (size_t)n_vocab * sizeof(float));
        out = s->logits_host;
    }
    int rc = llm_model_backend_check(s->m, s->err, sizeof s->err);
    pthread_mutex_unlock(&s->m->lock);
    if (rc)
        return LLM_EBACKEND;
    for (int32_t r = 0; want == FWD_ARGMAX && r < rows; r++)
        if (op_rc || tok[r] < 0 || tok[r] >= n_vocab)
            return fail(s, LLM_EBACKEND,
                        "backend %s: argmax failed (%d) or gave %d for a vocabulary of %d",
                        be->ops->name, op_rc, (int)tok[r], (int)n_vocab);
    s->pos += (uint32_t)n;
    if (want == FWD_LOGITS)
        *logits = out;
    return 0;
}

int llm_session_device_argmax(const llm_session *s)
{
    return s && !s->split && s->device_argmax && s->m->be->ops->argmax != NULL;
}

void llm_session_set_device_argmax(llm_session *s, int on)
{
    s->device_argmax = on != 0;
}

/* llm_prefill, handing back the last row's logits (greedy NULL) or its
 * greedy token through the argmax op (greedy set; the caller checked
 * llm_session_device_argmax), in which case no chunk's logits are read. */
static int prefill(llm_session *s, const int32_t *tokens, size_t n, int32_t chunk,
                   const float **logits, int32_t *greedy)
{
    if (!s)
        return LLM_EINVAL;
    int rc = check_tokens(s, tokens, n, (size_t)s->n_ctx);
    if (rc)
        return rc;
    size_t step = chunk > 0 && chunk < s->n_batch ? (size_t)chunk : (size_t)s->n_batch;
    uint64_t t0 = llm_now_ns();
    const float *last = NULL;
    for (size_t done = 0; done < n; done += step) {
        int32_t len = (int32_t)(n - done < step ? n - done : step);
        fwd_want want = !greedy ? FWD_LOGITS : done + (size_t)len < n ? FWD_NOTHING : FWD_ARGMAX;
        pm_range r = s->quiet ? PM_RANGE_NONE : pm_prefill_push(s->req, s->pos, (uint32_t)len);
        rc = run_forward(s, tokens + done, len, PM_PHASE_EXACT, LLM_LOGITS_LAST, want,
                         &last, greedy);
        pm_range_pop(&r);
        if (rc)
            return rc;
    }
    s->t.prefill_ns += llm_now_ns() - t0;
    s->t.prefill_tokens += n;
    if (logits)
        *logits = last;
    return 0;
}

int llm_prefill(llm_session *s, const int32_t *tokens, size_t n, int32_t chunk,
                const float **logits)
{
    return prefill(s, tokens, n, chunk, logits, NULL);
}

int llm_prefill_greedy(llm_session *s, const int32_t *tokens, size_t n, int32_t chunk,
                       int32_t *tok)
{
    if (!tok || !llm_session_device_argmax(s))
        return LLM_EINVAL;
    return prefill(s, tokens, n, chunk, NULL, tok);
}

/* llm_decode with the same two kinds of result as prefill(). */
static int decode(llm_session *s, int32_t token, const float **logits, int32_t *greedy)
{
    if (!s)
        return LLM_EINVAL;
    int rc = check_tokens(s, &token, 1, 1);
    if (rc)
        return rc;
    uint64_t t0 = llm_now_ns();
    const float *out = NULL;
    pm_range r = s->quiet ? PM_RANGE_NONE : pm_decode_push(s->req, s->pos);
    rc = run_forward(s, &token, 1, PM_PHASE_DECODE, LLM_LOGITS_LAST,
                     greedy ? FWD_ARGMAX : FWD_LOGITS, &out, greedy);
    pm_range_pop(&r);
    if (rc)
        return rc;
    s->t.decode_ns += llm_now_ns() - t0;
    s->t.decode_tokens++;
    if (logits)
        *logits = out;
    return 0;
}

int llm_decode(llm_session *s, int32_t token, const float **logits)
{
    return decode(s, token, logits, NULL);
}

int llm_decode_greedy(llm_session *s, int32_t token, int32_t *tok)
{
    if (!tok || !llm_session_device_argmax(s))
        return LLM_EINVAL;
    return decode(s, token, NULL, tok);
}

/* llm_verify with the same two kinds of result as prefill(): all n rows'
 * logits, or all n rows' greedy tokens (greedy [n]). */
static int verify(llm_session *s, const int32_t *tokens, size_t n, const float **logits,
                  int32_t *greedy)
{
    if (!s)
        return LLM_EINVAL;
    int rc = check_tokens(s, tokens, n, (size_t)s->n_batch);
    if (rc)
        return rc;
    uint64_t t0 = llm_now_ns();
    const float *out = NULL;
    rc = run_forward(s, tokens, (int32_t)n, PM_PHASE_VERIFY, LLM_LOGITS_ALL,
                     greedy ? FWD_ARGMAX : FWD_LOGITS, &out, greedy);
    if (rc)
        return rc;
    s->t.verify_ns += llm_now_ns() - t0;
    s->t.verify_tokens += n;
    if (logits)
        *logits = out;
    return 0;
}

int llm_verify(llm_session *s, const int32_t *tokens, size_t n, const float **logits)
{
    return verify(s, tokens, n, logits, NULL);
}

int llm_verify_greedy(llm_session *s, const int32_t *tokens, size_t n, int32_t *toks)
{
    if (!toks || !llm_session_device_argmax(s))
        return LLM_EINVAL;
    return verify(s, tokens, n, NULL, toks);
}

int llm_session_truncate(llm_session *s, uint32_t pos)
{
    if (!s)
        return LLM_EINVAL;
    if (pos > s->pos)
        return fail(s, LLM_EINVAL, "cannot truncate to %u: only %u positions are filled",
                    (unsigned)pos, (unsigned)s->pos);
    /* Cache rows past pos are simply overwritten by later forwards:
     * attention never reads beyond the current position. Remote shards
     * are told, so that their own position checks agree. */
    if (s->split && llm_split_truncate(s->split, pos, s->err, sizeof s->err) != 0)
        return LLM_EBACKEND;
    s->pos = pos;
    return 0;
}

void llm_session_reset(llm_session *s)
{
    if (!s)
        return;
    s->pos = 0;
    s->err[0] = '\0';
    if (s->split)
        llm_split_reset(s->split);
    memset(&s->t, 0, sizeof s->t);
}

void llm_session_get_timings(const llm_session *s, llm_timings *t)
{
    *t = s->t;
}

void llm_session_add_sample_ns(llm_session *s, uint64_t ns)
{
    s->t.sample_ns += ns;
}
