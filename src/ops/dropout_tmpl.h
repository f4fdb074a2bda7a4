/* ops/dropout_tmpl.h: dropout kernels for one float type (see ops/real.h). */

static bt_status R(dropout_forward)(const bt_op_call *call)
{
    const double p = ((const dropout_config *)call->config)->p;
    const int64_t n = bt_tensor_numel(call->out);
    const REAL *restrict x = call->in[0].data;
    REAL *restrict y = call->out->data;
    unsigned char *restrict mask = call->saved; /* (n) */
    if (!call->training || p == 0) {
        for (int64_t i = 0; i < n; i++) y[i] = x[i];
        return BT_OK;
    }
    if (!mask)
        return bt_op_error(BT_ERR_INTERNAL, "dropout: training forward without a saved buffer");
    dropout_mask(call->seed, p, n, mask);
    const REAL scale = (REAL)(1.0 / (1.0 - p));
    for (int64_t i = 0; i < n; i++) y[i] = mask[i] ? x[i] * scale : 0;
    return BT_OK;
}

static bt_status R(dropout_backward)(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const double p = ((const dropout_config *)call->config)->p;
    const int64_t n = bt_tensor_numel(call->out_grad);
    const REAL *restrict dy = call->out_grad->data;
    const unsigned char *restrict mask = call->saved; /* (n) */
    REAL *restrict dx = call->in_grad[0].data;
    if (!call->training || p == 0) {
        for (int64_t i = 0; i < n; i++) dx[i] += dy[i];
        return BT_OK;
    }
    const REAL scale = (REAL)(1.0 / (1.0 - p));
    for (int64_t i = 0; i < n; i++) dx[i] += mask[i] ? dy[i] * scale : 0;
    return BT_OK;
}
