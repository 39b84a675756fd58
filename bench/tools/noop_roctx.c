/* noop_roctx.c — the baseline interposer for bench_recorder: the same
 * ROCTX entry points as the recorder, doing only the depth bookkeeping, so
 * the difference is what recording costs. */
#include <stdint.h>

#define NOOP_EXPORT __attribute__((visibility("default")))

static _Thread_local int t_depth;

NOOP_EXPORT int roctxRangePushA(const char *message);
NOOP_EXPORT int roctxRangePop(void);

int roctxRangePushA(const char *message)
{
    (void)message;
    return t_depth++;
}

int roctxRangePop(void)
{
    return t_depth > 0 ? --t_depth : -1;
}
