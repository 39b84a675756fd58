/* spec_models.h — draft models made from a target GGUF, for the
 * speculative-decoding tests and benchmark.
 *
 * spec_derive_gguf copies a llama GGUF with changes: only its first
 * `layers` blocks (a truncated-layer draft: same embeddings, head and
 * vocabulary, llama.block_count rewritten), optionally its block matrices
 * and output head re-encoded to another type (a cheaper draft), optionally
 * one vocabulary piece renamed (a draft whose vocabulary differs in one
 * id, for the mismatch test). Metadata is copied entry by entry and tensors
 * row by row through the GGUF writer, so the copy is exact where the type
 * is kept. No hyper-parameter other than the block count changes.
 */
#ifndef PM_SPEC_MODELS_H
#define PM_SPEC_MODELS_H

#include <stddef.h>
#include <stdint.h>

typedef struct spec_derive {
    int32_t layers;        /* blocks kept (1..source); <= 0: all */
    const char *type;      /* "q8_0", "f16", ...; NULL: keep each tensor's */
    int32_t rename_piece;  /* token id whose piece becomes "<pm-renamed>"; -1: none */
} spec_derive;

/* Writes the derived model to out. 0, or -1 with one line in err. */
int spec_derive_gguf(const char *in, const char *out, const spec_derive *d, char *err,
                     size_t errlen);

#endif
