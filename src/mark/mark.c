/* mark.c — the process-wide decision and the exported entry points.
 *
 * State: pm__gate and pm__rt (read by the inline fast path in mark.h: the
 * chosen backend's two function pointers), and each thread's current phase. The
 * gate starts "undecided"; the first entry point that finds it so runs the
 * one-time initialization under a mutex, which reads the marker variable
 * once (or takes pm_enable's mode), resolves a backend, stores the pointers
 * and only then publishes the gate with release order, so any thread that
 * sees "on" also sees the pointers.
 *
 * Identity (the variable's name, the range prefix, the NVTX domain) starts
 * at the build's defaults and may be replaced by pm_configure() under the
 * same mutex while the gate is undecided; after the decision it is frozen,
 * so the formatters read it without a lock.
 *
 * Fork: a child inherits the gate and pointers as they are; it never reads
 * the environment again. A pthread_atfork handler holds the init mutex
 * across fork(), so a fork racing a first initialization cannot leave the
 * child with a mutex that no thread of its own will ever unlock.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { GATE_OFF = 0, GATE_ON = 1, GATE_UNDECIDED = 2 };

PM_API int pm__gate = GATE_UNDECIDED;

/* Until a backend is chosen both entries reject: a stale read can never
 * call through NULL, and a rejected push is never popped. */
static int reject_push(const char *text)
{
    (void)text;
    return -1;
}

static int reject_pop(void)
{
    return -1;
}

PM_API struct pm__runtime pm__rt = {reject_push, reject_pop};
static const char *backend_name = "off";
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

#ifndef PHASEMARK_DEFAULT_ENV
#define PHASEMARK_DEFAULT_ENV "PHASEMARK"
#endif
#ifndef PHASEMARK_DEFAULT_NVTX_DOMAIN
#define PHASEMARK_DEFAULT_NVTX_DOMAIN "phasemark"
#endif
_Static_assert(sizeof PHASEMARK_DEFAULT_ENV - 1 <= PM_NAME_MAX &&
                   sizeof PHASEMARK_DEFAULT_NVTX_DOMAIN - 1 <= PM_NAME_MAX,
               "a default name is longer than PM_NAME_MAX");

/* The variable read once and the NVTX domain; guarded by init_lock. */
static char env_name[PM_NAME_MAX + 1] = PHASEMARK_DEFAULT_ENV;
static char nvtx_domain[PM_NAME_MAX + 1] = PHASEMARK_DEFAULT_NVTX_DOMAIN;

/* initial-exec: one byte of static TLS, read without a __tls_get_addr call
 * on every structured push. */
static _Thread_local uint8_t current_phase __attribute__((tls_model("initial-exec")));

static void lock_for_fork(void) { pthread_mutex_lock(&init_lock); }
static void unlock_after_fork(void) { pthread_mutex_unlock(&init_lock); }

__attribute__((constructor)) static void register_fork_handlers(void)
{
    pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
}

/* The contract allows this layer to print exactly these one-line
 * diagnostics; write(2) keeps them whole and off stdio's buffers. */
static void diagnose(const char *line, size_t len)
{
    while (len) {
        ssize_t n = write(STDERR_FILENO, line, len);
        if (n <= 0)
            return;
        line += n;
        len -= (size_t)n;
    }
}

/* Quotes the bad value with control bytes masked, so the diagnostic stays
 * one line whatever the environment holds. */
static void diagnose_invalid(const char *value)
{
    char line[256], shown[64];
    size_t n = 0;
    for (; value[n] && n < sizeof shown - 1; n++) {
        unsigned char c = (unsigned char)value[n];
        shown[n] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    shown[n] = '\0';
    pm__text t;
    pm__text_init(&t, line, sizeof line - 1, "phasemark: ");
    pm__text_raw(&t, env_name);
    pm__text_raw(&t, "=\"");
    pm__text_raw(&t, shown);
    pm__text_raw(&t, value[n] ? "...\"" : "\"");
    pm__text_raw(&t, " is not one of 0/false/no/off, 1/true/yes/on/auto, "
                     "roctx, nvtx; markers off");
    line[t.len++] = '\n';
    diagnose(line, t.len);
}

static int resolve(pm__mode mode, pm__backend *be)
{
    char why[320];
    pm__text t;
    pm__text_init(&t, why, sizeof why - 1, "");
    if (mode != PM__MODE_NVTX) {
        if (pm__roctx_resolve(be, &t) == 0)
            return 0;
        if (mode == PM__MODE_AUTO)
            pm__text_raw(&t, "; ");
    }
    if (mode != PM__MODE_ROCTX && pm__nvtx_resolve(be, &t, nvtx_domain) == 0)
        return 0;
    char line[512];
    pm__text l;
    pm__text_init(&l, line, sizeof line - 1, "phasemark: markers enabled but no backend resolved (");
    pm__text_raw(&l, why);
    pm__text_raw(&l, "); markers off");
    line[l.len++] = '\n';
    diagnose(line, l.len);
    return -1;
}

/* The decision for mode; value is the variable's text for the diagnostic
 * of an invalid one. Called with init_lock held. */
static int decide_mode(pm__mode mode, const char *value)
{
    if (mode == PM__MODE_OFF)
        return GATE_OFF;
    if (mode == PM__MODE_INVALID) {
        diagnose_invalid(value);
        return GATE_OFF;
    }
    pm__backend be;
    if (resolve(mode, &be) != 0)
        return GATE_OFF;
    pm__rt.push = be.push;
    pm__rt.pop = be.pop;
    backend_name = be.name;
    return GATE_ON;
}

static int decide(void)
{
    const char *value = getenv(env_name);
    return decide_mode(pm__parse_mode(value), value);
}

static int gate_slow(void)
{
    pthread_mutex_lock(&init_lock);
    int g = __atomic_load_n(&pm__gate, __ATOMIC_ACQUIRE);
    if (g == GATE_UNDECIDED) {
        g = decide();
        __atomic_store_n(&pm__gate, g, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&init_lock);
    return g;
}

/* The smallest pm_config we can read: version 1 ends at nvtx_domain. */
#define PM__CONFIG_V1_SIZE \
    (offsetof(pm_config, nvtx_domain) + sizeof(((pm_config *)0)->nvtx_domain))

static int domain_valid(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (n == PM_NAME_MAX || s[n] < 0x20 || s[n] > 0x7e)
            return 0;
    return n > 0;
}

PM_API int pm_configure(const pm_config *cfg)
{
    if (!cfg || cfg->version < 1 || cfg->size < PM__CONFIG_V1_SIZE)
        return PM_ERR_INVALID;
    if ((cfg->env_name && !pm__env_name_valid(cfg->env_name)) ||
        (cfg->prefix && !pm__prefix_valid(cfg->prefix, strlen(cfg->prefix))) ||
        (cfg->nvtx_domain && !domain_valid(cfg->nvtx_domain)))
        return PM_ERR_INVALID;
    pthread_mutex_lock(&init_lock);
    int rc = PM_ERR_DECIDED;
    if (__atomic_load_n(&pm__gate, __ATOMIC_ACQUIRE) == GATE_UNDECIDED) {
        if (cfg->env_name)
            memcpy(env_name, cfg->env_name, strlen(cfg->env_name) + 1);
        if (cfg->nvtx_domain)
            memcpy(nvtx_domain, cfg->nvtx_domain, strlen(cfg->nvtx_domain) + 1);
        if (cfg->prefix)
            pm__set_prefix(cfg->prefix, strlen(cfg->prefix));
        rc = PM_OK;
    }
    pthread_mutex_unlock(&init_lock);
    return rc;
}

PM_API int pm_enable(pm_mode mode)
{
    if ((unsigned)mode > (unsigned)PM_MODE_NVTX)
        return PM_ERR_INVALID;
    pthread_mutex_lock(&init_lock);
    int rc = PM_ERR_DECIDED;
    if (__atomic_load_n(&pm__gate, __ATOMIC_ACQUIRE) == GATE_UNDECIDED) {
        __atomic_store_n(&pm__gate, decide_mode((pm__mode)mode, ""), __ATOMIC_RELEASE);
        rc = PM_OK;
    }
    pthread_mutex_unlock(&init_lock);
    return rc;
}

PM_API const char *pm_strerror(int status)
{
    switch (status) {
    case PM_OK:
        return "success";
    case PM_ERR_DECIDED:
        return "markers were already decided for this process";
    case PM_ERR_INVALID:
        return "invalid argument";
    default:
        return "unknown status";
    }
}

/* 1 when ranges go to a backend; decides on first use. */
static inline int gate_on(void)
{
    int g = __atomic_load_n(&pm__gate, __ATOMIC_ACQUIRE);
    if (__builtin_expect(g == GATE_UNDECIDED, 0))
        g = gate_slow();
    return g == GATE_ON;
}

PM_API int pm_enabled(void)
{
    return gate_on();
}

PM_API const char *pm_backend_name(void)
{
    return gate_on() ? backend_name : "off";
}

PM_API pm_phase pm_current_phase(void)
{
    return (pm_phase)current_phase;
}

static pm_range push_leaf(const char *text)
{
    pm_range r = {pm__rt.push(text), 0, 0};
    if (r.depth < 0)
        r.depth = -1;
    return r;
}

/* A phase range: the thread's current phase is `phase` until the pop, even
 * when the backend rejected the push (leaves inside still need it). */
static pm_range push_phase(const char *text, pm_phase phase)
{
    pm_range r = push_leaf(text);
    r.restores_phase = 1;
    r.prev_phase = current_phase;
    current_phase = (uint8_t)phase;
    return r;
}

PM_API pm_range pm__push_text(const char *text)
{
    /* Reached on first use only; later pushes go through pm__rt inline. */
    if (!gate_on())
        return PM_RANGE_NONE;
    return push_leaf(text);
}

/* Formats (format is the kind's pm__format_<name>) and pushes a range of
 * `kind`. A kind whose table row (kinds.h) names a phase is a phase range:
 * that phase is the thread's current phase until the pop (and, by the
 * formatter, its mode). Any other kind is a plain push. Inlined into each
 * entry point, so the row is read at compile time and the call is direct
 * (the dispatch of pm__format costs about 12 instructions a push). */
static inline __attribute__((always_inline)) pm_range
push_kind(pm__kind kind, size_t (*format)(char *, size_t, const pm__values *),
          const pm__values *v)
{
    pm_phase phase = (pm_phase)pm__kind_phase(pm__kind_get(kind), v->mode);
    char buf[PM_RANGE_TEXT_MAX];
    format(buf, sizeof buf, v);
    return phase != PM_PHASE_NONE ? push_phase(buf, phase) : push_leaf(buf);
}

PM_API pm_range pm__push_prefill(uint64_t req, uint32_t pos, uint32_t tokens)
{
    if (!gate_on())
        return PM_RANGE_NONE;
    pm__values v = {.req = req, .pos = pos, .tokens = tokens};
    return push_kind(PM__KIND_PREFILL, pm__format_prefill, &v);
}

PM_API pm_range pm__push_decode(uint64_t req, uint32_t pos)
{
    if (!gate_on())
        return PM_RANGE_NONE;
    pm__values v = {.req = req, .pos = pos};
    return push_kind(PM__KIND_DECODE, pm__format_decode, &v);
}

PM_API pm_range pm__push_spec_decode(uint64_t req, uint32_t draft)
{
    if (!gate_on())
        return PM_RANGE_NONE;
    pm__values v = {.req = req, .draft = draft};
    return push_kind(PM__KIND_SPEC_DECODE, pm__format_spec_decode, &v);
}

PM_API pm_range pm__push_draft(uint64_t req, uint32_t tokens)
{
    if (!gate_on())
        return PM_RANGE_NONE;
    pm__values v = {.req = req, .tokens = tokens, .omit = 1u << PM__KEY_DRAFTER};
    return push_kind(PM__KIND_DRAFT, pm__format_draft, &v);
}

PM_API pm_range pm__push_draft_by(uint64_t req, uint32_t tokens, const char *drafter)
{
    if (!gate_on())
        return PM_RANGE_NONE;
    pm__values v = {.req = req, .tokens = tokens, .drafter = drafter,
                    .omit = drafter && *drafter ? 0u : 1u << PM__KEY_DRAFTER};
    return push_kind(PM__KIND_DRAFT, pm__format_draft, &v);
}

/* The smallest caller struct we can read: version 1 ends at `tokens`. */
#define PM__LAYER_ATTR_V1_SIZE \
    (offsetof(pm_layer_attr, tokens) + sizeof(((pm_layer_attr *)0)->tokens))

/* Version 2 adds batch. */
#define PM__LAYER_ATTR_V2_SIZE \
    (offsetof(pm_layer_attr, batch) + sizeof(((pm_layer_attr *)0)->batch))

PM_API pm_range pm__push_layer_range(const pm_layer_attr *attr)
{
    if (!gate_on() || !attr || attr->version < 1 || attr->size < PM__LAYER_ATTR_V1_SIZE)
        return PM_RANGE_NONE;
    uint64_t batch = attr->version >= 2 && attr->size >= PM__LAYER_ATTR_V2_SIZE ? attr->batch : 0;
    pm__values v = {
        .mode = attr->phase != PM_PHASE_NONE ? attr->phase : (pm_phase)current_phase,
        .layers = {attr->first_layer, attr->last_layer},
        .shard = attr->shard,
        .where = attr->where,
        .backend = attr->backend,
        .req = attr->req,
        .tokens = attr->tokens,
        .batch = batch,
        .omit = 1u << (batch ? PM__KEY_REQ : PM__KEY_BATCH),
    };
    return push_kind(PM__KIND_LAYER_RANGE, pm__format_layer_range, &v);
}

PM_API pm_range pm__push_batch(uint64_t batch, pm_phase mode, const pm_batch_req *reqs,
                               uint32_t n)
{
    if (!gate_on() || !reqs || n == 0 || n > PM_BATCH_MAX || !pm_phase_is_shard_phase(mode))
        return PM_RANGE_NONE;
    uint64_t tokens = 0;
    for (uint32_t i = 0; i < n; i++)
        tokens += reqs[i].tokens;
    pm__values v = {.mode = mode, .batch = batch, .tokens = tokens, .reqs = reqs, .nreqs = n};
    char buf[PM_BATCH_TEXT_MAX];
    pm__format_batch(buf, sizeof buf, &v);
    return push_phase(buf, mode);
}

PM_API pm_range pm__phase_enter(pm_phase phase)
{
    if (!gate_on())
        return PM_RANGE_NONE;
    pm_range r = {-1, 1, current_phase};
    current_phase = (uint8_t)phase;
    return r;
}

PM_API void pm__pop(pm_range *range)
{
    if (range->depth >= 0)
        pm__rt.pop();
    if (range->restores_phase)
        current_phase = range->prev_phase;
    *range = PM_RANGE_NONE;
}
