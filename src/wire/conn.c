/* conn.c — connections: handshake, typed send/receive, drain-then-reject.
 *
 * A connection owns its socket, a decoder and (shared transport) a mapped
 * region. Frames are numbered per direction from 1; the handshake uses the
 * first ones. The receiver expects exactly the next number: a frame that
 * carries it is consumed even when its metadata is then refused (so the two
 * sides stay in step), a frame that does not is refused without consuming
 * anything.
 *
 * Two classes of failure: a bad header means the byte stream cannot
 * be trusted, so the connection fails for good (a server first answers with
 * a best-effort error reply and shuts its write side). Anything wrong inside
 * a frame that was read whole is refused with a diagnosis and the
 * connection stays usable; a server answers it with an error reply itself.
 *
 * Invariants: broken != 0 means every call fails fast with PMW_E_BROKEN;
 * c->out holds the header and metadata of the frame being sent, nothing
 * else, so sending never allocates.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net.h"
#include "shm.h"

#define META_CAP 1024u
#define HS_META 512u    /* limits during the handshake, before auth */
#define HS_ENTRIES 16u
#define DEFAULT_TIMEOUT_MS 5000
#define DEFAULT_SHM (64ull * 1024 * 1024)
#define DEFAULT_SHM_MAX (1024ull * 1024 * 1024)

enum { ROLE_CLIENT, ROLE_SERVER };
enum { STATE_HANDSHAKE, STATE_OPEN };

struct pmw_conn {
    int fd;
    int role, state, transport, is_unix;
    int timeout_ms;
    int broken;            /* sticky failure code, 0 while usable */
    pmw_limits limits;     /* what we accept */
    pmw_limits peer;       /* what the peer accepts */
    pmw_decoder *dec;
    uint64_t send_seq;     /* number of the next frame we send */
    uint64_t recv_seq;     /* number we expect next */
    pmw__shm shm;
    int has_shm;
    /* Shared transport, receiving: the peer can write its area at any time,
     * so a body is copied here once and only the copy is validated and
     * used (no double fetch). Grows to the largest body received, at most
     * min(area, limits.max_body); owned, freed at close. */
    uint8_t *rx;
    size_t rx_cap;
    int passed_fd;         /* server, handshake: descriptor received (-1 none) */
    pmw_diag diag;
    char err[PMW_TEXT_MAX + 1];
    uint8_t out[PMW_HEADER_SIZE + META_CAP];
};

static const char label_client[] = "phasemark-wire/1 client";
static const char label_server[] = "phasemark-wire/1 server";

void pmw_options_default(pmw_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->transport = PMW_TRANSPORT_STREAM;
    pmw_limits_default(&o->limits);
    o->timeout_ms = DEFAULT_TIMEOUT_MS;
    o->shm_size = 0;
}

static int fatal(pmw_conn *c, int code)
{
    c->broken = code;
    return code;
}

static int check_options(const pmw_options *o, char *err, size_t errlen)
{
    if (o->timeout_ms <= 0 || o->limits.max_meta < HS_META || o->limits.max_entries < 8 ||
        (o->transport != PMW_TRANSPORT_STREAM && o->transport != PMW_TRANSPORT_SHARED) ||
        (o->token && o->token_len == 0)) {
        pmw__fmt(err, errlen, "invalid options (timeout > 0, max_meta >= %u, max_entries >= 8, "
                 "transport stream or shared, token non-empty)", HS_META);
        return PMW_E_ARG;
    }
    return 0;
}

static int is_unix_socket(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    return getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_UNIX;
}

static pmw_conn *conn_new(int fd, int role, const pmw_options *o)
{
    pmw_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pmw_limits hs = {HS_META, 0, HS_ENTRIES};
    if (pmw_decoder_create(&hs, &c->dec) != 0) {
        free(c);
        return NULL;
    }
    c->fd = fd;
    c->role = role;
    c->state = STATE_HANDSHAKE;
    c->transport = PMW_TRANSPORT_STREAM;
    c->is_unix = is_unix_socket(fd);
    c->timeout_ms = o->timeout_ms;
    c->limits = o->limits;
    c->peer = (pmw_limits){HS_META, 0, 8};
    c->send_seq = c->recv_seq = 1;
    c->shm.fd = -1;
    c->passed_fd = -1;
    return c;
}

/* ---- sending ------------------------------------------------------------ */

/* Writes header + metadata (already at c->out + 32) + padding + body. Any
 * failure may leave part of a frame on the wire, so it is fatal. */
static int write_frame(pmw_conn *c, uint16_t kind, uint64_t seq, size_t meta_len,
                       uint32_t body_len, const void *const *parts, const size_t *lens,
                       size_t np, int pass_fd)
{
    uint32_t pad = pmw_meta_pad((uint32_t)meta_len);
    pmw_header_encode(c->out, kind, seq, (uint32_t)meta_len, body_len);
    memset(c->out + PMW_HEADER_SIZE + meta_len, 0, pad);
    struct iovec iov[4];
    iov[0].iov_base = c->out;
    iov[0].iov_len = PMW_HEADER_SIZE + meta_len + pad;
    for (size_t i = 0; i < np; i++) {
        iov[1 + i].iov_base = (void *)parts[i];
        iov[1 + i].iov_len = lens[i];
    }
    int64_t deadline = pmw__now_ms() + c->timeout_ms;
    int rc = pmw__send_iov(c->fd, iov, (int)(1 + np), pass_fd, deadline, c->err, sizeof c->err);
    return rc ? fatal(c, rc) : 0;
}

/* Copies the body into our area, unless the caller built it there. */
static void stage_body(pmw_conn *c, const void *const *parts, const size_t *lens, size_t np)
{
    uint8_t *dst = c->shm.out;
    for (size_t i = 0; i < np; i++) {
        if (parts[i] != dst)
            memmove(dst, parts[i], lens[i]);
        dst += lens[i];
    }
}

static int refuse_local(pmw_conn *c, int code, const char *what, size_t n, uint64_t limit)
{
    pmw__diag(&c->diag, code, 0, "%s of %zu bytes is over the peer's limit %llu", what, n,
              (unsigned long long)limit);
    memcpy(c->err, c->diag.text, sizeof c->err);
    return code;
}

static int send_msg(pmw_conn *c, const pmw_msg *m, int pass_fd)
{
    size_t body_len = 0;
    int rc = pmw_msg_check(m, &body_len, &c->diag);
    if (rc) {
        memcpy(c->err, c->diag.text, sizeof c->err);
        return rc;
    }
    if (body_len > c->peer.max_body)
        return refuse_local(c, PMW_E_BODY_LIMIT, "body", body_len, c->peer.max_body);
    const void *parts[3];
    size_t lens[3], np = pmw__body_parts(m, parts, lens);
    uint64_t seq = c->send_seq;
    pmw_shm_ref ref = {0, body_len, seq}, *refp = NULL;
    if (c->has_shm && body_len) {
        if (body_len > c->shm.area)
            return refuse_local(c, PMW_E_BODY_LIMIT, "body", body_len, c->shm.area);
        stage_body(c, parts, lens, np);
        pmw__shm_publish(&c->shm, seq);
        refp = &ref;
        np = 0;
    }
    pmw_meta w;
    pmw_meta_init(&w, c->out + PMW_HEADER_SIZE, META_CAP);
    if ((rc = pmw__meta_encode(m, refp, &w)) || w.len > c->peer.max_meta)
        return refuse_local(c, PMW_E_META_LIMIT, "metadata", w.len, c->peer.max_meta);
    rc = write_frame(c, (uint16_t)m->kind, seq, w.len, refp ? 0 : (uint32_t)body_len, parts,
                     lens, np, pass_fd);
    if (rc == 0)
        c->send_seq++;
    return rc;
}

int pmw_conn_send(pmw_conn *c, const pmw_msg *m)
{
    if (!c || !m)
        return PMW_E_ARG;
    if (c->broken)
        return PMW_E_BROKEN;
    if (m->kind == PMW_MSG_HELLO || m->kind == PMW_MSG_AUTH) {
        pmw__fmt(c->err, sizeof c->err, "%s is sent by the handshake only", pmw__kind_name(m->kind));
        return PMW_E_KIND;
    }
    return send_msg(c, m, -1);
}

int pmw_conn_send_error(pmw_conn *c, int code, uint16_t tag, const char *text)
{
    if (!c || code >= 0)
        return PMW_E_ARG;
    pmw_msg m;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_ERROR;
    m.error.code = code;
    m.error.tag = tag;
    size_t n = 0;
    for (; text && text[n] && n < PMW_TEXT_MAX; n++) {
        unsigned char ch = (unsigned char)text[n];
        m.error.text[n] = (ch < 0x20 || ch == 0x7f) ? ' ' : (char)ch;
    }
    if (n == 0)
        memcpy(m.error.text, "error", 6);
    return pmw_conn_send(c, &m);
}

int pmw_conn_send_frame(pmw_conn *c, uint16_t kind, uint64_t seq, const void *meta,
                        size_t meta_len, const void *body, size_t body_len)
{
    if (!c || meta_len > META_CAP || body_len > UINT32_MAX || (meta_len && !meta) ||
        (body_len && !body))
        return PMW_E_ARG;
    if (c->broken)
        return PMW_E_BROKEN;
    if (meta_len)
        memcpy(c->out + PMW_HEADER_SIZE, meta, meta_len);
    const void *parts[1] = {body};
    size_t lens[1] = {body_len};
    int rc = write_frame(c, kind, seq ? seq : c->send_seq, meta_len, (uint32_t)body_len, parts,
                         lens, body_len ? 1 : 0, -1);
    if (rc == 0 && seq == 0)
        c->send_seq++;
    return rc;
}

/* ---- receiving ---------------------------------------------------------- */

/* The stream cannot be trusted: answer once if we are the server, shut our
 * write side so the peer sees EOF after the reply, and fail for good. */
static int header_failure(pmw_conn *c, int code)
{
    pmw__fmt(c->err, sizeof c->err, "%s", pmw_decoder_error(c->dec));
    pmw__diag(&c->diag, code, 0, "%s", c->err);
    if (c->role == ROLE_SERVER) {
        char keep[sizeof c->err];
        memcpy(keep, c->err, sizeof keep);
        (void)pmw_conn_send_error(c, code, 0, keep);
        memcpy(c->err, keep, sizeof keep);
        shutdown(c->fd, SHUT_WR);
    }
    return fatal(c, code);
}

static int eof_failure(pmw_conn *c)
{
    size_t partial = pmw_decoder_pending(c->dec);
    if (partial == 0) {
        pmw__fmt(c->err, sizeof c->err, "peer closed the connection");
        return fatal(c, PMW_E_CLOSED);
    }
    size_t total = pmw__decoder_frame_size(c->dec);
    if (total)
        pmw__fmt(c->err, sizeof c->err, "peer closed mid-frame after %zu of %zu bytes", partial, total);
    else
        pmw__fmt(c->err, sizeof c->err, "peer closed mid-header after %zu of %u bytes", partial,
                 PMW_HEADER_SIZE);
    return fatal(c, PMW_E_TRUNCATED);
}

/* Reads until one whole frame is decoded. */
static int read_frame(pmw_conn *c, pmw_frame *f)
{
    int64_t deadline = pmw__now_ms() + c->timeout_ms;
    int *fdp = (c->state == STATE_HANDSHAKE && c->role == ROLE_SERVER) ? &c->passed_fd : NULL;
    for (;;) {
        int rc = pmw_decoder_next(c->dec, f);
        if (rc == 1)
            return 0;
        if (rc < 0)
            return header_failure(c, rc);
        uint8_t *p;
        size_t n;
        if ((rc = pmw__decoder_reserve(c->dec, &p, &n)) != 0)
            return header_failure(c, rc);
        long got = pmw__recv_some(c->fd, p, n, fdp, deadline, c->err, sizeof c->err);
        if (got > 0) {
            pmw__decoder_commit(c->dec, (size_t)got);
            continue;
        }
        if (got == 0)
            return eof_failure(c);
        if (got == PMW_E_TIMEOUT && pmw_decoder_pending(c->dec) == 0)
            return PMW_E_TIMEOUT; /* idle: nothing of a frame was read */
        if (got == PMW_E_TIMEOUT)
            pmw__fmt(c->err, sizeof c->err, "deadline passed mid-frame (%zu bytes read)",
                     pmw_decoder_pending(c->dec));
        return fatal(c, (int)got);
    }
}

static int kind_allowed(const pmw_conn *c, pmw_kind k)
{
    if (c->state == STATE_HANDSHAKE)
        return k == PMW_MSG_HELLO || k == PMW_MSG_AUTH || (c->role == ROLE_CLIENT && k == PMW_MSG_ERROR);
    if (c->role == ROLE_SERVER)
        return k == PMW_MSG_FORWARD || k == PMW_MSG_RESET || k == PMW_MSG_TRUNCATE ||
               k == PMW_MSG_SHUTDOWN || k == PMW_MSG_CLOCK || k == PMW_MSG_CLOCK_SET ||
               k == PMW_MSG_KEEP;
    return k == PMW_MSG_REPLY || k == PMW_MSG_ACK || k == PMW_MSG_ERROR ||
           k == PMW_MSG_CLOCK_REPLY;
}

static int resolve_ref(pmw_conn *c, const pmw_frame *f, pmw_msg *m)
{
    int rc = pmw__ref_check(&m->ref, c->shm.area, f->seq, pmw__shm_peer_seq(&c->shm), m->kind,
                            &c->diag);
    if (rc)
        return rc;
    if (m->ref.length > c->limits.max_body) {
        pmw__diag(&c->diag, PMW_E_SHM_REF, PMW_TAG_SHM_REF,
                  "%s: tag 10 (shm_ref) length %llu over the body limit %u", pmw__kind_name(m->kind),
                  (unsigned long long)m->ref.length, c->limits.max_body);
        return PMW_E_SHM_REF;
    }
    size_t n = (size_t)m->ref.length;
    if (n > c->rx_cap) {
        uint8_t *p = realloc(c->rx, n);
        if (!p) {
            pmw__diag(&c->diag, PMW_E_NOMEM, 0, "out of memory copying a %zu-byte shared body", n);
            return fatal(c, PMW_E_NOMEM);
        }
        c->rx = p;
        c->rx_cap = n;
    }
    /* One read of the peer-writable bytes; everything after this sees only
     * the private copy, whatever the peer writes meanwhile. */
    if (n)
        memcpy(c->rx, c->shm.in + m->ref.offset, n);
    return pmw_msg_bind_body(m, n ? c->rx : c->shm.in, n, &c->diag);
}

/* Validates a whole frame: sequence, metadata, direction, shared body. */
static int accept_frame(pmw_conn *c, const pmw_frame *f, pmw_msg *m)
{
    if (f->seq != c->recv_seq) {
        pmw__diag(&c->diag, PMW_E_SEQUENCE, 0, "%s: sequence %llu is %s (expected %llu)",
                  pmw__kind_name(f->kind), (unsigned long long)f->seq,
                  f->seq < c->recv_seq ? "stale or duplicated" : "ahead of the stream",
                  (unsigned long long)c->recv_seq);
        return PMW_E_SEQUENCE;
    }
    c->recv_seq++;
    int rc = pmw_msg_parse(f, &c->limits, c->has_shm, m, &c->diag);
    if (rc)
        return rc;
    if (!kind_allowed(c, m->kind)) {
        pmw__diag(&c->diag, PMW_E_KIND, 0, "%s is not allowed from a %s%s", pmw__kind_name(m->kind),
                  c->role == ROLE_SERVER ? "client" : "server",
                  c->state == STATE_HANDSHAKE ? " during the handshake" : "");
        return PMW_E_KIND;
    }
    return m->has_ref ? resolve_ref(c, f, m) : 0;
}

/* Receives one message; drainable refusals are answered (server) but the
 * code is returned either way. */
static int recv_msg(pmw_conn *c, pmw_msg *m)
{
    pmw_frame f;
    memset(&c->diag, 0, sizeof c->diag);
    int rc = read_frame(c, &f);
    if (rc)
        return rc;
    rc = accept_frame(c, &f, m);
    if (rc == 0)
        return 0;
    memcpy(c->err, c->diag.text, sizeof c->err);
    if (c->role == ROLE_SERVER) {
        int src = pmw_conn_send_error(c, rc, c->diag.tag, c->diag.text);
        memcpy(c->err, c->diag.text, sizeof c->err);
        if (src)
            return src;
    }
    return rc;
}

int pmw_conn_recv(pmw_conn *c, pmw_msg *m)
{
    if (!c || !m)
        return PMW_E_ARG;
    if (c->broken)
        return PMW_E_BROKEN;
    return recv_msg(c, m);
}

/* ---- handshake ---------------------------------------------------------- */

static int random_bytes(uint8_t *p, size_t n)
{
    while (n) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* MAC = HMAC-SHA256(token, label || nonce_a || nonce_b || transport). Each
 * side proves knowledge of the token over the other side's fresh nonce,
 * so a recorded exchange cannot be replayed and the token never travels. */
static void auth_mac(const pmw_options *o, const char *label, const uint8_t *na,
                     const uint8_t *nb, uint8_t transport, uint8_t out[PMW_MAC_SIZE])
{
    const void *parts[4] = {label, na, nb, &transport};
    size_t lens[4] = {strlen(label), PMW_NONCE_SIZE, PMW_NONCE_SIZE, 1};
    pmw__hmac_sha256(o->token, o->token_len, parts, lens, 4, out);
}

static int hs_fail(pmw_conn *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int hs_fail(pmw_conn *c, int code, const char *fmt, ...)
{
    /* Formatted aside first: callers may pass c->err itself as an argument. */
    char text[sizeof c->err];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (c->role == ROLE_SERVER && !c->broken)
        (void)pmw_conn_send_error(c, code, 0, text);
    memcpy(c->err, text, sizeof text);
    return fatal(c, code);
}

/* Receives the handshake message `want`; an error reply or anything else
 * ends the handshake. */
static int hs_recv(pmw_conn *c, pmw_kind want, pmw_msg *m)
{
    pmw_frame f;
    int rc = read_frame(c, &f);
    if (rc == PMW_E_TIMEOUT)
        return hs_fail(c, rc, "handshake: deadline passed waiting for %s", pmw__kind_name(want));
    if (rc)
        return fatal(c, rc);
    if ((rc = accept_frame(c, &f, m)) != 0)
        return hs_fail(c, rc, "handshake: %s", c->diag.text);
    if (m->kind == PMW_MSG_ERROR)
        return hs_fail(c, m->error.code, "handshake refused by the server: %s", m->error.text);
    if (m->kind != want)
        return hs_fail(c, PMW_E_KIND, "handshake: got %s, expected %s", pmw__kind_name(m->kind),
                       pmw__kind_name(want));
    return 0;
}

/* Leaves the handshake: the decoder switches to the real limits. */
static int open_conn(pmw_conn *c)
{
    if (pmw_decoder_pending(c->dec) != 0)
        return hs_fail(c, PMW_E_KIND, "handshake: peer sent frames before the handshake ended");
    pmw_decoder *d = NULL;
    int rc = pmw_decoder_create(&c->limits, &d);
    if (rc)
        return hs_fail(c, rc, "out of memory");
    pmw_decoder_destroy(c->dec);
    c->dec = d;
    c->state = STATE_OPEN;
    if (c->has_shm && c->peer.max_body > c->shm.area)
        c->peer.max_body = (uint32_t)c->shm.area;
    return 0;
}

static int client_auth(pmw_conn *c, const pmw_options *o, const pmw_hello *mine,
                       const pmw_hello *theirs)
{
    if (!theirs->auth) {
        if (o->token)
            return hs_fail(c, PMW_E_AUTH, "handshake: a token is set but the server does not authenticate");
        return 0;
    }
    if (!o->token)
        return hs_fail(c, PMW_E_AUTH, "handshake: the server requires a token");
    pmw_msg m;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_AUTH;
    auth_mac(o, label_client, theirs->nonce, mine->nonce, mine->transport, m.auth.mac);
    int rc = send_msg(c, &m, -1);
    if (rc)
        return rc;
    if ((rc = hs_recv(c, PMW_MSG_AUTH, &m)) != 0)
        return rc;
    uint8_t want[PMW_MAC_SIZE];
    auth_mac(o, label_server, mine->nonce, theirs->nonce, mine->transport, want);
    if (!pmw__ct_equal(want, m.auth.mac, PMW_MAC_SIZE))
        return hs_fail(c, PMW_E_AUTH, "handshake: the server failed to prove the token");
    return 0;
}

static int client_handshake(pmw_conn *c, const pmw_options *o)
{
    pmw_hello mine;
    memset(&mine, 0, sizeof mine);
    mine.transport = (uint8_t)o->transport;
    mine.limits = o->limits;
    if (random_bytes(mine.nonce, sizeof mine.nonce) != 0)
        return hs_fail(c, PMW_E_IO, "getrandom: %s", strerror(errno));
    if (o->transport == PMW_TRANSPORT_SHARED) {
        if (!c->is_unix)
            return hs_fail(c, PMW_E_TRANSPORT, "the shared transport needs a Unix socket");
        uint64_t area = pmw__shm_round(o->shm_size ? o->shm_size : DEFAULT_SHM);
        int rc = pmw__shm_create(&c->shm, area, c->err, sizeof c->err);
        if (rc)
            return fatal(c, rc);
        c->has_shm = 1;
        mine.shm_size = area;
    }
    pmw_msg m;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_HELLO;
    m.hello = mine;
    int rc = send_msg(c, &m, c->has_shm ? c->shm.fd : -1);
    if (rc)
        return rc;
    if ((rc = hs_recv(c, PMW_MSG_HELLO, &m)) != 0)
        return rc;
    pmw_hello theirs = m.hello;
    if (theirs.transport != mine.transport || theirs.shm_size != mine.shm_size)
        return hs_fail(c, PMW_E_TRANSPORT, "handshake: the server answered with another transport");
    if (theirs.limits.max_body == 0)
        return hs_fail(c, PMW_E_VALUE, "handshake: the server announced max_body 0 (no reply could be sent)");
    c->peer = theirs.limits;
    c->transport = mine.transport;
    if ((rc = client_auth(c, o, &mine, &theirs)) != 0)
        return rc;
    return open_conn(c);
}

/* Server: maps the region the client passed, or refuses the transport. */
static int server_transport(pmw_conn *c, const pmw_options *o, const pmw_hello *h)
{
    int fd = c->passed_fd;
    c->passed_fd = -1;
    if (h->transport == PMW_TRANSPORT_STREAM) {
        if (fd >= 0)
            close(fd);
        if (fd != -1)
            return hs_fail(c, PMW_E_TRANSPORT, "handshake: a descriptor was passed on the stream transport");
        return 0;
    }
    uint64_t max = o->shm_size ? o->shm_size : DEFAULT_SHM_MAX;
    int rc = PMW_E_TRANSPORT;
    if (!c->is_unix)
        pmw__fmt(c->err, sizeof c->err, "handshake: the shared transport needs a Unix socket");
    else if (fd < 0)
        pmw__fmt(c->err, sizeof c->err, "handshake: shared transport without exactly one descriptor");
    else if (h->shm_size > max || h->shm_size % PMW_SHM_CONTROL)
        pmw__fmt(c->err, sizeof c->err, "handshake: shared area of %llu bytes (allowed: pages, at most %llu)",
                 (unsigned long long)h->shm_size, (unsigned long long)max);
    else
        rc = pmw__shm_attach(&c->shm, fd, h->shm_size, c->err, sizeof c->err);
    if (rc) {
        if (fd >= 0)
            close(fd);
        return hs_fail(c, rc, "%s", c->err);
    }
    c->has_shm = 1;
    return 0;
}

static int server_auth(pmw_conn *c, const pmw_options *o, const pmw_hello *theirs,
                       const pmw_hello *mine)
{
    pmw_msg m;
    int rc = hs_recv(c, PMW_MSG_AUTH, &m);
    if (rc)
        return rc;
    uint8_t want[PMW_MAC_SIZE];
    auth_mac(o, label_client, mine->nonce, theirs->nonce, theirs->transport, want);
    if (!pmw__ct_equal(want, m.auth.mac, PMW_MAC_SIZE))
        return hs_fail(c, PMW_E_AUTH, "authentication failed");
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_AUTH;
    auth_mac(o, label_server, theirs->nonce, mine->nonce, theirs->transport, m.auth.mac);
    return send_msg(c, &m, -1);
}

static int server_handshake(pmw_conn *c, const pmw_options *o)
{
    pmw_msg m;
    int rc = hs_recv(c, PMW_MSG_HELLO, &m);
    if (rc) {
        if (c->passed_fd >= 0)
            close(c->passed_fd);
        c->passed_fd = -1;
        return rc;
    }
    pmw_hello theirs = m.hello, mine;
    if ((rc = server_transport(c, o, &theirs)) != 0)
        return rc;
    /* A peer that accepts no body could be sent no reply: every request
     * would be silently dropped, so it is refused here instead. */
    if (theirs.limits.max_body == 0)
        return hs_fail(c, PMW_E_VALUE, "handshake: max_body 0 (no reply could be sent)");
    c->peer = theirs.limits;
    c->transport = theirs.transport;
    memset(&mine, 0, sizeof mine);
    mine.transport = theirs.transport;
    mine.limits = o->limits;
    mine.shm_size = theirs.shm_size;
    mine.auth = o->token ? 1 : 0;
    if (random_bytes(mine.nonce, sizeof mine.nonce) != 0)
        return hs_fail(c, PMW_E_IO, "getrandom: %s", strerror(errno));
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_HELLO;
    m.hello = mine;
    if ((rc = send_msg(c, &m, -1)) != 0)
        return rc;
    if (o->token && (rc = server_auth(c, o, &theirs, &mine)) != 0)
        return rc;
    return open_conn(c);
}

static int make_conn(int fd, int role, const pmw_options *opt, pmw_conn **out, char *err,
                     size_t errlen)
{
    pmw_options defaults;
    if (out)
        *out = NULL;
    if (!opt) {
        pmw_options_default(&defaults);
        opt = &defaults;
    }
    int rc = out && fd >= 0 ? check_options(opt, err, errlen) : PMW_E_ARG;
    if (rc || pmw__set_nonblock(fd) != 0) {
        if (fd >= 0)
            close(fd);
        if (!rc)
            pmw__fmt(err, errlen, "fcntl: %s", strerror(errno));
        return rc ? rc : PMW_E_IO;
    }
    pmw_conn *c = conn_new(fd, role, opt);
    if (!c) {
        close(fd);
        pmw__fmt(err, errlen, "out of memory");
        return PMW_E_NOMEM;
    }
    rc = role == ROLE_CLIENT ? client_handshake(c, opt) : server_handshake(c, opt);
    if (rc) {
        pmw__fmt(err, errlen, "%s", c->err);
        pmw_conn_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

int pmw_conn_client(int fd, const pmw_options *opt, pmw_conn **out, char *err, size_t errlen)
{
    return make_conn(fd, ROLE_CLIENT, opt, out, err, errlen);
}

int pmw_conn_server(int fd, const pmw_options *opt, pmw_conn **out, char *err, size_t errlen)
{
    return make_conn(fd, ROLE_SERVER, opt, out, err, errlen);
}

int pmw_connect(const char *address, const pmw_options *opt, pmw_conn **out, char *err,
                size_t errlen)
{
    pmw__addr a;
    if (out)
        *out = NULL;
    if (!out)
        return PMW_E_ARG;
    int rc = pmw__parse_address(address, &a, err, errlen);
    if (rc)
        return rc;
    int timeout = opt ? opt->timeout_ms : DEFAULT_TIMEOUT_MS;
    int fd = pmw__connect(&a, pmw__now_ms() + (timeout > 0 ? timeout : DEFAULT_TIMEOUT_MS), err,
                          errlen);
    if (fd < 0)
        return fd;
    return pmw_conn_client(fd, opt, out, err, errlen);
}

/* ---- accessors ---------------------------------------------------------- */

uint64_t pmw_conn_next_seq(const pmw_conn *c)
{
    return c ? c->send_seq : 0;
}

void *pmw_conn_payload(pmw_conn *c, size_t *cap)
{
    if (!c || !c->has_shm) {
        if (cap)
            *cap = 0;
        return NULL;
    }
    if (cap)
        *cap = (size_t)c->shm.area;
    return c->shm.out;
}

int pmw_conn_set_timeout(pmw_conn *c, int timeout_ms)
{
    if (!c || timeout_ms <= 0)
        return PMW_E_ARG;
    c->timeout_ms = timeout_ms;
    return 0;
}

int pmw_conn_fd(const pmw_conn *c)
{
    return c ? c->fd : -1;
}

int pmw_conn_transport(const pmw_conn *c)
{
    return c ? c->transport : 0;
}

const pmw_limits *pmw_conn_peer_limits(const pmw_conn *c)
{
    return c ? &c->peer : NULL;
}

const char *pmw_conn_error(const pmw_conn *c)
{
    return c ? c->err : "";
}

const pmw_diag *pmw_conn_diag(const pmw_conn *c)
{
    return c ? &c->diag : NULL;
}

int pmw_conn_usable(const pmw_conn *c)
{
    return c && !c->broken;
}

void pmw_conn_close(pmw_conn *c)
{
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    if (c->passed_fd >= 0)
        close(c->passed_fd);
    pmw__shm_close(&c->shm);
    free(c->rx);
    pmw_decoder_destroy(c->dec);
    free(c);
}
