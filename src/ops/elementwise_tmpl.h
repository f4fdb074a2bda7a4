/* ops/elementwise_tmpl.h: add and mul kernels for one float type (see ops/real.h). */

#include "ops/vec_tmpl.h"

static bt_status R(add_forward)(const bt_op_call *call)
{
    R(vec_add)(call->in[0].data, call->in[1].data, call->out->data, bt_tensor_numel(call->out));
    return BT_OK;
}

static bt_status R(add_backward)(const bt_op_call *call)
{
    const int64_t n = bt_tensor_numel(call->out_grad);
    for (int k = 0; k < 2; k++)
        if (BT_OPS_WANTS(&call->in_grad[k]))
            R(vec_acc)(call->out_grad->data, call->in_grad[k].data, n);
    return BT_OK;
}

static bt_status R(mul_forward)(const bt_op_call *call)
{
    R(vec_mul)(call->in[0].data, call->in[1].data, call->out->data, bt_tensor_numel(call->out));
    return BT_OK;
}

static bt_status R(mul_backward)(const bt_op_call *call)
{
    /* d(a b)/da = b, d(a b)/db = a */
    const int64_t n = bt_tensor_numel(call->out_grad);
    for (int k = 0; k < 2; k++)
        if (BT_OPS_WANTS(&call->in_grad[k]))
            R(vec_acc_mul)(call->out_grad->data, call->in[1 - k].data, call->in_grad[k].data, n);
    return BT_OK;
}
