/* drafter.h — what the speculative generator (spec.c) asks of a drafter
 * beyond the public calls of phasemark/spec.h: a round's context (sampler,
 * request id, the prompt's chunks) and a two-step proposal, so the round's
 * ranges can name the drafter and the count before the drafter works.
 *
 *   pm__drafter_plan     decides which kind drafts this round and how many
 *                        tokens (an n-gram lookup happens here; it is
 *                        cheap and allocation-free). 0 tokens: nothing to
 *                        propose, the generator takes a plain step.
 *   pm__drafter_propose  produces the planned tokens (model: the forwards),
 *                        inside the round's pm.draft leaf.
 *   pm__drafter_observe  the verdict, and the history length to keep.
 *
 * Invariant: the model drafter's session holds a prefix of the history the
 * generator passes (its position never exceeds the target's).
 */
#ifndef LLM_DRAFTER_H
#define LLM_DRAFTER_H

#include <stddef.h>
#include <stdint.h>

#include "phasemark/spec.h"
#include "tree.h"

/* One round as the generator sees it. */
typedef struct pm__draft_round {
    const int32_t *hist; /* hist[0..n_hist): the target's history, then last */
    size_t n_hist;
    int greedy;          /* proposals are argmax ids; else draws into q */
    uint64_t req;        /* request id of every draft forward */
    llm_sampler *sp;     /* sampled proposals (greedy: unused) */
    float *q;            /* [k][n_vocab]: q of sampled model proposals */
    uint32_t pfx_start, pfx_end; /* the prompt the target prefilled last, */
    int32_t pfx_chunk;           /* and its chunk (the draft repeats them) */
} pm__draft_round;

/* A round's plan. */
typedef struct pm__draft_plan {
    int32_t kind;      /* LLM_DRAFTER_MODEL, _NGRAM, _BLOCK or _CUSTOM */
    int32_t n;         /* tokens to propose, 0..k */
    int32_t match;     /* ngram / hybrid: the match length found (0: none) */
    int32_t ngram_n;   /* tokens the n-gram match could propose (<= k) */
} pm__draft_plan;

/* Plans a round of at most k tokens. prefer: -1 for the drafter's own
 * rule, or LLM_DRAFTER_MODEL / _NGRAM to force a hybrid's choice (cost-
 * aware k; ignored by other kinds). Never fails. */
void pm__drafter_plan(llm_drafter *d, const pm__draft_round *r, int32_t k, int prefer,
                      pm__draft_plan *plan);

/* Proposes plan->n tokens into out[0..n). *has_q: 1 when q rows 0..n-1
 * hold the proposals' distributions (sampled model proposals), 0 when
 * they are deterministic. *forwards: draft forwards run. 0 or negative. */
int pm__drafter_propose(llm_drafter *d, const pm__draft_round *r, const pm__draft_plan *plan,
                        int32_t *out, int *has_q, uint32_t *forwards);

/* The most tokens the drafter's session can hold past n_hist - 1 history
 * tokens (a model drafter's context room); INT32_MAX without a session. */
int32_t pm__drafter_room(const llm_drafter *d, size_t n_hist);

/* Tokens the last model proposal fed its session before drafting (1 in
 * a steady round, 2 after one that accepted everything; the prompt, or
 * the tokens of plain steps, otherwise); for a block proposal, the
 * committed positions it took into the head's context (at most a verify's
 * rows in a steady round, the prompt in the first). */
uint32_t pm__drafter_fed(const llm_drafter *d);

/* The history restarted (target at position 0): empties the session. */
void pm__drafter_restart(llm_drafter *d);

/* The draft session, or NULL. */
llm_session *pm__drafter_session(const llm_drafter *d);

/* ---- the block drafter's features ------------------------------------- */

/* The target layers (ascending, distinct) a target forward must report
 * features of for this drafter: their count (0: none, not a block
 * drafter) and *layers. */
int32_t pm__drafter_feat_layers(const llm_drafter *d, const int32_t **layers);

/* The model a block drafter reads the embedding and head of, else NULL. */
const llm_model *pm__drafter_target(const llm_drafter *d);

/* The buffer a target forward of `rows` tokens writes its features into
 * (llm_forward_params.features, *cap floats), after the rows committed
 * before were taken into the head's context. NULL (and *cap 0) for
 * another drafter, rows past the buffer, or a failure taking them (the
 * detail in llm_drafter_error). */
float *pm__drafter_feat_buf(llm_drafter *d, size_t rows, size_t *cap);

/* The buffer's rows 0..rows-1 (of a forward of plane_rows tokens) are the
 * features of committed target positions pos..pos+rows-1; the head takes
 * them in before its next proposal. */
void pm__drafter_feat_commit(llm_drafter *d, uint32_t pos, uint32_t rows, size_t plane_rows);

/* A tree round's proposal (draft_tree.h): the head's forward of `depth`
 * rows (1..its block size) after the history r, then a tree of up to
 * `budget` proposed nodes grown over them, at most `width` candidates per
 * row: *tree, and tok[1..tree->n) the nodes' tokens (tok[0] is left to
 * the caller: the root is the last committed token). Greedy rounds only.
 * 0, or negative with the detail in llm_drafter_error. */
int pm__drafter_block_tree(llm_drafter *d, const pm__draft_round *r, int32_t depth,
                           int32_t budget, int32_t width, llm_tree *tree, int32_t *tok);

/* After a tree verify of plane_rows nodes: the feature rows rows[j] move
 * to row j of every plane (j < count, rows ascending, rows[j] >= j), so
 * the accepted path's rows lie where pm__drafter_feat_commit reads them. */
void pm__drafter_feat_keep(llm_drafter *d, const int32_t *rows, int32_t count,
                           size_t plane_rows);

/* Takes the committed rows into the head's context now (tests). 0, or
 * negative with the detail in llm_drafter_error. */
int pm__drafter_block_sync(llm_drafter *d);

/* The hybrid's shortest match taken over the other drafter, when the
 * params leave it 0 (the device loop's hybrid rounds use it too). */
#define PM__HYBRID_MIN_DEFAULT 3

/* The longest-suffix n-gram lookup on its own (the ngram drafter's rule):
 * the match length (0: none) and the continuation's start in hist, at most
 * k tokens of which (*n) are proposed. Pure; for tests. */
int32_t pm__ngram_lookup(const int32_t *hist, size_t n_hist, int32_t ngram_min,
                         int32_t ngram_max, int32_t k, size_t *start, int32_t *n);

#endif
