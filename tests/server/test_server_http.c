/* test_server_http.c — pm-server end to end, over real HTTP on loopback.
 *
 *   test_server_http CASE SERVER TINY SLOW GENERATE [PHASEMARK]
 *
 * SERVER is the pm-server binary; TINY and SLOW are synthetic models
 * written by pm-modelwriter (TINY answers in microseconds; SLOW takes
 * seconds for thousands of tokens, so a request can be caught while it
 * runs); GENERATE is pm-generate, the engine's other front end, used as
 * the independent reference for token counts and text; PHASEMARK (the
 * markers case only) is the phasemark command. Each case starts its own
 * server on an ephemeral port.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "gguf_copy.h"
#include "pm_check.h"
#include "pm_kjv_prompts.h"
#include "pm_child.h"
#include "text.h"

static const char *server_bin, *tiny, *slow, *generate_bin, *phasemark_bin;

#define TIMEOUT 60000
/* A prompt of ids the SLOW model does not end (no EOS in 4000 steps). */
#define SLOW_PROMPT "[1,50,60]"

/* ---- helpers ------------------------------------------------------------- */

static json_t *body_json(const hc_resp *r)
{
    json_error_t e;
    json_t *j = r->body ? json_loadb(r->body, r->body_len, JSON_ALLOW_NUL, &e) : NULL;
    if (!j)
        fprintf(stderr, "not JSON: '%.300s'\n", r->body ? r->body : "(null)");
    return j;
}

static const char *jstr(json_t *o, const char *path)
{
    json_t *v = json_object_get(o, path);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static long long jint(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

static json_t *choice0(json_t *o)
{
    return json_array_get(json_object_get(o, "choices"), 0);
}

static void start(srv_proc *p, const char *model, const char *const *extra)
{
    REQUIRE(srv_start(p, server_bin, model, extra) == 0);
}

static void stop_ok(srv_proc *p)
{
    CHECK_INT_EQ(srv_stop(p, SIGTERM, TIMEOUT), 0);
    free(p->log);
    p->log = NULL;
}

/* Stops the server and checks that its access log holds each needle. */
static void stop_check_log(srv_proc *p, const char *const *needles)
{
    CHECK_INT_EQ(srv_stop(p, SIGTERM, TIMEOUT), 0);
    for (size_t i = 0; needles[i]; i++) {
        int found = p->log && strstr(p->log, needles[i]) != NULL;
        if (!found)
            fprintf(stderr, "access log lacks '%s'\n", needles[i]);
        CHECK(found);
    }
    free(p->log);
    p->log = NULL;
}

static long long request_id(const hc_resp *r)
{
    char v[32];
    return hc_header(r, "X-Request-Id", v, sizeof v) ? strtoll(v, NULL, 10) : -1;
}

/* Runs pm-generate greedily on ids and returns its generated ids count
 * (--ids output) and its text (repaired to UTF-8 like the server does). */
static int reference(const char *model, const char *ids_csv, int n, char *text, size_t cap, int *count)
{
    char nbuf[16];
    snprintf(nbuf, sizeof nbuf, "%d", n);
    char *argv_ids[] = {(char *)generate_bin, "-m", (char *)model, "--tokens", (char *)ids_csv, "-n", nbuf,
                        "--threads", "1", "--ids", NULL};
    pm_child_result res;
    if (pm_child_exec(argv_ids, NULL, TIMEOUT, &res) || !pm_child_ok(&res))
        return -1;
    *count = 0;
    for (char *tok = res.out; *tok;) {
        while (*tok == ' ' || *tok == '\n')
            tok++;
        if (!*tok)
            break;
        (*count)++;
        while (*tok && *tok != ' ' && *tok != '\n')
            tok++;
    }
    char *argv_text[] = {(char *)generate_bin, "-m", (char *)model, "--tokens", (char *)ids_csv, "-n", nbuf,
                         "--threads", "1", NULL};
    if (pm_child_exec(argv_text, NULL, TIMEOUT, &res) || !pm_child_ok(&res))
        return -1;
    size_t len = strlen(res.out);
    if (len && res.out[len - 1] == '\n')
        len--; /* pm-generate ends with a newline of its own */
    pms_buf b;
    pms_buf_init(&b, 0);
    int rc = pms_utf8_repair(&b, res.out, len);
    snprintf(text, cap, "%s", rc == 0 && b.p ? b.p : "");
    pms_buf_free(&b);
    return rc;
}

/* The SSE events of a stream body: each "data: X\n\n". Fills the JSON
 * payloads (all but [DONE], which must come last); -1 on bad framing. */
static int sse_events(const hc_resp *r, json_t **ev, int cap, int *n)
{
    *n = 0;
    const char *p = r->body;
    int done = 0;
    while (*p) {
        if (!done && p[0] == ':') { /* a comment (keep-alive): skipped */
            const char *e = strstr(p, "\n\n");
            if (!e)
                return -1;
            p = e + 2;
            continue;
        }
        if (done || strncmp(p, "data: ", 6) != 0)
            return -1;
        const char *end = strstr(p, "\n\n");
        if (!end)
            return -1;
        size_t len = (size_t)(end - p - 6);
        if (len == 6 && strncmp(p + 6, "[DONE]", 6) == 0) {
            done = 1;
        } else {
            json_error_t e;
            if (*n >= cap || !(ev[*n] = json_loadb(p + 6, len, JSON_ALLOW_NUL, &e)))
                return -1;
            (*n)++;
        }
        p = end + 2;
    }
    return done ? 0 : -1;
}

static void free_events(json_t **ev, int n)
{
    for (int i = 0; i < n; i++)
        json_decref(ev[i]);
}

static void check_timings(json_t *t, long long prompt_n, long long predicted_n)
{
    static const char *const keys[] = {"prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
                                       "predicted_n", "predicted_ms", "predicted_per_token_ms",
                                       "predicted_per_second", "draft_n", "draft_n_accepted"};
    REQUIRE(json_is_object(t));
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_t *v = json_object_get(t, keys[i]);
        if (!json_is_number(v) || json_number_value(v) < 0)
            fprintf(stderr, "timings.%s missing or negative\n", keys[i]);
        CHECK(json_is_number(v) && json_number_value(v) >= 0);
    }
    CHECK_INT_EQ(jint(t, "prompt_n"), prompt_n);
    CHECK_INT_EQ(jint(t, "predicted_n"), predicted_n);
    CHECK_INT_EQ(jint(t, "draft_n"), 0);
    CHECK_INT_EQ(jint(t, "draft_n_accepted"), 0);
}

/* Checks the error shape of an answer: status, JSON error object with a
 * message and type, X-Request-Id. */
static void check_error(const hc_resp *r, int status, const char *what)
{
    if (r->status != status)
        fprintf(stderr, "%s: status %d, want %d (%s)\n", what, r->status, status, r->body ? r->body : "");
    CHECK_INT_EQ(r->status, status);
    CHECK(request_id(r) > 0);
    json_t *j = body_json(r);
    json_t *e = json_object_get(j, "error");
    CHECK(json_is_object(e));
    CHECK(jstr(e, "message") && jstr(e, "message")[0]);
    CHECK(jstr(e, "type") != NULL);
    json_decref(j);
}

/* ---- endpoints ----------------------------------------------------------- */

static int case_endpoints(void)
{
    srv_proc p;
    const char *extra[] = {"--model-id", "tiny-model", NULL};
    start(&p, tiny, extra);
    hc_resp r;
    long long last_id = 0;

    REQUIRE(hc_request(p.port, "GET", "/health", NULL, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    CHECK_STR_EQ(r.body, "{\"status\":\"ok\"}");
    char ct[128];
    CHECK_STR_EQ(hc_header(&r, "Content-Type", ct, sizeof ct), "application/json");
    last_id = request_id(&r);
    CHECK(last_id > 0);
    hc_free(&r);

    long long t0 = (long long)time(NULL);
    REQUIRE(hc_request(p.port, "GET", "/v1/models", NULL, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    CHECK(request_id(&r) > last_id);
    last_id = request_id(&r);
    json_t *j = body_json(&r);
    CHECK_STR_EQ(jstr(j, "object"), "list");
    json_t *data = json_object_get(j, "data");
    CHECK_INT_EQ(json_array_size(data), 1);
    json_t *m = json_array_get(data, 0);
    CHECK_STR_EQ(jstr(m, "id"), "tiny-model");
    CHECK_STR_EQ(jstr(m, "object"), "model");
    CHECK_STR_EQ(jstr(m, "owned_by"), "phasemark");
    CHECK(jint(m, "created") > 0 && jint(m, "created") <= t0);
    CHECK_INT_EQ(json_object_size(m), 4);
    json_decref(j);
    hc_free(&r);

    REQUIRE(hc_request(p.port, "GET", "/v1/models/tiny-model", NULL, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    j = body_json(&r);
    CHECK_STR_EQ(jstr(j, "id"), "tiny-model");
    CHECK_STR_EQ(jstr(j, "object"), "model");
    json_decref(j);
    hc_free(&r);

    REQUIRE(hc_request(p.port, "GET", "/v1/models/other", NULL, &r, TIMEOUT) == 0);
    check_error(&r, 404, "unknown model");
    j = body_json(&r);
    CHECK_STR_EQ(jstr(json_object_get(j, "error"), "code"), "model_not_found");
    json_decref(j);
    hc_free(&r);

    REQUIRE(hc_request(p.port, "HEAD", "/health", NULL, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    hc_free(&r);

    REQUIRE(hc_request(p.port, "GET", "/metrics", NULL, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    CHECK(request_id(&r) > last_id);
    CHECK(hc_header(&r, "Content-Type", ct, sizeof ct) && strncmp(ct, "text/plain; version=0.0.4", 25) == 0);
    /* health, models, model, 404, HEAD so far: counted by status. */
    CHECK(strstr(r.body, "# TYPE phasemark_http_requests_total counter\n") != NULL);
    CHECK(strstr(r.body, "phasemark_http_requests_total{code=\"200\"} 4\n") != NULL);
    CHECK(strstr(r.body, "phasemark_http_requests_total{code=\"404\"} 1\n") != NULL);
    static const char *const names[] = {"phasemark_prompt_tokens_total", "phasemark_generated_tokens_total",
                                        "phasemark_draft_tokens_total", "phasemark_draft_accepted_tokens_total",
                                        "phasemark_phase_tokens_total", "phasemark_phase_seconds_total",
                                        "phasemark_queue_depth", "phasemark_requests_cancelled_total"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char help[128];
        snprintf(help, sizeof help, "# HELP %s ", names[i]);
        CHECK(strstr(r.body, help) != NULL);
    }
    hc_free(&r);
    const char *log[] = {"pm-server: req=1 GET /health 200 ", "pm-server: req=2 GET /v1/models 200 ",
                         "pm-server: req=4 GET /v1/models/other 404 ", "pm-server: req=5 HEAD /health 200 ", NULL};
    stop_check_log(&p, log);
    return pm_check_result();
}

/* ---- completions ----------------------------------------------------------- */

static int case_completion(void)
{
    char want[4096];
    int want_n = 0;
    REQUIRE(reference(tiny, "1,100,200,300", 12, want, sizeof want, &want_n) == 0);
    srv_proc p;
    start(&p, tiny, NULL);
    hc_resp r;
    long long t0 = (long long)time(NULL);
    REQUIRE(hc_request(p.port, "POST", "/v1/completions",
                       "{\"prompt\":[1,100,200,300],\"max_tokens\":12,\"temperature\":0}", &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    json_t *j = body_json(&r);
    REQUIRE(j != NULL);
    char id[64];
    snprintf(id, sizeof id, "cmpl-%lld", request_id(&r));
    CHECK_STR_EQ(jstr(j, "id"), id);
    CHECK_STR_EQ(jstr(j, "object"), "text_completion");
    CHECK(jint(j, "created") >= t0 && jint(j, "created") <= (long long)time(NULL));
    CHECK_STR_EQ(jstr(j, "model"), "server_tiny");
    CHECK_INT_EQ(json_array_size(json_object_get(j, "choices")), 1);
    json_t *c = choice0(j);
    CHECK_STR_EQ(jstr(c, "text"), want);
    CHECK_INT_EQ(jint(c, "index"), 0);
    CHECK(json_is_null(json_object_get(c, "logprobs")));
    CHECK_STR_EQ(jstr(c, "finish_reason"), want_n == 12 ? "length" : "stop");
    json_t *u = json_object_get(j, "usage");
    CHECK_INT_EQ(jint(u, "prompt_tokens"), 4);
    CHECK_INT_EQ(jint(u, "completion_tokens"), want_n);
    CHECK_INT_EQ(jint(u, "total_tokens"), 4 + want_n);
    check_timings(json_object_get(j, "timings"), 4, want_n);
    json_decref(j);
    hc_free(&r);

    /* A text prompt: the prompt's token count must equal what the engine's
     * other front end prefilled for the same text. */
    char *argv_gen[] = {(char *)generate_bin, "-m", (char *)tiny, "-p", "The quick brown fox", "-n", "1",
                        "--threads", "1", NULL};
    pm_child_result res;
    REQUIRE(pm_child_exec(argv_gen, NULL, TIMEOUT, &res) == 0 && pm_child_ok(&res));
    const char *pre = strstr(res.err, "prefill ");
    REQUIRE(pre != NULL);
    long long prompt_n = strtoll(pre + 8, NULL, 10);
    REQUIRE(hc_request(p.port, "POST", "/v1/completions",
                       "{\"prompt\":\"The quick brown fox\",\"max_tokens\":3,\"temperature\":0,\"seed\":5}", &r,
                       TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    j = body_json(&r);
    CHECK_INT_EQ(jint(json_object_get(j, "usage"), "prompt_tokens"), prompt_n);
    CHECK_INT_EQ(jint(json_object_get(j, "timings"), "prompt_n"), prompt_n);
    json_decref(j);
    hc_free(&r);

    /* Without max_tokens a completion stops at 16 (OpenAI's default). */
    REQUIRE(hc_request(p.port, "POST", "/v1/completions", "{\"prompt\":[1,100,200,300],\"temperature\":0}", &r,
                       TIMEOUT) == 0);
    j = body_json(&r);
    CHECK(jint(json_object_get(j, "usage"), "completion_tokens") <= 16);
    json_decref(j);
    hc_free(&r);
    char line[128];
    snprintf(line, sizeof line, "POST /v1/completions 200 ");
    char toks[64];
    snprintf(toks, sizeof toks, "prompt=4 gen=%d %s\n", want_n, want_n == 12 ? "length" : "stop");
    const char *log[] = {line, toks, NULL};
    stop_check_log(&p, log);
    return pm_check_result();
}

/* Concatenated stream text, with the shape of every chunk checked. */
static void stream_text(json_t **ev, int n, int chat, char *out, size_t cap, const char **finish)
{
    size_t o = 0;
    *finish = NULL;
    for (int i = 0; i < n; i++) {
        json_t *c = choice0(ev[i]);
        CHECK_STR_EQ(jstr(ev[i], "object"), chat ? "chat.completion.chunk" : "text_completion");
        json_t *fr = json_object_get(c, "finish_reason");
        if (i < n - 1)
            CHECK(json_is_null(fr));
        else
            *finish = json_string_value(fr);
        const char *t = chat ? jstr(json_object_get(c, "delta"), "content") : jstr(c, "text");
        if (chat && i == 0)
            CHECK_STR_EQ(jstr(json_object_get(c, "delta"), "role"), "assistant");
        if (t && o + strlen(t) < cap) {
            memcpy(out + o, t, strlen(t));
            o += strlen(t);
        }
    }
    out[o] = 0;
}

static int case_stream(void)
{
    srv_proc p;
    start(&p, tiny, NULL);
    hc_resp r;
    const char *body = "{\"prompt\":[1,100,200,300],\"max_tokens\":12,\"temperature\":0}";
    REQUIRE(hc_request(p.port, "POST", "/v1/completions", body, &r, TIMEOUT) == 0);
    json_t *j = body_json(&r);
    char want[4096];
    snprintf(want, sizeof want, "%s", jstr(choice0(j), "text"));
    long long want_n = jint(json_object_get(j, "usage"), "completion_tokens");
    json_decref(j);
    hc_free(&r);

    REQUIRE(hc_request(p.port, "POST", "/v1/completions",
                       "{\"prompt\":[1,100,200,300],\"max_tokens\":12,\"temperature\":0,\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true}}",
                       &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    CHECK_INT_EQ(r.chunked, 1);
    char ct[64];
    CHECK_STR_EQ(hc_header(&r, "Content-Type", ct, sizeof ct), "text/event-stream");
    CHECK_STR_EQ(hc_header(&r, "Cache-Control", ct, sizeof ct), "no-cache");
    /* The body ends with exactly one [DONE] event. */
    CHECK(r.body_len >= 14 && strcmp(r.body + r.body_len - 14, "data: [DONE]\n\n") == 0);
    json_t *ev[256];
    int n = 0;
    REQUIRE(sse_events(&r, ev, 256, &n) == 0);
    CHECK(n >= 2);
    char got[4096];
    const char *finish;
    stream_text(ev, n, 0, got, sizeof got, &finish);
    CHECK_STR_EQ(got, want);
    CHECK_STR_EQ(finish, want_n == 12 ? "length" : "stop");
    char id[64];
    snprintf(id, sizeof id, "cmpl-%lld", request_id(&r));
    for (int i = 0; i < n; i++)
        CHECK_STR_EQ(jstr(ev[i], "id"), id);
    json_t *last = ev[n - 1];
    CHECK_INT_EQ(jint(json_object_get(last, "usage"), "completion_tokens"), want_n);
    check_timings(json_object_get(last, "timings"), 4, want_n);
    CHECK(json_object_get(ev[0], "timings") == NULL);
    free_events(ev, n);
    hc_free(&r);
    stop_ok(&p);
    return pm_check_result();
}

static int case_chat(void)
{
    srv_proc p;
    start(&p, tiny, NULL);
    hc_resp r;
    /* The documented default template for one user message, sent as a
     * plain completion with the implicit stop: the reference answer. */
    REQUIRE(hc_request(p.port, "POST", "/v1/completions",
                       "{\"prompt\":\"Be brief.\\n\\nUser: Hi\\nAssistant:\",\"max_tokens\":10,\"temperature\":0,"
                       "\"stop\":\"\\nUser:\"}",
                       &r, TIMEOUT) == 0);
    json_t *j = body_json(&r);
    char want[4096];
    snprintf(want, sizeof want, "%s", jstr(choice0(j), "text"));
    long long prompt_n = jint(json_object_get(j, "usage"), "prompt_tokens");
    long long gen_n = jint(json_object_get(j, "usage"), "completion_tokens");
    json_decref(j);
    hc_free(&r);

    const char *chat = "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\","
                       "\"content\":\"Hi\"}],\"max_tokens\":10,\"temperature\":0";
    char body[512];
    snprintf(body, sizeof body, "%s}", chat);
    REQUIRE(hc_request(p.port, "POST", "/v1/chat/completions", body, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    j = body_json(&r);
    char id[64];
    snprintf(id, sizeof id, "chatcmpl-%lld", request_id(&r));
    CHECK_STR_EQ(jstr(j, "id"), id);
    CHECK_STR_EQ(jstr(j, "object"), "chat.completion");
    json_t *c = choice0(j);
    CHECK_INT_EQ(jint(c, "index"), 0);
    json_t *msg = json_object_get(c, "message");
    CHECK_STR_EQ(jstr(msg, "role"), "assistant");
    CHECK_STR_EQ(jstr(msg, "content"), want);
    CHECK(jstr(c, "finish_reason") != NULL);
    CHECK_INT_EQ(jint(json_object_get(j, "usage"), "prompt_tokens"), prompt_n);
    CHECK_INT_EQ(jint(json_object_get(j, "usage"), "completion_tokens"), gen_n);
    json_decref(j);
    hc_free(&r);

    snprintf(body, sizeof body, "%s,\"stream\":true}", chat);
    REQUIRE(hc_request(p.port, "POST", "/v1/chat/completions", body, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    json_t *ev[256];
    int n = 0;
    REQUIRE(sse_events(&r, ev, 256, &n) == 0);
    char got[4096];
    const char *finish;
    stream_text(ev, n, 1, got, sizeof got, &finish);
    CHECK_STR_EQ(got, want);
    CHECK(finish != NULL);
    CHECK(json_object_get(ev[n - 1], "usage") == NULL); /* not asked for */
    free_events(ev, n);
    hc_free(&r);
    stop_ok(&p);
    return pm_check_result();
}

/* A model whose GGUF metadata carries a ChatML template: the server must
 * render chat messages in that format and stop at <|im_end|>. */
static int case_chat_template(void)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/pm_server_chatml_%ld.gguf", (long)getpid());
    const char *tmpl = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                       "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                       "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    REQUIRE(gguf_copy_with_template(tiny, path, tmpl) == 0);
    srv_proc p;
    start(&p, path, NULL);
    hc_resp r;
    REQUIRE(hc_request(p.port, "POST", "/v1/completions",
                       "{\"prompt\":\"<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n\","
                       "\"max_tokens\":10,\"temperature\":0,\"stop\":\"<|im_end|>\"}",
                       &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    json_t *j = body_json(&r);
    char want[4096];
    snprintf(want, sizeof want, "%s", jstr(choice0(j), "text"));
    long long prompt_n = jint(json_object_get(j, "usage"), "prompt_tokens");
    json_decref(j);
    hc_free(&r);
    REQUIRE(hc_request(p.port, "POST", "/v1/chat/completions",
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":10,"
                       "\"temperature\":0}",
                       &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    j = body_json(&r);
    CHECK_STR_EQ(jstr(json_object_get(choice0(j), "message"), "content"), want);
    CHECK_INT_EQ(jint(json_object_get(j, "usage"), "prompt_tokens"), prompt_n);
    /* The plain default would have given a different prompt length. */
    CHECK(prompt_n > 20);
    json_decref(j);
    hc_free(&r);
    stop_ok(&p);
    unlink(path);
    return pm_check_result();
}

#ifndef PM_CHAT_FIXTURES
#define PM_CHAT_FIXTURES "tests/server/chat"
#endif

/* A template text from tests/server/chat, NUL-terminated; caller frees. */
static char *fixture(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", PM_CHAT_FIXTURES, name);
    FILE *f = fopen(path, "rb");
    REQUIRE(f != NULL);
    char *buf = calloc(1, 65536);
    REQUIRE(buf != NULL);
    size_t n = fread(buf, 1, 65535, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* usage.prompt_tokens and the text of a greedy completion. */
static long long complete(int port, const char *body, char *text, size_t cap, const char **finish_out)
{
    hc_resp r;
    REQUIRE(hc_request(port, "POST", "/v1/completions", body, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    json_t *j = body_json(&r);
    if (text)
        snprintf(text, cap, "%s", jstr(choice0(j), "text") ? jstr(choice0(j), "text") : "(none)");
    long long n = jint(json_object_get(j, "usage"), "prompt_tokens");
    if (finish_out)
        *finish_out = jstr(choice0(j), "finish_reason") && !strcmp(jstr(choice0(j), "finish_reason"), "stop")
                          ? "stop" : "other";
    json_decref(j);
    hc_free(&r);
    return n;
}

/* Mistral v0.3's real template on the tiny model, whose vocabulary has
 * <s> as BOS: the chat prompt is the rendered text with its written <s>
 * parsed as BOS and no second BOS, so it must equal the completion of
 * the same text without <s> (to which the tokenizer adds BOS), prompt
 * length and greedy text alike. A conversation the template refuses is a
 * 400 in the template's words. */
static int case_chat_mistral(void)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/pm_server_mistral_%ld.gguf", (long)getpid());
    char *tmpl = fixture("mistral-v3.jinja");
    REQUIRE(gguf_copy_with_template(tiny, path, tmpl) == 0);
    free(tmpl);
    srv_proc p;
    start(&p, path, NULL);
    char want[4096];
    long long want_n = complete(p.port, "{\"prompt\":\"[INST] Be brief.\\n\\nHi[/INST]\",\"max_tokens\":10,"
                                        "\"temperature\":0}", want, sizeof want, NULL);
    hc_resp r;
    REQUIRE(hc_request(p.port, "POST", "/v1/chat/completions",
                       "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\","
                       "\"content\":\"Hi\"}],\"max_tokens\":10,\"temperature\":0}",
                       &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    json_t *j = body_json(&r);
    CHECK_STR_EQ(jstr(json_object_get(choice0(j), "message"), "content"), want);
    CHECK_INT_EQ(jint(json_object_get(j, "usage"), "prompt_tokens"), want_n);
    json_decref(j);
    hc_free(&r);
    REQUIRE(hc_request(p.port, "POST", "/v1/chat/completions",
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}]}",
                       &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 400);
    j = body_json(&r);
    json_t *err = json_object_get(j, "error");
    CHECK_STR_EQ(jstr(err, "message"), "the model's chat template (mistral-v3) refuses this conversation: After "
                                       "the optional system message, conversation roles must alternate "
                                       "user/assistant/user/assistant/...");
    CHECK_STR_EQ(jstr(err, "param"), "messages");
    json_decref(j);
    hc_free(&r);
    stop_ok(&p);
    unlink(path);
    return pm_check_result();
}

/* The greedy ids pm-generate gives for ids_csv (at most cap). */
static int greedy_ids(const char *model, const char *ids_csv, int n, int32_t *out, int cap)
{
    char nbuf[16];
    snprintf(nbuf, sizeof nbuf, "%d", n);
    char *argv[] = {(char *)generate_bin, "-m", (char *)model, "--tokens", (char *)ids_csv, "-n", nbuf,
                    "--threads", "1", "--ids", NULL};
    pm_child_result res;
    REQUIRE(pm_child_exec(argv, NULL, TIMEOUT, &res) == 0 && pm_child_ok(&res));
    int k = 0;
    for (char *t = res.out, *end; k < cap; t = end) {
        long v = strtol(t, &end, 10);
        if (end == t)
            break;
        out[k++] = (int32_t)v;
    }
    return k;
}

/* The format's end-of-turn token ends a generation. The synthetic
 * vocabulary has none, so one greedy token of the tiny model is renamed
 * <|im_end|> (a control token) in a copy carrying a ChatML template: the
 * server must stop right before its first occurrence (finish "stop",
 * nothing of it emitted) with the text the unchanged model gives for the
 * tokens before it. In a chat prompt the <|im_end|> text is that one
 * token: the prompt is the two plain stretches around it (each with
 * SentencePiece's prefix space, as the completions endpoint tokenizes
 * them) plus one. */
static int case_chat_stop_token(void)
{
    const char *prompt = "1,100,200,300";
    int32_t g[12];
    int ng = greedy_ids(tiny, prompt, 12, g, 12);
    int k = -1;
    for (int i = 1; i < ng && k < 0; i++) {
        int seen = g[i] == 1 || g[i] == 2 || g[i] == 100 || g[i] == 200 || g[i] == 300;
        for (int j = 0; j < i; j++)
            seen |= g[j] == g[i];
        if (!seen)
            k = i;
    }
    REQUIRE(k > 0);
    char path[128];
    snprintf(path, sizeof path, "/tmp/pm_server_eot_%ld.gguf", (long)getpid());
    const char *tmpl = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                       "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                       "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    REQUIRE(gguf_copy_with_control(tiny, path, tmpl, g[k], "<|im_end|>") == 0);

    char body[256], want[4096], got[4096];
    srv_proc p;
    start(&p, tiny, NULL);
    snprintf(body, sizeof body, "{\"prompt\":[%s],\"max_tokens\":%d,\"temperature\":0}", prompt, k);
    complete(p.port, body, want, sizeof want, NULL);
    stop_ok(&p);

    start(&p, path, NULL);
    snprintf(body, sizeof body, "{\"prompt\":[%s],\"max_tokens\":12,\"temperature\":0}", prompt);
    const char *finish;
    hc_resp r;
    REQUIRE(hc_request(p.port, "POST", "/v1/completions", body, &r, TIMEOUT) == 0);
    json_t *j = body_json(&r);
    snprintf(got, sizeof got, "%s", jstr(choice0(j), "text") ? jstr(choice0(j), "text") : "(none)");
    CHECK_STR_EQ(got, want);
    CHECK_STR_EQ(jstr(choice0(j), "finish_reason"), "stop");
    CHECK_INT_EQ(jint(json_object_get(j, "usage"), "completion_tokens"), k);
    json_decref(j);
    hc_free(&r);

    long long a = complete(p.port, "{\"prompt\":\"<|im_start|>user\\nHi\",\"max_tokens\":1,\"temperature\":0}", NULL, 0, &finish);
    long long b = complete(p.port, "{\"prompt\":\"\\n<|im_start|>assistant\\n\",\"max_tokens\":1,\"temperature\":0}", NULL, 0, &finish);
    REQUIRE(hc_request(p.port, "POST", "/v1/chat/completions",
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":1,\"temperature\":0}",
                       &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    j = body_json(&r);
    CHECK_INT_EQ(jint(json_object_get(j, "usage"), "prompt_tokens"), a + 1 + (b - 1));
    json_decref(j);
    hc_free(&r);
    stop_ok(&p);
    unlink(path);
    return pm_check_result();
}

/* The greedy text of one completion request on a server started with
 * extra arguments, and its timings' draft counts. */
static void greedy_text(const char *const *extra, const char *body, char *text, size_t cap, long long *drafted,
                        long long *accepted, int *port_out, srv_proc *keep)
{
    srv_proc p;
    start(&p, tiny, extra);
    hc_resp r;
    REQUIRE(hc_request(p.port, "POST", "/v1/completions", body, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    json_t *j = body_json(&r);
    snprintf(text, cap, "%s", jstr(choice0(j), "text") ? jstr(choice0(j), "text") : "(none)");
    json_t *t = json_object_get(j, "timings");
    *drafted = jint(t, "draft_n");
    *accepted = jint(t, "draft_n_accepted");
    json_decref(j);
    hc_free(&r);
    if (keep) {
        *keep = p;
        *port_out = p.port;
    } else {
        stop_ok(&p);
    }
}

/* --drafter ngram (no draft model), hybrid (the model as its own draft),
 * block (--draft-head: a random head pm-modelwriter wrote for the tiny
 * model, beside it as server_tiny_head.gguf) and hybrid over that head
 * (--drafter hybrid --draft-head): greedy text as
 * without; timings name the drafter and split the counts per round kind,
 * as /metrics does. The tiny model's 40 greedy tokens after this prompt
 * repeat the bigram 231 160 (tokens 12 and 24), so the n-gram lookup
 * finds a match. */
static int run_server(const char *const *args, pm_child_result *res);

static int case_drafters(void)
{
    const char *body = "{\"prompt\":[1,100,200,300],\"max_tokens\":40,\"temperature\":0}";
    char plain[4096];
    long long d0, a0;
    int port = 0;
    greedy_text(NULL, body, plain, sizeof plain, &d0, &a0, &port, NULL);
    char head[1024];
    snprintf(head, sizeof head, "%.*s_head.gguf", (int)(strlen(tiny) - 5), tiny);
    const char *ngram[] = {"--drafter", "ngram", "--draft-k", "3", NULL};
    const char *hybrid[] = {"--drafter", "hybrid", "--draft", tiny, NULL};
    const char *block[] = {"--draft-head", head, "--draft-k", "6", NULL};
    const char *hybrid_head[] = {"--drafter", "hybrid", "--draft-head", head, NULL};
    const char *const *extras[] = {ngram, hybrid, block, hybrid_head};
    static const char *const names[] = {"ngram", "hybrid", "block", "hybrid"};
    /* Which round kinds each may run (model, ngram, block): the n-gram
     * finds its match in every configuration that has it; the hybrid
     * over the head drafts with the head before the first match. */
    static const int runs[4][3] = {{0, 1, 0}, {1, 1, 0}, {0, 0, 1}, {0, 1, 1}};
    static const char *const kinds[3] = {"model", "ngram", "block"};
    for (int i = 0; i < 4; i++) {
        srv_proc p;
        start(&p, tiny, extras[i]);
        hc_resp r;
        REQUIRE(hc_request(p.port, "POST", "/v1/completions", body, &r, TIMEOUT) == 0);
        CHECK_INT_EQ(r.status, 200);
        json_t *j = body_json(&r);
        CHECK_STR_EQ(jstr(choice0(j), "text") ? jstr(choice0(j), "text") : "(none)", plain);
        json_t *t = json_object_get(j, "timings");
        CHECK_STR_EQ(jstr(t, "drafter") ? jstr(t, "drafter") : "(none)", names[i]);
        json_t *by = json_object_get(t, "drafters");
        long long d = jint(t, "draft_n"), a = jint(t, "draft_n_accepted"), sum_d = 0, sum_a = 0;
        for (int k = 0; k < 3; k++) {
            json_t *o = json_object_get(by, kinds[k]);
            long long dk = o ? jint(o, "draft_n") : 0, ak = o ? jint(o, "draft_n_accepted") : 0;
            if (runs[i][k] && kinds[k][0] != 'm')
                CHECK(dk > 0);
            if (!runs[i][k])
                CHECK_INT_EQ(dk, 0);
            sum_d += dk;
            sum_a += ak;
            char mt[128], ma[128];
            snprintf(mt, sizeof mt, "phasemark_drafter_tokens_total{drafter=\"%s\"}", kinds[k]);
            snprintf(ma, sizeof ma, "phasemark_drafter_accepted_tokens_total{drafter=\"%s\"}",
                     kinds[k]);
            CHECK(srv_metric(p.port, mt) == (double)dk);
            CHECK(srv_metric(p.port, ma) == (double)ak);
        }
        CHECK_INT_EQ(sum_d, d);
        CHECK_INT_EQ(sum_a, a);
        CHECK(srv_metric(p.port, "phasemark_draft_tokens_total") == (double)d);
        json_decref(j);
        hc_free(&r);
        stop_ok(&p);
    }
    static pm_child_result res;
    const char *bad[] = {"-m", tiny, "--port", "0", "--drafter", "tree", NULL};
    CHECK_INT_EQ(run_server(bad, &res), 1);
    CHECK(strstr(res.err, "--drafter must be model, ngram, hybrid or block (got 'tree')") != NULL);
    const char *nohead[] = {"-m", tiny, "--port", "0", "--drafter", "block", NULL};
    CHECK_INT_EQ(run_server(nohead, &res), 1);
    CHECK(strstr(res.err, "--drafter block needs --draft-head") != NULL);
    const char *stray[] = {"-m", tiny, "--port", "0", "--drafter", "ngram", "--draft-head", head, NULL};
    CHECK_INT_EQ(run_server(stray, &res), 1);
    CHECK(strstr(res.err, "--draft-head goes with --drafter block or hybrid") != NULL);
    const char *both[] = {"-m", tiny, "--port", "0", "--drafter", "hybrid", "--draft", tiny,
                          "--draft-head", head, NULL};
    CHECK_INT_EQ(run_server(both, &res), 1);
    CHECK(strstr(res.err, "--drafter hybrid needs --draft or --draft-head, one of them") != NULL);
    /* A head made for another model (the slow one has its own width). */
    const char *wrong[] = {"-m", slow, "--port", "0", "--draft-head", head, NULL};
    CHECK_INT_EQ(run_server(wrong, &res), 1);
    CHECK(strstr(res.err, "block head: target.embedding_length 64 does not match the target's 256") !=
          NULL);
    const char *nodraft[] = {"-m", tiny, "--port", "0", "--drafter", "model", NULL};
    CHECK_INT_EQ(run_server(nodraft, &res), 1);
    CHECK(strstr(res.err, "--drafter model needs --draft") != NULL);
    return pm_check_result();
}

/* --draft: speculative decoding with the model as its own draft. Greedy
 * output must be the target's own; every proposal is accepted (the draft
 * is the target); the counts reach timings and metrics. */
static int case_speculative(void)
{
    const char *body = "{\"prompt\":[1,100,200,300],\"max_tokens\":20,\"temperature\":0}";
    char plain[4096], spec[4096];
    long long d0, a0, d1, a1;
    int port = 0;
    greedy_text(NULL, body, plain, sizeof plain, &d0, &a0, &port, NULL);
    CHECK_INT_EQ(d0, 0);
    CHECK_INT_EQ(a0, 0);
    const char *extra[] = {"--draft", tiny, "--draft-k", "3", NULL};
    srv_proc p;
    greedy_text(extra, body, spec, sizeof spec, &d1, &a1, &port, &p);
    CHECK_STR_EQ(spec, plain);
    CHECK(d1 > 0);
    CHECK_INT_EQ(a1, d1);
    CHECK(srv_metric(port, "phasemark_draft_tokens_total") == (double)d1);
    CHECK(srv_metric(port, "phasemark_draft_accepted_tokens_total") == (double)a1);
    CHECK(srv_metric(port, "phasemark_draft_acceptance_ratio") == 1.0);
    CHECK(srv_metric(port, "phasemark_phase_tokens_total{phase=\"verify\"}") > 0);
    CHECK(srv_metric(port, "phasemark_phase_tokens_total{phase=\"batched\"}") > 0);
    /* Streamed, the same text. */
    hc_resp r;
    REQUIRE(hc_request(port, "POST", "/v1/completions",
                       "{\"prompt\":[1,100,200,300],\"max_tokens\":20,\"temperature\":0,\"stream\":true}", &r,
                       TIMEOUT) == 0);
    json_t *ev[256];
    int n = 0;
    REQUIRE(sse_events(&r, ev, 256, &n) == 0);
    char got[4096];
    const char *finish;
    stream_text(ev, n, 0, got, sizeof got, &finish);
    CHECK_STR_EQ(got, plain);
    free_events(ev, n);
    hc_free(&r);
    stop_ok(&p);
    return pm_check_result();
}

/* A symlink /tmp/pm_server_<tag>_<pid>.gguf to model, in out: a model
 * name of the caller's own, so that the daemons count_daemons and
 * daemon_pid find for it are its server's only (other cases spawn daemons
 * on the same files beside it). The caller unlinks it. */
static void own_model_name(const char *model, const char *tag, char *out, size_t cap)
{
    snprintf(out, cap, "/tmp/pm_server_%s_%ld.gguf", tag, (long)getpid());
    unlink(out);
    REQUIRE(symlink(model, out) == 0);
}

/* Processes whose command line holds pm-shardd and needle (from /proc). */
static int count_daemons(const char *needle)
{
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        char path[300], cmd[4096];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(cmd, 1, sizeof cmd - 1, f);
        fclose(f);
        for (size_t i = 0; i < len; i++)
            if (cmd[i] == 0)
                cmd[i] = ' ';
        cmd[len] = 0;
        n += strstr(cmd, "pm-shardd") && strstr(cmd, needle);
    }
    if (d)
        closedir(d);
    return n;
}

/* The pid of the one pm-shardd whose command line holds needle; -1. */
static pid_t daemon_pid(const char *needle)
{
    DIR *d = opendir("/proc");
    pid_t pid = -1;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        char path[300], cmd[4096];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(cmd, 1, sizeof cmd - 1, f);
        fclose(f);
        for (size_t i = 0; i < len; i++)
            if (cmd[i] == 0)
                cmd[i] = ' ';
        cmd[len] = 0;
        if (strstr(cmd, "pm-shardd") && strstr(cmd, needle))
            pid = (pid_t)strtol(e->d_name, NULL, 10);
    }
    if (d)
        closedir(d);
    return pid;
}

/* Starts pm-shardd for layer 1 of model on unix:sock and waits for its
 * ready line; the pid, or -1. */
static pid_t start_shardd(const char *model, const char *sock)
{
#ifdef PM_SHARDD
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    char listen[200];
    snprintf(listen, sizeof listen, "unix:%s", sock);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 3);
        execl(PM_SHARDD, "pm-shardd", "--model", model, "--layers", "1", "--listen", listen,
              "--ready-fd", "3", "--threads", "1", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char line[300] = "";
    struct pollfd pf = {fds[0], POLLIN, 0};
    ssize_t n = poll(&pf, 1, 20000) == 1 ? read(fds[0], line, sizeof line - 1) : -1;
    close(fds[0]);
    if (n <= 0 || strncmp(line, "ready ", 6) != 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
#else
    (void)model;
    (void)sock;
    PM_SKIP("pm-shardd was not built");
#endif
}

static const char stall_stream[] =
    "{\"prompt\":[1,100,200,300],\"max_tokens\":8,\"temperature\":0,\"stream\":true}";

/* A shard that stops answering under a stream (its daemon SIGSTOPped),
 * with the idle timeout (1 s) shorter than the shard's deadline (3 s).
 * spawn: the engine abandons the stopped daemon at the deadline and
 * respawns it; the stream, kept open by keep-alive comments, completes
 * with all 8 tokens and [DONE]. unix: a daemon the engine cannot replace;
 * the stream carries the error event and [DONE], and a non-streamed
 * request gets its error answer. */
static int case_shard_stall(const char *kind)
{
    int spawn = strcmp(kind, "spawn") == 0;
    char sock[128], place[300], model[128];
    snprintf(sock, sizeof sock, "/tmp/pm_server_stall_%ld.sock", (long)getpid());
    own_model_name(tiny, "stall", model, sizeof model);
    pid_t d = -1;
    if (spawn) {
        snprintf(place, sizeof place, "0-0@local,1-1@spawn?timeout=3000");
    } else {
        d = start_shardd(model, sock);
        REQUIRE(d > 0);
        snprintf(place, sizeof place, "0-0@local,1-1@unix:%s?timeout=3000", sock);
    }
    const char *extra[] = {"--placement", place, "--timeout", "1", NULL};
    srv_proc p;
    start(&p, model, extra);
    if (spawn)
        d = daemon_pid(model);
    REQUIRE(d > 0);
    REQUIRE(kill(d, SIGSTOP) == 0);
    REQUIRE(pm_wait_stopped((long)d, 2000) == 0);
    hc_resp r;
    REQUIRE(hc_request(p.port, "POST", "/v1/completions", stall_stream, &r, 60000) == 0);
    CHECK_INT_EQ(r.status, 200);
    CHECK(r.body_len >= 14 && strcmp(r.body + r.body_len - 14, "data: [DONE]\n\n") == 0);
    CHECK(strstr(r.body, ": keep-alive\n\n") != NULL);
    json_t *ev[64];
    int n = 0;
    CHECK_INT_EQ(sse_events(&r, ev, 64, &n), 0);
    if (spawn) {
        char got[4096];
        const char *finish = NULL;
        stream_text(ev, n, 0, got, sizeof got, &finish);
        CHECK_STR_EQ(finish ? finish : "", "length");
    } else {
        CHECK(n >= 1 && json_object_get(ev[n - 1], "error") != NULL);
    }
    free_events(ev, n);
    hc_free(&r);
    if (!spawn) {
        REQUIRE(hc_request(p.port, "POST", "/v1/completions",
                           "{\"prompt\":[1,100,200,300],\"max_tokens\":8,\"temperature\":0}", &r,
                           60000) == 0);
        CHECK(r.status >= 500);
        json_t *j = body_json(&r);
        CHECK(j && json_object_get(j, "error") != NULL);
        json_decref(j);
        hc_free(&r);
    }
    kill(d, SIGCONT);
    stop_ok(&p);
    if (!spawn) {
        kill(d, SIGTERM);
        waitpid(d, NULL, 0);
        unlink(sock);
    }
    unlink(model);
    return pm_check_result();
}

static int case_shard_stall_spawn(void)
{
    return case_shard_stall("spawn");
}

static int case_shard_stall_unix(void)
{
    return case_shard_stall("unix");
}

static void raw_exchange(int port, const char *req, size_t n, hc_resp *r);

/* Copies src to dst byte for byte. 0 or -1. */
static int copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    char buf[65536];
    size_t n;
    int rc = in && out ? 0 : -1;
    while (rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0)
        rc = fwrite(buf, 1, n, out) == n ? 0 : -1;
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        rc = -1;
    return rc;
}

/* --no-mmap: the model file truncated to nothing under the running
 * server (which would fault a mapped model with SIGBUS) changes nothing:
 * the same greedy text before and after. */
static int case_no_mmap(void)
{
    char model[128];
    snprintf(model, sizeof model, "/tmp/pm_server_nommap_%ld.gguf", (long)getpid());
    REQUIRE(copy_file(tiny, model) == 0);
    const char *extra[] = {"--no-mmap", NULL};
    srv_proc p;
    start(&p, model, extra);
    const char *body = "{\"prompt\":[1,100,200,300],\"max_tokens\":16,\"temperature\":0}";
    hc_resp r;
    REQUIRE(hc_request(p.port, "POST", "/v1/completions", body, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    json_t *j = body_json(&r);
    char before[4096];
    snprintf(before, sizeof before, "%s", jstr(choice0(j), "text") ? jstr(choice0(j), "text") : "");
    json_decref(j);
    hc_free(&r);
    REQUIRE(truncate(model, 0) == 0);
    REQUIRE(hc_request(p.port, "POST", "/v1/completions", body, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    j = body_json(&r);
    CHECK_STR_EQ(jstr(choice0(j), "text"), before);
    json_decref(j);
    hc_free(&r);
    stop_ok(&p);
    unlink(model);
    return pm_check_result();
}

/* --api-key: requests without "Authorization: Bearer KEY", or with
 * another key, get 401 with WWW-Authenticate: Bearer and the OpenAI
 * error shape; with it they are served; /health needs no key. */
static int case_api_key(void)
{
    const char *key = "k3y-0123456789abcdef";
    const char *extra[] = {"--api-key", key, NULL};
    srv_proc p;
    start(&p, tiny, extra);
    hc_resp r;
    REQUIRE(hc_request(p.port, "GET", "/v1/models", NULL, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 401);
    char h[64];
    CHECK_STR_EQ(hc_header(&r, "WWW-Authenticate", h, sizeof h), "Bearer");
    json_t *j = body_json(&r);
    CHECK_STR_EQ(jstr(json_object_get(j, "error"), "code"), "invalid_api_key");
    json_decref(j);
    hc_free(&r);
    static const char *const heads[] = {"Bearer k3y-0123456789abcdeX", "Bearer k3y-0123456789abcde",
                                        "Basic k3y-0123456789abcdef", "Bearer k3y-0123456789abcdef"};
    static const int want[] = {401, 401, 401, 200};
    for (int i = 0; i < 4; i++) {
        char req[300];
        int n = snprintf(req, sizeof req, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\n"
                         "Connection: close\r\n\r\n", heads[i]);
        raw_exchange(p.port, req, (size_t)n, &r);
        CHECK_INT_EQ(r.status, want[i]);
        hc_free(&r);
    }
    REQUIRE(hc_request(p.port, "GET", "/health", NULL, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    hc_free(&r);
    stop_ok(&p);
    return pm_check_result();
}

/* --placement: the two layers of the tiny model on two shards give the
 * monolithic model's greedy text. */
static int case_placement(void)
{
    const char *body = "{\"prompt\":[1,100,200,300],\"max_tokens\":20,\"temperature\":0}";
    char mono[4096], split[4096];
    long long d, a;
    int port = 0;
    greedy_text(NULL, body, mono, sizeof mono, &d, &a, &port, NULL);
    const char *extra[] = {"--placement", "0-0@local,1-1@local", NULL};
    greedy_text(extra, body, split, sizeof split, &d, &a, &port, NULL);
    CHECK_STR_EQ(split, mono);
    /* Mixed: one local shard and one spawned shard daemon (pm-shardd,
     * found beside the engine's build), reaped when the server stops. */
    char model[128];
    own_model_name(tiny, "placement", model, sizeof model);
    const char *mixed[] = {"--placement", "0-0@local,1-1@spawn", "--workers", "2", NULL};
    srv_proc p;
    start(&p, model, mixed);
    hc_resp r;
    REQUIRE(hc_request(p.port, "POST", "/v1/completions", body, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    json_t *j = body_json(&r);
    CHECK_STR_EQ(jstr(choice0(j), "text") ? jstr(choice0(j), "text") : "(none)", mono);
    json_decref(j);
    hc_free(&r);
    CHECK_INT_EQ(count_daemons(model), 2); /* one daemon per worker session */
    stop_ok(&p);
    CHECK_INT_EQ(count_daemons(model), 0); /* reaped at shutdown */
    unlink(model);
    return pm_check_result();
}

/* The first printable two-byte ASCII window at or after 1, or -1. */
static int ascii_pair(const char *t)
{
    for (int i = 1; t[i] && t[i + 1]; i++)
        if (t[i] > ' ' && t[i] < 127 && t[i + 1] > ' ' && t[i + 1] < 127)
            return i;
    return -1;
}

static int case_stop(void)
{
    srv_proc p;
    start(&p, tiny, NULL);
    hc_resp r;
    REQUIRE(hc_request(p.port, "POST", "/v1/completions",
                       "{\"prompt\":[1,100,200,300],\"max_tokens\":24,\"temperature\":0}", &r, TIMEOUT) == 0);
    json_t *j = body_json(&r);
    char full[4096];
    const char *text = jstr(choice0(j), "text");
    REQUIRE(text != NULL);
    snprintf(full, sizeof full, "%s", text);
    json_decref(j);
    hc_free(&r);
    int at = ascii_pair(full);
    if (at < 0)
        PM_SKIP("the reference output has no ASCII pair to stop on");
    char stop[3] = {full[at], full[at + 1], 0};
    char want[4096];
    snprintf(want, sizeof want, "%.*s", (int)(strstr(full, stop) - full), full);
    for (int stream = 0; stream <= 1; stream++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"prompt\":[1,100,200,300],\"max_tokens\":24,\"temperature\":0,\"stop\":[\"%s\"],"
                 "\"stream\":%s}",
                 stop, stream ? "true" : "false");
        REQUIRE(hc_request(p.port, "POST", "/v1/completions", body, &r, TIMEOUT) == 0);
        CHECK_INT_EQ(r.status, 200);
        char got[4096];
        const char *finish = NULL;
        json_t *ev[256];
        int n = 0;
        if (stream) {
            REQUIRE(sse_events(&r, ev, 256, &n) == 0);
            stream_text(ev, n, 0, got, sizeof got, &finish);
            CHECK_STR_EQ(got, want);
            CHECK_STR_EQ(finish, "stop");
            free_events(ev, n);
        } else {
            j = body_json(&r);
            CHECK_STR_EQ(jstr(choice0(j), "text"), want);
            CHECK_STR_EQ(jstr(choice0(j), "finish_reason"), "stop");
            json_decref(j);
        }
        hc_free(&r);
    }
    stop_ok(&p);
    return pm_check_result();
}

/* Keep-alive: several requests on one connection, one after another and
 * pipelined (the second request is already waiting while the first one
 * generates, which the disconnect probe must not take for a hang-up). */
static int case_keepalive(void)
{
    srv_proc p;
    start(&p, tiny, NULL);
    int fd = hc_connect(p.port);
    REQUIRE(fd >= 0);
    const char *body = "{\"prompt\":[1,100,200,300],\"max_tokens\":6,\"temperature\":0}";
    char req[512];
    int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    char first[4096] = "";
    long long last_id = 0;
    for (int i = 0; i < 3; i++) {
        hc_resp r;
        REQUIRE(hc_send_all(fd, req, (size_t)n, TIMEOUT) == 0);
        REQUIRE(hc_read_one(fd, &r, TIMEOUT) == 0);
        CHECK_INT_EQ(r.status, 200);
        CHECK(request_id(&r) > last_id);
        last_id = request_id(&r);
        json_t *j = body_json(&r);
        if (i == 0)
            snprintf(first, sizeof first, "%s", jstr(choice0(j), "text"));
        else
            CHECK_STR_EQ(jstr(choice0(j), "text"), first);
        json_decref(j);
        hc_free(&r);
    }
    char two[1024];
    memcpy(two, req, (size_t)n);
    memcpy(two + n, req, (size_t)n);
    REQUIRE(hc_send_all(fd, two, 2 * (size_t)n, TIMEOUT) == 0);
    for (int i = 0; i < 2; i++) {
        hc_resp r;
        REQUIRE(hc_read_one(fd, &r, TIMEOUT) == 0);
        CHECK_INT_EQ(r.status, 200);
        json_t *j = body_json(&r);
        CHECK_STR_EQ(jstr(choice0(j), "text"), first);
        json_decref(j);
        hc_free(&r);
    }
    close(fd);
    CHECK(srv_metric(p.port, "phasemark_requests_cancelled_total") == 0);
    CHECK(srv_metric(p.port, "phasemark_generations_total") == 5);
    stop_ok(&p);
    return pm_check_result();
}

/* ---- the error table ------------------------------------------------------- */

static void raw_exchange(int port, const char *req, size_t n, hc_resp *r)
{
    int fd = hc_connect(port);
    REQUIRE(fd >= 0);
    char *raw = NULL;
    memset(r, 0, sizeof *r);
    if (hc_send_all(fd, req, n, TIMEOUT) == 0) {
        ssize_t got = hc_read_all(fd, &raw, TIMEOUT);
        if (got >= 0)
            hc_parse(raw, (size_t)got, r);
    }
    free(raw);
    close(fd);
}

static int case_errors(void)
{
    srv_proc p;
    const char *extra[] = {"--max-body", "2048", "--ctx", "64", "--max-tokens", "32", NULL};
    start(&p, tiny, extra);
    static const struct { const char *method, *path, *body; int status; const char *code; } table[] = {
        {"POST", "/v1/completions", "{\"prompt\": \"a\",", 400, NULL},
        {"POST", "/v1/completions", "not json", 400, NULL},
        {"POST", "/v1/completions", "", 400, NULL},
        {"POST", "/v1/completions", "[]", 400, NULL},
        {"POST", "/v1/completions", "{\"prompt\":7}", 400, NULL},
        {"POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":\"3\"}", 400, NULL},
        {"POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":33}", 400, NULL},
        {"POST", "/v1/completions", "{\"prompt\":\"a\",\"temperature\":3}", 400, NULL},
        {"POST", "/v1/completions", "{\"prompt\":[512]}", 400, NULL},
        {"POST", "/v1/chat/completions", "{\"messages\":\"hi\"}", 400, NULL},
        {"POST", "/v1/completions", "{\"prompt\":\"a\",\"model\":\"nope\"}", 404, "model_not_found"},
        {"POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"model\":\"x\"}",
         404, "model_not_found"},
        {"GET", "/v2/anything", NULL, 404, NULL},
        {"POST", "/v1/completion", "{}", 404, NULL},
        {"GET", "/v1/completions", NULL, 405, "method_not_allowed"},
        {"PUT", "/v1/chat/completions", "{}", 405, "method_not_allowed"},
        {"POST", "/health", "{}", 405, "method_not_allowed"},
        {"DELETE", "/v1/models", NULL, 405, "method_not_allowed"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        hc_resp r;
        REQUIRE(hc_request(p.port, table[i].method, table[i].path, table[i].body, &r, TIMEOUT) == 0);
        check_error(&r, table[i].status, table[i].body ? table[i].body : table[i].path);
        json_t *j = body_json(&r);
        if (table[i].code)
            CHECK_STR_EQ(jstr(json_object_get(j, "error"), "code"), table[i].code);
        json_decref(j);
        char allow[64];
        if (table[i].status == 405)
            CHECK(hc_header(&r, "Allow", allow, sizeof allow) != NULL);
        hc_free(&r);
    }

    /* A prompt longer than the context (64 positions): 400 before queueing. */
    char big[1024];
    size_t o = (size_t)snprintf(big, sizeof big, "{\"prompt\":[");
    for (int i = 0; i < 80; i++)
        o += (size_t)snprintf(big + o, sizeof big - o, "%s5", i ? "," : "");
    snprintf(big + o, sizeof big - o, "]}");
    hc_resp r;
    REQUIRE(hc_request(p.port, "POST", "/v1/completions", big, &r, TIMEOUT) == 0);
    check_error(&r, 400, "prompt over the context");
    hc_free(&r);
    char text[300];
    memset(text, 'w', 200);
    text[200] = 0;
    snprintf(big, sizeof big, "{\"prompt\":\"%s\"}", text); /* 200 bytes: ~200 tokens > 63 */
    REQUIRE(hc_request(p.port, "POST", "/v1/completions", big, &r, TIMEOUT) == 0);
    check_error(&r, 400, "text prompt over the context");
    hc_free(&r);

    /* 413: a declared length over the limit is refused before the body. */
    const char *decl = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999\r\n\r\n";
    raw_exchange(p.port, decl, strlen(decl), &r);
    check_error(&r, 413, "declared 413");
    hc_free(&r);
    /* 413: a chunked body that grows past the limit. */
    char chunked[8192];
    o = (size_t)snprintf(chunked, sizeof chunked,
                         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 5; i++) {
        o += (size_t)snprintf(chunked + o, sizeof chunked - o, "400\r\n");
        memset(chunked + o, ' ', 1024);
        o += 1024;
        o += (size_t)snprintf(chunked + o, sizeof chunked - o, "\r\n");
    }
    o += (size_t)snprintf(chunked + o, sizeof chunked - o, "0\r\n\r\n");
    raw_exchange(p.port, chunked, o, &r);
    check_error(&r, 413, "chunked 413");
    hc_free(&r);

    /* After all that the server is up and answers normally. */
    REQUIRE(hc_request(p.port, "POST", "/v1/completions", "{\"prompt\":[1,2],\"max_tokens\":2}", &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    hc_free(&r);
    CHECK(srv_metric(p.port, "phasemark_http_requests_total{code=\"400\"}") == 12);
    CHECK(srv_metric(p.port, "phasemark_http_requests_total{code=\"404\"}") == 4);
    CHECK(srv_metric(p.port, "phasemark_http_requests_total{code=\"405\"}") == 4);
    CHECK(srv_metric(p.port, "phasemark_http_requests_total{code=\"413\"}") == 2);
    stop_ok(&p);
    return pm_check_result();
}

static int case_slow_client(void)
{
    srv_proc p;
    /* Idle timeout 3 s, body deadline 1 s: the trickle below is never idle
     * for long but outlives the deadline. */
    const char *extra[] = {"--timeout", "3", "--body-timeout", "1", NULL};
    start(&p, tiny, extra);
    /* A body still trickling in after the body deadline: the server
     * hangs up (libmicrohttpd cannot answer mid-body) and counts it. */
    int fd = hc_connect(p.port);
    REQUIRE(fd >= 0);
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n{\"prompt\":";
    REQUIRE(hc_send_all(fd, head, strlen(head), TIMEOUT) == 0);
    for (int i = 0; i < 6; i++) { /* 1.8 s in all, past the 1 s deadline */
        hc_sleep_ms(300);
        if (hc_send_all(fd, " ", 1, TIMEOUT) != 0)
            break; /* already closed */
    }
    char *raw = NULL;
    ssize_t n = hc_read_all(fd, &raw, 20000);
    CHECK(n == 0); /* closed, nothing sent */
    free(raw);
    close(fd);
    CHECK(srv_metric(p.port, "phasemark_request_timeouts_total") == 1);
    hc_resp r;

    /* Headers that never finish: the connection is closed after the idle
     * timeout, with nothing (or an error) sent. */
    fd = hc_connect(p.port);
    REQUIRE(fd >= 0);
    REQUIRE(hc_send_all(fd, "POST /v1/compl", 14, TIMEOUT) == 0);
    long long t0 = hc_now_ms();
    n = hc_read_all(fd, &raw, 20000);
    CHECK(n >= 0); /* closed by the server, not by our 20 s deadline */
    CHECK(hc_now_ms() - t0 < 15000);
    free(raw);
    close(fd);

    REQUIRE(hc_request(p.port, "GET", "/health", NULL, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    hc_free(&r);
    stop_ok(&p);
    return pm_check_result();
}

/* ---- concurrency ----------------------------------------------------------- */

/* Sends a request on a new connection and returns the socket without
 * reading the answer. */
static int send_only(int port, const char *path, const char *body)
{
    int fd = hc_connect(port);
    REQUIRE(fd >= 0);
    char head[256];
    int n = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n", path,
                     strlen(body));
    REQUIRE(hc_send_all(fd, head, (size_t)n, TIMEOUT) == 0 && hc_send_all(fd, body, strlen(body), TIMEOUT) == 0);
    return fd;
}

static void read_response(int fd, hc_resp *r)
{
    char *raw = NULL;
    memset(r, 0, sizeof *r);
    ssize_t n = hc_read_all(fd, &raw, TIMEOUT);
    if (n >= 0)
        hc_parse(raw, (size_t)n, r);
    free(raw);
    close(fd);
}

#define LONG_BODY "{\"prompt\":" SLOW_PROMPT ",\"max_tokens\":4000,\"temperature\":0%s}"

static int case_queue_full(void)
{
    srv_proc p;
    const char *extra[] = {"--workers", "1", "--queue", "1", "--ctx", "4096", "--max-tokens", "4000",
                           "--retry-after", "3", NULL};
    start(&p, slow, extra);
    char body[256];
    snprintf(body, sizeof body, LONG_BODY, ",\"stream\":true");
    int a = send_only(p.port, "/v1/completions", body);
    REQUIRE(srv_wait_metric(p.port, "phasemark_requests_running", 1, TIMEOUT) == 0);
    snprintf(body, sizeof body, LONG_BODY, "");
    int b = send_only(p.port, "/v1/completions", body);
    REQUIRE(srv_wait_metric(p.port, "phasemark_queue_depth", 1, TIMEOUT) == 0);
    hc_resp r;
    REQUIRE(hc_request(p.port, "POST", "/v1/completions", "{\"prompt\":[1,2],\"max_tokens\":2}", &r, TIMEOUT) == 0);
    check_error(&r, 503, "queue full");
    char ra[16];
    CHECK_STR_EQ(hc_header(&r, "Retry-After", ra, sizeof ra), "3");
    json_t *j = body_json(&r);
    CHECK_STR_EQ(jstr(json_object_get(j, "error"), "code"), "overloaded");
    json_decref(j);
    hc_free(&r);
    CHECK(srv_metric(p.port, "phasemark_requests_rejected_total") == 1);
    /* Both long requests go away; both generations are cancelled. */
    close(a);
    close(b);
    CHECK(srv_wait_metric(p.port, "phasemark_requests_cancelled_total", 2, TIMEOUT) == 0);
    CHECK(srv_metric(p.port, "phasemark_generations_total") == 0);
    REQUIRE(hc_request(p.port, "POST", "/v1/completions", "{\"prompt\":[1,2],\"max_tokens\":2}", &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    hc_free(&r);
    stop_ok(&p);
    return pm_check_result();
}

/* ---- slow headers and admission ------------------------------------------ */

/* Connects to 127.0.0.1:port from the loopback address src (all of
 * 127/8 is local), so that one test can be several clients. */
static int connect_from(int port, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    REQUIRE(inet_pton(AF_INET, src, &a.sin_addr) == 1);
    REQUIRE(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    a.sin_port = htons((uint16_t)port);
    REQUIRE(inet_pton(AF_INET, "127.0.0.1", &a.sin_addr) == 1);
    REQUIRE(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    return fd;
}

/* Sends a completion request from src on a new connection; returns the
 * socket without reading the answer. */
static int send_from(int port, const char *src, const char *body)
{
    int fd = connect_from(port, src);
    char head[256];
    int n = snprintf(head, sizeof head,
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n",
                     strlen(body));
    REQUIRE(hc_send_all(fd, head, (size_t)n, TIMEOUT) == 0 && hc_send_all(fd, body, strlen(body), TIMEOUT) == 0);
    return fd;
}

/* 1 when the server closes fd (end-of-file or reset, nothing sent)
 * within timeout_ms. */
static int closed_within(int fd, int timeout_ms)
{
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, timeout_ms) != 1)
        return 0;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

/* 1 when fd has neither data nor end-of-file waiting. */
static int still_open(int fd)
{
    struct pollfd pf = {fd, POLLIN, 0};
    return poll(&pf, 1, 0) == 0;
}

/* Threads of process pid whose nice value is nice (Linux /proc). */
static int threads_at_nice(pid_t pid, int nice)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/task", (long)pid);
    DIR *d = opendir(path);
    REQUIRE(d != NULL);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char sp[128], buf[1024];
        snprintf(sp, sizeof sp, "%s/%.32s/stat", path, e->d_name);
        FILE *f = fopen(sp, "r");
        if (!f)
            continue; /* the thread just ended */
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        const char *q = strrchr(buf, ')'); /* after the name: field 3 on */
        int field = 2;
        long v = 0;
        for (; q && *q && field < 19; q++)
            if (*q == ' ' && ++field == 19)
                v = strtol(q + 1, NULL, 10);
        n += field == 19 && v == nice;
    }
    closedir(d);
    return n;
}

#define CUT_RESERVE "phasemark_connections_cut_total{reason=\"reserve\"}"
#define CUT_TIMEOUT "phasemark_connections_cut_total{reason=\"header_timeout\"}"
enum { SLOW_N = 14 };

static void completion_ok(int port)
{
    hc_resp r;
    REQUIRE(hc_request(port, "POST", "/v1/completions", "{\"prompt\":[1,2],\"max_tokens\":2}", &r, 10000) == 0);
    CHECK_INT_EQ(r.status, 200);
    hc_free(&r);
}

static int case_slowloris(void)
{
    srv_proc p;
    /* 16 slots, 4 in reserve: at most 12 connections may wait for
     * headers, for 3 s each; the idle timeout is far away, so only the
     * guard cuts anything here. */
    const char *extra[] = {"--max-connections", "16", "--reserve", "4", "--header-timeout", "3",
                           "--timeout", "60", NULL};
    start(&p, tiny, extra);
    int fd[SLOW_N];
    for (int i = 0; i < SLOW_N; i++) { /* a request line, then nothing yet */
        fd[i] = hc_connect(p.port);
        REQUIRE(fd[i] >= 0);
        REQUIRE(hc_send_all(fd[i], "POST /v1/completions HTTP/1.1\r\n", 31, TIMEOUT) == 0);
    }
    /* The 13th and 14th cut the two that waited longest, and only them. */
    CHECK(closed_within(fd[0], TIMEOUT));
    CHECK(closed_within(fd[1], TIMEOUT));
    for (int i = 2; i < SLOW_N; i++)
        CHECK(still_open(fd[i]));
    /* A prompt client still gets in (cutting the next slow one) and is
     * answered; once it is gone, 11 wait, and the scrape cuts nobody. */
    completion_ok(p.port);
    CHECK(closed_within(fd[2], TIMEOUT));
    for (int i = 3; i < SLOW_N; i++)
        CHECK(still_open(fd[i]));
    CHECK(srv_metric(p.port, CUT_RESERVE) == 3);
    CHECK(srv_metric(p.port, CUT_TIMEOUT) == 0);
    /* The rest trickle a header line every 250 ms, never idle, never
     * done: each is cut at the header deadline. Prompt clients are served
     * meanwhile. */
    int open_n = SLOW_N - 3, rounds = 0;
    long long t0 = hc_now_ms();
    while (open_n > 0 && hc_now_ms() - t0 < 20000) {
        hc_sleep_ms(250);
        if (++rounds % 4 == 0)
            completion_ok(p.port);
        for (int i = 3; i < SLOW_N; i++) {
            if (fd[i] < 0)
                continue;
            if (closed_within(fd[i], 0)) {
                close(fd[i]);
                fd[i] = -1;
                open_n--;
                continue;
            }
            (void)!hc_send_all(fd[i], "X-Slow: 1\r\n", 11, 1000);
        }
    }
    CHECK_INT_EQ(open_n, 0);
    CHECK(srv_metric(p.port, CUT_TIMEOUT) == SLOW_N - 3);
    CHECK(srv_metric(p.port, CUT_RESERVE) == 3);
    for (int i = 0; i < 3; i++)
        close(fd[i]);
    completion_ok(p.port);
    stop_ok(&p);
    return pm_check_result();
}

/* A full queue sheds fairly and cheaply: the client holding it all is
 * refused before its body is parsed; another client's request gets in by
 * shedding the first client's newest (a stream, answered with a real
 * 503); everything admitted is answered 200. */
static int case_admission(void)
{
    srv_proc p;
    const char *extra[] = {"--workers", "1", "--queue", "2", "--ctx", "4096", "--max-tokens", "4000",
                           "--retry-after", "7", NULL};
    start(&p, slow, extra);
    const char *brief = "{\"prompt\":[1,2],\"max_tokens\":2,\"temperature\":0}";
    const char *brief_stream = "{\"prompt\":[1,2],\"max_tokens\":2,\"temperature\":0,\"stream\":true}";
    char body[256];
    snprintf(body, sizeof body, LONG_BODY, ",\"stream\":true");
    int a = send_from(p.port, "127.0.0.1", body); /* occupies the worker */
    REQUIRE(srv_wait_metric(p.port, "phasemark_requests_running", 1, TIMEOUT) == 0);
    int b1 = send_from(p.port, "127.0.0.1", brief);
    REQUIRE(srv_wait_metric(p.port, "phasemark_queue_depth", 1, TIMEOUT) == 0);
    int b2 = send_from(p.port, "127.0.0.1", brief_stream);
    REQUIRE(srv_wait_metric(p.port, "phasemark_queue_depth", 2, TIMEOUT) == 0);

    /* Full, all of it 127.0.0.1's: refused before parsing (this body is
     * not JSON, yet the answer is 503, not 400), on a connection that
     * stays open and whose thread now yields to generation (--http-nice
     * 19; no thread was lowered before). */
    hc_resp r;
    char v[32];
    CHECK_INT_EQ(threads_at_nice(p.pid, 19), 0);
    int k = connect_from(p.port, "127.0.0.1");
    const char *raw = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\nnot json";
    REQUIRE(hc_send_all(k, raw, strlen(raw), TIMEOUT) == 0);
    REQUIRE(hc_read_one(k, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(threads_at_nice(p.pid, 19), 1);
    close(k);
    check_error(&r, 503, "queue full, same client");
    CHECK_STR_EQ(hc_header(&r, "Retry-After", v, sizeof v), "7");
    json_t *j = body_json(&r);
    CHECK_STR_EQ(jstr(json_object_get(j, "error"), "code"), "overloaded");
    json_decref(j);
    hc_free(&r);

    /* 127.0.0.2 holds none: 127.0.0.1's newest, the queued stream, makes
     * room and gets a whole 503 (its 200 would only go out once it ran). */
    int c = send_from(p.port, "127.0.0.2", brief);
    read_response(b2, &r);
    check_error(&r, 503, "shed stream");
    CHECK_INT_EQ(r.chunked, 0);
    CHECK_STR_EQ(hc_header(&r, "Retry-After", v, sizeof v), "7");
    j = body_json(&r);
    CHECK_STR_EQ(jstr(json_object_get(j, "error"), "code"), "overloaded");
    json_decref(j);
    hc_free(&r);
    /* One each now: equals do not shed each other. */
    read_response(send_from(p.port, "127.0.0.2", brief), &r);
    check_error(&r, 503, "queue full, one each");
    hc_free(&r);
    CHECK(srv_metric(p.port, "phasemark_requests_rejected_total") == 3);
    CHECK(srv_metric(p.port, "phasemark_queue_depth") == 2);

    /* The long stream leaves; both admitted requests complete, in order. */
    close(a);
    int admitted[] = {b1, c};
    for (int i = 0; i < 2; i++) {
        read_response(admitted[i], &r);
        CHECK_INT_EQ(r.status, 200);
        j = body_json(&r);
        CHECK(jint(json_object_get(j, "usage"), "completion_tokens") == 2);
        json_decref(j);
        hc_free(&r);
    }
    CHECK(srv_metric(p.port, "phasemark_requests_cancelled_total") == 1);
    CHECK(srv_metric(p.port, "phasemark_generations_total") == 2);
    CHECK(srv_metric(p.port, "phasemark_http_requests_total{code=\"503\"}") == 3);
    stop_ok(&p);
    return pm_check_result();
}

/* Sends a completion request on fd, kept alive. */
static void send_on(int fd, const char *body)
{
    char head[256];
    int n = snprintf(head, sizeof head, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n",
                     strlen(body));
    REQUIRE(hc_send_all(fd, head, (size_t)n, TIMEOUT) == 0 && hc_send_all(fd, body, strlen(body), TIMEOUT) == 0);
}

/* 1 when nothing (no byte, no end-of-file, no reset) arrives on fd for
 * ms milliseconds. */
static int silent_for(int fd, int ms)
{
    struct pollfd pf = {fd, POLLIN, 0};
    return poll(&pf, 1, ms) == 0;
}

static void check_brief_200(hc_resp *r, const char *what)
{
    CHECK_INT_EQ(r->status, 200);
    json_t *j = body_json(r);
    if (jint(json_object_get(j, "usage"), "completion_tokens") != 2)
        fprintf(stderr, "%s: not 2 tokens\n", what);
    CHECK(jint(json_object_get(j, "usage"), "completion_tokens") == 2);
    json_decref(j);
}

enum { BACKLOG_EXTRA = 3 };

/* Connections beyond --max-connections wait in the listen backlog and
 * are served once a slot frees: never accepted and closed, never reset.
 * Four slots hold a long stream and three queued requests; three more
 * clients connect and send theirs, get nothing (no byte, no close) while
 * the slots are full, and each gets its 200 once the stream's client
 * leaves. */
static int case_backlog(void)
{
    srv_proc p;
    const char *extra[] = {"--max-connections", "4", "--workers", "1", "--queue", "4", "--ctx", "4096",
                           "--max-tokens", "4000", NULL};
    start(&p, slow, extra);
    const char *brief = "{\"prompt\":[1,2],\"max_tokens\":2,\"temperature\":0}";
    char body[256];
    snprintf(body, sizeof body, LONG_BODY, ",\"stream\":true");
    int a = send_from(p.port, "127.0.0.1", body);
    REQUIRE(srv_wait_metric(p.port, "phasemark_requests_running", 1, TIMEOUT) == 0);
    int b[3];
    b[0] = send_from(p.port, "127.0.0.1", brief);
    REQUIRE(srv_wait_metric(p.port, "phasemark_queue_depth", 1, TIMEOUT) == 0);
    b[1] = send_from(p.port, "127.0.0.1", brief);
    REQUIRE(srv_wait_metric(p.port, "phasemark_queue_depth", 2, TIMEOUT) == 0);
    /* The fourth slot: after this no scrape gets in either. */
    b[2] = send_from(p.port, "127.0.0.1", brief);
    int e[BACKLOG_EXTRA];
    for (int i = 0; i < BACKLOG_EXTRA; i++)
        e[i] = send_from(p.port, "127.0.0.1", brief);
    /* Accepted and closed at once, they would see end-of-file or a reset
     * within milliseconds. */
    for (int i = 0; i < BACKLOG_EXTRA; i++)
        CHECK(silent_for(e[i], i == 0 ? 1000 : 0));
    close(a);
    hc_resp r;
    for (int i = 0; i < 3; i++) {
        read_response(b[i], &r);
        check_brief_200(&r, "queued");
        hc_free(&r);
    }
    for (int i = 0; i < BACKLOG_EXTRA; i++) {
        read_response(e[i], &r);
        check_brief_200(&r, "from the backlog");
        hc_free(&r);
    }
    CHECK(srv_metric(p.port, "phasemark_generations_total") == 3 + BACKLOG_EXTRA);
    CHECK(srv_metric(p.port, "phasemark_requests_cancelled_total") == 1);
    CHECK(srv_metric(p.port, "phasemark_http_requests_total{code=\"503\"}") == 0);
    CHECK(srv_metric(p.port, CUT_RESERVE) == 0);
    CHECK(srv_metric(p.port, CUT_TIMEOUT) == 0);
    stop_ok(&p);
    return pm_check_result();
}

/* A refused connection that retries before Retry-After has passed is
 * held for the rest of it, then admitted like any other request; another
 * connection is not held. The long stream fills the worker and the one
 * queue place; k is refused, sends again at once, is counted as held and
 * has heard nothing; a fresh connection meanwhile is refused (not held:
 * still one held, two refused). Once the stream's client leaves, k's
 * held request is answered 200, no sooner than Retry-After after k first
 * sent (a bound no slowness of the machine can break). */
static int case_retry_hold(void)
{
    srv_proc p;
    const char *extra[] = {"--workers", "1", "--queue", "1", "--ctx", "4096", "--max-tokens", "4000",
                           "--retry-after", "4", NULL};
    start(&p, slow, extra);
    const char *brief = "{\"prompt\":[1,2],\"max_tokens\":2,\"temperature\":0}";
    char body[256];
    snprintf(body, sizeof body, LONG_BODY, ",\"stream\":true");
    int a = send_from(p.port, "127.0.0.1", body);
    REQUIRE(srv_wait_metric(p.port, "phasemark_requests_running", 1, TIMEOUT) == 0);
    int q = send_from(p.port, "127.0.0.1", brief);
    REQUIRE(srv_wait_metric(p.port, "phasemark_queue_depth", 1, TIMEOUT) == 0);

    hc_resp r;
    char v[32];
    int k = connect_from(p.port, "127.0.0.1");
    long long t_first = hc_now_ms();
    send_on(k, brief);
    REQUIRE(hc_read_one(k, &r, TIMEOUT) == 0);
    check_error(&r, 503, "queue full");
    CHECK_STR_EQ(hc_header(&r, "Retry-After", v, sizeof v), "4");
    hc_free(&r);
    send_on(k, brief); /* at once, ignoring Retry-After */
    CHECK(srv_wait_metric(p.port, "phasemark_requests_held_total", 1, TIMEOUT) == 0);
    CHECK(silent_for(k, 0));
    read_response(send_from(p.port, "127.0.0.1", brief), &r);
    check_error(&r, 503, "fresh connection, not held");
    hc_free(&r);
    CHECK(srv_metric(p.port, "phasemark_requests_rejected_total") == 2);
    CHECK(srv_metric(p.port, "phasemark_requests_held_total") == 1);

    close(a);
    read_response(q, &r);
    check_brief_200(&r, "queued");
    hc_free(&r);
    REQUIRE(hc_read_one(k, &r, TIMEOUT) == 0);
    long long waited = hc_now_ms() - t_first;
    check_brief_200(&r, "held");
    hc_free(&r);
    if (waited < 4000)
        fprintf(stderr, "held request answered after %lld ms\n", waited);
    CHECK(waited >= 4000);
    close(k);
    CHECK(srv_metric(p.port, "phasemark_requests_rejected_total") == 2);
    CHECK(srv_metric(p.port, "phasemark_requests_held_total") == 1);
    CHECK(srv_metric(p.port, "phasemark_generations_total") == 2);
    stop_ok(&p);
    return pm_check_result();
}

/* Above 896 slots libmicrohttpd's select() loop could meet descriptors
 * past FD_SETSIZE, so the server keeps its poll() loop: it starts and
 * serves there too. */
static int case_poll_limit(void)
{
    srv_proc p;
    const char *extra[] = {"--max-connections", "1000", NULL};
    start(&p, tiny, extra);
    completion_ok(p.port);
    hc_resp r;
    REQUIRE(hc_request(p.port, "GET", "/health", NULL, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    hc_free(&r);
    stop_ok(&p);
    return pm_check_result();
}

static int case_disconnect(void)
{
    srv_proc p;
    const char *extra[] = {"--ctx", "4096", "--max-tokens", "4000", NULL};
    start(&p, slow, extra);
    char body[256];
    /* Non-streamed: the client leaves while the worker generates. */
    snprintf(body, sizeof body, LONG_BODY, "");
    int fd = send_only(p.port, "/v1/completions", body);
    REQUIRE(srv_wait_metric(p.port, "phasemark_requests_running", 1, TIMEOUT) == 0);
    close(fd);
    CHECK(srv_wait_metric(p.port, "phasemark_requests_cancelled_total", 1, TIMEOUT) == 0);
    /* Streamed: read the first event, then leave. */
    snprintf(body, sizeof body, LONG_BODY, ",\"stream\":true");
    fd = send_only(p.port, "/v1/completions", body);
    char buf[512];
    REQUIRE(recv(fd, buf, sizeof buf, 0) > 0);
    close(fd);
    CHECK(srv_wait_metric(p.port, "phasemark_requests_cancelled_total", 2, TIMEOUT) == 0);
    CHECK(srv_metric(p.port, "phasemark_generations_total") == 0);
    CHECK(srv_metric(p.port, "phasemark_requests_running") == 0);
    hc_resp r;
    REQUIRE(hc_request(p.port, "POST", "/v1/completions", "{\"prompt\":[1,2],\"max_tokens\":2}", &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    hc_free(&r);
    const char *log[] = {"pm-server: req=", " gen=", " cancelled\n", NULL};
    stop_check_log(&p, log);
    return pm_check_result();
}

enum { LOAD_CLIENTS = 8, LOAD_REQUESTS = 200 };

typedef struct load_arg {
    int port, index;
    int ok, bad, fivexx;
    char first_text[256];
    int text_mismatch;
} load_arg;

static void *load_client(void *p)
{
    load_arg *a = p;
    static const char *const bodies[] = {
        "{\"prompt\":[1,100,200,300],\"max_tokens\":4,\"temperature\":0}",
        "{\"prompt\":\"Hello there\",\"max_tokens\":3,\"temperature\":0.7,\"seed\":1}",
        "{\"prompt\":[1,100,200,300],\"max_tokens\":4,\"temperature\":0,\"stream\":true}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":3,\"temperature\":0}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":3,\"stream\":true}",
    };
    for (int i = 0; i < LOAD_REQUESTS; i++) {
        int k = (i + a->index) % 5;
        const char *path = k >= 3 ? "/v1/chat/completions" : "/v1/completions";
        hc_resp r;
        if (hc_request(a->port, "POST", path, bodies[k], &r, TIMEOUT) != 0) {
            a->bad++;
        } else if (r.status >= 500) {
            a->fivexx++;
        } else if (r.status != 200) {
            a->bad++;
        } else {
            a->ok++;
            if (k == 0) { /* greedy: every session on every worker agrees */
                json_t *j = body_json(&r);
                const char *t = jstr(choice0(j), "text");
                if (!a->first_text[0] && t)
                    snprintf(a->first_text, sizeof a->first_text, "%s", t);
                else if (!t || strcmp(t, a->first_text) != 0)
                    a->text_mismatch++;
                json_decref(j);
            }
        }
        hc_free(&r);
    }
    return NULL;
}

static int case_load(void)
{
    srv_proc p;
    const char *extra[] = {"--workers", "2", "--queue", "64", NULL};
    start(&p, tiny, extra);
    pthread_t th[LOAD_CLIENTS];
    load_arg args[LOAD_CLIENTS];
    for (int i = 0; i < LOAD_CLIENTS; i++) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].port = p.port;
        args[i].index = i;
        REQUIRE(pthread_create(&th[i], NULL, load_client, &args[i]) == 0);
    }
    int ok = 0;
    for (int i = 0; i < LOAD_CLIENTS; i++) {
        pthread_join(th[i], NULL);
        CHECK_INT_EQ(args[i].fivexx, 0);
        CHECK_INT_EQ(args[i].bad, 0);
        CHECK_INT_EQ(args[i].text_mismatch, 0);
        if (i)
            CHECK_STR_EQ(args[i].first_text, args[0].first_text);
        ok += args[i].ok;
    }
    CHECK_INT_EQ(ok, LOAD_CLIENTS * LOAD_REQUESTS);
    CHECK(srv_metric(p.port, "phasemark_http_requests_total{code=\"200\"}") == LOAD_CLIENTS * LOAD_REQUESTS);
    CHECK(srv_metric(p.port, "phasemark_http_requests_total{code=\"503\"}") == 0);
    CHECK(srv_metric(p.port, "phasemark_generations_total") == LOAD_CLIENTS * LOAD_REQUESTS);
    CHECK(srv_metric(p.port, "phasemark_queue_depth") == 0);
    stop_ok(&p);
    return pm_check_result();
}

/* ---- shutdown -------------------------------------------------------------- */

/* SIGTERM with a request running and one waiting: the running one
 * finishes whole within the drain time; the waiting one gets 503, unless
 * the running one ended before the signal arrived and it got to run (a
 * race this case cannot exclude; sigterm_drain0 pins the 503 path). */
static int case_sigterm(void)
{
    srv_proc p;
    const char *extra[] = {"--workers", "1", "--ctx", "4096", "--max-tokens", "4000", "--drain", "300", NULL};
    start(&p, slow, extra);
    const char *body = "{\"prompt\":" SLOW_PROMPT ",\"max_tokens\":300,\"temperature\":0}";
    int a = send_only(p.port, "/v1/completions", body);
    REQUIRE(srv_wait_metric(p.port, "phasemark_requests_running", 1, TIMEOUT) == 0);
    int b = send_only(p.port, "/v1/completions", body);
    REQUIRE(srv_wait_metric(p.port, "phasemark_queue_depth", 1, TIMEOUT) == 0);
    kill(p.pid, SIGTERM);
    hc_resp ra, rb;
    read_response(a, &ra);
    read_response(b, &rb);
    CHECK_INT_EQ(ra.status, 200);
    json_t *j = body_json(&ra);
    CHECK_INT_EQ(jint(json_object_get(j, "usage"), "completion_tokens"), 300);
    json_decref(j);
    j = body_json(&rb);
    if (rb.status == 200) {
        fprintf(stderr, "note: the waiting request ran before the signal took effect\n");
        CHECK_INT_EQ(jint(json_object_get(j, "usage"), "completion_tokens"), 300);
    } else {
        check_error(&rb, 503, "queued at shutdown");
        CHECK_STR_EQ(jstr(json_object_get(j, "error"), "code"), "shutting_down");
    }
    json_decref(j);
    hc_free(&ra);
    hc_free(&rb);
    CHECK_INT_EQ(srv_stop(&p, 0, TIMEOUT), 0); /* signal 0: just wait for the exit */
    free(p.log);
    return pm_check_result();
}

/* --drain 0: a stream running thousands of tokens is cut at once (an error
 * event, then [DONE]) and the request waiting behind it gets 503. */
static int case_sigterm_drain0(void)
{
    srv_proc p;
    const char *extra[] = {"--workers", "1", "--ctx", "4096", "--max-tokens", "4000", "--drain", "0", NULL};
    start(&p, slow, extra);
    char body[256];
    snprintf(body, sizeof body, LONG_BODY, ",\"stream\":true");
    int a = send_only(p.port, "/v1/completions", body);
    REQUIRE(srv_wait_metric(p.port, "phasemark_requests_running", 1, TIMEOUT) == 0);
    int b = send_only(p.port, "/v1/completions", "{\"prompt\":[1,2],\"max_tokens\":2}");
    REQUIRE(srv_wait_metric(p.port, "phasemark_queue_depth", 1, TIMEOUT) == 0);
    long long t0 = hc_now_ms();
    kill(p.pid, SIGTERM);
    hc_resp r, rb;
    read_response(a, &r);
    read_response(b, &rb);
    CHECK_INT_EQ(r.status, 200);
    const char *last = strstr(r.body ? r.body : "", "data: {\"error\"");
    CHECK(last != NULL);
    CHECK(last && strstr(last, "shutting_down") != NULL);
    CHECK(r.body_len >= 14 && strcmp(r.body + r.body_len - 14, "data: [DONE]\n\n") == 0);
    check_error(&rb, 503, "queued at shutdown");
    json_t *j = body_json(&rb);
    CHECK_STR_EQ(jstr(json_object_get(j, "error"), "code"), "shutting_down");
    json_decref(j);
    hc_free(&r);
    hc_free(&rb);
    CHECK_INT_EQ(srv_stop(&p, 0, TIMEOUT), 0);
    free(p.log);
    CHECK(hc_now_ms() - t0 < 30000); /* long before 4000 tokens could finish */
    return pm_check_result();
}

/* ---- /tokenize and /detokenize -------------------------------------------- */

/* One request whose whole answer body is known exactly. */
static void expect_body(int port, const char *path, const char *body, int status, const char *want)
{
    hc_resp r;
    REQUIRE(hc_request(port, "POST", path, body, &r, TIMEOUT) == 0);
    if (r.status != status || !r.body || strcmp(r.body, want) != 0)
        fprintf(stderr, "POST %s %s\n  status %d body %s\n  want   %d body %s\n", path, body, r.status,
                r.body ? r.body : "(none)", status, want);
    CHECK_INT_EQ(r.status, status);
    CHECK_STR_EQ(r.body, want);
    CHECK(request_id(&r) > 0);
    hc_free(&r);
}

#define TOK_ERR(msg, param)                                                                       \
    "{\"error\":{\"message\":\"" msg "\",\"type\":\"invalid_request_error\",\"param\":" param \
    ",\"code\":null}}"

/* llama.cpp's shapes on the shipped KJV model (4096-piece SentencePiece).
 * Every id below is what llama.cpp's llama-tokenize prints for the text on
 * this file (--no-parse-special where the text spells "<s>"): 1 is <s>,
 * 4034 "▁", 198/191 the byte tokens <0xC3>/<0xBC> of "ü". */
static int case_tokenize(void)
{
    struct stat st;
    if (stat(PM_KJV_MODEL, &st) != 0)
        PM_SKIP("the shipped model " PM_KJV_MODEL " is absent");
    srv_proc p;
    const char *extra[] = {"--threads", "1", "--max-body", "4096", NULL};
    start(&p, PM_KJV_MODEL, extra);
    const int port = p.port;
    expect_body(port, "/tokenize", "{\"content\":\"In the beginning God created the heaven and the earth.\"}", 200,
                "{\"tokens\":[1045,261,2082,392,3228,261,756,270,261,627,4057]}");
    expect_body(port, "/tokenize",
                "{\"content\":\"In the beginning God created the heaven and the earth.\",\"add_special\":true}", 200,
                "{\"tokens\":[1,1045,261,2082,392,3228,261,756,270,261,627,4057]}");
    expect_body(port, "/tokenize",
                "{\"content\":\"And God said, Let there be light: and there was light. 42 \\u00fc\","
                "\"add_special\":false}",
                200, "{\"tokens\":[300,392,394,4049,955,387,299,1071,4061,270,387,372,1071,4057,4034,55,53,4034,198,191]}");
    /* Special-token text is plain text here (llama.cpp's server would
     * parse it): '<' 's' '>' as pieces. */
    expect_body(port, "/tokenize", "{\"content\":\"<s> x\"}", 200, "{\"tokens\":[4034,63,4041,65,4034,4084]}");
    expect_body(port, "/tokenize", "{\"content\":\"\"}", 200, "{\"tokens\":[]}");
    expect_body(port, "/tokenize", "{\"content\":\"\",\"add_special\":true}", 200, "{\"tokens\":[1]}");
    /* with_pieces: a piece is its text, or its bytes when they are not
     * valid UTF-8 on their own; <s> decodes to nothing. */
    expect_body(port, "/tokenize", "{\"content\":\"Let there be light \\u00fc\",\"with_pieces\":true}", 200,
                "{\"tokens\":[{\"id\":955,\"piece\":\" Let\"},{\"id\":387,\"piece\":\" there\"},"
                "{\"id\":299,\"piece\":\" be\"},{\"id\":1071,\"piece\":\" light\"},{\"id\":4034,\"piece\":\" \"},"
                "{\"id\":198,\"piece\":[195]},{\"id\":191,\"piece\":[188]}]}");
    expect_body(port, "/tokenize", "{\"content\":\"In\",\"with_pieces\":true,\"add_special\":true}", 200,
                "{\"tokens\":[{\"id\":1,\"piece\":\"\"},{\"id\":1045,\"piece\":\" In\"}]}");
    /* /detokenize: the pieces' bytes in order; the space SentencePiece
     * prefixed is dropped after <s>, as in completions. */
    expect_body(port, "/detokenize", "{\"tokens\":[1045,261,2082]}", 200, "{\"content\":\" In the beginning\"}");
    expect_body(port, "/detokenize", "{\"tokens\":[1,1045,261,2082,392,3228,261,756,270,261,627,4057]}", 200,
                "{\"content\":\"In the beginning God created the heaven and the earth.\"}");
    expect_body(port, "/detokenize", "{\"tokens\":[4034,198,191]}", 200, "{\"content\":\" \xc3\xbc\"}");
    /* Half a character: U+FFFD, as completions send it. */
    expect_body(port, "/detokenize", "{\"tokens\":[198]}", 200, "{\"content\":\"\xef\xbf\xbd\"}");
    expect_body(port, "/detokenize", "{\"tokens\":[]}", 200, "{\"content\":\"\"}");
    /* Bad bodies: 400 and one line naming the field. */
    static const struct { const char *path, *body, *want; } bad[] = {
        {"/tokenize", "{\"content\":5}", TOK_ERR("'content' must be a string", "\"content\"")},
        {"/tokenize", "{\"add_special\":true}", TOK_ERR("'content' is required", "\"content\"")},
        {"/tokenize", "{\"content\":\"a\",\"add_special\":1}", TOK_ERR("'add_special' must be a boolean",
                                                                        "\"add_special\"")},
        {"/tokenize", "{\"content\":\"a\",\"with_pieces\":\"yes\"}", TOK_ERR("'with_pieces' must be a boolean",
                                                                              "\"with_pieces\"")},
        {"/tokenize", "[\"a\"]", TOK_ERR("the body must be a JSON object", "null")},
        {"/tokenize", "", TOK_ERR("invalid JSON at line 1 column 0: '[' or '{' expected near end of file", "null")},
        {"/detokenize", "{\"tokens\":[1,4096]}",
         TOK_ERR("'tokens'[1] = 4096 is outside the vocabulary (0..4095)", "\"tokens\"")},
        {"/detokenize", "{\"tokens\":[-1]}",
         TOK_ERR("'tokens'[0] = -1 is outside the vocabulary (0..4095)", "\"tokens\"")},
        {"/detokenize", "{\"tokens\":[1,2.5]}", TOK_ERR("'tokens'[1] is not an integer", "\"tokens\"")},
        {"/detokenize", "{\"tokens\":\"1 2\"}", TOK_ERR("'tokens' must be an array of token ids", "\"tokens\"")},
        {"/detokenize", "{}", TOK_ERR("'tokens' is required", "\"tokens\"")},
        {"/detokenize", "{\"tokens\":[1],\"tokens\":[2]}",
         TOK_ERR("invalid JSON at line 1 column 22: duplicate object key near '\\\"tokens\\\"'", "null")},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_body(port, bad[i].path, bad[i].body, 400, bad[i].want);
    /* GET is 405 with Allow: POST. */
    hc_resp r;
    REQUIRE(hc_request(port, "GET", "/detokenize", NULL, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 405);
    char allow[32];
    CHECK_STR_EQ(hc_header(&r, "Allow", allow, sizeof allow), "POST");
    hc_free(&r);
    stop_ok(&p);
    return pm_check_result();
}

/* ---- start-up -------------------------------------------------------------- */

static int run_server(const char *const *args, pm_child_result *res)
{
    char *argv[16] = {(char *)server_bin};
    int n = 1;
    for (; args[n - 1] && n < 15; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    REQUIRE(pm_child_exec(argv, NULL, TIMEOUT, res) == 0);
    return res->exited ? res->exit_code : -1;
}

static int case_startup(void)
{
    pm_child_result res;
    char other[512];
    snprintf(other, sizeof other, "%.*s/server_other.gguf", (int)(strrchr(tiny, '/') - tiny), tiny);
    const char *draft[] = {"-m", tiny, "--port", "0", "--draft", other, NULL};
    CHECK_INT_EQ(run_server(draft, &res), 1);
    CHECK(strstr(res.err, "pm-server: --draft: ") != NULL && strstr(res.err, "vocabulary") != NULL);
    const char *draftk[] = {"-m", tiny, "--port", "0", "--draft-k", "3", NULL};
    CHECK_INT_EQ(run_server(draftk, &res), 1);
    CHECK(strstr(res.err, "--draft-k needs --draft") != NULL);
    const char *place[] = {"-m", tiny, "--port", "0", "--placement", "0-5@local", NULL};
    CHECK_INT_EQ(run_server(place, &res), 1);
    CHECK(strncmp(res.err, "pm-server: ", 11) == 0);
    const char *backend[] = {"-m", tiny, "--port", "0", "--backend", "no-such-backend", NULL};
    CHECK_INT_EQ(run_server(backend, &res), 1);
    CHECK(strncmp(res.err, "pm-server: ", 11) == 0);
    const char *missing[] = {"-m", "/nonexistent/model.gguf", "--port", "0", NULL};
    CHECK_INT_EQ(run_server(missing, &res), 1);
    const char *bad[] = {"-m", tiny, "--port", "x", NULL};
    CHECK_INT_EQ(run_server(bad, &res), 2);
    CHECK(strstr(res.err, "usage:") != NULL);
    const char *help[] = {"--help", NULL};
    CHECK_INT_EQ(run_server(help, &res), 0);
    CHECK(strstr(res.out, "usage: pm-server") != NULL);
    /* Not loopback: a usage error without --api-key or --no-auth; with
     * --no-auth the bind itself fails. */
    const char *host[] = {"-m", tiny, "--port", "0", "--host", "not-an-address", NULL};
    CHECK_INT_EQ(run_server(host, &res), 2);
    CHECK(strstr(res.err, "pm-server: --host not-an-address is not loopback: give --api-key") != NULL);
    const char *host_open[] = {"-m", tiny, "--port", "0", "--host", "not-an-address", "--no-auth", NULL};
    CHECK_INT_EQ(run_server(host_open, &res), 1);
    return pm_check_result();
}

/* A template the server does not render exactly is refused at start with
 * one line, unless --chat-template names a format; a format whose BOS
 * text is not the model's BOS is refused too; a bad name is a usage
 * error. */
static int case_chat_refuse(void)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/pm_server_nemo_%ld.gguf", (long)getpid());
    char *tmpl = fixture("unknown-mistral-nemo.jinja");
    REQUIRE(gguf_copy_with_template(tiny, path, tmpl) == 0);
    free(tmpl);
    pm_child_result res;
    const char *plain[] = {"-m", path, "--port", "0", NULL};
    CHECK_INT_EQ(run_server(plain, &res), 1);
    CHECK_STR_EQ(res.err, "pm-server: the model's tokenizer.chat_template is not one this server renders exactly "
                          "(it resembles Mistral / Llama 2's, but differs); choose a format with --chat-template "
                          "NAME (plain, chatml, qwen2.5, llama3, llama3.1, llama3.2, mistral-v0, mistral-v1, "
                          "mistral-v3, phi3, phi3.5, phi3-v0, gemma, gemma2)\n");
    const char *badname[] = {"-m", path, "--port", "0", "--chat-template", "llama2", NULL};
    CHECK_INT_EQ(run_server(badname, &res), 2);
    CHECK(strstr(res.err, "pm-server: --chat-template must be one of plain, chatml, ") != NULL);
    CHECK(strstr(res.err, "(got 'llama2')") != NULL);
    const char *gemma[] = {"-m", path, "--port", "0", "--chat-template", "gemma2", NULL};
    CHECK_INT_EQ(run_server(gemma, &res), 1);
    CHECK_STR_EQ(res.err, "pm-server: chat format gemma2 writes the BOS token <bos>, which is not this model's "
                          "BOS; choose another with --chat-template NAME\n");

    /* Forced, it serves: mistral-v1 renders " [INST] Hi [/INST]" after <s>. */
    const char *forced[] = {"--chat-template", "mistral-v1", NULL};
    srv_proc p;
    start(&p, path, forced);
    char want[4096];
    long long want_n = complete(p.port, "{\"prompt\":\" [INST] Hi [/INST]\",\"max_tokens\":8,\"temperature\":0}",
                                want, sizeof want, NULL);
    hc_resp r;
    REQUIRE(hc_request(p.port, "POST", "/v1/chat/completions",
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":8,\"temperature\":0}",
                       &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    json_t *j = body_json(&r);
    CHECK_STR_EQ(jstr(json_object_get(choice0(j), "message"), "content"), want);
    CHECK_INT_EQ(jint(json_object_get(j, "usage"), "prompt_tokens"), want_n);
    json_decref(j);
    hc_free(&r);
    stop_ok(&p);
    unlink(path);
    return pm_check_result();
}

/* ---- --device-loop -------------------------------------------------------- */

/* One non-streamed completion: its text, timings.device_loop (1, 0, or
 * -1 when absent) and, in *drafted, timings.draft_n. */
static void loop_completion(int port, const char *body, char *text, size_t cap, int *on_loop,
                            long long *drafted)
{
    hc_resp r;
    REQUIRE(hc_request(port, "POST", "/v1/completions", body, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    json_t *j = body_json(&r);
    snprintf(text, cap, "%s", jstr(choice0(j), "text") ? jstr(choice0(j), "text") : "(none)");
    json_t *t = json_object_get(j, "timings");
    json_t *dl = json_object_get(t, "device_loop");
    *on_loop = json_is_boolean(dl) ? json_is_true(dl) : -1;
    if (drafted)
        *drafted = jint(t, "draft_n");
    json_decref(j);
    hc_free(&r);
}

/* On the CPU: on refuses start-up with one line, a bad mode is a usage
 * error, auto serves what off serves and says the host path ran. */
static int case_device_loop(void)
{
    pm_child_result res;
    const char *on[] = {"-m", tiny, "--port", "0", "--device-loop", "on", NULL};
    CHECK_INT_EQ(run_server(on, &res), 1);
    CHECK_STR_EQ(res.err, "pm-server: --device-loop on: the target runs on the cpu backend, not CUDA\n");
    const char *ngram_on[] = {"-m", tiny, "--port", "0", "--drafter", "ngram", "--device-loop", "on", NULL};
    CHECK_INT_EQ(run_server(ngram_on, &res), 1);
    CHECK_STR_EQ(res.err, "pm-server: --device-loop on: the target runs on the cpu backend, not CUDA\n");
    const char *hybrid_on[] = {"-m", tiny, "--port", "0", "--drafter", "hybrid", "--draft", tiny,
                               "--device-loop", "on", NULL};
    CHECK_INT_EQ(run_server(hybrid_on, &res), 1);
    CHECK_STR_EQ(res.err, "pm-server: --device-loop on: its hybrid rounds need a block head, not a draft model\n");
    const char *bad[] = {"-m", tiny, "--port", "0", "--device-loop", "always", NULL};
    CHECK_INT_EQ(run_server(bad, &res), 2);
    CHECK(strncmp(res.err, "pm-server: --device-loop must be auto, on or off (got 'always')\nusage: ",
                  strlen("pm-server: --device-loop must be auto, on or off (got 'always')\nusage: ")) == 0);
    const char *body = "{\"prompt\":[1,100,200,300],\"max_tokens\":16,\"temperature\":0}";
    char off_text[4096], auto_text[4096];
    int loop_off = -1, loop_auto = -1;
    srv_proc p;
    const char *off[] = {"--device-loop", "off", NULL};
    start(&p, tiny, off);
    loop_completion(p.port, body, off_text, sizeof off_text, &loop_off, NULL);
    stop_ok(&p);
    start(&p, tiny, NULL);
    loop_completion(p.port, body, auto_text, sizeof auto_text, &loop_auto, NULL);
    CHECK_STR_EQ(auto_text, off_text);
    CHECK_INT_EQ(loop_off, 0);
    CHECK_INT_EQ(loop_auto, 0);
    CHECK(srv_metric(p.port, "phasemark_device_loop_generations_total") == 0.0);
    CHECK(srv_metric(p.port, "phasemark_generations_total") == 1.0);
    stop_ok(&p);
    return pm_check_result();
}

/* The shipped pair: in $PHASEMARK_REPO_MODELS when set (a GPU machine
 * running binaries built elsewhere), else beside PM_KJV_MODEL. */
static char kjv_target[1024], kjv_draft[1024];

static void kjv_paths(void)
{
    const char *env = getenv("PHASEMARK_REPO_MODELS");
    const char *slash = strrchr(PM_KJV_MODEL, '/');
    int dir = slash ? (int)(slash - PM_KJV_MODEL) : 1;
    if (env && *env) {
        snprintf(kjv_target, sizeof kjv_target, "%s/phasemark-kjv-target-q8_0.gguf", env);
        snprintf(kjv_draft, sizeof kjv_draft, "%s/phasemark-kjv-draft-f16.gguf", env);
    } else {
        snprintf(kjv_target, sizeof kjv_target, "%s", PM_KJV_MODEL);
        snprintf(kjv_draft, sizeof kjv_draft, "%.*s/phasemark-kjv-draft-f16.gguf", dir,
                 slash ? PM_KJV_MODEL : ".");
    }
}

/* Skips (77) without the shipped pair or a CUDA device (pm-generate
 * opening the target on cuda:0 is the probe). */
static void need_cuda_kjv(void)
{
    struct stat st;
    kjv_paths();
    if (stat(kjv_target, &st) != 0 || stat(kjv_draft, &st) != 0)
        PM_SKIP("the shipped KJV pair is absent");
    char *probe[] = {(char *)generate_bin, "-m", kjv_target, "--backend", "cuda:0", "--tokens", "1", "-n",
                     "1", "--device-loop", "off", NULL};
    pm_child_result r;
    REQUIRE(pm_child_exec(probe, NULL, TIMEOUT, &r) == 0);
    if (!pm_child_ok(&r)) {
        fprintf(stderr, "skipped: no CUDA device: %s", r.err);
        exit(77);
    }
}

/* Said twice, so that the n-gram lookup matches in its first round. */
#define LOOP_PROMPT "And the LORD spake unto Moses, saying, And the LORD spake unto Moses, saying,"

/* On a GPU: for plain decoding, the n-gram and the model drafter, a
 * server with --device-loop on answers a greedy request with the text of
 * one with off; its timings say the loop ran (off's say it did not), the
 * drafted counts go to timings and /metrics per drafter, streaming gives
 * the same text, a temperature-only request runs on the loop (the model
 * drafter's) and a top-k one is refused with 400 naming why. */
static int case_device_loop_cuda(void)
{
    need_cuda_kjv();
    const char *draft = kjv_draft;
    const char *body = "{\"prompt\":\"" LOOP_PROMPT "\",\"max_tokens\":48,\"temperature\":0}";
    const char *const setups[3][8] = {
        {"--backend", "cuda:0", NULL},
        {"--backend", "cuda:0", "--drafter", "ngram", "--draft-k", "4", NULL},
        {"--backend", "cuda:0", "--draft", draft, "--draft-k", "4", NULL},
    };
    const char *const names[3] = {"none", "ngram", "model"};
    for (int i = 0; i < 3; i++) {
        const char *args[12];
        int n = 0;
        for (; setups[i][n]; n++)
            args[n] = setups[i][n];
        args[n] = "--device-loop";
        args[n + 2] = NULL;
        char off_text[8192], on_text[8192];
        int loop = -1;
        long long d_off = -1, d_on = -1;
        srv_proc p;
        args[n + 1] = "off";
        start(&p, kjv_target, args);
        loop_completion(p.port, body, off_text, sizeof off_text, &loop, &d_off);
        CHECK_INT_EQ(loop, 0);
        stop_ok(&p);
        args[n + 1] = "on";
        start(&p, kjv_target, args);
        loop_completion(p.port, body, on_text, sizeof on_text, &loop, &d_on);
        CHECK_STR_EQ(on_text, off_text);
        CHECK_INT_EQ(loop, 1);
        CHECK(srv_metric(p.port, "phasemark_device_loop_generations_total") == 1.0);
        if (i > 0) {
            char metric[128];
            snprintf(metric, sizeof metric, "phasemark_drafter_tokens_total{drafter=\"%s\"}", names[i]);
            CHECK(d_on > 0);
            CHECK(srv_metric(p.port, metric) == (double)d_on);
            CHECK(srv_metric(p.port, "phasemark_draft_tokens_total") == (double)d_on);
        } else {
            CHECK_INT_EQ(d_on, 0);
        }
        hc_resp r;
        REQUIRE(hc_request(p.port, "POST", "/v1/completions",
                           "{\"prompt\":\"" LOOP_PROMPT "\",\"max_tokens\":48,"
                           "\"temperature\":0,\"stream\":true}",
                           &r, TIMEOUT) == 0);
        json_t *ev[256];
        int n_ev = 0;
        REQUIRE(sse_events(&r, ev, 256, &n_ev) == 0);
        char got[8192];
        const char *finish;
        stream_text(ev, n_ev, 0, got, sizeof got, &finish);
        CHECK_STR_EQ(got, off_text);
        free_events(ev, n_ev);
        hc_free(&r);
        REQUIRE(hc_request(p.port, "POST", "/v1/completions",
                           "{\"prompt\":\"And\",\"max_tokens\":8,\"temperature\":0.8,\"top_k\":40}", &r,
                           TIMEOUT) == 0);
        CHECK_INT_EQ(r.status, 400);
        CHECK(r.body && strstr(r.body, "--device-loop on: it samples at a temperature only (no top-k or top-p cut)"));
        hc_free(&r);
        { /* every drafter samples on the device too */
            char text[8192];
            loop_completion(p.port, "{\"prompt\":\"And\",\"max_tokens\":8,\"temperature\":0.8,\"seed\":5}", text,
                            sizeof text, &loop, NULL);
            CHECK_INT_EQ(loop, 1);
        }
        stop_ok(&p);
    }
    return pm_check_result();
}

/* ---- --draft-tree: tree verification per request --------------------------- */

/* The speculative statistics pm-generate reports on stderr for one run
 * (its "speculative: R rounds, D drafted, A accepted ..., P plain steps"
 * line): the independent count of tree rounds, nodes and accepted path. */
typedef struct spec_counts {
    long long rounds, drafted, accepted, steps;
} spec_counts;

static int generate_counts(const char *model, const char *ids_csv, int n, const char *const *extra,
                           spec_counts *c)
{
    char nbuf[16];
    snprintf(nbuf, sizeof nbuf, "%d", n);
    char *argv[32] = {(char *)generate_bin, "-m", (char *)model, "--tokens", (char *)ids_csv, "-n", nbuf,
                      "--threads", "1", "--ids"};
    int k = 10;
    for (int i = 0; extra[i] && k < 31; i++)
        argv[k++] = (char *)extra[i];
    argv[k] = NULL;
    static pm_child_result res;
    if (pm_child_exec(argv, NULL, TIMEOUT, &res) || !pm_child_ok(&res)) {
        fprintf(stderr, "pm-generate: %s\n", res.err);
        return -1;
    }
    const char *s = strstr(res.err, "speculative: ");
    if (!s || sscanf(s, "speculative: %lld rounds, %lld drafted, %lld accepted", &c->rounds, &c->drafted,
                     &c->accepted) != 3)
        return -1;
    const char *p = strstr(s, "tokens/round, ");
    return p && sscanf(p, "tokens/round, %lld plain steps", &c->steps) == 1 ? 0 : -1;
}

/* The ids /tokenize gives for text (with BOS), as "a,b,c". */
static void tokenize_csv(int port, const char *text, char *csv, size_t cap)
{
    char body[512];
    snprintf(body, sizeof body, "{\"content\":\"%s\",\"add_special\":true}", text);
    hc_resp r;
    REQUIRE(hc_request(port, "POST", "/tokenize", body, &r, TIMEOUT) == 0);
    REQUIRE(r.status == 200);
    json_t *j = body_json(&r);
    json_t *t = json_object_get(j, "tokens");
    size_t n = 0;
    csv[0] = 0;
    for (size_t i = 0; i < json_array_size(t); i++)
        n += (size_t)snprintf(csv + n, n < cap ? cap - n : 0, "%s%lld", i ? "," : "",
                              (long long)json_integer_value(json_array_get(t, i)));
    REQUIRE(n < cap && json_array_size(t) > 0);
    json_decref(j);
    hc_free(&r);
}

/* One completion's body, text and timings (a new reference: the caller
 * frees it with json_decref). */
static json_t *completion_json(int port, const char *body, char *text, size_t cap)
{
    hc_resp r;
    REQUIRE(hc_request(port, "POST", "/v1/completions", body, &r, TIMEOUT) == 0);
    CHECK_INT_EQ(r.status, 200);
    json_t *j = body_json(&r);
    REQUIRE(j != NULL);
    snprintf(text, cap, "%s", jstr(choice0(j), "text") ? jstr(choice0(j), "text") : "(none)");
    hc_free(&r);
    return j;
}

#define N_TREE_PROMPTS PM_KJV_PROMPTS

/* --draft-tree 16 with the shipped target and block head (k 8): on the
 * 20 prompts of the engine's tree parity cases, 16 greedy tokens each,
 * the text, token count and finish reason equal a plain server's, on a
 * monolithic target, over two local shards and over a local shard and a
 * spawned daemon; the timings' tree counts
 * equal (monolithic) pm-generate's with the same tree (its rounds,
 * drafted nodes, accepted path), and /metrics adds them up. A
 * sampled request on the same server runs chains: timings say so, and
 * its text is a chain server's under the same seed. */
static int case_draft_tree(void)
{
    kjv_paths();
    char head[1100];
    const char *slash = strrchr(kjv_target, '/');
    snprintf(head, sizeof head, "%.*s/phasemark-kjv-block-f16.gguf", slash ? (int)(slash - kjv_target) : 1,
             slash ? kjv_target : ".");
    struct stat st;
    if (stat(kjv_target, &st) != 0 || stat(head, &st) != 0)
        PM_SKIP("the shipped KJV target or block head is absent");
    const char *tree_args[] = {"--threads", "1", "--draft-head", head, "--draft-k", "8", "--draft-tree", "16", NULL};
    const char *plain_args[] = {"--threads", "1", NULL};
    const char *gen_tree[] = {"--draft-head", head, "--draft-k", "8", "--draft-tree", "16", NULL};
    /* The same trees over two local shards (each span reads the tree), and
     * over a local shard and a spawned daemon (the tree on the wire). */
    const char *split_args[] = {"--threads", "1", "--draft-head", head, "--draft-k", "8", "--draft-tree", "16",
                                "--placement", "0-2@local,3-5@local", NULL};
    const char *remote_args[] = {"--threads", "1", "--draft-head", head, "--draft-k", "8", "--draft-tree", "16",
                                 "--placement", "0-2@local,3-5@spawn", NULL};
    /* The spawned daemon's server gets a target name of its own, for the
     * reaping check below. */
    char remote_model[128];
    own_model_name(kjv_target, "tree", remote_model, sizeof remote_model);
    srv_proc tp, pp, sp, rp;
    start(&tp, kjv_target, tree_args);
    start(&pp, kjv_target, plain_args);
    start(&sp, kjv_target, split_args);
    start(&rp, remote_model, remote_args);
    srv_proc *splits[2] = {&sp, &rp};
    long long sum_r = 0, sum_n = 0, sum_a = 0, first_rounds = -1;
    char first_csv[512] = "";
    int same = 0;
    for (int i = 0; i < N_TREE_PROMPTS; i++) {
        char csv[512], body[700], want[4096], got[4096];
        tokenize_csv(pp.port, pm_kjv_prompts[i], csv, sizeof csv);
        snprintf(body, sizeof body, "{\"prompt\":[%s],\"max_tokens\":16,\"temperature\":0}", csv);
        char split_text[2][4096];
        json_t *a = completion_json(pp.port, body, want, sizeof want);
        json_t *b = completion_json(tp.port, body, got, sizeof got);
        json_t *sj[2], *stt[2];
        for (int k = 0; k < 2; k++) {
            sj[k] = completion_json(splits[k]->port, body, split_text[k], sizeof split_text[k]);
            stt[k] = json_object_get(sj[k], "timings");
            CHECK_STR_EQ(split_text[k], want);
            CHECK_INT_EQ(jint(json_object_get(sj[k], "usage"), "completion_tokens"),
                         jint(json_object_get(a, "usage"), "completion_tokens"));
            CHECK_STR_EQ(jstr(stt[k], "draft_mode") ? jstr(stt[k], "draft_mode") : "(none)", "tree");
        }
        long long na = jint(json_object_get(a, "usage"), "completion_tokens");
        long long nb = jint(json_object_get(b, "usage"), "completion_tokens");
        const char *fa = jstr(choice0(a), "finish_reason"), *fb = jstr(choice0(b), "finish_reason");
        int ok = !strcmp(want, got) && na == nb && fa && fb && !strcmp(fa, fb);
        if (!ok)
            fprintf(stderr, "prompt %d: tree '%s' (%lld) vs plain '%s' (%lld)\n", i, got, nb, want, na);
        same += ok;
        json_t *t = json_object_get(b, "timings");
        CHECK_STR_EQ(jstr(t, "draft_mode") ? jstr(t, "draft_mode") : "(none)", "tree");
        CHECK_STR_EQ(jstr(json_object_get(a, "timings"), "draft_mode"), "none");
        spec_counts c;
        REQUIRE(generate_counts(kjv_target, csv, 16, gen_tree, &c) == 0);
        CHECK_INT_EQ(jint(t, "tree_rounds"), c.rounds);
        CHECK_INT_EQ(jint(t, "tree_nodes"), c.drafted);
        CHECK_INT_EQ(jint(t, "tree_accepted"), c.accepted);
        for (int k = 0; k < 2; k++) {
            CHECK_INT_EQ(jint(stt[k], "tree_rounds"), c.rounds);
            CHECK_INT_EQ(jint(stt[k], "tree_nodes"), c.drafted);
            CHECK_INT_EQ(jint(stt[k], "tree_accepted"), c.accepted);
            json_decref(sj[k]);
        }
        CHECK_INT_EQ(jint(t, "draft_n"), c.drafted);
        CHECK_INT_EQ(jint(t, "draft_n_accepted"), c.accepted);
        json_t *by = json_object_get(json_object_get(t, "drafters"), "block");
        CHECK_INT_EQ(by ? jint(by, "draft_n") : 0, c.drafted);
        /* Without an EOS every token is the prefill's, a round's (its
         * path + 1) or a plain step's (an EOS ends a path early and is
         * not emitted; "Praise ye the LORD." draws it first). */
        if (fb && !strcmp(fb, "length"))
            CHECK_INT_EQ(nb, 1 + c.rounds + c.accepted + c.steps);
        if (i == 0) {
            first_rounds = c.rounds;
            snprintf(first_csv, sizeof first_csv, "%s", csv);
        }
        sum_r += c.rounds;
        sum_n += c.drafted;
        sum_a += c.accepted;
        json_decref(a);
        json_decref(b);
    }
    CHECK_INT_EQ(same, N_TREE_PROMPTS);
    fprintf(stderr, "draft_tree: %lld tree rounds, %lld nodes, %lld accepted (%.2f tokens per round)\n", sum_r,
            sum_n, sum_a, sum_r ? (double)(sum_a + sum_r) / (double)sum_r : 0.0);
    CHECK(sum_a > sum_r); /* the shipped head's trees keep more than one node a round */
    CHECK(srv_metric(tp.port, "phasemark_tree_generations_total") == (double)N_TREE_PROMPTS);
    CHECK(srv_metric(tp.port, "phasemark_tree_fallbacks_total") == 0.0);
    CHECK(srv_metric(tp.port, "phasemark_tree_rounds_total") == (double)sum_r);
    CHECK(srv_metric(tp.port, "phasemark_tree_nodes_total") == (double)sum_n);
    CHECK(srv_metric(tp.port, "phasemark_tree_accepted_tokens_total") == (double)sum_a);
    CHECK(srv_metric(tp.port, "phasemark_drafter_tokens_total{drafter=\"block\"}") == (double)sum_n);
    CHECK(srv_metric(pp.port, "phasemark_tree_rounds_total") == 0.0);
    for (int k = 0; k < 2; k++) {
        CHECK(srv_metric(splits[k]->port, "phasemark_tree_rounds_total") == (double)sum_r);
        CHECK(srv_metric(splits[k]->port, "phasemark_tree_generations_total") == (double)N_TREE_PROMPTS);
        stop_ok(splits[k]);
    }
    CHECK_INT_EQ(count_daemons(remote_model), 0); /* the spawned daemon is reaped */
    unlink(remote_model);

    /* Streamed, the same text as the plain server's (the first prompt). */
    char sbody[700], plain[4096], streamed[4096];
    snprintf(sbody, sizeof sbody, "{\"prompt\":[%s],\"max_tokens\":16,\"temperature\":0}", first_csv);
    json_decref(completion_json(pp.port, sbody, plain, sizeof plain));
    snprintf(sbody, sizeof sbody, "{\"prompt\":[%s],\"max_tokens\":16,\"temperature\":0,\"stream\":true}",
             first_csv);
    hc_resp r;
    REQUIRE(hc_request(tp.port, "POST", "/v1/completions", sbody, &r, TIMEOUT) == 0);
    json_t *ev[256];
    int n = 0;
    const char *finish;
    REQUIRE(sse_events(&r, ev, 256, &n) == 0);
    stream_text(ev, n, 0, streamed, sizeof streamed, &finish);
    CHECK_STR_EQ(streamed, plain);
    REQUIRE(n > 0);
    json_t *last = json_object_get(ev[n - 1], "timings");
    CHECK_STR_EQ(jstr(last, "draft_mode") ? jstr(last, "draft_mode") : "(none)", "tree");
    sum_r += jint(last, "tree_rounds"); /* the first prompt's again: its count */
    CHECK_INT_EQ(jint(last, "tree_rounds"), first_rounds);
    free_events(ev, n);
    hc_free(&r);
    stop_ok(&pp);

    /* Sampled: chains, the same draws as a server without --draft-tree. */
    const char *sampled = "{\"prompt\":\"In the beginning God created\",\"max_tokens\":16,\"temperature\":0.8,"
                          "\"seed\":11}";
    char tree_text[4096], chain_text[4096];
    json_t *a = completion_json(tp.port, sampled, tree_text, sizeof tree_text);
    json_t *t = json_object_get(a, "timings");
    CHECK_STR_EQ(jstr(t, "draft_mode") ? jstr(t, "draft_mode") : "(none)", "chain");
    CHECK_INT_EQ(jint(t, "tree_rounds"), 0);
    CHECK_INT_EQ(jint(t, "tree_nodes"), 0);
    CHECK(jint(json_object_get(json_object_get(t, "drafters"), "block"), "draft_n") > 0);
    CHECK(srv_metric(tp.port, "phasemark_tree_fallbacks_total") == 1.0);
    CHECK(srv_metric(tp.port, "phasemark_tree_generations_total") == (double)N_TREE_PROMPTS + 1);
    CHECK(srv_metric(tp.port, "phasemark_tree_rounds_total") == (double)sum_r); /* chains add none */
    stop_ok(&tp);
    const char *chain_args[] = {"--threads", "1", "--draft-head", head, "--draft-k", "8", NULL};
    srv_proc cp;
    start(&cp, kjv_target, chain_args);
    json_t *b = completion_json(cp.port, sampled, chain_text, sizeof chain_text);
    CHECK_STR_EQ(tree_text, chain_text);
    CHECK_STR_EQ(jstr(json_object_get(b, "timings"), "draft_mode"), "chain");
    CHECK_INT_EQ(jint(json_object_get(b, "timings"), "draft_n"), jint(t, "draft_n"));
    CHECK(srv_metric(cp.port, "phasemark_tree_fallbacks_total") == 0.0);
    json_decref(a);
    json_decref(b);
    stop_ok(&cp);
    return pm_check_result();
}

/* --draft-tree refusals, each with its one line: out of range or not a
 * number (usage, exit 2), without the block drafter and a target batch
 * under N + 1 (start-up, exit 1). */
static int case_draft_tree_refuse(void)
{
    static pm_child_result res;
    char head[1024];
    snprintf(head, sizeof head, "%.*s_head.gguf", (int)(strlen(tiny) - 5), tiny);
    static const char *const bad_values[] = {"33", "-1", "8x", ""};
    for (size_t i = 0; i < sizeof bad_values / sizeof bad_values[0]; i++) {
        const char *args[] = {"-m", tiny, "--port", "0", "--draft-head", head, "--draft-tree", bad_values[i], NULL};
        CHECK_INT_EQ(run_server(args, &res), 2);
        char want[128];
        snprintf(want, sizeof want, "pm-server: --draft-tree needs an integer in 0..32 (got '%s')\nusage:",
                 bad_values[i]);
        CHECK(strncmp(res.err, want, strlen(want)) == 0);
        if (strncmp(res.err, want, strlen(want)) != 0)
            fprintf(stderr, "stderr: %s\n", res.err);
    }
    const char *nohead[] = {"-m", tiny, "--port", "0", "--draft-tree", "8", NULL};
    CHECK_INT_EQ(run_server(nohead, &res), 1);
    CHECK_STR_EQ(res.err, "pm-server: --draft-tree 8 needs the block drafter (--draft-head HEAD)\n");
    const char *ngram[] = {"-m", tiny, "--port", "0", "--drafter", "ngram", "--draft-tree", "8", NULL};
    CHECK_INT_EQ(run_server(ngram, &res), 1);
    CHECK_STR_EQ(res.err, "pm-server: --draft-tree 8 needs the block drafter (--draft-head HEAD)\n");
    const char *batch[] = {"-m", tiny, "--port", "0", "--draft-head", head, "--draft-tree", "16", "--batch", "8",
                           NULL};
    CHECK_INT_EQ(run_server(batch, &res), 1);
    CHECK_STR_EQ(res.err, "pm-server: --draft-tree 16: spec: a draft tree of 16 nodes needs a target batch of "
                          "17 (it has 8)\n");
    /* 0 is chains: the server starts and says so. */
    const char *zero[] = {"--draft-head", head, "--draft-tree", "0", NULL};
    srv_proc p;
    start(&p, tiny, zero);
    char text[4096];
    json_t *j = completion_json(p.port, "{\"prompt\":[1,100,200,300],\"max_tokens\":8,\"temperature\":0}", text,
                                sizeof text);
    CHECK_STR_EQ(jstr(json_object_get(j, "timings"), "draft_mode"), "chain");
    CHECK(srv_metric(p.port, "phasemark_tree_fallbacks_total") == 0.0);
    json_decref(j);
    stop_ok(&p);
    return pm_check_result();
}

/* ---- markers: X-Request-Id is the markers' req= -------------------------- */

/* What the marker driver runs: the tiny model on the CPU, the shipped
 * target on cuda:0 with --device-loop on (both requests on the loop), or
 * the tiny model with its block head and tree rounds (--draft-tree). */
enum { MARK_HOST, MARK_LOOP, MARK_TREE, MARK_TREE_SPLIT, MARK_TREE_REMOTE };
#define MARK_TREE_NODES "6"
#define MARK_TREE_K "4"
#define MARK_TREE_TOKENS 12

/* Runs under `phasemark capture`: starts the server (which inherits the
 * recorder), sends two requests, writes their X-Request-Ids to ids_path
 * and stops the server. */
static int marker_driver(const char *ids_path, int mode)
{
    srv_proc p;
    char head[1024];
    snprintf(head, sizeof head, "%.*s_head.gguf", (int)(strlen(tiny) - 5), tiny);
    const char *on_loop[] = {"--backend", "cuda:0", "--device-loop", "on", NULL};
    const char *tree[] = {"--draft-head", head, "--draft-k", MARK_TREE_K, "--draft-tree", MARK_TREE_NODES,
                          "--placement", "0-0@local,1-1@local", NULL};
    if (mode == MARK_TREE)
        tree[6] = NULL; /* monolithic */
    if (mode == MARK_TREE_REMOTE)
        tree[7] = "0-0@local,1-1@spawn";
    if (mode == MARK_LOOP)
        kjv_paths();
    int trees = mode == MARK_TREE || mode == MARK_TREE_SPLIT || mode == MARK_TREE_REMOTE;
    start(&p, mode == MARK_LOOP ? kjv_target : tiny, mode == MARK_LOOP ? on_loop : trees ? tree : NULL);
    FILE *f = fopen(ids_path, "w");
    REQUIRE(f != NULL);
    int n_tokens = trees ? MARK_TREE_TOKENS : 3;
    char body[128];
    snprintf(body, sizeof body, "{\"prompt\":[1,100,200,300],\"max_tokens\":%d,\"temperature\":0}", n_tokens);
    for (int i = 0; i < 2; i++) {
        hc_resp r;
        REQUIRE(hc_request(p.port, "POST", "/v1/completions", body, &r, TIMEOUT) == 0);
        CHECK_INT_EQ(r.status, 200);
        fprintf(f, "%lld\n", request_id(&r));
        json_t *j = body_json(&r);
        /* All tokens, no EOS: the shape the counts below assume. */
        CHECK_INT_EQ(jint(json_object_get(j, "usage"), "completion_tokens"), n_tokens);
        if (mode == MARK_LOOP)
            CHECK(json_is_true(json_object_get(json_object_get(j, "timings"), "device_loop")));
        if (trees)
            CHECK_STR_EQ(jstr(json_object_get(j, "timings"), "draft_mode"), "tree");
        json_decref(j);
        hc_free(&r);
    }
    fclose(f);
    stop_ok(&p);
    return pm_check_result();
}

/* Lines of path holding needle (and also, when set, needle2); with sum
 * set, *sum adds up the number after "draft=" on those lines. */
static int count_lines(const char *path, const char *needle, const char *needle2, long long *sum)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, needle) || (needle2 && !strstr(line, needle2)))
            continue;
        n++;
        const char *d = sum ? strstr(line, "draft=") : NULL;
        if (d)
            *sum += strtoll(d + 6, NULL, 10);
    }
    fclose(f);
    return n;
}

static int count_in_file(const char *path, const char *needle)
{
    return count_lines(path, needle, NULL, NULL);
}

/* A tree request's ranges (docs/spec.md, Range counts) on S spans: the
 * prefill and its S leaves, per round pm.spec_decode (draft = its nodes)
 * enclosing pm.draft and S verify leaves, per plain step pm.decode and
 * its S leaves; R, the nodes and D from pm-generate with the same tree
 * (monolithic: two local shards verify the same trees). */
static void check_tree_ranges(const char *csv, long long id, int S)
{
    char head[1024];
    snprintf(head, sizeof head, "%.*s_head.gguf", (int)(strlen(tiny) - 5), tiny);
    const char *gen[] = {"--draft-head", head, "--draft-k", MARK_TREE_K, "--draft-tree", MARK_TREE_NODES, NULL};
    spec_counts c;
    REQUIRE(generate_counts(tiny, "1,100,200,300", MARK_TREE_TOKENS, gen, &c) == 0);
    REQUIRE(c.rounds > 0);
    char needle[80], rq[40];
    snprintf(rq, sizeof rq, "req=%lld ", id);
    long long nodes = 0;
    snprintf(needle, sizeof needle, "pm.spec_decode mode=batched req=%lld ", id);
    CHECK_INT_EQ(count_lines(csv, needle, NULL, &nodes), c.rounds);
    CHECK_INT_EQ(nodes, c.drafted);
    snprintf(needle, sizeof needle, "pm.draft req=%lld ", id);
    CHECK_INT_EQ(count_lines(csv, needle, "drafter=block", NULL), c.rounds);
    CHECK_INT_EQ(count_lines(csv, "mode=verify", rq, NULL), S * c.rounds);
    snprintf(needle, sizeof needle, "pm.decode mode=decode req=%lld ", id);
    CHECK_INT_EQ(count_in_file(csv, needle), c.steps);
    CHECK_INT_EQ(count_lines(csv, "mode=decode", rq, NULL), (1 + S) * c.steps);
    CHECK_INT_EQ(count_lines(csv, "mode=exact", rq, NULL), 1 + S);
    snprintf(needle, sizeof needle, "req=%lld\"", id);
    int tail = count_in_file(csv, needle);
    CHECK_INT_EQ(count_in_file(csv, rq) + tail, (1 + S) + (2 + S) * c.rounds + (1 + S) * c.steps);
}

/* The engine's ranges of two requests, each carrying its X-Request-Id.
 * loop: the same on the device loop (docs/cuda.md: one pm.decode a
 * launched step around its leaf; a batch of max_tokens - 1 = 2 steps is
 * what the host path decodes too). */
static int case_markers(const char *self, int mode)
{
    if (!phasemark_bin)
        PM_SKIP("the phasemark command was not built");
    if (mode == MARK_LOOP)
        need_cuda_kjv();
    char dir[] = "/tmp/pm_server_markers_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char ids_path[128], csv[128];
    snprintf(ids_path, sizeof ids_path, "%s/ids.txt", dir);
    snprintf(csv, sizeof csv, "%s/marker_api_trace.csv", dir);
    char *argv[] = {(char *)phasemark_bin, "capture", "-o", dir, "--", (char *)self,
                    mode == MARK_LOOP         ? "marker_driver_loop"
                    : mode == MARK_TREE       ? "marker_driver_tree"
                    : mode == MARK_TREE_SPLIT ? "marker_driver_tree_split"
                    : mode == MARK_TREE_REMOTE ? "marker_driver_tree_remote"
                                               : "marker_driver",
                    (char *)server_bin, (char *)tiny, (char *)slow, (char *)generate_bin, ids_path, NULL};
    pm_child_result res;
    REQUIRE(pm_child_exec(argv, NULL, 120000, &res) == 0);
    if (!pm_child_ok(&res))
        fprintf(stderr, "capture: %s\n%s\n", res.out, res.err);
    REQUIRE(pm_child_ok(&res));
    FILE *f = fopen(ids_path, "r");
    REQUIRE(f != NULL);
    long long ids[2] = {-1, -1};
    REQUIRE(fscanf(f, "%lld %lld", &ids[0], &ids[1]) == 2);
    fclose(f);
    /* Prompt of 4 tokens in one chunk, 3 tokens generated: one prefill
     * range and 2 decode steps (the last token is sampled, not decoded),
     * each enclosing one leaf layer range. */
    for (int i = 0; i < 2; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "pm.prefill mode=exact req=%lld ", ids[i]);
        if (mode == MARK_TREE || mode == MARK_TREE_SPLIT || mode == MARK_TREE_REMOTE) {
            CHECK_INT_EQ(count_in_file(csv, needle), 1);
            check_tree_ranges(csv, ids[i], mode == MARK_TREE ? 1 : 2);
            continue;
        }
        CHECK_INT_EQ(count_in_file(csv, needle), 1);
        snprintf(needle, sizeof needle, "pm.decode mode=decode req=%lld ", ids[i]);
        int decodes = count_in_file(csv, needle);
        CHECK_INT_EQ(decodes, 2);
        snprintf(needle, sizeof needle, "req=%lld\"", ids[i]);
        int tail = count_in_file(csv, needle);
        snprintf(needle, sizeof needle, "req=%lld ", ids[i]);
        CHECK_INT_EQ(count_in_file(csv, needle) + tail, 2 * (1 + decodes));
    }
    char *check[] = {(char *)phasemark_bin, "check", csv, NULL};
    REQUIRE(pm_child_exec(check, NULL, TIMEOUT, &res) == 0);
    if (!pm_child_ok(&res))
        fprintf(stderr, "check: %s\n%s\n", res.out, res.err);
    CHECK(pm_child_ok(&res));
    const char *const files[] = {"ids.txt", "marker_api_trace.csv", "trace.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[160];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: test_server_http CASE SERVER TINY SLOW GENERATE [PHASEMARK|IDS]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    server_bin = argv[2];
    tiny = argv[3];
    slow = argv[4];
    generate_bin = argv[5];
    phasemark_bin = argc > 6 && argv[6][0] ? argv[6] : NULL;
    struct stat st;
    if (stat(tiny, &st) != 0 || stat(slow, &st) != 0)
        PM_SKIP("the synthetic test models are missing (the server_models fixture did not run)");
    const char *c = argv[1];
    static const struct { const char *driver, *test; int mode; } marks[] = {
        {"marker_driver", "markers", MARK_HOST},
        {"marker_driver_loop", "markers_loop", MARK_LOOP},
        {"marker_driver_tree", "markers_tree", MARK_TREE},
        {"marker_driver_tree_split", "markers_tree_split", MARK_TREE_SPLIT},
        {"marker_driver_tree_remote", "markers_tree_remote", MARK_TREE_REMOTE},
    };
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        if (!strcmp(c, marks[i].driver))
            return argc > 6 ? marker_driver(argv[6], marks[i].mode) : 2;
        if (!strcmp(c, marks[i].test))
            return case_markers(argv[0], marks[i].mode);
    }
    static const struct { const char *name; int (*fn)(void); } cases[] = {
        {"endpoints", case_endpoints},   {"completion", case_completion}, {"stream", case_stream},
        {"chat", case_chat},             {"chat_template", case_chat_template},
        {"stop", case_stop},             {"speculative", case_speculative},
        {"drafters", case_drafters},     {"placement", case_placement},
        {"shard_stall_spawn", case_shard_stall_spawn}, {"api_key", case_api_key},
        {"no_mmap", case_no_mmap},       {"shard_stall_unix", case_shard_stall_unix},
        {"keepalive", case_keepalive},   {"errors", case_errors},
        {"slow_client", case_slow_client}, {"queue_full", case_queue_full},
        {"slowloris", case_slowloris},   {"admission", case_admission}, {"backlog", case_backlog},
        {"retry_hold", case_retry_hold}, {"poll_limit", case_poll_limit}, {"disconnect", case_disconnect},
        {"load", case_load},             {"sigterm", case_sigterm},       {"sigterm_drain0", case_sigterm_drain0},
        {"startup", case_startup},
        {"chat_mistral", case_chat_mistral},
        {"chat_stop_token", case_chat_stop_token},
        {"chat_refuse", case_chat_refuse},
        {"tokenize", case_tokenize},
        {"device_loop", case_device_loop}, {"device_loop_cuda", case_device_loop_cuda},
        {"draft_tree", case_draft_tree}, {"draft_tree_refuse", case_draft_tree_refuse},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!strcmp(c, cases[i].name))
            return cases[i].fn();
    fprintf(stderr, "test_server_http: unknown case '%s'\n", c);
    return 2;
}
