/* job.c — job lifetime and the bounded queue (see internal.h).
 *
 * The queue is a ring of job pointers under one mutex. Its capacity is the
 * server's --queue: requests beyond the running ones wait here, and a push
 * onto a full ring fails at once (or sheds the newest job of the client
 * holding the most, see internal.h) so the HTTP side can answer 503 with
 * Retry-After instead of piling up connections.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include "internal.h"

uint64_t pms_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

pms_job *pms_job_new(uint64_t id, pms_req *req, int32_t *prompt, size_t n_prompt)
{
    pms_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    if (pthread_mutex_init(&j->mu, NULL)) {
        free(j);
        return NULL;
    }
    if (pthread_cond_init(&j->cv, NULL)) {
        pthread_mutex_destroy(&j->mu);
        free(j);
        return NULL;
    }
    j->refs = 2;
    j->id = id;
    j->created = (int64_t)time(NULL);
    j->req = *req;
    memset(req, 0, sizeof *req);
    j->prompt = prompt;
    j->n_prompt = n_prompt;
    pms_buf_init(&j->text, 0);
    j->state = PMS_JOB_QUEUED;
    j->fd = -1;
    return j;
}

void pms_job_release(pms_job *j)
{
    if (!j)
        return;
    pthread_mutex_lock(&j->mu);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last)
        return;
    pms_req_free(&j->req);
    free(j->prompt);
    pms_buf_free(&j->text);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

void pms_job_fail_unstarted(pms_job *j, int status, const char *code, const char *msg)
{
    pthread_mutex_lock(&j->mu);
    pms_err_set(&j->fail, status, "server_error", code, NULL, "%s", msg);
    j->state = PMS_JOB_DONE;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void pms_job_cancel(pms_job *j)
{
    pthread_mutex_lock(&j->mu);
    j->cancel = 1;
    j->fd = -1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* ---- queue ------------------------------------------------------------- */

int pms_queue_init(pms_queue *q, int cap)
{
    memset(q, 0, sizeof *q);
    q->cap = cap;
    size_t n = 4;
    while (n < 2 * (size_t)cap)
        n *= 2;
    q->mask = n - 1;
    q->ring = calloc((size_t)cap, sizeof *q->ring);
    q->counts = calloc(n, sizeof *q->counts);
    q->with = calloc((size_t)cap + 1, sizeof *q->with);
    if (!q->ring || !q->counts || !q->with)
        goto fail;
    if (pthread_mutex_init(&q->mu, NULL))
        goto fail;
    if (pthread_cond_init(&q->cv, NULL)) {
        pthread_mutex_destroy(&q->mu);
        goto fail;
    }
    return 0;
fail:
    free(q->ring);
    free(q->counts);
    free(q->with);
    return -1;
}

void pms_queue_destroy(pms_queue *q)
{
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q->ring);
    free(q->counts);
    free(q->with);
    q->ring = NULL;
    q->counts = NULL;
    q->with = NULL;
}

/* Under q->mu: the table entry of client (an empty one where it would
 * go when it holds nothing). The table never fills: it has at least
 * twice as many entries as the queue holds jobs. */
static pms_queue_count *slot_of(pms_queue *q, uint64_t client)
{
    size_t i = (size_t)(client * 0x9e3779b97f4a7c15ull >> 17) & q->mask;
    while (q->counts[i].n && q->counts[i].client != client)
        i = (i + 1) & q->mask;
    return &q->counts[i];
}

static int held_by(pms_queue *q, uint64_t client)
{
    return slot_of(q, client)->n;
}

/* Under q->mu: one more (d = 1) or one fewer (d = -1) job for client. */
static void count_add(pms_queue *q, uint64_t client, int d)
{
    pms_queue_count *c = slot_of(q, client);
    if (c->n)
        q->with[c->n]--;
    c->client = client;
    c->n += d;
    if (c->n)
        q->with[c->n]++;
    if (c->n > q->max_n)
        q->max_n = c->n;
    while (q->max_n > 0 && q->with[q->max_n] == 0)
        q->max_n--;
    if (c->n)
        return;
    /* Emptied: close the gap so later probes still find their keys
     * (backward-shift deletion for linear probing). */
    size_t hole = (size_t)(c - q->counts);
    for (size_t i = (hole + 1) & q->mask; q->counts[i].n; i = (i + 1) & q->mask) {
        size_t home = (size_t)(q->counts[i].client * 0x9e3779b97f4a7c15ull >> 17) & q->mask;
        /* Move entry i into the hole unless its home lies in (hole, i]. */
        if (((i - home) & q->mask) >= ((i - hole) & q->mask)) {
            q->counts[hole] = q->counts[i];
            q->counts[i].n = 0;
            hole = i;
        }
    }
}

/* Under q->mu: would a job of client get in, by room or by shedding? */
static int admits_locked(pms_queue *q, uint64_t client)
{
    if (q->closed)
        return 0;
    return q->count < q->cap || held_by(q, client) + 2 <= q->max_n;
}

/* Under q->mu: takes out the newest job of a client that holds max_n. */
static pms_job *shed_locked(pms_queue *q)
{
    for (int k = q->count - 1; k >= 0; k--) {
        int at = (q->head + k) % q->cap;
        pms_job *j = q->ring[at];
        if (held_by(q, j->client) != q->max_n)
            continue;
        for (int m = k; m < q->count - 1; m++)
            q->ring[(q->head + m) % q->cap] = q->ring[(q->head + m + 1) % q->cap];
        q->count--;
        count_add(q, j->client, -1);
        return j;
    }
    return NULL; /* unreachable while max_n > 0 */
}

int pms_queue_push(pms_queue *q, pms_job *j, pms_job **shed)
{
    *shed = NULL;
    pthread_mutex_lock(&q->mu);
    int rc = admits_locked(q, j->client) ? 0 : q->closed ? -2 : -1;
    if (rc == 0) {
        if (q->count == q->cap)
            *shed = shed_locked(q);
        q->ring[(q->head + q->count) % q->cap] = j;
        q->count++;
        count_add(q, j->client, 1);
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

int pms_queue_admits(pms_queue *q, uint64_t client)
{
    pthread_mutex_lock(&q->mu);
    int ok = admits_locked(q, client);
    pthread_mutex_unlock(&q->mu);
    return ok;
}

/* Under q->mu. */
static pms_job *take_locked(pms_queue *q)
{
    if (q->count == 0)
        return NULL;
    pms_job *j = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    count_add(q, j->client, -1);
    return j;
}

pms_job *pms_queue_pop(pms_queue *q)
{
    pthread_mutex_lock(&q->mu);
    while (q->count == 0 && !q->closed)
        pthread_cond_wait(&q->cv, &q->mu);
    pms_job *j = take_locked(q);
    pthread_mutex_unlock(&q->mu);
    return j;
}

pms_job *pms_queue_take(pms_queue *q)
{
    pthread_mutex_lock(&q->mu);
    pms_job *j = take_locked(q);
    pthread_mutex_unlock(&q->mu);
    return j;
}

void pms_queue_close(pms_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

uint64_t pms_client_key(const struct sockaddr *sa)
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const unsigned char *b;
    if (sa && sa->sa_family == AF_INET) {
        b = (const unsigned char *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;
        return 1ull << 32 | (uint64_t)b[0] << 24 | (uint64_t)b[1] << 16 | (uint64_t)b[2] << 8 | b[3];
    }
    if (!sa || sa->sa_family != AF_INET6)
        return 0;
    b = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
    if (memcmp(b, mapped, 12) == 0)
        return 1ull << 32 | (uint64_t)b[12] << 24 | (uint64_t)b[13] << 16 | (uint64_t)b[14] << 8 | b[15];
    uint64_t k = 0;
    for (int i = 0; i < 8; i++)
        k = k << 8 | b[i];
    return k | 1ull << 63; /* apart from the IPv4 keys */
}
