/* llama2c.c — legacy llama2.c checkpoint reader (see llama2c.h).
 *
 * The header fixes the length of every array, so validation is arithmetic:
 * check the header values, compute the exact file length in uint64 with
 * overflow checks, compare it to the real length, then lay out tensor views
 * over the mapping in run.c's order. Nothing is copied.
 */
#define _POSIX_C_SOURCE 200809L

#include "errtext.h"
#include "llama2c.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"

#define L2C_HEADER_BYTES 28u
/* Bounds that keep every product below 2^63 with room to spare and reject
 * garbage headers early (no real llama2.c model comes near them). */
#define L2C_MAX_DIM (1u << 16)
#define L2C_MAX_LAYERS 1024u
#define L2C_MAX_VOCAB (1u << 22)
#define L2C_MAX_SEQ (1u << 22)

/* Per-layer tensor kinds, in file order. */
enum { K_ATTN_NORM, K_Q, K_K, K_V, K_O, K_FFN_NORM, K_GATE, K_DOWN, K_UP, K_COUNT };

static const char *const k_layer_names[K_COUNT] = {
    "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_down", "ffn_up",
};

struct llm_llama2c {
    const unsigned char *base;
    size_t size;
    int mapped;
    llm_llama2c_config cfg;
    uint64_t n_tensors;
    llm_gguf_tensor *tensors; /* fixed order; see llm_llama2c_tensor_at */
    char *names;              /* NUL-terminated names, one slot per tensor */
};

#define NAME_SLOT 48

static int l2c_fail(char *err, size_t errlen, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int l2c_fail(char *err, size_t errlen, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    llm__verrf(err, errlen, "llama2c: ", fmt, ap);
    va_end(ap);
    return status;
}

static int32_t load_i32(const unsigned char *p)
{
    uint32_t u = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* Reads and checks the header into cfg. */
static int read_config(const unsigned char *p, size_t len, llm_llama2c_config *cfg, char *err, size_t errlen)
{
    if (len < L2C_HEADER_BYTES)
        return l2c_fail(err, errlen, LLM_EFORMAT, "truncated header (%zu bytes, need 28)", len);
    int32_t h[7];
    for (int i = 0; i < 7; i++)
        h[i] = load_i32(p + 4 * i);
    static const char *const names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                                         "vocab_size", "seq_len"};
    static const uint32_t max[7] = {L2C_MAX_DIM, 4 * L2C_MAX_DIM, L2C_MAX_LAYERS, L2C_MAX_DIM, L2C_MAX_DIM,
                                    L2C_MAX_VOCAB, L2C_MAX_SEQ};
    for (int i = 0; i < 7; i++) {
        int64_t v = h[i];
        if (i == 5 && v < 0)
            v = -v;
        if (v <= 0 || v > (int64_t)max[i])
            return l2c_fail(err, errlen, LLM_EFORMAT, "header %s = %d is out of range (1..%u)", names[i],
                            (int)h[i], max[i]);
    }
    cfg->dim = (uint32_t)h[0];
    cfg->hidden_dim = (uint32_t)h[1];
    cfg->n_layers = (uint32_t)h[2];
    cfg->n_heads = (uint32_t)h[3];
    cfg->n_kv_heads = (uint32_t)h[4];
    cfg->shared_classifier = h[5] > 0;
    cfg->vocab_size = (uint32_t)(h[5] > 0 ? h[5] : -(int64_t)h[5]);
    cfg->seq_len = (uint32_t)h[6];
    cfg->rope_theta = 10000.0f;
    cfg->rms_eps = 1e-5f;
    if (cfg->dim % cfg->n_heads != 0 || (cfg->dim / cfg->n_heads) % 2 != 0)
        return l2c_fail(err, errlen, LLM_EFORMAT, "dim %u is not n_heads %u times an even head size", cfg->dim,
                        cfg->n_heads);
    if (cfg->n_kv_heads > cfg->n_heads || cfg->n_heads % cfg->n_kv_heads != 0)
        return l2c_fail(err, errlen, LLM_EFORMAT, "n_kv_heads %u does not divide n_heads %u", cfg->n_kv_heads,
                        cfg->n_heads);
    return 0;
}

typedef struct layout {
    uint64_t ne0[K_COUNT], ne1[K_COUNT]; /* per-layer shapes */
    uint64_t total_floats;               /* everything after the header */
} layout;

/* Computes shapes and the exact float count. Bounds in read_config keep
 * every product far below 2^63, so plain arithmetic cannot overflow. */
static void compute_layout(const llm_llama2c_config *c, layout *l)
{
    uint64_t dim = c->dim, hid = c->hidden_dim, kv = (uint64_t)c->dim * c->n_kv_heads / c->n_heads;
    uint64_t ne0[K_COUNT] = {dim, dim, dim, dim, dim, dim, dim, hid, dim};
    uint64_t ne1[K_COUNT] = {1, dim, kv, kv, dim, 1, hid, dim, hid};
    memcpy(l->ne0, ne0, sizeof ne0);
    memcpy(l->ne1, ne1, sizeof ne1);
    uint64_t per_layer = 0;
    for (int k = 0; k < K_COUNT; k++)
        per_layer += ne0[k] * ne1[k];
    uint64_t head = dim / c->n_heads;
    l->total_floats = (uint64_t)c->vocab_size * dim + per_layer * c->n_layers + dim +
                      2 * (uint64_t)c->seq_len * (head / 2) + (c->shared_classifier ? 0 : (uint64_t)c->vocab_size * dim);
}

static void set_tensor(llm_llama2c *m, uint64_t i, const char *name, uint32_t n_dims, uint64_t ne0, uint64_t ne1,
                       const unsigned char *data)
{
    llm_gguf_tensor *t = &m->tensors[i];
    char *slot = m->names + i * NAME_SLOT;
    snprintf(slot, NAME_SLOT, "%s", name);
    t->name = slot;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = t->ne[3] = 1;
    t->type = LLM_TYPE_F32;
    t->data = data;
    t->nbytes = ne0 * ne1 * 4;
}

/* Lays out tensor views; the file order is by tensor kind across layers
 * (all rms_att, then all wq, ...), the exposed order is by layer. */
static void place(llm_llama2c *m, const layout *l)
{
    const llm_llama2c_config *c = &m->cfg;
    const unsigned char *p = m->base + L2C_HEADER_BYTES;
    uint64_t dim = c->dim;
    set_tensor(m, 0, "token_embd.weight", 2, dim, c->vocab_size, p);
    p += (uint64_t)c->vocab_size * dim * 4;
    for (int k = 0; k < K_COUNT; k++) {
        uint64_t n = l->ne0[k] * l->ne1[k];
        for (uint32_t layer = 0; layer < c->n_layers; layer++) {
            char name[NAME_SLOT];
            snprintf(name, sizeof name, "blk.%u.%s.weight", layer, k_layer_names[k]);
            uint32_t dims = l->ne1[k] == 1 ? 1 : 2;
            set_tensor(m, 1 + (uint64_t)layer * K_COUNT + (uint64_t)k, name, dims, l->ne0[k], l->ne1[k], p);
            p += n * 4;
        }
    }
    uint64_t i = 1 + (uint64_t)c->n_layers * K_COUNT;
    set_tensor(m, i, "output_norm.weight", 1, dim, 1, p);
    p += dim * 4;
    p += 2 * (uint64_t)c->seq_len * (dim / c->n_heads / 2) * 4; /* freq_cis_real, freq_cis_imag */
    if (!c->shared_classifier)
        set_tensor(m, i + 1, "output.weight", 2, dim, c->vocab_size, p);
}

static int open_buffer(const unsigned char *buf, size_t len, int mapped, llm_llama2c **out, char *err, size_t errlen)
{
    llm_llama2c_config cfg;
    layout l;
    int r = read_config(buf, len, &cfg, err, errlen);
    if (!r) {
        compute_layout(&cfg, &l);
        uint64_t want = L2C_HEADER_BYTES + l.total_floats * 4;
        if (len < want)
            r = l2c_fail(err, errlen, LLM_EFORMAT, "truncated: header implies %llu bytes, file has %zu",
                         (unsigned long long)want, len);
        else if (len > want)
            r = l2c_fail(err, errlen, LLM_EFORMAT,
                         "%zu trailing bytes after %llu (not a legacy llama2.c checkpoint?)", len - (size_t)want,
                         (unsigned long long)want);
    }
    llm_llama2c *m = r ? NULL : calloc(1, sizeof *m);
    if (!r && !m)
        r = l2c_fail(err, errlen, LLM_ENOMEM, "out of memory");
    if (!r) {
        m->base = buf;
        m->size = len;
        m->mapped = mapped;
        m->cfg = cfg;
        m->n_tensors = 2 + (uint64_t)cfg.n_layers * K_COUNT + (cfg.shared_classifier ? 0 : 1);
        m->tensors = calloc((size_t)m->n_tensors, sizeof *m->tensors);
        m->names = calloc((size_t)m->n_tensors, NAME_SLOT);
        if (!m->tensors || !m->names)
            r = l2c_fail(err, errlen, LLM_ENOMEM, "out of memory");
    }
    if (r) {
        if (m)
            m->mapped = 0;
        llm_llama2c_close(m);
        if (mapped)
            munmap((void *)buf, len);
        return r;
    }
    place(m, &l);
    if (err && errlen)
        err[0] = '\0';
    *out = m;
    return 0;
}

int llm_llama2c_open_memory(const void *buf, size_t len, llm_llama2c **out, char *err, size_t errlen)
{
    *out = NULL;
    if (((uintptr_t)buf & 3u) != 0)
        return l2c_fail(err, errlen, LLM_EFORMAT, "buffer is not 4-byte aligned");
    return open_buffer(buf, len, 0, out, err, errlen);
}

int llm_llama2c_open(const char *path, llm_llama2c **out, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return l2c_fail(err, errlen, LLM_EIO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return l2c_fail(err, errlen, LLM_EIO, "'%s' is not a readable regular file", path);
    }
    if ((uint64_t)st.st_size < L2C_HEADER_BYTES) {
        close(fd);
        return l2c_fail(err, errlen, LLM_EFORMAT, "truncated header (%lld bytes, need 28)",
                        (long long)st.st_size);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int saved = errno;
    close(fd);
    if (p == MAP_FAILED)
        return l2c_fail(err, errlen, LLM_EIO, "cannot map '%s': %s", path, strerror(saved));
    return open_buffer(p, (size_t)st.st_size, 1, out, err, errlen);
}

void llm_llama2c_close(llm_llama2c *m)
{
    if (!m)
        return;
    if (m->mapped)
        munmap((void *)m->base, m->size);
    free(m->tensors);
    free(m->names);
    free(m);
}

const llm_llama2c_config *llm_llama2c_get_config(const llm_llama2c *m)
{
    return &m->cfg;
}

uint64_t llm_llama2c_tensor_count(const llm_llama2c *m)
{
    return m->n_tensors;
}

const llm_gguf_tensor *llm_llama2c_tensor_at(const llm_llama2c *m, uint64_t i)
{
    return i < m->n_tensors ? &m->tensors[i] : NULL;
}

const llm_gguf_tensor *llm_llama2c_find_tensor(const llm_llama2c *m, const char *name)
{
    /* At most a few thousand tensors, looked up once at model load. */
    for (uint64_t i = 0; name && i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return &m->tensors[i];
    return NULL;
}
