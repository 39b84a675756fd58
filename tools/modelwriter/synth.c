/* synth.c — `pm-modelwriter synth`: a llama-architecture GGUF model of any
 * shape with deterministic random weights and a byte-fallback vocabulary.
 *
 * Weights. Element i (row-major, ne[0] contiguous) of tensor number t (in
 * the order written: token_embd, then per layer attn_norm, attn_q, attn_k,
 * attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down, then
 * output_norm, output) is
 *     u = uniform(-1, 1) from splitmix64(seed, t, i)   (24-bit mantissa)
 *     w = offset + scale * u
 * computed by a counter-based hash, so every value depends only on
 * (seed, t, i) and rows are generated on demand while writing (a 1B model
 * never sits in memory). Scales keep activations sane: a matrix with
 * fan-in n gets scale sqrt(3/n) (unit-variance outputs for unit-variance
 * inputs), the embedding scale sqrt(3) (unit variance, and RMSNorm
 * follows), norms 1 + 0.1u. The output head thus yields logits of about
 * unit standard deviation: neither flat nor one-hot.
 *
 * Vocabulary (tokenizer.ggml.model "llama"): <unk>, <s>, </s>, the 256
 * <0xXX> byte tokens, then pieces generated level by level: "▁", a-z,
 * A-Z, 0-9 and punctuation; then every piece of the previous level made
 * of "▁" and lower-case letters extended by one letter (▁a.. ▁z, aa.. zz,
 * ▁aa.., aaa..). Each longer piece is a shorter piece plus a letter, so
 * SentencePiece merging can reach it; scores fall with position (-k for
 * the k-th normal piece) so shorter pieces merge first.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelwriter.h"
#include "quant.h"
#include "tokenizer.h"

#define SYNTH_MAX_VOCAB (1u << 18)
#define PIECE_STRIDE 24

typedef struct gen {
    uint64_t seed;
    uint32_t tensor;
    float scale, offset;
} gen;

static uint64_t splitmix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int gen_row(void *ctx, uint64_t row, float *dst, uint64_t n)
{
    const gen *g = ctx;
    uint64_t base = splitmix(g->seed ^ splitmix(g->tensor));
    for (uint64_t i = 0; i < n; i++) {
        uint64_t z = splitmix(base ^ (row * n + i));
        float u = (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
        dst[i] = g->offset + g->scale * u;
    }
    return 0;
}

/* ---- vocabulary ------------------------------------------------------- */

typedef struct synth_vocab {
    char *text;      /* n pieces, PIECE_STRIDE bytes each */
    const char **pieces;
    float *scores;
    int32_t *types;
    uint32_t n;
} synth_vocab;

static void vocab_free(synth_vocab *v)
{
    free(v->text);
    free(v->pieces);
    free(v->scores);
    free(v->types);
}

static void put(synth_vocab *v, const char *s, int32_t type, uint32_t *normal)
{
    char *slot = v->text + (size_t)v->n * PIECE_STRIDE;
    snprintf(slot, PIECE_STRIDE, "%s", s);
    v->pieces[v->n] = slot;
    v->types[v->n] = type;
    v->scores[v->n] = type == LLM_TOKTYPE_NORMAL ? -(float)(*normal)++ : 0.0f;
    v->n++;
}

/* A piece that generation may extend: "▁" and lower-case letters only. */
static int extendable(const char *s)
{
    if (strncmp(s, "\xe2\x96\x81", 3) == 0)
        s += 3;
    for (; *s; s++)
        if (*s < 'a' || *s > 'z')
            return 0;
    return 1;
}

static int build_vocab(synth_vocab *v, uint32_t n)
{
    memset(v, 0, sizeof *v);
    v->text = malloc((size_t)n * PIECE_STRIDE);
    v->pieces = malloc(n * sizeof *v->pieces);
    v->scores = malloc(n * sizeof *v->scores);
    v->types = malloc(n * sizeof *v->types);
    if (!v->text || !v->pieces || !v->scores || !v->types)
        return -1;
    uint32_t normal = 0;
    put(v, "<unk>", LLM_TOKTYPE_UNKNOWN, &normal);
    put(v, "<s>", LLM_TOKTYPE_CONTROL, &normal);
    put(v, "</s>", LLM_TOKTYPE_CONTROL, &normal);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        put(v, s, LLM_TOKTYPE_BYTE, &normal);
    }
    static const char singles[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\"-:;()";
    uint32_t level_start = v->n;
    put(v, "\xe2\x96\x81", LLM_TOKTYPE_NORMAL, &normal);
    for (size_t i = 0; i + 1 < sizeof singles && v->n < n; i++) {
        char s[2] = {singles[i], 0};
        put(v, s, LLM_TOKTYPE_NORMAL, &normal);
    }
    while (v->n < n) {
        uint32_t level_end = v->n;
        for (uint32_t p = level_start; p < level_end && v->n < n; p++) {
            if (!extendable(v->pieces[p]) || strlen(v->pieces[p]) + 2 > PIECE_STRIDE)
                continue;
            for (char c = 'a'; c <= 'z' && v->n < n; c++) {
                char s[PIECE_STRIDE];
                snprintf(s, sizeof s, "%s%c", v->pieces[p], c);
                put(v, s, LLM_TOKTYPE_NORMAL, &normal);
            }
        }
        level_start = level_end;
    }
    return 0;
}

/* ---- options ---------------------------------------------------------- */

typedef struct synth_opts {
    const char *out;
    mw_hparams hp;
    uint32_t type;
    uint64_t seed;
    int tied;
    unsigned have; /* bit per required option */
} synth_opts;

enum { H_OUT = 1, H_DIM = 2, H_LAYERS = 4, H_HEADS = 8, H_KV = 16, H_FFN = 32, H_VOCAB = 64, H_CTX = 128,
       H_TYPE = 256, H_SEED = 512, H_ALL = 1023 };

static int parse_one(synth_opts *o, const char *opt, const char *val)
{
    mw_hparams *hp = &o->hp;
    static const uint32_t big = 1u << 20;
    if (strcmp(opt, "-o") == 0 && val) {
        o->out = val;
        o->have |= H_OUT;
        return 0;
    }
    struct { const char *name; uint32_t *dst; uint32_t lo, hi; unsigned bit; } u32s[] = {
        {"--dim", &hp->dim, 2, big, H_DIM},         {"--layers", &hp->layers, 1, 4096, H_LAYERS},
        {"--heads", &hp->heads, 1, 4096, H_HEADS},  {"--kv-heads", &hp->kv_heads, 1, 4096, H_KV},
        {"--ffn", &hp->ffn, 1, big, H_FFN},         {"--vocab", &hp->vocab, 260, SYNTH_MAX_VOCAB, H_VOCAB},
        {"--ctx", &hp->ctx, 1, big, H_CTX},
    };
    for (size_t i = 0; i < sizeof u32s / sizeof u32s[0]; i++) {
        if (strcmp(opt, u32s[i].name) == 0) {
            o->have |= u32s[i].bit;
            return mw_parse_u32(opt, val, u32s[i].lo, u32s[i].hi, u32s[i].dst);
        }
    }
    if (strcmp(opt, "--type") == 0) {
        o->have |= H_TYPE;
        return mw_parse_type(val, &o->type);
    }
    if (strcmp(opt, "--seed") == 0) {
        o->have |= H_SEED;
        return mw_parse_u64(opt, val, &o->seed);
    }
    if (strcmp(opt, "--rope-base") == 0)
        return mw_parse_f32(opt, val, 1.0f, 1e9f, &hp->rope_base);
    if (strcmp(opt, "--rope-scale") == 0)
        return mw_parse_f32(opt, val, 1e-3f, 1e3f, &hp->rope_scale);
    if (strcmp(opt, "--eps") == 0)
        return mw_parse_f32(opt, val, 1e-12f, 1.0f, &hp->eps);
    fprintf(stderr, MW_NAME ": synth: unknown option '%s'\n", opt);
    return -1;
}

static int parse_synth(int argc, char **argv, synth_opts *o)
{
    memset(o, 0, sizeof *o);
    o->hp.rope_base = 10000.0f;
    o->hp.rope_scale = 1.0f;
    o->hp.eps = 1e-5f;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--tied") == 0) {
            o->tied = 1;
            continue;
        }
        if (parse_one(o, argv[i], i + 1 < argc ? argv[i + 1] : NULL))
            return -1;
        i++;
    }
    if (o->have != H_ALL) {
        fprintf(stderr, MW_NAME ": synth needs -o, --dim, --layers, --heads, --kv-heads, --ffn, --vocab, --ctx,"
                        " --type and --seed\n");
        return -1;
    }
    const mw_hparams *hp = &o->hp;
    if (hp->dim % hp->heads || (hp->dim / hp->heads) % 2 || hp->heads % hp->kv_heads) {
        fprintf(stderr, MW_NAME ": --dim must be --heads times an even head size, and --kv-heads must divide"
                        " --heads\n");
        return -1;
    }
    return 0;
}

/* ---- writing ---------------------------------------------------------- */

typedef struct synth_ctx {
    llm_gguf_writer *w;
    gen *gens;
    uint32_t n_gens;
    uint64_t seed;
    uint32_t type;
    unsigned fallbacks;
} synth_ctx;

static int add(synth_ctx *c, const char *name, uint64_t ne0, uint64_t ne1, float scale, float offset)
{
    gen *g = &c->gens[c->n_gens];
    g->seed = c->seed;
    g->tensor = c->n_gens++;
    g->scale = scale;
    g->offset = offset;
    uint64_t ne[2] = {ne0, ne1};
    uint32_t dims = ne1 > 1 ? 2 : 1;
    uint32_t type = mw_weight_type(c->type, dims, ne0, &c->fallbacks);
    return llm_gguf_writer_add_tensor_gen(c->w, name, type, dims, ne, gen_row, g);
}

static float fan_in(uint64_t n)
{
    return sqrtf(3.0f / (float)n);
}

static int add_tensors(synth_ctx *c, const mw_hparams *hp, int tied)
{
    uint64_t d = hp->dim, f = hp->ffn, kv = (uint64_t)hp->dim / hp->heads * hp->kv_heads;
    int rc = add(c, "token_embd.weight", d, hp->vocab, sqrtf(3.0f), 0.0f);
    for (uint32_t l = 0; l < hp->layers && !rc; l++) {
        char n[64];
#define LAYER(suffix, ne0, ne1, scale, offset) \
    (snprintf(n, sizeof n, "blk.%u." suffix, l), add(c, n, ne0, ne1, scale, offset))
        rc = LAYER("attn_norm.weight", d, 1, 0.1f, 1.0f) || LAYER("attn_q.weight", d, d, fan_in(d), 0.0f) ||
             LAYER("attn_k.weight", d, kv, fan_in(d), 0.0f) || LAYER("attn_v.weight", d, kv, fan_in(d), 0.0f) ||
             LAYER("attn_output.weight", d, d, fan_in(d), 0.0f) || LAYER("ffn_norm.weight", d, 1, 0.1f, 1.0f) ||
             LAYER("ffn_gate.weight", d, f, fan_in(d), 0.0f) || LAYER("ffn_up.weight", d, f, fan_in(d), 0.0f) ||
             LAYER("ffn_down.weight", f, d, fan_in(f), 0.0f);
#undef LAYER
    }
    rc = rc || add(c, "output_norm.weight", d, 1, 0.1f, 1.0f);
    if (!tied)
        rc = rc || add(c, "output.weight", d, hp->vocab, fan_in(d), 0.0f);
    return rc;
}

int mw_synth(int argc, char **argv)
{
    synth_opts o;
    if (parse_synth(argc, argv, &o))
        return 2;
    synth_vocab v;
    synth_ctx c = {0};
    c.seed = o.seed;
    c.type = o.type;
    c.gens = calloc(3 + 9 * (size_t)o.hp.layers, sizeof *c.gens);
    int rc = 1;
    char err[512] = "out of memory";
    if (build_vocab(&v, o.hp.vocab) == 0 && c.gens && llm_gguf_writer_new(&c.w) == 0) {
        mw_vocab mv = {v.pieces, NULL, v.scores, v.types, v.n};
        if (mw_write_llama_meta(c.w, &o.hp, o.type, "phasemark synthetic", &mv) == 0 &&
            add_tensors(&c, &o.hp, o.tied) == 0)
            rc = llm_gguf_writer_write(c.w, o.out, err, sizeof err) == 0 ? 0 : 1;
        else
            snprintf(err, sizeof err, "%s", llm_gguf_writer_error(c.w));
    }
    if (rc)
        fprintf(stderr, MW_NAME ": %s\n", err);
    else if (c.fallbacks)
        fprintf(stderr, MW_NAME ": note: %u weight matrices kept in f32 (rows not a multiple of %u)\n",
                c.fallbacks, llm_type_block_size(o.type));
    llm_gguf_writer_free(c.w);
    vocab_free(&v);
    free(c.gens);
    return rc;
}
