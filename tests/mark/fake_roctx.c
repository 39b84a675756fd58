/* fake_roctx.c — a stand-in ROCTX library for the marker tests.
 *
 * Built several times under different names (see CMakeLists.txt): as the
 * preloaded interposer, as a fallback libroctx64.so, as a "complete"
 * librocprofiler-sdk-roctx.so.1 / libroctx64.so.4, and, with FAKE_NO_POP,
 * as an incomplete library that has push but no pop. It counts what it
 * receives and, when unloaded or at exit, writes one line to stdout:
 *
 *   <label>: push=N pop=M rejected=R underflow=U
 *
 * so a test learns which copy received the ranges without any symbol
 * lookup of its own. Each thread's depth is tracked: a pop on a thread
 * whose depth is 0 counts as an underflow (an unbalanced pop).
 *
 * Environment, read once at load: FAKE_ROCTX_REJECT_EVERY=k rejects every
 * k-th push (returns -1, as ROCTX does on error); FAKE_ROCTX_ECHO=1 writes
 * "<label> push <text>" / "<label> pop" lines as they happen.
 *
 * Built with FAKE_GETENV (the preloaded interposer only), it also
 * interposes getenv(), answering from environ itself, and with
 * FAKE_TRACE_GETENV=1 writes "getenv NAME pid=<pid>" each time the
 * process reads PHASEMARK or DFLASH_DS4_ROCTX (the seed's variable): how
 * the fork test sees that a child never reads the environment again, and
 * the identity tests which variable was read.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef FAKE_LABEL
#define FAKE_LABEL "fake"
#endif

#define EXPORT __attribute__((visibility("default")))

static uint64_t n_push, n_pop, n_rejected, n_underflow;
static unsigned long reject_every;
static int echo;
static _Thread_local int depth;

static void out(const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(STDOUT_FILENO, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static size_t put_u64(char *p, uint64_t v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        p[i] = tmp[n - 1 - i];
    return n;
}

static size_t put_str(char *p, const char *s)
{
    size_t n = strlen(s);
    memcpy(p, s, n);
    return n;
}

__attribute__((constructor)) static void fake_load(void)
{
    const char *r = getenv("FAKE_ROCTX_REJECT_EVERY");
    if (r && *r) {
        char *end = NULL;
        unsigned long k = strtoul(r, &end, 10);
        if (end && *end == '\0')
            reject_every = k;
    }
    const char *e = getenv("FAKE_ROCTX_ECHO");
    echo = e && e[0] == '1';
}

__attribute__((destructor)) static void fake_unload(void)
{
    char line[256];
    size_t n = put_str(line, FAKE_LABEL ": push=");
    n += put_u64(line + n, __atomic_load_n(&n_push, __ATOMIC_RELAXED));
    n += put_str(line + n, " pop=");
    n += put_u64(line + n, __atomic_load_n(&n_pop, __ATOMIC_RELAXED));
    n += put_str(line + n, " rejected=");
    n += put_u64(line + n, __atomic_load_n(&n_rejected, __ATOMIC_RELAXED));
    n += put_str(line + n, " underflow=");
    n += put_u64(line + n, __atomic_load_n(&n_underflow, __ATOMIC_RELAXED));
    line[n++] = '\n';
    out(line, n);
}

EXPORT int roctxRangePushA(const char *text);
EXPORT int roctxRangePushA(const char *text)
{
    uint64_t k = __atomic_add_fetch(&n_push, 1, __ATOMIC_RELAXED);
    if (reject_every && k % reject_every == 0) {
        __atomic_add_fetch(&n_rejected, 1, __ATOMIC_RELAXED);
        return -1;
    }
    if (echo) {
        char line[512];
        size_t n = put_str(line, FAKE_LABEL " push ");
        size_t t = strnlen(text, sizeof line - n - 1);
        memcpy(line + n, text, t);
        n += t;
        line[n++] = '\n';
        out(line, n);
    }
    return depth++;
}

#ifdef FAKE_GETENV
extern char **environ;

static char *env_lookup(const char *name)
{
    size_t n = strlen(name);
    for (char **e = environ; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

EXPORT char *getenv(const char *name)
{
    if (strcmp(name, "PHASEMARK") == 0 || strcmp(name, "DFLASH_DS4_ROCTX") == 0) {
        const char *trace = env_lookup("FAKE_TRACE_GETENV");
        if (trace && trace[0] == '1') {
            char line[96];
            size_t k = put_str(line, "getenv ");
            k += put_str(line + k, name);
            k += put_str(line + k, " pid=");
            k += put_u64(line + k, (uint64_t)getpid());
            line[k++] = '\n';
            out(line, k);
        }
    }
    return env_lookup(name);
}
#endif

#ifndef FAKE_NO_POP
EXPORT int roctxRangePop(void);
EXPORT int roctxRangePop(void)
{
    __atomic_add_fetch(&n_pop, 1, __ATOMIC_RELAXED);
    if (depth == 0) {
        __atomic_add_fetch(&n_underflow, 1, __ATOMIC_RELAXED);
        return -1;
    }
    if (echo)
        out(FAKE_LABEL " pop\n", strlen(FAKE_LABEL " pop\n"));
    return --depth;
}
#endif
