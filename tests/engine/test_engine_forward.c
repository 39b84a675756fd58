/* test_engine_forward — the forward's explicit output request, end to end
 * on the CPU: llm_forward's validation, the rows it hands back, the span
 * runner's own checks and host argmax, and the one backend-name parser.
 *
 *   params   every malformed llm_forward is LLM_EINVAL with a line, runs
 *            nothing and leaves the position where it was
 *   rows     the last `rows` rows of a forward are bit for bit the rows an
 *            every-row forward gives them; argmax ids are the sampler's
 *            argmax of those rows; "nothing" moves the position only
 *   runner   llm_runner_run refuses an output a span cannot give, and its
 *            host argmax (the CPU backend has no op) is the sampler's
 *   names    backend names accepted, refused and compared
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_name.h"
#include "phasemark/engine.h"
#include "pm_check.h"
#include "runner.h"
#include "session.h"
#include "synth.h"

static char g_path[512];

static llm_model *model(void)
{
    synth_spec sp = synth_default();
    synth_path(g_path, sizeof g_path, "forward");
    REQUIRE(synth_write(g_path, &sp) == 0);
    return synth_open(g_path, 2);
}

static int32_t vocab_of(const llm_model *m)
{
    llm_model_info info;
    llm_model_get_info(m, &info);
    return info.n_vocab;
}

static const int32_t toks[8] = {3, 1, 4, 1, 5, 9, 2, 6};

/* One refused llm_forward: its status, a line naming the problem, no
 * position moved. */
static void refused(llm_session *s, const llm_forward_params *p, size_t n, int32_t *ids,
                    int code, const char *text)
{
    const float *lg = (const float *)1;
    uint32_t pos = llm_session_pos(s);
    CHECK_INT_EQ(llm_forward(s, p, toks, n, &lg, ids), code);
    CHECK_INT_EQ(llm_session_pos(s), pos);
    CHECK(lg == (const float *)1);
    if (!strstr(llm_session_error(s), text))
        fprintf(stderr, "'%s' lacks '%s'\n", llm_session_error(s), text);
    CHECK(strstr(llm_session_error(s), text) != NULL);
}

static int case_params(void)
{
    llm_model *m = model();
    llm_session *s = synth_session(m, 64, 4, 1);
    int32_t ids[8];
    llm_forward_params p = LLM_FORWARD_PARAMS_INIT;
    CHECK_INT_EQ(llm_forward(NULL, &p, toks, 1, NULL, NULL), LLM_EINVAL);
    CHECK_INT_EQ(llm_forward(s, NULL, toks, 1, NULL, NULL), LLM_EINVAL);
    llm_forward_params q = p;
    q.version = 2;
    refused(s, &q, 1, NULL, LLM_EINVAL, "params version 2");
    q = p;
    q.size = 8;
    refused(s, &q, 1, NULL, LLM_EINVAL, "size 8 not understood");
    q = p;
    q.phase = PM_PHASE_BATCHED;
    refused(s, &q, 1, NULL, LLM_EINVAL, "phase 4 is not exact, decode or verify");
    q.phase = PM_PHASE_NONE;
    refused(s, &q, 1, NULL, LLM_EINVAL, "phase 0");
    q = p;
    q.phase = PM_PHASE_DECODE;
    refused(s, &q, 2, NULL, LLM_EINVAL, "2 tokens exceed the batch of 1");
    q.phase = PM_PHASE_VERIFY;
    refused(s, &q, 5, NULL, LLM_EINVAL, "5 tokens exceed the batch of 4");
    q = p;
    q.output = 3;
    refused(s, &q, 1, NULL, LLM_EINVAL, "output 3 is not none, logits or argmax");
    q.output = -1;
    refused(s, &q, 1, NULL, LLM_EINVAL, "output -1");
    q = p;
    q.rows = 0;
    refused(s, &q, 3, NULL, LLM_EINVAL, "0 rows asked of a last forward of 3 tokens");
    q.rows = 4;
    refused(s, &q, 3, NULL, LLM_EINVAL, "4 rows asked of a last forward of 3 tokens");
    /* A prefill of 7 in chunks of 4 hands back rows of its last chunk: 3. */
    q.chunk = 4;
    refused(s, &q, 7, NULL, LLM_EINVAL, "4 rows asked of a last forward of 3 tokens");
    q.rows = 3;
    q.output = LLM_OUTPUT_ARGMAX;
    refused(s, &q, 7, NULL, LLM_EINVAL, "no room for the ids");
    CHECK_INT_EQ(llm_forward(s, &q, toks, 7, NULL, ids), 0);
    CHECK_INT_EQ(llm_session_pos(s), 7);
    /* Rows do not matter when nothing is asked. */
    q.output = LLM_OUTPUT_NONE;
    q.rows = 0;
    CHECK_INT_EQ(llm_forward(s, &q, toks, 2, NULL, NULL), 0);
    CHECK_INT_EQ(llm_session_pos(s), 9);
    llm_session_free(s);
    llm_model_free(m);
    unlink(g_path);
    return pm_check_result();
}

static int case_rows(void)
{
    llm_model *m = model();
    int32_t V = vocab_of(m);
    size_t row = (size_t)V * sizeof(float);
    llm_session *a = synth_session(m, 64, 8, 1), *b = synth_session(m, 64, 8, 1);
    float *all = malloc(6 * row);
    REQUIRE(all);
    const float *lg = NULL;
    /* Every row of a 6-token forward, as a verify would ask. */
    llm_forward_params p = LLM_FORWARD_PARAMS_INIT;
    p.rows = 6;
    REQUIRE(llm_forward(a, &p, toks, 6, &lg, NULL) == 0 && lg);
    memcpy(all, lg, 6 * row);
    for (int32_t rows = 1; rows <= 6; rows++) {
        llm_session_reset(b);
        p.rows = rows;
        REQUIRE(llm_forward(b, &p, toks, 6, &lg, NULL) == 0);
        CHECK(memcmp(lg, all + (size_t)(6 - rows) * (size_t)V, (size_t)rows * row) == 0);
        llm_session_reset(b);
        int32_t ids[6] = {-1, -1, -1, -1, -1, -1};
        llm_forward_params q = p;
        q.output = LLM_OUTPUT_ARGMAX;
        REQUIRE(llm_forward(b, &q, toks, 6, NULL, ids) == 0);
        llm_sampler *sp = NULL;
        REQUIRE(llm_sampler_create(NULL, V, &sp) == 0);
        for (int32_t r = 0; r < rows; r++)
            CHECK_INT_EQ(ids[r], llm_sample(sp, all + (size_t)(6 - rows + r) * (size_t)V));
        for (int32_t r = rows; r < 6; r++)
            CHECK_INT_EQ(ids[r], -1); /* nothing past the rows asked */
        llm_sampler_free(sp);
    }
    /* The classic calls are these requests: llm_prefill the last row,
     * llm_verify every row. */
    llm_session_reset(b);
    REQUIRE(llm_prefill(b, toks, 6, 0, &lg) == 0);
    CHECK(memcmp(lg, all + 5 * (size_t)V, row) == 0);
    llm_session_reset(b);
    REQUIRE(llm_verify(b, toks, 6, &lg) == 0);
    CHECK(memcmp(lg, all, 6 * row) == 0);
    /* A decode-phase forward hands back its one row; "nothing" moves the
     * position and leaves the next forward's logits as they would be. */
    llm_session_reset(a);
    llm_session_reset(b);
    p.rows = 1;
    p.output = LLM_OUTPUT_NONE;
    lg = (const float *)1;
    REQUIRE(llm_forward(a, &p, toks, 5, &lg, NULL) == 0);
    CHECK(lg == (const float *)1);
    CHECK_INT_EQ(llm_session_pos(a), 5);
    REQUIRE(llm_prefill(b, toks, 5, 0, NULL) == 0);
    const float *la = NULL, *lb = NULL;
    p.phase = PM_PHASE_DECODE;
    p.output = LLM_OUTPUT_LOGITS;
    REQUIRE(llm_forward(a, &p, toks + 5, 1, &la, NULL) == 0);
    REQUIRE(llm_decode(b, toks[5], &lb) == 0);
    CHECK(memcmp(la, lb, row) == 0);
    llm_timings t;
    llm_session_get_timings(a, &t);
    CHECK_U64_EQ(t.prefill_tokens, 5);
    CHECK_U64_EQ(t.decode_tokens, 1);
    free(all);
    llm_session_free(a);
    llm_session_free(b);
    llm_model_free(m);
    unlink(g_path);
    return pm_check_result();
}

static int case_runner(void)
{
    llm_model *m = model();
    llm_model_info info;
    llm_model_get_info(m, &info);
    int32_t V = info.n_vocab, L = info.n_layers;
    llm_runner *r = NULL;
    char err[256];
    REQUIRE(llm_runner_create(m, 8, 64, &r, err, sizeof err) == 0);
    CHECK_INT_EQ(llm_runner_argmax_on_device(r), 0); /* the CPU backend has no op */
    llm_span *all = NULL, *head = NULL, *bad = NULL;
    REQUIRE(llm_runner_span_create(r, 0, L - 1, 0, PM_WHERE_LOCAL, &all, err, sizeof err) == 0);
    REQUIRE(llm_runner_span_create(r, 0, 0, 0, PM_WHERE_LOCAL, &head, err, sizeof err) == 0);
    CHECK_INT_EQ(llm_runner_span_create(r, 0, L, 0, PM_WHERE_LOCAL, &bad, err, sizeof err),
                 LLM_EINVAL);
    CHECK(bad == NULL && strstr(err, "holds only layers 0-") != NULL);
    int32_t ids[4];
    llm_run_out out = {ids, NULL, NULL, NULL};
    static const struct { uint32_t want; int32_t rows; int first_only; const char *text; } k[] = {
        {LLM_OUT_LOGITS, 0, 0, "output rows 0 outside 1..3"},
        {LLM_OUT_ARGMAX, 4, 0, "output rows 4 outside 1..3"},
        {LLM_OUT_ACTIVATIONS | LLM_OUT_LOGITS, 1, 0, "activations and logits/argmax are exclusive"},
        {LLM_OUT_LOGITS, 1, 1, "do not end the model: no logits or argmax"},
        {16, 1, 0, "unknown bits"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        llm_forward_in in = {PM_PHASE_EXACT, 1, 0, 3, toks, NULL, {k[i].want, k[i].rows, 0, {0}},
                             NULL};
        err[0] = '\0';
        CHECK_INT_EQ(llm_runner_run(r, k[i].first_only ? head : all, &in, &out, err, sizeof err),
                     LLM_EINVAL);
        if (!strstr(err, k[i].text))
            fprintf(stderr, "case %zu: '%s'\n", i, err);
        CHECK(strstr(err, k[i].text) != NULL);
    }
    llm_forward_in in = {PM_PHASE_EXACT, 1, 0, 3, toks, NULL, {LLM_OUT_ARGMAX, 3, 0, {0}}, NULL};
    out.ids = NULL;
    CHECK_INT_EQ(llm_runner_run(r, all, &in, &out, err, sizeof err), LLM_EINVAL);
    /* Host argmax over the logits, by the sampler's rule. */
    out.ids = ids;
    REQUIRE(llm_runner_run(r, all, &in, &out, err, sizeof err) == 0);
    CHECK(out.logits == NULL && out.act == NULL);
    in.out.want = LLM_OUT_LOGITS | LLM_OUT_ARGMAX;
    int32_t again[4] = {-1, -1, -1, -1};
    out.ids = again;
    REQUIRE(llm_runner_run(r, all, &in, &out, err, sizeof err) == 0);
    REQUIRE(out.logits != NULL);
    llm_sampler *sp = NULL;
    REQUIRE(llm_sampler_create(NULL, V, &sp) == 0);
    for (int i = 0; i < 3; i++) {
        int32_t want = llm_sample(sp, out.logits + (size_t)i * (size_t)V);
        CHECK_INT_EQ(ids[i], want);
        CHECK_INT_EQ(again[i], want);
    }
    llm_sampler_free(sp);
    /* A span that does not end the model hands back its activations. */
    in.out = (llm_output){LLM_OUT_ACTIVATIONS, 3, 0, {0}};
    REQUIRE(llm_runner_run(r, head, &in, &out, err, sizeof err) == 0);
    CHECK(out.act != NULL && out.logits == NULL);
    llm_runner_span_free(r, head);
    llm_runner_span_free(r, all);
    llm_runner_free(r);
    llm_runner_free(NULL);
    llm_model_free(m);
    unlink(g_path);
    return pm_check_result();
}

static int case_names(void)
{
    static const struct { const char *in; int kind; int dev; const char *text; } ok[] = {
        {NULL, LLM_BACKEND_CPU, 0, "cpu"},        {"cpu", LLM_BACKEND_CPU, 0, "cpu"},
        {"cuda", LLM_BACKEND_CUDA, 0, "cuda:0"},  {"cuda:0", LLM_BACKEND_CUDA, 0, "cuda:0"},
        {"cuda:7", LLM_BACKEND_CUDA, 7, "cuda:7"}, {"cuda:255", LLM_BACKEND_CUDA, 255, "cuda:255"},
        {"cuda:007", LLM_BACKEND_CUDA, 7, "cuda:7"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        llm_backend_name b;
        char err[128] = "";
        CHECK_INT_EQ(llm_backend_name_parse(ok[i].in, &b, err, sizeof err), 0);
        CHECK_INT_EQ(b.kind, ok[i].kind);
        CHECK_INT_EQ(b.device, ok[i].dev);
        CHECK_STR_EQ(b.text, ok[i].text);
    }
    static const char *const bad[] = {"", "CPU", "gpu", "cuda:", "cuda:x", "cuda:-1",
                                      "cuda:+1", "cuda: 1", "cuda:256", "cuda:1x", "cuda0",
                                      "cudax", "rocm", "cpu:0", "cuda:99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        llm_backend_name b;
        char err[128] = "", want[96];
        CHECK_INT_EQ(llm_backend_name_parse(bad[i], &b, err, sizeof err), LLM_EBACKEND);
        snprintf(want, sizeof want, "unknown backend '%.40s' (cpu, cuda, cuda:N)", bad[i]);
        CHECK_STR_EQ(err, want);
    }
    llm_backend_name b;
    char err[128];
    CHECK_INT_EQ(llm_backend_name_parse("cu\nda", &b, err, sizeof err), LLM_EBACKEND);
    CHECK_STR_EQ(err, "unknown backend 'cu?da' (cpu, cuda, cuda:N)");
    llm_backend_name x, y;
    REQUIRE(llm_backend_name_parse("cuda", &x, NULL, 0) == 0);
    REQUIRE(llm_backend_name_parse("cuda:0", &y, NULL, 0) == 0);
    CHECK(llm_backend_name_same(&x, &y));
    REQUIRE(llm_backend_name_parse("cuda:1", &y, NULL, 0) == 0);
    CHECK(!llm_backend_name_same(&x, &y));
    REQUIRE(llm_backend_name_parse("cpu", &y, NULL, 0) == 0);
    CHECK(!llm_backend_name_same(&x, &y));
    /* The model's constructor uses the same parser and line. */
    llm_model_options o = LLM_MODEL_OPTIONS_INIT;
    o.backend = "tpu";
    llm_model *m = (llm_model *)1;
    synth_spec sp = synth_default();
    synth_path(g_path, sizeof g_path, "forward_names");
    REQUIRE(synth_write(g_path, &sp) == 0);
    CHECK_INT_EQ(llm_model_open(g_path, &o, &m, err, sizeof err), LLM_EBACKEND);
    CHECK(m == NULL);
    CHECK_STR_EQ(err, "model: unknown backend 'tpu' (cpu, cuda, cuda:N)");
    unlink(g_path);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    if (strcmp(c, "params") == 0)
        return case_params();
    if (strcmp(c, "rows") == 0)
        return case_rows();
    if (strcmp(c, "runner") == 0)
        return case_runner();
    if (strcmp(c, "names") == 0)
        return case_names();
    fprintf(stderr, "usage: test_engine_forward params|rows|runner|names\n");
    return 2;
}
