/* listener.c — daemons' side: bind, accept, hand each client to the server
 * handshake. The listener keeps its own copy of the token so the caller's
 * options need not outlive pmw_listen. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net.h"

struct pmw_listener {
    int fd;
    pmw__addr addr;
    pmw_options opt;   /* token points at token_copy */
    char *token_copy;
    char address[320];
};

int pmw_listen(const char *address, const pmw_options *opt, pmw_listener **out, char *err,
               size_t errlen)
{
    if (!out)
        return PMW_E_ARG;
    *out = NULL;
    pmw_listener *l = calloc(1, sizeof *l);
    if (!l) {
        pmw__fmt(err, errlen, "out of memory");
        return PMW_E_NOMEM;
    }
    l->fd = -1;
    if (opt)
        l->opt = *opt;
    else
        pmw_options_default(&l->opt);
    if (l->opt.token) {
        l->token_copy = malloc(l->opt.token_len ? l->opt.token_len : 1);
        if (!l->token_copy) {
            free(l);
            return PMW_E_NOMEM;
        }
        memcpy(l->token_copy, l->opt.token, l->opt.token_len);
        l->opt.token = l->token_copy;
    }
    int rc = pmw__parse_address(address, &l->addr, err, errlen);
    if (rc == 0) {
        int fd = pmw__listen(&l->addr, l->opt.token != NULL, err, errlen);
        rc = fd < 0 ? fd : 0;
        l->fd = fd;
    }
    if (rc) {
        free(l->token_copy);
        free(l);
        return rc;
    }
    pmw__sockname(l->fd, &l->addr, l->address, sizeof l->address);
    *out = l;
    return 0;
}

int pmw_accept_fd(pmw_listener *l, int timeout_ms, int *fd_out, char *err, size_t errlen)
{
    if (!l || !fd_out || timeout_ms <= 0)
        return PMW_E_ARG;
    *fd_out = -1;
    int w = pmw__wait(l->fd, POLLIN, pmw__now_ms() + timeout_ms);
    if (w == 0) {
        pmw__fmt(err, errlen, "accept: no client within %d ms", timeout_ms);
        return PMW_E_TIMEOUT;
    }
    int fd = w < 0 ? -1 : accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
        /* A client that gave up between poll and accept is not an error of
         * the listener; report it as a timeout the caller can retry. */
        int e = errno;
        pmw__fmt(err, errlen, "accept: %s", strerror(e));
        return (e == EAGAIN || e == ECONNABORTED || e == EINTR) ? PMW_E_TIMEOUT : PMW_E_IO;
    }
    if (!l->addr.is_unix)
        pmw__tcp_nodelay(fd);
    *fd_out = fd;
    return 0;
}

int pmw_accept(pmw_listener *l, int timeout_ms, pmw_conn **out, char *err, size_t errlen)
{
    if (!l || !out || timeout_ms <= 0)
        return PMW_E_ARG;
    *out = NULL;
    int fd;
    int rc = pmw_accept_fd(l, timeout_ms, &fd, err, errlen);
    return rc ? rc : pmw_conn_server(fd, &l->opt, out, err, errlen);
}

const char *pmw_listener_address(const pmw_listener *l)
{
    return l ? l->address : "";
}

int pmw_listener_fd(const pmw_listener *l)
{
    return l ? l->fd : -1;
}

void pmw_listener_close(pmw_listener *l)
{
    if (!l)
        return;
    if (l->fd >= 0)
        close(l->fd);
    if (l->addr.is_unix)
        unlink(l->addr.path);
    free(l->token_copy);
    free(l);
}
