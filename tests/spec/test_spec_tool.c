/* test_spec_tool — pm-generate --draft end to end, in bounded child
 * processes: with the shipped pair its --ids output equals the tool's own
 * output without --draft (greedy parity through the CLI), the round
 * statistics go to stderr, a draft of another vocabulary fails (exit 1)
 * naming the mismatch, and a bad --draft-k is a usage error (exit 2).
 * Usage: test_spec_tool PATH-TO-pm-generate [drafters [PATH-TO-pm-modelwriter]]
 *
 * drafters: --drafter ngram | hybrid, and with pm-modelwriter --drafter
 * block over a random head it writes for the target (--draft-head), print
 * the plain run's ids; a head made for another target is refused naming
 * the mismatch (exit 1); missing and stray --draft-head are usage errors.
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
/* The block drafter through both tools. */
static void block_drafter(char *tool, char *writer, char *tp, const pm_child_result *plain)
{
    static pm_child_result r;
    char hp[512], other[512], ohp[512];
    sc_path(hp, sizeof hp, "tool_head");
    sc_path(other, sizeof other, "tool_head_target");
    sc_path(ohp, sizeof ohp, "tool_head_other");
    char *a_write[] = {writer, "synth", "--arch", "phasemark-block", "--target", tp, "-o", hp,
                       "--layers", "1,3,5", "--block-size", "16", "--seed", "3", NULL};
    run_tool(a_write, &r);
    CHECK(pm_child_ok(&r));
    char *a_block[] = {tool, "-m", tp, "--drafter", "block", "--draft-head", hp, "--draft-k", "5",
                       "-p", "And the LORD spake unto Moses, saying,", "-n", "40", "--ids",
                       "--threads", "2", NULL};
    run_tool(a_block, &r);
    CHECK(pm_child_ok(&r));
    CHECK_STR_EQ(r.out, plain->out);
    CHECK(has(r.err, "pm-generate: speculative: drafter block; block "));
    /* The hybrid over the head: the same ids, its rounds the n-gram's and
     * the head's (a random head's proposals are rejected, so its rounds
     * come where no n-gram match is); never with a draft model too. */
    char *a_hybrid_head[] = {tool, "-m", tp, "--drafter", "hybrid", "--draft-head", hp,
                             "--draft-k", "5", "-p", "And the LORD spake unto Moses, saying,",
                             "-n", "40", "--ids", "--threads", "2", NULL};
    run_tool(a_hybrid_head, &r);
    CHECK(pm_child_ok(&r));
    CHECK_STR_EQ(r.out, plain->out);
    CHECK(has(r.err, "pm-generate: speculative: drafter hybrid; "));
    CHECK(has(r.err, "; block "));
    CHECK(!has(r.err, "; model "));
    char *a_hybrid_both[] = {tool, "-m", tp, "--drafter", "hybrid", "--draft-head", hp, "--draft",
                             tp, "-p", "And", NULL};
    run_tool(a_hybrid_both, &r);
    CHECK(r.exited && r.exit_code == 2);
    CHECK(has(r.err, "pm-generate: --drafter hybrid needs --draft MODEL or --draft-head HEAD, "
                     "one of them"));
    /* Tree rounds: the same ids; refused under sampling and without the
     * block drafter. */
    char *a_tree[] = {tool, "-m", tp, "--draft-head", hp, "--draft-k", "5", "--draft-tree", "12",
                      "-p", "And the LORD spake unto Moses, saying,", "-n", "40", "--ids",
                      "--threads", "2", NULL};
    run_tool(a_tree, &r);
    CHECK(pm_child_ok(&r));
    CHECK_STR_EQ(r.out, plain->out);
    CHECK(has(r.err, "pm-generate: speculative: drafter block; block "));
    char *a_tree_t[] = {tool, "-m", tp, "--draft-head", hp, "--draft-tree", "12", "--temp", "0.5",
                        "-p", "And", "-n", "4", NULL};
    run_tool(a_tree_t, &r);
    CHECK(r.exited && r.exit_code == 1);
    CHECK(has(r.err, "pm-generate: invalid argument: a draft tree verifies greedy decoding only "
                     "(temperature 0.5)"));
    char *a_tree_ng[] = {tool, "-m", tp, "--drafter", "ngram", "--draft-tree", "12", "-p", "And",
                         NULL};
    run_tool(a_tree_ng, &r);
    CHECK(r.exited && r.exit_code == 2);
    CHECK(has(r.err, "pm-generate: --draft-tree N goes with the block drafter (--draft-head HEAD)"));
    char *a_tree_big[] = {tool, "-m", tp, "--draft-head", hp, "--draft-tree", "33", "-p", "And",
                          NULL};
    run_tool(a_tree_big, &r);
    CHECK(r.exited && r.exit_code == 2);
    CHECK(has(r.err, "pm-generate: bad value '33' for --draft-tree"));
    /* A head for a synthetic target of 160 ids. */
    synth_spec s = synth_default();
    REQUIRE(synth_write(other, &s) == 0);
    char *a_wo[] = {writer, "synth", "--arch", "phasemark-block", "--target", other, "-o", ohp,
                    "--layers", "0,1", "--block-size", "8", NULL};
    run_tool(a_wo, &r);
    CHECK(pm_child_ok(&r));
    char *a_other[] = {tool, "-m", tp, "--draft-head", ohp, "-p", "And", "-n", "4", NULL};
    run_tool(a_other, &r);
    CHECK(r.exited && r.exit_code == 1);
    CHECK(has(r.err, "pm-generate: block head: vocab_size 160 does not match the target's 4096"));
    char *a_past[] = {writer, "synth", "--arch", "phasemark-block", "--target", other, "-o", ohp,
                      "--layers", "0,2", NULL};
    run_tool(a_past, &r);
    CHECK(r.exited && r.exit_code == 2);
    CHECK(has(r.err, "pm-modelwriter: --layers: layer 2 is past the target's 2 layers"));
    unlink(hp);
    unlink(ohp);
    unlink(other);
}

static int drafters(char *tool, char *tp, char *dp, char *writer)
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
    CHECK(has(r.err, "pm-generate: --drafter block needs --draft-head HEAD"));
    char *a_stray[] = {tool, "-m", tp, "--drafter", "ngram", "--draft-head", "x.gguf", "-p", "And",
                       NULL};
    run_tool(a_stray, &r);
    CHECK(r.exited && r.exit_code == 2);
    CHECK(has(r.err, "pm-generate: --draft-head HEAD goes with --drafter block or hybrid"));
    char *a_unknown[] = {tool, "-m", tp, "--drafter", "tree", "-p", "And", NULL};
    run_tool(a_unknown, &r);
    CHECK(r.exited && r.exit_code == 2);
    CHECK(has(r.err, "pm-generate: bad value 'tree' for --drafter"));
    if (writer)
        block_drafter(tool, writer, tp, &plain);
    char *a_nodraft[] = {tool, "-m", tp, "--drafter", "hybrid", "-p", "And", NULL};
    run_tool(a_nodraft, &r);
    CHECK(r.exited && r.exit_code == 2);
    CHECK(has(r.err, "pm-generate: --drafter hybrid needs --draft MODEL or --draft-head HEAD, "
                     "one of them"));
    return pm_check_result();
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: %s pm-generate [drafters [pm-modelwriter]]\n", argv[0]);
        return 2;
    }
    char tp[512], dp[512], other[512];
    if (sc_kjv_paths(tp, dp, sizeof tp) != 0)
        PM_SKIP("the shipped KJV models are not in models/");
    char *tool = argv[1];
    static pm_child_result plain, spec, r;
    if (argc > 2 && strcmp(argv[2], "drafters") == 0)
        return drafters(tool, tp, dp, argc > 3 ? argv[3] : NULL);
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
