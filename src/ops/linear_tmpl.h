/* ops/linear_tmpl.h: linear kernels for one float type (see ops/real.h). rows = every element of
 * the input but the last dimension, batch included. */

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
    if (cfg->bias && call->precision == BT_BF16) { /* the bias in the GEMM's epilogue (oneDNN) */
        bt_gemm_bias(call->precision, call->threads, BT_GEMM_PARAM_B, 0, 1, rows, out, in, x, in, w,
                     in, call->param[1].data, y, out);
        return BT_OK;
    }
#endif
    if (cfg->bias) {
        const REAL *b = call->param[1].data; /* (out) */
        for (int r = 0; r < rows; r++) memcpy(y + (size_t)r * out, b, (size_t)out * sizeof *y);
    }
    GEMM_W(call, BT_GEMM_PARAM_B, 0, 1, rows, out, in, 1, x, in, w, in, cfg->bias ? 1 : 0, y, out);
    return BT_OK;
}

static bt_status R(linear_backward)(const bt_op_call *call)
{
    const bt_linear_config *cfg = call->config;
    const int in = (int)cfg->in, out = (int)cfg->out;
    const int rows = (int)(bt_tensor_numel(&call->in[0]) / cfg->in);
    const REAL *x = call->in[0].data;        /* (rows, in) */
    const REAL *w = call->param[0].data;     /* (out, in) */
    const REAL *dy = call->out_grad->data;   /* (rows, out) */
    if (rows == 0) return BT_OK;
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
