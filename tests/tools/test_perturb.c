/* test_perturb.c — `phasemark perturb` on small shell commands whose
 * output is known: parity holds for a deterministic one (SHA-256 from
 * sha256sum of the same bytes), fails for one that prints its pid, holds
 * on a named file, and a metric parsed from the output gives the expected
 * medians and change. No timing is asserted.
 * usage: test_perturb CASE
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pm_check.h"
#include "pm_child.h"
#include "pmt.h"

static pm_child_result g_r;

static int run(char **argv)
{
    REQUIRE(pm_child_exec(argv, NULL, 60000, &g_r) == 0);
    if (!g_r.exited)
        fprintf(stderr, "perturb did not exit: %s\n", g_r.err);
    return g_r.exited ? g_r.exit_code : -1;
}

static int case_parity(void)
{
    char *argv[] = {PM_TOOL, "perturb", "--pairs", "2", "--warmup", "1", "--tokens", "tokens", "--",
                    "sh", "-c", "echo hello tokens=5", NULL};
    CHECK_INT_EQ(run(argv), 0);
    CHECK(strstr(g_r.out, "output sha256 b56e549324b40f2498e056678744b8c5b3f2666f73a9249dc7b4742067cb8786: "
                          "identical in all 6 runs") != NULL);
    CHECK(strstr(g_r.out, "tokens: 5\n") != NULL);
    CHECK(strstr(g_r.out, "2 pairs after 1 warm-up(s) per mode; measure: wall_s") != NULL);
    CHECK(strstr(g_r.err, "phasemark perturb: pair 2/2") != NULL); /* the progress line */
    if (pm_check_failures)
        fprintf(stderr, "out:\n%s\nerr:\n%s\n", g_r.out, g_r.err);
    return pm_check_result();
}

static int case_nonparity(void)
{
    char *argv[] = {PM_TOOL, "perturb", "--pairs", "2", "--warmup", "0", "--", "sh", "-c", "echo $$", NULL};
    CHECK_INT_EQ(run(argv), 1);
    CHECK(strstr(g_r.err, "phasemark perturb: output differs: run 1") != NULL);
    CHECK(strstr(g_r.out, "NOT identical") != NULL);
    return pm_check_result();
}

static int case_tokens_differ(void)
{
    char *argv[] = {PM_TOOL, "perturb", "--pairs", "1", "--warmup", "0", "--tokens", "tokens", "--file",
                    "/dev/null", "--", "sh", "-c", "echo tokens=$((PHASEMARK + 3))", NULL};
    CHECK_INT_EQ(run(argv), 1);
    CHECK(strstr(g_r.err, "phasemark perturb: token count differs: run 1 (on) 4, run 0 (off) 3") != NULL);
    return pm_check_result();
}

/* Parity on a file while stdout varies; a metric that is 10 with markers
 * off and 11 with them on: medians 10 and 11, change +10%. */
static int case_file_metric(void)
{
    char dir[] = "/tmp/pm-perturb-test.XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char file[64], script[256];
    snprintf(file, sizeof file, "%s/out.txt", dir);
    snprintf(script, sizeof script, "echo pid $$; echo rate: $((PHASEMARK + 10)); echo same > %s", file);
    char *argv[] = {PM_TOOL, "perturb", "--pairs", "3", "--warmup", "1", "--file", file, "--metric", "rate",
                    "--json", "--", "sh", "-c", script, NULL};
    CHECK_INT_EQ(run(argv), 0);
    CHECK_STR_EQ(g_r.out,
                 "{\"metric\":\"rate\",\"pairs\":3,\"warmup\":1,"
                 "\"off\":{\"median\":10,\"mad\":0,\"min\":10,\"max\":10},"
                 "\"on\":{\"median\":11,\"mad\":0,\"min\":11,\"max\":11},\"change_pct\":10.0000,"
                 "\"sha256\":\"a6328afc76e9db71da297ebff4b0d3e7a7eb3b01d917c05a6573fef121b6ecb6\","
                 "\"tokens\":-1,\"parity\":true}\n");
    pmt_remove_tree(dir);
    return pm_check_result();
}

static int case_failing_command(void)
{
    char *argv[] = {PM_TOOL, "perturb", "--pairs", "1", "--warmup", "0", "--", "false", NULL};
    CHECK_INT_EQ(run(argv), 1);
    CHECK(strstr(g_r.err, "phasemark perturb: run failed (exit 1)") != NULL);
    char *missing[] = {PM_TOOL, "perturb", "--pairs", "1", "--warmup", "0", "--metric", "nope", "--",
                       "sh", "-c", "echo x", NULL};
    CHECK_INT_EQ(run(missing), 1);
    CHECK(strstr(g_r.err, "metric 'nope' not found") != NULL);
    return pm_check_result();
}

/* Under --capture both modes run with the recorder preloaded. */
static int case_capture(void)
{
    char *argv[] = {PM_TOOL, "perturb", "--pairs", "1", "--warmup", "0", "--capture", "--",
                    "sh", "-c", "echo preload=${LD_PRELOAD##*/}", NULL};
    CHECK_INT_EQ(run(argv), 0);
    /* sha256 of "preload=libphasemark_recorder.so\n" (sha256sum). */
    CHECK(strstr(g_r.out, "output sha256 0b641b204268c10842175add358f3fa7cb5a104b3c5cf7c5089c8a6c4a6c3a3b: identical in all 2 runs") != NULL);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {{"parity", case_parity}, {"nonparity", case_nonparity},
                 {"tokens_differ", case_tokens_differ}, {"file_metric", case_file_metric},
                 {"failing_command", case_failing_command}, {"capture", case_capture}};
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: test_perturb CASE\n");
    return 2;
}
