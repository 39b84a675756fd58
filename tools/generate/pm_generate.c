/* pm-generate — run a prompt through the engine and print the continuation.
 *
 *   pm-generate -m MODEL [-p PROMPT | --tokens 1,2,3] [-n N]
 *               [--temp T --top-k K --top-p P --seed S] [--threads N]
 *               [--chunk C] [--ctx N] [--tokenizer tokenizer.bin]
 *               [--backend cpu|cuda|cuda:N] [--ids] [--no-bos]
 *               [--placement SPEC]
 *               [--drafter model|ngram|hybrid|block] [--draft MODEL]
 *               [--draft-head HEAD.gguf] [--draft-k K]
 *               [--adaptive-k | --cost-k] [--draft-tree N] [--dump-logits FILE]
 *               [--device-loop auto|on|off]
 *
 * The continuation goes to stdout as text (or as ids with --ids, one line,
 * space-separated) while it is generated; timings with tokens per second go
 * to stderr. Exit status: 0 ok, 1 failure, 2 usage error.
 *
 * --dump-logits FILE runs the prompt first as one forward that hands back
 * every row, and writes those rows to FILE: n_prompt rows of n_vocab
 * little-endian f32, row i the logits after prompt token i (what another
 * implementation's teacher-forced logits are compared with). The session
 * is then emptied and generation runs as usual; -n 0 stops after the dump.
 *
 * With --draft or --drafter, generation is speculative (phasemark/spec.h):
 * the drafter (default model: the --draft model; ngram: prompt and history
 * lookup, no draft model; hybrid: the n-gram proposal when a long enough
 * match exists, else the draft model's, or with --draft-head instead of
 * --draft the block head's; block: the --draft-head block head
 * over the target's own features, up to its block size per round, one
 * forward) proposes up to K tokens per round,
 * the target verifies them in one batched forward; the round statistics,
 * per drafter, go to stderr.
 *
 * --device-loop (default auto) runs generation through the CUDA device
 * loop (phasemark/spec.h, docs/cuda.md) when it takes: a monolithic CUDA
 * target, no drafter, the model or ngram drafter, or the block or hybrid
 * drafter over a head, with a fixed k, greedy or temperature-only
 * sampling. auto falls back to the host paths
 * silently when it does not; on refuses with one line naming why; off
 * never uses it. The greedy ids are the same either way; stderr's
 * "path:" line says which ran.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "phasemark/engine.h"
#include "phasemark/spec.h"

#define PROG "pm-generate"
#define MAX_PROMPT 65536

typedef struct args {
    const char *model, *prompt, *tokens, *tokenizer, *backend;
    const char *placement; /* layer split of the target (docs/split.md) */
    long n_predict, threads, chunk, ctx, top_k;
    double temp, top_p;
    unsigned long long seed;
    int ids, no_bos;
    const char *draft; /* speculative decoding with this draft model */
    const char *draft_head; /* --draft-head: the block head */
    long draft_k;
    long draft_tree;  /* --draft-tree: tree rounds of up to N nodes; 0: chains */
    int adaptive_k;   /* LLM_SPEC_ADAPT_* */
    int drafter;      /* LLM_DRAFTER_*, or -1: none named */
    int no_mmap;      /* --no-mmap: read the weights into memory */
    const char *dump_logits; /* every prompt row's logits go here */
    int device_loop;  /* LOOP_AUTO, LOOP_ON or LOOP_OFF */
} args;

enum { LOOP_AUTO, LOOP_ON, LOOP_OFF };

/* try_loop's answer when the device loop did not take (auto). */
#define LOOP_NOT_TAKEN 3

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
            "       [--ids] [--no-bos] [--no-mmap] [--placement SPEC]\n"
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
            "  --no-bos       do not prepend BOS to a text prompt\n"
            "  --no-mmap      read a GGUF model into memory instead of mapping it\n"
            "  --dump-logits F  write every prompt position's logits to F (n_prompt x\n"
            "                 n_vocab little-endian f32) before generating; -n 0: only that\n"
            "  --placement S  split the target's layers over shards, e.g.\n"
            "                 0-3@local,4-7@spawn?transport=shared (docs/split.md)\n"
            "  --drafter D    speculative decoding: model (the --draft model, the default\n"
            "                 with --draft), ngram (prompt lookup, no draft model) or\n"
            "                 hybrid (n-gram when a match is long enough, else the --draft\n"
            "                 model or the --draft-head head)\n"
            "                 or block (the --draft-head block head on the target's features)\n"
            "  --draft MODEL  the draft model (same vocabulary)\n"
            "  --draft-head H the block drafter's head (a phasemark-block GGUF made for\n"
            "                 this target; implies --drafter block; or the hybrid's)\n"
            "  --draft-k K    tokens drafted per round (default 4)\n"
            "  --adaptive-k   choose K each round from the acceptance so far (K..2K)\n"
            "  --cost-k       choose K (and hybrid's drafter, or plain decoding) each round\n"
            "                 from measured verify and draft costs (1..K)\n"
            "  --draft-tree N block drafter, greedy, a CPU target (any placement): verify\n"
            "                 a tree of up to N (1..32) proposed tokens per round, no\n"
            "                 deeper than K, in one forward (docs/spec.md); default 0: a\n"
            "                 chain of K\n"
            "  --device-loop M  auto (default): the CUDA device loop when it takes, else the\n"
            "                 host paths; on: the device loop or a refusal naming why; off:\n"
            "                 the host paths only\n");
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

static int parse_loop_mode(const char *s, int *out)
{
    static const char *const names[] = {"auto", "on", "off"}; /* LOOP_* order */
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return 0;
        }
    return -1;
}

/* Parses one option with a value; returns 0, or -1 on a bad value. */
static int option_value(args *a, const char *opt, const char *v)
{
    if (!strcmp(opt, "-m")) a->model = v;
    else if (!strcmp(opt, "-p")) a->prompt = v;
    else if (!strcmp(opt, "--tokens")) a->tokens = v;
    else if (!strcmp(opt, "--tokenizer")) a->tokenizer = v;
    else if (!strcmp(opt, "--backend")) a->backend = v;
    else if (!strcmp(opt, "--placement")) a->placement = v;
    else if (!strcmp(opt, "--draft")) a->draft = v;
    else if (!strcmp(opt, "--draft-head")) a->draft_head = v;
    else if (!strcmp(opt, "--drafter")) return (a->drafter = llm_drafter_kind_parse(v)) < 0 ? -1 : 0;
    else if (!strcmp(opt, "--draft-k")) return parse_long(v, 1, 4096, &a->draft_k);
    else if (!strcmp(opt, "--draft-tree")) return parse_long(v, 0, 32, &a->draft_tree);
    else if (!strcmp(opt, "-n")) return parse_long(v, 0, INT32_MAX, &a->n_predict);
    else if (!strcmp(opt, "--dump-logits")) a->dump_logits = v;
    else if (!strcmp(opt, "--threads")) return parse_long(v, 1, 256, &a->threads);
    else if (!strcmp(opt, "--chunk")) return parse_long(v, 1, INT32_MAX, &a->chunk);
    else if (!strcmp(opt, "--ctx")) return parse_long(v, 1, INT32_MAX, &a->ctx);
    else if (!strcmp(opt, "--top-k")) return parse_long(v, 0, INT32_MAX, &a->top_k);
    else if (!strcmp(opt, "--temp")) return parse_double(v, 0.0, 100.0, &a->temp);
    else if (!strcmp(opt, "--top-p")) return parse_double(v, 0.0, 1.0, &a->top_p);
    else if (!strcmp(opt, "--seed")) return parse_u64(v, &a->seed);
    else if (!strcmp(opt, "--device-loop")) return parse_loop_mode(v, &a->device_loop);
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
    a->draft_k = 4;
    a->drafter = -1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(o, "--ids")) { a->ids = 1; continue; }
        if (!strcmp(o, "--no-bos")) { a->no_bos = 1; continue; }
        if (!strcmp(o, "--adaptive-k")) { a->adaptive_k = LLM_SPEC_ADAPT_ACCEPT; continue; }
        if (!strcmp(o, "--cost-k")) { a->adaptive_k = LLM_SPEC_ADAPT_COST; continue; }
        if (!strcmp(o, "--no-mmap")) { a->no_mmap = 1; continue; }
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
    if (a->n_predict == 0 && !a->dump_logits) {
        fprintf(stderr, PROG ": -n 0 generates nothing; it needs --dump-logits FILE\n");
        return 2;
    }
    if (a->draft_head && a->drafter < 0)
        a->drafter = LLM_DRAFTER_BLOCK;
    if (a->draft && a->drafter < 0)
        a->drafter = LLM_DRAFTER_MODEL;
    int hybrid = a->drafter == LLM_DRAFTER_HYBRID;
    if (a->draft_head && a->drafter != LLM_DRAFTER_BLOCK && !hybrid) {
        fprintf(stderr, PROG ": --draft-head HEAD goes with --drafter block or hybrid\n");
        return 2;
    }
    if (a->drafter == LLM_DRAFTER_BLOCK && !a->draft_head) {
        fprintf(stderr, PROG ": --drafter block needs --draft-head HEAD\n");
        return 2;
    }
    if (hybrid && (a->draft != NULL) == (a->draft_head != NULL)) {
        fprintf(stderr, PROG ": --drafter hybrid needs --draft MODEL or --draft-head HEAD, "
                             "one of them\n");
        return 2;
    }
    if (a->draft_tree > 0 && a->drafter != LLM_DRAFTER_BLOCK) {
        fprintf(stderr, PROG ": --draft-tree N goes with the block drafter (--draft-head HEAD)\n");
        return 2;
    }
    if (a->drafter == LLM_DRAFTER_MODEL && !a->draft) {
        fprintf(stderr, PROG ": --drafter model needs --draft MODEL\n");
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

static void report_spec(const llm_spec *sd, uint64_t wall_ns)
{
    llm_spec_stats st;
    llm_spec_get_stats(sd, &st);
    fprintf(stderr,
            PROG ": speculative: %" PRIu64 " rounds, %" PRIu64 " drafted, %" PRIu64
            " accepted (acceptance %.3f), %.2f tokens/round, %" PRIu64 " plain steps, next k %d\n"
            PROG ": speculative: draft %.1f ms, verify %.1f ms, accept %.1f ms; %" PRIu64
            " tokens in %.1f ms (%.2f tokens/s)\n",
            st.rounds, st.drafted, st.accepted, st.acceptance, st.tokens_per_round, st.steps,
            (int)st.k, (double)st.draft_ns / 1e6, (double)st.verify_ns / 1e6,
            (double)st.accept_ns / 1e6, st.generated, (double)wall_ns / 1e6,
            per_second(st.generated, wall_ns));
    fprintf(stderr, PROG ": speculative: drafter %s", llm_drafter_kind_name(st.drafter));
    for (int i = 0; i < LLM_DRAFTER_COUNT; i++)
        if (st.by[i].rounds)
            fprintf(stderr, "; %s %" PRIu64 " rounds, %" PRIu64 " drafted, %" PRIu64 " accepted",
                    llm_drafter_kind_name(i), st.by[i].rounds, st.by[i].drafted,
                    st.by[i].accepted);
    fprintf(stderr, "\n");
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The device loop's statistics, in report_spec's shape. */
static void report_loop(const llm_device_loop *l, uint64_t wall_ns, size_t generated)
{
    llm_device_loop_stats st;
    llm_device_loop_get_stats(l, &st);
    if (st.drafter < 0) {
        fprintf(stderr,
                PROG ": device loop: %" PRIu64 " plain steps, %" PRIu64 " read-backs; %zu tokens in"
                " %.1f ms (%.2f tokens/s)\n",
                st.plain_steps, st.readbacks, generated, (double)wall_ns / 1e6,
                per_second(generated, wall_ns));
        return;
    }
    fprintf(stderr,
            PROG ": device loop: drafter %s k %d; %" PRIu64 " rounds, %" PRIu64 " drafted, %" PRIu64
            " accepted (acceptance %.3f), %" PRIu64 " plain steps, %" PRIu64 " read-backs\n"
            PROG ": device loop: %zu tokens in %.1f ms (%.2f tokens/s)\n",
            llm_drafter_kind_name(st.drafter), (int)st.k, st.rounds, st.drafted, st.accepted,
            st.drafted ? (double)st.accepted / (double)st.drafted : 0.0, st.plain_steps,
            st.readbacks, generated, (double)wall_ns / 1e6, per_second(generated, wall_ns));
}

/* Generation through the device loop, as --device-loop asks: 0 when it
 * ran, 1 when it failed or (on) was refused, with one line printed, and
 * LOOP_NOT_TAKEN when the host paths should run instead (auto, or off).
 * ds is the model drafter's draft session (NULL otherwise). */
static int try_loop(const args *a, llm_session *s, llm_session *ds, llm_sampler *smp,
                    const int32_t *ids, size_t n, const llm_generate_params *gp, out_state *o)
{
    if (a->device_loop == LOOP_OFF)
        return LOOP_NOT_TAKEN;
    llm_device_loop_params lp = LLM_DEVICE_LOOP_PARAMS_INIT;
    lp.drafter = a->drafter;
    lp.k = (int32_t)a->draft_k;
    lp.adaptive = a->adaptive_k;
    lp.head_path = a->draft_head;
    llm_device_loop *l = NULL;
    char why[512];
    int rc = llm_device_loop_create(s, ds, &lp, &l, why, sizeof why);
    if (rc == 0 && !llm_device_loop_takes(l, smp, why, sizeof why))
        rc = LLM_EUNSUP;
    if (rc == LLM_EUNSUP && a->device_loop == LOOP_AUTO) {
        llm_device_loop_free(l);
        return LOOP_NOT_TAKEN;
    }
    if (rc) {
        /* The engine's line begins "device loop: "; say it once. */
        const char *w = strncmp(why, "device loop: ", 13) == 0 ? why + 13 : why;
        fprintf(stderr, PROG ": %s%s\n", rc == LLM_EUNSUP ? "cannot run --device-loop on: " : "",
                rc == LLM_EUNSUP ? w : why);
        llm_device_loop_free(l);
        return 1;
    }
    size_t got = 0;
    uint64_t t0 = now_ns();
    rc = llm_device_loop_generate(l, smp, ids, n, gp, emit, o, &got, NULL);
    uint64_t wall = now_ns() - t0;
    printf("\n");
    if (rc) {
        fprintf(stderr, PROG ": %s: %s\n", llm_strerror(rc), llm_device_loop_error(l));
    } else {
        report_loop(l, wall, got);
        fprintf(stderr, PROG ": path: device loop\n");
    }
    llm_device_loop_free(l);
    return rc ? 1 : 0;
}

/* Opens the draft model and its session like the target's. 0, or 1 with a
 * message printed. */
static int open_draft(const args *a, const llm_session_options *so, llm_model **dm,
                      llm_session **ds)
{
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.n_threads = (int32_t)a->threads;
    mo.backend = a->backend;
    mo.no_mmap = a->no_mmap;
    char err[512];
    if (llm_model_open(a->draft, &mo, dm, err, sizeof err) != 0 ||
        llm_session_create(*dm, so, ds, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": draft: %s\n", err);
        return 1;
    }
    return 0;
}

/* llm_spec_generate with the --draft model; prints the round statistics.
 * 0, or 1 after printing what failed. */
static int generate_spec(const args *a, llm_session *s, llm_sampler *smp, const int32_t *ids,
                         size_t n, const llm_generate_params *gp, out_state *o)
{
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = (int32_t)llm_session_n_ctx(s);
    so.request = 1;
    llm_model *dm = NULL;
    llm_session *ds = NULL;
    llm_drafter *dr = NULL;
    llm_spec *sd = NULL;
    char err[512];
    int model = a->draft && (a->drafter == LLM_DRAFTER_MODEL || a->drafter == LLM_DRAFTER_HYBRID);
    int rc = model ? open_draft(a, &so, &dm, &ds) : 0;
    int host = 1;
    if (rc == 0) {
        rc = try_loop(a, s, ds, smp, ids, n, gp, o);
        host = rc == LOOP_NOT_TAKEN;
        rc = host ? 0 : rc;
    }
    if (rc == 0 && host) {
        llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
        dp.kind = a->drafter;
        dp.draft = ds;
        dp.head_path = a->draft_head;
        dp.target = s;
        dp.n_threads = (int32_t)a->threads;
        if (llm_drafter_create(&dp, &dr, err, sizeof err) != 0) {
            fprintf(stderr, PROG ": %s\n", err);
            rc = 1;
        }
    }
    if (rc == 0 && host) {
        llm_spec_params sp = LLM_SPEC_PARAMS_INIT;
        sp.k = (int32_t)a->draft_k;
        sp.adaptive = a->adaptive_k;
        sp.drafter = dr;
        if (llm_spec_create(s, ds, &sp, &sd, err, sizeof err) != 0) {
            fprintf(stderr, PROG ": %s\n", err);
            rc = 1;
        } else if (a->draft_tree > 0 &&
                   llm_spec_set_tree(sd, (int32_t)a->draft_tree, err, sizeof err) != 0) {
            fprintf(stderr, PROG ": %s\n", err);
            rc = 1;
        }
    }
    if (rc == 0 && host) {
        uint64_t t0 = now_ns();
        rc = llm_spec_generate(sd, smp, ids, n, gp, emit, o, NULL, NULL);
        uint64_t wall = now_ns() - t0;
        printf("\n");
        if (rc) {
            fprintf(stderr, PROG ": %s: %s\n", llm_strerror(rc), llm_spec_error(sd));
        } else {
            report_spec(sd, wall);
            fprintf(stderr, PROG ": path: host\n");
        }
        rc = rc ? 1 : 0;
    }
    llm_spec_free(sd);
    llm_drafter_free(dr);
    llm_session_free(ds);
    llm_model_free(dm);
    return rc;
}

/* Writes rows x n_vocab floats to path as little-endian f32. 0, or 1 with
 * a message printed (a partial file is removed). */
static int write_rows(const char *path, const float *lg, size_t count)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, PROG ": cannot create %s: %s\n", path, strerror(errno));
        return 1;
    }
    unsigned char buf[4096];
    size_t fill = 0;
    int bad = 0;
    for (size_t i = 0; i < count && !bad; i++) {
        uint32_t u;
        memcpy(&u, &lg[i], sizeof u);
        for (int b = 0; b < 4; b++)
            buf[fill++] = (unsigned char)(u >> (8 * b));
        if (fill == sizeof buf || i + 1 == count) {
            bad = fwrite(buf, 1, fill, f) != fill;
            fill = 0;
        }
    }
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, PROG ": cannot write %s\n", path);
        remove(path);
        return 1;
    }
    return 0;
}

/* --dump-logits: the prompt in one forward, every row handed back and
 * written; then the session is emptied for generation. */
static int dump_logits(const args *a, llm_session *s, const int32_t *ids, size_t n, int32_t n_vocab)
{
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.chunk = (int32_t)n;
    fp.rows = (int32_t)n;
    const float *lg = NULL;
    int rc = llm_forward(s, &fp, ids, n, &lg, NULL);
    if (rc) {
        fprintf(stderr, PROG ": --dump-logits: %s: %s\n", llm_strerror(rc), llm_session_error(s));
        return 1;
    }
    rc = write_rows(a->dump_logits, lg, n * (size_t)n_vocab);
    llm_session_reset(s);
    return rc;
}

static int run(const args *a, llm_model *m, const int32_t *ids, size_t n)
{
    llm_model_info info;
    llm_model_get_info(m, &info);
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = a->ctx > INT32_MAX ? INT32_MAX : (int32_t)a->ctx;
    so.request = 1;
    so.placement = a->placement;
    if (a->dump_logits) /* the whole prompt in one forward */
        so.n_batch = n > INT32_MAX ? INT32_MAX : (int32_t)n;
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
    rc = a->dump_logits ? dump_logits(a, s, ids, n, info.n_vocab) : 0;
    if (rc || a->n_predict == 0) {
        llm_sampler_free(smp);
        llm_session_free(s);
        return rc;
    }
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = (int32_t)a->n_predict;
    gp.chunk = (int32_t)(a->chunk > INT32_MAX ? INT32_MAX : a->chunk);
    out_state o = {m, a->ids, n ? ids[n - 1] : -1, 0};
    if (a->drafter >= 0) {
        rc = generate_spec(a, s, smp, ids, n, &gp, &o);
        if (rc == 0)
            report(s, &info);
        llm_sampler_free(smp);
        llm_session_free(s);
        return rc;
    }
    rc = try_loop(a, s, NULL, smp, ids, n, &gp, &o);
    if (rc == LOOP_NOT_TAKEN) {
        rc = llm_generate(s, smp, ids, n, &gp, emit, &o, NULL, NULL);
        printf("\n");
        if (rc)
            fprintf(stderr, PROG ": %s: %s\n", llm_strerror(rc), llm_session_error(s));
        else
            fprintf(stderr, PROG ": path: host\n");
    }
    if (rc == 0)
        report(s, &info);
    llm_sampler_free(smp);
    llm_session_free(s);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    args a;
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        puts("pm-generate " PHASEMARK_VERSION_STRING);
        return 0;
    }
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc == 1 ? 0 : 2;
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.n_threads = (int32_t)a.threads;
    mo.tokenizer_path = a.tokenizer;
    mo.backend = a.backend;
    mo.no_mmap = a.no_mmap;
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
