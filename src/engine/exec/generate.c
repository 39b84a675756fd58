/* generate.c — llm_generate: prefill, then sample and decode until a stop
 * condition. Built on the public llm_forward, so it is also the reference
 * for how a front end drives the engine: under greedy sampling each
 * forward is asked for the next token's id instead of its logits, which a
 * GPU or a shard daemon answers without the logits crossing (session.h);
 * the tokens are the same.
 */
#include <stddef.h>

#include "phasemark/engine.h"
#include "session.h"

static int is_stop_token(const llm_generate_params *p, int32_t tok)
{
    for (size_t i = 0; i < p->n_stop_tokens; i++)
        if (p->stop_tokens[i] == tok)
            return 1;
    return 0;
}

/* The stop reason for token tok, or -1 to emit it and go on. */
static int stop_before(const llm_session *s, const llm_generate_params *p,
                       int32_t tok)
{
    llm_model_info info;
    llm_model_get_info(llm_session_model(s), &info);
    if (p->stop_at_eos && info.eos >= 0 && tok == info.eos)
        return LLM_STOP_EOS;
    if (is_stop_token(p, tok))
        return LLM_STOP_TOKEN;
    return -1;
}

/* 1 when the forwards can be asked for the next token itself: the sampler
 * is greedy (llm_sample then is a plain argmax over its n_vocab logits and
 * draws no random number, so skipping it changes nothing but where the
 * argmax runs) over exactly the model's vocabulary. The forward's argmax
 * runs where the logits are made when the session can (session.h), and its
 * time counts as forward time, not sample time. */
static int greedy_ids(const llm_session *s, llm_sampler *sp)
{
    llm_sampler_params sp_params;
    llm_model_info info;
    llm_sampler_get_params(sp, &sp_params);
    llm_model_get_info(llm_session_model(s), &info);
    return !(sp_params.temperature > 0.0f) && llm_sampler_n_vocab(sp) == info.n_vocab;
}

/* One forward of n tokens in phase, handing back the next token's logits
 * (*logits) or, greedy, the token itself (*tok). */
static int step(llm_session *s, pm_phase phase, uint64_t req, int greedy,
                const int32_t *tokens, size_t n, int32_t chunk, const float **logits,
                int32_t *tok)
{
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.phase = phase;
    fp.request = req;
    fp.chunk = chunk;
    fp.output = greedy ? LLM_OUTPUT_ARGMAX : LLM_OUTPUT_LOGITS;
    fp.rows = 1;
    return llm_forward(s, &fp, tokens, n, logits, tok);
}

int llm_generate(llm_session *s, llm_sampler *sp, const int32_t *prompt,
                 size_t n_prompt, const llm_generate_params *p, llm_token_cb cb,
                 void *user, size_t *n_generated, int *stop_reason)
{
    size_t generated = 0;
    int reason = LLM_STOP_LENGTH;
    if (n_generated)
        *n_generated = 0;
    if (!s || !sp || !p || p->version != LLM_GENERATE_PARAMS_VERSION ||
        p->size < offsetof(llm_generate_params, has_request) || p->max_tokens < 1 ||
        (p->n_stop_tokens && !p->stop_tokens))
        return LLM_EINVAL;
    /* The request id is the caller's, passed to every forward; the
     * session's default stands in only when the params name none. */
    uint64_t req = llm_generate_request(s, p);
    const float *logits = NULL;
    int32_t tok = 0;
    int greedy = greedy_ids(s, sp);
    int rc = step(s, PM_PHASE_EXACT, req, greedy, prompt, n_prompt, p->chunk, &logits, &tok);
    while (rc == 0) {
        if (!greedy) {
            uint64_t t0 = llm_now_ns();
            tok = llm_sample(sp, logits);
            llm_session_add_sample_ns(s, llm_now_ns() - t0);
            if (tok < 0) {
                rc = tok;
                break;
            }
        }
        int stop = stop_before(s, p, tok);
        if (stop >= 0) {
            reason = stop;
            break;
        }
        generated++;
        if (cb && cb(user, tok)) {
            reason = LLM_STOP_CALLBACK;
            break;
        }
        if (generated >= (size_t)p->max_tokens)
            break;
        if (llm_session_pos(s) >= llm_session_n_ctx(s)) {
            reason = LLM_STOP_CONTEXT;
            break;
        }
        int32_t in = tok;
        rc = step(s, PM_PHASE_DECODE, req, greedy, &in, 1, 0, &logits, &tok);
    }
    if (n_generated)
        *n_generated = generated;
    if (stop_reason)
        *stop_reason = reason;
    return rc;
}

uint64_t llm_generate_request(const llm_session *s, const llm_generate_params *p)
{
    int named = p->size >= offsetof(llm_generate_params, request) + sizeof p->request &&
                p->has_request;
    return named ? p->request : llm_session_get_request(s);
}
