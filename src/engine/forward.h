/* forward.h — the transformer forward over an explicit span of layers.
 *
 * A span is a contiguous range of layers run by one shard on one backend,
 * with its own KV cache for exactly those layers. The monolithic engine uses
 * one span over all layers; a layer split (local and remote shards) chains
 * spans, passing boundary activations [n][dim] from one to the next; a
 * speculative verify asks the last span for logits at every position. The
 * span forward is the one place that emits the leaf pm.layer_range marker,
 * labelled with the phase the caller passes (never inferred).
 *
 * Invariants: a workspace is sized for at most n_batch tokens and owns every
 * buffer a forward touches, so llm_span_forward allocates nothing; the
 * caller holds the model lock (backends are not reentrant).
 */
#ifndef LLM_FORWARD_H
#define LLM_FORWARD_H

#include <stdint.h>

#include "backend.h"
#include "model.h"
#include "phasemark/mark.h"

typedef struct llm_span {
    int32_t first, last; /* layers, inclusive */
    int32_t shard;       /* index in the placement (markers) */
    pm_where where;      /* local, or remote when a daemon runs it */
    uint32_t n_ctx;      /* cache positions */
    float **k, **v;      /* [last-first+1] -> backend [n_ctx][kv_dim] */
    int quiet;           /* 1: emit no layer range (the forward runs inside
                            a caller's leaf, e.g. a drafter's pm.draft) */
} llm_span;

/* Per-forward buffers, backend memory, [n_batch][width] each. */
typedef struct llm_workspace {
    int32_t n_batch;
    float *x;      /* [n][dim] residual stream / boundary activations */
    float *xb;     /* [n][dim] normed input of a sublayer */
    float *xb2;    /* [n][dim] sublayer output */
    float *q;      /* [n][n_heads*head_dim] */
    float *att;    /* [n][n_heads*head_dim] attention output */
    float *hb;     /* [n][ffn_dim] gate, then SwiGLU output */
    float *hb2;    /* [n][ffn_dim] up */
    float *logits; /* [n][n_vocab] (only when the span ends the model) */
} llm_workspace;

/* Which logits the last span produces. */
typedef enum llm_logits_mode { LLM_LOGITS_LAST = 0, LLM_LOGITS_ALL = 1 } llm_logits_mode;

typedef struct llm_forward_in {
    pm_phase phase;          /* what the span is told: exact/decode/verify */
    uint64_t req;            /* request id for markers */
    uint32_t pos0;           /* position of the first token */
    int32_t n;               /* tokens, 1..n_batch */
    const int32_t *tokens;   /* [n] ids when span->first == 0 */
    const float *act;        /* [n][dim] host activations otherwise, or
                                NULL when ws->x already holds them (the
                                previous span ran in the same workspace) */
    llm_logits_mode logits;  /* last span only */
} llm_forward_in;

/* Creates a span's KV cache (n_ctx positions) on the model's backend. */
int llm_span_init(llm_span *span, const llm_model *m, int32_t first,
                  int32_t last, uint32_t n_ctx, char *err, size_t errlen);
void llm_span_release(llm_span *span, const llm_model *m);

/* Sizes a workspace for n_batch tokens; reserves backend scratch. The
 * caller holds the model lock. */
int llm_workspace_init(llm_workspace *ws, const llm_model *m, int32_t n_batch,
                       uint32_t n_ctx, char *err, size_t errlen);
void llm_workspace_release(llm_workspace *ws, const llm_model *m);

/* Runs layers span->first..span->last for in->n tokens at in->pos0 as the
 * backend's blocks (backend.h): embed (or write the boundary input), per
 * layer attention then feed-forward, and the head when the span ends the
 * model, all inside the span's one leaf layer range. Preconditions
 * (checked by the caller): pos0 + n <= n_ctx, n <= n_batch, token ids in
 * range, phase a shard phase. Afterwards ws->x holds the boundary
 * activations, and when the span ends the model ws->logits holds one row
 * (LAST) or n rows (ALL). The results are void when the backend's status
 * says so (the caller checks it). */
void llm_span_forward(const llm_model *m, llm_span *span, llm_workspace *ws,
                      const llm_forward_in *in);

#endif
