/* capture.c — `phasemark capture -o DIR [--kernels] [--keep-raw] -- CMD...`
 *
 * Runs CMD with markers enabled and the recorder preloaded (ROCTX entry
 * points and NVTX injection), then merges the per-process raw files into
 * DIR/marker_api_trace.csv (rocprofv3's marker-trace columns) and
 * DIR/trace.json (Chrome/Perfetto). With --kernels the CUPTI recorder is
 * injected too and its per-process CSVs are merged into DIR/kernel_trace.csv,
 * DIR/memory_copy_trace.csv and DIR/cuda_api_trace.csv. Processes still
 * running after CMD exits (daemons left behind) are not waited for.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pmt.h"

#define CAP "phasemark capture: "

static void usage(FILE *f)
{
    fputs("usage: phasemark capture -o DIR [--force] [--env NAME] [--kernels] [--keep-raw] -- CMD [ARG...]\n"
          "  Runs CMD with the range recorder preloaded and markers on (PHASEMARK=1 when\n"
          "  PHASEMARK is unset; a value it has is kept, so PHASEMARK=0 makes a control\n"
          "  run: recorder loaded, markers off, no marker trace written). --env NAME: the\n"
          "  variable CMD's marker library reads instead of PHASEMARK (an embedder's).\n"
          "  Writes DIR/marker_api_trace.csv and DIR/trace.json. --kernels also records\n"
          "  CUDA kernels, copies and launch calls through CUPTI (DIR/kernel_trace.csv,\n"
          "  DIR/memory_copy_trace.csv, DIR/cuda_api_trace.csv). --keep-raw keeps the\n"
          "  per-process raw files in DIR/raw.*. DIR must be empty or new; --force\n"
          "  first removes the outputs a previous capture left there.\n",
          f);
}

static int is_off(const char *v)
{
    static const char *const off[] = {"", "0", "false", "no", "off"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if (strcasecmp(v, off[i]) == 0)
            return 1;
    return 0;
}

static int env_name_ok(const char *s)
{
    if (!*s || (*s >= '0' && *s <= '9'))
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return 0;
    return 1;
}

static int prepend_env(const char *name, const char *value, char sep)
{
    const char *old = getenv(name);
    if (!old || !*old)
        return setenv(name, value, 1);
    size_t n = strlen(value) + strlen(old) + 2;
    char *v = malloc(n);
    if (!v)
        return -1;
    snprintf(v, n, "%s%c%s", value, sep, old);
    int rc = setenv(name, v, 1);
    free(v);
    return rc;
}

/* The environment CMD runs in: recorder preloaded, markers on unless the
 * variable (env) was set to an off value, which makes a control run.
 * *control is set to 1 then. */
static int capture_env(const char *env, const char *rawdir, const char *rec, const char *cupti,
                       int *control)
{
    const char *pm = getenv(env);
    int rc = 0;
    *control = pm && is_off(pm);
    if (!pm)
        rc |= setenv(env, "1", 1);
    if (strcmp(env, "PHASEMARK") != 0)
        rc |= setenv("PHASEMARK_CAPTURE_ENV", env, 1);
    rc |= prepend_env("LD_PRELOAD", rec, ':');
    rc |= setenv("NVTX_INJECTION64_PATH", rec, 1);
    rc |= setenv("PHASEMARK_CAPTURE_DIR", rawdir, 1);
    if (cupti)
        rc |= setenv("CUDA_INJECTION64_PATH", cupti, 1);
#if defined(__SANITIZE_ADDRESS__)
    /* Sanitizer builds of our own programs: the preloaded (uninstrumented)
     * recorder sits before the ASan runtime, which ASan would refuse. */
    rc |= prepend_env("ASAN_OPTIONS", "verify_asan_link_order=0", ':');
#endif
    return rc;
}

/* Runs argv and waits; returns its wait status, or -1. Interactive
 * interrupts go to CMD (same process group); we wait and still merge. */
static int run_and_wait(char **argv)
{
    struct sigaction ign = {0}, old_int, old_quit;
    ign.sa_handler = SIG_IGN;
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);
    pid_t pid = fork();
    if (pid == 0) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGQUIT, &old_quit, NULL);
        execvp(argv[0], argv);
        fprintf(stderr, CAP "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status = -1;
    if (pid > 0)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    return pid > 0 ? status : -1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names in dir ending with suffix, sorted; *n set. Caller frees each and
 * the array. */
static char **list_dir(const char *dir, const char *suffix, size_t *n)
{
    *n = 0;
    DIR *d = opendir(dir);
    char **v = NULL;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!ends_with(e->d_name, suffix))
            continue;
        char **nv = realloc(v, (*n + 1) * sizeof *v);
        if (!nv)
            break;
        v = nv;
        if ((v[*n] = strdup(e->d_name)))
            (*n)++;
    }
    if (d)
        closedir(d);
    if (*n)
        qsort(v, *n, sizeof *v, cmp_str);
    return v;
}

static void free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static int merge_raw(pmt_trace *t, const char *rawdir)
{
    size_t n;
    char **names = list_dir(rawdir, ".pmraw", &n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096], err[512];
        if (snprintf(path, sizeof path, "%s/%s", rawdir, names[i]) >= (int)sizeof path) {
            fprintf(stderr, CAP "path too long: %s/%s\n", rawdir, names[i]);
            bad = 1;
            continue;
        }
        int rc = pmt_raw_load(t, path, err, sizeof err);
        if (rc != 0)
            fprintf(stderr, CAP "%s%s\n", rc > 0 ? "warning: " : "", err);
        bad |= rc < 0;
    }
    free_list(names, n);
    return bad ? -1 : 0;
}

/* Concatenates the CUPTI recorder's per-process CSVs of one kind, keeping
 * the first header only, with the times of processes whose ranges moved
 * onto the driver's clock moved the same way. Returns the number of files
 * merged, -1 on error. */
static int merge_csv(const pmt_trace *t, const char *rawdir, const char *suffix, const char *out)
{
    size_t n;
    char **names = list_dir(rawdir, suffix, &n);
    FILE *o = n ? fopen(out, "w") : NULL;
    int rc = n && !o ? -1 : (int)n;
    for (size_t i = 0; o && i < n; i++) {
        char path[4096], *text;
        size_t len;
        if (snprintf(path, sizeof path, "%s/%s", rawdir, names[i]) >= (int)sizeof path)
            continue;
        if (pmt_read_file(path, (size_t)1 << 34, &text, &len, NULL, 0) < 0)
            continue;
        char err[512];
        if (pmt_clock_shift_csv(t, path, text, len, i == 0, o, err, sizeof err) < 0) {
            fprintf(stderr, CAP "%s\n", err);
            rc = -1;
        }
        free(text);
    }
    if (o && fclose(o) != 0)
        rc = -1;
    free_list(names, n);
    return rc;
}

static int write_outputs(const pmt_trace *t, const pmt_gpu *g, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/marker_api_trace.csv", dir);
    FILE *f = fopen(path, "w");
    int rc = f ? pmt_trace_write_csv(t, f) : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    snprintf(path, sizeof path, "%s/trace.json", dir);
    f = rc == 0 ? fopen(path, "w") : NULL;
    rc = f ? pmt_trace_write_json_gpu(t, g, f) : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    /* Each process's boot and any offset applied, so that report and
     * check, given this DIR with another host's, can say what was done. */
    snprintf(path, sizeof path, "%s/clock.csv", dir);
    f = rc == 0 ? fopen(path, "w") : NULL;
    rc = f ? pmt_clock_write_csv(t, f) : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    return rc;
}

static size_t count_processes(const pmt_trace *t)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++) {
        size_t j = 0;
        while (j < i && t->r[j].pid != t->r[i].pid)
            j++;
        n += j == i;
    }
    return n;
}

static int describe_exit(int status, char **argv)
{
    if (status == -1) {
        fprintf(stderr, CAP "cannot start %s: %s\n", argv[0], strerror(errno));
        return 1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFEXITED(status))
        fprintf(stderr, CAP "%s exited with status %d\n", argv[0], WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        fprintf(stderr, CAP "%s was killed by signal %d\n", argv[0], WTERMSIG(status));
    return 1;
}

typedef struct cap_opts {
    const char *out;
    const char *env; /* the marker variable: PHASEMARK or --env */
    int kernels, keep_raw, force;
    char **cmd;
} cap_opts;

static int parse(int argc, char **argv, cap_opts *o)
{
    memset(o, 0, sizeof *o);
    o->env = "PHASEMARK";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return 1;
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc)
            o->out = argv[++i];
        else if (strcmp(argv[i], "--env") == 0 && i + 1 < argc) {
            o->env = argv[++i];
            if (!env_name_ok(o->env)) {
                fprintf(stderr, CAP "--env '%s' is not a variable name\n", o->env);
                return -1;
            }
        }
        else if (strcmp(argv[i], "--kernels") == 0)
            o->kernels = 1;
        else if (strcmp(argv[i], "--keep-raw") == 0)
            o->keep_raw = 1;
        else if (strcmp(argv[i], "--force") == 0)
            o->force = 1;
        else if (strcmp(argv[i], "--") == 0 && i + 1 < argc) {
            o->cmd = &argv[i + 1];
            break;
        } else {
            fprintf(stderr, CAP "unexpected argument '%s'\n", argv[i]);
            return -1;
        }
    }
    if (!o->out || !o->cmd) {
        fprintf(stderr, CAP "need -o DIR and -- CMD\n");
        return -1;
    }
    return 0;
}

/* Merges the CUPTI recorder's files into DIR and loads the activities (for
 * trace.json). Returns 0 or -1. */
static int merge_kernels(const cap_opts *o, const pmt_trace *t, const char *rawdir, pmt_gpu *g)
{
    static const struct {
        const char *suffix, *merged;
        int activities; /* shown in trace.json */
    } files[] = {{".kernels.csv", "kernel_trace.csv", 1},
                 {".copies.csv", "memory_copy_trace.csv", 1},
                 {".api.csv", "cuda_api_trace.csv", 0}};
    char out[4096], err[512];
    int rc = 0;
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        snprintf(out, sizeof out, "%s/%s", o->out, files[k].merged);
        int n = merge_csv(t, rawdir, files[k].suffix, out);
        if (n < 0)
            rc = -1;
        else if (n == 0 && k == 0)
            fprintf(stderr, CAP "no CUPTI records (no CUDA work, or no GPU)\n");
        if (n > 0 && files[k].activities && pmt_gpu_load(g, out, err, sizeof err) < 0) {
            fprintf(stderr, CAP "%s\n", err);
            rc = -1;
        }
    }
    return rc;
}

/* Builds the environment, runs, merges. */
static int capture(const cap_opts *o, const char *rec, const char *cupti, const char *rawdir)
{
    int control = 0;
    if (capture_env(o->env, rawdir, rec, cupti, &control) != 0) {
        fprintf(stderr, CAP "cannot set the environment\n");
        return 1;
    }
    int status = run_and_wait(o->cmd);
    int rc = describe_exit(status, o->cmd);
    pmt_trace t;
    pmt_gpu g;
    pmt_trace_init(&t);
    pmt_gpu_init(&g);
    if (merge_raw(&t, rawdir) < 0 || (o->kernels && merge_kernels(o, &t, rawdir, &g) < 0))
        rc = 1;
    pmt_trace_sort(&t);
    for (size_t i = 0; i < t.n; i++)
        t.r[i].corr = i + 1; /* unique, increasing in time, as rocprofv3 numbers them */
    if (control && t.n == 0 && g.nact == 0) {
        /* As under a profiler with markers explicitly off: nothing to write. */
        fprintf(stderr, CAP "control run (%s=%s): no ranges, no marker trace written\n", o->env,
                getenv(o->env));
    } else if (write_outputs(&t, &g, o->out) < 0) {
        fprintf(stderr, CAP "cannot write to %s: %s\n", o->out, strerror(errno));
        rc = 1;
    } else {
        fprintf(stderr, CAP "%zu ranges from %zu processes -> %s/marker_api_trace.csv, %s/trace.json\n",
                t.n, count_processes(&t), o->out, o->out);
        pmt_clock_print(&t, stderr, CAP "clock: ");
    }
    pmt_gpu_free(&g);
    pmt_trace_free(&t);
    return rc;
}

int pmt_cmd_capture(int argc, char **argv)
{
    cap_opts o;
    int prc = parse(argc, argv, &o);
    if (prc != 0) {
        usage(prc > 0 ? stdout : stderr);
        return prc > 0 ? 0 : 2;
    }
    char rec[4096], cup[4096], rawdir[4096 + 16];
    const char *recorder = pmt_recorder_path(rec, sizeof rec);
    const char *cupti = o.kernels ? pmt_cupti_path(cup, sizeof cup) : NULL;
    if (!recorder || (o.kernels && !cupti)) {
        fprintf(stderr, CAP "cannot find %s (set %s)\n",
                recorder ? "the CUPTI recorder; built without CUDA?" : "the recorder library",
                recorder ? "PHASEMARK_CUPTI" : "PHASEMARK_RECORDER");
        return 1;
    }
    if (mkdir(o.out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, CAP "cannot create %s: %s\n", o.out, strerror(errno));
        return 1;
    }
    if (pmt_capture_prepare_dir(o.out, o.force) < 0)
        return 1;
    /* Absolute, so processes that change directory still find it. */
    char absout[4096];
    if (!realpath(o.out, absout)) {
        fprintf(stderr, CAP "%s: %s\n", o.out, strerror(errno));
        return 1;
    }
    snprintf(rawdir, sizeof rawdir, "%s/raw.XXXXXX", absout);
    if (!mkdtemp(rawdir)) {
        fprintf(stderr, CAP "cannot create a directory in %s: %s\n", o.out, strerror(errno));
        return 1;
    }
    int rc = capture(&o, recorder, cupti, rawdir);
    if (!o.keep_raw)
        pmt_remove_tree(rawdir);
    return rc;
}
