/* interpose.c — keep recording across exec and _exit.
 *
 * exec replaces the image without running atexit handlers, and _exit skips
 * them, so both would drop what the threads buffered. These wrappers flush
 * first and then call the C library's function (found with RTLD_NEXT).
 * exec also makes sure the new image is recorded: when the environment
 * handed to it lacks the capture variables (a program that builds its own
 * environment), the values this process started with are appended.
 * posix_spawn and fexecve are not wrapped: a spawned child is recorded only
 * when the environment it is given carries the variables.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "recorder.h"

#define PMR_EXPORT __attribute__((visibility("default")))
#define PMR_ENV_VARS 8 /* the six below, PHASEMARK_CAPTURE_ENV and the one it names */
#define PMR_ENV_MAX 4096

extern char **environ;

/* Copies of the capture variables as this image saw them at load time;
 * written once by the constructor, read-only afterwards. */
static char g_env_keep[PMR_ENV_VARS][PMR_ENV_MAX];
static int g_env_count;

static void keep_env(const char *name)
{
    const char *v = getenv(name);
    size_t nl = strlen(name);
    if (!v || g_env_count == PMR_ENV_VARS || nl + strlen(v) + 2 > PMR_ENV_MAX)
        return;
    char *e = g_env_keep[g_env_count++];
    memcpy(e, name, nl);
    e[nl] = '=';
    memcpy(e + nl + 1, v, strlen(v) + 1);
}

__attribute__((constructor)) static void save_capture_env(void)
{
    /* PM_REC_DIR_ENV first: env_patched looks for it to tell whether an
     * environment already has the capture variables. PHASEMARK_CAPTURE_ENV
     * names the variable an embedder's marker library reads instead of
     * PHASEMARK (capture --env). */
    static const char *const names[] = {
        PM_REC_DIR_ENV, "LD_PRELOAD", "NVTX_INJECTION64_PATH", "PHASEMARK",
        "CUDA_INJECTION64_PATH", PM_REC_CLOCK_ENV, "PHASEMARK_CAPTURE_ENV"};
    if (!getenv(PM_REC_DIR_ENV))
        return;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        keep_env(names[i]);
    const char *custom = getenv("PHASEMARK_CAPTURE_ENV");
    if (custom && *custom && strcmp(custom, "PHASEMARK") != 0 && !strchr(custom, '='))
        keep_env(custom);
}

static int env_has(char *const envp[], const char *entry)
{
    size_t klen = (size_t)(strchr(entry, '=') - entry) + 1;
    for (size_t i = 0; envp && envp[i]; i++)
        if (strncmp(envp[i], entry, klen) == 0)
            return 1;
    return 0;
}

/* envp plus whichever saved variables it lacks; a new array the caller
 * frees, or NULL when nothing needs adding (or on allocation failure, in
 * which case exec proceeds with envp as given). */
static char **env_patched(char *const envp[])
{
    if (!g_env_count || env_has(envp, g_env_keep[0]))
        return NULL;
    size_t n = 0;
    while (envp && envp[n])
        n++;
    char **out = malloc((n + PMR_ENV_VARS + 1) * sizeof *out);
    if (!out)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        out[k++] = envp[i];
    for (int i = 0; i < g_env_count; i++)
        if (!env_has(envp, g_env_keep[i]))
            out[k++] = g_env_keep[i];
    out[k] = NULL;
    return out;
}

typedef int (*execve_fn)(const char *, char *const[], char *const[]);

static int exec_with(const char *sym, const char *file, char *const argv[], char *const envp[])
{
    execve_fn real = (execve_fn)dlsym(RTLD_NEXT, sym);
    pm__rec_flush_all();
    if (!real)
        return -1;
    char **patched = env_patched(envp);
    int rc = real(file, argv, patched ? patched : envp);
    free(patched);
    return rc;
}

PMR_EXPORT int execve(const char *path, char *const argv[], char *const envp[]);
PMR_EXPORT int execv(const char *path, char *const argv[]);
PMR_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]);
PMR_EXPORT int execvp(const char *file, char *const argv[]);
PMR_EXPORT int execl(const char *path, const char *arg, ...);
PMR_EXPORT int execlp(const char *file, const char *arg, ...);
PMR_EXPORT int execle(const char *path, const char *arg, ...);
PMR_EXPORT void _exit(int status);
PMR_EXPORT void _Exit(int status);

int execve(const char *path, char *const argv[], char *const envp[])
{
    return exec_with("execve", path, argv, envp);
}

int execv(const char *path, char *const argv[])
{
    return exec_with("execve", path, argv, environ);
}

int execvpe(const char *file, char *const argv[], char *const envp[])
{
    return exec_with("execvpe", file, argv, envp);
}

int execvp(const char *file, char *const argv[])
{
    return exec_with("execvpe", file, argv, environ);
}

/* Collects a NULL-terminated variadic argument list into a new array
 * (freed by the caller); *envp_out receives the array after the NULL when
 * want_env is set (execle). */
static char **collect_args(const char *arg0, va_list ap, int want_env, char ***envp_out)
{
    va_list count;
    va_copy(count, ap);
    size_t n = 1;
    while (va_arg(count, const char *))
        n++;
    va_end(count);
    char **argv = malloc((n + 1) * sizeof *argv);
    if (!argv)
        return NULL;
    argv[0] = (char *)arg0;
    for (size_t i = 1; i <= n; i++)
        argv[i] = va_arg(ap, char *); /* the last one read is the NULL */
    if (want_env)
        *envp_out = va_arg(ap, char **);
    return argv;
}

int execl(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    char **argv = collect_args(arg, ap, 0, NULL);
    va_end(ap);
    if (!argv)
        return -1;
    int rc = execv(path, argv);
    free(argv);
    return rc;
}

int execlp(const char *file, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    char **argv = collect_args(arg, ap, 0, NULL);
    va_end(ap);
    if (!argv)
        return -1;
    int rc = execvp(file, argv);
    free(argv);
    return rc;
}

int execle(const char *path, const char *arg, ...)
{
    char **envp = NULL;
    va_list ap;
    va_start(ap, arg);
    char **argv = collect_args(arg, ap, 1, &envp);
    va_end(ap);
    if (!argv)
        return -1;
    int rc = execve(path, argv, envp);
    free(argv);
    return rc;
}

typedef void (*exit_fn)(int);

static _Noreturn void exit_with(const char *sym, int status)
{
    pm__rec_flush_all();
    exit_fn real = (exit_fn)dlsym(RTLD_NEXT, sym);
    if (real)
        real(status);
    for (;;)
        syscall(SYS_exit_group, status);
}

void _exit(int status)
{
    exit_with("_exit", status);
}

void _Exit(int status)
{
    exit_with("_Exit", status);
}
