/* probe.c — a small program that uses the marker layer the way an engine
 * does, for the environment-dependent tests (test_mark_env.c runs it in a
 * fresh child per case, with the environment the case needs).
 *
 *   probe calls N          every API N times (7 pushes per round)
 *   probe threads T N      T threads, each N rounds of every API, then a
 *                          per-thread depth check
 *   probe scoped           scoped ranges through return/break/goto/nesting,
 *                          checking the backend's depth after each
 *   probe texts            one range of each kind, nested as an engine would
 *   probe fork_keep        init, fork; the child flips PHASEMARK and must
 *                          keep the parent's decision
 *   probe old N            the old handle-scoped lookup (see old_lookup.c)
 *   probe seed             the seed server's names through pm_configure
 *                          (DFLASH_DS4_ROCTX, prefix ds4), then texts
 *   probe enable MODE N    pm_enable(MODE: off auto roctx nvtx), then calls
 *   probe late             pm_configure and pm_enable after the decision
 *   probe private PATH N   dlopen PATH RTLD_LOCAL first (a candidate the
 *                          process already loaded), then calls N
 *
 * Output on stdout, one "key=value" per line, ending with the libraries
 * named roctx/nvtx/fake mapped into the process ("map <path>").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlfcn.h>

#include "phasemark/mark.h"
#include "old_lookup.h"

enum { PUSHES_PER_ROUND = 7 };

static int parse_count(const char *s, long max, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || *end || v < 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

/* One round: every push kind once, popped in order; 7 pushes. */
static void one_round(uint64_t req, uint32_t i)
{
    pm_range r = pm_range_push("probe.generic");
    pm_range_pop(&r);
    {
        PM_SCOPED_PREFILL(req, 0, 16);
        pm_layer_attr a = PM_LAYER_ATTR_INIT;
        a.first_layer = 0;
        a.last_layer = 3;
        a.backend = "cpu";
        a.req = req;
        a.tokens = 16;
        PM_SCOPED_LAYER_RANGE(&a);
    }
    {
        PM_SCOPED_DECODE(req, 16 + i);
    }
    {
        PM_SCOPED_SPEC_DECODE(req, 4);
        PM_SCOPED_DRAFT(req, 4);
    }
    {
        PM_SCOPED_PHASE(PM_PHASE_VERIFY);
        PM_SCOPED_RANGE("probe.scoped");
    }
}

static void report_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096], last[4096] = "";
    int n = 0;
    if (!f) {
        printf("maps=unreadable\n");
        return;
    }
    while (fgets(line, sizeof line, f)) {
        char *path = strchr(line, '/');
        if (!path)
            continue;
        path[strcspn(path, "\n")] = '\0';
        const char *base = strrchr(path, '/') + 1;
        if (!strstr(base, "roctx") && !strstr(base, "nvtx") && !strstr(base, "fake"))
            continue;
        if (strcmp(path, last) == 0)
            continue;
        snprintf(last, sizeof last, "%s", path);
        printf("map %s\n", path);
        n++;
    }
    fclose(f);
    printf("mapped=%d\n", n);
}

/* The backend's depth on this thread, learned from a push (ROCTX returns
 * the depth before the push). Retries past rejected pushes. */
static int depth_now(void)
{
    for (int tries = 0; tries < 100; tries++) {
        pm_range r = pm_range_push("probe.depth");
        if (r.depth >= 0) {
            int d = r.depth;
            pm_range_pop(&r);
            return d;
        }
    }
    return -1;
}

static int calls(long n)
{
    for (long i = 0; i < n; i++)
        one_round(7, (uint32_t)i);
    printf("enabled=%d\nbackend=%s\nphase=%s\n", pm_enabled(), pm_backend_name(),
           pm_phase_name(pm_current_phase()));
    return 0;
}

typedef struct worker {
    pthread_t tid;
    long rounds;
    uint64_t req;
    int depth_error;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    for (long i = 0; i < w->rounds; i++)
        one_round(w->req, (uint32_t)i);
    w->depth_error = pm_enabled() && depth_now() != 0;
    return NULL;
}

static int threads(long t, long n)
{
    worker w[64];
    for (long i = 0; i < t; i++) {
        w[i].rounds = n;
        w[i].req = (uint64_t)i;
        w[i].depth_error = 0;
        if (pthread_create(&w[i].tid, NULL, work, &w[i]) != 0)
            return 1;
    }
    int errors = 0;
    for (long i = 0; i < t; i++) {
        pthread_join(w[i].tid, NULL);
        errors += w[i].depth_error;
    }
    printf("enabled=%d\nbackend=%s\nthread_depth_errors=%d\n", pm_enabled(),
           pm_backend_name(), errors);
    return 0;
}

/* Each helper leaves its scope by a different path with ranges open. */
static int early_return(int k)
{
    PM_SCOPED_PREFILL(1, 0, 8);
    PM_SCOPED_RANGE("probe.inner");
    if (k > 0)
        return k;
    PM_SCOPED_RANGE("probe.never");
    return 0;
}

static void loop_break(void)
{
    for (int i = 0; i < 10; i++) {
        PM_SCOPED_DECODE(1, (uint32_t)i);
        if (i == 3)
            break;
        PM_SCOPED_RANGE("probe.body");
        if (i == 1)
            continue;
    }
}

static int goto_out(int k)
{
    int rc = 0;
    {
        PM_SCOPED_SPEC_DECODE(1, 4);
        {
            PM_SCOPED_DRAFT(1, 4);
            if (k)
                goto out;
        }
        rc = 1;
    }
out:
    return rc;
}

static int nested(int levels)
{
    PM_SCOPED_RANGE("probe.nest");
    return levels ? nested(levels - 1) + 1 : 0;
}

static int scoped(void)
{
    int errors = 0;
    for (int i = 0; i < 1000; i++) {
        early_return(i % 2);
        errors += depth_now() != 0;
        loop_break();
        errors += depth_now() != 0;
        goto_out(i % 2);
        errors += depth_now() != 0;
        nested(i % 17);
        errors += depth_now() != 0;
        errors += pm_current_phase() != PM_PHASE_NONE;
    }
    printf("enabled=%d\nbackend=%s\nscoped_errors=%d\n", pm_enabled(), pm_backend_name(), errors);
    return 0;
}

/* The nesting an engine produces, so the texts carry the inherited mode. */
static int texts(void)
{
    pm_layer_attr a = PM_LAYER_ATTR_INIT;
    a.first_layer = 0;
    a.last_layer = 11;
    a.shard = 0;
    a.backend = "cpu";
    a.req = 3;
    a.tokens = 11;
    {
        PM_SCOPED_PREFILL(3, 0, 11);
        PM_SCOPED_LAYER_RANGE(&a);
    }
    a.tokens = 1;
    {
        PM_SCOPED_DECODE(3, 11);
        PM_SCOPED_LAYER_RANGE(&a);
    }
    {
        PM_SCOPED_SPEC_DECODE(3, 4);
        {
            PM_SCOPED_DRAFT(3, 4);
        }
        pm_layer_attr v = a;
        v.phase = PM_PHASE_VERIFY;
        v.first_layer = 12;
        v.last_layer = 23;
        v.shard = 1;
        v.where = PM_WHERE_REMOTE;
        v.backend = "cuda:0";
        v.tokens = 5;
        PM_SCOPED_LAYER_RANGE(&v);
    }
    {
        PM_SCOPED_PHASE(PM_PHASE_VERIFY);
        PM_SCOPED_LAYER_RANGE(&a);
    }
    PM_SCOPED_LAYER_RANGE(&a);
    PM_SCOPED_RANGE("pm.custom note=x");
    return 0;
}

/* The child flips the environment; it must keep the inherited decision. */
static int fork_keep(void)
{
    int parent = pm_enabled();
    printf("parent_pid=%d\n", (int)getpid());
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        setenv("PHASEMARK", parent ? "0" : "1", 1);
        int live = 0;
        for (int i = 0; i < 100; i++) {
            pm_range r = pm_range_push("probe.child");
            live += r.depth >= 0;
            pm_range_pop(&r);
        }
        printf("child_enabled=%d\nchild_backend=%s\nchild_live=%d\n", pm_enabled(),
               pm_backend_name(), live);
        fflush(stdout);
        _exit(0); /* no atexit work: the parent reports the libraries */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("enabled=%d\nbackend=%s\nchild_status=%d\n", parent, pm_backend_name(), status);
    return 0;
}

static int old(long n)
{
    old_roctx fns;
    int ok = old_lookup(&fns) == 0;
    printf("old_resolved=%d\n", ok);
    for (long i = 0; ok && i < n * PUSHES_PER_ROUND; i++) {
        fns.push("probe.old");
        fns.pop();
    }
    return 0;
}

/* The seed server's identity, chosen at run time before first use. */
static int seed(void)
{
    pm_config c = PM_CONFIG_INIT;
    c.env_name = "DFLASH_DS4_ROCTX";
    c.prefix = "ds4";
    c.nvtx_domain = "ds4";
    int rc = pm_configure(&c);
    printf("configure=%d\n", rc);
    if (rc != PM_OK)
        return 1;
    texts();
    printf("enabled=%d\nbackend=%s\n", pm_enabled(), pm_backend_name());
    return 0;
}

static int enable(const char *mode, long n)
{
    static const char *const names[] = {"off", "auto", "roctx", "nvtx"};
    for (int m = 0; m < 4; m++) {
        if (strcmp(mode, names[m]) != 0)
            continue;
        int rc = pm_enable((pm_mode)m);
        printf("enable=%d\n", rc);
        printf("enable_again=%d\n", pm_enable(PM_MODE_AUTO));
        return calls(n);
    }
    return 2;
}

/* Too late: the decision stands and nothing changes. Bad arguments are
 * refused before the lock is even taken. */
static int late(void)
{
    pm_config bad = PM_CONFIG_INIT;
    bad.prefix = "Not.Valid";
    printf("invalid_prefix=%d\n", pm_configure(&bad));
    bad.prefix = NULL;
    bad.env_name = "9LIVES";
    printf("invalid_env=%d\n", pm_configure(&bad));
    bad.env_name = NULL;
    bad.size = 4;
    printf("invalid_size=%d\n", pm_configure(&bad));
    printf("invalid_mode=%d\n", pm_enable((pm_mode)7));
    int on = pm_enabled();
    pm_config c = PM_CONFIG_INIT;
    c.prefix = "late";
    printf("enabled=%d\nlate_configure=%d\nlate_enable=%d\n", on, pm_configure(&c),
           pm_enable(on ? PM_MODE_OFF : PM_MODE_AUTO));
    printf("strerror=%s\n", pm_strerror(PM_ERR_DECIDED));
    texts();
    printf("enabled_after=%d\n", pm_enabled());
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: probe calls N | threads T N | scoped | texts | fork_keep | old N"
                    " | seed | enable MODE N | late | private PATH N\n");
    return 2;
}

int main(int argc, char **argv)
{
    long a = 0, b = 0;
    int rc;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && !strcmp(argv[1], "calls") && !parse_count(argv[2], 10000000, &a))
        rc = calls(a);
    else if (argc == 4 && !strcmp(argv[1], "threads") && !parse_count(argv[2], 64, &a) &&
             !parse_count(argv[3], 10000000, &b))
        rc = threads(a, b);
    else if (argc == 2 && !strcmp(argv[1], "scoped"))
        rc = scoped();
    else if (argc == 2 && !strcmp(argv[1], "texts"))
        rc = texts();
    else if (argc == 2 && !strcmp(argv[1], "fork_keep"))
        rc = fork_keep();
    else if (argc == 3 && !strcmp(argv[1], "old") && !parse_count(argv[2], 10000000, &a))
        rc = old(a);
    else if (argc == 2 && !strcmp(argv[1], "seed"))
        rc = seed();
    else if (argc == 4 && !strcmp(argv[1], "enable") && !parse_count(argv[3], 10000000, &a))
        rc = enable(argv[2], a);
    else if (argc == 2 && !strcmp(argv[1], "late"))
        rc = late();
    else if (argc == 4 && !strcmp(argv[1], "private") && !parse_count(argv[3], 10000000, &a)) {
        if (!dlopen(argv[2], RTLD_NOW | RTLD_LOCAL)) {
            fprintf(stderr, "probe: %s\n", dlerror());
            return 1;
        }
        rc = calls(a);
    }
    else
        return usage();
    report_maps();
    return rc;
}
