/* old_lookup.h — a test-only copy of the defective handle-scoped ROCTX
 * lookup that the marker layer replaced (docs/markers.md, promise 4). Kept so the
 * interposer test can show it catches the defect. Never use it elsewhere. */
#ifndef PM_OLD_LOOKUP_H
#define PM_OLD_LOOKUP_H

typedef struct old_roctx {
    int (*push)(const char *);
    int (*pop)(void);
} old_roctx;

/* dlopen("libroctx64.so") then dlsym(handle, ...): binds to that library's
 * own copy even when a profiler preloaded an interposer. 0 or -1. */
int old_lookup(old_roctx *out);

#endif
