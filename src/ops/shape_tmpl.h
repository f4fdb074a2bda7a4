/* ops/shape_tmpl.h: the flatten/reshape backward for one float type (see ops/real.h):
 * dx += dy, element for element. */

static bt_status R(shape_backward)(const bt_op_call *call)
{
    const int64_t n = bt_tensor_numel(call->out_grad);
    const REAL *restrict dy = call->out_grad->data;
    REAL *restrict dx = call->in_grad[0].data;
    for (int64_t i = 0; i < n; i++) dx[i] += dy[i];
    return BT_OK;
}
