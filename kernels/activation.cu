/* kernels/activation.cu: relu, gelu (exact, with erf, or its tanh approximation), tanh, sigmoid
 * and silu, elementwise, and swiglu (silu(gate) * up on rows of [gate | up]). The formulas and
 * their order of operations are those of src/ops/activation_tmpl.h; the backward recomputes f'(x)
 * from x, as the CPU kernels do. bt_k_relu_mask is the backward of the relu fused into linear and
 * conv2d (from the output, in place). */
#include "kernel_util.cuh"

#include "cuda/op_glue.h"

#define BT_K_SQRT1_2 0.70710678118654752440     /* 1/sqrt(2) */
#define BT_K_INV_SQRT_2PI 0.39894228040143267794 /* 1/sqrt(2 pi) */
#define BT_K_SQRT_2_PI 0.79788456080286535588    /* sqrt(2/pi) */
#define BT_K_GELU_CUBIC 0.044715                 /* the tanh form's cubic coefficient */

template <typename T>
__device__ __forceinline__ T act_value(int f, T x)
{
    switch (f) {
    case BT_K_RELU: return x > 0 ? x : (T)0;
    case BT_K_GELU: return (T)0.5 * x * (1 + bt_k_erf(x * (T)BT_K_SQRT1_2));
    case BT_K_TANH: return bt_k_tanh(x);
    case BT_K_SILU: return x * (1 / (1 + bt_k_exp(-x)));
    case BT_K_GELU_TANH: { /* 0.5 x (1 + tanh(u)) = x sigmoid(2u) */
        const T u2 = (T)(2 * BT_K_SQRT_2_PI) * (x + (T)BT_K_GELU_CUBIC * x * x * x);
        return x / (1 + bt_k_exp(-u2));
    }
    default: return 1 / (1 + bt_k_exp(-x)); /* BT_K_SIGMOID */
    }
}

/* dy * f'(x) */
template <typename T>
__device__ __forceinline__ T act_grad(int f, T x, T dy)
{
    switch (f) {
    case BT_K_RELU: return x > 0 ? dy : (T)0;
    case BT_K_GELU: {
        const T cdf = (T)0.5 * (1 + bt_k_erf(x * (T)BT_K_SQRT1_2));
        const T pdf = (T)BT_K_INV_SQRT_2PI * bt_k_exp((T)-0.5 * x * x);
        return dy * (cdf + x * pdf);
    }
    case BT_K_TANH: {
        const T t = bt_k_tanh(x);
        return dy * (1 - t * t);
    }
    case BT_K_SILU: { /* d/dx [x s(x)] = s (1 + x (1 - s)) */
        const T sg = 1 / (1 + bt_k_exp(-x));
        return dy * (sg * (1 + x * (1 - sg)));
    }
    case BT_K_GELU_TANH: { /* s + x s (1 - s) 2 u'(x), s = sigmoid(2u) */
        const T x2 = x * x;
        const T u2 = (T)(2 * BT_K_SQRT_2_PI) * (x + (T)BT_K_GELU_CUBIC * x2 * x);
        const T sg = 1 / (1 + bt_k_exp(-u2));
        const T du2 = (T)(2 * BT_K_SQRT_2_PI) * (1 + (T)(3 * BT_K_GELU_CUBIC) * x2);
        return dy * (sg + x * sg * (1 - sg) * du2);
    }
    default: { /* BT_K_SIGMOID */
        const T sg = 1 / (1 + bt_k_exp(-x));
        return dy * sg * (1 - sg);
    }
    }
}

template <typename T>
__global__ void k_act_forward(int f, const T *x, T *y, int64_t n)
{
    BT_K_FOR(i, n) y[i] = act_value(f, x[i]);
}

template <typename T>
__global__ void k_act_backward(int f, const T *x, const T *dy, T *dx, int64_t n)
{
    BT_K_FOR(i, n) dx[i] += act_grad(f, x[i], dy[i]);
}

static int known(bt_k_activation f)
{
    return f == BT_K_RELU || f == BT_K_GELU || f == BT_K_TANH || f == BT_K_SIGMOID ||
           f == BT_K_SILU || f == BT_K_GELU_TANH;
}

extern "C" cudaError_t bt_k_activation_forward(cudaStream_t s, bt_dtype dt, bt_k_activation f,
                                               const void *x, void *y, int64_t n)
{
    if (!known(f)) return cudaErrorInvalidValue;
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_act_forward<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          (int)f, (const T *)x, (T *)y, n););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_activation_backward(cudaStream_t s, bt_dtype dt, bt_k_activation f,
                                                const void *x, const void *dy, void *dx,
                                                int64_t n)
{
    if (!known(f)) return cudaErrorInvalidValue;
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_act_backward<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          (int)f, (const T *)x, (const T *)dy, (T *)dx, n););
    return cudaGetLastError();
}

template <typename T>
__global__ void k_relu_mask(const T *y, T *g, int64_t n)
{
    BT_K_FOR(i, n) g[i] = (T)0 + (y[i] > 0 ? g[i] : (T)0);
}

extern "C" cudaError_t bt_k_relu_mask(cudaStream_t s, bt_dtype dt, const void *y, void *g,
                                      int64_t n)
{
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_relu_mask<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>((const T *)y, (T *)g,
                                                                             n););
    return cudaGetLastError();
}

/* ---- swiglu: y (rows, half) = silu(g) * u, x (rows, 2 half) = [g | u] per row ----------------- */

template <typename T>
__global__ void k_swiglu_forward(const T *x, T *y, int64_t rows, int64_t half)
{
    BT_K_FOR(e, rows * half) {
        const int64_t r = e / half, i = e % half;
        const T g = x[2 * r * half + i], u = x[(2 * r + 1) * half + i];
        y[e] = g * (1 / (1 + bt_k_exp(-g))) * u;
    }
}

/* dg += dy u s (1 + g (1 - s)), du += dy silu(g) */
template <typename T>
__global__ void k_swiglu_backward(const T *x, const T *dy, T *dx, int64_t rows, int64_t half)
{
    BT_K_FOR(e, rows * half) {
        const int64_t r = e / half, i = e % half;
        const int64_t a = 2 * r * half + i, b = a + half;
        const T g = x[a], u = x[b], s = 1 / (1 + bt_k_exp(-g));
        dx[a] += dy[e] * u * (s * (1 + g * (1 - s)));
        dx[b] += dy[e] * (g * s);
    }
}

static cudaError_t swiglu_forward(cudaStream_t s, bt_dtype dt, const void *x, void *y, int64_t rows,
                                  int64_t half)
{
    if (rows * half <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_swiglu_forward<T><<<bt_k_blocks(rows * half), BT_K_THREADS, 0, s>>>(
                          (const T *)x, (T *)y, rows, half););
    return cudaGetLastError();
}

static cudaError_t swiglu_backward(cudaStream_t s, bt_dtype dt, const void *x, const void *dy,
                                   void *dx, int64_t rows, int64_t half)
{
    if (rows * half <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_swiglu_backward<T><<<bt_k_blocks(rows * half), BT_K_THREADS, 0, s>>>(
                          (const T *)x, (const T *)dy, (T *)dx, rows, half););
    return cudaGetLastError();
}

/* ---- glue: the ops' CUDA forward and backward (bt_op_call -> launchers), C linkage ---------- */

static bt_status act_forward(const bt_op_call *call, const char *op, bt_k_activation f)
{
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, op, call->out->dtype, &x));
    BT_K_TRY(bt_k_activation_forward, x->stream, call->out->dtype, f, call->in[0].data,
             call->out->data, bt_tensor_numel(call->out));
    return BT_OK;
}

static bt_status act_backward(const bt_op_call *call, const char *op, bt_k_activation f)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, op, call->out_grad->dtype, &x));
    BT_K_TRY(bt_k_activation_backward, x->stream, call->out_grad->dtype, f, call->in[0].data,
             call->out_grad->data, call->in_grad[0].data, bt_tensor_numel(call->out_grad));
    return BT_OK;
}

#define ACTIVATION_KERNELS(op, kind)                                \
    extern "C" bt_status bt_cuda_##op##_forward(const bt_op_call *call)  \
    {                                                               \
        return act_forward(call, #op, kind);                        \
    }                                                               \
    extern "C" bt_status bt_cuda_##op##_backward(const bt_op_call *call) \
    {                                                               \
        return act_backward(call, #op, kind);                       \
    }

ACTIVATION_KERNELS(relu, BT_K_RELU)
ACTIVATION_KERNELS(tanh, BT_K_TANH)
ACTIVATION_KERNELS(sigmoid, BT_K_SIGMOID)
ACTIVATION_KERNELS(silu, BT_K_SILU)

/* gelu: the form its config names (erf, or tanh) */
static bt_k_activation gelu_kind(const bt_op_call *call)
{
    const bt_gelu_config *cf = (const bt_gelu_config *)call->config;
    return cf->approx == BT_OPS_GELU_TANH ? BT_K_GELU_TANH : BT_K_GELU;
}

extern "C" bt_status bt_cuda_gelu_forward(const bt_op_call *call)
{
    return act_forward(call, "gelu", gelu_kind(call));
}

extern "C" bt_status bt_cuda_gelu_backward(const bt_op_call *call)
{
    return act_backward(call, "gelu", gelu_kind(call));
}

/* swiglu counts its rows from the call's tensors, as the CPU kernels do (a decoding call's one) */
extern "C" bt_status bt_cuda_swiglu_forward(const bt_op_call *call)
{
    const int64_t half = ((const bt_swiglu_config *)call->config)->half;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "swiglu", call->out->dtype, &x));
    BT_K_TRY(swiglu_forward, x->stream, call->out->dtype, call->in[0].data, call->out->data,
             bt_tensor_numel(call->out) / half, half);
    return BT_OK;
}

extern "C" bt_status bt_cuda_swiglu_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const int64_t half = ((const bt_swiglu_config *)call->config)->half;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "swiglu", call->out_grad->dtype, &x));
    BT_K_TRY(swiglu_backward, x->stream, call->out_grad->dtype, call->in[0].data,
             call->out_grad->data, call->in_grad[0].data, bt_tensor_numel(call->out_grad) / half,
             half);
    return BT_OK;
}
