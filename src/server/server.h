/* server.h — the HTTP server library behind `pm-server` (pms_ prefix).
 *
 * An OpenAI-style front end over the engine API (phasemark/engine.h):
 * POST /v1/completions and /v1/chat/completions (streamed as server-sent
 * events or not), GET /v1/models, /health and /metrics. The model is opened
 * once and shared read-only; each worker thread owns one engine session and
 * takes requests from a bounded queue. docs/server.md describes the HTTP
 * surface; this header is the embedding contract used by the pm-server tool
 * and the tests.
 *
 * Ownership: pms_server_create returns a server the caller owns and frees
 * with pms_server_free after pms_server_shutdown. The configuration
 * struct is copied; the strings it points to must outlive the server (the
 * engine may keep paths, e.g. to respawn a shard daemon).
 *
 * Threads: pms_server_* calls come from one controlling thread. The server
 * runs its own HTTP threads (one per connection, libmicrohttpd) and worker
 * threads. Signals are the caller's business: pm-server blocks SIGTERM and
 * SIGINT in every thread and waits for them with sigwait().
 *
 * Errors: 0 on success, negative on failure with one line of detail in the
 * caller's err buffer. The library never prints and never exits.
 */
#ifndef PM_SERVER_H
#define PM_SERVER_H

#include <stddef.h>
#include <stdint.h>

/* One finished request, for an access log. Strings are valid during the
 * call only. */
typedef struct pms_access {
    uint64_t id;              /* X-Request-Id, the markers' req= */
    const char *method;
    const char *path;
    int status;               /* 0: the connection closed without an answer */
    double ms;                /* from the headers' arrival to completion */
    uint64_t prompt_tokens;   /* 0 for requests that generate nothing */
    uint64_t generated_tokens;
    const char *outcome;      /* "length", "stop", "cancelled", "error" or "" */
} pms_access;

/* Called once per request from the connection's thread (any thread; calls
 * may overlap), after its answer went out or the connection closed. */
typedef void (*pms_access_fn)(void *user, const pms_access *a);

/* Start-up configuration (pm-server's command line). */
typedef struct pms_config {
    const char *model_path;  /* GGUF or llama2.c .bin (required) */
    const char *model_id;    /* id served in /v1/models; NULL: file name */
    const char *tokenizer;   /* llama2.c tokenizer.bin; NULL: none */
    const char *host;        /* listen address, IPv4 or IPv6 literal */
    int port;                /* 0: an ephemeral port (pms_server_port) */
    int workers;             /* worker threads = engine sessions */
    int queue;               /* requests waiting beyond the running ones */
    int threads;             /* engine compute threads; 0: all online */
    int ctx;                 /* positions per session; 0: the model's */
    int batch;               /* tokens per forward; 0: the engine's */
    int max_tokens;          /* most tokens one request may ask for */
    size_t max_body;         /* request body limit in bytes (413 above) */
    int timeout_s;           /* idle connection timeout (slow clients) */
    int body_timeout_s;      /* a request body must arrive within this */
    int drain_s;             /* on shutdown, in-flight requests get this long */
    int retry_after_s;       /* Retry-After of a 503 when the queue is full */
    int max_connections;     /* concurrent connections accepted */
    int header_timeout_s;    /* a waiting connection must send a request's
                                headers within this (slowloris) */
    int reserve;             /* connections kept for requests whose headers
                                are in: at most max_connections - reserve
                                may wait for headers; -1: a quarter */
    int http_nice;           /* nice value a refused connection's thread
                                takes (0: none) */
    /* Engine set-up, handed to the engine unchanged: backend to
     * llm_model_open, placement (a layer split, docs/split.md) to every
     * session, draft (a model sharing the target's vocabulary) turns on
     * speculative decoding with draft_k tokens per round. */
    const char *backend;
    const char *draft;
    const char *placement;
    int draft_k;             /* 0: the engine's default (4) */
    const char *drafter;     /* --drafter model|ngram|hybrid|block; NULL:
                                block with --draft-head, model with
                                --draft, else none (ngram needs no draft
                                model) */
    const char *draft_head;  /* --draft-head: the block drafter's head
                                (each worker loads its own) */
    int draft_tree;          /* --draft-tree N: greedy requests verify a
                                tree of up to N block-drafted nodes per
                                round (1..32); sampled ones run chains;
                                0: chains only */
    int device_loop;         /* --device-loop: PMS_DEVICE_LOOP_AUTO (the
                                default: the CUDA device loop for requests
                                it takes, the host paths for the rest),
                                _ON (every request on it: start-up and
                                requests it cannot take are refused) or
                                _OFF (the host paths only) */
    /* Access log (NULL: none). Not set by pms_config_parse except through
     * the caller; pm-server logs to stderr unless --quiet. */
    pms_access_fn access_log;
    void *access_user;
    int quiet;               /* --quiet: the caller should not log */
    /* --api-key: every request but GET /health must carry
     * "Authorization: Bearer KEY" (401 otherwise); NULL: none. A
     * non-loopback --host without it is a usage error unless no_auth
     * (--no-auth) says so explicitly. */
    const char *api_key;
    int no_auth;
    int no_mmap;             /* --no-mmap: read the GGUF weights into
                                memory (llm_model_options.no_mmap) */
    const char *chat_template; /* --chat-template NAME: render chat in
                                  that format whatever the model's
                                  template; NULL: recognize the model's
                                  (an unrecognized one is refused) */
} pms_config;

enum { PMS_DEVICE_LOOP_AUTO = 0, PMS_DEVICE_LOOP_ON = 1, PMS_DEVICE_LOOP_OFF = 2 };

/* Fills *c with the documented defaults (docs/server.md). */
void pms_config_defaults(pms_config *c);

/* Parses pm-server's arguments (argv[0] is skipped) into *c, which should
 * hold the defaults. Strings point into argv. Returns 0, 1 when -h/--help
 * was given, or -1 with one line in err (a usage error). */
int pms_config_parse(pms_config *c, int argc, char **argv, char *err, size_t errlen);

/* Refuses combinations that cannot work (--draft-k without --draft)
 * rather than silently ignoring them. 0, or -1 with err. */
int pms_config_check_engine(const pms_config *c, char *err, size_t errlen);

/* The --help text. */
const char *pms_config_usage(void);

typedef struct pms_server pms_server;

/* Opens the model, creates one session per worker, starts the workers and
 * binds the listener. *out is NULL on failure. */
int pms_server_create(const pms_config *c, pms_server **out, char *err, size_t errlen);

/* The bound TCP port (the real one when the configuration said 0). */
int pms_server_port(const pms_server *s);

/* The id the model is served under. */
const char *pms_server_model_id(const pms_server *s);

/* Graceful shutdown: stop accepting connections, answer requests still
 * waiting in the queue with 503, let running ones finish for up to
 * drain_s seconds, then cancel what is left (those clients get an error),
 * join every thread and close the listener. Idempotent. */
void pms_server_shutdown(pms_server *s);

/* Frees the server (shutting it down first when needed). NULL is
 * harmless. */
void pms_server_free(pms_server *s);

#endif
