/* client.h — the server tests' HTTP side: a plain-socket HTTP/1.1 client
 * and a pm-server process runner.
 *
 * The client sends one request per connection ("Connection: close"),
 * reads until the server closes, and decodes the response: status line,
 * headers, and the body (de-chunked when Transfer-Encoding is chunked, so
 * SSE streams come back whole). Every read and write is bounded by a
 * deadline, so a hung server fails the test instead of hanging it.
 */
#ifndef PM_SERVER_TEST_CLIENT_H
#define PM_SERVER_TEST_CLIENT_H

#include <stddef.h>
#include <sys/types.h>

typedef struct hc_resp {
    int status;       /* 0 when no status line arrived */
    char *head;       /* raw header block (NUL-terminated) */
    char *body;       /* decoded body (NUL-terminated) */
    size_t body_len;
    int chunked;      /* Transfer-Encoding: chunked was used */
    int closed_early; /* the connection ended before a complete response */
} hc_resp;

void hc_free(hc_resp *r);

/* The value of header name (case-insensitive) copied into out, or NULL. */
const char *hc_header(const hc_resp *r, const char *name, char *out, size_t cap);

/* Connects to 127.0.0.1:port; -1 on failure. */
int hc_connect(int port);

/* Sends all of n bytes (deadline timeout_ms). 0 or -1. */
int hc_send_all(int fd, const void *p, size_t n, int timeout_ms);

/* Reads until EOF or the deadline into a malloc'd NUL-terminated buffer.
 * Returns the length, or -1 on a timeout/error (buffer still set). */
ssize_t hc_read_all(int fd, char **out, int timeout_ms);

/* Reads exactly one response with a Content-Length from a kept-alive
 * connection (deadline timeout_ms) and parses it. 0 or -1. */
int hc_read_one(int fd, hc_resp *r, int timeout_ms);

/* Parses a raw response. 0, or -1 when malformed (r->status may be 0). */
int hc_parse(const char *raw, size_t n, hc_resp *r);

/* One request: method, path, optional body (JSON content type). 0 when a
 * response was parsed, -1 otherwise. */
int hc_request(int port, const char *method, const char *path, const char *body, hc_resp *r, int timeout_ms);

/* A running pm-server. */
typedef struct srv_proc {
    pid_t pid;
    int port;
    int out_fd; /* its stdout (the listening line has been read) */
    int err_fd; /* its stderr: an unlinked temporary file, so a chatty
                   server never blocks on a full pipe */
    double cpu_ms; /* user + system CPU time, filled by srv_stop */
    char *log;     /* its whole stderr, filled by srv_stop (free it) */
} srv_proc;

/* Starts server_path with -m model --port 0 and the extra arguments
 * (NULL-terminated), waits for its listening line. 0, or -1 (the process
 * is reaped). */
int srv_start(srv_proc *p, const char *server_path, const char *model, const char *const *extra);

/* Sends sig and waits up to timeout_ms for exit. Returns the exit status
 * (0..255), 1000 + signal when killed by one, or -1 on timeout (the
 * process is then killed and reaped). Fills p->log with its stderr (and
 * echoes the last lines to ours, for a failing test's output). */
int srv_stop(srv_proc *p, int sig, int timeout_ms);

/* Reads a pm-server metric (a line "name value") from /metrics; -1 when
 * absent or unreachable. name may include labels. */
double srv_metric(int port, const char *name);

/* Polls srv_metric until it reaches at least want (timeout_ms). 0 or -1. */
int srv_wait_metric(int port, const char *name, double want, int timeout_ms);

/* Milliseconds on a monotonic clock. */
long long hc_now_ms(void);
void hc_sleep_ms(int ms);

#endif
