/* cuda/conv_cudnn.h: conv2d through cuDNN (cuda/conv_cudnn.c), called by the conv2d glue in
 * kernels/conv.cu where the build has cuDNN (BATON_HAVE_CUDNN). A call that cannot take cuDNN
 * (no handle, f64, a size past int, no algorithm whose workspace fits) leaves *done 0 having
 * queued nothing, and the glue runs the im2col + cuBLAS path instead. */
#ifndef BT_CUDA_CONV_CUDNN_H
#define BT_CUDA_CONV_CUDNN_H

#include "cuda/ops_cuda.h"
#include "ops/op_configs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether cuDNN can take this convolution at all (a handle, f32, every tensor within int range). */
int bt_cudnn_conv_applicable(const bt_cuda_exec *x, bt_dtype dt, const bt_conv_config *cf,
                             int64_t batch);
/* y = conv(x, W) (+ b); *done 1 where cuDNN ran it. */
bt_status bt_cudnn_conv_forward(bt_cuda_exec *x, const bt_op_call *call, int *done);
/* dx, dw, db += their gradients (any may be NULL); *done 1 where cuDNN ran them. */
bt_status bt_cudnn_conv_backward(bt_cuda_exec *x, const bt_op_call *call, void *dx, void *dw,
                                 void *db, int *done);
/* Frees x's cached plans (the backend's close). */
void bt_cudnn_plans_free(bt_cuda_exec *x);
/* Plans made so far on x (a test sees that repeated calls of one shape make one). */
int64_t bt_cudnn_plans_made(const bt_cuda_exec *x);

#ifdef __cplusplus
}
#endif
#endif
