/* cuda_seam.c — the engine's backend seam (backend.h) implemented over the
 * llm_cuda API, for "cuda" and "cuda:N".
 *
 * Residency. prepare uploads every weight the model's span holds and
 * records the device copies in the model: a cuda_layer per layer
 * (llm_layer.dev) with its matrices and norm vectors, a cuda_head
 * (llm_model.dev) with the embedding, the output head, its norm and the
 * RoPE frequencies; llm_tensor.dev points at the tensor's own device
 * matrix inside them. A layer the fused kernels take gets its q, k and v
 * stacked into one matrix and its gate and up interleaved (gate_0, up_0,
 * gate_1, ...) into another: one device copy, with q/k/v as row views of
 * the stack. Nothing is uploaded after prepare; a block on a layer that
 * was not prepared fails.
 *
 * Blocks. Each forward of a span is run in one of three ways, chosen by
 * step_begin for the whole span (so every layer of a forward takes the
 * same path and the counters say what ran):
 *  - the decode step (one row, every layer fused, decode mode not OPS):
 *    five kernels a layer (the q/k/v product with RMSNorm and RoPE + cache
 *    store in its epilogue, split-K attention, the output product adding
 *    into the residual, the gate/up product with RMSNorm and SwiGLU, the
 *    down product adding), positions from the context's register, and in
 *    GRAPH mode captured once per (span, buffers) into a CUDA graph that
 *    later steps replay from a small cache;
 *  - the fused prefill (more than LLM_CUDA_MATVEC_MAX rows, every layer
 *    fused, prefill mode FUSED): one cuBLAS product over the stacked
 *    q/k/v into the scratch, RoPE + cache store in one kernel, attention
 *    reading q from the q/k/v rows, the output and down products adding
 *    into the residual in cuBLAS's epilogue, the gate/up pair product and
 *    SwiGLU over the pairs; attention of at least LLM_CUDA_PREFILL_TF32_MIN
 *    rows on the tensor cores, whose score room is reserved when both the
 *    head count (prepare) and the context (reserve) are known;
 *  - otherwise op by op: RMSNorm, one product per matrix (views of the
 *    stack, the pair split back into gate and up), RoPE, attention, add.
 *
 * Errors. Blocks return nothing; a CUDA failure is sticky in the seam,
 * every later block is skipped, a read fills its destination with NaN,
 * and status() reports it.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cuda_backend.h"
#include "forward.h"
#include "quant.h"

/* Token ids staged per embed call (longer batches are done in pieces). */
#define SEAM_IDS 4096
/* Rows the argmax op takes per kernel launch (more are done in pieces). */
#define SEAM_ARGMAX 64
/* Activation rows of the pair products the scratch holds at a time. */
#define SEAM_GEMM_ROWS 512
/* Activation rows cuBLAS stages (as bf16) per product (see
 * llm_cuda_reserve): a 2048-token prefill's q/k/v, output and down
 * products run as one product each instead of four products of 512 rows,
 * whose 512 x 4096 outputs are too few tiles to keep every multiprocessor
 * busy. Costs 2048 x 2 bytes a column of the widest matrix row (58 MB for
 * an 8B). */
#define SEAM_STAGE_ROWS 2048
/* The tensor-core attention's score room: chunks of up to SEAM_ATTN_ROWS
 * query rows of every head against the whole reserved context (512 rows
 * measured fastest for a 2048-token 8B prefill), at most SEAM_ATTN_ROOM
 * floats (256 MiB), so a long context gets smaller chunks rather than a
 * huge buffer; a context too long for one row of every head keeps the
 * tiled kernel. */
#define SEAM_ATTN_ROWS 512
#define SEAM_ATTN_ROOM ((size_t)64 << 20)
/* Captured decode steps kept (one per span and buffers in use). */
#define SEAM_GRAPHS 8
/* The warm-up's forwards at prepare: a prompt long enough for the
 * tensor-core attention, a short one (tiled attention, small products), a
 * verify-sized forward and a decode step. */
#define SEAM_WARM_LONG LLM_CUDA_PREFILL_TF32_MIN
#define SEAM_WARM_SHORT 16
#define SEAM_WARM_VERIFY 4

/* A layer's device copy (llm_layer.dev). */
typedef struct cuda_layer {
    int fused;                /* 1: qkv and gu hold the products */
    int step_ok;              /* 1: the decode step's kernel takes every
                                 matrix of the layer (fused, vector layout) */
    llm_cuda_weight qkv;      /* fused: [q; k; v] rows, owned */
    llm_cuda_weight gu;       /* fused: [2 ffn_dim] rows, gate_i at 2i, up_i
                                 at 2i+1, owned */
    llm_cuda_weight q, k, v;  /* views into qkv when fused, else owned */
    llm_cuda_weight gate, up; /* owned, unfused only */
    llm_cuda_weight wo, down; /* owned */
    float *attn_norm, *ffn_norm; /* [dim], owned */
    /* qwen2's biases and qwen3's per-head norms (llm_layer), owned; NULL
     * where the layer has none. Such a layer is never fused: only the
     * op-by-op path applies them. */
    float *bq, *bk, *bv;      /* [q_dim], [kv_dim], [kv_dim] */
    float *q_norm, *k_norm;   /* [head_dim] */
    struct cuda_layer *next;  /* the seam's list of everything it owns */
} cuda_layer;

/* A model's model-wide device pieces (llm_model.dev). */
typedef struct cuda_head {
    llm_cuda_weight embd;     /* when the span starts the model */
    llm_cuda_weight output;   /* when the span ends the model */
    int tied;                 /* output is embd (not owned twice) */
    int output_mv;            /* the matrix-vector kernel takes output */
    float *out_norm;          /* [dim] */
    double *freq;             /* [head_dim/2] RoPE frequencies */
    struct cuda_head *next;
} cuda_head;

/* A captured decode step: the graph and the buffers it refers to. */
typedef struct span_graph {
    llm_cuda_graph *g; /* NULL: empty slot */
    unsigned gen;      /* the seam's generation it was captured in */
    const void **key;  /* [nkey]: see step_key */
    size_t nkey;
} span_graph;

/* How the blocks of the forward in progress run (set by step_begin). */
typedef enum step_path {
    PATH_OPS = 0,
    PATH_STEP = 1,
    PATH_PREFILL = 2,
    PATH_VSTEP = 3 /* a verify (or the loop's), n > 1: the step's kernels over n block rows */
} step_path;

typedef struct cuda_be {
    llm_backend base;
    llm_backend_ops ops; /* the table with this instance's name */
    llm_cuda *cu;
    char name[24];       /* "cuda:N" for markers and model info */
    int failed;          /* sticky: the first failure's status */
    char msg[256];       /* and its reason */
    cuda_layer *layers;  /* every layer prepared (owned list) */
    cuda_head *heads;    /* every model prepared (owned list) */
    int32_t *ids_dev;    /* [SEAM_IDS + SEAM_ARGMAX]: token ids staged for
                            embed, then the argmax op's results */
    float *scratch;      /* the pair products (and their unused halves),
                            the prefill's q/k/v rows, the step's q/k/v row */
    size_t scratch_len;  /* floats */
    int decode;          /* LLM_CUDA_DECODE_* */
    int prefill;         /* LLM_CUDA_PREFILL_* */
    int32_t fuse_from;   /* layers below it are prepared unfused (tests) */
    step_path path;      /* of the forward in progress */
    span_graph *capturing; /* the slot step_end completes, or NULL */
    int32_t attn_heads;  /* the most query heads of a prepared model */
    size_t attn_room;    /* floats of tensor-core score room reserved */
    unsigned gen;        /* bumped when buffers a graph uses are replaced */
    uint32_t seen_ctx;   /* the largest reservation so far */
    int64_t seen_width;
    span_graph graphs[SEAM_GRAPHS];
    unsigned next_graph; /* round-robin eviction */
    const void **key;    /* [key_cap] the key of the step being run */
    size_t key_cap;
    int warmup;          /* 1: prepare runs the warm-up forwards */
    /* Loop mode (llm_cuda_backend_set_loop): forwards are recorded by a
     * device loop's capture, with their positions in the register the
     * loop keeps and their token ids already on the device. */
    int loop;
    const int32_t *loop_ids; /* device [n]: the ids embed reads */
    llm_cuda_decode_stats stats;
} cuda_be;

static cuda_be *cb(llm_backend *be)
{
    return (cuda_be *)(void *)be;
}

/* Records the first failure (blocks cannot return it; status() does).
 * Out-of-memory is not sticky in the context, but a forward that skipped
 * a block is void, so the seam keeps every failure. */
static void seam_fail(cuda_be *c, int rc)
{
    if (c->failed || rc == 0)
        return;
    c->failed = rc;
    snprintf(c->msg, sizeof c->msg, "%s", llm_cuda_error(c->cu));
}

static void seam_failf(cuda_be *c, int rc, const char *what, int32_t layer)
{
    if (c->failed)
        return;
    c->failed = rc;
    if (layer >= 0)
        snprintf(c->msg, sizeof c->msg, "%s (layer %d)", what, (int)layer);
    else
        snprintf(c->msg, sizeof c->msg, "%s", what);
}

static int seam_ok(cuda_be *c, int rc)
{
    seam_fail(c, rc);
    return rc == 0 && !c->failed;
}

/* 1 when the seam may issue work: healthy and bound to its device. Entry
 * points that can start a forward's work bind (embed, write, step_begin,
 * ...); the blocks after step_begin run on the device it bound, since a
 * forward holds the model lock from its first call to its last. */
static int seam_live(cuda_be *c)
{
    return !c->failed && seam_ok(c, llm_cuda_bind(c->cu));
}

/* Whether the fused matrix-vector kernel takes w (its vector layout). */
static int mv_fusable(const llm_cuda_weight *w)
{
    if (w->type == LLM_TYPE_Q4_K || w->type == LLM_TYPE_Q5_K ||
        w->type == LLM_TYPE_Q6_K) /* native k-quant layouts */
        return w->cols % LLM_QK_K == 0 && w->cols <= LLM_CUDA_KQ_MAX_COLS &&
               ((uintptr_t)w->data & 15) == 0;
    int chunk = w->type == LLM_TYPE_F32 ? 4 : w->type == LLM_TYPE_Q8_0 ? 16 : 8;
    return w->cols % chunk == 0 && ((uintptr_t)w->data & 15) == 0;
}

/* ---- memory and status -------------------------------------------------- */

static void release_layer(cuda_be *c, cuda_layer *cl)
{
    llm_cuda_weight *own[] = {&cl->qkv, &cl->gu, &cl->gate, &cl->up, &cl->wo, &cl->down};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        llm_cuda_weight_release(c->cu, own[i]);
    if (!cl->fused) {
        llm_cuda_weight_release(c->cu, &cl->q);
        llm_cuda_weight_release(c->cu, &cl->k);
        llm_cuda_weight_release(c->cu, &cl->v);
    }
    llm_cuda_mfree(c->cu, cl->attn_norm);
    llm_cuda_mfree(c->cu, cl->ffn_norm);
    float *extras[] = {cl->bq, cl->bk, cl->bv, cl->q_norm, cl->k_norm};
    for (size_t i = 0; i < sizeof extras / sizeof extras[0]; i++)
        llm_cuda_mfree(c->cu, extras[i]);
    free(cl);
}

static void release_head(cuda_be *c, cuda_head *h)
{
    llm_cuda_weight_release(c->cu, &h->embd);
    if (!h->tied)
        llm_cuda_weight_release(c->cu, &h->output);
    llm_cuda_mfree(c->cu, h->out_norm);
    llm_cuda_mfree(c->cu, h->freq);
    free(h);
}

static void seam_destroy(llm_backend *be)
{
    cuda_be *c = cb(be);
    if (!c)
        return;
    (void)llm_cuda_bind(c->cu);
    while (c->layers) {
        cuda_layer *l = c->layers;
        c->layers = l->next;
        release_layer(c, l);
    }
    while (c->heads) {
        cuda_head *h = c->heads;
        c->heads = h->next;
        release_head(c, h);
    }
    for (int i = 0; i < SEAM_GRAPHS; i++) {
        llm_cuda_graph_free(c->graphs[i].g);
        free(c->graphs[i].key);
    }
    free(c->key);
    llm_cuda_mfree(c->cu, c->scratch);
    llm_cuda_mfree(c->cu, c->ids_dev);
    llm_cuda_free(c->cu);
    free(c);
}

/* Reserves the tensor-core attention's score room for the largest
 * context reserved and the most heads prepared (once both are known).
 * Setup only. Out of memory is no failure: the tiled kernel needs no room
 * and runs instead. */
static int attn_room(cuda_be *c)
{
    if (c->attn_heads <= 0 || c->seen_ctx == 0)
        return 0;
    size_t per_row = (size_t)c->seen_ctx * (size_t)c->attn_heads;
    size_t rows = SEAM_ATTN_ROOM / per_row;
    rows = rows > SEAM_ATTN_ROWS ? SEAM_ATTN_ROWS : rows;
    if (rows == 0 || rows * per_row <= c->attn_room)
        return 0;
    int rc = llm_cuda_reserve_attention_gemm(c->cu, (int32_t)rows, c->seen_ctx,
                                             c->attn_heads);
    if (rc == LLM_ENOMEM)
        return 0;
    if (rc)
        return rc;
    c->attn_room = rows * per_row;
    c->gen++; /* conservative: no captured step uses the room */
    return 0;
}

/* The context's attention threshold for the prefill mode: TF32 from
 * LLM_CUDA_PREFILL_TF32_MIN rows in FUSED mode, never in OPS mode (the
 * op-by-op path exactly as it was before the fused prefill). */
static int apply_prefill_mode(cuda_be *c)
{
    llm_cuda_tuning t;
    int rc = llm_cuda_get_tuning(c->cu, &t);
    if (rc)
        return rc;
    t.attn_gemm_min = c->prefill == LLM_CUDA_PREFILL_FUSED ? LLM_CUDA_PREFILL_TF32_MIN
                                                            : INT32_MAX;
    return llm_cuda_set_tuning(c->cu, &t);
}

static int seam_reserve(llm_backend *be, uint32_t n_ctx, int64_t max_width)
{
    cuda_be *c = cb(be);
    if (llm_cuda_bind(c->cu) != 0)
        return LLM_EBACKEND;
    /* Heads are at least 2 wide (RoPE pairs), so width/2 bounds the head
     * count whatever the model (stories260K has 8-wide heads). */
    int64_t heads = max_width / 2 > 0 ? max_width / 2 : 1;
    int rc = llm_cuda_reserve(c->cu, SEAM_STAGE_ROWS, max_width, n_ctx,
                              (int32_t)(heads < 65536 ? heads : 65536));
    /* A reservation that grew replaced scratch that captured steps use. */
    if (n_ctx > c->seen_ctx || max_width > c->seen_width) {
        c->gen++;
        c->seen_ctx = n_ctx > c->seen_ctx ? n_ctx : c->seen_ctx;
        c->seen_width = max_width > c->seen_width ? max_width : c->seen_width;
    }
    if (rc == 0)
        rc = attn_room(c);
    return rc == LLM_ENOMEM ? LLM_ENOMEM : rc ? LLM_EBACKEND : 0;
}

static void *seam_alloc(llm_backend *be, size_t bytes)
{
    cuda_be *c = cb(be);
    void *p = NULL;
    /* A failed allocation is reported by alloc's NULL, not as a failure of
     * the forward. */
    if (llm_cuda_bind(c->cu) != 0 || llm_cuda_malloc(c->cu, bytes ? bytes : 1, &p) != 0)
        return NULL;
    return p;
}

static void seam_free(llm_backend *be, void *p)
{
    llm_cuda_mfree(cb(be)->cu, p);
}

static void *seam_host_alloc(llm_backend *be, size_t bytes)
{
    cuda_be *c = cb(be);
    void *p = NULL;
    if (llm_cuda_host_alloc(c->cu, bytes ? bytes : 1, &p) != 0)
        return NULL;
    memset(p, 0, bytes);
    return p;
}

static void seam_host_free(llm_backend *be, void *p)
{
    llm_cuda_host_free(cb(be)->cu, p);
}

static void seam_write(llm_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_be *c = cb(be);
    if (seam_live(c))
        seam_fail(c, llm_cuda_upload(c->cu, dst, src, bytes));
}

static void seam_read(llm_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_be *c = cb(be);
    if (seam_live(c) && seam_ok(c, llm_cuda_download(c->cu, dst, src, bytes)))
        return;
    /* The results are void: make that visible rather than stale. */
    float *f = dst;
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        f[i] = NAN;
}

/* A forward's features (ws->x after a layer into ws->feat): on the
 * stream, so it lands between that layer's ffn and the next attention. */
static void seam_copy(llm_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_be *c = cb(be);
    if (!c->failed)
        seam_fail(c, llm_cuda_copy(c->cu, dst, src, bytes));
}

static int seam_sync(llm_backend *be)
{
    cuda_be *c = cb(be);
    if (seam_live(c))
        seam_fail(c, llm_cuda_sync(c->cu));
    return c->failed ? LLM_EBACKEND : 0;
}

static int seam_status(llm_backend *be, char *err, size_t errlen)
{
    cuda_be *c = cb(be);
    if (c->failed && err && errlen)
        snprintf(err, errlen, "%s: %s", c->name, c->msg);
    return c->failed;
}

/* ---- preparation ---------------------------------------------------------- */

/* Uploads a host f32 vector of len floats; NULL on failure (recorded). */
static float *upload_vector(cuda_be *c, const float *host, int32_t len)
{
    void *dev = NULL;
    if (!seam_ok(c, llm_cuda_malloc(c->cu, (size_t)len * sizeof(float), &dev)))
        return NULL;
    if (!seam_ok(c, llm_cuda_upload(c->cu, dev, host, (size_t)len * sizeof(float)))) {
        llm_cuda_mfree(c->cu, dev);
        return NULL;
    }
    return dev;
}

static int upload_tensor(cuda_be *c, const llm_tensor *t, llm_cuda_weight *w)
{
    return seam_ok(c, llm_cuda_weight_upload(c->cu, t->type, t->data, t->ne0, t->ne1,
                                             t->row_bytes, w))
               ? 0 : -1;
}

/* Grows the scratch to hold pair products of SEAM_GEMM_ROWS activation
 * rows (with the unused halves' sink) and a decode step's q/k/v row.
 * Setup only; a graph that used the old scratch is recaptured. */
static int scratch_grow(cuda_be *c, int64_t pair_rows, int64_t qkv_rows)
{
    size_t need = (size_t)SEAM_GEMM_ROWS * ((size_t)pair_rows + (size_t)pair_rows / 2);
    if ((size_t)qkv_rows > need)
        need = (size_t)qkv_rows;
    if (need <= c->scratch_len)
        return 0;
    void *p = NULL;
    if (!seam_ok(c, llm_cuda_malloc(c->cu, need * sizeof(float), &p)))
        return -1;
    llm_cuda_mfree(c->cu, c->scratch);
    c->scratch = p;
    c->scratch_len = need;
    c->gen++;
    return 0;
}

/* Whether a layer's q/k/v and gate/up can be fused: one type the fused
 * kernel takes, input width m's dim in whole vectors, the shapes the
 * RoPE-store and SwiGLU-pair epilogues expect. */
static int layer_fusable(const llm_backend *be, const llm_model *m, const llm_layer *L)
{
    const llm_hparams *hp = &m->hp;
    uint32_t t = L->wq.type;
    /* The fused epilogues rotate adjacent pairs and know no biases or
     * per-head norms: qwen2/qwen3 layers take the op-by-op path. */
    if (hp->rope_neox || L->bq || L->bk || L->bv || L->q_norm || L->k_norm)
        return 0;
    /* Every device layout the uploads make is one the fused kernels read. */
    int type_ok = llm_cuda_backend_supports_type(be, t);
    /* q/k/v of different types (a Q4_K_M layer's Q6_K v) stack in the Q8
     * layout (llm_cuda_weight_upload_mixed). */
    const uint32_t qkv[3] = {t, L->wk.type, L->wv.type}, gu[2] = {L->w_gate.type, L->w_up.type};
    int64_t qd = (int64_t)hp->n_heads * hp->head_dim, kd = (int64_t)hp->n_kv_heads * hp->head_dim;
    return type_ok && llm_cuda_weight_types_stack(qkv, 3) && llm_cuda_weight_types_stack(gu, 2) &&
           hp->dim % 8 == 0 && hp->head_dim % 2 == 0 &&
           hp->head_dim <= LLM_CUDA_MAX_HEAD_DIM && L->wq.ne0 == hp->dim &&
           L->wk.ne0 == hp->dim && L->wv.ne0 == hp->dim && L->w_gate.ne0 == hp->dim &&
           L->w_up.ne0 == hp->dim && L->wq.ne1 == qd && L->wk.ne1 == kd && L->wv.ne1 == kd &&
           L->w_gate.ne1 == L->w_up.ne1 && L->w_gate.ne1 > 0;
}

/* q/k/v stacked and gate/up interleaved; q, k, v become row views. */
static int fuse_layer(cuda_be *c, const llm_layer *L, cuda_layer *cl)
{
    const llm_tensor *qkv[3] = {&L->wq, &L->wk, &L->wv}, *gu[2] = {&L->w_gate, &L->w_up};
    llm_cuda_weight_part pq[3], pg[2];
    for (int i = 0; i < 3; i++)
        pq[i] = (llm_cuda_weight_part){qkv[i]->data, qkv[i]->ne1, qkv[i]->row_bytes};
    for (int i = 0; i < 2; i++)
        pg[i] = (llm_cuda_weight_part){gu[i]->data, gu[i]->ne1, gu[i]->row_bytes};
    const uint32_t tq[3] = {L->wq.type, L->wk.type, L->wv.type};
    const uint32_t tg[2] = {L->w_gate.type, L->w_up.type};
    if (!seam_ok(c, llm_cuda_weight_upload_mixed(c->cu, tq, L->wq.ne0, pq, 3, 0, &cl->qkv)) ||
        !seam_ok(c, llm_cuda_weight_upload_mixed(c->cu, tg, L->w_gate.ne0, pg, 2, 1,
                                                 &cl->gu)) ||
        scratch_grow(c, cl->gu.rows, cl->qkv.rows) != 0)
        return -1;
    cl->fused = 1;
    cl->q = llm_cuda_weight_rows(&cl->qkv, 0, L->wq.ne1);
    cl->k = llm_cuda_weight_rows(&cl->qkv, L->wq.ne1, L->wk.ne1);
    cl->v = llm_cuda_weight_rows(&cl->qkv, L->wq.ne1 + L->wk.ne1, L->wv.ne1);
    c->stats.fused_layers++;
    return 0;
}

/* The layer's optional vectors (llm_layer bq..k_norm), each when present. */
static int upload_extras(cuda_be *c, const llm_model *m, const llm_layer *L, cuda_layer *cl)
{
    const llm_hparams *hp = &m->hp;
    int32_t q = hp->n_heads * hp->head_dim, kv = hp->n_kv_heads * hp->head_dim;
    struct { const float *host; float **dev; int32_t len; } v[] = {
        {L->bq, &cl->bq, q}, {L->bk, &cl->bk, kv}, {L->bv, &cl->bv, kv},
        {L->q_norm, &cl->q_norm, hp->head_dim}, {L->k_norm, &cl->k_norm, hp->head_dim},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i].host && !(*v[i].dev = upload_vector(c, v[i].host, v[i].len)))
            return -1;
    return 0;
}

static int upload_layer(cuda_be *c, const llm_model *m, int32_t l, cuda_layer *cl)
{
    const llm_layer *L = &m->layers[l];
    if (l >= c->fuse_from && layer_fusable(&c->base, m, L)) {
        if (fuse_layer(c, L, cl) != 0)
            return -1;
    } else if (upload_tensor(c, &L->wq, &cl->q) || upload_tensor(c, &L->wk, &cl->k) ||
               upload_tensor(c, &L->wv, &cl->v) || upload_tensor(c, &L->w_gate, &cl->gate) ||
               upload_tensor(c, &L->w_up, &cl->up)) {
        return -1;
    }
    if (upload_tensor(c, &L->wo, &cl->wo) || upload_tensor(c, &L->w_down, &cl->down))
        return -1;
    cl->attn_norm = upload_vector(c, L->attn_norm, m->hp.dim);
    cl->ffn_norm = upload_vector(c, L->ffn_norm, m->hp.dim);
    if (!cl->attn_norm || !cl->ffn_norm)
        return -1;
    if (upload_extras(c, m, L, cl) != 0)
        return -1;
    cl->step_ok = cl->fused && mv_fusable(&cl->qkv) && mv_fusable(&cl->gu) &&
                  mv_fusable(&cl->wo) && mv_fusable(&cl->down);
    return 0;
}

/* Records where each tensor of layer L now lives. */
static void bind_layer(llm_layer *L, cuda_layer *cl)
{
    L->dev = cl;
    L->wq.dev = &cl->q;
    L->wk.dev = &cl->k;
    L->wv.dev = &cl->v;
    L->w_gate.dev = cl->fused ? (void *)&cl->gu : (void *)&cl->gate;
    L->w_up.dev = cl->fused ? (void *)&cl->gu : (void *)&cl->up;
    L->wo.dev = &cl->wo;
    L->w_down.dev = &cl->down;
}

static int prepare_head(cuda_be *c, llm_model *m)
{
    const llm_hparams *hp = &m->hp;
    cuda_head *h = calloc(1, sizeof *h);
    if (!h) {
        seam_fail(c, LLM_ENOMEM);
        return -1;
    }
    h->next = c->heads;
    c->heads = h; /* owned from here on, whatever fails below */
    m->dev = h;
    int first = m->span_first == 0, last = m->span_last == hp->n_layers - 1;
    if (first && upload_tensor(c, &m->tok_embd, &h->embd) != 0)
        return -1;
    if (first)
        m->tok_embd.dev = &h->embd;
    if (last) {
        h->tied = first && m->output.data == m->tok_embd.data;
        if (h->tied)
            h->output = h->embd;
        else if (upload_tensor(c, &m->output, &h->output) != 0)
            return -1;
        m->output.dev = &h->output;
        h->output_mv = mv_fusable(&h->output);
        if (!(h->out_norm = upload_vector(c, m->out_norm, hp->dim)))
            return -1;
    }
    size_t fbytes = (size_t)(hp->head_dim / 2) * sizeof(double);
    void *f = NULL;
    if (!seam_ok(c, llm_cuda_malloc(c->cu, fbytes ? fbytes : 1, &f)))
        return -1;
    h->freq = f;
    return seam_ok(c, llm_cuda_upload(c->cu, f, m->inv_freq, fbytes)) ? 0 : -1;
}

/* ---- warm-up ---------------------------------------------------------- */

static double seam_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One quiet forward of n rows at pos0 over the warm-up's span: token ids
 * when the span starts the model, zero activations otherwise; the head
 * runs for the last row when the span ends the model. */
static void warm_forward(const llm_model *m, llm_span *span, llm_workspace *ws,
                         const int32_t *ids, const float *zeros, int32_t n, uint32_t pos0)
{
    llm_forward_in in;
    memset(&in, 0, sizeof in);
    in.phase = n == 1 ? PM_PHASE_DECODE : PM_PHASE_EXACT;
    in.pos0 = pos0;
    in.n = n;
    in.tokens = ids;
    in.act = zeros;
    in.out.want = LLM_OUT_LOGITS;
    in.out.rows = 1;
    llm_span_forward(m, span, ws, &in);
}

/* cuBLAS chooses a kernel per product shape, and the runtime loads each
 * kernel at its first launch, so a prompt whose length no warm-up forward
 * had (an 11-token one after the 64- and 16-row prefills) still paid
 * about a millisecond more on its first prefill. With warm-up level 2
 * (the default) the warm-up also runs the four wide products of the
 * span's first fused layer, as the fused prefill issues them (q/k/v and
 * gate/up plain, output and down adding), for every row count from
 * LLM_CUDA_MATVEC_MAX + 1 to SEAM_WARM_LONG - 1: every layer has those
 * shapes. Inputs are uniform noise in scratch of its own; nothing is
 * kept. Out of memory skips it; a device failure is the seam's. */
static void warm_shapes(cuda_be *c, const llm_model *m)
{
    const cuda_layer *cl = m->layers[m->span_first].dev;
    if (!cl || !cl->fused)
        return;
    const llm_cuda_weight *w[4] = {&cl->qkv, &cl->wo, &cl->gu, &cl->down};
    int64_t cols = 0, rows = 0;
    for (int i = 0; i < 4; i++) {
        cols = w[i]->cols > cols ? w[i]->cols : cols;
        rows = w[i]->rows > rows ? w[i]->rows : rows;
    }
    void *x = NULL, *y = NULL;
    size_t nx = (size_t)SEAM_WARM_LONG * (size_t)cols, ny = (size_t)SEAM_WARM_LONG * (size_t)rows;
    if (llm_cuda_malloc(c->cu, nx * sizeof(float), &x) == 0 &&
        llm_cuda_malloc(c->cu, ny * sizeof(float), &y) == 0) {
        seam_fail(c, llm_cuda_fill_uniform(c->cu, x, LLM_TYPE_F32, nx, 11, 1.0f));
        seam_fail(c, llm_cuda_fill_uniform(c->cu, y, LLM_TYPE_F32, ny, 12, 1.0f));
        for (int32_t n = LLM_CUDA_MATVEC_MAX + 1; n < SEAM_WARM_LONG && !c->failed; n++) {
            if (n == SEAM_WARM_SHORT)
                continue; /* the short warm-up prefill ran it */
            for (int i = 0; i < 4 && !c->failed; i++)
                seam_fail(c, (i & 1) ? llm_cuda_matmul_acc(c->cu, w[i], x, n, y)
                                     : llm_cuda_matmul(c->cu, w[i], x, n, y));
        }
        if (!c->failed)
            seam_fail(c, llm_cuda_sync(c->cu));
    }
    llm_cuda_mfree(c->cu, x);
    llm_cuda_mfree(c->cu, y);
}

/* The first forward of a process pays for loading kernels (the runtime
 * loads a module's kernels at their first launch), cuBLAS's first choice
 * of kernels for each shape and the first graph instantiation: tens of
 * milliseconds for an 11-token prompt. prepare runs the paths a request
 * takes once, on a small cache and workspace of its own: a prefill of
 * SEAM_WARM_LONG rows (tensor-core attention), one of SEAM_WARM_SHORT
 * (tiled attention), a verify of SEAM_WARM_VERIFY rows, a decode step in
 * the backend's decode mode and the argmax. Nothing of it is kept: the
 * graphs it captured are dropped and the counters are as before, so the
 * first request captures its own step. Out of memory skips the warm-up
 * (the model works without it); a device failure fails prepare. */
static int seam_warmup(cuda_be *c, llm_model *m)
{
    const llm_hparams *hp = &m->hp;
    int first = m->span_first == 0, last = m->span_last == hp->n_layers - 1;
    uint32_t n_ctx = SEAM_WARM_LONG + SEAM_WARM_VERIFY + 2;
    double t0 = seam_now_s();
    llm_cuda_decode_stats keep = c->stats;
    unsigned slot0 = c->next_graph;
    int32_t ids[SEAM_WARM_LONG];
    for (int32_t i = 0; i < SEAM_WARM_LONG; i++)
        ids[i] = (int32_t)((7919u * (unsigned)i + 13u) % (unsigned)hp->n_vocab);
    float *zeros = first ? NULL : calloc((size_t)SEAM_WARM_LONG * (size_t)hp->dim, sizeof *zeros);
    llm_span span;
    llm_workspace ws;
    char err[160];
    int have_span = 0, have_ws = 0;
    if ((first || zeros) &&
        llm_span_init(&span, m, m->span_first, m->span_last, n_ctx, err, sizeof err) == 0) {
        have_span = 1;
        span.quiet = 1; /* no markers: no request runs */
        have_ws = llm_workspace_init(&ws, m, SEAM_WARM_LONG, n_ctx, err, sizeof err) == 0;
    }
    if (have_ws && !c->failed) {
        warm_forward(m, &span, &ws, ids, zeros, SEAM_WARM_LONG, 0);
        warm_forward(m, &span, &ws, ids, zeros, SEAM_WARM_SHORT, 0);
        warm_forward(m, &span, &ws, ids, zeros, SEAM_WARM_VERIFY, SEAM_WARM_SHORT);
        warm_forward(m, &span, &ws, ids, zeros, 1, SEAM_WARM_SHORT + SEAM_WARM_VERIFY);
        warm_forward(m, &span, &ws, ids, zeros, 1, SEAM_WARM_SHORT + SEAM_WARM_VERIFY + 1);
        int32_t tok;
        if (last && !c->failed)
            (void)c->base.ops->argmax(&c->base, ws.logits, 1, hp->n_vocab, &tok);
        if (c->warmup >= 2 && !c->failed)
            warm_shapes(c, m);
        if (!c->failed)
            seam_fail(c, llm_cuda_sync(c->cu));
    }
    /* The captures of this step went into the slots from slot0 on. */
    for (unsigned i = slot0; i != c->next_graph && i - slot0 < SEAM_GRAPHS; i++) {
        span_graph *g = &c->graphs[i % SEAM_GRAPHS];
        llm_cuda_graph_free(g->g);
        g->g = NULL;
    }
    if (have_ws)
        llm_workspace_release(&ws, m);
    if (have_span)
        llm_span_release(&span, m);
    free(zeros);
    c->stats = keep;
    c->stats.warmup_us += (uint64_t)((seam_now_s() - t0) * 1e6);
    if (!c->failed)
        c->stats.warmups += have_ws;
    return c->failed;
}

static int seam_prepare(llm_backend *be, llm_model *m, char *err, size_t errlen)
{
    cuda_be *c = cb(be);
    /* The device attention kernels attend to every earlier key; a window
     * would be computed unmasked, so the model is refused before any
     * upload (the CPU backend applies it). */
    if (m->hp.window > 0) {
        snprintf(err, errlen, "%s: sliding-window attention (window %d) is not supported on this backend",
                 c->name, (int)m->hp.window);
        return LLM_EUNSUP;
    }
    int rc = c->failed ? c->failed : llm_cuda_bind(c->cu);
    if (rc == 0 && prepare_head(c, m) != 0)
        rc = -1;
    for (int32_t l = m->span_first; rc == 0 && l <= m->span_last; l++) {
        cuda_layer *cl = calloc(1, sizeof *cl);
        if (!cl) {
            seam_fail(c, LLM_ENOMEM);
            rc = -1;
            break;
        }
        cl->next = c->layers;
        c->layers = cl;
        if (upload_layer(c, m, l, cl) != 0)
            rc = -1;
        else
            bind_layer(&m->layers[l], cl);
    }
    if (rc == 0 && m->hp.n_heads > c->attn_heads) {
        /* The head count is known from here on; the room follows once a
         * reservation names the context (or now, if one already did). */
        c->attn_heads = m->hp.n_heads;
        rc = attn_room(c);
    }
    if (rc == 0)
        rc = llm_cuda_sync(c->cu);
    if (rc) {
        seam_fail(c, rc);
        snprintf(err, errlen, "%s: uploading weights: %s", c->name, c->msg);
        return c->failed == LLM_ENOMEM ? LLM_ENOMEM : LLM_EBACKEND;
    }
    if (c->warmup && seam_warmup(c, m) != 0) {
        snprintf(err, errlen, "%s: warm-up: %s", c->name, c->msg);
        return LLM_EBACKEND;
    }
    return 0;
}

/* ---- the span's path and the recorded step ---------------------------------- */

static const cuda_layer *layer_of(cuda_be *c, const llm_model *m, int32_t l)
{
    const cuda_layer *cl = m->layers[l].dev;
    if (!cl)
        seam_failf(c, LLM_EBACKEND, "layer not prepared on this backend", l);
    return cl;
}

static const cuda_head *head_of(cuda_be *c, const llm_model *m)
{
    const cuda_head *h = m->dev;
    if (!h)
        seam_failf(c, LLM_EBACKEND, "model not prepared on this backend", -1);
    return h;
}

/* Whether every layer of the span takes the decode step (step 1) or the
 * fused prefill (step 0). */
static int span_fused(const llm_model *m, const llm_span *span, int step)
{
    for (int32_t l = span->first; l <= span->last; l++) {
        const cuda_layer *cl = m->layers[l].dev;
        if (!cl || !(step ? cl->step_ok : cl->fused))
            return 0;
    }
    return 1;
}

/* The buffers a captured step refers to besides the seam's own: the span
 * (layers, caches), the workspace and whether the head runs. A graph
 * replays only for the same key; buffers freed and allocated again at the
 * same addresses are the same buffers to it. Returns the key's length, 0
 * when out of memory. */
static size_t step_key(cuda_be *c, const llm_step *st)
{
    const llm_span *span = st->span;
    const llm_workspace *ws = st->ws;
    size_t nl = (size_t)(span->last - span->first + 1), n = 9 + 2 * nl;
    if (n > c->key_cap) { /* grows at a span's first step only */
        const void **k = realloc(c->key, n * sizeof *k);
        if (!k)
            return 0;
        c->key = k;
        c->key_cap = n;
    }
    const void **k = c->key;
    k[0] = st->m;
    k[1] = (const void *)(uintptr_t)span->first;
    k[2] = (const void *)(uintptr_t)span->last;
    k[3] = (const void *)(uintptr_t)st->head_rows;
    k[4] = ws->x;
    k[5] = ws->xb;
    k[6] = ws->att;
    k[7] = ws->hb;
    k[8] = ws->logits;
    for (size_t i = 0; i < nl; i++) {
        k[9 + i] = span->k[i];
        k[9 + nl + i] = span->v[i];
    }
    return n;
}

static span_graph *graph_find(cuda_be *c, size_t nkey)
{
    for (int i = 0; i < SEAM_GRAPHS; i++) {
        span_graph *g = &c->graphs[i];
        if (g->g && g->gen == c->gen && g->nkey == nkey &&
            memcmp(g->key, c->key, nkey * sizeof *c->key) == 0)
            return g;
    }
    return NULL;
}

/* A cache slot for a new capture of the step keyed in c->key (evicting
 * round-robin), its key stored; NULL when out of memory (recorded). */
static span_graph *graph_slot(cuda_be *c, size_t nkey)
{
    span_graph *g = &c->graphs[c->next_graph++ % SEAM_GRAPHS];
    llm_cuda_graph_free(g->g);
    g->g = NULL;
    /* The key buffer is exactly as long as the last key kept in it. */
    if (nkey > g->nkey || !g->key) {
        free(g->key);
        g->nkey = 0;
        g->key = malloc(nkey * sizeof *g->key);
        if (!g->key) {
            seam_fail(c, LLM_ENOMEM);
            return NULL;
        }
    }
    memcpy(g->key, c->key, nkey * sizeof *g->key);
    g->nkey = nkey;
    return g;
}

/* Launches a captured step at position pos. */
static void graph_run(cuda_be *c, span_graph *g, uint32_t pos)
{
    if (seam_ok(c, llm_cuda_pos_set(c->cu, pos)))
        seam_fail(c, llm_cuda_graph_launch(c->cu, g->g));
    c->stats.replays++;
}

/* Whether a loop forward of n rows over span can run the fused step's
 * kernels: every layer and the head in the vector layout, n block rows of
 * the product (no native k-quant layout for n > 1) and n rows of q/k/v in
 * the scratch. */
static int loop_takes(const cuda_be *c, const llm_model *m, const llm_span *span, int32_t n)
{
    const llm_hparams *hp = &m->hp;
    const cuda_head *h = m->dev;
    int64_t qkv_w = (int64_t)(hp->n_heads + 2 * hp->n_kv_heads) * hp->head_dim;
    if (n < 1 || n > LLM_CUDA_MV_ROWS_MAX || !span_fused(m, span, 1) ||
        (size_t)n * (size_t)qkv_w > c->scratch_len ||
        (span->last == hp->n_layers - 1 && (!h || !h->output_mv)))
        return 0;
    for (int32_t l = span->first; n > 1 && l <= span->last; l++) {
        const cuda_layer *cl = m->layers[l].dev;
        const llm_cuda_weight *w[4] = {&cl->qkv, &cl->gu, &cl->wo, &cl->down};
        for (int i = 0; i < 4; i++)
            if (w[i]->type == LLM_TYPE_Q4_K || w[i]->type == LLM_TYPE_Q5_K ||
                w[i]->type == LLM_TYPE_Q6_K)
                return 0;
    }
    if (n > 1 && h && h->output_mv &&
        (h->output.type == LLM_TYPE_Q4_K || h->output.type == LLM_TYPE_Q5_K ||
         h->output.type == LLM_TYPE_Q6_K))
        return 0;
    return 1;
}

/* A decode step: replayed from the cache (1), or to be issued as fused
 * blocks (0), directly or into a capture (c->capturing). */
static int begin_decode_step(cuda_be *c, const llm_step *st)
{
    if (!span_fused(st->m, st->span, 1)) {
        c->stats.declined++;
        return 0;
    }
    /* A step asking features issues copies between its layers, which a
     * recorded graph of the same step without them would skip (and one
     * captured with them would replay for steps that asked nothing): it
     * runs the graph's launches directly instead, as FUSED mode does. */
    if (c->decode == LLM_CUDA_DECODE_FUSED || st->n_feat > 0) {
        /* The graph's very launches, position register included, issued
         * directly: the two modes give the same bits. */
        c->path = PATH_STEP;
        seam_fail(c, llm_cuda_pos_set(c->cu, st->pos0));
        c->stats.direct++;
        return 0;
    }
    size_t nkey = step_key(c, st);
    if (!nkey) {
        seam_fail(c, LLM_ENOMEM);
        return 1;
    }
    span_graph *g = graph_find(c, nkey);
    if (g) {
        graph_run(c, g, st->pos0);
        return 1;
    }
    if (!(g = graph_slot(c, nkey)) || !seam_ok(c, llm_cuda_graph_begin(c->cu)))
        return 1;
    c->path = PATH_STEP;
    c->capturing = g;
    return 0;
}

static int seam_step_begin(llm_backend *be, const llm_step *st)
{
    cuda_be *c = cb(be);
    c->path = PATH_OPS;
    c->capturing = NULL;
    if (!seam_live(c))
        return 1; /* the forward is void either way; issue nothing more */
    if (c->loop) {
        /* The loop's capture records this forward: the step's kernels,
         * positions from the register, no cache lookup, no position
         * written from the host. */
        if (!loop_takes(c, st->m, st->span, st->n)) {
            seam_failf(c, LLM_EUNSUP, "device loop: a layer, the head or the width does not take the fused step", -1);
            return 1;
        }
        /* Features asked (the block drafter's rounds) are copies of x
         * between the layers, recorded in the loop's own graph: they
         * change no product, so the rows keep the step's bits. */
        c->path = st->n == 1 ? PATH_STEP : PATH_VSTEP;
        return 0;
    }
    if (st->n == 1 && c->decode != LLM_CUDA_DECODE_OPS)
        return begin_decode_step(c, st);
    /* A verify's rows must each be the decode step's bits (greedy
     * speculative decoding is exact only so): the step's kernels over n
     * block rows, issued directly, as the device loop's verify runs them.
     * The ops path would multiply f32 activations where the step rounds
     * them to 8 bits, and flip near-ties. */
    if (st->ws->rows_exact && st->n > 1 && c->decode != LLM_CUDA_DECODE_OPS &&
        loop_takes(c, st->m, st->span, st->n)) {
        c->path = PATH_VSTEP;
        seam_fail(c, llm_cuda_pos_set(c->cu, st->pos0));
        return 0;
    }
    if (st->n > LLM_CUDA_MATVEC_MAX && c->prefill == LLM_CUDA_PREFILL_FUSED &&
        span_fused(st->m, st->span, 0)) {
        c->path = PATH_PREFILL;
        c->stats.prefills++;
    }
    return 0;
}

static void seam_step_end(llm_backend *be, const llm_step *st)
{
    cuda_be *c = cb(be);
    span_graph *g = c->capturing;
    c->path = PATH_OPS;
    c->capturing = NULL;
    if (!g)
        return;
    llm_cuda_graph *cg = NULL;
    int rc = llm_cuda_graph_end(c->cu, &cg);
    if (!seam_ok(c, rc)) { /* a graph of a failed step is never kept */
        llm_cuda_graph_free(cg);
        return;
    }
    g->g = cg;
    g->gen = c->gen;
    c->stats.captures++;
    graph_run(c, g, st->pos0);
}

/* ---- blocks ----------------------------------------------------------------- */

static void seam_embed(llm_backend *be, const llm_model *m, const int32_t *ids, int32_t n,
                       float *out)
{
    cuda_be *c = cb(be);
    const cuda_head *h = seam_live(c) ? head_of(c, m) : NULL;
    if (h && c->loop) { /* the ids are on the device already (the loop's) */
        if (!c->loop_ids)
            seam_failf(c, LLM_EINVAL, "device loop: no token ids to embed", -1);
        else
            seam_fail(c, llm_cuda_embed(c->cu, &h->embd, c->loop_ids, n, out));
        return;
    }
    for (int32_t t0 = 0; h && t0 < n; t0 += SEAM_IDS) {
        int32_t nt = n - t0 < SEAM_IDS ? n - t0 : SEAM_IDS;
        if (!seam_ok(c, llm_cuda_upload(c->cu, c->ids_dev, ids + t0,
                                        (size_t)nt * sizeof *ids)) ||
            !seam_ok(c, llm_cuda_embed(c->cu, &h->embd, c->ids_dev, nt,
                                       out + (size_t)t0 * m->hp.dim)))
            return;
    }
}

/* Rows of activations whose pair products fit the scratch at once. */
static int32_t pair_slice(const cuda_be *c, int64_t pair_rows)
{
    size_t per_row = (size_t)pair_rows + (size_t)pair_rows / 2;
    size_t k = c->scratch_len / per_row;
    return k > SEAM_GEMM_ROWS ? SEAM_GEMM_ROWS : (int32_t)k;
}

/* The positions of a block's rows: from the register on the decode step
 * (a captured graph replays at each step's position), else pos0. */
static llm_cuda_positions positions(const cuda_be *c, uint32_t pos0)
{
    llm_cuda_positions p = {pos0, NULL};
    if (c->path == PATH_STEP || c->path == PATH_VSTEP) {
        p.pos0 = 0;
        p.dpos = llm_cuda_pos(c->cu);
    }
    return p;
}

/* The decode step's attention: three kernels. On the loop's verify path
 * (PATH_VSTEP) the same three over b->n rows: the products over n rows
 * (row i the one-row arithmetic at position base + i), split-K attention
 * over the n rows (llm_cuda_attention_rows), each row's pieces cut by its
 * own context as a decode step's are, so every row has the bits of the
 * decode step at its position. */
static void step_attention(cuda_be *c, const llm_block *b, const cuda_layer *cl,
                           const double *freq)
{
    const llm_hparams *hp = &b->m->hp;
    llm_workspace *ws = b->ws;
    int32_t n = b->n, qkv_w = (hp->n_heads + 2 * hp->n_kv_heads) * hp->head_dim;
    float *qkv = c->scratch; /* [n][qkv_w]: q, k, v of the tokens, rotated */
    llm_cuda_positions pos = positions(c, b->pos0);
    llm_cuda_rope_store rs = {pos, freq, hp->rope_scale, hp->n_heads, hp->n_kv_heads,
                              hp->head_dim, b->k, b->v};
    llm_cuda_mv_fuse fq = {LLM_CUDA_MV_NORM | LLM_CUDA_MV_ROPE_STORE, cl->attn_norm,
                           hp->norm_eps, &rs};
    llm_cuda_mv_fuse acc = {LLM_CUDA_MV_ACCUMULATE, NULL, 0.0f, NULL};
    if (!seam_ok(c, llm_cuda_matvec_fused_rows(c->cu, &cl->qkv, ws->x, n, qkv, &fq)))
        return;
    llm_cuda_attn a = {qkv, b->k, b->v, ws->att, n, pos, hp->n_heads, hp->n_kv_heads,
                       hp->head_dim, qkv_w};
    if (!seam_ok(c, llm_cuda_attention_rows(c->cu, &a)))
        return;
    seam_fail(c, llm_cuda_matvec_fused_rows(c->cu, &cl->wo, ws->att, n, ws->x, &acc));
}

/* The fused prefill's attention for b->n rows. q/k/v rows ([rows][qkv_w])
 * go through the scratch in slices of the rows it holds (3584 for the 8B
 * shape, so a 2048-token prompt is one slice); a slice's attention reads
 * the keys the earlier slices stored, so slicing changes no result. */
static void prefill_attention(cuda_be *c, const llm_block *b, const cuda_layer *cl,
                              const double *freq)
{
    const llm_hparams *hp = &b->m->hp;
    llm_workspace *ws = b->ws;
    int32_t n = b->n, hd = hp->head_dim;
    int32_t q_dim = hp->n_heads * hd, qkv_w = (hp->n_heads + 2 * hp->n_kv_heads) * hd;
    size_t fit = c->scratch_len / (size_t)qkv_w; /* >= 1: scratch_grow */
    int32_t k = fit < (size_t)n ? (int32_t)fit : n;
    if (!seam_ok(c, llm_cuda_rmsnorm(c->cu, ws->xb, ws->x, cl->attn_norm, n, hp->dim,
                                     hp->norm_eps)))
        return;
    for (int32_t r0 = 0; r0 < n; r0 += k) {
        int32_t nr = n - r0 < k ? n - r0 : k;
        llm_cuda_positions pos = {b->pos0 + (uint32_t)r0, NULL};
        llm_cuda_attn a = {c->scratch, b->k, b->v, ws->att + (size_t)r0 * (size_t)q_dim, nr,
                           pos, hp->n_heads, hp->n_kv_heads, hd, qkv_w};
        if (!seam_ok(c, llm_cuda_matmul(c->cu, &cl->qkv, ws->xb + (size_t)r0 * hp->dim, nr,
                                        c->scratch)) ||
            !seam_ok(c, llm_cuda_rope_qkv_store(c->cu, c->scratch, nr, qkv_w, hp->n_heads,
                                                hp->n_kv_heads, hd, pos, freq,
                                                hp->rope_scale, b->k, b->v)) ||
            !seam_ok(c, llm_cuda_attention(c->cu, &a)))
            return;
    }
    seam_fail(c, llm_cuda_matmul_acc(c->cu, &cl->wo, ws->att, n, ws->x));
}

/* Between the q/k/v products and RoPE: the layer's biases, then its
 * per-head norms (rows of head_dim), as the CPU block orders them. */
static int ops_qk_extras(cuda_be *c, const llm_block *b, const cuda_layer *cl, float *kslot,
                         float *vslot)
{
    const llm_hparams *hp = &b->m->hp;
    llm_cuda *cu = c->cu;
    int32_t n = b->n, q_dim = hp->n_heads * hp->head_dim, kv_dim = hp->n_kv_heads * hp->head_dim;
    float *q = b->ws->q;
    return (!cl->bq || seam_ok(c, llm_cuda_add_bias(cu, q, cl->bq, n, q_dim))) &&
           (!cl->bk || seam_ok(c, llm_cuda_add_bias(cu, kslot, cl->bk, n, kv_dim))) &&
           (!cl->bv || seam_ok(c, llm_cuda_add_bias(cu, vslot, cl->bv, n, kv_dim))) &&
           (!cl->q_norm || seam_ok(c, llm_cuda_rmsnorm(cu, q, q, cl->q_norm, n * hp->n_heads,
                                                       hp->head_dim, hp->norm_eps))) &&
           (!cl->k_norm || seam_ok(c, llm_cuda_rmsnorm(cu, kslot, kslot, cl->k_norm,
                                                       n * hp->n_kv_heads, hp->head_dim,
                                                       hp->norm_eps)));
}

/* Op by op: the q, k and v products (the new keys and values straight
 * into their cache rows), biases and per-head norms when the layer has
 * them, RoPE, attention, the output product, the add. */
static void ops_attention(cuda_be *c, const llm_block *b, const cuda_layer *cl,
                          const double *freq)
{
    const llm_hparams *hp = &b->m->hp;
    llm_workspace *ws = b->ws;
    llm_cuda *cu = c->cu;
    int32_t n = b->n, q_dim = hp->n_heads * hp->head_dim, kv_dim = hp->n_kv_heads * hp->head_dim;
    float *kslot = b->k + (size_t)b->pos0 * kv_dim, *vslot = b->v + (size_t)b->pos0 * kv_dim;
    llm_cuda_positions pos = {b->pos0, NULL};
    llm_cuda_attn a = {ws->q, b->k, b->v, ws->att, n, pos, hp->n_heads, hp->n_kv_heads,
                       hp->head_dim, 0};
    int (*rope)(llm_cuda *, float *, int32_t, int32_t, int32_t, llm_cuda_positions,
                const double *, float, int32_t) = hp->rope_neox ? llm_cuda_rope_neox
                                                                : llm_cuda_rope;
    if (seam_ok(c, llm_cuda_rmsnorm(cu, ws->xb, ws->x, cl->attn_norm, n, hp->dim,
                                    hp->norm_eps)) &&
        seam_ok(c, llm_cuda_matmul(cu, &cl->q, ws->xb, n, ws->q)) &&
        seam_ok(c, llm_cuda_matmul(cu, &cl->k, ws->xb, n, kslot)) &&
        seam_ok(c, llm_cuda_matmul(cu, &cl->v, ws->xb, n, vslot)) &&
        ops_qk_extras(c, b, cl, kslot, vslot) &&
        seam_ok(c, rope(cu, ws->q, n, hp->n_heads, q_dim, pos, freq, hp->rope_scale,
                        hp->head_dim)) &&
        seam_ok(c, rope(cu, kslot, n, hp->n_kv_heads, kv_dim, pos, freq, hp->rope_scale,
                        hp->head_dim)) &&
        seam_ok(c, llm_cuda_attention(cu, &a)) &&
        seam_ok(c, llm_cuda_matmul(cu, &cl->wo, ws->att, n, ws->xb2)))
        seam_fail(c, llm_cuda_add(cu, ws->x, ws->xb2, (size_t)n * hp->dim));
}

static void seam_attention(llm_backend *be, const llm_block *b)
{
    cuda_be *c = cb(be);
    if (c->failed)
        return;
    const cuda_layer *cl = layer_of(c, b->m, b->layer);
    const cuda_head *h = cl ? head_of(c, b->m) : NULL;
    if (!h)
        return;
    if (c->path == PATH_STEP || c->path == PATH_VSTEP)
        step_attention(c, b, cl, h->freq);
    else if (c->path == PATH_PREFILL)
        prefill_attention(c, b, cl, h->freq);
    else
        ops_attention(c, b, cl, h->freq);
}

/* The decode step's feed-forward: two kernels. */
static void step_ffn(cuda_be *c, const llm_block *b, const cuda_layer *cl)
{
    const llm_hparams *hp = &b->m->hp;
    llm_workspace *ws = b->ws;
    llm_cuda_mv_fuse fg = {LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS, cl->ffn_norm,
                           hp->norm_eps, NULL};
    llm_cuda_mv_fuse acc = {LLM_CUDA_MV_ACCUMULATE, NULL, 0.0f, NULL};
    if (seam_ok(c, llm_cuda_matvec_fused_rows(c->cu, &cl->gu, ws->x, b->n, ws->hb, &fg)))
        seam_fail(c, llm_cuda_matvec_fused_rows(c->cu, &cl->down, ws->hb, b->n, ws->x, &acc));
}

/* The fused prefill's feed-forward: the interleaved gate/up products
 * ([rows][2 ffn]) go through the scratch in slices of pair_slice rows,
 * SwiGLU writing each slice's [rows][ffn] into ws->hb. */
static void prefill_ffn(cuda_be *c, const llm_block *b, const cuda_layer *cl)
{
    const llm_hparams *hp = &b->m->hp;
    llm_workspace *ws = b->ws;
    int64_t half = cl->gu.rows / 2;
    int32_t n = b->n, k = pair_slice(c, cl->gu.rows);
    if (!seam_ok(c, llm_cuda_rmsnorm(c->cu, ws->xb, ws->x, cl->ffn_norm, n, hp->dim,
                                     hp->norm_eps)))
        return;
    for (int32_t r0 = 0; r0 < n; r0 += k) {
        int32_t nr = n - r0 < k ? n - r0 : k;
        if (!seam_ok(c, llm_cuda_matmul(c->cu, &cl->gu, ws->xb + (size_t)r0 * hp->dim, nr,
                                        c->scratch)) ||
            !seam_ok(c, llm_cuda_swiglu_pairs(c->cu, ws->hb + (size_t)r0 * (size_t)half,
                                              c->scratch, (size_t)nr * (size_t)half)))
            return;
    }
    seam_fail(c, llm_cuda_matmul_acc(c->cu, &cl->down, ws->hb, n, ws->x));
}

/* gate and up of a fused layer: one product over the interleaved rows per
 * slice of activation rows, split into gate and up. */
static void pair_matmul(cuda_be *c, const llm_cuda_weight *gu, const float *x, int32_t n,
                        float *gate, float *up)
{
    int64_t half = gu->rows / 2;
    int32_t k = pair_slice(c, gu->rows);
    for (int32_t r0 = 0; r0 < n && !c->failed; r0 += k) {
        int32_t nr = n - r0 < k ? n - r0 : k;
        size_t off = (size_t)r0 * (size_t)half;
        if (!seam_ok(c, llm_cuda_matmul(c->cu, gu, x + (size_t)r0 * (size_t)gu->cols, nr,
                                        c->scratch)))
            return;
        seam_fail(c, llm_cuda_unpair(c->cu, gate + off, up + off, c->scratch,
                                     (size_t)nr * (size_t)half));
    }
}

static void ops_ffn(cuda_be *c, const llm_block *b, const cuda_layer *cl)
{
    const llm_hparams *hp = &b->m->hp;
    llm_workspace *ws = b->ws;
    llm_cuda *cu = c->cu;
    int32_t n = b->n;
    if (!seam_ok(c, llm_cuda_rmsnorm(cu, ws->xb, ws->x, cl->ffn_norm, n, hp->dim,
                                     hp->norm_eps)))
        return;
    if (cl->fused)
        pair_matmul(c, &cl->gu, ws->xb, n, ws->hb, ws->hb2);
    else if (seam_ok(c, llm_cuda_matmul(cu, &cl->gate, ws->xb, n, ws->hb)))
        seam_fail(c, llm_cuda_matmul(cu, &cl->up, ws->xb, n, ws->hb2));
    if (!c->failed && seam_ok(c, llm_cuda_swiglu(cu, ws->hb, ws->hb2, (size_t)n * hp->ffn_dim)) &&
        seam_ok(c, llm_cuda_matmul(cu, &cl->down, ws->hb, n, ws->xb2)))
        seam_fail(c, llm_cuda_add(cu, ws->x, ws->xb2, (size_t)n * hp->dim));
}

static void seam_ffn(llm_backend *be, const llm_block *b)
{
    cuda_be *c = cb(be);
    const cuda_layer *cl = !c->failed ? layer_of(c, b->m, b->layer) : NULL;
    if (!cl)
        return;
    if (c->path == PATH_STEP || c->path == PATH_VSTEP)
        step_ffn(c, b, cl);
    else if (c->path == PATH_PREFILL)
        prefill_ffn(c, b, cl);
    else
        ops_ffn(c, b, cl);
}

/* The head: on the decode step one product with the norm folded in when
 * the kernel takes the matrix, else the norm and then the product. */
static void seam_head(llm_backend *be, const llm_model *m, llm_workspace *ws, int32_t n,
                      int32_t rows)
{
    cuda_be *c = cb(be);
    const cuda_head *h = !c->failed ? head_of(c, m) : NULL;
    if (!h)
        return;
    const llm_hparams *hp = &m->hp;
    const float *src = ws->x + (size_t)(n - rows) * hp->dim;
    if ((c->path == PATH_STEP || c->path == PATH_VSTEP) && h->output_mv) {
        llm_cuda_mv_fuse fo = {LLM_CUDA_MV_NORM, h->out_norm, hp->norm_eps, NULL};
        seam_fail(c, llm_cuda_matvec_fused_rows(c->cu, &h->output, src, rows, ws->logits, &fo));
        return;
    }
    if (seam_ok(c, llm_cuda_rmsnorm(c->cu, ws->xb, src, h->out_norm, rows, hp->dim,
                                    hp->norm_eps)))
        seam_fail(c, llm_cuda_matmul(c->cu, &h->output, ws->xb, rows, ws->logits));
}

/* The greedy tokens of logits rows on the device; only their 4 bytes each
 * are read back (the download waits for the forward before it). */
static int seam_argmax(llm_backend *be, const float *logits, int32_t rows, int32_t n,
                       int32_t *out)
{
    cuda_be *c = cb(be);
    int32_t *tok_dev = c->ids_dev + SEAM_IDS;
    if (!seam_live(c))
        return -1;
    for (int32_t r0 = 0; r0 < rows; r0 += SEAM_ARGMAX) {
        int32_t nr = rows - r0 < SEAM_ARGMAX ? rows - r0 : SEAM_ARGMAX;
        if (!seam_ok(c, llm_cuda_argmax_scan(c->cu, logits + (size_t)r0 * (size_t)n, nr, n,
                                             tok_dev)) ||
            !seam_ok(c, llm_cuda_download(c->cu, out + r0, tok_dev,
                                          (size_t)nr * sizeof *out)))
            return -1;
    }
    c->stats.argmaxes += (uint64_t)rows;
    return 0;
}

static const llm_backend_ops cuda_ops_template = {
    .name = "cuda",
    .destroy = seam_destroy,
    .prepare = seam_prepare,
    .supports_type = llm_cuda_backend_supports_type,
    .reserve = seam_reserve,
    .alloc = seam_alloc,
    .free = seam_free,
    .host_alloc = seam_host_alloc,
    .host_free = seam_host_free,
    .write = seam_write,
    .read = seam_read,
    .copy = seam_copy,
    .sync = seam_sync,
    .status = seam_status,
    .embed = seam_embed,
    .attention = seam_attention,
    .ffn = seam_ffn,
    .head = seam_head,
    .argmax = seam_argmax,
    .step_begin = seam_step_begin,
    .step_end = seam_step_end,
};

/* ---- construction -------------------------------------------------------- */

/* PHASEMARK_CUDA_DECODE=ops|fused|graph; anything else is the default. */
static int decode_mode_env(void)
{
    const char *e = getenv("PHASEMARK_CUDA_DECODE");
    if (e && strcmp(e, "ops") == 0)
        return LLM_CUDA_DECODE_OPS;
    if (e && strcmp(e, "fused") == 0)
        return LLM_CUDA_DECODE_FUSED;
    return LLM_CUDA_DECODE_GRAPH;
}

/* PHASEMARK_CUDA_WARMUP=0 skips the warm-up at prepare, =1 runs only its
 * forwards (not warm_shapes); anything else (or nothing) is level 2. */
static int warmup_env(void)
{
    const char *e = getenv("PHASEMARK_CUDA_WARMUP");
    return e && strcmp(e, "0") == 0 ? 0 : e && strcmp(e, "1") == 0 ? 1 : 2;
}

/* PHASEMARK_CUDA_PREFILL=ops|fused; anything else is the default. */
static int prefill_mode_env(void)
{
    const char *e = getenv("PHASEMARK_CUDA_PREFILL");
    return e && strcmp(e, "ops") == 0 ? LLM_CUDA_PREFILL_OPS : LLM_CUDA_PREFILL_FUSED;
}

int llm_cuda_backend_create(int device, llm_backend **out, char *err, size_t errlen)
{
    if (!out)
        return LLM_EINVAL;
    *out = NULL;
    if (device < 0) {
        snprintf(err, errlen, "cuda backend: device %d is invalid", device);
        return LLM_EINVAL;
    }
    cuda_be *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "cuda backend: out of memory");
        return LLM_ENOMEM;
    }
    int rc = llm_cuda_create(device, &c->cu, err, errlen);
    void *ids = NULL;
    c->prefill = prefill_mode_env();
    if (rc == 0)
        rc = apply_prefill_mode(c);
    if (rc == 0)
        rc = llm_cuda_malloc(c->cu, (SEAM_IDS + SEAM_ARGMAX) * sizeof(int32_t), &ids);
    if (rc) {
        if (c->cu)
            snprintf(err, errlen, "cuda:%d: %s", device, llm_cuda_error(c->cu));
        llm_cuda_free(c->cu);
        free(c);
        return rc == LLM_ENOMEM ? LLM_ENOMEM : LLM_EBACKEND;
    }
    c->ids_dev = ids;
    c->decode = decode_mode_env();
    c->warmup = warmup_env();
    snprintf(c->name, sizeof c->name, "cuda:%d", device);
    c->ops = cuda_ops_template;
    c->ops.name = c->name; /* markers say backend=cuda:N */
    c->base.ops = &c->ops;
    c->base.n_threads = 1;
    c->base.host_visible = 0;
    *out = &c->base;
    return 0;
}

static int is_cuda(const llm_backend *be)
{
    return be && be->ops && be->ops->destroy == seam_destroy;
}

int llm_cuda_backend_set_fuse_from(llm_backend *be, int32_t layer)
{
    if (!is_cuda(be) || layer < 0)
        return LLM_EINVAL;
    cb(be)->fuse_from = layer;
    return 0;
}

int llm_cuda_backend_set_warmup(llm_backend *be, int on)
{
    if (!is_cuda(be) || on < 0 || on > 2)
        return LLM_EINVAL;
    cb(be)->warmup = on;
    return 0;
}

llm_cuda *llm_cuda_backend_context(llm_backend *be)
{
    return is_cuda(be) ? cb(be)->cu : NULL;
}

int llm_cuda_backend_set_decode(llm_backend *be, int mode)
{
    if (!is_cuda(be) || mode < LLM_CUDA_DECODE_OPS || mode > LLM_CUDA_DECODE_GRAPH)
        return LLM_EINVAL;
    cb(be)->decode = mode;
    return 0;
}

int llm_cuda_backend_set_prefill(llm_backend *be, int mode)
{
    if (!is_cuda(be) || (mode != LLM_CUDA_PREFILL_OPS && mode != LLM_CUDA_PREFILL_FUSED))
        return LLM_EINVAL;
    cuda_be *c = cb(be);
    c->prefill = mode;
    int rc = llm_cuda_bind(c->cu);
    if (rc == 0)
        rc = apply_prefill_mode(c);
    seam_fail(c, rc);
    return rc;
}

int llm_cuda_backend_decode_stats(llm_backend *be, llm_cuda_decode_stats *out)
{
    if (!is_cuda(be) || !out)
        return LLM_EINVAL;
    *out = cb(be)->stats;
    return 0;
}

int llm_cuda_backend_set_loop(llm_backend *be, int on, const int32_t *ids_dev)
{
    if (!is_cuda(be) || (on != 0 && on != 1))
        return LLM_EINVAL;
    cuda_be *c = cb(be);
    c->loop = on;
    c->loop_ids = on ? ids_dev : NULL;
    return 0;
}

int llm_cuda_backend_loop_takes(llm_backend *be, const llm_model *m, const llm_span *span,
                                int32_t n)
{
    return is_cuda(be) && loop_takes(cb(be), m, span, n);
}

int llm_cuda_backend_model_io(llm_backend *be, const llm_model *m,
                              const llm_cuda_weight **embd, const llm_cuda_weight **output,
                              int *output_mv)
{
    if (!is_cuda(be) || !m || !m->dev)
        return LLM_EINVAL;
    const cuda_head *h = m->dev;
    if (!h->embd.data || !h->output.data)
        return LLM_EUNSUP;
    *embd = &h->embd;
    *output = &h->output;
    *output_mv = h->output_mv;
    return 0;
}

unsigned llm_cuda_backend_generation(llm_backend *be)
{
    return is_cuda(be) ? cb(be)->gen : 0u;
}
