/* test_kinds.c — the range-kind table (src/mark/kinds.h) as both of its
 * users read it: every kind is pushed through the marker library's public
 * API into an in-process ROCTX recorder (pm_roctx_log.h), and the text it
 * received is parsed by the tools' parser. Expected texts and values are
 * written out here by hand from the grammar in docs/markers.md ("Range
 * names"), so a table entry that changes what either side does fails here,
 * and so does a kind added to the table without a row below (case
 * "cover").
 *
 *   test_kinds kind NAME      one kind, end to end, and its modes (with
 *                             the layer compiled out: the parser side,
 *                             then exit 77)
 *   test_kinds cover NAME...  the table's kinds are exactly NAME..., in
 *                             order (CMake passes its list of kind cases)
 *                             and each has a row here
 *   test_kinds unknown        names whose kind is not in the table
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "pm_check.h"
#include "pm_roctx_log.h"
#include "pmt.h"

/* One key's expected parse: the value as written, and its number(s). */
typedef struct want_attr {
    int key; /* PM__KEY_* */
    const char *text;
    uint64_t u, last;
} want_attr;

typedef struct row {
    const char *kind;      /* its name in the table */
    pm_range (*push)(void);/* one range of the kind through the public API */
    const char *text;      /* what the backend receives */
    int leaf;
    pm_phase phase;        /* the thread's current phase inside the range */
    const char *modes;     /* the modes the kind allows, space-separated */
    want_attr attrs[PM__KIND_KEYS_MAX]; /* every key written, in text order */
    size_t nattrs;
    /* The table's keys (pm__key | PM__KEY_OPT) when some are optional and
     * the text lacks them; ntable 0: the keys of attrs, none optional. */
    unsigned table[PM__KIND_KEYS_MAX];
    size_t ntable;
} row;

static pm_range push_prefill(void) { return pm_prefill_push(7, 128, 11); }
static pm_range push_decode(void) { return pm_decode_push(8, 139); }
static pm_range push_spec_decode(void) { return pm_spec_decode_push(9, 4); }
static pm_range push_draft(void) { return pm_draft_by_push(10, 3, "ngram"); }

static pm_range push_layer_range(void)
{
    pm_layer_attr a = PM_LAYER_ATTR_INIT;
    a.phase = PM_PHASE_VERIFY;
    a.first_layer = 12;
    a.last_layer = 23;
    a.shard = 1;
    a.where = PM_WHERE_REMOTE;
    a.backend = "cuda:0";
    a.req = 11;
    a.tokens = 5;
    return pm_layer_range_push(&a);
}

static pm_range push_batch(void)
{
    static const pm_batch_req reqs[] = {{3, 11}, {7, 1}};
    return pm_batch_push(17, PM_PHASE_DECODE, reqs, 2);
}

static const row rows[] = {
    {"prefill", push_prefill, "pm.prefill mode=exact req=7 pos=128 tokens=11", 0,
     PM_PHASE_EXACT, "exact",
     {{PM__KEY_MODE, "exact", PM_PHASE_EXACT, 0},
      {PM__KEY_REQ, "7", 7, 0},
      {PM__KEY_POS, "128", 128, 0},
      {PM__KEY_TOKENS, "11", 11, 0}},
     4, {0}, 0},
    {"decode", push_decode, "pm.decode mode=decode req=8 pos=139", 0, PM_PHASE_DECODE, "decode",
     {{PM__KEY_MODE, "decode", PM_PHASE_DECODE, 0},
      {PM__KEY_REQ, "8", 8, 0},
      {PM__KEY_POS, "139", 139, 0}},
     3, {0}, 0},
    {"spec_decode", push_spec_decode, "pm.spec_decode mode=batched req=9 draft=4", 0,
     PM_PHASE_BATCHED, "batched",
     {{PM__KEY_MODE, "batched", PM_PHASE_BATCHED, 0},
      {PM__KEY_REQ, "9", 9, 0},
      {PM__KEY_DRAFT, "4", 4, 0}},
     3, {0}, 0},
    {"draft", push_draft, "pm.draft req=10 tokens=3 drafter=ngram", 1, PM_PHASE_NONE, "",
     {{PM__KEY_REQ, "10", 10, 0}, {PM__KEY_TOKENS, "3", 3, 0}, {PM__KEY_DRAFTER, "ngram", 0, 0}},
     3, {PM__KEY_REQ, PM__KEY_TOKENS, PM__KEY_DRAFTER | PM__KEY_OPT}, 3},
    {"layer_range", push_layer_range,
     "pm.layer_range mode=verify layers=12-23 shard=1 where=remote backend=cuda:0 req=11 tokens=5",
     1, PM_PHASE_NONE, "exact decode verify",
     {{PM__KEY_MODE, "verify", PM_PHASE_VERIFY, 0},
      {PM__KEY_LAYERS, "12-23", 12, 23},
      {PM__KEY_SHARD, "1", 1, 0},
      {PM__KEY_WHERE, "remote", PM_WHERE_REMOTE, 0},
      {PM__KEY_BACKEND, "cuda:0", 0, 0},
      {PM__KEY_REQ, "11", 11, 0},
      {PM__KEY_TOKENS, "5", 5, 0}},
     7,
     {PM__KEY_MODE, PM__KEY_LAYERS, PM__KEY_SHARD, PM__KEY_WHERE, PM__KEY_BACKEND,
      PM__KEY_REQ | PM__KEY_OPT, PM__KEY_TOKENS, PM__KEY_BATCH | PM__KEY_OPT},
     8},
    {"batch", push_batch, "pm.batch mode=decode batch=17 tokens=12 reqs=3:11,7:1", 0,
     PM_PHASE_DECODE, "exact decode verify",
     {{PM__KEY_MODE, "decode", PM_PHASE_DECODE, 0},
      {PM__KEY_BATCH, "17", 17, 0},
      {PM__KEY_TOKENS, "12", 12, 0},
      {PM__KEY_REQS, "3:11,7:1", 2, 12}},
     4, {0}, 0},
};
enum { NROWS = sizeof rows / sizeof rows[0] };

static const row *row_of(const char *kind)
{
    for (size_t i = 0; i < NROWS; i++)
        if (strcmp(rows[i].kind, kind) == 0)
            return &rows[i];
    return NULL;
}

/* 1 when word is one of the space-separated words of list. */
static int has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, " ");
        if (len == n && memcmp(p, word, n) == 0)
            return 1;
        p += len + (p[len] == ' ');
    }
    return 0;
}

/* The parse of text matches the row, value for value. */
static void check_parse(const row *w, int kind, const char *text)
{
    pmt_name nm;
    char err[200] = "";
    CHECK_INT_EQ(pmt_name_parse(text, &nm, err, sizeof err), 0);
    CHECK_STR_EQ(err, "");
    CHECK_INT_EQ(nm.kind, kind + 1);
    CHECK_STR_EQ(pmt_kind_name(nm.kind), w->kind);
    CHECK_INT_EQ(pmt_kind_is_leaf(nm.kind), w->leaf);
    CHECK_STR_EQ(nm.mode, w->nattrs && w->attrs[0].key == PM__KEY_MODE ? w->attrs[0].text : "");
    uint32_t want_has = 0;
    for (size_t i = 0; i < w->nattrs; i++) {
        const want_attr *a = &w->attrs[i];
        const pmt_attr *got = &nm.attr[a->key];
        want_has |= 1u << a->key;
        if (!((nm.has >> a->key) & 1u)) {
            PM_CHECK_FAIL_("%s: key %s not parsed", w->kind, pm__key_get((unsigned)a->key)->name);
            continue;
        }
        CHECK_INT_EQ(got->len, strlen(a->text));
        CHECK(got->len == strlen(a->text) && memcmp(got->text, a->text, got->len) == 0);
        CHECK_U64_EQ(got->u, a->u);
        CHECK_U64_EQ(got->last, a->last);
    }
    CHECK_INT_EQ(nm.has, want_has);
}

/* Every mode name, and "none", is accepted exactly when the row allows it,
 * and refused with the parser's exact words otherwise. */
static void check_modes(const row *w)
{
    for (unsigned p = PM_PHASE_NONE; p < PM_PHASE_COUNT; p++) {
        const char *m = pm_phase_name(p);
        char text[64], want[160], err[200] = "";
        pmt_name nm;
        snprintf(text, sizeof text, "pm.%s mode=%s", w->kind, m);
        int rc = pmt_name_parse(text, &nm, err, sizeof err);
        if (has_word(w->modes, m)) {
            CHECK_INT_EQ(rc, 0);
            CHECK_STR_EQ(nm.mode, m);
            CHECK_U64_EQ(nm.attr[PM__KEY_MODE].u, p);
            continue;
        }
        if (!w->modes[0])
            snprintf(want, sizeof want, "pm.%s takes no mode", w->kind);
        else
            snprintf(want, sizeof want, "mode=%s is not a mode of pm.%s%s", m, w->kind,
                     p == PM_PHASE_NONE ? " (the shard was told no phase)" : "");
        CHECK_INT_EQ(rc, -1);
        CHECK_STR_EQ(err, want);
    }
    /* Without a mode: fine only for a kind that has none. */
    char text[64], want[96], err[200] = "";
    pmt_name nm;
    snprintf(text, sizeof text, "pm.%s", w->kind);
    snprintf(want, sizeof want, "pm.%s without mode", w->kind);
    CHECK_INT_EQ(pmt_name_parse(text, &nm, err, sizeof err), w->modes[0] ? -1 : 0);
    CHECK_STR_EQ(err, w->modes[0] ? want : "");
}

static int case_kind(const char *name)
{
    const row *w = row_of(name);
    int kind = pm__kind_find(name, strlen(name));
    REQUIRE(w != NULL);
    REQUIRE(kind >= 0);
    const pm__kind_info *k = pm__kind_get((unsigned)kind);

    /* The table row itself, against the hand-written one. */
    CHECK_INT_EQ(k->leaf, w->leaf);
    unsigned mode = w->nattrs && w->attrs[0].key == PM__KEY_MODE ? (unsigned)w->attrs[0].u : 0;
    CHECK_INT_EQ(pm__kind_phase(k, mode), w->phase);
    size_t nt = w->ntable ? w->ntable : w->nattrs;
    CHECK_INT_EQ(k->nkeys, nt);
    for (unsigned i = 0; i < nt && i < k->nkeys; i++) {
        unsigned want = w->ntable ? w->table[i] : (unsigned)w->attrs[i].key;
        CHECK_STR_EQ(pm__key_get(pm__kind_key(k, i))->name, pm__key_get(want & ~PM__KEY_OPT)->name);
        CHECK_INT_EQ(pm__kind_key_optional(k, i), (want & PM__KEY_OPT) != 0);
    }

    /* The parser, on the hand-written text and on every mode. */
    check_parse(w, kind, w->text);
    check_modes(w);

    /* Through the library: one push, the text, the current phase, and the
     * parse of what the backend received. */
#ifdef PHASEMARK_DISABLED
    if (!pm_check_failures)
        PM_SKIP("the marker layer is compiled out (PHASEMARK_MARKERS=OFF): parser side only");
    return pm_check_result();
#else
    REQUIRE(pm_enabled());
    CHECK_STR_EQ(pm_backend_name(), "roctx");
    pm_roctx_log_clear();
    pm_range r = w->push();
    CHECK_INT_EQ(r.depth, 0);
    CHECK_INT_EQ(pm_current_phase(), w->phase);
    pm_range_pop(&r);
    CHECK_INT_EQ(pm_current_phase(), PM_PHASE_NONE);
    CHECK_INT_EQ(pm_roctx.n_push, 1);
    CHECK_INT_EQ(pm_roctx.n_pop, 1);
    CHECK_STR_EQ(pm_roctx.texts[0], w->text);
    check_parse(w, kind, pm_roctx.texts[0]);
    return pm_check_result();
#endif
}

static int case_cover(int n, char **names)
{
    CHECK_INT_EQ(n, PM__KIND_COUNT);
    CHECK_INT_EQ(NROWS, PM__KIND_COUNT);
    for (unsigned k = 0; k < PM__KIND_COUNT; k++) {
        const char *name = pm__kind_get(k)->name;
        if (!row_of(name))
            PM_CHECK_FAIL_("kind %s has no row in test_kinds.c", name);
        if ((int)k < n)
            CHECK_STR_EQ(names[k], name);
        else
            PM_CHECK_FAIL_("kind %s has no case in tests/tools/CMakeLists.txt", name);
        /* PMT_K_<ID> and the table agree both ways. */
        CHECK_INT_EQ(pmt_kind_parse(name, strlen(name)), (int)k + 1);
        CHECK_STR_EQ(pmt_kind_name((int)k + 1), name);
    }
    CHECK_STR_EQ(pmt_kind_name(PMT_K_OTHER), "other");
    CHECK_STR_EQ(pmt_kind_name(PMT_K_COUNT), "invalid");
    return pm_check_result();
}

static int case_unknown(void)
{
    static const char *const bad[][2] = {
        {"pm.verify mode=verify", "unknown kind 'pm.verify'"},
        {"pm.batched mode=batched req=1", "unknown kind 'pm.batched'"},
        {"pm.prefil mode=exact", "unknown kind 'pm.prefil'"},
        {"pm.prefills mode=exact", "unknown kind 'pm.prefills'"},
        {"pm.layer mode=exact layers=0-1", "unknown kind 'pm.layer'"},
        {"pm.PREFILL mode=exact", "unknown kind 'pm.PREFILL'"},
        {"pm.other", "unknown kind 'pm.other'"},
        {"pm. mode=exact", "unknown kind 'pm.'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *kind = bad[i][0] + 3;
        size_t klen = strcspn(kind, " ");
        CHECK_INT_EQ(pm__kind_find(kind, klen), -1); /* not in the table */
        pmt_name nm;
        char err[200] = "";
        CHECK_INT_EQ(pmt_name_parse(bad[i][0], &nm, err, sizeof err), -1);
        CHECK_STR_EQ(err, bad[i][1]);
    }
    /* A table kind behind another prefix is another tool's range. */
    pmt_name nm;
    CHECK_INT_EQ(pmt_name_parse("ds4.prefill mode=exact req=1", &nm, NULL, 0), 0);
    CHECK_INT_EQ(nm.kind, PMT_K_OTHER);
    CHECK_INT_EQ(pmt_name_is_ours("ds4.prefill mode=exact"), 0);
    CHECK_INT_EQ(pmt_name_is_ours("pm.verify"), 1);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    /* Before the first marker call: the layer reads PHASEMARK once. */
    if (setenv("PHASEMARK", "roctx", 1) != 0)
        return 1;
    const char *c = argc > 1 ? argv[1] : "";
    if (!strcmp(c, "kind") && argc == 3)
        return case_kind(argv[2]);
    if (!strcmp(c, "cover"))
        return case_cover(argc - 2, argv + 2);
    if (!strcmp(c, "unknown"))
        return case_unknown();
    fprintf(stderr, "usage: test_kinds kind NAME | cover NAME... | unknown\n");
    return 2;
}
