/* quant.h — tensor element types: one table of type traits, and the row
 * conversions of the built-in types.
 *
 * The engine stores weights in the ggml element types that GGUF files carry.
 * Everything the engine knows about a type is one llm_type_traits entry:
 * its ggml id (written into GGUF files, never renumbered), name, block
 * layout (elements and bytes per block), the alignment its kernels need,
 * whether it is a plain float type, llama.cpp's file-type number, and its
 * row conversions to and from f32. Code that needs any of these asks the
 * table (llm_type_find); nothing else switches on a type id or assumes a
 * block size. The kernels a backend has for a type are the backend's own
 * table (cpu/kernels.h, cuda/), checked against the model's tensors when
 * it loads.
 *
 * Thirteen built-in types convert, so the engine computes with them: F32,
 * F16, BF16, Q8_0, Q4_0, the older 32-element types Q4_1, Q5_0, Q5_1 and
 * the k-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (both at the bottom of this
 * file). The
 * table also holds the block layouts of the other
 * common ggml types, without conversions, so that a file holding them opens
 * and its tensors are sized and then refused by name. A caller may bring
 * more types (a test's toy type) as an llm_type_set, consulted after the
 * built-in table by the readers, the writer and the model loader that are
 * handed it; there is no global registry.
 *
 * Block layouts of the built-in quantized types (little-endian, as ggml):
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
 * Everything in this header is pure and thread-safe; the tables are
 * immutable.
 */
#ifndef LLM_QUANT_H
#define LLM_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ggml type ids of the built-in types that convert. */
enum llm_type {
    LLM_TYPE_F32 = 0,
    LLM_TYPE_F16 = 1,
    LLM_TYPE_Q4_0 = 2,
    LLM_TYPE_Q8_0 = 8,
    LLM_TYPE_BF16 = 30
};

/* Elements per block of Q8_0 and of Q4_0: the layouts of those two types
 * only (their kernels use them); other code asks the type's traits. */
#define LLM_QK8_0 32
#define LLM_QK4_0 32

typedef struct llm_block_q8_0 {
    uint16_t d;            /* fp16 scale */
    int8_t qs[LLM_QK8_0];  /* quants */
} llm_block_q8_0;

typedef struct llm_block_q4_0 {
    uint16_t d;                /* fp16 scale */
    uint8_t qs[LLM_QK4_0 / 2]; /* element j low nibble, j+16 high nibble */
} llm_block_q4_0;

_Static_assert(sizeof(llm_block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(llm_block_q4_0) == 18, "Q4_0 block is 18 bytes");

/* Row conversions: n elements (a multiple of the type's block) at src to
 * f32 at dst, and back (row_bytes(n) bytes at dst). src and dst need no
 * alignment (blocks are read bytewise, 16- and 32-bit elements with memcpy
 * semantics). */
typedef void (*llm_to_f32_fn)(const void *src, float *dst, size_t n);
typedef void (*llm_from_f32_fn)(const float *src, void *dst, size_t n);

/* What the engine knows about one tensor type. */
typedef struct llm_type_traits {
    uint32_t id;          /* ggml type id, as stored in GGUF */
    const char *name;     /* lower-case ggml name: "q8_0", "q4_K"; static */
    uint32_t block_elems; /* elements per block (1: a plain element type) */
    uint32_t block_bytes; /* bytes per block */
    uint32_t align;       /* alignment in bytes that a row's data needs
                             because kernels load it as native elements (f32:
                             4); 1 for types read bytewise */
    int is_float;         /* 1: a plain float type (f32, f16, bf16), which
                             the loader accepts for norm vectors */
    uint32_t file_type;   /* llama.cpp's general.file_type for a model
                             "mostly" of this type; 0 (all f32) when none */
    llm_to_f32_fn to_f32; /* NULL: layout known only; never converted */
    llm_from_f32_fn from_f32; /* NULL: cannot be written */
} llm_type_traits;

/* Types a caller brings beyond the built-in table: `count` entries at
 * `types`, borrowed (they must outlive whatever was handed the set). An
 * entry whose id is a built-in one is never consulted. */
typedef struct llm_type_set {
    const llm_type_traits *types;
    size_t count;
} llm_type_set;

/* The traits of ggml type `type`: the built-in entry, else the first entry
 * of `extra` with that id (extra may be NULL), else NULL. */
const llm_type_traits *llm_type_find(const llm_type_set *extra, uint32_t type);

/* 1 when t converts both ways (the engine can compute with and write it),
 * else 0 (t may be NULL). */
int llm_type_traits_converts(const llm_type_traits *t);

/* Bytes taken by `n` consecutive elements of type t. Returns 0 with *out
 * set, or -1 when n is not a multiple of the block or the byte count
 * overflows uint64_t. */
int llm_type_traits_row_bytes(const llm_type_traits *t, uint64_t n, uint64_t *out);

/* Shorthands over the built-in table alone (no extra types): */

/* 1 when `type` is built in and converts (usable for compute), else 0. */
int llm_type_is_supported(uint32_t type);

/* 1 when the block layout of ggml type `type` is built in (every supported
 * type and the common other ggml types), else 0. */
int llm_type_is_known(uint32_t type);

/* Lower-case name ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_K", ...);
 * "unknown" for an id that is not built in. Static storage. */
const char *llm_type_name(uint32_t type);

/* Parses a supported type's name, case-insensitively ("q8_0", "Q8_0").
 * 0 and *out set, or -1 when `name` names no supported type. */
int llm_type_parse(const char *name, uint32_t *out);

/* Elements per block (1 for F32/F16/BF16, 32 for Q8_0/Q4_0) and bytes per
 * block; 0 for an unknown type. */
uint32_t llm_type_block_size(uint32_t type);
uint32_t llm_type_block_bytes(uint32_t type);

/* llm_type_traits_row_bytes for a built-in type; -1 also when unknown. */
int llm_type_row_bytes(uint32_t type, uint64_t n, uint64_t *out);

/* The built-in type's to_f32 / from_f32. Preconditions: type is
 * supported, n is a multiple of the block size. */
void llm_dequantize_row(uint32_t type, const void *src, float *dst, size_t n);
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

/* ---- k-quants (quant_k.c) ---------------------------------------------- *
 *
 * Super-blocks of 256 elements, little-endian, as ggml's k-quants:
 *   Q4_K (144 bytes): fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins
 *         for 8 sub-blocks of 32 (llm_q4k_scale_min), 128 bytes of nibbles:
 *         byte 32p + l holds element l of sub-block 2p (low nibble) and of
 *         sub-block 2p+1 (high); x = d*sc_j*q - dmin*m_j.
 *   Q5_K (176 bytes): fp16 d, fp16 dmin, the same 12 scale bytes, 32 bytes
 *         qh (bit j of qh[l]: the fifth bit of element l of sub-block j),
 *         128 bytes of low nibbles laid out as Q4_K's; x = d*sc_j*q - dmin*m_j.
 *   Q6_K (210 bytes): 128 bytes ql, 64 bytes qh, 16 int8 scales (one per
 *         16 elements), fp16 d. Element 128h + 32g + l (h < 2, g < 4,
 *         l < 32): low 4 bits in ql[64h + l + 32(g&1)], nibble g>>1; high
 *         2 bits at bit 2g of qh[32h + l]; x = d * sc[e/16] * (q - 32).
 *   Q2_K (84 bytes): 16 bytes of scales (byte k: sub-block k's 4-bit
 *         scale in the low nibble, its 4-bit min in the high one; 16
 *         sub-blocks of 16), 64 bytes qs, fp16 d, fp16 dmin. Element
 *         128h + 32g + l (h < 2, g < 4, l < 32) has its 2-bit q at bit 2g
 *         of qs[32h + l]; x = (d*sc_k)*q - dmin*m_k, k = element / 16.
 *   Q3_K (110 bytes): 32 bytes hmask, 64 bytes qs (the 2 low bits, laid
 *         out as Q2_K's), 12 bytes of 6-bit scales (llm_q3k_scale), fp16
 *         d. Element 128h + 32g + l takes bit 4h + g of hmask[l] as its
 *         high bit; q = low - (high ? 0 : 4), in -4..3;
 *         x = (d * (scale_k - 32 stored as 0..63)) * q.
 * Quantization is round-to-nearest per block (roundf, half away from
 * zero), not ggml's search for the best scales: Q4_K/Q5_K take each
 * sub-block's range [min(x, 0), max(x)] over 15 / 31 levels, 6-bit scales
 * and mins relative to the fp16 d = max scale / 63 and dmin = max min / 63;
 * Q6_K takes each 16-element sub-block's max |x| / 31, 8-bit scales
 * relative to d = max scale / 127, q in -32..31; Q2_K takes each
 * 16-element sub-block's range [min(x, 0), max(x)] over 3 levels, 4-bit
 * scales and mins relative to d = max scale / 15 and dmin = max min / 15;
 * Q3_K maps each 16-element sub-block's element of largest |x| to -4
 * (scale = that element / -4, so scales are signed), 6-bit scales
 * relative to d = max |scale| / 31, q in -4..3. */
#define LLM_QK_K 256
#define LLM_TYPE_Q4_K 12u
#define LLM_TYPE_Q5_K 13u
#define LLM_TYPE_Q6_K 14u
#define LLM_TYPE_Q2_K 10u
#define LLM_TYPE_Q3_K 11u
#define LLM_Q2_K_BYTES 84
#define LLM_Q3_K_BYTES 110
#define LLM_Q4_K_BYTES 144
#define LLM_Q5_K_BYTES 176
#define LLM_Q6_K_BYTES 210

/* Sub-block j's (0..7) 6-bit scale and min from Q4_K/Q5_K's 12 bytes:
 * j < 4: scale = s[j] & 63, min = s[j+4] & 63; else the low 4 bits from
 * s[j+4] (scale low nibble, min high nibble) and the top 2 from bits 6..7
 * of s[j-4] (scale) and s[j] (min). */
static inline void llm_q4k_scale_min(const unsigned char *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Sub-block k's (0..15) signed scale (-32..31) from Q3_K's 12 scale
 * bytes s: the low 4 bits are the low (k < 8) or high (k >= 8) nibble of
 * s[k % 8], the top 2 bits are bits 2*(k/4)..2*(k/4)+1 of s[8 + k % 4];
 * the 6-bit value less 32. */
int llm_q3k_scale(const unsigned char *s, int k);

void llm_q2_k_to_f32(const void *src, float *dst, size_t n);
void llm_q2_k_from_f32(const float *src, void *dst, size_t n);
void llm_q3_k_to_f32(const void *src, float *dst, size_t n);
void llm_q3_k_from_f32(const float *src, void *dst, size_t n);
void llm_q4_k_to_f32(const void *src, float *dst, size_t n);
void llm_q4_k_from_f32(const float *src, void *dst, size_t n);
void llm_q5_k_to_f32(const void *src, float *dst, size_t n);
void llm_q5_k_from_f32(const float *src, void *dst, size_t n);
void llm_q6_k_to_f32(const void *src, float *dst, size_t n);
void llm_q6_k_from_f32(const float *src, void *dst, size_t n);

/* ---- Q4_1, Q5_0, Q5_1 (quant_legacy.c) --------------------------------- *
 *
 * Blocks of 32 elements, little-endian, as ggml. Byte j of the 16 nibble
 * bytes holds element j (low nibble) and element j+16 (high nibble); the
 * 5-bit types keep each element's fifth bit in a 32-bit word qh (bit j for
 * element j), stored before the nibbles:
 *   Q4_1 (20 bytes): fp16 d, fp16 m, 16 bytes nibbles; x = q*d + m.
 *   Q5_0 (22 bytes): fp16 d, 4 bytes qh, 16 bytes nibbles; x = d*(q - 16).
 *   Q5_1 (24 bytes): fp16 d, fp16 m, 4 bytes qh, 16 bytes nibbles;
 *         x = q*d + m.
 * (q*d + m is two roundings in f32, as ggml computes it.) Quantization is
 * ggml's reference rounding, so written files match its reference
 * quantizer byte for byte:
 *   Q4_1/Q5_1: min, max of the block, d = (max - min) / 15 (31), m = min,
 *         q = min(15 (31), trunc((x - min) * (1/d) + 0.5)).
 *   Q5_0: as Q4_0 with 32 levels: d = (signed extreme) / -16,
 *         q = min(31, trunc(x * (1/d) + 16.5)).
 * d and m are stored as fp16; NaN weights give q = 0. */
#define LLM_QK_LEGACY 32
#define LLM_TYPE_Q4_1 3u
#define LLM_TYPE_Q5_0 6u
#define LLM_TYPE_Q5_1 7u
#define LLM_Q4_1_BYTES 20
#define LLM_Q5_0_BYTES 22
#define LLM_Q5_1_BYTES 24

void llm_q4_1_to_f32(const void *src, float *dst, size_t n);
void llm_q4_1_from_f32(const float *src, void *dst, size_t n);
void llm_q5_0_to_f32(const void *src, float *dst, size_t n);
void llm_q5_0_from_f32(const float *src, void *dst, size_t n);
void llm_q5_1_to_f32(const void *src, float *dst, size_t n);
void llm_q5_1_from_f32(const float *src, void *dst, size_t n);

#ifdef __cplusplus
}
#endif

#endif
