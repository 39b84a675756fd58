/* off_tu.c — every marker API, for the compile-time switch test (case h).
 * Built with PHASEMARK_DISABLED and without linking libphasemark: that it
 * links at all shows no phasemark symbol is referenced, and off_check.sh
 * confirms it with nm at -O0 and -O2. */
#include <stdio.h>

#include "phasemark/mark.h"

static int engine_step(unsigned i)
{
    PM_SCOPED_RANGE("pm.custom");
    PM_SCOPED_PREFILL(1, 0, 8);
    PM_SCOPED_DECODE(1, i);
    PM_SCOPED_SPEC_DECODE(1, 4);
    PM_SCOPED_DRAFT(1, 4);
    PM_SCOPED_PHASE(PM_PHASE_VERIFY);
    pm_layer_attr a = PM_LAYER_ATTR_INIT;
    a.backend = "cpu";
    PM_SCOPED_LAYER_RANGE(&a);
    pm_range r = pm_range_push("pm.x");
    pm_range_pop(&r);
    r = pm_prefill_push(1, 2, 3);
    pm_range_pop(&r);
    r = pm_decode_push(1, 2);
    pm_range_pop(&r);
    r = pm_spec_decode_push(1, 2);
    pm_range_pop(&r);
    r = pm_draft_push(1, 2);
    pm_range_pop(&r);
    r = pm_layer_range_push(&a);
    pm_range_pop(&r);
    r = pm_phase_enter(PM_PHASE_DECODE);
    pm_range_pop(&r);
    return pm_enabled() + (pm_current_phase() != PM_PHASE_NONE);
}

int main(void)
{
    int on = 0;
    for (unsigned i = 0; i < 4; i++)
        on += engine_step(i);
    printf("backend=%s enabled=%d\n", pm_backend_name(), on);
    return on != 0;
}
