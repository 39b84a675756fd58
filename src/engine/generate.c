/* generate.c — llm_generate: prefill, then sample and decode until a stop
 * condition. Built on the public session calls, so it is also the reference
 * for how a front end drives the engine, except for one internal shortcut:
 * greedy tokens are taken on the device where the session can (session.h),
 * so the logits never cross to the host; the tokens are the same.
 */
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

/* 1 when the next tokens can be taken on the device (session.h): the
 * sampler is greedy (llm_sample then is a plain argmax over its n_vocab
 * logits and draws no random number, so skipping it changes nothing but
 * where the argmax runs) over exactly the model's vocabulary, and the
 * session's logits come from a local backend with the argmax op. The
 * argmax's time then counts as decode time, not sample time. */
static int on_device(const llm_session *s, llm_sampler *sp)
{
    llm_sampler_params sp_params;
    llm_model_info info;
    llm_sampler_get_params(sp, &sp_params);
    llm_model_get_info(llm_session_model(s), &info);
    return !(sp_params.temperature > 0.0f) && llm_sampler_n_vocab(sp) == info.n_vocab &&
           llm_session_device_argmax(s);
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
        p->size < sizeof(llm_generate_params) || p->max_tokens < 1 ||
        (p->n_stop_tokens && !p->stop_tokens))
        return LLM_EINVAL;
    const float *logits = NULL;
    int32_t tok = 0;
    int device = on_device(s, sp);
    int rc = device ? llm_prefill_greedy(s, prompt, n_prompt, p->chunk, &tok)
                    : llm_prefill(s, prompt, n_prompt, p->chunk, &logits);
    while (rc == 0) {
        if (!device) {
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
        rc = device ? llm_decode_greedy(s, tok, &tok) : llm_decode(s, tok, &logits);
    }
    if (n_generated)
        *n_generated = generated;
    if (stop_reason)
        *stop_reason = reason;
    return rc;
}
