/* lanes.c — the names shown for processes and threads: what their ranges
 * say they are, joined to the names the trace carries.
 *
 * A role comes from a lane's own phasemark ranges: phase or batch ranges
 * (the ones the driving process pushes) make it "server"; otherwise layer
 * ranges make it "shard N" ("shards 0,1" for several), followed by the
 * placement those ranges state, " where=remote backend=cuda:0", when all
 * of them state the same. A lane without our ranges has no role. The shown
 * name is the role, the trace's name (a process's comm, a thread's name),
 * or "role (name)" when both exist; a name that already starts with the
 * role is kept as it is, so writing and reading a trace back never grows
 * it. Invariant: the output is sorted by pid, then tid (0, the process,
 * first), one entry per process and thread that has a range or a name.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "pmt.h"

#define ROLE_SHARDS 64 /* shards listed in a role; higher indices are still "shard" */

typedef struct role {
    uint32_t pid, tid;
    int phase;         /* saw a phase or batch range */
    uint64_t shards;   /* bit s: saw layer ranges of shard s (s < ROLE_SHARDS) */
    int nplace;        /* 0: no placement seen, 1: one, 2: several */
    char place[96];    /* "where=remote backend=cuda:0" */
} role;

static int cmp_role(const void *a, const void *b)
{
    const role *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return (x->tid > y->tid) - (x->tid < y->tid);
}

static void note_place(role *r, const pmt_name *nm)
{
    char p[96];
    const pmt_attr *w = &nm->attr[PM__KEY_WHERE], *b = &nm->attr[PM__KEY_BACKEND];
    if (!PMT_HAS(nm, WHERE) && !PMT_HAS(nm, BACKEND))
        return;
    snprintf(p, sizeof p, "%s%.*s%s%.*s", PMT_HAS(nm, WHERE) ? "where=" : "",
             PMT_HAS(nm, WHERE) ? (int)w->len : 0, w->text,
             PMT_HAS(nm, WHERE) && PMT_HAS(nm, BACKEND) ? " backend=" : PMT_HAS(nm, BACKEND) ? "backend=" : "",
             PMT_HAS(nm, BACKEND) ? (int)b->len : 0, b->text);
    if (r->nplace == 0) {
        memcpy(r->place, p, sizeof p);
        r->nplace = 1;
    } else if (r->nplace == 1 && strcmp(r->place, p) != 0) {
        r->nplace = 2;
    }
}

static void note(role *r, const pmt_name *nm)
{
    switch (nm->kind) {
    case PMT_K_PREFILL: case PMT_K_DECODE: case PMT_K_SPEC_DECODE: case PMT_K_BATCH:
        r->phase = 1;
        break;
    case PMT_K_LAYER_RANGE:
        if (PMT_HAS(nm, SHARD))
            r->shards |= nm->attr[PM__KEY_SHARD].u < ROLE_SHARDS
                             ? (uint64_t)1 << nm->attr[PM__KEY_SHARD].u : (uint64_t)1 << 63;
        note_place(r, nm);
        break;
    default:
        break;
    }
}

static void role_text(const role *r, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    if (r->phase) {
        snprintf(buf, cap, "server");
        return;
    }
    if (!r->shards)
        return;
    int count = 0;
    for (int s = 0; s < ROLE_SHARDS; s++)
        count += (int)((r->shards >> s) & 1);
    n += (size_t)snprintf(buf + n, cap - n, count > 1 ? "shards " : "shard ");
    for (int s = 0, k = 0; s < ROLE_SHARDS && n < cap; s++)
        if ((r->shards >> s) & 1)
            n += (size_t)snprintf(buf + n, cap - n, "%s%d", k++ ? "," : "", s);
    if (r->nplace == 1 && n < cap)
        snprintf(buf + n, cap - n, " %s", r->place);
}

/* Joins role and name as the header says; returns a new string or NULL. */
static char *join(const char *rl, const char *name)
{
    char *out = NULL;
    size_t rn = strlen(rl);
    if (!name || !*name)
        return strdup(rl);
    if (!rn || (strncmp(name, rl, rn) == 0 && (!name[rn] || name[rn] == ' ')))
        return strdup(name);
    return asprintf(&out, "%s (%s)", rl, name) < 0 ? NULL : out;
}

/* Finds or adds the role of (pid, tid) in a table kept sorted. */
static role *slot(role **rs, size_t *n, size_t *cap, uint32_t pid, uint32_t tid)
{
    size_t lo = 0, hi = *n;
    role key = {.pid = pid, .tid = tid};
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = cmp_role(&(*rs)[mid], &key);
        if (c == 0)
            return &(*rs)[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        role *nr = realloc(*rs, ncap * sizeof *nr);
        if (!nr)
            return NULL;
        *rs = nr;
        *cap = ncap;
    }
    memmove(&(*rs)[lo + 1], &(*rs)[lo], (*n - lo) * sizeof **rs);
    (*n)++;
    (*rs)[lo] = key;
    return &(*rs)[lo];
}

/* Roles of every process (tid 0) and thread with a range or a name: two
 * binary searches per range over a table of lanes, which is small. */
static int collect(const pmt_trace *t, role **rs, size_t *n)
{
    size_t cap = 0;
    for (size_t i = 0; i < t->nlabels; i++)
        if (!slot(rs, n, &cap, t->labels[i].pid, t->labels[i].tid) ||
            !slot(rs, n, &cap, t->labels[i].pid, 0))
            return -1;
    for (size_t i = 0; i < t->n; i++) {
        const pmt_range *r = &t->r[i];
        role *pr = slot(rs, n, &cap, r->pid, 0);
        if (!pr || (r->tid && !slot(rs, n, &cap, r->pid, r->tid)))
            return -1;
        pmt_name nm;
        if (!pmt_name_is_ours(r->name) || pmt_name_parse(r->name, &nm, NULL, 0) < 0)
            continue;
        note(slot(rs, n, &cap, r->pid, 0), &nm); /* both found above: no allocation */
        if (r->tid)
            note(slot(rs, n, &cap, r->pid, r->tid), &nm);
    }
    return 0;
}

int pmt_lane_names(const pmt_trace *t, pmt_label **out, size_t *nout)
{
    role *rs = NULL;
    size_t n = 0, k = 0;
    *out = NULL;
    *nout = 0;
    pmt_label *ls = NULL;
    if (collect(t, &rs, &n) < 0 || !(ls = calloc(n ? n : 1, sizeof *ls)))
        goto fail;
    for (size_t i = 0; i < n; i++) {
        char rl[160];
        role_text(&rs[i], rl, sizeof rl);
        const char *name = pmt_trace_label_of(t, rs[i].pid, rs[i].tid);
        if (!rl[0] && !name)
            continue;
        ls[k] = (pmt_label){rs[i].pid, rs[i].tid, join(rl, name)};
        if (!ls[k++].name)
            goto fail;
    }
    free(rs);
    *out = ls;
    *nout = k;
    return 0;
fail:
    pmt_lane_names_free(ls, k);
    free(rs);
    return -1;
}

void pmt_lane_names_free(pmt_label *ls, size_t n)
{
    for (size_t i = 0; ls && i < n; i++)
        free(ls[i].name);
    free(ls);
}

const char *pmt_lane_name_of(const pmt_label *ls, size_t n, uint32_t pid, uint32_t tid)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ls[mid].pid == pid && ls[mid].tid == tid)
            return ls[mid].name;
        if (ls[mid].pid < pid || (ls[mid].pid == pid && ls[mid].tid < tid))
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
