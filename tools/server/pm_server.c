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
 * Signals: SIGTERM and SIGINT are blocked before any thread starts, so
 * every thread inherits the mask and the main thread alone receives them
 * through sigwait() — no asynchronous handler runs. SIGPIPE is ignored: a
 * client that hangs up must not kill the server.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

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

int main(int argc, char **argv)
{
    pms_config cfg;
    char err[512];
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
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
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
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, PROG ": %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    pms_server_shutdown(srv);
    pms_server_free(srv);
    return 0;
}
