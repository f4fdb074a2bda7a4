/* tests/plugin_myops.c: the tiny plugin library of tests/cli_ckpt.sh for `baton run --plugin`:
 * registers one custom op, `myops.scale2` (y = 2x), from baton_plugin_register, the function the
 * baton command looks up. Built as a loadable module (tests/libmyops.la, never installed); it does
 * not link libbaton: bt_op_register and the rest resolve against the baton command that loads it. */
#include <stdint.h>

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
    return bt_op_register(&scale2);
}
