/* split_util.c — see split_util.h. */
#define _POSIX_C_SOURCE 200809L
#include "split_util.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "phasemark/mark.h"

#ifndef PM_SHARDD
#error "PM_SHARDD (the pm-shardd path) must be defined"
#endif

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Reads the daemon's "ready ADDRESS\n" within 20 s. */
static int read_ready(int fd, su_daemon *d)
{
    char line[300];
    size_t got = 0;
    while (got < sizeof line - 1) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 20000) <= 0)
            return -1;
        ssize_t n = read(fd, line + got, sizeof line - 1 - got);
        if (n <= 0)
            return -1;
        got += (size_t)n;
        line[got] = '\0';
        char *nl = strchr(line, '\n');
        if (nl) {
            *nl = '\0';
            if (strncmp(line, "ready ", 6) != 0)
                return -1;
            snprintf(d->address, sizeof d->address, "%s", line + 6);
            return 0;
        }
    }
    return -1;
}

int su_daemon_threads = 1;

int su_daemon_start(su_daemon *d, const char *model, int first, int last, int shard,
                    const char *listen)
{
    return su_daemon_start_with(d, model, first, last, shard, listen, NULL);
}

int su_daemon_start_with(su_daemon *d, const char *model, int first, int last, int shard,
                         const char *listen, const char *const *extra)
{
    char layers[32], sh[16], threads[16];
    snprintf(layers, sizeof layers, "%d-%d", first, last);
    snprintf(sh, sizeof sh, "%d", shard);
    snprintf(threads, sizeof threads, "%d", su_daemon_threads);
    int p[2];
    if (pipe(p) != 0)
        return -1;
    memset(d, 0, sizeof *d);
    d->pid = fork();
    if (d->pid == 0) {
        close(p[0]);
        if (p[1] != 3) {
            dup2(p[1], 3);
            close(p[1]);
        }
        const char *argv[40] = {"pm-shardd", "--model", model, "--layers", layers, "--shard",
                                sh, "--listen", listen, "--ready-fd", "3", "--threads", threads};
        int n = 13;
        for (; extra && *extra && n < 39; extra++)
            argv[n++] = *extra;
        argv[n] = NULL;
        execv(PM_SHARDD, (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    int rc = d->pid > 0 ? read_ready(p[0], d) : -1;
    close(p[0]);
    if (rc) {
        fprintf(stderr, "daemon %s %s did not get ready\n", layers, listen);
        if (d->pid > 0)
            su_daemon_stop(d, SIGKILL);
    }
    return rc;
}

void su_daemon_stop(su_daemon *d, int sig)
{
    if (d->pid <= 0)
        return;
    kill(d->pid, sig);
    for (int waited = 0; waitpid(d->pid, NULL, WNOHANG) == 0; waited += 5) {
        if (waited >= 5000) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, NULL, 0);
            break;
        }
        nap_ms(5);
    }
    d->pid = 0;
}

int su_count_children(void)
{
    DIR *dir = opendir("/proc");
    if (!dir)
        return -1;
    int n = 0;
    long me = (long)getpid();
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        char path[300], buf[512];
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        /* pid (comm) state ppid ...: comm may hold spaces, so skip past
         * the last ')'. */
        char *close = strrchr(buf, ')');
        char state;
        long ppid;
        if (close && sscanf(close + 1, " %c %ld", &state, &ppid) == 2 && ppid == me)
            n++;
    }
    closedir(dir);
    return n;
}

void su_record_free(su_record *r)
{
    free(r->logits);
    memset(r, 0, sizeof *r);
}

static int keep_rows(su_record *r, const float *rows, size_t n_rows, int32_t n_vocab)
{
    size_t need = r->n_logits + n_rows * (size_t)n_vocab;
    if (need > r->cap) {
        size_t cap = need * 2;
        float *p = realloc(r->logits, cap * sizeof *p);
        if (!p)
            return -1;
        r->logits = p;
        r->cap = cap;
    }
    memcpy(r->logits + r->n_logits, rows, n_rows * (size_t)n_vocab * sizeof(float));
    r->n_logits = need;
    return 0;
}

static int32_t argmax(const float *v, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static int failed(llm_session *s, su_record *r, const char *step, int rc)
{
    snprintf(r->err, sizeof r->err, "%s: %s: %s", step, llm_strerror(rc), llm_session_error(s));
    return rc;
}

/* n greedy decode steps from *tok; records tokens and logits. */
static int decode_steps(llm_session *s, int32_t n_vocab, su_record *r, int32_t *tok, int n)
{
    for (int i = 0; i < n; i++) {
        const float *lg;
        int rc = llm_decode(s, *tok, &lg);
        if (rc)
            return failed(s, r, "decode", rc);
        keep_rows(r, lg, 1, n_vocab);
        *tok = argmax(lg, n_vocab);
        r->tokens[r->n_tokens++] = *tok;
    }
    return 0;
}

int su_run_script(llm_session *s, int32_t n_vocab, su_record *r)
{
    int32_t prompt[11], tok;
    for (int i = 0; i < 11; i++)
        prompt[i] = (int32_t)((i * 37 + 5) % n_vocab);
    const float *lg;
    int rc = llm_prefill(s, prompt, 11, 4, &lg);
    if (rc)
        return failed(s, r, "prefill", rc);
    keep_rows(r, lg, 1, n_vocab);
    tok = argmax(lg, n_vocab);
    r->tokens[r->n_tokens++] = tok;
    if ((rc = decode_steps(s, n_vocab, r, &tok, 6)))
        return rc;
    /* A verify of 4 ids (the last token and three guesses), inside the
     * round range a speculative decoder would hold. */
    uint32_t base = llm_session_pos(s);
    int32_t ver[4] = {tok, (tok + 1) % n_vocab, (tok + 7) % n_vocab, 3};
    pm_range round = pm_spec_decode_push(llm_session_get_request(s), 3);
    rc = llm_verify(s, ver, 4, &lg);
    pm_range_pop(&round);
    if (rc)
        return failed(s, r, "verify", rc);
    keep_rows(r, lg, 4, n_vocab);
    if ((rc = llm_session_truncate(s, base + 2)))
        return failed(s, r, "truncate", rc);
    tok = argmax(lg + n_vocab, n_vocab);
    r->tokens[r->n_tokens++] = tok;
    if ((rc = decode_steps(s, n_vocab, r, &tok, 2)))
        return rc;
    llm_session_reset(s);
    if ((rc = llm_prefill(s, prompt + 3, 5, 0, &lg)))
        return failed(s, r, "prefill after reset", rc);
    keep_rows(r, lg, 1, n_vocab);
    tok = argmax(lg, n_vocab);
    r->tokens[r->n_tokens++] = tok;
    return decode_steps(s, n_vocab, r, &tok, 2);
}

double su_max_diff(const su_record *a, const su_record *b)
{
    if (a->n_logits != b->n_logits)
        return 1e30;
    double m = 0;
    for (size_t i = 0; i < a->n_logits; i++) {
        double d = a->logits[i] - b->logits[i];
        if (d < 0)
            d = -d;
        if (!(d <= m))
            m = d; /* a NaN makes m NaN, which fails every tolerance */
    }
    return m;
}

int su_same_tokens(const su_record *a, const su_record *b)
{
    return a->n_tokens == b->n_tokens &&
           memcmp(a->tokens, b->tokens, a->n_tokens * sizeof a->tokens[0]) == 0;
}
