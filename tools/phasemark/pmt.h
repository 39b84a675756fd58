/* pmt.h — internals of the `phasemark` command, shared by its subcommands
 * and by the tests (which link the static library pm_tools).
 *
 * Model: a trace is a flat array of ranges (host intervals from a marker
 * trace), each with process, thread, correlation id and CLOCK_BOOTTIME
 * nanosecond timestamps, plus process and thread names. A GPU trace is a
 * flat array of activities (kernels, copies) and launch API calls joined by
 * correlation id. Every loader parses columns by header name and reports
 * the first problem as "FILE:LINE: what" into an err buffer; nothing here
 * prints except the functions that take a FILE * to print to.
 *
 * Ownership: a pmt_trace / pmt_gpu owns every string and array in it;
 * *_free releases them and leaves an empty, reusable value.
 */
#ifndef PM_TOOLS_PMT_H
#define PM_TOOLS_PMT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mark/kinds.h" /* the range-kind table, shared with the marker library */

/* ---- small utilities (util.c) ---- */

/* Reads a whole file (at most max bytes) into a new NUL-terminated buffer
 * the caller frees. Returns 0 or -1 with err set. */
int pmt_read_file(const char *path, size_t max, char **out, size_t *len, char *err, size_t errlen);

/* Strict unsigned decimal: digits only, no sign, no spaces, fits. 0 or -1. */
int pmt_parse_u64(const char *s, size_t len, uint64_t *out);

/* A decimal number of microseconds ("12.345", "7", "1e3") as exact
 * nanoseconds where the text allows (up to three decimals), rounded
 * otherwise. 0 or -1. */
int pmt_parse_us_to_ns(const char *s, size_t len, int64_t *out);

/* snprintf into err, never failing; a NULL or empty err is ignored. */
void pmt_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* capture's output folder (capdir.c): 0 when dir is empty, or with force
 * once the outputs of a previous capture are removed; -1 (printed) when it
 * holds files and force is 0. */
int pmt_capture_prepare_dir(const char *dir, int force);

/* Removes the plain files in dir, then dir (one level; best effort). */
void pmt_remove_tree(const char *dir);

/* Writes s as a CSV field: always quoted, quotes doubled. */
void pmt_csv_put(FILE *f, const char *s);
/* Writes s as a JSON string, quotes included, with the escapes JSON needs;
 * invalid UTF-8 is written as \ufffd (U+FFFD), one per bad byte. */
void pmt_json_put(FILE *f, const char *s);
/* Writes s as XML text or attribute content: markup characters as
 * entities, control characters (but tab, LF, CR) and invalid UTF-8 as
 * U+FFFD. */
void pmt_xml_put(FILE *f, const char *s);
/* Length (1..4) of the valid UTF-8 sequence at p, 0 when it is not one
 * (overlong, surrogate, past U+10FFFF, cut short); p is NUL-terminated. */
size_t pmt_utf8_len(const unsigned char *p);

/* ---- CSV reader (csv.c) ---- */

#define PMT_CSV_MAX_FIELDS 64

typedef struct pmt_csv {
    char *buf;        /* the whole file, unquoted in place */
    size_t len, pos;
    size_t line;      /* 1-based line of the record last returned */
    const char *path;
    char *header[PMT_CSV_MAX_FIELDS];
    size_t nheader;
} pmt_csv;

/* Loads path and reads its header record. 0 or -1 (err set). */
int pmt_csv_open(pmt_csv *c, const char *path, char *err, size_t errlen);
/* Parses an in-memory text (copied). For tests and stdin. */
int pmt_csv_open_text(pmt_csv *c, const char *name, const char *text, size_t len,
                      char *err, size_t errlen);
/* The column index of a header name, or -1. */
int pmt_csv_col(const pmt_csv *c, const char *name);
/* Next record: 1 and fields (valid until close), 0 at the end, -1 on a
 * malformed record (err set). Blank lines are skipped. */
int pmt_csv_next(pmt_csv *c, char **fields, size_t *nfields, char *err, size_t errlen);
void pmt_csv_close(pmt_csv *c);

/* ---- JSON (json.c): a small DOM, enough for trace files ---- */

enum pmt_json_type { PMT_JNULL, PMT_JBOOL, PMT_JNUM, PMT_JSTR, PMT_JARR, PMT_JOBJ };

typedef struct pmt_jnode {
    int type;
    const char *key;  /* member name when the parent is an object */
    const char *str;  /* string value, or the number's text */
    size_t len;       /* length of str */
    int boolean;
    int32_t child;    /* first child index, -1 none */
    int32_t next;     /* next sibling index, -1 none */
} pmt_jnode;

typedef struct pmt_json {
    pmt_jnode *nodes;
    size_t n, cap;
    char *text; /* owned copy, strings decoded in place */
} pmt_json;

/* Parses text (copied). Depth, size and node count are bounded. 0 or -1. */
int pmt_json_parse(pmt_json *j, const char *text, size_t len, char *err, size_t errlen);
void pmt_json_free(pmt_json *j);
/* Member of an object node by name, or NULL. */
const pmt_jnode *pmt_json_get(const pmt_json *j, const pmt_jnode *obj, const char *key);
const pmt_jnode *pmt_json_child(const pmt_json *j, const pmt_jnode *n);
const pmt_jnode *pmt_json_next(const pmt_json *j, const pmt_jnode *n);

/* ---- range names (names.c) ---- */

/* The kinds are the marker library's range-kind table (src/mark/kinds.h),
 * shifted by one to make room for ranges that are not ours. */
enum pmt_kind {
    PMT_K_OTHER = 0, /* not a phasemark range ("hipMemcpy", ...) */
#define PMT_K_ENUM(ID, ...) PMT_K_##ID = PM__KIND_##ID + 1,
    PM__KINDS(PMT_K_ENUM)
#undef PMT_K_ENUM
    PMT_K_COUNT = PM__KIND_COUNT + 1
};

/* One attribute of a known key (PM__KEYS), as parsed. */
typedef struct pmt_attr {
    const char *text; /* the value as written, len bytes inside the parsed name */
    size_t len;
    uint64_t u;    /* UINT: the value; SPAN: the first; MODE: the pm_phase;
                      WHERE: the pm_where (0 local, 1 remote); TEXT: 0;
                      REQS: the number of requests */
    uint64_t last; /* SPAN: the last; REQS: the sum of their tokens; else 0 */
} pmt_attr;

/* A parsed range name. attr[k] is set only where bit k of has is; it points
 * into the text parsed, so it is valid as long as that text is. Keys the
 * table does not know are allowed and not kept. */
typedef struct pmt_name {
    int kind;
    char mode[16]; /* "" when absent */
    uint32_t has;  /* bit PM__KEY_<ID>: that key was present */
    pmt_attr attr[PM__KEY_COUNT];
} pmt_name;

/* 1 when the name had key PM__KEY_<ID>. */
#define PMT_HAS(nm, ID) ((int)(((nm)->has >> PM__KEY_##ID) & 1u))

const char *pmt_kind_name(int kind); /* "other", a table name, or "invalid" */
int pmt_kind_parse(const char *s, size_t len); /* -1 when unknown */
int pmt_kind_is_leaf(int kind);
/* 1 when text starts with the prefix in force and its separator ("pm."
 * unless pmt_set_prefix said otherwise): a phasemark range, valid or not;
 * other names are other tools' ranges. */
int pmt_name_is_ours(const char *text);
/* Sets the prefix in force for the process ("ds4", or "ds4."). 0, or -1
 * when it is not [a-z0-9_]+ of at most PM__PREFIX_MAX bytes. Not
 * thread-safe: call it before reading traces. */
int pmt_set_prefix(const char *prefix);
/* The prefix in force, without its separator, into buf; returns buf. */
const char *pmt_prefix(char *buf, size_t cap);
struct pmt_trace;
/* The distinct prefixes of range names in t that read "<prefix>.<kind>"
 * for a table kind: returns how many (at most PMT_PREFIXES_MAX are
 * looked for) and writes them comma-separated into found. */
#define PMT_PREFIXES_MAX 8
int pmt_detect_prefix(const struct pmt_trace *t, char *found, size_t cap);
/* Steps through a reqs= value (R:T,R:T...) from *p to end: 1 with the
 * next entry, 0 at the end, -1 when malformed. */
int pmt_reqs_next(const char **p, const char *end, uint64_t *req, uint64_t *tokens);
/* Parses a range name. Names not starting with the prefix are PMT_K_OTHER
 * and always valid. Returns 0, or -1 with the grammar violation in err. */
int pmt_name_parse(const char *text, pmt_name *out, char *err, size_t errlen);

/* ---- traces (trace.c) ---- */

enum { PMT_F_OPEN = 1, PMT_F_ORPHAN = 2, PMT_F_MARK = 4 };

typedef struct pmt_range {
    char *name;
    char *domain;
    uint32_t pid, tid;
    uint64_t corr;
    uint64_t start, end; /* ns; end unused when OPEN, start when ORPHAN */
    unsigned flags;
    const char *source;  /* file it came from (a string the trace owns) */
    size_t line;         /* record in that file, for messages */
} pmt_range;

typedef struct pmt_label {
    uint32_t pid, tid; /* tid 0: a process name */
    char *name;
} pmt_label;

/* What a trace knows of one process's clock (clock.c): the boot it was
 * timed on, and whether its times were moved onto a driver's clock by an
 * offset the shard wire measured (tools/recorder/pmraw.h, "Clock
 * records"). */
typedef struct pmt_clock {
    uint32_t pid;
    uint8_t boot_id[16];  /* all zero: unknown (an older file, or no /proc) */
    int shifted;          /* 1: moved onto the driver's clock */
    int64_t offset_min, offset_max; /* ns added (several records: the range) */
    uint64_t bound_ns;    /* +- ns, the largest of its records */
    uint32_t records;     /* clock records applied */
    struct pmt_clock_point *points; /* those records, sorted (owned by the
                                       trace; none when read from clock.csv) */
    size_t npoints;
} pmt_clock;

typedef struct pmt_trace {
    pmt_range *r;
    size_t n, cap;
    pmt_label *labels;
    size_t nlabels, labels_cap;
    char **sources;
    size_t nsources;
    pmt_clock *clocks;    /* one per process with clock facts, by pid */
    size_t nclocks;
} pmt_trace;

void pmt_trace_init(pmt_trace *t);
void pmt_trace_free(pmt_trace *t);
/* Appends a range; copies name and domain. 0 or -1 (out of memory). */
int pmt_trace_add(pmt_trace *t, const pmt_range *r);
/* Sets a process (tid 0) or thread name; a later call replaces it. */
int pmt_trace_label(pmt_trace *t, uint32_t pid, uint32_t tid, const char *name);
const char *pmt_trace_label_of(const pmt_trace *t, uint32_t pid, uint32_t tid);
/* Remembers a source name; returns the trace's copy or NULL. */
const char *pmt_trace_source(pmt_trace *t, const char *path);
/* Loads a marker CSV (ours or rocprofv3's) or our JSON, by content. */
int pmt_trace_load(pmt_trace *t, const char *path, char *err, size_t errlen);
int pmt_trace_load_csv_text(pmt_trace *t, const char *name, const char *text, size_t len,
                            char *err, size_t errlen);
int pmt_trace_load_json_text(pmt_trace *t, const char *name, const char *text, size_t len,
                             char *err, size_t errlen);
/* Sorts by start time (orphans by end), then pid, tid, correlation. */
void pmt_trace_sort(pmt_trace *t);
/* Nesting order: pid, tid, start, then the longer range first, so that a
 * range comes before the ranges it encloses. <0, 0 or >0. */
int pmt_range_cmp_nested(const pmt_range *x, const pmt_range *y);
/* Sorts idx[0..n) (indices into t->r) into nesting order, equal ranges by
 * index. Not thread-safe (qsort takes no context). */
void pmt_trace_sort_nested(const pmt_trace *t, size_t *idx, size_t n);
int pmt_trace_write_csv(const pmt_trace *t, FILE *f);
int pmt_trace_write_json(const pmt_trace *t, FILE *f);
struct pmt_gpu;
/* The same with GPU activities added as complete events on one track per
 * process and stream (category PMT_GPU_CATEGORY, which the JSON loader
 * skips: they are not marker ranges). g may be NULL. */
int pmt_trace_write_json_gpu(const pmt_trace *t, const struct pmt_gpu *g, FILE *f);
#define PMT_GPU_CATEGORY "phasemark.gpu"
#define PMT_GPU_TRACK_BASE 0xFFFF0000u /* tid of stream 0's track */

/* ---- lane names (lanes.c) ---- */

/* The name to show for each process (tid 0) and thread of t: the role its
 * phasemark ranges give it ("server"; "shard 1 where=remote
 * backend=cuda:0"), the trace's own name, or "role (name)". *out, sorted
 * by pid then tid, holds one entry per lane that has a role or a name; the
 * caller frees it with pmt_lane_names_free. 0, or -1 out of memory (*out
 * NULL). Written to trace.json as Perfetto's process_name/thread_name
 * metadata and used for the picture's lanes. */
int pmt_lane_names(const pmt_trace *t, pmt_label **out, size_t *n);
void pmt_lane_names_free(pmt_label *names, size_t n);
/* The name of (pid, tid) in names[0..n) from pmt_lane_names, or NULL. */
const char *pmt_lane_name_of(const pmt_label *names, size_t n, uint32_t pid, uint32_t tid);

/* ---- raw recorder files (raw.c) ---- */

/* Merges one raw file into t, its ranges moved onto a driver's clock when
 * it holds clock records, and notes its process's clock (pmt_clock) when
 * it holds ranges or records. Returns 0, 1 when the file was cut short
 * (whole chunks kept, note in err), -1 when unreadable (err set). */
int pmt_raw_load(pmt_trace *t, const char *path, char *err, size_t errlen);
/* The same over bytes in memory; name labels messages. */
int pmt_raw_load_mem(pmt_trace *t, const char *name, const char *buf, size_t len, char *err,
                     size_t errlen);

/* ---- process clocks (clock.c) ---- */

/* One clock record of a process: at its own time at_ns, driver time =
 * its time + offset_ns, within +- bound_ns. */
typedef struct pmt_clock_point {
    uint64_t at_ns;
    int64_t offset_ns;
    uint64_t bound_ns;
} pmt_clock_point;

/* Sorts p[0..n) by at_ns (stable for equal times, the later record then
 * wins in pmt_clock_map). */
void pmt_clock_sort(pmt_clock_point *p, size_t n);
/* ns on the driver's clock: ns + the offset at ns, the offset being p[0]'s
 * before p[0], p[n-1]'s after p[n-1], and in between on the line through
 * the two records around ns, rounded toward minus infinity. Saturates at 0
 * and UINT64_MAX. p sorted, n >= 1. Pure. */
uint64_t pmt_clock_map(const pmt_clock_point *p, size_t n, uint64_t ns);
/* Adds what c says of its pid to t's table: a new entry, or merged into
 * the pid's entry (a process that exec'd has two files). c->points are
 * copied. 0 or -1. */
int pmt_clock_note(pmt_trace *t, const pmt_clock *c);
/* The boot id as a UUID ("8-4-4-4-12" lowercase hex), or "-" when unknown;
 * out has room for 37 bytes. */
const char *pmt_boot_id_text(const uint8_t id[16], char out[37]);
/* Copies a CSV of GPU records (the CUPTI recorder's kernels, copies or
 * API calls: columns Process_Id, Start_Timestamp, End_Timestamp) to out,
 * the header only when `header`, with the times of processes t moved onto
 * the driver's clock mapped as their ranges were. A text with no such
 * process is copied byte for byte; otherwise every field is written
 * quoted. 0, or -1 with err set (a malformed record). */
int pmt_clock_shift_csv(const pmt_trace *t, const char *name, const char *text, size_t len,
                        int header, FILE *out, char *err, size_t errlen);
/* DIR/clock.csv (written by capture, read with a capture DIR). */
int pmt_clock_write_csv(const pmt_trace *t, FILE *f);
int pmt_clock_load_csv(pmt_trace *t, const char *path, char *err, size_t errlen);
/* One line per process moved onto the driver's clock, each starting with
 * lead: "pid 200 (pm-shardd): on the driver's clock, shifted by
 * -5000000123 ns +- 41 ns (1 record)". Returns the lines printed. */
size_t pmt_clock_print(const pmt_trace *t, FILE *f, const char *lead);
/* Warns (lines starting with lead) when processes without a recorded
 * offset were timed on different boots (hosts), whose clocks do not
 * compare. Returns the number of warnings. */
size_t pmt_clock_warn(const pmt_trace *t, FILE *f, const char *lead);

/* ---- check (check.c) ---- */

typedef struct pmt_expect {
    int kind;          /* PMT_K_*; PMT_K_COUNT for "other" */
    char mode[16];     /* "" = any mode */
    uint64_t count;
} pmt_expect;

#define PMT_EXPECT_MAX 32

/* Parses "prefill=1,layer_range:exact=11". 0 or -1 (err set). */
int pmt_expect_parse(const char *spec, pmt_expect *out, size_t *n, char *err, size_t errlen);

/* Verifies t, printing one line per violation to out (may be NULL) and
 * the counts to summary (may be NULL). Returns the number of violations. */
size_t pmt_check(const pmt_trace *t, const pmt_expect *ex, size_t nex, FILE *out, FILE *summary);

/* ---- GPU activity and projection (gpu.c) ---- */

enum { PMT_ACT_KERNEL = 1, PMT_ACT_COPY = 2 };

typedef struct pmt_activity {
    int kind;
    uint64_t corr, start, end;
    uint32_t tid;    /* launching thread when the trace says, else 0 */
    uint32_t pid;    /* Process_Id when the trace has it, else 0 */
    uint32_t stream; /* Stream_Id when the trace has it, else 0 */
    char *name;
} pmt_activity;

typedef struct pmt_api {
    uint32_t pid, tid;
    uint64_t corr, start, end;
} pmt_api;

typedef struct pmt_gpu {
    /* activities and launch calls, in file order */
    pmt_activity *act;
    size_t nact, act_cap;
    pmt_api *api;
    size_t napi, api_cap;
} pmt_gpu;

void pmt_gpu_init(pmt_gpu *g);
void pmt_gpu_free(pmt_gpu *g);
/* Loads a kernel, memory-copy or API CSV (rocprofv3's or ours), by its
 * columns. 0 or -1. */
int pmt_gpu_load(pmt_gpu *g, const char *path, char *err, size_t errlen);
int pmt_gpu_load_text(pmt_gpu *g, const char *name, const char *text, size_t len,
                      char *err, size_t errlen);

/* Appends a launch call / an activity (its name copied). 0 or -1. */
int pmt_gpu_add_api(pmt_gpu *g, const pmt_api *a);
int pmt_gpu_add_activity(pmt_gpu *g, const pmt_activity *a);

typedef struct pmt_projection {
    uint64_t *range_gpu_ns; /* per range of the trace: activity time launched inside */
    uint64_t total_ns;      /* all activity time */
    uint64_t matched_ns;    /* activity whose launch call was found */
    uint64_t covered_ns;    /* launched inside at least one phasemark range */
    uint64_t uncovered_ns;  /* total - covered */
    size_t nact, nmatched, ncovered;
} pmt_projection;

/* Projects every activity onto the ranges enclosing its launch call on the
 * same process and thread (every level of the nest gets it, as Nsight
 * Systems' NVTX projection does). Returns 0 or -1 (out of memory). */
int pmt_project(const pmt_trace *t, const pmt_gpu *g, pmt_projection *p);
void pmt_projection_free(pmt_projection *p);

/* ---- time per request (attrib.c) ---- */

typedef struct pmt_req_share {
    uint64_t req;
    uint64_t ns;     /* host time of its phase ranges, batches shared by tokens */
    uint64_t gpu_ns; /* the same for projected GPU time (0 without one) */
    uint64_t tokens; /* tokens it had in them (a decode step without tokens= is 1) */
    uint64_t ranges; /* phase and batch ranges it took part in */
} pmt_req_share;

/* Time per request: a prefill, decode or spec_decode range of req R gives
 * its duration (and p's GPU time for it, when p is not NULL) to R; a batch
 * range shares its own among its reqs by tokens, in integer ns that add up
 * exactly (floors, then one ns each in list order). *out, sorted by req,
 * is the caller's to free. 0, or -1 out of memory (*out NULL). For report:
 * one row per request. */
int pmt_request_shares(const pmt_trace *t, const pmt_projection *p, pmt_req_share **out,
                       size_t *nout);

/* ---- report (report.c) ---- */

/* What the rows of a report are. ALL: each kind, kind and mode, kind and
 * shard, kind, shard and layer span (the default); the others one family. */
enum { PMT_BY_ALL, PMT_BY_KIND, PMT_BY_SHARD, PMT_BY_LAYERS, PMT_BY_REQ, PMT_BY_PROCESS };

typedef struct pmt_report_opts {
    int json;          /* one JSON object per row instead of the table */
    int group_by;      /* PMT_BY_* */
    int has_req;       /* only ranges with req=req */
    uint64_t req;
    int has_window;    /* only ranges that start in [w0, w1), ns after the trace's first start */
    uint64_t w0, w1;
    int no_requests;   /* leave out the per-request table */
    size_t violations; /* check violations found by the caller, for the footer */
} pmt_report_opts;

/* "kind", "req", ... into *out (PMT_BY_*). 0 or -1. */
int pmt_group_by_parse(const char *s, int *out);
/* "T0..T1", each end a number with an optional unit (ns, us, ms, s; bare
 * numbers are ns), either end may be empty. 0 or -1 (err set). */
int pmt_window_parse(const char *s, uint64_t *w0, uint64_t *w1, char *err, size_t errlen);

#define PMT_GROUP_KEY 112

typedef struct pmt_group {
    char key[PMT_GROUP_KEY];
    uint64_t *dur; /* sorted ascending once built */
    size_t n, cap;
    uint64_t total, gpu;
} pmt_group;

typedef struct pmt_groups {
    pmt_group *g;      /* sorted by total, largest first, then by key */
    size_t n, cap;
    size_t *slot;      /* hash of key -> index + 1; 0 empty */
    size_t nslot;
    uint64_t wall;      /* first start to last end of the selected ranges */
    uint64_t lane_span; /* sum over lanes (pid, tid) of each lane's first start to last end */
    size_t lanes;
    uint64_t gpu_total; /* all activity time (0 without a projection) */
} pmt_groups;

/* Groups the closed ranges of t that o selects. p may be NULL. 0 or -1
 * (out of memory). pmt_groups_free releases. */
int pmt_groups_build(const pmt_trace *t, const pmt_projection *p, const pmt_report_opts *o,
                     pmt_groups *gs);
void pmt_groups_free(pmt_groups *gs);
const pmt_group *pmt_groups_find(const pmt_groups *gs, const char *key);
/* Nearest-rank percentile of sorted[0..n), n > 0. */
uint64_t pmt_pct(const uint64_t *sorted, size_t n, unsigned p);

/* One request's time to first token and decode rate, from its prefill,
 * decode and spec_decode ranges (ranges of the driving process). */
typedef struct pmt_request {
    uint64_t req;
    uint64_t first_start;   /* first prefill's start */
    uint64_t prefill_ns;    /* sum of prefill chunk durations */
    size_t prefill_chunks;
    uint64_t prefill_end;   /* last prefill end before the first decode step */
    uint64_t first_decode_start, first_decode_end; /* 0 when none */
    size_t decode_steps;    /* pm.decode ranges: one token each */
    uint64_t decode_first, decode_last; /* first pm.decode start, last end */
    size_t spec_rounds;
    uint64_t drafted;       /* sum of draft= over the rounds */
} pmt_request;

/* The requests of the ranges o selects, sorted by id; *out is the caller's
 * to free. 0 or -1 (out of memory). */
int pmt_requests(const pmt_trace *t, const pmt_report_opts *o, pmt_request **out, size_t *n);

int pmt_report(const pmt_trace *t, const pmt_projection *p, const pmt_report_opts *o, FILE *out);
/* The timeline picture (svg.c, which states the level-of-detail rule): an
 * SVG file, or the same inline in one self-contained HTML file. g may be
 * NULL. 0, or -1 out of memory or on a write error. */
#define PMT_TIMELINE_WIDTH 1400 /* px of the time axis: one column each */
#define PMT_TIMELINE_DEPTH 32   /* nesting rows per lane; deeper share the last */
int pmt_svg(const pmt_trace *t, const pmt_gpu *g, FILE *out);
int pmt_html(const pmt_trace *t, const pmt_gpu *g, FILE *out);
/* Appends a generated two-shard serving trace (synth.c states its exact
 * shape): requests of one prefill and steps decode steps, 4 + 4 * steps
 * ranges each, for the timeline's tests and bench. 0 or -1. */
int pmt_synth_serving(pmt_trace *t, size_t requests, size_t steps);

/* ---- inputs (load.c, readers.c) ---- */

/* Loads one input into t (and its GPU activity into g, which may be NULL):
 * a capture DIR, a marker CSV or JSON, or another profiler's file
 * (pmt_readers_load). *has_gpu is set when GPU records were read. 0 or -1. */
int pmt_load_input(pmt_trace *t, pmt_gpu *g, int *has_gpu, const char *path, char *err,
                   size_t errlen);
/* Loads path when it is a file another profiler wrote (rocprofv3's rocpd
 * database, an Nsight Systems SQLite export, a torch.profiler trace).
 * Returns 0 (loaded), 1 (not such a file: the caller tries our formats),
 * or -1 (err set). */
int pmt_readers_load(pmt_trace *t, pmt_gpu *g, int *has_gpu, const char *path, char *err,
                     size_t errlen);

/* torch.profiler's Chrome trace in memory (readers.c): 0 loaded, 1 not a
 * torch trace, -1 error. g may be NULL (GPU records skipped). */
int pmt_torch_load_text(pmt_trace *t, pmt_gpu *g, int *has_gpu, const char *name, const char *text,
                        size_t len, char *err, size_t errlen);
/* A SQLite file (sqlite.c): rocprofv3's rocpd database or an Nsight
 * Systems export, told by its tables. 0 or -1 (err set; also when the
 * build has no SQLite). */
int pmt_sqlite_load(pmt_trace *t, pmt_gpu *g, int *has_gpu, const char *path, char *err,
                    size_t errlen);
/* The same over a database image in memory (for the fuzzer). */
int pmt_sqlite_load_mem(pmt_trace *t, pmt_gpu *g, int *has_gpu, const char *name,
                        const void *data, size_t len, char *err, size_t errlen);

/* The version line every program prints for --version. */
#define PMT_VERSION_LINE "phasemark " PHASEMARK_VERSION_STRING

/* ---- SHA-256 through libnettle (util.c) ---- */

/* Lowercase hex SHA-256 of len bytes into hex (65 bytes with the NUL). */
void pmt_sha256_hex(const void *data, size_t len, char hex[65]);

/* ---- subcommands (one file each); argv[0] is the subcommand name ---- */

int pmt_cmd_capture(int argc, char **argv);
int pmt_cmd_check(int argc, char **argv);
int pmt_cmd_report(int argc, char **argv);
int pmt_cmd_perturb(int argc, char **argv);
int pmt_cmd_diff(int argc, char **argv);

/* Where the recorder libraries are: PHASEMARK_RECORDER / PHASEMARK_CUPTI
 * in the environment, else next to this executable's install or build
 * location. NULL when none exists. */
const char *pmt_recorder_path(char *buf, size_t len);
const char *pmt_cupti_path(char *buf, size_t len);

#endif
