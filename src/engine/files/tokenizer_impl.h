/* tokenizer_impl.h — the tokenizer's internal representation, shared by
 * tokenizer.c (loading, accessors, decoding) and tokenizer_encode.c
 * (encoding). Not part of any public contract.
 *
 * Pieces are stored back to back in `text` (each NUL-terminated, so a
 * piece is also a C string); `piece_hash` maps a piece's bytes to its id
 * for the pieces that text may produce (normal and user-defined types);
 * `merge_hash` maps a pair of ids to its BPE merge (gpt2 only).
 */
#ifndef LLM_TOKENIZER_IMPL_H
#define LLM_TOKENIZER_IMPL_H

#include "tokenizer.h"

/* gpt2 pre-tokenizers (tokenizer.ggml.pre): which split turns the text
 * into pre-tokens before the merges (see tokenizer.h for each). Zero is
 * GPT-2's own, so a calloc'ed tokenizer starts with it. */
enum llm_tok_pre {
    LLM_TOK_PRE_GPT2 = 0,      /* absent, "default", "gpt2", "gpt-2", "mpt", "gpt-neox", "olmo", "phi-2", ... */
    LLM_TOK_PRE_LLAMA3 = 1,    /* "llama-bpe", "llama3", "llama-v3", "falcon3", "smaug-bpe", "dbrx" */
    LLM_TOK_PRE_QWEN2 = 2,     /* "qwen2", "stablelm2", ...: Llama 3's with single digits */
    LLM_TOK_PRE_STARCODER = 3, /* "starcoder", "refact", "command-r", ...: digits alone, then GPT-2's */
    LLM_TOK_PRE_FALCON = 4,    /* "falcon": punctuation runs, GPT-2's, three digits */
    LLM_TOK_PRE_DEEPSEEK_LLM = 5,   /* "deepseek-llm" */
    LLM_TOK_PRE_DEEPSEEK_CODER = 6  /* "deepseek-coder" */
};

typedef struct llm_tok_merge {
    int32_t left, right; /* ids of the pair */
    int32_t result;      /* id of the merged piece */
    uint32_t rank;       /* position in tokenizer.ggml.merges: lower merges first */
} llm_tok_merge;

struct llm_tokenizer {
    enum llm_tok_kind kind;
    enum llm_tok_pre pre; /* gpt2 only; spm splits no pre-tokens */
    int ignore_merges;    /* gpt2: a pre-token that is a piece is emitted whole */
    uint32_t n_vocab;
    char *text;          /* all pieces, NUL-terminated each */
    uint64_t *off;       /* [n_vocab] offset of piece i in text */
    uint32_t *len;       /* [n_vocab] byte length of piece i */
    float *scores;       /* [n_vocab] */
    int32_t *types;      /* [n_vocab] enum llm_tok_type */
    int32_t bos, eos, unk; /* -1 when absent */
    int add_bos;
    int add_space_prefix;
    int32_t byte_tok[256]; /* spm: id of <0xXX>; gpt2: id of byte b's mapped char; -1 absent */
    uint32_t *piece_hash;  /* slot -> id + 1, 0 = empty */
    uint64_t piece_mask;
    int32_t sep;           /* wpm: appended after the text with add_bos; -1 absent */
    uint32_t max_piece;    /* wpm: the longest piece, in bytes */
    int32_t *user_ids;     /* user-defined pieces, longest first (their rank): cut out of text first */
    uint32_t n_user;
    uint32_t *user_hash;   /* piece bytes -> rank + 1, 0 = empty */
    uint64_t user_mask;
    unsigned char user_first[256]; /* 1 for a byte that begins a user-defined piece */
    llm_tok_merge *merges; /* gpt2: resolved merges */
    uint32_t n_merges;
    uint32_t *merge_hash;  /* slot -> merge index + 1 */
    uint64_t merge_mask;
};

/* Output accumulator: ids are written while they fit and always counted. */
typedef struct pm__tok_sink {
    int32_t *out;
    size_t cap, n;
} pm__tok_sink;

static inline void pm__tok_emit(pm__tok_sink *k, int32_t id)
{
    if (k->n < k->cap)
        k->out[k->n] = id;
    k->n++;
}

/* WordPiece over len bytes of text (tokenizer_wpm.c): 0 or LLM_ENOMEM. */
int pm__wpm_encode(const llm_tokenizer *t, const char *text, size_t len, pm__tok_sink *k);

/* Rank (index into user_ids) of the user-defined piece with these bytes,
 * or -1; of two with the same bytes, the lower rank. */
int32_t pm__tok_user_rank(const llm_tokenizer *t, const char *s, size_t len);

/* Id of the matchable piece with these bytes, or -1. */
int32_t pm__tok_lookup(const llm_tokenizer *t, const char *s, size_t len);

/* The merge of (left, right), or NULL. */
const llm_tok_merge *pm__tok_merge(const llm_tokenizer *t, int32_t left, int32_t right);

/* Byte length of the pre-token that starts at byte i of s (n bytes, i < n)
 * under pre-tokenizer `pre`: always 1..n-i, so calling it from 0 until n
 * splits the whole text. Exposed for the tests, which check chunk
 * boundaries directly. */
size_t pm__tok_pretoken(enum llm_tok_pre pre, const unsigned char *s, size_t n, size_t i);

/* Splits all n bytes of s under `pre` (tokenizer_pre.c): sets cut[i] = 1
 * where a pre-token begins, and cut[n] = 1; cut has n + 1 bytes. The
 * single-regex splits come from pm__tok_pretoken; falcon's and deepseek's
 * apply their regexes in turn. */
void pm__tok_split(enum llm_tok_pre pre, const unsigned char *s, size_t n, unsigned char *cut);

/* GPT-2's byte <-> printable character mapping: the codepoint standing for
 * byte b, and the byte a codepoint stands for (-1 when none). */
uint32_t pm__gpt2_byte_to_cp(unsigned b);
int pm__gpt2_cp_to_byte(uint32_t cp);

/* Decodes one UTF-8 character at s (n bytes available): its length
 * (1..4) and codepoint; an invalid or truncated sequence decodes as one
 * byte with *cp = 0xFFFFFFFF. */
size_t pm__utf8_next(const unsigned char *s, size_t n, uint32_t *cp);

/* A Unicode table's row: a sorted, disjoint, inclusive codepoint range. */
typedef struct pm__urange {
    uint32_t lo, hi;
} pm__urange;

/* 1 when cp lies in one of r[0..n) (binary search; tokenizer_unicode.c),
 * the lookup of every range table of both generated files. */
int pm__unicode_in_ranges(uint32_t cp, const pm__urange *r, size_t n);

/* Unicode general category tests (tokenizer_unicode.c): \p{L}, \p{N}. */
int pm__unicode_is_letter(uint32_t cp);
int pm__unicode_is_number(uint32_t cp);

/* tokenizer_ucd.c: \p{P}; \p{C} without unassigned codepoints (Cc Cf
 * Co Cs); the simple lowercase mapping; the first character of a
 * codepoint's NFD decomposition (itself when it has none). */
int pm__unicode_is_punct(uint32_t cp);
int pm__unicode_is_control(uint32_t cp);
uint32_t pm__unicode_lower(uint32_t cp);
uint32_t pm__unicode_nfd_first(uint32_t cp);

/* Unicode White_Space (tokenizer_pre.c). */
int pm__unicode_is_space(uint32_t cp);

/* Encodes cp as UTF-8 into out (4 bytes room); returns the length. */
size_t pm__utf8_put(uint32_t cp, unsigned char *out);

#endif
