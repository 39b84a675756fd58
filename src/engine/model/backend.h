/* backend.h — the one internal seam between the model and the hardware.
 *
 * The forward (forward.c) is written once, as blocks: embed the tokens;
 * per layer an attention block (its KV-cache write included) and a
 * feed-forward block; the head (final norm and output product) over the
 * rows the caller asked for; the greedy token of logits rows. A backend
 * implements each block for its device however it likes: the CPU backend
 * (cpu/) composes its kernels, the reference; the CUDA backend (cuda/)
 * composes fused kernels, chosen per block from the row count, and can
 * record a decode step's blocks once and replay them (step_begin /
 * step_end). Nothing above this seam knows which kernels run, and no
 * second forward exists anywhere.
 *
 * Residency. A backend puts a model's weights where it computes once, at
 * prepare, and records its handles in the model itself: llm_tensor.dev,
 * llm_layer.dev and llm_model.dev (model.h). The handles belong to the
 * backend and live as long as it does; a host backend leaves them NULL
 * and reads the file mapping, except the CPU backend's own copy of float
 * matrices on huge pages (cpu/cpu_weights.h), which it points
 * llm_tensor.dev at. Activations are [n][width] row-major f32
 * arrays from the backend's alloc (device memory on a device backend);
 * read/write move them to and from the host.
 *
 * Errors. Blocks return nothing and never allocate: every size they need
 * is reserved at prepare or reserve. A device backend's failure is sticky:
 * later blocks are skipped, reads yield NaN, and status() reports it, so a
 * caller checks once per forward.
 *
 * Threads. One backend instance belongs to one model and is shared by the
 * model's sessions; callers hold the model's lock around every entry, so
 * entries never run concurrently on one instance.
 *
 * Backends are created by name through llm_backend_create ("cpu", "cuda",
 * "cuda:N"): the registry (backend.c) over the one parser of backend names
 * (backend_name.h).
 */
#ifndef LLM_BACKEND_H
#define LLM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct llm_backend llm_backend;

struct llm_span;
struct llm_workspace;

/* One layer of one forward: what its attention and feed-forward blocks
 * need. Rows are positions pos0..pos0+n-1; x, xb, ... are the workspace's
 * [n][width] buffers (forward.h). */
typedef struct llm_block {
    const llm_model *m;
    int32_t layer;             /* index into m->layers */
    float *k, *v;              /* this layer's cache [n_ctx][kv_dim], in
                                  which positions 0..pos0-1 are filled */
    struct llm_workspace *ws;
    int32_t n;                 /* rows, 1..ws->n_batch */
    uint32_t pos0;
} llm_block;

/* One forward of a span, as step_begin sees it before any layer runs. */
typedef struct llm_step {
    const llm_model *m;
    const struct llm_span *span;
    struct llm_workspace *ws;
    int32_t n;
    uint32_t pos0;
    int32_t head_rows;         /* rows the head runs for: 0 (no head, or
                                  the span does not end the model), 1, n */
    int32_t n_feat;            /* layers whose residual stream the forward
                                  copies out (copy) after their ffn: a
                                  recording of the step without those
                                  copies must not replay for it */
} llm_step;

typedef struct llm_backend_ops {
    const char *name; /* "cpu", "cuda:0": markers and model info */
    void (*destroy)(llm_backend *be);

    /* ---- residency, memory, status ---------------------------------- */

    /* Puts the weights of layers m->span_first..m->span_last (and the
     * embedding or head when the span has them) where the backend
     * computes and records the handles in m. Once per model, at open,
     * before any forward. 0, LLM_ENOMEM, or LLM_EBACKEND / LLM_EUNSUP with
     * one line in err naming the tensor or type. */
    int (*prepare)(llm_backend *be, llm_model *m, char *err, size_t errlen);
    /* Grows scratch for contexts up to n_ctx and widths up to max_width
     * (the widest matrix row). At session creation, under the model lock;
     * 0, LLM_ENOMEM or LLM_EBACKEND. */
    int (*reserve)(llm_backend *be, uint32_t n_ctx, int64_t max_width);
    void *(*alloc)(llm_backend *be, size_t bytes); /* zeroed; NULL: no memory */
    void (*free)(llm_backend *be, void *p);        /* NULL is harmless */
    /* Host memory that read and write move fastest (page-locked on a
     * device backend, plain on the CPU), for buffers a forward reads
     * results into every step. Zeroed; NULL: no memory. Setup only. */
    void *(*host_alloc)(llm_backend *be, size_t bytes);
    void (*host_free)(llm_backend *be, void *p); /* NULL is harmless */
    void (*write)(llm_backend *be, void *dst, const void *src, size_t bytes);
    void (*read)(llm_backend *be, void *dst, const void *src, size_t bytes);
    /* Backend memory to backend memory, ordered after the work issued
     * before it (a forward's features: ws->x after a layer into ws->feat,
     * forward.h). */
    void (*copy)(llm_backend *be, void *dst, const void *src, size_t bytes);
    /* 1 when the blocks have kernels for weights of ggml type `type` (the
     * backend's per-type table), else 0; the model refuses to open with a
     * tensor whose type gets 0, naming the type and the backend. */
    int (*supports_type)(const llm_backend *be, uint32_t type);
    /* Waits for the work issued so far. 0, or LLM_EBACKEND (see status). */
    int (*sync)(llm_backend *be);
    /* 0 while healthy; otherwise the sticky failure's status (LLM_EBACKEND,
     * LLM_ENOMEM) with its reason in err: every result since is void. */
    int (*status)(llm_backend *be, char *err, size_t errlen);

    /* ---- blocks --------------------------------------------------------
     * A forward calls embed or write first, then step_begin when the
     * backend has it, then the layers' blocks and the head, then step_end:
     * a backend may set up the forward's device state in step_begin. */

    /* x[i] = row ids[i] of the token embedding, as f32: x [n][dim]. */
    void (*embed)(llm_backend *be, const llm_model *m, const int32_t *ids, int32_t n,
                  float *x);
    /* x += attention(rmsnorm(x) * attn_norm) Wo^T for the block's rows:
     * q, k, v products, RoPE on q and the new keys, the new keys and
     * values written to cache rows pos0..pos0+n-1, causal attention with
     * grouped kv heads. With ws->tree set (a tree verify, tree.h; only the
     * CPU backend implements it, and the session refuses a tree on any
     * other) row i is node i: RoPE at pos0 + depth[i], attention over
     * rows 0..pos0-1 and then its ancestors' rows. */
    void (*attention)(llm_backend *be, const llm_block *b);
    /* x += (silu(xb Wgate^T) * (xb Wup^T)) Wdown^T, xb = rmsnorm(x) * ffn_norm. */
    void (*ffn)(llm_backend *be, const llm_block *b);
    /* logits[r] = (rmsnorm(x[n-rows+r]) * out_norm) Woutput^T for
     * r < rows: only the last rows of x feed the head (a decode or a
     * prefill reads one row, a verify every row). */
    void (*head)(llm_backend *be, const llm_model *m, struct llm_workspace *ws, int32_t n,
                 int32_t rows);
    /* Optional (NULL: callers argmax host logits). out[r] (host) = the
     * index of the first maximum of logits[r][0..n) for r < rows, by the
     * host sampler's rule (sampler.c): the scan keeps index 0 until a
     * later value compares strictly greater, so the lowest index wins
     * ties, a NaN never wins after index 0, and a NaN at index 0 wins
     * outright. Waits for the work before it; only the indices cross to
     * the host. 0, or -1 when the backend failed (also in status). */
    int (*argmax)(llm_backend *be, const float *logits, int32_t rows, int32_t n,
                  int32_t *out);

    /* ---- recorded steps (optional: NULL issues every block directly) --- */

    /* Called before a span's layers run, after its input is in ws->x.
     * Returns 1 when the backend has run the whole step itself (it
     * replayed a recording of the same step's blocks; the forward issues
     * none), 0 when the forward must issue the blocks, which the backend
     * may be recording; the forward then calls step_end. */
    int (*step_begin)(llm_backend *be, const llm_step *st);
    /* After the blocks of a step_begin that returned 0: a recording is
     * finished and launched. */
    void (*step_end)(llm_backend *be, const llm_step *st);
} llm_backend_ops;

struct llm_backend {
    const llm_backend_ops *ops;
    int32_t n_threads;
    int32_t host_visible; /* 1: buffers from alloc are host memory */
};

/* Creates the backend named `name` ("cpu", "cuda", "cuda:N"; NULL means
 * "cpu") with n_threads workers (<= 0: online CPUs; a device backend
 * ignores it). LLM_EBACKEND for an unknown name or one this build lacks,
 * with one line in err ("model: ..."). */
int llm_backend_create(const char *name, int32_t n_threads, llm_backend **out,
                       char *err, size_t errlen);

/* The CPU backend's constructor (cpu/cpu_backend.c). simd: 1 uses the
 * best SIMD kernels the CPU has (or the set PHASEMARK_ENGINE_KERNELS names:
 * scalar, avx2, avx2+vnni, avx512; a set the CPU lacks fails the creation
 * with one line in err), 0 forces the scalar kernels. */
int llm_cpu_backend_create(int32_t n_threads, int simd, llm_backend **out,
                           char *err, size_t errlen);

/* Makes dst, a CPU backend, run its work on the worker threads of src,
 * another CPU backend with as many threads, instead of its own (src
 * NULL: on a pool of its own again). Two models used in turn on one
 * core set, as a speculative generator's draft and target are, then hand
 * the cores to each other without two sets of workers spinning against
 * each other; the pool serializes runs, so the two may still be used
 * from different threads. Returns 1 when dst now runs as asked (shared,
 * or already so), 0 when it cannot or need not (either is not a CPU
 * backend, the thread counts differ, dst has its own pool already, or
 * PHASEMARK_SHARE_THREADS is 0, off, no or false: for benchmarks that
 * compare both), LLM_ENOMEM when a pool of its own cannot start (dst
 * then keeps the shared one). Call with no forward in flight on dst (its
 * model lock held); src may be running. */
int llm_backend_share_threads(llm_backend *dst, llm_backend *src);

/* The CPU backend's kernel set in use: "avx512", "avx2+vnni", "avx2" or
 * "scalar". */
const char *llm_cpu_backend_kernels(const llm_backend *be);

/* The CPU backend's batched product: "openblas", or the kernel set's own
 * (the kernel set's name) when OpenBLAS runs a pre-AVX2 core, when the
 * avx512 set is active and OpenBLAS runs no AVX-512 core, or
 * PHASEMARK_ENGINE_GEMM=own. */
const char *llm_cpu_backend_gemm(const llm_backend *be);

/* The core OpenBLAS chose for this CPU when the batched product is
 * OpenBLAS's (its sgemm's summation order depends on it, so a float
 * prefill's bits do too), else "". */
const char *llm_cpu_backend_blas_core(const llm_backend *be);

/* The matrix bytes the CPU backend copied onto huge pages at prepare
 * (cpu/cpu_weights.h; PHASEMARK_ENGINE_WEIGHTS=auto|map|copy, read at
 * creation) and, in *n_matrices when not NULL, how many matrices: 0 when
 * its kernels read the file mapping (quantized weights, no_mmap, "map",
 * no huge pages, or no memory for the copy). */
size_t llm_cpu_backend_weights_copied(const llm_backend *be, int32_t *n_matrices);

/* What the CPU backend's prepare does for a model's matrices, for
 * matrices that are no model's (a block head's): copies those of t[0..n)
 * that its weights mode and kernels take (cpu/cpu_weights.h) into an arena
 * of its own, once (later calls, or a backend that already has one, do
 * nothing). The tensors must outlive the backend. No-op on a backend that
 * is not the CPU's. */
void llm_cpu_backend_copy_tensors(llm_backend *be, llm_tensor *const *t, int32_t n);

/* Lets the CPU backend `be` read the matrices that the CPU backend
 * `owner` copied into its arena (float copies, Q8_0 panels) where they
 * are, as owner's kernels do, instead of from the file mapping: for a
 * block head, whose products include the target's output head. 1 when it
 * does; 0 when either is no CPU backend or their kernel sets differ (be
 * reads the rows then, with the same results). owner must outlive be's
 * use of it. Not thread-safe against a running forward. */
int llm_cpu_backend_read_weights(llm_backend *be, const llm_backend *owner);

/* Sets the batch widths from which the CPU backend's matmul switches from
 * the row loop to the matrix product, for float (F32/F16/BF16) and
 * quantized (Q8_0/Q4_0) weights; clamped to 1..64 (64 forces the row loop
 * up to 63 rows). For tuning and the benchmark; not thread-safe against a
 * running forward. */
void llm_cpu_backend_set_gemm_min(llm_backend *be, int32_t float_min, int32_t quant_min);

#endif
