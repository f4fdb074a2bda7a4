/* kernels/elementwise.cu: add, mul and the array helpers other ops build on (accumulate, bias
 * rows, column sums). Flat grid-stride loops over n elements; see kernels.h for the contracts. */
#include "kernel_util.cuh"

#include "cuda/op_glue.h"

template <typename T>
__global__ void k_add(const T *a, const T *b, T *y, int64_t n)
{
    BT_K_FOR(i, n) y[i] = a[i] + b[i];
}

template <typename T>
__global__ void k_mul(const T *a, const T *b, T *y, int64_t n)
{
    BT_K_FOR(i, n) y[i] = a[i] * b[i];
}

template <typename T>
__global__ void k_acc(const T *x, T *y, int64_t n)
{
    BT_K_FOR(i, n) y[i] += x[i];
}

template <typename T>
__global__ void k_acc_mul(const T *x, const T *w, T *y, int64_t n)
{
    BT_K_FOR(i, n) y[i] += x[i] * w[i];
}

template <typename T>
__global__ void k_fill_rows(const T *row, T *y, int64_t rows, int64_t cols)
{
    BT_K_FOR(i, rows * cols) y[i] = row[i % cols];
}

/* y[j] += the sum of column j over all rows, deterministically: block bx owns columns bx * 32 ..
 * + 31; thread (tx, ty) sums column bx * 32 + tx over rows ty, ty + 32, ... (reads coalesced across
 * tx), and thread (tx, 0) adds the 32 partial sums in ty order. No atomics, so the result does not
 * depend on which block or warp runs first. */
#define BT_COLSUM_TILE 32
template <typename T>
__global__ void k_colsum_acc(const T *x, T *y, int64_t rows, int64_t cols)
{
    __shared__ double part[BT_COLSUM_TILE][BT_COLSUM_TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t j = (int64_t)blockIdx.x * BT_COLSUM_TILE + tx;
    double s = 0;
    if (j < cols)
        for (int64_t r = ty; r < rows; r += BT_COLSUM_TILE) s += (double)x[r * cols + j];
    part[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && j < cols) {
        double t = 0;
        for (int k = 0; k < BT_COLSUM_TILE; k++) t += part[k][tx];
        y[j] += (T)t;
    }
}

extern "C" cudaError_t bt_k_add(cudaStream_t s, bt_dtype dt, const void *a, const void *b,
                                void *y, int64_t n)
{
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_add<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          (const T *)a, (const T *)b, (T *)y, n););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_mul(cudaStream_t s, bt_dtype dt, const void *a, const void *b,
                                void *y, int64_t n)
{
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_mul<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          (const T *)a, (const T *)b, (T *)y, n););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_acc(cudaStream_t s, bt_dtype dt, const void *x, void *y, int64_t n)
{
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_acc<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>((const T *)x, (T *)y, n););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_acc_mul(cudaStream_t s, bt_dtype dt, const void *x, const void *w,
                                    void *y, int64_t n)
{
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_acc_mul<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          (const T *)x, (const T *)w, (T *)y, n););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_fill_rows(cudaStream_t s, bt_dtype dt, const void *row, void *y,
                                      int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_fill_rows<T><<<bt_k_blocks(rows * cols), BT_K_THREADS, 0, s>>>(
                          (const T *)row, (T *)y, rows, cols););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_colsum_acc(cudaStream_t s, bt_dtype dt, const void *x, void *y,
                                       int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    const dim3 grid((unsigned)((cols + BT_COLSUM_TILE - 1) / BT_COLSUM_TILE));
    const dim3 block(BT_COLSUM_TILE, BT_COLSUM_TILE);
    BT_K_DISPATCH(dt, k_colsum_acc<T><<<grid, block, 0, s>>>((const T *)x, (T *)y, rows, cols););
    return cudaGetLastError();
}

/* ---- glue: the ops' CUDA forward and backward (bt_op_call -> launchers), C linkage ---------- */

extern "C" bt_status bt_cuda_add_forward(const bt_op_call *call)
{
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "add", call->out->dtype, &x));
    BT_K_TRY(bt_k_add, x->stream, call->out->dtype, call->in[0].data, call->in[1].data,
             call->out->data, bt_tensor_numel(call->out));
    return BT_OK;
}

extern "C" bt_status bt_cuda_add_backward(const bt_op_call *call)
{
    const bt_dtype dt = call->out_grad->dtype;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "add", dt, &x));
    const int64_t n = bt_tensor_numel(call->out_grad);
    for (int k = 0; k < 2; k++)
        if (BT_OPS_WANTS(&call->in_grad[k]))
            BT_K_TRY(bt_k_acc, x->stream, dt, call->out_grad->data, call->in_grad[k].data, n);
    return BT_OK;
}

extern "C" bt_status bt_cuda_mul_forward(const bt_op_call *call)
{
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "mul", call->out->dtype, &x));
    BT_K_TRY(bt_k_mul, x->stream, call->out->dtype, call->in[0].data, call->in[1].data,
             call->out->data, bt_tensor_numel(call->out));
    return BT_OK;
}

extern "C" bt_status bt_cuda_mul_backward(const bt_op_call *call)
{
    const bt_dtype dt = call->out_grad->dtype;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "mul", dt, &x));
    const int64_t n = bt_tensor_numel(call->out_grad);
    for (int k = 0; k < 2; k++) /* d(a b)/da = b, d(a b)/db = a */
        if (BT_OPS_WANTS(&call->in_grad[k]))
            BT_K_TRY(bt_k_acc_mul, x->stream, dt, call->out_grad->data, call->in[1 - k].data,
                     call->in_grad[k].data, n);
    return BT_OK;
}
