/* roctx.c — the ROCTX entry points, exported from the preloaded recorder.
 *
 * The marker layer looks these up in the process's global scope first, so
 * under `phasemark capture` (which preloads this library) its ranges land
 * here. Signatures follow roctx.h: push returns the 0-based level of the
 * pushed range, pop the level of the popped range, both negative on error.
 */
#include <stdint.h>

#include "pmraw.h"
#include "recorder.h"

#define PMR_EXPORT __attribute__((visibility("default")))

PMR_EXPORT int roctxRangePushA(const char *message);
PMR_EXPORT int roctxRangePop(void);
PMR_EXPORT void roctxMarkA(const char *message);
PMR_EXPORT uint64_t roctxRangeStartA(const char *message);
PMR_EXPORT void roctxRangeStop(uint64_t id);

int roctxRangePushA(const char *message)
{
    return pm__rec_push(PMR_DOMAIN_ROCTX, message);
}

int roctxRangePop(void)
{
    return pm__rec_pop(PMR_DOMAIN_ROCTX);
}

void roctxMarkA(const char *message)
{
    pm__rec_mark(PMR_DOMAIN_ROCTX, message);
}

uint64_t roctxRangeStartA(const char *message)
{
    return pm__rec_start(PMR_DOMAIN_ROCTX, message);
}

void roctxRangeStop(uint64_t id)
{
    pm__rec_stop(PMR_DOMAIN_ROCTX, id);
}
