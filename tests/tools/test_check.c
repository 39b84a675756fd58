/* test_check.c — `check` on hand-made traces, each broken in one way,
 * with the exact violation line expected; the clean fixtures and the
 * rocprofv3 sample pass with exact counts.
 * usage: test_check CASE   (TOOL is compiled in for the CLI cases)
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pm_check.h"
#include "pm_child.h"
#include "pmt.h"

#define FIX(name) PM_FIXTURES "/" name

/* Runs pmt_check over the files; returns the violation count and the
 * printed lines in out. */
static size_t check_files(const char *const *paths, size_t n, const char *expect, char *out, size_t cap)
{
    pmt_trace t;
    pmt_expect ex[PMT_EXPECT_MAX];
    size_t nex = 0;
    char err[300];
    pmt_trace_init(&t);
    for (size_t i = 0; i < n; i++) {
        int rc = pmt_trace_load(&t, paths[i], err, sizeof err);
        if (rc < 0)
            fprintf(stderr, "%s\n", err);
        REQUIRE(rc == 0);
    }
    if (expect)
        REQUIRE(pmt_expect_parse(expect, ex, &nex, err, sizeof err) == 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    REQUIRE(f != NULL);
    size_t nv = pmt_check(&t, ex, nex, f, NULL);
    fclose(f);
    snprintf(out, cap, "%s", buf ? buf : "");
    free(buf);
    pmt_trace_free(&t);
    return nv;
}

static int expect_violation(const char *fixture, const char *line)
{
    char out[2048];
    const char *paths[] = {fixture};
    CHECK_INT_EQ(check_files(paths, 1, NULL, out, sizeof out), 1);
    CHECK_STR_EQ(out, line);
    return pm_check_result();
}

static int case_unbalanced_open(void)
{
    return expect_violation(FIX("unbalanced_open.csv"),
                            "violation: unbalanced: 'pm.decode mode=decode req=1 pos=4' is never closed "
                            "(pid 1 tid 1, " FIX("unbalanced_open.csv") ":2)\n");
}

static int case_unbalanced_orphan(void)
{
    return expect_violation(FIX("unbalanced_orphan.csv"),
                            "violation: unbalanced: a pop without a matching push "
                            "(pid 1 tid 1, " FIX("unbalanced_orphan.csv") ":3)\n");
}

static int case_overlap(void)
{
    return expect_violation(FIX("overlap.csv"),
                            "violation: partial overlap: 'pm.prefill mode=exact req=1 pos=0 tokens=4' and "
                            "'pm.decode mode=decode req=1 pos=4' overlap without nesting "
                            "(pid 1 tid 1, " FIX("overlap.csv") ":3)\n");
}

static int case_leaf_child(void)
{
    return expect_violation(FIX("leaf_child.csv"),
                            "violation: leaf 'pm.layer_range mode=exact layers=0-3 shard=0 where=local "
                            "backend=cpu req=1 tokens=4' encloses 'pm.layer_range mode=exact layers=0-0 "
                            "shard=0 where=local backend=cpu req=1 tokens=4' "
                            "(pid 1 tid 1, " FIX("leaf_child.csv") ":3)\n");
}

static int case_bad_name(void)
{
    return expect_violation(FIX("bad_name.csv"),
                            "violation: bad name 'pm.layer_range mode=none layers=0-3 shard=0': "
                            "mode=none is not a mode of pm.layer_range (the shard was told no phase) "
                            "(pid 1 tid 1, " FIX("bad_name.csv") ":2)\n");
}

static int case_order(void)
{
    return expect_violation(FIX("order.csv"),
                            "violation: ordering: 'pm.decode mode=decode req=1 pos=4' ends before it starts "
                            "(pid 1 tid 1, " FIX("order.csv") ":2)\n");
}

static int case_json_unbalanced(void)
{
    char out[2048];
    const char *paths[] = {FIX("unbalanced.json")};
    CHECK_INT_EQ(check_files(paths, 1, NULL, out, sizeof out), 2);
    CHECK_STR_EQ(out, "violation: unbalanced: 'pm.decode mode=decode req=1 pos=3' is never closed "
                      "(pid 5 tid 6, " FIX("unbalanced.json") ":0)\n"
                      "violation: unbalanced: a pop without a matching push "
                      "(pid 5 tid 7, " FIX("unbalanced.json") ":1)\n");
    return pm_check_result();
}

static int case_ok(void)
{
    char out[2048];
    const char *paths[] = {FIX("ok.csv")};
    CHECK_INT_EQ(check_files(paths, 1,
                             "prefill=1,decode=1,spec_decode=1,draft=1,layer_range=6,layer_range:exact=3,"
                             "layer_range:decode=1,layer_range:verify=2,other=0,prefill:exact=1",
                             out, sizeof out), 0);
    CHECK_STR_EQ(out, "");
    return pm_check_result();
}

static int case_expect_mismatch(void)
{
    char out[2048];
    const char *paths[] = {FIX("ok.csv")};
    CHECK_INT_EQ(check_files(paths, 1, "layer_range:exact=11,decode=1", out, sizeof out), 1);
    CHECK_STR_EQ(out, "violation: expected layer_range:exact=11, found 3\n");
    return pm_check_result();
}

static int case_guid_unsorted(void)
{
    char out[2048];
    const char *paths[] = {FIX("guid_unsorted.csv")};
    CHECK_INT_EQ(check_files(paths, 1, "prefill=1,decode=1,layer_range:exact=1", out, sizeof out), 0);
    CHECK_STR_EQ(out, "");
    return pm_check_result();
}

static int case_json_ok(void)
{
    char out[2048];
    const char *paths[] = {FIX("ok.json")};
    CHECK_INT_EQ(check_files(paths, 1, "prefill=1,layer_range:exact=1,decode=1,other=1", out, sizeof out), 0);
    CHECK_STR_EQ(out, "");
    pmt_trace t;
    pmt_trace_init(&t);
    REQUIRE(pmt_trace_load(&t, FIX("ok.json"), NULL, 0) == 0);
    REQUIRE(t.n == 4);
    CHECK_INT_EQ(t.r[0].start, 1000);
    CHECK_INT_EQ(t.r[0].end, 3500);
    CHECK_INT_EQ(t.r[1].start, 1200); /* the B/E pair */
    CHECK_INT_EQ(t.r[1].end, 3100);
    CHECK_INT_EQ(t.r[3].flags, PMT_F_MARK);
    CHECK_STR_EQ(pmt_trace_label_of(&t, 5, 0), "engine");
    CHECK_STR_EQ(pmt_trace_label_of(&t, 5, 6), "main");
    pmt_trace_free(&t);
    return pm_check_result();
}

/* Writing CSV and JSON and reading them back gives the same ranges. */
static int case_roundtrip(void)
{
    pmt_trace a, b, c;
    pmt_trace_init(&a), pmt_trace_init(&b), pmt_trace_init(&c);
    REQUIRE(pmt_trace_load(&a, FIX("ok.json"), NULL, 0) == 0);
    REQUIRE(pmt_trace_load(&a, FIX("unbalanced_orphan.csv"), NULL, 0) == 0);
    pmt_trace_sort(&a);
    char *csv = NULL, *json = NULL;
    size_t clen = 0, jlen = 0;
    FILE *f = open_memstream(&csv, &clen);
    REQUIRE(f && pmt_trace_write_csv(&a, f) == 0);
    fclose(f);
    f = open_memstream(&json, &jlen);
    REQUIRE(f && pmt_trace_write_json(&a, f) == 0);
    fclose(f);
    REQUIRE(pmt_trace_load_csv_text(&b, "b", csv, clen, NULL, 0) == 0);
    REQUIRE(pmt_trace_load_json_text(&c, "c", json, jlen, NULL, 0) == 0);
    REQUIRE(b.n == a.n && c.n == a.n);
    for (size_t i = 0; i < a.n; i++) {
        for (int k = 0; k < 2; k++) {
            const pmt_range *x = &a.r[i], *y = k ? &c.r[i] : &b.r[i];
            CHECK_STR_EQ(x->name, y->name);
            CHECK_STR_EQ(x->domain, y->domain);
            CHECK_INT_EQ(x->pid, y->pid);
            CHECK_INT_EQ(x->tid, y->tid);
            CHECK_INT_EQ(x->corr, y->corr);
            CHECK_INT_EQ(x->flags & ~(unsigned)PMT_F_MARK, y->flags & ~(unsigned)PMT_F_MARK);
            if (!(x->flags & PMT_F_ORPHAN))
                CHECK_INT_EQ(x->start, y->start);
            if (!(x->flags & PMT_F_OPEN))
                CHECK_INT_EQ(x->end, y->end);
        }
    }
    free(csv), free(json);
    pmt_trace_free(&a), pmt_trace_free(&b), pmt_trace_free(&c);
    return pm_check_result();
}

static int case_rocprof_marker(void)
{
    if (access(PM_SHARED "/formats/rocprofv3/marker_api_trace.csv", R_OK) != 0)
        PM_SKIP("../shared/formats/rocprofv3 is absent");
    pmt_trace t;
    pmt_trace_init(&t);
    REQUIRE(pmt_trace_load(&t, PM_SHARED "/formats/rocprofv3/marker_api_trace.csv", NULL, 0) == 0);
    REQUIRE(t.n == 5);
    /* Row 1 of the sample, field by field. */
    CHECK_STR_EQ(t.r[0].domain, "MARKER_CORE_API");
    CHECK_STR_EQ(t.r[0].name, "before hipLaunchKernel");
    CHECK_INT_EQ(t.r[0].pid, 717);
    CHECK_INT_EQ(t.r[0].tid, 717);
    CHECK_INT_EQ(t.r[0].corr, 1);
    CHECK_U64_EQ(t.r[0].start, 1520113899312225ull);
    CHECK_U64_EQ(t.r[0].end, 1520113899312225ull);
    CHECK_STR_EQ(t.r[3].name, "hipLaunchKernel");
    CHECK_U64_EQ(t.r[3].end, 1520113901491622ull);
    CHECK_STR_EQ(t.r[4].name, "hipLaunchKernel range"); /* a start/stop range: thread 0 */
    CHECK_INT_EQ(t.r[4].tid, 0);
    CHECK_INT_EQ(t.r[4].corr, 2);
    pmt_trace_free(&t);
    char out[2048];
    const char *paths[] = {PM_SHARED "/formats/rocprofv3/marker_api_trace.csv"};
    CHECK_INT_EQ(check_files(paths, 1, "other=5,prefill=0", out, sizeof out), 0);
    CHECK_STR_EQ(out, "");
    return pm_check_result();
}

static int run_tool(char **argv, pm_child_result *r)
{
    REQUIRE(pm_child_exec(argv, NULL, 10000, r) == 0);
    return r->exited ? r->exit_code : -1;
}

/* The command's exit codes and messages: 0 clean, 1 violation, 2 usage. */
static int case_cli(void)
{
    static pm_child_result r;
    char *ok[] = {PM_TOOL, "check", "--expect", "prefill=1", FIX("ok.csv"), NULL};
    CHECK_INT_EQ(run_tool(ok, &r), 0);
    CHECK(strstr(r.out, "ok: 10 ranges") != NULL);
    CHECK(strstr(r.out, "process 200: 2 ranges") != NULL);
    char *bad[] = {PM_TOOL, "check", FIX("overlap.csv"), NULL};
    CHECK_INT_EQ(run_tool(bad, &r), 1);
    CHECK(strstr(r.out, "violation: partial overlap") != NULL);
    CHECK(strstr(r.err, "phasemark check: 1 violation(s) in 2 ranges") != NULL);
    char *missing[] = {PM_TOOL, "check", FIX("no_such.csv"), NULL};
    CHECK_INT_EQ(run_tool(missing, &r), 1);
    CHECK(strstr(r.err, "phasemark check: ") == r.err);
    char *usage[] = {PM_TOOL, "check", NULL};
    CHECK_INT_EQ(run_tool(usage, &r), 2);
    char *badexp[] = {PM_TOOL, "check", "--expect", "nope=1", FIX("ok.csv"), NULL};
    CHECK_INT_EQ(run_tool(badexp, &r), 2);
    char *help[] = {PM_TOOL, "check", "-h", NULL};
    CHECK_INT_EQ(run_tool(help, &r), 0);
    CHECK(strstr(r.out, "usage: phasemark check") != NULL);
    char *top[] = {PM_TOOL, "-h", NULL};
    CHECK_INT_EQ(run_tool(top, &r), 0);
    char *unknown[] = {PM_TOOL, "frobnicate", NULL};
    CHECK_INT_EQ(run_tool(unknown, &r), 2);
    char *subhelp[][3] = {{PM_TOOL, "capture", "-h"}, {PM_TOOL, "report", "-h"}, {PM_TOOL, "perturb", "-h"}};
    for (int i = 0; i < 3; i++) {
        char *a[] = {subhelp[i][0], subhelp[i][1], subhelp[i][2], NULL};
        CHECK_INT_EQ(run_tool(a, &r), 0);
        CHECK(strstr(r.out, "usage: phasemark ") != NULL);
    }
    char *capbad[] = {PM_TOOL, "capture", "-o", NULL};
    CHECK_INT_EQ(run_tool(capbad, &r), 2);
    char *pbad[] = {PM_TOOL, "perturb", "--pairs", "0", "--", "true", NULL};
    CHECK_INT_EQ(run_tool(pbad, &r), 2);
    char *rbad[] = {PM_TOOL, "report", NULL};
    CHECK_INT_EQ(run_tool(rbad, &r), 2);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"unbalanced_open", case_unbalanced_open}, {"unbalanced_orphan", case_unbalanced_orphan},
        {"overlap", case_overlap}, {"leaf_child", case_leaf_child}, {"bad_name", case_bad_name},
        {"order", case_order}, {"json_unbalanced", case_json_unbalanced}, {"ok", case_ok},
        {"expect_mismatch", case_expect_mismatch}, {"guid_unsorted", case_guid_unsorted},
        {"json_ok", case_json_ok}, {"roundtrip", case_roundtrip},
        {"rocprof_marker", case_rocprof_marker}, {"cli", case_cli},
    };
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: test_check CASE\n");
    return 2;
}
