/* test_seam — the CUDA implementation of the engine's backend seam: names,
 * the instance's marker name, and failure reporting (the seam's operations
 * return nothing, so a failed one must show in llm_cuda_backend_status and
 * a read of void results must not return stale numbers), and the prefill
 * switch (llm_cuda_backend_set_prefill, PHASEMARK_CUDA_PREFILL).
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_test.h"
#include "model.h"
#include "quant.h"

static void seam_name(void)
{
    char err[256];
    llm_backend *be = (llm_backend *)err;
    CHECK_INT_EQ(llm_cuda_backend_create("cuda:x", &be, err, sizeof err), LLM_EINVAL);
    CHECK(be == NULL);
    CHECK_INT_EQ(llm_cuda_backend_create("cuda:-1", &be, err, sizeof err), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_backend_create("cuda:1 ", &be, err, sizeof err), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_backend_create("cpu", &be, err, sizeof err), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_backend_create(NULL, &be, err, sizeof err), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_backend_create("cuda:1023", &be, err, sizeof err), LLM_EBACKEND);
    printf("cuda:1023 -> %s\n", err);
    ct_require_device();
    CHECK_INT_EQ(llm_cuda_backend_create("cuda", &be, err, sizeof err), 0);
    REQUIRE(be);
    CHECK_STR_EQ(be->ops->name, "cuda:0");
    CHECK_INT_EQ(be->host_visible, 0);
    CHECK(llm_cuda_backend_context(be) != NULL);
    CHECK_INT_EQ(llm_cuda_backend_status(be, err, sizeof err), 0);
    /* Two instances on one device are independent. */
    llm_backend *b2 = NULL;
    CHECK_INT_EQ(llm_cuda_backend_create("cuda:0", &b2, err, sizeof err), 0);
    CHECK(b2 && llm_cuda_backend_context(b2) != llm_cuda_backend_context(be));
    b2->ops->destroy(b2);
    be->ops->destroy(be);
}

static void seam_status(void)
{
    ct_require_device();
    char err[256];
    llm_backend *be = NULL;
    REQUIRE(llm_cuda_backend_create("cuda:0", &be, err, sizeof err) == 0);
    REQUIRE(be->ops->reserve(be, 64, 256) == 0);
    float *x = be->ops->alloc(be, 256 * sizeof(float));
    float *y = be->ops->alloc(be, 256 * sizeof(float));
    REQUIRE(x && y);
    float host[256];
    for (int i = 0; i < 256; i++)
        host[i] = (float)i;
    be->ops->write(be, x, host, sizeof host);
    be->ops->add(be, x, x, 256);
    be->ops->read(be, host, x, sizeof host);
    CHECK_NEAR(host[100], 200.0, 0.0);
    CHECK_INT_EQ(llm_cuda_backend_status(be, err, sizeof err), 0);
    /* A tensor type the device cannot hold: the upload fails inside matmul. */
    static unsigned char q4k[144 * 2];
    llm_tensor t = {q4k, 12 /* q4_K */, 256, 2, 144};
    be->ops->matmul(be, &t, x, 1, y);
    int st = llm_cuda_backend_status(be, err, sizeof err);
    printf("status %d: %s\n", st, err);
    CHECK(st < 0);
    CHECK(strstr(err, "cuda:0") != NULL);
    /* Later reads give NaN, not stale values. */
    be->ops->read(be, host, x, sizeof host);
    CHECK(isnan(host[0]) && isnan(host[255]));
    be->ops->free(be, x);
    be->ops->free(be, y);
    be->ops->destroy(be);
}

static int32_t gemm_min(llm_backend *be)
{
    llm_cuda_tuning t;
    REQUIRE(llm_cuda_get_tuning(llm_cuda_backend_context(be), &t) == 0);
    return t.attn_gemm_min;
}

/* The prefill switch: arguments, and the attention threshold each mode
 * gives the context (TF32 from LLM_CUDA_PREFILL_TF32_MIN rows when fused,
 * never on the old op-by-op path), from the call and from the
 * environment at creation. */
static void seam_prefill_mode(void)
{
    CHECK_INT_EQ(llm_cuda_backend_set_prefill(NULL, LLM_CUDA_PREFILL_OPS), LLM_EINVAL);
    ct_require_device();
    char err[256];
    llm_backend *be = NULL;
    REQUIRE(llm_cuda_backend_create("cuda:0", &be, err, sizeof err) == 0);
    CHECK_INT_EQ(gemm_min(be), LLM_CUDA_PREFILL_TF32_MIN); /* the default: fused */
    CHECK_INT_EQ(llm_cuda_backend_set_prefill(be, 2), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_backend_set_prefill(be, -1), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_backend_set_prefill(be, LLM_CUDA_PREFILL_OPS), 0);
    CHECK_INT_EQ(gemm_min(be), INT32_MAX);
    CHECK_INT_EQ(llm_cuda_backend_set_prefill(be, LLM_CUDA_PREFILL_FUSED), 0);
    CHECK_INT_EQ(gemm_min(be), LLM_CUDA_PREFILL_TF32_MIN);
    CHECK_INT_EQ(llm_cuda_backend_status(be, err, sizeof err), 0);
    be->ops->destroy(be);
    REQUIRE(setenv("PHASEMARK_CUDA_PREFILL", "ops", 1) == 0);
    REQUIRE(llm_cuda_backend_create("cuda:0", &be, err, sizeof err) == 0);
    CHECK_INT_EQ(gemm_min(be), INT32_MAX);
    be->ops->destroy(be);
    REQUIRE(unsetenv("PHASEMARK_CUDA_PREFILL") == 0);
}

static const ct_case cases[] = {
    {"seam_name", seam_name}, {"seam_status", seam_status},
    {"seam_prefill_mode", seam_prefill_mode},
};

CT_MAIN(cases)
