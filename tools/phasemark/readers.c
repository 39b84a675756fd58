/* readers.c — other profilers' files: which reader a file needs, and the
 * torch.profiler Chrome trace reader. The SQLite readers (rocprofv3's rocpd
 * database, Nsight Systems' export) live in sqlite.c.
 *
 * A file is told by its content: SQLite's 16-byte header, or JSON whose
 * trace events carry torch.profiler's categories ("user_annotation",
 * "kernel", "cuda_runtime", ...) or whose root has torch's
 * "schemaVersion"/"deviceProperties". Anything else is left to our own
 * loaders (return 1).
 *
 * torch.profiler (Kineto) Chrome trace, as written by
 * prof.export_chrome_trace(): "X" events in microseconds with three
 * decimals. Kept:
 *   user_annotation          record_function() ranges -> marker ranges
 *   kernel, gpu_memcpy,      GPU activities; args.correlation joins them
 *   gpu_memset                 to their launch
 *   cuda_runtime, cuda_driver launch calls (pid, tid, args.correlation)
 *   "M" process/thread names labels
 * Skipped: cpu_op, python_function, gpu_user_annotation (the GPU-side copy
 * of an annotation), flows, counters.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "pmt.h"

#define READERS_FILE_MAX ((size_t)1 << 31)

static const char sqlite_magic[16] = "SQLite format 3";

/* ---- torch.profiler ---- */

static const char *jstr(const pmt_jnode *n)
{
    return n && n->type == PMT_JSTR ? n->str : "";
}

/* A pid/tid: a number, or a numeric string; anything else is 0 (torch
 * writes some GPU track ids as text). */
static uint32_t jid(const pmt_jnode *n)
{
    uint64_t v;
    if (!n || (n->type != PMT_JNUM && n->type != PMT_JSTR) || pmt_parse_u64(n->str, n->len, &v) < 0 ||
        v > UINT32_MAX)
        return 0;
    return (uint32_t)v;
}

static int jns(const pmt_jnode *n, uint64_t *out)
{
    int64_t v;
    if (!n || n->type != PMT_JNUM || pmt_parse_us_to_ns(n->str, n->len, &v) < 0)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

enum { TK_SKIP, TK_RANGE, TK_KERNEL, TK_COPY, TK_API, TK_META };

static int torch_kind(const char *ph, const char *cat)
{
    static const struct {
        const char *cat;
        int kind;
    } cats[] = {{"user_annotation", TK_RANGE}, {"kernel", TK_KERNEL}, {"gpu_memcpy", TK_COPY},
                {"gpu_memset", TK_COPY},       {"cuda_runtime", TK_API}, {"cuda_driver", TK_API}};
    if (strcmp(ph, "M") == 0)
        return TK_META;
    if (strcmp(ph, "X") != 0)
        return TK_SKIP;
    for (size_t i = 0; i < sizeof cats / sizeof cats[0]; i++)
        if (strcmp(cat, cats[i].cat) == 0)
            return cats[i].kind;
    return TK_SKIP;
}

static int is_torch(const pmt_json *j, const pmt_jnode *root, const pmt_jnode *events)
{
    if (root->type == PMT_JOBJ &&
        (pmt_json_get(j, root, "schemaVersion") || pmt_json_get(j, root, "deviceProperties")))
        return 1;
    for (const pmt_jnode *ev = pmt_json_child(j, events); ev; ev = pmt_json_next(j, ev)) {
        int k = torch_kind(jstr(pmt_json_get(j, ev, "ph")), jstr(pmt_json_get(j, ev, "cat")));
        if (k != TK_SKIP && k != TK_META)
            return 1;
    }
    return 0;
}

static int torch_gpu(pmt_gpu *g, int kind, const pmt_json *j, const pmt_jnode *ev, uint64_t ts,
                     uint64_t dur)
{
    const pmt_jnode *args = pmt_json_get(j, ev, "args");
    uint64_t corr = 0;
    const pmt_jnode *c = pmt_json_get(j, args, "correlation");
    if (c && (c->type != PMT_JNUM || pmt_parse_u64(c->str, c->len, &corr) < 0))
        return -2;
    if (kind == TK_API) {
        pmt_api a = {jid(pmt_json_get(j, ev, "pid")), jid(pmt_json_get(j, ev, "tid")), corr, ts, ts + dur};
        return pmt_gpu_add_api(g, &a);
    }
    const pmt_jnode *stream = pmt_json_get(j, args, "stream");
    pmt_activity a = {kind == TK_KERNEL ? PMT_ACT_KERNEL : PMT_ACT_COPY, corr, ts, ts + dur, 0,
                      jid(pmt_json_get(j, ev, "pid")),
                      stream ? jid(stream) & 0xFFFF : jid(pmt_json_get(j, ev, "tid")) & 0xFFFF,
                      (char *)jstr(pmt_json_get(j, ev, "name"))};
    return pmt_gpu_add_activity(g, &a);
}

static int torch_event(pmt_trace *t, pmt_gpu *g, int *has_gpu, const pmt_json *j,
                       const pmt_jnode *ev, const char *src, size_t idx, char *err, size_t errlen)
{
    int kind = ev->type == PMT_JOBJ ? torch_kind(jstr(pmt_json_get(j, ev, "ph")),
                                                 jstr(pmt_json_get(j, ev, "cat")))
                                    : TK_SKIP;
    uint32_t pid = jid(pmt_json_get(j, ev, "pid")), tid = jid(pmt_json_get(j, ev, "tid"));
    if (kind == TK_SKIP)
        return 0;
    if (kind == TK_META) {
        const char *what = jstr(pmt_json_get(j, ev, "name"));
        const char *name = jstr(pmt_json_get(j, pmt_json_get(j, ev, "args"), "name"));
        if (!*name)
            return 0;
        if (strcmp(what, "process_name") == 0)
            return pmt_trace_label(t, pid, 0, name);
        if (strcmp(what, "thread_name") == 0 && tid)
            return pmt_trace_label(t, pid, tid, name);
        return 0;
    }
    uint64_t ts, dur;
    if (jns(pmt_json_get(j, ev, "ts"), &ts) < 0 || jns(pmt_json_get(j, ev, "dur"), &dur) < 0 ||
        ts > UINT64_MAX - dur) {
        pmt_errf(err, errlen, "%s: event %zu: missing or bad ts/dur", src, idx);
        return -1;
    }
    if (kind == TK_RANGE) {
        pmt_range r = {(char *)jstr(pmt_json_get(j, ev, "name")), "torch.user_annotation", pid, tid,
                       0, ts, ts + dur, 0, src, idx};
        return pmt_trace_add(t, &r);
    }
    if (!g)
        return 0;
    *has_gpu = 1;
    int rc = torch_gpu(g, kind, j, ev, ts, dur);
    if (rc == -2) {
        pmt_errf(err, errlen, "%s: event %zu: args.correlation is not an unsigned integer", src, idx);
        return -1;
    }
    return rc;
}

int pmt_torch_load_text(pmt_trace *t, pmt_gpu *g, int *has_gpu, const char *name, const char *text,
                        size_t len, char *err, size_t errlen)
{
    pmt_json j;
    char jerr[160];
    int dummy = 0;
    if (!has_gpu)
        has_gpu = &dummy;
    if (pmt_json_parse(&j, text, len, jerr, sizeof jerr) < 0) {
        pmt_errf(err, errlen, "%s: %s", name, jerr);
        return -1;
    }
    const pmt_jnode *root = &j.nodes[0];
    const pmt_jnode *events = root->type == PMT_JARR ? root : pmt_json_get(&j, root, "traceEvents");
    int rc = 1;
    if (events && events->type == PMT_JARR && is_torch(&j, root, events)) {
        const char *src = pmt_trace_source(t, name);
        size_t idx = 0;
        rc = src ? 0 : -1;
        for (const pmt_jnode *ev = pmt_json_child(&j, events); ev && rc == 0; ev = pmt_json_next(&j, ev))
            rc = torch_event(t, g, has_gpu, &j, ev, src, idx++, err, errlen);
        if (rc < 0 && err && !*err)
            pmt_errf(err, errlen, "out of memory");
    }
    pmt_json_free(&j);
    return rc;
}

/* ---- which reader ---- */

/* Cheap test before a full parse: does the JSON text mention one of
 * torch.profiler's categories or root keys at all? */
static int may_be_torch(const char *text, size_t len)
{
    static const char *const words[] = {"\"user_annotation\"", "\"cuda_runtime\"", "\"kernel\"",
                                        "\"schemaVersion\"", "\"gpu_memcpy\""};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (memmem(text, len, words[i], strlen(words[i])))
            return 1;
    return 0;
}

int pmt_readers_load(pmt_trace *t, pmt_gpu *g, int *has_gpu, const char *path, char *err,
                     size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char head[16] = {0};
    size_t got = f ? fread(head, 1, sizeof head, f) : 0;
    if (f)
        fclose(f);
    if (got == sizeof head && memcmp(head, sqlite_magic, sizeof head) == 0)
        return pmt_sqlite_load(t, g, has_gpu, path, err, errlen);
    size_t i = 0;
    while (i < got && (head[i] == ' ' || head[i] == '\n' || head[i] == '\t' || head[i] == '\r'))
        i++;
    if (i == got || (head[i] != '{' && head[i] != '['))
        return 1;
    char *text;
    size_t len;
    if (pmt_read_file(path, READERS_FILE_MAX, &text, &len, err, errlen) < 0)
        return -1;
    int rc = may_be_torch(text, len) ? pmt_torch_load_text(t, g, has_gpu, path, text, len, err, errlen) : 1;
    free(text);
    return rc;
}
