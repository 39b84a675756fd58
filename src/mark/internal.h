/* internal.h — the marker runtime's private seams.
 *
 * The runtime is split by concern: env.c turns the PHASEMARK value into a
 * mode, roctx.c and nvtx.c resolve a backend, format.c builds range text
 * from the range-kind table (kinds.h, shared with the tools' parser),
 * mark.c owns the process-wide decision and the public entry points. Nothing
 * here is exported; every symbol is hidden by the library's visibility
 * preset.
 *
 * A backend is a pair of plain function pointers with ROCTX's shape (push
 * returns the nesting depth or a negative error; pop returns the depth or a
 * negative error), so the hot path is one indirect call per push or pop no
 * matter which backend was chosen.
 */
#ifndef PM_MARK_INTERNAL_H
#define PM_MARK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kinds.h"
#include "phasemark/mark.h"

typedef int (*pm__push_fn)(const char *text);
typedef int (*pm__pop_fn)(void);

typedef struct pm__backend {
    pm__push_fn push;
    pm__pop_fn pop;
    const char *name; /* "roctx" or "nvtx"; static */
} pm__backend;

/* ---- env.c ---------------------------------------------------------- */

typedef enum pm__mode {
    PM__MODE_OFF = 0,
    PM__MODE_AUTO,  /* 1 true yes on auto: ROCTX, then NVTX */
    PM__MODE_ROCTX,
    PM__MODE_NVTX,
    PM__MODE_INVALID
} pm__mode;

_Static_assert((int)PM__MODE_OFF == (int)PM_MODE_OFF && (int)PM__MODE_AUTO == (int)PM_MODE_AUTO &&
                   (int)PM__MODE_ROCTX == (int)PM_MODE_ROCTX &&
                   (int)PM__MODE_NVTX == (int)PM_MODE_NVTX,
               "pm_enable's pm_mode is the environment's pm__mode");

/* Maps the variable's value (NULL when unset) to a mode; ASCII
 * case-insensitive, no locale. */
pm__mode pm__parse_mode(const char *value);

/* 1 when s can name an environment variable: [A-Za-z_][A-Za-z0-9_]*,
 * 1..PM_NAME_MAX bytes. */
int pm__env_name_valid(const char *s);

/* ---- text building (format.c) ---------------------------------------- */

/* The range prefix in force with its separator ("pm."), and its length.
 * Written only by pm_configure() under the init lock while markers are
 * undecided; read by the formatters only after the gate says on (acquire),
 * so no formatter ever sees it change. */
enum { PM__HEAD_CAP = 48 };
typedef struct pm__prefix_text {
    char text[PM__PREFIX_MAX + 2];
    size_t len; /* separator included */
    /* Each kind's head ("pm.prefill"), NUL-padded to PM__HEAD_CAP bytes:
     * a formatter starts a range with one copy of a fixed size, which the
     * compiler turns into a few vector moves, instead of two copies of
     * run-time lengths (about 7-10 ns a range on the reference VM). */
    char head[PM__KIND_COUNT][PM__HEAD_CAP];
    unsigned char head_len[PM__KIND_COUNT];
} pm__prefix_text;
extern pm__prefix_text pm__prefix;

/* Sets pm__prefix from the len bytes at s (pm__prefix_valid). 0 or -1. */
int pm__set_prefix(const char *s, size_t len);

/* A bounded text builder over a caller's buffer. format.c appends range
 * attributes whole or not at all: once one does not fit, the builder is
 * "cut" and ignores everything after it, so the text is always a prefix of
 * the full text that ends at an attribute boundary and never splits
 * key=value. */
typedef struct pm__text {
    char *buf;
    size_t cap;  /* bytes in buf, NUL included */
    size_t len;  /* bytes used, NUL excluded */
    int cut;     /* 1 once an attribute was dropped */
} pm__text;

void pm__text_init(pm__text *t, char *buf, size_t cap, const char *kind);

/* Plain appends for diagnostics (no attribute rule: cut at the byte). */
void pm__text_raw(pm__text *t, const char *s);

/* The values of one structured range: one field per key of kinds.h, named
 * after the key. A kind's formatter reads the fields of its own keys only;
 * the others may hold anything. */
typedef struct pm__values {
    pm_phase mode; /* read by kinds without a phase of their own (a layer
                      range: the phase the shard was told); a phase kind's
                      mode is its phase, from the table */
    uint64_t req, pos, tokens, draft;
    struct {
        int64_t first, last; /* inclusive */
    } layers;
    /* Unsigned in the grammar, signed here as in pm_layer_attr: a caller's
     * -1 is written "-1", which the checker rejects, not as 2^64-1. */
    int64_t shard;
    pm_where where;      /* anything but PM_WHERE_REMOTE is written "local" */
    const char *backend; /* NULL is written "unknown" */
    uint64_t batch;
    const pm_batch_req *reqs; /* reqs[0..nreqs) */
    uint32_t nreqs;
    const char *drafter; /* pm.draft: what proposed (kinds.h) */
    uint32_t omit; /* bit PM__KEY_<ID>: an optional key (PM__OPT) the push
                      lacks, not written */
} pm__values;

/* Formats the text of a range of `kind` (kinds.h) from v into buf (cap
 * bytes, normally PM_RANGE_TEXT_MAX): the prefixed kind name, then the
 * kind's attributes in table order, cut by the rule above. Returns the text
 * length; an unknown kind gives "". No allocation, no library call but
 * memcpy, no locale. */
size_t pm__format(pm__kind kind, char *buf, size_t cap, const pm__values *v);

/* pm__format_<name>(buf, cap, v), one per kind of kinds.h: pm__format
 * without the dispatch, for mark.c's entry points, whose kind is fixed. */
#define PM__FORMAT_DECL(ID, name, ...) \
    size_t pm__format_##name(char *buf, size_t cap, const pm__values *v);
PM__KINDS(PM__FORMAT_DECL)
#undef PM__FORMAT_DECL

/* ---- backends --------------------------------------------------------- */

/* Resolve ROCTX in docs/markers.md's order (global scope, loaded
 * candidates, then loads). 0 and *out filled on success;
 * -1 otherwise, with what was tried appended to *why. */
int pm__roctx_resolve(pm__backend *out, pm__text *why);

/* Resolve NVTX: succeeds only when an NVTX tool is attached (see nvtx.c);
 * ranges go to the domain named domain (copied by NVTX). Same return
 * convention. Always fails when built without nvtx3 headers. */
int pm__nvtx_resolve(pm__backend *out, pm__text *why, const char *domain);

#endif
