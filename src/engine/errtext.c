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
