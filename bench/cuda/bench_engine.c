/* bench_engine — decode speed of the ENGINE on the CUDA backend: a model
 * file opened through the public API on "cuda:0" (what pm-generate
 * --backend cuda and pm-server run), against the device's copy bandwidth
 * measured in the same process.
 *
 * It measures what a user gets, and the only forward there is: the
 * session's llm_decode (embedding, the span forward through the backend's
 * blocks, the head, logits copied to the host) for a GGUF file, for
 * instance one written by `pm-modelwriter synth --type bf16`.
 *
 * Printed, one JSON object per line:
 *   {"bench":"gemm_peak",...}     with prefill_tokens > 0: the matrix
 *                                 ceiling, an 8192^3 bf16 cuBLAS product;
 *   {"bench":"copy",...}          device-to-device copy bandwidth (bytes
 *                                 read + written per second);
 *   {"bench":"engine_decode",...} per decode mode of the seam (graph: the
 *                                 fused step replayed as a CUDA graph, the
 *                                 default; fused: the same kernels launched
 *                                 directly; ops: the engine's op-by-op
 *                                 path): greedy decode of `tokens` tokens
 *                                 from position 16 after a 16-token
 *                                 prefill, median of `reps`; tokens/s of
 *                                 the llm_decode calls alone and of the
 *                                 whole loop (with the host argmax over
 *                                 the vocabulary), weight bytes per token
 *                                 / time as a fraction of the copy
 *                                 bandwidth, and whether the greedy ids
 *                                 equal the graph mode's;
 *   {"bench":"engine_generate",...} llm_generate end to end (the 16-token
 *                                 prefill, then `tokens` greedy tokens) in
 *                                 graph mode, with the token taken on the
 *                                 device (argmax "device": 4 bytes cross
 *                                 per token) and on the host (argmax
 *                                 "host": the logits row is read and
 *                                 argmaxed by llm_sample), median of
 *                                 `reps`: tokens/s of the whole call and
 *                                 of its decode steps (decode + sample
 *                                 time from the session's timings), and
 *                                 whether the two paths' ids agree;
 *   {"bench":"engine_prefill",...} with prefill_tokens > 0: llm_prefill
 *                                 of that many tokens in one batch on a
 *                                 fresh context (the whole prompt is one
 *                                 forward), median of `reps`, and its
 *                                 matrix TFLOP/s counted (every layer's products for
 *                                 n rows, causal attention over n(n+1)/2
 *                                 pairs a head, the head for one row), to
 *                                 set against the gemm_peak line (an
 *                                 8192^3 bf16 cuBLAS product measured
 *                                 in the same process); this is the
 *                                 seam's default, the fused prefill
 *                                 (LLM_CUDA_PREFILL_FUSED);
 *   {"bench":"engine_prefill_ops",...} the same prefill on the old
 *                                 op-by-op path (LLM_CUDA_PREFILL_OPS,
 *                                 exact-fp32 attention), the same fields,
 *                                 plus fused_speedup (its median over the
 *                                 fused one's) and whether the two paths'
 *                                 last-row argmax agrees.
 *
 *   {"bench":"first_request",...} (the `first` form, run as the only
 *                                 thing in a fresh process): the model's
 *                                 open (with the backend's warm-up at
 *                                 prepare unless PHASEMARK_CUDA_WARMUP=0),
 *                                 then the first llm_prefill of
 *                                 `prompt_tokens` (default 11) and first
 *                                 llm_decode of the process, against the
 *                                 median of 5 later ones (first_over_warm:
 *                                 the ratio of the prefills).
 *
 * Every engine line carries the tuning it ran with: q8_int8 (1: one-row
 * Q8 products on int8 activations, 4 KB a warp in flight; 3 and 2: 2 and
 * 1 KB; 0: PHASEMARK_CUDA_Q8=f32, the fp32-activation kernel),
 * f16_direct (1: F16 wide products on the weights as they are, 0:
 * PHASEMARK_CUDA_F16_GEMM=bf16, dequantized to bf16 per call), kq_native
 * (Q4_K/Q6_K on their own layouts or re-quantized to Q8), mv_split (the
 * one-row kernels' split-K), wide_cache (wide products over quantized
 * weights on a bf16 copy made once, 0: dequantized per call) and kq_grouped
 * (the Q4_K layout and kernel: 1 grouped, 2 grouped with two batches a
 * load, 0 the file's super-blocks), so that
 * runs of one build under several settings can be set side by side.
 *
 * Usage: bench_engine MODEL.gguf LABEL [decode_tokens] [reps] [prefill_tokens[,more]]
 *                     [all|graph]
 *        bench_engine MODEL.gguf LABEL first [prompt_tokens]
 * `graph` times only the default paths (graph decode, fused prefill) and
 * llm_generate with the device argmax; `all` (default) every mode.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_backend.h"
#include "model.h"
#include "phasemark/engine.h"
#include "quant.h"
#include "session.h"

#define PROMPT 16
#define MAX_TOKENS 4096
#define MAX_REPS 32

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The tuning fields that select kernels, as JSON members. */
static void tuning_json(llm_model *m, char *buf, size_t cap)
{
    llm_cuda_tuning t;
    memset(&t, 0, sizeof t);
    llm_cuda_get_tuning(llm_cuda_backend_context(m->be), &t);
    snprintf(buf, cap,
             "\"q8_int8\":%d,\"f16_direct\":%d,\"kq_native\":%d,\"mv_split\":%d,"
             "\"wide_cache\":%d,\"mv_prefetch\":%d,\"kq_grouped\":%d,\"mv_l2\":%d,"
             "\"mv_blocks\":%d",
             t.q8_int8, t.f16_direct, t.kq_native, t.mv_split, t.wide_cache, t.mv_prefetch,
             t.kq_grouped, t.mv_l2, t.mv_blocks);
}

/* Device copy of 2 GiB on its own context (released before the model is
 * opened); bytes read + written per second, 0 on failure. */
static double copy_bandwidth(int reps)
{
    llm_cuda *cu = NULL;
    char err[256];
    if (llm_cuda_create(0, &cu, err, sizeof err) != 0) {
        fprintf(stderr, "bench_engine: %s\n", err);
        return 0.0;
    }
    size_t bytes = (size_t)2 << 30;
    void *a = NULL, *b = NULL;
    double bw = 0.0;
    float t[2 * MAX_REPS];
    int ok = llm_cuda_malloc(cu, bytes, &a) == 0 && llm_cuda_malloc(cu, bytes, &b) == 0 &&
             llm_cuda_fill_uniform(cu, a, LLM_TYPE_F32, bytes / 4, 7, 1.0f) == 0 &&
             llm_cuda_copy(cu, b, a, bytes) == 0;
    for (int r = 0; ok && r < reps; r++)
        ok = llm_cuda_event_record(cu, 0) == 0 &&
             llm_cuda_copy(cu, r % 2 ? a : b, r % 2 ? b : a, bytes) == 0 &&
             llm_cuda_event_record(cu, 1) == 0 && llm_cuda_elapsed_ms(cu, 0, 1, &t[r]) == 0;
    if (ok) {
        double ms[2 * MAX_REPS];
        for (int r = 0; r < reps; r++)
            ms[r] = t[r];
        double m = median(ms, reps);
        bw = 2.0 * (double)bytes / (m * 1e-3);
        printf("{\"bench\":\"copy\",\"bytes\":%zu,\"median_ms\":%.4f,\"reps\":%d,"
               "\"bandwidth_GBps\":%.1f}\n", bytes, m, reps, bw / 1e9);
    } else {
        fprintf(stderr, "bench_engine: copy: %s\n", llm_cuda_error(cu));
    }
    llm_cuda_mfree(cu, a);
    llm_cuda_mfree(cu, b);
    llm_cuda_free(cu);
    return bw;
}

/* An 8192^3 bf16 cuBLAS product (fp32 accumulation) on its own context:
 * the matrix ceiling the engine's prefill is set against; FLOP/s, 0 on
 * failure. This times the library's product, never a forward. */
static double gemm_peak(int reps)
{
    const int32_t n = 8192;
    size_t e = (size_t)n * n;
    llm_cuda *cu = NULL;
    char err[256];
    if (llm_cuda_create(0, &cu, err, sizeof err) != 0) {
        fprintf(stderr, "bench_engine: %s\n", err);
        return 0.0;
    }
    void *a = NULL, *b = NULL, *c = NULL;
    float t[MAX_REPS];
    int ok = llm_cuda_malloc(cu, e * 2, &a) == 0 && llm_cuda_malloc(cu, e * 2, &b) == 0 &&
             llm_cuda_malloc(cu, e * 4, &c) == 0 &&
             llm_cuda_fill_uniform(cu, a, LLM_TYPE_BF16, e, 11, 1.0f) == 0 &&
             llm_cuda_fill_uniform(cu, b, LLM_TYPE_BF16, e, 12, 1.0f) == 0;
    for (int i = 0; ok && i < 3; i++) /* warm-up: cuBLAS picks its kernel */
        ok = llm_cuda_gemm_bf16(cu, n, n, n, a, b, c) == 0;
    for (int r = 0; ok && r < reps; r++)
        ok = llm_cuda_event_record(cu, 0) == 0 && llm_cuda_gemm_bf16(cu, n, n, n, a, b, c) == 0 &&
             llm_cuda_event_record(cu, 1) == 0 && llm_cuda_elapsed_ms(cu, 0, 1, &t[r]) == 0;
    double flops = 0.0;
    if (ok) {
        double ms[MAX_REPS];
        for (int r = 0; r < reps; r++)
            ms[r] = t[r];
        double m = median(ms, reps);
        flops = 2.0 * (double)n * n * n / (m * 1e-3);
        printf("{\"bench\":\"gemm_peak\",\"m\":%d,\"n\":%d,\"k\":%d,\"median_ms\":%.4f,"
               "\"reps\":%d,\"TFLOPs\":%.1f}\n", n, n, n, m, reps, flops / 1e12);
    } else {
        fprintf(stderr, "bench_engine: gemm peak: %s\n", llm_cuda_error(cu));
    }
    llm_cuda_mfree(cu, a);
    llm_cuda_mfree(cu, b);
    llm_cuda_mfree(cu, c);
    llm_cuda_free(cu);
    return flops;
}

static int32_t argmax_of(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

/* One greedy run: a PROMPT-token prefill, then `steps` decodes fed their
 * own argmax. *decode_s: seconds inside llm_decode; *wall_s: the whole
 * decode loop. ids [steps] receives the tokens. 0 or the failing status. */
static int greedy(llm_session *s, int32_t vocab, int steps, int32_t *ids, double *decode_s,
                  double *wall_s)
{
    int32_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++)
        prompt[i] = (int32_t)((i * 7919 + 13) % vocab);
    const float *logits = NULL;
    llm_session_reset(s);
    int rc = llm_prefill(s, prompt, PROMPT, 0, &logits);
    double in = 0.0, t0 = now_s();
    for (int i = 0; rc == 0 && i < steps; i++) {
        ids[i] = argmax_of(logits, vocab);
        double a = now_s();
        rc = llm_decode(s, ids[i], &logits);
        in += now_s() - a;
    }
    *wall_s = now_s() - t0;
    *decode_s = in;
    return rc;
}

typedef struct gen_sink {
    int32_t *ids;
    int cap, n;
} gen_sink;

static int gen_collect(void *user, int32_t tok)
{
    gen_sink *g = user;
    if (g->n < g->cap)
        g->ids[g->n] = tok;
    g->n++;
    return 0;
}

/* One llm_generate of `steps` greedy tokens after the PROMPT-token prompt;
 * *wall_s: the whole call, *decode_s: its decode steps and sampling. */
static int generate_once(llm_session *s, llm_sampler *sp, int32_t vocab, int steps,
                         int32_t *ids, double *wall_s, double *decode_s)
{
    int32_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++)
        prompt[i] = (int32_t)((i * 7919 + 13) % vocab);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = steps;
    gp.chunk = 0;
    gp.stop_at_eos = 0; /* every run the same length */
    gen_sink g = {ids, steps, 0};
    llm_session_reset(s);
    double t0 = now_s();
    int rc = llm_generate(s, sp, prompt, PROMPT, &gp, gen_collect, &g, NULL, NULL);
    *wall_s = now_s() - t0;
    llm_timings t;
    llm_session_get_timings(s, &t);
    *decode_s = (double)(t.decode_ns + t.sample_ns) * 1e-9;
    return rc ? rc : g.n == steps ? 0 : LLM_EINVAL;
}

/* The engine_generate lines: device argmax, then host argmax. */
static int bench_generate(llm_model *m, llm_session *s, const char *label, int steps,
                          int reps, int32_t *ids, int32_t *ref, int all)
{
    llm_model_info info;
    llm_model_get_info(m, &info);
    llm_sampler *sp = NULL;
    if (llm_sampler_create(NULL, info.n_vocab, &sp) != 0 ||
        llm_cuda_backend_set_decode(m->be, LLM_CUDA_DECODE_GRAPH) != 0) {
        llm_sampler_free(sp);
        return 1;
    }
    int rc = 0;
    for (int dev = 1; rc == 0 && dev >= (all ? 0 : 1); dev--) {
        llm_session_set_device_argmax(s, dev);
        double wall[MAX_REPS], dec[MAX_REPS], w0, d0;
        rc = generate_once(s, sp, info.n_vocab, steps, ids, &w0, &d0); /* warm-up */
        for (int r = 0; rc == 0 && r < reps; r++)
            rc = generate_once(s, sp, info.n_vocab, steps, ids, &wall[r], &dec[r]);
        if (rc) {
            fprintf(stderr, "bench_engine: generate: %s\n", llm_session_error(s));
            break;
        }
        if (dev)
            memcpy(ref, ids, (size_t)steps * sizeof *ids);
        int same = memcmp(ref, ids, (size_t)steps * sizeof *ids) == 0;
        double mw = median(wall, reps), md = median(dec, reps);
        char tj[160];
        tuning_json(m, tj, sizeof tj);
        printf("{\"bench\":\"engine_generate\",\"model\":\"%s\",\"dtype\":\"%s\",%s,"
               "\"argmax\":\"%s\",\"device_path\":%s,\"tokens\":%d,\"reps\":%d,"
               "\"prompt\":%d,\"median_generate_ms\":%.3f,\"tokens_per_s\":%.2f,"
               "\"decode_tokens_per_s\":%.2f,\"ids_equal_device\":%s,\"last_token\":%d}\n",
               label, info.weight_type, tj, dev ? "device" : "host",
               llm_session_device_argmax(s) ? "true" : "false", steps, reps, PROMPT, mw * 1e3,
               steps / mw, (steps - 1) / md, same ? "true" : "false", ids[steps - 1]);
        fflush(stdout);
    }
    llm_session_set_device_argmax(s, 1);
    llm_sampler_free(sp);
    return rc;
}

static const struct {
    const char *name;
    int mode;
} modes[] = {
    {"graph", LLM_CUDA_DECODE_GRAPH},
    {"fused", LLM_CUDA_DECODE_FUSED},
    {"ops", LLM_CUDA_DECODE_OPS},
};

/* The fused prefill's median and last-row argmax, for the ops line. */
typedef struct prefill_ref {
    double median_s;
    int32_t argmax;
} prefill_ref;

/* llm_prefill of n tokens (one forward, the session's batch is n) from
 * position 0 in prefill mode `mode`, median of reps after a warm-up; the
 * FUSED run fills *ref, the OPS run is set against it. 0 ok. */
static int bench_prefill(llm_model *m, const llm_model_info *info, const char *label, int n,
                         int reps, int mode, double peak, prefill_ref *ref)
{
    if (llm_cuda_backend_set_prefill(m->be, mode) != 0) {
        fprintf(stderr, "bench_engine: prefill mode %d refused\n", mode);
        return 1;
    }
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = (uint32_t)n + 1;
    so.n_batch = (uint32_t)n;
    llm_session *s = NULL;
    char err[256];
    if (llm_session_create(m, &so, &s, err, sizeof err) != 0) {
        fprintf(stderr, "bench_engine: prefill session: %s\n", err);
        return 1;
    }
    int32_t *toks = malloc((size_t)n * sizeof *toks);
    if (!toks) {
        llm_session_free(s);
        return 1;
    }
    for (int i = 0; i < n; i++)
        toks[i] = (int32_t)((7919u * (unsigned)i + 13u) % (unsigned)info->n_vocab);
    double t[MAX_REPS];
    int rc = 0;
    int32_t top = -1;
    for (int r = -1; rc == 0 && r < reps; r++) { /* r = -1: warm-up */
        llm_session_reset(s);
        const float *logits;
        double t0 = now_s();
        rc = llm_prefill(s, toks, (size_t)n, 0, &logits);
        if (r >= 0)
            t[r] = now_s() - t0;
        if (rc == 0 && r == -1)
            top = argmax_of(logits, info->n_vocab);
    }
    if (rc) {
        fprintf(stderr, "bench_engine: prefill: %s\n", llm_session_error(s));
    } else {
        double hd = (double)info->dim / info->n_heads, q_dim = hd * info->n_heads;
        double kv_dim = hd * info->n_kv_heads;
        double layer_params = (double)info->dim * (q_dim + 2.0 * kv_dim) + q_dim * info->dim +
                              3.0 * (double)info->dim * info->ffn_dim;
        double attn = 2.0 * 2.0 * ((double)n * (n + 1) / 2.0) * hd * info->n_heads;
        double flops = info->n_layers * (2.0 * n * layer_params + attn) +
                       2.0 * (double)info->dim * info->n_vocab;
        double md = median(t, reps);
        char tj[160];
        tuning_json(m, tj, sizeof tj);
        if (mode == LLM_CUDA_PREFILL_FUSED) {
            ref->median_s = md;
            ref->argmax = top;
            printf("{\"bench\":\"engine_prefill\",\"model\":\"%s\",\"dtype\":\"%s\",%s,"
                   "\"tokens\":%d,\"reps\":%d,\"median_ms\":%.3f,\"tokens_per_s\":%.0f,"
                   "\"TFLOPs\":%.1f,\"fraction_of_gemm_peak\":%.3f}\n", label,
                   info->weight_type, tj, n, reps, md * 1e3, n / md, flops / md / 1e12,
                   peak > 0 ? flops / md / peak : 0.0);
        } else {
            printf("{\"bench\":\"engine_prefill_ops\",\"model\":\"%s\",\"dtype\":\"%s\",%s,"
                   "\"tokens\":%d,\"reps\":%d,\"median_ms\":%.3f,\"tokens_per_s\":%.0f,"
                   "\"TFLOPs\":%.1f,\"fused_speedup\":%.2f,\"argmax_equal_fused\":%s}\n",
                   label, info->weight_type, tj, n, reps, md * 1e3, n / md, flops / md / 1e12,
                   ref->median_s > 0 ? md / ref->median_s : 0.0,
                   top == ref->argmax ? "true" : "false");
        }
        fflush(stdout);
    }
    free(toks);
    llm_session_free(s);
    return rc;
}

/* The first_request line: the model's open, then the process's first
 * prefill of n tokens and first decode step, against the median of 5
 * later ones on the same session. Run alone in a fresh process. */
static int first_request(const char *path, const char *label, int n)
{
    enum { WARM = 5 };
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.backend = "cuda:0";
    llm_model *m = NULL;
    char err[256];
    double t0 = now_s();
    if (llm_model_open(path, &mo, &m, err, sizeof err) != 0) {
        fprintf(stderr, "bench_engine: %s: %s\n", path, err);
        return 1;
    }
    double open_s = now_s() - t0;
    llm_model_info info;
    llm_model_get_info(m, &info);
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = (uint32_t)n + 2;
    so.n_batch = (uint32_t)n;
    llm_session *s = NULL;
    t0 = now_s();
    if (llm_session_create(m, &so, &s, err, sizeof err) != 0) {
        fprintf(stderr, "bench_engine: session: %s\n", err);
        llm_model_free(m);
        return 1;
    }
    double session_s = now_s() - t0;
    int32_t toks[64];
    for (int i = 0; i < n; i++)
        toks[i] = (int32_t)((7919u * (unsigned)i + 13u) % (unsigned)info.n_vocab);
    double pre[WARM + 1], dec[WARM + 1];
    int rc = 0;
    for (int r = 0; rc == 0 && r <= WARM; r++) { /* r = 0: the first request */
        const float *logits = NULL;
        llm_session_reset(s);
        double a = now_s();
        rc = llm_prefill(s, toks, (size_t)n, 0, &logits);
        pre[r] = now_s() - a;
        if (rc == 0) {
            a = now_s();
            rc = llm_decode(s, argmax_of(logits, info.n_vocab), &logits);
            dec[r] = now_s() - a;
        }
    }
    if (rc) {
        fprintf(stderr, "bench_engine: first request: %s\n", llm_session_error(s));
    } else {
        llm_cuda_decode_stats st;
        memset(&st, 0, sizeof st);
        llm_cuda_backend_decode_stats(m->be, &st);
        char tj[160];
        tuning_json(m, tj, sizeof tj);
        double wp = median(pre + 1, WARM), wd = median(dec + 1, WARM);
        printf("{\"bench\":\"first_request\",\"model\":\"%s\",\"dtype\":\"%s\",%s,"
               "\"warmup\":%s,\"warmup_ms\":%.1f,\"open_s\":%.2f,\"session_ms\":%.2f,"
               "\"prompt\":%d,\"first_prefill_ms\":%.3f,\"warm_prefill_ms\":%.3f,"
               "\"first_over_warm\":%.2f,\"first_decode_ms\":%.3f,\"warm_decode_ms\":%.3f,"
               "\"first_decode_over_warm\":%.2f}\n",
               label, info.weight_type, tj, st.warmups ? "true" : "false",
               (double)st.warmup_us * 1e-3, open_s, session_s * 1e3, n, pre[0] * 1e3,
               wp * 1e3, pre[0] / wp, dec[0] * 1e3, wd * 1e3, dec[0] / wd);
        fflush(stdout);
    }
    llm_session_free(s);
    llm_model_free(m);
    return rc ? 1 : 0;
}

static long arg_long(const char *s, long lo, long hi, const char *what)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        fprintf(stderr, "bench_engine: bad %s '%s' (%ld..%ld)\n", what, s, lo, hi);
        exit(2);
    }
    return v;
}

#define MAX_PREFILLS 4

/* "512,2048": up to MAX_PREFILLS lengths (0 alone: none); their count. */
static int arg_prefills(const char *s, int *out)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", s);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_PREFILLS) {
            fprintf(stderr, "bench_engine: at most %d prefill lengths\n", MAX_PREFILLS);
            exit(2);
        }
        out[n] = (int)arg_long(tok, 0, 32768, "prefill_tokens");
        n += out[n] > 0;
    }
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 7 || strcmp(argv[1], "-h") == 0) {
        fprintf(stderr, "usage: bench_engine MODEL.gguf LABEL [decode_tokens] [reps] "
                        "[prefill_tokens[,more]] [all|graph]\n"
                        "       bench_engine MODEL.gguf LABEL first [prompt_tokens]\n");
        return argc == 2 && strcmp(argv[1], "-h") == 0 ? 0 : 2;
    }
    int ndev = 0;
    char err[256];
    llm_cuda_device_count(&ndev, err, sizeof err);
    if (ndev <= 0) {
        fprintf(stderr, "bench_engine: no CUDA device (%s)\n", err);
        return 1;
    }
    if (argc > 3 && strcmp(argv[3], "first") == 0) {
        if (argc > 5) {
            fprintf(stderr, "bench_engine: first takes one prompt length\n");
            return 2;
        }
        return first_request(argv[1], argv[2],
                             argc > 4 ? (int)arg_long(argv[4], 1, 64, "prompt_tokens") : 11);
    }
    int steps = argc > 3 ? (int)arg_long(argv[3], 1, MAX_TOKENS, "decode_tokens") : 128;
    int reps = argc > 4 ? (int)arg_long(argv[4], 1, MAX_REPS, "reps") : 5;
    int prefills[MAX_PREFILLS];
    int n_prefills = argc > 5 ? arg_prefills(argv[5], prefills) : 0;
    int all = 1;
    if (argc > 6 && strcmp(argv[6], "graph") == 0)
        all = 0;
    else if (argc > 6 && strcmp(argv[6], "all") != 0) {
        fprintf(stderr, "bench_engine: modes must be all or graph (got '%s')\n", argv[6]);
        return 2;
    }
    double bw = copy_bandwidth(2 * reps);
    double peak = n_prefills > 0 ? gemm_peak(reps) : 0.0;
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.backend = "cuda:0";
    llm_model *m = NULL;
    double t_open = now_s();
    if (llm_model_open(argv[1], &mo, &m, err, sizeof err) != 0) {
        fprintf(stderr, "bench_engine: %s: %s\n", argv[1], err);
        return 1;
    }
    t_open = now_s() - t_open;
    llm_model_info info;
    llm_model_get_info(m, &info);
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = PROMPT + steps + 1;
    so.n_batch = PROMPT;
    llm_session *s = NULL;
    if (llm_session_create(m, &so, &s, err, sizeof err) != 0) {
        fprintf(stderr, "bench_engine: session: %s\n", err);
        llm_model_free(m);
        return 1;
    }
    int32_t *ids = malloc((size_t)steps * sizeof *ids), *ref = malloc((size_t)steps * sizeof *ref);
    if (!ids || !ref) {
        fprintf(stderr, "bench_engine: out of memory\n");
        return 1;
    }
    int rc = 0;
    size_t n_modes = all ? sizeof modes / sizeof modes[0] : 1;
    for (size_t k = 0; rc == 0 && k < n_modes; k++) {
        if (llm_cuda_backend_set_decode(m->be, modes[k].mode) != 0) {
            rc = 1;
            break;
        }
        double dec[MAX_REPS], wall[MAX_REPS], d0, w0;
        rc = greedy(s, info.n_vocab, steps, ids, &d0, &w0); /* warm-up, captures */
        for (int r = 0; rc == 0 && r < reps; r++)
            rc = greedy(s, info.n_vocab, steps, ids, &dec[r], &wall[r]);
        if (rc) {
            fprintf(stderr, "bench_engine: %s: %s\n", modes[k].name, llm_session_error(s));
            break;
        }
        if (k == 0)
            memcpy(ref, ids, (size_t)steps * sizeof *ids);
        int same = memcmp(ref, ids, (size_t)steps * sizeof *ids) == 0;
        double md = median(dec, reps), mw = median(wall, reps);
        double tps = steps / md, wbw = (double)info.weight_bytes * tps;
        llm_cuda_decode_stats st;
        llm_cuda_backend_decode_stats(m->be, &st);
        char tj[160];
        tuning_json(m, tj, sizeof tj);
        printf("{\"bench\":\"engine_decode\",\"model\":\"%s\",\"dtype\":\"%s\",%s,"
               "\"mode\":\"%s\",\"layers\":%d,\"dim\":%d,\"tokens\":%d,\"reps\":%d,\"context_start\":%d,"
               "\"median_decode_ms\":%.3f,\"tokens_per_s\":%.2f,\"wall_tokens_per_s\":%.2f,"
               "\"weight_bytes_per_token\":%llu,\"weight_GBps\":%.1f,"
               "\"fraction_of_copy_bw\":%.3f,\"ids_equal_graph\":%s,\"last_token\":%d,"
               "\"fused_layers\":%u,\"captures\":%llu,\"open_s\":%.1f,"
               "\"warmup_ms\":%.1f}\n",
               argv[2], info.weight_type, tj, modes[k].name, info.n_layers, info.dim, steps, reps,
               PROMPT, md * 1e3, tps, steps / mw, (unsigned long long)info.weight_bytes,
               wbw / 1e9, bw > 0 ? wbw / bw : 0.0, same ? "true" : "false", ids[steps - 1],
               (unsigned)st.fused_layers, (unsigned long long)st.captures, t_open,
               (double)st.warmup_us * 1e-3);
        fflush(stdout);
    }
    if (rc == 0)
        rc = bench_generate(m, s, argv[2], steps, reps, ids, ref, all);
    free(ids);
    free(ref);
    llm_session_free(s);
    for (int i = 0; rc == 0 && i < n_prefills; i++) {
        prefill_ref pref = {0.0, -1};
        rc = bench_prefill(m, &info, argv[2], prefills[i], reps, LLM_CUDA_PREFILL_FUSED, peak,
                           &pref);
        if (rc == 0 && all)
            rc = bench_prefill(m, &info, argv[2], prefills[i], reps, LLM_CUDA_PREFILL_OPS,
                               peak, &pref);
    }
    llm_model_free(m);
    return rc ? 1 : 0;
}
