/* quant_k.c — the k-quants' reference row conversions (layouts in quant.h).
 *
 * Dequantization follows the published GGUF block layout; quantization is
 * plain round-to-nearest per block (quant.h says exactly how), enough for
 * the model writer's synthetic files and tests: a file from llama.cpp's
 * quantizer (which searches for better scales) reads the same way. No
 * allocation; rows are whole super-blocks of LLM_QK_K.
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

/* roundf(v) clamped into [lo, hi]; NaN gives lo. */
static int round_clamp(float v, int lo, int hi)
{
    float r = roundf(v);
    if (!(r >= (float)lo))
        return lo;
    if (r > (float)hi)
        return hi;
    return (int)r;
}

/* ---- Q4_K and Q5_K ------------------------------------------------------ */

static void k45_to_f32(const unsigned char *s, float *dst, size_t n, int five)
{
    size_t bytes = five ? LLM_Q5_K_BYTES : LLM_Q4_K_BYTES;
    for (size_t b = 0; b < n / LLM_QK_K; b++, s += bytes, dst += LLM_QK_K) {
        float d = llm_fp16_to_f32(load_u16(s)), dmin = llm_fp16_to_f32(load_u16(s + 2));
        const unsigned char *sc = s + 4, *qh = s + 16, *qs = s + (five ? 48 : 16);
        for (int j = 0; j < 8; j++) {
            int scj, mj;
            llm_q4k_scale_min(sc, j, &scj, &mj);
            float d1 = d * (float)scj, m1 = dmin * (float)mj;
            const unsigned char *q = qs + 32 * (j / 2);
            for (int l = 0; l < 32; l++) {
                int v = (q[l] >> (4 * (j & 1))) & 0x0f;
                if (five)
                    v |= ((qh[l] >> j) & 1) << 4;
                dst[32 * j + l] = d1 * (float)v - m1;
            }
        }
    }
}

/* Packs sub-block j's 6-bit scale and min (inverse of llm_q4k_scale_min). */
static void pack_scale_min(unsigned char *s, int j, int sc, int m)
{
    if (j < 4) {
        s[j] = (unsigned char)((s[j] & 0xc0) | sc);
        s[j + 4] = (unsigned char)((s[j + 4] & 0xc0) | m);
    } else {
        s[j + 4] = (unsigned char)((sc & 0x0f) | ((m & 0x0f) << 4));
        s[j - 4] = (unsigned char)((s[j - 4] & 0x3f) | ((sc >> 4) << 6));
        s[j] = (unsigned char)((s[j] & 0x3f) | ((m >> 4) << 6));
    }
}

static void k45_from_f32(const float *x, unsigned char *o, size_t n, int five)
{
    const int levels = five ? 31 : 15;
    size_t bytes = five ? LLM_Q5_K_BYTES : LLM_Q4_K_BYTES;
    for (size_t b = 0; b < n / LLM_QK_K; b++, x += LLM_QK_K, o += bytes) {
        float scale[8], mins[8], max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < 8; j++) {
            float lo = 0.0f, hi = x[32 * j];
            for (int l = 0; l < 32; l++) {
                lo = fminf(lo, x[32 * j + l]);
                hi = fmaxf(hi, x[32 * j + l]);
            }
            scale[j] = (hi - lo) / (float)levels;
            mins[j] = -lo;
            max_scale = fmaxf(max_scale, scale[j]);
            max_min = fmaxf(max_min, mins[j]);
        }
        uint16_t dh = llm_f32_to_fp16(max_scale / 63.0f), mh = llm_f32_to_fp16(max_min / 63.0f);
        float d = llm_fp16_to_f32(dh), dmin = llm_fp16_to_f32(mh);
        memset(o, 0, bytes);
        store_u16(o, dh);
        store_u16(o + 2, mh);
        unsigned char *qh = o + 16, *qs = o + (five ? 48 : 16);
        for (int j = 0; j < 8; j++) {
            int sc = d > 0.0f ? round_clamp(scale[j] / d, 0, 63) : 0;
            int m = dmin > 0.0f ? round_clamp(mins[j] / dmin, 0, 63) : 0;
            pack_scale_min(o + 4, j, sc, m);
            float step = d * (float)sc, off = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                int q = step > 0.0f ? round_clamp((x[32 * j + l] + off) / step, 0, levels) : 0;
                qs[32 * (j / 2) + l] |= (unsigned char)((q & 0x0f) << (4 * (j & 1)));
                if (five)
                    qh[l] |= (unsigned char)(((q >> 4) & 1) << j);
            }
        }
    }
}

void llm_q4_k_to_f32(const void *src, float *dst, size_t n) { k45_to_f32(src, dst, n, 0); }
void llm_q4_k_from_f32(const float *src, void *dst, size_t n) { k45_from_f32(src, dst, n, 0); }
void llm_q5_k_to_f32(const void *src, float *dst, size_t n) { k45_to_f32(src, dst, n, 1); }
void llm_q5_k_from_f32(const float *src, void *dst, size_t n) { k45_from_f32(src, dst, n, 1); }

/* ---- Q6_K --------------------------------------------------------------- */

/* The 6-bit value (0..63) of element e (0..255) of a Q6_K block. */
static int q6_get(const unsigned char *ql, const unsigned char *qh, int e)
{
    int h = e / 128, g = (e % 128) / 32, l = e % 32;
    int lo = (ql[64 * h + l + 32 * (g & 1)] >> (4 * (g >> 1))) & 0x0f;
    int hi = (qh[32 * h + l] >> (2 * g)) & 3;
    return lo | (hi << 4);
}

void llm_q6_k_to_f32(const void *src, float *dst, size_t n)
{
    const unsigned char *s = src;
    for (size_t b = 0; b < n / LLM_QK_K; b++, s += LLM_Q6_K_BYTES, dst += LLM_QK_K) {
        const unsigned char *ql = s, *qh = s + 128;
        const signed char *sc = (const signed char *)(s + 192);
        float d = llm_fp16_to_f32(load_u16(s + 208));
        for (int e = 0; e < LLM_QK_K; e++)
            dst[e] = d * (float)sc[e / 16] * (float)(q6_get(ql, qh, e) - 32);
    }
}

void llm_q6_k_from_f32(const float *src, void *dst, size_t n)
{
    const float *x = src;
    unsigned char *o = dst;
    for (size_t b = 0; b < n / LLM_QK_K; b++, x += LLM_QK_K, o += LLM_Q6_K_BYTES) {
        float scale[16], max_scale = 0.0f;
        for (int k = 0; k < 16; k++) {
            float amax = 0.0f;
            for (int l = 0; l < 16; l++)
                amax = fmaxf(amax, fabsf(x[16 * k + l]));
            scale[k] = amax / 31.0f;
            max_scale = fmaxf(max_scale, scale[k]);
        }
        uint16_t dh = llm_f32_to_fp16(max_scale / 127.0f);
        float d = llm_fp16_to_f32(dh);
        memset(o, 0, LLM_Q6_K_BYTES);
        unsigned char *ql = o, *qh = o + 128;
        for (int k = 0; k < 16; k++) {
            int sc = d > 0.0f ? round_clamp(scale[k] / d, 0, 127) : 0;
            o[192 + k] = (unsigned char)(signed char)sc;
            float step = d * (float)sc;
            for (int l = 0; l < 16; l++) {
                int e = 16 * k + l;
                int q = (step > 0.0f ? round_clamp(x[e] / step, -32, 31) : 0) + 32;
                int h = e / 128, g = (e % 128) / 32, i = e % 32;
                ql[64 * h + i + 32 * (g & 1)] |= (unsigned char)((q & 0x0f) << (4 * (g >> 1)));
                qh[32 * h + i] |= (unsigned char)((q >> 4) << (2 * g));
            }
        }
        store_u16(o + 208, dh);
    }
}

/* ---- Q2_K and Q3_K ------------------------------------------------------ */

/* Where element e (0..255) of a Q2_K or Q3_K super-block keeps its two low
 * bits: byte 32 * (e / 128) + e % 32 of the 64 quant bytes, at bit
 * 2 * ((e % 128) / 32). */
static int k23_low2(const unsigned char *qs, int e)
{
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

static void k23_put_low2(unsigned char *qs, int e, int v)
{
    qs[32 * (e / 128) + e % 32] |= (unsigned char)((v & 3) << (2 * ((e % 128) / 32)));
}

void llm_q2_k_to_f32(const void *src, float *dst, size_t n)
{
    const unsigned char *s = src;
    for (size_t b = 0; b < n / LLM_QK_K; b++, s += LLM_Q2_K_BYTES, dst += LLM_QK_K) {
        float d = llm_fp16_to_f32(load_u16(s + 80)), dmin = llm_fp16_to_f32(load_u16(s + 82));
        for (int e = 0; e < LLM_QK_K; e++) {
            int sm = s[e / 16];
            float dl = d * (float)(sm & 0x0f), ml = dmin * (float)(sm >> 4);
            dst[e] = dl * (float)k23_low2(s + 16, e) - ml;
        }
    }
}

void llm_q2_k_from_f32(const float *src, void *dst, size_t n)
{
    const float *x = src;
    unsigned char *o = dst;
    for (size_t b = 0; b < n / LLM_QK_K; b++, x += LLM_QK_K, o += LLM_Q2_K_BYTES) {
        float scale[16], mins[16], max_scale = 0.0f, max_min = 0.0f;
        for (int k = 0; k < 16; k++) {
            float lo = 0.0f, hi = x[16 * k];
            for (int l = 0; l < 16; l++) {
                lo = fminf(lo, x[16 * k + l]);
                hi = fmaxf(hi, x[16 * k + l]);
            }
            scale[k] = (hi - lo) / 3.0f;
            mins[k] = -lo;
            max_scale = fmaxf(max_scale, scale[k]);
            max_min = fmaxf(max_min, mins[k]);
        }
        uint16_t dh = llm_f32_to_fp16(max_scale / 15.0f), mh = llm_f32_to_fp16(max_min / 15.0f);
        float d = llm_fp16_to_f32(dh), dmin = llm_fp16_to_f32(mh);
        memset(o, 0, LLM_Q2_K_BYTES);
        for (int k = 0; k < 16; k++) {
            int sc = d > 0.0f ? round_clamp(scale[k] / d, 0, 15) : 0;
            int m = dmin > 0.0f ? round_clamp(mins[k] / dmin, 0, 15) : 0;
            o[k] = (unsigned char)(sc | (m << 4));
            float step = d * (float)sc, off = dmin * (float)m;
            for (int l = 0; l < 16; l++) {
                int q = step > 0.0f ? round_clamp((x[16 * k + l] + off) / step, 0, 3) : 0;
                k23_put_low2(o + 16, 16 * k + l, q);
            }
        }
        store_u16(o + 80, dh);
        store_u16(o + 82, mh);
    }
}

int llm_q3k_scale(const unsigned char *s, int k)
{
    int low = k < 8 ? s[k] & 0x0f : s[k - 8] >> 4;
    int high = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
    return (low | (high << 4)) - 32;
}

/* Packs sub-block k's signed scale (-32..31; inverse of llm_q3k_scale)
 * into the zeroed 12 bytes at s. */
static void q3k_put_scale(unsigned char *s, int k, int sc)
{
    int v = sc + 32;
    if (k < 8)
        s[k] |= (unsigned char)(v & 0x0f);
    else
        s[k - 8] |= (unsigned char)((v & 0x0f) << 4);
    s[8 + k % 4] |= (unsigned char)((v >> 4) << (2 * (k / 4)));
}

/* The value (-4..3) of element e of a Q3_K super-block: its low two bits,
 * less 4 unless its high bit (bit (e / 128) * 4 + (e % 128) / 32 of
 * hmask[e % 32]) is set. */
static int q3k_get(const unsigned char *blk, int e)
{
    int bit = 4 * (e / 128) + (e % 128) / 32;
    int hi = (blk[e % 32] >> bit) & 1;
    return k23_low2(blk + 32, e) - (hi ? 0 : 4);
}

void llm_q3_k_to_f32(const void *src, float *dst, size_t n)
{
    const unsigned char *s = src;
    for (size_t b = 0; b < n / LLM_QK_K; b++, s += LLM_Q3_K_BYTES, dst += LLM_QK_K) {
        float d = llm_fp16_to_f32(load_u16(s + 108));
        for (int e = 0; e < LLM_QK_K; e++) {
            float dl = d * (float)llm_q3k_scale(s + 96, e / 16);
            dst[e] = dl * (float)q3k_get(s, e);
        }
    }
}

void llm_q3_k_from_f32(const float *src, void *dst, size_t n)
{
    const float *x = src;
    unsigned char *o = dst;
    for (size_t b = 0; b < n / LLM_QK_K; b++, x += LLM_QK_K, o += LLM_Q3_K_BYTES) {
        /* As Q4_0: the element of largest |x| maps to -4, giving the
         * negative side the extra level; so scales carry a sign. */
        float scale[16], amax_scale = 0.0f;
        for (int k = 0; k < 16; k++) {
            float amax = 0.0f, ext = 0.0f;
            for (int l = 0; l < 16; l++)
                if (fabsf(x[16 * k + l]) > amax) {
                    amax = fabsf(x[16 * k + l]);
                    ext = x[16 * k + l];
                }
            scale[k] = ext / -4.0f;
            amax_scale = fmaxf(amax_scale, fabsf(scale[k]));
        }
        uint16_t dh = llm_f32_to_fp16(amax_scale / 31.0f);
        float d = llm_fp16_to_f32(dh);
        memset(o, 0, LLM_Q3_K_BYTES);
        for (int k = 0; k < 16; k++) {
            int sc = d > 0.0f ? round_clamp(scale[k] / d, -32, 31) : 0;
            q3k_put_scale(o + 96, k, sc);
            float step = d * (float)sc;
            for (int l = 0; l < 16; l++) {
                int e = 16 * k + l;
                int q = step != 0.0f ? round_clamp(x[e] / step, -4, 3) : 0;
                int u = q + 4; /* 0..7: low two bits and the high bit */
                k23_put_low2(o + 32, e, u);
                o[e % 32] |= (unsigned char)((u >> 2) << (4 * (e / 128) + (e % 128) / 32));
            }
        }
        store_u16(o + 108, dh);
    }
}
