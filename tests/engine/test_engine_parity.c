/* test_engine_parity — engine logits against the independent double
 * reference (ref.c) on a synthetic model, for a long prefill (the matrix-product
 * path), a short prefill (the matrix-vector path) and every decode step.
 *
 * Usage: test_engine_parity TYPE [VARIANT]
 *   TYPE     f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k (matrices
 *            and embedding), or q4_k_m: Q4_K with attn_v, ffn_down and
 *            output in Q6_K (k-quant models are 256 wide, ffn 512: rows of
 *            whole super-blocks), or q4_k_q5_0 / q5_k_q5_1: Q4_K (Q5_K)
 *            with attn_v, ffn_down and output in Q5_0 (Q5_1) and ffn 288,
 *            so ffn_down's rows are not whole super-blocks: the layout
 *            llama.cpp's Q4_K_M / Q5_K_M fall back to for such rows
 *   VARIANT  plain (default) | tied (output = embedding) | rope (base
 *            500000, linear scaling x4) | rope_freqs (a rope_freqs.weight
 *            tensor, Llama 3.1) | mha (n_kv_heads = n_heads) |
 *            qwen2 (q/k/v biases, half-split RoPE, base 1e6) | qwen2_tied |
 *            qwen3 (per-head q/k RMSNorm) | qwen3_hd (head_dim 48 with
 *            dim 64 and 4 heads: q is wider than the residual) |
 *            llama_bias (a llama file with q/k/v biases) |
 *            scalar (the portable kernels instead of AVX2) | gemm_own /
 *            gemm_blas (the batched product forced to the built-in kernel
 *            or to OpenBLAS)
 *
 * Tolerances (max |logit - reference| over the vocabulary; logits here
 * have a spread of a few units): f32/f16/bf16 weights are exact in the
 * reference, so only f32 rounding remains: 2e-4. Q8_0/Q4_0 weights are
 * exact too, but the engine's matrix-vector path quantizes activations to
 * 8 bits per block of 32 (as ggml does), a relative rounding of up to
 * 1/254 per element: measured maxima 0.03-0.06 here, tolerance 0.1 (a
 * layout or scale mistake shows up as errors of order one). Every step
 * uses that path for quantized models, since even a long prefill computes
 * the last row's logits as a matrix-vector product. Measured maxima are
 * printed.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "gguf.h"
#include "model.h"
#include "phasemark/engine.h"
#include "pm_check.h"
#include "quant.h"
#include "ref.h"
#include "synth.h"

#define N_LONG 13   /* >= the matrix-product threshold for every type */
#define N_SHORT 5   /* below it */
#define N_DECODE 6

static int quantized(uint32_t t)
{
    return !llm_type_find(NULL, t)->is_float;
}

static void apply_variant(synth_spec *s, const char *v)
{
    if (strcmp(v, "gemm_own") == 0 || strcmp(v, "gemm_blas") == 0) {
        if (setenv("PHASEMARK_ENGINE_GEMM", v + 5, 1) != 0)
            exit(1);
    } else if (strcmp(v, "scalar") == 0)
        return; /* applied to the opened model */
    else if (strcmp(v, "tied") == 0)
        s->tied = 1;
    else if (strcmp(v, "rope") == 0) {
        s->hp.rope_base = 500000.0;
        s->hp.rope_factor = 4.0;
    } else if (strcmp(v, "rope_freqs") == 0) /* Llama 3.1's frequency factors */
        s->hp.rope_freqs = 1;
    else if (strcmp(v, "rope_freqs_bad") == 0)
        s->hp.rope_freqs = 2;
    else if (strcmp(v, "mha") == 0)
        s->hp.n_kv_heads = s->hp.n_heads;
    else if (strcmp(v, "qwen2") == 0 || strcmp(v, "qwen2_tied") == 0) {
        s->hp.arch = REF_QWEN2;
        s->hp.rope_base = 1000000.0;
        s->tied = v[5] != '\0';
    } else if (strcmp(v, "qwen3") == 0)
        s->hp.arch = REF_QWEN3;
    else if (strcmp(v, "qwen3_hd") == 0) { /* head_dim 48 != dim / n_heads */
        s->hp.arch = REF_QWEN3;
        s->hp.head_dim = 48;
    } else if (strcmp(v, "llama_bias") == 0) /* llama takes q/k/v biases too */
        s->quirks = SYNTH_BIAS;
    else if (strcmp(v, "plain") != 0) {
        fprintf(stderr, "unknown variant %s\n", v);
        exit(2);
    }
}

static int token_at(int i, int vocab)
{
    return (i * 37 + 11) % vocab;
}

/* Prefill n tokens, then decode N_DECODE; every logits row is compared. */
static void run(llm_model *m, ref_model *r, const synth_spec *s, int n,
                double tol, const char *what)
{
    int V = s->hp.vocab;
    llm_session *ses = synth_session(m, s->hp.ctx, 32, 1);
    double *ref = malloc((size_t)V * sizeof *ref);
    int32_t toks[64];
    REQUIRE(ref && n + N_DECODE <= 64);
    for (int i = 0; i < n + N_DECODE; i++)
        toks[i] = token_at(i, V);
    ref_reset(r);
    for (int i = 0; i < n; i++)
        ref_step(r, toks[i], ref);
    const float *lg = NULL;
    CHECK_INT_EQ(llm_prefill(ses, toks, (size_t)n, 0, &lg), 0);
    REQUIRE(lg);
    double e = ref_max_abs_diff(ref, lg, V), worst = e;
    CHECK_NEAR(e, 0.0, tol);
    for (int i = n; i < n + N_DECODE; i++) {
        ref_step(r, toks[i], ref);
        CHECK_INT_EQ(llm_decode(ses, toks[i], &lg), 0);
        e = ref_max_abs_diff(ref, lg, V);
        CHECK_NEAR(e, 0.0, tol);
        worst = e > worst ? e : worst;
    }
    printf("%s: prefill %d + %d decode steps, max |err| %.3g\n", what, n, N_DECODE, worst);
    free(ref);
    llm_session_free(ses);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s TYPE [VARIANT]\n", argv[0]);
        return 2;
    }
    synth_spec s = synth_default();
    if (strcmp(argv[1], "q4_k_m") == 0) {
        s.type = s.embd_type = LLM_TYPE_Q4_K;
        s.type_hi = LLM_TYPE_Q6_K;
    } else if (strcmp(argv[1], "q4_k_q5_0") == 0 || strcmp(argv[1], "q5_k_q5_1") == 0) {
        s.type = s.embd_type = argv[1][1] == '4' ? LLM_TYPE_Q4_K : LLM_TYPE_Q5_K;
        s.type_hi = argv[1][1] == '4' ? LLM_TYPE_Q5_0 : LLM_TYPE_Q5_1;
    } else {
        s.type = s.embd_type = synth_type(argv[1]);
    }
    if (llm_type_find(NULL, s.type)->block_elems == LLM_QK_K) {
        s.hp.dim = 256;
        s.hp.ffn = s.type_hi && s.type_hi != LLM_TYPE_Q6_K ? 288 : 512;
    }
    /* VARIANT_scalar: the variant on the portable kernels. */
    char variant[64];
    snprintf(variant, sizeof variant, "%s", argc == 3 ? argv[2] : "plain");
    size_t vl = strlen(variant);
    int scalar = strcmp(variant, "scalar") == 0;
    if (vl > 7 && strcmp(variant + vl - 7, "_scalar") == 0) {
        variant[vl - 7] = '\0';
        scalar = 1;
    }
    apply_variant(&s, variant);
    char path[512];
    synth_path(path, sizeof path, argv[1]);
    REQUIRE(synth_write(path, &s) == 0);

    llm_gguf *g;
    char err[256];
    if (argc == 3 && strcmp(argv[2], "rope_freqs_bad") == 0) {
        /* A frequency factor of 0 fails the open with one line. */
        llm_model_options o = LLM_MODEL_OPTIONS_INIT;
        llm_model *m = NULL;
        CHECK_INT_EQ(llm_model_open(path, &o, &m, err, sizeof err), LLM_EFORMAT);
        CHECK_STR_EQ(err, "model: rope_freqs.weight[1] = 0 is not a positive factor");
        unlink(path);
        return pm_check_result();
    }
    REQUIRE(llm_gguf_open(path, &g, err, sizeof err) == 0);
    ref_model *r = ref_load(&s.hp, synth_find_gguf, g);
    REQUIRE(r);
    llm_model *m = synth_open(path, 2);
    if (scalar) {
        /* Swap in a CPU backend restricted to the scalar kernels (an
         * internal hook: engine.h offers no such switch). */
        llm_backend *be;
        REQUIRE(llm_cpu_backend_create(2, 0, &be, err, sizeof err) == 0);
        CHECK_STR_EQ(llm_cpu_backend_kernels(be), "scalar");
        m->be->ops->destroy(m->be);
        m->be = be;
    }

    double tol = quantized(s.type) ? 0.1 : 2e-4;
    run(m, r, &s, N_LONG, tol, "long prefill");
    run(m, r, &s, N_SHORT, tol, "short prefill");

    llm_model_free(m);
    ref_free(r);
    llm_gguf_close(g);
    unlink(path);
    return pm_check_result();
}
