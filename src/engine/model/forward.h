/* forward.h — the transformer forward over an explicit span of layers.
 *
 * A span is a contiguous range of layers run by one shard on one backend,
 * with its own KV cache for exactly those layers. The monolithic engine uses
 * one span over all layers; a layer split (local and remote shards) chains
 * spans, passing boundary activations [n][dim] from one to the next; each
 * forward says which rows of logits the last span computes (llm_output). The
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
#include "tree.h"

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
    float *feat;   /* [LLM_FEATURES_MAX][n][dim]: the residual stream after
                      each layer a forward asks features of, the j-th asked
                      layer at j*n*dim (packed by the forward's n, so one
                      read takes them all); NULL until the first forward
                      that asks (llm_workspace_features) */
    int32_t rows_exact; /* set per forward: 1 for a verify, whose rows
                           must each come out bit for bit as the one-row
                           decode step at that position would (greedy
                           speculative decoding is exact only so): a
                           backend keeps such rows on its row kernels and
                           never takes a batched product that rounds
                           differently */
    const llm_tree *tree; /* set per forward: NULL for a chain (row i at
                             pos0 + i, causal), else the tree verify's
                             shape (tree.h); only the CPU backend reads it */
} llm_workspace;

/* What a forward hands back, asked for explicitly by every caller and
 * never inferred from the phase (a decode may want every row, a verify only
 * the last): a set of LLM_OUT_* bits and, for logits and argmax, how many
 * rows. llm_span_forward reads only whether the head runs and over how many
 * rows; the runner (runner.h) takes the rest out of the workspace. The bits
 * have the values of the wire's PMW_OUT_* (wire.h), which carries them to a
 * daemon unchanged. */
enum {
    LLM_OUT_ACTIVATIONS = 1u, /* the span's boundary activations [n][dim] */
    LLM_OUT_LOGITS = 2u,      /* logits of the last `rows` positions,
                                 [rows][n_vocab] */
    LLM_OUT_ARGMAX = 4u,      /* the greedy id of each of those rows, by the
                                 host sampler's rule (argmax.h) */
    LLM_OUT_FEATURES = 8u     /* the residual stream x after each layer of
                                 feat[] (the hidden state the next layer
                                 reads), every one of the n rows:
                                 [n_feat][n][dim], layer-major */
};

/* LLM_FEATURES_MAX (engine.h) bounds the layers of one request: a
 * drafter conditioned on the target reads a handful (DFlash-style drafters
 * take 3 to 5). */

typedef struct llm_output {
    uint32_t want; /* LLM_OUT_* bits; 0: nothing (activations stay in ws->x
                      and the head does not run: a prefill chunk before the
                      last) */
    int32_t rows;  /* LOGITS, ARGMAX: the last `rows` of the n positions,
                      1..n (1: the next token's; n: every position, as a
                      verify wants) */
    /* FEATURES: model layer indices, strictly ascending, each within the
     * span that runs them (a split hands each shard its own); the forward
     * copies ws->x into ws->feat as it passes each, and the runner reads
     * them back in one piece. Features of other layers than the span's
     * are refused, as is n_feat outside 1..LLM_FEATURES_MAX. */
    int32_t n_feat;
    int32_t feat[LLM_FEATURES_MAX];
} llm_output;

/* Rows of logits the head computes for out: 0 when it does not run. */
static inline int32_t llm_output_head_rows(const llm_output *out)
{
    return out->want & (LLM_OUT_LOGITS | LLM_OUT_ARGMAX) ? out->rows : 0;
}

typedef struct llm_forward_in {
    pm_phase phase;          /* what the span is told: exact/decode/verify */
    uint64_t req;            /* request id for markers */
    uint32_t pos0;           /* position of the first token */
    int32_t n;               /* tokens, 1..n_batch */
    const int32_t *tokens;   /* [n] ids when span->first == 0 */
    const float *act;        /* [n][dim] host activations otherwise, or
                                NULL when ws->x already holds them (the
                                previous span ran in the same workspace) */
    llm_output out;          /* what the span hands back (the head runs
                                only in a span that ends the model) */
    const llm_tree *tree;    /* NULL, or a verify's tree of n nodes
                                (tree.h): row i at pos0 + depth[i],
                                attending to 0..pos0-1 and its ancestors;
                                the caller checked that the span runs on
                                the CPU backend (llm_split_tree_support) */
} llm_forward_in;

/* Creates a span's KV cache (n_ctx positions) on the model's backend. */
int llm_span_init(llm_span *span, const llm_model *m, int32_t first,
                  int32_t last, uint32_t n_ctx, char *err, size_t errlen);
void llm_span_release(llm_span *span, const llm_model *m);

/* After a tree verify at pos0 (tree.h): moves the span's cache rows pos0 +
 * rows[j] to pos0 + j for j in 0..count-1, every layer, under m's lock.
 * rows ascending with rows[j] >= j (the caller checked), so a source is
 * never a row already overwritten. */
void llm_span_keep_rows(llm_model *m, llm_span *span, uint32_t pos0, const int32_t *rows,
                        int32_t count);

/* Sizes a workspace for n_batch tokens; reserves backend scratch. The
 * caller holds the model lock. */
int llm_workspace_init(llm_workspace *ws, const llm_model *m, int32_t n_batch,
                       uint32_t n_ctx, char *err, size_t errlen);
void llm_workspace_release(llm_workspace *ws, const llm_model *m);

/* Makes the workspace's features buffer, ws->feat [LLM_FEATURES_MAX]
 * [n_batch][dim], on its first call: a workspace has none until a forward
 * asks for features (8 x n_batch x dim floats a session would otherwise
 * hold for nothing). 0, or LLM_ENOMEM with ws->feat still NULL. The
 * caller holds the model lock. */
int llm_workspace_features(llm_workspace *ws, const llm_model *m);

/* Runs layers span->first..span->last for in->n tokens at in->pos0 as the
 * backend's blocks (backend.h): embed (or write the boundary input), per
 * layer attention then feed-forward, and the head when the span ends the
 * model and in->out asks for logits or argmax, all inside the span's one
 * leaf layer range. Preconditions (checked by the caller): pos0 + n <=
 * n_ctx, n <= n_batch, token ids in range, phase a shard phase, 1 <=
 * in->out.rows <= n. Afterwards ws->x holds the boundary activations and,
 * when the head ran, ws->logits the logits of the last in->out.rows
 * positions, [rows][n_vocab], and with LLM_OUT_FEATURES ws->feat the
 * residual stream after each asked layer (llm_workspace_features made
 * ws->feat first; without it no features are copied). The results are
 * void when the backend's
 * status says so (the caller checks it). */
void llm_span_forward(const llm_model *m, llm_span *span, llm_workspace *ws,
                      const llm_forward_in *in);

#endif
