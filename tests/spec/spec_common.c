/* spec_common.c — see spec_common.h. */
#include "spec_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spec_models.h"
#include "synth.h"

void sc_path(char *buf, size_t cap, const char *tag)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, cap, "%s/pm_spec_%s_%ld.gguf", dir && *dir ? dir : "/tmp", tag, (long)getpid());
}

void sc_write_synth_pair(const char *type, int layers, int draft_layers, const char *target_path,
                         const char *draft_path)
{
    synth_spec sp = synth_default();
    sp.hp.n_layers = layers;
    sp.hp.ffn = 128;
    sp.hp.ctx = 512;
    sp.type = synth_type(type);
    char err[256];
    spec_derive d = {draft_layers, NULL, -1};
    if (synth_write(target_path, &sp) != 0 ||
        spec_derive_gguf(target_path, draft_path, &d, err, sizeof err) != 0) {
        fprintf(stderr, "cannot write the synthetic pair: %s\n", err);
        exit(1);
    }
}

int sc_kjv_paths(char *target, char *draft, size_t cap)
{
    snprintf(target, cap, "%s/models/phasemark-kjv-target-q8_0.gguf", PM_SOURCE_DIR);
    snprintf(draft, cap, "%s/models/phasemark-kjv-draft-f16.gguf", PM_SOURCE_DIR);
    return access(target, R_OK) == 0 && access(draft, R_OK) == 0 ? 0 : -1;
}

llm_model *sc_open(const char *path)
{
    /* One thread: the tests need no parallelism, and a spinning worker
     * pool on a loaded 2-core CI machine (two ctest jobs) costs more than
     * it gives. */
    return synth_open(path, 1);
}

llm_session *sc_session(llm_model *m, int n_ctx, int n_batch, uint64_t req)
{
    return synth_session(m, n_ctx, n_batch, req);
}

llm_sampler *sc_sampler(const llm_model *m, float temp, int top_k, float top_p, uint64_t seed)
{
    llm_model_info info;
    llm_model_get_info(m, &info);
    llm_sampler_params p = LLM_SAMPLER_PARAMS_INIT;
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.seed = seed;
    llm_sampler *sp;
    if (llm_sampler_create(&p, info.n_vocab, &sp) != 0) {
        fprintf(stderr, "cannot create a sampler\n");
        exit(1);
    }
    return sp;
}

static int collect(void *user, int32_t tok)
{
    sc_run *r = user;
    if (r->n < SC_MAX_OUT)
        r->ids[r->n] = tok;
    r->n++;
    return 0;
}

int sc_run_ar(llm_session *s, llm_sampler *sp, const int32_t *prompt, size_t n,
              const llm_generate_params *gp, sc_run *out)
{
    memset(out, 0, sizeof *out);
    llm_session_reset(s);
    size_t gen = 0;
    int rc = llm_generate(s, sp, prompt, n, gp, collect, out, &gen, &out->reason);
    out->end_pos = llm_session_pos(s);
    if (gen != out->n)
        fprintf(stderr, "llm_generate reported %zu tokens, the callback saw %zu\n", gen, out->n);
    return rc;
}

int sc_run_spec(llm_spec *sd, llm_session *target, llm_sampler *sp, const int32_t *prompt,
                size_t n, const llm_generate_params *gp, sc_run *out)
{
    memset(out, 0, sizeof *out);
    llm_session_reset(target);
    size_t gen = 0;
    int rc = llm_spec_generate(sd, sp, prompt, n, gp, collect, out, &gen, &out->reason);
    out->end_pos = llm_session_pos(target);
    if (rc)
        fprintf(stderr, "llm_spec_generate: %s (%s)\n", llm_spec_error(sd), llm_strerror(rc));
    if (gen != out->n)
        fprintf(stderr, "llm_spec_generate reported %zu tokens, the callback saw %zu\n", gen, out->n);
    return rc;
}

int sc_same(const sc_run *a, const sc_run *b, const char *what)
{
    size_t n = a->n < b->n ? a->n : b->n;
    for (size_t i = 0; i < n && i < SC_MAX_OUT; i++)
        if (a->ids[i] != b->ids[i]) {
            fprintf(stderr, "%s: token %zu differs: %d vs %d\n", what, i, (int)a->ids[i],
                    (int)b->ids[i]);
            return 0;
        }
    if (a->n != b->n || a->reason != b->reason || a->end_pos != b->end_pos) {
        fprintf(stderr, "%s: %zu tokens / stop %d / position %u vs %zu / %d / %u\n", what, a->n,
                a->reason, (unsigned)a->end_pos, b->n, b->reason, (unsigned)b->end_pos);
        return 0;
    }
    return 1;
}
