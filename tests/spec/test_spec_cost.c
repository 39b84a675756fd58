/* test_spec_cost — cost-aware k's choice (spec_cost.h) from injected
 * costs: no clock anywhere, every expected value worked by hand below.
 *
 *   unmeasured  nothing measured: plain decoding (to measure a decode)
 *   widths      interpolation, extrapolation and the prior slope
 *   cpu         a CPU-like table (a verify row costs 0.35 decode): the
 *               model pays at k = 1 with a 0.39 draft; not at 0.50
 *   hybrid      a free, well-accepted n-gram proposal beats the model; with
 *               no n-gram match the model's k = 1 is chosen
 *   flat        a GPU-like table (verify ~ one decode): the widest k
 *   acceptance  the decayed acceptance estimate
 *   nothing_pays  hybrid, an expensive draft and a rejected n-gram: plain
 */
#include <stdio.h>
#include <string.h>

#include "pm_check.h"
#include "spec_cost.h"

#define MODEL (1u << LLM_DRAFTER_MODEL)
#define NGRAM (1u << LLM_DRAFTER_NGRAM)

/* verify(w) = 100 + slope * (w - 1) ns for w = 1..n. */
static void widths(pm__cost *c, double slope, int n)
{
    for (int w = 1; w <= n; w++)
        pm__cost_verify(c, w, (uint64_t)(100.0 + slope * (w - 1)));
}

static int case_unmeasured(void)
{
    pm__cost c;
    pm__cost_init(&c, 0.4);
    pm__cost_choice ch;
    pm__cost_choose(&c, MODEL | NGRAM, 1, 4, 4, &ch);
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
    /* A second observation moves the average by PM__COST_EMA (0.2). */
    pm__cost_verify(&c, 1, 200);
    CHECK_NEAR(pm__cost_width(&c, 1), 120.0, 1e-9);
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
    pm__cost_choose(&c, MODEL, 1, 4, 0, &ch); /* the prior step: 0.39 * 100 */
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_MODEL);
    CHECK_INT_EQ(ch.k, 1);
    CHECK_NEAR(ch.rate, (1.0 + 5.0 / 6.0) / 174.0, 1e-12);
    CHECK_NEAR(ch.plain_rate, 0.01, 1e-12);
    pm__cost_draft(&c, LLM_DRAFTER_MODEL, 2, 100); /* measured: 50 a step */
    pm__cost_choose(&c, MODEL, 1, 4, 0, &ch);
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
    pm__cost_choose(&c, MODEL | NGRAM, 1, 4, 3, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_NGRAM);
    CHECK_INT_EQ(ch.k, 3);
    CHECK_NEAR(ch.rate, (1.0 + a + a * a + a * a * a) / 206.0, 1e-12);
    pm__cost_choose(&c, MODEL, 1, 4, 0, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_MODEL);
    CHECK_INT_EQ(ch.k, 1);
    /* A one-token match caps the n-gram at k = 1: 1.87013 / 136 =
     * 0.013751, still above the model. */
    pm__cost_choose(&c, MODEL | NGRAM, 1, 4, 1, &ch);
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
    pm__cost_choose(&c, MODEL, 1, 4, 0, &ch);
    CHECK_INT_EQ(ch.kind, LLM_DRAFTER_MODEL);
    CHECK_INT_EQ(ch.k, 4);
    pm__cost_choose(&c, MODEL, 1, 2, 0, &ch); /* k_max bounds it */
    CHECK_INT_EQ(ch.k, 2);
    pm__cost_choose(&c, MODEL, 3, 4, 0, &ch); /* and k_min */
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
        pm__cost_choose(&c, MODEL | NGRAM, 1, 4, n, &ch);
        CHECK_INT_EQ(ch.kind, -1);
        CHECK_INT_EQ(ch.k, 0);
        CHECK_NEAR(ch.rate, 0.01, 1e-12);
    }
    /* One accepted n-gram round of 3 more: acc 3, rej 1.71, a = 4 / 6.71;
     * k=1 (1 + a) / 136 = 0.011736 beats k=2 0.011412, k=3 0.010502 and
     * plain: drafting resumes at k = 1. */
    pm__cost_accept(&c, LLM_DRAFTER_NGRAM, 3, 3);
    pm__cost_choose(&c, MODEL | NGRAM, 1, 4, 3, &ch);
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

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*run)(void);
    } cases[] = {{"unmeasured", case_unmeasured}, {"widths", case_widths}, {"cpu", case_cpu},
                 {"hybrid", case_hybrid},         {"flat", case_flat},     {"acceptance", case_acceptance},
                 {"nothing_pays", case_nothing_pays}};
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].run();
    fprintf(stderr, "usage: test_spec_cost unmeasured|widths|cpu|hybrid|flat|acceptance\n");
    return 2;
}
