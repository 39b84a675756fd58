/* pm-shardd — a target-shard daemon: runs one span of a model's layers for
 * engines that placed those layers on it (docs/split.md).
 *
 *   pm-shardd --model GGUF --layers A-B [--shard N]
 *             (--listen ADDRESS | --fd N) [--backend cpu|cuda:N]
 *             [--threads N] [--ctx N] [--batch N] [--timeout MS]
 *             [--token-file PATH] [--ready-fd N] [--max-conns N]
 *
 * It opens only its span of the GGUF (plus the token embedding when the
 * span starts the model, and the final norm and output head when it ends
 * it) and serves the shard wire: forward requests with their phase and
 * their output request (outputs and rows, returned exactly as asked) and,
 * for a tree verify, the tree (on a CPU daemon), keep (the tree's kept
 * path moved into place), reset, truncate and shutdown. Forwards run
 * through the engine's span runner
 * (runner.h), the same code a session's local shards run; beyond it the
 * daemon uses only the public engine.h. Each connection is one engine session with its
 * own KV cache for the span; a forward's leaf range "pm.layer_range ...
 * where=remote" carries the phase the request carried, never another.
 *
 * --listen binds a Unix socket or TCP address and serves up to --max-conns
 * connections, each on a thread of its own, so a slow, silent or partial
 * peer costs only its own slot; forwards still run one at a time (one
 * runner, behind run_lock) and each reply is copied out of the runner
 * before it is sent, so a client that does not read cannot hold the lock.
 * A client still in its handshake ("pending") has --hello-timeout to finish
 * it; at most PENDING_MAX are pending at once, and a new client evicts the
 * oldest pending one, never a served one. --fd N serves the one connection
 * already on descriptor N (an engine that spawned this daemon) and exits
 * when it closes. Exit status: 0 on a clean stop (connection closed,
 * shutdown, SIGTERM/SIGINT), 1 on failure, 2 on a usage error.
 *
 * Clock alignment (docs/wire.md): the daemon answers clock probes with its
 * CLOCK_BOOTTIME, and hands the offset a client worked out to the
 * phasemark recorder when one is preloaded (phasemark capture), which
 * writes it into this process's raw file; `phasemark capture` then puts
 * this process's ranges on the driver's clock. PHASEMARK_TEST_CLOCK_OFFSET_NS
 * (tests only) shifts the clock it reports, as the recorder shifts its own
 * under the same variable, to play a host whose clock is that far ahead.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT, CLOCK_BOOTTIME */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "phasemark/engine.h"
#include "phasemark/wire.h"
#include "runner.h"

#define PROG "pm-shardd"
#define MAX_CONNS 64
#define PENDING_MAX 4   /* clients in their handshake at once */
#define SLOTS (MAX_CONNS + PENDING_MAX)
#define TOKEN_MAX 128
#define TOKEN_MIN 16      /* bytes, for a non-loopback bind */
#define BACKOFF_SLOTS 64  /* peer addresses remembered after failed handshakes */
#define BACKOFF_MAX_MS 5000

typedef struct options {
    const char *model, *listen, *backend, *token_file;
    long first, last, shard, fd, threads, ctx, batch, timeout_ms, ready_fd, max_conns;
    long hello_ms;
} options;

struct server;

/* Failed authentications from one peer address: its next handshake waits
 * until `until` (ms, monotonic), 100 ms doubled per failure up to 5 s. */
typedef struct backoff {
    char addr[64]; /* "" when free */
    int failures;
    int64_t until;
    uint64_t last_failure; /* s->handshakes when the latest failure was noted */
} backoff;

/* One engine session: its connection and the KV cache of the span. The
 * slot fields (used, pending, done, fd, since) are guarded by the server's
 * lock; the rest belongs to the peer's thread. */
typedef struct peer {
    struct server *s;
    int used;        /* slot taken: a thread runs (or ran) it */
    int pending;     /* in its handshake, not yet counted as served */
    int done;        /* the thread finished; the main loop joins it */
    int evicted;     /* dropped by the accepting loop (pending) */
    int fd;          /* the accepted socket while pending, else -1 */
    uint64_t since;  /* accept count when it came (eviction order: a
                        counter, not a clock, so that ties cannot be) */
    pthread_t th;
    pmw_conn *c;
    llm_span *span;  /* owned, a span of the server's runner */
    uint32_t filled; /* positions held */
    float *values;   /* reply floats copied out of the runner (owned) */
    size_t values_cap;
    float *feat;     /* reply features copied out of the runner (owned) */
    size_t feat_cap;
    int32_t *argmax; /* [n_batch] (owned) */
} peer;

typedef struct server {
    options o;
    llm_model *m;
    llm_model_info info;
    llm_runner *runner;   /* shared by every peer: requests run one at a time */
    pthread_mutex_t run_lock; /* held around every use of runner */
    pthread_mutex_t lock;     /* guards the peers' slot fields and n_served */
    uint32_t n_ctx;
    int32_t n_batch;
    int first, last;      /* the span starts / ends the model */
    pmw_options wopt;
    char token[TOKEN_MAX];
    peer peers[SLOTS];
    backoff backoffs[BACKOFF_SLOTS]; /* guarded by lock */
    int n_served;         /* peers past their handshake */
    uint64_t n_accepted;  /* clients accepted so far (guarded by lock) */
    uint64_t handshakes;  /* handshake outcomes noted so far (guarded by lock) */
    int stop;             /* a shutdown request (atomic) */
    int64_t clock_shift;  /* ns added to the clock it reports (tests) */
    /* The recorder's entry point for a measured offset, when preloaded. */
    int (*record_offset)(int64_t offset_ns, uint64_t bound_ns, uint32_t rounds,
                         const uint8_t driver_boot[16]);
} server;

static volatile sig_atomic_t g_stop; /* set by SIGTERM/SIGINT: the one
                                        process-wide flag a handler needs */

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " --model GGUF --layers A-B [--shard N]\n"
            "       (--listen ADDRESS | --fd N) [--backend B] [--threads N]\n"
            "       [--ctx N] [--batch N] [--timeout MS] [--token-file PATH]\n"
            "       [--ready-fd N] [--max-conns N] [--hello-timeout MS]\n"
            "  --model GGUF      the model file (the engine's own)\n"
            "  --layers A-B      the span this shard runs (A alone: one layer)\n"
            "  --shard N         its index in the placement (markers; default 0)\n"
            "  --listen ADDRESS  unix:PATH, tcp:HOST:PORT (tcp::PORT binds 127.0.0.1)\n"
            "  --fd N            serve the one connection on descriptor N\n"
            "  --backend B       cpu (default), cuda or cuda:N\n"
            "  --threads N       CPU threads (0, the default: all online)\n"
            "  --ctx N           KV positions per connection (default: the model's)\n"
            "  --batch N         most tokens per forward (default 512)\n"
            "  --timeout MS      deadline of one wire call (default 30000)\n"
            "  --token-file PATH shared secret (or PHASEMARK_SHARD_TOKEN); required\n"
            "                    for a non-loopback TCP address\n"
            "  --ready-fd N      write \"ready ADDRESS\\n\" there once listening\n"
            "  --max-conns N     connections served at once (default 8)\n"
            "  --hello-timeout MS deadline of each handshake message (default 2000)\n"
            "  PHASEMARK_TEST_CLOCK_OFFSET_NS (tests only) reports a clock that many ns ahead\n");
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_layers(const char *s, long *first, long *last)
{
    char buf[32];
    if (strlen(s) >= sizeof buf)
        return -1;
    memcpy(buf, s, strlen(s) + 1);
    char *dash = strchr(buf, '-');
    if (dash)
        *dash = '\0';
    if (parse_long(buf, 0, 1 << 20, first))
        return -1;
    if (!dash) {
        *last = *first;
        return 0;
    }
    return parse_long(dash + 1, *first, 1 << 20, last);
}

/* Options taking a number: name, bounds, field. */
static int number_option(options *o, const char *name, const char *val)
{
    static const struct { const char *name; long lo, hi; size_t off; } k[] = {
        {"--shard", 0, 1023, offsetof(options, shard)},
        {"--fd", 0, 1 << 20, offsetof(options, fd)},
        {"--threads", 0, 1024, offsetof(options, threads)},
        {"--ctx", 1, 1 << 22, offsetof(options, ctx)},
        {"--batch", 1, 1 << 16, offsetof(options, batch)},
        {"--timeout", 1, 3600000, offsetof(options, timeout_ms)},
        {"--ready-fd", 0, 1 << 20, offsetof(options, ready_fd)},
        {"--max-conns", 1, MAX_CONNS, offsetof(options, max_conns)},
        {"--hello-timeout", 1, 3600000, offsetof(options, hello_ms)},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        if (strcmp(name, k[i].name) != 0)
            continue;
        long *field = (long *)((char *)o + k[i].off);
        if (parse_long(val, k[i].lo, k[i].hi, field) == 0)
            return 0;
        fprintf(stderr, PROG ": %s: '%s' is not a number in %ld..%ld\n", name, val, k[i].lo,
                k[i].hi);
        return 2;
    }
    return 1; /* not a number option */
}

static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){.first = -1, .shard = 0, .fd = -1, .threads = 0, .ctx = 0, .batch = 512,
                   .timeout_ms = LLM_SPLIT_TIMEOUT_MS, .ready_fd = -1, .max_conns = 8,
                   .hello_ms = 2000};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, PROG ": %s needs a value (or is unknown)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int rc = number_option(o, a, v);
        if (rc == 0)
            continue;
        if (rc == 2)
            return 2;
        if (strcmp(a, "--model") == 0)
            o->model = v;
        else if (strcmp(a, "--listen") == 0)
            o->listen = v;
        else if (strcmp(a, "--backend") == 0)
            o->backend = v;
        else if (strcmp(a, "--token-file") == 0)
            o->token_file = v;
        else if (strcmp(a, "--layers") == 0 && parse_layers(v, &o->first, &o->last) == 0)
            continue;
        else {
            fprintf(stderr, PROG ": bad option %s %s\n", a, v);
            return 2;
        }
    }
    if (!o->model || o->first < 0 || (!o->listen) == (o->fd < 0)) {
        fprintf(stderr, PROG ": --model, --layers and one of --listen / --fd are required\n");
        return 2;
    }
    /* The engine's and the wire's own parsers, so a name or an address is
     * refused here exactly as a placement or a connect would refuse it. */
    llm_backend_name bn;
    pmw_address addr;
    char why[300];
    if (llm_backend_name_parse(o->backend, &bn, why, sizeof why) != 0) {
        fprintf(stderr, PROG ": --backend: %s\n", why);
        return 2;
    }
    if (o->listen && pmw_address_parse(o->listen, &addr, why, sizeof why) != 0) {
        fprintf(stderr, PROG ": --listen: %s\n", why);
        return 2;
    }
    return 0;
}

/* ---- setup ----------------------------------------------------------------- */

/* 1 when the daemon listens only where this machine alone can reach it:
 * a Unix socket or a loopback TCP host (or --fd). Names other than
 * "localhost" count as remote: they are not resolved here. */
static int listen_is_local(const char *listen)
{
    pmw_address a;
    char why[300];
    if (!listen || pmw_address_parse(listen, &a, why, sizeof why) != 0 || a.is_unix)
        return 1;
    return strncmp(a.host, "127.", 4) == 0 || strcmp(a.host, "::1") == 0 ||
           strcmp(a.host, "localhost") == 0;
}

/* A token worth its name: TOKEN_MIN bytes or more, not a short pattern
 * repeated (at least 8 distinct byte values). A floor, not a measure of
 * entropy: the file should hold random bytes. */
static int token_strong(const char *t, size_t n)
{
    unsigned char seen[256] = {0};
    int distinct = 0;
    for (size_t i = 0; i < n; i++)
        distinct += !seen[(unsigned char)t[i]]++;
    return n >= TOKEN_MIN && distinct >= 8;
}

static int read_token(server *s)
{
    const char *env = getenv("PHASEMARK_SHARD_TOKEN");
    size_t n = 0;
    if (s->o.token_file) {
        FILE *f = fopen(s->o.token_file, "rb");
        if (!f) {
            fprintf(stderr, PROG ": %s: %s\n", s->o.token_file, strerror(errno));
            return -1;
        }
        n = fread(s->token, 1, sizeof s->token - 1, f);
        fclose(f);
        while (n > 0 && (s->token[n - 1] == '\n' || s->token[n - 1] == '\r'))
            n--;
    } else if (env && env[0]) {
        n = strlen(env) < sizeof s->token - 1 ? strlen(env) : sizeof s->token - 1;
        memcpy(s->token, env, n);
    }
    s->token[n] = '\0';
    if (!listen_is_local(s->o.listen) && !token_strong(s->token, n)) {
        fprintf(stderr, PROG ": a non-loopback address needs a token of at least %d bytes with "
                "at least 8 distinct byte values (e.g. --token-file with 32 random bytes); "
                "this one has %zu\n", TOKEN_MIN, n);
        return -1;
    }
    if (n) {
        s->wopt.token = s->token;
        s->wopt.token_len = n;
    }
    return 0;
}

static int open_model(server *s)
{
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.backend = s->o.backend;
    mo.n_threads = (int32_t)s->o.threads;
    mo.span_first = (int32_t)s->o.first;
    mo.span_layers = (int32_t)(s->o.last - s->o.first + 1);
    char err[256];
    if (llm_model_open(s->o.model, &mo, &s->m, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return -1;
    }
    llm_model_get_info(s->m, &s->info);
    const llm_model_info *in = &s->info;
    s->first = s->o.first == 0;
    s->last = s->o.last == in->n_layers - 1;
    s->n_ctx = (uint32_t)(s->o.ctx > 0 && s->o.ctx < in->n_ctx_train ? s->o.ctx : in->n_ctx_train);
    s->n_batch = (int32_t)(s->o.batch < (long)s->n_ctx ? s->o.batch : (long)s->n_ctx);
    if (llm_runner_create(s->m, s->n_batch, s->n_ctx, &s->runner, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return -1;
    }
    /* A reply carries up to n_batch rows of logits. */
    size_t width = (size_t)(in->n_vocab > in->dim ? in->n_vocab : in->dim);
    uint64_t need = (uint64_t)s->n_batch * width * sizeof(float) + 4096;
    if (need > s->wopt.limits.max_body && need <= UINT32_MAX)
        s->wopt.limits.max_body = (uint32_t)need;
    return 0;
}

/* Frees what a peer owns; its slot is released by the caller. */
static void drop_peer(server *s, peer *p)
{
    pmw_conn_close(p->c);
    p->c = NULL;
    if (p->span) {
        pthread_mutex_lock(&s->run_lock);
        llm_runner_span_free(s->runner, p->span);
        pthread_mutex_unlock(&s->run_lock);
    }
    p->span = NULL;
    free(p->values);
    free(p->feat);
    p->feat = NULL;
    p->feat_cap = 0;
    free(p->argmax);
    p->values = NULL;
    p->argmax = NULL;
    p->values_cap = 0;
}

/* Gives an authenticated connection its span. 0, or -1 when refused (the
 * error is sent; the caller drops the peer). */
static int add_peer(server *s, peer *p, pmw_conn *c)
{
    char err[256];
    p->c = c;
    p->filled = 0;
    p->argmax = malloc((size_t)s->n_batch * sizeof *p->argmax);
    if (!p->argmax) {
        pmw_conn_send_error(c, LLM_SPLIT_WIRE_CODE(LLM_ENOMEM), 0, "shard daemon: out of memory");
        return -1;
    }
    pthread_mutex_lock(&s->run_lock);
    int rc = llm_runner_span_create(s->runner, (int32_t)s->o.first, (int32_t)s->o.last,
                                    (int32_t)s->o.shard, PM_WHERE_REMOTE, &p->span, err,
                                    sizeof err);
    pthread_mutex_unlock(&s->run_lock);
    if (rc != 0) {
        pmw_conn_send_error(c, LLM_SPLIT_WIRE_CODE(rc), 0, err);
        return -1;
    }
    return 0;
}

/* ---- requests ---------------------------------------------------------------- */

static int refuse(peer *p, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int refuse(peer *p, int status, const char *fmt, ...)
{
    char text[PMW_TEXT_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return pmw_conn_send_error(p->c, LLM_SPLIT_WIRE_CODE(status), 0, text);
}

/* Every id inside the vocabulary; 1 when one is not (refused). */
static int check_tokens(server *s, peer *p, const pmw_forward *f)
{
    for (uint32_t i = 0; i < f->n_tokens; i++)
        if (f->tokens[i] < 0 || f->tokens[i] >= s->info.n_vocab) {
            refuse(p, LLM_ETOKEN, "token %d at index %u is outside the vocabulary of %d",
                   (int)f->tokens[i], (unsigned)i, (int)s->info.n_vocab);
            return 1;
        }
    return 0;
}

/* The output request against the span: logits and argmax come from the
 * span that ends the model, activations from the others, and a boundary
 * carries every row (the next shard needs them all); features from any
 * span, of its own layers only. */
static int check_output(server *s, peer *p, const pmw_forward *f)
{
    uint32_t want_ok = (s->last ? (PMW_OUT_LOGITS | PMW_OUT_ARGMAX) : PMW_OUT_ACTIVATIONS) |
                       PMW_OUT_FEATURES;
    /* The wire checked the list's order and size; the layers must be ours. */
    for (uint32_t j = 0; j < f->n_feat; j++)
        if ((long)f->feat[j] < s->o.first || (long)f->feat[j] > s->o.last) {
            refuse(p, LLM_EINVAL, "features of layer %u asked: this daemon holds layers %ld-%ld",
                   (unsigned)f->feat[j], s->o.first, s->o.last);
            return 1;
        }
    if (f->want & ~want_ok)
        refuse(p, LLM_EINVAL, "outputs %u not available from layers %ld-%ld",
               (unsigned)f->want, s->o.first, s->o.last);
    else if ((f->want & PMW_OUT_ACTIVATIONS) && f->rows != f->n_tokens)
        refuse(p, LLM_EINVAL, "rows %u of %u: activations carry every row", (unsigned)f->rows,
               (unsigned)f->n_tokens);
    else
        return 0;
    return 1;
}

/* The checks a forward must pass before anything runs. 0, or 1 when it
 * was refused (the error reply is sent, or the connection failed trying). */
static int check_forward(server *s, peer *p, const pmw_forward *f)
{
    if (s->first != (f->dim == 0))
        refuse(p, LLM_EINVAL, "layers %ld-%ld take %s", s->o.first, s->o.last,
               s->first ? "token ids" : "activations");
    else if (!s->first && f->dim != (uint32_t)s->info.dim)
        refuse(p, LLM_EINVAL, "activations of width %u, the model's is %d", (unsigned)f->dim,
               (int)s->info.dim);
    else if (check_output(s, p, f))
        return 1;
    else if (f->n_tokens > (uint32_t)s->n_batch)
        refuse(p, LLM_EINVAL, "%u tokens exceed the batch of %d", (unsigned)f->n_tokens,
               (int)s->n_batch);
    else if (f->base_pos > p->filled)
        refuse(p, LLM_ESTATE,
               "base position %u is past the %u positions this shard holds "
               "(restarted daemon? reset the session)",
               (unsigned)f->base_pos, (unsigned)p->filled);
    else if (f->n_tokens > s->n_ctx - f->base_pos)
        refuse(p, LLM_ECTX, "%u tokens at position %u exceed the shard's context of %u",
               (unsigned)f->n_tokens, (unsigned)f->base_pos, (unsigned)s->n_ctx);
    else if (f->n_tree && strcmp(s->m->be->ops->name, "cpu") != 0)
        refuse(p, LLM_EUNSUP, "tree verify needs a CPU shard: this daemon runs on %s",
               s->m->be->ops->name);
    else
        return s->first ? check_tokens(s, p, f) : 0;
    return 1;
}

_Static_assert((int)PMW_OUT_ACTIVATIONS == (int)LLM_OUT_ACTIVATIONS &&
                   (int)PMW_OUT_LOGITS == (int)LLM_OUT_LOGITS &&
                   (int)PMW_OUT_ARGMAX == (int)LLM_OUT_ARGMAX &&
                   (int)PMW_OUT_FEATURES == (int)LLM_OUT_FEATURES &&
                   PMW_FEATURES_MAX == LLM_FEATURES_MAX,
               "the wire's output bits are the runner's");

/* Bytes of the reply body f asks for: rows of floats and/or ids. */
static uint64_t reply_bytes(const server *s, const pmw_forward *f)
{
    uint64_t width = (f->want & PMW_OUT_ACTIVATIONS) ? (uint64_t)s->info.dim
                     : (f->want & PMW_OUT_LOGITS)   ? (uint64_t)s->info.n_vocab
                                                     : 0;
    uint64_t ids = (f->want & PMW_OUT_ARGMAX) ? 4 : 0;
    uint64_t feat = (uint64_t)f->n_feat * f->n_tokens * (uint64_t)s->info.dim * 4;
    return (uint64_t)f->rows * (width * 4 + ids) + feat;
}

/* Runs the forward through the span runner with exactly the outputs and
 * rows the request names (the wire's bits are the runner's, forward.h).
 * The runner is held only while it runs and its outputs are copied into
 * the peer's buffers; the reply is sent after it is released. */
static int handle_forward(server *s, peer *p, const pmw_forward *f)
{
    if (check_forward(s, p, f))
        return 0;
    /* A reply the client said it cannot take is refused before it runs
     * (the cache stays as it was), loudly: the client would otherwise sit
     * out its deadline on a reply never sent. */
    uint64_t need = reply_bytes(s, f), max = pmw_conn_peer_limits(p->c)->max_body;
    if (need > max) {
        fprintf(stderr, PROG ": refused a forward: reply of %llu bytes is over the client's "
                "max_body %llu\n", (unsigned long long)need, (unsigned long long)max);
        char text[160];
        snprintf(text, sizeof text, "reply of %llu bytes is over your max_body %llu",
                 (unsigned long long)need, (unsigned long long)max);
        return pmw_conn_send_error(p->c, PMW_E_BODY_LIMIT, 0, text);
    }
    size_t width = (f->want & PMW_OUT_ACTIVATIONS) ? (size_t)s->info.dim
                   : (f->want & PMW_OUT_LOGITS)   ? (size_t)s->info.n_vocab
                                                   : 0;
    size_t nval = (size_t)f->rows * width;
    if (nval > p->values_cap) {
        float *v = realloc(p->values, nval * sizeof *v);
        if (!v)
            return refuse(p, LLM_ENOMEM, "out of memory for a reply of %zu floats", nval);
        p->values = v;
        p->values_cap = nval;
    }
    /* Features of the asked layers, every token: the runner refuses layers
     * outside the span with its line. */
    size_t nfeat = (size_t)f->n_feat * f->n_tokens * (size_t)s->info.dim;
    if (nfeat > p->feat_cap) {
        float *v = realloc(p->feat, nfeat * sizeof *v);
        if (!v)
            return refuse(p, LLM_ENOMEM, "out of memory for features of %zu floats", nfeat);
        p->feat = v;
        p->feat_cap = nfeat;
    }
    llm_forward_in in = {f->phase, f->req_id, f->base_pos, (int32_t)f->n_tokens, f->tokens,
                         f->activations, {f->want, (int32_t)f->rows, (int32_t)f->n_feat, {0}},
                         NULL};
    for (uint32_t j = 0; j < f->n_feat; j++)
        in.out.feat[j] = (int32_t)f->feat[j];
    /* A tree verify: the wire checked the parents (root first, each before
     * its children), so the depths follow. */
    llm_tree tree;
    if (f->n_tree) {
        tree.n = (int32_t)f->n_tree;
        for (int32_t i = 0; i < tree.n; i++) {
            tree.parent[i] = f->tree_parent[i];
            tree.depth[i] = i ? tree.depth[tree.parent[i]] + 1 : 0;
        }
        in.tree = &tree;
    }
    llm_run_out out = {p->argmax, NULL, NULL, NULL};
    char err[200];
    pthread_mutex_lock(&s->run_lock);
    int rc = llm_runner_run(s->runner, p->span, &in, &out, err, sizeof err);
    const float *src = (f->want & PMW_OUT_ACTIVATIONS) ? out.act : out.logits;
    if (rc == 0 && nval && src)
        memcpy(p->values, src, nval * sizeof *p->values);
    if (rc == 0 && nfeat && out.feat)
        memcpy(p->feat, out.feat, nfeat * sizeof *p->feat);
    pthread_mutex_unlock(&s->run_lock);
    if (rc)
        return refuse(p, rc, "%s", err);
    p->filled = f->base_pos + f->n_tokens;
    pmw_msg r;
    memset(&r, 0, sizeof r);
    r.kind = PMW_MSG_REPLY;
    r.reply.req_id = f->req_id;
    r.reply.n_tokens = f->rows;
    r.reply.outputs = f->want;
    r.reply.width = (uint32_t)width;
    r.reply.values = nval ? p->values : NULL;
    if (f->want & PMW_OUT_ARGMAX)
        r.reply.argmax = p->argmax;
    if (f->n_feat) {
        r.reply.feat_layers = f->n_feat;
        r.reply.feat_rows = f->n_tokens;
        r.reply.feat_dim = (uint32_t)s->info.dim;
        r.reply.features = p->feat;
    }
    rc = pmw_conn_send(p->c, &r);
    if (rc == PMW_E_BODY_LIMIT || rc == PMW_E_META_LIMIT) {
        fprintf(stderr, PROG ": reply not sent: %s\n", pmw_conn_error(p->c));
        return pmw_conn_send_error(p->c, rc, 0, pmw_conn_error(p->c));
    }
    return rc;
}

static int ack(peer *p, uint64_t req);

/* After a tree verify: the kept path's rows move into place. Only rows of
 * the last forward's span of positions exist (the wire checked their
 * order and bounds). */
static int handle_keep(server *s, peer *p, const pmw_keep *k)
{
    if ((uint64_t)k->base_pos + k->rows[k->n_rows - 1] >= p->filled)
        return refuse(p, LLM_EINVAL, "keep rows: row %u at position %u is past the %u positions held",
                      (unsigned)k->rows[k->n_rows - 1], (unsigned)k->base_pos, (unsigned)p->filled);
    int32_t rows[PMW_TREE_MAX];
    for (uint32_t j = 0; j < k->n_rows; j++)
        rows[j] = (int32_t)k->rows[j];
    pthread_mutex_lock(&s->run_lock);
    llm_span_keep_rows(s->m, p->span, k->base_pos, rows, (int32_t)k->n_rows);
    pthread_mutex_unlock(&s->run_lock);
    return ack(p, k->req_id);
}

static int ack(peer *p, uint64_t req)
{
    pmw_msg a;
    memset(&a, 0, sizeof a);
    a.kind = PMW_MSG_ACK;
    a.ack.req_id = req;
    return pmw_conn_send(p->c, &a);
}

static uint64_t clock_now(const server *s)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + (uint64_t)s->clock_shift;
}

/* A probe: the time it came (taken first) and the time of the answer
 * (taken last), so that the server's own time is excluded from the round
 * trip the client measures. */
static int clock_reply(server *s, peer *p, const pmw_msg *m, uint64_t t1)
{
    pmw_msg r;
    memset(&r, 0, sizeof r);
    r.kind = PMW_MSG_CLOCK_REPLY;
    r.clock.round = m->clock.round;
    r.clock.recv_ns = t1;
    r.clock.send_ns = clock_now(s);
    return pmw_conn_send(p->c, &r);
}

/* The offset a client measured goes into this process's capture, when a
 * recorder is there to take it; it is acknowledged either way. */
static int clock_set(server *s, peer *p, const pmw_clock_set *c)
{
    if (s->record_offset)
        s->record_offset(c->offset_ns, c->bound_ns, c->rounds, c->boot_id);
    return ack(p, 0);
}

/* Serves one message from p. Returns 0 to keep the peer, 1 to drop it,
 * 2 to stop the daemon (shutdown). */
static int serve_one(server *s, peer *p)
{
    pmw_msg m;
    int rc = pmw_conn_recv(p->c, &m);
    uint64_t t_recv = clock_now(s);
    if ((rc == PMW_E_TIMEOUT && pmw_conn_usable(p->c)) || pmw_status_is_drainable(rc))
        return 0; /* idle, or refused and already answered */
    if (rc) {
        /* A deadline mid-frame, a broken header or EOF: the connection is
         * done and its slot is freed (docs/wire.md). Only the abnormal
         * ends are logged; a client closing between frames is normal. */
        if (rc != PMW_E_CLOSED)
            fprintf(stderr, PROG ": dropped a client: %s: %s\n", pmw_strerror(rc),
                    pmw_conn_error(p->c));
        return 1;
    }
    switch (m.kind) {
    case PMW_MSG_FORWARD:
        rc = handle_forward(s, p, &m.forward);
        break;
    case PMW_MSG_RESET:
        p->filled = 0;
        rc = ack(p, m.reset.req_id);
        break;
    case PMW_MSG_TRUNCATE:
        if (m.truncate.position > p->filled) {
            rc = refuse(p, LLM_EINVAL, "cannot truncate to %u: only %u positions are held",
                        (unsigned)m.truncate.position, (unsigned)p->filled);
            break;
        }
        p->filled = m.truncate.position;
        rc = ack(p, m.truncate.req_id);
        break;
    case PMW_MSG_KEEP:
        rc = handle_keep(s, p, &m.keep);
        break;
    case PMW_MSG_SHUTDOWN:
        ack(p, 0);
        return 2;
    case PMW_MSG_CLOCK:
        rc = clock_reply(s, p, &m, t_recv);
        break;
    case PMW_MSG_CLOCK_SET:
        rc = clock_set(s, p, &m.clock_set);
        break;
    default:
        rc = pmw_conn_send_error(p->c, PMW_E_KIND, 0, "message kind not served by a shard");
        break;
    }
    return rc == 0 || pmw_conn_usable(p->c) ? 0 : 1;
}

/* ---- loops ----------------------------------------------------------------------- */

static int stopping(server *s)
{
    return g_stop || __atomic_load_n(&s->stop, __ATOMIC_ACQUIRE);
}

/* Serves p until it leaves, fails or the daemon stops. Waiting in poll()
 * rather than in a receive keeps SIGTERM prompt: a receive would sit out
 * its whole deadline first. */
static void peer_loop(server *s, peer *p)
{
    while (!stopping(s)) {
        struct pollfd pfd = {pmw_conn_fd(p->c), POLLIN, 0};
        if (poll(&pfd, 1, 200) <= 0)
            continue;
        int rc = serve_one(s, p);
        if (rc == 2)
            __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
        if (rc)
            break;
    }
}

static int serve_fd(server *s)
{
    char err[256];
    pmw_conn *c;
    if (pmw_conn_server((int)s->o.fd, &s->wopt, &c, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": handshake: %s\n", err);
        return 1;
    }
    peer *p = &s->peers[0];
    p->s = s;
    int rc = add_peer(s, p, c);
    if (rc == 0)
        peer_loop(s, p);
    drop_peer(s, p);
    return rc ? 1 : 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The peer's address as a backoff key: the IP for TCP, "unix" for a Unix
 * socket (every local client shares it). */
static void peer_key(int fd, char *out, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    snprintf(out, cap, "unix");
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0 || ss.ss_family == AF_UNIX)
        return;
    char host[INET6_ADDRSTRLEN] = "";
    const void *ip = ss.ss_family == AF_INET ? (const void *)&((struct sockaddr_in *)&ss)->sin_addr
                                             : (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
    if (inet_ntop(ss.ss_family, ip, host, sizeof host))
        snprintf(out, cap, "%s", host);
}

/* Under s->lock: the entry for key (a free or the stalest one when
 * create, else NULL when there is none). */
static backoff *backoff_find(server *s, const char *key, int create)
{
    backoff *stalest = &s->backoffs[0];
    for (int i = 0; i < BACKOFF_SLOTS; i++) {
        backoff *b = &s->backoffs[i];
        if (strcmp(b->addr, key) == 0)
            return b;
        if (b->until < stalest->until)
            stalest = b;
    }
    if (!create)
        return NULL;
    memset(stalest, 0, sizeof *stalest);
    snprintf(stalest->addr, sizeof stalest->addr, "%s", key);
    return stalest;
}

/* Waits out key's backoff (or until the daemon stops or the peer is
 * evicted). Wrong-token handshakes from one address are so slowed to one
 * per backoff period; parallel ones are bounded by PENDING_MAX. */
static void backoff_wait(server *s, peer *p, const char *key)
{
    for (;;) {
        pthread_mutex_lock(&s->lock);
        backoff *b = backoff_find(s, key, 0);
        int64_t left = b ? b->until - now_ms() : 0;
        int evicted = p->evicted;
        pthread_mutex_unlock(&s->lock);
        if (left <= 0 || evicted || stopping(s))
            return;
        struct timespec ts = {0, (left < 100 ? left : 100) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* The count of outcomes noted so far: a handshake takes it when it starts,
 * so that its success can tell failures noted while it ran. */
static uint64_t backoff_epoch(server *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t epoch = s->handshakes;
    pthread_mutex_unlock(&s->lock);
    return epoch;
}

/* Records the outcome of key's handshake, which started at epoch: a failed
 * authentication doubles its backoff; a success forgets it unless a failure
 * from the address was noted after the success's handshake started (two
 * handshakes in parallel: the later failure must not be erased by a success
 * that merely finished after it). Returns the backoff now set, in ms (0
 * when none). */
static int64_t backoff_note(server *s, const char *key, int rc, uint64_t epoch)
{
    int64_t ms = 0;
    pthread_mutex_lock(&s->lock);
    s->handshakes++;
    backoff *b = backoff_find(s, key, rc == PMW_E_AUTH);
    if (b && rc == PMW_E_AUTH) {
        ms = 100;
        for (int i = 0; i < b->failures && ms < BACKOFF_MAX_MS; i++)
            ms *= 2;
        ms = ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS;
        b->failures++;
        b->until = now_ms() + ms;
        b->last_failure = s->handshakes;
    } else if (b && rc == 0 && b->last_failure <= epoch) {
        memset(b, 0, sizeof *b);
    }
    pthread_mutex_unlock(&s->lock);
    return ms;
}

/* A peer's thread: the handshake under the hello deadline, then the
 * requests under the full one. The accepting loop may evict the peer while
 * it is pending by shutting p->fd down; the handshake runs on a duplicate
 * so that p->fd stays valid for that until this thread clears it. */
static void *peer_thread(void *arg)
{
    peer *p = arg;
    server *s = p->s;
    pmw_options hs = s->wopt;
    hs.timeout_ms = (int)s->o.hello_ms;
    char err[256], key[64];
    pmw_conn *c = NULL;
    peer_key(p->fd, key, sizeof key);
    backoff_wait(s, p, key);
    uint64_t epoch = backoff_epoch(s);
    int fd2 = dup(p->fd);
    int rc = fd2 < 0 ? PMW_E_IO : pmw_conn_server(fd2, &hs, &c, err, sizeof err);
    if (fd2 < 0)
        snprintf(err, sizeof err, "dup: %s", strerror(errno));
    int64_t backoff_ms = backoff_note(s, key, rc, epoch);
    pthread_mutex_lock(&s->lock);
    close(p->fd);
    p->fd = -1;
    p->pending = 0;
    int evicted = p->evicted, full = rc == 0 && s->n_served >= s->o.max_conns;
    int served = rc == 0 && !evicted && !full;
    if (served)
        s->n_served++;
    pthread_mutex_unlock(&s->lock);
    if (rc != 0 && !evicted && backoff_ms > 0)
        fprintf(stderr, PROG ": handshake: %s; the next from %s waits %lld ms\n", err, key, (long long)backoff_ms);
    else if (rc != 0 && !evicted)
        fprintf(stderr, PROG ": handshake: %s\n", err);
    if (full)
        pmw_conn_send_error(c, LLM_SPLIT_WIRE_CODE(LLM_EBACKEND), 0, "shard daemon is full");
    if (served) {
        pmw_conn_set_timeout(c, (int)s->o.timeout_ms);
        p->c = c;
        c = NULL;
        if (add_peer(s, p, p->c) == 0)
            peer_loop(s, p);
        /* The slot is free before the client can see the close, so a
         * client that reconnects at once is not refused as "full". */
        pthread_mutex_lock(&s->lock);
        s->n_served--;
        pthread_mutex_unlock(&s->lock);
        drop_peer(s, p);
    }
    pmw_conn_close(c);
    pthread_mutex_lock(&s->lock);
    p->done = 1;
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Joins the threads that finished and frees their slots. */
static void reap(server *s, int all)
{
    for (int i = 0; i < SLOTS; i++) {
        peer *p = &s->peers[i];
        pthread_mutex_lock(&s->lock);
        int join = p->used && (p->done || all);
        if (all && p->pending && p->fd >= 0)
            shutdown(p->fd, SHUT_RDWR);
        pthread_mutex_unlock(&s->lock);
        if (!join)
            continue;
        pthread_join(p->th, NULL);
        pthread_mutex_lock(&s->lock);
        memset(p, 0, sizeof *p);
        p->fd = -1;
        pthread_mutex_unlock(&s->lock);
    }
}

/* Under s->lock: evicts the oldest pending peer when PENDING_MAX are
 * pending, and returns a free slot (NULL when every slot is taken). */
static peer *take_slot(server *s)
{
    peer *oldest = NULL, *free_slot = NULL;
    int pending = 0;
    for (int i = 0; i < SLOTS; i++) {
        peer *p = &s->peers[i];
        if (!p->used) {
            free_slot = free_slot ? free_slot : p;
            continue;
        }
        if (p->pending && !p->evicted) {
            pending++;
            if (!oldest || p->since < oldest->since)
                oldest = p;
        }
    }
    if (pending >= PENDING_MAX && oldest) {
        oldest->evicted = 1;
        shutdown(oldest->fd, SHUT_RDWR);
    }
    return free_slot;
}

static void announce(server *s, const pmw_listener *l)
{
    if (s->o.ready_fd < 0)
        return;
    char line[300];
    int n = snprintf(line, sizeof line, "ready %s\n", pmw_listener_address(l));
    ssize_t w = write((int)s->o.ready_fd, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : 0);
    (void)w;
    close((int)s->o.ready_fd);
}

static void accept_one(server *s, pmw_listener *l)
{
    char err[256];
    int fd;
    /* poll() said a client is waiting; the short wait only guards a race. */
    int rc = pmw_accept_fd(l, 10, &fd, err, sizeof err);
    if (rc == PMW_E_TIMEOUT || rc == PMW_E_CLOSED)
        return; /* a probe, or a client that left */
    if (rc) {
        fprintf(stderr, PROG ": accept: %s: %s\n", pmw_strerror(rc), err);
        return;
    }
    pthread_mutex_lock(&s->lock);
    peer *p = take_slot(s);
    if (p) {
        memset(p, 0, sizeof *p);
        *p = (peer){.s = s, .used = 1, .pending = 1, .fd = fd, .since = ++s->n_accepted};
        if (pthread_create(&p->th, NULL, peer_thread, p) != 0) {
            p->used = 0;
            p = NULL;
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (!p) {
        fprintf(stderr, PROG ": no slot for a new client (all %d taken)\n", SLOTS);
        close(fd);
    }
}

static int serve_listen(server *s)
{
    char err[256];
    pmw_listener *l;
    if (pmw_listen(s->o.listen, &s->wopt, &l, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    announce(s, l);
    while (!stopping(s)) {
        struct pollfd pfd = {pmw_listener_fd(l), POLLIN, 0};
        int n = poll(&pfd, 1, 100);
        reap(s, 0);
        if (n > 0 && !stopping(s))
            accept_one(s, l);
    }
    pmw_listener_close(l);
    reap(s, 1);
    return 0;
}

/* PHASEMARK_TEST_CLOCK_OFFSET_NS: a signed decimal within a day. 0 or -1. */
static int test_clock_shift(int64_t *out)
{
    const char *v = getenv("PHASEMARK_TEST_CLOCK_OFFSET_NS");
    *out = 0;
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x < -86400000000000LL || x > 86400000000000LL) {
        fprintf(stderr, PROG ": PHASEMARK_TEST_CLOCK_OFFSET_NS '%s' is not a number of ns "
                        "within +-86400 s\n", v);
        return -1;
    }
    *out = x;
    return 0;
}

int main(int argc, char **argv)
{
    server *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    int rc = parse_args(argc, argv, &s->o);
    if (rc) {
        usage(stderr);
        free(s);
        return rc;
    }
    if (test_clock_shift(&s->clock_shift) != 0) {
        free(s);
        return 2;
    }
    /* Found only when the recorder is preloaded (phasemark capture). */
    *(void **)&s->record_offset = dlsym(RTLD_DEFAULT, "phasemark_recorder_clock_offset");
    for (int i = 0; i < SLOTS; i++)
        s->peers[i].fd = -1;
    pthread_mutex_init(&s->run_lock, NULL);
    pthread_mutex_init(&s->lock, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    pmw_options_default(&s->wopt);
    s->wopt.timeout_ms = (int)s->o.timeout_ms;
    if (s->o.hello_ms > s->o.timeout_ms)
        s->o.hello_ms = s->o.timeout_ms;
    rc = read_token(s) || open_model(s) ? 1 : 0;
    if (rc == 0)
        rc = s->o.listen ? serve_listen(s) : serve_fd(s);
    llm_runner_free(s->runner);
    llm_model_free(s->m);
    pthread_mutex_destroy(&s->run_lock);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return rc;
}
