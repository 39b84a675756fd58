/* main.c — `phasemark`: one command, four subcommands (docs/tools.md).
 * Exit status: 0 ok, 1 failure (a violation, a failed run, a parity
 * mismatch), 2 usage error. */
#include <stdio.h>
#include <string.h>

#include "pmt.h"

static void usage(FILE *f)
{
    fputs("usage: phasemark <command> [options]\n"
          "  capture -o DIR [--kernels] -- CMD...   record ranges (and kernels) of CMD\n"
          "  check [--expect SPEC] TRACE...          verify balance, nesting, names, counts\n"
          "  report [--kernels F] [--api F] [--svg OUT] [--html OUT] [--json] TRACE|DIR...\n"
          "                                          time per phase, GPU projection, timeline\n"
          "  perturb [--pairs N] [--warmup W] -- CMD...  marker cost, output parity\n"
          "  diff [--threshold PCT] A B              per-group deltas; exit 1 on a regression\n"
          "Run 'phasemark <command> -h' for its options; --version prints the version.\n",
          f);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"capture", pmt_cmd_capture}, {"check", pmt_cmd_check},
                {"report", pmt_cmd_report}, {"perturb", pmt_cmd_perturb},
                {"diff", pmt_cmd_diff}};
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--version")) {
        puts(PMT_VERSION_LINE);
        return 0;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name))
            return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "phasemark: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
