/* fuzz_gguf.c — libFuzzer target for the GGUF parser (header, metadata,
 * tensor infos) and, on inputs that parse, everything that reads the
 * parsed metadata: every typed getter on every key, string-array element
 * access, tensor lookup and the tokenizer loader with one tokenization.
 *
 * Invariant checked beyond "no crash, no sanitizer report": an accepted
 * file's tensors all lie inside the input buffer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void touch_metadata(const llm_gguf *g)
{
    char key[256];
    for (uint64_t i = 0; i < llm_gguf_kv_count(g); i++) {
        const char *k;
        size_t len;
        uint32_t type;
        if (llm_gguf_kv_at(g, i, &k, &len, &type) != 0 || len >= sizeof key)
            continue;
        memcpy(key, k, len);
        key[len] = '\0';
        uint32_t u32, et;
        uint64_t u64, count;
        int64_t i64;
        float f;
        double d;
        int b;
        const char *s;
        const void *arr;
        llm_gguf_get_u32(g, key, &u32);
        llm_gguf_get_u64(g, key, &u64);
        llm_gguf_get_i64(g, key, &i64);
        llm_gguf_get_f32(g, key, &f);
        llm_gguf_get_f64(g, key, &d);
        llm_gguf_get_bool(g, key, &b);
        llm_gguf_get_str(g, key, &s, &len);
        if (llm_gguf_get_arr(g, key, &et, &count, &arr) == 0 && count > 0) {
            llm_gguf_arr_str(g, key, count - 1, &s, &len);
            llm_gguf_arr_f32(g, key, count - 1, &f);
            llm_gguf_arr_i64(g, key, count - 1, &i64);
        }
    }
}

static void touch_tensors(const llm_gguf *g, const uint8_t *data, size_t size)
{
    for (uint64_t i = 0; i < llm_gguf_tensor_count(g); i++) {
        const llm_gguf_tensor *t = llm_gguf_tensor_at(g, i);
        const uint8_t *p = t->data;
        if (p < data || p > data + size || t->nbytes > (uint64_t)(data + size - p))
            abort();
        if (llm_gguf_find_tensor(g, t->name) != t)
            abort();
    }
}

static void touch_tokenizer(const llm_gguf *g)
{
    llm_tokenizer *t;
    if (llm_tokenizer_from_gguf(g, &t, NULL, 0) != 0)
        return;
    static const char text[] = "Hello wörld, it's 2024!\n\t \xe6\x97\xa5\xff";
    int32_t ids[128];
    size_t n;
    llm_tokenize(t, text, sizeof text - 1, 1, ids, 128, &n);
    char buf[LLM_TOK_MAX_PIECE];
    size_t got;
    for (size_t i = 0; i < n && i < 128; i++)
        llm_token_to_bytes(t, ids[i], buf, sizeof buf, &got);
    llm_tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    llm_gguf *g;
    char err[256];
    if (llm_gguf_open_memory(data, size, &g, err, sizeof err) != 0)
        return 0;
    touch_metadata(g);
    touch_tensors(g, data, size);
    touch_tokenizer(g);
    llm_gguf_close(g);
    return 0;
}
