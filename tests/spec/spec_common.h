/* spec_common.h — shared pieces of the speculative-decoding tests: model
 * files (a synthetic target with its truncated-layer draft, the shipped
 * KJV pair), sessions, and the autoregressive reference run.
 */
#ifndef PM_SPEC_COMMON_H
#define PM_SPEC_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "phasemark/engine.h"
#include "phasemark/spec.h"

#define SC_MAX_OUT 256

/* A generation's outcome, compared field by field between runs. */
typedef struct sc_run {
    int32_t ids[SC_MAX_OUT];
    size_t n;
    int reason;
    uint32_t end_pos; /* the target's position afterwards */
} sc_run;

/* Writes a synthetic target (dim 64, `layers` blocks, vocab 160, ids only)
 * of matrix type `type` to target_path, and a draft keeping its first
 * draft_layers blocks to draft_path. Exits 1 on failure. */
void sc_write_synth_pair(const char *type, int layers, int draft_layers, const char *target_path,
                         const char *draft_path);

/* The shipped pair's paths (source tree); 0 when both exist, else -1. */
int sc_kjv_paths(char *target, char *draft, size_t cap);

/* Opens a model on the CPU with 1 thread; exits 1 on failure. */
llm_model *sc_open(const char *path);

/* A session with n_ctx positions and batch n_batch; exits 1 on failure. */
llm_session *sc_session(llm_model *m, int n_ctx, int n_batch, uint64_t req);

/* A sampler for the model (temperature <= 0: greedy); exits 1 on failure. */
llm_sampler *sc_sampler(const llm_model *m, float temp, int top_k, float top_p, uint64_t seed);

/* llm_generate from an emptied session into *out. Returns its status. */
int sc_run_ar(llm_session *s, llm_sampler *sp, const int32_t *prompt, size_t n,
              const llm_generate_params *gp, sc_run *out);

/* llm_spec_generate from an emptied target into *out. Returns its status. */
int sc_run_spec(llm_spec *sd, llm_session *target, llm_sampler *sp, const int32_t *prompt,
                size_t n, const llm_generate_params *gp, sc_run *out);

/* Compares two runs (ids, count, stop reason, end position); prints the
 * first difference under `what`. 1 when equal. */
int sc_same(const sc_run *a, const sc_run *b, const char *what);

/* A per-process scratch path "<tmp>/pm_spec_<tag>_<pid>.gguf". */
void sc_path(char *buf, size_t cap, const char *tag);

#endif
