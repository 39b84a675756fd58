/* backend.h — the one internal seam between the model and the hardware.
 *
 * The forward pass (forward.c) is written once against this table of
 * operations; a backend implements them for its device. The CPU backend
 * (cpu/) is the reference; the CUDA backend (cuda/) implements the same
 * table and fills its optional entries (NULL keeps the forward's op-by-op
 * path). Activations are [n][width] row-major f32 arrays obtained from
 * the backend's alloc, so a device backend can keep them in device memory;
 * read/write move them to and from the host.
 *
 * One backend instance belongs to one model and is shared by the model's
 * sessions; the forward holds the model's lock while it calls the backend,
 * so operations never run concurrently on one instance. Operations never
 * fail and never allocate: every size they need is reserved at creation or
 * through reserve().
 */
#ifndef LLM_BACKEND_H
#define LLM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct llm_backend llm_backend;

/* The span, workspace and forward arguments of forward.h (forward_span). */
struct llm_span;
struct llm_workspace;
struct llm_forward_in;

/* Rotary embedding of one forward: positions pos0..pos0+n-1, adjacent
 * pairs (x[2i], x[2i+1]) of each head rotated by angle
 * (pos * scale) * base^(-2i/head_dim). inv_freq[i] = base^(-2i/head_dim). */
typedef struct llm_rope {
    const double *inv_freq; /* [head_dim/2]; double keeps large angles exact */
    float scale;           /* position multiplier (1/linear factor) */
    int32_t head_dim;
} llm_rope;

/* Causal attention of one layer for n query rows at positions
 * pos0..pos0+n-1 over a cache of [pos][kv_dim] keys and values in which
 * positions 0..pos0+n-1 are filled. */
typedef struct llm_attn {
    const float *q;       /* [n][n_heads*head_dim] */
    const float *k;       /* [n_ctx][n_kv_heads*head_dim] */
    const float *v;       /* [n_ctx][n_kv_heads*head_dim] */
    float *out;           /* [n][n_heads*head_dim] */
    int32_t n;
    uint32_t pos0;
    int32_t n_heads, n_kv_heads, head_dim;
} llm_attn;

typedef struct llm_backend_ops {
    const char *name; /* "cpu" */
    void (*destroy)(llm_backend *be);
    /* Grows per-thread scratch for contexts up to n_ctx and widths up to
     * max_width (the widest matrix row). Called at session creation, under
     * the model lock; LLM_ENOMEM on failure. */
    int (*reserve)(llm_backend *be, uint32_t n_ctx, int64_t max_width);
    void *(*alloc)(llm_backend *be, size_t bytes);
    void (*free)(llm_backend *be, void *p);
    void (*write)(llm_backend *be, void *dst, const void *src, size_t bytes);
    void (*read)(llm_backend *be, void *dst, const void *src, size_t bytes);
    /* out[i] = row ids[i] of embd, as f32: out [n][embd->ne0]. */
    void (*embed)(llm_backend *be, const llm_tensor *embd, const int32_t *ids,
                  int32_t n, float *out);
    /* y[i] = x[i] W^T for i < n: x [n][w->ne0], y [n][w->ne1]. x and y do
     * not overlap. */
    void (*matmul)(llm_backend *be, const llm_tensor *w, const float *x,
                   int32_t n, float *y);
    /* 1 when embed and matmul have kernels for weights of ggml type `type`
     * (the backend's per-type table), else 0; the model refuses to load a
     * tensor whose type gets 0. Required. */
    int (*supports_type)(const llm_backend *be, uint32_t type);
    /* y[i] = x[i] / rms(x[i]) * weight: [n][dim]; y may equal x. */
    void (*rmsnorm)(llm_backend *be, float *y, const float *x,
                    const float *weight, int32_t n, int32_t dim, float eps);
    /* Rotates n rows of `stride` floats holding n_heads heads each. */
    void (*rope)(llm_backend *be, float *x, int32_t n, int32_t n_heads,
                 int32_t stride, uint32_t pos0, const llm_rope *r);
    void (*attention)(llm_backend *be, const llm_attn *a);
    /* gate[i] = silu(gate[i]) * up[i] for i < len. */
    void (*swiglu)(llm_backend *be, float *gate, const float *up, size_t len);
    /* y[i] += x[i] for i < len. */
    void (*add)(llm_backend *be, float *y, const float *x, size_t len);
    /* Optional (NULL: the forward calls matmul once per weight). Products
     * of one input with several weights: y[i] = x w[i]^T for i < count,
     * every w[i] with the same ne0, each result exactly matmul's. Lets a
     * backend share the input's preparation and one hand-off to its
     * threads among q/k/v, or gate/up. */
    void (*matmul_many)(llm_backend *be, const llm_tensor *const *w, int32_t count,
                        const float *x, int32_t n, float *const *y);
    /* Optional (NULL: the forward always runs the span op by op). Runs
     * everything llm_span_forward does after the span's input is in ws->x
     * (the embedding or the boundary write is done): every layer of span,
     * and the head when the span ends the model, leaving ws->x and
     * ws->logits as the op-by-op path would (up to rounding). Returns 1
     * when it ran the span, 0 when it issued nothing and the forward must
     * run it op by op (a shape, weight type or batch it does not fuse).
     * Lets a device backend run a decode step as its own fused kernels,
     * replayed as one recorded launch. Never allocates per token. */
    int (*forward_span)(llm_backend *be, const llm_model *m, struct llm_span *span,
                        struct llm_workspace *ws, const struct llm_forward_in *in);
    /* Optional (NULL: the session reads logits rows and the host argmaxes
     * them). out[r] (host memory) = the index of the first maximum of
     * logits[r][0..n) for r < rows, logits [rows][n] in the backend's
     * memory, by the host sampler's rule (sampler.c): the scan keeps index
     * 0 until a later value compares strictly greater, so the lowest index
     * wins ties, a NaN never wins after index 0, and a NaN at index 0 wins
     * outright (nothing compares greater than it). Waits for the work
     * issued before it; only the indices cross to the host, which is the
     * point: greedy decoding need not read whole rows of logits. Returns
     * 0, or -1 when the backend failed (the failure is also reported as
     * any operation's is). Never allocates. */
    int (*argmax)(llm_backend *be, const float *logits, int32_t rows, int32_t n,
                  int32_t *out);
} llm_backend_ops;

struct llm_backend {
    const llm_backend_ops *ops;
    int32_t n_threads;
    int32_t host_visible; /* 1: buffers from alloc are host memory */
};

/* Creates the backend named `name` ("cpu"; NULL means "cpu") with n_threads
 * workers (<= 0: online CPUs). LLM_EBACKEND for an unknown name. */
int llm_backend_create(const char *name, int32_t n_threads,
                       llm_backend **out, char *err, size_t errlen);

/* The CPU backend's constructor (cpu/cpu_backend.c). simd: 1 uses the
 * AVX2/FMA kernels when the CPU has them, 0 forces the scalar kernels. */
int llm_cpu_backend_create(int32_t n_threads, int simd, llm_backend **out,
                           char *err, size_t errlen);

/* The CPU backend's kernel set in use: "avx2" or "scalar". */
const char *llm_cpu_backend_kernels(const llm_backend *be);

/* The CPU backend's batched product: "openblas", or the kernel set's own
 * ("avx2"/"scalar") when OpenBLAS runs a pre-AVX2 core or
 * PHASEMARK_ENGINE_GEMM=own. */
const char *llm_cpu_backend_gemm(const llm_backend *be);

/* Sets the batch widths from which the CPU backend's matmul switches from
 * the row loop to the matrix product, for float (F32/F16/BF16) and
 * quantized (Q8_0/Q4_0) weights; clamped to 1..64 (64 forces the row loop
 * up to 63 rows). For tuning and the benchmark; not thread-safe against a
 * running forward. */
void llm_cpu_backend_set_gemm_min(llm_backend *be, int32_t float_min, int32_t quant_min);

#endif
