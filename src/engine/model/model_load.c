/* model_load.c — filling llm_model from a GGUF file or a llama2.c
 * checkpoint.
 *
 * Both formats end up as the same table of named tensors with GGUF names
 * and shapes (llama2c.h exposes a checkpoint that way), so one routine binds
 * tensors for both; only the hyper-parameters and the tokenizer come from
 * format-specific places. Matrix tensors stay in the mapping; norm vectors
 * are converted to f32 into the model's one norms buffer.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errtext.h"
#include "gguf.h"
#include "llama2c.h"
#include "model.h"
#include "quant.h"
#include "tokenizer.h"

typedef const llm_gguf_tensor *(*find_fn)(const void *h, const char *name);

static const llm_gguf_tensor *find_gguf(const void *h, const char *name)
{
    return llm_gguf_find_tensor(h, name);
}

static const llm_gguf_tensor *find_l2c(const void *h, const char *name)
{
    return llm_llama2c_find_tensor(h, name);
}

static void close_gguf(void *h)
{
    llm_gguf_close(h);
}

static void close_l2c(void *h)
{
    llm_llama2c_close(h);
}

/* ---- tensors ------------------------------------------------------------- */

static int bind_matrix(const llm_model *m, llm_tensor *t, find_fn find, const void *h,
                       const char *name, int64_t ne0, int64_t ne1, char *err,
                       size_t errlen)
{
    const llm_gguf_tensor *g = find(h, name);
    if (!g) {
        llm_errf(err, errlen, "model: tensor '%s' is missing", name);
        return LLM_EFORMAT;
    }
    if (g->n_dims > 2 || g->ne[2] != 1 || g->ne[3] != 1) {
        llm_errf(err, errlen, "model: tensor '%s' has %u dimensions, expected 2",
                 name, (unsigned)g->n_dims);
        return LLM_EFORMAT;
    }
    const llm_type_traits *tt = llm_type_find(&m->types, g->type);
    if (!llm_type_traits_converts(tt)) {
        llm_errf(err, errlen, "model: tensor '%s' has type %s, which the engine does not compute with",
                 name, tt ? tt->name : "unknown");
        return LLM_EUNSUP;
    }
    /* Kernels read some types as native elements (f32 weights as floats),
     * the rest bytewise. Mapped files are page-aligned and GGUF aligns
     * tensor data, so only a file declaring a tiny alignment (or a
     * misaligned buffer) fails. */
    if (tt->align > 1 && (uintptr_t)g->data % tt->align != 0) {
        llm_errf(err, errlen, "model: tensor '%s' %s data is not %u-byte aligned", name, tt->name,
                 (unsigned)tt->align);
        return LLM_EFORMAT;
    }
    uint64_t row_bytes;
    if (llm_type_traits_row_bytes(tt, g->ne[0], &row_bytes) != 0) {
        llm_errf(err, errlen, "model: tensor '%s' row of %llu is not whole %s blocks",
                 name, (unsigned long long)g->ne[0], tt->name);
        return LLM_EFORMAT;
    }
    t->data = g->data;
    t->type = g->type;
    t->ne0 = (int64_t)g->ne[0];
    t->ne1 = (int64_t)g->ne[1];
    t->row_bytes = (size_t)row_bytes;
    return llm_tensor_check(t, name, ne0, ne1, err, errlen);
}

/* Converts a vector of n elements of any plain float type (a norm
 * weight, a bias) into dst. A missing one is 1 when req == 0 (*dst is
 * then untouched), else an error. */
static int bind_vector(const llm_model *m, float *dst, find_fn find, const void *h,
                       const char *name, int64_t n, int req, char *err, size_t errlen)
{
    const llm_gguf_tensor *g = find(h, name);
    if (!g && !req)
        return 1;
    if (!g) {
        llm_errf(err, errlen, "model: tensor '%s' is missing", name);
        return LLM_EFORMAT;
    }
    if (g->n_dims != 1 || (int64_t)g->ne[0] != n) {
        llm_errf(err, errlen, "model: tensor '%s' must be a vector of %lld",
                 name, (long long)n);
        return LLM_EFORMAT;
    }
    const llm_type_traits *tt = llm_type_find(&m->types, g->type);
    if (!tt || !tt->is_float || !tt->to_f32) {
        llm_errf(err, errlen, "model: vector '%s' has type %s (f32, f16 or bf16 expected)",
                 name, tt ? tt->name : "unknown");
        return LLM_EUNSUP;
    }
    tt->to_f32(g->data, dst, (size_t)n);
    return 0;
}

static int bind_norm(const llm_model *m, float *dst, find_fn find, const void *h, const char *name,
                     int64_t dim, char *err, size_t errlen)
{
    return bind_vector(m, dst, find, h, name, dim, 1, err, errlen);
}

static const char *arch_name(int32_t arch)
{
    return arch == LLM_ARCH_QWEN2 ? "qwen2" : arch == LLM_ARCH_QWEN3 ? "qwen3" : "llama";
}

/* Floats of the norms buffer one layer takes: its two norms, room for the
 * q/k/v biases, and for qwen3 the two per-head norms. */
static size_t layer_floats(const llm_hparams *hp)
{
    size_t q = (size_t)hp->n_heads * hp->head_dim, kv = (size_t)hp->n_kv_heads * hp->head_dim;
    return 2 * (size_t)hp->dim + q + 2 * kv + 2 * (size_t)hp->head_dim;
}

/* The layer's optional vectors, by architecture (see llm_arch): q/k/v
 * biases (required by qwen2, taken when present by llama, refused by
 * qwen3 as llama.cpp refuses them) and the per-head q/k norms (required
 * by qwen3, refused elsewhere). A tensor the architecture has no place for
 * is refused by name rather than ignored: skipping it would compute some
 * other model. */
static int bind_layer_extras(llm_model *m, int32_t l, float *p, find_fn find, const void *h,
                             char *err, size_t errlen)
{
    const llm_hparams *hp = &m->hp;
    llm_layer *L = &m->layers[l];
    int64_t q = (int64_t)hp->n_heads * hp->head_dim, kv = (int64_t)hp->n_kv_heads * hp->head_dim;
    struct { const float **dst; const char *suffix; int64_t n; int req, allowed; } v[] = {
        {&L->bq, "attn_q.bias", q, hp->arch == LLM_ARCH_QWEN2, hp->arch != LLM_ARCH_QWEN3},
        {&L->bk, "attn_k.bias", kv, hp->arch == LLM_ARCH_QWEN2, hp->arch != LLM_ARCH_QWEN3},
        {&L->bv, "attn_v.bias", kv, hp->arch == LLM_ARCH_QWEN2, hp->arch != LLM_ARCH_QWEN3},
        {&L->q_norm, "attn_q_norm.weight", hp->head_dim, hp->arch == LLM_ARCH_QWEN3,
         hp->arch == LLM_ARCH_QWEN3},
        {&L->k_norm, "attn_k_norm.weight", hp->head_dim, hp->arch == LLM_ARCH_QWEN3,
         hp->arch == LLM_ARCH_QWEN3},
        {NULL, "attn_output.bias", hp->dim, 0, 0},
    };
    char name[64];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        snprintf(name, sizeof name, "blk.%d.%s", (int)l, v[i].suffix);
        if (!v[i].allowed) {
            if (find(h, name)) {
                llm_errf(err, errlen, "model: tensor '%s' is not part of a %s model",
                         name, arch_name(hp->arch));
                return LLM_EUNSUP;
            }
            continue;
        }
        int rc = bind_vector(m, p, find, h, name, v[i].n, v[i].req, err, errlen);
        if (rc < 0)
            return rc;
        if (rc == 0)
            *v[i].dst = p;
        p += v[i].n;
    }
    return 0;
}

static int bind_layer(llm_model *m, int32_t l, find_fn find, const void *h,
                      char *err, size_t errlen)
{
    const llm_hparams *hp = &m->hp;
    llm_layer *L = &m->layers[l];
    int64_t d = hp->dim, q = (int64_t)hp->n_heads * hp->head_dim;
    int64_t kv = (int64_t)hp->n_kv_heads * hp->head_dim, f = hp->ffn_dim;
    float *norms = m->norms + (size_t)l * layer_floats(hp);
    struct { llm_tensor *t; const char *suffix; int64_t ne0, ne1; } mats[] = {
        {&L->wq, "attn_q", d, q},       {&L->wk, "attn_k", d, kv},
        {&L->wv, "attn_v", d, kv},      {&L->wo, "attn_output", q, d},
        {&L->w_gate, "ffn_gate", d, f}, {&L->w_up, "ffn_up", d, f},
        {&L->w_down, "ffn_down", f, d},
    };
    char name[64];
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
        snprintf(name, sizeof name, "blk.%d.%s.weight", (int)l, mats[i].suffix);
        int rc = bind_matrix(m, mats[i].t, find, h, name, mats[i].ne0, mats[i].ne1, err, errlen);
        if (rc)
            return rc;
    }
    snprintf(name, sizeof name, "blk.%d.attn_norm.weight", (int)l);
    int rc = bind_norm(m, norms, find, h, name, d, err, errlen);
    if (rc)
        return rc;
    snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", (int)l);
    rc = bind_norm(m, norms + d, find, h, name, d, err, errlen);
    L->attn_norm = norms;
    L->ffn_norm = norms + d;
    return rc ? rc : bind_layer_extras(m, l, norms + 2 * d, find, h, err, errlen);
}

/* Settles the span to bind: span_last < 0 means through the last layer. */
static int bind_span(llm_model *m, int32_t n_layers, char *err, size_t errlen)
{
    if (m->span_last < 0)
        m->span_last = n_layers - 1;
    if (m->span_first < 0 || m->span_first > m->span_last || m->span_last >= n_layers) {
        llm_errf(err, errlen, "model: layer span %d-%d is outside the model's %d layers (0-%d)",
                 (int)m->span_first, (int)m->span_last, (int)n_layers, (int)n_layers - 1);
        return LLM_EINVAL;
    }
    return 0;
}

/* Binds every tensor of the span once m->hp is set and validated. */
static int bind_tensors(llm_model *m, find_fn find, const void *h, char *err,
                        size_t errlen)
{
    const llm_hparams *hp = &m->hp;
    int rc = llm_model_alloc_norms(m, (size_t)hp->n_layers * layer_floats(hp) + (size_t)hp->dim,
                                   err, errlen);
    if (rc)
        return rc;
    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    if (!m->layers) {
        llm_errf(err, errlen, "model: out of memory");
        return LLM_ENOMEM;
    }
    rc = bind_span(m, hp->n_layers, err, errlen);
    /* The embedding is bound for the first shard, and for the last too when
     * the head is tied to it. */
    int last = m->span_last == hp->n_layers - 1;
    int tied = !find(h, "output.weight");
    if (rc == 0 && (m->span_first == 0 || (last && tied)))
        rc = bind_matrix(m, &m->tok_embd, find, h, "token_embd.weight", hp->dim, hp->n_vocab, err, errlen);
    for (int32_t l = m->span_first; rc == 0 && l <= m->span_last; l++)
        rc = bind_layer(m, l, find, h, err, errlen);
    if (rc || !last)
        return rc;
    float *out_norm = m->norms + (size_t)hp->n_layers * layer_floats(hp);
    rc = bind_norm(m, out_norm, find, h, "output_norm.weight", hp->dim, err, errlen);
    m->out_norm = out_norm;
    if (rc)
        return rc;
    if (!find(h, "output.weight")) { /* tied embedding */
        m->output = m->tok_embd;
        return 0;
    }
    return bind_matrix(m, &m->output, find, h, "output.weight", hp->dim, hp->n_vocab, err, errlen);
}

/* ---- GGUF ------------------------------------------------------------------ */

/* Reads a required (req=1) or optional u32 "<arch>.<key>". */
static int meta_u32(const llm_gguf *g, const llm_hparams *hp, const char *key, int req,
                    uint32_t def, int32_t *out, char *err, size_t errlen)
{
    char full[96];
    uint32_t v = def;
    snprintf(full, sizeof full, "%s.%s", arch_name(hp->arch), key);
    int rc = llm_gguf_get_u32(g, full, &v);
    if (rc == LLM_ENOKEY && !req)
        rc = 0;
    if (rc == 0 && v > INT32_MAX)
        rc = LLM_ERANGE;
    if (rc) {
        llm_errf(err, errlen, "model: metadata %s: %s", full,
                 rc == LLM_ENOKEY ? "missing" : llm_strerror(rc));
        return LLM_EFORMAT;
    }
    *out = (int32_t)v;
    return 0;
}

static int meta_f32(const llm_gguf *g, const llm_hparams *hp, const char *key, float def,
                    float *out, char *err, size_t errlen)
{
    char full[96];
    snprintf(full, sizeof full, "%s.%s", arch_name(hp->arch), key);
    *out = def;
    int rc = llm_gguf_get_f32(g, full, out);
    if (rc == LLM_ENOKEY)
        return 0;
    if (rc) {
        llm_errf(err, errlen, "model: metadata %s: %s", full, llm_strerror(rc));
        return LLM_EFORMAT;
    }
    return 0;
}

/* general.architecture: llama, qwen2 or qwen3 (llm_arch); anything else is
 * refused by name. RoPE's pair layout follows from it. */
static int check_architecture(const llm_gguf *g, llm_hparams *hp, char *err, size_t errlen)
{
    const char *arch;
    size_t len;
    int rc = llm_gguf_get_str(g, "general.architecture", &arch, &len);
    if (rc) {
        llm_errf(err, errlen, "model: metadata general.architecture: %s",
                 rc == LLM_ENOKEY ? "missing" : llm_strerror(rc));
        return LLM_EFORMAT;
    }
    static const int32_t archs[] = {LLM_ARCH_LLAMA, LLM_ARCH_QWEN2, LLM_ARCH_QWEN3};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        const char *name = arch_name(archs[i]);
        if (len == strlen(name) && memcmp(arch, name, len) == 0) {
            hp->arch = archs[i];
            hp->rope_neox = archs[i] != LLM_ARCH_LLAMA;
            return 0;
        }
    }
    char shown[68];
    llm_errf(err, errlen, "model: architecture '%s' is not supported (llama, qwen2, qwen3)",
             llm__show(arch, len, 64, shown));
    return LLM_EUNSUP;
}

/* RoPE scaling: none, or linear with a factor (positions divided by it). */
static int rope_scaling(const llm_gguf *g, llm_hparams *hp, char *err, size_t errlen)
{
    const char *type = "none";
    size_t len = 4;
    char key[64];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch_name(hp->arch));
    int rc = llm_gguf_get_str(g, key, &type, &len);
    if (rc && rc != LLM_ENOKEY) {
        llm_errf(err, errlen, "model: metadata %s: %s", key, llm_strerror(rc));
        return LLM_EFORMAT;
    }
    float factor = 1.0f;
    rc = meta_f32(g, hp, "rope.scaling.factor", 1.0f, &factor, err, errlen);
    if (rc)
        return rc;
    int linear = len == 6 && memcmp(type, "linear", 6) == 0;
    if (!linear && !(len == 4 && memcmp(type, "none", 4) == 0)) {
        char shown[36];
        llm_errf(err, errlen, "model: rope scaling '%s' is not supported (none, linear)",
                 llm__show(type, len, 32, shown));
        return LLM_EUNSUP;
    }
    if (!(factor > 0.0f) || !isfinite(factor)) {
        llm_errf(err, errlen, "model: rope scaling factor %g is not positive", (double)factor);
        return LLM_EFORMAT;
    }
    hp->rope_scale = linear ? 1.0f / factor : 1.0f;
    return 0;
}

/* An optional u32 "<arch>.<key>": 1 with *out set, 0 when absent, or a
 * negative status with err set. */
static int meta_u32_opt(const llm_gguf *g, const llm_hparams *hp, const char *key, int32_t *out,
                        char *err, size_t errlen)
{
    char full[96];
    snprintf(full, sizeof full, "%s.%s", arch_name(hp->arch), key);
    uint32_t v;
    int rc = llm_gguf_get_u32(g, full, &v);
    if (rc == LLM_ENOKEY)
        return 0;
    if (rc == 0 && v > INT32_MAX)
        rc = LLM_ERANGE;
    if (rc) {
        llm_errf(err, errlen, "model: metadata %s: %s", full, llm_strerror(rc));
        return LLM_EFORMAT;
    }
    *out = (int32_t)v;
    return 1;
}

/* The head width: <arch>.attention.key_length when the file has it (qwen3
 * sets it, and it need not be dim / n_heads), else dim / n_heads, which
 * must then divide exactly. One width serves keys, values and RoPE. */
static int head_width(const llm_gguf *g, llm_hparams *hp, char *err, size_t errlen)
{
    int32_t key = 0, val = 0, rot;
    int has_key = meta_u32_opt(g, hp, "attention.key_length", &key, err, errlen);
    int has_val = has_key < 0 ? 0 : meta_u32_opt(g, hp, "attention.value_length", &val, err, errlen);
    if (has_key < 0 || has_val < 0)
        return LLM_EFORMAT;
    if (has_val && (!has_key || key != val)) {
        llm_errf(err, errlen, "model: %s.attention.value_length %d differs from key_length %d (not supported)",
                 arch_name(hp->arch), (int)val, has_key ? (int)key : -1);
        return LLM_EUNSUP;
    }
    if (has_key && (key < 2 || key > (1 << 14))) {
        llm_errf(err, errlen, "model: %s.attention.key_length (%d) is out of range",
                 arch_name(hp->arch), (int)key);
        return LLM_EFORMAT;
    }
    if (!has_key && (hp->n_heads < 1 || hp->dim % hp->n_heads != 0)) {
        llm_errf(err, errlen, "model: head_count (must divide embedding_length) (%lld) is out of range",
                 (long long)hp->n_heads);
        return LLM_EFORMAT;
    }
    hp->head_dim = has_key ? key : hp->dim / hp->n_heads;
    rot = hp->head_dim;
    int rc = meta_u32(g, hp, "rope.dimension_count", 0, (uint32_t)hp->head_dim, &rot, err, errlen);
    if (rc)
        return rc;
    if (rot != hp->head_dim) {
        llm_errf(err, errlen, "model: partial rotary embedding (%d of %d) is not supported",
                 (int)rot, (int)hp->head_dim);
        return LLM_EUNSUP;
    }
    return 0;
}

/* Sliding-window attention (<arch>.attention.sliding_window = W): the
 * query at position p sees keys p-W+1..p only. llama.cpp's converter
 * writes no such key for Mistral 7B (a plain llama file runs with full
 * causal attention), but a file that sets it asks for the mask, so it is
 * kept and applied. A window of 0 would mask every key, so it is refused
 * rather than read as "none". */
static int sliding_window(const llm_gguf *g, llm_hparams *hp, char *err, size_t errlen)
{
    int32_t w = 0;
    int rc = meta_u32_opt(g, hp, "attention.sliding_window", &w, err, errlen);
    if (rc < 0)
        return rc;
    if (rc && w < 1) {
        llm_errf(err, errlen, "model: metadata %s.attention.sliding_window: a window of 0 keys",
                 arch_name(hp->arch));
        return LLM_EFORMAT;
    }
    hp->window = w;
    return 0;
}

static int gguf_hparams(const llm_gguf *g, llm_hparams *hp, char *err, size_t errlen)
{
    int rc = check_architecture(g, hp, err, errlen);
    if (!rc) rc = meta_u32(g, hp, "embedding_length", 1, 0, &hp->dim, err, errlen);
    if (!rc) rc = meta_u32(g, hp, "block_count", 1, 0, &hp->n_layers, err, errlen);
    if (!rc) rc = meta_u32(g, hp, "feed_forward_length", 1, 0, &hp->ffn_dim, err, errlen);
    if (!rc) rc = meta_u32(g, hp, "attention.head_count", 1, 0, &hp->n_heads, err, errlen);
    if (!rc) rc = meta_u32(g, hp, "attention.head_count_kv", 0, (uint32_t)hp->n_heads, &hp->n_kv_heads, err, errlen);
    if (!rc) rc = meta_u32(g, hp, "context_length", 0, 2048, &hp->n_ctx_train, err, errlen);
    if (!rc) rc = meta_f32(g, hp, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->norm_eps, err, errlen);
    if (!rc) rc = meta_f32(g, hp, "rope.freq_base", 10000.0f, &hp->rope_base, err, errlen);
    if (!rc) rc = rope_scaling(g, hp, err, errlen);
    if (!rc) rc = sliding_window(g, hp, err, errlen);
    if (rc)
        return rc;
    const llm_gguf_tensor *embd = llm_gguf_find_tensor(g, "token_embd.weight");
    if (!embd) {
        llm_errf(err, errlen, "model: tensor 'token_embd.weight' is missing");
        return LLM_EFORMAT;
    }
    hp->n_vocab = embd->ne[1] > INT32_MAX ? -1 : (int32_t)embd->ne[1];
    if ((rc = head_width(g, hp, err, errlen)))
        return rc;
    return llm_hparams_validate(hp, err, errlen);
}

static int gguf_tokenizer(llm_model *m, const llm_gguf *g, char *err, size_t errlen)
{
    const char *kind;
    size_t len;
    if (llm_gguf_get_str(g, "tokenizer.ggml.model", &kind, &len) == LLM_ENOKEY)
        return 0; /* ids only */
    llm_tokenizer *t;
    int rc = llm_tokenizer_from_gguf(g, &t, err, errlen);
    if (rc)
        return rc;
    m->tok = t;
    if ((int64_t)llm_tokenizer_vocab_size(t) != m->hp.n_vocab) {
        llm_errf(err, errlen, "model: tokenizer has %u tokens but the embedding has %d",
                 (unsigned)llm_tokenizer_vocab_size(t), (int)m->hp.n_vocab);
        return LLM_EFORMAT;
    }
    return 0;
}

/* Everything after the GGUF handle exists; m owns g from here on. */
static int load_gguf_handle(llm_model *m, llm_gguf *g, char *err, size_t errlen)
{
    m->file = g;
    m->file_close = close_gguf;
    m->gguf = g;
    int rc = gguf_hparams(g, &m->hp, err, errlen);
    if (!rc)
        rc = bind_tensors(m, find_gguf, g, err, errlen);
    if (!rc)
        rc = gguf_tokenizer(m, g, err, errlen);
    return rc; /* on failure llm_model_free releases what was taken */
}

int llm_model_load_gguf(llm_model *m, const char *path, char *err, size_t errlen)
{
    llm_gguf *g;
    int rc = m->no_mmap ? llm_gguf_read_types(path, &m->types, &g, err, errlen)
                        : llm_gguf_open_types(path, &m->types, &g, err, errlen);
    if (rc)
        return rc;
    return load_gguf_handle(m, g, err, errlen);
}

int llm_model_load_gguf_memory(llm_model *m, const void *buf, size_t len, char *err,
                               size_t errlen)
{
    llm_gguf *g;
    int rc = llm_gguf_open_memory_types(buf, len, &m->types, &g, err, errlen);
    if (rc)
        return rc;
    return load_gguf_handle(m, g, err, errlen);
}

/* ---- llama2.c ---------------------------------------------------------------- */

int llm_model_load_llama2c(llm_model *m, const char *path,
                           const char *tokenizer_path, char *err, size_t errlen)
{
    llm_llama2c *c;
    int rc = llm_llama2c_open(path, &c, err, errlen);
    if (rc)
        return rc;
    m->file = c;
    m->file_close = close_l2c;
    const llm_llama2c_config *cfg = llm_llama2c_get_config(c);
    llm_hparams *hp = &m->hp;
    hp->n_vocab = (int32_t)cfg->vocab_size;
    hp->dim = (int32_t)cfg->dim;
    hp->n_layers = (int32_t)cfg->n_layers;
    hp->n_heads = (int32_t)cfg->n_heads;
    hp->n_kv_heads = (int32_t)cfg->n_kv_heads;
    hp->head_dim = hp->dim / hp->n_heads;
    hp->ffn_dim = (int32_t)cfg->hidden_dim;
    hp->n_ctx_train = (int32_t)cfg->seq_len;
    hp->norm_eps = cfg->rms_eps;
    hp->rope_base = cfg->rope_theta;
    hp->rope_scale = 1.0f;
    rc = llm_hparams_validate(hp, err, errlen);
    if (!rc)
        rc = bind_tensors(m, find_l2c, c, err, errlen);
    if (rc || !tokenizer_path)
        return rc;
    llm_tokenizer *t;
    rc = llm_tokenizer_from_llama2c(tokenizer_path, cfg->vocab_size, &t, err, errlen);
    if (rc)
        return rc;
    m->tok = t;
    return 0;
}
