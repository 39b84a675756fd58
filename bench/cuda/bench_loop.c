/* bench_cuda_loop — the device loop (cuda_loop.h) against the engine's
 * decoding, plain and speculative, in one process on cuda:0.
 *
 *   bench_cuda_loop --target T --draft D --prompts FILE [--tokens 128]
 *                   [--reps 2] [--n-prompts 24] [--k 1,2,3,4,6,8]
 *                   [--temp 0.7] [--seed 7] [--ngram-only 0|1]
 *                   [--head H] [--block-only 0|1] [--block-k 4,6,8,12,16]
 *                   [--hybrid-k 4,8]
 *
 * FILE: held-out prompts, "REF<TAB>TEXT" a line (bench/spec/
 * heldout_prompts.tsv). Every configuration runs its two sides back to
 * back per prompt and repetition, so both see the same machine; wall time
 * includes each call's prefill, and tok/s = generated tokens / wall time.
 * No EOS stop: every call generates --tokens ids.
 *
 * One JSON object a line on stdout, in bench/results/spec.json's row
 * schema (device, drafter, k, temperature, plain_tok_s, spec_tok_s,
 * speedup, acceptance, parity) plus what each side ran:
 *   baseline  plain = llm_generate (the seam's graph step, greedy id on the
 *             device, one host wait a token), spec side = the plain device
 *             loop: the baseline's own speedup;
 *   loop      plain = the plain device loop, spec = device-resident rounds
 *             of k: model drafter, greedy (parity: every id equal to the
 *             plain loop's, which equals llm_generate's) and at --temp
 *             (both sides sampling on the device, the sampler reseeded
 *             with --seed + prompt index; parity "law"); n-gram drafter
 *             (the host proposes, the device verifies), greedy, k = 2, 4,
 *             8, 16;
 *   loop-device-lookup  the same n-gram rows with the lookup on the device
 *             too (rounds in batches, llm_cuda_loop_set_ngram_device);
 *   host      plain = llm_generate, spec = llm_spec_generate (host rounds,
 *             model drafter, fixed k), greedy and at --temp (parity
 *             "law"): today's paths, for reference.
 *   loop, drafter "block" (--head H, a block head file): the plain device
 *             loop against block rounds (llm_cuda_loop_set_block) at each
 *             --block-k, greedy and at --temp, alternating per prompt
 *             like the model rows; --block-only 1 runs the baseline, the
 *             block rows and the model rows at --k only. A "costs" row
 *             gives, for each --block-k, the device time of the loop's
 *             own graphs: the head's forward, the verify of k + 1 rows
 *             (with the context append and the acceptance) and the plain
 *             step, 100 replays each at position 128, greedy, and the
 *             sampled head and verify ("head_sampled", "verify_sampled")
 *             when the --temp rows captured them (else -1).
 * Every row also gives each side's mean time to its first id, the
 * prefill ("plain_first_ms", "spec_first_ms"), and for loop rows the
 * rounds launched ("launched": "rounds" counts those whose ids were read;
 * the rest ran past the last id) and the host's waits ("readbacks").
 *   loop, drafter "hybrid" (--head H): the plain device loop against
 *             hybrid rounds (n-gram where a match of 3 exists, else the
 *             head) at each --hybrid-k (default 4,8), greedy and at
 *             --temp; the row's ngram_rounds is how many of its rounds
 *             the n-gram lookup proposed. N-gram rows (host lookup) at
 *             --temp at each --hybrid-k too.
 * Every row names the verify's products ("verify": rows, stationary or
 * auto, tune.rows_stationary as PHASEMARK_CUDA_VERIFY set it) and their
 * row plan ("rows_plan", tune.rows_plan as PHASEMARK_CUDA_ROWS_PLAN set it).
 * Exit 0, 1 on a failure or a greedy parity break, 2 usage.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_loop.h"
#include "model.h"
#include "phasemark/engine.h"
#include "phasemark/spec.h"

#define PROG "bench_cuda_loop"
#define MAX_PROMPTS 64
#define MAX_IDS 256
#define MAX_OUT 1024
#define MAX_K 16

typedef struct out {
    int32_t ids[MAX_OUT];
    size_t n;
    uint64_t t0, first_ns; /* the call's start; its first id's arrival after it */
} out;

typedef struct bench {
    const char *target, *draft, *prompts;
    long tokens, reps, n_prompts;
    double temp;
    unsigned long long seed;
    int32_t ks[MAX_K];
    int n_k;
    long ngram_only; /* 1: the baseline and the n-gram rows only */
    const char *head; /* block head file, or NULL */
    long block_only;
    int32_t bks[MAX_K];
    int n_bk;
    int32_t hks[MAX_K]; /* hybrid rows' k */
    int n_hk;
    llm_model *tm, *dm;
    llm_session *t, *d;
    llm_cuda_loop *loop;
    char device[160];
    int32_t ids[MAX_PROMPTS][MAX_IDS];
    size_t n_ids[MAX_PROMPTS];
    int n;
    out ref[MAX_PROMPTS]; /* llm_generate's greedy ids */
    int bad;              /* a greedy parity break or a failure */
} bench;

/* One configuration's totals over prompts and repetitions. */
typedef struct side_sum {
    uint64_t plain_ns, spec_ns, plain_tok, spec_tok;
    uint64_t plain_first_ns, spec_first_ns; /* to each call's first id (its prefill) */
    uint64_t calls;
    uint64_t drafted, accepted, rounds, ngram_rounds;
    uint64_t launched, readbacks; /* loop rounds launched (read or not), host waits */
    int parity;
} side_sum;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int collect(void *user, int32_t tok)
{
    out *o = user;
    if (o->n == 0)
        o->first_ns = now_ns() - o->t0;
    if (o->n < MAX_OUT)
        o->ids[o->n++] = tok;
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: " PROG " --target T --draft D --prompts FILE [--tokens N] [--reps N]\n"
                    "       [--n-prompts N] [--k K,K,...] [--temp T] [--seed S] [--ngram-only 0|1]\n"
                    "       [--head H] [--block-only 0|1] [--block-k K,K,...] [--hybrid-k K,K,...]\n");
    return 2;
}

static int parse_long(const char *s, long lo, long hi, long *val)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *val = v;
    return 0;
}

static int parse_ks(bench *b, const char *s, int32_t *ks, int *n_k)
{
    (void)b;
    *n_k = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < 1 || v > LLM_CUDA_LOOP_K_MAX || *n_k == MAX_K)
            return -1;
        ks[(*n_k)++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return *n_k ? 0 : -1;
}

static int parse_args(bench *b, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || !v)
            return -1;
        i++;
        if (strcmp(a, "--target") == 0)
            b->target = v;
        else if (strcmp(a, "--draft") == 0)
            b->draft = v;
        else if (strcmp(a, "--prompts") == 0)
            b->prompts = v;
        else if (strcmp(a, "--tokens") == 0) {
            if (parse_long(v, 1, MAX_OUT, &b->tokens))
                return -1;
        } else if (strcmp(a, "--reps") == 0) {
            if (parse_long(v, 1, 100, &b->reps))
                return -1;
        } else if (strcmp(a, "--n-prompts") == 0) {
            if (parse_long(v, 1, MAX_PROMPTS, &b->n_prompts))
                return -1;
        } else if (strcmp(a, "--ngram-only") == 0) {
            if (parse_long(v, 0, 1, &b->ngram_only))
                return -1;
        } else if (strcmp(a, "--k") == 0) {
            if (parse_ks(b, v, b->ks, &b->n_k))
                return -1;
        } else if (strcmp(a, "--block-k") == 0) {
            if (parse_ks(b, v, b->bks, &b->n_bk))
                return -1;
        } else if (strcmp(a, "--hybrid-k") == 0) {
            if (parse_ks(b, v, b->hks, &b->n_hk))
                return -1;
        } else if (strcmp(a, "--head") == 0) {
            b->head = v;
        } else if (strcmp(a, "--block-only") == 0) {
            if (parse_long(v, 0, 1, &b->block_only))
                return -1;
        } else if (strcmp(a, "--temp") == 0) {
            char *end;
            b->temp = strtod(v, &end);
            if (end == v || *end || !(b->temp > 0.0) || b->temp > 10.0)
                return -1;
        } else if (strcmp(a, "--seed") == 0) {
            char *end;
            errno = 0;
            b->seed = strtoull(v, &end, 10);
            if (errno || end == v || *end)
                return -1;
        } else {
            return -1;
        }
    }
    return b->target && b->draft && b->prompts ? 0 : -1;
}

static int load_prompts(bench *b)
{
    FILE *f = fopen(b->prompts, "r");
    if (!f) {
        fprintf(stderr, PROG ": %s: %s\n", b->prompts, strerror(errno));
        return 1;
    }
    char line[4096];
    while (b->n < b->n_prompts && fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t');
        if (!tab)
            continue;
        char *text = tab + 1;
        text[strcspn(text, "\n")] = '\0';
        if (llm_model_tokenize(b->tm, text, strlen(text), 1, b->ids[b->n], MAX_IDS,
                               &b->n_ids[b->n]) != 0) {
            fprintf(stderr, PROG ": cannot tokenize prompt %d\n", b->n);
            fclose(f);
            return 1;
        }
        b->n++;
    }
    fclose(f);
    return b->n ? 0 : 1;
}

static llm_model *open_model(const char *path)
{
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.backend = "cuda:0";
    llm_model *m = NULL;
    char err[512];
    if (llm_model_open(path, &mo, &m, err, sizeof err) != 0)
        fprintf(stderr, PROG ": %s\n", err);
    return m;
}

static llm_session *open_session(llm_model *m)
{
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = 512;
    so.n_batch = 32;
    llm_session *s = NULL;
    char err[512];
    if (llm_session_create(m, &so, &s, err, sizeof err) != 0)
        fprintf(stderr, PROG ": %s\n", err);
    return s;
}

static llm_generate_params gen_params(const bench *b)
{
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = (int32_t)b->tokens;
    gp.stop_at_eos = 0;
    return gp;
}

static int same(const out *a, const out *b)
{
    return a->n == b->n && memcmp(a->ids, b->ids, a->n * sizeof a->ids[0]) == 0;
}

static int run_generate(bench *b, llm_sampler *sp, int i, out *o, uint64_t *ns)
{
    llm_generate_params gp = gen_params(b);
    o->n = 0;
    llm_session_reset(b->t);
    uint64_t t0 = now_ns();
    o->t0 = t0;
    int rc = llm_generate(b->t, sp, b->ids[i], b->n_ids[i], &gp, collect, o, NULL, NULL);
    *ns += now_ns() - t0;
    if (rc)
        fprintf(stderr, PROG ": generate: %s\n", llm_session_error(b->t));
    return rc;
}

static int run_loop(bench *b, llm_sampler *sp, int32_t k, int i, out *o, uint64_t *ns)
{
    llm_generate_params gp = gen_params(b);
    o->n = 0;
    uint64_t t0 = now_ns();
    o->t0 = t0;
    int rc = llm_cuda_loop_generate(b->loop, sp, k, b->ids[i], b->n_ids[i], &gp, collect, o,
                                    NULL, NULL);
    *ns += now_ns() - t0;
    if (rc)
        fprintf(stderr, PROG ": loop k=%d: %s\n", (int)k, llm_cuda_loop_error(b->loop));
    return rc;
}

/* The verify's products under the target's tuning. */
static const char *verify_mode(const bench *b)
{
    llm_cuda_tuning t;
    if (llm_cuda_get_tuning(llm_cuda_backend_context(b->tm->be), &t) != 0)
        return "unknown";
    return t.rows_stationary == 0 ? "rows" : t.rows_stationary == 1 ? "stationary" : "auto";
}

/* The stationary products' row plan (tune.rows_plan), -1 unknown. */
static int rows_plan(const bench *b)
{
    llm_cuda_tuning t;
    if (llm_cuda_get_tuning(llm_cuda_backend_context(b->tm->be), &t) != 0)
        return -1;
    return t.rows_plan;
}

static void emit_row(const bench *b, const char *mode, const char *drafter, int32_t k,
                     double temp, const side_sum *s, const char *parity)
{
    double plain = s->plain_ns ? (double)s->plain_tok * 1e9 / (double)s->plain_ns : 0.0;
    double spec = s->spec_ns ? (double)s->spec_tok * 1e9 / (double)s->spec_ns : 0.0;
    printf("{\"device\": \"%s\", \"bench\": \"bench/cuda/run_loop.sh\", \"mode\": \"%s\", "
           "\"drafter\": \"%s\", \"k\": %d, \"temperature\": %.2f, \"prompts\": %d, "
           "\"tokens\": %ld, \"reps\": %ld, \"plain_tok_s\": %.2f, \"spec_tok_s\": %.2f, "
           "\"speedup\": %.4f, \"acceptance\": %.4f, \"tokens_per_round\": %.3f, "
           "\"rounds\": %llu, \"ngram_rounds\": %llu, \"verify\": \"%s\", \"rows_plan\": %d, "
           "\"plain_first_ms\": %.3f, \"spec_first_ms\": %.3f, \"launched\": %llu, "
           "\"readbacks\": %llu, \"parity\": %s}\n",
           b->device, mode, drafter, (int)k, temp, b->n, b->tokens, b->reps, plain, spec,
           plain > 0.0 ? spec / plain : 0.0,
           s->drafted ? (double)s->accepted / (double)s->drafted : 0.0,
           s->rounds ? (double)(s->accepted + s->rounds) / (double)s->rounds : 0.0,
           (unsigned long long)s->rounds, (unsigned long long)s->ngram_rounds, verify_mode(b),
           rows_plan(b), s->calls ? (double)s->plain_first_ns / 1e6 / (double)s->calls : 0.0,
           s->calls ? (double)s->spec_first_ns / 1e6 / (double)s->calls : 0.0,
           (unsigned long long)s->launched, (unsigned long long)s->readbacks, parity);
    fflush(stdout);
}

/* llm_generate's greedy ids (the reference) and the plain loop's speedup
 * over it. */
static int baseline(bench *b, llm_sampler *sp)
{
    side_sum s = {.parity = 1};
    static out o;
    for (long r = 0; r < b->reps; r++)
        for (int i = 0; i < b->n; i++) {
            if (run_generate(b, sp, i, &b->ref[i], &s.plain_ns) ||
                run_loop(b, sp, 0, i, &o, &s.spec_ns))
                return 1;
            s.plain_tok += b->ref[i].n;
            s.spec_tok += o.n;
            s.plain_first_ns += b->ref[i].first_ns;
            s.spec_first_ns += o.first_ns;
            s.calls++;
            s.parity &= same(&o, &b->ref[i]);
        }
    emit_row(b, "baseline", "none", 0, 0.0, &s, s.parity ? "true" : "false");
    b->bad |= !s.parity;
    return 0;
}

static int loop_rounds(bench *b, llm_sampler *sp, int32_t k, double temp, int kind, int dev)
{
    side_sum s = {.parity = 1};
    static out plain, spec;
    if (llm_cuda_loop_set_drafter(b->loop, kind, 0, 0) != 0 ||
        llm_cuda_loop_set_ngram_device(b->loop, dev) != 0) {
        fprintf(stderr, PROG ": %s\n", llm_cuda_loop_error(b->loop));
        return 1;
    }
    for (long r = 0; r < b->reps; r++)
        for (int i = 0; i < b->n; i++) {
            llm_cuda_loop_stats s0, s1;
            llm_sampler_reseed(sp, b->seed + (uint64_t)i);
            if (run_loop(b, sp, 0, i, &plain, &s.plain_ns))
                return 1;
            llm_sampler_reseed(sp, b->seed + (uint64_t)i);
            llm_cuda_loop_get_stats(b->loop, &s0);
            if (run_loop(b, sp, k, i, &spec, &s.spec_ns))
                return 1;
            llm_cuda_loop_get_stats(b->loop, &s1);
            s.plain_tok += plain.n;
            s.spec_tok += spec.n;
            s.plain_first_ns += plain.first_ns;
            s.spec_first_ns += spec.first_ns;
            s.calls++;
            s.launched += s1.rounds - s0.rounds;
            s.readbacks += s1.readbacks - s0.readbacks;
            s.drafted += s1.drafted - s0.drafted;
            s.accepted += s1.accepted - s0.accepted;
            /* Model rounds launched past a stop are not read: count the
             * read ones. Host n-gram and hybrid rounds are all read. */
            s.ngram_rounds += s1.ngram_rounds - s0.ngram_rounds;
            s.rounds += (kind == LLM_DRAFTER_NGRAM && !dev) || kind == LLM_DRAFTER_HYBRID
                            ? s1.rounds - s0.rounds
                        : kind == LLM_DRAFTER_NGRAM ? (s1.committed - s0.committed) -
                                                          (s1.accepted - s0.accepted)
                                                    : (s1.drafted - s0.drafted) / (uint64_t)k;
            if (!(temp > 0.0))
                s.parity &= same(&spec, &plain) && same(&plain, &b->ref[i]);
        }
    emit_row(b, dev ? "loop-device-lookup" : "loop", llm_drafter_kind_name(kind), k, temp, &s,
             temp > 0.0 ? "\"law\"" : s.parity ? "true" : "false");
    if (!(temp > 0.0))
        b->bad |= !s.parity;
    return 0;
}

/* Today's host rounds (llm_spec_generate) against llm_generate. */
static int host_rounds(bench *b, llm_sampler *sp, llm_sampler *sp2, int32_t k, double temp)
{
    llm_spec_params prm = LLM_SPEC_PARAMS_INIT;
    prm.k = k;
    prm.adaptive = LLM_SPEC_ADAPT_OFF;
    llm_spec *sd = NULL;
    char err[512];
    if (llm_spec_create(b->t, b->d, &prm, &sd, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    side_sum s = {.parity = 1};
    static out plain, spec;
    llm_generate_params gp = gen_params(b);
    int rc = 0;
    for (long r = 0; rc == 0 && r < b->reps; r++)
        for (int i = 0; rc == 0 && i < b->n; i++) {
            llm_sampler_reseed(sp, b->seed + (uint64_t)i);
            llm_sampler_reseed(sp2, b->seed + (uint64_t)i);
            rc = run_generate(b, sp, i, &plain, &s.plain_ns);
            spec.n = 0;
            llm_session_reset(b->t);
            llm_spec_stats st0, st1;
            llm_spec_get_stats(sd, &st0);
            uint64_t t0 = now_ns();
            spec.t0 = t0;
            if (rc == 0)
                rc = llm_spec_generate(sd, sp2, b->ids[i], b->n_ids[i], &gp, collect, &spec,
                                       NULL, NULL);
            s.spec_ns += now_ns() - t0;
            if (rc) {
                fprintf(stderr, PROG ": spec: %s\n", llm_spec_error(sd));
                break;
            }
            llm_spec_get_stats(sd, &st1);
            s.plain_tok += plain.n;
            s.spec_tok += spec.n;
            s.plain_first_ns += plain.first_ns;
            s.spec_first_ns += spec.first_ns;
            s.calls++;
            s.drafted += st1.drafted - st0.drafted;
            s.accepted += st1.accepted - st0.accepted;
            s.rounds += st1.rounds - st0.rounds;
            if (!(temp > 0.0))
                s.parity &= same(&spec, &plain);
        }
    llm_spec_free(sd);
    if (rc)
        return 1;
    emit_row(b, "host", "model", k, temp, &s, temp > 0.0 ? "\"law\"" : s.parity ? "true" : "false");
    if (!(temp > 0.0))
        b->bad |= !s.parity;
    return 0;
}

/* Per-forward device costs at each block k (llm_cuda_loop_block_costs:
 * the loop's own graphs replayed at position 128 between device events,
 * after the greedy block rows captured them). One JSON line. */
static int block_costs(bench *b)
{
    printf("{\"device\": \"%s\", \"bench\": \"bench/cuda/run_loop.sh\", \"mode\": \"costs\", "
           "\"drafter\": \"block\", \"pos\": 128, \"reps\": 100, \"us\": {",
           b->device);
    int rc = 0;
    for (int j = 0; rc == 0 && j < b->n_bk; j++) {
        llm_cuda_loop_costs c;
        rc = llm_cuda_loop_block_costs(b->loop, b->bks[j], 128, 100, &c);
        if (rc == 0)
            printf("%s\"%d\": {\"head\": %.2f, \"verify\": %.2f, \"plain_step\": %.2f, "
                   "\"head_sampled\": %.2f, \"verify_sampled\": %.2f}",
                   j ? ", " : "", (int)b->bks[j], c.head_us, c.verify_us, c.plain_us,
                   c.head_sampled_us, c.verify_sampled_us);
    }
    printf("}}\n");
    fflush(stdout);
    if (rc)
        fprintf(stderr, PROG ": costs: %s\n", llm_cuda_loop_error(b->loop));
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    static bench b;
    b.tokens = 128;
    b.reps = 2;
    b.n_prompts = 24;
    b.temp = 0.7;
    b.seed = 7;
    static const int32_t ks_default[] = {1, 2, 3, 4, 6, 8};
    memcpy(b.ks, ks_default, sizeof ks_default);
    b.n_k = 6;
    static const int32_t bks_default[] = {4, 6, 8, 12, 16};
    memcpy(b.bks, bks_default, sizeof bks_default);
    b.n_bk = 5;
    static const int32_t hks_default[] = {4, 8};
    memcpy(b.hks, hks_default, sizeof hks_default);
    b.n_hk = 2;
    if (parse_args(&b, argc, argv))
        return usage();
    b.tm = open_model(b.target);
    b.dm = b.tm ? open_model(b.draft) : NULL;
    if (!b.dm || load_prompts(&b))
        return 1;
    b.t = open_session(b.tm);
    b.d = b.t ? open_session(b.dm) : NULL;
    char err[512];
    if (!b.d || llm_cuda_loop_create(b.t, b.d, &b.loop, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", b.d ? err : "sessions");
        return 1;
    }
    llm_cuda *cu = llm_cuda_backend_context(b.tm->be);
    snprintf(b.device, sizeof b.device, "cuda: %s", llm_cuda_device_name(cu));
    llm_sampler *greedy = NULL, *greedy2 = NULL, *hot = NULL, *hot2 = NULL;
    llm_sampler_params hp = LLM_SAMPLER_PARAMS_INIT;
    hp.temperature = (float)b.temp;
    hp.seed = b.seed;
    int32_t v = b.tm->hp.n_vocab;
    if (llm_sampler_create(NULL, v, &greedy) || llm_sampler_create(NULL, v, &greedy2) ||
        llm_sampler_create(&hp, v, &hot) || llm_sampler_create(&hp, v, &hot2))
        return 1;
    int rc = baseline(&b, greedy);
    if (rc == 0 && b.head && llm_cuda_loop_set_block(b.loop, b.head) != 0) {
        fprintf(stderr, PROG ": %s\n", llm_cuda_loop_error(b.loop));
        rc = 1;
    }
    for (int j = 0; rc == 0 && b.head && j < b.n_bk; j++)
        rc = loop_rounds(&b, greedy, b.bks[j], 0.0, LLM_DRAFTER_BLOCK, 0);
    for (int j = 0; rc == 0 && b.head && j < b.n_hk; j++)
        rc = loop_rounds(&b, greedy, b.hks[j], 0.0, LLM_DRAFTER_HYBRID, 0);
    for (int j = 0; rc == 0 && b.head && j < b.n_bk; j++)
        rc = loop_rounds(&b, hot, b.bks[j], b.temp, LLM_DRAFTER_BLOCK, 0);
    for (int j = 0; rc == 0 && b.head && j < b.n_hk; j++)
        rc = loop_rounds(&b, hot, b.hks[j], b.temp, LLM_DRAFTER_HYBRID, 0);
    for (int j = 0; rc == 0 && j < b.n_hk; j++)
        rc = loop_rounds(&b, hot, b.hks[j], b.temp, LLM_DRAFTER_NGRAM, 0);
    if (rc == 0 && b.head)
        rc = block_costs(&b);
    for (int j = 0; rc == 0 && !b.ngram_only && j < b.n_k; j++)
        rc = loop_rounds(&b, greedy, b.ks[j], 0.0, LLM_DRAFTER_MODEL, 0);
    for (int j = 0; rc == 0 && !b.ngram_only && j < b.n_k; j++)
        rc = loop_rounds(&b, hot, b.ks[j], b.temp, LLM_DRAFTER_MODEL, 0);
    static const int32_t ngram_ks[] = {2, 4, 8, 16};
    for (int dev = 0; dev < 2 && !b.block_only; dev++)
        for (int j = 0; rc == 0 && j < 4; j++)
            rc = loop_rounds(&b, greedy, ngram_ks[j], 0.0, LLM_DRAFTER_NGRAM, dev);
    static const int32_t host_ks[] = {2, 4};
    for (int j = 0; rc == 0 && !b.ngram_only && !b.block_only && j < 2; j++)
        rc = host_rounds(&b, greedy, greedy2, host_ks[j], 0.0);
    for (int j = 0; rc == 0 && !b.ngram_only && !b.block_only && j < 2; j++)
        rc = host_rounds(&b, hot, hot2, host_ks[j], b.temp);
    llm_cuda_loop_stats st;
    llm_cuda_loop_get_stats(b.loop, &st);
    fprintf(stderr, PROG ": %llu plain steps, %llu rounds, %llu read-backs, %llu captures\n",
            (unsigned long long)st.plain_steps, (unsigned long long)st.rounds,
            (unsigned long long)st.readbacks, (unsigned long long)st.captures);
    llm_sampler_free(greedy);
    llm_sampler_free(greedy2);
    llm_sampler_free(hot);
    llm_sampler_free(hot2);
    llm_cuda_loop_free(b.loop);
    llm_session_free(b.t);
    llm_session_free(b.d);
    llm_model_free(b.tm);
    llm_model_free(b.dm);
    return rc || b.bad ? 1 : 0;
}
