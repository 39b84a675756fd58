/* session.h — the few session internals other engine modules use
 * (generate.c, spec.c) and tests reach. The session struct itself stays
 * private to session.c.
 */
#ifndef LLM_SESSION_H
#define LLM_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "phasemark/engine.h"
#include "tree.h"

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t llm_now_ns(void);

const llm_model *llm_session_model(const llm_session *s);

/* The session's layer split, NULL when no placement was given (a
 * monolithic session runs a split of one shard, but keeps it to itself;
 * split.h: tests and tools reach the shards through it). */
struct llm_split *llm_session_split(const llm_session *s);

/* The request id a generate call (llm_generate, llm_spec_generate) passes
 * to every forward: p->request when p has it and sets has_request, else
 * the session's default (the shorter params of the first release). */
uint64_t llm_generate_request(const llm_session *s, const llm_generate_params *p);

/* The session's split whether or not a placement was given (a monolithic
 * session's one-shard split included): for a device loop that runs the
 * shard's span itself (cuda_loop.h). Borrowed. */
struct llm_split *llm_session_split_any(llm_session *s);

/* Makes dst's model run its forwards on the worker threads of src's
 * model (src NULL: on its own again); llm_model_share_threads' return
 * value (1: as asked). */
int llm_session_share_threads(llm_session *dst, const llm_session *src);

/* 1 when the session emits no ranges (llm_session_set_quiet). */
int llm_session_quiet(const llm_session *s);

/* Records forwards a device loop ran on the session's caches behind its
 * back: the position becomes pos (at most n_ctx; cache rows past it are
 * void, as after llm_session_truncate), and ns with `tokens` decode steps
 * (verify 0) or verified rows (verify 1) go to the timings. */
void llm_session_device_moved(llm_session *s, uint32_t pos, int verify, uint64_t ns,
                              uint64_t tokens);

/* Adds time spent sampling on the session's behalf to its timings. */
void llm_session_add_sample_ns(llm_session *s, uint64_t ns);

/* Where a session's argmax ids (LLM_OUTPUT_ARGMAX) are taken. By default
 * where the logits are made: by the backend's argmax op when the last
 * shard is local and its backend has one (a GPU: 4 bytes cross instead of
 * a row of n_vocab floats), by the daemon when it is remote; otherwise, or
 * switched off, the logits are read to the host and the ids taken there by
 * the same rule. The ids are the same either way. llm_session_device_argmax
 * says which (1: where the logits are made). */
int llm_session_device_argmax(const llm_session *s);

/* Switches taking ids where the logits are made on (the default) or off for
 * this session; off is also the default of sessions created with
 * PHASEMARK_DEVICE_ARGMAX=0 in the environment. For tests and benchmarks
 * that compare both paths. */
void llm_session_set_device_argmax(llm_session *s, int on);

/* ---- tree verify (tree.h) ----------------------------------------------
 * A greedy generator verifies a token tree in one forward, then keeps the
 * accepted path's cache rows. CPU targets, monolithic or split (local
 * spans read the tree; daemons get it on the wire). */

/* 0 when s can run a tree verify, else LLM_EUNSUP with one line in err
 * ("tree verify needs a CPU target: this one runs on cuda" / "... CPU
 * shards: shard 1 runs on cuda"); llm_split_tree_support. */
int llm_session_tree_support(llm_session *s, char *err, size_t errlen);

/* llm_forward (phase verify) of the tree's tree->n nodes, tokens[i] being
 * node i's id: row i's ids or logits are those of the decode step at
 * position pos + depth[i] after node i's ancestors. The cache slots
 * pos..pos+n-1 hold the nodes' rows in node order and the position moves
 * by n, as after any verify of n tokens. Errors as llm_forward's, and
 * LLM_EINVAL for a malformed tree, LLM_EUNSUP where
 * llm_session_tree_support refuses (its line in the session's error). */
int llm_forward_tree(llm_session *s, const llm_forward_params *p, const int32_t *tokens,
                     const llm_tree *tree, const float **logits, int32_t *ids);

/* Moves cache rows pos0 + rows[j] to pos0 + j for j < count (rows strictly
 * ascending, rows[j] >= j, all below the position), in every layer: the
 * accepted path of a tree verify becomes positions pos0..pos0+count-1.
 * The position does not move (truncate next). 0, LLM_EINVAL (nothing
 * moved) or LLM_EUNSUP for a split target. */
int llm_session_keep_rows(llm_session *s, uint32_t pos0, const int32_t *rows, int32_t count);

#endif
