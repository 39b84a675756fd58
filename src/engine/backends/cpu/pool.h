/* pool.h — a persistent pool of worker threads for data-parallel loops.
 *
 * llm_pool_run(pool, fn, ctx) calls fn(ctx, i, n) once for every i in
 * 0..n-1, where n is the pool's thread count, the caller acting as i = 0,
 * and returns when all calls have returned. Workers are created once and
 * wait between runs, first spinning briefly (a decode step issues a few
 * hundred runs back to back) and then sleeping on a condition variable, so
 * an idle pool costs nothing. A run allocates nothing.
 *
 * Runs are serialized by the pool itself: two backends may share one pool
 * (llm_pool_ref; the draft model of a speculative generator runs on the
 * target's, so the two never hold the cores against each other), and a
 * run of one waits for the other's to finish. Uncontended, that costs a
 * lock and an unlock per run (tens of ns against runs of microseconds).
 */
#ifndef LLM_CPU_POOL_H
#define LLM_CPU_POOL_H

#include <stdint.h>

typedef struct llm_pool llm_pool;
typedef void (*llm_pool_fn)(void *ctx, int32_t ith, int32_t nth);

/* Creates a pool of n_threads (>= 1; n_threads - 1 workers). 0, or a
 * negative status with *out NULL. */
int llm_pool_create(int32_t n_threads, llm_pool **out);

/* Adds an owner: the pool lives until every owner has called
 * llm_pool_free. Returns pool. Thread-safe. */
llm_pool *llm_pool_ref(llm_pool *pool);

/* Drops one owner; the last one stops and joins the workers. NULL is
 * harmless. */
void llm_pool_free(llm_pool *pool);

int32_t llm_pool_threads(const llm_pool *pool);

void llm_pool_run(llm_pool *pool, llm_pool_fn fn, void *ctx);

/* llm_pool_run for a loop shared as owned parts (below): resets the parts
 * and runs, both under the pool's run lock, so a run of another owner of
 * the pool cannot come between the reset and the run. */
void llm_pool_run_owned(llm_pool *pool, llm_pool_fn fn, void *ctx);

/* Dynamic sharing of a loop: threads call llm_pool_next() until it returns
 * 0, each call claiming the next `grain` indices of 0..total. A thread the
 * OS preempts (the machine may be busy) then delays the loop by at most
 * one grain instead of a whole static share. Reset (or zero-initialize)
 * before each run. */
typedef struct llm_pool_counter {
    int64_t next; /* atomic */
} llm_pool_counter;

/* Claims [*begin, *end); 1 when something was claimed, 0 when done. */
static inline int llm_pool_next(llm_pool_counter *c, int64_t total, int64_t grain,
                                int64_t *begin, int64_t *end)
{
    int64_t b = __atomic_fetch_add(&c->next, grain, __ATOMIC_RELAXED);
    if (b >= total)
        return 0;
    *begin = b;
    *end = b + grain < total ? b + grain : total;
    return 1;
}

/* Owned sharing of a loop over units 0..units: the units are cut into one
 * contiguous part per thread, in thread order, and thread ith claims the
 * units of its own part from the front, one at a time, then those left in
 * the other parts (ith + 1, ith + 2, ... in turn). On a quiet host each
 * thread thus streams one contiguous range, which the prefetchers follow
 * from one claim into the next, instead of every other unit; a thread the
 * OS preempts still delays the loop by at most one unit, since the others
 * take what is left of its part. `*visited` is the caller's cursor (0 at
 * the start of each run). Run such a loop with llm_pool_run_owned, or
 * reset the parts (llm_pool_owned_reset) before each llm_pool_run, from
 * the caller, while no run is in flight and no other owner can start one. */
void llm_pool_owned_reset(llm_pool *pool);

/* Claims the next unit for thread ith into *unit; 1 when claimed, 0 when
 * every part is done. */
int llm_pool_owned_next(llm_pool *pool, int32_t ith, int64_t units, int32_t *visited,
                        int64_t *unit);

/* The half-open slice [*begin, *end) of 0..total that thread ith of nth
 * takes, in units of `grain` (slices are multiples of grain except the
 * last). */
void llm_pool_slice(int64_t total, int64_t grain, int32_t ith, int32_t nth,
                    int64_t *begin, int64_t *end);

#endif
