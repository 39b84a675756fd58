/* test_engine_share — one worker pool shared by two owners (pool.h,
 * llm_pool_ref) and by two CPU backends (backend.h,
 * llm_backend_share_threads).
 *
 *   test_engine_share pool     two threads run owned loops on one pool at
 *                              once: every unit exactly once per run; the
 *                              pool outlives its first owner's free
 *   test_engine_share backend  the cases of llm_backend_share_threads'
 *                              return value, PHASEMARK_SHARE_THREADS off
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "pm_check.h"
#include "pool.h"

#define UNITS 777
#define ROUNDS 300

typedef struct owned_cover {
    llm_pool *pool;
    int hits[UNITS];
} owned_cover;

static void mark_owned(void *ctx, int32_t ith, int32_t nth)
{
    owned_cover *c = ctx;
    int32_t visited = 0;
    int64_t u;
    (void)nth;
    while (llm_pool_owned_next(c->pool, ith, UNITS, &visited, &u))
        __atomic_fetch_add(&c->hits[u], 1, __ATOMIC_RELAXED);
}

/* One owner's thread: ROUNDS owned runs; the runs that covered some unit
 * other than exactly once. */
typedef struct owner {
    llm_pool *pool;
    int bad;
} owner;

static void *run_owner(void *arg)
{
    owner *o = arg;
    static _Thread_local owned_cover c;
    for (int r = 0; r < ROUNDS; r++) {
        memset(&c, 0, sizeof c);
        c.pool = o->pool;
        llm_pool_run_owned(o->pool, mark_owned, &c);
        for (int i = 0; i < UNITS; i++)
            if (c.hits[i] != 1) {
                o->bad++;
                break;
            }
    }
    return NULL;
}

static void test_pool(void)
{
    llm_pool *p;
    REQUIRE(llm_pool_create(2, &p) == 0);
    /* Two owners, each on its own thread, running at once: without the
     * pool's run lock their resets and claims would interleave. */
    owner a = {llm_pool_ref(p), 0}, b = {p, 0};
    pthread_t ta, tb;
    REQUIRE(pthread_create(&ta, NULL, run_owner, &a) == 0);
    REQUIRE(pthread_create(&tb, NULL, run_owner, &b) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK_INT_EQ(a.bad, 0);
    CHECK_INT_EQ(b.bad, 0);
    /* The first free drops one owner; the pool still runs for the other. */
    llm_pool_free(p);
    CHECK_INT_EQ(llm_pool_threads(p), 2);
    run_owner(&a);
    CHECK_INT_EQ(a.bad, 0);
    llm_pool_free(p);
}

static llm_backend *cpu(int32_t threads)
{
    llm_backend *be = NULL;
    char err[256];
    if (llm_cpu_backend_create(threads, 0, &be, err, sizeof err) != 0)
        fprintf(stderr, "cpu backend: %s\n", err);
    return be;
}

static void test_backend(void)
{
    llm_backend *t = cpu(2), *d = cpu(2), *three = cpu(3);
    REQUIRE(t && d && three);
    CHECK_INT_EQ(llm_backend_share_threads(d, NULL), 0); /* its own already */
    CHECK_INT_EQ(llm_backend_share_threads(d, three), 0); /* 2 threads, not 3 */
    CHECK_INT_EQ(llm_backend_share_threads(NULL, t), 0);
    setenv("PHASEMARK_SHARE_THREADS", "Off", 1);
    CHECK_INT_EQ(llm_backend_share_threads(d, t), 0);
    setenv("PHASEMARK_SHARE_THREADS", "1", 1);
    CHECK_INT_EQ(llm_backend_share_threads(d, t), 1);
    unsetenv("PHASEMARK_SHARE_THREADS");
    CHECK_INT_EQ(llm_backend_share_threads(d, t), 1); /* already */
    CHECK_INT_EQ(llm_backend_share_threads(t, d), 1); /* one pool either way */
    /* The target freed first: the draft keeps the pool alive. */
    t->ops->destroy(t);
    CHECK_INT_EQ(llm_backend_share_threads(d, NULL), 1); /* its own again */
    CHECK_INT_EQ(llm_backend_share_threads(d, NULL), 0);
    d->ops->destroy(d);
    three->ops->destroy(three);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_engine_share pool|backend\n");
        return 2;
    }
    if (!strcmp(argv[1], "pool"))
        test_pool();
    else if (!strcmp(argv[1], "backend"))
        test_backend();
    else
        return 2;
    return pm_check_result();
}
