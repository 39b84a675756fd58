/* quant.c — the built-in type table and its reference row conversions (see
 * quant.h).
 *
 * These loops are the reference: kernels in the backends may be faster but
 * must agree with them bit for bit on quantization and to the last ulp on
 * dequantization. They allocate nothing.
 */
#include "quant.h"

#include <math.h>

static uint16_t load_u16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static void store_u16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v & 0xffu);
    p[1] = (unsigned char)(v >> 8);
}

/* ---- float types ---------------------------------------------------------- */

static void f32_to_f32(const void *src, float *dst, size_t n)
{
    memcpy(dst, src, n * sizeof(float));
}

static void f32_from_f32(const float *src, void *dst, size_t n)
{
    memcpy(dst, src, n * sizeof(float));
}

static void f16_to_f32(const void *src, float *dst, size_t n)
{
    const unsigned char *s = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = llm_fp16_to_f32(load_u16(s + 2 * i));
}

static void f16_from_f32(const float *src, void *dst, size_t n)
{
    unsigned char *d = dst;
    for (size_t i = 0; i < n; i++)
        store_u16(d + 2 * i, llm_f32_to_fp16(src[i]));
}

static void bf16_to_f32(const void *src, float *dst, size_t n)
{
    const unsigned char *s = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = llm_bf16_to_f32(load_u16(s + 2 * i));
}

static void bf16_from_f32(const float *src, void *dst, size_t n)
{
    unsigned char *d = dst;
    for (size_t i = 0; i < n; i++)
        store_u16(d + 2 * i, llm_f32_to_bf16(src[i]));
}

/* ---- quantized types ------------------------------------------------------ */

/* Blocks are addressed as bytes: a block's fp16 scale sits at offset 0 of
 * an 18- or 34-byte block, so consecutive blocks are not 2-byte aligned
 * in general and must not be read through the struct types. */
static void q8_0_to_f32(const void *src, float *dst, size_t n)
{
    const unsigned char *s = src;
    for (size_t b = 0; b < n / LLM_QK8_0; b++, s += sizeof(llm_block_q8_0)) {
        float d = llm_fp16_to_f32(load_u16(s));
        const signed char *q = (const signed char *)(s + 2);
        for (int j = 0; j < LLM_QK8_0; j++)
            dst[b * LLM_QK8_0 + (size_t)j] = d * (float)q[j];
    }
}

static void q4_0_to_f32(const void *src, float *dst, size_t n)
{
    const unsigned char *s = src;
    for (size_t b = 0; b < n / LLM_QK4_0; b++, s += sizeof(llm_block_q4_0)) {
        float d = llm_fp16_to_f32(load_u16(s));
        const unsigned char *q = s + 2;
        float *y = dst + b * LLM_QK4_0;
        for (int j = 0; j < LLM_QK4_0 / 2; j++) {
            y[j] = d * (float)((q[j] & 0x0f) - 8);
            y[j + LLM_QK4_0 / 2] = d * (float)((q[j] >> 4) - 8);
        }
    }
}

/* Truncates v toward zero into [lo, hi]. For finite in-range input this
 * is ggml's plain (int8_t) cast; NaN (from inf or nan weights) becomes lo
 * instead of undefined behaviour. */
static int clamp_trunc(float v, float lo, float hi)
{
    if (!(v >= lo))
        return (int)lo;
    if (v > hi)
        return (int)hi;
    return (int)v;
}

static void q8_0_from_f32(const float *x, void *out, size_t n)
{
    unsigned char *dst = out;
    for (size_t b = 0; b < n / LLM_QK8_0; b++, x += LLM_QK8_0, dst += sizeof(llm_block_q8_0)) {
        float amax = 0.0f;
        for (int j = 0; j < LLM_QK8_0; j++) {
            float a = fabsf(x[j]);
            if (a > amax)
                amax = a;
        }
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        store_u16(dst, llm_f32_to_fp16(d));
        for (int j = 0; j < LLM_QK8_0; j++)
            dst[2 + j] = (unsigned char)(signed char)clamp_trunc(roundf(x[j] * id), -127.0f, 127.0f);
    }
}

static void q4_0_from_f32(const float *x, void *out, size_t n)
{
    unsigned char *dst = out;
    for (size_t b = 0; b < n / LLM_QK4_0; b++, x += LLM_QK4_0, dst += sizeof(llm_block_q4_0)) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < LLM_QK4_0; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        /* Dividing by -8 maps the extreme element to nibble 0, which gives
         * the negative side one more level than the positive (-8..7). */
        float d = max / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        store_u16(dst, llm_f32_to_fp16(d));
        for (int j = 0; j < LLM_QK4_0 / 2; j++) {
            int lo = clamp_trunc(x[j] * id + 8.5f, 0.0f, 15.0f);
            int hi = clamp_trunc(x[j + LLM_QK4_0 / 2] * id + 8.5f, 0.0f, 15.0f);
            dst[2 + j] = (unsigned char)(lo | (hi << 4));
        }
    }
}

/* ---- the table ------------------------------------------------------------ */

/* Every built-in type: the thirteen that convert, and the block layouts of
 * ggml types we only size (never convert), so that files carrying them
 * still open and report clearly. File types are llama.cpp's
 * LLAMA_FTYPE_MOSTLY_* numbers. */
static const llm_type_traits k_types[] = {
    /* id  name   block bytes align float ftype to_f32 from_f32 */
    {0, "f32", 1, 4, 4, 1, 0, f32_to_f32, f32_from_f32},
    {1, "f16", 1, 2, 1, 1, 1, f16_to_f32, f16_from_f32},
    {2, "q4_0", LLM_QK4_0, sizeof(llm_block_q4_0), 1, 0, 2, q4_0_to_f32, q4_0_from_f32},
    {3, "q4_1", LLM_QK_LEGACY, LLM_Q4_1_BYTES, 1, 0, 3, llm_q4_1_to_f32, llm_q4_1_from_f32},
    {6, "q5_0", LLM_QK_LEGACY, LLM_Q5_0_BYTES, 1, 0, 8, llm_q5_0_to_f32, llm_q5_0_from_f32},
    {7, "q5_1", LLM_QK_LEGACY, LLM_Q5_1_BYTES, 1, 0, 9, llm_q5_1_to_f32, llm_q5_1_from_f32},
    {8, "q8_0", LLM_QK8_0, sizeof(llm_block_q8_0), 1, 0, 7, q8_0_to_f32, q8_0_from_f32},
    {9, "q8_1", 32, 36, 1, 0, 0, NULL, NULL},
    {10, "q2_K", LLM_QK_K, LLM_Q2_K_BYTES, 1, 0, 10, llm_q2_k_to_f32, llm_q2_k_from_f32},
    {11, "q3_K", LLM_QK_K, LLM_Q3_K_BYTES, 1, 0, 12, llm_q3_k_to_f32, llm_q3_k_from_f32},
    {12, "q4_K", LLM_QK_K, LLM_Q4_K_BYTES, 1, 0, 15, llm_q4_k_to_f32, llm_q4_k_from_f32},
    {13, "q5_K", LLM_QK_K, LLM_Q5_K_BYTES, 1, 0, 17, llm_q5_k_to_f32, llm_q5_k_from_f32},
    {14, "q6_K", LLM_QK_K, LLM_Q6_K_BYTES, 1, 0, 18, llm_q6_k_to_f32, llm_q6_k_from_f32},
    {15, "q8_K", 256, 292, 1, 0, 0, NULL, NULL},
    {20, "iq4_nl", 32, 18, 1, 0, 0, NULL, NULL}, /* llama-quantize's Q2_K/Q3_K fallback */
    {24, "i8", 1, 1, 1, 0, 0, NULL, NULL},
    {25, "i16", 1, 2, 1, 0, 0, NULL, NULL},
    {26, "i32", 1, 4, 1, 0, 0, NULL, NULL},
    {27, "i64", 1, 8, 1, 0, 0, NULL, NULL},
    {28, "f64", 1, 8, 1, 0, 0, NULL, NULL},
    {30, "bf16", 1, 2, 1, 1, 32, bf16_to_f32, bf16_from_f32},
};

static const llm_type_traits *find_builtin(uint32_t type)
{
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (k_types[i].id == type)
            return &k_types[i];
    return NULL;
}

const llm_type_traits *llm_type_find(const llm_type_set *extra, uint32_t type)
{
    const llm_type_traits *t = find_builtin(type);
    for (size_t i = 0; !t && extra && i < extra->count; i++)
        if (extra->types[i].id == type)
            t = &extra->types[i];
    return t;
}

int llm_type_traits_converts(const llm_type_traits *t)
{
    return t && t->to_f32 && t->from_f32;
}

int llm_type_traits_row_bytes(const llm_type_traits *t, uint64_t n, uint64_t *out)
{
    if (t->block_elems == 0 || n % t->block_elems != 0)
        return -1;
    uint64_t blocks = n / t->block_elems;
    if (t->block_bytes != 0 && blocks > UINT64_MAX / t->block_bytes)
        return -1;
    *out = blocks * t->block_bytes;
    return 0;
}

int llm_type_is_supported(uint32_t type)
{
    return llm_type_traits_converts(find_builtin(type));
}

int llm_type_is_known(uint32_t type)
{
    return find_builtin(type) != NULL;
}

const char *llm_type_name(uint32_t type)
{
    const llm_type_traits *t = find_builtin(type);
    return t ? t->name : "unknown";
}

static int ascii_lower(int c)
{
    return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
}

static int name_equal_nocase(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (ascii_lower((unsigned char)*a) != ascii_lower((unsigned char)*b))
            return 0;
    return *a == *b;
}

int llm_type_parse(const char *name, uint32_t *out)
{
    if (!name)
        return -1;
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++) {
        if (llm_type_traits_converts(&k_types[i]) && name_equal_nocase(name, k_types[i].name)) {
            *out = k_types[i].id;
            return 0;
        }
    }
    return -1;
}

uint32_t llm_type_block_size(uint32_t type)
{
    const llm_type_traits *t = find_builtin(type);
    return t ? t->block_elems : 0;
}

uint32_t llm_type_block_bytes(uint32_t type)
{
    const llm_type_traits *t = find_builtin(type);
    return t ? t->block_bytes : 0;
}

int llm_type_row_bytes(uint32_t type, uint64_t n, uint64_t *out)
{
    const llm_type_traits *t = find_builtin(type);
    return t ? llm_type_traits_row_bytes(t, n, out) : -1;
}

void llm_dequantize_row(uint32_t type, const void *src, float *dst, size_t n)
{
    const llm_type_traits *t = find_builtin(type);
    if (t && t->to_f32)
        t->to_f32(src, dst, n);
}

void llm_quantize_row(uint32_t type, const float *src, void *dst, size_t n)
{
    const llm_type_traits *t = find_builtin(type);
    if (t && t->from_f32)
        t->from_f32(src, dst, n);
}
