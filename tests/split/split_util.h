/* split_util.h — helpers for the layer-split tests: shard daemons started
 * by the test itself (pm-shardd --listen with a readiness pipe), a scripted
 * request that records every token and logit, and a count of this
 * process's children (no daemon may outlive its session).
 */
#ifndef PM_SPLIT_UTIL_H
#define PM_SPLIT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "phasemark/engine.h"

/* A daemon the test started. */
typedef struct su_daemon {
    pid_t pid;
    char address[320]; /* as it announced it ("unix:...", "tcp:127.0.0.1:P") */
} su_daemon;

/* Starts pm-shardd over model for layers first..last as shard `shard`,
 * listening on listen ("unix:PATH", "tcp::0"), and waits for its ready
 * line. The daemon runs su_daemon_threads worker threads (1 unless set).
 * 0, or -1 with a message on stderr. */
int su_daemon_start(su_daemon *d, const char *model, int first, int last, int shard,
                    const char *listen);

/* As su_daemon_start, with extra options appended to the daemon's command
 * line (extra: a NULL-terminated list, or NULL). */
int su_daemon_start_with(su_daemon *d, const char *model, int first, int last, int shard,
                         const char *listen, const char *const *extra);

/* Worker threads of the daemons su_daemon_start starts (a benchmark sets
 * it to the engine's count; tests keep 1). */
extern int su_daemon_threads;

/* Sends sig and reaps the daemon (SIGKILL after 5 s when sig was ignored). */
void su_daemon_stop(su_daemon *d, int sig);

/* Children of this process still alive (zombies included). */
int su_count_children(void);

/* What one scripted request produced: every sampled token and every logit
 * row the session handed out, in order. */
typedef struct su_record {
    int32_t tokens[256];
    size_t n_tokens;
    float *logits;  /* [n_logits] (owned) */
    size_t n_logits, cap;
    char err[512];  /* the first failure, "" when none */
} su_record;

void su_record_free(su_record *r);

/* The script, greedy throughout, on a session of n_batch >= 8: prefill 11
 * ids in chunks of 4; 6 decode steps; a verify of 4 ids; truncate so that
 * 2 of them stay; 2 more decode steps; reset; prefill 5 ids; 2 decode
 * steps. Returns 0, or the first failing status (r->err says why). */
int su_run_script(llm_session *s, int32_t n_vocab, su_record *r);

/* The script's range counts per kind and mode, for shard count n_shards:
 * prefill 3+1 forwards, decode 6+2+2, one verify (plus the one pm.spec_decode
 * the script pushes around it). */
#define SU_PREFILLS 4
#define SU_DECODES 10
#define SU_VERIFIES 1

/* Largest |a - b| over n floats, and whether the token lists agree. */
double su_max_diff(const su_record *a, const su_record *b);
int su_same_tokens(const su_record *a, const su_record *b);

#endif
