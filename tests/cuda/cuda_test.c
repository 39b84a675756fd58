/* cuda_test.c — see cuda_test.h. */
#include "cuda_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_loop.h"
#include "quant.h"

void ct_require_device(void)
{
    int n = 0;
    char err[256];
    llm_cuda_device_count(&n, err, sizeof err);
    if (n <= 0) {
        fprintf(stderr, "skipped: no CUDA device (%s)\n", err[0] ? err : "none visible");
        exit(77);
    }
}

llm_cuda *ct_open(int32_t max_n, int64_t max_width, uint32_t max_ctx,
                  int32_t max_heads)
{
    ct_require_device();
    llm_cuda *c = NULL;
    char err[256];
    if (llm_cuda_create(0, &c, err, sizeof err) != 0) {
        fprintf(stderr, "llm_cuda_create: %s\n", err);
        exit(1);
    }
    CT_OK(c, llm_cuda_reserve(c, max_n, max_width, max_ctx, max_heads));
    return c;
}

uint64_t ct_next(ct_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double ct_uniform(ct_rng *r)
{
    return (double)(ct_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

float ct_sym(ct_rng *r, float scale)
{
    return (float)((2.0 * ct_uniform(r) - 1.0) * scale);
}

void ct_fill(ct_rng *r, float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = ct_sym(r, scale);
}

void *ct_dev(llm_cuda *c, size_t bytes)
{
    void *p = NULL;
    CT_OK(c, llm_cuda_malloc(c, bytes, &p));
    return p;
}

void ct_put(llm_cuda *c, void *dev, const void *host, size_t bytes)
{
    CT_OK(c, llm_cuda_upload(c, dev, host, bytes));
}

void ct_get(llm_cuda *c, void *host, const void *dev, size_t bytes)
{
    CT_OK(c, llm_cuda_download(c, host, dev, bytes));
}

void ct_poison(llm_cuda *c, float *dev, size_t n)
{
    float *h = malloc(n * sizeof *h);
    REQUIRE(h);
    for (size_t i = 0; i < n; i++)
        h[i] = NAN;
    ct_put(c, dev, h, n * sizeof *h);
    CT_OK(c, llm_cuda_sync(c));
    free(h);
}

double ct_rel_err(const float *out, const double *ref, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(out[i]))
            return INFINITY;
        double d = (double)out[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

double ct_max_err(const float *out, const double *ref, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(out[i]))
            return INFINITY;
        double d = fabs((double)out[i] - ref[i]);
        if (d > m)
            m = d;
    }
    return m;
}

size_t ct_row_bytes(uint32_t type, int64_t cols)
{
    /* The type table's answer, so every type it knows (k-quants too) is
     * sized the way the reader and the uploads size it. */
    uint64_t bytes = 0;
    return llm_type_row_bytes(type, (uint64_t)cols, &bytes) == 0 ? (size_t)bytes : 0;
}

/* A simple block quantizer of our own (scale = amax / 127 or amax / 8,
 * rounded to fp16 first): the device must reproduce d * q exactly, whatever
 * rounding chose q. */
static void encode_q8(const float *w, int64_t cols, unsigned char *dst, double *deq)
{
    for (int64_t b = 0; b < cols / 32; b++) {
        const float *x = w + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        uint16_t dh = llm_f32_to_fp16(amax / 127.0f);
        float d = llm_fp16_to_f32(dh);
        unsigned char *blk = dst + b * 34;
        memcpy(blk, &dh, 2);
        for (int j = 0; j < 32; j++) {
            long q = d > 0.0f ? lroundf(x[j] / d) : 0;
            q = q > 127 ? 127 : q < -127 ? -127 : q;
            blk[2 + j] = (unsigned char)(int8_t)q;
            deq[b * 32 + j] = (double)d * (double)q;
        }
    }
}

static void encode_q4(const float *w, int64_t cols, unsigned char *dst, double *deq)
{
    for (int64_t b = 0; b < cols / 32; b++) {
        const float *x = w + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        uint16_t dh = llm_f32_to_fp16(amax / 7.0f);
        float d = llm_fp16_to_f32(dh);
        unsigned char *blk = dst + b * 18;
        memcpy(blk, &dh, 2);
        int nib[32];
        for (int j = 0; j < 32; j++) {
            long q = d > 0.0f ? lroundf(x[j] / d) : 0;
            q = q > 7 ? 7 : q < -8 ? -8 : q;
            nib[j] = (int)q + 8;
            deq[b * 32 + j] = (double)d * (double)q;
        }
        for (int j = 0; j < 16; j++)
            blk[2 + j] = (unsigned char)(nib[j] | (nib[j + 16] << 4));
    }
}

/* One k-quant super-block decoded by its layout (quant.h), in double: the
 * blocks come from the engine's quantizer, the values from this reading
 * of the format, so the device and the reference share no decoding code. */
static void decode_k(uint32_t type, const unsigned char *b, double *out)
{
    if (type == LLM_TYPE_Q6_K) {
        double d = llm_fp16_to_f32((uint16_t)(b[208] | b[209] << 8));
        for (int e = 0; e < 256; e++) {
            int h = e / 128, g = (e % 128) / 32, l = e % 32;
            int lo = (b[64 * h + l + 32 * (g & 1)] >> (4 * (g >> 1))) & 15;
            int hi = (b[128 + 32 * h + l] >> (2 * g)) & 3;
            out[e] = d * (double)(signed char)b[192 + e / 16] * (double)((lo | hi << 4) - 32);
        }
        return;
    }
    /* Q4_K and Q5_K: d, dmin, 12 scale bytes, (Q5_K: qh[32]), qs[128] */
    int five = type == LLM_TYPE_Q5_K;
    double d = llm_fp16_to_f32((uint16_t)(b[0] | b[1] << 8));
    double dmin = llm_fp16_to_f32((uint16_t)(b[2] | b[3] << 8));
    const unsigned char *s = b + 4, *qh = b + 16, *qs = b + (five ? 48 : 16);
    for (int j = 0; j < 8; j++) {
        int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        int m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        for (int l = 0; l < 32; l++) {
            int q = qs[32 * (j / 2) + l];
            q = (j & 1) ? q >> 4 : q & 15;
            if (five)
                q += 16 * ((qh[l] >> j) & 1);
            out[32 * j + l] = d * sc * q - dmin * m;
        }
    }
}

size_t ct_encode(uint32_t type, const float *w, int64_t rows, int64_t cols,
                 void *dst, double *deq)
{
    size_t rb = ct_row_bytes(type, cols);
    if (type == LLM_TYPE_Q4_K || type == LLM_TYPE_Q5_K || type == LLM_TYPE_Q6_K) {
        size_t bb = type == LLM_TYPE_Q4_K   ? LLM_Q4_K_BYTES
                    : type == LLM_TYPE_Q5_K ? LLM_Q5_K_BYTES
                                            : LLM_Q6_K_BYTES;
        for (int64_t r = 0; r < rows; r++) {
            unsigned char *o = (unsigned char *)dst + (size_t)r * rb;
            llm_quantize_row(type, w + r * cols, o, (size_t)cols);
            for (int64_t b = 0; b < cols / 256; b++)
                decode_k(type, o + (size_t)b * bb, deq + r * cols + b * 256);
        }
        return rb;
    }
    for (int64_t r = 0; r < rows; r++) {
        const float *x = w + r * cols;
        unsigned char *o = (unsigned char *)dst + (size_t)r * rb;
        double *d = deq + r * cols;
        for (int64_t i = 0; type != LLM_TYPE_Q8_0 && type != LLM_TYPE_Q4_0 && i < cols; i++) {
            if (type == LLM_TYPE_F32) {
                memcpy(o + 4 * i, &x[i], 4);
                d[i] = x[i];
            } else if (type == LLM_TYPE_F16) {
                uint16_t h = llm_f32_to_fp16(x[i]);
                memcpy(o + 2 * i, &h, 2);
                d[i] = llm_fp16_to_f32(h);
            } else {
                uint16_t h = llm_f32_to_bf16(x[i]);
                memcpy(o + 2 * i, &h, 2);
                d[i] = llm_bf16_to_f32(h);
            }
        }
        if (type == LLM_TYPE_Q8_0)
            encode_q8(x, cols, o, d);
        else if (type == LLM_TYPE_Q4_0)
            encode_q4(x, cols, o, d);
    }
    return rb;
}

int ct_run(int argc, char **argv, const ct_case *cases, size_t n)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CASE\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < n; i++)
        if (strcmp(argv[1], cases[i].name) == 0) {
            cases[i].fn();
            return 0;
        }
    fprintf(stderr, "%s: unknown case %s\n", argv[0], argv[1]);
    return 2;
}

double ct_chi2_two(const int *a, const int *b, int n, int *df)
{
    double x = 0.0, pa = 0.0, pb = 0.0;
    int bins = 0;
    for (int i = 0; i < n; i++) {
        if (a[i] + b[i] < 10) {
            pa += a[i];
            pb += b[i];
            continue;
        }
        x += (double)(a[i] - b[i]) * (a[i] - b[i]) / (double)(a[i] + b[i]);
        bins++;
    }
    if (pa + pb > 0) {
        x += (pa - pb) * (pa - pb) / (pa + pb);
        bins++;
    }
    *df = bins > 1 ? bins - 1 : 1;
    return x;
}

double ct_chi2_bound(int df)
{
    return (double)df + 8.0 * sqrt(2.0 * (double)df) + 10.0;
}

#define LAW_MAX_TOKENS 16

typedef struct law_out {
    int32_t toks[LAW_MAX_TOKENS];
    size_t n;
} law_out;

static int law_collect(void *user, int32_t tok)
{
    law_out *o = user;
    if (o->n < LAW_MAX_TOKENS)
        o->toks[o->n] = tok;
    o->n++;
    return 0;
}

void ct_law_check(llm_session *ref, struct llm_cuda_loop *loop, llm_sampler *hot, int32_t k,
                  const int32_t *prompt, size_t n, int32_t max_tokens, const char *label)
{
    REQUIRE(max_tokens >= 3 && max_tokens <= LAW_MAX_TOKENS);
    int32_t v = llm_sampler_n_vocab(hot);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = max_tokens;
    gp.stop_at_eos = 0;
    /* The tokens compared: the second, the third and the last. */
    const int at[3] = {1, 2, max_tokens - 1};
    int n_at = max_tokens > 3 ? 3 : 2;
    int *hist = calloc((size_t)6 * (size_t)v, sizeof *hist); /* [side][token][v] */
    REQUIRE(hist);
    int first_differs = 0;
    for (int r = 0; r < CT_LAW_RUNS; r++) {
        law_out o[2];
        memset(o, 0, sizeof o);
        llm_sampler_reseed(hot, 1000u + (uint64_t)r);
        llm_session_reset(ref);
        REQUIRE(llm_generate(ref, hot, prompt, n, &gp, law_collect, &o[0], NULL, NULL) == 0);
        llm_sampler_reseed(hot, 1000u + (uint64_t)r);
        int rc = llm_cuda_loop_generate(loop, hot, k, prompt, n, &gp, law_collect, &o[1], NULL,
                                        NULL);
        if (rc)
            fprintf(stderr, "%s: %s\n", label, llm_cuda_loop_error(loop));
        REQUIRE(rc == 0);
        REQUIRE(o[0].n == (size_t)max_tokens && o[1].n == (size_t)max_tokens);
        for (int m = 0; m < 2; m++)
            for (int j = 0; j < n_at; j++)
                hist[((size_t)m * 3 + (size_t)j) * (size_t)v + (size_t)o[m].toks[at[j]]]++;
        first_differs += o[1].toks[0] != o[0].toks[0];
    }
    CHECK_INT_EQ(first_differs, 0);
    for (int j = 0; j < n_at; j++) {
        int df = 0;
        double x = ct_chi2_two(hist + (size_t)j * (size_t)v, hist + ((size_t)3 + (size_t)j) * (size_t)v,
                               v, &df);
        printf("sampled law: %s token %d: chi2 %.1f, df %d (bound %.1f)\n", label, 1 + at[j], x,
               df, ct_chi2_bound(df));
        CHECK(x < ct_chi2_bound(df));
    }
    free(hist);
}
