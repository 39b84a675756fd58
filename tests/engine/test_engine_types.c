/* test_engine_types — adding a tensor type is one type-table entry and its
 * kernels, nothing else in the engine.
 *
 * The toy type "toy_s8x16" lives wholly in this file: blocks of 16
 * elements, an f32 scale d then 16 int8 q (20 bytes), x = d * q. Its
 * llm_type_traits entry (quant.h) goes to the model open through the
 * internal hook (llm_model_open_hooked) together with a CPU backend whose
 * kernel table has one extra entry (cpu/cpu_backend.h): a scalar
 * matrix–vector product and the row dequantizer, both here.
 *
 * Usage: test_engine_types CASE
 *   forward     a model whose matrices and embedding are toy_s8x16 runs
 *               prefills (the batched product and the row loop) and decode
 *               steps; its logits equal bit for bit those of the same model
 *               written in F32 with the toy type's dequantized weights,
 *               both on the scalar kernels (the toy product is written as
 *               the scalar F32 dot over the dequantized row)
 *   native      the same with the F32 twin on the native (AVX2) kernels:
 *               only f32 rounding differs, |diff| <= 1e-4
 *   no_kernel   the toy type known but no CPU kernel for it: the open
 *               fails, LLM_EUNSUP, naming the type and the backend
 *   unknown     the toy type not handed in: the file is refused as
 *               malformed (the reader cannot size the tensor)
 *   bad_kernels llm_cpu_backend_create_with refuses an entry for a type
 *               that has kernels, an incomplete entry, a full table
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cpu_backend.h"
#include "model.h"
#include "phasemark/engine.h"
#include "pm_check.h"
#include "quant.h"
#include "synth.h"

/* ---- the toy type ---------------------------------------------------------- */

#define TOY_ID 200u /* not a ggml type id */
#define TOY_QK 16
#define TOY_BLOCK (4 + TOY_QK)

static float toy_scale(const unsigned char *blk)
{
    float d;
    memcpy(&d, blk, sizeof d);
    return d;
}

static void toy_to_f32(const void *src, float *dst, size_t n)
{
    const unsigned char *blk = src;
    for (size_t b = 0; b < n / TOY_QK; b++, blk += TOY_BLOCK) {
        float d = toy_scale(blk);
        for (int j = 0; j < TOY_QK; j++)
            dst[b * TOY_QK + (size_t)j] = d * (float)(signed char)blk[4 + j];
    }
}

static void toy_from_f32(const float *src, void *dst, size_t n)
{
    unsigned char *blk = dst;
    for (size_t b = 0; b < n / TOY_QK; b++, blk += TOY_BLOCK) {
        const float *x = src + b * TOY_QK;
        float amax = 0.0f;
        for (int j = 0; j < TOY_QK; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        memcpy(blk, &d, sizeof d);
        for (int j = 0; j < TOY_QK; j++)
            blk[4 + j] = (unsigned char)(signed char)lrintf(fmaxf(-127.0f, fminf(127.0f, x[j] * id)));
    }
}

static const llm_type_traits k_toy[] = {
    {TOY_ID, "toy_s8x16", TOY_QK, TOY_BLOCK, 1, 0, 0, toy_to_f32, toy_from_f32},
};
static const llm_type_set k_toy_set = {k_toy, 1};

/* y[t][r] = row r . activation row t: each weight d * q in f32, summed in
 * index order from 0, which is the scalar F32 kernel's dot over the row
 * toy_to_f32 gives, operation for operation. */
static void toy_matvec(const void *w, size_t row_bytes, int64_t rows, const llm_acts *a,
                       float *y, int64_t ldy)
{
    const unsigned char *row = w;
    for (int64_t r = 0; r < rows; r++, row += row_bytes)
        for (int32_t t = 0; t < a->n; t++) {
            const float *x = a->x + t * a->len;
            const unsigned char *blk = row;
            float s = 0.0f;
            for (int64_t b = 0; b < a->len / TOY_QK; b++, blk += TOY_BLOCK) {
                float d = toy_scale(blk);
                for (int j = 0; j < TOY_QK; j++) {
                    float wv = d * (float)(signed char)blk[4 + j];
                    s += wv * x[b * TOY_QK + j];
                }
            }
            y[t * ldy + r] = s;
        }
}

static const llm_type_kernels k_toy_kernels[] = {
    {TOY_ID, toy_matvec, toy_to_f32, 0, 0, NULL, NULL},
};

/* ---- running both models --------------------------------------------------- */

#define N_LONG 13 /* from the batched product's threshold on */
#define N_SHORT 5 /* the row loop */
#define N_DECODE 6
#define N_CTX 64

static llm_model *open_on(const char *path, const llm_type_set *types, llm_backend *be)
{
    llm_model_options o = LLM_MODEL_OPTIONS_INIT;
    o.n_threads = 2;
    llm_model_hooks h = {types, be};
    llm_model *m = NULL;
    char err[256] = "";
    int rc = llm_model_open_hooked(path, &o, &h, &m, err, sizeof err);
    if (rc) {
        fprintf(stderr, "open %s: %s (%s)\n", path, err, llm_strerror(rc));
        exit(1);
    }
    return m;
}

static llm_backend *cpu_with(int simd, const llm_type_kernels *extra, size_t n_extra)
{
    llm_backend *be = NULL;
    char err[256] = "";
    int rc = llm_cpu_backend_create_with(2, simd, extra, n_extra, &be, err, sizeof err);
    if (rc) {
        fprintf(stderr, "cpu backend: %s (%s)\n", err, llm_strerror(rc));
        exit(1);
    }
    return be;
}

static double max_diff(const float *a, const float *b, int n)
{
    double m = 0.0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || isnan(d))
            m = d;
    }
    return m;
}

/* Prefill n tokens, then decode N_DECODE, on both; every logits row is
 * compared: bitwise when tol is 0, else within tol. */
static void run(llm_model *toy, llm_model *twin, int vocab, int n, double tol, const char *what)
{
    llm_session *a = synth_session(toy, N_CTX, 32, 1), *b = synth_session(twin, N_CTX, 32, 1);
    float *la = malloc((size_t)vocab * sizeof *la);
    int32_t toks[N_LONG + N_DECODE];
    REQUIRE(la && n + N_DECODE <= (int)(sizeof toks / sizeof toks[0]));
    for (int i = 0; i < n + N_DECODE; i++)
        toks[i] = (i * 37 + 11) % vocab;
    double worst = 0.0;
    for (int step = 0; step <= N_DECODE; step++) {
        const float *pa = NULL, *pb = NULL;
        if (step == 0) {
            CHECK_INT_EQ(llm_prefill(a, toks, (size_t)n, 0, &pa), 0);
            REQUIRE(pa);
            memcpy(la, pa, (size_t)vocab * sizeof *la);
            CHECK_INT_EQ(llm_prefill(b, toks, (size_t)n, 0, &pb), 0);
        } else {
            CHECK_INT_EQ(llm_decode(a, toks[n + step - 1], &pa), 0);
            REQUIRE(pa);
            memcpy(la, pa, (size_t)vocab * sizeof *la);
            CHECK_INT_EQ(llm_decode(b, toks[n + step - 1], &pb), 0);
        }
        REQUIRE(pb);
        double d = max_diff(la, pb, vocab);
        worst = d > worst ? d : worst;
        if (tol == 0.0)
            CHECK(memcmp(la, pb, (size_t)vocab * sizeof *la) == 0);
        else
            CHECK_NEAR(d, 0.0, tol);
    }
    printf("%s: prefill %d + %d decode steps, max |toy - f32 twin| %.3g\n", what, n, N_DECODE,
           worst);
    free(la);
    llm_session_free(a);
    llm_session_free(b);
}

/* Writes the toy model and its F32 twin (same seed, the toy's weights). */
static void write_pair(char *toy_path, char *twin_path, size_t cap, synth_spec *spec)
{
    *spec = synth_default();
    spec->type = spec->embd_type = TOY_ID;
    spec->types = &k_toy_set;
    synth_path(toy_path, cap, "types_toy");
    REQUIRE(synth_write(toy_path, spec) == 0);
    synth_spec twin = synth_default();
    twin.through = &k_toy[0];
    synth_path(twin_path, cap, "types_twin");
    REQUIRE(synth_write(twin_path, &twin) == 0);
}

static void test_forward(int twin_simd, double tol)
{
    char toy_path[512], twin_path[512];
    synth_spec spec;
    write_pair(toy_path, twin_path, sizeof toy_path, &spec);
    llm_model *toy = open_on(toy_path, &k_toy_set, cpu_with(0, k_toy_kernels, 1));
    llm_model *twin = open_on(twin_path, NULL, cpu_with(twin_simd, NULL, 0));
    llm_model_info info;
    llm_model_get_info(toy, &info);
    CHECK_STR_EQ(info.weight_type, "toy_s8x16");
    /* The toy rows take 20 bytes per 16 weights where f32 takes 64. */
    llm_model_info tw;
    llm_model_get_info(twin, &tw);
    CHECK_U64_EQ(info.weight_bytes * 64, tw.weight_bytes * TOY_BLOCK);
    run(toy, twin, spec.hp.vocab, N_LONG, tol, "long prefill");
    run(toy, twin, spec.hp.vocab, N_SHORT, tol, "short prefill");
    llm_model_free(toy);
    llm_model_free(twin);
    unlink(toy_path);
    unlink(twin_path);
}

static void test_no_kernel(void)
{
    char toy_path[512], twin_path[512];
    synth_spec spec;
    write_pair(toy_path, twin_path, sizeof toy_path, &spec);
    llm_model_options o = LLM_MODEL_OPTIONS_INIT;
    o.n_threads = 1;
    char err[256] = "";
    llm_model *m = (llm_model *)1;
    /* A created backend and a given one without the toy's kernels. */
    llm_model_hooks types_only = {&k_toy_set, NULL};
    CHECK_INT_EQ(llm_model_open_hooked(toy_path, &o, &types_only, &m, err, sizeof err),
                 LLM_EUNSUP);
    CHECK(m == NULL);
    CHECK_STR_EQ(err, "model: tensor type toy_s8x16 has no cpu kernel");
    llm_model_hooks given = {&k_toy_set, cpu_with(0, NULL, 0)};
    CHECK_INT_EQ(llm_model_open_hooked(toy_path, &o, &given, &m, err, sizeof err), LLM_EUNSUP);
    CHECK_STR_EQ(err, "model: tensor type toy_s8x16 has no cpu kernel");
    /* The F32 twin opens on the same kind of backend. */
    llm_model_hooks twin_given = {NULL, cpu_with(0, NULL, 0)};
    CHECK_INT_EQ(llm_model_open_hooked(twin_path, &o, &twin_given, &m, err, sizeof err), 0);
    llm_model_free(m);
    unlink(toy_path);
    unlink(twin_path);
}

static void test_unknown(void)
{
    char toy_path[512], twin_path[512];
    synth_spec spec;
    write_pair(toy_path, twin_path, sizeof toy_path, &spec);
    char err[256] = "";
    llm_model *m = (llm_model *)1;
    CHECK_INT_EQ(llm_model_open(toy_path, NULL, &m, err, sizeof err), LLM_EFORMAT);
    CHECK(m == NULL);
    CHECK_STR_EQ(err, "gguf: tensor 'token_embd.weight' has unknown type 200");
    /* The hooked open frees a given backend when it fails. */
    llm_model_hooks h = {NULL, cpu_with(0, k_toy_kernels, 1)};
    CHECK_INT_EQ(llm_model_open_hooked(toy_path, NULL, &h, &m, err, sizeof err), LLM_EFORMAT);
    h.backend = cpu_with(0, NULL, 0);
    CHECK_INT_EQ(llm_model_open_hooked("/nonexistent-pm/x.gguf", NULL, &h, &m, err, sizeof err),
                 LLM_EIO);
    h.backend = cpu_with(0, NULL, 0);
    CHECK_INT_EQ(llm_model_open_hooked(NULL, NULL, &h, &m, err, sizeof err), LLM_EINVAL);
    unlink(toy_path);
    unlink(twin_path);
}

static void test_bad_kernels(void)
{
    llm_backend *be = (llm_backend *)1;
    char err[256] = "";
    llm_type_kernels dup = k_toy_kernels[0];
    dup.type = LLM_TYPE_F32;
    CHECK_INT_EQ(llm_cpu_backend_create_with(1, 0, &dup, 1, &be, err, sizeof err), LLM_EINVAL);
    CHECK(be == NULL);
    CHECK_STR_EQ(err, "cpu backend: type 0 already has kernels");
    llm_type_kernels half = k_toy_kernels[0];
    half.dequant = NULL;
    CHECK_INT_EQ(llm_cpu_backend_create_with(1, 0, &half, 1, &be, err, sizeof err), LLM_EINVAL);
    CHECK_STR_EQ(err, "cpu backend: kernels for type 200 lack a matvec or dequant");
    llm_type_kernels many[LLM_KERNEL_TYPES_MAX];
    for (int i = 0; i < LLM_KERNEL_TYPES_MAX; i++) {
        many[i] = k_toy_kernels[0];
        many[i].type = TOY_ID + (uint32_t)i;
    }
    CHECK_INT_EQ(llm_cpu_backend_create_with(1, 0, many, LLM_KERNEL_TYPES_MAX, &be, err, sizeof err),
                 LLM_EINVAL);
    /* With the toy entry the backend says it has the type; without, not. */
    be = cpu_with(0, k_toy_kernels, 1);
    CHECK_INT_EQ(be->ops->supports_type(be, TOY_ID), 1);
    CHECK_INT_EQ(be->ops->supports_type(be, LLM_TYPE_Q4_0), 1);
    be->ops->destroy(be);
    be = cpu_with(1, NULL, 0);
    CHECK_INT_EQ(be->ops->supports_type(be, TOY_ID), 0);
    CHECK_INT_EQ(be->ops->supports_type(be, 15), 0); /* q8_K: known, no kernels */
    be->ops->destroy(be);
}

int main(int argc, char **argv)
{
    const char *c = argc == 2 ? argv[1] : "";
    if (strcmp(c, "forward") == 0)
        test_forward(0, 0.0);
    else if (strcmp(c, "native") == 0)
        test_forward(1, 1e-4);
    else if (strcmp(c, "no_kernel") == 0)
        test_no_kernel();
    else if (strcmp(c, "unknown") == 0)
        test_unknown();
    else if (strcmp(c, "bad_kernels") == 0)
        test_bad_kernels();
    else {
        fprintf(stderr, "usage: test_engine_types forward|native|no_kernel|unknown|bad_kernels\n");
        return 2;
    }
    return pm_check_result();
}
