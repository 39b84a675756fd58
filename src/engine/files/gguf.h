/* gguf.h — GGUF model files: a validating reader and a writer.
 *
 * Reader. llm_gguf_open() maps a GGUF file (version 2 or 3) read-only and
 * validates all of it before returning: the header, every metadata entry
 * (keys, strings, arrays, nested arrays), every tensor description (name,
 * dimensions, type, offset) and every tensor's data range. After a
 * successful open nothing in the file is trusted blindly again: getters
 * only index into ranges that were checked. A malformed file yields one
 * error line naming the problem, e.g.
 *   "gguf: tensor 'blk.3.attn_q.weight' data runs past end of file".
 *
 * Limits (each is also an error naming the limit): at most
 * LLM_GGUF_MAX_TENSORS tensors, LLM_GGUF_MAX_KV metadata entries, strings of
 * at most LLM_GGUF_MAX_STRING bytes, array nesting of LLM_GGUF_MAX_DEPTH,
 * tensor names of at most LLM_GGUF_MAX_NAME bytes, 1..4 dimensions, and
 * every count bounded by what the remaining bytes could possibly hold.
 *
 * Metadata values are little-endian and NOT aligned in the mapping: the
 * getters return converted values; raw array data from llm_gguf_get_arr()
 * must be read with memcpy (or the llm_gguf_arr_* helpers). Strings are not
 * NUL-terminated; they come back as pointer + length, valid until close.
 *
 * Tensors: ne[0] is the contiguous (row) dimension, as in ggml; unused ne[]
 * entries are 1. A tensor's data lies at data_offset + offset in the file,
 * inside the file, aligned to general.alignment (default 32; the mapping
 * itself is page-aligned, so `data` is aligned to it too). Tensor names are
 * NUL-terminated copies owned by the handle.
 *
 * Ownership and threads: the handle owns the mapping and its index; every
 * pointer it hands out is valid until llm_gguf_close(). A handle is
 * immutable after open, so any number of threads may read it at once.
 *
 * Writer. llm_gguf_writer collects metadata and tensor descriptions, then
 * writes a GGUF v3 file in one pass to "<path>.tmp.<pid>" and renames it
 * over `path` (atomic on POSIX), so a reader never sees a half-written
 * file. Tensors are given as f32 (a buffer or a row generator) and converted
 * to the requested type while writing, so a large model never needs two
 * copies in memory; or as bytes already in their type's layout, written
 * as they are (a tool copying tensors from another file).
 */
#ifndef LLM_GGUF_H
#define LLM_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "phasemark/engine.h"
#include "quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes are the engine's one space (phasemark/engine.h, named by
 * llm_strerror): LLM_EIO (open/stat/mmap/write failed), LLM_EFORMAT
 * (malformed or unsupported file), LLM_ENOMEM, LLM_ENOKEY (no metadata
 * entry with that key), LLM_ETYPE (the entry has a type the getter cannot
 * return), LLM_ERANGE (a value that does not fit the requested type, an
 * index out of range), LLM_EINVAL (a bad argument; writer: duplicate name,
 * bad shape, ...). */

/* Metadata value types (GGUF's numbering). */
enum llm_gguf_vtype {
    LLM_GGUF_U8 = 0,
    LLM_GGUF_I8 = 1,
    LLM_GGUF_U16 = 2,
    LLM_GGUF_I16 = 3,
    LLM_GGUF_U32 = 4,
    LLM_GGUF_I32 = 5,
    LLM_GGUF_F32 = 6,
    LLM_GGUF_BOOL = 7,
    LLM_GGUF_STRING = 8,
    LLM_GGUF_ARRAY = 9,
    LLM_GGUF_U64 = 10,
    LLM_GGUF_I64 = 11,
    LLM_GGUF_F64 = 12
};

#define LLM_GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define LLM_GGUF_DEFAULT_ALIGNMENT 32u
#define LLM_GGUF_MAX_TENSORS 65536u
#define LLM_GGUF_MAX_KV 65536u
#define LLM_GGUF_MAX_STRING (16u << 20)   /* 16 MiB */
#define LLM_GGUF_MAX_NAME 255u            /* tensor name bytes (ggml: 63; we allow more) */
#define LLM_GGUF_MAX_DEPTH 4u             /* array-of-array nesting */
#define LLM_GGUF_MAX_DIMS 4u

typedef struct llm_gguf llm_gguf;

typedef struct llm_gguf_tensor {
    const char *name;     /* NUL-terminated, owned by the handle */
    uint32_t n_dims;      /* 1..4 */
    uint64_t ne[4];       /* elements per dimension; ne[0] contiguous; unused = 1 */
    uint32_t type;        /* ggml type id (quant.h); known layout (built in or
                             one of the types the handle was opened with),
                             maybe not convertible */
    const void *data;     /* inside the mapping */
    uint64_t nbytes;      /* bytes of data */
} llm_gguf_tensor;

/* Maps and validates the file at `path`. On success returns 0 and *out owns
 * the mapping; on failure returns a negative status, *out = NULL and a
 * one-line message (prefixed "gguf: ") in err (when errlen > 0). */
int llm_gguf_open(const char *path, llm_gguf **out, char *err, size_t errlen);

/* Same validation over a caller's buffer, which must outlive the handle and
 * stay unchanged (the handle points into it). Used by the fuzzer and tests.
 * The buffer needs no alignment; tensor data pointers are then only as
 * aligned as buf + offset. */
int llm_gguf_open_memory(const void *buf, size_t len, llm_gguf **out, char *err, size_t errlen);

/* llm_gguf_open / llm_gguf_open_memory for a file that may hold tensor
 * types beyond the built-in ones: a tensor's type is looked up in the
 * built-in table, then in `types` (NULL: none; only read during the call). */
int llm_gguf_open_types(const char *path, const llm_type_set *types, llm_gguf **out, char *err,
                        size_t errlen);
int llm_gguf_open_memory_types(const void *buf, size_t len, const llm_type_set *types, llm_gguf **out,
                               char *err, size_t errlen);

/* llm_gguf_open_types that reads the whole file into a buffer the handle
 * owns (freed at close) instead of mapping it: later changes to the file
 * cannot reach the handle. The buffer is page-aligned, as a mapping is. */
int llm_gguf_read_types(const char *path, const llm_type_set *types, llm_gguf **out, char *err,
                        size_t errlen);

/* Releases the handle and its mapping. NULL is harmless. */
void llm_gguf_close(llm_gguf *g);

uint32_t llm_gguf_version(const llm_gguf *g);     /* 2 or 3 */
uint32_t llm_gguf_alignment(const llm_gguf *g);   /* general.alignment or 32 */
uint64_t llm_gguf_data_offset(const llm_gguf *g); /* file offset of the tensor data section */
uint64_t llm_gguf_file_size(const llm_gguf *g);

/* Metadata by key (exact, case-sensitive). Each returns 0 and the value,
 * LLM_ENOKEY when absent, LLM_ETYPE when the entry's type is not
 * convertible, LLM_ERANGE when an integer does not fit.
 *   get_u32 / get_u64: any integer type whose value fits (negative fails).
 *   get_i64:           any integer type whose value fits.
 *   get_f32:           f32 or f64 (f64 rounded to f32).
 *   get_f64:           f32 or f64 (f32 widened, exactly).
 *   get_bool:          bool (1 or 0 in *out).
 *   get_str:           string; *s not NUL-terminated, valid until close. */
int llm_gguf_get_u32(const llm_gguf *g, const char *key, uint32_t *out);
int llm_gguf_get_u64(const llm_gguf *g, const char *key, uint64_t *out);
int llm_gguf_get_i64(const llm_gguf *g, const char *key, int64_t *out);
int llm_gguf_get_f32(const llm_gguf *g, const char *key, float *out);
int llm_gguf_get_f64(const llm_gguf *g, const char *key, double *out);
int llm_gguf_get_bool(const llm_gguf *g, const char *key, int *out);
int llm_gguf_get_str(const llm_gguf *g, const char *key, const char **s, size_t *len);

/* Array entry: element type, element count, and a pointer to the first
 * element's raw little-endian bytes (unaligned). For string arrays and
 * nested arrays *data points at the serialized elements; use
 * llm_gguf_arr_str() for strings. LLM_ETYPE when the entry is not an array. */
int llm_gguf_get_arr(const llm_gguf *g, const char *key, uint32_t *elem_type, uint64_t *count,
                     const void **data);

/* Element i of a string array, O(1) (an index is built at open).
 * LLM_ETYPE when the entry is not an array of strings, LLM_ERANGE when i >=
 * count. */
int llm_gguf_arr_str(const llm_gguf *g, const char *key, uint64_t i, const char **s, size_t *len);

/* Element i of a numeric array, converted: arr_f32 accepts f32/f64 arrays,
 * arr_i64 any integer array (and bool). LLM_ETYPE / LLM_ERANGE as above. */
int llm_gguf_arr_f32(const llm_gguf *g, const char *key, uint64_t i, float *out);
int llm_gguf_arr_i64(const llm_gguf *g, const char *key, uint64_t i, int64_t *out);

/* Bytes of one value of fixed-size type t (LLM_GGUF_U8 .. LLM_GGUF_F64,
 * BOOL); 0 for strings, arrays and unknown types. */
uint32_t llm_gguf_value_size(uint32_t t);

/* Enumeration of metadata in file order (for inspection tools). */
uint64_t llm_gguf_kv_count(const llm_gguf *g);
/* Key and value type of entry i; LLM_ERANGE when i >= count. */
int llm_gguf_kv_at(const llm_gguf *g, uint64_t i, const char **key, size_t *key_len, uint32_t *type);

/* Tensors in file order. */
uint64_t llm_gguf_tensor_count(const llm_gguf *g);
const llm_gguf_tensor *llm_gguf_tensor_at(const llm_gguf *g, uint64_t i); /* NULL when out of range */
const llm_gguf_tensor *llm_gguf_find_tensor(const llm_gguf *g, const char *name); /* NULL when absent */

/* ---- writer ---------------------------------------------------------- */

typedef struct llm_gguf_writer llm_gguf_writer;

/* Fills dst[0..n) with the f32 values of row `row` (ne[0] elements; rows
 * are counted over ne[1]*ne[2]*ne[3]). Returns 0, or negative to abort the
 * write. Called once per row in order, from the writing thread. */
typedef int (*llm_gguf_row_fn)(void *ctx, uint64_t row, float *dst, uint64_t n);

/* Creates an empty writer (GGUF v3, alignment 32). 0 or LLM_ENOMEM.
 * Free it with llm_gguf_writer_free(). */
int llm_gguf_writer_new(llm_gguf_writer **out);
void llm_gguf_writer_free(llm_gguf_writer *w);

/* The last error message of a failed writer call ("" when none). Errors
 * are sticky: after one failure every later add/write fails fast. */
const char *llm_gguf_writer_error(const llm_gguf_writer *w);

/* Metadata. Keys must be unique and non-empty; values are copied. Setting
 * "general.alignment" (u32, a power of two) also sets the data alignment. */
int llm_gguf_writer_set_u8(llm_gguf_writer *w, const char *key, uint8_t v);
int llm_gguf_writer_set_i8(llm_gguf_writer *w, const char *key, int8_t v);
int llm_gguf_writer_set_u16(llm_gguf_writer *w, const char *key, uint16_t v);
int llm_gguf_writer_set_i16(llm_gguf_writer *w, const char *key, int16_t v);
int llm_gguf_writer_set_u32(llm_gguf_writer *w, const char *key, uint32_t v);
int llm_gguf_writer_set_i32(llm_gguf_writer *w, const char *key, int32_t v);
int llm_gguf_writer_set_u64(llm_gguf_writer *w, const char *key, uint64_t v);
int llm_gguf_writer_set_i64(llm_gguf_writer *w, const char *key, int64_t v);
int llm_gguf_writer_set_f32(llm_gguf_writer *w, const char *key, float v);
int llm_gguf_writer_set_f64(llm_gguf_writer *w, const char *key, double v);
int llm_gguf_writer_set_bool(llm_gguf_writer *w, const char *key, int v);
int llm_gguf_writer_set_str(llm_gguf_writer *w, const char *key, const char *s, size_t len);
/* Numeric array: `count` elements of elem_type (a fixed-size type) in host
 * layout at data (e.g. float[] for F32, int32_t[] for I32, uint8_t 0/1 for
 * BOOL). */
int llm_gguf_writer_set_arr(llm_gguf_writer *w, const char *key, uint32_t elem_type, const void *data,
                            uint64_t count);
/* String array; lens == NULL means every string is NUL-terminated. */
int llm_gguf_writer_set_arr_str(llm_gguf_writer *w, const char *key, const char *const *strs,
                                const size_t *lens, uint64_t count);

/* Tensor types beyond the built-in ones that later add_tensor calls may
 * name (NULL: none). The writer borrows the set until it is freed. */
void llm_gguf_writer_set_types(llm_gguf_writer *w, const llm_type_set *types);

/* Tensors, written in the order added. `type` must convert (a built-in
 * supported type, or one of the writer's types) and ne[0] be a
 * multiple of its block size; names unique, 1..LLM_GGUF_MAX_NAME bytes.
 * add_tensor_f32 borrows `data` (ne[0]*...*ne[n_dims-1] floats, row-major
 * with ne[0] contiguous) until the write or free; add_tensor_gen calls
 * `fn` for each row at write time. */
int llm_gguf_writer_add_tensor_f32(llm_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                   const uint64_t *ne, const float *data);
int llm_gguf_writer_add_tensor_gen(llm_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                   const uint64_t *ne, llm_gguf_row_fn fn, void *ctx);
/* A tensor whose `nbytes` bytes at `data` are already in `type`'s layout
 * (rows of ne[0] elements, as a reader's llm_gguf_tensor holds them),
 * written unchanged. `type` needs only a known block layout (built in or
 * one of the writer's types), so a type that cannot be converted is fine;
 * nbytes must be what the shape and type take. `data` is borrowed until
 * the write or free. */
int llm_gguf_writer_add_tensor_raw(llm_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                   const uint64_t *ne, const void *data, uint64_t nbytes);

/* Writes the file atomically (temp file + fsync + rename). 0, or negative
 * with a one-line message in err; the temp file is removed on failure. The
 * writer may be written again or freed afterwards. */
int llm_gguf_writer_write(llm_gguf_writer *w, const char *path, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
