/* cpu_blocks.c — the forward's blocks (backend.h) on the CPU: each block
 * is its kernel operations (cpu_ops.h) in the order the reference forward
 * defines, so a verify's rows equal the decodes they stand for and the
 * CPU results are the reference the device backends are tested against.
 */
#include "forward.h"
#include "cpu_ops.h"

void llm_cpu_attention_block(llm_backend *be, const llm_block *b)
{
    const llm_model *m = b->m;
    const llm_hparams *hp = &m->hp;
    const llm_layer *L = &m->layers[b->layer];
    llm_workspace *ws = b->ws;
    int32_t n = b->n, q_dim = hp->n_heads * hp->head_dim, kv_dim = hp->n_kv_heads * hp->head_dim;
    /* The new keys and values go straight into their cache rows. */
    float *kslot = b->k + (size_t)b->pos0 * kv_dim, *vslot = b->v + (size_t)b->pos0 * kv_dim;
    llm_rope rope = {m->inv_freq, hp->rope_scale, hp->head_dim, hp->rope_neox};

    llm_cpu_rmsnorm(be, ws->xb, ws->x, L->attn_norm, n, hp->dim, hp->norm_eps);
    const llm_tensor *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *const qkv_out[3] = {ws->q, kslot, vslot};
    llm_cpu_matmul_many_rows(be, qkv, 3, ws->xb, n, qkv_out, ws->rows_exact);
    /* qwen2's biases, then qwen3's per-head norms (rows of head_dim), both
     * before RoPE as the models define them; a llama layer has neither. */
    if (L->bq)
        llm_cpu_add_bias(be, ws->q, L->bq, n, q_dim);
    if (L->bk)
        llm_cpu_add_bias(be, kslot, L->bk, n, kv_dim);
    if (L->bv)
        llm_cpu_add_bias(be, vslot, L->bv, n, kv_dim);
    if (L->q_norm)
        llm_cpu_rmsnorm(be, ws->q, ws->q, L->q_norm, n * hp->n_heads, hp->head_dim, hp->norm_eps);
    if (L->k_norm)
        llm_cpu_rmsnorm(be, kslot, kslot, L->k_norm, n * hp->n_kv_heads, hp->head_dim,
                        hp->norm_eps);
    if (ws->tree) { /* a tree verify: each node at its own depth's position */
        llm_cpu_rope_tree(be, ws->q, ws->tree, hp->n_heads, q_dim, b->pos0, &rope);
        llm_cpu_rope_tree(be, kslot, ws->tree, hp->n_kv_heads, kv_dim, b->pos0, &rope);
    } else {
        llm_cpu_rope(be, ws->q, n, hp->n_heads, q_dim, b->pos0, &rope);
        llm_cpu_rope(be, kslot, n, hp->n_kv_heads, kv_dim, b->pos0, &rope);
    }
    llm_attn a = {ws->q, b->k, b->v, ws->att, n, b->pos0, hp->n_heads, hp->n_kv_heads,
                  hp->head_dim, (uint32_t)hp->window, ws->tree};
    llm_cpu_attention(be, &a);
    llm_cpu_matmul_rows(be, &L->wo, ws->att, n, ws->xb2, ws->rows_exact);
    llm_cpu_add(be, ws->x, ws->xb2, (size_t)n * hp->dim);
}

void llm_cpu_ffn_block(llm_backend *be, const llm_block *b)
{
    const llm_hparams *hp = &b->m->hp;
    const llm_layer *L = &b->m->layers[b->layer];
    llm_workspace *ws = b->ws;
    llm_cpu_rmsnorm(be, ws->xb, ws->x, L->ffn_norm, b->n, hp->dim, hp->norm_eps);
    const llm_tensor *gate_up[2] = {&L->w_gate, &L->w_up};
    float *const gate_up_out[2] = {ws->hb, ws->hb2};
    llm_cpu_matmul_many_rows(be, gate_up, 2, ws->xb, b->n, gate_up_out, ws->rows_exact);
    llm_cpu_swiglu(be, ws->hb, ws->hb2, (size_t)b->n * hp->ffn_dim);
    llm_cpu_matmul_rows(be, &L->w_down, ws->hb, b->n, ws->xb2, ws->rows_exact);
    llm_cpu_add(be, ws->x, ws->xb2, (size_t)b->n * hp->dim);
}

void llm_cpu_head(llm_backend *be, const llm_model *m, llm_workspace *ws, int32_t n,
                  int32_t rows)
{
    const llm_hparams *hp = &m->hp;
    const float *src = ws->x + (size_t)(n - rows) * hp->dim;
    llm_cpu_rmsnorm(be, ws->xb, src, m->out_norm, rows, hp->dim, hp->norm_eps);
    llm_cpu_matmul_rows(be, &m->output, ws->xb, rows, ws->logits, ws->rows_exact);
}
