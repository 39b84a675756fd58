/* session.h — the few session internals other engine modules use
 * (generate.c, spec.c) and tests reach. The session struct itself stays
 * private to session.c.
 */
#ifndef LLM_SESSION_H
#define LLM_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "phasemark/engine.h"

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

#endif
