/* kernels/softmax.cu: softmax over rows of d elements, one block per row. As the CPU kernel
 * (src/ops/softmax_tmpl.h): the row maximum is subtracted, exponentials are taken in T and summed
 * in double, and the backward recomputes p from x instead of reading the forward's output. */
#include "kernel_util.cuh"

#include "cuda/op_glue.h"

/* The row's maximum and 1 / sum(exp(x - max)), to every thread of the block. */
template <typename T>
__device__ void row_stats(const T *xr, int64_t d, T *max_out, T *inv_out)
{
    __shared__ T shm_max[32];
    __shared__ double shm_sum[32];
    T m = xr[0];
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) m = xr[j] > m ? xr[j] : m;
    m = bt_k_block_max(m, xr[0], shm_max);
    double sum = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) sum += (double)bt_k_exp(xr[j] - m);
    sum = bt_k_block_sum(sum, shm_sum);
    *max_out = m;
    *inv_out = (T)(1.0 / sum);
}

template <typename T>
__global__ void k_softmax_forward(const T *x, T *y, int64_t rows, int64_t d)
{
    BT_K_FOR_BLOCK(r, rows) {
        const T *xr = x + r * d;
        T *yr = y + r * d;
        T m, inv;
        row_stats(xr, d, &m, &inv);
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] = bt_k_exp(xr[j] - m) * inv;
    }
}

template <typename T>
__global__ void k_softmax_backward(const T *x, const T *dy, T *dx, int64_t rows, int64_t d)
{
    __shared__ double shm_dot[32];
    BT_K_FOR_BLOCK(r, rows) {
        const T *xr = x + r * d, *dyr = dy + r * d;
        T *dxr = dx + r * d;
        T m, inv;
        row_stats(xr, d, &m, &inv);
        double dot = 0;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
            dot += (double)dyr[j] * (double)(bt_k_exp(xr[j] - m) * inv);
        const T dot_t = (T)bt_k_block_sum(dot, shm_dot);
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
            const T p = bt_k_exp(xr[j] - m) * inv;
            dxr[j] += p * (dyr[j] - dot_t);
        }
    }
}

extern "C" cudaError_t bt_k_softmax_forward(cudaStream_t s, bt_dtype dt, const void *x, void *y,
                                            int64_t rows, int64_t d)
{
    if (rows <= 0 || d <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_softmax_forward<T><<<bt_k_blocks_per_item(rows), bt_k_row_threads(d), 0,
                                             s>>>((const T *)x, (T *)y, rows, d););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_softmax_backward(cudaStream_t s, bt_dtype dt, const void *x,
                                             const void *dy, void *dx, int64_t rows, int64_t d)
{
    if (rows <= 0 || d <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_softmax_backward<T><<<bt_k_blocks_per_item(rows), bt_k_row_threads(d), 0,
                                              s>>>((const T *)x, (const T *)dy, (T *)dx, rows,
                                                   d););
    return cudaGetLastError();
}

/* ---- glue: the ops' CUDA forward and backward (bt_op_call -> launchers), C linkage ---------- */

extern "C" bt_status bt_cuda_softmax_forward(const bt_op_call *call)
{
    const int64_t d = ((const bt_softmax_config *)call->config)->d;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "softmax", call->out->dtype, &x));
    BT_K_TRY(bt_k_softmax_forward, x->stream, call->out->dtype, call->in[0].data, call->out->data,
             bt_tensor_numel(call->out) / d, d);
    return BT_OK;
}

extern "C" bt_status bt_cuda_softmax_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const int64_t d = ((const bt_softmax_config *)call->config)->d;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "softmax", call->out_grad->dtype, &x));
    BT_K_TRY(bt_k_softmax_backward, x->stream, call->out_grad->dtype, call->in[0].data,
             call->out_grad->data, call->in_grad[0].data, bt_tensor_numel(call->out_grad) / d, d);
    return BT_OK;
}

