/* paths.c — finding the recorder libraries the capture preloads.
 *
 * Order: the environment (PHASEMARK_RECORDER, PHASEMARK_CUPTI), the
 * install layout relative to this executable (PM_INSTALL_REL, e.g.
 * ../lib/phasemark), then the build tree (PM_*_BUILD_PATH, set by CMake).
 */
#define _GNU_SOURCE
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pmt.h"

static const char *find(const char *env, const char *file, const char *build, char *buf, size_t len)
{
    const char *e = getenv(env);
    if (e && *e) {
        snprintf(buf, len, "%s", e);
        return access(buf, R_OK) == 0 ? buf : NULL;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        snprintf(buf, len, "%s/%s/%s", dirname(exe), PM_INSTALL_REL, file);
        if (access(buf, R_OK) == 0)
            return buf;
    }
    if (build && *build && access(build, R_OK) == 0) {
        snprintf(buf, len, "%s", build);
        return buf;
    }
    return NULL;
}

const char *pmt_recorder_path(char *buf, size_t len)
{
    return find("PHASEMARK_RECORDER", "libphasemark_recorder.so", PM_RECORDER_BUILD_PATH, buf, len);
}

const char *pmt_cupti_path(char *buf, size_t len)
{
    return find("PHASEMARK_CUPTI", "libphasemark_cupti.so", PM_CUPTI_BUILD_PATH, buf, len);
}
