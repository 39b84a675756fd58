/* net.h — sockets, addresses and deadline-bounded I/O (net.c). */
#ifndef PMW_NET_H
#define PMW_NET_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "internal.h"

/* A control buffer for exactly one passed descriptor, aligned for cmsghdr. */
union pmw__cmsg {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
};

/* A parsed address (pmw_address_parse) with the port as the text
 * getaddrinfo takes. */
typedef struct pmw__addr {
    int is_unix;
    char path[108];
    char host[256];
    char port[8];
} pmw__addr;

int64_t pmw__now_ms(void);
/* poll() for events until the deadline: 1 ready, 0 deadline passed, -1 error. */
int pmw__wait(int fd, short events, int64_t deadline);
/* Writes every byte of iov (consumed in place) before the deadline; pass_fd
 * >= 0 rides along as SCM_RIGHTS on the first byte. 0 or a status. */
int pmw__send_iov(int fd, struct iovec *iov, int cnt, int pass_fd, int64_t deadline,
                  char *err, size_t errlen);
/* Reads at least one byte before the deadline: returns the count, 0 at EOF,
 * or a negative status. got_fd (may be NULL) receives a passed descriptor
 * (-1 none; -2 when more than one came, all closed); without it any passed
 * descriptor is closed by the kernel. */
long pmw__recv_some(int fd, void *buf, size_t len, int *got_fd, int64_t deadline,
                    char *err, size_t errlen);

int pmw__parse_address(const char *address, pmw__addr *a, char *err, size_t errlen);
int pmw__connect(const pmw__addr *a, int64_t deadline, char *err, size_t errlen);
int pmw__listen(const pmw__addr *a, int have_token, char *err, size_t errlen);
void pmw__sockname(int fd, const pmw__addr *a, char *out, size_t len);
int pmw__is_loopback(const struct sockaddr *sa);
int pmw__set_nonblock(int fd);
void pmw__tcp_nodelay(int fd);

#endif
