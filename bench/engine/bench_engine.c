/* bench_engine — prefill and decode throughput of the CPU engine on
 * synthetic llama models of about 15M, 110M and 1B parameters in F32 and
 * Q8_0 (optionally Q4_0/Q4_1/Q5_0/Q5_1/F16/BF16), side by side with a memory-bandwidth
 * probe taken in the same run, so decode can be stated as a fraction of
 * what the memory system delivered.
 *
 *   bench_engine [--threads 1,2] [--reps R] [--models 15m,110m,1b]
 *                [--types f32,q8_0] [--kernels SET,SET] [--dir /tmp] [--keep]
 *   bench_engine --file MODEL.gguf [--label L] [--threads 1,2] [--reps R]
 *                [--prompt 512] [--gen 128] [--no-probe] [--no-mmap]
 *
 * One JSON object per line on stdout:
 *   {"bench":"membw", ...}  read bandwidth per thread count: the threads
 *                           summing a 2 GiB buffer with AVX2 and the same
 *                           software prefetch as the kernels (scalar
 *                           elsewhere), best of R; "pages" says whether the
 *                           buffer had the default pages (4 KiB unless THP
 *                           is "always") or asked for 2 MiB ones, which a
 *                           second line per thread count measures: a model
 *                           read cold is mapped with huge pages (gguf.c),
 *                           so that line is the bound to hold it to
 *   {"bench":"engine", ...} per model and type: prefill and decode tokens/s
 *                           (best of R), weight bytes read per decode step,
 *                           decode weight bytes/s and its ratio to the probe
 *                           taken with the same thread count
 * Each model is measured at every thread count in turn, so the ratios
 * between counts and types come from one run.
 * --kernels lists CPU kernel sets (auto, scalar, avx2, avx2+vnni, avx512;
 * default auto): each gets its own open of the model (through
 * PHASEMARK_ENGINE_KERNELS), and every repetition measures them all in
 * turn, in alternating order, so a busy host's drift falls on all sets
 * alike; each set's line then carries "kernels" (the set that ran) and its
 * prefill and decode rates relative to the first set's.
 * Models are written to DIR as GGUF on first use (removed unless --keep).
 *
 * With --file the model is a given GGUF file (for instance one written by
 * pm-modelwriter, shared with another engine's benchmark) and the two
 * phases are measured the way llama-bench measures pp and tg, so the
 * numbers can stand side by side: prefill is one forward of --prompt
 * pseudo-random tokens on an empty context; decode is --gen single-token
 * forwards from position 0 of an empty context (greedy, the argmax fed
 * back). After one warm-up of each, R repetitions; the line
 *   {"bench":"engine_file", ...} carries the median and the best of each,
 * and weights_copied_bytes (the CPU backend's huge-page copy of float
 * matrices; 0 with PHASEMARK_ENGINE_WEIGHTS=map). --no-mmap reads the
 * file into memory (llm_model_options.no_mmap) instead of mapping it.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "model.h"
#include "pool.h"
#include "phasemark/engine.h"
#include "quant.h"
#include "synth.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef struct shape {
    const char *name;
    int dim, layers, heads, kv_heads, ffn, vocab;
    int prefill, decode; /* tokens per measurement */
} shape;

/* llama2.c's stories15M and stories110M shapes, and TinyLlama-1.1B's. */
static const shape shapes[] = {
    {"15m", 288, 6, 6, 6, 768, 32000, 128, 64},
    {"110m", 768, 12, 12, 12, 2048, 32000, 128, 32},
    {"1b", 2048, 22, 32, 4, 5632, 32000, 64, 16},
};

#define MAX_COUNTS 8
#define MAX_SETS 4

typedef struct opts {
    int threads[MAX_COUNTS], n_threads, reps, keep;
    char models[128], types[128];
    char sets[MAX_SETS][16]; /* kernel sets to compare ("auto": the host's) */
    int n_sets;
    const char *dir;
    const char *file, *label; /* --file mode */
    int prompt, gen, probe, no_mmap;
} opts;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- memory bandwidth probe --------------------------------------------- */

typedef struct probe {
    const float *buf;
    size_t n;
    double sums[64];
} probe;

#if defined(__x86_64__)
/* Prefetches a page ahead like the engine's kernels do, so the probe is
 * the best streaming read we know how to issue, not a weaker reference
 * that decode could beat. */
__attribute__((target("avx2"))) static double sum_avx2(const float *p, size_t n)
{
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    __m256 c = _mm256_setzero_ps(), d = _mm256_setzero_ps();
    for (size_t i = 0; i + 32 <= n; i += 32) {
        _mm_prefetch((const char *)(p + i) + 4096, _MM_HINT_T0);
        _mm_prefetch((const char *)(p + i) + 4096 + 64, _MM_HINT_T0);
        a = _mm256_add_ps(a, _mm256_load_ps(p + i));
        b = _mm256_add_ps(b, _mm256_load_ps(p + i + 8));
        c = _mm256_add_ps(c, _mm256_load_ps(p + i + 16));
        d = _mm256_add_ps(d, _mm256_load_ps(p + i + 24));
    }
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
    return (double)t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#endif

static double sum_plain(const float *p, size_t n)
{
    float s[8] = {0};
    for (size_t i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += p[i + j];
    return (double)s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

static void probe_worker(void *ctx, int32_t ith, int32_t nth)
{
    probe *p = ctx;
    int64_t b, e;
    llm_pool_slice((int64_t)p->n, 1024, ith, nth, &b, &e);
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        p->sums[ith] = sum_avx2(p->buf + b, (size_t)(e - b));
        return;
    }
#endif
    p->sums[ith] = sum_plain(p->buf + b, (size_t)(e - b));
}

/* Best read bandwidth in bytes/s over reps passes of a 2 GiB buffer, on
 * the default pages or (huge) advised to 2 MiB ones before first touch. */
static double membw_pages(int threads, int reps, int huge)
{
    size_t bytes = (size_t)2 << 30;
    float *buf = aligned_alloc(4096, bytes);
    llm_pool *pool;
    if (!buf || llm_pool_create(threads, &pool) != 0) {
        free(buf);
        return 0;
    }
#ifdef MADV_HUGEPAGE
    if (huge)
        (void)madvise(buf, bytes, MADV_HUGEPAGE);
#endif
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        buf[i] = (float)(i & 7);
    probe p = {buf, bytes / sizeof(float), {0}};
    double best = 0, guard = 0;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now_s();
        llm_pool_run(pool, probe_worker, &p);
        double dt = now_s() - t0;
        for (int i = 0; i < threads; i++)
            guard += p.sums[i];
        if (r > 0 && (double)bytes / dt > best) /* pass 0 warms up */
            best = (double)bytes / dt;
    }
    printf("{\"bench\":\"membw\",\"threads\":%d,\"pages\":\"%s\",\"bytes\":%zu,\"reps\":%d,"
           "\"GBps\":%.3f,\"checksum\":%.0f}\n",
           threads, huge ? "huge" : "default", bytes, reps, best / 1e9, guard);
    fflush(stdout);
    llm_pool_free(pool);
    free(buf);
    return best;
}

/* The default-page probe (the one decode is stated against), then the
 * huge-page one for reference. */
static double membw(int threads, int reps)
{
    double bw = membw_pages(threads, reps, 0);
    (void)membw_pages(threads, reps, 1);
    return bw;
}

/* ---- engine ---------------------------------------------------------------- */

static int ensure_model(const shape *sh, const char *type, const opts *o, char *path, size_t cap,
                        int *created)
{
    snprintf(path, cap, "%s/pm_bench_%s_%s.gguf", o->dir, sh->name, type);
    *created = 0;
    if (access(path, R_OK) == 0)
        return 0;
    synth_spec s = synth_default();
    s.hp.dim = sh->dim;
    s.hp.n_layers = sh->layers;
    s.hp.n_heads = sh->heads;
    s.hp.n_kv_heads = sh->kv_heads;
    s.hp.ffn = sh->ffn;
    s.hp.vocab = sh->vocab;
    s.hp.ctx = 2048;
    s.type = s.embd_type = synth_type(type);
    double t0 = now_s();
    if (synth_write(path, &s) != 0)
        return -1;
    fprintf(stderr, "bench_engine: wrote %s in %.1f s\n", path, now_s() - t0);
    *created = 1;
    return 0;
}

static int32_t argmax(const float *x, int n)
{
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

typedef struct result {
    double prefill_tps, decode_tps;
} result;

/* One repetition: prefill sh->prefill tokens, then greedy decode. */
static int measure(llm_session *s, const shape *sh, int vocab, result *r)
{
    int32_t prompt[512];
    for (int i = 0; i < sh->prefill; i++)
        prompt[i] = (int32_t)((i * 7919 + 13) % vocab);
    llm_session_reset(s);
    const float *lg;
    double t0 = now_s();
    if (llm_prefill(s, prompt, (size_t)sh->prefill, 0, &lg) != 0)
        return -1;
    double t1 = now_s();
    for (int i = 0; i < sh->decode; i++)
        if (llm_decode(s, argmax(lg, vocab), &lg) != 0)
            return -1;
    double t2 = now_s();
    r->prefill_tps = sh->prefill / (t1 - t0);
    r->decode_tps = sh->decode / (t2 - t1);
    return 0;
}

/* One open model and session per kernel set. */
typedef struct run {
    llm_model *m;
    llm_session *s;
    const char *kernels; /* the set that runs */
    result best;
} run;

static int open_run(const char *path, const char *set, int threads, const shape *sh, run *r)
{
    char err[256];
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.n_threads = threads;
    if (strcmp(set, "auto") == 0)
        unsetenv("PHASEMARK_ENGINE_KERNELS");
    else
        setenv("PHASEMARK_ENGINE_KERNELS", set, 1);
    int rc = llm_model_open(path, &mo, &r->m, err, sizeof err);
    unsetenv("PHASEMARK_ENGINE_KERNELS");
    if (rc != 0) {
        fprintf(stderr, "bench_engine: %s\n", err);
        return -1;
    }
    r->kernels = llm_cpu_backend_kernels(r->m->be);
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = sh->prefill + sh->decode + 8;
    so.n_batch = sh->prefill;
    if (llm_session_create(r->m, &so, &r->s, err, sizeof err) != 0) {
        fprintf(stderr, "bench_engine: %s\n", err);
        llm_model_free(r->m);
        return -1;
    }
    return 0;
}

static int bench_threads(const shape *sh, const char *type, const opts *o, const char *path,
                         int threads, double bw)
{
    run runs[MAX_SETS];
    memset(runs, 0, sizeof runs);
    int n = 0, rc = 0;
    for (; n < o->n_sets && rc == 0; n++)
        rc = open_run(path, o->sets[n], threads, sh, &runs[n]);
    if (rc != 0)
        n--; /* the failed one holds nothing */
    llm_model_info info;
    if (rc == 0)
        llm_model_get_info(runs[0].m, &info);
    for (int rep = 0; rep <= o->reps && rc == 0; rep++) { /* rep 0 warms up */
        for (int k = 0; k < n && rc == 0; k++) {
            run *r = &runs[rep % 2 ? n - 1 - k : k];
            result got;
            rc = measure(r->s, sh, info.n_vocab, &got);
            if (rc == 0 && rep > 0) {
                if (got.prefill_tps > r->best.prefill_tps)
                    r->best.prefill_tps = got.prefill_tps;
                if (got.decode_tps > r->best.decode_tps)
                    r->best.decode_tps = got.decode_tps;
            }
        }
    }
    for (int k = 0; k < n && rc == 0; k++) {
        const result *b = &runs[k].best, *b0 = &runs[0].best;
        double wbps = (double)info.weight_bytes * b->decode_tps;
        printf("{\"bench\":\"engine\",\"model\":\"%s\",\"type\":\"%s\",\"kernels\":\"%s\","
               "\"params\":%llu,\"weight_bytes\":%llu,\"threads\":%d,\"reps\":%d,"
               "\"prefill_tokens\":%d,\"prefill_tok_s\":%.2f,\"decode_tokens\":%d,"
               "\"decode_tok_s\":%.3f,\"decode_weight_GBps\":%.3f,\"membw_GBps\":%.3f,"
               "\"decode_bw_fraction\":%.3f,\"prefill_vs_first\":%.3f,\"decode_vs_first\":%.3f}\n",
               sh->name, type, runs[k].kernels, (unsigned long long)info.n_params,
               (unsigned long long)info.weight_bytes, (int)info.n_threads, o->reps,
               sh->prefill, b->prefill_tps, sh->decode, b->decode_tps, wbps / 1e9, bw / 1e9,
               bw > 0 ? wbps / bw : 0.0, b0->prefill_tps > 0 ? b->prefill_tps / b0->prefill_tps : 0.0,
               b0->decode_tps > 0 ? b->decode_tps / b0->decode_tps : 0.0);
    }
    fflush(stdout);
    for (int k = 0; k < n; k++) {
        llm_session_free(runs[k].s);
        llm_model_free(runs[k].m);
    }
    return rc;
}

static int bench_one(const shape *sh, const char *type, const opts *o, const double *bw)
{
    char path[512];
    int created, rc = 0;
    if (ensure_model(sh, type, o, path, sizeof path, &created) != 0)
        return -1;
    for (int i = 0; i < o->n_threads && rc == 0; i++)
        rc = bench_threads(sh, type, o, path, o->threads[i], bw[i]);
    if (created && !o->keep)
        unlink(path);
    return rc;
}

/* ---- --file mode: one given model, llama-bench's pp and tg shapes --------- */

#define FILE_MAX_REPS 100

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of n values (sorts v). */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Tokens per second of one prefill of n tokens on an empty context. */
static int time_prefill(llm_session *s, const int32_t *prompt, int n, double *tps)
{
    llm_session_reset(s);
    double t0 = now_s();
    if (llm_prefill(s, prompt, (size_t)n, 0, NULL) != 0)
        return -1;
    *tps = n / (now_s() - t0);
    return 0;
}

/* Tokens per second of n greedy decode steps from position 0. */
static int time_decode(llm_session *s, int n, int vocab, double *tps)
{
    llm_session_reset(s);
    const float *lg;
    int32_t tok = 1 % vocab;
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        if (llm_decode(s, tok, &lg) != 0)
            return -1;
        tok = argmax(lg, vocab);
    }
    *tps = n / (now_s() - t0);
    return 0;
}

static int bench_file_threads(const opts *o, int threads, double bw)
{
    char err[256];
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.n_threads = threads;
    mo.no_mmap = o->no_mmap;
    llm_model *m;
    if (llm_model_open(o->file, &mo, &m, err, sizeof err) != 0) {
        fprintf(stderr, "bench_engine: %s: %s\n", o->file, err);
        return -1;
    }
    llm_model_info info;
    llm_model_get_info(m, &info);
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = (o->prompt > o->gen ? o->prompt : o->gen) + 8;
    so.n_batch = o->prompt > 0 ? o->prompt : 1;
    llm_session *s = NULL;
    int32_t *prompt = malloc((size_t)(o->prompt > 0 ? o->prompt : 1) * sizeof *prompt);
    if (!prompt || llm_session_create(m, &so, &s, err, sizeof err) != 0) {
        fprintf(stderr, "bench_engine: %s\n", prompt ? err : "out of memory");
        free(prompt);
        llm_model_free(m);
        return -1;
    }
    for (int i = 0; i < o->prompt; i++)
        prompt[i] = (int32_t)(((int64_t)i * 7919 + 13) % info.n_vocab);
    double pp[FILE_MAX_REPS + 1], tg[FILE_MAX_REPS + 1];
    int rc = 0;
    for (int r = 0; r <= o->reps && rc == 0; r++) { /* r == 0 warms up */
        pp[r] = tg[r] = 0;
        if (o->prompt > 0)
            rc = time_prefill(s, prompt, o->prompt, &pp[r]);
        if (rc == 0 && o->gen > 0)
            rc = time_decode(s, o->gen, info.n_vocab, &tg[r]);
    }
    if (rc != 0) {
        fprintf(stderr, "bench_engine: %s: %s\n", o->file, llm_session_error(s));
    } else {
        double pmax = 0, tmax = 0;
        for (int r = 1; r <= o->reps; r++) {
            pmax = pp[r] > pmax ? pp[r] : pmax;
            tmax = tg[r] > tmax ? tg[r] : tmax;
        }
        double pmed = median(pp + 1, o->reps), tmed = median(tg + 1, o->reps);
        double wbps = (double)info.weight_bytes * tmed;
        printf("{\"bench\":\"engine_file\",\"model\":\"%s\",\"file\":\"%s\",\"type\":\"%s\","
               "\"params\":%llu,\"weight_bytes\":%llu,\"threads\":%d,\"reps\":%d,"
               "\"prompt_tokens\":%d,\"prefill_tok_s\":%.3f,\"prefill_tok_s_best\":%.3f,"
               "\"gen_tokens\":%d,\"decode_tok_s\":%.3f,\"decode_tok_s_best\":%.3f,"
               "\"decode_weight_GBps\":%.3f,\"membw_GBps\":%.3f,\"weights_copied_bytes\":%zu}\n",
               o->label, o->file, info.weight_type, (unsigned long long)info.n_params,
               (unsigned long long)info.weight_bytes, (int)info.n_threads, o->reps, o->prompt, pmed,
               pmax, o->gen, tmed, tmax, wbps / 1e9, bw / 1e9,
               llm_cpu_backend_weights_copied(m->be, NULL));
        fflush(stdout);
    }
    llm_session_free(s);
    llm_model_free(m);
    free(prompt);
    return rc;
}

static int bench_file(const opts *o)
{
    int rc = 0;
    for (int i = 0; i < o->n_threads && rc == 0; i++)
        rc = bench_file_threads(o, o->threads[i], o->probe ? membw(o->threads[i], o->reps) : 0.0);
    return rc ? 1 : 0;
}

/* 1 when `name` is an element of the comma-separated list. */
static int listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        p += len + (e ? 1 : 0);
    }
    return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

/* "avx2+vnni,avx512" -> sets; -1 when malformed or not a set's name. */
static int parse_sets(const char *s, opts *o)
{
    static const char *const known[] = {"auto", "scalar", "avx2", "avx2+vnni", "avx512"};
    o->n_sets = 0;
    for (const char *p = s; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        int found = 0;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            if (strlen(known[i]) == len && strncmp(p, known[i], len) == 0)
                found = 1;
        if (!found || o->n_sets == MAX_SETS)
            return -1;
        snprintf(o->sets[o->n_sets++], sizeof o->sets[0], "%.*s", (int)len, p);
        p += len + (e ? 1 : 0);
    }
    return o->n_sets ? 0 : -1;
}

/* "1,2" -> counts; -1 when malformed. */
static int parse_counts(const char *s, opts *o)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    o->n_threads = 0;
    for (char *p = buf; *p;) {
        char *e = strchr(p, ',');
        if (e)
            *e = '\0';
        if (o->n_threads == MAX_COUNTS || parse_int(p, 1, 64, &o->threads[o->n_threads++]))
            return -1;
        if (!e)
            break;
        p = e + 1;
    }
    return o->n_threads ? 0 : -1;
}

static int parse_opts(int argc, char **argv, opts *o)
{
    o->threads[0] = 1;
    o->threads[1] = 2;
    o->n_threads = 2;
    o->reps = 3;
    o->keep = 0;
    o->dir = "/tmp";
    o->file = NULL;
    o->label = "file";
    o->prompt = 512;
    o->gen = 128;
    o->probe = 1;
    o->no_mmap = 0;
    snprintf(o->sets[0], sizeof o->sets[0], "auto");
    o->n_sets = 1;
    snprintf(o->models, sizeof o->models, "15m,110m,1b");
    snprintf(o->types, sizeof o->types, "f32,q8_0");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--keep")) { o->keep = 1; continue; }
        if (!strcmp(a, "--no-probe")) { o->probe = 0; continue; }
        if (!strcmp(a, "--no-mmap")) { o->no_mmap = 1; continue; }
        if (!v) return -1;
        i++;
        if (!strcmp(a, "--threads")) { if (parse_counts(v, o)) return -1; }
        else if (!strcmp(a, "--reps")) { if (parse_int(v, 1, 100, &o->reps)) return -1; }
        else if (!strcmp(a, "--models")) snprintf(o->models, sizeof o->models, "%s", v);
        else if (!strcmp(a, "--types")) snprintf(o->types, sizeof o->types, "%s", v);
        else if (!strcmp(a, "--kernels")) { if (parse_sets(v, o)) return -1; }
        else if (!strcmp(a, "--dir")) o->dir = v;
        else if (!strcmp(a, "--file")) o->file = v;
        else if (!strcmp(a, "--label")) o->label = v;
        else if (!strcmp(a, "--prompt")) { if (parse_int(v, 0, 32768, &o->prompt)) return -1; }
        else if (!strcmp(a, "--gen")) { if (parse_int(v, 0, 32768, &o->gen)) return -1; }
        else return -1;
    }
    return o->file && o->prompt + o->gen == 0 ? -1 : 0;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse_opts(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: bench_engine [--threads 1,2] [--reps R] [--models 15m,110m,1b] "
                        "[--types f32,q8_0] [--kernels auto|scalar|avx2|avx2+vnni|avx512,...] "
                        "[--dir DIR] [--keep]\n"
                        "       bench_engine --file MODEL.gguf [--label L] [--threads 1,2] [--reps R] "
                        "[--prompt 512] [--gen 128] [--no-probe] [--no-mmap]\n");
        return 2;
    }
    if (o.file)
        return bench_file(&o);
    static const char *const types[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"};
    double bw[MAX_COUNTS];
    for (int i = 0; i < o.n_threads; i++)
        bw[i] = membw(o.threads[i], o.reps);
    int rc = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (!listed(o.models, shapes[i].name))
            continue;
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
            if (listed(o.types, types[t]) && bench_one(&shapes[i], types[t], &o, bw) != 0)
                rc = 1;
    }
    for (int i = 0; i < o.n_threads; i++) /* conditions may have changed */
        membw(o.threads[i], o.reps);
    return rc;
}
