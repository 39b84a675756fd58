/* job.c — job lifetime and the bounded queue (see internal.h).
 *
 * The queue is a ring of job pointers under one mutex. Its capacity is the
 * server's --queue: requests beyond the running ones wait here, and a push
 * onto a full ring fails at once so the HTTP side can answer 503 with
 * Retry-After instead of piling up connections.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    if (!(q->ring = calloc((size_t)cap, sizeof *q->ring)))
        return -1;
    if (pthread_mutex_init(&q->mu, NULL)) {
        free(q->ring);
        return -1;
    }
    if (pthread_cond_init(&q->cv, NULL)) {
        pthread_mutex_destroy(&q->mu);
        free(q->ring);
        return -1;
    }
    return 0;
}

void pms_queue_destroy(pms_queue *q)
{
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q->ring);
    q->ring = NULL;
}

int pms_queue_push(pms_queue *q, pms_job *j)
{
    pthread_mutex_lock(&q->mu);
    int rc = q->closed ? -2 : q->count == q->cap ? -1 : 0;
    if (rc == 0) {
        q->ring[(q->head + q->count) % q->cap] = j;
        q->count++;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

/* Under q->mu. */
static pms_job *take_locked(pms_queue *q)
{
    if (q->count == 0)
        return NULL;
    pms_job *j = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
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
