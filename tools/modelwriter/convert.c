/* convert.c — `pm-modelwriter convert-llama2c`: a legacy llama2.c
 * checkpoint plus its tokenizer.bin to a GGUF llama model.
 *
 * Tensors keep llama2.c's values and are named and shaped as llama.cpp's
 * llama architecture expects (the mapping lives in llama2c.h). Q and K are
 * copied without permutation: llama2.c rotates adjacent pairs
 * (x[2i], x[2i+1]), which is the layout GGUF llama tensors use (llama.cpp
 * permutes Hugging Face weights into it when converting). Hyper-parameters
 * the format fixes are written explicitly: RoPE base 10000, RMSNorm epsilon
 * 1e-5, context length = the checkpoint's seq_len.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama2c.h"
#include "modelwriter.h"
#include "quant.h"
#include "tokenizer.h"

typedef struct convert_opts {
    const char *out, *model, *tokenizer;
    uint32_t type;
} convert_opts;

static int parse_convert(int argc, char **argv, convert_opts *o)
{
    memset(o, 0, sizeof *o);
    o->type = LLM_TYPE_F32;
    for (int i = 2; i < argc; i += 2) {
        const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val) {
            fprintf(stderr, MW_NAME ": convert-llama2c: %s needs a value\n", opt);
            return -1;
        }
        if (strcmp(opt, "-o") == 0)
            o->out = val;
        else if (strcmp(opt, "--model") == 0)
            o->model = val;
        else if (strcmp(opt, "--tokenizer") == 0)
            o->tokenizer = val;
        else if (strcmp(opt, "--type") == 0) {
            if (mw_parse_type(val, &o->type))
                return -1;
        } else {
            fprintf(stderr, MW_NAME ": convert-llama2c: unknown option '%s'\n", opt);
            return -1;
        }
    }
    if (!o->out || !o->model || !o->tokenizer) {
        fprintf(stderr, MW_NAME ": convert-llama2c needs -o, --model and --tokenizer\n");
        return -1;
    }
    return 0;
}

/* The vocabulary arrays of a tokenizer, borrowed from it. */
typedef struct vocab_arrays {
    const char **pieces;
    size_t *lens;
    float *scores;
    int32_t *types;
} vocab_arrays;

static int vocab_from(const llm_tokenizer *t, vocab_arrays *a)
{
    uint32_t n = llm_tokenizer_vocab_size(t);
    a->pieces = malloc(n * sizeof *a->pieces);
    a->lens = malloc(n * sizeof *a->lens);
    a->scores = malloc(n * sizeof *a->scores);
    a->types = malloc(n * sizeof *a->types);
    if (!a->pieces || !a->lens || !a->scores || !a->types)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        llm_tokenizer_piece(t, (int32_t)i, &a->pieces[i], &a->lens[i]);
        a->scores[i] = llm_tokenizer_score(t, (int32_t)i);
        a->types[i] = llm_tokenizer_token_type(t, (int32_t)i);
    }
    return 0;
}

static void vocab_arrays_free(vocab_arrays *a)
{
    free(a->pieces);
    free(a->lens);
    free(a->scores);
    free(a->types);
}

static int add_tensors(llm_gguf_writer *w, const llm_llama2c *m, uint32_t type, unsigned *fallbacks)
{
    for (uint64_t i = 0; i < llm_llama2c_tensor_count(m); i++) {
        const llm_gguf_tensor *t = llm_llama2c_tensor_at(m, i);
        uint32_t tt = mw_weight_type(type, t->n_dims, t->ne[0], fallbacks);
        if (llm_gguf_writer_add_tensor_f32(w, t->name, tt, t->n_dims, t->ne, t->data) != 0)
            return -1;
    }
    return 0;
}

/* Writes the GGUF once both inputs are open. */
static int write_gguf(const convert_opts *o, const llm_llama2c *m, const llm_tokenizer *t, char *err,
                      size_t errlen)
{
    const llm_llama2c_config *c = llm_llama2c_get_config(m);
    mw_hparams hp = {c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->hidden_dim, c->vocab_size, c->seq_len,
                     c->rope_theta, 1.0f, c->rms_eps, NULL, 0, 0};
    vocab_arrays a = {0};
    llm_gguf_writer *w = NULL;
    unsigned fallbacks = 0;
    int rc = -1;
    if (vocab_from(t, &a) != 0 || llm_gguf_writer_new(&w) != 0) {
        snprintf(err, errlen, "out of memory");
    } else {
        mw_vocab v = {a.pieces, a.lens, a.scores, a.types, c->vocab_size};
        if (mw_write_llama_meta(w, &hp, o->type, "llama2.c checkpoint", &v) != 0 ||
            add_tensors(w, m, o->type, &fallbacks) != 0)
            snprintf(err, errlen, "%s", llm_gguf_writer_error(w));
        else
            rc = llm_gguf_writer_write(w, o->out, err, errlen);
    }
    if (rc == 0 && fallbacks)
        fprintf(stderr, MW_NAME ": note: %u weight matrices kept in f32 (rows not a multiple of %u)\n", fallbacks,
                llm_type_block_size(o->type));
    llm_gguf_writer_free(w);
    vocab_arrays_free(&a);
    return rc;
}

int mw_convert_llama2c(int argc, char **argv)
{
    convert_opts o;
    if (parse_convert(argc, argv, &o))
        return 2;
    char err[512];
    llm_llama2c *m = NULL;
    llm_tokenizer *t = NULL;
    int rc = llm_llama2c_open(o.model, &m, err, sizeof err);
    if (rc == 0)
        rc = llm_tokenizer_from_llama2c(o.tokenizer, llm_llama2c_get_config(m)->vocab_size, &t, err, sizeof err);
    if (rc == 0)
        rc = write_gguf(&o, m, t, err, sizeof err);
    if (rc)
        fprintf(stderr, MW_NAME ": %s\n", err);
    llm_tokenizer_free(t);
    llm_llama2c_close(m);
    return rc ? 1 : 0;
}
