/* cuda/op_glue.c: the helpers every family's CUDA glue shares (see cuda/op_glue.h), and the
 * fault reports of the CUDA backend, worded by the CPU kernels' own error functions. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <limits.h>

#include "cuda/op_glue.h"

bt_status bt_cuda_begin(const bt_op_call *call, const char *op, bt_dtype dt, bt_cuda_exec **x)
{
    *x = call->backend_ctx;
    if (!*x)
        return bt_op_error(BT_ERR_INTERNAL,
                           "%s: a built-in CUDA kernel was called outside the CUDA backend's "
                           "run_op (call->backend_ctx is NULL)",
                           op);
    if (dt != BT_F32 && dt != BT_F64)
        return bt_op_error(BT_ERR_UNSUPPORTED, "%s: no CUDA kernel for dtype %s", op,
                           bt_dtype_name(dt));
    return BT_OK;
}

size_t bt_cuda_esize(bt_dtype dt) { return dt == BT_F32 ? sizeof(float) : sizeof(double); }

bt_status bt_cuda_fits_int(const char *op, int64_t a, int64_t b, int64_t c)
{
    if (a > INT_MAX || b > INT_MAX || c > INT_MAX)
        return bt_op_error(BT_ERR_UNSUPPORTED,
                           "%s: a GEMM dimension (%lld, %lld, %lld) exceeds the int range of "
                           "cuBLAS",
                           op, (long long)a, (long long)b, (long long)c);
    return BT_OK;
}

bt_status bt_cuda_gemm(bt_cuda_exec *x, bt_dtype dt, bt_dtype prec, cublasOperation_t ta,
                       cublasOperation_t tb, int m, int n, int k, const void *a, int lda,
                       const void *b, int ldb, double beta, void *c, int ldc)
{
    if (m == 0 || n == 0) return BT_OK;
    if (dt == BT_F32 && (prec == BT_BF16 || prec == BT_F16)) {
        const float one = 1, fbeta = (float)beta;
        const cublasComputeType_t ct =
            prec == BT_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F_FAST_16F;
        BT_CUBLAS_TRY(cublasGemmEx(x->cublas, ta, tb, m, n, k, &one, a, CUDA_R_32F, lda, b,
                                   CUDA_R_32F, ldb, &fbeta, c, CUDA_R_32F, ldc, ct,
                                   CUBLAS_GEMM_DEFAULT));
    } else if (dt == BT_F32) {
        const float one = 1, fbeta = (float)beta;
        BT_CUBLAS_TRY(cublasSgemm(x->cublas, ta, tb, m, n, k, &one, a, lda, b, ldb, &fbeta, c,
                                  ldc));
    } else {
        const double one = 1;
        BT_CUBLAS_TRY(cublasDgemm(x->cublas, ta, tb, m, n, k, &one, a, lda, b, ldb, &beta, c,
                                  ldc));
    }
    return BT_OK;
}

void *bt_cuda_at(const void *p, int64_t i, bt_dtype dt)
{
    return (char *)p + (size_t)i * bt_cuda_esize(dt);
}

bt_status bt_cuda_copy(bt_cuda_exec *x, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || dst == src) return BT_OK;
    BT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, x->stream));
    return BT_OK;
}

bt_status bt_cuda_fault_status(int device, const bt_k_fault *f)
{
    bt_status st;
    if (f->kind == BT_K_FAULT_EMBEDDING_INDEX)
        st = bt_ops_embedding_bad_index(f->position, f->value, f->limit);
    else if (f->kind == BT_K_FAULT_LABEL)
        st = bt_ops_cross_entropy_bad_label(f->position, f->value, f->limit);
    else
        return bt_error(BT_ERR_INTERNAL, "cuda:%d: unknown kernel fault %d", device, f->kind);
    return bt_error_context(st, "cuda:%d", device);
}
