/* main.c — pm-modelwriter: writes GGUF model files.
 *
 *   pm-modelwriter synth -o out.gguf --dim D --layers L --heads H
 *       --kv-heads K --ffn F --vocab V --ctx C --type T --seed S
 *       [--tied] [--rope-base B] [--rope-scale F] [--eps E]
 *   pm-modelwriter synth --arch phasemark-block --target T.gguf -o out.gguf
 *       --layers 1,3,5 [--block-size B] [--head-layers N] [...] (block.c)
 *   pm-modelwriter convert-llama2c -o out.gguf --model x.bin
 *       --tokenizer tokenizer.bin [--type T]
 *   pm-modelwriter requant -o out.gguf --type T in.gguf
 *       (in.gguf with its weight matrices re-encoded to T; requant.c)
 *   pm-modelwriter info model.gguf
 *
 * This file holds the dispatch, the shared option parsers, the llama
 * metadata writer and the `info` listing. Exit codes: 0 ok, 1 failure,
 * 2 usage error.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelwriter.h"
#include "quant.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " MW_NAME " synth -o OUT --dim D --layers L --heads H --kv-heads K --ffn F\n"
            "                      --vocab V --ctx C --type T --seed S [--tied]\n"
            "                      [--rope-base B] [--rope-scale F] [--eps E]\n"
            "                      [--arch llama|qwen2|qwen3] [--head-dim N] [--sliding-window W]\n"
            "       " MW_NAME " synth --arch phasemark-block --target T.gguf -o OUT --layers L1,L2,..\n"
            "                      [--block-size B] [--head-layers N] [--ffn F] [--heads H]\n"
            "                      [--kv-heads K] [--type f32|f16|q8_0] [--seed S] [--eps E]\n"
            "                      (a random block drafter head for target T)\n"
            "       " MW_NAME " convert-llama2c -o OUT --model X.bin --tokenizer TOKENIZER.bin [--type T]\n"
            "       " MW_NAME " requant -o OUT --type T IN.gguf\n"
            "                      (IN's tensors of 2+ dimensions whose rows fit T's blocks\n"
            "                      re-encoded to T; metadata kept as it is; vectors, other\n"
            "                      matrices, tensors already T and types the engine cannot\n"
            "                      convert copied byte for byte)\n"
            "       " MW_NAME " info MODEL.gguf\n"
            "types: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_K q3_K q4_K q5_K q6_K (weight\n"
            "       matrices, quantized round-to-nearest; norms stay f32);\n"
            "       synth also takes the mixes q4_K_M and q5_K_M (q6_K for the head and some\n"
            "       attn_v/ffn_down, as llama.cpp's quantizer lays them out)\n");
}

int mw_parse_u32(const char *opt, const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = s ? strtoull(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || s[0] == '-' || v < lo || v > hi) {
        fprintf(stderr, MW_NAME ": %s needs an integer in %u..%u (got '%s')\n", opt, lo, hi, s ? s : "");
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

int mw_parse_u64(const char *opt, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = s ? strtoull(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || s[0] == '-') {
        fprintf(stderr, MW_NAME ": %s needs a non-negative integer (got '%s')\n", opt, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

int mw_parse_f32(const char *opt, const char *s, float lo, float hi, float *out)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, MW_NAME ": %s needs a number in %g..%g (got '%s')\n", opt, lo, hi, s ? s : "");
        return -1;
    }
    *out = (float)v;
    return 0;
}

int mw_parse_type(const char *s, uint32_t *out)
{
    if (s && llm_type_parse(s, out) == 0)
        return 0;
    fprintf(stderr, MW_NAME ": --type must be f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K or q6_K (got '%s')\n", s ? s : "");
    return -1;
}

uint32_t mw_weight_type(uint32_t requested, uint32_t n_dims, uint64_t ne0, unsigned *fallbacks)
{
    if (n_dims == 1)
        return LLM_TYPE_F32;
    if (ne0 % llm_type_block_size(requested) != 0) {
        (*fallbacks)++;
        return LLM_TYPE_F32;
    }
    return requested;
}

/* llama.cpp's general.file_type ("mostly <type>") value: the type's. */
static uint32_t file_type(uint32_t type)
{
    const llm_type_traits *t = llm_type_find(NULL, type);
    return t ? t->file_type : 0;
}

int mw_write_llama_meta(llm_gguf_writer *w, const mw_hparams *hp, uint32_t type, const char *name,
                        const mw_vocab *v)
{
    const char *arch = mw_arch(hp);
    char key[96];
#define KEY(k) (snprintf(key, sizeof key, "%s.%s", arch, k), key)
    llm_gguf_writer_set_str(w, "general.architecture", arch, strlen(arch));
    llm_gguf_writer_set_str(w, "general.name", name, strlen(name));
    llm_gguf_writer_set_u32(w, "general.file_type", file_type(type));
    llm_gguf_writer_set_u32(w, KEY("context_length"), hp->ctx);
    llm_gguf_writer_set_u32(w, KEY("embedding_length"), hp->dim);
    llm_gguf_writer_set_u32(w, KEY("block_count"), hp->layers);
    llm_gguf_writer_set_u32(w, KEY("feed_forward_length"), hp->ffn);
    llm_gguf_writer_set_u32(w, KEY("attention.head_count"), hp->heads);
    llm_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), hp->kv_heads);
    llm_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), hp->eps);
    llm_gguf_writer_set_f32(w, KEY("rope.freq_base"), hp->rope_base);
    llm_gguf_writer_set_u32(w, KEY("rope.dimension_count"), mw_head_dim(hp));
    if (hp->head_dim) {
        llm_gguf_writer_set_u32(w, KEY("attention.key_length"), hp->head_dim);
        llm_gguf_writer_set_u32(w, KEY("attention.value_length"), hp->head_dim);
    }
    if (hp->window)
        llm_gguf_writer_set_u32(w, KEY("attention.sliding_window"), hp->window);
    if (hp->rope_scale != 1.0f) {
        llm_gguf_writer_set_str(w, KEY("rope.scaling.type"), "linear", 6);
        llm_gguf_writer_set_f32(w, KEY("rope.scaling.factor"), hp->rope_scale);
    }
    llm_gguf_writer_set_u32(w, KEY("vocab_size"), hp->vocab);
#undef KEY
    llm_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", 5);
    llm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v->pieces, v->lens, v->n);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", LLM_GGUF_F32, v->scores, v->n);
    llm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LLM_GGUF_I32, v->types, v->n);
    llm_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    llm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    llm_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    llm_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
    /* Errors are sticky: the last call reports the first failure. */
    return llm_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", 1);
}

/* ---- info ------------------------------------------------------------- */

static const char *vtype_name(uint32_t t)
{
    static const char *const names[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    return t < sizeof names / sizeof names[0] ? names[t] : "?";
}

static void print_value(const llm_gguf *g, const char *key, uint32_t type)
{
    const char *s;
    size_t len;
    int64_t i;
    uint64_t u;
    float f;
    int b;
    if (type == LLM_GGUF_STRING && llm_gguf_get_str(g, key, &s, &len) == 0)
        printf("\"%.*s\"%s", (int)(len > 60 ? 60 : len), s, len > 60 ? "..." : "");
    else if (type == LLM_GGUF_ARRAY) {
        uint32_t et;
        const void *data;
        llm_gguf_get_arr(g, key, &et, &u, &data);
        printf("[%s x %llu]", vtype_name(et), (unsigned long long)u);
    } else if (llm_gguf_get_u64(g, key, &u) == 0)
        printf("%llu", (unsigned long long)u);
    else if (llm_gguf_get_i64(g, key, &i) == 0)
        printf("%lld", (long long)i);
    else if (llm_gguf_get_f32(g, key, &f) == 0)
        printf("%g", (double)f);
    else if (llm_gguf_get_bool(g, key, &b) == 0)
        printf("%s", b ? "true" : "false");
}

static int cmd_info(int argc, char **argv)
{
    if (argc != 3) {
        usage(stderr);
        return 2;
    }
    llm_gguf *g;
    char err[512];
    if (llm_gguf_open(argv[2], &g, err, sizeof err) != 0) {
        fprintf(stderr, MW_NAME ": %s\n", err);
        return 1;
    }
    printf("version %u, alignment %u, data at %llu, %llu bytes\n", llm_gguf_version(g), llm_gguf_alignment(g),
           (unsigned long long)llm_gguf_data_offset(g), (unsigned long long)llm_gguf_file_size(g));
    char key[512];
    for (uint64_t k = 0; k < llm_gguf_kv_count(g); k++) {
        const char *kp;
        size_t klen;
        uint32_t type;
        llm_gguf_kv_at(g, k, &kp, &klen, &type);
        if (klen >= sizeof key)
            continue;
        memcpy(key, kp, klen);
        key[klen] = '\0';
        printf("kv %s %s = ", key, vtype_name(type));
        print_value(g, key, type);
        putchar('\n');
    }
    for (uint64_t i = 0; i < llm_gguf_tensor_count(g); i++) {
        const llm_gguf_tensor *t = llm_gguf_tensor_at(g, i);
        printf("tensor %s %s [%llu", t->name, llm_type_name(t->type), (unsigned long long)t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims; d++)
            printf(", %llu", (unsigned long long)t->ne[d]);
        printf("] %llu bytes\n", (unsigned long long)t->nbytes);
    }
    llm_gguf_close(g);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--version") == 0) {
        puts("pm-modelwriter " PHASEMARK_VERSION_STRING);
        return 0;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "synth") == 0) {
        for (int i = 2; i + 1 < argc; i++)
            if (strcmp(argv[i], "--arch") == 0 && strcmp(argv[i + 1], "phasemark-block") == 0)
                return mw_block(argc, argv);
        return mw_synth(argc, argv);
    }
    if (strcmp(argv[1], "convert-llama2c") == 0)
        return mw_convert_llama2c(argc, argv);
    if (strcmp(argv[1], "requant") == 0)
        return mw_requant(argc, argv);
    if (strcmp(argv[1], "info") == 0)
        return cmd_info(argc, argv);
    fprintf(stderr, MW_NAME ": unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
