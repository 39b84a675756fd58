/* cpu_weights.h — the CPU backend's own copy of the float matrices.
 *
 * A decode step streams every weight matrix once, so its speed is the
 * memory system's, and on this project's VMs that depends on the page
 * size: the file mapping is on 4 KiB pages unless the page cache happens
 * to hold the file in 2 MiB folios (a file just written, or read without
 * MADV_HUGEPAGE, is not), while anonymous memory advised with
 * MADV_HUGEPAGE gets 2 MiB pages whenever transparent huge pages are not
 * "never". F32, F16 and BF16 matrices are the largest a token reads, so
 * for them the backend copies the matrices a forward streams (every layer
 * matrix of the model's span and the output head, not the token
 * embedding, which a token reads one row of) into one anonymous,
 * 2 MiB-aligned arena and reads them from there (llm_tensor.dev). The
 * copy costs their size in anonymous memory beside the page cache's
 * (reclaimable) copy of the file, and one pass over them at open; the
 * bytes are the same, so every result is too.
 *
 * Q8_0 matrices go into the same arena in the panel layout (kernels.h)
 * when the kernel set reads it (the avx512 set): 16 rows side by side, so
 * that the product streams one run of bytes and needs no transposing at
 * run time. The layout takes the rows' bytes (a last panel's padding
 * aside), and the panel product's results are those of the set's product
 * on the rows, bit for bit: the copy changes speed only. Panels pay on
 * any page size, so they are made unless the mode is MAP. Other quantized
 * types stay on the mapping (their kernels spend more per byte; not
 * measured to pay).
 *
 * When the arena cannot be had (no memory, an address-space limit) the
 * tensors stay on the mapping and the model works as before: the copy is
 * an optimization, never a requirement.
 */
#ifndef LLM_CPU_WEIGHTS_H
#define LLM_CPU_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

struct llm_model;
struct llm_pool;
struct llm_tensor;

/* Whether to copy (llm_cpu_weights_mode, from PHASEMARK_ENGINE_WEIGHTS). */
enum {
    LLM_CPU_WEIGHTS_MAP = 0,  /* never: read the mapping */
    LLM_CPU_WEIGHTS_AUTO = 1, /* float matrices, when huge pages can be had */
    LLM_CPU_WEIGHTS_COPY = 2, /* float matrices, whatever the page size */
};

/* One arena; all zero: none. Owned by the backend that made it. */
typedef struct llm_cpu_weights {
    void *base;   /* the mapping (munmap base, len) */
    size_t len;
    size_t bytes; /* matrix bytes copied into it */
    int32_t n;    /* matrices copied */
    struct llm_tensor **t; /* [n] owned: the tensors whose dev points into
                              the arena (the model's, which outlive it) */
} llm_cpu_weights;

/* PHASEMARK_ENGINE_WEIGHTS: unset, empty or "auto" -> AUTO; "map",
 * "copy". 0 with *mode, or LLM_EINVAL with one line in err. */
int llm_cpu_weights_mode(int *mode, char *err, size_t errlen);

/* Copies m's float matrices (floats: 1; in AUTO mode only where huge
 * pages can be had) and packs its Q8_0 matrices into panels (panels: 1)
 * into a new arena (mode AUTO or COPY; MAP does nothing), the pool's
 * threads each taking a contiguous share, and points each copied tensor's
 * dev at its copy. Never fails: without the arena *w stays all zero and
 * every tensor on the mapping. */
void llm_cpu_weights_copy(struct llm_pool *pool, struct llm_model *m, int mode, int floats,
                          int panels, llm_cpu_weights *w);

/* llm_cpu_weights_copy for a list of matrices that are no model's (a
 * block head's): those of t[0..n) the arena takes (floats where huge
 * pages can be had, or in COPY mode; Q8_0 into panels when panels), the
 * tensors outliving the arena. */
void llm_cpu_weights_copy_tensors(struct llm_pool *pool, struct llm_tensor *const *t, int32_t n, int mode,
                                  int panels, llm_cpu_weights *w);

/* Points the copied tensors back at the mapping (dev NULL) and unmaps the
 * arena, so a model whose backend is replaced (a test swapping kernel
 * sets) reads the mapping again. Call while the tensors exist: the CPU
 * backend is destroyed before its model's layers are freed. An all-zero w
 * is harmless. */
void llm_cpu_weights_free(llm_cpu_weights *w);

/* 1 when t->dev points into w's arena: the kernels read t's copy there
 * (a Q8_0 one in the panel layout) instead of t->data. Any other dev is
 * another backend's handle (the CUDA backend's weight records, when a CPU
 * head shares a CUDA target's tensors) and is never read as bytes. */
int llm_cpu_weights_holds(const llm_cpu_weights *w, const struct llm_tensor *t);

#endif
