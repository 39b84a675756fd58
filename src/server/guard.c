/* guard.c — header deadline and reserve for connections (see guard.h).
 *
 * The table has one slot per connection libmicrohttpd may hold, so a slot
 * is always free for an accepted connection. Waiting slots are found by a
 * scan (at most --max-connections entries, on accept and at every reaper
 * check), cheap beside the accept itself.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "guard.h"
#include "internal.h"

/* Under g->mu: shuts the waiting connection in s down and stops counting
 * it. libmicrohttpd closes it and calls pms_guard_close. */
static void cut(pms_guard *g, pms_guard_slot *s, atomic_uint_fast64_t *counter)
{
    shutdown(s->fd, SHUT_RDWR);
    s->waiting = 0;
    s->cut = 1;
    g->n_waiting--;
    atomic_fetch_add(counter, 1);
}

static void *reaper_main(void *arg)
{
    pms_guard *g = arg;
    uint64_t step_ns = g->deadline_ns / 10 < 250000000u ? g->deadline_ns / 10 : 250000000u;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        struct timespec due;
        clock_gettime(CLOCK_MONOTONIC, &due);
        uint64_t ns = (uint64_t)due.tv_nsec + step_ns;
        due.tv_sec += (time_t)(ns / 1000000000u);
        due.tv_nsec = (long)(ns % 1000000000u);
        pthread_cond_timedwait(&g->cv, &g->mu, &due);
        uint64_t now = pms_now_ns();
        for (int i = 0; i < g->cap && !g->stop; i++) {
            pms_guard_slot *s = &g->slots[i];
            if (s->used && s->waiting && now - s->since_ns > g->deadline_ns)
                cut(g, s, &g->metrics->cut_header_timeout);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int pms_guard_init(pms_guard *g, int cap, int max_waiting, int header_timeout_s, pms_metrics *m)
{
    memset(g, 0, sizeof *g);
    g->cap = cap;
    g->max_waiting = max_waiting;
    g->deadline_ns = (uint64_t)header_timeout_s * 1000000000u;
    g->metrics = m;
    if (!(g->slots = calloc((size_t)cap, sizeof *g->slots)))
        return -1;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca))
        goto fail_slots;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc)
        goto fail_slots;
    if (pthread_mutex_init(&g->mu, NULL))
        goto fail_cv;
    if (pthread_create(&g->reaper, NULL, reaper_main, g))
        goto fail_mu;
    g->reaper_started = 1;
    return 0;
fail_mu:
    pthread_mutex_destroy(&g->mu);
fail_cv:
    pthread_cond_destroy(&g->cv);
fail_slots:
    free(g->slots);
    g->slots = NULL;
    return -1;
}

void pms_guard_destroy(pms_guard *g)
{
    if (!g->slots)
        return;
    if (g->reaper_started) {
        pthread_mutex_lock(&g->mu);
        g->stop = 1;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->reaper, NULL);
        g->reaper_started = 0;
    }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->slots);
    g->slots = NULL;
}

pms_guard_slot *pms_guard_open(pms_guard *g, int fd)
{
    pms_guard_slot *free_slot = NULL, *oldest = NULL;
    pthread_mutex_lock(&g->mu);
    uint64_t now = pms_now_ns();
    for (int i = 0; i < g->cap; i++) {
        pms_guard_slot *s = &g->slots[i];
        if (!s->used && !free_slot)
            free_slot = s;
        int slow = !s->kept || now - s->since_ns >= PMS_GUARD_GRACE_NS;
        if (s->used && s->waiting && slow && (!oldest || s->since_ns < oldest->since_ns))
            oldest = s;
    }
    if (free_slot && oldest && g->n_waiting >= g->max_waiting)
        cut(g, oldest, &g->metrics->cut_reserve);
    if (free_slot) {
        *free_slot = (pms_guard_slot){.fd = fd, .used = 1, .waiting = 1, .since_ns = now};
        g->n_waiting++;
    }
    pthread_mutex_unlock(&g->mu);
    if (!free_slot)
        shutdown(fd, SHUT_RDWR);
    return free_slot;
}

void pms_guard_headers_in(pms_guard *g, pms_guard_slot *s)
{
    pthread_mutex_lock(&g->mu);
    if (s->waiting) {
        s->waiting = 0;
        g->n_waiting--;
    }
    pthread_mutex_unlock(&g->mu);
}

void pms_guard_request_done(pms_guard *g, pms_guard_slot *s)
{
    pthread_mutex_lock(&g->mu);
    if (!s->waiting && !s->cut) {
        s->waiting = 1;
        s->kept = 1;
        s->since_ns = pms_now_ns();
        g->n_waiting++;
    }
    pthread_mutex_unlock(&g->mu);
}

void pms_guard_close(pms_guard *g, pms_guard_slot *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&g->mu);
    if (s->waiting)
        g->n_waiting--;
    memset(s, 0, sizeof *s);
    pthread_mutex_unlock(&g->mu);
}
