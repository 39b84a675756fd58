/* test_engine_nommap — llm_model_options.no_mmap (issue 22), one case per
 * invocation:
 *
 *   test_engine_nommap same       a model read into memory gives the same
 *                                 logits, bit for bit, as the mapped one
 *   test_engine_nommap truncated  after the file is truncated to nothing
 *                                 under it, the read model still does
 *   test_engine_nommap old_size   a caller's struct that ends before
 *                                 no_mmap is understood (the field ignored)
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phasemark/engine.h"
#include "pm_check.h"
#include "synth.h"

static char g_path[512];
static const int32_t toks[6] = {3, 1, 4, 1, 5, 9};

static llm_model *open_with(int no_mmap, uint16_t size)
{
    llm_model_options o = LLM_MODEL_OPTIONS_INIT;
    o.n_threads = 1;
    o.no_mmap = no_mmap;
    o.size = size;
    llm_model *m = NULL;
    char err[256];
    int rc = llm_model_open(g_path, &o, &m, err, sizeof err);
    if (rc)
        fprintf(stderr, "open: %s\n", err);
    REQUIRE(rc == 0);
    return m;
}

/* The last token's logits of a prefill of toks, copied into out. */
static void logits_of(llm_model *m, float *out, size_t cap)
{
    llm_model_info in;
    llm_model_get_info(m, &in);
    REQUIRE((size_t)in.n_vocab <= cap);
    llm_session *s = synth_session(m, 32, 8, 1);
    REQUIRE(s != NULL);
    const float *lg = NULL;
    REQUIRE(llm_prefill(s, toks, 6, 0, &lg) == 0);
    memcpy(out, lg, (size_t)in.n_vocab * sizeof *out);
    llm_session_free(s);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    synth_spec sp = synth_default();
    synth_path(g_path, sizeof g_path, "nommap");
    REQUIRE(synth_write(g_path, &sp) == 0);
    static float a[4096], b[4096];
    llm_model *mapped = open_with(0, sizeof(llm_model_options));
    logits_of(mapped, a, 4096);
    llm_model_free(mapped);
    if (strcmp(argv[1], "same") == 0 || strcmp(argv[1], "truncated") == 0) {
        llm_model *m = open_with(1, sizeof(llm_model_options));
        if (strcmp(argv[1], "truncated") == 0)
            REQUIRE(truncate(g_path, 0) == 0);
        logits_of(m, b, 4096);
        llm_model_free(m);
    } else if (strcmp(argv[1], "old_size") == 0) {
        llm_model *m = open_with(1, (uint16_t)offsetof(llm_model_options, no_mmap));
        logits_of(m, b, 4096);
        llm_model_free(m);
    } else {
        return 2;
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    unlink(g_path);
    return pm_check_result();
}
