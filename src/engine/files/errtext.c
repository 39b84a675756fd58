/* errtext.c — see errtext.h. */
#include "errtext.h"

#include <stdio.h>

void llm__verrf(char *err, size_t errlen, const char *prefix, const char *fmt, va_list ap)
{
    if (!err || errlen == 0)
        return;
    int n = snprintf(err, errlen, "%s", prefix);
    if (n >= 0 && (size_t)n < errlen)
        vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
}

const char *llm__show(const void *s, size_t len, size_t max, char *buf)
{
    const unsigned char *p = s;
    size_t n = len > max ? max : len;
    for (size_t i = 0; i < n; i++)
        buf[i] = (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\'') ? (char)p[i] : '?';
    if (len > max) {
        buf[n] = buf[n + 1] = buf[n + 2] = '.';
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

const char *llm_strerror(int status)
{
    switch (status) {
    case LLM_OK: return "ok";
    case LLM_EINVAL: return "invalid argument";
    case LLM_ENOMEM: return "out of memory";
    case LLM_EIO: return "i/o error";
    case LLM_EFORMAT: return "malformed file";
    case LLM_EUNSUP: return "unsupported";
    case LLM_ECTX: return "context full";
    case LLM_EBACKEND: return "backend error";
    case LLM_ESTATE: return "invalid state";
    case LLM_ETOKEN: return "token out of range";
    case LLM_ESPACE: return "buffer too small";
    case LLM_ENOKEY: return "no such key";
    case LLM_ETYPE: return "value has another type";
    case LLM_ERANGE: return "value out of range";
    default: return "unknown status";
    }
}

void llm_errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    llm__verrf(err, errlen, "", fmt, ap);
    va_end(ap);
}
