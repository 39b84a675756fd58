/* bench_features — what asking for target features costs a forward: a
 * prefill and decode steps with and without the residual stream of
 * --layers layers, alternated in one run so the ratio comes from the same
 * conditions.
 *
 *   bench_features [--reps R] [--prompt 128] [--gen 32] [--layers 3]
 *                  [--threads 2] [--backend cpu] [--dir /tmp]
 *
 * The model is the 15M llama2.c shape (f32), synthesized in DIR and
 * removed afterwards. One JSON line per phase on stdout, best of R:
 *   {"bench":"features","phase":"prefill","tokens":128,"layers":3,
 *    "plain_tps":..., "features_tps":..., "ratio":...}
 * ratio is features_tps / plain_tps (1.0: free).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "phasemark/engine.h"
#include "synth.h"

typedef struct opts {
    int reps, prompt, gen, layers, threads;
    const char *backend, *dir;
} opts;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One prefill of o->prompt tokens and o->gen decode steps from an empty
 * session, asking features of nl layers (0: none); tokens/s of each. */
static int run_once(llm_session *s, const opts *o, const int32_t *toks, const int32_t *layers,
                    int32_t nl, float *feat, size_t cap, double *pre_tps, double *dec_tps)
{
    llm_session_reset(s);
    llm_forward_params p = LLM_FORWARD_PARAMS_INIT;
    p.output = LLM_OUTPUT_ARGMAX;
    p.n_features_layers = nl;
    p.features_layers = layers;
    p.features = feat;
    p.features_cap = cap;
    int32_t id = 0;
    double t0 = now_s();
    if (llm_forward(s, &p, toks, (size_t)o->prompt, NULL, &id) != 0)
        return -1;
    double t1 = now_s();
    p.phase = PM_PHASE_DECODE;
    for (int i = 0; i < o->gen; i++)
        if (llm_forward(s, &p, &id, 1, NULL, &id) != 0)
            return -1;
    double t2 = now_s();
    *pre_tps = o->prompt / (t1 - t0);
    *dec_tps = o->gen / (t2 - t1);
    return 0;
}

static int parse(int argc, char **argv, opts *o)
{
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return -1;
        char *end;
        long n = strtol(v, &end, 10);
        int num = *end == '\0' && n >= 1 && n <= 4096;
        if (strcmp(a, "--reps") == 0 && num)
            o->reps = (int)n;
        else if (strcmp(a, "--prompt") == 0 && num)
            o->prompt = (int)n;
        else if (strcmp(a, "--gen") == 0 && num)
            o->gen = (int)n;
        else if (strcmp(a, "--layers") == 0 && num && n <= LLM_FEATURES_MAX)
            o->layers = (int)n;
        else if (strcmp(a, "--threads") == 0 && num)
            o->threads = (int)n;
        else if (strcmp(a, "--backend") == 0)
            o->backend = v;
        else if (strcmp(a, "--dir") == 0)
            o->dir = v;
        else
            return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts o = {5, 128, 32, 3, 2, "cpu", "/tmp"};
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: bench_features [--reps R] [--prompt N] [--gen N] [--layers 1..8] "
                        "[--threads T] [--backend cpu|cuda] [--dir DIR]\n");
        return 2;
    }
    synth_spec sp = synth_default();
    sp.hp.dim = 288; /* the rest (eps, RoPE) as the default spec */
    sp.hp.n_layers = 6;
    sp.hp.n_heads = 6;
    sp.hp.n_kv_heads = 6;
    sp.hp.ffn = 768;
    sp.hp.vocab = 32000;
    sp.hp.ctx = 512;
    char path[512];
    snprintf(path, sizeof path, "%s/pm_bench_features_%ld.gguf", o.dir, (long)getpid());
    if (o.prompt + o.gen > sp.hp.ctx || synth_write(path, &sp) != 0) {
        fprintf(stderr, "bench_features: cannot write %s (or prompt + gen > %d)\n", path,
                sp.hp.ctx);
        return 1;
    }
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.backend = o.backend;
    mo.n_threads = o.threads;
    llm_model *m = NULL;
    char err[256];
    int rc = llm_model_open(path, &mo, &m, err, sizeof err);
    unlink(path);
    if (rc) {
        fprintf(stderr, "bench_features: %s\n", err);
        return 1;
    }
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = sp.hp.ctx;
    so.n_batch = o.prompt;
    llm_session *s = NULL;
    if (llm_session_create(m, &so, &s, err, sizeof err) != 0) {
        fprintf(stderr, "bench_features: %s\n", err);
        llm_model_free(m);
        return 1;
    }
    int32_t *toks = malloc((size_t)o.prompt * sizeof *toks), layers[LLM_FEATURES_MAX];
    for (int i = 0; i < o.layers; i++) /* spread over the model, the last included */
        layers[i] = (int32_t)((sp.hp.n_layers - 1) - (o.layers - 1 - i) * (sp.hp.n_layers / o.layers));
    size_t cap = (size_t)o.layers * (size_t)o.prompt * (size_t)sp.hp.dim;
    float *feat = malloc(cap * sizeof *feat);
    for (int i = 0; toks && i < o.prompt; i++)
        toks[i] = (int32_t)((i * 7919 + 13) % sp.hp.vocab);
    double best[4] = {0, 0, 0, 0}; /* plain prefill, decode; features prefill, decode */
    rc = toks && feat ? 0 : -1;
    for (int r = 0; rc == 0 && r <= o.reps; r++) { /* rep 0 warms up */
        for (int f = 0; rc == 0 && f < 2; f++) {
            double pt = 0, dt = 0;
            rc = run_once(s, &o, toks, layers, f ? o.layers : 0, feat, cap, &pt, &dt);
            if (r > 0 && pt > best[2 * f])
                best[2 * f] = pt;
            if (r > 0 && dt > best[2 * f + 1])
                best[2 * f + 1] = dt;
        }
    }
    if (rc)
        fprintf(stderr, "bench_features: forward failed: %s\n", llm_session_error(s));
    for (int ph = 0; rc == 0 && ph < 2; ph++)
        printf("{\"bench\":\"features\",\"backend\":\"%s\",\"phase\":\"%s\",\"tokens\":%d,"
               "\"layers\":%d,\"threads\":%d,\"reps\":%d,\"plain_tps\":%.1f,"
               "\"features_tps\":%.1f,\"ratio\":%.4f}\n",
               o.backend, ph ? "decode" : "prefill", ph ? o.gen : o.prompt, o.layers, o.threads,
               o.reps, best[ph], best[2 + ph], best[2 + ph] / best[ph]);
    free(toks);
    free(feat);
    llm_session_free(s);
    llm_model_free(m);
    return rc ? 1 : 0;
}
