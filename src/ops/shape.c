/* ops/shape.c: `flatten` (per-sample shape to [numel]) and `reshape` (arg shape: per-sample
 * dims, one of them may be -1 and is then inferred). Both keep the element order, so the forward
 * is a copy and the backward adds the output gradient back unchanged. They accept f32, f64 and
 * i32; an i32 input (indices) takes no gradient. Copies both ways, so under mixed precision their
 * results need no rounding (lowp_exact). */
#include <string.h>

#include "ops/ops.h"

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/shape_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/shape_tmpl.h"

BT_OPS_DISPATCH("reshape", shape_backward, call->out_grad->dtype)

static bt_status copy_forward(const bt_op_call *call)
{
    memcpy(call->out->data, call->in[0].data,
           (size_t)bt_tensor_numel(call->out) * bt_dtype_size(call->out->dtype));
    return BT_OK;
}

static bt_status copy_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    return shape_backward(call);
}

/* Accepts f32, f64 and i32; an i32 input never takes a gradient. */
static bt_status check_dtype(bt_infer_ctx *ctx, const char *op)
{
    bt_dtype d = bt_infer_input_dtype(ctx, 0);
    if (d == BT_I32) {
        bt_infer_no_grad(ctx, 0);
        return BT_OK;
    }
    return bt_ops_need_float(ctx, op, 0);
}

static bt_status flatten_infer(bt_infer_ctx *ctx)
{
    bt_status st = check_dtype(ctx, "flatten");
    if (st != BT_OK) return st;
    bt_shape y = {.ndim = 1, .dim = {bt_shape_numel(bt_infer_input_shape(ctx, 0))}};
    return bt_infer_set_output(ctx, &y, bt_infer_input_dtype(ctx, 0));
}

static bt_status reshape_infer(bt_infer_ctx *ctx)
{
    bt_status st = check_dtype(ctx, "reshape");
    if (st != BT_OK) return st;
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    int64_t v[BT_ARG_MAX_INTS];
    int n = bt_infer_arg_ints(ctx, "shape", BT_ARG_MAX_INTS, v);
    if (n > BT_MAX_DIMS)
        return bt_infer_error(ctx, "reshape: shape has %d dimensions (at most %d)", n,
                              BT_MAX_DIMS);
    bt_shape y = {.ndim = n};
    for (int k = 0; k < n; k++) y.dim[k] = v[k];
    int infer_at = -1;
    int64_t known = 1;
    for (int k = 0; k < n; k++) {
        if (v[k] == -1) {
            if (infer_at >= 0)
                return bt_infer_error(ctx, "reshape: shape %s has more than one -1",
                                      BT_OPS_SHAPE(&y));
            infer_at = k;
        } else if (v[k] < 1) {
            return bt_infer_error(ctx, "reshape: shape %s has dimension %d = %lld (must be >= 1 "
                                  "or -1)", BT_OPS_SHAPE(&y), k, (long long)v[k]);
        } else {
            known *= v[k];
        }
    }
    const int64_t numel = bt_shape_numel(x);
    if (infer_at >= 0) {
        if (numel % known != 0)
            return bt_infer_error(ctx,
                                  "reshape: cannot reshape %s (%lld elements) to %s: %lld is not "
                                  "a multiple of %lld",
                                  BT_OPS_SHAPE(x), (long long)numel, BT_OPS_SHAPE(&y),
                                  (long long)numel, (long long)known);
        y.dim[infer_at] = numel / known;
        known = numel;
    }
    if (known != numel)
        return bt_infer_error(ctx,
                              "reshape: cannot reshape %s (%lld elements) to %s (%lld elements)",
                              BT_OPS_SHAPE(x), (long long)numel, BT_OPS_SHAPE(&y),
                              (long long)known);
    return bt_infer_set_output(ctx, &y, bt_infer_input_dtype(ctx, 0));
}

static const bt_arg_spec reshape_args[] = {
    {"shape", BT_ARG_INTS, 1, -1, BT_OPS_DIM_MAX, "per-sample dims; one may be -1"},
};

const bt_op_def bt_op_flatten = {
    .name = "flatten",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = flatten_infer,
    .cpu_forward = copy_forward,
    .cpu_backward = copy_backward,
    .help = "per-sample shape to [numel]",
    .lowp_exact = bt_ops_lowp_selects,
};

const bt_op_def bt_op_reshape = {
    .name = "reshape",
    .min_inputs = 1,
    .max_inputs = 1,
    .args = reshape_args,
    .n_args = 1,
    .infer = reshape_infer,
    .cpu_forward = copy_forward,
    .cpu_backward = copy_backward,
    .help = "per-sample shape to args.shape (one entry may be -1)",
    .lowp_exact = bt_ops_lowp_selects,
};
