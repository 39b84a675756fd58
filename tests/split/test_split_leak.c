/* test_split_leak — an engine phase range must not outlive a failed
 * forward (docs/markers.md, promise 7: balanced through scope).
 *
 *   test_split_leak prefill_killed | decode_killed | refused
 *
 * Markers on (pm_enable(PM_MODE_ROCTX), so the spawned daemon inherits no
 * variable), ranges recorded in-process by tests/common/pm_roctx_log (this
 * executable exports roctxRangePushA/Pop). A session over a local first
 * shard and a spawned pm-shardd for the last one serves one request, then
 * a forward fails in the backend:
 *   prefill_killed  the daemon is killed, a prefill of two chunks fails in
 *                   its first;
 *   decode_killed   the same for a decode step;
 *   refused         the daemon is replaced by a fresh one that holds no
 *                   positions and refuses the continued request.
 * Each time exactly the failed forward's ranges were pushed (its phase
 * range and the local leaf, texts checked), every push was popped, the
 * depth is 0 and the thread's current phase is none again; then a reset
 * request succeeds with balanced ranges.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "phasemark/engine.h"
#include "phasemark/mark.h"
#include "pm_check.h"
#include "pm_roctx_log.h"
#include "session.h"
#include "split.h"
#include "synth.h"

static char g_model[512];

static const int32_t prompt[8] = {3, 1, 4, 1, 5, 9, 2, 6};

/* The recorded pushes since the last clear are exactly want[0..n), all
 * popped, at depth 0, with no phase left current. */
static void expect_balanced(const char *const *want, int n, const char *what)
{
    CHECK_INT_EQ(pm_roctx.n_push, n);
    CHECK_INT_EQ(pm_roctx.n_pop, n);
    CHECK_INT_EQ(pm_roctx.depth, 0);
    CHECK_INT_EQ(pm_current_phase(), PM_PHASE_NONE);
    for (int i = 0; i < n && i < pm_roctx.n_push; i++) {
        if (strcmp(pm_roctx.texts[i], want[i]) != 0)
            fprintf(stderr, "%s: push %d\n", what, i);
        CHECK_STR_EQ(pm_roctx.texts[i], want[i]);
    }
}

/* Kills the spawned daemon of shard 1 and waits until it is gone, so the
 * next forward meets a dead peer (the engine reaps it). */
static void kill_shard(llm_session *s)
{
    long pid = llm_split_shard_pid(llm_session_split(s), 1);
    REQUIRE(pid > 0);
    REQUIRE(kill((pid_t)pid, SIGKILL) == 0);
    for (int i = 0; i < 500 && kill((pid_t)pid, 0) == 0; i++) {
        /* A zombie still answers kill(pid, 0); /proc says when it died. */
        char path[64], st[256] = "";
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (f) {
            size_t got = fread(st, 1, sizeof st - 1, f);
            st[got] = '\0';
            fclose(f);
        }
        char *close_paren = strrchr(st, ')');
        if (close_paren && close_paren[1] == ' ' && close_paren[2] == 'Z')
            break;
        struct timespec nap = {0, 2 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
}

int main(int argc, char **argv)
{
    setvbuf(stderr, NULL, _IONBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (argc != 2)
        return 2;
    const char *c = argv[1];
    setenv("PHASEMARK_SHARDD", PM_SHARDD, 1);
    REQUIRE(pm_enable(PM_MODE_ROCTX) == PM_OK);
    REQUIRE(pm_enabled() == 1);

    synth_spec sp = synth_default();
    sp.hp.n_layers = 4;
    sp.hp.ctx = 128;
    synth_path(g_model, sizeof g_model, "leak");
    REQUIRE(synth_write(g_model, &sp) == 0);
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.n_threads = 1;
    llm_model *m;
    char err[512];
    REQUIRE(llm_model_open(g_model, &mo, &m, err, sizeof err) == 0);
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = 128;
    so.n_batch = 16;
    so.request = 7;
    so.placement = "0-1@local,2-3@spawn?transport=shared&timeout=20000";
    llm_session *s;
    REQUIRE(llm_session_create(m, &so, &s, err, sizeof err) == 0);

    const float *lg = NULL;
    REQUIRE(llm_prefill(s, prompt, 4, 4, &lg) == 0);
    pm_roctx_log_clear();

    if (strcmp(c, "prefill_killed") == 0) {
        kill_shard(s);
        CHECK_INT_EQ(llm_prefill(s, prompt + 4, 4, 2, &lg), LLM_EBACKEND);
        static const char *const want[] = {
            "pm.prefill mode=exact req=7 pos=4 tokens=2",
            "pm.layer_range mode=exact layers=0-1 shard=0 where=local backend=cpu req=7 tokens=2",
        };
        expect_balanced(want, 2, c);
    } else if (strcmp(c, "decode_killed") == 0) {
        kill_shard(s);
        CHECK_INT_EQ(llm_decode(s, 5, &lg), LLM_EBACKEND);
        static const char *const want[] = {
            "pm.decode mode=decode req=7 pos=4",
            "pm.layer_range mode=decode layers=0-1 shard=0 where=local backend=cpu req=7 tokens=1",
        };
        expect_balanced(want, 2, c);
    } else if (strcmp(c, "refused") == 0) {
        kill_shard(s);
        CHECK_INT_EQ(llm_decode(s, 5, &lg), LLM_EBACKEND); /* the dead daemon */
        pm_roctx_log_clear();
        /* A new daemon is spawned; it holds no positions and refuses. */
        CHECK_INT_EQ(llm_decode(s, 5, &lg), LLM_EBACKEND);
        CHECK(strstr(llm_session_error(s), "is past the 0 positions this shard holds") != NULL);
        static const char *const want[] = {
            "pm.decode mode=decode req=7 pos=4",
            "pm.layer_range mode=decode layers=0-1 shard=0 where=local backend=cpu req=7 tokens=1",
        };
        expect_balanced(want, 2, c);
    } else {
        fprintf(stderr, "usage: test_split_leak prefill_killed|decode_killed|refused\n");
        return 2;
    }

    /* Afterwards a fresh request runs with balanced ranges. */
    llm_session_reset(s);
    pm_roctx_log_clear();
    CHECK_INT_EQ(llm_prefill(s, prompt, 4, 4, &lg), 0);
    static const char *const again[] = {
        "pm.prefill mode=exact req=7 pos=0 tokens=4",
        "pm.layer_range mode=exact layers=0-1 shard=0 where=local backend=cpu req=7 tokens=4",
    };
    expect_balanced(again, 2, "after reset");
    llm_session_free(s);
    llm_model_free(m);
    unlink(g_model);
    CHECK(waitpid(-1, NULL, WNOHANG) == -1); /* no daemon left */
    return pm_check_result();
}
