/* cuda/ops_cuda.c: the CUDA forward and backward of every built-in op, attached to the op
 * registry once (bt_cuda_attach_kernels, called from the backend's open). Each kernel here reads
 * the op's config (ops/op_configs.h, shared with the CPU kernels), checks the dtype (f32 or f64, as the CPU kernels), and
 * queues kernels/ launchers, cuBLAS GEMMs or cuDNN convolutions on the device's stream, in the
 * order the CPU reference (src/ops/) computes; nothing here waits for the GPU.
 *
 * Conventions are the CPU kernels' (baton/op.h): backward ADDS into in_grad and param_grad,
 * in_grad[i].data NULL means no gradient wanted, losses are per sample. Data errors found on the
 * device (an embedding index or a label out of range) are recorded in the fault record and
 * reported by the backend at its next sync or copy to the host, not by the call itself.
 *
 * Row-major GEMMs go through column-major cuBLAS by the usual transposition: a row-major (r, c)
 * matrix is a column-major (c, r) one, so row-major C = A B is column-major C^T = B^T A^T. The
 * default cuBLAS math mode (no TF32) and cuDNN's FMA math keep f32 results within 1e-4 of the
 * CPU. Under mixed precision (call->precision BT_BF16 or BT_F16; tensors still f32) GEMMs and
 * cuDNN convolutions may use tensor cores in that precision with f32 accumulation (gemm(), and
 * the cuDNN notes above conv_math()). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_check.h"
#include "ops/op_configs.h"
#include "cuda/ops_cuda.h"
#include "graph/op_registry.h"
#include "ops/ops.h"

static _Thread_local bt_cuda_exec *current_exec;

void bt_cuda_exec_set(bt_cuda_exec *x) { current_exec = x; }

/* ---- helpers -------------------------------------------------------------------------------- */

/* The calling thread's execution context for op, after checking that dt is a float type. */
static bt_status begin(const char *op, bt_dtype dt, bt_cuda_exec **x)
{
    *x = current_exec;
    if (!*x)
        return bt_op_error(BT_ERR_INTERNAL,
                           "%s: a built-in CUDA kernel was called outside the CUDA backend's "
                           "run_op",
                           op);
    if (dt != BT_F32 && dt != BT_F64)
        return bt_op_error(BT_ERR_UNSUPPORTED, "%s: no CUDA kernel for dtype %s", op,
                           bt_dtype_name(dt));
    return BT_OK;
}

static size_t esize(bt_dtype dt) { return dt == BT_F32 ? sizeof(float) : sizeof(double); }

/* cuBLAS and cuDNN take int sizes: every one of a, b, c must fit. */
static bt_status fits_int(const char *op, int64_t a, int64_t b, int64_t c)
{
    if (a > INT_MAX || b > INT_MAX || c > INT_MAX)
        return bt_op_error(BT_ERR_UNSUPPORTED,
                           "%s: a GEMM dimension (%lld, %lld, %lld) exceeds the int range of "
                           "cuBLAS",
                           op, (long long)a, (long long)b, (long long)c);
    return BT_OK;
}

/* Column-major C (m, n) = op(A) op(B) + beta C, alpha 1. Under mixed precision (prec BT_BF16 or
 * BT_F16, dt BT_F32) the f32 matrices go to the tensor cores as bf16 or f16 with f32
 * accumulation (cuBLAS's 32F_FAST_16BF / 32F_FAST_16F compute types); the executor has already
 * rounded activations, gradients and weights to prec, so that conversion is exact for them. */
static bt_status gemm(bt_cuda_exec *x, bt_dtype dt, bt_dtype prec, cublasOperation_t ta,
                      cublasOperation_t tb, int m, int n, int k, const void *a, int lda,
                      const void *b, int ldb, double beta, void *c, int ldc)
{
    if (m == 0 || n == 0) return BT_OK;
    if (dt == BT_F32 && (prec == BT_BF16 || prec == BT_F16)) {
        const float one = 1, fbeta = (float)beta;
        const cublasComputeType_t ct =
            prec == BT_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F_FAST_16F;
        BT_CUBLAS_TRY(cublasGemmEx(x->cublas, ta, tb, m, n, k, &one, a, CUDA_R_32F, lda, b,
                                   CUDA_R_32F, ldb, &fbeta, c, CUDA_R_32F, ldc, ct,
                                   CUBLAS_GEMM_DEFAULT));
    } else if (dt == BT_F32) {
        const float one = 1, fbeta = (float)beta;
        BT_CUBLAS_TRY(cublasSgemm(x->cublas, ta, tb, m, n, k, &one, a, lda, b, ldb, &fbeta, c,
                                  ldc));
    } else {
        const double one = 1;
        BT_CUBLAS_TRY(cublasDgemm(x->cublas, ta, tb, m, n, k, &one, a, lda, b, ldb, &beta, c,
                                  ldc));
    }
    return BT_OK;
}

/* Byte offset i elements of dt into p. */
static void *at(const void *p, int64_t i, bt_dtype dt)
{
    return (char *)p + (size_t)i * esize(dt);
}

static bt_status copy_on_stream(bt_cuda_exec *x, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || dst == src) return BT_OK;
    BT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, x->stream));
    return BT_OK;
}

/* ---- linear: y (rows, out) = x (rows, in) W^T + b, W (out, in) ---------------------------- */

static bt_status linear_forward(const bt_op_call *call)
{
    const bt_linear_config *cf = call->config;
    const bt_dtype dt = call->out->dtype;
    bt_cuda_exec *x;
    BT_TRY(begin("linear", dt, &x));
    const int64_t rows = bt_tensor_numel(&call->in[0]) / cf->in;
    if (rows == 0) return BT_OK;
    BT_TRY(fits_int("linear", rows, cf->in, cf->out));
    const int in = (int)cf->in, out = (int)cf->out;
    if (cf->bias)
        BT_K_TRY(bt_k_fill_rows, x->stream, dt, call->param[1].data, call->out->data, rows, out);
    /* y^T (out, rows) = W x^T: W is column-major (in, out), x^T column-major (in, rows) */
    return gemm(x, dt, call->precision, CUBLAS_OP_T, CUBLAS_OP_N, out, (int)rows, in,
                call->param[0].data, in, call->in[0].data, in, cf->bias ? 1.0 : 0.0,
                call->out->data, out);
}

static bt_status linear_backward(const bt_op_call *call)
{
    const bt_linear_config *cf = call->config;
    const bt_dtype dt = call->out_grad->dtype;
    bt_cuda_exec *x;
    BT_TRY(begin("linear", dt, &x));
    const int64_t rows = bt_tensor_numel(&call->in[0]) / cf->in;
    if (rows == 0) return BT_OK;
    BT_TRY(fits_int("linear", rows, cf->in, cf->out));
    const int in = (int)cf->in, out = (int)cf->out;
    const void *dy = call->out_grad->data; /* (rows, out) */
    if (BT_OPS_WANTS(&call->in_grad[0])) /* dx^T (in, rows) += W^T dy^T */
        BT_TRY(gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_N, in, (int)rows, out,
                    call->param[0].data, in, dy, out, 1.0, call->in_grad[0].data, in));
    if (call->param_grad && BT_OPS_WANTS(&call->param_grad[0])) /* dW^T (in, out) += x^T dy */
        BT_TRY(gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_T, in, out, (int)rows,
                    call->in[0].data, in, dy, out, 1.0, call->param_grad[0].data, in));
    if (cf->bias && call->param_grad && BT_OPS_WANTS(&call->param_grad[1]))
        BT_K_TRY(bt_k_colsum_acc, x->stream, dt, dy, call->param_grad[1].data, rows, out);
    return BT_OK;
}

/* ---- add, mul ------------------------------------------------------------------------------- */

static bt_status add_forward(const bt_op_call *call)
{
    bt_cuda_exec *x;
    BT_TRY(begin("add", call->out->dtype, &x));
    BT_K_TRY(bt_k_add, x->stream, call->out->dtype, call->in[0].data, call->in[1].data,
             call->out->data, bt_tensor_numel(call->out));
    return BT_OK;
}

static bt_status add_backward(const bt_op_call *call)
{
    const bt_dtype dt = call->out_grad->dtype;
    bt_cuda_exec *x;
    BT_TRY(begin("add", dt, &x));
    const int64_t n = bt_tensor_numel(call->out_grad);
    for (int k = 0; k < 2; k++)
        if (BT_OPS_WANTS(&call->in_grad[k]))
            BT_K_TRY(bt_k_acc, x->stream, dt, call->out_grad->data, call->in_grad[k].data, n);
    return BT_OK;
}

static bt_status mul_forward(const bt_op_call *call)
{
    bt_cuda_exec *x;
    BT_TRY(begin("mul", call->out->dtype, &x));
    BT_K_TRY(bt_k_mul, x->stream, call->out->dtype, call->in[0].data, call->in[1].data,
             call->out->data, bt_tensor_numel(call->out));
    return BT_OK;
}

static bt_status mul_backward(const bt_op_call *call)
{
    const bt_dtype dt = call->out_grad->dtype;
    bt_cuda_exec *x;
    BT_TRY(begin("mul", dt, &x));
    const int64_t n = bt_tensor_numel(call->out_grad);
    for (int k = 0; k < 2; k++) /* d(a b)/da = b, d(a b)/db = a */
        if (BT_OPS_WANTS(&call->in_grad[k]))
            BT_K_TRY(bt_k_acc_mul, x->stream, dt, call->out_grad->data, call->in[1 - k].data,
                     call->in_grad[k].data, n);
    return BT_OK;
}

/* ---- activations ---------------------------------------------------------------------------- */

static bt_status act_forward(const bt_op_call *call, const char *op, bt_k_activation f)
{
    bt_cuda_exec *x;
    BT_TRY(begin(op, call->out->dtype, &x));
    BT_K_TRY(bt_k_activation_forward, x->stream, call->out->dtype, f, call->in[0].data,
             call->out->data, bt_tensor_numel(call->out));
    return BT_OK;
}

static bt_status act_backward(const bt_op_call *call, const char *op, bt_k_activation f)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    bt_cuda_exec *x;
    BT_TRY(begin(op, call->out_grad->dtype, &x));
    BT_K_TRY(bt_k_activation_backward, x->stream, call->out_grad->dtype, f, call->in[0].data,
             call->out_grad->data, call->in_grad[0].data, bt_tensor_numel(call->out_grad));
    return BT_OK;
}

#define ACTIVATION_KERNELS(op, kind)                                                            \
    static bt_status op##_forward(const bt_op_call *call) { return act_forward(call, #op, kind); } \
    static bt_status op##_backward(const bt_op_call *call)                                      \
    {                                                                                           \
        return act_backward(call, #op, kind);                                                   \
    }

ACTIVATION_KERNELS(relu, BT_K_RELU)
ACTIVATION_KERNELS(gelu, BT_K_GELU)
ACTIVATION_KERNELS(tanh, BT_K_TANH)
ACTIVATION_KERNELS(sigmoid, BT_K_SIGMOID)

/* ---- softmax, layernorm: rows of d over the last dimension --------------------------------- */

static bt_status softmax_forward(const bt_op_call *call)
{
    const int64_t d = ((const bt_softmax_config *)call->config)->d;
    bt_cuda_exec *x;
    BT_TRY(begin("softmax", call->out->dtype, &x));
    BT_K_TRY(bt_k_softmax_forward, x->stream, call->out->dtype, call->in[0].data, call->out->data,
             bt_tensor_numel(call->out) / d, d);
    return BT_OK;
}

static bt_status softmax_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const int64_t d = ((const bt_softmax_config *)call->config)->d;
    bt_cuda_exec *x;
    BT_TRY(begin("softmax", call->out_grad->dtype, &x));
    BT_K_TRY(bt_k_softmax_backward, x->stream, call->out_grad->dtype, call->in[0].data,
             call->out_grad->data, call->in_grad[0].data, bt_tensor_numel(call->out_grad) / d, d);
    return BT_OK;
}

static bt_status layernorm_forward(const bt_op_call *call)
{
    const bt_layernorm_config *cf = call->config;
    bt_cuda_exec *x;
    BT_TRY(begin("layernorm", call->out->dtype, &x));
    BT_K_TRY(bt_k_layernorm_forward, x->stream, call->out->dtype, call->in[0].data,
             call->param[0].data, call->param[1].data, call->out->data, (double *)call->saved,
             bt_tensor_numel(call->out) / cf->d, cf->d, cf->eps);
    return BT_OK;
}

static bt_status layernorm_backward(const bt_op_call *call)
{
    const bt_layernorm_config *cf = call->config;
    bt_cuda_exec *x;
    BT_TRY(begin("layernorm", call->out_grad->dtype, &x));
    void *dx = BT_OPS_WANTS(&call->in_grad[0]) ? call->in_grad[0].data : NULL;
    void *dw = call->param_grad && BT_OPS_WANTS(&call->param_grad[0]) ? call->param_grad[0].data
                                                                       : NULL;
    void *db = call->param_grad && BT_OPS_WANTS(&call->param_grad[1]) ? call->param_grad[1].data
                                                                       : NULL;
    if (!dx && !dw && !db) return BT_OK;
    if (!call->saved)
        return bt_op_error(BT_ERR_INTERNAL,
                           "layernorm: backward without the forward's saved statistics");
    BT_K_TRY(bt_k_layernorm_backward, x->stream, call->out_grad->dtype, call->in[0].data,
             call->param[0].data, call->out_grad->data, (const double *)call->saved, dx, dw, db,
             bt_tensor_numel(call->out_grad) / cf->d, cf->d);
    return BT_OK;
}

/* ---- flatten, reshape: the forward copies (any dtype), the backward adds --------------------- */

static bt_status copy_forward(const bt_op_call *call)
{
    bt_cuda_exec *x = current_exec;
    if (!x)
        return bt_op_error(BT_ERR_INTERNAL,
                           "flatten/reshape: a built-in CUDA kernel was called outside the "
                           "CUDA backend's run_op");
    return copy_on_stream(x, call->out->data, call->in[0].data,
                          (size_t)bt_tensor_numel(call->out) * bt_dtype_size(call->out->dtype));
}

static bt_status copy_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    bt_cuda_exec *x;
    BT_TRY(begin("reshape", call->out_grad->dtype, &x));
    BT_K_TRY(bt_k_acc, x->stream, call->out_grad->dtype, call->out_grad->data,
             call->in_grad[0].data, bt_tensor_numel(call->out_grad));
    return BT_OK;
}

/* ---- conv2d --------------------------------------------------------------------------------- */

static bt_k_window conv_window(const bt_conv_config *cf)
{
    return (bt_k_window){.h = cf->h, .w = cf->w, .ho = cf->ho, .wo = cf->wo, .kh = cf->kh,
                         .kw = cf->kw, .sh = cf->sh, .sw = cf->sw, .ph = cf->ph, .pw = cf->pw};
}

#ifdef BATON_HAVE_CUDNN
/* cuDNN runs f32 convolutions (f64 takes the GEMM path) with FMA math only (no TF32), choosing
 * by cuDNN's heuristics the first algorithm whose workspace fits the one the shape rule declared.
 * Where none fits, or a size exceeds cuDNN's int range, the GEMM path runs instead: the
 * conv_cudnn_* functions set *done to 0 before queueing anything.
 *
 * Under mixed precision the executor has rounded activations, gradients and weights to bf16 or
 * f16, and tensor cores may take them. f16: CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, which converts
 * the f32 tensors to f16 (exact for f16 values). bf16: CUDNN_TENSOR_OP_MATH, TF32 tensor cores on
 * sm_80 and later, whose 8-bit exponent and 10-bit fraction hold every bf16 value exactly; the
 * conversion mode is not allowed there, as its f16 would overflow or flush bf16's range. */

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
static int cudnn_applicable(const bt_cuda_exec *x, bt_dtype dt, const bt_conv_config *cf,
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
        if (perf[i].status != CUDNN_STATUS_SUCCESS || !conv_math_ok(perf[i].mathType, prec))
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
        if (perf[i].status != CUDNN_STATUS_SUCCESS || !conv_math_ok(perf[i].mathType, prec))
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
        if (perf[i].status != CUDNN_STATUS_SUCCESS || !conv_math_ok(perf[i].mathType, prec))
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

static bt_status conv_cudnn_forward(bt_cuda_exec *x, const bt_op_call *call, int *done)
{
    const bt_conv_config *cf = call->config;
    const size_t ws = bt_conv_workspace_bytes(cf);
    const float one = 1, beta = cf->bias ? 1.0f : 0.0f;
    cudnnHandle_t h = x->cudnn;
    cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    cudnnMathType_t math = CUDNN_FMA_MATH;
    conv_descs d;
    int found = 0;
    *done = 0;
    BT_TRY(conv_descs_create(cf, call->batch, call->precision, &d));
    bt_status st = pick_forward(h, &d, call->precision, ws, &found, &algo, &math);
    if (st != BT_OK || !found) goto out;
    BT_CUDNN_TRY_GOTO(st, cudnnSetConvolutionMathType(d.conv, math), out);
    if (cf->bias)
        BT_TRY_GOTO(st,
                    BT_K_CHECK(bt_k_fill_planes, x->stream, BT_F32, call->param[1].data,
                               call->out->data, call->batch * cf->out, cf->out, cf->ho * cf->wo),
                    out);
    BT_CUDNN_TRY_GOTO(st,
                      cudnnConvolutionForward(h, &one, d.x, call->in[0].data, d.w,
                                              call->param[0].data, d.conv, algo,
                                              ws ? call->workspace : NULL, ws, &beta, d.y,
                                              call->out->data),
                      out);
    x->cudnn_convs++;
    *done = 1;
out:
    conv_descs_destroy(&d);
    return st;
}

static bt_status conv_cudnn_backward(bt_cuda_exec *x, const bt_op_call *call, void *dx, void *dw,
                                     void *db, int *done)
{
    const bt_conv_config *cf = call->config;
    const size_t ws = bt_conv_workspace_bytes(cf);
    void *work = ws ? call->workspace : NULL;
    const float one = 1;
    cudnnHandle_t h = x->cudnn;
    cudnnConvolutionBwdDataAlgo_t data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
    cudnnConvolutionBwdFilterAlgo_t filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
    cudnnMathType_t data_math = CUDNN_FMA_MATH, filter_math = CUDNN_FMA_MATH;
    const bt_dtype prec = call->precision;
    conv_descs d;
    int data_found = 1, filter_found = 1;
    *done = 0;
    BT_TRY(conv_descs_create(cf, call->batch, prec, &d));
    bt_status st = BT_OK;
    if (dx)
        BT_TRY_GOTO(st,
                    pick_backward_data(h, &d, prec, cf, ws, &data_found, &data_algo, &data_math),
                    out);
    if (dw)
        BT_TRY_GOTO(st,
                    pick_backward_filter(h, &d, prec, ws, &filter_found, &filter_algo,
                                         &filter_math),
                    out);
    if (!data_found || !filter_found) goto out;
    if (db)
        BT_TRY_GOTO(st,
                    BT_K_CHECK(bt_k_channel_sum_acc, x->stream, BT_F32, call->out_grad->data, db,
                               call->batch, cf->out, cf->ho * cf->wo),
                    out);
    if (dw) {
        BT_CUDNN_TRY_GOTO(st, cudnnSetConvolutionMathType(d.conv, filter_math), out);
        BT_CUDNN_TRY_GOTO(st,
                          cudnnConvolutionBackwardFilter(h, &one, d.x, call->in[0].data, d.y,
                                                         call->out_grad->data, d.conv,
                                                         filter_algo, work, ws, &one, d.w, dw),
                          out);
    }
    if (dx) {
        BT_CUDNN_TRY_GOTO(st, cudnnSetConvolutionMathType(d.conv, data_math), out);
        BT_CUDNN_TRY_GOTO(st,
                          cudnnConvolutionBackwardData(h, &one, d.w, call->param[0].data, d.y,
                                                       call->out_grad->data, d.conv, data_algo,
                                                       work, ws, &one, d.x, dx),
                          out);
    }
    x->cudnn_convs++;
    *done = 1;
out:
    conv_descs_destroy(&d);
    return st;
}
#endif /* BATON_HAVE_CUDNN */

/* The GEMM path, one sample at a time as src/ops/conv_tmpl.h: im2col into the workspace, then
 * y_n (out, ho wo) = W (out, c kh kw) col (c kh kw, ho wo). A pointwise conv uses x_n as col. */
static bt_status conv_gemm_forward(bt_cuda_exec *x, const bt_op_call *call, bt_dtype dt)
{
    const bt_conv_config *cf = call->config;
    const bt_k_window win = conv_window(cf);
    const int64_t chw = cf->c * cf->h * cf->w, howo = cf->ho * cf->wo;
    const int64_t ckk = cf->c * cf->kh * cf->kw;
    BT_TRY(fits_int("conv2d", howo, cf->out, ckk));
    const void *b = cf->bias ? call->param[1].data : NULL;
    if (b)
        BT_K_TRY(bt_k_fill_planes, x->stream, dt, b, call->out->data, call->batch * cf->out,
                 cf->out, howo);
    for (int64_t n = 0; n < call->batch; n++) {
        const void *xn = at(call->in[0].data, n * chw, dt);
        void *yn = at(call->out->data, n * cf->out * howo, dt);
        const void *col = xn;
        if (!cf->pointwise) {
            BT_K_TRY(bt_k_im2col, x->stream, dt, &win, cf->c, xn, call->workspace);
            col = call->workspace;
        }
        /* y_n^T (ho wo, out) = col^T W^T: col is column-major (ho wo, c kh kw), W^T
         * column-major (c kh kw, out) */
        BT_TRY(gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_N, (int)howo, (int)cf->out,
                    (int)ckk, col, (int)howo, call->param[0].data, (int)ckk, b ? 1.0 : 0.0, yn,
                    (int)howo));
    }
    return BT_OK;
}

static bt_status conv_gemm_backward(bt_cuda_exec *x, const bt_op_call *call, bt_dtype dt,
                                    void *dx, void *dw, void *db)
{
    const bt_conv_config *cf = call->config;
    const bt_k_window win = conv_window(cf);
    const int64_t chw = cf->c * cf->h * cf->w, howo = cf->ho * cf->wo;
    const int64_t ckk = cf->c * cf->kh * cf->kw;
    BT_TRY(fits_int("conv2d", howo, cf->out, ckk));
    void *col = call->workspace;                                     /* (c kh kw, ho wo) */
    void *dcol = cf->pointwise ? NULL : at(call->workspace, ckk * howo, dt); /* likewise */
    if (db)
        BT_K_TRY(bt_k_channel_sum_acc, x->stream, dt, call->out_grad->data, db, call->batch,
                 cf->out, howo);
    for (int64_t n = 0; n < call->batch; n++) {
        const void *xn = at(call->in[0].data, n * chw, dt);
        const void *dyn = at(call->out_grad->data, n * cf->out * howo, dt);
        if (dw) { /* dW^T (c kh kw, out) += col dy_n^T */
            const void *cn = xn;
            if (!cf->pointwise) {
                BT_K_TRY(bt_k_im2col, x->stream, dt, &win, cf->c, xn, col);
                cn = col;
            }
            BT_TRY(gemm(x, dt, call->precision, CUBLAS_OP_T, CUBLAS_OP_N, (int)ckk, (int)cf->out,
                        (int)howo, cn, (int)howo, dyn, (int)howo, 1.0, dw, (int)ckk));
        }
        if (dx) { /* dcol^T (ho wo, c kh kw) = dy_n^T W, folded back into dx_n */
            void *dxn = at(dx, n * chw, dt);
            if (cf->pointwise) {
                BT_TRY(gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_T, (int)howo, (int)ckk,
                            (int)cf->out, dyn, (int)howo, call->param[0].data, (int)ckk, 1.0,
                            dxn, (int)howo));
            } else {
                BT_TRY(gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_T, (int)howo, (int)ckk,
                            (int)cf->out, dyn, (int)howo, call->param[0].data, (int)ckk, 0.0,
                            dcol, (int)howo));
                BT_K_TRY(bt_k_col2im_acc, x->stream, dt, &win, cf->c, dcol, dxn);
            }
        }
    }
    return BT_OK;
}

static bt_status conv2d_forward(const bt_op_call *call)
{
    const bt_dtype dt = call->out->dtype;
    bt_cuda_exec *x;
    BT_TRY(begin("conv2d", dt, &x));
    if (call->batch == 0) return BT_OK;
#ifdef BATON_HAVE_CUDNN
    if (cudnn_applicable(x, dt, call->config, call->batch)) {
        int done = 0;
        BT_TRY(conv_cudnn_forward(x, call, &done));
        if (done) return BT_OK;
    }
#endif
    return conv_gemm_forward(x, call, dt);
}

static bt_status conv2d_backward(const bt_op_call *call)
{
    const bt_conv_config *cf = call->config;
    const bt_dtype dt = call->out_grad->dtype;
    bt_cuda_exec *x;
    BT_TRY(begin("conv2d", dt, &x));
    void *dx = BT_OPS_WANTS(&call->in_grad[0]) ? call->in_grad[0].data : NULL;
    void *dw = call->param_grad && BT_OPS_WANTS(&call->param_grad[0]) ? call->param_grad[0].data
                                                                       : NULL;
    void *db = cf->bias && call->param_grad && BT_OPS_WANTS(&call->param_grad[1])
                   ? call->param_grad[1].data
                   : NULL;
    if (call->batch == 0 || (!dx && !dw && !db)) return BT_OK;
#ifdef BATON_HAVE_CUDNN
    if (cudnn_applicable(x, dt, cf, call->batch)) {
        int done = 0;
        BT_TRY(conv_cudnn_backward(x, call, dx, dw, db, &done));
        if (done) return BT_OK;
    }
#endif
    return conv_gemm_backward(x, call, dt, dx, dw, db);
}

/* ---- maxpool2d, avgpool2d ------------------------------------------------------------------- */

static bt_k_window pool_window(const bt_pool_config *cf)
{
    return (bt_k_window){.h = cf->h, .w = cf->w, .ho = cf->ho, .wo = cf->wo, .kh = cf->kh,
                         .kw = cf->kw, .sh = cf->sh, .sw = cf->sw, .ph = cf->ph, .pw = cf->pw};
}

static bt_status maxpool2d_forward(const bt_op_call *call)
{
    const bt_pool_config *cf = call->config;
    const bt_k_window win = pool_window(cf);
    bt_cuda_exec *x;
    BT_TRY(begin("maxpool2d", call->out->dtype, &x));
    BT_K_TRY(bt_k_maxpool_forward, x->stream, call->out->dtype, &win, call->batch * cf->c,
             call->in[0].data, call->out->data, (int32_t *)call->saved);
    return BT_OK;
}

static bt_status maxpool2d_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_pool_config *cf = call->config;
    const bt_k_window win = pool_window(cf);
    bt_cuda_exec *x;
    BT_TRY(begin("maxpool2d", call->out_grad->dtype, &x));
    if (!call->saved)
        return bt_op_error(BT_ERR_INTERNAL, "maxpool2d: backward without the forward's argmax");
    BT_K_TRY(bt_k_maxpool_backward, x->stream, call->out_grad->dtype, &win, call->batch * cf->c,
             call->out_grad->data, (const int32_t *)call->saved, call->in_grad[0].data);
    return BT_OK;
}

static bt_status avgpool2d_forward(const bt_op_call *call)
{
    const bt_pool_config *cf = call->config;
    const bt_k_window win = pool_window(cf);
    bt_cuda_exec *x;
    BT_TRY(begin("avgpool2d", call->out->dtype, &x));
    BT_K_TRY(bt_k_avgpool_forward, x->stream, call->out->dtype, &win, call->batch * cf->c,
             call->in[0].data, call->out->data);
    return BT_OK;
}

static bt_status avgpool2d_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_pool_config *cf = call->config;
    const bt_k_window win = pool_window(cf);
    bt_cuda_exec *x;
    BT_TRY(begin("avgpool2d", call->out_grad->dtype, &x));
    BT_K_TRY(bt_k_avgpool_backward, x->stream, call->out_grad->dtype, &win, call->batch * cf->c,
             call->out_grad->data, call->in_grad[0].data);
    return BT_OK;
}

/* ---- embedding ------------------------------------------------------------------------------ */

static bt_status embedding_forward(const bt_op_call *call)
{
    const bt_embedding_config *cf = call->config;
    bt_cuda_exec *x;
    BT_TRY(begin("embedding", call->out->dtype, &x));
    x->fault_armed = 1;
    BT_K_TRY(bt_k_embedding_forward, x->stream, call->out->dtype, call->in[0].data,
             call->param[0].data, call->out->data, bt_tensor_numel(&call->in[0]), cf->num,
             cf->dim, x->fault);
    return BT_OK;
}

static bt_status embedding_backward(const bt_op_call *call)
{
    if (!call->param_grad || !BT_OPS_WANTS(&call->param_grad[0])) return BT_OK;
    const bt_embedding_config *cf = call->config;
    bt_cuda_exec *x;
    BT_TRY(begin("embedding", call->out_grad->dtype, &x));
    x->fault_armed = 1;
    BT_K_TRY(bt_k_embedding_backward, x->stream, call->out_grad->dtype, call->in[0].data,
             call->out_grad->data, call->param_grad[0].data, bt_tensor_numel(&call->in[0]),
             cf->num, cf->dim, x->fault);
    return BT_OK;
}

/* ---- dropout -------------------------------------------------------------------------------- */

static bt_status dropout_forward(const bt_op_call *call)
{
    const double p = ((const bt_dropout_config *)call->config)->p;
    const bt_dtype dt = call->out->dtype;
    const int64_t n = bt_tensor_numel(call->out);
    bt_cuda_exec *x;
    BT_TRY(begin("dropout", dt, &x));
    if (!call->training || p == 0)
        return copy_on_stream(x, call->out->data, call->in[0].data, (size_t)n * esize(dt));
    if (!call->saved)
        return bt_op_error(BT_ERR_INTERNAL, "dropout: training forward without a saved buffer");
    const uint32_t threshold = (uint32_t)(p * 4294967296.0); /* p < 1, so < 2^32 */
    BT_K_TRY(bt_k_dropout_forward, x->stream, dt, call->in[0].data, call->saved, call->out->data,
             n, call->seed, threshold, 1.0 / (1.0 - p));
    return BT_OK;
}

static bt_status dropout_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const double p = ((const bt_dropout_config *)call->config)->p;
    const bt_dtype dt = call->out_grad->dtype;
    const int64_t n = bt_tensor_numel(call->out_grad);
    bt_cuda_exec *x;
    BT_TRY(begin("dropout", dt, &x));
    if (!call->training || p == 0) {
        BT_K_TRY(bt_k_acc, x->stream, dt, call->out_grad->data, call->in_grad[0].data, n);
        return BT_OK;
    }
    if (!call->saved)
        return bt_op_error(BT_ERR_INTERNAL, "dropout: training backward without the mask");
    BT_K_TRY(bt_k_dropout_backward, x->stream, dt, call->out_grad->data, call->saved,
             call->in_grad[0].data, n, 1.0 / (1.0 - p));
    return BT_OK;
}

/* ---- losses --------------------------------------------------------------------------------- */

static bt_status mse_forward(const bt_op_call *call)
{
    const int64_t per = call->batch ? bt_tensor_numel(&call->in[0]) / call->batch : 0;
    bt_cuda_exec *x;
    BT_TRY(begin("mse", call->out->dtype, &x));
    BT_K_TRY(bt_k_mse_forward, x->stream, call->out->dtype, call->in[0].data, call->in[1].data,
             call->out->data, call->batch, per);
    return BT_OK;
}

static bt_status mse_backward(const bt_op_call *call)
{
    const int64_t per = call->batch ? bt_tensor_numel(&call->in[0]) / call->batch : 0;
    bt_cuda_exec *x;
    BT_TRY(begin("mse", call->out_grad->dtype, &x));
    for (int k = 0; k < 2; k++)
        if (BT_OPS_WANTS(&call->in_grad[k]))
            BT_K_TRY(bt_k_mse_backward, x->stream, call->out_grad->dtype, call->in[0].data,
                     call->in[1].data, call->out_grad->data, call->in_grad[k].data,
                     k == 0 ? 1.0 : -1.0, call->batch, per);
    return BT_OK;
}

static bt_status cross_entropy_forward(const bt_op_call *call)
{
    const bt_cross_entropy_config *cf = call->config;
    bt_cuda_exec *x;
    BT_TRY(begin("cross_entropy", call->out->dtype, &x));
    x->fault_armed = 1;
    BT_K_TRY(bt_k_cross_entropy_forward, x->stream, call->out->dtype, call->in[0].data,
             call->in[1].data, call->out->data, call->batch, cf->positions, cf->classes,
             x->fault);
    return BT_OK;
}

static bt_status cross_entropy_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_cross_entropy_config *cf = call->config;
    bt_cuda_exec *x;
    BT_TRY(begin("cross_entropy", call->out_grad->dtype, &x));
    x->fault_armed = 1;
    BT_K_TRY(bt_k_cross_entropy_backward, x->stream, call->out_grad->dtype, call->in[0].data,
             call->in[1].data, call->out_grad->data, call->in_grad[0].data, call->batch,
             cf->positions, cf->classes, x->fault);
    return BT_OK;
}

/* ---- attaching ------------------------------------------------------------------------------ */

typedef struct cuda_kernels {
    const char *op;
    bt_op_fn forward, backward;
} cuda_kernels;

static const cuda_kernels builtin_cuda_kernels[] = {
    {"linear", linear_forward, linear_backward},
    {"add", add_forward, add_backward},
    {"mul", mul_forward, mul_backward},
    {"relu", relu_forward, relu_backward},
    {"gelu", gelu_forward, gelu_backward},
    {"tanh", tanh_forward, tanh_backward},
    {"sigmoid", sigmoid_forward, sigmoid_backward},
    {"softmax", softmax_forward, softmax_backward},
    {"layernorm", layernorm_forward, layernorm_backward},
    {"flatten", copy_forward, copy_backward},
    {"reshape", copy_forward, copy_backward},
    {"conv2d", conv2d_forward, conv2d_backward},
    {"maxpool2d", maxpool2d_forward, maxpool2d_backward},
    {"avgpool2d", avgpool2d_forward, avgpool2d_backward},
    {"embedding", embedding_forward, embedding_backward},
    {"dropout", dropout_forward, dropout_backward},
    {"mse", mse_forward, mse_backward},
    {"cross_entropy", cross_entropy_forward, cross_entropy_backward},
};

static pthread_once_t attach_once = PTHREAD_ONCE_INIT;
static bt_status attach_status;
static char attach_message[512];

static void attach_all(void)
{
    const int n = (int)(sizeof builtin_cuda_kernels / sizeof builtin_cuda_kernels[0]);
    for (int i = 0; i < n; i++) {
        const cuda_kernels *k = &builtin_cuda_kernels[i];
        bt_status st = bt_op_registry_set_cuda(k->op, k->forward, k->backward);
        if (st != BT_OK) {
            attach_status = st;
            snprintf(attach_message, sizeof attach_message, "%s", bt_last_error());
            return;
        }
    }
}

bt_status bt_cuda_attach_kernels(void)
{
    pthread_once(&attach_once, attach_all);
    if (attach_status != BT_OK)
        return bt_error(attach_status, "attaching the CUDA kernels: %s", attach_message);
    return BT_OK;
}
