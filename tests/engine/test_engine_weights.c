/* test_engine_weights — the CPU backend's huge-page copy of float matrices
 * (cpu/cpu_weights.h, PHASEMARK_ENGINE_WEIGHTS), one case per invocation:
 *
 *   test_engine_weights copied     which matrices are copied, by exact byte
 *                                  and matrix counts: F16, BF16 and F32 ones
 *                                  (layers and head, not the embedding);
 *                                  none for "map", for no_mmap; a
 *                                  replaced backend leaves every tensor on
 *                                  the mapping; Q8_0 ones into panels
 *                                  under the avx512 kernels (no_mmap too),
 *                                  a padded last panel's bytes counted
 *   test_engine_weights same       logits of the copied model equal the
 *                                  mapped model's bit for bit (F16, BF16,
 *                                  F32, Q8_0 panels; prefill, decode and a
 *                                  verify)
 *   test_engine_weights no_memory  under an address-space limit that leaves
 *                                  no room for the copy, the model still
 *                                  opens, copies nothing and gives the
 *                                  mapped logits (skipped under ASan, whose
 *                                  shadow memory an AS limit breaks)
 *   test_engine_weights bad_env    an unknown PHASEMARK_ENGINE_WEIGHTS fails
 *                                  the open with one line naming it
 *   test_engine_weights head T H   a block head's matrices copied, the
 *                                  target's panels read (case_head)
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "block_head.h"
#include "model.h"
#include "phasemark/engine.h"
#include "pm_check.h"
#include "synth.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define MAX_VOCAB 8192

static const int32_t toks[6] = {3, 1, 4, 1, 5, 9};
static const int32_t draft[3] = {7, 2, 8};

/* big: 1 for the big shape (case_no_memory); above 1, the vocabulary. */
static void write_model(const char *path, const char *type, int big)
{
    synth_spec sp = synth_default();
    sp.type = sp.embd_type = synth_type(type);
    if (big > 1)
        sp.hp.vocab = big;
    if (big == 1) {
        sp.hp.dim = 512;
        sp.hp.n_layers = 4;
        sp.hp.n_heads = 8;
        sp.hp.n_kv_heads = 8;
        sp.hp.ffn = 1536;
        sp.hp.vocab = MAX_VOCAB;
    }
    REQUIRE(synth_write(path, &sp) == 0);
}

/* Opens path with the weights mode (NULL: the default) and no_mmap. */
static llm_model *open_mode(const char *path, const char *mode, int no_mmap, int threads)
{
    if (mode)
        setenv("PHASEMARK_ENGINE_WEIGHTS", mode, 1);
    else
        unsetenv("PHASEMARK_ENGINE_WEIGHTS");
    llm_model_options o = LLM_MODEL_OPTIONS_INIT;
    o.n_threads = threads;
    o.no_mmap = no_mmap;
    llm_model *m = NULL;
    char err[256];
    int rc = llm_model_open(path, &o, &m, err, sizeof err);
    unsetenv("PHASEMARK_ENGINE_WEIGHTS");
    if (rc)
        fprintf(stderr, "open: %s\n", err);
    REQUIRE(rc == 0);
    return m;
}

static size_t copied(const llm_model *m, int32_t *n)
{
    return llm_cpu_backend_weights_copied(m->be, n);
}

/* Prefill logits, a decode's and a 3-row verify's, in out (5 rows). */
static void logits_of(llm_model *m, float *out)
{
    llm_model_info in;
    llm_model_get_info(m, &in);
    REQUIRE(in.n_vocab <= MAX_VOCAB);
    size_t nv = (size_t)in.n_vocab;
    llm_session *s = synth_session(m, 32, 8, 1);
    REQUIRE(s != NULL);
    const float *lg = NULL;
    REQUIRE(llm_prefill(s, toks, 6, 0, &lg) == 0);
    memcpy(out, lg, nv * sizeof *out);
    REQUIRE(llm_decode(s, 42 % in.n_vocab, &lg) == 0);
    memcpy(out + nv, lg, nv * sizeof *out);
    REQUIRE(llm_verify(s, draft, 3, &lg) == 0);
    memcpy(out + 2 * nv, lg, 3 * nv * sizeof *out);
    llm_session_free(s);
}

/* synth_default's shape: dim 64, 2 layers, 4 heads over 2 kv heads (head
 * 16, kv width 32), ffn 96, vocab 160. Elements per layer: wq 64*64, wk and
 * wv 32*64, wo 64*64, gate/up/down 96*64 each = 30720; the head 160*64 =
 * 10240; the embedding (not copied) another 10240. */
#define SMALL_ELEMS (2 * 30720 + 10240)
#define SMALL_MATRICES (2 * 7 + 1)

static int case_copied(void)
{
    char path[512];
    static const struct { const char *type; size_t elem; } floats[] = {
        {"f16", 2}, {"bf16", 2}, {"f32", 4}};
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
        synth_path(path, sizeof path, "weights");
        write_model(path, floats[i].type, 0);
        int32_t n = -1;
        llm_model *m = open_mode(path, NULL, 0, 1);
        CHECK_U64_EQ(copied(m, &n), (uint64_t)SMALL_ELEMS * floats[i].elem);
        CHECK_INT_EQ(n, SMALL_MATRICES);
        CHECK(m->layers[1].w_down.dev != NULL);
        CHECK(m->output.dev != NULL);
        CHECK(m->tok_embd.dev == NULL);
        /* The backend swapped out from under the model (what the lock
         * test does for the scalar kernels): every tensor is back on the
         * mapping, never on the freed arena. */
        llm_backend *be;
        char err[256];
        REQUIRE(llm_cpu_backend_create(1, 0, &be, err, sizeof err) == 0);
        m->be->ops->destroy(m->be);
        m->be = be;
        CHECK(m->layers[0].wq.dev == NULL);
        CHECK(m->layers[1].w_down.dev == NULL);
        CHECK(m->output.dev == NULL);
        CHECK_U64_EQ(copied(m, &n), 0);
        llm_model_free(m);

        m = open_mode(path, "copy", 0, 2);
        CHECK_U64_EQ(copied(m, &n), (uint64_t)SMALL_ELEMS * floats[i].elem);
        llm_model_free(m);
        m = open_mode(path, "map", 0, 1);
        CHECK_U64_EQ(copied(m, &n), 0);
        CHECK_INT_EQ(n, 0);
        CHECK(m->output.dev == NULL);
        llm_model_free(m);
        m = open_mode(path, "copy", 1, 1); /* no_mmap: already its own memory */
        CHECK_U64_EQ(copied(m, &n), 0);
        llm_model_free(m);
        unlink(path);
    }
    /* Q8_0: into panels where the kernel set reads them (avx512), with a
     * head of 170 rows, so its last panel is padded to 176; on the
     * mapping otherwise. Panels are made under no_mmap too, not under
     * "map". Panel bytes are the rows' (16 * 34 * blocks a panel). */
    synth_path(path, sizeof path, "weights");
    write_model(path, "q8_0", 170);
    const size_t q8_bytes = (size_t)(2 * 30720 + 176 * 64) / 32 * 34;
    for (int no_mmap = 0; no_mmap < 2; no_mmap++) {
        int32_t n = -1;
        llm_model *m = open_mode(path, NULL, no_mmap, 1);
        int panels = strcmp(llm_cpu_backend_kernels(m->be), "avx512") == 0;
        CHECK_U64_EQ(copied(m, &n), panels ? q8_bytes : 0);
        CHECK_INT_EQ(n, panels ? SMALL_MATRICES : 0);
        CHECK((m->output.dev != NULL) == panels);
        CHECK(m->tok_embd.dev == NULL);
        llm_model_free(m);
    }
    int32_t n = -1;
    llm_model *m = open_mode(path, "map", 0, 1);
    CHECK_U64_EQ(copied(m, &n), 0);
    CHECK_INT_EQ(n, 0);
    llm_model_free(m);
    unlink(path);
    return pm_check_result();
}

static int case_same(void)
{
    static float a[5 * MAX_VOCAB], b[5 * MAX_VOCAB];
    /* Q8_0 with a 170-row head: its panels' padding rows must not show. */
    static const struct { const char *type; int vocab; } types[] = {
        {"f16", 0}, {"bf16", 0}, {"f32", 0}, {"q8_0", 170}};
    char path[512];
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        size_t nv = types[i].vocab ? (size_t)types[i].vocab : 160;
        synth_path(path, sizeof path, "weights");
        write_model(path, types[i].type, types[i].vocab);
        memset(a, 0, sizeof a);
        memset(b, 0xff, sizeof b);
        llm_model *m = open_mode(path, "map", 0, 2);
        REQUIRE(copied(m, NULL) == 0);
        logits_of(m, a);
        llm_model_free(m);
        m = open_mode(path, "copy", 0, 2);
        if (strcmp(types[i].type, "q8_0") != 0 || strcmp(llm_cpu_backend_kernels(m->be), "avx512") == 0)
            REQUIRE(copied(m, NULL) > 0);
        logits_of(m, b);
        llm_model_free(m);
        if (memcmp(a, b, 5 * nv * sizeof *a) != 0)
            fprintf(stderr, "%s: copied logits differ from mapped\n", types[i].type);
        CHECK(memcmp(a, b, 5 * nv * sizeof *a) == 0);
        unlink(path);
    }
    return pm_check_result();
}

/* A tensor's dev that is not this backend's copy (a CUDA target's weight
 * records, which a CPU block head reads through the shared output head
 * and embedding) is never read as bytes: with every dev pointing at NaN
 * bytes the logits are the mapped ones, and a backend freed after
 * another took a tensor leaves that tensor's dev alone. */
static int case_foreign(void)
{
    static float a[5 * MAX_VOCAB], b[5 * MAX_VOCAB];
    static unsigned char nan_bytes[1 << 16];
    memset(nan_bytes, 0xff, sizeof nan_bytes); /* F16, BF16 and F32 NaN */
    char path[512];
    synth_path(path, sizeof path, "weights");
    write_model(path, "f16", 0);
    for (int copy = 0; copy < 2; copy++) {
        memset(a, 0, sizeof a);
        memset(b, 0x7f, sizeof b);
        llm_model *m = open_mode(path, copy ? "copy" : "map", 0, 2);
        logits_of(m, a);
        /* The embedding and, on the mapped model, every matrix get a
         * foreign dev; the copied model keeps its own on the matrices. */
        m->tok_embd.dev = nan_bytes;
        for (int32_t l = 0; !copy && l < m->hp.n_layers; l++) {
            llm_layer *L = &m->layers[l];
            llm_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
            for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
                ts[i]->dev = nan_bytes;
        }
        if (!copy)
            m->output.dev = nan_bytes;
        logits_of(m, b);
        CHECK(memcmp(a, b, 5 * 160 * sizeof *a) == 0);
        if (copy) {
            /* Another backend takes the head; freeing this one keeps it. */
            m->output.dev = nan_bytes;
            llm_backend *be;
            char err[256];
            REQUIRE(llm_cpu_backend_create(1, 0, &be, err, sizeof err) == 0);
            m->be->ops->destroy(m->be);
            m->be = be;
            CHECK(m->output.dev == (void *)nan_bytes);
            CHECK(m->layers[1].w_down.dev == NULL);
        }
        /* Undo what the test set: the model's free must not see it. */
        m->tok_embd.dev = NULL;
        m->output.dev = NULL;
        for (int32_t l = 0; l < m->hp.n_layers; l++) {
            llm_layer *L = &m->layers[l];
            llm_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
            for (size_t i = 0; !copy && i < sizeof ts / sizeof ts[0]; i++)
                ts[i]->dev = NULL;
        }
        llm_model_free(m);
    }
    unlink(path);
    return pm_check_result();
}

/* This process's address space in bytes (VmSize), or 0. */
static size_t vm_size(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %zu kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

/* The big shape: dim 512, 4 layers, ffn 1536, vocab 8192, F32. Copied:
 * 4 * (4 * 512*512 + 3 * 1536*512) + 8192*512 elements, 68 MiB. */
#define BIG_COPY ((size_t)(4 * (4 * 512 * 512 + 3 * 1536 * 512) + 8192 * 512) * 4)

static int case_no_memory(void)
{
    if (UNDER_ASAN)
        PM_SKIP("an address-space limit breaks ASan's shadow memory");
    char path[512];
    synth_path(path, sizeof path, "weights_big");
    write_model(path, "f32", 1);
    struct stat st;
    REQUIRE(stat(path, &st) == 0);
    /* Without a limit the copy is made, of exactly this size. */
    llm_model *m = open_mode(path, "copy", 0, 1);
    CHECK_U64_EQ(copied(m, NULL), BIG_COPY);
    llm_model_free(m);

    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        static float a[5 * MAX_VOCAB], b[5 * MAX_VOCAB];
        m = open_mode(path, "map", 0, 1); /* also warms the allocator */
        logits_of(m, a);
        llm_model_free(m);
        /* Room for the mapping and the model's own allocations, not for
         * the 68 MiB arena. */
        size_t vm = vm_size();
        if (vm == 0)
            _exit(77);
        struct rlimit rl = {vm + (size_t)st.st_size + ((size_t)40 << 20),
                            vm + (size_t)st.st_size + ((size_t)40 << 20)};
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(3);
        m = open_mode(path, "copy", 0, 1);
        int32_t n = -1;
        int ok = copied(m, &n) == 0 && n == 0 && m->output.dev == NULL;
        memset(b, 0xff, sizeof b);
        logits_of(m, b);
        llm_model_free(m);
        if (!ok)
            _exit(4);
        _exit(memcmp(a, b, 5 * MAX_VOCAB * sizeof *a) == 0 ? 0 : 5);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    unlink(path);
    REQUIRE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77)
        PM_SKIP("no /proc/self/status");
    if (WEXITSTATUS(status) != 0)
        fprintf(stderr, "child exit %d (3 setrlimit, 4 a copy was made, 5 logits differ)\n",
                WEXITSTATUS(status));
    CHECK_INT_EQ(WEXITSTATUS(status), 0);
    return pm_check_result();
}

static int case_bad_env(void)
{
    char path[512];
    synth_path(path, sizeof path, "weights");
    write_model(path, "f16", 0);
    setenv("PHASEMARK_ENGINE_WEIGHTS", "huge", 1);
    llm_model_options o = LLM_MODEL_OPTIONS_INIT;
    o.n_threads = 1;
    llm_model *m = (llm_model *)&o; /* must come back NULL */
    char err[256] = {0};
    int rc = llm_model_open(path, &o, &m, err, sizeof err);
    unsetenv("PHASEMARK_ENGINE_WEIGHTS");
    CHECK_INT_EQ(rc, LLM_EINVAL);
    CHECK(m == NULL);
    CHECK_STR_EQ(err, "cpu backend: PHASEMARK_ENGINE_WEIGHTS='huge' is none of auto, map, copy");
    unlink(path);
    return pm_check_result();
}

/* A block head's matrices (llm_cpu_backend_copy_tensors) and the
 * target's output head it reads where the target's backend keeps it
 * (llm_cpu_backend_read_weights): the head's logits under "copy" equal
 * those under "map" bit for bit, with the head's F16 matrices copied (by
 * exact byte count: 2 layers of 512-wide q, o and 256-wide k, v, 1024-wide
 * gate, up, down, and the 1536 x 512 feature projection) and the target's
 * Q8_0 head read from its panels; a backend of another kernel set is not
 * let read them. */
static int case_head(const char *target, const char *head)
{
    struct stat st;
    if (stat(target, &st) != 0 || stat(head, &st) != 0)
        PM_SKIP("the shipped KJV target or block head is absent");
    enum { ROWS = 5, CTX = 6, FEAT = 3 * 512 };
    static float feat[CTX * FEAT], got[2][ROWS * 4096];
    static const int32_t plane_of[3] = {0, 1, 2};
    for (int i = 0; i < CTX * FEAT; i++)
        feat[i] = (float)((i * 7919) % 201 - 100) / 50.0f;
    const size_t head_bytes = (size_t)2 * 2 * (2 * 512 * 512 + 2 * 256 * 512 + 3 * 1024 * 512) +
                              (size_t)2 * 1536 * 512;
    for (int copy = 0; copy < 2; copy++) {
        llm_model *m = open_mode(target, copy ? "copy" : "map", 0, 2);
        setenv("PHASEMARK_ENGINE_WEIGHTS", copy ? "copy" : "map", 1);
        pm_block *b = NULL;
        char err[256];
        int rc = pm__block_open(head, m, 64, 2, &b, err, sizeof err);
        unsetenv("PHASEMARK_ENGINE_WEIGHTS");
        if (rc)
            fprintf(stderr, "head: %s\n", err);
        REQUIRE(rc == 0);
        CHECK_U64_EQ(copied(m, NULL) > 0, copy && strcmp(llm_cpu_backend_kernels(m->be), "avx512") == 0);
        CHECK_U64_EQ(llm_cpu_backend_weights_copied(pm__block_backend(b), NULL), copy ? head_bytes : 0);
        REQUIRE(pm__block_append(b, feat, plane_of, CTX, CTX) == 0);
        const float *lg;
        REQUIRE(pm__block_forward(b, 17, ROWS, &lg) == 0);
        memcpy(got[copy], lg, sizeof got[copy]);
        CHECK_INT_EQ(llm_cpu_backend_read_weights(pm__block_backend(b), m->be), 1);
        llm_backend *other;
        REQUIRE(llm_cpu_backend_create(1, 0, &other, err, sizeof err) == 0); /* scalar */
        CHECK_INT_EQ(llm_cpu_backend_read_weights(other, m->be),
                     strcmp(llm_cpu_backend_kernels(m->be), "scalar") == 0);
        other->ops->destroy(other);
        pm__block_free(b);
        llm_model_free(m);
    }
    CHECK(memcmp(got[0], got[1], sizeof got[0]) == 0);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    if (strcmp(argv[1], "head") == 0 && argc == 4)
        return case_head(argv[2], argv[3]);
    if (strcmp(argv[1], "copied") == 0)
        return case_copied();
    if (strcmp(argv[1], "same") == 0)
        return case_same();
    if (strcmp(argv[1], "foreign") == 0)
        return case_foreign();
    if (strcmp(argv[1], "no_memory") == 0)
        return case_no_memory();
    if (strcmp(argv[1], "bad_env") == 0)
        return case_bad_env();
    return 2;
}
