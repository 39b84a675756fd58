/* test_readers.c — the readers of other profilers' files, over fixtures
 * written by hand from the published schemas (fixtures/rocpd.sql,
 * nsys.sql, torch_trace.json; each file's header gives the values). All
 * three hold the same shape, so the GPU projection must give the same
 * numbers on each: prefill 300 ns, layer range 100, decode 400; 1500 ns of
 * activity, 700 covered.
 * usage: test_readers CASE
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pm_check.h"
#include "pm_child.h"
#include "pmt.h"

#ifdef PMT_HAVE_SQLITE
#include <sqlite3.h>
#endif

#define FIX(name) PM_FIXTURES "/" name

static char g_db[64];

/* Builds a database from a fixture's SQL into g_db (a temp file). */
static int make_db(const char *sql_path)
{
#ifdef PMT_HAVE_SQLITE
    char *sql;
    size_t len;
    sqlite3 *db = NULL;
    snprintf(g_db, sizeof g_db, "/tmp/pm-readers.XXXXXX");
    int fd = mkstemp(g_db);
    if (fd < 0 || pmt_read_file(sql_path, 1 << 20, &sql, &len, NULL, 0) < 0)
        return -1;
    close(fd);
    unlink(g_db); /* sqlite creates it */
    int rc = sqlite3_open(g_db, &db) == SQLITE_OK && sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
    if (rc < 0)
        fprintf(stderr, "%s: %s\n", sql_path, sqlite3_errmsg(db));
    sqlite3_close(db);
    free(sql);
    return rc;
#else
    (void)sql_path;
    return -1;
#endif
}

static const pmt_range *find(const pmt_trace *t, const char *prefix)
{
    for (size_t i = 0; i < t->n; i++)
        if (strncmp(t->r[i].name, prefix, strlen(prefix)) == 0)
            return &t->r[i];
    return NULL;
}

/* The projection every fixture must give. */
static void check_projection(const pmt_trace *t, const pmt_gpu *g)
{
    pmt_projection p;
    REQUIRE(pmt_project(t, g, &p) == 0);
    CHECK_INT_EQ(p.nact, 4);
    CHECK_INT_EQ(p.nmatched, 4);
    CHECK_U64_EQ(p.total_ns, 1500);
    CHECK_U64_EQ(p.covered_ns, 700);
    CHECK_U64_EQ(p.uncovered_ns, 800);
    CHECK_U64_EQ(p.range_gpu_ns[find(t, "pm.prefill") - t->r], 300);
    CHECK_U64_EQ(p.range_gpu_ns[find(t, "pm.layer_range") - t->r], 100);
    CHECK_U64_EQ(p.range_gpu_ns[find(t, "pm.decode mode=decode req=1 pos=4") - t->r], 400);
    pmt_projection_free(&p);
}

static int case_rocpd(void)
{
#ifndef PMT_HAVE_SQLITE
    PM_SKIP("built without SQLite (libsqlite3-dev)");
#endif
    REQUIRE(make_db(FIX("rocpd.sql")) == 0);
    pmt_trace t;
    pmt_gpu g;
    char err[300] = "";
    int has_gpu = 0;
    pmt_trace_init(&t);
    pmt_gpu_init(&g);
    int rc = pmt_load_input(&t, &g, &has_gpu, g_db, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    REQUIRE(rc == 0);
    CHECK_INT_EQ(has_gpu, 1);
    REQUIRE(t.n == 3);
    CHECK_STR_EQ(t.r[0].name, "pm.prefill mode=exact req=1 pos=0 tokens=4");
    CHECK_STR_EQ(t.r[0].domain, "MARKER_CORE_API");
    CHECK_INT_EQ(t.r[0].pid, 10);
    CHECK_INT_EQ(t.r[0].tid, 11);
    CHECK_U64_EQ(t.r[0].start, 1000);
    CHECK_U64_EQ(t.r[0].end, 2000);
    CHECK_U64_EQ(t.r[2].corr, 3);
    CHECK_STR_EQ(pmt_trace_label_of(&t, 10, 11), "main");
    CHECK_INT_EQ(g.napi, 4);
    REQUIRE(g.nact == 4);
    CHECK_STR_EQ(g.act[0].name, "k_a");
    CHECK_STR_EQ(g.act[2].name, "_Z3k_cv"); /* no display name: the symbol */
    CHECK_INT_EQ(g.act[3].kind, PMT_ACT_COPY);
    CHECK_STR_EQ(g.act[3].name, "MEMORY_COPY_HOST_TO_DEVICE");
    CHECK_U64_EQ(g.act[3].corr, 11);
    CHECK_INT_EQ(pmt_check(&t, NULL, 0, NULL, NULL), 0);
    check_projection(&t, &g);
    pmt_gpu_free(&g);
    pmt_trace_free(&t);
    unlink(g_db);
    return pm_check_result();
}

static int case_nsys(void)
{
#ifndef PMT_HAVE_SQLITE
    PM_SKIP("built without SQLite (libsqlite3-dev)");
#endif
    REQUIRE(make_db(FIX("nsys.sql")) == 0);
    pmt_trace t;
    pmt_gpu g;
    char err[300] = "";
    int has_gpu = 0;
    pmt_trace_init(&t);
    pmt_gpu_init(&g);
    int rc = pmt_load_input(&t, &g, &has_gpu, g_db, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    REQUIRE(rc == 0);
    REQUIRE(t.n == 5);
    const pmt_range *layer = find(&t, "pm.layer_range");
    REQUIRE(layer);
    CHECK_STR_EQ(layer->domain, "phasemark"); /* textId and the domain's name */
    CHECK_INT_EQ(layer->pid, 10);
    CHECK_INT_EQ(layer->tid, 11);
    CHECK_STR_EQ(t.r[0].domain, "NVTX");
    const pmt_range *mark = find(&t, "tick");
    REQUIRE(mark);
    CHECK_INT_EQ(mark->flags, PMT_F_MARK);
    CHECK_INT_EQ(find(&t, "pm.decode mode=decode req=1 pos=5")->flags, PMT_F_OPEN);
    CHECK_INT_EQ(g.napi, 4);
    REQUIRE(g.nact == 4);
    CHECK_STR_EQ(g.act[0].name, "k_a(float*)");
    CHECK_INT_EQ(g.act[0].pid, 10);
    CHECK_INT_EQ(g.act[0].stream, 7);
    CHECK_STR_EQ(g.act[3].name, "MEMORY_COPY_HOST_TO_DEVICE");
    CHECK_INT_EQ(g.api[0].pid, 10);
    CHECK_INT_EQ(g.api[0].tid, 11);
    CHECK_INT_EQ(pmt_check(&t, NULL, 0, NULL, NULL), 1); /* the range never ended */
    check_projection(&t, &g);
    pmt_gpu_free(&g);
    pmt_trace_free(&t);
    unlink(g_db);
    return pm_check_result();
}

static int case_torch(void)
{
    pmt_trace t;
    pmt_gpu g;
    char err[300] = "";
    int has_gpu = 0;
    pmt_trace_init(&t);
    pmt_gpu_init(&g);
    int rc = pmt_load_input(&t, &g, &has_gpu, FIX("torch_trace.json"), err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    REQUIRE(rc == 0);
    REQUIRE(t.n == 3); /* cpu_op and gpu_user_annotation skipped */
    CHECK_STR_EQ(t.r[1].domain, "torch.user_annotation");
    CHECK_U64_EQ(t.r[1].start, 1100);
    CHECK_U64_EQ(t.r[1].end, 1900);
    CHECK_STR_EQ(pmt_trace_label_of(&t, 10, 0), "python3");
    CHECK_INT_EQ(g.napi, 4);
    REQUIRE(g.nact == 4);
    CHECK_INT_EQ(g.act[1].kind, PMT_ACT_COPY);
    CHECK_INT_EQ(g.act[1].stream, 7);
    CHECK_U64_EQ(g.act[2].corr, 12);
    check_projection(&t, &g);
    pmt_gpu_free(&g);
    pmt_trace_free(&t);
    /* Malformed: a bad correlation, a bad ts; not torch: our own JSON. */
    static const char *const bad[][2] = {
        {"{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"kernel\",\"ts\":1,\"dur\":1,\"args\":{\"correlation\":\"x\"}}]}",
         "t: event 0: args.correlation is not an unsigned integer"},
        {"{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"a\",\"ts\":-1,\"dur\":1}]}",
         "t: event 0: missing or bad ts/dur"},
        {"{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"kernel\",\"ts\":1}]}", "t: event 0: missing or bad ts/dur"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pmt_trace_init(&t);
        pmt_gpu_init(&g);
        err[0] = 0;
        CHECK_INT_EQ(pmt_torch_load_text(&t, &g, NULL, "t", bad[i][0], strlen(bad[i][0]), err, sizeof err), -1);
        CHECK_STR_EQ(err, bad[i][1]);
        pmt_gpu_free(&g);
        pmt_trace_free(&t);
    }
    static const char ours[] = "{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"MARKER_CORE_API\",\"name\":\"kernel\","
                               "\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":1}]}";
    pmt_trace_init(&t);
    CHECK_INT_EQ(pmt_torch_load_text(&t, NULL, NULL, "o", ours, strlen(ours), err, sizeof err), 1);
    CHECK_INT_EQ(t.n, 0);
    pmt_trace_free(&t);
    return pm_check_result();
}

/* A SQLite file of another schema is refused with a reason; so is a
 * corrupt one. */
static int case_sqlite_unknown(void)
{
#ifndef PMT_HAVE_SQLITE
    PM_SKIP("built without SQLite (libsqlite3-dev)");
#endif
    static const char text[] = "CREATE TABLE t (a INT); INSERT INTO t VALUES (1);";
    char tmp[] = "/tmp/pm-readers-sql.XXXXXX";
    int fd = mkstemp(tmp);
    REQUIRE(fd >= 0 && write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
    close(fd);
    REQUIRE(make_db(tmp) == 0);
    unlink(tmp);
    pmt_trace t;
    char err[400] = "";
    pmt_trace_init(&t);
    CHECK_INT_EQ(pmt_load_input(&t, NULL, NULL, g_db, err, sizeof err), -1);
    CHECK(strstr(err, ": a SQLite database that is neither rocprofv3's rocpd (rocpd_region) nor an "
                      "Nsight Systems export (NVTX_EVENTS)") != NULL);
    unlink(g_db);
    char head[100] = "SQLite format 3";
    CHECK_INT_EQ(pmt_sqlite_load_mem(&t, NULL, NULL, "junk", head, sizeof head, err, sizeof err), -1);
    CHECK(strncmp(err, "junk: ", 6) == 0);
    pmt_trace_free(&t);
    return pm_check_result();
}

/* The commands take the files directly. */
static int case_cli(void)
{
#ifndef PMT_HAVE_SQLITE
    PM_SKIP("built without SQLite (libsqlite3-dev)");
#endif
    static pm_child_result r;
    REQUIRE(make_db(FIX("rocpd.sql")) == 0);
    char *rep[] = {PM_TOOL, "report", g_db, NULL};
    REQUIRE(pm_child_exec(rep, NULL, 10000, &r) == 0);
    CHECK(pm_child_ok(&r));
    CHECK(strstr(r.out, "GPU: 4 activities, 0.002 ms; launch found for 4; outside every phase: "
                        "0.001 ms (53.3% of GPU time)") != NULL);
    char *chk[] = {PM_TOOL, "check", "--expect", "prefill=1,decode=1,layer_range=1", g_db, NULL};
    REQUIRE(pm_child_exec(chk, NULL, 10000, &r) == 0);
    CHECK(pm_child_ok(&r));
    unlink(g_db);
    char *torch[] = {PM_TOOL, "report", "--json", FIX("torch_trace.json"), NULL};
    REQUIRE(pm_child_exec(torch, NULL, 10000, &r) == 0);
    CHECK(pm_child_ok(&r));
    CHECK(strstr(r.out, "{\"group\":\"prefill\",\"count\":1,\"total_ns\":1000,") != NULL);
    CHECK(strstr(r.out, "\"gpu_total_ns\":1500,") != NULL);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {{"rocpd", case_rocpd}, {"nsys", case_nsys}, {"torch", case_torch},
                 {"sqlite_unknown", case_sqlite_unknown}, {"cli", case_cli}};
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: test_readers CASE\n");
    return 2;
}
