/* device_loop.c — the engine-level entry to the CUDA device loop
 * (spec.h, "The device loop"; the loop itself is cuda_loop.h).
 *
 * Tools and the server decide per run whether generation goes through the
 * device loop or through llm_generate / llm_spec_generate. Everything that
 * decides it is checked here, up front, so a caller can fall back before
 * anything ran: the target (and the model drafter's draft) monolithic on
 * one CUDA device, every forward width the loop will capture taking the
 * fused step, k within the loop's and the sessions' batches, a fixed k,
 * and per generation a sampler the loop can draw with. A build without
 * the CUDA backend keeps the same functions and refuses with one line.
 *
 * Invariant: a handle exists only for a combination that takes, so
 * llm_device_loop_generate fails only on the sampler (checked again) or a
 * device error, never because of the configuration.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errtext.h"
#include "phasemark/spec.h"
#include "session.h"

#if LLM_HAVE_CUDA
#include "backend.h"
#include "cuda_loop.h"
#include "model.h"
#include "split.h"
#endif

#if LLM_HAVE_CUDA
_Static_assert(LLM_DEVICE_LOOP_K_MAX == LLM_CUDA_LOOP_K_MAX, "one bound on k");
#endif

struct llm_device_loop {
#if LLM_HAVE_CUDA
    llm_cuda_loop *loop; /* owned */
#endif
    int32_t drafter;     /* LLM_DRAFTER_MODEL, _NGRAM, _BLOCK, _HYBRID, or -1: plain */
    int32_t k;           /* 0: plain */
    int32_t n_vocab;     /* the target's */
    char err[256];
};

/* The one line for a target on another backend, the same in every build
 * so a refusal reads (and tests) alike with or without CUDA. */
static int not_cuda(const llm_session *target, char *err, size_t errlen)
{
    llm_model_info info;
    llm_model_get_info(llm_session_model(target), &info);
    if (strncmp(info.backend, "cuda", 4) == 0)
        return 0;
    llm_errf(err, errlen, "device loop: the target runs on the %s backend, not CUDA",
             info.backend);
    return 1;
}

/* Checks p alone; 0 or LLM_EINVAL / LLM_EUNSUP with err. */
static int check_params(const llm_device_loop_params *p, const llm_session *draft, char *err,
                        size_t errlen)
{
    if (p->version != LLM_DEVICE_LOOP_PARAMS_VERSION || p->size < sizeof *p) {
        llm_errf(err, errlen, "device loop: params of version %u, size %u",
                 (unsigned)p->version, (unsigned)p->size);
        return LLM_EINVAL;
    }
    if (p->drafter != -1 && p->drafter != LLM_DRAFTER_MODEL && p->drafter != LLM_DRAFTER_NGRAM &&
        p->drafter != LLM_DRAFTER_BLOCK && p->drafter != LLM_DRAFTER_HYBRID) {
        llm_errf(err, errlen,
                 "device loop: the %s drafter has no device loop (model, ngram, block or hybrid)",
                 llm_drafter_kind_name(p->drafter));
        return LLM_EUNSUP;
    }
    /* The device's hybrid rounds pair the n-gram lookup with a head; the
     * hybrid over a draft model runs on the host. */
    if (p->drafter == LLM_DRAFTER_HYBRID && !p->head_path) {
        llm_errf(err, errlen, "device loop: its hybrid rounds need a block head, not a draft model");
        return LLM_EUNSUP;
    }
    if (p->drafter != -1 && p->adaptive != LLM_SPEC_ADAPT_OFF) {
        llm_errf(err, errlen, "device loop: its rounds draft a fixed k (no --adaptive-k or --cost-k)");
        return LLM_EUNSUP;
    }
    if (p->drafter != -1 && (p->k < 1 || p->k > LLM_DEVICE_LOOP_K_MAX)) {
        llm_errf(err, errlen, "device loop: k %d is outside 1..%d", (int)p->k,
                 LLM_DEVICE_LOOP_K_MAX);
        return LLM_EUNSUP;
    }
    if (p->drafter == LLM_DRAFTER_MODEL && !draft) {
        llm_errf(err, errlen, "device loop: the model drafter needs a draft session");
        return LLM_EINVAL;
    }
    if (p->drafter == LLM_DRAFTER_BLOCK && !p->head_path) {
        llm_errf(err, errlen, "device loop: the block drafter needs a head file");
        return LLM_EINVAL;
    }
    return 0;
}

#if LLM_HAVE_CUDA
/* 1 when a loop-mode forward of n rows of session s takes the fused step. */
static int takes_rows(llm_session *s, int32_t n)
{
    llm_model *m = (llm_model *)llm_session_model(s);
    llm_span *span = NULL;
    llm_workspace *ws = NULL;
    if (llm_split_local_parts(llm_session_split_any(s), &span, &ws) != 0)
        return 0;
    return llm_cuda_backend_loop_takes(m->be, m, span, n);
}

/* Everything about the sessions the loop needs that llm_cuda_loop_create
 * does not check itself (it checks CUDA, monolithic, one vocabulary);
 * run after it, so a split target is named as such first. */
static int check_sessions(llm_session *target, llm_session *draft, const llm_device_loop_params *p,
                          char *err, size_t errlen)
{
    int32_t k = p->drafter == -1 ? 0 : p->k;
    if (k > 0 && llm_session_n_batch(target) < (uint32_t)k + 1u) {
        llm_errf(err, errlen, "device loop: the target's batch (%u) is below k + 1 = %d",
                 (unsigned)llm_session_n_batch(target), (int)k + 1);
        return LLM_EUNSUP;
    }
    /* Host n-gram and hybrid rounds capture every verify width up to k + 1. */
    int32_t lo = p->drafter == LLM_DRAFTER_NGRAM || p->drafter == LLM_DRAFTER_HYBRID ? 1 : k + 1;
    for (int32_t n = lo; n <= k + 1; n++)
        if (!takes_rows(target, n)) {
            llm_errf(err, errlen,
                     "device loop: the target's layers do not all take the fused step at %d rows",
                     (int)n);
            return LLM_EUNSUP;
        }
    if (p->drafter != LLM_DRAFTER_MODEL)
        return 0;
    const llm_model *tm = llm_session_model(target), *dm = llm_session_model(draft);
    if (strcmp(tm->be->ops->name, dm->be->ops->name) != 0) {
        llm_errf(err, errlen, "device loop: the draft runs on %s, the target on %s (one device)",
                 dm->be->ops->name, tm->be->ops->name);
        return LLM_EUNSUP;
    }
    if (llm_session_n_batch(draft) < 2) {
        llm_errf(err, errlen, "device loop: the draft's batch (%u) is below 2",
                 (unsigned)llm_session_n_batch(draft));
        return LLM_EUNSUP;
    }
    if (!takes_rows(draft, 1) || !takes_rows(draft, 2)) {
        llm_errf(err, errlen, "device loop: the draft's layers do not all take the fused step");
        return LLM_EUNSUP;
    }
    return 0;
}
#endif

int llm_device_loop_create(llm_session *target, llm_session *draft,
                           const llm_device_loop_params *p, llm_device_loop **out, char *err,
                           size_t errlen)
{
    if (!out)
        return LLM_EINVAL;
    *out = NULL;
    if (!target || !p || draft == target) {
        llm_errf(err, errlen, "device loop: a target session and params are required "
                              "(and a draft that is not the target)");
        return LLM_EINVAL;
    }
    int rc = check_params(p, draft, err, errlen);
    if (rc)
        return rc;
    if (not_cuda(target, err, errlen))
        return LLM_EUNSUP;
#if LLM_HAVE_CUDA
    llm_session *d = p->drafter == LLM_DRAFTER_MODEL ? draft : NULL;
    llm_device_loop *l = calloc(1, sizeof *l);
    if (!l) {
        llm_errf(err, errlen, "device loop: out of memory");
        return LLM_ENOMEM;
    }
    l->drafter = p->drafter;
    l->k = p->drafter == -1 ? 0 : p->k;
    l->n_vocab = llm_session_model(target)->hp.n_vocab;
    rc = llm_cuda_loop_create(target, d, &l->loop, err, errlen);
    if (rc == 0)
        rc = check_sessions(target, d, p, err, errlen);
    if (rc == 0 && p->drafter == LLM_DRAFTER_NGRAM &&
        llm_cuda_loop_set_drafter(l->loop, LLM_DRAFTER_NGRAM, p->ngram_min, p->ngram_max) != 0) {
        llm_errf(err, errlen, "%s", llm_cuda_loop_error(l->loop));
        rc = LLM_EINVAL;
    }
    /* A head the device kernels cannot run is a reason to fall back: the
     * host's drafter reads any valid head and names a bad file itself. */
    if (rc == 0 && (p->drafter == LLM_DRAFTER_BLOCK || p->drafter == LLM_DRAFTER_HYBRID) &&
        llm_cuda_loop_set_block(l->loop, p->head_path) != 0) {
        llm_errf(err, errlen, "%s", llm_cuda_loop_error(l->loop));
        rc = LLM_EUNSUP;
    }
    if (rc == 0 && p->drafter == LLM_DRAFTER_HYBRID &&
        llm_cuda_loop_set_drafter(l->loop, LLM_DRAFTER_HYBRID, p->ngram_min, p->ngram_max) != 0) {
        llm_errf(err, errlen, "%s", llm_cuda_loop_error(l->loop));
        rc = LLM_EINVAL;
    }
    if (rc) {
        llm_device_loop_free(l);
        return rc;
    }
    *out = l;
    return 0;
#else
    llm_errf(err, errlen, "device loop: this build has no CUDA backend");
    return LLM_EUNSUP;
#endif
}

void llm_device_loop_free(llm_device_loop *l)
{
    if (!l)
        return;
#if LLM_HAVE_CUDA
    llm_cuda_loop_free(l->loop);
#endif
    free(l);
}

int llm_device_loop_takes(const llm_device_loop *l, const llm_sampler *sp, char *why,
                          size_t whylen)
{
    if (!l || !sp) {
        llm_errf(why, whylen, "device loop: no loop or sampler");
        return 0;
    }
    llm_sampler_params sp_p;
    llm_sampler_get_params(sp, &sp_p);
    if (llm_sampler_n_vocab(sp) != l->n_vocab) {
        llm_errf(why, whylen, "device loop: the sampler's vocabulary is not the target's");
        return 0;
    }
    if (!(sp_p.temperature > 0.0f))
        return 1;
    if ((sp_p.top_k > 0 && sp_p.top_k < l->n_vocab) || (sp_p.top_p > 0.0f && sp_p.top_p < 1.0f)) {
        llm_errf(why, whylen, "device loop: it samples at a temperature only (no top-k or top-p cut)");
        return 0;
    }
    return 1;
}

int llm_device_loop_generate(llm_device_loop *l, llm_sampler *sp, const int32_t *prompt,
                             size_t n_prompt, const llm_generate_params *p, llm_token_cb cb,
                             void *user, size_t *n_generated, int *stop_reason)
{
    if (n_generated)
        *n_generated = 0;
    if (!l)
        return LLM_EINVAL;
    if (!llm_device_loop_takes(l, sp, l->err, sizeof l->err))
        return LLM_EUNSUP;
#if LLM_HAVE_CUDA
    int rc = llm_cuda_loop_generate(l->loop, sp, l->k, prompt, n_prompt, p, cb, user, n_generated,
                                    stop_reason);
    if (rc)
        snprintf(l->err, sizeof l->err, "%s", llm_cuda_loop_error(l->loop));
    return rc;
#else
    (void)prompt;
    (void)n_prompt;
    (void)p;
    (void)cb;
    (void)user;
    (void)stop_reason;
    snprintf(l->err, sizeof l->err, "device loop: this build has no CUDA backend");
    return LLM_EUNSUP;
#endif
}

const char *llm_device_loop_error(const llm_device_loop *l)
{
    return l ? l->err : "";
}

void llm_device_loop_get_stats(const llm_device_loop *l, llm_device_loop_stats *st)
{
    if (!st)
        return;
    memset(st, 0, sizeof *st);
    st->drafter = -1;
    if (!l)
        return;
    st->drafter = l->drafter;
    st->k = l->k;
#if LLM_HAVE_CUDA
    llm_cuda_loop_stats cs;
    llm_cuda_loop_get_stats(l->loop, &cs);
    st->plain_steps = cs.plain_steps;
    st->rounds = cs.rounds;
    st->drafted = cs.drafted;
    st->accepted = cs.accepted;
    st->committed = cs.committed;
    st->readbacks = cs.readbacks;
    st->captures = cs.captures;
#endif
}
