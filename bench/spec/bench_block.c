/* bench_block — what the block drafter's pieces cost beside the target's
 * forwards, in one process, interleaved so load falls on all alike.
 *
 *   bench_block --target T.gguf --head H.gguf [--threads 2] [--reps 50]
 *               [--ctx 64]
 *
 * After a prompt of --ctx ids (0..ctx-1 mod the vocabulary) whose features
 * fill the head's context, each repetition times, in turn: a target decode
 * (1 row), target verifies of 2..17 rows (cut back afterwards), the
 * head's forward of b = 1, 2, 4, 8, 16 rows (its block size at most), and
 * taking 1 and 5 committed positions into the head's context (cropped
 * back), then a verify of 33 rows and tree verifies (docs/spec.md) of 9,
 * 17 and 33 nodes shaped as a binary heap (node i under (i - 1) / 2),
 * whose rows cost a chain's plus the attention's gather of ancestors. One JSON object per measurement on stdout: what, rows, median_us,
 * and ratio_to_decode (median over the target decode's median), so a
 * round's price (head forward + context + verify) reads against plain
 * decoding side by side. Exit 0, 1 on failure, 2 usage.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "block_head.h"
#include "session.h"
#include "model.h"
#include "phasemark/engine.h"

#define PROG "bench_block"
#define MAX_REPS 1000
#define N_SERIES 32

typedef struct series {
    char what[24];
    int rows;
    double us[MAX_REPS];
} series;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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

/* One target forward of n rows at the session's position, asking for the
 * head's layers, then cut back. */
static int target_rows(llm_session *s, const int32_t *layers, int32_t nl, float *feat,
                       size_t cap, const int32_t *toks, int32_t n)
{
    uint32_t pos = llm_session_pos(s);
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.phase = n == 1 ? PM_PHASE_DECODE : PM_PHASE_VERIFY;
    fp.output = LLM_OUTPUT_ARGMAX;
    fp.rows = n;
    fp.n_features_layers = nl;
    fp.features_layers = layers;
    fp.features = feat;
    fp.features_cap = cap;
    int32_t ids[64];
    int rc = llm_forward(s, &fp, toks, (size_t)n, NULL, ids);
    return rc ? rc : llm_session_truncate(s, pos);
}

/* target_rows for a tree verify of n nodes (a binary heap), cut back. */
static int tree_rows(llm_session *s, const int32_t *layers, int32_t nl, float *feat, size_t cap,
                     const int32_t *toks, int32_t n)
{
    llm_tree t;
    memset(&t, 0, sizeof t);
    t.n = n;
    t.parent[0] = -1;
    for (int32_t i = 1; i < n; i++) {
        t.parent[i] = (i - 1) / 2;
        t.depth[i] = t.depth[t.parent[i]] + 1;
    }
    uint32_t pos = llm_session_pos(s);
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.phase = PM_PHASE_VERIFY;
    fp.output = LLM_OUTPUT_ARGMAX;
    fp.rows = n;
    fp.n_features_layers = nl;
    fp.features_layers = layers;
    fp.features = feat;
    fp.features_cap = cap;
    int32_t ids[64];
    int rc = llm_forward_tree(s, &fp, toks, &t, NULL, ids);
    return rc ? rc : llm_session_truncate(s, pos);
}

int main(int argc, char **argv)
{
    const char *tp = NULL, *hp = NULL;
    long threads = 2, reps = 50, ctx = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        int bad = 0;
        if (!strcmp(argv[i], "--target")) tp = argv[i + 1];
        else if (!strcmp(argv[i], "--head")) hp = argv[i + 1];
        else if (!strcmp(argv[i], "--threads")) bad = parse_long(argv[i + 1], 1, 256, &threads);
        else if (!strcmp(argv[i], "--reps")) bad = parse_long(argv[i + 1], 1, MAX_REPS, &reps);
        else if (!strcmp(argv[i], "--ctx")) bad = parse_long(argv[i + 1], 2, 1024, &ctx);
        else bad = 1;
        if (bad) {
            fprintf(stderr, PROG ": bad option %s\n", argv[i]);
            return 2;
        }
    }
    if (!tp || !hp || argc % 2 == 0) {
        fprintf(stderr, "usage: " PROG " --target T --head H [--threads N] [--reps R] [--ctx C]\n");
        return 2;
    }
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    mo.n_threads = (int32_t)threads;
    llm_model *m = NULL;
    llm_session *s = NULL;
    pm_block *b = NULL;
    char err[256];
    llm_session_options so = LLM_SESSION_OPTIONS_INIT;
    so.n_ctx = (int32_t)ctx + 64;
    so.n_batch = 40; /* the 33-row verifies */
    if (llm_model_open(tp, &mo, &m, err, sizeof err) || llm_session_create(m, &so, &s, err, sizeof err) ||
        pm__block_open(hp, m, (uint32_t)so.n_ctx, (int32_t)threads, &b, err, sizeof err)) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    const pm_block_info *in = pm__block_info(b);
    /* The head's layers in ascending order, and each listed one's plane. */
    int32_t layers[PM_BLOCK_MAX_FEAT], plane_of[PM_BLOCK_MAX_FEAT], nl = 0;
    for (int32_t l = 0; l < m->hp.n_layers; l++) {
        int used = 0;
        for (int32_t i = 0; i < in->n_feat; i++)
            if (in->feat_layers[i] == l) {
                plane_of[i] = nl;
                used = 1;
            }
        if (used)
            layers[nl++] = l;
    }
    size_t cap = (size_t)nl * (size_t)(ctx + 32) * (size_t)in->dim;
    float *feat = malloc(cap * sizeof *feat);
    int32_t *toks = malloc((size_t)(ctx + 40) * sizeof *toks);
    static series sr[N_SERIES];
    if (!feat || !toks) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    for (long i = 0; i < ctx + 40; i++)
        toks[i] = (int32_t)(i % m->hp.n_vocab);
    int rc = target_rows(s, layers, nl, feat, cap, toks, 1); /* warm the pool */
    llm_forward_params fp = LLM_FORWARD_PARAMS_INIT;
    fp.phase = PM_PHASE_EXACT;
    fp.output = LLM_OUTPUT_NONE;
    fp.n_features_layers = nl;
    fp.features_layers = layers;
    fp.features = feat;
    fp.features_cap = cap;
    if (rc == 0)
        rc = llm_forward(s, &fp, toks, (size_t)ctx, NULL, NULL);
    if (rc == 0)
        rc = pm__block_append(b, feat, plane_of, (size_t)ctx, (uint32_t)ctx);
    static const int head_rows[5] = {1, 2, 4, 8, 16};
    for (long r = 0; r < reps && rc == 0; r++) {
        int k = 0;
        for (int n = 1; n <= 17 && rc == 0; n++, k++) {
            uint64_t t0 = now_ns();
            rc = target_rows(s, layers, nl, feat, cap, toks + ctx, n);
            snprintf(sr[k].what, sizeof sr[k].what, n == 1 ? "target_decode" : "target_verify");
            sr[k].rows = n;
            sr[k].us[r] = (double)(now_ns() - t0) / 1e3;
        }
        for (int i = 0; i < 5 && rc == 0; i++) {
            if (head_rows[i] > in->block_size)
                continue;
            const float *lg;
            uint64_t t0 = now_ns();
            rc = pm__block_forward(b, toks[ctx], head_rows[i], &lg);
            snprintf(sr[k].what, sizeof sr[k].what, "head_forward");
            sr[k].rows = head_rows[i];
            sr[k++].us[r] = (double)(now_ns() - t0) / 1e3;
        }
        for (int n = 1; n <= 5 && rc == 0; n += 4) {
            uint64_t t0 = now_ns();
            /* The buffer holds the 17-row verify's features. */
            rc = pm__block_append(b, feat, plane_of, 17, (uint32_t)n);
            snprintf(sr[k].what, sizeof sr[k].what, "head_context");
            sr[k].rows = n;
            sr[k++].us[r] = (double)(now_ns() - t0) / 1e3;
            pm__block_crop(b, (uint32_t)ctx);
        }
        static const int tree_n[4] = {33, 9, 17, 33};
        for (int i = 0; i < 4 && rc == 0; i++) {
            uint64_t t0 = now_ns();
            rc = i == 0 ? target_rows(s, layers, nl, feat, cap, toks + ctx, tree_n[i])
                        : tree_rows(s, layers, nl, feat, cap, toks + ctx, tree_n[i]);
            snprintf(sr[k].what, sizeof sr[k].what, i == 0 ? "target_verify" : "tree_verify");
            sr[k].rows = tree_n[i];
            sr[k++].us[r] = (double)(now_ns() - t0) / 1e3;
        }
    }
    if (rc) {
        fprintf(stderr, PROG ": a forward failed (%s)\n", llm_strerror(rc));
        return 1;
    }
    double decode = 0.0;
    for (int k = 0; k < N_SERIES && sr[k].rows; k++) {
        double med = median(sr[k].us, (int)reps);
        if (k == 0)
            decode = med;
        printf("{\"what\": \"%s\", \"rows\": %d, \"median_us\": %.1f, \"ratio_to_decode\": %.3f, "
               "\"threads\": %ld, \"ctx\": %ld, \"reps\": %ld}\n",
               sr[k].what, sr[k].rows, med, decode > 0 ? med / decode : 0.0, threads, ctx, reps);
    }
    free(feat);
    free(toks);
    pm__block_free(b);
    llm_session_free(s);
    llm_model_free(m);
    return 0;
}
