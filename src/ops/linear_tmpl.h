/* ops/linear_tmpl.h: linear kernels for one float type (see ops/real.h). rows = every element of
 * the input but the last dimension, batch included. A fused relu (cfg->act) runs over the output
 * right after the GEMM (in bf16 on oneDNN, in the matmul's epilogue with the bias); its backward
 * masks the output gradient in place first, so the GEMMs read the gradient of the pre-activation. */

#include "ops/vec_tmpl.h"

static bt_status R(linear_forward)(const bt_op_call *call)
{
    const bt_linear_config *cfg = call->config;
    const int in = (int)cfg->in, out = (int)cfg->out;
    const int rows = (int)(bt_tensor_numel(&call->in[0]) / cfg->in);
    const REAL *x = call->in[0].data;    /* (rows, in) */
    const REAL *w = call->param[0].data; /* (out, in) */
    REAL *y = call->out->data;           /* (rows, out) */
    if (rows == 0) return BT_OK;
#if BT_REAL_BITS == 32
    if (cfg->bias && call->precision == BT_BF16) { /* bias and relu in the GEMM's epilogue (oneDNN) */
        bt_gemm_bias(call->precision, call->threads, BT_GEMM_PARAM_B, 0, 1, rows, out, in, x, in, w,
                     in, call->param[1].data, cfg->act == BT_OPS_ACT_RELU, y, out);
        return BT_OK;
    }
#endif
    if (cfg->bias) {
        const REAL *b = call->param[1].data; /* (out) */
        for (int r = 0; r < rows; r++) memcpy(y + (size_t)r * out, b, (size_t)out * sizeof *y);
    }
    GEMM_W(call, BT_GEMM_PARAM_B, 0, 1, rows, out, in, 1, x, in, w, in, cfg->bias ? 1 : 0, y, out);
    if (cfg->act == BT_OPS_ACT_RELU) R(vec_relu)(y, (int64_t)rows * out);
    return BT_OK;
}

/* The gradients from dy, the gradient of the pre-activation (rows, out). */
static bt_status R(linear_backward_from)(const bt_op_call *call, const REAL *dy)
{
    const bt_linear_config *cfg = call->config;
    const int in = (int)cfg->in, out = (int)cfg->out;
    const int rows = (int)(bt_tensor_numel(&call->in[0]) / cfg->in);
    const REAL *x = call->in[0].data;        /* (rows, in) */
    const REAL *w = call->param[0].data;     /* (out, in) */
    if (BT_OPS_WANTS(&call->in_grad[0])) {
        REAL *dx = call->in_grad[0].data; /* (rows, in) += dY W */
        GEMM_W(call, BT_GEMM_PARAM_B, 0, 0, rows, in, out, 1, dy, out, w, in, 1, dx, in);
    }
    if (call->param_grad && BT_OPS_WANTS(&call->param_grad[0])) {
        REAL *dw = call->param_grad[0].data; /* (out, in) += dY^T X */
        GEMM_AT(call, 1, 0, out, in, rows, 1, dy, out, x, in, 1, dw, in);
    }
    if (cfg->bias && call->param_grad && BT_OPS_WANTS(&call->param_grad[1])) {
        REAL *db = call->param_grad[1].data; /* (out) += column sums of dY */
        for (int r = 0; r < rows; r++) R(vec_acc)(dy + (size_t)r * out, db, out);
    }
    return BT_OK;
}

static bt_status R(linear_backward)(const bt_op_call *call)
{
    const bt_linear_config *cfg = call->config;
    REAL *dy = call->out_grad->data; /* (rows, out) */
    if (bt_tensor_numel(&call->in[0]) == 0) return BT_OK;
    if (cfg->act == BT_OPS_ACT_RELU) /* through the fused relu, from its output */
        R(vec_relu_mask_par)(call->out->data, dy, bt_tensor_numel(call->out_grad), call->threads);
    return R(linear_backward_from)(call, dy);
}

/* W of a split backward: the output gradient is B's, already masked (the stash copied it after B) */
static bt_status R(linear_backward_weight)(const bt_op_call *call)
{
    if (bt_tensor_numel(&call->in[0]) == 0) return BT_OK;
    return R(linear_backward_from)(call, call->out_grad->data);
}
