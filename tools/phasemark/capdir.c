/* capdir.c — the output folder of `capture`: empty or new, or cleaned of a
 * previous capture's outputs with --force, so that nothing stale (a
 * kernel_trace.csv from a run with --kernels, raw files) is merged into or
 * read next to the new capture.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "pmt.h"

#define CAP "phasemark capture: "

/* What capture writes into DIR (and what report reads from a DIR). */
static const char *const outputs[] = {"marker_api_trace.csv", "trace.json", "kernel_trace.csv",
                                      "memory_copy_trace.csv", "cuda_api_trace.csv",
                                      "hip_api_trace.csv", "clock.csv"};

static int is_output(const char *name)
{
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++)
        if (strcmp(name, outputs[i]) == 0)
            return 1;
    return strncmp(name, "raw.", 4) == 0;
}

int pmt_capture_prepare_dir(const char *dir, int force)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, CAP "%s: %s\n", dir, strerror(errno));
        return -1;
    }
    struct dirent *e;
    size_t others = 0, removed = 0;
    int rc = 0;
    while ((e = readdir(d))) {
        char path[4096];
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (!force) {
            fprintf(stderr, CAP "%s is not empty (holds %s); a previous capture's files would be "
                            "read with this one's: use an empty folder, or --force to remove "
                            "the outputs of the previous capture\n", dir, e->d_name);
            rc = -1;
            break;
        }
        if (!is_output(e->d_name)) {
            others++;
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (strncmp(e->d_name, "raw.", 4) == 0)
            pmt_remove_tree(path);
        else if (unlink(path) != 0 && errno != ENOENT) {
            fprintf(stderr, CAP "cannot remove %s: %s\n", path, strerror(errno));
            rc = -1;
            break;
        }
        removed++;
    }
    closedir(d);
    if (rc == 0 && force && (removed || others))
        fprintf(stderr, CAP "--force: removed %zu previous output(s) from %s; left %zu other file(s)\n",
                removed, dir, others);
    return rc;
}
