/* cuda_test.h — what the CUDA tests share: skipping without a device, a
 * seeded host generator, host-side reference helpers and case dispatch.
 *
 * Every reference here is computed on the host in double from the exact
 * values the device sees (bf16/fp16/quantized weights are expanded
 * exactly), so a tolerance only has to cover fp32 accumulation and the
 * documented operand roundings, never the code under test.
 */
#ifndef PM_CUDA_TEST_H
#define PM_CUDA_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_backend.h"
#include "phasemark/engine.h"
#include "pm_check.h"

/* Exits 77 with "skipped: no CUDA device" unless a device is visible. */
void ct_require_device(void);

/* A context on device 0 with scratch for max_n rows of max_width, max_ctx
 * positions and max_heads heads (skips without a device; exit 1 when the
 * context cannot be created). */
llm_cuda *ct_open(int32_t max_n, int64_t max_width, uint32_t max_ctx,
                  int32_t max_heads);

/* splitmix64 stream. */
typedef struct ct_rng {
    uint64_t s;
} ct_rng;
uint64_t ct_next(ct_rng *r);
double ct_uniform(ct_rng *r);           /* [0, 1) */
float ct_sym(ct_rng *r, float scale);   /* [-scale, scale) */
void ct_fill(ct_rng *r, float *x, size_t n, float scale);

/* Device buffers that fail the test when they cannot be had. */
void *ct_dev(llm_cuda *c, size_t bytes);
void ct_put(llm_cuda *c, void *dev, const void *host, size_t bytes);
void ct_get(llm_cuda *c, void *host, const void *dev, size_t bytes);
/* Fills a device float buffer with NaN, so unwritten outputs fail. */
void ct_poison(llm_cuda *c, float *dev, size_t n);

/* ||out - ref|| / ||ref|| (infinity when out holds a NaN). */
double ct_rel_err(const float *out, const double *ref, size_t n);
/* max |out - ref| (infinity on NaN). */
double ct_max_err(const float *out, const double *ref, size_t n);

/* Host encodings of weights in ggml layout: rows of `cols` values to
 * `type` (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) into dst (row_bytes each), and back to
 * the exact values the device computes with (deq). Returns row_bytes. */
size_t ct_encode(uint32_t type, const float *w, int64_t rows, int64_t cols,
                 void *dst, double *deq);
size_t ct_row_bytes(uint32_t type, int64_t cols);

/* Two-sample chi-square of equal-size histograms a, b over n bins, bins
 * with fewer than 10 draws in both together pooled into one; *df gets the
 * degrees of freedom. _bound: about 8 standard deviations above the mean
 * of a chi-square of df degrees (two draws of one law stay below it). */
double ct_chi2_two(const int *a, const int *b, int n, int *df);
double ct_chi2_bound(int df);

/* The device loop's law against llm_generate's: CT_LAW_RUNS seeds each,
 * a generation of max_tokens (3..16) from prompt by both (ref, then loop
 * at k with its drafter as set), the first token equal on both (the
 * host's draw from the prefill), the histograms of the second, third and
 * last tokens within ct_chi2_bound; prints one line a token, labelled. */
#define CT_LAW_RUNS 1200
struct llm_cuda_loop;
void ct_law_check(llm_session *ref, struct llm_cuda_loop *loop, llm_sampler *hot, int32_t k,
                  const int32_t *prompt, size_t n, int32_t max_tokens, const char *label);

/* Case dispatch: runs the case named argv[1]; 0 when it ran (the caller
 * then returns pm_check_result(), whose counter is per file), 2 on usage. */
typedef struct ct_case {
    const char *name;
    void (*fn)(void);
} ct_case;
int ct_run(int argc, char **argv, const ct_case *cases, size_t n);

#define CT_MAIN(cases)                                                     \
    int main(int argc, char **argv)                                        \
    {                                                                      \
        int rc_ = ct_run(argc, argv, cases, sizeof cases / sizeof cases[0]); \
        return rc_ ? rc_ : pm_check_result();                              \
    }

#define CT_OK(c, call)                                                        \
    do {                                                                      \
        int ct_rc_ = (call);                                                  \
        if (ct_rc_ != 0) {                                                    \
            fprintf(stderr, "%s:%d: %s -> %d (%s)\n", __FILE__, __LINE__,     \
                    #call, ct_rc_, llm_cuda_error(c));                        \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#endif
