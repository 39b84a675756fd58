/* recorder.c — per-thread event buffers and the raw output file.
 *
 * Each thread that records gets one buffer (mmapped once, reused after the
 * thread exits) and appends events to it with no lock: the owner writes
 * past `committed`, then publishes the event with a release store. Anyone
 * may flush the published bytes [flushed, committed) under the buffer's
 * flush lock, which the owner takes only when its buffer is full. So the
 * exit handler, exec and fatal-signal handlers can write out what other
 * threads recorded while those threads keep running.
 *
 * Invariants: a buffer's bytes below `committed` are whole events; only
 * the owner advances `committed` or resets it (under the lock); a chunk on
 * disk is one writev() of one thread's events, so chunks never interleave
 * mid-event (O_APPEND on a regular file), and a thread's chunks reach the
 * file in the order of its events (each is written under the buffer's
 * lock), which the stream encoding relies on (pmraw.h: timestamps and
 * names are stored as differences from the thread's previous event).
 *
 * The owner also keeps the state of its stream: the last tick (the base
 * of the next delta), the tick of the last calibration point and the last
 * name. A stream starts with a calibration point when a thread attaches
 * and again in a forked child, whose file starts empty.
 *
 * What can be lost: events a thread was in the middle of recording when the
 * process died; on a fatal signal, the buffer of a thread that was itself
 * flushing at that moment (the handler cannot wait for its lock); events
 * of a process killed by SIGKILL or one whose own signal handler calls
 * _exit without returning; events recorded after the exit flush.
 */
#define _GNU_SOURCE
#include "recorder.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "pmraw.h"

/* Per thread: stays in L2; at 7-11 bytes per decode pair, a write per
 * 24000-37000 pairs. */
#define PMR_BUF_BYTES (1u << 18)
/* Room an event needs besides its name: tag, domain byte, delta, range id,
 * name prefix and suffix length. */
#define PMR_EVENT_FIXED_MAX (2u + 2u * PMR_VARINT_MAX + 2u * 2u)
#define PMR_CAL_BYTES 17u /* tag, tsc, ns */

typedef struct pmr_tbuf {
    _Atomic uint32_t committed; /* bytes of whole, published events */
    uint32_t flushed;           /* bytes already written; under lock */
    atomic_flag lock;           /* flush lock */
    _Atomic int in_use;         /* 1 while a live thread owns it */
    uint32_t tid;
    int depth;     /* open push ranges of the owner */
    int inherited; /* ranges open at fork: the parent records them */
    uint64_t last_tick; /* owner: the stream's timestamp base */
    uint64_t cal_tick;  /* owner: tick of the stream's last PMR_CAL */
    uint32_t name_len;  /* owner: bytes of `name`, the stream's last name */
    struct pmr_tbuf *next; /* registry link; written once before publish */
    char name[PMR_NAME_MAX];
    unsigned char data[PMR_BUF_BYTES];
} pmr_tbuf;

/* Process-wide state the contract needs: the registry of buffers (so exit
 * and signal paths can reach every thread's events) and the output file. */
static _Atomic(pmr_tbuf *) g_threads;
static _Atomic int g_fd = -1;
static _Atomic uint64_t g_range_id = 1;
static uint32_t g_clock;           /* enum pmr_clock; set once at init */
static uint64_t g_cal_every = UINT64_MAX; /* ticks between PMR_CAL events */
static char g_dir[PATH_MAX - 64];
/* This image's file, to notice when the program closed our descriptor
 * (daemons close every fd) and reopen it rather than write into whatever
 * file took the number. Written when the file is opened: at init, or in
 * the fork child before it runs anything else. */
static char g_path[PATH_MAX];
static dev_t g_dev;
static ino_t g_ino;
#define PMR_FD_MIN 500 /* keep our descriptor away from the low numbers */
static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static struct sigaction g_old_action[NSIG];
/* NVTX domain names by id, kept so a forked child's file names them too. */
#define PMR_DOMAIN_NAME_MAX 64
static char g_domain_names[256][PMR_DOMAIN_NAME_MAX];
/* This boot's id (all zero when unreadable); read once at init. */
static uint8_t g_boot_id[16];
static void read_boot_id(uint8_t out[16]);

static __thread pmr_tbuf *t_buf __attribute__((tls_model("initial-exec")));

static const int g_fatal_signals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL,
                                      SIGTERM, SIGINT, SIGQUIT, SIGHUP};

/* Appends the decimal digits of v at p (async-signal-safe); returns the
 * new end. */
static char *put_u64(char *p, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static void write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        p += n;
        len -= (size_t)n;
    }
}

/* The name of thread tid from /proc (async-signal-safe), NUL-padded. */
static void task_comm(uint32_t tid, char out[16])
{
    char path[64] = "/proc/self/task/";
    char *p = put_u64(path + strlen(path), tid);
    memcpy(p, "/comm", 6);
    memset(out, 0, 16);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, out, 15);
    close(fd);
    for (ssize_t i = 0; i < n; i++)
        if (out[i] == '\n')
            out[i] = 0;
}

/* Opens this image's file and writes its header. Async-signal-safe, so the
 * fork child handler can call it. */
static int open_file(void)
{
    char path[PATH_MAX];
    size_t dl = strlen(g_dir);
    uint64_t start = pm__boottime_ns();
    for (int attempt = 0; attempt < 8; attempt++) {
        memcpy(path, g_dir, dl);
        char *p = path + dl;
        *p++ = '/';
        p = put_u64(p, (uint64_t)getpid());
        *p++ = '.';
        p = put_u64(p, start + (uint64_t)attempt);
        memcpy(p, ".pmraw", 7);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST)
            continue;
        if (fd < 0)
            return -1;
        int high = fcntl(fd, F_DUPFD_CLOEXEC, PMR_FD_MIN);
        if (high >= 0) {
            close(fd);
            fd = high;
        }
        struct stat st;
        if (fstat(fd, &st) == 0) {
            g_dev = st.st_dev;
            g_ino = st.st_ino;
        }
        memcpy(g_path, path, strlen(path) + 1);
        pmr_file_hdr h;
        memset(&h, 0, sizeof h);
        memcpy(h.magic, PMR_FILE_MAGIC, 8);
        h.pid = (uint32_t)getpid();
        h.ppid = (uint32_t)getppid();
        h.start_ns = start;
        h.clock = g_clock;
        memcpy(h.boot_id, g_boot_id, sizeof h.boot_id);
        prctl(PR_GET_NAME, h.comm, 0, 0, 0);
        write_all(fd, &h, sizeof h);
        return fd;
    }
    return -1;
}

/* The output descriptor, reopened (append) when the program closed ours
 * and the number now names another file. Async-signal-safe. */
static int output_fd(void)
{
    int fd = atomic_load_explicit(&g_fd, memory_order_relaxed);
    struct stat st;
    if (fd < 0 || (fstat(fd, &st) == 0 && st.st_dev == g_dev && st.st_ino == g_ino))
        return fd;
    int nfd = open(g_path, O_WRONLY | O_APPEND | O_CLOEXEC);
    int high = nfd >= 0 ? fcntl(nfd, F_DUPFD_CLOEXEC, PMR_FD_MIN) : -1;
    if (high >= 0) {
        close(nfd);
        nfd = high;
    }
    /* The old number is not ours any more: never close it. */
    if (nfd >= 0 && !atomic_compare_exchange_strong(&g_fd, &fd, nfd)) {
        close(nfd);
        nfd = atomic_load(&g_fd);
    }
    return nfd;
}

/* Writes [flushed, committed) of t as one chunk. The caller holds t's lock.
 * name_mode: 0 = owner (prctl), 1 = another thread (/proc). */
static void write_chunk(pmr_tbuf *t, int name_mode)
{
    uint32_t c = atomic_load_explicit(&t->committed, memory_order_acquire);
    int fd = c > t->flushed ? output_fd() : -1;
    if (c <= t->flushed || fd < 0) {
        t->flushed = c;
        return;
    }
    pmr_chunk_hdr h;
    memset(&h, 0, sizeof h);
    h.magic = PMR_CHUNK_MAGIC;
    h.tid = t->tid;
    h.bytes = c - t->flushed;
    /* Taken after `committed` was read, so after every event of the chunk
     * was stamped: the point closes the chunk's interval. */
    pmr_cal cal = pm__clock_calibrate();
    h.cal_tsc = cal.tsc;
    h.cal_ns = cal.ns;
    if (name_mode == 0)
        prctl(PR_GET_NAME, h.thread_name, 0, 0, 0);
    else
        task_comm(t->tid, h.thread_name);
    struct iovec iov[2] = {{&h, sizeof h}, {t->data + t->flushed, h.bytes}};
    ssize_t want = (ssize_t)(sizeof h + h.bytes);
    ssize_t n;
    do
        n = writev(fd, iov, 2);
    while (n < 0 && errno == EINTR);
    (void)want; /* a short write on a full disk loses the tail; documented */
    t->flushed = c;
}

static void lock_buf(pmr_tbuf *t)
{
    while (atomic_flag_test_and_set_explicit(&t->lock, memory_order_acquire))
        sched_yield();
}

static void unlock_buf(pmr_tbuf *t)
{
    atomic_flag_clear_explicit(&t->lock, memory_order_release);
}

/* The owner's flush when its buffer is full: write and start over. */
static void flush_own(pmr_tbuf *t)
{
    lock_buf(t);
    write_chunk(t, 0);
    t->flushed = 0;
    atomic_store_explicit(&t->committed, 0, memory_order_release);
    unlock_buf(t);
}

void pm__rec_flush_all(void)
{
    for (pmr_tbuf *t = atomic_load(&g_threads); t; t = t->next) {
        if (!atomic_load(&t->in_use))
            continue;
        lock_buf(t);
        write_chunk(t, t == t_buf ? 0 : 1);
        unlock_buf(t);
    }
}

/* Fatal-signal path: only async-signal-safe calls, and never wait for a
 * lock (the interrupted thread may hold it). */
static void on_fatal(int sig, siginfo_t *info, void *uctx)
{
    (void)info;
    (void)uctx;
    int saved = errno;
    for (pmr_tbuf *t = atomic_load(&g_threads); t; t = t->next) {
        if (!atomic_load(&t->in_use))
            continue;
        if (atomic_flag_test_and_set_explicit(&t->lock, memory_order_acquire))
            continue;
        write_chunk(t, 1);
        unlock_buf(t);
    }
    sigaction(sig, &g_old_action[sig], NULL);
    errno = saved;
    raise(sig);
}

/* Only signals the program left at their default get our handler: a
 * program's own handler keeps working, and its exit() still flushes. */
static void install_signal_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fatal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof g_fatal_signals / sizeof g_fatal_signals[0]; i++) {
        int sig = g_fatal_signals[i];
        struct sigaction old;
        if (sigaction(sig, NULL, &old) != 0 || old.sa_handler != SIG_DFL ||
            (old.sa_flags & SA_SIGINFO))
            continue;
        g_old_action[sig] = old;
        sigaction(sig, &sa, NULL);
    }
}

static void thread_exit(void *arg)
{
    pmr_tbuf *t = arg;
    lock_buf(t);
    write_chunk(t, 0);
    t->flushed = 0;
    atomic_store(&t->committed, 0);
    unlock_buf(t);
    t->depth = 0;
    t->inherited = 0;
    t_buf = NULL;
    atomic_store(&t->in_use, 0);
}

/* Room for `need` bytes at the end of the owner's buffer (flushing it
 * when full); the caller writes there and then calls publish(). */
static inline unsigned char *reserve(pmr_tbuf *t, uint32_t need)
{
    uint32_t c = atomic_load_explicit(&t->committed, memory_order_relaxed);
    if (__builtin_expect(c + need > PMR_BUF_BYTES, 0)) {
        flush_own(t);
        c = 0;
    }
    return t->data + c;
}

/* Publishes the event written at [from, to) by reserve()'s caller. */
static inline void publish(pmr_tbuf *t, const unsigned char *from, const unsigned char *to)
{
    uint32_t c = atomic_load_explicit(&t->committed, memory_order_relaxed);
    atomic_store_explicit(&t->committed, c + (uint32_t)(to - from), memory_order_release);
}

static inline unsigned char *put_varint(unsigned char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

static inline unsigned char *put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        *p++ = (unsigned char)(v >> (8 * i));
    return p;
}

static inline unsigned char *put_tag(unsigned char *p, unsigned type, unsigned domain)
{
    if (__builtin_expect(domain < PMR_TAG_DOMAIN_BYTE, 1)) {
        *p++ = (unsigned char)(type | domain << PMR_TAG_DOMAIN_SHIFT);
        return p;
    }
    *p++ = (unsigned char)(type | PMR_TAG_DOMAIN_BYTE << PMR_TAG_DOMAIN_SHIFT);
    *p++ = (unsigned char)domain;
    return p;
}

/* The tick as a delta from the stream's last one. A thread's ticks never
 * go backwards: a read that would (a thread moved to a CPU whose counter
 * lags, which the clocksource check should exclude) counts as no time. */
static inline unsigned char *put_delta(pmr_tbuf *t, unsigned char *p, uint64_t tick)
{
    uint64_t d = tick > t->last_tick ? tick - t->last_tick : 0;
    t->last_tick += d;
    return put_varint(p, d);
}

/* Bytes a and b share at their start, comparing n at most: words while
 * eight remain (the first differing byte is the lowest set byte of their
 * xor on a little-endian machine), then bytes. */
static inline uint32_t common_prefix(const char *a, const char *b, uint32_t n)
{
    uint32_t i = 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y)
            return i + (uint32_t)__builtin_ctzll(x ^ y) / 8;
    }
#endif
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* The name as what differs from the stream's previous name, which
 * becomes this one. Phasemark names differ from the previous step's in
 * the last digits only, so the suffix is a few bytes. */
static inline unsigned char *put_name(pmr_tbuf *t, unsigned char *p, const char *name, uint32_t len)
{
    uint32_t pre = common_prefix(t->name, name, len < t->name_len ? len : t->name_len);
    uint32_t suf = len - pre;
    p = put_varint(p, pre);
    p = put_varint(p, suf);
    /* A loop, not memcpy: the suffix is a byte or two, less than a call. */
    for (uint32_t i = pre; i < len; i++)
        *p++ = (unsigned char)(t->name[i] = name[i]);
    t->name_len = len;
    return p;
}

/* Appends a calibration point, which also resets the timestamp base. A
 * point older than the stream's last tick (CPUs whose counters disagree)
 * is not written: it would make the reader's line run backwards. */
static void emit_cal(pmr_tbuf *t)
{
    pmr_cal c = pm__clock_calibrate();
    if (c.tsc < t->last_tick) {
        t->cal_tick = t->last_tick;
        return;
    }
    unsigned char *p0 = reserve(t, PMR_CAL_BYTES), *p = p0;
    p = put_tag(p, PMR_CAL, PMR_DOMAIN_ROCTX);
    p = put_le64(p, c.tsc);
    p = put_le64(p, c.ns);
    publish(t, p0, p);
    t->last_tick = t->cal_tick = c.tsc;
}

/* After an event stamped `tick`: a calibration point once the stream has
 * run PMR_CAL_TICKS past the last (never, on the BOOTTIME clock). Placed
 * after the event, so the event lies between two points. */
static inline void maybe_calibrate(pmr_tbuf *t)
{
    if (__builtin_expect(t->last_tick - t->cal_tick > g_cal_every, 0))
        emit_cal(t);
}

/* A fresh stream in t: no previous name, and a calibration point as the
 * timestamp base. */
static void start_stream(pmr_tbuf *t)
{
    t->name_len = 0;
    t->last_tick = 0;
    t->cal_tick = 0;
    emit_cal(t);
}

static inline uint32_t name_len(const char *name)
{
    return (uint32_t)strnlen(name, PMR_NAME_MAX);
}

/* Appends a PUSH, MARK or START event (id: START's range id, else NULL).
 * Forced inline: the call's register saves cost 1 ns of a push in
 * bench_recorder. */
__attribute__((always_inline)) static inline void emit_named(pmr_tbuf *t, unsigned type,
                                                             unsigned domain, uint64_t tick,
                                                             const uint64_t *id, const char *name)
{
    if (!name)
        name = "";
    uint32_t len = name_len(name);
    unsigned char *p0 = reserve(t, PMR_EVENT_FIXED_MAX + len), *p = p0;
    p = put_tag(p, type, domain);
    p = put_delta(t, p, tick);
    if (id)
        p = put_varint(p, *id);
    p = put_name(t, p, name, len);
    publish(t, p0, p);
    maybe_calibrate(t);
}

/* Appends a POP or STOP event (id: STOP's range id, else NULL). */
static inline void emit_plain(pmr_tbuf *t, unsigned type, unsigned domain, uint64_t tick,
                              const uint64_t *id)
{
    unsigned char *p0 = reserve(t, PMR_EVENT_FIXED_MAX), *p = p0;
    p = put_tag(p, type, domain);
    p = put_delta(t, p, tick);
    if (id)
        p = put_varint(p, *id);
    publish(t, p0, p);
    maybe_calibrate(t);
}

/* In the child of fork: a new file for the new pid. Buffers of the
 * parent's other threads and what this thread had buffered belong to the
 * parent, which writes them; ranges open at the fork stay the parent's.
 * The calling thread's stream starts over in the new file. */
static void after_fork_child(void)
{
    int old = atomic_exchange(&g_fd, -1);
    if (old >= 0)
        close(old);
    for (pmr_tbuf *t = atomic_load(&g_threads); t; t = t->next) {
        atomic_flag_clear(&t->lock);
        t->flushed = 0;
        atomic_store(&t->committed, 0);
        if (t != t_buf)
            atomic_store(&t->in_use, 0);
    }
    read_boot_id(g_boot_id);
    if (pm__clock_shift)
        g_boot_id[15] ^= 0xff;
    atomic_store(&g_fd, open_file());
    if (t_buf) {
        t_buf->tid = (uint32_t)gettid();
        t_buf->inherited = t_buf->depth;
        start_stream(t_buf);
    }
    for (unsigned d = PMR_DOMAIN_FIRST_USER; d < 256; d++)
        if (g_domain_names[d][0])
            pm__rec_domain_name(d, g_domain_names[d]);
}

static void init_once(void);

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* The kernel's boot id, a UUID in text, as 16 bytes; zero when it cannot
 * be read. Two files with one boot id were timed on one CLOCK_BOOTTIME.
 * Async-signal-safe (the fork child reads it again: it may be in another
 * time namespace than its parent). */
static void read_boot_id(uint8_t out[16])
{
    char text[64];
    memset(out, 0, 16);
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    uint8_t id[16];
    int nib = 0;
    for (ssize_t i = 0; i < n && nib < 32; i++) {
        if (text[i] == '-')
            continue;
        int v = hex_digit(text[i]);
        if (v < 0)
            return;
        id[nib / 2] = (uint8_t)(nib % 2 ? id[nib / 2] | v : v << 4);
        nib++;
    }
    if (nib != 32)
        return;
    /* A time namespace other than the initial one has clocks of its own:
     * its inode folded in makes it another clock's id (as the shard wire's
     * client computes it, src/wire/clock.c). */
    struct stat st;
    if (stat("/proc/self/ns/time", &st) == 0 && st.st_ino != 4026531834u)
        for (int i = 0; i < 8; i++)
            id[8 + i] ^= (uint8_t)((uint64_t)st.st_ino >> (8 * i));
    memcpy(out, id, 16);
}

/* Records an offset to a driver's clock (pmraw.h, "Clock records"), for a
 * program that measured one (pm-shardd, over the shard wire): one chunk of
 * its own, written at once. Returns 0, or -1 when not under capture. Safe
 * from any thread; not async-signal-safe. */
__attribute__((visibility("default"))) int
phasemark_recorder_clock_offset(int64_t offset_ns, uint64_t bound_ns, uint32_t rounds,
                                const uint8_t driver_boot[16]);
int phasemark_recorder_clock_offset(int64_t offset_ns, uint64_t bound_ns, uint32_t rounds,
                                    const uint8_t driver_boot[16])
{
    pthread_once(&g_once, init_once);
    int fd = output_fd();
    if (fd < 0)
        return -1;
    pmr_chunk_hdr h;
    pmr_clock_rec r;
    memset(&h, 0, sizeof h);
    memset(&r, 0, sizeof r);
    h.magic = PMR_CLOCK_MAGIC;
    h.tid = (uint32_t)gettid();
    h.bytes = sizeof r;
    r.offset_ns = offset_ns;
    r.bound_ns = bound_ns;
    r.at_ns = pm__boottime_ns();
    r.rounds = rounds;
    if (driver_boot)
        memcpy(r.driver_boot, driver_boot, sizeof r.driver_boot);
    struct iovec iov[2] = {{&h, sizeof h}, {&r, sizeof r}};
    ssize_t n;
    do
        n = writev(fd, iov, 2);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)(sizeof h + sizeof r) ? 0 : -1;
}

static void at_exit_flush(void)
{
    pm__rec_flush_all();
}

static void init_once(void)
{
    const char *dir = getenv(PM_REC_DIR_ENV);
    g_clock = (uint32_t)pm__clock_init();
    if (g_clock == PMR_CLOCK_TSC)
        g_cal_every = PMR_CAL_TICKS;
    if (pthread_key_create(&g_key, thread_exit) != 0)
        return;
    if (!dir || !*dir || strlen(dir) >= sizeof g_dir)
        return; /* not under capture: keep depths, record nothing */
    memcpy(g_dir, dir, strlen(dir) + 1);
    read_boot_id(g_boot_id);
    /* A host whose clock is elsewhere (the test shift) is another host. */
    if (pm__clock_shift)
        g_boot_id[15] ^= 0xff;
    atomic_store(&g_fd, open_file());
    pthread_atfork(NULL, NULL, after_fork_child);
    install_signal_handlers();
    atexit(at_exit_flush);
}

__attribute__((constructor)) static void pmr_constructor(void)
{
    pthread_once(&g_once, init_once);
}

/* Library destructors run after the atexit handlers; ranges pushed from
 * other libraries' destructors are written here (a second flush writes
 * only what is new). */
__attribute__((destructor)) static void pmr_destructor(void)
{
    pm__rec_flush_all();
}

/* A free buffer from an exited thread, else a new one, with a fresh
 * stream. Not a hot path: once per thread. */
static pmr_tbuf *attach(void)
{
    pthread_once(&g_once, init_once);
    pmr_tbuf *t;
    for (t = atomic_load(&g_threads); t; t = t->next) {
        int expect = 0;
        if (atomic_compare_exchange_strong(&t->in_use, &expect, 1))
            break;
    }
    if (!t) {
        void *m = mmap(NULL, sizeof *t, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        t = m;
        atomic_flag_clear(&t->lock);
        atomic_store(&t->in_use, 1);
        t->next = atomic_load(&g_threads);
        while (!atomic_compare_exchange_weak(&g_threads, &t->next, t))
            ;
    }
    t->tid = (uint32_t)gettid();
    t->depth = 0;
    t->inherited = 0;
    t_buf = t;
    start_stream(t);
    pthread_setspecific(g_key, t);
    return t;
}

static inline pmr_tbuf *self(void)
{
    pmr_tbuf *t = t_buf;
    return __builtin_expect(t != NULL, 1) ? t : attach();
}

/* Each entry point finds its buffer before reading the clock, so a
 * thread's first event is not stamped before its stream's calibration
 * point (attach() takes one). */
int pm__rec_push(unsigned domain, const char *name)
{
    pmr_tbuf *t = self();
    if (!t)
        return -1;
    emit_named(t, PMR_PUSH, domain, pm__ticks(), NULL, name);
    return t->depth++;
}

int pm__rec_pop(unsigned domain)
{
    pmr_tbuf *t = self();
    if (!t)
        return -1;
    uint64_t tick = pm__ticks();
    if (t->depth <= t->inherited) {
        if (t->depth > 0) { /* a range pushed before fork: the parent's */
            t->inherited = --t->depth;
            return t->depth;
        }
        /* Nothing open: recorded, so the checker reports it. */
    }
    emit_plain(t, PMR_POP, domain, tick, NULL);
    return t->depth > 0 ? --t->depth : -1;
}

void pm__rec_mark(unsigned domain, const char *name)
{
    pmr_tbuf *t = self();
    if (t)
        emit_named(t, PMR_MARK, domain, pm__ticks(), NULL, name);
}

uint64_t pm__rec_start(unsigned domain, const char *name)
{
    uint64_t id = atomic_fetch_add_explicit(&g_range_id, 1, memory_order_relaxed);
    pmr_tbuf *t = self();
    if (t)
        emit_named(t, PMR_START, domain, pm__ticks(), &id, name);
    return id;
}

void pm__rec_stop(unsigned domain, uint64_t id)
{
    pmr_tbuf *t = self();
    if (t)
        emit_plain(t, PMR_STOP, domain, pm__ticks(), &id);
}

void pm__rec_domain_name(unsigned domain, const char *name)
{
    if (domain < 256 && name != g_domain_names[domain]) {
        size_t n = strnlen(name, PMR_DOMAIN_NAME_MAX - 1);
        memcpy(g_domain_names[domain], name, n);
        g_domain_names[domain][n] = 0;
    }
    pmr_tbuf *t = self();
    if (!t)
        return;
    uint32_t len = name_len(name);
    unsigned char *p0 = reserve(t, PMR_EVENT_FIXED_MAX + len), *p = p0;
    p = put_tag(p, PMR_DOMAIN, domain);
    p = put_delta(t, p, pm__ticks());
    p = put_varint(p, len);
    memcpy(p, name, len);
    publish(t, p0, p + len);
}
