/* test_tokenizer_special.c — special-token spellings in text
 * (tokenizer_special.h).
 *
 * A hand-built SentencePiece vocabulary gives ids worked out by hand:
 *   0 <unk> (unknown), 1 <s>, 2 </s> (control), 3 ▁ -1, 4 h, 5 e, 6 l,
 *   7 o (-2 each), 8 he -3, 9 ll -4, 10 <|end|> (control), 11 <|e
 *   (user-defined), 12 <|end|>x (unused: never special).
 * "hello" alone is ▁ he ll o = 3 8 9 7 (see test_tokenize_tool.c).
 *
 * Two llama.cpp vocabularies (tests/../llama.cpp models, when present)
 * check real ones against ids from llama.cpp's llama-tokenize (its
 * default, parse_special on); absent files skip with 77.
 *
 * Usage: test_tokenizer_special CASE
 */
#include <stdint.h>

#include "bytes.h"
#include "gguf.h"
#include "pm_check.h"
#include "tokenizer_special.h"

#ifndef PM_LLAMACPP_MODELS
#define PM_LLAMACPP_MODELS "/tmp/llama.cpp/models"
#endif

static llm_tokenizer *hand_vocab(void)
{
    static const char *pieces[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "h", "e", "l",
                                   "o",     "he",  "ll",   "<|end|>",      "<|e", "<|end|>x"};
    static const float scores[] = {0, 0, 0, -1, -2, -2, -2, -2, -3, -4, 0, 0, 0};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 4, 5};
    enum { N = 13 };
    llm_gguf_writer *w;
    char err[256], path[256];
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    llm_gguf_writer_set_str(w, "general.architecture", "llama", 5);
    llm_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", 5);
    llm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", pieces, NULL, N);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", LLM_GGUF_F32, scores, N);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_I32, types, N);
    llm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    llm_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    tmp_path(path, sizeof path, "special");
    REQUIRE(llm_gguf_writer_write(w, path, err, sizeof err) == 0);
    llm_gguf_writer_free(w);
    llm_gguf *g;
    llm_tokenizer *t = NULL;
    REQUIRE(llm_gguf_open(path, &g, err, sizeof err) == 0);
    REQUIRE(llm_tokenizer_from_gguf(g, &t, err, sizeof err) == 0);
    llm_gguf_close(g);
    remove(path);
    return t;
}

/* Tokenizes text and compares with the n ids in want. */
static void expect_ids(const llm_tokenizer *t, const char *text, int add_bos, const int32_t *want, size_t n)
{
    int32_t got[256];
    size_t n_got = 0;
    CHECK_INT_EQ(llm_tokenize_special(t, text, strlen(text), add_bos, got, 256, &n_got), 0);
    CHECK_INT_EQ(n_got, n);
    for (size_t i = 0; i < n && i < n_got; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "  text '%s': id %zu is %d, want %d\n", text, i, (int)got[i], (int)want[i]);
            CHECK(got[i] == want[i]);
            break;
        }
}

#define IDS(...) (const int32_t[]){__VA_ARGS__}, sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)

static int case_hand(void)
{
    llm_tokenizer *t = hand_vocab();
    /* Each stretch of plain text gets its own prefix space. */
    expect_ids(t, "<s>hello<|end|>he", 0, IDS(1, 3, 8, 9, 7, 10, 3, 8));
    /* BOS added in front of a written one: the caller's business. */
    expect_ids(t, "<s>he", 1, IDS(1, 1, 3, 8));
    /* Longest first: <|end|> claims its bytes before <|e sees them. */
    expect_ids(t, "<|end|><|e", 0, IDS(10, 11));
    /* Unknown type is special too; unused is not ("<|end|>x" is <|end|>
     * then plain "x", which has no piece: <unk>). */
    expect_ids(t, "<unk></s>", 0, IDS(0, 2));
    expect_ids(t, "<|end|>x", 0, IDS(10, 3, 0));
    /* No special text: as llm_tokenize. */
    expect_ids(t, "hello", 1, IDS(1, 3, 8, 9, 7));
    /* Empty text: BOS alone or nothing. */
    size_t n = 99;
    int32_t ids[4];
    CHECK_INT_EQ(llm_tokenize_special(t, "", 0, 1, ids, 4, &n), 0);
    CHECK_INT_EQ(n, 1);
    CHECK_INT_EQ(ids[0], 1);
    CHECK_INT_EQ(llm_tokenize_special(t, "", 0, 0, ids, 4, &n), 0);
    CHECK_INT_EQ(n, 0);
    /* Too small a buffer: the count needed, the first ids written. */
    CHECK_INT_EQ(llm_tokenize_special(t, "<s>hello<|end|>", 15, 0, ids, 2, &n), LLM_ESPACE);
    CHECK_INT_EQ(n, 6);
    CHECK_INT_EQ(ids[0], 1);
    CHECK_INT_EQ(ids[1], 3);
    CHECK_INT_EQ(llm_tokenize_special(t, "x", 1, 0, NULL, 0, &n), LLM_ESPACE);
    CHECK_INT_EQ(n, 2);
    CHECK_INT_EQ(llm_tokenize_special(NULL, "x", 1, 0, ids, 4, &n), LLM_EINVAL);
    llm_tokenizer_free(t);
    return pm_check_result();
}

static int case_find(void)
{
    llm_tokenizer *t = hand_vocab();
    CHECK_INT_EQ(llm_tokenizer_find_special(t, "<s>", 3), 1);
    CHECK_INT_EQ(llm_tokenizer_find_special(t, "</s>", 4), 2);
    CHECK_INT_EQ(llm_tokenizer_find_special(t, "<unk>", 5), 0);
    CHECK_INT_EQ(llm_tokenizer_find_special(t, "<|e", 3), 11);
    CHECK_INT_EQ(llm_tokenizer_find_special(t, "he", 2), -1);       /* normal */
    CHECK_INT_EQ(llm_tokenizer_find_special(t, "<|end|>x", 8), -1); /* unused */
    CHECK_INT_EQ(llm_tokenizer_find_special(t, "<s", 2), -1);
    CHECK_INT_EQ(llm_tokenizer_find_special(t, "<s>", 0), -1);
    llm_tokenizer_free(t);
    return pm_check_result();
}

static llm_tokenizer *llamacpp_vocab(const char *name)
{
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/%s", PM_LLAMACPP_MODELS, name);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "skip: %s is absent\n", path);
        exit(77);
    }
    llm_gguf *g;
    llm_tokenizer *t = NULL;
    REQUIRE(llm_gguf_open(path, &g, err, sizeof err) == 0);
    REQUIRE(llm_tokenizer_from_gguf(g, &t, err, sizeof err) == 0);
    llm_gguf_close(g);
    return t;
}

/* Llama 2's SentencePiece vocabulary and a Mistral v1 prompt; llama.cpp
 * also prefixes a space after each special token (29871 ▁, then 518 ▁[). */
static int case_llamacpp_spm(void)
{
    llm_tokenizer *t = llamacpp_vocab("ggml-vocab-llama-spm.gguf");
    expect_ids(t, "<s> [INST] Hi [/INST] Hello</s> [INST] Why? [/INST]", 0,
               IDS(1, 29871, 518, 25580, 29962, 6324, 518, 29914, 25580, 29962, 15043, 2, 29871, 518, 25580, 29962,
                   3750, 29973, 518, 29914, 25580, 29962));
    CHECK_INT_EQ(llm_tokenizer_find_special(t, "</s>", 4), 2);
    llm_tokenizer_free(t);
    return pm_check_result();
}

/* Phi-3's vocabulary. llama.cpp (like Hugging Face) strips the
 * whitespace after Phi-3's role and end tokens; the server does that on
 * the text first (pms_chat_tokenizer_text), so the stripped text must
 * give the ids llama-tokenize gives for the unstripped
 * "<|system|>\nBe  brief. <|end|>\n<|user|>\n Hi\n\n<|end|>\n<|assistant|>\n". */
static int case_llamacpp_phi3(void)
{
    llm_tokenizer *t = llamacpp_vocab("ggml-vocab-phi-3.gguf");
    expect_ids(t, "<|system|>Be  brief. <|end|><|user|>Hi\n\n<|end|><|assistant|>", 0,
               IDS(32006, 1522, 29871, 11473, 29889, 29871, 32007, 32010, 6324, 13, 13, 32007, 32001));
    llm_tokenizer_free(t);
    return pm_check_result();
}

/* GPT-2's byte-level vocabulary: <|endoftext|> is 50256. */
static int case_llamacpp_bpe(void)
{
    llm_tokenizer *t = llamacpp_vocab("ggml-vocab-gpt-2.gguf");
    expect_ids(t, "Hi<|endoftext|> there<|endoftext|><|endoftext|>!", 0, IDS(17250, 50256, 612, 50256, 50256, 0));
    CHECK_INT_EQ(llm_tokenizer_find_special(t, "<|endoftext|>", 13), 50256);
    llm_tokenizer_free(t);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"hand", case_hand},
        {"find", case_find},
        {"llamacpp_spm", case_llamacpp_spm},
        {"llamacpp_bpe", case_llamacpp_bpe},
        {"llamacpp_phi3", case_llamacpp_phi3},
    };
    if (argc != 2) {
        fprintf(stderr, "usage: test_tokenizer_special CASE\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
