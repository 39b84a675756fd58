/* gguf_copy.c — copies an f32 GGUF model with one more metadata string.
 *
 * pm-modelwriter writes no chat template, so the chat-template test makes
 * its own model: every metadata entry and every f32 tensor of a synthetic
 * model, plus tokenizer.chat_template, and optionally one vocabulary
 * entry renamed into a control token (the synthetic vocabulary has no
 * end-of-turn token of its own). Uses the engine's GGUF reader and writer
 * (src/engine/gguf.h).
 */
#include "gguf_copy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

/* Copies a numeric array entry; its raw little-endian bytes are the host
 * layout on the little-endian machines we run on, but unaligned. */
/* One token to rewrite: id -1 for none. */
typedef struct tok_edit {
    int32_t id;
    const char *piece;
} tok_edit;

static int copy_num_array(const llm_gguf *g, llm_gguf_writer *w, const char *key, const tok_edit *ed)
{
    uint32_t et;
    uint64_t n;
    const void *data;
    if (llm_gguf_get_arr(g, key, &et, &n, &data))
        return -1;
    static const size_t size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (et >= sizeof size / sizeof size[0] || !size[et])
        return -1;
    void *copy = malloc(n * size[et] + 1);
    if (!copy)
        return -1;
    memcpy(copy, data, n * size[et]);
    if (ed->id >= 0 && (uint64_t)ed->id < n && et == LLM_GGUF_I32 && !strcmp(key, "tokenizer.ggml.token_type")) {
        int32_t control = 3;
        memcpy((char *)copy + (size_t)ed->id * 4, &control, 4);
    }
    int rc = llm_gguf_writer_set_arr(w, key, et, copy, n);
    free(copy);
    return rc;
}

static int copy_str_array(const llm_gguf *g, llm_gguf_writer *w, const char *key, uint64_t n, const tok_edit *ed)
{
    const char **s = calloc(n + 1, sizeof *s);
    size_t *l = calloc(n + 1, sizeof *l);
    int rc = s && l ? 0 : -1;
    for (uint64_t i = 0; rc == 0 && i < n; i++)
        rc = llm_gguf_arr_str(g, key, i, &s[i], &l[i]);
    if (rc == 0 && ed->id >= 0 && (uint64_t)ed->id < n && !strcmp(key, "tokenizer.ggml.tokens")) {
        s[ed->id] = ed->piece;
        l[ed->id] = strlen(ed->piece);
    }
    if (rc == 0)
        rc = llm_gguf_writer_set_arr_str(w, key, s, l, n);
    free(s);
    free(l);
    return rc;
}

static int copy_kv(const llm_gguf *g, llm_gguf_writer *w, const char *key, uint32_t type, const tok_edit *ed)
{
    uint32_t u32;
    int64_t i64;
    float f;
    int b;
    const char *s;
    size_t len;
    uint32_t et;
    uint64_t n;
    const void *data;
    if (!strcmp(key, "general.alignment"))
        return 0; /* the writer sets its own */
    switch (type) {
    case LLM_GGUF_U32:
        return llm_gguf_get_u32(g, key, &u32) || llm_gguf_writer_set_u32(w, key, u32);
    case LLM_GGUF_I32:
        return llm_gguf_get_i64(g, key, &i64) || llm_gguf_writer_set_i32(w, key, (int32_t)i64);
    case LLM_GGUF_F32:
        return llm_gguf_get_f32(g, key, &f) || llm_gguf_writer_set_f32(w, key, f);
    case LLM_GGUF_BOOL:
        return llm_gguf_get_bool(g, key, &b) || llm_gguf_writer_set_bool(w, key, b);
    case LLM_GGUF_STRING:
        return llm_gguf_get_str(g, key, &s, &len) || llm_gguf_writer_set_str(w, key, s, len);
    case LLM_GGUF_ARRAY:
        if (llm_gguf_get_arr(g, key, &et, &n, &data))
            return -1;
        return et == LLM_GGUF_STRING ? copy_str_array(g, w, key, n, ed) : copy_num_array(g, w, key, ed);
    default:
        return -1; /* not written by pm-modelwriter */
    }
}

static int copy_model(const char *src, const char *dst, const char *tmpl, const tok_edit *ed)
{
    llm_gguf *g = NULL;
    llm_gguf_writer *w = NULL;
    char err[256];
    int rc = llm_gguf_open(src, &g, err, sizeof err) || llm_gguf_writer_new(&w) ? -1 : 0;
    for (uint64_t i = 0; rc == 0 && i < llm_gguf_kv_count(g); i++) {
        const char *key;
        size_t klen;
        uint32_t type;
        char kbuf[256];
        rc = llm_gguf_kv_at(g, i, &key, &klen, &type);
        if (rc == 0 && klen < sizeof kbuf) {
            snprintf(kbuf, sizeof kbuf, "%.*s", (int)klen, key);
            rc = copy_kv(g, w, kbuf, type, ed);
        }
    }
    if (rc == 0)
        rc = llm_gguf_writer_set_str(w, "tokenizer.chat_template", tmpl, strlen(tmpl));
    for (uint64_t i = 0; rc == 0 && i < llm_gguf_tensor_count(g); i++) {
        const llm_gguf_tensor *t = llm_gguf_tensor_at(g, i);
        rc = t->type == 0 ? llm_gguf_writer_add_tensor_f32(w, t->name, 0, t->n_dims, t->ne, (const float *)t->data)
                          : -1;
    }
    if (rc == 0)
        rc = llm_gguf_writer_write(w, dst, err, sizeof err);
    if (rc)
        fprintf(stderr, "gguf_copy: %s failed (%s)\n", src, err);
    llm_gguf_writer_free(w);
    llm_gguf_close(g);
    return rc ? -1 : 0;
}

int gguf_copy_with_template(const char *src, const char *dst, const char *tmpl)
{
    tok_edit none = {-1, NULL};
    return copy_model(src, dst, tmpl, &none);
}

int gguf_copy_with_control(const char *src, const char *dst, const char *tmpl, int32_t id, const char *piece)
{
    tok_edit ed = {id, piece};
    return copy_model(src, dst, tmpl, &ed);
}
