/* env.c — what the PHASEMARK value means (DESIGN.md §1.1–1.2).
 *
 * Comparison is ASCII case-insensitive by hand: the decision must not
 * depend on the process locale, and tolower() would consult it.
 */
#include "internal.h"

#include <stddef.h>

static int ascii_ieq(const char *a, const char *b)
{
    for (;; a++, b++) {
        unsigned char x = (unsigned char)*a, y = (unsigned char)*b;
        if (x >= 'A' && x <= 'Z')
            x = (unsigned char)(x - 'A' + 'a');
        if (x != y)
            return 0;
        if (!x)
            return 1;
    }
}

static int matches_any(const char *value, const char *const *words)
{
    for (size_t i = 0; words[i]; i++)
        if (ascii_ieq(value, words[i]))
            return 1;
    return 0;
}

pm__mode pm__parse_mode(const char *value)
{
    static const char *const off[] = {"", "0", "false", "no", "off", NULL};
    static const char *const on[] = {"1", "true", "yes", "on", "auto", NULL};
    if (!value || matches_any(value, off))
        return PM__MODE_OFF;
    if (matches_any(value, on))
        return PM__MODE_AUTO;
    if (ascii_ieq(value, "roctx"))
        return PM__MODE_ROCTX;
    if (ascii_ieq(value, "nvtx"))
        return PM__MODE_NVTX;
    return PM__MODE_INVALID;
}
