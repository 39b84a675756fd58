/* pm_check.h — the tests' tiny assert header.
 *
 * Each CHECK prints the failing expression with both values and the source
 * line, counts the failure and carries on, so one run shows every mismatch.
 * A test's main returns pm_check_result(): 0 when every check held, 1
 * otherwise. PM_SKIP(reason) exits 77, which ctest reports as skipped.
 */
#ifndef PM_CHECK_H
#define PM_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int pm_check_failures;

#define PM_CHECK_FAIL_(...)                                         \
    do {                                                            \
        fprintf(stderr, "%s:%d: check failed: ", __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                               \
        fputc('\n', stderr);                                        \
        pm_check_failures++;                                        \
    } while (0)

#define CHECK(cond)                                 \
    do {                                            \
        if (!(cond))                                \
            PM_CHECK_FAIL_("%s", #cond);            \
    } while (0)

#define CHECK_INT_EQ(a, b)                                                    \
    do {                                                                      \
        long long pm_a_ = (long long)(a), pm_b_ = (long long)(b);             \
        if (pm_a_ != pm_b_)                                                   \
            PM_CHECK_FAIL_("%s == %s (%lld vs %lld)", #a, #b, pm_a_, pm_b_);  \
    } while (0)

#define CHECK_U64_EQ(a, b)                                                        \
    do {                                                                          \
        uint64_t pm_a_ = (uint64_t)(a), pm_b_ = (uint64_t)(b);                    \
        if (pm_a_ != pm_b_)                                                       \
            PM_CHECK_FAIL_("%s == %s (%" PRIu64 " vs %" PRIu64 ")", #a, #b, pm_a_, pm_b_); \
    } while (0)

#define CHECK_STR_EQ(a, b)                                                   \
    do {                                                                     \
        const char *pm_a_ = (a), *pm_b_ = (b);                               \
        if (!pm_a_ || !pm_b_ || strcmp(pm_a_, pm_b_) != 0)                   \
            PM_CHECK_FAIL_("%s == %s (\"%s\" vs \"%s\")", #a, #b,            \
                           pm_a_ ? pm_a_ : "(null)", pm_b_ ? pm_b_ : "(null)"); \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                   \
    do {                                                                        \
        double pm_a_ = (double)(a), pm_b_ = (double)(b), pm_t_ = (double)(tol); \
        if (!(pm_a_ - pm_b_ <= pm_t_ && pm_b_ - pm_a_ <= pm_t_))                \
            PM_CHECK_FAIL_("|%s - %s| <= %g (%.9g vs %.9g)", #a, #b, pm_t_, pm_a_, pm_b_); \
    } while (0)

/* Fatal form: stops the test at once (for preconditions of later checks). */
#define REQUIRE(cond)                                   \
    do {                                                \
        if (!(cond)) {                                  \
            PM_CHECK_FAIL_("required: %s", #cond);      \
            exit(1);                                    \
        }                                               \
    } while (0)

#define PM_SKIP(reason)                                 \
    do {                                                \
        fprintf(stderr, "skipped: %s\n", (reason));     \
        exit(77);                                       \
    } while (0)

static inline int pm_check_result(void)
{
    if (pm_check_failures)
        fprintf(stderr, "%d check(s) failed\n", pm_check_failures);
    return pm_check_failures ? 1 : 0;
}

#endif
