/* test_engine_threads — sessions over one model on different threads.
 *
 * engine.h promises that a model may be shared by sessions on different
 * threads (their forwards serialize on the model's backend). Four threads
 * each run their own prompt through their own session at the same time,
 * twice over; every thread's greedy tokens and final logits must equal the
 * same work done alone beforehand, bit for bit (the computation per
 * session is deterministic whatever interleaving the lock produced).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phasemark/engine.h"
#include "pm_check.h"
#include "synth.h"

#define N_THREADS 4
#define N_GEN 12
#define V 160

typedef struct job {
    llm_model *m;
    int seed;
    int32_t toks[N_GEN];
    float last[V];
    int rc;
} job;

static int32_t argmax(const float *x)
{
    int32_t b = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static void *run(void *arg)
{
    job *j = arg;
    llm_session_options o = LLM_SESSION_OPTIONS_INIT;
    o.n_ctx = 64;
    o.n_batch = 16;
    o.request = (uint64_t)j->seed;
    llm_session *s;
    char err[128];
    j->rc = llm_session_create(j->m, &o, &s, err, sizeof err);
    if (j->rc)
        return NULL;
    int32_t prompt[9];
    for (int i = 0; i < 9; i++)
        prompt[i] = (j->seed * 17 + i * 29) % V;
    const float *lg;
    j->rc = llm_prefill(s, prompt, 9, 4, &lg);
    for (int i = 0; i < N_GEN && j->rc == 0; i++) {
        j->toks[i] = argmax(lg);
        j->rc = llm_decode(s, j->toks[i], &lg);
    }
    if (j->rc == 0)
        memcpy(j->last, lg, sizeof j->last);
    llm_session_free(s);
    return NULL;
}

int main(void)
{
    synth_spec sp = synth_default();
    char path[512];
    synth_path(path, sizeof path, "threads");
    REQUIRE(synth_write(path, &sp) == 0);
    llm_model *m = synth_open(path, 2);
    static job alone[N_THREADS], together[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        alone[i] = (job){.m = m, .seed = i + 1};
        run(&alone[i]);
        CHECK_INT_EQ(alone[i].rc, 0);
    }
    for (int round = 0; round < 2; round++) {
        pthread_t th[N_THREADS];
        for (int i = 0; i < N_THREADS; i++) {
            together[i] = (job){.m = m, .seed = i + 1};
            REQUIRE(pthread_create(&th[i], NULL, run, &together[i]) == 0);
        }
        for (int i = 0; i < N_THREADS; i++)
            REQUIRE(pthread_join(th[i], NULL) == 0);
        for (int i = 0; i < N_THREADS; i++) {
            CHECK_INT_EQ(together[i].rc, 0);
            CHECK(memcmp(alone[i].toks, together[i].toks, sizeof alone[i].toks) == 0);
            CHECK(memcmp(alone[i].last, together[i].last, sizeof alone[i].last) == 0);
        }
    }
    llm_model_free(m);
    unlink(path);
    return pm_check_result();
}
