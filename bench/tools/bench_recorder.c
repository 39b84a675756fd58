/* bench_recorder.c — cost of one recorded range pair (roctxRangePushA +
 * roctxRangePop) in the preloaded recorder, against a no-op interposer
 * with the same entry points. Both libraries are dlopened and called
 * through function pointers, as the marker layer calls them; the recorder
 * really records (to a temporary directory, files removed afterwards), so
 * its buffer flushes are included, amortized.
 *
 * Times are this thread's CPU time (the machine is shared), so the write()
 * of a full buffer counts but time spent descheduled does not.
 *
 * Output: one JSON object per line: each repetition, then the medians and
 * their ratio. usage: bench_recorder RECORDER.so NOOP.so [PAIRS] [REPS]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pmt.h"

typedef int (*push_fn)(const char *);
typedef int (*pop_fn)(void);

typedef struct impl {
    const char *name;
    push_fn push;
    pop_fn pop;
    double ns[64]; /* per repetition */
} impl;

/* Thread CPU time: on a shared, loaded machine wall time mostly measures
 * the other processes; the CPU this thread spent is what a pair costs. */
static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int load(impl *im, const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "bench_recorder: %s\n", dlerror());
        return -1;
    }
    im->push = (push_fn)dlsym(h, "roctxRangePushA");
    im->pop = (pop_fn)dlsym(h, "roctxRangePop");
    return im->push && im->pop ? 0 : -1;
}

/* The floor any recorder that reads CLOCK_BOOTTIME at push and pop pays:
 * the no-op bookkeeping plus the two clock reads, nothing stored. */
static _Thread_local int t_depth;
static volatile uint64_t g_sink;

static uint64_t boottime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int floor_push(const char *text)
{
    (void)text;
    g_sink = boottime();
    return t_depth++;
}

static int floor_pop(void)
{
    g_sink = boottime();
    return t_depth > 0 ? --t_depth : -1;
}

/* Range texts as a decode loop makes them: the position changes every
 * step, so each push carries a different 35-38 byte name. */
#define NAMES 1024
static char g_names[NAMES][48];

static void make_names(void)
{
    for (int i = 0; i < NAMES; i++)
        snprintf(g_names[i], sizeof g_names[i], "pm.decode mode=decode req=3 pos=%d", 100 + i);
}

/* ns per pair over `pairs` pairs. */
static double run(const impl *im, long pairs)
{
    double t0 = now_ns();
    for (long i = 0; i < pairs; i++) {
        im->push(g_names[i & (NAMES - 1)]);
        im->pop();
    }
    return (now_ns() - t0) / (double)pairs;
}

static int copy_file(const char *from, const char *to)
{
    char *text;
    size_t len;
    if (pmt_read_file(from, (size_t)1 << 28, &text, &len, NULL, 0) < 0)
        return -1;
    FILE *f = fopen(to, "wb");
    int rc = f && fwrite(text, 1, len, f) == len ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    free(text);
    return rc;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static long arg(const char *s, long lo, long hi, long def)
{
    if (!s)
        return def;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return (errno || *end || v < lo || v > hi) ? -1 : v;
}

int main(int argc, char **argv)
{
    long pairs = arg(argc > 3 ? argv[3] : NULL, 1000, 100000000, 2000000);
    long reps = arg(argc > 4 ? argv[4] : NULL, 1, 64, 9);
    /* tmpfs when there is one: the cost of recording, not of the disk. */
    char dir[64];
    snprintf(dir, sizeof dir, "%s/pm-bench-recorder.XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (argc < 3 || pairs < 0 || reps < 0 || !mkdtemp(dir)) {
        fprintf(stderr, "usage: bench_recorder RECORDER.so NOOP.so [PAIRS] [REPS]\n");
        return 2;
    }
    make_names();
    impl im[4] = {{"noop", NULL, NULL, {0}}, {"clock_floor", floor_push, floor_pop, {0}},
                  {"recorder_unsaved", NULL, NULL, {0}}, {"recorder", NULL, NULL, {0}}};
    /* A second copy of the recorder, loaded without an output directory,
     * records into its buffers and drops them: the cost before any write. */
    char copy[128];
    snprintf(copy, sizeof copy, "%s/unsaved-recorder.so", dir);
    unsetenv("PHASEMARK_CAPTURE_DIR");
    if (copy_file(argv[1], copy) < 0 || load(&im[0], argv[2]) < 0 || load(&im[2], copy) < 0)
        return 1;
    unlink(copy);
    setenv("PHASEMARK_CAPTURE_DIR", dir, 1);
    if (load(&im[3], argv[1]) < 0)
        return 1;
    for (int k = 0; k < 4; k++)
        run(&im[k], pairs / 10); /* warm caches and the recorder's buffer */
    for (long r = 0; r < reps; r++) {
        for (int k = 0; k < 4; k++) {
            int which = (int)((k + r) % 4); /* rotate the order */
            im[which].ns[r] = run(&im[which], pairs);
            printf("{\"bench\":\"recorder_pair\",\"impl\":\"%s\",\"rep\":%ld,\"pairs\":%ld,"
                   "\"ns_per_pair\":%.2f}\n", im[which].name, r, pairs, im[which].ns[r]);
        }
    }
    double m0 = median(im[0].ns, (int)reps), mf = median(im[1].ns, (int)reps);
    double mu = median(im[2].ns, (int)reps), m1 = median(im[3].ns, (int)reps);
    printf("{\"bench\":\"recorder_pair\",\"summary\":true,\"pairs\":%ld,\"reps\":%ld,\"dir\":\"%s\","
           "\"noop_ns\":%.2f,\"clock_floor_ns\":%.2f,\"recorder_unsaved_ns\":%.2f,\"recorder_ns\":%.2f,"
           "\"recorder_minus_noop_ns\":%.2f,\"unsaved_minus_noop_ns\":%.2f,\"ratio_to_noop\":%.2f,"
           "\"target_ns\":40}\n",
           pairs, reps, dir, m0, mf, mu, m1, m1 - m0, mu - m0, m0 > 0 ? m1 / m0 : 0);
    fflush(stdout);
    pmt_remove_tree(dir);
    return 0;
}
