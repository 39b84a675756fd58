/* test_quant.c — tensor types: fp16/bf16 conversions and the Q8_0 / Q4_0
 * block codecs against values computed independently (IEEE half rounding
 * from Python's struct 'e' format; block quantization worked through by
 * hand in float32 arithmetic following ggml's reference algorithm).
 *
 * Usage: test_quant CASE   (one ctest case each)
 */
#include <math.h>
#include <string.h>

#include "pm_check.h"
#include "quant.h"

static void case_fp16(void)
{
    static const struct {
        float f;
        uint16_t h;
    } golden[] = {
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {65504.0f, 0x7bff},
        {65519.0f, 0x7bff},          /* just below the rounding point to inf */
        {65520.0f, 0x7c00},          /* rounds to infinity */
        {1e-8f, 0x0000},             /* below half the smallest subnormal */
        {0x1p-24f, 0x0001},          /* smallest subnormal */
        {0x1.8p-25f, 0x0001},        /* 0.75 ulp rounds up */
        {0x1p-25f, 0x0000},          /* exact tie between 0 and 1 ulp: even */
        {0x1.8p-24f, 0x0002},        /* tie between 1 and 2 ulp: even */
        {0.1f, 0x2e66},
        {1.0f / 3.0f, 0x3555},
        {1.0f + 0x1p-11f, 0x3c00},   /* tie: even mantissa 0 */
        {1.0f + 0x1.8p-10f, 0x3c02}, /* tie: even mantissa 2 */
        {0x1p-14f, 0x0400},          /* smallest normal */
        {0x1p-14f - 0x1p-24f, 0x03ff},
        {-0.0f, 0x8000},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
    };
    for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++) {
        CHECK_INT_EQ(llm_f32_to_fp16(golden[i].f), golden[i].h);
        if ((golden[i].h & 0x7c00) != 0x7c00 || (golden[i].h & 0x3ff) == 0) {
            /* Exact way back for values that are representable. */
            float back = llm_fp16_to_f32(golden[i].h);
            CHECK_INT_EQ(llm_f32_to_fp16(back), golden[i].h);
        }
    }
    CHECK_NEAR(llm_fp16_to_f32(0x3555), 0.333251953125, 0);
    CHECK_NEAR(llm_fp16_to_f32(0x0001), 0x1p-24, 0);
    CHECK_NEAR(llm_fp16_to_f32(0x7bff), 65504.0, 0);
    CHECK(isnan(llm_fp16_to_f32(llm_f32_to_fp16(NAN))));
    /* Every finite half survives half -> float -> half. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00)
            continue;
        if (llm_f32_to_fp16(llm_fp16_to_f32((uint16_t)h)) != h) {
            CHECK_INT_EQ(llm_f32_to_fp16(llm_fp16_to_f32((uint16_t)h)), h);
            break;
        }
    }
}

static void case_bf16(void)
{
    CHECK_INT_EQ(llm_f32_to_bf16(1.0f), 0x3f80);
    CHECK_INT_EQ(llm_f32_to_bf16(-1.5f), 0xbfc0);
    CHECK_INT_EQ(llm_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);   /* tie: even */
    CHECK_INT_EQ(llm_f32_to_bf16(1.0f + 0x1.8p-7f), 0x3f82); /* tie: even */
    CHECK_INT_EQ(llm_f32_to_bf16(3.14159265f), 0x4049);
    CHECK_INT_EQ(llm_f32_to_bf16(INFINITY), 0x7f80);
    CHECK(isnan(llm_bf16_to_f32(llm_f32_to_bf16(NAN))));
    CHECK_NEAR(llm_bf16_to_f32(0x4049), 3.140625, 0);
    CHECK_NEAR(llm_bf16_to_f32(0xbfc0), -1.5, 0);
}

static void case_q8_0(void)
{
    /* x[j] = j - 16: amax 16, d = 16/127 -> fp16 0x3008 (0.1259765625);
     * 1/d = 7.9375 in float32; q = round-half-away(x * 7.9375), so the
     * exact halves -63.5 and 63.5 go to -64 and 64. */
    static const int8_t q_want[32] = {-127, -119, -111, -103, -95, -87, -79, -71, -64, -56, -48,
                                      -40,  -32,  -24,  -16,  -8,  0,   8,   16,  24,  32,  40,
                                      48,   56,   64,   71,   79,  87,  95,  103, 111, 119};
    float x[32], y[32];
    unsigned char blk[34];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16);
    llm_quantize_row(LLM_TYPE_Q8_0, x, blk, 32);
    CHECK_INT_EQ(blk[0] | (blk[1] << 8), 0x3008);
    for (int j = 0; j < 32; j++)
        CHECK_INT_EQ((int8_t)blk[2 + j], q_want[j]);
    llm_dequantize_row(LLM_TYPE_Q8_0, blk, y, 32);
    for (int j = 0; j < 32; j++)
        CHECK_NEAR(y[j], q_want[j] * 0.1259765625, 0);
    /* An all-zero block: d = 0, q = 0. */
    memset(x, 0, sizeof x);
    llm_quantize_row(LLM_TYPE_Q8_0, x, blk, 32);
    for (int j = 0; j < 34; j++)
        CHECK_INT_EQ(blk[j], 0);
}

static void case_q4_0(void)
{
    /* x[j] = j - 12: the largest |x| is 19, d = 19 / -8 = -2.375 (fp16
     * 0xc0c0), 1/d = -0.42105263 in float32, q = min(15, trunc(x/d + 8.5)).
     * Element j goes in byte j's low nibble, element j+16 in its high one. */
    static const uint8_t bytes_want[16] = {0x6d, 0x6d, 0x5c, 0x5c, 0x5b, 0x4b, 0x4b, 0x3a,
                                           0x3a, 0x39, 0x29, 0x28, 0x18, 0x18, 0x07, 0x07};
    static const int q_want[32] = {13, 13, 12, 12, 11, 11, 11, 10, 10, 9, 9, 8, 8, 8, 7, 7,
                                   6,  6,  5,  5,  5,  4,  4,  3,  3,  3, 2, 2, 1, 1, 0, 0};
    float x[32], y[32];
    unsigned char blk[18];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 12);
    llm_quantize_row(LLM_TYPE_Q4_0, x, blk, 32);
    CHECK_INT_EQ(blk[0] | (blk[1] << 8), 0xc0c0);
    for (int j = 0; j < 16; j++)
        CHECK_INT_EQ(blk[2 + j], bytes_want[j]);
    llm_dequantize_row(LLM_TYPE_Q4_0, blk, y, 32);
    for (int j = 0; j < 32; j++)
        CHECK_NEAR(y[j], (q_want[j] - 8) * -2.375, 0);
    /* Non-finite input must not be undefined behaviour; zeros stay zero. */
    memset(x, 0, sizeof x);
    llm_quantize_row(LLM_TYPE_Q4_0, x, blk, 32);
    CHECK_INT_EQ(blk[0] | (blk[1] << 8), 0x8000); /* 0 / -8 is -0.0, as in ggml */
    CHECK_INT_EQ(blk[2], 0x88);
    x[3] = INFINITY;
    unsigned char blk8[34];
    llm_quantize_row(LLM_TYPE_Q4_0, x, blk, 32);
    llm_quantize_row(LLM_TYPE_Q8_0, x, blk8, 32);
    CHECK_INT_EQ(blk8[0] | (blk8[1] << 8), 0x7c00); /* d = inf/127 = inf */
}

static void case_types(void)
{
    uint64_t n = 0;
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_F32, 10, &n), 0);
    CHECK_U64_EQ(n, 40);
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_BF16, 3, &n), 0);
    CHECK_U64_EQ(n, 6);
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_Q8_0, 64, &n), 0);
    CHECK_U64_EQ(n, 68);
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_Q4_0, 96, &n), 0);
    CHECK_U64_EQ(n, 54);
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_Q4_0, 33, &n), -1);   /* not whole blocks */
    CHECK_INT_EQ(llm_type_row_bytes(99, 32, &n), -1);              /* unknown */
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_F32, UINT64_MAX / 2, &n), -1); /* overflow */
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_Q4_K, 512, &n), 0);
    CHECK_U64_EQ(n, 288);
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_Q5_K, 256, &n), 0);
    CHECK_U64_EQ(n, 176);
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_Q6_K, 768, &n), 0);
    CHECK_U64_EQ(n, 630);
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_Q6_K, 128, &n), -1);  /* half a super-block */
    CHECK_INT_EQ(llm_type_row_bytes(9, 64, &n), 0);                /* q8_1: sized, not supported */
    CHECK_U64_EQ(n, 72);
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_Q4_1, 64, &n), 0);
    CHECK_U64_EQ(n, 40);
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_Q5_0, 96, &n), 0);
    CHECK_U64_EQ(n, 66);
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_Q5_1, 1408, &n), 0); /* KJV's ffn_down rows */
    CHECK_U64_EQ(n, 1056);
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_Q5_1, 48, &n), -1);
    CHECK(llm_type_is_supported(LLM_TYPE_Q8_0));
    CHECK(llm_type_is_supported(LLM_TYPE_Q4_K));
    CHECK(!llm_type_is_supported(9));
    CHECK(llm_type_is_supported(LLM_TYPE_Q4_1));
    CHECK(llm_type_is_supported(LLM_TYPE_Q5_0));
    CHECK(llm_type_is_supported(LLM_TYPE_Q5_1));
    CHECK(llm_type_is_supported(LLM_TYPE_Q2_K));
    CHECK(llm_type_is_supported(LLM_TYPE_Q3_K));
    CHECK(!llm_type_is_supported(15)); /* q8_K: sized, not supported */
    CHECK(llm_type_is_known(20) && !llm_type_is_supported(20));
    CHECK_STR_EQ(llm_type_name(20), "iq4_nl");
    CHECK_INT_EQ(llm_type_row_bytes(20, 1408, &n), 0); /* 44 blocks of 18 */
    CHECK_U64_EQ(n, 792);
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_Q2_K, 512, &n), 0);
    CHECK_U64_EQ(n, 168);
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_Q3_K, 768, &n), 0);
    CHECK_U64_EQ(n, 330);
    CHECK_INT_EQ(llm_type_row_bytes(LLM_TYPE_Q3_K, 288, &n), -1);
    CHECK_INT_EQ(llm_type_find(NULL, LLM_TYPE_Q2_K)->file_type, 10);
    CHECK_INT_EQ(llm_type_find(NULL, LLM_TYPE_Q3_K)->file_type, 12);
    CHECK(llm_type_is_known(9));
    CHECK(!llm_type_is_known(4));
    CHECK_STR_EQ(llm_type_name(LLM_TYPE_BF16), "bf16");
    CHECK_STR_EQ(llm_type_name(LLM_TYPE_Q4_0), "q4_0");
    CHECK_STR_EQ(llm_type_name(200), "unknown");
    uint32_t t = 0;
    CHECK_INT_EQ(llm_type_parse("Q8_0", &t), 0);
    CHECK_INT_EQ(t, LLM_TYPE_Q8_0);
    CHECK_INT_EQ(llm_type_parse("f16", &t), 0);
    CHECK_INT_EQ(t, LLM_TYPE_F16);
    CHECK_INT_EQ(llm_type_parse("q4_K", &t), 0);
    CHECK_INT_EQ(t, LLM_TYPE_Q4_K);
    CHECK_INT_EQ(llm_type_parse("Q6_k", &t), 0);
    CHECK_INT_EQ(t, LLM_TYPE_Q6_K);
    CHECK_INT_EQ(llm_type_parse("Q5_1", &t), 0);
    CHECK_INT_EQ(t, LLM_TYPE_Q5_1);
    CHECK_INT_EQ(llm_type_parse("q8_1", &t), -1);
    CHECK_INT_EQ(llm_type_parse("Q2_K", &t), 0);
    CHECK_INT_EQ(t, LLM_TYPE_Q2_K);
    CHECK_INT_EQ(llm_type_parse("q3_k", &t), 0);
    CHECK_INT_EQ(t, LLM_TYPE_Q3_K);
    CHECK_INT_EQ(llm_type_find(NULL, LLM_TYPE_Q4_1)->file_type, 3);
    CHECK_INT_EQ(llm_type_find(NULL, LLM_TYPE_Q5_0)->file_type, 8);
    CHECK_INT_EQ(llm_type_find(NULL, LLM_TYPE_Q5_1)->file_type, 9);
    CHECK_INT_EQ(llm_type_parse("", &t), -1);
    CHECK_INT_EQ(llm_type_block_size(LLM_TYPE_Q4_0), 32);
    CHECK_INT_EQ(llm_type_block_bytes(LLM_TYPE_Q8_0), 34);
}

/* F16/BF16 rows through the row functions: unaligned source bytes. */
static void case_rows(void)
{
    float x[5] = {1.0f, -2.0f, 0.1f, 65504.0f, 0.0f}, y[5];
    unsigned char buf[1 + 10];
    llm_quantize_row(LLM_TYPE_F16, x, buf + 1, 5);
    CHECK_INT_EQ(buf[1 + 4] | (buf[1 + 5] << 8), 0x2e66);
    llm_dequantize_row(LLM_TYPE_F16, buf + 1, y, 5);
    CHECK_NEAR(y[2], 0.0999755859375, 0);
    CHECK_NEAR(y[3], 65504.0, 0);
    llm_quantize_row(LLM_TYPE_BF16, x, buf + 1, 5);
    CHECK_INT_EQ(buf[1] | (buf[2] << 8), 0x3f80);
    llm_dequantize_row(LLM_TYPE_BF16, buf + 1, y, 5);
    CHECK_NEAR(y[1], -2.0, 0);
}

/* ---- k-quants: hand-built super-blocks --------------------------------- */

/* Q4_K scales and mins of the hand-built block: sub-blocks 4..7 use the
 * packed high bits (17, 33, 50, 63 and 20, 40, 60 need 6 bits). */
static const int k_sc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
static const int k_mn[8] = {0, 1, 2, 3, 20, 40, 60, 5};

/* d = 1.0, dmin = 0.5; the 12 scale bytes worked by hand: bytes 0..3 are
 * sc0..3 plus the top two bits of sc4..7 (1, 2, 3, 3) in bits 6..7; bytes
 * 4..7 the same for the mins (1, 2, 3, 0); bytes 8..11 the low nibbles
 * (sc & 15) | (m & 15) << 4 of sub-blocks 4..7. Nibbles: sub-block 2p has
 * q = l & 15, sub-block 2p+1 q = 15 - (l & 15). */
static void k45_block(unsigned char *blk, int five)
{
    static const unsigned char sc12[12] = {65, 130, 195, 196, 64, 129, 194, 3, 0x41, 0x81, 0xc2, 0x5f};
    blk[0] = 0x00, blk[1] = 0x3c; /* 1.0 */
    blk[2] = 0x00, blk[3] = 0x38; /* 0.5 */
    memcpy(blk + 4, sc12, 12);
    unsigned char *qs = blk + (five ? 48 : 16);
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++)
            qs[32 * p + l] = (unsigned char)((l & 15) | ((15 - (l & 15)) << 4));
    if (five)
        for (int l = 0; l < 32; l++)
            blk[16 + l] = (unsigned char)(l * 37);
}

static void case_q4_k(void)
{
    unsigned char blk[144];
    float y[256];
    k45_block(blk, 0);
    llm_dequantize_row(LLM_TYPE_Q4_K, blk, y, 256);
    /* A few by hand: element 37 is sub-block 1, l 5: q 10, 2*10 - 0.5*1;
     * 200 is sub-block 6, l 8: q 8, 50*8 - 0.5*60; 255: q 0, -0.5*5. */
    CHECK_NEAR(y[0], 0.0, 0);
    CHECK_NEAR(y[37], 19.5, 0);
    CHECK_NEAR(y[200], 370.0, 0);
    CHECK_NEAR(y[255], -2.5, 0);
    for (int e = 0; e < 256; e++) {
        int j = e / 32, l = e % 32, q = j % 2 ? 15 - (l & 15) : (l & 15);
        CHECK_NEAR(y[e], k_sc[j] * q - 0.5 * k_mn[j], 0);
    }
}

static void case_q5_k(void)
{
    unsigned char blk[176];
    float y[256];
    k45_block(blk, 1);
    llm_dequantize_row(LLM_TYPE_Q5_K, blk, y, 256);
    /* qh[l] = 37 l mod 256. Element 37 (sub-block 1, l 5): qh[5] = 185 =
     * 0b10111001, bit 1 is 0: q 10 as in Q4_K, 19.5. Element 200 (sub-block
     * 6, l 8): qh[8] = 296 mod 256 = 40 = 0b00101000, bit 6 is 0: 370.
     * Element 163 (sub-block 5, l 3): qh[3] = 111 = 0b01101111, bit 5 is 1:
     * q = 15 - 3 + 16 = 28, 33*28 - 0.5*40 = 904. */
    CHECK_NEAR(y[37], 19.5, 0);
    CHECK_NEAR(y[200], 370.0, 0);
    CHECK_NEAR(y[163], 904.0, 0);
    for (int e = 0; e < 256; e++) {
        int j = e / 32, l = e % 32, q = j % 2 ? 15 - (l & 15) : (l & 15);
        q += (((l * 37) & 255) >> j & 1) * 16;
        CHECK_NEAR(y[e], k_sc[j] * q - 0.5 * k_mn[j], 0);
    }
}

static void case_q6_k(void)
{
    unsigned char blk[210];
    float y[256];
    for (int i = 0; i < 128; i++)
        blk[i] = (unsigned char)i;                /* ql */
    for (int i = 0; i < 64; i++)
        blk[128 + i] = (unsigned char)(i * 29 + 3); /* qh */
    for (int k = 0; k < 16; k++)
        blk[192 + k] = (unsigned char)(signed char)(k - 8);
    blk[208] = 0x00, blk[209] = 0x34; /* d = 0.25 */
    llm_dequantize_row(LLM_TYPE_Q6_K, blk, y, 256);
    /* Element 0: ql[0] = 0, qh[0] = 3 (bits 0..1 = 3): q = 48 - 32 = 16,
     * scale -8: -32. Element 200 = 128 + 64 + 8 (h 1, g 2, l 8): high
     * nibble of ql[72] = 4, qh[40] = 139 = 0b10001011, bits 4..5 = 0:
     * q = 4 - 32, scale 12 - 8 = 4: -28. Element 255 (h 1, g 3, l 31): high
     * nibble of ql[127] = 7, qh[63] = 38 = 0b00100110, bits 6..7 = 0:
     * q = -25, scale 7: -43.75. */
    CHECK_NEAR(y[0], -32.0, 0);
    CHECK_NEAR(y[200], -28.0, 0);
    CHECK_NEAR(y[255], -43.75, 0);
}

/* Q2_K by hand: d = 1.0, dmin = 0.5, scale byte k = k | (15 - k) << 4
 * (sub-block k: scale k, min 15 - k), qs[i] = i. */
static void case_q2_k(void)
{
    unsigned char blk[84];
    float y[256];
    for (int k = 0; k < 16; k++)
        blk[k] = (unsigned char)(k | ((15 - k) << 4));
    for (int i = 0; i < 64; i++)
        blk[16 + i] = (unsigned char)i;
    blk[80] = 0x00, blk[81] = 0x3c; /* 1.0 */
    blk[82] = 0x00, blk[83] = 0x38; /* 0.5 */
    llm_dequantize_row(LLM_TYPE_Q2_K, blk, y, 256);
    /* Element 0: qs[0] = 0, q 0, sub-block 0 (min 15): -7.5. Element 37
     * (h 0, g 1, l 5): qs[5] = 0b101, bits 2..3 = 1; sub-block 2: 2*1 -
     * 0.5*13 = -4.5. Element 200 (h 1, g 2, l 8): qs[40] = 0b101000, bits
     * 4..5 = 2; sub-block 12: 12*2 - 0.5*3 = 22.5. Element 255 (h 1, g 3,
     * l 31): qs[63] = 0b111111, bits 6..7 = 0; sub-block 15: 0. Element
     * 127 (h 0, g 3, l 31): qs[31] = 0b11111, bits 6..7 = 0; sub-block 7:
     * -4. Element 97 (h 0, g 3, l 1): qs[1] = 1, bits 6..7 = 0; sub-block 6
     * (scale 6, min 9): -4.5. Element 66 (g 2, l 2): qs[2] = 0b10, bits
     * 4..5 = 0, sub-block 4: -5.5; element 48 (g 1, l 16): qs[16] =
     * 0b10000, bits 2..3 = 0, sub-block 3: -6. */
    CHECK_NEAR(y[0], -7.5, 0);
    CHECK_NEAR(y[37], -4.5, 0);
    CHECK_NEAR(y[200], 22.5, 0);
    CHECK_NEAR(y[255], 0.0, 0);
    CHECK_NEAR(y[127], -4.0, 0);
    CHECK_NEAR(y[97], -4.5, 0);
    CHECK_NEAR(y[66], -5.5, 0);
    CHECK_NEAR(y[48], -6.0, 0);
    /* Element 176 (h 1, g 1, l 16): qs[48] = 0b110000, bits 2..3 = 0,
     * sub-block 11: -2; element 180 (l 20): qs[52] = 0b110100, bits 2..3
     * = 1: 11 - 2 = 9. */
    CHECK_NEAR(y[176], -2.0, 0);
    CHECK_NEAR(y[180], 9.0, 0);
}

/* Q3_K by hand: d = 0.25, scales k - 8 (6-bit k + 24: bytes 0..7 carry
 * the low nibbles of sub-blocks k and k + 8, bytes 8..11 the top two bits
 * 1, 1, 2, 2 = 0xa5), hmask[l] = 37 l mod 256, qs[i] = 5 i + 1 mod 256. */
static void case_q3_k(void)
{
    unsigned char blk[110];
    float y[256];
    for (int l = 0; l < 32; l++)
        blk[l] = (unsigned char)(l * 37);
    for (int i = 0; i < 64; i++)
        blk[32 + i] = (unsigned char)(5 * i + 1);
    static const unsigned char sc12[12] = {0x08, 0x19, 0x2a, 0x3b, 0x4c, 0x5d, 0x6e, 0x7f,
                                           0xa5, 0xa5, 0xa5, 0xa5};
    memcpy(blk + 96, sc12, 12);
    blk[108] = 0x00, blk[109] = 0x34; /* 0.25 */
    for (int k = 0; k < 16; k++)
        CHECK_INT_EQ(llm_q3k_scale(blk + 96, k), k - 8);
    llm_dequantize_row(LLM_TYPE_Q3_K, blk, y, 256);
    /* Element 0: qs[0] = 1, low 1; hmask[0] bit 0 clear: q = -3; scale -8:
     * 6. Element 37 (h 0, g 1, l 5): qs[5] = 26 = 0b11010, bits 2..3 = 2;
     * hmask[5] = 185 = 0b10111001, bit 1 clear: q = -2; scale -6: 3.
     * Element 200 (h 1, g 2, l 8): qs[40] = 201 = 0b11001001, bits 4..5 =
     * 0; hmask[8] = 40 = 0b101000, bit 6 clear: q = -4; scale 4: -4.
     * Element 255 (h 1, g 3, l 31): qs[63] = 60 = 0b111100, bits 6..7 = 0;
     * hmask[31] = 123 = 0b1111011, bit 7 clear: -4; scale 7: -7. Element
     * 161 (h 1, g 1, l 1): qs[33] = 166 = 0b10100110, bits 2..3 = 1;
     * hmask[1] = 37 = 0b100101, bit 5 set: q = 1; scale 2: 0.5. Element
     * 2 (h 0, g 0, l 2): qs[2] = 11 = 0b1011, bits 0..1 = 3; hmask[2] = 74
     * = 0b1001010, bit 0 clear: q = -1; scale -8: 2. Element 66 (g 2, l
     * 2): qs[2] bits 4..5 = 0, hmask[2] bit 2 clear: -4; scale -4: 4. */
    CHECK_NEAR(y[0], 6.0, 0);
    CHECK_NEAR(y[37], 3.0, 0);
    CHECK_NEAR(y[200], -4.0, 0);
    CHECK_NEAR(y[255], -7.0, 0);
    CHECK_NEAR(y[161], 0.5, 0);
    CHECK_NEAR(y[2], 2.0, 0);
    CHECK_NEAR(y[66], 4.0, 0);
    /* Element 35 (h 0, g 1, l 3): qs[3] = 16 = 0b10000, bits 2..3 = 0;
     * hmask[3] = 111 = 0b1101111, bit 1 set: q = 0: -0 * scale = 0. */
    CHECK_NEAR(y[35], 0.0, 0);
}

/* The round-to-nearest quantizers on rows whose every sub-block spans
 * exactly their levels, byte for byte as worked out by hand. Q2_K:
 * x = e % 4 - 1, so each sub-block's range is [-1, 2]: scale and min 1,
 * d = dmin = fp16(1/15) = 0x2c44, 4-bit scale and min
 * round(1 / 0.06665) = 15, q = x + 1 = e % 4 (bits 2g of qs[32h + l] for
 * e = 128h + 32g + l: l % 4 in every field, byte 85 (l % 4)). Q3_K:
 * x = e % 8 - 4: the largest |x| is -4, scale -4 / -4 = 1, d =
 * fp16(1/31) = 0x2821, 6-bit scale 31 (stored 63), q = x, stored as
 * u = q + 4 = e % 8: low bits l % 4 (bytes 85 (l % 4)), high bit set
 * where l % 8 >= 4 (hmask 0xff there, else 0). */
static void case_k23_quantize(void)
{
    float x[256], y[256];
    unsigned char q2[84], q3[110];
    for (int e = 0; e < 256; e++)
        x[e] = (float)(e % 4 - 1);
    llm_quantize_row(LLM_TYPE_Q2_K, x, q2, 256);
    for (int k = 0; k < 16; k++)
        CHECK_INT_EQ(q2[k], 0xff);
    for (int i = 0; i < 64; i++)
        CHECK_INT_EQ(q2[16 + i], 85 * (i % 4));
    CHECK_INT_EQ(q2[80] | (q2[81] << 8), 0x2c44);
    CHECK_INT_EQ(q2[82] | (q2[83] << 8), 0x2c44);
    llm_dequantize_row(LLM_TYPE_Q2_K, q2, y, 256);
    for (int e = 0; e < 256; e++) /* 15 * fp16(1/15) = 0.999755859375 */
        CHECK_NEAR(y[e], 0.999755859375 * (e % 4 - 1), 0);

    for (int e = 0; e < 256; e++)
        x[e] = (float)(e % 8 - 4);
    llm_quantize_row(LLM_TYPE_Q3_K, x, q3, 256);
    for (int l = 0; l < 32; l++)
        CHECK_INT_EQ(q3[l], l % 8 >= 4 ? 0xff : 0);
    for (int i = 0; i < 64; i++)
        CHECK_INT_EQ(q3[32 + i], 85 * (i % 4));
    for (int i = 0; i < 12; i++)
        CHECK_INT_EQ(q3[96 + i], 0xff);
    CHECK_INT_EQ(q3[108] | (q3[109] << 8), 0x2821);
    llm_dequantize_row(LLM_TYPE_Q3_K, q3, y, 256);
    for (int e = 0; e < 256; e++) /* 31 * fp16(1/31) = 0.999969482421875 */
        CHECK_NEAR(y[e], 0.999969482421875 * (e % 8 - 4), 0);
}

/* Round trips: each k-quant reproduces random rows within its resolution
 * (relative RMS error, bounds about twice the measured), zeros stay zero,
 * non-finite input is no undefined behaviour. */
static void case_k_roundtrip(void)
{
    static const struct {
        uint32_t type;
        double bound;
    } types[] = {{LLM_TYPE_Q4_K, 0.12}, {LLM_TYPE_Q5_K, 0.06}, {LLM_TYPE_Q6_K, 0.03},
                 {LLM_TYPE_Q2_K, 0.5}, {LLM_TYPE_Q3_K, 0.3}};
    enum { N = 1024 };
    static float x[N], y[N];
    static unsigned char q[N];
    uint32_t r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * (i < 512 ? 2.0f : 0.01f);
    }
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        llm_quantize_row(types[t].type, x, q, N);
        llm_dequantize_row(types[t].type, q, y, N);
        double e2 = 0, x2 = 0;
        for (int i = 0; i < N; i++) {
            e2 += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
            x2 += (double)x[i] * x[i];
        }
        printf("%s: relative rms error %.4f\n", llm_type_name(types[t].type), sqrt(e2 / x2));
        CHECK(sqrt(e2 / x2) < types[t].bound);
        float z[256] = {0};
        llm_quantize_row(types[t].type, z, q, 256);
        llm_dequantize_row(types[t].type, q, y, 256);
        for (int i = 0; i < 256; i++)
            CHECK(y[i] == 0.0f);
        z[7] = INFINITY;
        z[9] = NAN;
        llm_quantize_row(types[t].type, z, q, 256);
    }
}

/* ---- Q4_1, Q5_0, Q5_1: hand-built blocks of 32 ------------------------- */

/* Byte j of the nibbles holds element j (low) and j+16 (high); the 5-bit
 * types' fifth bits are the 32-bit little-endian word before them. */
static void case_q4_1(void)
{
    /* d = 0.5 (fp16 0x3800), m = -3 (0xc200); byte j = j | (15 - j) << 4:
     * element j < 16 has q = j, element j + 16 has q = 15 - j. */
    unsigned char blk[20] = {0x00, 0x38, 0x00, 0xc2};
    for (int j = 0; j < 16; j++)
        blk[4 + j] = (unsigned char)(j | ((15 - j) << 4));
    float y[32];
    llm_dequantize_row(LLM_TYPE_Q4_1, blk, y, 32);
    CHECK_NEAR(y[0], -3.0, 0);   /* 0 * 0.5 - 3 */
    CHECK_NEAR(y[5], -0.5, 0);   /* 5 * 0.5 - 3 */
    CHECK_NEAR(y[15], 4.5, 0);   /* 15 * 0.5 - 3 */
    CHECK_NEAR(y[16], 4.5, 0);   /* q 15 */
    CHECK_NEAR(y[31], -3.0, 0);  /* q 0 */
    for (int j = 0; j < 16; j++) {
        CHECK_NEAR(y[j], 0.5 * j - 3.0, 0);
        CHECK_NEAR(y[j + 16], 0.5 * (15 - j) - 3.0, 0);
    }
    /* x[j] = j - 12: min -12 (m = 0xca00), d = 31/15 = 2.0666666 (fp16
     * 0x4022, stored; q uses the f32 1/d), q = min(15, trunc((x + 12)/d +
     * 0.5)) = round(15 j / 31) = j / 2 (no ties: 31 is odd). */
    static const uint8_t want[20] = {0x22, 0x40, 0x00, 0xca, 0x80, 0x80, 0x91, 0x91, 0xa2, 0xa2,
                                     0xb3, 0xb3, 0xc4, 0xc4, 0xd5, 0xd5, 0xe6, 0xe6, 0xf7, 0xf7};
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 12);
    llm_quantize_row(LLM_TYPE_Q4_1, x, blk, 32);
    for (int i = 0; i < 20; i++)
        CHECK_INT_EQ(blk[i], want[i]);
}

static void case_q5_0(void)
{
    /* d = 0.25 (0x3400); qh bytes 01 80 00 ff: bits 0, 15 and 24..31 set;
     * byte j = (7j mod 16) | (3j mod 16) << 4. */
    unsigned char blk[22] = {0x00, 0x34, 0x01, 0x80, 0x00, 0xff};
    for (int j = 0; j < 16; j++)
        blk[6 + j] = (unsigned char)(((7 * j) & 15) | (((3 * j) & 15) << 4));
    float y[32];
    llm_dequantize_row(LLM_TYPE_Q5_0, blk, y, 32);
    CHECK_NEAR(y[0], 0.0, 0);    /* q 0 + 16 (bit 0): 0.25 * 0 */
    CHECK_NEAR(y[1], -2.25, 0);  /* q 7: 0.25 * (7 - 16) */
    CHECK_NEAR(y[15], 2.25, 0);  /* 105 mod 16 = 9, bit 15: 25 - 16 */
    CHECK_NEAR(y[20], -1.0, 0);  /* j 4 high: 12, bit 20 clear */
    CHECK_NEAR(y[31], 3.25, 0);  /* j 15 high: 45 mod 16 = 13, bit 31: 29 - 16 */
    const uint32_t qh = 0xff008001u;
    for (int j = 0; j < 16; j++) {
        int lo = ((7 * j) & 15) + (int)((qh >> j) & 1) * 16;
        int hi = ((3 * j) & 15) + (int)((qh >> (j + 16)) & 1) * 16;
        CHECK_NEAR(y[j], 0.25 * (lo - 16), 0);
        CHECK_NEAR(y[j + 16], 0.25 * (hi - 16), 0);
    }
    /* x[j] = j - 12: the extreme is 19, d = 19 / -16 = -1.1875 (fp16
     * 0xbcc0), q = min(31, trunc(x/d + 16.5)) = floor(16.5 + 16 (12 - j) /
     * 19): 26 25 24 24 23 22 21 20 19 19 18 17 16 | 15 14 13 13 12 11 10 9
     * 8 8 7 6 5 4 3 3 2 1 0. Elements 0..12 have q >= 16: qh = 0x1fff. */
    static const uint8_t want[22] = {0xc0, 0xbc, 0xff, 0x1f, 0x00, 0x00, 0xda, 0xc9, 0xb8, 0xa8, 0x97,
                                     0x86, 0x85, 0x74, 0x63, 0x53, 0x42, 0x31, 0x30, 0x2f, 0x1e, 0x0d};
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 12);
    llm_quantize_row(LLM_TYPE_Q5_0, x, blk, 32);
    for (int i = 0; i < 22; i++)
        CHECK_INT_EQ(blk[i], want[i]);
    /* All zeros: d = 0 / -16 = -0 (0x8000), every q 16 (nibble 0, bit set). */
    memset(x, 0, sizeof x);
    llm_quantize_row(LLM_TYPE_Q5_0, x, blk, 32);
    CHECK_INT_EQ(blk[0] | (blk[1] << 8), 0x8000);
    CHECK_INT_EQ(blk[2] & blk[3] & blk[4] & blk[5], 0xff);
    CHECK_INT_EQ(blk[6], 0x00);
}

static void case_q5_1(void)
{
    /* d = 2 (0x4000), m = 0.5 (0x3800); qh bytes aa 55 0f f0: bits 1 3 5 7,
     * 8 10 12 14, 16..19, 28..31; byte j = (15 - j) | j << 4. */
    unsigned char blk[24] = {0x00, 0x40, 0x00, 0x38, 0xaa, 0x55, 0x0f, 0xf0};
    for (int j = 0; j < 16; j++)
        blk[8 + j] = (unsigned char)((15 - j) | (j << 4));
    float y[32];
    llm_dequantize_row(LLM_TYPE_Q5_1, blk, y, 32);
    CHECK_NEAR(y[0], 30.5, 0);   /* q 15: 2 * 15 + 0.5 */
    CHECK_NEAR(y[1], 60.5, 0);   /* q 14 + 16 */
    CHECK_NEAR(y[16], 32.5, 0);  /* j 0 high: 0 + 16 (bit 16) */
    CHECK_NEAR(y[20], 8.5, 0);   /* j 4 high: 4, bit 20 clear */
    CHECK_NEAR(y[31], 62.5, 0);  /* j 15 high: 15 + 16 */
    const uint32_t qh = 0xf00f55aau;
    for (int j = 0; j < 16; j++) {
        int lo = (15 - j) + (int)((qh >> j) & 1) * 16;
        int hi = j + (int)((qh >> (j + 16)) & 1) * 16;
        CHECK_NEAR(y[j], 2.0 * lo + 0.5, 0);
        CHECK_NEAR(y[j + 16], 2.0 * hi + 0.5, 0);
    }
    /* x[j] = j - 12: min -12 (0xca00), d = 31 / 31 = 1 (0x3c00), q = j:
     * nibble bytes j | j << 4 = 17 j, fifth bits set for j >= 16. */
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 12);
    llm_quantize_row(LLM_TYPE_Q5_1, x, blk, 32);
    static const uint8_t head[8] = {0x00, 0x3c, 0x00, 0xca, 0x00, 0x00, 0xff, 0xff};
    for (int i = 0; i < 8; i++)
        CHECK_INT_EQ(blk[i], head[i]);
    for (int j = 0; j < 16; j++)
        CHECK_INT_EQ(blk[8 + j], 17 * j);
}

/* Round trips of the three on random rows (relative RMS error, bounds
 * about twice the measured); a constant block is exact for the _1 types;
 * non-finite input is no undefined behaviour. */
static void case_legacy_roundtrip(void)
{
    static const struct {
        uint32_t type;
        double bound;
    } types[] = {{LLM_TYPE_Q4_1, 0.12}, {LLM_TYPE_Q5_0, 0.06}, {LLM_TYPE_Q5_1, 0.06}};
    enum { N = 1024 };
    static float x[N], y[N];
    static unsigned char q[N];
    uint32_t r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * (i < 512 ? 2.0f : 0.01f);
    }
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        llm_quantize_row(types[t].type, x, q, N);
        llm_dequantize_row(types[t].type, q, y, N);
        double e2 = 0, x2 = 0;
        for (int i = 0; i < N; i++) {
            e2 += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
            x2 += (double)x[i] * x[i];
        }
        printf("%s: relative rms error %.4f\n", llm_type_name(types[t].type), sqrt(e2 / x2));
        CHECK(sqrt(e2 / x2) < types[t].bound);
        float c[32];
        for (int i = 0; i < 32; i++)
            c[i] = 0.75f;
        llm_quantize_row(types[t].type, c, q, 32);
        llm_dequantize_row(types[t].type, q, y, 32);
        for (int i = 0; i < 32; i++)
            CHECK_NEAR(y[i], 0.75, 0);
        c[7] = INFINITY;
        c[9] = NAN;
        llm_quantize_row(types[t].type, c, q, 32);
    }
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {{"fp16", case_fp16}, {"bf16", case_bf16}, {"q8_0", case_q8_0},
                 {"q4_0", case_q4_0}, {"types", case_types}, {"rows", case_rows},
                 {"q4_k", case_q4_k}, {"q5_k", case_q5_k}, {"q6_k", case_q6_k},
                 {"q2_k", case_q2_k}, {"q3_k", case_q3_k}, {"k23_quantize", case_k23_quantize},
                 {"k_roundtrip", case_k_roundtrip}, {"q4_1", case_q4_1}, {"q5_0", case_q5_0},
                 {"q5_1", case_q5_1}, {"legacy_roundtrip", case_legacy_roundtrip}};
    REQUIRE(argc == 2);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(argv[1], cases[i].name) == 0) {
            cases[i].fn();
            return pm_check_result();
        }
    }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
