/* bench_timeline.c — the timeline picture of a large trace: file size and
 * time to write it, for the 1M-range generated serving trace
 * (pmt_synth_serving: 100 requests, a prefill and 2,499 decode steps each,
 * two shards, 4 ranges a forward).
 *
 * Measured per repetition, each its own phase:
 *   generate   building the trace in memory (not part of the tool's cost)
 *   csv        writing it as our marker CSV (once, for the next phase)
 *   load       reading that CSV back (what `report` does first)
 *   html, svg  rendering the picture to a file on disk
 * Times are wall-clock medians (the renderer does I/O), with this
 * process's CPU time beside them because the machine is shared. Output:
 * one JSON object per repetition, then one with the medians and sizes.
 * PM_BENCH_KEEP=1 keeps the files (their folder is named on stderr).
 * usage: bench_timeline [REQUESTS STEPS REPS] (defaults 100 2499 5)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pmt.h"

#define REPS_MAX 32

static double clock_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static int render(const pmt_trace *t, int html, const char *path)
{
    FILE *f = fopen(path, "w");
    int rc = f ? (html ? pmt_html(t, NULL, f) : pmt_svg(t, NULL, f)) : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    return rc;
}

static int parse_arg(const char *s, size_t *out)
{
    uint64_t v;
    if (pmt_parse_u64(s, strlen(s), &v) < 0 || v == 0 || v > 1000000)
        return -1;
    *out = (size_t)v;
    return 0;
}

int main(int argc, char **argv)
{
    size_t req = 100, steps = 2499, reps = 5;
    if (argc != 1 && (argc != 4 || parse_arg(argv[1], &req) < 0 || parse_arg(argv[2], &steps) < 0 ||
                      parse_arg(argv[3], &reps) < 0 || reps > REPS_MAX)) {
        fprintf(stderr, "usage: bench_timeline [REQUESTS STEPS REPS]\n");
        return 2;
    }
    char dir[] = "/tmp/pm-bench-timeline.XXXXXX", csv[64], html[64], svg[64];
    if (!mkdtemp(dir))
        return 1;
    snprintf(csv, sizeof csv, "%s/t.csv", dir);
    snprintf(html, sizeof html, "%s/t.html", dir);
    snprintf(svg, sizeof svg, "%s/t.svg", dir);
    double w[4][REPS_MAX], c[4][REPS_MAX];
    size_t ranges = 0;
    int rc = 0;
    for (size_t r = 0; r < reps && !rc; r++) {
        pmt_trace t, back;
        pmt_trace_init(&t);
        pmt_trace_init(&back);
        double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        rc |= pmt_synth_serving(&t, req, steps);
        double w1 = clock_s(CLOCK_MONOTONIC), c1 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        FILE *f = fopen(csv, "w");
        rc |= !f || pmt_trace_write_csv(&t, f) < 0 || fclose(f) != 0;
        char err[300] = "";
        double w2 = clock_s(CLOCK_MONOTONIC), c2 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        rc |= pmt_trace_load(&back, csv, err, sizeof err) < 0;
        double w3 = clock_s(CLOCK_MONOTONIC), c3 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        rc |= render(&back, 1, html) < 0;
        double w4 = clock_s(CLOCK_MONOTONIC), c4 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        rc |= render(&back, 0, svg) < 0;
        double w5 = clock_s(CLOCK_MONOTONIC), c5 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        ranges = back.n;
        w[0][r] = w1 - w0, w[1][r] = w3 - w2, w[2][r] = w4 - w3, w[3][r] = w5 - w4;
        c[0][r] = c1 - c0, c[1][r] = c3 - c2, c[2][r] = c4 - c3, c[3][r] = c5 - c4;
        printf("{\"rep\":%zu,\"ranges\":%zu,\"generate_s\":%.3f,\"load_s\":%.3f,\"html_s\":%.3f,"
               "\"svg_s\":%.3f,\"html_cpu_s\":%.3f}\n",
               r, ranges, w[0][r], w[1][r], w[2][r], w[3][r], c[2][r]);
        if (err[0])
            fprintf(stderr, "bench_timeline: %s\n", err);
        pmt_trace_free(&back);
        pmt_trace_free(&t);
    }
    if (!rc)
        printf("{\"median\":true,\"ranges\":%zu,\"reps\":%zu,\"csv_bytes\":%ld,\"html_bytes\":%ld,"
               "\"svg_bytes\":%ld,\"generate_s\":%.3f,\"load_s\":%.3f,\"html_s\":%.3f,\"svg_s\":%.3f,"
               "\"load_cpu_s\":%.3f,\"html_cpu_s\":%.3f,\"svg_cpu_s\":%.3f}\n",
               ranges, reps, file_size(csv), file_size(html), file_size(svg), median(w[0], reps),
               median(w[1], reps), median(w[2], reps), median(w[3], reps), median(c[1], reps),
               median(c[2], reps), median(c[3], reps));
    if (getenv("PM_BENCH_KEEP") == NULL) {
        unlink(csv), unlink(html), unlink(svg);
        rmdir(dir);
    } else {
        fprintf(stderr, "bench_timeline: kept %s\n", dir);
    }
    return rc ? 1 : 0;
}
