/* cmds.c — the `check` and `report` subcommands: argument handling around
 * check.c, gpu.c, report.c and svg.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pmt.h"

static void check_usage(FILE *f)
{
    fputs("usage: phasemark check [--prefix NAME] [--expect SPEC] TRACE...\n"
          "  TRACE: our marker CSV or trace.json, or a rocprofv3 marker CSV.\n"
          "  Verifies balance, per-thread nesting, leaves enclosing nothing, start <= end,\n"
          "  the range-name grammar and the phase rules (each layer range inside the\n"
          "  phase range of its request or batch); prints counts per kind, mode and\n"
          "  process. --prefix: range names start NAME. (default: the one prefix the\n"
          "  trace uses, else pm). --expect prefill=1,layer_range:exact=11,decode=5\n"
          "  asserts exact counts. Exit 1 with one line per violation.\n",
          f);
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

int pmt_cmd_check(int argc, char **argv)
{
    pmt_expect ex[PMT_EXPECT_MAX];
    size_t nex = 0;
    char err[512];
    const char *prefix = NULL, *expect = NULL;
    int first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "-h") || !strcmp(argv[first], "--help")) {
            check_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[first], "--prefix") && first + 1 < argc) {
            prefix = argv[++first];
            continue;
        }
        if (!strcmp(argv[first], "--expect") && first + 1 < argc) {
            expect = argv[++first];
            continue;
        }
        fprintf(stderr, "phasemark check: bad option\n");
        check_usage(stderr);
        return 2;
    }
    if (first == argc) {
        check_usage(stderr);
        return 2;
    }
    pmt_trace t;
    pmt_trace_init(&t);
    for (int i = first; i < argc; i++) {
        if (pmt_trace_load(&t, argv[i], err, sizeof err) < 0) {
            fprintf(stderr, "phasemark check: %s\n", err);
            pmt_trace_free(&t);
            return 1;
        }
    }
    /* The prefix first: --expect names kinds, and the counts follow it. */
    int prc = choose_prefix("check", prefix, &t);
    if (prc == 0 && expect && pmt_expect_parse(expect, ex, &nex, err, sizeof err) < 0) {
        fprintf(stderr, "phasemark check: %s\n", err);
        check_usage(stderr);
        prc = 2;
    }
    if (prc) {
        pmt_trace_free(&t);
        return prc;
    }
    size_t nv = pmt_check(&t, ex, nex, stdout, stdout);
    if (nv)
        fprintf(stderr, "phasemark check: %zu violation(s) in %zu ranges\n", nv, t.n);
    else
        printf("ok: %zu ranges\n", t.n);
    pmt_trace_free(&t);
    return nv ? 1 : 0;
}

static void report_usage(FILE *f)
{
    fputs("usage: phasemark report [--prefix NAME] [--kernels F] [--api F] [--svg OUT] [--json]\n"
          "                        TRACE|DIR...\n"
          "  Table per kind, mode, shard and layer span: count, total, mean, p50, p99 and\n"
          "  share of the wall span. --kernels/--api: kernel, memory-copy and launch-API\n"
          "  CSVs (rocprofv3's or ours): kernel time is projected onto the ranges that\n"
          "  enclose its launch on the same thread. A DIR from `capture` is read whole.\n"
          "  --svg OUT writes a timeline; --json prints one JSON object per row.\n",
          f);
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A capture directory: the marker trace plus whichever GPU CSVs exist. */
static int load_dir(pmt_trace *t, pmt_gpu *g, int *has_gpu, const char *dir, char *err, size_t errlen)
{
    static const char *const gpu_files[] = {"kernel_trace.csv", "memory_copy_trace.csv",
                                            "cuda_api_trace.csv", "hip_api_trace.csv"};
    char path[4096];
    snprintf(path, sizeof path, "%s/marker_api_trace.csv", dir);
    if (pmt_trace_load(t, path, err, errlen) < 0)
        return -1;
    for (size_t i = 0; i < sizeof gpu_files / sizeof gpu_files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, gpu_files[i]);
        if (access(path, R_OK) != 0)
            continue;
        if (pmt_gpu_load(g, path, err, errlen) < 0)
            return -1;
        *has_gpu = 1;
    }
    return 0;
}

static int report_args(int argc, char **argv, pmt_trace *t, pmt_gpu *g, int *has_gpu,
                       const char **svg, const char **prefix, pmt_report_opts *o)
{
    char err[512];
    int ntraces = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 1;
        if (!strcmp(a, "--json"))
            o->json = 1;
        else if ((!strcmp(a, "--kernels") || !strcmp(a, "--api")) && i + 1 < argc) {
            rc = pmt_gpu_load(g, argv[++i], err, sizeof err);
            *has_gpu = 1;
        } else if (!strcmp(a, "--svg") && i + 1 < argc)
            *svg = argv[++i];
        else if (!strcmp(a, "--prefix") && i + 1 < argc)
            *prefix = argv[++i];
        else if (a[0] == '-') {
            fprintf(stderr, "phasemark report: bad option '%s'\n", a);
            return -2;
        } else {
            rc = is_dir(a) ? load_dir(t, g, has_gpu, a, err, sizeof err)
                           : pmt_trace_load(t, a, err, sizeof err);
            ntraces++;
        }
        if (rc < 0) {
            fprintf(stderr, "phasemark report: %s\n", err);
            return -1;
        }
    }
    if (!ntraces) {
        fprintf(stderr, "phasemark report: no trace given\n");
        return -2;
    }
    return 0;
}

int pmt_cmd_report(int argc, char **argv)
{
    pmt_trace t;
    pmt_gpu g;
    pmt_projection p;
    pmt_report_opts o = {0};
    const char *svg = NULL, *prefix = NULL;
    int has_gpu = 0, rc;
    pmt_trace_init(&t);
    pmt_gpu_init(&g);
    memset(&p, 0, sizeof p);
    int arc = report_args(argc, argv, &t, &g, &has_gpu, &svg, &prefix, &o);
    if (arc == 0 && choose_prefix("report", prefix, &t) != 0)
        arc = -3; /* the line is printed; a usage error */
    if (arc != 0) {
        if (arc != -1 && arc != -3)
            report_usage(arc > 0 ? stdout : stderr);
        rc = arc > 0 ? 0 : arc == -1 ? 1 : 2;
        goto done;
    }
    rc = 1;
    if (has_gpu && pmt_project(&t, &g, &p) < 0) {
        fprintf(stderr, "phasemark report: out of memory\n");
        goto done;
    }
    if (pmt_report(&t, has_gpu ? &p : NULL, &o, stdout) < 0) {
        fprintf(stderr, "phasemark report: cannot write the report\n");
        goto done;
    }
    if (svg) {
        FILE *f = fopen(svg, "w");
        int src = f ? pmt_svg(&t, has_gpu ? &g : NULL, f) : -1;
        if (f && fclose(f) != 0)
            src = -1;
        if (src < 0) {
            fprintf(stderr, "phasemark report: cannot write %s: %s\n", svg, strerror(errno));
            goto done;
        }
    }
    rc = 0;
done:
    pmt_projection_free(&p);
    pmt_gpu_free(&g);
    pmt_trace_free(&t);
    return rc;
}
