/* test_timeline.c — the timeline: Perfetto's process and thread names in
 * trace.json (exact bytes), and the picture (SVG and HTML): axis ticks,
 * lane names, legend, an escaped name, the level-of-detail bound on a
 * generated 1M-range trace, and a real browser rendering it.
 * usage: test_timeline CASE [CHROMIUM]
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pm_check.h"
#include "pm_child.h"
#include "pmt.h"

#define FIX(name) PM_FIXTURES "/" name

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* ok.csv (server pid 100, daemon pid 200 running shard 1 remotely) with
 * the comms a raw capture records and one thread name that needs escaping. */
static int load_ok(pmt_trace *t)
{
    pmt_trace_init(t);
    return pmt_trace_load(t, FIX("ok.csv"), NULL, 0) | pmt_trace_label(t, 100, 0, "pm-server") |
           pmt_trace_label(t, 200, 0, "pm-shardd") | pmt_trace_label(t, 200, 202, "idle \"x\"\xff");
}

typedef int (*writer)(const pmt_trace *, const pmt_gpu *, FILE *);

static char *render(writer w, const pmt_trace *t, const pmt_gpu *g, size_t *len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f || w(t, g, f) < 0) {
        if (f)
            fclose(f);
        free(buf);
        return NULL;
    }
    fclose(f);
    if (len)
        *len = n;
    return buf;
}

static int json_writer(const pmt_trace *t, const pmt_gpu *g, FILE *f)
{
    return pmt_trace_write_json_gpu(t, g, f);
}

/* Perfetto's metadata events: the role from the ranges, the comm in
 * parentheses, sorted by pid then tid, names JSON-escaped. */
static int case_perfetto_names(void)
{
    pmt_trace t;
    REQUIRE(load_ok(&t) == 0);
    char *buf = render(json_writer, &t, NULL, NULL);
    REQUIRE(buf);
    static const char head[] =
        "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n"
        "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":100,\"args\":{\"name\":\"server (pm-server)\"}},\n"
        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":100,\"tid\":100,\"args\":{\"name\":\"server\"}},\n"
        "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":200,\"args\":{\"name\":"
        "\"shard 1 where=remote backend=cuda:0 (pm-shardd)\"}},\n"
        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":200,\"tid\":201,\"args\":{\"name\":"
        "\"shard 1 where=remote backend=cuda:0\"}},\n"
        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":200,\"tid\":202,\"args\":{\"name\":"
        "\"idle \\\"x\\\"\\ufffd\"}},\n"
        "{\"name\":\"pm.prefill mode=exact req=3 pos=0 tokens=11\",\"cat\":\"MARKER_CORE_API\","
        "\"ph\":\"X\",\"pid\":100,\"tid\":100,\"ts\":1.000,\"dur\":4.000,\"args\":{\"corr\":1}},\n";
    CHECK(strncmp(buf, head, sizeof head - 1) == 0);
    if (strncmp(buf, head, sizeof head - 1) != 0)
        fprintf(stderr, "got:\n%.*s\n", (int)sizeof head, buf);
    CHECK_INT_EQ(count(buf, "\"ph\":\"M\""), 5);
    free(buf);
    pmt_trace_free(&t);
    return pm_check_result();
}

/* Written, read back and written again: the same bytes (a name that
 * starts with its role is not prefixed twice). */
static int case_perfetto_roundtrip(void)
{
    pmt_trace t, back;
    size_t n1, n2;
    REQUIRE(load_ok(&t) == 0);
    pmt_trace_label(&t, 200, 202, "idle"); /* valid UTF-8, so reading back is exact */
    char *a = render(json_writer, &t, NULL, &n1);
    REQUIRE(a);
    pmt_trace_init(&back);
    REQUIRE(pmt_trace_load_json_text(&back, "a", a, n1, NULL, 0) == 0);
    CHECK_STR_EQ(pmt_trace_label_of(&back, 200, 0), "shard 1 where=remote backend=cuda:0 (pm-shardd)");
    char *b = render(json_writer, &back, NULL, &n2);
    REQUIRE(b);
    CHECK_INT_EQ(n1, n2);
    CHECK(n1 == n2 && memcmp(a, b, n1) == 0);
    free(a), free(b);
    pmt_trace_free(&back);
    pmt_trace_free(&t);
    return pm_check_result();
}

/* Roles: several shards on one lane, placements that differ, a lane
 * with only other tools' ranges, and a name without a role. */
static int case_lane_roles(void)
{
    static const char csv[] =
        "\"Function\",\"Process_Id\",\"Thread_Id\",\"Start_Timestamp\",\"End_Timestamp\"\n"
        "\"pm.layer_range mode=exact layers=0-3 shard=0 where=local backend=cpu req=1 tokens=2\",7,8,10,20\n"
        "\"pm.layer_range mode=exact layers=4-7 shard=2 where=local backend=cuda:1 req=1 tokens=2\",7,8,30,40\n"
        "\"hipMemcpy\",9,9,10,20\n";
    pmt_trace t;
    pmt_label *ls;
    size_t n;
    pmt_trace_init(&t);
    REQUIRE(pmt_trace_load_csv_text(&t, "c", csv, sizeof csv - 1, NULL, 0) == 0);
    REQUIRE(pmt_trace_label(&t, 9, 0, "python3") == 0);
    REQUIRE(pmt_lane_names(&t, &ls, &n) == 0);
    REQUIRE(n == 3);
    CHECK_INT_EQ(ls[0].pid, 7);
    CHECK_INT_EQ(ls[0].tid, 0);
    CHECK_STR_EQ(ls[0].name, "shards 0,2");
    CHECK_STR_EQ(ls[1].name, "shards 0,2");
    CHECK_INT_EQ(ls[1].tid, 8);
    CHECK_STR_EQ(ls[2].name, "python3");
    CHECK(pmt_lane_name_of(ls, n, 9, 9) == NULL);
    CHECK_STR_EQ(pmt_lane_name_of(ls, n, 9, 0), "python3");
    pmt_lane_names_free(ls, n);
    pmt_trace_free(&t);
    return pm_check_result();
}

/* ok.csv plus an other tool's range whose name needs escaping and five
 * kernels: span 1000..18200 ns (the last kernel ends at 18200), 3 lanes. */
static char *render_ok(writer w, size_t *len)
{
    pmt_trace t;
    pmt_gpu g;
    if (load_ok(&t) < 0)
        return NULL;
    pmt_range bad = {"a<b&c\xff\x01", "", 100, 100, 99, 5000, 5900, 0, NULL, 0};
    pmt_gpu_init(&g);
    char *buf = NULL;
    if (pmt_trace_add(&t, &bad) == 0 && pmt_gpu_load(&g, FIX("proj_kernels.csv"), NULL, 0) == 0)
        buf = render(w, &t, &g, len);
    pmt_gpu_free(&g);
    pmt_trace_free(&t);
    return buf;
}

/* Axis: 17.2 us of span, a tenth is 1.72 us, so ticks every 2 us from 0 to
 * 16, 2000 * 1400 / 17200 = 162.8 px apart; lanes run from y 72 to 162. */
static int case_svg_axis(void)
{
    char *buf = render_ok(pmt_svg, NULL);
    REQUIRE(buf);
    CHECK(strncmp(buf, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg ", 44) == 0);
    CHECK_INT_EQ(count(buf, "text-anchor=\"middle\">"), 9);
    for (int k = 0; k <= 16; k += 2) {
        char want[64];
        snprintf(want, sizeof want, "text-anchor=\"middle\">%d us</text>", k);
        CHECK_INT_EQ(count(buf, want), 1);
    }
    CHECK(strstr(buf, "<line class=\"g\" x1=\"502.8\" y1=\"63.0\" x2=\"502.8\" y2=\"162.0\"/>"
                      "<text x=\"502.8\" y=\"60.0\" text-anchor=\"middle\">2 us</text>\n") != NULL);
    CHECK(strstr(buf, "<line class=\"a\" x1=\"340\" y1=\"66.0\" x2=\"1740\" y2=\"66.0\"/>\n") != NULL);
    CHECK(strstr(buf, "phasemark timeline: 16 ranges and activities on 3 lanes, 0.017 ms") != NULL);
    free(buf);
    /* A span under a microsecond is in ns; 3.5 s is in steps of 500 ms. */
    static const char csv[] = "\"Function\",\"Start_Timestamp\",\"End_Timestamp\"\n\"x\",100,1099\n";
    static const char csv2[] = "\"Function\",\"Start_Timestamp\",\"End_Timestamp\"\n\"x\",0,3500000000\n";
    pmt_trace t;
    pmt_trace_init(&t);
    REQUIRE(pmt_trace_load_csv_text(&t, "c", csv, sizeof csv - 1, NULL, 0) == 0);
    buf = render(pmt_svg, &t, NULL, NULL);
    REQUIRE(buf);
    CHECK_INT_EQ(count(buf, "text-anchor=\"middle\">"), 10);
    CHECK(strstr(buf, ">900 ns</text>") != NULL);
    CHECK(strstr(buf, ">1000 ns</text>") == NULL);
    free(buf);
    pmt_trace_free(&t);
    REQUIRE(pmt_trace_load_csv_text(&t, "c", csv2, sizeof csv2 - 1, NULL, 0) == 0);
    buf = render(pmt_svg, &t, NULL, NULL);
    REQUIRE(buf);
    CHECK_INT_EQ(count(buf, "text-anchor=\"middle\">"), 8);
    CHECK(strstr(buf, ">3500 ms</text>") != NULL);
    CHECK(strstr(buf, "<title>x (3.500 s)</title>") != NULL);
    free(buf);
    pmt_trace_free(&t);
    return pm_check_result();
}

/* Lanes named by role and comm, with pid and tid; the legend lists the
 * kinds and modes present, in the table's order; depth rows are marked. */
static int case_svg_lanes(void)
{
    char *buf = render_ok(pmt_svg, NULL);
    REQUIRE(buf);
    CHECK(strstr(buf, "<text x=\"4\" y=\"85.0\">server \xc2\xb7 pid 100 \xc2\xb7 tid 100</text>\n") != NULL);
    CHECK(strstr(buf, ">shard 1 where=remote backend=cuda:0 \xc2\xb7 pid 200 \xc2\xb7 tid 201</text>\n") != NULL);
    CHECK(strstr(buf, ">GPU stream 1 \xc2\xb7 pid 0</text>\n") != NULL);
    CHECK(strstr(buf, "<text class=\"t\" x=\"318\" y=\"101.0\">d1</text>\n") != NULL);
    static const char *const legend[] = {
        "<rect class=\"c0\" x=\"4\" y=\"27\" width=\"10\" height=\"10\"/><text x=\"18\" y=\"36\">prefill</text>\n",
        "y=\"36\">decode</text>\n", "y=\"36\">spec_decode</text>\n", "y=\"36\">draft</text>\n",
        "y=\"36\">layer_range mode=exact</text>\n", "y=\"36\">layer_range mode=decode</text>\n",
        "y=\"36\">layer_range mode=verify</text>\n", "y=\"36\">other tools' ranges</text>\n",
        "<rect class=\"c11\" x=\"940\" y=\"27\" width=\"10\" height=\"10\"/><text x=\"954\" y=\"36\">GPU kernel</text>\n"};
    for (size_t i = 0; i < sizeof legend / sizeof legend[0]; i++)
        CHECK_INT_EQ(count(buf, legend[i]), 1);
    CHECK(strstr(buf, ">batch</text>") == NULL);
    CHECK(strstr(buf, ">GPU copy</text>") == NULL);
    CHECK(strstr(buf, "Pale bars") == NULL); /* every range is wider than a pixel */
    CHECK_INT_EQ(count(buf, "</title></rect>\n"), 16);
    free(buf);
    return pm_check_result();
}

/* A name with markup, a control character and invalid UTF-8: entities and
 * U+FFFD in the tooltip and in the label. */
static int case_svg_escape(void)
{
    char *buf = render_ok(pmt_svg, NULL);
    REQUIRE(buf);
    CHECK(strstr(buf, "<title>a&lt;b&amp;c\xef\xbf\xbd\xef\xbf\xbd (900 ns)</title></rect>\n") != NULL);
    CHECK(strstr(buf, ">a&lt;b&amp;c\xef\xbf\xbd\xef\xbf\xbd</text>\n") != NULL);
    CHECK(strstr(buf, "a<b") == NULL);
    CHECK(strstr(buf, "\xff") == NULL);
    free(buf);
    return pm_check_result();
}

/* The HTML file holds the same picture and nothing that loads anything. */
static int case_html(void)
{
    size_t n;
    char *buf = render_ok(pmt_html, &n);
    REQUIRE(buf);
    static const char head[] = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                               "<title>phasemark timeline</title>";
    CHECK(strncmp(buf, head, sizeof head - 1) == 0);
    CHECK(n > 22 && strcmp(buf + n - 22, "</svg>\n</body></html>\n") == 0);
    CHECK(strstr(buf, "<?xml") == NULL);
    CHECK_INT_EQ(count(buf, "<script"), 0);
    CHECK_INT_EQ(count(buf, "href="), 0);
    CHECK_INT_EQ(count(buf, "src="), 0);
    CHECK_INT_EQ(count(buf, "url("), 0);
    CHECK_INT_EQ(count(buf, "http"), 1); /* the SVG namespace, which is a name, not a fetch */
    CHECK_INT_EQ(count(buf, "text-anchor=\"middle\">"), 9);
    free(buf);
    return pm_check_result();
}

/* report --html and --svg write the picture; a missing path is a usage
 * error that names the option. */
static int case_cli(void)
{
    static pm_child_result r;
    char dir[] = "/tmp/pm-timeline-cli.XXXXXX", html[64], svg[64], err[200];
    REQUIRE(mkdtemp(dir));
    snprintf(html, sizeof html, "%s/t.html", dir);
    snprintf(svg, sizeof svg, "%s/t.svg", dir);
    char *argv[] = {PM_TOOL, "report", "--html", html, "--svg", svg, FIX("ok.csv"), NULL};
    REQUIRE(pm_child_exec(argv, NULL, 10000, &r) == 0);
    CHECK(pm_child_ok(&r));
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK(pmt_read_file(html, 1u << 20, &a, &na, err, sizeof err) == 0);
    CHECK(pmt_read_file(svg, 1u << 20, &b, &nb, err, sizeof err) == 0);
    CHECK(a && strncmp(a, "<!DOCTYPE html>\n", 16) == 0);
    CHECK(b && strncmp(b, "<?xml ", 6) == 0);
    CHECK(a && b && strstr(a, strstr(b, "<svg ")) != NULL); /* the same picture inside */
    free(a), free(b);
    unlink(html), unlink(svg);
    rmdir(dir);
    char *bad[] = {PM_TOOL, "report", FIX("ok.csv"), "--html", NULL};
    REQUIRE(pm_child_exec(bad, NULL, 10000, &r) == 0);
    CHECK(r.exited && r.exit_code == 2);
    CHECK(strncmp(r.err, "phasemark report: --html needs a value\n", 39) == 0);
    return pm_check_result();
}

static char *render_large(size_t *len)
{
    pmt_trace t;
    pmt_trace_init(&t);
    char *buf = NULL;
    if (pmt_synth_serving(&t, 100, 2499) == 0 && t.n == 1000000)
        buf = render(pmt_html, &t, NULL, len);
    pmt_trace_free(&t);
    return buf;
}

/* 1M ranges over 9.989978 s (the last decode step ends 99 * 100 ms +
 * 40 ms + 2498 * 20 us + 18 us after the first start; 7135.699 us a pixel): the 100 prefills and their 300
 * shard ranges are bars, the 999,600 decode-step ranges density bars whose
 * counts add up exactly; at most one density bar per column of the 3 rows;
 * the file stays under 1 MB. */
static int case_lod_large(void)
{
    size_t n;
    char *buf = render_large(&n);
    REQUIRE(buf);
    CHECK(n < 1000000);
    CHECK_INT_EQ(count(buf, "<title>pm.prefill "), 100);
    CHECK_INT_EQ(count(buf, "<title>pm.layer_range mode=exact"), 300);
    CHECK_INT_EQ(count(buf, "<title>pm."), 400);
    uint64_t sum = 0;
    size_t bars = 0;
    for (const char *p = buf; (p = strstr(p, "<title>")); p += 7) {
        char *end;
        unsigned long long v = strtoull(p + 7, &end, 10);
        if (end != p + 7 && strncmp(end, " ranges under 1 px, ", 20) == 0)
            sum += v, bars++;
    }
    CHECK_U64_EQ(sum, 999600);
    CHECK(bars > 0 && bars <= 3 * PMT_TIMELINE_WIDTH);
    CHECK(strstr(buf, "text-anchor=\"middle\">9 s</text>") != NULL);
    CHECK(strstr(buf, "Pale bars: ranges narrower than one pixel (7135.699 us)") != NULL);
    CHECK(strstr(buf, ">server (pm-server) \xc2\xb7 pid 100") == NULL); /* the thread's name is shown */
    CHECK(strstr(buf, ">server \xc2\xb7 pid 100 \xc2\xb7 tid 100</text>") != NULL);
    free(buf);
    return pm_check_result();
}

static int exists_exec(const char *p)
{
    return p && *p && access(p, X_OK) == 0;
}

/* Headless Chromium opens the 1M-range picture from a file:// URL: the
 * screenshot is a 1400x900 PNG of more than 1000 bytes, and the DOM it
 * built holds the axis's last tick, a lane's name and the whole SVG. */
static int case_browser(const char *chromium)
{
    if (!exists_exec(chromium))
        PM_SKIP("chromium is not installed (Debian: apt-get install chromium; scripts/deps)");
    char dir[] = "/tmp/pm-timeline-browser.XXXXXX";
    REQUIRE(mkdtemp(dir));
    char html[64], png[64], dom[64], prof[64], cmd[4096];
    snprintf(html, sizeof html, "%s/large.html", dir);
    snprintf(png, sizeof png, "%s/shot.png", dir);
    snprintf(dom, sizeof dom, "%s/dom.html", dir);
    snprintf(prof, sizeof prof, "%s/profile", dir);
    size_t n;
    char *buf = render_large(&n);
    REQUIRE(buf);
    FILE *f = fopen(html, "w");
    REQUIRE(f && fwrite(buf, 1, n, f) == n && fclose(f) == 0);
    free(buf);
    static const char flags[] = "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
                                "--disable-background-networking --disable-component-update "
                                "--disable-sync --window-size=1400,900";
    /* Each run is bounded by timeout(1) as well, so that a hung browser is
     * killed with its own children, not only the shell. */
    snprintf(cmd, sizeof cmd, "timeout -k 5 40 '%s' %s --user-data-dir='%s' --screenshot='%s' 'file://%s' "
             ">/dev/null 2>&1 && timeout -k 5 40 '%s' %s --user-data-dir='%s' --dump-dom 'file://%s' "
             ">'%s' 2>/dev/null; "
             "st=$?; rm -rf '%s'; exit $st",
             chromium, flags, prof, png, html, chromium, flags, prof, html, dom, prof);
    static pm_child_result r;
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    char how[80];
    REQUIRE(pm_child_exec(argv, NULL, 90000, &r) == 0);
    if (!pm_child_ok(&r))
        fprintf(stderr, "chromium: %s\n", pm_child_describe(&r, how, sizeof how));
    CHECK(pm_child_ok(&r));
    char *shot = NULL, *d = NULL;
    size_t ns = 0, nd = 0;
    char err[200];
    CHECK(pmt_read_file(png, 64u << 20, &shot, &ns, err, sizeof err) == 0);
    CHECK(ns > 1000 && shot && memcmp(shot, "\x89PNG\r\n\x1a\n", 8) == 0);
    /* The IHDR chunk: width and height big-endian, the window's size. */
    CHECK(ns > 24 && memcmp(shot + 12, "IHDR\0\0\x05\x78\0\0\x03\x84", 12) == 0);
    CHECK(pmt_read_file(dom, 64u << 20, &d, &nd, err, sizeof err) == 0);
    CHECK(d && strstr(d, ">9 s</text>") != NULL);
    CHECK(d && strstr(d, "server \xc2\xb7 pid 100 \xc2\xb7 tid 100") != NULL);
    CHECK(d && strstr(d, "</svg>") != NULL);
    free(shot), free(d);
    if (pm_check_failures == 0) {
        unlink(html), unlink(png), unlink(dom);
        rmdir(dir);
    } else {
        fprintf(stderr, "kept %s for a look\n", dir);
    }
    return pm_check_result();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {{"perfetto_names", case_perfetto_names}, {"perfetto_roundtrip", case_perfetto_roundtrip},
                 {"lane_roles", case_lane_roles}, {"svg_axis", case_svg_axis},
                 {"svg_lanes", case_svg_lanes}, {"svg_escape", case_svg_escape},
                 {"html", case_html}, {"cli", case_cli}, {"lod_large", case_lod_large}};
    if (argc >= 2 && strcmp(argv[1], "browser") == 0)
        return case_browser(argc > 2 ? argv[2] : NULL);
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: test_timeline CASE [CHROMIUM]\n");
    return 2;
}
