/* test_hostile — pm-shardd against hostile peers (issue 22), one case per
 * invocation:
 *
 *   test_hostile two_writer ids|acts  a thread rewrites the shared region
 *                                     while forwards run: every answer is
 *                                     a reply or a refusal, never a crash
 *   test_hostile silent_peers         a silent, a half-hello and a
 *                                     half-frame peer beside a working one
 *   test_hostile pending_evict        pending clients are bounded; the
 *                                     oldest is dropped first
 *   test_hostile hello_deadline       the hello has its own short deadline
 *   test_hostile partial_frame        a frame cut at the deadline closes
 *                                     its connection and frees its slot
 *   test_hostile max_body             a reply over the announced max_body
 *                                     is an error frame and a log line;
 *                                     max_body 0 is refused at handshake
 *   test_hostile auth_backoff         wrong tokens back off per address
 *   test_hostile auth_backoff_race    a success that began before a failure
 *                                     keeps the failure's backoff
 *   test_hostile token_short          a weak token for a non-loopback bind
 *
 * Daemons listen on Unix sockets under /tmp; deadlines are generous
 * except the one the issue names (a working client served within 100 ms
 * of asking, best of three, beside peers that hold their slots for 20 s).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "phasemark/engine.h"
#include "phasemark/wire.h"
#include "pm_check.h"
#include "split.h"
#include "split_util.h"
#include "synth.h"

#define DIM 64

static char g_model[512];
static char g_sock[100];
static char g_listen[300];

static void make_model(void)
{
    synth_spec sp = synth_default();
    sp.hp.n_layers = 4;
    sp.hp.ctx = 128;
    synth_path(g_model, sizeof g_model, "hostile");
    REQUIRE(synth_write(g_model, &sp) == 0);
    snprintf(g_sock, sizeof g_sock, "/tmp/pm_hostile_%ld.sock", (long)getpid());
    snprintf(g_listen, sizeof g_listen, "unix:%s", g_sock);
}

static int32_t model_vocab(void)
{
    llm_model_options o = LLM_MODEL_OPTIONS_INIT;
    llm_model *m;
    char err[256];
    REQUIRE(llm_model_open(g_model, &o, &m, err, sizeof err) == 0);
    llm_model_info in;
    llm_model_get_info(m, &in);
    llm_model_free(m);
    REQUIRE(in.dim == DIM);
    return in.n_vocab;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int daemon_alive(const su_daemon *d)
{
    return waitpid(d->pid, NULL, WNOHANG) == 0;
}

/* A raw Unix-socket connection to the daemon that speaks no protocol. */
static int raw_connect(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "%s", g_sock);
    REQUIRE(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    return fd;
}

/* 1 when the daemon closed fd (EOF or reset, after any error frame)
 * within ms; 0 when it is still open. */
static int closed_within(int fd, int ms)
{
    double end = now_ms() + ms;
    char buf[512];
    for (;;) {
        int left = (int)(end - now_ms());
        if (left <= 0)
            return 0;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, left) <= 0)
            continue;
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0)
            return 1;
    }
}

/* A client of the wire; NULL when the handshake failed (rc, err say why). */
static pmw_conn *wire_client(const char *address, uint32_t max_body, int *rc, char *err,
                             size_t errlen)
{
    pmw_options o;
    pmw_options_default(&o);
    o.timeout_ms = 10000;
    o.limits.max_body = max_body;
    pmw_conn *c = NULL;
    *rc = pmw_connect(address, &o, &c, err, errlen);
    return c;
}

/* ---- two writers --------------------------------------------------------- */

typedef struct scribbler {
    uint8_t *area;
    size_t len;
    int acts;
    int stop; /* atomic */
    unsigned long passes;
} scribbler;

/* Rewrites the whole first part of the client's area over and over:
 * ids alternate between valid ones and ids far outside any table;
 * activations between finite values, NaN, infinities and huge values. */
static void *scribble(void *arg)
{
    scribbler *w = arg;
    static const uint32_t ids[] = {1u, 0x3fffffffu, 2u, 0x80000000u, 3u, 0x7fffffffu};
    static const uint32_t acts[] = {0x3f800000u, 0x7fc00000u, 0x7f800000u, 0xff800000u,
                                    0x7f7fffffu, 0xbf000000u};
    const uint32_t *pat = w->acts ? acts : ids;
    size_t n = w->len / 4;
    for (unsigned long k = 0; !__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE); k++) {
        uint32_t v = pat[k % 6];
        for (size_t i = 0; i < n; i++)
            __atomic_store_n((uint32_t *)(void *)w->area + i, v, __ATOMIC_RELAXED);
        __atomic_store_n(&w->passes, w->passes + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* Waits until the scribbler has finished a pass after `after` ones, and
 * returns its count: however the threads are scheduled, every forward is
 * sent while the area is being rewritten, never after the scribbler
 * stalled or before it started. */
static unsigned long scribbled_past(scribbler *w, unsigned long after)
{
    unsigned long n;
    while ((n = __atomic_load_n(&w->passes, __ATOMIC_ACQUIRE)) <= after)
        sched_yield();
    return n;
}

static pmw_msg forward(pmw_conn *c, uint32_t n, uint32_t dim, const int32_t *ids,
                       const float *acts, uint32_t want)
{
    pmw_msg m, ans;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_FORWARD;
    m.forward = (pmw_forward){PM_PHASE_EXACT, 9, 0, n, dim, want, ids, acts, n, 0, {0}, 0, {0}};
    memset(&ans, 0, sizeof ans);
    int rc = pmw_conn_send(c, &m);
    if (rc == 0)
        rc = pmw_conn_recv(c, &ans);
    if (rc)
        fprintf(stderr, "forward: %s: %s\n", pmw_strerror(rc), pmw_conn_error(c));
    REQUIRE(rc == 0);
    return ans;
}

/* Forwards of 8 positions at position 0, ROUNDS of them, while a thread
 * rewrites the client's shared area. ids: a first span (token ids) and
 * every answer is a reply of 8 activation rows or LLM_ETOKEN's refusal;
 * acts: a last span (activations) and every answer is a reply of logits.
 * The daemon is alive and in sync afterwards: a clean forward is served. */
#define ROUNDS 400
static int case_two_writer(const char *what)
{
    int acts = strcmp(what, "acts") == 0;
    REQUIRE(acts || strcmp(what, "ids") == 0);
    make_model();
    int32_t V = model_vocab();
    su_daemon d;
    REQUIRE(su_daemon_start(&d, g_model, acts ? 2 : 0, acts ? 3 : 1, acts, g_listen) == 0);
    pmw_options o;
    pmw_options_default(&o);
    o.transport = PMW_TRANSPORT_SHARED;
    o.shm_size = 1 << 16;
    o.timeout_ms = 20000;
    pmw_conn *c = NULL;
    char err[300];
    REQUIRE(pmw_connect(d.address, &o, &c, err, sizeof err) == 0);
    size_t cap = 0;
    uint8_t *area = pmw_conn_payload(c, &cap);
    REQUIRE(area != NULL && cap >= 8 * DIM * sizeof(float));

    int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static float x[8 * DIM];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        x[i] = (float)((int)(i * 37 % 100) - 50) / 25.0f;
    scribbler w = {area, 8 * DIM * sizeof(float), acts, 0, 0};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, scribble, &w) == 0);
    int replies = 0, refusals = 0, other = 0;
    unsigned long seen = 0;
    for (int r = 0; r < ROUNDS && daemon_alive(&d); r++) {
        seen = scribbled_past(&w, seen);
        pmw_msg a = forward(c, 8, acts ? DIM : 0, acts ? NULL : ids, acts ? x : NULL,
                            acts ? PMW_OUT_LOGITS : PMW_OUT_ACTIVATIONS);
        if (a.kind == PMW_MSG_REPLY && a.reply.n_tokens == 8 &&
            a.reply.width == (uint32_t)(acts ? V : DIM))
            replies++;
        else if (!acts && a.kind == PMW_MSG_ERROR &&
                 a.error.code == LLM_SPLIT_WIRE_CODE(LLM_ETOKEN) &&
                 strstr(a.error.text, "is outside the vocabulary of"))
            refusals++;
        else
            other++;
    }
    __atomic_store_n(&w.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    fprintf(stderr, "%s: %d replies, %d refusals, %lu rewrites of the area\n", what, replies,
            refusals, w.passes);
    CHECK(daemon_alive(&d));
    CHECK_INT_EQ(other, 0);
    CHECK_INT_EQ(replies + refusals, ROUNDS);
    CHECK(w.passes >= ROUNDS);
    pmw_msg a = forward(c, 8, acts ? DIM : 0, acts ? NULL : ids, acts ? x : NULL,
                        acts ? PMW_OUT_LOGITS : PMW_OUT_ACTIVATIONS);
    CHECK_INT_EQ(a.kind, PMW_MSG_REPLY);
    pmw_conn_close(c);
    su_daemon_stop(&d, SIGTERM);
    unlink(g_model);
    return pm_check_result();
}

/* ---- one slow peer costs its own slot ------------------------------------ */

/* A working client's handshake and one forward, in ms. */
static double served_ms(const su_daemon *d)
{
    double t0 = now_ms();
    int rc;
    char err[300];
    pmw_conn *c = wire_client(d->address, 1u << 20, &rc, err, sizeof err);
    if (!c) {
        fprintf(stderr, "connect: %s\n", err);
        return 1e9;
    }
    int32_t ids[2] = {3, 4};
    pmw_msg a = forward(c, 2, 0, ids, NULL, PMW_OUT_ACTIVATIONS);
    double t = now_ms() - t0;
    CHECK_INT_EQ(a.kind, PMW_MSG_REPLY);
    pmw_conn_close(c);
    return t;
}

/* Beside a peer that sends nothing, one that sends half a hello and one
 * that stops halfway through a frame after its handshake (a daemon whose
 * deadlines are 20 s, so each would hold a single-threaded loop that
 * long), a working client is served within 100 ms (best of three), and
 * the slow peers are still connected. */
static int case_silent_peers(void)
{
    make_model();
    su_daemon d;
    const char *extra[] = {"--timeout", "20000", "--hello-timeout", "20000", NULL};
    REQUIRE(su_daemon_start_with(&d, g_model, 0, 1, 0, g_listen, extra) == 0);
    int silent = raw_connect();
    int half_hello = raw_connect();
    static const uint8_t hdr[4] = {'P', 'M', 'W', 'F'}; /* a header's first bytes */
    REQUIRE(write(half_hello, hdr, sizeof hdr) == (ssize_t)sizeof hdr);
    int rc;
    char err[300];
    pmw_conn *half_frame = wire_client(d.address, 1u << 20, &rc, err, sizeof err);
    REQUIRE(half_frame != NULL);
    REQUIRE(write(pmw_conn_fd(half_frame), hdr, sizeof hdr) == (ssize_t)sizeof hdr);
    double best = 1e9;
    for (int i = 0; i < 3; i++) {
        double t = served_ms(&d);
        best = t < best ? t : best;
    }
    fprintf(stderr, "working client served in %.2f ms (best of 3)\n", best);
    CHECK(best <= 100.0);
    CHECK_INT_EQ(closed_within(silent, 50), 0);
    CHECK_INT_EQ(closed_within(half_hello, 50), 0);
    CHECK(daemon_alive(&d));
    close(silent);
    close(half_hello);
    pmw_conn_close(half_frame);
    su_daemon_stop(&d, SIGTERM);
    unlink(g_model);
    return pm_check_result();
}

/* Six clients that never finish their hello (the hello deadline is 20 s):
 * at most four are pending, so the daemon drops the first two, and a
 * working client, arriving after them, evicts the next oldest (the third)
 * and is served; the last three are still connected. */
static int case_pending_evict(void)
{
    make_model();
    su_daemon d;
    const char *extra[] = {"--hello-timeout", "20000", NULL};
    REQUIRE(su_daemon_start_with(&d, g_model, 0, 1, 0, g_listen, extra) == 0);
    int fd[6];
    for (int i = 0; i < 6; i++)
        fd[i] = raw_connect();
    CHECK_INT_EQ(closed_within(fd[0], 5000), 1);
    CHECK_INT_EQ(closed_within(fd[1], 5000), 1);
    double t = served_ms(&d);
    CHECK(t < 5000);
    CHECK_INT_EQ(closed_within(fd[2], 5000), 1);
    for (int i = 3; i < 6; i++)
        CHECK_INT_EQ(closed_within(fd[i], 200), 0);
    for (int i = 0; i < 6; i++)
        close(fd[i]);
    su_daemon_stop(&d, SIGTERM);
    unlink(g_model);
    return pm_check_result();
}

/* A client that sends nothing is closed at the hello deadline (300 ms),
 * not the wire deadline (60 s); the daemon answers with an error frame
 * first, which the closing read consumes. */
static int case_hello_deadline(void)
{
    make_model();
    su_daemon d;
    const char *extra[] = {"--timeout", "60000", "--hello-timeout", "300", NULL};
    REQUIRE(su_daemon_start_with(&d, g_model, 0, 1, 0, g_listen, extra) == 0);
    int fd = raw_connect();
    CHECK_INT_EQ(closed_within(fd, 10000), 1);
    close(fd);
    CHECK(served_ms(&d) < 10000);
    su_daemon_stop(&d, SIGTERM);
    unlink(g_model);
    return pm_check_result();
}

/* With --max-conns 1 and a 300 ms deadline, a client that stops in the
 * middle of a frame is closed and its slot freed: the next client is
 * served rather than refused as "full". */
static int case_partial_frame(void)
{
    make_model();
    su_daemon d;
    const char *extra[] = {"--timeout", "300", "--max-conns", "1", NULL};
    REQUIRE(su_daemon_start_with(&d, g_model, 0, 1, 0, g_listen, extra) == 0);
    int rc;
    char err[300];
    pmw_conn *c = wire_client(d.address, 1u << 20, &rc, err, sizeof err);
    REQUIRE(c != NULL);
    static const uint8_t hdr[4] = {'P', 'M', 'W', 'F'}; /* a header's first bytes */
    REQUIRE(write(pmw_conn_fd(c), hdr, sizeof hdr) == (ssize_t)sizeof hdr);
    CHECK_INT_EQ(closed_within(pmw_conn_fd(c), 10000), 1);
    pmw_conn_close(c);
    CHECK(served_ms(&d) < 10000);
    su_daemon_stop(&d, SIGTERM);
    unlink(g_model);
    return pm_check_result();
}

/* Points this process's stderr at path (a daemon started meanwhile
 * inherits it), and back. */
static int g_saved_stderr = -1;
static void stderr_to(const char *path)
{
    fflush(stderr);
    g_saved_stderr = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0 && g_saved_stderr >= 0);
    dup2(fd, 2);
    close(fd);
}

static void stderr_back(void)
{
    fflush(stderr);
    dup2(g_saved_stderr, 2);
    close(g_saved_stderr);
}

static int file_has(const char *path, const char *text)
{
    char buf[8192];
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, text) != NULL;
}

/* A client announcing max_body 64 asks a last span for one row of logits
 * (4 * n_vocab bytes): the answer is PMW_E_BODY_LIMIT naming both sizes,
 * the daemon logs it, and the connection goes on (ids, 8 bytes, fit). A
 * hello with max_body 0 is refused with PMW_E_VALUE. */
static int case_max_body(void)
{
    make_model();
    int32_t V = model_vocab();
    char log[300];
    snprintf(log, sizeof log, "/tmp/pm_hostile_%ld.log", (long)getpid());
    su_daemon d;
    stderr_to(log);
    int started = su_daemon_start(&d, g_model, 2, 3, 1, g_listen);
    stderr_back();
    REQUIRE(started == 0);
    int rc;
    char err[300], want[200];
    pmw_conn *c = wire_client(d.address, 64, &rc, err, sizeof err);
    REQUIRE(c != NULL);
    static float x[DIM];
    pmw_msg m, a;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_FORWARD;
    m.forward = (pmw_forward){PM_PHASE_EXACT, 9, 0, 1, DIM, PMW_OUT_LOGITS, NULL, x, 1, 0, {0}, 0, {0}};
    /* The request itself (256 bytes of activations) is ours to send: our
     * limit is the daemon's max_body, not 64. */
    REQUIRE(pmw_conn_send(c, &m) == 0);
    REQUIRE(pmw_conn_recv(c, &a) == 0);
    CHECK_INT_EQ(a.kind, PMW_MSG_ERROR);
    CHECK_INT_EQ(a.error.code, PMW_E_BODY_LIMIT);
    snprintf(want, sizeof want, "reply of %d bytes is over your max_body 64", (int)V * 4);
    CHECK(strstr(a.error.text, want) != NULL);
    m.forward.want = PMW_OUT_ARGMAX;
    REQUIRE(pmw_conn_send(c, &m) == 0);
    REQUIRE(pmw_conn_recv(c, &a) == 0);
    CHECK_INT_EQ(a.kind, PMW_MSG_REPLY);
    pmw_conn_close(c);
    snprintf(want, sizeof want, "pm-shardd: refused a forward: reply of %d bytes is over the "
             "client's max_body 64", (int)V * 4);
    CHECK(file_has(log, want));

    c = wire_client(d.address, 0, &rc, err, sizeof err);
    CHECK(c == NULL);
    CHECK_INT_EQ(rc, PMW_E_VALUE);
    CHECK(strstr(err, "max_body 0 (no reply could be sent)") != NULL);
    CHECK(daemon_alive(&d));
    su_daemon_stop(&d, SIGTERM);
    unlink(log);
    unlink(g_model);
    return pm_check_result();
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs(text, f);
    fclose(f);
}

static int connect_token(const su_daemon *d, const char *token, char *err, size_t errlen)
{
    pmw_options o;
    pmw_options_default(&o);
    o.timeout_ms = 20000;
    o.token = token;
    o.token_len = strlen(token);
    pmw_conn *c = NULL;
    int rc = pmw_connect(d->address, &o, &c, err, errlen);
    pmw_conn_close(c);
    return rc;
}

/* A handshake with the right token, then one forward on the connection:
 * the daemon notes a handshake's outcome (a success clears the backoff)
 * before it serves anything, so the reply means the backoff is clear. */
static int connect_served(const su_daemon *d, const char *token, char *err, size_t errlen)
{
    pmw_options o;
    pmw_options_default(&o);
    o.timeout_ms = 20000;
    o.token = token;
    o.token_len = strlen(token);
    pmw_conn *c = NULL;
    int rc = pmw_connect(d->address, &o, &c, err, errlen);
    if (rc == 0) {
        int32_t ids[2] = {3, 4};
        pmw_msg a = forward(c, 2, 0, ids, NULL, PMW_OUT_ACTIVATIONS);
        CHECK_INT_EQ(a.kind, PMW_MSG_REPLY);
    }
    pmw_conn_close(c);
    return rc;
}

/* The backoffs the daemon announced in log so far ("...; the next from
 * unix waits N ms"), up to cap of them; returns how many. */
static int logged_waits(const char *path, long *ms, int cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int n = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        const char *w = strstr(line, "pm-shardd: handshake: authentication failed; the next from unix waits ");
        if (w && n < cap)
            ms[n++] = strtol(w + 70, NULL, 10);
    }
    fclose(f);
    return n;
}

/* Waits (20 s at most) until the daemon has announced n backoffs. */
static void await_waits(const char *path, int n)
{
    long ms[16];
    double end = now_ms() + 20000;
    struct timespec pause = {0, 2 * 1000000L};
    while (logged_waits(path, ms, 16) < n && now_ms() < end)
        nanosleep(&pause, NULL);
    REQUIRE(logged_waits(path, ms, 16) >= n);
}

/* Wrong tokens from one address back off 100, 200, 400, 800 ms and a
 * right one clears it. Nothing here rests on how fast the machine is:
 * the daemon announces each failure's backoff on stderr once it is in
 * force, and each attempt starts only after that line (so it must wait
 * the backoff out); an attempt then ends no sooner than the backoff after
 * the previous attempt began (the failure is noted after that, to the ms).
 * The announced values are exact: four wrong tokens, the right one (which
 * waits 800 ms, and is served a forward, so the daemon has cleared the
 * backoff), then a wrong one again, whose backoff is back at 100. */
static int case_auth_backoff(void)
{
    make_model();
    char tok[128], log[128];
    snprintf(tok, sizeof tok, "/tmp/pm_hostile_%ld.token", (long)getpid());
    snprintf(log, sizeof log, "/tmp/pm_hostile_%ld.log", (long)getpid());
    const char *good = "0123456789abcdefGHIJ", *bad = "wrong-token-wrong-token";
    write_file(tok, good);
    su_daemon d;
    const char *extra[] = {"--token-file", tok, NULL};
    stderr_to(log);
    int started = su_daemon_start_with(&d, g_model, 0, 1, 0, g_listen, extra);
    stderr_back();
    REQUIRE(started == 0);
    char err[300];
    double t0[5], t1[5];
    for (int i = 0; i < 5; i++) {
        t0[i] = now_ms();
        if (i < 4)
            CHECK_INT_EQ(connect_token(&d, bad, err, sizeof err), PMW_E_AUTH);
        else
            CHECK_INT_EQ(connect_served(&d, good, err, sizeof err), 0);
        t1[i] = now_ms();
        if (i < 4)
            await_waits(log, i + 1);
    }
    static const long want[] = {100, 200, 400, 800, 100};
    for (int i = 1; i < 5; i++) {
        if (t1[i] - t0[i - 1] < (double)want[i - 1] - 1.0)
            fprintf(stderr, "attempt %d ended %.1f ms after the one before began\n", i, t1[i] - t0[i - 1]);
        CHECK(t1[i] - t0[i - 1] >= (double)want[i - 1] - 1.0);
    }
    CHECK_INT_EQ(connect_token(&d, bad, err, sizeof err), PMW_E_AUTH);
    await_waits(log, 5);
    long got[16];
    CHECK_INT_EQ(logged_waits(log, got, 16), 5);
    for (int i = 0; i < 5; i++)
        CHECK_INT_EQ(got[i], want[i]);
    CHECK(daemon_alive(&d));
    su_daemon_stop(&d, SIGTERM);
    unlink(tok);
    unlink(log);
    unlink(g_model);
    return pm_check_result();
}

/* A byte relay between a client's socketpair end and the daemon that holds
 * the daemon's bytes back until opened, so a handshake can be stalled after
 * the daemon has begun it (it answers the client's hello). */
typedef struct gated_relay {
    int client, daemon;
    pthread_mutex_t mu;
    int daemon_spoke, open, stop;
} gated_relay;

static void *relay_run(void *arg)
{
    gated_relay *r = arg;
    char held[4096];
    size_t n_held = 0;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int open = r->open, stop = r->stop;
        pthread_mutex_unlock(&r->mu);
        if (stop)
            return NULL;
        if (open && n_held > 0) {
            REQUIRE(write(r->client, held, n_held) == (ssize_t)n_held);
            n_held = 0;
        }
        struct pollfd pf[2] = {{r->client, POLLIN, 0}, {r->daemon, POLLIN, 0}};
        if (n_held == sizeof held)
            pf[1].fd = -1;
        if (poll(pf, 2, 5) <= 0)
            continue;
        char buf[4096];
        if (pf[0].revents) {
            ssize_t k = read(r->client, buf, sizeof buf);
            if (k <= 0)
                return NULL;
            REQUIRE(write(r->daemon, buf, (size_t)k) == k);
        }
        if (pf[1].fd >= 0 && pf[1].revents) {
            ssize_t k = read(r->daemon, held + n_held, sizeof held - n_held);
            if (k <= 0)
                return NULL;
            n_held += (size_t)k;
            pthread_mutex_lock(&r->mu);
            r->daemon_spoke = 1;
            pthread_mutex_unlock(&r->mu);
        }
    }
}

typedef struct client_job {
    int fd;
    const char *token;
    pmw_conn *c;
    int rc;
    char err[300];
} client_job;

static void *client_run(void *arg)
{
    client_job *j = arg;
    pmw_options o;
    pmw_options_default(&o);
    o.timeout_ms = 20000;
    o.token = j->token;
    o.token_len = strlen(j->token);
    j->rc = pmw_conn_client(j->fd, &o, &j->c, j->err, sizeof j->err);
    return NULL;
}

/* Two handshakes from one address in parallel: a right token's begins
 * (the daemon has answered its hello), a wrong token's fails meanwhile
 * (backoff 100 ms), then the right one completes and is served. The
 * failure came after the success began, so it is not forgotten: the next
 * wrong token's backoff is 200 ms, not 100 as after a fresh start. */
static int case_auth_backoff_race(void)
{
    make_model();
    char tok[128], log[128];
    snprintf(tok, sizeof tok, "/tmp/pm_hostile_%ld.token", (long)getpid());
    snprintf(log, sizeof log, "/tmp/pm_hostile_%ld.log", (long)getpid());
    const char *good = "0123456789abcdefGHIJ", *bad = "wrong-token-wrong-token";
    write_file(tok, good);
    su_daemon d;
    const char *extra[] = {"--token-file", tok, NULL};
    stderr_to(log);
    int started = su_daemon_start_with(&d, g_model, 0, 1, 0, g_listen, extra);
    stderr_back();
    REQUIRE(started == 0);

    int sp[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
    gated_relay r = {.client = sp[1], .daemon = raw_connect()};
    pthread_mutex_init(&r.mu, NULL);
    client_job job = {.fd = sp[0], .token = good};
    pthread_t relay, client;
    REQUIRE(pthread_create(&relay, NULL, relay_run, &r) == 0);
    REQUIRE(pthread_create(&client, NULL, client_run, &job) == 0);
    double end = now_ms() + 20000;
    struct timespec pause = {0, 2 * 1000000L};
    for (int spoke = 0; !spoke && now_ms() < end; nanosleep(&pause, NULL)) {
        pthread_mutex_lock(&r.mu);
        spoke = r.daemon_spoke;
        pthread_mutex_unlock(&r.mu);
    }
    char err[300];
    CHECK_INT_EQ(connect_token(&d, bad, err, sizeof err), PMW_E_AUTH);
    await_waits(log, 1);
    pthread_mutex_lock(&r.mu);
    r.open = 1;
    pthread_mutex_unlock(&r.mu);
    pthread_join(client, NULL);
    CHECK_INT_EQ(job.rc, 0);
    if (job.rc == 0) {
        int32_t ids[2] = {3, 4};
        pmw_msg a = forward(job.c, 2, 0, ids, NULL, PMW_OUT_ACTIVATIONS);
        CHECK_INT_EQ(a.kind, PMW_MSG_REPLY);
    }
    CHECK_INT_EQ(connect_token(&d, bad, err, sizeof err), PMW_E_AUTH);
    await_waits(log, 2);
    long got[16];
    CHECK_INT_EQ(logged_waits(log, got, 16), 2);
    CHECK_INT_EQ(got[0], 100);
    CHECK_INT_EQ(got[1], 200);
    pmw_conn_close(job.c);
    pthread_mutex_lock(&r.mu);
    r.stop = 1;
    pthread_mutex_unlock(&r.mu);
    pthread_join(relay, NULL);
    close(sp[1]);
    close(r.daemon);
    pthread_mutex_destroy(&r.mu);
    CHECK(daemon_alive(&d));
    su_daemon_stop(&d, SIGTERM);
    unlink(tok);
    unlink(log);
    unlink(g_model);
    return pm_check_result();
}

/* A non-loopback bind with a short or patterned token exits 1 naming the
 * rule, before anything is bound; loopback accepts any token. */
static int case_token_short(void)
{
    make_model();
    char tok[128], log[128], cmd[1200];
    snprintf(tok, sizeof tok, "/tmp/pm_hostile_%ld.token", (long)getpid());
    snprintf(log, sizeof log, "/tmp/pm_hostile_%ld.log", (long)getpid());
    static const char *const tokens[] = {"x", "abababababababababab"};
    for (size_t i = 0; i < 2; i++) {
        write_file(tok, tokens[i]);
        snprintf(cmd, sizeof cmd, "'%s' --model '%s' --layers 0-1 --listen tcp:0.0.0.0:0 "
                 "--token-file '%s' 2>'%s'", PM_SHARDD, g_model, tok, log);
        int st = system(cmd);
        CHECK(WIFEXITED(st));
        CHECK_INT_EQ(WEXITSTATUS(st), 1);
        CHECK(file_has(log, "pm-shardd: a non-loopback address needs a token of at least 16 bytes"));
    }
    write_file(tok, "x");
    su_daemon d;
    const char *extra[] = {"--token-file", tok, NULL};
    CHECK_INT_EQ(su_daemon_start_with(&d, g_model, 0, 1, 0, g_listen, extra), 0);
    su_daemon_stop(&d, SIGTERM);
    unlink(tok);
    unlink(log);
    unlink(g_model);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 3 && strcmp(argv[1], "two_writer") == 0)
        return case_two_writer(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "silent_peers") == 0)
        return case_silent_peers();
    if (argc >= 2 && strcmp(argv[1], "pending_evict") == 0)
        return case_pending_evict();
    if (argc >= 2 && strcmp(argv[1], "hello_deadline") == 0)
        return case_hello_deadline();
    if (argc >= 2 && strcmp(argv[1], "partial_frame") == 0)
        return case_partial_frame();
    if (argc >= 2 && strcmp(argv[1], "max_body") == 0)
        return case_max_body();
    if (argc >= 2 && strcmp(argv[1], "auth_backoff") == 0)
        return case_auth_backoff();
    if (argc >= 2 && strcmp(argv[1], "auth_backoff_race") == 0)
        return case_auth_backoff_race();
    if (argc >= 2 && strcmp(argv[1], "token_short") == 0)
        return case_token_short();
    fprintf(stderr, "usage: test_hostile CASE\n");
    return 2;
}
