/* bench_chain — a layer's o, gate/up and down products (Q8_0, one
 * activation row) launched one by one against the same products as one
 * llm_cuda_matvec_chain launch, each way captured in a graph of `layers`
 * layers with their own weights (no layer's bytes in L2 for the next),
 * replayed alternately in one process.
 *
 *   bench_chain [layers] [reps] [dim] [ffn]      (defaults 32 20 4096 14336)
 *
 * One JSON line per way: what ("one_by_one" or "chain"), us_per_layer
 * (median over reps), GB_per_s (the layer's weight bytes over that time),
 * and a last line with the ratio and whether both ways ended on the same
 * bits. Exit 0, 1 on failure, 2 on usage.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "phasemark/engine.h"
#include "quant.h"

#define PROG "bench_chain"
#define MAX_REPS 200

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static float median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_f);
    return v[n / 2];
}

/* Q8_0 rows of random quants with a small scale: finite products. */
static void *q8_rows(int64_t rows, int64_t cols, uint64_t seed, size_t *row_bytes)
{
    size_t rb = (size_t)(cols / LLM_QK8_0) * sizeof(llm_block_q8_0), n = rb * (size_t)rows;
    unsigned char *p = malloc(n);
    if (!p)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        p[i] = (unsigned char)(seed >> 56);
    }
    for (size_t b = 0; b < n; b += sizeof(llm_block_q8_0)) { /* fp16 d = 2^-10 */
        p[b] = 0x00;
        p[b + 1] = 0x14;
    }
    *row_bytes = rb;
    return p;
}

static int parse(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    long layers = 32, reps = 20, dim = 4096, ffn = 14336;
    long *arg[4] = {&layers, &reps, &dim, &ffn};
    const long lo[4] = {1, 1, 256, 256}, hi[4] = {256, MAX_REPS, 16384, 65536};
    if (argc > 5) {
        fprintf(stderr, "usage: " PROG " [layers] [reps] [dim] [ffn]\n");
        return 2;
    }
    for (int i = 1; i < argc; i++)
        if (parse(argv[i], lo[i - 1], hi[i - 1], arg[i - 1]) || (i >= 3 && *arg[i - 1] % 256)) {
            fprintf(stderr, PROG ": bad argument '%s' (dim and ffn multiples of 256)\n", argv[i]);
            return 2;
        }
    char err[256];
    llm_cuda *c;
    if (llm_cuda_create(0, &c, err, sizeof err)) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    const int64_t rows[3] = {dim, 2 * ffn, dim}, cols[3] = {dim, dim, ffn};
    llm_cuda_weight *w = calloc((size_t)layers * 3, sizeof *w);
    double layer_bytes = 0.0;
    int rc = w ? 0 : LLM_ENOMEM;
    for (int k = 0; k < 3 && rc == 0; k++) {
        size_t rb;
        void *host = q8_rows(rows[k], cols[k], 77u + (uint64_t)k, &rb);
        if (!host) {
            rc = LLM_ENOMEM;
            break;
        }
        layer_bytes += (double)rb * (double)rows[k];
        for (long l = 0; l < layers && rc == 0; l++)
            rc = llm_cuda_weight_upload(c, LLM_TYPE_Q8_0, host, cols[k], rows[k], rb,
                                        &w[l * 3 + k]);
        free(host);
    }
    float *dx = NULL, *dh = NULL, *dt = NULL, *dg = NULL;
    if (rc == 0)
        rc = llm_cuda_malloc(c, (size_t)dim * 4, (void **)&dx);
    if (rc == 0)
        rc = llm_cuda_malloc(c, (size_t)dim * 4, (void **)&dh);
    if (rc == 0)
        rc = llm_cuda_malloc(c, (size_t)dim * 4, (void **)&dg);
    if (rc == 0)
        rc = llm_cuda_malloc(c, (size_t)ffn * 4, (void **)&dt);
    float *hx = malloc((size_t)dim * 4), *out[2] = {malloc((size_t)dim * 4), malloc((size_t)dim * 4)};
    if (rc == 0 && (!hx || !out[0] || !out[1]))
        rc = LLM_ENOMEM;
    if (rc == 0) {
        for (long i = 0; i < dim; i++)
            hx[i] = (float)((i * 37 % 101) - 50) / 50.0f;
        rc = llm_cuda_upload(c, dx, hx, (size_t)dim * 4);
        for (long i = 0; i < dim && rc == 0; i++)
            hx[i] = 1.0f;
        if (rc == 0)
            rc = llm_cuda_upload(c, dg, hx, (size_t)dim * 4);
    }
    llm_cuda_graph *g[2] = {NULL, NULL};
    for (int way = 0; way < 2 && rc == 0; way++) {
        rc = llm_cuda_graph_begin(c);
        /* the residual starts from x, so every replay computes the same */
        if (rc == 0)
            rc = llm_cuda_copy(c, dh, dx, (size_t)dim * 4);
        for (long l = 0; l < layers && rc == 0; l++) {
            llm_cuda_chain_step st[3] = {
                {&w[l * 3], dh, dt, {0, NULL, 0.0f, NULL}},
                {&w[l * 3 + 1], dh, dt, {LLM_CUDA_MV_NORM | LLM_CUDA_MV_SWIGLU_PAIRS, dg, 1e-5f, NULL}},
                {&w[l * 3 + 2], dt, dh, {LLM_CUDA_MV_ACCUMULATE, NULL, 0.0f, NULL}},
            };
            /* o's output stands in for attention's: it goes to t, then the
             * residual takes gate/up -> down as a layer does */
            if (way == 0)
                for (int k = 0; k < 3 && rc == 0; k++)
                    rc = llm_cuda_matvec_fused(c, st[k].w, st[k].x, st[k].y, &st[k].f);
            else
                rc = llm_cuda_matvec_chain(c, st, 3);
        }
        int rc2 = llm_cuda_graph_end(c, &g[way]);
        if (rc == 0)
            rc = rc2;
    }
    static float ms[2][MAX_REPS];
    for (long r = -2; r < reps && rc == 0; r++) /* two warm replays each */
        for (int way = 0; way < 2 && rc == 0; way++) {
            float t = 0.0f;
            rc = llm_cuda_event_record(c, 0);
            if (rc == 0)
                rc = llm_cuda_graph_launch(c, g[way]);
            if (rc == 0)
                rc = llm_cuda_event_record(c, 1);
            if (rc == 0)
                rc = llm_cuda_elapsed_ms(c, 0, 1, &t);
            if (rc == 0 && r >= 0)
                ms[way][r] = t;
            if (rc == 0 && r == reps - 1)
                rc = llm_cuda_download(c, out[way], dh, (size_t)dim * 4);
        }
    if (rc) {
        fprintf(stderr, PROG ": status %d: %s\n", rc, llm_cuda_error(c) ? llm_cuda_error(c) : "");
        return 1;
    }
    const char *name[2] = {"one_by_one", "chain"};
    double us[2];
    for (int way = 0; way < 2; way++) {
        us[way] = 1e3 * (double)median(ms[way], (int)reps) / (double)layers;
        printf("{\"bench\":\"chain\",\"what\":\"%s\",\"layers\":%ld,\"dim\":%ld,\"ffn\":%ld,"
               "\"reps\":%ld,\"us_per_layer\":%.2f,\"GB_per_s\":%.1f}\n",
               name[way], layers, dim, ffn, reps, us[way], layer_bytes / us[way] / 1e3);
    }
    printf("{\"bench\":\"chain_ratio\",\"one_by_one_over_chain\":%.3f,\"same_bits\":%s}\n",
           us[0] / us[1], memcmp(out[0], out[1], (size_t)dim * 4) == 0 ? "true" : "false");
    for (int way = 0; way < 2; way++)
        llm_cuda_graph_free(g[way]);
    for (long i = 0; i < layers * 3; i++)
        llm_cuda_weight_release(c, &w[i]);
    llm_cuda_mfree(c, dx), llm_cuda_mfree(c, dh), llm_cuda_mfree(c, dg), llm_cuda_mfree(c, dt);
    llm_cuda_free(c);
    free(w), free(hx), free(out[0]), free(out[1]);
    return 0;
}
