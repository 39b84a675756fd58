/* test_gguf.c — the GGUF reader and writer.
 *
 * Round trips (writer -> file -> reader) for every tensor type compare the
 * stored bytes and values with expectations computed independently (exact
 * binary fractions for F32/F16/BF16, hand-worked Q8_0/Q4_0 blocks). The
 * malformed table builds each bad file by hand and expects the exact
 * one-line error. Every prefix of a valid file must be rejected cleanly.
 *
 * Usage: test_gguf CASE
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>

#include "bytes.h"
#include "gguf.h"
#include "pm_check.h"
#include "quant.h"

/* ---- round trips ------------------------------------------------------- */

/* Writes one 2x32 tensor of `type` holding x, reads it back. */
static llm_gguf *roundtrip_tensor(uint32_t type, const float *x, char *path, size_t cap)
{
    llm_gguf_writer *w;
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    uint64_t ne[2] = {32, 2};
    CHECK_INT_EQ(llm_gguf_writer_set_str(w, "general.architecture", "llama", 5), 0);
    CHECK_INT_EQ(llm_gguf_writer_add_tensor_f32(w, "t", type, 2, ne, x), 0);
    CHECK_INT_EQ(llm_gguf_writer_add_tensor_f32(w, "norm", LLM_TYPE_F32, 1, ne, x), 0);
    tmp_path(path, cap, llm_type_name(type));
    char err[256];
    int rc = llm_gguf_writer_write(w, path, err, sizeof err);
    CHECK_INT_EQ(rc, 0);
    llm_gguf_writer_free(w);
    llm_gguf *g = NULL;
    rc = llm_gguf_open(path, &g, err, sizeof err);
    if (rc)
        fprintf(stderr, "open: %s\n", err);
    REQUIRE(rc == 0);
    CHECK_INT_EQ(llm_gguf_version(g), 3);
    CHECK_U64_EQ(llm_gguf_tensor_count(g), 2);
    const llm_gguf_tensor *t = llm_gguf_find_tensor(g, "t");
    REQUIRE(t != NULL);
    CHECK_INT_EQ(t->type, type);
    CHECK_INT_EQ(t->n_dims, 2);
    CHECK_U64_EQ(t->ne[0], 32);
    CHECK_U64_EQ(t->ne[1], 2);
    CHECK_U64_EQ(t->ne[2], 1);
    CHECK_U64_EQ(t->ne[3], 1);
    CHECK_INT_EQ((uintptr_t)t->data % 32, 0);
    const llm_gguf_tensor *n = llm_gguf_find_tensor(g, "norm");
    REQUIRE(n != NULL);
    CHECK_INT_EQ((uintptr_t)n->data % 32, 0);
    CHECK(memcmp(n->data, x, 32 * sizeof(float)) == 0);
    CHECK(llm_gguf_find_tensor(g, "absent") == NULL);
    return g;
}

/* Values exactly representable in every float type: k/8 for small k. */
static void exact_values(float *x)
{
    for (int i = 0; i < 64; i++)
        x[i] = (float)(i - 30) / 8.0f;
}

static void check_exact(uint32_t type, uint64_t want_bytes)
{
    float x[64], y[64];
    char path[512];
    exact_values(x);
    llm_gguf *g = roundtrip_tensor(type, x, path, sizeof path);
    const llm_gguf_tensor *t = llm_gguf_find_tensor(g, "t");
    CHECK_U64_EQ(t->nbytes, want_bytes);
    llm_dequantize_row(type, t->data, y, 64);
    for (int i = 0; i < 64; i++)
        CHECK_NEAR(y[i], (i - 30) / 8.0, 0);
    const unsigned char *b = t->data;
    if (type == LLM_TYPE_F16) /* -30/8 = -3.75: sign, exponent 1, mantissa 0.875 */
        CHECK_INT_EQ(b[0] | (b[1] << 8), 0xc380);
    if (type == LLM_TYPE_BF16) /* -3.75 = 0xc0700000 as f32 */
        CHECK_INT_EQ(b[0] | (b[1] << 8), 0xc070);
    llm_gguf_close(g);
    remove(path);
}

static void case_rt_f32(void) { check_exact(LLM_TYPE_F32, 256); }
static void case_rt_f16(void) { check_exact(LLM_TYPE_F16, 128); }
static void case_rt_bf16(void) { check_exact(LLM_TYPE_BF16, 128); }

static void case_rt_q8_0(void)
{
    /* Row 0: j - 16 (see test_quant: d 0x3008, q = round(x * 7.9375));
     * row 1: all zero (d 0, q 0). */
    static const int8_t q_want[32] = {-127, -119, -111, -103, -95, -87, -79, -71, -64, -56, -48,
                                      -40,  -32,  -24,  -16,  -8,  0,   8,   16,  24,  32,  40,
                                      48,   56,   64,   71,   79,  87,  95,  103, 111, 119};
    float x[64] = {0};
    char path[512];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16);
    llm_gguf *g = roundtrip_tensor(LLM_TYPE_Q8_0, x, path, sizeof path);
    const llm_gguf_tensor *t = llm_gguf_find_tensor(g, "t");
    CHECK_U64_EQ(t->nbytes, 68);
    const unsigned char *b = t->data;
    CHECK_INT_EQ(b[0] | (b[1] << 8), 0x3008);
    for (int j = 0; j < 32; j++)
        CHECK_INT_EQ((int8_t)b[2 + j], q_want[j]);
    for (int j = 34; j < 68; j++)
        CHECK_INT_EQ(b[j], 0);
    llm_gguf_close(g);
    remove(path);
}

static void case_rt_q4_0(void)
{
    /* Row 0: j - 12 (see test_quant: d 0xc0c0 = -2.375); row 1: constant
     * 1.0, whose largest element 1.0 gives d = -0.125 (fp16 0xb000), every
     * x/d = -8, nibble trunc(-8 + 8.5) = 0. */
    static const uint8_t bytes_want[16] = {0x6d, 0x6d, 0x5c, 0x5c, 0x5b, 0x4b, 0x4b, 0x3a,
                                           0x3a, 0x39, 0x29, 0x28, 0x18, 0x18, 0x07, 0x07};
    float x[64], y[64];
    char path[512];
    for (int j = 0; j < 32; j++) {
        x[j] = (float)(j - 12);
        x[32 + j] = 1.0f;
    }
    llm_gguf *g = roundtrip_tensor(LLM_TYPE_Q4_0, x, path, sizeof path);
    const llm_gguf_tensor *t = llm_gguf_find_tensor(g, "t");
    CHECK_U64_EQ(t->nbytes, 36);
    const unsigned char *b = t->data;
    CHECK_INT_EQ(b[0] | (b[1] << 8), 0xc0c0);
    for (int j = 0; j < 16; j++)
        CHECK_INT_EQ(b[2 + j], bytes_want[j]);
    CHECK_INT_EQ(b[18] | (b[19] << 8), 0xb000);
    for (int j = 0; j < 16; j++)
        CHECK_INT_EQ(b[20 + j], 0x00);
    llm_dequantize_row(LLM_TYPE_Q4_0, t->data, y, 64);
    for (int j = 32; j < 64; j++)
        CHECK_NEAR(y[j], 1.0, 0);
    llm_gguf_close(g);
    remove(path);
}

/* Every metadata type through the writer and the typed getters. */
static void case_metadata(void)
{
    llm_gguf_writer *w;
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    int32_t ints[3] = {-1, 0, 70000};
    float floats[2] = {0.5f, -2.25f};
    uint8_t bools[2] = {1, 0};
    const char *strs[3] = {"a", "", "\xe2\x96\x81the"};
    int rc = 0;
    rc |= llm_gguf_writer_set_u8(w, "u8", 200);
    rc |= llm_gguf_writer_set_i8(w, "i8", -5);
    rc |= llm_gguf_writer_set_u16(w, "u16", 60000);
    rc |= llm_gguf_writer_set_i16(w, "i16", -300);
    rc |= llm_gguf_writer_set_u32(w, "u32", 4000000000u);
    rc |= llm_gguf_writer_set_i32(w, "i32", 123456);
    rc |= llm_gguf_writer_set_u64(w, "u64", 1ull << 40);
    rc |= llm_gguf_writer_set_i64(w, "i64", -(1ll << 40));
    rc |= llm_gguf_writer_set_f32(w, "f32", 1e-5f);
    rc |= llm_gguf_writer_set_f64(w, "f64", 0.25);
    rc |= llm_gguf_writer_set_bool(w, "bool", 1);
    rc |= llm_gguf_writer_set_str(w, "str", "hello", 5);
    rc |= llm_gguf_writer_set_arr(w, "arr.i32", LLM_GGUF_I32, ints, 3);
    rc |= llm_gguf_writer_set_arr(w, "arr.f32", LLM_GGUF_F32, floats, 2);
    rc |= llm_gguf_writer_set_arr(w, "arr.bool", LLM_GGUF_BOOL, bools, 2);
    rc |= llm_gguf_writer_set_arr(w, "arr.empty", LLM_GGUF_U8, NULL, 0);
    rc |= llm_gguf_writer_set_arr_str(w, "arr.str", strs, NULL, 3);
    CHECK_INT_EQ(rc, 0);
    char path[512], err[256];
    tmp_path(path, sizeof path, "meta");
    CHECK_INT_EQ(llm_gguf_writer_write(w, path, err, sizeof err), 0);
    llm_gguf_writer_free(w);
    llm_gguf *g;
    REQUIRE(llm_gguf_open(path, &g, err, sizeof err) == 0);
    remove(path);

    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f;
    int b;
    const char *s;
    size_t len;
    CHECK_INT_EQ(llm_gguf_get_u32(g, "u8", &u32), 0);
    CHECK_INT_EQ(u32, 200);
    CHECK_INT_EQ(llm_gguf_get_u32(g, "u16", &u32), 0);
    CHECK_INT_EQ(u32, 60000);
    CHECK_INT_EQ(llm_gguf_get_u32(g, "u32", &u32), 0);
    CHECK_U64_EQ(u32, 4000000000u);
    CHECK_INT_EQ(llm_gguf_get_u32(g, "i32", &u32), 0); /* fits */
    CHECK_INT_EQ(u32, 123456);
    CHECK_INT_EQ(llm_gguf_get_u32(g, "i8", &u32), LLM_ERANGE); /* negative */
    CHECK_INT_EQ(llm_gguf_get_u32(g, "u64", &u32), LLM_ERANGE); /* too big */
    CHECK_INT_EQ(llm_gguf_get_u32(g, "str", &u32), LLM_ETYPE);
    CHECK_INT_EQ(llm_gguf_get_u32(g, "f32", &u32), LLM_ETYPE);
    CHECK_INT_EQ(llm_gguf_get_u32(g, "nope", &u32), LLM_ENOKEY);
    CHECK_INT_EQ(llm_gguf_get_u64(g, "u64", &u64), 0);
    CHECK_U64_EQ(u64, 1ull << 40);
    CHECK_INT_EQ(llm_gguf_get_i64(g, "i64", &i64), 0);
    CHECK_INT_EQ(i64, -(1ll << 40));
    CHECK_INT_EQ(llm_gguf_get_i64(g, "i16", &i64), 0);
    CHECK_INT_EQ(i64, -300);
    CHECK_INT_EQ(llm_gguf_get_f32(g, "f32", &f), 0);
    CHECK_NEAR(f, 1e-5f, 0);
    CHECK_INT_EQ(llm_gguf_get_f32(g, "f64", &f), 0);
    CHECK_NEAR(f, 0.25, 0);
    CHECK_INT_EQ(llm_gguf_get_f32(g, "u32", &f), LLM_ETYPE);
    double d;
    CHECK_INT_EQ(llm_gguf_get_f64(g, "f64", &d), 0);
    CHECK(d == 0.25);
    CHECK_INT_EQ(llm_gguf_get_f64(g, "f32", &d), 0);
    CHECK(d == (double)1e-5f); /* widened exactly, not rounded to 1e-5 */
    CHECK_INT_EQ(llm_gguf_get_f64(g, "i32", &d), LLM_ETYPE);
    CHECK_INT_EQ(llm_gguf_get_f64(g, "nope", &d), LLM_ENOKEY);
    CHECK_INT_EQ(llm_gguf_get_bool(g, "bool", &b), 0);
    CHECK_INT_EQ(b, 1);
    CHECK_INT_EQ(llm_gguf_get_bool(g, "u8", &b), LLM_ETYPE);
    CHECK_INT_EQ(llm_gguf_get_str(g, "str", &s, &len), 0);
    CHECK(len == 5 && memcmp(s, "hello", 5) == 0);

    uint32_t et;
    uint64_t count;
    const void *data;
    CHECK_INT_EQ(llm_gguf_get_arr(g, "arr.i32", &et, &count, &data), 0);
    CHECK_INT_EQ(et, LLM_GGUF_I32);
    CHECK_U64_EQ(count, 3);
    CHECK_INT_EQ(((const unsigned char *)data)[8], 0x70); /* 70000 = 0x11170 */
    CHECK_INT_EQ(llm_gguf_arr_i64(g, "arr.i32", 0, &i64), 0);
    CHECK_INT_EQ(i64, -1);
    CHECK_INT_EQ(llm_gguf_arr_i64(g, "arr.i32", 2, &i64), 0);
    CHECK_INT_EQ(i64, 70000);
    CHECK_INT_EQ(llm_gguf_arr_i64(g, "arr.i32", 3, &i64), LLM_ERANGE);
    CHECK_INT_EQ(llm_gguf_arr_i64(g, "arr.bool", 0, &i64), 0);
    CHECK_INT_EQ(i64, 1);
    CHECK_INT_EQ(llm_gguf_arr_f32(g, "arr.f32", 1, &f), 0);
    CHECK_NEAR(f, -2.25, 0);
    CHECK_INT_EQ(llm_gguf_arr_f32(g, "arr.i32", 0, &f), LLM_ETYPE);
    CHECK_INT_EQ(llm_gguf_get_arr(g, "arr.empty", &et, &count, &data), 0);
    CHECK_U64_EQ(count, 0);
    CHECK_INT_EQ(llm_gguf_arr_str(g, "arr.str", 2, &s, &len), 0);
    CHECK(len == 6 && memcmp(s, "\xe2\x96\x81the", 6) == 0);
    CHECK_INT_EQ(llm_gguf_arr_str(g, "arr.str", 1, &s, &len), 0);
    CHECK_INT_EQ(len, 0);
    CHECK_INT_EQ(llm_gguf_arr_str(g, "arr.str", 3, &s, &len), LLM_ERANGE);
    CHECK_INT_EQ(llm_gguf_arr_str(g, "arr.i32", 0, &s, &len), LLM_ETYPE);
    CHECK_INT_EQ(llm_gguf_arr_str(g, "str", 0, &s, &len), LLM_ETYPE);

    /* Enumeration keeps file order. */
    CHECK_U64_EQ(llm_gguf_kv_count(g), 17);
    const char *key;
    size_t key_len;
    CHECK_INT_EQ(llm_gguf_kv_at(g, 1, &key, &key_len, &et), 0);
    CHECK(key_len == 2 && memcmp(key, "i8", 2) == 0);
    CHECK_INT_EQ(et, LLM_GGUF_I8);
    CHECK_INT_EQ(llm_gguf_kv_at(g, 17, &key, &key_len, &et), LLM_ERANGE);
    CHECK_U64_EQ(llm_gguf_tensor_count(g), 0);
    CHECK(llm_gguf_tensor_at(g, 0) == NULL);
    llm_gguf_close(g);
}

/* A hand-built version 2 file with a nested array, a custom alignment and a
 * tensor of a type we can size but not compute (q8_K). */
static void case_v2_handmade(void)
{
    bb b = {0};
    bb_u32(&b, 0x46554747u);
    bb_u32(&b, 2);
    bb_u64(&b, 2); /* tensors */
    bb_u64(&b, 3); /* kv */
    bb_str(&b, "general.alignment");
    bb_u32(&b, LLM_GGUF_U32);
    bb_u32(&b, 64);
    bb_str(&b, "nested");
    bb_u32(&b, LLM_GGUF_ARRAY);
    bb_u32(&b, LLM_GGUF_ARRAY);
    bb_u64(&b, 2);
    for (int i = 0; i < 2; i++) {
        bb_u32(&b, LLM_GGUF_STRING);
        bb_u64(&b, 1);
        bb_str(&b, i ? "y" : "x");
    }
    bb_str(&b, "pi");
    bb_u32(&b, LLM_GGUF_F64);
    bb_le(&b, 0x400921fb54442d18ull, 8);
    bb_str(&b, "w");
    bb_u32(&b, 1);
    bb_u64(&b, 3);
    bb_u32(&b, LLM_TYPE_F32);
    bb_u64(&b, 0);
    bb_str(&b, "k");
    bb_u32(&b, 1);
    bb_u64(&b, 256);
    bb_u32(&b, 15); /* q8_K: 292 bytes per 256 */
    bb_u64(&b, 64);
    bb_pad(&b, 64);
    size_t data_start = b.n;
    bb_f32(&b, 1.5f);
    bb_f32(&b, -2.0f);
    bb_f32(&b, 0.25f);
    bb_pad(&b, 64);
    for (int i = 0; i < 292; i++)
        bb_u8(&b, (uint8_t)i);
    /* The buffer's own alignment is irrelevant for an in-memory open. */
    llm_gguf *g;
    char err[256];
    int rc = llm_gguf_open_memory(b.p, b.n, &g, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    REQUIRE(rc == 0);
    CHECK_INT_EQ(llm_gguf_version(g), 2);
    CHECK_INT_EQ(llm_gguf_alignment(g), 64);
    CHECK_U64_EQ(llm_gguf_data_offset(g), data_start);
    float pi;
    CHECK_INT_EQ(llm_gguf_get_f32(g, "pi", &pi), 0);
    CHECK_NEAR(pi, 3.14159265358979, 1e-6);
    uint32_t et;
    uint64_t count;
    const void *data;
    CHECK_INT_EQ(llm_gguf_get_arr(g, "nested", &et, &count, &data), 0);
    CHECK_INT_EQ(et, LLM_GGUF_ARRAY);
    CHECK_U64_EQ(count, 2);
    const llm_gguf_tensor *w = llm_gguf_find_tensor(g, "w");
    REQUIRE(w != NULL);
    float v[3];
    memcpy(v, w->data, sizeof v);
    CHECK_NEAR(v[0], 1.5, 0);
    CHECK_NEAR(v[2], 0.25, 0);
    const llm_gguf_tensor *k = llm_gguf_find_tensor(g, "k");
    REQUIRE(k != NULL);
    CHECK_U64_EQ(k->nbytes, 292);
    CHECK((const unsigned char *)k->data == b.p + data_start + 64);
    CHECK(!llm_type_is_supported(k->type));
    llm_gguf_close(g);
    bb_free(&b);
}

/* ---- malformed files --------------------------------------------------- */

static void header(bb *b, uint32_t version, uint64_t nt, uint64_t nkv)
{
    bb_u32(b, 0x46554747u);
    bb_u32(b, version);
    bb_u64(b, nt);
    bb_u64(b, nkv);
}

static void tensor_info(bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                        uint64_t off)
{
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        bb_u64(b, ne[i]);
    bb_u32(b, type);
    bb_u64(b, off);
}

/* One tensor `name` of 4 f32 at offset `off`, with `data_bytes` of data. */
static void one_tensor(bb *b, const char *name, uint32_t type, uint64_t ne0, uint64_t off, size_t data_bytes)
{
    header(b, 3, 1, 0);
    uint64_t ne[1] = {ne0};
    tensor_info(b, name, 1, ne, type, off);
    bb_pad(b, 32);
    for (size_t i = 0; i < data_bytes; i++)
        bb_u8(b, 0);
}

static void expect_error(const bb *b, const char *want)
{
    llm_gguf *g = (llm_gguf *)1;
    char err[256] = "";
    int rc = llm_gguf_open_memory(b->p, b->n, &g, err, sizeof err);
    CHECK_INT_EQ(rc, LLM_EFORMAT);
    CHECK(g == NULL);
    CHECK_STR_EQ(err, want);
}

static void kv_key_type(bb *b, const char *key, uint32_t type)
{
    bb_str(b, key);
    bb_u32(b, type);
}

static void malformed_bad_magic(bb *b)
{
    bb_raw(b, "GGUX", 4);
    bb_u32(b, 3);
    bb_u64(b, 0);
    bb_u64(b, 0);
    expect_error(b, "gguf: bad magic (not a GGUF file)");
}

static void malformed_bad_version(bb *b)
{
    header(b, 1, 0, 0);
    expect_error(b, "gguf: unsupported version 1 (need 2 or 3)");
    bb_free(b);
    header(b, 4, 0, 0);
    expect_error(b, "gguf: unsupported version 4 (need 2 or 3)");
}

static void malformed_truncated_header(bb *b)
{
    header(b, 3, 0, 0);
    b->n = 10;
    expect_error(b, "gguf: truncated header (10 bytes)");
}

static void malformed_huge_tensor_count(bb *b)
{
    header(b, 3, 1ull << 40, 0);
    expect_error(b, "gguf: tensor count 1099511627776 exceeds limit 65536");
}

static void malformed_huge_kv_count(bb *b)
{
    header(b, 3, 0, UINT64_MAX);
    expect_error(b, "gguf: metadata count 18446744073709551615 exceeds limit 65536");
}

static void malformed_counts_past_end(bb *b)
{
    header(b, 3, 0, 1000);
    kv_key_type(b, "k", LLM_GGUF_U8);
    bb_u8(b, 1);
    expect_error(b, "gguf: metadata count 1000 is more than the file could hold");
    bb_free(b);
    header(b, 3, 100, 0);
    bb_pad(b, 64);
    expect_error(b, "gguf: tensor count 100 is more than the file could hold");
}

static void malformed_string_past_end(bb *b)
{
    header(b, 3, 0, 1);
    kv_key_type(b, "general.name", LLM_GGUF_STRING);
    bb_u64(b, 1000);
    bb_raw(b, "short", 5);
    expect_error(b, "gguf: metadata 'general.name': string length 1000 runs past end of file");
}

static void malformed_key_past_end(bb *b)
{
    header(b, 3, 0, 1);
    bb_u64(b, 50);
    bb_raw(b, "general.nam", 11);
    expect_error(b, "gguf: metadata entry 0: key runs past end of file");
}

static void malformed_string_too_long(bb *b)
{
    header(b, 3, 0, 1);
    kv_key_type(b, "k", LLM_GGUF_STRING);
    bb_u64(b, 1ull << 40);
    bb_raw(b, "0123456789", 10);
    expect_error(b, "gguf: metadata 'k': string length 1099511627776 exceeds limit 16777216");
}

static void malformed_unknown_value_type(bb *b)
{
    header(b, 3, 0, 1);
    kv_key_type(b, "k", 13);
    bb_u64(b, 0);
    expect_error(b, "gguf: metadata 'k' has unknown value type 13");
}

static void malformed_value_past_end(bb *b)
{
    header(b, 3, 0, 1);
    kv_key_type(b, "llama.block_count", LLM_GGUF_U32);
    bb_u8(b, 7);
    bb_u8(b, 0);
    expect_error(b, "gguf: metadata 'llama.block_count': value runs past end of file");
}

static void malformed_array_past_end(bb *b)
{
    header(b, 3, 0, 1);
    kv_key_type(b, "tokenizer.ggml.scores", LLM_GGUF_ARRAY);
    bb_u32(b, LLM_GGUF_F32);
    bb_u64(b, 1ull << 62);
    bb_f32(b, 1.0f);
    expect_error(b, "gguf: metadata 'tokenizer.ggml.scores': array of 4611686018427387904 elements runs past end of file");
    bb_free(b);
    /* A string array whose third string overruns. */
    header(b, 3, 0, 1);
    kv_key_type(b, "tokenizer.ggml.tokens", LLM_GGUF_ARRAY);
    bb_u32(b, LLM_GGUF_STRING);
    bb_u64(b, 3);
    bb_str(b, "a");
    bb_str(b, "b");
    bb_u64(b, 9);
    bb_raw(b, "cc", 2);
    expect_error(b, "gguf: metadata 'tokenizer.ggml.tokens': string length 9 runs past end of file");
}

static void malformed_array_elem_type(bb *b)
{
    header(b, 3, 0, 1);
    kv_key_type(b, "a", LLM_GGUF_ARRAY);
    bb_u32(b, 77);
    bb_u64(b, 0);
    expect_error(b, "gguf: metadata 'a': array has unknown element type 77");
}

static void malformed_nesting(bb *b)
{
    header(b, 3, 0, 1);
    kv_key_type(b, "deep", LLM_GGUF_ARRAY);
    for (int i = 0; i < 5; i++) {
        bb_u32(b, LLM_GGUF_ARRAY);
        bb_u64(b, 1);
    }
    bb_u32(b, LLM_GGUF_U8);
    bb_u64(b, 0);
    bb_pad(b, 64);
    expect_error(b, "gguf: metadata 'deep': arrays nested deeper than 4");
}

static void malformed_duplicate_key(bb *b)
{
    header(b, 3, 0, 2);
    kv_key_type(b, "general.architecture", LLM_GGUF_STRING);
    bb_str(b, "llama");
    kv_key_type(b, "general.architecture", LLM_GGUF_STRING);
    bb_str(b, "gpt2");
    expect_error(b, "gguf: duplicate metadata key 'general.architecture'");
}

static void malformed_empty_key(bb *b)
{
    header(b, 3, 0, 1);
    kv_key_type(b, "", LLM_GGUF_U8);
    bb_u8(b, 0);
    bb_pad(b, 32);
    expect_error(b, "gguf: metadata entry 0 has an empty key");
}

static void malformed_bad_alignment(bb *b)
{
    header(b, 3, 0, 1);
    kv_key_type(b, "general.alignment", LLM_GGUF_U32);
    bb_u32(b, 48);
    expect_error(b, "gguf: general.alignment must be a u32 power of two");
    bb_free(b);
    header(b, 3, 0, 1);
    kv_key_type(b, "general.alignment", LLM_GGUF_U64);
    bb_u64(b, 64);
    expect_error(b, "gguf: general.alignment must be a u32 power of two");
}

static void malformed_data_out_of_range(bb *b)
{
    one_tensor(b, "blk.3.attn_q.weight", LLM_TYPE_F32, 64, 0, 16);
    expect_error(b, "gguf: tensor 'blk.3.attn_q.weight' data runs past end of file");
    bb_free(b);
    one_tensor(b, "t", LLM_TYPE_F32, 4, UINT64_MAX - 31, 16); /* offset overflow */
    expect_error(b, "gguf: tensor 't' data runs past end of file");
}

static void malformed_misaligned_offset(bb *b)
{
    one_tensor(b, "t", LLM_TYPE_F32, 4, 4, 32);
    expect_error(b, "gguf: tensor 't' offset 4 is not a multiple of alignment 32");
}

static void malformed_unknown_type(bb *b)
{
    one_tensor(b, "t", 99, 4, 0, 32);
    expect_error(b, "gguf: tensor 't' has unknown type 99");
}

static void malformed_duplicate_tensor(bb *b)
{
    header(b, 3, 2, 0);
    uint64_t ne[1] = {4};
    tensor_info(b, "t", 1, ne, LLM_TYPE_F32, 0);
    tensor_info(b, "t", 1, ne, LLM_TYPE_F32, 32);
    bb_pad(b, 32);
    for (int i = 0; i < 64; i++)
        bb_u8(b, 0);
    expect_error(b, "gguf: duplicate tensor name 't'");
}

static void malformed_dims(bb *b)
{
    header(b, 3, 1, 0);
    uint64_t ne[5] = {1, 1, 1, 1, 1};
    tensor_info(b, "t", 5, ne, LLM_TYPE_F32, 0);
    bb_pad(b, 32);
    expect_error(b, "gguf: tensor 't' has 5 dimensions (must be 1..4)");
    bb_free(b);
    header(b, 3, 1, 0);
    uint64_t zero[2] = {4, 0};
    tensor_info(b, "t", 2, zero, LLM_TYPE_F32, 0);
    bb_pad(b, 32);
    expect_error(b, "gguf: tensor 't' has an invalid shape (dimension 1 is 0)");
    bb_free(b);
    header(b, 3, 1, 0);
    uint64_t big[2] = {1ull << 32, 1ull << 32};
    tensor_info(b, "t", 2, big, LLM_TYPE_F32, 0);
    bb_pad(b, 32);
    expect_error(b, "gguf: tensor 't' has an invalid shape (dimension 1 is 4294967296)");
}

static void malformed_block_row(bb *b)
{
    one_tensor(b, "t", LLM_TYPE_Q8_0, 33, 0, 64);
    expect_error(b, "gguf: tensor 't' row of 33 elements is not a multiple of q8_0's block of 32");
}

/* k-quant tensors: a super-block cut short by the end of the file, and a
 * row that is not whole super-blocks of 256. */
static void malformed_k_quant(bb *b)
{
    one_tensor(b, "blk.0.ffn_down.weight", LLM_TYPE_Q4_K, 512, 0, 287); /* needs 288 */
    expect_error(b, "gguf: tensor 'blk.0.ffn_down.weight' data runs past end of file");
    bb_free(b);
    one_tensor(b, "t", LLM_TYPE_Q6_K, 384, 0, 512);
    expect_error(b, "gguf: tensor 't' row of 384 elements is not a multiple of q6_K's block of 256");
    bb_free(b);
    one_tensor(b, "t", LLM_TYPE_Q5_K, 256, 0, 175); /* needs 176 */
    expect_error(b, "gguf: tensor 't' data runs past end of file");
}

/* Q2_K / Q3_K tensors one byte short of their super-blocks (2 x 84 and
 * 3 x 110 bytes), and rows that are not whole super-blocks. */
static void malformed_k23_quant(bb *b)
{
    one_tensor(b, "blk.0.attn_v.weight", LLM_TYPE_Q2_K, 512, 0, 167); /* needs 168 */
    expect_error(b, "gguf: tensor 'blk.0.attn_v.weight' data runs past end of file");
    bb_free(b);
    one_tensor(b, "t", LLM_TYPE_Q3_K, 768, 0, 329); /* needs 330 */
    expect_error(b, "gguf: tensor 't' data runs past end of file");
    bb_free(b);
    one_tensor(b, "t", LLM_TYPE_Q2_K, 288, 0, 512);
    expect_error(b, "gguf: tensor 't' row of 288 elements is not a multiple of q2_K's block of 256");
    bb_free(b);
    one_tensor(b, "t", LLM_TYPE_Q3_K, 128, 0, 512);
    expect_error(b, "gguf: tensor 't' row of 128 elements is not a multiple of q3_K's block of 256");
}

/* Q4_1 / Q5_0 / Q5_1 tensors one byte short of their blocks, and a row
 * that is not whole blocks of 32. KJV's ffn_down rows of 1408 in q5_0:
 * 44 blocks of 22 bytes = 968 a row. */
static void malformed_legacy_quant(bb *b)
{
    one_tensor(b, "blk.0.ffn_down.weight", LLM_TYPE_Q5_0, 1408, 0, 967);
    expect_error(b, "gguf: tensor 'blk.0.ffn_down.weight' data runs past end of file");
    bb_free(b);
    one_tensor(b, "t", LLM_TYPE_Q4_1, 64, 0, 39); /* needs 40 */
    expect_error(b, "gguf: tensor 't' data runs past end of file");
    bb_free(b);
    one_tensor(b, "t", LLM_TYPE_Q5_1, 96, 0, 71); /* needs 72 */
    expect_error(b, "gguf: tensor 't' data runs past end of file");
    bb_free(b);
    one_tensor(b, "t", LLM_TYPE_Q5_1, 48, 0, 64);
    expect_error(b, "gguf: tensor 't' row of 48 elements is not a multiple of q5_1's block of 32");
}

static void malformed_tensor_name(bb *b)
{
    header(b, 3, 1, 0);
    bb_u64(b, 3);
    bb_raw(b, "a\0b", 3);
    bb_u32(b, 1);
    bb_u64(b, 4);
    bb_u32(b, 0);
    bb_u64(b, 0);
    bb_pad(b, 32);
    expect_error(b, "gguf: tensor 0: name 'a?b' contains a NUL byte");
    bb_free(b);
    one_tensor(b, "", LLM_TYPE_F32, 4, 0, 16);
    expect_error(b, "gguf: tensor 0: name length 0 is not 1..255");
}

static void malformed_tensor_info_truncated(bb *b)
{
    header(b, 3, 1, 0);
    bb_str(b, "token_embd.weight");
    bb_u32(b, 2);
    bb_u64(b, 64);
    bb_u32(b, 0); /* the second dimension is cut after 4 of its 8 bytes */
    expect_error(b, "gguf: tensor 'token_embd.weight': header runs past end of file");
}

typedef void (*malformed_fn)(bb *b);

static const struct {
    const char *name;
    malformed_fn fn;
} k_malformed[] = {
    {"bad_magic", malformed_bad_magic},
    {"bad_version", malformed_bad_version},
    {"truncated_header", malformed_truncated_header},
    {"huge_tensor_count", malformed_huge_tensor_count},
    {"huge_kv_count", malformed_huge_kv_count},
    {"counts_past_end", malformed_counts_past_end},
    {"string_past_end", malformed_string_past_end},
    {"key_past_end", malformed_key_past_end},
    {"string_too_long", malformed_string_too_long},
    {"unknown_value_type", malformed_unknown_value_type},
    {"value_past_end", malformed_value_past_end},
    {"array_past_end", malformed_array_past_end},
    {"array_elem_type", malformed_array_elem_type},
    {"nesting", malformed_nesting},
    {"duplicate_key", malformed_duplicate_key},
    {"empty_key", malformed_empty_key},
    {"bad_alignment", malformed_bad_alignment},
    {"data_out_of_range", malformed_data_out_of_range},
    {"misaligned_offset", malformed_misaligned_offset},
    {"unknown_type", malformed_unknown_type},
    {"duplicate_tensor", malformed_duplicate_tensor},
    {"dims", malformed_dims},
    {"block_row", malformed_block_row},
    {"k_quant", malformed_k_quant},
    {"k23_quant", malformed_k23_quant},
    {"legacy_quant", malformed_legacy_quant},
    {"tensor_name", malformed_tensor_name},
    {"tensor_info_truncated", malformed_tensor_info_truncated},
};

/* Every strict prefix of a valid file with metadata and tensors is
 * rejected with a one-line "gguf: " message (and never crashes). */
static void case_prefixes(void)
{
    llm_gguf_writer *w;
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    const char *strs[2] = {"x", "yz"};
    float x[64];
    exact_values(x);
    uint64_t ne[2] = {32, 2};
    llm_gguf_writer_set_str(w, "general.architecture", "llama", 5);
    llm_gguf_writer_set_arr_str(w, "tokens", strs, NULL, 2);
    llm_gguf_writer_set_u32(w, "n", 7);
    llm_gguf_writer_add_tensor_f32(w, "a", LLM_TYPE_Q8_0, 2, ne, x);
    llm_gguf_writer_add_tensor_f32(w, "b", LLM_TYPE_F32, 1, ne, x);
    char path[512], err[256];
    tmp_path(path, sizeof path, "prefix");
    REQUIRE(llm_gguf_writer_write(w, path, err, sizeof err) == 0);
    llm_gguf_writer_free(w);
    FILE *f = fopen(path, "rb");
    REQUIRE(f != NULL);
    bb b = {0};
    unsigned char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        bb_raw(&b, chunk, n);
    fclose(f);
    remove(path);
    llm_gguf *g;
    REQUIRE(llm_gguf_open_memory(b.p, b.n, &g, err, sizeof err) == 0);
    llm_gguf_close(g);
    for (size_t len = 0; len < b.n; len++) {
        /* A fresh copy of exactly len bytes, so ASan sees any over-read. */
        unsigned char *p = malloc(len ? len : 1);
        REQUIRE(p != NULL);
        memcpy(p, b.p, len);
        int rc = llm_gguf_open_memory(p, len, &g, err, sizeof err);
        if (rc == 0 || strncmp(err, "gguf: ", 6) != 0 || strchr(err, '\n')) {
            CHECK_INT_EQ(rc, LLM_EFORMAT);
            fprintf(stderr, "prefix %zu: %s\n", len, err);
            free(p);
            break;
        }
        free(p);
    }
    bb_free(&b);
}

/* ---- writer behaviour -------------------------------------------------- */

static void case_writer_errors(void)
{
    llm_gguf_writer *w;
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    CHECK_INT_EQ(llm_gguf_writer_set_u32(w, "a", 1), 0);
    CHECK_INT_EQ(llm_gguf_writer_set_u32(w, "a", 2), LLM_EINVAL);
    CHECK_STR_EQ(llm_gguf_writer_error(w), "gguf: duplicate metadata key 'a'");
    /* Sticky: later calls fail with the first message. */
    CHECK_INT_EQ(llm_gguf_writer_set_u32(w, "b", 2), LLM_EINVAL);
    char path[512], err[256];
    tmp_path(path, sizeof path, "wfail");
    CHECK_INT_EQ(llm_gguf_writer_write(w, path, err, sizeof err), LLM_EINVAL);
    CHECK_STR_EQ(err, "gguf: duplicate metadata key 'a'");
    struct stat st;
    CHECK(stat(path, &st) != 0);
    llm_gguf_writer_free(w);

    static const float x[33] = {0};
    uint64_t ne33[1] = {33}, ne32[1] = {32};
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    CHECK_INT_EQ(llm_gguf_writer_add_tensor_f32(w, "t", LLM_TYPE_Q4_0, 1, ne33, x), LLM_EINVAL);
    CHECK_STR_EQ(llm_gguf_writer_error(w), "gguf: tensor 't': row of 33 elements does not fit q4_0 blocks of 32");
    llm_gguf_writer_free(w);
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    CHECK_INT_EQ(llm_gguf_writer_add_tensor_f32(w, "t", LLM_TYPE_F32, 1, ne32, x), 0);
    CHECK_INT_EQ(llm_gguf_writer_add_tensor_f32(w, "t", LLM_TYPE_F32, 1, ne32, x), LLM_EINVAL);
    CHECK_STR_EQ(llm_gguf_writer_error(w), "gguf: duplicate tensor name 't'");
    llm_gguf_writer_free(w);
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    CHECK_INT_EQ(llm_gguf_writer_add_tensor_f32(w, "t", 9, 1, ne32, x), LLM_EINVAL);
    CHECK_STR_EQ(llm_gguf_writer_error(w), "gguf: tensor 't': type 9 (q8_1) cannot be written");
    llm_gguf_writer_free(w);
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    CHECK_INT_EQ(llm_gguf_writer_add_tensor_f32(w, "t", 12, 1, ne32, x), LLM_EINVAL);
    CHECK_STR_EQ(llm_gguf_writer_error(w), "gguf: tensor 't': row of 32 elements does not fit q4_K blocks of 256");
    llm_gguf_writer_free(w);
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    CHECK_INT_EQ(llm_gguf_writer_set_u32(w, "general.alignment", 48), LLM_EINVAL);
    llm_gguf_writer_free(w);
}

/* Tensors given as bytes: written unchanged, a type the writer cannot
 * convert accepted, a byte count that does not match refused. */
static void case_writer_raw(void)
{
    unsigned char q8[68], q81[72];
    for (int i = 0; i < 68; i++)
        q8[i] = (unsigned char)(i * 7 + 1);
    for (int i = 0; i < 72; i++)
        q81[i] = (unsigned char)(255 - i);
    uint64_t ne[2] = {32, 2};
    llm_gguf_writer *w;
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    CHECK_INT_EQ(llm_gguf_writer_add_tensor_raw(w, "a", LLM_TYPE_Q8_0, 2, ne, q8, 68), 0);
    CHECK_INT_EQ(llm_gguf_writer_add_tensor_raw(w, "b", 9, 2, ne, q81, 72), 0); /* q8_1: 36 bytes a block */
    char path[512], err[256];
    tmp_path(path, sizeof path, "wraw");
    CHECK_INT_EQ(llm_gguf_writer_write(w, path, err, sizeof err), 0);
    llm_gguf_writer_free(w);
    llm_gguf *g;
    REQUIRE(llm_gguf_open(path, &g, err, sizeof err) == 0);
    const llm_gguf_tensor *a = llm_gguf_find_tensor(g, "a"), *b = llm_gguf_find_tensor(g, "b");
    REQUIRE(a && b);
    CHECK_INT_EQ(a->type, LLM_TYPE_Q8_0);
    CHECK_U64_EQ(a->nbytes, 68);
    CHECK(memcmp(a->data, q8, 68) == 0);
    CHECK_INT_EQ(b->type, 9);
    CHECK_U64_EQ(b->nbytes, 72);
    CHECK(memcmp(b->data, q81, 72) == 0);
    /* "a" takes 68 bytes padded to 96: "b" starts 96 bytes after it. */
    CHECK_INT_EQ((const unsigned char *)b->data - (const unsigned char *)a->data, 96);
    llm_gguf_close(g);
    remove(path);

    REQUIRE(llm_gguf_writer_new(&w) == 0);
    CHECK_INT_EQ(llm_gguf_writer_add_tensor_raw(w, "a", LLM_TYPE_Q8_0, 2, ne, q8, 67), LLM_EINVAL);
    CHECK_STR_EQ(llm_gguf_writer_error(w), "gguf: tensor 'a': 67 bytes given, its shape and type take 68");
    llm_gguf_writer_free(w);
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    CHECK_INT_EQ(llm_gguf_writer_add_tensor_raw(w, "a", 99, 2, ne, q8, 68), LLM_EINVAL);
    CHECK_STR_EQ(llm_gguf_writer_error(w), "gguf: tensor 'a': type 99 has no known layout");
    llm_gguf_writer_free(w);
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    CHECK_INT_EQ(llm_gguf_writer_add_tensor_raw(w, "a", LLM_TYPE_Q8_0, 2, ne, NULL, 68), LLM_EINVAL);
    CHECK_STR_EQ(llm_gguf_writer_error(w), "gguf: tensor 'a': no data");
    llm_gguf_writer_free(w);
}

static int gen_ramp(void *ctx, uint64_t row, float *dst, uint64_t n)
{
    int *calls = ctx;
    (*calls)++;
    for (uint64_t i = 0; i < n; i++)
        dst[i] = (float)(row * n + i);
    return 0;
}

static int gen_fail(void *ctx, uint64_t row, float *dst, uint64_t n)
{
    (void)ctx;
    (void)dst;
    (void)n;
    return row == 1 ? -1 : 0;
}

/* Generated rows, a custom alignment, atomic replacement of an existing
 * file, failure to a missing directory leaving nothing behind. */
static void case_writer_io(void)
{
    char path[512], err[256];
    tmp_path(path, sizeof path, "wio");
    FILE *f = fopen(path, "wb");
    REQUIRE(f != NULL);
    fputs("old contents", f);
    fclose(f);

    llm_gguf_writer *w;
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    int calls = 0;
    uint64_t ne[3] = {4, 3, 2};
    CHECK_INT_EQ(llm_gguf_writer_set_u32(w, "general.alignment", 128), 0);
    CHECK_INT_EQ(llm_gguf_writer_add_tensor_gen(w, "g", LLM_TYPE_F32, 3, ne, gen_ramp, &calls), 0);
    CHECK_INT_EQ(llm_gguf_writer_add_tensor_gen(w, "h", LLM_TYPE_F16, 1, ne, gen_ramp, &calls), 0);
    CHECK_INT_EQ(llm_gguf_writer_write(w, path, err, sizeof err), 0);
    CHECK_INT_EQ(calls, 7);
    llm_gguf *g;
    REQUIRE(llm_gguf_open(path, &g, err, sizeof err) == 0);
    CHECK_INT_EQ(llm_gguf_alignment(g), 128);
    CHECK_INT_EQ(llm_gguf_data_offset(g) % 128, 0);
    const llm_gguf_tensor *t = llm_gguf_find_tensor(g, "g");
    REQUIRE(t != NULL);
    CHECK_INT_EQ(t->n_dims, 3);
    CHECK_U64_EQ(t->nbytes, 96);
    float v[24];
    memcpy(v, t->data, sizeof v);
    for (int i = 0; i < 24; i++)
        CHECK_NEAR(v[i], i, 0);
    const llm_gguf_tensor *h = llm_gguf_find_tensor(g, "h");
    REQUIRE(h != NULL);
    CHECK_INT_EQ(((const unsigned char *)h->data - (const unsigned char *)t->data), 128);
    llm_gguf_close(g);
    remove(path);

    /* A generator failure aborts the write and leaves no file. */
    llm_gguf_writer_free(w);
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    CHECK_INT_EQ(llm_gguf_writer_add_tensor_gen(w, "g", LLM_TYPE_F32, 3, ne, gen_fail, NULL), 0);
    CHECK(llm_gguf_writer_write(w, path, err, sizeof err) < 0);
    CHECK_STR_EQ(err, "gguf: tensor 'g': row generator failed at row 1");
    struct stat st;
    CHECK(stat(path, &st) != 0);
    llm_gguf_writer_free(w);

    REQUIRE(llm_gguf_writer_new(&w) == 0);
    CHECK_INT_EQ(llm_gguf_writer_write(w, "/nonexistent-dir-pm/x.gguf", err, sizeof err), LLM_EIO);
    static const char want[] = "gguf: cannot create '/nonexistent-dir-pm/x.gguf.tmp.";
    CHECK(strncmp(err, want, sizeof want - 1) == 0);
    llm_gguf_writer_free(w);

    llm_gguf *none = (llm_gguf *)1;
    CHECK_INT_EQ(llm_gguf_open("/nonexistent-dir-pm/x.gguf", &none, err, sizeof err), LLM_EIO);
    CHECK(none == NULL);
    CHECK_STR_EQ(err, "gguf: cannot open '/nonexistent-dir-pm/x.gguf': No such file or directory");
    llm_gguf_close(NULL);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"rt_f32", case_rt_f32},     {"rt_f16", case_rt_f16},
        {"rt_bf16", case_rt_bf16},   {"rt_q8_0", case_rt_q8_0},
        {"rt_q4_0", case_rt_q4_0},   {"metadata", case_metadata},
        {"v2_handmade", case_v2_handmade}, {"prefixes", case_prefixes},
        {"writer_errors", case_writer_errors}, {"writer_io", case_writer_io},
        {"writer_raw", case_writer_raw},
    };
    REQUIRE(argc == 2);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(argv[1], cases[i].name) == 0) {
            cases[i].fn();
            return pm_check_result();
        }
    }
    for (size_t i = 0; i < sizeof k_malformed / sizeof k_malformed[0]; i++) {
        if (strncmp(argv[1], "bad_", 4) == 0 && strcmp(argv[1] + 4, k_malformed[i].name) == 0) {
            bb b = {0};
            k_malformed[i].fn(&b);
            bb_free(&b);
            return pm_check_result();
        }
    }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
