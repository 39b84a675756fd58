/* pm-generate — run a prompt through the engine and print the continuation.
 *
 *   pm-generate -m MODEL [-p PROMPT | --tokens 1,2,3] [-n N]
 *               [--temp T --top-k K --top-p P --seed S] [--threads N]
 *               [--chunk C] [--ctx N] [--tokenizer tokenizer.bin]
 *               [--backend cpu|cuda|cuda:N] [--ids] [--no-bos]
 *
 * The continuation goes to stdout as text (or as ids with --ids, one line,
 * space-separated) while it is generated; timings with tokens per second go
 * to stderr. Exit status: 0 ok, 1 failure, 2 usage error.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phasemark/engine.h"

#define PROG "pm-generate"
#define MAX_PROMPT 65536

typedef struct args {
    const char *model, *prompt, *tokens, *tokenizer, *backend;
    long n_predict, threads, chunk, ctx, top_k;
    double temp, top_p;
    unsigned long long seed;
    int ids, no_bos;
} args;

typedef struct out_state {
    const llm_model *m;
    int ids;
    int32_t prev;
    size_t count;
} out_state;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " -m MODEL [-p PROMPT | --tokens 1,2,3] [-n N]\n"
            "       [--temp T] [--top-k K] [--top-p P] [--seed S] [--threads N]\n"
            "       [--chunk C] [--ctx N] [--tokenizer tokenizer.bin] [--backend B]\n"
            "       [--ids] [--no-bos]\n"
            "  -m MODEL       GGUF file, or llama2.c .bin (with --tokenizer for text)\n"
            "  -p PROMPT      prompt text (needs a tokenizer)\n"
            "  --tokens LIST  prompt as comma-separated token ids\n"
            "  -n N           tokens to generate (default 32)\n"
            "  --temp T       temperature; 0 = greedy (default 0)\n"
            "  --top-k K      keep the K most likely (0 = off)\n"
            "  --top-p P      nucleus mass (1 = off)\n"
            "  --seed S       sampling seed (default 1)\n"
            "  --threads N    CPU threads (default: all online)\n"
            "  --chunk C      prefill chunk size (default: whole batch)\n"
            "  --ctx N        context positions (default: the model's)\n"
            "  --backend B    cpu (default), cuda or cuda:N\n"
            "  --ids          print token ids instead of text\n"
            "  --no-bos       do not prepend BOS to a text prompt\n");
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

static int parse_u64(const char *s, unsigned long long *out)
{
    char *end;
    errno = 0;
    if (*s == '-')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

/* Parses one option with a value; returns 0, or -1 on a bad value. */
static int option_value(args *a, const char *opt, const char *v)
{
    if (!strcmp(opt, "-m")) a->model = v;
    else if (!strcmp(opt, "-p")) a->prompt = v;
    else if (!strcmp(opt, "--tokens")) a->tokens = v;
    else if (!strcmp(opt, "--tokenizer")) a->tokenizer = v;
    else if (!strcmp(opt, "--backend")) a->backend = v;
    else if (!strcmp(opt, "-n")) return parse_long(v, 1, INT32_MAX, &a->n_predict);
    else if (!strcmp(opt, "--threads")) return parse_long(v, 1, 256, &a->threads);
    else if (!strcmp(opt, "--chunk")) return parse_long(v, 1, INT32_MAX, &a->chunk);
    else if (!strcmp(opt, "--ctx")) return parse_long(v, 1, INT32_MAX, &a->ctx);
    else if (!strcmp(opt, "--top-k")) return parse_long(v, 0, INT32_MAX, &a->top_k);
    else if (!strcmp(opt, "--temp")) return parse_double(v, 0.0, 100.0, &a->temp);
    else if (!strcmp(opt, "--top-p")) return parse_double(v, 0.0, 1.0, &a->top_p);
    else if (!strcmp(opt, "--seed")) return parse_u64(v, &a->seed);
    else return -2;
    return 0;
}

/* 0 ok, 1 help printed, 2 usage error (message printed). */
static int parse_args(int argc, char **argv, args *a)
{
    memset(a, 0, sizeof *a);
    a->n_predict = 32;
    a->top_p = 1.0;
    a->seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(o, "--ids")) { a->ids = 1; continue; }
        if (!strcmp(o, "--no-bos")) { a->no_bos = 1; continue; }
        if (i + 1 >= argc) {
            fprintf(stderr, PROG ": option %s needs a value (or is unknown)\n", o);
            return 2;
        }
        int rc = option_value(a, o, argv[++i]);
        if (rc == -2) {
            fprintf(stderr, PROG ": unknown option %s\n", o);
            return 2;
        }
        if (rc) {
            fprintf(stderr, PROG ": bad value '%s' for %s\n", argv[i], o);
            return 2;
        }
    }
    if (!a->model || (!a->prompt == !a->tokens)) {
        fprintf(stderr, PROG ": need -m MODEL and exactly one of -p or --tokens\n");
        return 2;
    }
    return 0;
}

/* "1,2,3" -> ids; -1 on a malformed list. */
static int parse_ids(const char *s, int32_t *out, size_t cap, size_t *n)
{
    *n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < 0 || v > INT32_MAX || *n >= cap)
            return -1;
        out[(*n)++] = (int32_t)v;
        if (*end == ',' && end[1])
            end++;
        else if (*end)
            return -1;
        s = end;
    }
    return *n ? 0 : -1;
}

static int emit(void *user, int32_t tok)
{
    out_state *o = user;
    if (o->ids) {
        printf(o->count ? " %" PRId32 : "%" PRId32, tok);
    } else {
        char buf[1024];
        size_t n;
        if (llm_model_token_text(o->m, o->prev, tok, buf, sizeof buf, &n) == 0)
            fwrite(buf, 1, n, stdout);
    }
    fflush(stdout);
    o->prev = tok;
    o->count++;
    return 0;
}

static double per_second(uint64_t count, uint64_t ns)
{
    return ns ? (double)count * 1e9 / (double)ns : 0.0;
}

static void report(const llm_session *s, const llm_model_info *info)
{
    llm_timings t;
    llm_session_get_timings(s, &t);
    fprintf(stderr,
            PROG ": %s %s, %d threads\n"
            PROG ": prefill %" PRIu64 " tokens in %.1f ms (%.2f tokens/s)\n"
            PROG ": decode  %" PRIu64 " tokens in %.1f ms (%.2f tokens/s)\n"
            PROG ": sample  %.2f ms\n",
            info->weight_type, info->backend, (int)info->n_threads,
            t.prefill_tokens, (double)t.prefill_ns / 1e6, per_second(t.prefill_tokens, t.prefill_ns),
            t.decode_tokens, (double)t.decode_ns / 1e6, per_second(t.decode_tokens, t.decode_ns),
            (double)t.sample_ns / 1e6);
}

static int prompt_ids(const args *a, const llm_model *m, int32_t *ids, size_t *n)
{
    if (a->tokens) {
        if (parse_ids(a->tokens, ids, MAX_PROMPT, n) != 0) {
            fprintf(stderr, PROG ": bad --tokens list '%s'\n", a->tokens);
            return 2;
        }
        return 0;
    }
    int rc = llm_model_tokenize(m, a->prompt, strlen(a->prompt), !a->no_bos, ids, MAX_PROMPT, n);
    if (rc) {
        fprintf(stderr, PROG ": cannot tokenize the prompt: %s%s\n", llm_strerror(rc),
                rc == LLM_ESTATE ? " (the model has no tokenizer; use --tokens or --tokenizer)" : "");
        return 1;
    }
    if (*n == 0) {
        fprintf(stderr, PROG ": the prompt is empty\n");
        return 2;
    }
    return 0;
}

static int run(const args *a, llm_model *m, const int32_t *ids, size_t n)
{
    llm_model_info info;
    llm_model_get_info(m, &info);
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = a->ctx > INT32_MAX ? INT32_MAX : (int32_t)a->ctx;
    so.request = 1;
    llm_sampler_params sp = LLM_SAMPLER_PARAMS_INIT;
    sp.temperature = (float)a->temp;
    sp.top_k = (int32_t)a->top_k;
    sp.top_p = (float)a->top_p;
    sp.seed = a->seed;
    llm_session *s = NULL;
    llm_sampler *smp = NULL;
    char err[512];
    int rc = llm_session_create(m, &so, &s, err, sizeof err);
    if (rc) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    if ((rc = llm_sampler_create(&sp, info.n_vocab, &smp)) != 0) {
        fprintf(stderr, PROG ": sampler: %s\n", llm_strerror(rc));
        llm_session_free(s);
        return 1;
    }
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = (int32_t)a->n_predict;
    gp.chunk = (int32_t)(a->chunk > INT32_MAX ? INT32_MAX : a->chunk);
    out_state o = {m, a->ids, n ? ids[n - 1] : -1, 0};
    rc = llm_generate(s, smp, ids, n, &gp, emit, &o, NULL, NULL);
    printf("\n");
    if (rc)
        fprintf(stderr, PROG ": %s: %s\n", llm_strerror(rc), llm_session_error(s));
    else
        report(s, &info);
    llm_sampler_free(smp);
    llm_session_free(s);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc == 1 ? 0 : 2;
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.n_threads = (int32_t)a.threads;
    mo.tokenizer_path = a.tokenizer;
    mo.backend = a.backend;
    llm_model *m = NULL;
    char err[512];
    if ((rc = llm_model_open(a.model, &mo, &m, err, sizeof err)) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    int32_t *ids = malloc(MAX_PROMPT * sizeof *ids);
    size_t n = 0;
    if (!ids) {
        fprintf(stderr, PROG ": out of memory\n");
        llm_model_free(m);
        return 1;
    }
    rc = prompt_ids(&a, m, ids, &n);
    if (rc == 0)
        rc = run(&a, m, ids, n);
    free(ids);
    llm_model_free(m);
    return rc;
}
