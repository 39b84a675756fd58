/* bench_drafters — every drafter against plain decoding, in one process.
 *
 *   bench_drafters --target T --draft D --prompts FILE [--tokens 128]
 *                  [--temp 0] [--seed 7] [--threads 2] [--reps 1]
 *                  [--n-prompts N] [--head H.gguf]
 *                  [--config DRAFTER:K[:cost|:treeN][:own][:block]]...
 *
 * --head names the block drafter's head (phasemark-block GGUF for the
 * target); configurations "block:K" need it, and "block:K:treeN" runs tree
 * rounds of up to N nodes no deeper than K (llm_spec_set_tree; greedy).
 *
 * FILE holds held-out prompts, "REF<TAB>TEXT" per line
 * (bench/spec/heldout_prompts.tsv). For each configuration, each
 * repetition and each prompt, plain decoding (llm_generate) and then the
 * speculative generator run back to back on the same target model with a
 * sampler of the same seed, so load on the machine falls on both alike;
 * their wall times (prefill included) are summed per configuration.
 * Greedy: every speculative token must equal the plain one (parity); under
 * sampling the outputs are different draws of the same law (checked by
 * tests/spec's chi-square), so parity is reported as "law".
 *
 * "hybrid:K:block" is the hybrid over the block head (--head) instead of
 * the draft model: the n-gram's proposal where a match of 3 exists, else
 * the head's.
 *
 * A ":own" suffix gives the draft model (or the block head) threads of
 * its own instead of the target's (PHASEMARK_SHARE_THREADS=0 around the
 * generator's creation): the A/B of sharing them, in one process.
 *
 * One JSON object per configuration on stdout: drafter, k, cost (1: cost-
 * aware k up to K), own_threads, temperature, plain_tok_s, spec_tok_s,
 * speedup, acceptance, tokens_per_round, tokens_per_forward (committed
 * tokens per target forward after the prefill: rounds and plain steps),
 * tree (0: a chain), rounds and tokens/round per round kind, plain steps,
 * parity. Exit 0, 1 on failure or a parity break, 2 usage.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "phasemark/engine.h"
#include "phasemark/spec.h"

#define PROG "bench_drafters"
#define MAX_PROMPTS 64
#define MAX_CONFIGS 32
#define MAX_IDS 256
#define MAX_OUT 1024

typedef struct config {
    int drafter;
    int32_t k;
    int cost;
    int own; /* ":own": the draft (or head) keeps threads of its own */
    int over_block; /* ":block": a hybrid over the block head, not the model */
    int32_t tree; /* ":treeN": tree rounds of up to N nodes; 0: chains */
} config;

typedef struct bench {
    const char *target, *draft, *prompts, *head;
    long tokens, threads, reps, n_prompts;
    double temp;
    unsigned long long seed;
    config cfg[MAX_CONFIGS];
    int n_cfg;
    const llm_model *tm; /* the target: samplers cover its vocabulary */
    int32_t ids[MAX_PROMPTS][MAX_IDS];
    size_t n_ids[MAX_PROMPTS];
    int n;
} bench;

typedef struct out {
    int32_t ids[MAX_OUT];
    size_t n;
} out;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int collect(void *user, int32_t tok)
{
    out *o = user;
    if (o->n < MAX_OUT)
        o->ids[o->n++] = tok;
    return 0;
}

static int parse_long(const char *s, long lo, long hi, long *v)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi)
        return -1;
    *v = x;
    return 0;
}

/* "ngram:4", "hybrid:4:cost", "model:1:own", "block:8:tree16" or
 * "hybrid:4:block" (suffixes in any order, each at most once, :cost and
 * :treeN not together, :block for a hybrid only). */
static int parse_config(const char *s, config *c)
{
    char name[16];
    const char *colon = strchr(s, ':');
    if (!colon || (size_t)(colon - s) >= sizeof name)
        return -1;
    memcpy(name, s, (size_t)(colon - s));
    name[colon - s] = '\0';
    c->drafter = llm_drafter_kind_parse(name);
    char *end;
    errno = 0;
    long k = strtol(colon + 1, &end, 10);
    if (c->drafter < 0 || errno || end == colon + 1 || k < 1 || k > 32)
        return -1;
    c->k = (int32_t)k;
    c->cost = c->own = c->over_block = 0;
    c->tree = 0;
    while (*end) {
        if (!strncmp(end, ":cost", 5) && !c->cost) {
            c->cost = 1, end += 5;
        } else if (!strncmp(end, ":own", 4) && !c->own) {
            c->own = 1, end += 4;
        } else if (!strncmp(end, ":block", 6) && !c->over_block &&
                   c->drafter == LLM_DRAFTER_HYBRID) {
            c->over_block = 1, end += 6;
        } else if (!strncmp(end, ":tree", 5) && !c->tree) {
            char *tend;
            errno = 0;
            long n = strtol(end + 5, &tend, 10);
            if (errno || tend == end + 5 || n < 1 || n > 32)
                return -1;
            c->tree = (int32_t)n;
            end = tend;
        } else {
            return -1;
        }
    }
    return c->cost && c->tree ? -1 : 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: " PROG " --target T --draft D --prompts FILE [--tokens N] [--temp T]\n"
                    "       [--seed S] [--threads N] [--reps R] [--n-prompts N]\n"
                    "       [--head H.gguf] [--config DRAFTER:K[:cost|:treeN][:own][:block]]...\n");
    return 2;
}

static int parse_args(bench *b, int argc, char **argv)
{
    b->tokens = 128, b->threads = 2, b->reps = 1, b->n_prompts = MAX_PROMPTS, b->seed = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        char *end;
        int bad = 0;
        if (!strcmp(o, "--target")) b->target = v;
        else if (!strcmp(o, "--draft")) b->draft = v;
        else if (!strcmp(o, "--prompts")) b->prompts = v;
        else if (!strcmp(o, "--head")) b->head = v;
        else if (!strcmp(o, "--tokens")) bad = parse_long(v, 1, MAX_OUT, &b->tokens);
        else if (!strcmp(o, "--threads")) bad = parse_long(v, 1, 256, &b->threads);
        else if (!strcmp(o, "--reps")) bad = parse_long(v, 1, 100, &b->reps);
        else if (!strcmp(o, "--n-prompts")) bad = parse_long(v, 1, MAX_PROMPTS, &b->n_prompts);
        else if (!strcmp(o, "--temp")) {
            errno = 0;
            b->temp = strtod(v, &end);
            bad = errno || end == v || *end || !(b->temp >= 0.0 && b->temp <= 10.0);
        } else if (!strcmp(o, "--seed")) {
            errno = 0;
            b->seed = strtoull(v, &end, 10);
            bad = errno || end == v || *end;
        } else if (!strcmp(o, "--config") && b->n_cfg < MAX_CONFIGS)
            bad = parse_config(v, &b->cfg[b->n_cfg++]);
        else
            bad = 1;
        if (bad) {
            fprintf(stderr, PROG ": bad option %s %s\n", o, v);
            return 2;
        }
    }
    if (!b->target || !b->draft || !b->prompts || !b->n_cfg || argc % 2 == 0)
        return usage();
    return 0;
}

/* Reads and tokenizes the prompts (BOS first). */
static int load_prompts(bench *b, const llm_model *m)
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
        if (llm_model_tokenize(m, text, strlen(text), 1, b->ids[b->n], MAX_IDS,
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

static llm_model *open_model(const char *path, long threads)
{
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.n_threads = (int32_t)threads;
    llm_model *m;
    char err[512];
    if (llm_model_open(path, &mo, &m, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return NULL;
    }
    return m;
}

static llm_session *open_session(llm_model *m)
{
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = 512;
    llm_session *s;
    char err[512];
    if (llm_session_create(m, &so, &s, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return NULL;
    }
    return s;
}

static llm_sampler *sampler(const bench *b, const llm_model *m)
{
    llm_model_info info;
    llm_model_get_info(m, &info);
    llm_sampler_params sp = LLM_SAMPLER_PARAMS_INIT;
    sp.temperature = (float)b->temp;
    sp.seed = b->seed;
    llm_sampler *s = NULL;
    return llm_sampler_create(&sp, info.n_vocab, &s) == 0 ? s : NULL;
}

/* The totals of one configuration. */
typedef struct totals {
    uint64_t plain_ns, spec_ns, plain_tok, spec_tok;
    int parity;
} totals;

static int run_config(const bench *b, const config *c, llm_session *plain, llm_session *t,
                      llm_session *d, totals *tt, llm_spec_stats *st)
{
    llm_drafter_params dp = LLM_DRAFTER_PARAMS_INIT;
    dp.kind = c->drafter;
    dp.draft = c->drafter == LLM_DRAFTER_NGRAM || c->drafter == LLM_DRAFTER_BLOCK || c->over_block
                   ? NULL
                   : d;
    dp.head_path = c->drafter == LLM_DRAFTER_BLOCK || c->over_block ? b->head : NULL;
    dp.target = t;
    dp.n_threads = (int32_t)b->threads;
    llm_drafter *dr = NULL;
    llm_spec *sd = NULL;
    char err[512];
    llm_spec_params sp = LLM_SPEC_PARAMS_INIT;
    sp.k = c->k;
    sp.adaptive = c->cost ? LLM_SPEC_ADAPT_COST : LLM_SPEC_ADAPT_OFF;
    /* The engine reads the switch where it shares threads: at the
     * creation of a block drafter and of a generator. */
    if (c->own)
        setenv("PHASEMARK_SHARE_THREADS", "0", 1);
    int rc = llm_drafter_create(&dp, &dr, err, sizeof err);
    if (rc == 0) {
        sp.drafter = dr;
        rc = llm_spec_create(t, NULL, &sp, &sd, err, sizeof err);
    }
    if (c->own)
        unsetenv("PHASEMARK_SHARE_THREADS");
    if (rc == 0 && c->tree)
        rc = llm_spec_set_tree(sd, c->tree, err, sizeof err);
    if (rc) {
        fprintf(stderr, PROG ": %s\n", err);
        llm_drafter_free(dr);
        return 1;
    }
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = (int32_t)b->tokens;
    gp.stop_at_eos = 0;
    memset(tt, 0, sizeof *tt);
    tt->parity = 1;
    for (long r = 0; r < b->reps && rc == 0; r++)
        for (int i = 0; i < b->n && rc == 0; i++) {
            static out a, s;
            llm_sampler *s1 = sampler(b, b->tm), *s2 = sampler(b, b->tm);
            if (!s1 || !s2) {
                llm_sampler_free(s1);
                llm_sampler_free(s2);
                rc = LLM_ENOMEM;
                break;
            }
            a.n = s.n = 0;
            llm_session_reset(plain);
            llm_session_reset(t);
            uint64_t t0 = now_ns();
            rc = llm_generate(plain, s1, b->ids[i], b->n_ids[i], &gp, collect, &a, NULL, NULL);
            uint64_t t1 = now_ns();
            if (rc == 0)
                rc = llm_spec_generate(sd, s2, b->ids[i], b->n_ids[i], &gp, collect, &s, NULL,
                                       NULL);
            uint64_t t2 = now_ns();
            tt->plain_ns += t1 - t0, tt->spec_ns += t2 - t1;
            tt->plain_tok += a.n, tt->spec_tok += s.n;
            if (b->temp <= 0.0 && (a.n != s.n || memcmp(a.ids, s.ids, a.n * sizeof a.ids[0])))
                tt->parity = 0;
            llm_sampler_free(s1);
            llm_sampler_free(s2);
        }
    if (rc)
        fprintf(stderr, PROG ": %s: %s\n", llm_strerror(rc), llm_spec_error(sd));
    llm_spec_get_stats(sd, st);
    llm_spec_free(sd);
    llm_drafter_free(dr);
    return rc ? 1 : 0;
}

static double rate(uint64_t tok, uint64_t ns)
{
    return ns ? (double)tok * 1e9 / (double)ns : 0.0;
}

static void report(const bench *b, const config *c, const totals *tt, const llm_spec_stats *st)
{
    double pr = rate(tt->plain_tok, tt->plain_ns), sr = rate(tt->spec_tok, tt->spec_ns);
    uint64_t fw = st->rounds + st->steps; /* target forwards after the prefills */
    printf("{\"drafter\": \"%s\", \"k\": %d, \"cost\": %d, \"own_threads\": %d, "
           "\"hybrid_over\": \"%s\", \"temperature\": %.2f, "
           "\"prompts\": %d, \"tokens\": %ld, \"reps\": %ld, \"threads\": %ld, "
           "\"plain_tok_s\": %.2f, \"spec_tok_s\": %.2f, \"speedup\": %.4f, "
           "\"acceptance\": %.4f, \"tokens_per_round\": %.3f, \"tokens_per_forward\": %.3f, "
           "\"tree\": %d, \"rounds\": %llu, \"plain_steps\": %llu",
           llm_drafter_kind_name(c->drafter), (int)c->k, c->cost, c->own,
           c->drafter != LLM_DRAFTER_HYBRID ? "" : c->over_block ? "block" : "model", b->temp, b->n,
           b->tokens,
           b->reps, b->threads, pr, sr, pr > 0 ? sr / pr : 0.0, st->acceptance,
           st->tokens_per_round, fw ? (double)(st->committed + st->steps) / (double)fw : 0.0,
           (int)c->tree, (unsigned long long)st->rounds, (unsigned long long)st->steps);
    /* Where the speculative time went: drafting, verifying, deciding,
     * and the rest (prefill, plain steps, bookkeeping), summed. */
    printf(", \"plain_ms\": %.2f, \"spec_ms\": %.2f, \"draft_ms\": %.2f, \"verify_ms\": %.2f, "
           "\"accept_ms\": %.2f",
           (double)tt->plain_ns / 1e6, (double)tt->spec_ns / 1e6, (double)st->draft_ns / 1e6,
           (double)st->verify_ns / 1e6, (double)st->accept_ns / 1e6);
    static const int kinds[] = {LLM_DRAFTER_MODEL, LLM_DRAFTER_NGRAM, LLM_DRAFTER_BLOCK};
    for (int i = 0; i < 3; i++) {
        const llm_drafter_counts *by = &st->by[kinds[i]];
        printf(", \"%s_rounds\": %llu, \"%s_tokens_per_round\": %.3f, \"%s_acceptance\": %.4f",
               llm_drafter_kind_name(kinds[i]), (unsigned long long)by->rounds,
               llm_drafter_kind_name(kinds[i]),
               by->rounds ? (double)(by->accepted + by->rounds) / (double)by->rounds : 0.0,
               llm_drafter_kind_name(kinds[i]),
               by->drafted ? (double)by->accepted / (double)by->drafted : 0.0);
    }
    if (b->temp > 0.0)
        printf(", \"parity\": \"law\"}\n");
    else
        printf(", \"parity\": %s}\n", tt->parity ? "true" : "false");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    static bench b;
    int rc = parse_args(&b, argc, argv);
    if (rc)
        return rc;
    llm_model *tm = open_model(b.target, b.threads), *dm = open_model(b.draft, b.threads);
    if (!tm || !dm || load_prompts(&b, tm))
        return 1;
    b.tm = tm;
    llm_session *plain = open_session(tm), *t = open_session(tm), *d = open_session(dm);
    if (!plain || !t || !d)
        return 1;
    int broken = 0;
    for (int i = 0; i < b.n_cfg && rc == 0; i++) {
        totals tt;
        llm_spec_stats st;
        rc = run_config(&b, &b.cfg[i], plain, t, d, &tt, &st);
        if (rc == 0)
            report(&b, &b.cfg[i], &tt, &st);
        broken |= !tt.parity;
    }
    llm_session_free(d);
    llm_session_free(t);
    llm_session_free(plain);
    llm_model_free(dm);
    llm_model_free(tm);
    return rc || broken ? 1 : 0;
}
