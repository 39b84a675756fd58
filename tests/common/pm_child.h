/* pm_child.h — run a test case in its own child process, bounded in time.
 *
 * Environment-dependent cases (PHASEMARK values, preloads) run in a fresh
 * child so that one case's process-wide decision cannot leak into another.
 * The parent polls waitpid(WNOHANG) until the deadline, then kills and
 * reaps only its own child. Output of the child can be captured to a buffer.
 */
#ifndef PM_CHILD_H
#define PM_CHILD_H

#include <stddef.h>

typedef struct pm_child_result {
    int exited;        /* 1: the child exited; status in exit_code */
    int exit_code;
    int signaled;      /* 1: killed by a signal; number in signo */
    int signo;
    int timed_out;     /* 1: the deadline passed; the child was killed */
    char out[8192];    /* captured stdout (NUL-terminated, may be cut) */
    char err[8192];    /* captured stderr (NUL-terminated, may be cut) */
} pm_child_result;

/* Forks; the child calls fn(arg) and exits with its return value. The
 * parent waits at most timeout_ms (polling), captures both output streams,
 * and fills *res. Returns 0, or -1 when fork or pipe failed. */
int pm_child_run(int (*fn)(void *), void *arg, int timeout_ms, pm_child_result *res);

/* Like pm_child_run but executes argv (argv[0] searched in PATH) with the
 * given extra environment entries ("K=V", NULL-terminated; may be NULL).
 * An entry "K=" with nothing after '=' is set to the empty string; an entry
 * "-K" unsets K. */
int pm_child_exec(char *const argv[], char *const env_extra[], int timeout_ms,
                  pm_child_result *res);

/* One line describing how the child ended ("exit 0", "signal SIGSEGV",
 * "timed out after 5000 ms"), into buf. */
const char *pm_child_describe(const pm_child_result *res, char *buf, size_t len);

/* True when the child exited with code 0, not by a signal or timeout. */
int pm_child_ok(const pm_child_result *res);

/* Waits until process pid is stopped (state T or t in /proc/PID/stat), at
 * most timeout_ms: kill(pid, SIGSTOP) only queues the signal, and a process
 * whose threads run on another core can still answer a request sent right
 * after it. 0 once stopped, -1 on timeout or when pid is gone. */
int pm_wait_stopped(long pid, int timeout_ms);

#endif
