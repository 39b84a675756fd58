/* ref.h — an independent double-precision llama-family forward (llama,
 * qwen2, qwen3) for the engine's parity tests.
 *
 * Written apart from the engine on purpose: plain loops, doubles
 * throughout, one token at a time, its own decoding of the tensor bytes
 * (f32, f16, bf16, q8_0, q4_0), its own RoPE and softmax. It shares no
 * code with src/engine beyond reading tensor bytes through the model-file
 * readers (gguf.h / llama2c.h), which compute nothing.
 */
#ifndef PM_TEST_REF_H
#define PM_TEST_REF_H

#include <stdint.h>

#include "gguf.h"

typedef struct ref_hparams {
    int dim, n_layers, n_heads, n_kv_heads, ffn, vocab, ctx;
    double eps, rope_base, rope_factor; /* factor: linear scaling, 1 = none */
    int rope_freqs; /* 1: frequency i is divided by ref_rope_freq(i) (Llama
                       3.1's rope_freqs.weight, written by synth); 2: synth
                       writes a malformed one (factor 0 at 1) */
    int arch;       /* REF_LLAMA, REF_QWEN2 (q/k/v biases, half-split RoPE)
                       or REF_QWEN3 (per-head q/k RMSNorm before RoPE,
                       half-split RoPE) */
    int head_dim;   /* 0: dim / n_heads; else the file's key_length */
    int window;     /* 0: full causal attention; else the token at
                       position p attends to positions p-window+1..p only
                       (synth writes <arch>.attention.sliding_window) */
} ref_hparams;

enum { REF_LLAMA = 0, REF_QWEN2 = 1, REF_QWEN3 = 2 };

/* The head width hp describes. */
static inline int ref_head_dim(const ref_hparams *hp)
{
    return hp->head_dim ? hp->head_dim : hp->dim / hp->n_heads;
}

/* The test models' rope_freqs.weight values: 1, 3.5, 6, 8.5, 1, ... (the
 * spread of Llama 3.1's factors, 1..8). */
static inline float ref_rope_freq(int i)
{
    return 1.0f + 2.5f * (float)(i % 4);
}

typedef const llm_gguf_tensor *(*ref_find_fn)(const void *h, const char *name);

typedef struct ref_model ref_model;

/* Loads every tensor through find(h, name) into doubles. NULL on failure
 * (message on stderr). */
ref_model *ref_load(const ref_hparams *hp, ref_find_fn find, const void *h);
void ref_free(ref_model *r);

/* Forgets the cache (position 0). */
void ref_reset(ref_model *r);

/* Runs one token at the next position; logits[vocab] for the next token. */
void ref_step(ref_model *r, int token, double *logits);

/* max |a[i] - (double)b[i]| over n. */
double ref_max_abs_diff(const double *a, const float *b, int n);

#endif
