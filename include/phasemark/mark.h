/* phasemark/mark.h — default-off semantic phase ranges.
 *
 * This header is the whole contract of the marker layer (docs/markers.md is
 * the guide). Ranges are host-side intervals handed to a profiler's marker
 * API (ROCTX or NVTX, resolved at run time); the layer itself never times,
 * never synchronizes and links no GPU runtime.
 *
 * Enabling. One environment variable (PHASEMARK unless the embedder chose
 * another, see Identity) is read once per process, at the first call into
 * the layer (race-free; a child after fork inherits the decision). Unset,
 * empty, 0, false, no, off (any case): off, silently. 1, true, yes, on,
 * auto: the first backend that resolves, ROCTX then NVTX. roctx / nvtx:
 * that backend only. Anything else: one line on stderr, off. Enabled but
 * nothing resolves: one line on stderr, off. pm_enable() makes the same
 * decision from a value the program passes, without the environment.
 *
 * Identity. An embedder names three things: the variable above, the range
 * prefix (range names are "<prefix>.<kind> ...", "pm" by default) and the
 * NVTX domain ("phasemark" by default). Defaults come from the build
 * (CMake PHASEMARK_ENV_NAME, PHASEMARK_RANGE_PREFIX, PHASEMARK_NVTX_DOMAIN);
 * pm_configure() replaces them at run time, before the decision.
 *
 * Cost. Every push is a static inline function whose disabled path is one
 * load of a process-wide gate and a predictable branch; pop of a range that
 * was not pushed is one load and a branch. Enabled, a generic range is one
 * indirect call into the backend per push and per pop; structured ranges
 * are formatted by the library (no snprintf) into a stack buffer of
 * PM_RANGE_TEXT_MAX bytes.
 *
 * Tokens. A push returns a pm_range. It is "live" (depth >= 0) only when the
 * backend accepted the push; pm_range_pop() pops live ranges only, so a
 * rejected push is never popped. Pop on the thread that pushed.
 *
 * Range names (one grammar, parsed by the tools): "<prefix>.<kind>" then
 * space-separated key=value attributes (shown with the default prefix):
 *   pm.prefill mode=exact req=R pos=P tokens=N
 *   pm.decode mode=decode req=R pos=P
 *   pm.spec_decode mode=batched req=R draft=K
 *   pm.draft req=R tokens=K [drafter=model|ngram|block|custom]
 *   pm.layer_range mode=M layers=A-B shard=S where=local|remote backend=B req=R tokens=N
 *   pm.batch mode=M batch=B tokens=N reqs=R:T,R:T,...
 *   pm.layer_range mode=M layers=A-B shard=S where=... backend=B tokens=N batch=B
 * The last two are a forward that serves several requests: one batch range
 * per forward (its mode is the phase of every request in it, its reqs each
 * request with the tokens it has in the forward), and its leaves carry
 * batch=B instead of req=R.
 * Truncation (structured kinds): attributes are appended in the order above,
 * each whole or not at all; the first one that would take the text past
 * PM_RANGE_TEXT_MAX-1 bytes is dropped with every attribute after it. So a
 * text is always a prefix of the full text ending at an attribute boundary,
 * never half a key=value pair. Only a very long backend name can trigger it.
 *
 * Compile-time off: define PHASEMARK_DISABLED (CMake: PHASEMARK_MARKERS=OFF)
 * and every call below compiles to nothing; no phasemark symbol is
 * referenced.
 *
 * Thread safety: every function may be called from any thread.
 */
#ifndef PHASEMARK_MARK_H
#define PHASEMARK_MARK_H

#include <stdint.h>

#include "phasemark/phase.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define PM_API
#else
#define PM_API __attribute__((visibility("default")))
#endif

/* Longest range text handed to a backend, terminating NUL included. */
#define PM_RANGE_TEXT_MAX 128

/* A pushed (or not pushed) range. depth >= 0: live, the backend's nesting
 * depth after the push. depth < 0: nothing to pop. The phase fields let a
 * phase range restore the thread's current phase when it ends. */
typedef struct pm_range {
    int32_t depth;
    uint8_t restores_phase; /* 1: pop restores prev_phase as current */
    uint8_t prev_phase;     /* pm_phase current before the push */
} pm_range;

/* A dead token. C has the compound literal; C++ (which has none) the
 * equivalent list-initialized temporary. */
#ifdef __cplusplus
#define PM_RANGE_NONE (pm_range{-1, 0, 0})
#else
#define PM_RANGE_NONE ((pm_range){-1, 0, 0})
#endif

/* Status codes of the configuration calls. Never renumbered. */
#define PM_OK 0
#define PM_ERR_DECIDED (-1) /* the one-time decision was already made */
#define PM_ERR_INVALID (-2) /* an argument the layer cannot use */

/* How markers are decided: the values of the environment variable, as an
 * enum for pm_enable(). */
typedef enum pm_mode {
    PM_MODE_OFF = 0,   /* silent, no backend looked up */
    PM_MODE_AUTO = 1,  /* ROCTX, then NVTX */
    PM_MODE_ROCTX = 2, /* ROCTX only */
    PM_MODE_NVTX = 3   /* NVTX only */
} pm_mode;

/* Longest name pm_configure() accepts, NUL excluded. */
#define PM_NAME_MAX 31

/* An embedder's names. Begins with version and size so the struct can
 * grow; use PM_CONFIG_INIT. A NULL field keeps the build's default.
 *   env_name     the variable read once: [A-Za-z_][A-Za-z0-9_]*
 *   prefix       range names start "<prefix>.": [a-z0-9_]+
 *   nvtx_domain  the NVTX domain ranges go to: printable ASCII */
typedef struct pm_config {
    uint16_t version; /* PM_CONFIG_VERSION */
    uint16_t size;    /* sizeof(pm_config) as the caller compiled it */
    const char *env_name;
    const char *prefix;
    const char *nvtx_domain;
} pm_config;

#define PM_CONFIG_VERSION 1
#define PM_CONFIG_INIT {PM_CONFIG_VERSION, (uint16_t)sizeof(pm_config), 0, 0, 0}

/* One request of a batched forward and the tokens it has in it. */
typedef struct pm_batch_req {
    uint64_t req;
    uint32_t tokens;
} pm_batch_req;

/* Most requests one batch range names; a longer batch is refused. */
#define PM_BATCH_MAX 64
/* Longest batch range text, NUL included (the list needs more room than
 * PM_RANGE_TEXT_MAX). */
#define PM_BATCH_TEXT_MAX 1024

/* Where a shard runs relative to the process that drives the request. */
typedef enum pm_where { PM_WHERE_LOCAL = 0, PM_WHERE_REMOTE = 1 } pm_where;

/* Attributes of a leaf layer range: one contiguous span of layers executed
 * by one shard in one forward call. Begins with version and size so the
 * struct can grow without breaking callers; use PM_LAYER_ATTR_INIT. */
typedef struct pm_layer_attr {
    uint16_t version;    /* PM_LAYER_ATTR_VERSION */
    uint16_t size;       /* sizeof(pm_layer_attr) as the caller compiled it */
    pm_phase phase;      /* PM_PHASE_NONE: the thread's current phase */
    int32_t first_layer; /* inclusive */
    int32_t last_layer;  /* inclusive */
    int32_t shard;       /* shard index in the placement, 0-based */
    pm_where where;
    const char *backend; /* "cpu", "cuda:0", ...; NULL prints "unknown" */
    uint64_t req;        /* request id (ignored when batch is set) */
    uint32_t tokens;     /* tokens in this forward call */
    /* version 2 */
    uint64_t batch;      /* 0: one request (req); else the pm_batch_push id */
} pm_layer_attr;

#define PM_LAYER_ATTR_VERSION 2
#define PM_LAYER_ATTR_INIT                                                  \
    {PM_LAYER_ATTR_VERSION, (uint16_t)sizeof(pm_layer_attr), PM_PHASE_NONE, \
     0, 0, 0, PM_WHERE_LOCAL, 0, 0, 0, 0}

#ifndef PHASEMARK_DISABLED

/* Internal: the gate. 0 = off (decided), 1 = on, 2 = not yet decided.
 * Written once, by the one-time initialization, with release order after
 * pm__rt is filled; read with acquire order (a plain load on x86-64). */
extern PM_API int pm__gate;

/* Internal: the chosen backend's push and pop, called straight from the
 * inline functions below when the gate is on, so an enabled range with text
 * already formed costs what a raw call through a function pointer costs.
 * Both start at stubs that reject, never NULL. */
struct pm__runtime {
    int (*push)(const char *text);
    int (*pop)(void);
};
extern PM_API struct pm__runtime pm__rt;

PM_API pm_range pm__push_text(const char *text);
PM_API pm_range pm__push_prefill(uint64_t req, uint32_t pos, uint32_t tokens);
PM_API pm_range pm__push_decode(uint64_t req, uint32_t pos);
PM_API pm_range pm__push_spec_decode(uint64_t req, uint32_t draft);
PM_API pm_range pm__push_draft(uint64_t req, uint32_t tokens);
PM_API pm_range pm__push_draft_by(uint64_t req, uint32_t tokens, const char *drafter);
PM_API pm_range pm__push_layer_range(const pm_layer_attr *attr);
PM_API pm_range pm__push_batch(uint64_t batch, pm_phase mode, const pm_batch_req *reqs,
                               uint32_t n);
PM_API void pm__pop(pm_range *range);
PM_API pm_range pm__phase_enter(pm_phase phase);

#define PM__GATE() __atomic_load_n(&pm__gate, __ATOMIC_ACQUIRE)
#define PM__OFF() __builtin_expect(PM__GATE() == 0, 1)

/* Replaces the build's names (see Identity) for this process. Call it
 * before the first marker call: once markers are decided it returns
 * PM_ERR_DECIDED and changes nothing. A NULL field keeps its current value;
 * the strings are copied. Returns PM_OK, PM_ERR_DECIDED, or PM_ERR_INVALID
 * (a bad version/size or a name outside its characters or PM_NAME_MAX)
 * with nothing changed. Thread-safe; never prints. */
PM_API int pm_configure(const pm_config *cfg);

/* Makes the one-time decision now from mode, without reading the
 * environment: the same backends, order and one-line diagnostic as the
 * variable's values. Returns PM_OK (pm_enabled() tells the outcome),
 * PM_ERR_DECIDED when the decision was already made (by the environment
 * or an earlier call; it stands), or PM_ERR_INVALID for an unknown mode.
 * Thread-safe; a child after fork inherits the decision. */
PM_API int pm_enable(pm_mode mode);

/* A static English sentence for a status code of this header. */
PM_API const char *pm_strerror(int status);

/* Forces the one-time initialization and says whether markers are on
 * (1) or off (0). Never prints unless the contract's diagnostic applies. */
PM_API int pm_enabled(void);

/* The backend in use: "roctx", "nvtx" or "off". Static string. */
PM_API const char *pm_backend_name(void);

/* The calling thread's current phase (PM_PHASE_NONE outside any phase
 * range or phase scope, and always when markers are off). */
PM_API pm_phase pm_current_phase(void);

/* A generic named range with text already formed. The text is handed to
 * the backend as is (the backend copies it); it should follow the range
 * grammar, and the length limit and truncation rule apply only to the
 * structured kinds below, whose text this layer formats. text must not be
 * NULL. */
static inline pm_range pm_range_push(const char *text)
{
    int gate = PM__GATE();
    if (__builtin_expect(gate == 0, 1))
        return PM_RANGE_NONE;
    if (__builtin_expect(gate == 1, 1)) {
        pm_range r = {pm__rt.push(text), 0, 0};
        return r;
    }
    return pm__push_text(text); /* first use: decides, then pushes */
}

/* "pm.prefill mode=exact req=R pos=P tokens=N": one chunk of exact prefill
 * at base position pos. Sets the thread's current phase to exact until its
 * pop. */
static inline pm_range pm_prefill_push(uint64_t req, uint32_t pos,
                                       uint32_t tokens)
{
    if (PM__OFF())
        return PM_RANGE_NONE;
    return pm__push_prefill(req, pos, tokens);
}

/* "pm.decode mode=decode req=R pos=P": one autoregressive step that feeds
 * the token at position pos (the step's base position, as pm.prefill's pos
 * is its chunk's) and yields the logits for position pos+1. Current phase:
 * decode. */
static inline pm_range pm_decode_push(uint64_t req, uint32_t pos)
{
    if (PM__OFF())
        return PM_RANGE_NONE;
    return pm__push_decode(req, pos);
}

/* "pm.spec_decode mode=batched req=R draft=K": one draft+verify round with
 * k drafted tokens. Current phase: batched (verify forwards inside it name
 * their phase explicitly). */
static inline pm_range pm_spec_decode_push(uint64_t req, uint32_t draft)
{
    if (PM__OFF())
        return PM_RANGE_NONE;
    return pm__push_spec_decode(req, draft);
}

/* "pm.draft req=R tokens=K": a leaf around the drafter's whole proposal. */
static inline pm_range pm_draft_push(uint64_t req, uint32_t tokens)
{
    if (PM__OFF())
        return PM_RANGE_NONE;
    return pm__push_draft(req, tokens);
}

/* "pm.draft req=R tokens=K drafter=D": the same leaf naming what proposed
 * ("model", "ngram", "block", "custom"; one word, no space). NULL or ""
 * writes no drafter. drafter is read during the call only. */
static inline pm_range pm_draft_by_push(uint64_t req, uint32_t tokens, const char *drafter)
{
    if (PM__OFF())
        return PM_RANGE_NONE;
    return pm__push_draft_by(req, tokens, drafter);
}

/* A leaf "pm.layer_range ..." for one shard's span in one forward call.
 * attr->phase, when not PM_PHASE_NONE, wins over the current phase; with
 * neither the text carries mode=none, which the checker rejects. */
static inline pm_range pm_layer_range_push(const pm_layer_attr *attr)
{
    if (PM__OFF())
        return PM_RANGE_NONE;
    return pm__push_layer_range(attr);
}

/* "pm.batch mode=M batch=B tokens=N reqs=R:T,...": one forward that serves
 * n requests (reqs[i].tokens each; N is their sum), all in phase mode
 * (exact, decode or verify), which is the thread's current phase until the
 * pop. batch identifies the forward (nonzero, unique in the process); its
 * leaves carry it in pm_layer_attr.batch. n must be 1..PM_BATCH_MAX and
 * reqs must not be NULL, else nothing is pushed. */
static inline pm_range pm_batch_push(uint64_t batch, pm_phase mode, const pm_batch_req *reqs,
                                     uint32_t n)
{
    if (PM__OFF())
        return PM_RANGE_NONE;
    return pm__push_batch(batch, mode, reqs, n);
}

/* Ends a range: pops it when live, restores the current phase when the push
 * set it, and marks the token dead so a second pop does nothing. */
static inline void pm_range_pop(pm_range *range)
{
    if (__builtin_expect(range->depth < 0 && !range->restores_phase, 1))
        return;
    if (!range->restores_phase) {
        pm__rt.pop(); /* a live leaf: pushed, so the gate is on */
        range->depth = -1;
        return;
    }
    pm__pop(range);
}

/* Sets the thread's current phase without pushing a range (a daemon that
 * received a phase on the wire, say). End with pm_range_pop(). */
static inline pm_range pm_phase_enter(pm_phase phase)
{
    if (PM__OFF())
        return PM_RANGE_NONE;
    return pm__phase_enter(phase);
}

#else /* PHASEMARK_DISABLED: every call compiles to nothing. */

static inline int pm_configure(const pm_config *c) { (void)c; return PM_OK; }
static inline int pm_enable(pm_mode m) { (void)m; return PM_OK; }
static inline const char *pm_strerror(int s) { (void)s; return "markers compiled out"; }
static inline int pm_enabled(void) { return 0; }
static inline const char *pm_backend_name(void) { return "off"; }
static inline pm_phase pm_current_phase(void) { return PM_PHASE_NONE; }
static inline pm_range pm_range_push(const char *t) { (void)t; return PM_RANGE_NONE; }
static inline pm_range pm_prefill_push(uint64_t r, uint32_t p, uint32_t n)
{ (void)r; (void)p; (void)n; return PM_RANGE_NONE; }
static inline pm_range pm_decode_push(uint64_t r, uint32_t p)
{ (void)r; (void)p; return PM_RANGE_NONE; }
static inline pm_range pm_spec_decode_push(uint64_t r, uint32_t k)
{ (void)r; (void)k; return PM_RANGE_NONE; }
static inline pm_range pm_draft_push(uint64_t r, uint32_t n)
{ (void)r; (void)n; return PM_RANGE_NONE; }
static inline pm_range pm_draft_by_push(uint64_t r, uint32_t n, const char *d)
{ (void)r; (void)n; (void)d; return PM_RANGE_NONE; }
static inline pm_range pm_layer_range_push(const pm_layer_attr *a)
{ (void)a; return PM_RANGE_NONE; }
static inline pm_range pm_batch_push(uint64_t b, pm_phase m, const pm_batch_req *r, uint32_t n)
{ (void)b; (void)m; (void)r; (void)n; return PM_RANGE_NONE; }
static inline void pm_range_pop(pm_range *r) { (void)r; }
static inline pm_range pm_phase_enter(pm_phase p) { (void)p; return PM_RANGE_NONE; }

#endif /* PHASEMARK_DISABLED */

/* Scoped forms (GCC and Clang): the range pops on every exit from the block
 * (return, break, goto out of it) through __attribute__((cleanup)). */
#define PM__CAT2(a, b) a##b
#define PM__CAT(a, b) PM__CAT2(a, b)
#define PM__SCOPED(init) \
    pm_range PM__CAT(pm__scope_, __COUNTER__) __attribute__((cleanup(pm_range_pop), unused)) = (init)

#define PM_SCOPED_RANGE(text) PM__SCOPED(pm_range_push(text))
#define PM_SCOPED_PREFILL(req, pos, tokens) PM__SCOPED(pm_prefill_push((req), (pos), (tokens)))
#define PM_SCOPED_DECODE(req, pos) PM__SCOPED(pm_decode_push((req), (pos)))
#define PM_SCOPED_SPEC_DECODE(req, draft) PM__SCOPED(pm_spec_decode_push((req), (draft)))
#define PM_SCOPED_DRAFT(req, tokens) PM__SCOPED(pm_draft_push((req), (tokens)))
#define PM_SCOPED_LAYER_RANGE(attr_ptr) PM__SCOPED(pm_layer_range_push(attr_ptr))
#define PM_SCOPED_BATCH(batch, mode, reqs, n) PM__SCOPED(pm_batch_push((batch), (mode), (reqs), (n)))
#define PM_SCOPED_PHASE(phase) PM__SCOPED(pm_phase_enter(phase))

#ifdef __cplusplus
}
#endif
#endif /* PHASEMARK_MARK_H */
