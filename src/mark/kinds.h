/* kinds.h — the range-kind table: the one description of the range-name
 * grammar (docs/markers.md, "Range names"). The marker library formats range text from it
 * (format.c, mark.c) and the tools parse range text with it
 * (tools/phasemark/names.c), so the two cannot drift apart.
 *
 * A range name is PM__NAME_PREFIX, a kind's name, then " key=value" for each
 * of the kind's keys, in the kind's order:
 *
 *   pm.layer_range mode=verify layers=12-23 shard=1 where=remote backend=cuda:0 req=3 tokens=5
 *
 * Two X-macro lists hold the grammar:
 *
 *   PM__KEYS   every attribute key once, with the type of its value, so a key
 *              means the same in every kind;
 *   PM__KINDS  every kind once: whether it is a leaf, the phase it makes
 *              current, the modes it allows and its keys in text order.
 *
 * Adding a kind is one PM__KINDS entry; the formatter and the parser take it
 * from there (the kind still needs its push function in mark.h and mark.c,
 * whose arguments are the values). Adding a key is one PM__KEYS entry and a
 * field of the same name in pm__values (internal.h): the formatter does not
 * compile until the field exists.
 *
 * The prefix is kept apart from the kind names: an embedder chooses its own
 * ("ds4" gives "ds4.prefill ..."), so no user of this header spells "pm."
 * itself.
 *
 * Everything here is macros, enums and static inline functions over
 * constant data, as in phasemark/phase.h: no symbol, no allocation, safe
 * from any thread. Dependencies point one way: the tools include this
 * header, and it includes nothing of theirs.
 */
#ifndef PM_MARK_KINDS_H
#define PM_MARK_KINDS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "phasemark/phase.h"

/* What range names start with unless the embedder chose otherwise: the
 * prefix, then PM__NAME_SEP, then the kind. The build may name another
 * default (CMake PHASEMARK_RANGE_PREFIX); the marker library takes the one
 * in force from pm_configure(), the tools from --prefix or the trace. */
#ifndef PHASEMARK_DEFAULT_PREFIX
#define PHASEMARK_DEFAULT_PREFIX "pm"
#endif
#define PM__NAME_SEP '.'

/* Most bytes in a prefix (NUL excluded); mark.h's PM_NAME_MAX. */
enum { PM__PREFIX_MAX = 31 };

/* 1 when the len bytes at s can be a prefix: [a-z0-9_], 1..PM__PREFIX_MAX. */
static inline int pm__prefix_valid(const char *s, size_t len)
{
    if (!len || len > PM__PREFIX_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return 0;
    }
    return 1;
}

/* ---- keys -------------------------------------------------------------- */

/* How a key's value is written and read. */
typedef enum pm__vtype {
    PM__V_MODE,  /* a phase name (pm_phase_name) among the kind's modes */
    PM__V_UINT,  /* unsigned decimal: digits only, fits in 64 bits */
    PM__V_SPAN,  /* A-B, two unsigned decimals with A <= B, inclusive */
    PM__V_WHERE, /* pm__where_name(): "local" or "remote" */
    PM__V_TEXT,  /* any non-empty text without a space */
    PM__V_REQS   /* R:T[,R:T]...: request ids, each with its tokens, unsigned
                    decimals; at most PM_BATCH_MAX entries, no id twice */
} pm__vtype;

/* X(ID, name, TYPE): the attribute keys. ID names the key in code
 * (PM__KEY_<ID>, PM__ATTR(<ID>)), name is how it is written, TYPE is the
 * pm__vtype after PM__V_.
 *   mode     for a phase range the phase it enters; for a layer range the
 *            phase the shard was told
 *   req      request id
 *   pos      base position of a prefill chunk or a decode step
 *   tokens   tokens in the chunk, the proposal or the forward call
 *   draft    tokens drafted in a speculative round
 *   layers   the span of layers one shard ran, first-last
 *   shard    shard index in the placement, 0-based
 *   where    where the shard runs, relative to the driving process
 *   backend  the shard's backend: "cpu", "cuda:0", ...
 *   batch    the id of a forward that serves several requests (nonzero)
 *   reqs     the requests a batched forward serves, each with its tokens
 *   drafter  what proposed a speculative round's tokens: "model" (a draft
 *            model's forwards), "ngram" (a lookup, no forward), "block"
 *            (a block drafter), "custom" (a caller's callback)
 */
#define PM__KEYS(X)           \
    X(MODE, mode, MODE)       \
    X(REQ, req, UINT)         \
    X(POS, pos, UINT)         \
    X(TOKENS, tokens, UINT)   \
    X(DRAFT, draft, UINT)     \
    X(LAYERS, layers, SPAN)   \
    X(SHARD, shard, UINT)     \
    X(WHERE, where, WHERE)    \
    X(BACKEND, backend, TEXT) \
    X(BATCH, batch, UINT)     \
    X(REQS, reqs, REQS)       \
    X(DRAFTER, drafter, TEXT)

typedef enum pm__key {
#define PM__KEY_ENUM(ID, name, type) PM__KEY_##ID,
    PM__KEYS(PM__KEY_ENUM)
#undef PM__KEY_ENUM
    PM__KEY_COUNT
} pm__key;

typedef struct pm__key_info {
    const char *name; /* as written: "req" */
    pm__vtype type;
} pm__key_info;

/* The table row of a key, or NULL when key is not one. */
static inline const pm__key_info *pm__key_get(unsigned key)
{
#define PM__KEY_ROW(ID, name, type) {#name, PM__V_##type},
    static const pm__key_info table[PM__KEY_COUNT] = {PM__KEYS(PM__KEY_ROW)};
#undef PM__KEY_ROW
    return key < PM__KEY_COUNT ? &table[key] : NULL;
}

/* The key spelled by the len bytes at s (not NUL-terminated), or -1. */
static inline int pm__key_find(const char *s, size_t len)
{
    for (unsigned k = 0; k < PM__KEY_COUNT; k++) {
        const char *name = pm__key_get(k)->name;
        if (strlen(name) == len && memcmp(name, s, len) == 0)
            return (int)k;
    }
    return -1;
}

/* The values of a WHERE key, indexed by pm_where (mark.h: 0 local,
 * 1 remote); NULL past the end. */
static inline const char *pm__where_name(unsigned where)
{
    static const char *const names[] = {"local", "remote"};
    return where < sizeof names / sizeof names[0] ? names[where] : NULL;
}

/* ---- kinds ------------------------------------------------------------- */

/* A phase as a bit of a kind's mode set: PM__MODE(EXACT). */
#define PM__MODE(P) (1u << PM_PHASE_##P)

/* X(ID, name, leaf, phase, modes, keys): the kinds of range.
 *   ID     names the kind in code: PM__KIND_<ID> here, PMT_K_<ID> in the
 *          tools
 *   name   the kind as written after the prefix
 *   leaf   1: encloses nothing (docs/markers.md, promise 8); 0: encloses leaves
 *   phase  the calling thread's current phase from push to pop;
 *          PM_PHASE_NONE: the range leaves it alone
 *   modes  the values mode may take, as PM__MODE bits; 0: no mode. A phase
 *          range's one mode is its phase; a layer range's are the phases a
 *          shard can be told
 *   keys   the attributes in the order they are written, each PM__ATTR(ID)
 *          or, for a key written only when the push has it, PM__OPT(ID).
 *          A user of this list that needs the keys defines PM__ATTR and
 *          PM__OPT before expanding PM__KINDS and undefines them right
 *          after.
 *
 * A kind that is no leaf and names no phase but has modes (batch) makes its
 * mode the current phase: one batched forward is in whichever phase its
 * requests are. A layer range has exactly one of req (one request) and
 * batch (a batched forward, whose range names the requests).
 */
#define PM__KINDS(X)                                                                     \
    X(PREFILL, prefill, 0, PM_PHASE_EXACT, PM__MODE(EXACT),                              \
      PM__ATTR(MODE) PM__ATTR(REQ) PM__ATTR(POS) PM__ATTR(TOKENS))                       \
    X(DECODE, decode, 0, PM_PHASE_DECODE, PM__MODE(DECODE),                              \
      PM__ATTR(MODE) PM__ATTR(REQ) PM__ATTR(POS))                                        \
    X(SPEC_DECODE, spec_decode, 0, PM_PHASE_BATCHED, PM__MODE(BATCHED),                  \
      PM__ATTR(MODE) PM__ATTR(REQ) PM__ATTR(DRAFT))                                      \
    X(DRAFT, draft, 1, PM_PHASE_NONE, 0,                                                 \
      PM__ATTR(REQ) PM__ATTR(TOKENS) PM__OPT(DRAFTER))                                   \
    X(LAYER_RANGE, layer_range, 1, PM_PHASE_NONE,                                        \
      PM__MODE(EXACT) | PM__MODE(DECODE) | PM__MODE(VERIFY),                             \
      PM__ATTR(MODE) PM__ATTR(LAYERS) PM__ATTR(SHARD) PM__ATTR(WHERE) PM__ATTR(BACKEND) \
      PM__OPT(REQ) PM__ATTR(TOKENS) PM__OPT(BATCH))                                     \
    X(BATCH, batch, 0, PM_PHASE_NONE,                                                    \
      PM__MODE(EXACT) | PM__MODE(DECODE) | PM__MODE(VERIFY),                             \
      PM__ATTR(MODE) PM__ATTR(BATCH) PM__ATTR(TOKENS) PM__ATTR(REQS))

typedef enum pm__kind {
#define PM__KIND_ENUM(ID, ...) PM__KIND_##ID,
    PM__KINDS(PM__KIND_ENUM)
#undef PM__KIND_ENUM
    PM__KIND_COUNT
} pm__kind;

/* Most keys one kind has. */
enum { PM__KIND_KEYS_MAX = 8 };

typedef struct pm__kind_info {
    const char *name; /* after the prefix: "prefill" */
    uint8_t leaf;     /* 1: encloses nothing */
    uint8_t phase;    /* pm_phase current from push to pop; PM_PHASE_NONE: none */
    uint8_t modes;    /* PM__MODE bits; 0: the kind has no mode */
    uint8_t nkeys;    /* entries used in keys */
    uint8_t keys[PM__KIND_KEYS_MAX]; /* pm__key | PM__KEY_OPT, in text order */
} pm__kind_info;

/* Set in a kind_info key entry written only when the push has it. */
#define PM__KEY_OPT 0x80u

/* The pm__key of entry i of k, and whether it is optional. */
static inline unsigned pm__kind_key(const pm__kind_info *k, unsigned i)
{
    return k->keys[i] & ~PM__KEY_OPT;
}
static inline int pm__kind_key_optional(const pm__kind_info *k, unsigned i)
{
    return (k->keys[i] & PM__KEY_OPT) != 0;
}

/* The phase a range of kind k makes current: its row's, or for a kind
 * without one that encloses leaves and has modes, the mode it was pushed
 * with. PM_PHASE_NONE: it leaves the current phase alone. */
static inline unsigned pm__kind_phase(const pm__kind_info *k, unsigned mode)
{
    if (k->phase != PM_PHASE_NONE)
        return k->phase;
    return !k->leaf && k->modes ? mode : PM_PHASE_NONE;
}

/* The table row of a kind, or NULL when kind is not one. */
static inline const pm__kind_info *pm__kind_get(unsigned kind)
{
#define PM__ATTR(ID) PM__KEY_##ID,
#define PM__OPT(ID) (PM__KEY_##ID | PM__KEY_OPT),
#define PM__KIND_ROW(ID, name, leaf, phase, modes, keys) \
    {#name, leaf, phase, modes, sizeof((const uint8_t[]){keys}), {keys}},
    static const pm__kind_info table[PM__KIND_COUNT] = {PM__KINDS(PM__KIND_ROW)};
#undef PM__KIND_ROW
#undef PM__OPT
#undef PM__ATTR
    return kind < PM__KIND_COUNT ? &table[kind] : NULL;
}

/* The kind spelled by the len bytes at s (after the prefix; not
 * NUL-terminated), or -1. */
static inline int pm__kind_find(const char *s, size_t len)
{
    for (unsigned k = 0; k < PM__KIND_COUNT; k++) {
        const char *name = pm__kind_get(k)->name;
        if (strlen(name) == len && memcmp(name, s, len) == 0)
            return (int)k;
    }
    return -1;
}

/* ---- rules every entry keeps, checked where the table is compiled ------ */

/* Each entry's rules; PM__ATTR counts the entry's mode keys... */
#define PM__ATTR(ID) +(PM__KEY_##ID == PM__KEY_MODE)
#define PM__OPT(ID) +(PM__KEY_##ID == PM__KEY_MODE) * 2
#define PM__KIND_RULES(ID, name, leaf, phase, modes, keys)                             \
    _Static_assert(((modes) != 0) == ((0 keys) == 1),                                  \
                   #name ": mode is a key, once, exactly when the kind has modes");    \
    _Static_assert((phase) == PM_PHASE_NONE || (modes) == (1u << (phase)),             \
                   #name ": a phase range's one mode is its phase");                   \
    _Static_assert(!(leaf) || (phase) == PM_PHASE_NONE, #name ": a leaf sets no phase");
PM__KINDS(PM__KIND_RULES)
#undef PM__KIND_RULES
#undef PM__OPT
#undef PM__ATTR

/* ...and here the keys, against the room in pm__kind_info. */
#define PM__ATTR(ID) PM__KEY_##ID,
#define PM__OPT(ID) PM__KEY_##ID,
#define PM__KIND_ROOM(ID, name, leaf, phase, modes, keys)                \
    _Static_assert(sizeof((const uint8_t[]){keys}) <= PM__KIND_KEYS_MAX, \
                   #name ": more keys than PM__KIND_KEYS_MAX");
PM__KINDS(PM__KIND_ROOM)
#undef PM__KIND_ROOM
#undef PM__OPT
#undef PM__ATTR

_Static_assert(PM__KEY_COUNT < PM__KEY_OPT, "a key and its optional flag share a byte");
_Static_assert(PM__KEY_COUNT <= 32, "a kind's keys fit a 32-bit mask (pmt_name.has)");
_Static_assert(PM_PHASE_COUNT <= 8, "a kind's modes fit pm__kind_info.modes");

#endif
