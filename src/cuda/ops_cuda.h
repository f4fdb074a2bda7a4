/* cuda/ops_cuda.h: what the CUDA backend (backend_cuda.c) and the CUDA kernels of the built-in
 * ops (ops_cuda.c) share. An op kernel sees only its bt_op_call (call->stream is the device's
 * stream); the libraries' handles and the fault record reach it through the execution context
 * the backend's run_op installs on the calling thread for the duration of the call. The built-in
 * ops' CUDA kernels therefore run only through the CUDA backend's run_op; called any other way
 * they fail with BT_ERR_INTERNAL. Custom ops' CUDA kernels need nothing but call->stream. */
#ifndef BT_CUDA_OPS_CUDA_H
#define BT_CUDA_OPS_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "baton/status.h"
#include "kernels/kernels.h"

typedef struct bt_cuda_exec {
    int device;             /* the CUDA device index */
    cudaStream_t stream;    /* everything is queued here, in order */
    cublasHandle_t cublas;  /* bound to stream */
    void *cudnn;            /* cudnnHandle_t bound to stream; NULL: no cuDNN (build or choice) */
    bt_k_fault *fault;      /* device memory; kernels record data errors here */
    int fault_armed;        /* set by a kernel that may record a fault; the backend then reads
                             * the record back at its next sync or copy to the host */
    int64_t cudnn_convs;    /* conv2d calls cuDNN ran (the rest took the im2col + cuBLAS path) */
} bt_cuda_exec;

/* Attaches the CUDA kernels to every built-in op (graph/op_registry.h); runs once per process,
 * later calls return the first result. Needs no GPU. */
bt_status bt_cuda_attach_kernels(void);

/* Installs x as the calling thread's execution context (NULL removes it). */
void bt_cuda_exec_set(bt_cuda_exec *x);

/* The execution context of a device the CUDA backend opened (for tests: cudnn_convs). */
struct bt_device;
const bt_cuda_exec *bt_cuda_device_exec(const struct bt_device *dev);

#endif
