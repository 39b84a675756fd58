/* tokenizer.h — text <-> token ids for llama-family models.
 *
 * Three models, chosen by the GGUF key tokenizer.ggml.model:
 *
 *  "llama" (SentencePiece BPE, also llama2.c's tokenizer.bin): pieces with
 *  scores; a space is the piece character U+2581 "▁"; with add_space_prefix
 *  (default on) the text is prefixed by one space. The text is split into
 *  UTF-8 characters; a character with no piece falls back to its bytes as
 *  "<0xXX>" byte tokens (or <unk> when the vocabulary has no byte tokens).
 *  Then the adjacent pair whose concatenation is a piece with the highest
 *  score is merged, repeatedly (ties: the leftmost pair), until no pair
 *  merges — SentencePiece's BPE encoding.
 *
 *  "gpt2" (byte-level BPE): the text is pre-split by the rules that
 *  tokenizer.ggml.pre names (k_pre_names in tokenizer.c has every
 *  accepted name; llama.cpp's names) — GPT-2's regex
 *    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *  (absent, "default", "gpt2", "gpt-2", "mpt", "gpt-neox", "olmo",
 *  "phi-2", ...); Llama 3's
 *    (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *     ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *  ("llama-bpe", "llama3", "llama-v3", "falcon3", "smaug-bpe", "dbrx");
 *  Qwen2's, the same with \p{N} in place of \p{N}{1,3} ("qwen2",
 *  "stablelm2", ...); StarCoder's, every number character a pre-token of
 *  its own and GPT-2's regex over the text between them ("starcoder",
 *  "refact", "command-r", ...); and three
 *  that apply several regexes in turn, each to every fragment the earlier
 *  ones left, matches and the text between them both becoming fragments
 *  (tokenizer_pre.c holds them as tables): "falcon", "deepseek-llm",
 *  "deepseek-coder". All are implemented by hand as a backtracking engine
 *  would match them (letters, numbers and punctuation by Unicode 14
 *  general category, whitespace by White_Space, an invalid UTF-8 byte as
 *  a character of no class). Each chunk's bytes are mapped to GPT-2's
 *  printable byte alphabet and merges are applied by rank (lowest first;
 *  ties leftmost) until none applies — except that under "llama-bpe",
 *  "llama3", "llama-v3" and "falcon3" (llama.cpp's ignore_merges) a chunk that is
 *  itself a piece is emitted whole. A byte whose character the
 *  vocabulary lacks is dropped from the output, as llama.cpp does. Any
 *  other tokenizer.ggml.pre is refused at creation.
 *
 *  "bert" (WordPiece, tokenizer_wpm.c): characters reduced to the first
 *  character of their NFD form and lowercased, split into words at
 *  whitespace and around punctuation, ASCII symbols and CJK ideographs;
 *  each word matched greedily, longest piece first, as "▁" + word (a
 *  GGUF WordPiece vocabulary marks word-initial pieces with "▁"); a word
 *  with an unmatched position is [UNK]. add_bos puts [CLS] before and
 *  [SEP] after.
 *
 * User-defined pieces (token type 4, e.g. MPT's runs of spaces) are cut
 * out of the text before any of this, longest first, each at its leftmost
 * non-overlapping places; the stretches between them are encoded on their
 * own (a SentencePiece stretch after such a piece gets the space prefix
 * again), as llama.cpp does.
 *
 * Only normal and user-defined pieces take part in matching and merging:
 * control, unknown, unused and byte tokens are never produced from text
 * except through byte fallback; add_bos prepends the BOS id when the
 * vocabulary has one.
 *
 * Ownership and threads: a tokenizer copies everything it needs (it does not
 * reference the GGUF handle or file after creation) and is immutable, so it
 * may be shared by any number of threads. llm_tokenize allocates a working
 * buffer per call (it runs once per request, never per generated token);
 * llm_token_to_bytes allocates nothing.
 */
#ifndef LLM_TOKENIZER_H
#define LLM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h" /* and phasemark/engine.h, the status codes */

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes are the engine's (phasemark/engine.h): LLM_EINVAL (a bad
 * argument), LLM_ETOKEN (an id outside the vocabulary), LLM_EFORMAT (a
 * malformed vocabulary; creation only), LLM_ENOMEM, LLM_ESPACE (an output
 * buffer too small; the count needed is returned too), LLM_EIO
 * (tokenizer.bin could not be read). */

enum llm_tok_kind { LLM_TOK_SPM = 1, LLM_TOK_BPE = 2, LLM_TOK_WPM = 3 };

/* SentencePiece / GGUF token types (tokenizer.ggml.token_type). */
enum llm_tok_type {
    LLM_TOKTYPE_NORMAL = 1,
    LLM_TOKTYPE_UNKNOWN = 2,
    LLM_TOKTYPE_CONTROL = 3,
    LLM_TOKTYPE_USER_DEFINED = 4,
    LLM_TOKTYPE_UNUSED = 5,
    LLM_TOKTYPE_BYTE = 6
};

typedef struct llm_tokenizer llm_tokenizer;

/* Builds a tokenizer from the tokenizer.ggml.* metadata of an open GGUF:
 * model ("llama", "gpt2" or "bert"), tokens, scores (llama; optional,
 * default 0), token_type (optional; derived from the piece text when
 * absent), merges (gpt2), pre (gpt2; see above), bos/eos/unknown_token_id,
 * cls_token_id and seperator_token_id (bert; llama.cpp's spelling),
 * add_bos_token, add_space_prefix. 0 and *out, or negative, *out = NULL and one line
 * ("tokenizer: ...") in err; an unsupported tokenizer.ggml.pre is
 * LLM_EFORMAT. The GGUF handle may be closed afterwards. */
int llm_tokenizer_from_gguf(const llm_gguf *g, llm_tokenizer **out, char *err, size_t errlen);

/* Reads a llama2.c tokenizer.bin: i32 max_token_length, then vocab_size
 * records of (f32 score, i32 len, len bytes). The result is a "llama"
 * model with <unk> 0, BOS 1, EOS 2 (types unknown/control), byte tokens
 * where a piece reads "<0xXX>", add_space_prefix on; llama2.c stores spaces
 * in pieces as ' ', which becomes "▁" here. A file with fewer records, a
 * length outside 0..max_token_length (at most LLM_TOK_MAX_PIECE), or
 * trailing bytes is rejected. */
int llm_tokenizer_from_llama2c(const char *path, uint32_t vocab_size, llm_tokenizer **out, char *err,
                               size_t errlen);

void llm_tokenizer_free(llm_tokenizer *t);

/* Tokenizes len bytes of text (need not be NUL-terminated; invalid UTF-8
 * bytes are handled as single bytes and fall back to byte tokens). Writes
 * up to cap ids to out and the total count to *n_out. Returns 0, or
 * LLM_ESPACE when cap is too small (*n_out then holds the count needed
 * and out holds the first cap ids), or LLM_ENOMEM. */
int llm_tokenize(const llm_tokenizer *t, const char *text, size_t len, int add_bos, int32_t *out,
                 size_t cap, size_t *n_out);

/* The raw bytes a token stands for in output: a byte token gives its byte,
 * "▁" becomes a space (llama), GPT-2 byte characters map back to bytes
 * (gpt2); control, unknown and unused tokens (BOS, EOS, <unk>) give zero
 * bytes. Callers that want
 * SentencePiece's "strip the prefix space after BOS" do it themselves (see
 * llm_tokenizer_add_space_prefix). Returns 0 with *n set, LLM_ETOKEN for an
 * id out of range, LLM_ESPACE when cap is too small (*n = needed).
 * No piece needs more than LLM_TOK_MAX_PIECE bytes. */
int llm_token_to_bytes(const llm_tokenizer *t, int32_t id, char *buf, size_t cap, size_t *n);

#define LLM_TOK_MAX_PIECE 4096

enum llm_tok_kind llm_tokenizer_kind(const llm_tokenizer *t);
uint32_t llm_tokenizer_vocab_size(const llm_tokenizer *t);
int32_t llm_tokenizer_bos(const llm_tokenizer *t); /* -1 when none */
int32_t llm_tokenizer_eos(const llm_tokenizer *t); /* -1 when none */
int llm_tokenizer_add_bos(const llm_tokenizer *t);          /* tokenizer.ggml.add_bos_token */
int llm_tokenizer_add_space_prefix(const llm_tokenizer *t); /* llama model only */

/* The stored piece text of a token (UTF-8, "▁" for spaces; gpt2: the
 * byte-alphabet form), its score and type. For writing a vocabulary back
 * out (llama2.c -> GGUF conversion). Piece: 0 or LLM_ETOKEN. */
int llm_tokenizer_piece(const llm_tokenizer *t, int32_t id, const char **s, size_t *len);
float llm_tokenizer_score(const llm_tokenizer *t, int32_t id);
int llm_tokenizer_token_type(const llm_tokenizer *t, int32_t id);

/* 1 when both have the same model kind, vocabulary (pieces, in order),
 * BOS and EOS — i.e. token ids mean the same text in both; else 0. Used to
 * refuse a draft model whose vocabulary differs from the target's. */
int llm_tokenizer_equal(const llm_tokenizer *a, const llm_tokenizer *b);

#ifdef __cplusplus
}
#endif

#endif
