/* tokenize.c — POST /tokenize and POST /detokenize, in llama.cpp's
 * server's shapes (docs/server.md):
 *
 *   /tokenize    {"content": STRING, "add_special": BOOL, "with_pieces": BOOL}
 *                -> {"tokens": [ID, ...]}
 *                   or {"tokens": [{"id": ID, "piece": STRING | [BYTE, ...]}, ...]}
 *   /detokenize  {"tokens": [ID, ...]} -> {"content": STRING}
 *
 * Both run on the HTTP thread: the tokenizer is immutable and thread-safe,
 * and its cost is linear in a body that --max-body already bounds, so they
 * take no worker. A bad body is a 400 with one line naming the field.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define BAD "invalid_request_error"

static int oom(pms_err *e)
{
    return pms_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

/* The body as a JSON object; NULL with *e. */
static json_t *load_object(const char *body, size_t len, pms_err *e)
{
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        pms_err_set(e, 400, BAD, NULL, NULL, "invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        pms_err_set(e, 400, BAD, NULL, NULL, "the body must be a JSON object");
        return NULL;
    }
    return o;
}

/* An optional boolean (absent or null: dflt). 0, or -1 with *e. */
static int opt_bool(json_t *o, const char *key, int dflt, int *out, pms_err *e)
{
    json_t *v = json_object_get(o, key);
    *out = dflt;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return pms_err_set(e, 400, BAD, NULL, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

static int tok_status(int rc, pms_err *e)
{
    if (rc == LLM_ESTATE)
        return pms_err_set(e, 400, BAD, NULL, NULL, "the model has no tokenizer");
    if (rc == LLM_ENOMEM)
        return oom(e);
    return pms_err_set(e, 500, "server_error", NULL, NULL, "tokenization failed: %s", llm_strerror(rc));
}

/* The decoded bytes of one token into b (cleared first); prev as
 * llm_model_token_text takes it. */
static int token_bytes(const pms_server *s, int32_t prev, int32_t id, pms_buf *b, pms_err *e)
{
    char small[256];
    size_t n = 0;
    pms_buf_clear(b);
    int rc = llm_model_token_text(s->model, prev, id, small, sizeof small, &n);
    if (rc == 0)
        return pms_buf_append(b, small, n) ? oom(e) : 0;
    if (rc != LLM_ESPACE)
        return tok_status(rc, e);
    if (pms_buf_reserve(b, n))
        return oom(e);
    rc = llm_model_token_text(s->model, prev, id, b->p, n, &n);
    if (rc)
        return tok_status(rc, e);
    b->n = n;
    b->p[n] = '\0';
    return 0;
}

/* A piece as llama.cpp shows it: a string when its bytes are valid
 * UTF-8, else the list of its byte values. */
static json_t *piece_json(const pms_buf *b)
{
    pms_buf fixed;
    pms_buf_init(&fixed, 0);
    int valid = pms_utf8_repair(&fixed, b->p ? b->p : "", b->n) == 0 && fixed.n == b->n &&
                (b->n == 0 || memcmp(fixed.p, b->p, b->n) == 0);
    pms_buf_free(&fixed);
    if (valid)
        return json_stringn(b->p ? b->p : "", b->n);
    json_t *a = json_array();
    for (size_t i = 0; a && i < b->n; i++)
        if (json_array_append_new(a, json_integer((unsigned char)b->p[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *tokens_json(const pms_server *s, const int32_t *ids, size_t n, int with_pieces, pms_err *e)
{
    json_t *a = json_array();
    pms_buf b;
    pms_buf_init(&b, 0);
    for (size_t i = 0; a && i < n; i++) {
        json_t *v;
        if (!with_pieces) {
            v = json_integer(ids[i]);
        } else {
            if (token_bytes(s, -1, ids[i], &b, e)) {
                json_decref(a);
                a = NULL;
                break;
            }
            json_t *p = piece_json(&b);
            v = p ? json_pack("{s:I, s:o}", "id", (json_int_t)ids[i], "piece", p) : NULL;
        }
        if (!v || json_array_append_new(a, v)) {
            json_decref(a);
            a = NULL;
        }
    }
    pms_buf_free(&b);
    if (!a && !e->status)
        oom(e);
    return a;
}

char *pms_tokenize_answer(const pms_server *s, const char *body, size_t len, pms_err *e)
{
    json_t *o = load_object(body, len, e);
    if (!o)
        return NULL;
    char *out = NULL;
    int32_t *ids = NULL;
    int add = 0, pieces = 0;
    json_t *c = json_object_get(o, "content");
    if (!c)
        pms_err_set(e, 400, BAD, NULL, "content", "'content' is required");
    else if (!json_is_string(c))
        pms_err_set(e, 400, BAD, NULL, "content", "'content' must be a string");
    else if (!opt_bool(o, "add_special", 0, &add, e) && !opt_bool(o, "with_pieces", 0, &pieces, e)) {
        const char *text = json_string_value(c);
        size_t tl = json_string_length(c), n = 0;
        /* Count first, then tokenize into an exact allocation. */
        int rc = llm_model_tokenize(s->model, text, tl, add, NULL, 0, &n);
        if (rc == LLM_ESPACE && !(ids = malloc(n * sizeof *ids)))
            oom(e);
        else if (rc == LLM_ESPACE)
            rc = llm_model_tokenize(s->model, text, tl, add, ids, n, &n);
        if (rc && rc != LLM_ESPACE)
            tok_status(rc, e);
        if (!e->status) {
            json_t *t = tokens_json(s, ids, n, pieces, e);
            json_t *w = t ? json_pack("{s:o}", "tokens", t) : NULL;
            out = w ? json_dumps(w, JSON_COMPACT) : NULL;
            json_decref(w);
            if (!out && !e->status)
                oom(e);
        }
    }
    free(ids);
    json_decref(o);
    return out;
}

char *pms_detokenize_answer(const pms_server *s, const char *body, size_t len, pms_err *e)
{
    json_t *o = load_object(body, len, e);
    if (!o)
        return NULL;
    char *out = NULL;
    json_t *a = json_object_get(o, "tokens");
    if (!a)
        pms_err_set(e, 400, BAD, NULL, "tokens", "'tokens' is required");
    else if (!json_is_array(a))
        pms_err_set(e, 400, BAD, NULL, "tokens", "'tokens' must be an array of token ids");
    for (size_t i = 0; !e->status && i < json_array_size(a); i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v)) {
            pms_err_set(e, 400, BAD, NULL, "tokens", "'tokens'[%zu] is not an integer", i);
        } else if (json_integer_value(v) < 0 || json_integer_value(v) >= s->info.n_vocab) {
            pms_err_set(e, 400, BAD, NULL, "tokens", "'tokens'[%zu] = %lld is outside the vocabulary (0..%d)", i,
                        (long long)json_integer_value(v), (int)s->info.n_vocab - 1);
        }
    }
    pms_buf text, piece;
    pms_buf_init(&text, 0);
    pms_buf_init(&piece, 0);
    int32_t prev = -1;
    for (size_t i = 0; !e->status && i < json_array_size(a); i++) {
        int32_t id = (int32_t)json_integer_value(json_array_get(a, i));
        if (!token_bytes(s, prev, id, &piece, e) && pms_buf_append(&text, piece.p ? piece.p : "", piece.n))
            oom(e);
        prev = id;
    }
    if (!e->status) {
        /* Bytes that are not valid UTF-8 (a token sequence cut inside a
         * character) become U+FFFD, as in completions. */
        pms_buf fixed;
        pms_buf_init(&fixed, 0);
        json_t *w = NULL;
        if (pms_utf8_repair(&fixed, text.p ? text.p : "", text.n) == 0)
            w = json_pack("{s:s%}", "content", fixed.p ? fixed.p : "", fixed.n);
        out = w ? json_dumps(w, JSON_COMPACT) : NULL;
        json_decref(w);
        pms_buf_free(&fixed);
        if (!out)
            oom(e);
    }
    pms_buf_free(&text);
    pms_buf_free(&piece);
    json_decref(o);
    return out;
}
