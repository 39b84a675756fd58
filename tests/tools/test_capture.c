/* test_capture.c — `phasemark capture` end to end: the real marker layer
 * (PHASEMARK=1, ROCTX path; PHASEMARK=nvtx, NVTX injection path) in
 * capture_prog, recorded by the preloaded recorder, merged into the marker
 * CSV and the Chrome JSON. Expected rows come from what capture_prog does
 * (range names as docs/markers.md writes them, its own pids and tids), not from the tool.
 *
 * usage: test_capture TOOL PROG CASE
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pm_check.h"
#include "pm_child.h"
#include "pmraw.h"
#include "pmt.h"

#define HEADER "\"Domain\",\"Function\",\"Process_Id\",\"Thread_Id\",\"Correlation_Id\"," \
               "\"Start_Timestamp\",\"End_Timestamp\""

static const char *g_tool, *g_prog;
static char g_dir[256], g_ids[300];
static pm_child_result g_res;
static char *g_extra_env; /* one more "K=V" for CMD, or NULL */
static int g_keep_raw;    /* capture with --keep-raw */

typedef struct row {
    char domain[64], name[160];
    unsigned long long pid, tid, corr, start, end;
    int has_start, has_end;
} row;

typedef struct ids {
    int main_pid, main_tid, worker_tid, child_pid;
} ids;

/* Splits one of our CSV lines (no commas or quotes inside names). */
static int split_row(char *line, row *r)
{
    char *f[7];
    int n = 0;
    for (char *p = line; n < 7; n++) {
        f[n] = p;
        char *c = strchr(p, ',');
        if (!c) {
            n++;
            break;
        }
        *c = 0;
        p = c + 1;
    }
    if (n != 7)
        return -1;
    for (int i = 0; i < 2; i++) {
        size_t l = strlen(f[i]);
        if (l < 2 || f[i][0] != '"' || f[i][l - 1] != '"')
            return -1;
        f[i][l - 1] = 0;
        f[i]++;
    }
    snprintf(r->domain, sizeof r->domain, "%s", f[0]);
    snprintf(r->name, sizeof r->name, "%s", f[1]);
    r->pid = strtoull(f[2], NULL, 10);
    r->tid = strtoull(f[3], NULL, 10);
    r->corr = strtoull(f[4], NULL, 10);
    r->has_start = *f[5] != 0;
    r->has_end = *f[6] != 0;
    r->start = strtoull(f[5], NULL, 10);
    r->end = strtoull(f[6], NULL, 10);
    return 0;
}

/* The marker CSV's rows; exits when the header is not rocprofv3's. */
static size_t read_rows(row *rows, size_t max)
{
    char path[400], line[512];
    snprintf(path, sizeof path, "%s/marker_api_trace.csv", g_dir);
    FILE *f = fopen(path, "r");
    REQUIRE(f != NULL);
    REQUIRE(fgets(line, sizeof line, f) != NULL);
    line[strcspn(line, "\n")] = 0;
    CHECK_STR_EQ(line, HEADER);
    size_t n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        REQUIRE(split_row(line, &rows[n]) == 0);
        n++;
    }
    fclose(f);
    return n;
}

static ids read_ids(void)
{
    ids v = {0, 0, 0, 0};
    char line[128];
    FILE *f = fopen(g_ids, "r");
    REQUIRE(f != NULL);
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "main %d %d", &v.main_pid, &v.main_tid) == 2)
            continue;
        if (sscanf(line, "worker %d", &v.worker_tid) == 1)
            continue;
        sscanf(line, "child %d", &v.child_pid);
    }
    fclose(f);
    return v;
}

static const char *g_env_opt; /* capture --env NAME, or NULL */

/* phasemark_env NULL: PHASEMARK unset; a string starting "-" unsets. */
static int capture(const char *mode, const char *phasemark_env)
{
    char env_pm[64];
    if (phasemark_env)
        snprintf(env_pm, sizeof env_pm, "PHASEMARK=%s", phasemark_env);
    else
        snprintf(env_pm, sizeof env_pm, "-PHASEMARK");
    char *env[] = {env_pm, g_extra_env, NULL};
    char *argv[12];
    int n = 0;
    argv[n++] = (char *)g_tool;
    argv[n++] = "capture";
    argv[n++] = "-o";
    argv[n++] = g_dir;
    if (g_keep_raw)
        argv[n++] = "--keep-raw";
    if (g_env_opt) {
        argv[n++] = "--env";
        argv[n++] = (char *)g_env_opt;
    }
    argv[n++] = "--";
    argv[n++] = (char *)g_prog;
    argv[n++] = g_ids;
    argv[n++] = (char *)mode;
    argv[n] = NULL;
    REQUIRE(pm_child_exec(argv, env, 30000, &g_res) == 0);
    if (g_res.exited && g_res.exit_code == 1 && strstr(g_res.err, "exited with status 77"))
        PM_SKIP("markers compiled out");
    return g_res.exited ? g_res.exit_code : -1;
}

static void expect_row(const row *r, const char *domain, const char *name, int pid, int tid)
{
    CHECK_STR_EQ(r->domain, domain);
    CHECK_STR_EQ(r->name, name);
    CHECK_INT_EQ(r->pid, pid);
    CHECK_INT_EQ(r->tid, tid);
    CHECK(r->has_start && r->has_end);
    CHECK(r->start <= r->end);
    CHECK(r->corr != 0);
}

#define PREFILL "pm.prefill mode=exact req=1 pos=0 tokens=4"
#define LAYERS "pm.layer_range mode=exact layers=0-3 shard=0 where=local backend=cpu req=1 tokens=4"

/* The rows of capture_prog basic, in time order. */
static void check_basic_rows(const char *domain)
{
    row rows[16];
    size_t n = read_rows(rows, 16);
    ids v = read_ids();
    REQUIRE(n == 7);
    expect_row(&rows[0], domain, PREFILL, v.main_pid, v.main_tid);
    expect_row(&rows[1], domain, LAYERS, v.main_pid, v.main_tid);
    expect_row(&rows[2], domain, "pm.decode mode=decode req=1 pos=4", v.main_pid, v.main_tid);
    expect_row(&rows[3], domain, "pm.decode mode=decode req=1 pos=5", v.main_pid, v.main_tid);
    expect_row(&rows[4], domain, "worker step", v.main_pid, v.worker_tid);
    expect_row(&rows[5], domain, "pm.spec_decode mode=batched req=2 draft=2", v.child_pid, v.child_pid);
    expect_row(&rows[6], domain, "pm.draft req=2 tokens=2", v.child_pid, v.child_pid);
    /* Nesting as the program made it. */
    CHECK(rows[0].start <= rows[1].start && rows[1].end <= rows[0].end);
    CHECK(rows[5].start <= rows[6].start && rows[6].end <= rows[5].end);
    CHECK(rows[0].end <= rows[2].start && rows[2].end <= rows[3].start);
    CHECK(rows[0].corr != rows[1].corr && rows[2].corr != rows[3].corr);
    CHECK(v.child_pid != v.main_pid && v.worker_tid != v.main_tid);
}

static int case_basic_csv(void)
{
    CHECK_INT_EQ(capture("basic", "1"), 0);
    check_basic_rows("MARKER_CORE_API");
    return pm_check_result();
}

/* The JSON holds the same ranges as the CSV, as complete events in µs. */
static int case_basic_json(void)
{
    CHECK_INT_EQ(capture("basic", "1"), 0);
    row rows[16];
    size_t n = read_rows(rows, 16);
    REQUIRE(n == 7);
    char path[400], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/trace.json", g_dir);
    REQUIRE(pmt_read_file(path, 1 << 24, &text, &len, NULL, 0) == 0);
    pmt_json j;
    REQUIRE(pmt_json_parse(&j, text, len, NULL, 0) == 0);
    const pmt_jnode *ev = pmt_json_child(&j, pmt_json_get(&j, &j.nodes[0], "traceEvents"));
    size_t x = 0, procs = 0, threads = 0;
    for (; ev; ev = pmt_json_next(&j, ev)) {
        const pmt_jnode *ph = pmt_json_get(&j, ev, "ph"), *nm = pmt_json_get(&j, ev, "name");
        REQUIRE(ph && nm);
        if (ph->str[0] == 'M') {
            procs += strcmp(nm->str, "process_name") == 0;
            threads += strcmp(nm->str, "thread_name") == 0;
            continue;
        }
        CHECK_STR_EQ(ph->str, "X");
        REQUIRE(x < n);
        const row *r = &rows[x++];
        CHECK_STR_EQ(nm->str, r->name);
        const pmt_jnode *ts = pmt_json_get(&j, ev, "ts"), *dur = pmt_json_get(&j, ev, "dur");
        char want[64];
        snprintf(want, sizeof want, "%llu.%03llu", r->start / 1000, r->start % 1000);
        CHECK(ts && ts->len == strlen(want) && memcmp(ts->str, want, ts->len) == 0);
        snprintf(want, sizeof want, "%llu.%03llu", (r->end - r->start) / 1000, (r->end - r->start) % 1000);
        CHECK(dur && dur->len == strlen(want) && memcmp(dur->str, want, dur->len) == 0);
        char pid[32];
        snprintf(pid, sizeof pid, "%llu", r->pid);
        const pmt_jnode *jp = pmt_json_get(&j, ev, "pid");
        CHECK(jp && jp->len == strlen(pid) && memcmp(jp->str, pid, jp->len) == 0);
    }
    CHECK_INT_EQ(x, 7);
    CHECK(procs >= 2);   /* the main process and the forked child */
    CHECK(threads >= 3); /* main, worker, child */
    pmt_json_free(&j);
    free(text);
    return pm_check_result();
}

/* A process killed by abort() still leaves what it recorded. */
static int case_abort(void)
{
    CHECK_INT_EQ(capture("abort", "1"), 1);
    CHECK(strstr(g_res.err, "killed by signal 6") != NULL);
    row rows[8];
    size_t n = read_rows(rows, 8);
    ids v = read_ids();
    REQUIRE(n == 2);
    expect_row(&rows[0], "MARKER_CORE_API", "pm.decode mode=decode req=1 pos=7", v.main_pid, v.main_tid);
    CHECK_STR_EQ(rows[1].name, "pm.prefill mode=exact req=1 pos=0 tokens=8");
    CHECK(rows[1].has_start && !rows[1].has_end); /* open when the process died */
    return pm_check_result();
}

/* A child that execs is followed: the new image is recorded, same pid. */
static int case_exec(void)
{
    CHECK_INT_EQ(capture("exec", "1"), 0);
    row rows[8];
    size_t n = read_rows(rows, 8);
    ids v = read_ids();
    REQUIRE(n == 2);
    expect_row(&rows[0], "MARKER_CORE_API", "pm.decode mode=decode req=3 pos=1", v.main_pid, v.main_tid);
    expect_row(&rows[1], "MARKER_CORE_API", "pm.prefill mode=exact req=4 pos=0 tokens=2",
               v.child_pid, v.child_pid);
    return pm_check_result();
}

/* PHASEMARK=nvtx: the marker layer's NVTX backend reaches the recorder
 * through NVTX_INJECTION64_PATH. */
static int case_nvtx(void)
{
    int rc = capture("basic", "nvtx");
    if (rc == 0 && strstr(g_res.err, " 0 ranges"))
        PM_SKIP("the marker layer has no NVTX backend in this build");
    CHECK_INT_EQ(rc, 0);
    row rows[16];
    size_t n = read_rows(rows, 16);
    REQUIRE(n == 7);
    CHECK(strcmp(rows[0].domain, "MARKER_CORE_API") != 0);
    check_basic_rows(rows[0].domain);
    return pm_check_result();
}

/* The capture passes `check` with the exact counts the program makes. */
static int case_check(void)
{
    CHECK_INT_EQ(capture("basic", "1"), 0);
    char path[400];
    snprintf(path, sizeof path, "%s/marker_api_trace.csv", g_dir);
    char *argv[] = {(char *)g_tool, "check", "--expect",
                    "prefill=1,layer_range:exact=1,decode=2,spec_decode=1,draft=1,other=1", path, NULL};
    REQUIRE(pm_child_exec(argv, NULL, 10000, &g_res) == 0);
    CHECK(pm_child_ok(&g_res));
    CHECK(strstr(g_res.out, "ok: 7 ranges") != NULL);
    snprintf(path, sizeof path, "%s/trace.json", g_dir);
    char *argv2[] = {(char *)g_tool, "check", "--expect", "decode=2", path, NULL};
    REQUIRE(pm_child_exec(argv2, NULL, 10000, &g_res) == 0);
    CHECK(pm_child_ok(&g_res));
    return pm_check_result();
}

/* Many ranges on several threads: none lost across buffer flushes. */
static int case_threads(void)
{
    CHECK_INT_EQ(capture("threads", "1"), 0);
    char path[400];
    snprintf(path, sizeof path, "%s/marker_api_trace.csv", g_dir);
    char *argv[] = {(char *)g_tool, "check", "--expect", "decode=80000,decode:decode=80000", path, NULL};
    REQUIRE(pm_child_exec(argv, NULL, 30000, &g_res) == 0);
    CHECK(pm_child_ok(&g_res));
    CHECK(strstr(g_res.out, "ok: 80000 ranges") != NULL);
    pmt_trace t;
    pmt_trace_init(&t);
    REQUIRE(pmt_trace_load(&t, path, NULL, 0) == 0);
    /* Per thread, positions 0..19999 in order, each exactly once. */
    uint32_t tids[4] = {0, 0, 0, 0}, next[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < t.n; i++) {
        pmt_name nm;
        REQUIRE(pmt_name_parse(t.r[i].name, &nm, NULL, 0) == 0);
        uint64_t req = nm.attr[PM__KEY_REQ].u, k = req - 10;
        REQUIRE(k < 4);
        if (!tids[k])
            tids[k] = t.r[i].tid;
        CHECK_INT_EQ(t.r[i].tid, tids[k]);
        char want[80];
        snprintf(want, sizeof want, "pm.decode mode=decode req=%llu pos=%u", (unsigned long long)req, next[k]++);
        if (strcmp(t.r[i].name, want) != 0) {
            CHECK_STR_EQ(t.r[i].name, want);
            break;
        }
    }
    for (int k = 0; k < 4; k++)
        CHECK_INT_EQ(next[k], 20000);
    pmt_trace_free(&t);
    return pm_check_result();
}

/* A program that closes every descriptor (a daemon) and reuses the
 * numbers: its ranges still reach the capture, its own file stays clean. */
static int case_closefds(void)
{
    CHECK_INT_EQ(capture("closefds", "1"), 0);
    char path[400];
    snprintf(path, sizeof path, "%s/marker_api_trace.csv", g_dir);
    char *argv[] = {(char *)g_tool, "check", "--expect", "decode=2999", path, NULL};
    REQUIRE(pm_child_exec(argv, NULL, 30000, &g_res) == 0);
    CHECK(pm_child_ok(&g_res));
    char victim[400], *text;
    size_t len;
    snprintf(victim, sizeof victim, "%s.victim", g_ids);
    REQUIRE(pmt_read_file(victim, 1 << 20, &text, &len, NULL, 0) == 0);
    CHECK_STR_EQ(text, "victim\n");
    free(text);
    return pm_check_result();
}

/* ---- timestamps against the real clock (capture_prog clock) ---- */

#define CLOCK_MAIN 80000 /* ranges per req, as capture_prog makes them */
#define CLOCK_OTHER 3000
/* How far a recorded time may lie outside the CLOCK_BOOTTIME readings
 * taken around it when ticks are TSC counts: the error of the calibration
 * points (half the narrowest of four brackets, tens of ns) plus an
 * unfenced TSC read running a few ns ahead of the instructions before it.
 * 500 ns leaves an order of magnitude of room. With the BOOTTIME clock the
 * recorder's stamps are readings of the same clock, in program order, so
 * they lie within the bracket exactly. */
#define TSC_TOLERANCE_NS 500

typedef struct clock_row {
    uint64_t before, middle, after; /* capture_prog's readings */
    uint64_t start, end;            /* the recorded range */
    int seen;
} clock_row;

/* The clock every raw file of the capture says it used (the raw folder is
 * removed afterwards), or -1 when they differ or none is found. */
static int raw_clock(void)
{
    int clock = -1, files = 0;
    DIR *d = opendir(g_dir);
    REQUIRE(d != NULL);
    char rawdir[600] = "";
    for (struct dirent *e; (e = readdir(d));)
        if (strncmp(e->d_name, "raw.", 4) == 0)
            snprintf(rawdir, sizeof rawdir, "%s/%s", g_dir, e->d_name);
    closedir(d);
    REQUIRE(rawdir[0] != 0);
    d = opendir(rawdir);
    REQUIRE(d != NULL);
    for (struct dirent *e; (e = readdir(d));) {
        if (!strstr(e->d_name, ".pmraw"))
            continue;
        char path[900], *text;
        size_t len;
        pmr_file_hdr h;
        snprintf(path, sizeof path, "%s/%s", rawdir, e->d_name);
        REQUIRE(pmt_read_file(path, (size_t)1 << 26, &text, &len, NULL, 0) == 0);
        REQUIRE(len >= sizeof h);
        memcpy(&h, text, sizeof h);
        free(text);
        clock = (files++ == 0 || clock == (int)h.clock) ? (int)h.clock : -2;
    }
    closedir(d);
    pmt_remove_tree(rawdir);
    CHECK_INT_EQ(files, 2); /* the process and its forked child */
    return clock < 0 ? -1 : clock;
}

/* Reads capture_prog's readings and the recorded ranges into rows[req-7][pos]. */
static void load_clock_rows(clock_row *rows[3])
{
    char path[400], line[256];
    snprintf(path, sizeof path, "%s.clock", g_ids);
    FILE *f = fopen(path, "r");
    REQUIRE(f != NULL);
    size_t n = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long req, b, m, a;
        unsigned pos;
        REQUIRE(sscanf(line, "%llu %u %llu %llu %llu", &req, &pos, &b, &m, &a) == 5);
        REQUIRE(req >= 7 && req <= 9 && pos < (req == 7 ? CLOCK_MAIN : CLOCK_OTHER));
        rows[req - 7][pos] = (clock_row){b, m, a, 0, 0, 0};
        n++;
    }
    fclose(f);
    CHECK_INT_EQ(n, CLOCK_MAIN + 2 * CLOCK_OTHER);
    pmt_trace t;
    pmt_trace_init(&t);
    snprintf(path, sizeof path, "%s/marker_api_trace.csv", g_dir);
    REQUIRE(pmt_trace_load(&t, path, NULL, 0) == 0);
    CHECK_INT_EQ(t.n, CLOCK_MAIN + 2 * CLOCK_OTHER);
    for (size_t i = 0; i < t.n; i++) {
        unsigned long long req;
        unsigned pos;
        REQUIRE(sscanf(t.r[i].name, "pm.decode mode=decode req=%llu pos=%u", &req, &pos) == 2);
        REQUIRE(req >= 7 && req <= 9 && pos < (req == 7 ? CLOCK_MAIN : CLOCK_OTHER));
        clock_row *r = &rows[req - 7][pos];
        CHECK_INT_EQ(r->seen, 0);
        r->seen = 1;
        r->start = t.r[i].start;
        r->end = t.r[i].end;
    }
    pmt_trace_free(&t);
}

/* How far x lies outside [lo, hi], in ns (0 inside). */
static uint64_t outside(uint64_t x, uint64_t lo, uint64_t hi)
{
    return x < lo ? lo - x : x > hi ? x - hi : 0;
}

/* Every range's start lies between the readings before its push and
 * after it, its end between the readings before and after its pop, both
 * within tol; and each thread's times never go backwards. */
static void check_clock_rows(clock_row *rows[3], uint64_t tol, const char *what)
{
    uint64_t worst = 0;
    for (int k = 0; k < 3; k++) {
        uint32_t n = k == 0 ? CLOCK_MAIN : CLOCK_OTHER;
        for (uint32_t pos = 0; pos < n; pos++) {
            const clock_row *r = &rows[k][pos];
            REQUIRE(r->seen);
            uint64_t off = outside(r->start, r->before, r->middle);
            uint64_t off_end = outside(r->end, r->middle, r->after);
            off = off > off_end ? off : off_end;
            worst = off > worst ? off : worst;
            if (off > tol) {
                fprintf(stderr, "req %d pos %u: readings %llu %llu %llu, range %llu-%llu\n", k + 7,
                        pos, (unsigned long long)r->before, (unsigned long long)r->middle,
                        (unsigned long long)r->after, (unsigned long long)r->start,
                        (unsigned long long)r->end);
                CHECK(off <= tol);
                return;
            }
            CHECK(r->start <= r->end);
            if (pos > 0)
                CHECK(rows[k][pos - 1].end <= r->start);
        }
    }
    fprintf(stderr, "%s: %d ranges, worst distance outside the readings %llu ns (allowed %llu)\n",
            what, CLOCK_MAIN + 2 * CLOCK_OTHER, (unsigned long long)worst, (unsigned long long)tol);
}

static int clock_case(const char *force, int want_clock)
{
    static clock_row main_rows[CLOCK_MAIN], worker_rows[CLOCK_OTHER], child_rows[CLOCK_OTHER];
    clock_row *rows[3] = {main_rows, worker_rows, child_rows};
    g_extra_env = (char *)force;
    g_keep_raw = 1;
    CHECK_INT_EQ(capture("clock", "1"), 0);
    int clock = raw_clock();
    CHECK(clock == PMR_CLOCK_BOOTTIME || clock == PMR_CLOCK_TSC);
    if (want_clock >= 0)
        CHECK_INT_EQ(clock, want_clock);
    load_clock_rows(rows);
    check_clock_rows(rows, clock == PMR_CLOCK_TSC ? TSC_TOLERANCE_NS : 0,
                     clock == PMR_CLOCK_TSC ? "tsc" : "boottime");
    return pm_check_result();
}

/* The default clock: the TSC where the machine allows it. */
static int case_clock(void)
{
    return clock_case(NULL, -1);
}

/* PHASEMARK_RECORDER_CLOCK=boottime: clock_gettime for every event. */
static int case_clock_boottime(void)
{
    return clock_case("PHASEMARK_RECORDER_CLOCK=boottime", PMR_CLOCK_BOOTTIME);
}

/* A folder holding files is refused; --force removes a previous capture's
 * outputs (a stale kernel_trace.csv among them) and keeps other files. */
static int case_dirty(void)
{
    char path[512], stale[512], keep[512];
    snprintf(stale, sizeof stale, "%s/kernel_trace.csv", g_dir);
    snprintf(keep, sizeof keep, "%s/notes.txt", g_dir);
    FILE *f = fopen(stale, "w");
    REQUIRE(f);
    fputs("\"Kernel_Name\",\"Correlation_Id\",\"Start_Timestamp\",\"End_Timestamp\"\n\"old\",1,1,2\n", f);
    fclose(f);
    f = fopen(keep, "w");
    REQUIRE(f);
    fclose(f);
    CHECK_INT_EQ(capture("basic", "1"), 1);
    CHECK(strstr(g_res.err, "phasemark capture: ") == g_res.err);
    CHECK(strstr(g_res.err, " is not empty (holds ") != NULL);
    snprintf(path, sizeof path, "%s/marker_api_trace.csv", g_dir);
    CHECK(access(path, F_OK) != 0);
    char *env[] = {"PHASEMARK=1", NULL};
    char *argv[] = {(char *)g_tool, "capture", "-o", g_dir, "--force", "--", (char *)g_prog,
                    g_ids, "basic", NULL};
    REQUIRE(pm_child_exec(argv, env, 30000, &g_res) == 0);
    if (g_res.exited && g_res.exit_code == 1 && strstr(g_res.err, "exited with status 77"))
        PM_SKIP("markers compiled out");
    CHECK(pm_child_ok(&g_res));
    CHECK(strstr(g_res.err, "--force: removed 1 previous output(s) from ") != NULL);
    CHECK(access(stale, F_OK) != 0);
    CHECK(access(keep, F_OK) == 0);
    CHECK(access(path, R_OK) == 0);
    return pm_check_result();
}

/* The seed's names through capture --env and check's prefix detection:
 * exact counts, the phase rules across the forked shard processes. */
static int case_seed(void)
{
    static char extra[] = "DFLASH_DS4_ROCTX=1";
    g_extra_env = extra;
    g_env_opt = "DFLASH_DS4_ROCTX";
    CHECK_INT_EQ(capture("seed", "0"), 0); /* PHASEMARK=0 is not the seed's variable */
    char path[400];
    snprintf(path, sizeof path, "%s/marker_api_trace.csv", g_dir);
    char *argv[] = {(char *)g_tool, "check", "--expect",
                    "prefill=1,decode=1,spec_decode=1,draft=1,batch=1,batch:decode=1,"
                    "layer_range:exact=2,layer_range:decode=3,layer_range:verify=1,other=0",
                    path, NULL};
    REQUIRE(pm_child_exec(argv, NULL, 10000, &g_res) == 0);
    CHECK(pm_child_ok(&g_res));
    CHECK(strstr(g_res.out, "ok: 11 ranges") != NULL);
    if (!pm_child_ok(&g_res))
        fprintf(stderr, "check:\n%s\n%s\n", g_res.out, g_res.err);
    /* Told the other prefix, the same trace is eleven foreign ranges. */
    char *argv2[] = {(char *)g_tool, "check", "--prefix", "pm", "--expect", "other=11", path, NULL};
    REQUIRE(pm_child_exec(argv2, NULL, 10000, &g_res) == 0);
    CHECK(pm_child_ok(&g_res));
    return pm_check_result();
}

/* An explicit off value makes a control run: the recorder is loaded, the
 * program runs, no range is recorded and no marker trace is written. */
static int control_case(const char *env_opt, const char *seed_value)
{
    static char extra[64];
    g_env_opt = env_opt;
    if (seed_value) {
        snprintf(extra, sizeof extra, "DFLASH_DS4_ROCTX=%s", seed_value);
        g_extra_env = extra;
    }
    CHECK_INT_EQ(capture(seed_value ? "seed" : "basic", seed_value ? "1" : "0"), 0);
    char path[400];
    snprintf(path, sizeof path, "%s/marker_api_trace.csv", g_dir);
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/trace.json", g_dir);
    CHECK(access(path, F_OK) != 0);
    CHECK(strstr(g_res.err, "control run (") != NULL);
    return pm_check_result();
}

static int case_control(void) { return control_case(NULL, NULL); }
static int case_control_seed(void) { return control_case("DFLASH_DS4_ROCTX", "0"); }

/* PHASEMARK unset: capture turns markers on. */
static int case_unset_on(void)
{
    CHECK_INT_EQ(capture("basic", NULL), 0);
    check_basic_rows("MARKER_CORE_API");
    return pm_check_result();
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    g_tool = argv[1];
    g_prog = argv[2];
    snprintf(g_dir, sizeof g_dir, "/tmp/pm-capture-test.XXXXXX");
    REQUIRE(mkdtemp(g_dir) != NULL);
    /* Beside the output folder, which capture wants empty. */
    snprintf(g_ids, sizeof g_ids, "%s.ids", g_dir);
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {{"basic_csv", case_basic_csv}, {"basic_json", case_basic_json},
                 {"abort", case_abort}, {"exec", case_exec}, {"nvtx", case_nvtx},
                 {"check", case_check}, {"threads", case_threads},
                 {"closefds", case_closefds}, {"clock", case_clock},
                 {"clock_boottime", case_clock_boottime}, {"dirty", case_dirty},
                 {"seed", case_seed}, {"control", case_control},
                 {"control_seed", case_control_seed}, {"unset_on", case_unset_on}};
    int rc = 2;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[3], cases[i].name) == 0)
            rc = cases[i].fn();
    if (rc != 0)
        fprintf(stderr, "capture stderr:\n%s\n", g_res.err);
    pmt_remove_tree(g_dir);
    unlink(g_ids);
    return rc;
}
