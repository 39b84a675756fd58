/* test_spec_cost — cost-aware k's choice and step policy (spec_cost.h)
 * from injected costs: no clock anywhere, every expected value worked by
 * hand below. Plain decoding's rate is 1 / 100 ns throughout; drafting
 * must beat it by 3 % (0.0103).
 *
 *   unmeasured  nothing measured: plain decoding (to measure a decode)
 *   trust       two decode samples are not enough to draft; three are
 *   median      a stalled sample does not move a cost; the ring forgets
 *   widths      interpolation, extrapolation and the prior slope
 *   cpu         a CPU-like table (a verify row costs 0.35 decode): the
 *               model pays at k = 1 with a 0.39 draft; not at 0.50
 *   hybrid      a free, well-accepted n-gram proposal beats the model; with
 *               no n-gram match the model's k = 1 is chosen
 *   flat        a GPU-like table (verify ~ one decode): the widest k
 *   acceptance  the decayed acceptance estimate
 *   nothing_pays  hybrid, an expensive draft and a rejected n-gram: plain
 *   overhead    a round's bookkeeping pushes k up, then drafting out
 *   catchup     what the model owes after falling behind: prior, measured,
 *               spread over what the request has left
 *   probe       plain runs broken by probes; backoff and reset
 *   probe_price a probe that would cost more than its tokens' worth waits
 *               until that excess is 1 % of the plain run before it: a
 *               model probe owing a long catch-up waits for a request's
 *               start; at most 4096 plain choices
 *   sampled     the same acceptance, a block round at k 2 pays with
 *               greedy prices and not once the verify's rows carry their
 *               distributions and draws
 *   shadow      n-gram acceptance learnt from plain steps, no verify
 *   guard_measure  no plain reference: a window forces 9 plain steps, of
 *               which the last 8 are the reference
 *   guard_trip  windows slower than plain decoding force 32, 64, ... 512
 *               plain steps; a faster one resets the backoff
 *   guard_mixed the table's own plain steps count in a window; a window of
 *               plain choices only is not judged
 *   guard_refresh  512 tokens of winning rounds without a steady plain
 *               step: plain decoding is measured again
 *   guard_break a request's first plain step is no reference
 *   block_positions  the block drafter's expected tokens from its
 *               acceptance by position, and the k they choose
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pm_check.h"
#include "spec_cost.h"

#define MODEL (1u << LLM_DRAFTER_MODEL)
#define NGRAM (1u << LLM_DRAFTER_NGRAM)

/* verify(w) = 100 + slope * (w - 1) ns for w = 1..n, PM__COST_TRUST
 * samples each (so the decode is trusted; every median is the value). */
static void widths(pm__cost *c, double slope, int n)
{
    for (int i = 0; i < PM__COST_TRUST; i++)
        for (int w = 1; w <= n; w++)
            pm__cost_verify(c, w, (uint64_t)(100.0 + slope * (w - 1)));
}

static void choose(const pm__cost *c, unsigned kinds, int32_t k_min, int32_t k_max,
                   int32_t ngram_n, pm__cost_choice *ch)
{
    pm__cost_query q = {kinds, k_min, k_max, ngram_n, 0, 0};
    pm__cost_choose(c, &q, ch);
}

static int case_unmeasured(void)
{
    pm__cost c;
    pm__cost_init(&c, 0.4);
    pm__cost_choice ch;
    choose(&c, MODEL | NGRAM, 1, 4, 4, &ch);
    CHECK_INT_EQ(ch.kind, -1);
    CHECK_INT_EQ(ch.k, 0);
    CHECK(ch.plain_rate == 0.0);
    CHECK(pm__cost_width(&c, 3) == 0.0);
    return pm_check_result();
}

static int case_widths(void)
{
    pm__cost c;
    pm__cost_init(&c, 0.4);
    /* Only a decode (100): the prior, 35 per extra row. */
    pm__cost_verify(&c, 1, 100);
    CHECK_NEAR(pm__cost_width(&c, 3), 170.0, 1e-9);
    /* Two samples: their mean is the median. */
    pm__cost_verify(&c, 1, 200);
    CHECK_NEAR(pm__cost_width(&c, 1), 150.0, 1e-9);
    pm__cost_init(&c, 0.4);
    pm__cost_verify(&c, 1, 100);
    pm__cost_verify(&c, 5, 240);
    CHECK_NEAR(pm__cost_width(&c, 3), 170.0, 1e-9); /* between 1 and 5 */
    CHECK_NEAR(pm__cost_width(&c, 7), 310.0, 1e-9); /* slope 35 past 5 */
    /* Only width 5 (240): the prior makes a decode 240 / 2.4 = 100. */
    pm__cost_init(&c, 0.4);
    pm__cost_verify(&c, 5, 240);
    CHECK_NEAR(pm__cost_width(&c, 1), 100.0, 1e-9);
    CHECK_NEAR(pm__cost_width(&c, 2), 135.0, 1e-9);
    return pm_check_result();
}

/* The model with acceptance 5/6 (one round of 4, all accepted): per k,
 * E = 1 + a + ... + a^k and T = k * step + 100 + 35 k. With step 39:
 * k=1 1.8333/174 = 0.010536, k=2 2.5278/248 = 0.010192, k=3 3.1065/322 =
 * 0.009648, plain 0.01: k = 1. With step 50: k=1 1.8333/185 = 0.00991,
 * below plain at every k: plain. */
static int case_cpu(void)
{
    pm__cost c;
    pm__cost_init(&c, 0.39);
    widths(&c, 35.0, 5);
    pm__cost_accept(&c, LLM_DRAFTER_MODEL, 4, 4);
    CHECK_NEAR(pm__cost_acceptance(&c, LLM_DRAFTER_MODEL), 5.0 / 6.0, 1e-12);
    pm__cost_choice ch;
    choose(&c, MODEL, 1, 4, 0, &ch); /* the prior step: 0.39 * 100 */
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_MODEL);
    CHECK_INT_EQ(ch.k, 1);
    CHECK_NEAR(ch.rate, (1.0 + 5.0 / 6.0) / 174.0, 1e-12);
    CHECK_NEAR(ch.plain_rate, 0.01, 1e-12);
    pm__cost_draft(&c, LLM_DRAFTER_MODEL, 2, 100); /* measured: 50 a step */
    choose(&c, MODEL, 1, 4, 0, &ch);
    CHECK_INT_EQ(ch.kind, -1);
    CHECK_INT_EQ(ch.k, 0);
    CHECK_NEAR(ch.rate, 0.01, 1e-12);
    return pm_check_result();
}

/* The n-gram with acceptance 6.7/7.7 (two rounds of 3, all accepted) at
 * 1 ns a lookup, 3 tokens available: k=3 E = 1 + a + a^2 + a^3 = 3.28606
 * over 1 + 170 + 35 = 206 is 0.015952; k=2 2.62726/171 = 0.015364; the
 * model's best (k=1, 0.010536) loses. Without a match: the model, k = 1. */
static int case_hybrid(void)
{
    pm__cost c;
    pm__cost_init(&c, 0.39);
    widths(&c, 35.0, 5);
    pm__cost_accept(&c, LLM_DRAFTER_MODEL, 4, 4);
    pm__cost_accept(&c, LLM_DRAFTER_NGRAM, 3, 3);
    pm__cost_accept(&c, LLM_DRAFTER_NGRAM, 3, 3);
    pm__cost_draft(&c, LLM_DRAFTER_NGRAM, 1, 1);
    double a = 6.7 / 7.7;
    CHECK_NEAR(pm__cost_acceptance(&c, LLM_DRAFTER_NGRAM), a, 1e-12);
    pm__cost_choice ch;
    choose(&c, MODEL | NGRAM, 1, 4, 3, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_NGRAM);
    CHECK_INT_EQ(ch.k, 3);
    CHECK_NEAR(ch.rate, (1.0 + a + a * a + a * a * a) / 206.0, 1e-12);
    choose(&c, MODEL, 1, 4, 0, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_MODEL);
    CHECK_INT_EQ(ch.k, 1);
    /* A one-token match caps the n-gram at k = 1: 1.87013 / 136 =
     * 0.013751, still above the model. */
    choose(&c, MODEL | NGRAM, 1, 4, 1, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_NGRAM);
    CHECK_INT_EQ(ch.k, 1);
    return pm_check_result();
}

/* verify(w) = 100 + (w - 1), step 20, a = 5/6: k=4 3.5887/184 = 0.019504
 * beats k=3 3.1065/163 = 0.019058 and k=2 2.5278/142 = 0.017801. */
static int case_flat(void)
{
    pm__cost c;
    pm__cost_init(&c, 0.2);
    widths(&c, 1.0, 5);
    pm__cost_accept(&c, LLM_DRAFTER_MODEL, 4, 4);
    pm__cost_draft(&c, LLM_DRAFTER_MODEL, 4, 80);
    pm__cost_choice ch;
    choose(&c, MODEL, 1, 4, 0, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_MODEL);
    CHECK_INT_EQ(ch.k, 4);
    choose(&c, MODEL, 1, 2, 0, &ch); /* k_max bounds it */
    CHECK_INT_EQ(ch.k, 2);
    choose(&c, MODEL, 3, 4, 0, &ch); /* and k_min */
    CHECK_INT_EQ(ch.k, 4);
    return pm_check_result();
}

/* acc and rej decay by 0.9 a round: rounds (4 of 4), (1 of 4), (0 of 2)
 * give acc = (4*0.9 + 1)*0.9 + 0 = 4.14, rej = (0*0.9 + 1)*0.9 + 1 = 1.9,
 * a = 5.14 / 8.04. An unseen kind reads 1/2. */
/* Nothing pays, hybrid: the model as in case_cpu with a measured 50 ns
 * step (k=1 1.8333/185 = 0.00991), the n-gram free but rejected in both of
 * its rounds of 3: acc 0, rej 1.9, a = 1 / 3.9; k=1 (1 + a) / 136 =
 * 0.009238, k=2 (1 + a + a^2) / 171 = 0.007732; plain 0.01 wins: the
 * choice is a plain step, whatever the n-gram proposal's length. */
static int case_nothing_pays(void)
{
    pm__cost c;
    pm__cost_init(&c, 0.39);
    widths(&c, 35.0, 5);
    pm__cost_accept(&c, LLM_DRAFTER_MODEL, 4, 4);
    pm__cost_draft(&c, LLM_DRAFTER_MODEL, 2, 100);
    pm__cost_accept(&c, LLM_DRAFTER_NGRAM, 3, 0);
    pm__cost_accept(&c, LLM_DRAFTER_NGRAM, 3, 0);
    pm__cost_draft(&c, LLM_DRAFTER_NGRAM, 1, 1);
    CHECK_NEAR(pm__cost_acceptance(&c, LLM_DRAFTER_NGRAM), 1.0 / 3.9, 1e-12);
    pm__cost_choice ch;
    for (int32_t n = 1; n <= 4; n++) {
        choose(&c, MODEL | NGRAM, 1, 4, n, &ch);
        CHECK_INT_EQ(ch.kind, -1);
        CHECK_INT_EQ(ch.k, 0);
        CHECK_NEAR(ch.rate, 0.01, 1e-12);
    }
    /* One accepted n-gram round of 3 more: acc 3, rej 1.71, a = 4 / 6.71;
     * k=1 (1 + a) / 136 = 0.011736 beats k=2 0.011412, k=3 0.010502 and
     * plain: drafting resumes at k = 1. */
    pm__cost_accept(&c, LLM_DRAFTER_NGRAM, 3, 3);
    choose(&c, MODEL | NGRAM, 1, 4, 3, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_NGRAM);
    CHECK_INT_EQ(ch.k, 1);
    CHECK_NEAR(ch.rate, (1.0 + 4.0 / 6.71) / 136.0, 1e-12);
    return pm_check_result();
}

static int case_acceptance(void)
{
    pm__cost c;
    pm__cost_init(&c, 0.4);
    CHECK_NEAR(pm__cost_acceptance(&c, LLM_DRAFTER_NGRAM), 0.5, 1e-12);
    pm__cost_accept(&c, LLM_DRAFTER_MODEL, 4, 4);
    pm__cost_accept(&c, LLM_DRAFTER_MODEL, 4, 1);
    pm__cost_accept(&c, LLM_DRAFTER_MODEL, 2, 0);
    CHECK_NEAR(pm__cost_acceptance(&c, LLM_DRAFTER_MODEL), 5.14 / 8.04, 1e-12);
    return pm_check_result();
}


/* A free n-gram proposal of 4 accepted 4 of 4 (a = 5/6) would pay, but
 * not on a decode measured twice: plain. The third sample trusts it. */
static int case_trust(void)
{
    pm__cost c;
    pm__cost_init(&c, 0.39);
    pm__cost_accept(&c, LLM_DRAFTER_NGRAM, 4, 4);
    for (int w = 2; w <= 5; w++)
        pm__cost_verify(&c, w, (uint64_t)(100 + 35 * (w - 1)));
    pm__cost_choice ch;
    for (int i = 0; i < PM__COST_TRUST - 1; i++) {
        pm__cost_verify(&c, 1, 100);
        choose(&c, NGRAM, 1, 4, 4, &ch);
        CHECK_INT_EQ(ch.kind, -1);
        CHECK(ch.plain_rate == 0.0);
    }
    pm__cost_verify(&c, 1, 100);
    choose(&c, NGRAM, 1, 4, 4, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_NGRAM);
    CHECK_NEAR(ch.plain_rate, 0.01, 1e-12);
    return pm_check_result();
}

/* Medians: 100, 100, 5000 (a stall) read 100; a fourth sample of 5000
 * reads (100 + 5000) / 2 = 2550; eight samples of 200 later the ring
 * holds only those: 200. */
static int case_median(void)
{
    pm__cost_est e;
    memset(&e, 0, sizeof e);
    pm__cost_est_add(&e, 100);
    pm__cost_est_add(&e, 100);
    pm__cost_est_add(&e, 5000);
    CHECK_NEAR(e.med, 100.0, 1e-12);
    pm__cost_est_add(&e, 5000);
    CHECK_NEAR(e.med, 2550.0, 1e-12);
    for (int i = 0; i < PM__COST_RING; i++)
        pm__cost_est_add(&e, 200);
    CHECK_NEAR(e.med, 200.0, 1e-12);
    CHECK_INT_EQ(e.n, PM__COST_RING);
    /* Through the table: one stalled round of width 3 among two normal
     * ones leaves its cost at 170. */
    pm__cost c;
    pm__cost_init(&c, 0.39);
    pm__cost_verify(&c, 3, 170);
    pm__cost_verify(&c, 3, 90000);
    pm__cost_verify(&c, 3, 170);
    CHECK_NEAR(pm__cost_width(&c, 3), 170.0, 1e-9);
    return pm_check_result();
}

/* verify(w) = 100 + 20 (w - 1), a model step of 10, a = 5/6, k <= 6:
 * T(k) = 100 + 30 k + over. over 0: k=3 3.1065/190 = 0.016350 beats k=4
 * 3.5887/220 = 0.016312; over 50 (a round's bookkeeping): k=5
 * 3.9906/300 = 0.013302 beats k=4 3.5887/270 = 0.013292 and k=6
 * 4.3255/330 = 0.013108; over 200: the best, k=6 4.3255/480 = 0.009011,
 * is below 0.0103: plain. */
static int case_overhead(void)
{
    pm__cost c;
    pm__cost_init(&c, 0.1);
    widths(&c, 20.0, 7);
    pm__cost_accept(&c, LLM_DRAFTER_MODEL, 4, 4);
    pm__cost_draft(&c, LLM_DRAFTER_MODEL, 4, 40);
    pm__cost_choice ch;
    choose(&c, MODEL, 1, 6, 0, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_MODEL);
    CHECK_INT_EQ(ch.k, 3);
    pm__cost_overhead(&c, LLM_DRAFTER_MODEL, 50);
    choose(&c, MODEL, 1, 6, 0, &ch);
    CHECK_INT_EQ(ch.k, 5);
    CHECK_NEAR(ch.rate, (1.0 - pow(5.0 / 6.0, 6)) * 6.0 / 300.0, 1e-12);
    /* Another kind's overhead is not the model's. */
    pm__cost_overhead(&c, LLM_DRAFTER_NGRAM, 5000);
    choose(&c, MODEL, 1, 6, 0, &ch);
    CHECK_INT_EQ(ch.k, 5);
    pm__cost_overhead(&c, LLM_DRAFTER_MODEL, 350);
    pm__cost_overhead(&c, LLM_DRAFTER_MODEL, 350); /* median 350: 200 more */
    choose(&c, MODEL, 1, 6, 0, &ch);
    CHECK_INT_EQ(ch.kind, -1);
    CHECK_INT_EQ(ch.k, 0);
    return pm_check_result();
}

/* The model as in case_cpu (step 39, k=1 alone pays: 1.8333/174 =
 * 0.010536), now 8 tokens behind. Unmeasured catch-up: 0.35 * 39 = 13.65
 * a token, owed 109.2, spread as 109.2 * 1.8333 / 32 = 6.256 over k=1's
 * round: 1.8333/180.256 = 0.010171 < 0.0103: plain. Measured (a fed-33
 * round of 1 forward in 39 + 32 * 5 ns: 5 a token): owed 40, 1.8333 /
 * 176.29 = 0.010399: k = 1. 32 behind at 5: 1.8333/183.17 = 0.010009:
 * plain. The n-gram owes nothing. */
static int case_catchup(void)
{
    pm__cost c;
    pm__cost_init(&c, 0.39);
    widths(&c, 35.0, 5);
    pm__cost_accept(&c, LLM_DRAFTER_MODEL, 4, 4);
    pm__cost_catchup(&c, 33, 1, 199); /* no step measured yet: ignored */
    CHECK_INT_EQ(c.catchup.n, 0);
    pm__cost_draft(&c, LLM_DRAFTER_MODEL, 1, 39);
    pm__cost_query q = {MODEL, 1, 4, 0, 8, 32};
    pm__cost_choice ch;
    pm__cost_choose(&c, &q, &ch);
    CHECK_INT_EQ(ch.kind, -1);
    pm__cost_catchup(&c, 33, 1, 39 + 32 * 5);
    CHECK_NEAR(c.catchup.med, 5.0, 1e-12);
    pm__cost_choose(&c, &q, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_MODEL);
    CHECK_INT_EQ(ch.k, 1);
    CHECK_NEAR(ch.rate, (11.0 / 6.0) / (174.0 + 40.0 * (11.0 / 6.0) / 32.0), 1e-12);
    q.behind = 32;
    pm__cost_choose(&c, &q, &ch);
    CHECK_INT_EQ(ch.kind, -1);
    /* The debt is spread over what the request has left, at most 256:
     * 32 behind with 1000 left, 160 / 256 * 1.8333 = 1.1458 a round:
     * 1.8333/175.15 = 0.010467: k = 1; 8 behind with 4 left, 40 / 4 *
     * 1.8333 = 18.333: 1.8333/192.33 = 0.009532: plain. */
    q.left = 1000;
    pm__cost_choose(&c, &q, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_MODEL);
    CHECK_NEAR(ch.rate, (11.0 / 6.0) / (174.0 + 160.0 / 256.0 * (11.0 / 6.0)), 1e-12);
    q.behind = 8;
    q.left = 4;
    pm__cost_choose(&c, &q, &ch);
    CHECK_INT_EQ(ch.kind, -1);
    /* Hybrid, 32 behind, a free n-gram match of 2 at a = 5/6: k=2
     * 2.5278/171 = 0.014782; the model's debt does not touch it. */
    pm__cost_accept(&c, LLM_DRAFTER_NGRAM, 4, 4);
    pm__cost_query h = {MODEL | NGRAM, 1, 4, 2, 32, 32};
    pm__cost_choose(&c, &h, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_NGRAM);
    CHECK_INT_EQ(ch.k, 2);
    return pm_check_result();
}

/* Nothing pays for the model (case_cpu's measured 50 ns step): 31 plain
 * choices, then a probe of k_min = 2; still plain after it, so the next
 * probe comes 64 plain choices later, then 128. After that probe the
 * draft got cheap (step 10: k=2 2.5278/190 = 0.013304 pays): the verdict
 * drafts and the interval is back at 32. */
/* `plain` plain choices, then a probe of 2 model drafts that accepts
 * `accepted`, then the verdict (plain) leaving probe_every at `every`. */
static void probe_verdict(pm__cost *c, const pm__cost_query *q, int plain, int32_t accepted,
                          int32_t every)
{
    pm__cost_choice ch;
    for (int i = 0; i < plain; i++) {
        pm__cost_next(c, q, &ch);
        CHECK_INT_EQ(ch.probe, 0);
    }
    pm__cost_next(c, q, &ch);
    CHECK_INT_EQ(ch.probe, 1);
    pm__cost_accept(c, LLM_DRAFTER_MODEL, 2, accepted);
    pm__cost_next(c, q, &ch);
    CHECK_INT_EQ(ch.kind, -1);
    CHECK_INT_EQ(c->probe_every, every);
}

static int case_probe(void)
{
    pm__cost c;
    pm__cost_init(&c, 0.39);
    widths(&c, 35.0, 5);
    pm__cost_accept(&c, LLM_DRAFTER_MODEL, 4, 4);
    pm__cost_draft(&c, LLM_DRAFTER_MODEL, 2, 100);
    pm__cost_query q = {MODEL, 2, 4, 0, 0, 0};
    pm__cost_choice ch;
    static const int32_t every[] = {32, 64, 128};
    for (int p = 0; p < 3; p++) {
        for (int i = 1; i < every[p]; i++) {
            pm__cost_next(&c, &q, &ch);
            CHECK_INT_EQ(ch.kind, -1);
            CHECK_INT_EQ(ch.probe, 0);
        }
        pm__cost_next(&c, &q, &ch);
        CHECK_INT_EQ(ch.kind, LLM_DRAFTER_MODEL);
        CHECK_INT_EQ(ch.k, 2);
        CHECK_INT_EQ(ch.probe, 1);
    }
    CHECK_INT_EQ(c.probe_every, 128);
    for (int i = 0; i < PM__COST_RING; i++)
        pm__cost_draft(&c, LLM_DRAFTER_MODEL, 1, 10);
    pm__cost_next(&c, &q, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_MODEL);
    CHECK_INT_EQ(ch.k, 2);
    CHECK_INT_EQ(ch.probe, 0);
    CHECK_INT_EQ(c.probe_every, PM__COST_PROBE_MIN);
    /* Hybrid, the model expensive again and the n-gram rejected: plain
     * until the 32nd choice, which probes the model's k_min = 1 even with
     * an n-gram match of 6 (the n-gram is shadow-tested, never probed). */
    for (int i = 0; i < PM__COST_RING; i++)
        pm__cost_draft(&c, LLM_DRAFTER_MODEL, 2, 100);
    pm__cost_accept(&c, LLM_DRAFTER_NGRAM, 4, 0);
    pm__cost_accept(&c, LLM_DRAFTER_NGRAM, 4, 0);
    pm__cost_query h = {MODEL | NGRAM, 1, 4, 6, 0, 0};
    for (int i = 1; i < PM__COST_PROBE_MIN; i++) {
        pm__cost_next(&c, &h, &ch);
        CHECK_INT_EQ(ch.kind, -1);
    }
    pm__cost_next(&c, &h, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_MODEL);
    CHECK_INT_EQ(ch.k, 1);
    CHECK_INT_EQ(ch.probe, 1);
    /* An n-gram drafter alone, rejected, with a match: plain, never a
     * probe. */
    pm__cost_query ng = {NGRAM, 1, 4, 6, 0, 0};
    for (int i = 0; i < 600; i++) {
        pm__cost_next(&c, &ng, &ch);
        CHECK_INT_EQ(ch.kind, -1);
        CHECK_INT_EQ(ch.probe, 0);
    }
    /* No drafter can draft (an n-gram drafter without a match): plain,
     * and no probe however long the run. */
    pm__cost_query none = {NGRAM, 1, 4, 0, 0, 0};
    for (int i = 0; i < 600; i++) {
        pm__cost_next(&c, &none, &ch);
        CHECK_INT_EQ(ch.kind, -1);
        CHECK_INT_EQ(ch.probe, 0);
    }
    /* A probe that accepted all its drafts keeps probe_every at 32 although
     * the table still chooses plain after it; one that did not doubles it
     * again. A fresh table where the model never pays (a = 1/3, step 100),
     * so its probes are dear and wait on their price (case_probe_price):
     * 200 + 170 - (1 + 1/3 + 1/9) * 100 = 225.56 ns beyond their tokens,
     * 1 % of 226 plain choices; after the full probe (a = 3 / 4.9) 370 -
     * 198.71 = 171.29, so the 172nd. The verdict's plain choice is the
     * first of the next run. */
    pm__cost_init(&c, 0.39);
    widths(&c, 35.0, 5);
    pm__cost_accept(&c, LLM_DRAFTER_MODEL, 4, 0);
    pm__cost_draft(&c, LLM_DRAFTER_MODEL, 2, 200);
    probe_verdict(&c, &q, 225, 2, PM__COST_PROBE_MIN);
    probe_verdict(&c, &q, 170, 1, 2 * PM__COST_PROBE_MIN);
    return pm_check_result();
}

/* Plain choices pm__cost_next makes for q before its first probe (the
 * probe itself checked), at most max. */
static int plain_before_probe(pm__cost *c, const pm__cost_query *q, int max)
{
    pm__cost_choice ch;
    for (int i = 0; i < max; i++) {
        pm__cost_next(c, q, &ch);
        if (ch.probe) {
            CHECK_INT_EQ(ch.kind, LLM_DRAFTER_MODEL);
            CHECK_INT_EQ(ch.k, q->k_min);
            return i;
        }
        CHECK_INT_EQ(ch.kind, -1);
    }
    return max;
}

/* A model that does not pay, priced as on the CPU at T = 0.7 in units of
 * a decode (100): a draft step 85, verify(w) = 100 + 25 (w - 1), nothing
 * accepted yet (a = 0.5): k 1 is 1.5 / 210 = 0.00714, plain. A probe of
 * k 1 costs 210 for 1.5 tokens' worth 150: 60 beyond, 1 % of 60 plain
 * choices, so the 60th probes (not the 32nd). Catch-up measured at 20 a
 * token (a round fed 41 tokens in 85 + 40 * 20): 40 behind owes 800, so
 * 860 plain choices; 300 behind, 6060, capped at 4096. Behind 40 for 200
 * choices, then 5 (a request's start, only its prompt to feed): 160, and
 * the run is past it: the next choice probes. */
static int case_probe_price(void)
{
    pm__cost c;
    pm__cost_query q = {MODEL, 1, 4, 0, 0, 0};
    pm__cost_init(&c, 0.39);
    widths(&c, 25.0, 5);
    pm__cost_draft(&c, LLM_DRAFTER_MODEL, 1, 85);
    CHECK_INT_EQ(plain_before_probe(&c, &q, 5000), 59);
    pm__cost_init(&c, 0.39);
    widths(&c, 25.0, 5);
    pm__cost_draft(&c, LLM_DRAFTER_MODEL, 1, 85);
    pm__cost_catchup(&c, 41, 1, 85 + 40 * 20);
    CHECK_NEAR(c.catchup.med, 20.0, 1e-12);
    q.behind = 40;
    CHECK_INT_EQ(plain_before_probe(&c, &q, 5000), 859);
    q.behind = 300;
    CHECK_INT_EQ(plain_before_probe(&c, &q, 5000), PM__COST_PROBE_FAR - 1);
    q.behind = 40;
    CHECK_INT_EQ(plain_before_probe(&c, &q, 200), 200);
    q.behind = 5;
    CHECK_INT_EQ(plain_before_probe(&c, &q, 5000), 0);
    return pm_check_result();
}

/* A block round at k 2 priced greedy and sampled, with the same
 * acceptance: four rounds of k 2 accepting 2, 2, 2 and 1 give p1 =
 * 0.91716, p2 = 0.73331, E(2) = 2.58972 (E(1) = 1.91716). Greedy: a
 * decode 100, verify(2) 125, verify(3) 150, a head forward 60, a round's
 * bookkeeping 20: k 2 at 2.58972 / 230 = 0.011260 beats 1.03 / 100 (k 1:
 * 1.91716 / 205 = 0.009352). Sampled, the draws priced where they are
 * paid: a plain step's one draw (decode 105), every verify row's
 * distribution and the accept test (verify(2) 155, verify(3) 200): k 2
 * 2.58972 / 280 = 0.009249 against 1.03 / 105 = 0.009810: plain. */
static int case_sampled(void)
{
    static const double greedy[3] = {100, 125, 150}, sampled[3] = {105, 155, 200};
    const double *price[2] = {greedy, sampled};
    for (int t = 0; t < 2; t++) {
        pm__cost c;
        pm__cost_init(&c, 0.39);
        for (int i = 0; i < PM__COST_TRUST; i++)
            for (int w = 1; w <= 3; w++)
                pm__cost_verify(&c, w, (uint64_t)price[t][w - 1]);
        pm__cost_head(&c, 2, 60);
        pm__cost_overhead(&c, LLM_DRAFTER_BLOCK, 20);
        for (int i = 0; i < 3; i++)
            pm__cost_accept(&c, LLM_DRAFTER_BLOCK, 2, 2);
        pm__cost_accept(&c, LLM_DRAFTER_BLOCK, 2, 1);
        pm__cost_choice ch;
        choose(&c, 1u << LLM_DRAFTER_BLOCK, 1, 2, 0, &ch);
        CHECK_NEAR(pm__cost_expected(&c, LLM_DRAFTER_BLOCK, 2), 2.5897231085, 1e-9);
        CHECK_INT_EQ(ch.kind, t == 0 ? LLM_DRAFTER_BLOCK : -1);
        CHECK_INT_EQ(ch.k, t == 0 ? 2 : 0);
        CHECK_NEAR(ch.rate, t == 0 ? 2.5897231085 / 230.0 : 1.0 / 105.0, 1e-9);
    }
    return pm_check_result();
}


/* Shadow tests of n-gram proposals by plain steps. A proposal of 3 whose
 * third token differs: acc 2, rej 1, a = 3/5; a second start while one is
 * under test is refused. Then 2 of 2: acc 2 * 0.9 + 2 = 3.8, rej 0.9, a =
 * 4.8 / 6.7. A dropped test and steps without one change nothing. In
 * case_nothing_pays' table (n-gram rejected twice: plain), a shadow of 3
 * matched in full counts as the accepted round there: the n-gram resumes
 * at k = 1, (1 + 4/6.71) / 136. */
static int case_shadow(void)
{
    pm__cost c;
    pm__cost_init(&c, 0.39);
    CHECK_INT_EQ(pm__cost_shadow_start(&c, 0), 0);
    CHECK_INT_EQ(pm__cost_shadow_start(&c, 3), 1);
    CHECK_INT_EQ(pm__cost_shadow_start(&c, 2), 0);
    pm__cost_shadow_step(&c, 1);
    pm__cost_shadow_step(&c, 1);
    CHECK_INT_EQ(c.shadow_i, 2);
    pm__cost_shadow_step(&c, 0);
    CHECK_INT_EQ(c.shadow_n, 0);
    CHECK_NEAR(pm__cost_acceptance(&c, LLM_DRAFTER_NGRAM), 3.0 / 5.0, 1e-12);
    CHECK_INT_EQ(pm__cost_shadow_start(&c, 2), 1);
    pm__cost_shadow_step(&c, 1);
    pm__cost_shadow_step(&c, 1);
    CHECK_NEAR(pm__cost_acceptance(&c, LLM_DRAFTER_NGRAM), 4.8 / 6.7, 1e-12);
    CHECK_INT_EQ(pm__cost_shadow_start(&c, 4), 1);
    pm__cost_shadow_step(&c, 1);
    pm__cost_shadow_drop(&c);
    pm__cost_shadow_step(&c, 0);
    CHECK_NEAR(pm__cost_acceptance(&c, LLM_DRAFTER_NGRAM), 4.8 / 6.7, 1e-12);
    CHECK_NEAR(pm__cost_acceptance(&c, LLM_DRAFTER_MODEL), 0.5, 1e-12);

    pm__cost_init(&c, 0.39);
    widths(&c, 35.0, 5);
    pm__cost_accept(&c, LLM_DRAFTER_MODEL, 4, 4);
    pm__cost_draft(&c, LLM_DRAFTER_MODEL, 2, 100);
    pm__cost_accept(&c, LLM_DRAFTER_NGRAM, 3, 0);
    pm__cost_accept(&c, LLM_DRAFTER_NGRAM, 3, 0);
    pm__cost_draft(&c, LLM_DRAFTER_NGRAM, 1, 1);
    pm__cost_choice ch;
    choose(&c, MODEL | NGRAM, 1, 4, 3, &ch);
    CHECK_INT_EQ(ch.kind, -1);
    CHECK_INT_EQ(pm__cost_shadow_start(&c, 3), 1);
    for (int i = 0; i < 3; i++)
        pm__cost_shadow_step(&c, 1);
    choose(&c, MODEL | NGRAM, 1, 4, 3, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_NGRAM);
    CHECK_INT_EQ(ch.k, 1);
    CHECK_NEAR(ch.rate, (1.0 + 4.0 / 6.71) / 136.0, 1e-12);
    return pm_check_result();
}


/* ---- the guard ---------------------------------------------------------- */

/* n forced plain steps of ns each; 0 when the guard forced exactly n. */
static int forced_run(pm__guard *g, int n, uint64_t ns)
{
    for (int i = 0; i < n; i++) {
        if (!pm__guard_forced(g))
            return -1;
        pm__guard_plain(g, 1, ns);
    }
    return pm__guard_forced(g) ? -1 : 0;
}

/* Rounds of 2 tokens at ns each, until the guard forces plain steps or
 * `max` rounds ran; the rounds run. */
static int rounds_until_forced(pm__guard *g, uint64_t ns, int max)
{
    int n = 0;
    while (n < max && !pm__guard_forced(g)) {
        pm__guard_round(g, ns, 2);
        n++;
    }
    return n;
}

/* A guard whose plain reference is 500 ns: the measuring stretch after
 * the first window (16 rounds of 2 tokens). */
static void guard_with_plain(pm__guard *g, uint64_t round_ns)
{
    pm__guard_init(g);
    CHECK_INT_EQ(rounds_until_forced(g, round_ns, 100), 16);
    CHECK_INT_EQ(forced_run(g, PM__GUARD_MEASURE, 500), 0);
}

static int case_guard_measure(void)
{
    pm__guard g;
    pm__guard_init(&g);
    CHECK(!pm__guard_forced(&g));
    /* 32 tokens of rounds close the first window; with no plain reference
     * it measures: 9 plain steps, the first one after a round. */
    CHECK_INT_EQ(rounds_until_forced(&g, 700, 100), 16);
    CHECK_INT_EQ(g.measures, 1u);
    CHECK_INT_EQ(g.trips + g.passes, 0u);
    pm__guard_plain(&g, 1, 9000); /* after a round: not steady, not kept */
    CHECK_INT_EQ(forced_run(&g, PM__GUARD_MEASURE - 1, 500), 0);
    CHECK_INT_EQ(g.plain.n, 8);
    CHECK_NEAR(g.plain.med, 500.0, 1e-9);
    /* 350 ns a token beats 500: a pass, no plain step. */
    CHECK_INT_EQ(rounds_until_forced(&g, 700, 16), 16);
    CHECK_INT_EQ(g.passes, 1u);
    CHECK(!pm__guard_forced(&g));
    return pm_check_result();
}

static int case_guard_trip(void)
{
    pm__guard g;
    guard_with_plain(&g, 1100);
    /* 550 ns a token against 500: each window trips, and the plain
     * stretch doubles up to 512. */
    static const int want[] = {32, 64, 128, 256, 512, 512};
    for (int i = 0; i < 6; i++) {
        CHECK_INT_EQ(rounds_until_forced(&g, 1100, 100), 16);
        CHECK_INT_EQ(forced_run(&g, want[i], 500), 0);
    }
    CHECK_INT_EQ(g.trips, 6u);
    /* At exactly the plain rate (1000 ns for 2 tokens) it is no trip; the
     * backoff starts from 32 again. */
    CHECK_INT_EQ(rounds_until_forced(&g, 1000, 16), 16);
    CHECK(!pm__guard_forced(&g));
    CHECK_INT_EQ(g.passes, 1u);
    CHECK_INT_EQ(rounds_until_forced(&g, 1002, 100), 16);
    CHECK_INT_EQ(forced_run(&g, 32, 500), 0);
    return pm_check_result();
}

static int case_guard_mixed(void)
{
    pm__guard g;
    guard_with_plain(&g, 900);
    /* 40 plain choices of the table: no round in the windows, no verdict
     * (and they refresh the reference: 600 ns now, the median of 8). */
    for (int i = 0; i < 40; i++)
        pm__guard_plain(&g, 0, 600);
    CHECK(!pm__guard_forced(&g));
    CHECK_INT_EQ(g.trips + g.passes, 0u);
    CHECK_NEAR(g.plain.med, 600.0, 1e-9);
    CHECK_INT_EQ(g.win_tok, 8); /* the window after the first 32 */
    /* 8 open + 8 rounds of 2 at 1300 (16 tokens) + 8 more plain choices
     * = 32 tokens, 8 * 600 + 8 * 1300 + 8 * 600 = 20000 > 32 * 600 = 19200:
     * a trip, judged at the plain step that closes the window. */
    for (int i = 0; i < 8; i++)
        pm__guard_round(&g, 1300, 2);
    CHECK(!pm__guard_forced(&g));
    for (int i = 0; i < 7; i++)
        pm__guard_plain(&g, 0, 600);
    CHECK(!pm__guard_forced(&g));
    pm__guard_plain(&g, 0, 600);
    CHECK(pm__guard_forced(&g));
    CHECK_INT_EQ(g.trips, 1u);
    return pm_check_result();
}

static int case_guard_refresh(void)
{
    pm__guard g;
    guard_with_plain(&g, 700);
    /* Winning windows: 512 tokens of rounds (256 rounds) with no steady
     * plain step make the reference stale; the window after them
     * measures again. */
    CHECK_INT_EQ(rounds_until_forced(&g, 700, 1000), 256);
    CHECK_INT_EQ(g.passes, 15u);
    CHECK_INT_EQ(g.measures, 2u);
    CHECK_INT_EQ(forced_run(&g, PM__GUARD_MEASURE, 500), 0);
    CHECK_INT_EQ(g.stale, 0);
    return pm_check_result();
}

static int case_guard_break(void)
{
    pm__guard g;
    pm__guard_init(&g);
    pm__guard_plain(&g, 0, 500); /* follows nothing */
    pm__guard_plain(&g, 0, 500);
    CHECK_INT_EQ(g.plain.n, 1);
    pm__guard_break(&g); /* a request ends */
    pm__guard_plain(&g, 0, 9000);
    CHECK_INT_EQ(g.plain.n, 1);
    pm__guard_plain(&g, 0, 500);
    CHECK_INT_EQ(g.plain.n, 2);
    CHECK_INT_EQ(g.win_tok, 4);
    return pm_check_result();
}

/* PM__RETIRE_PLAIN plain steps in a row (the table's or forced) retire the head; a
 * round in between starts the count again; once retired it stays so. */
static int case_retire_run(void)
{
    pm__retire r;
    pm__retire_init(&r);
    for (int i = 0; i < PM__RETIRE_PLAIN - 1; i++)
        CHECK_INT_EQ(pm__retire_step(&r, 1), 0);
    CHECK_INT_EQ(pm__retire_step(&r, 0), 0); /* a round: the run restarts */
    CHECK_INT_EQ(r.plain_run, 0);
    for (int i = 0; i < PM__RETIRE_PLAIN - 1; i++)
        CHECK_INT_EQ(pm__retire_step(&r, 1), 0);
    CHECK_INT_EQ(r.retired, 0);
    CHECK_INT_EQ(pm__retire_step(&r, 1), 1); /* the PM__RETIRE_PLAIN-th in a row */
    CHECK_INT_EQ(r.retired, 1);
    CHECK_INT_EQ(r.times, 1u);
    CHECK_INT_EQ(pm__retire_step(&r, 0), 1); /* retired: no way back mid-request */
    CHECK_INT_EQ(r.times, 1u);
    return pm_check_result();
}

/* A retired head returns only at a request's start after
 * PM__RETIRE_TOKENS tokens generated retired; idle tokens before retiring
 * do not count. */
static int case_retire_restart(void)
{
    pm__retire r;
    pm__retire_init(&r);
    pm__retire_idle(&r, 5000); /* not retired: nothing counts */
    CHECK_INT_EQ(r.idle, 0);
    CHECK_INT_EQ(pm__retire_restart(&r), 0);
    for (int i = 0; i < PM__RETIRE_PLAIN; i++)
        pm__retire_step(&r, 1);
    CHECK_INT_EQ(r.retired, 1);
    pm__retire_idle(&r, PM__RETIRE_TOKENS - 1);
    CHECK_INT_EQ(pm__retire_restart(&r), 1); /* one token short */
    pm__retire_idle(&r, 1);
    CHECK_INT_EQ(pm__retire_restart(&r), 0);
    CHECK_INT_EQ(r.retired, 0);
    CHECK_INT_EQ(r.plain_run, 0);
    for (int i = 0; i < PM__RETIRE_PLAIN - 1; i++)
        CHECK_INT_EQ(pm__retire_step(&r, 1), 0);
    CHECK_INT_EQ(pm__retire_step(&r, 1), 1);
    CHECK_INT_EQ(r.times, 2u);
    CHECK_INT_EQ(r.idle, 0); /* counted afresh */
    return pm_check_result();
}

/* The block drafter's acceptance by position (pm__cost_expected): a
 * round of k 4 accepting 2, then one accepting all 4. Decayed by 0.9:
 * positions 1, 2 reached 1.9 times and accepted 1.9, position 3 reached
 * 1.9 and accepted 1.0, position 4 reached and accepted 1.0; pooled
 * a = (5.8 + 1) / (5.8 + 0.9 + 2). Each position's share is shrunk by 2
 * pseudo-trials at a; positions 5.. read a. The model drafter with the
 * same history stays geometric. verify(w) = 100 + 35 (w - 1), a head
 * forward 60 ns (measured at 4 rows, so every width reads 60): k 4 wins at E(4) / 300 (k 3: E(3) / 265 = 0.012056
 * against 0.012125); the geometric estimate alone would have taken k 3
 * at 0.010830. */
static int case_block_positions(void)
{
    pm__cost c;
    pm__cost_init(&c, 0.39);
    widths(&c, 35.0, 9);
    pm__cost_accept(&c, LLM_DRAFTER_BLOCK, 4, 2);
    pm__cost_accept(&c, LLM_DRAFTER_BLOCK, 4, 4);
    pm__cost_accept(&c, LLM_DRAFTER_MODEL, 4, 2);
    pm__cost_accept(&c, LLM_DRAFTER_MODEL, 4, 4);
    const double a = 6.8 / 8.7;
    CHECK_NEAR(pm__cost_acceptance(&c, LLM_DRAFTER_BLOCK), a, 1e-12);
    const double p12 = (1.9 + 2.0 * a) / 3.9, p3 = (1.0 + 2.0 * a) / 3.9, p4 = (1.0 + 2.0 * a) / 3.0;
    const double e4 = 1.0 + p12 + p12 * p12 + p12 * p12 * p3 + p12 * p12 * p3 * p4;
    CHECK_NEAR(pm__cost_expected(&c, LLM_DRAFTER_BLOCK, 4), e4, 1e-12);
    CHECK_NEAR(pm__cost_expected(&c, LLM_DRAFTER_BLOCK, 5), e4 + p12 * p12 * p3 * p4 * a, 1e-12);
    CHECK_NEAR(pm__cost_expected(&c, LLM_DRAFTER_BLOCK, 0), 1.0, 1e-12);
    CHECK_NEAR(pm__cost_expected(&c, LLM_DRAFTER_MODEL, 4), 1.0 + a + a * a + a * a * a + a * a * a * a,
               1e-12);
    pm__cost_head(&c, 4, 60);
    pm__cost_choice ch;
    choose(&c, 1u << LLM_DRAFTER_BLOCK, 1, 8, 0, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_BLOCK);
    CHECK_INT_EQ(ch.k, 4);
    CHECK_NEAR(ch.rate, e4 / 300.0, 1e-12);
    return pm_check_result();
}

/* The block head's price by its width (pm__cost_head): no acceptance
 * seen (a = 0.5 at every position, E(k) = 2 - 0.5^k), verify(w) = 100 +
 * 10 (w - 1). Measured at 8 rows only, the head reads 90 at every width:
 * k 1 gives 1.5 / 190 and k 8 1.99609375 / 260, neither beating a decode
 * by 3 % (1.03 / 100), so plain. Measured at 1 row too (20 ns), widths
 * between interpolate (10 + 10 k): k 1 1.5 / 130 = 0.011538, k 2 1.75 /
 * 150 = 0.011667, k 3 1.875 / 170 = 0.011029, so k 2. */
static int case_block_head_widths(void)
{
    pm__cost c;
    pm__cost_init(&c, 0.39);
    widths(&c, 10.0, 9);
    pm__cost_head(&c, 8, 90);
    pm__cost_choice ch;
    choose(&c, 1u << LLM_DRAFTER_BLOCK, 1, 8, 0, &ch);
    CHECK_INT_EQ(ch.kind, -1);
    pm__cost_head(&c, 1, 20);
    choose(&c, 1u << LLM_DRAFTER_BLOCK, 1, 8, 0, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_BLOCK);
    CHECK_INT_EQ(ch.k, 2);
    CHECK_NEAR(ch.rate, 1.75 / 150.0, 1e-12);
    choose(&c, 1u << LLM_DRAFTER_BLOCK, 3, 8, 0, &ch);
    CHECK_INT_EQ(ch.k, 3);
    CHECK_NEAR(ch.rate, 1.875 / 170.0, 1e-12);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*run)(void);
    } cases[] = {{"unmeasured", case_unmeasured}, {"widths", case_widths}, {"cpu", case_cpu},
                 {"hybrid", case_hybrid},         {"flat", case_flat},     {"acceptance", case_acceptance},
                 {"nothing_pays", case_nothing_pays}, {"trust", case_trust},
                 {"median", case_median},         {"overhead", case_overhead},
                 {"catchup", case_catchup},       {"probe", case_probe},
                 {"probe_price", case_probe_price}, {"sampled", case_sampled},
                 {"shadow", case_shadow},         {"guard_measure", case_guard_measure},
                 {"guard_trip", case_guard_trip}, {"guard_mixed", case_guard_mixed},
                 {"guard_refresh", case_guard_refresh}, {"guard_break", case_guard_break},
                 {"retire_run", case_retire_run}, {"retire_restart", case_retire_restart},
                 {"block_positions", case_block_positions},
                 {"block_head_widths", case_block_head_widths}};
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].run();
    fprintf(stderr, "usage: test_spec_cost CASE (unmeasured, trust, median, widths, cpu, hybrid, "
                    "flat, acceptance, nothing_pays, overhead, catchup, probe, probe_price, "
                    "sampled, shadow, "
                    "guard_measure, guard_trip, guard_mixed, guard_refresh, guard_break, retire_run, "
                    "retire_restart, block_positions, block_head_widths)\n");
    return 2;
}
