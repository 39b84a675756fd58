/* test_tokenizer.c — both tokenizer models on small vocabularies built
 * here, with golden ids derived by hand from the algorithms' rules (each
 * derivation is written next to its case), the gpt2 pre-tokenizers' chunk
 * boundaries worked from their regexes, plus llama2.c tokenizer.bin
 * parsing and the malformed inputs of every loader.
 *
 * Usage: test_tokenizer CASE
 */
#include <stdint.h>

#include "bytes.h"
#include "gguf.h"
#include "pm_check.h"
#include "tokenizer.h"
#include "tokenizer_impl.h"

#define SP "\xe2\x96\x81" /* U+2581, SentencePiece's space */

/* ---- building vocabularies -------------------------------------------- */

typedef struct vocab {
    const char *pieces[600];
    float scores[600];
    int32_t types[600];
    uint32_t n;
    char bytes[256][8]; /* "<0xXX>" texts */
} vocab;

static uint32_t add(vocab *v, const char *piece, float score, int32_t type)
{
    v->pieces[v->n] = piece;
    v->scores[v->n] = score;
    v->types[v->n] = type;
    return v->n++;
}

/* SentencePiece test vocabulary (ids in comments are what the cases use):
 *   0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>,
 *   259 ▁ -1, 260 h, 261 e, 262 l, 263 o, 264 w, 265 r, 266 d (-2 each),
 *   267 he -3, 268 ll -4, 269 llo -5, 270 hell -6, 271 hello -7,
 *   272 ▁w -8, 273 or -9, 274 ▁wor -10, 275 ld -11, 276 ▁world -12,
 *   277 é -2, 278 日 -2, 279 a -2, 280 aa -3, 281 ▁▁ -0.5 */
static void spm_vocab(vocab *v, int with_bytes)
{
    memset(v, 0, sizeof *v);
    add(v, "<unk>", 0, LLM_TOKTYPE_UNKNOWN);
    add(v, "<s>", 0, LLM_TOKTYPE_CONTROL);
    add(v, "</s>", 0, LLM_TOKTYPE_CONTROL);
    for (int b = 0; b < 256; b++) {
        snprintf(v->bytes[b], sizeof v->bytes[b], "<0x%02X>", b);
        add(v, with_bytes ? v->bytes[b] : "[unused]", 0, with_bytes ? LLM_TOKTYPE_BYTE : LLM_TOKTYPE_UNUSED);
    }
    static const struct {
        const char *p;
        float s;
    } rest[] = {{SP, -1},         {"h", -2},       {"e", -2},       {"l", -2},      {"o", -2},
                {"w", -2},        {"r", -2},       {"d", -2},       {"he", -3},     {"ll", -4},
                {"llo", -5},      {"hell", -6},    {"hello", -7},   {SP "w", -8},   {"or", -9},
                {SP "wor", -10},  {"ld", -11},     {SP "world", -12}, {"\xc3\xa9", -2}, {"\xe6\x97\xa5", -2},
                {"a", -2},        {"aa", -3},      {SP SP, -0.5f}};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
        add(v, rest[i].p, rest[i].s, LLM_TOKTYPE_NORMAL);
}

static int g_load_rc; /* status of load()'s last llm_tokenizer_from_gguf */

/* Writes the vocabulary as GGUF tokenizer metadata and loads it back.
 * extra(w) may add or override keys. Returns the tokenizer (or NULL with
 * the error in err). */
static llm_tokenizer *load(const vocab *v, const char *model, const char *const *merges, uint64_t n_merges,
                           void (*extra)(llm_gguf_writer *), char *err, size_t errlen)
{
    llm_gguf_writer *w;
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    if (model)
        llm_gguf_writer_set_str(w, "tokenizer.ggml.model", model, strlen(model));
    llm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v->pieces, NULL, v->n);
    if (extra)
        extra(w);
    else {
        llm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", LLM_GGUF_F32, v->scores, v->n);
        llm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_I32, v->types, v->n);
    }
    if (merges)
        llm_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, n_merges);
    char path[512];
    tmp_path(path, sizeof path, "tok");
    REQUIRE(llm_gguf_writer_write(w, path, err, errlen) == 0);
    llm_gguf_writer_free(w);
    llm_gguf *g;
    REQUIRE(llm_gguf_open(path, &g, err, errlen) == 0);
    remove(path);
    llm_tokenizer *t = NULL;
    g_load_rc = llm_tokenizer_from_gguf(g, &t, err, errlen);
    llm_gguf_close(g);
    return t;
}

static void expect_ids(const llm_tokenizer *t, const char *text, size_t len, int bos, const int32_t *want,
                       size_t n_want)
{
    int32_t out[256];
    size_t n = 0;
    int rc = llm_tokenize(t, text, len, bos, out, 256, &n);
    CHECK_INT_EQ(rc, 0);
    CHECK_INT_EQ(n, n_want);
    for (size_t i = 0; i < n && i < n_want; i++) {
        if (out[i] != want[i]) {
            fprintf(stderr, "text '%.*s': id %zu\n", (int)len, text, i);
            CHECK_INT_EQ(out[i], want[i]);
        }
    }
}

#define EXPECT(t, text, bos, ...)                                                            \
    do {                                                                                     \
        static const int32_t want_[] = {__VA_ARGS__};                                        \
        expect_ids((t), (text), sizeof(text) - 1, (bos), want_, sizeof want_ / sizeof want_[0]); \
    } while (0)

/* Decoding every id of the tokenization gives the text back (with the
 * SentencePiece prefix space, when present, removed). */
static void expect_roundtrip(const llm_tokenizer *t, const char *text, size_t len)
{
    int32_t ids[256];
    size_t n = 0;
    REQUIRE(llm_tokenize(t, text, len, 1, ids, 256, &n) == 0);
    char buf[1024];
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k;
        REQUIRE(llm_token_to_bytes(t, ids[i], buf + used, sizeof buf - used, &k) == 0);
        used += k;
    }
    size_t skip = llm_tokenizer_add_space_prefix(t) && used > 0 && buf[0] == ' ' ? 1 : 0;
    CHECK_INT_EQ(used - skip, len);
    CHECK(memcmp(buf + skip, text, len) == 0);
}

/* ---- SentencePiece ------------------------------------------------------ */

static void case_spm_merges(void)
{
    vocab v;
    char err[256];
    spm_vocab(&v, 1);
    llm_tokenizer *t = load(&v, "llama", NULL, 0, NULL, err, sizeof err);
    REQUIRE(t != NULL);
    CHECK_INT_EQ(llm_tokenizer_kind(t), LLM_TOK_SPM);
    CHECK_INT_EQ(llm_tokenizer_vocab_size(t), 282);
    CHECK_INT_EQ(llm_tokenizer_bos(t), 1);
    CHECK_INT_EQ(llm_tokenizer_eos(t), 2);
    CHECK_INT_EQ(llm_tokenizer_add_bos(t), 1);
    CHECK_INT_EQ(llm_tokenizer_add_space_prefix(t), 1);
    /* "▁hello▁world" = ▁ h e l l o ▁ w o r l d. By score: he(-3); ll(-4);
     * then llo(-5) beats hell(-6); hello(-7); ▁w(-8); or(-9); ▁wor(-10);
     * ld(-11); ▁world(-12). Left: ▁ hello ▁world. */
    EXPECT(t, "hello world", 1, 1, 259, 271, 276);
    EXPECT(t, "hello world", 0, 259, 271, 276);
    /* Equal scores merge leftmost first: ▁ a a a -> ▁ [aa] a. */
    EXPECT(t, "aaa", 0, 259, 280, 279);
    /* "  a\tb" -> ▁▁▁ a \t b: ▁▁ (-0.5) at 0 and 1, leftmost wins; \t and
     * b have no piece: bytes <0x09> = 3+9, <0x62> = 3+98. */
    EXPECT(t, "  a\tb", 0, 281, 259, 279, 12, 101);
    /* Control pieces are never matched from text: "<s>" falls back to
     * bytes <0x3C> <0x73> <0x3E>. */
    EXPECT(t, "<s>", 0, 259, 63, 118, 65);
    /* Empty text: nothing, or BOS alone. */
    int32_t out[4];
    size_t n = 99;
    CHECK_INT_EQ(llm_tokenize(t, "", 0, 0, out, 4, &n), 0);
    CHECK_INT_EQ(n, 0);
    EXPECT(t, "", 1, 1);
    llm_tokenizer_free(t);
}

static void case_spm_unicode(void)
{
    vocab v;
    char err[256];
    spm_vocab(&v, 1);
    llm_tokenizer *t = load(&v, "llama", NULL, 0, NULL, err, sizeof err);
    REQUIRE(t != NULL);
    /* é and 日 are pieces; "\n" falls back to <0x0A> = 13. */
    EXPECT(t, "\xc3\xa9\xe6\x97\xa5\n", 0, 259, 277, 278, 13);
    /* ü (C3 BC) and 😀 (F0 9F 98 80) have no piece: byte fallback per
     * byte, id 3 + byte. */
    EXPECT(t, "\xc3\xbc\xf0\x9f\x98\x80", 0, 259, 3 + 0xc3, 3 + 0xbc, 3 + 0xf0, 3 + 0x9f, 3 + 0x98, 3 + 0x80);
    /* Invalid UTF-8 (a lone continuation byte, a truncated sequence) goes
     * byte by byte. */
    EXPECT(t, "\xff\xe6\x97", 0, 259, 3 + 0xff, 3 + 0xe6, 3 + 0x97);
    static const char *texts[] = {"hello world", "  a\tb", "\xc3\xbc\xf0\x9f\x98\x80 x\n\ny", "\xff\xfe"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        expect_roundtrip(t, texts[i], strlen(texts[i]));
    llm_tokenizer_free(t);
}

static void no_space_prefix(llm_gguf_writer *w)
{
    vocab v;
    spm_vocab(&v, 1);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", LLM_GGUF_F32, v.scores, v.n);
    llm_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", 0);
    llm_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 0);
    llm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 2);
    llm_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 1);
}

/* No token_type array: types come from the pieces and special ids. */
static void case_spm_options(void)
{
    vocab v;
    char err[256];
    spm_vocab(&v, 1);
    llm_tokenizer *t = load(&v, "llama", NULL, 0, no_space_prefix, err, sizeof err);
    REQUIRE(t != NULL);
    CHECK_INT_EQ(llm_tokenizer_add_space_prefix(t), 0);
    CHECK_INT_EQ(llm_tokenizer_add_bos(t), 0);
    CHECK_INT_EQ(llm_tokenizer_bos(t), 2);
    CHECK_INT_EQ(llm_tokenizer_eos(t), 1);
    CHECK_INT_EQ(llm_tokenizer_token_type(t, 10), LLM_TOKTYPE_BYTE);
    CHECK_INT_EQ(llm_tokenizer_token_type(t, 0), LLM_TOKTYPE_UNKNOWN);
    CHECK_INT_EQ(llm_tokenizer_token_type(t, 1), LLM_TOKTYPE_CONTROL);
    EXPECT(t, "hello", 1, 2, 271);
    EXPECT(t, "hello world", 0, 271, 276);
    llm_tokenizer_free(t);

    /* Without byte pieces an unknown character becomes <unk> once. */
    spm_vocab(&v, 0);
    t = load(&v, "llama", NULL, 0, NULL, err, sizeof err);
    REQUIRE(t != NULL);
    EXPECT(t, "h\xc3\xbcx", 0, 259, 260, 0, 0);
    llm_tokenizer_free(t);
}

static void case_spm_decode(void)
{
    vocab v;
    char err[256];
    spm_vocab(&v, 1);
    llm_tokenizer *t = load(&v, "llama", NULL, 0, NULL, err, sizeof err);
    REQUIRE(t != NULL);
    char buf[16];
    size_t n;
    CHECK_INT_EQ(llm_token_to_bytes(t, 276, buf, sizeof buf, &n), 0);
    CHECK(n == 6 && memcmp(buf, " world", 6) == 0);
    CHECK_INT_EQ(llm_token_to_bytes(t, 13, buf, sizeof buf, &n), 0);
    CHECK(n == 1 && buf[0] == '\n');
    CHECK_INT_EQ(llm_token_to_bytes(t, 3 + 0xf0, buf, sizeof buf, &n), 0);
    CHECK(n == 1 && (unsigned char)buf[0] == 0xf0);
    CHECK_INT_EQ(llm_token_to_bytes(t, 1, buf, sizeof buf, &n), 0);
    CHECK_INT_EQ(n, 0);
    CHECK_INT_EQ(llm_token_to_bytes(t, 0, buf, sizeof buf, &n), 0);
    CHECK_INT_EQ(n, 0);
    CHECK_INT_EQ(llm_token_to_bytes(t, 277, buf, sizeof buf, &n), 0);
    CHECK(n == 2 && memcmp(buf, "\xc3\xa9", 2) == 0);
    CHECK_INT_EQ(llm_token_to_bytes(t, 276, buf, 3, &n), LLM_ESPACE);
    CHECK_INT_EQ(n, 6);
    CHECK_INT_EQ(llm_token_to_bytes(t, 282, buf, sizeof buf, &n), LLM_ETOKEN);
    CHECK_INT_EQ(llm_token_to_bytes(t, -1, buf, sizeof buf, &n), LLM_ETOKEN);
    /* Output too small: the count needed and the first ids. */
    int32_t out[2];
    CHECK_INT_EQ(llm_tokenize(t, "hello world", 11, 1, out, 2, &n), LLM_ESPACE);
    CHECK_INT_EQ(n, 4);
    CHECK_INT_EQ(out[0], 1);
    CHECK_INT_EQ(out[1], 259);
    llm_tokenizer_free(t);
}

/* ---- GPT-2 byte-level BPE ----------------------------------------------- */

/* Vocabulary: ids 0..255 are the 256 byte characters in byte order (id b
 * is byte b's GPT-2 character: 'Ġ' for 0x20 is id 32, 'Ċ' for 0x0A is id
 * 10), then 256 Ġt, 257 he, 258 Ġthe, 259 ll, 260 llo, 261 hell,
 * 262 <|endoftext|> (control), 263 ĠĠ, 264 12. Merges by rank:
 *   0 "Ġ t", 1 "h e", 2 "Ġt he", 3 "l l", 4 "ll o", 5 "he ll", 6 "Ġ Ġ",
 *   7 "1 2", plus lines that must be ignored (no space; unknown parts). */
static char g_bytechars[256][4];

static void bpe_vocab(vocab *v)
{
    memset(v, 0, sizeof *v);
    for (unsigned b = 0; b < 256; b++) {
        /* The mapping, written out here independently of the tokenizer:
         * printable bytes map to themselves, the other 68 to U+0100+k. */
        unsigned k = 0, cp = b;
        int printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        if (!printable) {
            for (unsigned c = 0; c < b; c++)
                k += !((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae));
            cp = 0x100 + k;
        }
        char *o = g_bytechars[b];
        if (cp < 0x80) {
            o[0] = (char)cp;
        } else {
            o[0] = (char)(0xc0 | (cp >> 6));
            o[1] = (char)(0x80 | (cp & 0x3f));
        }
        add(v, o, 0, LLM_TOKTYPE_NORMAL);
    }
    add(v, "\xc4\xa0t", 0, LLM_TOKTYPE_NORMAL);
    add(v, "he", 0, LLM_TOKTYPE_NORMAL);
    add(v, "\xc4\xa0the", 0, LLM_TOKTYPE_NORMAL);
    add(v, "ll", 0, LLM_TOKTYPE_NORMAL);
    add(v, "llo", 0, LLM_TOKTYPE_NORMAL);
    add(v, "hell", 0, LLM_TOKTYPE_NORMAL);
    add(v, "<|endoftext|>", 0, LLM_TOKTYPE_CONTROL);
    add(v, "\xc4\xa0\xc4\xa0", 0, LLM_TOKTYPE_NORMAL);
    add(v, "12", 0, LLM_TOKTYPE_NORMAL);
}

static const char *const k_merges[] = {
    "\xc4\xa0 t", "h e", "\xc4\xa0t he", "l l", "ll o", "he ll", "\xc4\xa0 \xc4\xa0", "1 2", "nospace", "q z",
};

static void bpe_extra(llm_gguf_writer *w)
{
    vocab v;
    bpe_vocab(&v);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_I32, v.types, v.n);
    llm_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 262);
}

static llm_tokenizer *bpe_load(void)
{
    vocab v;
    char err[256];
    bpe_vocab(&v);
    llm_tokenizer *t = load(&v, "gpt2", k_merges, sizeof k_merges / sizeof k_merges[0], bpe_extra, err, sizeof err);
    if (!t)
        fprintf(stderr, "%s\n", err);
    REQUIRE(t != NULL);
    return t;
}

static void case_bpe_merges(void)
{
    llm_tokenizer *t = bpe_load();
    CHECK_INT_EQ(llm_tokenizer_kind(t), LLM_TOK_BPE);
    CHECK_INT_EQ(llm_tokenizer_bos(t), -1);
    CHECK_INT_EQ(llm_tokenizer_eos(t), 262);
    CHECK_INT_EQ(llm_tokenizer_add_bos(t), 0);
    CHECK_INT_EQ(llm_tokenizer_add_space_prefix(t), 0);
    /* "the" -> t h e: "h e" (rank 1) applies; "t he" is no merge. " the" ->
     * Ġ t h e: "Ġ t" (0) then "h e" (1) then "Ġt he" (2). */
    EXPECT(t, "the the", 0, 116, 257, 258);
    /* Pre-tokens "the", " cat", "'s", " hello". " hello": "h e" (1), then
     * "l l" (3), then "ll o" (4) beats "he ll" (5): Ġ he llo. */
    EXPECT(t, "the cat's hello", 0, 116, 257, 32, 99, 97, 116, 39, 115, 32, 257, 260);
    /* add_bos with no BOS in the vocabulary adds nothing. */
    EXPECT(t, "he", 1, 257);
    llm_tokenizer_free(t);
}

static void case_bpe_pretokenize(void)
{
    llm_tokenizer *t = bpe_load();
    /* "a  b": "a", " ", " b" — the spaces sit in different pre-tokens, so
     * "Ġ Ġ" cannot merge. "a   " ends in whitespace: "a", "   " -> ĠĠ Ġ. */
    EXPECT(t, "a  b", 0, 97, 32, 32, 98);
    EXPECT(t, "a   ", 0, 97, 263, 32);
    /* "\n\nc": "\n", "\n", "c" (Ċ is id 10). */
    EXPECT(t, "\n\nc", 0, 10, 10, 99);
    /* Letters and numbers split: "x", "12" ("1 2" merges), " 34". */
    EXPECT(t, "x12 34", 0, 120, 264, 32, 51, 52);
    /* Punctuation runs: "hi", "!!!", " ?". Contractions: "don", "'t". */
    EXPECT(t, "hi!!! ?", 0, 104, 105, 33, 33, 33, 32, 63);
    EXPECT(t, "don't", 0, 100, 111, 110, 39, 116);
    /* "'re" is one pre-token; "'x" is punctuation then a letter. */
    EXPECT(t, "we're'x", 0, 119, 101, 39, 114, 101, 39, 120);
    llm_tokenizer_free(t);
}

static void case_bpe_unicode(void)
{
    llm_tokenizer *t = bpe_load();
    /* é (C3 A9) is a letter, so "héllo" is one pre-token: h Ã © l l o ->
     * "l l", "ll o": h Ã © llo. ö is C3 B6. */
    EXPECT(t, "h\xc3\xa9llo w\xc3\xb6rld", 0, 104, 0xc3, 0xa9, 260, 32, 119, 0xc3, 0xb6, 114, 108, 100);
    /* 日本 (E6 97 A5 E6 9C AC): letters, one pre-token, no merges; each
     * byte is the id of its character. */
    EXPECT(t, "\xe6\x97\xa5\xe6\x9c\xac", 0, 0xe6, 0x97, 0xa5, 0xe6, 0x9c, 0xac);
    /* A no-break space (C2 A0) is whitespace. The run " NBSP" before "b"
     * gives up its last character ('\s+(?!\S)' backtracks), which cannot
     * prefix "b" (only a plain ' ' can), so: "a", " ", NBSP, "b". */
    EXPECT(t, "a \xc2\xa0" "b", 0, 97, 32, 0xc2, 0xa0, 98);
    static const char *texts[] = {"the cat's hello", "a   ", "h\xc3\xa9llo\n\n w\xc3\xb6rld 12!", "\xff\x01\x7f"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        expect_roundtrip(t, texts[i], strlen(texts[i]));
    char buf[16];
    size_t n;
    CHECK_INT_EQ(llm_token_to_bytes(t, 258, buf, sizeof buf, &n), 0);
    CHECK(n == 4 && memcmp(buf, " the", 4) == 0);
    CHECK_INT_EQ(llm_token_to_bytes(t, 0x97, buf, sizeof buf, &n), 0);
    CHECK(n == 1 && (unsigned char)buf[0] == 0x97);
    CHECK_INT_EQ(llm_token_to_bytes(t, 262, buf, sizeof buf, &n), 0);
    CHECK_INT_EQ(n, 0);
    llm_tokenizer_free(t);
}

/* The gpt2 pre-tokenizer's character classes, against the Unicode
 * Character Database's general categories of a few codepoints. */
static void case_unicode_classes(void)
{
    static const struct {
        uint32_t cp;
        int letter, number;
    } golden[] = {
        {'a', 1, 0},     {'Z', 1, 0},      {'7', 0, 1},     {'_', 0, 0},
        {0xaa, 1, 0},    /* ª Lo */        {0xd7, 0, 0},    /* × Sm */
        {0xb2, 0, 1},    /* ² No */        {0x301, 0, 0},   /* combining acute, Mn */
        {0x1230, 1, 0},  /* Ethiopic SA, Lo */ {0x663, 0, 1}, /* Arabic-Indic three, Nd */
        {0x216b, 0, 1},  /* Roman numeral twelve, Nl */ {0x3005, 1, 0}, /* 々 Lm */
        {0x1f600, 0, 0}, /* emoji, So */    {0x20000, 1, 0}, /* CJK Ext B, Lo */
        {0x10ffff, 0, 0},
    };
    for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++) {
        if (pm__unicode_is_letter(golden[i].cp) != golden[i].letter ||
            pm__unicode_is_number(golden[i].cp) != golden[i].number) {
            fprintf(stderr, "U+%04X\n", (unsigned)golden[i].cp);
            CHECK_INT_EQ(pm__unicode_is_letter(golden[i].cp), golden[i].letter);
            CHECK_INT_EQ(pm__unicode_is_number(golden[i].cp), golden[i].number);
        }
    }
    /* Text in these scripts: no merge applies to their bytes, so each byte
     * is its own id; the trailing "   " is one pre-token, where "Ġ Ġ"
     * merges: ĠĠ Ġ. */
    llm_tokenizer *t = bpe_load();
    EXPECT(t, "\xe1\x88\xb0\xe1\x88\x8b\xe1\x88\x9d \xd9\xa3\xe2\x85\xab   ", 0, 0xe1, 0x88, 0xb0, 0xe1,
           0x88, 0x8b, 0xe1, 0x88, 0x9d, 32, 0xd9, 0xa3, 0xe2, 0x85, 0xab, 263, 32);
    llm_tokenizer_free(t);
}

/* ---- pre-tokenizers (tokenizer.ggml.pre) -------------------------------- */

/* Splits text with pre-tokenizer `pre` and compares the chunks with want
 * (a NULL-terminated list). */
static void expect_chunks(enum llm_tok_pre pre, const char *text, size_t len, const char *const *want)
{
    const unsigned char *u = (const unsigned char *)text;
    unsigned char cut[256];
    REQUIRE(len < sizeof cut);
    memset(cut, 0xee, sizeof cut);
    pm__tok_split(pre, u, len, cut);
    CHECK_INT_EQ(cut[0], 1);
    CHECK_INT_EQ(cut[len], 1);
    size_t i = 0, k = 0;
    for (; i < len; k++) {
        size_t c = 1;
        while (cut[i + c] == 0)
            c++;
        if (cut[i + c] != 1) {
            fprintf(stderr, "text '%.*s': cut map holds %u\n", (int)len, text, cut[i + c]);
            CHECK(!"cut map value");
            return;
        }
        if (!want[k] || strlen(want[k]) != c || memcmp(want[k], text + i, c) != 0) {
            fprintf(stderr, "text '%.*s': chunk %zu is '%.*s', want '%s'\n", (int)len, text, k, (int)c, text + i,
                    want[k] ? want[k] : "(none)");
            CHECK(!"chunk boundary");
            return;
        }
        i += c;
    }
    if (want[k]) {
        fprintf(stderr, "text '%.*s': %zu chunks, want more ('%s' next)\n", (int)len, text, k, want[k]);
        CHECK(!"missing chunk");
    }
}

#define CHUNKS(pre, text, ...)                                          \
    do {                                                                \
        static const char *const want_[] = {__VA_ARGS__, NULL};         \
        expect_chunks((pre), (text), sizeof(text) - 1, want_);          \
    } while (0)

#define L3 LLM_TOK_PRE_LLAMA3
#define G2 LLM_TOK_PRE_GPT2

/* Llama 3's regex, alternative by alternative (tokenizer.h has it whole);
 * each expected split is worked from the regex text. */

/* (?i:'s|'t|'re|'ve|'m|'ll|'d) comes first, in any ASCII case. */
static void case_llama3_contractions(void)
{
    CHUNKS(L3, "DON'T", "DON", "'T");
    CHUNKS(L3, "I'M", "I", "'M");
    CHUNKS(L3, "we'Re", "we", "'Re");
    CHUNKS(L3, "they'VE'll'LL'd", "they", "'VE", "'ll", "'LL", "'d");
    CHUNKS(L3, "'S", "'S");
    CHUNKS(L3, "'Sx", "'S", "x");
    CHUNKS(L3, "'re's", "'re", "'s");
    /* Not contractions: then [^\r\n\p{L}\p{N}]?\p{L}+ glues the quote to
     * the letters after it ("'x", "'lx", "'r" at the end of the text). */
    CHUNKS(L3, "'x", "'x");
    CHUNKS(L3, "'lx", "'lx");
    CHUNKS(L3, "'r", "'r");
    /* A lone quote is punctuation; "''s": the quote run "''" matches
     * ' ?[^\s\p{L}\p{N}]+' before 's' is looked at. */
    CHUNKS(L3, "'", "'");
    CHUNKS(L3, "''s", "''", "s");
    /* U+2019 is no ASCII quote: it prefixes the letter instead. */
    CHUNKS(L3, "don\xe2\x80\x99t", "don", "\xe2\x80\x99t");
}

/* \p{N}{1,3}: numbers in runs of at most three, never prefixed. */
static void case_llama3_digits(void)
{
    CHUNKS(L3, "1", "1");
    CHUNKS(L3, "12", "12");
    CHUNKS(L3, "123", "123");
    CHUNKS(L3, "1234", "123", "4");
    CHUNKS(L3, "12345", "123", "45");
    CHUNKS(L3, "123456", "123", "456");
    CHUNKS(L3, "1234567", "123", "456", "7");
    CHUNKS(L3, "a1234b", "a", "123", "4", "b");
    CHUNKS(L3, "x2y", "x", "2", "y");
    /* The space before a number is a chunk of its own ('\s+'), and a
     * point between digits is punctuation. */
    CHUNKS(L3, " 12", " ", "12");
    CHUNKS(L3, "3.14", "3", ".", "14");
}

/* [^\r\n\p{L}\p{N}]?\p{L}+: one non-letter, non-number, non-line-break
 * character may prefix a letter run. */
static void case_llama3_letters(void)
{
    CHUNKS(L3, "$hello", "$hello");
    CHUNKS(L3, "\"hello", "\"hello");
    CHUNKS(L3, " hello", " hello");
    CHUNKS(L3, "\thello", "\thello");
    CHUNKS(L3, "a-b", "a", "-b");
    CHUNKS(L3, "Hello, world!", "Hello", ",", " world", "!");
    /* Of two spaces only the last prefixes the word. */
    CHUNKS(L3, "  Hello", " ", " Hello");
    /* "$$": the first '$' is followed by no letter, so the punctuation
     * alternative takes the whole run "$$" and the letters stand alone;
     * " $": ' ?' keeps the space for the punctuation run. */
    CHUNKS(L3, "$$hello", "$$", "hello");
    CHUNKS(L3, " $hello", " $", "hello");
    /* Line breaks and numbers never prefix. */
    CHUNKS(L3, "\nhello", "\n", "hello");
    CHUNKS(L3, "\r\nhello", "\r\n", "hello");
    CHUNKS(L3, "1hello", "1", "hello");
}

/* ' ?[^\s\p{L}\p{N}]+[\r\n]*': punctuation runs swallow the line breaks
 * right after them, but not a space before those. */
static void case_llama3_punct(void)
{
    CHUNKS(L3, "!!\n\nx", "!!\n\n", "x");
    CHUNKS(L3, " ?\r\n", " ?\r\n");
    CHUNKS(L3, "...\n\n\n", "...\n\n\n");
    CHUNKS(L3, "!! \nx", "!!", " \n", "x");
    CHUNKS(L3, "!\n \n", "!\n", " \n");
    CHUNKS(L3, "a!?b", "a", "!?", "b");
    CHUNKS(L3, "  !!", " ", " !!");
}

/* '\s*[\r\n]+' (up to the last line break of a whitespace run), then
 * '\s+(?!\S)' and '\s+'. */
static void case_llama3_space(void)
{
    CHUNKS(L3, "a  \n\n  b", "a", "  \n\n", " ", " b");
    CHUNKS(L3, "\n\nHi", "\n\n", "Hi");
    CHUNKS(L3, "a\n", "a", "\n");
    CHUNKS(L3, "\r\n\r\n", "\r\n\r\n");
    CHUNKS(L3, "a \n\tb", "a", " \n", "\tb");
    CHUNKS(L3, "a\n\n \n b", "a", "\n\n \n", " b");
    CHUNKS(L3, "x \n ", "x", " \n", " ");
    /* Trailing whitespace: all of it, at the end of the text. */
    CHUNKS(L3, "hi  ", "hi", "  ");
    CHUNKS(L3, "   ", "   ");
    /* Tabs. "a \t 1": the run " \t " gives up its last space (it is
     * followed by \S), and that space, alone before a digit, is '\s+'. */
    CHUNKS(L3, "a\t\tb", "a", "\t", "\tb");
    CHUNKS(L3, "a \t 1", "a", " \t", " ", "1");
    /* Non-ASCII whitespace: a no-break space prefixes a word like any
     * other space; U+3000 before a digit stands alone; at the end it
     * joins the trailing run. */
    CHUNKS(L3, "a \xc2\xa0" "b", "a", " ", "\xc2\xa0" "b");
    CHUNKS(L3, "\xe3\x80\x80" "1", "\xe3\x80\x80", "1");
    CHUNKS(L3, "hi \xe3\x80\x80", "hi", " \xe3\x80\x80");
}

/* Letters and numbers beyond ASCII, and invalid UTF-8 (each bad byte is a
 * character of no class, i.e. punctuation). */
static void case_llama3_unicode(void)
{
    CHUNKS(L3, "\xc3\xa9", "\xc3\xa9");
    CHUNKS(L3, "caf\xc3\xa9!", "caf\xc3\xa9", "!");
    CHUNKS(L3, " \xc3\xa9" "lan", " \xc3\xa9" "lan");
    CHUNKS(L3, "\xc2\xbf" "Qu\xc3\xa9?", "\xc2\xbf" "Qu\xc3\xa9", "?");     /* U+00BF ¿ prefixes */
    CHUNKS(L3, "\xe6\x97\xa5\xe6\x9c\xac", "\xe6\x97\xa5\xe6\x9c\xac");     /* 日本: letters */
    CHUNKS(L3, "e\xcc\x81", "e", "\xcc\x81");                             /* U+0301 is Mn */
    /* U+0663 ARABIC-INDIC DIGIT THREE (Nd), U+216B ROMAN NUMERAL TWELVE
     * (Nl): three characters (not bytes) per chunk. */
    CHUNKS(L3, "\xd9\xa3\xd9\xa3\xd9\xa3\xd9\xa3", "\xd9\xa3\xd9\xa3\xd9\xa3", "\xd9\xa3");
    CHUNKS(L3, "x\xd9\xa3", "x", "\xd9\xa3");
    CHUNKS(L3, "\xe2\x85\xab\xe2\x85\xab\xe2\x85\xab\xe2\x85\xab", "\xe2\x85\xab\xe2\x85\xab\xe2\x85\xab",
           "\xe2\x85\xab");
    CHUNKS(L3, "\xff" "abc", "\xff" "abc");
    CHUNKS(L3, "\xff\xfe!", "\xff\xfe!");
    CHUNKS(L3, "a\xe6\x97", "a", "\xe6\x97"); /* a truncated 3-byte sequence */
    CHUNKS(L3, "1\x80", "1", "\x80");
    CHUNKS(L3, " \xff\n", " \xff\n");
}

/* GPT-2's regex on the same kinds of text: what changes with the key. */
static void case_gpt2_chunks(void)
{
    CHUNKS(G2, "DON'T", "DON", "'", "T");
    CHUNKS(G2, "don't", "don", "'t");
    CHUNKS(G2, "12345", "12345");
    CHUNKS(G2, "\n\nHi", "\n", "\n", "Hi");
    CHUNKS(G2, "  Hello", " ", " Hello");
    CHUNKS(G2, "$hello", "$", "hello");
    CHUNKS(G2, "!!\n\nx", "!!", "\n", "\n", "x");
    CHUNKS(G2, "a  \n\n  b", "a", "  \n\n ", " b");
    CHUNKS(G2, "'x", "'", "x");
}

/* The gpt2 test vocabulary plus 265 ĊĊ, 266 'T, 267 123, 268 !Ċ, 269 xyz, with
 * the merges of bpe_vocab (ranks 0..9) and then 10 "Ċ Ċ", 11 "' T",
 * 12 "12 3", 13 "! Ċ". tokenizer.ggml.pre is g_pre (NULL: absent;
 * g_pre_u32: a number instead of a string). */
static const char *g_pre;
static int g_pre_u32;

static void pre_vocab(vocab *v)
{
    bpe_vocab(v);
    add(v, "\xc4\x8a\xc4\x8a", 0, LLM_TOKTYPE_NORMAL);
    add(v, "'T", 0, LLM_TOKTYPE_NORMAL);
    add(v, "123", 0, LLM_TOKTYPE_NORMAL);
    add(v, "!\xc4\x8a", 0, LLM_TOKTYPE_NORMAL);
    add(v, "xyz", 0, LLM_TOKTYPE_NORMAL); /* 269: no merge makes it */
}

static void pre_extra(llm_gguf_writer *w)
{
    vocab v;
    pre_vocab(&v);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_I32, v.types, v.n);
    llm_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 262);
    if (g_pre_u32)
        llm_gguf_writer_set_u32(w, "tokenizer.ggml.pre", 1);
    else if (g_pre)
        llm_gguf_writer_set_str(w, "tokenizer.ggml.pre", g_pre, strlen(g_pre));
}

static llm_tokenizer *pre_load(const char *pre, char *err, size_t errlen)
{
    static const char *const merges[] = {
        "\xc4\xa0 t", "h e", "\xc4\xa0t he", "l l", "ll o", "he ll", "\xc4\xa0 \xc4\xa0", "1 2", "nospace", "q z",
        "\xc4\x8a \xc4\x8a", "' T", "12 3", "! \xc4\x8a",
    };
    vocab v;
    pre_vocab(&v);
    g_pre = pre;
    return load(&v, "gpt2", merges, sizeof merges / sizeof merges[0], pre_extra, err, errlen);
}

/* "DON'T 12345\n\nthe!\n", end to end.
 * llama-bpe: "DON" 'T " " 123 45 "\n\n" the "!\n" -> D O N (68 79 78),
 *   ' T -> 'T (266), Ġ (32), 1 2 3 -> 12 (rank 7) -> 123 (rank 12) = 267,
 *   4 5 (52 53), Ċ Ċ -> ĊĊ (265), t h e -> t he (116 257; "Ġt he" needs
 *   Ġt), ! Ċ -> !Ċ (268).
 * gpt2: "DON" "'" "T" " 12345" "\n" "\n" "the" "!" "\n" -> 68 79 78, 39,
 *   84, Ġ 1 2 3 4 5 -> Ġ 123 4 5 (32 267 52 53), 10, 10, 116 257, 33, 10:
 *   the pairs "' T", "Ċ Ċ" and "! Ċ" straddle pre-tokens and never merge. */
#define PRE_TEXT "DON'T 12345\n\nthe!\n"
#define PRE_LLAMA3_IDS 68, 79, 78, 266, 32, 267, 52, 53, 265, 116, 257, 268
#define PRE_GPT2_IDS 68, 79, 78, 39, 84, 32, 267, 52, 53, 10, 10, 116, 257, 33, 10

static void case_bpe_pre_ids(void)
{
    static const char *const llama3[] = {"llama-bpe", "llama3", "smaug-bpe"};
    static const char *const gpt2[] = {NULL, "default", "gpt2", "gpt-2"};
    char err[256];
    for (size_t i = 0; i < sizeof llama3 / sizeof llama3[0]; i++) {
        llm_tokenizer *t = pre_load(llama3[i], err, sizeof err);
        if (!t)
            fprintf(stderr, "%s: %s\n", llama3[i], err);
        REQUIRE(t != NULL);
        EXPECT(t, PRE_TEXT, 0, PRE_LLAMA3_IDS);
        /* The other cases' texts still decode to themselves. */
        static const char *texts[] = {"a  \n\n  b", "DON'T 1234567 $x\xc2\xa0y", "\xff\xfe!\n\xd9\xa3 "};
        for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++)
            expect_roundtrip(t, texts[k], strlen(texts[k]));
        llm_tokenizer_free(t);
    }
    for (size_t i = 0; i < sizeof gpt2 / sizeof gpt2[0]; i++) {
        llm_tokenizer *t = pre_load(gpt2[i], err, sizeof err);
        if (!t)
            fprintf(stderr, "%s: %s\n", gpt2[i] ? gpt2[i] : "(absent)", err);
        REQUIRE(t != NULL);
        EXPECT(t, PRE_TEXT, 0, PRE_GPT2_IDS);
        llm_tokenizer_free(t);
    }
}

static void spm_pre_extra(llm_gguf_writer *w)
{
    vocab v;
    spm_vocab(&v, 1);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", LLM_GGUF_F32, v.scores, v.n);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_I32, v.types, v.n);
    llm_gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2", 5);
}

/* A gpt2 vocabulary with a pre-tokenizer we do not implement is refused
 * (names are exact: case matters); SentencePiece ignores the key. */
#define PRE_SUPPORTED                                                                                   \
    "(supported: default, gpt2, llama-bpe, qwen2, starcoder, falcon, deepseek-llm, deepseek-coder and " \
    "their aliases; docs/model-files.md)"
static void case_bpe_pre_refused(void)
{
    char err[256];
    CHECK(pre_load("deepseek-v3", err, sizeof err) == NULL);
    CHECK_INT_EQ(g_load_rc, LLM_EFORMAT);
    CHECK_STR_EQ(err, "tokenizer: unsupported tokenizer.ggml.pre 'deepseek-v3' " PRE_SUPPORTED);
    CHECK(pre_load("LLAMA-BPE", err, sizeof err) == NULL);
    CHECK_STR_EQ(err, "tokenizer: unsupported tokenizer.ggml.pre 'LLAMA-BPE' " PRE_SUPPORTED);
    CHECK(pre_load("", err, sizeof err) == NULL);
    CHECK_STR_EQ(err, "tokenizer: unsupported tokenizer.ggml.pre '' " PRE_SUPPORTED);
    g_pre_u32 = 1;
    CHECK(pre_load(NULL, err, sizeof err) == NULL);
    g_pre_u32 = 0;
    CHECK_INT_EQ(g_load_rc, LLM_EFORMAT);
    CHECK_STR_EQ(err, "tokenizer: tokenizer.ggml.pre is not a string");
    vocab v;
    spm_vocab(&v, 1);
    llm_tokenizer *t = load(&v, "llama", NULL, 0, spm_pre_extra, err, sizeof err);
    REQUIRE(t != NULL);
    EXPECT(t, "hello world", 0, 259, 271, 276);
    llm_tokenizer_free(t);
}

#define Q2 LLM_TOK_PRE_QWEN2
#define SC LLM_TOK_PRE_STARCODER

/* Qwen2's regex is Llama 3's with \p{N} for \p{N}{1,3}: every number
 * character is a chunk; the other alternatives split as Llama 3's do. */
static void case_qwen2_chunks(void)
{
    CHUNKS(Q2, "12345", "1", "2", "3", "4", "5");
    CHUNKS(Q2, " 12", " ", "1", "2");
    CHUNKS(Q2, "x2y", "x", "2", "y");
    CHUNKS(Q2, "DON'T", "DON", "'T");
    CHUNKS(Q2, "$hello", "$hello");
    CHUNKS(Q2, "a  \n\n  b", "a", "  \n\n", " ", " b");
    CHUNKS(Q2, "!!\n\nx", "!!\n\n", "x");
}

/* StarCoder's: '\p{N}' first, so each number character is a chunk, and
 * GPT-2's regex over each stretch between them, which ends there as the
 * text would: "x " keeps its space ('\s+(?!\S)' at the stretch's end)
 * where GPT-2 alone would glue it to the number (" 12"). */
static void case_starcoder_chunks(void)
{
    CHUNKS(SC, "12345", "1", "2", "3", "4", "5");
    CHUNKS(SC, "a123 b", "a", "1", "2", "3", " b");
    CHUNKS(SC, "x 12", "x", " ", "1", "2");
    CHUNKS(SC, "  12ab", "  ", "1", "2", "ab");
    CHUNKS(G2, "  12ab", " ", " 12", "ab");
    CHUNKS(SC, "don't", "don", "'t");
    CHUNKS(SC, "DON'T", "DON", "'", "T");
    CHUNKS(SC, "\n\nHi", "\n", "\n", "Hi");
    /* Other number characters (U+0663 ARABIC-INDIC THREE) split alike. */
    CHUNKS(SC, "a\xd9\xa3\xd9\xa3", "a", "\xd9\xa3", "\xd9\xa3");
}

/* PRE_TEXT "DON'T 12345\n\nthe!\n" under the other splits.
 * qwen2: "DON" "'T" " " 1 2 3 4 5 "\n\n" "the" "!\n" -> 68 79 78, 266,
 *   32, 49..53 (single digits never meet "1 2"), 265, 116 257, 268.
 * starcoder/refact: GPT-2's over "DON'T " -> "DON" "'" "T" " " (the
 *   stretch ends at '1', so its space stays alone), the digits, then
 *   GPT-2's over "\n\nthe!\n" -> 68 79 78, 39, 84, 32, 49..53, 10, 10,
 *   116 257, 33, 10.
 * mpt, gpt-neox, olmo, phi-2: GPT-2's (PRE_GPT2_IDS). */
static void case_bpe_pre_more(void)
{
    static const struct {
        const char *name;
        int32_t ids[20];
        size_t n;
    } cases[] = {
        {"qwen2", {68, 79, 78, 266, 32, 49, 50, 51, 52, 53, 265, 116, 257, 268}, 14},
        {"stablelm2", {68, 79, 78, 266, 32, 49, 50, 51, 52, 53, 265, 116, 257, 268}, 14},
        {"starcoder", {68, 79, 78, 39, 84, 32, 49, 50, 51, 52, 53, 10, 10, 116, 257, 33, 10}, 17},
        {"refact", {68, 79, 78, 39, 84, 32, 49, 50, 51, 52, 53, 10, 10, 116, 257, 33, 10}, 17},
        {"mpt", {PRE_GPT2_IDS}, 15},
        {"gpt-neox", {PRE_GPT2_IDS}, 15},
        {"olmo", {PRE_GPT2_IDS}, 15},
        {"phi-2", {PRE_GPT2_IDS}, 15},
        {"llama-v3", {PRE_LLAMA3_IDS}, 12},
        {"dbrx", {PRE_LLAMA3_IDS}, 12},
        /* llama.cpp's other names for the same splits. */
        {"falcon3", {PRE_LLAMA3_IDS}, 12},
        {"deepseek-r1-qwen", {68, 79, 78, 266, 32, 49, 50, 51, 52, 53, 265, 116, 257, 268}, 14},
        {"megrez", {68, 79, 78, 266, 32, 49, 50, 51, 52, 53, 265, 116, 257, 268}, 14},
        {"command-r", {68, 79, 78, 39, 84, 32, 49, 50, 51, 52, 53, 10, 10, 116, 257, 33, 10}, 17},
        {"smollm", {68, 79, 78, 39, 84, 32, 49, 50, 51, 52, 53, 10, 10, 116, 257, 33, 10}, 17},
        {"codeshell", {68, 79, 78, 39, 84, 32, 49, 50, 51, 52, 53, 10, 10, 116, 257, 33, 10}, 17},
        {"exaone", {68, 79, 78, 39, 84, 32, 49, 50, 51, 52, 53, 10, 10, 116, 257, 33, 10}, 17},
        {"minerva-7b", {68, 79, 78, 39, 84, 32, 49, 50, 51, 52, 53, 10, 10, 116, 257, 33, 10}, 17},
        {"jais", {PRE_GPT2_IDS}, 15},
        {"roberta-bpe", {PRE_GPT2_IDS}, 15},
        {"gigachat", {PRE_GPT2_IDS}, 15},
        {"jina-es", {PRE_GPT2_IDS}, 15},
        {"jina-de", {PRE_GPT2_IDS}, 15},
        {"jina-v1-en", {PRE_GPT2_IDS}, 15},
        {"jina-v2-es", {PRE_GPT2_IDS}, 15},
        {"jina-v2-de", {PRE_GPT2_IDS}, 15},
        {"jina-v2-code", {PRE_GPT2_IDS}, 15},
    };
    char err[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        llm_tokenizer *t = pre_load(cases[i].name, err, sizeof err);
        if (!t)
            fprintf(stderr, "%s: %s\n", cases[i].name, err);
        REQUIRE(t != NULL);
        fprintf(stderr, "pre %s\n", cases[i].name);
        expect_ids(t, PRE_TEXT, sizeof PRE_TEXT - 1, 0, cases[i].ids, cases[i].n);
        llm_tokenizer_free(t);
    }
}

/* ignore_merges (llama-bpe, llama3, llama-v3, falcon3): the pre-token "xyz" is
 * piece 269 though no merge builds it; under smaug-bpe and dbrx (the same
 * regex, without the flag) it stays x y z (120 121 122). A pre-token that
 * is no piece still merges: " the" -> Ġthe (258) either way. */
static void case_bpe_ignore_merges(void)
{
    static const char *const on[] = {"llama-bpe", "llama3", "llama-v3", "falcon3"};
    static const char *const off[] = {"smaug-bpe", "dbrx", "qwen2", "deepseek-r1-qwen"};
    char err[256];
    for (size_t i = 0; i < 4; i++) {
        llm_tokenizer *t = pre_load(on[i], err, sizeof err);
        REQUIRE(t != NULL);
        EXPECT(t, "xyz the", 0, 269, 258);
        llm_tokenizer_free(t);
        t = pre_load(off[i], err, sizeof err);
        REQUIRE(t != NULL);
        EXPECT(t, "xyz the", 0, 120, 121, 122, 258);
        llm_tokenizer_free(t);
    }
}

/* A vocabulary lacking a byte's character loads; that byte is dropped
 * from the ids (as llama.cpp drops it). Here byte 0xFF's "ÿ" (id 255) is
 * unused, so "a\xff b" -> "a", "\xff" (punctuation: nothing), " b" ->
 * 97, 32 98. */
static void missing_byte_extra(llm_gguf_writer *w)
{
    vocab v;
    bpe_vocab(&v);
    v.types[255] = LLM_TOKTYPE_UNUSED;
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_I32, v.types, v.n);
}

/* Pieces up to LLM_TOK_MAX_PIECE (4096) bytes load (MPT's vocabulary has
 * one of 1024); one byte more is refused. */
static char g_long[4098];

static void case_bpe_vocab_limits(void)
{
    vocab v;
    char err[256];
    bpe_vocab(&v);
    llm_tokenizer *t = load(&v, "gpt2", k_merges, sizeof k_merges / sizeof k_merges[0], missing_byte_extra, err,
                            sizeof err);
    if (!t)
        fprintf(stderr, "%s\n", err);
    REQUIRE(t != NULL);
    EXPECT(t, "a\xff b", 0, 97, 32, 98);
    llm_tokenizer_free(t);
    memset(g_long, 'a', 4096);
    g_long[4096] = '\0';
    bpe_vocab(&v);
    add(&v, g_long, 0, LLM_TOKTYPE_NORMAL);
    t = load(&v, "gpt2", NULL, 0, NULL, err, sizeof err);
    if (!t)
        fprintf(stderr, "%s\n", err);
    REQUIRE(t != NULL);
    char buf[LLM_TOK_MAX_PIECE];
    size_t n = 0;
    CHECK_INT_EQ(llm_token_to_bytes(t, 265, buf, sizeof buf, &n), 0);
    CHECK_INT_EQ(n, 4096);
    llm_tokenizer_free(t);
    g_long[4096] = 'a';
    g_long[4097] = '\0';
    CHECK(load(&v, "gpt2", NULL, 0, NULL, err, sizeof err) == NULL);
    CHECK_STR_EQ(err, "tokenizer: token 265 is 4097 bytes long (max 4096)");
}

/* ---- falcon, deepseek-llm, deepseek-coder: regexes in turn ------------- */

#define FA LLM_TOK_PRE_FALCON
#define DL LLM_TOK_PRE_DEEPSEEK_LLM
#define DC LLM_TOK_PRE_DEEPSEEK_CODER

/* Falcon: [\p{P}\$\+<=>\^~\|`]+ cuts punctuation runs out first, so no
 * contraction survives ("'" alone); GPT-2's regex splits each stretch
 * left (its end is a text end there); then [0-9][0-9][0-9] cuts
 * three-digit groups out of every chunk, leftmost first. */
static void case_falcon_chunks(void)
{
    CHUNKS(FA, "Hello, world!", "Hello", ",", " world", "!");
    CHUNKS(FA, "don't", "don", "'", "t");
    CHUNKS(FA, "x 12345 y", "x", " ", "123", "45", " y");
    CHUNKS(FA, "1234567", "123", "456", "7");
    CHUNKS(FA, "a+=b", "a", "+=", "b");
    CHUNKS(FA, "$$5", "$$", "5");
    CHUNKS(FA, "x`y~", "x", "`", "y", "~");
    CHUNKS(FA, "a  b", "a", " ", " b");
    CHUNKS(FA, "hi  ", "hi", "  ");
    /* U+00AB/U+00BB are \p{P} (Pi, Pf); U+00BD ½ is a number (No) and
     * takes GPT-2's ' ?\p{N}+'. */
    CHUNKS(FA, "\xc2\xabx\xc2\xbb", "\xc2\xab", "x", "\xc2\xbb");
    CHUNKS(FA, "4 \xc2\xbd", "4", " \xc2\xbd");
    /* "-" is \p{P}, so the first step has cut " " and "- " apart. */
    CHUNKS(FA, "a - b", "a", " ", "-", " b");
}

/* DeepSeek LLM: [\r\n]; \s?<cased letters>+; \s?[!-/:-~ and fullwidth
 * and CJK punctuation]+; \s+$; CJK runs; \p{N}+. */
static void case_deepseek_llm_chunks(void)
{
    CHUNKS(DL, "Hello, world!\n", "Hello", ",", " world", "!", "\n");
    CHUNKS(DL, "a  1234 b", "a", "  ", "1234", " b");
    CHUNKS(DL, "  \n\nx", "  ", "\n", "\n", "x");
    CHUNKS(DL, "x123456", "x", "123456");
    /* The letter class is cased letters only: Greek is in it; CJK and
     * Hangul are not (their own step); U+05D0 HEBREW ALEF is in no class
     * (below the CJK step's U+0800), so it is what the steps leave. */
    CHUNKS(DL, "\xce\xb1\xce\xb2 \xce\xb4", "\xce\xb1\xce\xb2", " \xce\xb4");
    CHUNKS(DL, "\xe6\x97\xa5\xe6\x9c\xac" "abc", "\xe6\x97\xa5\xe6\x9c\xac", "abc");
    CHUNKS(DL, " \xe6\x97\xa5", " ", "\xe6\x97\xa5");
    CHUNKS(DL, "\xed\x95\x9c\xea\xb5\xad!", "\xed\x95\x9c\xea\xb5\xad", "!"); /* Hangul */
    CHUNKS(DL, "x\xd7\x90y", "x", "\xd7\x90", "y");
    /* Fullwidth comma U+FF0C is in the punctuation class. */
    CHUNKS(DL, "a\xef\xbc\x8c" "b", "a", "\xef\xbc\x8c", "b");
    /* U+3000 is whitespace to the regex, so it is the \s? of " b" and in
     * no literal range. */
    CHUNKS(DL, "a\xe3\x80\x80" "b", "a", "\xe3\x80\x80" "b");
    /* \s+$: the whitespace ending a fragment that no later step splits
     * (U+00A9 is in no class). */
    CHUNKS(DL, "\xc2\xa9  ", "\xc2\xa9", "  ");
    CHUNKS(DL, "\xc2\xa9  x", "\xc2\xa9", " ", " x");
    /* ':'..'~' covers the ASCII letters, but the letters are cut first. */
    CHUNKS(DL, "x:y", "x", ":", "y");
}

/* DeepSeek Coder: [\r\n]; \s?\p{L}+; \s?\p{P}+ (not symbols such as
 * '=' or '$'); CJK runs; each \p{N} alone. */
static void case_deepseek_coder_chunks(void)
{
    CHUNKS(DC, "Hello, world!", "Hello", ",", " world", "!");
    CHUNKS(DC, "x = 42;", "x", " = ", "4", "2", ";");
    CHUNKS(DC, "a $b", "a", " $", "b");
    CHUNKS(DC, "  ...x", " ", " ...", "x");
    CHUNKS(DC, "\r\n", "\r", "\n");
    CHUNKS(DC, "12ab", "1", "2", "ab");
    /* CJK ideographs are \p{L}, so the letter step takes them first. */
    CHUNKS(DC, "\xe6\x97\xa5\xe6\x9c\xac abc", "\xe6\x97\xa5\xe6\x9c\xac", " abc");
    CHUNKS(DC, "x\xe2\x80\x94y", "x", "\xe2\x80\x94", "y"); /* U+2014 EM DASH, Pd */
    CHUNKS(DC, "\xc2\xbd" "3", "\xc2\xbd", "3");
}

/* The gpt2 test vocabulary plus 265 't, 266 Ġ1, 267 123, 268 Ġa, 269 ab,
 * 270 Ġab, 271 34, with the merges (rank order)
 *   0 Ġ t, 1 h e, 2 Ġt he, 3 l l, 4 ll o, 5 he ll, 6 Ġ Ġ, 7 1 2, 8 3 4,
 *   9 ' t, 10 Ġ 1, 11 12 3, 12 Ġ a, 13 a b, 14 Ġa b. */
static const char *g_split_pre;

static void split_extra(llm_gguf_writer *w)
{
    vocab v;
    bpe_vocab(&v);
    for (int i = 0; i < 7; i++)
        add(&v, "x", 0, LLM_TOKTYPE_NORMAL);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_I32, v.types, v.n);
    llm_gguf_writer_set_str(w, "tokenizer.ggml.pre", g_split_pre, strlen(g_split_pre));
}

static llm_tokenizer *split_load(const char *pre)
{
    static const char *const merges[] = {
        "\xc4\xa0 t", "h e", "\xc4\xa0t he", "l l", "ll o", "he ll", "\xc4\xa0 \xc4\xa0", "1 2",
        "3 4", "' t", "\xc4\xa0 1", "12 3", "\xc4\xa0 a", "a b", "\xc4\xa0" "a b",
    };
    vocab v;
    char err[256];
    bpe_vocab(&v);
    add(&v, "'t", 0, LLM_TOKTYPE_NORMAL);
    add(&v, "\xc4\xa0" "1", 0, LLM_TOKTYPE_NORMAL);
    add(&v, "123", 0, LLM_TOKTYPE_NORMAL);
    add(&v, "\xc4\xa0" "a", 0, LLM_TOKTYPE_NORMAL);
    add(&v, "ab", 0, LLM_TOKTYPE_NORMAL);
    add(&v, "\xc4\xa0" "ab", 0, LLM_TOKTYPE_NORMAL);
    add(&v, "34", 0, LLM_TOKTYPE_NORMAL);
    g_split_pre = pre;
    llm_tokenizer *t = load(&v, "gpt2", merges, sizeof merges / sizeof merges[0], split_extra, err, sizeof err);
    if (!t)
        fprintf(stderr, "%s: %s\n", pre, err);
    REQUIRE(t != NULL);
    return t;
}

/* "don't 1234 ab" end to end under each split.
 * gpt2: "don" "'t" " 1234" " ab": d o n (100 111 110); ' t -> 't (265);
 *   Ġ 1 2 3 4: "1 2" (7) first, then "3 4" (8) beats "12 3" (11): Ġ 12 34
 *   (32 264 271); Ġ a b: "Ġ a" (12), "Ġa b" (14): 270.
 * falcon: "don" "'" "t" " " "123" "4" " ab": 100 111 110, 39, 116, 32,
 *   1 2 3 -> 12 -> 123 (267), 52, 270.
 * deepseek-llm: "don" "'" "t" " " "1234" " ab": 100 111 110, 39, 116, 32,
 *   12 34 (264 271), 270.
 * deepseek-coder: "don" "'" "t" " " "1" "2" "3" "4" " ab": 100 111 110,
 *   39, 116, 32, 49 50 51 52, 270. */
static void case_split_ids(void)
{
    static const struct {
        const char *pre;
        int32_t ids[12];
        size_t n;
    } cases[] = {
        {"gpt2", {100, 111, 110, 265, 32, 264, 271, 270}, 8},
        {"falcon", {100, 111, 110, 39, 116, 32, 267, 52, 270}, 9},
        {"deepseek-llm", {100, 111, 110, 39, 116, 32, 264, 271, 270}, 9},
        {"deepseek-coder", {100, 111, 110, 39, 116, 32, 49, 50, 51, 52, 270}, 11},
    };
    static const char text[] = "don't 1234 ab";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        llm_tokenizer *t = split_load(cases[i].pre);
        fprintf(stderr, "pre %s\n", cases[i].pre);
        expect_ids(t, text, sizeof text - 1, 0, cases[i].ids, cases[i].n);
        static const char *texts[] = {"a  \n\n  b\xc2\xa9  ", "x = 42;\xe6\x97\xa5 \xe3\x80\x80\xff!"};
        for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++)
            expect_roundtrip(t, texts[k], strlen(texts[k]));
        llm_tokenizer_free(t);
    }
}

/* ---- user-defined pieces ------------------------------------------------ */

/* gpt2: user-defined 265 "<|x|>", 266 "|x", 267 "  ", 268 "x|" (raw
 * text, as an added token is stored). Longest first: "<|x|>" is cut out before "|x"
 * could match inside it; then "|x" and "  " in what is left. The
 * stretches "a" and "b" are encoded alone: 97, 265, 267, 98, 266. Without
 * the cut, "  b" would be GPT-2's " ", " b". */
static void user_extra(llm_gguf_writer *w)
{
    vocab v;
    bpe_vocab(&v);
    for (int i = 0; i < 4; i++)
        add(&v, "x", 0, LLM_TOKTYPE_USER_DEFINED);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_I32, v.types, v.n);
}

static void spm_user_extra(llm_gguf_writer *w)
{
    vocab v;
    spm_vocab(&v, 1);
    add(&v, "<u>", 0, LLM_TOKTYPE_USER_DEFINED);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", LLM_GGUF_F32, v.scores, v.n);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_I32, v.types, v.n);
}

static void case_user_pieces(void)
{
    vocab v;
    char err[256];
    bpe_vocab(&v);
    add(&v, "<|x|>", 0, LLM_TOKTYPE_USER_DEFINED);
    add(&v, "|x", 0, LLM_TOKTYPE_USER_DEFINED);
    add(&v, "  ", 0, LLM_TOKTYPE_USER_DEFINED);
    add(&v, "x|", 0, LLM_TOKTYPE_USER_DEFINED);
    llm_tokenizer *t = load(&v, "gpt2", k_merges, sizeof k_merges / sizeof k_merges[0], user_extra, err, sizeof err);
    if (!t)
        fprintf(stderr, "%s\n", err);
    REQUIRE(t != NULL);
    EXPECT(t, "a<|x|>  b|x", 0, 97, 265, 267, 98, 266);
    /* Two adjacent: "    " is "  " twice; "<|x|x|>": "<|x|>" is not
     * there, "|x" is, twice, leftmost first: "<", 266, 266, then the
     * punctuation chunk "|>" (124 62). */
    EXPECT(t, "    ", 0, 267, 267);
    EXPECT(t, "<|x|x|>", 0, 60, 266, 266, 124, 62);
    /* Equal lengths: the lower id goes first over the whole text, so in
     * "x|x" the "|x" at 1 (266) is taken before the "x|" at 0 (268)
     * could be (llama.cpp leaves this order unspecified). */
    EXPECT(t, "x|x", 0, 120, 266);
    EXPECT(t, "x|a", 0, 268, 97);
    expect_roundtrip(t, "a<|x|>  b|x", 11);
    llm_tokenizer_free(t);

    /* SentencePiece: the space prefix goes before the text and before each
     * stretch that follows a user-defined piece (llama.cpp's rule):
     * "▁hello" (259 271), "<u>" (282), "▁world" (276). */
    spm_vocab(&v, 1);
    add(&v, "<u>", 0, LLM_TOKTYPE_USER_DEFINED);
    t = load(&v, "llama", NULL, 0, spm_user_extra, err, sizeof err);
    REQUIRE(t != NULL);
    EXPECT(t, "hello<u>world", 1, 1, 259, 271, 282, 276);
    EXPECT(t, "<u>", 0, 282);
    llm_tokenizer_free(t);
}

/* ---- WordPiece (bert) ---------------------------------------------------- */

/* 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP] (control; unknown for [UNK]), then
 * 4 ▁hello, 5 ▁world, 6 ▁un, 7 aff, 8 able, 9 ▁!, 10 ▁",", 11 ▁fu, 12 hrer,
 * 13 ▁日, 14 ▁a, 15 b, 16 ▁ab, 17 ▁$, 18 ▁e. */
static void wpm_vocab(vocab *v)
{
    memset(v, 0, sizeof *v);
    add(v, "[PAD]", 0, LLM_TOKTYPE_CONTROL);
    add(v, "[UNK]", 0, LLM_TOKTYPE_UNKNOWN);
    add(v, "[CLS]", 0, LLM_TOKTYPE_CONTROL);
    add(v, "[SEP]", 0, LLM_TOKTYPE_CONTROL);
    static const char *const rest[] = {SP "hello", SP "world", SP "un", "aff", "able", SP "!", SP ",", SP "fu", "hrer",
                                       SP "\xe6\x97\xa5", SP "a", "b", SP "ab", SP "$", SP "e"};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
        add(v, rest[i], 0, LLM_TOKTYPE_NORMAL);
}

static void wpm_extra(llm_gguf_writer *w)
{
    vocab v;
    wpm_vocab(&v);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_I32, v.types, v.n);
    llm_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 1);
    llm_gguf_writer_set_u32(w, "tokenizer.ggml.cls_token_id", 2);
    llm_gguf_writer_set_u32(w, "tokenizer.ggml.seperator_token_id", 3);
    llm_gguf_writer_set_str(w, "tokenizer.ggml.pre", "jina-v2-en", 10); /* ignored */
}

static void case_wpm(void)
{
    vocab v;
    char err[256];
    wpm_vocab(&v);
    llm_tokenizer *t = load(&v, "bert", NULL, 0, wpm_extra, err, sizeof err);
    if (!t)
        fprintf(stderr, "%s\n", err);
    REQUIRE(t != NULL);
    CHECK_INT_EQ(llm_tokenizer_kind(t), LLM_TOK_WPM);
    CHECK_INT_EQ(llm_tokenizer_bos(t), 2);
    CHECK_INT_EQ(llm_tokenizer_add_bos(t), 1);
    size_t n;
    /* Lowercased; punctuation is a word of its own. */
    EXPECT(t, "Hello, WORLD!", 0, 4, 10, 5, 9);
    /* add_bos: [CLS] before, [SEP] after. */
    EXPECT(t, "hello", 1, 2, 4, 3);
    /* Longest piece first from each position: ▁un, aff, able. */
    EXPECT(t, "unaffable", 0, 6, 7, 8);
    /* "ab" is ▁ab, not ▁a b; "abx" has no piece for "x": the whole word
     * is [UNK]. */
    EXPECT(t, "ab abx a", 0, 16, 1, 14);
    /* NFD's first character drops the accent of a precomposed letter:
     * "Führer" is "fuhrer" (▁fu hrer), "É" is "e"; a separate combining
     * mark (U+0301) stays in the word, which then matches nothing. */
    EXPECT(t, "F\xc3\xbchrer \xc3\x89", 0, 11, 12, 18);
    EXPECT(t, "e\xcc\x81", 0, 1);
    /* An ASCII symbol and a CJK ideograph are words of their own; 本 has
     * no piece. Control characters (U+0001) and invalid bytes vanish;
     * tabs and U+3000 are whitespace. */
    EXPECT(t, "a$b", 0, 14, 17, 1);
    EXPECT(t, "\xe6\x97\xa5\xe6\x9c\xac", 0, 13, 1);
    EXPECT(t, "hel\x01lo\twor\xffld\xe3\x80\x80!", 0, 4, 5, 9);
    /* Control pieces never match text: "[CLS]" is "[", "cls", "]". */
    EXPECT(t, "[CLS]", 0, 1, 1, 1);
    int32_t out[4];
    CHECK_INT_EQ(llm_tokenize(t, "  \t", 3, 0, out, 4, &n), 0);
    CHECK_INT_EQ(n, 0);
    /* Decoding: "▁" is a space, a continuation piece is bare. */
    char buf[16];
    CHECK_INT_EQ(llm_token_to_bytes(t, 4, buf, sizeof buf, &n), 0);
    CHECK(n == 6 && memcmp(buf, " hello", 6) == 0);
    CHECK_INT_EQ(llm_token_to_bytes(t, 7, buf, sizeof buf, &n), 0);
    CHECK(n == 3 && memcmp(buf, "aff", 3) == 0);
    CHECK_INT_EQ(llm_token_to_bytes(t, 2, buf, sizeof buf, &n), 0);
    CHECK_INT_EQ(n, 0);
    llm_tokenizer_free(t);
}

/* ---- llama2.c tokenizer.bin -------------------------------------------- */

/* A llama2.c-style vocabulary: <unk>, "\n<s>\n", "\n</s>\n", 256 byte
 * pieces, then " ", "h", "e" (-5 each), "he" (-1), " he" (0) as ids
 * 259..263. Spaces are real spaces in this format. */
static void l2c_file(bb *b, uint32_t max_len)
{
    static const struct {
        const char *p;
        float s;
    } rest[] = {{" ", -5}, {"h", -5}, {"e", -5}, {"he", -1}, {" he", 0}};
    bb_u32(b, max_len);
    const char *special[3] = {"<unk>", "\n<s>\n", "\n</s>\n"};
    for (int i = 0; i < 3; i++) {
        bb_f32(b, 0);
        bb_u32(b, (uint32_t)strlen(special[i]));
        bb_raw(b, special[i], strlen(special[i]));
    }
    for (int i = 0; i < 256; i++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", i);
        bb_f32(b, 0);
        bb_u32(b, 6);
        bb_raw(b, s, 6);
    }
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++) {
        bb_f32(b, rest[i].s);
        bb_u32(b, (uint32_t)strlen(rest[i].p));
        bb_raw(b, rest[i].p, strlen(rest[i].p));
    }
}

static llm_tokenizer *l2c_load(const bb *b, uint32_t vocab_size, char *err, size_t errlen, int *rc)
{
    char path[512];
    tmp_path(path, sizeof path, "tokbin");
    REQUIRE(bb_save(b, path) == 0);
    llm_tokenizer *t = (llm_tokenizer *)1;
    *rc = llm_tokenizer_from_llama2c(path, vocab_size, &t, err, errlen);
    remove(path);
    if (*rc)
        CHECK(t == NULL);
    return *rc ? NULL : t;
}

static void case_llama2c(void)
{
    bb b = {0};
    char err[256];
    int rc;
    l2c_file(&b, 6);
    llm_tokenizer *t = l2c_load(&b, 264, err, sizeof err, &rc);
    if (!t)
        fprintf(stderr, "%s\n", err);
    REQUIRE(t != NULL);
    CHECK_INT_EQ(llm_tokenizer_vocab_size(t), 264);
    CHECK_INT_EQ(llm_tokenizer_bos(t), 1);
    CHECK_INT_EQ(llm_tokenizer_eos(t), 2);
    const char *s;
    size_t len;
    CHECK_INT_EQ(llm_tokenizer_piece(t, 263, &s, &len), 0);
    CHECK(len == 5 && memcmp(s, SP "he", 5) == 0); /* ' ' became ▁ */
    CHECK_NEAR(llm_tokenizer_score(t, 262), -1, 0);
    /* "he he" -> "▁he▁he" = ▁ h e ▁ h e. "he" (-1) at 1 and 4, leftmost
     * first; then "▁he" (0) outranks the other "he" (-1) and merges; then
     * that "he"; then its "▁he": [▁he][▁he]. */
    EXPECT(t, "he he", 1, 1, 263, 263);
    /* "\n" has no piece: byte token <0x0A> = 3 + 10. */
    EXPECT(t, "h\n", 0, 259, 260, 13);
    char buf[8];
    size_t n;
    CHECK_INT_EQ(llm_token_to_bytes(t, 263, buf, sizeof buf, &n), 0);
    CHECK(n == 3 && memcmp(buf, " he", 3) == 0);
    CHECK_INT_EQ(llm_token_to_bytes(t, 1, buf, sizeof buf, &n), 0);
    CHECK_INT_EQ(n, 0);
    llm_tokenizer_free(t);
    bb_free(&b);
}

static void case_llama2c_malformed(void)
{
    bb b = {0};
    char err[256];
    int rc;
    l2c_file(&b, 6);
    /* Cut inside record 5's bytes. */
    size_t full = b.n;
    b.n = 4 + 3 * 8 + 5 + 5 + 6 + 2 * 14 + 8 + 3;
    CHECK(l2c_load(&b, 264, err, sizeof err, &rc) == NULL);
    CHECK_INT_EQ(rc, LLM_EFORMAT);
    CHECK_STR_EQ(err, "tokenizer: tokenizer.bin is truncated at token 5 of 264");
    b.n = full;
    /* Fewer records than the model's vocabulary. */
    CHECK(l2c_load(&b, 300, err, sizeof err, &rc) == NULL);
    CHECK_STR_EQ(err, "tokenizer: tokenizer.bin is truncated at token 264 of 300");
    /* More records than the vocabulary: trailing bytes. */
    CHECK(l2c_load(&b, 263, err, sizeof err, &rc) == NULL);
    CHECK_STR_EQ(err, "tokenizer: 11 trailing bytes after 263 tokens");
    /* A record longer than max_token_length, and a negative length. */
    bb_free(&b);
    l2c_file(&b, 5);
    CHECK(l2c_load(&b, 264, err, sizeof err, &rc) == NULL);
    CHECK_STR_EQ(err, "tokenizer: token 2 has length 6 (max_token_length 5)");
    bb_free(&b);
    bb_u32(&b, 6);
    bb_f32(&b, 0);
    bb_u32(&b, UINT32_MAX);
    CHECK(l2c_load(&b, 1, err, sizeof err, &rc) == NULL);
    CHECK_STR_EQ(err, "tokenizer: token 0 has length -1 (max_token_length 6)");
    bb_free(&b);
    CHECK(l2c_load(&b, 1, err, sizeof err, &rc) == NULL);
    CHECK_STR_EQ(err, "tokenizer: tokenizer.bin is truncated (no header)");
    bb_u32(&b, 0);
    CHECK(l2c_load(&b, 1, err, sizeof err, &rc) == NULL);
    CHECK_STR_EQ(err, "tokenizer: max_token_length 0 is not 1..170");
    bb_free(&b);
    llm_tokenizer *t = (llm_tokenizer *)1;
    CHECK_INT_EQ(llm_tokenizer_from_llama2c("/nonexistent-pm/tokenizer.bin", 10, &t, err, sizeof err), LLM_EIO);
    CHECK(t == NULL);
    CHECK_STR_EQ(err, "tokenizer: cannot open '/nonexistent-pm/tokenizer.bin': No such file or directory");
}

/* ---- GGUF tokenizer metadata errors, equality --------------------------- */

static void bad_scores(llm_gguf_writer *w)
{
    float s[3] = {0};
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", LLM_GGUF_F32, s, 3);
}

static void bad_bos(llm_gguf_writer *w)
{
    llm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 282);
}

static void bad_types(llm_gguf_writer *w)
{
    vocab v;
    spm_vocab(&v, 1);
    v.types[5] = 9;
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_I32, v.types, v.n);
}

static void case_gguf_malformed(void)
{
    vocab v;
    char err[256];
    spm_vocab(&v, 1);
    CHECK(load(&v, NULL, NULL, 0, NULL, err, sizeof err) == NULL);
    CHECK_STR_EQ(err, "tokenizer: no string tokenizer.ggml.model in the metadata");
    CHECK(load(&v, "t5", NULL, 0, NULL, err, sizeof err) == NULL);
    CHECK_STR_EQ(err, "tokenizer: unsupported tokenizer model 't5' (need llama, gpt2 or bert)");
    CHECK(load(&v, "llama", NULL, 0, bad_scores, err, sizeof err) == NULL);
    CHECK_STR_EQ(err, "tokenizer: tokenizer.ggml.scores must hold 282 floats");
    CHECK(load(&v, "llama", NULL, 0, bad_bos, err, sizeof err) == NULL);
    CHECK_STR_EQ(err, "tokenizer: tokenizer.ggml.bos_token_id is not a token id below 282");
    CHECK(load(&v, "llama", NULL, 0, bad_types, err, sizeof err) == NULL);
    CHECK_STR_EQ(err, "tokenizer: tokenizer.ggml.token_type[5] is not a token type 0..6");
    /* gpt2 without pieces for most bytes loads; bytes without one are
     * dropped: "h h" -> "h", " h" -> h (260), Ġ (none) h (260). */
    llm_tokenizer *t = load(&v, "gpt2", NULL, 0, NULL, err, sizeof err);
    REQUIRE(t != NULL);
    EXPECT(t, "h h", 0, 260, 260);
    llm_tokenizer_free(t);
}

/* llama2.c's vocabulary written into GGUF (as pm-modelwriter does) is the
 * same vocabulary; a changed piece is not. */
static void case_equal(void)
{
    bb b = {0};
    char err[256];
    int rc;
    l2c_file(&b, 6);
    llm_tokenizer *a = l2c_load(&b, 264, err, sizeof err, &rc);
    REQUIRE(a != NULL);
    vocab v;
    memset(&v, 0, sizeof v);
    for (int32_t i = 0; i < 264; i++) {
        size_t len;
        REQUIRE(llm_tokenizer_piece(a, i, &v.pieces[i], &len) == 0);
        v.scores[i] = llm_tokenizer_score(a, i);
        v.types[i] = llm_tokenizer_token_type(a, i);
    }
    v.n = 264;
    llm_tokenizer *c = load(&v, "llama", NULL, 0, NULL, err, sizeof err);
    REQUIRE(c != NULL);
    CHECK_INT_EQ(llm_tokenizer_equal(a, c), 1);
    EXPECT(c, "he he", 1, 1, 263, 263);
    v.pieces[262] = "hx";
    llm_tokenizer *d = load(&v, "llama", NULL, 0, NULL, err, sizeof err);
    REQUIRE(d != NULL);
    CHECK_INT_EQ(llm_tokenizer_equal(a, d), 0);
    llm_tokenizer *e = bpe_load();
    CHECK_INT_EQ(llm_tokenizer_equal(a, e), 0);
    llm_tokenizer_free(a);
    llm_tokenizer_free(c);
    llm_tokenizer_free(d);
    llm_tokenizer_free(e);
    llm_tokenizer_free(NULL);
    bb_free(&b);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"spm_merges", case_spm_merges},       {"spm_unicode", case_spm_unicode},
        {"spm_options", case_spm_options},     {"spm_decode", case_spm_decode},
        {"bpe_merges", case_bpe_merges},       {"bpe_pretokenize", case_bpe_pretokenize},
        {"bpe_unicode", case_bpe_unicode},     {"unicode_classes", case_unicode_classes},
        {"llama3_contractions", case_llama3_contractions}, {"llama3_digits", case_llama3_digits},
        {"llama3_letters", case_llama3_letters}, {"llama3_punct", case_llama3_punct},
        {"llama3_space", case_llama3_space},   {"llama3_unicode", case_llama3_unicode},
        {"gpt2_chunks", case_gpt2_chunks},     {"bpe_pre_ids", case_bpe_pre_ids},
        {"bpe_pre_refused", case_bpe_pre_refused}, {"qwen2_chunks", case_qwen2_chunks},
        {"starcoder_chunks", case_starcoder_chunks}, {"bpe_pre_more", case_bpe_pre_more},
        {"bpe_ignore_merges", case_bpe_ignore_merges}, {"bpe_vocab_limits", case_bpe_vocab_limits},
        {"falcon_chunks", case_falcon_chunks}, {"deepseek_llm_chunks", case_deepseek_llm_chunks},
        {"deepseek_coder_chunks", case_deepseek_coder_chunks}, {"split_ids", case_split_ids},
        {"user_pieces", case_user_pieces}, {"wpm", case_wpm},
        {"llama2c", case_llama2c},
        {"llama2c_malformed", case_llama2c_malformed}, {"gguf_malformed", case_gguf_malformed},
        {"equal", case_equal},
    };
    REQUIRE(argc == 2);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(argv[1], cases[i].name) == 0) {
            cases[i].fn();
            return pm_check_result();
        }
    }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
