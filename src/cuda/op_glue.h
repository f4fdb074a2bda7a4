/* cuda/op_glue.h: what the built-in ops' CUDA glue (kernels/<family>.cu) shares: the execution
 * context of a call with its dtype check, cuBLAS GEMMs, int-range checks, pointer arithmetic by
 * dtype and device-local copies (cuda/op_glue.c). Plain C with C linkage, so the glue compiled by
 * nvcc and the C files alike include it.
 *
 * Row-major GEMMs go through column-major cuBLAS by the usual transposition: a row-major (r, c)
 * matrix is a column-major (c, r) one, so row-major C = A B is column-major C^T = B^T A^T. The
 * default cuBLAS math mode (no TF32) keeps f32 results within 1e-4 of the CPU. */
#ifndef BT_CUDA_OP_GLUE_H
#define BT_CUDA_OP_GLUE_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/cuda_check.h"
#include "cuda/ops_cuda.h"
#include "ops/op_configs.h"
#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* call's execution context (call->backend_ctx, set by the CUDA backend's run_op) for op, after
 * checking that dt is a float type (f32 or f64, as the CPU kernels). */
bt_status bt_cuda_begin(const bt_op_call *call, const char *op, bt_dtype dt, bt_cuda_exec **x);
/* Bytes of one element of the float type dt. */
size_t bt_cuda_esize(bt_dtype dt);
/* cuBLAS and cuDNN take int sizes: every one of a, b, c must fit. */
bt_status bt_cuda_fits_int(const char *op, int64_t a, int64_t b, int64_t c);
/* Column-major C (m, n) = op(A) op(B) + beta C, alpha 1. Under mixed precision (prec BT_BF16 or
 * BT_F16, dt BT_F32) the f32 matrices go to the tensor cores as bf16 or f16 with f32
 * accumulation (cuBLAS's 32F_FAST_16BF / 32F_FAST_16F compute types); the executor has already
 * rounded every operand to prec (fed inputs when they are copied in, activations, gradients and
 * weight copies; exec/worker.c), so that conversion is exact, and the GPU and CPU agree. */
bt_status bt_cuda_gemm(bt_cuda_exec *x, bt_dtype dt, bt_dtype prec, cublasOperation_t ta,
                       cublasOperation_t tb, int m, int n, int k, const void *a, int lda,
                       const void *b, int ldb, double beta, void *c, int ldc);
/* p advanced by i elements of dt. */
void *bt_cuda_at(const void *p, int64_t i, bt_dtype dt);
/* bytes from src to dst on x's stream (nothing where they are the same buffer). */
bt_status bt_cuda_copy(bt_cuda_exec *x, void *dst, const void *src, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
