/* backend.c — the backend registry: the one place backend names are
 * parsed and backends created by name.
 *
 * A name is a kind, optionally with a device index ("cpu", "cuda",
 * "cuda:N"). The registry lists the kinds this build has; a kind it knows
 * of but was built without is named as such in the error, so "cuda:0" on
 * a CPU-only build says so rather than "unknown".
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#if LLM_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

/* Largest device index a name may carry. */
#define MAX_DEVICE 1023

typedef struct backend_entry {
    const char *kind;       /* the name before ':' */
    llm_backend_kind id;
    int has_device;         /* 1: takes ":N" (default 0) */
    /* NULL: a kind this build lacks. */
    int (*create)(int device, int32_t n_threads, llm_backend **out, char *err, size_t errlen);
} backend_entry;

static int create_cpu(int device, int32_t n_threads, llm_backend **out, char *err,
                      size_t errlen)
{
    (void)device;
    return llm_cpu_backend_create(n_threads, 1, out, err, errlen);
}

#if LLM_HAVE_CUDA
static int create_cuda(int device, int32_t n_threads, llm_backend **out, char *err,
                       size_t errlen)
{
    (void)n_threads;
    int rc = llm_cuda_backend_create(device, out, err, errlen);
    return rc == LLM_EINVAL ? LLM_EBACKEND : rc;
}
#define CUDA_CREATE create_cuda
#else
#define CUDA_CREATE NULL
#endif

static const backend_entry registry[] = {
    {"cpu", LLM_BACKEND_CPU, 0, create_cpu},
    {"cuda", LLM_BACKEND_CUDA, 1, CUDA_CREATE},
};

#define N_ENTRIES (sizeof registry / sizeof registry[0])

/* The registry's entry for name, with its device; NULL with err set. */
static const backend_entry *lookup(const char *name, int *device, char *err, size_t errlen)
{
    const char *colon = strchr(name, ':');
    size_t klen = colon ? (size_t)(colon - name) : strlen(name);
    for (size_t i = 0; i < N_ENTRIES; i++) {
        const backend_entry *e = &registry[i];
        if (strlen(e->kind) != klen || memcmp(e->kind, name, klen) != 0)
            continue;
        *device = e->has_device ? 0 : -1;
        if (!colon)
            return e;
        char *end = NULL;
        errno = 0;
        long v = e->has_device && colon[1] >= '0' && colon[1] <= '9'
                     ? strtol(colon + 1, &end, 10) : -1;
        if (v < 0 || errno || *end != '\0' || v > MAX_DEVICE)
            break;
        *device = (int)v;
        return e;
    }
    llm_errf(err, errlen, "unknown backend '%s' (cpu, cuda, cuda:N)", name);
    return NULL;
}

int llm_backend_name_parse(const char *name, llm_backend_kind *kind, int *device, char *err,
                           size_t errlen)
{
    int dev = -1;
    const backend_entry *e = name ? lookup(name, &dev, err, errlen) : NULL;
    if (!name)
        llm_errf(err, errlen, "backend name missing");
    if (!e)
        return LLM_EINVAL;
    if (kind)
        *kind = e->id;
    if (device)
        *device = dev;
    return 0;
}

int llm_backend_create(const char *name, int32_t n_threads, llm_backend **out, char *err,
                       size_t errlen)
{
    *out = NULL;
    int dev = -1;
    const backend_entry *e = lookup(name ? name : "cpu", &dev, err, errlen);
    if (!e)
        return LLM_EBACKEND;
    if (!e->create) {
        llm_errf(err, errlen, "backend '%s': this build has no %s backend", name,
                 e->id == LLM_BACKEND_CUDA ? "CUDA" : e->kind);
        return LLM_EBACKEND;
    }
    return e->create(dev, n_threads, out, err, errlen);
}
