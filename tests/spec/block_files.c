/* block_files.c — see block_files.h. */
#include "block_files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "phasemark/engine.h"
#include "quant.h"

bf_spec bf_default(uint32_t dim, uint32_t vocab, uint32_t n_layers)
{
    bf_spec s;
    memset(&s, 0, sizeof s);
    s.n_layers = 1;
    s.dim = dim;
    s.ffn = 2 * dim;
    s.heads = dim >= 16 ? 4 : 1;
    s.kv_heads = dim >= 16 ? 2 : 1;
    s.block_size = 8;
    s.ctx = 256;
    s.n_feat = n_layers > 1 ? 2 : 1;
    s.feat[0] = 0;
    s.feat[1] = (int32_t)n_layers - 1;
    s.vocab = vocab;
    s.target_dim = dim;
    s.eps = 1e-5f;
    s.rope_base = 10000.0f;
    s.type = LLM_TYPE_F32;
    s.seed = 99;
    return s;
}

typedef struct gen {
    const bf_spec *s;
    const char *name;
    uint32_t tensor;
    double scale, offset;
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
        if (g->s->zero && !strcmp(g->s->zero, g->name)) {
            dst[i] = 0.0f;
            continue;
        }
        if (g->s->value) {
            dst[i] = g->s->value(g->s->value_user, g->name, row, i);
            continue;
        }
        uint64_t h = mix(g->s->seed ^ mix(((uint64_t)g->tensor << 40) ^ (row << 20) ^ i));
        double u = (double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0;
        dst[i] = (float)(g->offset + g->scale * u);
    }
    return 0;
}

#define MAX_TENSORS (4 + 9 * 5)

typedef struct writer {
    llm_gguf_writer *w;
    const bf_spec *s;
    gen gens[MAX_TENSORS];
    char names[MAX_TENSORS][64];
    uint32_t n;
    int rc;
} writer;

/* A matrix (ne1 > 0) or a vector (ne1 == 0) of ne0. */
static void add(writer *wr, const char *name, uint64_t ne0, uint64_t ne1, double scale,
                double offset)
{
    const bf_spec *s = wr->s;
    if (wr->rc || (s->omit && !strcmp(s->omit, name)))
        return;
    int reshape = s->reshape && !strcmp(s->reshape, name);
    int retype = s->retype && !strcmp(s->retype, name);
    gen *g = &wr->gens[wr->n];
    snprintf(wr->names[wr->n], sizeof wr->names[0], "%s", name);
    *g = (gen){s, wr->names[wr->n], wr->n, scale, offset};
    wr->n++;
    uint64_t ne[2] = {ne0, ne1};
    uint32_t type = LLM_TYPE_F32;
    if (ne1 == 0) {
        if (reshape)
            ne[0]++;
        if (retype)
            type = LLM_TYPE_F16;
    } else {
        if (reshape)
            ne[1]++;
        type = retype ? LLM_TYPE_Q4_0 : s->type;
    }
    wr->rc = llm_gguf_writer_add_tensor_gen(wr->w, name, type, ne1 ? 2 : 1, ne, gen_row, g);
}

static int write_meta(llm_gguf_writer *w, const bf_spec *s)
{
    const char *arch = s->arch ? s->arch : "phasemark-block";
    int rc = llm_gguf_writer_set_str(w, "general.architecture", arch, strlen(arch));
    rc |= llm_gguf_writer_set_str(w, "general.name", "test head", 9);
    rc |= llm_gguf_writer_set_str(w, "general.license", "MIT", 3);
#define U32(k, v) rc |= llm_gguf_writer_set_u32(w, "phasemark-block." k, v)
    U32("block_count", s->n_layers);
    U32("embedding_length", s->dim);
    U32("feed_forward_length", s->ffn);
    U32("attention.head_count", s->heads);
    U32("attention.head_count_kv", s->kv_heads);
    U32("context_length", s->ctx);
    U32("block_size", s->block_size);
    U32("target.vocab_size", s->vocab);
    U32("target.embedding_length", s->target_dim);
#undef U32
    rc |= llm_gguf_writer_set_f32(w, "phasemark-block.attention.layer_norm_rms_epsilon", s->eps);
    rc |= llm_gguf_writer_set_f32(w, "phasemark-block.rope.freq_base", s->rope_base);
    uint32_t layers[16];
    for (uint32_t i = 0; i < s->n_feat && i < 16; i++)
        layers[i] = (uint32_t)s->feat[i];
    rc |= llm_gguf_writer_set_arr(w, "phasemark-block.target.layers", LLM_GGUF_U32, layers,
                                  s->n_feat);
    return rc;
}

int bf_write(const char *path, const bf_spec *s)
{
    writer wr;
    memset(&wr, 0, sizeof wr);
    wr.s = s;
    if (llm_gguf_writer_new(&wr.w) != 0)
        return -1;
    int rc = write_meta(wr.w, s);
    uint64_t d = s->dim, hd = s->dim / s->heads, qd = s->heads * hd, kvd = s->kv_heads * hd;
    uint64_t fw = (uint64_t)(s->n_feat ? s->n_feat : 1) * d; /* a width even when none */
    add(&wr, "fc.weight", fw, d, sqrt(3.0 / (double)fw), 0.0);
    add(&wr, "fc_norm.weight", d, 0, 0.2, 1.0);
    add(&wr, "mask_embd.weight", d, 0, 1.0, 0.0);
    for (uint32_t l = 0; l < s->n_layers; l++) {
        char n[64];
#define T(suffix, ne0, ne1, sc, off) \
    (snprintf(n, sizeof n, "blk.%u." suffix, (unsigned)l), add(&wr, n, ne0, ne1, sc, off))
        T("attn_norm.weight", d, 0, 0.2, 1.0);
        T("attn_q.weight", d, qd, sqrt(3.0 / (double)d), 0.0);
        T("attn_k.weight", d, kvd, sqrt(3.0 / (double)d), 0.0);
        T("attn_v.weight", d, kvd, sqrt(3.0 / (double)d), 0.0);
        T("attn_output.weight", qd, d, sqrt(3.0 / (double)qd), 0.0);
        T("ffn_norm.weight", d, 0, 0.2, 1.0);
        T("ffn_gate.weight", d, s->ffn, sqrt(3.0 / (double)d), 0.0);
        T("ffn_up.weight", d, s->ffn, sqrt(3.0 / (double)d), 0.0);
        T("ffn_down.weight", s->ffn, d, sqrt(3.0 / (double)s->ffn), 0.0);
#undef T
    }
    add(&wr, "output_norm.weight", d, 0, 0.2, 1.0);
    char err[256] = "";
    if (rc == 0 && wr.rc == 0)
        rc = llm_gguf_writer_write(wr.w, path, err, sizeof err);
    else
        snprintf(err, sizeof err, "%s", llm_gguf_writer_error(wr.w));
    llm_gguf_writer_free(wr.w);
    if (rc || wr.rc) {
        fprintf(stderr, "bf_write %s: %s\n", path, err);
        return -1;
    }
    return 0;
}

void bf_write_for(const char *path, const llm_model *m, uint32_t block, uint64_t seed)
{
    llm_model_info info;
    llm_model_get_info(m, &info);
    bf_spec s = bf_default((uint32_t)info.dim, (uint32_t)info.n_vocab, (uint32_t)info.n_layers);
    s.block_size = block;
    s.seed = seed;
    if (bf_write(path, &s) != 0)
        exit(1);
}
