/* worker.c — worker threads: each owns one engine session and runs queued
 * jobs one at a time.
 *
 * A job runs as: reset the session, tag it with the job's id (so every
 * marker range of the request says req=<id>, the same id the client sees
 * in X-Request-Id), prefill and decode through llm_generate, and after each
 * token append its text to the job, look for stop strings, publish what is
 * safe to send, and check whether the client is still there. Returning
 * non-zero from the token callback is the engine's way to stop early; it
 * serves stop strings, cancellation and shutdown alike.
 *
 * With a draft model (--draft) the worker also owns a draft session and a
 * speculative generator over the two (phasemark/spec.h): the same
 * callback, the same stop conditions, greedy output identical to the
 * target's alone, and the round statistics in the response's timings.
 * With a placement (--placement) the target session is split over local
 * and remote shards below the session API; nothing here changes.
 *
 * --device-loop (phasemark/spec.h, the device loop): each worker creates
 * one loop over its sessions at start-up, when the configuration takes
 * (a monolithic CUDA target, no drafter or the model / ngram one), and a
 * request whose sampler it takes runs on it; the rest run as above (auto)
 * or are refused with 400 (on). The same callback serves stop strings,
 * cancellation and shutdown: the loop calls it for every token after each
 * batch's read-back, so a cancel is honoured within one batch (at most 16
 * steps or 8 rounds). The loop's ranges carry the job's id like the host
 * paths' (the same generate params).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "internal.h"

typedef struct gen_ctx {
    pms_worker *w;
    pms_job *job;
    int32_t prev;      /* previous token, for detokenization */
    size_t max_stop;   /* longest stop string */
    int stopped;       /* a stop string matched */
    int cancelled;
    int refused;       /* --device-loop on and the loop does not take it */
    char detail[256];  /* the engine's failure line */
} gen_ctx;

/* True when the client closed its end: a peek that reads end-of-file.
 * Data (a pipelined request) or EAGAIN means it is still there. */
static int peer_closed(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0)
        return 1;
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

/* The bytes of token tok after prev, into w->piece (grown once when a
 * piece is longer than any before). */
static int token_text(gen_ctx *g, int32_t tok)
{
    pms_buf *b = &g->w->piece;
    const llm_model *m = g->w->srv->model;
    size_t n = 0;
    pms_buf_clear(b);
    int rc = llm_model_token_text(m, g->prev, tok, b->p, b->cap - 1, &n);
    if (rc == LLM_ESPACE && pms_buf_reserve(b, n) == 0)
        rc = llm_model_token_text(m, g->prev, tok, b->p, b->cap - 1, &n);
    b->n = rc == 0 ? n : 0;
    return rc == 0 ? 0 : -1;
}

/* Under j->mu: appends the piece, cuts at a stop string, and moves ready
 * up to what can no longer change. */
static void publish(gen_ctx *g, const char *piece, size_t n)
{
    pms_job *j = g->job;
    const pms_req *r = &j->req;
    size_t old = j->text.n;
    if (pms_buf_append(&j->text, piece, n))
        return; /* out of memory: the text stays short; the length limit ends it */
    size_t from = old > g->max_stop ? old - g->max_stop : 0;
    size_t at = pms_stop_find(j->text.p, j->text.n, from, (const char *const *)r->stop, r->stop_len, r->n_stop);
    if (at != (size_t)-1) {
        j->text.n = at;
        j->text.p[at] = 0;
        g->stopped = 1;
    }
    size_t hold = g->stopped ? 0 : pms_stop_holdback(j->text.p, j->text.n, (const char *const *)r->stop,
                                                     r->stop_len, r->n_stop);
    size_t ready = pms_utf8_complete(j->text.p, j->text.n - hold);
    if (ready > j->ready)
        j->ready = ready;
    pthread_cond_broadcast(&j->cv);
}

static int on_token(void *user, int32_t tok)
{
    gen_ctx *g = user;
    int have = token_text(g, tok) == 0;
    g->prev = tok;
    pms_job *j = g->job;
    pthread_mutex_lock(&j->mu);
    j->n_generated++;
    if (have)
        publish(g, g->w->piece.p, g->w->piece.n);
    if (!j->cancel && j->fd >= 0 && peer_closed(j->fd))
        j->cancel = j->client_gone = 1;
    g->cancelled = j->cancel;
    pthread_mutex_unlock(&j->mu);
    return g->stopped || g->cancelled;
}

/* The engine's reason without its "device loop: " lead (the option names it). */
static const char *loop_reason(const char *why)
{
    return strncmp(why, "device loop: ", 13) == 0 ? why + 13 : why;
}

static int make_sampler(const pms_server *s, const pms_job *j, llm_sampler **out)
{
    llm_sampler_params p = {.version = LLM_SAMPLER_PARAMS_VERSION, .size = sizeof(llm_sampler_params)};
    p.temperature = j->req.temperature;
    p.top_k = j->req.top_k;
    p.top_p = j->req.top_p;
    /* Without a seed every request draws differently, as OpenAI's API
     * does; the id and the clock make the stream unique. */
    p.seed = j->req.has_seed ? j->req.seed : j->id * 0x9e3779b97f4a7c15ull ^ pms_now_ns();
    return llm_sampler_create(&p, s->info.n_vocab, out);
}

/* --draft-tree: a greedy request verifies trees, a sampled one chains
 * (a tree verifies greedy decoding only: speculative sampling over
 * several candidates per position needs a residual rule the engine does
 * not have). The placement and backend were checked at start-up
 * (spec_init), so the switch itself cannot fail but for a broken
 * generator; the job records which it ran. */
static int choose_verify(pms_worker *w, pms_job *j, gen_ctx *g)
{
    int nodes = w->srv->cfg.draft_tree;
    int tree = nodes > 0 && !(j->req.temperature > 0.0f);
    j->stats.draft_mode = tree ? PMS_DRAFT_TREE : PMS_DRAFT_CHAIN;
    if (nodes == 0)
        return 0;
    return llm_spec_set_tree(w->spec, tree ? nodes : 0, g->detail, sizeof g->detail);
}

/* The generation proper. Returns the engine status. */
static int run_generation(pms_worker *w, pms_job *j, llm_sampler *smp, gen_ctx *g, int *reason)
{
    llm_generate_params gp = {.version = LLM_GENERATE_PARAMS_VERSION, .size = sizeof(llm_generate_params)};
    gp.max_tokens = j->req.max_tokens;
    gp.stop_at_eos = 1;
    gp.stop_tokens = w->srv->stop_ids; /* the chat format's end of turn */
    gp.n_stop_tokens = w->srv->n_stop_ids;
    gp.has_request = 1; /* every range of the job carries its id */
    gp.request = j->id;
    size_t n_gen = 0;
    char why[200] = "";
    if (w->loop && llm_device_loop_takes(w->loop, smp, why, sizeof why)) {
        j->stats.device_loop = 1;
        int rc = llm_device_loop_generate(w->loop, smp, j->prompt, j->n_prompt, &gp, on_token, g,
                                          &n_gen, reason);
        if (rc)
            snprintf(g->detail, sizeof g->detail, "%s", llm_device_loop_error(w->loop));
        return rc;
    }
    if (w->srv->cfg.device_loop == PMS_DEVICE_LOOP_ON) {
        g->refused = 1;
        snprintf(g->detail, sizeof g->detail, "%s", loop_reason(why));
        return LLM_EUNSUP;
    }
    if (!w->spec)
        return llm_generate(w->session, smp, j->prompt, j->n_prompt, &gp, on_token, g, &n_gen, reason);
    llm_spec_reset_stats(w->spec);
    int rc = choose_verify(w, j, g);
    if (rc == 0)
        rc = llm_spec_generate(w->spec, smp, j->prompt, j->n_prompt, &gp, on_token, g, &n_gen, reason);
    if (rc)
        snprintf(g->detail, sizeof g->detail, "%s", llm_spec_error(w->spec));
    return rc;
}

/* The device loop's share of the stats: what its counters moved by
 * during the job (before: their values when it started). Rounds are the
 * session's verify time (the loop records them there). */
static void fill_loop_stats(pms_worker *w, pms_job *j, const llm_device_loop_stats *before,
                            const llm_timings *t)
{
    llm_device_loop_stats now;
    llm_device_loop_get_stats(w->loop, &now);
    pms_gen_stats *st = &j->stats;
    st->drafter = now.drafter;
    if (now.drafter < 0)
        return;
    st->draft_mode = PMS_DRAFT_CHAIN;
    st->drafted = now.drafted - before->drafted;
    st->accepted = now.accepted - before->accepted;
    st->by_drafted[now.drafter] = st->drafted;
    st->by_accepted[now.drafter] = st->accepted;
    st->rounds_committed = now.committed - before->committed;
    st->rounds_ns = t->verify_ns;
}

static void fill_stats(pms_worker *w, pms_job *j, uint64_t wall_ns, const llm_device_loop_stats *before)
{
    llm_timings t;
    llm_session_get_timings(w->session, &t);
    pms_gen_stats *st = &j->stats;
    st->prompt_n = t.prefill_tokens;
    st->prompt_ns = t.prefill_ns;
    st->decode_n = t.decode_tokens;
    st->decode_ns = t.decode_ns;
    st->verify_n = t.verify_tokens;
    st->verify_ns = t.verify_ns;
    st->predicted_n = j->n_generated;
    st->predicted_ns = wall_ns > t.prefill_ns ? wall_ns - t.prefill_ns : 0;
    st->drafter = -1;
    if (st->device_loop) {
        fill_loop_stats(w, j, before, &t);
    } else if (w->spec) {
        llm_spec_stats ss;
        llm_spec_get_stats(w->spec, &ss);
        st->drafted = ss.drafted;
        st->accepted = ss.accepted;
        st->drafter = ss.drafter;
        for (int i = 0; i < LLM_DRAFTER_COUNT; i++) {
            st->by_drafted[i] = ss.by[i].drafted;
            st->by_accepted[i] = ss.by[i].accepted;
        }
        st->rounds_committed = ss.committed;
        st->rounds_ns = ss.draft_ns + ss.verify_ns + ss.accept_ns;
        if (st->draft_mode == PMS_DRAFT_TREE) {
            /* With a tree set every block round is a tree round. */
            st->tree_rounds = ss.by[LLM_DRAFTER_BLOCK].rounds;
            st->tree_nodes = ss.by[LLM_DRAFTER_BLOCK].drafted;
            st->tree_accepted = ss.by[LLM_DRAFTER_BLOCK].accepted;
        }
    }
}

/* Metrics first, then DONE: a client that scrapes /metrics right after
 * its answer must see its own request counted (and no longer running). */
static void count(pms_server *s, const pms_job *j, int cancelled)
{
    pms_metrics *m = &s->metrics;
    const pms_gen_stats *st = &j->stats;
    atomic_fetch_add(&m->prompt_tokens, st->prompt_n);
    atomic_fetch_add(&m->generated_tokens, st->predicted_n);
    if (st->device_loop)
        atomic_fetch_add(&m->device_loop, 1);
    atomic_fetch_add(&m->drafted_tokens, st->drafted);
    atomic_fetch_add(&m->accepted_tokens, st->accepted);
    for (int i = 0; i < LLM_DRAFTER_COUNT; i++) {
        atomic_fetch_add(&m->drafter_drafted[i], st->by_drafted[i]);
        atomic_fetch_add(&m->drafter_accepted[i], st->by_accepted[i]);
    }
    if (st->draft_mode == PMS_DRAFT_TREE)
        atomic_fetch_add(&m->tree_generations, 1);
    else if (st->draft_mode == PMS_DRAFT_CHAIN && s->cfg.draft_tree > 0)
        atomic_fetch_add(&m->tree_fallbacks, 1);
    atomic_fetch_add(&m->tree_rounds, st->tree_rounds);
    atomic_fetch_add(&m->tree_nodes, st->tree_nodes);
    atomic_fetch_add(&m->tree_accepted, st->tree_accepted);
    atomic_fetch_add(&m->phase_tokens[PM_PHASE_EXACT], st->prompt_n);
    atomic_fetch_add(&m->phase_ns[PM_PHASE_EXACT], st->prompt_ns);
    atomic_fetch_add(&m->phase_tokens[PM_PHASE_DECODE], st->decode_n);
    atomic_fetch_add(&m->phase_ns[PM_PHASE_DECODE], st->decode_ns);
    atomic_fetch_add(&m->phase_tokens[PM_PHASE_VERIFY], st->verify_n);
    atomic_fetch_add(&m->phase_ns[PM_PHASE_VERIFY], st->verify_ns);
    atomic_fetch_add(&m->phase_tokens[PM_PHASE_BATCHED], st->rounds_committed);
    atomic_fetch_add(&m->phase_ns[PM_PHASE_BATCHED], st->rounds_ns);
    pms_metrics_duration(m, pms_now_ns() - j->t_enqueue_ns);
    atomic_fetch_add(cancelled ? &m->cancelled : &m->completed, 1);
}

/* Marks the job DONE with its outcome; the HTTP side wakes up. */
static void finish(pms_job *j, int rc, int reason, const gen_ctx *g)
{
    pthread_mutex_lock(&j->mu);
    if (g->cancelled)
        j->cancelled = 1;
    else if (g->refused)
        pms_err_set(&j->fail, 400, "invalid_request_error", "device_loop_unsupported", NULL,
                    "--device-loop on: %s", g->detail);
    else if (rc != 0)
        pms_err_set(&j->fail, 500, "server_error", NULL, NULL, "generation failed: %s: %s", llm_strerror(rc),
                    g->detail);
    else
        j->finish = g->stopped || reason == LLM_STOP_EOS || reason == LLM_STOP_TOKEN ? "stop" : "length";
    j->ready = j->text.n; /* nothing can follow: release the held-back tail */
    j->state = PMS_JOB_DONE;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void run_job(pms_worker *w, pms_job *j)
{
    pms_server *s = w->srv;
    gen_ctx g = {w, j, j->n_prompt ? j->prompt[j->n_prompt - 1] : -1, 0, 0, 0, 0, ""};
    for (size_t i = 0; i < j->req.n_stop; i++)
        if (j->req.stop_len[i] > g.max_stop)
            g.max_stop = j->req.stop_len[i];
    /* Room for the usual text up front, so tokens do not allocate; a long
     * piece can still grow the buffer. */
    size_t guess = (size_t)j->req.max_tokens * 16;
    pthread_mutex_lock(&j->mu);
    pms_buf_reserve(&j->text, guess < ((size_t)1 << 20) ? guess : ((size_t)1 << 20));
    j->state = PMS_JOB_RUNNING;
    j->ran = 1;
    pthread_cond_broadcast(&j->cv); /* a waiting stream sends its 200 now */
    j->stats.queue_ns = pms_now_ns() - j->t_enqueue_ns;
    if (!j->cancel && j->fd >= 0 && peer_closed(j->fd))
        j->cancel = j->client_gone = 1; /* left while queued: do not start */
    g.cancelled = j->cancel;
    pthread_mutex_unlock(&j->mu);
    int rc = 0, reason = LLM_STOP_LENGTH;
    if (!g.cancelled) {
        /* A target at position 0 also restarts the speculative history
         * (and empties the draft). */
        llm_session_reset(w->session);
        llm_sampler *smp = NULL;
        llm_device_loop_stats before;
        llm_device_loop_get_stats(w->loop, &before);
        uint64_t t0 = pms_now_ns();
        rc = make_sampler(s, j, &smp);
        if (rc == 0)
            rc = run_generation(w, j, smp, &g, &reason);
        llm_sampler_free(smp);
        fill_stats(w, j, pms_now_ns() - t0, &before);
        if (rc && !g.detail[0])
            snprintf(g.detail, sizeof g.detail, "%s", llm_session_error(w->session));
    }
    atomic_fetch_sub(&s->metrics.running, 1);
    count(s, j, g.cancelled);
    finish(j, rc, reason, &g);
}

static void *worker_main(void *arg)
{
    pms_worker *w = arg;
    pms_server *s = w->srv;
    pms_job *j;
    while ((j = pms_queue_pop(&s->queue)) != NULL) {
        atomic_fetch_sub(&s->metrics.queued, 1);
        atomic_fetch_add(&s->metrics.running, 1);
        pthread_mutex_lock(&w->mu);
        w->current = j;
        pthread_mutex_unlock(&w->mu);
        run_job(w, j);
        pthread_mutex_lock(&w->mu);
        w->current = NULL;
        pthread_mutex_unlock(&w->mu);
        pms_job_release(j);
    }
    pthread_mutex_lock(&s->live_mu);
    s->live--;
    pthread_cond_broadcast(&s->live_cv);
    pthread_mutex_unlock(&s->live_mu);
    return NULL;
}

/* --draft-tree: the engine's own checks (a CPU target, a
 * target batch of N + 1) run once here, so a placement or backend trees
 * cannot serve refuses the start rather than every request quietly
 * running chains. The tree stays set; each request then picks
 * (choose_verify). */
static int tree_init(pms_server *s, pms_worker *w, char *err, size_t errlen)
{
    int nodes = s->cfg.draft_tree;
    if (nodes == 0)
        return 0;
    char why[256];
    if (llm_spec_set_tree(w->spec, nodes, why, sizeof why) == 0)
        return 0;
    snprintf(err, errlen, "--draft-tree %d: %s", nodes, why);
    return -1;
}

/* The draft session (context and batch as the target's; none for the
 * ngram and block drafters, nor for a hybrid over a block head), the
 * drafter (--drafter, default block with --draft-head, else model; a block
 * head is this worker's own, over its session) and the speculative
 * generator. */
static int spec_init(pms_server *s, pms_worker *w, char *err, size_t errlen)
{
    llm_drafter_params dp = {.version = LLM_DRAFTER_PARAMS_VERSION, .size = sizeof(llm_drafter_params)};
    dp.kind = s->cfg.drafter      ? llm_drafter_kind_parse(s->cfg.drafter)
              : s->cfg.draft_head ? LLM_DRAFTER_BLOCK
                                  : LLM_DRAFTER_MODEL;
    dp.head_path = s->cfg.draft_head;
    dp.target = w->session;
    if (s->draft_model && (dp.kind == LLM_DRAFTER_MODEL || dp.kind == LLM_DRAFTER_HYBRID)) {
        llm_session_options so = {.version = LLM_SESSION_OPTIONS_VERSION, .size = sizeof(llm_session_options)};
        so.n_ctx = (int32_t)llm_session_n_ctx(w->session);
        so.n_batch = s->cfg.batch;
        if (llm_session_create(s->draft_model, &so, &w->draft, err, errlen))
            return -1;
    }
    dp.draft = w->draft;
    if (llm_drafter_create(&dp, &w->drafter, err, errlen))
        return -1;
    llm_spec_params sp = {.version = LLM_SPEC_PARAMS_VERSION, .size = sizeof(llm_spec_params)};
    sp.k = s->cfg.draft_k ? s->cfg.draft_k : 4;
    sp.drafter = w->drafter;
    if (llm_spec_create(w->session, w->draft, &sp, &w->spec, err, errlen))
        return -1;
    return tree_init(s, w, err, errlen);
}

/* The worker's device loop (--device-loop auto or on) over its sessions
 * and drafter choice. Where it does not take: none (auto), or -1 with the
 * reason in err (on). */
static int loop_init(pms_server *s, pms_worker *w, char *err, size_t errlen)
{
    if (s->cfg.device_loop == PMS_DEVICE_LOOP_OFF)
        return 0;
    llm_device_loop_params lp = LLM_DEVICE_LOOP_PARAMS_INIT;
    if (w->drafter) {
        lp.drafter = llm_drafter_get_kind(w->drafter);
        lp.k = s->cfg.draft_k ? s->cfg.draft_k : 4;
        lp.head_path = s->cfg.draft_head;
    }
    char why[256];
    int rc = llm_device_loop_create(w->session, w->draft, &lp, &w->loop, why, sizeof why);
    if (rc == LLM_EUNSUP && s->cfg.device_loop == PMS_DEVICE_LOOP_AUTO)
        return 0;
    if (rc) {
        snprintf(err, errlen, "--device-loop %s: %s",
                 s->cfg.device_loop == PMS_DEVICE_LOOP_ON ? "on" : "auto", loop_reason(why));
        return -1;
    }
    return 0;
}

static int worker_init(pms_server *s, pms_worker *w, char *err, size_t errlen)
{
    w->srv = s;
    pms_buf_init(&w->piece, 0);
    if (pms_buf_reserve(&w->piece, 255)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    llm_session_options so = {.version = LLM_SESSION_OPTIONS_VERSION, .size = sizeof(llm_session_options)};
    so.n_ctx = s->cfg.ctx;
    so.n_batch = s->cfg.batch;
    so.placement = s->cfg.placement;
    if (llm_session_create(s->model, &so, &w->session, err, errlen))
        return -1;
    if ((s->draft_model || s->cfg.drafter || s->cfg.draft_head) && spec_init(s, w, err, errlen))
        return -1;
    return loop_init(s, w, err, errlen);
}

int pms_workers_start(pms_server *s, char *err, size_t errlen)
{
    s->workers = calloc((size_t)s->cfg.workers, sizeof *s->workers);
    if (!s->workers) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < s->cfg.workers; i++) {
        if (pthread_mutex_init(&s->workers[i].mu, NULL)) {
            snprintf(err, errlen, "cannot create a mutex");
            return -1;
        }
        s->n_workers = i + 1;
        if (worker_init(s, &s->workers[i], err, errlen))
            return -1;
    }
    for (int i = 0; i < s->n_workers; i++) {
        pms_worker *w = &s->workers[i];
        pthread_mutex_lock(&s->live_mu);
        s->live++;
        pthread_mutex_unlock(&s->live_mu);
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            pthread_mutex_lock(&s->live_mu);
            s->live--;
            pthread_mutex_unlock(&s->live_mu);
            snprintf(err, errlen, "cannot start worker thread %d", i);
            return -1;
        }
        w->thread_started = 1;
    }
    return 0;
}

/* Cancels whatever each worker is generating (shutdown's last resort). */
static void cancel_running(pms_server *s)
{
    for (int i = 0; i < s->n_workers; i++) {
        pms_worker *w = &s->workers[i];
        pthread_mutex_lock(&w->mu);
        if (w->current)
            pms_job_cancel(w->current);
        pthread_mutex_unlock(&w->mu);
    }
}

void pms_workers_stop(pms_server *s)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += s->cfg.drain_s;
    pthread_mutex_lock(&s->live_mu);
    while (s->live > 0)
        if (pthread_cond_timedwait(&s->live_cv, &s->live_mu, &deadline) == ETIMEDOUT)
            break;
    int left = s->live;
    pthread_mutex_unlock(&s->live_mu);
    if (left > 0)
        cancel_running(s);
    for (int i = 0; i < s->n_workers; i++) {
        pms_worker *w = &s->workers[i];
        if (w->thread_started)
            pthread_join(w->thread, NULL);
        w->thread_started = 0;
    }
}

void pms_workers_free(pms_server *s)
{
    for (int i = 0; i < s->n_workers; i++) {
        pms_worker *w = &s->workers[i];
        llm_device_loop_free(w->loop);
        llm_spec_free(w->spec);
        llm_drafter_free(w->drafter);
        llm_session_free(w->draft);
        llm_session_free(w->session);
        pms_buf_free(&w->piece);
        pthread_mutex_destroy(&w->mu);
    }
    free(s->workers);
    s->workers = NULL;
    s->n_workers = 0;
}
