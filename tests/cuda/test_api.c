/* test_api — the llm_cuda API's contract: argument checks that launch
 * nothing and leave the context healthy, sticky runtime failures, reserved
 * limits, and weight uploads of every type (and refusals of the rest).
 * no_device_args runs everywhere (it is the one case that must also pass
 * on a machine without a GPU); the others skip there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"
#include "quant.h"

static void no_device_args(void)
{
    char err[256];
    CHECK_INT_EQ(llm_cuda_device_count(NULL, err, sizeof err), LLM_EINVAL);
    int n = -1;
    CHECK_INT_EQ(llm_cuda_device_count(&n, err, sizeof err), 0);
    CHECK(n >= 0);
    llm_cuda *c = (llm_cuda *)&n; /* must be overwritten with NULL */
    CHECK(llm_cuda_create(-1, &c, err, sizeof err) < 0);
    CHECK(c == NULL);
    CHECK(err[0] != '\0');
    c = (llm_cuda *)&n;
    CHECK(llm_cuda_create(n, &c, err, sizeof err) < 0); /* one past the last */
    CHECK(c == NULL);
    CHECK_INT_EQ(llm_cuda_create(0, NULL, err, sizeof err), LLM_EINVAL);
    llm_cuda_free(NULL);
    CHECK_INT_EQ(llm_cuda_status(NULL), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_sync(NULL), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_matmul(NULL, NULL, NULL, 1, NULL), LLM_EINVAL);
    llm_cuda_weight_release(NULL, NULL);
    llm_cuda_graph_free(NULL);
    printf("devices: %d (%s)\n", n, err[0] ? err : "ok");
}

static void bad_args(void)
{
    llm_cuda *c = ct_open(8, 256, 64, 4);
    float *d = ct_dev(c, 1024 * sizeof(float));
    llm_cuda_weight w;
    CT_OK(c, llm_cuda_weight_alloc(c, LLM_TYPE_BF16, 256, 4, &w));
    CHECK_INT_EQ(llm_cuda_matmul(c, &w, d, 0, d + 512), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_matmul(c, NULL, d, 1, d + 512), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_rmsnorm(c, d, d, NULL, 1, 16, 1e-5f), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_rope(c, d, 1, 2, 16, (llm_cuda_positions){0, NULL},
                               (const double *)d, 1.0f, 7), LLM_EINVAL); /* odd head */
    CHECK_INT_EQ(llm_cuda_event_record(c, LLM_CUDA_EVENTS), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_fill_uniform(c, d, LLM_TYPE_Q8_0, 4, 1, 1.0f), LLM_EINVAL);
    /* Argument errors are not sticky: the context still works. */
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    CT_OK(c, llm_cuda_fill_uniform(c, d, LLM_TYPE_F32, 1024, 1, 1.0f));
    CT_OK(c, llm_cuda_sync(c));
    llm_cuda_weight_release(c, &w);
    CHECK(w.data == NULL);
    llm_cuda_mfree(c, d);
    llm_cuda_free(c);
}

/* A real runtime failure (a copy from an address that is not device memory
 * the context owns) poisons the context: the same status and message come
 * back from every later call. */
static void sticky_error(void)
{
    llm_cuda *c = ct_open(8, 256, 64, 4);
    float *d = ct_dev(c, 64 * sizeof(float));
    int rc = llm_cuda_copy(c, d, (const void *)(uintptr_t)0x10, 64);
    if (rc == 0)
        rc = llm_cuda_sync(c);
    printf("status %d: %s\n", rc, llm_cuda_error(c));
    CHECK_INT_EQ(rc, LLM_EBACKEND);
    CHECK_INT_EQ(llm_cuda_status(c), LLM_EBACKEND);
    CHECK(strstr(llm_cuda_error(c), "cuda") != NULL || strstr(llm_cuda_error(c), "Cuda") != NULL ||
          strlen(llm_cuda_error(c)) > 0);
    CHECK_INT_EQ(llm_cuda_add(c, d, d, 64), LLM_EBACKEND);
    CHECK_INT_EQ(llm_cuda_sync(c), LLM_EBACKEND);
    llm_cuda_mfree(c, d);
    llm_cuda_free(c);
}

static void reserve_limits(void)
{
    llm_cuda *c = ct_open(8, 256, 64, 4);
    float *d = ct_dev(c, 64 * 256 * sizeof(float));
    llm_cuda_attn a = {d, d, d, d, 1, {64, NULL}, 4, 2, 32, 0}; /* pos 64 of 64 */
    CHECK_INT_EQ(llm_cuda_attention(c, &a), LLM_EINVAL);
    a.pos.pos0 = 63;
    CT_OK(c, llm_cuda_attention(c, &a));
    a.n_heads = 8; /* more heads than reserved */
    CHECK_INT_EQ(llm_cuda_attention(c, &a), LLM_EINVAL);
    a.n_heads = 4;
    a.head_dim = LLM_CUDA_MAX_HEAD_DIM + 2;
    CHECK_INT_EQ(llm_cuda_attention(c, &a), LLM_EINVAL);
    a.head_dim = 32;
    a.n_kv_heads = 3; /* does not divide the heads */
    CHECK_INT_EQ(llm_cuda_attention(c, &a), LLM_EINVAL);
    /* Growing the reservation makes the longer context legal. */
    CT_OK(c, llm_cuda_reserve(c, 8, 256, 128, 8));
    a.n_kv_heads = 2;
    a.pos.pos0 = 100;
    CT_OK(c, llm_cuda_attention(c, &a));
    CT_OK(c, llm_cuda_sync(c));
    llm_cuda_mfree(c, d);
    llm_cuda_free(c);
}

static void weight_upload_types(void)
{
    llm_cuda *c = ct_open(8, 256, 64, 4);
    unsigned char host[64 * 34 * 4];
    memset(host, 0, sizeof host);
    llm_cuda_weight w;
    const uint32_t ok[] = {LLM_TYPE_F32, LLM_TYPE_F16, LLM_TYPE_BF16,
                           LLM_TYPE_Q8_0, LLM_TYPE_Q4_0};
    for (size_t i = 0; i < 5; i++) {
        size_t rb = ct_row_bytes(ok[i], 64);
        CT_OK(c, llm_cuda_weight_upload(c, ok[i], host, 64, 4, rb, &w));
        CHECK_INT_EQ(w.type, ok[i] == LLM_TYPE_Q4_0 ? LLM_TYPE_Q8_0 : ok[i]);
        CHECK(w.rows == 4 && w.cols == 64);
        CHECK((w.scales != NULL) == (ok[i] == LLM_TYPE_Q8_0 || ok[i] == LLM_TYPE_Q4_0));
        llm_cuda_weight_release(c, &w);
    }
    /* Padded rows (row_bytes larger than the data) are accepted. */
    CT_OK(c, llm_cuda_weight_upload(c, LLM_TYPE_BF16, host, 60, 4, 128, &w));
    llm_cuda_weight_release(c, &w);
    CHECK_INT_EQ(llm_cuda_weight_upload(c, 9 /* q8_1 */, host, 64, 1, 72, &w), LLM_EINVAL);
    CHECK(w.data == NULL);
    /* Q4_K, Q5_K and Q6_K keep layouts of their own (the file's bytes,
     * 144, 176 and 210 a super-block; Q6_K's d in the scales); a row of
     * 128 is half a super-block. */
    const uint32_t kq[] = {LLM_TYPE_Q4_K, LLM_TYPE_Q5_K, LLM_TYPE_Q6_K};
    const size_t kq_bytes[] = {2 * 144, 2 * 176, 2 * 210};
    for (size_t i = 0; i < 3; i++) {
        size_t rb = ct_row_bytes(kq[i], 256);
        CT_OK(c, llm_cuda_weight_upload(c, kq[i], host, 256, 2, rb, &w));
        CHECK_INT_EQ(w.type, kq[i]);
        CHECK_INT_EQ((int)w.bytes, (int)kq_bytes[i]);
        CHECK(w.rows == 2 && w.cols == 256);
        CHECK((w.scales != NULL) == (kq[i] == LLM_TYPE_Q6_K));
        llm_cuda_weight_release(c, &w);
        CHECK_INT_EQ(llm_cuda_weight_upload(c, kq[i], host, 128, 1, rb, &w), LLM_EINVAL);
    }
    /* Mixed parts: Q4_K and Q6_K stack in the Q8 layout (272 bytes a row
     * of 256), one type as that type uploads; F16 has no Q8 split. */
    {
        const uint32_t mix[3] = {LLM_TYPE_Q4_K, LLM_TYPE_Q4_K, LLM_TYPE_Q6_K};
        const uint32_t bad[2] = {LLM_TYPE_Q4_K, LLM_TYPE_F16};
        llm_cuda_weight_part mp[3] = {{host, 2, 144}, {host, 1, 144}, {host, 1, 210}};
        CHECK_INT_EQ(llm_cuda_weight_types_stack(mix, 3), 1);
        CHECK_INT_EQ(llm_cuda_weight_types_stack(bad, 2), 0);
        CHECK_INT_EQ(llm_cuda_weight_types_stack(bad, 1), 1);
        CT_OK(c, llm_cuda_weight_upload_mixed(c, mix, 256, mp, 3, 0, &w));
        CHECK_INT_EQ(w.type, LLM_TYPE_Q8_0);
        CHECK_INT_EQ((int)w.rows, 4);
        CHECK_INT_EQ((int)w.bytes, 4 * (256 + 16));
        llm_cuda_weight_release(c, &w);
        CT_OK(c, llm_cuda_weight_upload_mixed(c, mix, 256, mp, 2, 0, &w));
        CHECK_INT_EQ(w.type, LLM_TYPE_Q4_K);
        CHECK_INT_EQ((int)w.bytes, 3 * 144);
        llm_cuda_weight_release(c, &w);
        CHECK_INT_EQ(llm_cuda_weight_upload_mixed(c, bad, 256, mp, 2, 0, &w), LLM_EINVAL);
        CHECK(w.data == NULL);
    }
    /* Q4_1 / Q5_0 / Q5_1: one Q8 block per block of 32. */
    const uint32_t lq[] = {LLM_TYPE_Q4_1, LLM_TYPE_Q5_0, LLM_TYPE_Q5_1};
    for (size_t i = 0; i < 3; i++) {
        size_t rb = ct_row_bytes(lq[i], 64);
        CT_OK(c, llm_cuda_weight_upload(c, lq[i], host, 64, 2, rb, &w));
        CHECK_INT_EQ(w.type, LLM_TYPE_Q8_0);
        CHECK(w.rows == 2 && w.cols == 64 && w.scales != NULL);
        llm_cuda_weight_release(c, &w);
        CHECK_INT_EQ(llm_cuda_weight_upload(c, lq[i], host, 48, 1, rb, &w), LLM_EINVAL);
    }
    CHECK_INT_EQ(llm_cuda_weight_upload(c, LLM_TYPE_Q8_0, host, 40, 1, 34, &w), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_weight_upload(c, LLM_TYPE_F32, host, 64, 1, 100, &w), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_weight_upload(c, LLM_TYPE_F32, host, 0, 1, 100, &w), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    llm_cuda_free(c);
}

/* The bytes of w on the device: quants or elements, then any scales. */
static unsigned char *weight_bytes_of(llm_cuda *c, const llm_cuda_weight *w, size_t *n)
{
    size_t eb = w->type == LLM_TYPE_F32 ? 4 : w->type == LLM_TYPE_Q8_0 ? 1 : 2;
    size_t nd = (size_t)w->rows * (size_t)w->cols * eb;
    size_t ns = w->scales ? (size_t)w->rows * (size_t)(w->cols / 32) * 2 : 0;
    unsigned char *b = malloc(nd + ns);
    REQUIRE(b);
    ct_get(c, b, w->data, nd);
    if (ns)
        ct_get(c, b + nd, w->scales, ns);
    *n = nd + ns;
    return b;
}

/* Stacked and interleaved uploads hold exactly the rows of separate
 * uploads in the stated order, for every type (padded rows too); row
 * views see their rows; unpair splits pairs exactly. */
static void weight_upload_parts(void)
{
    llm_cuda *c = ct_open(8, 256, 64, 4);
    const uint32_t types[] = {LLM_TYPE_F32, LLM_TYPE_F16, LLM_TYPE_BF16, LLM_TYPE_Q8_0,
                              LLM_TYPE_Q4_0};
    const int64_t cols = 64, rows[3] = {3, 2, 2};
    ct_rng r = {77};
    for (size_t t = 0; t < 5; t++) {
        size_t rb = ct_row_bytes(types[t], cols) + 16; /* padded rows */
        unsigned char *host[3];
        llm_cuda_weight one[3], st, il;
        llm_cuda_weight_part parts[3];
        for (int i = 0; i < 3; i++) {
            float w[3 * 64];
            double deq[3 * 64];
            size_t rbe = ct_row_bytes(types[t], cols);
            unsigned char *enc = malloc((size_t)rows[i] * rbe);
            host[i] = calloc((size_t)rows[i], rb);
            REQUIRE(enc && host[i]);
            ct_fill(&r, w, (size_t)(rows[i] * cols), 1.0f);
            ct_encode(types[t], w, rows[i], cols, enc, deq);
            for (int64_t k = 0; k < rows[i]; k++)
                memcpy(host[i] + (size_t)k * rb, enc + (size_t)k * rbe, rbe);
            free(enc);
            CT_OK(c, llm_cuda_weight_upload(c, types[t], host[i], cols, rows[i], rb, &one[i]));
            parts[i] = (llm_cuda_weight_part){host[i], rows[i], rb};
        }
        CT_OK(c, llm_cuda_weight_upload_parts(c, types[t], cols, parts, 3, 0, &st));
        CHECK(st.rows == 7 && st.cols == cols && st.type == one[0].type);
        /* Interleaving needs equal rows: parts 1 and 2. */
        CT_OK(c, llm_cuda_weight_upload_parts(c, types[t], cols, parts + 1, 2, 1, &il));
        CHECK(il.rows == 4);
        int64_t row0 = 0;
        for (int i = 0; i < 3; i++) {
            llm_cuda_weight v = llm_cuda_weight_rows(&st, row0, rows[i]);
            size_t na, nb;
            unsigned char *a = weight_bytes_of(c, &one[i], &na), *b = weight_bytes_of(c, &v, &nb);
            CHECK(na == nb && memcmp(a, b, na) == 0);
            free(a);
            free(b);
            row0 += rows[i];
        }
        /* Row 2k + i of the interleaved matrix is row k of part 1 + i. */
        for (int i = 0; i < 2; i++)
            for (int64_t k = 0; k < 2; k++) {
                llm_cuda_weight a1 = llm_cuda_weight_rows(&one[1 + i], k, 1);
                llm_cuda_weight b1 = llm_cuda_weight_rows(&il, 2 * k + i, 1);
                size_t na, nb;
                unsigned char *a = weight_bytes_of(c, &a1, &na), *b = weight_bytes_of(c, &b1, &nb);
                CHECK(na == nb && memcmp(a, b, na) == 0);
                free(a);
                free(b);
            }
        llm_cuda_weight_release(c, &st);
        llm_cuda_weight_release(c, &il);
        for (int i = 0; i < 3; i++) {
            llm_cuda_weight_release(c, &one[i]);
            free(host[i]);
        }
    }
    /* Unequal rows cannot interleave; no parts is an error. */
    unsigned char zero[4 * 64 * 4] = {0};
    llm_cuda_weight_part bad[2] = {{zero, 2, 256}, {zero, 1, 256}};
    llm_cuda_weight w;
    CHECK_INT_EQ(llm_cuda_weight_upload_parts(c, LLM_TYPE_F32, 64, bad, 2, 1, &w), LLM_EINVAL);
    CHECK(w.data == NULL);
    CHECK_INT_EQ(llm_cuda_weight_upload_parts(c, LLM_TYPE_F32, 64, bad, 0, 0, &w), LLM_EINVAL);
    /* unpair: a[i] = ab[2i], b[i] = ab[2i+1], exactly. */
    enum { N = 1000 };
    float hab[2 * N], ha[N], hb[N];
    ct_fill(&r, hab, 2 * N, 3.0f);
    float *dab = ct_dev(c, sizeof hab), *da = ct_dev(c, sizeof ha), *db = ct_dev(c, sizeof hb);
    ct_put(c, dab, hab, sizeof hab);
    CT_OK(c, llm_cuda_unpair(c, da, db, dab, N));
    ct_get(c, ha, da, sizeof ha);
    ct_get(c, hb, db, sizeof hb);
    int same = 1;
    for (int i = 0; i < N; i++)
        same &= ha[i] == hab[2 * i] && hb[i] == hab[2 * i + 1];
    CHECK(same);
    llm_cuda_mfree(c, dab);
    llm_cuda_mfree(c, da);
    llm_cuda_mfree(c, db);
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    llm_cuda_free(c);
}

static const ct_case cases[] = {
    {"no_device_args", no_device_args}, {"bad_args", bad_args},
    {"sticky_error", sticky_error}, {"reserve_limits", reserve_limits},
    {"weight_upload_types", weight_upload_types}, {"weight_upload_parts", weight_upload_parts},
};

CT_MAIN(cases)
