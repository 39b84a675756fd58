/* metrics.c — counters and the Prometheus text exposition format (0.0.4):
 * "# HELP name text", "# TYPE name counter|gauge", then "name{labels} value"
 * lines. Counter names end in _total; times are in seconds.
 */
#include "metrics.h"

#include <inttypes.h>

static const int status_codes[PMS_N_STATUS] = PMS_STATUS_CODES;
static const double buckets[PMS_N_BUCKETS] = PMS_DURATION_BUCKETS;

void pms_metrics_init(pms_metrics *m)
{
    for (int i = 0; i <= PMS_N_STATUS; i++)
        atomic_init(&m->status[i], 0);
    for (int i = 0; i < PM_PHASE_COUNT; i++) {
        atomic_init(&m->phase_tokens[i], 0);
        atomic_init(&m->phase_ns[i], 0);
    }
    atomic_init(&m->cancelled, 0);
    atomic_init(&m->rejected_full, 0);
    atomic_init(&m->held, 0);
    atomic_init(&m->timeouts, 0);
    atomic_init(&m->cut_header_timeout, 0);
    atomic_init(&m->cut_reserve, 0);
    atomic_init(&m->prompt_tokens, 0);
    atomic_init(&m->generated_tokens, 0);
    atomic_init(&m->drafted_tokens, 0);
    atomic_init(&m->accepted_tokens, 0);
    for (int i = 0; i < LLM_DRAFTER_COUNT; i++) {
        atomic_init(&m->drafter_drafted[i], 0);
        atomic_init(&m->drafter_accepted[i], 0);
    }
    atomic_init(&m->tree_generations, 0);
    atomic_init(&m->tree_fallbacks, 0);
    atomic_init(&m->tree_rounds, 0);
    atomic_init(&m->tree_nodes, 0);
    atomic_init(&m->tree_accepted, 0);
    atomic_init(&m->request_ns, 0);
    for (int i = 0; i <= PMS_N_BUCKETS; i++)
        atomic_init(&m->duration[i], 0);
    atomic_init(&m->completed, 0);
    atomic_init(&m->device_loop, 0);
    atomic_init(&m->queued, 0);
    atomic_init(&m->running, 0);
}

void pms_metrics_status(pms_metrics *m, int code)
{
    int i = 0;
    while (i < PMS_N_STATUS && status_codes[i] != code)
        i++;
    atomic_fetch_add_explicit(&m->status[i], 1, memory_order_relaxed);
}

void pms_metrics_duration(pms_metrics *m, uint64_t ns)
{
    double s = (double)ns / 1e9;
    int i = 0;
    while (i < PMS_N_BUCKETS && s > buckets[i])
        i++;
    atomic_fetch_add_explicit(&m->duration[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->request_ns, ns, memory_order_relaxed);
}

static uint64_t get(atomic_uint_fast64_t *c)
{
    return (uint64_t)atomic_load_explicit(c, memory_order_relaxed);
}

static int head(pms_buf *o, const char *name, const char *type, const char *help)
{
    return pms_buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static int counter(pms_buf *o, const char *name, const char *help, uint64_t v)
{
    return head(o, name, "counter", help) || pms_buf_printf(o, "%s %" PRIu64 "\n", name, v);
}

static int render_status(pms_metrics *m, pms_buf *o)
{
    const char *name = "phasemark_http_requests_total";
    if (head(o, name, "counter", "HTTP requests answered, by status code."))
        return -1;
    for (int i = 0; i < PMS_N_STATUS; i++)
        if (pms_buf_printf(o, "%s{code=\"%d\"} %" PRIu64 "\n", name, status_codes[i], get(&m->status[i])))
            return -1;
    return pms_buf_printf(o, "%s{code=\"other\"} %" PRIu64 "\n", name, get(&m->status[PMS_N_STATUS]));
}

/* Connections the guard cut, by reason (guard.h). */
static int render_cuts(pms_metrics *m, pms_buf *o)
{
    const char *name = "phasemark_connections_cut_total";
    return head(o, name, "counter", "Connections closed while waiting for request headers, by reason.") ||
           pms_buf_printf(o, "%s{reason=\"header_timeout\"} %" PRIu64 "\n", name, get(&m->cut_header_timeout)) ||
           pms_buf_printf(o, "%s{reason=\"reserve\"} %" PRIu64 "\n", name, get(&m->cut_reserve));
}

/* Per-phase tokens and seconds, labelled with the phase names the markers
 * use (exact = prefill, decode, verify, batched = speculative rounds). */
static int render_phases(pms_metrics *m, pms_buf *o)
{
    if (head(o, "phasemark_phase_tokens_total", "counter", "Tokens processed by forwards, by phase."))
        return -1;
    for (unsigned p = PM_PHASE_EXACT; p <= PM_PHASE_BATCHED; p++)
        if (pms_buf_printf(o, "phasemark_phase_tokens_total{phase=\"%s\"} %" PRIu64 "\n", pm_phase_name(p),
                           get(&m->phase_tokens[p])))
            return -1;
    if (head(o, "phasemark_phase_seconds_total", "counter", "Wall time spent in forwards, by phase."))
        return -1;
    for (unsigned p = PM_PHASE_EXACT; p <= PM_PHASE_BATCHED; p++)
        if (pms_buf_printf(o, "phasemark_phase_seconds_total{phase=\"%s\"} %.9f\n", pm_phase_name(p),
                           (double)get(&m->phase_ns[p]) / 1e9))
            return -1;
    return 0;
}

/* Drafted and accepted tokens by the kind of drafter that proposed them
 * (a hybrid's rounds count as model or ngram), labelled as the markers'
 * pm.draft drafter=. */
static int render_drafters(pms_metrics *m, pms_buf *o)
{
    static const int kinds[] = {LLM_DRAFTER_MODEL, LLM_DRAFTER_NGRAM, LLM_DRAFTER_BLOCK};
    static const char *const names[2] = {"phasemark_drafter_tokens_total",
                                         "phasemark_drafter_accepted_tokens_total"};
    static const char *const helps[2] = {"Tokens proposed, by drafter.",
                                         "Proposed tokens the target accepted, by drafter."};
    for (int w = 0; w < 2; w++) {
        if (head(o, names[w], "counter", helps[w]))
            return -1;
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
            int k = kinds[i];
            uint64_t v = get(w ? &m->drafter_accepted[k] : &m->drafter_drafted[k]);
            if (pms_buf_printf(o, "%s{drafter=\"%s\"} %" PRIu64 "\n", names[w], llm_drafter_kind_name(k), v))
                return -1;
        }
    }
    return 0;
}

/* Tree verification (--draft-tree): its rounds count in the drafter
 * totals above as well (nodes as drafted tokens, the path as accepted). */
static int render_tree(pms_metrics *m, pms_buf *o)
{
    return counter(o, "phasemark_tree_generations_total", "Generations whose rounds verified token trees (--draft-tree).",
                   get(&m->tree_generations)) ||
           counter(o, "phasemark_tree_fallbacks_total",
                   "Generations under --draft-tree that verified chains instead (sampled requests).",
                   get(&m->tree_fallbacks)) ||
           counter(o, "phasemark_tree_rounds_total", "Tree rounds: one target forward over a token tree each.",
                   get(&m->tree_rounds)) ||
           counter(o, "phasemark_tree_nodes_total", "Tree nodes verified (the root, the last token, not counted).",
                   get(&m->tree_nodes)) ||
           counter(o, "phasemark_tree_accepted_tokens_total", "Tree nodes accepted: the kept paths' lengths, summed.",
                   get(&m->tree_accepted));
}

/* A Prometheus histogram: cumulative buckets with "le" labels, then _sum
 * and _count. */
static int render_duration(pms_metrics *m, pms_buf *o)
{
    const char *name = "phasemark_request_duration_seconds";
    if (head(o, name, "histogram", "Queue wait plus generation time of finished generations."))
        return -1;
    uint64_t cum = 0;
    for (int i = 0; i <= PMS_N_BUCKETS; i++) {
        cum += get(&m->duration[i]);
        int rc = i < PMS_N_BUCKETS ? pms_buf_printf(o, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, buckets[i], cum)
                                   : pms_buf_printf(o, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, cum);
        if (rc)
            return -1;
    }
    return pms_buf_printf(o, "%s_sum %.9f\n%s_count %" PRIu64 "\n", name, (double)get(&m->request_ns) / 1e9, name,
                          cum);
}

static int render_gauges(pms_metrics *m, int queue_cap, int workers, pms_buf *o)
{
    long long q = (long long)atomic_load(&m->queued), r = (long long)atomic_load(&m->running);
    return head(o, "phasemark_queue_depth", "gauge", "Requests waiting for a worker.") ||
           pms_buf_printf(o, "phasemark_queue_depth %lld\n", q) ||
           head(o, "phasemark_queue_capacity", "gauge", "Most requests that may wait (503 beyond).") ||
           pms_buf_printf(o, "phasemark_queue_capacity %d\n", queue_cap) ||
           head(o, "phasemark_requests_running", "gauge", "Requests being generated.") ||
           pms_buf_printf(o, "phasemark_requests_running %lld\n", r) ||
           head(o, "phasemark_workers", "gauge", "Worker threads, one engine session each.") ||
           pms_buf_printf(o, "phasemark_workers %d\n", workers);
}

int pms_metrics_render(pms_metrics *m, int queue_cap, int workers, pms_buf *o)
{
    if (render_status(m, o) ||
        counter(o, "phasemark_requests_cancelled_total", "Generations cancelled because the client went away.",
                get(&m->cancelled)) ||
        counter(o, "phasemark_requests_rejected_total", "Requests refused with 503 because the queue was full (or shed from it).",
                get(&m->rejected_full)) ||
        counter(o, "phasemark_requests_held_total",
                "Requests held until Retry-After because their connection retried sooner.", get(&m->held)) ||
        counter(o, "phasemark_request_timeouts_total", "Requests whose body did not arrive within the deadline.",
                get(&m->timeouts)) ||
        render_cuts(m, o) ||
        counter(o, "phasemark_generations_total", "Generations that ran to a stop condition.", get(&m->completed)) ||
        counter(o, "phasemark_device_loop_generations_total",
                "Generations the CUDA device loop ran (--device-loop).", get(&m->device_loop)) ||
        counter(o, "phasemark_prompt_tokens_total", "Prompt tokens prefilled.", get(&m->prompt_tokens)) ||
        counter(o, "phasemark_generated_tokens_total", "Tokens generated and returned.", get(&m->generated_tokens)) ||
        counter(o, "phasemark_draft_tokens_total", "Tokens proposed by the draft model.", get(&m->drafted_tokens)) ||
        counter(o, "phasemark_draft_accepted_tokens_total", "Drafted tokens the target accepted.",
                get(&m->accepted_tokens)))
        return -1;
    if (render_drafters(m, o) || render_tree(m, o))
        return -1;
    uint64_t drafted = get(&m->drafted_tokens), accepted = get(&m->accepted_tokens);
    if (head(o, "phasemark_draft_acceptance_ratio", "gauge", "Accepted over drafted tokens since start (0 before any).") ||
        pms_buf_printf(o, "phasemark_draft_acceptance_ratio %.6f\n", drafted ? (double)accepted / (double)drafted : 0.0))
        return -1;
    if (render_duration(m, o))
        return -1;
    if (render_phases(m, o) || render_gauges(m, queue_cap, workers, o))
        return -1;
    return 0;
}
