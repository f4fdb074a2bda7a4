/* backend/run_op.c: every run of an op on a device goes through bt_backend_run_op (the executor's
 * forward, backward, weight gradients and decode, the profiler's measurements), so a failing
 * kernel always leaves a message: the thread's message is cleared before the call, and a kernel
 * that fails without setting one (a custom op's, bt_op_error unused) gets one naming the op and
 * the status. The callers add where it ran (stage, layer, micro-batch). */
#include "backend/backend.h"
#include "core/error.h"

bt_status bt_backend_run_op(const bt_backend *be, bt_device *dev, const bt_op_def *op, int mode, bt_op_call *call)
{
    bt_clear_error();
    bt_status st = be->run_op(dev, op, mode, call);
    if (st != BT_OK && !*bt_last_error())
        bt_error(st, "op '%s' failed (%s) without saying why (its kernel set no message)", op->name,
                 bt_status_name(st));
    return st;
}
