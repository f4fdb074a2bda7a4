/* ops/elementwise_tmpl.h: add and mul kernels for one float type (see ops/real.h). */

static bt_status R(add_forward)(const bt_op_call *call)
{
    const int64_t n = bt_tensor_numel(call->out);
    const REAL *restrict a = call->in[0].data, *restrict b = call->in[1].data;
    REAL *restrict y = call->out->data;
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
    return BT_OK;
}

static bt_status R(add_backward)(const bt_op_call *call)
{
    const int64_t n = bt_tensor_numel(call->out_grad);
    const REAL *restrict dy = call->out_grad->data;
    for (int k = 0; k < 2; k++) {
        if (!BT_OPS_WANTS(&call->in_grad[k])) continue;
        REAL *restrict dx = call->in_grad[k].data;
        for (int64_t i = 0; i < n; i++) dx[i] += dy[i];
    }
    return BT_OK;
}

static bt_status R(mul_forward)(const bt_op_call *call)
{
    const int64_t n = bt_tensor_numel(call->out);
    const REAL *restrict a = call->in[0].data, *restrict b = call->in[1].data;
    REAL *restrict y = call->out->data;
    for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];
    return BT_OK;
}

static bt_status R(mul_backward)(const bt_op_call *call)
{
    const int64_t n = bt_tensor_numel(call->out_grad);
    const REAL *restrict dy = call->out_grad->data;
    for (int k = 0; k < 2; k++) {
        if (!BT_OPS_WANTS(&call->in_grad[k])) continue;
        const REAL *restrict other = call->in[1 - k].data;
        REAL *restrict dx = call->in_grad[k].data;
        for (int64_t i = 0; i < n; i++) dx[i] += dy[i] * other[i];
    }
    return BT_OK;
}
