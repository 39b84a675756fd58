/* test_sample — choosing tokens on the device.
 *
 * argmax is checked against a host scan (lowest index on ties, NaN never
 * wins). Sampling is checked against an independent host implementation of
 * the documented rule (sort, cut to top-k then to the top-p mass with ties
 * kept, draw in index order): for each kept token the uniform number u is
 * put in the middle of that token's interval of the cumulative
 * distribution, so the expected token is exact and float-versus-double
 * rounding of the interval ends cannot change the answer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"

static int32_t host_argmax(const float *x, int32_t n)
{
    int32_t b = -1;
    for (int32_t i = 0; i < n; i++)
        if (!isnan(x[i]) && (b < 0 || x[i] > x[b]))
            b = i;
    return b < 0 ? 0 : b;
}

static void run_argmax(const float *rows, int32_t n, int32_t vocab)
{
    llm_cuda *c = ct_open(8, 64, 16, 4);
    float *d = ct_dev(c, (size_t)n * vocab * sizeof(float));
    int32_t *dout = ct_dev(c, (size_t)n * sizeof(int32_t));
    int32_t got[8];
    ct_put(c, d, rows, (size_t)n * vocab * sizeof(float));
    CT_OK(c, llm_cuda_argmax(c, d, n, vocab, dout));
    ct_get(c, got, dout, (size_t)n * sizeof(int32_t));
    for (int32_t r = 0; r < n; r++)
        CHECK_INT_EQ(got[r], host_argmax(rows + (size_t)r * vocab, vocab));
    llm_cuda_mfree(c, d), llm_cuda_mfree(c, dout);
    llm_cuda_free(c);
}

static void argmax(void)
{
    enum { N = 3, V = 128256 };
    float *x = malloc((size_t)N * V * sizeof *x);
    REQUIRE(x);
    ct_rng r = {21};
    ct_fill(&r, x, (size_t)N * V, 10.0f);
    x[V + 77777] = 50.0f; /* a clear winner in row 1 */
    run_argmax(x, N, V);
    free(x);
}

static void argmax_ties(void)
{
    enum { V = 5000 };
    float x[V];
    for (int i = 0; i < V; i++)
        x[i] = (float)(i % 97) * 0.01f;
    x[4000] = x[1500] = x[2999] = 3.0f; /* the maximum three times */
    run_argmax(x, 1, V);
    float all[V];
    for (int i = 0; i < V; i++)
        all[i] = -INFINITY; /* every logit -inf: token 0 */
    run_argmax(all, 1, V);
}

static void argmax_nan(void)
{
    enum { V = 3000 };
    float x[V];
    ct_rng r = {22};
    ct_fill(&r, x, V, 1.0f);
    for (int i = 0; i < V; i += 7)
        x[i] = NAN;
    x[10] = 2.0f;
    run_argmax(x, 1, V);
}

/* The host rule: kept set and index-order intervals; returns the number of
 * kept tokens, their ids in ids[] and interval midpoints in mid[]. */
static int host_sample_plan(const float *x, int32_t v, float temp, int32_t top_k,
                            float top_p, int32_t *ids, double *mid)
{
    int32_t *ord = malloc((size_t)v * sizeof *ord);
    double *p = malloc((size_t)v * sizeof *p);
    REQUIRE(ord && p);
    double m = -INFINITY;
    for (int32_t i = 0; i < v; i++)
        m = fmax(m, x[i]);
    for (int32_t i = 0; i < v; i++) {
        ord[i] = i;
        p[i] = exp(((double)x[i] - m) / temp);
    }
    /* Selection sort of the order is enough for these sizes. */
    for (int32_t i = 0; i < v; i++)
        for (int32_t j = i + 1; j < v; j++)
            if (x[ord[j]] > x[ord[i]]) {
                int32_t t = ord[i];
                ord[i] = ord[j];
                ord[j] = t;
            }
    float cut = -INFINITY;
    if (top_k > 0 && top_k < v)
        cut = x[ord[top_k - 1]];
    if (top_p > 0.0f && top_p < 1.0f) {
        double z = 0.0, acc = 0.0;
        for (int32_t i = 0; i < v; i++)
            if (x[ord[i]] >= cut)
                z += p[ord[i]];
        for (int32_t i = 0; i < v && x[ord[i]] >= cut; i++) {
            acc += p[ord[i]];
            if (acc >= top_p * z) {
                cut = x[ord[i]];
                break;
            }
        }
    }
    double z = 0.0;
    for (int32_t i = 0; i < v; i++)
        if (x[i] >= cut)
            z += p[i];
    int nk = 0;
    double acc = 0.0;
    for (int32_t i = 0; i < v; i++)
        if (x[i] >= cut) {
            ids[nk] = i;
            mid[nk] = (acc + p[i] / 2.0) / z;
            acc += p[i];
            nk++;
        }
    free(ord);
    free(p);
    return nk;
}

static void check_sampling(const float *x, int32_t v, float temp, int32_t top_k,
                           float top_p, int expect_kept)
{
    llm_cuda *c = ct_open(8, 64, 16, 4);
    float *d = ct_dev(c, (size_t)v * sizeof(float));
    int32_t *dout = ct_dev(c, sizeof(int32_t));
    ct_put(c, d, x, (size_t)v * sizeof(float));
    int32_t *ids = malloc((size_t)v * sizeof *ids);
    double *mid = malloc((size_t)v * sizeof *mid);
    REQUIRE(ids && mid);
    int nk = host_sample_plan(x, v, temp, top_k, top_p, ids, mid);
    if (expect_kept > 0)
        CHECK_INT_EQ(nk, expect_kept);
    int checked = 0;
    for (int i = 0; i < nk; i++) {
        double width = (i + 1 < nk ? mid[i + 1] : 1.0) - mid[i];
        if (width < 1e-4 && i + 1 < nk)
            continue; /* too narrow an interval to aim at in float */
        llm_cuda_sampling s = {temp, top_k, top_p, (float)mid[i], NULL};
        int32_t got = -1;
        CT_OK(c, llm_cuda_sample(c, d, v, &s, dout));
        ct_get(c, &got, dout, sizeof got);
        if (got != ids[i])
            fprintf(stderr, "u %.6f: token %d, expected %d\n", mid[i], got, ids[i]);
        CHECK_INT_EQ(got, ids[i]);
        checked++;
    }
    printf("T %.2f top_k %d top_p %.2f: %d kept, %d draws checked\n", temp,
           top_k, top_p, nk, checked);
    CHECK(checked > 0);
    free(ids), free(mid);
    llm_cuda_mfree(c, d), llm_cuda_mfree(c, dout);
    llm_cuda_free(c);
}

static void sample_greedy(void)
{
    enum { V = 1000 };
    float x[V];
    ct_rng r = {31};
    ct_fill(&r, x, V, 4.0f);
    llm_cuda *c = ct_open(8, 64, 16, 4);
    float *d = ct_dev(c, sizeof x);
    int32_t *dout = ct_dev(c, sizeof(int32_t)), got = -1;
    ct_put(c, d, x, sizeof x);
    llm_cuda_sampling s = {0.0f, 40, 0.9f, 0.7f, NULL};
    CT_OK(c, llm_cuda_sample(c, d, V, &s, dout));
    ct_get(c, &got, dout, sizeof got);
    CHECK_INT_EQ(got, host_argmax(x, V));
    llm_cuda_mfree(c, d), llm_cuda_mfree(c, dout);
    llm_cuda_free(c);
}

static void sample_topk1(void)
{
    enum { V = 777 };
    float x[V];
    ct_rng r = {32};
    ct_fill(&r, x, V, 4.0f);
    check_sampling(x, V, 1.0f, 1, 1.0f, 1);
}

static void sample_topk(void)
{
    enum { V = 2000 };
    float x[V];
    ct_rng r = {33};
    ct_fill(&r, x, V, 3.0f);
    check_sampling(x, V, 0.8f, 7, 1.0f, 7);
    /* A tie at the top-k boundary keeps both tied tokens. */
    for (int i = 0; i < V; i++)
        x[i] = (float)(i % 50) * 0.01f; /* many exact ties */
    x[5] = 5.0f;
    x[900] = 4.0f;
    x[1200] = 4.0f;
    check_sampling(x, V, 1.0f, 2, 1.0f, 3);
}

static void sample_topp(void)
{
    enum { V = 3000 };
    float x[V];
    ct_rng r = {34};
    ct_fill(&r, x, V, 6.0f);
    check_sampling(x, V, 0.7f, 0, 0.5f, 0);
    check_sampling(x, V, 1.3f, 50, 0.9f, 0);
}

/* u on a fine uniform grid: the frequencies are the softmax. */
static void sample_distribution(void)
{
    enum { V = 8, G = 2000 };
    const float x[V] = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, -0.5f, 1.5f, 0.25f};
    llm_cuda *c = ct_open(8, 64, 16, 4);
    float *d = ct_dev(c, sizeof x);
    int32_t *dout = ct_dev(c, G * sizeof(int32_t));
    int32_t *got = malloc(G * sizeof *got);
    REQUIRE(got);
    ct_put(c, d, x, sizeof x);
    for (int i = 0; i < G; i++) {
        llm_cuda_sampling s = {1.0f, 0, 1.0f, (float)((i + 0.5) / G), NULL};
        CT_OK(c, llm_cuda_sample(c, d, V, &s, dout + i));
    }
    ct_get(c, got, dout, G * sizeof(int32_t));
    double z = 0.0, p[V];
    for (int i = 0; i < V; i++)
        z += p[i] = exp((double)x[i]);
    int counts[V] = {0};
    for (int i = 0; i < G; i++) {
        REQUIRE(got[i] >= 0 && got[i] < V);
        counts[got[i]]++;
    }
    for (int i = 0; i < V; i++)
        CHECK_NEAR(counts[i], G * p[i] / z, 2.0);
    free(got);
    llm_cuda_mfree(c, d), llm_cuda_mfree(c, dout);
    llm_cuda_free(c);
}

static const ct_case cases[] = {
    {"argmax", argmax}, {"argmax_ties", argmax_ties}, {"argmax_nan", argmax_nan},
    {"sample_greedy", sample_greedy}, {"sample_topk1", sample_topk1},
    {"sample_topk", sample_topk}, {"sample_topp", sample_topp},
    {"sample_distribution", sample_distribution},
};

CT_MAIN(cases)
