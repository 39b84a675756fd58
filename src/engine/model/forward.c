/* forward.c — the llama-family forward over one span (see forward.h), the
 * one place its structure is written; backends implement its blocks
 * (backend.h). What the blocks compute, per layer, for n tokens at
 * positions pos0..pos0+n-1 (shapes [n][width]):
 *   xb  = rmsnorm(x) * attn_norm
 *   q   = xb Wq^T;  k, v = xb Wk^T, xb Wv^T written straight into the cache
 *         rows pos0..pos0+n-1, then RoPE on q and the new k rows
 *   att = causal softmax(q k^T / sqrt(head_dim)) v, per head, with head h
 *         reading kv head h / (n_heads / n_kv_heads); the row at position p
 *         sees keys 0..p, or p-W+1..p only under a sliding window W
 *         (llm_hparams.window; the cache stays linear)
 *   x  += att Wo^T
 *   xb  = rmsnorm(x) * ffn_norm
 *   x  += (silu(xb Wgate^T) * (xb Wup^T)) Wdown^T
 * and the last span adds logits = (rmsnorm(x) * out_norm) Woutput^T for
 * the rows its caller asks for (llm_output).
 */
#include "forward.h"

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

void llm_span_keep_rows(llm_model *m, llm_span *span, uint32_t pos0, const int32_t *rows,
                        int32_t count)
{
    size_t kv = (size_t)m->hp.n_kv_heads * m->hp.head_dim, bytes = kv * sizeof(float);
    llm_backend *be = m->be;
    pthread_mutex_lock(&m->lock);
    /* Ascending: row j's source pos0 + rows[j] >= pos0 + j is never a
     * destination already written, nor one a later source still needs. */
    for (int32_t l = 0; l <= span->last - span->first; l++)
        for (int32_t j = 0; j < count; j++) {
            if (rows[j] == j)
                continue;
            size_t dst = ((size_t)pos0 + (size_t)j) * kv, src = ((size_t)pos0 + (size_t)rows[j]) * kv;
            be->ops->copy(be, span->k[l] + dst, span->k[l] + src, bytes);
            be->ops->copy(be, span->v[l] + dst, span->v[l] + src, bytes);
        }
    pthread_mutex_unlock(&m->lock);
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
    if (!ws->x || !ws->xb || !ws->xb2 || !ws->q || !ws->att || !ws->hb ||
        !ws->hb2 || !ws->logits)
        goto fail;
    int64_t width = max_i64(max_i64(hp->dim, hp->ffn_dim), (int64_t)q_dim);
    if (be->ops->reserve(be, n_ctx, width) != 0)
        goto fail;
    return 0;
fail:
    llm_workspace_release(ws, m);
    llm_errf(err, errlen, "session buffers: out of memory (batch %d)", (int)n_batch);
    return LLM_ENOMEM;
}

int llm_workspace_features(llm_workspace *ws, const llm_model *m)
{
    if (ws->feat)
        return 0;
    size_t bytes = LLM_FEATURES_MAX * (size_t)ws->n_batch * (size_t)m->hp.dim * sizeof(float);
    ws->feat = m->be->ops->alloc(m->be, bytes);
    return ws->feat ? 0 : LLM_ENOMEM;
}

void llm_workspace_release(llm_workspace *ws, const llm_model *m)
{
    llm_backend *be = m->be;
    float *bufs[] = {ws->x,  ws->xb,  ws->xb2,    ws->q,
                     ws->att, ws->hb, ws->hb2, ws->logits, ws->feat};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->ops->free(be, bufs[i]);
    memset(ws, 0, sizeof *ws);
}

void llm_span_forward(const llm_model *m, llm_span *span, llm_workspace *ws,
                      const llm_forward_in *in)
{
    llm_backend *be = m->be;
    const llm_backend_ops *op = be->ops;
    pm_layer_attr attr = PM_LAYER_ATTR_INIT;
    attr.phase = in->phase;
    attr.first_layer = span->first;
    attr.last_layer = span->last;
    attr.shard = span->shard;
    attr.where = span->where;
    attr.backend = op->name;
    attr.req = in->req;
    attr.tokens = (uint32_t)in->n;
    /* A quiet span runs inside a caller's leaf, where nothing may nest. */
    pm_range leaf __attribute__((cleanup(pm_range_pop), unused)) =
        span->quiet ? PM_RANGE_NONE : pm_layer_range_push(&attr);

    if (span->first == 0)
        op->embed(be, m, in->tokens, in->n, ws->x);
    else if (in->act) /* NULL: the previous span left them in ws->x */
        op->write(be, ws->x, in->act, (size_t)in->n * m->hp.dim * sizeof(float));
    /* Rows not asked for never feed the head: for the last row alone that
     * saves n-1 passes over the largest matrix. */
    int32_t n_feat = in->out.want & LLM_OUT_FEATURES && ws->feat ? in->out.n_feat : 0;
    ws->rows_exact = in->phase == PM_PHASE_VERIFY;
    ws->tree = in->tree;
    llm_step st = {m, span, ws, in->n, in->pos0,
                   span->last == m->hp.n_layers - 1 ? llm_output_head_rows(&in->out) : 0,
                   n_feat};
    if (op->step_begin && op->step_begin(be, &st))
        return; /* the backend replayed its recording of this very step */
    size_t plane = (size_t)in->n * (size_t)m->hp.dim; /* floats of one layer's rows */
    int32_t fi = 0; /* the next asked layer (ascending, within the span) */
    for (int32_t l = span->first; l <= span->last; l++) {
        int32_t i = l - span->first;
        llm_block b = {m, l, span->k[i], span->v[i], ws, in->n, in->pos0};
        op->attention(be, &b);
        op->ffn(be, &b);
        if (fi < n_feat && in->out.feat[fi] == l) {
            op->copy(be, ws->feat + (size_t)fi * plane, ws->x, plane * sizeof(float));
            fi++;
        }
    }
    if (st.head_rows > 0)
        op->head(be, m, ws, in->n, st.head_rows);
    if (op->step_begin && op->step_end)
        op->step_end(be, &st);
}
