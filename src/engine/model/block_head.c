/* block_head.c — loading and running the block drafter's head
 * (block_head.h). The file is validated completely at open; the forward
 * composes the CPU backend's operations (cpu_ops.h) over buffers sized at
 * open.
 */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "block_head.h"
#include "cpu_ops.h"
#include "errtext.h"
#include "gguf.h"
#include "quant.h"

#define ARCH "phasemark-block"
#define KEY(k) ARCH "." k

/* One head layer; norms point into pm_block.norms. */
typedef struct block_layer {
    const float *attn_norm, *ffn_norm; /* [dim] */
    llm_tensor wq;     /* ne0=dim, ne1=n_heads*head_dim */
    llm_tensor wk, wv; /* ne0=dim, ne1=n_kv_heads*head_dim */
    llm_tensor wo;     /* ne0=n_heads*head_dim, ne1=dim */
    llm_tensor w_gate, w_up; /* ne0=dim, ne1=ffn_dim */
    llm_tensor w_down; /* ne0=ffn_dim, ne1=dim */
    float *kc, *vc;    /* [n_ctx + B][kv_dim]: context keys (RoPE'd) and
                          values, then a forward's block rows */
} block_layer;

struct pm_block {
    pm_block_info in;
    const llm_model *target;    /* borrowed: embedding and output head */
    llm_gguf *g;                /* owned mapping */
    llm_backend *be;            /* owned CPU backend */
    llm_tensor fc;              /* ne0=n_feat*dim, ne1=dim */
    const float *fc_norm, *mask_embd, *out_norm; /* [dim] */
    block_layer layers[PM_BLOCK_MAX_LAYERS];
    float *norms;               /* owned: every vector above */
    double *inv_freq;           /* owned: [head_dim/2] */
    uint32_t n_ctx, ctx_len;
    int32_t q_dim, kv_dim, n_vocab;
    /* Scratch, one forward's worth (rows <= CHUNK for the context, <= B
     * for the block). */
    float *f;      /* [CHUNK][n_feat*dim] gathered features */
    float *x;      /* [CHUNK][dim] c, then the block rows' residual */
    float *h;      /* [CHUNK][dim] normed rows */
    float *q;      /* [B][q_dim] */
    float *att;    /* [B][q_dim] */
    float *o;      /* [B][dim] */
    float *gate, *up; /* [B][ffn_dim] */
    float *kt, *vt;   /* [B][kv_dim] */
    float *logits; /* [B][n_vocab] */
};

/* Context rows processed per pass: a block's worth, the scratch's size. */
#define CHUNK PM_BLOCK_MAX_B

/* ---- validation -------------------------------------------------------- */

static int meta_u32(const llm_gguf *g, const char *key, uint32_t lo, uint32_t hi, int32_t *out,
                    char *err, size_t errlen)
{
    uint32_t v;
    int rc = llm_gguf_get_u32(g, key, &v);
    if (rc == LLM_ENOKEY) {
        llm_errf(err, errlen, "block head: metadata '%s' is missing", key);
        return LLM_EFORMAT;
    }
    if (rc || v < lo || v > hi) {
        llm_errf(err, errlen, "block head: '%s' must be an integer in %u..%u", key,
                 (unsigned)lo, (unsigned)hi);
        return LLM_EFORMAT;
    }
    *out = (int32_t)v;
    return 0;
}

static int meta_f32(const llm_gguf *g, const char *key, float *out, char *err, size_t errlen)
{
    int rc = llm_gguf_get_f32(g, key, out);
    if (rc || !(*out > 0.0f) || !isfinite(*out)) {
        llm_errf(err, errlen, "block head: '%s' must be a positive number", key);
        return LLM_EFORMAT;
    }
    return 0;
}

static int check_arch(const llm_gguf *g, char *err, size_t errlen)
{
    const char *s;
    size_t len;
    char shown[48];
    if (llm_gguf_get_str(g, "general.architecture", &s, &len) != 0) {
        llm_errf(err, errlen, "block head: general.architecture is missing");
        return LLM_EFORMAT;
    }
    if (len != strlen(ARCH) || memcmp(s, ARCH, len) != 0) {
        llm_errf(err, errlen, "block head: architecture '%s' is not " ARCH,
                 llm__show(s, len, 40, shown));
        return LLM_EFORMAT;
    }
    return 0;
}

/* The target layers the head reads. */
static int feat_layers(const llm_gguf *g, const llm_model *t, pm_block_info *in, char *err,
                       size_t errlen)
{
    uint32_t et;
    uint64_t count;
    const void *data;
    if (llm_gguf_get_arr(g, KEY("target.layers"), &et, &count, &data) != 0) {
        llm_errf(err, errlen, "block head: metadata '" KEY("target.layers") "' is missing");
        return LLM_EFORMAT;
    }
    if (count == 0 || count > PM_BLOCK_MAX_FEAT) {
        llm_errf(err, errlen, "block head: it reads %llu target layers (1..%d allowed)",
                 (unsigned long long)count, PM_BLOCK_MAX_FEAT);
        return LLM_EFORMAT;
    }
    for (uint64_t i = 0; i < count; i++) {
        int64_t v;
        if (llm_gguf_arr_i64(g, KEY("target.layers"), i, &v) != 0 || v < 0) {
            llm_errf(err, errlen, "block head: target layer %llu is not a layer index",
                     (unsigned long long)i);
            return LLM_EFORMAT;
        }
        if (v >= t->hp.n_layers) {
            llm_errf(err, errlen, "block head: it reads target layer %lld but the target has %d",
                     (long long)v, (int)t->hp.n_layers);
            return LLM_EINVAL;
        }
        in->feat_layers[i] = (int32_t)v;
    }
    in->n_feat = (int32_t)count;
    return 0;
}

static int read_hparams(const llm_gguf *g, const llm_model *t, pm_block_info *in, char *err,
                        size_t errlen)
{
    int32_t vocab = 0, tdim = 0, ctx = 0;
    int rc = check_arch(g, err, errlen);
    if (rc == 0)
        rc = meta_u32(g, KEY("target.vocab_size"), 1, INT32_MAX, &vocab, err, errlen);
    if (rc == 0 && vocab != t->hp.n_vocab) {
        llm_errf(err, errlen, "block head: vocab_size %d does not match the target's %d",
                 (int)vocab, (int)t->hp.n_vocab);
        return LLM_EINVAL;
    }
    if (rc == 0)
        rc = meta_u32(g, KEY("target.embedding_length"), 1, INT32_MAX, &tdim, err, errlen);
    if (rc == 0 && tdim != t->hp.dim) {
        llm_errf(err, errlen, "block head: target.embedding_length %d does not match the "
                              "target's %d", (int)tdim, (int)t->hp.dim);
        return LLM_EINVAL;
    }
    if (rc == 0)
        rc = meta_u32(g, KEY("embedding_length"), 1, 1u << 16, &in->dim, err, errlen);
    if (rc == 0 && in->dim != t->hp.dim) {
        llm_errf(err, errlen, "block head: embedding_length %d does not match the target's %d",
                 (int)in->dim, (int)t->hp.dim);
        return LLM_EINVAL;
    }
    if (rc == 0)
        rc = meta_u32(g, KEY("block_count"), 1, PM_BLOCK_MAX_LAYERS, &in->n_layers, err, errlen);
    if (rc == 0)
        rc = meta_u32(g, KEY("block_size"), 1, PM_BLOCK_MAX_B, &in->block_size, err, errlen);
    if (rc == 0)
        rc = meta_u32(g, KEY("feed_forward_length"), 1, 1u << 18, &in->ffn_dim, err, errlen);
    if (rc == 0)
        rc = meta_u32(g, KEY("attention.head_count"), 1, 1024, &in->n_heads, err, errlen);
    if (rc == 0)
        rc = meta_u32(g, KEY("attention.head_count_kv"), 1, 1024, &in->n_kv_heads, err, errlen);
    if (rc == 0)
        rc = meta_u32(g, KEY("context_length"), 1, INT32_MAX, &ctx, err, errlen);
    if (rc == 0)
        rc = meta_f32(g, KEY("attention.layer_norm_rms_epsilon"), &in->eps, err, errlen);
    if (rc == 0)
        rc = meta_f32(g, KEY("rope.freq_base"), &in->rope_base, err, errlen);
    if (rc == 0)
        rc = feat_layers(g, t, in, err, errlen);
    if (rc)
        return rc;
    if (in->dim % in->n_heads || (in->dim / in->n_heads) % 2 || in->n_heads % in->n_kv_heads) {
        llm_errf(err, errlen, "block head: %d heads over %d kv heads do not divide width %d "
                              "into even heads", (int)in->n_heads, (int)in->n_kv_heads,
                 (int)in->dim);
        return LLM_EFORMAT;
    }
    in->head_dim = in->dim / in->n_heads;
    return 0;
}

/* ---- tensors ----------------------------------------------------------- */

static int bind_matrix(const llm_gguf *g, llm_tensor *t, const char *name, int64_t ne0,
                       int64_t ne1, char *err, size_t errlen)
{
    const llm_gguf_tensor *gt = llm_gguf_find_tensor(g, name);
    if (!gt) {
        llm_errf(err, errlen, "block head: tensor '%s' is missing", name);
        return LLM_EFORMAT;
    }
    if (gt->type != LLM_TYPE_F32 && gt->type != LLM_TYPE_F16 && gt->type != LLM_TYPE_Q8_0) {
        const llm_type_traits *tt = llm_type_find(NULL, gt->type);
        llm_errf(err, errlen, "block head: tensor '%s' has type %s (f32, f16 or q8_0 expected)",
                 name, tt ? tt->name : "unknown");
        return LLM_EFORMAT;
    }
    if (gt->n_dims != 2 || (int64_t)gt->ne[0] != ne0 || (int64_t)gt->ne[1] != ne1) {
        llm_errf(err, errlen, "block head: tensor '%s' is %llux%llu (%u dims), expected %lldx%lld",
                 name, (unsigned long long)gt->ne[0], (unsigned long long)gt->ne[1],
                 (unsigned)gt->n_dims, (long long)ne0, (long long)ne1);
        return LLM_EFORMAT;
    }
    const llm_type_traits *tt = llm_type_find(NULL, gt->type);
    uint64_t row_bytes;
    if (llm_type_traits_row_bytes(tt, gt->ne[0], &row_bytes) != 0) {
        llm_errf(err, errlen, "block head: tensor '%s' row of %llu is not whole %s blocks", name,
                 (unsigned long long)gt->ne[0], tt->name);
        return LLM_EFORMAT;
    }
    if (tt->align > 1 && (uintptr_t)gt->data % tt->align != 0) {
        llm_errf(err, errlen, "block head: tensor '%s' data is not %u-byte aligned", name,
                 (unsigned)tt->align);
        return LLM_EFORMAT;
    }
    t->data = gt->data;
    t->type = gt->type;
    t->ne0 = ne0;
    t->ne1 = ne1;
    t->row_bytes = (size_t)row_bytes;
    t->dev = NULL;
    return 0;
}

/* An f32 vector of n into dst. */
static int bind_vector(const llm_gguf *g, float *dst, const char *name, int64_t n, char *err,
                       size_t errlen)
{
    const llm_gguf_tensor *gt = llm_gguf_find_tensor(g, name);
    if (!gt) {
        llm_errf(err, errlen, "block head: tensor '%s' is missing", name);
        return LLM_EFORMAT;
    }
    if (gt->type != LLM_TYPE_F32) {
        const llm_type_traits *tt = llm_type_find(NULL, gt->type);
        llm_errf(err, errlen, "block head: vector '%s' has type %s (f32 expected)", name,
                 tt ? tt->name : "unknown");
        return LLM_EFORMAT;
    }
    if (gt->n_dims != 1 || (int64_t)gt->ne[0] != n) {
        llm_errf(err, errlen, "block head: tensor '%s' must be a vector of %lld", name,
                 (long long)n);
        return LLM_EFORMAT;
    }
    memcpy(dst, gt->data, (size_t)n * sizeof *dst);
    return 0;
}

static int bind_layer(pm_block *b, int32_t l, float *norms, char *err, size_t errlen)
{
    const pm_block_info *in = &b->in;
    block_layer *L = &b->layers[l];
    int64_t d = in->dim, qd = b->q_dim, kvd = b->kv_dim, ff = in->ffn_dim;
    char name[64];
    int rc;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d." s, (int)l), name)
    rc = bind_vector(b->g, norms, NAME("attn_norm.weight"), d, err, errlen);
    if (rc == 0)
        rc = bind_vector(b->g, norms + d, NAME("ffn_norm.weight"), d, err, errlen);
    if (rc == 0)
        rc = bind_matrix(b->g, &L->wq, NAME("attn_q.weight"), d, qd, err, errlen);
    if (rc == 0)
        rc = bind_matrix(b->g, &L->wk, NAME("attn_k.weight"), d, kvd, err, errlen);
    if (rc == 0)
        rc = bind_matrix(b->g, &L->wv, NAME("attn_v.weight"), d, kvd, err, errlen);
    if (rc == 0)
        rc = bind_matrix(b->g, &L->wo, NAME("attn_output.weight"), qd, d, err, errlen);
    if (rc == 0)
        rc = bind_matrix(b->g, &L->w_gate, NAME("ffn_gate.weight"), d, ff, err, errlen);
    if (rc == 0)
        rc = bind_matrix(b->g, &L->w_up, NAME("ffn_up.weight"), d, ff, err, errlen);
    if (rc == 0)
        rc = bind_matrix(b->g, &L->w_down, NAME("ffn_down.weight"), ff, d, err, errlen);
#undef NAME
    L->attn_norm = norms;
    L->ffn_norm = norms + d;
    return rc;
}

static int bind_all(pm_block *b, char *err, size_t errlen)
{
    const pm_block_info *in = &b->in;
    size_t d = (size_t)in->dim;
    b->norms = malloc((3 + 2 * (size_t)in->n_layers) * d * sizeof *b->norms);
    if (!b->norms) {
        llm_errf(err, errlen, "block head: out of memory");
        return LLM_ENOMEM;
    }
    float *p = b->norms;
    int rc = bind_matrix(b->g, &b->fc, "fc.weight", (int64_t)in->n_feat * in->dim, in->dim, err,
                         errlen);
    if (rc == 0)
        rc = bind_vector(b->g, p, "fc_norm.weight", in->dim, err, errlen);
    if (rc == 0)
        rc = bind_vector(b->g, p + d, "mask_embd.weight", in->dim, err, errlen);
    if (rc == 0)
        rc = bind_vector(b->g, p + 2 * d, "output_norm.weight", in->dim, err, errlen);
    b->fc_norm = p;
    b->mask_embd = p + d;
    b->out_norm = p + 2 * d;
    for (int32_t l = 0; rc == 0 && l < in->n_layers; l++)
        rc = bind_layer(b, l, p + (3 + 2 * (size_t)l) * d, err, errlen);
    return rc;
}

/* ---- buffers ----------------------------------------------------------- */

static int alloc_state(pm_block *b, int32_t n_threads, char *err, size_t errlen)
{
    const pm_block_info *in = &b->in;
    size_t B = PM_BLOCK_MAX_B, d = (size_t)in->dim, kvd = (size_t)b->kv_dim;
    size_t rows = (size_t)b->n_ctx + B;
    int ok = 1;
    for (int32_t l = 0; l < in->n_layers; l++) {
        b->layers[l].kc = malloc(rows * kvd * sizeof(float));
        b->layers[l].vc = malloc(rows * kvd * sizeof(float));
        ok &= b->layers[l].kc && b->layers[l].vc;
    }
    b->f = malloc((size_t)CHUNK * (size_t)in->n_feat * d * sizeof(float));
    b->x = malloc((size_t)CHUNK * d * sizeof(float));
    b->h = malloc((size_t)CHUNK * d * sizeof(float));
    b->q = malloc(B * (size_t)b->q_dim * sizeof(float));
    b->att = malloc(B * (size_t)b->q_dim * sizeof(float));
    b->o = malloc(B * d * sizeof(float));
    b->gate = malloc(B * (size_t)in->ffn_dim * sizeof(float));
    b->up = malloc(B * (size_t)in->ffn_dim * sizeof(float));
    b->kt = malloc(B * kvd * sizeof(float));
    b->vt = malloc(B * kvd * sizeof(float));
    b->logits = malloc(B * (size_t)b->n_vocab * sizeof(float));
    int32_t half = in->head_dim / 2;
    b->inv_freq = malloc((size_t)half * sizeof(double));
    ok &= b->f && b->x && b->h && b->q && b->att && b->o && b->gate && b->up && b->kt && b->vt &&
          b->logits && b->inv_freq;
    if (!ok) {
        llm_errf(err, errlen, "block head: out of memory");
        return LLM_ENOMEM;
    }
    for (int32_t i = 0; i < half; i++)
        b->inv_freq[i] = pow((double)in->rope_base, -2.0 * i / in->head_dim);
    int rc = llm_cpu_backend_create(n_threads, 1, &b->be, err, errlen);
    if (rc)
        return rc;
    /* The row loop for every product up to its most rows: results do not
     * depend on how rows are batched (see block_head.h). */
    llm_cpu_backend_set_gemm_min(b->be, 64, 64);
    /* The target's output head where the target's backend keeps it (Q8_0:
     * in panels, which the rows would have to be transposed into on every
     * product). */
    (void)llm_cpu_backend_read_weights(b->be, b->target->be);
    /* Its own matrices as a model's would be kept: a Q8_0 head's in panels,
     * an F16 one's on huge pages. */
    llm_tensor *mats[1 + 7 * PM_BLOCK_MAX_LAYERS];
    int32_t n_mats = 0;
    mats[n_mats++] = &b->fc;
    for (int32_t l = 0; l < in->n_layers; l++) {
        block_layer *L = &b->layers[l];
        llm_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            mats[n_mats++] = ts[i];
    }
    llm_cpu_backend_copy_tensors(b->be, mats, n_mats);
    int64_t width = (int64_t)in->n_feat * in->dim;
    if (in->ffn_dim > width)
        width = in->ffn_dim;
    if (b->q_dim > width)
        width = b->q_dim;
    if (b->target->output.ne0 > width)
        width = b->target->output.ne0;
    rc = b->be->ops->reserve(b->be, (uint32_t)rows, width);
    if (rc == 0 && !b->be->ops->supports_type(b->be, b->target->output.type))
        rc = LLM_EUNSUP;
    if (rc)
        llm_errf(err, errlen, "block head: the CPU backend cannot run it (%s)", llm_strerror(rc));
    return rc;
}

/* Opens the head from a file (path) or a caller's bytes (buf, len). */
static int block_open(const char *path, const void *buf, size_t len, const llm_model *target,
                      uint32_t n_ctx, int32_t n_threads, pm_block **out, char *err,
                      size_t errlen)
{
    *out = NULL;
    if ((!path && !buf) || !target || n_ctx == 0) {
        llm_errf(err, errlen, "block head: a file, a target and a context are required");
        return LLM_EINVAL;
    }
    if (n_ctx > PM_BLOCK_MAX_CTX) {
        llm_errf(err, errlen, "block head: a context of %u positions is over its %u",
                 (unsigned)n_ctx, (unsigned)PM_BLOCK_MAX_CTX);
        return LLM_EINVAL;
    }
    if (!target->tok_embd.data || !target->output.data) {
        llm_errf(err, errlen, "block head: the target model holds no embedding or output head");
        return LLM_EINVAL;
    }
    pm_block *b = calloc(1, sizeof *b);
    if (!b) {
        llm_errf(err, errlen, "block head: out of memory");
        return LLM_ENOMEM;
    }
    b->target = target;
    b->n_ctx = n_ctx;
    b->n_vocab = target->hp.n_vocab;
    char gerr[256];
    int rc = path ? llm_gguf_open(path, &b->g, gerr, sizeof gerr)
                  : llm_gguf_open_memory(buf, len, &b->g, gerr, sizeof gerr);
    if (rc)
        llm_errf(err, errlen, "block head: %s", gerr);
    if (rc == 0)
        rc = read_hparams(b->g, target, &b->in, err, errlen);
    if (rc == 0) {
        b->q_dim = b->in.n_heads * b->in.head_dim;
        b->kv_dim = b->in.n_kv_heads * b->in.head_dim;
        rc = bind_all(b, err, errlen);
    }
    if (rc == 0)
        rc = alloc_state(b, n_threads, err, errlen);
    if (rc) {
        pm__block_free(b);
        return rc;
    }
    *out = b;
    return 0;
}

int pm__block_open(const char *path, const llm_model *target, uint32_t n_ctx, int32_t n_threads,
                   pm_block **out, char *err, size_t errlen)
{
    return block_open(path, NULL, 0, target, n_ctx, n_threads, out, err, errlen);
}

int pm__block_open_memory(const void *buf, size_t len, const llm_model *target, uint32_t n_ctx,
                          int32_t n_threads, pm_block **out, char *err, size_t errlen)
{
    return block_open(NULL, buf, len, target, n_ctx, n_threads, out, err, errlen);
}

void pm__block_free(pm_block *b)
{
    if (!b)
        return;
    for (int32_t l = 0; l < PM_BLOCK_MAX_LAYERS; l++) {
        free(b->layers[l].kc);
        free(b->layers[l].vc);
    }
    free(b->f);
    free(b->x);
    free(b->h);
    free(b->q);
    free(b->att);
    free(b->o);
    free(b->gate);
    free(b->up);
    free(b->kt);
    free(b->vt);
    free(b->logits);
    free(b->inv_freq);
    free(b->norms);
    if (b->be)
        b->be->ops->destroy(b->be);
    llm_gguf_close(b->g);
    free(b);
}

const pm_block_info *pm__block_info(const pm_block *b)
{
    return &b->in;
}

struct llm_backend *pm__block_backend(pm_block *b)
{
    return b->be;
}

const float *pm__block_hidden(const pm_block *b)
{
    return b->h;
}

void pm__block_weights(const pm_block *b, pm_block_weights *out)
{
    memset(out, 0, sizeof *out);
    out->fc = &b->fc;
    out->fc_norm = b->fc_norm;
    out->mask_embd = b->mask_embd;
    out->out_norm = b->out_norm;
    for (int32_t l = 0; l < b->in.n_layers; l++) {
        const block_layer *L = &b->layers[l];
        out->layer[l].attn_norm = L->attn_norm;
        out->layer[l].ffn_norm = L->ffn_norm;
        out->layer[l].wq = &L->wq;
        out->layer[l].wk = &L->wk;
        out->layer[l].wv = &L->wv;
        out->layer[l].wo = &L->wo;
        out->layer[l].w_gate = &L->w_gate;
        out->layer[l].w_up = &L->w_up;
        out->layer[l].w_down = &L->w_down;
    }
    out->inv_freq = b->inv_freq;
}

uint32_t pm__block_ctx_len(const pm_block *b)
{
    return b->ctx_len;
}

void pm__block_crop(pm_block *b, uint32_t pos)
{
    if (pos < b->ctx_len)
        b->ctx_len = pos;
}

/* ---- the forward ------------------------------------------------------- */

static llm_rope rope_of(const pm_block *b)
{
    llm_rope r = {b->inv_freq, 1.0f, b->in.head_dim, 0};
    return r;
}

/* Context rows x[0..n) (the c_j of positions pos..pos+n-1) to every
 * layer's keys and values at those positions. */
static void context_kv(pm_block *b, int32_t n, uint32_t pos)
{
    llm_rope r = rope_of(b);
    for (int32_t l = 0; l < b->in.n_layers; l++) {
        block_layer *L = &b->layers[l];
        float *k = L->kc + (size_t)pos * (size_t)b->kv_dim;
        float *v = L->vc + (size_t)pos * (size_t)b->kv_dim;
        llm_cpu_rmsnorm(b->be, b->h, b->x, L->attn_norm, n, b->in.dim, b->in.eps);
        const llm_tensor *w[2] = {&L->wk, &L->wv};
        float *y[2] = {k, v};
        llm_cpu_matmul_many(b->be, w, 2, b->h, n, y);
        llm_cpu_rope(b->be, k, n, b->in.n_kv_heads, b->kv_dim, pos, &r);
    }
}

int pm__block_append(pm_block *b, const float *feat, const int32_t *plane_of, size_t plane_rows,
                     uint32_t rows)
{
    if ((uint64_t)b->ctx_len + rows > b->n_ctx || rows > plane_rows)
        return LLM_ECTX;
    size_t d = (size_t)b->in.dim, fw = (size_t)b->in.n_feat * d;
    for (uint32_t r0 = 0; r0 < rows; r0 += CHUNK) {
        int32_t n = (int32_t)(rows - r0 < CHUNK ? rows - r0 : CHUNK);
        /* f_j = concat over the head's layers, in its order. */
        for (int32_t t = 0; t < n; t++)
            for (int32_t i = 0; i < b->in.n_feat; i++)
                memcpy(b->f + (size_t)t * fw + (size_t)i * d,
                       feat + ((size_t)plane_of[i] * plane_rows + r0 + (size_t)t) * d,
                       d * sizeof(float));
        llm_cpu_matmul(b->be, &b->fc, b->f, n, b->x);
        llm_cpu_rmsnorm(b->be, b->x, b->x, b->fc_norm, n, b->in.dim, b->in.eps);
        context_kv(b, n, b->ctx_len);
        b->ctx_len += (uint32_t)n;
    }
    return 0;
}

/* One head layer over the n block rows in b->x at positions ctx_len... */
static void block_layer_run(pm_block *b, const block_layer *L, int32_t n)
{
    const pm_block_info *in = &b->in;
    size_t kvd = (size_t)b->kv_dim;
    uint32_t pos0 = b->ctx_len;
    llm_rope r = rope_of(b);
    llm_cpu_rmsnorm(b->be, b->h, b->x, L->attn_norm, n, in->dim, in->eps);
    float *kb = L->kc + (size_t)pos0 * kvd, *vb = L->vc + (size_t)pos0 * kvd;
    const llm_tensor *w[3] = {&L->wq, &L->wk, &L->wv};
    float *y[3] = {b->q, kb, vb};
    llm_cpu_matmul_many(b->be, w, 3, b->h, n, y);
    llm_cpu_rope(b->be, b->q, n, in->n_heads, b->q_dim, pos0, &r);
    llm_cpu_rope(b->be, kb, n, in->n_kv_heads, b->kv_dim, pos0, &r);
    /* No causal mask: every row attends to all pos0 + n keys, which a
     * causal attention of one query at the last position computes. */
    for (int32_t i = 0; i < n; i++) {
        llm_attn a = {b->q + (size_t)i * b->q_dim, L->kc, L->vc,
                      b->att + (size_t)i * b->q_dim, 1, pos0 + (uint32_t)n - 1,
                      in->n_heads, in->n_kv_heads, in->head_dim, 0, NULL};
        llm_cpu_attention(b->be, &a);
    }
    llm_cpu_matmul(b->be, &L->wo, b->att, n, b->o);
    llm_cpu_add(b->be, b->x, b->o, (size_t)n * (size_t)in->dim);
    llm_cpu_rmsnorm(b->be, b->h, b->x, L->ffn_norm, n, in->dim, in->eps);
    const llm_tensor *wf[2] = {&L->w_gate, &L->w_up};
    float *yf[2] = {b->gate, b->up};
    llm_cpu_matmul_many(b->be, wf, 2, b->h, n, yf);
    llm_cpu_swiglu(b->be, b->gate, b->up, (size_t)n * (size_t)in->ffn_dim);
    llm_cpu_matmul(b->be, &L->w_down, b->gate, n, b->o);
    llm_cpu_add(b->be, b->x, b->o, (size_t)n * (size_t)in->dim);
}

int pm__block_forward(pm_block *b, int32_t last, int32_t rows, const float **logits)
{
    const pm_block_info *in = &b->in;
    if (rows < 1 || rows > in->block_size || last < 0 || last >= b->n_vocab)
        return LLM_EINVAL;
    if ((uint64_t)b->ctx_len + (uint64_t)rows > (uint64_t)b->n_ctx + PM_BLOCK_MAX_B)
        return LLM_ECTX;
    size_t d = (size_t)in->dim;
    const llm_tensor *e = &b->target->tok_embd;
    const llm_type_traits *tt = llm_type_find(&b->target->types, e->type);
    tt->to_f32((const unsigned char *)e->data + (size_t)last * e->row_bytes, b->x, d);
    for (int32_t i = 1; i < rows; i++)
        memcpy(b->x + (size_t)i * d, b->mask_embd, d * sizeof(float));
    for (int32_t l = 0; l < in->n_layers; l++)
        block_layer_run(b, &b->layers[l], rows);
    llm_cpu_rmsnorm(b->be, b->h, b->x, b->out_norm, rows, in->dim, in->eps);
    llm_cpu_matmul(b->be, &b->target->output, b->h, rows, b->logits);
    *logits = b->logits;
    return 0;
}
