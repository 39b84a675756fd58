/* client.c — plain-socket HTTP client and pm-server runner (client.h). */
#include "client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/types.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

long long hc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void hc_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void hc_free(hc_resp *r)
{
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof *r);
}

const char *hc_header(const hc_resp *r, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *line = r->head; line && *line;) {
        const char *eol = strstr(line, "\r\n");
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        if (len > nl && line[nl] == ':' && strncasecmp(line, name, nl) == 0) {
            const char *v = line + nl + 1;
            while (*v == ' ')
                v++;
            size_t vl = (size_t)(line + len - v);
            if (vl >= cap)
                vl = cap - 1;
            memcpy(out, v, vl);
            out[vl] = 0;
            return out;
        }
        line = eol ? eol + 2 : line + len;
    }
    return NULL;
}

int hc_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int wait_fd(int fd, short ev, long long deadline)
{
    for (;;) {
        long long left = deadline - hc_now_ms();
        if (left <= 0)
            return -1;
        struct pollfd p = {fd, ev, 0};
        int rc = poll(&p, 1, (int)left);
        if (rc > 0)
            return 0;
        if (rc < 0 && errno != EINTR)
            return -1;
    }
}

int hc_send_all(int fd, const void *p, size_t n, int timeout_ms)
{
    long long deadline = hc_now_ms() + timeout_ms;
    const char *c = p;
    while (n) {
        if (wait_fd(fd, POLLOUT, deadline))
            return -1;
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

ssize_t hc_read_all(int fd, char **out, int timeout_ms)
{
    long long deadline = hc_now_ms() + timeout_ms;
    size_t n = 0, cap = 4096;
    char *b = malloc(cap);
    *out = b;
    if (!b)
        return -1;
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb)
                break;
            *out = b = nb;
            cap *= 2;
        }
        b[n] = 0;
        if (wait_fd(fd, POLLIN, deadline))
            return -1;
        ssize_t r = recv(fd, b + n, cap - n - 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return errno == ECONNRESET ? (ssize_t)n : -1;
        if (r == 0)
            return (ssize_t)n;
        n += (size_t)r;
        b[n] = 0;
    }
    return -1;
}

/* De-chunks body[0..n) into out; -1 when the framing is wrong or cut. */
static int dechunk(const char *p, size_t n, char *out, size_t *out_n)
{
    size_t i = 0, o = 0;
    for (;;) {
        char *end;
        errno = 0;
        unsigned long len = strtoul(p + i, &end, 16);
        if (end == p + i || errno)
            return -1;
        const char *eol = strstr(end, "\r\n");
        if (!eol || (size_t)(eol - p) + 2 > n)
            return -1;
        i = (size_t)(eol - p) + 2;
        if (len == 0)
            break;
        if (i + len + 2 > n || p[i + len] != '\r' || p[i + len + 1] != '\n')
            return -1;
        memcpy(out + o, p + i, len);
        o += len;
        i += len + 2;
    }
    out[o] = 0;
    *out_n = o;
    return 0;
}

int hc_parse(const char *raw, size_t n, hc_resp *r)
{
    memset(r, 0, sizeof *r);
    int minor = 0;
    if (n < 12 || sscanf(raw, "HTTP/1.%d %d", &minor, &r->status) != 2) {
        r->status = 0;
        r->closed_early = 1;
        return -1;
    }
    const char *sep = strstr(raw, "\r\n\r\n");
    if (!sep) {
        r->closed_early = 1;
        return -1;
    }
    size_t hl = (size_t)(sep - raw) + 2;
    r->head = malloc(hl + 1);
    r->body = malloc(n + 1);
    if (!r->head || !r->body)
        return -1;
    memcpy(r->head, raw, hl);
    r->head[hl] = 0;
    const char *b = sep + 4;
    size_t bn = n - (size_t)(b - raw);
    char te[64];
    r->chunked = hc_header(r, "Transfer-Encoding", te, sizeof te) && strcasecmp(te, "chunked") == 0;
    if (r->chunked)
        return dechunk(b, bn, r->body, &r->body_len) ? (r->closed_early = 1, -1) : 0;
    memcpy(r->body, b, bn);
    r->body[bn] = 0;
    r->body_len = bn;
    char cl[32];
    if (hc_header(r, "Content-Length", cl, sizeof cl) && strtoul(cl, NULL, 10) != bn) {
        r->closed_early = 1;
        return -1;
    }
    return 0;
}

int hc_read_one(int fd, hc_resp *r, int timeout_ms)
{
    long long deadline = hc_now_ms() + timeout_ms;
    char buf[65536];
    size_t n = 0, want = 0;
    memset(r, 0, sizeof *r);
    for (;;) {
        buf[n] = 0;
        const char *sep = strstr(buf, "\r\n\r\n");
        if (sep && !want) {
            const char *cl = strstr(buf, "Content-Length: ");
            if (!cl || cl > sep)
                return -1;
            want = (size_t)(sep + 4 - buf) + strtoul(cl + 16, NULL, 10);
        }
        if (want && n >= want)
            return n == want ? hc_parse(buf, n, r) : -1;
        if (n + 1 >= sizeof buf || wait_fd(fd, POLLIN, deadline))
            return -1;
        /* One byte at a time: never read into the next response. */
        ssize_t got = recv(fd, buf + n, 1, 0);
        if (got <= 0)
            return -1;
        n += (size_t)got;
    }
}

int hc_request(int port, const char *method, const char *path, const char *body, hc_resp *r, int timeout_ms)
{
    memset(r, 0, sizeof *r);
    int fd = hc_connect(port);
    if (fd < 0)
        return -1;
    char head[512];
    int hn = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      method, path, body ? strlen(body) : 0);
    int rc = -1;
    char *raw = NULL;
    if (hc_send_all(fd, head, (size_t)hn, timeout_ms) == 0 &&
        (!body || hc_send_all(fd, body, strlen(body), timeout_ms) == 0)) {
        ssize_t n = hc_read_all(fd, &raw, timeout_ms);
        if (n >= 0)
            rc = hc_parse(raw, (size_t)n, r);
        if (rc && r->status && r->body_len == 0 && strcmp(method, "HEAD") == 0)
            rc = 0; /* a HEAD answer declares the length of a body it omits */
    }
    free(raw);
    close(fd);
    return rc;
}

/* ---- the server process ------------------------------------------------ */

/* Reads one line from fd within timeout_ms. */
static int read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
    long long deadline = hc_now_ms() + timeout_ms;
    size_t n = 0;
    while (n + 1 < cap) {
        if (wait_fd(fd, POLLIN, deadline))
            return -1;
        ssize_t r = read(fd, buf + n, 1);
        if (r <= 0)
            return -1;
        if (buf[n] == '\n')
            break;
        n++;
    }
    buf[n] = 0;
    return 0;
}

int srv_start(srv_proc *p, const char *server_path, const char *model, const char *const *extra)
{
    const char *argv[64] = {server_path, "-m", model, "--port", "0", "--threads", "1"};
    size_t argc = 7;
    for (size_t i = 0; extra && extra[i] && argc < 62; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    int out[2];
    char tmpl[] = "/tmp/pm_server_stderr_XXXXXX";
    int err = mkstemp(tmpl);
    if (err < 0)
        return -1;
    unlink(tmpl);
    if (pipe(out)) {
        close(err);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err, 2);
        close(out[0]);
        execv(server_path, (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    memset(p, 0, sizeof *p);
    p->pid = pid;
    p->out_fd = out[0];
    p->err_fd = err;
    char line[512];
    const char *at;
    if (read_line(out[0], line, sizeof line, 60000) || !(at = strstr(line, "127.0.0.1:"))) {
        fprintf(stderr, "pm-server did not start (line: '%s')\n", line);
        srv_stop(p, SIGKILL, 5000);
        free(p->log);
        p->log = NULL;
        return -1;
    }
    p->port = (int)strtol(at + 10, NULL, 10);
    return 0;
}

int srv_stop(srv_proc *p, int sig, int timeout_ms)
{
    if (p->pid <= 0)
        return -1;
    kill(p->pid, sig);
    long long deadline = hc_now_ms() + timeout_ms;
    int st = 0, rc = -1;
    struct rusage ru;
    for (;;) {
        pid_t w = wait4(p->pid, &st, WNOHANG, &ru);
        if (w == p->pid) {
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
            p->cpu_ms = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                        (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
            break;
        }
        if (hc_now_ms() > deadline) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            break;
        }
        hc_sleep_ms(5);
    }
    /* Keep the server's stderr and pass its tail through, so a failing
     * test shows it. */
    off_t size = lseek(p->err_fd, 0, SEEK_END);
    p->log = malloc(size > 0 ? (size_t)size + 1 : 1);
    size_t got = 0;
    if (p->log && size > 0 && lseek(p->err_fd, 0, SEEK_SET) == 0)
        while (got < (size_t)size) {
            ssize_t n = read(p->err_fd, p->log + got, (size_t)size - got);
            if (n <= 0)
                break;
            got += (size_t)n;
        }
    if (p->log) {
        p->log[got] = 0;
        fputs(got > 2000 ? p->log + got - 2000 : p->log, stderr);
    }
    close(p->out_fd);
    close(p->err_fd);
    p->pid = 0;
    return rc;
}

double srv_metric(int port, const char *name)
{
    hc_resp r;
    if (hc_request(port, "GET", "/metrics", NULL, &r, 10000) != 0 || r.status != 200) {
        hc_free(&r);
        return -1;
    }
    double v = -1;
    size_t nl = strlen(name);
    for (const char *l = r.body; l && *l;) {
        if (strncmp(l, name, nl) == 0 && l[nl] == ' ') {
            v = strtod(l + nl + 1, NULL);
            break;
        }
        const char *e = strchr(l, '\n');
        l = e ? e + 1 : NULL;
    }
    hc_free(&r);
    return v;
}

int srv_wait_metric(int port, const char *name, double want, int timeout_ms)
{
    long long deadline = hc_now_ms() + timeout_ms;
    while (hc_now_ms() < deadline) {
        if (srv_metric(port, name) >= want)
            return 0;
        hc_sleep_ms(2);
    }
    return -1;
}
