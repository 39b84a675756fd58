/* ref.h — an independent double-precision llama forward for the engine's
 * parity tests.
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
} ref_hparams;

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
