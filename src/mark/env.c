/* env.c — what the marker variable's value means (PHASEMARK, or the name
 * an embedder chose), and which names are valid.
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

int pm__env_name_valid(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        if (n == PM_NAME_MAX || !(alpha || (n && c >= '0' && c <= '9')))
            return 0;
    }
    return n > 0;
}
