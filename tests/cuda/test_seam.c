/* test_seam — the CUDA implementation of the engine's backend seam: names,
 * the instance's marker name, and failure reporting (the seam's operations
 * return nothing, so a failed one must show in llm_cuda_backend_status and
 * a read of void results must not return stale numbers).
 */
#include <math.h>
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

static const ct_case cases[] = {
    {"seam_name", seam_name}, {"seam_status", seam_status},
};

CT_MAIN(cases)
