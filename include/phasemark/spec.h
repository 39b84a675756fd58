/* phasemark/spec.h — speculative decoding over two engine sessions.
 *
 * A speculative generator drives a target session and a draft session
 * (two models that share one vocabulary). Each round the draft proposes k
 * tokens, the target checks all of them in one batched forward
 * (llm_verify: k+1 positions, phase verify), the longest agreeing prefix
 * plus one token of the target's own is committed, and both KV caches roll
 * back past it. The generator uses the public session calls, so a
 * target session over any placement (one span, local and remote shards)
 * is verified through every shard without the generator knowing; under
 * greedy sampling its forwards ask for token ids instead of logits
 * (LLM_OUTPUT_ARGMAX: the same ids, taken on a GPU or a shard daemon where
 * the session can). Every range and forward carries the request id the
 * generate params name (llm_generate_params.has_request), else the target
 * session's default.
 *
 * Exactness. Greedy sampling (temperature <= 0): the output is the
 * target's own greedy output, token for token. Temperature > 0: standard
 * speculative sampling (accept a draft token d with probability
 * min(1, p(d)/q(d)); on rejection draw from the normalized max(0, p - q);
 * after k acceptances draw a bonus token from p), where p and q are the
 * target's and the draft's distributions after the same temperature,
 * top-k and top-p processing as llm_sample (llm_sampler_probs). So the
 * output distribution is the target's.
 *
 * Markers (PHASEMARK=1). Each round is one "pm.spec_decode mode=batched
 * req=R draft=K" enclosing one leaf "pm.draft req=R tokens=K drafter=D"
 * (D the round's drafter kind: model, ngram, block or custom; the leaf
 * encloses every draft forward of the round, including any catch-up over
 * tokens the draft has not seen yet: the prompt in the first round; the
 * draft session is made quiet so nothing nests in the leaf; an n-gram
 * round's leaf encloses no forward at all) and then the target's verify layer
 * ranges (mode=verify, one per span). The prompt's prefill is the target's
 * usual pm.prefill ranges. When there is no room left to draft (the last
 * token of max_tokens, the context's end), or the drafter has nothing to
 * propose (no n-gram match), the target takes plain decode steps
 * (pm.decode). docs/spec.md gives the exact range count.
 *
 * Handles and threading. llm_spec is opaque; it borrows the two sessions
 * (they and their models must outlive it) and owns its buffers, allocated
 * at creation: a round allocates nothing. A generator and its sessions
 * must be used by one thread at a time.
 *
 * Errors. 0 or a negative LLM_E* code (engine.h). Constructors write one
 * line into the caller's err buffer; llm_spec_generate keeps its detail in
 * the generator (llm_spec_error).
 */
#ifndef PHASEMARK_SPEC_H
#define PHASEMARK_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "phasemark/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct llm_spec llm_spec;

/* ---- drafters ----------------------------------------------------------
 *
 * A drafter proposes up to k tokens for the current history (the tokens
 * the target has seen, then the last emitted token) and learns how many of
 * them the target accepted. The generator asks it once per round; how it
 * proposes is its own:
 *
 *   model   a draft model (a session with the target's vocabulary) runs k
 *           forwards; under sampling its proposals are draws from its
 *           processed distribution q.
 *   ngram   prompt and history lookup: the longest suffix of the history
 *           (ngram_max tokens down to ngram_min) that occurred before, most
 *           recent occurrence first, proposes the tokens that followed it
 *           (at most k, never past the history's end). No forward at all;
 *           0 tokens when nothing matches. Deterministic (q = 1 at each
 *           proposed token under sampling).
 *   hybrid  per round, the n-gram proposal when a match of at least
 *           hybrid_min tokens exists, else the model's, or, given a block
 *           head (head_path and target) instead of a draft, the head's.
 *   block   a feature-conditioned block head (a small GGUF network of
 *           architecture phasemark-block, docs/model-files.md) proposes up
 *           to its block size B tokens in one forward of its own, from the
 *           last emitted token, the target's embedding and output head,
 *           and the target's residual stream at the layers the head
 *           names: the generator asks every target forward for those
 *           features (llm_forward_params.features_*) and hands the
 *           committed positions' rows to the drafter, which keeps their
 *           keys and values and drops them when the history is cut back.
 *           Under sampling row i's proposal is a draw from q_i, the
 *           sampler's processed distribution of the head's logits row i
 *           (softmax(logits / T) without top-k / top-p).
 *   custom  a callback (llm_spec_propose_fn), deterministic like ngram.
 *
 * Round kinds. A round is drafted by exactly one of model, ngram, block
 * or custom (a hybrid picks per round); markers and the per-drafter
 * statistics name that one (LLM_DRAFTER_* below, llm_drafter_kind_name).
 *
 * The interface is the seam a device-resident round plugs into: a drafter
 * hands the generator token ids (and, for sampled model proposals, their
 * distributions), never tensors, so a CUDA drafter whose k steps run as a
 * device loop, or a block drafter reading the target's features, is one
 * more implementation behind llm_drafter_create.
 *
 * Handles and threading. llm_drafter is opaque. It borrows its draft
 * session (which must outlive it) and owns its buffers, allocated at
 * creation: proposing allocates nothing. One thread at a time; a drafter
 * serves one generator (llm_spec_params.drafter) at a time.
 *
 * Errors. 0 or a negative LLM_E* code; creation writes one line into err,
 * later calls keep theirs in the drafter (llm_drafter_error). */

typedef struct llm_drafter llm_drafter;

typedef enum llm_drafter_kind {
    LLM_DRAFTER_MODEL = 0,
    LLM_DRAFTER_NGRAM = 1,
    LLM_DRAFTER_HYBRID = 2,
    LLM_DRAFTER_BLOCK = 3,
    LLM_DRAFTER_CUSTOM = 4,
    LLM_DRAFTER_COUNT
} llm_drafter_kind;

/* A drafter other than a draft model (prompt lookup, a test's script):
 * fills out[0..k) with k proposed tokens given the history the target has
 * seen followed by the last emitted token (hist[0..n_hist), the last entry
 * being that token). Returns 0, or negative to abort generation (the
 * status is passed through). Its proposals count as deterministic (q is 1
 * at the proposed token) under temperature > 0. */
typedef int (*llm_spec_propose_fn)(void *user, const int32_t *hist, size_t n_hist,
                                   int32_t k, int32_t *out);

typedef struct llm_spec_params {
    uint16_t version;    /* LLM_SPEC_PARAMS_VERSION */
    uint16_t size;       /* sizeof(llm_spec_params) */
    int32_t k;           /* tokens drafted per round, 1..target n_batch-1 */
    int32_t adaptive;    /* LLM_SPEC_ADAPT_*: fixed k, acceptance-driven k
                            (below) or cost-aware k (docs/spec.md) */
    int32_t k_min;       /* adaptive bounds; <= 0: 1 */
    int32_t k_max;       /* <= 0: 2*k but at most max(k, 6); capped at
                            target n_batch-1 (docs/spec.md: exactness) */
    float draft_cost;    /* adaptive: a draft forward's cost relative to a
                            target forward; <= 0: the ratio of the models'
                            weight bytes (decode is bandwidth-bound) */
    llm_spec_propose_fn propose; /* NULL: the draft session proposes; set:
                                    the callback does, and no draft
                                    session is used */
    void *propose_user;
    llm_drafter *drafter; /* version 2: set, this drafter proposes (borrowed,
                             must outlive the generator; draft and propose
                             are then ignored) */
} llm_spec_params;

#define LLM_SPEC_PARAMS_VERSION 2
#define LLM_SPEC_PARAMS_INIT \
    {LLM_SPEC_PARAMS_VERSION, (uint16_t)sizeof(llm_spec_params), 4, 0, 0, 0, 0.0f, 0, 0, 0}
/* The end of version 1 (before drafter): llm_spec_create reads such a
 * caller's struct and takes drafter as NULL. */
#define LLM_SPEC_PARAMS_V1_SIZE (offsetof(llm_spec_params, propose_user) + sizeof(void *))

/* llm_spec_params.adaptive. */
enum {
    LLM_SPEC_ADAPT_OFF = 0,   /* every round drafts k */
    LLM_SPEC_ADAPT_ACCEPT = 1, /* k from the acceptance history (below) */
    LLM_SPEC_ADAPT_COST = 2   /* k, the drafter (hybrid) or plain decoding
                                 from measured costs (docs/spec.md) */
};

typedef struct llm_drafter_params {
    uint16_t version;  /* LLM_DRAFTER_PARAMS_VERSION */
    uint16_t size;     /* sizeof(llm_drafter_params) */
    int32_t kind;      /* LLM_DRAFTER_MODEL, _NGRAM, _HYBRID, _BLOCK or _CUSTOM */
    llm_session *draft; /* model, hybrid: the draft session (borrowed, not
                           the target's); else NULL (a hybrid over a block
                           head takes head_path and target instead) */
    int32_t ngram_max; /* ngram, hybrid: longest suffix matched; <= 0: 4 */
    int32_t ngram_min; /* shortest suffix matched, 1..ngram_max; <= 0: 2 */
    int32_t hybrid_min; /* hybrid: shortest match taken over the model;
                           <= 0: 3 (cut to ngram_max) */
    uint32_t n_hist_max; /* longest history proposed over, in tokens
                            (llm_drafter_propose refuses more); 0: the draft
                            session's context, else 4096 */
    llm_spec_propose_fn propose; /* custom */
    void *propose_user;
    /* Version 2 (the block drafter). */
    const char *head_path; /* block, hybrid over a head: the head's GGUF file
                              (read at creation) */
    llm_session *target;   /* block, hybrid over a head: the target session
                              it drafts for (borrowed; the generator must
                              verify on it) */
    int32_t n_threads;     /* block: threads of the head's CPU forward; <= 0:
                              the target model's n_threads option, else a
                              CPU target's thread count, else all online
                              CPUs */
} llm_drafter_params;

#define LLM_DRAFTER_PARAMS_VERSION 2
#define LLM_DRAFTER_PARAMS_INIT \
    {LLM_DRAFTER_PARAMS_VERSION, (uint16_t)sizeof(llm_drafter_params), LLM_DRAFTER_MODEL, 0, \
     0, 0, 0, 0, 0, 0, 0, 0, 0}
/* The end of version 1 (before head_path): llm_drafter_create reads such a
 * caller's struct and takes the version 2 fields as zero. */
#define LLM_DRAFTER_PARAMS_V1_SIZE (offsetof(llm_drafter_params, propose_user) + sizeof(void *))

/* What one drafter did since creation or its generator's reset, per round
 * kind (index LLM_DRAFTER_*; a hybrid's rounds count under model or
 * ngram). */
typedef struct llm_drafter_counts {
    uint64_t rounds;   /* rounds this kind drafted */
    uint64_t drafted;  /* tokens it proposed */
    uint64_t accepted; /* of them, accepted by the target */
    uint64_t forwards; /* draft forwards it ran (0 for ngram) */
    uint64_t ns;       /* wall time proposing */
} llm_drafter_counts;

/* Cost-aware k (LLM_SPEC_ADAPT_COST). The generator measures what its
 * target forwards cost by width and what each drafter kind's steps cost,
 * keeps per-kind acceptance, and before each round picks the kind (a
 * hybrid's) and the k in [k_min, k] that maximise expected tokens per unit
 * time (a round's bookkeeping and the model drafter's catch-up after
 * falling behind priced in), or a plain decode step when none beats plain
 * decoding by 3 % (n-gram proposals tested against the plain steps'
 * tokens, and probe rounds at a backed-off interval of 32 to 512 plain
 * steps, keep the estimates current; docs/spec.md). A guard times whole
 * steps and, after 32 tokens of its choices that ran slower per token than
 * its plain steps do, decodes plainly for 32 steps, doubling up to 512
 * while that repeats, so a mispriced choice costs little. It depends on
 * timings: greedy output is still the target's own; under sampling the
 * law is the target's but a seed no longer fixes the sequence.
 *
 * Adaptive k (LLM_SPEC_ADAPT_ACCEPT). The generator keeps a decayed count of accepted proposals
 * and of rejections (a round that accepted all k observes none), which
 * estimates the per-token acceptance a = accepted / (accepted +
 * rejections); each round it takes the k in [k_min, k_max] that maximizes
 * the expected tokens per round (1 - a^(k+1)) / (1 - a) over its cost
 * 1 + k * draft_cost (target forwards). Deterministic: it depends on the
 * acceptance history only, never on timings, so a seed still fixes the
 * output under temperature > 0. */

/* Statistics since creation or llm_spec_reset_stats. */
typedef struct llm_spec_stats {
    uint64_t rounds;    /* draft + verify rounds */
    uint64_t drafted;   /* tokens proposed */
    uint64_t accepted;  /* proposals the target accepted */
    uint64_t committed; /* tokens rounds fixed: accepted + 1 per round */
    uint64_t steps;     /* plain target decode steps (no room to draft) */
    uint64_t generated; /* tokens emitted to the caller */
    double acceptance;  /* accepted / drafted; 0 when nothing was drafted */
    double tokens_per_round; /* committed / rounds; 0 when no round ran */
    int32_t k;          /* the draft length the next round will use */
    uint64_t draft_ns;  /* wall time in the drafter (inside pm.draft) */
    uint64_t verify_ns; /* wall time in the target's verify forwards */
    uint64_t accept_ns; /* wall time deciding acceptance and sampling */
    llm_drafter_counts by[LLM_DRAFTER_COUNT]; /* per round kind */
    int32_t drafter;    /* the generator's drafter: LLM_DRAFTER_* */
} llm_spec_stats;

/* "model", "ngram", "hybrid", "block", "custom"; "unknown" otherwise.
 * Static text, thread-safe. */
LLM_API const char *llm_drafter_kind_name(int kind);

/* The LLM_DRAFTER_* named by s ("model", "ngram", "hybrid", "block"), or
 * LLM_EINVAL. Thread-safe. */
LLM_API int llm_drafter_kind_parse(const char *s);

/* Creates a drafter. Refuses (LLM_EINVAL, a line in err) an unknown kind,
 * a missing draft session (model, hybrid), callback (custom) or head file
 * and target session (block), and n-gram bounds out of order; a block
 * head that does not fit the target (another vocabulary or width, a
 * layer it lacks) or is malformed or truncated is refused with one line
 * naming the problem (LLM_EINVAL or LLM_EFORMAT). The
 * caller owns *out (NULL on failure) and frees it after every generator
 * using it. */
LLM_API int llm_drafter_create(const llm_drafter_params *p, llm_drafter **out, char *err,
                               size_t errlen);

/* Frees a drafter (not its draft session). NULL is harmless. */
LLM_API void llm_drafter_free(llm_drafter *d);

/* The drafter's kind (LLM_DRAFTER_*). */
LLM_API int llm_drafter_get_kind(const llm_drafter *d);

/* The detail line of the last failure ("" when none); owned by d. */
LLM_API const char *llm_drafter_error(const llm_drafter *d);

/* Proposes up to k tokens after hist[0..n_hist) (the last entry being the
 * last emitted token) into out[0..*n_out), greedily: the model drafter's
 * argmax over its session, which it first feeds whatever of hist it has
 * not seen (a session holding something else must be at position 0).
 * *kind_out (may be NULL) gets the round kind that proposed. This is the
 * call a generator makes under greedy sampling, exposed for tools and
 * tests; llm_spec_generate calls the drafter itself. LLM_EINVAL for bad
 * arguments (k < 1, n_hist 0 or above n_hist_max), or the draft's error. */
LLM_API int llm_drafter_propose(llm_drafter *d, const int32_t *hist, size_t n_hist, int32_t k,
                                int32_t *out, int32_t *n_out, int32_t *kind_out);

/* Tells the drafter that `accepted` of its last proposal were accepted and
 * that the target now holds keep tokens of history (the model drafter
 * cuts its session back to at most keep). 0, or the draft's error. */
LLM_API int llm_drafter_observe(llm_drafter *d, int32_t accepted, uint32_t keep);

/* 0 when token ids mean the same text in both models: with tokenizers, the
 * same kind, pieces in order, BOS and EOS; without (ids-only models), the
 * same vocabulary size, BOS and EOS. Otherwise LLM_EINVAL and err names
 * the first difference ("draft vocabulary differs from the target's: ...").
 * Thread-safe. */
LLM_API int llm_spec_check_vocab(const llm_model *target, const llm_model *draft,
                                 char *err, size_t errlen);

/* Creates a generator over target and draft (distinct sessions; draft may
 * be NULL when p->propose or p->drafter is set). Refuses a vocabulary
 * mismatch (llm_spec_check_vocab), a block drafter made for another
 * target model, a k outside 1..n_batch-1 of the target, and bad params
 * (LLM_EINVAL). Makes the draft session quiet (no ranges of its
 * own; llm_spec_free restores it), and when both models compute on CPU
 * backends of one thread count, runs the draft's forwards on the target
 * model's worker threads (llm_spec_free gives it its own again; unless
 * PHASEMARK_SHARE_THREADS=0). p may be NULL (k = 4). The caller owns
 * *out (NULL on failure). */
LLM_API int llm_spec_create(llm_session *target, llm_session *draft,
                            const llm_spec_params *p, llm_spec **out, char *err,
                            size_t errlen);

/* Frees a generator (not its sessions). NULL is harmless. */
LLM_API void llm_spec_free(llm_spec *sd);

/* The detail line of the last failure ("" when none); owned by sd. */
LLM_API const char *llm_spec_error(const llm_spec *sd);

/* llm_generate with speculative rounds: prefills prompt into the target at
 * its current position, then emits tokens until the same stop conditions
 * with the same semantics (max_tokens, EOS or a stop token drawn and not
 * emitted, the callback asking to stop, the context full), and leaves the
 * target session where llm_generate would (every emitted token but the
 * last in its cache; after an EOS / stop token, every emitted token). The
 * sampler sp (created for the target's n_vocab) supplies every draw.
 *
 * History. The generator records the tokens it feeds the target and keeps
 * the draft in step lazily. The target must be used only through this
 * generator between calls, or be emptied (position 0, e.g.
 * llm_session_reset), which restarts the history; otherwise LLM_ESTATE.
 * On a failure the detail is in llm_spec_error. */
LLM_API int llm_spec_generate(llm_spec *sd, llm_sampler *sp, const int32_t *prompt,
                              size_t n_prompt, const llm_generate_params *p,
                              llm_token_cb cb, void *user, size_t *n_generated,
                              int *stop_reason);

/* Tree verification (block drafter, greedy, a CPU target: monolithic or a
 * split whose shards, local or daemons, run on the CPU):
 * nodes > 0 makes every block round propose a token tree of up to `nodes`
 * tokens (1..32), grown from the head's top candidates per position by
 * their path probability, no deeper than the round's k (and the head's
 * block size), and verify all of it in one target forward of nodes + 1
 * rows in which each node sees the context and its own ancestors only;
 * the longest accepted root-to-leaf path is committed, so the ids are
 * still plain greedy decoding's. nodes = 0 returns to the chain. The
 * round statistics count a tree's nodes as drafted. Refused, with one line
 * in err, for another drafter, a local shard off the CPU, adaptive k, a
 * target batch under nodes + 1, or nodes outside 0..32 (LLM_EINVAL or
 * LLM_EUNSUP); a sampling temperature above 0 is refused by
 * llm_spec_generate. */
LLM_API int llm_spec_set_tree(llm_spec *sd, int32_t nodes, char *err, size_t errlen);

/* Fills *st (totals since creation or the last reset). */
LLM_API void llm_spec_get_stats(const llm_spec *sd, llm_spec_stats *st);

/* Zeroes the statistics (and the adaptive estimate); k returns to the
 * configured k. */
LLM_API void llm_spec_reset_stats(llm_spec *sd);

/* ---- the device loop ----------------------------------------------------
 *
 * On a CUDA build, generation can keep its steps and speculative rounds on
 * the device: the host launches whole steps (or draft + verify rounds) as
 * CUDA graphs in batches of at most 16 and reads their tokens back once a
 * batch, instead of waiting for every token (docs/cuda.md, "The device
 * loop"). This is the entry tools and the server use; it runs only where
 * it gives llm_generate's (or, drafting, llm_spec_generate's) greedy ids
 * exactly, and otherwise says why so the caller falls back to them.
 *
 * It takes: target (and, for the model drafter, draft) monolithic on one
 * CUDA device, every layer and the head taking the fused decode step at
 * the widths the loop runs; drafter none (plain), model or ngram (not
 * hybrid, block or custom); a fixed k in 1..LLM_DEVICE_LOOP_K_MAX within
 * the target's batch - 1; per generation, a greedy sampler, or one at a
 * temperature with no top-k or top-p cut (model drafter or plain only).
 * Under temperature > 0 the output follows the target's law (standard
 * speculative sampling on the device), not llm_generate's exact draws.
 *
 * Markers are the engine's (docs/markers.md): per plain step one
 * "pm.decode" around its mode=decode leaf; per round one "pm.spec_decode
 * mode=batched" around a "pm.draft ... drafter=D" leaf and the
 * mode=verify leaf; all on the calling thread, inside whatever range the
 * caller holds. Stops as llm_generate's: the callback is called once per
 * emitted token after each batch's read-back, so returning nonzero there
 * (cancellation) ends generation within one batch.
 *
 * Handles and threading. llm_device_loop borrows the sessions (they must
 * outlive it) and owns its device state and graphs, created once: make
 * one per session pair and reuse it across generations. One thread at a
 * time for the loop and its sessions. Errors: 0 or a negative LLM_E*
 * code; creation writes one line into err, generation keeps its detail
 * in the handle (llm_device_loop_error). */

typedef struct llm_device_loop llm_device_loop;

/* Most tokens one device round drafts. */
#define LLM_DEVICE_LOOP_K_MAX 16

typedef struct llm_device_loop_params {
    uint16_t version;  /* LLM_DEVICE_LOOP_PARAMS_VERSION */
    uint16_t size;     /* sizeof(llm_device_loop_params) */
    int32_t drafter;   /* -1: plain decoding; LLM_DRAFTER_MODEL (the draft
                          session), LLM_DRAFTER_NGRAM (no draft),
                          LLM_DRAFTER_BLOCK (head_path, no draft) or
                          LLM_DRAFTER_HYBRID (n-gram, else the head at
                          head_path) */
    int32_t k;         /* tokens drafted per round (ignored when plain) */
    int32_t ngram_min, ngram_max; /* n-gram bounds; <= 0: 2 and 4 */
    int32_t adaptive;  /* LLM_SPEC_ADAPT_*; the loop drafts a fixed k, so
                          anything but OFF (with a drafter) is refused */
    const char *head_path; /* LLM_DRAFTER_BLOCK, _HYBRID: the head's GGUF file, which
                              the loop loads onto the target's device (a
                              head the device kernels cannot run: EUNSUP) */
} llm_device_loop_params;

#define LLM_DEVICE_LOOP_PARAMS_VERSION 1
#define LLM_DEVICE_LOOP_PARAMS_INIT \
    {LLM_DEVICE_LOOP_PARAMS_VERSION, (uint16_t)sizeof(llm_device_loop_params), -1, 4, 0, 0, 0, NULL}

/* What a loop ran since creation. */
typedef struct llm_device_loop_stats {
    uint64_t plain_steps; /* plain steps (n-gram rounds without a match too) */
    uint64_t rounds;      /* speculative rounds launched */
    uint64_t drafted;     /* tokens drafted in rounds that were read */
    uint64_t accepted;    /* of them accepted */
    uint64_t committed;   /* tokens those rounds committed */
    uint64_t readbacks;   /* host waits for the device */
    uint64_t captures;    /* graphs captured */
    int32_t drafter;      /* the loop's drafter (-1: plain) */
    int32_t k;            /* its k (0: plain) */
} llm_device_loop_stats;

/* Creates a loop for target (and draft: the model drafter's session,
 * else ignored and may be NULL) under p. When the combination cannot run
 * on the device, LLM_EUNSUP and err holds one line beginning "device
 * loop: " that names why (a CPU target: "device loop: the target runs on
 * the cpu backend, not CUDA", in every build; a build without CUDA: "this
 * build has no CUDA backend"); bad arguments LLM_EINVAL; LLM_ENOMEM,
 * LLM_EBACKEND from the device. The caller owns *out (NULL on failure). */
LLM_API int llm_device_loop_create(llm_session *target, llm_session *draft,
                                   const llm_device_loop_params *p, llm_device_loop **out,
                                   char *err, size_t errlen);

/* Frees a loop (not its sessions). NULL is harmless. */
LLM_API void llm_device_loop_free(llm_device_loop *l);

/* 1 when a generation with sampler sp runs on the loop; 0 with one line
 * in why (may be NULL) otherwise (top-k / top-p, an n-gram loop under
 * temperature, another vocabulary). Consumes nothing. */
LLM_API int llm_device_loop_takes(const llm_device_loop *l, const llm_sampler *sp, char *why,
                                  size_t whylen);

/* llm_generate's contract run on the device: both sessions are emptied
 * first (position 0), then the prompt is prefilled and tokens generated
 * until the same stops with the same semantics and ids (greedy), the
 * target left where llm_generate leaves it. The sessions may also serve
 * an llm_spec: empty the target (llm_session_reset) before its next
 * llm_spec_generate, which then restarts its history. LLM_EUNSUP when llm_device_loop_takes refuses sp. */
LLM_API int llm_device_loop_generate(llm_device_loop *l, llm_sampler *sp, const int32_t *prompt,
                                     size_t n_prompt, const llm_generate_params *p,
                                     llm_token_cb cb, void *user, size_t *n_generated,
                                     int *stop_reason);

/* The detail line of the last failure ("" when none); owned by l. */
LLM_API const char *llm_device_loop_error(const llm_device_loop *l);

/* Fills *st with the totals since creation (zero, drafter -1, for NULL). */
LLM_API void llm_device_loop_get_stats(const llm_device_loop *l, llm_device_loop_stats *st);

#ifdef __cplusplus
}
#endif
#endif /* PHASEMARK_SPEC_H */
