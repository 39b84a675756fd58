/* guard.h — bounds on connections that have not sent a request yet.
 *
 * libmicrohttpd bounds connections in number and idle time, but a client
 * that trickles one header line at a time is never idle for long and can
 * hold a slot as long as it likes; enough such clients hold every slot
 * (slowloris). The guard tracks every connection from accept to close
 * and knows which ones are waiting for a request's headers: a new one, or
 * a kept-alive one between requests. Two rules bound them:
 *
 *   - a connection waiting longer than the header deadline is cut, however
 *     steadily its bytes arrive;
 *   - at most max_waiting connections may wait at once; the rest of the
 *     slots (the reserve) belong to requests whose headers are in. A new
 *     connection beyond max_waiting cuts the one that has waited longest,
 *     so a client that sends its headers promptly always gets in and the
 *     slow ones are the ones that make room. A kept-alive connection
 *     between two requests of a busy client is not slow: it is spared
 *     until it has waited PMS_GUARD_GRACE_NS (when only such connections
 *     wait, nobody is cut and the connection limit applies: the
 *     listening thread accepts no more until a connection ends).
 *
 * Cutting is shutdown(2) on the socket: the connection's own thread sees
 * end-of-file and libmicrohttpd closes it as usual. The socket stays ours
 * to shut down until pms_guard_close, which libmicrohttpd calls before it
 * closes the descriptor, so a cut never reaches a reused descriptor.
 *
 * Threads: every call may come from any thread; one mutex guards the
 * table. A reaper thread enforces the deadline, checking every 250 ms
 * (or every tenth of the deadline when that is shorter), so a cut lands
 * at most that long after it.
 */
#ifndef PM_SERVER_GUARD_H
#define PM_SERVER_GUARD_H

#include <pthread.h>
#include <stdint.h>

#include "metrics.h"

/* How long a kept-alive connection may wait before it counts as slow. */
#define PMS_GUARD_GRACE_NS 1000000000ull

typedef struct pms_guard_slot {
    int fd;
    int used;
    int waiting;       /* waiting for a request's headers, not cut */
    int cut;           /* shut down by the guard: closing */
    int kept;          /* has finished a request (kept alive) */
    int niced;         /* the connection's thread lowered its priority
                          (touched by that thread only) */
    uint64_t refused_ns; /* when it was last answered 503 overloaded
                            (monotonic; 0: never; that thread only) */
    uint64_t since_ns; /* when the current wait began (monotonic) */
} pms_guard_slot;

typedef struct pms_guard {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* wakes the reaper early (stop) */
    pms_guard_slot *slots;  /* cap entries, owned */
    int cap;
    int n_waiting;          /* slots with waiting set */
    int max_waiting;
    uint64_t deadline_ns;   /* header deadline */
    int stop;
    int reaper_started;
    pthread_t reaper;
    pms_metrics *metrics;   /* not owned: cut counts go here */
} pms_guard;

/* Sets up a guard for cap connections, of which at most max_waiting may
 * wait for headers, each for at most header_timeout_s seconds, and starts
 * its reaper. 0, or -1 (out of memory or no thread); *g is then inert and
 * pms_guard_destroy is still harmless. */
int pms_guard_init(pms_guard *g, int cap, int max_waiting, int header_timeout_s, pms_metrics *m);
/* Stops the reaper and frees the table. After every connection closed. */
void pms_guard_destroy(pms_guard *g);

/* A connection was accepted on fd: it now waits for headers. May cut the
 * longest waiter to stay within max_waiting. Returns its slot (the
 * connection's socket context), or NULL when the table is full, in which
 * case fd has been shut down. */
pms_guard_slot *pms_guard_open(pms_guard *g, int fd);
/* The connection's request headers are complete: it no longer waits. */
void pms_guard_headers_in(pms_guard *g, pms_guard_slot *s);
/* Its request finished; a kept-alive connection waits for the next one. */
void pms_guard_request_done(pms_guard *g, pms_guard_slot *s);
/* The connection is closing (before its descriptor is closed). NULL is
 * harmless. */
void pms_guard_close(pms_guard *g, pms_guard_slot *s);

#endif
