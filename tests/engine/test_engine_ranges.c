/* test_engine_ranges — the exact ranges a request shape produces.
 *
 * This executable links the in-executable ROCTX recorder
 * (tests/common/pm_roctx_log.h) with exported symbols, so with
 * PHASEMARK=roctx the marker layer's process-global lookup (DESIGN.md §1.4)
 * finds it: a recorder with no preload. Request shape: prompt 11 tokens in chunks of 4, 3 decode steps,
 * one verify of 3 tokens; a monolithic 2-layer model. Expected, in order:
 *   3 x (pm.prefill + one leaf layer_range mode=exact)
 *   3 x (pm.decode + one leaf layer_range mode=decode)
 *   1 x leaf layer_range mode=verify (the caller holds no phase range)
 * = 13 pushes and 13 pops, balanced, leaves at depth 1 under their phase.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phasemark/engine.h"
#include "phasemark/mark.h"
#include "pm_check.h"
#include "pm_roctx_log.h"
#include "synth.h"


int main(void)
{
    if (setenv("PHASEMARK", "roctx", 1) != 0)
        return 1;
    REQUIRE(pm_enabled() == 1);
    CHECK_STR_EQ(pm_backend_name(), "roctx");

    synth_spec sp = synth_default();
    char path[512];
    synth_path(path, sizeof path, "ranges");
    REQUIRE(synth_write(path, &sp) == 0);
    llm_model *m = synth_open(path, 2);
    llm_session *s = synth_session(m, 64, 16, 7);
    int32_t prompt[11];
    for (int i = 0; i < 11; i++)
        prompt[i] = i + 3;
    const float *lg;
    CHECK_INT_EQ(llm_prefill(s, prompt, 11, 4, &lg), 0);
    for (int i = 0; i < 3; i++)
        CHECK_INT_EQ(llm_decode(s, 20 + i, &lg), 0);
    int32_t draft[3] = {1, 2, 3};
    CHECK_INT_EQ(llm_verify(s, draft, 3, &lg), 0);

    static const char *const want[] = {
        "pm.prefill mode=exact req=7 pos=0 tokens=4",
        "pm.layer_range mode=exact layers=0-1 shard=0 where=local backend=cpu req=7 tokens=4",
        "pm.prefill mode=exact req=7 pos=4 tokens=4",
        "pm.layer_range mode=exact layers=0-1 shard=0 where=local backend=cpu req=7 tokens=4",
        "pm.prefill mode=exact req=7 pos=8 tokens=3",
        "pm.layer_range mode=exact layers=0-1 shard=0 where=local backend=cpu req=7 tokens=3",
        "pm.decode mode=decode req=7 pos=11",
        "pm.layer_range mode=decode layers=0-1 shard=0 where=local backend=cpu req=7 tokens=1",
        "pm.decode mode=decode req=7 pos=12",
        "pm.layer_range mode=decode layers=0-1 shard=0 where=local backend=cpu req=7 tokens=1",
        "pm.decode mode=decode req=7 pos=13",
        "pm.layer_range mode=decode layers=0-1 shard=0 where=local backend=cpu req=7 tokens=1",
        "pm.layer_range mode=verify layers=0-1 shard=0 where=local backend=cpu req=7 tokens=3",
    };
    static const int want_depth[] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
    int n_want = (int)(sizeof want / sizeof want[0]);
    CHECK_INT_EQ(pm_roctx.n_push, n_want);
    CHECK_INT_EQ(pm_roctx.n_pop, n_want);
    CHECK_INT_EQ(pm_roctx.depth, 0);
    for (int i = 0; i < n_want && i < pm_roctx.n_push; i++) {
        CHECK_STR_EQ(pm_roctx.texts[i], want[i]);
        CHECK_INT_EQ(pm_roctx.depths[i], want_depth[i]);
    }

    /* A failed call emits nothing. */
    int before = pm_roctx.n_push;
    int32_t bad = 100000;
    CHECK_INT_EQ(llm_decode(s, bad, &lg), LLM_ETOKEN);
    CHECK_INT_EQ(pm_roctx.n_push, before);

    llm_session_free(s);
    llm_model_free(m);
    unlink(path);
    return pm_check_result();
}
