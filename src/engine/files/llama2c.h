/* llama2c.h — legacy llama2.c checkpoints (.bin, "version 0" export).
 *
 * File layout (little-endian): a header of 7 int32
 *   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
 * (vocab_size < 0 means the classifier is not shared with the embedding;
 * its absolute value is the vocabulary size), then f32 arrays in run.c's
 * order, each row-major with the last index contiguous:
 *   token_embedding [vocab][dim]
 *   rms_att         [L][dim]
 *   wq              [L][dim][dim]       (out, in)
 *   wk              [L][kv_dim][dim]    kv_dim = dim * n_kv_heads / n_heads
 *   wv              [L][kv_dim][dim]
 *   wo              [L][dim][dim]
 *   rms_ffn         [L][dim]
 *   w1              [L][hidden][dim]    gate
 *   w2              [L][dim][hidden]    down
 *   w3              [L][hidden][dim]    up
 *   rms_final       [dim]
 *   freq_cis_real   [seq_len][head_size/2]  (skipped: RoPE is recomputed)
 *   freq_cis_imag   [seq_len][head_size/2]  (skipped)
 *   wcls            [vocab][dim]        only when vocab_size < 0
 * The file must be exactly this long; shorter is "truncated", longer is
 * "trailing bytes" (a different export version).
 *
 * Tensors are exposed under llama.cpp's GGUF names with GGUF shapes (ne[0]
 * contiguous), type F32, pointing into the mapping, so the model loader
 * treats a checkpoint and a GGUF file alike:
 *   token_embd.weight        ne = {dim, vocab}
 *   blk.N.attn_norm.weight   {dim}        blk.N.ffn_norm.weight {dim}
 *   blk.N.attn_q.weight      {dim, dim}   blk.N.attn_output.weight {dim, dim}
 *   blk.N.attn_k.weight      {dim, kv_dim}  blk.N.attn_v.weight {dim, kv_dim}
 *   blk.N.ffn_gate.weight    {dim, hidden}  (w1)
 *   blk.N.ffn_up.weight      {dim, hidden}  (w3)
 *   blk.N.ffn_down.weight    {hidden, dim}  (w2)
 *   output_norm.weight       {dim}
 *   output.weight            {dim, vocab}   only when not shared
 * RoPE: llama2.c rotates adjacent pairs (x[2i], x[2i+1]) of each head with
 * theta 10000 — the same convention as GGUF llama tensors (after llama.cpp's
 * converter permutation of HF weights), so Q/K need no permutation.
 * RMSNorm epsilon is 1e-5 (run.c).
 *
 * Ownership and threads: the handle owns the mapping; tensor pointers are
 * valid until llm_llama2c_close(). Immutable after open; thread-safe reads.
 */
#ifndef LLM_LLAMA2C_H
#define LLM_LLAMA2C_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct llm_llama2c_config {
    uint32_t dim;
    uint32_t hidden_dim;
    uint32_t n_layers;
    uint32_t n_heads;
    uint32_t n_kv_heads;
    uint32_t vocab_size;   /* absolute value from the header */
    uint32_t seq_len;
    int shared_classifier; /* 1 when the header's vocab_size was positive */
    float rope_theta;      /* 10000 (fixed by the format) */
    float rms_eps;         /* 1e-5 (run.c) */
} llm_llama2c_config;

typedef struct llm_llama2c llm_llama2c;

/* Maps and validates a checkpoint. The header must be positive and
 * consistent (n_heads divides dim, n_kv_heads divides n_heads, head size
 * even, sizes bounded so no byte count overflows) and the file exactly as
 * long as the header implies. 0 and *out, or LLM_EIO, LLM_EFORMAT or
 * LLM_ENOMEM (phasemark/engine.h), *out = NULL and one line
 * ("llama2c: ...") in err. */
int llm_llama2c_open(const char *path, llm_llama2c **out, char *err, size_t errlen);

/* Same over a caller's buffer (must outlive the handle; needs 4-byte
 * alignment so tensors can be read as float). */
int llm_llama2c_open_memory(const void *buf, size_t len, llm_llama2c **out, char *err, size_t errlen);

void llm_llama2c_close(llm_llama2c *m);

const llm_llama2c_config *llm_llama2c_get_config(const llm_llama2c *m);

/* Tensors in a fixed order: token_embd, then each layer's nine tensors,
 * output_norm, output (when not shared); names and shapes as listed above. */
uint64_t llm_llama2c_tensor_count(const llm_llama2c *m);
const llm_gguf_tensor *llm_llama2c_tensor_at(const llm_llama2c *m, uint64_t i);
const llm_gguf_tensor *llm_llama2c_find_tensor(const llm_llama2c *m, const char *name);

#ifdef __cplusplus
}
#endif

#endif
