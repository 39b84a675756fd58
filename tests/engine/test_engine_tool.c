/* test_engine_tool — pm-generate end to end, in a bounded child process:
 * greedy --ids output equals the library's greedy continuation computed
 * here; timings go to stderr; usage errors exit 2 and failures exit 1,
 * each with a message prefixed by the tool's name.
 * Usage: test_engine_tool PATH-TO-pm-generate
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phasemark/engine.h"
#include "pm_check.h"
#include "pm_child.h"
#include "synth.h"

static void greedy(const char *path, const int32_t *prompt, size_t n, int count, char *out, size_t cap)
{
    llm_model *m = synth_open(path, 1);
    llm_session *s = synth_session(m, 64, 16, 1);
    llm_sampler *sp;
    REQUIRE(llm_sampler_create(NULL, 160, &sp) == 0);
    const float *lg;
    REQUIRE(llm_prefill(s, prompt, n, 0, &lg) == 0);
    size_t len = 0;
    for (int i = 0; i < count; i++) {
        int32_t t = llm_sample(sp, lg);
        len += (size_t)snprintf(out + len, cap - len, i ? " %d" : "%d", (int)t);
        if (i + 1 < count)
            REQUIRE(llm_decode(s, t, &lg) == 0);
    }
    snprintf(out + len, cap - len, "\n");
    llm_sampler_free(sp);
    llm_session_free(s);
    llm_model_free(m);
}

static void expect_exit(char **argv, int code, const char *msg)
{
    pm_child_result r;
    REQUIRE(pm_child_exec(argv, NULL, 60000, &r) == 0);
    CHECK(r.exited);
    CHECK_INT_EQ(r.exit_code, code);
    CHECK(strstr(r.err, msg) != NULL);
    if (!strstr(r.err, msg))
        fprintf(stderr, "stderr was: %s\n", r.err);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s pm-generate\n", argv[0]);
        return 2;
    }
    char *tool = argv[1];
    synth_spec sp = synth_default();
    char path[512];
    synth_path(path, sizeof path, "tool");
    REQUIRE(synth_write(path, &sp) == 0);
    int32_t prompt[5] = {9, 8, 7, 6, 5};
    char want[512];
    greedy(path, prompt, 5, 7, want, sizeof want);

    char *run_ids[] = {tool, "-m", path, "--tokens", "9,8,7,6,5", "-n", "7", "--ids",
                       "--threads", "2", "--chunk", "2", NULL};
    pm_child_result r;
    REQUIRE(pm_child_exec(run_ids, NULL, 60000, &r) == 0);
    CHECK(pm_child_ok(&r));
    CHECK_STR_EQ(r.out, want);
    CHECK(strstr(r.err, "decode") && strstr(r.err, "tokens/s"));

    char *help[] = {tool, "-h", NULL};
    REQUIRE(pm_child_exec(help, NULL, 60000, &r) == 0);
    CHECK(pm_child_ok(&r) && strstr(r.out, "usage"));

    char *no_model[] = {tool, "--tokens", "1", NULL};
    expect_exit(no_model, 2, "pm-generate: need -m");
    char *bad_n[] = {tool, "-m", path, "--tokens", "1", "-n", "12x", NULL};
    expect_exit(bad_n, 2, "bad value '12x' for -n");
    char *bad_list[] = {tool, "-m", path, "--tokens", "1,,2", NULL};
    expect_exit(bad_list, 2, "bad --tokens");
    char *unknown[] = {tool, "-m", path, "--frobnicate", "3", NULL};
    expect_exit(unknown, 2, "unknown option --frobnicate");
    char *bad_tok[] = {tool, "-m", path, "--tokens", "1,100000", NULL};
    expect_exit(bad_tok, 1, "token out of range");
    char *text[] = {tool, "-m", path, "-p", "hello", NULL};
    expect_exit(text, 1, "no tokenizer");
    char *missing[] = {tool, "-m", "/nonexistent.gguf", "--tokens", "1", NULL};
    expect_exit(missing, 1, "pm-generate: model: cannot open");
    unlink(path);
    return pm_check_result();
}
