/* cuda/cuda_check.h: turning CUDA runtime, cuBLAS and cuDNN return codes into bt_status. Each
 * check sets the thread's message to "file:line: call: error string" (BT_ERR_BACKEND) and returns
 * the status; nothing prints or exits. A reported runtime error is also cleared from the CUDA
 * runtime's last-error slot, so the next launch check does not report it a second time.
 *
 *   BT_CUDA_TRY(cudaMemsetAsync(p, 0, n, s));             returns from the function on failure
 *   BT_CUDA_TRY_GOTO(st, cudaMalloc(&p, n), fail);         sets st and jumps on failure
 *   BT_CUBLAS_TRY(...), BT_CUDNN_TRY(...)                  the same for cuBLAS and cuDNN
 *   BT_K_TRY(bt_k_add, s, dt, a, b, y, n);                 a kernels/ launcher, named by itself
 *
 * Include it only from src/cuda/ (it needs the CUDA headers, CUDA_CPPFLAGS). */
#ifndef BT_CUDA_CHECK_H
#define BT_CUDA_CHECK_H

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#ifdef BATON_HAVE_CUDNN
#include <cudnn.h>
#endif

#include "core/error.h"

static inline bt_status bt_cuda_status(cudaError_t e, const char *call, const char *file,
                                       int line)
{
    if (e == cudaSuccess) return BT_OK;
    (void)cudaGetLastError();
    return bt_error(BT_ERR_BACKEND, "%s:%d: %s: %s (%s)", file, line, call, cudaGetErrorString(e),
                    cudaGetErrorName(e));
}

static inline bt_status bt_cublas_status(cublasStatus_t e, const char *call, const char *file,
                                         int line)
{
    if (e == CUBLAS_STATUS_SUCCESS) return BT_OK;
    return bt_error(BT_ERR_BACKEND, "%s:%d: %s: %s (%s)", file, line, call,
                    cublasGetStatusString(e), cublasGetStatusName(e));
}

#ifdef BATON_HAVE_CUDNN
static inline bt_status bt_cudnn_status(cudnnStatus_t e, const char *call, const char *file,
                                        int line)
{
    if (e == CUDNN_STATUS_SUCCESS) return BT_OK;
    return bt_error(BT_ERR_BACKEND, "%s:%d: %s: %s", file, line, call, cudnnGetErrorString(e));
}
#define BT_CUDNN_CHECK(call) bt_cudnn_status((call), #call, __FILE__, __LINE__)
#define BT_CUDNN_TRY(call) BT_TRY(BT_CUDNN_CHECK(call))
#define BT_CUDNN_TRY_GOTO(st, call, label) BT_TRY_GOTO(st, BT_CUDNN_CHECK(call), label)
#endif

#define BT_CUDA_CHECK(call) bt_cuda_status((call), #call, __FILE__, __LINE__)
#define BT_CUDA_TRY(call) BT_TRY(BT_CUDA_CHECK(call))
#define BT_CUDA_TRY_GOTO(st, call, label) BT_TRY_GOTO(st, BT_CUDA_CHECK(call), label)

#define BT_CUBLAS_CHECK(call) bt_cublas_status((call), #call, __FILE__, __LINE__)
#define BT_CUBLAS_TRY(call) BT_TRY(BT_CUBLAS_CHECK(call))
#define BT_CUBLAS_TRY_GOTO(st, call, label) BT_TRY_GOTO(st, BT_CUBLAS_CHECK(call), label)

/* A kernels/ launcher: the message names the launcher rather than its whole argument list. */
#define BT_K_CHECK(fn, ...) bt_cuda_status(fn(__VA_ARGS__), #fn, __FILE__, __LINE__)
#define BT_K_TRY(fn, ...) BT_TRY(BT_K_CHECK(fn, __VA_ARGS__))

#endif
