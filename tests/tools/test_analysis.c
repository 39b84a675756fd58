/* test_analysis.c — report's per-request questions over two_workers.csv:
 * shares of the summed lane span, --group-by, --req, --window, the request
 * table, warnings for violations, and the command's option errors.
 *
 * two_workers.csv, by hand: process 100, two worker threads.
 *   thread 101: prefill req=1 1000..5000, decode req=1 5000..6000 and
 *               6000..7000 (lane span 6000)
 *   thread 102: prefill req=2 in two chunks 2000..3000 and 3000..4500,
 *               decode req=2 5500..6500 (lane span 4500)
 * Summed lane span 10500 ns; wall span 6000 ns (the old share divided by
 * it and gave prefill 108%).
 * usage: test_analysis CASE
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pm_check.h"
#include "pm_child.h"
#include "pmt.h"

#define FIX(name) PM_FIXTURES "/" name

/* The JSON report of a fixture under o, in a buffer the caller frees. */
static char *report_of(const char *fixture, pmt_report_opts *o)
{
    pmt_trace t;
    char *buf = NULL;
    size_t len = 0;
    pmt_trace_init(&t);
    if (pmt_trace_load(&t, fixture, NULL, 0) < 0)
        return NULL;
    FILE *f = open_memstream(&buf, &len);
    o->json = 1;
    o->violations = pmt_check(&t, NULL, 0, NULL, NULL);
    if (!f || pmt_report(&t, NULL, o, f) < 0) {
        if (f)
            fclose(f);
        free(buf);
        pmt_trace_free(&t);
        return NULL;
    }
    fclose(f);
    pmt_trace_free(&t);
    return buf;
}

static int case_shares(void)
{
    pmt_report_opts o = {0};
    o.no_requests = 1;
    char *buf = report_of(FIX("two_workers.csv"), &o);
    REQUIRE(buf);
    CHECK_STR_EQ(buf,
                 "{\"group\":\"prefill\",\"count\":3,\"total_ns\":6500,\"mean_ns\":2166,\"p50_ns\":1500,"
                 "\"p99_ns\":4000,\"share\":0.619048,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
                 "{\"group\":\"prefill mode=exact\",\"count\":3,\"total_ns\":6500,\"mean_ns\":2166,"
                 "\"p50_ns\":1500,\"p99_ns\":4000,\"share\":0.619048,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
                 "{\"group\":\"decode\",\"count\":3,\"total_ns\":3000,\"mean_ns\":1000,\"p50_ns\":1000,"
                 "\"p99_ns\":1000,\"share\":0.285714,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
                 "{\"group\":\"decode mode=decode\",\"count\":3,\"total_ns\":3000,\"mean_ns\":1000,"
                 "\"p50_ns\":1000,\"p99_ns\":1000,\"share\":0.285714,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
                 "{\"wall_ns\":6000,\"lane_span_ns\":10500,\"lanes\":2,\"violations\":0}\n");
    free(buf);
    return pm_check_result();
}

static int case_group_by(void)
{
    static const struct {
        const char *by, *first_row;
    } want[] = {
        {"req", "{\"group\":\"req=1 prefill\",\"count\":1,\"total_ns\":4000,"},
        {"process", "{\"group\":\"pid=100 prefill\",\"count\":3,\"total_ns\":6500,"},
        {"kind", "{\"group\":\"prefill\",\"count\":3,\"total_ns\":6500,"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        pmt_report_opts o = {0};
        o.no_requests = 1;
        REQUIRE(pmt_group_by_parse(want[i].by, &o.group_by) == 0);
        char *buf = report_of(FIX("two_workers.csv"), &o);
        REQUIRE(buf);
        CHECK(strncmp(buf, want[i].first_row, strlen(want[i].first_row)) == 0);
        if (i == 0) /* req=1: prefill 4000, decode 2000; req=2: prefill 2500, decode 1000 */
            CHECK(strstr(buf, "\"req=2 prefill\",\"count\":2,\"total_ns\":2500,") != NULL);
        free(buf);
    }
    /* Shard and layer families of ok.csv. */
    pmt_report_opts o = {0};
    o.no_requests = 1;
    REQUIRE(pmt_group_by_parse("layers", &o.group_by) == 0);
    char *buf = report_of(FIX("ok.csv"), &o);
    REQUIRE(buf);
    static const char first[] = "{\"group\":\"layer_range shard=1 layers=12-23\",\"count\":3,\"total_ns\":6300,";
    CHECK(strncmp(buf, first, sizeof first - 1) == 0);
    CHECK(strstr(buf, "\"group\":\"layer_range shard=0 layers=0-11\",\"count\":3,\"total_ns\":2200,") != NULL);
    CHECK(strstr(buf, "\"group\":\"prefill") == NULL);
    free(buf);
    CHECK_INT_EQ(pmt_group_by_parse("bogus", &o.group_by), -1);
    return pm_check_result();
}

static int case_req_filter(void)
{
    pmt_report_opts o = {0};
    o.has_req = 1;
    o.req = 2;
    char *buf = report_of(FIX("two_workers.csv"), &o);
    REQUIRE(buf);
    /* Only thread 102 carries req=2: lane span 2000..6500. */
    CHECK(strstr(buf, "{\"group\":\"prefill\",\"count\":2,\"total_ns\":2500,\"mean_ns\":1250,"
                      "\"p50_ns\":1000,\"p99_ns\":1500,\"share\":0.555556,") != NULL);
    CHECK(strstr(buf, "{\"wall_ns\":4500,\"lane_span_ns\":4500,\"lanes\":1,\"violations\":0}\n") != NULL);
    CHECK(strstr(buf, "\"req\":1,") == NULL);
    CHECK(strstr(buf, "{\"req\":2,\"ttft_ns\":4500,\"queue_ns\":null,\"prefill_ns\":2500,"
                      "\"prefill_chunks\":2,\"gap_ns\":1000,\"first_decode_ns\":1000,\"decode_steps\":1,")
          != NULL);
    free(buf);
    return pm_check_result();
}

static int case_window(void)
{
    uint64_t w0, w1;
    char err[300];
    CHECK_INT_EQ(pmt_window_parse("4000..", &w0, &w1, err, sizeof err), 0);
    CHECK_U64_EQ(w0, 4000);
    CHECK_U64_EQ(w1, UINT64_MAX);
    CHECK_INT_EQ(pmt_window_parse("1.5us..2ms", &w0, &w1, err, sizeof err), 0);
    CHECK_U64_EQ(w0, 1500);
    CHECK_U64_EQ(w1, 2000000);
    CHECK_INT_EQ(pmt_window_parse("..1s", &w0, &w1, err, sizeof err), 0);
    CHECK_U64_EQ(w0, 0);
    CHECK_U64_EQ(w1, 1000000000);
    static const char *const bad[] = {"", "..", "5", "3..2", "1h..2h", "-1..5", "x..", "1..2..3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_INT_EQ(pmt_window_parse(bad[i], &w0, &w1, err, sizeof err), -1);
    CHECK(strstr(err, "bad --window '1..2..3'") == err);
    /* Starts at or after first start + 4000 = 5000: the three decodes.
     * Lanes: 5000..7000 and 5500..6500. */
    pmt_report_opts o = {0};
    o.has_window = 1;
    o.w0 = 4000;
    o.w1 = UINT64_MAX;
    o.no_requests = 1;
    char *buf = report_of(FIX("two_workers.csv"), &o);
    REQUIRE(buf);
    CHECK_STR_EQ(buf,
                 "{\"group\":\"decode\",\"count\":3,\"total_ns\":3000,\"mean_ns\":1000,\"p50_ns\":1000,"
                 "\"p99_ns\":1000,\"share\":1.000000,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
                 "{\"group\":\"decode mode=decode\",\"count\":3,\"total_ns\":3000,\"mean_ns\":1000,"
                 "\"p50_ns\":1000,\"p99_ns\":1000,\"share\":1.000000,\"gpu_ns\":0,\"gpu_share\":0.000000}\n"
                 "{\"wall_ns\":2000,\"lane_span_ns\":3000,\"lanes\":2,\"violations\":0}\n");
    free(buf);
    return pm_check_result();
}

/* TTFT = first prefill start .. end of the first decode step; gap = first
 * decode start - last prefill end; tok/s = steps / (last decode end -
 * first decode start). */
static int case_requests(void)
{
    pmt_trace t;
    pmt_trace_init(&t);
    REQUIRE(pmt_trace_load(&t, FIX("two_workers.csv"), NULL, 0) == 0);
    pmt_report_opts o = {0};
    pmt_request *rs;
    size_t n;
    REQUIRE(pmt_requests(&t, &o, &rs, &n) == 0);
    REQUIRE(n == 2);
    CHECK_U64_EQ(rs[0].req, 1);
    CHECK_U64_EQ(rs[0].first_start, 1000);
    CHECK_U64_EQ(rs[0].prefill_ns, 4000);
    CHECK_U64_EQ(rs[0].prefill_end, 5000);
    CHECK_U64_EQ(rs[0].first_decode_start, 5000);
    CHECK_U64_EQ(rs[0].first_decode_end, 6000);
    CHECK_INT_EQ(rs[0].decode_steps, 2);
    CHECK_U64_EQ(rs[0].decode_last - rs[0].decode_first, 2000);
    CHECK_U64_EQ(rs[1].prefill_end, 4500);
    CHECK_INT_EQ(rs[1].prefill_chunks, 2);
    free(rs);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    REQUIRE(f && pmt_report(&t, NULL, &o, f) == 0);
    fclose(f);
    CHECK(strstr(buf, "per request (ms; TTFT = first prefill start to the end of the first decode step") != NULL);
    /* time and tokens: req 1 4000 + 1000 + 1000 ns, 6 + 1 + 1 tokens;
     * req 2 1000 + 1500 + 1000 ns, 4 + 4 + 1. */
    CHECK(strstr(buf, "         1      0.005        -      0.004      1     0.000      0.001       2  1000000.0      0        0      0.006       8\n") != NULL);
    CHECK(strstr(buf, "         2      0.004        -      0.003      2     0.001      0.001       1  1000000.0      0        0      0.004       9\n") != NULL);
    free(buf);
    /* ok.csv: one speculative round drafting 4. */
    pmt_trace_free(&t);
    pmt_trace_init(&t);
    REQUIRE(pmt_trace_load(&t, FIX("ok.csv"), NULL, 0) == 0);
    REQUIRE(pmt_requests(&t, &o, &rs, &n) == 0);
    REQUIRE(n == 1);
    CHECK_INT_EQ(rs[0].spec_rounds, 1);
    CHECK_U64_EQ(rs[0].drafted, 4);
    free(rs);
    pmt_trace_free(&t);
    return pm_check_result();
}

static int case_warnings(void)
{
    pmt_report_opts o = {0};
    o.no_requests = 1;
    char *buf = report_of(FIX("overlap.csv"), &o);
    REQUIRE(buf);
    CHECK(strstr(buf, "\"violations\":1}") != NULL);
    free(buf);
    static pm_child_result r;
    char *argv[] = {PM_TOOL, "report", FIX("unbalanced_open.csv"), NULL};
    REQUIRE(pm_child_exec(argv, NULL, 10000, &r) == 0);
    CHECK(pm_child_ok(&r));
    CHECK(strstr(r.err, "phasemark report: warning: 1 check violation(s) in this trace") == r.err);
    return pm_check_result();
}

/* Option errors name the option and exit 2; --version exits 0. */
static int case_cli_options(void)
{
    static pm_child_result r;
    static const struct {
        const char *a[7];
        int code;
        const char *err;
    } runs[] = {
        {{"report", "--svg", NULL}, 2, "phasemark report: --svg needs a value\n"},
        {{"report", FIX("ok.csv"), "--svg", NULL}, 2, "phasemark report: --svg needs a value\n"},
        {{"report", "--frob", FIX("ok.csv"), NULL}, 2, "phasemark report: bad option '--frob'\n"},
        {{"report", "--group-by", "x", FIX("ok.csv"), NULL}, 2, "phasemark report: bad --group-by 'x'"},
        {{"report", "--req", "-3", FIX("ok.csv"), NULL}, 2, "phasemark report: --req needs a value\n"},
        {{"report", "--req", "3x", FIX("ok.csv"), NULL}, 2, "phasemark report: bad --req '3x'"},
        {{"report", "--window", "9..1", FIX("ok.csv"), NULL}, 2, "phasemark report: bad --window '9..1'"},
        {{"check", "--frob", FIX("ok.csv"), NULL}, 2, "phasemark check: bad option '--frob'\n"},
        {{"check", "--expect", "bogus=1", FIX("ok.csv"), NULL}, 2,
         "phasemark check: bad --expect item 'bogus=1': unknown kind 'bogus' (kinds: other, prefill,"},
        {{"check", "--expect", "decode=x", FIX("ok.csv"), NULL}, 2,
         "phasemark check: bad --expect item 'decode=x': the count is not an unsigned integer\n"},
        {{"check", FIX("h200_capture"), NULL}, 0, ""},
        {{"check", PM_FIXTURES, NULL}, 1, "phasemark check: " PM_FIXTURES ": a directory without"},
        {{"report", "--req", "3", "--group-by", "req", FIX("ok.csv"), NULL}, 0, ""},
        {{"--version", NULL}, 0, ""},
        {{"check", "--version", NULL}, 0, ""},
        {{"report", "--version", NULL}, 0, ""},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char *argv[9] = {PM_TOOL};
        for (int k = 0; k < 7 && runs[i].a[k]; k++)
            argv[k + 1] = (char *)runs[i].a[k];
        REQUIRE(pm_child_exec(argv, NULL, 10000, &r) == 0);
        if (!r.exited || r.exit_code != runs[i].code || strncmp(r.err, runs[i].err, strlen(runs[i].err)))
            fprintf(stderr, "run %zu: exit %d, stderr: %s\n", i, r.exit_code, r.err);
        CHECK(r.exited && r.exit_code == runs[i].code);
        CHECK(strncmp(r.err, runs[i].err, strlen(runs[i].err)) == 0);
        if (!strcmp(runs[i].a[runs[i].a[1] && !strcmp(runs[i].a[1], "--version") ? 1 : 0], "--version"))
            CHECK_STR_EQ(r.out, "phasemark " PHASEMARK_VERSION_STRING "\n");
    }
    return pm_check_result();
}

/* Names with control characters and invalid UTF-8: JSON escapes them and
 * writes U+FFFD for each bad byte; XML writes entities and U+FFFD; our
 * JSON reader refuses invalid UTF-8 (it is not JSON). Byte-exact. */
static int case_escapes(void)
{
    static const char name[] = "a\"<&>'\x01\t\xff\xc3\xa9\xed\xa0\x80\xe2\x82";
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    REQUIRE(f);
    pmt_json_put(f, name);
    fputc('|', f);
    pmt_xml_put(f, name);
    fclose(f);
    CHECK_STR_EQ(buf, "\"a\\\"<&>'\\u0001\\u0009\\ufffd\xc3\xa9\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\"|"
                      "a&quot;&lt;&amp;&gt;&#39;\xef\xbf\xbd\t\xef\xbf\xbd\xc3\xa9"
                      "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    free(buf);
    pmt_trace t;
    char err[200] = "";
    pmt_trace_init(&t);
    static const char bad[] = "{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"\xff\",\"pid\":1,\"tid\":1,"
                              "\"ts\":1,\"dur\":1}]}";
    CHECK_INT_EQ(pmt_trace_load_json_text(&t, "j", bad, sizeof bad - 1, err, sizeof err), -1);
    CHECK(strstr(err, "invalid UTF-8 in string") != NULL);
    static const char good[] = "{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"\xc3\xa9\\ufffd\",\"pid\":1,"
                               "\"tid\":1,\"ts\":1,\"dur\":1}]}";
    CHECK_INT_EQ(pmt_trace_load_json_text(&t, "j", good, sizeof good - 1, err, sizeof err), 0);
    REQUIRE(t.n == 1);
    CHECK_STR_EQ(t.r[0].name, "\xc3\xa9\xef\xbf\xbd");
    pmt_trace_free(&t);
    return pm_check_result();
}

/* diff: ok_slow_decode.csv is ok.csv with its decode range 500 ns longer
 * (1000 -> 1500 ns, +50%): two groups regress at the default 10%, none at
 * 60%; GPU columns appear when both sides have kernels. */
static int case_diff(void)
{
    static pm_child_result r;
    char *slow[] = {PM_TOOL, "diff", FIX("ok.csv"), FIX("ok_slow_decode.csv"), NULL};
    REQUIRE(pm_child_exec(slow, NULL, 10000, &r) == 0);
    CHECK(r.exited && r.exit_code == 1);
    CHECK(strstr(r.out, "decode                                        1      1      0.001      0.002     "
                        "1.000     1.500   +50.0%     1.000     1.500  REGRESSION\n") != NULL);
    size_t n = 0;
    for (const char *p = r.out; (p = strstr(p, "REGRESSION")); p++)
        n++;
    CHECK_INT_EQ(n, 2);
    char *loose[] = {PM_TOOL, "diff", "--threshold", "60", "--json", FIX("ok.csv"),
                     FIX("ok_slow_decode.csv"), NULL};
    REQUIRE(pm_child_exec(loose, NULL, 10000, &r) == 0);
    CHECK(pm_child_ok(&r));
    CHECK(strstr(r.out, "{\"group\":\"decode\",\"count_a\":1,\"count_b\":1,\"total_a_ns\":1000,"
                        "\"total_b_ns\":1500,\"p50_a_ns\":1000,\"p50_b_ns\":1500,\"p99_a_ns\":1000,"
                        "\"p99_b_ns\":1500,\"p50_change\":50.000,\"regression\":false}\n") != NULL);
    char *same[] = {PM_TOOL, "diff", "--json", FIX("torch_trace.json"), FIX("torch_trace.json"), NULL};
    REQUIRE(pm_child_exec(same, NULL, 10000, &r) == 0);
    CHECK(pm_child_ok(&r));
    CHECK(strstr(r.out, "\"group\":\"prefill\",") != NULL);
    CHECK(strstr(r.out, "\"gpu_a_ns\":300,\"gpu_b_ns\":300,\"gpu_per_range_change\":0.000,") != NULL);
    char *one[] = {PM_TOOL, "diff", FIX("ok.csv"), NULL};
    REQUIRE(pm_child_exec(one, NULL, 10000, &r) == 0);
    CHECK(r.exited && r.exit_code == 2);
    CHECK(strstr(r.err, "phasemark diff: need two traces, A and B\n") == r.err);
    char *badt[] = {PM_TOOL, "diff", "--threshold", "x", FIX("ok.csv"), FIX("ok.csv"), NULL};
    REQUIRE(pm_child_exec(badt, NULL, 10000, &r) == 0);
    CHECK(r.exited && r.exit_code == 2);
    CHECK(strstr(r.err, "phasemark diff: bad --threshold 'x'") == r.err);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {{"shares", case_shares},     {"group_by", case_group_by},
                 {"req_filter", case_req_filter}, {"window", case_window},
                 {"requests", case_requests}, {"warnings", case_warnings},
                 {"cli_options", case_cli_options}, {"escapes", case_escapes},
                 {"diff", case_diff}};
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: test_analysis CASE\n");
    return 2;
}
