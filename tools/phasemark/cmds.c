/* cmds.c — the `check` and `report` subcommands: argument handling around
 * check.c, gpu.c, report.c and svg.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pmt.h"

/* Why an --expect spec that pmt_expect_parse refused is wrong, item by
 * item, in words a user can act on (the parser only names the item). */
static void explain_expect(const char *spec, const char *parse_err, char *out, size_t outlen)
{
    for (const char *p = spec; *p;) {
        size_t len = strcspn(p, ",");
        const char *eq = memchr(p, '=', len), *colon = memchr(p, ':', len);
        size_t klen = (size_t)((colon && (!eq || colon < eq) ? colon : eq ? eq : p + len) - p);
        uint64_t n;
        const char *why = NULL;
        if (!len)
            why = "empty item (items are separated by single commas)";
        else if (!eq)
            why = "no '=' (want kind=N or kind:mode=N)";
        else if (!(klen == 5 && memcmp(p, "other", 5) == 0) && pmt_kind_parse(p, klen) < 0)
            why = "unknown kind";
        else if (colon && colon < eq && colon + 1 == eq)
            why = "empty mode after ':'";
        else if (pmt_parse_u64(eq + 1, len - (size_t)(eq - p) - 1, &n) < 0)
            why = "the count is not an unsigned integer";
        if (why) {
            size_t w = (size_t)snprintf(out, outlen, "bad --expect item '%.*s': %s", (int)len, p, why);
            if (!strcmp(why, "unknown kind") && w < outlen) {
                w += (size_t)snprintf(out + w, outlen - w, " '%.*s' (kinds: other", (int)klen, p);
                for (int k = 1; k < PMT_K_COUNT && w < outlen; k++)
                    w += (size_t)snprintf(out + w, outlen - w, ", %s", pmt_kind_name(k));
                if (w < outlen)
                    snprintf(out + w, outlen - w, ")");
            }
            return;
        }
        p += len + (p[len] == ',');
    }
    snprintf(out, outlen, "%s", parse_err);
}

/* The range prefix for a subcommand: --prefix when given, else the one
 * prefix the trace uses, else the default. 0, or 2 (a usage error) with a
 * line on stderr. */
static int choose_prefix(const char *sub, const char *given, const pmt_trace *t)
{
    char found[256];
    if (given) {
        if (pmt_set_prefix(given) == 0)
            return 0;
        fprintf(stderr, "phasemark %s: --prefix '%s' is not [a-z0-9_]+ of at most %d bytes\n",
                sub, given, PM__PREFIX_MAX);
        return 2;
    }
    int n = pmt_detect_prefix(t, found, sizeof found);
    if (n == 1)
        return pmt_set_prefix(found) == 0 ? 0 : 2;
    if (n > 1) {
        fprintf(stderr, "phasemark %s: the trace has range prefixes %s; choose one with --prefix\n",
                sub, found);
        return 2;
    }
    return 0;
}

static void check_usage(FILE *f)
{
    fputs("usage: phasemark check [--prefix NAME] [--expect SPEC] TRACE|DIR...\n"
          "  TRACE: our marker CSV or trace.json, a rocprofv3 marker CSV, or another\n"
          "  profiler's file (see report); DIR: a directory written by capture.\n"
          "  Verifies balance, per-thread nesting, leaves enclosing nothing, start <= end,\n"
          "  the range-name grammar and the phase rules (each layer range inside the\n"
          "  phase range of its request or batch); prints counts per kind, mode and\n"
          "  process. --prefix: range names start NAME. (default: the one prefix the\n"
          "  trace uses, else pm). --expect prefill=1,layer_range:exact=11,decode=5\n"
          "  asserts exact counts. Exit 1 with one line per violation.\n",
          f);
}

int pmt_cmd_check(int argc, char **argv)
{
    pmt_expect ex[PMT_EXPECT_MAX];
    size_t nex = 0;
    char err[512];
    const char *prefix = NULL, *expect = NULL;
    int first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        const char *a = argv[first];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            check_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--version")) {
            puts(PMT_VERSION_LINE);
            return 0;
        }
        if (!strcmp(a, "--prefix") && first + 1 < argc) {
            prefix = argv[++first];
            continue;
        }
        if (!strcmp(a, "--expect") && first + 1 < argc) {
            expect = argv[++first];
            continue;
        }
        if (!strcmp(a, "--expect") || !strcmp(a, "--prefix"))
            fprintf(stderr, "phasemark check: %s needs a value\n", a);
        else
            fprintf(stderr, "phasemark check: bad option '%s'\n", a);
        check_usage(stderr);
        return 2;
    }
    if (first == argc) {
        fprintf(stderr, "phasemark check: no trace given\n");
        check_usage(stderr);
        return 2;
    }
    pmt_trace t;
    pmt_trace_init(&t);
    for (int i = first; i < argc; i++) {
        if (pmt_load_input(&t, NULL, NULL, argv[i], err, sizeof err) < 0) {
            fprintf(stderr, "phasemark check: %s\n", err);
            pmt_trace_free(&t);
            return 1;
        }
    }
    /* The prefix first: --expect names kinds, and the counts follow it. */
    int prc = choose_prefix("check", prefix, &t);
    if (prc == 0 && expect && pmt_expect_parse(expect, ex, &nex, err, sizeof err) < 0) {
        char why[768];
        explain_expect(expect, err, why, sizeof why);
        fprintf(stderr, "phasemark check: %s\n", why);
        check_usage(stderr);
        prc = 2;
    }
    if (prc) {
        pmt_trace_free(&t);
        return prc;
    }
    size_t nv = pmt_check(&t, ex, nex, stdout, stdout);
    /* Not violations: what was done to the clocks, and what could not be. */
    pmt_clock_print(&t, stdout, "clock: ");
    pmt_clock_warn(&t, stdout, "warning: clock: ");
    if (nv)
        fprintf(stderr, "phasemark check: %zu violation(s) in %zu ranges\n", nv, t.n);
    else
        printf("ok: %zu ranges\n", t.n);
    pmt_trace_free(&t);
    return nv ? 1 : 0;
}

static void report_usage(FILE *f)
{
    fputs("usage: phasemark report [options] TRACE|DIR...\n"
          "  --prefix NAME       range names start NAME. (default: the one prefix the\n"
          "                      trace uses, else pm)\n"
          "  Table per group: count, total, mean, p50, p99 and share (of the summed wall\n"
          "  span of the lanes, a lane being one process and thread), sorted by total;\n"
          "  then one row per request: TTFT and its parts, decode tok/s, spec rounds.\n"
          "  TRACE: our marker CSV or trace.json, a rocprofv3 marker CSV, a rocpd\n"
          "  database (.db), an Nsight Systems SQLite export, a torch.profiler trace.\n"
          "  --group-by all|kind|shard|layers|req|process   rows (default all)\n"
          "  --req ID            only ranges of request ID\n"
          "  --window T0..T1     only ranges starting in it (after the first start;\n"
          "                      units ns, us, ms, s; bare numbers are ns)\n"
          "  --kernels F, --api F  kernel, memory-copy and launch-API CSVs (rocprofv3's or\n"
          "                      ours): kernel time is projected onto the ranges that\n"
          "                      enclose its launch on the same thread\n"
          "  --svg OUT           writes a timeline picture (SVG)\n"
          "  --html OUT          the same picture in one self-contained HTML file\n"
          "  --json              one JSON object per row\n"
          "  --no-requests       leaves out the per-request table\n"
          "  A DIR from `capture` is read whole. Check violations are warned about.\n",
          f);
}

typedef struct report_args {
    const char *svg, *html;
    const char *prefix;
    pmt_report_opts o;
} report_args;

/* An option that takes a value: the value, or NULL after a usage message. */
static const char *value_of(int argc, char **argv, int *i)
{
    if (*i + 1 < argc && argv[*i + 1][0] && !(argv[*i + 1][0] == '-' && argv[*i + 1][1]))
        return argv[++*i];
    fprintf(stderr, "phasemark report: %s needs a value\n", argv[*i]);
    return NULL;
}

/* One option at argv[*i]: 0 ok, 1 help/version printed, -1 load error,
 * -2 usage error. */
static int report_opt(int argc, char **argv, int *i, pmt_gpu *g, int *has_gpu, report_args *ra)
{
    const char *a = argv[*i], *v = NULL;
    char err[512];
    if (!strcmp(a, "-h") || !strcmp(a, "--help"))
        return 1;
    if (!strcmp(a, "--version")) {
        puts(PMT_VERSION_LINE);
        return 2;
    }
    if (!strcmp(a, "--json"))
        ra->o.json = 1;
    else if (!strcmp(a, "--no-requests"))
        ra->o.no_requests = 1;
    else if (!strcmp(a, "--kernels") || !strcmp(a, "--api")) {
        if (!(v = value_of(argc, argv, i)))
            return -2;
        if (pmt_gpu_load(g, v, err, sizeof err) < 0) {
            fprintf(stderr, "phasemark report: %s\n", err);
            return -1;
        }
        *has_gpu = 1;
    } else if (!strcmp(a, "--svg")) {
        if (!(v = value_of(argc, argv, i)))
            return -2;
        ra->svg = v;
    } else if (!strcmp(a, "--html")) {
        if (!(v = value_of(argc, argv, i)))
            return -2;
        ra->html = v;
    } else if (!strcmp(a, "--prefix")) {
        if (!(v = value_of(argc, argv, i)))
            return -2;
        ra->prefix = v;
    } else if (!strcmp(a, "--group-by")) {
        if (!(v = value_of(argc, argv, i)))
            return -2;
        if (pmt_group_by_parse(v, &ra->o.group_by) < 0) {
            fprintf(stderr, "phasemark report: bad --group-by '%s' (want all, kind, shard, layers, "
                            "req or process)\n", v);
            return -2;
        }
    } else if (!strcmp(a, "--req")) {
        if (!(v = value_of(argc, argv, i)))
            return -2;
        if (pmt_parse_u64(v, strlen(v), &ra->o.req) < 0) {
            fprintf(stderr, "phasemark report: bad --req '%s' (want an unsigned integer)\n", v);
            return -2;
        }
        ra->o.has_req = 1;
    } else if (!strcmp(a, "--window")) {
        if (!(v = value_of(argc, argv, i)))
            return -2;
        if (pmt_window_parse(v, &ra->o.w0, &ra->o.w1, err, sizeof err) < 0) {
            fprintf(stderr, "phasemark report: %s\n", err);
            return -2;
        }
        ra->o.has_window = 1;
    } else {
        fprintf(stderr, "phasemark report: bad option '%s'\n", a);
        return -2;
    }
    return 0;
}

static int report_parse(int argc, char **argv, pmt_trace *t, pmt_gpu *g, int *has_gpu,
                        report_args *ra)
{
    char err[512];
    int ntraces = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1]) {
            int rc = report_opt(argc, argv, &i, g, has_gpu, ra);
            if (rc)
                return rc;
            continue;
        }
        if (pmt_load_input(t, g, has_gpu, argv[i], err, sizeof err) < 0) {
            fprintf(stderr, "phasemark report: %s\n", err);
            return -1;
        }
        ntraces++;
    }
    if (!ntraces) {
        fprintf(stderr, "phasemark report: no trace given\n");
        return -2;
    }
    return 0;
}

static int write_picture(const char *path, const pmt_trace *t, const pmt_gpu *g, int html)
{
    FILE *f = fopen(path, "w");
    int rc = f ? (html ? pmt_html(t, g, f) : pmt_svg(t, g, f)) : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    if (rc < 0)
        fprintf(stderr, "phasemark report: cannot write %s: %s\n", path, strerror(errno));
    return rc;
}

int pmt_cmd_report(int argc, char **argv)
{
    pmt_trace t;
    pmt_gpu g;
    pmt_projection p;
    report_args ra;
    int has_gpu = 0, rc;
    memset(&ra, 0, sizeof ra);
    pmt_trace_init(&t);
    pmt_gpu_init(&g);
    memset(&p, 0, sizeof p);
    int arc = report_parse(argc, argv, &t, &g, &has_gpu, &ra);
    if (arc == 0 && choose_prefix("report", ra.prefix, &t) != 0)
        arc = -3; /* the line is printed; a usage error */
    if (arc != 0) {
        if (arc == 1 || arc == -2)
            report_usage(arc > 0 ? stdout : stderr);
        rc = arc > 0 ? 0 : arc == -1 ? 1 : 2;
        goto done;
    }
    rc = 1;
    if (has_gpu && pmt_project(&t, &g, &p) < 0) {
        fprintf(stderr, "phasemark report: out of memory\n");
        goto done;
    }
    ra.o.violations = pmt_check(&t, NULL, 0, NULL, NULL);
    pmt_clock_print(&t, stderr, "phasemark report: clock: ");
    pmt_clock_warn(&t, stderr, "phasemark report: warning: clock: ");
    if (ra.o.violations)
        fprintf(stderr, "phasemark report: warning: %zu check violation(s) in this trace "
                        "(run `phasemark check` for them); unclosed and overlapping ranges "
                        "are left out or skew the totals\n", ra.o.violations);
    if (pmt_report(&t, has_gpu ? &p : NULL, &ra.o, stdout) < 0) {
        fprintf(stderr, "phasemark report: cannot write the report\n");
        goto done;
    }
    if (ra.svg && write_picture(ra.svg, &t, has_gpu ? &g : NULL, 0) < 0)
        goto done;
    if (ra.html && write_picture(ra.html, &t, has_gpu ? &g : NULL, 1) < 0)
        goto done;
    rc = 0;
done:
    pmt_projection_free(&p);
    pmt_gpu_free(&g);
    pmt_trace_free(&t);
    return rc;
}
