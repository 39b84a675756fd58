/* test_report.c — the report table, GPU projection over a constructed
 * kernel + API trace (totals worked out by hand in the fixtures' design),
 * the rocprofv3 kernel/API/copy samples, and the SVG timeline.
 * usage: test_report CASE
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pm_check.h"
#include "pm_child.h"
#include "pmt.h"

#define FIX(name) PM_FIXTURES "/" name
#define ROC PM_SHARED "/formats/rocprofv3/"

static const pmt_range *find(const pmt_trace *t, const char *prefix)
{
    for (size_t i = 0; i < t->n; i++)
        if (strncmp(t->r[i].name, prefix, strlen(prefix)) == 0)
            return &t->r[i];
    return NULL;
}

/* Kernels and copies launched inside prefill/layer_range/decode, outside
 * any range, on another thread, and with no launch record:
 *   corr 1 k_a 100 ns at 1200 (prefill > layer_range), corr 2 copy 200 ns
 *   at 1950 (prefill only), corr 3 k_b 400 ns at 3500 (decode), corr 4 k_c
 *   800 ns at 5000 (no range), corr 5 k_d 1600 ns on thread 12 (no range
 *   there), corr 6 k_e 3200 ns (no launch record). */
static int case_projection(void)
{
    pmt_trace t;
    pmt_gpu g;
    pmt_projection p;
    char err[300];
    pmt_trace_init(&t);
    pmt_gpu_init(&g);
    REQUIRE(pmt_trace_load(&t, FIX("proj_markers.csv"), err, sizeof err) == 0);
    REQUIRE(pmt_gpu_load(&g, FIX("proj_kernels.csv"), err, sizeof err) == 0);
    REQUIRE(pmt_gpu_load(&g, FIX("proj_copies.csv"), err, sizeof err) == 0);
    REQUIRE(pmt_gpu_load(&g, FIX("proj_api.csv"), err, sizeof err) == 0);
    CHECK_INT_EQ(g.nact, 6);
    CHECK_INT_EQ(g.napi, 5);
    REQUIRE(pmt_project(&t, &g, &p) == 0);
    CHECK_INT_EQ(p.total_ns, 6300);
    CHECK_INT_EQ(p.matched_ns, 3100);
    CHECK_INT_EQ(p.nmatched, 5);
    CHECK_INT_EQ(p.covered_ns, 700);
    CHECK_INT_EQ(p.ncovered, 3);
    CHECK_INT_EQ(p.uncovered_ns, 5600);
    CHECK_INT_EQ(p.range_gpu_ns[find(&t, "pm.prefill") - t.r], 300);
    CHECK_INT_EQ(p.range_gpu_ns[find(&t, "pm.layer_range") - t.r], 100);
    CHECK_INT_EQ(p.range_gpu_ns[find(&t, "pm.decode") - t.r], 400);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    pmt_report_opts o = {.json = 1};
    REQUIRE(f && pmt_report(&t, &p, &o, f) == 0);
    fclose(f);
    CHECK(strstr(buf, "{\"group\":\"prefill\",\"count\":1,\"total_ns\":1000,\"mean_ns\":1000,"
                      "\"p50_ns\":1000,\"p99_ns\":1000,\"share\":0.333333,\"gpu_ns\":300,"
                      "\"gpu_share\":0.047619}\n") != NULL);
    CHECK(strstr(buf, "{\"wall_ns\":3000,\"lane_span_ns\":3000,\"lanes\":1,\"violations\":0,"
                      "\"gpu_total_ns\":6300,\"gpu_matched_ns\":3100,"
                      "\"gpu_covered_ns\":700,\"gpu_uncovered_ns\":5600,\"gpu_uncovered_share\":0.888889,"
                      "\"activities\":6,\"matched\":5}\n") != NULL);
    free(buf);
    pmt_projection_free(&p);
    pmt_gpu_free(&g);
    pmt_trace_free(&t);
    return pm_check_result();
}

/* ok.csv's groups, totals and nearest-rank percentiles (durations listed
 * in the fixture: layer ranges 900 2800 2600 400 900 900 ns). */
static int case_table(void)
{
    pmt_trace t;
    pmt_trace_init(&t);
    REQUIRE(pmt_trace_load(&t, FIX("ok.csv"), NULL, 0) == 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    pmt_report_opts o = {.json = 1};
    REQUIRE(f && pmt_report(&t, NULL, &o, f) == 0);
    fclose(f);
    /* Rows sorted by total, largest first (ties by name); share of the
     * summed lane span: lane 100/100 1000..12000, lane 200/201 2200..11000,
     * 11000 + 8800 = 19800 ns. */
    static const char *const want =
        "{\"group\":\"layer_range\",\"count\":6,\"total_ns\":8500,\"mean_ns\":1416,\"p50_ns\":900,\"p99_ns\":2800,\"share\":0.429293,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
        "{\"group\":\"layer_range mode=exact\",\"count\":3,\"total_ns\":6300,\"mean_ns\":2100,\"p50_ns\":2600,\"p99_ns\":2800,\"share\":0.318182,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
        "{\"group\":\"layer_range shard=1\",\"count\":3,\"total_ns\":6300,\"mean_ns\":2100,\"p50_ns\":2600,\"p99_ns\":2800,\"share\":0.318182,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
        "{\"group\":\"layer_range shard=1 layers=12-23\",\"count\":3,\"total_ns\":6300,\"mean_ns\":2100,\"p50_ns\":2600,\"p99_ns\":2800,\"share\":0.318182,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
        "{\"group\":\"prefill\",\"count\":1,\"total_ns\":4000,\"mean_ns\":4000,\"p50_ns\":4000,\"p99_ns\":4000,\"share\":0.202020,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
        "{\"group\":\"prefill mode=exact\",\"count\":1,\"total_ns\":4000,\"mean_ns\":4000,\"p50_ns\":4000,\"p99_ns\":4000,\"share\":0.202020,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
        "{\"group\":\"spec_decode\",\"count\":1,\"total_ns\":4000,\"mean_ns\":4000,\"p50_ns\":4000,\"p99_ns\":4000,\"share\":0.202020,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
        "{\"group\":\"spec_decode mode=batched\",\"count\":1,\"total_ns\":4000,\"mean_ns\":4000,\"p50_ns\":4000,\"p99_ns\":4000,\"share\":0.202020,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
        "{\"group\":\"layer_range shard=0\",\"count\":3,\"total_ns\":2200,\"mean_ns\":733,\"p50_ns\":900,\"p99_ns\":900,\"share\":0.111111,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
        "{\"group\":\"layer_range shard=0 layers=0-11\",\"count\":3,\"total_ns\":2200,\"mean_ns\":733,\"p50_ns\":900,\"p99_ns\":900,\"share\":0.111111,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
        "{\"group\":\"layer_range mode=verify\",\"count\":2,\"total_ns\":1800,\"mean_ns\":900,\"p50_ns\":900,\"p99_ns\":900,\"share\":0.090909,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
        "{\"group\":\"decode\",\"count\":1,\"total_ns\":1000,\"mean_ns\":1000,\"p50_ns\":1000,\"p99_ns\":1000,\"share\":0.050505,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
        "{\"group\":\"decode mode=decode\",\"count\":1,\"total_ns\":1000,\"mean_ns\":1000,\"p50_ns\":1000,\"p99_ns\":1000,\"share\":0.050505,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
        "{\"group\":\"draft\",\"count\":1,\"total_ns\":900,\"mean_ns\":900,\"p50_ns\":900,\"p99_ns\":900,\"share\":0.045455,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
        "{\"group\":\"layer_range mode=decode\",\"count\":1,\"total_ns\":400,\"mean_ns\":400,\"p50_ns\":400,\"p99_ns\":400,\"share\":0.020202,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
        "{\"wall_ns\":11000,\"lane_span_ns\":19800,\"lanes\":2,\"violations\":0}\n"
        "{\"req\":3,\"ttft_ns\":6000,\"queue_ns\":null,\"prefill_ns\":4000,\"prefill_chunks\":1,"
        "\"gap_ns\":1000,\"first_decode_ns\":1000,\"decode_steps\":1,\"decode_tok_s\":1000000.000,"
        "\"spec_rounds\":1,\"drafted\":4,\"accepted\":null,\"time_ns\":9000,\"tokens\":12,"
        "\"ranges\":3,\"gpu_ns\":null}\n";
    CHECK_STR_EQ(buf, want);
    free(buf);
    pmt_trace_free(&t);
    return pm_check_result();
}

/* Two batched forwards and one request's own decode step:
 *   batch 1, 1001 ns, reqs 3:4,7:6: 3 gets floor(1001*4/10) = 400 and the
 *     1 ns left over (list order), 7 floor(1001*6/10) = 600; GPU 999 ns:
 *     399 + 1 and 599;
 *   batch 2, 501 ns, reqs 3:1,7:1: 250 + 1 and 250; GPU 3 ns: 1 + 1, 1;
 *   its leaf is not counted again; decode of req 9, 100 ns, GPU 10.
 * So 3: 652 ns, 5 tokens, 2 ranges, GPU 402; 7: 850, 7, 2, 600; 9: 100,
 * 1, 1, 10. */
static const char batched_csv[] =
    "\"Domain\",\"Function\",\"Process_Id\",\"Thread_Id\",\"Correlation_Id\",\"Start_Timestamp\",\"End_Timestamp\"\n"
    "\"MARKER_CORE_API\",\"pm.batch mode=exact batch=1 tokens=10 reqs=3:4,7:6\",100,100,1,1000,2001\n"
    "\"MARKER_CORE_API\",\"pm.layer_range mode=exact layers=0-1 shard=0 where=local backend=cpu tokens=10 batch=1\",100,100,2,1100,1900\n"
    "\"MARKER_CORE_API\",\"pm.batch mode=decode batch=2 tokens=2 reqs=3:1,7:1\",100,100,3,3000,3501\n"
    "\"MARKER_CORE_API\",\"pm.layer_range mode=decode layers=0-1 shard=0 where=local backend=cpu tokens=2 batch=2\",100,100,4,3100,3400\n"
    "\"MARKER_CORE_API\",\"pm.decode mode=decode req=9 pos=5\",100,100,5,3600,3700\n";

/* The per-request rows of a report over o (JSON lines from "{\"req\"" on). */
static char *batched_rows(const pmt_report_opts *o, int gpu)
{
    pmt_trace t;
    char err[300];
    pmt_trace_init(&t);
    REQUIRE(pmt_trace_load_csv_text(&t, "b.csv", batched_csv, strlen(batched_csv), err,
                                    sizeof err) == 0);
    REQUIRE(t.n == 5);
    uint64_t g[5] = {0};
    for (size_t i = 0; i < t.n; i++) {
        if (strstr(t.r[i].name, "pm.batch mode=exact"))
            g[i] = 999;
        else if (strstr(t.r[i].name, "pm.batch mode=decode"))
            g[i] = 3;
        else if (strstr(t.r[i].name, "pm.decode"))
            g[i] = 10;
    }
    pmt_projection p;
    memset(&p, 0, sizeof p);
    p.range_gpu_ns = g;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    REQUIRE(f && pmt_report(&t, gpu ? &p : NULL, o, f) == 0);
    fclose(f);
    pmt_trace_free(&t);
    char *rows = o->json ? strstr(buf, "{\"req\"") : strstr(buf, "\nper request");
    char *out = strdup(rows ? rows : "");
    free(buf);
    return out;
}

#define ROW_ZERO "\"ttft_ns\":0,\"queue_ns\":null,\"prefill_ns\":0,\"prefill_chunks\":0,\"gap_ns\":0," \
                 "\"first_decode_ns\":0,\"decode_steps\":0,\"decode_tok_s\":0.000,\"spec_rounds\":0," \
                 "\"drafted\":0,\"accepted\":null,"

/* A batched trace attributes its forwards' time to every request in them,
 * host and projected GPU time, in exact ns. */
static int case_batched(void)
{
    pmt_report_opts o = {.json = 1};
    char *rows = batched_rows(&o, 1);
    CHECK_STR_EQ(rows,
                 "{\"req\":3," ROW_ZERO "\"time_ns\":652,\"tokens\":5,\"ranges\":2,\"gpu_ns\":402}\n"
                 "{\"req\":7," ROW_ZERO "\"time_ns\":850,\"tokens\":7,\"ranges\":2,\"gpu_ns\":600}\n"
                 "{\"req\":9,\"ttft_ns\":0,\"queue_ns\":null,\"prefill_ns\":0,\"prefill_chunks\":0,"
                 "\"gap_ns\":0,\"first_decode_ns\":100,\"decode_steps\":1,"
                 "\"decode_tok_s\":10000000.000,\"spec_rounds\":0,\"drafted\":0,\"accepted\":null,"
                 "\"time_ns\":100,\"tokens\":1,\"ranges\":1,\"gpu_ns\":10}\n");
    free(rows);
    /* Without a projection the GPU share is null, not 0. */
    rows = batched_rows(&o, 0);
    CHECK(strstr(rows, "{\"req\":7," ROW_ZERO "\"time_ns\":850,\"tokens\":7,\"ranges\":2,"
                       "\"gpu_ns\":null}\n") != NULL);
    free(rows);
    /* The table has the same numbers, in ms. */
    pmt_report_opts table = {0};
    rows = batched_rows(&table, 1);
    CHECK(strstr(rows, "       req       ttft    queue    prefill chunks       gap    1st_dec   steps"
                       "      tok/s   spec  drafted       time  tokens        gpu\n") != NULL);
    CHECK(strstr(rows, "         7      0.000        -      0.000      0     0.000      0.000       0"
                       "        0.0      0        0      0.001       7      0.001\n") != NULL);
    free(rows);
    return pm_check_result();
}

/* --req keeps that request's row with its shares of batches; a window
 * shares only the batches that start in it. */
static int case_batched_select(void)
{
    pmt_report_opts o = {.json = 1, .has_req = 1, .req = 7};
    char *rows = batched_rows(&o, 1);
    CHECK_STR_EQ(rows,
                 "{\"req\":7," ROW_ZERO "\"time_ns\":850,\"tokens\":7,\"ranges\":2,\"gpu_ns\":600}\n");
    free(rows);
    pmt_report_opts w = {.json = 1, .has_window = 1, .w0 = 0, .w1 = 2000};
    rows = batched_rows(&w, 1);
    CHECK_STR_EQ(rows,
                 "{\"req\":3," ROW_ZERO "\"time_ns\":401,\"tokens\":4,\"ranges\":1,\"gpu_ns\":400}\n"
                 "{\"req\":7," ROW_ZERO "\"time_ns\":600,\"tokens\":6,\"ranges\":1,\"gpu_ns\":599}\n");
    free(rows);
    return pm_check_result();
}

static int case_rocprof_gpu(void)
{
    if (access(ROC "kernel_trace.csv", R_OK) != 0)
        PM_SKIP("../shared/formats/rocprofv3 is absent");
    pmt_gpu g;
    char err[300];
    pmt_gpu_init(&g);
    REQUIRE(pmt_gpu_load(&g, ROC "kernel_trace.csv", err, sizeof err) == 0);
    REQUIRE(g.nact == 9);
    CHECK_INT_EQ(g.act[0].kind, PMT_ACT_KERNEL);
    CHECK_STR_EQ(g.act[0].name, "void addition_kernel<float>(float*, float const*, float const*, int, int)");
    CHECK_INT_EQ(g.act[0].corr, 1);
    CHECK_INT_EQ(g.act[0].tid, 834304);
    CHECK_U64_EQ(g.act[0].start, 1550151853029637ull);
    CHECK_U64_EQ(g.act[0].end, 1550151853042437ull);
    REQUIRE(pmt_gpu_load(&g, ROC "memory_copy_trace.csv", err, sizeof err) == 0);
    REQUIRE(g.nact == 13);
    CHECK_INT_EQ(g.act[9].kind, PMT_ACT_COPY);
    CHECK_STR_EQ(g.act[9].name, "MEMORY_COPY_HOST_TO_DEVICE");
    CHECK_INT_EQ(g.act[12].corr, 24);
    REQUIRE(pmt_gpu_load(&g, ROC "hip_api_trace.csv", err, sizeof err) == 0);
    REQUIRE(g.napi == 8);
    CHECK_INT_EQ(g.api[4].corr, 5);
    CHECK_INT_EQ(g.api[4].pid, 238);
    CHECK_U64_EQ(g.api[4].start, 1191916547842972ull);
    pmt_gpu_free(&g);
    /* A marker CSV is not a GPU trace by its columns, and vice versa. */
    pmt_trace t;
    pmt_trace_init(&t);
    CHECK_INT_EQ(pmt_trace_load(&t, ROC "kernel_trace.csv", err, sizeof err), -1);
    pmt_trace_free(&t);
    return pm_check_result();
}

static int case_gpu_malformed(void)
{
    static const char *const bad[][2] = {
        {"\"A\",\"B\"\n1,2\n", "g: not a kernel, memory-copy or API trace (columns)"},
        {"\"Kernel_Name\",\"Correlation_Id\",\"Start_Timestamp\",\"End_Timestamp\"\n\"k\",x,1,2\n",
         "g:2: missing or non-numeric id/timestamp"},
        {"\"Kernel_Name\",\"Correlation_Id\",\"Start_Timestamp\",\"End_Timestamp\"\n\"k\",1,1\n",
         "g:2: missing or non-numeric id/timestamp"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pmt_gpu g;
        char err[300] = "";
        pmt_gpu_init(&g);
        CHECK_INT_EQ(pmt_gpu_load_text(&g, "g", bad[i][0], strlen(bad[i][0]), err, sizeof err), -1);
        CHECK_STR_EQ(err, bad[i][1]);
        pmt_gpu_free(&g);
    }
    return pm_check_result();
}

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* The SVG (test_timeline has the rest): one bar per closed range and per
 * activity, titles escaped. */
static int case_svg(void)
{
    pmt_trace t;
    pmt_gpu g;
    pmt_trace_init(&t);
    pmt_gpu_init(&g);
    REQUIRE(pmt_trace_load(&t, FIX("ok.csv"), NULL, 0) == 0);
    pmt_range amp = {"a<b&c", "", 100, 100, 99, 5000, 5100, 0, NULL, 0};
    REQUIRE(pmt_trace_add(&t, &amp) == 0);
    REQUIRE(pmt_gpu_load(&g, FIX("proj_kernels.csv"), NULL, 0) == 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    REQUIRE(f && pmt_svg(&t, &g, f) == 0);
    fclose(f);
    CHECK(strncmp(buf, "<?xml", 5) == 0);
    CHECK(strstr(buf, "</svg>\n") != NULL);
    /* 16 bars, 9 legend swatches (8 kinds and modes, GPU kernel), 3 lanes */
    CHECK_INT_EQ(count(buf, "<rect "), 16 + 9 + 3);
    CHECK_INT_EQ(count(buf, "</title></rect>"), 16);
    CHECK(strstr(buf, "a&lt;b&amp;c") != NULL);
    CHECK(strstr(buf, ">GPU stream 1 \xc2\xb7 pid 0</text>") != NULL);
    free(buf);
    pmt_gpu_free(&g);
    pmt_trace_free(&t);
    return pm_check_result();
}

/* The command on files and options: table, --json, --svg. */
static int case_cli(void)
{
    static pm_child_result r;
    char svg[] = "/tmp/pm-report-test.XXXXXX";
    int fd = mkstemp(svg);
    REQUIRE(fd >= 0);
    close(fd);
    char *argv[] = {PM_TOOL, "report", "--kernels", FIX("proj_kernels.csv"), "--api", FIX("proj_api.csv"),
                    "--svg", svg, FIX("proj_markers.csv"), NULL};
    REQUIRE(pm_child_exec(argv, NULL, 10000, &r) == 0);
    CHECK(pm_child_ok(&r));
    CHECK(strstr(r.out, "layer_range mode=exact") != NULL);
    CHECK(strstr(r.out, "outside every phase: 0.006 ms (91.8% of GPU time)") != NULL);
    CHECK(access(svg, R_OK) == 0);
    unlink(svg);
    char *bad[] = {PM_TOOL, "report", "--kernels", FIX("ok.json"), FIX("ok.csv"), NULL};
    REQUIRE(pm_child_exec(bad, NULL, 10000, &r) == 0);
    CHECK(r.exited && r.exit_code == 1);
    CHECK(strstr(r.err, "phasemark report: ") == r.err);
    return pm_check_result();
}

/* A real capture (capture --kernels of cuda_prog on an H200, 2026-11-29):
 * durations from its CSVs: kernels 736 and 672 ns, copies 1024 (host to
 * device, in prefill) and 1888 ns (device to host, after decode). */
static int case_h200_sample(void)
{
    pmt_trace t;
    pmt_gpu g;
    pmt_projection p;
    char err[300];
    pmt_trace_init(&t);
    pmt_gpu_init(&g);
    REQUIRE(pmt_trace_load(&t, FIX("h200_capture/marker_api_trace.csv"), err, sizeof err) == 0);
    REQUIRE(pmt_trace_load(&t, FIX("h200_capture/trace.json"), err, sizeof err) == 0);
    REQUIRE(t.n == 4);
    /* The JSON holds the CSV's ranges to the nanosecond. */
    CHECK_U64_EQ(t.r[2].start, t.r[0].start);
    CHECK_U64_EQ(t.r[3].end, t.r[1].end);
    t.n = 2;
    static const char *const gpu[] = {"kernel_trace.csv", "memory_copy_trace.csv", "cuda_api_trace.csv"};
    for (int i = 0; i < 3; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/h200_capture/%s", PM_FIXTURES, gpu[i]);
        REQUIRE(pmt_gpu_load(&g, path, err, sizeof err) == 0);
    }
    CHECK_INT_EQ(g.nact, 4);
    CHECK_INT_EQ(g.napi, 11);
    REQUIRE(pmt_project(&t, &g, &p) == 0);
    CHECK_INT_EQ(p.total_ns, 4320);
    CHECK_INT_EQ(p.nmatched, 4);
    CHECK_INT_EQ(p.range_gpu_ns[0], 1760); /* prefill: copy 1024 + kernel 736 */
    CHECK_INT_EQ(p.range_gpu_ns[1], 672);  /* decode */
    CHECK_INT_EQ(p.uncovered_ns, 1888);
    t.n = 4;
    pmt_projection_free(&p);
    pmt_gpu_free(&g);
    pmt_trace_free(&t);
    static pm_child_result r;
    char *argv[] = {PM_TOOL, "report", FIX("h200_capture"), NULL};
    REQUIRE(pm_child_exec(argv, NULL, 10000, &r) == 0);
    CHECK(pm_child_ok(&r));
    CHECK(strstr(r.out, "GPU: 4 activities, 0.004 ms; launch found for 4; outside every phase: "
                        "0.002 ms (43.7% of GPU time)") != NULL);
    return pm_check_result();
}

/* trace.json with GPU activities: one named track per process and stream,
 * skipped when the file is read back as a marker trace. */
static int case_json_gpu(void)
{
    pmt_trace t, back;
    pmt_gpu g;
    pmt_trace_init(&t);
    pmt_trace_init(&back);
    pmt_gpu_init(&g);
    REQUIRE(pmt_trace_load(&t, FIX("h200_capture/marker_api_trace.csv"), NULL, 0) == 0);
    REQUIRE(pmt_gpu_load(&g, FIX("h200_capture/kernel_trace.csv"), NULL, 0) == 0);
    REQUIRE(pmt_gpu_load(&g, FIX("h200_capture/memory_copy_trace.csv"), NULL, 0) == 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    REQUIRE(f && pmt_trace_write_json_gpu(&t, &g, f) == 0);
    fclose(f);
    CHECK_INT_EQ(count(buf, "\"cat\":\"phasemark.gpu\""), 4);
    CHECK_INT_EQ(count(buf, "\"name\":\"GPU stream 7\""), 1); /* all on stream 7 */
    CHECK(strstr(buf, "{\"name\":\"pm_fill\",\"cat\":\"phasemark.gpu\",\"ph\":\"X\",\"pid\":1026,"
                      "\"tid\":4294901767,\"ts\":36514885.717,\"dur\":0.736,\"args\":{\"corr\":8}}") != NULL);
    REQUIRE(pmt_trace_load_json_text(&back, "j", buf, len, NULL, 0) == 0);
    CHECK_INT_EQ(back.n, 2);
    free(buf);
    pmt_gpu_free(&g);
    pmt_trace_free(&back);
    pmt_trace_free(&t);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {{"projection", case_projection}, {"table", case_table},
                 {"batched", case_batched}, {"batched_select", case_batched_select},
                 {"rocprof_gpu", case_rocprof_gpu}, {"gpu_malformed", case_gpu_malformed},
                 {"svg", case_svg}, {"cli", case_cli}, {"h200_sample", case_h200_sample},
                 {"json_gpu", case_json_gpu}};
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: test_report CASE\n");
    return 2;
}
