/* quant.h — tensor element types and their row conversions.
 *
 * The engine stores weights in the ggml element types that GGUF files carry.
 * Type ids are ggml's (they are written into GGUF files and never
 * renumbered). Five types are supported for compute: F32, F16, BF16, Q8_0 and
 * Q4_0. The reader also knows the block layout of the other common ggml types
 * (so a file holding them can be opened and its tensors sized), but
 * llm_type_is_supported() is false for them and nothing converts them.
 *
 * Block layouts (little-endian, as in ggml):
 *   Q8_0: 32 elements in 34 bytes: fp16 scale d, then 32 int8 q;
 *         x = d * q.
 *   Q4_0: 32 elements in 18 bytes: fp16 scale d, then 16 bytes of nibbles;
 *         byte j holds element j in its low nibble and element j+16 in its
 *         high nibble; x = d * (nibble - 8).
 *
 * Quantization follows ggml's reference rounding so that files we write are
 * bit-identical to what ggml's reference quantizer produces for the same
 * input:
 *   Q8_0: amax = max |x|, d = amax / 127, q = round-half-away(x / d)
 *         (x * (1/d) in float, as ggml does); d is stored as fp16.
 *   Q4_0: m = the element with the largest |x| (signed), d = m / -8,
 *         q = min(15, (int8)(x * (1/d) + 8.5)); d is stored as fp16.
 *   An all-zero block stores q = 0 (Q4_0: nibble 8) and d = 0 (Q4_0: -0,
 *   since 0 / -8 is negative zero, as in ggml).
 *
 * fp16 and bf16 conversions from f32 round to nearest, ties to even; NaN
 * stays NaN (quiet), overflow goes to infinity (fp16). They are inline here
 * because kernels call them per element.
 *
 * Everything in this header is pure and thread-safe.
 */
#ifndef LLM_QUANT_H
#define LLM_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ggml type ids of the supported types. */
enum llm_type {
    LLM_TYPE_F32 = 0,
    LLM_TYPE_F16 = 1,
    LLM_TYPE_Q4_0 = 2,
    LLM_TYPE_Q8_0 = 8,
    LLM_TYPE_BF16 = 30
};

/* Elements per quantized block (Q8_0 and Q4_0). */
#define LLM_QK 32

typedef struct llm_block_q8_0 {
    uint16_t d;          /* fp16 scale */
    int8_t qs[LLM_QK];   /* quants */
} llm_block_q8_0;

typedef struct llm_block_q4_0 {
    uint16_t d;              /* fp16 scale */
    uint8_t qs[LLM_QK / 2];  /* element j low nibble, j+16 high nibble */
} llm_block_q4_0;

_Static_assert(sizeof(llm_block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(llm_block_q4_0) == 18, "Q4_0 block is 18 bytes");

/* 1 when `type` is one of enum llm_type (usable for compute), else 0. */
int llm_type_is_supported(uint32_t type);

/* 1 when the block layout of ggml type `type` is known (every supported
 * type and the common other ggml types), else 0. Tensors of a known type can
 * be sized and mapped; only supported types can be converted. */
int llm_type_is_known(uint32_t type);

/* Lower-case name ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_K", ...);
 * "unknown" for an id whose layout is not known. Static storage. */
const char *llm_type_name(uint32_t type);

/* Parses a supported type's name, case-insensitively ("q8_0", "Q8_0").
 * 0 and *out set, or -1 when `name` names no supported type. */
int llm_type_parse(const char *name, uint32_t *out);

/* Elements per block (1 for F32/F16/BF16, 32 for Q8_0/Q4_0) and bytes per
 * block; 0 for an unknown type. */
uint32_t llm_type_block_size(uint32_t type);
uint32_t llm_type_block_bytes(uint32_t type);

/* Bytes taken by `n` consecutive elements of `type`. Returns 0 with *out
 * set, or -1 when the type is unknown, n is not a multiple of the block
 * size, or the byte count overflows uint64_t. */
int llm_type_row_bytes(uint32_t type, uint64_t n, uint64_t *out);

/* Converts n elements of `type` at src to f32 at dst. Preconditions: type
 * is supported, n is a multiple of the block size. src needs no particular
 * alignment (quantized blocks are read bytewise; F16/BF16/F32 elements are
 * read with memcpy semantics). */
void llm_dequantize_row(uint32_t type, const void *src, float *dst, size_t n);

/* Converts n f32 elements at src to `type` at dst (row_bytes(type, n)
 * bytes). Same preconditions as llm_dequantize_row. */
void llm_quantize_row(uint32_t type, const float *src, void *dst, size_t n);

static inline uint32_t llm_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float llm_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE binary16 -> binary32, exact (every fp16 value is representable). */
static inline float llm_fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1fu) /* inf / nan: keep the payload, widen it */
        return llm_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp != 0)
        return llm_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0)
        return llm_bits_f32(sign);
    /* Subnormal: value is man * 2^-24, exact in f32. */
    float v = (float)man * (1.0f / 16777216.0f);
    return sign ? -v : v;
}

/* binary32 -> binary16, round to nearest even; overflow to inf. */
static inline uint16_t llm_f32_to_fp16(float f)
{
    uint32_t u = llm_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* nan: quiet, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 rounds to inf (and inf itself) */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: fp16 subnormal or zero */
        if (a < 0x33000000u) /* below 2^-25: rounds to zero (tie at 2^-25 goes to even 0) */
            return sign;
        uint32_t e = a >> 23;          /* 102..112 */
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e;     /* 14..24: man * 2^(e-150) / 2^-24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    /* Normal: rebias exponent (127 -> 15) and round the 13 dropped bits;
     * a carry out of the mantissa correctly bumps the exponent. */
    uint32_t r = a - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

/* bfloat16 -> binary32, exact. */
static inline float llm_bf16_to_f32(uint16_t b)
{
    return llm_bits_f32((uint32_t)b << 16);
}

/* binary32 -> bfloat16, round to nearest even; nan stays a quiet nan. */
static inline uint16_t llm_f32_to_bf16(float f)
{
    uint32_t u = llm_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#ifdef __cplusplus
}
#endif

#endif
