/* cuda/conv_cudnn.c: conv2d through cuDNN (descriptors, algorithm choice, the calls), for the
 * conv2d glue in kernels/conv.cu. cuDNN runs f32 convolutions (f64 takes the GEMM path) with FMA
 * math only (no TF32), choosing by cuDNN's heuristics the first DETERMINISTIC algorithm
 * (CUDNN_DETERMINISTIC: the same bits every run) whose workspace fits the one the shape rule
 * declared. Descriptors and choices are made once per call shape (config, batch, precision) and
 * kept in the device context (a plan), so steps after the first make none.
 * Where none fits, or a size exceeds cuDNN's int range, the GEMM path runs instead: the
 * bt_cudnn_conv_* functions set *done to 0 before queueing anything.
 *
 * Under mixed precision the executor has rounded every operand (fed inputs, activations,
 * gradients, weights) to bf16 or f16, and tensor cores may take them. f16:
 * CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, which converts the f32 tensors to f16 (exact for f16
 * values). bf16: CUDNN_TENSOR_OP_MATH, TF32 tensor cores on sm_80 and later, whose 8-bit exponent
 * and 10-bit fraction hold every bf16 value exactly; the conversion mode is not allowed there, as its f16 would overflow or flush bf16's range. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#ifdef BATON_HAVE_CUDNN
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/conv_cudnn.h"
#include "cuda/cuda_check.h"

/* The math type a convolution descriptor starts with under precision prec. */
static cudnnMathType_t conv_math(bt_dtype prec)
{
    if (prec == BT_F16) return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    if (prec == BT_BF16) return CUDNN_TENSOR_OP_MATH;
    return CUDNN_FMA_MATH;
}

/* Whether an algorithm the heuristics offer with math type m may run under precision prec. */
static int conv_math_ok(cudnnMathType_t m, bt_dtype prec)
{
    if (m == CUDNN_FMA_MATH) return 1;
    if (prec == BT_F16)
        return m == CUDNN_DEFAULT_MATH || m == CUDNN_TENSOR_OP_MATH ||
               m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    if (prec == BT_BF16) return m == CUDNN_DEFAULT_MATH || m == CUDNN_TENSOR_OP_MATH;
    return 0;
}

typedef struct conv_descs {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
} conv_descs;

static void conv_descs_destroy(conv_descs *d)
{
    if (d->x) cudnnDestroyTensorDescriptor(d->x);
    if (d->y) cudnnDestroyTensorDescriptor(d->y);
    if (d->w) cudnnDestroyFilterDescriptor(d->w);
    if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
    memset(d, 0, sizeof *d);
}

/* Whether cuDNN can take this convolution at all (f32, every tensor within int range). */
int bt_cudnn_conv_applicable(const bt_cuda_exec *x, bt_dtype dt, const bt_conv_config *cf,
                            int64_t batch)
{
    if (!x->cudnn || dt != BT_F32) return 0;
    const int64_t in = batch * cf->c * cf->h * cf->w, out = batch * cf->out * cf->ho * cf->wo;
    const int64_t w = cf->out * cf->c * cf->kh * cf->kw;
    return batch <= INT_MAX && in <= INT_MAX && out <= INT_MAX && w <= INT_MAX;
}

static bt_status conv_descs_create(const bt_conv_config *cf, int64_t batch, bt_dtype prec,
                                   conv_descs *d)
{
    bt_status st = BT_OK;
    memset(d, 0, sizeof *d);
    BT_CUDNN_TRY_GOTO(st, cudnnCreateTensorDescriptor(&d->x), fail);
    BT_CUDNN_TRY_GOTO(st, cudnnCreateTensorDescriptor(&d->y), fail);
    BT_CUDNN_TRY_GOTO(st, cudnnCreateFilterDescriptor(&d->w), fail);
    BT_CUDNN_TRY_GOTO(st, cudnnCreateConvolutionDescriptor(&d->conv), fail);
    BT_CUDNN_TRY_GOTO(st,
                      cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                 (int)batch, (int)cf->c, (int)cf->h, (int)cf->w),
                      fail);
    BT_CUDNN_TRY_GOTO(st,
                      cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                 (int)batch, (int)cf->out, (int)cf->ho,
                                                 (int)cf->wo),
                      fail);
    BT_CUDNN_TRY_GOTO(st,
                      cudnnSetFilter4dDescriptor(d->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                 (int)cf->out, (int)cf->c, (int)cf->kh,
                                                 (int)cf->kw),
                      fail);
    BT_CUDNN_TRY_GOTO(st,
                      cudnnSetConvolution2dDescriptor(d->conv, (int)cf->ph, (int)cf->pw,
                                                      (int)cf->sh, (int)cf->sw, 1, 1,
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                      fail);
    BT_CUDNN_TRY_GOTO(st, cudnnSetConvolutionMathType(d->conv, conv_math(prec)), fail);
    return BT_OK;
fail:
    conv_descs_destroy(d);
    return st;
}

static bt_status pick_forward(cudnnHandle_t h, const conv_descs *d, bt_dtype prec, size_t ws,
                              int *found, cudnnConvolutionFwdAlgo_t *algo, cudnnMathType_t *math)
{
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    *found = 0;
    BT_CUDNN_TRY(cudnnSetConvolutionMathType(d->conv, conv_math(prec)));
    BT_CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(
        h, d->x, d->w, d->conv, d->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf));
    for (int i = 0; i < n && !*found; i++) {
        size_t need = 0;
        if (perf[i].status != CUDNN_STATUS_SUCCESS || !conv_math_ok(perf[i].mathType, prec) ||
            perf[i].determinism != CUDNN_DETERMINISTIC)
            continue;
        if (cudnnSetConvolutionMathType(d->conv, perf[i].mathType) != CUDNN_STATUS_SUCCESS)
            continue;
        if (cudnnGetConvolutionForwardWorkspaceSize(h, d->x, d->w, d->conv, d->y, perf[i].algo,
                                                    &need) != CUDNN_STATUS_SUCCESS ||
            need > ws)
            continue;
        *algo = perf[i].algo;
        *math = perf[i].mathType;
        *found = 1;
    }
    return BT_OK;
}

static bt_status pick_backward_data(cudnnHandle_t h, const conv_descs *d, bt_dtype prec,
                                    const bt_conv_config *cf, size_t ws, int *found,
                                    cudnnConvolutionBwdDataAlgo_t *algo, cudnnMathType_t *math)
{
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n = 0;
    *found = 0;
    BT_CUDNN_TRY(cudnnSetConvolutionMathType(d->conv, conv_math(prec)));
    BT_CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, d->w, d->y, d->conv, d->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf));
    for (int i = 0; i < n && !*found; i++) {
        size_t need = 0;
        if (perf[i].status != CUDNN_STATUS_SUCCESS || !conv_math_ok(perf[i].mathType, prec) ||
            perf[i].determinism != CUDNN_DETERMINISTIC)
            continue;
        /* FFT data gradients of strided convolutions have been wrong in some cuDNN versions
         * (PyTorch blocks them too) */
        const int fft = perf[i].algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
                        perf[i].algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING;
        if (fft && (cf->sh > 1 || cf->sw > 1)) continue;
        if (cudnnSetConvolutionMathType(d->conv, perf[i].mathType) != CUDNN_STATUS_SUCCESS)
            continue;
        if (cudnnGetConvolutionBackwardDataWorkspaceSize(h, d->w, d->y, d->conv, d->x,
                                                         perf[i].algo,
                                                         &need) != CUDNN_STATUS_SUCCESS ||
            need > ws)
            continue;
        *algo = perf[i].algo;
        *math = perf[i].mathType;
        *found = 1;
    }
    return BT_OK;
}

static bt_status pick_backward_filter(cudnnHandle_t h, const conv_descs *d, bt_dtype prec,
                                      size_t ws, int *found,
                                      cudnnConvolutionBwdFilterAlgo_t *algo,
                                      cudnnMathType_t *math)
{
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int n = 0;
    *found = 0;
    BT_CUDNN_TRY(cudnnSetConvolutionMathType(d->conv, conv_math(prec)));
    BT_CUDNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, d->x, d->y, d->conv, d->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf));
    for (int i = 0; i < n && !*found; i++) {
        size_t need = 0;
        if (perf[i].status != CUDNN_STATUS_SUCCESS || !conv_math_ok(perf[i].mathType, prec) ||
            perf[i].determinism != CUDNN_DETERMINISTIC)
            continue;
        if (cudnnSetConvolutionMathType(d->conv, perf[i].mathType) != CUDNN_STATUS_SUCCESS)
            continue;
        if (cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d->x, d->y, d->conv, d->w,
                                                           perf[i].algo,
                                                           &need) != CUDNN_STATUS_SUCCESS ||
            need > ws)
            continue;
        *algo = perf[i].algo;
        *math = perf[i].mathType;
        *found = 1;
    }
    return BT_OK;
}

/* A plan: the descriptors and chosen algorithms of one call shape (config, batch, precision),
 * made on the first call of that shape and reused by every later one, so a step makes no
 * descriptors and asks no heuristics. Each direction is picked the first time it is needed. */
typedef struct conv_plan {
    int used;
    bt_conv_config cf;
    int64_t batch;
    bt_dtype prec;
    conv_descs d;
    int fwd_picked, fwd_found, data_picked, data_found, filter_picked, filter_found;
    cudnnConvolutionFwdAlgo_t fwd_algo;
    cudnnConvolutionBwdDataAlgo_t data_algo;
    cudnnConvolutionBwdFilterAlgo_t filter_algo;
    cudnnMathType_t fwd_math, data_math, filter_math;
} conv_plan;

/* Plans per device context, replaced round-robin once full (a model has few conv shapes; the last
 * micro-batch of an epoch may add one). */
#define BT_CONV_PLANS 32
struct bt_cudnn_plans {
    conv_plan plan[BT_CONV_PLANS];
    int next;
    int64_t made; /* plans created (for tests) */
};

static int same_shape(const bt_conv_config *a, const bt_conv_config *b)
{
    return a->c == b->c && a->h == b->h && a->w == b->w && a->out == b->out && a->ho == b->ho &&
           a->wo == b->wo && a->kh == b->kh && a->kw == b->kw && a->sh == b->sh &&
           a->sw == b->sw && a->ph == b->ph && a->pw == b->pw && a->bias == b->bias &&
           a->pointwise == b->pointwise;
}

void bt_cudnn_plans_free(bt_cuda_exec *x)
{
    bt_cudnn_plans *p = x->conv_plans;
    if (!p) return;
    for (int i = 0; i < BT_CONV_PLANS; i++)
        if (p->plan[i].used) conv_descs_destroy(&p->plan[i].d);
    free(p);
    x->conv_plans = NULL;
}

int64_t bt_cudnn_plans_made(const bt_cuda_exec *x)
{
    return x->conv_plans ? x->conv_plans->made : 0;
}

/* The plan of call's shape, made (descriptors only) where there is none yet. */
static bt_status plan_for(bt_cuda_exec *x, const bt_op_call *call, conv_plan **out)
{
    const bt_conv_config *cf = call->config;
    if (!x->conv_plans && !(x->conv_plans = calloc(1, sizeof *x->conv_plans)))
        return bt_error(BT_ERR_NOMEM, "cuda:%d: out of memory for convolution plans", x->device);
    bt_cudnn_plans *p = x->conv_plans;
    for (int i = 0; i < BT_CONV_PLANS; i++) {
        conv_plan *c = &p->plan[i];
        if (c->used && c->batch == call->batch && c->prec == call->precision &&
            same_shape(&c->cf, cf)) {
            *out = c;
            return BT_OK;
        }
    }
    conv_plan *c = &p->plan[p->next];
    p->next = (p->next + 1) % BT_CONV_PLANS;
    if (c->used) conv_descs_destroy(&c->d);
    memset(c, 0, sizeof *c);
    BT_TRY(conv_descs_create(cf, call->batch, call->precision, &c->d));
    c->used = 1;
    c->cf = *cf;
    c->batch = call->batch;
    c->prec = call->precision;
    p->made++;
    *out = c;
    return BT_OK;
}

bt_status bt_cudnn_conv_forward(bt_cuda_exec *x, const bt_op_call *call, int *done)
{
    const bt_conv_config *cf = call->config;
    const size_t ws = bt_conv_workspace_bytes(cf);
    const float one = 1, beta = cf->bias ? 1.0f : 0.0f;
    cudnnHandle_t h = x->cudnn;
    conv_plan *p = NULL;
    *done = 0;
    BT_TRY(plan_for(x, call, &p));
    if (!p->fwd_picked) {
        BT_TRY(pick_forward(h, &p->d, p->prec, ws, &p->fwd_found, &p->fwd_algo, &p->fwd_math));
        p->fwd_picked = 1;
    }
    if (!p->fwd_found) return BT_OK;
    BT_CUDNN_TRY(cudnnSetConvolutionMathType(p->d.conv, p->fwd_math));
    if (cf->bias)
        BT_K_TRY(bt_k_fill_planes, x->stream, BT_F32, call->param[1].data, call->out->data,
                 call->batch * cf->out, cf->out, cf->ho * cf->wo);
    BT_CUDNN_TRY(cudnnConvolutionForward(h, &one, p->d.x, call->in[0].data, p->d.w,
                                         call->param[0].data, p->d.conv, p->fwd_algo,
                                         ws ? call->workspace : NULL, ws, &beta, p->d.y,
                                         call->out->data));
    x->cudnn_convs++;
    *done = 1;
    return BT_OK;
}

bt_status bt_cudnn_conv_backward(bt_cuda_exec *x, const bt_op_call *call, void *dx, void *dw,
                                 void *db, int *done)
{
    const bt_conv_config *cf = call->config;
    const size_t ws = bt_conv_workspace_bytes(cf);
    void *work = ws ? call->workspace : NULL;
    const float one = 1;
    cudnnHandle_t h = x->cudnn;
    conv_plan *p = NULL;
    *done = 0;
    BT_TRY(plan_for(x, call, &p));
    if (dx && !p->data_picked) {
        BT_TRY(pick_backward_data(h, &p->d, p->prec, cf, ws, &p->data_found, &p->data_algo,
                                  &p->data_math));
        p->data_picked = 1;
    }
    if (dw && !p->filter_picked) {
        BT_TRY(pick_backward_filter(h, &p->d, p->prec, ws, &p->filter_found, &p->filter_algo,
                                    &p->filter_math));
        p->filter_picked = 1;
    }
    if ((dx && !p->data_found) || (dw && !p->filter_found)) return BT_OK;
    if (db)
        BT_K_TRY(bt_k_channel_sum_acc, x->stream, BT_F32, call->out_grad->data, db, call->batch,
                 cf->out, cf->ho * cf->wo);
    if (dw) {
        BT_CUDNN_TRY(cudnnSetConvolutionMathType(p->d.conv, p->filter_math));
        BT_CUDNN_TRY(cudnnConvolutionBackwardFilter(h, &one, p->d.x, call->in[0].data, p->d.y,
                                                    call->out_grad->data, p->d.conv,
                                                    p->filter_algo, work, ws, &one, p->d.w, dw));
    }
    if (dx) {
        BT_CUDNN_TRY(cudnnSetConvolutionMathType(p->d.conv, p->data_math));
        BT_CUDNN_TRY(cudnnConvolutionBackwardData(h, &one, p->d.w, call->param[0].data, p->d.y,
                                                  call->out_grad->data, p->d.conv, p->data_algo,
                                                  work, ws, &one, p->d.x, dx));
    }
    x->cudnn_convs++;
    *done = 1;
    return BT_OK;
}
#endif /* BATON_HAVE_CUDNN */
