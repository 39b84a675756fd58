/* synth.c — a generated serving trace, for the timeline's tests and bench:
 * the shape of a two-shard run (server pid 100 with shard 0 local and the
 * call to shard 1, daemon pid 200 running shard 1 remotely), with exact,
 * known counts and times so a test can state what the picture must hold.
 *
 * Request r (0-based) starts at T0 + r * 100 ms:
 *   prefill      [0, 40 ms)        server; inside it shard 0 [0.1, 19 ms),
 *                                  the call to shard 1 [19.5, 39.9 ms),
 *                                  and the daemon's shard 1 [19.6, 39.8 ms)
 *   decode step s (0-based), at 40 ms + s * 20 us: [0, 18 us) server;
 *                                  shard 0 [1, 8 us), the call to shard 1
 *                                  [9, 17 us), the daemon [10, 16 us)
 * That is 4 + 4 * steps ranges per request.
 */
#include <stdio.h>

#include "pmt.h"

#define SYN_T0 1000000000ull /* ns: a plausible CLOCK_BOOTTIME start */
#define SYN_US 1000ull
#define SYN_MS 1000000ull

static int add(pmt_trace *t, uint32_t pid, uint32_t tid, uint64_t a, uint64_t b, const char *name)
{
    pmt_range r = {0};
    r.name = (char *)name;
    r.domain = "MARKER_CORE_API";
    r.pid = pid, r.tid = tid, r.start = a, r.end = b;
    r.corr = t->n + 1;
    return pmt_trace_add(t, &r);
}

/* One forward: the server's range, its two shard ranges, the daemon's. */
static int forward(pmt_trace *t, uint64_t b, const uint64_t *at, const char *kind, size_t req,
                   size_t pos, const char *mode, unsigned tokens)
{
    char n[4][200];
    if (kind[0] == 'p')
        snprintf(n[0], sizeof n[0], "pm.prefill mode=exact req=%zu pos=0 tokens=%u", req, tokens);
    else
        snprintf(n[0], sizeof n[0], "pm.decode mode=decode req=%zu pos=%zu", req, pos);
    snprintf(n[1], sizeof n[1], "pm.layer_range mode=%s layers=0-11 shard=0 where=local "
             "backend=cpu req=%zu tokens=%u", mode, req, tokens);
    snprintf(n[2], sizeof n[2], "pm.layer_range mode=%s layers=12-23 shard=1 where=remote "
             "backend=cuda:0 req=%zu tokens=%u", mode, req, tokens);
    return add(t, 100, 100, b + at[0], b + at[1], n[0]) | add(t, 100, 100, b + at[2], b + at[3], n[1]) |
           add(t, 100, 100, b + at[4], b + at[5], n[2]) | add(t, 200, 201, b + at[6], b + at[7], n[2]);
}

int pmt_synth_serving(pmt_trace *t, size_t requests, size_t steps)
{
    static const uint64_t pre[8] = {0, 40 * SYN_MS, 100 * SYN_US, 19 * SYN_MS, 19500 * SYN_US,
                                    39900 * SYN_US, 19600 * SYN_US, 39800 * SYN_US};
    static const uint64_t dec[8] = {0, 18 * SYN_US, 1 * SYN_US, 8 * SYN_US, 9 * SYN_US,
                                    17 * SYN_US, 10 * SYN_US, 16 * SYN_US};
    if (pmt_trace_label(t, 100, 0, "pm-server") < 0 || pmt_trace_label(t, 200, 0, "pm-shardd") < 0)
        return -1;
    for (size_t r = 0; r < requests; r++) {
        uint64_t b = SYN_T0 + r * 100 * SYN_MS;
        if (forward(t, b, pre, "prefill", r, 0, "exact", 11) < 0)
            return -1;
        for (size_t s = 0; s < steps; s++)
            if (forward(t, b + 40 * SYN_MS + s * 20 * SYN_US, dec, "decode", r, 11 + s, "decode", 1) < 0)
                return -1;
    }
    return 0;
}
