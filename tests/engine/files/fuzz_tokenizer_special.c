/* fuzz_tokenizer_special.c — libFuzzer target for special-token parsing
 * (tokenizer_special.h) over arbitrary text.
 *
 * The vocabulary is fixed, SentencePiece with byte tokens and special
 * tokens that overlap one another ("<s>", "<|e", "<|end|>", "<|end|>x"
 * unused), built once in memory. Invariants beyond "no crash, no
 * sanitizer report": every id is inside the vocabulary; a buffer too small
 * gives LLM_ESPACE with the same count and the same first ids.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "tokenizer_special.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static llm_tokenizer *vocab(void)
{
    enum { NB = 256, NX = 8, N = NB + NX };
    static char bytes[NB][8];
    const char *pieces[N];
    float scores[N];
    int32_t types[N];
    static const char *extra[NX] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "<|e", "<|end|>", "<|end|>x", "he"};
    static const int32_t extra_type[NX] = {2, 3, 3, 1, 4, 3, 5, 1};
    for (int i = 0; i < NX; i++) {
        pieces[i] = extra[i];
        types[i] = extra_type[i];
        scores[i] = -1.0f;
    }
    for (int b = 0; b < NB; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        pieces[NX + b] = bytes[b];
        types[NX + b] = 6;
        scores[NX + b] = 0.0f;
    }
    llm_gguf_writer *w;
    if (llm_gguf_writer_new(&w))
        abort();
    llm_gguf_writer_set_str(w, "general.architecture", "llama", 5);
    llm_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", 5);
    llm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", pieces, NULL, N);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", LLM_GGUF_F32, scores, N);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_I32, types, N);
    char path[] = "/tmp/pm_fuzz_special_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        abort();
    close(fd);
    char err[256];
    llm_gguf *g;
    llm_tokenizer *t = NULL;
    if (llm_gguf_writer_write(w, path, err, sizeof err) || llm_gguf_open(path, &g, err, sizeof err) ||
        llm_tokenizer_from_gguf(g, &t, err, sizeof err))
        abort();
    llm_gguf_close(g);
    llm_gguf_writer_free(w);
    remove(path);
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static llm_tokenizer *t;
    if (!t)
        t = vocab();
    int add_bos = size && (data[0] & 1);
    size_t cap = size * 4 + 8, n = 0, n2 = 0;
    int32_t *ids = malloc(cap * sizeof *ids), few[3];
    if (!ids)
        return 0;
    if (llm_tokenize_special(t, (const char *)data, size, add_bos, ids, cap, &n) != 0)
        abort();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= llm_tokenizer_vocab_size(t))
            abort();
    int rc = llm_tokenize_special(t, (const char *)data, size, add_bos, few, 3, &n2);
    if (n2 != n || (n > 3 ? rc != LLM_ESPACE : rc != 0) || memcmp(few, ids, (n < 3 ? n : 3) * sizeof *ids) != 0)
        abort();
    free(ids);
    return 0;
}
