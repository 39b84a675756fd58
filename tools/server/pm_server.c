/* pm-server — the OpenAI-style HTTP server (docs/server.md).
 *
 *   pm-server -m MODEL [--host ADDR] [--port N] [--workers N] [--queue N] ...
 *
 * Prints one line "pm-server: listening on http://ADDR:PORT (model ID)" on
 * stdout once it accepts connections (with --port 0 the line names the
 * port that was picked), then serves until SIGTERM or SIGINT, shuts down
 * gracefully and exits 0. Exit 1 when start-up fails, 2 on a usage error.
 * Each request gets an access-log line on stderr (--quiet: none),
 *     pm-server: req=7 POST /v1/completions 200 41.3ms prompt=11 gen=16 length
 *
 * Signals: SIGTERM and SIGINT are caught by a handler that only writes the
 * signal's number into a self-pipe; the main thread reads it and shuts
 * down. A handler rather than sigwait() with a blocked mask: libraries start
 * threads before main() runs (OpenBLAS's pool, in its constructor), those
 * threads keep SIGTERM unblocked, and the kernel may deliver a
 * process-directed signal to any of them — with no handler installed that
 * thread would take the default action and kill the server mid-request.
 * SIGPIPE is ignored: a client that hangs up must not kill the server.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "server.h"

#define PROG "pm-server"

/* One line per request on stderr (one fprintf, so lines from concurrent
 * connections do not interleave). req= is the X-Request-Id and the id the
 * engine's marker ranges carry, so a trace and this log line up. */
static void access_line(void *user, const pms_access *a)
{
    (void)user;
    if (a->outcome[0] || a->prompt_tokens)
        fprintf(stderr, PROG ": req=%llu %s %s %d %.1fms prompt=%llu gen=%llu %s\n", (unsigned long long)a->id,
                a->method, a->path, a->status, a->ms, (unsigned long long)a->prompt_tokens,
                (unsigned long long)a->generated_tokens, a->outcome[0] ? a->outcome : "-");
    else
        fprintf(stderr, PROG ": req=%llu %s %s %d %.1fms\n", (unsigned long long)a->id, a->method, a->path,
                a->status, a->ms);
}

static int signal_pipe[2] = {-1, -1};

static void on_stop_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t n = write(signal_pipe[1], &b, 1); /* a full pipe already holds a stop */
    (void)n;
    errno = saved;
}

/* Installs the stop handler; returns 0 or -1 with errno set. */
static int catch_stop_signals(void)
{
    if (pipe(signal_pipe) != 0)
        return -1;
    fcntl(signal_pipe[0], F_SETFD, FD_CLOEXEC);
    fcntl(signal_pipe[1], F_SETFD, FD_CLOEXEC);
    fcntl(signal_pipe[1], F_SETFL, O_NONBLOCK);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0)
        return -1;
    return 0;
}

/* Blocks until a stop signal arrived; returns its number. */
static int wait_stop_signal(void)
{
    for (;;) {
        unsigned char b;
        ssize_t n = read(signal_pipe[0], &b, 1);
        if (n == 1)
            return b;
        if (n < 0 && errno == EINTR)
            continue;
        return SIGTERM; /* the pipe broke: treat as a stop */
    }
}

int main(int argc, char **argv)
{
    pms_config cfg;
    char err[512];
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        puts(PROG " " PHASEMARK_VERSION_STRING);
        return 0;
    }
    pms_config_defaults(&cfg);
    int rc = pms_config_parse(&cfg, argc, argv, err, sizeof err);
    if (rc == 1) {
        fputs(pms_config_usage(), stdout);
        return 0;
    }
    if (rc) {
        fprintf(stderr, PROG ": %s\n%s", err, pms_config_usage());
        return 2;
    }
    if (!cfg.quiet)
        cfg.access_log = access_line;
    if (catch_stop_signals() != 0) {
        fprintf(stderr, PROG ": cannot install signal handlers: %s\n", strerror(errno));
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);

    pms_server *srv = NULL;
    if (pms_server_create(&cfg, &srv, err, sizeof err)) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    int v6 = strchr(cfg.host, ':') != NULL; /* an IPv6 literal goes in brackets */
    printf(PROG ": listening on http://%s%s%s:%d (model %s)\n", v6 ? "[" : "", cfg.host, v6 ? "]" : "",
           pms_server_port(srv), pms_server_model_id(srv));
    fflush(stdout);
    int sig = wait_stop_signal();
    fprintf(stderr, PROG ": %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    pms_server_shutdown(srv);
    pms_server_free(srv);
    return 0;
}
