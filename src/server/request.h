/* request.h — completion and chat request bodies, parsed and validated.
 *
 * pms_req_parse turns a JSON body into a typed request or an HTTP error:
 * every field the server honours is type- and range-checked here, before
 * anything is queued, so a worker only ever sees a valid request. Fields the
 * server does not implement are ignored, as OpenAI-compatible servers do
 * (clients send many optional ones), except those whose silent omission
 * would change the answer (n > 1, echo, best_of > 1, logprobs), which are
 * refused with 400.
 *
 * Ownership: a parsed pms_req owns its strings and ids; pms_req_free
 * releases them (a zeroed or failed request is safe to free).
 */
#ifndef PM_SERVER_REQUEST_H
#define PM_SERVER_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "chat.h"

#define PMS_MAX_STOP 4      /* OpenAI's limit on stop strings */
#define PMS_MAX_STOP_LEN 256 /* bytes per stop string */

/* An HTTP error answer: status, OpenAI error type and code, the offending
 * parameter (or NULL), and a message. */
typedef struct pms_err {
    int status;
    const char *type;  /* "invalid_request_error", "server_error", ... */
    const char *code;  /* NULL or "model_not_found", ... */
    const char *param; /* NULL or the field name */
    char msg[256];
} pms_err;

/* Fills *e (message printf-style). Returns -1 so callers can return it. */
int pms_err_set(pms_err *e, int status, const char *type, const char *code, const char *param,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));

typedef enum pms_endpoint { PMS_EP_COMPLETIONS, PMS_EP_CHAT } pms_endpoint;

/* What the parser must know about the server. */
typedef struct pms_parse_ctx {
    const char *model_id;    /* a "model" other than this is 404 */
    int32_t n_vocab;         /* token ids must be below this */
    int32_t max_tokens_cap;  /* max_tokens above this is 400 */
    int32_t max_prompt_ids;  /* longest id prompt accepted */
    pms_chat_format chat;    /* how chat messages become a prompt */
} pms_parse_ctx;

typedef struct pms_req {
    pms_endpoint ep;
    char *text;            /* prompt text (completions string, rendered chat) */
    size_t text_len;
    int32_t *ids;          /* prompt ids when given as an array */
    size_t n_ids;
    int32_t max_tokens;    /* 0: not given (the server picks) */
    float temperature;     /* default 1 */
    float top_p;           /* default 1 */
    int32_t top_k;         /* default 0 (off) */
    uint64_t seed;
    int has_seed;
    char *stop[PMS_MAX_STOP + 1];   /* one more for an implicit stop */
    size_t stop_len[PMS_MAX_STOP + 1];
    size_t n_stop;
    int stream;
    int include_usage;     /* stream_options.include_usage */
} pms_req;

/* Parses len bytes of body for endpoint ep. 0, or -1 with *e filled (400
 * for bad JSON, types and ranges; 404 for an unknown model). */
int pms_req_parse(pms_req *r, pms_endpoint ep, const char *body, size_t len, const pms_parse_ctx *ctx,
                  pms_err *e);

/* Adds an implicit stop string (a chat format's end of turn) unless it is
 * already present; the array keeps a slot for it. 0, or -1 when out of memory. */
int pms_req_add_stop(pms_req *r, const char *stop);

void pms_req_free(pms_req *r);

#endif
