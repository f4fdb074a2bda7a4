/* ops/loss.c: the losses, each giving one scalar per sample (output shape []); the engine
 * averages over the batch, so no kernel divides by the batch size.
 *   mse(pred, target): mean over the sample's elements of (pred - target)^2; gradients flow to
 *     both inputs (the target's usually is not wanted: in_grad[1].data NULL).
 *   cross_entropy(logits [C], label []): -log softmax(logits)[label], label i32 in [0, C). Also
 *     accepts logits [T..., C] with labels [T...] and then averages over the T positions. The
 *     label takes no gradient; a label outside [0, C) fails the call with BT_ERR_INVALID_ARG. */
#include "ops/op_configs.h"
#include "ops/ops.h"

/* The error for a label outside [0, classes) (the CUDA backend reports its faults with it too). */
bt_status bt_ops_cross_entropy_bad_label(int64_t at, int32_t label, int64_t classes)
{
    return bt_op_error(BT_ERR_INVALID_ARG,
                       "cross_entropy: label %d at position %lld of the micro-batch is out of "
                       "range for %lld classes",
                       (int)label, (long long)at, (long long)classes);
}

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/loss_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/loss_tmpl.h"

BT_OPS_DISPATCH("mse", mse_forward, call->out->dtype)
BT_OPS_DISPATCH("mse", mse_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("cross_entropy", cross_entropy_forward, call->out->dtype)
BT_OPS_DISPATCH("cross_entropy", cross_entropy_backward, call->out_grad->dtype)

static const bt_shape scalar_shape = {.ndim = 0};

static bt_status mse_infer(bt_infer_ctx *ctx)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "mse", &dtype);
    if (st != BT_OK) return st;
    if ((st = bt_ops_same_shape(ctx, "mse", 0, 1)) != BT_OK) return st;
    return bt_infer_set_output(ctx, &scalar_shape, dtype);
}

static bt_status cross_entropy_infer(bt_infer_ctx *ctx)
{
    bt_status st = bt_ops_need_float(ctx, "cross_entropy", 0);
    if (st != BT_OK) return st;
    const bt_shape *logits = bt_infer_input_shape(ctx, 0), *label = bt_infer_input_shape(ctx, 1);
    if (logits->ndim < 1)
        return bt_infer_error(ctx, "cross_entropy expects logits shaped [C], got %s",
                              BT_OPS_SHAPE(logits));
    if (bt_infer_input_dtype(ctx, 1) != BT_I32)
        return bt_infer_error(ctx, "cross_entropy expects i32 labels, got dtype %s",
                              bt_dtype_name(bt_infer_input_dtype(ctx, 1)));
    int match = label->ndim == logits->ndim - 1;
    for (int k = 0; match && k < label->ndim; k++) match = label->dim[k] == logits->dim[k];
    if (!match) {
        bt_shape want = *logits;
        want.ndim--;
        return bt_infer_error(ctx,
                              "cross_entropy: labels shaped %s do not fit logits %s (expected "
                              "labels shaped %s)",
                              BT_OPS_SHAPE(label), BT_OPS_SHAPE(logits), BT_OPS_SHAPE(&want));
    }
    bt_cross_entropy_config cfg = {.classes = logits->dim[logits->ndim - 1],
                                .positions = bt_shape_numel(label)};
    if ((st = bt_infer_set_output(ctx, &scalar_shape, bt_infer_input_dtype(ctx, 0))) != BT_OK)
        return st;
    bt_infer_no_grad(ctx, 1);
    if ((st = bt_infer_int_range(ctx, 1, cfg.classes)) != BT_OK) return st;
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

const bt_op_def bt_op_mse = {
    .name = "mse",
    .min_inputs = 2,
    .max_inputs = 2,
    .infer = mse_infer,
    .cpu_forward = mse_forward,
    .cpu_backward = mse_backward,
    .help = "per-sample mean squared error of (prediction, target)",
};

const bt_op_def bt_op_cross_entropy = {
    .name = "cross_entropy",
    .min_inputs = 2,
    .max_inputs = 2,
    .infer = cross_entropy_infer,
    .cpu_forward = cross_entropy_forward,
    .cpu_backward = cross_entropy_backward,
    .help = "per-sample -log softmax(logits)[label] of (logits [C], i32 label)",
};
