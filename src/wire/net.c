/* net.c — sockets, addresses and deadline-bounded I/O.
 *
 * Every socket the wire uses is non-blocking; a blocking operation is a
 * loop of poll() with the time left until an absolute deadline on
 * CLOCK_MONOTONIC, so a stalled or dead peer costs at most the deadline.
 * SIGPIPE is never raised (MSG_NOSIGNAL): a closed peer is an error code.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "net.h"

int64_t pmw__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int pmw__wait(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - pmw__now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
        if (r > 0)
            return 1;
        if (r == 0)
            return 0;
        if (errno != EINTR)
            return -1;
    }
}

/* Advances an iovec array past n sent bytes. */
static void iov_advance(struct iovec **iov, int *cnt, size_t n)
{
    while (*cnt > 0 && n >= (*iov)->iov_len) {
        n -= (*iov)->iov_len;
        (*iov)++;
        (*cnt)--;
    }
    if (*cnt > 0) {
        (*iov)->iov_base = (char *)(*iov)->iov_base + n;
        (*iov)->iov_len -= n;
    }
}

static void attach_fd(struct msghdr *mh, union pmw__cmsg *cbuf, int fd)
{
    memset(cbuf, 0, sizeof *cbuf);
    mh->msg_control = cbuf->buf;
    mh->msg_controllen = sizeof cbuf->buf;
    struct cmsghdr *cm = CMSG_FIRSTHDR(mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
}

int pmw__send_iov(int fd, struct iovec *iov, int cnt, int pass_fd, int64_t deadline,
                  char *err, size_t errlen)
{
    union pmw__cmsg cbuf;
    while (cnt > 0 && iov->iov_len == 0) {
        iov++;
        cnt--;
    }
    while (cnt > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        if (pass_fd >= 0)
            attach_fd(&mh, &cbuf, pass_fd);
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            pass_fd = -1; /* the descriptor rides on the first byte only */
            iov_advance(&iov, &cnt, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int w = pmw__wait(fd, POLLOUT, deadline);
            if (w == 0) {
                pmw__fmt(err, errlen, "send: deadline passed with the peer not reading");
                return PMW_E_TIMEOUT;
            }
            if (w < 0) {
                pmw__fmt(err, errlen, "send: poll: %s", strerror(errno));
                return PMW_E_IO;
            }
            continue;
        }
        int e = errno;
        pmw__fmt(err, errlen, "send: %s", strerror(e));
        return (e == EPIPE || e == ECONNRESET) ? PMW_E_CLOSED : PMW_E_IO;
    }
    return 0;
}

static void take_fds(struct msghdr *mh, int *got_fd)
{
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
            if (*got_fd == -1) {
                *got_fd = fd;
                continue;
            }
            /* More than one descriptor is a protocol violation: keep none. */
            close(fd);
            if (*got_fd >= 0)
                close(*got_fd);
            *got_fd = -2;
        }
    }
}

long pmw__recv_some(int fd, void *buf, size_t len, int *got_fd, int64_t deadline,
                    char *err, size_t errlen)
{
    for (;;) {
        union pmw__cmsg cbuf;
        struct iovec iov = {.iov_base = buf, .iov_len = len};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        if (got_fd) {
            mh.msg_control = cbuf.buf;
            mh.msg_controllen = sizeof cbuf.buf;
        }
        ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n >= 0) {
            if (got_fd)
                take_fds(&mh, got_fd);
            return (long)n;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            int e = errno;
            pmw__fmt(err, errlen, "recv: %s", strerror(e));
            return e == ECONNRESET ? PMW_E_CLOSED : PMW_E_IO;
        }
        int w = pmw__wait(fd, POLLIN, deadline);
        if (w == 0) {
            pmw__fmt(err, errlen, "recv: deadline passed with nothing from the peer");
            return PMW_E_TIMEOUT;
        }
        if (w < 0) {
            pmw__fmt(err, errlen, "recv: poll: %s", strerror(errno));
            return PMW_E_IO;
        }
    }
}

/* ---- addresses ---------------------------------------------------------- */

/* A plain decimal port in 0..65535: digits only. */
static int parse_port(const char *s, size_t len, uint16_t *out)
{
    char buf[8];
    if (len == 0 || len >= sizeof buf)
        return -1;
    for (size_t i = 0; i < len; i++)
        if (s[i] < '0' || s[i] > '9')
            return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *end = NULL;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (errno || *end != '\0' || v > 65535)
        return -1;
    *out = (uint16_t)v;
    return 0;
}

/* "HOST:PORT", "[V6]:PORT", ":PORT" or "PORT" after "tcp:". A host holds
 * a ':' only inside brackets, and brackets only around the whole host. */
static int parse_tcp(const char *s, pmw_address *a)
{
    const char *host = s, *port = s;
    size_t hlen = 0;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close == s + 1 || close[1] != ':')
            return -1;
        host = s + 1;
        hlen = (size_t)(close - host);
        port = close + 2;
    } else {
        const char *colon = strchr(s, ':');
        if (colon) {
            hlen = (size_t)(colon - s);
            port = colon + 1;
        }
        if (memchr(host, '[', hlen) || memchr(host, ']', hlen))
            return -1;
    }
    if (hlen >= sizeof a->host || strchr(port, ':') || parse_port(port, strlen(port), &a->port))
        return -1;
    a->host_given = hlen > 0;
    if (!a->host_given) {
        host = "127.0.0.1";
        hlen = strlen(host);
    }
    memcpy(a->host, host, hlen);
    a->host[hlen] = '\0';
    return 0;
}

int pmw_address_parse(const char *address, pmw_address *a, char *err, size_t errlen)
{
    if (!a)
        return PMW_E_ARG;
    memset(a, 0, sizeof *a);
    if (!address || !*address) {
        pmw__fmt(err, errlen, "empty address");
        return PMW_E_ARG;
    }
    if (strncmp(address, "tcp:", 4) == 0) {
        if (parse_tcp(address + 4, a) == 0)
            return 0;
        memset(a, 0, sizeof *a);
        pmw__fmt(err, errlen, "bad TCP address \"%.200s\" (want tcp:HOST:PORT, tcp:[V6]:PORT "
                 "or tcp::PORT; PORT 0-65535)", address);
        return PMW_E_ARG;
    }
    const char *path = NULL;
    if (strncmp(address, "unix:", 5) == 0)
        path = address + 5;
    else if (strchr(address, '/'))
        path = address;
    if (!path || !*path || strlen(path) >= sizeof a->path) {
        pmw__fmt(err, errlen, "bad address \"%.200s\" (want unix:PATH or tcp:HOST:PORT; "
                 "paths are at most %zu bytes)", address, sizeof a->path - 1);
        return PMW_E_ARG;
    }
    a->is_unix = 1;
    memcpy(a->path, path, strlen(path) + 1);
    return 0;
}

int pmw__parse_address(const char *address, pmw__addr *a, char *err, size_t errlen)
{
    pmw_address pa;
    memset(a, 0, sizeof *a);
    int rc = pmw_address_parse(address, &pa, err, errlen);
    if (rc)
        return rc;
    a->is_unix = pa.is_unix;
    memcpy(a->path, pa.path, sizeof a->path);
    memcpy(a->host, pa.host, sizeof a->host);
    pmw__fmt(a->port, sizeof a->port, "%u", (unsigned)pa.port);
    return 0;
}

int pmw__set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -1;
    return 0;
}

void pmw__tcp_nodelay(int fd)
{
    int one = 1;
    /* Small forward calls are latency bound; a failure only costs speed. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void unix_sockaddr(const char *path, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, path, strlen(path) + 1);
}

static int connect_unix(const char *path, int64_t deadline, char *err, size_t errlen)
{
    struct sockaddr_un sa;
    unix_sockaddr(path, &sa);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        pmw__fmt(err, errlen, "socket: %s", strerror(errno));
        return PMW_E_IO;
    }
    for (;;) {
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
            return fd;
        /* A full backlog answers EAGAIN on a non-blocking Unix connect;
         * retry briefly until the deadline. */
        if (errno == EINTR || (errno == EAGAIN && pmw__now_ms() < deadline)) {
            struct timespec nap = {0, 1000000};
            nanosleep(&nap, NULL);
            continue;
        }
        pmw__fmt(err, errlen, "connect %s: %s", path, strerror(errno));
        close(fd);
        return errno == EAGAIN ? PMW_E_TIMEOUT : PMW_E_IO;
    }
}

static int connect_one(const struct addrinfo *ai, int64_t deadline, char *err, size_t errlen)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
        pmw__fmt(err, errlen, "socket: %s", strerror(errno));
        return PMW_E_IO;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
        pmw__fmt(err, errlen, "connect: %s", strerror(errno));
        close(fd);
        return PMW_E_IO;
    }
    int w = pmw__wait(fd, POLLOUT, deadline), soerr = 0;
    socklen_t sl = sizeof soerr;
    if (w <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr) {
        pmw__fmt(err, errlen, "connect: %s", w == 0 ? "deadline passed" : strerror(soerr ? soerr : errno));
        close(fd);
        return w == 0 ? PMW_E_TIMEOUT : PMW_E_IO;
    }
    pmw__tcp_nodelay(fd);
    return fd;
}

static int connect_tcp(const pmw__addr *a, int64_t deadline, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(a->host, a->port, &hints, &res);
    if (gai != 0) {
        pmw__fmt(err, errlen, "resolve %s: %s", a->host, gai_strerror(gai));
        return PMW_E_IO;
    }
    int fd = PMW_E_IO;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = connect_one(ai, deadline, err, errlen);
        if (fd >= 0 || fd == PMW_E_TIMEOUT)
            break;
    }
    freeaddrinfo(res);
    return fd;
}

int pmw__connect(const pmw__addr *a, int64_t deadline, char *err, size_t errlen)
{
    return a->is_unix ? connect_unix(a->path, deadline, err, errlen)
                      : connect_tcp(a, deadline, err, errlen);
}

/* ---- listening ---------------------------------------------------------- */

/* True when path is a socket file nobody listens on (a daemon died). */
static int stale_socket(const struct sockaddr_un *sa)
{
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0)
        return 0;
    int rc = connect(probe, (const struct sockaddr *)sa, sizeof *sa);
    int stale = rc != 0 && errno == ECONNREFUSED;
    close(probe);
    return stale;
}

static int listen_unix(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sa;
    unix_sockaddr(path, &sa);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        pmw__fmt(err, errlen, "socket: %s", strerror(errno));
        return PMW_E_IO;
    }
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa), e = errno;
    /* Replace the file only when nobody answers on it; a live daemon keeps
     * its address. */
    if (rc != 0 && e == EADDRINUSE && stale_socket(&sa)) {
        rc = unlink(path) == 0 ? bind(fd, (struct sockaddr *)&sa, sizeof sa) : -1;
        e = errno;
    }
    if (rc == 0) {
        rc = listen(fd, 16);
        e = errno;
    }
    if (rc == 0)
        return fd;
    pmw__fmt(err, errlen, "listen %s: %s", path, strerror(e));
    close(fd);
    return PMW_E_IO;
}

int pmw__is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return 0;
}

static int listen_tcp(const pmw__addr *a, int have_token, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(a->host, a->port, &hints, &res);
    if (gai != 0) {
        pmw__fmt(err, errlen, "resolve %s: %s", a->host, gai_strerror(gai));
        return PMW_E_IO;
    }
    int fd = PMW_E_IO;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        if (!have_token && !pmw__is_loopback(ai->ai_addr)) {
            pmw__fmt(err, errlen, "binding %s (not loopback) requires a token", a->host);
            fd = PMW_E_AUTH;
            break;
        }
        int s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        int one = 1;
        if (s >= 0 && setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
            bind(s, ai->ai_addr, ai->ai_addrlen) == 0 && listen(s, 16) == 0) {
            fd = s;
            break;
        }
        pmw__fmt(err, errlen, "listen %s:%s: %s", a->host, a->port, strerror(errno));
        if (s >= 0)
            close(s);
    }
    freeaddrinfo(res);
    return fd;
}

int pmw__listen(const pmw__addr *a, int have_token, char *err, size_t errlen)
{
    return a->is_unix ? listen_unix(a->path, err, errlen) : listen_tcp(a, have_token, err, errlen);
}

void pmw__sockname(int fd, const pmw__addr *a, char *out, size_t len)
{
    if (a->is_unix) {
        pmw__fmt(out, len, "unix:%s", a->path);
        return;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
            port = ntohs(in->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
            port = ntohs(in6->sin6_port);
            pmw__fmt(out, len, "tcp:[%s]:%u", host, port);
            return;
        }
    }
    pmw__fmt(out, len, "tcp:%s:%u", host, port);
}
