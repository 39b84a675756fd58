/* server.c — server lifetime: open the model, start workers and the
 * listener, shut down gracefully (see server.h).
 *
 * Shutdown order matters: the listener stops accepting first (so no new
 * connection arrives), then the queue closes (a request arriving on a
 * kept-alive connection gets 503), requests still waiting are answered
 * 503, running ones get --drain seconds before they are cancelled, and
 * only then does libmicrohttpd stop — by which time no connection thread
 * is waiting on a job any more.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* The id a model is served under: its file name without directory and
 * without a .gguf/.bin extension. */
static void default_model_id(const char *path, char *out, size_t cap)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    const char *dot = strrchr(base, '.');
    if (dot && (!strcmp(dot, ".gguf") || !strcmp(dot, ".bin")))
        n = (size_t)(dot - base);
    snprintf(out, cap, "%.*s", (int)n, base);
}

/* The chat format: --chat-template, else the one the model's
 * tokenizer.chat_template is recognized as (none: the plain default). A
 * template we do not recognize is refused rather than guessed at. */
static int chat_format_of(pms_server *s, char *err, size_t errlen)
{
    if (s->cfg.chat_template) {
        s->chat = pms_chat_format_parse(s->cfg.chat_template);
        return 0; /* a bad name is a usage error, caught by pms_config_parse */
    }
    const char *t = NULL, *family = NULL;
    size_t len = 0;
    if (llm_model_meta_str(s->model, "tokenizer.chat_template", &t, &len) != 0)
        t = NULL;
    s->chat = pms_chat_detect(t, len, &family);
    if (s->chat != PMS_CHAT_UNKNOWN)
        return 0;
    snprintf(err, errlen, "the model's tokenizer.chat_template is not one this server renders exactly%s%s%s; "
             "choose a format with --chat-template NAME (%s)", family ? " (it resembles " : "",
             family ? family : "", family ? "'s, but differs)" : "", pms_chat_format_names());
    return -1;
}

/* The special tokens the format writes as text must be the vocabulary's,
 * or the prompt would spell them in ordinary pieces: its BOS must be the
 * model's BOS. Its end-of-turn token, when the vocabulary has it, ends a
 * generation. */
static int chat_tokens(pms_server *s, char *err, size_t errlen)
{
    s->n_stop_ids = 0;
    const char *bos = pms_chat_bos_text(s->chat), *eot = pms_chat_end_of_turn(s->chat);
    if (*bos) {
        int32_t id;
        if (llm_model_special_token(s->model, bos, strlen(bos), &id) != 0 || id != s->info.bos) {
            snprintf(err, errlen, "chat format %s writes the BOS token %s, which is not this model's BOS; "
                     "choose another with --chat-template NAME", pms_chat_format_name(s->chat), bos);
            return -1;
        }
    }
    int32_t id;
    if (*eot && llm_model_special_token(s->model, eot, strlen(eot), &id) == 0 && id != s->info.eos)
        s->stop_ids[s->n_stop_ids++] = id;
    return 0;
}

/* The draft model for speculative decoding, opened like the target and
 * checked to mean the same text by the same ids. */
static int open_draft(pms_server *s, const llm_model_options *mo, char *err, size_t errlen)
{
    char detail[384];
    if (llm_model_open(s->cfg.draft, mo, &s->draft_model, detail, sizeof detail) != 0 ||
        llm_spec_check_vocab(s->model, s->draft_model, detail, sizeof detail) != 0) {
        snprintf(err, errlen, "--draft: %s", detail);
        return -1;
    }
    return 0;
}

static int open_model(pms_server *s, char *err, size_t errlen)
{
    /* Designated, not the _INIT macro: option structs grow at their end
     * (version/size tell the engine how much we know), and fields we do
     * not name are zero, the documented defaults. */
    llm_model_options mo = {.version = LLM_MODEL_OPTIONS_VERSION, .size = sizeof(llm_model_options)};
    mo.n_threads = s->cfg.threads;
    mo.backend = s->cfg.backend; /* passed through; the engine refuses what it lacks */
    mo.tokenizer_path = s->cfg.tokenizer;
    mo.no_mmap = s->cfg.no_mmap;
    char detail[384];
    if (llm_model_open(s->cfg.model_path, &mo, &s->model, detail, sizeof detail) != 0) {
        snprintf(err, errlen, "%s", detail);
        return -1;
    }
    if (s->cfg.draft && open_draft(s, &mo, err, errlen))
        return -1;
    llm_model_get_info(s->model, &s->info);
    if (s->cfg.model_id)
        snprintf(s->model_id, sizeof s->model_id, "%s", s->cfg.model_id);
    else
        default_model_id(s->cfg.model_path, s->model_id, sizeof s->model_id);
    return chat_format_of(s, err, errlen) || chat_tokens(s, err, errlen) ? -1 : 0;
}

/* What request parsing needs, known once the sessions exist. */
static void set_parse_ctx(pms_server *s)
{
    int32_t n_ctx = (int32_t)llm_session_n_ctx(s->workers[0].session);
    s->parse.model_id = s->model_id;
    s->parse.n_vocab = s->info.n_vocab;
    s->parse.max_tokens_cap = s->cfg.max_tokens;
    s->parse.max_prompt_ids = n_ctx > 1 ? n_ctx - 1 : 1; /* room for one generated token */
    s->parse.chat = s->chat;
}

static int init_sync(pms_server *s)
{
    if (pthread_mutex_init(&s->live_mu, NULL))
        return -1;
    if (pthread_cond_init(&s->live_cv, NULL)) {
        pthread_mutex_destroy(&s->live_mu);
        return -1;
    }
    return 0;
}

int pms_server_create(const pms_config *c, pms_server **out, char *err, size_t errlen)
{
    *out = NULL;
    if (pms_config_check_engine(c, err, errlen))
        return -1;
    pms_server *s = calloc(1, sizeof *s);
    if (!s || init_sync(s)) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->cfg = *c;
    s->started = (int64_t)time(NULL);
    atomic_init(&s->next_id, 1);
    atomic_init(&s->stopping, 0);
    atomic_init(&s->http_active, 0);
    pms_metrics_init(&s->metrics);
    if (open_model(s, err, errlen))
        goto fail;
    if (pms_queue_init(&s->queue, c->queue)) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    s->queue_ready = 1;
    if (pms_workers_start(s, err, errlen))
        goto fail;
    set_parse_ctx(s);
    int reserve = c->reserve >= 0 ? c->reserve : c->max_connections / 4;
    if (pms_guard_init(&s->guard, c->max_connections, c->max_connections - reserve, c->header_timeout_s,
                       &s->metrics)) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    s->guard_ready = 1;
    if (pms_http_start(s, err, errlen))
        goto fail;
    *out = s;
    return 0;
fail:
    pms_server_free(s);
    return -1;
}

int pms_server_port(const pms_server *s)
{
    return s->port;
}

const char *pms_server_model_id(const pms_server *s)
{
    return s->model_id;
}

/* Answers every request still waiting in the queue with 503. */
static void drain_queue(pms_server *s)
{
    pms_job *j;
    while ((j = pms_queue_take(&s->queue)) != NULL) {
        atomic_fetch_sub(&s->metrics.queued, 1);
        pms_job_fail_unstarted(j, 503, "shutting_down", "the server is shutting down");
        pms_job_release(j);
    }
}

void pms_server_shutdown(pms_server *s)
{
    if (!s || s->shut_down)
        return;
    s->shut_down = 1;
    atomic_store(&s->stopping, 1);
    pms_http_quiesce(s);
    if (s->queue_ready) {
        pms_queue_close(&s->queue);
        drain_queue(s);
    }
    pms_workers_stop(s);
    /* Every job is done now; give the connection threads a moment to
     * deliver the last answers and stream endings before the daemon
     * closes the sockets under them. */
    pms_http_settle(s, 5000);
    pms_http_stop(s);
}

void pms_server_free(pms_server *s)
{
    if (!s)
        return;
    pms_server_shutdown(s);
    if (s->guard_ready)
        pms_guard_destroy(&s->guard); /* the listener is stopped: no connection is left */
    pms_workers_free(s);
    if (s->queue_ready)
        pms_queue_destroy(&s->queue);
    llm_model_free(s->draft_model);
    llm_model_free(s->model);
    pthread_cond_destroy(&s->live_cv);
    pthread_mutex_destroy(&s->live_mu);
    free(s);
}
