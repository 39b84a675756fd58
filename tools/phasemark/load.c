/* load.c — one entry point for every input the commands take: a capture
 * directory, our marker CSV or JSON, rocprofv3's marker CSV, and the other
 * profilers' files the readers know (readers.h). check, report and diff
 * all read through here, so they accept the same things.
 */
#define _GNU_SOURCE
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pmt.h"

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A capture directory: the marker trace plus whichever GPU CSVs exist. */
static int load_dir(pmt_trace *t, pmt_gpu *g, int *has_gpu, const char *dir, char *err,
                    size_t errlen)
{
    static const char *const gpu_files[] = {"kernel_trace.csv", "memory_copy_trace.csv",
                                            "cuda_api_trace.csv", "hip_api_trace.csv"};
    char path[4096];
    snprintf(path, sizeof path, "%s/marker_api_trace.csv", dir);
    if (access(path, R_OK) != 0) {
        pmt_errf(err, errlen, "%s: a directory without marker_api_trace.csv (not from capture?)", dir);
        return -1;
    }
    if (pmt_trace_load(t, path, err, errlen) < 0)
        return -1;
    snprintf(path, sizeof path, "%s/clock.csv", dir);
    if (access(path, R_OK) == 0 && pmt_clock_load_csv(t, path, err, errlen) < 0)
        return -1;
    for (size_t i = 0; g && i < sizeof gpu_files / sizeof gpu_files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, gpu_files[i]);
        if (access(path, R_OK) != 0)
            continue;
        if (pmt_gpu_load(g, path, err, errlen) < 0)
            return -1;
        *has_gpu = 1;
    }
    return 0;
}

int pmt_load_input(pmt_trace *t, pmt_gpu *g, int *has_gpu, const char *path, char *err,
                   size_t errlen)
{
    int dummy = 0;
    if (!has_gpu)
        has_gpu = &dummy;
    if (is_dir(path))
        return load_dir(t, g, has_gpu, path, err, errlen);
    int rc = pmt_readers_load(t, g, has_gpu, path, err, errlen);
    if (rc != 1)
        return rc;
    return pmt_trace_load(t, path, err, errlen);
}
