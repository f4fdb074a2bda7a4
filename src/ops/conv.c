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
 * as each output plane is written (ops/op_configs.h).
 *
 * f32 calls may run on oneDNN's convolution instead (cpu/conv_onednn.h): conv2d_path_f32 asks
 * bt_conv_choose, which under BATON_CPU_CONV=auto times the call's shape and pass on both paths
 * the first time it meets them (conv2d_time: the forward, or the backward with the gradients the
 * call wants, into scratch outputs of its own, on the call's real inputs, weights and workspace)
 * and keeps the faster for the process. The forward and the backward are chosen separately (a
 * backward reads only x, w and dy, whichever path wrote y). f64 is im2col.
 *
 * Under mixed precision (call->precision bf16 or f16) the forward rounds its output on either
 * path as it writes it, so the executor need not (lowp_exact, on the CPU). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "core/util.h"
#include "cpu/conv_onednn.h"
#include "ops/op_configs.h"
#include "ops/ops.h"

/* the path of a call and the kernels on a path, defined after the templates (f32) or below (f64) */
static bt_status conv2d_path_f32(const bt_op_call *call, int backward, int *path);
static bt_status conv2d_forward_at_f32(const bt_op_call *call, int path);
static bt_status conv2d_backward_at_f32(const bt_op_call *call, int path);
static bt_status conv2d_forward_at_f64(const bt_op_call *call, int path);
static bt_status conv2d_backward_at_f64(const bt_op_call *call, int path);

static bt_status conv2d_path_f64(const bt_op_call *call, int backward, int *path)
{
    (void)call, (void)backward;
    *path = BT_CONV_IM2COL;
    return BT_OK;
}

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/conv_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/conv_tmpl.h"

static bt_status conv2d_forward_at_f64(const bt_op_call *call, int path)
{
    (void)path;
    return conv2d_forward_im2col_f64(call);
}

static bt_status conv2d_backward_at_f64(const bt_op_call *call, int path)
{
    (void)path;
    return conv2d_backward_im2col_f64(call);
}

static bt_status conv2d_forward_at_f32(const bt_op_call *call, int path)
{
    if (path == BT_CONV_IM2COL) return conv2d_forward_im2col_f32(call);
    const bt_conv_config *cf = call->config;
    return bt_conv_onednn_forward(cf, call->batch, call->precision, call->threads,
                                  call->in[0].data, call->param[0].data,
                                  cf->bias ? call->param[1].data : NULL, call->out->data);
}

/* The gradients from the output gradient as given (for a fused relu: already masked). */
static bt_status conv2d_backward_at_f32(const bt_op_call *call, int path)
{
    if (path == BT_CONV_IM2COL) return conv2d_backward_im2col_f32(call);
    const bt_conv_config *cf = call->config;
    float *dx = BT_OPS_WANTS(&call->in_grad[0]) ? call->in_grad[0].data : NULL;
    float *dw = call->param_grad && BT_OPS_WANTS(&call->param_grad[0])
                    ? call->param_grad[0].data : NULL;
    float *db = cf->bias && call->param_grad && BT_OPS_WANTS(&call->param_grad[1])
                    ? call->param_grad[1].data : NULL;
    if (!dx && !dw && !db) return BT_OK;
    return bt_conv_onednn_backward(cf, call->batch, call->precision, call->threads,
                                   call->in[0].data, call->param[0].data, call->out_grad->data,
                                   dx, dw, db);
}

/* What timing a shape's pass needs: the call, and scratch outputs so that the real ones are not
 * touched (allocated at the first run, only when a shape is timed). */
typedef struct conv_timing {
    const bt_op_call *call;
    int pass;
    int ready;
    bt_op_call run;
    bt_tensor out, out_grad, in_grad[BT_MAX_INPUTS], param_grad[BT_MAX_PARAMS];
    float *y, *dy, *dx, *dw, *db;
} conv_timing;

static bt_status conv_timing_prepare(conv_timing *t)
{
    const bt_op_call *c = t->call;
    const bt_conv_config *cf = c->config;
    const size_t ny = (size_t)(c->batch * cf->out * cf->ho * cf->wo);
    const size_t nx = (size_t)(c->batch * cf->c * cf->h * cf->w);
    const size_t nw = (size_t)(cf->out * cf->c * cf->kh * cf->kw);
    t->y = calloc(ny, sizeof *t->y), t->dy = malloc(ny * sizeof *t->dy);
    t->dx = calloc(nx, sizeof *t->dx), t->dw = calloc(nw, sizeof *t->dw);
    t->db = calloc((size_t)cf->out, sizeof *t->db);
    if (!t->y || !t->dy || !t->dx || !t->dw || !t->db)
        return bt_op_error(BT_ERR_NOMEM, "conv2d: out of memory for timing its paths");
    for (size_t i = 0; i < ny; i++) t->dy[i] = 1e-3f;
    const int dx = t->pass & BT_CONV_GRAD_INPUT, dw = t->pass & BT_CONV_GRAD_WEIGHTS;
    t->out = (bt_tensor){.data = t->y, .dtype = BT_F32, .ndim = 4,
                         .dim = {c->batch, cf->out, cf->ho, cf->wo}};
    t->out_grad = t->out, t->out_grad.data = t->dy;
    t->in_grad[0] = (bt_tensor){.data = dx ? t->dx : NULL, .dtype = BT_F32, .ndim = 4,
                                .dim = {c->batch, cf->c, cf->h, cf->w}};
    t->param_grad[0] = (bt_tensor){.data = dw ? t->dw : NULL, .dtype = BT_F32, .ndim = 4,
                                   .dim = {cf->out, cf->c, cf->kh, cf->kw}};
    t->param_grad[1] = (bt_tensor){.data = dw ? t->db : NULL, .dtype = BT_F32, .ndim = 1,
                                   .dim = {cf->out}};
    t->run = *c, t->run.out = &t->out;
    if (t->pass != BT_CONV_FORWARD) {
        t->run.out_grad = &t->out_grad, t->run.in_grad = t->in_grad;
        t->run.param_grad = t->param_grad;
    }
    t->ready = 1;
    return BT_OK;
}

/* bt_conv_time_fn: one run of the call's pass on path */
static bt_status conv2d_time(void *ctx, int path, double *ms)
{
    conv_timing *t = ctx;
    bt_status st;
    if (!t->ready && (st = conv_timing_prepare(t)) != BT_OK) return st;
    const double t0 = bt_now_ms();
    st = t->pass == BT_CONV_FORWARD ? conv2d_forward_at_f32(&t->run, path)
                                    : conv2d_backward_at_f32(&t->run, path);
    *ms = bt_now_ms() - t0;
    return st;
}

/* The path of a forward (backward 0) or of a backward with the gradients the call wants. */
static bt_status conv2d_path_f32(const bt_op_call *call, int backward, int *path)
{
    const bt_conv_config *cf = call->config;
    int pass = BT_CONV_FORWARD;
    if (backward) {
        if (BT_OPS_WANTS(&call->in_grad[0])) pass |= BT_CONV_GRAD_INPUT;
        if (call->param_grad && (BT_OPS_WANTS(&call->param_grad[0]) ||
                                 (cf->bias && BT_OPS_WANTS(&call->param_grad[1]))))
            pass |= BT_CONV_GRAD_WEIGHTS;
        if (pass == BT_CONV_FORWARD) { /* nothing to compute: either path does nothing */
            *path = BT_CONV_IM2COL;
            return BT_OK;
        }
    }
    conv_timing t = {.call = call, .pass = pass};
    bt_status st = bt_conv_choose(cf, call->batch, call->precision, call->threads, pass,
                                  conv2d_time, &t, path);
    free(t.y), free(t.dy), free(t.dx), free(t.dw), free(t.db);
    return st;
}

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

/* Under mixed precision the CPU forward rounds its output itself (both paths: conv_round_out,
 * bt_conv_onednn_forward), so it is exact there; the CUDA kernels leave rounding to the executor,
 * and no backward is exact (its gradients are sums). */
static int conv2d_lowp_exact(const void *config, bt_dtype precision, int pass, const char *backend)
{
    (void)config;
    return pass == BT_LOWP_FORWARD && (precision == BT_BF16 || precision == BT_F16) &&
           strcmp(backend, "cpu") == 0;
}

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
    .lowp_exact = conv2d_lowp_exact,
};
