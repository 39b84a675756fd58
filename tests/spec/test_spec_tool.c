/* test_spec_tool — pm-generate --draft end to end, in bounded child
 * processes: with the shipped pair its --ids output equals the tool's own
 * output without --draft (greedy parity through the CLI), the round
 * statistics go to stderr, a draft of another vocabulary fails (exit 1)
 * naming the mismatch, and a bad --draft-k is a usage error (exit 2).
 * Usage: test_spec_tool PATH-TO-pm-generate
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pm_check.h"
#include "pm_child.h"
#include "spec_common.h"
#include "synth.h"

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

/* --drafter ngram | hybrid print the plain run's ids and name themselves;
 * bad and incomplete --drafter options are usage errors. */
static int drafters(char *tool, char *tp, char *dp)
{
    static pm_child_result plain, r;
    char *prompt = "And the LORD spake unto Moses, saying,";
    char *a_plain[] = {tool, "-m", tp, "-p", prompt, "-n", "40", "--ids", "--threads", "2", NULL};
    char *a_ngram[] = {tool, "-m", tp, "--drafter", "ngram", "-p", prompt, "-n", "40", "--ids",
                       "--threads", "2", NULL};
    char *a_hybrid[] = {tool, "-m", tp, "--drafter", "hybrid", "--draft", dp, "--draft-k", "3",
                        "-p", prompt, "-n", "40", "--ids", "--threads", "2", NULL};
    run_tool(a_plain, &plain);
    CHECK(pm_child_ok(&plain));
    run_tool(a_ngram, &r);
    CHECK(pm_child_ok(&r));
    CHECK_STR_EQ(r.out, plain.out);
    CHECK(has(r.err, "pm-generate: speculative: drafter ngram; ngram "));
    run_tool(a_hybrid, &r);
    CHECK(pm_child_ok(&r));
    CHECK_STR_EQ(r.out, plain.out);
    CHECK(has(r.err, "pm-generate: speculative: drafter hybrid; "));
    char *a_bad[] = {tool, "-m", tp, "--drafter", "block", "-p", "And", NULL};
    run_tool(a_bad, &r);
    CHECK(r.exited && r.exit_code == 2);
    CHECK(has(r.err, "pm-generate: bad value 'block' for --drafter"));
    char *a_nodraft[] = {tool, "-m", tp, "--drafter", "hybrid", "-p", "And", NULL};
    run_tool(a_nodraft, &r);
    CHECK(r.exited && r.exit_code == 2);
    CHECK(has(r.err, "pm-generate: --drafter hybrid needs --draft MODEL"));
    return pm_check_result();
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s pm-generate [drafters]\n", argv[0]);
        return 2;
    }
    char tp[512], dp[512], other[512];
    if (sc_kjv_paths(tp, dp, sizeof tp) != 0)
        PM_SKIP("the shipped KJV models are not in models/");
    char *tool = argv[1];
    static pm_child_result plain, spec, r;
    if (argc > 2 && strcmp(argv[2], "drafters") == 0)
        return drafters(tool, tp, dp);
    char *a_plain[] = {tool, "-m", tp, "-p", "And the LORD spake unto Moses, saying,", "-n", "40",
                       "--ids", "--threads", "2", NULL};
    char *a_spec[] = {tool, "-m", tp, "--draft", dp, "--draft-k", "3", "-p",
                      "And the LORD spake unto Moses, saying,", "-n", "40", "--ids", "--threads",
                      "2", NULL};
    run_tool(a_plain, &plain);
    run_tool(a_spec, &spec);
    CHECK(pm_child_ok(&plain));
    CHECK(pm_child_ok(&spec));
    CHECK_STR_EQ(spec.out, plain.out);
    CHECK(has(spec.err, "pm-generate: speculative: "));
    CHECK(has(spec.err, " accepted (acceptance "));
    CHECK(has(spec.err, "tokens/round"));

    char *a_adapt[] = {tool, "-m", tp, "--draft", dp, "--adaptive-k", "-p",
                       "And the LORD spake unto Moses, saying,", "-n", "40", "--ids", "--threads",
                       "2", NULL};
    run_tool(a_adapt, &r);
    CHECK(pm_child_ok(&r));
    CHECK_STR_EQ(r.out, plain.out);

    /* A draft without the target's vocabulary. */
    sc_path(other, sizeof other, "tool_other");
    synth_spec s = synth_default();
    REQUIRE(synth_write(other, &s) == 0);
    char *a_bad[] = {tool, "-m", tp, "--draft", other, "-p", "And", "-n", "4", NULL};
    run_tool(a_bad, &r);
    CHECK(r.exited && r.exit_code == 1);
    CHECK(has(r.err, "draft vocabulary differs from the target's"));
    char *a_k0[] = {tool, "-m", tp, "--draft", dp, "--draft-k", "0", "-p", "And", NULL};
    run_tool(a_k0, &r);
    CHECK(r.exited && r.exit_code == 2);
    CHECK(has(r.err, "pm-generate: bad value '0' for --draft-k"));
    char *a_missing[] = {tool, "-m", tp, "--draft", "/nonexistent/draft.gguf", "-p", "And", NULL};
    run_tool(a_missing, &r);
    CHECK(r.exited && r.exit_code == 1);
    CHECK(has(r.err, "pm-generate: draft: "));
    unlink(other);
    return pm_check_result();
}
