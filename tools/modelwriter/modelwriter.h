/* modelwriter.h — pieces of the pm-modelwriter tool shared between its
 * files: the synthetic model writer, the llama2.c converter, the
 * re-encoder of an existing file, and the helpers they use to lay down
 * llama-architecture GGUF metadata and parse options.
 */
#ifndef PM_MODELWRITER_H
#define PM_MODELWRITER_H

#include <stdint.h>

#include "gguf.h"

#define MW_NAME "pm-modelwriter"

/* Hyper-parameters of a llama-family model. */
typedef struct mw_hparams {
    uint32_t dim, layers, heads, kv_heads, ffn, vocab, ctx;
    float rope_base;  /* <arch>.rope.freq_base */
    float rope_scale; /* linear RoPE scaling factor; 1 = none */
    float eps;        /* RMSNorm epsilon */
    const char *arch; /* "llama" (NULL), "qwen2" (q/k/v biases) or "qwen3"
                         (per-head q/k norms) */
    uint32_t head_dim; /* 0: dim / heads; else written as key_length and
                          value_length */
    uint32_t window;   /* 0: none; else <arch>.attention.sliding_window */
} mw_hparams;

/* hp's head width and architecture name. */
static inline uint32_t mw_head_dim(const mw_hparams *hp)
{
    return hp->head_dim ? hp->head_dim : hp->dim / hp->heads;
}

static inline const char *mw_arch(const mw_hparams *hp)
{
    return hp->arch ? hp->arch : "llama";
}

/* A vocabulary to store as tokenizer.ggml.* ("llama" model). Borrowed
 * arrays of n entries. */
typedef struct mw_vocab {
    const char *const *pieces;
    const size_t *lens;
    const float *scores;
    const int32_t *types;
    uint32_t n;
} mw_vocab;

/* Writes general.* and <arch>.* metadata for hp and `file_type` (the
 * weights' main type), and the tokenizer metadata for v. Returns the first
 * writer status (0 when all succeeded). */
int mw_write_llama_meta(llm_gguf_writer *w, const mw_hparams *hp, uint32_t type, const char *name,
                        const mw_vocab *v);

/* The type a weight matrix with rows of ne0 elements is stored in: the
 * requested type when ne0 fits its blocks, else f32 (counted in
 * *fallbacks). Norm vectors are always f32 (n_dims == 1). */
uint32_t mw_weight_type(uint32_t requested, uint32_t n_dims, uint64_t ne0, unsigned *fallbacks);

/* Subcommands: return the process exit code (0 ok, 1 failure, 2 usage). */
int mw_synth(int argc, char **argv);
int mw_convert_llama2c(int argc, char **argv);
/* synth --arch phasemark-block: a random block drafter head (block.c). */
int mw_block(int argc, char **argv);
/* requant: a GGUF file's weight matrices re-encoded (requant.c). */
int mw_requant(int argc, char **argv);

/* Option parsing helpers (print "pm-modelwriter: ..." on failure and
 * return -1). */
int mw_parse_u32(const char *opt, const char *s, uint32_t lo, uint32_t hi, uint32_t *out);
int mw_parse_u64(const char *opt, const char *s, uint64_t *out);
int mw_parse_f32(const char *opt, const char *s, float lo, float hi, float *out);
int mw_parse_type(const char *s, uint32_t *out);

#endif
