/* ops/shape_tmpl.h: the flatten/reshape backward for one float type (see ops/real.h):
 * dx += dy, element for element. */

#include "ops/vec_tmpl.h"

static bt_status R(shape_backward)(const bt_op_call *call)
{
    R(vec_acc)(call->out_grad->data, call->in_grad[0].data, bt_tensor_numel(call->out_grad));
    return BT_OK;
}
