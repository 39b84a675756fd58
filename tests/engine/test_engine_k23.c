/* test_engine_k23 — the Q2_K and Q3_K matrix–vector products of one kernel
 * set on hand-built super-blocks, against values worked out by hand.
 *
 * Every weight and activation is a small integer or half, so every term
 * and sum is exact in f32 and each set (the scalar reference, AVX2, and
 * the avx512 set's own VNNI kernels, whatever their order of additions)
 * must give exactly these numbers. Agreement on random rows (scalar
 * against a double-precision dot of the reference dequantization, AVX2
 * bitwise the scalar, AVX-512 within f32 rounding) is test_engine_matvec's
 * check_kquants.
 *
 * The sets' rows to f32 (the prefill panels) are held to the reference
 * conversion bit for bit (check_dequant).
 *
 * Activations are built directly in the row loop's layout (llm_acts: a
 * scale d per block of 32 and int8 quants), not through the quantizer, so
 * their values are exact.
 *
 *   test_engine_k23 scalar|avx2|avx512      (a set the CPU lacks: exit 77)
 */
#include <stdio.h>
#include <string.h>

#include "kernels.h"
#include "pm_check.h"
#include "quant.h"

#define LEN 512 /* two super-blocks */
#define NB (LEN / 32)

/* Two activation rows: row 0 is 1.0 everywhere (d 1, q 1), row 1 is
 * -0.25 (d 0.25, q -1) for Q2_K and 1.0 again as d 0.5, q 2 for Q3_K. */
typedef struct acts_buf {
    float d[2 * NB];
    int8_t q[2 * LEN];
    int32_t xsum[2 * NB];
} acts_buf;

static llm_acts make_acts(acts_buf *b, float d1, int8_t q1)
{
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < NB; i++) {
            b->d[t * NB + i] = t ? d1 : 1.0f;
            b->xsum[t * NB + i] = -128 * 32 * (t ? q1 : 1);
        }
    for (int i = 0; i < LEN; i++) {
        b->q[i] = 1;
        b->q[LEN + i] = q1;
    }
    llm_acts a = {0};
    a.n = 2;
    a.len = LEN;
    a.d = b->d;
    a.q = b->q;
    a.xsum = b->xsum;
    return a;
}

/* qs bytes 0xe4 = 0b11100100: the two bits at 2g are g, so element
 * 128h + 32g + l has q = g (Q2_K) or low bits g (Q3_K). */
static void q2k_block(unsigned char *blk, unsigned char d_hi)
{
    for (int k = 0; k < 16; k++)
        blk[k] = (unsigned char)(k | ((15 - k) << 4)); /* scale k, min 15 - k */
    memset(blk + 16, 0xe4, 64);
    blk[80] = 0x00, blk[81] = d_hi;
    blk[82] = 0x00, blk[83] = 0x38; /* dmin 0.5 */
}

/* Scales k - 8 (as in test_quant's q3_k case), hmask all `hm`. */
static void q3k_block(unsigned char *blk, unsigned char hm, unsigned char d_hi)
{
    static const unsigned char sc12[12] = {0x08, 0x19, 0x2a, 0x3b, 0x4c, 0x5d, 0x6e, 0x7f,
                                           0xa5, 0xa5, 0xa5, 0xa5};
    memset(blk, hm, 32);
    memset(blk + 32, 0xe4, 64);
    memcpy(blk + 96, sc12, 12);
    blk[108] = 0x00, blk[109] = d_hi;
}

/* Q2_K, one row: super-block 0 with d 1, super-block 1 with d 2, both
 * dmin 0.5. Element e = 128h + 32g + l is in sub-block k = 8h + 2g + l/16
 * with q = g, so sum(sc_k q) over a super-block is
 * 16 * sum_h sum_g g (k0 + k1) = 16 * sum g (16h + 4g + 1) = 16 * (62 + 158)
 * = 3520 and sum(dmin m_k) = 0.5 * 16 * (15 + ... + 0) = 960. Row 0 of the
 * activations (all 1): 1 * 3520 - 960 + 2 * 3520 - 960 = 8640; row 1
 * (all -0.25): -2160. */
static void check_q2_k(const llm_type_kernels *e)
{
    unsigned char w[2 * LLM_Q2_K_BYTES];
    q2k_block(w, 0x3c);
    q2k_block(w + LLM_Q2_K_BYTES, 0x40);
    acts_buf b;
    llm_acts a = make_acts(&b, 0.25f, -1);
    float y[2 * 3] = {-1, -1, -1, -1, -1, -1};
    e->matvec(w, sizeof w, 1, &a, y, 3);
    CHECK_NEAR(y[0], 8640.0, 0);
    CHECK_NEAR(y[3], -2160.0, 0);
    CHECK_NEAR(y[1], -1.0, 0); /* outside the row: untouched */
    CHECK_NEAR(y[4], -1.0, 0);
}

/* Q3_K, three rows of two super-blocks (d 0.5, then 1), scales k - 8.
 * hmask 0xff: q = g, sum((k - 8) g) = 16 * sum g (16h + 4g - 15) =
 * 16 * (-34 + 62) = 448, so 0.5 * 448 + 448 = 672. hmask 0: q = g - 4,
 * sum((k - 8)(g - 4)) = 448 - 4 * 16 * (-8) = 960: 1440. hmask 0x0f: the
 * first half (bits 0..3: blocks 0..3) q = g, the second g - 4:
 * 16 * (-34) + 16 * 62 - 4 * 16 * (0 + ... + 7) = -1344: -2016. Both
 * activation rows are 1.0. */
static void check_q3_k(const llm_type_kernels *e)
{
    enum { RB = 2 * LLM_Q3_K_BYTES };
    unsigned char w[3 * RB];
    const unsigned char hm[3] = {0xff, 0x00, 0x0f};
    for (int r = 0; r < 3; r++) {
        q3k_block(w + r * RB, hm[r], 0x38);
        q3k_block(w + r * RB + LLM_Q3_K_BYTES, hm[r], 0x3c);
    }
    acts_buf b;
    llm_acts a = make_acts(&b, 0.5f, 2);
    float y[2 * 4];
    for (int i = 0; i < 8; i++)
        y[i] = -1.0f;
    e->matvec(w, RB, 3, &a, y, 4);
    const double want[3] = {672.0, 1440.0, -2016.0};
    for (int t = 0; t < 2; t++) {
        for (int r = 0; r < 3; r++)
            CHECK_NEAR(y[t * 4 + r], want[r], 0);
        CHECK_NEAR(y[t * 4 + 3], -1.0, 0);
    }
}

/* The set's rows to f32 (prefill panels, embedding rows) against the
 * reference conversion (quant_k.c), bit for bit: the hand-built blocks
 * above and random ones (quantized from random rows, and raw random
 * bytes, which reach every scale and bit pattern; the fp16 scales are
 * kept finite so that NaN payloads do not enter the comparison). */
static void check_dequant(const llm_type_kernels *e, uint32_t type, size_t bytes)
{
    enum { NSB = 8 };
    unsigned char w[NSB * LLM_Q3_K_BYTES];
    float x[NSB * 256], got[NSB * 256], want[NSB * 256];
    uint32_t r = 2463534242u;
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 0) {
            for (int b = 0; b < NSB; b++) {
                if (type == LLM_TYPE_Q2_K)
                    q2k_block(w + b * bytes, (unsigned char)(0x30 + b));
                else
                    q3k_block(w + b * bytes, (unsigned char)(37 * b), (unsigned char)(0x30 + b));
            }
        } else if (pass == 1) {
            for (int i = 0; i < NSB * 256; i++) {
                r ^= r << 13, r ^= r >> 17, r ^= r << 5;
                x[i] = (float)((int32_t)r) * (i % 97 == 0 ? 1e-7f : 1e-9f);
            }
            llm_quantize_row(type, x, w, NSB * 256);
        } else {
            for (size_t i = 0; i < NSB * bytes; i++) {
                r ^= r << 13, r ^= r >> 17, r ^= r << 5;
                w[i] = (unsigned char)(r >> 24);
            }
            for (int b = 0; b < NSB; b++) { /* fp16 scales: exponent below all-ones */
                size_t at = type == LLM_TYPE_Q2_K ? 81 : 109;
                w[b * bytes + at] &= 0x7b;
                if (type == LLM_TYPE_Q2_K)
                    w[b * bytes + 83] &= 0x7b;
            }
        }
        e->dequant(w, got, NSB * 256);
        llm_dequantize_row(type, w, want, NSB * 256);
        int bad = 0;
        for (int i = 0; i < NSB * 256; i++)
            if (memcmp(&got[i], &want[i], sizeof got[i]) != 0 && bad++ < 3)
                fprintf(stderr, "%s pass %d element %d: %.9g, reference %.9g\n", llm_type_name(type), pass,
                        i, got[i], want[i]);
        CHECK_INT_EQ(bad, 0);
    }
}

int main(int argc, char **argv)
{
    const char *set = argc > 1 ? argv[1] : "";
    llm_kernels k, avx2;
    llm_kernels_scalar(&k);
    if (strcmp(set, "avx2") == 0 || strcmp(set, "avx512") == 0) {
        if (llm_kernels_avx2(&k) != 0)
            PM_SKIP("the CPU lacks AVX2/FMA/F16C");
        avx2 = k;
        if (strcmp(set, "avx512") == 0 && (llm_kernels_vnni(&k) != 0 || llm_kernels_avx512(&k) != 0))
            PM_SKIP("the CPU lacks AVX-512 F/BW/VL/VNNI");
    } else if (strcmp(set, "scalar") != 0) {
        fprintf(stderr, "usage: test_engine_k23 scalar|avx2|avx512\n");
        return 2;
    }
    const uint32_t types[2] = {LLM_TYPE_Q2_K, LLM_TYPE_Q3_K};
    for (int i = 0; i < 2; i++) {
        const llm_type_kernels *e = llm_kernels_find(&k, types[i]);
        REQUIRE(e);
        CHECK(e->acts_q8 == 1);
        CHECK(e->batched == NULL); /* prefill: dequantized panels */
        if (strcmp(set, "avx512") == 0) { /* its own products and rows to f32 */
            CHECK(e->matvec != llm_kernels_find(&avx2, types[i])->matvec);
            CHECK(e->dequant != llm_kernels_find(&avx2, types[i])->dequant);
        }
    }
    check_q2_k(llm_kernels_find(&k, LLM_TYPE_Q2_K));
    check_q3_k(llm_kernels_find(&k, LLM_TYPE_Q3_K));
    check_dequant(llm_kernels_find(&k, LLM_TYPE_Q2_K), LLM_TYPE_Q2_K, LLM_Q2_K_BYTES);
    check_dequant(llm_kernels_find(&k, LLM_TYPE_Q3_K), LLM_TYPE_Q3_K, LLM_Q3_K_BYTES);
    return pm_check_result();
}
