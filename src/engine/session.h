/* session.h — the few session internals other engine modules use
 * (generate.c). The session struct itself stays private to session.c.
 */
#ifndef LLM_SESSION_H
#define LLM_SESSION_H

#include <stdint.h>

#include "phasemark/engine.h"

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t llm_now_ns(void);

const llm_model *llm_session_model(const llm_session *s);

/* The session's layer split, NULL when it is monolithic (split.h; tests
 * and tools reach the shards through it). */
struct llm_split *llm_session_split(const llm_session *s);

/* Adds time spent sampling on the session's behalf to its timings. */
void llm_session_add_sample_ns(llm_session *s, uint64_t ns);

#endif
