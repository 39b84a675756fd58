/* spec_cost.h — the cost table and step policy behind cost-aware k
 * (LLM_SPEC_ADAPT_COST).
 *
 * One table per generator. It learns, as rounds run, what a target forward
 * of width w costs (w = 1 is a plain decode step, w = k + 1 a verify of k
 * drafts and the decision on it), what one draft step costs per drafter
 * kind (a model forward; an n-gram lookup), what a round costs beyond its
 * drafting and its verify (committing, cutting the caches back: the
 * round's bookkeeping), what the model drafter pays per token it must
 * catch up on (tokens committed while it did not draft: plain steps,
 * n-gram rounds), and each kind's per-token acceptance. From them it
 * picks, before a round, the drafter and k that maximise expected tokens
 * per nanosecond,
 *
 *     E(a, k) / (k * step(kind) + verify(k + 1) + over(kind) + C * E / H),
 *     E(a, k) = (1 - a^(k+1)) / (1 - a)  (accepted drafts + the target's one),
 *
 * (for the block drafter, whose head drafts all k in one forward, that
 * forward's price at k rows, pm__cost_head, for k * step, and E from its
 * acceptance by position: pm__cost_expected),
 *
 * C being the catch-up the model drafter owes before it can draft (paid
 * once, so spread over the H tokens the request has left, at most
 * PM__COST_HORIZON_MAX; PM__COST_HORIZON when unknown), or a plain
 * decode step when no choice beats 1 / verify(1) by PM__COST_MARGIN.
 *
 * Noise. Every cost is the median of its last PM__COST_RING samples, so a
 * stall of the host in one sample moves nothing; no drafting is chosen
 * until a decode has PM__COST_TRUST samples. A width with fewer samples
 * still counts (it is a measurement; the median settles as it fills).
 *
 * Unmeasured widths are interpolated linearly between measured ones, and
 * extrapolated past the widest with the slope of the two widest (or, with
 * one width known, PM__COST_PRIOR_SLOPE decodes per extra row: the CPU's
 * measured cost, docs/spec.md). An unmeasured model step is prior_draft (a
 * ratio of a decode), an unmeasured n-gram lookup free, an unmeasured
 * catch-up PM__COST_PRIOR_SLOPE model steps a token, an unmeasured
 * overhead 0.
 *
 * Plain runs and probes (pm__cost_next). While plain decoding wins, every
 * probe_every-th plain choice is a probe round instead (k_min model
 * drafts; the n-gram is never probed, its shadow tests below cost
 * nothing), so a drafter that starts to pay is noticed. A probe after
 * which the table still chooses plain doubles probe_every (up to
 * PM__COST_PROBE_MAX: a model probe owes a catch-up, so a drafter that
 * never pays costs less and less); one after which it drafts, or one that
 * accepted every draft it made, resets it to PM__COST_PROBE_MIN (an
 * estimate that a continuation's opening set low, where the block head
 * accepts about a third of what it does later, takes several good probes
 * to recover). A probe is also priced: what its round would cost beyond
 * the plain steps its expected tokens replace, the model's whole catch-up
 * included (a probe pays it at once), may be at most PM__COST_PROBE_SHARE
 * of the plain run before it, so a dear probe waits longer (up to
 * PM__COST_PROBE_FAR plain choices). A model probe after a plain stretch
 * feeds the draft the whole request so far, on the CPU some 20 decodes'
 * worth, so it waits for the start of a request (the prompt is all it
 * owes there) after hundreds of plain choices, instead of every 32.
 *
 * Shadow acceptance. While plain decoding (or, for a hybrid, the model)
 * wins, an n-gram proposal that exists costs nothing to make but a verify
 * to test. Instead the generator keeps it and compares it with the tokens
 * that follow (pm__cost_shadow_*): the first disagreement, or the whole
 * proposal matched, is one observation of the n-gram's acceptance, with
 * the law of a verified round (greedy: those tokens are the target's
 * argmax, what a verify takes; sampling: they are draws of the target's
 * law, so one equals a deterministic proposal d with probability p(d),
 * the acceptance test's). So the n-gram's estimate stays current without
 * probe rounds.
 *
 * The guard (pm__guard_*). The table prices a round from its parts, each
 * measured alone; what a round really costs can be more (a host where the
 * draft's forwards slow the target's, or the other way round; work no
 * part is charged for). So the generator also times whole steps (from
 * planning to the last token emitted) and compares what the table's
 * choices realise with plain decoding: every PM__GUARD_WINDOW tokens of
 * the table's choices (its rounds and its own plain steps, at least one
 * round among them) are one window, judged against the median of the
 * last PM__COST_RING steady plain steps (a plain step after a plain step:
 * the cores as a plain run holds them). A window slower per token than
 * plain decoding trips the guard: the next `backoff` steps are plain,
 * whatever the table says, and backoff doubles (PM__GUARD_PLAIN_MIN up to
 * PM__GUARD_PLAIN_MAX), so a policy that keeps losing loses at most one
 * window in ever longer plain stretches; a window that wins resets it.
 * With fewer than PM__COST_TRUST steady plain samples, or after
 * PM__GUARD_REFRESH tokens of the table's choices without a new one, the
 * next PM__GUARD_MEASURE steps are plain, to measure plain decoding.
 *
 * Pure arithmetic over the table: no clock, no allocation, so tests inject
 * costs and check choices exactly.
 */
#ifndef LLM_SPEC_COST_H
#define LLM_SPEC_COST_H

#include <stdint.h>

#include "phasemark/spec.h"

enum {
    PM__COST_WIDTH_MAX = 64, /* widths 1..64 are tracked */
    PM__COST_RING = 8,       /* samples a median is taken over */
    PM__COST_TRUST = 3,      /* decode samples before drafting is chosen */
    PM__COST_HORIZON = 32,   /* tokens a catch-up is spread over, */
    PM__COST_HORIZON_MAX = 256, /* when the request's end is unknown / far */
    PM__COST_PROBE_MIN = 32, /* plain choices between probes, at first */
    PM__COST_PROBE_MAX = 512, /* and at most, */
    PM__COST_PROBE_FAR = 4096 /* unless a probe's price asks for more */
};

enum {
    PM__GUARD_WINDOW = 32,     /* tokens of the table's choices judged at once */
    PM__GUARD_PLAIN_MIN = 32,  /* plain steps a trip forces, at first */
    PM__GUARD_PLAIN_MAX = 512, /* and at most */
    PM__GUARD_MEASURE = PM__COST_RING + 1, /* plain steps that measure plain
                                              decoding (the first is not steady) */
    PM__GUARD_REFRESH = 512    /* tokens of the table's choices before the plain
                                  reference is measured again */
};

#define PM__COST_PRIOR_SLOPE 0.35 /* extra decodes per extra verify row */
#define PM__COST_POS_PRIOR 2.0    /* pseudo-trials of a block position at the
                                     pooled acceptance */
#define PM__COST_DECAY 0.9        /* acceptance counts, per round */
#define PM__COST_MARGIN 0.03      /* drafting must beat plain by 3 % */
#define PM__COST_PROBE_SHARE 0.01 /* of plain decoding's time probes may
                                     spend beyond their tokens' worth */

/* A robust running cost: the median of the last samples (ns). */
typedef struct pm__cost_est {
    double ring[PM__COST_RING];
    double med;    /* the median of ring[0..n); 0 while n is 0 */
    uint8_t n;     /* samples held, <= PM__COST_RING */
    uint8_t next;  /* the slot the next sample replaces */
} pm__cost_est;

typedef struct pm__cost {
    pm__cost_est verify[PM__COST_WIDTH_MAX + 1]; /* by width; [0] unused */
    pm__cost_est step[LLM_DRAFTER_COUNT];        /* one draft step, by kind */
    pm__cost_est head[PM__COST_WIDTH_MAX + 1];   /* the block head's forward of
                                                    w rows, by w; [0] unused */
    pm__cost_est over[LLM_DRAFTER_COUNT];        /* a round's bookkeeping */
    pm__cost_est catchup;  /* the model drafter, per token caught up on */
    double acc[LLM_DRAFTER_COUNT], rej[LLM_DRAFTER_COUNT]; /* decayed counts */
    /* The block drafter by position (1..64): decayed rounds that reached
     * position i (its drafts 1..i-1 accepted) and that accepted it. */
    double pos_try[PM__COST_WIDTH_MAX + 1], pos_acc[PM__COST_WIDTH_MAX + 1];
    double prior_draft;    /* model step / decode, unmeasured */
    int32_t plain_run;     /* plain choices since the last round */
    int32_t probe_every;   /* plain choices before a probe */
    int probing;           /* the last choice was a probe round */
    int probe_full;        /* that probe accepted all its drafts */
    int32_t shadow_n;      /* an n-gram proposal's length under test; 0: none */
    int32_t shadow_i;      /* of it, tokens plain steps matched so far */
} pm__cost;

/* The guard's state (above). */
typedef struct pm__guard {
    pm__cost_est plain; /* ns of a steady plain step */
    double win_ns;      /* the open window: its steps' wall time, */
    int64_t win_tok;    /* their tokens */
    int32_t win_rounds; /* and rounds among them */
    int64_t stale;      /* tokens of the table's choices since the last
                           steady plain sample */
    int32_t forced;     /* plain steps still forced; 0: the table chooses */
    int32_t backoff;    /* plain steps the next trip forces */
    int last_plain;     /* the last step was a plain one */
    uint32_t trips;     /* windows that lost to plain decoding */
    uint32_t passes;    /* windows that did not */
    uint32_t measures;  /* stretches forced to measure plain decoding */
} pm__guard;


typedef struct pm__cost_query {
    unsigned kinds;   /* bit 1 << LLM_DRAFTER_* for each kind that can draft */
    int32_t k_min, k_max;
    int32_t ngram_n;  /* tokens the n-gram match proposes (caps its k) */
    uint32_t behind;  /* tokens the model drafter must catch up on beyond a
                         steady round's one or two (0: in step) */
    int64_t left;     /* tokens the request may still emit (0: unknown) */
} pm__cost_query;

/* What to do next. kind -1 and k 0: a plain decode step. */
typedef struct pm__cost_choice {
    int kind;
    int32_t k;
    int probe;         /* a probe round (pm__cost_next only) */
    double rate;       /* expected tokens per ns of the choice */
    double plain_rate; /* 1 / verify(1); 0 while untrusted */
} pm__cost_choice;

void pm__cost_init(pm__cost *c, double prior_draft);

/* Adds one sample to an estimate. */
void pm__cost_est_add(pm__cost_est *e, double ns);

/* A target forward of `width` rows (and its decision) took ns. */
void pm__cost_verify(pm__cost *c, int32_t width, uint64_t ns);

/* A round's drafting by `kind` took ns over `steps` steps (model: its
 * forwards; n-gram: 1), in a steady round (no catch-up). */
void pm__cost_draft(pm__cost *c, int kind, uint32_t steps, uint64_t ns);

/* The block drafter's head proposed `rows` tokens in one forward, in a
 * steady round (its context fed no more than a round's tokens), in ns:
 * its price grows with the rows (little up to a few, then about a tenth
 * of a decode a row on the CPU), so it is learned by width like a
 * verify's, interpolated between measured widths and flat past the one
 * measured width (unmeasured: free, so the first round is tried). */
void pm__cost_head(pm__cost *c, int32_t rows, uint64_t ns);

/* A model round fed its draft `fed` (> 2) tokens and ran `steps` forwards
 * in ns: the part beyond steps * step is the catch-up over fed - 1 tokens.
 * Ignored until a step is measured. */
void pm__cost_catchup(pm__cost *c, uint32_t fed, uint32_t steps, uint64_t ns);

/* A round by `kind` spent ns outside its drafting and its verify. */
void pm__cost_overhead(pm__cost *c, int kind, uint64_t ns);

/* A round by `kind` drafted k and had `accepted` accepted. */
void pm__cost_accept(pm__cost *c, int kind, int32_t k, int32_t accepted);

/* The estimated cost of a forward of width w (ns; 0 while nothing is
 * measured). */
double pm__cost_width(const pm__cost *c, int32_t w);

/* The per-token acceptance estimate of kind. */
double pm__cost_acceptance(const pm__cost *c, int kind);

/* The expected tokens a round of kind with k drafts commits (its accepted
 * drafts and the target's one): 1 + a + ... + a^k for the model and the
 * n-gram drafters, whose acceptance per token is about flat; for the
 * block drafter, whose head proposes every position from the same
 * context and is surer of the near ones (the shipped head accepts 0.86 of
 * its first proposals and 0.36 of sixteen), 1 + p1 + p1 p2 + ... with p_i
 * the decayed share of rounds reaching position i that accepted it,
 * shrunk towards the pooled acceptance by PM__COST_POS_PRIOR
 * pseudo-trials (so an untried position reads the pooled estimate). */
double pm__cost_expected(const pm__cost *c, int kind, int32_t k);

/* The best choice for q by the table alone, or plain decoding. */
void pm__cost_choose(const pm__cost *c, const pm__cost_query *q, pm__cost_choice *out);

/* The generator's choice: pm__cost_choose, with plain runs broken by
 * probes (above); updates plain_run, probe_every and probing. */
void pm__cost_next(pm__cost *c, const pm__cost_query *q, pm__cost_choice *out);

/* Shadow acceptance (above): a plain step or a model round is about to
 * run while an n-gram proposal of n tokens exists; ignored while one is
 * under test. 1 when the caller should keep the proposal for
 * pm__cost_shadow_step. */
int pm__cost_shadow_start(pm__cost *c, int32_t n);

/* The next token the target produced (a plain step's, or one a round
 * committed) is the proposal's next (match 1) or another (0); the test
 * ends, and counts, at a mismatch or the proposal's end. */
void pm__cost_shadow_step(pm__cost *c, int match);

/* An n-gram round ran, or a request starts: an unfinished test is
 * dropped. */
void pm__cost_shadow_drop(pm__cost *c);

void pm__guard_init(pm__guard *g);

/* 1 when the next step must be a plain step (the guard tripped, or it
 * measures plain decoding). */
int pm__guard_forced(const pm__guard *g);

/* A plain step of ns wall time ran, forced (by the guard: 1) or the
 * table's choice (0); its one token counts in the open window when it was
 * the table's. */
void pm__guard_plain(pm__guard *g, int forced, uint64_t ns);

/* A round the table chose took ns wall time and emitted `tokens`; judges
 * the window once it holds PM__GUARD_WINDOW tokens. */
void pm__guard_round(pm__guard *g, uint64_t ns, int32_t tokens);

/* A request ends or starts: the next plain step follows no plain step
 * (the window stays open: requests of one generator share it). */
void pm__guard_break(pm__guard *g);

/* Retiring a drafter whose upkeep costs every step (the block head: the
 * target's features captured and appended to its context on every plain
 * step too). After PM__RETIRE_PLAIN plain steps in a row where it could
 * draft (a probe round restarts the run), the drafter is retired: no
 * rounds of it, no features (a hybrid's n-gram, which costs nothing
 * between its rounds, drafts on), until a request starts after
 * PM__RETIRE_TOKENS tokens generated retired (its prefill then rebuilds
 * the head's context from scratch, and the table may try again). The plain steps the guard
 * forces count as the table's own do: they pay the same upkeep, and the
 * guard forces them because the table's rounds lost to plain decoding
 * (not counting them kept a head that did not pay fed through most of a
 * run, the table choosing a few dozen steps a request between forced
 * stretches and each request restarting the count). A round resets the
 * count. Arithmetic only: the generator asks and obeys. */
#define PM__RETIRE_PLAIN 48
#define PM__RETIRE_TOKENS 2048

typedef struct pm__retire {
    int32_t plain_run; /* plain steps in a row, the table's or forced */
    int retired;       /* 1: no rounds, no features */
    int64_t idle;      /* tokens generated since retiring */
    uint32_t times;    /* retirements so far */
} pm__retire;

void pm__retire_init(pm__retire *r);

/* A step ran: a plain step where the drafter could draft, the table's or
 * one the guard forced (plain 1), or a round (0). 1 when the drafter is
 * retired from now on. */
int pm__retire_step(pm__retire *r, int plain);

/* A retired generator emitted n tokens. */
void pm__retire_idle(pm__retire *r, int64_t n);

/* A request starts from position 0 (the head's context restarts): 1 when
 * the drafter is retired for this request, else 0 (retired long enough:
 * it returns). */
int pm__retire_restart(pm__retire *r);

#endif
