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
 *   bench_server overload SERVER MODEL [--connections 8,64,256] [--seconds 10]
 *                [--max-tokens 16] [--client-nice N] [-- SERVER-ARGS...]
 *       For each connection count, one fresh server with its defaults (and
 *       SERVER-ARGS after "--") and that many keep-alive connections, each
 *       sending greedy completions back to back for --seconds, retrying a
 *       503 at once (a client that ignores Retry-After: the worst case for
 *       admission). A connection the server drops (a server that accepts
 *       and closes what is beyond its limit) is reopened after 10 ms, as
 *       a client library would, rather than in a busy loop. One JSON line
 *       per count: answers by class, requests/s (all answers) and goodput
 *       (200s/s), p50/p99 latency of the 200s, how many connections got at
 *       least one 200, and the CPU seconds the clients (this process) and
 *       the server used over the run, with the clients' share of the
 *       host's CPUs: on a 2-core host, clients that take a third of it are
 *       part of what is measured. ok_per_server_cpu_s (200s per CPU second
 *       of the server) is what a host busy with other work disturbs least. --client-nice N runs the client threads
 *       at nice N, so that they take only what the server leaves, as
 *       clients on other machines would.
 *
 * Numbers are wall-clock on a shared 2-core machine: run several times.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/syscall.h>
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
        json_t *j = json_loadb(r.body, r.body_len, JSON_ALLOW_NUL, NULL);
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

/* ---- overload ---------------------------------------------------------------- */

typedef struct over_arg {
    int port, index;
    int nice;         /* the client thread's nice value (0: as started) */
    long long end_ms; /* run deadline, hc_now_ms clock */
    long max_tokens;
    double *lat_ms;   /* latencies of 200s, up to cap */
    size_t n_lat, cap;
    long ok, rejected, other, dropped;
} over_arg;

/* The first case-insensitive occurrence of needle in [p, end), or NULL. */
static const char *find_ci(const char *p, const char *end, const char *needle)
{
    size_t n = strlen(needle);
    for (; p + n <= end; p++)
        if (strncasecmp(p, needle, n) == 0)
            return p;
    return NULL;
}

/* Reads one response with a Content-Length from a kept-alive connection
 * (the client never pipelines, so nothing follows it). Returns the status,
 * 0 when the server closed or the deadline passed; *close_after when the
 * server said "Connection: close". */
static int read_answer(int fd, long long deadline, int *close_after)
{
    char buf[16384];
    size_t n = 0, want = 0;
    for (;;) {
        long long left = deadline - hc_now_ms();
        struct pollfd pf = {fd, POLLIN, 0};
        if (left <= 0 || poll(&pf, 1, (int)left) <= 0)
            return 0;
        ssize_t got = recv(fd, buf + n, sizeof buf - 1 - n, 0);
        if (got <= 0)
            return 0;
        n += (size_t)got;
        buf[n] = 0;
        const char *sep = strstr(buf, "\r\n\r\n");
        if (sep && !want) {
            const char *cl = find_ci(buf, sep, "\r\nContent-Length:");
            if (!cl)
                return 0;
            want = (size_t)(sep + 4 - buf) + strtoul(cl + 17, NULL, 10);
            *close_after = find_ci(buf, sep, "\r\nConnection: close") != NULL;
        }
        if (want && n >= want)
            return n == want && n > 12 ? (int)strtol(buf + 9, NULL, 10) : 0;
        if (n + 1 >= sizeof buf)
            return 0;
    }
}

/* Connects to 127.0.0.1:port by the deadline: a connection beyond the
 * server's limit waits in its listen backlog, and when that is full the
 * kernel retries the handshake for minutes. -1 on failure. */
static int connect_by(int port, long long deadline)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
    if (rc != 0 && errno == EINPROGRESS) {
        struct pollfd pf = {fd, POLLOUT, 0};
        long long left = deadline - hc_now_ms();
        int err = 0;
        socklen_t el = sizeof err;
        if (left > 0 && poll(&pf, 1, (int)left) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 &&
            err == 0)
            rc = 0;
    }
    if (rc != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void *over_client(void *p)
{
    over_arg *a = p;
    int fd = -1;
    if (a->nice > 0)
        setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), a->nice);
    char req[768];
    for (long k = 0; hc_now_ms() < a->end_ms; k++) {
        if (fd < 0 && (fd = connect_by(a->port, a->end_ms)) < 0) {
            if (hc_now_ms() < a->end_ms)
                a->dropped++;
            hc_sleep_ms(10);
            continue;
        }
        char body[512];
        int bn = snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":%ld,\"temperature\":0}",
                          prompts[(k + a->index) % 4], a->max_tokens);
        int n = snprintf(req, sizeof req,
                         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         "Content-Length: %d\r\n\r\n%s", bn, body);
        long long t0 = hc_now_ms();
        struct timespec ts0, ts1;
        clock_gettime(CLOCK_MONOTONIC, &ts0);
        int close_after = 0, status = 0;
        if (hc_send_all(fd, req, (size_t)n, (int)(a->end_ms - t0 > 0 ? a->end_ms - t0 : 1)) == 0)
            status = read_answer(fd, a->end_ms, &close_after);
        clock_gettime(CLOCK_MONOTONIC, &ts1);
        if (status == 200) {
            a->ok++;
            if (a->n_lat < a->cap)
                a->lat_ms[a->n_lat++] =
                    (double)(ts1.tv_sec - ts0.tv_sec) * 1e3 + (double)(ts1.tv_nsec - ts0.tv_nsec) / 1e6;
        } else if (status == 503) {
            a->rejected++;
        } else if (status) {
            a->other++;
        } else if (hc_now_ms() < a->end_ms) {
            a->dropped++; /* closed or reset by the server before the end */
        }
        if (!status || close_after) {
            close(fd);
            fd = -1;
        }
        if (!status)
            hc_sleep_ms(10); /* as a client library's reconnect would, not a busy loop */
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* CPU seconds (user + system) this process has used. */
static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* CPU seconds (user + system) process pid has used, from /proc; -1 when
 * unknown. */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static void run_overload(const char *server, const char *model, long conns, long seconds, long max_tokens,
                         int client_nice, const char *const *srv_args)
{
    srv_proc p;
    const char *extra[48] = {"--quiet"};
    size_t ne = 1;
    for (size_t i = 0; srv_args && srv_args[i] && ne < 47; i++)
        extra[ne++] = srv_args[i];
    extra[ne] = NULL;
    if (srv_start(&p, server, model, extra) != 0)
        exit(1);
    complete(p.port, 0, max_tokens, NULL); /* warm-up: page in the weights */
    over_arg *args = calloc((size_t)conns, sizeof *args);
    pthread_t *th = calloc((size_t)conns, sizeof *th);
    size_t cap = 1 << 14;
    if (!args || !th)
        exit(1);
    double cpu0 = self_cpu_s(), srv0 = proc_cpu_s(p.pid);
    long long t0 = hc_now_ms();
    for (long i = 0; i < conns; i++) {
        args[i] = (over_arg){.port = p.port, .index = (int)i, .nice = client_nice, .end_ms = t0 + seconds * 1000,
                             .max_tokens = max_tokens,
                             .lat_ms = calloc(cap, sizeof(double)), .cap = cap};
        if (!args[i].lat_ms || pthread_create(&th[i], NULL, over_client, &args[i]) != 0)
            exit(1);
    }
    long ok = 0, rejected = 0, other = 0, dropped = 0, served = 0;
    size_t n_lat = 0;
    for (long i = 0; i < conns; i++) {
        pthread_join(th[i], NULL);
        ok += args[i].ok;
        rejected += args[i].rejected;
        other += args[i].other;
        dropped += args[i].dropped;
        served += args[i].ok > 0;
        n_lat += args[i].n_lat;
    }
    double wall = (double)(hc_now_ms() - t0) / 1e3;
    double client_cpu = self_cpu_s() - cpu0, srv1 = proc_cpu_s(p.pid);
    double server_cpu = srv0 >= 0 && srv1 >= 0 ? srv1 - srv0 : -1;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    /* What the server saw: connections its guard cut, 503s it sent. */
    double cut_slow = srv_metric(p.port, "phasemark_connections_cut_total{reason=\"header_timeout\"}");
    double cut_reserve = srv_metric(p.port, "phasemark_connections_cut_total{reason=\"reserve\"}");
    srv_stop(&p, SIGTERM, TIMEOUT);
    free(p.log);
    double *lat = calloc(n_lat ? n_lat : 1, sizeof *lat);
    if (!lat)
        exit(1);
    size_t k = 0;
    for (long i = 0; i < conns; i++) {
        memcpy(lat + k, args[i].lat_ms, args[i].n_lat * sizeof *lat);
        k += args[i].n_lat;
        free(args[i].lat_ms);
    }
    qsort(lat, n_lat, sizeof *lat, cmp_double);
    printf("{\"bench\":\"server_overload\",\"connections\":%ld,\"seconds\":%.3f,\"max_tokens\":%ld,"
           "\"ok_200\":%ld,\"rejected_503\":%ld,\"other\":%ld,\"dropped\":%ld,\"requests_per_s\":%.1f,"
           "\"goodput_per_s\":%.1f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"connections_served\":%ld,"
           "\"server_cut_header_timeout\":%.0f,\"server_cut_reserve\":%.0f,\"client_nice\":%d,"
           "\"client_cpu_s\":%.2f,\"server_cpu_s\":%.2f,\"client_cpu_share\":%.3f,\"host_cpus\":%ld,"
           "\"ok_per_server_cpu_s\":%.2f}\n",
           conns, wall, max_tokens, ok, rejected, other, dropped, (double)(ok + rejected + other) / wall,
           (double)ok / wall, n_lat ? pct(lat, n_lat, 50) : 0.0, n_lat ? pct(lat, n_lat, 99) : 0.0, served,
           cut_slow, cut_reserve, client_nice, client_cpu, server_cpu,
           client_cpu / (wall * (double)(ncpu > 0 ? ncpu : 1)), ncpu, server_cpu > 0 ? (double)ok / server_cpu : 0.0);
    fflush(stdout);
    free(lat);
    free(args);
    free(th);
}

static int cmd_overload(int argc, char **argv)
{
    int dash = argc;
    for (int i = 4; i < argc; i++)
        if (!strcmp(argv[i], "--")) {
            dash = i;
            break;
        }
    long seconds = opt_long(dash, argv, "--seconds", 10), max_tokens = opt_long(dash, argv, "--max-tokens", 16);
    long client_nice = opt_long(dash, argv, "--client-nice", 0);
    if (client_nice > 19) {
        fprintf(stderr, "bench_server: --client-nice takes 1..19\n");
        return 2;
    }
    const char *list = opt_str(dash, argv, "--connections");
    char counts[128];
    snprintf(counts, sizeof counts, "%s", list ? list : "8,64,256");
    for (char *c = counts; *c;) {
        char *end;
        long n = strtol(c, &end, 10);
        if (end == c || n <= 0 || n > 4096 || (*end && *end != ',')) {
            fprintf(stderr, "bench_server: --connections needs a list of counts like 8,64,256\n");
            return 2;
        }
        run_overload(argv[2], argv[3], n, seconds, max_tokens, (int)client_nice,
                     dash < argc ? (const char *const *)argv + dash + 1 : NULL);
        c = *end ? end + 1 : end;
    }
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
    if (argc >= 4 && !strcmp(argv[1], "overload"))
        return cmd_overload(argc, argv);
    if (argc >= 5 && !strcmp(argv[1], "perturb"))
        return cmd_perturb(argc, argv, argv[0]);
    fprintf(stderr, "usage: bench_server load SERVER MODEL [--clients N] [--requests N] [--max-tokens N]\n"
                    "       bench_server once SERVER MODEL --out FILE [--requests N] [--max-tokens N]\n"
                    "       bench_server perturb SERVER MODEL PHASEMARK [--pairs N]\n"
                    "       bench_server overload SERVER MODEL [--connections 8,64,256] [--seconds N]\n"
                    "                    [--max-tokens N] [-- SERVER-ARGS...]\n");
    return 2;
}
