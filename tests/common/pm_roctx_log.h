/* pm_roctx_log.h — a ROCTX recorder linked into a test executable.
 *
 * pm_roctx_log.c defines and exports roctxRangePushA / roctxRangePop. A test
 * executable that uses this log and is linked with exported symbols
 * (CMake: ENABLE_EXPORTS ON) runs with PHASEMARK=roctx, and the marker
 * layer's process-global lookup (docs/markers.md, promise 4) finds these definitions: a
 * recorder without any preload. Each push's text and the depth it was
 * pushed at are kept in order; the counts say whether the run balanced.
 * Single-threaded use only (the tests drive one session).
 */
#ifndef PM_ROCTX_LOG_H
#define PM_ROCTX_LOG_H

#include "phasemark/mark.h"

#define PM_ROCTX_LOG_MAX 256

typedef struct pm_roctx_log {
    char texts[PM_ROCTX_LOG_MAX][PM_RANGE_TEXT_MAX]; /* first MAX pushes */
    int depths[PM_ROCTX_LOG_MAX]; /* nesting depth before each push */
    int n_push, n_pop, depth;
} pm_roctx_log;

/* The one log the exported entry points write. */
extern pm_roctx_log pm_roctx;

/* Forgets everything recorded so far. */
void pm_roctx_log_clear(void);

#endif
