/* clock.c — which clock each process of a trace was timed on.
 *
 * CLOCK_BOOTTIME is one time line per boot of one host: two processes of
 * one boot compare directly, two of different hosts do not. A shard daemon
 * on another host gets an offset to the driver's clock measured over the
 * shard wire (docs/wire.md, "Clock alignment") and recorded in its raw
 * file; the raw reader moves its times by it (pmt_clock_map), and the
 * trace keeps, per process, its boot id and the offset applied, so that
 * capture can state it (DIR/clock.csv), report can print it, and check can
 * warn when a trace mixes hosts with nothing to align them.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "pmt.h"

__extension__ typedef __int128 i128;

static int point_cmp(const void *a, const void *b)
{
    const pmt_clock_point *x = a, *y = b;
    return (x->at_ns > y->at_ns) - (x->at_ns < y->at_ns);
}

void pmt_clock_sort(pmt_clock_point *p, size_t n)
{
    /* Insertion sort: stable, and a process has a handful of records. */
    for (size_t i = 1; i < n; i++) {
        pmt_clock_point v = p[i];
        size_t j = i;
        while (j > 0 && point_cmp(&p[j - 1], &v) > 0) {
            p[j] = p[j - 1];
            j--;
        }
        p[j] = v;
    }
}

/* floor(a / b) for b > 0. */
static i128 floor_div(i128 a, i128 b)
{
    i128 q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

uint64_t pmt_clock_map(const pmt_clock_point *p, size_t n, uint64_t ns)
{
    i128 off;
    size_t i = 0;
    while (i < n && p[i].at_ns <= ns)
        i++;
    /* p[i-1].at <= ns < p[i].at */
    if (i == 0)
        off = p[0].offset_ns;
    else if (i == n)
        off = p[n - 1].offset_ns;
    else {
        const pmt_clock_point *a = &p[i - 1], *b = &p[i];
        off = a->offset_ns + floor_div((i128)(b->offset_ns - (i128)a->offset_ns) *
                                           (i128)(ns - a->at_ns),
                                       (i128)(b->at_ns - a->at_ns));
    }
    i128 v = (i128)ns + off;
    if (v < 0)
        return 0;
    if (v > (i128)UINT64_MAX)
        return UINT64_MAX;
    return (uint64_t)v;
}

static int zero_id(const uint8_t id[16])
{
    for (int i = 0; i < 16; i++)
        if (id[i])
            return 0;
    return 1;
}

const char *pmt_boot_id_text(const uint8_t id[16], char out[37])
{
    static const char hex[] = "0123456789abcdef";
    if (zero_id(id)) {
        memcpy(out, "-", 2);
        return out;
    }
    char *p = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *p++ = '-';
        *p++ = hex[id[i] >> 4];
        *p++ = hex[id[i] & 15];
    }
    *p = 0;
    return out;
}

/* The inverse of pmt_boot_id_text ("-" or "" is unknown). 0 or -1. */
static int boot_id_parse(const char *s, uint8_t id[16])
{
    memset(id, 0, 16);
    if (!strcmp(s, "-") || !*s)
        return 0;
    int nib = 0;
    for (const char *c = s; *c; c++) {
        int pos = (int)(c - s);
        if (pos == 8 || pos == 13 || pos == 18 || pos == 23) {
            if (*c != '-')
                return -1;
            continue;
        }
        int v = *c >= '0' && *c <= '9' ? *c - '0' : *c >= 'a' && *c <= 'f' ? *c - 'a' + 10 : -1;
        if (v < 0 || nib >= 32)
            return -1;
        id[nib / 2] = (uint8_t)(nib % 2 ? id[nib / 2] | v : v << 4);
        nib++;
    }
    return nib == 32 && strlen(s) == 36 ? 0 : -1;
}

/* Appends n points to e's, kept sorted. 0 or -1. */
static int add_points(pmt_clock *e, const pmt_clock_point *p, size_t n)
{
    if (!n)
        return 0;
    pmt_clock_point *np = realloc(e->points, (e->npoints + n) * sizeof *np);
    if (!np)
        return -1;
    memcpy(np + e->npoints, p, n * sizeof *p);
    e->points = np;
    e->npoints += n;
    pmt_clock_sort(e->points, e->npoints);
    return 0;
}

int pmt_clock_note(pmt_trace *t, const pmt_clock *c)
{
    for (size_t i = 0; i < t->nclocks; i++) {
        pmt_clock *e = &t->clocks[i];
        if (e->pid != c->pid)
            continue;
        if (zero_id(e->boot_id))
            memcpy(e->boot_id, c->boot_id, 16);
        if (add_points(e, c->points, c->npoints) < 0)
            return -1;
        if (c->shifted) {
            e->offset_min = e->shifted && e->offset_min < c->offset_min ? e->offset_min : c->offset_min;
            e->offset_max = e->shifted && e->offset_max > c->offset_max ? e->offset_max : c->offset_max;
            e->bound_ns = e->bound_ns > c->bound_ns ? e->bound_ns : c->bound_ns;
            e->records += c->records;
            e->shifted = 1;
        }
        return 0;
    }
    pmt_clock *n = realloc(t->clocks, (t->nclocks + 1) * sizeof *n);
    if (!n)
        return -1;
    t->clocks = n;
    pmt_clock *e = &n[t->nclocks++];
    *e = *c;
    e->points = NULL;
    e->npoints = 0;
    if (add_points(e, c->points, c->npoints) < 0) {
        t->nclocks--;
        return -1;
    }
    return 0;
}

static const pmt_clock *shifted_pid(const pmt_trace *t, const char *text)
{
    uint64_t pid;
    if (pmt_parse_u64(text, strlen(text), &pid) < 0)
        return NULL;
    for (size_t i = 0; i < t->nclocks; i++)
        if (t->clocks[i].pid == pid && t->clocks[i].npoints)
            return &t->clocks[i];
    return NULL;
}

/* A time field moved by c's map; text that is not a time stays. */
static void put_time(FILE *out, const pmt_clock *c, const char *text)
{
    uint64_t ns;
    if (!c || pmt_parse_u64(text, strlen(text), &ns) < 0) {
        pmt_csv_put(out, text);
        return;
    }
    fprintf(out, "\"%llu\"", (unsigned long long)pmt_clock_map(c->points, c->npoints, ns));
}

int pmt_clock_shift_csv(const pmt_trace *t, const char *name, const char *text, size_t len,
                        int header, FILE *out, char *err, size_t errlen)
{
    int any = 0;
    for (size_t i = 0; i < t->nclocks; i++)
        any |= t->clocks[i].npoints != 0;
    pmt_csv c;
    if (!any || pmt_csv_open_text(&c, name, text, len, err, errlen) < 0) {
        if (any)
            return -1;
        const char *body = text;
        if (!header) {
            const char *nl = memchr(text, '\n', len);
            body = nl ? nl + 1 : text + len;
        }
        fwrite(body, 1, len - (size_t)(body - text), out);
        return 0;
    }
    int pid = pmt_csv_col(&c, "Process_Id"), st = pmt_csv_col(&c, "Start_Timestamp"),
        en = pmt_csv_col(&c, "End_Timestamp");
    for (size_t i = 0; header && i < c.nheader; i++) {
        fputs(i ? "," : "", out);
        pmt_csv_put(out, c.header[i]);
    }
    if (header)
        fputc('\n', out);
    char *f[PMT_CSV_MAX_FIELDS];
    size_t nf;
    int rc;
    while ((rc = pmt_csv_next(&c, f, &nf, err, errlen)) == 1) {
        const pmt_clock *pc = pid >= 0 && (size_t)pid < nf ? shifted_pid(t, f[pid]) : NULL;
        for (size_t i = 0; i < nf; i++) {
            fputs(i ? "," : "", out);
            if ((int)i == st || (int)i == en)
                put_time(out, pc, f[i]);
            else
                pmt_csv_put(out, f[i]);
        }
        fputc('\n', out);
    }
    pmt_csv_close(&c);
    return rc < 0 ? -1 : 0;
}

int pmt_clock_write_csv(const pmt_trace *t, FILE *f)
{
    fputs("\"Process_Id\",\"Boot_Id\",\"Offset_Ns\",\"Offset_Max_Ns\",\"Uncertainty_Ns\","
          "\"Records\"\n", f);
    for (size_t i = 0; i < t->nclocks; i++) {
        const pmt_clock *c = &t->clocks[i];
        char id[37];
        fprintf(f, "\"%u\",\"%s\",", (unsigned)c->pid, pmt_boot_id_text(c->boot_id, id));
        if (c->shifted)
            fprintf(f, "\"%lld\",\"%lld\",\"%llu\",\"%u\"\n", (long long)c->offset_min,
                    (long long)c->offset_max, (unsigned long long)c->bound_ns,
                    (unsigned)c->records);
        else
            fputs("\"\",\"\",\"\",\"0\"\n", f);
    }
    return ferror(f) ? -1 : 0;
}

static int parse_i64(const char *s, int64_t *out)
{
    uint64_t u;
    int neg = *s == '-';
    if (pmt_parse_u64(s + neg, strlen(s + neg), &u) < 0 || u > (uint64_t)INT64_MAX)
        return -1;
    *out = neg ? -(int64_t)u : (int64_t)u;
    return 0;
}

/* One record of clock.csv into c; 0 or -1. */
static int clock_row(char **f, const int col[6], pmt_clock *c)
{
    uint64_t pid, bound = 0, records;
    memset(c, 0, sizeof *c);
    if (pmt_parse_u64(f[col[0]], strlen(f[col[0]]), &pid) < 0 || pid > UINT32_MAX ||
        boot_id_parse(f[col[1]], c->boot_id) < 0 ||
        pmt_parse_u64(f[col[5]], strlen(f[col[5]]), &records) < 0 || records > UINT32_MAX)
        return -1;
    c->pid = (uint32_t)pid;
    c->records = (uint32_t)records;
    if (!records)
        return f[col[2]][0] || f[col[3]][0] || f[col[4]][0] ? -1 : 0;
    if (parse_i64(f[col[2]], &c->offset_min) < 0 || parse_i64(f[col[3]], &c->offset_max) < 0 ||
        c->offset_min > c->offset_max || pmt_parse_u64(f[col[4]], strlen(f[col[4]]), &bound) < 0)
        return -1;
    c->bound_ns = bound;
    c->shifted = 1;
    return 0;
}

int pmt_clock_load_csv(pmt_trace *t, const char *path, char *err, size_t errlen)
{
    static const char *const names[6] = {"Process_Id", "Boot_Id", "Offset_Ns", "Offset_Max_Ns",
                                         "Uncertainty_Ns", "Records"};
    pmt_csv c;
    if (pmt_csv_open(&c, path, err, errlen) < 0)
        return -1;
    int col[6], rc = 0;
    for (int i = 0; i < 6; i++)
        if ((col[i] = pmt_csv_col(&c, names[i])) < 0) {
            pmt_errf(err, errlen, "%s: no column %s", path, names[i]);
            pmt_csv_close(&c);
            return -1;
        }
    char *f[PMT_CSV_MAX_FIELDS];
    size_t nf;
    while ((rc = pmt_csv_next(&c, f, &nf, err, errlen)) == 1) {
        pmt_clock pc;
        int need = 0;
        for (int i = 0; i < 6; i++)
            need = col[i] + 1 > need ? col[i] + 1 : need;
        if (nf < (size_t)need || clock_row(f, col, &pc) < 0) {
            pmt_errf(err, errlen, "%s:%zu: not a clock row (pid, boot id, offsets, bound, records)",
                     path, c.line);
            rc = -1;
            break;
        }
        if (pmt_clock_note(t, &pc) < 0) {
            pmt_errf(err, errlen, "%s: out of memory", path);
            rc = -1;
            break;
        }
    }
    pmt_csv_close(&c);
    return rc < 0 ? -1 : 0;
}

size_t pmt_clock_print(const pmt_trace *t, FILE *f, const char *lead)
{
    size_t n = 0;
    for (size_t i = 0; i < t->nclocks; i++) {
        const pmt_clock *c = &t->clocks[i];
        if (!c->shifted)
            continue;
        const char *name = pmt_trace_label_of(t, c->pid, 0);
        fprintf(f, "%spid %u%s%s%s: on the driver's clock, shifted by %+lld", lead,
                (unsigned)c->pid, name ? " (" : "", name ? name : "", name ? ")" : "",
                (long long)c->offset_min);
        if (c->offset_max != c->offset_min)
            fprintf(f, "..%+lld", (long long)c->offset_max);
        fprintf(f, " ns +- %llu ns (%u record%s)\n", (unsigned long long)c->bound_ns,
                (unsigned)c->records, c->records == 1 ? "" : "s");
        n++;
    }
    return n;
}

size_t pmt_clock_warn(const pmt_trace *t, FILE *f, const char *lead)
{
    /* The distinct boots of the processes left on their own clock. */
    const uint8_t *boots[8];
    size_t nb = 0, more = 0;
    for (size_t i = 0; i < t->nclocks; i++) {
        const pmt_clock *c = &t->clocks[i];
        if (c->shifted || zero_id(c->boot_id))
            continue;
        size_t j = 0;
        while (j < nb && memcmp(boots[j], c->boot_id, 16) != 0)
            j++;
        if (j < nb)
            continue;
        if (nb < sizeof boots / sizeof boots[0])
            boots[nb++] = c->boot_id;
        else
            more++;
    }
    if (nb + more < 2)
        return 0;
    fprintf(f, "%sprocesses timed on %zu hosts (boots) with no recorded clock offset between them; "
               "their times do not compare:", lead, nb + more);
    for (size_t j = 0; j < nb; j++) {
        char id[37];
        fprintf(f, "%s boot %s: pid", j ? ";" : "", pmt_boot_id_text(boots[j], id));
        for (size_t i = 0; i < t->nclocks; i++)
            if (!t->clocks[i].shifted && !memcmp(t->clocks[i].boot_id, boots[j], 16))
                fprintf(f, " %u", (unsigned)t->clocks[i].pid);
    }
    fputc('\n', f);
    return 1;
}
