/* bench_server — pm-server under load, and what markers cost it.
 *
 *   bench_server load SERVER MODEL [--clients 8] [--requests 200] [--max-tokens 16]
 *       Runs the load twice, with 1 and with 2 workers (side by side in one
 *       run), each time clients x requests greedy completions over real HTTP
 *       on loopback. One JSON line per configuration: latency p50/p99/mean
 *       (ms, per request, client-observed), generated tokens per second and
 *       requests per second over the wall time; then a ratio line.
 *
 *   bench_server once SERVER MODEL --out FILE [--requests 20] [--max-tokens 32]
 *       One fresh server, requests sent one after another; writes every
 *       answer's text to FILE (the parity witness) and prints
 *       "server_ms=<wall time per request>", "server_cpu_ms=<the server
 *       process's CPU time per request>" and "tokens=<generated>". This is
 *       the command `phasemark perturb` runs.
 *
 *   bench_server perturb SERVER MODEL PHASEMARK [--pairs 10]
 *       Runs `phasemark perturb --capture` over `once` (alternating fresh
 *       off/on pairs, output parity by SHA-256 and token count) twice: on
 *       the wall time per request, then on the server's CPU time per
 *       request; prints each JSON result as one line.
 *
 * Numbers are wall-clock on a shared 2-core machine: run several times.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "client.h"

#define TIMEOUT 120000

static const char *const prompts[] = {
    "In the beginning God created the heaven and the earth.",
    "And the LORD spake unto Moses, saying,",
    "Blessed are the meek: for they shall inherit the earth.",
    "The LORD is my shepherd; I shall not want.",
};

static long opt_long(int argc, char **argv, const char *name, long def)
{
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) {
            char *end;
            long v = strtol(argv[i + 1], &end, 10);
            if (*end || v <= 0) {
                fprintf(stderr, "bench_server: %s needs a positive integer\n", name);
                exit(2);
            }
            return v;
        }
    return def;
}

static const char *opt_str(int argc, char **argv, const char *name)
{
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return NULL;
}

/* One greedy completion; returns generated tokens (-1 on failure) and
 * appends the text to out when out is not NULL. */
static long complete(int port, int k, long max_tokens, FILE *out)
{
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":%ld,\"temperature\":0}",
             prompts[k % 4], max_tokens);
    hc_resp r;
    long n = -1;
    if (hc_request(port, "POST", "/v1/completions", body, &r, TIMEOUT) == 0 && r.status == 200) {
        json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
        json_t *c = json_array_get(json_object_get(j, "choices"), 0);
        n = (long)json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens"));
        if (out)
            fprintf(out, "%s\n", json_string_value(json_object_get(c, "text")));
        json_decref(j);
    }
    hc_free(&r);
    return n;
}

/* ---- load ------------------------------------------------------------------ */

typedef struct client_arg {
    int port, index;
    long requests, max_tokens;
    double *lat_ms; /* requests entries */
    long tokens, errors;
} client_arg;

static void *client(void *p)
{
    client_arg *a = p;
    for (long i = 0; i < a->requests; i++) {
        struct timespec ts0, ts1;
        clock_gettime(CLOCK_MONOTONIC, &ts0);
        long n = complete(a->port, (int)(i + a->index), a->max_tokens, NULL);
        clock_gettime(CLOCK_MONOTONIC, &ts1);
        a->lat_ms[i] = (double)(ts1.tv_sec - ts0.tv_sec) * 1e3 + (double)(ts1.tv_nsec - ts0.tv_nsec) / 1e6;
        if (n < 0)
            a->errors++;
        else
            a->tokens += n;
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[0..n). */
static double pct(const double *v, size_t n, double p)
{
    size_t r = (size_t)(p / 100.0 * (double)n + 0.999999);
    return v[r ? r - 1 : 0];
}

static double run_load(const char *server, const char *model, int workers, long clients, long requests,
                       long max_tokens)
{
    char w[8];
    snprintf(w, sizeof w, "%d", workers);
    const char *extra[] = {"--workers", w, "--queue", "256", "--threads", "1", "--quiet", NULL};
    srv_proc p;
    if (srv_start(&p, server, model, extra) != 0)
        exit(1);
    complete(p.port, 0, max_tokens, NULL); /* warm-up: page in the weights */
    size_t total = (size_t)(clients * requests);
    double *lat = calloc(total, sizeof *lat);
    client_arg *args = calloc((size_t)clients, sizeof *args);
    pthread_t *th = calloc((size_t)clients, sizeof *th);
    if (!lat || !args || !th)
        exit(1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < clients; i++) {
        args[i] = (client_arg){p.port, (int)i, requests, max_tokens, lat + i * requests, 0, 0};
        pthread_create(&th[i], NULL, client, &args[i]);
    }
    long tokens = 0, errors = 0;
    for (long i = 0; i < clients; i++) {
        pthread_join(th[i], NULL);
        tokens += args[i].tokens;
        errors += args[i].errors;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    srv_stop(&p, SIGTERM, TIMEOUT);
    free(p.log);
    qsort(lat, total, sizeof *lat, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < total; i++)
        sum += lat[i];
    double tps = (double)tokens / wall;
    printf("{\"bench\":\"server_load\",\"workers\":%d,\"clients\":%ld,\"requests\":%zu,\"max_tokens\":%ld,"
           "\"errors\":%ld,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"mean_ms\":%.3f,\"max_ms\":%.3f,"
           "\"generated_tokens\":%ld,\"tokens_per_s\":%.1f,\"requests_per_s\":%.1f,\"wall_s\":%.3f}\n",
           workers, clients, total, max_tokens, errors, pct(lat, total, 50), pct(lat, total, 99),
           sum / (double)total, lat[total - 1], tokens, tps, (double)total / wall, wall);
    fflush(stdout);
    free(lat);
    free(args);
    free(th);
    return tps;
}

static int cmd_load(int argc, char **argv)
{
    long clients = opt_long(argc, argv, "--clients", 8), requests = opt_long(argc, argv, "--requests", 200);
    long max_tokens = opt_long(argc, argv, "--max-tokens", 16);
    double t1 = run_load(argv[2], argv[3], 1, clients, requests, max_tokens);
    double t2 = run_load(argv[2], argv[3], 2, clients, requests, max_tokens);
    printf("{\"bench\":\"server_load_ratio\",\"tokens_per_s_workers2_over_workers1\":%.3f}\n", t2 / t1);
    return 0;
}

/* ---- once (under perturb) -------------------------------------------------- */

static int cmd_once(int argc, char **argv)
{
    const char *out = opt_str(argc, argv, "--out");
    long requests = opt_long(argc, argv, "--requests", 20), max_tokens = opt_long(argc, argv, "--max-tokens", 32);
    if (!out) {
        fprintf(stderr, "bench_server once: --out FILE is required\n");
        return 2;
    }
    FILE *f = fopen(out, "w");
    if (!f)
        return 1;
    const char *extra[] = {"--workers", "1", "--threads", "1", "--quiet", NULL};
    srv_proc p;
    if (srv_start(&p, argv[2], argv[3], extra) != 0)
        return 1;
    complete(p.port, 0, max_tokens, NULL); /* warm-up, not measured */
    long tokens = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < requests; i++) {
        long n = complete(p.port, (int)i, max_tokens, f);
        if (n < 0)
            return 1;
        tokens += n;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fclose(f);
    int rc = srv_stop(&p, SIGTERM, TIMEOUT);
    free(p.log);
    double ms = ((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6) / (double)requests;
    /* Wall time per request as the client sees it, and the server's
     * whole CPU time (start-up included) per request: the second is less
     * disturbed by other work on a shared machine. */
    printf("server_ms=%.6f\nserver_cpu_ms=%.6f\ntokens=%ld\n", ms, p.cpu_ms / (double)requests, tokens);
    return rc == 0 ? 0 : 1;
}

/* One `phasemark perturb` over `once`, measured by metric. */
static int perturb_one(char **argv, const char *self, const char *metric, const char *pairs)
{
    char out[64];
    snprintf(out, sizeof out, "/tmp/bench_server_out_%ld.txt", (long)getpid());
    char *args[] = {argv[4], "perturb", "--capture", "--json", "--pairs", (char *)pairs, "--warmup", "1",
                    "--metric", (char *)metric, "--tokens", "tokens", "--file", out, "--", (char *)self, "once",
                    argv[2], argv[3], "--out", out, NULL};
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execv(argv[4], args);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    unlink(out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

static int cmd_perturb(int argc, char **argv, const char *self)
{
    char pairs[16];
    snprintf(pairs, sizeof pairs, "%ld", opt_long(argc, argv, "--pairs", 10));
    int rc = perturb_one(argv, self, "server_ms", pairs);
    return rc ? rc : perturb_one(argv, self, "server_cpu_ms", pairs);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 4 && !strcmp(argv[1], "load"))
        return cmd_load(argc, argv);
    if (argc >= 4 && !strcmp(argv[1], "once"))
        return cmd_once(argc, argv);
    if (argc >= 5 && !strcmp(argv[1], "perturb"))
        return cmd_perturb(argc, argv, argv[0]);
    fprintf(stderr, "usage: bench_server load SERVER MODEL [--clients N] [--requests N] [--max-tokens N]\n"
                    "       bench_server once SERVER MODEL --out FILE [--requests N] [--max-tokens N]\n"
                    "       bench_server perturb SERVER MODEL PHASEMARK [--pairs N]\n");
    return 2;
}
