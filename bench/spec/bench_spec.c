/* bench_spec — speculative decoding against plain autoregressive decoding,
 * side by side in one process, at greedy parity.
 *
 *   bench_spec derive IN OUT [--layers L] [--type T]
 *       a draft from a target GGUF: its first L blocks, matrices re-encoded
 *       to T (tests/spec/spec_models.h)
 *   bench_spec cost --model M [--draft D] [--threads N] [--reps R]
 *       one line per width n = 1..9: the time of one llm_verify of n tokens
 *       against one llm_decode (what a round's verify costs in decodes);
 *       with a draft, one more line: a draft decode as a round meets it
 *       (after a target verify), against the target's decode
 *   bench_spec widths --model M [--kernels SET | --prefetch tile] [--threads N]
 *                     [--reps R] [--cold MB]
 *       the verify-width cost curve: after a 64-token history, one
 *       decode and verifies of w = 1..17 rows, per repetition (4 R of
 *       them, at most 64), each rolled back; with --kernels (--prefetch), a second copy of the model
 *       opened under PHASEMARK_ENGINE_KERNELS=SET (PHASEMARK_ENGINE_PREFETCH
 *       =tile: the Q8_0 kernel before the deeper prefetch) takes turns
 *       with the default repetition by repetition, so both meet the same
 *       load. Per arm and width: median wall time, its ratio to the arm's
 *       decode, the cost of the rows past the first per row, and the
 *       arm's time against the default's; the same from the calling
 *       thread's CPU time (all of a forward's at --threads 1, and blind to
 *       a busy host's preemption); one JSON line each. --cold MB writes
 *       every line of an MB-MiB buffer before each timed forward, so that
 *       it finds none of the weights in the caches (as a verify does after
 *       a drafter's forward evicted them)
 *   bench_spec alternate --model M --draft D [--threads N] [--reps R]
 *       a k = 1 model round's pieces (a draft decode, a verify of 2) and a
 *       plain decode, with the draft on threads of its own and on the
 *       target's, taking turns in blocks: medians per piece and mode, and
 *       the process's CPU time per decode and per round
 *   bench_spec loop --model M --n N [--threads T] [--reps R]
 *       R forwards of width N (0: a decode) back to back after a 32-token
 *       history, for a profiler (perf record) to look at one shape; one line
 *       with the median time
 *   bench_spec kernels [--reps R]
 *       the Q8_0 matrix-vector kernels on one thread, on a 1408 x 512
 *       matrix (the KJV target's feed-forward shape, in L2), for 1..8
 *       activation rows: the single-row dot per row and activation row (the
 *       loop before the blocked kernels), the AVX2 tiles and the VNNI tiles;
 *       cycles per block of 32 weights per activation row at 3 GHz
 *   bench_spec ops --model M [--n N] [--threads T] [--reps R]
 *       where one forward of width N (1: a decode) spends its time: each
 *       backend operation of a layer timed alone (median), times the layer
 *       count, beside the whole forward measured in the same loop
 *   bench_spec run --target T --draft D [--k 2,4,6] [--adaptive] [--threads N]
 *                  [--tokens M] [--reps R] [--label NAME]
 *       for each k: R repetitions, each generating M tokens greedily (no
 *       EOS stop) for 10 prompts with llm_generate and then with
 *       llm_spec_generate; parity is checked token for token; tokens/s are
 *       medians over repetitions, end to end (prompt prefill included)
 *
 * Output: one JSON object per line on stdout. Exit 0, 1 on failure (or a
 * parity break), 2 on a usage error.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cpu_ops.h"
#include "kernels.h"
#include "model.h"
#include "quant.h"
#include "phasemark/engine.h"
#include "phasemark/spec.h"
#include "spec_models.h"

#define PROG "bench_spec"
#define N_PROMPTS 10
#define MAX_REPS 64
#define MAX_TOKENS 1024
#define MAX_KS 16
#define LOOP_MAX_REPS 100000

static const char *const k_texts[N_PROMPTS] = {
    "And it came to pass, when the king heard",
    "In the beginning God created",
    "Then said Jesus unto his disciples,",
    "And the LORD spake unto Moses, saying,",
    "Blessed are the poor in spirit:",
    "And David said unto Saul,",
    "Thus saith the LORD of hosts,",
    "Now the serpent was more subtil than any beast",
    "And he opened his mouth, and taught them, saying,",
    "Once upon a time there was a little girl",
};

typedef struct opts {
    const char *model, *target, *draft, *label, *type, *kernels, *prefetch;
    int threads, reps, tokens, adaptive, layers, n, loop_reps, cold_mb;
    int ks[MAX_KS], n_ks;
} opts;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
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

/* "2,4,6" -> ks. */
static int parse_ks(const char *s, opts *o)
{
    o->n_ks = 0;
    char buf[128];
    if (strlen(s) >= sizeof buf)
        return -1;
    memcpy(buf, s, strlen(s) + 1);
    char *p = buf;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 1 || v > 63 || o->n_ks >= MAX_KS)
            return -1;
        o->ks[o->n_ks++] = (int)v;
        if (*end == ',')
            end++;
        else if (*end)
            return -1;
        p = end;
    }
    return o->n_ks ? 0 : -1;
}

static int parse_opts(int argc, char **argv, int first, opts *o)
{
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--adaptive")) {
            o->adaptive = 1;
            continue;
        }
        if (i + 1 >= argc)
            return -1;
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--target")) o->target = v;
        else if (!strcmp(a, "--draft")) o->draft = v;
        else if (!strcmp(a, "--label")) o->label = v;
        else if (!strcmp(a, "--type")) o->type = v;
        else if (!strcmp(a, "--kernels")) o->kernels = v;
        else if (!strcmp(a, "--prefetch")) o->prefetch = v;
        else if (!strcmp(a, "--layers")) rc = parse_int(v, 1, 1000, &o->layers);
        else if (!strcmp(a, "--threads")) rc = parse_int(v, 1, 256, &o->threads);
        else if (!strcmp(a, "--reps")) {
            rc = parse_int(v, 1, LOOP_MAX_REPS, &o->loop_reps);
            o->reps = o->loop_reps < MAX_REPS ? o->loop_reps : MAX_REPS;
        }
        else if (!strcmp(a, "--n")) rc = parse_int(v, 0, 16, &o->n);
        else if (!strcmp(a, "--cold")) rc = parse_int(v, 1, 4096, &o->cold_mb);
        else if (!strcmp(a, "--tokens")) rc = parse_int(v, 2, MAX_TOKENS, &o->tokens);
        else if (!strcmp(a, "--k")) rc = parse_ks(v, o);
        else return -1;
        if (rc)
            return -1;
    }
    return 0;
}

static llm_model *open_model(const char *path, int threads)
{
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.n_threads = threads;
    llm_model *m = NULL;
    char err[512];
    if (llm_model_open(path, &mo, &m, err, sizeof err) != 0)
        fprintf(stderr, PROG ": %s\n", err);
    return m;
}

static llm_session *open_session(llm_model *m, uint64_t req)
{
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = 2048;
    so.n_batch = 64;
    so.request = req;
    llm_session *s = NULL;
    char err[512];
    if (llm_session_create(m, &so, &s, err, sizeof err) != 0)
        fprintf(stderr, PROG ": %s\n", err);
    return s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- cost -------------------------------------------------------------- */

/* One forward of n tokens after a 32-token history (a decode for n == 0,
 * else a verify of n), rolled back after; ns, or -1 on failure. */
static double forward_once(llm_session *s, int n)
{
    static const int32_t toks[16] = {40, 41, 42, 43, 44, 45, 46, 47,
                                     48, 49, 50, 51, 52, 53, 54, 55};
    const float *lg;
    uint64_t t0 = now_ns();
    int rc = n == 0 ? llm_decode(s, toks[0], &lg) : llm_verify(s, toks, (size_t)n, &lg);
    uint64_t dt = now_ns() - t0;
    return rc || llm_session_truncate(s, 32) != 0 ? -1.0 : (double)dt;
}

#define COST_MAX_N 9

/* Each repetition times a decode and verifies of 1..9 back to back, so
 * slow drifts (frequency, a neighbour's load) touch every width alike;
 * medians per width. The first repetition warms up. */
/* A model and a session holding the 32-token history forward_once expects. */
static int open_with_history(const char *path, int threads, uint64_t req, llm_model **m,
                             llm_session **s)
{
    int32_t hist[32];
    for (int i = 0; i < 32; i++)
        hist[i] = 3 + i;
    *m = open_model(path, threads);
    *s = *m ? open_session(*m, req) : NULL;
    return *s && llm_prefill(*s, hist, 32, 0, NULL) == 0 ? 0 : -1;
}

/* With --draft, a second loop times what rounds of k = 3 do, back to back:
 * a verify of 4 and then three draft decodes (the mean of the three), so
 * the draft meets the caches as rounds leave them. (Timed right after the
 * ten target forwards of the first loop, the first draft forwards took
 * up to twice as long: a round never runs the target that long.) */
#define COST_ROUND_K 3
#define COST_ROUND_WARM 10
static int cmd_cost(const opts *o)
{
    llm_model *m = NULL, *dm = NULL;
    llm_session *s = NULL, *ds = NULL;
    int rc = 1;
    int reps = o->reps * 10 > MAX_REPS ? MAX_REPS : o->reps * 10;
    static double t[COST_MAX_N + 2][MAX_REPS];
    if (open_with_history(o->model, o->threads, 1, &m, &s) != 0 ||
        (o->draft && open_with_history(o->draft, o->threads, 2, &dm, &ds) != 0))
        goto done;
    for (int r = 0; r <= reps; r++)
        for (int n = 0; n <= COST_MAX_N; n++) {
            double v = forward_once(s, n);
            if (v < 0)
                goto done;
            if (r > 0)
                t[n][r - 1] = v;
        }
    for (int r = -COST_ROUND_WARM; ds && r < reps; r++) {
        double v = forward_once(s, COST_ROUND_K + 1), sum = 0;
        for (int i = 0; i < COST_ROUND_K && v >= 0; i++)
            sum += (v = forward_once(ds, 0));
        if (v < 0)
            goto done;
        if (r >= 0)
            t[COST_MAX_N + 1][r] = sum / COST_ROUND_K;
    }
    double dec = median(t[0], reps);
    printf("{\"bench\":\"verify_cost\",\"model\":\"%s\",\"threads\":%d,\"n\":0,\"what\":\"decode\","
           "\"ms\":%.4f}\n", o->model, o->threads, dec / 1e6);
    for (int n = 1; n <= COST_MAX_N; n++) {
        double v = median(t[n], reps);
        printf("{\"bench\":\"verify_cost\",\"model\":\"%s\",\"threads\":%d,\"n\":%d,\"what\":\"verify\","
               "\"ms\":%.4f,\"vs_decode\":%.3f}\n", o->model, o->threads, n, v / 1e6, v / dec);
    }
    if (ds) {
        double v = median(t[COST_MAX_N + 1], reps);
        printf("{\"bench\":\"draft_cost\",\"model\":\"%s\",\"target\":\"%s\",\"threads\":%d,"
               "\"what\":\"decode, mean of %d after a target verify of %d\",\"ms\":%.4f,"
               "\"vs_target_decode\":%.3f}\n",
               o->draft, o->model, o->threads, COST_ROUND_K, COST_ROUND_K + 1, v / 1e6, v / dec);
    }
    rc = 0;
done:
    llm_session_free(ds);
    llm_model_free(dm);
    llm_session_free(s);
    llm_model_free(m);
    return rc;
}


/* ---- widths --------------------------------------------------------------- */

#define WIDTHS_MAX 17
#define WIDTHS_HIST 64
#define WIDTHS_ARMS 2

static double thread_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One forward of n tokens after the WIDTHS_HIST-token history (a decode for
 * n == 0, else a verify of n), rolled back; wall ns, or -1 on failure.
 * *cpu: the calling thread's CPU time, which at --threads 1 is the whole
 * forward's and leaves out the time a busy host's scheduler took away. */
static double widths_once(llm_session *s, int n, double *cpu, unsigned char *sweep,
                          size_t sweep_len)
{
    /* A write to every line of a buffer larger than the last-level cache
     * leaves none of the weights there: the forward then streams them from
     * memory, as it does when something else ran between two forwards (a
     * drafter's forward in a speculative round). */
    for (size_t i = 0; i < sweep_len; i += 64)
        sweep[i]++;
    static const int32_t toks[WIDTHS_MAX] = {40, 41, 42, 43, 44, 45, 46, 47, 48,
                                             49, 50, 51, 52, 53, 54, 55, 56};
    const float *lg;
    double c0 = thread_ns();
    uint64_t t0 = now_ns();
    int rc = n == 0 ? llm_decode(s, toks[0], &lg) : llm_verify(s, toks, (size_t)n, &lg);
    uint64_t dt = now_ns() - t0;
    *cpu = thread_ns() - c0;
    return rc || llm_session_truncate(s, WIDTHS_HIST) != 0 ? -1.0 : (double)dt;
}

/* A model opened with the environment variable `var` set to `set` (NULL:
 * unset, the defaults), holding the history. The backend reads it when it
 * is created, so it only needs to be set around the open. */
static int widths_open(const opts *o, const char *var, const char *set, uint64_t req,
                       llm_model **m, llm_session **s)
{
    if (set && setenv(var, set, 1) != 0)
        return -1;
    *m = open_model(o->model, o->threads);
    if (set)
        unsetenv(var);
    if (!*m)
        return -1;
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = 256;
    so.n_batch = WIDTHS_MAX;
    so.request = req;
    char err[512];
    if (llm_session_create(*m, &so, s, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return -1;
    }
    int32_t hist[WIDTHS_HIST];
    for (int i = 0; i < WIDTHS_HIST; i++)
        hist[i] = 3 + (i * 37) % 2000;
    return llm_prefill(*s, hist, WIDTHS_HIST, 0, NULL) == 0 ? 0 : -1;
}

static int cmd_widths(const opts *o)
{
    llm_model *m[WIDTHS_ARMS] = {NULL, NULL};
    llm_session *s[WIDTHS_ARMS] = {NULL, NULL};
    const char *var = o->kernels ? "PHASEMARK_ENGINE_KERNELS" : "PHASEMARK_ENGINE_PREFETCH";
    const char *set[WIDTHS_ARMS] = {NULL, o->kernels ? o->kernels : o->prefetch};
    int arms = set[1] ? 2 : 1, rc = 1, reps = o->reps * 4 > MAX_REPS ? MAX_REPS : o->reps * 4;
    size_t sweep_len = (size_t)o->cold_mb << 20;
    unsigned char *sweep = sweep_len ? calloc(sweep_len, 1) : NULL;
    if (sweep_len && !sweep)
        return 1;
    static double t[WIDTHS_ARMS][WIDTHS_MAX + 1][MAX_REPS], tc[WIDTHS_ARMS][WIDTHS_MAX + 1][MAX_REPS];
    double med[WIDTHS_ARMS][WIDTHS_MAX + 1], mc[WIDTHS_ARMS][WIDTHS_MAX + 1];
    for (int a = 0; a < arms; a++)
        if (widths_open(o, var, set[a], (uint64_t)a + 1, &m[a], &s[a]) != 0)
            goto done;
    /* Repetition 0 warms up; the arms' order flips every repetition. Two
     * copies of the target do not fit the L3 together, so each arm's turn
     * starts with an untimed decode that brings its weights back (else its
     * timed decode would pay for the other arm's evictions). */
    for (int r = 0; r <= reps; r++)
        for (int i = 0; i < arms; i++) {
            int a = (r + i) % arms;
            double warm_cpu;
            if (widths_once(s[a], 0, &warm_cpu, NULL, 0) < 0)
                goto done;
            for (int n = 0; n <= WIDTHS_MAX; n++) {
                double c, v = widths_once(s[a], n, &c, sweep, sweep_len);
                if (v < 0)
                    goto done;
                if (r > 0) {
                    t[a][n][r - 1] = v;
                    tc[a][n][r - 1] = c;
                }
            }
        }
    for (int a = 0; a < arms; a++)
        for (int n = 0; n <= WIDTHS_MAX; n++) {
            med[a][n] = median(t[a][n], reps);
            mc[a][n] = median(tc[a][n], reps);
        }
    for (int a = 0; a < arms; a++) {
        const char *name = llm_cpu_backend_kernels(m[a]->be);
        for (int n = 0; n <= WIDTHS_MAX; n++) {
            double v = med[a][n], dec = med[a][0];
            printf("{\"bench\":\"verify_widths\",\"model\":\"%s\",\"threads\":%d,\"reps\":%d,"
                   "\"cold_mb\":%d,\"kernels\":\"%s\",\"arm\":\"%s%s%s\",\"w\":%d,"
                   "\"what\":\"%s\",\"us\":%.2f,\"vs_decode\":%.4f",
                   o->model, o->threads, reps, o->cold_mb, name, a == 0 ? "default" : var, a == 0 ? "" : "=",
                   a == 0 ? "" : set[a], n, n == 0 ? "decode" : "verify", v / 1e3, v / dec);
            if (n >= 2)
                printf(",\"per_extra_row_vs_decode\":%.4f", (v - med[a][1]) / (n - 1) / dec);
            if (a > 0)
                printf(",\"vs_default\":%.4f", v / med[0][n]);
            /* The caller thread's CPU time (the whole forward's at 1 thread). */
            double cv = mc[a][n], cdec = mc[a][0];
            printf(",\"thread_cpu_us\":%.2f,\"cpu_vs_decode\":%.4f", cv / 1e3, cv / cdec);
            if (n >= 2)
                printf(",\"cpu_per_extra_row_vs_decode\":%.4f", (cv - mc[a][1]) / (n - 1) / cdec);
            if (a > 0)
                printf(",\"cpu_vs_default\":%.4f", cv / mc[0][n]);
            printf("}\n");
        }
    }
    rc = 0;
done:
    free(sweep);
    for (int a = 0; a < WIDTHS_ARMS; a++) {
        llm_session_free(s[a]);
        llm_model_free(m[a]);
    }
    return rc;
}

/* ---- alternate ------------------------------------------------------------ */

static double cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* What a k = 1 model round's forwards cost when the draft model has
 * threads of its own and when it runs on the target's (llm_model_share_
 * threads), in one process: blocks of ALT_BLOCK plain target decodes and
 * of ALT_BLOCK rounds (a draft decode, then a target verify of 2), the
 * two thread modes taking turns block by block, so a neighbour's load
 * falls on both alike; medians of wall time per piece, and the process's
 * CPU time per decode and per round (block totals): on a busy host wall
 * time is mostly waiting for a core, while CPU time still shows the
 * work a mode adds, a spinning worker's included. The first block of
 * each mode warms up. */
#define ALT_BLOCK 20
#define ALT_MAX (MAX_REPS * ALT_BLOCK)
static int cmd_alternate(const opts *o)
{
    llm_model *m = NULL, *dm = NULL;
    llm_session *s = NULL, *ds = NULL;
    int rc = 1, blocks = o->reps * 2 > MAX_REPS ? MAX_REPS : o->reps * 2;
    /* [mode][piece][sample]: pieces decode, draft, verify, round. */
    static double t[2][4][ALT_MAX], cpu[2][2][MAX_REPS];
    int n[2] = {0, 0}, nb[2] = {0, 0};
    if (open_with_history(o->model, o->threads, 1, &m, &s) != 0 || !o->draft ||
        open_with_history(o->draft, o->threads, 2, &dm, &ds) != 0)
        goto done;
    for (int b = -1; b < blocks; b++)
        for (int mode = 0; mode < 2; mode++) {
            if (llm_model_share_threads(dm, mode ? m : NULL) < 0)
                goto done;
            double c0 = cpu_ns(), dec[ALT_BLOCK];
            for (int i = 0; i < ALT_BLOCK; i++)
                if ((dec[i] = forward_once(s, 0)) < 0)
                    goto done;
            double c1 = cpu_ns();
            for (int i = 0; i < ALT_BLOCK; i++) {
                double dr = forward_once(ds, 0), vr = dr < 0 ? -1 : forward_once(s, 2);
                if (vr < 0)
                    goto done;
                if (b >= 0) {
                    int j = n[mode]++;
                    t[mode][0][j] = dec[i], t[mode][1][j] = dr, t[mode][2][j] = vr;
                    t[mode][3][j] = dr + vr;
                }
            }
            double c2 = cpu_ns();
            if (b >= 0) {
                cpu[mode][0][nb[mode]] = (c1 - c0) / ALT_BLOCK;
                cpu[mode][1][nb[mode]++] = (c2 - c1) / ALT_BLOCK;
            }
        }
    static const char *const piece[4] = {"decode", "draft", "verify2", "round"};
    for (int mode = 0; mode < 2; mode++) {
        double med[4];
        for (int p = 0; p < 4; p++)
            med[p] = median(t[mode][p], n[mode]);
        double cd = median(cpu[mode][0], nb[mode]), cr = median(cpu[mode][1], nb[mode]);
        printf("{\"bench\":\"alternate\",\"threads\":%d,\"draft_threads\":\"%s\",\"samples\":%d",
               o->threads, mode ? "shared" : "own", n[mode]);
        for (int p = 0; p < 4; p++)
            printf(",\"%s_ms\":%.4f", piece[p], med[p] / 1e6);
        printf(",\"round_vs_decode\":%.3f,\"cpu_decode_ms\":%.4f,\"cpu_round_ms\":%.4f,"
               "\"cpu_round_vs_decode\":%.3f}\n",
               med[3] / med[0], cd / 1e6, cr / 1e6, cr / cd);
    }
    rc = 0;
done:
    llm_session_free(ds);
    llm_model_free(dm);
    llm_session_free(s);
    llm_model_free(m);
    return rc;
}

/* One shape over and over, nothing else in the process's profile but the
 * model load and the 32-token prefill. */
static int cmd_loop(const opts *o)
{
    llm_model *m = open_model(o->model, o->threads);
    llm_session *s = m ? open_session(m, 1) : NULL;
    int32_t hist[32];
    for (int i = 0; i < 32; i++)
        hist[i] = 3 + i;
    int rc = 1;
    static double t[LOOP_MAX_REPS];
    if (!s || llm_prefill(s, hist, 32, 0, NULL) != 0)
        goto done;
    for (int r = 0; r < o->loop_reps; r++)
        if ((t[r] = forward_once(s, o->n)) < 0)
            goto done;
    printf("{\"bench\":\"loop\",\"model\":\"%s\",\"threads\":%d,\"n\":%d,\"reps\":%d,"
           "\"ms\":%.4f}\n", o->model, o->threads, o->n, o->loop_reps,
           median(t, o->loop_reps) / 1e6);
    rc = 0;
done:
    llm_session_free(s);
    llm_model_free(m);
    return rc;
}

/* ---- ops --------------------------------------------------------------- */

enum { OP_WQ, OP_WK, OP_WV, OP_WO, OP_GATE, OP_UP, OP_DOWN, OP_HEAD, OP_ATTN, OP_NORM,
       OP_ROPE, OP_SWIGLU, OP_ADD, OP_FORWARD, OP_COUNT };
static const char *const k_op_names[OP_COUNT] = {
    "wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "output", "attention",
    "rmsnorm", "rope", "swiglu", "add", "forward"};

typedef struct ops_bufs {
    float *x, *y, *q, *k, *v, *att;
    double inv_freq[256];
} ops_bufs;

/* One backend operation of layer 0 for n rows (the head: the forward's one
 * row); ns. Inputs are whatever the buffers hold: timing only. */
static double time_op(struct llm_model *m, ops_bufs *b, int op, int32_t n)
{
    const llm_hparams *hp = &m->hp;
    llm_backend *be = m->be;
    const llm_layer *L = &m->layers[0];
    const llm_tensor *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up,
                             &L->w_down, &m->output};
    llm_rope r = {b->inv_freq, hp->rope_scale, hp->head_dim, hp->rope_neox};
    llm_attn a = {b->q, b->k, b->v, b->att, n, 32, hp->n_heads, hp->n_kv_heads, hp->head_dim, 0,
                  NULL};
    uint64_t t0 = now_ns();
    if (op <= OP_HEAD)
        llm_cpu_matmul(be, w[op], b->x, op == OP_HEAD ? 1 : n, b->y);
    else if (op == OP_ATTN)
        llm_cpu_attention(be, &a);
    else if (op == OP_NORM)
        llm_cpu_rmsnorm(be, b->y, b->x, m->out_norm, n, hp->dim, hp->norm_eps);
    else if (op == OP_ROPE)
        llm_cpu_rope(be, b->q, n, hp->n_heads, hp->n_heads * hp->head_dim, 32, &r);
    else if (op == OP_SWIGLU)
        llm_cpu_swiglu(be, b->y, b->x, (size_t)n * hp->ffn_dim);
    else
        llm_cpu_add(be, b->y, b->x, (size_t)n * hp->dim);
    return (double)(now_ns() - t0);
}

/* How many times an operation runs in one forward. */
static int op_count(const llm_hparams *hp, int op)
{
    switch (op) {
    case OP_HEAD: return 1;
    case OP_NORM: return 2 * hp->n_layers + 1;
    case OP_ROPE: return 2 * hp->n_layers; /* q, and k (counted as q) */
    case OP_ADD: return 2 * hp->n_layers;
    default: return hp->n_layers;
    }
}

static int cmd_ops(const opts *o)
{
    llm_model *mm = open_model(o->model, o->threads);
    llm_session *s = mm ? open_session(mm, 1) : NULL;
    struct llm_model *m = (struct llm_model *)mm;
    int32_t hist[32], n = o->n > 0 ? o->n : 1;
    for (int i = 0; i < 32; i++)
        hist[i] = 3 + i;
    int rc = 1, reps = o->loop_reps;
    ops_bufs b;
    memset(&b, 0, sizeof b);
    static double t[OP_COUNT][LOOP_MAX_REPS];
    if (!s || llm_prefill(s, hist, 32, 0, NULL) != 0 || !m->be->host_visible || m->hp.head_dim > 512)
        goto done;
    size_t wide = (size_t)m->hp.n_vocab > 4u * (size_t)m->hp.ffn_dim ? (size_t)m->hp.n_vocab
                                                                     : 4u * (size_t)m->hp.ffn_dim;
    size_t kv = 64u * (size_t)m->hp.n_kv_heads * (size_t)m->hp.head_dim;
    b.x = calloc(16 * wide, sizeof(float));
    b.y = calloc(16 * wide, sizeof(float));
    b.q = calloc(16 * wide, sizeof(float));
    b.att = calloc(16 * wide, sizeof(float));
    b.k = calloc(kv, sizeof(float));
    b.v = calloc(kv, sizeof(float));
    if (!b.x || !b.y || !b.q || !b.att || !b.k || !b.v)
        goto done;
    for (size_t i = 0; i < 16 * wide; i++)
        b.x[i] = (float)((i * 7919u) % 2001u) / 1000.0f - 1.0f;
    for (int i = 0; i < m->hp.head_dim / 2; i++)
        b.inv_freq[i] = 1.0 / (1.0 + i);
    for (int r = 0; r < reps; r++) /* interleaved: drifts touch every op alike */
        for (int op = 0; op < OP_COUNT; op++) {
            double v = op == OP_FORWARD ? forward_once(s, o->n) : time_op(m, &b, op, n);
            if (v < 0)
                goto done;
            t[op][r] = v;
        }
    double fwd = median(t[OP_FORWARD], reps), sum = 0;
    for (int op = 0; op < OP_COUNT; op++) {
        double v = median(t[op], reps), per_fwd = op == OP_FORWARD ? v : v * op_count(&m->hp, op);
        if (op != OP_FORWARD)
            sum += per_fwd;
        printf("{\"bench\":\"ops\",\"model\":\"%s\",\"threads\":%d,\"n\":%d,\"op\":\"%s\","
               "\"us\":%.2f,\"per_forward_us\":%.2f,\"of_forward\":%.3f}\n", o->model, o->threads,
               o->n, k_op_names[op], v / 1e3, per_fwd / 1e3, per_fwd / fwd);
    }
    printf("{\"bench\":\"ops\",\"model\":\"%s\",\"threads\":%d,\"n\":%d,\"op\":\"sum_of_ops\","
           "\"per_forward_us\":%.2f,\"of_forward\":%.3f}\n", o->model, o->threads, o->n, sum / 1e3,
           sum / fwd);
    rc = 0;
done:
    free(b.x);
    free(b.y);
    free(b.q);
    free(b.att);
    free(b.k);
    free(b.v);
    llm_session_free(s);
    llm_model_free(mm);
    return rc;
}

/* ---- kernels ----------------------------------------------------------- */

#define KB_ROWS 1408
#define KB_LEN 512
#define KB_MAX_N 8

/* The loop the backend ran before the blocked kernels: one single-row dot
 * per weight row and activation row. */
static void by_rows(const llm_kernels *k, const unsigned char *w, size_t rb, const llm_acts *a,
                    float *y)
{
    for (int64_t r = 0; r < KB_ROWS; r++)
        for (int32_t t = 0; t < a->n; t++) {
            llm_qrow xq = {a->d + t * (KB_LEN / LLM_ACTS_QK), a->q + t * KB_LEN};
            y[t * KB_ROWS + r] = k->dot_q8_0(w + (size_t)r * rb, &xq, KB_LEN);
        }
}

static int cmd_kernels(const opts *o)
{
    llm_kernels avx2, vnni;
    llm_kernels_scalar(&avx2);
    if (llm_kernels_avx2(&avx2) != 0) {
        fprintf(stderr, PROG ": kernels: the CPU lacks AVX2\n");
        return 1;
    }
    vnni = avx2;
    int have_vnni = llm_kernels_vnni(&vnni) == 0;
    size_t rb = KB_LEN / LLM_QK8_0 * sizeof(llm_block_q8_0);
    static unsigned char w[KB_ROWS * (KB_LEN / LLM_QK8_0) * sizeof(llm_block_q8_0)];
    static float row[KB_LEN], x[KB_MAX_N * KB_LEN], y[KB_MAX_N * KB_ROWS];
    static float d[KB_MAX_N * KB_LEN / LLM_ACTS_QK], dt[KB_MAX_N * KB_LEN / LLM_ACTS_QK + 8];
    static int8_t q[KB_MAX_N * KB_LEN], qb[KB_MAX_N * KB_LEN];
    static int32_t xbias[KB_MAX_N * KB_LEN / 4], xsum[KB_MAX_N * KB_LEN / LLM_ACTS_QK];
    static double t[3][LOOP_MAX_REPS];
    for (int r = 0; r < KB_ROWS; r++) {
        for (int i = 0; i < KB_LEN; i++)
            row[i] = (float)((r * 31 + i * 17) % 201 - 100) / 100.0f;
        llm_quantize_row(LLM_TYPE_Q8_0, row, w + (size_t)r * rb, KB_LEN);
    }
    for (int i = 0; i < KB_MAX_N * KB_LEN; i++)
        x[i] = (float)((i * 7) % 101 - 50) / 50.0f;
    llm_matvec_fn mv_avx2 = llm_kernels_find(&avx2, LLM_TYPE_Q8_0)->matvec;
    llm_matvec_fn mv_vnni = llm_kernels_find(&vnni, LLM_TYPE_Q8_0)->matvec;
    int reps = o->loop_reps > 1000 ? 200 : o->loop_reps;
    for (int32_t n = 1; n <= KB_MAX_N; n++) {
        llm_acts_scratch sc = {d, q, dt, qb, xbias, xsum};
        llm_acts a;
        llm_acts_quantize(&avx2, x, n, KB_LEN, &sc, &a);
        for (int r = 0; r < reps; r++) /* interleaved, medians */
            for (int v = 0; v < 3; v++) {
                uint64_t t0 = now_ns();
                if (v == 0)
                    by_rows(&avx2, w, rb, &a, y);
                else if (v == 1 || !have_vnni)
                    mv_avx2(w, rb, KB_ROWS, &a, y, KB_ROWS);
                else
                    mv_vnni(w, rb, KB_ROWS, &a, y, KB_ROWS);
                t[v][r] = (double)(now_ns() - t0);
            }
        static const char *const names[3] = {"single-row dot", "avx2 tiles", "vnni tiles"};
        for (int v = 0; v < 3; v++) {
            if (v == 2 && !have_vnni)
                continue;
            double ns = median(t[v], reps);
            printf("{\"bench\":\"kernels\",\"type\":\"q8_0\",\"rows\":%d,\"len\":%d,\"n\":%d,"
                   "\"kernel\":\"%s\",\"us\":%.2f,\"cycles_per_block_row_3ghz\":%.2f}\n",
                   KB_ROWS, KB_LEN, (int)n, names[v], ns / 1e3,
                   ns * 3.0 / ((double)KB_ROWS * (KB_LEN / 32) * n));
        }
    }
    return 0;
}

/* ---- run --------------------------------------------------------------- */

typedef struct prompts {
    int32_t ids[N_PROMPTS][64];
    size_t n[N_PROMPTS];
} prompts;

/* Text prompts through the target's tokenizer, or id prompts for a model
 * without one. */
static void make_prompts(const llm_model *m, prompts *p)
{
    llm_model_info info;
    llm_model_get_info(m, &info);
    for (int i = 0; i < N_PROMPTS; i++) {
        const char *t = k_texts[i];
        if (info.has_tokenizer &&
            llm_model_tokenize(m, t, strlen(t), 1, p->ids[i], 64, &p->n[i]) == 0 && p->n[i] > 0)
            continue;
        p->n[i] = 8;
        for (int j = 0; j < 8; j++)
            p->ids[i][j] = (int32_t)((i * 37 + j * 11 + 5) % info.n_vocab);
    }
}

typedef struct collect {
    int32_t ids[MAX_TOKENS];
    size_t n;
} collect;

static int on_token(void *user, int32_t tok)
{
    collect *c = user;
    if (c->n < MAX_TOKENS)
        c->ids[c->n] = tok;
    c->n++;
    return 0;
}

typedef struct run_ctx {
    const opts *o;
    llm_session *ar, *t, *d;
    llm_sampler *sp;
    prompts pr;
    collect ref[N_PROMPTS];
} run_ctx;

/* All prompts through llm_generate; seconds, or < 0 on failure. */
static double pass_ar(run_ctx *c, const llm_generate_params *gp)
{
    uint64_t total = 0;
    for (int i = 0; i < N_PROMPTS; i++) {
        c->ref[i].n = 0;
        llm_session_reset(c->ar);
        uint64_t t0 = now_ns();
        int rc = llm_generate(c->ar, c->sp, c->pr.ids[i], c->pr.n[i], gp, on_token, &c->ref[i],
                              NULL, NULL);
        total += now_ns() - t0;
        if (rc)
            return -1.0;
    }
    return (double)total / 1e9;
}

/* All prompts through llm_spec_generate; seconds, or < 0 on failure;
 * *parity cleared on any difference from the reference. */
static double pass_spec(run_ctx *c, llm_spec *sd, const llm_generate_params *gp, int *parity)
{
    uint64_t total = 0;
    collect got;
    for (int i = 0; i < N_PROMPTS; i++) {
        got.n = 0;
        llm_session_reset(c->t);
        uint64_t t0 = now_ns();
        int rc = llm_spec_generate(sd, c->sp, c->pr.ids[i], c->pr.n[i], gp, on_token, &got, NULL,
                                   NULL);
        total += now_ns() - t0;
        if (rc) {
            fprintf(stderr, PROG ": %s\n", llm_spec_error(sd));
            return -1.0;
        }
        if (got.n != c->ref[i].n || memcmp(got.ids, c->ref[i].ids, got.n * sizeof got.ids[0]))
            *parity = 0;
    }
    return (double)total / 1e9;
}

static int run_k(run_ctx *c, int k)
{
    const opts *o = c->o;
    llm_spec_params sprm = LLM_SPEC_PARAMS_INIT;
    sprm.k = k;
    sprm.adaptive = o->adaptive;
    llm_spec *sd;
    char err[512];
    if (llm_spec_create(c->t, c->d, &sprm, &sd, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = o->tokens;
    gp.stop_at_eos = 0;
    double ar[MAX_REPS], sp[MAX_REPS];
    int parity = 1;
    double tokens = (double)N_PROMPTS * o->tokens;
    for (int r = 0; r <= o->reps; r++) { /* repetition 0 warms up */
        if (r == 1)
            llm_spec_reset_stats(sd); /* stats cover the measured passes */
        double a = pass_ar(c, &gp);
        double s = pass_spec(c, sd, &gp, &parity);
        if (a < 0 || s < 0) {
            llm_spec_free(sd);
            return 1;
        }
        if (r > 0) {
            ar[r - 1] = tokens / a;
            sp[r - 1] = tokens / s;
        }
    }
    llm_spec_stats st;
    llm_spec_get_stats(sd, &st);
    double ar_m = median(ar, o->reps), sp_m = median(sp, o->reps);
    double spec_ns = (double)(st.draft_ns + st.verify_ns + st.accept_ns);
    /* Per-forward costs inside the rounds, against the plain pass's time
     * per token, and the speedup they predict (bench/results/spec.md):
     * tokens_per_round / ((t_verify + k t_draft) / t_decode). */
    double ar_ms = 1e3 / ar_m;
    double draft_ms = st.drafted ? (double)st.draft_ns / 1e6 / (double)st.drafted : 0.0;
    double verify_ms = st.rounds ? (double)st.verify_ns / 1e6 / (double)st.rounds : 0.0;
    double k_avg = st.rounds ? (double)st.drafted / (double)st.rounds : 0.0;
    double predicted = verify_ms + k_avg * draft_ms > 0
                           ? st.tokens_per_round * ar_ms / (verify_ms + k_avg * draft_ms) : 0.0;
    printf("{\"bench\":\"spec\",\"label\":\"%s\",\"target\":\"%s\",\"draft\":\"%s\",\"threads\":%d,"
           "\"k\":%d,\"adaptive\":%d,\"prompts\":%d,\"tokens\":%d,\"reps\":%d,"
           "\"ar_tok_s\":%.2f,\"spec_tok_s\":%.2f,\"speedup\":%.3f,\"acceptance\":%.4f,"
           "\"tokens_per_round\":%.3f,\"rounds\":%llu,\"final_k\":%d,"
           "\"draft_share\":%.3f,\"verify_share\":%.3f,\"ar_ms_per_token\":%.4f,"
           "\"draft_ms_per_token\":%.4f,\"verify_ms_per_round\":%.4f,\"k_avg\":%.3f,"
           "\"predicted_speedup\":%.3f,\"parity\":%s}\n",
           o->label ? o->label : "", o->target, o->draft, o->threads, k, o->adaptive, N_PROMPTS,
           o->tokens, o->reps, ar_m, sp_m, sp_m / ar_m, st.acceptance, st.tokens_per_round,
           (unsigned long long)st.rounds, (int)st.k,
           spec_ns > 0 ? (double)st.draft_ns / spec_ns : 0.0,
           spec_ns > 0 ? (double)st.verify_ns / spec_ns : 0.0, ar_ms, draft_ms, verify_ms, k_avg,
           predicted, parity ? "true" : "false");
    fflush(stdout);
    llm_spec_free(sd);
    return parity ? 0 : 1;
}

static int cmd_run(const opts *o)
{
    llm_model *tm = open_model(o->target, o->threads);
    llm_model *dm = tm ? open_model(o->draft, o->threads) : NULL;
    run_ctx *c = calloc(1, sizeof *c);
    int rc = 1;
    if (!dm || !c)
        goto done;
    c->o = o;
    c->ar = open_session(tm, 1);
    c->t = open_session(tm, 2);
    c->d = open_session(dm, 3);
    llm_model_info info;
    llm_model_get_info(tm, &info);
    if (!c->ar || !c->t || !c->d || llm_sampler_create(NULL, info.n_vocab, &c->sp) != 0)
        goto done;
    make_prompts(tm, &c->pr);
    rc = 0;
    for (int i = 0; i < o->n_ks && rc == 0; i++)
        rc = run_k(c, o->ks[i]);
done:
    if (c) {
        llm_sampler_free(c->sp);
        llm_session_free(c->d);
        llm_session_free(c->t);
        llm_session_free(c->ar);
    }
    free(c);
    llm_model_free(dm);
    llm_model_free(tm);
    return rc;
}

static int cmd_derive(int argc, char **argv)
{
    opts o;
    memset(&o, 0, sizeof o);
    if (argc < 4 || parse_opts(argc, argv, 4, &o) != 0)
        return 2;
    spec_derive d = {o.layers, o.type, -1};
    char err[512];
    if (spec_derive_gguf(argv[2], argv[3], &d, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    return 0;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: " PROG " derive IN OUT [--layers L] [--type T]\n"
            "       " PROG " cost --model M [--draft D] [--threads N] [--reps R]\n"
            "       " PROG " widths --model M [--kernels SET | --prefetch tile] [--threads N]\n"
            "                       [--reps R] [--cold MB]\n"
            "       " PROG " alternate --model M --draft D [--threads N] [--reps R]\n"
            "       " PROG " loop --model M --n N [--threads T] [--reps R]\n"
            "       " PROG " kernels [--reps R]\n"
            "       " PROG " ops --model M [--n N] [--threads T] [--reps R]\n"
            "       " PROG " run --target T --draft D [--k 2,4,6] [--adaptive] [--threads N]\n"
            "                    [--tokens M] [--reps R] [--label NAME]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    if (!strcmp(argv[1], "derive")) {
        int rc = cmd_derive(argc, argv);
        return rc == 2 ? usage() : rc;
    }
    opts o;
    memset(&o, 0, sizeof o);
    o.threads = 2;
    o.reps = 3;
    o.loop_reps = 1000;
    o.tokens = 128;
    o.ks[0] = 4;
    o.n_ks = 1;
    if (parse_opts(argc, argv, 2, &o) != 0)
        return usage();
    if (!strcmp(argv[1], "cost") && o.model)
        return cmd_cost(&o);
    if (!strcmp(argv[1], "widths") && o.model && !(o.kernels && o.prefetch))
        return cmd_widths(&o);
    if (!strcmp(argv[1], "alternate") && o.model && o.draft)
        return cmd_alternate(&o);
    if (!strcmp(argv[1], "loop") && o.model)
        return cmd_loop(&o);
    if (!strcmp(argv[1], "ops") && o.model)
        return cmd_ops(&o);
    if (!strcmp(argv[1], "kernels"))
        return cmd_kernels(&o);
    if (!strcmp(argv[1], "run") && o.target && o.draft)
        return cmd_run(&o);
    return usage();
}
