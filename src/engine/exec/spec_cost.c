/* spec_cost.c — the cost table of cost-aware k (spec_cost.h). */
#include <math.h>
#include <string.h>

#include "spec_cost.h"

void pm__cost_init(pm__cost *c, double prior_draft)
{
    memset(c, 0, sizeof *c);
    c->prior_draft = prior_draft > 0.0 ? prior_draft : 0.0;
}

static void ema(double *v, uint8_t *seen, double x)
{
    *v = *seen ? (1.0 - PM__COST_EMA) * *v + PM__COST_EMA * x : x;
    *seen = 1;
}

void pm__cost_verify(pm__cost *c, int32_t width, uint64_t ns)
{
    if (width >= 1 && width <= PM__COST_WIDTH_MAX)
        ema(&c->verify_ns[width], &c->verify_seen[width], (double)ns);
}

void pm__cost_draft(pm__cost *c, int kind, uint32_t steps, uint64_t ns)
{
    if (kind >= 0 && kind < LLM_DRAFTER_COUNT && steps > 0)
        ema(&c->step_ns[kind], &c->step_seen[kind], (double)ns / (double)steps);
}

void pm__cost_accept(pm__cost *c, int kind, int32_t k, int32_t accepted)
{
    if (kind < 0 || kind >= LLM_DRAFTER_COUNT)
        return;
    c->acc[kind] = c->acc[kind] * PM__COST_DECAY + accepted;
    c->rej[kind] = c->rej[kind] * PM__COST_DECAY + (accepted < k ? 1.0 : 0.0);
}

double pm__cost_acceptance(const pm__cost *c, int kind)
{
    /* One pseudo-observation each way: an unseen kind reads 0.5. */
    return (c->acc[kind] + 1.0) / (c->acc[kind] + c->rej[kind] + 2.0);
}

/* The nearest measured widths below-or-at and above w (0: none). */
static void neighbours(const pm__cost *c, int32_t w, int32_t *lo, int32_t *hi)
{
    *lo = *hi = 0;
    for (int32_t i = w; i >= 1 && !*lo; i--)
        if (c->verify_seen[i])
            *lo = i;
    for (int32_t i = w + 1; i <= PM__COST_WIDTH_MAX && !*hi; i++)
        if (c->verify_seen[i])
            *hi = i;
}

double pm__cost_width(const pm__cost *c, int32_t w)
{
    if (w < 1)
        return 0.0;
    if (w > PM__COST_WIDTH_MAX)
        w = PM__COST_WIDTH_MAX;
    if (c->verify_seen[w])
        return c->verify_ns[w];
    int32_t lo, hi;
    neighbours(c, w, &lo, &hi);
    if (lo && hi)
        return c->verify_ns[lo] +
               (c->verify_ns[hi] - c->verify_ns[lo]) * (double)(w - lo) / (double)(hi - lo);
    if (!lo && !hi)
        return 0.0;
    /* One side only: the slope of the two measured widths nearest w on
     * that side, else the prior relative to the one measured width. */
    int32_t a = lo ? lo : hi, b = 0;
    if (lo) {
        for (int32_t i = lo - 1; i >= 1 && !b; i--)
            if (c->verify_seen[i])
                b = i;
    } else {
        for (int32_t i = hi + 1; i <= PM__COST_WIDTH_MAX && !b; i++)
            if (c->verify_seen[i])
                b = i;
    }
    double slope = b ? (c->verify_ns[a] - c->verify_ns[b]) / (double)(a - b)
                     : c->verify_ns[a] * PM__COST_PRIOR_SLOPE / (1.0 + PM__COST_PRIOR_SLOPE * (a - 1));
    double v = c->verify_ns[a] + slope * (double)(w - a);
    return v > 0.0 ? v : c->verify_ns[a];
}

/* Expected tokens a round of k drafts commits at per-token acceptance a. */
static double expected_tokens(double a, int32_t k)
{
    return a >= 1.0 ? (double)(k + 1) : (1.0 - pow(a, k + 1)) / (1.0 - a);
}

/* A draft step of kind in ns: measured, or the prior. */
static double step_cost(const pm__cost *c, int kind, double decode)
{
    if (c->step_seen[kind])
        return c->step_ns[kind];
    return kind == LLM_DRAFTER_MODEL ? c->prior_draft * decode : 0.0;
}

void pm__cost_choose(const pm__cost *c, unsigned kinds, int32_t k_min, int32_t k_max,
                     int32_t ngram_n, pm__cost_choice *out)
{
    double decode = pm__cost_width(c, 1);
    out->kind = -1;
    out->k = 0;
    out->plain_rate = c->verify_seen[1] ? 1.0 / decode : 0.0;
    out->rate = out->plain_rate;
    if (!c->verify_seen[1])
        return; /* measure a decode first */
    for (int kind = 0; kind < LLM_DRAFTER_COUNT; kind++) {
        if (!(kinds & (1u << kind)))
            continue;
        int32_t hi = kind == LLM_DRAFTER_NGRAM && ngram_n < k_max ? ngram_n : k_max;
        double a = pm__cost_acceptance(c, kind), step = step_cost(c, kind, decode);
        /* An n-gram lookup is one step per round, whatever k. */
        for (int32_t k = k_min; k <= hi; k++) {
            double steps = kind == LLM_DRAFTER_MODEL ? (double)k : 1.0;
            double t = steps * step + pm__cost_width(c, k + 1);
            double rate = t > 0.0 ? expected_tokens(a, k) / t : 0.0;
            if (rate > out->rate) {
                out->rate = rate;
                out->kind = kind;
                out->k = k;
            }
        }
    }
}
