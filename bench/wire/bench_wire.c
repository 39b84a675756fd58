/* bench_wire.c — shard wire latency and throughput, side by side.
 *
 * Usage: bench_wire [REPS]   (default 5)
 *
 * One process: an echo shard per connection in its own thread, the client
 * in the main thread. Three connections stay open for the whole run:
 * Unix socket stream, Unix socket shared (memfd), loopback TCP stream.
 * Each repetition runs every case once, interleaved, so background noise
 * hits all cases alike; results are one JSON object per line:
 *  - small: a decode-step forward (1 token in, argmax out), round trip
 *    latency percentiles over many calls;
 *  - body: a forward carrying 1 MiB or 16 MiB of activations (argmax
 *    back), the median round trip and the throughput it implies; for the
 *    shared transport also "in place" (the caller builds the activations in
 *    its area, pmw_conn_payload) and, for both, "consume" (the shard reads
 *    every float, as a real shard would);
 *  - ratio: shared over stream throughput per size.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "phasemark/wire.h"

#define CONSUME_BIT (1ull << 62)
enum { DIM = 4096, SMALL_ITERS = 20000 };

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- the echo shard ---------------------------------------------------- */

typedef struct shard {
    pmw_listener *l;
    pthread_t thread;
    volatile float sink;
} shard;

static int answer(shard *s, pmw_conn *c, const pmw_forward *f, int32_t *ids)
{
    if (f->req_id & CONSUME_BIT) {
        float acc = 0;
        size_t n = (size_t)f->n_tokens * (f->dim ? f->dim : 1);
        for (size_t i = 0; i < n; i++)
            acc += f->dim ? f->activations[i] : (float)f->tokens[i];
        s->sink = acc;
    }
    for (uint32_t t = 0; t < f->n_tokens; t++)
        ids[t] = (int32_t)t;
    pmw_msg r;
    memset(&r, 0, sizeof r);
    r.kind = PMW_MSG_REPLY;
    r.reply = (pmw_reply){f->req_id, f->n_tokens, PMW_OUT_ARGMAX, 0, NULL, ids, 0, 0, 0, NULL};
    return pmw_conn_send(c, &r);
}

static void *serve(void *arg)
{
    shard *s = arg;
    pmw_conn *c = NULL;
    char err[256];
    int32_t *ids = malloc(sizeof(int32_t) * 65536);
    if (!ids || pmw_accept(s->l, 10000, &c, err, sizeof err) != 0) {
        fprintf(stderr, "bench_wire: accept: %s\n", err);
        free(ids);
        return NULL;
    }
    for (;;) {
        pmw_msg m;
        int rc = pmw_conn_recv(c, &m);
        if (rc == PMW_E_TIMEOUT && pmw_conn_usable(c))
            continue;
        if (rc != 0 || m.kind == PMW_MSG_SHUTDOWN)
            break;
        if (answer(s, c, &m.forward, ids) != 0)
            break;
    }
    pmw_conn_close(c);
    free(ids);
    return NULL;
}

typedef struct wlink { /* one client connection and its shard */
    const char *name;
    shard shard;
    pmw_conn *c;
} wlink;

static int open_link(wlink *k, const char *name, const char *addr, int transport)
{
    char err[256];
    pmw_options o;
    pmw_options_default(&o);
    o.transport = transport;
    o.timeout_ms = 30000;
    o.shm_size = 17u << 20;
    k->name = name;
    if (pmw_listen(addr, &o, &k->shard.l, err, sizeof err) != 0 ||
        pthread_create(&k->shard.thread, NULL, serve, &k->shard) != 0 ||
        pmw_connect(pmw_listener_address(k->shard.l), &o, &k->c, err, sizeof err) != 0) {
        fprintf(stderr, "bench_wire: %s: %s\n", name, err);
        return -1;
    }
    return 0;
}

static void close_link(wlink *k)
{
    pmw_msg m;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_SHUTDOWN;
    pmw_conn_send(k->c, &m);
    pthread_join(k->shard.thread, NULL);
    pmw_conn_close(k->c);
    pmw_listener_close(k->shard.l);
}

/* One forward round trip; returns microseconds, or a negative value. */
static double round_trip(pmw_conn *c, const pmw_forward *f)
{
    pmw_msg m, r;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_FORWARD;
    m.forward = *f;
    double t0 = now_us();
    if (pmw_conn_send(c, &m) != 0 || pmw_conn_recv(c, &r) != 0 || r.kind != PMW_MSG_REPLY)
        return -1;
    return now_us() - t0;
}

static void bench_small(wlink *k, int rep)
{
    static double lat[SMALL_ITERS];
    static const int32_t tok[1] = {17};
    pmw_forward f = {PM_PHASE_DECODE, 1, 100, 1, 0, PMW_OUT_ARGMAX, tok, NULL, 0, 0, {0}, 0, {0}};
    for (int i = 0; i < 1000; i++)
        round_trip(k->c, &f);
    for (int i = 0; i < SMALL_ITERS; i++)
        lat[i] = round_trip(k->c, &f);
    qsort(lat, SMALL_ITERS, sizeof lat[0], cmp_double);
    printf("{\"bench\":\"wire\",\"case\":\"small_rt\",\"link\":\"%s\",\"rep\":%d,\"iters\":%d,"
           "\"p50_us\":%.2f,\"p99_us\":%.2f,\"min_us\":%.2f}\n",
           k->name, rep, SMALL_ITERS, lat[SMALL_ITERS / 2], lat[SMALL_ITERS * 99 / 100], lat[0]);
}

/* Median round trip of a forward with n_tokens x DIM activations. */
static double bench_body(wlink *k, const char *variant, int rep, uint32_t n_tokens, int iters,
                         const float *acts, int in_place, int consume)
{
    double *t = malloc(sizeof(double) * (size_t)iters);
    size_t cap = 0;
    float *area = in_place ? pmw_conn_payload(k->c, &cap) : NULL;
    pmw_forward f = {PM_PHASE_VERIFY, consume ? CONSUME_BIT : 2, 0, n_tokens, DIM,
                     PMW_OUT_ARGMAX, NULL, area ? area : acts, 0, 0, {0}, 0, {0}};
    size_t bytes = (size_t)n_tokens * DIM * sizeof(float);
    for (int i = 0; i < iters; i++) {
        if (area) /* the producer writes its output where the wire wants it */
            memcpy(area, acts, bytes);
        t[i] = round_trip(k->c, &f);
    }
    qsort(t, (size_t)iters, sizeof t[0], cmp_double);
    double med = t[iters / 2], mib = (double)bytes / (1024.0 * 1024.0);
    printf("{\"bench\":\"wire\",\"case\":\"body\",\"link\":\"%s\",\"variant\":\"%s\",\"rep\":%d,"
           "\"mib\":%.0f,\"iters\":%d,\"median_us\":%.1f,\"mib_per_s\":%.0f}\n",
           k->name, variant, rep, mib, iters, med, mib / (med / 1e6));
    free(t);
    return mib / (med / 1e6);
}

int main(int argc, char **argv)
{
    int reps = 5;
    if (argc > 1) {
        char *end = NULL;
        long v = strtol(argv[1], &end, 10);
        if (!end || *end || v < 1 || v > 1000) {
            fprintf(stderr, "usage: %s [REPS 1..1000]\n", argv[0]);
            return 2;
        }
        reps = (int)v;
    }
    char dir[] = "/tmp/pmw-bench-XXXXXX", a1[128], a2[128];
    if (!mkdtemp(dir))
        return 1;
    snprintf(a1, sizeof a1, "unix:%s/stream.sock", dir);
    snprintf(a2, sizeof a2, "unix:%s/shared.sock", dir);
    wlink links[3];
    memset(links, 0, sizeof links);
    if (open_link(&links[0], "unix-stream", a1, PMW_TRANSPORT_STREAM) ||
        open_link(&links[1], "unix-shared", a2, PMW_TRANSPORT_SHARED) ||
        open_link(&links[2], "tcp-loopback", "tcp:127.0.0.1:0", PMW_TRANSPORT_STREAM))
        return 1;
    size_t n16 = (size_t)1024 * DIM;
    float *acts = malloc(n16 * sizeof(float));
    for (size_t i = 0; i < n16; i++)
        acts[i] = (float)(i % 977) * 0.01f;
    static const struct { uint32_t tokens; int iters; } sizes[2] = {{64, 200}, {1024, 30}};
    for (int rep = 0; rep < reps; rep++) {
        for (int i = 0; i < 3; i++)
            bench_small(&links[i], rep);
        for (int s = 0; s < 2; s++) {
            uint32_t n = sizes[s].tokens;
            int it = sizes[s].iters;
            bench_body(&links[0], "copy", rep, n, 3, acts, 0, 0); /* warm-up */
            bench_body(&links[1], "copy", rep, n, 3, acts, 0, 0);
            double st = bench_body(&links[0], "copy", rep, n, it, acts, 0, 0);
            double sh = bench_body(&links[1], "copy", rep, n, it, acts, 0, 0);
            double ip = bench_body(&links[1], "in_place", rep, n, it, acts, 1, 0);
            double tc = bench_body(&links[2], "copy", rep, n, it, acts, 0, 0);
            double stc = bench_body(&links[0], "consume", rep, n, it, acts, 0, 1);
            double shc = bench_body(&links[1], "consume", rep, n, it, acts, 0, 1);
            printf("{\"bench\":\"wire\",\"case\":\"ratio\",\"rep\":%d,\"mib\":%u,"
                   "\"shared_over_stream\":%.2f,\"shared_in_place_over_stream\":%.2f,"
                   "\"shared_over_stream_consume\":%.2f,\"tcp_over_unix_stream\":%.2f}\n",
                   rep, n * DIM * 4 >> 20, sh / st, ip / st, shc / stc, tc / st);
        }
        fflush(stdout);
    }
    for (int i = 0; i < 3; i++)
        close_link(&links[i]);
    free(acts);
    rmdir(dir);
    return 0;
}
