/* runner.h — the span runner: how any shard runs a span of layers and
 * takes out what the request asks for. Internal but shared: a session's
 * shards (a monolithic session is a split of one local shard, split.h) and
 * the shard daemon pm-shardd run every forward through it, the daemon with
 * nothing else of the engine but the public engine.h (and the backend
 * names' one parser, backend_name.h, which this header brings).
 *
 * A runner is one model's means to run spans: a workspace for forwards of
 * up to n_batch tokens on the model's backend and, when that backend's
 * memory is not host memory, one host buffer for what crosses back
 * ([n_batch][dim], or [n_batch][max(dim, n_vocab)] when the model holds the
 * output head). A span is one KV cache of a run of layers (a session's
 * shard, a daemon's connection); several spans of one model may share one
 * runner, since its forwards run one at a time. A span whose forward
 * follows another span's on the same runner may take its input in place
 * (llm_forward_in.act == NULL: the activations are still in the workspace).
 *
 * One run: lock the model, llm_span_forward, take the output in->out asks
 * for (activations or logits read to the host when the backend's memory is
 * not host memory; argmax ids by the backend's argmax op, or when it has
 * none or it is switched off, on the host over read-back logits by the
 * sampler's rule, argmax.h), check the backend's status, unlock.
 *
 * Threads: a runner and its spans are used by one thread at a time;
 * runners over one model on different threads serialize on the model's
 * lock. Nothing on the run path allocates.
 */
#ifndef LLM_RUNNER_H
#define LLM_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "backend_name.h"
#include "forward.h"
#include "phasemark/engine.h"
#include "phasemark/mark.h"

/* What the split and a daemon agree on besides the wire itself. Engine
 * statuses travel in a shard's error reply as application codes (wire.h:
 * codes <= PMW_E_APP_BASE are the application's), and one remote call has
 * this deadline unless the placement says otherwise. */
#define LLM_SPLIT_WIRE_CODE(status) (-100 + (status))
#define LLM_SPLIT_TIMEOUT_MS 30000

typedef struct llm_runner llm_runner;

/* Creates a runner over model for forwards of up to n_batch tokens and
 * caches of up to n_ctx positions (the backend's scratch is reserved for
 * them under the model's lock). The argmax op is used when the backend has
 * one, unless PHASEMARK_DEVICE_ARGMAX=0 is in the environment now (read
 * once, here). The runner borrows model, which must outlive it; the caller
 * owns *out (NULL on failure). 0, or LLM_EINVAL / LLM_ENOMEM with one line
 * in err. */
int llm_runner_create(llm_model *model, int32_t n_batch, uint32_t n_ctx,
                      llm_runner **out, char *err, size_t errlen);

/* Frees the runner's workspace and buffers (under the model's lock: another
 * runner of the model may be mid-forward). Every span must be freed first.
 * NULL is harmless. */
void llm_runner_free(llm_runner *r);

/* A KV cache of r's n_ctx positions for layers first..last of the model
 * (which must hold them), marked as shard `shard` at `where` in its layer
 * ranges. The caller owns *out (NULL on failure) and frees it with
 * llm_runner_span_free before the runner. 0, or LLM_EINVAL / LLM_ENOMEM
 * with one line in err. */
int llm_runner_span_create(llm_runner *r, int32_t first, int32_t last, int32_t shard,
                           pm_where where, llm_span **out, char *err, size_t errlen);
void llm_runner_span_free(llm_runner *r, llm_span *span);

/* quiet != 0: the span's forwards emit no layer range (they run inside a
 * caller's leaf). */
void llm_runner_span_set_quiet(llm_span *span, int quiet);

/* Where a run's output is. Host memory owned by the runner (its host
 * buffer, or its workspace when that is host memory), valid until the
 * runner's next run; ids is the caller's. */
typedef struct llm_run_out {
    int32_t *ids;         /* in: ARGMAX: room for in->out.rows ids */
    const float *act;     /* ACTIVATIONS: [n][dim] */
    const float *logits;  /* LOGITS: [rows][n_vocab] */
    const float *feat;    /* FEATURES: [n_feat][n][dim], layer-major */
} llm_run_out;

/* Runs span (one of r's) for in and takes in->out. The caller checked the
 * forward (phase a shard phase, 1 <= n <= n_batch, pos0 + n within the
 * cache, ids in the vocabulary, in->act NULL only after a span of this
 * runner); the runner checks the output request against the span: rows in
 * 1..n for logits and argmax, which only a span ending the model gives;
 * features of 1..LLM_FEATURES_MAX layers, strictly ascending, all in the
 * span (they combine with any other output: they have their own buffers).
 * Returns 0, LLM_EINVAL for an output the span cannot give (nothing runs),
 * or LLM_EBACKEND when the backend faulted or its argmax op failed or gave
 * an id outside the vocabulary (the forward's results and the span's cache
 * rows written by it are void); err holds one line. */
int llm_runner_run(llm_runner *r, llm_span *span, const llm_forward_in *in,
                   llm_run_out *out, char *err, size_t errlen);

/* Checks a features request (o->n_feat, o->feat) against layers
 * first..last: 1..LLM_FEATURES_MAX layers, strictly ascending, all within.
 * 0, or LLM_EINVAL with one line in err naming the problem. Pure. */
int llm_features_check(const llm_output *o, int32_t first, int32_t last, char *err,
                       size_t errlen);

/* on != 0: argmax ids come from the backend's op when it has one (the
 * default); 0: the runner reads the logits and takes the argmax on the
 * host. For A/B runs and tests; not to be changed during a run. */
void llm_runner_set_argmax_op(llm_runner *r, int on);

/* The switch a runner starts with: 0 when PHASEMARK_DEVICE_ARGMAX=0 is in
 * the environment (read at each creation, never per token), else 1. A
 * split's remote shards follow it too. */
int llm_runner_argmax_default(void);

/* 1 when ARGMAX runs through the backend's op (it has one and it is on),
 * so only the ids cross to the host. */
int llm_runner_argmax_on_device(const llm_runner *r);

/* The runner's model. */
llm_model *llm_runner_model(const llm_runner *r);

/* The runner's workspace (borrowed, lives as long as the runner): for a
 * device loop that records forwards over it (cuda_loop.h). */
llm_workspace *llm_runner_workspace(llm_runner *r);

#endif
