/* split_remote.c — remote shards over the shard wire (split_remote.h).
 *
 * Spawning. The daemon gets one end of a socket pair as descriptor 3 and
 * serves exactly that connection; the wire handshake, which it starts only
 * once its span is loaded, is the readiness handshake, bounded by
 * LLM_SPLIT_START_MS. A close-on-exec pipe reports a failed exec (errno)
 * before any handshake is tried. The daemon exits when its connection
 * closes, so closing ours and waiting is the whole shutdown; a daemon that
 * lingers past a second is killed. Everything the child does between fork
 * and exec is async-signal-safe (the argument vector is built before fork).
 *
 * Clock alignment. Every connection, spawned or dialled, starts with a few
 * clock probes (pmw_conn_clock_sync): the daemon, when captured, records
 * the offset from its host's clock to ours, so that its ranges can be laid
 * on our time line. A daemon that predates the probes refuses them and is
 * used as before.
 */
#define _GNU_SOURCE /* pipe2 */
#include "split_remote.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "phasemark/wire.h"

/* Probe rounds per connection: the best of 8 round trips is within a few
 * microseconds of the fastest on a quiet link, and 8 cost a few hundred
 * microseconds over a LAN, once per connection. */
#define CLOCK_ROUNDS 8

/* Candidate daemon programs and arguments, built before fork. */
#define MAX_CANDIDATES 4
#define MAX_ARGS 24
#define ARG_BYTES 2048

struct llm_remote {
    llm_shard_spec spec;
    llm_remote_params p;
    char *model_path;     /* owned copy */
    pmw_conn *c;          /* NULL: dropped */
    pid_t pid;            /* spawned daemon, 0: none */
    char what[LLM_SPLIT_MAX_ADDR + 64]; /* "shard 1 (unix:/run/s.sock)" */
};

long llm_remote_pid(const llm_remote *r)
{
    return r ? (long)r->pid : 0;
}

static void describe(llm_remote *r)
{
    if (r->spec.kind == LLM_SHARD_SPAWN)
        snprintf(r->what, sizeof r->what, "shard %d (spawn:%s, layers %d-%d)", r->p.index,
                 r->spec.backend, (int)r->spec.first, (int)r->spec.last);
    else
        snprintf(r->what, sizeof r->what, "shard %d (%s)", r->p.index, r->spec.address);
}

/* ---- child processes ------------------------------------------------------ */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits for the spawned daemon, up to grace_ms, then kills it. Writes how
 * it ended into why (may be NULL). */
static void reap(llm_remote *r, long grace_ms, char *why, size_t whylen)
{
    if (why && whylen)
        why[0] = '\0';
    if (r->pid <= 0)
        return;
    int status = 0;
    pid_t got = 0;
    for (long waited = 0; (got = waitpid(r->pid, &status, WNOHANG)) == 0; waited += 2) {
        if (waited >= grace_ms) {
            kill(r->pid, SIGKILL);
            got = waitpid(r->pid, &status, 0);
            break;
        }
        sleep_ms(2);
    }
    if (got == r->pid && why) {
        if (WIFSIGNALED(status))
            snprintf(why, whylen, "; daemon pid %ld killed by signal %d", (long)r->pid,
                     WTERMSIG(status));
        else if (WIFEXITED(status))
            snprintf(why, whylen, "; daemon pid %ld exited with status %d", (long)r->pid,
                     WEXITSTATUS(status));
    }
    r->pid = 0;
}

/* Closes the connection and reaps a spawned daemon; kill: it may still run
 * (a stall), so it is killed at once rather than given a grace period. */
static void drop(llm_remote *r, int kill_now, char *why, size_t whylen)
{
    pmw_conn_close(r->c);
    r->c = NULL;
    if (r->pid > 0 && kill_now)
        kill(r->pid, SIGKILL);
    reap(r, 1000, why, whylen);
}

typedef struct spawn_args {
    char buf[ARG_BYTES];
    size_t used;
    char *argv[MAX_ARGS];
    int argc;
    char *cand[MAX_CANDIDATES];
    int n_cand;
} spawn_args;

static char *keep(spawn_args *a, const char *s)
{
    size_t len = strlen(s) + 1;
    if (len > sizeof a->buf - a->used)
        return NULL;
    char *dst = a->buf + a->used;
    memcpy(dst, s, len);
    a->used += len;
    return dst;
}

static int add_arg(spawn_args *a, const char *s)
{
    if (a->argc >= MAX_ARGS - 1 || !(a->argv[a->argc] = keep(a, s)))
        return -1;
    a->argc++;
    return 0;
}

/* The directory of this program plus "/pm-shardd", when it can be read. */
static int beside_self(char *out, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", out, cap - 16);
    if (n <= 0)
        return -1;
    out[n] = '\0';
    char *slash = strrchr(out, '/');
    if (!slash)
        return -1;
    memcpy(slash + 1, "pm-shardd", sizeof "pm-shardd");
    return 0;
}

/* Where to look for the daemon: exe= alone when given, PHASEMARK_SHARDD
 * alone when set, else beside this program, the build tree, then PATH. */
static int find_candidates(const llm_remote *r, spawn_args *a)
{
    const char *env = getenv("PHASEMARK_SHARDD");
    char self[LLM_SPLIT_MAX_PATH + 16];
    if (r->spec.exe[0])
        return (a->cand[a->n_cand++] = keep(a, r->spec.exe)) ? 0 : -1;
    if (env && env[0])
        return (a->cand[a->n_cand++] = keep(a, env)) ? 0 : -1;
    if (beside_self(self, sizeof self) == 0 && access(self, X_OK) == 0)
        a->cand[a->n_cand++] = keep(a, self);
#ifdef LLM_SHARDD_BUILD_PATH
    if (access(LLM_SHARDD_BUILD_PATH, X_OK) == 0)
        a->cand[a->n_cand++] = keep(a, LLM_SHARDD_BUILD_PATH);
#endif
    a->cand[a->n_cand++] = keep(a, "pm-shardd");
    for (int i = 0; i < a->n_cand; i++)
        if (!a->cand[i])
            return -1;
    return 0;
}

static int build_args(const llm_remote *r, spawn_args *a)
{
    char layers[32], shard[16], ctx[16], batch[16], threads[16];
    snprintf(layers, sizeof layers, "%d-%d", (int)r->spec.first, (int)r->spec.last);
    snprintf(shard, sizeof shard, "%d", r->p.index);
    snprintf(ctx, sizeof ctx, "%u", (unsigned)r->p.n_ctx);
    snprintf(batch, sizeof batch, "%d", (int)r->p.n_batch);
    snprintf(threads, sizeof threads, "%d", (int)r->spec.threads);
    const char *args[] = {"pm-shardd", "--fd", "3", "--model", r->model_path, "--layers",
                          layers, "--shard", shard, "--ctx", ctx, "--batch", batch,
                          "--backend", r->spec.backend, "--threads", threads};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++)
        if (add_arg(a, args[i]))
            return -1;
    a->argv[a->argc] = NULL;
    return find_candidates(r, a);
}

/* In the child: descriptor 3 becomes the daemon's connection, then each
 * candidate is tried; a failure reports errno on the pipe. */
static void child_exec(spawn_args *a, int sock, int errfd)
{
    if (errfd == 3)
        errfd = fcntl(errfd, F_DUPFD_CLOEXEC, 10);
    if (sock == 3)
        fcntl(3, F_SETFD, 0);
    else if (dup2(sock, 3) < 0)
        goto fail;
    for (int i = 0; i < a->n_cand; i++) {
        if (strchr(a->cand[i], '/'))
            execv(a->cand[i], a->argv);
        else
            execvp(a->cand[i], a->argv);
    }
fail:;
    int e = errno;
    ssize_t w = write(errfd, &e, sizeof e);
    (void)w;
    _exit(127);
}

/* Waits for the exec: a closed pipe means it happened, an errno on it that
 * it failed (the child then exits 127 and is reaped here). */
static int await_exec(llm_remote *r, int errfd, const spawn_args *a, char *err, size_t errlen)
{
    int child_errno = 0;
    ssize_t got;
    while ((got = read(errfd, &child_errno, sizeof child_errno)) < 0 && errno == EINTR)
        ;
    close(errfd);
    if (got != (ssize_t)sizeof child_errno)
        return 0;
    reap(r, 1000, NULL, 0);
    llm_errf(err, errlen, "%s: cannot run %s: %s (set PHASEMARK_SHARDD or exe=)", r->what,
             a->cand[a->n_cand - 1], strerror(child_errno));
    return LLM_EBACKEND;
}

/* Forks and execs the daemon with one end of a socket pair as its
 * descriptor 3. Returns the other end, or -1 with err set. */
static int start_child(llm_remote *r, spawn_args *a, char *err, size_t errlen)
{
    int sv[2], ep[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        llm_errf(err, errlen, "%s: socketpair: %s", r->what, strerror(errno));
        return -1;
    }
    if (pipe2(ep, O_CLOEXEC) != 0) {
        llm_errf(err, errlen, "%s: pipe: %s", r->what, strerror(errno));
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        close(ep[0]);
        child_exec(a, sv[1], ep[1]);
    }
    int fork_errno = errno;
    close(sv[1]);
    close(ep[1]);
    if (pid < 0) {
        close(sv[0]);
        close(ep[0]);
        llm_errf(err, errlen, "%s: fork: %s", r->what, strerror(fork_errno));
        return -1;
    }
    r->pid = pid;
    if (await_exec(r, ep[0], a, err, errlen) != 0) {
        close(sv[0]);
        return -1;
    }
    return sv[0];
}

/* Starts the daemon and runs the client handshake with it. */
static int spawn(llm_remote *r, const pmw_options *opt, char *err, size_t errlen)
{
    spawn_args a;
    memset(&a, 0, sizeof a);
    if (build_args(r, &a)) {
        llm_errf(err, errlen, "%s: daemon arguments too long", r->what);
        return LLM_EBACKEND;
    }
    int fd = start_child(r, &a, err, errlen);
    if (fd < 0)
        return LLM_EBACKEND;
    pmw_options o = *opt;
    o.timeout_ms = LLM_SPLIT_START_MS;
    char werr[256] = "";
    int rc = pmw_conn_client(fd, &o, &r->c, werr, sizeof werr);
    if (rc == 0)
        rc = pmw_conn_set_timeout(r->c, r->spec.timeout_ms);
    if (rc) {
        char why[96];
        drop(r, 1, why, sizeof why);
        llm_errf(err, errlen, "%s: daemon did not start: %s%s", r->what, werr, why);
        return LLM_EBACKEND;
    }
    return 0;
}

/* ---- connections -------------------------------------------------------------- */

/* Aligns the clocks on a new connection. Only a failed connection is an
 * error: a refusal (an older daemon) leaves it as usable as before. */
static int align_clock(llm_remote *r, char *err, size_t errlen)
{
    pmw_clock_estimate est;
    int rc = pmw_conn_clock_sync(r->c, CLOCK_ROUNDS, &est);
    if (rc == 0 || pmw_conn_usable(r->c))
        return 0;
    char wline[160];
    snprintf(wline, sizeof wline, "%s", pmw_conn_error(r->c));
    drop(r, 1, NULL, 0);
    llm_errf(err, errlen, "%s: clock probe failed: %s (%s)", r->what, pmw_strerror(rc), wline);
    return LLM_EBACKEND;
}

static int connect_shard(llm_remote *r, char *err, size_t errlen)
{
    pmw_options o;
    pmw_options_default(&o);
    o.transport = r->spec.transport;
    o.timeout_ms = r->spec.timeout_ms;
    /* One frame carries at most n_batch rows of logits (or activations)
     * and their ids, and features of up to LLM_FEATURES_MAX layers of
     * them; the defaults (64 MiB) already cover this for usual shapes, and
     * a bigger model gets what it needs (a shared region's pages cost
     * only once touched). */
    uint64_t width = (uint64_t)(r->p.n_vocab > r->p.dim ? r->p.n_vocab : r->p.dim) + 1 +
                     (uint64_t)LLM_FEATURES_MAX * (uint64_t)r->p.dim;
    uint64_t need = (uint64_t)r->p.n_batch * width * sizeof(float) + 4096;
    if (need > o.limits.max_body && need <= UINT32_MAX)
        o.limits.max_body = (uint32_t)need;
    if (need > o.shm_size)
        o.shm_size = need;
    if (r->spec.token[0]) {
        o.token = r->spec.token;
        o.token_len = strlen(r->spec.token);
    }
    if (r->spec.kind == LLM_SHARD_SPAWN) {
        int rc = spawn(r, &o, err, errlen);
        return rc ? rc : align_clock(r, err, errlen);
    }
    char werr[256];
    if (pmw_connect(r->spec.address, &o, &r->c, werr, sizeof werr) != 0) {
        llm_errf(err, errlen, "%s: cannot connect: %s", r->what, werr);
        return LLM_EBACKEND;
    }
    return align_clock(r, err, errlen);
}

/* 1 when an idle connection shows input or a hangup: between calls the
 * daemon has nothing to say, so that means it closed or died. */
static int idle_broken(const pmw_conn *c)
{
    struct pollfd pfd = {pmw_conn_fd(c), POLLIN, 0};
    return poll(&pfd, 1, 0) != 0;
}

/* Connects a dropped shard, or one whose daemon went away while idle, so
 * that a restarted daemon is picked up by the next call. */
static int ensure(llm_remote *r, char *err, size_t errlen)
{
    if (r->c && pmw_conn_usable(r->c) && !idle_broken(r->c))
        return 0;
    if (r->c || r->pid > 0)
        drop(r, 1, NULL, 0);
    return connect_shard(r, err, errlen);
}

int llm_remote_open(const llm_shard_spec *spec, const llm_remote_params *p,
                    llm_remote **out, char *err, size_t errlen)
{
    *out = NULL;
    llm_remote *r = calloc(1, sizeof *r);
    if (!r || !(r->model_path = strdup(p->model_path ? p->model_path : ""))) {
        free(r);
        llm_errf(err, errlen, "shard %d: out of memory", p->index);
        return LLM_ENOMEM;
    }
    r->spec = *spec;
    r->p = *p;
    r->p.model_path = NULL;
    describe(r);
    int rc = connect_shard(r, err, errlen);
    if (rc) {
        llm_remote_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

void llm_remote_close(llm_remote *r)
{
    if (!r)
        return;
    drop(r, 0, NULL, 0);
    free(r->model_path);
    free(r);
}

/* A call failed on the connection itself: drop the shard and say why. */
static int lost(llm_remote *r, const char *step, int code, char *err, size_t errlen)
{
    char wline[160], why[96];
    snprintf(wline, sizeof wline, "%s", r->c ? pmw_conn_error(r->c) : "");
    drop(r, 1, why, sizeof why);
    llm_errf(err, errlen, "%s: %s failed: %s%s%s%s", r->what, step, pmw_strerror(code),
             wline[0] ? " (" : "", wline, wline[0] ? ")" : "");
    size_t len = strlen(err ? err : "");
    if (err && why[0] && len + 1 < errlen)
        snprintf(err + len, errlen - len, "%s", why);
    return LLM_EBACKEND;
}

/* The engine status an error reply stands for. */
static int refused(llm_remote *r, const pmw_error *e, char *err, size_t errlen)
{
    llm_errf(err, errlen, "%s: refused: %s", r->what, e->text);
    int st = e->code <= -100 ? e->code + 100 : LLM_EBACKEND;
    return st < LLM_ESPACE || st >= 0 ? LLM_EBACKEND : st;
}

/* Sends msg and receives the answer into *ans; 0, or a status after which
 * the shard is dropped (lost) or kept (refused). */
static int call(llm_remote *r, const pmw_msg *msg, pmw_msg *ans, char *err, size_t errlen)
{
    int rc = pmw_conn_send(r->c, msg);
    if (rc && !pmw_conn_usable(r->c))
        return lost(r, "send", rc, err, errlen);
    if (rc) { /* refused before anything was written: the link is intact */
        llm_errf(err, errlen, "%s: request refused locally: %s", r->what, pmw_conn_error(r->c));
        return LLM_EINVAL;
    }
    rc = pmw_conn_recv(r->c, ans);
    if (rc)
        return lost(r, "receive", rc, err, errlen);
    if (ans->kind == PMW_MSG_ERROR)
        return refused(r, &ans->error, err, errlen);
    return 0;
}

/* The engine's output bits are the wire's (forward.h). */
_Static_assert((int)LLM_OUT_ACTIVATIONS == (int)PMW_OUT_ACTIVATIONS &&
                   (int)LLM_OUT_LOGITS == (int)PMW_OUT_LOGITS &&
                   (int)LLM_OUT_ARGMAX == (int)PMW_OUT_ARGMAX &&
                   (int)LLM_OUT_FEATURES == (int)PMW_OUT_FEATURES &&
                   LLM_FEATURES_MAX == PMW_FEATURES_MAX && LLM_TREE_MAX == PMW_TREE_MAX,
               "llm_output bits and PMW_OUT_* differ");

/* The reply must be exactly what was asked: rows, the float section's
 * width, the argmax section, the features' layers x rows x dim. */
static int check_reply(llm_remote *r, const pmw_msg *ans, const llm_forward_in *in,
                       char *err, size_t errlen)
{
    uint32_t want = in->out.want;
    int acts = (want & LLM_OUT_ACTIVATIONS) != 0;
    uint32_t rows = acts ? (uint32_t)in->n : (uint32_t)in->out.rows;
    uint32_t width = acts ? (uint32_t)r->p.dim
                          : want & LLM_OUT_LOGITS ? (uint32_t)r->p.n_vocab : 0;
    const pmw_reply *rep = &ans->reply;
    uint32_t nf = want & LLM_OUT_FEATURES ? (uint32_t)in->out.n_feat : 0;
    int feat_ok = nf ? rep->feat_layers == nf && rep->feat_rows == (uint32_t)in->n &&
                           rep->feat_dim == (uint32_t)r->p.dim && rep->features
                     : rep->feat_layers == 0;
    if (ans->kind != PMW_MSG_REPLY || rep->req_id != in->req || rep->n_tokens != rows ||
        rep->width != width || rep->outputs != want || (width && !rep->values) ||
        ((want & LLM_OUT_ARGMAX) && !rep->argmax) || !feat_ok) {
        pmw_conn_close(r->c);
        r->c = NULL;
        llm_errf(err, errlen,
                 "%s: unexpected reply (kind %d, outputs %u, %u rows of %u, want %u: %u of %u)",
                 r->what, (int)ans->kind, (unsigned)rep->outputs, (unsigned)rep->n_tokens,
                 (unsigned)rep->width, (unsigned)want, (unsigned)rows, (unsigned)width);
        return LLM_EBACKEND;
    }
    return 0;
}

int llm_remote_forward(llm_remote *r, const llm_forward_in *in, const float *act,
                       llm_remote_reply *rep, char *err, size_t errlen)
{
    int rc = ensure(r, err, errlen);
    if (rc)
        return rc;
    pmw_msg m, ans;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_FORWARD;
    m.forward.phase = in->phase;
    m.forward.req_id = in->req;
    m.forward.base_pos = in->pos0;
    m.forward.n_tokens = (uint32_t)in->n;
    m.forward.want = in->out.want;
    m.forward.rows = in->out.want & LLM_OUT_ACTIVATIONS ? (uint32_t)in->n
                                                         : (uint32_t)in->out.rows;
    m.forward.n_feat = in->out.want & LLM_OUT_FEATURES ? (uint32_t)in->out.n_feat : 0;
    for (uint32_t j = 0; j < m.forward.n_feat; j++)
        m.forward.feat[j] = (uint32_t)in->out.feat[j];
    if (in->tree) { /* the split checked n == tree->n and the phase */
        m.forward.n_tree = (uint32_t)in->tree->n;
        for (int32_t i = 0; i < in->tree->n; i++)
            m.forward.tree_parent[i] = in->tree->parent[i];
    }
    if (r->spec.first == 0) {
        m.forward.tokens = in->tokens;
    } else {
        m.forward.dim = (uint32_t)r->p.dim;
        m.forward.activations = act;
    }
    rc = call(r, &m, &ans, err, errlen);
    if (rc == 0)
        rc = check_reply(r, &ans, in, err, errlen);
    if (rc == 0) {
        rep->values = ans.reply.values;
        rep->ids = ans.reply.argmax;
        rep->feat = ans.reply.features;
    }
    return rc;
}

int llm_remote_truncate(llm_remote *r, uint64_t req, uint32_t pos, char *err, size_t errlen)
{
    if (!r->c)
        return 0; /* a new connection starts empty */
    pmw_msg m, ans;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_TRUNCATE;
    m.truncate.req_id = req;
    m.truncate.position = pos;
    int rc = call(r, &m, &ans, err, errlen);
    if (rc == 0 && ans.kind != PMW_MSG_ACK) {
        pmw_conn_close(r->c);
        r->c = NULL;
        llm_errf(err, errlen, "%s: unexpected answer to truncate (kind %d)", r->what, (int)ans.kind);
        return LLM_EBACKEND;
    }
    return rc;
}

int llm_remote_keep(llm_remote *r, uint64_t req, uint32_t pos0, const int32_t *rows, int32_t count,
                    char *err, size_t errlen)
{
    if (!r->c) { /* dropped since the verify: its rows are gone */
        llm_errf(err, errlen, "%s: the shard was dropped after the tree verify", r->what);
        return LLM_EBACKEND;
    }
    if (count < 1 || count > PMW_TREE_MAX) {
        llm_errf(err, errlen, "%s: keep of %d rows (1..%d)", r->what, (int)count, PMW_TREE_MAX);
        return LLM_EINVAL;
    }
    pmw_msg m, ans;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_KEEP;
    m.keep.req_id = req;
    m.keep.base_pos = pos0;
    m.keep.n_rows = (uint32_t)count;
    for (int32_t j = 0; j < count; j++)
        m.keep.rows[j] = (uint32_t)rows[j];
    int rc = call(r, &m, &ans, err, errlen);
    if (rc == 0 && ans.kind != PMW_MSG_ACK) {
        pmw_conn_close(r->c);
        r->c = NULL;
        llm_errf(err, errlen, "%s: unexpected answer to keep (kind %d)", r->what, (int)ans.kind);
        return LLM_EBACKEND;
    }
    return rc;
}

void llm_remote_reset(llm_remote *r, uint64_t req)
{
    if (!r->c)
        return;
    pmw_msg m, ans;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_RESET;
    m.reset.req_id = req;
    char err[8];
    if (call(r, &m, &ans, err, sizeof err) != 0 || ans.kind != PMW_MSG_ACK)
        drop(r, 1, NULL, 0);
}

int llm_remote_send_raw(llm_remote *r, uint16_t kind, const void *meta, size_t meta_len,
                        const void *body, size_t body_len, int *code, char *text,
                        size_t textlen, char *err, size_t errlen)
{
    int rc = ensure(r, err, errlen);
    if (rc)
        return rc;
    rc = pmw_conn_send_frame(r->c, kind, 0, meta, meta_len, body, body_len);
    if (rc)
        return lost(r, "send", rc, err, errlen);
    pmw_msg ans;
    rc = pmw_conn_recv(r->c, &ans);
    if (rc)
        return lost(r, "receive", rc, err, errlen);
    *code = ans.kind == PMW_MSG_ERROR ? ans.error.code : 0;
    snprintf(text, textlen, "%s", ans.kind == PMW_MSG_ERROR ? ans.error.text : "");
    return 0;
}
