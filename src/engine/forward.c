/* forward.c — the llama-family forward over one span (see forward.h).
 *
 * Per layer, for n tokens at positions pos0..pos0+n-1 (shapes [n][width]):
 *   xb  = rmsnorm(x) * attn_norm
 *   q   = xb Wq^T;  k, v = xb Wk^T, xb Wv^T written straight into the cache
 *         rows pos0..pos0+n-1, then RoPE on q and the new k rows
 *   att = causal softmax(q k^T / sqrt(head_dim)) v, per head, with head h
 *         reading kv head h / (n_heads / n_kv_heads)
 *   x  += att Wo^T
 *   xb  = rmsnorm(x) * ffn_norm
 *   x  += (silu(xb Wgate^T) * (xb Wup^T)) Wdown^T
 * and the last span adds logits = (rmsnorm(x) * out_norm) Woutput^T for
 * the rows its caller asks for (llm_output).
 */
#include "forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t max_i64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

int llm_span_init(llm_span *span, const llm_model *m, int32_t first,
                  int32_t last, uint32_t n_ctx, char *err, size_t errlen)
{
    llm_backend *be = m->be;
    size_t n_layers = (size_t)(last - first + 1);
    size_t bytes = (size_t)n_ctx * (size_t)m->hp.n_kv_heads *
                   (size_t)m->hp.head_dim * sizeof(float);
    memset(span, 0, sizeof *span);
    span->first = first;
    span->last = last;
    span->n_ctx = n_ctx;
    span->where = PM_WHERE_LOCAL;
    span->k = calloc(n_layers, sizeof *span->k);
    span->v = calloc(n_layers, sizeof *span->v);
    if (!span->k || !span->v)
        goto fail;
    for (size_t l = 0; l < n_layers; l++) {
        span->k[l] = be->ops->alloc(be, bytes);
        span->v[l] = be->ops->alloc(be, bytes);
        if (!span->k[l] || !span->v[l])
            goto fail;
    }
    return 0;
fail:
    llm_span_release(span, m);
    llm_errf(err, errlen, "KV cache: out of memory (%u positions, layers %d-%d)",
             (unsigned)n_ctx, (int)first, (int)last);
    return LLM_ENOMEM;
}

void llm_span_release(llm_span *span, const llm_model *m)
{
    size_t n_layers = (size_t)(span->last - span->first + 1);
    for (size_t l = 0; span->k && l < n_layers; l++)
        m->be->ops->free(m->be, span->k[l]);
    for (size_t l = 0; span->v && l < n_layers; l++)
        m->be->ops->free(m->be, span->v[l]);
    free(span->k);
    free(span->v);
    span->k = span->v = NULL;
}

int llm_workspace_init(llm_workspace *ws, const llm_model *m, int32_t n_batch,
                       uint32_t n_ctx, char *err, size_t errlen)
{
    const llm_hparams *hp = &m->hp;
    llm_backend *be = m->be;
    size_t nb = (size_t)n_batch, q_dim = (size_t)hp->n_heads * hp->head_dim;
    memset(ws, 0, sizeof *ws);
    ws->n_batch = n_batch;
    ws->x = be->ops->alloc(be, nb * hp->dim * sizeof(float));
    ws->xb = be->ops->alloc(be, nb * hp->dim * sizeof(float));
    ws->xb2 = be->ops->alloc(be, nb * hp->dim * sizeof(float));
    ws->q = be->ops->alloc(be, nb * q_dim * sizeof(float));
    ws->att = be->ops->alloc(be, nb * q_dim * sizeof(float));
    ws->hb = be->ops->alloc(be, nb * hp->ffn_dim * sizeof(float));
    ws->hb2 = be->ops->alloc(be, nb * hp->ffn_dim * sizeof(float));
    ws->logits = be->ops->alloc(be, nb * hp->n_vocab * sizeof(float));
    ws->inv_freq = malloc((size_t)(hp->head_dim / 2) * sizeof(double));
    if (!ws->x || !ws->xb || !ws->xb2 || !ws->q || !ws->att || !ws->hb ||
        !ws->hb2 || !ws->logits || !ws->inv_freq)
        goto fail;
    for (int32_t i = 0; i < hp->head_dim / 2; i++)
        ws->inv_freq[i] = pow((double)hp->rope_base, -2.0 * i / hp->head_dim);
    int64_t width = max_i64(max_i64(hp->dim, hp->ffn_dim), (int64_t)q_dim);
    if (be->ops->reserve(be, n_ctx, width) != 0)
        goto fail;
    return 0;
fail:
    llm_workspace_release(ws, m);
    llm_errf(err, errlen, "session buffers: out of memory (batch %d)", (int)n_batch);
    return LLM_ENOMEM;
}

void llm_workspace_release(llm_workspace *ws, const llm_model *m)
{
    llm_backend *be = m->be;
    float *bufs[] = {ws->x, ws->xb, ws->xb2, ws->q, ws->att, ws->hb, ws->hb2, ws->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->ops->free(be, bufs[i]);
    free(ws->inv_freq);
    memset(ws, 0, sizeof *ws);
}

/* y[i] = x w[i]^T for i < count, through the backend's matmul_many when
 * it has one (the weights share x). */
static void matmul_many(const llm_model *m, const llm_tensor *const *w, int32_t count,
                        const float *x, int32_t n, float *const *y)
{
    const llm_backend_ops *op = m->be->ops;
    if (op->matmul_many) {
        op->matmul_many(m->be, w, count, x, n, y);
        return;
    }
    for (int32_t i = 0; i < count; i++)
        op->matmul(m->be, w[i], x, n, y[i]);
}

static void attention_block(const llm_model *m, const llm_layer *L, float *kc,
                            float *vc, llm_workspace *ws, int32_t n, uint32_t pos0)
{
    const llm_hparams *hp = &m->hp;
    const llm_backend_ops *op = m->be->ops;
    llm_backend *be = m->be;
    int32_t q_dim = hp->n_heads * hp->head_dim, kv_dim = hp->n_kv_heads * hp->head_dim;
    float *kslot = kc + (size_t)pos0 * kv_dim, *vslot = vc + (size_t)pos0 * kv_dim;
    llm_rope rope = {ws->inv_freq, hp->rope_scale, hp->head_dim};

    op->rmsnorm(be, ws->xb, ws->x, L->attn_norm, n, hp->dim, hp->norm_eps);
    const llm_tensor *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *const qkv_out[3] = {ws->q, kslot, vslot};
    matmul_many(m, qkv, 3, ws->xb, n, qkv_out);
    op->rope(be, ws->q, n, hp->n_heads, q_dim, pos0, &rope);
    op->rope(be, kslot, n, hp->n_kv_heads, kv_dim, pos0, &rope);
    llm_attn a = {ws->q, kc, vc, ws->att, n, pos0, hp->n_heads, hp->n_kv_heads, hp->head_dim};
    op->attention(be, &a);
    op->matmul(be, &L->wo, ws->att, n, ws->xb2);
    op->add(be, ws->x, ws->xb2, (size_t)n * hp->dim);
}

static void ffn_block(const llm_model *m, const llm_layer *L, llm_workspace *ws,
                      int32_t n)
{
    const llm_hparams *hp = &m->hp;
    const llm_backend_ops *op = m->be->ops;
    llm_backend *be = m->be;
    op->rmsnorm(be, ws->xb, ws->x, L->ffn_norm, n, hp->dim, hp->norm_eps);
    const llm_tensor *gate_up[2] = {&L->w_gate, &L->w_up};
    float *const gate_up_out[2] = {ws->hb, ws->hb2};
    matmul_many(m, gate_up, 2, ws->xb, n, gate_up_out);
    op->swiglu(be, ws->hb, ws->hb2, (size_t)n * hp->ffn_dim);
    op->matmul(be, &L->w_down, ws->hb, n, ws->xb2);
    op->add(be, ws->x, ws->xb2, (size_t)n * hp->dim);
}

/* The logits of the last `rows` of n positions into ws->logits. Rows not
 * asked for never feed the head: for the last row alone that saves n-1
 * passes over the largest matrix. */
static void head(const llm_model *m, llm_workspace *ws, int32_t n, int32_t rows)
{
    const llm_hparams *hp = &m->hp;
    const llm_backend_ops *op = m->be->ops;
    llm_backend *be = m->be;
    const float *src = ws->x + (size_t)(n - rows) * hp->dim;
    op->rmsnorm(be, ws->xb, src, m->out_norm, rows, hp->dim, hp->norm_eps);
    op->matmul(be, &m->output, ws->xb, rows, ws->logits);
}

void llm_span_forward(const llm_model *m, llm_span *span, llm_workspace *ws,
                      const llm_forward_in *in)
{
    llm_backend *be = m->be;
    pm_layer_attr attr = PM_LAYER_ATTR_INIT;
    attr.phase = in->phase;
    attr.first_layer = span->first;
    attr.last_layer = span->last;
    attr.shard = span->shard;
    attr.where = span->where;
    attr.backend = be->ops->name;
    attr.req = in->req;
    attr.tokens = (uint32_t)in->n;
    /* A quiet span runs inside a caller's leaf, where nothing may nest. */
    pm_range leaf __attribute__((cleanup(pm_range_pop), unused)) =
        span->quiet ? PM_RANGE_NONE : pm_layer_range_push(&attr);

    if (span->first == 0)
        be->ops->embed(be, &m->tok_embd, in->tokens, in->n, ws->x);
    else if (in->act) /* NULL: the previous span left them in ws->x */
        be->ops->write(be, ws->x, in->act, (size_t)in->n * m->hp.dim * sizeof(float));
    /* A backend that runs the whole span itself (the CUDA seam's fused
     * decode step) does so inside the same range; NULL or "not handled"
     * keeps the op-by-op path below. */
    if (be->ops->forward_span && be->ops->forward_span(be, m, span, ws, in))
        return;
    for (int32_t l = span->first; l <= span->last; l++) {
        const llm_layer *L = &m->layers[l];
        int32_t i = l - span->first;
        attention_block(m, L, span->k[i], span->v[i], ws, in->n, in->pos0);
        ffn_block(m, L, ws, in->n);
    }
    int32_t rows = llm_output_head_rows(&in->out);
    if (span->last == m->hp.n_layers - 1 && rows > 0)
        head(m, ws, in->n, rows);
}
