/* clock.c — choosing the recorder's clock and taking calibration points
 * (see clock.h for why the TSC, and when). */
#define _GNU_SOURCE
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if PMR_HAVE_TSC
#include <cpuid.h>
#endif

int pm__clock_tsc;
int64_t pm__clock_shift;

/* The test shift: a signed decimal within a day, else none. */
static int64_t test_shift(void)
{
    const char *v = getenv(PM_REC_TEST_SHIFT_ENV);
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x < -86400000000000LL || x > 86400000000000LL)
        return 0;
    return x;
}

/* Brackets per calibration point. A bracket the scheduler or an interrupt
 * split is microseconds wide; four tries make it very unlikely that all
 * are, and the narrowest one bounds the point's error to half its width
 * (about 15 ns here). */
#define PMR_CAL_TRIES 4

#if PMR_HAVE_TSC
/* CPUID 0x80000007 EDX bit 8: the TSC runs at a constant rate in every
 * P-, C- and T-state. */
static int tsc_invariant(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000007u, &a, &b, &c, &d))
        return 0;
    return (d >> 8) & 1u;
}

/* Whether the kernel keeps time with the TSC, which it does only while it
 * trusts the counters of all CPUs to agree. */
static int kernel_uses_tsc(void)
{
    char buf[16];
    int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                  O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    return n == 4 && memcmp(buf, "tsc\n", 4) == 0;
}

/* The TSC read after every earlier instruction has completed, as the vDSO
 * reads it. */
static inline uint64_t fenced_tsc(void)
{
    _mm_lfence();
    return __rdtsc();
}
#endif

int pm__clock_init(void)
{
    const char *want = getenv(PM_REC_CLOCK_ENV);
    pm__clock_tsc = 0;
    pm__clock_shift = test_shift();
#if PMR_HAVE_TSC
    if (!(want && strcmp(want, "boottime") == 0))
        pm__clock_tsc = tsc_invariant() && kernel_uses_tsc();
#else
    (void)want;
#endif
    return pm__clock_tsc ? PMR_CLOCK_TSC : PMR_CLOCK_BOOTTIME;
}

pmr_cal pm__clock_calibrate(void)
{
#if PMR_HAVE_TSC
    if (pm__clock_tsc) {
        pmr_cal best = {0, 0};
        uint64_t best_width = UINT64_MAX;
        for (int i = 0; i < PMR_CAL_TRIES; i++) {
            uint64_t before = fenced_tsc();
            uint64_t ns = pm__boottime_ns();
            uint64_t after = fenced_tsc();
            /* A counter that ran backwards (CPUs that disagree, which the
             * clocksource check should exclude) still yields a point in
             * TSC units; the reader drops points out of order. */
            uint64_t width = after >= before ? after - before : 0;
            if (width < best_width) {
                best_width = width;
                best.tsc = before + width / 2;
                best.ns = ns;
            }
        }
        return best;
    }
#endif
    uint64_t ns = pm__boottime_ns();
    return (pmr_cal){ns, ns};
}
