/* names.c — the range-name parser (docs/markers.md "Range names", mark.h):
 *
 *   prefix "." kind { " " key "=" value }
 *
 * The prefix is "pm" unless a trace was written by an embedder that chose
 * its own ("ds4.prefill ..."): pmt_set_prefix() sets the one in force for
 * the whole command (--prefix), pmt_detect_prefix() finds it in a trace.
 *
 * The grammar is not written here: the prefix, the kinds, each kind's modes
 * and each key's type come from the range-kind table (src/mark/kinds.h),
 * the same table the marker library formats from. This file adds only the
 * rules that hold for every kind: keys are lowercase letters, digits and
 * '_'; values are non-empty and contain no space; a key appears once.
 *
 * Known keys are typed wherever they appear (UINT: unsigned decimal; SPAN:
 * A-B with A <= B; WHERE: local|remote; MODE: a mode of the kind, never
 * none: a shard must be told its phase). mode is required where the kind
 * has modes and refused where it has none. Other keys are allowed, so the
 * grammar can grow, and a kind's keys may be missing from the end, as the
 * formatter's cut leaves them. Names that do not start with the prefix are
 * other tools' ranges and always valid.
 */
#include <string.h>

#include "phasemark/mark.h" /* PM_BATCH_MAX */
#include "pmt.h"

/* The prefix in force, with its separator, and its length. The command is
 * single-threaded; the tests set it per case. */
static char prefix_text[PM__PREFIX_MAX + 2] = PHASEMARK_DEFAULT_PREFIX ".";
static size_t prefix_len = sizeof PHASEMARK_DEFAULT_PREFIX;
#define PREFIX_LEN prefix_len
#define PM__NAME_PREFIX prefix_text

int pmt_set_prefix(const char *prefix)
{
    size_t n = strlen(prefix);
    if (n && prefix[n - 1] == PM__NAME_SEP)
        n--; /* "ds4." means "ds4" */
    if (!pm__prefix_valid(prefix, n))
        return -1;
    memcpy(prefix_text, prefix, n);
    prefix_text[n] = PM__NAME_SEP;
    prefix_text[n + 1] = '\0';
    prefix_len = n + 1;
    return 0;
}

const char *pmt_prefix(char *buf, size_t cap)
{
    if (cap) {
        size_t n = prefix_len - 1 < cap - 1 ? prefix_len - 1 : cap - 1;
        memcpy(buf, prefix_text, n);
        buf[n] = '\0';
    }
    return buf;
}

/* The prefix of text when it reads "<prefix>.<kind>" for a table kind:
 * its length, else 0. */
static size_t prefix_of(const char *text)
{
    const char *dot = strchr(text, PM__NAME_SEP);
    if (!dot || !pm__prefix_valid(text, (size_t)(dot - text)))
        return 0;
    size_t klen = strcspn(dot + 1, " ");
    return pm__kind_find(dot + 1, klen) >= 0 ? (size_t)(dot - text) : 0;
}

int pmt_detect_prefix(const pmt_trace *t, char *found, size_t cap)
{
    char seen[PMT_PREFIXES_MAX][PM__PREFIX_MAX + 1];
    int n = 0;
    for (size_t i = 0; i < t->n; i++) {
        size_t len = prefix_of(t->r[i].name);
        if (!len)
            continue;
        int j = 0;
        while (j < n && !(strlen(seen[j]) == len && memcmp(seen[j], t->r[i].name, len) == 0))
            j++;
        if (j < n || n == PMT_PREFIXES_MAX)
            continue;
        memcpy(seen[n], t->r[i].name, len);
        seen[n++][len] = '\0';
    }
    if (cap)
        found[0] = '\0';
    for (int j = 0; j < n && cap; j++) {
        size_t used = strlen(found), need = strlen(seen[j]) + (j ? 1 : 0);
        if (used + need >= cap)
            break;
        if (j)
            strcat(found, ",");
        strcat(found, seen[j]);
    }
    return n;
}

/* The table row of a pmt_kind, or NULL (PMT_K_OTHER, out of range). */
static const pm__kind_info *info_of(int kind)
{
    return kind > PMT_K_OTHER && kind < PMT_K_COUNT ? pm__kind_get((unsigned)(kind - 1)) : NULL;
}

const char *pmt_kind_name(int kind)
{
    const pm__kind_info *k = info_of(kind);
    return k ? k->name : kind == PMT_K_OTHER ? "other" : "invalid";
}

int pmt_kind_parse(const char *s, size_t len)
{
    int k = pm__kind_find(s, len);
    return k < 0 ? -1 : k + 1;
}

int pmt_kind_is_leaf(int kind)
{
    const pm__kind_info *k = info_of(kind);
    return k && k->leaf;
}

int pmt_name_is_ours(const char *text)
{
    return strncmp(text, PM__NAME_PREFIX, PREFIX_LEN) == 0;
}

static int is_key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

static int mode_value(const pm__kind_info *k, const char *v, size_t vl, pmt_attr *a,
                      char *err, size_t errlen)
{
    if (!k->modes) {
        pmt_errf(err, errlen, "%s%s takes no mode", PM__NAME_PREFIX, k->name);
        return -1;
    }
    pm_phase p = pm_phase_parse(v, vl);
    if (p == PM_PHASE_NONE || !(k->modes & (1u << p))) {
        pmt_errf(err, errlen, "mode=%.*s is not a mode of %s%s%s", (int)vl, v, PM__NAME_PREFIX,
                 k->name,
                 vl == 4 && memcmp(v, "none", 4) == 0 ? " (the shard was told no phase)" : "");
        return -1;
    }
    a->u = p;
    return 0;
}

static int where_value(const char *name, const char *v, size_t vl, pmt_attr *a, char *err,
                       size_t errlen)
{
    for (unsigned w = 0; pm__where_name(w); w++) {
        const char *s = pm__where_name(w);
        if (strlen(s) == vl && memcmp(s, v, vl) == 0) {
            a->u = w;
            return 0;
        }
    }
    pmt_errf(err, errlen, "%s=%.*s is neither %s nor %s", name, (int)vl, v, pm__where_name(0),
             pm__where_name(1));
    return -1;
}

int pmt_reqs_next(const char **p, const char *end, uint64_t *req, uint64_t *tokens)
{
    const char *s = *p;
    if (s >= end)
        return 0;
    const char *comma = memchr(s, ',', (size_t)(end - s));
    const char *e = comma ? comma : end;
    const char *colon = memchr(s, ':', (size_t)(e - s));
    if (!colon || pmt_parse_u64(s, (size_t)(colon - s), req) < 0 ||
        pmt_parse_u64(colon + 1, (size_t)(e - colon - 1), tokens) < 0 || *tokens > UINT32_MAX)
        return -1;
    if (comma && comma + 1 == end)
        return -1; /* a trailing comma */
    *p = comma ? comma + 1 : end;
    return 1;
}

/* R:T[,R:T]...: u counts the entries, last sums the tokens. */
static int reqs_value(const char *name, const char *v, size_t vl, pmt_attr *a, char *err,
                      size_t errlen)
{
    uint64_t ids[PM_BATCH_MAX];
    const char *p = v, *end = v + vl;
    uint64_t req, tokens;
    int rc;
    a->u = a->last = 0;
    while ((rc = pmt_reqs_next(&p, end, &req, &tokens)) > 0) {
        if (a->u == PM_BATCH_MAX) {
            pmt_errf(err, errlen, "%s= names more than %d requests", name, PM_BATCH_MAX);
            return -1;
        }
        for (uint64_t i = 0; i < a->u; i++) {
            if (ids[i] == req) {
                pmt_errf(err, errlen, "%s= names request %llu twice", name,
                         (unsigned long long)req);
                return -1;
            }
        }
        ids[a->u++] = req;
        a->last += tokens;
    }
    if (rc < 0) {
        pmt_errf(err, errlen, "%s=%.*s is not a list R:T,R:T of unsigned integers", name, (int)vl,
                 v);
        return -1;
    }
    return 0;
}

/* Checks the value of a known key by its type and stores it in out. */
static int typed_value(int kind, int key, const char *v, size_t vl, pmt_name *out, char *err,
                       size_t errlen)
{
    const pm__key_info *ki = pm__key_get((unsigned)key);
    pmt_attr *a = &out->attr[key];
    a->text = v;
    a->len = vl;
    switch (ki->type) {
    case PM__V_UINT:
        if (pmt_parse_u64(v, vl, &a->u) < 0) {
            pmt_errf(err, errlen, "%s=%.*s is not an unsigned integer", ki->name, (int)vl, v);
            return -1;
        }
        break;
    case PM__V_SPAN: {
        const char *dash = memchr(v, '-', vl);
        if (!dash || pmt_parse_u64(v, (size_t)(dash - v), &a->u) < 0 ||
            pmt_parse_u64(dash + 1, vl - (size_t)(dash - v) - 1, &a->last) < 0 ||
            a->u > a->last) {
            pmt_errf(err, errlen, "%s=%.*s is not a span A-B with A <= B", ki->name, (int)vl, v);
            return -1;
        }
        break;
    }
    case PM__V_WHERE:
        if (where_value(ki->name, v, vl, a, err, errlen) < 0)
            return -1;
        break;
    case PM__V_MODE:
        if (mode_value(info_of(kind), v, vl, a, err, errlen) < 0)
            return -1;
        memcpy(out->mode, v, vl < sizeof out->mode ? vl : sizeof out->mode - 1);
        break;
    case PM__V_TEXT:
        break;
    case PM__V_REQS:
        if (reqs_value(ki->name, v, vl, a, err, errlen) < 0)
            return -1;
        break;
    }
    out->has |= 1u << key;
    return 0;
}

/* Splits "key=value" at p (up to a space or the end) and checks it. */
static int attribute(int kind, const char *p, size_t len, const char *text,
                     pmt_name *out, char *err, size_t errlen)
{
    const char *eq = memchr(p, '=', len);
    size_t kl = eq ? (size_t)(eq - p) : 0;
    if (!len) {
        pmt_errf(err, errlen, "empty attribute (two spaces, or a trailing space)");
        return -1;
    }
    if (!eq || !kl || kl + 1 == len) {
        pmt_errf(err, errlen, "attribute '%.*s' is not key=value", (int)len, p);
        return -1;
    }
    for (size_t i = 0; i < kl; i++) {
        if (!is_key_char(p[i])) {
            pmt_errf(err, errlen, "attribute key '%.*s' has a character outside [a-z0-9_]",
                     (int)kl, p);
            return -1;
        }
    }
    /* A repeated key: search the text before this attribute. */
    for (const char *q = strchr(text, ' '); q && q + 1 < p; q = strchr(q + 1, ' ')) {
        if (strncmp(q + 1, p, kl) == 0 && q[1 + kl] == '=') {
            pmt_errf(err, errlen, "attribute '%.*s' repeated", (int)kl, p);
            return -1;
        }
    }
    int key = pm__key_find(p, kl);
    if (key < 0)
        return 0; /* not in the table: allowed, not kept */
    return typed_value(kind, key, eq + 1, len - kl - 1, out, err, errlen);
}

int pmt_name_parse(const char *text, pmt_name *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!pmt_name_is_ours(text))
        return 0;
    const char *k = text + PREFIX_LEN;
    size_t klen = strcspn(k, " ");
    int kind = pmt_kind_parse(k, klen);
    if (kind < 0) {
        pmt_errf(err, errlen, "unknown kind '%s%.*s'", PM__NAME_PREFIX, (int)klen, k);
        return -1;
    }
    out->kind = kind;
    const char *p = k + klen;
    while (*p == ' ') {
        p++;
        size_t len = strcspn(p, " ");
        if (attribute(kind, p, len, text, out, err, errlen) < 0)
            return -1;
        p += len;
    }
    const pm__kind_info *info = info_of(kind);
    if (info->modes && !PMT_HAS(out, MODE)) {
        pmt_errf(err, errlen, "%s%s without mode", PM__NAME_PREFIX, info->name);
        return -1;
    }
    if (PMT_HAS(out, REQ) && PMT_HAS(out, BATCH) && kind == PMT_K_LAYER_RANGE) {
        pmt_errf(err, errlen, "%s%s has both req and batch", PM__NAME_PREFIX, info->name);
        return -1;
    }
    return 0;
}
