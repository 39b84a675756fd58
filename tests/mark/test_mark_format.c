/* test_mark_format.c — range text and the marker variable's parsing (case
 * f of docs/markers.md's tests), against strings written out by hand from the
 * grammar in mark.h. The formatter sources are compiled into this test
 * directly: they are internal to the library. */
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "pm_check.h"

static char buf[PM_RANGE_TEXT_MAX];

/* The formatter through its dispatch (mark.c calls the per-kind ones). */
static size_t fmt(pm__kind kind, pm__values v)
{
    return pm__format(kind, buf, sizeof buf, &v);
}

static size_t fmt_cap(pm__kind kind, size_t cap, pm__values v)
{
    return pm__format(kind, buf, cap, &v);
}

static pm__values layer(pm_phase mode, int64_t first, int64_t last, int64_t shard,
                        pm_where where, const char *backend, uint64_t req, uint64_t tokens)
{
    pm__values v = {.mode = mode, .layers = {first, last}, .shard = shard, .where = where,
                    .backend = backend, .req = req, .tokens = tokens,
                    .omit = 1u << PM__KEY_BATCH};
    return v;
}

/* An embedder's prefix replaces "pm" in every kind; the rest is unchanged. */
static void prefix(void)
{
    CHECK_INT_EQ(pm__set_prefix("ds4", 3), 0);
    fmt(PM__KIND_PREFILL, (pm__values){.req = 3, .pos = 0, .tokens = 11});
    CHECK_STR_EQ(buf, "ds4.prefill mode=exact req=3 pos=0 tokens=11");
    fmt(PM__KIND_SPEC_DECODE, (pm__values){.req = 3, .draft = 4});
    CHECK_STR_EQ(buf, "ds4.spec_decode mode=batched req=3 draft=4");
    fmt(PM__KIND_LAYER_RANGE, layer(PM_PHASE_VERIFY, 12, 23, 1, PM_WHERE_REMOTE, "cuda:0", 3, 5));
    CHECK_STR_EQ(buf, "ds4.layer_range mode=verify layers=12-23 shard=1 where=remote backend=cuda:0 req=3 tokens=5");
    /* Bad prefixes are refused and leave the one in force. */
    CHECK_INT_EQ(pm__set_prefix("DS4", 3), -1);
    CHECK_INT_EQ(pm__set_prefix("ds.4", 4), -1);
    CHECK_INT_EQ(pm__set_prefix("", 0), -1);
    CHECK_INT_EQ(pm__set_prefix("a234567890123456789012345678901", 31), 0);
    CHECK_INT_EQ(pm__set_prefix("a2345678901234567890123456789012", 32), -1);
    fmt(PM__KIND_DRAFT, (pm__values){.req = 1, .tokens = 2, .omit = 1u << PM__KEY_DRAFTER});
    CHECK_STR_EQ(buf, "a234567890123456789012345678901.draft req=1 tokens=2");
    /* The longest prefix with the longest kind: the head's whole room. */
    fmt(PM__KIND_LAYER_RANGE, layer(PM_PHASE_DECODE, 0, 1, 0, PM_WHERE_LOCAL, "cpu", 1, 1));
    CHECK_STR_EQ(buf, "a234567890123456789012345678901.layer_range mode=decode layers=0-1 shard=0 "
                      "where=local backend=cpu req=1 tokens=1");
    /* A 12-byte buffer: prefix and kind cut at the byte. */
    CHECK_INT_EQ(pm__set_prefix("ds4", 3), 0);
    CHECK_INT_EQ(fmt_cap(PM__KIND_PREFILL, 8, (pm__values){.req = 3}), 7);
    CHECK_STR_EQ(buf, "ds4.pre");
    /* Either side of the fixed-size head copy (PM__HEAD_CAP bytes): the
     * same text, ending where the attributes stop fitting. */
    const pm__values p = {.req = 3, .pos = 0, .tokens = 11};
    CHECK_INT_EQ(fmt_cap(PM__KIND_PREFILL, PM__HEAD_CAP, p), 44);
    CHECK_STR_EQ(buf, "ds4.prefill mode=exact req=3 pos=0 tokens=11");
    CHECK_INT_EQ(fmt_cap(PM__KIND_PREFILL, PM__HEAD_CAP - 1, p), 44);
    CHECK_STR_EQ(buf, "ds4.prefill mode=exact req=3 pos=0 tokens=11");
    CHECK_INT_EQ(fmt_cap(PM__KIND_PREFILL, 44, p), 34);
    CHECK_STR_EQ(buf, "ds4.prefill mode=exact req=3 pos=0");
    CHECK_INT_EQ(pm__set_prefix("pm", 2), 0);
    fmt(PM__KIND_DRAFT, (pm__values){.req = 1, .tokens = 2, .omit = 1u << PM__KEY_DRAFTER});
    CHECK_STR_EQ(buf, "pm.draft req=1 tokens=2");
}

/* A batched forward and its leaves. */
static void batch(void)
{
    static char big[PM_BATCH_TEXT_MAX];
    pm_batch_req r[3] = {{3, 11}, {7, 1}, {18446744073709551615u, 4294967295u}};
    pm__values v = {.mode = PM_PHASE_DECODE, .batch = 17, .tokens = 13, .reqs = r, .nreqs = 2};
    CHECK_INT_EQ(pm__format(PM__KIND_BATCH, big, sizeof big, &v), 53);
    CHECK_STR_EQ(big, "pm.batch mode=decode batch=17 tokens=13 reqs=3:11,7:1");
    v.nreqs = 3;
    v.mode = PM_PHASE_VERIFY;
    pm__format(PM__KIND_BATCH, big, sizeof big, &v);
    CHECK_STR_EQ(big, "pm.batch mode=verify batch=17 tokens=13 reqs=3:11,7:1,"
                      "18446744073709551615:4294967295");
    /* The list is whole or absent: one byte short drops it. */
    size_t full = strlen(big);
    CHECK_INT_EQ(pm__format(PM__KIND_BATCH, big, full, &v), 39);
    CHECK_STR_EQ(big, "pm.batch mode=verify batch=17 tokens=13");
    CHECK_INT_EQ(pm__format(PM__KIND_BATCH, big, full + 1, &v), (long long)full);
    /* A leaf of the batch: batch=B in place of req=R, at the end. */
    pm__values l = layer(PM_PHASE_DECODE, 0, 11, 0, PM_WHERE_LOCAL, "cpu", 99, 13);
    l.batch = 17;
    l.omit = 1u << PM__KEY_REQ;
    fmt(PM__KIND_LAYER_RANGE, l);
    CHECK_STR_EQ(buf, "pm.layer_range mode=decode layers=0-11 shard=0 where=local backend=cpu tokens=13 batch=17");
}

/* Names an embedder may give its variable. */
static void env_names(void)
{
    CHECK_INT_EQ(pm__env_name_valid("DFLASH_DS4_ROCTX"), 1);
    CHECK_INT_EQ(pm__env_name_valid("_x9"), 1);
    CHECK_INT_EQ(pm__env_name_valid("9X"), 0);
    CHECK_INT_EQ(pm__env_name_valid(""), 0);
    CHECK_INT_EQ(pm__env_name_valid("A-B"), 0);
    CHECK_INT_EQ(pm__env_name_valid("A=B"), 0);
    CHECK_INT_EQ(pm__env_name_valid("ABCDEFGHIJKLMNOPQRSTUVWXYZ01234"), 1);  /* 31 */
    CHECK_INT_EQ(pm__env_name_valid("ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"), 0); /* 32 */
}

static void kinds(void)
{
    CHECK_INT_EQ(fmt(PM__KIND_PREFILL, (pm__values){.req = 3, .pos = 0, .tokens = 11}), 43);
    CHECK_STR_EQ(buf, "pm.prefill mode=exact req=3 pos=0 tokens=11");
    fmt(PM__KIND_DECODE, (pm__values){.req = 3, .pos = 11});
    CHECK_STR_EQ(buf, "pm.decode mode=decode req=3 pos=11");
    fmt(PM__KIND_SPEC_DECODE, (pm__values){.req = 3, .draft = 4});
    CHECK_STR_EQ(buf, "pm.spec_decode mode=batched req=3 draft=4");
    /* A phase kind's mode is its phase, whatever v.mode holds. */
    fmt(PM__KIND_DECODE, (pm__values){.mode = PM_PHASE_VERIFY, .req = 3, .pos = 11});
    CHECK_STR_EQ(buf, "pm.decode mode=decode req=3 pos=11");
    fmt(PM__KIND_DRAFT, (pm__values){.req = 3, .tokens = 4, .omit = 1u << PM__KEY_DRAFTER});
    CHECK_STR_EQ(buf, "pm.draft req=3 tokens=4");
    fmt(PM__KIND_DRAFT, (pm__values){.req = 3, .tokens = 4, .drafter = "ngram"});
    CHECK_STR_EQ(buf, "pm.draft req=3 tokens=4 drafter=ngram");
    fmt(PM__KIND_LAYER_RANGE, layer(PM_PHASE_VERIFY, 12, 23, 1, PM_WHERE_REMOTE, "cuda:0", 3, 5));
    CHECK_STR_EQ(buf, "pm.layer_range mode=verify layers=12-23 shard=1 where=remote backend=cuda:0 req=3 tokens=5");
    fmt(PM__KIND_LAYER_RANGE, layer(PM_PHASE_NONE, 12, 23, 1, PM_WHERE_LOCAL, NULL, 3, 5));
    CHECK_STR_EQ(buf, "pm.layer_range mode=none layers=12-23 shard=1 where=local backend=unknown req=3 tokens=5");
    /* Not a kind: nothing is written. */
    CHECK_INT_EQ(fmt(PM__KIND_COUNT, (pm__values){.req = 3}), 0);
    CHECK_STR_EQ(buf, "");
}

static void extremes(void)
{
    fmt(PM__KIND_PREFILL, (pm__values){.req = UINT64_MAX, .pos = UINT32_MAX, .tokens = UINT32_MAX});
    CHECK_STR_EQ(buf, "pm.prefill mode=exact req=18446744073709551615 pos=4294967295 tokens=4294967295");
    fmt(PM__KIND_LAYER_RANGE,
        layer(PM_PHASE_EXACT, INT32_MIN, INT32_MAX, -1, PM_WHERE_LOCAL, "cpu", 0, 0));
    CHECK_STR_EQ(buf, "pm.layer_range mode=exact layers=-2147483648-2147483647 shard=-1 where=local backend=cpu req=0 tokens=0");
    fmt(PM__KIND_LAYER_RANGE, layer((pm_phase)9, 0, 1, 0, (pm_where)7, "cpu", 0, 0));
    CHECK_STR_EQ(buf, "pm.layer_range mode=invalid layers=0-1 shard=0 where=local backend=cpu req=0 tokens=0");
}

/* The cut: attributes are whole or absent, and nothing follows a dropped
 * one. Prefix below is 57 bytes; " backend=" adds 9, so a backend of
 * 127-57-9 = 61 bytes ends exactly at the 127-byte limit. */
static void truncation(void)
{
    static const char *prefix = "pm.layer_range mode=verify layers=0-1 shard=0 where=local";
    char backend[200] = "";
    pm__values a = layer(PM_PHASE_VERIFY, 0, 1, 0, PM_WHERE_LOCAL, backend, 5, 2);
    CHECK_INT_EQ(strlen(prefix), 57);

    memset(backend, 'b', 61);
    backend[61] = '\0';
    CHECK_INT_EQ(fmt(PM__KIND_LAYER_RANGE, a), 127);
    CHECK(strncmp(buf, prefix, 57) == 0);
    CHECK(strcmp(buf + 57 + 9 + 61, "") == 0); /* req dropped, not cut */
    CHECK(strncmp(buf + 57, " backend=bbb", 12) == 0);

    backend[61] = 'b';
    backend[62] = '\0';
    CHECK_INT_EQ(fmt(PM__KIND_LAYER_RANGE, a), 57);
    CHECK_STR_EQ(buf, prefix);

    /* Tiny buffers: the kind is cut at the byte, attributes never appear. */
    pm__values p = {.req = 3, .pos = 0, .tokens = 11};
    CHECK_INT_EQ(fmt_cap(PM__KIND_PREFILL, 11, p), 10);
    CHECK_STR_EQ(buf, "pm.prefill");
    CHECK_INT_EQ(fmt_cap(PM__KIND_PREFILL, 25, p), 21);
    CHECK_STR_EQ(buf, "pm.prefill mode=exact");
    CHECK_INT_EQ(fmt_cap(PM__KIND_PREFILL, 1, p), 0);
    CHECK_STR_EQ(buf, "");
    CHECK_INT_EQ(fmt_cap(PM__KIND_PREFILL, 0, p), 0);
}

static void modes(void)
{
    static const struct { const char *v; pm__mode m; } t[] = {
        {NULL, PM__MODE_OFF}, {"", PM__MODE_OFF}, {"0", PM__MODE_OFF},
        {"false", PM__MODE_OFF}, {"FALSE", PM__MODE_OFF}, {"No", PM__MODE_OFF},
        {"oFF", PM__MODE_OFF}, {"1", PM__MODE_AUTO}, {"true", PM__MODE_AUTO},
        {"YES", PM__MODE_AUTO}, {"on", PM__MODE_AUTO}, {"Auto", PM__MODE_AUTO},
        {"roctx", PM__MODE_ROCTX}, {"ROCTX", PM__MODE_ROCTX}, {"nvtx", PM__MODE_NVTX},
        {"NvTx", PM__MODE_NVTX}, {" 1", PM__MODE_INVALID}, {"1 ", PM__MODE_INVALID},
        {"2", PM__MODE_INVALID}, {"offf", PM__MODE_INVALID}, {"of", PM__MODE_INVALID},
        {"nvtx,roctx", PM__MODE_INVALID}, {"\xc3\xa9", PM__MODE_INVALID},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (pm__parse_mode(t[i].v) != t[i].m)
            PM_CHECK_FAIL_("PHASEMARK=%s%s%s: mode %d, want %d", t[i].v ? "\"" : "",
                           t[i].v ? t[i].v : "(unset)", t[i].v ? "\"" : "",
                           (int)pm__parse_mode(t[i].v), (int)t[i].m);
    }
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    if (!strcmp(c, "kinds"))
        kinds();
    else if (!strcmp(c, "extremes"))
        extremes();
    else if (!strcmp(c, "truncation"))
        truncation();
    else if (!strcmp(c, "modes"))
        modes();
    else if (!strcmp(c, "prefix"))
        prefix();
    else if (!strcmp(c, "batch"))
        batch();
    else if (!strcmp(c, "env_names"))
        env_names();
    else {
        fprintf(stderr, "usage: test_mark_format kinds|extremes|truncation|modes|prefix|batch|env_names\n");
        return 2;
    }
    return pm_check_result();
}
