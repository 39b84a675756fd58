/* cuda_loop.h — greedy generation whose steps and speculative rounds stay
 * on the device (issue 16, item 2).
 *
 * The engine's ordinary decode (llm_generate) replays one CUDA graph per
 * step but still waits for each step's token on the host before it can
 * launch the next. A device loop records whole steps instead, bookkeeping
 * included, so the host only launches:
 *
 *   plain (k = 0): one graph per token of the target session: embed the
 *     token in a device slot, the fused decode step (positions from the
 *     context's register), the head, the greedy id written back into the
 *     slot and appended to a ring, the register advanced. The host
 *     launches up to LLM_CUDA_LOOP_BATCH steps and reads the ring once.
 *   speculative (1 <= k <= LLM_CUDA_LOOP_K_MAX, a draft session): per
 *     round one graph on the draft's context (its k greedy steps: a
 *     two-row forward re-feeding the last accepted token and feeding the
 *     next one, then k-1 one-row steps, each id fed back on the device)
 *     and one on the target's (the verify of k+1 rows as the fused step's
 *     kernels over k+1 block rows, so each row has the bits the decode
 *     step at its position has; the greedy id of each row; the acceptance:
 *     accepted count, next token, both registers, the committed ids into a
 *     record). The two contexts' streams order each other through events.
 *     The host launches a batch of rounds and reads their records in one
 *     copy.
 *
 * Exactness. Every target row a round commits was computed by the same
 * kernels with the same inputs as the plain loop's step at that position,
 * so the greedy ids equal the plain loop's (and llm_generate's under the
 * seam's graph decode) token for token.
 *
 * Markers (PHASEMARK=1) are the engine's, emitted by the host around the
 * launches and never waiting for the device: plain, one "pm.decode" per
 * step enclosing its "pm.layer_range mode=decode" leaf; speculative, per
 * round one "pm.spec_decode mode=batched req=R draft=K" enclosing one
 * "pm.draft ... drafter=D" leaf (model: the first round's includes the
 * draft's prompt prefill; ngram: no forward; block: the head's graph) and
 * one "pm.layer_range mode=verify" leaf. A batch runs whole: rounds or steps launched past a
 * stop (EOS, max_tokens) are marked though their tokens are dropped.
 *
 * Sampling (temperature > 0, no top-k or top-p cut): the plain step draws
 * its token on the device (llm_cuda_sample with a uniform from a device
 * generator), a round's draft steps draw theirs and keep their logits, and
 * the acceptance runs standard speculative sampling (min(1, p/q), the
 * residual max(0, p - q) on the first rejection, a bonus draw from p after
 * k acceptances). The generator is seeded per call from the sampler (its
 * seed and its next draw, after the prompt's token is drawn on the host as
 * llm_generate draws it), so reseeding the sampler repeats a run. The
 * output is a draw of the target's law, not llm_generate's exact draw.
 * Proposals the host makes (n-gram rounds, the hybrid's n-gram rounds)
 * are deterministic: q is one-hot at each, so a proposal is kept with
 * probability p(d) and the residual is p without d.
 *
 * Limits. Monolithic sessions on CUDA backends whose every layer and head
 * take the fused step (llm_cuda_backend_loop_takes); a sampler with a
 * top-k or top-p cut is refused (LLM_EUNSUP); both sessions quiet of
 * their own ranges while the loop runs. One thread at a time per loop and
 * its sessions. Graphs are captured lazily, one for plain and one pair per
 * k, and again after a reservation replaced buffers they use.
 *
 * Errors: 0 or a negative LLM_E* status; detail in llm_cuda_loop_error.
 */
#ifndef LLM_CUDA_LOOP_H
#define LLM_CUDA_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_backend.h"
#include "phasemark/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most drafted tokens a device round verifies (k + 1 rows a verify). */
#define LLM_CUDA_LOOP_K_MAX 16
/* Ints of one round's record: the count, then up to k + 1 ids, and last
 * the proposal's length (device n-gram rounds). */
#define LLM_CUDA_LOOP_REC (LLM_CUDA_LOOP_K_MAX + 3)
/* Most plain steps (or rounds) launched before the host reads back. */
#define LLM_CUDA_LOOP_BATCH 16

/* ---- kernels (cuda_loop.cu) -------------------------------------------- */

/* Appends *tok to ring[*count % cap], bumps *count and c's position
 * register (one plain step's bookkeeping). Stream-ordered. */
int llm_cuda_loop_commit1(llm_cuda *c, const int32_t *tok, int32_t *ring, uint32_t cap,
                          uint32_t *count);

/* A greedy round's acceptance on c's stream (k = 0: a plain step in the
 * round's form, committing g[0]): a = the longest prefix of
 * vin[1..k] equal to g[0..a), next = g[a]; the record rec[*round % cap]
 * ([LLM_CUDA_LOOP_REC] ints) gets a + 1 and vin[1..a], next; then vin[0] =
 * next, din = {vin[a], next}, c's register += a + 1, *draft_pos = c's new
 * register - 1, *round += 1. */
int llm_cuda_loop_accept(llm_cuda *c, const int32_t *g, int32_t *vin, int32_t *din, int32_t k,
                         uint32_t *draft_pos, int32_t *rec, uint32_t rec_cap, uint32_t *round);

/* Sampling (temperature only). rng is device uint64 [2]: a seed and a
 * counter; each draw takes the counter-th uniform of the seed (splitmix64)
 * and bumps the counter. _rng writes one draw into *u (device float) for
 * llm_cuda_sample. _accept_sampled is _accept under standard speculative
 * sampling: p and q are softmax(logits / temperature) of the target's
 * rows tlog [k+1][vocab] and the draft's dlog [k][vocab]; draft id d_i is
 * accepted with probability min(1, p_i(d_i) / q_i(d_i)); the first
 * rejection draws next from max(0, p_i - q_i) normalized; after k
 * acceptances next is drawn from p_k. The bookkeeping is _accept's.
 * dlog NULL: deterministic proposals (n-gram: q one-hot at d_i), so d_i
 * is accepted with probability p_i(d_i) and the residual is p_i without
 * d_i; k may then be 0 (a plain step drawing from p_0).
 * scratch is device memory of LLM_CUDA_LOOP_ACCEPT_SCRATCH floats, its
 * last one zero before the first launch (the kernel leaves it so): the
 * rows' softmax pairs, found by 2k + 1 blocks at once, and their ticket. */
#define LLM_CUDA_LOOP_ACCEPT_PAIRS (2 * (2 * LLM_CUDA_LOOP_K_MAX + 1))
#define LLM_CUDA_LOOP_ACCEPT_SCRATCH (LLM_CUDA_LOOP_ACCEPT_PAIRS + 1)
int llm_cuda_loop_rng(llm_cuda *c, uint64_t *rng, float *u);
int llm_cuda_loop_accept_sampled(llm_cuda *c, const float *tlog, const float *dlog,
                                 int32_t vocab, float temperature, uint64_t *rng, int32_t *vin,
                                 int32_t *din, int32_t k, uint32_t *draft_pos, int32_t *rec,
                                 uint32_t rec_cap, uint32_t *round, float *scratch);

/* Draws out[r] (r < rows) from softmax(logits[r] / temperature), row r
 * with the generator's (counter + r)-th uniform, then moves the counter
 * past them: the block drafter's sampled proposals in two launches. */
int llm_cuda_loop_draw_rows(llm_cuda *c, const float *logits, int32_t rows, int32_t vocab,
                            float temperature, uint64_t *rng, int32_t *out);

/* Device n-gram rounds. _lookup applies spec.h's n-gram rule (suffixes of
 * nmax down to nmin tokens, most recent occurrence first, at most k ids)
 * to the device history hist[0..P] (P = c's register, hist[P] the last
 * committed token), writes the proposal to vin[1..n], the last token to
 * vin[n+1..k] and n to *keff (0: no match). _accept_ngram is _accept over
 * the first *keff rows that also appends the committed ids to hist and
 * writes *keff into the record's last int. */
int llm_cuda_loop_ngram_lookup(llm_cuda *c, const int32_t *hist, int32_t nmin, int32_t nmax,
                               int32_t k, int32_t *vin, int32_t *keff);
int llm_cuda_loop_accept_ngram(llm_cuda *c, const int32_t *g, int32_t *vin, const int32_t *keff,
                               int32_t *hist, int32_t *rec, uint32_t rec_cap, uint32_t *round);

/* c's position register, writable by the loop's kernels. */
uint32_t *llm_cuda_loop_pos(llm_cuda *c);

/* An event that orders one context's stream after another's (both on the
 * same device): _xwait records it on signaler's stream and makes waiter's
 * stream wait for it. Not while either captures. */
typedef struct llm_cuda_xevent llm_cuda_xevent;
int llm_cuda_xevent_create(llm_cuda *c, llm_cuda_xevent **out);
void llm_cuda_xevent_free(llm_cuda_xevent *x);
int llm_cuda_xwait(llm_cuda *waiter, llm_cuda *signaler, llm_cuda_xevent *x);

/* ---- the loop (cuda_loop.c) -------------------------------------------- */

typedef struct llm_cuda_loop llm_cuda_loop;

/* What a loop ran since creation. */
typedef struct llm_cuda_loop_stats {
    uint64_t plain_steps;  /* plain steps launched (n-gram rounds without a
                              match included) */
    uint64_t rounds;       /* speculative rounds launched */
    uint64_t drafted;      /* ids drafted in rounds whose tokens were read */
    uint64_t accepted;     /* of them accepted */
    uint64_t committed;    /* tokens those rounds committed (accepted + 1 each) */
    uint64_t readbacks;    /* host waits for the device */
    uint64_t captures;     /* graphs captured */
    /* Hybrid rounds' n-gram share (in rounds, drafted, accepted too): the
     * rest of their rounds are the head's. */
    uint64_t ngram_rounds, ngram_drafted, ngram_accepted;
} llm_cuda_loop_stats;

/* A loop over target (and draft, NULL for plain decoding only), which it
 * borrows: they must outlive it, be monolithic, on CUDA backends of one
 * device, and share a vocabulary. Allocates its device state up front.
 * The caller owns *out (NULL on failure). 0, LLM_EINVAL / LLM_EUNSUP /
 * LLM_ENOMEM / LLM_EBACKEND with one line in err. */
int llm_cuda_loop_create(llm_session *target, llm_session *draft, llm_cuda_loop **out,
                         char *err, size_t errlen);
void llm_cuda_loop_free(llm_cuda_loop *l);

/* llm_generate's contract (prefill, then tokens until a stop) run by the
 * device loop: k = 0 plain, else speculative rounds of k drafted tokens
 * (the draft session needed). Both sessions are reset first. The sampler
 * is greedy or pure temperature (see Sampling); callbacks and stops as
 * llm_generate's, the session's position afterwards as llm_generate
 * leaves it. */
int llm_cuda_loop_generate(llm_cuda_loop *l, llm_sampler *sp, int32_t k, const int32_t *prompt,
                           size_t n_prompt, const llm_generate_params *p, llm_token_cb cb,
                           void *user, size_t *n_generated, int *stop_reason);

/* Who drafts the speculative rounds: LLM_DRAFTER_MODEL (the default, the
 * draft session), LLM_DRAFTER_BLOCK (a head loaded by
 * llm_cuda_loop_set_block, below), LLM_DRAFTER_HYBRID (a
 * head loaded: per round the host's n-gram lookup below, whose proposal
 * is verified when its match is at least PM__HYBRID_MIN_DEFAULT (3)
 * tokens long, else a block round of k; every round's verify is the
 * block verify, so the head's context holds every position; one
 * read-back a round; a round is marked drafter=ngram or drafter=block by
 * what proposed it) or LLM_DRAFTER_NGRAM: per round the host
 * looks the history up (the longest suffix of ngram_max down to ngram_min
 * tokens seen before, spec.h's ngram rule, at most k tokens), uploads the
 * proposal and launches the target's verify of its width with the device
 * acceptance, then reads the round's record: one read-back a round, since
 * the next proposal needs the committed tokens. No match: a plain step,
 * the one-row verify of the last token. Both run greedy or sampled (the
 * device lookup of llm_cuda_loop_set_ngram_device: greedy only).
 * ngram_min/max <= 0 take spec.h's defaults (2 and 4). LLM_EINVAL for
 * another kind or bad bounds. */
int llm_cuda_loop_set_drafter(llm_cuda_loop *l, int kind, int32_t ngram_min,
                              int32_t ngram_max);

/* Loads the block drafter's head at head_path (a phasemark-block GGUF,
 * validated against the target) onto the target's device and makes it the
 * drafter (LLM_DRAFTER_BLOCK; llm_cuda_loop_set_drafter switches back and
 * forth while the head stays loaded). Block rounds, greedy or sampled,
 * 1 <= k <= the head's block size: per round one graph on the target's
 * context runs the head (cuda_block.h) over k block rows after the
 * committed context, whose rows' greedy ids (sampled: a draw from each
 * row's softmax at the temperature) are the drafts, and a second graph
 * runs the verify of k + 1 rows with the head's feature planes, appends
 * those rows to the head's context and runs the acceptance (greedy, or
 * min(1, p/q) with q the head's rows). The prompt's prefill asks the
 * target for the features of every prompt position, read back once and
 * uploaded into the head's context. Markers per round: "pm.spec_decode
 * mode=batched" enclosing "pm.draft ... drafter=block" (the head's graph)
 * and the verify's "pm.layer_range mode=verify". A head that does not fit
 * (see cuda_block.h) is refused with one line; the previous head, if any,
 * stays. Setup only (it uploads and synchronizes). */
int llm_cuda_loop_set_block(llm_cuda_loop *l, const char *head_path);

/* on = 1: n-gram rounds run on the device instead: the history is kept
 * there, every round is one graph (the lookup kernel, the verify of k + 1
 * rows, the acceptance over the proposal's length) and rounds are
 * launched in batches like the model drafter's, read back once a batch.
 * A round without a match still verifies k + 1 rows and commits one
 * token; its markers are a round's (draft=k, drafter=ngram), since the
 * host does not know the proposal's length when it marks. 0 (the
 * default): the host looks up, one read-back a round. */
int llm_cuda_loop_set_ngram_device(llm_cuda_loop *l, int on);

/* Per-forward device time of the graphs a block round and a plain step
 * replay (for benchmarks): the head's graph at k, the verify graph at k
 * (verify of k + 1 rows with the feature copies, the head's context
 * append and the acceptance) and the plain step's, each replayed reps
 * times at position pos (the register set before each replay) between
 * two device events, in microseconds a replay. Needs the greedy block
 * graphs of k and the greedy plain graph (a greedy generation at k and
 * one at 0 captured them); the same two of the sampled graphs when a
 * sampled generation at k captured them (else -1). The replays leave the
 * loop's device state meaningless until the next generation, which sets
 * it afresh. LLM_EINVAL when a greedy graph is missing or pos + k + 1
 * passes the context. */
typedef struct llm_cuda_loop_costs {
    double head_us, verify_us, plain_us;
    double head_sampled_us, verify_sampled_us;
} llm_cuda_loop_costs;
int llm_cuda_loop_block_costs(llm_cuda_loop *l, int32_t k, uint32_t pos, int32_t reps,
                              llm_cuda_loop_costs *out);

const char *llm_cuda_loop_error(const llm_cuda_loop *l);
void llm_cuda_loop_get_stats(const llm_cuda_loop *l, llm_cuda_loop_stats *out);

#ifdef __cplusplus
}
#endif

#endif
