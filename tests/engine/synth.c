/* synth.c — see synth.h. */
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "phasemark/engine.h"
#include "quant.h"

synth_spec synth_default(void)
{
    synth_spec s;
    memset(&s, 0, sizeof s);
    s.hp.dim = 64;
    s.hp.n_layers = 2;
    s.hp.n_heads = 4;
    s.hp.n_kv_heads = 2;
    s.hp.ffn = 96;
    s.hp.vocab = 160;
    s.hp.ctx = 64;
    s.hp.eps = 1e-5;
    s.hp.rope_base = 10000.0;
    s.hp.rope_factor = 1.0;
    s.type = 0;
    s.embd_type = 0;
    s.seed = 1234;
    return s;
}

void synth_path(char *buf, size_t cap, const char *tag)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, cap, "%s/pm_engine_%s_%ld.gguf", dir && *dir ? dir : "/tmp", tag, (long)getpid());
}

typedef struct gen {
    uint64_t seed;
    uint32_t tensor;
    double scale;  /* uniform half-width */
    double offset; /* added (1 for norms) */
    const llm_type_traits *through; /* round rows through it; NULL: none */
} gen;

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int gen_row(void *ctx, uint64_t row, float *dst, uint64_t n)
{
    const gen *g = ctx;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t h = mix(g->seed ^ mix(((uint64_t)g->tensor << 40) ^ (row << 20) ^ i));
        double u = (double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0;
        dst[i] = (float)(g->offset + g->scale * u);
    }
    if (!g->through)
        return 0;
    uint64_t bytes;
    if (llm_type_traits_row_bytes(g->through, n, &bytes) != 0)
        return -1;
    void *q = malloc(bytes ? (size_t)bytes : 1);
    if (!q)
        return -1;
    g->through->from_f32(dst, q, (size_t)n);
    g->through->to_f32(q, dst, (size_t)n);
    free(q);
    return 0;
}

typedef struct writer_ctx {
    llm_gguf_writer *w;
    gen *gens;
    uint32_t n;
    uint64_t seed;
    const char *omit;
    const llm_type_traits *through;
} writer_ctx;

/* Adds one tensor; norms (offset 1) are never rounded through a type. */
static int add(writer_ctx *c, const char *name, uint32_t type, uint64_t ne0,
               uint64_t ne1, double scale, double offset)
{
    if (c->omit && strcmp(c->omit, name) == 0)
        return 0;
    gen *g = &c->gens[c->n];
    g->seed = c->seed;
    g->tensor = c->n++;
    g->scale = scale;
    g->offset = offset;
    g->through = offset == 0.0 ? c->through : NULL;
    uint64_t ne[2] = {ne0, ne1};
    return llm_gguf_writer_add_tensor_gen(c->w, name, type, ne1 > 1 ? 2 : 1, ne, gen_row, g);
}

static const char *arch_of(const synth_spec *s)
{
    if (s->arch)
        return s->arch;
    return s->hp.arch == REF_QWEN2 ? "qwen2" : s->hp.arch == REF_QWEN3 ? "qwen3" : "llama";
}

static int add_meta(llm_gguf_writer *w, const synth_spec *s)
{
    const ref_hparams *hp = &s->hp;
    const char *arch = arch_of(s);
    char key[96];
    int rc = llm_gguf_writer_set_str(w, "general.architecture", arch, strlen(arch));
#define KEY(k) (snprintf(key, sizeof key, "%s.%s", arch, k), key)
    rc |= llm_gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)hp->dim);
    rc |= llm_gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)hp->n_layers);
    rc |= llm_gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)hp->ffn);
    rc |= llm_gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)hp->n_heads);
    rc |= llm_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)hp->n_kv_heads);
    rc |= llm_gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)hp->ctx);
    rc |= llm_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)hp->eps);
    rc |= llm_gguf_writer_set_f32(w, KEY("rope.freq_base"), (float)hp->rope_base);
    if (hp->head_dim) {
        uint32_t vl = (uint32_t)hp->head_dim - ((s->quirks & SYNTH_VALUE_LENGTH) ? 1u : 0u);
        rc |= llm_gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)hp->head_dim);
        rc |= llm_gguf_writer_set_u32(w, KEY("attention.value_length"), vl);
    }
    if (s->quirks & SYNTH_WINDOW_ZERO)
        rc |= llm_gguf_writer_set_u32(w, KEY("attention.sliding_window"), 0);
    else if (s->quirks & SYNTH_WINDOW_NEG)
        rc |= llm_gguf_writer_set_i32(w, KEY("attention.sliding_window"), -4);
    else if (s->quirks & SYNTH_WINDOW_F32)
        rc |= llm_gguf_writer_set_f32(w, KEY("attention.sliding_window"), 5.0f);
    else if (hp->window > 0)
        rc |= llm_gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)hp->window);
    if (hp->rope_factor != 1.0) {
        rc |= llm_gguf_writer_set_str(w, KEY("rope.scaling.type"), "linear", 6);
        rc |= llm_gguf_writer_set_f32(w, KEY("rope.scaling.factor"), (float)hp->rope_factor);
    }
#undef KEY
    return rc;
}

/* The architecture's per-layer vectors (and the quirks' malformed ones):
 * biases uniform in +-0.5, per-head norm weights 1 +- 0.2. */
static int add_extras(writer_ctx *c, const synth_spec *s, int l, uint64_t Q, uint64_t KV,
                      uint64_t hd)
{
    char name[96];
    int rc = 0;
    if (s->hp.arch == REF_QWEN2 || (s->quirks & (SYNTH_BIAS | SYNTH_SHORT_BIAS))) {
        const char *what[3] = {"attn_q", "attn_k", "attn_v"};
        uint64_t n[3] = {Q, KV, KV};
        if (s->quirks & SYNTH_SHORT_BIAS)
            n[1]--;
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.bias", l, what[i]);
            rc |= add(c, name, 0, n[i], 1, 0.5, 0.0);
        }
    }
    if (s->hp.arch == REF_QWEN3) {
        snprintf(name, sizeof name, "blk.%d.attn_q_norm.weight", l);
        rc |= add(c, name, 0, hd, 1, 0.2, 1.0);
        snprintf(name, sizeof name, "blk.%d.attn_k_norm.weight", l);
        rc |= add(c, name, 0, hd, 1, 0.2, 1.0);
    }
    return rc;
}

int synth_write(const char *path, const synth_spec *s)
{
    const ref_hparams *hp = &s->hp;
    uint64_t D = (uint64_t)hp->dim, hd = (uint64_t)ref_head_dim(hp), F = (uint64_t)hp->ffn;
    uint64_t KV = hd * (uint64_t)hp->n_kv_heads, Q = hd * (uint64_t)hp->n_heads;
    writer_ctx c = {NULL, calloc((size_t)(16 * hp->n_layers + 8), sizeof(gen)), 0, s->seed, s->omit,
                    s->through};
    if (!c.gens || llm_gguf_writer_new(&c.w) != 0) {
        free(c.gens);
        fprintf(stderr, "synth: out of memory\n");
        return -1;
    }
    llm_gguf_writer_set_types(c.w, s->types);
    int rc = add_meta(c.w, s);
    rc |= add(&c, "token_embd.weight", s->embd_type, D, (uint64_t)hp->vocab, 1.0, 0.0);
    char name[96];
    uint32_t hi = s->type_hi ? s->type_hi : s->type;
    for (int l = 0; l < hp->n_layers; l++) {
        struct { const char *what; uint64_t ne0, ne1; double scale, offset; uint32_t type; } t[] = {
            {"attn_norm", D, 1, 0.2, 1.0, 0},
            {"attn_q", D, Q, sqrt(3.0 / D), 0, s->type},
            {"attn_k", D, KV, sqrt(3.0 / D), 0, s->type},
            {"attn_v", D, KV, sqrt(3.0 / D), 0, hi},
            {"attn_output", Q, D, sqrt(3.0 / Q), 0, s->type},
            {"ffn_norm", D, 1, 0.2, 1.0, 0},
            {"ffn_gate", D, F, sqrt(3.0 / D), 0, s->type},
            {"ffn_up", D, F, sqrt(3.0 / D), 0, s->type},
            {"ffn_down", F, D, sqrt(3.0 / F), 0, hi},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, t[i].what);
            rc |= add(&c, name, t[i].type, t[i].ne0, t[i].ne1, t[i].scale, t[i].offset);
        }
        rc |= add_extras(&c, s, l, Q, KV, hd);
    }
    rc |= add(&c, "output_norm.weight", 0, D, 1, 0.2, 1.0);
    float freqs[512];
    uint64_t half = hd / 2;
    if (hp->rope_freqs && half <= 512) {
        for (uint64_t i = 0; i < half; i++)
            freqs[i] = ref_rope_freq((int)i);
        if (hp->rope_freqs == 2)
            freqs[1] = 0.0f; /* a malformed file */
        rc |= llm_gguf_writer_add_tensor_f32(c.w, "rope_freqs.weight", LLM_TYPE_F32, 1, &half, freqs);
    }
    if (!s->tied)
        rc |= add(&c, "output.weight", hi, D, (uint64_t)hp->vocab, sqrt(3.0 / D), 0);
    char err[256] = "";
    if (rc == 0)
        rc = llm_gguf_writer_write(c.w, path, err, sizeof err);
    if (rc)
        fprintf(stderr, "synth: %s %s\n", err, llm_gguf_writer_error(c.w));
    llm_gguf_writer_free(c.w);
    free(c.gens);
    return rc ? -1 : 0;
}

llm_model *synth_open(const char *path, int n_threads)
{
    llm_model_options o = LLM_MODEL_OPTIONS_INIT;
    o.n_threads = n_threads;
    llm_model *m;
    char err[256];
    int rc = llm_model_open(path, &o, &m, err, sizeof err);
    if (rc) {
        fprintf(stderr, "open %s: %s (%s)\n", path, err, llm_strerror(rc));
        exit(1);
    }
    return m;
}

llm_session *synth_session(llm_model *m, int n_ctx, int n_batch, uint64_t req)
{
    llm_session_options o = LLM_SESSION_OPTIONS_INIT;
    o.n_ctx = n_ctx;
    o.n_batch = n_batch;
    o.request = req;
    llm_session *s;
    char err[256];
    int rc = llm_session_create(m, &o, &s, err, sizeof err);
    if (rc) {
        fprintf(stderr, "session: %s (%s)\n", err, llm_strerror(rc));
        exit(1);
    }
    return s;
}

const llm_gguf_tensor *synth_find_gguf(const void *h, const char *name)
{
    return llm_gguf_find_tensor(h, name);
}

uint32_t synth_type(const char *name)
{
    uint32_t t;
    if (llm_type_parse(name, &t) != 0) {
        fprintf(stderr, "unknown type %s\n", name);
        exit(2);
    }
    return t;
}
