/* cuda_ctx.cu — the context: device selection, stream, cuBLAS handle,
 * sticky errors, scratch reservation, memory, the position register, graphs
 * and timing events.
 *
 * The stream is non-blocking so that nothing else in the process (another
 * context, a library on the legacy default stream) serializes with it. All
 * scratch lives here and is sized by llm_cuda_reserve, which is the only
 * place besides setup-time weight uploads that allocates device memory.
 */
#include "cuda_internal.cuh"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


int llm__cuda_fail(llm_cuda *c, int status, int sticky, const char *fmt, ...)
{
    if (!c || c->status)
        return c && c->status ? c->status : status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    if (sticky)
        c->status = status;
    return status;
}

int llm__cuda_rt_fail(llm_cuda *c, cudaError_t e, const char *what)
{
    (void)cudaGetLastError(); /* clear a non-sticky launch error */
    int oom = e == cudaErrorMemoryAllocation;
    /* A failed allocation leaves the context usable; anything else
     * (a fault, an invalid launch, a lost device) poisons the stream. */
    return llm__cuda_fail(c, oom ? LLM_ENOMEM : LLM_EBACKEND, !oom,
                          "%s: %s (%s)", what, cudaGetErrorString(e),
                          cudaGetErrorName(e));
}

int llm__cuda_blas_fail(llm_cuda *c, cublasStatus_t s, const char *what)
{
    int oom = s == CUBLAS_STATUS_ALLOC_FAILED;
    return llm__cuda_fail(c, oom ? LLM_ENOMEM : LLM_EBACKEND, !oom,
                          "%s: cuBLAS status %d", what, (int)s);
}

static void put_err(char *err, size_t errlen, const char *what, cudaError_t e)
{
    if (err && errlen)
        snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(e));
}

int llm_cuda_device_count(int *count, char *err, size_t errlen)
{
    if (!count)
        return LLM_EINVAL;
    *count = 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        put_err(err, errlen, "cudaGetDeviceCount", e);
        return 0;
    }
    *count = n;
    if (err && errlen)
        err[0] = '\0';
    return 0;
}

static int create_handles(llm_cuda *c, char *err, size_t errlen)
{
    cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        put_err(err, errlen, "cudaStreamCreateWithFlags", e);
        return LLM_EBACKEND;
    }
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublasCreate failed on device %d", c->device);
        return LLM_EBACKEND;
    }
    for (int i = 0; i < LLM_CUDA_EVENTS; i++) {
        e = cudaEventCreate(&c->ev[i]);
        if (e != cudaSuccess) {
            put_err(err, errlen, "cudaEventCreate", e);
            return LLM_EBACKEND;
        }
    }
    return 0;
}

static int create_buffers(llm_cuda *c, char *err, size_t errlen)
{
    cudaError_t e = cudaMalloc((void **)&c->d_pos, sizeof(uint32_t));
    if (e == cudaSuccess)
        e = cudaMemset(c->d_pos, 0, sizeof(uint32_t));
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&c->chain_bar, 2 * sizeof(unsigned));
    if (e == cudaSuccess)
        e = cudaMemset(c->chain_bar, 0, 2 * sizeof(unsigned));
    if (e == cudaSuccess)
        e = cudaMalloc(&c->blas_ws, LLM_CUDA_BLAS_WS_BYTES);
    if (e != cudaSuccess) {
        put_err(err, errlen, "cudaMalloc (context)", e);
        return e == cudaErrorMemoryAllocation ? LLM_ENOMEM : LLM_EBACKEND;
    }
    /* A fixed workspace keeps cuBLAS from allocating inside a capture. */
    if (cublasSetWorkspace(c->blas, c->blas_ws, LLM_CUDA_BLAS_WS_BYTES) !=
        CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublasSetWorkspace failed");
        return LLM_EBACKEND;
    }
    return 0;
}

int llm_cuda_create(int device, llm_cuda **out, char *err, size_t errlen)
{
    if (!out)
        return LLM_EINVAL;
    *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    int n = 0;
    llm_cuda_device_count(&n, err, errlen);
    if (device < 0 || device >= n) {
        if (err && errlen && n > 0)
            snprintf(err, errlen, "cuda:%d: no such device (%d visible)", device, n);
        else if (err && errlen && !err[0])
            snprintf(err, errlen, "cuda:%d: no CUDA device", device);
        return LLM_EBACKEND;
    }
    llm_cuda *c = (llm_cuda *)calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return LLM_ENOMEM;
    }
    c->device = device;
    cudaDeviceProp prop;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) {
        put_err(err, errlen, "cudaSetDevice", e);
        free(c);
        return LLM_EBACKEND;
    }
    snprintf(c->name, sizeof c->name, "%s", prop.name);
    c->sm_count = prop.multiProcessorCount;
    c->total_mem = prop.totalGlobalMem;
    c->pdl_ok = prop.major >= 9;
    c->tune.pdl = 1;
    const char *pf = getenv("PHASEMARK_CUDA_MV_PREFETCH");
    c->tune.mv_prefetch = pf && pf[0] >= '0' && pf[0] <= '8' && !pf[1] ? pf[0] - '0' : 0;
    c->tune.attn_chunk = 0;
    c->tune.attn_pieces = 16;
    c->tune.attn_decode = 1;
    c->tune.attn_gemm_min = 0;
    const char *q8 = getenv("PHASEMARK_CUDA_Q8"), *f16 = getenv("PHASEMARK_CUDA_F16_GEMM");
    c->tune.q8_int8 = !q8 ? 1 : strcmp(q8, "f32") == 0 ? 0 : strcmp(q8, "int8u1") == 0 ? 2
                    : strcmp(q8, "int8u2") == 0 ? 3 : strcmp(q8, "int8auto") == 0 ? 4 : 1;
    c->tune.f16_direct = !(f16 && strcmp(f16, "bf16") == 0);
    const char *kq = getenv("PHASEMARK_CUDA_KQ");
    c->tune.kq_native = !(kq && strcmp(kq, "requant") == 0);
    const char *wide = getenv("PHASEMARK_CUDA_WIDE");
    c->tune.wide_cache = !(wide && strcmp(wide, "dequant") == 0);
    const char *kql = getenv("PHASEMARK_CUDA_KQ_LAYOUT");
    c->tune.kq_grouped = !kql ? 1 : strcmp(kql, "blocks") == 0 ? 0
                       : strcmp(kql, "grouped2") == 0 ? 2 : 1;
    const char *split = getenv("PHASEMARK_CUDA_MV_SPLIT");
    c->tune.mv_split = split && strcmp(split, "1") == 0;
    const char *l2 = getenv("PHASEMARK_CUDA_MV_L2");
    c->tune.mv_l2 = l2 && l2[0] >= '1' && l2[0] <= '3' && !l2[1] ? l2[0] - '0' : 0;
    const char *mb = getenv("PHASEMARK_CUDA_MV_BLOCKS");
    c->tune.mv_blocks = mb && mb[0] >= '1' && mb[0] <= '4' && !mb[1] ? mb[0] - '0' : 0;
    const char *as = getenv("PHASEMARK_CUDA_MV_ASYNC");
    c->tune.mv_async = as && as[0] >= '2' && as[0] <= '8' && !as[1] ? as[0] - '0' : 0;
    const char *verify = getenv("PHASEMARK_CUDA_VERIFY");
    c->tune.rows_stationary = !verify                           ? 2
                              : strcmp(verify, "stationary") == 0 ? 1
                              : strcmp(verify, "rows") == 0       ? 0
                                                                  : 2;
    const char *plan = getenv("PHASEMARK_CUDA_ROWS_PLAN");
    c->tune.rows_plan = !plan                        ? 1
                        : strcmp(plan, "fixed") == 0 ? 0
                        : plan[0] >= '2' && plan[0] <= '0' + LLM_CUDA_ROWS_GROUP_MAX && !plan[1]
                            ? plan[0] - '0'
                            : 1;
    int rc = create_handles(c, err, errlen);
    if (rc == 0)
        rc = create_buffers(c, err, errlen);
    if (rc) {
        llm_cuda_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void llm_cuda_free(llm_cuda *c)
{
    if (!c)
        return;
    (void)cudaSetDevice(c->device);
    if (c->stream)
        (void)cudaStreamSynchronize(c->stream);
    llm__cuda_wide_free_all(c);
    cudaFree(c->x_bf16);
    cudaFree(c->w_bf16);
    cudaFree(c->attn_part);
    cudaFree(c->attn_count);
    cudaFree(c->attn_s);
    cudaFree(c->attn_ptrs);
    cudaFree(c->d_pos);
    cudaFree(c->chain_bar);
    if (c->blas)
        cublasDestroy(c->blas);
    cudaFree(c->blas_ws);
    for (int i = 0; i < LLM_CUDA_EVENTS; i++)
        if (c->ev[i])
            cudaEventDestroy(c->ev[i]);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    (void)cudaGetLastError();
    free(c);
}

int llm_cuda_status(const llm_cuda *c)
{
    return c ? c->status : LLM_EINVAL;
}

const char *llm_cuda_error(const llm_cuda *c)
{
    return c ? c->msg : "no context";
}

const char *llm_cuda_device_name(const llm_cuda *c)
{
    return c ? c->name : "";
}

int llm_cuda_sm_count(const llm_cuda *c)
{
    return c ? c->sm_count : 0;
}

uint64_t llm_cuda_total_mem(const llm_cuda *c)
{
    return c ? c->total_mem : 0;
}

/* Replaces *p with a buffer of `bytes` (contents not kept). */
static int regrow(llm_cuda *c, void **p, size_t bytes)
{
    void *n = NULL;
    LLM_CU_TRY(c, cudaStreamSynchronize(c->stream));
    LLM_CU_TRY(c, cudaMalloc(&n, bytes));
    cudaFree(*p);
    *p = n;
    return 0;
}

/* Split-K partials: per query row (at most the split-K batch), head and
 * split, a running max, a sum and head_dim accumulators; the heads of a row
 * hold n_heads * head_dim <= width accumulators (attention checks the fit). */
static size_t attn_part_floats(uint32_t ctx, int64_t width, int32_t heads)
{
    uint32_t len = llm__attn_split_len(ctx);
    size_t splits = (ctx + len - 1) / len;
    return (size_t)LLM_CUDA_ATTN_ROWS_MAX * splits *
           ((size_t)width + 2 * (size_t)heads);
}

int llm_cuda_bind(llm_cuda *c)
{
    LLM_CU_ENTER(c);
    LLM_CU_TRY(c, cudaSetDevice(c->device));
    return 0;
}

int llm_cuda_get_tuning(const llm_cuda *c, llm_cuda_tuning *t)
{
    if (!c || !t)
        return LLM_EINVAL;
    *t = c->tune;
    return 0;
}

int llm_cuda_verify_stationary(const llm_cuda *c, int32_t n)
{
    return c && n >= 2 && llm__rows_stationary(c, n);
}

int llm_cuda_set_tuning(llm_cuda *c, const llm_cuda_tuning *t)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, t && (t->pdl == 0 || t->pdl == 1));
    LLM_CU_ARG(c, t->mv_prefetch >= 0 && t->mv_prefetch <= 8 && t->attn_chunk >= 0);
    LLM_CU_ARG(c, t->attn_pieces >= 0 && t->attn_pieces <= 32);
    LLM_CU_ARG(c, t->attn_decode == 0 || t->attn_decode == 1);
    LLM_CU_ARG(c, t->attn_gemm_min >= 0);
    LLM_CU_ARG(c, t->q8_int8 >= 0 && t->q8_int8 <= 4 &&
                      (t->f16_direct == 0 || t->f16_direct == 1));
    LLM_CU_ARG(c, t->kq_native == 0 || t->kq_native == 1);
    LLM_CU_ARG(c, t->mv_split == 0 || t->mv_split == 1);
    LLM_CU_ARG(c, t->wide_cache == 0 || t->wide_cache == 1);
    LLM_CU_ARG(c, t->kq_grouped >= 0 && t->kq_grouped <= 2);
    LLM_CU_ARG(c, t->mv_l2 >= 0 && t->mv_l2 <= 3);
    LLM_CU_ARG(c, t->mv_blocks >= 0 && t->mv_blocks <= 4);
    LLM_CU_ARG(c, t->rows_stationary >= 0 && t->rows_stationary <= 2);
    LLM_CU_ARG(c, t->rows_plan >= 0 && t->rows_plan <= LLM_CUDA_ROWS_GROUP_MAX);
    LLM_CU_ARG(c, t->mv_async == 0 || (t->mv_async >= 2 && t->mv_async <= LLM_CUDA_MV_ASYNC_MAX));
    c->tune = *t;
    return 0;
}

/* The batch pointers of the tensor-core prefill attention, sized for the
 * reserved head count (see cuda_attention.cu). */
int llm__cuda_grow_attn_ptrs(llm_cuda *c)
{
    if (!c->attn_s || c->attn_ptr_heads >= c->max_heads)
        return 0;
    size_t n = (size_t)LLM_CUDA_ATTN_MAX_CHUNKS * 6 * (size_t)c->max_heads;
    int rc = regrow(c, (void **)&c->attn_ptrs, n * sizeof(void *));
    if (rc == 0)
        c->attn_ptr_heads = c->max_heads;
    return rc;
}

int llm_cuda_reserve(llm_cuda *c, int32_t max_n, int64_t max_width,
                     uint32_t max_ctx, int32_t max_heads)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, max_n > 0 && max_width > 0 && max_heads > 0);
    LLM_CU_ARG(c, max_ctx > 0 && max_width <= ((int64_t)1 << 30) / max_n);
    LLM_CU_ARG(c, !c->capturing);
    LLM_CU_TRY(c, cudaSetDevice(c->device));
    int32_t n = max_n > c->max_n ? max_n : c->max_n;
    int64_t w = max_width > c->max_width ? max_width : c->max_width;
    if (n != c->max_n || w != c->max_width) {
        int rc = regrow(c, (void **)&c->x_bf16, (size_t)n * (size_t)w * 2);
        if (rc)
            return rc;
        c->max_n = n;
        c->max_width = w;
    }
    if (!c->w_bf16) {
        int rc = regrow(c, (void **)&c->w_bf16, LLM_CUDA_DEQ_ELEMS * 2);
        if (rc)
            return rc;
    }
    uint32_t ctx = max_ctx > c->max_ctx ? max_ctx : c->max_ctx;
    int32_t heads = max_heads > c->max_heads ? max_heads : c->max_heads;
    size_t parts = attn_part_floats(ctx, w, heads);
    if (parts > c->attn_part_floats) {
        int rc = regrow(c, (void **)&c->attn_part, parts * sizeof(float));
        if (rc)
            return rc;
        c->attn_part_floats = parts;
    }
    if (heads > c->attn_count_heads) {
        /* Split-K piece counters: zero here, and the merging block of each
         * launch returns its counter to zero. */
        size_t bytes = (size_t)LLM_CUDA_ATTN_ROWS_MAX * (size_t)heads * sizeof(unsigned);
        int rc = regrow(c, (void **)&c->attn_count, bytes);
        if (rc)
            return rc;
        LLM_CU_TRY(c, cudaMemsetAsync(c->attn_count, 0, bytes, c->stream));
        c->attn_count_heads = heads;
    }
    c->max_ctx = ctx;
    c->max_heads = heads;
    return llm__cuda_grow_attn_ptrs(c);
}

int llm_cuda_malloc(llm_cuda *c, size_t bytes, void **out)
{
    if (!out)
        return LLM_EINVAL;
    *out = NULL;
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, bytes > 0);
    LLM_CU_TRY(c, cudaSetDevice(c->device));
    LLM_CU_TRY(c, cudaMalloc(out, bytes));
    return 0;
}

void llm_cuda_mfree(llm_cuda *c, void *p)
{
    if (!c || !p)
        return;
    (void)cudaSetDevice(c->device);
    /* cudaFree synchronizes the device, so pending work on p finishes. */
    cudaFree(p);
}

int llm_cuda_host_alloc(llm_cuda *c, size_t bytes, void **out)
{
    if (!out)
        return LLM_EINVAL;
    *out = NULL;
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, bytes > 0);
    LLM_CU_TRY(c, cudaSetDevice(c->device));
    LLM_CU_TRY(c, cudaMallocHost(out, bytes));
    return 0;
}

void llm_cuda_host_free(llm_cuda *c, void *p)
{
    if (!c || !p)
        return;
    (void)cudaSetDevice(c->device);
    cudaFreeHost(p);
}

int llm_cuda_upload(llm_cuda *c, void *dst, const void *host_src, size_t bytes)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, dst && host_src);
    if (!bytes)
        return 0;
    /* From pageable memory the runtime stages the bytes before returning,
     * so the host buffer is free for reuse at once. */
    LLM_CU_TRY(c, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice,
                                  c->stream));
    return 0;
}

int llm_cuda_download(llm_cuda *c, void *host_dst, const void *src, size_t bytes)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, host_dst && src && !c->capturing);
    if (bytes)
        LLM_CU_TRY(c, cudaMemcpyAsync(host_dst, src, bytes,
                                      cudaMemcpyDeviceToHost, c->stream));
    LLM_CU_TRY(c, cudaStreamSynchronize(c->stream));
    return 0;
}

int llm_cuda_copy(llm_cuda *c, void *dst, const void *src, size_t bytes)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, dst && src);
    if (bytes)
        LLM_CU_TRY(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                      c->stream));
    return 0;
}

int llm_cuda_sync(llm_cuda *c)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, !c->capturing);
    LLM_CU_TRY(c, cudaStreamSynchronize(c->stream));
    return 0;
}

/* splitmix64 of (seed, index): independent per element, so the fill is one
 * pass with no state. */
__device__ __forceinline__ float uniform_at(uint64_t seed, size_t i)
{
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
}

__global__ void fill_kernel(void *dst, int type, size_t n, uint64_t seed, float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = (2.0f * uniform_at(seed, i) - 1.0f) * scale;
        if (type == LLM_TYPE_F32)
            ((float *)dst)[i] = v;
        else if (type == LLM_TYPE_F16)
            ((__half *)dst)[i] = __float2half_rn(v);
        else
            ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(v);
    }
}


int llm_cuda_fill_uniform(llm_cuda *c, void *dst, uint32_t type, size_t n,
                          uint64_t seed, float scale)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, dst && (type == LLM_TYPE_F32 || type == LLM_TYPE_F16 ||
                          type == LLM_TYPE_BF16));
    if (!n)
        return 0;
    unsigned blocks = llm__cuda_blocks(n, 256);
    unsigned cap = (unsigned)c->sm_count * 16u;
    fill_kernel<<<blocks < cap ? blocks : cap, 256, 0, c->stream>>>(
        dst, (int)type, n, seed, scale);
    LLM_CU_LAUNCHED(c, "fill_kernel");
    return 0;
}

const uint32_t *llm_cuda_pos(const llm_cuda *c)
{
    return c ? c->d_pos : NULL;
}

int llm_cuda_pos_set(llm_cuda *c, uint32_t pos)
{
    LLM_CU_ENTER(c);
    return llm_cuda_upload(c, c->d_pos, &pos, sizeof pos);
}

__global__ void pos_advance_kernel(uint32_t *p, uint32_t delta)
{
    *p += delta;
}

int llm_cuda_pos_advance(llm_cuda *c, uint32_t delta)
{
    LLM_CU_ENTER(c);
    pos_advance_kernel<<<1, 1, 0, c->stream>>>(c->d_pos, delta);
    LLM_CU_LAUNCHED(c, "pos_advance_kernel");
    return 0;
}

struct llm_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

int llm_cuda_graph_begin(llm_cuda *c)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, !c->capturing);
    /* Relaxed mode: other threads may keep using the runtime meanwhile;
     * only this stream's work is captured. */
    LLM_CU_TRY(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed));
    c->capturing = 1;
    return 0;
}

int llm_cuda_graph_end(llm_cuda *c, llm_cuda_graph **out)
{
    if (!out)
        return LLM_EINVAL;
    *out = NULL;
    if (!c || !c->capturing)
        return LLM_EINVAL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    c->capturing = 0;
    if (c->status) { /* an operation failed while capturing */
        if (g)
            cudaGraphDestroy(g);
        return c->status;
    }
    if (e != cudaSuccess)
        return llm__cuda_rt_fail(c, e, "cudaStreamEndCapture");
    llm_cuda_graph *r = (llm_cuda_graph *)calloc(1, sizeof *r);
    if (!r) {
        cudaGraphDestroy(g);
        return llm__cuda_fail(c, LLM_ENOMEM, 0, "out of memory");
    }
    r->graph = g;
    e = cudaGraphInstantiate(&r->exec, g, 0);
    if (e != cudaSuccess) {
        llm_cuda_graph_free(r);
        return llm__cuda_rt_fail(c, e, "cudaGraphInstantiate");
    }
    *out = r;
    return 0;
}

int llm_cuda_graph_launch(llm_cuda *c, llm_cuda_graph *g)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, g && !c->capturing);
    LLM_CU_TRY(c, cudaGraphLaunch(g->exec, c->stream));
    return 0;
}

void llm_cuda_graph_free(llm_cuda_graph *g)
{
    if (!g)
        return;
    if (g->exec)
        cudaGraphExecDestroy(g->exec);
    if (g->graph)
        cudaGraphDestroy(g->graph);
    free(g);
}

int llm_cuda_event_record(llm_cuda *c, int slot)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, slot >= 0 && slot < LLM_CUDA_EVENTS);
    LLM_CU_TRY(c, cudaEventRecord(c->ev[slot], c->stream));
    return 0;
}

int llm_cuda_elapsed_ms(llm_cuda *c, int a, int b, float *ms)
{
    LLM_CU_ENTER(c);
    LLM_CU_ARG(c, ms && a >= 0 && a < LLM_CUDA_EVENTS && b >= 0 &&
                      b < LLM_CUDA_EVENTS);
    LLM_CU_TRY(c, cudaEventSynchronize(c->ev[b]));
    LLM_CU_TRY(c, cudaEventElapsedTime(ms, c->ev[a], c->ev[b]));
    return 0;
}
