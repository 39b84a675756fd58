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

/* ---- phase rules, over traces written here ---- */

#define HDR "\"Domain\",\"Function\",\"Process_Id\",\"Thread_Id\",\"Correlation_Id\"," \
            "\"Start_Timestamp\",\"End_Timestamp\"\n"
#define ROW(name, pid, tid, start, end) \
    "\"MARKER_CORE_API\",\"" name "\"," #pid "," #tid ",0," #start "," #end "\n"

/* Checks CSV text (file name "t.csv"); returns the violations, lines in out. */
static size_t check_text(const char *text, const char *expect, char *out, size_t cap)
{
    pmt_trace t;
    pmt_expect ex[PMT_EXPECT_MAX];
    size_t nex = 0;
    char err[300];
    pmt_trace_init(&t);
    int rc = pmt_trace_load_csv_text(&t, "t.csv", text, strlen(text), err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "%s\n", err);
    REQUIRE(rc == 0);
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

#define LR(mode, id) "pm.layer_range mode=" mode " layers=0-3 shard=1 where=remote backend=cpu " id

/* An engine (pid 1) and a shard daemon (pid 2): every leaf is inside its
 * phase by request (or batch) and time, across the processes. */
static const char phase_ok[] =
    HDR ROW("pm.prefill mode=exact req=3 pos=0 tokens=5", 1, 1, 100, 1000)
    ROW(LR("exact", "req=3 tokens=5"), 2, 9, 200, 800)
    ROW("pm.decode mode=decode req=3 pos=5", 1, 1, 1100, 1500)
    ROW(LR("decode", "req=3 tokens=1"), 2, 9, 1200, 1400)
    ROW("pm.spec_decode mode=batched req=3 draft=2", 1, 1, 1600, 2500)
    ROW("pm.draft req=3 tokens=2", 1, 1, 1610, 1650)
    ROW(LR("verify", "req=3 tokens=3"), 2, 9, 1700, 2400)
    ROW("pm.batch mode=decode batch=17 tokens=3 reqs=3:1,7:2", 1, 1, 3000, 3500)
    ROW(LR("decode", "tokens=3 batch=17"), 2, 9, 3100, 3400);

static int case_phase_ok(void)
{
    char out[4096];
    CHECK_INT_EQ(check_text(phase_ok, "prefill=1,decode=1,spec_decode=1,draft=1,batch:decode=1,"
                                      "layer_range:exact=1,layer_range:decode=2,layer_range:verify=1",
                            out, sizeof out), 0);
    CHECK_STR_EQ(out, "");
    return pm_check_result();
}

/* The same rows in reverse order (children first, the latest first):
 * check orders them itself. Without sorting, the nesting walk would see
 * leaves before their phases. */
static int case_unsorted(void)
{
    const char *rows[16];
    size_t n = 0;
    char copy[sizeof phase_ok], text[sizeof phase_ok + 8] = "";
    memcpy(copy, phase_ok, sizeof phase_ok);
    char *body = strchr(copy, '\n') + 1;
    for (char *line = strtok(body, "\n"); line && n < 16; line = strtok(NULL, "\n"))
        rows[n++] = line;
    strcat(text, HDR);
    while (n--) {
        strcat(text, rows[n]);
        strcat(text, "\n");
    }
    char out[4096];
    CHECK_INT_EQ(check_text(text, "prefill=1,decode=1,spec_decode=1,draft=1,batch=1,layer_range=4",
                            out, sizeof out), 0);
    CHECK_STR_EQ(out, "");
    /* And a partial overlap hidden by the order is still found. */
    static const char overlap[] = HDR ROW("pm.decode mode=decode req=1 pos=9", 1, 1, 150, 300)
        ROW("pm.prefill mode=exact req=1 pos=0 tokens=4", 1, 1, 100, 200);
    CHECK_INT_EQ(check_text(overlap, NULL, out, sizeof out), 1);
    CHECK_STR_EQ(out, "violation: partial overlap: 'pm.prefill mode=exact req=1 pos=0 tokens=4' and "
                      "'pm.decode mode=decode req=1 pos=9' overlap without nesting (pid 1 tid 1, t.csv:2)\n");
    return pm_check_result();
}

static int case_phase_verify_outside(void)
{
    static const char t[] = HDR ROW("pm.decode mode=decode req=3 pos=5", 1, 1, 100, 500)
        ROW(LR("verify", "req=3 tokens=3"), 1, 1, 200, 300);
    char out[2048];
    CHECK_INT_EQ(check_text(t, NULL, out, sizeof out), 1);
    CHECK_STR_EQ(out, "violation: phase: verify leaf '" LR("verify", "req=3 tokens=3") "' is not "
                      "inside a pm.spec_decode of req=3 (pid 1 tid 1, t.csv:3)\n");
    return pm_check_result();
}

/* Across processes the match is by time: a daemon's exact span after the
 * prefill ended is outside it. */
static int case_phase_exact_late(void)
{
    static const char t[] = HDR ROW("pm.prefill mode=exact req=3 pos=0 tokens=5", 1, 1, 100, 500)
        ROW(LR("exact", "req=3 tokens=5"), 2, 9, 400, 600)
        ROW(LR("exact", "req=4 tokens=5"), 2, 9, 200, 300);
    char out[2048];
    CHECK_INT_EQ(check_text(t, NULL, out, sizeof out), 2);
    CHECK_STR_EQ(out, "violation: phase: exact leaf '" LR("exact", "req=3 tokens=5") "' is not "
                      "inside a pm.prefill of req=3 (pid 2 tid 9, t.csv:3)\n"
                      "violation: phase: exact leaf '" LR("exact", "req=4 tokens=5") "' is not "
                      "inside a pm.prefill of req=4 (pid 2 tid 9, t.csv:4)\n");
    return pm_check_result();
}

static int case_phase_req_mismatch(void)
{
    static const char t[] = HDR ROW("pm.decode mode=decode req=3 pos=5", 1, 1, 100, 500)
        ROW(LR("decode", "req=4 tokens=1"), 1, 1, 200, 300);
    char out[2048];
    CHECK_INT_EQ(check_text(t, NULL, out, sizeof out), 1);
    CHECK_STR_EQ(out, "violation: phase: '" LR("decode", "req=4 tokens=1") "' has req=4 but its "
                      "pm.decode has req=3 (pid 1 tid 1, t.csv:3)\n");
    return pm_check_result();
}

static int case_phase_batch(void)
{
    static const char t[] = HDR ROW("pm.batch mode=decode batch=5 tokens=3 reqs=1:1,2:1", 1, 1, 100, 500)
        ROW(LR("decode", "tokens=3 batch=6"), 2, 9, 200, 300)
        ROW(LR("exact", "tokens=3 batch=5"), 2, 9, 310, 320)
        ROW(LR("decode", "tokens=2 batch=5"), 2, 9, 330, 340)
        ROW(LR("decode", "tokens=3"), 2, 9, 350, 360)
        ROW(LR("decode", "req=1 tokens=3 batch=5"), 2, 9, 370, 380);
    char out[4096];
    CHECK_INT_EQ(check_text(t, NULL, out, sizeof out), 6);
    CHECK_STR_EQ(out,
        "violation: bad name '" LR("decode", "req=1 tokens=3 batch=5") "': pm.layer_range has both "
        "req and batch (pid 2 tid 9, t.csv:7)\n"
        "violation: phase: 'pm.batch mode=decode batch=5 tokens=3 reqs=1:1,2:1' has tokens=3 but its "
        "reqs add up to 2 (pid 1 tid 1, t.csv:2)\n"
        "violation: phase: '" LR("decode", "tokens=3 batch=6") "' is not inside pm.batch batch=6 "
        "(pid 2 tid 9, t.csv:3)\n"
        "violation: phase: '" LR("exact", "tokens=3 batch=5") "' has mode=exact but its batch has "
        "mode=decode (pid 2 tid 9, t.csv:4)\n"
        "violation: phase: '" LR("decode", "tokens=2 batch=5") "' has tokens=2 but its batch has "
        "tokens=3 (pid 2 tid 9, t.csv:5)\n"
        "violation: phase: '" LR("decode", "tokens=3") "' names neither req nor batch "
        "(pid 2 tid 9, t.csv:6)\n");
    return pm_check_result();
}

/* The reqs= grammar: malformed lists are named. */
static int case_batch_grammar(void)
{
    static const char *const bad[][2] = {
        {"pm.batch mode=decode batch=1 tokens=2 reqs=1:1,1:1", "reqs= names request 1 twice"},
        {"pm.batch mode=decode batch=1 tokens=2 reqs=1:1,", "reqs=1:1, is not a list R:T,R:T of unsigned integers"},
        {"pm.batch mode=decode batch=1 tokens=2 reqs=1", "reqs=1 is not a list R:T,R:T of unsigned integers"},
        {"pm.batch mode=decode batch=1 tokens=2 reqs=1:x", "reqs=1:x is not a list R:T,R:T of unsigned integers"},
        {"pm.batch mode=decode batch=1 tokens=2 reqs=1:4294967296", "reqs=1:4294967296 is not a list R:T,R:T of unsigned integers"},
        {"pm.batch mode=batched batch=1", "mode=batched is not a mode of pm.batch"},
        {"pm.batch batch=1", "pm.batch without mode"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pmt_name nm;
        char err[200] = "";
        CHECK_INT_EQ(pmt_name_parse(bad[i][0], &nm, err, sizeof err), -1);
        CHECK_STR_EQ(err, bad[i][1]);
    }
    char big[1200] = "pm.batch mode=exact batch=1 tokens=65 reqs=";
    for (int i = 0; i < 65; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "%s%d:1", i ? "," : "", i);
    pmt_name nm;
    char err[200] = "";
    CHECK_INT_EQ(pmt_name_parse(big, &nm, err, sizeof err), -1);
    CHECK_STR_EQ(err, "reqs= names more than 64 requests");
    CHECK_INT_EQ(pmt_name_parse("pm.batch mode=verify batch=9 tokens=5 reqs=4:2,8:3", &nm, err, sizeof err), 0);
    CHECK_U64_EQ(nm.attr[PM__KEY_REQS].u, 2);
    CHECK_U64_EQ(nm.attr[PM__KEY_REQS].last, 5);
    return pm_check_result();
}

/* An embedder's prefix: found in the trace, or named; never both kinds. */
static int case_prefix(void)
{
    static const char t[] = HDR ROW("ds4.prefill mode=exact req=3 pos=0 tokens=5", 1, 1, 100, 1000)
        ROW("ds4.layer_range mode=exact layers=0-3 shard=0 where=local backend=cpu req=3 tokens=5",
            1, 1, 200, 800)
        ROW("ds4.layer_range mode=verify layers=0-3 shard=0 where=local backend=cpu req=3 tokens=5",
            1, 1, 850, 900)
        ROW("hipMemcpy", 1, 1, 920, 950);
    pmt_trace tr;
    char err[300], found[64], out[2048];
    pmt_trace_init(&tr);
    REQUIRE(pmt_trace_load_csv_text(&tr, "t.csv", t, strlen(t), err, sizeof err) == 0);
    CHECK_INT_EQ(pmt_detect_prefix(&tr, found, sizeof found), 1);
    CHECK_STR_EQ(found, "ds4");
    pmt_trace_free(&tr);
    CHECK_INT_EQ(pmt_set_prefix("ds4"), 0);
    CHECK_INT_EQ(check_text(t, "prefill=1,layer_range:exact=1,other=1", out, sizeof out), 1);
    CHECK_STR_EQ(out, "violation: phase: verify leaf 'ds4.layer_range mode=verify layers=0-3 shard=0 "
                      "where=local backend=cpu req=3 tokens=5' is not inside a ds4.spec_decode of "
                      "req=3 (pid 1 tid 1, t.csv:4)\n");
    CHECK_INT_EQ(pmt_set_prefix("Ds4"), -1);
    CHECK_INT_EQ(pmt_set_prefix("pm."), 0);
    CHECK_INT_EQ(check_text(t, "other=4", out, sizeof out), 0);
    static const char mixed[] = HDR ROW("ds4.decode mode=decode req=3 pos=0", 1, 1, 1, 2)
        ROW("pm.decode mode=decode req=3 pos=0", 1, 1, 3, 4)
        ROW("torch.nn.Linear", 1, 1, 5, 6);
    pmt_trace_init(&tr);
    REQUIRE(pmt_trace_load_csv_text(&tr, "m.csv", mixed, strlen(mixed), err, sizeof err) == 0);
    CHECK_INT_EQ(pmt_detect_prefix(&tr, found, sizeof found), 2);
    CHECK_STR_EQ(found, "ds4,pm");
    pmt_trace_free(&tr);
    return pm_check_result();
}

/* Time per request: batch 17 (500 ns, reqs 3:1,7:2) gives 3 floor(500/3)
 * = 166 + 1 remainder ns and 7 333; request 3's own ranges add theirs. */
static int case_request_shares(void)
{
    pmt_trace t;
    char err[300];
    pmt_trace_init(&t);
    REQUIRE(pmt_trace_load_csv_text(&t, "t.csv", phase_ok, strlen(phase_ok), err, sizeof err) == 0);
    pmt_projection p;
    memset(&p, 0, sizeof p);
    uint64_t gpu[16] = {0};
    REQUIRE(t.n <= 16);
    for (size_t i = 0; i < t.n; i++)
        if (strstr(t.r[i].name, "pm.batch"))
            gpu[i] = 1001; /* shared 1:2 -> 333+1 and 667 */
    p.range_gpu_ns = gpu;
    pmt_req_share *s = NULL;
    size_t n = 0;
    REQUIRE(pmt_request_shares(&t, &p, &s, &n) == 0);
    REQUIRE(n == 2);
    CHECK_U64_EQ(s[0].req, 3);
    CHECK_U64_EQ(s[0].ns, 900 + 400 + 900 + 167);
    CHECK_U64_EQ(s[0].gpu_ns, 334);
    CHECK_U64_EQ(s[0].tokens, 5 + 1 + 1);
    CHECK_U64_EQ(s[0].ranges, 4);
    CHECK_U64_EQ(s[1].req, 7);
    CHECK_U64_EQ(s[1].ns, 333);
    CHECK_U64_EQ(s[1].gpu_ns, 667);
    CHECK_U64_EQ(s[1].tokens, 2);
    CHECK_U64_EQ(s[1].ranges, 1);
    free(s);
    pmt_trace_free(&t);
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
        {"phase_ok", case_phase_ok}, {"unsorted", case_unsorted},
        {"phase_verify_outside", case_phase_verify_outside},
        {"phase_exact_late", case_phase_exact_late}, {"phase_req_mismatch", case_phase_req_mismatch},
        {"phase_batch", case_phase_batch}, {"batch_grammar", case_batch_grammar},
        {"prefix", case_prefix}, {"request_shares", case_request_shares},
    };
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: test_check CASE\n");
    return 2;
}
