/* synth.h — small synthetic llama models for the engine tests, written as
 * GGUF through the model-file writer (gguf.h).
 *
 * Weights are a pure function of (seed, tensor, row, column), uniform in
 * +-sqrt(3 / fan_in) so activations and logits stay of order one; norm
 * weights are 1 +- 0.2. No tokenizer metadata: the tests work in ids.
 */
#ifndef PM_TEST_SYNTH_H
#define PM_TEST_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"
#include "ref.h"

typedef struct synth_spec {
    ref_hparams hp;     /* shapes, eps, rope */
    uint32_t type;      /* matrix type (quant.h ids) */
    uint32_t embd_type; /* token embedding type */
    uint32_t type_hi;   /* nonzero: attn_v, ffn_down and output.weight take
                           this type instead (a Q4_K_M-like mix) */
    int tied;           /* 1: no output.weight */
    uint64_t seed;
    const char *arch;   /* general.architecture (and the metadata prefix);
                           NULL: the name of hp.arch */
    unsigned quirks;    /* SYNTH_* below: malformed files for error tests */
    const char *omit;   /* a tensor name left out (error tests); NULL */
    const llm_type_set *types; /* types beyond the built-in ones that type
                                  and embd_type may name; NULL: none */
    const llm_type_traits *through; /* when set, every matrix and the
                                  embedding are rounded through this type
                                  (to it and back to f32) before they are
                                  written as type / embd_type: a float model
                                  with exactly another type's weights */
} synth_spec;

/* Quirks: attn_k.bias one element short; q/k/v biases in a file whatever
 * its architecture; an <arch>.attention.sliding_window of 0 (u32), of -4
 * (i32) or of 5.0 (f32), each in place of hp.window's; a value_length one
 * less than key_length. */
#define SYNTH_SHORT_BIAS 1u
#define SYNTH_BIAS 2u
#define SYNTH_WINDOW_ZERO 4u
#define SYNTH_VALUE_LENGTH 8u
#define SYNTH_WINDOW_NEG 16u
#define SYNTH_WINDOW_F32 32u

/* A default spec: dim 64, 2 layers, 4 heads over 2 kv heads, ffn 96,
 * vocab 160, context 64, eps 1e-5, base 10000, untied, f32. */
synth_spec synth_default(void);

/* Writes the model to path. 0, or -1 with a message on stderr. */
int synth_write(const char *path, const synth_spec *s);

/* A per-process scratch path "<dir>/pm_engine_<tag>_<pid>.gguf" in buf. */
void synth_path(char *buf, size_t cap, const char *tag);

/* Opens path with n_threads on the CPU; aborts the test (exit 1) when the
 * model does not open. */
struct llm_model;
struct llm_model *synth_open(const char *path, int n_threads);

/* A session with n_ctx positions and batch n_batch (exit 1 on failure). */
struct llm_session;
struct llm_session *synth_session(struct llm_model *m, int n_ctx, int n_batch,
                                  uint64_t req);

/* ref_find_fn over an llm_gguf handle. */
const llm_gguf_tensor *synth_find_gguf(const void *h, const char *name);

/* The quant.h type id for "f32", "f16", "bf16", "q8_0", "q4_0"; exit 2 on
 * anything else. */
uint32_t synth_type(const char *name);

#endif
