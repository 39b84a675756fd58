/* test_seam — the CUDA implementation of the engine's backend seam: names,
 * the instance's marker name, and failure reporting (the seam's operations
 * return nothing, so a failed one must show in the backend's status and
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
#include "forward.h"
#include "model.h"
#include "quant.h"

/* Names go through the registry (backend.c), the one parser of them. */
static void seam_name(void)
{
    char err[256];
    llm_backend *be = (llm_backend *)err;
    CHECK_INT_EQ(llm_cuda_backend_create(-1, &be, err, sizeof err), LLM_EINVAL);
    CHECK(be == NULL);
    CHECK_INT_EQ(llm_backend_create("cuda:1023", 1, &be, err, sizeof err), LLM_EBACKEND);
    printf("cuda:1023 -> %s\n", err);
    ct_require_device();
    CHECK_INT_EQ(llm_backend_create("cuda", 1, &be, err, sizeof err), 0);
    REQUIRE(be);
    CHECK_STR_EQ(be->ops->name, "cuda:0");
    CHECK_INT_EQ(be->host_visible, 0);
    CHECK(llm_cuda_backend_context(be) != NULL);
    CHECK_INT_EQ(be->ops->status(be, err, sizeof err), 0);
    /* Two instances on one device are independent. */
    llm_backend *b2 = NULL;
    CHECK_INT_EQ(llm_backend_create("cuda:0", 1, &b2, err, sizeof err), 0);
    CHECK(b2 && llm_cuda_backend_context(b2) != llm_cuda_backend_context(be));
    b2->ops->destroy(b2);
    be->ops->destroy(be);
}

/* A block on a model the backend never prepared fails (nothing is ever
 * uploaded inside a forward); the failure is sticky in status, names the
 * device and the layer, and later reads give NaN rather than stale values. */
static void seam_status(void)
{
    ct_require_device();
    char err[256];
    llm_backend *be = NULL;
    REQUIRE(llm_backend_create("cuda:0", 1, &be, err, sizeof err) == 0);
    REQUIRE(be->ops->reserve(be, 64, 256) == 0);
    float *x = be->ops->alloc(be, 256 * sizeof(float));
    REQUIRE(x);
    float host[256];
    for (int i = 0; i < 256; i++)
        host[i] = (float)i;
    be->ops->write(be, x, host, sizeof host);
    be->ops->read(be, host, x, sizeof host);
    CHECK_NEAR(host[100], 100.0, 0.0);
    CHECK_INT_EQ(be->ops->status(be, err, sizeof err), 0);
    llm_layer layer;
    memset(&layer, 0, sizeof layer);
    llm_model m;
    memset(&m, 0, sizeof m);
    m.hp.n_layers = 1;
    m.layers = &layer;
    llm_workspace ws;
    memset(&ws, 0, sizeof ws);
    llm_block b = {&m, 0, NULL, NULL, &ws, 1, 0};
    be->ops->ffn(be, &b);
    int st = be->ops->status(be, err, sizeof err);
    printf("status %d: %s\n", st, err);
    CHECK(st < 0);
    CHECK(strstr(err, "cuda:0") != NULL);
    CHECK(strstr(err, "layer 0") != NULL);
    be->ops->read(be, host, x, sizeof host);
    CHECK(isnan(host[0]) && isnan(host[255]));
    CHECK_INT_EQ(be->ops->sync(be), LLM_EBACKEND);
    be->ops->free(be, x);
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
    REQUIRE(llm_backend_create("cuda:0", 1, &be, err, sizeof err) == 0);
    CHECK_INT_EQ(gemm_min(be), LLM_CUDA_PREFILL_TF32_MIN); /* the default: fused */
    CHECK_INT_EQ(llm_cuda_backend_set_prefill(be, 2), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_backend_set_prefill(be, -1), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_backend_set_prefill(be, LLM_CUDA_PREFILL_OPS), 0);
    CHECK_INT_EQ(gemm_min(be), INT32_MAX);
    CHECK_INT_EQ(llm_cuda_backend_set_prefill(be, LLM_CUDA_PREFILL_FUSED), 0);
    CHECK_INT_EQ(gemm_min(be), LLM_CUDA_PREFILL_TF32_MIN);
    CHECK_INT_EQ(be->ops->status(be, err, sizeof err), 0);
    be->ops->destroy(be);
    REQUIRE(setenv("PHASEMARK_CUDA_PREFILL", "ops", 1) == 0);
    REQUIRE(llm_backend_create("cuda:0", 1, &be, err, sizeof err) == 0);
    CHECK_INT_EQ(gemm_min(be), INT32_MAX);
    be->ops->destroy(be);
    REQUIRE(unsetenv("PHASEMARK_CUDA_PREFILL") == 0);
}

/* The context's kernel choices with PHASEMARK_CUDA_Q8 (for the decode's
 * Q8 products) and PHASEMARK_CUDA_F16_GEMM (for F16 prefill) set to
 * q8 and f16 at creation (NULL: unset). */
static void tuning_with(const char *q8, const char *f16, llm_cuda_tuning *t)
{
    REQUIRE(q8 ? setenv("PHASEMARK_CUDA_Q8", q8, 1) == 0 : unsetenv("PHASEMARK_CUDA_Q8") == 0);
    REQUIRE(f16 ? setenv("PHASEMARK_CUDA_F16_GEMM", f16, 1) == 0
                : unsetenv("PHASEMARK_CUDA_F16_GEMM") == 0);
    char err[256];
    llm_backend *be = NULL;
    REQUIRE(llm_backend_create("cuda:0", 1, &be, err, sizeof err) == 0);
    REQUIRE(llm_cuda_get_tuning(llm_cuda_backend_context(be), t) == 0);
    be->ops->destroy(be);
    REQUIRE(unsetenv("PHASEMARK_CUDA_Q8") == 0 && unsetenv("PHASEMARK_CUDA_F16_GEMM") == 0);
}

/* The switches of issue 18: the Q8 decode kernel, its split-K and L2
 * prefetch, the F16 prefill, the bf16 copies of quantized weights and
 * the verify's weight-stationary products (PHASEMARK_CUDA_VERIFY)
 * from the environment (anything unknown keeps the default), the
 * tuning's range, and the warm-up switch's arguments. */
static void seam_kernel_switches(void)
{
    CHECK_INT_EQ(llm_cuda_backend_set_warmup(NULL, 0), LLM_EINVAL);
    ct_require_device();
    llm_cuda_tuning t;
    tuning_with(NULL, NULL, &t);
    CHECK_INT_EQ(t.q8_int8, 1);
    CHECK_INT_EQ(t.f16_direct, 1);
    tuning_with("f32", "bf16", &t);
    CHECK_INT_EQ(t.q8_int8, 0);
    CHECK_INT_EQ(t.f16_direct, 0);
    tuning_with("int8u1", "f16", &t);
    CHECK_INT_EQ(t.q8_int8, 2);
    CHECK_INT_EQ(t.f16_direct, 1);
    tuning_with("int8u2", NULL, &t);
    CHECK_INT_EQ(t.q8_int8, 3);
    tuning_with("int8auto", NULL, &t);
    CHECK_INT_EQ(t.q8_int8, 4);
    tuning_with("F32", "", &t);
    CHECK_INT_EQ(t.q8_int8, 1);
    CHECK_INT_EQ(t.f16_direct, 1);
    CHECK_INT_EQ(t.mv_split, 0);
    CHECK_INT_EQ(t.mv_prefetch, 0);
    CHECK_INT_EQ(t.wide_cache, 1);
    CHECK_INT_EQ(t.kq_grouped, 1);
    CHECK_INT_EQ(t.rows_stationary, 2);
    const char *verify[][2] = {{"rows", "0"}, {"stationary", "1"}, {"", "2"}, {"auto", "2"}};
    for (int i = 0; i < 4; i++) {
        REQUIRE(setenv("PHASEMARK_CUDA_VERIFY", verify[i][0], 1) == 0);
        tuning_with(NULL, NULL, &t);
        CHECK_INT_EQ(t.rows_stationary, verify[i][1][0] - '0');
    }
    REQUIRE(unsetenv("PHASEMARK_CUDA_VERIFY") == 0);
    CHECK_INT_EQ(t.rows_plan, 1);
    const char *plan[][2] = {{"fixed", "0"}, {"fitted", "1"}, {"2", "2"}, {"8", "8"},
                             {"9", "1"}, {"1", "1"}, {"22", "1"}, {"", "1"}};
    for (int i = 0; i < 8; i++) {
        REQUIRE(setenv("PHASEMARK_CUDA_ROWS_PLAN", plan[i][0], 1) == 0);
        tuning_with(NULL, NULL, &t);
        CHECK_INT_EQ(t.rows_plan, plan[i][1][0] - '0');
    }
    REQUIRE(unsetenv("PHASEMARK_CUDA_ROWS_PLAN") == 0);
    const char *kq_grouped[][2] = {{"blocks", "0"}, {"grouped2", "2"}, {"grouped", "1"}, {"x", "1"}};
    for (int i = 0; i < 4; i++) {
        REQUIRE(setenv("PHASEMARK_CUDA_KQ_LAYOUT", kq_grouped[i][0], 1) == 0);
        tuning_with(NULL, NULL, &t);
        CHECK_INT_EQ(t.kq_grouped, kq_grouped[i][1][0] - '0');
    }
    REQUIRE(unsetenv("PHASEMARK_CUDA_KQ_LAYOUT") == 0);
    CHECK_INT_EQ(t.mv_l2, 0);
    const char *mv_l2[][2] = {{"1", "1"}, {"3", "3"}, {"4", "0"}, {"12", "0"}, {"0", "0"}};
    for (int i = 0; i < 5; i++) {
        REQUIRE(setenv("PHASEMARK_CUDA_MV_L2", mv_l2[i][0], 1) == 0);
        tuning_with(NULL, NULL, &t);
        CHECK_INT_EQ(t.mv_l2, mv_l2[i][1][0] - '0');
    }
    REQUIRE(unsetenv("PHASEMARK_CUDA_MV_L2") == 0);
    CHECK_INT_EQ(t.mv_blocks, 0);
    const char *mv_blocks[][2] = {{"1", "1"}, {"4", "4"}, {"5", "0"}, {"0", "0"}, {"11", "0"}};
    for (int i = 0; i < 5; i++) {
        REQUIRE(setenv("PHASEMARK_CUDA_MV_BLOCKS", mv_blocks[i][0], 1) == 0);
        tuning_with(NULL, NULL, &t);
        CHECK_INT_EQ(t.mv_blocks, mv_blocks[i][1][0] - '0');
    }
    REQUIRE(unsetenv("PHASEMARK_CUDA_MV_BLOCKS") == 0);
    REQUIRE(setenv("PHASEMARK_CUDA_MV_SPLIT", "1", 1) == 0);
    REQUIRE(setenv("PHASEMARK_CUDA_MV_PREFETCH", "5", 1) == 0);
    REQUIRE(setenv("PHASEMARK_CUDA_WIDE", "dequant", 1) == 0);
    tuning_with(NULL, NULL, &t);
    CHECK_INT_EQ(t.mv_split, 1);
    CHECK_INT_EQ(t.mv_prefetch, 5);
    CHECK_INT_EQ(t.wide_cache, 0);
    REQUIRE(setenv("PHASEMARK_CUDA_MV_PREFETCH", "9", 1) == 0); /* out of range: default */
    tuning_with(NULL, NULL, &t);
    CHECK_INT_EQ(t.mv_prefetch, 0);
    REQUIRE(unsetenv("PHASEMARK_CUDA_MV_SPLIT") == 0 && unsetenv("PHASEMARK_CUDA_WIDE") == 0 &&
            unsetenv("PHASEMARK_CUDA_MV_PREFETCH") == 0);
    char err[256];
    llm_backend *be = NULL;
    REQUIRE(llm_backend_create("cuda:0", 1, &be, err, sizeof err) == 0);
    llm_cuda *cu = llm_cuda_backend_context(be);
    REQUIRE(llm_cuda_get_tuning(cu, &t) == 0);
    t.q8_int8 = 5;
    CHECK_INT_EQ(llm_cuda_set_tuning(cu, &t), LLM_EINVAL);
    t.q8_int8 = 3;
    t.mv_split = 2;
    CHECK_INT_EQ(llm_cuda_set_tuning(cu, &t), LLM_EINVAL);
    t.mv_split = 0;
    t.wide_cache = 2;
    CHECK_INT_EQ(llm_cuda_set_tuning(cu, &t), LLM_EINVAL);
    t.wide_cache = 1;
    t.kq_grouped = 3;
    CHECK_INT_EQ(llm_cuda_set_tuning(cu, &t), LLM_EINVAL);
    t.kq_grouped = 1;
    t.mv_l2 = 4;
    CHECK_INT_EQ(llm_cuda_set_tuning(cu, &t), LLM_EINVAL);
    t.mv_l2 = 2;
    t.mv_blocks = 5;
    CHECK_INT_EQ(llm_cuda_set_tuning(cu, &t), LLM_EINVAL);
    t.mv_blocks = 1;
    t.rows_stationary = 3;
    CHECK_INT_EQ(llm_cuda_set_tuning(cu, &t), LLM_EINVAL);
    t.rows_stationary = 2;
    t.rows_plan = LLM_CUDA_ROWS_GROUP_MAX + 1;
    CHECK_INT_EQ(llm_cuda_set_tuning(cu, &t), LLM_EINVAL);
    t.rows_plan = -1;
    CHECK_INT_EQ(llm_cuda_set_tuning(cu, &t), LLM_EINVAL);
    t.rows_plan = LLM_CUDA_ROWS_GROUP_MAX;
    CHECK_INT_EQ(llm_cuda_set_tuning(cu, &t), 0);
    t.rows_plan = 1;
    /* which verify widths go weight-stationary, per setting: the default
     * from 2 rows up (the fixed groups of the fp32/f16/bf16 products still
     * from 7, inside the products) */
    const int widths[] = {1, 2, 5, 6, 7, 9, 17};
    const char *expect[] = {"0000000", "0111111", "0111111"};
    for (int mode = 0; mode <= 2; mode++) {
        t.rows_stationary = mode;
        REQUIRE(llm_cuda_set_tuning(cu, &t) == 0);
        for (int i = 0; i < 7; i++)
            CHECK_INT_EQ(llm_cuda_verify_stationary(cu, widths[i]), expect[mode][i] - '0');
    }
    t.rows_stationary = 2;
    t.f16_direct = 2;
    CHECK_INT_EQ(llm_cuda_set_tuning(cu, &t), LLM_EINVAL);
    t.f16_direct = 0;
    CHECK_INT_EQ(llm_cuda_set_tuning(cu, &t), 0);
    CHECK_INT_EQ(llm_cuda_backend_set_warmup(be, 3), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_backend_set_warmup(be, 2), 0);
    CHECK_INT_EQ(llm_cuda_backend_set_warmup(be, -1), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_backend_set_warmup(be, 0), 0);
    CHECK_INT_EQ(llm_cuda_backend_set_warmup(be, 1), 0);
    CHECK_INT_EQ(llm_cuda_status(cu), 0);
    be->ops->destroy(be);
}

static const ct_case cases[] = {
    {"seam_name", seam_name}, {"seam_status", seam_status},
    {"seam_prefill_mode", seam_prefill_mode}, {"seam_kernel_switches", seam_kernel_switches},
};

CT_MAIN(cases)
