/* ops/elementwise.c: `add` and `mul` of two inputs of identical shape and float dtype (no
 * broadcasting). Either input may also be the other (add(x, x)): each gradient is written in its
 * own pass, so in_grad[0] and in_grad[1] may even be the same buffer. */
#include "ops/ops.h"

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/elementwise_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/elementwise_tmpl.h"

BT_OPS_DISPATCH("add", add_forward, call->out->dtype)
BT_OPS_DISPATCH("add", add_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("mul", mul_forward, call->out->dtype)
BT_OPS_DISPATCH("mul", mul_backward, call->out_grad->dtype)

static bt_status binary_infer(bt_infer_ctx *ctx, const char *op)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, op, &dtype);
    if (st != BT_OK) return st;
    if ((st = bt_ops_same_shape(ctx, op, 0, 1)) != BT_OK) return st;
    return bt_infer_set_output(ctx, bt_infer_input_shape(ctx, 0), dtype);
}

static bt_status add_infer(bt_infer_ctx *ctx) { return binary_infer(ctx, "add"); }
static bt_status mul_infer(bt_infer_ctx *ctx) { return binary_infer(ctx, "mul"); }

const bt_op_def bt_op_add = {
    .name = "add",
    .min_inputs = 2,
    .max_inputs = 2,
    .infer = add_infer,
    .cpu_forward = add_forward,
    .cpu_backward = add_backward,
    .help = "elementwise a + b of two inputs of the same shape",
};

const bt_op_def bt_op_mul = {
    .name = "mul",
    .min_inputs = 2,
    .max_inputs = 2,
    .infer = mul_infer,
    .cpu_forward = mul_forward,
    .cpu_backward = mul_backward,
    .help = "elementwise a * b of two inputs of the same shape",
};
