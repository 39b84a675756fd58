/* backend.c — the backend registry: backends created by name.
 *
 * A name ("cpu", "cuda", "cuda:N") is parsed by backend_name.c, the one
 * parser of backend names; the registry maps its kind to a constructor.
 * A kind this build was made without keeps its entry with no constructor,
 * so "cuda:0" on a CPU-only build says so rather than "unknown".
 */
#include "backend.h"
#include "backend_name.h"

#if LLM_HAVE_CUDA
#include "cuda_backend.h"
#endif

typedef struct backend_entry {
    llm_backend_kind kind; /* the registry is indexed by kind */
    const char *label;     /* for "this build has no ... backend" */
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
    {LLM_BACKEND_CPU, "CPU", create_cpu},
    {LLM_BACKEND_CUDA, "CUDA", CUDA_CREATE},
};

_Static_assert(sizeof registry / sizeof registry[0] == LLM_BACKEND_CUDA + 1,
               "one registry entry per backend kind, in kind order");

int llm_backend_create(const char *name, int32_t n_threads, llm_backend **out, char *err,
                       size_t errlen)
{
    *out = NULL;
    llm_backend_name bn;
    char why[96];
    if (llm_backend_name_parse(name, &bn, why, sizeof why) != 0) {
        llm_errf(err, errlen, "model: %s", why);
        return LLM_EBACKEND;
    }
    const backend_entry *e = &registry[bn.kind];
    if (!e->create) {
        llm_errf(err, errlen, "model: backend '%s': this build has no %s backend", bn.text,
                 e->label);
        return LLM_EBACKEND;
    }
    return e->create(bn.device, n_threads, out, err, errlen);
}
