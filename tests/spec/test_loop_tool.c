/* test_loop_tool — pm-generate --device-loop end to end, in bounded child
 * processes.
 *
 *   test_loop_tool CASE PATH-TO-pm-generate
 *
 * CPU cases (every build):
 *   args    a bad or missing mode is a usage error (exit 2) naming it.
 *   refuse  --device-loop on with a CPU target exits 1 with exactly one
 *           line naming why and prints nothing on stdout; a drafter, an
 *           adaptive k or a k the loop cannot run are named the same way
 *           (checked before the backend, so on any build).
 *   auto    auto on a CPU target prints the ids off prints, plain and
 *           with the n-gram drafter, and says the host path ran.
 * GPU cases (exit 77 without the shipped KJV pair or a CUDA device):
 *   cuda_plain, cuda_model, cuda_ngram, cuda_block  greedy ids with --device-loop on
 *           equal --device-loop off's (llm_generate's, llm_spec_generate's),
 *           64 tokens, model and ngram drafters at k 4; on says the device
 *           loop ran, off the host path; auto takes the loop too.
 *   cuda_sampling  a temperature-only run is repeatable under one seed;
 *           top-k under on is refused with its line, under auto it runs
 *           on the host; n-gram rounds under a temperature are refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pm_check.h"
#include "pm_child.h"
#include "spec_common.h"
#include "synth.h"

#define PROMPT "And the LORD spake unto Moses, saying,"

static char *tool;

static void run_tool(char **argv, pm_child_result *r)
{
    REQUIRE(pm_child_exec(argv, NULL, 120000, r) == 0);
}

static int has(const char *s, const char *part)
{
    if (strstr(s, part))
        return 1;
    fprintf(stderr, "missing '%s' in: %s\n", part, s);
    return 0;
}

/* Runs argv and checks it failed with status code and stderr exactly err. */
static void expect_exact(char **argv, int code, const char *err)
{
    static pm_child_result r;
    run_tool(argv, &r);
    CHECK(r.exited);
    CHECK_INT_EQ(r.exit_code, code);
    CHECK_STR_EQ(r.err, err);
    CHECK_STR_EQ(r.out, "");
}

static int case_args(void)
{
    char tp[512];
    sc_path(tp, sizeof tp, "loop_args");
    synth_spec s = synth_default();
    REQUIRE(synth_write(tp, &s) == 0);
    char *bad[] = {tool, "-m", tp, "--tokens", "9,8,7", "--device-loop", "yes", NULL};
    expect_exact(bad, 2, "pm-generate: bad value 'yes' for --device-loop\n");
    char *none[] = {tool, "-m", tp, "--tokens", "9,8,7", "--device-loop", NULL};
    expect_exact(none, 2, "pm-generate: option --device-loop needs a value (or is unknown)\n");
    char *upper[] = {tool, "-m", tp, "--tokens", "9,8,7", "--device-loop", "ON", NULL};
    expect_exact(upper, 2, "pm-generate: bad value 'ON' for --device-loop\n");
    unlink(tp);
    return pm_check_result();
}

static int case_refuse(void)
{
    char tp[512], dp[512];
    sc_path(tp, sizeof tp, "loop_refuse_t");
    sc_path(dp, sizeof dp, "loop_refuse_d");
    sc_write_synth_pair("f32", 4, 2, tp, dp);
    char *plain[] = {tool, "-m", tp, "--tokens", "9,8,7", "-n", "6", "--ids", "--device-loop", "on",
                     NULL};
    expect_exact(plain, 1,
                 "pm-generate: cannot run --device-loop on: the target runs on the cpu backend, "
                 "not CUDA\n");
    char *model[] = {tool, "-m", tp, "--draft", dp, "--draft-k", "3", "--tokens", "9,8,7", "-n",
                     "6", "--ids", "--device-loop", "on", NULL};
    expect_exact(model, 1,
                 "pm-generate: cannot run --device-loop on: the target runs on the cpu backend, "
                 "not CUDA\n");
    char *hybrid[] = {tool, "-m", tp, "--drafter", "hybrid", "--draft", dp, "--tokens", "9,8,7",
                      "-n", "6", "--device-loop", "on", NULL};
    expect_exact(hybrid, 1,
                 "pm-generate: cannot run --device-loop on: its hybrid rounds need a block head, "
                 "not a draft model\n");
    char *adapt[] = {tool, "-m", tp, "--draft", dp, "--adaptive-k", "--tokens", "9,8,7", "-n", "6",
                     "--device-loop", "on", NULL};
    expect_exact(adapt, 1,
                 "pm-generate: cannot run --device-loop on: its rounds draft a fixed k (no "
                 "--adaptive-k or --cost-k)\n");
    char *wide[] = {tool, "-m", tp, "--drafter", "ngram", "--draft-k", "17", "--tokens", "9,8,7",
                    "-n", "6", "--device-loop", "on", NULL};
    expect_exact(wide, 1, "pm-generate: cannot run --device-loop on: k 17 is outside 1..16\n");
    unlink(tp);
    unlink(dp);
    return pm_check_result();
}

static int case_auto(void)
{
    char tp[512];
    sc_path(tp, sizeof tp, "loop_auto");
    synth_spec s = synth_default();
    REQUIRE(synth_write(tp, &s) == 0);
    static pm_child_result off, r;
    char *a_off[] = {tool, "-m", tp, "--tokens", "9,8,7,6,5", "-n", "12", "--ids", "--threads",
                     "1", "--device-loop", "off", NULL};
    char *a_auto[] = {tool, "-m", tp, "--tokens", "9,8,7,6,5", "-n", "12", "--ids", "--threads",
                      "1", "--device-loop", "auto", NULL};
    char *a_default[] = {tool, "-m", tp, "--tokens", "9,8,7,6,5", "-n", "12", "--ids",
                         "--threads", "1", NULL};
    run_tool(a_off, &off);
    CHECK(pm_child_ok(&off));
    CHECK(has(off.err, "pm-generate: path: host\n"));
    /* Twelve ids on one line. */
    int spaces = 0;
    for (const char *c = off.out; *c; c++)
        spaces += *c == ' ';
    CHECK_INT_EQ(spaces, 11);
    run_tool(a_auto, &r);
    CHECK(pm_child_ok(&r));
    CHECK_STR_EQ(r.out, off.out);
    CHECK(has(r.err, "pm-generate: path: host\n"));
    run_tool(a_default, &r);
    CHECK(pm_child_ok(&r));
    CHECK_STR_EQ(r.out, off.out);
    char *n_off[] = {tool, "-m", tp, "--drafter", "ngram", "--tokens", "9,8,7,9,8", "-n", "12",
                     "--ids", "--threads", "1", "--device-loop", "off", NULL};
    char *n_auto[] = {tool, "-m", tp, "--drafter", "ngram", "--tokens", "9,8,7,9,8", "-n", "12",
                      "--ids", "--threads", "1", NULL};
    run_tool(n_off, &off);
    CHECK(pm_child_ok(&off));
    run_tool(n_auto, &r);
    CHECK(pm_child_ok(&r));
    CHECK_STR_EQ(r.out, off.out);
    CHECK(has(r.err, "pm-generate: speculative: drafter ngram"));
    CHECK(has(r.err, "pm-generate: path: host\n"));
    unlink(tp);
    return pm_check_result();
}

/* ---- GPU ----------------------------------------------------------------- */

static char tp[512], dp[512];

/* Skips (77) unless the shipped pair is present (in
 * $PHASEMARK_REPO_MODELS when set, for binaries built elsewhere, else the
 * source tree's models/) and pm-generate opens the target on cuda:0. */
static void need_cuda(void)
{
    const char *dir = getenv("PHASEMARK_REPO_MODELS");
    dir = dir && *dir ? dir : PM_REPO_MODELS;
    snprintf(tp, sizeof tp, "%s/phasemark-kjv-target-q8_0.gguf", dir);
    snprintf(dp, sizeof dp, "%s/phasemark-kjv-draft-f16.gguf", dir);
    if (access(tp, R_OK) != 0 || access(dp, R_OK) != 0)
        PM_SKIP("the shipped KJV models are not in the models folder");
    static pm_child_result r;
    char *probe[] = {tool, "-m", tp, "--backend", "cuda:0", "--tokens", "1", "-n", "1",
                     "--device-loop", "off", NULL};
    run_tool(probe, &r);
    if (!pm_child_ok(&r)) {
        fprintf(stderr, "skipped: no CUDA device for pm-generate: %s", r.err);
        exit(77);
    }
}

/* extra (NULL-terminated, at most 8) after the common greedy arguments,
 * then --device-loop mode. */
static void run_kjv(const char *const *extra, const char *mode, pm_child_result *r)
{
    char *argv[32] = {tool, "-m", tp, "--backend", "cuda:0", "-p", PROMPT, "-n", "64", "--ids"};
    int n = 10;
    for (int i = 0; extra && extra[i]; i++)
        argv[n++] = (char *)extra[i];
    argv[n++] = "--device-loop";
    argv[n++] = (char *)mode;
    argv[n] = NULL;
    run_tool(argv, r);
}

/* on equals off (and auto takes the loop); want names the loop's line. */
static int parity(const char *const *extra, const char *want)
{
    static pm_child_result off, on, au;
    run_kjv(extra, "off", &off);
    run_kjv(extra, "on", &on);
    run_kjv(extra, "auto", &au);
    CHECK(pm_child_ok(&off));
    CHECK(pm_child_ok(&on));
    CHECK(pm_child_ok(&au));
    CHECK(strlen(off.out) > 64); /* 64 ids */
    CHECK_STR_EQ(on.out, off.out);
    CHECK_STR_EQ(au.out, off.out);
    CHECK(has(off.err, "pm-generate: path: host\n"));
    CHECK(has(on.err, "pm-generate: path: device loop\n"));
    CHECK(has(au.err, "pm-generate: path: device loop\n"));
    CHECK(has(on.err, want));
    return pm_check_result();
}

static int case_cuda_plain(void)
{
    need_cuda();
    return parity(NULL, "pm-generate: device loop: ");
}

static int case_cuda_model(void)
{
    need_cuda();
    const char *extra[] = {"--draft", dp, "--draft-k", "4", NULL};
    return parity(extra, "pm-generate: device loop: drafter model k 4; ");
}

static int case_cuda_ngram(void)
{
    need_cuda();
    const char *extra[] = {"--drafter", "ngram", "--draft-k", "4", NULL};
    return parity(extra, "pm-generate: device loop: drafter ngram k 4; ");
}

static int case_cuda_block(void)
{
    need_cuda();
    static char hp[512];
    snprintf(hp, sizeof hp, "%.*s/phasemark-kjv-block-f16.gguf", (int)(strrchr(tp, '/') - tp), tp);
    if (access(hp, R_OK) != 0)
        PM_SKIP("the shipped block head is not in the models folder");
    const char *extra[] = {"--draft-head", hp, "--draft-k", "4", NULL};
    return parity(extra, "pm-generate: device loop: drafter block k 4; ");
}

static int case_cuda_sampling(void)
{
    need_cuda();
    static pm_child_result a, b, r;
    const char *temp[] = {"--temp", "0.8", "--seed", "3", NULL};
    run_kjv(temp, "on", &a);
    run_kjv(temp, "on", &b);
    CHECK(pm_child_ok(&a));
    CHECK(pm_child_ok(&b));
    CHECK_STR_EQ(a.out, b.out);
    CHECK(has(a.err, "pm-generate: path: device loop\n"));
    const char *topk[] = {"--temp", "0.8", "--top-k", "40", NULL};
    run_kjv(topk, "on", &r);
    CHECK(r.exited && r.exit_code == 1);
    CHECK(has(r.err, "pm-generate: cannot run --device-loop on: it samples at a temperature only "
                     "(no top-k or top-p cut)\n"));
    CHECK_STR_EQ(r.out, "");
    run_kjv(topk, "auto", &r);
    CHECK(pm_child_ok(&r));
    CHECK(has(r.err, "pm-generate: path: host\n"));
    /* N-gram rounds sample on the device too (q one-hot at each
     * proposal): a seeded run repeats. */
    static pm_child_result n1, n2;
    const char *ngram[] = {"--drafter", "ngram", "--draft-k", "4", "--temp", "0.8", "--seed", "3",
                           NULL};
    run_kjv(ngram, "on", &n1);
    run_kjv(ngram, "on", &n2);
    CHECK(pm_child_ok(&n1));
    CHECK(pm_child_ok(&n2));
    CHECK(strlen(n1.out) > 64);
    CHECK_STR_EQ(n1.out, n2.out);
    CHECK(has(n1.err, "pm-generate: path: device loop\n"));
    CHECK(has(n1.err, "pm-generate: device loop: drafter ngram k 4; "));
    return pm_check_result();
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s CASE pm-generate\n", argv[0]);
        return 2;
    }
    tool = argv[2];
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"args", case_args},           {"refuse", case_refuse},
        {"auto", case_auto},           {"cuda_plain", case_cuda_plain},
        {"cuda_model", case_cuda_model}, {"cuda_ngram", case_cuda_ngram},
        {"cuda_block", case_cuda_block},
        {"cuda_sampling", case_cuda_sampling},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!strcmp(argv[1], cases[i].name))
            return cases[i].fn();
    fprintf(stderr, "test_loop_tool: unknown case '%s'\n", argv[1]);
    return 2;
}
