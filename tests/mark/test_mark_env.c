/* test_mark_env.c — the marker contract cases that depend on the process
 * environment (issue 2, cases a–e and i). Each case runs the probe in a
 * fresh child (pm_child, 5 s bound) with exactly the environment it needs,
 * and checks what the child printed and which libraries it mapped.
 *
 * Fake ROCTX libraries (fake_roctx.c) stand in for a profiler's interposer
 * and for the fallback libraries; they report what they received when
 * unloaded, so no case needs a symbol lookup of its own.
 *
 *   test_mark_env <case>
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pm_check.h"
#include "pm_child.h"

#ifndef PROBE_PATH
#error "PROBE_PATH, INTERPOSER_PATH, FALLBACK_DIR, INCOMPLETE_DIR, ROCTX4_DIR, SANITIZER_PRELOAD come from CMake"
#endif

enum { TIMEOUT_MS = 5000, ENV_MAX = 16 };

typedef struct run {
    char *env[ENV_MAX];
    int n_env;
    char store[ENV_MAX][1024];
    pm_child_result res;
} run;

static void env_add(run *r, const char *k, const char *v)
{
    REQUIRE(r->n_env < ENV_MAX - 1);
    char *slot = r->store[r->n_env];
    if (v)
        snprintf(slot, sizeof r->store[0], "%s=%s", k, v);
    else
        snprintf(slot, sizeof r->store[0], "-%s", k);
    r->env[r->n_env++] = slot;
    r->env[r->n_env] = NULL;
}

/* A clean slate: none of the variables that steer marker resolution is
 * inherited from whoever runs the tests. */
static void env_base(run *r)
{
    r->n_env = 0;
    env_add(r, "PHASEMARK", NULL);
    env_add(r, "NVTX_INJECTION64_PATH", NULL);
    env_add(r, "LD_PRELOAD", SANITIZER_PRELOAD[0] ? SANITIZER_PRELOAD : NULL);
    env_add(r, "LD_LIBRARY_PATH", NULL);
    env_add(r, "FAKE_ROCTX_REJECT_EVERY", NULL);
    env_add(r, "FAKE_ROCTX_ECHO", NULL);
    env_add(r, "FAKE_TRACE_GETENV", NULL);
    env_add(r, "DFLASH_DS4_ROCTX", NULL);
}

static void preload_interposer(run *r)
{
    char v[1024];
    if (SANITIZER_PRELOAD[0])
        snprintf(v, sizeof v, "%s:%s", SANITIZER_PRELOAD, INTERPOSER_PATH);
    else
        snprintf(v, sizeof v, "%s", INTERPOSER_PATH);
    env_add(r, "LD_PRELOAD", v);
}

static void run_probe(run *r, const char *a1, const char *a2, const char *a3)
{
    char *argv[] = {(char *)PROBE_PATH, (char *)a1, (char *)a2, (char *)a3, NULL};
    REQUIRE(pm_child_exec(argv, r->env, TIMEOUT_MS, &r->res) == 0);
    char how[128];
    if (!pm_child_ok(&r->res))
        fprintf(stderr, "probe %s: %s\nstdout:\n%s\nstderr:\n%s\n", a1,
                pm_child_describe(&r->res, how, sizeof how), r->res.out, r->res.err);
    CHECK(pm_child_ok(&r->res));
}

static int has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
        if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
            return 1;
    return 0;
}

static int count_substr(const char *text, const char *s)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, s)) != NULL; p += strlen(s))
        n++;
    return n;
}

static int count_lines(const char *text)
{
    int n = 0;
    for (; *text; text++)
        n += *text == '\n';
    return n;
}

#define CHECK_LINE(text, line)                                                \
    do {                                                                      \
        if (!has_line((text), (line)))                                        \
            PM_CHECK_FAIL_("line \"%s\" missing from:\n%s", (line), (text));  \
    } while (0)

#define CHECK_NO_SUBSTR(text, s)                                              \
    do {                                                                      \
        if (strstr((text), (s)))                                              \
            PM_CHECK_FAIL_("\"%s\" unexpected in:\n%s", (s), (text));         \
    } while (0)

/* ---- a) disabled values ----------------------------------------------- */

/* Scans every LD_DEBUG output file in dir for a lookup of a marker symbol;
 * returns how many lines named one. */
static int marker_lookups(const char *dir)
{
    static const char *const names[] = {"roctx", "nvtx", "InitializeInjection"};
    DIR *d = opendir(dir);
    int hits = 0, files = 0;
    struct dirent *e;
    REQUIRE(d);
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[2048], line[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        files++;
        while (fgets(line, sizeof line, f))
            for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
                if (strstr(line, "symbol=") && strstr(line, names[i])) {
                    if (hits++ < 3)
                        fprintf(stderr, "lookup: %s", line);
                }
        fclose(f);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
    CHECK(files > 0); /* the loader did write its trace: the check is live */
    return hits;
}

static int case_disabled(const char *value)
{
    run r;
    env_base(&r);
    if (value)
        env_add(&r, "PHASEMARK", value);
    /* Everything a wrong decision would load is within reach: a working
     * fallback on the library path and an "injection" NVTX would dlopen. */
    env_add(&r, "LD_LIBRARY_PATH", FALLBACK_DIR);
    env_add(&r, "NVTX_INJECTION64_PATH", FALLBACK_DIR "/libroctx64.so");
    char dir[] = "/tmp/pm_ldtrace.XXXXXX";
    REQUIRE(mkdtemp(dir));
    char out[1100];
    snprintf(out, sizeof out, "%s/ld", dir);
    env_add(&r, "LD_DEBUG", "symbols");
    env_add(&r, "LD_DEBUG_OUTPUT", out);
    run_probe(&r, "calls", "1000", NULL);
    CHECK_LINE(r.res.out, "enabled=0");
    CHECK_LINE(r.res.out, "backend=off");
    CHECK_LINE(r.res.out, "mapped=0");
    CHECK_STR_EQ(r.res.err, "");
    CHECK_INT_EQ(marker_lookups(dir), 0);
    return pm_check_result();
}

/* ---- b) diagnostics ----------------------------------------------------- */

/* The "nothing resolves" cases need a machine without a real ROCTX. */
static void skip_if_real_roctx(void)
{
    static const char *const libs[] = {"librocprofiler-sdk-roctx.so.1", "libroctx64.so.4",
                                       "libroctx64.so"};
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
        void *h = dlopen(libs[i], RTLD_LAZY | RTLD_LOCAL);
        if (h) {
            dlclose(h);
            PM_SKIP("a real ROCTX library is installed; 'nothing resolves' cannot be staged");
        }
    }
}

static int case_diag(const char *value, const char *expect_prefix)
{
    run r;
    if (strcmp(value, "maybe") != 0)
        skip_if_real_roctx();
    env_base(&r);
    env_add(&r, "PHASEMARK", value);
    run_probe(&r, "threads", "8", "100000");
    CHECK_LINE(r.res.out, "enabled=0");
    CHECK_INT_EQ(count_lines(r.res.err), 1);
    CHECK(strncmp(r.res.err, expect_prefix, strlen(expect_prefix)) == 0);
    if (strncmp(r.res.err, expect_prefix, strlen(expect_prefix)) != 0)
        fprintf(stderr, "stderr was: %s\n", r.res.err);
    return pm_check_result();
}

/* ---- c) interposer regression ----------------------------------------- */

/* The assertion the old lookup must fail: every range reaches the
 * preloaded interposer, none reaches the fallback library. */
static int case_interposer(const char *mode)
{
    run r;
    env_base(&r);
    env_add(&r, "PHASEMARK", "1");
    env_add(&r, "LD_LIBRARY_PATH", FALLBACK_DIR);
    preload_interposer(&r);
    run_probe(&r, mode, "1000", NULL);
    CHECK_LINE(r.res.out, "interposer: push=7000 pop=7000 rejected=0 underflow=0");
    CHECK_NO_SUBSTR(r.res.out, "fallback: push=7");
    CHECK_NO_SUBSTR(r.res.out, "fallback: push=1");
    CHECK_STR_EQ(r.res.err, "");
    return pm_check_result();
}

/* The same setup through the old lookup: the ranges go to the fallback's
 * own copy and the profiler's interposer sees none. */
static int case_old_misroutes(void)
{
    run r;
    env_base(&r);
    env_add(&r, "LD_LIBRARY_PATH", FALLBACK_DIR);
    preload_interposer(&r);
    run_probe(&r, "old", "1000", NULL);
    CHECK_LINE(r.res.out, "old_resolved=1");
    CHECK_LINE(r.res.out, "fallback: push=7000 pop=7000 rejected=0 underflow=0");
    CHECK_LINE(r.res.out, "interposer: push=0 pop=0 rejected=0 underflow=0");
    return pm_check_result();
}

static int case_fallback_only(void)
{
    run r;
    env_base(&r);
    env_add(&r, "PHASEMARK", "roctx");
    env_add(&r, "LD_LIBRARY_PATH", FALLBACK_DIR);
    run_probe(&r, "calls", "1000", NULL);
    CHECK_LINE(r.res.out, "backend=roctx");
    CHECK_LINE(r.res.out, "fallback: push=7000 pop=7000 rejected=0 underflow=0");
    CHECK_LINE(r.res.out, "map " FALLBACK_DIR "/libroctx64.so");
    CHECK_STR_EQ(r.res.err, "");
    return pm_check_result();
}

/* ---- d) incomplete library ---------------------------------------------- */

static int case_incomplete(int with_next)
{
    run r;
    env_base(&r);
    env_add(&r, "PHASEMARK", "1");
    env_add(&r, "LD_LIBRARY_PATH", with_next ? INCOMPLETE_DIR ":" ROCTX4_DIR : INCOMPLETE_DIR);
    run_probe(&r, "calls", "100", NULL);
    /* The destructor line proves dlclose ran; the map check proves the
     * library is gone from the address space. */
    CHECK_LINE(r.res.out, "incomplete: push=0 pop=0 rejected=0 underflow=0");
    CHECK_NO_SUBSTR(r.res.out, "librocprofiler-sdk-roctx.so.1\n");
    if (with_next) {
        CHECK_LINE(r.res.out, "backend=roctx");
        CHECK_LINE(r.res.out, "roctx4: push=700 pop=700 rejected=0 underflow=0");
        CHECK_LINE(r.res.out, "mapped=1");
        CHECK_STR_EQ(r.res.err, "");
    } else {
        CHECK_LINE(r.res.out, "backend=off");
        CHECK_LINE(r.res.out, "mapped=0");
        CHECK_INT_EQ(count_lines(r.res.err), 1);
        CHECK(strstr(r.res.err, "librocprofiler-sdk-roctx.so.1: lacks roctxRangePop") != NULL);
    }
    return pm_check_result();
}

/* ---- e) balance --------------------------------------------------------- */

/* Reads "<label>: push=N pop=M rejected=R underflow=U" from out. */
static int fake_counts(const char *out, const char *label, long long v[4])
{
    char key[64];
    snprintf(key, sizeof key, "%s: push=", label);
    const char *p = strstr(out, key);
    if (!p)
        return -1;
    return sscanf(p + strlen(label), ": push=%lld pop=%lld rejected=%lld underflow=%lld",
                  &v[0], &v[1], &v[2], &v[3]) == 4 ? 0 : -1;
}

static int case_balance(const char *mode, const char *reject_every)
{
    run r;
    env_base(&r);
    env_add(&r, "PHASEMARK", "roctx");
    preload_interposer(&r);
    if (reject_every)
        env_add(&r, "FAKE_ROCTX_REJECT_EVERY", reject_every);
    if (!strcmp(mode, "threads"))
        run_probe(&r, "threads", "8", "100000");
    else
        run_probe(&r, "scoped", NULL, NULL);
    long long v[4];
    REQUIRE(fake_counts(r.res.out, "interposer", v) == 0);
    CHECK(v[0] > 0);
    CHECK_INT_EQ(v[1], v[0] - v[2]); /* every accepted push popped, once */
    CHECK_INT_EQ(v[3], 0);           /* never a pop at depth 0 */
    if (reject_every)
        CHECK(v[2] > 0);
    if (!strcmp(mode, "threads")) {
        CHECK_LINE(r.res.out, "thread_depth_errors=0");
        if (!reject_every)
            CHECK_INT_EQ(v[0], 8LL * 100000 * 7 + 8);
    } else {
        CHECK_LINE(r.res.out, "scoped_errors=0");
    }
    CHECK_STR_EQ(r.res.err, "");
    return pm_check_result();
}

/* ---- f) range text, end to end ------------------------------------------ */

static int case_texts(void)
{
    static const char *const want =
        "interposer push pm.prefill mode=exact req=3 pos=0 tokens=11\n"
        "interposer push pm.layer_range mode=exact layers=0-11 shard=0 where=local backend=cpu req=3 tokens=11\n"
        "interposer pop\n"
        "interposer pop\n"
        "interposer push pm.decode mode=decode req=3 pos=11\n"
        "interposer push pm.layer_range mode=decode layers=0-11 shard=0 where=local backend=cpu req=3 tokens=1\n"
        "interposer pop\n"
        "interposer pop\n"
        "interposer push pm.spec_decode mode=batched req=3 draft=4\n"
        "interposer push pm.draft req=3 tokens=4\n"
        "interposer pop\n"
        "interposer push pm.layer_range mode=verify layers=12-23 shard=1 where=remote backend=cuda:0 req=3 tokens=5\n"
        "interposer pop\n"
        "interposer pop\n"
        "interposer push pm.layer_range mode=verify layers=0-11 shard=0 where=local backend=cpu req=3 tokens=1\n"
        "interposer pop\n"
        "interposer push pm.layer_range mode=none layers=0-11 shard=0 where=local backend=cpu req=3 tokens=1\n"
        "interposer push pm.custom note=x\n"
        "interposer pop\n"
        "interposer pop\n";
    run r;
    env_base(&r);
    env_add(&r, "PHASEMARK", "1");
    env_add(&r, "FAKE_ROCTX_ECHO", "1");
    preload_interposer(&r);
    run_probe(&r, "texts", NULL, NULL);
    CHECK(strncmp(r.res.out, want, strlen(want)) == 0);
    if (strncmp(r.res.out, want, strlen(want)) != 0)
        fprintf(stderr, "got:\n%s\nwant:\n%s", r.res.out, want);
    CHECK_STR_EQ(r.res.err, "");
    return pm_check_result();
}

/* ---- NVTX backend ------------------------------------------------------ */

#ifdef NVTX_FAKE_PATH
static int case_nvtx(const char *name)
{
    run r;
    env_base(&r);
    env_add(&r, "NVTX_INJECTION64_PATH", NVTX_FAKE_PATH);
    int auto_mode = strstr(name, "auto") != NULL;
    env_add(&r, "PHASEMARK", auto_mode ? "1" : "nvtx");
    if (!strcmp(name, "nvtx_auto_prefers_roctx"))
        preload_interposer(&r);
    if (!strcmp(name, "nvtx_tool_without_pop"))
        env_add(&r, "FAKE_NVTX_NO_POP", "1");
    if (!strcmp(name, "nvtx_auto_fallback"))
        skip_if_real_roctx();
    run_probe(&r, "calls", "1000", NULL);
    if (!strcmp(name, "nvtx_auto_prefers_roctx")) {
        /* ROCTX resolved first, so NVTX was never initialized: the tool
         * was not even loaded. */
        CHECK_LINE(r.res.out, "backend=roctx");
        CHECK_LINE(r.res.out, "interposer: push=7000 pop=7000 rejected=0 underflow=0");
        CHECK_NO_SUBSTR(r.res.out, "nvtxfake");
        CHECK_STR_EQ(r.res.err, "");
    } else if (!strcmp(name, "nvtx_tool_without_pop")) {
        CHECK_LINE(r.res.out, "backend=off");
        CHECK_LINE(r.res.out, "nvtxfake: push=0 pop=0 rejected=0 underflow=0 domain=(none)");
        CHECK_INT_EQ(count_lines(r.res.err), 1);
        CHECK(strstr(r.res.err, "nvtx: injection did not hook domain ranges") != NULL);
    } else {
        CHECK_LINE(r.res.out, "backend=nvtx");
        CHECK_LINE(r.res.out, "nvtxfake: push=7000 pop=7000 rejected=0 underflow=0 domain=phasemark");
        CHECK_STR_EQ(r.res.err, "");
    }
    return pm_check_result();
}
#else
static int case_nvtx(const char *name)
{
    (void)name;
    PM_SKIP("built without nvtx3 headers: no NVTX backend to test");
}
#endif

/* ---- j) identity an embedder chooses ------------------------------------ */

/* The seed server's ranges: probe texts under prefix ds4, as the fake
 * interposer received them. */
static const char seed_texts[] =
    "interposer push ds4.prefill mode=exact req=3 pos=0 tokens=11\n"
    "interposer push ds4.layer_range mode=exact layers=0-11 shard=0 where=local backend=cpu req=3 tokens=11\n"
    "interposer pop\n"
    "interposer pop\n"
    "interposer push ds4.decode mode=decode req=3 pos=11\n"
    "interposer push ds4.layer_range mode=decode layers=0-11 shard=0 where=local backend=cpu req=3 tokens=1\n"
    "interposer pop\n"
    "interposer pop\n"
    "interposer push ds4.spec_decode mode=batched req=3 draft=4\n"
    "interposer push ds4.draft req=3 tokens=4\n"
    "interposer pop\n"
    "interposer push ds4.layer_range mode=verify layers=12-23 shard=1 where=remote backend=cuda:0 req=3 tokens=5\n"
    "interposer pop\n"
    "interposer pop\n";

#define CHECK_PREFIX(text, want)                                              \
    do {                                                                      \
        if (strncmp((text), (want), strlen(want)) != 0)                       \
            PM_CHECK_FAIL_("output does not start with:\n%s\ngot:\n%s", (want), (text)); \
    } while (0)

/* probe is PROBE_PATH (pm_configure at run time) or PROBE_SEED_PATH (the
 * library built with the seed's names). */
static void seed_env(run *r, const char *seed_value, const char *pm_value)
{
    env_base(r);
    env_add(r, "DFLASH_DS4_ROCTX", seed_value);
    env_add(r, "PHASEMARK", pm_value);
    env_add(r, "FAKE_ROCTX_ECHO", "1");
    env_add(r, "FAKE_TRACE_GETENV", "1");
    preload_interposer(r);
}

static void run_exe(run *r, const char *exe, const char *a1, const char *a2, const char *a3)
{
    char *argv[] = {(char *)exe, (char *)a1, (char *)a2, (char *)a3, NULL};
    REQUIRE(pm_child_exec(argv, r->env, TIMEOUT_MS, &r->res) == 0);
    char how[128];
    if (!pm_child_ok(&r->res))
        fprintf(stderr, "%s %s: %s\nstdout:\n%s\nstderr:\n%s\n", exe, a1,
                pm_child_describe(&r->res, how, sizeof how), r->res.out, r->res.err);
    CHECK(pm_child_ok(&r->res));
}

static int case_seed(const char *name)
{
    run r;
    int build = !strncmp(name, "seed_build", 10);
    const char *exe = build ? PROBE_SEED_PATH : PROBE_PATH;
    if (!strcmp(name, "seed_runtime") || !strcmp(name, "seed_build")) {
        /* The seed's variable on, ours explicitly off: only the seed's is read. */
        seed_env(&r, "1", "0");
        run_exe(&r, exe, build ? "texts" : "seed", NULL, NULL);
        const char *body = strstr(r.res.out, "interposer push");
        if (!build)
            CHECK_LINE(r.res.out, "configure=0");
        CHECK(body != NULL);
        if (body)
            CHECK_PREFIX(body, seed_texts);
        CHECK_INT_EQ(count_substr(r.res.out, "getenv DFLASH_DS4_ROCTX"), 1);
        CHECK_INT_EQ(count_substr(r.res.out, "getenv PHASEMARK"), 0);
        CHECK_INT_EQ(count_substr(r.res.out, "pm."), 1); /* the generic "pm.custom" only */
        CHECK_STR_EQ(r.res.err, "");
    } else if (!strcmp(name, "seed_runtime_off") || !strcmp(name, "seed_build_pm_ignored")) {
        /* PHASEMARK=1 means nothing to an embedder that named its own. */
        seed_env(&r, NULL, "1");
        run_exe(&r, exe, build ? "calls" : "seed", build ? "100" : NULL, NULL);
        CHECK_LINE(r.res.out, "enabled=0");
        CHECK_LINE(r.res.out, "backend=off");
        CHECK_NO_SUBSTR(r.res.out, "interposer push");
        CHECK_LINE(r.res.out, "interposer: push=0 pop=0 rejected=0 underflow=0");
        CHECK_INT_EQ(count_substr(r.res.out, "getenv PHASEMARK"), 0);
        CHECK_STR_EQ(r.res.err, "");
    } else {
        seed_env(&r, "maybe", NULL);
        run_exe(&r, exe, "seed", NULL, NULL);
        CHECK_LINE(r.res.out, "enabled=0");
        CHECK_STR_EQ(r.res.err, "phasemark: DFLASH_DS4_ROCTX=\"maybe\" is not one of "
                                "0/false/no/off, 1/true/yes/on/auto, roctx, nvtx; markers off\n");
    }
    return pm_check_result();
}

/* pm_enable decides without the environment, once. */
static int case_enable(int on)
{
    run r;
    env_base(&r);
    env_add(&r, "PHASEMARK", on ? "0" : "1");
    env_add(&r, "FAKE_TRACE_GETENV", "1");
    preload_interposer(&r);
    run_probe(&r, "enable", on ? "roctx" : "off", "100");
    CHECK_LINE(r.res.out, "enable=0");
    CHECK_LINE(r.res.out, "enable_again=-1");
    CHECK_INT_EQ(count_substr(r.res.out, "getenv PHASEMARK"), 0);
    if (on) {
        CHECK_LINE(r.res.out, "enabled=1");
        CHECK_LINE(r.res.out, "backend=roctx");
        CHECK_LINE(r.res.out, "interposer: push=700 pop=700 rejected=0 underflow=0");
    } else {
        CHECK_LINE(r.res.out, "enabled=0");
        CHECK_LINE(r.res.out, "interposer: push=0 pop=0 rejected=0 underflow=0");
    }
    CHECK_STR_EQ(r.res.err, "");
    return pm_check_result();
}

static int case_late(void)
{
    run r;
    env_base(&r);
    env_add(&r, "PHASEMARK", "1");
    env_add(&r, "FAKE_ROCTX_ECHO", "1");
    preload_interposer(&r);
    run_probe(&r, "late", NULL, NULL);
    CHECK_LINE(r.res.out, "invalid_prefix=-2");
    CHECK_LINE(r.res.out, "invalid_env=-2");
    CHECK_LINE(r.res.out, "invalid_size=-2");
    CHECK_LINE(r.res.out, "invalid_mode=-2");
    CHECK_LINE(r.res.out, "enabled=1");
    CHECK_LINE(r.res.out, "late_configure=-1");
    CHECK_LINE(r.res.out, "late_enable=-1");
    CHECK_LINE(r.res.out, "strerror=markers were already decided for this process");
    CHECK_LINE(r.res.out, "interposer push pm.prefill mode=exact req=3 pos=0 tokens=11");
    CHECK_NO_SUBSTR(r.res.out, "late.");
    CHECK_LINE(r.res.out, "enabled_after=1");
    CHECK_STR_EQ(r.res.err, "");
    return pm_check_result();
}

/* ---- mutation survivors: one source per pair, loaded first, no GPU work -- */

/* A preloaded push without a pop: the global scope is incomplete, so both
 * entries come from the fallback and the preloaded push is never called. */
static int case_push_only(void)
{
    run r;
    char v[2048];
    env_base(&r);
    env_add(&r, "PHASEMARK", "1");
    env_add(&r, "LD_LIBRARY_PATH", FALLBACK_DIR);
    snprintf(v, sizeof v, "%s%s%s", SANITIZER_PRELOAD, SANITIZER_PRELOAD[0] ? ":" : "",
             PUSH_ONLY_PATH);
    env_add(&r, "LD_PRELOAD", v);
    run_probe(&r, "calls", "1000", NULL);
    CHECK_LINE(r.res.out, "backend=roctx");
    CHECK_LINE(r.res.out, "pushonly: push=0 pop=0 rejected=0 underflow=0");
    CHECK_LINE(r.res.out, "fallback: push=7000 pop=7000 rejected=0 underflow=0");
    CHECK_STR_EQ(r.res.err, "");
    return pm_check_result();
}

/* A candidate the process loaded itself (libroctx64.so.4 by SONAME) is used
 * before the first candidate is loaded from the library path. */
static int case_noload_first(void)
{
    run r;
    env_base(&r);
    env_add(&r, "PHASEMARK", "roctx");
    env_add(&r, "LD_LIBRARY_PATH", SDK_DIR);
    run_probe(&r, "private", PRIVATE_PATH, "100");
    CHECK_LINE(r.res.out, "backend=roctx");
    CHECK_LINE(r.res.out, "private: push=700 pop=700 rejected=0 underflow=0");
    CHECK_NO_SUBSTR(r.res.out, "sdk: push=");
    CHECK_NO_SUBSTR(r.res.out, "librocprofiler-sdk-roctx.so.1");
    CHECK_STR_EQ(r.res.err, "");
    return pm_check_result();
}

/* Markers on, every kind on 8 threads: not one GPU wait or timing call,
 * whether looked up globally or by loading a runtime. */
static int case_no_gpu_sync(void)
{
    run r;
    char v[2048];
    env_base(&r);
    env_add(&r, "PHASEMARK", "1");
    env_add(&r, "LD_LIBRARY_PATH", GPUSYNC_DIR ":" FALLBACK_DIR);
    snprintf(v, sizeof v, "%s%s%s:%s", SANITIZER_PRELOAD, SANITIZER_PRELOAD[0] ? ":" : "",
             GPUSYNC_PATH, INTERPOSER_PATH);
    env_add(&r, "LD_PRELOAD", v);
    run_probe(&r, "threads", "8", "1000");
    CHECK_LINE(r.res.out, "backend=roctx");
    CHECK_LINE(r.res.out, "interposer: push=56008 pop=56008 rejected=0 underflow=0");
    CHECK_LINE(r.res.out, "gpusync: calls=0");
    /* Only the preloaded copy is mapped: no runtime was loaded by name. */
    CHECK_NO_SUBSTR(r.res.out, "/libamdhip64.so");
    CHECK_NO_SUBSTR(r.res.out, "/libcudart.so");
    CHECK_STR_EQ(r.res.err, "");
    return pm_check_result();
}

/* ---- i) fork ------------------------------------------------------------ */

static int case_fork(int on)
{
    run r;
    env_base(&r);
    env_add(&r, "PHASEMARK", on ? "1" : "0");
    env_add(&r, "FAKE_TRACE_GETENV", "1");
    preload_interposer(&r);
    run_probe(&r, "fork_keep", NULL, NULL);
    CHECK_LINE(r.res.out, "child_status=0");
    /* One read of PHASEMARK in the whole run, by the probe before it
     * forked; none by its child. */
    const char *pp = strstr(r.res.out, "parent_pid=");
    long parent_pid = pp ? strtol(pp + strlen("parent_pid="), NULL, 10) : -1;
    char parent_read[64];
    snprintf(parent_read, sizeof parent_read, "getenv PHASEMARK pid=%ld", parent_pid);
    CHECK_LINE(r.res.out, parent_read);
    CHECK_INT_EQ(count_substr(r.res.out, "getenv PHASEMARK"), 1);
    if (on) {
        CHECK_LINE(r.res.out, "child_enabled=1");
        CHECK_LINE(r.res.out, "child_backend=roctx");
        CHECK_LINE(r.res.out, "child_live=100");
    } else {
        CHECK_LINE(r.res.out, "child_enabled=0");
        CHECK_LINE(r.res.out, "child_backend=off");
        CHECK_LINE(r.res.out, "child_live=0");
    }
    CHECK_STR_EQ(r.res.err, "");
    return pm_check_result();
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_mark_env <case>\n");
        return 2;
    }
    const char *c = argv[1];
    static const struct { const char *name; const char *value; } off[] = {
        {"disabled_unset", NULL}, {"disabled_empty", ""}, {"disabled_0", "0"},
        {"disabled_false", "false"}, {"disabled_FALSE", "FALSE"},
        {"disabled_no", "no"}, {"disabled_off", "off"}};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if (!strcmp(c, off[i].name))
            return case_disabled(off[i].value);
    if (!strcmp(c, "diag_invalid"))
        return case_diag("maybe", "phasemark: PHASEMARK=\"maybe\" is not one of");
    if (!strcmp(c, "diag_unresolved_auto"))
        return case_diag("1", "phasemark: markers enabled but no backend resolved (roctx:");
    if (!strcmp(c, "diag_unresolved_nvtx"))
        return case_diag("nvtx", "phasemark: markers enabled but no backend resolved (nvtx:");
    if (!strcmp(c, "interposer"))
        return case_interposer("calls");
    if (!strcmp(c, "interposer_old_lookup"))
        return case_interposer("old");
    if (!strcmp(c, "old_lookup_misroutes"))
        return case_old_misroutes();
    if (!strcmp(c, "fallback_only"))
        return case_fallback_only();
    if (!strcmp(c, "incomplete"))
        return case_incomplete(0);
    if (!strcmp(c, "incomplete_then_next"))
        return case_incomplete(1);
    if (!strcmp(c, "balance_scoped"))
        return case_balance("scoped", NULL);
    if (!strcmp(c, "balance_rejected"))
        return case_balance("scoped", "3");
    if (!strcmp(c, "balance_threads"))
        return case_balance("threads", NULL);
    if (!strcmp(c, "balance_threads_rejected"))
        return case_balance("threads", "7");
    if (!strcmp(c, "texts"))
        return case_texts();
    if (!strncmp(c, "nvtx_", 5))
        return case_nvtx(c);
    if (!strcmp(c, "fork_on"))
        return case_fork(1);
    if (!strcmp(c, "fork_off"))
        return case_fork(0);
    if (!strncmp(c, "seed_", 5))
        return case_seed(c);
    if (!strcmp(c, "enable_bypass"))
        return case_enable(1);
    if (!strcmp(c, "enable_off"))
        return case_enable(0);
    if (!strcmp(c, "late"))
        return case_late();
    if (!strcmp(c, "push_only_preload"))
        return case_push_only();
    if (!strcmp(c, "noload_first"))
        return case_noload_first();
    if (!strcmp(c, "no_gpu_sync"))
        return case_no_gpu_sync();
    fprintf(stderr, "test_mark_env: unknown case %s\n", c);
    return 2;
}
