/* synth.c — `pm-modelwriter synth`: a llama-family GGUF model (llama,
 * qwen2 or qwen3) of any shape with deterministic random weights and a
 * byte-fallback vocabulary.
 *
 * Weights. Element i (row-major, ne[0] contiguous) of tensor number t (in
 * the order written: token_embd, then per layer attn_norm, attn_q, attn_k,
 * attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down, then for
 * qwen2 attn_q.bias, attn_k.bias, attn_v.bias (scale 0.5) or for qwen3
 * attn_q_norm, attn_k_norm (1 + 0.1u, [head_dim]); then output_norm,
 * output) is
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
 * Mixes. --type q4_K_M or q5_K_M lays the weights out the way llama.cpp's
 * quantizer does for a llama model of those names: the base type (q4_K or
 * q5_K) everywhere except the output head (the embedding when the head is
 * tied) and, on the layers that get more bits, attn_v and ffn_down, which
 * take q6_K. "More bits" (llama.cpp's rule, in our words): layer i of n is
 * in the first eighth, the last eighth, or every third layer counted from
 * the end of the first eighth (i - n/8 = 2, 5, 8, ...). A matrix whose rows
 * do not fit 256-element super-blocks takes llama.cpp's fallback for its
 * type, a 32-element block type: q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0
 * (rows that do not fit 32 either stay f32, as in any type).
 *
 * Vocabulary (tokenizer.ggml.model "llama"): <unk>, <s>, </s>, the 256
 * <0xXX> byte tokens, then normal pieces: level 1 "▁", a-z, A-Z, 0-9 and
 * punctuation; level 2 "▁" and a-z each extended by one letter (▁a.. ▁z,
 * aa.. zz); then "▁" + every prefix of a list of common English words
 * (▁th, ▁the, ▁an, ▁and, ...: those not already present); then level k+1
 * extends each level-k piece of "▁" and lower-case letters by one letter
 * (▁aa.., aaa..), skipping pieces already present, until V. Each longer
 * piece is a shorter piece plus a character, so SentencePiece merging can
 * reach it; the k-th normal piece scores -k, so earlier pieces merge
 * first.
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

/* Common English words (TinyStories-flavoured). Their "▁"-prefixed
 * prefixes join the vocabulary after the two-character level, so English
 * text tokenizes into word-sized pieces. */
static const char *const k_words[] = {
    "the",   "and",  "was",   "to",    "a",     "he",    "she",   "they",  "it",   "of",    "in",
    "is",    "that", "for",   "on",    "with",  "said",  "you",   "her",   "his",  "one",   "day",
    "once",  "upon", "time",  "there", "little", "girl", "boy",   "big",   "happy", "saw",  "had",
    "play",  "friend", "mom", "dad",   "not",   "but",   "very",  "were",  "so",   "what",  "when",
    "all",   "can",  "we",    "them",  "then",  "went",  "wanted", "found", "named", "loved", "park",
    "tree",  "ball", "dog",   "cat",   "bird",  "fun",   "sun",   "home",  "toy",  "help",  "good",
};

typedef struct synth_vocab {
    char *text;          /* n pieces, PIECE_STRIDE bytes each */
    const char **pieces;
    float *scores;
    int32_t *types;
    uint32_t n, cap;
    uint32_t normal;     /* normal pieces so far (scores are -index) */
    uint32_t *set;       /* open addressing over piece ids + 1 */
    uint32_t set_mask;
} synth_vocab;

static void vocab_free(synth_vocab *v)
{
    free(v->text);
    free(v->pieces);
    free(v->scores);
    free(v->types);
    free(v->set);
}

static uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* Adds piece s unless present or the vocabulary is full; 1 when added. */
static int put(synth_vocab *v, const char *s, int32_t type)
{
    if (v->n == v->cap)
        return 0;
    uint32_t h = hash_str(s) & v->set_mask;
    for (; v->set[h]; h = (h + 1) & v->set_mask)
        if (strcmp(v->pieces[v->set[h] - 1], s) == 0)
            return 0;
    char *slot = v->text + (size_t)v->n * PIECE_STRIDE;
    snprintf(slot, PIECE_STRIDE, "%s", s);
    v->pieces[v->n] = slot;
    v->types[v->n] = type;
    v->scores[v->n] = type == LLM_TOKTYPE_NORMAL ? -(float)v->normal++ : 0.0f;
    v->set[h] = ++v->n;
    return 1;
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

/* Appends every extendable piece of ids [from, to) plus one letter. */
static void extend_level(synth_vocab *v, uint32_t from, uint32_t to)
{
    for (uint32_t p = from; p < to && v->n < v->cap; p++) {
        if (!extendable(v->pieces[p]) || strlen(v->pieces[p]) + 2 > PIECE_STRIDE)
            continue;
        for (char c = 'a'; c <= 'z'; c++) {
            char s[PIECE_STRIDE];
            snprintf(s, sizeof s, "%s%c", v->pieces[p], c);
            put(v, s, LLM_TOKTYPE_NORMAL);
        }
    }
}

static void add_words(synth_vocab *v)
{
    for (size_t w = 0; w < sizeof k_words / sizeof k_words[0]; w++) {
        char s[PIECE_STRIDE] = "\xe2\x96\x81";
        for (size_t i = 0; k_words[w][i] && i + 5 < PIECE_STRIDE; i++) {
            s[3 + i] = k_words[w][i];
            s[4 + i] = '\0';
            put(v, s, LLM_TOKTYPE_NORMAL);
        }
    }
}

static int build_vocab(synth_vocab *v, uint32_t n)
{
    memset(v, 0, sizeof *v);
    v->cap = n;
    v->set_mask = 1;
    while (v->set_mask < 2 * n)
        v->set_mask <<= 1;
    v->text = malloc((size_t)n * PIECE_STRIDE);
    v->pieces = malloc(n * sizeof *v->pieces);
    v->scores = malloc(n * sizeof *v->scores);
    v->types = malloc(n * sizeof *v->types);
    v->set = calloc(v->set_mask, sizeof *v->set);
    v->set_mask--;
    if (!v->text || !v->pieces || !v->scores || !v->types || !v->set)
        return -1;
    put(v, "<unk>", LLM_TOKTYPE_UNKNOWN);
    put(v, "<s>", LLM_TOKTYPE_CONTROL);
    put(v, "</s>", LLM_TOKTYPE_CONTROL);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        put(v, s, LLM_TOKTYPE_BYTE);
    }
    static const char singles[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\"-:;()";
    uint32_t level1 = v->n;
    put(v, "\xe2\x96\x81", LLM_TOKTYPE_NORMAL);
    for (size_t i = 0; i + 1 < sizeof singles; i++) {
        char s[2] = {singles[i], 0};
        put(v, s, LLM_TOKTYPE_NORMAL);
    }
    uint32_t level2 = v->n;
    extend_level(v, level1, level2);
    uint32_t level3 = v->n;
    add_words(v);
    /* Further levels extend the previous level (words are not extended). */
    for (uint32_t from = level2, to = level3; v->n < v->cap && from < to;) {
        uint32_t next = v->n;
        extend_level(v, from, to);
        from = next;
        to = v->n;
    }
    return v->n == v->cap ? 0 : -1;
}

/* ---- options ---------------------------------------------------------- */

enum { MIX_NONE, MIX_Q4_K_M, MIX_Q5_K_M };

typedef struct synth_opts {
    const char *out;
    mw_hparams hp;
    uint32_t type; /* the base type of a mix */
    int mix;       /* MIX_* */
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
        o->mix = MIX_NONE;
        if (val && (strcmp(val, "q4_K_M") == 0 || strcmp(val, "Q4_K_M") == 0)) {
            o->mix = MIX_Q4_K_M;
            o->type = LLM_TYPE_Q4_K;
            return 0;
        }
        if (val && (strcmp(val, "q5_K_M") == 0 || strcmp(val, "Q5_K_M") == 0)) {
            o->mix = MIX_Q5_K_M;
            o->type = LLM_TYPE_Q5_K;
            return 0;
        }
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
    if (strcmp(opt, "--head-dim") == 0)
        return mw_parse_u32(opt, val, 2, 1u << 14, &hp->head_dim);
    if (strcmp(opt, "--sliding-window") == 0)
        return mw_parse_u32(opt, val, 1, INT32_MAX, &hp->window);
    if (strcmp(opt, "--arch") == 0) {
        static const char *const archs[] = {"llama", "qwen2", "qwen3"};
        for (size_t i = 0; val && i < sizeof archs / sizeof archs[0]; i++)
            if (strcmp(val, archs[i]) == 0) {
                hp->arch = archs[i];
                return 0;
            }
        fprintf(stderr, MW_NAME ": --arch must be llama, qwen2 or qwen3 (got '%s')\n", val ? val : "");
        return -1;
    }
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
    if (hp->head_dim && (hp->head_dim % 2 || hp->heads % hp->kv_heads)) {
        fprintf(stderr, MW_NAME ": --head-dim must be even, and --kv-heads must divide --heads\n");
        return -1;
    }
    if (!hp->head_dim && (hp->dim % hp->heads || (hp->dim / hp->heads) % 2 || hp->heads % hp->kv_heads)) {
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
    int mix, tied;
    uint32_t layer, n_layers; /* the layer being written, of n_layers */
    unsigned fallbacks;
} synth_ctx;

static int more_bits(uint32_t i, uint32_t n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The type a mix gives tensor `name` (the base type outside a mix). */
static uint32_t mix_type(const synth_ctx *c, const char *name)
{
    if (c->mix == MIX_NONE)
        return c->type;
    if (strcmp(name, "output.weight") == 0 || (c->tied && strcmp(name, "token_embd.weight") == 0))
        return LLM_TYPE_Q6_K;
    if ((strstr(name, ".attn_v.weight") || strstr(name, ".ffn_down.weight")) &&
        more_bits(c->layer, c->n_layers))
        return LLM_TYPE_Q6_K;
    return c->type;
}

/* llama.cpp's replacement for a k-quant whose super-blocks the rows
 * (ne0 wide) do not fit; `type` itself when they fit or outside a mix. */
static uint32_t mix_fallback(const synth_ctx *c, uint32_t type, uint64_t ne0)
{
    if (c->mix == MIX_NONE || ne0 % LLM_QK_K == 0)
        return type;
    switch (type) {
    case LLM_TYPE_Q4_K:
        return LLM_TYPE_Q5_0;
    case LLM_TYPE_Q5_K:
        return LLM_TYPE_Q5_1;
    case LLM_TYPE_Q6_K:
        return LLM_TYPE_Q8_0;
    default:
        return type;
    }
}

static int add(synth_ctx *c, const char *name, uint64_t ne0, uint64_t ne1, float scale, float offset)
{
    gen *g = &c->gens[c->n_gens];
    g->seed = c->seed;
    g->tensor = c->n_gens++;
    g->scale = scale;
    g->offset = offset;
    uint64_t ne[2] = {ne0, ne1};
    uint32_t dims = ne1 > 1 ? 2 : 1;
    uint32_t type = mw_weight_type(mix_fallback(c, mix_type(c, name), ne0), dims, ne0, &c->fallbacks);
    return llm_gguf_writer_add_tensor_gen(c->w, name, type, dims, ne, gen_row, g);
}

static float fan_in(uint64_t n)
{
    return sqrtf(3.0f / (float)n);
}

static int add_tensors(synth_ctx *c, const mw_hparams *hp, int tied)
{
    uint64_t d = hp->dim, f = hp->ffn, hd = mw_head_dim(hp);
    uint64_t q = hd * hp->heads, kv = hd * hp->kv_heads;
    int qwen2 = strcmp(mw_arch(hp), "qwen2") == 0, qwen3 = strcmp(mw_arch(hp), "qwen3") == 0;
    int rc = add(c, "token_embd.weight", d, hp->vocab, sqrtf(3.0f), 0.0f);
    for (uint32_t l = 0; l < hp->layers && !rc; l++) {
        char n[64];
        c->layer = l;
#define LAYER(suffix, ne0, ne1, scale, offset) \
    (snprintf(n, sizeof n, "blk.%u." suffix, l), add(c, n, ne0, ne1, scale, offset))
        rc = LAYER("attn_norm.weight", d, 1, 0.1f, 1.0f) || LAYER("attn_q.weight", d, q, fan_in(d), 0.0f) ||
             LAYER("attn_k.weight", d, kv, fan_in(d), 0.0f) || LAYER("attn_v.weight", d, kv, fan_in(d), 0.0f) ||
             LAYER("attn_output.weight", q, d, fan_in(q), 0.0f) || LAYER("ffn_norm.weight", d, 1, 0.1f, 1.0f) ||
             LAYER("ffn_gate.weight", d, f, fan_in(d), 0.0f) || LAYER("ffn_up.weight", d, f, fan_in(d), 0.0f) ||
             LAYER("ffn_down.weight", f, d, fan_in(f), 0.0f);
        if (qwen2)
            rc = rc || LAYER("attn_q.bias", q, 1, 0.5f, 0.0f) || LAYER("attn_k.bias", kv, 1, 0.5f, 0.0f) ||
                 LAYER("attn_v.bias", kv, 1, 0.5f, 0.0f);
        if (qwen3)
            rc = rc || LAYER("attn_q_norm.weight", hd, 1, 0.1f, 1.0f) ||
                 LAYER("attn_k_norm.weight", hd, 1, 0.1f, 1.0f);
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
    c.mix = o.mix;
    c.tied = o.tied;
    c.n_layers = o.hp.layers;
    c.gens = calloc(3 + 12 * (size_t)o.hp.layers, sizeof *c.gens);
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
