/* cuda/ops_cuda.h: what the CUDA backend (backend_cuda.c) and the CUDA kernels of the built-in
 * ops share. Each op family's CUDA glue lives beside its kernels in kernels/<family>.cu (C-style
 * code with C linkage) and defines bt_cuda_<op>_forward / bt_cuda_<op>_backward for every row of
 * ops/builtin_ops.def; ops_cuda.c attaches them to the ops. A kernel sees only its bt_op_call: the
 * backend's run_op sets call->stream to the device's stream and call->backend_ctx to the device's
 * bt_cuda_exec (libraries' handles, fault record). The built-in ops' CUDA kernels therefore run
 * only through the CUDA backend's run_op; called with no backend_ctx they fail with
 * BT_ERR_INTERNAL. Custom ops' CUDA kernels need nothing but call->stream. */
#ifndef BT_CUDA_OPS_CUDA_H
#define BT_CUDA_OPS_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "baton/op.h"
#include "baton/status.h"
#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_cudnn_plans bt_cudnn_plans; /* cuda/conv_cudnn.c */

typedef struct bt_cuda_exec {
    int device;             /* the CUDA device index */
    cudaStream_t stream;    /* everything is queued here, in order */
    cublasHandle_t cublas;  /* bound to stream */
    void *cudnn;            /* cudnnHandle_t bound to stream; NULL: no cuDNN (build or choice) */
    bt_k_fault *fault;      /* device memory; kernels record data errors here */
    int fault_armed;        /* set by a kernel that may record a fault; the backend then reads
                             * the record back at its next sync or copy to the host */
    int64_t cudnn_convs;    /* conv2d calls cuDNN ran (the rest took the im2col + cuBLAS path) */
    double *reduce;         /* device scratch for ordered (deterministic) reductions, reduce_n */
    int64_t reduce_n;       /* doubles; used in stream order by one kernel pair at a time */
    bt_cudnn_plans *conv_plans; /* cuDNN convolution plans by call shape (NULL until one) */
} bt_cuda_exec;

/* bt_cuda_linear_forward, bt_cuda_linear_backward, ...: one pair per built-in op. */
#define BT_BUILTIN_OP(op)                                 \
    bt_status bt_cuda_##op##_forward(const bt_op_call *call); \
    bt_status bt_cuda_##op##_backward(const bt_op_call *call);
#include "ops/builtin_ops.def"

/* The decode kernels (op->cuda_decode) of the built-ins that have a CPU one: one position of one
 * sequence with its cache in device memory (kernels/attention.cu, kernels/embedding.cu,
 * kernels/rope.cu). */
bt_status bt_cuda_attention_decode(const bt_op_call *call);
bt_status bt_cuda_pos_embedding_decode(const bt_op_call *call);
bt_status bt_cuda_rope_decode(const bt_op_call *call);

/* Attaches the CUDA kernels to every built-in op (graph/op_registry.h); runs once per process,
 * later calls return the first result. Needs no GPU. */
bt_status bt_cuda_attach_kernels(void);

/* The status for a fault record a kernel filled (kind != BT_K_FAULT_NONE) on CUDA device
 * `device`: BT_ERR_INVALID_ARG with the CPU kernel's wording. Defined beside the kernels that
 * raise faults (cuda/op_glue.c). */
bt_status bt_cuda_fault_status(int device, const bt_k_fault *f);

/* The execution context of a device the CUDA backend opened (for tests: cudnn_convs). */
struct bt_device;
const bt_cuda_exec *bt_cuda_device_exec(const struct bt_device *dev);

#ifdef __cplusplus
}
#endif
#endif
