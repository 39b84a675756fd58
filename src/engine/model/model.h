/* model.h — the llama-family model as the engine sees it internally.
 *
 * A model is hyper-parameters, a table of weight tensors and a tokenizer.
 * Matrix weights point into a read-only file mapping (GGUF or llama2.c),
 * which a backend may copy from at prepare (a device's memory, or the CPU
 * backend's huge-page copy of float matrices); norm vectors, which are tiny and read on every token,
 * are converted to f32 once at load into one buffer the model owns. Nothing
 * here knows the file formats beyond the loaders in model_gguf.c and
 * model_llama2c.c, and nothing here knows how a backend computes.
 *
 * Shapes use ggml's convention: a matrix tensor has ne0 (the contiguous row
 * length, the input width) and ne1 rows (the output width); y = W x means
 * y[r] = dot(row r, x).
 */
#ifndef LLM_MODEL_H
#define LLM_MODEL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "errtext.h"
#include "phasemark/engine.h"
#include "quant.h"

struct llm_backend;
struct llm_tokenizer;

/* One weight matrix: where its bytes are in the file mapping, and where
 * the model's backend keeps it (backend.h, prepare). */
typedef struct llm_tensor {
    const void *data;  /* row 0 in the mapping; rows are row_bytes apart */
    uint32_t type;     /* ggml type id: its traits are llm_type_find(
                          &model->types, type) (quant.h) */
    int64_t ne0;       /* elements per row (input width) */
    int64_t ne1;       /* rows (output width) */
    size_t row_bytes;  /* bytes per row */
    void *dev;         /* the backend's handle of its copy, owned by the
                          backend; NULL: the backend reads data */
} llm_tensor;

/* The architectures the engine runs (general.architecture). They share
 * one forward; what differs is named in llm_hparams and llm_layer:
 *   llama  adjacent-pair RoPE; q/k/v biases when the file has them
 *   qwen2  half-split ("neox") RoPE; q/k/v biases required
 *   qwen3  half-split RoPE; per-head RMSNorm of q and k before RoPE
 *          (attn_q_norm / attn_k_norm) required; head_dim from key_length */
typedef enum llm_arch {
    LLM_ARCH_LLAMA = 0,
    LLM_ARCH_QWEN2 = 1,
    LLM_ARCH_QWEN3 = 2,
} llm_arch;

typedef struct llm_hparams {
    int32_t arch;        /* llm_arch */
    int32_t n_vocab;
    int32_t dim;         /* embedding width */
    int32_t n_layers;
    int32_t n_heads;
    int32_t n_kv_heads;  /* divides n_heads (grouped-query attention) */
    int32_t head_dim;    /* even; dim / n_heads unless the file says
                            otherwise (qwen3's attention.key_length) */
    int32_t ffn_dim;     /* SwiGLU hidden width */
    int32_t n_ctx_train;
    float norm_eps;      /* RMSNorm epsilon */
    float rope_base;     /* theta_i = base^(-2i/head_dim) */
    float rope_scale;    /* positions are multiplied by this (1/factor) */
    int32_t rope_neox;   /* 0: RoPE rotates pairs (2i, 2i+1) of a head (the
                            llama GGUF layout); 1: pairs (i, i + head_dim/2)
                            (qwen2, qwen3: their q/k rows are not permuted
                            by the converter) */
    int32_t window;      /* sliding-window attention: the query at position
                            p sees keys p-window+1..p only; 0 = none (full
                            causal attention) */
} llm_hparams;

/* One transformer block. Norm weights and biases are f32 in the model's
 * buffer; an optional vector the layer lacks is NULL. */
typedef struct llm_layer {
    const float *attn_norm; /* [dim] */
    const float *ffn_norm;  /* [dim] */
    const float *bq;        /* [n_heads*head_dim] added to q, or NULL */
    const float *bk;        /* [n_kv_heads*head_dim] added to k, or NULL */
    const float *bv;        /* [n_kv_heads*head_dim] added to v, or NULL */
    const float *q_norm;    /* [head_dim] RMSNorm weight of every q head
                               (before RoPE), or NULL */
    const float *k_norm;    /* [head_dim] the same for every k head */
    llm_tensor wq;          /* ne0=dim, ne1=n_heads*head_dim */
    llm_tensor wk;          /* ne0=dim, ne1=n_kv_heads*head_dim */
    llm_tensor wv;          /* ne0=dim, ne1=n_kv_heads*head_dim */
    llm_tensor wo;          /* ne0=n_heads*head_dim, ne1=dim */
    llm_tensor w_gate;      /* ne0=dim, ne1=ffn_dim */
    llm_tensor w_up;        /* ne0=dim, ne1=ffn_dim */
    llm_tensor w_down;      /* ne0=ffn_dim, ne1=dim */
    void *dev;              /* the backend's handle of the whole layer
                               (fused weights, norms), owned by the
                               backend; NULL on a host backend */
} llm_layer;

struct llm_model {
    llm_hparams hp;
    llm_tensor tok_embd;     /* ne0=dim, ne1=n_vocab (rows are embeddings) */
    llm_tensor output;       /* ne0=dim, ne1=n_vocab (tok_embd when tied) */
    const float *out_norm;   /* [dim] */
    llm_layer *layers;       /* [n_layers], owned */
    float *norms;            /* owned: every norm and bias vector, f32 */
    struct llm_tokenizer *tok; /* owned; NULL: ids only */
    void *file;              /* owned: the gguf or llama2c handle */
    void (*file_close)(void *file);
    struct llm_gguf *gguf;   /* file as a GGUF reader when it is one
                                (borrowed from file), else NULL */
    struct llm_backend *be;  /* owned */
    void *dev;               /* the backend's handle of the model-wide
                                pieces (head, RoPE table), owned by the
                                backend; NULL on a host backend */
    double *inv_freq;        /* owned: [head_dim/2] RoPE frequencies
                                base^(-2i/head_dim); double keeps large
                                angles exact */
    pthread_mutex_t lock;    /* serializes forwards on be */
    int32_t bos, eos;
    uint64_t n_params;
    uint64_t weight_bytes;   /* matrix bytes read per forward (no embd) */
    const char *weight_type; /* static, or a name from types */
    llm_type_set types;      /* tensor types beyond the built-in table
                                (llm_model_hooks); tables borrowed */
    /* The layers this model holds (llm_model_options span): only their
     * blocks are bound; the token embedding only when span_first == 0, the
     * final norm and output head only when span_last == n_layers - 1.
     * hp.n_layers stays the whole model's count. */
    int32_t span_first, span_last;
    char *path;              /* owned: the file opened (a split spawns
                                shard daemons over the same file) */
    char *backend_name;      /* owned: the backend asked for ("cpu") */
    int32_t n_threads_opt;   /* the n_threads option as given */
    int no_mmap;             /* llm_model_options.no_mmap: read, not map */
};

/* 1 when the model holds layer l (see span_first/span_last). */
static inline int llm_model_has_layer(const struct llm_model *m, int32_t l)
{
    return l >= m->span_first && l <= m->span_last;
}

/* Checks hyper-parameters for internal consistency and sane bounds. 0, or
 * LLM_EFORMAT with one line in err. */
int llm_hparams_validate(const llm_hparams *hp, char *err, size_t errlen);

/* Checks that t has the given shape; name is used in the error line. */
int llm_tensor_check(const llm_tensor *t, const char *name, int64_t ne0,
                     int64_t ne1, char *err, size_t errlen);

/* Loaders: fill every field of m except be, types and the counters, which
 * llm_model_open fills (types before it calls them: the GGUF loader reads
 * tensors of those types too). They bind only the span m->span_first..span_last
 * (span_last < 0: through the last layer, which they then store). On
 * failure they release what they took. */
int llm_model_load_gguf(struct llm_model *m, const char *path, char *err,
                        size_t errlen);
/* The GGUF loader over a caller's buffer, which must outlive the model
 * (tensors point into it). F32 tensors must land 4-byte aligned in memory
 * (an aligned buffer and GGUF's alignment give that); a misaligned one is
 * refused like a malformed file. */
int llm_model_load_gguf_memory(struct llm_model *m, const void *buf, size_t len,
                               char *err, size_t errlen);

/* Opens a GGUF model held in memory on the CPU backend with n_threads:
 * llm_model_open's checks and results for bytes instead of a file (the
 * fuzzer's entry point). Same ownership as llm_model_open; buf must
 * outlive the model. */
int llm_model_open_gguf_memory(const void *buf, size_t len, int32_t n_threads,
                               struct llm_model **out, char *err, size_t errlen);

/* What an internal caller (a test) may bring to opening a model beyond
 * llm_model_options; every field may be NULL. */
typedef struct llm_model_hooks {
    /* Tensor types beyond the built-in table (quant.h), which the file
     * reader, the loader and the model's type lookups then know. Borrowed:
     * the set and its table must outlive the model. */
    const llm_type_set *types;
    /* The backend to run on instead of creating the one opt->backend names
     * (a CPU backend with kernels for those types, cpu/cpu_backend.h). The
     * model owns it from the call on, and frees it when the open fails. */
    struct llm_backend *backend;
} llm_model_hooks;

/* llm_model_open with hooks (NULL: none, exactly llm_model_open). The
 * backend, given or created, must have a kernel for the type of every
 * tensor the model binds (backend.h, supports_type); a type it lacks fails
 * the open with LLM_EUNSUP and "model: tensor type T has no B kernel". */
int llm_model_open_hooked(const char *path, const llm_model_options *opt,
                          const llm_model_hooks *hooks, struct llm_model **out,
                          char *err, size_t errlen);

int llm_model_load_llama2c(struct llm_model *m, const char *path,
                           const char *tokenizer_path, char *err,
                           size_t errlen);

/* 0 while the model's backend is healthy; otherwise LLM_EBACKEND with the
 * reason in err. The CPU backend cannot fail; a device backend reports a
 * fault that happened asynchronously (the forward's results are void). */
int llm_model_backend_check(const struct llm_model *m, char *err, size_t errlen);

/* Makes dst's forwards run on src's worker threads (src NULL: on its
 * own again): llm_backend_share_threads under dst's model lock, so no
 * forward of dst is in flight; its return value. src's model need not be
 * idle. */
int llm_model_share_threads(struct llm_model *dst, const struct llm_model *src);

/* Allocates m->norms for n_floats and returns it; LLM_ENOMEM on failure. */
int llm_model_alloc_norms(struct llm_model *m, size_t n_floats, char *err,
                          size_t errlen);


#endif
