/* test_loop — the device loop (cuda_loop.h): plain steps and greedy
 * speculative rounds that stay on the device, against the engine's own
 * decoding.
 *
 * rows_bits: llm_cuda_matvec_fused_rows over n activation rows gives, row
 *   for row, exactly the bits of the one-row product (every fusion the
 *   decode step uses), and refuses a native k-quant weight for n > 1.
 * rows_stationary: the weight-stationary products over 2, 5, 9 and 17
 *   rows (tune.rows_stationary, groups of up to 8 rows a warp) give, row
 *   for row, the bits of n one-row launches and of the per-row grid
 *   (rows_stationary = 0), k and v cache included: f32, f16, bf16, Q8_0
 *   on the int8 kernel and Q8_0 on the fp32 kernel, every fusion (the
 *   SwiGLU pairs, odd weight row counts), a 1408-wide row (a batch past
 *   the unrolled ones) and a 4096-wide one with split-K on; the int8
 *   kernel under every rows_plan (fitted, fixed, and each forced group
 *   of 2..8 rows).
 * q8_auto_bits: the int8 kernel's per-product batch shape (q8_int8 4)
 *   gives the bits of either fixed shape.
 * plain_kjv: the plain loop on the KJV target (q8_0, cuda:0) gives the ids
 *   of llm_generate's greedy decode (the seam's graph step) on 24 prompts
 *   x 64 tokens, leaves the session at llm_generate's position, and reads
 *   back once per batch of LLM_CUDA_LOOP_BATCH steps.
 * spec_kjv: device-resident rounds (KJV target q8_0 + draft f16) at k =
 *   1, 2, 4, 7 and 16 give the plain loop's ids on the same 24 prompts x
 *   64 tokens; every round commits between 1 and k + 1 tokens, the
 *   accepted counts add up, and both sessions end where llm_generate
 *   would leave the target.
 * ngram_kjv: n-gram rounds (host proposal, device verify and acceptance)
 *   at k = 1, 4, 8 give llm_generate's ids and position on the 24 prompts,
 *   one read-back a round or plain step; with the lookup on the device
 *   too, in batches of rounds (fewer read-backs than rounds); sampling
 *   with the device lookup and bad settings are refused.
 * stops: EOS, a stop token and a callback end both loops exactly where
 *   llm_generate ends (same ids, reason and position), max_tokens 1 runs
 *   no step.
 * sampled_law: at temperature 0.7 the plain loop and the rounds (k = 3)
 *   draw from the target's law: over 1200 seeds the histograms of the
 *   first two device-drawn tokens agree with llm_generate's host draws
 *   (two-sample chi-square, far beyond chance only when they differ);
 *   the same seed repeats a run exactly.
 * sampled_law_ngram: the law test for n-gram rounds (k = 3, 12 tokens,
 *   the 2nd, 3rd and 12th compared) on a prompt that repeats itself, so
 *   rounds propose: the one-hot acceptance keeps the target's law, some
 *   proposals are kept and some turned down; a seed repeats a run.
 * refusals_cpu (no device needed): a CPU session is refused at creation
 *   with one line; refusals: a top-k sampler, k out of range or without a
 *   draft session each give one clear refusal.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_loop.h"
#include "cuda_test.h"
#include "model.h"
#include "phasemark/engine.h"
#include "phasemark/spec.h"
#include "session.h"
#include "synth.h"

#ifndef PM_REPO_MODELS
#define PM_REPO_MODELS "models"
#endif

#define MAX_TOK 80
#define N_PROMPTS 24
#define N_TOK 64

static const char *const prompts_text[N_PROMPTS] = {
    "In the beginning God created",
    "And God said, Let there be light",
    "The LORD is my shepherd; I shall not",
    "For God so loved the world, that he gave",
    "Blessed are the meek: for they shall",
    "Vanity of vanities, saith the Preacher",
    "Our Father which art in heaven, Hallowed be",
    "Ask, and it shall be given you; seek, and ye shall",
    "And the king said unto",
    "Then answered Jesus and said",
    "Hear, O Israel: The LORD our God",
    "And it came to pass, when the king heard",
    "Thus saith the LORD of hosts",
    "And Moses went up unto God",
    "My son, forget not my law",
    "Praise ye the LORD. Praise God in his sanctuary",
    "And he opened his mouth, and taught them, saying",
    "Let not your heart be troubled",
    "The heavens declare the glory of God",
    "And David said to Saul",
    "Behold, I stand at the door, and knock",
    "Wherefore, my beloved brethren",
    "And the word was made flesh",
    "Who can find a virtuous woman?",
};

typedef struct run_out {
    int32_t toks[MAX_TOK];
    size_t n;
    int32_t stop_at; /* the callback asks to stop after this many (0: never) */
} run_out;

static int collect(void *user, int32_t tok)
{
    run_out *o = user;
    REQUIRE(o->n < MAX_TOK);
    o->toks[o->n++] = tok;
    return o->stop_at > 0 && (int32_t)o->n >= o->stop_at;
}

static const char *model_path(const char *file, char *buf, size_t len)
{
    const char *dir = getenv("PHASEMARK_REPO_MODELS");
    snprintf(buf, len, "%s/%s", dir && *dir ? dir : PM_REPO_MODELS, file);
    if (access(buf, R_OK) != 0) {
        fprintf(stderr, "skipped: %s not present\n", buf);
        exit(77);
    }
    return buf;
}

static llm_model *open_on(const char *file, const char *backend)
{
    char path[1024];
    model_path(file, path, sizeof path);
    llm_model_options o = LLM_MODEL_OPTIONS_INIT;
    o.backend = backend;
    llm_model *m = NULL;
    char err[256];
    if (llm_model_open(path, &o, &m, err, sizeof err) != 0) {
        fprintf(stderr, "open %s on %s: %s\n", path, backend, err);
        exit(1);
    }
    return m;
}

#define TARGET "phasemark-kjv-target-q8_0.gguf"
#define DRAFT "phasemark-kjv-draft-f16.gguf"

static size_t tokenize(llm_model *m, int k, int32_t *toks)
{
    size_t n = 0;
    REQUIRE(llm_model_tokenize(m, prompts_text[k], strlen(prompts_text[k]), 1, toks, 128, &n) ==
            0);
    return n;
}

static llm_generate_params gen_params(int32_t max_tokens)
{
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = max_tokens;
    gp.stop_at_eos = 0;
    return gp;
}

/* llm_generate's greedy ids, reason and position: the reference. */
static run_out reference(llm_session *s, llm_sampler *sp, const int32_t *prompt, size_t n,
                         const llm_generate_params *gp, int32_t stop_at, int *reason,
                         uint32_t *pos)
{
    run_out o;
    memset(&o, 0, sizeof o);
    o.stop_at = stop_at;
    llm_session_reset(s);
    REQUIRE(llm_generate(s, sp, prompt, n, gp, collect, &o, NULL, reason) == 0);
    *pos = llm_session_pos(s);
    return o;
}

static run_out looped(llm_cuda_loop *l, llm_sampler *sp, int32_t k, const int32_t *prompt,
                      size_t n, const llm_generate_params *gp, int32_t stop_at, int *reason)
{
    run_out o;
    memset(&o, 0, sizeof o);
    o.stop_at = stop_at;
    size_t got = 0;
    int rc = llm_cuda_loop_generate(l, sp, k, prompt, n, gp, collect, &o, &got, reason);
    if (rc)
        fprintf(stderr, "loop k=%d: %s\n", (int)k, llm_cuda_loop_error(l));
    REQUIRE(rc == 0);
    CHECK_U64_EQ(got, o.n);
    return o;
}

static int same(const run_out *a, const run_out *b)
{
    return a->n == b->n && memcmp(a->toks, b->toks, a->n * sizeof *a->toks) == 0;
}

/* ---- the multi-row product ------------------------------------------------ */

static void rows_case(llm_cuda *c, uint32_t type, unsigned flags, int32_t n)
{
    enum { COLS = 512 };
    int64_t rows = (flags & LLM_CUDA_MV_ROPE_STORE) ? (8 + 2 * 4) * 64 : 768;
    ct_rng r = {7u + flags + (unsigned)n};
    size_t wn = (size_t)rows * COLS;
    float *wf = malloc(wn * sizeof *wf), *x = malloc((size_t)n * COLS * sizeof *x);
    float *g = malloc(COLS * sizeof *g);
    REQUIRE(wf && x && g);
    ct_fill(&r, wf, wn, 0.5f);
    ct_fill(&r, x, (size_t)n * COLS, 2.0f);
    for (int i = 0; i < COLS; i++)
        g[i] = 1.0f + 0.25f * ct_sym(&r, 1.0f);
    size_t rb = ct_row_bytes(type, COLS);
    void *enc = malloc(rb * (size_t)rows);
    double *deq = malloc(wn * sizeof *deq);
    REQUIRE(enc && deq);
    ct_encode(type, wf, rows, COLS, enc, deq);
    llm_cuda_weight w;
    REQUIRE(llm_cuda_weight_upload(c, type, enc, COLS, rows, rb, &w) == 0);
    free(enc);
    free(deq);
    int64_t out_w = (flags & LLM_CUDA_MV_SWIGLU_PAIRS) ? rows / 2 : rows;
    size_t yb = (size_t)n * (size_t)out_w * sizeof(float);
    float *dx = ct_dev(c, (size_t)n * COLS * sizeof(float)), *dg = ct_dev(c, COLS * sizeof(float));
    float *dy = ct_dev(c, yb), *dy1 = ct_dev(c, yb);
    uint32_t kvd = 4 * 64, ctx = 64;
    float *kc = ct_dev(c, (size_t)ctx * kvd * sizeof(float)), *vc = ct_dev(c, (size_t)ctx * kvd * sizeof(float));
    float *kc1 = ct_dev(c, (size_t)ctx * kvd * sizeof(float)), *vc1 = ct_dev(c, (size_t)ctx * kvd * sizeof(float));
    size_t cache_b = (size_t)ctx * kvd * sizeof(float);
    float *zero = calloc(1, cache_b);
    REQUIRE(zero);
    ct_put(c, kc, zero, cache_b); /* rows the products do not write compare too */
    ct_put(c, vc, zero, cache_b);
    ct_put(c, kc1, zero, cache_b);
    ct_put(c, vc1, zero, cache_b);
    free(zero);
    double *freq = ct_dev(c, 32 * sizeof(double));
    double hf[32];
    for (int i = 0; i < 32; i++)
        hf[i] = 1.0 / (double)(1 + i);
    ct_put(c, freq, hf, sizeof hf);
    ct_put(c, dx, x, (size_t)n * COLS * sizeof(float));
    ct_put(c, dg, g, COLS * sizeof(float));
    float *y0 = calloc((size_t)n * (size_t)out_w, sizeof *y0);
    REQUIRE(y0);
    for (size_t i = 0; i < (size_t)n * (size_t)out_w; i++)
        y0[i] = 0.125f * (float)(i % 7);
    ct_put(c, dy, y0, yb);
    ct_put(c, dy1, y0, yb);
    llm_cuda_rope_store rs = {{5, NULL}, freq, 1.0f, 8, 4, 64, kc, vc};
    llm_cuda_mv_fuse f = {flags, dg, 1e-5f, &rs};
    REQUIRE(llm_cuda_matvec_fused_rows(c, &w, dx, n, dy, &f) == 0);
    /* The same rows one call each, at their positions. */
    for (int32_t i = 0; i < n; i++) {
        llm_cuda_rope_store r1 = {{5u + (uint32_t)i, NULL}, freq, 1.0f, 8, 4, 64, kc1, vc1};
        llm_cuda_mv_fuse f1 = {flags, dg, 1e-5f, &r1};
        REQUIRE(llm_cuda_matvec_fused(c, &w, dx + (size_t)i * COLS, dy1 + (size_t)i * out_w,
                                      &f1) == 0);
    }
    float *a = malloc(yb), *b = malloc(yb);
    REQUIRE(a && b);
    ct_get(c, a, dy, yb);
    ct_get(c, b, dy1, yb);
    CHECK_INT_EQ(memcmp(a, b, yb), 0);
    if (flags & LLM_CUDA_MV_ROPE_STORE) {
        size_t cb = (size_t)ctx * kvd * sizeof(float);
        float *ka = malloc(cb), *kb = malloc(cb);
        REQUIRE(ka && kb);
        ct_get(c, ka, kc, cb);
        ct_get(c, kb, kc1, cb);
        CHECK_INT_EQ(memcmp(ka, kb, cb), 0);
        ct_get(c, ka, vc, cb);
        ct_get(c, kb, vc1, cb);
        CHECK_INT_EQ(memcmp(ka, kb, cb), 0);
        free(ka);
        free(kb);
    }
    void *bufs[] = {dx, dg, dy, dy1, kc, vc, kc1, vc1, freq};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        llm_cuda_mfree(c, bufs[i]);
    llm_cuda_weight_release(c, &w);
    free(a);
    free(b);
    free(y0);
    free(wf);
    free(x);
    free(g);
}

static void rows_bits(void)
{
    llm_cuda *c = ct_open(64, 4096, 64, 64);
    static const unsigned fl[] = {
        LLM_CUDA_MV_NORM | LLM_CUDA_MV_ROPE_STORE, LLM_CUDA_MV_ACCUMULATE,
        LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS, LLM_CUDA_MV_NORM};
    static const uint32_t types[] = {LLM_TYPE_F32, LLM_TYPE_F16, LLM_TYPE_Q8_0};
    static const int32_t ns[] = {1, 2, 5, 17};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (size_t f = 0; f < sizeof fl / sizeof fl[0]; f++)
            for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
                rows_case(c, types[t], fl[f], ns[i]);
    /* Out of range row counts are refused, nothing launched. */
    llm_cuda_weight w;
    memset(&w, 0, sizeof w);
    llm_cuda_mv_fuse f = {0, NULL, 0.0f, NULL};
    CHECK_INT_EQ(llm_cuda_matvec_fused_rows(c, &w, NULL, 0, NULL, &f), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_matvec_fused_rows(c, &w, NULL, LLM_CUDA_MV_ROWS_MAX + 1, NULL, &f),
                 LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    llm_cuda_free(c);
}

/* ---- the weight-stationary products -------------------------------------- */

typedef struct st_shape {
    uint32_t type;
    int q8_int8, mv_split; /* the tuning the product runs with */
    int64_t rows, cols;
} st_shape;

/* The n rows' outputs (y [n][out_w], then the k and v caches) of one way
 * of running the product: fused_rows with rows_stationary = st (0 or 1)
 * and rows_plan = plan, or (st < 0) n one-row launches at positions
 * 5 + i. */
static void st_run(llm_cuda *c, const llm_cuda_weight *w, const st_shape *sh, unsigned flags,
                   int32_t n, const float *dx, const float *dg, const double *freq,
                   const float *y0, int st, int plan, float *host)
{
    int64_t out_w = (flags & LLM_CUDA_MV_SWIGLU_PAIRS) ? sh->rows / 2 : sh->rows;
    size_t yb = (size_t)n * (size_t)out_w * sizeof(float), cb = (size_t)64 * 4 * 64 * sizeof(float);
    float *dy = ct_dev(c, yb), *kc = ct_dev(c, cb), *vc = ct_dev(c, cb);
    float *zero = calloc(1, cb);
    REQUIRE(zero);
    ct_put(c, kc, zero, cb); /* rows the products do not write compare too */
    ct_put(c, vc, zero, cb);
    free(zero);
    ct_put(c, dy, y0, yb);
    llm_cuda_tuning t;
    REQUIRE(llm_cuda_get_tuning(c, &t) == 0);
    t.q8_int8 = sh->q8_int8;
    t.mv_split = sh->mv_split;
    t.rows_stationary = st > 0;
    t.rows_plan = plan;
    REQUIRE(llm_cuda_set_tuning(c, &t) == 0);
    if (st >= 0) {
        llm_cuda_rope_store rs = {{5, NULL}, freq, 1.0f, 8, 4, 64, kc, vc};
        llm_cuda_mv_fuse f = {flags, dg, 1e-5f, &rs};
        CT_OK(c, llm_cuda_matvec_fused_rows(c, w, dx, n, dy, &f));
    } else {
        for (int32_t i = 0; i < n; i++) {
            llm_cuda_rope_store rs = {{5u + (uint32_t)i, NULL}, freq, 1.0f, 8, 4, 64, kc, vc};
            llm_cuda_mv_fuse f = {flags, dg, 1e-5f, &rs};
            CT_OK(c, llm_cuda_matvec_fused(c, w, dx + (size_t)i * (size_t)sh->cols,
                                           dy + (size_t)i * (size_t)out_w, &f));
        }
    }
    ct_get(c, host, dy, yb);
    ct_get(c, (char *)host + yb, kc, cb);
    ct_get(c, (char *)host + yb + cb, vc, cb);
    llm_cuda_mfree(c, dy);
    llm_cuda_mfree(c, kc);
    llm_cuda_mfree(c, vc);
}

static void st_case(llm_cuda *c, const st_shape *sh, unsigned flags, int32_t n)
{
    int64_t rows = sh->rows, cols = sh->cols;
    ct_rng r = {11u + flags * 31u + (unsigned)n * 7u + (unsigned)cols};
    size_t wn = (size_t)rows * (size_t)cols, xn = (size_t)n * (size_t)cols;
    float *wf = malloc(wn * sizeof *wf), *x = malloc(xn * sizeof *x);
    float *g = malloc((size_t)cols * sizeof *g);
    size_t rb = ct_row_bytes(sh->type, cols);
    void *enc = malloc(rb * (size_t)rows);
    double *deq = malloc(wn * sizeof *deq);
    REQUIRE(wf && x && g && enc && deq);
    ct_fill(&r, wf, wn, 0.5f);
    ct_fill(&r, x, xn, 2.0f);
    for (int64_t i = 0; i < cols; i++)
        g[i] = 1.0f + 0.25f * ct_sym(&r, 1.0f);
    ct_encode(sh->type, wf, rows, cols, enc, deq);
    llm_cuda_weight w;
    REQUIRE(llm_cuda_weight_upload(c, sh->type, enc, cols, rows, rb, &w) == 0);
    free(enc);
    free(deq);
    free(wf);
    int64_t out_w = (flags & LLM_CUDA_MV_SWIGLU_PAIRS) ? rows / 2 : rows;
    size_t yn = (size_t)n * (size_t)out_w, yb = yn * sizeof(float);
    size_t all = yb + 2 * (size_t)64 * 4 * 64 * sizeof(float);
    /* Without the residual add every output starts as NaN, so an output
     * no run writes shows; with it, at 0.125 (i % 7). */
    int acc = (flags & LLM_CUDA_MV_ACCUMULATE) != 0;
    float *y0 = malloc(yb);
    REQUIRE(y0);
    for (size_t i = 0; i < yn; i++)
        y0[i] = acc ? 0.125f * (float)(i % 7) : NAN;
    float *dx = ct_dev(c, xn * sizeof(float)), *dg = ct_dev(c, (size_t)cols * sizeof(float));
    double *freq = ct_dev(c, 32 * sizeof(double));
    double hf[32];
    for (int i = 0; i < 32; i++)
        hf[i] = 1.0 / (double)(1 + i);
    ct_put(c, freq, hf, sizeof hf);
    ct_put(c, dx, x, xn * sizeof(float));
    ct_put(c, dg, g, (size_t)cols * sizeof(float));
    float *one = malloc(all), *grid = malloc(all), *st = malloc(all);
    REQUIRE(one && grid && st);
    st_run(c, &w, sh, flags, n, dx, dg, freq, y0, -1, 1, one);
    st_run(c, &w, sh, flags, n, dx, dg, freq, y0, 0, 1, grid);
    st_run(c, &w, sh, flags, n, dx, dg, freq, y0, 1, 1, st);
    /* The reference wrote every output: no NaN left; with the residual
     * add, every sum moved off its start, except SwiGLU outputs whose gate
     * is so negative that silu(g) * u vanishes next to it. */
    size_t nan = 0, changed = 0;
    for (size_t i = 0; i < yn; i++) {
        nan += one[i] != one[i];
        changed += one[i] != y0[i];
    }
    CHECK_U64_EQ(nan, 0);
    if (acc && !(flags & LLM_CUDA_MV_SWIGLU_PAIRS))
        CHECK_U64_EQ(changed, yn);
    else if (acc)
        CHECK(changed > yn / 2);
    int differ = memcmp(st, one, all) != 0;
    if (differ)
        fprintf(stderr, "type %u q8_int8 %d split %d rows %lld cols %lld flags %u n %d differ\n",
                (unsigned)sh->type, sh->q8_int8, sh->mv_split, (long long)rows, (long long)cols,
                flags, (int)n);
    CHECK_INT_EQ(differ, 0);
    CHECK_INT_EQ(memcmp(grid, one, all), 0);
    /* The Q8 products' other plans: the fixed groups of up to 8 rows and
     * every forced group size, each slot count and batch shape they
     * reach on this row width. */
    if (sh->type == LLM_TYPE_Q8_0 && sh->q8_int8 != 0)
        for (int plan = 0; plan <= LLM_CUDA_ROWS_GROUP_MAX; plan += plan ? 1 : 2) {
            st_run(c, &w, sh, flags, n, dx, dg, freq, y0, 1, plan, st);
            differ = memcmp(st, one, all) != 0;
            if (differ)
                fprintf(stderr, "rows %lld cols %lld flags %u n %d plan %d differ\n",
                        (long long)rows, (long long)cols, flags, (int)n, plan);
            CHECK_INT_EQ(differ, 0);
        }
    void *bufs[] = {dx, dg, freq};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        llm_cuda_mfree(c, bufs[i]);
    llm_cuda_weight_release(c, &w);
    free(one);
    free(grid);
    free(st);
    free(y0);
    free(x);
    free(g);
}

static void rows_stationary(void)
{
    llm_cuda *c = ct_open(64, 4096, 64, 64);
    enum { NORM = LLM_CUDA_MV_NORM, ACC = LLM_CUDA_MV_ACCUMULATE,
           PAIRS = LLM_CUDA_MV_SWIGLU_PAIRS, ROPE = LLM_CUDA_MV_ROPE_STORE };
    static const unsigned fl[] = {0,     NORM,         ACC,          NORM | ACC,
                                  PAIRS, NORM | PAIRS, ACC | PAIRS,  NORM | ACC | PAIRS,
                                  ROPE,  NORM | ROPE};
    static const int32_t ns[] = {2, 5, 9, 17};
    static const st_shape shapes[] = {
        {LLM_TYPE_F32, 1, 0, 0, 512},  {LLM_TYPE_F16, 1, 0, 0, 512},
        {LLM_TYPE_BF16, 1, 0, 0, 512}, {LLM_TYPE_Q8_0, 1, 0, 0, 512},
        {LLM_TYPE_Q8_0, 0, 0, 0, 512}, {LLM_TYPE_Q8_0, 1, 0, 0, 1408},
        {LLM_TYPE_F16, 1, 0, 0, 1408},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t f = 0; f < sizeof fl / sizeof fl[0]; f++)
            for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
                st_shape sh = shapes[s];
                /* q/k/v of 8 + 2 x 4 heads of 64 with RoPE; else an odd
                 * row count unless the rows pair. */
                sh.rows = (fl[f] & ROPE) ? 1024 : (fl[f] & PAIRS) ? 768 : 767;
                st_case(c, &sh, fl[f], ns[i]);
            }
    /* Split-K (mv_split = 1 picks 2 warps a pair for 128 pairs of 4096
     * columns) and the int8 kernel's other batch shapes. */
    static const st_shape wide[] = {{LLM_TYPE_Q8_0, 1, 1, 256, 4096},
                                    {LLM_TYPE_Q8_0, 2, 1, 255, 4096},
                                    {LLM_TYPE_Q8_0, 3, 0, 767, 1408}};
    for (size_t s = 0; s < sizeof wide / sizeof wide[0]; s++)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
            st_case(c, &wide[s], NORM, ns[i]);
            st_case(c, &wide[s], ACC, ns[i]);
        }
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    llm_cuda_free(c);
}

/* The int8 Q8 kernel's batch shape chosen per product (q8_int8 4) gives the
 * bits of the 4 KB batch (1) and of the 2 KB one (3): a matrix of 20 row
 * pairs a multiprocessor, which the choice runs at 2 KB (more pairs than
 * 16 warps an SM, no more than 24), and one of 768 rows, which it runs at
 * 4 KB; plain, norm, residual add and SwiGLU pairs. */
static void q8_auto_bits(void)
{
    llm_cuda *c = ct_open(4, 4096, 64, 64);
    int64_t wide = (int64_t)llm_cuda_sm_count(c) * 40;
    const int64_t shapes[][2] = {{wide, 4096}, {768, 512}};
    const unsigned fl[] = {0, LLM_CUDA_MV_NORM, LLM_CUDA_MV_ACCUMULATE,
                           LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1];
        ct_rng r = {29u + (unsigned)s};
        size_t wn = (size_t)rows * (size_t)cols, rb = ct_row_bytes(LLM_TYPE_Q8_0, cols);
        float *wf = malloc(wn * sizeof *wf), *x = malloc((size_t)cols * sizeof *x);
        float *g = malloc((size_t)cols * sizeof *g);
        double *deq = malloc(wn * sizeof *deq);
        void *enc = malloc(rb * (size_t)rows);
        REQUIRE(wf && x && g && deq && enc);
        ct_fill(&r, wf, wn, 0.5f);
        ct_fill(&r, x, (size_t)cols, 2.0f);
        for (int64_t i = 0; i < cols; i++)
            g[i] = 1.0f + 0.25f * ct_sym(&r, 1.0f);
        ct_encode(LLM_TYPE_Q8_0, wf, rows, cols, enc, deq);
        llm_cuda_weight w;
        REQUIRE(llm_cuda_weight_upload(c, LLM_TYPE_Q8_0, enc, cols, rows, rb, &w) == 0);
        float *dx = ct_dev(c, (size_t)cols * sizeof(float));
        float *dg = ct_dev(c, (size_t)cols * sizeof(float));
        double *freq = ct_dev(c, 32 * sizeof(double));
        ct_put(c, dx, x, (size_t)cols * sizeof(float));
        ct_put(c, dg, g, (size_t)cols * sizeof(float));
        size_t yb = (size_t)rows * sizeof(float), cb = 2 * (size_t)64 * 4 * 64 * sizeof(float);
        float *y0 = malloc(yb), *want = malloc(yb + cb), *got = malloc(yb + cb);
        REQUIRE(y0 && want && got);
        for (int64_t i = 0; i < rows; i++)
            y0[i] = 0.125f * (float)(i % 7);
        for (size_t f = 0; f < sizeof fl / sizeof fl[0]; f++) {
            /* what st_run writes: the outputs (half as many with SwiGLU
             * pairs), then both caches */
            size_t all = ((fl[f] & LLM_CUDA_MV_SWIGLU_PAIRS) ? yb / 2 : yb) + cb;
            st_shape one = {LLM_TYPE_Q8_0, 1, 0, rows, cols}, two = one, autos = one;
            two.q8_int8 = 3;
            autos.q8_int8 = 4;
            st_run(c, &w, &one, fl[f], 1, dx, dg, freq, y0, -1, 1, want);
            st_run(c, &w, &two, fl[f], 1, dx, dg, freq, y0, -1, 1, got);
            CHECK_INT_EQ(memcmp(got, want, all), 0);
            st_run(c, &w, &autos, fl[f], 1, dx, dg, freq, y0, -1, 1, got);
            int differ = memcmp(got, want, all) != 0;
            if (differ)
                fprintf(stderr, "q8 auto rows %lld flags %u differ\n", (long long)rows, fl[f]);
            CHECK_INT_EQ(differ, 0);
        }
        void *bufs[] = {dx, dg, freq};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            llm_cuda_mfree(c, bufs[i]);
        llm_cuda_weight_release(c, &w);
        void *host[] = {wf, x, g, deq, enc, y0, want, got};
        for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
            free(host[i]);
    }
    CHECK_INT_EQ(llm_cuda_status(c), 0);
    llm_cuda_free(c);
}

/* ---- the loops against the engine ------------------------------------------ */

typedef struct kjv_pair {
    llm_model *tm, *dm;
    llm_session *t, *d, *ref;
    llm_sampler *sp;
    llm_cuda_loop *loop;
} kjv_pair;

static void pair_open(kjv_pair *p, int with_draft)
{
    ct_require_device();
    memset(p, 0, sizeof *p);
    p->tm = open_on(TARGET, "cuda:0");
    p->t = synth_session(p->tm, 512, 32, 1);
    p->ref = synth_session(p->tm, 512, 32, 3);
    if (with_draft) {
        p->dm = open_on(DRAFT, "cuda:0");
        p->d = synth_session(p->dm, 512, 32, 2);
    }
    REQUIRE(llm_sampler_create(NULL, p->tm->hp.n_vocab, &p->sp) == 0);
    char err[256];
    if (llm_cuda_loop_create(p->t, p->d, &p->loop, err, sizeof err) != 0) {
        fprintf(stderr, "loop: %s\n", err);
        exit(1);
    }
}

static void pair_close(kjv_pair *p)
{
    llm_cuda_loop_free(p->loop);
    llm_sampler_free(p->sp);
    llm_session_free(p->t);
    llm_session_free(p->ref);
    if (p->d)
        llm_session_free(p->d);
    llm_model_free(p->tm);
    if (p->dm)
        llm_model_free(p->dm);
}

static void plain_kjv(void)
{
    kjv_pair p;
    pair_open(&p, 0);
    llm_generate_params gp = gen_params(N_TOK);
    int32_t toks[128];
    int differ = 0;
    for (int k = 0; k < N_PROMPTS; k++) {
        size_t n = tokenize(p.tm, k, toks);
        int rr = -1, rl = -1;
        uint32_t pos_ref = 0;
        run_out ref = reference(p.ref, p.sp, toks, n, &gp, 0, &rr, &pos_ref);
        llm_cuda_loop_stats s0, s1;
        llm_cuda_loop_get_stats(p.loop, &s0);
        run_out got = looped(p.loop, p.sp, 0, toks, n, &gp, 0, &rl);
        llm_cuda_loop_get_stats(p.loop, &s1);
        CHECK_U64_EQ(got.n, (uint64_t)N_TOK);
        CHECK_INT_EQ(rl, rr);
        CHECK_INT_EQ(llm_session_pos(p.t), pos_ref);
        /* 63 steps after the prefill's token, in batches of 16. */
        CHECK_U64_EQ(s1.plain_steps - s0.plain_steps, (uint64_t)(N_TOK - 1));
        CHECK_U64_EQ(s1.readbacks - s0.readbacks,
                     (uint64_t)((N_TOK - 1 + LLM_CUDA_LOOP_BATCH - 1) / LLM_CUDA_LOOP_BATCH));
        if (!same(&got, &ref)) {
            fprintf(stderr, "plain prompt %d: loop ids differ from llm_generate\n", k);
            differ++;
        }
    }
    CHECK_INT_EQ(differ, 0);
    llm_cuda_loop_stats st;
    llm_cuda_loop_get_stats(p.loop, &st);
    CHECK_U64_EQ(st.captures, 1); /* one graph, replayed for every step */
    printf("plain loop: %d prompts x %d tokens == llm_generate\n", N_PROMPTS, N_TOK);
    pair_close(&p);
}

static void spec_kjv(void)
{
    kjv_pair p;
    pair_open(&p, 1);
    llm_generate_params gp = gen_params(N_TOK);
    static const int32_t ks[] = {1, 2, 4, 7, 16};
    int32_t toks[128];
    int differ = 0;
    for (int i = 0; i < N_PROMPTS; i++) {
        size_t n = tokenize(p.tm, i, toks);
        int rr = -1;
        uint32_t pos_ref = 0;
        run_out ref = reference(p.ref, p.sp, toks, n, &gp, 0, &rr, &pos_ref);
        int rp = -1;
        run_out plain = looped(p.loop, p.sp, 0, toks, n, &gp, 0, &rp);
        if (!same(&plain, &ref))
            differ++;
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
            llm_cuda_loop_stats s0, s1;
            llm_cuda_loop_get_stats(p.loop, &s0);
            int rs = -1;
            run_out got = looped(p.loop, p.sp, ks[j], toks, n, &gp, 0, &rs);
            llm_cuda_loop_get_stats(p.loop, &s1);
            CHECK_INT_EQ(rs, rr);
            CHECK_INT_EQ(llm_session_pos(p.t), pos_ref);
            CHECK_INT_EQ(llm_session_pos(p.d), pos_ref - 1);
            uint64_t rounds_read = (s1.drafted - s0.drafted) / (uint64_t)ks[j];
            CHECK_U64_EQ((s1.drafted - s0.drafted) % (uint64_t)ks[j], 0);
            CHECK_U64_EQ(s1.committed - s0.committed, s1.accepted - s0.accepted + rounds_read);
            CHECK(s1.rounds - s0.rounds >= rounds_read);
            /* 63 tokens after the prefill's, at most k + 1 a round. */
            CHECK(rounds_read * (uint64_t)(ks[j] + 1) >= (uint64_t)(N_TOK - 1));
            CHECK(rounds_read <= (uint64_t)(N_TOK - 1));
            if (!same(&got, &ref)) {
                fprintf(stderr, "spec prompt %d k=%d: ids differ from llm_generate\n", i,
                        (int)ks[j]);
                differ++;
            }
        }
    }
    CHECK_INT_EQ(differ, 0);
    llm_cuda_loop_stats st;
    llm_cuda_loop_get_stats(p.loop, &st);
    /* One plain graph and a draft and a verify graph per k. */
    CHECK_U64_EQ(st.captures, 1 + 2 * (sizeof ks / sizeof ks[0]));
    printf("spec loop: %d prompts x %d tokens at k = 1, 2, 4, 7, 16 == llm_generate "
           "(acceptance %.3f)\n",
           N_PROMPTS, N_TOK, (double)st.accepted / (double)(st.drafted ? st.drafted : 1));
    pair_close(&p);
}

/* N-gram rounds (the host proposes, the device verifies and accepts) give
 * llm_generate's ids and position; every round commits 1..k+1 tokens and
 * the unmatched tokens are plain steps. */
static void ngram_kjv(void)
{
    kjv_pair p;
    pair_open(&p, 0);
    REQUIRE(llm_cuda_loop_set_drafter(p.loop, LLM_DRAFTER_NGRAM, 0, 0) == 0);
    llm_generate_params gp = gen_params(N_TOK);
    static const int32_t ks[] = {1, 4, 8};
    int32_t toks[128];
    int differ = 0;
    for (int i = 0; i < N_PROMPTS; i++) {
        size_t n = tokenize(p.tm, i, toks);
        int rr = -1;
        uint32_t pos_ref = 0;
        run_out ref = reference(p.ref, p.sp, toks, n, &gp, 0, &rr, &pos_ref);
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
            llm_cuda_loop_stats s0, s1;
            llm_cuda_loop_get_stats(p.loop, &s0);
            int rs = -1;
            run_out got = looped(p.loop, p.sp, ks[j], toks, n, &gp, 0, &rs);
            llm_cuda_loop_get_stats(p.loop, &s1);
            CHECK_INT_EQ(rs, rr);
            CHECK_INT_EQ(llm_session_pos(p.t), pos_ref);
            uint64_t rounds = s1.rounds - s0.rounds, steps = s1.plain_steps - s0.plain_steps;
            CHECK_U64_EQ(s1.committed - s0.committed, s1.accepted - s0.accepted + rounds);
            /* 63 tokens after the prefill's: each plain step gives 1. */
            CHECK(s1.committed - s0.committed + steps >= (uint64_t)(N_TOK - 1));
            CHECK(s1.drafted - s0.drafted <= rounds * (uint64_t)ks[j]);
            CHECK_U64_EQ(s1.readbacks - s0.readbacks, rounds + steps);
            if (!same(&got, &ref)) {
                fprintf(stderr, "ngram prompt %d k=%d: ids differ from llm_generate\n", i,
                        (int)ks[j]);
                differ++;
            }
            /* The same rounds with the lookup on the device. */
            REQUIRE(llm_cuda_loop_set_ngram_device(p.loop, 1) == 0);
            llm_cuda_loop_get_stats(p.loop, &s0);
            got = looped(p.loop, p.sp, ks[j], toks, n, &gp, 0, &rs);
            llm_cuda_loop_get_stats(p.loop, &s1);
            REQUIRE(llm_cuda_loop_set_ngram_device(p.loop, 0) == 0);
            CHECK_INT_EQ(rs, rr);
            CHECK_INT_EQ(llm_session_pos(p.t), pos_ref);
            CHECK(s1.committed - s0.committed >= (uint64_t)(N_TOK - 1));
            CHECK(s1.accepted - s0.accepted <= s1.drafted - s0.drafted);
            CHECK(s1.readbacks - s0.readbacks < s1.rounds - s0.rounds);
            if (!same(&got, &ref)) {
                fprintf(stderr, "device ngram prompt %d k=%d: ids differ from llm_generate\n",
                        i, (int)ks[j]);
                differ++;
            }
        }
    }
    CHECK_INT_EQ(differ, 0);
    llm_cuda_loop_stats st;
    llm_cuda_loop_get_stats(p.loop, &st);
    CHECK(st.rounds > 0);
    printf("ngram loop: %d prompts x %d tokens at k = 1, 4, 8 == llm_generate (%llu rounds, "
           "acceptance %.3f, %llu plain steps)\n",
           N_PROMPTS, N_TOK, (unsigned long long)st.rounds,
           (double)st.accepted / (double)(st.drafted ? st.drafted : 1),
           (unsigned long long)st.plain_steps);
    /* Sampling is refused for n-gram rounds with the device lookup; bad
     * settings too. */
    llm_sampler_params hp = LLM_SAMPLER_PARAMS_INIT;
    hp.temperature = 0.7f;
    llm_sampler *hot = NULL;
    REQUIRE(llm_sampler_create(&hp, p.tm->hp.n_vocab, &hot) == 0);
    size_t n = tokenize(p.tm, 0, toks);
    REQUIRE(llm_cuda_loop_set_ngram_device(p.loop, 1) == 0);
    CHECK_INT_EQ(llm_cuda_loop_generate(p.loop, hot, 4, toks, n, &gp, NULL, NULL, NULL, NULL),
                 LLM_EUNSUP);
    CHECK_STR_EQ(llm_cuda_loop_error(p.loop),
                 "device loop: n-gram rounds with the lookup on the device are greedy only");
    REQUIRE(llm_cuda_loop_set_ngram_device(p.loop, 0) == 0);
    CHECK_INT_EQ(llm_cuda_loop_set_drafter(p.loop, LLM_DRAFTER_HYBRID, 0, 0), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_loop_set_drafter(p.loop, LLM_DRAFTER_NGRAM, 5, 3), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_loop_set_ngram_device(p.loop, 2), LLM_EINVAL);
    llm_sampler_free(hot);
    pair_close(&p);
}

/* One stop condition, both loops against llm_generate. */
static void stop_case(kjv_pair *p, const int32_t *toks, size_t n, const llm_generate_params *gp,
                      int32_t stop_at, const char *what)
{
    int rr = -1;
    uint32_t pos_ref = 0;
    run_out ref = reference(p->ref, p->sp, toks, n, gp, stop_at, &rr, &pos_ref);
    static const int32_t ks[] = {0, 3};
    for (size_t j = 0; j < 2; j++) {
        int rl = -1;
        run_out got = looped(p->loop, p->sp, ks[j], toks, n, gp, stop_at, &rl);
        if (!same(&got, &ref) || rl != rr || llm_session_pos(p->t) != pos_ref)
            fprintf(stderr, "%s k=%d: %zu tokens reason %d pos %u; llm_generate %zu, %d, %u\n",
                    what, (int)ks[j], got.n, rl, (unsigned)llm_session_pos(p->t), ref.n, rr,
                    (unsigned)pos_ref);
        CHECK(same(&got, &ref));
        CHECK_INT_EQ(rl, rr);
        CHECK_INT_EQ(llm_session_pos(p->t), pos_ref);
    }
    /* And n-gram rounds. */
    REQUIRE(llm_cuda_loop_set_drafter(p->loop, LLM_DRAFTER_NGRAM, 0, 0) == 0);
    int rl = -1;
    run_out got = looped(p->loop, p->sp, 4, toks, n, gp, stop_at, &rl);
    REQUIRE(llm_cuda_loop_set_drafter(p->loop, LLM_DRAFTER_MODEL, 0, 0) == 0);
    if (!same(&got, &ref) || rl != rr || llm_session_pos(p->t) != pos_ref)
        fprintf(stderr, "%s ngram: %zu tokens reason %d pos %u; llm_generate %zu, %d, %u\n", what,
                got.n, rl, (unsigned)llm_session_pos(p->t), ref.n, rr, (unsigned)pos_ref);
    CHECK(same(&got, &ref));
    CHECK_INT_EQ(rl, rr);
    CHECK_INT_EQ(llm_session_pos(p->t), pos_ref);
}

static void stops(void)
{
    kjv_pair p;
    pair_open(&p, 1);
    int32_t toks[128];
    size_t n = tokenize(p.tm, 0, toks);
    llm_generate_params gp = gen_params(N_TOK);
    int rr = -1;
    uint32_t pos_ref = 0;
    run_out ref = reference(p.ref, p.sp, toks, n, &gp, 0, &rr, &pos_ref);
    /* A stop token: the 10th generated id (not emitted, nor what follows). */
    int32_t stop_tok = ref.toks[9];
    gp.stop_tokens = &stop_tok;
    gp.n_stop_tokens = 1;
    stop_case(&p, toks, n, &gp, 0, "stop token");
    gp.n_stop_tokens = 0;
    gp.stop_tokens = NULL;
    stop_case(&p, toks, n, &gp, 7, "callback");
    gp.max_tokens = 1;
    stop_case(&p, toks, n, &gp, 0, "max_tokens 1");
    gp.max_tokens = 37;
    stop_case(&p, toks, n, &gp, 0, "max_tokens 37");
    gp.max_tokens = N_TOK;
    gp.stop_at_eos = 1;
    for (int i = 0; i < N_PROMPTS; i++) {
        size_t m = tokenize(p.tm, i, toks);
        stop_case(&p, toks, m, &gp, 0, "eos");
    }
    pair_close(&p);
}

/* ---- sampling ------------------------------------------------------------- */

#define LAW_RUNS 1200


static void sampled_law(void)
{
    kjv_pair p;
    pair_open(&p, 1);
    int32_t toks[128];
    size_t n = tokenize(p.tm, 0, toks);
    int32_t v = p.tm->hp.n_vocab;
    llm_sampler_params sp = LLM_SAMPLER_PARAMS_INIT;
    sp.temperature = 0.7f;
    llm_sampler *hot = NULL;
    REQUIRE(llm_sampler_create(&sp, v, &hot) == 0);
    llm_generate_params gp = gen_params(3);
    int *hist = calloc((size_t)6 * (size_t)v, sizeof *hist); /* [method][token 2, 3][v] */
    REQUIRE(hist);
    int first_differs = 0;
    for (int r = 0; r < LAW_RUNS; r++) {
        run_out o[3];
        for (int m = 0; m < 3; m++) {
            memset(&o[m], 0, sizeof o[m]);
            llm_sampler_reseed(hot, 1000u + (uint64_t)r);
            if (m == 0) {
                llm_session_reset(p.ref);
                REQUIRE(llm_generate(p.ref, hot, toks, n, &gp, collect, &o[m], NULL, NULL) == 0);
            } else {
                o[m] = looped(p.loop, hot, m == 1 ? 0 : 3, toks, n, &gp, 0, NULL);
            }
            REQUIRE(o[m].n == 3);
            for (int j = 0; j < 2; j++)
                hist[((size_t)m * 2 + (size_t)j) * (size_t)v + (size_t)o[m].toks[1 + j]]++;
        }
        /* The first token is the host's draw from the prefill on every path. */
        first_differs += o[1].toks[0] != o[0].toks[0] || o[2].toks[0] != o[0].toks[0];
    }
    CHECK_INT_EQ(first_differs, 0);
    for (int m = 1; m < 3; m++)
        for (int j = 0; j < 2; j++) {
            int df = 0;
            double x = ct_chi2_two(hist + (size_t)j * (size_t)v,
                                hist + ((size_t)m * 2 + (size_t)j) * (size_t)v, v, &df);
            double bound = ct_chi2_bound(df);
            printf("sampled law: %s token %d: chi2 %.1f, df %d (bound %.1f)\n",
                   m == 1 ? "plain loop" : "rounds k=3", 2 + j, x, df, bound);
            CHECK(x < bound);
        }
    /* The same seed repeats a sampled run exactly. */
    llm_generate_params g16 = gen_params(16);
    llm_sampler_reseed(hot, 5);
    run_out a = looped(p.loop, hot, 3, toks, n, &g16, 0, NULL);
    llm_sampler_reseed(hot, 5);
    run_out b = looped(p.loop, hot, 3, toks, n, &g16, 0, NULL);
    CHECK(same(&a, &b));
    llm_cuda_loop_stats st;
    llm_cuda_loop_get_stats(p.loop, &st);
    printf("sampled rounds: acceptance %.3f\n",
           (double)st.accepted / (double)(st.drafted ? st.drafted : 1));
    free(hist);
    llm_sampler_free(hot);
    pair_close(&p);
}

/* Prompt 0 and then its text again (no second BOS): text that repeats,
 * which the n-gram's lookup finds once a sampled token follows it. */
static size_t doubled_prompt(llm_model *m, int32_t *toks)
{
    size_t n = tokenize(m, 0, toks);
    REQUIRE(2 * n - 1 <= 128);
    memcpy(toks + n, toks + 1, (n - 1) * sizeof *toks);
    return 2 * n - 1;
}

/* N-gram rounds under sampling: proposals are deterministic (q one-hot),
 * kept with probability p(d), the residual p without d; the law is the
 * target's, and rounds did propose. */
static void sampled_law_ngram(void)
{
    kjv_pair p;
    pair_open(&p, 0);
    int32_t toks[128];
    size_t n = doubled_prompt(p.tm, toks);
    llm_sampler_params sp = LLM_SAMPLER_PARAMS_INIT;
    sp.temperature = 0.7f;
    llm_sampler *hot = NULL;
    REQUIRE(llm_sampler_create(&sp, p.tm->hp.n_vocab, &hot) == 0);
    REQUIRE(llm_cuda_loop_set_drafter(p.loop, LLM_DRAFTER_NGRAM, 0, 0) == 0);
    ct_law_check(p.ref, p.loop, hot, 3, toks, n, 12, "n-gram rounds k=3");
    llm_cuda_loop_stats st;
    llm_cuda_loop_get_stats(p.loop, &st);
    CHECK(st.rounds > 0);            /* proposals were made */
    CHECK(st.drafted > st.accepted); /* some were turned down */
    CHECK(st.accepted > 0);
    printf("sampled n-gram rounds: %llu rounds, acceptance %.3f\n",
           (unsigned long long)st.rounds,
           (double)st.accepted / (double)(st.drafted ? st.drafted : 1));
    /* The same seed repeats a sampled run exactly. */
    llm_generate_params g16 = gen_params(16);
    llm_sampler_reseed(hot, 5);
    run_out a = looped(p.loop, hot, 4, toks, n, &g16, 0, NULL);
    llm_sampler_reseed(hot, 5);
    run_out b = looped(p.loop, hot, 4, toks, n, &g16, 0, NULL);
    CHECK(same(&a, &b));
    llm_sampler_free(hot);
    pair_close(&p);
}

/* ---- refusals ------------------------------------------------------------ */

/* Without a device: a CPU session is refused at creation. */
static void refusals_cpu(void)
{
    llm_model *m = open_on(TARGET, "cpu");
    llm_session *s = synth_session(m, 64, 8, 1);
    llm_cuda_loop *l = (llm_cuda_loop *)1;
    char err[256] = "";
    CHECK_INT_EQ(llm_cuda_loop_create(s, NULL, &l, err, sizeof err), LLM_EUNSUP);
    CHECK(l == NULL);
    CHECK_STR_EQ(err, "device loop: the target session is not on a CUDA backend");
    CHECK_INT_EQ(llm_cuda_loop_create(NULL, NULL, &l, err, sizeof err), LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_loop_generate(NULL, NULL, 0, NULL, 0, NULL, NULL, NULL, NULL, NULL),
                 LLM_EINVAL);
    llm_cuda_loop_free(NULL);
    llm_session_free(s);
    llm_model_free(m);
}

static void refusals(void)
{
    kjv_pair p;
    pair_open(&p, 0);
    int32_t toks[128];
    size_t n = tokenize(p.tm, 0, toks);
    llm_generate_params gp = gen_params(8);
    llm_sampler_params sp = LLM_SAMPLER_PARAMS_INIT;
    sp.temperature = 0.7f;
    sp.top_k = 40;
    llm_sampler *hot = NULL;
    REQUIRE(llm_sampler_create(&sp, p.tm->hp.n_vocab, &hot) == 0);
    CHECK_INT_EQ(llm_cuda_loop_generate(p.loop, hot, 0, toks, n, &gp, NULL, NULL, NULL, NULL),
                 LLM_EUNSUP);
    CHECK_STR_EQ(llm_cuda_loop_error(p.loop),
                 "device loop: a top-k or top-p cut is not supported; temperature only");
    CHECK_INT_EQ(llm_cuda_loop_generate(p.loop, p.sp, 2, toks, n, &gp, NULL, NULL, NULL, NULL),
                 LLM_EINVAL);
    CHECK_INT_EQ(llm_cuda_loop_generate(p.loop, p.sp, LLM_CUDA_LOOP_K_MAX + 1, toks, n, &gp,
                                        NULL, NULL, NULL, NULL),
                 LLM_EINVAL);
    llm_sampler_free(hot);
    pair_close(&p);
}

static const ct_case cases[] = {
    {"rows_bits", rows_bits},
    {"rows_stationary", rows_stationary},
    {"q8_auto_bits", q8_auto_bits},
    {"plain_kjv", plain_kjv},
    {"spec_kjv", spec_kjv},
    {"ngram_kjv", ngram_kjv},
    {"stops", stops},
    {"sampled_law", sampled_law},
    {"sampled_law_ngram", sampled_law_ngram},
    {"refusals_cpu", refusals_cpu},
    {"refusals", refusals},
};

CT_MAIN(cases)
