/* clock.c — clock alignment between a client and a server (docs/wire.md,
 * "Clock alignment").
 *
 * A remote shard records its ranges on its own host's CLOCK_BOOTTIME, which
 * has nothing to do with the driver's. The client measures the difference
 * the way NTP does: per round, t0 (client sends a probe), t1 (server
 * receives it), t2 (server answers), t3 (client receives the answer). The
 * server's receive happened at some client time x in [t0, t3 - (t2 - t1)],
 * so client minus server lies in [t0 - t1, t3 - t2], an interval exactly
 * one round trip (less the server's time) wide, whatever the delays of the
 * two directions. The round with the smallest round trip gives the
 * narrowest interval; its midpoint is the estimate and half its width,
 * rounded up, the bound. The bound is exact for the instant of the round:
 * it does not cover the clocks' drift afterwards.
 */
#define _GNU_SOURCE /* CLOCK_BOOTTIME */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "internal.h"

/* Differences of two u64 times need 65 bits before they are range-checked. */
__extension__ typedef __int128 i128;

/* |v| below 2^62: every sum below stays inside int64. */
static int small(i128 v)
{
    return v > -(i128)PMW_CLOCK_LIMIT && v < (i128)PMW_CLOCK_LIMIT;
}

/* Round r as (rtt, low = t0 - t1, high = t3 - t2); 0 when unusable. */
static int round_interval(const pmw_clock_round *r, uint64_t *rtt, i128 *low, i128 *high)
{
    if (r->t3 < r->t0 || r->t2 < r->t1)
        return 0;
    uint64_t span = r->t3 - r->t0, server = r->t2 - r->t1;
    if (server > span || span >= (uint64_t)PMW_CLOCK_LIMIT)
        return 0;
    *low = (i128)r->t0 - (i128)r->t1;
    *high = (i128)r->t3 - (i128)r->t2;
    if (!small(*low) || !small(*high))
        return 0;
    *rtt = span - server;
    return 1;
}

int pmw_clock_estimate_rounds(const pmw_clock_round *r, size_t n, pmw_clock_estimate *out)
{
    if (!r || !n || !out)
        return PMW_E_ARG;
    memset(out, 0, sizeof *out);
    int found = 0;
    i128 best_low = 0, best_high = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t rtt;
        i128 low, high;
        if (!round_interval(&r[i], &rtt, &low, &high))
            continue;
        out->rounds++;
        if (found && rtt >= out->rtt_ns)
            continue;
        found = 1;
        out->rtt_ns = rtt;
        out->best = (uint32_t)i;
        best_low = low;
        best_high = high;
    }
    if (!found)
        return PMW_E_VALUE;
    /* The midpoint, rounded down; the far end is then ceil(rtt / 2) away
     * and the near end floor(rtt / 2). */
    i128 sum = best_low + best_high;
    i128 mid = sum >= 0 ? sum / 2 : -((-sum + 1) / 2);
    out->offset_ns = (int64_t)mid;
    out->bound_ns = out->rtt_ns / 2 + (out->rtt_ns & 1u);
    return 0;
}

/* The identity of this process's CLOCK_BOOTTIME: the boot's id (a UUID in
 * text) as 16 bytes, zero when unreadable; in a time namespace other than
 * the initial one (whose clocks have offsets of their own) its inode is
 * folded into the last 8 bytes. The recorder computes the same. */
#define PMW_TIME_NS_INIT 4026531834u /* the kernel's PROC_TIME_INIT_INO */

static void fold_time_ns(uint8_t id[16])
{
    struct stat st;
    if (stat("/proc/self/ns/time", &st) != 0 || st.st_ino == PMW_TIME_NS_INIT)
        return;
    for (int i = 0; i < 8; i++)
        id[8 + i] ^= (uint8_t)((uint64_t)st.st_ino >> (8 * i));
}

static void boot_id(uint8_t out[16])
{
    char text[64];
    memset(out, 0, 16);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (!f)
        return;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    uint8_t id[16];
    int nib = 0;
    for (size_t i = 0; i < n && nib < 32; i++) {
        char c = text[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (c == '-')
            continue;
        if (v < 0)
            return;
        id[nib / 2] = (uint8_t)(nib % 2 ? id[nib / 2] | v : v << 4);
        nib++;
    }
    if (nib == 32) {
        fold_time_ns(id);
        memcpy(out, id, 16);
    }
}

static uint64_t boottime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The status an answer stands for: 0 for the kind wanted, the server's
 * code for an error reply (a refusal, so the link is intact), and
 * PMW_E_KIND for anything else. */
static int answer(const pmw_msg *m, pmw_kind want)
{
    if (m->kind == want)
        return 0;
    if (m->kind == PMW_MSG_ERROR && pmw_status_is_drainable(m->error.code))
        return m->error.code;
    return PMW_E_KIND;
}

int pmw_conn_clock_sync(pmw_conn *c, unsigned rounds, pmw_clock_estimate *out)
{
    if (!c || !out || rounds == 0 || rounds > PMW_CLOCK_ROUNDS_MAX)
        return PMW_E_ARG;
    memset(out, 0, sizeof *out);
    pmw_clock_round r[PMW_CLOCK_ROUNDS_MAX];
    pmw_msg m, a;
    int rc;
    for (unsigned i = 0; i < rounds; i++) {
        memset(&m, 0, sizeof m);
        m.kind = PMW_MSG_CLOCK;
        m.clock.round = i + 1;
        r[i].t0 = boottime_ns();
        if ((rc = pmw_conn_send(c, &m)) || (rc = pmw_conn_recv(c, &a)))
            return rc;
        r[i].t3 = boottime_ns();
        if ((rc = answer(&a, PMW_MSG_CLOCK_REPLY)))
            return rc;
        if (a.clock.round != i + 1)
            return PMW_E_VALUE; /* an answer to another probe: the server is confused */
        r[i].t1 = a.clock.recv_ns;
        r[i].t2 = a.clock.send_ns;
    }
    if ((rc = pmw_clock_estimate_rounds(r, rounds, out)))
        return rc;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_CLOCK_SET;
    m.clock_set = (pmw_clock_set){out->offset_ns, out->bound_ns, out->rounds, {0}};
    boot_id(m.clock_set.boot_id);
    if ((rc = pmw_conn_send(c, &m)) || (rc = pmw_conn_recv(c, &a)))
        return rc;
    return answer(&a, PMW_MSG_ACK);
}
