/* sampler.c — greedy, temperature, top-k and top-p sampling.
 *
 * Determinism: the random stream is splitmix64 from the seed, one draw per
 * sampled token, and a draw walks the kept candidates in a fixed order (by
 * probability then by id under a nucleus, which needs the ranking; else by
 * id, or the top-k selection's order), so the same seed and logits give
 * the same token on every machine. The
 * sampler's buffers ([n_vocab] candidates) are allocated at creation; a draw
 * allocates nothing.
 *
 * Order of cuts: probabilities are softmax(logits / T); top-k keeps the k
 * most probable; top-p then keeps the smallest most-probable prefix of those
 * whose renormalized mass reaches p. Candidates that cannot be in the
 * nucleus (probability below (1 - p) / n of the whole: even if every
 * candidate from it on had its probability, they could not hold the 1 - p
 * of mass left outside the nucleus) are dropped
 * before sorting, which keeps a top-p-only draw far from a full sort.
 */
#include <math.h>
#include <stdlib.h>

#include "argmax.h" /* the greedy rule, shared with the runner */
#include "phasemark/engine.h"

typedef struct cand {
    float p;
    int32_t id;
} cand;

struct llm_sampler {
    llm_sampler_params p;
    int32_t n_vocab;
    uint64_t state; /* splitmix64 */
    cand *c;        /* [n_vocab] */
};

static uint64_t next_u64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double next_unit(uint64_t *state)
{
    return (double)(next_u64(state) >> 11) * (1.0 / 9007199254740992.0);
}

int llm_sampler_create(const llm_sampler_params *p, int32_t n_vocab,
                       llm_sampler **out)
{
    llm_sampler_params defaults = LLM_SAMPLER_PARAMS_INIT;
    if (!out)
        return LLM_EINVAL;
    *out = NULL;
    if (!p)
        p = &defaults;
    if (n_vocab < 1 || p->version != LLM_SAMPLER_PARAMS_VERSION ||
        p->size < sizeof(llm_sampler_params) || isnan(p->temperature) || isnan(p->top_p))
        return LLM_EINVAL;
    llm_sampler *sp = calloc(1, sizeof *sp);
    if (!sp)
        return LLM_ENOMEM;
    sp->c = malloc((size_t)n_vocab * sizeof *sp->c);
    if (!sp->c) {
        free(sp);
        return LLM_ENOMEM;
    }
    sp->p = *p;
    sp->n_vocab = n_vocab;
    sp->state = p->seed;
    *out = sp;
    return 0;
}

void llm_sampler_free(llm_sampler *sp)
{
    if (!sp)
        return;
    free(sp->c);
    free(sp);
}

void llm_sampler_reseed(llm_sampler *sp, uint64_t seed)
{
    sp->state = seed;
}

/* a ranks before b: more probable, or as probable with a lower id. */
static int before(const cand *a, const cand *b)
{
    return a->p > b->p || (a->p == b->p && a->id < b->id);
}

static int cmp_cand(const void *x, const void *y)
{
    const cand *a = x, *b = y;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* Min-heap on rank (the root ranks last) for selecting the top k. */
static void sift_down(cand *h, int32_t n, int32_t i)
{
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && before(&h[m], &h[l]))
            m = l;
        if (r < n && before(&h[m], &h[r]))
            m = r;
        if (m == i)
            return;
        cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* Keeps the k best of c[0..n) in c[0..k), unordered. */
static void select_top_k(cand *c, int32_t n, int32_t k)
{
    for (int32_t i = k / 2 - 1; i >= 0; i--)
        sift_down(c, k, i);
    for (int32_t i = k; i < n; i++) {
        if (before(&c[i], &c[0])) {
            c[0] = c[i];
            sift_down(c, k, 0);
        }
    }
}

/* Unnormalized probabilities exp((l - max) / T) into sp->c; returns the
 * count kept (all, or those that could be in the nucleus) and the mass of
 * all of them in *total (the nucleus is a share of the whole). */
static int32_t weigh(llm_sampler *sp, const float *logits, double *total)
{
    int32_t n = sp->n_vocab;
    float mx = logits[llm_argmax(logits, n)];
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        float p = expf((logits[i] - mx) / sp->p.temperature);
        sp->c[i].p = p;
        sp->c[i].id = i;
        sum += p;
    }
    *total = sum;
    int top_k = sp->p.top_k > 0 && sp->p.top_k < n;
    int top_p = sp->p.top_p > 0.0f && sp->p.top_p < 1.0f;
    if (top_k || !top_p || n < 2)
        return n;
    double floor_p = (1.0 - sp->p.top_p) / n * sum;
    int32_t kept = 0;
    for (int32_t i = 0; i < n; i++)
        if (sp->c[i].p >= floor_p)
            sp->c[kept++] = sp->c[i];
    return kept;
}

/* The candidates a draw chooses from: softmax weights cut by top-k, sorted
 * by rank, cut by top-p. Leaves them in sp->c[0..n) and returns n; *mass is
 * their unnormalized total. Under a nucleus both llm_sample and
 * llm_sampler_probs take it (kept), so both apply exactly the same rules. */
static int32_t candidates(llm_sampler *sp, const float *logits, double *mass_out)
{
    double total;
    int32_t n = weigh(sp, logits, &total);
    int prefiltered = n < sp->n_vocab;
    if (sp->p.top_k > 0 && sp->p.top_k < n) {
        select_top_k(sp->c, n, sp->p.top_k);
        n = sp->p.top_k;
    }
    qsort(sp->c, (size_t)n, sizeof *sp->c, cmp_cand);
    double mass = 0.0;
    for (int32_t i = 0; i < n; i++)
        mass += sp->c[i].p;
    if (prefiltered)
        mass = total; /* the dropped candidates still count in the whole */
    if (sp->p.top_p > 0.0f && sp->p.top_p < 1.0f) {
        double need = sp->p.top_p * mass, acc = 0.0;
        int32_t cut = n;
        for (int32_t i = 0; i < n; i++) {
            acc += sp->c[i].p;
            if (acc >= need) {
                cut = i + 1;
                break;
            }
        }
        n = cut;
        mass = acc < need ? mass : acc;
    }
    *mass_out = mass;
    return n;
}

/* The kept candidates in sp->c[0..n) and their mass. With a nucleus they
 * are ranked (candidates); without one a draw needs them in some fixed
 * order only, so there is no sort: over a 4096-token vocabulary the sort
 * cost about half a small model's decode step, in every sampled step and
 * in every distribution speculative sampling fills. */
static int32_t kept(llm_sampler *sp, const float *logits, double *mass)
{
    if (sp->p.top_p > 0.0f && sp->p.top_p < 1.0f)
        return candidates(sp, logits, mass);
    double total;
    int32_t n = weigh(sp, logits, &total);
    if (sp->p.top_k > 0 && sp->p.top_k < n) {
        select_top_k(sp->c, n, sp->p.top_k);
        n = sp->p.top_k;
    }
    *mass = 0.0;
    for (int32_t i = 0; i < n; i++)
        *mass += sp->c[i].p;
    return n;
}

int32_t llm_sample(llm_sampler *sp, const float *logits)
{
    if (!sp || !logits)
        return LLM_EINVAL;
    if (!(sp->p.temperature > 0.0f))
        return llm_argmax(logits, sp->n_vocab);
    double mass;
    int32_t n = kept(sp, logits, &mass);
    double r = next_unit(&sp->state) * mass, acc = 0.0;
    for (int32_t i = 0; i < n; i++) {
        acc += sp->c[i].p;
        if (r < acc)
            return sp->c[i].id;
    }
    return sp->c[n - 1].id; /* rounding left r at the very top */
}

/* ---- distributions (speculative sampling) ------------------------------ */

void llm_sampler_get_params(const llm_sampler *sp, llm_sampler_params *p)
{
    *p = sp->p;
}

int32_t llm_sampler_n_vocab(const llm_sampler *sp)
{
    return sp->n_vocab;
}

int llm_sampler_probs(llm_sampler *sp, const float *logits, float *probs)
{
    if (!sp || !logits || !probs)
        return LLM_EINVAL;
    int32_t nv = sp->n_vocab;
    for (int32_t i = 0; i < nv; i++)
        probs[i] = 0.0f;
    if (!(sp->p.temperature > 0.0f)) {
        probs[llm_argmax(logits, nv)] = 1.0f;
        return 0;
    }
    double mass;
    int32_t n = kept(sp, logits, &mass);
    for (int32_t i = 0; i < n; i++)
        probs[sp->c[i].id] = (float)(sp->c[i].p / mass);
    return 0;
}

int32_t llm_sampler_draw(llm_sampler *sp, const float *probs)
{
    if (!sp || !probs)
        return LLM_EINVAL;
    int32_t nv = sp->n_vocab, last = -1;
    double mass = 0.0;
    for (int32_t i = 0; i < nv; i++) {
        if (!(probs[i] >= 0.0f))
            return LLM_EINVAL; /* negative or NaN */
        if (probs[i] > 0.0f) {
            mass += probs[i];
            last = i;
        }
    }
    if (last < 0 || !isfinite(mass))
        return LLM_EINVAL;
    double r = next_unit(&sp->state) * mass, acc = 0.0;
    for (int32_t i = 0; i < last; i++) {
        acc += probs[i];
        if (r < acc)
            return i;
    }
    return last; /* r fell in the last positive weight, or rounding */
}

double llm_sampler_uniform(llm_sampler *sp)
{
    return next_unit(&sp->state);
}
