/* metrics.h — the server's counters and their Prometheus text form.
 *
 * Counters are C11 atomics bumped by HTTP and worker threads without a
 * lock; a scrape reads each one independently (a scrape is a snapshot per
 * counter, not across counters, as Prometheus expects). Every name below is
 * documented in docs/server.md.
 */
#ifndef PM_SERVER_METRICS_H
#define PM_SERVER_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "phasemark/phase.h"
#include "phasemark/spec.h"
#include "text.h"

/* Status codes counted by value; anything else is counted as "other". */
#define PMS_STATUS_CODES {200, 400, 404, 405, 408, 413, 500, 503}
enum { PMS_N_STATUS = 8 };

/* Upper bounds (seconds) of the request duration histogram's buckets;
 * +Inf is implied. */
#define PMS_DURATION_BUCKETS {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0}
enum { PMS_N_BUCKETS = 12 };

typedef struct pms_metrics {
    atomic_uint_fast64_t status[PMS_N_STATUS + 1]; /* last: other */
    atomic_uint_fast64_t cancelled;       /* client went away mid-request */
    atomic_uint_fast64_t rejected_full;   /* 503 because the queue was full */
    atomic_uint_fast64_t held;            /* retries held until Retry-After */
    atomic_uint_fast64_t timeouts;        /* request bodies that came too slowly */
    atomic_uint_fast64_t cut_header_timeout; /* connections cut: headers too slow */
    atomic_uint_fast64_t cut_reserve;     /* connections cut to keep the reserve */
    atomic_uint_fast64_t prompt_tokens;
    atomic_uint_fast64_t generated_tokens;
    atomic_uint_fast64_t drafted_tokens;
    atomic_uint_fast64_t accepted_tokens;
    atomic_uint_fast64_t drafter_drafted[LLM_DRAFTER_COUNT];  /* by round kind */
    atomic_uint_fast64_t drafter_accepted[LLM_DRAFTER_COUNT];
    atomic_uint_fast64_t tree_generations; /* generations verified by trees (--draft-tree) */
    atomic_uint_fast64_t tree_fallbacks;  /* --draft-tree generations that ran chains (sampled) */
    atomic_uint_fast64_t tree_rounds;     /* tree rounds */
    atomic_uint_fast64_t tree_nodes;      /* their nodes verified (the root not counted) */
    atomic_uint_fast64_t tree_accepted;   /* their accepted path lengths, summed */
    atomic_uint_fast64_t phase_tokens[PM_PHASE_COUNT]; /* by pm_phase */
    atomic_uint_fast64_t phase_ns[PM_PHASE_COUNT];
    atomic_uint_fast64_t request_ns;      /* queue wait + generation, summed */
    atomic_uint_fast64_t duration[PMS_N_BUCKETS + 1]; /* per bucket (not cumulative); last: +Inf */
    atomic_uint_fast64_t completed;       /* generations that finished */
    atomic_uint_fast64_t device_loop;     /* generations the device loop ran */
    atomic_int_fast64_t queued;           /* gauge: waiting in the queue */
    atomic_int_fast64_t running;          /* gauge: being generated */
} pms_metrics;

void pms_metrics_init(pms_metrics *m);

/* Counts one answer with HTTP status code. */
void pms_metrics_status(pms_metrics *m, int code);

/* Records one finished generation's duration (queue wait included). */
void pms_metrics_duration(pms_metrics *m, uint64_t ns);

/* Appends the exposition text (HELP/TYPE lines, then samples) to out.
 * queue_cap and workers are reported as gauges. 0 or -1 (buffer limit). */
int pms_metrics_render(pms_metrics *m, int queue_cap, int workers, pms_buf *out);

#endif
