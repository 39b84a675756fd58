/* session.c — sessions: a placement of shards, a position, timings.
 *
 * Every session runs a layer split (split.h): the one its options name, or
 * the monolithic placement, one local shard over every layer on the
 * model's backend, through the same code. The split owns the shards, their
 * KV caches and buffers; the session keeps the position, the phase ranges
 * and the timings, so every call below behaves the same over any
 * placement. Every forward goes through llm_forward, which validates the
 * whole request before anything runs (a failed call leaves the session
 * exactly as it was), asks each forward explicitly for its output (nothing
 * for a prefill chunk before the last), advances the position and accounts
 * time; llm_prefill, llm_decode and llm_verify are llm_forward with the
 * session's default request id.
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
#include "runner.h"
#include "session.h"
#include "split.h"

/* Longest detail line a session keeps. */
#define SESSION_ERR_MAX 256

struct llm_session {
    llm_model *m;
    llm_split *split;   /* owned: the placement (one shard when monolithic) */
    int placed;         /* 1: the options named a placement */
    uint32_t n_ctx;     /* cache positions (every shard's) */
    int32_t n_batch;    /* most tokens in one forward */
    int quiet;          /* no ranges (llm_session_set_quiet) */
    uint32_t pos;       /* filled cache positions */
    uint64_t req;       /* the default request id (llm_session_set_request) */
    llm_timings t;
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
    const char *placement = opt->size >= sizeof(llm_session_options) ? opt->placement : NULL;
    int placed = placement && placement[0];
    if (!placed && (m->span_first != 0 || m->span_last != m->hp.n_layers - 1)) {
        llm_errf(err, errlen, "session: the model holds only layers %d-%d; a monolithic session needs all %d",
                 (int)m->span_first, (int)m->span_last, (int)m->hp.n_layers);
        return LLM_EINVAL;
    }
    llm_session *s = calloc(1, sizeof *s);
    if (!s) {
        llm_errf(err, errlen, "session: out of memory");
        return LLM_ENOMEM;
    }
    s->m = m;
    s->req = opt->request;
    s->n_ctx = (uint32_t)n_ctx;
    s->n_batch = n_batch;
    s->placed = placed;
    int rc = placed ? llm_split_open(m, placement, (uint32_t)n_ctx, n_batch, &s->split, err, errlen)
                    : llm_split_open_monolithic(m, (uint32_t)n_ctx, n_batch, &s->split, err,
                                                errlen);
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
    llm_split_free(s->split);
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

int llm_session_share_threads(llm_session *dst, const llm_session *src)
{
    return llm_model_share_threads(dst->m, src ? src->m : NULL);
}

llm_split *llm_session_split(const llm_session *s)
{
    return s && s->placed ? s->split : NULL;
}

int llm_session_quiet(const llm_session *s)
{
    return s->quiet;
}

llm_split *llm_session_split_any(llm_session *s)
{
    return s ? s->split : NULL;
}

void llm_session_device_moved(llm_session *s, uint32_t pos, int verify, uint64_t ns,
                              uint64_t tokens)
{
    s->pos = pos < s->n_ctx ? pos : s->n_ctx;
    if (verify) {
        s->t.verify_ns += ns;
        s->t.verify_tokens += tokens;
    } else {
        s->t.decode_ns += ns;
        s->t.decode_tokens += tokens;
    }
}

int llm_session_device_argmax(const llm_session *s)
{
    return s && llm_split_argmax_on_device(s->split);
}

void llm_session_set_device_argmax(llm_session *s, int on)
{
    llm_split_set_argmax_op(s->split, on);
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

/* The engine's output request for llm_forward's output and rows. */
static llm_output output_of(const llm_forward_params *p, const float **logits)
{
    llm_output o = {0, p->rows, 0, {0}};
    if (p->output == LLM_OUTPUT_LOGITS && logits)
        o.want = LLM_OUT_LOGITS;
    else if (p->output == LLM_OUTPUT_ARGMAX)
        o.want = LLM_OUT_ARGMAX;
    return o;
}

/* The number of feature layers p asks for: 0 from a caller's older,
 * shorter struct. */
static int32_t n_features(const llm_forward_params *p)
{
    return p->size >= sizeof(llm_forward_params) ? p->n_features_layers : 0;
}

/* The features request: the layers (llm_features_check's rules, over the
 * whole model) and room for n tokens of each. */
static int check_features(llm_session *s, const llm_forward_params *p, size_t n)
{
    int32_t nf = n_features(p);
    if (nf == 0)
        return 0;
    if (nf < 0 || nf > LLM_FEATURES_MAX)
        return fail(s, LLM_EINVAL, "forward: features of %d layers asked: 1 to %d may be",
                    (int)nf, LLM_FEATURES_MAX);
    if (!p->features_layers)
        return fail(s, LLM_EINVAL, "forward: features of %d layers asked with no layer list",
                    (int)nf);
    llm_output o = {LLM_OUT_FEATURES, 0, nf, {0}};
    memcpy(o.feat, p->features_layers, (size_t)nf * sizeof *o.feat);
    char why[160];
    if (llm_features_check(&o, 0, s->m->hp.n_layers - 1, why, sizeof why) != 0)
        return fail(s, LLM_EINVAL, "forward: %s", why);
    size_t need = (size_t)nf * n * (size_t)s->m->hp.dim;
    if (!p->features || p->features_cap < need)
        return fail(s, LLM_EINVAL, "forward: features need %zu floats of room, %zu given", need,
                    p->features ? p->features_cap : 0);
    return 0;
}

/* The whole request, before anything runs: params, phase, sizes, ids, the
 * output, and rows lying in the last forward. Sets *step, the tokens per
 * forward. */
static int check_forward(llm_session *s, const llm_forward_params *p, const int32_t *tokens,
                         size_t n, int32_t *ids, size_t *step)
{
    if (p->version != LLM_FORWARD_PARAMS_VERSION ||
        p->size < offsetof(llm_forward_params, n_features_layers))
        return fail(s, LLM_EINVAL, "forward: params version %u size %u not understood",
                    (unsigned)p->version, (unsigned)p->size);
    size_t limit = p->phase == PM_PHASE_EXACT ? (size_t)s->n_ctx
                   : p->phase == PM_PHASE_DECODE ? 1 : (size_t)s->n_batch;
    if (!pm_phase_is_shard_phase((unsigned)p->phase))
        return fail(s, LLM_EINVAL, "forward: phase %d is not exact, decode or verify",
                    (int)p->phase);
    int rc = check_tokens(s, tokens, n, limit);
    if (rc)
        return rc;
    *step = p->phase != PM_PHASE_EXACT ? n
            : p->chunk > 0 && p->chunk < s->n_batch ? (size_t)p->chunk : (size_t)s->n_batch;
    size_t last = n % *step ? n % *step : *step; /* the last forward's tokens */
    if (p->output < LLM_OUTPUT_NONE || p->output > LLM_OUTPUT_ARGMAX)
        return fail(s, LLM_EINVAL, "forward: output %d is not none, logits or argmax",
                    (int)p->output);
    if (p->output != LLM_OUTPUT_NONE && (p->rows < 1 || (size_t)p->rows > last))
        return fail(s, LLM_EINVAL, "forward: %d rows asked of a last forward of %zu tokens",
                    (int)p->rows, last);
    if (p->output == LLM_OUTPUT_ARGMAX && !ids)
        return fail(s, LLM_EINVAL, "forward: argmax asked with no room for the ids");
    return check_features(s, p, n);
}

/* One forward of n tokens at s->pos; the caller pushed the phase range.
 * Returns 0 with the position moved, or LLM_EBACKEND with s->err naming
 * the shard that failed or refused (engine.h: whatever a shard says, the
 * forward failed in the backend; the position does not move). */
static int run_forward(llm_session *s, pm_phase phase, uint64_t req, const int32_t *tokens,
                       int32_t n, llm_output out, const llm_tree *tree, llm_split_result *res)
{
    llm_forward_in in = {phase, req, s->pos, n, tokens, NULL, out, tree};
    if (llm_split_forward(s->split, &in, res, s->err, sizeof s->err) != 0)
        return LLM_EBACKEND;
    s->pos += (uint32_t)n;
    return 0;
}

/* llm_forward, or with tree set a tree verify of n == tree->n rows (the
 * caller checked the tree and the placement). */
static int forward_rows(llm_session *s, const llm_forward_params *p, const int32_t *tokens,
                        size_t n, const llm_tree *tree, const float **logits, int32_t *ids)
{
    size_t step = 0;
    int rc = check_forward(s, p, tokens, n, ids, &step);
    if (rc)
        return rc;
    uint64_t t0 = llm_now_ns();
    llm_split_result res = {ids, NULL, NULL, n};
    int32_t nf = n_features(p);
    for (size_t done = 0; done < n; done += step) {
        int32_t len = (int32_t)(n - done < step ? n - done : step);
        int last = done + (size_t)len == n;
        llm_output out = last ? output_of(p, logits) : (llm_output){0, 0, 0, {0}};
        if (nf > 0) { /* every chunk: its rows of each plane */
            out.want |= LLM_OUT_FEATURES;
            out.n_feat = nf;
            memcpy(out.feat, p->features_layers, (size_t)nf * sizeof *out.feat);
            res.feat = p->features + done * (size_t)s->m->hp.dim;
        }
        /* Scoped: popped at the end of each forward and on the error
         * return alike (tests/split/test_split_leak.c). */
        pm_range r __attribute__((cleanup(pm_range_pop))) = PM_RANGE_NONE;
        if (!s->quiet && p->phase == PM_PHASE_EXACT)
            r = pm_prefill_push(p->request, s->pos, (uint32_t)len);
        else if (!s->quiet && p->phase == PM_PHASE_DECODE)
            r = pm_decode_push(p->request, s->pos);
        rc = run_forward(s, p->phase, p->request, tokens + done, len, out, tree, &res);
        if (rc)
            return rc;
    }
    uint64_t dt = llm_now_ns() - t0;
    if (p->phase == PM_PHASE_EXACT) {
        s->t.prefill_ns += dt;
        s->t.prefill_tokens += n;
    } else if (p->phase == PM_PHASE_DECODE) {
        s->t.decode_ns += dt;
        s->t.decode_tokens++;
    } else {
        s->t.verify_ns += dt;
        s->t.verify_tokens += n;
    }
    if (logits && p->output == LLM_OUTPUT_LOGITS)
        *logits = res.logits;
    return 0;
}

int llm_forward(llm_session *s, const llm_forward_params *p, const int32_t *tokens, size_t n,
                const float **logits, int32_t *ids)
{
    if (!s || !p)
        return LLM_EINVAL;
    return forward_rows(s, p, tokens, n, NULL, logits, ids);
}

/* ---- tree verify (tree.h) ------------------------------------------------ */

int llm_session_tree_support(llm_session *s, char *err, size_t errlen)
{
    if (!s) {
        llm_errf(err, errlen, "tree verify: no session");
        return LLM_EINVAL;
    }
    return llm_split_tree_support(s->split, err, errlen);
}

int llm_forward_tree(llm_session *s, const llm_forward_params *p, const int32_t *tokens,
                     const llm_tree *tree, const float **logits, int32_t *ids)
{
    if (!s || !p)
        return LLM_EINVAL;
    if (llm_tree_valid(tree) != 0)
        return fail(s, LLM_EINVAL, "tree verify: the tree is malformed");
    if (p->phase != PM_PHASE_VERIFY)
        return fail(s, LLM_EINVAL, "tree verify: phase %d is not verify", (int)p->phase);
    int rc = llm_session_tree_support(s, s->err, sizeof s->err);
    if (rc)
        return rc;
    return forward_rows(s, p, tokens, (size_t)tree->n, tree, logits, ids);
}

int llm_session_keep_rows(llm_session *s, uint32_t pos0, const int32_t *rows, int32_t count)
{
    if (!s || !rows || count < 1)
        return LLM_EINVAL;
    char why[200];
    if (llm_split_tree_support(s->split, why, sizeof why) != 0)
        return fail(s, LLM_EUNSUP, "keep rows: %s", why);
    for (int32_t j = 0; j < count; j++)
        if (rows[j] < j || (j > 0 && rows[j] <= rows[j - 1]) ||
            (uint64_t)pos0 + (uint64_t)rows[j] >= s->pos)
            return fail(s, LLM_EINVAL, "keep rows: row %d (%d) is out of order or past "
                        "position %u", (int)j, (int)rows[j], (unsigned)s->pos);
    if (llm_split_keep_rows(s->split, pos0, rows, count, s->err, sizeof s->err) != 0)
        return LLM_EBACKEND;
    return 0;
}

/* The three classic calls: llm_forward with the session's default id. */
static int forward_default(llm_session *s, pm_phase phase, const int32_t *tokens, size_t n,
                           int32_t chunk, int32_t rows, const float **logits)
{
    if (!s)
        return LLM_EINVAL;
    llm_forward_params p = LLM_FORWARD_PARAMS_INIT;
    p.phase = phase;
    p.chunk = chunk;
    p.output = logits ? LLM_OUTPUT_LOGITS : LLM_OUTPUT_NONE;
    p.rows = rows;
    p.request = s->req;
    return llm_forward(s, &p, tokens, n, logits, NULL);
}

int llm_prefill(llm_session *s, const int32_t *tokens, size_t n, int32_t chunk,
                const float **logits)
{
    return forward_default(s, PM_PHASE_EXACT, tokens, n, chunk, 1, logits);
}

int llm_decode(llm_session *s, int32_t token, const float **logits)
{
    return forward_default(s, PM_PHASE_DECODE, &token, 1, 0, 1, logits);
}

int llm_verify(llm_session *s, const int32_t *tokens, size_t n, const float **logits)
{
    /* Every row: row i predicts the token after tokens[i]. (An n that no
     * batch holds gets rows 1, so the batch check is the one that says
     * so.) */
    int32_t rows = n > 0 && n <= INT32_MAX ? (int32_t)n : 1;
    return forward_default(s, PM_PHASE_VERIFY, tokens, n, 0, rows, logits);
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
    if (llm_split_truncate(s->split, pos, s->err, sizeof s->err) != 0)
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
