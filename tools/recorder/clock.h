/* clock.h — the recorder's timestamps: a cheap read per event ("ticks")
 * and calibration points that tie ticks to CLOCK_BOOTTIME nanoseconds.
 *
 * Two clocks (pmraw.h, enum pmr_clock). On x86-64, when CPUID says the TSC
 * is invariant (constant rate, running in every C- and P-state) and the
 * kernel itself keeps time with it (clocksource "tsc": the kernel checked
 * at boot that the CPUs' counters agree, and its watchdog would have
 * dropped it otherwise), ticks are raw TSC counts: RDTSC costs about 10 ns
 * on the machine we measure on, against about 20 ns for the vDSO's
 * clock_gettime, and a range pair reads the clock twice. `phasemark
 * capture` turns ticks into nanoseconds when it merges the files. In
 * every other case ticks are CLOCK_BOOTTIME nanoseconds, read with
 * clock_gettime; PHASEMARK_RECORDER_CLOCK=boottime forces that.
 *
 * Limits of the TSC path: a system suspend (S3) or a VM migration during a
 * capture can stop, reset or rescale the counter; a thread idle across it
 * gets its events around that moment interpolated over the gap, and a
 * counter that went backwards freezes a thread's times until it catches
 * up. Capture across such events with PHASEMARK_RECORDER_CLOCK=boottime.
 *
 * Ordering. Event reads are a plain RDTSC, not LFENCE;RDTSC or RDTSCP. In
 * bench_recorder, LFENCE;RDTSC at push and pop made the recorder cost 47
 * ns per pair over the no-op instead of 30 (the fence also stops the
 * recording work around it from overlapping the read), and RDTSCP at the
 * pop alone 37-39 ns: at or past the 40 ns budget. An unfenced read may
 * execute before earlier instructions have finished, so a pop can be
 * stamped before the last instructions of the work it closes have retired
 * (and a push after the first ones of the work it opens have started), by
 * at most what the out-of-order window holds: a few ns, tens when a cache
 * miss is in flight. That is small beside what ranges are laid against
 * (a kernel starts microseconds after its launch call), and it cannot
 * break nesting: the recorder never lets a thread's ticks go backwards.
 * Calibration reads are fenced, as the vDSO's own TSC read is, because
 * every converted time inherits their error.
 */
#ifndef PM_RECORDER_CLOCK_H
#define PM_RECORDER_CLOCK_H

#include <stdint.h>
#include <time.h>

#include "pmraw.h"

/* -DPMR_HAVE_TSC=0 builds the CLOCK_BOOTTIME-only recorder on x86-64 too
 * (how the other architectures' path is compiled and tested here). */
#ifndef PMR_HAVE_TSC
#if defined(__x86_64__)
#define PMR_HAVE_TSC 1
#else
#define PMR_HAVE_TSC 0
#endif
#endif
#if PMR_HAVE_TSC
#include <x86intrin.h>
#endif

/* Forces ticks to be CLOCK_BOOTTIME ns when set to "boottime". */
#define PM_REC_CLOCK_ENV "PHASEMARK_RECORDER_CLOCK"

/* 1 when ticks are TSC counts. Written once by pm__clock_init, before the
 * first event; read-only afterwards (so a forked child inherits it). */
extern int pm__clock_tsc;

/* Tests only: PHASEMARK_TEST_CLOCK_OFFSET_NS (signed ns, within a day)
 * makes every CLOCK_BOOTTIME reading of the recorder that much later, as
 * on a host whose clock is ahead (pm-shardd shifts the clock it reports
 * in clock probes the same way). Written once by pm__clock_init. */
#define PM_REC_TEST_SHIFT_ENV "PHASEMARK_TEST_CLOCK_OFFSET_NS"
extern int64_t pm__clock_shift;

/* Chooses the clock (enum pmr_clock, also returned). Call once, before
 * any tick is read; not thread-safe (the recorder's init_once calls it). */
int pm__clock_init(void);

/* CLOCK_BOOTTIME in ns (plus the test shift, 0 outside tests).
 * Async-signal-safe. */
static inline uint64_t pm__boottime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + (uint64_t)pm__clock_shift;
}

/* The timestamp of an event, in ticks (see the ordering note above). */
static inline uint64_t pm__ticks(void)
{
#if PMR_HAVE_TSC
    if (__builtin_expect(pm__clock_tsc, 1))
        return __rdtsc();
#endif
    return pm__boottime_ns();
}

/* A calibration point taken now: with the TSC, the tightest of a few
 * (fenced TSC, clock_gettime, fenced TSC) brackets, the clock reading paired
 * with the TSC midway through its bracket; otherwise (ns, ns).
 * Async-signal-safe. */
pmr_cal pm__clock_calibrate(void);

#endif
