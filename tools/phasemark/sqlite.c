/* sqlite.c — readers for the SQLite files profilers write: rocprofv3's
 * rocpd database (ROCm 7's default output) and Nsight Systems' export
 * (`nsys export --type sqlite`). Built only where SQLite is (Debian
 * libsqlite3-dev); without it these entry points say so.
 *
 * rocpd (schema version 3; the unsuffixed views over the GUID-suffixed
 * tables):
 *   rocpd_region    one row per host interval: markers (category
 *                   MARKER_*: roctx ranges, name = the message) and API
 *                   calls (HIP_*, HSA_*, ...: the launch calls);
 *                   pid/tid point at rocpd_info_process/_thread rows
 *   rocpd_event     category_id (-> rocpd_string) and correlation_id, the
 *                   id a launch shares with its dispatch or copy
 *   rocpd_kernel_dispatch, rocpd_memory_copy   GPU activities
 *   rocpd_info_kernel_symbol   kernel names; rocpd_info_thread.name
 * Nsight Systems export:
 *   NVTX_EVENTS     eventType 59 push/pop, 60 start/end, 34 mark, 75
 *                   domain creation; text, or textId -> StringIds; end
 *                   NULL while open; globalTid = pid << 24 | tid (plus
 *                   higher bits)
 *   CUPTI_ACTIVITY_KIND_KERNEL   start, end, correlationId, streamId,
 *                   globalPid, demangledName -> StringIds
 *   CUPTI_ACTIVITY_KIND_MEMCPY   the same with copyKind
 *   CUPTI_ACTIVITY_KIND_RUNTIME  launch calls: globalTid, correlationId
 * Timestamps are nanoseconds as stored (rocpd: the profiler's clock,
 * CLOCK_BOOTTIME by default; nsys: its session time base). Every query
 * reads by column name, so extra columns in newer schemas are harmless;
 * a table the profiler did not create (nsys creates them lazily) is
 * simply absent.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "pmt.h"

#ifndef PMT_HAVE_SQLITE

int pmt_sqlite_load(pmt_trace *t, pmt_gpu *g, int *has_gpu, const char *path, char *err,
                    size_t errlen)
{
    (void)t, (void)g, (void)has_gpu;
    pmt_errf(err, errlen, "%s: a SQLite database, and this phasemark was built without SQLite "
                          "(install libsqlite3-dev and rebuild)", path);
    return -1;
}

int pmt_sqlite_load_mem(pmt_trace *t, pmt_gpu *g, int *has_gpu, const char *name,
                        const void *data, size_t len, char *err, size_t errlen)
{
    (void)data, (void)len;
    return pmt_sqlite_load(t, g, has_gpu, name, err, errlen);
}

#else

#include <sqlite3.h>

typedef struct ctx {
    sqlite3 *db;
    pmt_trace *t;
    pmt_gpu *g;
    int *has_gpu;
    const char *src;
    char *err;
    size_t errlen;
} ctx;

static int has_table(sqlite3 *db, const char *name)
{
    sqlite3_stmt *st;
    int found = 0;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE name = ?1", -1, &st, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return found;
}

static uint64_t col_u64(sqlite3_stmt *st, int i)
{
    sqlite3_int64 v = sqlite3_column_int64(st, i);
    return v < 0 ? 0 : (uint64_t)v;
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? (const char *)s : "";
}

typedef int (*row_fn)(ctx *c, sqlite3_stmt *st);

/* Runs sql and calls fn per row; a query that does not prepare (a column
 * this version lacks) is an error naming the database and SQLite's text. */
static int each_row(ctx *c, const char *sql, row_fn fn)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) != SQLITE_OK) {
        pmt_errf(c->err, c->errlen, "%s: %s", c->src, sqlite3_errmsg(c->db));
        return -1;
    }
    int rc, r = 0;
    while (r == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW)
        r = fn(c, st);
    if (r == 0 && rc != SQLITE_DONE) {
        pmt_errf(c->err, c->errlen, "%s: %s", c->src, sqlite3_errmsg(c->db));
        r = -1;
    } else if (r < 0 && c->err && !*c->err)
        pmt_errf(c->err, c->errlen, "out of memory");
    sqlite3_finalize(st);
    return r;
}

/* ---- rocpd ---- */

/* start, end, name, pid, tid, correlation, category, thread name */
static const char rocpd_regions[] =
    "SELECT R.start, R.\"end\", S.string, P.pid, T.tid, E.correlation_id, C.string, T.name "
    "FROM rocpd_region R "
    "LEFT JOIN rocpd_string S ON S.id = R.name_id "
    "LEFT JOIN rocpd_info_process P ON P.id = R.pid "
    "LEFT JOIN rocpd_info_thread T ON T.id = R.tid "
    "LEFT JOIN rocpd_event E ON E.id = R.event_id "
    "LEFT JOIN rocpd_string C ON C.id = E.category_id "
    "ORDER BY R.start, R.id";

static int rocpd_region_row(ctx *c, sqlite3_stmt *st)
{
    uint64_t start = col_u64(st, 0), end = col_u64(st, 1), corr = col_u64(st, 5);
    uint32_t pid = (uint32_t)col_u64(st, 3), tid = (uint32_t)col_u64(st, 4);
    const char *cat = col_text(st, 6);
    if (*col_text(st, 7) && !pmt_trace_label_of(c->t, pid, tid) &&
        pmt_trace_label(c->t, pid, tid, col_text(st, 7)) < 0)
        return -1;
    if (!*cat || strncmp(cat, "MARKER_", 7) == 0) {
        /* line: the range's rank in the database, for messages */
        pmt_range r = {(char *)col_text(st, 2), (char *)(*cat ? cat : "MARKER_CORE_API"), pid, tid,
                       corr, start, end, 0, c->src, c->t->n + 1};
        return pmt_trace_add(c->t, &r);
    }
    if (!c->g)
        return 0;
    pmt_api a = {pid, tid, corr, start, end};
    *c->has_gpu = 1;
    return pmt_gpu_add_api(c->g, &a);
}

/* start, end, name, pid, tid, correlation, stream */
static const char rocpd_kernels[] =
    "SELECT K.start, K.\"end\", COALESCE(S.display_name, S.kernel_name, ''), P.pid, T.tid, "
    "E.correlation_id, K.stream_id "
    "FROM rocpd_kernel_dispatch K "
    "LEFT JOIN rocpd_info_kernel_symbol S ON S.id = K.kernel_id "
    "LEFT JOIN rocpd_info_process P ON P.id = K.pid "
    "LEFT JOIN rocpd_info_thread T ON T.id = K.tid "
    "LEFT JOIN rocpd_event E ON E.id = K.event_id ORDER BY K.start, K.id";

static const char rocpd_copies[] =
    "SELECT M.start, M.\"end\", COALESCE(S.string, ''), P.pid, T.tid, E.correlation_id, "
    "M.stream_id "
    "FROM rocpd_memory_copy M "
    "LEFT JOIN rocpd_string S ON S.id = M.name_id "
    "LEFT JOIN rocpd_info_process P ON P.id = M.pid "
    "LEFT JOIN rocpd_info_thread T ON T.id = M.tid "
    "LEFT JOIN rocpd_event E ON E.id = M.event_id ORDER BY M.start, M.id";

static int activity_row(ctx *c, sqlite3_stmt *st, int kind)
{
    pmt_activity a = {kind, col_u64(st, 5), col_u64(st, 0), col_u64(st, 1),
                      (uint32_t)col_u64(st, 4), (uint32_t)col_u64(st, 3),
                      (uint32_t)(col_u64(st, 6) & 0xFFFF), (char *)col_text(st, 2)};
    *c->has_gpu = 1;
    return pmt_gpu_add_activity(c->g, &a);
}

static int rocpd_kernel_row(ctx *c, sqlite3_stmt *st)
{
    return activity_row(c, st, PMT_ACT_KERNEL);
}

static int rocpd_copy_row(ctx *c, sqlite3_stmt *st)
{
    return activity_row(c, st, PMT_ACT_COPY);
}

static int load_rocpd(ctx *c)
{
    if (each_row(c, rocpd_regions, rocpd_region_row) < 0)
        return -1;
    if (!c->g)
        return 0;
    if (has_table(c->db, "rocpd_kernel_dispatch") && each_row(c, rocpd_kernels, rocpd_kernel_row) < 0)
        return -1;
    if (has_table(c->db, "rocpd_memory_copy") && each_row(c, rocpd_copies, rocpd_copy_row) < 0)
        return -1;
    return 0;
}

/* ---- Nsight Systems ---- */

enum { NVTX_MARK = 34, NVTX_PUSHPOP = 59, NVTX_STARTEND = 60, NVTX_DOMAIN = 75 };

/* pid and tid of a serialized global thread id. */
static uint32_t g_pid(uint64_t gtid)
{
    return (uint32_t)((gtid >> 24) & 0xFFFFFF);
}

static uint32_t g_tid(uint64_t gtid)
{
    return (uint32_t)(gtid & 0xFFFFFF);
}

/* start, end (NULL while open or for a mark), eventType, text, globalTid,
 * the domain's name */
static const char nsys_nvtx[] =
    "SELECT N.start, N.\"end\", N.eventType, COALESCE(N.text, S.value, ''), N.globalTid, "
    "(SELECT D.text FROM NVTX_EVENTS D WHERE D.eventType = 75 AND D.domainId = N.domainId "
    " AND N.domainId != 0 LIMIT 1) "
    "FROM NVTX_EVENTS N LEFT JOIN StringIds S ON S.id = N.textId "
    "WHERE N.eventType IN (34, 59, 60) ORDER BY N.start, N.rowid";
/* Older exports have no textId column. */
static const char nsys_nvtx_old[] =
    "SELECT N.start, N.\"end\", N.eventType, COALESCE(N.text, ''), N.globalTid, NULL "
    "FROM NVTX_EVENTS N WHERE N.eventType IN (34, 59, 60) ORDER BY N.start, N.rowid";

static int nsys_nvtx_row(ctx *c, sqlite3_stmt *st)
{
    uint64_t gtid = col_u64(st, 4), start = col_u64(st, 0);
    int open = sqlite3_column_type(st, 1) == SQLITE_NULL;
    int mark = sqlite3_column_int(st, 2) == NVTX_MARK;
    const char *domain = col_text(st, 5);
    pmt_range r = {(char *)col_text(st, 3), (char *)(*domain ? domain : "NVTX"), g_pid(gtid),
                   g_tid(gtid), 0, start, mark || open ? start : col_u64(st, 1),
                   mark ? PMT_F_MARK : open ? PMT_F_OPEN : 0, c->src, c->t->n + 1};
    return pmt_trace_add(c->t, &r);
}

static const char nsys_kernels[] =
    "SELECT K.start, K.\"end\", COALESCE(S.value, ''), K.globalPid, 0, K.correlationId, K.streamId "
    "FROM CUPTI_ACTIVITY_KIND_KERNEL K LEFT JOIN StringIds S ON S.id = K.demangledName "
    "ORDER BY K.start";

static const char nsys_copies[] =
    "SELECT M.start, M.\"end\", CASE M.copyKind WHEN 1 THEN 'MEMORY_COPY_HOST_TO_DEVICE' "
    "WHEN 2 THEN 'MEMORY_COPY_DEVICE_TO_HOST' WHEN 8 THEN 'MEMORY_COPY_DEVICE_TO_DEVICE' "
    "ELSE 'MEMORY_COPY' END, M.globalPid, 0, M.correlationId, M.streamId "
    "FROM CUPTI_ACTIVITY_KIND_MEMCPY M ORDER BY M.start";

static const char nsys_runtime[] =
    "SELECT R.start, R.\"end\", R.globalTid, R.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME R";

static int nsys_activity_row(ctx *c, sqlite3_stmt *st, int kind)
{
    pmt_activity a = {kind, col_u64(st, 5), col_u64(st, 0), col_u64(st, 1), 0,
                      g_pid(col_u64(st, 3)), (uint32_t)(col_u64(st, 6) & 0xFFFF),
                      (char *)col_text(st, 2)};
    *c->has_gpu = 1;
    return pmt_gpu_add_activity(c->g, &a);
}

static int nsys_kernel_row(ctx *c, sqlite3_stmt *st)
{
    return nsys_activity_row(c, st, PMT_ACT_KERNEL);
}

static int nsys_copy_row(ctx *c, sqlite3_stmt *st)
{
    return nsys_activity_row(c, st, PMT_ACT_COPY);
}

static int nsys_runtime_row(ctx *c, sqlite3_stmt *st)
{
    uint64_t gtid = col_u64(st, 2);
    pmt_api a = {g_pid(gtid), g_tid(gtid), col_u64(st, 3), col_u64(st, 0), col_u64(st, 1)};
    *c->has_gpu = 1;
    return pmt_gpu_add_api(c->g, &a);
}

static int load_nsys(ctx *c)
{
    if (has_table(c->db, "NVTX_EVENTS")) {
        sqlite3_stmt *probe;
        int has_textid = sqlite3_prepare_v2(c->db, "SELECT textId FROM NVTX_EVENTS", -1, &probe,
                                            NULL) == SQLITE_OK;
        sqlite3_finalize(probe);
        if (each_row(c, has_textid && has_table(c->db, "StringIds") ? nsys_nvtx : nsys_nvtx_old,
                     nsys_nvtx_row) < 0)
            return -1;
    }
    if (!c->g)
        return 0;
    static const struct {
        const char *table, *sql;
        row_fn fn;
    } gpu[] = {{"CUPTI_ACTIVITY_KIND_KERNEL", nsys_kernels, nsys_kernel_row},
               {"CUPTI_ACTIVITY_KIND_MEMCPY", nsys_copies, nsys_copy_row},
               {"CUPTI_ACTIVITY_KIND_RUNTIME", nsys_runtime, nsys_runtime_row}};
    for (size_t i = 0; i < sizeof gpu / sizeof gpu[0]; i++)
        if (has_table(c->db, gpu[i].table) && each_row(c, gpu[i].sql, gpu[i].fn) < 0)
            return -1;
    return 0;
}

/* ---- entry points ---- */

static int load_db(ctx *c)
{
    int dummy = 0;
    if (!c->has_gpu)
        c->has_gpu = &dummy;
    c->src = pmt_trace_source(c->t, c->src);
    if (!c->src) {
        pmt_errf(c->err, c->errlen, "out of memory");
        return -1;
    }
    int rc;
    if (has_table(c->db, "rocpd_region"))
        rc = load_rocpd(c);
    else if (has_table(c->db, "NVTX_EVENTS") || has_table(c->db, "CUPTI_ACTIVITY_KIND_KERNEL"))
        rc = load_nsys(c);
    else {
        pmt_errf(c->err, c->errlen, "%s: a SQLite database that is neither rocprofv3's rocpd "
                                    "(rocpd_region) nor an Nsight Systems export (NVTX_EVENTS)", c->src);
        rc = -1;
    }
    c->has_gpu = NULL;
    return rc;
}

int pmt_sqlite_load(pmt_trace *t, pmt_gpu *g, int *has_gpu, const char *path, char *err,
                    size_t errlen)
{
    ctx c = {NULL, t, g, has_gpu, path, err, errlen};
    if (sqlite3_open_v2(path, &c.db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        pmt_errf(err, errlen, "%s: %s", path, c.db ? sqlite3_errmsg(c.db) : "cannot open");
        sqlite3_close(c.db);
        return -1;
    }
    int rc = load_db(&c);
    sqlite3_close(c.db);
    return rc;
}

int pmt_sqlite_load_mem(pmt_trace *t, pmt_gpu *g, int *has_gpu, const char *name,
                        const void *data, size_t len, char *err, size_t errlen)
{
    ctx c = {NULL, t, g, has_gpu, name, err, errlen};
    unsigned char *copy = sqlite3_malloc64(len ? len : 1);
    if (!copy || sqlite3_open_v2(":memory:", &c.db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        sqlite3_free(copy);
        sqlite3_close(c.db);
        pmt_errf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(copy, data, len);
    /* The database owns copy from here (SQLITE_DESERIALIZE_FREEONCLOSE). */
    if (sqlite3_deserialize(c.db, "main", copy, (sqlite3_int64)len, (sqlite3_int64)len,
                            SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_READONLY) != SQLITE_OK) {
        pmt_errf(err, errlen, "%s: %s", name, sqlite3_errmsg(c.db));
        sqlite3_close(c.db);
        return -1;
    }
    int rc = load_db(&c);
    sqlite3_close(c.db);
    return rc;
}

#endif
