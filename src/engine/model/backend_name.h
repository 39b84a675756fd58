/* backend_name.h — backend names, parsed in one place.
 *
 * A backend is named "cpu", "cuda" or "cuda:N" wherever a name is taken:
 * llm_model_options.backend (so pm-generate's and pm-server's --backend,
 * which pass it through), a placement's local:/spawn: targets, and
 * pm-shardd's --backend. Every one of them goes through
 * llm_backend_name_parse, so they accept the same names, refuse the same
 * ones with the same line, and agree on when two names are one device
 * ("cuda" is "cuda:0"). Whether this build or machine has the backend is
 * the backend's own answer when it is created, not the parser's.
 */
#ifndef LLM_BACKEND_NAME_H
#define LLM_BACKEND_NAME_H

#include <stddef.h>
#include <stdint.h>

/* Highest device index a name may carry. */
#define LLM_BACKEND_MAX_DEVICE 255

typedef enum llm_backend_kind {
    LLM_BACKEND_CPU = 0,
    LLM_BACKEND_CUDA = 1
} llm_backend_kind;

typedef struct llm_backend_name {
    llm_backend_kind kind;
    int32_t device;  /* CUDA: 0..LLM_BACKEND_MAX_DEVICE; CPU: 0 */
    char text[16];   /* canonical spelling: "cpu" or "cuda:N" */
} llm_backend_name;

/* Parses name (NULL means "cpu"): "cpu", "cuda" (device 0) or "cuda:N"
 * with N a plain decimal in 0..LLM_BACKEND_MAX_DEVICE. Returns 0, or
 * LLM_EBACKEND with "unknown backend 'NAME' (cpu, cuda, cuda:N)" in err
 * (control bytes of NAME shown as '?'). Pure; thread-safe. */
int llm_backend_name_parse(const char *name, llm_backend_name *out, char *err,
                           size_t errlen);

/* 1 when a and b name the same backend instance kind and device. */
int llm_backend_name_same(const llm_backend_name *a, const llm_backend_name *b);

#endif
