/* child.c — bounded child-process runner for tests (see pm_child.h).
 *
 * The parent drains both pipes while it polls, so a chatty child can never
 * block on a full pipe and be mistaken for a hang.
 */
#define _GNU_SOURCE
#include "pm_child.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void drain(int fd, char *buf, size_t cap, size_t *used)
{
    char scratch[4096];
    for (;;) {
        ssize_t n = read(fd, scratch, sizeof scratch);
        if (n <= 0)
            return;
        size_t room = cap - 1 - *used;
        size_t take = (size_t)n < room ? (size_t)n : room;
        memcpy(buf + *used, scratch, take);
        *used += take;
        buf[*used] = '\0';
    }
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void apply_env(char *const env_extra[])
{
    for (size_t i = 0; env_extra && env_extra[i]; i++) {
        const char *e = env_extra[i];
        if (e[0] == '-') {
            unsetenv(e + 1);
            continue;
        }
        const char *eq = strchr(e, '=');
        if (!eq)
            continue;
        char key[256];
        size_t klen = (size_t)(eq - e);
        if (klen >= sizeof key)
            continue;
        memcpy(key, e, klen);
        key[klen] = '\0';
        setenv(key, eq + 1, 1);
    }
}

static int run_common(int (*fn)(void *), void *arg, char *const argv[],
                      char *const env_extra[], int timeout_ms, pm_child_result *res)
{
    int out_pipe[2], err_pipe[2];
    memset(res, 0, sizeof *res);
    if (pipe(out_pipe) != 0)
        return -1;
    if (pipe(err_pipe) != 0) {
        close(out_pipe[0]);
        close(out_pipe[1]);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(out_pipe[0]); close(out_pipe[1]);
        close(err_pipe[0]); close(err_pipe[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(out_pipe[1], STDOUT_FILENO);
        dup2(err_pipe[1], STDERR_FILENO);
        close(out_pipe[0]); close(out_pipe[1]);
        close(err_pipe[0]); close(err_pipe[1]);
        if (argv) {
            apply_env(env_extra);
            execvp(argv[0], argv);
            fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
            _exit(127);
        }
        int rc = fn(arg);
        fflush(stdout);
        fflush(stderr);
        _exit(rc & 0xff);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
    fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
    size_t out_used = 0, err_used = 0;
    long long deadline = now_ms() + timeout_ms;
    int status = 0;
    for (;;) {
        drain(out_pipe[0], res->out, sizeof res->out, &out_used);
        drain(err_pipe[0], res->err, sizeof res->err, &err_used);
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) {
            status = 0;
            break;
        }
        if (now_ms() >= deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            res->timed_out = 1;
            break;
        }
        struct timespec nap = {0, 2 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    /* The child is gone; take whatever it wrote last. Grandchildren that
     * still hold the pipe cannot block us: the ends are non-blocking. */
    drain(out_pipe[0], res->out, sizeof res->out, &out_used);
    drain(err_pipe[0], res->err, sizeof res->err, &err_used);
    close(out_pipe[0]);
    close(err_pipe[0]);
    if (!res->timed_out) {
        if (WIFEXITED(status)) {
            res->exited = 1;
            res->exit_code = WEXITSTATUS(status);
        } else if (WIFSIGNALED(status)) {
            res->signaled = 1;
            res->signo = WTERMSIG(status);
        }
    }
    return 0;
}

int pm_child_run(int (*fn)(void *), void *arg, int timeout_ms, pm_child_result *res)
{
    return run_common(fn, arg, NULL, NULL, timeout_ms, res);
}

int pm_child_exec(char *const argv[], char *const env_extra[], int timeout_ms,
                  pm_child_result *res)
{
    return run_common(NULL, NULL, argv, env_extra, timeout_ms, res);
}

const char *pm_child_describe(const pm_child_result *res, char *buf, size_t len)
{
    if (res->timed_out)
        snprintf(buf, len, "timed out (killed and reaped)");
    else if (res->signaled)
        snprintf(buf, len, "signal SIG%s", sigabbrev_np(res->signo) ? sigabbrev_np(res->signo) : "?");
    else if (res->exited)
        snprintf(buf, len, "exit %d", res->exit_code);
    else
        snprintf(buf, len, "unknown end");
    return buf;
}

int pm_child_ok(const pm_child_result *res)
{
    return res->exited && res->exit_code == 0;
}

int pm_wait_stopped(long pid, int timeout_ms)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    for (int waited = 0; waited <= timeout_ms; waited++) {
        FILE *f = fopen(path, "r");
        if (!f)
            return -1;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        /* The state follows the command name, which may hold ')' itself. */
        const char *end = strrchr(buf, ')');
        if (end && end[1] == ' ' && (end[2] == 'T' || end[2] == 't'))
            return 0;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return -1;
}
