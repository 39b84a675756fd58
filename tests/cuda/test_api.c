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
    CHECK_INT_EQ(llm_cuda_weight_upload(c, 12 /* q4_K */, host, 256, 1, 144, &w), LLM_EINVAL);
    CHECK(w.data == NULL);
    CHECK_INT_EQ(llm_cuda_weight_upload(c, LLM_TYPE_Q8_0, host, 40, 1, 34, &w), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_weight_upload(c, LLM_TYPE_F32, host, 64, 1, 100, &w), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_weight_upload(c, LLM_TYPE_F32, host, 0, 1, 100, &w), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    llm_cuda_free(c);
}

static const ct_case cases[] = {
    {"no_device_args", no_device_args}, {"bad_args", bad_args},
    {"sticky_error", sticky_error}, {"reserve_limits", reserve_limits},
    {"weight_upload_types", weight_upload_types},
};

CT_MAIN(cases)
