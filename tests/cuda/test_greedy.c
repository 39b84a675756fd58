/* test_greedy — greedy decoding with the token taken on the device (the
 * CUDA seam's argmax op, session.h's greedy path inside llm_generate).
 *
 * argmax_rule: the seam's op against the engine's own host sampler
 * (llm_sample with temperature 0, the reference the op must match exactly)
 * on rows built to hit every corner of the rule: ties spread over threads
 * and warps, NaN at index 0 (the host keeps 0), NaN elsewhere (never wins),
 * all NaN, all -inf, +0 against -0, +inf twice, the maximum last, and
 * vocabularies from 1 to 128256.
 *
 * generate_*: llm_generate with a greedy sampler on a model opened on
 * "cuda:0", once with the device path and once with it switched off
 * (llm_session_set_device_argmax), in each decode mode: both read the same
 * device logits, so the ids must be identical, not merely close. The seam's
 * counter proves the device path ran once per token, and a split whose last
 * shard is on the GPU takes its ids there too and still generates.
 *
 * spec_kjv: speculative greedy generation (KJV target and draft on cuda:0)
 * with the target's verify rows and the draft's tokens taken on the device,
 * in every combination, equal to the host path's ids.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "block_files.h"
#include "cuda_test.h"
#include "model.h"
#include "phasemark/engine.h"
#include "phasemark/spec.h"
#include "session.h"
#include "synth.h"

#ifndef PM_REPO_MODELS
#define PM_REPO_MODELS "models"
#endif

#define MAX_TOK 48

/* ---- the argmax rule ----------------------------------------------------- */

static void check_row(llm_backend *be, const float *row, int32_t vocab, const char *what)
{
    llm_sampler *sp = NULL;
    REQUIRE(llm_sampler_create(NULL, vocab, &sp) == 0); /* greedy defaults */
    int32_t want = llm_sample(sp, row);
    llm_sampler_free(sp);
    float *d = be->ops->alloc(be, (size_t)vocab * sizeof(float));
    REQUIRE(d);
    be->ops->write(be, d, row, (size_t)vocab * sizeof(float));
    int32_t got = -1;
    CHECK_INT_EQ(be->ops->argmax(be, d, 1, vocab, &got), 0);
    be->ops->free(be, d);
    if (got != want)
        fprintf(stderr, "argmax %s (vocab %d): device %d, host %d\n", what, (int)vocab,
                (int)got, (int)want);
    CHECK_INT_EQ(got, want);
}

/* Many rows in one call (a verify's), more than the seam takes per
 * launch: every row's answer lands at its own index. */
static void check_rows(llm_backend *be)
{
    enum { ROWS = 150, V = 1000 };
    float *x = malloc((size_t)ROWS * V * sizeof *x);
    int32_t got[ROWS];
    REQUIRE(x);
    ct_rng r = {32};
    ct_fill(&r, x, (size_t)ROWS * V, 10.0f);
    for (int32_t i = 0; i < ROWS; i++) {
        float *row = x + (size_t)i * V;
        row[(i * 37) % V] = 30.0f + (float)(i % 3);
        if (i % 7 == 0)
            row[0] = NAN;
        if (i % 11 == 0)
            row[V - 1 - i] = 40.0f;
    }
    llm_sampler *sp = NULL;
    REQUIRE(llm_sampler_create(NULL, V, &sp) == 0);
    float *d = be->ops->alloc(be, (size_t)ROWS * V * sizeof(float));
    REQUIRE(d);
    be->ops->write(be, d, x, (size_t)ROWS * V * sizeof(float));
    CHECK_INT_EQ(be->ops->argmax(be, d, ROWS, V, got), 0);
    for (int32_t i = 0; i < ROWS; i++)
        CHECK_INT_EQ(got[i], llm_sample(sp, x + (size_t)i * V));
    be->ops->free(be, d);
    llm_sampler_free(sp);
    free(x);
}

static void argmax_rule(void)
{
    ct_require_device();
    llm_backend *be = NULL;
    char err[256];
    if (llm_cuda_backend_create(0, &be, err, sizeof err) != 0) {
        fprintf(stderr, "cuda backend: %s\n", err);
        exit(1);
    }
    REQUIRE(be->ops->argmax);
    static const int32_t vocabs[] = {1, 2, 33, 1000, 1025, 4097, 32000, 128256};
    float *x = malloc(128256 * sizeof *x);
    REQUIRE(x);
    ct_rng r = {31};
    for (size_t k = 0; k < sizeof vocabs / sizeof vocabs[0]; k++) {
        int32_t v = vocabs[k];
        ct_fill(&r, x, (size_t)v, 10.0f);
        check_row(be, x, v, "random");
        x[v - 1] = 100.0f;
        check_row(be, x, v, "max last");
        for (int32_t i = 0; i < v; i++)
            x[i] = 0.5f;
        check_row(be, x, v, "all equal");
        ct_fill(&r, x, (size_t)v, 10.0f);
        /* The maximum several times: in different threads, warps, strides. */
        for (int32_t i = v - 1; i >= 0; i -= 1 + v / 5)
            x[i] = 20.0f;
        check_row(be, x, v, "ties");
        x[0] = NAN;
        check_row(be, x, v, "NaN at 0");
        ct_fill(&r, x, (size_t)v, 10.0f);
        for (int32_t i = 1; i < v; i += 3)
            x[i] = NAN;
        check_row(be, x, v, "NaN scattered");
        x[v - 1] = INFINITY;
        x[0] = NAN;
        check_row(be, x, v, "NaN at 0, +inf last");
        for (int32_t i = 0; i < v; i++)
            x[i] = NAN;
        check_row(be, x, v, "all NaN");
        for (int32_t i = 0; i < v; i++)
            x[i] = -INFINITY;
        check_row(be, x, v, "all -inf");
        if (v >= 8) {
            x[2] = NAN;
            x[5] = -0.0f;
            x[6] = 0.0f;
            check_row(be, x, v, "-0 before +0");
            x[3] = INFINITY;
            x[v - 1] = INFINITY;
            check_row(be, x, v, "+inf twice");
        }
    }
    free(x);
    check_rows(be);
    CHECK_INT_EQ(be->ops->status(be, err, sizeof err), 0);
    be->ops->destroy(be);
}

/* ---- generation ---------------------------------------------------------- */

typedef struct run_out {
    int32_t toks[MAX_TOK];
    size_t n;
} run_out;

static int collect(void *user, int32_t tok)
{
    run_out *o = user;
    REQUIRE(o->n < MAX_TOK);
    o->toks[o->n++] = tok;
    return 0;
}

static run_out generate(llm_session *s, llm_sampler *sp, const int32_t *prompt, size_t n,
                        int32_t max_tokens)
{
    run_out o;
    memset(&o, 0, sizeof o);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = max_tokens;
    /* Every run the same length, so both paths take max_tokens argmaxes
     * (the trained models draw EOS early on some prompts; the stop
     * reasons are checked on the CPU in engine_greedy_stops). */
    gp.stop_at_eos = 0;
    llm_session_reset(s);
    int rc = llm_generate(s, sp, prompt, n, &gp, collect, &o, NULL, NULL);
    if (rc)
        fprintf(stderr, "generate: %s\n", llm_session_error(s));
    REQUIRE(rc == 0);
    CHECK_INT_EQ((long)o.n, max_tokens);
    return o;
}

static uint64_t argmaxes_of(llm_model *m)
{
    llm_cuda_decode_stats st;
    REQUIRE(llm_cuda_backend_decode_stats(m->be, &st) == 0);
    return st.argmaxes;
}

static llm_model *open_on_cuda(const char *path)
{
    llm_model_options o = LLM_MODEL_OPTIONS_INIT;
    o.backend = "cuda:0";
    llm_model *m = NULL;
    char err[256];
    if (llm_model_open(path, &o, &m, err, sizeof err) != 0) {
        fprintf(stderr, "open %s on cuda:0: %s\n", path, err);
        exit(1);
    }
    return m;
}

/* prompts[k] of lens[k] tokens; max_tokens each; every decode mode. */
static void generate_both(const char *path, llm_model *m, const int32_t *const *prompts,
                          const size_t *lens, int n_prompts, int32_t max_tokens,
                          const char *label)
{
    int32_t vocab = m->hp.n_vocab;
    llm_sampler *sp = NULL;
    REQUIRE(llm_sampler_create(NULL, vocab, &sp) == 0);
    llm_session *s = synth_session(m, 256, 32, 1);
    REQUIRE(llm_session_device_argmax(s) == 1);
    static const int modes[3] = {LLM_CUDA_DECODE_GRAPH, LLM_CUDA_DECODE_FUSED,
                                 LLM_CUDA_DECODE_OPS};
    int differ = 0;
    for (int md = 0; md < 3; md++) {
        REQUIRE(llm_cuda_backend_set_decode(m->be, modes[md]) == 0);
        for (int k = 0; k < n_prompts; k++) {
            llm_session_set_device_argmax(s, 1);
            uint64_t a0 = argmaxes_of(m);
            run_out dev = generate(s, sp, prompts[k], lens[k], max_tokens);
            CHECK_U64_EQ(argmaxes_of(m) - a0, (uint64_t)max_tokens);
            llm_session_set_device_argmax(s, 0);
            a0 = argmaxes_of(m);
            run_out host = generate(s, sp, prompts[k], lens[k], max_tokens);
            CHECK_U64_EQ(argmaxes_of(m) - a0, 0);
            for (int32_t i = 0; i < max_tokens; i++)
                if (dev.toks[i] != host.toks[i]) {
                    fprintf(stderr, "%s mode %d prompt %d token %d: device %d, host %d\n",
                            label, modes[md], k, (int)i, (int)dev.toks[i],
                            (int)host.toks[i]);
                    differ++;
                    break;
                }
        }
    }
    CHECK_INT_EQ(differ, 0);
    REQUIRE(llm_cuda_backend_set_decode(m->be, LLM_CUDA_DECODE_GRAPH) == 0);
    printf("%s: %d prompts x %d tokens x 3 decode modes, device argmax == host argmax\n",
           label, n_prompts, (int)max_tokens);
    llm_session_free(s);

    /* A split whose last shard is this GPU (over the file opened on the
     * CPU, as the heterogeneous engine tests place it): the split asks
     * that shard's runner for the argmax too, so its ids are taken on the
     * device like a monolithic session's, and generation works. */
    char placement[96];
    int32_t L = m->hp.n_layers, h = L / 2 > 0 ? L / 2 : 1;
    if (L >= 2) {
        snprintf(placement, sizeof placement, "0-%d@local:cpu,%d-%d@local:cuda:0", (int)h - 1,
                 (int)h, (int)L - 1);
        llm_session_options o = LLM_SESSION_OPTIONS_INIT;
        o.n_ctx = 256;
        o.n_batch = 32;
        o.placement = placement;
        char err[256];
        llm_session *sp_s = NULL;
        llm_model *cm = synth_open(path, 2);
        if (llm_session_create(cm, &o, &sp_s, err, sizeof err) != 0) {
            fprintf(stderr, "session over %s: %s\n", placement, err);
            exit(1);
        }
        CHECK_INT_EQ(llm_session_device_argmax(sp_s), 1);
        run_out r = generate(sp_s, sp, prompts[0], lens[0], 8);
        CHECK_INT_EQ((long)r.n, 8);
        llm_session_free(sp_s);
        llm_model_free(cm);
    }
    llm_sampler_free(sp);
}

static const char *const kjv_prompts[8] = {
    "In the beginning God created",
    "And God said, Let there be light",
    "The LORD is my shepherd; I shall not",
    "For God so loved the world, that he gave",
    "Blessed are the meek: for they shall",
    "Vanity of vanities, saith the Preacher",
    "Our Father which art in heaven, Hallowed be",
    "Ask, and it shall be given you; seek, and ye shall",
};

static void kjv_case(const char *file)
{
    ct_require_device();
    const char *dir = getenv("PHASEMARK_REPO_MODELS");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : PM_REPO_MODELS, file);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "skipped: %s not present\n", path);
        exit(77);
    }
    llm_model *m = open_on_cuda(path);
    enum { NP = 8 };
    static int32_t toks[NP][128];
    const int32_t *prompts[NP];
    size_t lens[NP];
    for (int k = 0; k < NP; k++) {
        REQUIRE(llm_model_tokenize(m, kjv_prompts[k], strlen(kjv_prompts[k]), 1, toks[k], 128,
                                   &lens[k]) == 0);
        prompts[k] = toks[k];
    }
    generate_both(path, m, prompts, lens, NP, 40, file);
    llm_model_free(m);
}

/* A synthetic bf16 model with a vocabulary that is not a multiple of the
 * block (the argmax's tail) and prompts of 1..33 tokens. */
static void generate_synth(void)
{
    ct_require_device();
    synth_spec s = synth_default();
    s.hp.dim = 128;
    s.hp.n_heads = 4;
    s.hp.n_kv_heads = 2;
    s.hp.ffn = 256;
    s.hp.vocab = 3001;
    s.hp.ctx = 256;
    s.hp.n_layers = 3;
    s.type = synth_type("bf16");
    s.embd_type = s.type;
    char path[512];
    synth_path(path, sizeof path, "greedy_bf16");
    REQUIRE(synth_write(path, &s) == 0);
    llm_model *m = open_on_cuda(path);
    enum { NP = 6 };
    static int32_t toks[NP][40];
    const int32_t *prompts[NP];
    size_t lens[NP];
    for (int k = 0; k < NP; k++) {
        lens[k] = (size_t)(1 + (k * 13) % 33);
        for (size_t i = 0; i < lens[k]; i++)
            toks[k][i] = (int32_t)((i * 37 + (size_t)k * 101 + 11) % (size_t)s.hp.vocab);
        prompts[k] = toks[k];
    }
    generate_both(path, m, prompts, lens, NP, 40, "synthetic bf16");
    llm_model_free(m);
    unlink(path);
}

/* One greedy llm_spec_generate; the caller set each session's path. */
static run_out spec_once(llm_spec *sd, llm_session *t, llm_sampler *sp, const int32_t *prompt,
                         size_t n, int32_t max_tokens)
{
    run_out o;
    memset(&o, 0, sizeof o);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = max_tokens;
    gp.stop_at_eos = 0;
    llm_session_reset(t);
    int rc = llm_spec_generate(sd, sp, prompt, n, &gp, collect, &o, NULL, NULL);
    if (rc)
        fprintf(stderr, "spec: %s\n", llm_spec_error(sd));
    REQUIRE(rc == 0);
    CHECK_INT_EQ((long)o.n, max_tokens);
    return o;
}

/* Speculative greedy decoding with the KJV target (q8_0) and draft (f16)
 * both on cuda:0, at k 4 (adaptive) and a fixed k 16: every output is the
 * CUDA target's own llm_generate (a verify's rows are the decode step's
 * bits; the verify once multiplied f32 activations where the step rounds
 * them to 8 bits, and near-ties flipped), and the draft's proposals and
 * the target's verify rows taken on the device (target, draft or both)
 * give exactly the ids of the host path, which reads the same logits. */
static void spec_kjv(void)
{
    ct_require_device();
    const char *dir = getenv("PHASEMARK_REPO_MODELS");
    char tp[1024], dp[1024];
    snprintf(tp, sizeof tp, "%s/phasemark-kjv-target-q8_0.gguf", dir && *dir ? dir : PM_REPO_MODELS);
    snprintf(dp, sizeof dp, "%s/phasemark-kjv-draft-f16.gguf", dir && *dir ? dir : PM_REPO_MODELS);
    if (access(tp, R_OK) != 0 || access(dp, R_OK) != 0) {
        fprintf(stderr, "skipped: %s or %s not present\n", tp, dp);
        exit(77);
    }
    llm_model *tm = open_on_cuda(tp), *dm = open_on_cuda(dp);
    llm_session *ar = synth_session(tm, 256, 32, 3);
    llm_session *t = synth_session(tm, 256, 32, 1), *d = synth_session(dm, 256, 32, 2);
    llm_sampler *sp = NULL;
    REQUIRE(llm_sampler_create(NULL, tm->hp.n_vocab, &sp) == 0);
    static const struct { int32_t k, adaptive; } configs[] = {{4, 1}, {16, 0}};
    int differ = 0, vs_plain = 0;
    for (size_t ci = 0; ci < sizeof configs / sizeof configs[0]; ci++) {
        llm_spec_params prm = LLM_SPEC_PARAMS_INIT;
        prm.k = configs[ci].k;
        prm.adaptive = configs[ci].adaptive;
        llm_spec *sd = NULL;
        char err[256];
        REQUIRE(llm_spec_create(t, d, &prm, &sd, err, sizeof err) == 0);
        int32_t toks[128];
        for (int k = 0; k < 8; k++) {
            size_t n = 0;
            REQUIRE(llm_model_tokenize(tm, kjv_prompts[k], strlen(kjv_prompts[k]), 1, toks,
                                       128, &n) == 0);
            llm_session_set_device_argmax(ar, 0);
            run_out plain = generate(ar, sp, toks, n, 40);
            run_out ref;
            memset(&ref, 0, sizeof ref);
            for (int mask = 0; mask <= 3; mask++) {
                llm_session_set_device_argmax(t, mask & 1);
                llm_session_set_device_argmax(d, mask >> 1);
                uint64_t a0 = argmaxes_of(tm) + argmaxes_of(dm);
                run_out o = spec_once(sd, t, sp, toks, n, 40);
                uint64_t used = argmaxes_of(tm) + argmaxes_of(dm) - a0;
                CHECK_INT_EQ(used > 0, mask != 0);
                if (mask == 0) {
                    ref = o;
                    if (memcmp(o.toks, plain.toks, sizeof o.toks) != 0) {
                        fprintf(stderr, "spec k %d prompt %d differs from generate\n",
                                (int)prm.k, k);
                        vs_plain++;
                    }
                } else if (memcmp(o.toks, ref.toks, sizeof o.toks) != 0) {
                    fprintf(stderr, "spec k %d prompt %d: device mask %d differs from the host "
                            "path\n", (int)prm.k, k, mask);
                    differ++;
                }
            }
        }
        llm_spec_free(sd);
    }
    CHECK_INT_EQ(differ, 0);
    CHECK_INT_EQ(vs_plain, 0);
    printf("spec kjv: k 4 adaptive and k 16, 8 prompts x 40 tokens == generate; device argmax "
           "(target, draft, both) == host\n");
    llm_sampler_free(sp);
    llm_session_free(ar);
    llm_session_free(t);
    llm_session_free(d);
    llm_model_free(tm);
    llm_model_free(dm);
}

/* The block drafter over a KJV target on cuda:0 (issue 17): the target's
 * features of every verify come back to the host, where the head runs;
 * greedy output must be the CUDA target's own llm_generate, on both of
 * its argmax paths. The head is a random one (block 16, target layers 1,
 * 3, 5) written here, so acceptance is low; parity is what is tested. */
static void spec_kjv_block(void)
{
    ct_require_device();
    const char *dir = getenv("PHASEMARK_REPO_MODELS");
    char tp[1024], hp[1024];
    snprintf(tp, sizeof tp, "%s/phasemark-kjv-target-q8_0.gguf", dir && *dir ? dir : PM_REPO_MODELS);
    if (access(tp, R_OK) != 0) {
        fprintf(stderr, "skipped: %s not present\n", tp);
        exit(77);
    }
    llm_model *tm = open_on_cuda(tp);
    snprintf(hp, sizeof hp, "%s/pm_cuda_block_head_%ld.gguf",
             getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid());
    bf_spec bs = bf_default((uint32_t)tm->hp.dim, (uint32_t)tm->hp.n_vocab,
                            (uint32_t)tm->hp.n_layers);
    bs.n_feat = 3;
    bs.feat[0] = 1, bs.feat[1] = 3, bs.feat[2] = 5;
    bs.block_size = 16;
    bs.type = LLM_TYPE_F16;
    REQUIRE(bf_write(hp, &bs) == 0);
    llm_session *ar = synth_session(tm, 256, 32, 1), *t = synth_session(tm, 256, 32, 2);
    llm_sampler *sp = NULL;
    REQUIRE(llm_sampler_create(NULL, tm->hp.n_vocab, &sp) == 0);
    llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
    dp.kind = LLM_DRAFTER_BLOCK;
    dp.head_path = hp;
    dp.target = t;
    llm_drafter *dr = NULL;
    char err[256];
    REQUIRE(llm_drafter_create(&dp, &dr, err, sizeof err) == 0);
    llm_spec_params prm = LLM_SPEC_PARAMS_INIT;
    prm.k = 8;
    prm.drafter = dr;
    llm_spec *sd = NULL;
    REQUIRE(llm_spec_create(t, NULL, &prm, &sd, err, sizeof err) == 0);
    int32_t toks[128];
    int differ = 0;
    for (int k = 0; k < 8; k++) {
        size_t n = 0;
        REQUIRE(llm_model_tokenize(tm, kjv_prompts[k], strlen(kjv_prompts[k]), 1, toks, 128,
                                   &n) == 0);
        run_out ref = generate(ar, sp, toks, n, 40);
        for (int dev = 0; dev <= 1; dev++) {
            llm_session_set_device_argmax(t, dev);
            run_out o = spec_once(sd, t, sp, toks, n, 40);
            if (memcmp(o.toks, ref.toks, sizeof o.toks) != 0) {
                fprintf(stderr, "block prompt %d (device argmax %d) differs from generate\n", k,
                        dev);
                differ++;
            }
        }
    }
    CHECK_INT_EQ(differ, 0);
    llm_spec_stats st;
    llm_spec_get_stats(sd, &st);
    CHECK(st.by[LLM_DRAFTER_BLOCK].rounds > 0);
    printf("spec kjv block: 8 prompts x 40 tokens on cuda:0 == generate (%llu rounds, "
           "acceptance %.3f)\n", (unsigned long long)st.rounds, st.acceptance);
    llm_spec_free(sd);
    llm_drafter_free(dr);
    llm_sampler_free(sp);
    llm_session_free(t);
    llm_session_free(ar);
    llm_model_free(tm);
    unlink(hp);
}

static void generate_kjv_target(void) { kjv_case("phasemark-kjv-target-q8_0.gguf"); }
static void generate_kjv_draft(void) { kjv_case("phasemark-kjv-draft-f16.gguf"); }

static const ct_case cases[] = {
    {"argmax_rule", argmax_rule},
    {"generate_kjv_target", generate_kjv_target},
    {"generate_kjv_draft", generate_kjv_draft},
    {"generate_synth", generate_synth},
    {"spec_kjv", spec_kjv},
    {"spec_kjv_block", spec_kjv_block},
};

CT_MAIN(cases)
