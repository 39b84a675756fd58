/* cblas.h — the one CBLAS entry point the engine's CPU backend uses, for
 * the GPU machine's test build only, where no BLAS is installed (see
 * run_h200.sh). Declarations follow the CBLAS standard. */
#ifndef PM_CBLAS_SHIM_H
#define PM_CBLAS_SHIM_H

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta,
                 enum CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta,
                 float *c, int ldc);

/* The two OpenBLAS extensions the CPU backend calls: the shim has one
 * thread and names its core "shim" (not a weak core, so the backend keeps
 * its own choice of products). */
void openblas_set_num_threads(int n);
char *openblas_get_corename(void);

#endif
