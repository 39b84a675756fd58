/* block.c — pm-modelwriter synth --arch phasemark-block: a random block
 * drafter head for a given target, so tests and trials have head files
 * without a trained one.
 *
 *   pm-modelwriter synth --arch phasemark-block --target T.gguf -o OUT
 *       --layers 1,3,5 [--block-size 16] [--head-layers 1] [--ffn F]
 *       [--heads H] [--kv-heads K] [--type f16] [--seed S] [--eps E]
 *
 * Width, vocabulary, RoPE base and context come from the target (the
 * head must share its embedding and output head); heads and the
 * feed-forward width default to the target's. Weights are uniform in
 * +-sqrt(3 / fan_in) from the seed, norms 1 +- 0.1, the mask embedding
 * uniform in +-1: a head that runs and is refused nowhere, with low
 * acceptance. The layout is docs/model-files.md's.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "modelwriter.h"
#include "quant.h"

#define BLOCK_ARCH "phasemark-block"
#define MAX_FEAT 8

typedef struct block_opts {
    const char *out, *target;
    uint32_t layers[MAX_FEAT], n_layers;
    uint32_t block_size, head_layers, ffn, heads, kv_heads, type;
    uint64_t seed;
    float eps;
} block_opts;

/* What the head takes from its target. */
typedef struct target_hp {
    uint32_t dim, vocab, layers, heads, kv_heads, ffn, ctx;
    float rope_base;
} target_hp;

typedef struct bgen {
    uint64_t seed;
    uint32_t tensor;
    float scale, offset;
} bgen;

static uint64_t splitmix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int bgen_row(void *ctx, uint64_t row, float *dst, uint64_t n)
{
    const bgen *g = ctx;
    uint64_t base = splitmix(g->seed ^ splitmix(0xb10c0000u + g->tensor));
    for (uint64_t i = 0; i < n; i++) {
        uint64_t z = splitmix(base ^ (row * n + i));
        float u = (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
        dst[i] = g->offset + g->scale * u;
    }
    return 0;
}

/* "1,3,5" into o->layers. */
static int parse_layers(const char *s, block_opts *o)
{
    o->n_layers = 0;
    const char *p = s;
    while (p && *p) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (errno || end == p || *p == '-' || v > 1u << 20 || (*end && *end != ',') ||
            o->n_layers == MAX_FEAT) {
            fprintf(stderr, MW_NAME ": --layers needs 1..%d comma-separated layer indices (got '%s')\n",
                    MAX_FEAT, s);
            return -1;
        }
        o->layers[o->n_layers++] = (uint32_t)v;
        p = *end ? end + 1 : end;
    }
    if (o->n_layers == 0) {
        fprintf(stderr, MW_NAME ": --layers needs 1..%d comma-separated layer indices (got '%s')\n",
                MAX_FEAT, s ? s : "");
        return -1;
    }
    return 0;
}

static int parse_opt(block_opts *o, const char *opt, const char *val)
{
    if (!strcmp(opt, "-o"))
        return val ? (o->out = val, 0) : -1;
    if (!strcmp(opt, "--target"))
        return val ? (o->target = val, 0) : -1;
    if (!strcmp(opt, "--arch"))
        return val && !strcmp(val, BLOCK_ARCH) ? 0 : -1;
    if (!strcmp(opt, "--layers"))
        return parse_layers(val, o);
    if (!strcmp(opt, "--block-size"))
        return mw_parse_u32(opt, val, 1, 16, &o->block_size);
    if (!strcmp(opt, "--head-layers"))
        return mw_parse_u32(opt, val, 1, 3, &o->head_layers);
    if (!strcmp(opt, "--ffn"))
        return mw_parse_u32(opt, val, 1, 1u << 18, &o->ffn);
    if (!strcmp(opt, "--heads"))
        return mw_parse_u32(opt, val, 1, 1024, &o->heads);
    if (!strcmp(opt, "--kv-heads"))
        return mw_parse_u32(opt, val, 1, 1024, &o->kv_heads);
    if (!strcmp(opt, "--seed"))
        return mw_parse_u64(opt, val, &o->seed);
    if (!strcmp(opt, "--eps"))
        return mw_parse_f32(opt, val, 1e-12f, 1.0f, &o->eps);
    if (!strcmp(opt, "--type")) {
        if (mw_parse_type(val, &o->type))
            return -1;
        if (o->type != LLM_TYPE_F32 && o->type != LLM_TYPE_F16 && o->type != LLM_TYPE_Q8_0) {
            fprintf(stderr, MW_NAME ": a block head's matrices are f32, f16 or q8_0 (got '%s')\n", val);
            return -1;
        }
        return 0;
    }
    fprintf(stderr, MW_NAME ": synth --arch " BLOCK_ARCH ": unknown option '%s'\n", opt);
    return -1;
}

static uint32_t meta_or(const llm_gguf *g, const char *arch, const char *k, uint32_t def)
{
    char key[128];
    uint32_t v;
    snprintf(key, sizeof key, "%s.%s", arch, k);
    return llm_gguf_get_u32(g, key, &v) == 0 ? v : def;
}

static int read_target(const char *path, target_hp *t)
{
    llm_gguf *g;
    char err[256], arch[64];
    if (llm_gguf_open(path, &g, err, sizeof err) != 0) {
        fprintf(stderr, MW_NAME ": --target: %s\n", err);
        return -1;
    }
    const char *s;
    size_t len;
    const llm_gguf_tensor *e = llm_gguf_find_tensor(g, "token_embd.weight");
    if (llm_gguf_get_str(g, "general.architecture", &s, &len) != 0 || len >= sizeof arch || !e) {
        fprintf(stderr, MW_NAME ": --target: %s is not a model with a token embedding\n", path);
        llm_gguf_close(g);
        return -1;
    }
    memcpy(arch, s, len);
    arch[len] = '\0';
    t->dim = (uint32_t)e->ne[0];
    t->vocab = (uint32_t)e->ne[1];
    t->layers = meta_or(g, arch, "block_count", 0);
    t->heads = meta_or(g, arch, "attention.head_count", 1);
    t->kv_heads = meta_or(g, arch, "attention.head_count_kv", t->heads);
    t->ffn = meta_or(g, arch, "feed_forward_length", 2 * t->dim);
    t->ctx = meta_or(g, arch, "context_length", 2048);
    char key[128];
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    if (llm_gguf_get_f32(g, key, &t->rope_base) != 0)
        t->rope_base = 10000.0f;
    llm_gguf_close(g);
    return 0;
}

static int write_head(const block_opts *o, const target_hp *t)
{
    llm_gguf_writer *w;
    if (llm_gguf_writer_new(&w) != 0)
        return -1;
    int rc = llm_gguf_writer_set_str(w, "general.architecture", BLOCK_ARCH, strlen(BLOCK_ARCH));
    rc |= llm_gguf_writer_set_str(w, "general.name", "random block head", 17);
    rc |= llm_gguf_writer_set_str(w, "general.license", "MIT", 3);
#define U32(k, v) rc |= llm_gguf_writer_set_u32(w, BLOCK_ARCH "." k, v)
    U32("block_count", o->head_layers);
    U32("embedding_length", t->dim);
    U32("feed_forward_length", o->ffn);
    U32("attention.head_count", o->heads);
    U32("attention.head_count_kv", o->kv_heads);
    U32("context_length", t->ctx);
    U32("block_size", o->block_size);
    U32("target.vocab_size", t->vocab);
    U32("target.embedding_length", t->dim);
#undef U32
    rc |= llm_gguf_writer_set_f32(w, BLOCK_ARCH ".attention.layer_norm_rms_epsilon", o->eps);
    rc |= llm_gguf_writer_set_f32(w, BLOCK_ARCH ".rope.freq_base", t->rope_base);
    rc |= llm_gguf_writer_set_arr(w, BLOCK_ARCH ".target.layers", LLM_GGUF_U32, o->layers,
                                  o->n_layers);
    uint64_t d = t->dim, hd = d / o->heads, q = hd * o->heads, kv = hd * o->kv_heads;
    uint64_t fw = (uint64_t)o->n_layers * d;
    bgen gens[4 + 9 * 3];
    uint32_t n = 0;
    unsigned fallbacks = 0;
#define ADD(name, ne0, ne1, sc, off)                                                          \
    do {                                                                                      \
        uint64_t ne_[2] = {ne0, ne1};                                                         \
        uint32_t dims_ = (ne1) > 1 ? 2 : 1;                                                   \
        gens[n] = (bgen){o->seed, n, sc, off};                                                \
        rc |= llm_gguf_writer_add_tensor_gen(w, name, mw_weight_type(o->type, dims_, ne0,     \
                                                                     &fallbacks),             \
                                             dims_, ne_, bgen_row, &gens[n]);                 \
        n++;                                                                                  \
    } while (0)
    ADD("fc.weight", fw, d, sqrtf(3.0f / (float)fw), 0.0f);
    ADD("fc_norm.weight", d, 1, 0.1f, 1.0f);
    ADD("mask_embd.weight", d, 1, 1.0f, 0.0f);
    for (uint32_t l = 0; l < o->head_layers; l++) {
        char nm[9][64];
        static const char *const sfx[9] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                           "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
        for (int i = 0; i < 9; i++)
            snprintf(nm[i], sizeof nm[i], "blk.%u.%s.weight", (unsigned)l, sfx[i]);
        ADD(nm[0], d, 1, 0.1f, 1.0f);
        ADD(nm[1], d, q, sqrtf(3.0f / (float)d), 0.0f);
        ADD(nm[2], d, kv, sqrtf(3.0f / (float)d), 0.0f);
        ADD(nm[3], d, kv, sqrtf(3.0f / (float)d), 0.0f);
        ADD(nm[4], q, d, sqrtf(3.0f / (float)q), 0.0f);
        ADD(nm[5], d, 1, 0.1f, 1.0f);
        ADD(nm[6], d, o->ffn, sqrtf(3.0f / (float)d), 0.0f);
        ADD(nm[7], d, o->ffn, sqrtf(3.0f / (float)d), 0.0f);
        ADD(nm[8], o->ffn, d, sqrtf(3.0f / (float)o->ffn), 0.0f);
    }
    ADD("output_norm.weight", d, 1, 0.1f, 1.0f);
#undef ADD
    char err[256] = "";
    if (rc == 0)
        rc = llm_gguf_writer_write(w, o->out, err, sizeof err);
    else
        snprintf(err, sizeof err, "%s", llm_gguf_writer_error(w));
    llm_gguf_writer_free(w);
    if (rc) {
        fprintf(stderr, MW_NAME ": %s\n", err);
        return -1;
    }
    if (fallbacks)
        fprintf(stderr, MW_NAME ": %u matrices kept f32 (rows not whole blocks of the type)\n",
                fallbacks);
    return 0;
}

int mw_block(int argc, char **argv)
{
    block_opts o;
    memset(&o, 0, sizeof o);
    o.block_size = 16;
    o.head_layers = 1;
    o.type = LLM_TYPE_F16;
    o.seed = 1;
    o.eps = 1e-5f;
    for (int i = 2; i < argc; i += 2)
        if (i + 1 >= argc || parse_opt(&o, argv[i], argv[i + 1])) {
            if (i + 1 >= argc)
                fprintf(stderr, MW_NAME ": option %s needs a value\n", argv[i]);
            return 2;
        }
    if (!o.out || !o.target || o.n_layers == 0) {
        fprintf(stderr, MW_NAME ": synth --arch " BLOCK_ARCH " needs -o, --target and --layers\n");
        return 2;
    }
    target_hp t;
    if (read_target(o.target, &t))
        return 1;
    for (uint32_t i = 0; i < o.n_layers; i++)
        if (o.layers[i] >= t.layers) {
            fprintf(stderr, MW_NAME ": --layers: layer %u is past the target's %u layers\n",
                    (unsigned)o.layers[i], (unsigned)t.layers);
            return 2;
        }
    if (!o.heads)
        o.heads = t.heads;
    if (!o.kv_heads)
        o.kv_heads = o.heads == t.heads ? t.kv_heads : o.heads;
    if (!o.ffn)
        o.ffn = t.ffn;
    if (t.dim % o.heads || (t.dim / o.heads) % 2 || o.heads % o.kv_heads) {
        fprintf(stderr, MW_NAME ": the target's width %u must be --heads times an even head size, "
                        "and --kv-heads must divide --heads\n", (unsigned)t.dim);
        return 2;
    }
    return write_head(&o, &t) ? 1 : 0;
}
