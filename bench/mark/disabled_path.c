/* disabled_path.c — one engine-like function, compiled only so bench/mark
 * can show its disassembly (bench/results/mark.md): with markers off at
 * run time, the range costs a load of pm__gate and a predictable branch. */
#include <stdint.h>

#include "phasemark/mark.h"

void pm_bench_step(uint64_t req, uint32_t pos, volatile uint32_t *sink);
void pm_bench_step(uint64_t req, uint32_t pos, volatile uint32_t *sink)
{
    pm_range r = pm_prefill_push(req, pos, 8);
    *sink = pos;
    pm_range_pop(&r);
}
