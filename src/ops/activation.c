/* ops/activation.c: elementwise activations of one float input: `relu`, `gelu` (the exact erf
 * form, PyTorch's default; in f32 through ops/fastmath.h's vectorised erf and exp, within 5.3e-7
 * of libm's, as PyTorch's own vectorised CPU GELU; `approx: tanh` is PyTorch's tanh
 * approximation, HF's gelu_new and gelu_pytorch_tanh), `tanh`, `sigmoid`, `silu` (x sigmoid(x),
 * PyTorch's SiLU). Output shape and dtype are the input's. And `swiglu`: [..., 2I] (gate | up)
 * to [..., I], silu(gate) * up, the gated MLP of Llama, Qwen2 and Mistral after one `linear` to
 * 2I (the function `silu` on gate then `mul` by up computes, in one pass and one buffer; its
 * f32 exp is ops/fastmath.h's vectorised one, within 2 ulp of silu's expf). The backward
 * recomputes what it needs from the input, so it never depends on the output buffer still
 * holding this layer's activations. Under mixed precision relu's results need no rounding
 * (lowp_exact), the others' do. */
#include <string.h>

#include "ops/op_configs.h"
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
BT_OPS_DISPATCH("swiglu", swiglu_forward, call->out->dtype)
BT_OPS_DISPATCH("swiglu", swiglu_backward, call->out_grad->dtype)

/* Shape rule of every activation: one float input, output alike. */
static bt_status unary_infer(bt_infer_ctx *ctx, const char *op)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, op, &dtype);
    if (st != BT_OK) return st;
    return bt_infer_set_output(ctx, bt_infer_input_shape(ctx, 0), dtype);
}

static bt_status relu_infer(bt_infer_ctx *ctx) { return unary_infer(ctx, "relu"); }
static bt_status tanh_infer(bt_infer_ctx *ctx) { return unary_infer(ctx, "tanh"); }
static bt_status sigmoid_infer(bt_infer_ctx *ctx) { return unary_infer(ctx, "sigmoid"); }
static bt_status silu_infer(bt_infer_ctx *ctx) { return unary_infer(ctx, "silu"); }

/* gelu's `approx`: absent or "none" (erf), or "tanh". */
static bt_status gelu_infer(bt_infer_ctx *ctx)
{
    bt_status st = unary_infer(ctx, "gelu");
    if (st != BT_OK) return st;
    const char *approx = bt_infer_arg_string(ctx, "approx", "none");
    bt_gelu_config cfg = {.approx = BT_OPS_GELU_ERF};
    if (strcmp(approx, "tanh") == 0)
        cfg.approx = BT_OPS_GELU_TANH;
    else if (strcmp(approx, "none") != 0)
        return bt_infer_error(ctx, "gelu: approx must be \"none\" (the erf form) or \"tanh\", got \"%s\"",
                              approx);
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

/* swiglu: the last dimension even, halved in the output. */
static bt_status swiglu_infer(bt_infer_ctx *ctx)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "swiglu", &dtype);
    if (st != BT_OK) return st;
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    if (x->ndim < 1 || x->dim[x->ndim - 1] % 2 != 0)
        return bt_infer_error(ctx, "swiglu expects a last dimension 2I (gate | up), got %s",
                              BT_OPS_SHAPE(x));
    bt_swiglu_config cfg = {.half = x->dim[x->ndim - 1] / 2};
    bt_shape y = *x;
    y.dim[y.ndim - 1] = cfg.half;
    if ((st = bt_infer_set_output(ctx, &y, dtype)) != BT_OK) return st;
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

/* lowp_exact: relu selects x or 0 and masks the gradient (bt_ops_lowp_selects); the others
 * compute, so their results are rounded (NULL). */
#define ACTIVATION_DEF(op, help_text, exact, arg_specs, n_arg_specs) \
    const bt_op_def bt_op_##op = {                                  \
        .name = #op,                                                \
        .min_inputs = 1,                                            \
        .max_inputs = 1,                                            \
        .args = arg_specs,                                          \
        .n_args = n_arg_specs,                                      \
        .infer = op##_infer,                                        \
        .cpu_forward = op##_forward,                                \
        .cpu_backward = op##_backward,                              \
        .help = help_text,                                          \
        .lowp_exact = exact,                                        \
    };

static const bt_arg_spec gelu_args[] = {
    {"approx", BT_ARG_STRING, 0, 1, 0,
     "none (default): x Phi(x) with erf; tanh: PyTorch's tanh approximation (HF gelu_new)"},
};

ACTIVATION_DEF(relu, "max(x, 0)", bt_ops_lowp_selects, NULL, 0)
ACTIVATION_DEF(gelu, "x * Phi(x), the exact (erf) GELU, or its tanh approximation (approx: tanh)",
               NULL, gelu_args, 1)
ACTIVATION_DEF(tanh, "hyperbolic tangent", NULL, NULL, 0)
ACTIVATION_DEF(sigmoid, "1 / (1 + exp(-x))", NULL, NULL, 0)
ACTIVATION_DEF(silu, "x * sigmoid(x) (SiLU, swish)", NULL, NULL, 0)
ACTIVATION_DEF(swiglu, "[..., 2I] (gate | up) to silu(gate) * up [..., I], the SwiGLU MLP's gate", NULL,
               NULL, 0)
