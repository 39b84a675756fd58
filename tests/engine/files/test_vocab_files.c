/* test_vocab_files.c — our tokenizers on llama.cpp's vocabulary test
 * files, every case required to match.
 *
 * llama.cpp ships vocabulary-only GGUFs (models/ggml-vocab-NAME.gguf) with
 * NAME.gguf.inp (texts separated by "\n__ggml_vocab_test__\n") and
 * NAME.gguf.out (one line of expected ids per text, made with the Hugging
 * Face tokenizer of the model; no BOS, special-token text as plain text).
 * The folder is $PM_LLAMA_VOCAB_DIR, else /tmp/llama.cpp/models; when the
 * files are absent the case is skipped (77).
 *
 * Two vocabularies come without expectations of their own. gpt-neox's
 * (no tokenizer.ggml.pre: GPT-2's split here) is MPT's vocabulary, so it
 * is checked with MPT's expectations. baichuan's (SentencePiece) is
 * checked on one text whose ids llama.cpp's llama-tokenize printed
 * (--no-bos --no-parse-special).
 *
 * Usage: test_vocab_files NAME
 */
#include <stdint.h>
#include <stdlib.h>

#include "gguf.h"
#include "pm_check.h"
#include "tokenizer.h"

#define SEP "\n__ggml_vocab_test__\n"

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *p = malloc(cap + 1);
    REQUIRE(p != NULL);
    for (;;) {
        n += fread(p + n, 1, cap - n, f);
        if (n < cap)
            break;
        cap *= 2;
        p = realloc(p, cap + 1);
        REQUIRE(p != NULL);
    }
    fclose(f);
    p[n] = '\0';
    *len = n;
    return p;
}

static llm_tokenizer *open_vocab(const char *dir, const char *name)
{
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", dir, name);
    llm_gguf *g;
    if (llm_gguf_open(path, &g, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    llm_tokenizer *t = NULL;
    if (llm_tokenizer_from_gguf(g, &t, err, sizeof err) != 0)
        fprintf(stderr, "%s: %s\n", path, err);
    llm_gguf_close(g);
    return t;
}

/* Parses one line of ids; returns the count. */
static size_t parse_ids(const char *line, const char *end, int32_t *ids, size_t cap)
{
    size_t n = 0;
    while (line < end) {
        char *e;
        long v = strtol(line, &e, 10);
        if (e == line) {
            line++;
            continue;
        }
        REQUIRE(n < cap);
        ids[n++] = (int32_t)v;
        line = e;
    }
    return n;
}

static int32_t g_want[4096], g_got[4096];

static void check_case(const llm_tokenizer *t, const char *name, size_t k, const char *text, size_t len,
                       const int32_t *want, size_t n_want)
{
    size_t n = 0;
    int rc = llm_tokenize(t, text, len, 0, g_got, sizeof g_got / sizeof g_got[0], &n);
    int same = rc == 0 && n == n_want && memcmp(g_got, want, n * sizeof *want) == 0;
    if (same)
        return;
    fprintf(stderr, "%s case %zu '%.*s': rc %d\n  got ", name, k, (int)(len > 60 ? 60 : len), text, rc);
    for (size_t i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", g_got[i]);
    fprintf(stderr, "\n  want");
    for (size_t i = 0; i < n_want && i < 40; i++)
        fprintf(stderr, " %d", want[i]);
    fprintf(stderr, "\n");
    CHECK(!"ids differ from the expectations");
}

/* Every case of expectations `exp` on vocabulary `name`. */
static void run_files(const char *dir, const char *name, const char *exp)
{
    char path[1024];
    size_t in_len, out_len;
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf.inp", dir, exp);
    char *inp = read_all(path, &in_len);
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf.out", dir, exp);
    char *out = read_all(path, &out_len);
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", dir, name);
    FILE *f = fopen(path, "rb");
    if (!inp || !out || !f) {
        fprintf(stderr, "skipped: %s or its .inp/.out is absent (PM_LLAMA_VOCAB_DIR)\n", path);
        exit(77);
    }
    fclose(f);
    llm_tokenizer *t = open_vocab(dir, name);
    REQUIRE(t != NULL);
    const char *p = inp, *pend = inp + in_len, *o = out, *oend = out + out_len;
    size_t k = 0;
    while (p < pend) {
        const char *next = strstr(p, SEP);
        const char *tend = next ? next : pend;
        const char *line_end = memchr(o, '\n', (size_t)(oend - o));
        if (!line_end)
            line_end = oend;
        REQUIRE(o < oend);
        size_t n_want = parse_ids(o, line_end, g_want, sizeof g_want / sizeof g_want[0]);
        check_case(t, name, k, p, (size_t)(tend - p), g_want, n_want);
        k++;
        o = line_end + 1;
        p = next ? next + strlen(SEP) : pend;
    }
    fprintf(stderr, "%s: %zu cases (expectations of %s)\n", name, k, exp);
    CHECK(k >= 40); /* llama.cpp's files hold 46 */
    llm_tokenizer_free(t);
    free(inp);
    free(out);
}

/* baichuan: one text, ids from llama.cpp's llama-tokenize. */
static void run_baichuan(const char *dir)
{
    static const char text[] = "Hello world, it's 12345 tokens  here!\n\n  \xc3\xa9\xc3\x9f "
                               "\xe6\x97\xa5\xe6\x9c\xac\t<|endoftext|> x";
    static const int32_t want[] = {24568, 1275,  31125, 747,   31155, 31114, 31106, 53,    54,    55,   56,
                                   57,    29530, 31106, 1459,  80,    5,     5,     31106, 8770,  33114, 31106,
                                   6063,  6,     31260, 31282, 823,   1936,  3856,  31282, 31219, 2759};
    char path[1024];
    snprintf(path, sizeof path, "%s/ggml-vocab-baichuan.gguf", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "skipped: %s is absent (PM_LLAMA_VOCAB_DIR)\n", path);
        exit(77);
    }
    fclose(f);
    llm_tokenizer *t = open_vocab(dir, "baichuan");
    REQUIRE(t != NULL);
    check_case(t, "baichuan", 0, text, sizeof text - 1, want, sizeof want / sizeof want[0]);
    llm_tokenizer_free(t);
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 2);
    const char *dir = getenv("PM_LLAMA_VOCAB_DIR");
    if (!dir || !*dir)
        dir = "/tmp/llama.cpp/models";
    if (strcmp(argv[1], "baichuan") == 0)
        run_baichuan(dir);
    else if (strcmp(argv[1], "gpt-neox") == 0)
        run_files(dir, "gpt-neox", "mpt");
    else
        run_files(dir, argv[1], argv[1]);
    return pm_check_result();
}
