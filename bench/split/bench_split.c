/* bench_split — decode tokens/s of each layer-split placement relative to
 * the monolithic session, on a synthetic model of the stories110M shape
 * (dim 768, 12 layers, 12 heads, ffn 2048, vocab 32000; 134M parameters
 * with the embedding and head).
 *
 *   bench_split [--reps N] [--tokens N] [--threads N] [--types f32,q8_0]
 *               [--shape 110m|tiny] [--dir DIR] [--keep]
 *
 * --shape tiny keeps the 12 layers but shrinks every width (dim 64, vocab
 * 160): compute vanishes, and a step's time is what the placement itself
 * costs (handoffs, wire round trips, ranges).
 *
 * Each repetition opens one session per placement (daemons included),
 * prefills 16 tokens in each, then runs N greedy decode steps in lock
 * step: step i of every placement, in turn, each timed on its own. A busy
 * neighbour thus hits every placement alike, and the median step time
 * ignores the steps it preempted. Daemons get the engine's thread count.
 * Output: one JSON object per placement and type with the median step's
 * tokens/s (and the mean's) over all repetitions, their ratios to the
 * monolithic session's, and whether the tokens matched it exactly.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "phasemark/engine.h"
#include "split_util.h"
#include "synth.h"

#define MAX_REPS 64
#define MAX_TOKENS 512

typedef struct opts {
    int reps, tokens, threads, keep;
    int tiny; /* --shape tiny: the 110M's 12 layers at dim 64, vocab 160, so
                 that a step's time is the split's own overhead */
    char types[64];
    const char *dir;
} opts;

typedef struct placement {
    const char *name;
    char spec[512];
    int32_t out[MAX_TOKENS];
} placement;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    static double s[MAX_REPS * MAX_TOKENS];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static int32_t argmax(const float *x, int n)
{
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

/* A placement's live session during one repetition. */
typedef struct live {
    llm_session *s;
    int32_t tok;
} live;

static int open_live(llm_model *m, const placement *pl, const opts *o, int32_t n_vocab, live *lv)
{
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = 64 + o->tokens;
    so.n_batch = 32;
    so.placement = pl->spec[0] ? pl->spec : NULL;
    char err[512];
    if (llm_session_create(m, &so, &lv->s, err, sizeof err) != 0) {
        fprintf(stderr, "bench_split: %s: %s\n", pl->name, err);
        return -1;
    }
    int32_t prompt[16];
    for (int i = 0; i < 16; i++)
        prompt[i] = (int32_t)((1 + i * 97) % n_vocab);
    const float *lg;
    if (llm_prefill(lv->s, prompt, 16, 0, &lg) != 0) {
        fprintf(stderr, "bench_split: %s: %s\n", pl->name, llm_session_error(lv->s));
        return -1;
    }
    lv->tok = argmax(lg, n_vocab);
    return 0;
}

/* One decode step of a live session: its time in seconds (< 0 on failure);
 * the token fed goes to out. */
static double step(live *lv, int32_t n_vocab, int32_t *out)
{
    const float *lg;
    *out = lv->tok;
    double t0 = now_s();
    if (llm_decode(lv->s, lv->tok, &lg) != 0)
        return -1;
    double t = now_s() - t0;
    lv->tok = argmax(lg, n_vocab);
    return t;
}

/* One repetition: every placement's session, stepped in lock step. Step
 * times go to times[placement][rep * tokens + i]. */
static int one_rep(llm_model *m, placement *pl, int n, const opts *o, int rep, double *times)
{
    llm_model_info info;
    llm_model_get_info(m, &info);
    live lv[8] = {{0}};
    int rc = 0;
    for (int p = 0; p < n && rc == 0; p++)
        rc = open_live(m, &pl[p], o, info.n_vocab, &lv[p]);
    for (int i = 0; i < o->tokens && rc == 0; i++)
        for (int p = 0; p < n && rc == 0; p++) {
            double t = step(&lv[p], info.n_vocab, &pl[p].out[i]);
            if (t < 0) {
                fprintf(stderr, "bench_split: %s: %s\n", pl[p].name, llm_session_error(lv[p].s));
                rc = -1;
            }
            times[(size_t)p * MAX_REPS * MAX_TOKENS + (size_t)rep * o->tokens + i] = t;
        }
    for (int p = 0; p < n; p++)
        llm_session_free(lv[p].s);
    return rc;
}

static int parse_opts(int argc, char **argv, opts *o)
{
    *o = (opts){.reps = 5, .tokens = 64, .threads = 2, .dir = "/tmp"};
    snprintf(o->types, sizeof o->types, "q8_0,f32");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        long n = v ? strtol(v, &end, 10) : 0;
        int num_ok = v && end && *end == '\0' && n > 0;
        if (strcmp(a, "--keep") == 0) {
            o->keep = 1;
            continue;
        }
        if (!v)
            return -1;
        i++;
        if (strcmp(a, "--reps") == 0 && num_ok && n <= MAX_REPS)
            o->reps = (int)n;
        else if (strcmp(a, "--tokens") == 0 && num_ok && n <= MAX_TOKENS)
            o->tokens = (int)n;
        else if (strcmp(a, "--threads") == 0 && num_ok && n <= 256)
            o->threads = (int)n;
        else if (strcmp(a, "--types") == 0 && strlen(v) < sizeof o->types)
            snprintf(o->types, sizeof o->types, "%s", v);
        else if (strcmp(a, "--dir") == 0)
            o->dir = v;
        else if (strcmp(a, "--shape") == 0 && (strcmp(v, "tiny") == 0 || strcmp(v, "110m") == 0))
            o->tiny = strcmp(v, "tiny") == 0;
        else
            return -1;
    }
    return 0;
}

static int ensure_model(const char *type, const opts *o, char *path, size_t cap)
{
    snprintf(path, cap, "%s/pm_bench_split_%s_%s.gguf", o->dir, o->tiny ? "tiny" : "110m", type);
    if (access(path, R_OK) == 0)
        return 0;
    synth_spec s = synth_default();
    s.hp.dim = o->tiny ? 64 : 768;
    s.hp.n_layers = 12;
    s.hp.n_heads = o->tiny ? 4 : 12;
    s.hp.n_kv_heads = o->tiny ? 4 : 12;
    s.hp.ffn = o->tiny ? 96 : 2048;
    s.hp.vocab = o->tiny ? 160 : 32000;
    s.hp.ctx = 1024;
    s.type = s.embd_type = synth_type(type);
    return synth_write(path, &s);
}

static double mean(const double *v, int n)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += v[i];
    return sum / n;
}

static void report(const char *type, const opts *o, placement *pl, int n, const double *times,
                   double load)
{
    int cnt = o->reps * o->tokens;
    double mono_med = 1.0 / median(times, cnt), mono_mean = 1.0 / mean(times, cnt);
    for (int i = 0; i < n; i++) {
        const double *t = times + (size_t)i * MAX_REPS * MAX_TOKENS;
        int same = memcmp(pl[i].out, pl[0].out, (size_t)o->tokens * sizeof(int32_t)) == 0;
        double med = 1.0 / median(t, cnt), avg = 1.0 / mean(t, cnt);
        printf("{\"bench\":\"split\",\"model\":\"%s\",\"type\":\"%s\",\"threads\":%d,"
               "\"placement\":\"%s\",\"spec\":\"%s\",\"reps\":%d,\"decode_tokens\":%d,"
               "\"step_us_median\":%.1f,\"decode_tok_s_median\":%.2f,\"decode_tok_s_mean\":%.2f,"
               "\"ratio_median\":%.4f,\"ratio_mean\":%.4f,\"tokens_identical\":%s,"
               "\"loadavg_1m\":%.2f}\n",
               o->tiny ? "tiny" : "110m", type, o->threads, pl[i].name, pl[i].spec, o->reps, o->tokens,
               1e6 / med, med, avg, med / mono_med, avg / mono_mean, same ? "true" : "false", load);
    }
    fflush(stdout);
}

static double loadavg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

static int bench_type(const char *type, const opts *o)
{
    char path[512];
    if (ensure_model(type, o, path, sizeof path) != 0)
        return -1;
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.n_threads = o->threads;
    llm_model *m;
    char err[256];
    if (llm_model_open(path, &mo, &m, err, sizeof err) != 0) {
        fprintf(stderr, "bench_split: %s\n", err);
        return -1;
    }
    su_daemon d;
    su_daemon_threads = o->threads;
    if (su_daemon_start(&d, path, 8, 11, 2, "tcp::0") != 0)
        return -1;
    static placement pl[6];
    memset(pl, 0, sizeof pl);
    int t = o->threads;
    pl[0].name = "monolithic";
    pl[1].name = "2 local";
    snprintf(pl[1].spec, sizeof pl[1].spec, "0-5@local,6-11@local");
    pl[2].name = "local + remote stream";
    snprintf(pl[2].spec, sizeof pl[2].spec, "0-5@local,6-11@spawn?threads=%d", t);
    pl[3].name = "local + remote shared";
    snprintf(pl[3].spec, sizeof pl[3].spec, "0-5@local,6-11@spawn?transport=shared&threads=%d", t);
    pl[4].name = "3 shards, one tcp";
    snprintf(pl[4].spec, sizeof pl[4].spec,
             "0-3@local,4-7@spawn?transport=shared&threads=%d,8-11@%s", t, d.address);
    pl[5].name = "4 local";
    snprintf(pl[5].spec, sizeof pl[5].spec, "0-2@local,3-5@local,6-8@local,9-11@local");
    int n = 6;
    double load0 = loadavg();
    static double times[6 * MAX_REPS * MAX_TOKENS];
    int rc = one_rep(m, pl, n, o, 0, times); /* warm-up: pages in, daemons start */
    for (int r = 0; r < o->reps && rc == 0; r++)
        rc = one_rep(m, pl, n, o, r, times);
    if (rc == 0)
        report(type, o, pl, n, times, 0.5 * (load0 + loadavg()));
    su_daemon_stop(&d, SIGTERM);
    llm_model_free(m);
    if (!o->keep)
        unlink(path);
    return rc;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse_opts(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: bench_split [--reps N] [--tokens N] [--threads N] "
                        "[--types f32,q8_0] [--shape 110m|tiny] [--dir DIR] [--keep]\n");
        return 2;
    }
    setenv("PHASEMARK_SHARDD", PM_SHARDD, 0);
    char types[64];
    snprintf(types, sizeof types, "%s", o.types);
    int rc = 0;
    for (char *p = types, *next; p && *p; p = next) {
        next = strchr(p, ',');
        if (next)
            *next++ = '\0';
        rc |= bench_type(p, &o) != 0;
    }
    return rc;
}
