/* test_engine_errors — bad inputs fail with a status and one line.
 *
 * Model files: a valid synthetic GGUF cut at many lengths (inside the
 * header, the metadata, the tensor index, the tensor data); a GGUF missing
 * one tensor; a GGUF with inconsistent hyper-parameters; another
 * architecture; a llama2.c checkpoint written here, whole (opens) and cut
 * short; a missing file. Every failure must return a negative status,
 * leave *out NULL and write one non-empty line (no newline) into err.
 *
 * Sessions: a prompt that overflows the context, a token outside the
 * vocabulary, an empty prefill, decode on a full cache, a bad truncate;
 * each refused with its code and a message, changing nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phasemark/engine.h"
#include "pm_check.h"
#include "synth.h"

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    REQUIRE(fseek(f, 0, SEEK_END) == 0);
    long n = ftell(f);
    REQUIRE(n > 0 && fseek(f, 0, SEEK_SET) == 0);
    unsigned char *buf = malloc((size_t)n);
    REQUIRE(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void spit(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    REQUIRE(len == 0 || fwrite(buf, 1, len, f) == len);
    REQUIRE(fclose(f) == 0);
}

/* Opening must fail with one line; returns the status. */
static int open_fails(const char *path, const char *expect_substr)
{
    char err[512];
    memset(err, 'x', sizeof err);
    llm_model *m = (llm_model *)1;
    int rc = llm_model_open(path, NULL, &m, err, sizeof err);
    CHECK(rc < 0);
    CHECK(m == NULL);
    CHECK(memchr(err, '\0', sizeof err) != NULL);
    CHECK(strlen(err) > 0);
    CHECK(strchr(err, '\n') == NULL);
    if (expect_substr && !strstr(err, expect_substr))
        fprintf(stderr, "error line \"%s\" lacks \"%s\"\n", err, expect_substr);
    if (expect_substr)
        CHECK(strstr(err, expect_substr) != NULL);
    if (rc == 0)
        llm_model_free(m);
    return rc;
}

static void test_truncated_gguf(const char *dir)
{
    char good[512], cut[512];
    synth_spec sp = synth_default();
    snprintf(good, sizeof good, "%s/pm_err_good_%ld.gguf", dir, (long)getpid());
    snprintf(cut, sizeof cut, "%s/pm_err_cut_%ld.gguf", dir, (long)getpid());
    REQUIRE(synth_write(good, &sp) == 0);
    size_t len;
    unsigned char *buf = slurp(good, &len);
    size_t cuts[] = {0, 1, 3, 4, 7, 8, 16, 23, 24, 40, 100, 300, 1000, 2000,
                     len / 4, len / 2, len - 4096, len - 100, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        if (cuts[i] >= len)
            continue;
        spit(cut, buf, cuts[i]);
        open_fails(cut, NULL);
    }
    /* Corrupt magic: not GGUF, so it is read as a llama2.c checkpoint,
     * whose header then makes no sense. */
    memcpy(buf, "GGUX", 4);
    spit(cut, buf, len);
    open_fails(cut, NULL);
    free(buf);
    unlink(good);
    unlink(cut);
}

static void test_bad_models(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/pm_err_bad_%ld.gguf", dir, (long)getpid());

    synth_spec sp = synth_default();
    sp.omit = "blk.1.ffn_up.weight";
    REQUIRE(synth_write(path, &sp) == 0);
    CHECK_INT_EQ(open_fails(path, "blk.1.ffn_up.weight"), LLM_EFORMAT);

    sp = synth_default();
    sp.hp.n_kv_heads = 3; /* does not divide 4 heads */
    sp.hp.dim = 64;
    REQUIRE(synth_write(path, &sp) == 0);
    CHECK_INT_EQ(open_fails(path, "head_count_kv"), LLM_EFORMAT);

    sp = synth_default();
    sp.arch = "gpt2";
    REQUIRE(synth_write(path, &sp) == 0);
    CHECK_INT_EQ(open_fails(path, "architecture"), LLM_EUNSUP);

    CHECK_INT_EQ(open_fails("/nonexistent/model.gguf", "cannot open"), LLM_EIO);
    unlink(path);
}

/* A tiny legacy llama2.c checkpoint: header then every f32 array. */
static size_t l2c_floats(const int *h)
{
    size_t dim = (size_t)h[0], hid = (size_t)h[1], L = (size_t)h[2], heads = (size_t)h[3];
    size_t kv = dim * (size_t)h[4] / heads, V = (size_t)abs(h[5]), seq = (size_t)h[6];
    size_t n = V * dim + L * dim * 2 + L * (dim * dim * 2 + kv * dim * 2) + L * hid * dim * 3 + dim;
    n += seq * (dim / heads / 2) * 2;
    if (h[5] < 0)
        n += V * dim;
    return n;
}

static void test_llama2c(const char *dir)
{
    char path[512], cut[512];
    snprintf(path, sizeof path, "%s/pm_err_l2c_%ld.bin", dir, (long)getpid());
    snprintf(cut, sizeof cut, "%s/pm_err_l2c_cut_%ld.bin", dir, (long)getpid());
    int h[7] = {16, 32, 2, 2, 1, 24, 16};
    size_t nf = l2c_floats(h), len = sizeof h + nf * sizeof(float);
    unsigned char *buf = malloc(len);
    REQUIRE(buf);
    memcpy(buf, h, sizeof h);
    float *w = (float *)(void *)(buf + sizeof h);
    for (size_t i = 0; i < nf; i++)
        w[i] = (float)((int)(i * 2654435761u % 2001) - 1000) / 4000.0f;
    spit(path, buf, len);

    llm_model *m = NULL;
    char err[256] = "";
    CHECK_INT_EQ(llm_model_open(path, NULL, &m, err, sizeof err), 0);
    if (m) {
        llm_model_info info;
        llm_model_get_info(m, &info);
        CHECK_INT_EQ(info.dim, 16);
        CHECK_INT_EQ(info.n_layers, 2);
        CHECK_INT_EQ(info.n_kv_heads, 1);
        CHECK_INT_EQ(info.n_vocab, 24);
        CHECK_INT_EQ(info.has_tokenizer, 0);
        CHECK_STR_EQ(info.weight_type, "f32");
        llm_session *s = synth_session(m, 0, 0, 1);
        CHECK_INT_EQ(llm_session_n_ctx(s), 16);
        int32_t toks[4] = {1, 5, 9, 23};
        const float *lg;
        CHECK_INT_EQ(llm_prefill(s, toks, 4, 0, &lg), 0);
        /* Text functions need a tokenizer. */
        size_t n;
        CHECK_INT_EQ(llm_model_tokenize(m, "hi", 2, 1, NULL, 0, &n), LLM_ESTATE);
        llm_session_free(s);
        llm_model_free(m);
    }
    size_t cuts[] = {0, 27, 28, 100, len / 2, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        spit(cut, buf, cuts[i]);
        open_fails(cut, NULL);
    }
    spit(cut, buf, len);
    FILE *f = fopen(cut, "ab");
    REQUIRE(f && fputc(0, f) == 0 && fclose(f) == 0);
    open_fails(cut, NULL); /* trailing bytes: another export version */
    free(buf);
    unlink(path);
    unlink(cut);
}

static void test_sessions(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/pm_err_ses_%ld.gguf", dir, (long)getpid());
    synth_spec sp = synth_default();
    REQUIRE(synth_write(path, &sp) == 0);
    llm_model *m = synth_open(path, 1);
    llm_session *s = synth_session(m, 8, 4, 1);
    CHECK_INT_EQ(llm_session_n_ctx(s), 8);
    int32_t toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const float *lg = NULL;
    CHECK_INT_EQ(llm_prefill(s, toks, 9, 0, &lg), LLM_ECTX);
    CHECK(strstr(llm_session_error(s), "context") != NULL);
    CHECK_INT_EQ(llm_session_pos(s), 0);
    toks[2] = 160;
    CHECK_INT_EQ(llm_prefill(s, toks, 3, 0, &lg), LLM_ETOKEN);
    toks[2] = -1;
    CHECK_INT_EQ(llm_prefill(s, toks, 3, 0, &lg), LLM_ETOKEN);
    CHECK_INT_EQ(llm_session_pos(s), 0);
    toks[2] = 3;
    CHECK_INT_EQ(llm_prefill(s, toks, 0, 0, &lg), LLM_EINVAL);
    CHECK_INT_EQ(llm_prefill(s, toks, 8, 0, &lg), 0); /* two chunks of 4 */
    CHECK_INT_EQ(llm_session_pos(s), 8);
    CHECK_INT_EQ(llm_decode(s, 1, &lg), LLM_ECTX);
    CHECK_INT_EQ(llm_session_truncate(s, 9), LLM_EINVAL);
    CHECK_INT_EQ(llm_session_truncate(s, 7), 0);
    CHECK_INT_EQ(llm_decode(s, 1, &lg), 0);
    llm_timings t;
    llm_session_get_timings(s, &t);
    CHECK_U64_EQ(t.prefill_tokens, 8);
    CHECK_U64_EQ(t.decode_tokens, 1);
    llm_session_reset(s);
    CHECK_INT_EQ(llm_session_pos(s), 0);
    llm_session_get_timings(s, &t);
    CHECK_U64_EQ(t.prefill_tokens, 0);
    CHECK_STR_EQ(llm_session_error(s), "");
    llm_session_free(s);

    llm_session_options bad = LLM_SESSION_OPTIONS_INIT;
    bad.version = 99;
    char err[128] = "";
    llm_session *none = (llm_session *)1;
    CHECK_INT_EQ(llm_session_create(m, &bad, &none, err, sizeof err), LLM_EINVAL);
    CHECK(none == NULL && strlen(err) > 0);
    llm_session_free(NULL);
    llm_model_free(m);
    llm_model_free(NULL);
    unlink(path);

    /* Every status has a distinct name. */
    for (int a = 0; a >= LLM_ERANGE; a--)
        for (int b = a - 1; b >= LLM_ERANGE; b--)
            CHECK(strcmp(llm_strerror(a), llm_strerror(b)) != 0);
    CHECK_STR_EQ(llm_strerror(-99), "unknown status");
}

int main(void)
{
    const char *dir = getenv("TMPDIR");
    dir = dir && *dir ? dir : "/tmp";
    test_truncated_gguf(dir);
    test_bad_models(dir);
    test_llama2c(dir);
    test_sessions(dir);
    return pm_check_result();
}
