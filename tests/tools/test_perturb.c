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
    CHECK(strstr(g_r.out, "tokens: tokens=5\n") != NULL);
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
    CHECK(strstr(g_r.err, "phasemark perturb: token count 1 differs: run 1 (on) 4, run 0 (off) 3") != NULL);
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

/* Warm-ups off,on; then pairs off,on / on,off / off,on: the order each run
 * saw, written by the runs themselves. */
static int case_alternation(void)
{
    char dir[] = "/tmp/pm-perturb-test.XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char file[64], script[256], got[64] = "";
    snprintf(file, sizeof file, "%s/order", dir);
    snprintf(script, sizeof script, "printf %%s \"$PHASEMARK\" >> %s; echo same", file);
    char *argv[] = {PM_TOOL, "perturb", "--pairs", "3", "--warmup", "1", "--", "sh", "-c", script, NULL};
    CHECK_INT_EQ(run(argv), 0);
    FILE *f = fopen(file, "r");
    REQUIRE(f != NULL);
    CHECK(fgets(got, sizeof got, f) != NULL);
    fclose(f);
    CHECK_STR_EQ(got, "01011001");
    pmt_remove_tree(dir);
    return pm_check_result();
}

/* Run k prints v=k*k: off runs are k = 2, 5, 6 (4, 25, 36: median 25,
 * deviations 21, 0, 11, MAD 11), on runs k = 3, 4, 7 (9, 16, 49: median
 * 16, MAD 7); change (16-25)/25 = -36%. Any other order or spread fails. */
static int case_mad(void)
{
    char dir[] = "/tmp/pm-perturb-test.XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char script[256];
    snprintf(script, sizeof script,
             "n=$(cat %s/n 2>/dev/null || echo 0); echo $((n + 1)) > %s/n; echo v=$((n * n))", dir,
             dir);
    char *argv[] = {PM_TOOL, "perturb", "--pairs", "3", "--warmup", "1", "--metric", "v", "--file",
                    "/dev/null", "--json", "--", "sh", "-c", script, NULL};
    CHECK_INT_EQ(run(argv), 0);
    CHECK_STR_EQ(g_r.out,
                 "{\"metric\":\"v\",\"pairs\":3,\"warmup\":1,"
                 "\"off\":{\"median\":25,\"mad\":11,\"min\":4,\"max\":36},"
                 "\"on\":{\"median\":16,\"mad\":7,\"min\":9,\"max\":49},\"change_pct\":-36.0000,"
                 "\"sha256\":\"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\","
                 "\"tokens\":-1,\"parity\":true}\n");
    pmt_remove_tree(dir);
    return pm_check_result();
}

/* --tokens KEY that the output never has fails the run. */
static int case_tokens_missing(void)
{
    char *argv[] = {PM_TOOL, "perturb", "--pairs", "1", "--warmup", "0", "--tokens", "tokens", "--",
                    "sh", "-c", "echo no count here", NULL};
    CHECK_INT_EQ(run(argv), 1);
    CHECK(strstr(g_r.err, "phasemark perturb: token count 'tokens' not found in the output") != NULL);
    return pm_check_result();
}

/* The seed's triple: prompt, completion and total compared separately. */
static int case_token_triple(void)
{
    char *same[] = {PM_TOOL, "perturb", "--pairs", "1", "--warmup", "0", "--tokens",
                    "prompt_tokens,completion_tokens,total_tokens", "--", "sh", "-c",
                    "echo prompt_tokens=3 completion_tokens=4 total_tokens=7", NULL};
    CHECK_INT_EQ(run(same), 0);
    CHECK(strstr(g_r.out, "tokens: prompt_tokens=3 completion_tokens=4 total_tokens=7\n") != NULL);
    char *differ[] = {PM_TOOL, "perturb", "--pairs", "1", "--warmup", "0", "--tokens",
                      "prompt_tokens,completion_tokens,total_tokens", "--file", "/dev/null", "--",
                      "sh", "-c",
                      "echo prompt_tokens=3 completion_tokens=$((4 + PHASEMARK)) total_tokens=7",
                      NULL};
    CHECK_INT_EQ(run(differ), 1);
    CHECK(strstr(g_r.err, "phasemark perturb: token count 2 differs: run 1 (on) 5, run 0 (off) 4") != NULL);
    CHECK(strstr(g_r.err, "token count 1 differs") == NULL);
    return pm_check_result();
}

/* --env: the embedder's variable is the one set to 0 and 1. */
static int case_env(void)
{
    char *argv[] = {PM_TOOL, "perturb", "--pairs", "1", "--warmup", "0", "--env", "DFLASH_DS4_ROCTX",
                    "--metric", "v", "--file", "/dev/null", "--json", "--", "sh", "-c",
                    "echo v=$((DFLASH_DS4_ROCTX + ${PHASEMARK:-5}))", NULL};
    char *env[] = {"-PHASEMARK", NULL};
    REQUIRE(pm_child_exec(argv, env, 60000, &g_r) == 0);
    CHECK(pm_child_ok(&g_r));
    CHECK(strstr(g_r.out, "\"off\":{\"median\":5,") != NULL);
    CHECK(strstr(g_r.out, "\"on\":{\"median\":6,") != NULL);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {{"parity", case_parity}, {"nonparity", case_nonparity},
                 {"tokens_differ", case_tokens_differ}, {"file_metric", case_file_metric},
                 {"failing_command", case_failing_command}, {"capture", case_capture},
                 {"alternation", case_alternation}, {"mad", case_mad},
                 {"tokens_missing", case_tokens_missing}, {"token_triple", case_token_triple},
                 {"env", case_env}};
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: test_perturb CASE\n");
    return 2;
}
