/* tokenizer.c — building tokenizers (GGUF metadata, llama2.c tokenizer.bin),
 * accessors, decoding ids back to bytes (see tokenizer.h).
 *
 * Both sources are validated completely at creation: piece lengths, array
 * sizes that must match the vocabulary, special ids inside the vocabulary,
 * every byte of a gpt2 vocabulary representable. After creation the
 * tokenizer is immutable and self-contained.
 */
#include "errtext.h"
#include "tokenizer_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LLM_TOK_MAX_VOCAB (1u << 24)

static int tok_fail(char *err, size_t errlen, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int tok_fail(char *err, size_t errlen, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    llm__verrf(err, errlen, "tokenizer: ", fmt, ap);
    va_end(ap);
    return status;
}

/* ---- UTF-8 and the GPT-2 byte alphabet -------------------------------- */

size_t pm__utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 1) {
        *cp = c;
        return 1;
    }
    if (len == 0 || len > n)
        goto invalid;
    uint32_t v = c & (0x7fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            goto invalid;
        v = (v << 6) | (s[i] & 0x3fu);
    }
    /* Overlong forms, surrogates and values past U+10FFFF are invalid. */
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        goto invalid;
    *cp = v;
    return len;
invalid:
    *cp = 0xffffffffu;
    return 1;
}

size_t pm__utf8_put(uint32_t cp, unsigned char *out)
{
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xc0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xe0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (unsigned char)(0xf0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* GPT-2 keeps the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF as
 * their own codepoints and moves the other 68 bytes (0x00..0x20,
 * 0x7F..0xA0, 0xAD), in order, to U+0100..U+0143. */
static int gpt2_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

uint32_t pm__gpt2_byte_to_cp(unsigned b)
{
    if (gpt2_printable(b))
        return b;
    if (b <= 0x20)
        return 0x100 + b;
    if (b >= 0x7f && b <= 0xa0)
        return 0x100 + 33 + (b - 0x7f);
    return 0x100 + 67; /* 0xAD */
}

int pm__gpt2_cp_to_byte(uint32_t cp)
{
    if (cp < 0x100)
        return gpt2_printable(cp) ? (int)cp : -1;
    if (cp < 0x100 + 33)
        return (int)(cp - 0x100);
    if (cp < 0x100 + 67)
        return (int)(cp - 0x100 - 33 + 0x7f);
    return cp == 0x100 + 67 ? 0xad : -1;
}

/* ---- hashing ---------------------------------------------------------- */

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t pow2_at_least(uint64_t n)
{
    uint64_t s = 16;
    while (s < n)
        s <<= 1;
    return s;
}

static const char *piece(const llm_tokenizer *t, uint32_t id)
{
    return t->text + t->off[id];
}

int32_t pm__tok_lookup(const llm_tokenizer *t, const char *s, size_t len)
{
    for (uint64_t h = fnv(s, len) & t->piece_mask;; h = (h + 1) & t->piece_mask) {
        uint32_t slot = t->piece_hash[h];
        if (slot == 0)
            return -1;
        uint32_t id = slot - 1;
        if (t->len[id] == len && memcmp(piece(t, id), s, len) == 0)
            return (int32_t)id;
    }
}

static uint64_t pair_hash(int32_t a, int32_t b)
{
    uint32_t k[2] = {(uint32_t)a, (uint32_t)b};
    return fnv(k, sizeof k);
}

const llm_tok_merge *pm__tok_merge(const llm_tokenizer *t, int32_t left, int32_t right)
{
    if (!t->merge_hash)
        return NULL;
    for (uint64_t h = pair_hash(left, right) & t->merge_mask;; h = (h + 1) & t->merge_mask) {
        uint32_t slot = t->merge_hash[h];
        if (slot == 0)
            return NULL;
        const llm_tok_merge *m = &t->merges[slot - 1];
        if (m->left == left && m->right == right)
            return m;
    }
}

static int matchable(int32_t type)
{
    return type == LLM_TOKTYPE_NORMAL || type == LLM_TOKTYPE_USER_DEFINED;
}

/* Indexes the matchable pieces; the first of equal pieces wins. */
static int build_piece_hash(llm_tokenizer *t)
{
    t->piece_mask = pow2_at_least(2 * (uint64_t)t->n_vocab) - 1;
    t->piece_hash = calloc((size_t)t->piece_mask + 1, sizeof *t->piece_hash);
    if (!t->piece_hash)
        return -1;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        if (!matchable(t->types[id]))
            continue;
        if (pm__tok_lookup(t, piece(t, id), t->len[id]) >= 0)
            continue;
        uint64_t h = fnv(piece(t, id), t->len[id]) & t->piece_mask;
        while (t->piece_hash[h])
            h = (h + 1) & t->piece_mask;
        t->piece_hash[h] = id + 1;
    }
    return 0;
}

/* ---- building --------------------------------------------------------- */

void llm_tokenizer_free(llm_tokenizer *t)
{
    if (!t)
        return;
    free(t->text);
    free(t->off);
    free(t->len);
    free(t->scores);
    free(t->types);
    free(t->piece_hash);
    free(t->user_ids);
    free(t->user_hash);
    free(t->merges);
    free(t->merge_hash);
    free(t);
}

static llm_tokenizer *tok_alloc(enum llm_tok_kind kind, uint32_t n, uint64_t text_bytes)
{
    llm_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->kind = kind;
    t->n_vocab = n;
    t->text = malloc((size_t)text_bytes);
    t->off = calloc(n, sizeof *t->off);
    t->len = calloc(n, sizeof *t->len);
    t->scores = calloc(n, sizeof *t->scores);
    t->types = calloc(n, sizeof *t->types);
    t->bos = t->eos = t->unk = t->sep = -1;
    if (!t->text || !t->off || !t->len || !t->scores || !t->types) {
        llm_tokenizer_free(t);
        return NULL;
    }
    return t;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Byte value of a "<0xXX>" piece, or -1. */
static int byte_piece(const char *s, size_t len)
{
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int hi = hexval((unsigned char)s[3]), lo = hexval((unsigned char)s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* Types for a vocabulary that carries none: from the special ids and the
 * piece text. */
static void derive_types(llm_tokenizer *t)
{
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        if ((int32_t)id == t->unk)
            t->types[id] = LLM_TOKTYPE_UNKNOWN;
        else if ((int32_t)id == t->bos || (int32_t)id == t->eos || (int32_t)id == t->sep)
            t->types[id] = LLM_TOKTYPE_CONTROL;
        else if (t->kind == LLM_TOK_SPM && byte_piece(piece(t, id), t->len[id]) >= 0)
            t->types[id] = LLM_TOKTYPE_BYTE;
        else
            t->types[id] = LLM_TOKTYPE_NORMAL;
    }
}

/* Byte tables. A gpt2 vocabulary may lack a byte's character (Falcon's and
 * StarCoder's never saw bytes that no valid UTF-8 holds): that byte's id
 * stays -1, it takes part in no merge, and tokenization drops it, which is
 * what llama.cpp does (its per-byte fallback finds no piece either). */
static void build_byte_table(llm_tokenizer *t)
{
    for (int b = 0; b < 256; b++)
        t->byte_tok[b] = -1;
    if (t->kind == LLM_TOK_SPM) {
        for (uint32_t id = 0; id < t->n_vocab; id++) {
            int b = t->types[id] == LLM_TOKTYPE_BYTE ? byte_piece(piece(t, id), t->len[id]) : -1;
            if (b >= 0 && t->byte_tok[b] < 0)
                t->byte_tok[b] = (int32_t)id;
        }
        return;
    }
    for (unsigned b = 0; b < 256; b++) {
        unsigned char u[4];
        size_t n = pm__utf8_put(pm__gpt2_byte_to_cp(b), u);
        t->byte_tok[b] = pm__tok_lookup(t, (const char *)u, n);
    }
}

/* The user-defined pieces, longest first (equal lengths: lower id
 * first), for cutting them out of text before encoding. */
typedef struct len_id {
    uint32_t len;
    int32_t id;
} len_id;

static int longer_first(const void *pa, const void *pb)
{
    const len_id *a = pa, *b = pb;
    if (a->len != b->len)
        return a->len > b->len ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int build_user_list(llm_tokenizer *t)
{
    uint32_t n = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++)
        n += t->types[id] == LLM_TOKTYPE_USER_DEFINED && t->len[id] > 0;
    if (n == 0)
        return 0;
    len_id *tmp = malloc(n * sizeof *tmp);
    t->user_ids = malloc(n * sizeof *t->user_ids);
    if (!tmp || !t->user_ids) {
        free(tmp);
        return -1;
    }
    uint32_t k = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++)
        if (t->types[id] == LLM_TOKTYPE_USER_DEFINED && t->len[id] > 0)
            tmp[k++] = (len_id){t->len[id], (int32_t)id};
    qsort(tmp, n, sizeof *tmp, longer_first);
    for (k = 0; k < n; k++)
        t->user_ids[k] = tmp[k].id;
    t->n_user = n;
    free(tmp);
    t->user_mask = pow2_at_least(2 * (uint64_t)n) - 1;
    t->user_hash = calloc((size_t)t->user_mask + 1, sizeof *t->user_hash);
    if (!t->user_hash)
        return -1;
    for (k = 0; k < n; k++) {
        int32_t id = t->user_ids[k];
        if (pm__tok_user_rank(t, piece(t, (uint32_t)id), t->len[id]) >= 0)
            continue;
        uint64_t h = fnv(piece(t, (uint32_t)id), t->len[id]) & t->user_mask;
        while (t->user_hash[h])
            h = (h + 1) & t->user_mask;
        t->user_hash[h] = k + 1;
        t->user_first[(unsigned char)piece(t, (uint32_t)id)[0]] = 1;
    }
    return 0;
}

int32_t pm__tok_user_rank(const llm_tokenizer *t, const char *s, size_t len)
{
    for (uint64_t h = fnv(s, len) & t->user_mask;; h = (h + 1) & t->user_mask) {
        uint32_t slot = t->user_hash[h];
        if (slot == 0)
            return -1;
        int32_t id = t->user_ids[slot - 1];
        if (t->len[id] == len && memcmp(piece(t, (uint32_t)id), s, len) == 0)
            return (int32_t)(slot - 1);
    }
}

static int finish(llm_tokenizer *t, int have_types, char *err, size_t errlen)
{
    if (!have_types)
        derive_types(t);
    if (build_piece_hash(t) || build_user_list(t))
        return tok_fail(err, errlen, LLM_ENOMEM, "out of memory");
    build_byte_table(t);
    for (uint32_t id = 0; id < t->n_vocab; id++)
        if (t->len[id] > t->max_piece)
            t->max_piece = t->len[id];
    return 0;
}

/* ---- from GGUF -------------------------------------------------------- */

static int gguf_kind(const llm_gguf *g, enum llm_tok_kind *kind, char *err, size_t errlen)
{
    const char *s;
    size_t n;
    if (llm_gguf_get_str(g, "tokenizer.ggml.model", &s, &n) != 0)
        return tok_fail(err, errlen, LLM_EFORMAT, "no string tokenizer.ggml.model in the metadata");
    if (n == 5 && memcmp(s, "llama", 5) == 0)
        *kind = LLM_TOK_SPM;
    else if (n == 4 && memcmp(s, "gpt2", 4) == 0)
        *kind = LLM_TOK_BPE;
    else if (n == 4 && memcmp(s, "bert", 4) == 0)
        *kind = LLM_TOK_WPM;
    else {
        char shown[44];
        return tok_fail(err, errlen, LLM_EFORMAT, "unsupported tokenizer model '%s' (need llama, gpt2 or bert)",
                        llm__show(s, n, 40, shown));
    }
    return 0;
}

/* tokenizer.ggml.pre names the split a gpt2 vocabulary was trained with
 * (llama.cpp's converter writes it); the names are llama.cpp's, grouped by
 * the split llama.cpp gives them (tokenizer.h). Absent and "default" mean
 * GPT-2's own (docs/model-files.md says why). Any other name is refused
 * rather than tokenized with a split the model was not trained on: the ids
 * would look plausible and be silently wrong. ignore_merges is llama.cpp's
 * flag of the Llama 3 names (not of smaug-bpe or dbrx, which share only
 * the regex). */
static const struct tok_pre_name {
    const char *name;
    enum llm_tok_pre pre;
    int ignore_merges;
} k_pre_names[] = {
    {"default", LLM_TOK_PRE_GPT2, 0},
    {"gpt2", LLM_TOK_PRE_GPT2, 0},
    {"gpt-2", LLM_TOK_PRE_GPT2, 0},
    {"mpt", LLM_TOK_PRE_GPT2, 0},
    {"gpt-neox", LLM_TOK_PRE_GPT2, 0},
    {"olmo", LLM_TOK_PRE_GPT2, 0},
    {"phi-2", LLM_TOK_PRE_GPT2, 0},
    {"jais", LLM_TOK_PRE_GPT2, 0},
    {"roberta-bpe", LLM_TOK_PRE_GPT2, 0},
    {"gigachat", LLM_TOK_PRE_GPT2, 0},
    {"jina-es", LLM_TOK_PRE_GPT2, 0},
    {"jina-de", LLM_TOK_PRE_GPT2, 0},
    {"jina-v1-en", LLM_TOK_PRE_GPT2, 0},
    {"jina-v2-es", LLM_TOK_PRE_GPT2, 0},
    {"jina-v2-de", LLM_TOK_PRE_GPT2, 0},
    {"jina-v2-code", LLM_TOK_PRE_GPT2, 0},
    {"llama-bpe", LLM_TOK_PRE_LLAMA3, 1},
    {"llama3", LLM_TOK_PRE_LLAMA3, 1},
    {"llama-v3", LLM_TOK_PRE_LLAMA3, 1},
    {"falcon3", LLM_TOK_PRE_LLAMA3, 1},
    {"smaug-bpe", LLM_TOK_PRE_LLAMA3, 0},
    {"dbrx", LLM_TOK_PRE_LLAMA3, 0},
    {"qwen2", LLM_TOK_PRE_QWEN2, 0},
    {"stablelm2", LLM_TOK_PRE_QWEN2, 0},
    {"deepseek-r1-qwen", LLM_TOK_PRE_QWEN2, 0},
    {"megrez", LLM_TOK_PRE_QWEN2, 0},
    {"starcoder", LLM_TOK_PRE_STARCODER, 0},
    {"refact", LLM_TOK_PRE_STARCODER, 0},
    {"command-r", LLM_TOK_PRE_STARCODER, 0},
    {"smollm", LLM_TOK_PRE_STARCODER, 0},
    {"codeshell", LLM_TOK_PRE_STARCODER, 0},
    {"exaone", LLM_TOK_PRE_STARCODER, 0},
    {"minerva-7b", LLM_TOK_PRE_STARCODER, 0},
    {"falcon", LLM_TOK_PRE_FALCON, 0},
    {"deepseek-llm", LLM_TOK_PRE_DEEPSEEK_LLM, 0},
    {"deepseek-coder", LLM_TOK_PRE_DEEPSEEK_CODER, 0},
};

static int gguf_pre(const llm_gguf *g, llm_tokenizer *t, char *err, size_t errlen)
{
    const char *s;
    size_t n;
    t->pre = LLM_TOK_PRE_GPT2;
    t->ignore_merges = 0;
    int r = llm_gguf_get_str(g, "tokenizer.ggml.pre", &s, &n);
    if (r == LLM_ENOKEY)
        return 0;
    if (r != 0)
        return tok_fail(err, errlen, LLM_EFORMAT, "tokenizer.ggml.pre is not a string");
    for (size_t i = 0; i < sizeof k_pre_names / sizeof k_pre_names[0]; i++) {
        if (strlen(k_pre_names[i].name) == n && memcmp(k_pre_names[i].name, s, n) == 0) {
            t->pre = k_pre_names[i].pre;
            t->ignore_merges = k_pre_names[i].ignore_merges;
            return 0;
        }
    }
    char shown[44];
    return tok_fail(err, errlen, LLM_EFORMAT,
                    "unsupported tokenizer.ggml.pre '%s' (supported: default, gpt2, llama-bpe, qwen2, "
                    "starcoder, falcon, deepseek-llm, deepseek-coder and their aliases; docs/model-files.md)",
                    llm__show(s, n, 40, shown));
}

static int gguf_pieces(const llm_gguf *g, enum llm_tok_kind kind, llm_tokenizer **out, char *err, size_t errlen)
{
    uint32_t et;
    uint64_t n;
    const void *data;
    if (llm_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data) != 0 || et != LLM_GGUF_STRING)
        return tok_fail(err, errlen, LLM_EFORMAT, "no string array tokenizer.ggml.tokens in the metadata");
    if (n == 0 || n > LLM_TOK_MAX_VOCAB)
        return tok_fail(err, errlen, LLM_EFORMAT, "vocabulary of %llu tokens is not 1..%u",
                        (unsigned long long)n, LLM_TOK_MAX_VOCAB);
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        llm_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len);
        if (len > LLM_TOK_MAX_PIECE)
            return tok_fail(err, errlen, LLM_EFORMAT, "token %llu is %zu bytes long (max %u)",
                            (unsigned long long)i, len, LLM_TOK_MAX_PIECE);
        bytes += len + 1;
    }
    llm_tokenizer *t = tok_alloc(kind, (uint32_t)n, bytes);
    if (!t)
        return tok_fail(err, errlen, LLM_ENOMEM, "out of memory");
    uint64_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        llm_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len);
        memcpy(t->text + off, s, len);
        t->text[off + len] = '\0';
        t->off[i] = off;
        t->len[i] = (uint32_t)len;
        off += len + 1;
    }
    *out = t;
    return 0;
}

/* An optional per-token array must have exactly one entry per token. */
static int gguf_per_token(llm_tokenizer *t, const llm_gguf *g, int *have_types, char *err, size_t errlen)
{
    static const char ks[] = "tokenizer.ggml.scores", kt[] = "tokenizer.ggml.token_type";
    uint32_t et;
    uint64_t n;
    const void *data;
    if (llm_gguf_get_arr(g, ks, &et, &n, &data) == 0) {
        if (n != t->n_vocab || (et != LLM_GGUF_F32 && et != LLM_GGUF_F64))
            return tok_fail(err, errlen, LLM_EFORMAT, "%s must hold %u floats", ks, t->n_vocab);
        for (uint32_t i = 0; i < n; i++)
            llm_gguf_arr_f32(g, ks, i, &t->scores[i]);
    }
    *have_types = 0;
    if (llm_gguf_get_arr(g, kt, &et, &n, &data) == 0) {
        if (n != t->n_vocab)
            return tok_fail(err, errlen, LLM_EFORMAT, "%s must hold %u integers", kt, t->n_vocab);
        for (uint32_t i = 0; i < n; i++) {
            int64_t v;
            if (llm_gguf_arr_i64(g, kt, i, &v) != 0 || v < 0 || v > LLM_TOKTYPE_BYTE)
                return tok_fail(err, errlen, LLM_EFORMAT, "%s[%u] is not a token type 0..6", kt, i);
            t->types[i] = v == 0 ? LLM_TOKTYPE_NORMAL : (int32_t)v; /* 0: ggml's "undefined" */
        }
        *have_types = 1;
    }
    return 0;
}

/* A special id: absent -> dflt (kept only when inside the vocabulary);
 * present -> must be inside the vocabulary. */
static int gguf_special(const llm_gguf *g, const char *key, int32_t dflt, uint32_t n, int32_t *out, char *err,
                        size_t errlen)
{
    uint32_t v;
    int r = llm_gguf_get_u32(g, key, &v);
    if (r == LLM_ENOKEY) {
        *out = dflt >= 0 && (uint32_t)dflt < n ? dflt : -1;
        return 0;
    }
    if (r != 0 || v >= n)
        return tok_fail(err, errlen, LLM_EFORMAT, "%s is not a token id below %u", key, n);
    *out = (int32_t)v;
    return 0;
}

static int gguf_flag(const llm_gguf *g, const char *key, int dflt)
{
    int v;
    return llm_gguf_get_bool(g, key, &v) == 0 ? v : dflt;
}

/* Resolves "left right" merge lines to ids. A merge whose parts or result
 * are not in the vocabulary can never apply and is dropped; of two merges
 * of the same pair the earlier (lower rank) wins. */
static int gguf_merges(llm_tokenizer *t, const llm_gguf *g, char *err, size_t errlen)
{
    static const char km[] = "tokenizer.ggml.merges";
    uint32_t et;
    uint64_t n;
    const void *data;
    if (llm_gguf_get_arr(g, km, &et, &n, &data) != 0)
        return 0;
    if (et != LLM_GGUF_STRING || n > LLM_TOK_MAX_VOCAB * 4ull)
        return tok_fail(err, errlen, LLM_EFORMAT, "%s is not a string array of a sane size", km);
    t->merges = calloc((size_t)n + 1, sizeof *t->merges);
    t->merge_mask = pow2_at_least(2 * n) - 1;
    t->merge_hash = calloc((size_t)t->merge_mask + 1, sizeof *t->merge_hash);
    if (!t->merges || !t->merge_hash)
        return tok_fail(err, errlen, LLM_ENOMEM, "out of memory");
    char cat[2 * LLM_TOK_MAX_PIECE];
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        llm_gguf_arr_str(g, km, i, &s, &len);
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp || len - 1 > sizeof cat)
            continue;
        size_t ll = (size_t)(sp - s), rl = len - ll - 1;
        memcpy(cat, s, ll);
        memcpy(cat + ll, sp + 1, rl);
        llm_tok_merge m = {pm__tok_lookup(t, s, ll), pm__tok_lookup(t, sp + 1, rl), pm__tok_lookup(t, cat, ll + rl),
                           (uint32_t)i};
        if (m.left < 0 || m.right < 0 || m.result < 0 || pm__tok_merge(t, m.left, m.right))
            continue;
        t->merges[t->n_merges] = m;
        uint64_t h = pair_hash(m.left, m.right) & t->merge_mask;
        while (t->merge_hash[h])
            h = (h + 1) & t->merge_mask;
        t->merge_hash[h] = ++t->n_merges;
    }
    return 0;
}

int llm_tokenizer_from_gguf(const llm_gguf *g, llm_tokenizer **out, char *err, size_t errlen)
{
    enum llm_tok_kind kind = LLM_TOK_SPM;
    llm_tokenizer *t = NULL;
    int have_types = 0;
    *out = NULL;
    int r = gguf_kind(g, &kind, err, errlen);
    if (!r)
        r = gguf_pieces(g, kind, &t, err, errlen);
    if (!r)
        r = gguf_per_token(t, g, &have_types, err, errlen);
    int spm = kind == LLM_TOK_SPM, wpm = kind == LLM_TOK_WPM;
    /* Defaults where a key is absent: SentencePiece's <unk> 0, <s> 1,
     * </s> 2; BERT's [UNK] 100, [CLS] 101, [SEP] 102 (llama.cpp's); gpt2
     * has none. BERT's BOS is its [CLS] (tokenizer.ggml.cls_token_id). */
    int32_t cls = -1;
    if (!r && wpm)
        r = gguf_special(g, "tokenizer.ggml.cls_token_id", 101, t->n_vocab, &cls, err, errlen);
    if (!r)
        r = gguf_special(g, "tokenizer.ggml.bos_token_id", spm ? 1 : cls, t->n_vocab, &t->bos, err, errlen);
    if (!r)
        r = gguf_special(g, "tokenizer.ggml.eos_token_id", spm ? 2 : -1, t->n_vocab, &t->eos, err, errlen);
    if (!r)
        r = gguf_special(g, "tokenizer.ggml.unknown_token_id", spm ? 0 : wpm ? 100 : -1, t->n_vocab, &t->unk, err,
                         errlen);
    if (!r && wpm) /* llama.cpp's converter spells the key so */
        r = gguf_special(g, "tokenizer.ggml.seperator_token_id", 102, t->n_vocab, &t->sep, err, errlen);
    /* SentencePiece and WordPiece split no pre-tokens by regex, so they
     * ignore the key (llama.cpp writes "default" there, or a model's
     * name). Checked before the pieces are indexed, so an unsupported
     * split is what a refusal names. */
    if (!r && kind == LLM_TOK_BPE)
        r = gguf_pre(g, t, err, errlen);
    if (!r) {
        t->add_bos = gguf_flag(g, "tokenizer.ggml.add_bos_token", spm || wpm);
        t->add_space_prefix = spm && gguf_flag(g, "tokenizer.ggml.add_space_prefix", 1);
        r = finish(t, have_types, err, errlen);
    }
    if (!r && kind == LLM_TOK_BPE)
        r = gguf_merges(t, g, err, errlen);
    if (r) {
        llm_tokenizer_free(t);
        return r;
    }
    *out = t;
    return 0;
}

/* ---- from llama2.c tokenizer.bin -------------------------------------- */

/* llama2.c's own limit on a piece: 170 bytes, so that a piece of spaces
 * widened to "▁" (3 bytes each) stays within 512. */
#define L2C_MAX_TOKEN_LEN 170u

typedef struct l2c_reader {
    const unsigned char *p;
    size_t len, pos;
} l2c_reader;

static int rd32(l2c_reader *r, uint32_t *v)
{
    if (r->len - r->pos < 4)
        return -1;
    const unsigned char *p = r->p + r->pos;
    *v = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    r->pos += 4;
    return 0;
}

/* Copies piece bytes, turning llama2.c's ' ' into SentencePiece's "▁". */
static uint64_t put_piece(char *dst, const unsigned char *src, size_t len)
{
    uint64_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == ' ') {
            memcpy(dst + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            dst[n++] = (char)src[i];
        }
    }
    dst[n] = '\0';
    return n;
}

static int parse_l2c(llm_tokenizer *t, l2c_reader *r, uint32_t max_len, char *err, size_t errlen)
{
    uint64_t off = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        uint32_t score_bits, len;
        if (rd32(r, &score_bits) || rd32(r, &len))
            return tok_fail(err, errlen, LLM_EFORMAT, "tokenizer.bin is truncated at token %u of %u", i,
                            t->n_vocab);
        if (len > max_len)
            return tok_fail(err, errlen, LLM_EFORMAT, "token %u has length %d (max_token_length %u)", i,
                            (int)(int32_t)len, max_len);
        if (r->len - r->pos < len)
            return tok_fail(err, errlen, LLM_EFORMAT, "tokenizer.bin is truncated at token %u of %u", i,
                            t->n_vocab);
        memcpy(&t->scores[i], &score_bits, 4);
        t->off[i] = off;
        t->len[i] = (uint32_t)put_piece(t->text + off, r->p + r->pos, len);
        off += t->len[i] + 1;
        r->pos += len;
    }
    if (r->pos != r->len)
        return tok_fail(err, errlen, LLM_EFORMAT, "%zu trailing bytes after %u tokens", r->len - r->pos,
                        t->n_vocab);
    return 0;
}

static int read_whole(const char *path, unsigned char **buf, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return tok_fail(err, errlen, LLM_EIO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    unsigned char *p = malloc(cap);
    while (p) {
        n += fread(p + n, 1, cap - n, f);
        if (n < cap)
            break;
        unsigned char *q = cap > (SIZE_MAX >> 1) ? NULL : realloc(p, cap * 2);
        if (!q) {
            free(p);
            p = NULL;
            break;
        }
        p = q;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!p || bad) {
        free(p);
        return tok_fail(err, errlen, p ? LLM_EIO : LLM_ENOMEM, "cannot read '%s'", path);
    }
    *buf = p;
    *len = n;
    return 0;
}

int llm_tokenizer_from_llama2c(const char *path, uint32_t vocab_size, llm_tokenizer **out, char *err,
                               size_t errlen)
{
    *out = NULL;
    if (vocab_size == 0 || vocab_size > LLM_TOK_MAX_VOCAB)
        return tok_fail(err, errlen, LLM_EINVAL, "vocab_size %u is not 1..%u", vocab_size, LLM_TOK_MAX_VOCAB);
    unsigned char *buf = NULL;
    size_t len = 0;
    int r = read_whole(path, &buf, &len, err, errlen);
    if (r)
        return r;
    l2c_reader rd = {buf, len, 0};
    uint32_t max_len;
    llm_tokenizer *t = NULL;
    if (rd32(&rd, &max_len))
        r = tok_fail(err, errlen, LLM_EFORMAT, "tokenizer.bin is truncated (no header)");
    else if (max_len == 0 || max_len > L2C_MAX_TOKEN_LEN)
        r = tok_fail(err, errlen, LLM_EFORMAT, "max_token_length %d is not 1..%u", (int)(int32_t)max_len,
                     L2C_MAX_TOKEN_LEN);
    /* A ' ' widens to the 3-byte "▁": bound the text by 3x the file. */
    else if (!(t = tok_alloc(LLM_TOK_SPM, vocab_size, 3 * (uint64_t)len + vocab_size)))
        r = tok_fail(err, errlen, LLM_ENOMEM, "out of memory");
    else
        r = parse_l2c(t, &rd, max_len, err, errlen);
    free(buf);
    if (!r) {
        t->unk = 0;
        t->bos = vocab_size > 1 ? 1 : -1;
        t->eos = vocab_size > 2 ? 2 : -1;
        t->add_bos = 1;
        t->add_space_prefix = 1;
        r = finish(t, 0, err, errlen);
    }
    if (r) {
        llm_tokenizer_free(t);
        return r;
    }
    *out = t;
    return 0;
}

/* ---- accessors and decoding ------------------------------------------- */

enum llm_tok_kind llm_tokenizer_kind(const llm_tokenizer *t) { return t->kind; }
uint32_t llm_tokenizer_vocab_size(const llm_tokenizer *t) { return t->n_vocab; }
int32_t llm_tokenizer_bos(const llm_tokenizer *t) { return t->bos; }
int32_t llm_tokenizer_eos(const llm_tokenizer *t) { return t->eos; }
int llm_tokenizer_add_bos(const llm_tokenizer *t) { return t->add_bos; }
int llm_tokenizer_add_space_prefix(const llm_tokenizer *t) { return t->add_space_prefix; }

static int valid_id(const llm_tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->n_vocab;
}

int llm_tokenizer_piece(const llm_tokenizer *t, int32_t id, const char **s, size_t *len)
{
    if (!valid_id(t, id))
        return LLM_ETOKEN;
    *s = piece(t, (uint32_t)id);
    *len = t->len[id];
    return 0;
}

float llm_tokenizer_score(const llm_tokenizer *t, int32_t id)
{
    return valid_id(t, id) ? t->scores[id] : 0.0f;
}

int llm_tokenizer_token_type(const llm_tokenizer *t, int32_t id)
{
    return valid_id(t, id) ? t->types[id] : 0;
}

/* Output bytes of piece `id`, written while they fit; returns the count. */
static size_t decode_piece(const llm_tokenizer *t, uint32_t id, char *buf, size_t cap)
{
    const unsigned char *s = (const unsigned char *)piece(t, id);
    size_t len = t->len[id], n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = pm__utf8_next(s + i, len - i, &cp);
        int b = -1;
        if (t->kind != LLM_TOK_BPE && cp == 0x2581)
            b = ' ';
        else if (t->kind == LLM_TOK_BPE && t->types[id] != LLM_TOKTYPE_USER_DEFINED && cp != 0xffffffffu)
            b = pm__gpt2_cp_to_byte(cp);
        if (b >= 0) {
            if (n < cap)
                buf[n] = (char)b;
            n++;
        } else {
            for (size_t j = 0; j < k; j++, n++)
                if (n < cap)
                    buf[n] = (char)s[i + j];
        }
        i += k;
    }
    return n;
}

int llm_token_to_bytes(const llm_tokenizer *t, int32_t id, char *buf, size_t cap, size_t *n)
{
    if (!valid_id(t, id))
        return LLM_ETOKEN;
    int type = t->types[id];
    size_t need;
    if (type == LLM_TOKTYPE_CONTROL || type == LLM_TOKTYPE_UNKNOWN || type == LLM_TOKTYPE_UNUSED) {
        need = 0;
    } else if (type == LLM_TOKTYPE_BYTE) {
        int b = byte_piece(piece(t, (uint32_t)id), t->len[id]);
        need = 1;
        if (cap >= 1)
            buf[0] = (char)(b >= 0 ? b : '?');
    } else {
        need = decode_piece(t, (uint32_t)id, buf, cap);
    }
    *n = need;
    return need > cap ? LLM_ESPACE : 0;
}

int llm_tokenizer_equal(const llm_tokenizer *a, const llm_tokenizer *b)
{
    if (a->kind != b->kind || a->n_vocab != b->n_vocab || a->bos != b->bos || a->eos != b->eos)
        return 0;
    for (uint32_t i = 0; i < a->n_vocab; i++)
        if (a->len[i] != b->len[i] || memcmp(piece(a, i), piece(b, i), a->len[i]) != 0)
            return 0;
    return 1;
}
