/* cblas_shim.c — a plain, correct sgemm for the GPU machine's test build,
 * which has no BLAS: the CPU backend there is only the reference the CUDA
 * backend is compared with, so straightforward loops (fp32, k innermost
 * and contiguous in the engine's row-major A * B^T case) are enough. */
#include "cblas.h"

static float at(const float *x, int ld, int trans, int row_major, int i, int j)
{
    /* Element (i, j) of op(X). */
    if (trans)
        return row_major ? x[(long)j * ld + i] : x[(long)i * ld + j];
    return row_major ? x[(long)i * ld + j] : x[(long)j * ld + i];
}

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta,
                 enum CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta,
                 float *c, int ldc)
{
    int rm = order == CblasRowMajor, tra = ta != CblasNoTrans, trb = tb != CblasNoTrans;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0.0f;
            if (rm && !tra && trb) { /* rows of A dot rows of B */
                const float *ar = a + (long)i * lda, *br = b + (long)j * ldb;
                for (int p = 0; p < k; p++)
                    s += ar[p] * br[p];
            } else {
                for (int p = 0; p < k; p++)
                    s += at(a, lda, tra, rm, i, p) * at(b, ldb, trb, rm, p, j);
            }
            float *cij = rm ? &c[(long)i * ldc + j] : &c[(long)j * ldc + i];
            *cij = alpha * s + (beta == 0.0f ? 0.0f : beta * *cij);
        }
}

void openblas_set_num_threads(int n)
{
    (void)n; /* one thread, always */
}

char *openblas_get_corename(void)
{
    static char name[] = "shim";
    return name;
}
