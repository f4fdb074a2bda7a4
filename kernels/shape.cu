/* kernels/shape.cu: flatten and reshape (src/ops/shape.c), which only reinterpret a tensor's
 * shape: the forward is a device-local copy, the backward adds the output gradient into the
 * input's (elementwise.cu's accumulate). No kernels of their own. */
#include "cuda/op_glue.h"

/* The forward copies (any dtype: flatten and reshape also pass integers through). */
static bt_status copy_forward(const bt_op_call *call, const char *op)
{
    bt_cuda_exec *x = (bt_cuda_exec *)call->backend_ctx;
    if (!x)
        return bt_op_error(BT_ERR_INTERNAL,
                           "%s: a built-in CUDA kernel was called outside the CUDA backend's "
                           "run_op (call->backend_ctx is NULL)",
                           op);
    return bt_cuda_copy(x, call->out->data, call->in[0].data,
                        (size_t)bt_tensor_numel(call->out) * bt_dtype_size(call->out->dtype));
}

/* The backward adds the output gradient into the input's. */
static bt_status copy_backward(const bt_op_call *call, const char *op)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, op, call->out_grad->dtype, &x));
    BT_K_TRY(bt_k_acc, x->stream, call->out_grad->dtype, call->out_grad->data,
             call->in_grad[0].data, bt_tensor_numel(call->out_grad));
    return BT_OK;
}

extern "C" bt_status bt_cuda_flatten_forward(const bt_op_call *call)
{
    return copy_forward(call, "flatten");
}

extern "C" bt_status bt_cuda_flatten_backward(const bt_op_call *call)
{
    return copy_backward(call, "flatten");
}

extern "C" bt_status bt_cuda_reshape_forward(const bt_op_call *call)
{
    return copy_forward(call, "reshape");
}

extern "C" bt_status bt_cuda_reshape_backward(const bt_op_call *call)
{
    return copy_backward(call, "reshape");
}
