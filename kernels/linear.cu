/* kernels/linear.cu: linear (src/ops/linear.c), y (rows, out) = x (rows, in) W^T + b with W
 * (out, in), as cuBLAS GEMMs (cuda/op_glue.h explains the row-major to column-major
 * transposition) plus elementwise.cu's bias rows and (deterministic) column sums. Under mixed
 * precision the GEMMs may use tensor cores (bt_cuda_gemm): every operand is already rounded to
 * the precision, fed inputs included. A fused relu (act: relu) runs in place over the output; its
 * backward masks the output gradient in place first, except in W (out not given: B masked the
 * gradient W's stash copied). No kernels of their own. */
#include "cuda/op_glue.h"

extern "C" bt_status bt_cuda_linear_forward(const bt_op_call *call)
{
    const bt_linear_config *cf = (const bt_linear_config *)call->config;
    const bt_dtype dt = call->out->dtype;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "linear", dt, &x));
    const int64_t rows = bt_tensor_numel(&call->in[0]) / cf->in;
    if (rows == 0) return BT_OK;
    BT_TRY(bt_cuda_fits_int("linear", rows, cf->in, cf->out));
    const int in = (int)cf->in, out = (int)cf->out;
    if (cf->bias)
        BT_K_TRY(bt_k_fill_rows, x->stream, dt, call->param[1].data, call->out->data, rows, out);
    /* y^T (out, rows) = W x^T: W is column-major (in, out), x^T column-major (in, rows) */
    BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_T, CUBLAS_OP_N, out, (int)rows, in,
                call->param[0].data, in, call->in[0].data, in, cf->bias ? 1.0 : 0.0,
                call->out->data, out));
    if (cf->act == BT_OPS_ACT_RELU)
        BT_K_TRY(bt_k_activation_forward, x->stream, dt, BT_K_RELU, call->out->data,
                 call->out->data, rows * out);
    return BT_OK;
}

extern "C" bt_status bt_cuda_linear_backward(const bt_op_call *call)
{
    const bt_linear_config *cf = (const bt_linear_config *)call->config;
    const bt_dtype dt = call->out_grad->dtype;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "linear", dt, &x));
    const int64_t rows = bt_tensor_numel(&call->in[0]) / cf->in;
    if (rows == 0) return BT_OK;
    BT_TRY(bt_cuda_fits_int("linear", rows, cf->in, cf->out));
    const int in = (int)cf->in, out = (int)cf->out;
    const void *dy = call->out_grad->data; /* (rows, out) */
    if (cf->act == BT_OPS_ACT_RELU && call->out->data) /* through the fused relu (not in W) */
        BT_K_TRY(bt_k_relu_mask, x->stream, dt, call->out->data, call->out_grad->data, rows * out);
    if (BT_OPS_WANTS(&call->in_grad[0])) /* dx^T (in, rows) += W^T dy^T */
        BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_N, in, (int)rows, out,
                    call->param[0].data, in, dy, out, 1.0, call->in_grad[0].data, in));
    if (call->param_grad && BT_OPS_WANTS(&call->param_grad[0])) /* dW^T (in, out) += x^T dy */
        BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_T, in, out, (int)rows,
                    call->in[0].data, in, dy, out, 1.0, call->param_grad[0].data, in));
    if (cf->bias && call->param_grad && BT_OPS_WANTS(&call->param_grad[1]))
        BT_K_TRY(bt_k_colsum_acc, x->stream, dt, dy, call->param_grad[1].data, rows, out);
    return BT_OK;
}
