/* quant.c — type table and reference row conversions (see quant.h).
 *
 * These loops are the reference: kernels in the backends may be faster but
 * must agree with them bit for bit on quantization and to the last ulp on
 * dequantization. They allocate nothing.
 */
#include "quant.h"

#include <math.h>

typedef struct type_info {
    uint32_t id;
    const char *name;
    uint32_t block_size; /* elements per block */
    uint32_t block_bytes;
    int supported;
} type_info;

/* Block layouts of ggml types, including ones we only size (never
 * convert), so that files carrying them still open and report clearly. */
static const type_info k_types[] = {
    {0, "f32", 1, 4, 1},      {1, "f16", 1, 2, 1},     {2, "q4_0", 32, 18, 1},
    {3, "q4_1", 32, 20, 0},   {6, "q5_0", 32, 22, 0},  {7, "q5_1", 32, 24, 0},
    {8, "q8_0", 32, 34, 1},   {9, "q8_1", 32, 36, 0},  {10, "q2_K", 256, 84, 0},
    {11, "q3_K", 256, 110, 0}, {12, "q4_K", 256, 144, 0}, {13, "q5_K", 256, 176, 0},
    {14, "q6_K", 256, 210, 0}, {15, "q8_K", 256, 292, 0}, {24, "i8", 1, 1, 0},
    {25, "i16", 1, 2, 0},     {26, "i32", 1, 4, 0},    {27, "i64", 1, 8, 0},
    {28, "f64", 1, 8, 0},     {30, "bf16", 1, 2, 1},
};

static const type_info *find_type(uint32_t type)
{
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (k_types[i].id == type)
            return &k_types[i];
    return NULL;
}

int llm_type_is_supported(uint32_t type)
{
    const type_info *t = find_type(type);
    return t && t->supported;
}

int llm_type_is_known(uint32_t type)
{
    return find_type(type) != NULL;
}

const char *llm_type_name(uint32_t type)
{
    const type_info *t = find_type(type);
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
        if (k_types[i].supported && name_equal_nocase(name, k_types[i].name)) {
            *out = k_types[i].id;
            return 0;
        }
    }
    return -1;
}

uint32_t llm_type_block_size(uint32_t type)
{
    const type_info *t = find_type(type);
    return t ? t->block_size : 0;
}

uint32_t llm_type_block_bytes(uint32_t type)
{
    const type_info *t = find_type(type);
    return t ? t->block_bytes : 0;
}

int llm_type_row_bytes(uint32_t type, uint64_t n, uint64_t *out)
{
    const type_info *t = find_type(type);
    if (!t || n % t->block_size != 0)
        return -1;
    uint64_t blocks = n / t->block_size;
    if (blocks > UINT64_MAX / t->block_bytes)
        return -1;
    *out = blocks * t->block_bytes;
    return 0;
}

static uint16_t load_u16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static void store_u16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v & 0xffu);
    p[1] = (unsigned char)(v >> 8);
}

/* Blocks are addressed as bytes: a block's fp16 scale sits at offset 0 of
 * an 18- or 34-byte block, so consecutive blocks are not 2-byte aligned
 * in general and must not be read through the struct types. */
static void dequant_q8_0(const unsigned char *src, float *dst, size_t n)
{
    for (size_t b = 0; b < n / LLM_QK; b++, src += sizeof(llm_block_q8_0)) {
        float d = llm_fp16_to_f32(load_u16(src));
        const signed char *q = (const signed char *)(src + 2);
        for (int j = 0; j < LLM_QK; j++)
            dst[b * LLM_QK + (size_t)j] = d * (float)q[j];
    }
}

static void dequant_q4_0(const unsigned char *src, float *dst, size_t n)
{
    for (size_t b = 0; b < n / LLM_QK; b++, src += sizeof(llm_block_q4_0)) {
        float d = llm_fp16_to_f32(load_u16(src));
        const unsigned char *q = src + 2;
        float *y = dst + b * LLM_QK;
        for (int j = 0; j < LLM_QK / 2; j++) {
            y[j] = d * (float)((q[j] & 0x0f) - 8);
            y[j + LLM_QK / 2] = d * (float)((q[j] >> 4) - 8);
        }
    }
}

void llm_dequantize_row(uint32_t type, const void *src, float *dst, size_t n)
{
    const unsigned char *s = src;
    switch (type) {
    case LLM_TYPE_F32:
        memcpy(dst, s, n * sizeof(float));
        break;
    case LLM_TYPE_F16:
        for (size_t i = 0; i < n; i++)
            dst[i] = llm_fp16_to_f32(load_u16(s + 2 * i));
        break;
    case LLM_TYPE_BF16:
        for (size_t i = 0; i < n; i++)
            dst[i] = llm_bf16_to_f32(load_u16(s + 2 * i));
        break;
    case LLM_TYPE_Q8_0:
        dequant_q8_0(s, dst, n);
        break;
    case LLM_TYPE_Q4_0:
        dequant_q4_0(s, dst, n);
        break;
    default:
        break;
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

static void quant_q8_0(const float *x, unsigned char *dst, size_t n)
{
    for (size_t b = 0; b < n / LLM_QK; b++, x += LLM_QK, dst += sizeof(llm_block_q8_0)) {
        float amax = 0.0f;
        for (int j = 0; j < LLM_QK; j++) {
            float a = fabsf(x[j]);
            if (a > amax)
                amax = a;
        }
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        store_u16(dst, llm_f32_to_fp16(d));
        for (int j = 0; j < LLM_QK; j++)
            dst[2 + j] = (unsigned char)(signed char)clamp_trunc(roundf(x[j] * id), -127.0f, 127.0f);
    }
}

static void quant_q4_0(const float *x, unsigned char *dst, size_t n)
{
    for (size_t b = 0; b < n / LLM_QK; b++, x += LLM_QK, dst += sizeof(llm_block_q4_0)) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < LLM_QK; j++) {
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
        for (int j = 0; j < LLM_QK / 2; j++) {
            int lo = clamp_trunc(x[j] * id + 8.5f, 0.0f, 15.0f);
            int hi = clamp_trunc(x[j + LLM_QK / 2] * id + 8.5f, 0.0f, 15.0f);
            dst[2 + j] = (unsigned char)(lo | (hi << 4));
        }
    }
}

void llm_quantize_row(uint32_t type, const float *src, void *dst, size_t n)
{
    unsigned char *d = dst;
    switch (type) {
    case LLM_TYPE_F32:
        memcpy(d, src, n * sizeof(float));
        break;
    case LLM_TYPE_F16:
        for (size_t i = 0; i < n; i++)
            store_u16(d + 2 * i, llm_f32_to_fp16(src[i]));
        break;
    case LLM_TYPE_BF16:
        for (size_t i = 0; i < n; i++)
            store_u16(d + 2 * i, llm_f32_to_bf16(src[i]));
        break;
    case LLM_TYPE_Q8_0:
        quant_q8_0(src, d, n);
        break;
    case LLM_TYPE_Q4_0:
        quant_q4_0(src, d, n);
        break;
    default:
        break;
    }
}
