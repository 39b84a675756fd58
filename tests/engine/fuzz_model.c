/* fuzz_model.c — libFuzzer target: arbitrary bytes as a GGUF model through
 * the engine. Every input must either open, or fail with one non-empty
 * error line; an input that opens must take a session, a three-token
 * prefill and a decode step without a crash or sanitizer report (its
 * logits may be anything: the weights are arbitrary). Seeds in
 * tests/fuzz/corpus/model/ are small valid models of every weight type.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "phasemark/engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void run_session(llm_model *m)
{
    llm_model_info info;
    llm_model_get_info(m, &info);
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = 8;
    so.n_batch = 4;
    llm_session *s;
    char err[256];
    if (llm_session_create(m, &so, &s, err, sizeof err) != 0)
        return; /* an allocation the input asked for may fail: fine */
    int32_t toks[3] = {0, info.n_vocab - 1, info.n_vocab / 2};
    const float *lg;
    if (llm_prefill(s, toks, 3, 2, &lg) == 0)
        (void)llm_decode(s, toks[1], &lg);
    llm_session_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The model points into the bytes: give them an owned, aligned home. */
    void *buf = aligned_alloc(64, (size + 63) & ~(size_t)63 ? (size + 63) & ~(size_t)63 : 64);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    llm_model *m = NULL;
    char err[256] = "";
    if (llm_model_open_gguf_memory(buf, size, 1, &m, err, sizeof err) == 0) {
        run_session(m);
        llm_model_free(m);
    } else if (!err[0] || strchr(err, '\n') || m) {
        __builtin_trap(); /* a failure must leave *out NULL and say why in one line */
    }
    free(buf);
    return 0;
}
