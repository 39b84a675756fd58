/* bench_recorder.c — cost of one recorded range pair (roctxRangePushA +
 * roctxRangePop) in the preloaded recorder, against a no-op interposer
 * with the same entry points. Both libraries are dlopened and called
 * through function pointers, as the marker layer calls them; the recorder
 * really records (to a temporary directory, files removed afterwards), so
 * its buffer flushes are included, amortized.
 *
 * Implementations, side by side in one run, order rotated per repetition:
 *   noop               the no-op interposer
 *   clock_floor        no-op + two clock_gettime(CLOCK_BOOTTIME)
 *   tsc_floor          no-op + two RDTSC (x86-64 only)
 *   tsc_fenced_floor   no-op + two LFENCE;RDTSC (x86-64 only)
 *   recorder_unsaved   the recorder, no output directory (buffers dropped)
 *   recorder           the recorder, written to tmpfs, its default clock
 *   recorder_boottime  the same with PHASEMARK_RECORDER_CLOCK=boottime
 * Each recorder is a separate copy of the library (dlopen loads a path
 * once), so each reads its environment at load.
 *
 * Times are this thread's CPU time (the machine is shared), so the write()
 * of a full buffer counts but time spent descheduled does not. The
 * recorder has no thread of its own: every write happens on the thread
 * that fills the buffer, so this thread's CPU time is all of its cost.
 *
 * Output: one JSON object per line: each repetition, then the medians,
 * their differences from the no-op, and the bytes each written recorder
 * put in its files per pair. usage: bench_recorder RECORDER.so NOOP.so
 * [PAIRS] [REPS]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

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

#if defined(__x86_64__)
/* The floor with the recorder's TSC reads instead, unfenced as the
 * recorder makes them, and fenced as the vDSO makes its own. */
static int tsc_push(const char *text)
{
    (void)text;
    g_sink = __rdtsc();
    return t_depth++;
}

static int tsc_pop(void)
{
    g_sink = __rdtsc();
    return t_depth > 0 ? --t_depth : -1;
}

static int tsc_fenced_push(const char *text)
{
    (void)text;
    _mm_lfence();
    g_sink = __rdtsc();
    return t_depth++;
}

static int tsc_fenced_pop(void)
{
    _mm_lfence();
    g_sink = __rdtsc();
    return t_depth > 0 ? --t_depth : -1;
}
#endif

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

/* Loads a private copy of the recorder with the given output directory
 * (NULL: none) and clock setting (NULL: the default). */
static int load_recorder(impl *im, const char *recorder, const char *dir, const char *copy_name,
                         const char *outdir, const char *clock)
{
    char copy[160];
    snprintf(copy, sizeof copy, "%s/%s", dir, copy_name);
    if (copy_file(recorder, copy) < 0)
        return -1;
    if (outdir && mkdir(outdir, 0700) != 0)
        return -1;
    if (outdir)
        setenv("PHASEMARK_CAPTURE_DIR", outdir, 1);
    else
        unsetenv("PHASEMARK_CAPTURE_DIR");
    if (clock)
        setenv("PHASEMARK_RECORDER_CLOCK", clock, 1);
    else
        unsetenv("PHASEMARK_RECORDER_CLOCK");
    int rc = load(im, copy);
    unlink(copy);
    unsetenv("PHASEMARK_CAPTURE_DIR");
    unsetenv("PHASEMARK_RECORDER_CLOCK");
    return rc;
}

/* Bytes of the files in dir (what was flushed so far). */
static double dir_bytes(const char *dir)
{
    double total = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d));) {
        char path[400];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.' && stat(path, &st) == 0)
            total += (double)st.st_size;
    }
    closedir(d);
    return total;
}

enum { NOOP, CLOCK_FLOOR, TSC_FLOOR, TSC_FENCED_FLOOR, UNSAVED, RECORDER, RECORDER_BOOTTIME, NIMPL };

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
    impl im[NIMPL] = {
        [NOOP] = {"noop", NULL, NULL, {0}},
        [CLOCK_FLOOR] = {"clock_floor", floor_push, floor_pop, {0}},
#if defined(__x86_64__)
        [TSC_FLOOR] = {"tsc_floor", tsc_push, tsc_pop, {0}},
        [TSC_FENCED_FLOOR] = {"tsc_fenced_floor", tsc_fenced_push, tsc_fenced_pop, {0}},
#else
        [TSC_FLOOR] = {"tsc_floor", floor_push, floor_pop, {0}}, /* no TSC: not reported */
        [TSC_FENCED_FLOOR] = {"tsc_fenced_floor", floor_push, floor_pop, {0}},
#endif
        [UNSAVED] = {"recorder_unsaved", NULL, NULL, {0}},
        [RECORDER] = {"recorder", NULL, NULL, {0}},
        [RECORDER_BOOTTIME] = {"recorder_boottime", NULL, NULL, {0}},
    };
    char out_default[96], out_boottime[96];
    snprintf(out_default, sizeof out_default, "%s/default", dir);
    snprintf(out_boottime, sizeof out_boottime, "%s/boottime", dir);
    if (load(&im[NOOP], argv[2]) < 0 ||
        load_recorder(&im[UNSAVED], argv[1], dir, "unsaved.so", NULL, NULL) < 0 ||
        load_recorder(&im[RECORDER], argv[1], dir, "default.so", out_default, NULL) < 0 ||
        load_recorder(&im[RECORDER_BOOTTIME], argv[1], dir, "boottime.so", out_boottime, "boottime") < 0) {
        pmt_remove_tree(out_default);
        pmt_remove_tree(out_boottime);
        pmt_remove_tree(dir);
        return 1;
    }
    for (int k = 0; k < NIMPL; k++)
        run(&im[k], pairs / 10); /* warm caches and the recorder's buffer */
    for (long r = 0; r < reps; r++) {
        for (int k = 0; k < NIMPL; k++) {
            int which = (int)((k + r) % NIMPL); /* rotate the order */
            im[which].ns[r] = run(&im[which], pairs);
            printf("{\"bench\":\"recorder_pair\",\"impl\":\"%s\",\"rep\":%ld,\"pairs\":%ld,"
                   "\"ns_per_pair\":%.2f}\n", im[which].name, r, pairs, im[which].ns[r]);
        }
    }
    double m[NIMPL];
    for (int k = 0; k < NIMPL; k++)
        m[k] = median(im[k].ns, (int)reps);
    /* What reached the files; a buffer not yet flushed (under 256 KiB) is
     * left out, under 0.1% of it. */
    double recorded = (double)(pairs / 10 + reps * pairs);
    double bytes = dir_bytes(out_default) / recorded, bytes_bt = dir_bytes(out_boottime) / recorded;
    printf("{\"bench\":\"recorder_pair\",\"summary\":true,\"pairs\":%ld,\"reps\":%ld,\"dir\":\"%s\","
           "\"noop_ns\":%.2f,\"clock_floor_ns\":%.2f,\"tsc_floor_ns\":%.2f,\"tsc_fenced_floor_ns\":%.2f,"
           "\"recorder_unsaved_ns\":%.2f,\"recorder_ns\":%.2f,\"recorder_boottime_ns\":%.2f,"
           "\"recorder_minus_noop_ns\":%.2f,\"unsaved_minus_noop_ns\":%.2f,"
           "\"boottime_minus_noop_ns\":%.2f,\"ratio_to_noop\":%.2f,"
           "\"bytes_per_pair\":%.2f,\"boottime_bytes_per_pair\":%.2f,\"tsc\":%s,\"target_ns\":40}\n",
           pairs, reps, dir, m[NOOP], m[CLOCK_FLOOR], m[TSC_FLOOR], m[TSC_FENCED_FLOOR], m[UNSAVED],
           m[RECORDER], m[RECORDER_BOOTTIME], m[RECORDER] - m[NOOP], m[UNSAVED] - m[NOOP],
           m[RECORDER_BOOTTIME] - m[NOOP], m[NOOP] > 0 ? m[RECORDER] / m[NOOP] : 0, bytes, bytes_bt,
#if defined(__x86_64__)
           "true"
#else
           "false"
#endif
    );
    fflush(stdout);
    pmt_remove_tree(out_default);
    pmt_remove_tree(out_boottime);
    pmt_remove_tree(dir);
    return 0;
}
