/* kernels/conv.cu: the helpers of conv2d's GEMM path (src/cuda/ops_cuda.c runs the GEMMs with
 * cuBLAS, or the whole convolution with cuDNN where it can). The column matrix of one sample is
 * (c kh kw, ho wo), row (ci, ki, kj) and column (oh, ow) holding x[ci, oh sh - ph + ki,
 * ow sw - pw + kj] or 0 in the padding, as in src/ops/conv_tmpl.h. col2im gathers, one thread per
 * input element summing the column entries that came from it (no atomics). */
#include "kernel_util.cuh"

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
