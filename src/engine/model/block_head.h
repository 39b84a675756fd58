/* block_head.h — the feature-conditioned block drafter's head: a small
 * network (1..3 layers, the target's width) that reads the target's
 * residual stream at a few layers and proposes a whole block of tokens in
 * one forward, sharing the target's token embedding and output head.
 *
 * Its file is a GGUF of architecture "phasemark-block" (docs/model-files.md
 * lists the keys and tensors). pm__block_open validates all of it against
 * the target model it will run beside and refuses, with one line naming
 * the mismatch, anything else.
 *
 * The forward, for n committed tokens t_0..t_{n-1} and the target's
 * features f_j of positions j = 0..n-2 (concat over the head's listed
 * layers of the residual stream after that layer):
 *   c_j = rmsnorm(W_fc f_j) * fc_norm
 *   block rows x_0 = embed(t_{n-1}), x_i = mask_embd (i = 1..b-1) at
 *   positions n-1+i; per head layer, the block rows' q, k, v and the
 *   context's k, v (from rmsnorm(c_j) with the same attn_norm, RoPE at j),
 *   attention of every block row over all context and all block rows (no
 *   causal mask), the SwiGLU feed-forward; logits_i = output .
 *   (rmsnorm(x_i) * output_norm), row i proposing the token at n + i.
 *
 * State. The context keys and values depend on committed positions only:
 * they are kept per head layer ([n_ctx][kv_dim]) and appended as the
 * target's features of committed positions arrive (pm__block_append), cut
 * back with pm__block_crop. Every product runs the CPU backend's row loop
 * (the backend is told never to take its batched path), so a position's
 * keys are bitwise the same whatever batches its features came in.
 *
 * The head computes on a CPU backend of its own, whatever the target's
 * backend: on a CUDA target the features are read back to the host by the
 * target's forward and the target's embedding and output head are read
 * from the model file's mapping.
 *
 * Ownership. A pm_block owns its file mapping, its backend and every
 * buffer (allocated at open: a forward allocates nothing). It borrows the
 * target model, which must outlive it. One thread at a time.
 */
#ifndef LLM_BLOCK_HEAD_H
#define LLM_BLOCK_HEAD_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* Bounds of the file format. */
#define PM_BLOCK_MAX_LAYERS 3
#define PM_BLOCK_MAX_FEAT 8
#define PM_BLOCK_MAX_B 16
/* Most context positions a head caches (its buffers are sized for the
 * target's context at open). */
#define PM_BLOCK_MAX_CTX (1u << 24)

typedef struct pm_block pm_block;

/* What a head file declares (after validation). */
typedef struct pm_block_info {
    int32_t n_layers, dim, ffn_dim, n_heads, n_kv_heads, head_dim;
    int32_t block_size;                     /* B: most rows of one forward */
    int32_t n_feat;                         /* |F| */
    int32_t feat_layers[PM_BLOCK_MAX_FEAT]; /* target layers, the file's order */
    float eps, rope_base;
} pm_block_info;

/* Opens and validates the head at path for target (borrowed), with room
 * for n_ctx context positions, computing on a CPU backend of n_threads
 * (<= 0: online CPUs). 0, or a negative LLM_E* code with one line in err
 * ("block head: ..."); *out is NULL on failure. */
int pm__block_open(const char *path, const llm_model *target, uint32_t n_ctx, int32_t n_threads,
                   pm_block **out, char *err, size_t errlen);

/* pm__block_open over a caller's bytes (the fuzzer's entry), which must
 * outlive the head and be aligned as a mapping is (f32 tensors must land
 * 4-byte aligned; a misaligned one is refused). */
int pm__block_open_memory(const void *buf, size_t len, const llm_model *target, uint32_t n_ctx,
                          int32_t n_threads, pm_block **out, char *err, size_t errlen);

/* Frees the head. NULL is harmless. */
void pm__block_free(pm_block *b);

const pm_block_info *pm__block_info(const pm_block *b);

/* The head's own CPU backend (borrowed: for llm_backend_share_threads,
 * which the block drafter calls with a CPU target's backend). */
struct llm_backend *pm__block_backend(pm_block *b);

/* Context positions whose keys and values are held. */
uint32_t pm__block_ctx_len(const pm_block *b);

/* Forgets context positions pos and later (no-op when none are held). */
void pm__block_crop(pm_block *b, uint32_t pos);

/* Appends the features of positions ctx_len..ctx_len+rows-1: feat holds,
 * for each of the head's layers in the file's order, a plane of
 * plane_rows x dim floats, of which rows 0..rows-1 are these positions'
 * (plane l of layer feat_layers[l] at feat + plane_of[l] * plane_rows *
 * dim; plane_of maps the head's list to the planes, which a target
 * forward writes in ascending layer order). LLM_ECTX past n_ctx. */
int pm__block_append(pm_block *b, const float *feat, const int32_t *plane_of, size_t plane_rows,
                     uint32_t rows);

/* The head's forward for rows block rows after a context of ctx_len
 * positions, the first row's token `last` (a target id): points *logits at
 * rows x n_vocab floats owned by b, valid until its next forward. rows is
 * 1..block_size; LLM_ECTX when ctx_len + rows would pass the cache. */
int pm__block_forward(pm_block *b, int32_t last, int32_t rows, const float **logits);

/* The last forward's rows before the output product, rmsnorm(x_i) *
 * output_norm ([rows][dim], owned by b, valid until its next call): the
 * logits are the target's output matrix times these (tests compare that
 * product in float against a reference that keeps activations exact). */
const float *pm__block_hidden(const pm_block *b);

/* The head's weights as its file holds them, for a backend that keeps a
 * copy of its own (the CUDA device loop): pointers owned by b, valid while
 * it lives. Matrices are the file's llm_tensor views (ne0 = columns);
 * vectors are f32 [dim]; inv_freq is the RoPE frequencies [head_dim/2]. */
typedef struct pm_block_weights {
    const llm_tensor *fc; /* ne0=n_feat*dim, ne1=dim */
    const float *fc_norm, *mask_embd, *out_norm;
    struct {
        const float *attn_norm, *ffn_norm;
        const llm_tensor *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
    } layer[PM_BLOCK_MAX_LAYERS];
    const double *inv_freq;
} pm_block_weights;

void pm__block_weights(const pm_block *b, pm_block_weights *out);

#endif
