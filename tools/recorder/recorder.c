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
 * mid-event (O_APPEND on a regular file).
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

#include "pmraw.h"

#define PMR_BUF_BYTES (1u << 18) /* per thread: stays in L2; a write per ~3000 pairs */

typedef struct pmr_tbuf {
    _Atomic uint32_t committed; /* bytes of whole, published events */
    uint32_t flushed;           /* bytes already written; under lock */
    atomic_flag lock;           /* flush lock */
    _Atomic int in_use;         /* 1 while a live thread owns it */
    uint32_t tid;
    int depth;     /* open push ranges of the owner */
    int inherited; /* ranges open at fork: the parent records them */
    struct pmr_tbuf *next; /* registry link; written once before publish */
    unsigned char data[PMR_BUF_BYTES];
} pmr_tbuf;

/* Process-wide state the contract needs: the registry of buffers (so exit
 * and signal paths can reach every thread's events) and the output file. */
static _Atomic(pmr_tbuf *) g_threads;
static _Atomic int g_fd = -1;
static _Atomic uint64_t g_range_id = 1;
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

static __thread pmr_tbuf *t_buf __attribute__((tls_model("initial-exec")));

static const int g_fatal_signals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL,
                                      SIGTERM, SIGINT, SIGQUIT, SIGHUP};

static inline uint64_t pmr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

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
    uint64_t start = pmr_now();
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

/* In the child of fork: a new file for the new pid. Buffers of the
 * parent's other threads and what this thread had buffered belong to the
 * parent, which writes them; ranges open at the fork stay the parent's. */
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
    if (t_buf) {
        t_buf->tid = (uint32_t)gettid();
        t_buf->inherited = t_buf->depth;
    }
    atomic_store(&g_fd, open_file());
    for (unsigned d = PMR_DOMAIN_FIRST_USER; d < 256; d++)
        if (g_domain_names[d][0])
            pm__rec_domain_name(d, g_domain_names[d]);
}

static void at_exit_flush(void)
{
    pm__rec_flush_all();
}

static void init_once(void)
{
    const char *dir = getenv(PM_REC_DIR_ENV);
    if (pthread_key_create(&g_key, thread_exit) != 0)
        return;
    if (!dir || !*dir || strlen(dir) >= sizeof g_dir)
        return; /* not under capture: keep depths, record nothing */
    memcpy(g_dir, dir, strlen(dir) + 1);
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

/* A free buffer from an exited thread, else a new one. Not a hot path:
 * once per thread. */
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
    pthread_setspecific(g_key, t);
    return t;
}

static inline pmr_tbuf *self(void)
{
    pmr_tbuf *t = t_buf;
    return __builtin_expect(t != NULL, 1) ? t : attach();
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

static inline void publish(pmr_tbuf *t, uint32_t bytes)
{
    uint32_t c = atomic_load_explicit(&t->committed, memory_order_relaxed);
    atomic_store_explicit(&t->committed, c + bytes, memory_order_release);
}

/* Appends one event with an optional range id and name, and publishes it. */
static inline void emit(pmr_tbuf *t, unsigned type, unsigned domain, uint32_t aux, uint64_t ts,
                        const uint64_t *id, const char *name, uint32_t len)
{
    uint32_t idb = id ? 8 : 0;
    uint32_t need = (uint32_t)sizeof(pmr_event) + pmr_padded(idb + len);
    unsigned char *p = reserve(t, need);
    pmr_event ev = {(uint8_t)type, (uint8_t)domain, (uint16_t)len, aux, ts};
    memcpy(p, &ev, sizeof ev);
    p += sizeof ev;
    if (id)
        memcpy(p, id, 8);
    if (len) {
        memcpy(p + idb, name, len);
        memset(p + idb + len, 0, pmr_padded(idb + len) - idb - len);
    }
    publish(t, need);
}

static inline uint32_t name_len(const char *name)
{
    return name ? (uint32_t)strnlen(name, PMR_NAME_MAX) : 0;
}

int pm__rec_push(unsigned domain, const char *name)
{
    uint64_t ts = pmr_now();
    pmr_tbuf *t = self();
    if (!t)
        return -1;
    emit(t, PMR_PUSH, domain, 0, ts, NULL, name, name_len(name));
    return t->depth++;
}

int pm__rec_pop(unsigned domain)
{
    uint64_t ts = pmr_now();
    pmr_tbuf *t = self();
    if (!t)
        return -1;
    if (t->depth <= t->inherited) {
        if (t->depth > 0) { /* a range pushed before fork: the parent's */
            t->inherited = --t->depth;
            return t->depth;
        }
        /* Nothing open: recorded, so the checker reports it. */
    }
    unsigned char *p = reserve(t, sizeof(pmr_event));
    pmr_event ev = {PMR_POP, (uint8_t)domain, 0, 0, ts};
    memcpy(p, &ev, sizeof ev);
    publish(t, sizeof ev);
    return t->depth > 0 ? --t->depth : -1;
}

void pm__rec_mark(unsigned domain, const char *name)
{
    uint64_t ts = pmr_now();
    pmr_tbuf *t = self();
    if (t)
        emit(t, PMR_MARK, domain, 0, ts, NULL, name, name_len(name));
}

uint64_t pm__rec_start(unsigned domain, const char *name)
{
    uint64_t ts = pmr_now();
    uint64_t id = atomic_fetch_add_explicit(&g_range_id, 1, memory_order_relaxed);
    pmr_tbuf *t = self();
    if (t)
        emit(t, PMR_START, domain, 0, ts, &id, name, name_len(name));
    return id;
}

void pm__rec_stop(unsigned domain, uint64_t id)
{
    uint64_t ts = pmr_now();
    pmr_tbuf *t = self();
    if (t)
        emit(t, PMR_STOP, domain, 0, ts, &id, NULL, 0);
}

void pm__rec_domain_name(unsigned domain, const char *name)
{
    if (domain < 256 && name != g_domain_names[domain]) {
        size_t n = strnlen(name, PMR_DOMAIN_NAME_MAX - 1);
        memcpy(g_domain_names[domain], name, n);
        g_domain_names[domain][n] = 0;
    }
    pmr_tbuf *t = self();
    if (t)
        emit(t, PMR_DOMAIN, domain, domain, pmr_now(), NULL, name, name_len(name));
}
