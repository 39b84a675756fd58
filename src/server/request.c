/* request.c — JSON request bodies to pms_req (see request.h).
 *
 * The validation table (docs/server.md lists it for users):
 *   prompt      string, or a non-empty array of integer token ids in
 *               [0, n_vocab); arrays of strings or of arrays (batches) are
 *               refused                            (completions, required)
 *   messages    non-empty array of {role: system|user|assistant,
 *               content: string | [{type:"text", text}]}  (chat, required)
 *   model       string; another model's id is 404
 *   max_tokens  integer 1..cap (max_completion_tokens is an alias)
 *   temperature number 0..2      top_p  number in (0, 1]
 *   top_k       integer >= 0     seed   integer >= 0
 *   stop        string or array of at most 4 non-empty strings (<= 256 B)
 *   stream      boolean          stream_options {include_usage: boolean}
 *   n, best_of  only 1           echo false only   logprobs null/false/0 only
 */
#include "request.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BAD "invalid_request_error"

int pms_err_set(pms_err *e, int status, const char *type, const char *code, const char *param,
                const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    e->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

void pms_req_free(pms_req *r)
{
    free(r->text);
    free(r->ids);
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

static char *dup_bytes(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

static int oom(pms_err *e)
{
    return pms_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

/* ---- scalar fields ----------------------------------------------------- */

/* An optional integer field in [lo, hi]. 0 when absent or null (out
 * untouched), 1 when set, -1 on error. */
static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, pms_err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return pms_err_set(e, 400, BAD, NULL, key, "'%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return pms_err_set(e, 400, BAD, NULL, key, "'%s' must be in %lld..%lld (got %lld)", key, lo, hi, x);
    *out = x;
    return 1;
}

static int get_num(json_t *o, const char *key, double lo, double hi, int lo_open, float *out, pms_err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return pms_err_set(e, 400, BAD, NULL, key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi) || (lo_open && x == lo))
        return pms_err_set(e, 400, BAD, NULL, key, "'%s' must be in %s%g, %g] (got %g)", key,
                           lo_open ? "(" : "[", lo, hi, x);
    *out = (float)x;
    return 1;
}

static int get_bool(json_t *o, const char *key, int *out, pms_err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return pms_err_set(e, 400, BAD, NULL, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 1;
}

/* ---- prompt, stop, messages -------------------------------------------- */

static int parse_ids(pms_req *r, json_t *arr, const pms_parse_ctx *ctx, pms_err *e)
{
    size_t n = json_array_size(arr);
    if (n == 0)
        return pms_err_set(e, 400, BAD, NULL, "prompt", "'prompt' is empty");
    if (n > (size_t)ctx->max_prompt_ids)
        return pms_err_set(e, 400, BAD, NULL, "prompt", "'prompt' has %zu tokens; at most %d fit the context",
                           n, (int)ctx->max_prompt_ids);
    if (!(r->ids = malloc(n * sizeof *r->ids)))
        return oom(e);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v)) {
            const char *what = json_is_string(v) || json_is_array(v) ? "batched prompts are not supported"
                                                                    : "token ids must be integers";
            return pms_err_set(e, 400, BAD, NULL, "prompt", "'prompt': %s", what);
        }
        long long id = json_integer_value(v);
        if (id < 0 || id >= ctx->n_vocab)
            return pms_err_set(e, 400, BAD, NULL, "prompt", "'prompt': token id %lld is outside the vocabulary "
                               "(0..%d)", id, (int)ctx->n_vocab - 1);
        r->ids[i] = (int32_t)id;
    }
    r->n_ids = n;
    return 0;
}

static int parse_prompt(pms_req *r, json_t *o, const pms_parse_ctx *ctx, pms_err *e)
{
    json_t *p = json_object_get(o, "prompt");
    if (!p || json_is_null(p))
        return pms_err_set(e, 400, BAD, NULL, "prompt", "'prompt' is required");
    if (json_is_string(p)) {
        r->text_len = json_string_length(p);
        return (r->text = dup_bytes(json_string_value(p), r->text_len)) ? 0 : oom(e);
    }
    if (json_is_array(p))
        return parse_ids(r, p, ctx, e);
    return pms_err_set(e, 400, BAD, NULL, "prompt", "'prompt' must be a string or an array of token ids");
}

static int add_stop(pms_req *r, json_t *s, pms_err *e)
{
    if (!json_is_string(s))
        return pms_err_set(e, 400, BAD, NULL, "stop", "'stop' must be a string or an array of strings");
    size_t n = json_string_length(s);
    if (n == 0 || n > PMS_MAX_STOP_LEN)
        return pms_err_set(e, 400, BAD, NULL, "stop", "stop strings must have 1..%d bytes", PMS_MAX_STOP_LEN);
    if (!(r->stop[r->n_stop] = dup_bytes(json_string_value(s), n)))
        return oom(e);
    r->stop_len[r->n_stop++] = n;
    return 0;
}

static int parse_stop(pms_req *r, json_t *o, pms_err *e)
{
    json_t *s = json_object_get(o, "stop");
    if (!s || json_is_null(s))
        return 0;
    if (!json_is_array(s))
        return add_stop(r, s, e);
    if (json_array_size(s) > PMS_MAX_STOP)
        return pms_err_set(e, 400, BAD, NULL, "stop", "'stop' takes at most %d strings", PMS_MAX_STOP);
    for (size_t i = 0; i < json_array_size(s); i++)
        if (add_stop(r, json_array_get(s, i), e))
            return -1;
    return 0;
}

/* content: a string, or an array of parts of which only {"type":"text"}
 * is understood. Parts are concatenated into buf. */
static int message_content(json_t *c, pms_buf *buf, pms_err *e)
{
    if (json_is_string(c))
        return pms_buf_append(buf, json_string_value(c), json_string_length(c)) ? oom(e) : 0;
    if (!json_is_array(c))
        return pms_err_set(e, 400, BAD, NULL, "messages", "message 'content' must be a string or an array of parts");
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *part = json_array_get(c, i);
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") != 0 || !json_is_string(text))
            return pms_err_set(e, 400, BAD, NULL, "messages", "only text content parts are supported");
        if (pms_buf_append(buf, json_string_value(text), json_string_length(text)))
            return oom(e);
    }
    return 0;
}

static int message_role(json_t *m, pms_chat_role *role, pms_err *e)
{
    const char *r = json_string_value(json_object_get(m, "role"));
    if (!r)
        return pms_err_set(e, 400, BAD, NULL, "messages", "every message needs a string 'role'");
    if (!strcmp(r, "system") || !strcmp(r, "developer"))
        *role = PMS_ROLE_SYSTEM;
    else if (!strcmp(r, "user"))
        *role = PMS_ROLE_USER;
    else if (!strcmp(r, "assistant"))
        *role = PMS_ROLE_ASSISTANT;
    else
        return pms_err_set(e, 400, BAD, NULL, "messages", "unknown role '%.40s'", r);
    return 0;
}

/* Today's date as the Llama 3.2 template writes it (strftime_now("%d %b
 * %Y") in the local time zone, as Hugging Face's renderer calls it). */
static void today(char *buf, size_t cap)
{
    time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm) || strftime(buf, cap, "%d %b %Y", &tm) == 0)
        buf[0] = '\0';
}

/* Renders the messages into r->text with the server's chat format. Each
 * message's text is gathered in one buffer first; msgs[] points into it by
 * offset, fixed up once the buffer stops moving. */
static int parse_messages(pms_req *r, json_t *o, const pms_parse_ctx *ctx, pms_err *e)
{
    json_t *ms = json_object_get(o, "messages");
    if (!json_is_array(ms) || json_array_size(ms) == 0)
        return pms_err_set(e, 400, BAD, NULL, "messages", "'messages' must be a non-empty array");
    size_t n = json_array_size(ms);
    pms_chat_msg *msgs = calloc(n, sizeof *msgs);
    size_t *off = calloc(n, sizeof *off);
    pms_buf all, out;
    pms_buf_init(&all, 0);
    pms_buf_init(&out, 0);
    int rc = msgs && off ? 0 : oom(e);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        json_t *m = json_array_get(ms, i);
        if (!json_is_object(m)) {
            rc = pms_err_set(e, 400, BAD, NULL, "messages", "every message must be an object");
            break;
        }
        off[i] = all.n;
        rc = message_role(m, &msgs[i].role, e);
        if (rc == 0)
            rc = message_content(json_object_get(m, "content"), &all, e);
        msgs[i].len = all.n - off[i];
    }
    for (size_t i = 0; rc == 0 && i < n; i++)
        msgs[i].content = all.p ? all.p + off[i] : "";
    char why[200];
    char date[32] = "";
    if (rc == 0 && pms_chat_needs_date(ctx->chat))
        today(date, sizeof date);
    int rr = rc == 0 ? pms_chat_render(ctx->chat, date[0] ? date : NULL, msgs, n, &out, why, sizeof why) : 0;
    if (rr == -2)
        rc = pms_err_set(e, 400, BAD, NULL, "messages", "the model's chat template (%s) refuses this conversation: %s",
                         pms_chat_format_name(ctx->chat), why);
    else if (rr)
        rc = oom(e);
    if (rc == 0) {
        r->text = out.p ? out.p : dup_bytes("", 0);
        r->text_len = out.n;
        out.p = NULL;
        if (!r->text)
            rc = oom(e);
    }
    pms_buf_free(&out);
    pms_buf_free(&all);
    free(off);
    free(msgs);
    return rc;
}

/* ---- the body ---------------------------------------------------------- */

static int check_model(json_t *o, const pms_parse_ctx *ctx, pms_err *e)
{
    json_t *m = json_object_get(o, "model");
    if (!m || json_is_null(m))
        return 0;
    if (!json_is_string(m))
        return pms_err_set(e, 400, BAD, NULL, "model", "'model' must be a string");
    if (strcmp(json_string_value(m), ctx->model_id) != 0)
        return pms_err_set(e, 404, BAD, "model_not_found", "model", "the model '%.80s' does not exist",
                           json_string_value(m));
    return 0;
}

/* Options the server does not implement but must not silently drop. */
static int check_unsupported(json_t *o, pms_err *e)
{
    long long v = 1;
    if (get_int(o, "n", 1, 1, &v, e) < 0 || get_int(o, "best_of", 1, 1, &v, e) < 0)
        return -1;
    int b = 0;
    if (get_bool(o, "echo", &b, e) < 0)
        return -1;
    if (b)
        return pms_err_set(e, 400, BAD, NULL, "echo", "'echo' is not supported");
    json_t *lp = json_object_get(o, "logprobs");
    if (lp && !json_is_null(lp) && !json_is_false(lp) && !(json_is_integer(lp) && json_integer_value(lp) == 0))
        return pms_err_set(e, 400, BAD, NULL, "logprobs", "'logprobs' is not supported");
    return 0;
}

static int parse_sampling(pms_req *r, json_t *o, const pms_parse_ctx *ctx, pms_err *e)
{
    long long v;
    int got;
    if ((got = get_int(o, "max_tokens", 1, ctx->max_tokens_cap, &v, e)) < 0)
        return -1;
    if (got == 0 && (got = get_int(o, "max_completion_tokens", 1, ctx->max_tokens_cap, &v, e)) < 0)
        return -1;
    if (got)
        r->max_tokens = (int32_t)v;
    if (get_num(o, "temperature", 0.0, 2.0, 0, &r->temperature, e) < 0 ||
        get_num(o, "top_p", 0.0, 1.0, 1, &r->top_p, e) < 0)
        return -1;
    if ((got = get_int(o, "top_k", 0, INT32_MAX, &v, e)) < 0)
        return -1;
    if (got)
        r->top_k = (int32_t)v;
    if ((got = get_int(o, "seed", 0, INT64_MAX, &v, e)) < 0)
        return -1;
    if (got) {
        r->seed = (uint64_t)v;
        r->has_seed = 1;
    }
    return 0;
}

static int parse_stream(pms_req *r, json_t *o, pms_err *e)
{
    if (get_bool(o, "stream", &r->stream, e) < 0)
        return -1;
    json_t *so = json_object_get(o, "stream_options");
    if (!so || json_is_null(so))
        return 0;
    if (!json_is_object(so))
        return pms_err_set(e, 400, BAD, NULL, "stream_options", "'stream_options' must be an object");
    return get_bool(so, "include_usage", &r->include_usage, e) < 0 ? -1 : 0;
}

static int parse_object(pms_req *r, json_t *o, const pms_parse_ctx *ctx, pms_err *e)
{
    if (check_model(o, ctx, e) || check_unsupported(o, e) || parse_sampling(r, o, ctx, e) ||
        parse_stream(r, o, e) || parse_stop(r, o, e))
        return -1;
    return r->ep == PMS_EP_CHAT ? parse_messages(r, o, ctx, e) : parse_prompt(r, o, ctx, e);
}

int pms_req_parse(pms_req *r, pms_endpoint ep, const char *body, size_t len, const pms_parse_ctx *ctx,
                  pms_err *e)
{
    memset(r, 0, sizeof *r);
    r->ep = ep;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return pms_err_set(e, 400, BAD, NULL, NULL, "invalid JSON at line %d column %d: %s", je.line, je.column,
                           je.text);
    int rc = json_is_object(o) ? parse_object(r, o, ctx, e)
                               : pms_err_set(e, 400, BAD, NULL, NULL, "the body must be a JSON object");
    json_decref(o);
    if (rc)
        pms_req_free(r);
    return rc;
}

int pms_req_add_stop(pms_req *r, const char *stop)
{
    size_t n = strlen(stop);
    if (n == 0 || r->n_stop > PMS_MAX_STOP)
        return 0;
    for (size_t i = 0; i < r->n_stop; i++)
        if (r->stop_len[i] == n && memcmp(r->stop[i], stop, n) == 0)
            return 0;
    if (!(r->stop[r->n_stop] = dup_bytes(stop, n)))
        return -1;
    r->stop_len[r->n_stop++] = n;
    return 0;
}
