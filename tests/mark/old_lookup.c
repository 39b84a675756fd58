/* old_lookup.c — see old_lookup.h. The defect: dlsym on a library handle
 * searches that library and its dependencies only, never the preloads in
 * the global scope, so rocprofv3's interposer never sees the ranges. */
#define _GNU_SOURCE
#include "old_lookup.h"

#include <dlfcn.h>

int old_lookup(old_roctx *out)
{
    void *h = dlopen("libroctx64.so", RTLD_NOW);
    if (!h)
        return -1;
    union { void *obj; int (*fn)(const char *); } push;
    union { void *obj; int (*fn)(void); } pop;
    push.obj = dlsym(h, "roctxRangePushA");
    pop.obj = dlsym(h, "roctxRangePop");
    if (!push.obj || !pop.obj) {
        dlclose(h);
        return -1;
    }
    out->push = push.fn;
    out->pop = pop.fn;
    return 0;
}
