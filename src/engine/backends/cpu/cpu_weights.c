/* cpu_weights.c — the CPU backend's huge-page copy of the float matrices
 * (why and when: cpu_weights.h).
 *
 * The arena is one anonymous mapping, 2 MiB-aligned and a whole number of
 * 2 MiB pages long, so that every page of it can be a huge one; each
 * matrix starts on a 4 KiB boundary in it. It is read-only once filled.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, madvise */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cpu_weights.h"
#include "errtext.h"
#include "kernels.h"
#include "model.h"
#include "pool.h"

#define HUGE_BYTES ((size_t)2 << 20)
#define SLOT_ALIGN ((size_t)4096)

static size_t round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

int llm_cpu_weights_mode(int *mode, char *err, size_t errlen)
{
    const char *e = getenv("PHASEMARK_ENGINE_WEIGHTS");
    *mode = LLM_CPU_WEIGHTS_AUTO;
    if (!e || !*e || strcmp(e, "auto") == 0)
        return 0;
    if (strcmp(e, "map") == 0) {
        *mode = LLM_CPU_WEIGHTS_MAP;
        return 0;
    }
    if (strcmp(e, "copy") == 0) {
        *mode = LLM_CPU_WEIGHTS_COPY;
        return 0;
    }
    llm_errf(err, errlen, "cpu backend: PHASEMARK_ENGINE_WEIGHTS='%s' is none of auto, map, copy",
             e);
    return LLM_EINVAL;
}

static int float_type(uint32_t t)
{
    return t == LLM_TYPE_F32 || t == LLM_TYPE_F16 || t == LLM_TYPE_BF16;
}

/* Whether the arena takes t: a float matrix (floats), or a Q8_0 one into
 * the panel layout (panels). */
static int takes(const llm_tensor *t, int floats, int panels)
{
    return t->data && !t->dev &&
           ((floats && float_type(t->type)) || (panels && t->type == LLM_TYPE_Q8_0));
}

/* The matrices a forward streams that the arena takes, into out (when not
 * NULL); their count. Tensors the span does not hold have no data. */
static int32_t arena_matrices(llm_model *m, int floats, int panels, llm_tensor **out)
{
    int32_t n = 0;
    for (int32_t l = m->span_first; l <= m->span_last; l++) {
        llm_layer *L = &m->layers[l];
        llm_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            if (takes(ts[i], floats, panels)) {
                if (out)
                    out[n] = ts[i];
                n++;
            }
    }
    if (takes(&m->output, floats, panels)) {
        if (out)
            out[n] = &m->output;
        n++;
    }
    return n;
}

/* The bytes t takes in the arena. */
static size_t arena_bytes(const llm_tensor *t)
{
    return t->type == LLM_TYPE_Q8_0 ? llm_q8_0_panel_bytes(t->ne1, t->row_bytes)
                                    : (size_t)t->ne1 * t->row_bytes;
}

/* 1 unless the system's transparent huge pages are off ("[never]") or it
 * says nothing (no such file: not Linux, or a kernel without them). */
static int huge_pages_possible(void)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f)
        return 0;
    char line[128] = {0};
    int ok = fgets(line, sizeof line, f) != NULL && strstr(line, "[never]") == NULL;
    fclose(f);
    return ok;
}

typedef struct copy_job {
    llm_tensor **t;
    unsigned char *const *dst;
    int32_t n;
} copy_job;

/* Each thread copies (or packs) its contiguous share of every matrix, so
 * the page faults of the fresh arena (zeroing 2 MiB each) are split too. */
static void copy_worker(void *ctx, int32_t ith, int32_t nth)
{
    const copy_job *j = ctx;
    for (int32_t i = 0; i < j->n; i++) {
        const llm_tensor *t = j->t[i];
        if (t->type == LLM_TYPE_Q8_0) {
            int64_t panels = (t->ne1 + LLM_Q8P_ROWS - 1) / LLM_Q8P_ROWS;
            llm_q8_0_pack_panels(t->data, t->row_bytes, t->ne1, panels * ith / nth,
                                 panels * (ith + 1) / nth, j->dst[i]);
            continue;
        }
        size_t bytes = (size_t)j->t[i]->ne1 * j->t[i]->row_bytes;
        size_t lo = round_up(bytes / (size_t)nth * (size_t)ith, 64);
        size_t hi = ith + 1 == nth ? bytes : round_up(bytes / (size_t)nth * (size_t)(ith + 1), 64);
        if (hi > bytes)
            hi = bytes;
        if (lo < hi)
            memcpy(j->dst[i] + lo, (const unsigned char *)j->t[i]->data + lo, hi - lo);
    }
}

/* A 2 MiB-aligned anonymous mapping of len bytes (a multiple of
 * HUGE_BYTES) advised onto huge pages, or NULL. */
static void *huge_arena(size_t len, int need_advice)
{
    if (len > SIZE_MAX - HUGE_BYTES)
        return NULL;
    unsigned char *raw = mmap(NULL, len + HUGE_BYTES, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    unsigned char *a = (unsigned char *)round_up((size_t)(uintptr_t)raw, HUGE_BYTES);
    if (a > raw)
        munmap(raw, (size_t)(a - raw));
    if (raw + HUGE_BYTES > a)
        munmap(a + len, (size_t)(raw + HUGE_BYTES - a));
#ifdef MADV_HUGEPAGE
    int advised = madvise(a, len, MADV_HUGEPAGE) == 0;
#else
    int advised = 0;
#endif
    if (need_advice && !advised) {
        munmap(a, len);
        return NULL;
    }
    return a;
}

/* The arena for the n tensors t (taken over: freed here on failure) in
 * *w, all of them taken (takes). */
static void copy_into_arena(llm_pool *pool, llm_tensor **t, int32_t n, int mode, llm_cpu_weights *w)
{
    unsigned char **dst = malloc((size_t)n * sizeof *dst);
    if (!dst)
        goto done;
    size_t total = 0, bytes = 0;
    int32_t n_panels = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t b = arena_bytes(t[i]);
        if (b > SIZE_MAX / 2 || total > SIZE_MAX / 2)
            goto done;
        total += round_up(b, SLOT_ALIGN);
        bytes += b;
        n_panels += t[i]->type == LLM_TYPE_Q8_0;
    }
    size_t len = round_up(total, HUGE_BYTES);
    /* Panels pay on any page size; float copies only on huge pages. */
    unsigned char *a = huge_arena(len, mode == LLM_CPU_WEIGHTS_AUTO && n_panels == 0);
    if (!a)
        goto done;
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        dst[i] = a + off;
        off += round_up(arena_bytes(t[i]), SLOT_ALIGN);
    }
    copy_job j = {t, dst, n};
    llm_pool_run(pool, copy_worker, &j);
    (void)mprotect(a, len, PROT_READ); /* a stray write faults, not corrupts */
    for (int32_t i = 0; i < n; i++)
        t[i]->dev = dst[i];
    w->base = a;
    w->len = len;
    w->bytes = bytes;
    w->n = n;
    w->t = t;
    t = NULL;
done:
    free(t);
    free(dst);
}

void llm_cpu_weights_copy(llm_pool *pool, llm_model *m, int mode, int floats, int panels,
                          llm_cpu_weights *w)
{
    memset(w, 0, sizeof *w);
    if (mode == LLM_CPU_WEIGHTS_MAP)
        return;
    floats = floats && (mode == LLM_CPU_WEIGHTS_COPY || huge_pages_possible());
    int32_t n = arena_matrices(m, floats, panels, NULL);
    if (n == 0)
        return;
    llm_tensor **t = malloc((size_t)n * sizeof *t);
    if (!t)
        return;
    arena_matrices(m, floats, panels, t);
    copy_into_arena(pool, t, n, mode, w);
}

void llm_cpu_weights_copy_tensors(llm_pool *pool, llm_tensor *const *tensors, int32_t count, int mode,
                                  int panels, llm_cpu_weights *w)
{
    memset(w, 0, sizeof *w);
    if (mode == LLM_CPU_WEIGHTS_MAP || count <= 0)
        return;
    int floats = mode == LLM_CPU_WEIGHTS_COPY || huge_pages_possible();
    llm_tensor **t = malloc((size_t)count * sizeof *t);
    if (!t)
        return;
    int32_t n = 0;
    for (int32_t i = 0; i < count; i++)
        if (takes(tensors[i], floats, panels))
            t[n++] = tensors[i];
    if (n == 0) {
        free(t);
        return;
    }
    copy_into_arena(pool, t, n, mode, w);
}

static int in_arena(const llm_cpu_weights *w, const void *p)
{
    const char *b = (const char *)w->base;
    return b && p && (const char *)p >= b && (const char *)p < b + w->len;
}

int llm_cpu_weights_holds(const llm_cpu_weights *w, const llm_tensor *t)
{
    return in_arena(w, t->dev);
}

void llm_cpu_weights_free(llm_cpu_weights *w)
{
    /* A tensor another backend has taken since keeps that backend's dev. */
    for (int32_t i = 0; i < w->n; i++)
        if (in_arena(w, w->t[i]->dev))
            w->t[i]->dev = NULL;
    free(w->t);
    if (w->base)
        munmap(w->base, w->len);
    memset(w, 0, sizeof *w);
}
