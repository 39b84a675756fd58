/* test_mark_format.c — range text and PHASEMARK parsing (issue 2, case f
 * and DESIGN.md §1.1–1.2), against strings written out by hand from the
 * grammar in mark.h. The formatter sources are compiled into this test
 * directly: they are internal to the library. */
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "pm_check.h"

static char buf[PM_RANGE_TEXT_MAX];

static void kinds(void)
{
    CHECK_INT_EQ(pm__format_prefill(buf, sizeof buf, 3, 0, 11), 43);
    CHECK_STR_EQ(buf, "pm.prefill mode=exact req=3 pos=0 tokens=11");
    pm__format_decode(buf, sizeof buf, 3, 11);
    CHECK_STR_EQ(buf, "pm.decode mode=decode req=3 pos=11");
    pm__format_spec_decode(buf, sizeof buf, 3, 4);
    CHECK_STR_EQ(buf, "pm.spec_decode mode=batched req=3 draft=4");
    pm__format_draft(buf, sizeof buf, 3, 4);
    CHECK_STR_EQ(buf, "pm.draft req=3 tokens=4");
    pm_layer_attr a = PM_LAYER_ATTR_INIT;
    a.first_layer = 12;
    a.last_layer = 23;
    a.shard = 1;
    a.where = PM_WHERE_REMOTE;
    a.backend = "cuda:0";
    a.req = 3;
    a.tokens = 5;
    pm__format_layer_range(buf, sizeof buf, &a, PM_PHASE_VERIFY);
    CHECK_STR_EQ(buf, "pm.layer_range mode=verify layers=12-23 shard=1 where=remote backend=cuda:0 req=3 tokens=5");
    a.backend = NULL;
    a.where = PM_WHERE_LOCAL;
    pm__format_layer_range(buf, sizeof buf, &a, PM_PHASE_NONE);
    CHECK_STR_EQ(buf, "pm.layer_range mode=none layers=12-23 shard=1 where=local backend=unknown req=3 tokens=5");
}

static void extremes(void)
{
    pm__format_prefill(buf, sizeof buf, UINT64_MAX, UINT32_MAX, UINT32_MAX);
    CHECK_STR_EQ(buf, "pm.prefill mode=exact req=18446744073709551615 pos=4294967295 tokens=4294967295");
    pm_layer_attr a = PM_LAYER_ATTR_INIT;
    a.first_layer = INT32_MIN;
    a.last_layer = INT32_MAX;
    a.shard = -1;
    a.backend = "cpu";
    pm__format_layer_range(buf, sizeof buf, &a, PM_PHASE_EXACT);
    CHECK_STR_EQ(buf, "pm.layer_range mode=exact layers=-2147483648-2147483647 shard=-1 where=local backend=cpu req=0 tokens=0");
    pm__format_layer_range(buf, sizeof buf, &a, (pm_phase)9);
    CHECK(strncmp(buf, "pm.layer_range mode=invalid ", 28) == 0);
}

/* The cut: attributes are whole or absent, and nothing follows a dropped
 * one. Prefix below is 57 bytes; " backend=" adds 9, so a backend of
 * 127-57-9 = 61 bytes ends exactly at the 127-byte limit. */
static void truncation(void)
{
    static const char *prefix = "pm.layer_range mode=verify layers=0-1 shard=0 where=local";
    char backend[200];
    pm_layer_attr a = PM_LAYER_ATTR_INIT;
    a.last_layer = 1;
    a.req = 5;
    a.tokens = 2;
    a.backend = backend;
    CHECK_INT_EQ(strlen(prefix), 57);

    memset(backend, 'b', 61);
    backend[61] = '\0';
    CHECK_INT_EQ(pm__format_layer_range(buf, sizeof buf, &a, PM_PHASE_VERIFY), 127);
    CHECK(strncmp(buf, prefix, 57) == 0);
    CHECK(strcmp(buf + 57 + 9 + 61, "") == 0); /* req dropped, not cut */
    CHECK(strncmp(buf + 57, " backend=bbb", 12) == 0);

    backend[61] = 'b';
    backend[62] = '\0';
    CHECK_INT_EQ(pm__format_layer_range(buf, sizeof buf, &a, PM_PHASE_VERIFY), 57);
    CHECK_STR_EQ(buf, prefix);

    /* Tiny buffers: the kind is cut at the byte, attributes never appear. */
    CHECK_INT_EQ(pm__format_prefill(buf, 11, 3, 0, 11), 10);
    CHECK_STR_EQ(buf, "pm.prefill");
    CHECK_INT_EQ(pm__format_prefill(buf, 25, 3, 0, 11), 21);
    CHECK_STR_EQ(buf, "pm.prefill mode=exact");
    CHECK_INT_EQ(pm__format_prefill(buf, 1, 3, 0, 11), 0);
    CHECK_STR_EQ(buf, "");
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
    else {
        fprintf(stderr, "usage: test_mark_format kinds|extremes|truncation|modes\n");
        return 2;
    }
    return pm_check_result();
}
