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
    fputs("usage: phasemark check [--expect SPEC] TRACE...\n"
          "  TRACE: our marker CSV or trace.json, or a rocprofv3 marker CSV.\n"
          "  Verifies balance, per-thread nesting, leaves enclosing nothing, start <= end\n"
          "  and the range-name grammar; prints counts per kind, mode and process.\n"
          "  --expect prefill=1,layer_range:exact=11,decode=5 asserts exact counts.\n"
          "  Exit 1 with one line per violation.\n",
          f);
}

int pmt_cmd_check(int argc, char **argv)
{
    pmt_expect ex[PMT_EXPECT_MAX];
    size_t nex = 0;
    char err[512];
    int first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "-h") || !strcmp(argv[first], "--help")) {
            check_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[first], "--expect") && first + 1 < argc &&
            pmt_expect_parse(argv[first + 1], ex, &nex, err, sizeof err) == 0) {
            first++;
            continue;
        }
        fprintf(stderr, "phasemark check: %s\n",
                !strcmp(argv[first], "--expect") && first + 1 < argc ? err : "bad option");
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
    fputs("usage: phasemark report [--kernels F] [--api F] [--svg OUT] [--json] TRACE|DIR...\n"
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
                       const char **svg, pmt_report_opts *o)
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
    const char *svg = NULL;
    int has_gpu = 0, rc;
    pmt_trace_init(&t);
    pmt_gpu_init(&g);
    memset(&p, 0, sizeof p);
    int arc = report_args(argc, argv, &t, &g, &has_gpu, &svg, &o);
    if (arc != 0) {
        if (arc != -1)
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
