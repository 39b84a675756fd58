/* phasemark/engine.h — the reference inference engine's public API.
 *
 * This header is the whole contract of the engine library
 * (`phasemark_engine`): open a llama-family model, create sessions over it,
 * prefill, decode, verify, sample, generate. Nothing about tensors, backends
 * or file formats leaks through it; the HTTP server, the layer split and the
 * speculative decoder use only what is declared here.
 *
 * Handles. llm_model and llm_session are opaque. Constructors take an out
 * parameter that is set to NULL on failure; every _free accepts NULL. A model
 * owns its weights (mmapped read-only) and its tokenizer; a session owns its
 * KV cache and every buffer a forward needs, allocated once at creation, so
 * prefill, decode and sampling allocate nothing.
 *
 * Threading. A model is immutable after llm_model_open and may be shared by
 * sessions on different threads. A session (and a sampler) must be used by
 * one thread at a time; the engine's own worker threads are internal.
 *
 * Errors. Functions return 0 on success or a negative LLM_E* code (stable,
 * never renumbered; llm_strerror names them). Constructors write one line of
 * detail into the caller's err buffer (errlen bytes, always NUL-terminated
 * when errlen > 0); session calls keep their detail in the session
 * (llm_session_error).
 *
 * Markers. With markers enabled (PHASEMARK=1, see phasemark/mark.h) a prefill
 * chunk is one "pm.prefill mode=exact" enclosing one leaf "pm.layer_range"
 * per layer span, a decode step is one "pm.decode" enclosing leaf layer
 * ranges with mode=decode, and a verify forward emits leaf layer ranges with
 * mode=verify inside whatever range the caller holds. A monolithic model is
 * one span covering all layers (shard=0 where=local backend=cpu).
 */
#ifndef PHASEMARK_ENGINE_H
#define PHASEMARK_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "phasemark/phase.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define LLM_API
#else
#define LLM_API __attribute__((visibility("default")))
#endif

/* Status codes. 0 is success; failures are negative and never renumbered. */
enum {
    LLM_OK = 0,
    LLM_EINVAL = -1,   /* a bad argument (NULL handle, out-of-range value) */
    LLM_ENOMEM = -2,   /* an allocation failed */
    LLM_EIO = -3,      /* a file could not be opened, read or mapped */
    LLM_EFORMAT = -4,  /* a model or tokenizer file is malformed */
    LLM_EUNSUP = -5,   /* valid but unsupported (tensor type, architecture) */
    LLM_ECTX = -6,     /* the request does not fit the session's context */
    LLM_EBACKEND = -7, /* the backend is unknown or failed */
    LLM_ESTATE = -8,   /* the call is not valid in the session's state */
    LLM_ETOKEN = -9,   /* a token id outside the vocabulary */
    LLM_ESPACE = -10,  /* a caller buffer is too small */
    LLM_ENOKEY = -11,  /* no entry under that key (model file metadata) */
    LLM_ETYPE = -12,   /* an entry's value has another type than asked for */
    LLM_ERANGE = -13   /* a value or index is out of range for its use */
};

/* The name of a status code ("invalid argument", ...). Static string, never
 * NULL; thread-safe. Every part of the engine (model files, tokenizers,
 * backends) returns these codes: there is one space, and this names it. */
LLM_API const char *llm_strerror(int status);

typedef struct llm_model llm_model;
typedef struct llm_session llm_session;
typedef struct llm_sampler llm_sampler;

/* ---- models ------------------------------------------------------------ */

/* Options for llm_model_open. Begins with version and size so it can grow;
 * initialize with LLM_MODEL_OPTIONS_INIT. */
typedef struct llm_model_options {
    uint16_t version;           /* LLM_MODEL_OPTIONS_VERSION */
    uint16_t size;              /* sizeof(llm_model_options) */
    int32_t n_threads;          /* worker threads; <= 0: online CPUs */
    const char *backend;        /* "cpu" (NULL means "cpu") */
    const char *tokenizer_path; /* llama2.c tokenizer.bin; NULL: none (GGUF
                                   carries its own tokenizer) */
    /* Added after the first release (callers compiled with the shorter
     * struct pass a smaller size and get the defaults). */
    int32_t span_first;  /* load only layers span_first .. span_first +
                            span_layers - 1 (a layer-split shard): their
                            blocks, plus the token embedding when the span
                            starts the model and the final norm and output
                            head when it ends it; */
    int32_t span_layers; /* 0: every layer (the default) */
    /* Added for issue 22 (a caller's older, shorter struct means 0). */
    int32_t no_mmap;     /* 1: read a GGUF file's bytes into memory owned
                            by the model instead of mapping it, so that
                            truncating or rewriting the file under a running
                            process cannot fault it (SIGBUS); costs the
                            file's size in anonymous memory and the read at
                            open. 0 (default): mapped, pages shared with the
                            page cache, and the file must not be truncated
                            or rewritten in place while the model is open
                            (replace it by rename instead). llama2.c .bin
                            checkpoints are always mapped. */
} llm_model_options;

#define LLM_MODEL_OPTIONS_VERSION 1
#define LLM_MODEL_OPTIONS_INIT \
    {LLM_MODEL_OPTIONS_VERSION, (uint16_t)sizeof(llm_model_options), 0, 0, 0, 0, 0, 0}

/* Opens a model: a GGUF file (llama architecture), or a legacy llama2.c
 * checkpoint (.bin; its tokenizer.bin through opt->tokenizer_path). The
 * format is recognized from the file's magic. opt may be NULL (defaults).
 * The weights stay mmapped until llm_model_free (or, with opt->no_mmap, a
 * GGUF file is read into memory the model owns). On failure *out is NULL,
 * the status says why and err holds one line naming the problem. The caller
 * owns *out. Thread-safe (touches no shared state). */
LLM_API int llm_model_open(const char *path, const llm_model_options *opt,
                           llm_model **out, char *err, size_t errlen);

/* Frees a model. Every session created over it must be freed first. NULL is
 * harmless. */
LLM_API void llm_model_free(llm_model *model);

/* What a caller may know about a model. */
typedef struct llm_model_info {
    int32_t n_vocab;
    int32_t n_layers;
    int32_t dim;           /* embedding width */
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t ffn_dim;
    int32_t n_ctx_train;   /* the context length the model was trained for */
    int32_t bos;           /* -1 when the model has none */
    int32_t eos;           /* -1 when the model has none */
    int32_t has_tokenizer; /* 0: token ids only */
    uint64_t n_params;     /* parameter count (weights) */
    uint64_t weight_bytes; /* bytes of weights read by one full forward */
    const char *weight_type; /* "f32", "q8_0", ... or "mixed"; static */
    const char *backend;   /* "cpu"; static */
    int32_t n_threads;
} llm_model_info;

/* Fills *info. Thread-safe. */
LLM_API void llm_model_get_info(const llm_model *model, llm_model_info *info);

/* A string from the model file's metadata, by GGUF key (for instance
 * "tokenizer.chat_template"). On success *s points at len bytes (not
 * NUL-terminated) inside the model's read-only mapping, valid until
 * llm_model_free. LLM_EINVAL when the key is absent or not a string, or the
 * model did not come from a GGUF file. Thread-safe. */
LLM_API int llm_model_meta_str(const llm_model *model, const char *key,
                               const char **s, size_t *len);

/* Tokenizes len bytes of text (UTF-8, need not be NUL-terminated),
 * prepending BOS when add_bos is set and the model has one. Writes at most
 * cap ids to out and the full count to *n_out; returns LLM_ESPACE when cap
 * was too small (call again with *n_out). LLM_ESTATE when the model has no
 * tokenizer. Thread-safe. */
LLM_API int llm_model_tokenize(const llm_model *model, const char *text, size_t len,
                               int add_bos, int32_t *out, size_t cap,
                               size_t *n_out);

/* As llm_model_tokenize, but text spelling a special token (one of type
 * control, user-defined or unknown, e.g. "<|eot_id|>", "<start_of_turn>",
 * "<s>") becomes that token, as a rendered chat prompt needs; only the
 * text between such spellings is tokenized (llama.cpp's parse_special:
 * longest special token first; under SentencePiece each stretch of plain
 * text gets its own prefix space). Same results and errors as
 * llm_model_tokenize. Thread-safe. */
LLM_API int llm_model_tokenize_special(const llm_model *model, const char *text, size_t len,
                                       int add_bos, int32_t *out, size_t cap,
                                       size_t *n_out);

/* The id of the special token (control, user-defined or unknown type)
 * whose text is exactly len bytes at s, in *id. LLM_EINVAL when the
 * vocabulary has none, LLM_ESTATE when the model has no tokenizer. Scans
 * the vocabulary: for start-up, not per token. Thread-safe. */
LLM_API int llm_model_special_token(const llm_model *model, const char *s, size_t len,
                                    int32_t *id);

/* Whether the model's tokenizer asks for BOS before a text
 * (tokenizer.ggml.add_bos_token; SentencePiece vocabularies default to
 * yes): 1 or 0; 0 without a tokenizer or BOS. Thread-safe. */
LLM_API int llm_model_add_bos(const llm_model *model);

/* The bytes one token decodes to (byte-fallback tokens give their byte; the
 * SentencePiece word marker becomes a space). Writes at most cap bytes (no
 * NUL) and the full length to *n_out; LLM_ESPACE when cap was too small.
 * prev is the previous token or -1 (a leading space after BOS is dropped,
 * as SentencePiece detokenization does). Thread-safe. */
LLM_API int llm_model_token_text(const llm_model *model, int32_t prev,
                                 int32_t token, char *out, size_t cap,
                                 size_t *n_out);

/* ---- sessions ---------------------------------------------------------- */

typedef struct llm_session_options {
    uint16_t version;  /* LLM_SESSION_OPTIONS_VERSION */
    uint16_t size;     /* sizeof(llm_session_options) */
    int32_t n_ctx;     /* KV cache positions; <= 0 or > trained: trained */
    int32_t n_batch;   /* most tokens in one forward (prefill chunk, verify
                          width); <= 0: 512, capped at n_ctx */
    uint64_t request;  /* request id carried by markers */
    /* Added after the first release (a smaller size means NULL). */
    const char *placement; /* layer split over local and remote shards
                              (docs/split.md), e.g.
                              "0-7@local,8-15@spawn?transport=shared";
                              NULL or "": monolithic */
} llm_session_options;

#define LLM_SESSION_OPTIONS_VERSION 1
#define LLM_SESSION_OPTIONS_INIT \
    {LLM_SESSION_OPTIONS_VERSION, (uint16_t)sizeof(llm_session_options), 0, 0, 0, 0}

/* Creates a session over model: its KV cache (n_ctx positions) and all run
 * buffers. opt may be NULL. The model must outlive the session. On failure
 * *out is NULL and err holds one line. The caller owns *out.
 * With a placement, each shard keeps the KV cache of its own layers: local
 * shards in this process, remote shards in shard daemons (pm-shardd), which
 * the session connects to (or spawns and later reaps) here. A bad
 * placement is LLM_EINVAL with err naming the problem; a shard that cannot
 * be reached or started is LLM_EBACKEND naming the shard. Every later call
 * behaves as for a monolithic session; a shard failure during a forward is
 * LLM_EBACKEND with llm_session_error naming the shard, and the next call
 * reconnects (or respawns) it. */
LLM_API int llm_session_create(llm_model *model, const llm_session_options *opt,
                               llm_session **out, char *err, size_t errlen);

/* Frees a session. NULL is harmless. */
LLM_API void llm_session_free(llm_session *s);

/* The detail line of the session's last failure ("" when none). The string
 * belongs to the session and changes with the next failing call. */
LLM_API const char *llm_session_error(const llm_session *s);

/* Sets the session's default request id: the one llm_prefill, llm_decode
 * and llm_verify pass to their forwards, and llm_generate when its params
 * name none. llm_forward takes its id as an argument instead. */
LLM_API void llm_session_set_request(llm_session *s, uint64_t request);

/* The session's default request id (the last set). */
LLM_API uint64_t llm_session_get_request(const llm_session *s);

/* quiet != 0: the session's forwards emit no ranges at all (no pm.prefill,
 * pm.decode or layer range), so they can run inside a caller's leaf range:
 * a speculative drafter's forwards inside its one pm.draft. quiet == 0 (the
 * default) restores the ranges of the marker contract. */
LLM_API void llm_session_set_quiet(llm_session *s, int quiet);

/* Positions filled in the KV cache (the next token's position), and the
 * cache's capacity. */
LLM_API uint32_t llm_session_pos(const llm_session *s);
LLM_API uint32_t llm_session_n_ctx(const llm_session *s);

/* The most tokens one forward takes (the session's n_batch): the widest
 * llm_verify. */
LLM_API uint32_t llm_session_n_batch(const llm_session *s);

/* What a forward hands back (llm_forward_params.output). */
enum {
    LLM_OUTPUT_NONE = 0,   /* nothing: the output head does not even run */
    LLM_OUTPUT_LOGITS = 1, /* rows of n_vocab logits, session-owned */
    LLM_OUTPUT_ARGMAX = 2  /* each row's greedy id (llm_sample's argmax with
                              temperature 0, bit for bit), taken where the
                              logits are made when the session can: a GPU's
                              argmax, a shard daemon; only the ids cross */
};

/* One forward request: the phase, the request id its ranges carry, and
 * exactly what it must hand back. Begins with version and size so it can
 * grow; initialize with LLM_FORWARD_PARAMS_INIT. */
typedef struct llm_forward_params {
    uint16_t version;  /* LLM_FORWARD_PARAMS_VERSION */
    uint16_t size;     /* sizeof(llm_forward_params) */
    pm_phase phase;    /* PM_PHASE_EXACT (a prefill, in chunks), _DECODE (one
                          token) or _VERIFY (up to n_batch tokens at once) */
    int32_t chunk;     /* exact: tokens per forward; <= 0 or > n_batch:
                          n_batch */
    int32_t output;    /* LLM_OUTPUT_* */
    int32_t rows;      /* LOGITS, ARGMAX: rows of the last forward handed
                          back, the last `rows` of its tokens: 1 (the next
                          token's) up to all of them (a verify's n) */
    uint64_t request;  /* request id of every range the call emits */
    /* Added for target features (issue 17; a caller's older, shorter
     * struct means none). The residual stream after each chosen layer,
     * the hidden state the next layer reads (a drafter conditioned on
     * the target's features reads it), for every token of the call, any
     * phase, any output, chunked or not: written into the caller's
     * buffer as features[j][t][d] = layer features_layers[j], token t of
     * the call (0..n-1), component d of dim, i.e. n_features_layers
     * planes of n x dim floats. */
    int32_t n_features_layers;      /* 0: none; else 1..LLM_FEATURES_MAX */
    const int32_t *features_layers; /* model layers, strictly ascending */
    float *features;                /* caller-owned, features_cap floats */
    size_t features_cap;            /* floats of room: at least
                                       n_features_layers * n * dim */
} llm_forward_params;

/* Most layers one forward reports features of. */
#define LLM_FEATURES_MAX 8

#define LLM_FORWARD_PARAMS_VERSION 1
#define LLM_FORWARD_PARAMS_INIT \
    {LLM_FORWARD_PARAMS_VERSION, (uint16_t)sizeof(llm_forward_params), PM_PHASE_EXACT, 0, \
     LLM_OUTPUT_LOGITS, 1, 0, 0, 0, 0, 0}

/* The one forward call: runs n tokens at the session's position with
 * phase p->phase and request id p->request, and hands back what p asks
 * for. exact: forwards of at most p->chunk tokens, one pm.prefill range
 * each; every chunk but the last asks for nothing, the last for p's
 * output. decode: n == 1, one pm.decode range. verify: n <= n_batch in one
 * forward whose layer ranges say mode=verify, inside whatever range the
 * caller holds. The output comes from the last forward: LOGITS points
 * *logits (may be NULL: then nothing is handed out) at rows x n_vocab floats,
 * session-owned and valid until its next forward; ARGMAX writes rows ids
 * into ids (caller-owned, required). rows must be 1..n and lie in the last
 * forward (a multi-chunk prefill hands back rows of its last chunk only).
 * Errors and ranges as llm_prefill's, llm_decode's and llm_verify's (which
 * are this call with the session's default request id); a bad phase,
 * output or rows is LLM_EINVAL and runs nothing, as is a bad features
 * request (a layer outside the model, more than LLM_FEATURES_MAX, layers
 * repeated or out of order, no buffer or too small a one). A split's
 * shards each capture their own layers' features, remote shards returning
 * them in their reply. On a failure the buffer's contents are
 * unspecified. */
LLM_API int llm_forward(llm_session *s, const llm_forward_params *p, const int32_t *tokens,
                        size_t n, const float **logits, int32_t *ids);

/* Exact prefill: runs n tokens at positions pos..pos+n-1 in forwards of at
 * most chunk tokens (chunk <= 0 or > n_batch: n_batch), one pm.prefill range
 * per forward. On success *logits (when not NULL) points at the vocabulary
 * logits of the last token, owned by the session and valid until its next
 * forward. LLM_ECTX when pos+n exceeds n_ctx (nothing is run); LLM_ETOKEN on
 * a bad id (nothing is run). n == 0 is LLM_EINVAL. */
LLM_API int llm_prefill(llm_session *s, const int32_t *tokens, size_t n,
                        int32_t chunk, const float **logits);

/* One decode step: runs token at position pos (one pm.decode range) and
 * points *logits at the next token's logits (session-owned, as above). */
LLM_API int llm_decode(llm_session *s, int32_t token, const float **logits);

/* Batched verification: runs n tokens (n <= n_batch) at positions
 * pos..pos+n-1 in one forward whose layer ranges say mode=verify, and
 * points *logits at n rows of n_vocab logits, row i predicting the token
 * after tokens[i] (session-owned, valid until the next forward). The cache
 * keeps all n positions; roll back with llm_session_truncate. */
LLM_API int llm_verify(llm_session *s, const int32_t *tokens, size_t n,
                       const float **logits);

/* Rolls the session back so that pos positions remain (speculative
 * rollback); later positions are forgotten. pos must not exceed the current
 * position (LLM_EINVAL). */
LLM_API int llm_session_truncate(llm_session *s, uint32_t pos);

/* Empties the session (position 0) and clears its timings. */
LLM_API void llm_session_reset(llm_session *s);

/* Wall-clock time spent in forwards since creation or the last reset. */
typedef struct llm_timings {
    uint64_t prefill_tokens;
    uint64_t prefill_ns;
    uint64_t decode_tokens; /* llm_decode steps */
    uint64_t decode_ns;
    uint64_t verify_tokens;
    uint64_t verify_ns;
    uint64_t sample_ns;     /* time in llm_generate's host sampling (a greedy
                               token taken on the device counts in decode_ns) */
} llm_timings;

LLM_API void llm_session_get_timings(const llm_session *s, llm_timings *t);

/* ---- sampling ---------------------------------------------------------- */

typedef struct llm_sampler_params {
    uint16_t version;    /* LLM_SAMPLER_PARAMS_VERSION */
    uint16_t size;       /* sizeof(llm_sampler_params) */
    float temperature;   /* <= 0: greedy (argmax, lowest id on ties) */
    int32_t top_k;       /* <= 0 or >= n_vocab: no top-k cut */
    float top_p;         /* >= 1 or <= 0: no nucleus cut */
    uint64_t seed;       /* the same seed gives the same draws */
} llm_sampler_params;

#define LLM_SAMPLER_PARAMS_VERSION 1
#define LLM_SAMPLER_PARAMS_INIT \
    {LLM_SAMPLER_PARAMS_VERSION, (uint16_t)sizeof(llm_sampler_params), 0.0f, 0, 1.0f, 0}

/* Creates a sampler for a vocabulary of n_vocab with its work buffers. The
 * caller owns *out (NULL on failure). */
LLM_API int llm_sampler_create(const llm_sampler_params *p, int32_t n_vocab,
                               llm_sampler **out);
LLM_API void llm_sampler_free(llm_sampler *sp);

/* Restarts the random stream from seed. */
LLM_API void llm_sampler_reseed(llm_sampler *sp, uint64_t seed);

/* Draws a token from n_vocab logits (not modified). Greedy with
 * temperature <= 0; otherwise softmax(logits / T), cut to the top_k most
 * likely, then to the smallest prefix whose mass reaches top_p, and one
 * draw from the renormalized rest. Allocates nothing. Returns the token,
 * or LLM_EINVAL on bad arguments. */
LLM_API int32_t llm_sample(llm_sampler *sp, const float *logits);

/* The parameters and vocabulary size the sampler was created with. */
LLM_API void llm_sampler_get_params(const llm_sampler *sp, llm_sampler_params *p);
LLM_API int32_t llm_sampler_n_vocab(const llm_sampler *sp);

/* The distribution llm_sample draws from, as n_vocab probabilities into
 * probs (caller-owned, n_vocab floats): the same temperature, top-k and
 * top-p rules, zero outside the kept candidates, the rest summing to 1;
 * greedy (temperature <= 0) gives 1 at the argmax. Consumes no randomness
 * and allocates nothing. Speculative sampling compares the target's and
 * the draft's distributions through it. 0 or LLM_EINVAL. */
LLM_API int llm_sampler_probs(llm_sampler *sp, const float *logits, float *probs);

/* One draw from n_vocab non-negative weights (need not sum to 1), using
 * the sampler's random stream. Returns the token, or LLM_EINVAL when a
 * weight is negative or NaN or all are zero. Allocates nothing. */
LLM_API int32_t llm_sampler_draw(llm_sampler *sp, const float *probs);

/* One uniform number in [0, 1) from the sampler's random stream. */
LLM_API double llm_sampler_uniform(llm_sampler *sp);

/* ---- generation -------------------------------------------------------- */

/* Called once per generated token (ids, text via llm_model_token_text). Return
 * nonzero to stop after this token. */
typedef int (*llm_token_cb)(void *user, int32_t token);

typedef struct llm_generate_params {
    uint16_t version;     /* LLM_GENERATE_PARAMS_VERSION */
    uint16_t size;        /* sizeof(llm_generate_params) */
    int32_t max_tokens;   /* most tokens to generate (> 0) */
    int32_t chunk;        /* prefill chunk (see llm_prefill) */
    int32_t stop_at_eos;  /* nonzero: stop when the model's EOS is drawn */
    const int32_t *stop_tokens; /* further stop ids (not emitted) */
    size_t n_stop_tokens;
    /* Added after the first release (callers passing the shorter size get
     * has_request 0). */
    int32_t has_request;  /* nonzero: every range of the call carries
                             `request`; 0: the session's default id */
    uint64_t request;
} llm_generate_params;

#define LLM_GENERATE_PARAMS_VERSION 1
#define LLM_GENERATE_PARAMS_INIT \
    {LLM_GENERATE_PARAMS_VERSION, (uint16_t)sizeof(llm_generate_params), 16, 0, 1, 0, 0, 0, 0}

/* Why llm_generate stopped. */
enum { LLM_STOP_LENGTH = 0, LLM_STOP_EOS = 1, LLM_STOP_TOKEN = 2,
       LLM_STOP_CALLBACK = 3, LLM_STOP_CONTEXT = 4 };

/* Prefills prompt (n_prompt >= 1 tokens) at the session's current position,
 * then samples and decodes until a stop condition: max_tokens generated,
 * EOS / a stop token drawn (not emitted), the callback asked to stop, or the
 * context is full. cb (may be NULL) sees every emitted token. *n_generated
 * and *stop_reason (either may be NULL) say what happened. The last emitted
 * token is not fed back: afterwards the cache holds the prompt and every
 * emitted token but the last (llm_session_pos), so a continuation starts by
 * feeding that token. With a greedy sampler over the model's vocabulary,
 * each token is asked of the forward as its argmax (LLM_OUTPUT_ARGMAX), so
 * on a GPU or a remote last shard only the id crosses, not the logits; the
 * tokens are the ones llm_sample would give. */
LLM_API int llm_generate(llm_session *s, llm_sampler *sp,
                         const int32_t *prompt, size_t n_prompt,
                         const llm_generate_params *p, llm_token_cb cb,
                         void *user, size_t *n_generated, int *stop_reason);

#ifdef __cplusplus
}
#endif
#endif /* PHASEMARK_ENGINE_H */
