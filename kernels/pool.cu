/* kernels/pool.cu: maxpool2d and avgpool2d over planes of (h, w), with the semantics of
 * src/ops/pool_tmpl.h: windows are clipped to the input (padding is -inf for max, zeros for avg,
 * whose divisor is always kh kw); the max scans its window in row-major order, keeps the first
 * maximum and lets NaN win; its argmax (the index ih * w + iw within the plane, int32) is saved
 * for the backward. Forwards run one thread per output element; backwards one thread per input
 * element, gathering from the windows that cover it (no atomics, deterministic).
 *
 * These are plain kernels rather than cuDNN calls on purpose: pooling is memory-bound, and own
 * kernels keep the exact tie and NaN rules and the saved argmax layout of the CPU reference. */
#include "kernel_util.cuh"

#include "cuda/op_glue.h"

/* The input indices [*i0, *i1) that window position o covers along one axis (clipped). */
__device__ __forceinline__ void span(int64_t o, int64_t stride, int64_t pad, int64_t k,
                                     int64_t in, int64_t *i0, int64_t *i1)
{
    const int64_t start = o * stride - pad;
    *i0 = start < 0 ? 0 : start;
    *i1 = start + k > in ? in : start + k;
}

/* The window positions [*o0, *o1) whose window covers input index i along one axis:
 * o stride - pad <= i <= o stride - pad + k - 1. */
__device__ __forceinline__ void covering(int64_t i, int64_t stride, int64_t pad, int64_t k,
                                         int64_t out, int64_t *o0, int64_t *o1)
{
    const int64_t lo_num = i + pad - k + 1, hi_num = i + pad;
    *o0 = lo_num <= 0 ? 0 : (lo_num + stride - 1) / stride;
    *o1 = hi_num < 0 ? 0 : hi_num / stride + 1;
    if (*o1 > out) *o1 = out;
    if (*o0 > *o1) *o0 = *o1;
}

template <typename T>
__global__ void k_maxpool_forward(bt_k_window c, int64_t planes, const T *x, T *y, int32_t *arg)
{
    const int64_t howo = c.ho * c.wo;
    BT_K_FOR(i, planes * howo) {
        const int64_t pl = i / howo, rem = i - pl * howo;
        const int64_t oh = rem / c.wo, ow = rem - oh * c.wo;
        int64_t h0, h1, w0, w1;
        span(oh, c.sh, c.ph, c.kh, c.h, &h0, &h1);
        span(ow, c.sw, c.pw, c.kw, c.w, &w0, &w1);
        const T *xp = x + pl * c.h * c.w;
        T best = (T)-INFINITY;
        int64_t at = h0 * c.w + w0;
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) {
                const T v = xp[ih * c.w + iw];
                if (v > best || v != v) { /* NaN propagates, as in PyTorch */
                    best = v;
                    at = ih * c.w + iw;
                }
            }
        y[i] = best;
        if (arg) arg[i] = (int32_t)at;
    }
}

template <typename T>
__global__ void k_maxpool_backward(bt_k_window c, int64_t planes, const T *dy, const int32_t *arg,
                                   T *dx)
{
    const int64_t hw = c.h * c.w, howo = c.ho * c.wo;
    BT_K_FOR(i, planes * hw) {
        const int64_t pl = i / hw, idx = i - pl * hw;
        const int64_t ih = idx / c.w, iw = idx - ih * c.w;
        int64_t oh0, oh1, ow0, ow1;
        covering(ih, c.sh, c.ph, c.kh, c.ho, &oh0, &oh1);
        covering(iw, c.sw, c.pw, c.kw, c.wo, &ow0, &ow1);
        const T *dyp = dy + pl * howo;
        const int32_t *ap = arg + pl * howo;
        T sum = 0;
        int hits = 0;
        for (int64_t oh = oh0; oh < oh1; oh++)
            for (int64_t ow = ow0; ow < ow1; ow++)
                if (ap[oh * c.wo + ow] == idx) {
                    sum += dyp[oh * c.wo + ow];
                    hits = 1;
                }
        if (hits) dx[i] += sum;
    }
}

template <typename T>
__global__ void k_avgpool_forward(bt_k_window c, int64_t planes, const T *x, T *y)
{
    const int64_t howo = c.ho * c.wo;
    const T inv = (T)(1.0 / (double)(c.kh * c.kw));
    BT_K_FOR(i, planes * howo) {
        const int64_t pl = i / howo, rem = i - pl * howo;
        const int64_t oh = rem / c.wo, ow = rem - oh * c.wo;
        int64_t h0, h1, w0, w1;
        span(oh, c.sh, c.ph, c.kh, c.h, &h0, &h1);
        span(ow, c.sw, c.pw, c.kw, c.w, &w0, &w1);
        const T *xp = x + pl * c.h * c.w;
        T sum = 0;
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) sum += xp[ih * c.w + iw];
        y[i] = sum * inv;
    }
}

template <typename T>
__global__ void k_avgpool_backward(bt_k_window c, int64_t planes, const T *dy, T *dx)
{
    const int64_t hw = c.h * c.w, howo = c.ho * c.wo;
    const T inv = (T)(1.0 / (double)(c.kh * c.kw));
    BT_K_FOR(i, planes * hw) {
        const int64_t pl = i / hw, idx = i - pl * hw;
        const int64_t ih = idx / c.w, iw = idx - ih * c.w;
        int64_t oh0, oh1, ow0, ow1;
        covering(ih, c.sh, c.ph, c.kh, c.ho, &oh0, &oh1);
        covering(iw, c.sw, c.pw, c.kw, c.wo, &ow0, &ow1);
        const T *dyp = dy + pl * howo;
        T sum = 0;
        for (int64_t oh = oh0; oh < oh1; oh++)
            for (int64_t ow = ow0; ow < ow1; ow++) sum += dyp[oh * c.wo + ow] * inv;
        dx[i] += sum;
    }
}

extern "C" cudaError_t bt_k_maxpool_forward(cudaStream_t s, bt_dtype dt, const bt_k_window *win,
                                            int64_t planes, const void *x, void *y, int32_t *arg)
{
    const int64_t n = planes * win->ho * win->wo;
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_maxpool_forward<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          *win, planes, (const T *)x, (T *)y, arg););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_maxpool_backward(cudaStream_t s, bt_dtype dt, const bt_k_window *win,
                                             int64_t planes, const void *dy, const int32_t *arg,
                                             void *dx)
{
    const int64_t n = planes * win->h * win->w;
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_maxpool_backward<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          *win, planes, (const T *)dy, arg, (T *)dx););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_avgpool_forward(cudaStream_t s, bt_dtype dt, const bt_k_window *win,
                                            int64_t planes, const void *x, void *y)
{
    const int64_t n = planes * win->ho * win->wo;
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_avgpool_forward<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          *win, planes, (const T *)x, (T *)y););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_avgpool_backward(cudaStream_t s, bt_dtype dt, const bt_k_window *win,
                                             int64_t planes, const void *dy, void *dx)
{
    const int64_t n = planes * win->h * win->w;
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_avgpool_backward<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          *win, planes, (const T *)dy, (T *)dx););
    return cudaGetLastError();
}

/* ---- glue: the ops' CUDA forward and backward (bt_op_call -> launchers), C linkage ---------- */

static bt_k_window pool_window(const bt_pool_config *cf)
{
    const bt_k_window win = {cf->h, cf->w, cf->ho, cf->wo, cf->kh, cf->kw,
                             cf->sh, cf->sw, cf->ph, cf->pw};
    return win;
}

extern "C" bt_status bt_cuda_maxpool2d_forward(const bt_op_call *call)
{
    const bt_pool_config *cf = (const bt_pool_config *)call->config;
    const bt_k_window win = pool_window(cf);
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "maxpool2d", call->out->dtype, &x));
    BT_K_TRY(bt_k_maxpool_forward, x->stream, call->out->dtype, &win, call->batch * cf->c,
             call->in[0].data, call->out->data, (int32_t *)call->saved);
    return BT_OK;
}

extern "C" bt_status bt_cuda_maxpool2d_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_pool_config *cf = (const bt_pool_config *)call->config;
    const bt_k_window win = pool_window(cf);
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "maxpool2d", call->out_grad->dtype, &x));
    if (!call->saved)
        return bt_op_error(BT_ERR_INTERNAL, "maxpool2d: backward without the forward's argmax");
    BT_K_TRY(bt_k_maxpool_backward, x->stream, call->out_grad->dtype, &win, call->batch * cf->c,
             call->out_grad->data, (const int32_t *)call->saved, call->in_grad[0].data);
    return BT_OK;
}

extern "C" bt_status bt_cuda_avgpool2d_forward(const bt_op_call *call)
{
    const bt_pool_config *cf = (const bt_pool_config *)call->config;
    const bt_k_window win = pool_window(cf);
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "avgpool2d", call->out->dtype, &x));
    BT_K_TRY(bt_k_avgpool_forward, x->stream, call->out->dtype, &win, call->batch * cf->c,
             call->in[0].data, call->out->data);
    return BT_OK;
}

extern "C" bt_status bt_cuda_avgpool2d_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_pool_config *cf = (const bt_pool_config *)call->config;
    const bt_k_window win = pool_window(cf);
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "avgpool2d", call->out_grad->dtype, &x));
    BT_K_TRY(bt_k_avgpool_backward, x->stream, call->out_grad->dtype, &win, call->batch * cf->c,
             call->out_grad->data, call->in_grad[0].data);
    return BT_OK;
}
