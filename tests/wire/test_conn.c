/* test_conn.c — the wire over real sockets: round trips of every message
 * kind, every malformed input with the reply it must produce, dead and
 * stalled peers, authentication, limits. Run as: test_wire_conn CASE
 * TRANSPORT, with TRANSPORT one of stream (Unix socket), shared (Unix
 * socket + memfd region) or tcp (127.0.0.1, ephemeral port).
 *
 * The server side runs in a thread (or, for the dead-peer cases, the
 * other side runs in a forked child that is killed mid-frame; those cases
 * use no threads so fork is safe). Expected values come from the formulas
 * below, computed independently on the client side.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pm_check.h"
#include "phasemark/wire.h"

static const char *g_transport = "stream";
/* Set before the server thread starts: answer clock probes as a daemon
 * that predates them. */
static int g_refuse_clock;
static char g_dir[64];

/* ---- the echo shard ------------------------------------------------------ */

static float act_val(const pmw_forward *f, uint32_t t, uint32_t j)
{
    return f->dim ? f->activations[(size_t)t * f->dim + j] * 2.0f : (float)f->tokens[t] + 0.25f * (float)j;
}

static float logit_val(uint32_t base, uint32_t t, uint32_t j)
{
    return (float)base + (float)t + 0.5f * (float)j;
}

static int32_t argmax_val(const pmw_forward *f, uint32_t t)
{
    return (f->dim ? (int32_t)t : f->tokens[t]) + 1;
}

typedef struct server_ctx {
    pmw_listener *l;
    int fd;              /* socketpair end when there is no listener */
    pmw_options opt;
    int accept_rc;
    char accept_err[256];
    int codes[64];
    int ncodes;
    char last_err[256];
    uint32_t truncate_pos;
    uint32_t probes;     /* clock probes answered */
    pmw_clock_set clock_set; /* the last CLOCK_SET received */
    pthread_t thread;
} server_ctx;

/* The echo shard's clock runs this far ahead of the client's. */
#define SERVER_CLOCK_AHEAD_NS INT64_C(5000000000)

static uint64_t boottime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int reply_clock(server_ctx *s, pmw_conn *c, const pmw_msg *m)
{
    uint64_t t1 = boottime_ns() + SERVER_CLOCK_AHEAD_NS;
    if (g_refuse_clock)
        return pmw_conn_send_error(c, PMW_E_KIND, 0, "message kind not served by a shard");
    pmw_msg r;
    memset(&r, 0, sizeof r);
    r.kind = PMW_MSG_CLOCK_REPLY;
    r.clock.round = m->clock.round;
    r.clock.recv_ns = t1;
    r.clock.send_ns = boottime_ns() + SERVER_CLOCK_AHEAD_NS;
    s->probes++;
    return pmw_conn_send(c, &r);
}

static int reply_forward(pmw_conn *c, const pmw_forward *f)
{
    if (f->req_id == 666)
        return pmw_conn_send_error(c, PMW_E_APP_BASE - 1, PMW_TAG_REQ_ID, "request 666 refused\n");
    pmw_msg r;
    memset(&r, 0, sizeof r);
    r.kind = PMW_MSG_REPLY;
    r.reply.req_id = f->req_id;
    r.reply.n_tokens = f->n_tokens;
    r.reply.outputs = f->want;
    uint32_t width = (f->want & PMW_OUT_ACTIVATIONS) ? (f->dim ? f->dim : 3)
                     : (f->want & PMW_OUT_LOGITS)    ? 5
                                                     : 0;
    size_t nf = (size_t)f->n_tokens * width, cap = 0;
    /* On the shared transport, logits are built in place in our area (the
     * zero-copy send path); everything else goes through a private buffer. */
    float *in_place = (f->want & PMW_OUT_LOGITS) ? pmw_conn_payload(c, &cap) : NULL;
    float *vals = in_place ? in_place : malloc((nf + f->n_tokens + 1) * sizeof(float));
    int32_t *ids = (int32_t *)(vals + nf);
    for (uint32_t t = 0; t < f->n_tokens; t++) {
        for (uint32_t j = 0; j < width; j++)
            vals[(size_t)t * width + j] = (f->want & PMW_OUT_LOGITS) ? logit_val(f->base_pos, t, j)
                                                                     : act_val(f, t, j);
        ids[t] = argmax_val(f, t);
    }
    r.reply.width = width;
    r.reply.values = width ? vals : NULL;
    r.reply.argmax = (f->want & PMW_OUT_ARGMAX) ? ids : NULL;
    int rc = pmw_conn_send(c, &r);
    if (!in_place)
        free(vals);
    return rc;
}

/* Handles one message; returns 1 after a shutdown. */
static int handle(server_ctx *s, pmw_conn *c, const pmw_msg *m)
{
    pmw_msg a;
    memset(&a, 0, sizeof a);
    a.kind = PMW_MSG_ACK;
    switch (m->kind) {
    case PMW_MSG_FORWARD:
        return reply_forward(c, &m->forward) ? -1 : 0;
    case PMW_MSG_RESET:
        a.ack.req_id = m->reset.req_id;
        break;
    case PMW_MSG_TRUNCATE:
        a.ack.req_id = m->truncate.req_id;
        s->truncate_pos = m->truncate.position;
        break;
    case PMW_MSG_SHUTDOWN:
        pmw_conn_send(c, &a);
        return 1;
    case PMW_MSG_CLOCK:
        return reply_clock(s, c, m) ? -1 : 0;
    case PMW_MSG_CLOCK_SET:
        s->clock_set = m->clock_set;
        break;
    default:
        return -1;
    }
    return pmw_conn_send(c, &a) ? -1 : 0;
}

static void serve_conn(server_ctx *s, pmw_conn *c)
{
    int idle = 0;
    while (s->ncodes < 64) {
        pmw_msg m;
        int rc = pmw_conn_recv(c, &m);
        s->codes[s->ncodes++] = rc;
        snprintf(s->last_err, sizeof s->last_err, "%s", pmw_conn_error(c));
        if (rc == 0 && handle(s, c, &m) != 0)
            break;
        if (rc == PMW_E_TIMEOUT && pmw_conn_usable(c) && ++idle < 3)
            continue;
        if (rc != 0 && !pmw_status_is_drainable(rc))
            break;
    }
}

static void *serve(void *arg)
{
    server_ctx *s = arg;
    pmw_conn *c = NULL;
    if (s->l)
        s->accept_rc = pmw_accept(s->l, 5000, &c, s->accept_err, sizeof s->accept_err);
    else
        s->accept_rc = pmw_conn_server(s->fd, &s->opt, &c, s->accept_err, sizeof s->accept_err);
    if (s->accept_rc == 0)
        serve_conn(s, c);
    pmw_conn_close(c);
    return NULL;
}

/* ---- setup ---------------------------------------------------------------- */

static int is_tcp(void)
{
    return strcmp(g_transport, "tcp") == 0;
}

static pmw_options client_opts(void)
{
    pmw_options o;
    pmw_options_default(&o);
    o.transport = strcmp(g_transport, "shared") == 0 ? PMW_TRANSPORT_SHARED : PMW_TRANSPORT_STREAM;
    o.shm_size = 1 << 20;
    return o;
}

static const char *listen_address(char *buf, size_t len)
{
    if (is_tcp())
        return "tcp:127.0.0.1:0";
    snprintf(g_dir, sizeof g_dir, "/tmp/pmw-test-XXXXXX");
    REQUIRE(mkdtemp(g_dir) != NULL);
    snprintf(buf, len, "unix:%s/shard.sock", g_dir);
    return buf;
}

static void start_server(server_ctx *s, const pmw_options *sopt)
{
    char addr[128], err[256];
    memset(s, 0, sizeof *s);
    s->fd = -1;
    if (sopt)
        s->opt = *sopt;
    else
        pmw_options_default(&s->opt);
    int rc = pmw_listen(listen_address(addr, sizeof addr), &s->opt, &s->l, err, sizeof err);
    if (rc)
        fprintf(stderr, "listen: %s\n", err);
    REQUIRE(rc == 0);
    REQUIRE(pthread_create(&s->thread, NULL, serve, s) == 0);
}

static pmw_conn *connect_client(server_ctx *s, const pmw_options *copt)
{
    char err[256];
    pmw_conn *c = NULL;
    pmw_options o = copt ? *copt : client_opts();
    int rc = pmw_connect(pmw_listener_address(s->l), &o, &c, err, sizeof err);
    if (rc)
        fprintf(stderr, "connect: %s (%s)\n", err, pmw_strerror(rc));
    REQUIRE(rc == 0 && c != NULL);
    CHECK_INT_EQ(pmw_conn_transport(c), o.transport);
    return c;
}

static void stop_server(server_ctx *s)
{
    pthread_join(s->thread, NULL);
    pmw_listener_close(s->l);
    if (g_dir[0])
        rmdir(g_dir);
}

/* ---- client helpers ------------------------------------------------------- */

static int recv_ok(pmw_conn *c, pmw_msg *m, pmw_kind kind)
{
    int rc = pmw_conn_recv(c, m);
    if (rc)
        fprintf(stderr, "recv: %s (%s)\n", pmw_strerror(rc), pmw_conn_error(c));
    CHECK_INT_EQ(rc, 0);
    if (rc == 0 && m->kind == PMW_MSG_ERROR)
        fprintf(stderr, "error reply: %d %s\n", m->error.code, m->error.text);
    CHECK_INT_EQ(rc == 0 ? (int)m->kind : -1, kind);
    return rc == 0 && m->kind == kind;
}

static pmw_msg token_forward(const int32_t *toks, uint32_t n, uint32_t base, uint32_t want)
{
    pmw_msg m;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_FORWARD;
    m.forward.phase = PM_PHASE_EXACT;
    m.forward.req_id = 7;
    m.forward.base_pos = base;
    m.forward.n_tokens = n;
    m.forward.want = want;
    m.forward.tokens = toks;
    return m;
}

/* A forward of tokens {5, 9, 11} for logits + argmax; checks the reply. */
static void valid_forward(pmw_conn *c)
{
    static const int32_t toks[3] = {5, 9, 11};
    pmw_msg m = token_forward(toks, 3, 10, PMW_OUT_LOGITS | PMW_OUT_ARGMAX);
    CHECK_INT_EQ(pmw_conn_send(c, &m), 0);
    pmw_msg r;
    if (!recv_ok(c, &r, PMW_MSG_REPLY))
        return;
    CHECK_U64_EQ(r.reply.req_id, 7);
    CHECK_INT_EQ(r.reply.n_tokens, 3);
    CHECK_INT_EQ(r.reply.outputs, PMW_OUT_LOGITS | PMW_OUT_ARGMAX);
    CHECK_INT_EQ(r.reply.width, 5);
    REQUIRE(r.reply.values && r.reply.argmax);
    CHECK_NEAR(r.reply.values[0], 10.0, 0);
    CHECK_NEAR(r.reply.values[4], 12.0, 0);     /* base 10 + t 0 + 4 * 0.5 */
    CHECK_NEAR(r.reply.values[2 * 5 + 3], 13.5, 0);
    CHECK_INT_EQ(r.reply.argmax[0], 6);
    CHECK_INT_EQ(r.reply.argmax[2], 12);
}

static void shutdown_server(pmw_conn *c)
{
    pmw_msg m, r;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_SHUTDOWN;
    CHECK_INT_EQ(pmw_conn_send(c, &m), 0);
    if (recv_ok(c, &r, PMW_MSG_ACK))
        CHECK_U64_EQ(r.ack.req_id, 0);
}

/* ---- round trips -------------------------------------------------------- */

static void roundtrip_body(pmw_conn *c, server_ctx *s)
{
    pmw_msg m, r;
    valid_forward(c);
    /* Activations in, activations out (doubled). */
    enum { N = 16, DIM = 4096 };
    float *acts = malloc(sizeof(float) * N * DIM);
    for (int i = 0; i < N * DIM; i++)
        acts[i] = (float)(i % 1000) * 0.125f - 3.0f;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_FORWARD;
    m.forward = (pmw_forward){PM_PHASE_VERIFY, 42, 100, N, DIM, PMW_OUT_ACTIVATIONS, NULL, acts, 0, 0, {0}, 0, {0}};
    CHECK_INT_EQ(pmw_conn_send(c, &m), 0);
    if (recv_ok(c, &r, PMW_MSG_REPLY)) {
        CHECK_U64_EQ(r.reply.req_id, 42);
        CHECK_INT_EQ(r.reply.width, DIM);
        CHECK(r.reply.argmax == NULL);
        int bad = 0;
        for (int i = 0; i < N * DIM; i++)
            bad += r.reply.values[i] != ((float)(i % 1000) * 0.125f - 3.0f) * 2.0f;
        CHECK_INT_EQ(bad, 0);
    }
    free(acts);
    /* Shared transport: the activations built in place in our area (no
     * copy on send), then read back doubled. */
    size_t cap = 0;
    float *area = pmw_conn_payload(c, &cap);
    CHECK((area != NULL) == (pmw_conn_transport(c) == PMW_TRANSPORT_SHARED));
    if (area) {
        REQUIRE(cap >= 8 * sizeof(float));
        for (int i = 0; i < 8; i++)
            area[i] = (float)i;
        memset(&m, 0, sizeof m);
        m.kind = PMW_MSG_FORWARD;
        m.forward = (pmw_forward){PM_PHASE_EXACT, 43, 0, 2, 4, PMW_OUT_ACTIVATIONS, NULL, area, 0, 0, {0}, 0, {0}};
        CHECK_INT_EQ(pmw_conn_send(c, &m), 0);
        if (recv_ok(c, &r, PMW_MSG_REPLY))
            CHECK_NEAR(r.reply.values[7], 14.0, 0);
    }
    /* Decode step, argmax only. */
    static const int32_t one[1] = {41};
    m = token_forward(one, 1, 13, PMW_OUT_ARGMAX);
    m.forward.phase = PM_PHASE_DECODE;
    CHECK_INT_EQ(pmw_conn_send(c, &m), 0);
    if (recv_ok(c, &r, PMW_MSG_REPLY)) {
        CHECK(r.reply.values == NULL);
        CHECK_INT_EQ(r.reply.width, 0);
        CHECK_INT_EQ(r.reply.argmax[0], 42);
    }
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_RESET;
    m.reset.req_id = 0xfedcba9876543210ull;
    CHECK_INT_EQ(pmw_conn_send(c, &m), 0);
    if (recv_ok(c, &r, PMW_MSG_ACK))
        CHECK_U64_EQ(r.ack.req_id, 0xfedcba9876543210ull);
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_TRUNCATE;
    m.truncate.req_id = 9;
    m.truncate.position = 4000000000u;
    CHECK_INT_EQ(pmw_conn_send(c, &m), 0);
    if (recv_ok(c, &r, PMW_MSG_ACK))
        CHECK_U64_EQ(r.ack.req_id, 9);
    /* An application error reply: code, tag and text (newline made a space). */
    m = token_forward(one, 1, 0, PMW_OUT_ARGMAX);
    m.forward.req_id = 666;
    CHECK_INT_EQ(pmw_conn_send(c, &m), 0);
    if (recv_ok(c, &r, PMW_MSG_ERROR)) {
        CHECK_INT_EQ(r.error.code, -101);
        CHECK_INT_EQ(r.error.tag, PMW_TAG_REQ_ID);
        CHECK_STR_EQ(r.error.text, "request 666 refused ");
    }
    valid_forward(c);
    shutdown_server(c);
    (void)s;
}

static int case_roundtrip(void)
{
    server_ctx s;
    start_server(&s, NULL);
    pmw_conn *c = connect_client(&s, NULL);
    roundtrip_body(c, &s);
    pmw_conn_close(c);
    stop_server(&s);
    CHECK_INT_EQ(s.accept_rc, 0);
    CHECK_INT_EQ(s.truncate_pos, 4000000000u);
    for (int i = 0; i < s.ncodes; i++)
        CHECK_INT_EQ(s.codes[i], 0);
    return pm_check_result();
}

/* Clock probes against a server 5 s ahead: 8 rounds, an offset within
 * its stated bound of -5 s, and the server told exactly what the client
 * worked out. The bound is a round trip on a busy loopback: under 1 s. */
static int case_clock_sync(void)
{
    server_ctx s;
    start_server(&s, NULL);
    pmw_conn *c = connect_client(&s, NULL);
    pmw_clock_estimate est;
    CHECK_INT_EQ(pmw_conn_clock_sync(c, 8, &est), 0);
    CHECK_INT_EQ(est.rounds, 8);
    CHECK(est.best < 8);
    CHECK(est.bound_ns < 1000000000u);
    CHECK_U64_EQ(est.bound_ns, est.rtt_ns / 2 + (est.rtt_ns & 1));
    int64_t miss = est.offset_ns + SERVER_CLOCK_AHEAD_NS;
    if (!(miss >= -(int64_t)est.bound_ns && miss <= (int64_t)est.bound_ns))
        fprintf(stderr, "offset %lld, bound %llu\n", (long long)est.offset_ns,
                (unsigned long long)est.bound_ns);
    CHECK(miss >= -(int64_t)est.bound_ns && miss <= (int64_t)est.bound_ns);
    valid_forward(c); /* the connection goes on as before */
    CHECK_INT_EQ(pmw_conn_clock_sync(c, 0, &est), PMW_E_ARG);
    CHECK_INT_EQ(pmw_conn_clock_sync(c, PMW_CLOCK_ROUNDS_MAX + 1, &est), PMW_E_ARG);
    pmw_conn_close(c);
    stop_server(&s);
    CHECK_INT_EQ(s.probes, 8);
    CHECK(s.clock_set.offset_ns == est.offset_ns);
    CHECK_U64_EQ(s.clock_set.bound_ns, est.bound_ns);
    CHECK_INT_EQ(s.clock_set.rounds, 8);
    /* The client's boot id came along: this host's, as /proc says. */
    FILE *bf = fopen("/proc/sys/kernel/random/boot_id", "r");
    char text[64] = "", mine[40] = "";
    if (bf) {
        if (!fgets(text, sizeof text, bf))
            text[0] = 0;
        fclose(bf);
        for (int i = 0, n = 0; i < 16; i++)
            n += snprintf(mine + n, sizeof mine - (size_t)n, "%s%02x",
                          i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", s.clock_set.boot_id[i]);
        CHECK(strncmp(text, mine, 36) == 0);
    }
    /* 8 probes, the set, the forward, then the client's close. */
    CHECK_INT_EQ(s.ncodes, 11);
    for (int i = 0; i + 1 < s.ncodes; i++)
        CHECK_INT_EQ(s.codes[i], 0);
    CHECK_INT_EQ(s.codes[s.ncodes - 1], PMW_E_CLOSED);
    return pm_check_result();
}

/* A server that predates clock alignment refuses the first probe; the
 * client gets the refusal's code and the connection still serves. */
static int case_clock_refused(void)
{
    server_ctx s;
    g_refuse_clock = 1;
    start_server(&s, NULL);
    pmw_conn *c = connect_client(&s, NULL);
    pmw_clock_estimate est;
    CHECK_INT_EQ(pmw_conn_clock_sync(c, 8, &est), PMW_E_KIND);
    CHECK_INT_EQ(pmw_conn_usable(c), 1);
    valid_forward(c);
    pmw_conn_close(c);
    stop_server(&s);
    CHECK_INT_EQ(s.probes, 0);
    return pm_check_result();
}

static int case_roundtrip_auth(void)
{
    pmw_options so, co = client_opts();
    pmw_options_default(&so);
    so.token = co.token = "correct horse battery staple";
    so.token_len = co.token_len = strlen(so.token);
    server_ctx s;
    start_server(&s, &so);
    pmw_conn *c = connect_client(&s, &co);
    roundtrip_body(c, &s);
    pmw_conn_close(c);
    stop_server(&s);
    CHECK_INT_EQ(s.accept_rc, 0);
    return pm_check_result();
}

static int case_socketpair(void)
{
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    server_ctx s;
    memset(&s, 0, sizeof s);
    pmw_options_default(&s.opt);
    s.fd = sv[1];
    REQUIRE(pthread_create(&s.thread, NULL, serve, &s) == 0);
    pmw_options o = client_opts();
    pmw_conn *c = NULL;
    char err[256];
    int rc = pmw_conn_client(sv[0], &o, &c, err, sizeof err);
    if (rc)
        fprintf(stderr, "client: %s\n", err);
    REQUIRE(rc == 0);
    roundtrip_body(c, &s);
    pmw_conn_close(c);
    pthread_join(s.thread, NULL);
    CHECK_INT_EQ(s.accept_rc, 0);
    return pm_check_result();
}

/* ---- drainable malformed frames ------------------------------------------ */

typedef struct bad_forward {
    int phase;        /* -1: omit */
    int dup_phase;
    int extra_tag;
    int seq_back;     /* send with next_seq - seq_back (0: the right one) */
} bad_forward;

static void send_bad_forward(pmw_conn *c, const bad_forward *b)
{
    uint8_t meta[128];
    pmw_meta w;
    pmw_meta_init(&w, meta, sizeof meta);
    if (b->phase >= 0)
        pmw_meta_u8(&w, PMW_TAG_PHASE, (uint8_t)b->phase);
    pmw_meta_u64(&w, PMW_TAG_REQ_ID, 7);
    pmw_meta_u32(&w, PMW_TAG_BASE_POS, 0);
    pmw_meta_u32(&w, PMW_TAG_N_TOKENS, 2);
    pmw_meta_u8(&w, PMW_TAG_WANT, PMW_OUT_ARGMAX);
    if (b->dup_phase)
        pmw_meta_u8(&w, PMW_TAG_PHASE, PM_PHASE_EXACT);
    if (b->extra_tag)
        pmw_meta_u32(&w, (uint16_t)b->extra_tag, 1);
    const int32_t body[2] = {1, 2};
    uint64_t seq = b->seq_back ? pmw_conn_next_seq(c) - (uint64_t)b->seq_back : 0;
    CHECK_INT_EQ(pmw_conn_send_frame(c, PMW_MSG_FORWARD, seq, meta, w.len, body, sizeof body), 0);
}

/* The reply to a drainable frame: an error naming code, tag and text; then
 * the same connection serves a valid request. */
static void expect_rejected_at(server_ctx *s, pmw_conn *c, int first, int code, unsigned tag,
                               const char *text)
{
    pmw_msg r;
    if (recv_ok(c, &r, PMW_MSG_ERROR)) {
        CHECK_INT_EQ(r.error.code, code);
        CHECK_INT_EQ(r.error.tag, tag);
        if (!strstr(r.error.text, text))
            fprintf(stderr, "error text \"%s\" lacks \"%s\"\n", r.error.text, text);
        CHECK(strstr(r.error.text, text) != NULL);
    }
    valid_forward(c);
    shutdown_server(c);
    pmw_conn_close(c);
    stop_server(s);
    CHECK_INT_EQ(s->accept_rc, 0);
    CHECK(s->ncodes > first);
    for (int i = 0; i < s->ncodes; i++)
        CHECK_INT_EQ(s->codes[i], i == first ? code : 0);
}

static void expect_rejected(server_ctx *s, pmw_conn *c, int code, unsigned tag, const char *text)
{
    expect_rejected_at(s, c, 0, code, tag, text);
}

static int drainable(bad_forward b, int code, unsigned tag, const char *text)
{
    server_ctx s;
    start_server(&s, NULL);
    pmw_conn *c = connect_client(&s, NULL);
    if (b.seq_back)
        valid_forward(c); /* so that an earlier number exists */
    send_bad_forward(c, &b);
    expect_rejected_at(&s, c, b.seq_back ? 1 : 0, code, tag, text);
    return pm_check_result();
}

static int case_missing_phase(void)
{
    return drainable((bad_forward){-1, 0, 0, 0}, PMW_E_MISSING, PMW_TAG_PHASE,
                     "forward: required tag 1 (phase) missing");
}

static int case_dup_phase(void)
{
    return drainable((bad_forward){1, 1, 0, 0}, PMW_E_REPEATED, PMW_TAG_PHASE,
                     "forward: tag 1 (phase) repeated");
}

static int case_unknown_tag(void)
{
    return drainable((bad_forward){1, 0, 200, 0}, PMW_E_UNKNOWN_TAG, 200,
                     "forward: tag 200 (unknown) unknown");
}

static int case_bad_phase(void)
{
    return drainable((bad_forward){9, 0, 0, 0}, PMW_E_PHASE, PMW_TAG_PHASE,
                     "tag 1 (phase) value 9 out of range");
}

static int case_batched_phase(void)
{
    return drainable((bad_forward){4, 0, 0, 0}, PMW_E_PHASE, PMW_TAG_PHASE,
                     "value 4 (batched) is not a shard phase");
}

static int case_stale_seq(void)
{
    return drainable((bad_forward){1, 0, 0, 1}, PMW_E_SEQUENCE, 0, "is stale or duplicated");
}

static int case_wrong_kind(void)
{
    server_ctx s;
    start_server(&s, NULL);
    pmw_conn *c = connect_client(&s, NULL);
    uint8_t meta[64];
    pmw_meta w;
    pmw_meta_init(&w, meta, sizeof meta);
    pmw_meta_u64(&w, PMW_TAG_REQ_ID, 1);
    CHECK_INT_EQ(pmw_conn_send_frame(c, PMW_MSG_ACK, 0, meta, w.len, NULL, 0), 0);
    expect_rejected(&s, c, PMW_E_KIND, 0, "ack is not allowed from a client");
    return pm_check_result();
}

/* Shared transport: a reference outside the area, and one whose payload
 * was never published (stale). */
static int shm_case(int out_of_bounds)
{
    if (strcmp(g_transport, "shared") != 0)
        PM_SKIP("shared-reference cases need the shared transport");
    server_ctx s;
    start_server(&s, NULL);
    pmw_conn *c = connect_client(&s, NULL);
    size_t area = 0;
    REQUIRE(pmw_conn_payload(c, &area) != NULL && area == (1u << 20));
    uint8_t meta[128], ref[24];
    pmw_meta w;
    pmw_meta_init(&w, meta, sizeof meta);
    pmw_meta_u8(&w, PMW_TAG_PHASE, PM_PHASE_DECODE);
    pmw_meta_u64(&w, PMW_TAG_REQ_ID, 7);
    pmw_meta_u32(&w, PMW_TAG_BASE_POS, 0);
    pmw_meta_u32(&w, PMW_TAG_N_TOKENS, 2);
    pmw_meta_u8(&w, PMW_TAG_WANT, PMW_OUT_ARGMAX);
    uint64_t seq = pmw_conn_next_seq(c), off = out_of_bounds ? area - 4 : 0;
    for (int i = 0; i < 8; i++) {
        ref[i] = (uint8_t)(off >> (8 * i));
        ref[8 + i] = (uint8_t)((uint64_t)8 >> (8 * i));
        ref[16 + i] = (uint8_t)(seq >> (8 * i));
    }
    pmw_meta_put(&w, PMW_TAG_SHM_REF, ref, sizeof ref);
    CHECK_INT_EQ(pmw_conn_send_frame(c, PMW_MSG_FORWARD, 0, meta, w.len, NULL, 0), 0);
    if (out_of_bounds)
        expect_rejected(&s, c, PMW_E_SHM_REF, PMW_TAG_SHM_REF, "outside the 1048576-byte area");
    else
        expect_rejected(&s, c, PMW_E_SEQUENCE, PMW_TAG_SHM_REF, "is stale");
    return pm_check_result();
}

static int case_shm_ref_oob(void)
{
    return shm_case(1);
}

static int case_shm_ref_stale(void)
{
    return shm_case(0);
}

/* ---- fatal headers ----------------------------------------------------------- */

static void raw_write(pmw_conn *c, const void *buf, size_t n)
{
    CHECK_INT_EQ(write(pmw_conn_fd(c), buf, n), (long)n);
}

/* The server answers with an error reply and closes. */
static int fatal_header(uint32_t magic, uint16_t version, uint32_t meta, uint32_t body, int code,
                        const char *text)
{
    server_ctx s;
    start_server(&s, NULL);
    pmw_conn *c = connect_client(&s, NULL);
    uint8_t h[32];
    pmw_header_encode(h, PMW_MSG_FORWARD, pmw_conn_next_seq(c), meta, body);
    for (int i = 0; i < 4; i++)
        h[i] = (uint8_t)(magic >> (8 * i));
    h[4] = (uint8_t)version;
    h[5] = (uint8_t)(version >> 8);
    raw_write(c, h, sizeof h);
    pmw_msg r;
    if (recv_ok(c, &r, PMW_MSG_ERROR)) {
        CHECK_INT_EQ(r.error.code, code);
        if (!strstr(r.error.text, text))
            fprintf(stderr, "error text \"%s\" lacks \"%s\"\n", r.error.text, text);
        CHECK(strstr(r.error.text, text) != NULL);
    }
    CHECK_INT_EQ(pmw_conn_recv(c, &r), PMW_E_CLOSED);
    CHECK(!pmw_conn_usable(c));
    CHECK_INT_EQ(pmw_conn_recv(c, &r), PMW_E_BROKEN);
    pmw_conn_close(c);
    stop_server(&s);
    CHECK_INT_EQ(s.ncodes, 1);
    CHECK_INT_EQ(s.codes[0], code);
    CHECK(strstr(s.last_err, text) != NULL);
    return pm_check_result();
}

static int case_bad_magic(void)
{
    return fatal_header(0x12345678u, 1, 0, 0, PMW_E_MAGIC, "bad magic 0x12345678");
}

static int case_bad_version(void)
{
    return fatal_header(PMW_MAGIC, 7, 0, 0, PMW_E_VERSION, "unknown protocol version 7");
}

static int case_meta_limit(void)
{
    return fatal_header(PMW_MAGIC, 1, 4097, 0, PMW_E_META_LIMIT, "metadata length 4097 over the limit 4096");
}

static int case_body_limit(void)
{
    return fatal_header(PMW_MAGIC, 1, 0, 64u * 1024 * 1024 + 1, PMW_E_BODY_LIMIT,
                        "body length 67108865 over the limit 67108864");
}

/* Half a frame, then EOF from the client. */
static int case_truncated_eof(void)
{
    server_ctx s;
    start_server(&s, NULL);
    pmw_conn *c = connect_client(&s, NULL);
    static const int32_t toks[3] = {5, 9, 11};
    pmw_msg m = token_forward(toks, 3, 0, PMW_OUT_ARGMAX);
    uint8_t buf[256];
    long long n = pmw_msg_encode(&m, pmw_conn_next_seq(c), buf, sizeof buf);
    REQUIRE(n > 40);
    raw_write(c, buf, 40);
    shutdown(pmw_conn_fd(c), SHUT_WR);
    pmw_msg r;
    CHECK_INT_EQ(pmw_conn_recv(c, &r), PMW_E_CLOSED);
    pmw_conn_close(c);
    stop_server(&s);
    CHECK_INT_EQ(s.ncodes, 1);
    CHECK_INT_EQ(s.codes[0], PMW_E_TRUNCATED);
    char want[64];
    snprintf(want, sizeof want, "after 40 of %lld bytes", n);
    CHECK(strstr(s.last_err, want) != NULL);
    return pm_check_result();
}

/* ---- dead and stalled peers (fork, no threads) ----------------------------- */

static pmw_listener *plain_listener(const pmw_options *o)
{
    char addr[128], err[256];
    pmw_listener *l = NULL;
    int rc = pmw_listen(listen_address(addr, sizeof addr), o, &l, err, sizeof err);
    if (rc)
        fprintf(stderr, "listen: %s\n", err);
    REQUIRE(rc == 0);
    return l;
}

/* Child: connects, writes half a forward frame, then dies or stalls. */
static void half_client(pmw_listener *l, int die)
{
    pmw_options o = client_opts();
    pmw_conn *c = NULL;
    char err[256];
    if (pmw_connect(pmw_listener_address(l), &o, &c, err, sizeof err) != 0)
        _exit(3);
    static const int32_t toks[3] = {5, 9, 11};
    pmw_msg m = token_forward(toks, 3, 0, PMW_OUT_ARGMAX);
    uint8_t buf[256];
    long long n = pmw_msg_encode(&m, pmw_conn_next_seq(c), buf, sizeof buf);
    if (n <= 0 || write(pmw_conn_fd(c), buf, (size_t)n / 2) != n / 2)
        _exit(4);
    if (die)
        kill(getpid(), SIGKILL);
    for (;;)
        pause();
}

static int peer_case(int die)
{
    pmw_options so;
    pmw_options_default(&so);
    so.timeout_ms = 300;
    pmw_listener *l = plain_listener(&so);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0)
        half_client(l, die);
    pmw_conn *c = NULL;
    char err[256];
    int rc = pmw_accept(l, 5000, &c, err, sizeof err);
    if (rc)
        fprintf(stderr, "accept: %s\n", err);
    REQUIRE(rc == 0);
    pmw_msg m;
    rc = pmw_conn_recv(c, &m);
    CHECK_INT_EQ(rc, die ? PMW_E_TRUNCATED : PMW_E_TIMEOUT);
    CHECK(!pmw_conn_usable(c));
    CHECK(strstr(pmw_conn_error(c), die ? "peer closed mid-frame" : "deadline passed mid-frame") != NULL);
    if (!die)
        kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    pmw_conn_close(c);
    pmw_listener_close(l);
    if (g_dir[0])
        rmdir(g_dir);
    return pm_check_result();
}

static int case_dead_client(void)
{
    return peer_case(1);
}

static int case_stalled_client(void)
{
    return peer_case(0);
}

/* The server dies halfway through a reply; the client gets an error. */
static int case_dead_server(void)
{
    pmw_options so;
    pmw_options_default(&so);
    pmw_listener *l = plain_listener(&so);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        pmw_conn *sc = NULL;
        char err[256];
        pmw_msg m;
        if (pmw_accept(l, 5000, &sc, err, sizeof err) != 0 || pmw_conn_recv(sc, &m) != 0)
            _exit(3);
        static const int32_t ids[3] = {1, 2, 3};
        pmw_msg r;
        memset(&r, 0, sizeof r);
        r.kind = PMW_MSG_REPLY;
        r.reply = (pmw_reply){7, 3, PMW_OUT_ARGMAX, 0, NULL, ids, 0, 0, 0, NULL};
        uint8_t buf[256];
        long long n = pmw_msg_encode(&r, pmw_conn_next_seq(sc), buf, sizeof buf);
        if (n <= 0 || write(pmw_conn_fd(sc), buf, (size_t)n - 5) != n - 5)
            _exit(4);
        kill(getpid(), SIGKILL);
    }
    pmw_options co = client_opts();
    co.timeout_ms = 2000;
    pmw_conn *c = NULL;
    char err[256];
    REQUIRE(pmw_connect(pmw_listener_address(l), &co, &c, err, sizeof err) == 0);
    static const int32_t toks[3] = {5, 9, 11};
    pmw_msg m = token_forward(toks, 3, 0, PMW_OUT_ARGMAX), r;
    CHECK_INT_EQ(pmw_conn_send(c, &m), 0);
    CHECK_INT_EQ(pmw_conn_recv(c, &r), PMW_E_TRUNCATED);
    CHECK(strstr(pmw_conn_error(c), "peer closed mid-frame") != NULL);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    pmw_conn_close(c);
    pmw_listener_close(l);
    if (g_dir[0])
        rmdir(g_dir);
    return pm_check_result();
}

/* ---- idle waits, limits, auth, addresses ------------------------------------- */

static int case_idle_timeout(void)
{
    server_ctx s;
    start_server(&s, NULL);
    pmw_conn *c = connect_client(&s, NULL);
    pmw_msg r;
    CHECK_INT_EQ(pmw_conn_set_timeout(c, 100), 0);
    CHECK_INT_EQ(pmw_conn_recv(c, &r), PMW_E_TIMEOUT);
    CHECK(pmw_conn_usable(c));
    CHECK_INT_EQ(pmw_conn_set_timeout(c, 0), PMW_E_ARG);
    CHECK_INT_EQ(pmw_conn_set_timeout(c, 5000), 0);
    valid_forward(c);
    shutdown_server(c);
    pmw_conn_close(c);
    stop_server(&s);
    return pm_check_result();
}

static int case_local_limits(void)
{
    pmw_options so;
    pmw_options_default(&so);
    so.limits.max_body = 4096;
    server_ctx s;
    start_server(&s, &so);
    pmw_conn *c = connect_client(&s, NULL);
    CHECK_INT_EQ(pmw_conn_peer_limits(c)->max_body, 4096);
    static int32_t toks[2000];
    pmw_msg m = token_forward(toks, 2000, 0, PMW_OUT_ARGMAX);
    CHECK_INT_EQ(pmw_conn_send(c, &m), PMW_E_BODY_LIMIT);
    CHECK(strstr(pmw_conn_error(c), "over the peer's limit 4096") != NULL);
    CHECK(pmw_conn_usable(c));
    m.forward.phase = PM_PHASE_BATCHED; /* refused locally, nothing sent */
    m.forward.n_tokens = 1;
    CHECK_INT_EQ(pmw_conn_send(c, &m), PMW_E_PHASE);
    m.kind = PMW_MSG_HELLO;
    CHECK_INT_EQ(pmw_conn_send(c, &m), PMW_E_KIND);
    valid_forward(c);
    shutdown_server(c);
    pmw_conn_close(c);
    stop_server(&s);
    for (int i = 0; i < s.ncodes; i++)
        CHECK_INT_EQ(s.codes[i], 0);
    return pm_check_result();
}

static int auth_case(const char *server_token, const char *client_token, int want_client,
                     const char *client_text, int want_server)
{
    pmw_options so, co = client_opts();
    pmw_options_default(&so);
    so.token = server_token;
    so.token_len = server_token ? strlen(server_token) : 0;
    co.token = client_token;
    co.token_len = client_token ? strlen(client_token) : 0;
    server_ctx s;
    start_server(&s, &so);
    pmw_conn *c = NULL;
    char err[256] = "";
    int rc = pmw_connect(pmw_listener_address(s.l), &co, &c, err, sizeof err);
    CHECK_INT_EQ(rc, want_client);
    if (!strstr(err, client_text))
        fprintf(stderr, "client error \"%s\" lacks \"%s\"\n", err, client_text);
    CHECK(strstr(err, client_text) != NULL);
    CHECK(c == NULL);
    stop_server(&s);
    CHECK_INT_EQ(s.accept_rc, want_server);
    return pm_check_result();
}

static int case_auth_wrong_token(void)
{
    return auth_case("server-secret", "guess", PMW_E_AUTH, "authentication failed", PMW_E_AUTH);
}

static int case_auth_no_token(void)
{
    /* The client gives up before answering; the server sees EOF. */
    return auth_case("server-secret", NULL, PMW_E_AUTH, "requires a token", PMW_E_CLOSED);
}

static int case_auth_server_none(void)
{
    /* The server finished its side; the client refuses an unauthenticated
     * server, and hangs up. */
    return auth_case(NULL, "client-secret", PMW_E_AUTH, "does not authenticate", 0);
}

static int case_nonloopback(void)
{
    if (!is_tcp())
        PM_SKIP("TCP only");
    pmw_options o;
    pmw_options_default(&o);
    pmw_listener *l = NULL;
    char err[256];
    CHECK_INT_EQ(pmw_listen("tcp:0.0.0.0:0", &o, &l, err, sizeof err), PMW_E_AUTH);
    CHECK(strstr(err, "requires a token") != NULL);
    CHECK(l == NULL);
    o.token = "t";
    o.token_len = 1;
    CHECK_INT_EQ(pmw_listen("tcp:0.0.0.0:0", &o, &l, err, sizeof err), 0);
    CHECK(l && strncmp(pmw_listener_address(l), "tcp:0.0.0.0:", 12) == 0);
    pmw_listener_close(l);
    /* The default host is loopback. */
    o.token = NULL;
    o.token_len = 0;
    CHECK_INT_EQ(pmw_listen("tcp::0", &o, &l, err, sizeof err), 0);
    CHECK(l && strncmp(pmw_listener_address(l), "tcp:127.0.0.1:", 14) == 0);
    pmw_listener_close(l);
    /* Shared memory cannot cross TCP. */
    server_ctx s;
    start_server(&s, NULL);
    pmw_options co = client_opts();
    co.transport = PMW_TRANSPORT_SHARED;
    pmw_conn *c = NULL;
    CHECK_INT_EQ(pmw_connect(pmw_listener_address(s.l), &co, &c, err, sizeof err), PMW_E_TRANSPORT);
    stop_server(&s);
    return pm_check_result();
}

static int case_addresses(void)
{
    pmw_conn *c = (pmw_conn *)1;
    char err[256];
    const char *bad[] = {"", "tcp:host", "tcp:127.0.0.1:70000", "tcp:127.0.0.1:-1",
                         "tcp:127.0.0.1:12x", "nowhere", "unix:"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_INT_EQ(pmw_connect(bad[i], NULL, &c, err, sizeof err), PMW_E_ARG);
        CHECK(c == NULL);
    }
    CHECK_INT_EQ(pmw_connect("unix:/nonexistent/pmw.sock", NULL, &c, err, sizeof err), PMW_E_IO);
    /* A stale socket file is replaced; a live one is not. */
    char dir[] = "/tmp/pmw-addr-XXXXXX", path[128], addr[160];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/s", dir);
    snprintf(addr, sizeof addr, "unix:%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    REQUIRE(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    close(fd); /* the file stays: a daemon that died */
    pmw_listener *l = NULL, *l2 = NULL;
    CHECK_INT_EQ(pmw_listen(addr, NULL, &l, err, sizeof err), 0);
    CHECK_INT_EQ(pmw_listen(addr, NULL, &l2, err, sizeof err), PMW_E_IO);
    CHECK(l2 == NULL);
    CHECK_STR_EQ(pmw_listener_address(l), addr);
    /* The refused second listen probed the live one: that probe is a client
     * that hung up, which accept reports; then nobody is waiting. */
    CHECK_INT_EQ(pmw_accept(l, 1000, &c, err, sizeof err), PMW_E_CLOSED);
    CHECK_INT_EQ(pmw_accept(l, 50, &c, err, sizeof err), PMW_E_TIMEOUT);
    pmw_listener_close(l);
    CHECK(access(path, F_OK) != 0);
    rmdir(dir);
    return pm_check_result();
}

/* ---- peers that are not this library ------------------------------------ */

/* Connects a plain socket to the test server's address. */
static int raw_connect(server_ctx *s)
{
    const char *addr = pmw_listener_address(s->l);
    REQUIRE(strncmp(addr, "unix:", 5) == 0);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, addr + 5, strlen(addr + 5) + 1);
    REQUIRE(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    return fd;
}

/* Reads the server's answer: one error reply, then EOF. */
static void expect_error_then_eof(int fd, int code, const char *text)
{
    uint8_t buf[1024];
    size_t got = 0;
    for (;;) {
        ssize_t n = read(fd, buf + got, sizeof buf - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    pmw_decoder *d = NULL;
    REQUIRE(pmw_decoder_create(NULL, &d) == 0);
    pmw_frame f;
    pmw_msg m;
    pmw_diag diag;
    CHECK_INT_EQ(pmw_decoder_feed(d, buf, got), 0);
    REQUIRE(pmw_decoder_next(d, &f) == 1);
    REQUIRE(pmw_msg_parse(&f, NULL, 0, &m, &diag) == 0);
    CHECK_INT_EQ(m.kind, PMW_MSG_ERROR);
    CHECK_INT_EQ(m.error.code, code);
    if (!strstr(m.error.text, text))
        fprintf(stderr, "error text \"%s\" lacks \"%s\"\n", m.error.text, text);
    CHECK(strstr(m.error.text, text) != NULL);
    CHECK_INT_EQ(pmw_decoder_next(d, &f), 0);
    CHECK_INT_EQ(pmw_decoder_pending(d), 0);
    pmw_decoder_destroy(d);
}

/* Something that is not the wire (an HTTP request) knocks on the daemon. */
static int case_handshake_garbage(void)
{
    if (is_tcp())
        PM_SKIP("Unix socket case");
    server_ctx s;
    start_server(&s, NULL);
    int fd = raw_connect(&s);
    static const char req[] = "GET / HTTP/1.1\r\nHost: shard\r\n\r\n";
    REQUIRE(write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1));
    expect_error_then_eof(fd, PMW_E_MAGIC, "bad magic 0x20544547");
    close(fd);
    stop_server(&s);
    CHECK_INT_EQ(s.accept_rc, PMW_E_MAGIC);
    return pm_check_result();
}

/* A shared-transport hello whose memfd is not sealed, or has the wrong
 * size: the server must refuse to map it (a peer that can shrink the file
 * could make the server fault). */
static int unsafe_region(int seal, uint64_t file_size)
{
    if (strcmp(g_transport, "shared") != 0)
        PM_SKIP("shared transport case");
    server_ctx s;
    start_server(&s, NULL);
    int fd = raw_connect(&s);
    int mfd = memfd_create("pmw-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(mfd >= 0 && ftruncate(mfd, (off_t)file_size) == 0);
    if (seal)
        REQUIRE(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
    pmw_msg h;
    memset(&h, 0, sizeof h);
    h.kind = PMW_MSG_HELLO;
    h.hello.transport = PMW_TRANSPORT_SHARED;
    pmw_limits_default(&h.hello.limits);
    h.hello.shm_size = 65536;
    uint8_t buf[256];
    long long n = pmw_msg_encode(&h, 1, buf, sizeof buf);
    REQUIRE(n > 0 && n <= (long long)sizeof buf);
    union {
        char b[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cbuf;
    memset(&cbuf, 0, sizeof cbuf);
    struct iovec iov = {.iov_base = buf, .iov_len = (size_t)n};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.b,
                        .msg_controllen = sizeof cbuf.b};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &mfd, sizeof mfd);
    REQUIRE(sendmsg(fd, &mh, 0) == n);
    close(mfd);
    expect_error_then_eof(fd, PMW_E_TRANSPORT, seal ? "is not a 135168-byte file" : "not sealed");
    close(fd);
    stop_server(&s);
    CHECK_INT_EQ(s.accept_rc, PMW_E_TRANSPORT);
    return pm_check_result();
}

static int case_shm_unsealed(void)
{
    return unsafe_region(0, 4096 + 2 * 65536);
}

static int case_shm_wrong_size(void)
{
    return unsafe_region(1, 4096 + 65536);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"roundtrip", case_roundtrip},
        {"roundtrip_auth", case_roundtrip_auth},
        {"clock_sync", case_clock_sync},
        {"clock_refused", case_clock_refused},
        {"socketpair", case_socketpair},
        {"missing_phase", case_missing_phase},
        {"dup_phase", case_dup_phase},
        {"unknown_tag", case_unknown_tag},
        {"bad_phase", case_bad_phase},
        {"batched_phase", case_batched_phase},
        {"stale_seq", case_stale_seq},
        {"wrong_kind", case_wrong_kind},
        {"shm_ref_oob", case_shm_ref_oob},
        {"shm_ref_stale", case_shm_ref_stale},
        {"bad_magic", case_bad_magic},
        {"bad_version", case_bad_version},
        {"meta_limit", case_meta_limit},
        {"body_limit", case_body_limit},
        {"truncated_eof", case_truncated_eof},
        {"dead_client", case_dead_client},
        {"stalled_client", case_stalled_client},
        {"dead_server", case_dead_server},
        {"idle_timeout", case_idle_timeout},
        {"local_limits", case_local_limits},
        {"auth_wrong_token", case_auth_wrong_token},
        {"auth_no_token", case_auth_no_token},
        {"auth_server_none", case_auth_server_none},
        {"nonloopback", case_nonloopback},
        {"addresses", case_addresses},
        {"handshake_garbage", case_handshake_garbage},
        {"shm_unsealed", case_shm_unsealed},
        {"shm_wrong_size", case_shm_wrong_size},
    };
    signal(SIGPIPE, SIG_IGN);
    if (argc == 3)
        g_transport = argv[2];
    for (size_t i = 0; argc == 3 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: %s CASE stream|shared|tcp\n", argv[0]);
    return 2;
}
