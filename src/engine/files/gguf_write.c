/* gguf_write.c — the GGUF v3 writer (see gguf.h for the contract).
 *
 * Metadata values are serialized into owned byte blobs as they are set, so
 * the write itself is a straight copy: header, key/value entries, tensor
 * infos, padding to the alignment, then each tensor's data converted row by
 * row from f32 (or copied as given, for a tensor added raw) and padded to
 * the alignment. Tensor offsets are computed
 * before anything is written. The file is written to a temporary name next
 * to the target, flushed to disk, then renamed over the target.
 *
 * Errors are sticky: the first failure is recorded in the writer and every
 * later call fails fast with the same message, so a caller can issue a
 * series of set/add calls and check once at write time.
 */
#define _POSIX_C_SOURCE 200809L

#include "errtext.h"
#include "gguf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant.h"

typedef struct blob {
    unsigned char *p;
    size_t len, cap;
} blob;

typedef struct w_kv {
    char *key;
    uint32_t type;
    blob val; /* serialized value (arrays: elem type, count, elements) */
} w_kv;

typedef struct w_tensor {
    char *name;
    uint32_t type;
    const llm_type_traits *tt; /* type's traits (converts) */
    uint64_t row_bytes;
    uint32_t n_dims;
    uint64_t ne[4];
    const float *data;  /* borrowed, or NULL when fn or raw is set */
    llm_gguf_row_fn fn;
    const void *raw;    /* borrowed bytes written as they are, or NULL */
    void *ctx;
    uint64_t nbytes;
    uint64_t offset;    /* within the data section, set at write time */
} w_tensor;

struct llm_gguf_writer {
    w_kv *kv;
    size_t n_kv, cap_kv;
    w_tensor *t;
    size_t n_t, cap_t;
    uint32_t alignment;
    const llm_type_set *types; /* borrowed; NULL: built-in types only */
    int failed;
    char err[256];
};

static int wfail(llm_gguf_writer *w, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int wfail(llm_gguf_writer *w, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    llm__verrf(w->err, sizeof w->err, "gguf: ", fmt, ap);
    va_end(ap);
    w->failed = status;
    return status;
}

static int blob_put(blob *b, const void *src, size_t n)
{
    if (n > SIZE_MAX - b->len)
        return -1;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n)
            cap = cap > SIZE_MAX / 2 ? b->len + n : cap * 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static int blob_le(blob *b, uint64_t v, int n)
{
    unsigned char tmp[8];
    for (int i = 0; i < n; i++)
        tmp[i] = (unsigned char)(v >> (8 * i));
    return blob_put(b, tmp, (size_t)n);
}

static int blob_str(blob *b, const char *s, size_t len)
{
    return blob_le(b, len, 8) || blob_put(b, s, len);
}

int llm_gguf_writer_new(llm_gguf_writer **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return LLM_ENOMEM;
    (*out)->alignment = LLM_GGUF_DEFAULT_ALIGNMENT;
    return 0;
}

void llm_gguf_writer_free(llm_gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

const char *llm_gguf_writer_error(const llm_gguf_writer *w)
{
    return w->err;
}

void llm_gguf_writer_set_types(llm_gguf_writer *w, const llm_type_set *types)
{
    w->types = types;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Appends an entry for `key` with an empty value blob; the caller fills
 * it. NULL (and the writer failed) on a duplicate key or no memory. */
static w_kv *new_kv(llm_gguf_writer *w, const char *key, uint32_t type)
{
    if (w->failed)
        return NULL;
    if (!key || !key[0] || strlen(key) > LLM_GGUF_MAX_STRING) {
        wfail(w, LLM_EINVAL, "metadata key is empty or too long");
        return NULL;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            wfail(w, LLM_EINVAL, "duplicate metadata key '%s'", key);
            return NULL;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        w_kv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) {
            wfail(w, LLM_ENOMEM, "out of memory");
            return NULL;
        }
        w->kv = kv;
        w->cap_kv = cap;
    }
    w_kv *e = &w->kv[w->n_kv];
    memset(e, 0, sizeof *e);
    e->key = dup_str(key);
    if (!e->key) {
        wfail(w, LLM_ENOMEM, "out of memory");
        return NULL;
    }
    e->type = type;
    w->n_kv++;
    return e;
}

static int set_scalar(llm_gguf_writer *w, const char *key, uint32_t type, uint64_t bits, int n)
{
    w_kv *e = new_kv(w, key, type);
    if (!e)
        return w->failed;
    if (blob_le(&e->val, bits, n))
        return wfail(w, LLM_ENOMEM, "out of memory");
    return 0;
}

int llm_gguf_writer_set_u8(llm_gguf_writer *w, const char *key, uint8_t v)
{
    return set_scalar(w, key, LLM_GGUF_U8, v, 1);
}

int llm_gguf_writer_set_i8(llm_gguf_writer *w, const char *key, int8_t v)
{
    return set_scalar(w, key, LLM_GGUF_I8, (uint8_t)v, 1);
}

int llm_gguf_writer_set_u16(llm_gguf_writer *w, const char *key, uint16_t v)
{
    return set_scalar(w, key, LLM_GGUF_U16, v, 2);
}

int llm_gguf_writer_set_i16(llm_gguf_writer *w, const char *key, int16_t v)
{
    return set_scalar(w, key, LLM_GGUF_I16, (uint16_t)v, 2);
}

int llm_gguf_writer_set_u32(llm_gguf_writer *w, const char *key, uint32_t v)
{
    if (!w->failed && key && strcmp(key, "general.alignment") == 0) {
        if (v == 0 || (v & (v - 1)) != 0 || v > (1u << 30))
            return wfail(w, LLM_EINVAL, "general.alignment %u is not a power of two", v);
        w->alignment = v;
    }
    return set_scalar(w, key, LLM_GGUF_U32, v, 4);
}

int llm_gguf_writer_set_i32(llm_gguf_writer *w, const char *key, int32_t v)
{
    return set_scalar(w, key, LLM_GGUF_I32, (uint32_t)v, 4);
}

int llm_gguf_writer_set_u64(llm_gguf_writer *w, const char *key, uint64_t v)
{
    return set_scalar(w, key, LLM_GGUF_U64, v, 8);
}

int llm_gguf_writer_set_i64(llm_gguf_writer *w, const char *key, int64_t v)
{
    return set_scalar(w, key, LLM_GGUF_I64, (uint64_t)v, 8);
}

int llm_gguf_writer_set_f32(llm_gguf_writer *w, const char *key, float v)
{
    return set_scalar(w, key, LLM_GGUF_F32, llm_f32_bits(v), 4);
}

int llm_gguf_writer_set_f64(llm_gguf_writer *w, const char *key, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return set_scalar(w, key, LLM_GGUF_F64, bits, 8);
}

int llm_gguf_writer_set_bool(llm_gguf_writer *w, const char *key, int v)
{
    return set_scalar(w, key, LLM_GGUF_BOOL, v != 0, 1);
}

int llm_gguf_writer_set_str(llm_gguf_writer *w, const char *key, const char *s, size_t len)
{
    if (!w->failed && len > LLM_GGUF_MAX_STRING)
        return wfail(w, LLM_EINVAL, "metadata '%s': string longer than %u bytes", key, LLM_GGUF_MAX_STRING);
    w_kv *e = new_kv(w, key, LLM_GGUF_STRING);
    if (!e)
        return w->failed;
    if (blob_str(&e->val, s, len))
        return wfail(w, LLM_ENOMEM, "out of memory");
    return 0;
}

/* Serializes one host-layout element of a fixed-size type. */
static int put_elem(blob *b, uint32_t type, const unsigned char *p)
{
    uint64_t v = 0;
    switch (type) {
    case LLM_GGUF_U8: case LLM_GGUF_I8: case LLM_GGUF_BOOL: return blob_le(b, p[0], 1);
    case LLM_GGUF_U16: case LLM_GGUF_I16: { uint16_t x; memcpy(&x, p, 2); return blob_le(b, x, 2); }
    case LLM_GGUF_U32: case LLM_GGUF_I32: case LLM_GGUF_F32: { uint32_t x; memcpy(&x, p, 4); return blob_le(b, x, 4); }
    default: memcpy(&v, p, 8); return blob_le(b, v, 8);
    }
}

static size_t fixed_size(uint32_t type)
{
    switch (type) {
    case LLM_GGUF_U8: case LLM_GGUF_I8: case LLM_GGUF_BOOL: return 1;
    case LLM_GGUF_U16: case LLM_GGUF_I16: return 2;
    case LLM_GGUF_U32: case LLM_GGUF_I32: case LLM_GGUF_F32: return 4;
    case LLM_GGUF_U64: case LLM_GGUF_I64: case LLM_GGUF_F64: return 8;
    default: return 0;
    }
}

int llm_gguf_writer_set_arr(llm_gguf_writer *w, const char *key, uint32_t elem_type, const void *data,
                            uint64_t count)
{
    size_t sz = fixed_size(elem_type);
    if (!w->failed && !sz)
        return wfail(w, LLM_EINVAL, "metadata '%s': array element type %u is not a fixed-size type", key,
                     elem_type);
    w_kv *e = new_kv(w, key, LLM_GGUF_ARRAY);
    if (!e)
        return w->failed;
    const unsigned char *p = data;
    if (blob_le(&e->val, elem_type, 4) || blob_le(&e->val, count, 8))
        return wfail(w, LLM_ENOMEM, "out of memory");
    for (uint64_t i = 0; i < count; i++)
        if (put_elem(&e->val, elem_type, p + i * sz))
            return wfail(w, LLM_ENOMEM, "out of memory");
    return 0;
}

int llm_gguf_writer_set_arr_str(llm_gguf_writer *w, const char *key, const char *const *strs,
                                const size_t *lens, uint64_t count)
{
    w_kv *e = new_kv(w, key, LLM_GGUF_ARRAY);
    if (!e)
        return w->failed;
    if (blob_le(&e->val, LLM_GGUF_STRING, 4) || blob_le(&e->val, count, 8))
        return wfail(w, LLM_ENOMEM, "out of memory");
    for (uint64_t i = 0; i < count; i++) {
        size_t len = lens ? lens[i] : strlen(strs[i]);
        if (len > LLM_GGUF_MAX_STRING)
            return wfail(w, LLM_EINVAL, "metadata '%s': element %llu longer than %u bytes", key,
                         (unsigned long long)i, LLM_GGUF_MAX_STRING);
        if (blob_str(&e->val, strs[i], len))
            return wfail(w, LLM_ENOMEM, "out of memory");
    }
    return 0;
}

/* ---- tensors --------------------------------------------------------- */

/* Validates a tensor about to be added and fills t's traits and sizes.
 * A raw tensor's type need only have a known layout; any other must
 * convert from f32. */
static int check_tensor(llm_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                        int raw, w_tensor *t)
{
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len > LLM_GGUF_MAX_NAME)
        return wfail(w, LLM_EINVAL, "tensor name length %zu is not 1..%u", len, LLM_GGUF_MAX_NAME);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return wfail(w, LLM_EINVAL, "duplicate tensor name '%s'", name);
    const llm_type_traits *tt = llm_type_find(w->types, type);
    if (raw && !tt)
        return wfail(w, LLM_EINVAL, "tensor '%s': type %u has no known layout", name, type);
    if (!raw && !llm_type_traits_converts(tt))
        return wfail(w, LLM_EINVAL, "tensor '%s': type %u (%s) cannot be written", name, type,
                     tt ? tt->name : "unknown");
    if (n_dims == 0 || n_dims > LLM_GGUF_MAX_DIMS)
        return wfail(w, LLM_EINVAL, "tensor '%s' has %u dimensions (must be 1..4)", name, n_dims);
    uint64_t rows = 1;
    for (uint32_t d = 1; d < n_dims; d++) {
        if (ne[d] == 0 || rows > (uint64_t)INT64_MAX / ne[d])
            return wfail(w, LLM_EINVAL, "tensor '%s' has an invalid shape", name);
        rows *= ne[d];
    }
    uint64_t row;
    if (ne[0] == 0 || llm_type_traits_row_bytes(tt, ne[0], &row) != 0)
        return wfail(w, LLM_EINVAL, "tensor '%s': row of %llu elements does not fit %s blocks of %u", name,
                     (unsigned long long)ne[0], tt->name, tt->block_elems);
    if (row == 0 || rows > UINT64_MAX / row / 2)
        return wfail(w, LLM_EINVAL, "tensor '%s' is too large", name);
    t->tt = tt;
    t->row_bytes = row;
    t->nbytes = row * rows;
    return 0;
}

/* Exactly one of data, fn and raw is set; raw_bytes is raw's length. */
static int add_tensor(llm_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                      const float *data, llm_gguf_row_fn fn, void *ctx, const void *raw, uint64_t raw_bytes)
{
    if (w->failed)
        return w->failed;
    w_tensor checked;
    memset(&checked, 0, sizeof checked);
    int r = check_tensor(w, name, type, n_dims, ne, raw != NULL, &checked);
    if (r)
        return r;
    if (raw && raw_bytes != checked.nbytes)
        return wfail(w, LLM_EINVAL, "tensor '%s': %llu bytes given, its shape and type take %llu", name,
                     (unsigned long long)raw_bytes, (unsigned long long)checked.nbytes);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        w_tensor *t = realloc(w->t, cap * sizeof *t);
        if (!t)
            return wfail(w, LLM_ENOMEM, "out of memory");
        w->t = t;
        w->cap_t = cap;
    }
    w_tensor *t = &w->t[w->n_t];
    *t = checked;
    t->name = dup_str(name);
    if (!t->name)
        return wfail(w, LLM_ENOMEM, "out of memory");
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < 4; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->data = data;
    t->fn = fn;
    t->ctx = ctx;
    t->raw = raw;
    w->n_t++;
    return 0;
}

int llm_gguf_writer_add_tensor_f32(llm_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                   const uint64_t *ne, const float *data)
{
    if (!w->failed && !data)
        return wfail(w, LLM_EINVAL, "tensor '%s': no data", name ? name : "");
    return add_tensor(w, name, type, n_dims, ne, data, NULL, NULL, NULL, 0);
}

int llm_gguf_writer_add_tensor_gen(llm_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                   const uint64_t *ne, llm_gguf_row_fn fn, void *ctx)
{
    if (!w->failed && !fn)
        return wfail(w, LLM_EINVAL, "tensor '%s': no row generator", name ? name : "");
    return add_tensor(w, name, type, n_dims, ne, NULL, fn, ctx, NULL, 0);
}

int llm_gguf_writer_add_tensor_raw(llm_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                   const uint64_t *ne, const void *data, uint64_t nbytes)
{
    if (!w->failed && !data)
        return wfail(w, LLM_EINVAL, "tensor '%s': no data", name ? name : "");
    return add_tensor(w, name, type, n_dims, ne, NULL, NULL, NULL, data, nbytes);
}

/* ---- writing --------------------------------------------------------- */

static uint64_t align_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

/* Serializes header, metadata and tensor infos (tensor offsets assigned
 * here), padded to the alignment. */
static int build_head(llm_gguf_writer *w, blob *h)
{
    int r = blob_le(h, LLM_GGUF_MAGIC, 4) || blob_le(h, 3, 4) || blob_le(h, w->n_t, 8) || blob_le(h, w->n_kv, 8);
    for (size_t i = 0; !r && i < w->n_kv; i++)
        r = blob_str(h, w->kv[i].key, strlen(w->kv[i].key)) || blob_le(h, w->kv[i].type, 4) ||
            blob_put(h, w->kv[i].val.p, w->kv[i].val.len);
    uint64_t off = 0;
    for (size_t i = 0; !r && i < w->n_t; i++) {
        w_tensor *t = &w->t[i];
        t->offset = off;
        off = align_up(off + t->nbytes, w->alignment);
        r = blob_str(h, t->name, strlen(t->name)) || blob_le(h, t->n_dims, 4);
        for (uint32_t d = 0; !r && d < t->n_dims; d++)
            r = blob_le(h, t->ne[d], 8);
        r = r || blob_le(h, t->type, 4) || blob_le(h, t->offset, 8);
    }
    static const unsigned char zeros[64];
    size_t pad = (size_t)(align_up(h->len, w->alignment) - h->len);
    while (!r && pad) {
        size_t k = pad > sizeof zeros ? sizeof zeros : pad;
        r = blob_put(h, zeros, k);
        pad -= k;
    }
    return r ? wfail(w, LLM_ENOMEM, "out of memory") : 0;
}

static int write_zeros(FILE *f, uint64_t n)
{
    static const unsigned char zeros[256];
    while (n) {
        size_t k = n > sizeof zeros ? sizeof zeros : (size_t)n;
        if (fwrite(zeros, 1, k, f) != k)
            return -1;
        n -= k;
    }
    return 0;
}

/* Converts and writes one tensor's rows; `row` and `out` are scratch
 * buffers of ne[0] floats and one row's bytes. */
static int write_rows(llm_gguf_writer *w, FILE *f, const w_tensor *t, float *row, unsigned char *out)
{
    uint64_t n = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3], rb = t->row_bytes;
    for (uint64_t i = 0; i < rows; i++) {
        const float *src = t->data ? t->data + i * n : row;
        if (t->fn && t->fn(t->ctx, i, row, n) != 0)
            return wfail(w, LLM_EINVAL, "tensor '%s': row generator failed at row %llu", t->name,
                         (unsigned long long)i);
        t->tt->from_f32(src, out, (size_t)n);
        if (fwrite(out, 1, (size_t)rb, f) != rb)
            return wfail(w, LLM_EIO, "write failed: %s", strerror(errno));
    }
    return 0;
}

/* Writes one tensor's data (a raw tensor's bytes as they are) and the
 * padding after it. */
static int write_tensor(llm_gguf_writer *w, FILE *f, const w_tensor *t, float *row, unsigned char *out)
{
    if (t->raw) {
        if (fwrite(t->raw, 1, (size_t)t->nbytes, f) != t->nbytes)
            return wfail(w, LLM_EIO, "write failed: %s", strerror(errno));
    } else {
        int r = write_rows(w, f, t, row, out);
        if (r)
            return r;
    }
    uint64_t pad = align_up(t->nbytes, w->alignment) - t->nbytes;
    if (pad && write_zeros(f, pad))
        return wfail(w, LLM_EIO, "write failed: %s", strerror(errno));
    return 0;
}

static int write_body(llm_gguf_writer *w, FILE *f, const blob *head)
{
    if (fwrite(head->p, 1, head->len, f) != head->len)
        return wfail(w, LLM_EIO, "write failed: %s", strerror(errno));
    uint64_t max_n = 0, max_bytes = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        max_n = w->t[i].ne[0] > max_n ? w->t[i].ne[0] : max_n;
        max_bytes = w->t[i].row_bytes > max_bytes ? w->t[i].row_bytes : max_bytes;
    }
    if (max_n > SIZE_MAX / 8 || max_bytes > SIZE_MAX / 2)
        return wfail(w, LLM_ENOMEM, "rows too long");
    float *row = malloc((size_t)(max_n ? max_n : 1) * sizeof *row);
    unsigned char *out = malloc((size_t)(max_bytes ? max_bytes : 1));
    int r = (!row || !out) ? wfail(w, LLM_ENOMEM, "out of memory") : 0;
    for (size_t i = 0; !r && i < w->n_t; i++)
        r = write_tensor(w, f, &w->t[i], row, out);
    free(row);
    free(out);
    return r;
}

static int finish_file(llm_gguf_writer *w, FILE *f)
{
    int r = fflush(f) != 0 || fsync(fileno(f)) != 0;
    int saved = errno;
    if (fclose(f) != 0 && !r) {
        r = 1;
        saved = errno;
    }
    return r ? wfail(w, LLM_EIO, "write failed: %s", strerror(saved)) : 0;
}

int llm_gguf_writer_write(llm_gguf_writer *w, const char *path, char *err, size_t errlen)
{
    int r = w->failed;
    char tmp[4096];
    blob head = {0};
    if (!r && (size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp)
        r = wfail(w, LLM_EINVAL, "path too long");
    if (!r)
        r = build_head(w, &head);
    FILE *f = NULL;
    if (!r && !(f = fopen(tmp, "wb")))
        r = wfail(w, LLM_EIO, "cannot create '%s': %s", tmp, strerror(errno));
    if (!r) {
        r = write_body(w, f, &head);
        if (r)
            fclose(f);
        else
            r = finish_file(w, f);
        if (!r && rename(tmp, path) != 0)
            r = wfail(w, LLM_EIO, "cannot rename to '%s': %s", path, strerror(errno));
        if (r)
            remove(tmp);
    }
    free(head.p);
    if (err && errlen)
        snprintf(err, errlen, "%s", r ? w->err : "");
    /* An I/O failure need not poison the writer: the caller may retry to
     * another path. Argument errors stay sticky. */
    if (r == LLM_EIO)
        w->failed = 0;
    return r;
}
