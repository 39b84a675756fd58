/* test_features — target features (the residual stream after
 * chosen layers) on the CPU, against what the engine computes by another
 * route, bit for bit.
 *
 *   span      the features of layer L for a prompt are the activations of
 *             a span over layers 0..L (the runner's LLM_OUT_ACTIVATIONS),
 *             and asking for them leaves the logits exactly as they were
 *   chunked   a prefill in chunks of 3 writes the same features as one
 *             forward (the product forced to its row loop, so that no row
 *             depends on its neighbours)
 *   decode    a decode's features are the last row of a verify's (the
 *             row loop forced too)
 *   split     two and three local shards give the monolithic features
 *   remote_*  a local shard beside a daemon (spawned over the shared and
 *             the stream transports, a first or a last shard; started on
 *             TCP) gives the monolithic features of every layer, the
 *             daemon's in its reply
 *   daemon_refuses  a daemon asked (on the wire) for features of a layer
 *             it does not hold refuses with one line and keeps the link
 *   refused   every malformed request is LLM_EINVAL with one line naming
 *             it, runs nothing and leaves the position where it was
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "model.h"
#include "phasemark/engine.h"
#include "phasemark/wire.h"
#include "pm_check.h"
#include "runner.h"
#include "session.h"
#include "split.h"
#include "split_util.h"
#include "synth.h"

#define N_LAYERS 4
#define N_TOK 8

static char g_path[512];
static const int32_t toks[N_TOK] = {3, 1, 4, 1, 5, 9, 2, 6};

static llm_model *model(const char *tag)
{
    synth_spec sp = synth_default();
    sp.hp.n_layers = N_LAYERS;
    synth_path(g_path, sizeof g_path, tag);
    REQUIRE(synth_write(g_path, &sp) == 0);
    return synth_open(g_path, 2);
}

static int32_t dim_of(const llm_model *m)
{
    llm_model_info info;
    llm_model_get_info(m, &info);
    return info.dim;
}

static llm_session *placed(llm_model *m, const char *placement)
{
    llm_session_options o = LLM_SESSION_OPTIONS_INIT;
    o.n_ctx = 64;
    o.n_batch = N_TOK;
    o.placement = placement;
    llm_session *s = NULL;
    char err[256];
    int rc = llm_session_create(m, &o, &s, err, sizeof err);
    if (rc)
        fprintf(stderr, "session '%s': %s\n", placement, err);
    REQUIRE(rc == 0);
    return s;
}

/* One forward of n tokens asking features of layers[0..nl) into feat,
 * logits of the last row into *lg. */
static int forward_feat(llm_session *s, pm_phase ph, int32_t chunk, const int32_t *t,
                        size_t n, const int32_t *layers, int32_t nl, float *feat, size_t cap,
                        const float **lg)
{
    llm_forward_params p = LLM_FORWARD_PARAMS_INIT;
    p.phase = ph;
    p.chunk = chunk;
    p.output = lg ? LLM_OUTPUT_LOGITS : LLM_OUTPUT_NONE;
    p.n_features_layers = nl;
    p.features_layers = layers;
    p.features = feat;
    p.features_cap = cap;
    return llm_forward(s, &p, t, n, lg, NULL);
}

static int case_span(void)
{
    llm_model *m = model("feat_span");
    int32_t D = dim_of(m);
    size_t plane = (size_t)N_TOK * (size_t)D;
    static const int32_t layers[N_LAYERS] = {0, 1, 2, 3};
    float *feat = calloc(N_LAYERS * plane, sizeof *feat);
    REQUIRE(feat != NULL);
    llm_session *s = synth_session(m, 64, N_TOK, 1);
    const float *lg = NULL;
    REQUIRE(forward_feat(s, PM_PHASE_EXACT, 0, toks, N_TOK, layers, N_LAYERS, feat,
                         N_LAYERS * plane, &lg) == 0);
    size_t vrow = (size_t)m->hp.n_vocab * sizeof(float);
    float *with = malloc(vrow);
    REQUIRE(with != NULL);
    memcpy(with, lg, vrow);
    /* The same prefill asking nothing more: the logits do not move. */
    llm_session_reset(s);
    REQUIRE(llm_prefill(s, toks, N_TOK, 0, &lg) == 0);
    CHECK(memcmp(with, lg, vrow) == 0);
    /* Layer L's features are a span 0..L's boundary activations. */
    llm_runner *r = NULL;
    char err[256];
    REQUIRE(llm_runner_create(m, N_TOK, 64, &r, err, sizeof err) == 0);
    for (int32_t L = 0; L < N_LAYERS; L++) {
        llm_span *span = NULL;
        REQUIRE(llm_runner_span_create(r, 0, L, 0, PM_WHERE_LOCAL, &span, err, sizeof err) == 0);
        llm_forward_in in = {PM_PHASE_EXACT, 1, 0, N_TOK, toks, NULL,
                             {LLM_OUT_ACTIVATIONS, N_TOK, 0, {0}}, NULL};
        llm_run_out out = {NULL, NULL, NULL, NULL};
        REQUIRE(llm_runner_run(r, span, &in, &out, err, sizeof err) == 0);
        CHECK(memcmp(out.act, feat + (size_t)L * plane, plane * sizeof(float)) == 0);
        /* The runner's own features of the span's last layer, asked beside
         * the activations, are those activations. */
        in.out.want |= LLM_OUT_FEATURES;
        in.out.n_feat = 1;
        in.out.feat[0] = L;
        REQUIRE(llm_runner_run(r, span, &in, &out, err, sizeof err) == 0);
        CHECK(out.feat != NULL && memcmp(out.feat, out.act, plane * sizeof(float)) == 0);
        llm_runner_span_free(r, span);
    }
    /* Features differ from layer to layer (the copy is not of one buffer). */
    CHECK(memcmp(feat, feat + plane, plane * sizeof(float)) != 0);
    llm_runner_free(r);
    llm_session_free(s);
    free(with);
    free(feat);
    llm_model_free(m);
    unlink(g_path);
    return pm_check_result();
}

static int case_chunked(void)
{
    llm_model *m = model("feat_chunked");
    llm_cpu_backend_set_gemm_min(m->be, 64, 64);
    int32_t D = dim_of(m);
    size_t plane = (size_t)N_TOK * (size_t)D, cap = 2 * plane;
    static const int32_t layers[2] = {1, 3};
    float *whole = calloc(cap, sizeof(float)), *chunked = calloc(cap, sizeof(float));
    REQUIRE(whole && chunked);
    llm_session *s = synth_session(m, 64, N_TOK, 1);
    REQUIRE(forward_feat(s, PM_PHASE_EXACT, 0, toks, N_TOK, layers, 2, whole, cap, NULL) == 0);
    llm_session_reset(s);
    REQUIRE(forward_feat(s, PM_PHASE_EXACT, 3, toks, N_TOK, layers, 2, chunked, cap, NULL) == 0);
    CHECK_INT_EQ(llm_session_pos(s), N_TOK);
    CHECK(memcmp(whole, chunked, cap * sizeof(float)) == 0);
    llm_session_free(s);
    free(whole);
    free(chunked);
    llm_model_free(m);
    unlink(g_path);
    return pm_check_result();
}

static int case_decode(void)
{
    llm_model *m = model("feat_decode");
    llm_cpu_backend_set_gemm_min(m->be, 64, 64);
    int32_t D = dim_of(m);
    size_t plane = (size_t)N_TOK * (size_t)D;
    static const int32_t layers[1] = {2};
    float *all = calloc(plane, sizeof(float)), *one = calloc((size_t)D, sizeof(float));
    REQUIRE(all && one);
    llm_session *s = synth_session(m, 64, N_TOK, 1);
    REQUIRE(forward_feat(s, PM_PHASE_VERIFY, 0, toks, N_TOK, layers, 1, all, plane, NULL) == 0);
    llm_session_reset(s);
    REQUIRE(llm_prefill(s, toks, N_TOK - 1, 0, NULL) == 0);
    REQUIRE(forward_feat(s, PM_PHASE_DECODE, 0, toks + N_TOK - 1, 1, layers, 1, one,
                         (size_t)D, NULL) == 0);
    CHECK(memcmp(one, all + (size_t)(N_TOK - 1) * (size_t)D, (size_t)D * sizeof(float)) == 0);
    llm_session_free(s);
    free(all);
    free(one);
    llm_model_free(m);
    unlink(g_path);
    return pm_check_result();
}

/* The features of every layer of the prompt through a session. */
static void all_features(llm_session *s, float *feat, size_t cap)
{
    static const int32_t layers[N_LAYERS] = {0, 1, 2, 3};
    const float *lg = NULL;
    REQUIRE(forward_feat(s, PM_PHASE_EXACT, 0, toks, N_TOK, layers, N_LAYERS, feat, cap, &lg) ==
            0);
}

static int case_split(void)
{
    llm_model *m = model("feat_split");
    size_t cap = (size_t)N_LAYERS * N_TOK * (size_t)dim_of(m);
    float *mono = calloc(cap, sizeof(float)), *got = calloc(cap, sizeof(float));
    REQUIRE(mono && got);
    llm_session *s = synth_session(m, 64, N_TOK, 1);
    all_features(s, mono, cap);
    llm_session_free(s);
    static const char *placements[] = {"0-1@local,2-3@local", "0@local,1-2@local,3@local"};
    for (size_t i = 0; i < sizeof placements / sizeof placements[0]; i++) {
        s = placed(m, placements[i]);
        memset(got, 0, cap * sizeof(float));
        all_features(s, got, cap);
        CHECK(memcmp(mono, got, cap * sizeof(float)) == 0);
        llm_session_free(s);
    }
    free(mono);
    free(got);
    llm_model_free(m);
    unlink(g_path);
    return pm_check_result();
}

/* Every layer's features through a placement, against the monolithic
 * session's, bit for bit; the logits of the last row too. */
static int remote_case(const char *placement, int tcp_first, int tcp_last)
{
    llm_model *m = model("feat_remote");
    size_t cap = (size_t)N_LAYERS * N_TOK * (size_t)dim_of(m);
    size_t vrow = (size_t)m->hp.n_vocab * sizeof(float);
    float *mono = calloc(cap, sizeof(float)), *got = calloc(cap, sizeof(float));
    float *lg_mono = malloc(vrow);
    REQUIRE(mono && got && lg_mono);
    static const int32_t layers[N_LAYERS] = {0, 1, 2, 3};
    llm_session *s = synth_session(m, 64, N_TOK, 1);
    const float *lg = NULL;
    REQUIRE(forward_feat(s, PM_PHASE_EXACT, 0, toks, N_TOK, layers, N_LAYERS, mono, cap, &lg) ==
            0);
    memcpy(lg_mono, lg, vrow);
    llm_session_free(s);
    su_daemon d = {0, ""};
    char spec[400];
    snprintf(spec, sizeof spec, "%s", placement);
    if (tcp_first >= 0) {
        REQUIRE(su_daemon_start(&d, g_path, tcp_first, tcp_last, 1, "tcp::0") == 0);
        snprintf(spec, sizeof spec, "0-%d@local,%d-%d@%s", tcp_first - 1, tcp_first, tcp_last,
                 d.address);
    }
    s = placed(m, spec);
    REQUIRE(forward_feat(s, PM_PHASE_EXACT, 0, toks, N_TOK, layers, N_LAYERS, got, cap, &lg) ==
            0);
    CHECK(memcmp(mono, got, cap * sizeof(float)) == 0);
    CHECK(lg != NULL && memcmp(lg_mono, lg, vrow) == 0);
    /* A remote shard's layers alone, asking no logits: its reply carries
     * the features (and the cheapest argmax the split always asks). */
    llm_session_reset(s);
    static const int32_t two[2] = {2, 3};
    memset(got, 0, cap * sizeof(float));
    REQUIRE(forward_feat(s, PM_PHASE_EXACT, 0, toks, N_TOK, two, 2, got, cap, NULL) == 0);
    CHECK(memcmp(mono + 2 * (size_t)N_TOK * (size_t)dim_of(m), got,
                 2 * (size_t)N_TOK * (size_t)dim_of(m) * sizeof(float)) == 0);
    llm_session_free(s);
    if (tcp_first >= 0)
        su_daemon_stop(&d, SIGTERM);
    CHECK_INT_EQ(su_count_children(), 0);
    free(mono);
    free(got);
    free(lg_mono);
    llm_model_free(m);
    unlink(g_path);
    return pm_check_result();
}

static int case_remote_shared(void)
{
    return remote_case("0-1@local,2-3@spawn?transport=shared", -1, -1);
}

static int case_remote_stream(void)
{
    return remote_case("0-1@spawn,2-3@local", -1, -1);
}

static int case_remote_tcp(void)
{
    return remote_case(NULL, 2, 3);
}

/* A forward frame on a daemon's connection asking features of layer 0 of
 * a daemon holding layers 2-3. */
static int case_daemon_refuses(void)
{
    llm_model *m = model("feat_refuses");
    int32_t D = dim_of(m);
    llm_session *s = placed(m, "0-1@local,2-3@spawn?transport=shared");
    llm_split *sp = llm_session_split(s);
    REQUIRE(sp != NULL);
    uint8_t meta[256];
    pmw_meta w;
    pmw_meta_init(&w, meta, sizeof meta);
    pmw_meta_u8(&w, PMW_TAG_PHASE, pm_phase_encode(PM_PHASE_EXACT));
    pmw_meta_u64(&w, PMW_TAG_REQ_ID, 1);
    pmw_meta_u32(&w, PMW_TAG_BASE_POS, 0);
    pmw_meta_u32(&w, PMW_TAG_N_TOKENS, 1);
    pmw_meta_u8(&w, PMW_TAG_WANT, PMW_OUT_ARGMAX | PMW_OUT_FEATURES);
    pmw_meta_u32(&w, PMW_TAG_DIM, (uint32_t)D);
    static const uint8_t layer0[2] = {0, 0};
    pmw_meta_put(&w, PMW_TAG_FEAT_LAYERS, layer0, 2);
    float *act = calloc((size_t)D, sizeof(float));
    REQUIRE(act != NULL);
    int code = 0;
    char text[300], err[300];
    REQUIRE(llm_split_send_raw(sp, 1, PMW_MSG_FORWARD, meta, w.len, act,
                               (size_t)D * sizeof(float), &code, text, sizeof text, err,
                               sizeof err) == 0);
    CHECK_INT_EQ(code, LLM_SPLIT_WIRE_CODE(LLM_EINVAL));
    CHECK_STR_EQ(text, "features of layer 0 asked: this daemon holds layers 2-3");
    /* The link is intact: the session still runs. */
    static const int32_t three[1] = {3};
    float *feat = calloc((size_t)D, sizeof(float));
    REQUIRE(feat != NULL);
    CHECK_INT_EQ(forward_feat(s, PM_PHASE_EXACT, 0, toks, 1, three, 1, feat, (size_t)D, NULL),
                 0);
    llm_session_free(s);
    free(act);
    free(feat);
    llm_model_free(m);
    unlink(g_path);
    return pm_check_result();
}

static int case_refused(void)
{
    llm_model *m = model("feat_refused");
    int32_t D = dim_of(m);
    size_t cap = (size_t)(LLM_FEATURES_MAX + 1) * N_TOK * (size_t)D;
    float *feat = calloc(cap, sizeof(float));
    REQUIRE(feat != NULL);
    llm_session *s = synth_session(m, 64, N_TOK, 1);
    REQUIRE(llm_prefill(s, toks, 2, 0, NULL) == 0);
    static const int32_t nine[9] = {0, 1, 2, 3, 0, 1, 2, 3, 0};
    static const struct {
        int32_t n;
        int32_t layers[4];
        int null_layers, null_buf;
        size_t cap; /* 0: enough */
        const char *text;
    } k[] = {
        {1, {4}, 0, 0, 0, "forward: features of layer 4 asked of layers 0-3"},
        {1, {-1}, 0, 0, 0, "forward: features of layer -1 asked of layers 0-3"},
        {2, {1, 1}, 0, 0, 0, "forward: features layers must be strictly ascending: 1 after 1"},
        {2, {2, 1}, 0, 0, 0, "forward: features layers must be strictly ascending: 1 after 2"},
        {-1, {0}, 0, 0, 0, "forward: features of -1 layers asked: 1 to 8 may be"},
        {1, {0}, 1, 0, 0, "forward: features of 1 layers asked with no layer list"},
        {2, {0, 1}, 0, 1, 0, "forward: features need 768 floats of room, 0 given"},
        {2, {0, 1}, 0, 0, 767, "forward: features need 768 floats of room, 767 given"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        llm_forward_params p = LLM_FORWARD_PARAMS_INIT;
        p.phase = PM_PHASE_VERIFY;
        p.rows = 1;
        p.n_features_layers = k[i].n;
        p.features_layers = k[i].null_layers ? NULL : k[i].layers;
        p.features = k[i].null_buf ? NULL : feat;
        p.features_cap = k[i].cap ? k[i].cap : cap;
        const float *lg = (const float *)1;
        CHECK_INT_EQ(llm_forward(s, &p, toks, 6, &lg, NULL), LLM_EINVAL);
        CHECK(lg == (const float *)1);
        CHECK_INT_EQ(llm_session_pos(s), 2);
        if (strcmp(llm_session_error(s), k[i].text) != 0)
            fprintf(stderr, "case %zu\n", i);
        CHECK_STR_EQ(llm_session_error(s), k[i].text);
    }
    /* Too many layers, even when each is in range. */
    llm_forward_params p = LLM_FORWARD_PARAMS_INIT;
    p.n_features_layers = 9;
    p.features_layers = nine;
    p.features = feat;
    p.features_cap = cap;
    CHECK_INT_EQ(llm_forward(s, &p, toks, 1, NULL, NULL), LLM_EINVAL);
    CHECK_STR_EQ(llm_session_error(s), "forward: features of 9 layers asked: 1 to 8 may be");
    /* A caller's older struct (without the features fields) asks none:
     * whatever follows it is not read. */
    p.size = (uint16_t)offsetof(llm_forward_params, n_features_layers);
    p.output = LLM_OUTPUT_NONE;
    CHECK_INT_EQ(llm_forward(s, &p, toks, 1, NULL, NULL), 0);
    CHECK_INT_EQ(llm_session_pos(s), 3);
    p.size = (uint16_t)offsetof(llm_forward_params, n_features_layers) - 1;
    CHECK_INT_EQ(llm_forward(s, &p, toks, 1, NULL, NULL), LLM_EINVAL);
    /* The runner and the split refuse a request the session would not
     * pass on, with the same lines. */
    llm_output o = {LLM_OUT_FEATURES, 0, 2, {3, 2}};
    char err[160];
    CHECK_INT_EQ(llm_features_check(&o, 0, 3, err, sizeof err), LLM_EINVAL);
    CHECK_STR_EQ(err, "features layers must be strictly ascending: 2 after 3");
    o.feat[0] = 1;
    CHECK_INT_EQ(llm_features_check(&o, 0, 3, err, sizeof err), 0);
    CHECK_INT_EQ(llm_features_check(&o, 2, 3, err, sizeof err), LLM_EINVAL);
    CHECK_STR_EQ(err, "features of layer 1 asked of layers 2-3");
    llm_session_free(s);
    free(feat);
    llm_model_free(m);
    unlink(g_path);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    static const struct { const char *name; int (*fn)(void); } cases[] = {
        {"span", case_span},     {"chunked", case_chunked}, {"decode", case_decode},
        {"split", case_split},   {"remote_shared", case_remote_shared},
        {"remote_stream", case_remote_stream}, {"remote_tcp", case_remote_tcp},
        {"daemon_refuses", case_daemon_refuses}, {"refused", case_refused},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(c, cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: test_features span|chunked|decode|split|remote_shared|remote_stream|remote_tcp|daemon_refuses|refused\n");
    return 2;
}
