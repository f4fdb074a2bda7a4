/* ops/layernorm.c: `layernorm` over the last dimension d: y = (x - mean) * rstd * weight + bias,
 * rstd = 1 / sqrt(var + eps) with the biased variance (as PyTorch). Params weight [d] (ones) and
 * bias [d] (zeros). The forward saves mean and rstd of every row (two doubles per row, whatever
 * the dtype) for the backward.
 * `rmsnorm`: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps) over the last dimension d
 * (PyTorch's RMSNorm, LLaMA's norm); param weight [d] (ones); saves rstd per row (a double). */
#include "ops/op_configs.h"
#include "ops/ops.h"

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/layernorm_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/layernorm_tmpl.h"

BT_OPS_DISPATCH("layernorm", layernorm_forward, call->out->dtype)
BT_OPS_DISPATCH("layernorm", layernorm_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("rmsnorm", rmsnorm_forward, call->out->dtype)
BT_OPS_DISPATCH("rmsnorm", rmsnorm_backward, call->out_grad->dtype)

static bt_status layernorm_infer(bt_infer_ctx *ctx)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "layernorm", &dtype);
    if (st != BT_OK) return st;
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    if (x->ndim < 1)
        return bt_infer_error(ctx,
                              "layernorm expects an input with at least one dimension, got %s",
                              BT_OPS_SHAPE(x));
    bt_layernorm_config cfg = {.d = x->dim[x->ndim - 1], .eps = bt_infer_arg_float(ctx, "eps", 1e-5)};
    if (!(cfg.eps > 0))
        return bt_infer_error(ctx, "layernorm: eps must be > 0, got %g", cfg.eps);
    bt_shape p = {.ndim = 1, .dim = {cfg.d}};
    if ((st = bt_infer_set_output(ctx, x, dtype)) != BT_OK) return st;
    if ((st = bt_infer_add_param(ctx, "weight", &p, BT_INIT_ONES, cfg.d, 0)) != BT_OK) return st;
    if ((st = bt_infer_add_param(ctx, "bias", &p, BT_INIT_ZEROS, cfg.d, 0)) != BT_OK) return st;
    bt_infer_set_saved(ctx, (size_t)(bt_shape_numel(x) / cfg.d) * 2 * sizeof(double));
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

static const bt_arg_spec layernorm_args[] = {
    {"eps", BT_ARG_FLOAT, 0, 0, 1e300, "added to the variance (default 1e-5, > 0)"},
};

const bt_op_def bt_op_layernorm = {
    .name = "layernorm",
    .min_inputs = 1,
    .max_inputs = 1,
    .args = layernorm_args,
    .n_args = 1,
    .infer = layernorm_infer,
    .cpu_forward = layernorm_forward,
    .cpu_backward = layernorm_backward,
    /* W of a split backward: the same kernel, called with no input gradients (it skips every
     * gradient whose .data is NULL, so B is it called with no parameter gradients) */
    .cpu_backward_weight = layernorm_backward,
    .help = "layer normalisation over the last dimension; weight [d], bias [d]",
};

static bt_status rmsnorm_infer(bt_infer_ctx *ctx)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "rmsnorm", &dtype);
    if (st != BT_OK) return st;
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    if (x->ndim < 1)
        return bt_infer_error(ctx, "rmsnorm expects an input with at least one dimension, got %s",
                              BT_OPS_SHAPE(x));
    bt_layernorm_config cfg = {.d = x->dim[x->ndim - 1], .eps = bt_infer_arg_float(ctx, "eps", 1e-5)};
    if (!(cfg.eps > 0)) return bt_infer_error(ctx, "rmsnorm: eps must be > 0, got %g", cfg.eps);
    bt_shape p = {.ndim = 1, .dim = {cfg.d}};
    if ((st = bt_infer_set_output(ctx, x, dtype)) != BT_OK) return st;
    if ((st = bt_infer_add_param(ctx, "weight", &p, BT_INIT_ONES, cfg.d, 0)) != BT_OK) return st;
    bt_infer_set_saved(ctx, (size_t)(bt_shape_numel(x) / cfg.d) * sizeof(double));
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

const bt_op_def bt_op_rmsnorm = {
    .name = "rmsnorm",
    .min_inputs = 1,
    .max_inputs = 1,
    .args = layernorm_args,
    .n_args = 1,
    .infer = rmsnorm_infer,
    .cpu_forward = rmsnorm_forward,
    .cpu_backward = rmsnorm_backward,
    .help = "RMS normalisation over the last dimension; weight [d]",
};
