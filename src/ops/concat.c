/* ops/concat.c: pieces of the last dimension.
 *   split(x): args parts (n), index (i): the i-th of n equal chunks of x's last dim ([..., D] ->
 *     [..., D / n]; D divisible by n), e.g. q, k or v out of one `linear` to 3C.
 *   concat(a, b, ...): 2 to 8 inputs with equal leading dims joined along the last dim.
 * Forward copies, backward adds the matching columns of the gradient back. f32 and f64. The
 * forwards count rows from the call's tensors (ops/op_configs.h), so one position's row decodes. */
#include <string.h>

#include "ops/op_configs.h"
#include "ops/ops.h"

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/concat_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/concat_tmpl.h"

BT_OPS_DISPATCH("split", split_forward, call->out->dtype)
BT_OPS_DISPATCH("split", split_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("concat", concat_forward, call->out->dtype)
BT_OPS_DISPATCH("concat", concat_backward, call->out_grad->dtype)

static bt_status split_infer(bt_infer_ctx *ctx)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "split", &dtype);
    if (st != BT_OK) return st;
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    if (x->ndim < 1)
        return bt_infer_error(ctx, "split expects at least one dimension, got %s",
                              BT_OPS_SHAPE(x));
    const int64_t parts = bt_infer_arg_int(ctx, "parts", 1), index = bt_infer_arg_int(ctx, "index", 0);
    const int64_t d = x->dim[x->ndim - 1];
    if (d % parts != 0)
        return bt_infer_error(ctx, "split: the last dimension %lld is not divisible by parts = %lld",
                              (long long)d, (long long)parts);
    if (index >= parts)
        return bt_infer_error(ctx, "split: index %lld is out of range for %lld parts",
                              (long long)index, (long long)parts);
    bt_concat_config cfg = {.rows = bt_shape_numel(x) / d, .d = d, .n = 1};
    cfg.width[0] = d / parts;
    cfg.offset[0] = index * cfg.width[0];
    bt_shape y = *x;
    y.dim[y.ndim - 1] = cfg.width[0];
    if ((st = bt_infer_set_output(ctx, &y, dtype)) != BT_OK) return st;
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

static bt_status concat_infer(bt_infer_ctx *ctx)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "concat", &dtype);
    if (st != BT_OK) return st;
    const int n = bt_infer_num_inputs(ctx);
    const bt_shape *x0 = bt_infer_input_shape(ctx, 0);
    if (x0->ndim < 1)
        return bt_infer_error(ctx, "concat expects at least one dimension, got %s",
                              BT_OPS_SHAPE(x0));
    bt_concat_config cfg = {.rows = bt_shape_numel(x0) / x0->dim[x0->ndim - 1], .n = n};
    for (int i = 0; i < n; i++) {
        const bt_shape *x = bt_infer_input_shape(ctx, i);
        int ok = x->ndim == x0->ndim;
        for (int k = 0; ok && k < x->ndim - 1; k++) ok = x->dim[k] == x0->dim[k];
        if (!ok)
            return bt_infer_error(ctx,
                                  "concat: input %d shaped %s does not match input 0 shaped %s "
                                  "but in the last dimension",
                                  i, BT_OPS_SHAPE(x), BT_OPS_SHAPE(x0));
        cfg.width[i] = x->dim[x->ndim - 1];
        cfg.offset[i] = cfg.d;
        cfg.d += cfg.width[i];
    }
    bt_shape y = *x0;
    y.dim[y.ndim - 1] = cfg.d;
    if ((st = bt_infer_set_output(ctx, &y, dtype)) != BT_OK) return st;
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

static const bt_arg_spec split_args[] = {
    {"parts", BT_ARG_INT, 1, 1, BT_OPS_DIM_MAX, "number of equal chunks of the last dim"},
    {"index", BT_ARG_INT, 1, 0, BT_OPS_DIM_MAX, "which chunk (0-based)"},
};

const bt_op_def bt_op_split = {
    .name = "split",
    .min_inputs = 1,
    .max_inputs = 1,
    .args = split_args,
    .n_args = 2,
    .infer = split_infer,
    .cpu_forward = split_forward,
    .cpu_backward = split_backward,
    .help = "chunk `index` of `parts` equal chunks of the last dimension",
};

const bt_op_def bt_op_concat = {
    .name = "concat",
    .min_inputs = 2,
    .max_inputs = BT_CONCAT_MAX,
    .infer = concat_infer,
    .cpu_forward = concat_forward,
    .cpu_backward = concat_backward,
    .help = "inputs joined along the last dimension",
};
