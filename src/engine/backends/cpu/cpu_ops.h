/* cpu_ops.h — the CPU backend's kernel-level operations.
 *
 * The CPU backend (cpu_backend.c) implements these over its thread pool
 * and SIMD kernels; its blocks (cpu_blocks.c) compose them into the
 * forward's blocks (backend.h), in exactly the order the forward has
 * always run them, so every float is what it was. Benchmarks time them
 * one by one. `be` must be a CPU backend; every call runs on the caller's
 * thread and the pool's and returns when done. Nothing allocates.
 */
#ifndef LLM_CPU_OPS_H
#define LLM_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "tree.h"

/* Rotary embedding of one forward: positions pos0..pos0+n-1, pair i of
 * each head rotated by angle (pos * scale) * inv_freq[i], where pair i is
 * (x[2i], x[2i+1]) or, when neox, (x[i], x[i + head_dim/2]).
 * inv_freq[i] = base^(-2i/head_dim) (over a rope_freqs factor). */
typedef struct llm_rope {
    const double *inv_freq; /* [head_dim/2]; double keeps large angles exact */
    float scale;            /* position multiplier (1/linear factor) */
    int32_t head_dim;
    int32_t neox;           /* llm_hparams.rope_neox */
} llm_rope;

/* Causal attention of one layer for n query rows at positions
 * pos0..pos0+n-1 over a cache of [pos][kv_dim] keys and values in which
 * positions 0..pos0+n-1 are filled. */
typedef struct llm_attn {
    const float *q;       /* [n][n_heads*head_dim] */
    const float *k;       /* [n_ctx][n_kv_heads*head_dim] */
    const float *v;       /* [n_ctx][n_kv_heads*head_dim] */
    float *out;           /* [n][n_heads*head_dim] */
    int32_t n;
    uint32_t pos0;
    int32_t n_heads, n_kv_heads, head_dim;
    uint32_t window;      /* the row at position p sees keys p-window+1..p;
                             0: keys 0..p */
    const llm_tree *tree; /* NULL: row t at pos0 + t over keys 0..pos0+t.
                             Else row t is tree node t at pos0 + depth[t]:
                             its keys are rows 0..pos0-1, then the rows
                             pos0 + j of its path's nodes j, root first
                             (tree.h), in that order, with the float
                             operations of the kernel set's attend */
} llm_attn;

/* y[i] = x[i] W^T for i < n: x [n][w->ne0], y [n][w->ne1]; no overlap. */
void llm_cpu_matmul(llm_backend *be, const llm_tensor *w, const float *x, int32_t n,
                    float *y);
/* y[i] = x w[i]^T for i < count, every w[i] with the same ne0, each result
 * exactly llm_cpu_matmul's: one quantization of x and one hand-off to the
 * pool for q/k/v, or gate/up. */
void llm_cpu_matmul_many(llm_backend *be, const llm_tensor *const *w, int32_t count,
                         const float *x, int32_t n, float *const *y);
/* The same two with exact set: every row bit for bit its one-row product
 * (the row loop, up to 64 rows), whatever the batched product's threshold;
 * a verify's products run so (llm_workspace.rows_exact). */
void llm_cpu_matmul_rows(llm_backend *be, const llm_tensor *w, const float *x, int32_t n,
                         float *y, int exact);
void llm_cpu_matmul_many_rows(llm_backend *be, const llm_tensor *const *w, int32_t count,
                              const float *x, int32_t n, float *const *y, int exact);
/* y[i] = x[i] / rms(x[i]) * weight: [n][dim]; y may equal x. */
void llm_cpu_rmsnorm(llm_backend *be, float *y, const float *x, const float *weight,
                     int32_t n, int32_t dim, float eps);
/* Rotates n rows of `stride` floats holding n_heads heads each. */
void llm_cpu_rope(llm_backend *be, float *x, int32_t n, int32_t n_heads, int32_t stride,
                  uint32_t pos0, const llm_rope *r);
/* The same for a tree's rows: row t at pos0 + tree->depth[t], each as
 * llm_cpu_rope rotates one row at that position. */
void llm_cpu_rope_tree(llm_backend *be, float *x, const llm_tree *tree, int32_t n_heads,
                       int32_t stride, uint32_t pos0, const llm_rope *r);
void llm_cpu_attention(llm_backend *be, const llm_attn *a);
/* gate[i] = silu(gate[i]) * up[i] for i < len. */
void llm_cpu_swiglu(llm_backend *be, float *gate, const float *up, size_t len);
/* y[i] += x[i] for i < len. */
void llm_cpu_add(llm_backend *be, float *y, const float *x, size_t len);
/* y[r][i] += bias[i] for r < n, i < width: y [n][width]. */
void llm_cpu_add_bias(llm_backend *be, float *y, const float *bias, int32_t n, int32_t width);

/* The blocks of backend.h over the operations above (cpu_blocks.c). */
void llm_cpu_attention_block(llm_backend *be, const llm_block *b);
void llm_cpu_ffn_block(llm_backend *be, const llm_block *b);
void llm_cpu_head(llm_backend *be, const llm_model *m, struct llm_workspace *ws, int32_t n,
                  int32_t rows);

#endif
