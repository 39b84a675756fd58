/* cuda_block.h — the block drafter's head (block_head.h) on a CUDA
 * target's device, for the device loop's block rounds (cuda_loop.h).
 *
 * The head is the CPU head's formula (docs/spec.md, "The block drafter")
 * composed of the decode step's own kernels, on the target's context and
 * stream, so a device loop can capture it into its graphs:
 *
 *   context, per committed position j (llm_cuda_block_append):
 *     f_j gathered from the target's feature planes, c_j = rmsnorm(W_fc
 *     f_j) * fc_norm, and per head layer the rotated key and value of
 *     rmsnorm(c_j) * attn_norm_l stored at row j of the layer's cache;
 *   block, b rows at positions P..P+b-1 (llm_cuda_block_forward):
 *     x_0 = embed(last), x_i = mask_embd; per layer q/k/v with the norm
 *     and RoPE folded into one product (its k and v stored at rows
 *     P..P+b-1 of the cache), attention of every row over the P context
 *     rows and all b block rows (no causal mask), the output product added
 *     into x, the SwiGLU feed-forward (gate and up interleaved, one
 *     product) added into x; logits_i = target_output . (rmsnorm(x_i) *
 *     output_norm).
 *
 * Positions come as llm_cuda_positions, so a captured forward replays at
 * the register's position: the device loop passes the target's register
 * (P = the target's filled cache = the head's context length). Rows past
 * a forward's block rows are overwritten by the next append, which is why
 * the block rows' keys may sit where context keys will go.
 *
 * Numerics. The products are the decode step's matrix-vector kernels
 * (a Q8_0 matrix, as the KJV target's output is, over 8-bit activations
 * as the decode step multiplies it), the norm folded into the product "up
 * to summation order": the logits match the CPU head's within the
 * tolerance test cuda.block.head_parity states (0.05; 0.0065 measured on
 * the shipped head), not bit for bit.
 *
 * Limits: every matrix in a layout the fused product takes (F32, F16, BF16,
 * Q8_0; Q4_0 widened) with whole 16-byte vectors a row, head_dim a
 * multiple of 4 and at most 256, the target's output matrix taken by the
 * matrix-vector kernel; else creation refuses (LLM_EUNSUP, one line).
 *
 * Ownership. The handle owns its device copies and buffers, allocated at
 * creation (a forward allocates nothing); it borrows the context, which
 * must outlive it, and the target's embedding and output copies, which
 * must stay prepared. One thread at a time.
 */
#ifndef LLM_CUDA_BLOCK_H
#define LLM_CUDA_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The handle's API is C only (block_head.h is the engine's C); the .cu
 * file sees the kernels' entry points below it. */
#ifndef __CUDACC__
#include "block_head.h"

/* Most rows one append takes (the widest verify: K_MAX + 1). */
#define LLM_CUDA_BLOCK_APPEND_MAX 32

typedef struct llm_cuda_block llm_cuda_block;

/* Copies head (validated for target, whose backend tbe must be the CUDA
 * backend of context c) to the device with room for n_ctx context
 * positions. The caller owns *out (NULL on failure). 0, or LLM_EINVAL /
 * LLM_EUNSUP / LLM_ENOMEM / LLM_EBACKEND with one line in err ("block
 * head on the device: ..."). The head may be freed afterwards. */
int llm_cuda_block_create(llm_cuda *c, struct llm_backend *tbe, const struct llm_model *target,
                          const pm_block *head, uint32_t n_ctx, llm_cuda_block **out,
                          char *err, size_t errlen);
void llm_cuda_block_free(llm_cuda_block *hb);

const pm_block_info *llm_cuda_block_info(const llm_cuda_block *hb);

/* The target layers whose features the head reads, ascending and each
 * once (what a target forward is asked for); the head's list maps onto
 * them (the planes a forward writes). Returns their count. */
int32_t llm_cuda_block_planes(const llm_cuda_block *hb, const int32_t **layers);

/* Appends the context rows of positions base..base+rows-1 (base from pos)
 * from device features feat: the planes of llm_cuda_block_planes, each
 * plane_rows x dim floats, row t of a plane the position base + t (as a
 * target forward of plane_rows tokens writes them). 1 <= rows <=
 * min(plane_rows, LLM_CUDA_BLOCK_APPEND_MAX). Stream-ordered, capturable. */
int llm_cuda_block_append(llm_cuda_block *hb, const float *feat, int32_t plane_rows,
                          int32_t rows, llm_cuda_positions pos);

/* The same from host features (a prefill's, planes of plane_rows x dim)
 * for positions pos0..pos0+rows-1, uploaded in pieces. Not while
 * capturing. LLM_ECTX past n_ctx. */
int llm_cuda_block_append_host(llm_cuda_block *hb, const float *feat, size_t plane_rows,
                               uint32_t rows, uint32_t pos0);

/* The head's forward for rows (1..block_size) block rows at positions
 * base..base+rows-1 after a context of base positions, the first row's
 * token read from last (device int32). Its logits, [rows][n_vocab], are at
 * llm_cuda_block_logits afterwards. Stream-ordered, capturable. */
int llm_cuda_block_forward(llm_cuda_block *hb, const int32_t *last, int32_t rows,
                           llm_cuda_positions pos);
const float *llm_cuda_block_logits(const llm_cuda_block *hb);
#endif

/* ---- kernels (cuda_block.cu) ------------------------------------------- */

/* Attention of n query rows (q [n][q_stride], heads first) over cache
 * rows 0..base+n-1 of k and v ([ctx][n_kv_heads*head_dim]), every row
 * over all of them (no causal mask), grouped-query; out [n][n_heads *
 * head_dim]. head_dim a multiple of 4, at most 256. */
int llm_cuda_block_attention(llm_cuda *c, const float *q, int32_t q_stride, const float *k,
                             const float *v, float *out, int32_t n, llm_cuda_positions pos,
                             int32_t n_heads, int32_t n_kv_heads, int32_t head_dim);

/* dst[t][i*dim + d] = src[(plane_of[i] * plane_rows + t) * dim + d] for
 * t < rows, i < n_feat (<= PM_BLOCK_MAX_FEAT): the head's f_t, its
 * layers in the file's order, from a target forward's planes. */
int llm_cuda_block_gather(llm_cuda *c, float *dst, const float *src, int32_t plane_rows,
                          int32_t rows, int32_t dim, int32_t n_feat, const int32_t *plane_of);

#ifdef __cplusplus
}
#endif

#endif
