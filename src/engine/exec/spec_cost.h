/* spec_cost.h — the cost table behind cost-aware k (LLM_SPEC_ADAPT_COST).
 *
 * One table per generator. It learns, as rounds run, what a target forward
 * of width w costs (w = 1 is a plain decode step, w = k + 1 a verify of k
 * drafts), what one draft step costs per drafter kind (a model forward; an
 * n-gram lookup), and each kind's per-token acceptance. From them it
 * picks, before a round, the drafter and k that maximise expected tokens
 * per nanosecond,
 *
 *     E(a, k) / (k * draft_step(kind) + verify(k + 1)),
 *     E(a, k) = (1 - a^(k+1)) / (1 - a)  (accepted drafts + the target's one),
 *
 * or a plain decode step when no choice beats 1 / verify(1).
 *
 * Unmeasured widths are interpolated linearly between measured ones, and
 * extrapolated past the widest with the slope of the two widest (or, with
 * one width known, PM__COST_PRIOR_SLOPE decodes per extra row: the CPU's
 * measured cost, docs/spec.md). An unmeasured draft step is taken as
 * prior_draft (a ratio of a decode) for the model and as free for the
 * n-gram lookup. Until a decode has been measured, the choice is plain
 * decoding (one step measures it).
 *
 * Pure arithmetic over the table: no clock, no allocation, so tests inject
 * costs and check choices exactly.
 */
#ifndef LLM_SPEC_COST_H
#define LLM_SPEC_COST_H

#include <stdint.h>

#include "phasemark/spec.h"

enum { PM__COST_WIDTH_MAX = 64 }; /* widths 1..64 are tracked */

#define PM__COST_PRIOR_SLOPE 0.35 /* extra decodes per extra verify row */
#define PM__COST_EMA 0.2          /* weight of a new observation */
#define PM__COST_DECAY 0.9        /* acceptance counts, per round */

typedef struct pm__cost {
    double verify_ns[PM__COST_WIDTH_MAX + 1]; /* by width; [0] unused */
    uint8_t verify_seen[PM__COST_WIDTH_MAX + 1];
    double step_ns[LLM_DRAFTER_COUNT];   /* one draft step, by round kind */
    uint8_t step_seen[LLM_DRAFTER_COUNT];
    double acc[LLM_DRAFTER_COUNT], rej[LLM_DRAFTER_COUNT]; /* decayed counts */
    double prior_draft;                  /* model step / decode, unmeasured */
} pm__cost;

/* What to do next. kind -1 and k 0: a plain decode step. */
typedef struct pm__cost_choice {
    int kind;
    int32_t k;
    double rate;       /* expected tokens per ns of the choice */
    double plain_rate; /* 1 / verify(1); 0 while unmeasured */
} pm__cost_choice;

void pm__cost_init(pm__cost *c, double prior_draft);

/* A target forward of `width` rows took ns. */
void pm__cost_verify(pm__cost *c, int32_t width, uint64_t ns);

/* A round's drafting by `kind` took ns over `steps` steps (model: its
 * forwards; n-gram: 1). */
void pm__cost_draft(pm__cost *c, int kind, uint32_t steps, uint64_t ns);

/* A round by `kind` drafted k and had `accepted` accepted. */
void pm__cost_accept(pm__cost *c, int kind, int32_t k, int32_t accepted);

/* The estimated cost of a forward of width w (ns; 0 while nothing is
 * measured). */
double pm__cost_width(const pm__cost *c, int32_t w);

/* The per-token acceptance estimate of kind. */
double pm__cost_acceptance(const pm__cost *c, int kind);

/* The best choice among the kinds in `kinds` (bit 1 << LLM_DRAFTER_*),
 * k in k_min..k_max (an n-gram proposal at most ngram_n), or plain
 * decoding. */
void pm__cost_choose(const pm__cost *c, unsigned kinds, int32_t k_min, int32_t k_max,
                     int32_t ngram_n, pm__cost_choice *out);

#endif
