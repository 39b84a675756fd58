/* pm_roctx_log.c — the exported ROCTX entry points of pm_roctx_log.h. */
#include "pm_roctx_log.h"

#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

pm_roctx_log pm_roctx;

EXPORT int roctxRangePushA(const char *message);
EXPORT int roctxRangePop(void);

EXPORT int roctxRangePushA(const char *message)
{
    if (pm_roctx.n_push < PM_ROCTX_LOG_MAX) {
        snprintf(pm_roctx.texts[pm_roctx.n_push], sizeof pm_roctx.texts[0], "%s", message);
        pm_roctx.depths[pm_roctx.n_push] = pm_roctx.depth;
    }
    pm_roctx.n_push++;
    return pm_roctx.depth++;
}

EXPORT int roctxRangePop(void)
{
    pm_roctx.n_pop++;
    return --pm_roctx.depth;
}

void pm_roctx_log_clear(void)
{
    memset(&pm_roctx, 0, sizeof pm_roctx);
}
