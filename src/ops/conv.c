/* ops/conv.c: `conv2d` on per-sample [C, H, W] inputs: output [out, Ho, Wo] with
 * Ho = (H + 2 ph - kh) / sh + 1 (likewise Wo). Params weight [out, C, kh, kw] and, with bias,
 * bias [out], both U(-1/sqrt(C kh kw), +) like PyTorch's Conv2d.
 *
 * The CPU kernels work on chunks of S samples (bt_conv_chunk_samples: enough for S Ho Wo to reach
 * BT_CONV_CHUNK_COLUMNS, within BT_CONV_WORKSPACE_BUDGET, at least 1). im2col unfolds a whole chunk
 * into one column matrix (C kh kw, S Ho Wo) and one GEMM with the weight viewed as (out, C kh kw)
 * gives the chunk's output as (out, S Ho Wo), which is scattered into [S, out, Ho, Wo] with the
 * bias added. The backward gathers dY into (out, S Ho Wo) and runs one GEMM per chunk for each
 * gradient: dW += dY col^T, and dcol = W^T dY (written over col) folded back with col2im. The
 * workspace is fixed, independent of the micro-batch: one chunk's column matrix and its
 * (out, S Ho Wo) matrix, but at least one sample's column matrix and its gradient, which the
 * CUDA GEMM path (src/cuda/ops_cuda.c) uses (bt_conv_workspace_bytes in ops/op_configs.h,
 * shared with the CUDA kernels). A 1x1 stride-1
 * unpadded conv is a GEMM per sample on the input itself and needs no workspace. With act: relu
 * (what the graph lowers a layer's `act: relu` to) the output is relu of the convolution, applied
 * as each output plane is written (ops/op_configs.h). */
#include <limits.h>
#include <string.h>

#include "ops/op_configs.h"
#include "ops/ops.h"

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/conv_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/conv_tmpl.h"

BT_OPS_DISPATCH("conv2d", conv2d_forward, call->out->dtype)
BT_OPS_DISPATCH("conv2d", conv2d_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("conv2d", conv2d_backward_weight, call->out_grad->dtype)

static bt_status conv2d_infer(bt_infer_ctx *ctx)
{
    static const int64_t one[2] = {1, 1}, zero[2] = {0, 0};
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "conv2d", &dtype);
    if (st != BT_OK) return st;
    if ((st = bt_ops_need_ndim(ctx, "conv2d", 0, 3, "[C, H, W]")) != BT_OK) return st;
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    int64_t k[2], s[2], p[2], o[2];
    if ((st = bt_ops_pair_arg(ctx, "conv2d", "kernel", one, k)) != BT_OK) return st;
    if ((st = bt_ops_pair_arg(ctx, "conv2d", "stride", one, s)) != BT_OK) return st;
    if ((st = bt_ops_pair_arg(ctx, "conv2d", "padding", zero, p)) != BT_OK) return st;
    if ((st = bt_ops_window_out(ctx, "conv2d", x, k, s, p, o)) != BT_OK) return st;
    bt_conv_config cfg = {.c = x->dim[0], .h = x->dim[1], .w = x->dim[2],
                       .out = bt_infer_arg_int(ctx, "out", 1), .ho = o[0], .wo = o[1],
                       .kh = k[0], .kw = k[1], .sh = s[0], .sw = s[1], .ph = p[0], .pw = p[1],
                       .bias = bt_infer_arg_bool(ctx, "bias", 1)};
    cfg.pointwise = k[0] == 1 && k[1] == 1 && s[0] == 1 && s[1] == 1 && p[0] == 0 && p[1] == 0;
    if ((st = bt_ops_fused_act(ctx, "conv2d", &cfg.act)) != BT_OK) return st;
    const int64_t fan_in = cfg.c * cfg.kh * cfg.kw;
    bt_shape y = {.ndim = 3, .dim = {cfg.out, cfg.ho, cfg.wo}};
    bt_shape w = {.ndim = 4, .dim = {cfg.out, cfg.c, cfg.kh, cfg.kw}};
    bt_shape b = {.ndim = 1, .dim = {cfg.out}};
    if ((st = bt_infer_set_output(ctx, &y, dtype)) != BT_OK) return st;
    if ((st = bt_infer_add_param(ctx, "weight", &w, BT_INIT_UNIFORM_FAN_IN, fan_in, 0)) != BT_OK)
        return st;
    if (cfg.bias &&
        (st = bt_infer_add_param(ctx, "bias", &b, BT_INIT_UNIFORM_FAN_IN, fan_in, 0)) != BT_OK)
        return st;
    if (fan_in > INT_MAX || cfg.out > INT_MAX ||
        bt_conv_chunk_samples(&cfg) * cfg.ho * cfg.wo > INT_MAX)
        return bt_infer_error(ctx, "conv2d: input %s with %lld outputs is too large for the GEMMs",
                              BT_OPS_SHAPE(x), (long long)cfg.out);
    bt_infer_set_workspace(ctx, 0, bt_conv_workspace_bytes(&cfg));
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

static const bt_arg_spec conv2d_args[] = {
    {"out", BT_ARG_INT, 1, 1, BT_OPS_DIM_MAX, "output channels"},
    {"kernel", BT_ARG_INTS, 1, 1, BT_OPS_DIM_MAX, "kernel size: k or [kh, kw]"},
    {"stride", BT_ARG_INTS, 0, 1, BT_OPS_DIM_MAX, "stride: s or [sh, sw] (default 1)"},
    {"padding", BT_ARG_INTS, 0, 0, BT_OPS_DIM_MAX, "zero padding: p or [ph, pw] (default 0)"},
    {"bias", BT_ARG_BOOL, 0, 1, 0, "add a learned bias (default true)"},
    {"act", BT_ARG_STRING, 0, 1, 0, "relu: applied to the output in the same pass (a layer's act: relu)"},
};

const bt_op_def bt_op_conv2d = {
    .name = "conv2d",
    .min_inputs = 1,
    .max_inputs = 1,
    .args = conv2d_args,
    .n_args = 6,
    .infer = conv2d_infer,
    .cpu_forward = conv2d_forward,
    .cpu_backward = conv2d_backward,
    /* W of a split backward: the backward without input gradients (it skips every gradient whose
     * .data is NULL, so B is it called with no parameter gradients), and without the fused relu's
     * mask, which B applied to the gradient W's stash copies */
    .cpu_backward_weight = conv2d_backward_weight,
    .help = "2-D convolution of [C, H, W]; weight [out, C, kh, kw], bias [out]",
};
