/* backend_name.c — the one parser of backend names (backend_name.h). */
#include "backend_name.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* A plain decimal in 0..LLM_BACKEND_MAX_DEVICE: digits only, no sign, no
 * space, nothing after. */
static int parse_device(const char *s, int32_t *out)
{
    if (s[0] < '0' || s[0] > '9')
        return -1;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end != '\0' || v > LLM_BACKEND_MAX_DEVICE)
        return -1;
    *out = (int32_t)v;
    return 0;
}

int llm_backend_name_parse(const char *name, llm_backend_name *out, char *err,
                           size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!name || strcmp(name, "cpu") == 0) {
        out->kind = LLM_BACKEND_CPU;
        snprintf(out->text, sizeof out->text, "cpu");
        return 0;
    }
    int32_t dev = 0;
    if (strcmp(name, "cuda") == 0 ||
        (strncmp(name, "cuda:", 5) == 0 && parse_device(name + 5, &dev) == 0)) {
        out->kind = LLM_BACKEND_CUDA;
        out->device = dev;
        snprintf(out->text, sizeof out->text, "cuda:%d", (int)dev);
        return 0;
    }
    /* The name is quoted back; it stays one line. */
    char shown[48];
    snprintf(shown, sizeof shown, "%s", name);
    for (char *c = shown; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    llm_errf(err, errlen, "unknown backend '%s' (cpu, cuda, cuda:N)", shown);
    return LLM_EBACKEND;
}

int llm_backend_name_same(const llm_backend_name *a, const llm_backend_name *b)
{
    return a->kind == b->kind && a->device == b->device;
}
