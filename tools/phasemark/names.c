/* names.c — the range-name grammar (DESIGN.md §2, mark.h):
 *
 *   "pm." kind { " " key "=" value }
 *
 * kind is prefill, decode, spec_decode, draft or layer_range. Keys are
 * lowercase letters, digits and '_'; values are non-empty and contain no
 * space; a key appears once. Known keys are typed (req, pos, tokens, draft,
 * shard: unsigned decimal; layers: A-B with A <= B; where: local|remote).
 * mode is required where the kind has one and must match it: prefill exact,
 * decode decode, spec_decode batched, layer_range exact|decode|verify
 * (never none: a shard must be told its phase); draft has no mode. Other
 * keys are allowed, so the grammar can grow. Names that do not start with
 * "pm." are other tools' ranges and always valid.
 */
#include <string.h>

#include "pmt.h"

static const char *const g_kinds[PMT_K_COUNT] = {
    "other", "prefill", "decode", "spec_decode", "draft", "layer_range"};

const char *pmt_kind_name(int kind)
{
    return kind >= 0 && kind < PMT_K_COUNT ? g_kinds[kind] : "invalid";
}

int pmt_kind_parse(const char *s, size_t len)
{
    for (int k = PMT_K_PREFILL; k < PMT_K_COUNT; k++)
        if (strlen(g_kinds[k]) == len && memcmp(g_kinds[k], s, len) == 0)
            return k;
    return -1;
}

int pmt_kind_is_leaf(int kind)
{
    return kind == PMT_K_DRAFT || kind == PMT_K_LAYER_RANGE;
}

static int mode_ok(int kind, const char *v, size_t len)
{
    static const char *const allowed[PMT_K_COUNT] = {
        NULL, "exact", "decode", "batched", NULL, "exact decode verify"};
    const char *list = allowed[kind];
    while (list && *list) {
        size_t n = strcspn(list, " ");
        if (n == len && memcmp(list, v, len) == 0)
            return 1;
        list += n + (list[n] == ' ');
    }
    return 0;
}

static int is_key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

#define KEYIS(k, klen, lit) ((klen) == sizeof(lit) - 1 && memcmp((k), (lit), (klen)) == 0)

/* Checks one typed value and stores it in out. */
static int typed_value(int kind, const char *k, size_t kl, const char *v, size_t vl,
                       pmt_name *out, char *err, size_t errlen)
{
    uint64_t x;
    if (KEYIS(k, kl, "req") || KEYIS(k, kl, "pos") || KEYIS(k, kl, "tokens") ||
        KEYIS(k, kl, "draft") || KEYIS(k, kl, "shard")) {
        if (pmt_parse_u64(v, vl, &x) < 0) {
            pmt_errf(err, errlen, "%.*s=%.*s is not an unsigned integer", (int)kl, k, (int)vl, v);
            return -1;
        }
        if (KEYIS(k, kl, "req"))
            out->has_req = 1, out->req = x;
        if (KEYIS(k, kl, "shard"))
            out->has_shard = 1, out->shard = x;
    } else if (KEYIS(k, kl, "layers")) {
        const char *dash = memchr(v, '-', vl);
        uint64_t a, b;
        if (!dash || pmt_parse_u64(v, (size_t)(dash - v), &a) < 0 ||
            pmt_parse_u64(dash + 1, vl - (size_t)(dash - v) - 1, &b) < 0 || a > b) {
            pmt_errf(err, errlen, "layers=%.*s is not a span A-B with A <= B", (int)vl, v);
            return -1;
        }
        out->has_layers = 1, out->first_layer = a, out->last_layer = b;
    } else if (KEYIS(k, kl, "where")) {
        if (!(vl == 5 && memcmp(v, "local", 5) == 0) && !(vl == 6 && memcmp(v, "remote", 6) == 0)) {
            pmt_errf(err, errlen, "where=%.*s is neither local nor remote", (int)vl, v);
            return -1;
        }
    } else if (KEYIS(k, kl, "mode")) {
        if (kind == PMT_K_DRAFT) {
            pmt_errf(err, errlen, "pm.draft takes no mode");
            return -1;
        }
        if (!mode_ok(kind, v, vl)) {
            pmt_errf(err, errlen, "mode=%.*s is not a mode of pm.%s%s", (int)vl, v,
                     pmt_kind_name(kind),
                     vl == 4 && memcmp(v, "none", 4) == 0 ? " (the shard was told no phase)" : "");
            return -1;
        }
        memcpy(out->mode, v, vl < sizeof out->mode ? vl : sizeof out->mode - 1);
    }
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
    return typed_value(kind, p, kl, eq + 1, len - kl - 1, out, err, errlen);
}

int pmt_name_parse(const char *text, pmt_name *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (strncmp(text, "pm.", 3) != 0)
        return 0;
    const char *k = text + 3;
    size_t klen = strcspn(k, " ");
    int kind = pmt_kind_parse(k, klen);
    if (kind < 0) {
        pmt_errf(err, errlen, "unknown kind 'pm.%.*s'", (int)klen, k);
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
    if (!out->mode[0] && kind != PMT_K_DRAFT) {
        pmt_errf(err, errlen, "pm.%s without mode", pmt_kind_name(kind));
        return -1;
    }
    return 0;
}
