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
    CHECK_INT_EQ(llm_type_row_bytes(12, 256, &n), 0);              /* q4_K: sized, not supported */
    CHECK_U64_EQ(n, 144);
    CHECK(llm_type_is_supported(LLM_TYPE_Q8_0));
    CHECK(!llm_type_is_supported(12));
    CHECK(llm_type_is_known(12));
    CHECK(!llm_type_is_known(4));
    CHECK_STR_EQ(llm_type_name(LLM_TYPE_BF16), "bf16");
    CHECK_STR_EQ(llm_type_name(LLM_TYPE_Q4_0), "q4_0");
    CHECK_STR_EQ(llm_type_name(200), "unknown");
    uint32_t t = 0;
    CHECK_INT_EQ(llm_type_parse("Q8_0", &t), 0);
    CHECK_INT_EQ(t, LLM_TYPE_Q8_0);
    CHECK_INT_EQ(llm_type_parse("f16", &t), 0);
    CHECK_INT_EQ(t, LLM_TYPE_F16);
    CHECK_INT_EQ(llm_type_parse("q4_K", &t), -1);
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

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {{"fp16", case_fp16}, {"bf16", case_bf16}, {"q8_0", case_q8_0},
                 {"q4_0", case_q4_0}, {"types", case_types}, {"rows", case_rows}};
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
