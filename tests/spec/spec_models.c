/* spec_models.c — see spec_models.h. */
#include "spec_models.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "quant.h"

#define KEY_MAX 256
#define RENAMED "<pm-renamed>"

/* A source tensor read back row by row as f32 for the writer. */
typedef struct row_src {
    const llm_gguf_tensor *t;
    uint64_t row_bytes;
} row_src;

static void errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static int gen_row(void *ctx, uint64_t row, float *dst, uint64_t n)
{
    const row_src *s = ctx;
    const unsigned char *base = s->t->data;
    llm_dequantize_row(s->t->type, base + row * s->row_bytes, dst, (size_t)n);
    return 0;
}

static int copy_string_array(llm_gguf_writer *w, const llm_gguf *g, const char *key,
                             uint64_t count, int32_t rename)
{
    const char **strs = malloc((size_t)count * sizeof *strs);
    size_t *lens = malloc((size_t)count * sizeof *lens);
    int rc = strs && lens ? 0 : -1;
    for (uint64_t i = 0; rc == 0 && i < count; i++) {
        rc = llm_gguf_arr_str(g, key, i, &strs[i], &lens[i]);
        if (rc == 0 && rename >= 0 && (uint64_t)rename == i &&
            strcmp(key, "tokenizer.ggml.tokens") == 0) {
            strs[i] = RENAMED;
            lens[i] = strlen(RENAMED);
        }
    }
    if (rc == 0)
        rc = llm_gguf_writer_set_arr_str(w, key, strs, lens, count);
    free(strs);
    free(lens);
    return rc;
}

static int copy_array(llm_gguf_writer *w, const llm_gguf *g, const char *key, int32_t rename)
{
    uint32_t et;
    uint64_t count;
    const void *data;
    if (llm_gguf_get_arr(g, key, &et, &count, &data) != 0)
        return -1;
    if (et == LLM_GGUF_STRING)
        return copy_string_array(w, g, key, count, rename);
    size_t es = llm_gguf_value_size(et);
    if (es == 0)
        return -1; /* nested arrays: not in llama models */
    void *buf = malloc(count ? (size_t)count * es : 1);
    if (!buf)
        return -1;
    memcpy(buf, data, (size_t)count * es); /* little-endian file, x86-64 host */
    int rc = llm_gguf_writer_set_arr(w, key, et, buf, count);
    free(buf);
    return rc;
}

static int copy_scalar(llm_gguf_writer *w, const llm_gguf *g, const char *key, uint32_t type)
{
    uint64_t u = 0;
    int64_t i = 0;
    float f = 0;
    int b = 0;
    const char *s;
    size_t len;
    switch (type) {
    case LLM_GGUF_U8: return llm_gguf_get_u64(g, key, &u) || llm_gguf_writer_set_u8(w, key, (uint8_t)u);
    case LLM_GGUF_U16: return llm_gguf_get_u64(g, key, &u) || llm_gguf_writer_set_u16(w, key, (uint16_t)u);
    case LLM_GGUF_U32: return llm_gguf_get_u64(g, key, &u) || llm_gguf_writer_set_u32(w, key, (uint32_t)u);
    case LLM_GGUF_U64: return llm_gguf_get_u64(g, key, &u) || llm_gguf_writer_set_u64(w, key, u);
    case LLM_GGUF_I8: return llm_gguf_get_i64(g, key, &i) || llm_gguf_writer_set_i8(w, key, (int8_t)i);
    case LLM_GGUF_I16: return llm_gguf_get_i64(g, key, &i) || llm_gguf_writer_set_i16(w, key, (int16_t)i);
    case LLM_GGUF_I32: return llm_gguf_get_i64(g, key, &i) || llm_gguf_writer_set_i32(w, key, (int32_t)i);
    case LLM_GGUF_I64: return llm_gguf_get_i64(g, key, &i) || llm_gguf_writer_set_i64(w, key, i);
    case LLM_GGUF_F32: return llm_gguf_get_f32(g, key, &f) || llm_gguf_writer_set_f32(w, key, f);
    case LLM_GGUF_F64: return llm_gguf_get_f32(g, key, &f) || llm_gguf_writer_set_f64(w, key, f);
    case LLM_GGUF_BOOL: return llm_gguf_get_bool(g, key, &b) || llm_gguf_writer_set_bool(w, key, b);
    case LLM_GGUF_STRING: return llm_gguf_get_str(g, key, &s, &len) || llm_gguf_writer_set_str(w, key, s, len);
    default: return -1;
    }
}

static int copy_meta(llm_gguf_writer *w, const llm_gguf *g, const spec_derive *d, int32_t layers,
                     char *err, size_t errlen)
{
    uint64_t n = llm_gguf_kv_count(g);
    for (uint64_t i = 0; i < n; i++) {
        const char *k;
        size_t kl;
        uint32_t type;
        char key[KEY_MAX];
        if (llm_gguf_kv_at(g, i, &k, &kl, &type) != 0 || kl >= sizeof key) {
            errf(err, errlen, "metadata entry %llu unreadable", (unsigned long long)i);
            return -1;
        }
        memcpy(key, k, kl);
        key[kl] = '\0';
        int rc;
        if (strcmp(key, "llama.block_count") == 0)
            rc = llm_gguf_writer_set_u32(w, key, (uint32_t)layers);
        else if (type == LLM_GGUF_ARRAY)
            rc = copy_array(w, g, key, d->rename_piece);
        else
            rc = copy_scalar(w, g, key, type);
        if (rc) {
            errf(err, errlen, "cannot copy metadata %s: %s", key, llm_gguf_writer_error(w));
            return -1;
        }
    }
    return 0;
}

/* The block index of a "blk.N." tensor, or -1 for the others. */
static long block_of(const char *name)
{
    if (strncmp(name, "blk.", 4) != 0)
        return -1;
    char *end;
    long b = strtol(name + 4, &end, 10);
    return end != name + 4 && *end == '.' ? b : -1;
}

static int copy_tensors(llm_gguf_writer *w, const llm_gguf *g, const spec_derive *d,
                        int32_t layers, uint32_t to_type, row_src *srcs, char *err,
                        size_t errlen)
{
    uint64_t n = llm_gguf_tensor_count(g);
    for (uint64_t i = 0; i < n; i++) {
        const llm_gguf_tensor *t = llm_gguf_tensor_at(g, i);
        long b = block_of(t->name);
        if (b >= layers)
            continue;
        uint32_t type = t->type;
        int matrix = t->n_dims == 2 && (b >= 0 || strcmp(t->name, "output.weight") == 0);
        if (d->type && matrix)
            type = to_type;
        srcs[i].t = t;
        if (llm_type_row_bytes(t->type, t->ne[0], &srcs[i].row_bytes) != 0 ||
            llm_gguf_writer_add_tensor_gen(w, t->name, type, t->n_dims, t->ne, gen_row,
                                           &srcs[i]) != 0) {
            errf(err, errlen, "cannot copy tensor %s: %s", t->name, llm_gguf_writer_error(w));
            return -1;
        }
    }
    return 0;
}

int spec_derive_gguf(const char *in, const char *out, const spec_derive *d, char *err,
                     size_t errlen)
{
    llm_gguf *g = NULL;
    llm_gguf_writer *w = NULL;
    row_src *srcs = NULL;
    uint32_t src_layers = 0, to_type = 0;
    int rc = -1;
    if (llm_gguf_open(in, &g, err, errlen) != 0)
        return -1;
    if (llm_gguf_get_u32(g, "llama.block_count", &src_layers) != 0) {
        errf(err, errlen, "%s: no llama.block_count", in);
        goto done;
    }
    int32_t layers = d->layers > 0 ? d->layers : (int32_t)src_layers;
    if ((uint32_t)layers > src_layers || (d->type && llm_type_parse(d->type, &to_type) != 0)) {
        errf(err, errlen, "cannot keep %d of %u layers as type %s", (int)layers,
             (unsigned)src_layers, d->type ? d->type : "(kept)");
        goto done;
    }
    srcs = calloc((size_t)llm_gguf_tensor_count(g) + 1, sizeof *srcs);
    if (!srcs || llm_gguf_writer_new(&w) != 0) {
        errf(err, errlen, "out of memory");
        goto done;
    }
    if (copy_meta(w, g, d, layers, err, errlen) == 0 &&
        copy_tensors(w, g, d, layers, to_type, srcs, err, errlen) == 0)
        rc = llm_gguf_writer_write(w, out, err, errlen) == 0 ? 0 : -1;
done:
    llm_gguf_writer_free(w);
    free(srcs);
    llm_gguf_close(g);
    return rc;
}
