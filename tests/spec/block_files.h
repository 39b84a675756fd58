/* block_files.h — block drafter head files (architecture phasemark-block)
 * for the tests, written through the GGUF writer: random heads for a
 * target, heads with chosen weights, and heads broken in one way each for
 * the refusal tests.
 *
 * Random weights are a pure function of (seed, tensor, row, column),
 * uniform in +-sqrt(3 / fan_in); norm weights are 1 +- 0.2; mask_embd is
 * uniform in +-1.
 */
#ifndef PM_BLOCK_FILES_H
#define PM_BLOCK_FILES_H

#include <stddef.h>
#include <stdint.h>

/* Values of a tensor with chosen weights: element (row, col) of tensor
 * `name` (vectors have row 0). */
typedef float (*bf_value_fn)(void *user, const char *name, uint64_t row, uint64_t col);

typedef struct bf_spec {
    uint32_t n_layers, dim, ffn, heads, kv_heads, block_size, ctx;
    uint32_t n_feat;
    int32_t feat[16];
    uint32_t vocab, target_dim; /* the target.* keys */
    float eps, rope_base;
    uint32_t type;         /* matrix type (quant.h ids) */
    uint64_t seed;
    const char *arch;      /* NULL: "phasemark-block" */
    const char *omit;      /* a tensor left out; NULL */
    const char *reshape;   /* a tensor written one row (vectors: one element)
                              longer; NULL */
    const char *retype;    /* a tensor written as q4_0 (matrices) or f16
                              (vectors); NULL */
    const char *zero;      /* a tensor written as zeros; NULL */
    bf_value_fn value;     /* chosen weights; NULL: random */
    void *value_user;
} bf_spec;

/* A random head for a target of dim/vocab/layers: 1 layer, width dim,
 * 4 heads over 2 kv heads (or 1 over 1 when dim < 16), ffn 2*dim, block 8,
 * features of layers {0, n_layers-1} (one when the target has one
 * layer), f32. */
bf_spec bf_default(uint32_t dim, uint32_t vocab, uint32_t n_layers);

/* Writes the head to path. 0, or -1 with a message on stderr. */
int bf_write(const char *path, const bf_spec *s);

/* Writes bf_default's head for model m with block size `block` and seed;
 * exits 1 on failure. */
struct llm_model;
void bf_write_for(const char *path, const struct llm_model *m, uint32_t block, uint64_t seed);

#endif
