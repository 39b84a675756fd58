/* test_child.c — tests of the bounded child runner itself (pm_child.h).
 *
 * Every environment-dependent test trusts pm_child_run/pm_child_exec to
 * bound a case in time, to kill and reap only the child it started, and to
 * report how that child ended. Each promise is a case here. A case cannot
 * run under the harness it tests, so main() forks it into a plain child of
 * its own with alarm() as an independent bound: a runner that never
 * returns fails that case (SIGALRM) instead of hanging ctest.
 *
 *   test_child CASE     CASE: bound_5s timeout_reaped own_child_only
 *                             signal_segv signal_abort signal_kill exit_code
 *                             output_capture exec_env exec_missing
 */
#define _GNU_SOURCE
#include "pm_check.h"
#include "pm_child.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The bound test_mark_env uses for every case (its TIMEOUT_MS). */
enum { BOUND_MS = 5000 };

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Child bodies. --------------------------------------------------------- */

/* Says its pid, then sleeps far past any bound. */
static int body_hang(void *arg)
{
    (void)arg;
    printf("pid=%d\n", (int)getpid());
    fflush(stdout);
    for (;;)
        pause();
    return 0; /* not reached */
}

/* Dies by the signal in *arg, with its default action: a sanitizer's own
 * SIGSEGV handler would otherwise turn the signal into an exit. */
static int body_raise(void *arg)
{
    int sig = *(int *)arg;
    if (sig != SIGKILL)
        signal(sig, SIG_DFL);
    raise(sig);
    return 0;
}

static int body_exit3(void *arg)
{
    (void)arg;
    printf("out line\n");
    fprintf(stderr, "err line\n");
    return 3;
}

/* 1 MiB on stdout: more than a pipe holds, so a runner that did not drain
 * while waiting would see a child blocked on write and time it out. */
static int body_chatty(void *arg)
{
    (void)arg;
    static char block[4096];
    memset(block, 'x', sizeof block);
    for (int i = 0; i < 256; i++)
        if (fwrite(block, 1, sizeof block, stdout) != sizeof block)
            return 9;
    return 0;
}

static int pid_in(const char *out)
{
    const char *p = strstr(out, "pid=");
    return p ? (int)strtol(p + 4, NULL, 10) : -1;
}

/* Cases. ----------------------------------------------------------------- */

/* A child that never ends is killed at the 5 s bound, not before and not
 * much after, and reported as timed out (not as exited or signaled). */
static void case_bound_5s(void)
{
    pm_child_result res;
    long long t0 = now_ms();
    CHECK_INT_EQ(pm_child_run(body_hang, NULL, BOUND_MS, &res), 0);
    long long took = now_ms() - t0;
    CHECK(took >= BOUND_MS);
    CHECK(took < BOUND_MS + 1500);
    CHECK_INT_EQ(res.timed_out, 1);
    CHECK_INT_EQ(res.exited, 0);
    CHECK_INT_EQ(res.signaled, 0);
    CHECK_INT_EQ(pm_child_ok(&res), 0);
    char buf[64];
    CHECK_STR_EQ(pm_child_describe(&res, buf, sizeof buf), "timed out (killed and reaped)");
}

/* After a timeout the child is gone, reaped: its pid no longer exists
 * (a zombie would still answer kill(pid, 0)) and the test process has no
 * child left to wait for. Its output up to the kill was captured. */
static void case_timeout_reaped(void)
{
    pm_child_result res;
    CHECK_INT_EQ(pm_child_run(body_hang, NULL, 200, &res), 0);
    CHECK_INT_EQ(res.timed_out, 1);
    int pid = pid_in(res.out);
    CHECK(pid > 0);
    errno = 0;
    CHECK_INT_EQ(kill(pid, 0), -1);
    CHECK_INT_EQ(errno, ESRCH);
    errno = 0;
    CHECK_INT_EQ(waitpid(-1, NULL, WNOHANG), -1);
    CHECK_INT_EQ(errno, ECHILD);
}

/* Killing on timeout touches only the runner's own child: a sibling the
 * test started first (same process group) is still running afterwards,
 * un-waited, and the runner's child is gone. */
static void case_own_child_only(void)
{
    pid_t bystander = fork();
    if (bystander == 0) {
        for (;;)
            pause();
    }
    CHECK(bystander > 0);
    pm_child_result res;
    CHECK_INT_EQ(pm_child_run(body_hang, NULL, 200, &res), 0);
    CHECK_INT_EQ(res.timed_out, 1);
    int pid = pid_in(res.out);
    CHECK(pid > 0 && pid != bystander);
    CHECK_INT_EQ(kill(pid, 0), -1);
    CHECK_INT_EQ(kill(bystander, 0), 0);
    CHECK_INT_EQ(waitpid(bystander, NULL, WNOHANG), 0); /* alive, not a zombie */
    kill(bystander, SIGKILL);
    int st = 0;
    CHECK_INT_EQ(waitpid(bystander, &st, 0), bystander);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL); /* we killed it, not the runner */
}

static void check_signal(int sig, const char *text)
{
    pm_child_result res;
    CHECK_INT_EQ(pm_child_run(body_raise, &sig, BOUND_MS, &res), 0);
    CHECK_INT_EQ(res.signaled, 1);
    CHECK_INT_EQ(res.signo, sig);
    CHECK_INT_EQ(res.exited, 0);
    CHECK_INT_EQ(res.timed_out, 0);
    CHECK_INT_EQ(pm_child_ok(&res), 0);
    char buf[64];
    CHECK_STR_EQ(pm_child_describe(&res, buf, sizeof buf), text);
}

static void case_signal_segv(void) { check_signal(SIGSEGV, "signal SIGSEGV"); }
static void case_signal_abort(void) { check_signal(SIGABRT, "signal SIGABRT"); }
static void case_signal_kill(void) { check_signal(SIGKILL, "signal SIGKILL"); }

/* A nonzero exit is an exit, with its code, both streams kept apart. */
static void case_exit_code(void)
{
    pm_child_result res;
    long long t0 = now_ms();
    CHECK_INT_EQ(pm_child_run(body_exit3, NULL, BOUND_MS, &res), 0);
    CHECK(now_ms() - t0 < 2000); /* returns when the child ends, not at the bound */
    CHECK_INT_EQ(res.exited, 1);
    CHECK_INT_EQ(res.exit_code, 3);
    CHECK_INT_EQ(res.signaled, 0);
    CHECK_INT_EQ(res.timed_out, 0);
    CHECK_INT_EQ(pm_child_ok(&res), 0);
    CHECK_STR_EQ(res.out, "out line\n");
    CHECK_STR_EQ(res.err, "err line\n");
    char buf[64];
    CHECK_STR_EQ(pm_child_describe(&res, buf, sizeof buf), "exit 3");
}

/* More output than a pipe holds: the child is not blocked (it exits 0)
 * and the capture keeps the first sizeof out - 1 bytes, NUL-terminated. */
static void case_output_capture(void)
{
    pm_child_result res;
    CHECK_INT_EQ(pm_child_run(body_chatty, NULL, BOUND_MS, &res), 0);
    CHECK_INT_EQ(pm_child_ok(&res), 1);
    CHECK_INT_EQ(res.timed_out, 0);
    CHECK_U64_EQ(strlen(res.out), sizeof res.out - 1);
    CHECK_INT_EQ(res.out[0], 'x');
    CHECK_INT_EQ(res.out[sizeof res.out - 2], 'x');
}

/* exec: "K=V" sets, "K=" sets empty, "-K" unsets, in the child only. */
static void case_exec_env(void)
{
    setenv("PM_CHILD_GONE", "still here", 1);
    char *argv[] = {"sh", "-c",
                    "printf '%s|%s|%s' \"$PM_CHILD_SET\" \"${PM_CHILD_EMPTY-unset}\" "
                    "\"${PM_CHILD_GONE-unset}\"",
                    NULL};
    char *env[] = {"PM_CHILD_SET=v1", "PM_CHILD_EMPTY=", "-PM_CHILD_GONE", NULL};
    pm_child_result res;
    CHECK_INT_EQ(pm_child_exec(argv, env, BOUND_MS, &res), 0);
    CHECK_INT_EQ(pm_child_ok(&res), 1);
    CHECK_STR_EQ(res.out, "v1||unset");
    CHECK_STR_EQ(getenv("PM_CHILD_GONE"), "still here");
    CHECK(getenv("PM_CHILD_SET") == NULL);
}

/* A program that cannot be executed is exit 127 with a line on stderr. */
static void case_exec_missing(void)
{
    char *argv[] = {"/nonexistent/pm-no-such-program", NULL};
    pm_child_result res;
    CHECK_INT_EQ(pm_child_exec(argv, NULL, BOUND_MS, &res), 0);
    CHECK_INT_EQ(res.exited, 1);
    CHECK_INT_EQ(res.exit_code, 127);
    CHECK(strstr(res.err, "exec /nonexistent/pm-no-such-program: ") == res.err);
}

static const struct {
    const char *name;
    void (*fn)(void);
} cases[] = {
    {"bound_5s", case_bound_5s},
    {"timeout_reaped", case_timeout_reaped},
    {"own_child_only", case_own_child_only},
    {"signal_segv", case_signal_segv},
    {"signal_abort", case_signal_abort},
    {"signal_kill", case_signal_kill},
    {"exit_code", case_exit_code},
    {"output_capture", case_output_capture},
    {"exec_env", case_exec_env},
    {"exec_missing", case_exec_missing},
};

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_child CASE\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(argv[1], cases[i].name) != 0)
            continue;
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0) {
            /* In its own process group, so that a runner which killed
             * its group would take the case down with it, visibly. */
            setpgid(0, 0);
            alarm(20);
            cases[i].fn();
            fflush(NULL);
            _exit(pm_check_result());
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (WIFEXITED(st))
            return WEXITSTATUS(st);
        fprintf(stderr, "test_child %s: case ended by signal %d%s\n", argv[1], WTERMSIG(st),
                WTERMSIG(st) == SIGALRM ? " (the runner did not return in 20 s)" : "");
        return 1;
    }
    fprintf(stderr, "test_child: unknown case %s\n", argv[1]);
    return 2;
}
