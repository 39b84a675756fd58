/* diff.c — `phasemark diff [--threshold PCT] [--group-by G] [--json] A B`:
 * two traces compared group by group (report's groups): count, total, p50
 * and p99 of each, their change in percent, and GPU time when both have
 * kernel traces.
 *
 * A regression is a group present in both whose p50 grew by more than the
 * threshold (default 10%), or, when both have GPU records, whose GPU time
 * per range did. p50 and per-range GPU time rather than totals: a longer
 * run has larger totals without being slower. Exit 1 when any group
 * regressed, 0 otherwise, 2 on a usage error.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "pmt.h"

#define DIFF "phasemark diff: "

typedef struct side {
    pmt_trace t;
    pmt_gpu g;
    pmt_projection p;
    int has_gpu;
    pmt_groups gs;
} side;

static int side_load(side *s, const char *path, const pmt_report_opts *o)
{
    char err[512];
    pmt_trace_init(&s->t);
    pmt_gpu_init(&s->g);
    memset(&s->p, 0, sizeof s->p);
    memset(&s->gs, 0, sizeof s->gs);
    s->has_gpu = 0;
    if (pmt_load_input(&s->t, &s->g, &s->has_gpu, path, err, sizeof err) < 0) {
        fprintf(stderr, DIFF "%s\n", err);
        return -1;
    }
    if ((s->has_gpu && pmt_project(&s->t, &s->g, &s->p) < 0) ||
        pmt_groups_build(&s->t, s->has_gpu ? &s->p : NULL, o, &s->gs) < 0) {
        fprintf(stderr, DIFF "out of memory\n");
        return -1;
    }
    return 0;
}

static void side_free(side *s)
{
    pmt_groups_free(&s->gs);
    pmt_projection_free(&s->p);
    pmt_gpu_free(&s->g);
    pmt_trace_free(&s->t);
}

/* Change from a to b in percent; 0 when a is 0. */
static double pct_change(double a, double b)
{
    return a > 0 ? (b - a) / a * 100.0 : 0;
}

typedef struct row {
    const char *key;
    const pmt_group *a, *b;
} row;

static void print_row(const row *r, int gpu, double threshold, int json, int *regressed, FILE *f)
{
    const pmt_group *a = r->a, *b = r->b;
    uint64_t a50 = a ? pmt_pct(a->dur, a->n, 50) : 0, b50 = b ? pmt_pct(b->dur, b->n, 50) : 0;
    uint64_t a99 = a ? pmt_pct(a->dur, a->n, 99) : 0, b99 = b ? pmt_pct(b->dur, b->n, 99) : 0;
    double ag = a && a->n ? (double)a->gpu / (double)a->n : 0, bg = b && b->n ? (double)b->gpu / (double)b->n : 0;
    double d50 = pct_change((double)a50, (double)b50), dgpu = pct_change(ag, bg);
    int reg = a && b && (d50 > threshold || (gpu && dgpu > threshold));
    *regressed |= reg;
    if (json) {
        fputs("{\"group\":", f);
        pmt_json_put(f, r->key);
        fprintf(f, ",\"count_a\":%zu,\"count_b\":%zu,\"total_a_ns\":%llu,\"total_b_ns\":%llu,"
                   "\"p50_a_ns\":%llu,\"p50_b_ns\":%llu,\"p99_a_ns\":%llu,\"p99_b_ns\":%llu,"
                   "\"p50_change\":%.3f",
                a ? a->n : 0, b ? b->n : 0, (unsigned long long)(a ? a->total : 0),
                (unsigned long long)(b ? b->total : 0), (unsigned long long)a50, (unsigned long long)b50,
                (unsigned long long)a99, (unsigned long long)b99, d50);
        if (gpu)
            fprintf(f, ",\"gpu_a_ns\":%llu,\"gpu_b_ns\":%llu,\"gpu_per_range_change\":%.3f",
                    (unsigned long long)(a ? a->gpu : 0), (unsigned long long)(b ? b->gpu : 0), dgpu);
        fprintf(f, ",\"regression\":%s}\n", reg ? "true" : "false");
        return;
    }
    fprintf(f, "%-40s %6zu %6zu %10.3f %10.3f %9.3f %9.3f %+7.1f%% %9.3f %9.3f", r->key, a ? a->n : 0,
            b ? b->n : 0, (a ? a->total : 0) / 1e6, (b ? b->total : 0) / 1e6, a50 / 1e3, b50 / 1e3,
            d50, a99 / 1e3, b99 / 1e3);
    if (gpu)
        fprintf(f, " %10.3f %10.3f %+7.1f%%", (a ? a->gpu : 0) / 1e6, (b ? b->gpu : 0) / 1e6, dgpu);
    fputs(!a ? "  (only in B)" : !b ? "  (only in A)" : reg ? "  REGRESSION" : "", f);
    fputc('\n', f);
}

/* Rows: A's groups in A's order (largest total first), then B's new ones. */
static int diff_print(const side *a, const side *b, double threshold, int json, FILE *f)
{
    size_t n = 0;
    row *rows = malloc((a->gs.n + b->gs.n + 1) * sizeof *rows);
    int gpu = a->has_gpu && b->has_gpu, regressed = 0;
    if (!rows)
        return -1;
    for (size_t i = 0; i < a->gs.n; i++)
        rows[n++] = (row){a->gs.g[i].key, &a->gs.g[i], pmt_groups_find(&b->gs, a->gs.g[i].key)};
    for (size_t i = 0; i < b->gs.n; i++)
        if (!pmt_groups_find(&a->gs, b->gs.g[i].key))
            rows[n++] = (row){b->gs.g[i].key, NULL, &b->gs.g[i]};
    if (!json) {
        fprintf(f, "%-40s %6s %6s %10s %10s %9s %9s %8s %9s %9s", "group", "n_A", "n_B", "total_A_ms",
                "total_B_ms", "p50_A_us", "p50_B_us", "p50", "p99_A_us", "p99_B_us");
        if (gpu)
            fprintf(f, " %10s %10s %8s", "gpu_A_ms", "gpu_B_ms", "gpu/rng");
        fputc('\n', f);
    }
    for (size_t i = 0; i < n; i++)
        print_row(&rows[i], gpu, threshold, json, &regressed, f);
    if (!json)
        fprintf(f, "regression: p50%s grew more than %.1f%% in a group found in both\n",
                gpu ? " or GPU time per range" : "", threshold);
    free(rows);
    return regressed;
}

static void usage(FILE *f)
{
    fputs("usage: phasemark diff [--threshold PCT] [--group-by G] [--json] A B\n"
          "  A, B: traces or capture DIRs (anything report reads). Per group (report's\n"
          "  groups; --group-by as in report): count, total, p50, p99 of each and the p50\n"
          "  change; GPU time when both have kernel traces. Exit 1 when a group in both\n"
          "  got slower than PCT percent (default 10) in p50 or GPU time per range.\n",
          f);
}

int pmt_cmd_diff(int argc, char **argv)
{
    pmt_report_opts o = {0};
    double threshold = 10.0;
    int json = 0;
    const char *in[2];
    int nin = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--version")) {
            puts(PMT_VERSION_LINE);
            return 0;
        }
        if (!strcmp(a, "--json"))
            json = 1;
        else if (!strcmp(a, "--threshold") && i + 1 < argc) {
            char *end;
            threshold = strtod(argv[++i], &end);
            if (end == argv[i] || *end || threshold < 0 || threshold > 1e6) {
                fprintf(stderr, DIFF "bad --threshold '%s' (want a percentage >= 0)\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--group-by") && i + 1 < argc) {
            if (pmt_group_by_parse(argv[++i], &o.group_by) < 0) {
                fprintf(stderr, DIFF "bad --group-by '%s'\n", argv[i]);
                return 2;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, DIFF "%s '%s'\n",
                    !strcmp(a, "--threshold") || !strcmp(a, "--group-by") ? "a value must follow"
                                                                          : "bad option", a);
            usage(stderr);
            return 2;
        } else if (nin < 2)
            in[nin++] = a;
        else {
            fprintf(stderr, DIFF "more than two traces ('%s')\n", a);
            return 2;
        }
    }
    if (nin != 2) {
        fprintf(stderr, DIFF "need two traces, A and B\n");
        usage(stderr);
        return 2;
    }
    side a, b;
    int la = side_load(&a, in[0], &o), lb = la == 0 ? side_load(&b, in[1], &o) : -1;
    int rc = 1;
    if (la == 0 && lb == 0) {
        int r = diff_print(&a, &b, threshold, json, stdout);
        rc = r < 0 ? 1 : r;
        if (r < 0)
            fprintf(stderr, DIFF "out of memory\n");
    }
    side_free(&a); /* side_load initialized it, whatever it returned */
    if (la == 0)
        side_free(&b);
    return rc;
}
