/* capture_prog.c — a program with known ranges, run under `phasemark
 * capture` by test_capture.c. It writes the ids the test needs to check
 * Process_Id/Thread_Id (its pid and tids, its child's pid) to IDS_FILE.
 *
 * usage: capture_prog IDS_FILE basic|abort|exec|execchild|closefds|threads|clock
 *   basic: main thread: prefill{layer_range} decode decode; a worker
 *          thread: one generic range; a forked child: spec_decode{draft}.
 *   abort: a closed decode, then a prefill left open by abort().
 *   exec:  a decode, then a forked child that execs "execchild", which
 *          records one prefill in the new image.
 *   closefds: a decode, then every descriptor from 3 up is closed and
 *          a file takes the lowest number (as daemons do); a second
 *          decode; the file must not receive recorder data.
 *   threads: 4 threads x 20000 decode ranges each (several buffer flushes
 *          per thread, and the flush at thread exit).
 *   clock: decode ranges bracketed by CLOCK_BOOTTIME readings, written to
 *          IDS_FILE.clock as "REQ POS BEFORE MIDDLE AFTER" (before the
 *          push, between push and pop, after the pop): req 7 on the main
 *          thread (CLOCK_MAIN ranges, several buffer flushes), req 8 on a
 *          worker and req 9 in a forked child (CLOCK_OTHER each). Now and
 *          then a range, or the gap before one, sleeps 2 ms, so the
 *          recorder's periodic calibration points fall inside ranges and
 *          between them.
 *   seed:  the seed server's names (pm_configure: DFLASH_DS4_ROCTX,
 *          prefix ds4): request 1's prefill whose second layer span runs
 *          in a forked "shard" process, a decode step, a speculative
 *          round (draft, verify span), then one batched decode forward of
 *          requests 1 and 2 whose span also runs in a forked shard.
 */
#define _GNU_SOURCE
#include <phasemark/mark.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static FILE *g_ids;

static void *worker(void *arg)
{
    (void)arg;
    fprintf(g_ids, "worker %d\n", (int)gettid());
    pm_range r = pm_range_push("worker step");
    pm_range_pop(&r);
    return NULL;
}

static void prefill_with_layers(void)
{
    pm_range p = pm_prefill_push(1, 0, 4);
    pm_layer_attr a = PM_LAYER_ATTR_INIT;
    a.first_layer = 0;
    a.last_layer = 3;
    a.backend = "cpu";
    a.req = 1;
    a.tokens = 4;
    pm_range l = pm_layer_range_push(&a);
    pm_range_pop(&l);
    pm_range_pop(&p);
}

static int basic(void)
{
    prefill_with_layers();
    for (uint32_t pos = 4; pos < 6; pos++) {
        pm_range d = pm_decode_push(1, pos);
        pm_range_pop(&d);
    }
    pthread_t th;
    if (pthread_create(&th, NULL, worker, NULL) != 0)
        return 1;
    pthread_join(th, NULL);
    fflush(g_ids);
    pid_t pid = fork();
    if (pid == 0) {
        pm_range s = pm_spec_decode_push(2, 2);
        pm_range d = pm_draft_push(2, 2);
        pm_range_pop(&d);
        pm_range_pop(&s);
        exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    fprintf(g_ids, "child %d\n", (int)pid);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

static int crash(void)
{
    pm_range d = pm_decode_push(1, 7);
    pm_range_pop(&d);
    pm_range p = pm_prefill_push(1, 0, 8);
    (void)p;
    fclose(g_ids);
    abort();
}

static int exec_child(const char *self, const char *ids)
{
    pm_range d = pm_decode_push(3, 1);
    pm_range_pop(&d);
    fflush(g_ids);
    pid_t pid = fork();
    if (pid == 0) {
        execl(self, self, ids, "execchild", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    fprintf(g_ids, "child %d\n", (int)pid);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

static int close_fds(const char *ids)
{
    char path[512];
    snprintf(path, sizeof path, "%s.victim", ids);
    pm_range d = pm_decode_push(5, 1);
    pm_range_pop(&d);
    fclose(g_ids);
    g_ids = NULL;
    for (int fd = 3; fd < 4096; fd++)
        close(fd);
    FILE *victim = fopen(path, "w");
    if (!victim)
        return 1;
    for (uint32_t pos = 2; pos < 3000; pos++) { /* enough to fill a buffer */
        pm_range e = pm_decode_push(5, pos);
        pm_range_pop(&e);
    }
    fputs("victim\n", victim);
    return fclose(victim) != 0;
}

#define STRESS_THREADS 4
#define STRESS_PAIRS 20000

static void *stress(void *arg)
{
    uint64_t req = (uint64_t)(uintptr_t)arg;
    for (uint32_t pos = 0; pos < STRESS_PAIRS; pos++) {
        pm_range d = pm_decode_push(req, pos);
        pm_range_pop(&d);
    }
    return NULL;
}

static int threads(void)
{
    pthread_t th[STRESS_THREADS];
    for (uintptr_t i = 0; i < STRESS_THREADS; i++)
        if (pthread_create(&th[i], NULL, stress, (void *)(i + 10)) != 0)
            return 1;
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_join(th[i], NULL);
    return 0;
}

#define CLOCK_MAIN 80000
#define CLOCK_OTHER 3000
#define CLOCK_NAP_EVERY 2000

typedef struct reading {
    uint64_t before, middle, after;
} reading;

static reading g_main_readings[CLOCK_MAIN], g_other_readings[CLOCK_OTHER];
static const char *g_clock_path;

static uint64_t boottime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void nap_2ms(void)
{
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
}

static void clock_ranges(uint64_t req, uint32_t n, reading *out)
{
    for (uint32_t pos = 0; pos < n; pos++) {
        if (pos % CLOCK_NAP_EVERY == CLOCK_NAP_EVERY / 2)
            nap_2ms();
        out[pos].before = boottime_ns();
        pm_range d = pm_decode_push(req, pos);
        out[pos].middle = boottime_ns();
        if (pos % CLOCK_NAP_EVERY == 0)
            nap_2ms();
        pm_range_pop(&d);
        out[pos].after = boottime_ns();
    }
}

/* Appends the readings; several processes append in turn. */
static int write_readings(uint64_t req, uint32_t n, const reading *r)
{
    FILE *f = fopen(g_clock_path, "a");
    if (!f)
        return 1;
    for (uint32_t i = 0; i < n; i++)
        fprintf(f, "%llu %u %llu %llu %llu\n", (unsigned long long)req, i,
                (unsigned long long)r[i].before, (unsigned long long)r[i].middle,
                (unsigned long long)r[i].after);
    return fclose(f) != 0;
}

static void *clock_worker(void *arg)
{
    (void)arg;
    clock_ranges(8, CLOCK_OTHER, g_other_readings);
    return NULL;
}

static int clock_test(const char *ids)
{
    static char path[512];
    snprintf(path, sizeof path, "%s.clock", ids);
    g_clock_path = path;
    clock_ranges(7, CLOCK_MAIN, g_main_readings);
    pthread_t th;
    if (pthread_create(&th, NULL, clock_worker, NULL) != 0)
        return 1;
    pthread_join(th, NULL);
    if (write_readings(8, CLOCK_OTHER, g_other_readings) != 0)
        return 1;
    fflush(g_ids);
    pid_t pid = fork();
    if (pid == 0) {
        clock_ranges(9, CLOCK_OTHER, g_other_readings);
        exit(write_readings(9, CLOCK_OTHER, g_other_readings));
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 1;
    return write_readings(7, CLOCK_MAIN, g_main_readings);
}

#ifndef PHASEMARK_DISABLED
static void span(pm_phase phase, int first, int last, int shard, uint64_t req, uint64_t batch,
                 uint32_t tokens)
{
    pm_layer_attr a = PM_LAYER_ATTR_INIT;
    a.phase = phase;
    a.first_layer = first;
    a.last_layer = last;
    a.shard = shard;
    a.where = shard ? PM_WHERE_REMOTE : PM_WHERE_LOCAL;
    a.backend = "cpu";
    a.req = req;
    a.batch = batch;
    a.tokens = tokens;
    pm_range r = pm_layer_range_push(&a);
    pm_range_pop(&r);
}

/* The second span in another process, as a shard daemon would run it,
 * while the caller's phase range stays open. */
static int remote_span(pm_phase phase, uint64_t req, uint64_t batch, uint32_t tokens)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        span(phase, 2, 3, 1, req, batch, tokens);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

static int seed(void)
{
    pm_config c = PM_CONFIG_INIT;
    c.env_name = "DFLASH_DS4_ROCTX";
    c.prefix = "ds4";
    if (pm_configure(&c) != PM_OK)
        return 1;
    int rc = 0;
    pm_range p = pm_prefill_push(1, 0, 5);
    span(PM_PHASE_NONE, 0, 1, 0, 1, 0, 5);
    rc |= remote_span(PM_PHASE_EXACT, 1, 0, 5);
    pm_range_pop(&p);
    pm_range d = pm_decode_push(1, 5);
    span(PM_PHASE_NONE, 0, 3, 0, 1, 0, 1);
    pm_range_pop(&d);
    pm_range s = pm_spec_decode_push(1, 2);
    pm_range dr = pm_draft_push(1, 2);
    pm_range_pop(&dr);
    span(PM_PHASE_VERIFY, 0, 3, 0, 1, 0, 3);
    pm_range_pop(&s);
    static const pm_batch_req both[] = {{1, 1}, {2, 1}};
    pm_range b = pm_batch_push(1, PM_PHASE_DECODE, both, 2);
    span(PM_PHASE_NONE, 0, 1, 0, 0, 1, 2);
    rc |= remote_span(PM_PHASE_DECODE, 0, 1, 2);
    pm_range_pop(&b);
    return rc;
}
#endif

int main(int argc, char **argv)
{
#ifdef PHASEMARK_DISABLED
    (void)argc;
    (void)argv;
    fprintf(stderr, "markers compiled out (PHASEMARK_MARKERS=OFF)\n");
    return 77;
#else
    if (argc != 3)
        return 2;
    if (strcmp(argv[2], "execchild") == 0) {
        pm_range p = pm_prefill_push(4, 0, 2);
        pm_range_pop(&p);
        return 0;
    }
    g_ids = fopen(argv[1], "w");
    if (!g_ids)
        return 2;
    fprintf(g_ids, "main %d %d\n", (int)getpid(), (int)gettid());
    int rc = 2;
    if (strcmp(argv[2], "basic") == 0)
        rc = basic();
    else if (strcmp(argv[2], "abort") == 0)
        rc = crash();
    else if (strcmp(argv[2], "exec") == 0)
        rc = exec_child(argv[0], argv[1]);
    else if (strcmp(argv[2], "threads") == 0)
        rc = threads();
    else if (strcmp(argv[2], "clock") == 0)
        rc = clock_test(argv[1]);
    else if (strcmp(argv[2], "closefds") == 0)
        return close_fds(argv[1]);
    else if (strcmp(argv[2], "seed") == 0)
        rc = seed();
    fclose(g_ids);
    return rc;
#endif
}
