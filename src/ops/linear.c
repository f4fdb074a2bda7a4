/* ops/linear.c: `linear`, y = x W^T + b over the last dimension, or relu of it with act: relu (the
 * graph lowers a layer's `act: relu` to that: one pass less over memory and one activation buffer
 * less; see ops/op_configs.h). Input [..., in] (leading per-sample dims act as extra rows); params
 * weight [out, in] and, with bias: true, bias [out], both U(-1/sqrt(in), 1/sqrt(in)) like
 * PyTorch's Linear. Kernels are GEMMs through cpu/blas.h. */
#include <string.h>

#include "ops/op_configs.h"
#include "ops/ops.h"

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/linear_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/linear_tmpl.h"

BT_OPS_DISPATCH("linear", linear_forward, call->out->dtype)
BT_OPS_DISPATCH("linear", linear_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("linear", linear_backward_weight, call->out_grad->dtype)

static bt_status linear_infer(bt_infer_ctx *ctx)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "linear", &dtype);
    if (st != BT_OK) return st;
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    if (x->ndim < 1)
        return bt_infer_error(ctx,
                              "linear expects its input's last dimension to hold the features "
                              "(rank >= 1), got %s",
                              BT_OPS_SHAPE(x));
    bt_linear_config cfg = {.in = x->dim[x->ndim - 1],
                         .out = bt_infer_arg_int(ctx, "out", 1),
                         .bias = bt_infer_arg_bool(ctx, "bias", 1)};
    if ((st = bt_ops_fused_act(ctx, "linear", &cfg.act)) != BT_OK) return st;
    bt_shape y = *x;
    y.dim[y.ndim - 1] = cfg.out;
    bt_shape w = {.ndim = 2, .dim = {cfg.out, cfg.in}};
    bt_shape b = {.ndim = 1, .dim = {cfg.out}};
    if ((st = bt_infer_set_output(ctx, &y, dtype)) != BT_OK) return st;
    if ((st = bt_infer_add_param(ctx, "weight", &w, BT_INIT_UNIFORM_FAN_IN, cfg.in, 0)) != BT_OK)
        return st;
    if (cfg.bias &&
        (st = bt_infer_add_param(ctx, "bias", &b, BT_INIT_UNIFORM_FAN_IN, cfg.in, 0)) != BT_OK)
        return st;
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

static const bt_arg_spec linear_args[] = {
    {"out", BT_ARG_INT, 1, 1, BT_OPS_DIM_MAX, "output features"},
    {"bias", BT_ARG_BOOL, 0, 1, 0, "add a learned bias (default true)"},
    {"act", BT_ARG_STRING, 0, 1, 0, "relu: applied to the output in the same pass (a layer's act: relu)"},
};

const bt_op_def bt_op_linear = {
    .name = "linear",
    .min_inputs = 1,
    .max_inputs = 1,
    .args = linear_args,
    .n_args = 3,
    .infer = linear_infer,
    .cpu_forward = linear_forward,
    .cpu_backward = linear_backward,
    /* W of a split backward: the backward without input gradients (it skips every gradient whose
     * .data is NULL, so B is it called with no parameter gradients), and without the fused relu's
     * mask, which B applied to the gradient W's stash copies */
    .cpu_backward_weight = linear_backward_weight,
    .help = "y = x W^T + b (relu of it with act: relu) over the last dimension; weight [out, in], bias [out]",
};
