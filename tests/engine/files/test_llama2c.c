/* test_llama2c.c — the llama2.c checkpoint reader on the real stories260K
 * checkpoint (header values from ../shared/models/README.md; skipped when
 * the file is absent), on a synthetic checkpoint written here whose every
 * float encodes its own position, and on malformed headers and lengths.
 *
 * Usage: test_llama2c CASE
 */
#include <stdint.h>

#include "bytes.h"
#include "llama2c.h"
#include "pm_check.h"

#ifndef PM_SHARED_DIR
#define PM_SHARED_DIR "../shared"
#endif

/* Reads the f32 at byte offset `off` of a file, independently of the
 * reader. */
static float file_f32(const char *path, long off)
{
    FILE *f = fopen(path, "rb");
    REQUIRE(f != NULL);
    unsigned char b[4];
    REQUIRE(fseek(f, off, SEEK_SET) == 0 && fread(b, 1, 4, f) == 4);
    fclose(f);
    uint32_t u = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
    float v;
    memcpy(&v, &u, 4);
    return v;
}

static void case_stories260k(void)
{
    const char *path = PM_SHARED_DIR "/models/stories260K.bin";
    FILE *probe = fopen(path, "rb");
    if (!probe)
        PM_SKIP("../shared/models/stories260K.bin is not present");
    fclose(probe);
    llm_llama2c *m;
    char err[256];
    int rc = llm_llama2c_open(path, &m, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    REQUIRE(rc == 0);
    const llm_llama2c_config *c = llm_llama2c_get_config(m);
    CHECK_INT_EQ(c->dim, 64);
    CHECK_INT_EQ(c->hidden_dim, 172);
    CHECK_INT_EQ(c->n_layers, 5);
    CHECK_INT_EQ(c->n_heads, 8);
    CHECK_INT_EQ(c->n_kv_heads, 4);
    CHECK_INT_EQ(c->vocab_size, 512);
    CHECK_INT_EQ(c->seq_len, 512);
    CHECK_INT_EQ(c->shared_classifier, 1);
    CHECK_U64_EQ(llm_llama2c_tensor_count(m), 2 + 5 * 9);
    CHECK(llm_llama2c_find_tensor(m, "output.weight") == NULL);
    const llm_gguf_tensor *e = llm_llama2c_find_tensor(m, "token_embd.weight");
    REQUIRE(e != NULL);
    CHECK_U64_EQ(e->ne[0], 64);
    CHECK_U64_EQ(e->ne[1], 512);
    CHECK_U64_EQ(e->nbytes, 64 * 512 * 4);
    CHECK_NEAR(((const float *)e->data)[0], file_f32(path, 28), 0);
    /* Offsets in run.c order: embedding 512*64, rms_att 5*64, wq 5*64*64,
     * wk 5*32*64, wv 5*32*64, wo 5*64*64, rms_ffn 5*64, w1/w2/w3 5*172*64
     * each, then rms_final. */
    long floats = 512 * 64 + 5 * 64 + 5 * 64 * 64 + 2 * 5 * 32 * 64 + 5 * 64 * 64 + 5 * 64;
    const llm_gguf_tensor *k2 = llm_llama2c_find_tensor(m, "blk.2.attn_k.weight");
    REQUIRE(k2 != NULL);
    CHECK_U64_EQ(k2->ne[0], 64);
    CHECK_U64_EQ(k2->ne[1], 32);
    long k2_at = 512 * 64 + 5 * 64 + 5 * 64 * 64 + 2 * 32 * 64;
    CHECK_NEAR(((const float *)k2->data)[5], file_f32(path, 28 + 4 * (k2_at + 5)), 0);
    const llm_gguf_tensor *down4 = llm_llama2c_find_tensor(m, "blk.4.ffn_down.weight");
    REQUIRE(down4 != NULL);
    CHECK_U64_EQ(down4->ne[0], 172);
    CHECK_U64_EQ(down4->ne[1], 64);
    long down4_at = floats + 5 * 172 * 64 + 4 * 172 * 64;
    CHECK_NEAR(((const float *)down4->data)[171], file_f32(path, 28 + 4 * (down4_at + 171)), 0);
    const llm_gguf_tensor *on = llm_llama2c_find_tensor(m, "output_norm.weight");
    REQUIRE(on != NULL);
    CHECK_INT_EQ(on->n_dims, 1);
    long on_at = floats + 3 * 5 * 172 * 64;
    CHECK_NEAR(((const float *)on->data)[63], file_f32(path, 28 + 4 * (on_at + 63)), 0);
    llm_llama2c_close(m);
}

/* A tiny checkpoint: dim 8, hidden 12, 2 layers, 4 heads, 2 kv heads
 * (kv_dim 4), vocab 10 (unshared: the header says -10), seq_len 3, so head
 * size 2 and the freq_cis arrays are 3 x 1 each. Every float is
 * 1000 * (array number) + (index within the array). */
static void synth_ckpt(bb *b, int32_t vocab_field)
{
    int32_t h[7] = {8, 12, 2, 4, 2, vocab_field, 3};
    for (int i = 0; i < 7; i++)
        bb_u32(b, (uint32_t)h[i]);
    /* Array lengths in run.c order, freq_cis included, wcls when unshared. */
    uint32_t lens[14] = {10 * 8, 2 * 8, 2 * 8 * 8, 2 * 4 * 8, 2 * 4 * 8, 2 * 8 * 8, 2 * 8,
                         2 * 12 * 8, 2 * 8 * 12, 2 * 12 * 8, 8, 3, 3, 10 * 8};
    int arrays = vocab_field < 0 ? 14 : 13;
    for (int a = 0; a < arrays; a++)
        for (uint32_t i = 0; i < lens[a]; i++)
            bb_f32(b, (float)(1000 * a + (int)i));
}

static llm_llama2c *open_bytes(const bb *b, char *err, size_t errlen, int *rc)
{
    char path[512];
    tmp_path(path, sizeof path, "ckpt");
    REQUIRE(bb_save(b, path) == 0);
    llm_llama2c *m = (llm_llama2c *)1;
    *rc = llm_llama2c_open(path, &m, err, errlen);
    remove(path);
    if (*rc)
        CHECK(m == NULL);
    return *rc ? NULL : m;
}

static void expect_tensor(const llm_llama2c *m, const char *name, uint64_t ne0, uint64_t ne1, int array, int offset)
{
    const llm_gguf_tensor *t = llm_llama2c_find_tensor(m, name);
    if (!t) {
        fprintf(stderr, "missing %s\n", name);
        CHECK(t != NULL);
        return;
    }
    CHECK_U64_EQ(t->ne[0], ne0);
    CHECK_U64_EQ(t->ne[1], ne1);
    CHECK_INT_EQ(t->n_dims, ne1 == 1 ? 1 : 2);
    CHECK_INT_EQ(t->type, 0);
    const float *f = t->data;
    CHECK_NEAR(f[0], 1000 * array + offset, 0);
    CHECK_NEAR(f[ne0 * ne1 - 1], 1000 * array + offset + (int)(ne0 * ne1) - 1, 0);
}

static void case_synthetic(void)
{
    bb b = {0};
    char err[256];
    int rc;
    synth_ckpt(&b, -10);
    llm_llama2c *m = open_bytes(&b, err, sizeof err, &rc);
    if (!m)
        fprintf(stderr, "%s\n", err);
    REQUIRE(m != NULL);
    const llm_llama2c_config *c = llm_llama2c_get_config(m);
    CHECK_INT_EQ(c->vocab_size, 10);
    CHECK_INT_EQ(c->shared_classifier, 0);
    CHECK_NEAR(c->rope_theta, 10000, 0);
    CHECK_NEAR(c->rms_eps, 1e-5f, 0);
    CHECK_U64_EQ(llm_llama2c_tensor_count(m), 2 + 2 * 9 + 1);
    expect_tensor(m, "token_embd.weight", 8, 10, 0, 0);
    expect_tensor(m, "blk.1.attn_norm.weight", 8, 1, 1, 8);
    expect_tensor(m, "blk.0.attn_q.weight", 8, 8, 2, 0);
    expect_tensor(m, "blk.1.attn_k.weight", 8, 4, 3, 32);
    expect_tensor(m, "blk.1.attn_v.weight", 8, 4, 4, 32);
    expect_tensor(m, "blk.1.attn_output.weight", 8, 8, 5, 64);
    expect_tensor(m, "blk.0.ffn_norm.weight", 8, 1, 6, 0);
    expect_tensor(m, "blk.1.ffn_gate.weight", 8, 12, 7, 96);
    expect_tensor(m, "blk.1.ffn_down.weight", 12, 8, 8, 96);
    expect_tensor(m, "blk.0.ffn_up.weight", 8, 12, 9, 0);
    expect_tensor(m, "output_norm.weight", 8, 1, 10, 0);
    expect_tensor(m, "output.weight", 8, 10, 13, 0); /* after the two freq_cis arrays */
    CHECK_STR_EQ(llm_llama2c_tensor_at(m, 0)->name, "token_embd.weight");
    CHECK_STR_EQ(llm_llama2c_tensor_at(m, 1)->name, "blk.0.attn_norm.weight");
    CHECK_STR_EQ(llm_llama2c_tensor_at(m, 10)->name, "blk.1.attn_norm.weight");
    CHECK(llm_llama2c_tensor_at(m, 21) == NULL);
    llm_llama2c_close(m);
    bb_free(&b);

    /* Shared classifier: no output.weight; the same bytes plus wcls would
     * be trailing garbage. */
    synth_ckpt(&b, 10);
    m = open_bytes(&b, err, sizeof err, &rc);
    REQUIRE(m != NULL);
    CHECK(llm_llama2c_find_tensor(m, "output.weight") == NULL);
    CHECK_U64_EQ(llm_llama2c_tensor_count(m), 20);
    llm_llama2c_close(m);
    llm_llama2c_close(NULL);
    bb_free(&b);
}

static void expect_fail(const bb *b, const char *want)
{
    char err[256];
    int rc;
    CHECK(open_bytes(b, err, sizeof err, &rc) == NULL);
    CHECK_INT_EQ(rc, LLM_EFORMAT);
    CHECK_STR_EQ(err, want);
}

static void header(bb *b, int32_t dim, int32_t hid, int32_t layers, int32_t heads, int32_t kv, int32_t vocab,
                   int32_t seq)
{
    int32_t h[7] = {dim, hid, layers, heads, kv, vocab, seq};
    for (int i = 0; i < 7; i++)
        bb_u32(b, (uint32_t)h[i]);
}

static void case_malformed(void)
{
    bb b = {0};
    /* The synthetic model is 28 + 4 * 1166 bytes (wcls included). */
    synth_ckpt(&b, -10);
    size_t full = b.n;
    CHECK_INT_EQ(full, 28 + 4 * 1166);
    b.n = full - 4;
    expect_fail(&b, "llama2c: truncated: header implies 4692 bytes, file has 4688");
    b.n = full;
    bb_u32(&b, 0);
    expect_fail(&b, "llama2c: 4 trailing bytes after 4692 (not a legacy llama2.c checkpoint?)");
    bb_free(&b);
    header(&b, 0, 12, 2, 4, 2, 10, 3);
    expect_fail(&b, "llama2c: header dim = 0 is out of range (1..65536)");
    bb_free(&b);
    header(&b, 8, 12, 2, 4, 2, INT32_MIN, 3);
    expect_fail(&b, "llama2c: header vocab_size = -2147483648 is out of range (1..4194304)");
    bb_free(&b);
    header(&b, 10, 12, 2, 4, 2, 10, 3);
    expect_fail(&b, "llama2c: dim 10 is not n_heads 4 times an even head size");
    bb_free(&b);
    header(&b, 16, 12, 2, 4, 3, 10, 3);
    expect_fail(&b, "llama2c: n_kv_heads 3 does not divide n_heads 4");
    bb_free(&b);
    header(&b, 8, 12, 2, 4, 2, 10, 3);
    b.n = 12;
    expect_fail(&b, "llama2c: truncated header (12 bytes, need 28)");
    bb_free(&b);
    char err[256];
    llm_llama2c *m = (llm_llama2c *)1;
    CHECK_INT_EQ(llm_llama2c_open("/nonexistent-pm/x.bin", &m, err, sizeof err), LLM_EIO);
    CHECK(m == NULL);
    CHECK_STR_EQ(err, "llama2c: cannot open '/nonexistent-pm/x.bin': No such file or directory");
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {{"stories260k", case_stories260k}, {"synthetic", case_synthetic}, {"malformed", case_malformed}};
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
