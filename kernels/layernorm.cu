/* kernels/layernorm.cu: layer normalisation over rows of d elements. The forward runs one block
 * per row (mean, then the centred variance, both in double, as src/ops/layernorm_tmpl.h) and
 * saves (mean, rstd) per row as doubles. The backward's input gradient runs one block per row;
 * the weight and bias gradients are column sums over the rows in a fixed order (a 32 x 32 tile
 * per 32 columns, no atomics), so every result is the same from run to run. */
#include "kernel_util.cuh"

#include "cuda/op_glue.h"

template <typename T>
__global__ void k_ln_forward(const T *x, const T *w, const T *b, T *y, double *stats,
                             int64_t rows, int64_t d, double eps)
{
    __shared__ double shm[32];
    BT_K_FOR_BLOCK(r, rows) {
        const T *xr = x + r * d;
        T *yr = y + r * d;
        double s = 0;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += (double)xr[j];
        const double mean = bt_k_block_sum(s, shm) / (double)d;
        double q = 0;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
            const double c = (double)xr[j] - mean;
            q += c * c;
        }
        const double rstd = 1.0 / sqrt(bt_k_block_sum(q, shm) / (double)d + eps);
        const T m = (T)mean, sd = (T)rstd;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
            yr[j] = (xr[j] - m) * sd * w[j] + b[j];
        if (stats && threadIdx.x == 0) {
            stats[2 * r] = mean;
            stats[2 * r + 1] = rstd;
        }
    }
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w, xhat = (x - mean) rstd */
template <typename T>
__global__ void k_ln_backward_dx(const T *x, const T *w, const T *dy, const double *stats, T *dx,
                                 int64_t rows, int64_t d)
{
    __shared__ double shm[32];
    BT_K_FOR_BLOCK(r, rows) {
        const T *xr = x + r * d, *dyr = dy + r * d;
        T *dxr = dx + r * d;
        const T m = (T)stats[2 * r], s = (T)stats[2 * r + 1];
        double sg = 0, sgx = 0;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
            const double g = (double)dyr[j] * (double)w[j];
            sg += g;
            sgx += g * ((double)(xr[j] - m) * (double)s);
        }
        const T mg = (T)(bt_k_block_sum(sg, shm) / (double)d);
        const T mgx = (T)(bt_k_block_sum(sgx, shm) / (double)d);
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
            dxr[j] += s * (dyr[j] * w[j] - mg - (xr[j] - m) * s * mgx);
    }
}

/* dw[j] += sum_r dy (x - m) s, db[j] += sum_r dy, deterministically (elementwise.cu's column-sum
 * scheme): block bx owns columns bx * 32 .. + 31, thread (tx, ty) sums column bx * 32 + tx over
 * rows ty, ty + 32, ..., and thread (tx, 0) adds the 32 partial sums in ty order. No atomics. */
#define BT_LN_TILE 32
template <typename T>
__global__ void k_ln_backward_dwdb(const T *x, const T *dy, const double *stats, T *dw, T *db,
                                   int64_t rows, int64_t d)
{
    __shared__ double pw[BT_LN_TILE][BT_LN_TILE + 1], pb[BT_LN_TILE][BT_LN_TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t j = (int64_t)blockIdx.x * BT_LN_TILE + tx;
    double aw = 0, ab = 0;
    if (j < d)
        for (int64_t r = ty; r < rows; r += BT_LN_TILE) {
            const T m = (T)stats[2 * r], s = (T)stats[2 * r + 1];
            const T g = dy[r * d + j];
            aw += (double)(g * (x[r * d + j] - m) * s);
            ab += (double)g;
        }
    pw[ty][tx] = aw;
    pb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && j < d) {
        double tw = 0, tb = 0;
        for (int k = 0; k < BT_LN_TILE; k++) {
            tw += pw[k][tx];
            tb += pb[k][tx];
        }
        if (dw) dw[j] += (T)tw;
        if (db) db[j] += (T)tb;
    }
}

extern "C" cudaError_t bt_k_layernorm_forward(cudaStream_t s, bt_dtype dt, const void *x,
                                              const void *w, const void *b, void *y,
                                              double *stats, int64_t rows, int64_t d, double eps)
{
    if (rows <= 0 || d <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_ln_forward<T><<<bt_k_blocks_per_item(rows), bt_k_row_threads(d), 0, s>>>(
                          (const T *)x, (const T *)w, (const T *)b, (T *)y, stats, rows, d, eps););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_layernorm_backward(cudaStream_t s, bt_dtype dt, const void *x,
                                               const void *w, const void *dy,
                                               const double *stats, void *dx, void *dw,
                                               void *db, int64_t rows, int64_t d)
{
    if (rows <= 0 || d <= 0) return cudaSuccess;
    if (dx)
        BT_K_DISPATCH(dt, k_ln_backward_dx<T><<<bt_k_blocks_per_item(rows), bt_k_row_threads(d),
                                                0, s>>>((const T *)x, (const T *)w, (const T *)dy,
                                                        stats, (T *)dx, rows, d););
    if (dw || db) {
        const dim3 grid((unsigned)((d + BT_LN_TILE - 1) / BT_LN_TILE));
        const dim3 block(BT_LN_TILE, BT_LN_TILE);
        BT_K_DISPATCH(dt, k_ln_backward_dwdb<T><<<grid, block, 0, s>>>(
                              (const T *)x, (const T *)dy, stats, (T *)dw, (T *)db, rows, d););
    }
    return cudaGetLastError();
}

/* ---- glue: the ops' CUDA forward and backward (bt_op_call -> launchers), C linkage ---------- */

extern "C" bt_status bt_cuda_layernorm_forward(const bt_op_call *call)
{
    const bt_layernorm_config *cf = (const bt_layernorm_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "layernorm", call->out->dtype, &x));
    BT_K_TRY(bt_k_layernorm_forward, x->stream, call->out->dtype, call->in[0].data,
             call->param[0].data, call->param[1].data, call->out->data, (double *)call->saved,
             bt_tensor_numel(call->out) / cf->d, cf->d, cf->eps);
    return BT_OK;
}

extern "C" bt_status bt_cuda_layernorm_backward(const bt_op_call *call)
{
    const bt_layernorm_config *cf = (const bt_layernorm_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "layernorm", call->out_grad->dtype, &x));
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


/* ---- rmsnorm: y = x rstd w, rstd = 1 / sqrt(mean(x^2) + eps), saved rstd per row ----------- */

template <typename T>
__global__ void k_rms_forward(const T *x, const T *w, T *y, double *rstd_out, int64_t rows,
                              int64_t d, double eps)
{
    __shared__ double shm[32];
    BT_K_FOR_BLOCK(r, rows) {
        const T *xr = x + r * d;
        T *yr = y + r * d;
        double q = 0;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) q += (double)xr[j] * (double)xr[j];
        const double rstd = 1.0 / sqrt(bt_k_block_sum(q, shm) / (double)d + eps);
        const T sd = (T)rstd;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] = xr[j] * sd * w[j];
        if (rstd_out && threadIdx.x == 0) rstd_out[r] = rstd;
    }
}

/* dx = s (g - xhat mean(g xhat)), g = dy w, xhat = x s */
template <typename T>
__global__ void k_rms_backward_dx(const T *x, const T *w, const T *dy, const double *rstd, T *dx,
                                  int64_t rows, int64_t d)
{
    __shared__ double shm[32];
    BT_K_FOR_BLOCK(r, rows) {
        const T *xr = x + r * d, *dyr = dy + r * d;
        T *dxr = dx + r * d;
        const T s = (T)rstd[r];
        double sgx = 0;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
            sgx += (double)dyr[j] * (double)w[j] * ((double)xr[j] * (double)s);
        const T mgx = (T)(bt_k_block_sum(sgx, shm) / (double)d);
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
            dxr[j] += s * (dyr[j] * w[j] - xr[j] * s * mgx);
    }
}

/* dw[j] += sum_r dy x s, in a fixed order (as k_ln_backward_dwdb) */
template <typename T>
__global__ void k_rms_backward_dw(const T *x, const T *dy, const double *rstd, T *dw, int64_t rows,
                                  int64_t d)
{
    __shared__ double pw[BT_LN_TILE][BT_LN_TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t j = (int64_t)blockIdx.x * BT_LN_TILE + tx;
    double aw = 0;
    if (j < d)
        for (int64_t r = ty; r < rows; r += BT_LN_TILE)
            aw += (double)(dy[r * d + j] * x[r * d + j] * (T)rstd[r]);
    pw[ty][tx] = aw;
    __syncthreads();
    if (ty == 0 && j < d) {
        double tw = 0;
        for (int k = 0; k < BT_LN_TILE; k++) tw += pw[k][tx];
        dw[j] += (T)tw;
    }
}

extern "C" cudaError_t bt_k_rmsnorm_forward(cudaStream_t s, bt_dtype dt, const void *x,
                                            const void *w, void *y, double *rstd, int64_t rows,
                                            int64_t d, double eps)
{
    if (rows <= 0 || d <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_rms_forward<T><<<bt_k_blocks_per_item(rows), bt_k_row_threads(d), 0, s>>>(
                          (const T *)x, (const T *)w, (T *)y, rstd, rows, d, eps););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_rmsnorm_backward(cudaStream_t s, bt_dtype dt, const void *x,
                                             const void *w, const void *dy, const double *rstd,
                                             void *dx, void *dw, int64_t rows, int64_t d)
{
    if (rows <= 0 || d <= 0) return cudaSuccess;
    if (dx)
        BT_K_DISPATCH(dt, k_rms_backward_dx<T><<<bt_k_blocks_per_item(rows), bt_k_row_threads(d),
                                                 0, s>>>((const T *)x, (const T *)w,
                                                         (const T *)dy, rstd, (T *)dx, rows, d););
    if (dw) {
        const dim3 grid((unsigned)((d + BT_LN_TILE - 1) / BT_LN_TILE));
        const dim3 block(BT_LN_TILE, BT_LN_TILE);
        BT_K_DISPATCH(dt, k_rms_backward_dw<T><<<grid, block, 0, s>>>(
                              (const T *)x, (const T *)dy, rstd, (T *)dw, rows, d););
    }
    return cudaGetLastError();
}

extern "C" bt_status bt_cuda_rmsnorm_forward(const bt_op_call *call)
{
    const bt_layernorm_config *cf = (const bt_layernorm_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "rmsnorm", call->out->dtype, &x));
    BT_K_TRY(bt_k_rmsnorm_forward, x->stream, call->out->dtype, call->in[0].data,
             call->param[0].data, call->out->data, (double *)call->saved,
             bt_tensor_numel(call->out) / cf->d, cf->d, cf->eps);
    return BT_OK;
}

extern "C" bt_status bt_cuda_rmsnorm_backward(const bt_op_call *call)
{
    const bt_layernorm_config *cf = (const bt_layernorm_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "rmsnorm", call->out_grad->dtype, &x));
    void *dx = BT_OPS_WANTS(&call->in_grad[0]) ? call->in_grad[0].data : NULL;
    void *dw = call->param_grad && BT_OPS_WANTS(&call->param_grad[0]) ? call->param_grad[0].data
                                                                       : NULL;
    if (!dx && !dw) return BT_OK;
    if (!call->saved)
        return bt_op_error(BT_ERR_INTERNAL, "rmsnorm: backward without the forward's saved rstd");
    BT_K_TRY(bt_k_rmsnorm_backward, x->stream, call->out_grad->dtype, call->in[0].data,
             call->param[0].data, call->out_grad->data, (const double *)call->saved, dx, dw,
             bt_tensor_numel(call->out_grad) / cf->d, cf->d);
    return BT_OK;
}
