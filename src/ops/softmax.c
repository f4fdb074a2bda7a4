/* ops/softmax.c: `softmax` over the last dimension (arg axis: -1 or the last index; other axes
 * are rejected). Numerically stable (the row maximum is subtracted). The backward recomputes the
 * row's probabilities into a one-row workspace instead of reading the output. */
#include "ops/op_configs.h"
#include "ops/ops.h"

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/softmax_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/softmax_tmpl.h"

BT_OPS_DISPATCH("softmax", softmax_forward, call->out->dtype)
BT_OPS_DISPATCH("softmax", softmax_backward, call->out_grad->dtype)

static bt_status softmax_infer(bt_infer_ctx *ctx)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "softmax", &dtype);
    if (st != BT_OK) return st;
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    if (x->ndim < 1)
        return bt_infer_error(ctx, "softmax expects an input with at least one dimension, got %s",
                              BT_OPS_SHAPE(x));
    int64_t axis = bt_infer_arg_int(ctx, "axis", -1);
    if (axis != -1 && axis != x->ndim - 1)
        return bt_infer_error(ctx,
                              "softmax: only the last axis is supported (axis -1 or %d), got "
                              "axis %lld for input %s",
                              x->ndim - 1, (long long)axis, BT_OPS_SHAPE(x));
    bt_softmax_config cfg = {.d = x->dim[x->ndim - 1]};
    if ((st = bt_infer_set_output(ctx, x, dtype)) != BT_OK) return st;
    bt_infer_set_workspace(ctx, 0, (size_t)cfg.d * BT_OPS_REAL_MAX);
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

static const bt_arg_spec softmax_args[] = {
    {"axis", BT_ARG_INT, 0, -BT_MAX_DIMS - 1, BT_MAX_DIMS, "axis to normalise; only the last"},
};

const bt_op_def bt_op_softmax = {
    .name = "softmax",
    .min_inputs = 1,
    .max_inputs = 1,
    .args = softmax_args,
    .n_args = 1,
    .infer = softmax_infer,
    .cpu_forward = softmax_forward,
    .cpu_backward = softmax_backward,
    .help = "softmax over the last dimension",
};
