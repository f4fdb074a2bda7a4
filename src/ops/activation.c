/* ops/activation.c: elementwise activations of one float input: `relu`, `gelu` (the exact erf
 * form, PyTorch's default; in f32 through ops/fastmath.h's vectorised erf and exp, within 5.3e-7
 * of libm's, as PyTorch's own vectorised CPU GELU), `tanh`, `sigmoid`, `silu` (x sigmoid(x),
 * PyTorch's SiLU). Output shape and dtype are the input's. The backward recomputes what it needs
 * from the input, so it never depends on the output buffer still holding this layer's
 * activations. Under mixed precision relu's results need no rounding (lowp_exact), the others'
 * do. */
#include "ops/ops.h"

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/activation_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/activation_tmpl.h"

BT_OPS_DISPATCH("relu", relu_forward, call->out->dtype)
BT_OPS_DISPATCH("relu", relu_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("gelu", gelu_forward, call->out->dtype)
BT_OPS_DISPATCH("gelu", gelu_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("tanh", tanh_forward, call->out->dtype)
BT_OPS_DISPATCH("tanh", tanh_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("sigmoid", sigmoid_forward, call->out->dtype)
BT_OPS_DISPATCH("sigmoid", sigmoid_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("silu", silu_forward, call->out->dtype)
BT_OPS_DISPATCH("silu", silu_backward, call->out_grad->dtype)

/* Shape rule of every activation: one float input, output alike. */
static bt_status unary_infer(bt_infer_ctx *ctx, const char *op)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, op, &dtype);
    if (st != BT_OK) return st;
    return bt_infer_set_output(ctx, bt_infer_input_shape(ctx, 0), dtype);
}

static bt_status relu_infer(bt_infer_ctx *ctx) { return unary_infer(ctx, "relu"); }
static bt_status gelu_infer(bt_infer_ctx *ctx) { return unary_infer(ctx, "gelu"); }
static bt_status tanh_infer(bt_infer_ctx *ctx) { return unary_infer(ctx, "tanh"); }
static bt_status sigmoid_infer(bt_infer_ctx *ctx) { return unary_infer(ctx, "sigmoid"); }
static bt_status silu_infer(bt_infer_ctx *ctx) { return unary_infer(ctx, "silu"); }

/* lowp_exact: relu selects x or 0 and masks the gradient (bt_ops_lowp_selects); the others
 * compute, so their results are rounded (NULL). */
#define ACTIVATION_DEF(op, help_text, exact) \
    const bt_op_def bt_op_##op = {           \
        .name = #op,                         \
        .min_inputs = 1,                     \
        .max_inputs = 1,                     \
        .infer = op##_infer,                 \
        .cpu_forward = op##_forward,         \
        .cpu_backward = op##_backward,       \
        .help = help_text,                   \
        .lowp_exact = exact,                 \
    };

ACTIVATION_DEF(relu, "max(x, 0)", bt_ops_lowp_selects)
ACTIVATION_DEF(gelu, "x * Phi(x), the exact (erf) GELU", NULL)
ACTIVATION_DEF(tanh, "hyperbolic tangent", NULL)
ACTIVATION_DEF(sigmoid, "1 / (1 + exp(-x))", NULL)
ACTIVATION_DEF(silu, "x * sigmoid(x) (SiLU, swish)", NULL)
