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
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_backend.h"
#include "quant.h"

/* Token ids staged per embed call (longer batches are done in pieces). */
#define SEAM_IDS 4096
/* Activation rows cuBLAS stages at a time (see llm_cuda_reserve). */
#define SEAM_GEMM_ROWS 512

typedef struct wslot {
    const void *host; /* key: the tensor's data pointer; NULL: empty */
    llm_cuda_weight w;
} wslot;

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
    int32_t *ids_dev;   /* [SEAM_IDS] */
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

/* The device copy of t, uploaded on first sight. NULL on failure (the
 * context holds the reason). */
static const llm_cuda_weight *weight_of(cuda_be *c, const llm_tensor *t)
{
    wslot *s = wt_find(c, t->data);
    if (s)
        return &s->w;
    if ((c->wt_len + 1) * 2 > c->wt_cap && wt_grow(c) != 0) {
        seam_fail(c, LLM_ENOMEM);
        return NULL;
    }
    llm_cuda_weight w;
    if (!seam_ok(c, llm_cuda_weight_upload(c->cu, t->type, t->data, t->ne0,
                                           t->ne1, t->row_bytes, &w)))
        return NULL;
    size_t j = hash_ptr(t->data, c->wt_cap);
    while (c->wt[j].host)
        j = (j + 1) & (c->wt_cap - 1);
    c->wt[j].host = t->data;
    c->wt[j].w = w;
    c->wt_len++;
    return &c->wt[j].w;
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
        if (c->wt[i].host)
            llm_cuda_weight_release(c->cu, &c->wt[i].w);
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

static int seam_reserve(llm_backend *be, uint32_t n_ctx, int64_t max_width)
{
    cuda_be *c = cb(be);
    if (llm_cuda_bind(c->cu) != 0)
        return LLM_EBACKEND;
    /* Heads are at least 2 wide (RoPE pairs), so width/2 bounds the head
     * count whatever the model (stories260K has 8-wide heads). */
    int64_t heads = max_width / 2 > 0 ? max_width / 2 : 1;
    int rc = llm_cuda_reserve(c->cu, SEAM_GEMM_ROWS, max_width, n_ctx,
                              (int32_t)(heads < 65536 ? heads : 65536));
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

static void seam_matmul(llm_backend *be, const llm_tensor *w, const float *x,
                        int32_t n, float *y)
{
    cuda_be *c = cb(be);
    if (!seam_ok(c, llm_cuda_bind(c->cu)))
        return;
    const llm_cuda_weight *dw = weight_of(c, w);
    if (dw)
        seam_fail(c, llm_cuda_matmul(c->cu, dw, x, n, y));
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
    .rmsnorm = seam_rmsnorm,
    .rope = seam_rope,
    .attention = seam_attention,
    .swiglu = seam_swiglu,
    .add = seam_add,
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
    if (rc == 0)
        rc = llm_cuda_malloc(c->cu, SEAM_IDS * sizeof(int32_t), &ids);
    if (rc) {
        if (c->cu)
            snprintf(err, errlen, "cuda:%d: %s", dev, llm_cuda_error(c->cu));
        llm_cuda_free(c->cu);
        free(c);
        return rc == LLM_ENOMEM ? LLM_ENOMEM : LLM_EBACKEND;
    }
    c->ids_dev = ids;
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
    return t->data && !weight_of(c, t) ? -1 : 0;
}

static int prepare_layer(cuda_be *c, const llm_model *m, const llm_layer *L)
{
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
