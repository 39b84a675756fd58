/* roctx.c — find ROCTX's push/pop pair (docs/markers.md, "Backends").
 *
 * Order matters because of profilers: rocprofv3 preloads its own
 * librocprofiler-sdk-roctx.so and only ranges sent to *that* copy are
 * recorded. A handle-scoped lookup (dlopen a library, dlsym in its handle)
 * would bind to whatever copy the loader found by name and silently bypass
 * the interposer, so the process's global scope is asked first. Only when
 * the complete pair is not there do we look for a candidate the process
 * already loaded privately (RTLD_NOLOAD: no new mapping), and only then load
 * one. The pair always comes from one source: mixing a profiler's push with
 * a plain library's pop would unbalance both.
 *
 * A library that lacks a symbol is closed before the next is tried, so a
 * failed fallback leaves nothing mapped. A library that resolves stays open
 * for the life of the process: ranges may be in flight on any thread.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <dlfcn.h>

static const char *const candidates[] = {
    "librocprofiler-sdk-roctx.so.1", /* ROCm >= 6.2 */
    "libroctx64.so.4",               /* legacy roctracer */
    "libroctx64.so",
};
enum { N_CANDIDATES = sizeof candidates / sizeof candidates[0] };

/* Both symbols from one lookup scope, or neither. Function pointers from
 * dlsym go through a union: ISO C has no object-to-function conversion. */
static int pair_from(void *scope, pm__backend *out, const char **missing)
{
    union { void *obj; pm__push_fn fn; } push;
    union { void *obj; pm__pop_fn fn; } pop;
    push.obj = dlsym(scope, "roctxRangePushA");
    pop.obj = dlsym(scope, "roctxRangePop");
    if (!push.obj || !pop.obj) {
        *missing = !push.obj && !pop.obj ? "no roctx symbols"
                   : !push.obj          ? "lacks roctxRangePushA"
                                        : "lacks roctxRangePop";
        return -1;
    }
    out->push = push.fn;
    out->pop = pop.fn;
    out->name = "roctx";
    return 0;
}

/* Tries each candidate opened with flags; keeps the first complete one. */
static int try_candidates(int flags, const char *verb, pm__backend *out, pm__text *why)
{
    for (int i = 0; i < N_CANDIDATES; i++) {
        void *h = dlopen(candidates[i], flags);
        if (!h) {
            if (!(flags & RTLD_NOLOAD)) {
                pm__text_raw(why, ", ");
                pm__text_raw(why, candidates[i]);
                pm__text_raw(why, ": not found");
            }
            continue;
        }
        const char *missing = "";
        if (pair_from(h, out, &missing) == 0)
            return 0;
        dlclose(h);
        pm__text_raw(why, ", ");
        pm__text_raw(why, candidates[i]);
        pm__text_raw(why, verb);
        pm__text_raw(why, missing);
    }
    return -1;
}

int pm__roctx_resolve(pm__backend *out, pm__text *why)
{
    const char *missing = "";
    if (pair_from(RTLD_DEFAULT, out, &missing) == 0)
        return 0;
    pm__text_raw(why, "roctx: global scope: ");
    pm__text_raw(why, missing);
    if (try_candidates(RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD, " (loaded): ", out, why) == 0)
        return 0;
    return try_candidates(RTLD_NOW | RTLD_LOCAL, ": ", out, why);
}
