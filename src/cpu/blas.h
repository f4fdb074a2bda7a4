/* cpu/blas.h: the BLAS baton uses on the CPU, loaded at run time. On first use baton picks
 * OpenBLAS kernels for the running CPU (setting OPENBLAS_CORETYPE when the user has not and the
 * CPU supports them; Debian's OpenBLAS 0.3.21 does not recognise newer Xeons and otherwise falls
 * back to kernels about 5x slower), then opens OpenBLAS. Without OpenBLAS a plain C GEMM is used.
 * Row-major only. Thread-safe. */
#ifndef BT_CPU_BLAS_H
#define BT_CPU_BLAS_H

#include "baton/status.h"

/* Loads the BLAS once; later calls return the first result. */
bt_status bt_blas_init(void);
/* "OpenBLAS 0.3.21 (SkylakeX kernels, 1 thread)" or "builtin GEMM". */
const char *bt_blas_describe(void);
/* Claims OpenBLAS's thread count (one per process in its pthreads build) for one more CPU device:
 * sets it to *threads (< 1: 1) when no device holds it; else a strict claim must ask for the
 * count in effect (BT_ERR_UNSUPPORTED naming both) and a preference takes it. *threads is the
 * count the device got. Each successful claim is released once. Thread-safe. */
bt_status bt_blas_claim_threads(int *threads, int strict);
void bt_blas_release_threads(void);

/* C = alpha * op(A) * op(B) + beta * C, row-major. op(A) is M x K, op(B) is K x N, C is M x N.
 * lda, ldb, ldc are row strides of A, B, C as stored. */
void bt_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc);
void bt_dgemm(int trans_a, int trans_b, int m, int n, int k, double alpha, const double *a, int lda,
              const double *b, int ldb, double beta, double *c, int ldc);

#endif
