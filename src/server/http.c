/* http.c — the libmicrohttpd front end: routing, bodies, answers, streams.
 *
 * Threading: libmicrohttpd runs one thread per connection (bounded by
 * --max-connections), so a handler may block: a non-streamed request waits
 * for its job in the handler, a streamed one waits inside the response's
 * content reader. Generation itself happens on the workers.
 *
 * Per request, libmicrohttpd calls on_request once when the headers are
 * in (we route, and answer 404/405/413 at once), then once per piece of
 * body (we collect it, bounded by --max-body and --body-timeout), then a
 * last time with no data (we answer). Every answer carries X-Request-Id,
 * the id the engine's markers carry as req=. Errors that libmicrohttpd
 * itself answers (malformed HTTP, oversized headers) cannot carry it.
 *
 * A client that goes away is noticed two ways: the worker probes the
 * socket after every token (worker.c), and libmicrohttpd's completion
 * notice (a failed write, a timeout) cancels the job. Either way the
 * worker stops at the next token.
 *
 * Deadlines are ordered so an answer is always delivered: a job can wait
 * longer than the idle --timeout (a stalled shard waits out its own wire
 * deadline, 30 s by default, before the job fails), so an idle connection
 * is never closed under a job. A stream writes an SSE comment line
 * (": keep-alive") every third of --timeout while nothing else is due,
 * and a non-streamed request lifts the idle timeout while its job runs
 * (restored for the answer). The error event and [DONE] therefore always
 * follow a shard failure.
 *
 * Connections are tracked by the guard (guard.h) from libmicrohttpd's
 * connection notices: headers have a deadline and the slots a reserve.
 * Admission is decided before a body is parsed (a full queue is a 503
 * that costs a lock and a short answer), the queue sheds fairly between
 * client addresses (internal.h), and a refused connection's thread drops
 * to --http-nice so that answering a flood cannot starve generation; its
 * next request, when it comes before Retry-After, is held until then.
 * Connections beyond --max-connections wait in the listen backlog
 * (pms_http_start says how). */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

#include "internal.h"

enum route { R_NONE, R_COMPLETIONS, R_CHAT, R_MODELS, R_MODEL, R_HEALTH, R_METRICS, R_TOKENIZE, R_DETOKENIZE };

typedef struct conn_req {
    uint64_t id;
    enum route route;
    char method[16];  /* for the access log */
    char path[96];
    int status;       /* the answer's status; 0 until one is queued */
    pms_buf body;
    int too_large; /* the body outgrew --max-body: being dropped */
    int answered;  /* a response is queued: ignore later calls */
    uint64_t t0;
    uint64_t client; /* fairness key of the client's address */
    int keep;        /* the connection may carry another request */
    pms_job *job; /* one reference, released when the request completes */
} conn_req;

typedef struct stream_st {
    pms_server *s;
    pms_job *job; /* one reference */
    pms_buf out;  /* formatted events not yet handed to libmicrohttpd */
    size_t off;
    pms_buf head;  /* "data: {...": every content chunk's fixed start */
    const char *tail; /* ...and its fixed end, "...}\n\n" */
    size_t sent;   /* job text bytes already turned into events */
    int first, finished;
} stream_st;

/* ---- answers ----------------------------------------------------------- */

/* Queues status with body (malloc'd; taken over, may be NULL for none),
 * X-Request-Id and an optional extra header. */
static enum MHD_Result reply(pms_server *s, struct MHD_Connection *c, conn_req *r, unsigned status,
                             const char *ctype, char *body, const char *hname, const char *hval)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(body ? strlen(body) : 0, body ? body : (void *)"",
                                                                body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    char id[24];
    snprintf(id, sizeof id, "%" PRIu64, r->id);
    MHD_add_response_header(resp, "X-Request-Id", id);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (hname)
        MHD_add_response_header(resp, hname, hval);
    enum MHD_Result rc = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    if (rc == MHD_YES) {
        r->answered = 1;
        r->status = (int)status;
        pms_metrics_status(&s->metrics, (int)status);
    }
    return rc;
}

static enum MHD_Result reply_json(pms_server *s, struct MHD_Connection *c, conn_req *r, unsigned status,
                                  char *body)
{
    return body ? reply(s, c, r, status, "application/json", body, NULL, NULL) : MHD_NO;
}

static enum MHD_Result reply_err(pms_server *s, struct MHD_Connection *c, conn_req *r, const pms_err *e,
                                 const char *hname, const char *hval)
{
    char *body = pms_resp_error(e);
    return body ? reply(s, c, r, (unsigned)e->status, "application/json", body, hname, hval) : MHD_NO;
}

static enum MHD_Result fail(pms_server *s, struct MHD_Connection *c, conn_req *r, int status,
                            const char *type, const char *code, const char *msg)
{
    pms_err e;
    pms_err_set(&e, status, type, code, NULL, "%s", msg);
    /* After an oversized or late body the connection is not worth keeping:
     * the client may still be sending. */
    int close_it = status == 413 || status == 408;
    return reply_err(s, c, r, &e, close_it ? "Connection" : NULL, close_it ? "close" : NULL);
}

/* ---- routing ----------------------------------------------------------- */

static enum route route_of(const char *url)
{
    static const struct { const char *path; enum route r; } table[] = {
        {"/v1/completions", R_COMPLETIONS}, {"/v1/chat/completions", R_CHAT}, {"/v1/models", R_MODELS},
        {"/health", R_HEALTH},              {"/metrics", R_METRICS},           {"/tokenize", R_TOKENIZE},
        {"/detokenize", R_DETOKENIZE},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(url, table[i].path) == 0)
            return table[i].r;
    return strncmp(url, "/v1/models/", 11) == 0 && url[11] ? R_MODEL : R_NONE;
}

static int is_post(enum route r)
{
    return r == R_COMPLETIONS || r == R_CHAT || r == R_TOKENIZE || r == R_DETOKENIZE;
}

static int method_ok(enum route r, const char *method)
{
    if (is_post(r))
        return strcmp(method, "POST") == 0;
    return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
}

/* The declared body length is over the limit (413 before reading it). */
static int declared_too_large(const pms_server *s, struct MHD_Connection *c)
{
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!cl)
        return 0;
    char *end;
    unsigned long long v = strtoull(cl, &end, 10);
    return end != cl && v > s->cfg.max_body;
}

static enum MHD_Result first_call(pms_server *s, struct MHD_Connection *c, conn_req *r, const char *url,
                                  const char *method)
{
    r->route = route_of(url);
    if (r->route == R_NONE)
        return fail(s, c, r, 404, "not_found_error", NULL, "no such endpoint");
    if (!method_ok(r->route, method)) {
        pms_err e;
        pms_err_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "method %.16s is not allowed here",
                    method);
        return reply_err(s, c, r, &e, "Allow", is_post(r->route) ? "POST" : "GET, HEAD");
    }
    if (is_post(r->route) && declared_too_large(s, c))
        return fail(s, c, r, 413, "invalid_request_error", "request_too_large", "the request body is over the limit");
    return MHD_YES;
}

/* Collects body bytes. libmicrohttpd lets a handler answer only before the
 * body is read or after all of it arrived, so a body over the limit is
 * read and dropped and answered 413 at its end, and a body still arriving
 * after --body-timeout makes us close the connection (the client gets no
 * answer, which is what a timed-out client gets anyway). */
static enum MHD_Result absorb(pms_server *s, conn_req *r, const char *data, size_t n)
{
    if (pms_now_ns() - r->t0 > (uint64_t)s->cfg.body_timeout_s * 1000000000u) {
        atomic_fetch_add(&s->metrics.timeouts, 1);
        return MHD_NO;
    }
    if (!r->too_large && pms_buf_append(&r->body, data, n)) {
        r->too_large = 1;
        pms_buf_free(&r->body);
    }
    return MHD_YES;
}

/* The final call's verdict on the body: 0 to go on, or an answer. */
static int body_rejected(pms_server *s, struct MHD_Connection *c, conn_req *r, enum MHD_Result *rc)
{
    if (r->too_large) {
        *rc = fail(s, c, r, 413, "invalid_request_error", "request_too_large", "the request body is over the limit");
        return 1;
    }
    if (pms_now_ns() - r->t0 > (uint64_t)s->cfg.body_timeout_s * 1000000000u) {
        atomic_fetch_add(&s->metrics.timeouts, 1);
        *rc = fail(s, c, r, 408, "timeout_error", "request_timeout", "the request body arrived too slowly");
        return 1;
    }
    return 0;
}

/* ---- GET endpoints ----------------------------------------------------- */

static enum MHD_Result get_metrics(pms_server *s, struct MHD_Connection *c, conn_req *r)
{
    pms_buf b;
    pms_buf_init(&b, 0);
    if (pms_metrics_render(&s->metrics, s->cfg.queue, s->n_workers, &b)) {
        pms_buf_free(&b);
        return MHD_NO;
    }
    return reply(s, c, r, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, NULL, NULL);
}

static enum MHD_Result get_endpoint(pms_server *s, struct MHD_Connection *c, conn_req *r, const char *url)
{
    switch (r->route) {
    case R_HEALTH:
        if (atomic_load(&s->stopping))
            return fail(s, c, r, 503, "server_error", "shutting_down", "the server is shutting down");
        return reply_json(s, c, r, 200, strdup("{\"status\":\"ok\"}"));
    case R_MODELS:
        return reply_json(s, c, r, 200, pms_resp_models(s, 0));
    case R_MODEL:
        if (strcmp(url + 11, s->model_id) != 0) {
            pms_err e;
            pms_err_set(&e, 404, "invalid_request_error", "model_not_found", "model", "the model '%.80s' does not exist",
                        url + 11);
            return reply_err(s, c, r, &e, NULL, NULL);
        }
        return reply_json(s, c, r, 200, pms_resp_models(s, 1));
    default:
        return get_metrics(s, c, r);
    }
}

/* ---- generation -------------------------------------------------------- */

/* A rendered chat prompt spells its special tokens, BOS included when
 * the template writes one. Those are parsed as tokens (after the
 * format's rstrip, pms_chat_tokenizer_text); BOS is added when the
 * vocabulary asks for it, but never twice. */
static int tokenize_chat(const pms_server *s, const pms_req *q, int32_t *ids, size_t cap, size_t *n)
{
    int add = llm_model_add_bos(s->model);
    pms_buf t;
    pms_buf_init(&t, 0);
    int own = pms_chat_tokenizer_text(s->chat, q->text, q->text_len, &t);
    if (own < 0) {
        pms_buf_free(&t);
        return LLM_ENOMEM;
    }
    int rc = own ? llm_model_tokenize_special(s->model, t.p ? t.p : "", t.n, add, ids, cap, n)
                 : llm_model_tokenize_special(s->model, q->text, q->text_len, add, ids, cap, n);
    pms_buf_free(&t);
    if (rc == 0 && add && *n >= 2 && ids[0] == s->info.bos && ids[1] == s->info.bos) {
        memmove(ids, ids + 1, (*n - 1) * sizeof *ids);
        (*n)--;
    }
    return rc;
}

/* Tokenizes a text prompt (with BOS; a chat prompt as above). 0, or -1
 * with *e. */
static int tokenize(const pms_server *s, const pms_req *q, int32_t **ids, size_t *n, pms_err *e)
{
    size_t cap = (size_t)s->parse.max_prompt_ids + 1;
    if (!(*ids = malloc(cap * sizeof **ids)))
        return pms_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    int rc;
    if (q->ep == PMS_EP_CHAT && s->chat != PMS_CHAT_PLAIN)
        rc = tokenize_chat(s, q, *ids, cap, n);
    else
        rc = llm_model_tokenize(s->model, q->text, q->text_len, 1, *ids, cap, n);
    if (rc == 0 && *n > (size_t)s->parse.max_prompt_ids)
        rc = LLM_ESPACE;
    if (rc == 0 && *n == 0)
        return pms_err_set(e, 400, "invalid_request_error", NULL, "prompt", "the prompt is empty");
    if (rc == LLM_ESPACE)
        return pms_err_set(e, 400, "invalid_request_error", "context_length_exceeded", "prompt",
                           "the prompt has %zu tokens; at most %d fit the context", *n, (int)s->parse.max_prompt_ids);
    if (rc == LLM_ESTATE)
        return pms_err_set(e, 400, "invalid_request_error", NULL, "prompt",
                           "the model has no tokenizer: send the prompt as token ids");
    if (rc)
        return pms_err_set(e, 500, "server_error", NULL, NULL, "tokenization failed: %s", llm_strerror(rc));
    return 0;
}

/* Parses and tokenizes the body into a job. NULL with *e on failure. */
static pms_job *make_job(pms_server *s, conn_req *r, pms_err *e)
{
    pms_req q;
    pms_endpoint ep = r->route == R_CHAT ? PMS_EP_CHAT : PMS_EP_COMPLETIONS;
    if (pms_req_parse(&q, ep, r->body.p ? r->body.p : "", r->body.n, &s->parse, e))
        return NULL;
    int32_t *ids = q.ids;
    size_t n = q.n_ids;
    q.ids = NULL;
    if (!ids && tokenize(s, &q, &ids, &n, e)) {
        free(ids);
        pms_req_free(&q);
        return NULL;
    }
    if (q.max_tokens == 0)
        q.max_tokens = ep == PMS_EP_CHAT ? s->cfg.max_tokens : (s->cfg.max_tokens < 16 ? s->cfg.max_tokens : 16);
    if (ep == PMS_EP_CHAT && pms_req_add_stop(&q, pms_chat_stop_text(s->chat)))
        pms_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    pms_job *j = e->status ? NULL : pms_job_new(r->id, &q, ids, n);
    if (!j) {
        if (!e->status)
            pms_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        free(ids);
        pms_req_free(&q);
    }
    return j;
}

static int client_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

/* The guard's slot of a connection (its socket context). */
static pms_guard_slot *slot_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* A connection that has been refused yields the CPU to generation
 * (--http-nice) for the rest of its life: under a flood of requests
 * answered 503, the threads answering them would otherwise outnumber the
 * engine's threads and take the CPU from the work already accepted.
 * Connections never refused keep the process's priority, so on a host
 * busy with other work the server's own answers are not delayed. Once
 * per connection, on its own thread (thread per connection). */
static void lower_priority(const pms_server *s, pms_guard_slot *g)
{
#ifdef __linux__
    if (g && !g->niced && s->cfg.http_nice > 0) {
        g->niced = 1;
        setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), s->cfg.http_nice);
    }
#else
    (void)s;
    (void)g;
#endif
}

/* A connection answered 503 overloaded: it yields the CPU (above) and
 * its next generation request is held until Retry-After has passed. */
static void note_refused(const pms_server *s, pms_guard_slot *g)
{
    lower_priority(s, g);
    if (g)
        g->refused_ns = pms_now_ns();
}

/* Holds a request that arrives on a refused connection before the
 * refusal's Retry-After has passed, for the rest of it: a client that
 * retries at once would otherwise cost a refusal per round trip, and a
 * few dozen of them take the CPU from the work already accepted. The
 * thread sleeps (at --http-nice) in slices of at most 100 ms, so that a
 * shutdown is noticed; the wait ends early when the client hangs up.
 * 0 to go on, -1 when the client is gone. */
static int hold_retry(pms_server *s, struct MHD_Connection *c)
{
    pms_guard_slot *g = slot_of(c);
    if (!g || !g->refused_ns || s->cfg.retry_after_s <= 0)
        return 0;
    uint64_t until = g->refused_ns + (uint64_t)s->cfg.retry_after_s * 1000000000u;
    if (pms_now_ns() >= until)
        return 0;
    atomic_fetch_add(&s->metrics.held, 1);
    int fd = client_fd(c);
    for (uint64_t now = pms_now_ns(); now < until && !atomic_load(&s->stopping); now = pms_now_ns()) {
        uint64_t left_ms = (until - now + 999999u) / 1000000u;
        int slice = left_ms < 100 ? (int)left_ms : 100;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, slice) <= 0)
            continue;
        char b;
        ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return -1;
        /* Bytes of a pipelined request wait for us: sleep instead. */
        struct timespec ts = {0, (long)slice * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static enum MHD_Result wait_and_answer(pms_server *s, struct MHD_Connection *c, conn_req *r, pms_job *j)
{
    /* The job may outlast the idle timeout (a stalled shard): no idle
     * deadline while it runs; restoring it also restarts it. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)0);
    pthread_mutex_lock(&j->mu);
    while (j->state != PMS_JOB_DONE)
        pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)s->cfg.timeout_s);
    if (j->cancelled && j->client_gone)
        return MHD_NO; /* nobody to answer: close the connection */
    if (j->cancelled)
        return fail(s, c, r, 503, "server_error", "shutting_down", "the server shut down during generation");
    if (j->fail.status) {
        if (j->fail.status == 503 && j->fail.code && strcmp(j->fail.code, "overloaded") == 0)
            note_refused(s, slot_of(c)); /* shed: a refused connection */
        else if (j->fail.status == 503)
            lower_priority(s, slot_of(c));
        char ra[16];
        snprintf(ra, sizeof ra, "%d", s->cfg.retry_after_s);
        return reply_err(s, c, r, &j->fail, j->fail.status == 503 ? MHD_HTTP_HEADER_RETRY_AFTER : NULL, ra);
    }
    return reply_json(s, c, r, 200, pms_resp_final(s, j));
}

/* ---- streaming --------------------------------------------------------- */

static int emit_event(stream_st *st, char *json)
{
    int rc = json ? pms_buf_printf(&st->out, "data: %s\n\n", json) : -1;
    free(json);
    return rc;
}

/* Appends one content event for text[from..to) of the job: the fixed
 * head, the text quoted, the fixed tail. Under j->mu. */
static int content_event(stream_st *st, const pms_job *j, size_t from, size_t to)
{
    return pms_buf_append(&st->out, st->head.p, st->head.n) ||
           pms_json_quote(&st->out, j->text.p ? j->text.p + from : "", to - from) ||
           pms_buf_puts(&st->out, st->tail);
}

/* Waits for news from the job and formats the next events into st->out.
 * Content events are written straight from the job's text under its lock
 * (quoting is cheap), so a token costs no allocation once the buffers have
 * grown; only the first chat chunk and the last chunk are built as JSON. */
static int next_events(stream_st *st)
{
    pms_job *j = st->job;
    int rc = 0;
    if (st->first) { /* the chat role chunk */
        st->first = 0;
        rc = emit_event(st, pms_resp_chunk(st->s, j, NULL, 0, 1, NULL));
    }
    /* A keep-alive comment is due a third of the idle timeout from now. */
    struct timespec due;
    clock_gettime(CLOCK_REALTIME, &due);
    long ms = (long)st->s->cfg.timeout_s * 1000 / 3;
    due.tv_sec += ms / 1000;
    due.tv_nsec += (ms % 1000) * 1000000L;
    if (due.tv_nsec >= 1000000000L) {
        due.tv_sec++;
        due.tv_nsec -= 1000000000L;
    }
    int idle = 0;
    pthread_mutex_lock(&j->mu);
    while (rc == 0 && !idle && j->state != PMS_JOB_DONE && j->ready == st->sent)
        idle = pthread_cond_timedwait(&j->cv, &j->mu, &due) == ETIMEDOUT;
    if (idle && j->state != PMS_JOB_DONE && j->ready == st->sent) {
        pthread_mutex_unlock(&j->mu);
        return pms_buf_puts(&st->out, ": keep-alive\n\n");
    }
    if (rc == 0 && j->ready > st->sent)
        rc = content_event(st, j, st->sent, j->ready);
    st->sent = j->ready;
    int done = j->state == PMS_JOB_DONE;
    pthread_mutex_unlock(&j->mu);
    if (rc || !done)
        return rc;
    /* After DONE the worker no longer writes the job: read it unlocked. */
    st->finished = 1;
    if (j->cancelled || j->fail.status) {
        pms_err e = j->fail;
        if (!e.status)
            pms_err_set(&e, 503, "server_error", "shutting_down", NULL, "the server shut down during generation");
        rc = emit_event(st, pms_resp_error(&e));
    } else {
        rc = emit_event(st, pms_resp_chunk(st->s, j, NULL, 0, 0, j->finish));
    }
    return rc ? rc : pms_buf_puts(&st->out, "data: [DONE]\n\n");
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_st *st = cls;
    while (st->off == st->out.n) {
        if (st->finished)
            return MHD_CONTENT_READER_END_OF_STREAM;
        pms_buf_clear(&st->out);
        st->off = 0;
        if (next_events(st))
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = st->out.n - st->off < max ? st->out.n - st->off : max;
    memcpy(buf, st->out.p + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    stream_st *st = cls;
    pms_job_cancel(st->job);
    pms_job_release(st->job);
    pms_buf_free(&st->out);
    pms_buf_free(&st->head);
    free(st);
}

static enum MHD_Result start_stream(pms_server *s, struct MHD_Connection *c, conn_req *r, pms_job *j)
{
    stream_st *st = calloc(1, sizeof *st);
    if (!st)
        return MHD_NO;
    st->s = s;
    st->job = j;
    st->first = j->req.ep == PMS_EP_CHAT;
    pms_buf_init(&st->out, 0);
    pms_buf_init(&st->head, 0);
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    if (pms_resp_chunk_frame(s, j, &st->head, &st->tail)) {
        stream_free(st);
        return MHD_NO;
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
    if (!resp) {
        stream_free(st);
        return MHD_NO;
    }
    char id[24];
    snprintf(id, sizeof id, "%" PRIu64, r->id);
    MHD_add_response_header(resp, "X-Request-Id", id);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    if (rc == MHD_YES) {
        r->status = 200;
        pms_metrics_status(&s->metrics, 200);
    }
    return rc;
}

/* 503 overloaded with Retry-After. */
static enum MHD_Result overloaded(pms_server *s, struct MHD_Connection *c, conn_req *r)
{
    note_refused(s, slot_of(c));
    pms_err e;
    char ra[16];
    snprintf(ra, sizeof ra, "%d", s->cfg.retry_after_s);
    atomic_fetch_add(&s->metrics.rejected_full, 1);
    pms_err_set(&e, 503, "server_error", "overloaded", NULL, "%s", "the request queue is full; retry later");
    return reply_err(s, c, r, &e, MHD_HTTP_HEADER_RETRY_AFTER, ra);
}

/* Ends a job the queue shed to make room for another client's. */
static void end_shed(pms_server *s, pms_job *j)
{
    atomic_fetch_sub(&s->metrics.queued, 1);
    atomic_fetch_add(&s->metrics.rejected_full, 1);
    pms_job_fail_unstarted(j, 503, "overloaded", "the request queue is full; retry later");
    pms_job_release(j); /* the queue's reference */
}

/* A stream's 200 goes out only once its job runs, so a job that never
 * runs (shed, or drained at shutdown) is answered with a real 503. As
 * for a whole answer, the idle timeout is lifted while it waits. 1 when
 * the job ended without running. */
static int wait_started(pms_server *s, struct MHD_Connection *c, pms_job *j)
{
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)0);
    pthread_mutex_lock(&j->mu);
    while (j->state == PMS_JOB_QUEUED)
        pthread_cond_wait(&j->cv, &j->mu);
    int unstarted = !j->ran;
    pthread_mutex_unlock(&j->mu);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)s->cfg.timeout_s);
    return unstarted;
}

static enum MHD_Result generate(pms_server *s, struct MHD_Connection *c, conn_req *r)
{
    pms_err e = {0};
    if (hold_retry(s, c))
        return MHD_NO; /* the client left while held: close the connection */
    if (atomic_load(&s->stopping))
        return fail(s, c, r, 503, "server_error", "shutting_down", "the server is shutting down");
    /* Refuse before any parsing: a rejected request must cost next to
     * nothing, or rejecting a flood starves the work already accepted. */
    if (!pms_queue_admits(&s->queue, r->client))
        return overloaded(s, c, r);
    pms_job *j = make_job(s, r, &e);
    if (!j)
        return reply_err(s, c, r, &e, NULL, NULL);
    j->fd = client_fd(c);
    j->client = r->client;
    j->t_enqueue_ns = pms_now_ns();
    r->job = j;
    atomic_fetch_add(&s->metrics.queued, 1);
    pms_job *shed = NULL;
    int q = pms_queue_push(&s->queue, j, &shed);
    if (shed)
        end_shed(s, shed);
    if (q != 0) {
        atomic_fetch_sub(&s->metrics.queued, 1);
        pms_job_release(j); /* the queue's reference */
        if (q == -1)
            return overloaded(s, c, r);
        char ra[16];
        snprintf(ra, sizeof ra, "%d", s->cfg.retry_after_s);
        pms_err_set(&e, 503, "server_error", "shutting_down", NULL, "%s", "the server is shutting down");
        return reply_err(s, c, r, &e, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    if (!j->req.stream)
        return wait_and_answer(s, c, r, j);
    if (wait_started(s, c, j))
        return wait_and_answer(s, c, r, j); /* ended unstarted: its error, as a whole answer */
    return start_stream(s, c, r, j);
}

/* /tokenize and /detokenize answer on this thread (tokenize.c). */
static enum MHD_Result tokenizer_endpoint(pms_server *s, struct MHD_Connection *c, conn_req *r)
{
    pms_err e = {0};
    const char *body = r->body.p ? r->body.p : "";
    char *out = r->route == R_TOKENIZE ? pms_tokenize_answer(s, body, r->body.n, &e)
                                       : pms_detokenize_answer(s, body, r->body.n, &e);
    return out ? reply_json(s, c, r, 200, out) : reply_err(s, c, r, &e, NULL, NULL);
}

/* ---- libmicrohttpd callbacks ------------------------------------------- */

/* 1 when the request carries "Authorization: Bearer <--api-key>". The
 * comparison takes the same time wherever the first difference is. */
static int authorized(const pms_server *s, struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncmp(h, "Bearer ", 7) != 0)
        return 0;
    const char *got = h + 7, *want = s->cfg.api_key;
    size_t ng = strlen(got), nw = strlen(want);
    unsigned diff = ng != nw;
    for (size_t i = 0; i < nw; i++)
        diff |= (unsigned)(unsigned char)want[i] ^ (unsigned)(unsigned char)(i < ng ? got[i] : 0);
    return diff == 0;
}

static uint64_t client_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return pms_client_key(ci ? ci->client_addr : NULL);
}

/* Whether the comma-separated header value h has token tok (any case). */
static int has_token(const char *h, const char *tok)
{
    size_t n = strlen(tok);
    while (*h) {
        while (*h == ' ' || *h == '\t' || *h == ',')
            h++;
        size_t len = strcspn(h, ",");
        size_t end = len;
        while (end && (h[end - 1] == ' ' || h[end - 1] == '\t'))
            end--;
        if (end == n && strncasecmp(h, tok, n) == 0)
            return 1;
        h += len;
    }
    return 0;
}

/* Whether the connection stays open after this request (HTTP/1.1 without
 * "Connection: close"; HTTP/1.0 only with keep-alive), so that the guard
 * counts it as waiting again only when it does. */
static int keeps_alive(struct MHD_Connection *c, const char *version)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONNECTION);
    if (strcmp(version, MHD_HTTP_VERSION_1_1) == 0)
        return !h || !has_token(h, "close");
    return h && has_token(h, "keep-alive");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *n, void **con_cls)
{
    pms_server *s = cls;
    conn_req *r = *con_cls;
    if (!r) {
        if (!(r = calloc(1, sizeof *r)))
            return MHD_NO;
        r->id = atomic_fetch_add(&s->next_id, 1);
        r->t0 = pms_now_ns();
        snprintf(r->method, sizeof r->method, "%s", method);
        snprintf(r->path, sizeof r->path, "%s", url);
        pms_buf_init(&r->body, s->cfg.max_body);
        *con_cls = r;
        atomic_fetch_add(&s->http_active, 1);
        pms_guard_slot *g = slot_of(c);
        if (g)
            pms_guard_headers_in(&s->guard, g);
        r->client = client_of(c);
        r->keep = keeps_alive(c, version);
        if (s->cfg.api_key && strcmp(url, "/health") != 0 && !authorized(s, c)) {
            pms_err e;
            pms_err_set(&e, 401, "invalid_request_error", "invalid_api_key", NULL, "%s",
                        "a valid API key is required (Authorization: Bearer KEY)");
            return reply_err(s, c, r, &e, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
        }
        return first_call(s, c, r, url, method);
    }
    if (r->answered) {
        *n = 0; /* answered already; drop what still arrives */
        return MHD_YES;
    }
    if (*n) {
        size_t len = *n;
        *n = 0;
        return absorb(s, r, data, len);
    }
    enum MHD_Result rc;
    if (is_post(r->route) && body_rejected(s, c, r, &rc))
        return rc;
    if (r->route == R_TOKENIZE || r->route == R_DETOKENIZE)
        return tokenizer_endpoint(s, c, r);
    return is_post(r->route) ? generate(s, c, r) : get_endpoint(s, c, r, url);
}

/* One access-log entry for a finished request. A job may still be
 * winding down (its client left mid-stream): read it under its lock. */
static void log_access(pms_server *s, const conn_req *r)
{
    pms_access a = {r->id, r->method, r->path, r->status, (double)(pms_now_ns() - r->t0) / 1e6, 0, 0, ""};
    pms_job *j = r->job;
    if (j) {
        pthread_mutex_lock(&j->mu);
        a.prompt_tokens = j->n_prompt;
        a.generated_tokens = j->n_generated;
        a.outcome = j->state != PMS_JOB_DONE || j->cancelled ? "cancelled"
                    : j->fail.status                        ? "error"
                                                            : j->finish;
        pthread_mutex_unlock(&j->mu);
    }
    s->cfg.access_log(s->cfg.access_user, &a);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    pms_server *s = cls;
    conn_req *r = *con_cls;
    if (!r)
        return;
    if (s->cfg.access_log)
        log_access(s, r);
    pms_guard_slot *g = slot_of(c);
    int closing = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK || r->status == 413 || r->status == 408;
    if (g && r->keep && !closing)
        pms_guard_request_done(&s->guard, g); /* kept alive: waits for the next headers */
    atomic_fetch_sub(&s->http_active, 1);
    if (r->job) {
        pms_job_cancel(r->job); /* harmless when done; stops a stream whose client left */
        pms_job_release(r->job);
    }
    pms_buf_free(&r->body);
    free(r);
    *con_cls = NULL;
}

/* Connections enter and leave the guard (guard.h). STARTED runs on the
 * listening thread before the connection's own thread exists; CLOSED
 * before libmicrohttpd closes the descriptor. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    pms_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        int fd = client_fd(c);
        *socket_context = fd >= 0 ? pms_guard_open(&s->guard, fd) : NULL;
    } else {
        pms_guard_close(&s->guard, *socket_context);
        *socket_context = NULL;
    }
}

/* ---- daemon ------------------------------------------------------------ */

/* Connections beyond --max-connections should wait in the kernel's listen
 * backlog until a slot frees, not be accepted and closed: a refused client
 * reconnects at once, and under overload those reconnects (on the same
 * CPUs as generation) cost more than the work. libmicrohttpd 0.9.75 stops
 * watching its listening socket at the limit only in its select() loop
 * (its poll() loop for a thread per connection accepts everything and
 * closes what is over the limit), and wakes that loop when a connection
 * ends. select() takes descriptors below FD_SETSIZE only, so a limit that
 * could reach them (with room for the model's, the shards' and the log's
 * descriptors) keeps poll() and the old refusal. */
#define FD_ROOM 128 /* descriptors below FD_SETSIZE for all but connections */

static int waits_at_limit(const pms_config *c)
{
    return c->max_connections <= FD_SETSIZE - FD_ROOM;
}

/* Room in the listen backlog for four times the slots (at least 128), so
 * that a burst beyond the limit waits there rather than retrying its
 * handshake (the kernel caps it at net.core.somaxconn). */
static unsigned backlog_of(const pms_config *c)
{
    long n = 4L * c->max_connections;
    return (unsigned)(n < 128 ? 128 : n > 65535 ? 65535 : n);
}

int pms_http_start(pms_server *s, char *err, size_t errlen)
{
    struct sockaddr_in in4;
    struct sockaddr_in6 in6;
    struct sockaddr *sa;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC;
    if (!waits_at_limit(&s->cfg))
        flags |= MHD_USE_POLL;
    memset(&in4, 0, sizeof in4);
    memset(&in6, 0, sizeof in6);
    if (inet_pton(AF_INET, s->cfg.host, &in4.sin_addr) == 1) {
        in4.sin_family = AF_INET;
        in4.sin_port = htons((uint16_t)s->cfg.port);
        sa = (struct sockaddr *)&in4;
    } else if (inet_pton(AF_INET6, s->cfg.host, &in6.sin6_addr) == 1) {
        in6.sin6_family = AF_INET6;
        in6.sin6_port = htons((uint16_t)s->cfg.port);
        sa = (struct sockaddr *)&in6;
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, errlen, "--host '%s' is not an IPv4 or IPv6 address", s->cfg.host);
        return -1;
    }
    s->mhd = MHD_start_daemon(flags, (uint16_t)s->cfg.port, NULL, NULL, on_request, s,
                              MHD_OPTION_SOCK_ADDR, sa,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)s->cfg.timeout_s,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned int)s->cfg.max_connections,
                              MHD_OPTION_LISTEN_BACKLOG_SIZE, backlog_of(&s->cfg),
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                              MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                              MHD_OPTION_END);
    if (!s->mhd) {
        snprintf(err, errlen, "cannot listen on %s port %d (in use, or not allowed)", s->cfg.host, s->cfg.port);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? (int)di->port : s->cfg.port;
    return 0;
}

void pms_http_quiesce(pms_server *s)
{
    if (!s->mhd)
        return;
    MHD_socket fd = MHD_quiesce_daemon(s->mhd);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

void pms_http_settle(pms_server *s, int timeout_ms)
{
    uint64_t deadline = pms_now_ns() + (uint64_t)timeout_ms * 1000000u;
    struct timespec pause = {0, 2000000};
    while (atomic_load(&s->http_active) > 0 && pms_now_ns() < deadline)
        nanosleep(&pause, NULL);
}

void pms_http_stop(pms_server *s)
{
    if (s->mhd)
        MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
}
