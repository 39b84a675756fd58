/* test_engine_llama2c — a real trained checkpoint (stories260K.bin, from
 * ../shared/models; exit 77 when absent) through the engine:
 *   - it opens as a llama2.c checkpoint, with a placeholder tokenizer.bin
 *     written here (the model's own tokenizer is not available);
 *   - converted here to GGUF (same f32 tensors, llama metadata), it gives
 *     bit-identical logits for a prefill and greedy decode steps;
 *   - its logits match the double reference within 1e-3 (measured ~1e-5;
 *     trained logits reach about 10 in magnitude).
 * Usage: test_engine_llama2c PATH-TO-stories260K.bin
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "llama2c.h"
#include "phasemark/engine.h"
#include "pm_check.h"
#include "ref.h"
#include "synth.h"

#define N_PROMPT 12
#define N_STEPS 8

static const llm_gguf_tensor *find_l2c(const void *h, const char *name)
{
    return llm_llama2c_find_tensor(h, name);
}

/* tokenizer.bin: max_token_length, then (score, len, bytes) per token. */
static void write_tokenizer(const char *path, int vocab)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    int32_t maxlen = 16;
    REQUIRE(fwrite(&maxlen, 4, 1, f) == 1);
    for (int i = 0; i < vocab; i++) {
        char piece[32];
        if (i == 0)
            snprintf(piece, sizeof piece, "<unk>");
        else if (i == 1)
            snprintf(piece, sizeof piece, "<s>");
        else if (i == 2)
            snprintf(piece, sizeof piece, "</s>");
        else if (i < 259)
            snprintf(piece, sizeof piece, "<0x%02X>", i - 3);
        else
            snprintf(piece, sizeof piece, "t%d", i);
        float score = (float)-i;
        int32_t len = (int32_t)strlen(piece);
        REQUIRE(fwrite(&score, 4, 1, f) == 1 && fwrite(&len, 4, 1, f) == 1);
        REQUIRE(fwrite(piece, 1, (size_t)len, f) == (size_t)len);
    }
    REQUIRE(fclose(f) == 0);
}

static void to_gguf(const llm_llama2c *c, const char *path)
{
    const llm_llama2c_config *cfg = llm_llama2c_get_config(c);
    llm_gguf_writer *w;
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    int rc = llm_gguf_writer_set_str(w, "general.architecture", "llama", 5);
    rc |= llm_gguf_writer_set_u32(w, "llama.embedding_length", cfg->dim);
    rc |= llm_gguf_writer_set_u32(w, "llama.block_count", cfg->n_layers);
    rc |= llm_gguf_writer_set_u32(w, "llama.feed_forward_length", cfg->hidden_dim);
    rc |= llm_gguf_writer_set_u32(w, "llama.attention.head_count", cfg->n_heads);
    rc |= llm_gguf_writer_set_u32(w, "llama.attention.head_count_kv", cfg->n_kv_heads);
    rc |= llm_gguf_writer_set_u32(w, "llama.context_length", cfg->seq_len);
    rc |= llm_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", cfg->rms_eps);
    rc |= llm_gguf_writer_set_f32(w, "llama.rope.freq_base", cfg->rope_theta);
    for (uint64_t i = 0; i < llm_llama2c_tensor_count(c); i++) {
        const llm_gguf_tensor *t = llm_llama2c_tensor_at(c, i);
        rc |= llm_gguf_writer_add_tensor_f32(w, t->name, t->type, t->n_dims, t->ne, t->data);
    }
    char err[256] = "";
    if (rc == 0)
        rc = llm_gguf_writer_write(w, path, err, sizeof err);
    if (rc)
        fprintf(stderr, "gguf write: %s %s\n", err, llm_gguf_writer_error(w));
    REQUIRE(rc == 0);
    llm_gguf_writer_free(w);
}

static int32_t argmax(const float *x, int n)
{
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s stories260K.bin\n", argv[0]);
        return 2;
    }
    if (access(argv[1], R_OK) != 0)
        PM_SKIP("stories260K.bin not present (../shared/models)");
    char tok[512], gguf[512];
    snprintf(tok, sizeof tok, "/tmp/pm_l2c_tok_%ld.bin", (long)getpid());
    synth_path(gguf, sizeof gguf, "stories");
    llm_llama2c *c;
    char err[256];
    REQUIRE(llm_llama2c_open(argv[1], &c, err, sizeof err) == 0);
    const llm_llama2c_config *cfg = llm_llama2c_get_config(c);
    int V = (int)cfg->vocab_size;
    write_tokenizer(tok, V);
    to_gguf(c, gguf);

    llm_model_options o = LLM_MODEL_OPTIONS_INIT;
    o.n_threads = 2;
    o.tokenizer_path = tok;
    llm_model *a = NULL;
    CHECK_INT_EQ(llm_model_open(argv[1], &o, &a, err, sizeof err), 0);
    REQUIRE(a);
    llm_model_info info;
    llm_model_get_info(a, &info);
    CHECK_INT_EQ(info.dim, 64);
    CHECK_INT_EQ(info.n_layers, 5);
    CHECK_INT_EQ(info.n_heads, 8);
    CHECK_INT_EQ(info.n_kv_heads, 4);
    CHECK_INT_EQ(info.n_vocab, 512);
    CHECK_INT_EQ(info.has_tokenizer, 1);
    CHECK_INT_EQ(info.bos, 1);
    CHECK_INT_EQ(info.eos, 2);
    llm_model *b = synth_open(gguf, 2);

    ref_hparams hp = {(int)cfg->dim, (int)cfg->n_layers, (int)cfg->n_heads, (int)cfg->n_kv_heads,
                      (int)cfg->hidden_dim, V, 64, cfg->rms_eps, cfg->rope_theta, 1.0, 0, REF_LLAMA, 0, 0};
    ref_model *r = ref_load(&hp, find_l2c, c);
    REQUIRE(r);
    llm_session *sa = synth_session(a, 64, 16, 1), *sb = synth_session(b, 64, 16, 2);
    int32_t toks[N_PROMPT] = {1, 400, 30, 260, 11, 5, 77, 300, 499, 1, 42, 256};
    const float *la, *lb;
    double *ref = malloc((size_t)V * sizeof *ref), worst = 0;
    REQUIRE(ref);
    for (int i = 0; i < N_PROMPT; i++)
        ref_step(r, toks[i], ref);
    CHECK_INT_EQ(llm_prefill(sa, toks, N_PROMPT, 0, &la), 0);
    CHECK_INT_EQ(llm_prefill(sb, toks, N_PROMPT, 0, &lb), 0);
    for (int step = 0;; step++) {
        CHECK(memcmp(la, lb, (size_t)V * sizeof(float)) == 0);
        double e = ref_max_abs_diff(ref, la, V);
        worst = e > worst ? e : worst;
        CHECK_NEAR(e, 0.0, 1e-3);
        if (step == N_STEPS)
            break;
        int32_t next = argmax(la, V);
        ref_step(r, next, ref);
        CHECK_INT_EQ(llm_decode(sa, next, &la), 0);
        CHECK_INT_EQ(llm_decode(sb, next, &lb), 0);
    }
    printf("stories260K: checkpoint == GGUF, max |err| vs reference %.3g\n", worst);
    free(ref);
    ref_free(r);
    llm_session_free(sa);
    llm_session_free(sb);
    llm_model_free(a);
    llm_model_free(b);
    llm_llama2c_close(c);
    unlink(tok);
    unlink(gguf);
    return pm_check_result();
}
