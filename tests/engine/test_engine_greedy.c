/* test_engine_greedy — greedy ids asked of the forward (LLM_OUTPUT_ARGMAX)
 * and taken by a backend's argmax op (backend.h, runner.h, session.h), on
 * the CPU.
 *
 * The CPU backend has no argmax op; each case that needs one gives the
 * model's CPU backend a copy of its operation table with an argmax written
 * here (a plain scan of the logits it is handed, counted) and a read that
 * counts bytes, and marks the backend's memory as not host-visible, so the
 * session reads its logits through that read as it would from a GPU. The
 * device path must then give exactly the token ids of the host path (the
 * same session switched off with llm_session_set_device_argmax), of a loop
 * of llm_prefill/llm_decode and argmax written here, and read no logits at
 * all; a split session (two local shards) takes the same path. Every case
 * the path does not cover (sampled, a sampler over another vocabulary, no
 * op, the environment switch) must leave the op unused and the tokens
 * unchanged. The speculative generator's
 * greedy rounds (spec.c) take the same path for its target and its draft:
 * with either, both or neither on the device, its ids are the target's own
 * greedy ids, and with both on it reads no logits.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "phasemark/engine.h"
#include "phasemark/spec.h"
#include "pm_check.h"
#include "session.h"
#include "synth.h"

#define MAX_TOK 64

/* The wrapped backend: counts of the op's calls and of bytes read. */
static const llm_backend_ops *g_cpu_ops;
static llm_backend_ops g_mock_ops;
static long g_argmax_calls;
static long g_argmax_rows;
static size_t g_read_bytes;
static long g_fail_at = -1; /* the op call that reports a failure; -1: none */

static int mock_argmax(llm_backend *be, const float *logits, int32_t rows, int32_t n,
                       int32_t *out)
{
    (void)be;
    if (g_argmax_calls++ == g_fail_at)
        return -1;
    for (int32_t r = 0; r < rows; r++) {
        const float *x = logits + (size_t)r * (size_t)n;
        int32_t b = 0;
        for (int32_t i = 1; i < n; i++)
            if (x[i] > x[b])
                b = i;
        out[r] = b;
        g_argmax_rows++;
    }
    return 0;
}

static void mock_read(llm_backend *be, void *dst, const void *src, size_t bytes)
{
    g_read_bytes += bytes;
    g_cpu_ops->read(be, dst, src, bytes);
}

/* with_op: give the CPU backend the argmax op (else only the counting
 * read). Sessions must be created after this. */
static void wrap_backend(llm_model *m, int with_op)
{
    g_cpu_ops = m->be->ops;
    g_mock_ops = *g_cpu_ops;
    g_mock_ops.read = mock_read;
    g_mock_ops.argmax = with_op ? mock_argmax : NULL;
    m->be->ops = &g_mock_ops;
    m->be->host_visible = 0;
}

static void unwrap_backend(llm_model *m)
{
    m->be->ops = g_cpu_ops;
    m->be->host_visible = 1;
}

static void reset_counts(void)
{
    g_argmax_calls = 0;
    g_argmax_rows = 0;
    g_read_bytes = 0;
    g_fail_at = -1;
}

typedef struct run_out {
    int32_t toks[MAX_TOK];
    size_t n;
    int rc, reason;
    uint32_t pos;
} run_out;

static int collect(void *user, int32_t tok)
{
    run_out *o = user;
    REQUIRE(o->n < MAX_TOK);
    o->toks[o->n++] = tok;
    return 0;
}

static llm_sampler *make_sampler(float temp, int32_t n_vocab)
{
    llm_sampler_params p = LLM_SAMPLER_PARAMS_INIT;
    p.temperature = temp;
    p.top_k = 40;
    p.seed = 7;
    llm_sampler *sp = NULL;
    REQUIRE(llm_sampler_create(&p, n_vocab, &sp) == 0);
    return sp;
}

static run_out generate(llm_session *s, llm_sampler *sp, const int32_t *prompt, size_t n,
                        int32_t max_tokens, int32_t chunk)
{
    run_out o;
    memset(&o, 0, sizeof o);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = max_tokens;
    gp.chunk = chunk;
    size_t gen = 0;
    llm_session_reset(s);
    o.rc = llm_generate(s, sp, prompt, n, &gp, collect, &o, &gen, &o.reason);
    CHECK_INT_EQ((long)gen, (long)o.n);
    o.pos = llm_session_pos(s);
    return o;
}

static void check_same(const run_out *a, const run_out *b)
{
    CHECK_INT_EQ(a->rc, b->rc);
    CHECK_INT_EQ(a->reason, b->reason);
    CHECK_INT_EQ((long)a->n, (long)b->n);
    CHECK_INT_EQ((long)a->pos, (long)b->pos);
    for (size_t i = 0; i < a->n && i < b->n; i++)
        CHECK_INT_EQ(a->toks[i], b->toks[i]);
}

static llm_model *open_model(const char *tag)
{
    synth_spec spec = synth_default();
    char path[512];
    synth_path(path, sizeof path, tag);
    REQUIRE(synth_write(path, &spec) == 0);
    return synth_open(path, 2);
}

static int32_t vocab_of(const llm_model *m)
{
    llm_model_info info;
    llm_model_get_info(m, &info);
    return info.n_vocab;
}

static const int32_t prompt_a[7] = {4, 8, 15, 16, 23, 42, 3};
static const int32_t prompt_b[2] = {99, 1};

/* The greedy continuation by hand: llm_prefill/llm_decode and a scan. */
static void by_hand(llm_session *s, const int32_t *prompt, size_t n, int32_t steps,
                    int32_t vocab, int32_t *want)
{
    const float *lg = NULL;
    llm_session_reset(s);
    REQUIRE(llm_prefill(s, prompt, n, 0, &lg) == 0);
    for (int32_t i = 0; i < steps; i++) {
        int32_t b = 0;
        for (int32_t j = 1; j < vocab; j++)
            if (lg[j] > lg[b])
                b = j;
        want[i] = b;
        if (i + 1 < steps)
            REQUIRE(llm_decode(s, b, &lg) == 0);
    }
}

/* Device path and host path give the hand loop's ids; only the device path
 * calls the op, once per token, and it reads no logits. */
static void greedy_same_tokens(void)
{
    llm_model *m = open_model("greedy_same");
    int32_t vocab = vocab_of(m);
    wrap_backend(m, 1);
    llm_session *s = synth_session(m, 64, 4, 1);
    llm_sampler *sp = make_sampler(0.0f, vocab);
    CHECK_INT_EQ(llm_session_device_argmax(s), 1);
    const int32_t *prompts[2] = {prompt_a, prompt_b};
    size_t lens[2] = {7, 2};
    for (int k = 0; k < 2; k++) {
        for (int32_t chunk = 0; chunk <= 3; chunk += 3) {
            int32_t want[24];
            by_hand(s, prompts[k], lens[k], 24, vocab, want);

            llm_session_set_device_argmax(s, 1);
            reset_counts();
            run_out dev = generate(s, sp, prompts[k], lens[k], 24, chunk);
            CHECK_INT_EQ(dev.rc, 0);
            CHECK_INT_EQ((long)dev.n, 24);
            CHECK_INT_EQ(g_argmax_calls, 24); /* the prefill's and 23 decodes' */
            CHECK_INT_EQ((long)g_read_bytes, 0);
            llm_timings t;
            llm_session_get_timings(s, &t);
            CHECK_INT_EQ((long)t.decode_tokens, 23);
            CHECK_INT_EQ((long)t.prefill_tokens, (long)lens[k]);

            llm_session_set_device_argmax(s, 0);
            CHECK_INT_EQ(llm_session_device_argmax(s), 0);
            reset_counts();
            run_out host = generate(s, sp, prompts[k], lens[k], 24, chunk);
            CHECK_INT_EQ(g_argmax_calls, 0);
            CHECK(g_read_bytes >= 24 * (size_t)vocab * sizeof(float));

            check_same(&dev, &host);
            for (int i = 0; i < 24; i++)
                CHECK_INT_EQ(dev.toks[i], want[i]);
        }
    }
    llm_sampler_free(sp);
    llm_session_free(s);
    unwrap_backend(m);
    llm_model_free(m);
}

static int stop_after_three(void *user, int32_t tok)
{
    run_out *o = user;
    collect(user, tok);
    return o->n >= 3;
}

/* Every stop reason comes out the same on both paths. */
static void greedy_stops(void)
{
    llm_model *m = open_model("greedy_stops");
    int32_t vocab = vocab_of(m);
    wrap_backend(m, 1);
    llm_sampler *sp = make_sampler(0.0f, vocab);
    llm_session *small = synth_session(m, 12, 4, 1); /* fills after 5 decodes */
    llm_session *s = synth_session(m, 64, 4, 1);
    run_out r[2][4];
    for (int dev = 1; dev >= 0; dev--) {
        llm_session_set_device_argmax(s, dev);
        llm_session_set_device_argmax(small, dev);
        reset_counts();
        r[dev][0] = generate(small, sp, prompt_a, 7, 40, 0);
        CHECK_INT_EQ(r[dev][0].reason, LLM_STOP_CONTEXT);
        CHECK_INT_EQ((long)r[dev][0].pos, 12);

        int32_t first = r[dev][0].toks[0];
        llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
        gp.max_tokens = 10;
        gp.stop_tokens = &first;
        gp.n_stop_tokens = 1;
        run_out *o = &r[dev][1];
        memset(o, 0, sizeof *o);
        llm_session_reset(s);
        o->rc = llm_generate(s, sp, prompt_a, 7, &gp, collect, o, NULL, &o->reason);
        o->pos = llm_session_pos(s);
        CHECK_INT_EQ(o->reason, LLM_STOP_TOKEN);
        CHECK_INT_EQ((long)o->n, 0);

        gp.n_stop_tokens = 0;
        o = &r[dev][2];
        memset(o, 0, sizeof *o);
        llm_session_reset(s);
        o->rc = llm_generate(s, sp, prompt_a, 7, &gp, stop_after_three, o, NULL, &o->reason);
        o->pos = llm_session_pos(s);
        CHECK_INT_EQ(o->reason, LLM_STOP_CALLBACK);

        r[dev][3] = generate(s, sp, prompt_b, 2, 5, 1);
        CHECK_INT_EQ(r[dev][3].reason, LLM_STOP_LENGTH);
        CHECK_INT_EQ(g_argmax_calls > 0, dev);
    }
    for (int i = 0; i < 4; i++)
        check_same(&r[1][i], &r[0][i]);
    llm_sampler_free(sp);
    llm_session_free(s);
    llm_session_free(small);
    unwrap_backend(m);
    llm_model_free(m);
}

/* After a device-path generate the session goes on through the public
 * calls with host logits bit for bit those of a host-path session. */
static void greedy_then_decode(void)
{
    llm_model *m = open_model("greedy_decode");
    int32_t vocab = vocab_of(m);
    wrap_backend(m, 1);
    llm_sampler *sp = make_sampler(0.0f, vocab);
    llm_session *a = synth_session(m, 64, 4, 1), *b = synth_session(m, 64, 4, 1);
    llm_session_set_device_argmax(b, 0);
    run_out ra = generate(a, sp, prompt_a, 7, 6, 0);
    run_out rb = generate(b, sp, prompt_a, 7, 6, 0);
    check_same(&ra, &rb);
    const float *la = NULL, *lb = NULL;
    REQUIRE(llm_decode(a, ra.toks[5], &la) == 0);
    REQUIRE(llm_decode(b, rb.toks[5], &lb) == 0);
    CHECK(memcmp(la, lb, (size_t)vocab * sizeof(float)) == 0);
    const int32_t draft[3] = {5, 6, 7};
    REQUIRE(llm_verify(a, draft, 3, &la) == 0);
    REQUIRE(llm_verify(b, draft, 3, &lb) == 0);
    CHECK(memcmp(la, lb, 3 * (size_t)vocab * sizeof(float)) == 0);
    llm_sampler_free(sp);
    llm_session_free(a);
    llm_session_free(b);
    unwrap_backend(m);
    llm_model_free(m);
}

/* A failure reported by the op is LLM_EBACKEND and leaves the position. */
static void greedy_failure(void)
{
    llm_model *m = open_model("greedy_fail");
    int32_t vocab = vocab_of(m);
    wrap_backend(m, 1);
    llm_sampler *sp = make_sampler(0.0f, vocab);
    llm_session *s = synth_session(m, 64, 4, 1);
    reset_counts();
    g_fail_at = 3; /* the third decode */
    run_out o = generate(s, sp, prompt_a, 7, 10, 0);
    CHECK_INT_EQ(o.rc, LLM_EBACKEND);
    CHECK_INT_EQ((long)o.n, 3);
    CHECK_INT_EQ((long)o.pos, 7 + 2);
    CHECK(strstr(llm_session_error(s), "argmax") != NULL);
    /* Argmax asked with no room for the ids, of no session, or of a token
     * outside the vocabulary: refused, nothing written. */
    int32_t tok = -5;
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.output = LLM_OUTPUT_ARGMAX;
    CHECK_INT_EQ(llm_forward(s, &fp, prompt_b, 2, NULL, NULL), LLM_EINVAL);
    fp.phase = PM_PHASE_DECODE;
    int32_t one = 1, bad = vocab;
    CHECK_INT_EQ(llm_forward(NULL, &fp, &one, 1, NULL, &tok), LLM_EINVAL);
    CHECK_INT_EQ(llm_forward(s, &fp, &bad, 1, NULL, &tok), LLM_ETOKEN);
    CHECK_INT_EQ(tok, -5);
    llm_sampler_free(sp);
    llm_session_free(s);
    unwrap_backend(m);
    llm_model_free(m);
}

/* A split of two local shards on the model asks its last shard's runner
 * for the ids: the op once per token, no logits and (the shards share a
 * workspace) no activations read, the host path's tokens. */
static void greedy_split(void)
{
    llm_model *m = open_model("greedy_split");
    int32_t vocab = vocab_of(m);
    llm_model_info info;
    llm_model_get_info(m, &info);
    wrap_backend(m, 1);
    llm_sampler *sp = make_sampler(0.0f, vocab);
    llm_session *ref = synth_session(m, 64, 4, 1);
    llm_session_set_device_argmax(ref, 0);
    char placement[64];
    snprintf(placement, sizeof placement, "0-0@local,1-%d@local", (int)info.n_layers - 1);
    llm_session_options o = LLM_SESSION_OPTIONS_INIT;
    o.n_ctx = 64;
    o.n_batch = 4;
    o.placement = placement;
    char err[256];
    llm_session *s = NULL;
    REQUIRE(llm_session_create(m, &o, &s, err, sizeof err) == 0);
    CHECK_INT_EQ(llm_session_device_argmax(s), 1);
    reset_counts();
    run_out got = generate(s, sp, prompt_a, 7, 16, 3);
    CHECK_INT_EQ(got.rc, 0);
    CHECK_INT_EQ(g_argmax_calls, 16);
    CHECK_INT_EQ((long)g_read_bytes, 0);
    reset_counts();
    run_out want = generate(ref, sp, prompt_a, 7, 16, 3);
    CHECK_INT_EQ(g_argmax_calls, 0);
    check_same(&got, &want);
    llm_sampler_free(sp);
    llm_session_free(s);
    llm_session_free(ref);
    unwrap_backend(m);
    llm_model_free(m);
}

/* The cases the path does not take: the op is never called and the tokens
 * are those of the host path. kind: "sampled", "vocab", "no_op", "env". */
static void fallback(const char *kind)
{
    llm_model *m = open_model(kind);
    int32_t vocab = vocab_of(m);
    int no_op = strcmp(kind, "no_op") == 0;
    wrap_backend(m, !no_op);
    float temp = strcmp(kind, "sampled") == 0 ? 0.8f : 0.0f;
    int32_t sp_vocab = strcmp(kind, "vocab") == 0 ? vocab - 10 : vocab;
    llm_sampler *sp = make_sampler(temp, sp_vocab);
    llm_session *ref = synth_session(m, 64, 4, 1);
    llm_session_set_device_argmax(ref, 0);
    llm_session *s = NULL;
    if (strcmp(kind, "env") == 0) {
        REQUIRE(setenv("PHASEMARK_DEVICE_ARGMAX", "0", 1) == 0);
        s = synth_session(m, 64, 4, 1);
        REQUIRE(unsetenv("PHASEMARK_DEVICE_ARGMAX") == 0);
    } else {
        s = synth_session(m, 64, 4, 1);
    }
    CHECK_INT_EQ(llm_session_device_argmax(s), strcmp(kind, "sampled") == 0 ||
                                                   strcmp(kind, "vocab") == 0);
    llm_sampler_reseed(sp, 7);
    reset_counts();
    run_out got = generate(s, sp, prompt_a, 7, 16, 3);
    CHECK_INT_EQ(g_argmax_calls, 0);
    CHECK(g_read_bytes > 0);
    CHECK_INT_EQ(got.rc, 0);
    llm_sampler_reseed(sp, 7);
    run_out want = generate(ref, sp, prompt_a, 7, 16, 3);
    check_same(&got, &want);
    llm_sampler_free(sp);
    llm_session_free(s);
    llm_session_free(ref);
    unwrap_backend(m);
    llm_model_free(m);
}

/* One greedy llm_spec_generate of up to max_tokens after prompt_a. */
static run_out spec_run(llm_spec *sd, llm_session *t, llm_session *d, llm_sampler *sp,
                        int t_dev, int d_dev, int32_t max_tokens, llm_spec_stats *st)
{
    run_out o;
    memset(&o, 0, sizeof o);
    llm_session_set_device_argmax(t, t_dev);
    llm_session_set_device_argmax(d, d_dev);
    llm_session_reset(t); /* position 0: the generator starts over */
    llm_spec_reset_stats(sd);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = max_tokens;
    gp.stop_at_eos = 0;
    o.rc = llm_spec_generate(sd, sp, prompt_a, 7, &gp, collect, &o, NULL, &o.reason);
    if (o.rc)
        fprintf(stderr, "spec: %s\n", llm_spec_error(sd));
    o.pos = llm_session_pos(t);
    llm_spec_get_stats(sd, st);
    return o;
}

/* Speculative greedy rounds over a two-layer target drafted by a
 * one-layer model (same: by a second copy of the target): the target's
 * greedy ids whichever session takes its tokens on the device; with both,
 * no logits are read. A short context brings in the plain target steps. */
static void spec_greedy_with(int same)
{
    synth_spec spec = synth_default();
    spec.hp.ctx = 64;
    char tp[512], dp[512];
    synth_path(tp, sizeof tp, "greedy_spec_t");
    synth_path(dp, sizeof dp, "greedy_spec_d");
    REQUIRE(synth_write(tp, &spec) == 0);
    if (!same)
        spec.hp.n_layers = 1;
    REQUIRE(synth_write(dp, &spec) == 0);
    llm_model *tm = synth_open(tp, 2), *dm = synth_open(dp, 2);
    int32_t vocab = vocab_of(tm);
    wrap_backend(tm, 1);
    wrap_backend(dm, 1);
    llm_sampler *sp = make_sampler(0.0f, vocab);
    for (int32_t n_ctx = 64; n_ctx >= 20; n_ctx -= 44) {
        llm_session *t = synth_session(tm, n_ctx, 8, 1), *d = synth_session(dm, n_ctx, 8, 2);
        llm_session_set_device_argmax(t, 0);
        run_out want = generate(t, sp, prompt_a, 7, 40, 0); /* plain, host path */
        llm_spec_params prm = LLM_SPEC_PARAMS_INIT;
        prm.k = 3;
        prm.adaptive = 1;
        llm_spec *sd = NULL;
        char err[256];
        REQUIRE(llm_spec_create(t, d, &prm, &sd, err, sizeof err) == 0);
        llm_spec_stats st_host, st;
        reset_counts();
        run_out host = spec_run(sd, t, d, sp, 0, 0, 40, &st_host);
        CHECK_INT_EQ(g_argmax_calls, 0);
        CHECK(st_host.rounds > 0);
        /* The one-layer draft is always refused here, the target's own
         * model always accepted: both outcomes of a round occur. */
        if (same)
            CHECK(st_host.accepted > 0);
        else
            CHECK(st_host.accepted < st_host.drafted);
        if (n_ctx < 40)
            CHECK(st_host.steps > 0); /* no room to draft near the end */
        for (int mask = 1; mask <= 3; mask++) {
            reset_counts();
            run_out got = spec_run(sd, t, d, sp, mask & 1, mask >> 1, 40, &st);
            CHECK(g_argmax_calls > 0);
            if (mask == 3)
                CHECK_INT_EQ((long)g_read_bytes, 0);
            check_same(&got, &host);
            CHECK_U64_EQ(st.rounds, st_host.rounds);
            CHECK_U64_EQ(st.accepted, st_host.accepted);
            CHECK_U64_EQ(st.steps, st_host.steps);
        }
        /* Speculative greedy output is the target's own. */
        CHECK_INT_EQ(host.reason, want.reason);
        CHECK_INT_EQ((long)host.n, (long)want.n);
        for (size_t i = 0; i < host.n && i < want.n; i++)
            CHECK_INT_EQ(host.toks[i], want.toks[i]);
        llm_spec_free(sd);
        llm_session_free(t);
        llm_session_free(d);
    }
    llm_sampler_free(sp);
    unwrap_backend(tm);
    unwrap_backend(dm);
    llm_model_free(tm);
    llm_model_free(dm);
    remove(tp);
    remove(dp);
}

static void spec_greedy(void)
{
    spec_greedy_with(0);
    spec_greedy_with(1);
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    if (strcmp(c, "same_tokens") == 0)
        greedy_same_tokens();
    else if (strcmp(c, "stops") == 0)
        greedy_stops();
    else if (strcmp(c, "then_decode") == 0)
        greedy_then_decode();
    else if (strcmp(c, "failure") == 0)
        greedy_failure();
    else if (strcmp(c, "spec") == 0)
        spec_greedy();
    else if (strcmp(c, "split") == 0)
        greedy_split();
    else if (strncmp(c, "fallback_", 9) == 0)
        fallback(c + 9);
    else {
        fprintf(stderr, "usage: test_engine_greedy CASE\n");
        return 2;
    }
    return pm_check_result();
}
