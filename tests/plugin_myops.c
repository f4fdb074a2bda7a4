/* tests/plugin_myops.c: the tiny plugin library of tests/cli_ckpt.sh and tests/cli_messages.sh for
 * `--plugin`: registers custom ops from baton_plugin_register, the function the baton command
 * looks up: `myops.scale2` (y = 2x), and the misbehaving ops the message tests need:
 * `myops.fail` (its forward fails without setting a message), `myops.nan` (y = x, but its first
 * output element is NaN) and `myops.nangrad` (y = x, its input gradient NaN). With
 * BATON_TEST_MYOPS_REFUSE=1 in the environment the registration itself fails without a message.
 * Built as a loadable module (tests/libmyops.la, never installed); it does not link libbaton:
 * bt_op_register and the rest resolve against the baton command that loads it. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <baton.h>

bt_status baton_plugin_register(void);

static bt_status scale2_infer(bt_infer_ctx *ctx)
{
    return bt_infer_set_output(ctx, bt_infer_input_shape(ctx, 0), bt_infer_input_dtype(ctx, 0));
}

static bt_status scale2_forward(const bt_op_call *call)
{
    if (call->in[0].dtype != BT_F32) return bt_op_error(BT_ERR_UNSUPPORTED, "myops.scale2: f32 only");
    const float *x = call->in[0].data;
    float *y = call->out->data;
    for (int64_t i = 0, n = bt_tensor_numel(&call->in[0]); i < n; i++) y[i] = 2 * x[i];
    return BT_OK;
}

static bt_status scale2_backward(const bt_op_call *call)
{
    if (!call->in_grad[0].data) return BT_OK;
    const float *dy = call->out_grad->data;
    float *dx = call->in_grad[0].data;
    for (int64_t i = 0, n = bt_tensor_numel(&call->in[0]); i < n; i++) dx[i] += 2 * dy[i];
    return BT_OK;
}

static bt_status fail_forward(const bt_op_call *call)
{
    (void)call;
    return BT_ERR_BACKEND; /* and no bt_op_error: the message is baton's to make */
}

static bt_status copy_forward(const bt_op_call *call)
{
    const float *x = call->in[0].data;
    float *y = call->out->data;
    for (int64_t i = 0, n = bt_tensor_numel(&call->in[0]); i < n; i++) y[i] = x[i];
    return BT_OK;
}

static bt_status nan_forward(const bt_op_call *call)
{
    bt_status st = copy_forward(call);
    ((float *)call->out->data)[0] = NAN;
    return st;
}

static bt_status copy_backward(const bt_op_call *call)
{
    if (!call->in_grad[0].data) return BT_OK;
    const float *dy = call->out_grad->data;
    float *dx = call->in_grad[0].data;
    for (int64_t i = 0, n = bt_tensor_numel(&call->in[0]); i < n; i++) dx[i] += dy[i];
    return BT_OK;
}

static bt_status nan_backward(const bt_op_call *call)
{
    bt_status st = copy_backward(call);
    if (call->in_grad[0].data) ((float *)call->in_grad[0].data)[0] = NAN;
    return st;
}

__attribute__((visibility("default"))) bt_status baton_plugin_register(void)
{
    static const bt_op_def scale2 = {
        .name = "myops.scale2",
        .min_inputs = 1,
        .max_inputs = 1,
        .help = "2 x (a test plugin)",
        .infer = scale2_infer,
        .cpu_forward = scale2_forward,
        .cpu_backward = scale2_backward,
    };
    static const bt_op_def fail = {.name = "myops.fail", .min_inputs = 1, .max_inputs = 1,
                                   .help = "fails without a message (a test plugin)", .infer = scale2_infer,
                                   .cpu_forward = fail_forward, .cpu_backward = copy_backward};
    static const bt_op_def nan = {.name = "myops.nan", .min_inputs = 1, .max_inputs = 1,
                                  .help = "writes NaN (a test plugin)", .infer = scale2_infer,
                                  .cpu_forward = nan_forward, .cpu_backward = copy_backward};
    static const bt_op_def nangrad = {.name = "myops.nangrad", .min_inputs = 1, .max_inputs = 1,
                                      .help = "writes a NaN gradient (a test plugin)", .infer = scale2_infer,
                                      .cpu_forward = copy_forward, .cpu_backward = nan_backward};
    const char *refuse = getenv("BATON_TEST_MYOPS_REFUSE");
    if (refuse && *refuse == '1') return BT_ERR_INTERNAL; /* without a message */
    bt_status st = bt_op_register(&scale2);
    if (st == BT_OK) st = bt_op_register(&fail);
    if (st == BT_OK) st = bt_op_register(&nan);
    if (st == BT_OK) st = bt_op_register(&nangrad);
    return st;
}
