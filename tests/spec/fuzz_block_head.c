/* fuzz_block_head.c — libFuzzer target: arbitrary bytes as a block
 * drafter head (phasemark-block GGUF) for a fixed tiny target. Every input
 * must either open, or fail with one non-empty error line and no head; a
 * head that opens must take three context positions of features and a
 * forward of its whole block without a crash or sanitizer report (its
 * logits may be anything). The target (width 8, 2 layers, 2 heads over 1,
 * vocabulary 260) is written once, at the first input, through the GGUF
 * writer. Seeds in tests/fuzz/corpus/block_head/ are small valid heads for
 * it (pm-modelwriter synth --arch phasemark-block over such a target).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block_head.h"
#include "gguf.h"
#include "model.h"
#include "phasemark/engine.h"
#include "quant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define T_DIM 8
#define T_VOCAB 260

static int row_fn(void *ctx, uint64_t row, float *dst, uint64_t n)
{
    float base = *(const float *)ctx;
    for (uint64_t i = 0; i < n; i++)
        dst[i] = base + 0.01f * (float)((row * 7 + i * 3) % 11) - 0.05f;
    return 0;
}

/* The tiny target, or NULL when it cannot be made (then inputs are
 * skipped). */
static llm_model *target(void)
{
    static llm_model *m;
    static int tried;
    if (tried)
        return m;
    tried = 1;
    char path[256];
    snprintf(path, sizeof path, "/tmp/pm_fuzz_block_target_%ld.gguf", (long)getpid());
    llm_gguf_writer *w;
    if (llm_gguf_writer_new(&w) != 0)
        return NULL;
    static const float zero = 0.0f, one = 1.0f;
    int rc = llm_gguf_writer_set_str(w, "general.architecture", "llama", 5);
    rc |= llm_gguf_writer_set_u32(w, "llama.embedding_length", T_DIM);
    rc |= llm_gguf_writer_set_u32(w, "llama.block_count", 2);
    rc |= llm_gguf_writer_set_u32(w, "llama.attention.head_count", 2);
    rc |= llm_gguf_writer_set_u32(w, "llama.attention.head_count_kv", 1);
    rc |= llm_gguf_writer_set_u32(w, "llama.feed_forward_length", 16);
    rc |= llm_gguf_writer_set_u32(w, "llama.context_length", 32);
    rc |= llm_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    uint64_t embd[2] = {T_DIM, T_VOCAB}, vec[1] = {T_DIM};
    rc |= llm_gguf_writer_add_tensor_gen(w, "token_embd.weight", LLM_TYPE_F32, 2, embd, row_fn,
                                         (void *)&zero);
    for (int l = 0; l < 2; l++) {
        static const char *const sfx[9] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                           "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
        static const uint64_t shapes[9][2] = {{T_DIM, 1}, {T_DIM, T_DIM}, {T_DIM, 4}, {T_DIM, 4},
                                              {T_DIM, T_DIM}, {T_DIM, 1}, {T_DIM, 16},
                                              {T_DIM, 16}, {16, T_DIM}};
        for (int i = 0; i < 9; i++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, sfx[i]);
            int norm = shapes[i][1] == 1;
            rc |= llm_gguf_writer_add_tensor_gen(w, name, LLM_TYPE_F32, norm ? 1 : 2, shapes[i],
                                                 row_fn, (void *)(norm ? &one : &zero));
        }
    }
    rc |= llm_gguf_writer_add_tensor_gen(w, "output_norm.weight", LLM_TYPE_F32, 1, vec, row_fn,
                                         (void *)&one);
    rc |= llm_gguf_writer_add_tensor_gen(w, "output.weight", LLM_TYPE_F32, 2, embd, row_fn,
                                         (void *)&zero);
    char err[256];
    if (rc == 0)
        rc = llm_gguf_writer_write(w, path, err, sizeof err);
    llm_gguf_writer_free(w);
    if (rc == 0) {
        llm_model_options o = LLM_MODEL_OPTIONS_INIT;
        o.n_threads = 1;
        if (llm_model_open(path, &o, &m, err, sizeof err) != 0)
            m = NULL;
    }
    unlink(path);
    return m;
}

static void run_head(pm_block *b)
{
    const pm_block_info *in = pm__block_info(b);
    static float feat[PM_BLOCK_MAX_FEAT * 3 * T_DIM];
    static const int32_t plane_of[PM_BLOCK_MAX_FEAT] = {0, 1, 0, 1, 0, 1, 0, 1};
    for (size_t i = 0; i < sizeof feat / sizeof feat[0]; i++)
        feat[i] = (float)((int)(i % 9) - 4) * 0.25f;
    if (pm__block_append(b, feat, plane_of, 3, 3) != 0)
        return;
    const float *lg;
    (void)pm__block_forward(b, T_VOCAB - 1, in->block_size, &lg);
    pm__block_crop(b, 1);
    (void)pm__block_forward(b, 0, 1, &lg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    llm_model *m = target();
    if (!m)
        return 0;
    /* The head points into the bytes: give them an owned, aligned home. */
    size_t cap = (size + 63) & ~(size_t)63;
    void *buf = aligned_alloc(64, cap ? cap : 64);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    pm_block *b = NULL;
    char err[256] = "";
    if (pm__block_open_memory(buf, size, m, 16, 1, &b, err, sizeof err) == 0) {
        run_head(b);
        pm__block_free(b);
    } else if (!err[0] || strchr(err, '\n') || b) {
        __builtin_trap(); /* a failure must leave *out NULL and say why in one line */
    }
    free(buf);
    return 0;
}
