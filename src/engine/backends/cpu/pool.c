/* pool.c — see pool.h.
 *
 * Protocol: the caller publishes (fn, ctx), sets `pending` to the worker
 * count and bumps `generation` (release); a worker that sees a new
 * generation runs its share and decrements `pending` (release). The caller
 * runs share 0 and then waits for `pending` to reach 0 (acquire). Sleepers
 * are woken through `cond` under `mutex`; the generation is re-checked under
 * the mutex so a wake-up is never lost. `run_lock` is held for a whole
 * run, so owners sharing the pool (llm_pool_ref) take turns.
 */
#define _POSIX_C_SOURCE 200809L
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "phasemark/engine.h"

/* Spin iterations (one relaxed load each, tens of microseconds in all)
 * before sleeping: long enough to bridge the gap between consecutive
 * matmuls of one decode step, short enough not to burn a core that another
 * process wants. The spin deliberately avoids PAUSE: in a virtual machine
 * pause loops trigger pause-loop exits, and the hypervisor then deschedules
 * the very vCPU that is about to receive work. */
#define POOL_SPIN 50000

/* One thread's part of an owned loop (pool.h), alone on its cache line:
 * the owner bumps it once per unit, so sharing a line with another part
 * would bounce it between the cores at every claim. */
typedef struct owned_part {
    _Alignas(64) int64_t next; /* atomic: units of the part claimed */
} owned_part;

typedef struct worker {
    llm_pool *pool;
    int32_t index;
    pthread_t thread;
} worker;

struct llm_pool {
    int32_t n_threads;
    worker *workers; /* [n_threads - 1] */
    int32_t started; /* workers successfully created */
    owned_part *parts; /* [n_threads] */
    llm_pool_fn fn;
    void *ctx;
    unsigned generation; /* atomic */
    int32_t pending;     /* atomic */
    int stop;            /* atomic */
    int32_t refs;        /* atomic: owners (llm_pool_ref) */
    pthread_mutex_t run_lock; /* held for a whole run */
    pthread_mutex_t mutex;
    pthread_cond_t cond;
};

static inline void cpu_relax(void)
{
    __asm__ __volatile__("" ::: "memory");
}

static unsigned wait_generation(llm_pool *p, unsigned seen)
{
    for (int i = 0; i < POOL_SPIN; i++) {
        unsigned g = __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE);
        if (g != seen || __atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
            return g;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mutex);
    unsigned g;
    while ((g = __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE)) == seen &&
           !__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
        pthread_cond_wait(&p->cond, &p->mutex);
    pthread_mutex_unlock(&p->mutex);
    return g;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    llm_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        seen = wait_generation(p, seen);
        if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
            return NULL;
        p->fn(p->ctx, w->index, p->n_threads);
        __atomic_fetch_sub(&p->pending, 1, __ATOMIC_ACQ_REL);
    }
}

int llm_pool_create(int32_t n_threads, llm_pool **out)
{
    *out = NULL;
    if (n_threads < 1)
        return LLM_EINVAL;
    llm_pool *p = calloc(1, sizeof *p);
    if (!p)
        return LLM_ENOMEM;
    p->n_threads = n_threads;
    p->parts = aligned_alloc(_Alignof(owned_part), (size_t)n_threads * sizeof *p->parts);
    if (!p->parts) {
        free(p);
        return LLM_ENOMEM;
    }
    llm_pool_owned_reset(p);
    p->refs = 1;
    if (pthread_mutex_init(&p->run_lock, NULL) != 0) {
        free(p->parts);
        free(p);
        return LLM_ENOMEM;
    }
    if (pthread_mutex_init(&p->mutex, NULL) != 0) {
        pthread_mutex_destroy(&p->run_lock);
        free(p->parts);
        free(p);
        return LLM_ENOMEM;
    }
    if (pthread_cond_init(&p->cond, NULL) != 0) {
        pthread_mutex_destroy(&p->mutex);
        pthread_mutex_destroy(&p->run_lock);
        free(p->parts);
        free(p);
        return LLM_ENOMEM;
    }
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers)
            goto fail;
        for (int32_t i = 0; i < n_threads - 1; i++) {
            worker *w = &p->workers[i];
            w->pool = p;
            w->index = i + 1;
            if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
                goto fail;
            p->started++;
        }
    }
    *out = p;
    return 0;
fail:
    llm_pool_free(p);
    return LLM_ENOMEM;
}

llm_pool *llm_pool_ref(llm_pool *p)
{
    __atomic_fetch_add(&p->refs, 1, __ATOMIC_RELAXED);
    return p;
}

void llm_pool_free(llm_pool *p)
{
    if (!p || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    pthread_mutex_lock(&p->mutex);
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mutex);
    for (int32_t i = 0; i < p->started; i++)
        pthread_join(p->workers[i].thread, NULL);
    free(p->workers);
    free(p->parts);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->mutex);
    pthread_mutex_destroy(&p->run_lock);
    free(p);
}

int32_t llm_pool_threads(const llm_pool *p)
{
    return p->n_threads;
}

/* One run; the caller holds run_lock. */
static void run_locked(llm_pool *p, llm_pool_fn fn, void *ctx)
{
    if (p->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    __atomic_store_n(&p->pending, p->n_threads - 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&p->mutex);
    __atomic_fetch_add(&p->generation, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mutex);
    fn(ctx, 0, p->n_threads);
    for (int i = 0; __atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) != 0; i++) {
        if (i < POOL_SPIN)
            cpu_relax();
        else
            sched_yield();
    }
}

void llm_pool_run(llm_pool *p, llm_pool_fn fn, void *ctx)
{
    pthread_mutex_lock(&p->run_lock);
    run_locked(p, fn, ctx);
    pthread_mutex_unlock(&p->run_lock);
}

void llm_pool_run_owned(llm_pool *p, llm_pool_fn fn, void *ctx)
{
    pthread_mutex_lock(&p->run_lock);
    llm_pool_owned_reset(p);
    run_locked(p, fn, ctx);
    pthread_mutex_unlock(&p->run_lock);
}

void llm_pool_owned_reset(llm_pool *p)
{
    for (int32_t i = 0; i < p->n_threads; i++)
        __atomic_store_n(&p->parts[i].next, 0, __ATOMIC_RELAXED);
}

int llm_pool_owned_next(llm_pool *p, int32_t ith, int64_t units, int32_t *visited,
                        int64_t *unit)
{
    int32_t nth = p->n_threads;
    for (; *visited < nth; (*visited)++) {
        int32_t t = (int32_t)((ith + *visited) % nth);
        int64_t b = units * t / nth, e = units * (t + 1) / nth;
        if (b + __atomic_load_n(&p->parts[t].next, __ATOMIC_RELAXED) >= e)
            continue; /* done: do not bump a finished part's counter */
        int64_t u = b + __atomic_fetch_add(&p->parts[t].next, 1, __ATOMIC_RELAXED);
        if (u < e) {
            *unit = u;
            return 1;
        }
    }
    return 0;
}

void llm_pool_slice(int64_t total, int64_t grain, int32_t ith, int32_t nth,
                    int64_t *begin, int64_t *end)
{
    int64_t units = (total + grain - 1) / grain;
    int64_t per = units / nth, extra = units % nth;
    int64_t ub = ith * per + (ith < extra ? ith : extra);
    int64_t ue = ub + per + (ith < extra ? 1 : 0);
    *begin = ub * grain < total ? ub * grain : total;
    *end = ue * grain < total ? ue * grain : total;
}
