/* kernels/conv.cu: conv2d (src/ops/conv.c) on the GPU: through cuDNN where the build has it and
 * it can (src/cuda/conv_cudnn.c), otherwise the GEMM path here, a chunk of samples at a time (as
 * the CPU's src/ops/conv_tmpl.h): the column-matrix kernels below, then one cuBLAS GEMM per
 * product and chunk. The column matrix of S samples is (c kh kw, S ho wo), row (ci, ki, kj) and
 * column (s, oh, ow) holding x_s[ci, oh sh - ph + ki, ow sw - pw + kj] or 0 in the padding.
 * col2im gathers, one thread per input element summing the column entries that came from it (no
 * atomics). */
#include "kernel_util.cuh"

#include "cuda/conv_cudnn.h"
#include "cuda/op_glue.h"

/* col (c kh kw, S ho wo) of S samples: entry (row, s ho wo + pos) is sample s's column entry. */
template <typename T>
__global__ void k_im2col(bt_k_window c, int64_t ch, int64_t samples, const T *x, T *col)
{
    const int64_t howo = c.ho * c.wo, cols = samples * howo, chw = ch * c.h * c.w;
    BT_K_FOR(i, ch * c.kh * c.kw * cols) {
        const int64_t row = i / cols, q = i - row * cols;
        const int64_t sn = q / howo, pos = q - sn * howo;
        const int64_t ci = row / (c.kh * c.kw), kk = row - ci * c.kh * c.kw;
        const int64_t ki = kk / c.kw, kj = kk - ki * c.kw;
        const int64_t oh = pos / c.wo, ow = pos - oh * c.wo;
        const int64_t ih = oh * c.sh - c.ph + ki, iw = ow * c.sw - c.pw + kj;
        col[i] = (ih >= 0 && ih < c.h && iw >= 0 && iw < c.w)
                     ? x[sn * chw + (ci * c.h + ih) * c.w + iw]
                     : (T)0;
    }
}

/* dx (S, c, h, w) += col (c kh kw, S ho wo) folded back, one thread per input element. */
template <typename T>
__global__ void k_col2im_acc(bt_k_window c, int64_t ch, int64_t samples, const T *col, T *dx)
{
    const int64_t hw = c.h * c.w, howo = c.ho * c.wo, cols = samples * howo;
    BT_K_FOR(i, samples * ch * hw) {
        const int64_t sn = i / (ch * hw), rest = i - sn * ch * hw;
        const int64_t ci = rest / hw, idx = rest - ci * hw;
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
                sum += col[((ci * c.kh + ki) * c.kw + kj) * cols + sn * howo + oh * c.wo + ow];
            }
        }
        dx[i] += sum;
    }
}

/* Between a chunk's (out, S plane) matrix and the samples' (S, out, plane) layout: to_chunk 1
 * gathers m from y; to_chunk 0 scatters m into y, adding b[o] where b is not NULL. */
template <typename T>
__global__ void k_chunk_planes(T *y, T *m, const T *b, int64_t samples, int64_t out,
                               int64_t plane, int to_chunk)
{
    BT_K_FOR(i, samples * out * plane) {
        const int64_t sn = i / (out * plane), rest = i - sn * out * plane;
        const int64_t o = rest / plane, p = rest - o * plane;
        const int64_t j = o * samples * plane + sn * plane + p;
        if (to_chunk)
            m[j] = y[i];
        else
            y[i] = b ? m[j] + b[o] : m[j];
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
                                   int64_t c, int64_t samples, const void *x, void *col)
{
    const int64_t n = c * win->kh * win->kw * samples * win->ho * win->wo;
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_im2col<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(*win, c, samples,
                                                                         (const T *)x, (T *)col););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_col2im_acc(cudaStream_t s, bt_dtype dt, const bt_k_window *win,
                                       int64_t c, int64_t samples, const void *col, void *dx)
{
    const int64_t n = samples * c * win->h * win->w;
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_col2im_acc<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          *win, c, samples, (const T *)col, (T *)dx););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_chunk_planes(cudaStream_t s, bt_dtype dt, void *y, void *m,
                                         const void *b, int64_t samples, int64_t out,
                                         int64_t plane, int to_chunk)
{
    const int64_t n = samples * out * plane;
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_chunk_planes<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          (T *)y, (T *)m, (const T *)b, samples, out, plane, to_chunk););
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

/* The GEMM path. A pointwise conv is a GEMM per sample on x_n itself (it declares no
 * workspace). Otherwise chunks of S = bt_conv_chunk_samples samples, as src/ops/conv_tmpl.h: the
 * workspace holds col (c kh kw, S ho wo) and ycol (out, S ho wo), so a chunk takes one im2col, one
 * GEMM per product and one layout kernel, not one of each per sample. */
static bt_status conv_gemm_forward(bt_cuda_exec *x, const bt_op_call *call, bt_dtype dt)
{
    const bt_conv_config *cf = (const bt_conv_config *)call->config;
    const bt_k_window win = conv_window(cf);
    const int64_t chw = cf->c * cf->h * cf->w, howo = cf->ho * cf->wo;
    const int64_t ckk = cf->c * cf->kh * cf->kw;
    const void *b = cf->bias ? call->param[1].data : NULL;
    if (cf->pointwise) {
        BT_TRY(bt_cuda_fits_int("conv2d", howo, cf->out, ckk));
        if (b)
            BT_K_TRY(bt_k_fill_planes, x->stream, dt, b, call->out->data, call->batch * cf->out,
                     cf->out, howo);
        for (int64_t n = 0; n < call->batch; n++) /* y_n^T (ho wo, out) = x_n^T W^T */
            BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_N, (int)howo,
                                (int)cf->out, (int)ckk, bt_cuda_at(call->in[0].data, n * chw, dt),
                                (int)howo, call->param[0].data, (int)ckk, b ? 1.0 : 0.0,
                                bt_cuda_at(call->out->data, n * cf->out * howo, dt), (int)howo));
        return BT_OK;
    }
    const int64_t chunk = bt_conv_chunk_samples(cf);
    BT_TRY(bt_cuda_fits_int("conv2d", chunk * howo, cf->out, ckk));
    void *col = call->workspace, *ycol = bt_cuda_at(call->workspace, ckk * chunk * howo, dt);
    for (int64_t n0 = 0; n0 < call->batch; n0 += chunk) {
        const int64_t sn = call->batch - n0 < chunk ? call->batch - n0 : chunk;
        const int cols = (int)(sn * howo);
        BT_K_TRY(bt_k_im2col, x->stream, dt, &win, cf->c, sn,
                 bt_cuda_at(call->in[0].data, n0 * chw, dt), col);
        /* ycol^T (S ho wo, out) = col^T W^T: col column-major (S ho wo, c kh kw), W^T
         * column-major (c kh kw, out) */
        BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_N, cols, (int)cf->out,
                            (int)ckk, col, cols, call->param[0].data, (int)ckk, 0.0, ycol, cols));
        BT_K_TRY(bt_k_chunk_planes, x->stream, dt,
                 bt_cuda_at(call->out->data, n0 * cf->out * howo, dt), ycol, b, sn, cf->out, howo,
                 0);
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
    if (db)
        BT_K_TRY(bt_k_channel_sum_acc, x->stream, dt, call->out_grad->data, db, call->batch,
                 cf->out, howo);
    if (cf->pointwise) {
        BT_TRY(bt_cuda_fits_int("conv2d", howo, cf->out, ckk));
        for (int64_t n = 0; n < call->batch; n++) {
            const void *xn = bt_cuda_at(call->in[0].data, n * chw, dt);
            const void *dyn = bt_cuda_at(call->out_grad->data, n * cf->out * howo, dt);
            if (dw) /* dW^T (c, out) += x_n dy_n^T */
                BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_T, CUBLAS_OP_N, (int)ckk,
                                    (int)cf->out, (int)howo, xn, (int)howo, dyn, (int)howo, 1.0,
                                    dw, (int)ckk));
            if (dx) /* dx_n^T (ho wo, c) += dy_n^T W */
                BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_T, (int)howo,
                                    (int)ckk, (int)cf->out, dyn, (int)howo, call->param[0].data,
                                    (int)ckk, 1.0, bt_cuda_at(dx, n * chw, dt), (int)howo));
        }
        return BT_OK;
    }
    if (!dw && !dx) return BT_OK;
    const int64_t chunk = bt_conv_chunk_samples(cf);
    BT_TRY(bt_cuda_fits_int("conv2d", chunk * howo, cf->out, ckk));
    /* col, then dcol in the same place once dW has read col; dycol after them */
    void *col = call->workspace, *dycol = bt_cuda_at(call->workspace, ckk * chunk * howo, dt);
    for (int64_t n0 = 0; n0 < call->batch; n0 += chunk) {
        const int64_t sn = call->batch - n0 < chunk ? call->batch - n0 : chunk;
        const int cols = (int)(sn * howo);
        BT_K_TRY(bt_k_chunk_planes, x->stream, dt,
                 bt_cuda_at(call->out_grad->data, n0 * cf->out * howo, dt), dycol, NULL, sn,
                 cf->out, howo, 1);
        if (dw) { /* dW^T (c kh kw, out) += col dycol^T */
            BT_K_TRY(bt_k_im2col, x->stream, dt, &win, cf->c, sn,
                     bt_cuda_at(call->in[0].data, n0 * chw, dt), col);
            BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_T, CUBLAS_OP_N, (int)ckk,
                                (int)cf->out, cols, col, cols, dycol, cols, 1.0, dw, (int)ckk));
        }
        if (dx) { /* dcol^T (S ho wo, c kh kw) = dycol^T W, folded back into the chunk's dx */
            BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_T, cols, (int)ckk,
                                (int)cf->out, dycol, cols, call->param[0].data, (int)ckk, 0.0, col,
                                cols));
            BT_K_TRY(bt_k_col2im_acc, x->stream, dt, &win, cf->c, sn, col,
                     bt_cuda_at(dx, n0 * chw, dt));
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
    const bt_conv_config *cf = (const bt_conv_config *)call->config;
    int done = 0;
#ifdef BATON_HAVE_CUDNN
    if (bt_cudnn_conv_applicable(x, dt, cf, call->batch)) BT_TRY(bt_cudnn_conv_forward(x, call, &done));
#endif
    if (!done) BT_TRY(conv_gemm_forward(x, call, dt));
    if (cf->act == BT_OPS_ACT_RELU) /* the fused relu, in place */
        BT_K_TRY(bt_k_activation_forward, x->stream, dt, BT_K_RELU, call->out->data,
                 call->out->data, bt_tensor_numel(call->out));
    return BT_OK;
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
    if (cf->act == BT_OPS_ACT_RELU && call->out->data) /* through the fused relu (not in W) */
        BT_K_TRY(bt_k_relu_mask, x->stream, dt, call->out->data, call->out_grad->data,
                 bt_tensor_numel(call->out_grad));
#ifdef BATON_HAVE_CUDNN
    if (bt_cudnn_conv_applicable(x, dt, cf, call->batch)) {
        int done = 0;
        BT_TRY(bt_cudnn_conv_backward(x, call, dx, dw, db, &done));
        if (done) return BT_OK;
    }
#endif
    return conv_gemm_backward(x, call, dt, dx, dw, db);
}
