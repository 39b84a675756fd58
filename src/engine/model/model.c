/* model.c — opening and describing a model; the public model functions of
 * engine.h and the shared validation helpers of model.h.
 */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errtext.h"
#include "backend.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "tokenizer.h"
#include "tokenizer_special.h"


/* Bounds generous enough for any llama-family model in use, tight enough
 * that every size product below fits comfortably in 64 bits. */
#define MAX_VOCAB (1 << 22)
#define MAX_WIDTH (1 << 17)
#define MAX_LAYERS 1024
#define MAX_CTX (1 << 22)

static int bad(char *err, size_t errlen, const char *what, long long v)
{
    llm_errf(err, errlen, "model: %s (%lld) is out of range", what, v);
    return LLM_EFORMAT;
}

int llm_hparams_validate(const llm_hparams *hp, char *err, size_t errlen)
{
    if (hp->n_vocab < 1 || hp->n_vocab > MAX_VOCAB)
        return bad(err, errlen, "vocabulary size", hp->n_vocab);
    if (hp->dim < 1 || hp->dim > MAX_WIDTH)
        return bad(err, errlen, "embedding_length", hp->dim);
    if (hp->n_layers < 1 || hp->n_layers > MAX_LAYERS)
        return bad(err, errlen, "block_count", hp->n_layers);
    if (hp->ffn_dim < 1 || hp->ffn_dim > MAX_WIDTH)
        return bad(err, errlen, "feed_forward_length", hp->ffn_dim);
    /* head_dim is dim / n_heads unless the file gave it (the loaders check
     * the division where it is one). */
    if (hp->n_heads < 1 || hp->n_heads > MAX_WIDTH)
        return bad(err, errlen, "head_count", hp->n_heads);
    if (hp->head_dim < 2 || hp->head_dim % 2 != 0)
        return bad(err, errlen, "head size (must be even)", hp->head_dim);
    if ((int64_t)hp->n_heads * hp->head_dim > MAX_WIDTH)
        return bad(err, errlen, "head_count times head size", (long long)hp->n_heads * hp->head_dim);
    if (hp->n_kv_heads < 1 || hp->n_heads % hp->n_kv_heads != 0)
        return bad(err, errlen, "head_count_kv (must divide head_count)", hp->n_kv_heads);
    if (hp->n_ctx_train < 1 || hp->n_ctx_train > MAX_CTX)
        return bad(err, errlen, "context_length", hp->n_ctx_train);
    if (!(hp->norm_eps > 0.0f) || !(hp->norm_eps < 1.0f)) {
        llm_errf(err, errlen, "model: rms epsilon %g is out of range (0, 1)", (double)hp->norm_eps);
        return LLM_EFORMAT;
    }
    if (!(hp->rope_base > 1.0f) || !isfinite(hp->rope_base)) {
        llm_errf(err, errlen, "model: rope freq_base %g is out of range", (double)hp->rope_base);
        return LLM_EFORMAT;
    }
    return 0;
}

int llm_tensor_check(const llm_tensor *t, const char *name, int64_t ne0,
                     int64_t ne1, char *err, size_t errlen)
{
    if (t->ne0 != ne0 || t->ne1 != ne1) {
        llm_errf(err, errlen, "model: tensor '%s' is %lldx%lld, expected %lldx%lld",
                 name, (long long)t->ne0, (long long)t->ne1, (long long)ne0, (long long)ne1);
        return LLM_EFORMAT;
    }
    return 0;
}

int llm_model_alloc_norms(llm_model *m, size_t n_floats, char *err, size_t errlen)
{
    m->norms = malloc(n_floats * sizeof(float));
    if (!m->norms) {
        llm_errf(err, errlen, "model: out of memory");
        return LLM_ENOMEM;
    }
    return 0;
}

int llm_model_backend_check(const llm_model *m, char *err, size_t errlen)
{
    return m->be->ops->status(m->be, err, errlen) ? LLM_EBACKEND : 0;
}

int llm_model_share_threads(llm_model *dst, const llm_model *src)
{
    pthread_mutex_lock(&dst->lock);
    int rc = llm_backend_share_threads(dst->be, src ? src->be : NULL);
    pthread_mutex_unlock(&dst->lock);
    return rc;
}

/* Llama 3.1's frequency factors: a GGUF tensor rope_freqs.weight of
 * head_dim/2 f32 values (llama.cpp's converter computes them from the
 * "llama3" rope_scaling of config.json) divides each frequency. 0 with
 * *ff NULL when the file has none; a tensor of another shape or type, or a
 * factor that is not finite and positive, is refused with one line. */
static int rope_factors(const llm_model *m, int32_t half, const float **ff, char *err, size_t errlen)
{
    *ff = NULL;
    const llm_gguf_tensor *t = m->gguf ? llm_gguf_find_tensor(m->gguf, "rope_freqs.weight") : NULL;
    if (!t)
        return 0;
    if (t->type != LLM_TYPE_F32 || t->n_dims != 1 || t->ne[0] != (uint64_t)half) {
        llm_errf(err, errlen, "model: tensor 'rope_freqs.weight' must be f32 [%d] (head_dim/2)", (int)half);
        return LLM_EFORMAT;
    }
    const unsigned char *p = t->data;
    for (int32_t i = 0; i < half; i++) {
        float f;
        memcpy(&f, p + 4 * (size_t)i, sizeof f);
        if (!(f > 0.0f) || !isfinite(f)) {
            llm_errf(err, errlen, "model: rope_freqs.weight[%d] = %g is not a positive factor", (int)i, (double)f);
            return LLM_EFORMAT;
        }
    }
    *ff = (const float *)t->data; /* read through memcpy below: no alignment assumed */
    return 0;
}

/* RoPE frequencies base^(-2i/head_dim) (divided by rope_freqs.weight[i]
 * when the file has it), once per model: every workspace and every
 * backend reads the same table. */
static int rope_table(llm_model *m, char *err, size_t errlen)
{
    int32_t half = m->hp.head_dim / 2;
    const float *ff;
    int rc = rope_factors(m, half, &ff, err, errlen);
    if (rc)
        return rc;
    m->inv_freq = malloc((size_t)(half > 0 ? half : 1) * sizeof(double));
    if (!m->inv_freq) {
        llm_errf(err, errlen, "model: out of memory");
        return LLM_ENOMEM;
    }
    for (int32_t i = 0; i < half; i++) {
        m->inv_freq[i] = pow((double)m->hp.rope_base, -2.0 * i / m->hp.head_dim);
        if (ff) {
            float f;
            memcpy(&f, (const unsigned char *)ff + 4 * (size_t)i, sizeof f);
            m->inv_freq[i] /= (double)f;
        }
    }
    return 0;
}

/* ---- opening ----------------------------------------------------------------- */

/* Records what a layer split needs to open the same model elsewhere, and
 * the span to load (fields past the first release only when opt has them). */
static int open_setup(llm_model *m, const char *path, const llm_model_options *opt,
                      char *err, size_t errlen)
{
    m->span_first = 0;
    m->span_last = -1;
    if (opt->size >= offsetof(llm_model_options, span_layers) + sizeof opt->span_layers &&
        opt->span_layers != 0) {
        if (opt->span_layers < 0 || opt->span_first < 0 ||
            (int64_t)opt->span_first + opt->span_layers - 1 > INT32_MAX) {
            llm_errf(err, errlen, "model: layer span %d+%d is invalid",
                     (int)opt->span_first, (int)opt->span_layers);
            return LLM_EINVAL;
        }
        m->span_first = opt->span_first;
        m->span_last = opt->span_first + opt->span_layers - 1;
    }
    m->no_mmap = opt->size >= offsetof(llm_model_options, no_mmap) + sizeof opt->no_mmap &&
                 opt->no_mmap != 0;
    m->path = strdup(path);
    m->backend_name = strdup(opt->backend ? opt->backend : "cpu");
    m->n_threads_opt = opt->n_threads;
    if (!m->path || !m->backend_name) {
        llm_errf(err, errlen, "model: out of memory");
        return LLM_ENOMEM;
    }
    return 0;
}

/* 1 when the file starts with the GGUF magic, 0 when not, negative on I/O
 * failure. */
static int is_gguf(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        llm_errf(err, errlen, "model: cannot open '%s': %s", path, strerror(errno));
        return LLM_EIO;
    }
    unsigned char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    return got == 4 && memcmp(magic, "GGUF", 4) == 0;
}

static const char *uniform_type(const llm_model *m)
{
    uint32_t t = m->layers[m->span_first].wq.type;
    for (int32_t l = m->span_first; l <= m->span_last; l++) {
        const llm_layer *L = &m->layers[l];
        const llm_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            if (ts[i]->type != t)
                return "mixed";
    }
    return llm_type_find(&m->types, t)->name; /* bound: the type is known */
}

/* Fails unless the backend has a kernel for `t`'s type. */
static int check_kernel(const llm_model *m, const llm_tensor *t, char *err, size_t errlen)
{
    const llm_backend *be = m->be;
    if (!t->data || (be->ops->supports_type && be->ops->supports_type(be, t->type)))
        return 0;
    llm_errf(err, errlen, "model: tensor type %s has no %s kernel",
             llm_type_find(&m->types, t->type)->name, be->ops->name);
    return LLM_EUNSUP;
}

/* Every tensor the model bound has a kernel on its backend: a type the
 * backend lacks is refused here, by name, never computed some other way. */
static int check_kernels(const llm_model *m, char *err, size_t errlen)
{
    int rc = check_kernel(m, &m->tok_embd, err, errlen);
    for (int32_t l = m->span_first; rc == 0 && l <= m->span_last; l++) {
        const llm_layer *L = &m->layers[l];
        const llm_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; rc == 0 && i < sizeof ts / sizeof ts[0]; i++)
            rc = check_kernel(m, ts[i], err, errlen);
    }
    return rc ? rc : check_kernel(m, &m->output, err, errlen);
}

static void count_weights(llm_model *m)
{
    const llm_hparams *hp = &m->hp;
    /* A shard's model counts what it holds: its blocks, and the
     * embedding and head when its span has them. */
    int first = m->span_first == 0, last = m->span_last == hp->n_layers - 1;
    uint64_t params = (uint64_t)(2 * (m->span_last - m->span_first + 1) + last) * hp->dim;
    if (first)
        params += (uint64_t)hp->n_vocab * hp->dim;
    uint64_t bytes = 0;
    for (int32_t l = m->span_first; l <= m->span_last; l++) {
        const llm_layer *L = &m->layers[l];
        const llm_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
            params += (uint64_t)ts[i]->ne0 * (uint64_t)ts[i]->ne1;
            bytes += (uint64_t)ts[i]->row_bytes * (uint64_t)ts[i]->ne1;
        }
        /* Biases and per-head norms: qwen2's and qwen3's extra vectors. */
        uint64_t q = (uint64_t)hp->n_heads * hp->head_dim, kv = (uint64_t)hp->n_kv_heads * hp->head_dim;
        params += (L->bq ? q : 0) + (L->bk ? kv : 0) + (L->bv ? kv : 0);
        params += (uint64_t)((L->q_norm != NULL) + (L->k_norm != NULL)) * (uint64_t)hp->head_dim;
    }
    if (last && (!first || m->output.data != m->tok_embd.data))
        params += (uint64_t)hp->n_vocab * hp->dim;
    if (last)
        bytes += (uint64_t)m->output.row_bytes * (uint64_t)m->output.ne1;
    m->n_params = params;
    m->weight_bytes = bytes;
    m->weight_type = uniform_type(m);
}

/* The common end of opening: the backend (given, else created), its
 * kernels for every tensor type, the weights on it, the counts. Frees m
 * and the given backend on failure (rc from the loader, or a later step). */
static int open_finish(llm_model *m, const llm_model_options *opt, llm_backend *given, int rc,
                       llm_model **out, char *err, size_t errlen)
{
    if (given)
        m->be = given; /* freed with m from here on */
    else if (!rc)
        rc = llm_backend_create(opt->backend, opt->n_threads, &m->be, err, errlen);
    if (!rc)
        rc = rope_table(m, err, errlen);
    if (!rc)
        rc = check_kernels(m, err, errlen);
    /* A device backend uploads every weight now, so that no forward does. */
    if (!rc)
        rc = m->be->ops->prepare(m->be, m, err, errlen);
    if (rc) {
        llm_model_free(m);
        return rc;
    }
    m->bos = m->tok ? llm_tokenizer_bos(m->tok) : -1;
    m->eos = m->tok ? llm_tokenizer_eos(m->tok) : -1;
    count_weights(m);
    *out = m;
    return 0;
}

/* A new model with its lock, or NULL (err says why). */
static llm_model *model_new(char *err, size_t errlen)
{
    llm_model *m = calloc(1, sizeof *m);
    if (!m) {
        llm_errf(err, errlen, "model: out of memory");
        return NULL;
    }
    if (pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m);
        llm_errf(err, errlen, "model: cannot create lock");
        return NULL;
    }
    return m;
}

/* The checks before a model exists; 0 or the status (err set). */
static int open_args(const char *path, const llm_model_options *opt, llm_model **out,
                     char *err, size_t errlen)
{
    if (!path || !out) {
        llm_errf(err, errlen, "model: path and out are required");
        return LLM_EINVAL;
    }
    if (opt->version != LLM_MODEL_OPTIONS_VERSION ||
        opt->size < offsetof(llm_model_options, span_first)) {
        llm_errf(err, errlen, "model: options version %u size %u not understood",
                 (unsigned)opt->version, (unsigned)opt->size);
        return LLM_EINVAL;
    }
    return 0;
}

int llm_model_open_hooked(const char *path, const llm_model_options *opt,
                          const llm_model_hooks *hooks, llm_model **out, char *err,
                          size_t errlen)
{
    llm_model_options defaults = LLM_MODEL_OPTIONS_INIT;
    llm_backend *given = hooks ? hooks->backend : NULL;
    if (out)
        *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    if (!opt)
        opt = &defaults;
    int rc = open_args(path, opt, out, err, errlen);
    int gguf = rc ? rc : is_gguf(path, err, errlen);
    llm_model *m = gguf < 0 ? NULL : model_new(err, errlen);
    if (!m) {
        if (given)
            given->ops->destroy(given);
        return gguf < 0 ? gguf : LLM_ENOMEM;
    }
    if (hooks && hooks->types)
        m->types = *hooks->types;
    rc = open_setup(m, path, opt, err, errlen);
    if (!rc)
        rc = gguf ? llm_model_load_gguf(m, path, err, errlen)
                  : llm_model_load_llama2c(m, path, opt->tokenizer_path, err, errlen);
    return open_finish(m, opt, given, rc, out, err, errlen);
}

int llm_model_open(const char *path, const llm_model_options *opt,
                   llm_model **out, char *err, size_t errlen)
{
    return llm_model_open_hooked(path, opt, NULL, out, err, errlen);
}

int llm_model_open_gguf_memory(const void *buf, size_t len, int32_t n_threads,
                               llm_model **out, char *err, size_t errlen)
{
    llm_model_options opt = LLM_MODEL_OPTIONS_INIT;
    opt.n_threads = n_threads;
    *out = NULL;
    llm_model *m = model_new(err, errlen);
    if (!m)
        return LLM_ENOMEM;
    int rc = open_setup(m, "(memory)", &opt, err, errlen);
    if (!rc)
        rc = llm_model_load_gguf_memory(m, buf, len, err, errlen);
    return open_finish(m, &opt, NULL, rc, out, err, errlen);
}

void llm_model_free(llm_model *m)
{
    if (!m)
        return;
    if (m->be)
        m->be->ops->destroy(m->be);
    llm_tokenizer_free(m->tok);
    if (m->file)
        m->file_close(m->file);
    free(m->layers);
    free(m->norms);
    free(m->inv_freq);
    free(m->path);
    free(m->backend_name);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

int llm_model_meta_str(const llm_model *m, const char *key, const char **s, size_t *len)
{
    if (!m || !key || !s || !len || !m->gguf)
        return LLM_EINVAL;
    return llm_gguf_get_str(m->gguf, key, s, len) == 0 ? 0 : LLM_EINVAL;
}

void llm_model_get_info(const llm_model *m, llm_model_info *info)
{
    const llm_hparams *hp = &m->hp;
    memset(info, 0, sizeof *info);
    info->n_vocab = hp->n_vocab;
    info->n_layers = hp->n_layers;
    info->dim = hp->dim;
    info->n_heads = hp->n_heads;
    info->n_kv_heads = hp->n_kv_heads;
    info->ffn_dim = hp->ffn_dim;
    info->n_ctx_train = hp->n_ctx_train;
    info->bos = m->bos;
    info->eos = m->eos;
    info->has_tokenizer = m->tok != NULL;
    info->n_params = m->n_params;
    info->weight_bytes = m->weight_bytes;
    info->weight_type = m->weight_type;
    info->backend = m->be->ops->name;
    info->n_threads = m->be->n_threads;
}

/* ---- text ------------------------------------------------------------------------ */

int llm_model_tokenize(const llm_model *m, const char *text, size_t len,
                       int add_bos, int32_t *out, size_t cap, size_t *n_out)
{
    if (!m || (!text && len) || !n_out || (!out && cap))
        return LLM_EINVAL;
    if (!m->tok)
        return LLM_ESTATE;
    return llm_tokenize(m->tok, text ? text : "", len, add_bos, out, cap, n_out);
}

int llm_model_tokenize_special(const llm_model *m, const char *text, size_t len,
                               int add_bos, int32_t *out, size_t cap, size_t *n_out)
{
    if (!m || (!text && len) || !n_out || (!out && cap))
        return LLM_EINVAL;
    if (!m->tok)
        return LLM_ESTATE;
    return llm_tokenize_special(m->tok, text ? text : "", len, add_bos, out, cap, n_out);
}

int llm_model_special_token(const llm_model *m, const char *s, size_t len, int32_t *id)
{
    if (!m || !s || !id)
        return LLM_EINVAL;
    if (!m->tok)
        return LLM_ESTATE;
    int32_t v = llm_tokenizer_find_special(m->tok, s, len);
    if (v < 0)
        return LLM_EINVAL;
    *id = v;
    return 0;
}

int llm_model_add_bos(const llm_model *m)
{
    return m && m->tok && llm_tokenizer_bos(m->tok) >= 0 && llm_tokenizer_add_bos(m->tok);
}

int llm_model_token_text(const llm_model *m, int32_t prev, int32_t token,
                         char *out, size_t cap, size_t *n_out)
{
    if (!m || !n_out || (!out && cap))
        return LLM_EINVAL;
    if (!m->tok)
        return LLM_ESTATE;
    char piece[LLM_TOK_MAX_PIECE];
    size_t n;
    int rc = llm_token_to_bytes(m->tok, token, piece, sizeof piece, &n);
    if (rc)
        return rc; /* LLM_ETOKEN: the tokenizer's vocabulary is the model's */
    const char *p = piece;
    /* SentencePiece drops the space it prefixed to the text, which shows
     * up on the first piece after BOS. */
    if (prev >= 0 && prev == m->bos && llm_tokenizer_kind(m->tok) == LLM_TOK_SPM &&
        llm_tokenizer_add_space_prefix(m->tok) && n > 0 && p[0] == ' ') {
        p++;
        n--;
    }
    *n_out = n;
    if (n > cap)
        return LLM_ESPACE;
    memcpy(out, p, n);
    return 0;
}
