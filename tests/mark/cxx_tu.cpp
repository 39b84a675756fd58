// cxx_tu.cpp — phasemark/mark.hpp and mark.h compiled as C++ (11, 17, 20)
// under -Wall -Wextra -Wpedantic -Werror, then run against the in-process
// ROCTX log: moves transfer the one pop, nested scopes pop in order.
// With -DPM_COPY_MUST_FAIL it copies a range, which must not compile.
#include "phasemark/mark.hpp"

#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>

static_assert(!std::is_copy_constructible<pm::scoped_range>::value, "no copy");
static_assert(!std::is_copy_assignable<pm::scoped_range>::value, "no copy assignment");
static_assert(std::is_nothrow_move_constructible<pm::scoped_range>::value, "noexcept move");
static_assert(std::is_nothrow_destructible<pm::scoped_range>::value, "noexcept destructor");

extern "C" {
int roctxRangePushA(const char *text);
int roctxRangePop(void);
}
static int g_depth, g_push, g_pop, g_underflow;
extern "C" __attribute__((visibility("default"))) int roctxRangePushA(const char *)
{
    g_push++;
    return g_depth++;
}
extern "C" __attribute__((visibility("default"))) int roctxRangePop(void)
{
    g_pop++;
    if (!g_depth) {
        g_underflow++;
        return -1;
    }
    return --g_depth;
}

static pm::scoped_range make(uint64_t req) { return pm::scoped_decode(req, 1); }

int main()
{
    if (pm_enable(PM_MODE_ROCTX) != PM_OK || !pm_enabled()) {
        std::puts("markers off");
        return 77;
    }
    {
        auto p = pm::scoped_prefill(1, 0, 4);
        pm_layer_attr a = PM_LAYER_ATTR_INIT;
        a.backend = "cpu";
        auto l = pm::scoped_layer_range(a);
        if (g_depth != 2 || pm_current_phase() != PM_PHASE_EXACT)
            return 1;
    }
    {
        pm::scoped_range moved = make(2);
        pm::scoped_range other(std::move(moved));
        if (moved.live() || !other.live() || g_depth != 1)
            return 2;
        pm::scoped_range third;
        third = std::move(other);
        third.pop();
        if (g_depth != 0)
            return 3;
    }
#ifdef PM_COPY_MUST_FAIL
    {
        auto d = pm::scoped_draft(1, 2);
        pm::scoped_range copy = d;
    }
#endif
    pm_range none = PM_RANGE_NONE;
    pm_range_pop(&none);
    std::printf("push=%d pop=%d underflow=%d depth=%d\n", g_push, g_pop, g_underflow, g_depth);
    return g_push == 3 && g_pop == 3 && !g_underflow && !g_depth ? 0 : 4;
}
