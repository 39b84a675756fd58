/* test_engine_tool — pm-generate end to end, in a bounded child process:
 * greedy --ids output equals the library's greedy continuation computed
 * here; timings go to stderr; usage errors exit 2 and failures exit 1,
 * each with a message prefixed by the tool's name; --dump-logits writes
 * exactly n_prompt x n_vocab little-endian floats, row i equal to the
 * library's last-row logits after a prefill of the first i + 1 tokens.
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

/* Row i of the dump against a fresh prefill of prompt[0..i]. The dump is
 * one forward of all rows and the reference a forward ending at row i, so
 * they agree to f32 rounding, not bit for bit. */
static void check_dump(const char *model, const char *dump, const int32_t *prompt, size_t n)
{
    enum { V = 160 };
    FILE *f = fopen(dump, "rb");
    REQUIRE(f != NULL);
    unsigned char *raw = malloc(n * V * 4 + 1);
    REQUIRE(raw != NULL);
    size_t got = fread(raw, 1, n * V * 4 + 1, f);
    fclose(f);
    CHECK_INT_EQ((long long)got, (long long)(n * V * 4));
    llm_model *m = synth_open(model, 1);
    llm_session *s = synth_session(m, 64, 16, 1);
    for (size_t i = 0; i < n && got == n * V * 4; i++) {
        const float *lg;
        llm_session_reset(s);
        REQUIRE(llm_prefill(s, prompt, i + 1, 0, &lg) == 0);
        double worst = 0;
        for (int v = 0; v < V; v++) {
            const unsigned char *b = raw + (i * V + (size_t)v) * 4;
            uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                         (uint32_t)b[3] << 24;
            float x;
            memcpy(&x, &u, sizeof x);
            double d = x > lg[v] ? (double)x - lg[v] : (double)lg[v] - x;
            worst = d > worst ? d : worst;
        }
        CHECK(worst < 2e-4);
        if (worst >= 2e-4)
            fprintf(stderr, "row %zu differs by %g\n", i, worst);
    }
    llm_session_free(s);
    llm_model_free(m);
    free(raw);
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

    char dump[600];
    snprintf(dump, sizeof dump, "%s.logits", path);
    char *run_dump[] = {tool, "-m", path, "--tokens", "9,8,7,6,5", "-n", "7", "--ids",
                        "--threads", "2", "--dump-logits", dump, NULL};
    REQUIRE(pm_child_exec(run_dump, NULL, 60000, &r) == 0);
    CHECK(pm_child_ok(&r));
    CHECK_STR_EQ(r.out, want); /* generation after the dump is unchanged */
    check_dump(path, dump, prompt, 5);
    unlink(dump);
    char *dump_only[] = {tool, "-m", path, "--tokens", "9,8,7", "-n", "0", "--dump-logits", dump, NULL};
    REQUIRE(pm_child_exec(dump_only, NULL, 60000, &r) == 0);
    CHECK(pm_child_ok(&r));
    CHECK_STR_EQ(r.out, "");
    check_dump(path, dump, prompt, 3);
    unlink(dump);
    char *n0[] = {tool, "-m", path, "--tokens", "1", "-n", "0", NULL};
    expect_exit(n0, 2, "-n 0 generates nothing");
    char *bad_dump[] = {tool, "-m", path, "--tokens", "1", "--dump-logits", "/nonexistent/x.bin", NULL};
    expect_exit(bad_dump, 1, "pm-generate: cannot create /nonexistent/x.bin");

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
