/* requant.c — `pm-modelwriter requant`: a GGUF file with its weight
 * matrices re-encoded to another type and everything else kept.
 *
 * Metadata is copied entry by entry in file order, each entry with its own
 * value type and value. That keeps general.alignment (a u32, which also
 * sets the writer's data alignment, so the output is laid out on the
 * input's boundaries) and general.file_type as they were: the tool does not
 * guess what a file's type label should become. Arrays of arrays are
 * refused; no model file we read has one.
 *
 * Tensors keep their order, names and shapes. One is converted when it has
 * two or more dimensions, its rows are whole blocks of the new type, and
 * its own type is one the engine converts and not already the new type:
 * each row is dequantized to f32 with the reference conversions (quant.h)
 * and quantized round-to-nearest as the writer writes it, so only one row
 * of floats is ever held. Every other tensor — vectors (norms, biases),
 * matrices whose rows do not fit the new type's blocks, tensors already of
 * the type, and types the engine can size but not convert — is copied
 * byte for byte from the input's mapping, which stays open until the write
 * ends. The output is written atomically by the GGUF writer (a temporary
 * file renamed over OUT), so a failure leaves OUT as it was, and OUT may
 * even be IN.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelwriter.h"
#include "quant.h"

typedef struct requant_opts {
    const char *out, *in;
    uint32_t type;
    int have_type;
} requant_opts;

static int parse_requant(int argc, char **argv, requant_opts *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 2; i < argc; i++) {
        const char *opt = argv[i];
        if (strcmp(opt, "-o") != 0 && strcmp(opt, "--type") != 0) {
            if (opt[0] == '-' && opt[1]) {
                fprintf(stderr, MW_NAME ": requant: unknown option '%s'\n", opt);
                return -1;
            }
            if (o->in) {
                fprintf(stderr, MW_NAME ": requant takes one input file (got '%s' and '%s')\n", o->in, opt);
                return -1;
            }
            o->in = opt;
            continue;
        }
        const char *val = i + 1 < argc ? argv[++i] : NULL;
        if (!val) {
            fprintf(stderr, MW_NAME ": requant: %s needs a value\n", opt);
            return -1;
        }
        if (strcmp(opt, "-o") == 0) {
            o->out = val;
        } else {
            if (mw_parse_type(val, &o->type))
                return -1;
            o->have_type = 1;
        }
    }
    if (!o->out || !o->have_type || !o->in) {
        fprintf(stderr, MW_NAME ": requant needs -o OUT, --type T and an input file\n");
        return -1;
    }
    return 0;
}

/* ---- metadata ------------------------------------------------------------ */

/* A numeric array: the reader hands out its little-endian bytes, the
 * writer takes elements in host layout; each element is moved through an
 * integer of its width, which carries a float's bits unchanged. */
static int copy_num_array(llm_gguf_writer *w, const char *key, uint32_t et, uint64_t count, const void *data)
{
    uint32_t sz = llm_gguf_value_size(et);
    const unsigned char *src = data;
    unsigned char *host = malloc((size_t)(count * sz) + 1);
    if (!host)
        return -1;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t v = 0;
        for (uint32_t b = 0; b < sz; b++)
            v |= (uint64_t)src[i * sz + b] << (8 * b);
        unsigned char *dst = host + i * sz;
        uint8_t v8 = (uint8_t)v;
        uint16_t v16 = (uint16_t)v;
        uint32_t v32 = (uint32_t)v;
        if (sz == 1)
            memcpy(dst, &v8, 1);
        else if (sz == 2)
            memcpy(dst, &v16, 2);
        else if (sz == 4)
            memcpy(dst, &v32, 4);
        else
            memcpy(dst, &v, 8);
    }
    llm_gguf_writer_set_arr(w, key, et, host, count);
    free(host);
    return 0;
}

static int copy_str_array(const llm_gguf *g, llm_gguf_writer *w, const char *key, uint64_t count)
{
    const char **strs = malloc((size_t)count * sizeof *strs + 1);
    size_t *lens = malloc((size_t)count * sizeof *lens + 1);
    int r = strs && lens ? 0 : -1;
    for (uint64_t i = 0; r == 0 && i < count; i++)
        r = llm_gguf_arr_str(g, key, i, &strs[i], &lens[i]);
    if (r == 0)
        llm_gguf_writer_set_arr_str(w, key, strs, lens, count);
    free(strs);
    free(lens);
    return r;
}

/* Copies an integer value of GGUF type `type`; the getter's wide value
 * is exact for every integer type and is narrowed back to the same width. */
static int copy_int(const llm_gguf *g, llm_gguf_writer *w, const char *key, uint32_t type)
{
    uint64_t u;
    int64_t s;
    int r;
    switch (type) {
    case LLM_GGUF_U8: case LLM_GGUF_U16: case LLM_GGUF_U32: case LLM_GGUF_U64:
        if ((r = llm_gguf_get_u64(g, key, &u)) != 0)
            return r;
        if (type == LLM_GGUF_U8)
            llm_gguf_writer_set_u8(w, key, (uint8_t)u);
        else if (type == LLM_GGUF_U16)
            llm_gguf_writer_set_u16(w, key, (uint16_t)u);
        else if (type == LLM_GGUF_U32)
            llm_gguf_writer_set_u32(w, key, (uint32_t)u);
        else
            llm_gguf_writer_set_u64(w, key, u);
        return 0;
    default:
        if ((r = llm_gguf_get_i64(g, key, &s)) != 0)
            return r;
        if (type == LLM_GGUF_I8)
            llm_gguf_writer_set_i8(w, key, (int8_t)s);
        else if (type == LLM_GGUF_I16)
            llm_gguf_writer_set_i16(w, key, (int16_t)s);
        else if (type == LLM_GGUF_I32)
            llm_gguf_writer_set_i32(w, key, (int32_t)s);
        else
            llm_gguf_writer_set_i64(w, key, s);
        return 0;
    }
}

static int copy_array(const llm_gguf *g, llm_gguf_writer *w, const char *key, char *err, size_t errlen)
{
    uint32_t et;
    uint64_t count;
    const void *data;
    if (llm_gguf_get_arr(g, key, &et, &count, &data) != 0)
        return -1;
    if (et == LLM_GGUF_ARRAY) {
        snprintf(err, errlen, "requant: metadata '%s' is an array of arrays, which requant does not copy", key);
        return -2;
    }
    return et == LLM_GGUF_STRING ? copy_str_array(g, w, key, count) : copy_num_array(w, key, et, count, data);
}

/* Copies the value of `key` (of GGUF type `type`). Writer failures are
 * sticky and reported at the end; -1 here is a reader failure, no memory,
 * or a value requant does not copy (err says which). A bool is read as
 * 0 or 1, which is all GGUF lets it hold. */
static int copy_value(const llm_gguf *g, llm_gguf_writer *w, const char *key, uint32_t type, char *err,
                      size_t errlen)
{
    float f;
    double d;
    int b, r;
    const char *str;
    size_t len;
    switch (type) {
    case LLM_GGUF_U8: case LLM_GGUF_U16: case LLM_GGUF_U32: case LLM_GGUF_U64:
    case LLM_GGUF_I8: case LLM_GGUF_I16: case LLM_GGUF_I32: case LLM_GGUF_I64:
        r = copy_int(g, w, key, type);
        break;
    case LLM_GGUF_F32:
        if ((r = llm_gguf_get_f32(g, key, &f)) == 0)
            llm_gguf_writer_set_f32(w, key, f);
        break;
    case LLM_GGUF_F64:
        if ((r = llm_gguf_get_f64(g, key, &d)) == 0)
            llm_gguf_writer_set_f64(w, key, d);
        break;
    case LLM_GGUF_BOOL:
        if ((r = llm_gguf_get_bool(g, key, &b)) == 0)
            llm_gguf_writer_set_bool(w, key, b);
        break;
    case LLM_GGUF_STRING:
        if ((r = llm_gguf_get_str(g, key, &str, &len)) == 0)
            llm_gguf_writer_set_str(w, key, str, len);
        break;
    case LLM_GGUF_ARRAY:
        if ((r = copy_array(g, w, key, err, errlen)) == -2)
            return -1;
        break;
    default:
        r = -1;
        break;
    }
    if (r)
        snprintf(err, errlen, "requant: metadata '%s' (value type %u) could not be copied", key, type);
    return r ? -1 : 0;
}

/* Copies metadata entry i. */
static int copy_kv(const llm_gguf *g, llm_gguf_writer *w, uint64_t i, char *err, size_t errlen)
{
    const char *kp;
    size_t klen;
    uint32_t type;
    if (llm_gguf_kv_at(g, i, &kp, &klen, &type) != 0) {
        snprintf(err, errlen, "requant: metadata entry %llu could not be read", (unsigned long long)i);
        return -1;
    }
    /* The getters and the writer take NUL-terminated keys. */
    if (memchr(kp, '\0', klen)) {
        snprintf(err, errlen, "requant: metadata entry %llu has a key with a NUL byte", (unsigned long long)i);
        return -1;
    }
    char *key = malloc(klen + 1);
    if (!key) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(key, kp, klen);
    key[klen] = '\0';
    int r = copy_value(g, w, key, type, err, errlen);
    free(key);
    return r;
}

/* ---- tensors ------------------------------------------------------------- */

/* Where a converted tensor's rows come from: its bytes in the input's
 * mapping, rows of row_bytes bytes of `type`. */
typedef struct row_src {
    const unsigned char *data;
    uint64_t row_bytes;
    uint32_t type;
} row_src;

static int dequant_row(void *ctx, uint64_t row, float *dst, uint64_t n)
{
    const row_src *s = ctx;
    llm_dequantize_row(s->type, s->data + row * s->row_bytes, dst, (size_t)n);
    return 0;
}

/* Matrices left in their type, counted for the notes. */
typedef struct requant_counts {
    unsigned rows_misfit;   /* rows not whole blocks of the new type */
    unsigned unconvertible; /* a type the engine can size but not convert */
} requant_counts;

/* Adds tensor t: converted to `type` (rows from *src, which must outlive
 * the write) or copied as it is. Vectors and tensors already of `type`
 * are copied without a note. */
static void add_tensor(llm_gguf_writer *w, const llm_gguf_tensor *t, uint32_t type, row_src *src,
                       requant_counts *n)
{
    int convert = 0;
    if (t->n_dims < 2 || t->type == type)
        convert = 0;
    else if (!llm_type_is_supported(t->type))
        n->unconvertible++;
    else if (t->ne[0] % llm_type_block_size(type) != 0)
        n->rows_misfit++;
    else
        convert = llm_type_row_bytes(t->type, t->ne[0], &src->row_bytes) == 0;
    if (!convert) {
        llm_gguf_writer_add_tensor_raw(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
        return;
    }
    src->data = t->data;
    src->type = t->type;
    llm_gguf_writer_add_tensor_gen(w, t->name, type, t->n_dims, t->ne, dequant_row, src);
}

/* Builds and writes the output of the open input g. */
static int requant(const requant_opts *o, const llm_gguf *g, char *err, size_t errlen)
{
    uint64_t nt = llm_gguf_tensor_count(g);
    row_src *srcs = calloc((size_t)nt + 1, sizeof *srcs);
    llm_gguf_writer *w = NULL;
    requant_counts n = {0};
    int rc = -1;
    if (!srcs || llm_gguf_writer_new(&w) != 0) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (uint64_t i = 0; i < llm_gguf_kv_count(g); i++)
        if (copy_kv(g, w, i, err, errlen) != 0)
            goto done;
    for (uint64_t i = 0; i < nt; i++)
        add_tensor(w, llm_gguf_tensor_at(g, i), o->type, &srcs[i], &n);
    if (llm_gguf_writer_error(w)[0]) {
        snprintf(err, errlen, "%s", llm_gguf_writer_error(w));
        goto done;
    }
    rc = llm_gguf_writer_write(w, o->out, err, errlen);
done:
    if (rc == 0 && n.rows_misfit)
        fprintf(stderr, MW_NAME ": note: %u weight matrices kept in their type (rows not a multiple of %u)\n",
                n.rows_misfit, llm_type_block_size(o->type));
    if (rc == 0 && n.unconvertible)
        fprintf(stderr, MW_NAME ": note: %u weight matrices copied as they are (types the engine cannot convert)\n",
                n.unconvertible);
    llm_gguf_writer_free(w);
    free(srcs);
    return rc;
}

int mw_requant(int argc, char **argv)
{
    requant_opts o;
    if (parse_requant(argc, argv, &o))
        return 2;
    char err[512];
    llm_gguf *g = NULL;
    int rc = llm_gguf_open(o.in, &g, err, sizeof err);
    if (rc == 0)
        rc = requant(&o, g, err, sizeof err);
    if (rc)
        fprintf(stderr, MW_NAME ": %s\n", err);
    llm_gguf_close(g);
    return rc ? 1 : 0;
}
