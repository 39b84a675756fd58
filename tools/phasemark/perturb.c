/* perturb.c — `phasemark perturb`: does enabling markers change the run?
 *
 * Each run is a fresh process. After W warm-ups per mode, N pairs run with
 * markers off (PHASEMARK=0) and on (PHASEMARK=1), the order alternating
 * between pairs (off,on then on,off) so slow drift cancels. The measure is
 * the wall time of the process, or a number the command prints (--metric
 * KEY: the last "KEY=<number>" or "KEY: <number>" in its output). Reported
 * per mode: median, MAD (median absolute deviation) and range; then the
 * median change in %. Parity: the SHA-256 of stdout (or of --file PATH
 * after each run) and the token count (--tokens KEY, the same way as a
 * metric) must be identical in every run, warm-ups included, else exit 1.
 * --capture runs both modes under the recorder, so "on" pays for recording.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pmt.h"

#define PT "phasemark perturb: "
#define PT_OUTPUT_MAX ((size_t)256 << 20)

#define PT_TOKEN_KEYS 4 /* --tokens: the seed compares prompt, completion, total */

typedef struct pt_opts {
    long pairs, warmup;
    const char *metric, *tokens, *file;
    const char *env; /* the marker variable: PHASEMARK or --env */
    int capture, json;
    char **cmd;
} pt_opts;

typedef struct pt_run {
    int ok;
    double value;
    int has_tokens;
    uint64_t tokens[PT_TOKEN_KEYS]; /* one per --tokens key, in order */
    char sha[65];
} pt_run;

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void usage(FILE *f)
{
    fputs("usage: phasemark perturb [--pairs N] [--warmup W] [--metric KEY] [--tokens KEY[,KEY]]\n"
          "                         [--file PATH] [--env NAME] [--capture] [--json] -- CMD [ARG...]\n"
          "  Runs CMD in fresh processes, markers alternately off and on, W warm-ups per\n"
          "  mode first (default N=10, W=1). Reports median, MAD and range of wall time\n"
          "  (or of the number after KEY in the output) per mode and the median change.\n"
          "  Fails unless the SHA-256 of stdout (or of PATH) and the token count (the\n"
          "  numbers after each --tokens KEY, up to 4, e.g. prompt,completion,total) are the\n"
          "  same in every run; a KEY missing from a run's output fails it. --env NAME:\n"
          "  the variable set to 0 and 1 (default PHASEMARK). The off mode sets it to 0\n"
          "  explicitly, so with --capture it is capture's control run.\n",
          f);
}

static int append(buf *b, const char *data, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap : 4096;
        while (ncap < b->n + n + 1)
            ncap *= 2;
        if (ncap > PT_OUTPUT_MAX)
            return -1;
        char *np = realloc(b->p, ncap);
        if (!np)
            return -1;
        b->p = np;
        b->cap = ncap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* The number after the last "KEY=" / "KEY:" in text; 0 found, -1 not. */
static int find_number(const char *text, const char *key, double *out)
{
    size_t kl = strlen(key);
    const char *last = NULL;
    for (const char *p = text; p && (p = strstr(p, key)); p += kl) {
        const char *q = p + kl;
        while (*q == ' ')
            q++;
        if (*q == '=' || *q == ':')
            last = q + 1;
    }
    if (!last)
        return -1;
    while (*last == ' ')
        last++;
    char *end;
    errno = 0;
    double v = strtod(last, &end);
    if (end == last || errno || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

static void child_exec(const pt_opts *o, int on, const char *capdir, int out_fd, int err_fd)
{
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    setenv(o->env, on ? "1" : "0", 1);
    if (capdir) {
        char rec[4096];
        const char *r = pmt_recorder_path(rec, sizeof rec);
        if (r) {
            const char *old = getenv("LD_PRELOAD");
            char pre[8192];
            snprintf(pre, sizeof pre, "%s%s%s", r, old && *old ? ":" : "", old && *old ? old : "");
            setenv("LD_PRELOAD", pre, 1);
            setenv("PHASEMARK_CAPTURE_DIR", capdir, 1);
        }
    }
    execvp(o->cmd[0], o->cmd);
    fprintf(stderr, PT "cannot run %s: %s\n", o->cmd[0], strerror(errno));
    _exit(127);
}

/* Reads both pipes until both close. */
static int drain(int out_fd, int err_fd, buf *out, buf *err)
{
    struct pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    buf *dst[2] = {out, err};
    int open_fds = 2, rc = 0;
    char chunk[65536];
    while (open_fds) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t n = read(fds[i].fd, chunk, sizeof chunk);
            if (n > 0) {
                rc |= append(dst[i], chunk, (size_t)n);
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            fds[i].fd = -1;
            open_fds--;
        }
    }
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* What the run produced: metric, tokens, hash. */
static void evaluate(const pt_opts *o, const buf *out, const buf *err, double wall, pt_run *r)
{
    const char *so = out->p ? out->p : "", *se = err->p ? err->p : "";
    double v;
    r->value = wall;
    if (o->metric && find_number(so, o->metric, &r->value) < 0 &&
        find_number(se, o->metric, &r->value) < 0) {
        fprintf(stderr, "\n" PT "metric '%s' not found in the output\n", o->metric);
        r->ok = 0;
    }
    for (size_t k = 0, i = 0; o->tokens && o->tokens[i] && k < PT_TOKEN_KEYS; k++) {
        char key[128];
        size_t len = strcspn(o->tokens + i, ",");
        snprintf(key, sizeof key, "%.*s", (int)(len < sizeof key ? len : sizeof key - 1),
                 o->tokens + i);
        i += len + (o->tokens[i + len] == ',');
        if (find_number(so, key, &v) < 0 && find_number(se, key, &v) < 0) {
            fprintf(stderr, "\n" PT "token count '%s' not found in the output\n", key);
            r->ok = 0;
            continue;
        }
        r->has_tokens = 1;
        r->tokens[k] = (uint64_t)v;
    }
    if (!o->file) {
        pmt_sha256_hex(so, out->n, r->sha);
        return;
    }
    char *text;
    size_t len;
    char emsg[512];
    if (pmt_read_file(o->file, (size_t)1 << 34, &text, &len, emsg, sizeof emsg) < 0) {
        fprintf(stderr, "\n" PT "%s\n", emsg);
        r->ok = 0;
        return;
    }
    pmt_sha256_hex(text, len, r->sha);
    free(text);
}

static int run_once(const pt_opts *o, int on, const char *capdir, pt_run *r)
{
    int po[2], pe[2];
    memset(r, 0, sizeof *r);
    if (pipe(po) < 0)
        return -1;
    if (pipe(pe) < 0) {
        close(po[0]), close(po[1]);
        return -1;
    }
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        close(po[0]), close(pe[0]);
        child_exec(o, on, capdir, po[1], pe[1]);
    }
    close(po[1]), close(pe[1]);
    buf out = {0}, err = {0};
    int drc = pid > 0 ? drain(po[0], pe[0], &out, &err) : -1;
    close(po[0]), close(pe[0]);
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    double wall = now_s() - t0;
    r->ok = pid > 0 && drc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (pid > 0 && !r->ok)
        fprintf(stderr, "\n" PT "run failed (%s %d)%s%.300s\n",
                WIFSIGNALED(status) ? "signal" : "exit",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
                err.n ? "; stderr: " : "", err.p ? err.p : "");
    if (r->ok)
        evaluate(o, &out, &err, wall, r);
    free(out.p);
    free(err.p);
    return pid > 0 ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct stats {
    double median, mad, min, max;
} stats;

static stats summarize(const double *vals, size_t n)
{
    stats s = {0, 0, 0, 0};
    double *v = malloc(n * sizeof *v);
    if (!v || !n) {
        free(v);
        return s;
    }
    memcpy(v, vals, n * sizeof *v);
    s.median = median(v, n);
    s.min = v[0];
    s.max = v[n - 1];
    for (size_t i = 0; i < n; i++)
        v[i] = fabs(vals[i] - s.median);
    s.mad = median(v, n);
    free(v);
    return s;
}

static long parse_count(const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return (errno || end == s || *end || v < lo || v > hi) ? -1 : v;
}

static int parse(int argc, char **argv, pt_opts *o)
{
    memset(o, 0, sizeof *o);
    o->pairs = 10;
    o->warmup = 1;
    o->env = "PHASEMARK";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 1;
        if (!strcmp(a, "--") && v) {
            o->cmd = &argv[i + 1];
            return 0;
        }
        if (!strcmp(a, "--capture") || !strcmp(a, "--json")) {
            *(a[2] == 'c' ? &o->capture : &o->json) = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, PT "'%s' needs a value or is unknown\n", a);
            return -1;
        }
        if (!strcmp(a, "--pairs") && (o->pairs = parse_count(v, 1, 100000)) > 0)
            i++;
        else if (!strcmp(a, "--warmup") && (o->warmup = parse_count(v, 0, 100000)) >= 0)
            i++;
        else if (!strcmp(a, "--metric"))
            o->metric = argv[++i];
        else if (!strcmp(a, "--tokens"))
            o->tokens = argv[++i];
        else if (!strcmp(a, "--file"))
            o->file = argv[++i];
        else if (!strcmp(a, "--env") && v[0] && !strchr(v, '='))
            o->env = argv[++i];
        else {
            fprintf(stderr, PT "bad argument '%s'\n", a);
            return -1;
        }
    }
    fprintf(stderr, PT "need -- CMD\n");
    return -1;
}

/* The first run each other run is compared with; reports differences. */
static int parity(const pt_run *runs, size_t n, const char *const *labels)
{
    int bad = 0;
    for (size_t i = 1; i < n; i++) {
        if (strcmp(runs[i].sha, runs[0].sha) != 0) {
            fprintf(stderr, PT "output differs: run %zu (%s) sha256 %s, run 0 (%s) %s\n", i,
                    labels[i], runs[i].sha, labels[0], runs[0].sha);
            bad = 1;
        }
        for (int k = 0; k < PT_TOKEN_KEYS; k++) {
            if (runs[i].has_tokens == runs[0].has_tokens && runs[i].tokens[k] == runs[0].tokens[k])
                continue;
            fprintf(stderr, PT "token count %d differs: run %zu (%s) %llu, run 0 (%s) %llu\n",
                    k + 1, i, labels[i], (unsigned long long)runs[i].tokens[k], labels[0],
                    (unsigned long long)runs[0].tokens[k]);
            bad = 1;
        }
    }
    return bad;
}

static void print_result(const pt_opts *o, const pt_run *runs, size_t n, const double *off,
                         const double *on, int bad)
{
    stats s0 = summarize(off, (size_t)o->pairs), s1 = summarize(on, (size_t)o->pairs);
    double change = s0.median != 0 ? (s1.median - s0.median) / s0.median * 100 : 0;
    const char *what = o->metric ? o->metric : "wall_s";
    if (o->json) {
        printf("{\"metric\":\"%s\",\"pairs\":%ld,\"warmup\":%ld,"
               "\"off\":{\"median\":%.9g,\"mad\":%.9g,\"min\":%.9g,\"max\":%.9g},"
               "\"on\":{\"median\":%.9g,\"mad\":%.9g,\"min\":%.9g,\"max\":%.9g},"
               "\"change_pct\":%.4f,\"sha256\":\"%s\",\"tokens\":%lld,\"parity\":%s}\n",
               what, o->pairs, o->warmup, s0.median, s0.mad, s0.min, s0.max, s1.median, s1.mad,
               s1.min, s1.max, change, runs[0].sha,
               runs[0].has_tokens ? (long long)runs[0].tokens[0] : -1LL, bad ? "false" : "true");
        return;
    }
    printf("%ld pairs after %ld warm-up(s) per mode; measure: %s\n", o->pairs, o->warmup, what);
    printf("%-4s %6s %14s %14s %14s %14s\n", "mode", "runs", "median", "MAD", "min", "max");
    printf("%-4s %6ld %14.6g %14.6g %14.6g %14.6g\n", "off", o->pairs, s0.median, s0.mad, s0.min, s0.max);
    printf("%-4s %6ld %14.6g %14.6g %14.6g %14.6g\n", "on", o->pairs, s1.median, s1.mad, s1.min, s1.max);
    printf("median change (on vs off): %+.2f%%\n", change);
    printf("output sha256 %s: %s in all %zu runs\n", runs[0].sha, bad ? "NOT identical" : "identical", n);
    if (runs[0].has_tokens) {
        printf("tokens:");
        for (size_t k = 0, i = 0; o->tokens[i] && k < PT_TOKEN_KEYS; k++) {
            size_t len = strcspn(o->tokens + i, ",");
            printf(" %.*s=%llu", (int)len, o->tokens + i, (unsigned long long)runs[0].tokens[k]);
            i += len + (o->tokens[i + len] == ',');
        }
        printf("\n");
    }
}

static int run_all(const pt_opts *o, const char *capdir, pt_run *runs, const char **labels,
                   double *off, double *on)
{
    size_t total = (size_t)(2 * (o->warmup + o->pairs)), k = 0;
    for (long w = 0; w < 2 * o->warmup; w++, k++) {
        int mode = (int)(w % 2);
        fprintf(stderr, "\r" PT "warm-up %ld/%ld (%s)   ", w + 1, 2 * o->warmup, mode ? "on" : "off");
        labels[k] = mode ? "warm-up on" : "warm-up off";
        if (run_once(o, mode, capdir, &runs[k]) < 0 || !runs[k].ok)
            return -1;
    }
    for (long p = 0; p < o->pairs; p++) {
        for (int j = 0; j < 2; j++, k++) {
            int mode = (p % 2) ? !j : j; /* off,on then on,off */
            fprintf(stderr, "\r" PT "pair %ld/%ld (%s)   ", p + 1, o->pairs, mode ? "on" : "off");
            labels[k] = mode ? "on" : "off";
            if (run_once(o, mode, capdir, &runs[k]) < 0 || !runs[k].ok)
                return -1;
            (mode ? on : off)[p] = runs[k].value;
        }
    }
    fprintf(stderr, "\r" PT "%zu runs done            \n", total);
    return 0;
}

int pmt_cmd_perturb(int argc, char **argv)
{
    pt_opts o;
    int prc = parse(argc, argv, &o);
    if (prc != 0) {
        usage(prc > 0 ? stdout : stderr);
        return prc > 0 ? 0 : 2;
    }
    size_t total = (size_t)(2 * (o.warmup + o.pairs));
    pt_run *runs = calloc(total, sizeof *runs);
    const char **labels = calloc(total, sizeof *labels);
    double *off = calloc((size_t)o.pairs, sizeof *off), *on = calloc((size_t)o.pairs, sizeof *on);
    char capdir[64] = "/tmp/phasemark-perturb.XXXXXX";
    int rc = 1;
    if (!runs || !labels || !off || !on || (o.capture && !mkdtemp(capdir))) {
        fprintf(stderr, PT "out of memory or no temporary directory\n");
        goto done;
    }
    signal(SIGPIPE, SIG_IGN);
    if (run_all(&o, o.capture ? capdir : NULL, runs, labels, off, on) < 0) {
        fprintf(stderr, PT "stopped: a run failed\n");
        goto done;
    }
    int bad = parity(runs, total, labels);
    print_result(&o, runs, total, off, on, bad);
    rc = bad;
done:
    if (o.capture)
        pmt_remove_tree(capdir);
    free(runs), free(labels), free(off), free(on);
    return rc;
}
