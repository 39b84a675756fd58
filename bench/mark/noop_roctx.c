/* noop_roctx.c — a ROCTX that does nothing, for the benchmark: the cost
 * measured is the marker layer's, not a profiler's. Linked into the
 * benchmark, so its symbols sit in the global scope where the marker layer
 * looks first, exactly like a preloaded interposer. */
#define EXPORT __attribute__((visibility("default")))

EXPORT int roctxRangePushA(const char *text);
EXPORT int roctxRangePop(void);

EXPORT int roctxRangePushA(const char *text)
{
    (void)text;
    return 0;
}

EXPORT int roctxRangePop(void)
{
    return 0;
}
