/* test_engine_arch — the llama-family architectures beyond llama, case by
 * case: what loads and what is refused, with the exact line.
 *
 * Usage: test_engine_arch CASE
 *   greedy_qwen2, greedy_qwen3  twelve greedy ids of a tiny model (f32),
 *       each the argmax of the independent double reference's logits
 *       (ref.c) for the same prefix: the engine's ids must be exactly the
 *       reference's, and the first step's logits within 2e-4
 *   unknown_arch   general.architecture "gpt2": refused by name
 *   short_bias     a qwen2 file whose attn_k.bias has 31 of 32 elements
 *   missing_bias   a qwen2 file without blk.0.attn_v.bias
 *   missing_norm   a qwen3 file without blk.1.attn_k_norm.weight
 *   qwen3_bias     a qwen3 file with q/k/v biases (no place for them)
 *   window         a llama file with llama.attention.sliding_window 5 over
 *                  24 positions: the reference's logits with the window
 *                  are first checked to differ from its full-attention
 *                  logits past the window (and to equal them before it);
 *                  then the engine's, within 2e-4, for a whole prefill, a
 *                  prefill in chunks of 7, token-by-token decode and an
 *                  8-row verify; then greedy ids as greedy_qwen2's
 *   window_zero, window_neg, window_f32
 *                  a sliding_window of 0 (u32), -4 (i32) or 5.0 (f32):
 *                  refused, one line
 *   value_length   a qwen3 file whose value_length is not its key_length
 *   info           a qwen3 model with head_dim 48 over dim 64: the counts
 *                  the model reports include its norms
 *   tool_qwen2 PM-MODELWRITER, tool_qwen3 PM-MODELWRITER,
 *   tool_window PM-MODELWRITER
 *                  a file written by `pm-modelwriter synth --arch ...`
 *                  (qwen3 with --head-dim 24; tool_window: llama with
 *                  --sliding-window 3) opens, and its logits over a
 *                  prefill and decode steps match the reference's within
 *                  2e-4 (f32)
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "model.h"
#include "phasemark/engine.h"
#include "pm_check.h"
#include "pm_child.h"
#include "ref.h"
#include "synth.h"

#define N_GREEDY 12

static int argmax_d(const double *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static int argmax_f(const float *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

/* Prompt {3, 17, 29}, then greedy: each engine id against the reference's
 * argmax after the same tokens. */
static void greedy(synth_spec *s)
{
    char path[512], err[256];
    synth_path(path, sizeof path, "arch_greedy");
    REQUIRE(synth_write(path, s) == 0);
    llm_gguf *g;
    REQUIRE(llm_gguf_open(path, &g, err, sizeof err) == 0);
    ref_model *r = ref_load(&s->hp, synth_find_gguf, g);
    REQUIRE(r);
    llm_model *m = synth_open(path, 2);
    llm_session *ses = synth_session(m, s->hp.ctx, 8, 1);
    int V = s->hp.vocab;
    double *ref = malloc((size_t)V * sizeof *ref);
    REQUIRE(ref);
    int32_t prompt[3] = {3, 17, 29};
    for (int i = 0; i < 3; i++)
        ref_step(r, prompt[i], ref);
    const float *lg = NULL;
    CHECK_INT_EQ(llm_prefill(ses, prompt, 3, 0, &lg), 0);
    REQUIRE(lg);
    CHECK_NEAR(ref_max_abs_diff(ref, lg, V), 0.0, 2e-4);
    int32_t ids[N_GREEDY], want[N_GREEDY];
    for (int i = 0; i < N_GREEDY; i++) {
        want[i] = argmax_d(ref, V);
        ids[i] = argmax_f(lg, V);
        CHECK_INT_EQ(ids[i], want[i]);
        ref_step(r, want[i], ref);
        CHECK_INT_EQ(llm_decode(ses, ids[i], &lg), 0);
        REQUIRE(lg);
    }
    printf("greedy:");
    for (int i = 0; i < N_GREEDY; i++)
        printf(" %d", (int)ids[i]);
    printf("\n");
    free(ref);
    llm_session_free(ses);
    llm_model_free(m);
    ref_free(r);
    llm_gguf_close(g);
    unlink(path);
}

/* Writes s and expects the open to fail with status rc and exactly line. */
static void refused(const synth_spec *s, int rc, const char *line)
{
    char path[512], err[512];
    synth_path(path, sizeof path, "arch_refused");
    REQUIRE(synth_write(path, s) == 0);
    llm_model_options o = LLM_MODEL_OPTIONS_INIT;
    llm_model *m = (llm_model *)1;
    CHECK_INT_EQ(llm_model_open(path, &o, &m, err, sizeof err), rc);
    CHECK(m == NULL);
    CHECK_STR_EQ(err, line);
    unlink(path);
}

#define WIN 5
#define WIN_N 24

/* The engine's logits (n rows of V) against the reference's rows. */
static void rows_near(const double *ref, const float *lg, int n, int V, const char *what)
{
    for (int i = 0; i < n; i++) {
        double d = ref_max_abs_diff(ref + (size_t)i * V, lg + (size_t)i * V, V);
        if (d > 2e-4)
            fprintf(stderr, "%s: row %d: max |diff| %.3g\n", what, i, d);
        CHECK_NEAR(d, 0.0, 2e-4);
    }
}

static void window_parity(void)
{
    synth_spec s = synth_default();
    s.hp.window = WIN;
    char path[512], err[256];
    synth_path(path, sizeof path, "arch_window");
    REQUIRE(synth_write(path, &s) == 0);
    llm_gguf *g;
    REQUIRE(llm_gguf_open(path, &g, err, sizeof err) == 0);
    ref_hparams full = s.hp;
    full.window = 0;
    ref_model *r = ref_load(&s.hp, synth_find_gguf, g), *rf = ref_load(&full, synth_find_gguf, g);
    REQUIRE(r && rf);
    int V = s.hp.vocab;
    double *ref = malloc((size_t)WIN_N * V * sizeof *ref), *reff = malloc((size_t)V * sizeof *reff);
    REQUIRE(ref && reff);
    int32_t toks[WIN_N];
    for (int i = 0; i < WIN_N; i++)
        toks[i] = (7 + 13 * i) % V;
    /* The window must matter: up to position WIN-1 every key is inside it
     * (the same sums in the same order), after that the masked keys move
     * the logits by far more than the tolerance below. */
    for (int i = 0; i < WIN_N; i++) {
        ref_step(r, toks[i], ref + (size_t)i * V);
        ref_step(rf, toks[i], reff);
        double d = 0;
        for (int j = 0; j < V; j++)
            d = fmax(d, fabs(ref[(size_t)i * V + j] - reff[j]));
        if (i < WIN)
            CHECK(d == 0.0);
        else
            CHECK(d > 1e-2);
    }
    llm_model *m = synth_open(path, 2);
    CHECK_INT_EQ(m->hp.window, WIN);
    llm_session *ses = synth_session(m, s.hp.ctx, 32, 1);
    const float *lg = NULL;
    CHECK_INT_EQ(llm_prefill(ses, toks, WIN_N, 0, &lg), 0);
    REQUIRE(lg);
    rows_near(ref + (size_t)(WIN_N - 1) * V, lg, 1, V, "whole prefill");
    llm_session_reset(ses);
    CHECK_INT_EQ(llm_prefill(ses, toks, WIN_N, 7, &lg), 0);
    REQUIRE(lg);
    rows_near(ref + (size_t)(WIN_N - 1) * V, lg, 1, V, "chunked prefill");
    llm_session_reset(ses);
    CHECK_INT_EQ(llm_prefill(ses, toks, 1, 0, &lg), 0);
    REQUIRE(lg);
    rows_near(ref, lg, 1, V, "decode");
    for (int i = 1; i < WIN_N; i++) {
        CHECK_INT_EQ(llm_decode(ses, toks[i], &lg), 0);
        REQUIRE(lg);
        rows_near(ref + (size_t)i * V, lg, 1, V, "decode");
    }
    llm_session_reset(ses);
    CHECK_INT_EQ(llm_prefill(ses, toks, 10, 0, &lg), 0);
    CHECK_INT_EQ(llm_verify(ses, toks + 10, 8, &lg), 0);
    REQUIRE(lg);
    rows_near(ref + (size_t)10 * V, lg, 8, V, "verify");
    free(ref);
    free(reff);
    llm_session_free(ses);
    llm_model_free(m);
    ref_free(r);
    ref_free(rf);
    llm_gguf_close(g);
    unlink(path);
    greedy(&s);
}

static void info(void)
{
    synth_spec s = synth_default();
    s.hp.arch = REF_QWEN3;
    s.hp.head_dim = 48;
    char path[512];
    synth_path(path, sizeof path, "arch_info");
    REQUIRE(synth_write(path, &s) == 0);
    llm_model *m = synth_open(path, 1);
    llm_model_info in;
    llm_model_get_info(m, &in);
    CHECK_INT_EQ(m->hp.head_dim, 48);
    CHECK_INT_EQ(m->hp.rope_neox, 1);
    CHECK_INT_EQ(m->hp.arch, LLM_ARCH_QWEN3);
    /* Per layer: norms 2*64, q 64*192, k and v 64*96 each, o 192*64,
     * gate/up/down 3*64*96, q/k norms 2*48; then the embedding and the
     * head 2*160*64 and the final norm 64. */
    uint64_t layer = 128 + 64 * 192 + 2 * 64 * 96 + 192 * 64 + 3 * 64 * 96 + 96;
    CHECK_INT_EQ((long long)in.n_params, (long long)(2 * layer + 2 * 160 * 64 + 64));
    llm_model_free(m);
    unlink(path);
}

/* Runs the model writer for a 2-layer f32 model of arch, then holds the
 * engine's logits to the reference's. */
static void tool_case(const char *tool, int arch, int window)
{
    char path[512], err[256];
    synth_path(path, sizeof path, "arch_tool");
    const char *argv[] = {tool, "synth", "-o", path, "--dim", "64", "--layers", "2", "--heads", "4",
                          "--kv-heads", "2", "--ffn", "96", "--vocab", "300", "--ctx", "32",
                          "--type", "f32", "--seed", "5", "--rope-base", "1000000", "--arch",
                          arch == REF_QWEN2 ? "qwen2" : arch == REF_QWEN3 ? "qwen3" : "llama",
                          "--head-dim", arch == REF_QWEN3 ? "24" : "16",
                          window ? "--sliding-window" : NULL, "3", NULL};
    pm_child_result res;
    REQUIRE(pm_child_exec((char *const *)argv, NULL, 60000, &res) == 0);
    if (!res.exited || res.exit_code != 0)
        fprintf(stderr, "pm-modelwriter: %s\n", res.err);
    REQUIRE(res.exited && res.exit_code == 0);
    ref_hparams hp = {64, 2, 4, 2, 96, 300, 32, 1e-5, 1000000.0, 1.0, 0, arch,
                      arch == REF_QWEN3 ? 24 : 16, window ? 3 : 0};
    llm_gguf *g;
    REQUIRE(llm_gguf_open(path, &g, err, sizeof err) == 0);
    ref_model *r = ref_load(&hp, synth_find_gguf, g);
    REQUIRE(r);
    llm_model *m = synth_open(path, 2);
    CHECK_INT_EQ(m->hp.arch, arch == REF_QWEN2   ? LLM_ARCH_QWEN2
                             : arch == REF_QWEN3 ? LLM_ARCH_QWEN3
                                                 : LLM_ARCH_LLAMA);
    CHECK_INT_EQ(m->hp.head_dim, hp.head_dim);
    CHECK_INT_EQ(m->hp.window, hp.window);
    llm_session *ses = synth_session(m, 32, 8, 1);
    double *ref = malloc(300 * sizeof *ref);
    REQUIRE(ref);
    int32_t toks[8] = {1, 40, 77, 123, 260, 5, 299, 64}; /* past a window of 3 */
    for (int i = 0; i < 5; i++)
        ref_step(r, toks[i], ref);
    const float *lg = NULL;
    CHECK_INT_EQ(llm_prefill(ses, toks, 5, 0, &lg), 0);
    REQUIRE(lg);
    CHECK_NEAR(ref_max_abs_diff(ref, lg, 300), 0.0, 2e-4);
    for (int i = 5; i < 8; i++) {
        ref_step(r, toks[i], ref);
        CHECK_INT_EQ(llm_decode(ses, toks[i], &lg), 0);
        CHECK_NEAR(ref_max_abs_diff(ref, lg, 300), 0.0, 2e-4);
    }
    free(ref);
    llm_session_free(ses);
    llm_model_free(m);
    ref_free(r);
    llm_gguf_close(g);
    unlink(path);
}

int main(int argc, char **argv)
{
    if (argc == 3 && (strcmp(argv[1], "tool_qwen2") == 0 || strcmp(argv[1], "tool_qwen3") == 0)) {
        tool_case(argv[2], argv[1][9] == '2' ? REF_QWEN2 : REF_QWEN3, 0);
        return pm_check_result();
    }
    if (argc == 3 && strcmp(argv[1], "tool_window") == 0) {
        tool_case(argv[2], REF_LLAMA, 1);
        return pm_check_result();
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s CASE\n", argv[0]);
        return 2;
    }
    const char *c = argv[1];
    synth_spec s = synth_default();
    if (strcmp(c, "greedy_qwen2") == 0) {
        s.hp.arch = REF_QWEN2;
        s.hp.rope_base = 1000000.0;
        greedy(&s);
    } else if (strcmp(c, "greedy_qwen3") == 0) {
        s.hp.arch = REF_QWEN3;
        s.hp.head_dim = 48;
        greedy(&s);
    } else if (strcmp(c, "unknown_arch") == 0) {
        s.arch = "gpt2";
        refused(&s, LLM_EUNSUP, "model: architecture 'gpt2' is not supported (llama, qwen2, qwen3)");
    } else if (strcmp(c, "short_bias") == 0) {
        s.hp.arch = REF_QWEN2;
        s.quirks = SYNTH_SHORT_BIAS;
        refused(&s, LLM_EFORMAT, "model: tensor 'blk.0.attn_k.bias' must be a vector of 32");
    } else if (strcmp(c, "missing_bias") == 0) {
        s.hp.arch = REF_QWEN2;
        s.omit = "blk.0.attn_v.bias";
        refused(&s, LLM_EFORMAT, "model: tensor 'blk.0.attn_v.bias' is missing");
    } else if (strcmp(c, "missing_norm") == 0) {
        s.hp.arch = REF_QWEN3;
        s.omit = "blk.1.attn_k_norm.weight";
        refused(&s, LLM_EFORMAT, "model: tensor 'blk.1.attn_k_norm.weight' is missing");
    } else if (strcmp(c, "qwen3_bias") == 0) {
        s.hp.arch = REF_QWEN3;
        s.quirks = SYNTH_BIAS;
        refused(&s, LLM_EUNSUP, "model: tensor 'blk.0.attn_q.bias' is not part of a qwen3 model");
    } else if (strcmp(c, "window") == 0) {
        window_parity();
    } else if (strcmp(c, "window_zero") == 0) {
        s.quirks = SYNTH_WINDOW_ZERO;
        refused(&s, LLM_EFORMAT, "model: metadata llama.attention.sliding_window: a window of 0 keys");
    } else if (strcmp(c, "window_neg") == 0) {
        s.quirks = SYNTH_WINDOW_NEG;
        refused(&s, LLM_EFORMAT, "model: metadata llama.attention.sliding_window: value out of range");
    } else if (strcmp(c, "window_f32") == 0) {
        s.quirks = SYNTH_WINDOW_F32;
        refused(&s, LLM_EFORMAT,
                "model: metadata llama.attention.sliding_window: value has another type");
    } else if (strcmp(c, "value_length") == 0) {
        s.hp.arch = REF_QWEN3;
        s.hp.head_dim = 16;
        s.quirks = SYNTH_VALUE_LENGTH;
        refused(&s, LLM_EUNSUP,
                "model: qwen3.attention.value_length 15 differs from key_length 16 (not supported)");
    } else if (strcmp(c, "info") == 0) {
        info();
    } else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    return pm_check_result();
}
