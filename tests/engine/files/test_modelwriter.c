/* test_modelwriter.c — the pm-modelwriter tool, run as a child process.
 *
 * synth: metadata and shapes as asked, weights following the documented
 * generator (recomputed here from its description), determinism by seed,
 * types and fallbacks, the generated vocabulary tokenizing as derived by
 * hand. convert-llama2c: every tensor of the checkpoint (stories260K and a
 * synthetic one) arrives unchanged (f32) or within quantization error
 * (q8_0), with the same hyper-parameters and vocabulary. requant: every
 * metadata entry equal (key, type, value) to the input's, tensors in the
 * same order and shapes, matrices re-encoded to the bytes this test's own
 * quantization of the input's rows gives, everything else byte for byte;
 * the shipped KJV block head re-encoded to q8_0 drafts for the KJV target
 * (through pm-generate) with the plain run's ids. Usage errors exit 2,
 * failures 1, each with a message.
 *
 * Usage: test_modelwriter CASE
 */
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <unistd.h>

#include "bytes.h"
#include "gguf.h"
#include "llama2c.h"
#include "pm_check.h"
#include "pm_child.h"
#include "quant.h"
#include "tokenizer.h"

#ifndef PM_MODELWRITER
#error "PM_MODELWRITER must name the tool's path"
#endif
#ifndef PM_SHARED_DIR
#define PM_SHARED_DIR "../shared"
#endif
#ifndef PM_REPO_MODELS
#define PM_REPO_MODELS "models"
#endif

static pm_child_result g_res;

/* Runs exe with the arguments in ap (NULL-terminated, up to 31) and returns
 * its exit code (-1 when it did not exit normally). */
static int vrun(const char *exe, const char *first, va_list ap)
{
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)exe;
    for (const char *a = first; a && n < 31; a = va_arg(ap, const char *))
        argv[n++] = (char *)a;
    argv[n] = NULL;
    REQUIRE(pm_child_exec(argv, NULL, 120000, &g_res) == 0);
    if (!g_res.exited) {
        char d[128];
        fprintf(stderr, "%s: %s\n", exe, pm_child_describe(&g_res, d, sizeof d));
        return -1;
    }
    return g_res.exit_code;
}

/* Runs the tool with up to 31 arguments (NULL-terminated). */
static int tool(const char *first, ...)
{
    va_list ap;
    va_start(ap, first);
    int rc = vrun(PM_MODELWRITER, first, ap);
    va_end(ap);
    return rc;
}

static llm_gguf *open_ok(const char *path)
{
    llm_gguf *g;
    char err[256];
    int rc = llm_gguf_open(path, &g, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    REQUIRE(rc == 0);
    return g;
}

static uint32_t meta_u32(const llm_gguf *g, const char *key)
{
    uint32_t v = 0;
    CHECK_INT_EQ(llm_gguf_get_u32(g, key, &v), 0);
    return v;
}

/* ---- synth -------------------------------------------------------------- */

/* The generator as docs/model-files.md describes it. */
static uint64_t splitmix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float doc_weight(uint64_t seed, uint32_t tensor, uint64_t index, float scale, float offset)
{
    uint64_t z = splitmix(splitmix(seed ^ splitmix(tensor)) ^ index);
    return offset + scale * ((float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
}

static void case_synth_f32(void)
{
    char path[512];
    tmp_path(path, sizeof path, "synth.gguf");
    int rc = tool("synth", "-o", path, "--dim", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn",
                  "96", "--vocab", "300", "--ctx", "32", "--type", "f32", "--seed", "7", "--rope-base", "500000",
                  NULL);
    CHECK_INT_EQ(rc, 0);
    llm_gguf *g = open_ok(path);
    CHECK_INT_EQ(meta_u32(g, "llama.embedding_length"), 64);
    CHECK_INT_EQ(meta_u32(g, "llama.block_count"), 2);
    CHECK_INT_EQ(meta_u32(g, "llama.attention.head_count"), 4);
    CHECK_INT_EQ(meta_u32(g, "llama.attention.head_count_kv"), 2);
    CHECK_INT_EQ(meta_u32(g, "llama.feed_forward_length"), 96);
    CHECK_INT_EQ(meta_u32(g, "llama.context_length"), 32);
    CHECK_INT_EQ(meta_u32(g, "llama.vocab_size"), 300);
    CHECK_INT_EQ(meta_u32(g, "llama.rope.dimension_count"), 16);
    float f;
    CHECK_INT_EQ(llm_gguf_get_f32(g, "llama.rope.freq_base", &f), 0);
    CHECK_NEAR(f, 500000, 0);
    CHECK_INT_EQ(llm_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f), 0);
    CHECK_NEAR(f, 1e-5f, 0);
    const char *s;
    size_t len;
    CHECK_INT_EQ(llm_gguf_get_str(g, "general.architecture", &s, &len), 0);
    CHECK(len == 5 && memcmp(s, "llama", 5) == 0);
    CHECK_INT_EQ(llm_gguf_get_str(g, "llama.rope.scaling.type", &s, &len), LLM_ENOKEY);
    /* Tensors: token_embd, 9 per layer, output_norm, output. */
    CHECK_U64_EQ(llm_gguf_tensor_count(g), 1 + 18 + 2);
    const llm_gguf_tensor *e = llm_gguf_find_tensor(g, "token_embd.weight");
    REQUIRE(e != NULL);
    CHECK_U64_EQ(e->ne[0], 64);
    CHECK_U64_EQ(e->ne[1], 300);
    const llm_gguf_tensor *k = llm_gguf_find_tensor(g, "blk.1.attn_k.weight");
    REQUIRE(k != NULL);
    CHECK_U64_EQ(k->ne[1], 32);
    const llm_gguf_tensor *down = llm_gguf_find_tensor(g, "blk.0.ffn_down.weight");
    REQUIRE(down != NULL);
    CHECK_U64_EQ(down->ne[0], 96);
    CHECK(llm_gguf_find_tensor(g, "output.weight") != NULL);
    /* Values: tensor 0 is token_embd (scale sqrt 3), tensor 1 the first
     * attn_norm (1 + 0.1u), tensor 9 the first ffn_down (fan-in 96). */
    float v;
    memcpy(&v, (const float *)e->data + 1234, 4);
    CHECK_NEAR(v, doc_weight(7, 0, 1234, sqrtf(3.0f), 0.0f), 0);
    const llm_gguf_tensor *n = llm_gguf_find_tensor(g, "blk.0.attn_norm.weight");
    memcpy(&v, (const float *)n->data + 5, 4);
    CHECK_NEAR(v, doc_weight(7, 1, 5, 0.1f, 1.0f), 0);
    memcpy(&v, (const float *)down->data + 96 * 3 + 2, 4);
    CHECK_NEAR(v, doc_weight(7, 9, 96 * 3 + 2, sqrtf(3.0f / 96.0f), 0.0f), 0);
    /* Bounds: every ffn_down weight within its scale. */
    for (uint64_t i = 0; i < 96 * 64; i++) {
        memcpy(&v, (const float *)down->data + i, 4);
        if (!(fabsf(v) <= sqrtf(3.0f / 96.0f))) {
            CHECK(fabsf(v) <= sqrtf(3.0f / 96.0f));
            break;
        }
    }
    /* Vocabulary: 259 "▁", 260.. a-z, 286.. A-Z: 299 is "N". */
    CHECK_INT_EQ(llm_gguf_arr_str(g, "tokenizer.ggml.tokens", 259, &s, &len), 0);
    CHECK(len == 3 && memcmp(s, "\xe2\x96\x81", 3) == 0);
    CHECK_INT_EQ(llm_gguf_arr_str(g, "tokenizer.ggml.tokens", 299, &s, &len), 0);
    CHECK(len == 1 && s[0] == 'N');
    CHECK_INT_EQ(llm_gguf_arr_str(g, "tokenizer.ggml.tokens", 3 + 0x41, &s, &len), 0);
    CHECK(len == 6 && memcmp(s, "<0x41>", 6) == 0);
    CHECK_INT_EQ(llm_gguf_arr_f32(g, "tokenizer.ggml.scores", 260, &f), 0);
    CHECK_NEAR(f, -1, 0);
    llm_gguf_close(g);
    remove(path);
}

static int files_equal(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
        if (ca == EOF || cb == EOF)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

static int synth_small(const char *path, const char *seed, const char *type, const char *ffn, const char *extra)
{
    return tool("synth", "-o", path, "--dim", "64", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--ffn", ffn,
                "--vocab", "700", "--ctx", "16", "--type", type, "--seed", seed, extra, NULL);
}

/* --arch qwen2 / qwen3: the architecture's metadata prefix, its extra
 * tensors in the documented order and shapes, a head width of its own. */
static void case_synth_qwen(void)
{
    char path[512];
    tmp_path(path, sizeof path, "qwen.gguf");
    CHECK_INT_EQ(tool("synth", "-o", path, "--dim", "64", "--layers", "1", "--heads", "4", "--kv-heads", "2",
                      "--ffn", "64", "--vocab", "300", "--ctx", "16", "--type", "q8_0", "--seed", "3",
                      "--arch", "qwen2", "--tied", NULL),
                 0);
    llm_gguf *g = open_ok(path);
    const char *s;
    size_t len;
    CHECK_INT_EQ(llm_gguf_get_str(g, "general.architecture", &s, &len), 0);
    CHECK(len == 5 && memcmp(s, "qwen2", 5) == 0);
    CHECK_INT_EQ(meta_u32(g, "qwen2.embedding_length"), 64);
    CHECK_INT_EQ(meta_u32(g, "qwen2.rope.dimension_count"), 16);
    uint32_t v;
    CHECK_INT_EQ(llm_gguf_get_u32(g, "llama.embedding_length", &v), LLM_ENOKEY);
    CHECK_INT_EQ(llm_gguf_get_u32(g, "qwen2.attention.key_length", &v), LLM_ENOKEY);
    const llm_gguf_tensor *t = llm_gguf_find_tensor(g, "blk.0.attn_k.bias");
    REQUIRE(t);
    CHECK_INT_EQ(t->type, LLM_TYPE_F32);
    CHECK_INT_EQ(t->n_dims, 1);
    CHECK_INT_EQ((long long)t->ne[0], 32);
    /* Tensor 11: token_embd, nine layer tensors, attn_q.bias, attn_k.bias. */
    float f;
    memcpy(&f, (const unsigned char *)t->data + 4, 4);
    CHECK_NEAR(f, doc_weight(3, 11, 1, 0.5f, 0.0f), 0);
    CHECK_INT_EQ((long long)llm_gguf_find_tensor(g, "blk.0.attn_q.bias")->ne[0], 64);
    CHECK(llm_gguf_find_tensor(g, "blk.0.attn_q_norm.weight") == NULL);
    llm_gguf_close(g);

    CHECK_INT_EQ(tool("synth", "-o", path, "--dim", "64", "--layers", "1", "--heads", "4", "--kv-heads", "2",
                      "--ffn", "64", "--vocab", "300", "--ctx", "16", "--type", "f32", "--seed", "3",
                      "--arch", "qwen3", "--head-dim", "24", NULL),
                 0);
    g = open_ok(path);
    CHECK_INT_EQ(meta_u32(g, "qwen3.attention.key_length"), 24);
    CHECK_INT_EQ(meta_u32(g, "qwen3.attention.value_length"), 24);
    CHECK_INT_EQ(meta_u32(g, "qwen3.rope.dimension_count"), 24);
    t = llm_gguf_find_tensor(g, "blk.0.attn_q.weight");
    CHECK_INT_EQ((long long)t->ne[0], 64);
    CHECK_INT_EQ((long long)t->ne[1], 96);
    t = llm_gguf_find_tensor(g, "blk.0.attn_output.weight");
    CHECK_INT_EQ((long long)t->ne[0], 96);
    CHECK_INT_EQ((long long)t->ne[1], 64);
    t = llm_gguf_find_tensor(g, "blk.0.attn_k_norm.weight");
    REQUIRE(t);
    CHECK_INT_EQ((long long)t->ne[0], 24);
    memcpy(&f, t->data, 4);
    CHECK_NEAR(f, doc_weight(3, 11, 0, 0.1f, 1.0f), 0);
    CHECK(llm_gguf_find_tensor(g, "blk.0.attn_q.bias") == NULL);
    llm_gguf_close(g);

    CHECK_INT_EQ(tool("synth", "-o", path, "--dim", "64", "--layers", "1", "--heads", "4", "--kv-heads", "2",
                      "--ffn", "64", "--vocab", "300", "--ctx", "16", "--type", "f32", "--seed", "3",
                      "--arch", "gpt2", NULL),
                 2);
    CHECK_STR_EQ(g_res.err, "pm-modelwriter: --arch must be llama, qwen2 or qwen3 (got 'gpt2')\n");
    remove(path);
}

static void case_synth_seed(void)
{
    char a[512], b[512], c[512];
    tmp_path(a, sizeof a, "seed_a.gguf");
    tmp_path(b, sizeof b, "seed_b.gguf");
    tmp_path(c, sizeof c, "seed_c.gguf");
    CHECK_INT_EQ(synth_small(a, "42", "q4_0", "64", NULL), 0);
    CHECK_INT_EQ(synth_small(b, "42", "q4_0", "64", NULL), 0);
    CHECK_INT_EQ(synth_small(c, "43", "q4_0", "64", NULL), 0);
    CHECK(files_equal(a, b));
    CHECK(!files_equal(a, c));
    remove(a);
    remove(b);
    remove(c);
}

static void case_synth_types(void)
{
    char path[512];
    tmp_path(path, sizeof path, "types.gguf");
    /* The 32-element block types: every matrix in q5_1 (file type 9),
     * then q4_1 and q5_0 (3, 8); bytes per row from the block layout. */
    static const struct { const char *name; uint32_t type, ftype; uint64_t down_bytes; } lt[] = {
        {"q5_1", LLM_TYPE_Q5_1, 9, 96 / 32 * 24 * 64},
        {"Q4_1", LLM_TYPE_Q4_1, 3, 96 / 32 * 20 * 64},
        {"q5_0", LLM_TYPE_Q5_0, 8, 96 / 32 * 22 * 64},
    };
    for (size_t i = 0; i < 3; i++) {
        CHECK_INT_EQ(tool("synth", "-o", path, "--dim", "64", "--layers", "1", "--heads", "4", "--kv-heads", "2",
                          "--ffn", "96", "--vocab", "300", "--ctx", "16", "--type", lt[i].name, "--seed", "1",
                          NULL),
                     0);
        llm_gguf *lg = open_ok(path);
        const llm_gguf_tensor *down = llm_gguf_find_tensor(lg, "blk.0.ffn_down.weight");
        CHECK_INT_EQ(down->type, lt[i].type);
        CHECK_U64_EQ(down->nbytes, lt[i].down_bytes);
        CHECK_INT_EQ(llm_gguf_find_tensor(lg, "token_embd.weight")->type, lt[i].type);
        CHECK_INT_EQ(meta_u32(lg, "general.file_type"), lt[i].ftype);
        llm_gguf_close(lg);
    }
    /* ffn 48 is not a multiple of 32: ffn_down (rows of 48) stays f32. */
    CHECK_INT_EQ(synth_small(path, "1", "q8_0", "48", "--tied"), 0);
    CHECK(strstr(g_res.err, "note: 1 weight matrices kept in f32") != NULL);
    llm_gguf *g = open_ok(path);
    CHECK_INT_EQ(llm_gguf_find_tensor(g, "token_embd.weight")->type, LLM_TYPE_Q8_0);
    CHECK_INT_EQ(llm_gguf_find_tensor(g, "blk.0.attn_q.weight")->type, LLM_TYPE_Q8_0);
    CHECK_INT_EQ(llm_gguf_find_tensor(g, "blk.0.ffn_gate.weight")->type, LLM_TYPE_Q8_0);
    CHECK_INT_EQ(llm_gguf_find_tensor(g, "blk.0.ffn_down.weight")->type, LLM_TYPE_F32);
    CHECK_INT_EQ(llm_gguf_find_tensor(g, "blk.0.attn_norm.weight")->type, LLM_TYPE_F32);
    CHECK(llm_gguf_find_tensor(g, "output.weight") == NULL);
    CHECK_INT_EQ(meta_u32(g, "general.file_type"), 7);
    llm_gguf_close(g);
    CHECK_INT_EQ(tool("synth", "-o", path, "--dim", "64", "--layers", "1", "--heads", "2", "--kv-heads", "1",
                      "--ffn", "64", "--vocab", "300", "--ctx", "16", "--type", "bf16", "--seed", "1",
                      "--rope-scale", "4", NULL),
                 0);
    g = open_ok(path);
    CHECK_INT_EQ(llm_gguf_find_tensor(g, "blk.0.attn_v.weight")->type, LLM_TYPE_BF16);
    const char *s;
    size_t len;
    float f;
    CHECK_INT_EQ(llm_gguf_get_str(g, "llama.rope.scaling.type", &s, &len), 0);
    CHECK(len == 6 && memcmp(s, "linear", 6) == 0);
    CHECK_INT_EQ(llm_gguf_get_f32(g, "llama.rope.scaling.factor", &f), 0);
    CHECK_NEAR(f, 4, 0);
    llm_gguf_close(g);
    /* k-quants: rows of 256 take q4_K; ffn_down's rows of 320 do not fit
     * its super-blocks and stay f32. general.file_type 15 (Q4_K_M). */
    CHECK_INT_EQ(tool("synth", "-o", path, "--dim", "256", "--layers", "1", "--heads", "4", "--kv-heads", "2",
                      "--ffn", "320", "--vocab", "300", "--ctx", "16", "--type", "q4_K", "--seed", "1", NULL),
                 0);
    g = open_ok(path);
    CHECK_INT_EQ(llm_gguf_find_tensor(g, "blk.0.attn_q.weight")->type, LLM_TYPE_Q4_K);
    CHECK_INT_EQ(llm_gguf_find_tensor(g, "token_embd.weight")->type, LLM_TYPE_Q4_K);
    CHECK_INT_EQ(llm_gguf_find_tensor(g, "blk.0.ffn_down.weight")->type, LLM_TYPE_F32);
    CHECK_INT_EQ(meta_u32(g, "general.file_type"), 15);
    llm_gguf_close(g);
    CHECK_INT_EQ(tool("synth", "-o", path, "--dim", "256", "--layers", "1", "--heads", "4", "--kv-heads", "2",
                      "--ffn", "512", "--vocab", "300", "--ctx", "16", "--type", "q6_k", "--seed", "1", NULL),
                 0);
    g = open_ok(path);
    CHECK_INT_EQ(llm_gguf_find_tensor(g, "blk.0.ffn_down.weight")->type, LLM_TYPE_Q6_K);
    CHECK_INT_EQ(meta_u32(g, "general.file_type"), 18);
    llm_gguf_close(g);
    /* The 2- and 3-bit k-quants: ffn_down's rows of 512 are two
     * super-blocks, 256 rows of 2 x 84 (q2_K) and 2 x 110 (q3_K) bytes;
     * file types 10 (Q2_K) and 12 (Q3_K_M). */
    static const struct { const char *name; uint32_t type, ftype; uint64_t down_bytes; } kt[] = {
        {"q2_K", LLM_TYPE_Q2_K, 10, 256 * 2 * 84},
        {"Q3_K", LLM_TYPE_Q3_K, 12, 256 * 2 * 110},
    };
    for (size_t i = 0; i < 2; i++) {
        CHECK_INT_EQ(tool("synth", "-o", path, "--dim", "256", "--layers", "1", "--heads", "4", "--kv-heads", "2",
                          "--ffn", "512", "--vocab", "300", "--ctx", "16", "--type", kt[i].name, "--seed", "1",
                          NULL),
                     0);
        g = open_ok(path);
        const llm_gguf_tensor *down = llm_gguf_find_tensor(g, "blk.0.ffn_down.weight");
        CHECK_INT_EQ(down->type, kt[i].type);
        CHECK_U64_EQ(down->nbytes, kt[i].down_bytes);
        CHECK_INT_EQ(llm_gguf_find_tensor(g, "blk.0.attn_q.weight")->type, kt[i].type);
        CHECK_INT_EQ(meta_u32(g, "general.file_type"), kt[i].ftype);
        llm_gguf_close(g);
    }
    remove(path);
}

/* The q4_K_M and q5_K_M mixes over 8 layers: llama.cpp gives attn_v and
 * ffn_down q6_K on layers 0 and 7 (first and last eighth) and 3 and 6
 * (i - 1 = 2, 5), the head q6_K (the embedding instead when tied), all
 * else the base type; file types 15 and 17 as llama.cpp numbers them. */
static void case_synth_mix(void)
{
    char path[512];
    tmp_path(path, sizeof path, "mix.gguf");
    static const int more[8] = {1, 0, 0, 1, 0, 0, 1, 1};
    for (int tied = 0; tied < 2; tied++) {
        const char *mix = tied ? "q5_K_M" : "q4_K_M";
        uint32_t base = tied ? LLM_TYPE_Q5_K : LLM_TYPE_Q4_K;
        CHECK_INT_EQ(tool("synth", "-o", path, "--dim", "256", "--layers", "8", "--heads", "4",
                          "--kv-heads", "2", "--ffn", "512", "--vocab", "300", "--ctx", "16", "--type",
                          mix, "--seed", "1", tied ? "--tied" : NULL, NULL),
                     0);
        llm_gguf *g = open_ok(path);
        for (int l = 0; l < 8; l++) {
            char n[64];
            static const char *const same[] = {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"};
            for (size_t k = 0; k < sizeof same / sizeof same[0]; k++) {
                snprintf(n, sizeof n, "blk.%d.%s.weight", l, same[k]);
                CHECK_INT_EQ(llm_gguf_find_tensor(g, n)->type, base);
            }
            snprintf(n, sizeof n, "blk.%d.attn_v.weight", l);
            CHECK_INT_EQ(llm_gguf_find_tensor(g, n)->type, more[l] ? LLM_TYPE_Q6_K : base);
            snprintf(n, sizeof n, "blk.%d.ffn_down.weight", l);
            CHECK_INT_EQ(llm_gguf_find_tensor(g, n)->type, more[l] ? LLM_TYPE_Q6_K : base);
            snprintf(n, sizeof n, "blk.%d.ffn_norm.weight", l);
            CHECK_INT_EQ(llm_gguf_find_tensor(g, n)->type, LLM_TYPE_F32);
        }
        CHECK_INT_EQ(llm_gguf_find_tensor(g, "token_embd.weight")->type, tied ? LLM_TYPE_Q6_K : base);
        if (!tied)
            CHECK_INT_EQ(llm_gguf_find_tensor(g, "output.weight")->type, LLM_TYPE_Q6_K);
        CHECK_INT_EQ(meta_u32(g, "general.file_type"), tied ? 17 : 15);
        llm_gguf_close(g);
    }
    /* ffn 288 (rows of ffn_down not whole super-blocks): llama.cpp's
     * fallbacks, q5_0 / q5_1 for the base type and q8_0 for q6_K; layers
     * 2 and 3 of 4 get more bits (2 - 4/8 = 2 mod 3; 3 is the last eighth). */
    for (int five = 0; five < 2; five++) {
        CHECK_INT_EQ(tool("synth", "-o", path, "--dim", "256", "--layers", "4", "--heads", "4",
                          "--kv-heads", "2", "--ffn", "288", "--vocab", "300", "--ctx", "16", "--type",
                          five ? "q5_K_M" : "q4_K_M", "--seed", "1", NULL),
                     0);
        llm_gguf *g = open_ok(path);
        uint32_t base = five ? LLM_TYPE_Q5_K : LLM_TYPE_Q4_K, fb = five ? LLM_TYPE_Q5_1 : LLM_TYPE_Q5_0;
        static const char *const down[4] = {"blk.0.ffn_down.weight", "blk.1.ffn_down.weight",
                                            "blk.2.ffn_down.weight", "blk.3.ffn_down.weight"};
        CHECK_INT_EQ(llm_gguf_find_tensor(g, down[0])->type, fb);
        CHECK_INT_EQ(llm_gguf_find_tensor(g, down[1])->type, fb);
        CHECK_INT_EQ(llm_gguf_find_tensor(g, down[2])->type, LLM_TYPE_Q8_0);
        CHECK_INT_EQ(llm_gguf_find_tensor(g, down[3])->type, LLM_TYPE_Q8_0);
        CHECK_INT_EQ(llm_gguf_find_tensor(g, "blk.1.ffn_up.weight")->type, base);
        CHECK_INT_EQ(llm_gguf_find_tensor(g, "blk.0.attn_v.weight")->type, base);
        CHECK_INT_EQ(llm_gguf_find_tensor(g, "blk.2.attn_v.weight")->type, LLM_TYPE_Q6_K);
        llm_gguf_close(g);
    }
    CHECK_INT_EQ(tool("synth", "-o", path, "--dim", "256", "--layers", "1", "--heads", "4", "--kv-heads",
                      "2", "--ffn", "512", "--vocab", "300", "--ctx", "16", "--type", "q3_K_M", "--seed",
                      "1", NULL),
                 2);
    CHECK(strstr(g_res.err, "--type must be") != NULL);
    remove(path);
}

/* The generated vocabulary with V = 700 (levels: "▁" = normal piece 0 =
 * id 259; 73 single characters; "▁a".."▁z" = normal 74..99; "xy" = normal
 * 100 + 26x + y for letters x, y). "hello" -> ▁ h e l l o. Scores are
 * -normal: ▁h (-81) merges first; then el (-215); the pair ll (-397) is
 * stale (its left l is in "el"); lo (-400). Level 2 ends at normal 775,
 * so at V = 700 there are no word or level-3 pieces: the result is ▁h, el,
 * lo = ids 340, 474, 659.
 * With V = 1100 the word pieces follow level 2: "the" gives ▁th (normal
 * 776) and ▁the (777), "and" gives ▁an (778) and ▁and (779) ("▁t", "▁a"
 * exist). "the": ▁t (93) merges, then he (286), then ▁t+he = ▁the (777);
 * ▁th and th went stale. "and": ▁a (74), then nd (441), then ▁a+nd =
 * ▁and (779); ▁an went stale. Ids 259 + 777 = 1036 and 259 + 779 = 1038. */
static void case_synth_vocab(void)
{
    char path[512], err[256];
    tmp_path(path, sizeof path, "vocab.gguf");
    CHECK_INT_EQ(synth_small(path, "3", "f32", "64", NULL), 0);
    llm_gguf *g = open_ok(path);
    llm_tokenizer *t;
    REQUIRE(llm_tokenizer_from_gguf(g, &t, err, sizeof err) == 0);
    int32_t ids[16];
    size_t n;
    CHECK_INT_EQ(llm_tokenize(t, "hello", 5, 1, ids, 16, &n), 0);
    CHECK_INT_EQ(n, 4);
    CHECK_INT_EQ(ids[0], 1);
    CHECK_INT_EQ(ids[1], 340);
    CHECK_INT_EQ(ids[2], 474);
    CHECK_INT_EQ(ids[3], 659);
    /* "é" has no piece: bytes C3 A9 -> ids 3 + 0xC3, 3 + 0xA9. */
    CHECK_INT_EQ(llm_tokenize(t, "\xc3\xa9", 2, 0, ids, 16, &n), 0);
    CHECK_INT_EQ(n, 3);
    CHECK_INT_EQ(ids[1], 3 + 0xc3);
    CHECK_INT_EQ(ids[2], 3 + 0xa9);
    llm_tokenizer_free(t);
    llm_gguf_close(g);
    CHECK_INT_EQ(tool("synth", "-o", path, "--dim", "64", "--layers", "1", "--heads", "2", "--kv-heads", "1",
                      "--ffn", "64", "--vocab", "1100", "--ctx", "16", "--type", "f32", "--seed", "3", NULL),
                 0);
    g = open_ok(path);
    REQUIRE(llm_tokenizer_from_gguf(g, &t, err, sizeof err) == 0);
    CHECK_INT_EQ(llm_tokenize(t, "the and", 7, 0, ids, 16, &n), 0);
    CHECK_INT_EQ(n, 2);
    CHECK_INT_EQ(ids[0], 1036);
    CHECK_INT_EQ(ids[1], 1038);
    const char *piece;
    size_t plen;
    CHECK_INT_EQ(llm_tokenizer_piece(t, 1035, &piece, &plen), 0);
    CHECK(plen == 5 && memcmp(piece, "\xe2\x96\x81th", 5) == 0);
    llm_tokenizer_free(t);
    llm_gguf_close(g);
    remove(path);
}

/* ---- convert-llama2c ---------------------------------------------------- */

/* A placeholder tokenizer.bin of n tokens: <unk>, <s>, </s>, the 256
 * bytes, then "p<i>" pieces. */
static void placeholder_tokenizer(const char *path, uint32_t n)
{
    bb b = {0};
    bb_u32(&b, 8);
    for (uint32_t i = 0; i < n; i++) {
        char s[16];
        if (i == 0)
            snprintf(s, sizeof s, "<unk>");
        else if (i < 3)
            snprintf(s, sizeof s, i == 1 ? "\n<s>\n" : "\n</s>\n");
        else if (i < 259)
            snprintf(s, sizeof s, "<0x%02X>", i - 3);
        else
            snprintf(s, sizeof s, "p%u", i);
        bb_f32(&b, -(float)i);
        bb_u32(&b, (uint32_t)strlen(s));
        bb_raw(&b, s, strlen(s));
    }
    REQUIRE(bb_save(&b, path) == 0);
    bb_free(&b);
}

/* Converts ckpt with `type` and checks the GGUF against the checkpoint. */
static void convert_and_compare(const char *ckpt, uint32_t vocab, const char *type)
{
    char tok[512], out[512], err[256];
    tmp_path(tok, sizeof tok, "tokenizer.bin");
    tmp_path(out, sizeof out, "converted.gguf");
    placeholder_tokenizer(tok, vocab);
    int rc = tool("convert-llama2c", "-o", out, "--model", ckpt, "--tokenizer", tok, "--type", type, NULL);
    if (rc)
        fprintf(stderr, "%s", g_res.err);
    REQUIRE(rc == 0);
    llm_llama2c *m;
    REQUIRE(llm_llama2c_open(ckpt, &m, err, sizeof err) == 0);
    const llm_llama2c_config *c = llm_llama2c_get_config(m);
    llm_gguf *g = open_ok(out);
    CHECK_INT_EQ(meta_u32(g, "llama.embedding_length"), c->dim);
    CHECK_INT_EQ(meta_u32(g, "llama.feed_forward_length"), c->hidden_dim);
    CHECK_INT_EQ(meta_u32(g, "llama.block_count"), c->n_layers);
    CHECK_INT_EQ(meta_u32(g, "llama.attention.head_count"), c->n_heads);
    CHECK_INT_EQ(meta_u32(g, "llama.attention.head_count_kv"), c->n_kv_heads);
    CHECK_INT_EQ(meta_u32(g, "llama.context_length"), c->seq_len);
    CHECK_INT_EQ(meta_u32(g, "llama.vocab_size"), c->vocab_size);
    CHECK_U64_EQ(llm_gguf_tensor_count(g), llm_llama2c_tensor_count(m));
    uint32_t want_type;
    REQUIRE(llm_type_parse(type, &want_type) == 0);
    for (uint64_t i = 0; i < llm_llama2c_tensor_count(m); i++) {
        const llm_gguf_tensor *a = llm_llama2c_tensor_at(m, i), *b = llm_gguf_find_tensor(g, a->name);
        REQUIRE(b != NULL);
        CHECK_INT_EQ(b->n_dims, a->n_dims);
        CHECK_U64_EQ(b->ne[0], a->ne[0]);
        CHECK_U64_EQ(b->ne[1], a->ne[1]);
        int quantized = a->n_dims == 2 && a->ne[0] % llm_type_block_size(want_type) == 0;
        CHECK_INT_EQ(b->type, quantized ? want_type : LLM_TYPE_F32);
        if (b->type == LLM_TYPE_F32) {
            CHECK(memcmp(a->data, b->data, a->nbytes) == 0);
            continue;
        }
        /* Q8_0: within half a step d = amax/127, plus the fp16 rounding of
         * d felt by |q| <= 127 steps (127 * 2^-11 d): 0.57 d in all. */
        uint64_t n = a->ne[0] * a->ne[1];
        float *y = malloc(n * sizeof *y);
        REQUIRE(y != NULL);
        llm_dequantize_row(b->type, b->data, y, n);
        const float *x = a->data;
        for (uint64_t blk = 0; blk < n / 32; blk++) {
            float amax = 0;
            for (int j = 0; j < 32; j++)
                amax = fmaxf(amax, fabsf(x[blk * 32 + j]));
            for (int j = 0; j < 32; j++)
                if (!(fabsf(y[blk * 32 + j] - x[blk * 32 + j]) <= amax / 127.0f * 0.57f + 1e-7f)) {
                    CHECK_NEAR(y[blk * 32 + j], x[blk * 32 + j], amax / 127.0f * 0.57f);
                    blk = n;
                    break;
                }
        }
        free(y);
    }
    /* The same vocabulary on both sides. */
    llm_tokenizer *ta, *tb;
    REQUIRE(llm_tokenizer_from_llama2c(tok, c->vocab_size, &ta, err, sizeof err) == 0);
    REQUIRE(llm_tokenizer_from_gguf(g, &tb, err, sizeof err) == 0);
    CHECK_INT_EQ(llm_tokenizer_equal(ta, tb), 1);
    llm_tokenizer_free(ta);
    llm_tokenizer_free(tb);
    llm_gguf_close(g);
    llm_llama2c_close(m);
    remove(tok);
    remove(out);
}

static void case_convert_stories(void)
{
    const char *path = PM_SHARED_DIR "/models/stories260K.bin";
    FILE *probe = fopen(path, "rb");
    if (!probe)
        PM_SKIP("../shared/models/stories260K.bin is not present");
    fclose(probe);
    convert_and_compare(path, 512, "f32");
    convert_and_compare(path, 512, "q8_0"); /* ffn_down rows of 172 stay f32 */
}

/* A synthetic checkpoint (dim 64, hidden 96, 2 layers, 4 heads, 2 kv
 * heads, vocab 300 unshared, seq 8) with values from a simple LCG. */
static void case_convert_synthetic(void)
{
    char ckpt[512];
    tmp_path(ckpt, sizeof ckpt, "synthetic.bin");
    bb b = {0};
    int32_t h[7] = {64, 96, 2, 4, 2, -300, 8};
    for (int i = 0; i < 7; i++)
        bb_u32(&b, (uint32_t)h[i]);
    uint64_t floats = 300 * 64 + 2 * (64 + 64 * 64 + 2 * 32 * 64 + 64 * 64 + 64 + 3 * 96 * 64) + 64 + 2 * 8 * 8 +
                      300 * 64;
    uint32_t state = 12345;
    for (uint64_t i = 0; i < floats; i++) {
        state = state * 1664525u + 1013904223u;
        bb_f32(&b, (float)(state >> 8) / 16777216.0f - 0.5f);
    }
    REQUIRE(bb_save(&b, ckpt) == 0);
    bb_free(&b);
    convert_and_compare(ckpt, 300, "f32");
    convert_and_compare(ckpt, 300, "q8_0");
    remove(ckpt);
}

/* ---- requant ------------------------------------------------------------ */

static int str_same(const char *a, size_t la, const char *b, size_t lb)
{
    return la == lb && memcmp(a, b, la) == 0;
}

/* The values of `key` in a and b (both of GGUF type t) are the same:
 * scalars through the typed getters (floats by their bits), numeric arrays
 * by their stored bytes, string arrays element by element. */
static int value_same(const llm_gguf *a, const llm_gguf *b, const char *key, uint32_t t)
{
    const char *sa, *sb;
    size_t la, lb;
    switch (t) {
    case LLM_GGUF_STRING:
        return llm_gguf_get_str(a, key, &sa, &la) == 0 && llm_gguf_get_str(b, key, &sb, &lb) == 0 &&
               str_same(sa, la, sb, lb);
    case LLM_GGUF_F32: case LLM_GGUF_F64: {
        double da, db;
        return llm_gguf_get_f64(a, key, &da) == 0 && llm_gguf_get_f64(b, key, &db) == 0 &&
               memcmp(&da, &db, sizeof da) == 0;
    }
    case LLM_GGUF_BOOL: {
        int ba, bb_;
        return llm_gguf_get_bool(a, key, &ba) == 0 && llm_gguf_get_bool(b, key, &bb_) == 0 && ba == bb_;
    }
    case LLM_GGUF_I8: case LLM_GGUF_I16: case LLM_GGUF_I32: case LLM_GGUF_I64: {
        int64_t ia, ib;
        return llm_gguf_get_i64(a, key, &ia) == 0 && llm_gguf_get_i64(b, key, &ib) == 0 && ia == ib;
    }
    case LLM_GGUF_ARRAY: {
        uint32_t ea, eb;
        uint64_t na, nb;
        const void *pa, *pb;
        if (llm_gguf_get_arr(a, key, &ea, &na, &pa) != 0 || llm_gguf_get_arr(b, key, &eb, &nb, &pb) != 0 ||
            ea != eb || na != nb)
            return 0;
        if (ea != LLM_GGUF_STRING)
            return llm_gguf_value_size(ea) && memcmp(pa, pb, (size_t)(na * llm_gguf_value_size(ea))) == 0;
        for (uint64_t i = 0; i < na; i++)
            if (llm_gguf_arr_str(a, key, i, &sa, &la) != 0 || llm_gguf_arr_str(b, key, i, &sb, &lb) != 0 ||
                !str_same(sa, la, sb, lb))
                return 0;
        return 1;
    }
    default: {
        uint64_t ua, ub;
        return llm_gguf_get_u64(a, key, &ua) == 0 && llm_gguf_get_u64(b, key, &ub) == 0 && ua == ub;
    }
    }
}

/* Every metadata entry of b equals a's at the same index: key, type and
 * value. */
static void kv_all_same(const llm_gguf *a, const llm_gguf *b)
{
    CHECK_U64_EQ(llm_gguf_kv_count(b), llm_gguf_kv_count(a));
    for (uint64_t i = 0; i < llm_gguf_kv_count(a) && i < llm_gguf_kv_count(b); i++) {
        const char *ka, *kb;
        size_t la, lb;
        uint32_t ta, tb;
        REQUIRE(llm_gguf_kv_at(a, i, &ka, &la, &ta) == 0 && llm_gguf_kv_at(b, i, &kb, &lb, &tb) == 0);
        char key[256];
        REQUIRE(la < sizeof key);
        memcpy(key, ka, la);
        key[la] = '\0';
        if (!str_same(ka, la, kb, lb) || ta != tb || !value_same(a, b, key, ta)) {
            fprintf(stderr, "metadata entry %llu ('%s') differs\n", (unsigned long long)i, key);
            CHECK(0);
        }
    }
}

static uint16_t le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* Row r of input tensor t as f32, decoded here from the layouts quant.h
 * documents (f32, f16, Q8_0: x = d * q), not through the engine's rows. */
static void row_f32(const llm_gguf_tensor *t, uint64_t r, float *dst)
{
    uint64_t n = t->ne[0];
    const unsigned char *p = t->data;
    if (t->type == LLM_TYPE_F32) {
        memcpy(dst, p + r * n * 4, (size_t)n * 4);
    } else if (t->type == LLM_TYPE_F16) {
        for (uint64_t i = 0; i < n; i++)
            dst[i] = llm_fp16_to_f32(le16(p + (r * n + i) * 2));
    } else {
        REQUIRE(t->type == LLM_TYPE_Q8_0);
        const unsigned char *row = p + r * (n / 32) * 34;
        for (uint64_t b = 0; b < n / 32; b++) {
            float d = llm_fp16_to_f32(le16(row + b * 34));
            for (int j = 0; j < 32; j++)
                dst[b * 32 + j] = (float)(int8_t)row[b * 34 + 2 + j] * d;
        }
    }
}

/* Tensors of out against in for a requant to `type`: same order, names
 * and shapes; a tensor of 2+ dimensions whose rows fit the type's blocks,
 * of a type other than `type` that this test decodes (f32, f16, q8_0), is
 * `type` with the bytes llm_quantize_row gives for the input's rows; any
 * other is byte for byte the input's. Returns how many were converted. */
static unsigned check_requantized(const llm_gguf *in, const llm_gguf *out, uint32_t type)
{
    CHECK_U64_EQ(llm_gguf_tensor_count(out), llm_gguf_tensor_count(in));
    unsigned converted = 0;
    for (uint64_t i = 0; i < llm_gguf_tensor_count(in) && i < llm_gguf_tensor_count(out); i++) {
        const llm_gguf_tensor *a = llm_gguf_tensor_at(in, i), *b = llm_gguf_tensor_at(out, i);
        CHECK_STR_EQ(b->name, a->name);
        CHECK_INT_EQ(b->n_dims, a->n_dims);
        for (int d = 0; d < 4; d++)
            CHECK_U64_EQ(b->ne[d], a->ne[d]);
        int decodable = a->type == LLM_TYPE_F32 || a->type == LLM_TYPE_F16 || a->type == LLM_TYPE_Q8_0;
        if (a->n_dims < 2 || a->type == type || !decodable || a->ne[0] % llm_type_block_size(type) != 0) {
            CHECK_INT_EQ(b->type, a->type);
            CHECK_U64_EQ(b->nbytes, a->nbytes);
            if (b->nbytes == a->nbytes && memcmp(a->data, b->data, (size_t)a->nbytes) != 0) {
                fprintf(stderr, "tensor '%s' was to be copied unchanged\n", a->name);
                CHECK(0);
            }
            continue;
        }
        converted++;
        CHECK_INT_EQ(b->type, type);
        uint64_t n = a->ne[0], rows = a->ne[1] * a->ne[2] * a->ne[3], rb;
        REQUIRE(llm_type_row_bytes(type, n, &rb) == 0);
        CHECK_U64_EQ(b->nbytes, rows * rb);
        if (b->type != type || b->nbytes != rows * rb)
            continue;
        float *x = malloc((size_t)n * sizeof *x);
        unsigned char *q = malloc((size_t)rb);
        REQUIRE(x && q);
        for (uint64_t r = 0; r < rows; r++) {
            row_f32(a, r, x);
            llm_quantize_row(type, x, q, (size_t)n);
            if (memcmp(q, (const unsigned char *)b->data + r * rb, (size_t)rb) != 0) {
                fprintf(stderr, "tensor '%s' row %llu differs from its quantization\n", a->name,
                        (unsigned long long)r);
                CHECK(0);
                break;
            }
        }
        free(x);
        free(q);
    }
    return converted;
}

static int count_words(const char *s)
{
    int n = 0;
    for (const char *p = s; *p; p++)
        if (*p != ' ' && *p != '\n' && (p == s || p[-1] == ' '))
            n++;
    return n;
}

#ifdef PM_GENERATE
static int generate(const char *first, ...)
{
    va_list ap;
    va_start(ap, first);
    int rc = vrun(PM_GENERATE, first, ap);
    va_end(ap);
    return rc;
}
#endif

/* The shipped KJV block head (f16 matrices) to q8_0. */
static void case_requant_block(void)
{
    const char *in = PM_REPO_MODELS "/phasemark-kjv-block-f16.gguf";
    if (access(in, R_OK) != 0)
        PM_SKIP("models/phasemark-kjv-block-f16.gguf is not present");
    char out[512];
    tmp_path(out, sizeof out, "rq_block.gguf");
    CHECK_INT_EQ(tool("requant", "-o", out, "--type", "q8_0", in, NULL), 0);
    CHECK_STR_EQ(g_res.err, "");
    llm_gguf *a = open_ok(in), *b = open_ok(out);
    CHECK_INT_EQ(llm_gguf_version(b), 3);
    CHECK_INT_EQ(llm_gguf_alignment(b), 32);
    kv_all_same(a, b);
    const char *s;
    size_t len;
    CHECK_INT_EQ(llm_gguf_get_str(b, "general.architecture", &s, &len), 0);
    CHECK(str_same(s, len, "phasemark-block", 15));
    int64_t layer;
    static const int64_t want_layers[3] = {1, 3, 5};
    for (int i = 0; i < 3; i++) {
        CHECK_INT_EQ(llm_gguf_arr_i64(b, "phasemark-block.target.layers", (uint64_t)i, &layer), 0);
        CHECK_INT_EQ(layer, want_layers[i]);
    }
    /* fc and 7 matrices in each of the 2 layers; 7 norm vectors stay. */
    CHECK_INT_EQ(check_requantized(a, b, LLM_TYPE_Q8_0), 15);
    CHECK_U64_EQ(llm_gguf_tensor_count(b), 22);
    /* The same metadata and tensor infos (2496 bytes, a multiple of 32),
     * then data in rows of ne0/32 blocks of 34 bytes: fc 512 x 1632, per
     * layer q and o 512 x 544, k and v 256 x 544, gate and up 1024 x 544,
     * down 512 x 1088, and 7 vectors of 2048 (all multiples of 32). */
    CHECK_U64_EQ(llm_gguf_file_size(b), 2496 + 512 * 1632 + 2 * (2 * 512 * 544 + 2 * 256 * 544 + 2 * 1024 * 544 +
                                                                  512 * 1088) + 7 * 2048);
    llm_gguf_close(a);
    llm_gguf_close(b);
#ifdef PM_GENERATE
    /* It drafts for the KJV target: greedy ids equal the plain run's. */
    const char *target = PM_REPO_MODELS "/phasemark-kjv-target-q8_0.gguf";
    if (access(target, R_OK) != 0) {
        remove(out);
        PM_SKIP("models/phasemark-kjv-target-q8_0.gguf is not present");
    }
    const char *prompt = "And the LORD spake unto Moses, saying,";
    static char plain[8192];
    CHECK_INT_EQ(generate("-m", target, "-p", prompt, "-n", "32", "--ids", "--threads", "2", NULL), 0);
    snprintf(plain, sizeof plain, "%s", g_res.out);
    CHECK_INT_EQ(count_words(plain), 32);
    CHECK_INT_EQ(generate("-m", target, "--drafter", "block", "--draft-head", out, "-p", prompt, "-n", "32",
                          "--ids", "--threads", "2", NULL),
                 0);
    CHECK_STR_EQ(g_res.out, plain);
    CHECK(strstr(g_res.err, "pm-generate: speculative: drafter block; block ") != NULL);
#endif
    remove(out);
}

/* A synthetic f16 llama model to q8_0; ffn 48 leaves ffn_down (rows of 48)
 * in f16. */
static void case_requant_llama(void)
{
    char in[512], out[512], again[512], same[512];
    tmp_path(in, sizeof in, "rq_in.gguf");
    tmp_path(out, sizeof out, "rq_out.gguf");
    tmp_path(again, sizeof again, "rq_again.gguf");
    tmp_path(same, sizeof same, "rq_same.gguf");
    CHECK_INT_EQ(synth_small(in, "4", "f16", "48", NULL), 0);
    CHECK_INT_EQ(tool("requant", "-o", out, "--type", "q8_0", in, NULL), 0);
    CHECK_STR_EQ(g_res.err, "pm-modelwriter: note: 1 weight matrices kept in their type (rows not a multiple of 32)\n");
    llm_gguf *a = open_ok(in), *b = open_ok(out);
    kv_all_same(a, b);
    CHECK_INT_EQ(meta_u32(b, "general.file_type"), 1); /* the input's (mostly f16), kept */
    /* token_embd, attn q/k/v/output, ffn gate/up, output. */
    CHECK_INT_EQ(check_requantized(a, b, LLM_TYPE_Q8_0), 8);
    CHECK_INT_EQ(llm_gguf_find_tensor(b, "blk.0.ffn_down.weight")->type, LLM_TYPE_F16);
    CHECK_INT_EQ(llm_gguf_find_tensor(b, "blk.0.ffn_norm.weight")->type, LLM_TYPE_F32);
    llm_gguf_close(a);
    llm_gguf_close(b);
#ifdef PM_GENERATE
    /* The engine loads it and decodes. */
    CHECK_INT_EQ(generate("-m", out, "-p", "hello", "-n", "8", "--ids", "--threads", "1", NULL), 0);
    CHECK_INT_EQ(count_words(g_res.out), 8);
#endif
    /* Asking for the types the tensors already have changes no byte. */
    CHECK_INT_EQ(tool("requant", "-o", same, "--type", "q8_0", out, NULL), 0);
    CHECK(files_equal(same, out));
    CHECK_INT_EQ(tool("requant", "-o", same, "--type", "f16", in, NULL), 0);
    CHECK(files_equal(same, in));
    /* In place: the input stays mapped while its replacement is written. */
    CHECK_INT_EQ(tool("requant", "-o", again, "--type", "f16", in, NULL), 0);
    CHECK_INT_EQ(tool("requant", "-o", again, "--type", "q8_0", again, NULL), 0);
    CHECK(files_equal(again, out));
    remove(in);
    remove(out);
    remove(again);
    remove(same);
}

/* Every metadata value type, a custom alignment, an odd file type, and
 * tensors of every fate: converted from f32, f16 (3-D) and q8_0; kept as
 * a vector, for rows that do not fit, for the same type, and for a type
 * the engine cannot convert (q8_1). */
static void case_requant_kv(void)
{
    static const uint8_t a_u8[2] = {0, 255};
    static const int8_t a_i8[2] = {-128, 127};
    static const uint16_t a_u16[2] = {1, 65535};
    static const int16_t a_i16[2] = {-32768, 5};
    static const uint32_t a_u32[3] = {1, 3, 5};
    static const int32_t a_i32[2] = {-2000000000, 7};
    static const uint64_t a_u64[2] = {1ull << 63, 9};
    static const int64_t a_i64[2] = {INT64_MIN, -1};
    static const float a_f32[3] = {0.5f, -2.25f, 1e-5f};
    static const double a_f64[2] = {0.1, -1e300};
    static const uint8_t a_bool[3] = {1, 0, 1};
    static const char *const a_str[4] = {"a", "", "\xe2\x96\x81the", "x\0y"};
    static const size_t a_len[4] = {1, 0, 6, 3};
    llm_gguf_writer *w;
    REQUIRE(llm_gguf_writer_new(&w) == 0);
    int rc = 0;
    rc |= llm_gguf_writer_set_str(w, "general.architecture", "test", 4);
    rc |= llm_gguf_writer_set_u8(w, "k.u8", 250);
    rc |= llm_gguf_writer_set_i8(w, "k.i8", -7);
    rc |= llm_gguf_writer_set_u16(w, "k.u16", 65535);
    rc |= llm_gguf_writer_set_i16(w, "k.i16", -32768);
    rc |= llm_gguf_writer_set_u32(w, "k.u32", 4000000000u);
    rc |= llm_gguf_writer_set_i32(w, "k.i32", -2000000000);
    rc |= llm_gguf_writer_set_u64(w, "k.u64", (1ull << 63) + 5);
    rc |= llm_gguf_writer_set_i64(w, "k.i64", INT64_MIN + 1);
    rc |= llm_gguf_writer_set_f32(w, "k.f32", 1e-5f);
    rc |= llm_gguf_writer_set_f64(w, "k.f64", 0.1);
    rc |= llm_gguf_writer_set_bool(w, "k.true", 1);
    rc |= llm_gguf_writer_set_bool(w, "k.false", 0);
    rc |= llm_gguf_writer_set_str(w, "k.str", "a\0b", 3);
    rc |= llm_gguf_writer_set_u32(w, "general.alignment", 64);
    rc |= llm_gguf_writer_set_u32(w, "general.file_type", 1234);
    rc |= llm_gguf_writer_set_arr(w, "a.u8", LLM_GGUF_U8, a_u8, 2);
    rc |= llm_gguf_writer_set_arr(w, "a.i8", LLM_GGUF_I8, a_i8, 2);
    rc |= llm_gguf_writer_set_arr(w, "a.u16", LLM_GGUF_U16, a_u16, 2);
    rc |= llm_gguf_writer_set_arr(w, "a.i16", LLM_GGUF_I16, a_i16, 2);
    rc |= llm_gguf_writer_set_arr(w, "a.u32", LLM_GGUF_U32, a_u32, 3);
    rc |= llm_gguf_writer_set_arr(w, "a.i32", LLM_GGUF_I32, a_i32, 2);
    rc |= llm_gguf_writer_set_arr(w, "a.u64", LLM_GGUF_U64, a_u64, 2);
    rc |= llm_gguf_writer_set_arr(w, "a.i64", LLM_GGUF_I64, a_i64, 2);
    rc |= llm_gguf_writer_set_arr(w, "a.f32", LLM_GGUF_F32, a_f32, 3);
    rc |= llm_gguf_writer_set_arr(w, "a.f64", LLM_GGUF_F64, a_f64, 2);
    rc |= llm_gguf_writer_set_arr(w, "a.bool", LLM_GGUF_BOOL, a_bool, 3);
    rc |= llm_gguf_writer_set_arr(w, "a.empty", LLM_GGUF_I32, NULL, 0);
    rc |= llm_gguf_writer_set_arr_str(w, "a.str", a_str, a_len, 4);
    rc |= llm_gguf_writer_set_arr_str(w, "a.nostr", NULL, NULL, 0);
    /* Tensor values: a ramp with a sign change, so every block has a
     * scale of its own. */
    static float x[64 * 4];
    for (int i = 0; i < 64 * 4; i++)
        x[i] = (float)((i * 37) % 101 - 50) / 16.0f;
    static unsigned char q8[2 * 34], q4[2 * 18], q81[2 * 36];
    llm_quantize_row(LLM_TYPE_Q8_0, x + 7, q8, 64);
    llm_quantize_row(LLM_TYPE_Q4_0, x + 3, q4, 64);
    for (size_t i = 0; i < sizeof q81; i++)
        q81[i] = (unsigned char)(i * 13 + 5);
    uint64_t ne_m[2] = {64, 3}, ne_3d[3] = {32, 2, 2}, ne_q[2] = {32, 2}, ne_v[1] = {64}, ne_mis[2] = {48, 2};
    rc |= llm_gguf_writer_add_tensor_f32(w, "m.f32", LLM_TYPE_F32, 2, ne_m, x);
    rc |= llm_gguf_writer_add_tensor_f32(w, "m.f16", LLM_TYPE_F16, 3, ne_3d, x + 1);
    rc |= llm_gguf_writer_add_tensor_raw(w, "m.q8_0", LLM_TYPE_Q8_0, 2, ne_q, q8, sizeof q8);
    rc |= llm_gguf_writer_add_tensor_f32(w, "v.f32", LLM_TYPE_F32, 1, ne_v, x + 2);
    rc |= llm_gguf_writer_add_tensor_f32(w, "m.misfit", LLM_TYPE_F32, 2, ne_mis, x + 4);
    rc |= llm_gguf_writer_add_tensor_raw(w, "m.same", LLM_TYPE_Q4_0, 2, ne_q, q4, sizeof q4);
    rc |= llm_gguf_writer_add_tensor_raw(w, "m.q8_1", 9, 2, ne_q, q81, sizeof q81);
    CHECK_INT_EQ(rc, 0);
    char in[512], out[512], err[256];
    tmp_path(in, sizeof in, "rq_kv_in.gguf");
    tmp_path(out, sizeof out, "rq_kv_out.gguf");
    REQUIRE(llm_gguf_writer_write(w, in, err, sizeof err) == 0);
    llm_gguf_writer_free(w);

    CHECK_INT_EQ(tool("requant", "-o", out, "--type", "q4_0", in, NULL), 0);
    CHECK_STR_EQ(g_res.err, "pm-modelwriter: note: 1 weight matrices kept in their type (rows not a multiple of 32)\n"
                            "pm-modelwriter: note: 1 weight matrices copied as they are (types the engine cannot "
                            "convert)\n");
    llm_gguf *a = open_ok(in), *b = open_ok(out);
    kv_all_same(a, b);
    CHECK_U64_EQ(llm_gguf_kv_count(b), 30);
    CHECK_INT_EQ(llm_gguf_alignment(b), 64);
    CHECK_U64_EQ(llm_gguf_data_offset(b) % 64, 0);
    for (uint64_t i = 0; i < llm_gguf_tensor_count(b); i++)
        CHECK_U64_EQ(((const unsigned char *)llm_gguf_tensor_at(b, i)->data -
                      (const unsigned char *)llm_gguf_tensor_at(b, 0)->data) % 64, 0);
    /* Values as written, read from the output alone. */
    uint64_t u;
    int64_t s;
    double d;
    const char *str;
    size_t len;
    CHECK_INT_EQ(meta_u32(b, "general.file_type"), 1234);
    CHECK_INT_EQ(llm_gguf_get_u64(b, "k.u64", &u), 0);
    CHECK_U64_EQ(u, (1ull << 63) + 5);
    CHECK_INT_EQ(llm_gguf_get_i64(b, "k.i64", &s), 0);
    CHECK(s == INT64_MIN + 1);
    CHECK_INT_EQ(llm_gguf_get_i64(b, "k.i8", &s), 0);
    CHECK_INT_EQ(s, -7);
    CHECK_INT_EQ(llm_gguf_get_f64(b, "k.f64", &d), 0);
    CHECK(d == 0.1);
    CHECK_INT_EQ(llm_gguf_get_str(b, "k.str", &str, &len), 0);
    CHECK(str_same(str, len, "a\0b", 3));
    CHECK_INT_EQ(llm_gguf_arr_str(b, "a.str", 3, &str, &len), 0);
    CHECK(str_same(str, len, "x\0y", 3));
    uint32_t et;
    uint64_t count;
    const void *data;
    CHECK_INT_EQ(llm_gguf_get_arr(b, "a.f64", &et, &count, &data), 0);
    CHECK_INT_EQ(et, LLM_GGUF_F64);
    CHECK_U64_EQ(count, 2);
    uint64_t bits, want_bits;
    double want = -1e300;
    memcpy(&want_bits, &want, 8);
    memcpy(&bits, (const unsigned char *)data + 8, 8); /* little-endian host */
    CHECK_U64_EQ(bits, want_bits);
    CHECK_INT_EQ(llm_gguf_get_arr(b, "a.nostr", &et, &count, &data), 0);
    CHECK_INT_EQ(et, LLM_GGUF_STRING);
    CHECK_U64_EQ(count, 0);
    /* m.f32, m.f16 and m.q8_0 converted; m.q8_1 kept raw. */
    CHECK_INT_EQ(check_requantized(a, b, LLM_TYPE_Q4_0), 3);
    CHECK_INT_EQ(llm_gguf_find_tensor(b, "m.q8_1")->type, 9);
    CHECK_INT_EQ(llm_gguf_find_tensor(b, "m.misfit")->type, LLM_TYPE_F32);
    llm_gguf_close(a);
    llm_gguf_close(b);
    remove(in);
    remove(out);
}

/* OUT holds "old contents" and no temporary file of it is left beside. */
static void check_untouched(const char *out)
{
    char buf[64] = {0};
    FILE *f = fopen(out, "rb");
    REQUIRE(f != NULL);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    CHECK(n == 12 && memcmp(buf, "old contents", 12) == 0);
    const char *slash = strrchr(out, '/');
    REQUIRE(slash != NULL);
    char dir[512], prefix[512];
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - out), out);
    snprintf(prefix, sizeof prefix, "%s.tmp.", slash + 1);
    DIR *dp = opendir(dir);
    REQUIRE(dp != NULL);
    for (struct dirent *e; (e = readdir(dp)) != NULL;)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
            fprintf(stderr, "left behind: %s\n", e->d_name);
            CHECK(0);
        }
    closedir(dp);
}

static void write_prefix(const char *from, const char *to, long len)
{
    FILE *f = fopen(from, "rb"), *g = fopen(to, "wb");
    REQUIRE(f && g);
    for (long i = 0; i < len; i++) {
        int c = fgetc(f);
        REQUIRE(c != EOF);
        fputc(c, g);
    }
    fclose(f);
    REQUIRE(fclose(g) == 0);
}

static void case_requant_errors(void)
{
    char in[512], out[512], bad[512];
    tmp_path(in, sizeof in, "rqe_in.gguf");
    tmp_path(out, sizeof out, "rqe_out.gguf");
    tmp_path(bad, sizeof bad, "rqe_bad.gguf");
    CHECK_INT_EQ(synth_small(in, "2", "f16", "64", NULL), 0);
    FILE *f = fopen(out, "wb");
    REQUIRE(f != NULL);
    fputs("old contents", f);
    fclose(f);

    static const char needs[] = "pm-modelwriter: requant needs -o OUT, --type T and an input file\n";
    CHECK_INT_EQ(tool("requant", "--type", "q8_0", in, NULL), 2);
    CHECK_STR_EQ(g_res.err, needs);
    CHECK_INT_EQ(tool("requant", "-o", out, in, NULL), 2);
    CHECK_STR_EQ(g_res.err, needs);
    CHECK_INT_EQ(tool("requant", "-o", out, "--type", "q8_0", NULL), 2);
    CHECK_STR_EQ(g_res.err, needs);
    CHECK_INT_EQ(tool("requant", "-o", out, "--type", "q9_0", in, NULL), 2);
    CHECK_STR_EQ(g_res.err, "pm-modelwriter: --type must be f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, "
                            "q3_K, q4_K, q5_K or q6_K (got 'q9_0')\n");
    CHECK_INT_EQ(tool("requant", "-o", out, in, "--type", NULL), 2);
    CHECK_STR_EQ(g_res.err, "pm-modelwriter: requant: --type needs a value\n");
    CHECK_INT_EQ(tool("requant", "-o", out, "--type", "q8_0", "--seed", "1", in, NULL), 2);
    CHECK_STR_EQ(g_res.err, "pm-modelwriter: requant: unknown option '--seed'\n");
    CHECK_INT_EQ(tool("requant", "-o", out, "--type", "q8_0", in, "b.gguf", NULL), 2);
    char want[1200];
    snprintf(want, sizeof want, "pm-modelwriter: requant takes one input file (got '%s' and 'b.gguf')\n", in);
    CHECK_STR_EQ(g_res.err, want);
    check_untouched(out);

    CHECK_INT_EQ(tool("requant", "-o", out, "--type", "q8_0", "/nonexistent-pm/in.gguf", NULL), 1);
    CHECK_STR_EQ(g_res.err, "pm-modelwriter: gguf: cannot open '/nonexistent-pm/in.gguf': No such file or directory\n");
    check_untouched(out);
    /* Cut 100 bytes into the data: the first tensor (token_embd, 64 x 700
     * f16 at offset 0) runs past the end. */
    llm_gguf *g = open_ok(in);
    long cut = (long)llm_gguf_data_offset(g) + 100;
    llm_gguf_close(g);
    write_prefix(in, bad, cut);
    CHECK_INT_EQ(tool("requant", "-o", out, "--type", "q8_0", bad, NULL), 1);
    CHECK_STR_EQ(g_res.err, "pm-modelwriter: gguf: tensor 'token_embd.weight' data runs past end of file\n");
    check_untouched(out);
    write_prefix(in, bad, 20);
    CHECK_INT_EQ(tool("requant", "-o", out, "--type", "q8_0", bad, NULL), 1);
    CHECK_STR_EQ(g_res.err, "pm-modelwriter: gguf: truncated header (20 bytes)\n");
    check_untouched(out);
    /* A damaged magic. */
    write_prefix(in, bad, 64);
    f = fopen(bad, "r+b");
    REQUIRE(f != NULL);
    fputc('X', f);
    fclose(f);
    CHECK_INT_EQ(tool("requant", "-o", out, "--type", "q8_0", bad, NULL), 1);
    CHECK_STR_EQ(g_res.err, "pm-modelwriter: gguf: bad magic (not a GGUF file)\n");
    check_untouched(out);
    /* An array of arrays (by hand: the writer makes none): one entry
     * "nest" = [[7]], no tensors. */
    bb b = {0};
    bb_u32(&b, LLM_GGUF_MAGIC);
    bb_u32(&b, 3);
    bb_u64(&b, 0);
    bb_u64(&b, 1);
    bb_str(&b, "nest");
    bb_u32(&b, LLM_GGUF_ARRAY);
    bb_u32(&b, LLM_GGUF_ARRAY);
    bb_u64(&b, 1);
    bb_u32(&b, LLM_GGUF_U32);
    bb_u64(&b, 1);
    bb_u32(&b, 7);
    REQUIRE(bb_save(&b, bad) == 0);
    bb_free(&b);
    llm_gguf_close(open_ok(bad)); /* the reader takes it */
    CHECK_INT_EQ(tool("requant", "-o", out, "--type", "q8_0", bad, NULL), 1);
    CHECK_STR_EQ(g_res.err, "pm-modelwriter: requant: metadata 'nest' is an array of arrays, which requant does not "
                            "copy\n");
    check_untouched(out);
    /* An output that cannot be created. */
    CHECK_INT_EQ(tool("requant", "-o", "/nonexistent-pm/x.gguf", "--type", "q8_0", in, NULL), 1);
    static const char create[] = "pm-modelwriter: gguf: cannot create '/nonexistent-pm/x.gguf.tmp.";
    CHECK(strncmp(g_res.err, create, sizeof create - 1) == 0);
    remove(in);
    remove(out);
    remove(bad);
}

/* ---- command line -------------------------------------------------------- */

static void case_usage(void)
{
    CHECK_INT_EQ(tool(NULL), 2);
    CHECK(strstr(g_res.err, "usage: pm-modelwriter") != NULL);
    CHECK_INT_EQ(tool("-h", NULL), 0);
    CHECK(strstr(g_res.out, "usage: pm-modelwriter") != NULL);
    CHECK_INT_EQ(tool("frobnicate", NULL), 2);
    CHECK(strstr(g_res.err, "pm-modelwriter: unknown command 'frobnicate'") != NULL);
    CHECK_INT_EQ(tool("synth", "-o", "/tmp/x.gguf", NULL), 2);
    CHECK(strstr(g_res.err, "pm-modelwriter: synth needs -o, --dim") != NULL);
    CHECK_INT_EQ(tool("synth", "--dim", "abc", NULL), 2);
    CHECK(strstr(g_res.err, "pm-modelwriter: --dim needs an integer in 2..1048576 (got 'abc')") != NULL);
    CHECK_INT_EQ(tool("synth", "--type", "q8_1", NULL), 2);
    CHECK(strstr(g_res.err, "pm-modelwriter: --type must be f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K or q6_K (got 'q8_1')") != NULL);
    CHECK_INT_EQ(tool("synth", "-o", "/tmp/x.gguf", "--dim", "60", "--layers", "1", "--heads", "8", "--kv-heads",
                      "1", "--ffn", "64", "--vocab", "300", "--ctx", "16", "--type", "f32", "--seed", "1", NULL),
                 2);
    CHECK(strstr(g_res.err, "--dim must be --heads times an even head size") != NULL);
    CHECK_INT_EQ(tool("convert-llama2c", "-o", "/tmp/x.gguf", NULL), 2);
    CHECK(strstr(g_res.err, "convert-llama2c needs -o, --model and --tokenizer") != NULL);
    CHECK_INT_EQ(tool("convert-llama2c", "-o", "/tmp/x.gguf", "--model", "/nonexistent-pm/m.bin", "--tokenizer",
                      "/nonexistent-pm/t.bin", NULL),
                 1);
    CHECK(strstr(g_res.err, "pm-modelwriter: llama2c: cannot open '/nonexistent-pm/m.bin'") != NULL);
    CHECK_INT_EQ(tool("synth", "-o", "/nonexistent-pm/x.gguf", "--dim", "64", "--layers", "1", "--heads", "2",
                      "--kv-heads", "1", "--ffn", "64", "--vocab", "300", "--ctx", "16", "--type", "f32", "--seed",
                      "1", NULL),
                 1);
    CHECK(strstr(g_res.err, "pm-modelwriter: gguf: cannot create '/nonexistent-pm/x.gguf.tmp.") != NULL);
}

static void case_info(void)
{
    char path[512];
    tmp_path(path, sizeof path, "info.gguf");
    CHECK_INT_EQ(synth_small(path, "5", "q4_0", "64", NULL), 0);
    CHECK_INT_EQ(tool("info", path, NULL), 0);
    CHECK(strstr(g_res.out, "kv llama.block_count u32 = 1\n") != NULL);
    CHECK(strstr(g_res.out, "kv tokenizer.ggml.tokens array = [string x 700]\n") != NULL);
    CHECK(strstr(g_res.out, "tensor token_embd.weight q4_0 [64, 700] 25200 bytes\n") != NULL);
    CHECK(strstr(g_res.out, "tensor blk.0.ffn_norm.weight f32 [64] 256 bytes\n") != NULL);
    /* A damaged file: one line naming the problem, exit 1. */
    FILE *f = fopen(path, "r+b");
    REQUIRE(f != NULL);
    fputc('X', f);
    fclose(f);
    CHECK_INT_EQ(tool("info", path, NULL), 1);
    CHECK_STR_EQ(g_res.err, "pm-modelwriter: gguf: bad magic (not a GGUF file)\n");
    remove(path);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"synth_f32", case_synth_f32},           {"synth_seed", case_synth_seed},
        {"synth_types", case_synth_types},       {"synth_mix", case_synth_mix},       {"synth_vocab", case_synth_vocab},
        {"synth_qwen", case_synth_qwen},
        {"convert_stories", case_convert_stories}, {"convert_synthetic", case_convert_synthetic},
        {"usage", case_usage},                   {"info", case_info},
        {"requant_block", case_requant_block},   {"requant_llama", case_requant_llama},
        {"requant_kv", case_requant_kv},         {"requant_errors", case_requant_errors},
    };
    REQUIRE(argc == 2);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(argv[1], cases[i].name) == 0) {
            cases[i].fn();
            return pm_check_result();
        }
    }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
