/* test_engine_lock — the CPU forward's logits, bit for bit, as the engine
 * computed them before its seams were rebuilt (recorded from main at
 * a0f8a7d with `test_engine_lock print`).
 *
 * The refactor of the forward into backend blocks promises that the CPU
 * path runs the very same kernels in the very same order, so every float
 * of every row must stay identical. For each shipped model this test runs
 * an exact prefill of 11 tokens (one forward, and again in chunks of 4), a
 * decode step, and verify forwards of widths 2..11 from the same history,
 * and compares an FNV-1a 64 hash of each result's bytes with the recorded
 * one. Two kernel configurations: "scalar" (the portable kernels and our
 * own batched product: the same bits on any x86-64 host) and "native"
 * (the host's SIMD kernels and OpenBLAS; recorded on the 2-core EPYC with
 * AVX-512 VNNI that CI runs on, skipped elsewhere), and "vnni", the
 * native entry's hashes under the avx2+vnni kernels forced by
 * PHASEMARK_ENGINE_KERNELS whatever set the host would pick.
 *
 * The avx512 set was written after the recording. Its F16, BF16 and F32
 * matrix–vector products compute what avx2+vnni computes, bit for bit
 * (they widen the same accumulators; test_engine_matvec holds them to
 * it), and "vnni" checks that the older set still produces the recorded
 * hashes. Its Q8_0 products are arithmetic of their own (one chain per
 * result whatever the batch, docs/engine.md), and so are its SwiGLU and
 * softmax exponentials (16 lanes at a time instead of libm's expf), so
 * both models have "native" entries of kernels "avx512", recorded when
 * those were written: the Q8_0 target's on the EPYC with OpenBLAS, then
 * again, with the vector exponentials, on an Intel Xeon of model 207,
 * whose OpenBLAS falls back to a pre-AVX2 core so that the backend runs
 * its own batched product (gemm "avx512"). The F16 draft's prefill takes
 * that product, so its avx512 entry holds on such hosts only and is
 * skipped where OpenBLAS runs.
 *
 * One deliberate change since: a verify keeps to the row loop at every
 * width, so that each row is the decode step's bits (greedy speculative
 * decoding is exact only so; test_engine_verify checks it directly). The
 * draft's native verify widths 8..11, which took OpenBLAS's sgemm from 8
 * float rows, were re-recorded then; every other hash is the original.
 *
 * The Q8_0 target's products never take the batched float product (its
 * every width runs the set's Q8_0 kernels), so its hashes do not depend on
 * it: its entries are the same under "openblas" and under the host's own
 * product's name (checked on the Xeon: the avx512 and avx2+vnni sets'
 * 13 hashes each were the EPYC's).
 *
 * OpenBLAS picks its sgemm core by CPU, and the F16 draft's 11-row
 * prefill is its sgemm, summed in that core's order: the EPYC's entries
 * name no core, and a host whose OpenBLAS runs another one (an Intel Xeon
 * with AMX: "SkylakeX") differed there alone. An entry therefore names the
 * core it was recorded on (llm_cpu_backend_blas_core); matched on another
 * core, every hash but that prefill's is compared. The Xeon's "SkylakeX"
 * entries of the draft are recorded beside the EPYC's.
 *
 * Then the avx512 set got a product of its own (kernels_gemm_avx512.c:
 * one FMA chain over k per result) in place of the AVX2 tile it had
 * inherited. The draft's avx512 / own-product entry had its 11-row
 * prefill, the one hash that product computes, re-recorded then with
 * `print` on the CI kind's EPYC (now a Zen 5) under
 * PHASEMARK_ENGINE_GEMM=own (it was 0x38855bb08c6b1900, the AVX2 tile's,
 * which no build computes any more); its other twelve hashes were
 * reproduced unchanged. The new product's arithmetic depends on no host
 * (exact conversions and FMAs in a fixed order), so the entry holds
 * wherever the avx512 set runs its own product.
 *
 * Then that product became the default wherever the avx512 set runs and
 * OpenBLAS runs no AVX-512 core (choose_blas, cpu_backend.c): on the CI
 * kind's EPYC too, whose OpenBLAS 0.3.21 runs "Haswell", so "native"
 * there checks the entry above, all thirteen hashes. To keep that host's
 * OpenBLAS prefill locked as well, the draft's "Haswell" entries were
 * recorded then, deliberately, with `print` on it: under avx2+vnni
 * ("vnni") and under avx512 with OpenBLAS forced ("native_blas", run
 * with PHASEMARK_ENGINE_GEMM=blas).
 *
 * usage: test_engine_lock check|print scalar|native|vnni MODEL.gguf
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "phasemark/engine.h"
#include "pm_check.h"

#define N_PROMPT 11
#define W_MIN 2
#define W_MAX 11
/* prefill, chunked prefill, decode, verify widths W_MIN..W_MAX */
#define N_HASH (3 + W_MAX - W_MIN + 1)

typedef struct lock_entry {
    const char *model;   /* file name */
    const char *config;  /* "scalar" or "native" */
    const char *kernels; /* llm_cpu_backend_kernels of the recording */
    const char *gemm;    /* llm_cpu_backend_gemm of the recording */
    uint64_t hash[N_HASH];
    const char *core; /* llm_cpu_backend_blas_core of the recording; NULL:
                         not recorded (the entries made before it was) */
} lock_entry;

static const lock_entry recorded[] = {
#include "lock_hashes.inc"
};

static uint64_t fnv1a(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t hash_rows(const float *rows, size_t n_rows, int32_t n_vocab)
{
    return fnv1a(rows, n_rows * (size_t)n_vocab * sizeof(float), 0xcbf29ce484222325ull);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[1], "check") != 0 && strcmp(argv[1], "print") != 0) ||
        (strcmp(argv[2], "scalar") != 0 && strcmp(argv[2], "native") != 0 &&
         strcmp(argv[2], "vnni") != 0)) {
        fprintf(stderr, "usage: test_engine_lock check|print scalar|native|vnni MODEL.gguf\n");
        return 2;
    }
    int scalar = strcmp(argv[2], "scalar") == 0, vnni = strcmp(argv[2], "vnni") == 0;
    const char *config = vnni ? "native" : argv[2];
    if (scalar)
        setenv("PHASEMARK_ENGINE_GEMM", "own", 1);
    if (vnni)
        setenv("PHASEMARK_ENGINE_KERNELS", "avx2+vnni", 1);
    llm_model_options opt = LLM_MODEL_OPTIONS_INIT;
    opt.n_threads = 2;
    llm_model *m = NULL;
    char err[256];
    int orc = llm_model_open(argv[3], &opt, &m, err, sizeof err);
    if (vnni && orc == LLM_EUNSUP) {
        fprintf(stderr, "%s\n", err);
        PM_SKIP("the CPU cannot run the avx2+vnni kernels");
    }
    REQUIRE(orc == 0);
    if (scalar) {
        /* An internal hook (engine.h offers no such switch): the portable
         * kernels instead of the host's SIMD ones. */
        llm_backend *be;
        REQUIRE(llm_cpu_backend_create(2, 0, &be, err, sizeof err) == 0);
        m->be->ops->destroy(m->be);
        m->be = be;
    }
    const char *kernels = llm_cpu_backend_kernels(m->be), *gemm = llm_cpu_backend_gemm(m->be);
    const char *core = llm_cpu_backend_blas_core(m->be);

    llm_model_info info;
    llm_model_get_info(m, &info);
    int32_t nv = info.n_vocab, prompt[N_PROMPT], draft[W_MAX];
    for (int i = 0; i < N_PROMPT; i++)
        prompt[i] = (int32_t)((i * 37 + 5) % nv);
    for (int i = 0; i < W_MAX; i++)
        draft[i] = (int32_t)((i * 53 + 11) % nv);

    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = 64;
    so.n_batch = 16;
    llm_session *s = NULL;
    REQUIRE(llm_session_create(m, &so, &s, err, sizeof err) == 0);
    uint64_t got[N_HASH];
    const float *lg = NULL;
    REQUIRE(llm_prefill(s, prompt, N_PROMPT, 0, &lg) == 0);
    got[0] = hash_rows(lg, 1, nv);
    llm_session_reset(s);
    REQUIRE(llm_prefill(s, prompt, N_PROMPT, 4, &lg) == 0);
    got[1] = hash_rows(lg, 1, nv);
    REQUIRE(llm_decode(s, 42 % nv, &lg) == 0);
    got[2] = hash_rows(lg, 1, nv);
    for (int w = W_MIN; w <= W_MAX; w++) {
        REQUIRE(llm_session_truncate(s, N_PROMPT + 1) == 0);
        REQUIRE(llm_verify(s, draft, (size_t)w, &lg) == 0);
        got[3 + w - W_MIN] = hash_rows(lg, (size_t)w, nv);
    }
    llm_session_free(s);
    llm_model_free(m);

    if (strcmp(argv[1], "print") == 0) {
        printf("{\"%s\", \"%s\", \"%s\", \"%s\",\n {", base_name(argv[3]), config, kernels, gemm);
        for (int i = 0; i < N_HASH; i++)
            printf("0x%016" PRIx64 "ull%s", got[i], i + 1 < N_HASH ? (i % 3 == 2 ? ",\n  " : ", ") : "}");
        printf(*core ? ",\n \"%s\"},\n" : "},\n", core);
        return 0;
    }
    /* The entry of this model and configuration that matches the most:
     * kernels, product and OpenBLAS core, else kernels and product, else
     * kernels, else any (which then skips). */
    const lock_entry *e = NULL;
    for (int level = 3; level >= 0 && !e; level--)
        for (size_t i = 0; i < sizeof recorded / sizeof recorded[0] && !e; i++)
            if (strcmp(recorded[i].model, base_name(argv[3])) == 0 &&
                strcmp(recorded[i].config, config) == 0 &&
                (level < 1 || strcmp(recorded[i].kernels, kernels) == 0) &&
                (level < 2 || strcmp(recorded[i].gemm, gemm) == 0) &&
                (level < 3 || strcmp(recorded[i].core ? recorded[i].core : "", core) == 0))
                e = &recorded[i];
    REQUIRE(e != NULL);
    /* Recorded under OpenBLAS on another core: the 11-row prefill, the
     * one forward wide enough for the batched float product, summed in
     * that core's order, is not comparable (the F16 draft's is OpenBLAS's
     * sgemm; the Q8_0 target's never is, and matches anyway). */
    int other_core = strcmp(gemm, "openblas") == 0 && strcmp(e->gemm, gemm) == 0 &&
                     strcmp(e->core ? e->core : "", core) != 0;
    if (strcmp(e->kernels, kernels) != 0 || strcmp(e->gemm, gemm) != 0) {
        fprintf(stderr, "recorded with kernels %s/%s; this host runs %s/%s\n", e->kernels,
                e->gemm, kernels, gemm);
        PM_SKIP("the native hashes belong to another kernel set");
    }
    static const char *const what[3] = {"prefill", "prefill chunk 4", "decode"};
    for (int i = 0; i < N_HASH; i++) {
        if (got[i] == e->hash[i])
            continue;
        if (i == 0 && other_core) {
            fprintf(stderr, "%s: prefill differs from a recording on another OpenBLAS core "
                            "(this one: %s); not compared\n", argv[2], core);
            continue;
        }
        if (i < 3)
            fprintf(stderr, "%s: %s differs\n", argv[2], what[i]);
        else
            fprintf(stderr, "%s: verify width %d differs\n", argv[2], i - 3 + W_MIN);
        CHECK_U64_EQ(got[i], e->hash[i]);
    }
    return pm_check_result();
}
