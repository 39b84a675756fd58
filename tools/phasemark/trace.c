/* trace.c — the range trace: storage, marker-CSV and Chrome-JSON loading,
 * and writing both formats.
 *
 * CSV (ours and rocprofv3's marker trace; a leading "Guid" column or any
 * other extra column is ignored, rows may be unsorted): an empty
 * Start_Timestamp is a pop without a push, an empty End_Timestamp a range
 * never closed. JSON: Chrome trace events; "X" complete events, "B"/"E"
 * pairs per thread, "i" instants (marks), "M" process/thread names; ts and
 * dur in microseconds, converted to integer nanoseconds exactly for up to
 * three decimals (what we write).
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "pmt.h"

#define PMT_TRACE_FILE_MAX ((size_t)1 << 31)

void pmt_trace_init(pmt_trace *t)
{
    memset(t, 0, sizeof *t);
}

void pmt_trace_free(pmt_trace *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->r[i].name);
        free(t->r[i].domain);
    }
    for (size_t i = 0; i < t->nlabels; i++)
        free(t->labels[i].name);
    for (size_t i = 0; i < t->nsources; i++)
        free(t->sources[i]);
    free(t->r);
    free(t->labels);
    free(t->sources);
    for (size_t i = 0; i < t->nclocks; i++)
        free(t->clocks[i].points);
    free(t->clocks);
    pmt_trace_init(t);
}

int pmt_trace_add(pmt_trace *t, const pmt_range *r)
{
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 256;
        pmt_range *nr = realloc(t->r, ncap * sizeof *nr);
        if (!nr)
            return -1;
        t->r = nr;
        t->cap = ncap;
    }
    pmt_range *d = &t->r[t->n];
    *d = *r;
    d->name = strdup(r->name ? r->name : "");
    d->domain = strdup(r->domain ? r->domain : "");
    if (!d->name || !d->domain) {
        free(d->name);
        free(d->domain);
        return -1;
    }
    t->n++;
    return 0;
}

int pmt_trace_label(pmt_trace *t, uint32_t pid, uint32_t tid, const char *name)
{
    char *copy = strdup(name);
    if (!copy)
        return -1;
    for (size_t i = 0; i < t->nlabels; i++) {
        if (t->labels[i].pid == pid && t->labels[i].tid == tid) {
            free(t->labels[i].name);
            t->labels[i].name = copy;
            return 0;
        }
    }
    if (t->nlabels == t->labels_cap) {
        size_t ncap = t->labels_cap ? t->labels_cap * 2 : 16;
        pmt_label *nl = realloc(t->labels, ncap * sizeof *nl);
        if (!nl) {
            free(copy);
            return -1;
        }
        t->labels = nl;
        t->labels_cap = ncap;
    }
    t->labels[t->nlabels++] = (pmt_label){pid, tid, copy};
    return 0;
}

const char *pmt_trace_label_of(const pmt_trace *t, uint32_t pid, uint32_t tid)
{
    for (size_t i = 0; i < t->nlabels; i++)
        if (t->labels[i].pid == pid && t->labels[i].tid == tid)
            return t->labels[i].name;
    return NULL;
}

const char *pmt_trace_source(pmt_trace *t, const char *path)
{
    char **ns = realloc(t->sources, (t->nsources + 1) * sizeof *ns);
    if (!ns)
        return NULL;
    t->sources = ns;
    ns[t->nsources] = strdup(path);
    return ns[t->nsources] ? ns[t->nsources++] : NULL;
}

/* ---- CSV ---- */

typedef struct csv_cols {
    int domain, function, pid, tid, corr, start, end;
} csv_cols;

static int u32_field(const char *s, uint32_t *out)
{
    uint64_t v;
    if (pmt_parse_u64(s, strlen(s), &v) < 0 || v > UINT32_MAX)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* One marker row into a range. */
static int csv_row(pmt_csv *c, const csv_cols *k, char **f, size_t nf, pmt_range *r,
                   char *err, size_t errlen)
{
    int need = k->function > k->start ? k->function : k->start;
    need = need > k->end ? need : k->end;
    if (nf <= (size_t)need || (k->pid >= 0 && nf <= (size_t)k->pid) ||
        (k->tid >= 0 && nf <= (size_t)k->tid) || (k->corr >= 0 && nf <= (size_t)k->corr)) {
        pmt_errf(err, errlen, "%s:%zu: %zu fields, the header has %zu", c->path, c->line, nf,
                 c->nheader);
        return -1;
    }
    r->name = f[k->function];
    r->domain = k->domain >= 0 && nf > (size_t)k->domain ? f[k->domain] : "";
    const char *bad = NULL;
    if (k->pid >= 0 && u32_field(f[k->pid], &r->pid) < 0)
        bad = "Process_Id";
    else if (k->tid >= 0 && u32_field(f[k->tid], &r->tid) < 0)
        bad = "Thread_Id";
    else if (k->corr >= 0 && *f[k->corr] && pmt_parse_u64(f[k->corr], strlen(f[k->corr]), &r->corr) < 0)
        bad = "Correlation_Id";
    else if (*f[k->start] && pmt_parse_u64(f[k->start], strlen(f[k->start]), &r->start) < 0)
        bad = "Start_Timestamp";
    else if (*f[k->end] && pmt_parse_u64(f[k->end], strlen(f[k->end]), &r->end) < 0)
        bad = "End_Timestamp";
    if (bad) {
        pmt_errf(err, errlen, "%s:%zu: %s is not an unsigned integer", c->path, c->line, bad);
        return -1;
    }
    if (!*f[k->start] && !*f[k->end]) {
        pmt_errf(err, errlen, "%s:%zu: neither start nor end", c->path, c->line);
        return -1;
    }
    r->flags = !*f[k->start] ? PMT_F_ORPHAN : !*f[k->end] ? PMT_F_OPEN : 0;
    return 0;
}

static int load_csv(pmt_trace *t, pmt_csv *c, char *err, size_t errlen)
{
    csv_cols k = {pmt_csv_col(c, "Domain"), pmt_csv_col(c, "Function"),
                  pmt_csv_col(c, "Process_Id"), pmt_csv_col(c, "Thread_Id"),
                  pmt_csv_col(c, "Correlation_Id"), pmt_csv_col(c, "Start_Timestamp"),
                  pmt_csv_col(c, "End_Timestamp")};
    if (k.function < 0 || k.start < 0 || k.end < 0) {
        pmt_errf(err, errlen, "%s: not a marker trace (needs Function, Start_Timestamp, End_Timestamp columns)",
                 c->path);
        return -1;
    }
    const char *src = pmt_trace_source(t, c->path);
    char *f[PMT_CSV_MAX_FIELDS];
    size_t nf;
    int rc;
    while ((rc = pmt_csv_next(c, f, &nf, err, errlen)) > 0) {
        pmt_range r = {0};
        if (csv_row(c, &k, f, nf, &r, err, errlen) < 0)
            return -1;
        r.source = src;
        r.line = c->line;
        if (pmt_trace_add(t, &r) < 0) {
            pmt_errf(err, errlen, "out of memory");
            return -1;
        }
    }
    return rc;
}

int pmt_trace_load_csv_text(pmt_trace *t, const char *name, const char *text, size_t len,
                            char *err, size_t errlen)
{
    pmt_csv c;
    if (pmt_csv_open_text(&c, name, text, len, err, errlen) < 0)
        return -1;
    int rc = load_csv(t, &c, err, errlen);
    pmt_csv_close(&c);
    return rc;
}

/* ---- JSON ---- */

typedef struct open_b {
    uint32_t pid, tid;
    size_t idx;
} open_b;

static int json_u32(const pmt_jnode *n, uint32_t *out)
{
    uint64_t v;
    if (!n) {
        *out = 0;
        return 0;
    }
    if ((n->type != PMT_JNUM && n->type != PMT_JSTR) || pmt_parse_u64(n->str, n->len, &v) < 0 ||
        v > UINT32_MAX)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int json_ns(const pmt_jnode *n, uint64_t *out)
{
    int64_t v;
    if (!n || n->type != PMT_JNUM || pmt_parse_us_to_ns(n->str, n->len, &v) < 0)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

static const char *json_str(const pmt_jnode *n)
{
    return n && n->type == PMT_JSTR ? n->str : "";
}

/* Closes the innermost "B" of (pid, tid), or records a pop without push. */
static int json_end(pmt_trace *t, open_b *stack, size_t *nstack, pmt_range *r)
{
    for (size_t i = *nstack; i-- > 0;) {
        if (stack[i].pid == r->pid && stack[i].tid == r->tid) {
            t->r[stack[i].idx].end = r->start;
            t->r[stack[i].idx].flags &= ~(unsigned)PMT_F_OPEN;
            memmove(&stack[i], &stack[i + 1], (*nstack - i - 1) * sizeof *stack);
            (*nstack)--;
            return 0;
        }
    }
    r->end = r->start;
    r->start = 0;
    r->flags = PMT_F_ORPHAN;
    return pmt_trace_add(t, r);
}

static int json_meta(pmt_trace *t, const pmt_json *j, const pmt_jnode *ev, const pmt_range *r)
{
    const char *what = json_str(pmt_json_get(j, ev, "name"));
    const char *name = json_str(pmt_json_get(j, pmt_json_get(j, ev, "args"), "name"));
    if (strcmp(what, "process_name") == 0)
        return pmt_trace_label(t, r->pid, 0, name);
    if (strcmp(what, "thread_name") == 0 && r->tid)
        return pmt_trace_label(t, r->pid, r->tid, name);
    return 0;
}

/* One trace event; stack holds unmatched "B" events (bounded by cap). */
static int json_event(pmt_trace *t, const pmt_json *j, const pmt_jnode *ev, open_b *stack,
                      size_t *nstack, size_t cap, const char *src, size_t idx, char *err,
                      size_t errlen)
{
    const char *ph = json_str(pmt_json_get(j, ev, "ph"));
    pmt_range r = {0};
    r.source = src;
    r.line = idx;
    if (ev->type != PMT_JOBJ || json_u32(pmt_json_get(j, ev, "pid"), &r.pid) < 0 ||
        json_u32(pmt_json_get(j, ev, "tid"), &r.tid) < 0) {
        pmt_errf(err, errlen, "%s: event %zu: not an object with numeric pid/tid", src, idx);
        return -1;
    }
    if (strcmp(ph, "M") == 0)
        return json_meta(t, j, ev, &r) < 0 ? -1 : 0;
    if (!strchr("XBEiIR", ph[0]) || !ph[0] || ph[1])
        return 0; /* counters, flows, async events: not ranges */
    if (strcmp(json_str(pmt_json_get(j, ev, "cat")), PMT_GPU_CATEGORY) == 0)
        return 0; /* GPU activity we wrote next to the ranges */
    r.name = (char *)json_str(pmt_json_get(j, ev, "name"));
    r.domain = (char *)json_str(pmt_json_get(j, ev, "cat"));
    const pmt_jnode *corr = pmt_json_get(j, pmt_json_get(j, ev, "args"), "corr");
    if (corr && (corr->type != PMT_JNUM || pmt_parse_u64(corr->str, corr->len, &r.corr) < 0)) {
        pmt_errf(err, errlen, "%s: event %zu: args.corr is not an unsigned integer", src, idx);
        return -1;
    }
    uint64_t dur = 0;
    if (json_ns(pmt_json_get(j, ev, "ts"), &r.start) < 0 ||
        (ph[0] == 'X' && json_ns(pmt_json_get(j, ev, "dur"), &dur) < 0)) {
        pmt_errf(err, errlen, "%s: event %zu: missing or bad ts/dur", src, idx);
        return -1;
    }
    if (ph[0] == 'E')
        return json_end(t, stack, nstack, &r);
    r.end = r.start + dur;
    r.flags = ph[0] == 'B' ? PMT_F_OPEN : (ph[0] == 'X' ? 0 : PMT_F_MARK);
    if (ph[0] == 'B') {
        if (*nstack == cap) {
            pmt_errf(err, errlen, "%s: more than %zu ranges open at once", src, cap);
            return -1;
        }
        stack[(*nstack)++] = (open_b){r.pid, r.tid, t->n};
    }
    return pmt_trace_add(t, &r);
}

int pmt_trace_load_json_text(pmt_trace *t, const char *name, const char *text, size_t len,
                             char *err, size_t errlen)
{
    pmt_json j;
    char jerr[160];
    if (pmt_json_parse(&j, text, len, jerr, sizeof jerr) < 0) {
        pmt_errf(err, errlen, "%s: %s", name, jerr);
        return -1;
    }
    const pmt_jnode *root = &j.nodes[0];
    const pmt_jnode *events = root->type == PMT_JARR ? root : pmt_json_get(&j, root, "traceEvents");
    const char *src = pmt_trace_source(t, name);
    int rc = 0;
    enum { STACK_CAP = 4096 };
    open_b *stack = malloc(STACK_CAP * sizeof *stack);
    size_t nstack = 0, idx = 0;
    if (!events || events->type != PMT_JARR || !stack) {
        pmt_errf(err, errlen, "%s: %s", name, stack ? "no traceEvents array" : "out of memory");
        rc = -1;
    }
    for (const pmt_jnode *ev = rc ? NULL : pmt_json_child(&j, events); ev; ev = pmt_json_next(&j, ev)) {
        if (json_event(t, &j, ev, stack, &nstack, STACK_CAP, src, idx++, err, errlen) < 0) {
            rc = -1;
            break;
        }
    }
    free(stack);
    pmt_json_free(&j);
    return rc;
}

int pmt_trace_load(pmt_trace *t, const char *path, char *err, size_t errlen)
{
    char *text;
    size_t len;
    if (pmt_read_file(path, PMT_TRACE_FILE_MAX, &text, &len, err, errlen) < 0)
        return -1;
    size_t i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r'))
        i++;
    int rc = (i < len && (text[i] == '{' || text[i] == '['))
                 ? pmt_trace_load_json_text(t, path, text, len, err, errlen)
                 : pmt_trace_load_csv_text(t, path, text, len, err, errlen);
    free(text);
    return rc;
}

/* ---- sorting and writing ---- */

static uint64_t sort_key(const pmt_range *r)
{
    return (r->flags & PMT_F_ORPHAN) ? r->end : r->start;
}

static int cmp_range(const void *a, const void *b)
{
    const pmt_range *x = a, *y = b;
    uint64_t kx = sort_key(x), ky = sort_key(y);
    if (kx != ky)
        return kx < ky ? -1 : 1;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->corr != y->corr)
        return x->corr < y->corr ? -1 : 1;
    return 0;
}

void pmt_trace_sort(pmt_trace *t)
{
    if (t->n)
        qsort(t->r, t->n, sizeof *t->r, cmp_range);
}

int pmt_range_cmp_nested(const pmt_range *x, const pmt_range *y)
{
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->end > y->end ? -1 : x->end < y->end;
}

static const pmt_range *g_nested_base; /* qsort has no context argument */

static int cmp_nested_idx(const void *a, const void *b)
{
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    int c = pmt_range_cmp_nested(&g_nested_base[i], &g_nested_base[j]);
    return c ? c : (i > j) - (i < j);
}

void pmt_trace_sort_nested(const pmt_trace *t, size_t *idx, size_t n)
{
    g_nested_base = t->r;
    qsort(idx, n, sizeof *idx, cmp_nested_idx);
    g_nested_base = NULL;
}

int pmt_trace_write_csv(const pmt_trace *t, FILE *f)
{
    fputs("\"Domain\",\"Function\",\"Process_Id\",\"Thread_Id\",\"Correlation_Id\","
          "\"Start_Timestamp\",\"End_Timestamp\"\n", f);
    for (size_t i = 0; i < t->n; i++) {
        const pmt_range *r = &t->r[i];
        pmt_csv_put(f, r->domain);
        fputc(',', f);
        pmt_csv_put(f, r->name);
        fprintf(f, ",%u,%u,%llu,", r->pid, r->tid, (unsigned long long)r->corr);
        if (!(r->flags & PMT_F_ORPHAN))
            fprintf(f, "%llu", (unsigned long long)r->start);
        fputc(',', f);
        if (!(r->flags & PMT_F_OPEN))
            fprintf(f, "%llu", (unsigned long long)r->end);
        fputc('\n', f);
    }
    return ferror(f) ? -1 : 0;
}

static void put_us(FILE *f, const char *key, uint64_t ns)
{
    fprintf(f, ",\"%s\":%llu.%03u", key, (unsigned long long)(ns / 1000), (unsigned)(ns % 1000));
}

/* Perfetto's names for processes and threads (pmt_lane_names). */
static int json_labels(const pmt_trace *t, FILE *f, int *first)
{
    pmt_label *ls;
    size_t n;
    if (pmt_lane_names(t, &ls, &n) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%s\n{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%u", *first ? "" : ",",
                ls[i].tid ? "thread_name" : "process_name", ls[i].pid);
        if (ls[i].tid)
            fprintf(f, ",\"tid\":%u", ls[i].tid);
        fputs(",\"args\":{\"name\":", f);
        pmt_json_put(f, ls[i].name);
        fputs("}}", f);
        *first = 0;
    }
    pmt_lane_names_free(ls, n);
    return 0;
}

/* GPU activities: one track per process and stream, named once. */
static void json_gpu(const pmt_gpu *g, FILE *f, int *first)
{
    for (size_t i = 0; g && i < g->nact; i++) {
        const pmt_activity *a = &g->act[i];
        uint32_t tid = PMT_GPU_TRACK_BASE + a->stream;
        size_t j = 0;
        while (j < i && (g->act[j].pid != a->pid || g->act[j].stream != a->stream))
            j++;
        if (j == i) /* first activity of this track */
            fprintf(f, "%s\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":%u,"
                       "\"args\":{\"name\":\"GPU stream %u\"}}",
                    *first ? "" : ",", a->pid, tid, a->stream);
        *first = 0;
        fputs(",\n{\"name\":", f);
        pmt_json_put(f, a->name);
        fprintf(f, ",\"cat\":\"" PMT_GPU_CATEGORY "\",\"ph\":\"X\",\"pid\":%u,\"tid\":%u", a->pid, tid);
        put_us(f, "ts", a->start);
        put_us(f, "dur", a->end >= a->start ? a->end - a->start : 0);
        fprintf(f, ",\"args\":{\"corr\":%llu}}", (unsigned long long)a->corr);
    }
}

int pmt_trace_write_json(const pmt_trace *t, FILE *f)
{
    return pmt_trace_write_json_gpu(t, NULL, f);
}

int pmt_trace_write_json_gpu(const pmt_trace *t, const pmt_gpu *g, FILE *f)
{
    int first = 1;
    fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", f);
    if (json_labels(t, f, &first) < 0)
        return -1;
    json_gpu(g, f, &first);
    for (size_t i = 0; i < t->n; i++) {
        const pmt_range *r = &t->r[i];
        const char *ph = (r->flags & PMT_F_OPEN) ? "B" : (r->flags & PMT_F_ORPHAN) ? "E"
                       : (r->flags & PMT_F_MARK) ? "i" : "X";
        fprintf(f, "%s\n{\"name\":", first ? "" : ",");
        first = 0;
        pmt_json_put(f, r->name);
        fputs(",\"cat\":", f);
        pmt_json_put(f, r->domain);
        fprintf(f, ",\"ph\":\"%s\",\"pid\":%u,\"tid\":%u", ph, r->pid, r->tid);
        put_us(f, "ts", (r->flags & PMT_F_ORPHAN) ? r->end : r->start);
        if (ph[0] == 'X')
            put_us(f, "dur", r->end >= r->start ? r->end - r->start : 0);
        if (ph[0] == 'i')
            fputs(",\"s\":\"t\"", f);
        fprintf(f, ",\"args\":{\"corr\":%llu}}", (unsigned long long)r->corr);
    }
    fputs("\n]}\n", f);
    return ferror(f) ? -1 : 0;
}
