/* pm-tokenize — print the token ids of a text under a model's vocabulary.
 *
 *   pm-tokenize -m MODEL.gguf [--no-bos] [-p TEXT | -f FILE]
 *
 * Only the GGUF's tokenizer.ggml.* metadata is read: a vocabulary-only file
 * (no tensors, as llama.cpp ships for its tokenizer tests) works, and so
 * does a whole model without its weights being touched. The ids go to
 * stdout on one line, separated by spaces (llama-tokenize --ids, without
 * the brackets). BOS is prepended when the vocabulary asks for it
 * (tokenizer.ggml.add_bos_token; SentencePiece's default is on), unless
 * --no-bos (WordPiece: [CLS] first and [SEP] last). Control-token text such
 * as "<|begin_of_text|>" is tokenized as plain text; user-defined pieces
 * are matched whole, as llama.cpp does. Exit status: 0 ok, 1 failure, 2
 * usage error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

#define PROG "pm-tokenize"
#define MAX_TEXT (64u << 20) /* a text file larger than this is refused */

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROG " -m MODEL.gguf [--no-bos] [-p TEXT | -f FILE]\n"
               "  -m MODEL   GGUF file with tokenizer.ggml.* metadata (tensors optional)\n"
               "  -p TEXT    the text to tokenize\n"
               "  -f FILE    read the text from FILE (bytes as they are)\n"
               "  --no-bos   do not prepend BOS even when the vocabulary asks for it\n");
}

/* Reads all of path into a malloc'ed buffer; 0, or 1 with a message. */
static int read_file(const char *path, char **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
        return 1;
    }
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
        if (n == cap) {
            char *nb = cap >= MAX_TEXT ? NULL : realloc(b, cap * 2);
            if (!nb) {
                fprintf(stderr, PROG ": %s: larger than %u MiB or out of memory\n", path, MAX_TEXT >> 20);
                free(b);
                fclose(f);
                return 1;
            }
            b = nb;
            cap *= 2;
        }
    }
    int bad = !b || ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, PROG ": %s: read failed\n", path);
        free(b);
        return 1;
    }
    *buf = b;
    *len = n;
    return 0;
}

static int print_ids(const llm_tokenizer *t, const char *text, size_t len, int bos)
{
    size_t n = 0;
    int rc = llm_tokenize(t, text, len, bos, NULL, 0, &n);
    if (rc != 0 && rc != LLM_ESPACE) {
        fprintf(stderr, PROG ": tokenize: %s\n", llm_strerror(rc));
        return 1;
    }
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids || llm_tokenize(t, text, len, bos, ids, n, &n) != 0) {
        fprintf(stderr, PROG ": tokenize: out of memory\n");
        free(ids);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", (int)ids[i]);
    printf("\n");
    free(ids);
    return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *prompt = NULL, *file = NULL;
    int no_bos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--no-bos") == 0) {
            no_bos = 1;
        } else if ((strcmp(a, "-m") == 0 || strcmp(a, "-p") == 0 || strcmp(a, "-f") == 0) && i + 1 < argc) {
            const char **dst = a[1] == 'm' ? &model : a[1] == 'p' ? &prompt : &file;
            *dst = argv[++i];
        } else {
            fprintf(stderr, PROG ": unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model || (!prompt) == (!file)) {
        fprintf(stderr, PROG ": need -m MODEL and exactly one of -p TEXT, -f FILE\n");
        usage(stderr);
        return 2;
    }
    char *text = NULL;
    size_t len = 0;
    if (file && read_file(file, &text, &len))
        return 1;
    char err[512];
    llm_gguf *g = NULL;
    llm_tokenizer *t = NULL;
    int status = 1;
    if (llm_gguf_open(model, &g, err, sizeof err) != 0 || llm_tokenizer_from_gguf(g, &t, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
    } else {
        int bos = !no_bos && llm_tokenizer_add_bos(t);
        status = prompt ? print_ids(t, prompt, strlen(prompt), bos) : print_ids(t, text, len, bos);
    }
    llm_tokenizer_free(t);
    llm_gguf_close(g);
    free(text);
    return status;
}
