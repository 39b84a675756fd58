/* quant_legacy.c — reference row conversions of ggml's older 32-element
 * block types Q4_1, Q5_0 and Q5_1 (layouts in quant.h).
 *
 * llama.cpp's k-quant mixes fall back to these for tensors whose rows are
 * not whole 256-element super-blocks, so files people download hold them
 * next to Q4_K/Q6_K. Quantization follows ggml's reference rounding, so a
 * file we write holds the bytes ggml's reference quantizer writes for the
 * same floats. No allocation; rows are whole blocks of 32.
 */
#include "quant.h"

#include <float.h>
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

static uint32_t load_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void store_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Truncates v toward zero into [0, hi]: ggml's integer cast for finite
 * in-range input; NaN (from inf or nan weights) becomes 0 instead of
 * undefined behaviour. */
static int trunc_clamp(float v, int hi)
{
    if (!(v >= 0.0f))
        return 0;
    if (v > (float)hi)
        return hi;
    return (int)v;
}

/* The 4- or 5-bit value of element j (0..31) of a block: nibbles at qs,
 * fifth bits in qh (bit j) when the type has them. */
static int legacy_value(const unsigned char *qs, uint32_t qh, int j)
{
    int v = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
    return v | (int)(((qh >> j) & 1u) << 4);
}

/* ---- Q4_1 and Q5_1: x = d*q + m ------------------------------------------ */

static void dm_to_f32(const unsigned char *s, float *dst, size_t n, int five)
{
    size_t bytes = five ? LLM_Q5_1_BYTES : LLM_Q4_1_BYTES;
    for (size_t b = 0; b < n / LLM_QK_LEGACY; b++, s += bytes, dst += LLM_QK_LEGACY) {
        float d = llm_fp16_to_f32(load_u16(s)), m = llm_fp16_to_f32(load_u16(s + 2));
        uint32_t qh = five ? load_u32(s + 4) : 0;
        const unsigned char *qs = s + (five ? 8 : 4);
        for (int j = 0; j < LLM_QK_LEGACY; j++)
            dst[j] = (float)legacy_value(qs, qh, j) * d + m;
    }
}

static void dm_from_f32(const float *x, unsigned char *o, size_t n, int five)
{
    const int levels = five ? 31 : 15;
    size_t bytes = five ? LLM_Q5_1_BYTES : LLM_Q4_1_BYTES;
    for (size_t b = 0; b < n / LLM_QK_LEGACY; b++, x += LLM_QK_LEGACY, o += bytes) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < LLM_QK_LEGACY; j++) {
            if (x[j] < min)
                min = x[j];
            if (x[j] > max)
                max = x[j];
        }
        float d = (max - min) / (float)levels;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        store_u16(o, llm_f32_to_fp16(d));
        store_u16(o + 2, llm_f32_to_fp16(min));
        unsigned char *qs = o + (five ? 8 : 4);
        uint32_t qh = 0;
        for (int j = 0; j < LLM_QK_LEGACY / 2; j++) {
            int lo = trunc_clamp((x[j] - min) * id + 0.5f, levels);
            int hi = trunc_clamp((x[j + 16] - min) * id + 0.5f, levels);
            qs[j] = (unsigned char)((lo & 0x0f) | ((hi & 0x0f) << 4));
            qh |= (uint32_t)(lo >> 4) << j;
            qh |= (uint32_t)(hi >> 4) << (j + 16);
        }
        if (five)
            store_u32(o + 4, qh);
    }
}

void llm_q4_1_to_f32(const void *src, float *dst, size_t n) { dm_to_f32(src, dst, n, 0); }
void llm_q4_1_from_f32(const float *src, void *dst, size_t n) { dm_from_f32(src, dst, n, 0); }
void llm_q5_1_to_f32(const void *src, float *dst, size_t n) { dm_to_f32(src, dst, n, 1); }
void llm_q5_1_from_f32(const float *src, void *dst, size_t n) { dm_from_f32(src, dst, n, 1); }

/* ---- Q5_0: x = d*(q - 16) ------------------------------------------------- */

void llm_q5_0_to_f32(const void *src, float *dst, size_t n)
{
    const unsigned char *s = src;
    for (size_t b = 0; b < n / LLM_QK_LEGACY; b++, s += LLM_Q5_0_BYTES, dst += LLM_QK_LEGACY) {
        float d = llm_fp16_to_f32(load_u16(s));
        uint32_t qh = load_u32(s + 2);
        for (int j = 0; j < LLM_QK_LEGACY; j++)
            dst[j] = d * (float)(legacy_value(s + 6, qh, j) - 16);
    }
}

void llm_q5_0_from_f32(const float *src, void *dst, size_t n)
{
    const float *x = src;
    unsigned char *o = dst;
    for (size_t b = 0; b < n / LLM_QK_LEGACY; b++, x += LLM_QK_LEGACY, o += LLM_Q5_0_BYTES) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < LLM_QK_LEGACY; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        /* As Q4_0: the extreme element maps to 0, giving the negative side
         * the extra level (-16..15). */
        float d = max / -16.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        store_u16(o, llm_f32_to_fp16(d));
        uint32_t qh = 0;
        for (int j = 0; j < LLM_QK_LEGACY / 2; j++) {
            int lo = trunc_clamp(x[j] * id + 16.5f, 31);
            int hi = trunc_clamp(x[j + 16] * id + 16.5f, 31);
            o[6 + j] = (unsigned char)((lo & 0x0f) | ((hi & 0x0f) << 4));
            qh |= (uint32_t)(lo >> 4) << j;
            qh |= (uint32_t)(hi >> 4) << (j + 16);
        }
        store_u32(o + 2, qh);
    }
}
