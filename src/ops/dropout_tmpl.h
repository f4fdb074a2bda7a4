/* ops/dropout_tmpl.h: dropout kernels for one float type (see ops/real.h). */

#include "ops/vec_tmpl.h"

static bt_status R(dropout_forward)(const bt_op_call *call)
{
    const double p = ((const bt_dropout_config *)call->config)->p;
    const int64_t n = bt_tensor_numel(call->out);
    unsigned char *mask = call->saved; /* (n) */
    if (!call->training || p == 0) {
        memcpy(call->out->data, call->in[0].data, (size_t)n * sizeof(REAL));
        return BT_OK;
    }
    if (!mask)
        return bt_op_error(BT_ERR_INTERNAL, "dropout: training forward without a saved buffer");
    dropout_mask(call->seed, p, n, mask);
    R(vec_mask_scale)(call->in[0].data, mask, (REAL)(1.0 / (1.0 - p)), call->out->data, n);
    return BT_OK;
}

static bt_status R(dropout_backward)(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const double p = ((const bt_dropout_config *)call->config)->p;
    const int64_t n = bt_tensor_numel(call->out_grad);
    if (!call->training || p == 0)
        R(vec_acc)(call->out_grad->data, call->in_grad[0].data, n);
    else
        R(vec_acc_mask_scale)(call->out_grad->data, call->saved, (REAL)(1.0 / (1.0 - p)),
                              call->in_grad[0].data, n);
    return BT_OK;
}
