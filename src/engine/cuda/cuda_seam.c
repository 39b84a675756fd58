/* cuda_seam.c — the engine's backend seam (backend.h) implemented over the
 * llm_cuda API, for "cuda:N".
 *
 * The forward hands the seam host-side model data: weight tensors pointing
 * into the file mapping, norm vectors in the model's buffer, RoPE
 * frequencies in the workspace, token ids. The seam keeps a device copy of
 * each, keyed by the host pointer: weights and norms in open-addressing
 * tables filled by llm_cuda_backend_prepare (or on first use, which happens
 * in the first forward, never per token), the RoPE frequencies in one
 * buffer checked against a host copy (cheap: head_dim/2 doubles). Token ids
 * go through a reserved device staging buffer.
 *
 * The seam's operations return nothing; a CUDA failure is sticky in the
 * context, every later operation is skipped, a read fills its destination
 * with NaN, and llm_cuda_backend_status reports it.
 *
 * Fused decode. llm_cuda_backend_prepare uploads a layer's q, k and v as
 * one stacked matrix and its gate and up as one matrix of interleaved rows
 * (gate_0, up_0, gate_1, ...) when the fused kernels take them; the
 * per-tensor entries of wq/wk/wv are then row views into the stack (no
 * second copy), and gate/up are "pair members": a product with either runs
 * over the pair matrix and splits the result (llm_cuda_unpair), so prefill
 * and verify keep working on the one copy. forward_span runs a decode step
 * (one token) as the fused kernels of llm_cuda_matvec_fused and the
 * split-K attention, five a layer, and replays them as one CUDA graph per
 * (span, buffers) from a small cache; the position comes from the
 * context's register, so one graph serves every position. A graph is
 * recaptured when the reservation or the seam's scratch grew (both replace
 * buffers it refers to).
 *
 * Fused prefill. A forward of more rows than LLM_CUDA_MATVEC_MAX runs, in
 * LLM_CUDA_PREFILL_FUSED mode, as the library's own prefill sequence on
 * the same fused weights (see prefill_issue): one cuBLAS product over the
 * stacked q/k/v into the scratch, RoPE + cache store in one kernel,
 * attention reading q from the q/k/v rows, the output and down products
 * adding into the residual in cuBLAS's epilogue, and the gate/up pair
 * product followed by SwiGLU over the pairs. Attention of at least
 * LLM_CUDA_PREFILL_TF32_MIN rows runs on the tensor cores: the seam
 * reserves their score room when it knows both the head count (prepare)
 * and the context (reserve), never inside a forward.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
 * products run as one product each, as in bench_llama, instead of four
 * products of 512 rows, whose 512 x 4096 outputs are too few tiles to
 * keep every multiprocessor busy. Costs 2048 x 2 bytes a column of the
 * widest matrix row (58 MB for an 8B). */
#define SEAM_STAGE_ROWS 2048
/* The tensor-core attention's score room: chunks of up to SEAM_ATTN_ROWS
 * query rows of every head against the whole reserved context (512 rows
 * is the chunk the library measured fastest for a 2048-token 8B prefill),
 * at most SEAM_ATTN_ROOM floats (256 MiB), so a long context gets smaller
 * chunks rather than a huge buffer; a context too long for one row of
 * every head keeps the tiled kernel. */
#define SEAM_ATTN_ROWS 512
#define SEAM_ATTN_ROOM ((size_t)64 << 20)

/* A layer's fused decode weights (owned), built at prepare. */
typedef struct fused_layer {
    llm_cuda_weight qkv; /* [q; k; v] rows, (n_heads + 2 n_kv_heads) head_dim */
    llm_cuda_weight gu;  /* [2 ffn_dim] rows: gate_i at 2i, up_i at 2i+1 */
    struct fused_layer *next;
} fused_layer;

typedef struct wslot {
    const void *host; /* key: the tensor's data pointer; NULL: empty */
    llm_cuda_weight w; /* owned unless view, unused for pair members */
    int view;          /* 1: w is a row view into fl->qkv (not released) */
    int half;          /* -1; 0 or 1: gate or up, rows of fl->gu */
    fused_layer *fl;   /* the layer's fused weights (wq's entry and the
                          views and pair members), else NULL */
} wslot;

/* A captured decode step: the graph and the buffers it refers to. */
#define SEAM_GRAPHS 8
typedef struct span_graph {
    llm_cuda_graph *g; /* NULL: empty slot */
    unsigned gen;      /* the seam's generation it was captured in */
    const void **key;  /* [nkey]: see span_key */
    size_t nkey;
} span_graph;

typedef struct vslot {
    const float *host; /* key; NULL: empty */
    int32_t len;
    float *dev;
} vslot;

typedef struct cuda_be {
    llm_backend base;
    llm_backend_ops ops; /* the table with this instance's name */
    llm_cuda *cu;
    char name[24];      /* "cuda:N" for markers and model info */
    int failed;         /* sticky: the first failed operation's status */
    char msg[256];      /* and its reason */
    wslot *wt;          /* [wt_cap], power of two */
    size_t wt_cap, wt_len;
    vslot *vt;          /* [vt_cap], power of two */
    size_t vt_cap, vt_len;
    double *freq_host;  /* the RoPE frequencies now on the device */
    double *freq_dev;
    int32_t freq_len;
    int32_t *ids_dev;   /* [SEAM_IDS + SEAM_ARGMAX]: token ids staged for
                           embed, then the argmax op's results */
    fused_layer *fused; /* every layer's fused weights (owned list) */
    float *scratch;     /* the pair products (and their unused halves)
                           and the decode step's q/k/v row */
    size_t scratch_len; /* floats */
    int decode;         /* LLM_CUDA_DECODE_* */
    int prefill;        /* LLM_CUDA_PREFILL_* */
    int32_t attn_heads; /* the most query heads of a prepared model */
    size_t attn_room;   /* floats of tensor-core score room reserved */
    unsigned gen;       /* bumped when buffers a graph uses are replaced */
    uint32_t seen_ctx;  /* the largest reservation so far */
    int64_t seen_width;
    span_graph graphs[SEAM_GRAPHS];
    unsigned next_graph; /* round-robin eviction */
    const void **key;   /* [key_cap] the key of the step being run */
    size_t key_cap;
    llm_cuda_decode_stats stats;
} cuda_be;

static cuda_be *cb(llm_backend *be)
{
    return (cuda_be *)(void *)be;
}

/* Records the first failure of an operation (the seam's operations cannot
 * return it; llm_cuda_backend_status does). Out-of-memory is not sticky in
 * the context, but a forward that skipped an operation is void, so the seam
 * keeps every failure. */
static void seam_fail(cuda_be *c, int rc)
{
    if (c->failed || rc == 0)
        return;
    c->failed = rc;
    snprintf(c->msg, sizeof c->msg, "%s", llm_cuda_error(c->cu));
}

static int seam_ok(cuda_be *c, int rc)
{
    seam_fail(c, rc);
    return rc == 0 && !c->failed;
}

static size_t hash_ptr(const void *p, size_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)h & (cap - 1);
}

/* ---- tables -------------------------------------------------------------- */

/* Doubles the weight table (rehashing); -1 when out of memory. */
static int wt_grow(cuda_be *c)
{
    size_t cap = c->wt_cap ? c->wt_cap * 2 : 256;
    wslot *t = calloc(cap, sizeof *t);
    if (!t)
        return -1;
    for (size_t i = 0; i < c->wt_cap; i++) {
        if (!c->wt[i].host)
            continue;
        size_t j = hash_ptr(c->wt[i].host, cap);
        while (t[j].host)
            j = (j + 1) & (cap - 1);
        t[j] = c->wt[i];
    }
    free(c->wt);
    c->wt = t;
    c->wt_cap = cap;
    return 0;
}

static wslot *wt_find(cuda_be *c, const void *host)
{
    if (!c->wt_cap)
        return NULL;
    for (size_t j = hash_ptr(host, c->wt_cap);; j = (j + 1) & (c->wt_cap - 1)) {
        if (c->wt[j].host == host)
            return &c->wt[j];
        if (!c->wt[j].host)
            return NULL;
    }
}

/* A new, empty-valued table entry for host (which is not in the table);
 * NULL when out of memory. */
static wslot *wt_insert(cuda_be *c, const void *host)
{
    if ((c->wt_len + 1) * 2 > c->wt_cap && wt_grow(c) != 0) {
        seam_fail(c, LLM_ENOMEM);
        return NULL;
    }
    size_t j = hash_ptr(host, c->wt_cap);
    while (c->wt[j].host)
        j = (j + 1) & (c->wt_cap - 1);
    memset(&c->wt[j], 0, sizeof c->wt[j]);
    c->wt[j].host = host;
    c->wt[j].half = -1;
    c->wt_len++;
    return &c->wt[j];
}

/* The device copy of t, uploaded on first sight. NULL on failure (the
 * context holds the reason). Not for pair members (see seam_matmul). */
static const llm_cuda_weight *weight_of(cuda_be *c, const llm_tensor *t)
{
    wslot *s = wt_find(c, t->data);
    if (s)
        return s->half < 0 ? &s->w : NULL;
    llm_cuda_weight w;
    if (!seam_ok(c, llm_cuda_weight_upload(c->cu, t->type, t->data, t->ne0,
                                           t->ne1, t->row_bytes, &w)))
        return NULL;
    s = wt_insert(c, t->data);
    if (!s) {
        llm_cuda_weight_release(c->cu, &w);
        return NULL;
    }
    s->w = w;
    return &s->w;
}

static int vt_grow(cuda_be *c)
{
    size_t cap = c->vt_cap ? c->vt_cap * 2 : 256;
    vslot *t = calloc(cap, sizeof *t);
    if (!t)
        return -1;
    for (size_t i = 0; i < c->vt_cap; i++) {
        if (!c->vt[i].host)
            continue;
        size_t j = hash_ptr(c->vt[i].host, cap);
        while (t[j].host)
            j = (j + 1) & (cap - 1);
        t[j] = c->vt[i];
    }
    free(c->vt);
    c->vt = t;
    c->vt_cap = cap;
    return 0;
}

/* The device copy of a host f32 vector of len floats (norm weights). */
static const float *vector_of(cuda_be *c, const float *host, int32_t len)
{
    if (c->vt_cap) {
        for (size_t j = hash_ptr(host, c->vt_cap);; j = (j + 1) & (c->vt_cap - 1)) {
            if (c->vt[j].host == host && c->vt[j].len >= len)
                return c->vt[j].dev;
            if (!c->vt[j].host)
                break;
        }
    }
    if ((c->vt_len + 1) * 2 > c->vt_cap && vt_grow(c) != 0) {
        seam_fail(c, LLM_ENOMEM);
        return NULL;
    }
    void *dev = NULL;
    if (!seam_ok(c, llm_cuda_malloc(c->cu, (size_t)len * sizeof(float), &dev)))
        return NULL;
    if (!seam_ok(c, llm_cuda_upload(c->cu, dev, host, (size_t)len * sizeof(float)))) {
        llm_cuda_mfree(c->cu, dev);
        return NULL;
    }
    size_t j = hash_ptr(host, c->vt_cap);
    while (c->vt[j].host && c->vt[j].host != host)
        j = (j + 1) & (c->vt_cap - 1);
    if (c->vt[j].host) /* a longer view of a known vector: replace it */
        llm_cuda_mfree(c->cu, c->vt[j].dev);
    else
        c->vt_len++;
    c->vt[j].host = host;
    c->vt[j].len = len;
    c->vt[j].dev = dev;
    return dev;
}

/* The device copy of the RoPE frequencies (the same for every workspace of
 * a model, so one buffer serves all; refreshed if they ever differ). */
static const double *freq_of(cuda_be *c, const double *host, int32_t len)
{
    size_t bytes = (size_t)len * sizeof(double);
    if (c->freq_dev && c->freq_len == len && memcmp(c->freq_host, host, bytes) == 0)
        return c->freq_dev;
    if (c->freq_len != len) {
        llm_cuda_mfree(c->cu, c->freq_dev);
        free(c->freq_host);
        c->freq_dev = NULL;
        c->freq_len = 0;
        c->freq_host = malloc(bytes);
        void *dev = NULL;
        if (!c->freq_host) {
            seam_fail(c, LLM_ENOMEM);
            return NULL;
        }
        if (!seam_ok(c, llm_cuda_malloc(c->cu, bytes, &dev)))
            return NULL;
        c->freq_dev = dev;
        c->freq_len = len;
    }
    memcpy(c->freq_host, host, bytes);
    if (!seam_ok(c, llm_cuda_upload(c->cu, c->freq_dev, host, bytes)))
        return NULL;
    return c->freq_dev;
}

/* ---- operations ---------------------------------------------------------- */

static void seam_destroy(llm_backend *be)
{
    cuda_be *c = cb(be);
    if (!c)
        return;
    (void)llm_cuda_bind(c->cu);
    for (size_t i = 0; i < c->wt_cap; i++)
        if (c->wt[i].host && !c->wt[i].view && c->wt[i].half < 0)
            llm_cuda_weight_release(c->cu, &c->wt[i].w);
    while (c->fused) {
        fused_layer *f = c->fused;
        c->fused = f->next;
        llm_cuda_weight_release(c->cu, &f->qkv);
        llm_cuda_weight_release(c->cu, &f->gu);
        free(f);
    }
    for (int i = 0; i < SEAM_GRAPHS; i++) {
        llm_cuda_graph_free(c->graphs[i].g);
        free(c->graphs[i].key);
    }
    free(c->key);
    llm_cuda_mfree(c->cu, c->scratch);
    for (size_t i = 0; i < c->vt_cap; i++)
        if (c->vt[i].host)
            llm_cuda_mfree(c->cu, c->vt[i].dev);
    llm_cuda_mfree(c->cu, c->freq_dev);
    llm_cuda_mfree(c->cu, c->ids_dev);
    llm_cuda_free(c->cu);
    free(c->wt);
    free(c->vt);
    free(c->freq_host);
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

static void seam_write(llm_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_be *c = cb(be);
    if (seam_ok(c, llm_cuda_bind(c->cu)))
        seam_fail(c, llm_cuda_upload(c->cu, dst, src, bytes));
}

static void seam_read(llm_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_be *c = cb(be);
    if (seam_ok(c, llm_cuda_bind(c->cu)) &&
        seam_ok(c, llm_cuda_download(c->cu, dst, src, bytes)))
        return;
    /* The results are void: make that visible rather than stale. */
    float *f = dst;
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        f[i] = NAN;
}

static void seam_embed(llm_backend *be, const llm_tensor *embd, const int32_t *ids,
                       int32_t n, float *out)
{
    cuda_be *c = cb(be);
    if (!seam_ok(c, llm_cuda_bind(c->cu)))
        return;
    const llm_cuda_weight *w = weight_of(c, embd);
    for (int32_t t0 = 0; w && t0 < n; t0 += SEAM_IDS) {
        int32_t nt = n - t0 < SEAM_IDS ? n - t0 : SEAM_IDS;
        if (!seam_ok(c, llm_cuda_upload(c->cu, c->ids_dev, ids + t0,
                                        (size_t)nt * sizeof *ids)) ||
            !seam_ok(c, llm_cuda_embed(c->cu, w, c->ids_dev, nt,
                                       out + (size_t)t0 * embd->ne0)))
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

/* gate and/or up of a pair matrix: one product over the interleaved rows
 * per slice of activation rows, split into y[0] (gate) and y[1] (up); a
 * NULL half goes to the scratch's tail. */
static void pair_matmul(cuda_be *c, const llm_cuda_weight *gu, const float *x, int32_t n,
                        float *gate, float *up)
{
    int64_t half = gu->rows / 2;
    int32_t k = pair_slice(c, gu->rows);
    float *prod = c->scratch, *sink = c->scratch + (size_t)k * (size_t)gu->rows;
    for (int32_t r0 = 0; r0 < n && !c->failed; r0 += k) {
        int32_t nr = n - r0 < k ? n - r0 : k;
        size_t off = (size_t)r0 * (size_t)half;
        if (!seam_ok(c, llm_cuda_matmul(c->cu, gu, x + (size_t)r0 * (size_t)gu->cols, nr,
                                        prod)))
            return;
        seam_fail(c, llm_cuda_unpair(c->cu, gate ? gate + off : sink, up ? up + off : sink,
                                     prod, (size_t)nr * (size_t)half));
    }
}

static void seam_matmul(llm_backend *be, const llm_tensor *w, const float *x,
                        int32_t n, float *y)
{
    cuda_be *c = cb(be);
    if (!seam_ok(c, llm_cuda_bind(c->cu)))
        return;
    wslot *s = wt_find(c, w->data);
    if (s && s->half >= 0) {
        pair_matmul(c, &s->fl->gu, x, n, s->half == 0 ? y : NULL, s->half == 1 ? y : NULL);
        return;
    }
    const llm_cuda_weight *dw = weight_of(c, w);
    if (dw)
        seam_fail(c, llm_cuda_matmul(c->cu, dw, x, n, y));
}

/* Products sharing x: gate and up of one pair in one pass over the pair
 * matrix; everything else one product each (q/k/v are row views of one
 * matrix, each read once either way). */
static void seam_matmul_many(llm_backend *be, const llm_tensor *const *w, int32_t count,
                             const float *x, int32_t n, float *const *y)
{
    cuda_be *c = cb(be);
    if (count == 2 && seam_ok(c, llm_cuda_bind(c->cu))) {
        wslot *a = wt_find(c, w[0]->data), *b = wt_find(c, w[1]->data);
        if (a && b && a->fl && a->fl == b->fl && a->half == 0 && b->half == 1) {
            pair_matmul(c, &a->fl->gu, x, n, y[0], y[1]);
            return;
        }
    }
    for (int32_t i = 0; i < count; i++)
        seam_matmul(be, w[i], x, n, y[i]);
}

static void seam_rmsnorm(llm_backend *be, float *y, const float *x,
                         const float *weight, int32_t n, int32_t dim, float eps)
{
    cuda_be *c = cb(be);
    if (!seam_ok(c, llm_cuda_bind(c->cu)))
        return;
    const float *dw = vector_of(c, weight, dim);
    if (dw)
        seam_fail(c, llm_cuda_rmsnorm(c->cu, y, x, dw, n, dim, eps));
}

static void seam_rope(llm_backend *be, float *x, int32_t n, int32_t n_heads,
                      int32_t stride, uint32_t pos0, const llm_rope *r)
{
    cuda_be *c = cb(be);
    if (!seam_ok(c, llm_cuda_bind(c->cu)))
        return;
    const double *f = freq_of(c, r->inv_freq, r->head_dim / 2);
    llm_cuda_positions pos = {pos0, NULL};
    if (f)
        seam_fail(c, llm_cuda_rope(c->cu, x, n, n_heads, stride, pos, f,
                                   r->scale, r->head_dim));
}

static void seam_attention(llm_backend *be, const llm_attn *a)
{
    cuda_be *c = cb(be);
    if (!seam_ok(c, llm_cuda_bind(c->cu)))
        return;
    llm_cuda_attn d = {a->q, a->k, a->v, a->out, a->n, {a->pos0, NULL},
                       a->n_heads, a->n_kv_heads, a->head_dim, 0};
    seam_fail(c, llm_cuda_attention(c->cu, &d));
}

static void seam_swiglu(llm_backend *be, float *gate, const float *up, size_t len)
{
    cuda_be *c = cb(be);
    if (seam_ok(c, llm_cuda_bind(c->cu)))
        seam_fail(c, llm_cuda_swiglu(c->cu, gate, up, len));
}

static void seam_add(llm_backend *be, float *y, const float *x, size_t len)
{
    cuda_be *c = cb(be);
    if (seam_ok(c, llm_cuda_bind(c->cu)))
        seam_fail(c, llm_cuda_add(c->cu, y, x, len));
}

/* ---- fused decode step --------------------------------------------------- */

/* Whether the fused matrix-vector kernel takes w (its vector layout). */
static int mv_fusable(const llm_cuda_weight *w)
{
    int chunk = w->type == LLM_TYPE_F32 ? 4 : w->type == LLM_TYPE_Q8_0 ? 16 : 8;
    return w->cols % chunk == 0 && ((uintptr_t)w->data & 15) == 0;
}

/* One layer's device pieces for the fused step, from the tables (the
 * matrices copied: a table entry moves when the table grows). */
typedef struct step_layer {
    const fused_layer *fl;
    llm_cuda_weight wo, down;
    const float *attn_norm, *ffn_norm;
} step_layer;

/* Looks up layer L's pieces (uploading a norm or matrix that is missing,
 * which prepare makes impossible for a prepared span); 0 when the layer
 * has no fused weights. */
static int layer_resolve(cuda_be *c, const llm_model *m, const llm_layer *L, step_layer *sl)
{
    wslot *q = wt_find(c, L->wq.data);
    if (!q || !q->fl)
        return 0;
    sl->fl = q->fl;
    const llm_cuda_weight *w = weight_of(c, &L->wo);
    if (!w)
        return 0;
    sl->wo = *w;
    if (!(w = weight_of(c, &L->w_down)))
        return 0;
    sl->down = *w;
    sl->attn_norm = vector_of(c, L->attn_norm, m->hp.dim);
    sl->ffn_norm = vector_of(c, L->ffn_norm, m->hp.dim);
    return sl->attn_norm && sl->ffn_norm;
}

/* layer_resolve for the decode step, whose matrix-vector kernel must also
 * take the output and down matrices. */
static int step_resolve(cuda_be *c, const llm_model *m, const llm_layer *L, step_layer *sl)
{
    return layer_resolve(c, m, L, sl) && mv_fusable(&sl->wo) && mv_fusable(&sl->down);
}

static int ends_model(const llm_model *m, const llm_span *span)
{
    return span->last == m->hp.n_layers - 1;
}

/* Whether every layer of the span (and the head's pieces) resolve, for the
 * decode step (step 1) or the prefill (step 0). Run before anything is
 * issued or captured: a capture must not upload. */
static int span_fusable(cuda_be *c, const llm_model *m, const llm_span *span, int step)
{
    step_layer sl;
    for (int32_t l = span->first; l <= span->last; l++)
        if (!(step ? step_resolve : layer_resolve)(c, m, &m->layers[l], &sl))
            return 0;
    if (ends_model(m, span) && (!weight_of(c, &m->output) ||
                                !vector_of(c, m->out_norm, m->hp.dim)))
        return 0;
    return !c->failed;
}

static void lost_weights(cuda_be *c, int32_t l)
{
    /* span_fusable said yes before anything was issued. */
    if (!c->failed) {
        c->failed = LLM_EBACKEND;
        snprintf(c->msg, sizeof c->msg, "fused forward: layer %d lost its weights", (int)l);
    }
}

/* Issues one decode step of the span: five kernels a layer, then the head
 * (RMSNorm folded into its product when the kernel takes the matrix).
 * Stops at the first failure (recorded). */
static void step_issue(cuda_be *c, const llm_model *m, const llm_span *span,
                       llm_workspace *ws, const double *freq, llm_cuda_positions pos)
{
    const llm_hparams *hp = &m->hp;
    int32_t qkv_w = (hp->n_heads + 2 * hp->n_kv_heads) * hp->head_dim;
    llm_cuda *cu = c->cu;
    float *qkv = c->scratch; /* [qkv_w]: q, k, v of the token, rotated */
    for (int32_t l = span->first; l <= span->last && !c->failed; l++) {
        int32_t i = l - span->first;
        step_layer sl;
        if (!step_resolve(c, m, &m->layers[l], &sl)) {
            lost_weights(c, l);
            return;
        }
        llm_cuda_rope_store rs = {pos, freq, hp->rope_scale, hp->n_heads, hp->n_kv_heads,
                                  hp->head_dim, span->k[i], span->v[i]};
        llm_cuda_mv_fuse fq = {LLM_CUDA_MV_NORM | LLM_CUDA_MV_ROPE_STORE, sl.attn_norm,
                               hp->norm_eps, &rs};
        llm_cuda_mv_fuse acc = {LLM_CUDA_MV_ACCUMULATE, NULL, 0.0f, NULL};
        llm_cuda_mv_fuse fg = {LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS, sl.ffn_norm,
                               hp->norm_eps, NULL};
        llm_cuda_attn a = {qkv, span->k[i], span->v[i], ws->att, 1, pos, hp->n_heads,
                           hp->n_kv_heads, hp->head_dim, qkv_w};
        if (!seam_ok(c, llm_cuda_matvec_fused(cu, &sl.fl->qkv, ws->x, qkv, &fq)) ||
            !seam_ok(c, llm_cuda_attention(cu, &a)) ||
            !seam_ok(c, llm_cuda_matvec_fused(cu, &sl.wo, ws->att, ws->x, &acc)) ||
            !seam_ok(c, llm_cuda_matvec_fused(cu, &sl.fl->gu, ws->x, ws->hb, &fg)) ||
            !seam_ok(c, llm_cuda_matvec_fused(cu, &sl.down, ws->hb, ws->x, &acc)))
            return;
    }
    if (!ends_model(m, span) || c->failed)
        return;
    const llm_cuda_weight *out = weight_of(c, &m->output);
    const float *norm = vector_of(c, m->out_norm, hp->dim);
    if (!out || !norm)
        return;
    if (mv_fusable(out)) {
        llm_cuda_mv_fuse fo = {LLM_CUDA_MV_NORM, norm, hp->norm_eps, NULL};
        seam_fail(c, llm_cuda_matvec_fused(cu, out, ws->x, ws->logits, &fo));
    } else if (seam_ok(c, llm_cuda_rmsnorm(cu, ws->xb, ws->x, norm, 1, hp->dim, hp->norm_eps))) {
        seam_fail(c, llm_cuda_matmul(cu, out, ws->xb, 1, ws->logits));
    }
}

/* ---- fused prefill -------------------------------------------------------- */

/* Layer l's attention block for in->n rows: x [n][dim] -> x += att Wo^T.
 * q/k/v rows ([rows][qkv_w]: q, k, v of each row) go through the scratch
 * in slices of the rows it holds (3584 for the 8B shape, so a 2048-token
 * prompt is one slice); a slice's attention reads the keys the earlier
 * slices stored, so slicing changes no result. */
static int prefill_attention(cuda_be *c, const llm_model *m, const llm_span *span,
                             llm_workspace *ws, const double *freq,
                             const llm_forward_in *in, int32_t l, const step_layer *sl)
{
    const llm_hparams *hp = &m->hp;
    llm_cuda *cu = c->cu;
    int32_t n = in->n, i = l - span->first, hd = hp->head_dim;
    int32_t q_dim = hp->n_heads * hd, qkv_w = (hp->n_heads + 2 * hp->n_kv_heads) * hd;
    size_t fit = c->scratch_len / (size_t)qkv_w; /* >= 1: scratch_grow */
    int32_t k = fit < (size_t)n ? (int32_t)fit : n;
    if (!seam_ok(c, llm_cuda_rmsnorm(cu, ws->xb, ws->x, sl->attn_norm, n, hp->dim,
                                     hp->norm_eps)))
        return -1;
    for (int32_t r0 = 0; r0 < n; r0 += k) {
        int32_t nr = n - r0 < k ? n - r0 : k;
        llm_cuda_positions pos = {in->pos0 + (uint32_t)r0, NULL};
        llm_cuda_attn a = {c->scratch, span->k[i], span->v[i],
                           ws->att + (size_t)r0 * (size_t)q_dim, nr, pos, hp->n_heads,
                           hp->n_kv_heads, hd, qkv_w};
        if (!seam_ok(c, llm_cuda_matmul(cu, &sl->fl->qkv, ws->xb + (size_t)r0 * hp->dim, nr,
                                        c->scratch)) ||
            !seam_ok(c, llm_cuda_rope_qkv_store(cu, c->scratch, nr, qkv_w, hp->n_heads,
                                                hp->n_kv_heads, hd, pos, freq,
                                                hp->rope_scale, span->k[i], span->v[i])) ||
            !seam_ok(c, llm_cuda_attention(cu, &a)))
            return -1;
    }
    return seam_ok(c, llm_cuda_matmul_acc(cu, &sl->wo, ws->att, n, ws->x)) ? 0 : -1;
}

/* Layer l's feed-forward block for in->n rows: x += swiglu(xb Wgu^T) Wd^T.
 * The interleaved gate/up products ([rows][2 ffn]) go through the scratch
 * in slices of pair_slice rows, SwiGLU writing each slice's [rows][ffn]
 * into ws->hb. */
static int prefill_ffn(cuda_be *c, const llm_model *m, llm_workspace *ws, int32_t n,
                       const step_layer *sl)
{
    const llm_hparams *hp = &m->hp;
    llm_cuda *cu = c->cu;
    const llm_cuda_weight *gu = &sl->fl->gu;
    int64_t half = gu->rows / 2;
    int32_t k = pair_slice(c, gu->rows);
    if (!seam_ok(c, llm_cuda_rmsnorm(cu, ws->xb, ws->x, sl->ffn_norm, n, hp->dim,
                                     hp->norm_eps)))
        return -1;
    for (int32_t r0 = 0; r0 < n; r0 += k) {
        int32_t nr = n - r0 < k ? n - r0 : k;
        if (!seam_ok(c, llm_cuda_matmul(cu, gu, ws->xb + (size_t)r0 * hp->dim, nr,
                                        c->scratch)) ||
            !seam_ok(c, llm_cuda_swiglu_pairs(cu, ws->hb + (size_t)r0 * (size_t)half,
                                              c->scratch, (size_t)nr * (size_t)half)))
            return -1;
    }
    return seam_ok(c, llm_cuda_matmul_acc(cu, &sl->down, ws->hb, n, ws->x)) ? 0 : -1;
}

/* Issues a multi-row forward of the span (bench_llama's prefill sequence,
 * see the top), then the head as forward.c's head() runs it: the last row
 * (LAST) or every row (ALL) normed and multiplied. Stops at the first
 * failure (recorded). */
static void prefill_issue(cuda_be *c, const llm_model *m, const llm_span *span,
                          llm_workspace *ws, const double *freq, const llm_forward_in *in)
{
    const llm_hparams *hp = &m->hp;
    for (int32_t l = span->first; l <= span->last && !c->failed; l++) {
        step_layer sl;
        if (!layer_resolve(c, m, &m->layers[l], &sl)) {
            lost_weights(c, l);
            return;
        }
        if (prefill_attention(c, m, span, ws, freq, in, l, &sl) != 0 ||
            prefill_ffn(c, m, ws, in->n, &sl) != 0)
            return;
    }
    if (!ends_model(m, span) || c->failed)
        return;
    const llm_cuda_weight *out = weight_of(c, &m->output);
    const float *norm = vector_of(c, m->out_norm, hp->dim);
    int32_t rows = in->logits == LLM_LOGITS_ALL ? in->n : 1;
    const float *src = ws->x + (size_t)(in->n - rows) * hp->dim;
    if (out && norm &&
        seam_ok(c, llm_cuda_rmsnorm(c->cu, ws->xb, src, norm, rows, hp->dim, hp->norm_eps)))
        seam_fail(c, llm_cuda_matmul(c->cu, out, ws->xb, rows, ws->logits));
}

/* forward_span for more than LLM_CUDA_MATVEC_MAX rows: 1 when it ran (or
 * the forward is void), 0 to leave the span to the op-by-op path. */
static int prefill_span(cuda_be *c, const llm_model *m, llm_span *span, llm_workspace *ws,
                        const llm_forward_in *in)
{
    if (c->prefill != LLM_CUDA_PREFILL_FUSED || !c->fused)
        return 0;
    if (!seam_ok(c, llm_cuda_bind(c->cu)))
        return 1;
    if (!span_fusable(c, m, span, 0))
        return c->failed != 0;
    const double *freq = freq_of(c, ws->inv_freq, m->hp.head_dim / 2);
    if (freq) {
        prefill_issue(c, m, span, ws, freq, in);
        c->stats.prefills++;
    }
    return 1;
}

/* The buffers a captured step refers to besides the seam's own: the span
 * (layers, caches) and the workspace. A graph replays only for the same
 * key; buffers freed and allocated again at the same addresses are the
 * same buffers to it. Returns the key's length, 0 when out of memory. */
static size_t span_key(cuda_be *c, const llm_model *m, const llm_span *span,
                       const llm_workspace *ws)
{
    size_t nl = (size_t)(span->last - span->first + 1), n = 8 + 2 * nl;
    if (n > c->key_cap) { /* grows at a span's first step only */
        const void **k = realloc(c->key, n * sizeof *k);
        if (!k)
            return 0;
        c->key = k;
        c->key_cap = n;
    }
    const void **k = c->key;
    k[0] = m;
    k[1] = (const void *)(uintptr_t)span->first;
    k[2] = (const void *)(uintptr_t)span->last;
    k[3] = ws->x;
    k[4] = ws->xb;
    k[5] = ws->att;
    k[6] = ws->hb;
    k[7] = ws->logits;
    for (size_t i = 0; i < nl; i++) {
        k[8 + i] = span->k[i];
        k[8 + nl + i] = span->v[i];
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

/* Captures the step into a cache slot (evicting round-robin); NULL on
 * failure (recorded). */
static span_graph *graph_capture(cuda_be *c, const llm_model *m, const llm_span *span,
                                 llm_workspace *ws, const double *freq, size_t nkey)
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
    llm_cuda_positions pos = {0, llm_cuda_pos(c->cu)};
    if (!seam_ok(c, llm_cuda_graph_begin(c->cu)))
        return NULL;
    step_issue(c, m, span, ws, freq, pos);
    llm_cuda_graph *cg = NULL;
    int rc = llm_cuda_graph_end(c->cu, &cg);
    if (!seam_ok(c, rc)) { /* a graph of a failed step is never kept */
        llm_cuda_graph_free(cg);
        return NULL;
    }
    memcpy(g->key, c->key, nkey * sizeof *g->key);
    g->nkey = nkey;
    g->gen = c->gen;
    g->g = cg;
    c->stats.captures++;
    return g;
}

static int seam_forward_span(llm_backend *be, const llm_model *m, llm_span *span,
                             llm_workspace *ws, const llm_forward_in *in)
{
    cuda_be *c = cb(be);
    if (in->n > LLM_CUDA_MATVEC_MAX)
        return prefill_span(c, m, span, ws, in);
    if (c->decode == LLM_CUDA_DECODE_OPS || in->n != 1 || !c->fused)
        return 0;
    if (!seam_ok(c, llm_cuda_bind(c->cu)))
        return 1; /* the forward is void either way; issue nothing more */
    const double *freq = freq_of(c, ws->inv_freq, m->hp.head_dim / 2);
    if (!freq)
        return 1;
    size_t nkey = 0;
    if (c->decode == LLM_CUDA_DECODE_GRAPH) {
        nkey = span_key(c, m, span, ws);
        if (!nkey) {
            seam_fail(c, LLM_ENOMEM);
            return 1;
        }
        span_graph *g = graph_find(c, nkey);
        if (g) {
            if (seam_ok(c, llm_cuda_pos_set(c->cu, in->pos0)))
                seam_fail(c, llm_cuda_graph_launch(c->cu, g->g));
            c->stats.replays++;
            return 1;
        }
    }
    if (!span_fusable(c, m, span, 1)) {
        c->stats.declined++;
        return c->failed != 0;
    }
    if (c->decode == LLM_CUDA_DECODE_FUSED) {
        /* The graph's very launches, position register included, issued
         * directly: the two modes give the same bits. */
        llm_cuda_positions pos = {0, llm_cuda_pos(c->cu)};
        if (seam_ok(c, llm_cuda_pos_set(c->cu, in->pos0)))
            step_issue(c, m, span, ws, freq, pos);
        c->stats.direct++;
        return 1;
    }
    span_graph *g = graph_capture(c, m, span, ws, freq, nkey);
    if (g && seam_ok(c, llm_cuda_pos_set(c->cu, in->pos0)))
        seam_fail(c, llm_cuda_graph_launch(c->cu, g->g));
    c->stats.replays++;
    return 1;
}

/* The greedy tokens of logits rows on the device; only their 4 bytes each
 * are read back (the download waits for the forward before it). */
static int seam_argmax(llm_backend *be, const float *logits, int32_t rows, int32_t n,
                       int32_t *out)
{
    cuda_be *c = cb(be);
    int32_t *tok_dev = c->ids_dev + SEAM_IDS;
    if (!seam_ok(c, llm_cuda_bind(c->cu)))
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
    .reserve = seam_reserve,
    .alloc = seam_alloc,
    .free = seam_free,
    .write = seam_write,
    .read = seam_read,
    .embed = seam_embed,
    .matmul = seam_matmul,
    .supports_type = llm_cuda_backend_supports_type,
    .rmsnorm = seam_rmsnorm,
    .rope = seam_rope,
    .attention = seam_attention,
    .swiglu = seam_swiglu,
    .add = seam_add,
    .matmul_many = seam_matmul_many,
    .forward_span = seam_forward_span,
    .argmax = seam_argmax,
};

/* ---- construction -------------------------------------------------------- */

/* "cuda" -> 0, "cuda:N" -> N; -1 when malformed. */
static int parse_device(const char *name)
{
    if (strcmp(name, "cuda") == 0)
        return 0;
    if (strncmp(name, "cuda:", 5) != 0 || name[5] < '0' || name[5] > '9')
        return -1;
    char *end = NULL;
    errno = 0;
    long v = strtol(name + 5, &end, 10);
    if (errno || *end != '\0' || v < 0 || v > 1023)
        return -1;
    return (int)v;
}

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

/* PHASEMARK_CUDA_PREFILL=ops|fused; anything else is the default. */
static int prefill_mode_env(void)
{
    const char *e = getenv("PHASEMARK_CUDA_PREFILL");
    return e && strcmp(e, "ops") == 0 ? LLM_CUDA_PREFILL_OPS : LLM_CUDA_PREFILL_FUSED;
}

int llm_cuda_backend_create(const char *name, llm_backend **out, char *err,
                            size_t errlen)
{
    if (!out)
        return LLM_EINVAL;
    *out = NULL;
    int dev = name ? parse_device(name) : -1;
    if (dev < 0) {
        snprintf(err, errlen, "backend '%s': expected cuda or cuda:N",
                 name ? name : "(null)");
        return LLM_EINVAL;
    }
    cuda_be *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "cuda backend: out of memory");
        return LLM_ENOMEM;
    }
    int rc = llm_cuda_create(dev, &c->cu, err, errlen);
    void *ids = NULL;
    c->prefill = prefill_mode_env();
    if (rc == 0)
        rc = apply_prefill_mode(c);
    if (rc == 0)
        rc = llm_cuda_malloc(c->cu, (SEAM_IDS + SEAM_ARGMAX) * sizeof(int32_t), &ids);
    if (rc) {
        if (c->cu)
            snprintf(err, errlen, "cuda:%d: %s", dev, llm_cuda_error(c->cu));
        llm_cuda_free(c->cu);
        free(c);
        return rc == LLM_ENOMEM ? LLM_ENOMEM : LLM_EBACKEND;
    }
    c->ids_dev = ids;
    c->decode = decode_mode_env();
    snprintf(c->name, sizeof c->name, "cuda:%d", dev);
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

static int prepare_tensor(cuda_be *c, const llm_tensor *t)
{
    if (!t->data)
        return 0;
    wslot *s = wt_find(c, t->data);
    if (s && s->half >= 0) /* a pair member: resident as the pair */
        return 0;
    return weight_of(c, t) ? 0 : -1;
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
static int layer_fusable(const llm_model *m, const llm_layer *L)
{
    const llm_hparams *hp = &m->hp;
    uint32_t t = L->wq.type;
    int type_ok = t == LLM_TYPE_F32 || t == LLM_TYPE_F16 || t == LLM_TYPE_BF16 ||
                  t == LLM_TYPE_Q8_0 || t == LLM_TYPE_Q4_0;
    int64_t qd = (int64_t)hp->n_heads * hp->head_dim, kd = (int64_t)hp->n_kv_heads * hp->head_dim;
    return type_ok && L->wk.type == t && L->wv.type == t && L->w_gate.type == t &&
           L->w_up.type == t && hp->dim % 8 == 0 && hp->head_dim % 2 == 0 &&
           hp->head_dim <= LLM_CUDA_MAX_HEAD_DIM && L->wq.ne0 == hp->dim &&
           L->wk.ne0 == hp->dim && L->wv.ne0 == hp->dim && L->w_gate.ne0 == hp->dim &&
           L->w_up.ne0 == hp->dim && L->wq.ne1 == qd && L->wk.ne1 == kd && L->wv.ne1 == kd &&
           L->w_gate.ne1 == L->w_up.ne1 && L->w_gate.ne1 > 0;
}

/* Uploads a layer's q/k/v stacked and gate/up interleaved and enters the
 * per-tensor views and pair members. 1: fused (now or before), 0: not
 * fusable or already resident unfused (left as it is), -1: failure. */
static int fuse_layer(cuda_be *c, const llm_model *m, const llm_layer *L)
{
    wslot *q = wt_find(c, L->wq.data);
    if (q)
        return q->fl != NULL;
    if (!layer_fusable(m, L) || wt_find(c, L->wk.data) || wt_find(c, L->wv.data) ||
        wt_find(c, L->w_gate.data) || wt_find(c, L->w_up.data))
        return 0;
    fused_layer *f = calloc(1, sizeof *f);
    if (!f) {
        seam_fail(c, LLM_ENOMEM);
        return -1;
    }
    const llm_tensor *qkv[3] = {&L->wq, &L->wk, &L->wv}, *gu[2] = {&L->w_gate, &L->w_up};
    llm_cuda_weight_part pq[3], pg[2];
    for (int i = 0; i < 3; i++)
        pq[i] = (llm_cuda_weight_part){qkv[i]->data, qkv[i]->ne1, qkv[i]->row_bytes};
    for (int i = 0; i < 2; i++)
        pg[i] = (llm_cuda_weight_part){gu[i]->data, gu[i]->ne1, gu[i]->row_bytes};
    if (!seam_ok(c, llm_cuda_weight_upload_parts(c->cu, L->wq.type, L->wq.ne0, pq, 3, 0,
                                                 &f->qkv)) ||
        !seam_ok(c, llm_cuda_weight_upload_parts(c->cu, L->w_gate.type, L->w_gate.ne0, pg, 2,
                                                 1, &f->gu)) ||
        scratch_grow(c, f->gu.rows, f->qkv.rows) != 0) {
        llm_cuda_weight_release(c->cu, &f->qkv);
        llm_cuda_weight_release(c->cu, &f->gu);
        free(f);
        return -1;
    }
    f->next = c->fused;
    c->fused = f;
    int64_t row0 = 0;
    for (int i = 0; i < 3; i++) {
        wslot *s = wt_insert(c, qkv[i]->data);
        if (!s)
            return -1; /* f stays on the list, released at destroy */
        s->w = llm_cuda_weight_rows(&f->qkv, row0, qkv[i]->ne1);
        s->view = 1;
        s->fl = f;
        row0 += qkv[i]->ne1;
    }
    for (int i = 0; i < 2; i++) {
        wslot *s = wt_insert(c, gu[i]->data);
        if (!s)
            return -1;
        s->half = i;
        s->fl = f;
    }
    c->stats.fused_layers++;
    return 1;
}

static int prepare_layer(cuda_be *c, const llm_model *m, const llm_layer *L)
{
    if (fuse_layer(c, m, L) < 0)
        return -1;
    const llm_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo,
                              &L->w_gate, &L->w_up, &L->w_down};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        if (prepare_tensor(c, ts[i]) != 0)
            return -1;
    if (!vector_of(c, L->attn_norm, m->hp.dim) || !vector_of(c, L->ffn_norm, m->hp.dim))
        return -1;
    return 0;
}

int llm_cuda_backend_prepare(llm_backend *be, const llm_model *m, int32_t first,
                             int32_t last, char *err, size_t errlen)
{
    if (!is_cuda(be) || !m || first < 0 || last < first ||
        last >= m->hp.n_layers) {
        snprintf(err, errlen, "cuda prepare: invalid arguments");
        return LLM_EINVAL;
    }
    cuda_be *c = cb(be);
    int rc = c->failed ? c->failed : llm_cuda_bind(c->cu);
    if (rc == 0 && first == 0 && prepare_tensor(c, &m->tok_embd) != 0)
        rc = -1;
    for (int32_t l = first; rc == 0 && l <= last; l++)
        if (prepare_layer(c, m, &m->layers[l]) != 0)
            rc = -1;
    if (rc == 0 && last == m->hp.n_layers - 1 &&
        (prepare_tensor(c, &m->output) != 0 || !vector_of(c, m->out_norm, m->hp.dim)))
        rc = -1;
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
    return 0;
}

int llm_cuda_backend_status(llm_backend *be, char *err, size_t errlen)
{
    if (!is_cuda(be))
        return LLM_EINVAL;
    cuda_be *c = cb(be);
    if (c->failed && err && errlen)
        snprintf(err, errlen, "%s: %s", c->name, c->msg);
    return c->failed;
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
