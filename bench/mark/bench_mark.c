/* bench_mark.c — marker cost, side by side in one run (issue 2).
 *
 *   disabled_pair        push+pop with markers off at run time
 *   raw_pair             roctxRangePushA+roctxRangePop through function
 *                        pointers: the floor any marker layer pays
 *   enabled_pair         pm_range_push+pm_range_pop (text already formed)
 *                        into a no-op ROCTX: like for like with raw_pair
 *   enabled_prefill_pair structured push: adds formatting
 *   enabled_layer_pair   layer_range push: the longest text
 *
 * The marker decision is once per process, so each mode runs in its own
 * forked child (PHASEMARK=0, then PHASEMARK=1); the parent never
 * initializes the layer. Each case runs REPS times interleaved with its
 * comparison case; the median ns per pair is reported. One JSON object per
 * line; the last line holds the ratios.
 *
 *   bench_mark [reps]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "phasemark/mark.h"

int roctxRangePushA(const char *text);
int roctxRangePop(void);

enum { MAX_REPS = 64 };

static int (*volatile raw_push)(const char *) = roctxRangePushA;
static int (*volatile raw_pop)(void) = roctxRangePop;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

typedef double (*bench_fn)(long n);

static double run_disabled(long n)
{
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        pm_range r = pm_range_push("pm.bench");
        pm_range_pop(&r);
    }
    return (now_ns() - t0) / (double)n;
}

static double run_raw(long n)
{
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        raw_push("pm.bench");
        raw_pop();
    }
    return (now_ns() - t0) / (double)n;
}

static double run_enabled(long n)
{
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        pm_range r = pm_range_push("pm.bench");
        pm_range_pop(&r);
    }
    return (now_ns() - t0) / (double)n;
}

static double run_prefill(long n)
{
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        pm_range r = pm_prefill_push(3, (uint32_t)i, 512);
        pm_range_pop(&r);
    }
    return (now_ns() - t0) / (double)n;
}

static double run_layer(long n)
{
    pm_layer_attr a = PM_LAYER_ATTR_INIT;
    a.phase = PM_PHASE_VERIFY;
    a.first_layer = 12;
    a.last_layer = 23;
    a.shard = 1;
    a.where = PM_WHERE_REMOTE;
    a.backend = "cuda:0";
    a.req = 3;
    a.tokens = 5;
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        a.req = (uint64_t)i;
        pm_range r = pm_layer_range_push(&a);
        pm_range_pop(&r);
    }
    return (now_ns() - t0) / (double)n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct result {
    const char *name;
    double median, min, max;
} result;

static void summarize(result *r, double *v, int reps)
{
    qsort(v, (size_t)reps, sizeof v[0], cmp_double);
    r->median = reps % 2 ? v[reps / 2] : (v[reps / 2 - 1] + v[reps / 2]) / 2;
    r->min = v[0];
    r->max = v[reps - 1];
}

/* Runs the cases interleaved rep by rep, so drift from other load on the
 * machine hits each case alike. */
static void measure(const char *const *names, const bench_fn *fns, const long *iters,
                    int n_cases, int reps, result *out)
{
    static double v[8][MAX_REPS];
    for (int c = 0; c < n_cases; c++)
        fns[c](iters[c] / 10); /* warm-up: init, caches, branch predictors */
    for (int rep = 0; rep < reps; rep++)
        for (int c = 0; c < n_cases; c++)
            v[c][rep] = fns[c](iters[c]);
    for (int c = 0; c < n_cases; c++) {
        out[c].name = names[c];
        summarize(&out[c], v[c], reps);
    }
}

static void emit(FILE *f, const result *r, int reps, long iters)
{
    fprintf(f,
            "{\"bench\":\"mark\",\"case\":\"%s\",\"ns_per_pair_median\":%.3f,"
            "\"ns_min\":%.3f,\"ns_max\":%.3f,\"reps\":%d,\"pairs_per_rep\":%ld}\n",
            r->name, r->median, r->min, r->max, reps, iters);
}

/* Child for one mode: writes its result lines to fd, medians to *medians. */
static int child(const char *mode, int reps, int fd)
{
    setenv("PHASEMARK", mode, 1);
    FILE *f = fdopen(fd, "w");
    if (!f)
        return 1;
    result r[8];
    if (!strcmp(mode, "0")) {
        static const char *const names[] = {"disabled_pair"};
        static const bench_fn fns[] = {run_disabled};
        static const long iters[] = {200000000};
        measure(names, fns, iters, 1, reps, r);
        if (pm_enabled())
            return 1;
        emit(f, &r[0], reps, iters[0]);
    } else {
        static const char *const names[] = {"raw_pair", "enabled_pair", "enabled_prefill_pair",
                                            "enabled_layer_pair"};
        static const bench_fn fns[] = {run_raw, run_enabled, run_prefill, run_layer};
        static const long iters[] = {20000000, 20000000, 5000000, 5000000};
        measure(names, fns, iters, 4, reps, r);
        if (!pm_enabled() || strcmp(pm_backend_name(), "roctx") != 0)
            return 1;
        for (int c = 0; c < 4; c++)
            emit(f, &r[c], reps, iters[c]);
    }
    fclose(f);
    return 0;
}

/* Forks a child for mode and copies its lines to stdout; returns them. */
static int run_mode(const char *mode, int reps, char *buf, size_t cap)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(p[0]);
        _exit(child(mode, reps, p[1]));
    }
    close(p[1]);
    size_t used = 0;
    ssize_t n;
    while (used < cap - 1 && (n = read(p[0], buf + used, cap - 1 - used)) > 0)
        used += (size_t)n;
    buf[used] = '\0';
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    fputs(buf, stdout);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static double median_of(const char *lines, const char *name)
{
    char key[96];
    snprintf(key, sizeof key, "\"case\":\"%s\",\"ns_per_pair_median\":", name);
    const char *p = strstr(lines, key);
    return p ? strtod(p + strlen(key), NULL) : -1.0;
}

int main(int argc, char **argv)
{
    long reps = 7;
    if (argc > 1) {
        char *end = NULL;
        errno = 0;
        reps = strtol(argv[1], &end, 10);
        if (errno || !end || *end || reps < 1 || reps > MAX_REPS) {
            fprintf(stderr, "usage: bench_mark [reps 1..%d]\n", MAX_REPS);
            return 2;
        }
    }
    char off[1024], on[4096];
    if (run_mode("0", (int)reps, off, sizeof off) || run_mode("1", (int)reps, on, sizeof on)) {
        fprintf(stderr, "bench_mark: a measuring child failed\n");
        return 1;
    }
    double dis = median_of(off, "disabled_pair"), raw = median_of(on, "raw_pair");
    double en = median_of(on, "enabled_pair"), pre = median_of(on, "enabled_prefill_pair");
    double lay = median_of(on, "enabled_layer_pair");
    printf("{\"bench\":\"mark\",\"summary\":true,\"disabled_ns\":%.3f,\"raw_ns\":%.3f,"
           "\"enabled_ns\":%.3f,\"enabled_over_raw\":%.3f,\"prefill_format_ns\":%.3f,"
           "\"layer_format_ns\":%.3f,\"target_disabled_ns\":0.5,\"target_enabled_over_raw\":1.3}\n",
           dis, raw, en, en / raw, pre - en, lay - en);
    return 0;
}
