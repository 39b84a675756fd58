/* cuda_block.c — the block drafter's head on the device (cuda_block.h):
 * the copy of its weights, its context caches and the two forwards, each
 * a fixed sequence of stream-ordered launches that a graph can hold.
 *
 * Device buffers (all owned, allocated at creation):
 *   per layer: qkv (q, k, v stacked), wo, gu (gate and up interleaved),
 *     down; attn_norm, ffn_norm [dim]; kc, vc [cache_rows][kv_dim]
 *   fc, fc_norm, out_norm [dim], mask [B-1][dim] (mask_embd repeated, so
 *     one copy fills a block's mask rows), freq [head_dim/2] (double)
 *   scratch: x [B][dim] (the block's residual), xc [A][dim] (context
 *     rows), f [A][n_feat*dim], qkv_buf [max(B,A)][qkv_w], att [B][q_dim],
 *     g [B][ffn], logits [B][n_vocab], stage [n_planes][A][dim] (host
 *     appends), A = LLM_CUDA_BLOCK_APPEND_MAX.
 * cache_rows = n_ctx + B + A: a forward's block rows and an append's rows
 * may pass the context's end by that much before the caller's bounds
 * stop them.
 */
#include "cuda_block.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errtext.h"
#include "model.h"

struct llm_cuda_block {
    llm_cuda *c;                  /* borrowed */
    pm_block_info in;
    int32_t q_dim, kv_dim, qkv_w, n_vocab;
    int32_t n_planes;
    int32_t planes[PM_BLOCK_MAX_FEAT];   /* ascending target layers */
    int32_t plane_of[PM_BLOCK_MAX_FEAT]; /* head's list -> plane */
    uint32_t n_ctx, cache_rows;
    const llm_cuda_weight *embd, *output; /* the target's, borrowed */
    llm_cuda_weight fc;
    llm_cuda_weight qkv[PM_BLOCK_MAX_LAYERS], wo[PM_BLOCK_MAX_LAYERS];
    llm_cuda_weight gu[PM_BLOCK_MAX_LAYERS], down[PM_BLOCK_MAX_LAYERS];
    float *attn_norm[PM_BLOCK_MAX_LAYERS], *ffn_norm[PM_BLOCK_MAX_LAYERS];
    float *kc[PM_BLOCK_MAX_LAYERS], *vc[PM_BLOCK_MAX_LAYERS];
    float *fc_norm, *out_norm, *mask;
    double *freq;
    float *x, *xc, *f, *qkv_buf, *att, *g, *logits, *stage;
};

#define APPEND_MAX LLM_CUDA_BLOCK_APPEND_MAX

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    llm_errf(err, errlen, "block head on the device: %s", msg);
    return rc;
}

void llm_cuda_block_free(llm_cuda_block *hb)
{
    if (!hb)
        return;
    llm_cuda *c = hb->c;
    llm_cuda_weight_release(c, &hb->fc);
    for (int32_t l = 0; l < PM_BLOCK_MAX_LAYERS; l++) {
        llm_cuda_weight_release(c, &hb->qkv[l]);
        llm_cuda_weight_release(c, &hb->wo[l]);
        llm_cuda_weight_release(c, &hb->gu[l]);
        llm_cuda_weight_release(c, &hb->down[l]);
        llm_cuda_mfree(c, hb->attn_norm[l]);
        llm_cuda_mfree(c, hb->ffn_norm[l]);
        llm_cuda_mfree(c, hb->kc[l]);
        llm_cuda_mfree(c, hb->vc[l]);
    }
    void *bufs[] = {hb->fc_norm, hb->out_norm, hb->mask, hb->freq, hb->x, hb->xc, hb->f,
                    hb->qkv_buf, hb->att, hb->g, hb->logits, hb->stage};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        llm_cuda_mfree(c, bufs[i]);
    free(hb);
}

/* A device buffer of bytes, optionally filled from host; NULL on failure. */
static void *dev_buf(llm_cuda *c, size_t bytes, const void *host)
{
    void *p = NULL;
    if (llm_cuda_malloc(c, bytes, &p) != 0)
        return NULL;
    if (host && llm_cuda_upload(c, p, host, bytes) != 0) {
        llm_cuda_mfree(c, p);
        return NULL;
    }
    return p;
}

static int upload_one(llm_cuda *c, const llm_tensor *t, llm_cuda_weight *w)
{
    return llm_cuda_weight_upload(c, t->type, t->data, t->ne0, t->ne1, t->row_bytes, w);
}

/* count tensors of one width as one device weight: stacked or interleaved. */
static int upload_stack(llm_cuda *c, const llm_tensor *const *t, int count, int interleave,
                        llm_cuda_weight *w)
{
    uint32_t types[3];
    llm_cuda_weight_part parts[3];
    for (int i = 0; i < count; i++) {
        types[i] = t[i]->type;
        parts[i].host = t[i]->data;
        parts[i].rows = t[i]->ne1;
        parts[i].row_bytes = t[i]->row_bytes;
    }
    return llm_cuda_weight_upload_mixed(c, types, t[0]->ne0, parts, count, interleave, w);
}

static int upload_weights(llm_cuda_block *hb, const pm_block *head)
{
    llm_cuda *c = hb->c;
    pm_block_weights w;
    pm__block_weights(head, &w);
    size_t d = (size_t)hb->in.dim * sizeof(float);
    int rc = upload_one(c, w.fc, &hb->fc);
    hb->fc_norm = dev_buf(c, d, w.fc_norm);
    hb->out_norm = dev_buf(c, d, w.out_norm);
    if (rc == 0 && (!hb->fc_norm || !hb->out_norm))
        rc = LLM_ENOMEM;
    for (int32_t l = 0; rc == 0 && l < hb->in.n_layers; l++) {
        const llm_tensor *qkv[3] = {w.layer[l].wq, w.layer[l].wk, w.layer[l].wv};
        const llm_tensor *gu[2] = {w.layer[l].w_gate, w.layer[l].w_up};
        rc = upload_stack(c, qkv, 3, 0, &hb->qkv[l]);
        if (rc == 0)
            rc = upload_one(c, w.layer[l].wo, &hb->wo[l]);
        if (rc == 0)
            rc = upload_stack(c, gu, 2, 1, &hb->gu[l]);
        if (rc == 0)
            rc = upload_one(c, w.layer[l].w_down, &hb->down[l]);
        hb->attn_norm[l] = dev_buf(c, d, w.layer[l].attn_norm);
        hb->ffn_norm[l] = dev_buf(c, d, w.layer[l].ffn_norm);
        if (rc == 0 && (!hb->attn_norm[l] || !hb->ffn_norm[l]))
            rc = LLM_ENOMEM;
    }
    if (rc)
        return rc;
    int32_t B = hb->in.block_size;
    if (B > 1) {
        float *m = malloc((size_t)(B - 1) * d);
        if (!m)
            return LLM_ENOMEM;
        for (int32_t i = 0; i < B - 1; i++)
            memcpy(m + (size_t)i * (size_t)hb->in.dim, w.mask_embd, d);
        hb->mask = dev_buf(c, (size_t)(B - 1) * d, m);
        free(m);
        if (!hb->mask)
            return LLM_ENOMEM;
    }
    hb->freq = dev_buf(c, (size_t)(hb->in.head_dim / 2) * sizeof(double), w.inv_freq);
    return hb->freq ? 0 : LLM_ENOMEM;
}

static int alloc_state(llm_cuda_block *hb)
{
    llm_cuda *c = hb->c;
    size_t B = PM_BLOCK_MAX_B, A = APPEND_MAX, fl = sizeof(float);
    size_t d = (size_t)hb->in.dim, kvb = (size_t)hb->cache_rows * (size_t)hb->kv_dim * fl;
    for (int32_t l = 0; l < hb->in.n_layers; l++) {
        hb->kc[l] = dev_buf(c, kvb, NULL);
        hb->vc[l] = dev_buf(c, kvb, NULL);
        if (!hb->kc[l] || !hb->vc[l])
            return LLM_ENOMEM;
    }
    hb->x = dev_buf(c, B * d * fl, NULL);
    hb->xc = dev_buf(c, A * d * fl, NULL);
    hb->f = dev_buf(c, A * (size_t)hb->in.n_feat * d * fl, NULL);
    hb->qkv_buf = dev_buf(c, (B > A ? B : A) * (size_t)hb->qkv_w * fl, NULL);
    hb->att = dev_buf(c, B * (size_t)hb->q_dim * fl, NULL);
    hb->g = dev_buf(c, B * (size_t)hb->in.ffn_dim * fl, NULL);
    hb->logits = dev_buf(c, B * (size_t)hb->n_vocab * fl, NULL);
    hb->stage = dev_buf(c, (size_t)hb->n_planes * A * d * fl, NULL);
    return hb->x && hb->xc && hb->f && hb->qkv_buf && hb->att && hb->g && hb->logits &&
                   hb->stage
               ? 0
               : LLM_ENOMEM;
}

/* The shapes the decode step's products take (cuda_backend.h: whole
 * 16-byte vectors a row for every layout the head's file allows). */
static int shapes_ok(const pm_block_info *in, char *err, size_t errlen)
{
    if (in->dim % 16 || in->ffn_dim % 16 || in->head_dim % 4 || in->head_dim > 256)
        return fail(err, errlen, LLM_EUNSUP,
                    "width %d, ffn %d, head_dim %d (multiples of 16, 16 and 4, head_dim <= 256 "
                    "needed)", (int)in->dim, (int)in->ffn_dim, (int)in->head_dim);
    return 0;
}

int llm_cuda_block_create(llm_cuda *c, struct llm_backend *tbe, const llm_model *target,
                          const pm_block *head, uint32_t n_ctx, llm_cuda_block **out,
                          char *err, size_t errlen)
{
    if (!out)
        return LLM_EINVAL;
    *out = NULL;
    if (!c || !tbe || !target || !head || n_ctx == 0 || n_ctx > PM_BLOCK_MAX_CTX)
        return fail(err, errlen, LLM_EINVAL, "a context, a target, a head and n_ctx are required");
    const pm_block_info *in = pm__block_info(head);
    int rc = shapes_ok(in, err, errlen);
    if (rc)
        return rc;
    const llm_cuda_weight *embd = NULL, *output = NULL;
    int mv = 0;
    if (llm_cuda_backend_model_io(tbe, target, &embd, &output, &mv) != 0 || !mv)
        return fail(err, errlen, LLM_EUNSUP,
                    "the target's embedding or output matrix is not on the device in the "
                    "decode step's layout");
    llm_cuda_block *hb = calloc(1, sizeof *hb);
    if (!hb)
        return fail(err, errlen, LLM_ENOMEM, "out of memory");
    hb->c = c;
    hb->in = *in;
    hb->q_dim = in->n_heads * in->head_dim;
    hb->kv_dim = in->n_kv_heads * in->head_dim;
    hb->qkv_w = hb->q_dim + 2 * hb->kv_dim;
    hb->n_vocab = target->hp.n_vocab;
    hb->embd = embd;
    hb->output = output;
    hb->n_ctx = n_ctx;
    hb->cache_rows = n_ctx + PM_BLOCK_MAX_B + APPEND_MAX;
    for (int32_t l = 0; l < target->hp.n_layers; l++) {
        int used = 0;
        for (int32_t i = 0; i < in->n_feat; i++)
            if (in->feat_layers[i] == l) {
                hb->plane_of[i] = hb->n_planes;
                used = 1;
            }
        if (used)
            hb->planes[hb->n_planes++] = l;
    }
    rc = llm_cuda_bind(c);
    if (rc == 0)
        rc = upload_weights(hb, head);
    if (rc == 0)
        rc = alloc_state(hb);
    if (rc == 0)
        rc = llm_cuda_sync(c);
    if (rc) {
        fail(err, errlen, rc, "%s",
             rc == LLM_ENOMEM ? "out of device memory" : llm_cuda_error(c));
        llm_cuda_block_free(hb);
        return rc == LLM_ENOMEM ? LLM_ENOMEM : LLM_EBACKEND;
    }
    *out = hb;
    return 0;
}

const pm_block_info *llm_cuda_block_info(const llm_cuda_block *hb)
{
    return &hb->in;
}

int32_t llm_cuda_block_planes(const llm_cuda_block *hb, const int32_t **layers)
{
    *layers = hb->planes;
    return hb->n_planes;
}

const float *llm_cuda_block_logits(const llm_cuda_block *hb)
{
    return hb->logits;
}

/* Layer l's q/k/v product over rows of x with the norm folded in, its
 * rotated keys and values stored at the rows' positions. */
static int layer_qkv(llm_cuda_block *hb, int32_t l, const float *x, int32_t rows,
                     llm_cuda_positions pos)
{
    const pm_block_info *in = &hb->in;
    llm_cuda_rope_store rs = {pos, hb->freq, 1.0f, in->n_heads, in->n_kv_heads, in->head_dim,
                              hb->kc[l], hb->vc[l]};
    llm_cuda_mv_fuse f = {LLM_CUDA_MV_NORM | LLM_CUDA_MV_ROPE_STORE, hb->attn_norm[l], in->eps,
                          &rs};
    return llm_cuda_matvec_fused_rows(hb->c, &hb->qkv[l], x, rows, hb->qkv_buf, &f);
}

int llm_cuda_block_append(llm_cuda_block *hb, const float *feat, int32_t plane_rows,
                          int32_t rows, llm_cuda_positions pos)
{
    if (!hb || !feat || rows < 1 || rows > plane_rows || rows > APPEND_MAX)
        return LLM_EINVAL;
    const pm_block_info *in = &hb->in;
    llm_cuda *c = hb->c;
    llm_cuda_mv_fuse plain = {0, NULL, 0.0f, NULL};
    int rc = llm_cuda_block_gather(c, hb->f, feat, plane_rows, rows, in->dim, in->n_feat,
                                   hb->plane_of);
    if (rc == 0)
        rc = llm_cuda_matvec_fused_rows(c, &hb->fc, hb->f, rows, hb->xc, &plain);
    if (rc == 0)
        rc = llm_cuda_rmsnorm(c, hb->xc, hb->xc, hb->fc_norm, rows, in->dim, in->eps);
    for (int32_t l = 0; rc == 0 && l < in->n_layers; l++)
        rc = layer_qkv(hb, l, hb->xc, rows, pos);
    return rc;
}

int llm_cuda_block_append_host(llm_cuda_block *hb, const float *feat, size_t plane_rows,
                               uint32_t rows, uint32_t pos0)
{
    if (!hb || !feat || rows > plane_rows)
        return LLM_EINVAL;
    if ((uint64_t)pos0 + rows > hb->n_ctx)
        return LLM_ECTX;
    size_t d = (size_t)hb->in.dim;
    int rc = 0;
    for (uint32_t r0 = 0; rc == 0 && r0 < rows; r0 += APPEND_MAX) {
        int32_t n = (int32_t)(rows - r0 < APPEND_MAX ? rows - r0 : APPEND_MAX);
        for (int32_t p = 0; rc == 0 && p < hb->n_planes; p++)
            rc = llm_cuda_upload(hb->c, hb->stage + (size_t)p * APPEND_MAX * d,
                                 feat + ((size_t)p * plane_rows + r0) * d,
                                 (size_t)n * d * sizeof(float));
        llm_cuda_positions pos = {pos0 + r0, NULL};
        if (rc == 0)
            rc = llm_cuda_block_append(hb, hb->stage, APPEND_MAX, n, pos);
    }
    return rc;
}

int llm_cuda_block_forward(llm_cuda_block *hb, const int32_t *last, int32_t rows,
                           llm_cuda_positions pos)
{
    if (!hb || !last || rows < 1 || rows > hb->in.block_size)
        return LLM_EINVAL;
    const pm_block_info *in = &hb->in;
    llm_cuda *c = hb->c;
    size_t d = (size_t)in->dim;
    int rc = llm_cuda_embed(c, hb->embd, last, 1, hb->x);
    if (rc == 0 && rows > 1)
        rc = llm_cuda_copy(c, hb->x + d, hb->mask, (size_t)(rows - 1) * d * sizeof(float));
    llm_cuda_mv_fuse acc = {LLM_CUDA_MV_ACCUMULATE, NULL, 0.0f, NULL};
    for (int32_t l = 0; rc == 0 && l < in->n_layers; l++) {
        llm_cuda_mv_fuse ffn = {LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS, hb->ffn_norm[l],
                                in->eps, NULL};
        rc = layer_qkv(hb, l, hb->x, rows, pos);
        if (rc == 0)
            rc = llm_cuda_block_attention(c, hb->qkv_buf, hb->qkv_w, hb->kc[l], hb->vc[l],
                                          hb->att, rows, pos, in->n_heads, in->n_kv_heads,
                                          in->head_dim);
        if (rc == 0)
            rc = llm_cuda_matvec_fused_rows(c, &hb->wo[l], hb->att, rows, hb->x, &acc);
        if (rc == 0)
            rc = llm_cuda_matvec_fused_rows(c, &hb->gu[l], hb->x, rows, hb->g, &ffn);
        if (rc == 0)
            rc = llm_cuda_matvec_fused_rows(c, &hb->down[l], hb->g, rows, hb->x, &acc);
    }
    llm_cuda_mv_fuse head = {LLM_CUDA_MV_NORM, hb->out_norm, in->eps, NULL};
    if (rc == 0)
        rc = llm_cuda_matvec_fused_rows(c, hb->output, hb->x, rows, hb->logits, &head);
    return rc;
}
