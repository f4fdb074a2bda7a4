/* kernels/conv.cu: conv2d (src/ops/conv.c) on the GPU: through cuDNN where the build has it and
 * it can (src/cuda/conv_cudnn.c), otherwise the GEMM path here, one sample at a time: the
 * column-matrix kernels below, then cuBLAS GEMMs. The column matrix of one sample is
 * (c kh kw, ho wo), row (ci, ki, kj) and column (oh, ow) holding x[ci, oh sh - ph + ki,
 * ow sw - pw + kj] or 0 in the padding, as in src/ops/conv_tmpl.h. col2im gathers, one thread per
 * input element summing the column entries that came from it (no atomics). */
#include "kernel_util.cuh"

#include "cuda/conv_cudnn.h"
#include "cuda/op_glue.h"

template <typename T>
__global__ void k_im2col(bt_k_window c, int64_t ch, const T *x, T *col)
{
    const int64_t howo = c.ho * c.wo;
    BT_K_FOR(i, ch * c.kh * c.kw * howo) {
        const int64_t row = i / howo, pos = i - row * howo;
        const int64_t ci = row / (c.kh * c.kw), kk = row - ci * c.kh * c.kw;
        const int64_t ki = kk / c.kw, kj = kk - ki * c.kw;
        const int64_t oh = pos / c.wo, ow = pos - oh * c.wo;
        const int64_t ih = oh * c.sh - c.ph + ki, iw = ow * c.sw - c.pw + kj;
        col[i] = (ih >= 0 && ih < c.h && iw >= 0 && iw < c.w) ? x[(ci * c.h + ih) * c.w + iw]
                                                               : (T)0;
    }
}

template <typename T>
__global__ void k_col2im_acc(bt_k_window c, int64_t ch, const T *col, T *dx)
{
    const int64_t hw = c.h * c.w, howo = c.ho * c.wo;
    BT_K_FOR(i, ch * hw) {
        const int64_t ci = i / hw, idx = i - ci * hw;
        const int64_t ih = idx / c.w, iw = idx - ih * c.w;
        T sum = 0;
        for (int64_t ki = 0; ki < c.kh; ki++) {
            const int64_t th = ih + c.ph - ki; /* = oh sh */
            if (th < 0 || th % c.sh != 0 || th / c.sh >= c.ho) continue;
            const int64_t oh = th / c.sh;
            for (int64_t kj = 0; kj < c.kw; kj++) {
                const int64_t tw = iw + c.pw - kj; /* = ow sw */
                if (tw < 0 || tw % c.sw != 0 || tw / c.sw >= c.wo) continue;
                const int64_t ow = tw / c.sw;
                sum += col[((ci * c.kh + ki) * c.kw + kj) * howo + oh * c.wo + ow];
            }
        }
        dx[i] += sum;
    }
}

template <typename T>
__global__ void k_fill_planes(const T *b, T *y, int64_t planes, int64_t channels, int64_t plane)
{
    BT_K_FOR(i, planes * plane) y[i] = b[(i / plane) % channels];
}

/* One block per channel: db[c] += sum over samples and plane positions of dy. */
template <typename T>
__global__ void k_channel_sum_acc(const T *dy, T *db, int64_t batch, int64_t channels,
                                  int64_t plane)
{
    __shared__ double shm[32];
    BT_K_FOR_BLOCK(ch, channels) {
        double s = 0;
        for (int64_t n = 0; n < batch; n++) {
            const T *p = dy + (n * channels + ch) * plane;
            for (int64_t i = threadIdx.x; i < plane; i += blockDim.x) s += (double)p[i];
        }
        s = bt_k_block_sum(s, shm);
        if (threadIdx.x == 0) db[ch] += (T)s;
    }
}

extern "C" cudaError_t bt_k_im2col(cudaStream_t s, bt_dtype dt, const bt_k_window *win,
                                   int64_t c, const void *x, void *col)
{
    const int64_t n = c * win->kh * win->kw * win->ho * win->wo;
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_im2col<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(*win, c, (const T *)x,
                                                                         (T *)col););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_col2im_acc(cudaStream_t s, bt_dtype dt, const bt_k_window *win,
                                       int64_t c, const void *col, void *dx)
{
    const int64_t n = c * win->h * win->w;
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_col2im_acc<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          *win, c, (const T *)col, (T *)dx););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_fill_planes(cudaStream_t s, bt_dtype dt, const void *b, void *y,
                                        int64_t planes, int64_t channels, int64_t plane)
{
    if (planes <= 0 || plane <= 0 || channels <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_fill_planes<T><<<bt_k_blocks(planes * plane), BT_K_THREADS, 0, s>>>(
                          (const T *)b, (T *)y, planes, channels, plane););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_channel_sum_acc(cudaStream_t s, bt_dtype dt, const void *dy, void *db,
                                            int64_t batch, int64_t channels, int64_t plane)
{
    if (batch <= 0 || channels <= 0 || plane <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_channel_sum_acc<T><<<bt_k_blocks_per_item(channels),
                                             bt_k_row_threads(plane), 0, s>>>(
                          (const T *)dy, (T *)db, batch, channels, plane););
    return cudaGetLastError();
}

/* ---- glue: the ops' CUDA forward and backward (bt_op_call -> launchers), C linkage ---------- */

static bt_k_window conv_window(const bt_conv_config *cf)
{
    const bt_k_window win = {cf->h, cf->w, cf->ho, cf->wo, cf->kh, cf->kw,
                             cf->sh, cf->sw, cf->ph, cf->pw};
    return win;
}

/* The GEMM path, one sample at a time as src/ops/conv_tmpl.h: im2col into the workspace, then
 * y_n (out, ho wo) = W (out, c kh kw) col (c kh kw, ho wo). A pointwise conv uses x_n as col. */
static bt_status conv_gemm_forward(bt_cuda_exec *x, const bt_op_call *call, bt_dtype dt)
{
    const bt_conv_config *cf = (const bt_conv_config *)call->config;
    const bt_k_window win = conv_window(cf);
    const int64_t chw = cf->c * cf->h * cf->w, howo = cf->ho * cf->wo;
    const int64_t ckk = cf->c * cf->kh * cf->kw;
    BT_TRY(bt_cuda_fits_int("conv2d", howo, cf->out, ckk));
    const void *b = cf->bias ? call->param[1].data : NULL;
    if (b)
        BT_K_TRY(bt_k_fill_planes, x->stream, dt, b, call->out->data, call->batch * cf->out,
                 cf->out, howo);
    for (int64_t n = 0; n < call->batch; n++) {
        const void *xn = bt_cuda_at(call->in[0].data, n * chw, dt);
        void *yn = bt_cuda_at(call->out->data, n * cf->out * howo, dt);
        const void *col = xn;
        if (!cf->pointwise) {
            BT_K_TRY(bt_k_im2col, x->stream, dt, &win, cf->c, xn, call->workspace);
            col = call->workspace;
        }
        /* y_n^T (ho wo, out) = col^T W^T: col is column-major (ho wo, c kh kw), W^T
         * column-major (c kh kw, out) */
        BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_N, (int)howo,
                            (int)cf->out, (int)ckk, col, (int)howo, call->param[0].data, (int)ckk,
                            b ? 1.0 : 0.0, yn, (int)howo));
    }
    return BT_OK;
}

static bt_status conv_gemm_backward(bt_cuda_exec *x, const bt_op_call *call, bt_dtype dt,
                                    void *dx, void *dw, void *db)
{
    const bt_conv_config *cf = (const bt_conv_config *)call->config;
    const bt_k_window win = conv_window(cf);
    const int64_t chw = cf->c * cf->h * cf->w, howo = cf->ho * cf->wo;
    const int64_t ckk = cf->c * cf->kh * cf->kw;
    BT_TRY(bt_cuda_fits_int("conv2d", howo, cf->out, ckk));
    void *col = call->workspace;                                     /* (c kh kw, ho wo) */
    void *dcol = cf->pointwise ? NULL : bt_cuda_at(call->workspace, ckk * howo, dt); /* same */
    if (db)
        BT_K_TRY(bt_k_channel_sum_acc, x->stream, dt, call->out_grad->data, db, call->batch,
                 cf->out, howo);
    for (int64_t n = 0; n < call->batch; n++) {
        const void *xn = bt_cuda_at(call->in[0].data, n * chw, dt);
        const void *dyn = bt_cuda_at(call->out_grad->data, n * cf->out * howo, dt);
        if (dw) { /* dW^T (c kh kw, out) += col dy_n^T */
            const void *cn = xn;
            if (!cf->pointwise) {
                BT_K_TRY(bt_k_im2col, x->stream, dt, &win, cf->c, xn, col);
                cn = col;
            }
            BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_T, CUBLAS_OP_N, (int)ckk,
                                (int)cf->out, (int)howo, cn, (int)howo, dyn, (int)howo, 1.0, dw,
                                (int)ckk));
        }
        if (dx) { /* dcol^T (ho wo, c kh kw) = dy_n^T W, folded back into dx_n */
            void *dxn = bt_cuda_at(dx, n * chw, dt);
            if (cf->pointwise) {
                BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_T, (int)howo,
                                    (int)ckk, (int)cf->out, dyn, (int)howo, call->param[0].data,
                                    (int)ckk, 1.0, dxn, (int)howo));
            } else {
                BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_T, (int)howo,
                                    (int)ckk, (int)cf->out, dyn, (int)howo, call->param[0].data,
                                    (int)ckk, 0.0, dcol, (int)howo));
                BT_K_TRY(bt_k_col2im_acc, x->stream, dt, &win, cf->c, dcol, dxn);
            }
        }
    }
    return BT_OK;
}

extern "C" bt_status bt_cuda_conv2d_forward(const bt_op_call *call)
{
    const bt_dtype dt = call->out->dtype;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "conv2d", dt, &x));
    if (call->batch == 0) return BT_OK;
#ifdef BATON_HAVE_CUDNN
    if (bt_cudnn_conv_applicable(x, dt, (const bt_conv_config *)call->config, call->batch)) {
        int done = 0;
        BT_TRY(bt_cudnn_conv_forward(x, call, &done));
        if (done) return BT_OK;
    }
#endif
    return conv_gemm_forward(x, call, dt);
}

extern "C" bt_status bt_cuda_conv2d_backward(const bt_op_call *call)
{
    const bt_conv_config *cf = (const bt_conv_config *)call->config;
    const bt_dtype dt = call->out_grad->dtype;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "conv2d", dt, &x));
    void *dx = BT_OPS_WANTS(&call->in_grad[0]) ? call->in_grad[0].data : NULL;
    void *dw = call->param_grad && BT_OPS_WANTS(&call->param_grad[0]) ? call->param_grad[0].data
                                                                       : NULL;
    void *db = cf->bias && call->param_grad && BT_OPS_WANTS(&call->param_grad[1])
                   ? call->param_grad[1].data
                   : NULL;
    if (call->batch == 0 || (!dx && !dw && !db)) return BT_OK;
#ifdef BATON_HAVE_CUDNN
    if (bt_cudnn_conv_applicable(x, dt, cf, call->batch)) {
        int done = 0;
        BT_TRY(bt_cudnn_conv_backward(x, call, dx, dw, db, &done));
        if (done) return BT_OK;
    }
#endif
    return conv_gemm_backward(x, call, dt, dx, dw, db);
}
