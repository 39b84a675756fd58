/* recorder.h — internal interface of the preloaded range recorder.
 *
 * The front ends (roctx.c, nvtx.c) turn profiler API calls into events;
 * recorder.c owns the per-thread buffers, the output file, the flushes at
 * exit, on fatal signals, at exec and across fork. Every function here may
 * be called from any thread; the record functions take no lock and
 * allocate nothing except on a thread's first event.
 */
#ifndef PM_RECORDER_H
#define PM_RECORDER_H

#include <stddef.h>
#include <stdint.h>

/* Begins a push/pop range on the calling thread. Returns the nesting depth
 * before the push (0 for an outermost range). */
int pm__rec_push(unsigned domain, const char *name);

/* Ends the innermost range of the calling thread. Returns the depth after
 * the pop (the level of the range popped), or -1 when nothing was open. */
int pm__rec_pop(unsigned domain);

/* An instantaneous mark. */
void pm__rec_mark(unsigned domain, const char *name);

/* A start/stop range, which may end on another thread. Returns its id. */
uint64_t pm__rec_start(unsigned domain, const char *name);
void pm__rec_stop(unsigned domain, uint64_t id);

/* Records the name of an NVTX domain id (PMR_DOMAIN_FIRST_USER..). */
void pm__rec_domain_name(unsigned domain, const char *name);

/* Writes every thread's buffered events to the file. Safe before exec and
 * _exit; not async-signal-safe (the signal path has its own). */
void pm__rec_flush_all(void);

/* The environment variable naming the raw output directory; without it the
 * recorder keeps depths but records nothing. */
#define PM_REC_DIR_ENV "PHASEMARK_CAPTURE_DIR"

#endif
