/* test_tokenize_tool.c — the pm-tokenize tool, run as a child process on a
 * vocabulary-only GGUF (tokenizer metadata, no tensors) written here.
 *
 * Vocabulary (SentencePiece): 0 <unk>, 1 <s>, 2 </s>, 3 ▁ -1, 4 h -2,
 * 5 e -2, 6 l -2, 7 o -2, 8 he -3, 9 ll -4; no byte tokens.
 * "hello" -> "▁hello" -> ▁ h e l l o; the best pair is "he" (-3), then
 * "ll" (-4); "▁he", "hell", "llo" are no pieces: ▁ he ll o = 3 8 9 7.
 *
 * Usage: test_tokenize_tool CASE
 */
#include <stdarg.h>
#include <stdint.h>

#include "bytes.h"
#include "gguf.h"
#include "pm_check.h"
#include "pm_child.h"

#ifndef PM_TOKENIZE
#error "PM_TOKENIZE must name the tool's path"
#endif

static pm_child_result g_res;
static char g_vocab[512];

static int tool(const char *first, ...)
{
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)PM_TOKENIZE;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && n < 15; a = va_arg(ap, const char *))
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    REQUIRE(pm_child_exec(argv, NULL, 60000, &g_res) == 0);
    return g_res.exited ? g_res.exit_code : -1;
}

/* Writes the vocabulary above (with_tokenizer 0: metadata without any
 * tokenizer.ggml.* key) to g_vocab. */
static void write_vocab(int with_tokenizer)
{
    static const char *pieces[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "h", "e", "l", "o", "he", "ll"};
    static const float scores[] = {0, 0, 0, -1, -2, -2, -2, -2, -3, -4};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1};
    llm_gguf_writer *w;
    char err[256];
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    llm_gguf_writer_set_str(w, "general.architecture", "llama", 5);
    if (with_tokenizer) {
        llm_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", 5);
        llm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", pieces, NULL, 10);
        llm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", LLM_GGUF_F32, scores, 10);
        llm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_I32, types, 10);
        llm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
        llm_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    }
    tmp_path(g_vocab, sizeof g_vocab, "tokvocab");
    REQUIRE(llm_gguf_writer_write(w, g_vocab, err, sizeof err) == 0);
    llm_gguf_writer_free(w);
}

/* BOS by the vocabulary's default (SentencePiece: on). */
static void case_ids(void)
{
    write_vocab(1);
    CHECK_INT_EQ(tool("-m", g_vocab, "-p", "hello", NULL), 0);
    CHECK_STR_EQ(g_res.out, "1 3 8 9 7\n");
    /* "he he" -> ▁ h e ▁ h e: both "he" merge, "▁he" is no piece. */
    CHECK_INT_EQ(tool("-m", g_vocab, "-p", "he he", NULL), 0);
    CHECK_STR_EQ(g_res.out, "1 3 8 3 8\n");
    /* The empty text is BOS alone. */
    CHECK_INT_EQ(tool("-m", g_vocab, "-p", "", NULL), 0);
    CHECK_STR_EQ(g_res.out, "1\n");
    remove(g_vocab);
}

static void case_no_bos(void)
{
    write_vocab(1);
    CHECK_INT_EQ(tool("-m", g_vocab, "--no-bos", "-p", "hello", NULL), 0);
    CHECK_STR_EQ(g_res.out, "3 8 9 7\n");
    CHECK_INT_EQ(tool("--no-bos", "-m", g_vocab, "-p", "", NULL), 0);
    CHECK_STR_EQ(g_res.out, "\n");
    remove(g_vocab);
}

/* -f reads bytes as they are: "he\n" -> ▁ he, then '\n' has no piece and
 * the vocabulary no byte tokens: <unk> (0). */
static void case_file(void)
{
    write_vocab(1);
    char txt[600];
    snprintf(txt, sizeof txt, "%s.txt", g_vocab);
    FILE *f = fopen(txt, "wb");
    REQUIRE(f != NULL);
    fputs("he\n", f);
    REQUIRE(fclose(f) == 0);
    CHECK_INT_EQ(tool("-m", g_vocab, "-f", txt, NULL), 0);
    CHECK_STR_EQ(g_res.out, "1 3 8 0\n");
    remove(txt);
    CHECK_INT_EQ(tool("-m", g_vocab, "-f", txt, NULL), 1);
    CHECK(strncmp(g_res.err, "pm-tokenize: ", 13) == 0);
    remove(g_vocab);
}

static void case_usage(void)
{
    CHECK_INT_EQ(tool("-h", NULL), 0);
    CHECK(strncmp(g_res.out, "usage: pm-tokenize -m MODEL.gguf", 32) == 0);
    CHECK_INT_EQ(tool(NULL), 2);
    CHECK_INT_EQ(tool("-m", "x.gguf", NULL), 2);
    CHECK_INT_EQ(tool("-m", "x.gguf", "-p", "a", "-f", "b", NULL), 2);
    CHECK_INT_EQ(tool("-m", "x.gguf", "-p", NULL), 2);
    CHECK_INT_EQ(tool("--bogus", NULL), 2);
    CHECK_STR_EQ(g_res.err, "pm-tokenize: unknown or incomplete option '--bogus'\n"
                            "usage: pm-tokenize -m MODEL.gguf [--no-bos] [-p TEXT | -f FILE]\n"
                            "  -m MODEL   GGUF file with tokenizer.ggml.* metadata (tensors optional)\n"
                            "  -p TEXT    the text to tokenize\n"
                            "  -f FILE    read the text from FILE (bytes as they are)\n"
                            "  --no-bos   do not prepend BOS even when the vocabulary asks for it\n");
}

/* A missing file and a GGUF without a vocabulary fail with one line. */
static void case_errors(void)
{
    CHECK_INT_EQ(tool("-m", "/nonexistent/x.gguf", "-p", "a", NULL), 1);
    CHECK(strncmp(g_res.err, "pm-tokenize: gguf: ", 19) == 0);
    write_vocab(0);
    CHECK_INT_EQ(tool("-m", g_vocab, "-p", "a", NULL), 1);
    CHECK(strncmp(g_res.err, "pm-tokenize: tokenizer: ", 24) == 0);
    CHECK(strchr(g_res.err, '\n') == g_res.err + strlen(g_res.err) - 1);
    remove(g_vocab);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {{"ids", case_ids}, {"no_bos", case_no_bos}, {"file", case_file},
                 {"usage", case_usage}, {"errors", case_errors}};
    if (argc != 2) {
        fprintf(stderr, "usage: test_tokenize_tool CASE\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(argv[1], cases[i].name) == 0) {
            cases[i].fn();
            return pm_check_result();
        }
    }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
