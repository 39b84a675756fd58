/* test_cuda_features — target features on CUDA against the CPU, through
 * the session API (skipped, 77, without a device).
 *
 *   prefill  a prompt's features of every layer on cuda:0 are the CPU's
 *            within the f32 engine tolerance, on the fused prefill and
 *            op by op
 *   decode   decode steps asking for features never capture or replay a
 *            CUDA graph (they run the fused launches directly: `direct`
 *            grows, `captures` and `replays` do not), their features and
 *            logits are the CPU's within tolerance, and steps asking for
 *            none still capture and replay with the same logits
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cuda_test.h"
#include "model.h"
#include "phasemark/engine.h"
#include "synth.h"

#define N_LAYERS 4
#define N_TOK 24
/* f32 synthetic weights: the engine parity bound the CUDA tests use for
 * f32 (tests/cuda/test_engine.c), on activations of order one. */
#define TOL 2e-3

static char g_path[512];

static llm_model *open_on(const char *backend)
{
    llm_model_options o = LLM_MODEL_OPTIONS_INIT;
    o.backend = backend;
    o.n_threads = 2;
    llm_model *m = NULL;
    char err[256];
    if (llm_model_open(g_path, &o, &m, err, sizeof err) != 0) {
        fprintf(stderr, "open on %s: %s\n", backend, err);
        exit(1);
    }
    return m;
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d)) /* NaN counts as infinitely far */
            d = isnan(e) ? INFINITY : e;
    }
    return d;
}

static int forward(llm_session *s, pm_phase ph, const int32_t *t, size_t n,
                   const int32_t *layers, int32_t nl, float *feat, size_t cap, const float **lg)
{
    llm_forward_params p = LLM_FORWARD_PARAMS_INIT;
    p.phase = ph;
    p.output = lg ? LLM_OUTPUT_LOGITS : LLM_OUTPUT_NONE;
    p.n_features_layers = nl;
    p.features_layers = layers;
    p.features = feat;
    p.features_cap = cap;
    return llm_forward(s, &p, t, n, lg, NULL);
}

static void write_model(const char *tag)
{
    synth_spec sp = synth_default();
    sp.hp.n_layers = N_LAYERS;
    synth_path(g_path, sizeof g_path, tag);
    REQUIRE(synth_write(g_path, &sp) == 0);
}

static const int32_t layers[N_LAYERS] = {0, 1, 2, 3};

static void prefill(void)
{
    ct_require_device();
    write_model("cuda_feat_prefill");
    llm_model *cpu = open_on("cpu"), *gpu = open_on("cuda");
    int32_t toks[N_TOK];
    for (int i = 0; i < N_TOK; i++)
        toks[i] = (i * 37 + 5) % cpu->hp.n_vocab;
    size_t cap = (size_t)N_LAYERS * N_TOK * (size_t)cpu->hp.dim;
    float *a = calloc(cap, sizeof(float)), *b = calloc(cap, sizeof(float));
    REQUIRE(a && b);
    llm_session *sc = synth_session(cpu, 64, N_TOK, 1), *sg = synth_session(gpu, 64, N_TOK, 1);
    REQUIRE(forward(sc, PM_PHASE_EXACT, toks, N_TOK, layers, N_LAYERS, a, cap, NULL) == 0);
    for (int pass = 0; pass < 2; pass++) { /* fused prefill, then op by op */
        if (pass == 1)
            REQUIRE(llm_cuda_backend_set_prefill(gpu->be, LLM_CUDA_PREFILL_OPS) == 0);
        for (size_t i = 0; i < cap; i++)
            b[i] = NAN;
        llm_session_reset(sg);
        REQUIRE(forward(sg, PM_PHASE_EXACT, toks, N_TOK, layers, N_LAYERS, b, cap, NULL) == 0);
        double d = max_abs_diff(a, b, cap);
        printf("prefill pass %d: max |cuda - cpu| %.3g\n", pass, d);
        CHECK(d < TOL);
    }
    llm_session_free(sc);
    llm_session_free(sg);
    free(a);
    free(b);
    llm_model_free(cpu);
    llm_model_free(gpu);
    unlink(g_path);
}

static void decode(void)
{
    ct_require_device();
    write_model("cuda_feat_decode");
    llm_model *cpu = open_on("cpu"), *gpu = open_on("cuda");
    REQUIRE(llm_cuda_backend_set_decode(gpu->be, LLM_CUDA_DECODE_GRAPH) == 0);
    int32_t V = cpu->hp.n_vocab, D = cpu->hp.dim;
    static const int32_t prompt[4] = {3, 1, 4, 1};
    static const int32_t two[2] = {1, 3};
    float fa[2 * 64], fb[2 * 64];
    REQUIRE(D <= 64);
    llm_session *sc = synth_session(cpu, 64, 8, 1), *sg = synth_session(gpu, 64, 8, 1);
    REQUIRE(llm_prefill(sc, prompt, 4, 0, NULL) == 0);
    REQUIRE(llm_prefill(sg, prompt, 4, 0, NULL) == 0);
    llm_cuda_decode_stats st0, st1;
    REQUIRE(llm_cuda_backend_decode_stats(gpu->be, &st0) == 0);
    int32_t tok = 9;
    for (int step = 0; step < 6; step++) {
        const float *la = NULL, *lb = NULL;
        int feat = step % 2 == 0; /* alternate: a graph must never stand in */
        float *ca = malloc((size_t)V * sizeof(float));
        REQUIRE(ca != NULL);
        REQUIRE(forward(sc, PM_PHASE_DECODE, &tok, 1, two, feat ? 2 : 0, fa, 2 * (size_t)D,
                        &la) == 0);
        memcpy(ca, la, (size_t)V * sizeof(float));
        for (int i = 0; i < 2 * D; i++)
            fb[i] = NAN;
        REQUIRE(forward(sg, PM_PHASE_DECODE, &tok, 1, two, feat ? 2 : 0, fb, 2 * (size_t)D,
                        &lb) == 0);
        double dl = max_abs_diff(ca, lb, (size_t)V);
        CHECK(dl < TOL);
        if (feat) {
            double df = max_abs_diff(fa, fb, 2 * (size_t)D);
            printf("step %d: features %.3g, logits %.3g\n", step, df, dl);
            CHECK(df < TOL);
        }
        free(ca);
        tok = (tok * 7 + 3) % V;
    }
    REQUIRE(llm_cuda_backend_decode_stats(gpu->be, &st1) == 0);
    /* Three steps with features ran directly; the three without launched
     * a graph each (a capture launches once too), the first capturing it
     * unless a warm-up's graph of the same buffers was still cached. */
    CHECK_U64_EQ(st1.direct - st0.direct, 3);
    CHECK(st1.captures - st0.captures <= 1);
    CHECK_U64_EQ(st1.replays - st0.replays, 3);
    llm_session_free(sc);
    llm_session_free(sg);
    llm_model_free(cpu);
    llm_model_free(gpu);
    unlink(g_path);
}

static const ct_case cases[] = {{"prefill", prefill}, {"decode", decode}};
CT_MAIN(cases)
