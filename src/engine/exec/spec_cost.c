/* spec_cost.c — the cost table and step policy of cost-aware k
 * (spec_cost.h). */
#include <string.h>

#include "spec_cost.h"

void pm__cost_init(pm__cost *c, double prior_draft)
{
    memset(c, 0, sizeof *c);
    c->prior_draft = prior_draft > 0.0 ? prior_draft : 0.0;
    c->probe_every = PM__COST_PROBE_MIN;
}

void pm__cost_est_add(pm__cost_est *e, double ns)
{
    e->ring[e->next] = ns;
    e->next = (uint8_t)((e->next + 1) % PM__COST_RING);
    if (e->n < PM__COST_RING)
        e->n++;
    /* Insertion sort of at most PM__COST_RING values: a few dozen
     * compares per sample, and every query reads med without sorting. */
    double s[PM__COST_RING];
    for (int i = 0; i < e->n; i++) {
        int j = i;
        for (; j > 0 && s[j - 1] > e->ring[i]; j--)
            s[j] = s[j - 1];
        s[j] = e->ring[i];
    }
    e->med = e->n % 2 ? s[e->n / 2] : 0.5 * (s[e->n / 2 - 1] + s[e->n / 2]);
}

void pm__cost_verify(pm__cost *c, int32_t width, uint64_t ns)
{
    if (width >= 1 && width <= PM__COST_WIDTH_MAX)
        pm__cost_est_add(&c->verify[width], (double)ns);
}

void pm__cost_draft(pm__cost *c, int kind, uint32_t steps, uint64_t ns)
{
    if (kind >= 0 && kind < LLM_DRAFTER_COUNT && steps > 0)
        pm__cost_est_add(&c->step[kind], (double)ns / (double)steps);
}

void pm__cost_head(pm__cost *c, int32_t rows, uint64_t ns)
{
    if (rows >= 1 && rows <= PM__COST_WIDTH_MAX)
        pm__cost_est_add(&c->head[rows], (double)ns);
}

void pm__cost_catchup(pm__cost *c, uint32_t fed, uint32_t steps, uint64_t ns)
{
    const pm__cost_est *st = &c->step[LLM_DRAFTER_MODEL];
    if (fed <= 2 || st->n == 0)
        return;
    double extra = (double)ns - (double)steps * st->med;
    pm__cost_est_add(&c->catchup, extra > 0.0 ? extra / (double)(fed - 1) : 0.0);
}

void pm__cost_overhead(pm__cost *c, int kind, uint64_t ns)
{
    if (kind >= 0 && kind < LLM_DRAFTER_COUNT)
        pm__cost_est_add(&c->over[kind], (double)ns);
}

void pm__cost_accept(pm__cost *c, int kind, int32_t k, int32_t accepted)
{
    if (kind < 0 || kind >= LLM_DRAFTER_COUNT)
        return;
    if (c->probing)
        c->probe_full = accepted >= k;
    c->acc[kind] = c->acc[kind] * PM__COST_DECAY + accepted;
    c->rej[kind] = c->rej[kind] * PM__COST_DECAY + (accepted < k ? 1.0 : 0.0);
    if (kind != LLM_DRAFTER_BLOCK)
        return;
    for (int32_t i = 1; i <= PM__COST_WIDTH_MAX; i++) {
        c->pos_try[i] *= PM__COST_DECAY;
        c->pos_acc[i] *= PM__COST_DECAY;
    }
    /* Positions 1..accepted were reached and accepted; the next one, when
     * there was one, reached and rejected. */
    for (int32_t i = 1; i <= k && i <= accepted + 1 && i <= PM__COST_WIDTH_MAX; i++) {
        c->pos_try[i] += 1.0;
        c->pos_acc[i] += i <= accepted ? 1.0 : 0.0;
    }
}

double pm__cost_acceptance(const pm__cost *c, int kind)
{
    /* One pseudo-observation each way: an unseen kind reads 0.5. */
    return (c->acc[kind] + 1.0) / (c->acc[kind] + c->rej[kind] + 2.0);
}

/* kind's acceptance at draft position i given the pooled estimate: the
 * pooled one, but for the block drafter its position's (pm__cost_expected). */
static double position_p(const pm__cost *c, int kind, int32_t i, double pooled)
{
    if (kind != LLM_DRAFTER_BLOCK || i > PM__COST_WIDTH_MAX)
        return pooled;
    return (c->pos_acc[i] + PM__COST_POS_PRIOR * pooled) / (c->pos_try[i] + PM__COST_POS_PRIOR);
}

double pm__cost_expected(const pm__cost *c, int kind, int32_t k)
{
    double a = pm__cost_acceptance(c, kind), e = 1.0, ak = 1.0;
    for (int32_t i = 1; i <= k; i++) {
        ak *= position_p(c, kind, i, a);
        e += ak;
    }
    return e;
}

/* The nearest measured width of tab strictly beyond `from` in direction
 * dir (+1 or -1), or 0. */
static int32_t measured_from(const pm__cost_est *tab, int32_t from, int32_t dir)
{
    for (int32_t i = from + dir; i >= 1 && i <= PM__COST_WIDTH_MAX; i += dir)
        if (tab[i].n)
            return i;
    return 0;
}

/* A forward of width w from a table by width: measured, else interpolated
 * between the measured widths around it, else extrapolated from one side
 * with the slope of its two measured widths nearest w, or with
 * prior_slope (a fraction of the one measured width's cost per row,
 * scaled to a first row) when only one is measured; 0 when none is. */
static double width_cost(const pm__cost_est *tab, int32_t w, double prior_slope)
{
    if (w < 1)
        return 0.0;
    if (w > PM__COST_WIDTH_MAX)
        w = PM__COST_WIDTH_MAX;
    if (tab[w].n)
        return tab[w].med;
    int32_t lo = measured_from(tab, w, -1), hi = measured_from(tab, w, +1);
    if (lo && hi)
        return tab[lo].med + (tab[hi].med - tab[lo].med) * (double)(w - lo) / (double)(hi - lo);
    if (!lo && !hi)
        return 0.0;
    int32_t a = lo ? lo : hi, b = measured_from(tab, a, lo ? -1 : +1);
    double va = tab[a].med;
    double slope = b ? (va - tab[b].med) / (double)(a - b)
                     : va * prior_slope / (1.0 + prior_slope * (a - 1));
    double v = va + slope * (double)(w - a);
    return v > 0.0 ? v : va;
}

double pm__cost_width(const pm__cost *c, int32_t w)
{
    return width_cost(c->verify, w, PM__COST_PRIOR_SLOPE);
}

/* A draft step of kind in ns: measured, or the prior; the block head's
 * forward of k rows by its width (flat past a single measured width). */
static double step_cost(const pm__cost *c, int kind, int32_t k, double decode)
{
    if (kind == LLM_DRAFTER_BLOCK)
        return width_cost(c->head, k, 0.0);
    if (c->step[kind].n)
        return c->step[kind].med;
    return kind == LLM_DRAFTER_MODEL ? c->prior_draft * decode : 0.0;
}

/* What the model drafter owes before drafting, behind tokens back. */
static double catchup_cost(const pm__cost *c, uint32_t behind, double decode)
{
    if (behind == 0)
        return 0.0;
    double per = c->catchup.n ? c->catchup.med
                              : PM__COST_PRIOR_SLOPE * step_cost(c, LLM_DRAFTER_MODEL, 1, decode);
    return per * (double)behind;
}

void pm__cost_choose(const pm__cost *c, const pm__cost_query *q, pm__cost_choice *out)
{
    const pm__cost_est *dec = &c->verify[1];
    double decode = pm__cost_width(c, 1);
    memset(out, 0, sizeof *out);
    out->kind = -1;
    if (dec->n < PM__COST_TRUST)
        return; /* measure decodes first */
    out->plain_rate = 1.0 / decode;
    out->rate = out->plain_rate;
    double bar = out->plain_rate * (1.0 + PM__COST_MARGIN), best = bar;
    unsigned kinds = q->kinds;
    if (q->ngram_n <= 0)
        kinds &= ~(1u << LLM_DRAFTER_NGRAM);
    /* A catch-up pays off over what is left of the request. */
    double h = q->left <= 0 ? PM__COST_HORIZON
               : q->left > PM__COST_HORIZON_MAX ? PM__COST_HORIZON_MAX : (double)q->left;
    for (int kind = 0; kind < LLM_DRAFTER_COUNT; kind++) {
        if (!(kinds & (1u << kind)))
            continue;
        int32_t hi = kind == LLM_DRAFTER_NGRAM && q->ngram_n < q->k_max ? q->ngram_n : q->k_max;
        double a = pm__cost_acceptance(c, kind);
        double over = c->over[kind].med;
        double owed = kind == LLM_DRAFTER_MODEL ? catchup_cost(c, q->behind, decode) / h : 0.0;
        /* E(a, k) = 1 + a + ... + a^k, summed as k grows (no pow: this
         * runs before every step). */
        double ak = 1.0, e = 1.0;
        for (int32_t k = 1; k < q->k_min; k++)
            ak *= position_p(c, kind, k, a), e += ak;
        for (int32_t k = q->k_min; k <= hi; k++) {
            ak *= position_p(c, kind, k, a);
            e += ak;
            /* An n-gram lookup is one step per round, whatever k; the
             * block head one forward of k rows. */
            double steps = kind == LLM_DRAFTER_MODEL ? (double)k : 1.0;
            double t = steps * step_cost(c, kind, k, decode) + pm__cost_width(c, k + 1) + over +
                       owed * e;
            double rate = t > 0.0 ? e / t : 0.0;
            if (rate > best) {
                best = out->rate = rate;
                out->kind = kind;
                out->k = k;
            }
        }
    }
}

/* What the probe round p would cost beyond the plain steps its expected
 * tokens replace (ns; negative when it would pay): its round priced as
 * pm__cost_choose prices one, but with the model's whole catch-up, which
 * a probe pays at once rather than spread over a request. */
static double probe_excess(const pm__cost *c, const pm__cost_query *q, const pm__cost_choice *p,
                           double decode)
{
    int model = p->kind == LLM_DRAFTER_MODEL;
    double steps = model ? (double)p->k : 1.0;
    double t = steps * step_cost(c, p->kind, p->k, decode) + pm__cost_width(c, p->k + 1) +
               c->over[p->kind].med + (model ? catchup_cost(c, q->behind, decode) : 0.0);
    return t - pm__cost_expected(c, p->kind, p->k) * decode;
}

/* Plain choices in a row before the probe p may run: its excess over at
 * most PM__COST_PROBE_SHARE of the plain decoding it interrupts, so that
 * probing a drafter that does not pay costs plain decoding at most that
 * share; PM__COST_PROBE_FAR at most. */
static double probe_wait(const pm__cost *c, const pm__cost_query *q, const pm__cost_choice *p,
                         double decode)
{
    double w = probe_excess(c, q, p, decode) / (PM__COST_PROBE_SHARE * decode);
    return w < PM__COST_PROBE_FAR ? w : PM__COST_PROBE_FAR;
}

/* The probe round for q: k_min of the model, else of the lowest kind
 * left. The n-gram is never probed: its shadow tests cost nothing. */
static void probe_choice(unsigned kinds, const pm__cost_query *q, pm__cost_choice *out)
{
    out->probe = 1;
    out->k = q->k_min;
    if (kinds & (1u << LLM_DRAFTER_MODEL)) {
        out->kind = LLM_DRAFTER_MODEL;
        return;
    }
    for (out->kind = 0; !(kinds & (1u << out->kind)); out->kind++)
        ;
}

void pm__cost_next(pm__cost *c, const pm__cost_query *q, pm__cost_choice *out)
{
    pm__cost_choose(c, q, out);
    if (c->probing) {
        /* The last probe's verdict is this choice, or its own drafts: one
         * that accepted every draft keeps probes frequent, since a table
         * learns acceptance a probe at a time (k_min drafts each) and an
         * estimate set low by a continuation's opening needs several. */
        c->probing = 0;
        if (out->kind >= 0 || c->probe_full)
            c->probe_every = PM__COST_PROBE_MIN;
        else if (c->probe_every < PM__COST_PROBE_MAX)
            c->probe_every *= 2;
        c->probe_full = 0;
    }
    if (out->kind >= 0) {
        c->plain_run = 0;
        return;
    }
    unsigned kinds = q->kinds & ~(1u << LLM_DRAFTER_NGRAM);
    if (!kinds || out->plain_rate == 0.0 || q->k_max < 1)
        return; /* nothing to probe, or decodes are still being measured */
    if (++c->plain_run < c->probe_every)
        return;
    pm__cost_choice p = *out;
    probe_choice(kinds, q, &p);
    if ((double)c->plain_run < probe_wait(c, q, &p, 1.0 / out->plain_rate))
        return; /* a dear probe (a long catch-up, say) waits longer */
    c->plain_run = 0;
    c->probing = 1;
    *out = p;
}

int pm__cost_shadow_start(pm__cost *c, int32_t n)
{
    if (c->shadow_n > 0 || n <= 0)
        return 0;
    c->shadow_n = n;
    c->shadow_i = 0;
    return 1;
}

void pm__cost_shadow_step(pm__cost *c, int match)
{
    if (c->shadow_n <= 0)
        return;
    if (match && ++c->shadow_i < c->shadow_n)
        return;
    pm__cost_accept(c, LLM_DRAFTER_NGRAM, c->shadow_n, c->shadow_i);
    c->shadow_n = c->shadow_i = 0;
}

void pm__cost_shadow_drop(pm__cost *c)
{
    c->shadow_n = c->shadow_i = 0;
}

/* ---- the guard ---------------------------------------------------------- */

void pm__guard_init(pm__guard *g)
{
    memset(g, 0, sizeof *g);
    g->backoff = PM__GUARD_PLAIN_MIN;
}

int pm__guard_forced(const pm__guard *g)
{
    return g->forced > 0;
}

static void window_reset(pm__guard *g)
{
    g->win_ns = 0.0;
    g->win_tok = 0;
    g->win_rounds = 0;
}

/* Closes a full window: a trip, a pass, or (no plain reference yet, or a
 * stale one) a stretch that measures plain decoding. */
static void judge(pm__guard *g)
{
    if (g->win_rounds == 0) {
        window_reset(g); /* the table chose plain throughout: nothing to judge */
        return;
    }
    if (g->plain.n < PM__COST_TRUST || g->stale >= PM__GUARD_REFRESH) {
        g->forced = PM__GUARD_MEASURE;
        g->measures++;
        window_reset(g);
        return;
    }
    if (g->win_ns > g->plain.med * (double)g->win_tok) {
        g->forced = g->backoff;
        g->backoff = g->backoff * 2 < PM__GUARD_PLAIN_MAX ? g->backoff * 2 : PM__GUARD_PLAIN_MAX;
        g->trips++;
    } else {
        g->backoff = PM__GUARD_PLAIN_MIN;
        g->passes++;
    }
    window_reset(g);
}

void pm__guard_plain(pm__guard *g, int forced, uint64_t ns)
{
    if (g->last_plain) {
        pm__cost_est_add(&g->plain, (double)ns);
        g->stale = 0;
    }
    g->last_plain = 1;
    if (forced) {
        if (g->forced > 0)
            g->forced--;
        return;
    }
    g->win_ns += (double)ns;
    g->win_tok++;
    if (g->win_tok >= PM__GUARD_WINDOW)
        judge(g);
}

void pm__guard_round(pm__guard *g, uint64_t ns, int32_t tokens)
{
    g->last_plain = 0;
    g->win_ns += (double)ns;
    g->win_tok += tokens;
    g->win_rounds++;
    g->stale += tokens;
    if (g->win_tok >= PM__GUARD_WINDOW)
        judge(g);
}

void pm__guard_break(pm__guard *g)
{
    g->last_plain = 0;
}

void pm__retire_init(pm__retire *r)
{
    memset(r, 0, sizeof *r);
}

int pm__retire_step(pm__retire *r, int plain)
{
    if (r->retired)
        return 1;
    r->plain_run = plain ? r->plain_run + 1 : 0;
    if (r->plain_run < PM__RETIRE_PLAIN)
        return 0;
    r->retired = 1;
    r->idle = 0;
    r->plain_run = 0;
    r->times++;
    return 1;
}

void pm__retire_idle(pm__retire *r, int64_t n)
{
    if (r->retired)
        r->idle += n;
}

int pm__retire_restart(pm__retire *r)
{
    if (r->retired && r->idle >= PM__RETIRE_TOKENS)
        r->retired = 0;
    r->plain_run = 0;
    return r->retired;
}
