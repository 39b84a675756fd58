/* session.h — the few session internals other engine modules use
 * (generate.c). The session struct itself stays private to session.c.
 */
#ifndef LLM_SESSION_H
#define LLM_SESSION_H

#include <stddef.h>
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

/* Greedy decoding on the device. A session can take a greedy token where
 * its logits are made, reading 4 bytes instead of a row of n_vocab floats,
 * when it is monolithic (a split's last shard may be remote, and hands its
 * logits back through the split), its backend has the argmax op
 * (backend.h) and the path is not switched off. llm_session_device_argmax
 * says whether it can (1) or not (0; then the greedy calls below fail with
 * LLM_EINVAL and the caller reads logits as usual). */
int llm_session_device_argmax(const llm_session *s);

/* Switches the device path on (the default) or off for this session; off
 * is also the default of sessions created with PHASEMARK_DEVICE_ARGMAX=0 in
 * the environment. For tests and benchmarks that compare both paths. */
void llm_session_set_device_argmax(llm_session *s, int on);

/* llm_prefill and llm_decode whose result is the greedy token of the last
 * row (the host sampler's argmax rule) in *tok instead of host logits; the
 * logits stay in backend memory and are not read. Errors, timings, ranges
 * and the position are exactly llm_prefill's and llm_decode's. */
int llm_prefill_greedy(llm_session *s, const int32_t *tokens, size_t n, int32_t chunk,
                       int32_t *tok);
int llm_decode_greedy(llm_session *s, int32_t token, int32_t *tok);

/* llm_verify whose result is the greedy token of every row, toks[i] for
 * i < n (caller-owned), instead of host logits. */
int llm_verify_greedy(llm_session *s, const int32_t *tokens, size_t n, int32_t *toks);

#endif
