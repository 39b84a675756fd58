/* gguf.c — the GGUF reader (see gguf.h for the contract).
 *
 * Open does all validation in one forward pass over the bytes with a
 * bounds-checked cursor, so that every later access (getters, tensor data)
 * only touches ranges already proven to lie inside the buffer:
 *
 *   header     magic, version (2|3), tensor count, metadata count
 *   metadata   key string, value type, value (arrays walked element by
 *              element, nesting bounded); each entry is recorded with a
 *              pointer to its value bytes, and string arrays get an offset
 *              index so element i is O(1)
 *   tensors    name, dims, type, offset; then, once the data section start
 *              is known (aligned up from the end of the tensor infos), each
 *              tensor's range is checked against the file
 *
 * Invariants after a successful open: every kv.val .. kv.val+kv.val_len and
 * every tensor's data .. data+nbytes lie inside [base, base+size); keys and
 * tensor names are unique; the hash tables index every entry.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */

#include "errtext.h"
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"

typedef struct kv_entry {
    const unsigned char *key;  /* not NUL-terminated */
    uint64_t key_len;
    uint32_t type;             /* enum llm_gguf_vtype */
    uint32_t elem_type;        /* arrays: element type */
    uint64_t count;            /* arrays: element count */
    const unsigned char *val;  /* value bytes (arrays: first element) */
    uint64_t val_len;          /* bytes of the value (arrays: all elements) */
    uint64_t *str_off;         /* string arrays: offset of element i from val */
} kv_entry;

struct llm_gguf {
    const unsigned char *base;
    size_t size;
    int mapped; /* 1: base is our mmap (unmapped at close); 2: our malloc
                   (freed at close); 0: the caller's buffer */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    uint64_t n_kv;
    kv_entry *kv;
    uint64_t kv_mask;      /* hash table size - 1 */
    uint32_t *kv_hash;     /* slot -> kv index + 1 (0 = empty) */
    uint64_t n_tensors;
    llm_gguf_tensor *tensors;
    uint64_t *tensor_off;  /* tensor i's offset within the data section */
    char *names;           /* NUL-terminated tensor names, back to back */
    uint64_t t_mask;
    uint32_t *t_hash;
};

/* ---- errors and the cursor ------------------------------------------ */

typedef struct cursor {
    const unsigned char *p;
    size_t len;
    size_t pos;
    char *err;
    size_t errlen;
    const llm_type_set *types; /* tensor types beyond the built-in ones */
} cursor;

static int fail(cursor *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(cursor *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    llm__verrf(c->err, c->errlen, "gguf: ", fmt, ap);
    va_end(ap);
    return status;
}

/* Untrusted name bytes for error text (llm__show), at most 80 of them. The
 * lengths shown are already bounded by the file's size. */
static const char *show(const unsigned char *s, uint64_t len, char buf[84])
{
    return llm__show(s, (size_t)len, 80, buf);
}

static size_t left(const cursor *c)
{
    return c->len - c->pos;
}

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Reads an n-byte little-endian integer; -1 when fewer bytes remain. */
static int take(cursor *c, int n, uint64_t *v)
{
    if (left(c) < (size_t)n)
        return -1;
    *v = le(c->p + c->pos, n);
    c->pos += (size_t)n;
    return 0;
}

static int take_u32(cursor *c, uint32_t *v)
{
    uint64_t x;
    if (take(c, 4, &x))
        return -1;
    *v = (uint32_t)x;
    return 0;
}

/* A GGUF string: u64 length then bytes. -1: length field cut off,
 * -2: the bytes run past the end, -3: longer than LLM_GGUF_MAX_STRING. */
static int take_str(cursor *c, const unsigned char **s, uint64_t *len)
{
    if (take(c, 8, len))
        return -1;
    if (*len > LLM_GGUF_MAX_STRING)
        return -3;
    if (*len > left(c))
        return -2;
    *s = c->p + c->pos;
    c->pos += (size_t)*len;
    return 0;
}

/* ---- value types ----------------------------------------------------- */

uint32_t llm_gguf_value_size(uint32_t t)
{
    switch (t) {
    case LLM_GGUF_U8: case LLM_GGUF_I8: case LLM_GGUF_BOOL: return 1;
    case LLM_GGUF_U16: case LLM_GGUF_I16: return 2;
    case LLM_GGUF_U32: case LLM_GGUF_I32: case LLM_GGUF_F32: return 4;
    case LLM_GGUF_U64: case LLM_GGUF_I64: case LLM_GGUF_F64: return 8;
    default: return 0;
    }
}

static int vtype_valid(uint32_t t)
{
    return t <= LLM_GGUF_F64;
}

static int vtype_is_int(uint32_t t)
{
    switch (t) {
    case LLM_GGUF_U8: case LLM_GGUF_I8: case LLM_GGUF_U16: case LLM_GGUF_I16:
    case LLM_GGUF_U32: case LLM_GGUF_I32: case LLM_GGUF_U64: case LLM_GGUF_I64:
        return 1;
    default:
        return 0;
    }
}

static int vtype_is_signed(uint32_t t)
{
    return t == LLM_GGUF_I8 || t == LLM_GGUF_I16 || t == LLM_GGUF_I32 || t == LLM_GGUF_I64;
}

/* ---- metadata parsing ------------------------------------------------ */

/* Skips over one array body (element type, count, elements) of nesting
 * depth `depth`, reporting errors against `name`. */
static int skip_array(cursor *c, const char *name, unsigned depth, uint32_t *elem_type, uint64_t *count);

static int skip_value(cursor *c, const char *name, uint32_t type, unsigned depth)
{
    uint32_t sz = llm_gguf_value_size(type);
    if (sz) {
        if (left(c) < sz)
            return fail(c, LLM_EFORMAT, "metadata '%s': value runs past end of file", name);
        c->pos += sz;
        return 0;
    }
    if (type == LLM_GGUF_STRING) {
        const unsigned char *s;
        uint64_t len;
        int r = take_str(c, &s, &len);
        if (r == -3)
            return fail(c, LLM_EFORMAT, "metadata '%s': string length %llu exceeds limit %u", name,
                        (unsigned long long)len, LLM_GGUF_MAX_STRING);
        if (r)
            return fail(c, LLM_EFORMAT, "metadata '%s': string length %llu runs past end of file",
                        name, (unsigned long long)(r == -1 ? 0 : len));
        return 0;
    }
    if (type == LLM_GGUF_ARRAY) {
        uint32_t et;
        uint64_t n;
        return skip_array(c, name, depth + 1, &et, &n);
    }
    return fail(c, LLM_EFORMAT, "metadata '%s' has unknown value type %u", name, type);
}

static int skip_array(cursor *c, const char *name, unsigned depth, uint32_t *elem_type, uint64_t *count)
{
    if (depth > LLM_GGUF_MAX_DEPTH)
        return fail(c, LLM_EFORMAT, "metadata '%s': arrays nested deeper than %u", name,
                    LLM_GGUF_MAX_DEPTH);
    if (take_u32(c, elem_type) || take(c, 8, count))
        return fail(c, LLM_EFORMAT, "metadata '%s': array header runs past end of file", name);
    if (!vtype_valid(*elem_type))
        return fail(c, LLM_EFORMAT, "metadata '%s': array has unknown element type %u", name,
                    *elem_type);
    uint32_t sz = llm_gguf_value_size(*elem_type);
    /* Every element takes at least one byte (8 for strings, 12 for
     * arrays), so a count beyond what remains is malformed; this also keeps
     * the element walk below linear in the file size. */
    uint64_t min = sz ? sz : (*elem_type == LLM_GGUF_STRING ? 8 : 12);
    if (*count > left(c) / min)
        return fail(c, LLM_EFORMAT, "metadata '%s': array of %llu elements runs past end of file",
                    name, (unsigned long long)*count);
    if (sz) {
        c->pos += (size_t)(*count * sz);
        return 0;
    }
    for (uint64_t i = 0; i < *count; i++) {
        int r = skip_value(c, name, *elem_type, depth);
        if (r)
            return r;
    }
    return 0;
}

/* Builds the element offset index of a validated string array. */
static int index_strings(kv_entry *e, cursor *c)
{
    if (e->count == 0)
        return 0;
    e->str_off = malloc((size_t)e->count * sizeof *e->str_off);
    if (!e->str_off)
        return fail(c, LLM_ENOMEM, "out of memory indexing metadata array");
    uint64_t off = 0;
    for (uint64_t i = 0; i < e->count; i++) {
        e->str_off[i] = off;
        off += 8 + le(e->val + off, 8);
    }
    return 0;
}

static uint64_t hash_bytes(const unsigned char *s, uint64_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (uint64_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t table_size(uint64_t n)
{
    uint64_t s = 16;
    while (s < 2 * n)
        s <<= 1;
    return s;
}

static const kv_entry *kv_lookup(const llm_gguf *g, const unsigned char *key, uint64_t len)
{
    if (!g->kv_hash)
        return NULL;
    for (uint64_t h = hash_bytes(key, len) & g->kv_mask;; h = (h + 1) & g->kv_mask) {
        uint32_t slot = g->kv_hash[h];
        if (slot == 0)
            return NULL;
        const kv_entry *e = &g->kv[slot - 1];
        if (e->key_len == len && memcmp(e->key, key, (size_t)len) == 0)
            return e;
    }
}

/* Inserts kv index i; fails when its key is already present. */
static int kv_insert(llm_gguf *g, uint64_t i)
{
    const kv_entry *e = &g->kv[i];
    uint64_t h = hash_bytes(e->key, e->key_len) & g->kv_mask;
    for (; g->kv_hash[h]; h = (h + 1) & g->kv_mask) {
        const kv_entry *o = &g->kv[g->kv_hash[h] - 1];
        if (o->key_len == e->key_len && memcmp(o->key, e->key, (size_t)e->key_len) == 0)
            return -1;
    }
    g->kv_hash[h] = (uint32_t)(i + 1);
    return 0;
}

static int parse_kv(llm_gguf *g, cursor *c, uint64_t i)
{
    kv_entry *e = &g->kv[i];
    char shown[84];
    int r = take_str(c, &e->key, &e->key_len);
    if (r == -3)
        return fail(c, LLM_EFORMAT, "metadata entry %llu: key length %llu exceeds limit %u",
                    (unsigned long long)i, (unsigned long long)e->key_len, LLM_GGUF_MAX_STRING);
    if (r)
        return fail(c, LLM_EFORMAT, "metadata entry %llu: key runs past end of file",
                    (unsigned long long)i);
    if (e->key_len == 0)
        return fail(c, LLM_EFORMAT, "metadata entry %llu has an empty key", (unsigned long long)i);
    const char *name = show(e->key, e->key_len, shown);
    if (kv_insert(g, i))
        return fail(c, LLM_EFORMAT, "duplicate metadata key '%s'", name);
    if (take_u32(c, &e->type))
        return fail(c, LLM_EFORMAT, "metadata '%s': value type runs past end of file", name);
    if (e->type == LLM_GGUF_ARRAY) {
        size_t start = c->pos;
        r = skip_array(c, name, 1, &e->elem_type, &e->count);
        if (r)
            return r;
        e->val = c->p + start + 12;
        e->val_len = c->pos - start - 12;
        return e->elem_type == LLM_GGUF_STRING ? index_strings(e, c) : 0;
    }
    size_t start = c->pos;
    r = skip_value(c, name, e->type, 0);
    if (r)
        return r;
    e->val = c->p + start;
    e->val_len = c->pos - start;
    return 0;
}

/* general.alignment must be a u32 power of two when present. */
static int read_alignment(llm_gguf *g, cursor *c)
{
    static const char key[] = "general.alignment";
    const kv_entry *e = kv_lookup(g, (const unsigned char *)key, sizeof key - 1);
    g->alignment = LLM_GGUF_DEFAULT_ALIGNMENT;
    if (!e)
        return 0;
    uint64_t a = e->type == LLM_GGUF_U32 ? le(e->val, 4) : 0;
    if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 30))
        return fail(c, LLM_EFORMAT, "general.alignment must be a u32 power of two");
    g->alignment = (uint32_t)a;
    return 0;
}

/* ---- tensor parsing -------------------------------------------------- */

static int t_insert(llm_gguf *g, uint64_t i)
{
    const char *name = g->tensors[i].name;
    size_t len = strlen(name);
    uint64_t h = hash_bytes((const unsigned char *)name, len) & g->t_mask;
    for (; g->t_hash[h]; h = (h + 1) & g->t_mask)
        if (strcmp(g->tensors[g->t_hash[h] - 1].name, name) == 0)
            return -1;
    g->t_hash[h] = (uint32_t)(i + 1);
    return 0;
}

/* Reads dims and type; `name` is the printable form for error text. */
static int parse_tensor_shape(cursor *c, llm_gguf_tensor *t, const char *name)
{
    if (take_u32(c, &t->n_dims))
        return fail(c, LLM_EFORMAT, "tensor '%s': header runs past end of file", name);
    if (t->n_dims == 0 || t->n_dims > LLM_GGUF_MAX_DIMS)
        return fail(c, LLM_EFORMAT, "tensor '%s' has %u dimensions (must be 1..%u)", name, t->n_dims,
                    LLM_GGUF_MAX_DIMS);
    uint64_t total = 1;
    for (uint32_t d = 0; d < LLM_GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d < t->n_dims && take(c, 8, &t->ne[d]))
            return fail(c, LLM_EFORMAT, "tensor '%s': header runs past end of file", name);
        /* Element counts are int64 in ggml; keep the product below that. */
        if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX / total)
            return fail(c, LLM_EFORMAT, "tensor '%s' has an invalid shape (dimension %u is %llu)", name, d,
                        (unsigned long long)t->ne[d]);
        total *= t->ne[d];
    }
    if (take_u32(c, &t->type))
        return fail(c, LLM_EFORMAT, "tensor '%s': header runs past end of file", name);
    const llm_type_traits *tt = llm_type_find(c->types, t->type);
    if (!tt)
        return fail(c, LLM_EFORMAT, "tensor '%s' has unknown type %u", name, t->type);
    uint64_t row;
    if (llm_type_traits_row_bytes(tt, t->ne[0], &row))
        return fail(c, LLM_EFORMAT, "tensor '%s' row of %llu elements is not a multiple of %s's block of %u",
                    name, (unsigned long long)t->ne[0], tt->name, tt->block_elems);
    uint64_t rows = total / t->ne[0];
    if (row != 0 && rows > UINT64_MAX / row)
        return fail(c, LLM_EFORMAT, "tensor '%s' size overflows", name);
    t->nbytes = row * rows;
    return 0;
}

static int parse_tensor(llm_gguf *g, cursor *c, uint64_t i, char **name_out)
{
    llm_gguf_tensor *t = &g->tensors[i];
    const unsigned char *s;
    uint64_t len;
    char shown[84];
    if (take_str(c, &s, &len))
        return fail(c, LLM_EFORMAT, "tensor %llu: name runs past end of file", (unsigned long long)i);
    if (len == 0 || len > LLM_GGUF_MAX_NAME)
        return fail(c, LLM_EFORMAT, "tensor %llu: name length %llu is not 1..%u", (unsigned long long)i,
                    (unsigned long long)len, LLM_GGUF_MAX_NAME);
    if (memchr(s, 0, (size_t)len))
        return fail(c, LLM_EFORMAT, "tensor %llu: name '%s' contains a NUL byte", (unsigned long long)i,
                    show(s, len, shown));
    /* The stored name keeps the file's bytes; errors print a safe copy. */
    memcpy(*name_out, s, (size_t)len);
    (*name_out)[len] = '\0';
    t->name = *name_out;
    *name_out += len + 1;
    const char *pretty = show(s, len, shown);
    if (t_insert(g, i))
        return fail(c, LLM_EFORMAT, "duplicate tensor name '%s'", pretty);
    int r = parse_tensor_shape(c, t, pretty);
    if (r)
        return r;
    if (take(c, 8, &g->tensor_off[i]))
        return fail(c, LLM_EFORMAT, "tensor '%s': header runs past end of file", pretty);
    if (g->tensor_off[i] % g->alignment != 0)
        return fail(c, LLM_EFORMAT, "tensor '%s' offset %llu is not a multiple of alignment %u", pretty,
                    (unsigned long long)g->tensor_off[i], g->alignment);
    return 0;
}

/* Checks every tensor's range once the data section start is known. */
static int place_tensors(llm_gguf *g, cursor *c)
{
    char shown[84];
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        llm_gguf_tensor *t = &g->tensors[i];
        uint64_t off = g->tensor_off[i];
        if (off > UINT64_MAX - g->data_offset || g->data_offset + off > g->size ||
            t->nbytes > g->size - (g->data_offset + off))
            return fail(c, LLM_EFORMAT, "tensor '%s' data runs past end of file",
                        show((const unsigned char *)t->name, strlen(t->name), shown));
        t->data = g->base + g->data_offset + off;
    }
    return 0;
}

/* ---- open / close ---------------------------------------------------- */

static int parse_header(llm_gguf *g, cursor *c)
{
    uint64_t magic;
    if (left(c) < 24)
        return fail(c, LLM_EFORMAT, "truncated header (%zu bytes)", c->len);
    take(c, 4, &magic);
    if (magic != LLM_GGUF_MAGIC)
        return fail(c, LLM_EFORMAT, "bad magic (not a GGUF file)");
    take_u32(c, &g->version);
    if (g->version != 2 && g->version != 3)
        return fail(c, LLM_EFORMAT, "unsupported version %u (need 2 or 3)", g->version);
    take(c, 8, &g->n_tensors);
    take(c, 8, &g->n_kv);
    if (g->n_tensors > LLM_GGUF_MAX_TENSORS)
        return fail(c, LLM_EFORMAT, "tensor count %llu exceeds limit %u",
                    (unsigned long long)g->n_tensors, LLM_GGUF_MAX_TENSORS);
    if (g->n_kv > LLM_GGUF_MAX_KV)
        return fail(c, LLM_EFORMAT, "metadata count %llu exceeds limit %u", (unsigned long long)g->n_kv,
                    LLM_GGUF_MAX_KV);
    /* Smallest encodings: a kv is 8+1+4+1 bytes, a tensor info 8+1+4+8+4+8. */
    if (g->n_kv > left(c) / 14)
        return fail(c, LLM_EFORMAT, "metadata count %llu is more than the file could hold",
                    (unsigned long long)g->n_kv);
    if (g->n_tensors > left(c) / 33)
        return fail(c, LLM_EFORMAT, "tensor count %llu is more than the file could hold",
                    (unsigned long long)g->n_tensors);
    return 0;
}

static int alloc_tables(llm_gguf *g, cursor *c)
{
    g->kv_mask = table_size(g->n_kv) - 1;
    g->t_mask = table_size(g->n_tensors) - 1;
    g->kv = calloc((size_t)g->n_kv + 1, sizeof *g->kv);
    g->kv_hash = calloc((size_t)g->kv_mask + 1, sizeof *g->kv_hash);
    g->tensors = calloc((size_t)g->n_tensors + 1, sizeof *g->tensors);
    g->tensor_off = calloc((size_t)g->n_tensors + 1, sizeof *g->tensor_off);
    g->t_hash = calloc((size_t)g->t_mask + 1, sizeof *g->t_hash);
    g->names = malloc((size_t)g->n_tensors * (LLM_GGUF_MAX_NAME + 1) + 1);
    if (!g->kv || !g->kv_hash || !g->tensors || !g->tensor_off || !g->t_hash || !g->names)
        return fail(c, LLM_ENOMEM, "out of memory for %llu tensors and %llu metadata entries",
                    (unsigned long long)g->n_tensors, (unsigned long long)g->n_kv);
    return 0;
}

static int parse_all(llm_gguf *g, cursor *c)
{
    int r = parse_header(g, c);
    if (!r)
        r = alloc_tables(g, c);
    for (uint64_t i = 0; !r && i < g->n_kv; i++)
        r = parse_kv(g, c, i);
    if (!r)
        r = read_alignment(g, c);
    char *names = g->names;
    for (uint64_t i = 0; !r && i < g->n_tensors; i++)
        r = parse_tensor(g, c, i, &names);
    if (r)
        return r;
    uint64_t pos = c->pos;
    g->data_offset = (pos + g->alignment - 1) / g->alignment * g->alignment;
    return place_tensors(g, c);
}

static int open_buffer(const unsigned char *buf, size_t len, int mapped, const llm_type_set *types,
                       llm_gguf **out, char *err, size_t errlen)
{
    cursor c = {buf, len, 0, err, errlen, types};
    llm_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        if (mapped == 1)
            munmap((void *)buf, len);
        else if (mapped == 2)
            free((void *)buf);
        return fail(&c, LLM_ENOMEM, "out of memory");
    }
    g->base = buf;
    g->size = len;
    g->mapped = mapped;
    int r = parse_all(g, &c);
    if (r) {
        llm_gguf_close(g);
        return r;
    }
    if (err && errlen)
        err[0] = '\0';
    *out = g;
    return 0;
}

int llm_gguf_open_memory_types(const void *buf, size_t len, const llm_type_set *types, llm_gguf **out,
                               char *err, size_t errlen)
{
    *out = NULL;
    return open_buffer(buf, len, 0, types, out, err, errlen);
}

int llm_gguf_open_memory(const void *buf, size_t len, llm_gguf **out, char *err, size_t errlen)
{
    return llm_gguf_open_memory_types(buf, len, NULL, out, err, errlen);
}

/* Opens path as a regular file of at least a header's 24 bytes: 0 with
 * *fd and *size, or the status (the descriptor closed, c's err set). Both
 * the mapping and the reading open go through it. */
static int open_regular(cursor *c, const char *path, int *fd, size_t *size)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return fail(c, LLM_EIO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > SIZE_MAX) {
        close(*fd);
        return fail(c, LLM_EIO, "'%s' is not a readable regular file", path);
    }
    if ((uint64_t)st.st_size < 24) {
        close(*fd);
        return fail(c, LLM_EFORMAT, "truncated header (%lld bytes)", (long long)st.st_size);
    }
    *size = (size_t)st.st_size;
    return 0;
}

/* Asks for 2 MiB pages under the weights (advice only; failure changes
 * nothing). Decode streams every weight once per token, and with 4 KiB
 * pages each page costs a TLB walk, which a VM's nested paging makes
 * dearer. For the file mapping the advice makes a page-cache miss read
 * the file in 2 MiB folios, which the kernel then maps with huge pages
 * for this and every later mapping of the file (1B Q8_0 file read cold
 * by one bench_engine run: 1018 of 1142 MB PMD-mapped with the advice,
 * 74 MB without); pages already cached stay as they are. The speed gain
 * is not settled yet (bench/results/cpu_decode.md). */
static void want_huge_pages(void *p, size_t len)
{
#ifdef MADV_HUGEPAGE
    if (len >= (size_t)2 << 20) /* else no huge page fits: leave the VMA whole */
        (void)madvise(p, len, MADV_HUGEPAGE);
#else
    (void)p;
    (void)len;
#endif
}

int llm_gguf_open_types(const char *path, const llm_type_set *types, llm_gguf **out, char *err,
                        size_t errlen)
{
    cursor c = {NULL, 0, 0, err, errlen, types};
    *out = NULL;
    int fd = -1;
    size_t len = 0;
    int rc = open_regular(&c, path, &fd, &len);
    if (rc)
        return rc;
    void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int saved = errno;
    close(fd);
    if (m == MAP_FAILED)
        return fail(&c, LLM_EIO, "cannot map '%s': %s", path, strerror(saved));
    want_huge_pages(m, len);
    return open_buffer(m, len, 1, types, out, err, errlen);
}

int llm_gguf_read_types(const char *path, const llm_type_set *types, llm_gguf **out, char *err,
                        size_t errlen)
{
    cursor c = {NULL, 0, 0, err, errlen, types};
    *out = NULL;
    int fd = -1;
    size_t len = 0, got = 0;
    int rc = open_regular(&c, path, &fd, &len);
    if (rc)
        return rc;
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, len) != 0) {
        close(fd);
        return fail(&c, LLM_ENOMEM, "out of memory reading '%s' (%zu bytes)", path, len);
    }
    want_huge_pages(buf, len);
    while (got < len) {
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int saved = n < 0 ? errno : 0;
            close(fd);
            free(buf);
            return fail(&c, LLM_EIO, "reading '%s': %s", path,
                        saved ? strerror(saved) : "the file shrank while it was read");
        }
        got += (size_t)n;
    }
    close(fd);
    return open_buffer(buf, len, 2, types, out, err, errlen);
}

int llm_gguf_open(const char *path, llm_gguf **out, char *err, size_t errlen)
{
    return llm_gguf_open_types(path, NULL, out, err, errlen);
}

void llm_gguf_close(llm_gguf *g)
{
    if (!g)
        return;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++)
            free(g->kv[i].str_off);
    free(g->kv);
    free(g->kv_hash);
    free(g->tensors);
    free(g->tensor_off);
    free(g->t_hash);
    free(g->names);
    if (g->mapped == 1)
        munmap((void *)g->base, g->size);
    else if (g->mapped == 2)
        free((void *)g->base);
    free(g);
}

uint32_t llm_gguf_version(const llm_gguf *g) { return g->version; }
uint32_t llm_gguf_alignment(const llm_gguf *g) { return g->alignment; }
uint64_t llm_gguf_data_offset(const llm_gguf *g) { return g->data_offset; }
uint64_t llm_gguf_file_size(const llm_gguf *g) { return g->size; }

/* ---- getters --------------------------------------------------------- */

static const kv_entry *find(const llm_gguf *g, const char *key)
{
    return kv_lookup(g, (const unsigned char *)key, strlen(key));
}

/* Reads an integer element of type t at p as a signed/unsigned pair:
 * *neg set when the value is negative; *mag its magnitude (two's complement
 * for negative values is folded into neg + (uint64)value). */
static void read_int(uint32_t t, const unsigned char *p, int *neg, uint64_t *u, int64_t *s)
{
    uint32_t sz = llm_gguf_value_size(t);
    uint64_t raw = le(p, (int)sz);
    if (vtype_is_signed(t)) {
        unsigned bits = sz * 8;
        int64_t v = (bits < 64 && (raw >> (bits - 1)) & 1) ? (int64_t)(raw | (~0ull << bits)) : (int64_t)raw;
        *s = v;
        *neg = v < 0;
        *u = (uint64_t)v;
    } else {
        *u = raw;
        *neg = 0;
        *s = raw > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)raw;
    }
}

/* The integer value of key, read as by read_int; *is_signed from its type.
 * LLM_ENOKEY, or LLM_ETYPE for a value that is not an integer. */
static int find_int(const llm_gguf *g, const char *key, int *neg, uint64_t *u, int64_t *s,
                    int *is_signed)
{
    const kv_entry *e = find(g, key);
    if (!e)
        return LLM_ENOKEY;
    if (!vtype_is_int(e->type))
        return LLM_ETYPE;
    read_int(e->type, e->val, neg, u, s);
    *is_signed = vtype_is_signed(e->type);
    return 0;
}

static int get_uint(const llm_gguf *g, const char *key, uint64_t max, uint64_t *out)
{
    int neg, is_signed;
    uint64_t u;
    int64_t s;
    int r = find_int(g, key, &neg, &u, &s, &is_signed);
    if (r)
        return r;
    if (neg || u > max)
        return LLM_ERANGE;
    *out = u;
    return 0;
}

int llm_gguf_get_u32(const llm_gguf *g, const char *key, uint32_t *out)
{
    uint64_t v;
    int r = get_uint(g, key, UINT32_MAX, &v);
    if (!r)
        *out = (uint32_t)v;
    return r;
}

int llm_gguf_get_u64(const llm_gguf *g, const char *key, uint64_t *out)
{
    return get_uint(g, key, UINT64_MAX, out);
}

int llm_gguf_get_i64(const llm_gguf *g, const char *key, int64_t *out)
{
    int neg, is_signed;
    uint64_t u;
    int64_t s;
    int r = find_int(g, key, &neg, &u, &s, &is_signed);
    if (r)
        return r;
    if (!is_signed && u > (uint64_t)INT64_MAX)
        return LLM_ERANGE;
    *out = s;
    return 0;
}

static double read_float(uint32_t t, const unsigned char *p)
{
    if (t == LLM_GGUF_F32)
        return (double)llm_bits_f32((uint32_t)le(p, 4));
    uint64_t bits = le(p, 8);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

int llm_gguf_get_f32(const llm_gguf *g, const char *key, float *out)
{
    double d;
    int rc = llm_gguf_get_f64(g, key, &d);
    if (rc == 0)
        *out = (float)d;
    return rc;
}

int llm_gguf_get_f64(const llm_gguf *g, const char *key, double *out)
{
    const kv_entry *e = find(g, key);
    if (!e)
        return LLM_ENOKEY;
    if (e->type != LLM_GGUF_F32 && e->type != LLM_GGUF_F64)
        return LLM_ETYPE;
    *out = read_float(e->type, e->val);
    return 0;
}

int llm_gguf_get_bool(const llm_gguf *g, const char *key, int *out)
{
    const kv_entry *e = find(g, key);
    if (!e)
        return LLM_ENOKEY;
    if (e->type != LLM_GGUF_BOOL)
        return LLM_ETYPE;
    *out = e->val[0] != 0;
    return 0;
}

int llm_gguf_get_str(const llm_gguf *g, const char *key, const char **s, size_t *len)
{
    const kv_entry *e = find(g, key);
    if (!e)
        return LLM_ENOKEY;
    if (e->type != LLM_GGUF_STRING)
        return LLM_ETYPE;
    *len = (size_t)le(e->val, 8);
    *s = (const char *)e->val + 8;
    return 0;
}

int llm_gguf_get_arr(const llm_gguf *g, const char *key, uint32_t *elem_type, uint64_t *count,
                     const void **data)
{
    const kv_entry *e = find(g, key);
    if (!e)
        return LLM_ENOKEY;
    if (e->type != LLM_GGUF_ARRAY)
        return LLM_ETYPE;
    *elem_type = e->elem_type;
    *count = e->count;
    *data = e->val;
    return 0;
}

/* Finds array `key` and checks its element type with `accept`; then
 * ERANGE when i is past its end. */
static int find_arr(const llm_gguf *g, const char *key, uint64_t i, int (*accept)(uint32_t),
                    const kv_entry **out)
{
    const kv_entry *e = find(g, key);
    if (!e)
        return LLM_ENOKEY;
    if (e->type != LLM_GGUF_ARRAY || !accept(e->elem_type))
        return LLM_ETYPE;
    if (i >= e->count)
        return LLM_ERANGE;
    *out = e;
    return 0;
}

static int accept_str(uint32_t t)
{
    return t == LLM_GGUF_STRING;
}

static int accept_float(uint32_t t)
{
    return t == LLM_GGUF_F32 || t == LLM_GGUF_F64;
}

static int accept_int(uint32_t t)
{
    return vtype_is_int(t) || t == LLM_GGUF_BOOL;
}

int llm_gguf_arr_str(const llm_gguf *g, const char *key, uint64_t i, const char **s, size_t *len)
{
    const kv_entry *e;
    int r = find_arr(g, key, i, accept_str, &e);
    if (r)
        return r;
    const unsigned char *p = e->val + e->str_off[i];
    *len = (size_t)le(p, 8);
    *s = (const char *)p + 8;
    return 0;
}

int llm_gguf_arr_f32(const llm_gguf *g, const char *key, uint64_t i, float *out)
{
    const kv_entry *e;
    int r = find_arr(g, key, i, accept_float, &e);
    if (r)
        return r;
    *out = (float)read_float(e->elem_type, e->val + i * llm_gguf_value_size(e->elem_type));
    return 0;
}

int llm_gguf_arr_i64(const llm_gguf *g, const char *key, uint64_t i, int64_t *out)
{
    const kv_entry *e;
    int r = find_arr(g, key, i, accept_int, &e);
    if (r)
        return r;
    if (e->elem_type == LLM_GGUF_BOOL) {
        *out = e->val[i] != 0;
        return 0;
    }
    int neg;
    uint64_t u;
    int64_t s;
    read_int(e->elem_type, e->val + i * llm_gguf_value_size(e->elem_type), &neg, &u, &s);
    if (!vtype_is_signed(e->elem_type) && u > (uint64_t)INT64_MAX)
        return LLM_ERANGE;
    *out = s;
    return 0;
}

uint64_t llm_gguf_kv_count(const llm_gguf *g)
{
    return g->n_kv;
}

int llm_gguf_kv_at(const llm_gguf *g, uint64_t i, const char **key, size_t *key_len, uint32_t *type)
{
    if (i >= g->n_kv)
        return LLM_ERANGE;
    *key = (const char *)g->kv[i].key;
    *key_len = (size_t)g->kv[i].key_len;
    *type = g->kv[i].type;
    return 0;
}

uint64_t llm_gguf_tensor_count(const llm_gguf *g)
{
    return g->n_tensors;
}

const llm_gguf_tensor *llm_gguf_tensor_at(const llm_gguf *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const llm_gguf_tensor *llm_gguf_find_tensor(const llm_gguf *g, const char *name)
{
    if (!g->t_hash || !name)
        return NULL;
    size_t len = strlen(name);
    for (uint64_t h = hash_bytes((const unsigned char *)name, len) & g->t_mask;; h = (h + 1) & g->t_mask) {
        uint32_t slot = g->t_hash[h];
        if (slot == 0)
            return NULL;
        if (strcmp(g->tensors[slot - 1].name, name) == 0)
            return &g->tensors[slot - 1];
    }
}
