/* tokenizer_special.h — tokenizing text that spells special tokens.
 *
 * A rendered chat prompt writes its turn markers as text ("<|eot_id|>",
 * "<start_of_turn>", "<s>"), and those must become the marker tokens, not
 * the characters' pieces. This splits the text at every spelling of a
 * special token — one of type control, user-defined or unknown — and
 * tokenizes only the text between them, the way llama.cpp's
 * parse_special does: special tokens are taken longest first (each splits
 * every stretch of text not yet claimed), and every stretch of plain text
 * is tokenized on its own, so under SentencePiece with add_space_prefix
 * each stretch gets its own prefix space.
 *
 * Built on the tokenizer's public accessors (tokenizer.h); allocates a
 * working list per call (once per request, never per token). Thread-safe.
 */
#ifndef LLM_TOKENIZER_SPECIAL_H
#define LLM_TOKENIZER_SPECIAL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

/* As llm_tokenize, with special-token spellings parsed as those tokens.
 * Same status codes (LLM_ESPACE: *n_out holds the count needed). */
int llm_tokenize_special(const llm_tokenizer *t, const char *text, size_t len, int add_bos, int32_t *out,
                         size_t cap, size_t *n_out);

/* The id of the special token (control, user-defined or unknown type)
 * whose text is exactly the len bytes at s; -1 when there is none (the
 * first such id when several share a text). Scans the vocabulary. */
int32_t llm_tokenizer_find_special(const llm_tokenizer *t, const char *s, size_t len);

#endif
