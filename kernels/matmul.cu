/* kernels/matmul.cu: matmul and transpose (src/ops/matmul.c). matmul is one cuBLAS GEMM per
 * matrix pair (row-major to column-major as cuda/op_glue.h explains); transpose is a 32 x 32
 * shared-memory tile kernel that writes or adds. */
#include "kernel_util.cuh"

#include "cuda/op_glue.h"

#define BT_TR_TILE 32

/* y (mats, c, r) = (or +=) x (mats, r, c) transposed */
template <typename T>
__global__ void k_transpose(const T *x, T *y, int64_t mats, int64_t r, int64_t c, int acc)
{
    __shared__ T tile[BT_TR_TILE][BT_TR_TILE + 1];
    const int64_t tiles_r = (r + BT_TR_TILE - 1) / BT_TR_TILE, tiles_c = (c + BT_TR_TILE - 1) / BT_TR_TILE;
    for (int64_t b = blockIdx.x; b < mats * tiles_r * tiles_c; b += gridDim.x) {
        const int64_t q = b / (tiles_r * tiles_c), tr = (b / tiles_c) % tiles_r, tc = b % tiles_c;
        const T *xq = x + q * r * c;
        T *yq = y + q * r * c;
        __syncthreads();
        for (int k = threadIdx.y; k < BT_TR_TILE; k += blockDim.y) {
            const int64_t i = tr * BT_TR_TILE + k, j = tc * BT_TR_TILE + threadIdx.x;
            if (i < r && j < c) tile[k][threadIdx.x] = xq[i * c + j];
        }
        __syncthreads();
        for (int k = threadIdx.y; k < BT_TR_TILE; k += blockDim.y) {
            const int64_t j = tc * BT_TR_TILE + k, i = tr * BT_TR_TILE + threadIdx.x;
            if (i < r && j < c) {
                if (acc)
                    yq[j * r + i] += tile[threadIdx.x][k];
                else
                    yq[j * r + i] = tile[threadIdx.x][k];
            }
        }
    }
}

extern "C" cudaError_t bt_k_transpose(cudaStream_t s, bt_dtype dt, const void *x, void *y,
                                      int64_t mats, int64_t r, int64_t c, int acc)
{
    if (mats <= 0 || r <= 0 || c <= 0) return cudaSuccess;
    const int64_t blocks = mats * ((r + BT_TR_TILE - 1) / BT_TR_TILE) * ((c + BT_TR_TILE - 1) / BT_TR_TILE);
    const dim3 block(BT_TR_TILE, 8);
    BT_K_DISPATCH(dt, k_transpose<T><<<bt_k_blocks_per_item(blocks), block, 0, s>>>(
                          (const T *)x, (T *)y, mats, r, c, acc););
    return cudaGetLastError();
}

extern "C" bt_status bt_cuda_matmul_forward(const bt_op_call *call)
{
    const bt_matmul_config *cf = (const bt_matmul_config *)call->config;
    const bt_dtype dt = call->out->dtype;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "matmul", dt, &x));
    BT_TRY(bt_cuda_fits_int("matmul", cf->m, cf->k, cf->n));
    const int M = (int)cf->m, K = (int)cf->k, N = (int)cf->n;
    const int64_t mats = bt_ops_whole(call->out, cf->m * cf->n); /* batch * lead but decoding */
    if (mats < 0 || bt_ops_whole(&call->in[0], cf->m * cf->k) != mats ||
        bt_ops_whole(&call->in[1], cf->k * cf->n) != mats)
        return bt_ops_matmul_rows_error("matmul");
    for (int64_t q = 0; q < mats; q++) /* y^T (N, M) = b^T a^T */
        BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K,
                            bt_cuda_at(call->in[1].data, q * K * N, dt), N,
                            bt_cuda_at(call->in[0].data, q * M * K, dt), K, 0.0,
                            bt_cuda_at(call->out->data, q * M * N, dt), N));
    return BT_OK;
}

extern "C" bt_status bt_cuda_matmul_backward(const bt_op_call *call)
{
    const bt_matmul_config *cf = (const bt_matmul_config *)call->config;
    const bt_dtype dt = call->out_grad->dtype;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "matmul", dt, &x));
    BT_TRY(bt_cuda_fits_int("matmul", cf->m, cf->k, cf->n));
    const int M = (int)cf->m, K = (int)cf->k, N = (int)cf->n;
    for (int64_t q = 0; q < call->batch * cf->lead; q++) {
        const void *a = bt_cuda_at(call->in[0].data, q * M * K, dt);
        const void *b = bt_cuda_at(call->in[1].data, q * K * N, dt);
        const void *dy = bt_cuda_at(call->out_grad->data, q * M * N, dt);
        if (BT_OPS_WANTS(&call->in_grad[0])) /* da^T (K, M) += b dy^T: col-major b^T is (N, K) */
            BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_T, CUBLAS_OP_N, K, M, N, b, N,
                                dy, N, 1.0, bt_cuda_at(call->in_grad[0].data, q * M * K, dt), K));
        if (BT_OPS_WANTS(&call->in_grad[1])) /* db^T (N, K) += dy^T a */
            BT_TRY(bt_cuda_gemm(x, dt, call->precision, CUBLAS_OP_N, CUBLAS_OP_T, N, K, M, dy, N,
                                a, K, 1.0, bt_cuda_at(call->in_grad[1].data, q * K * N, dt), N));
    }
    return BT_OK;
}

extern "C" bt_status bt_cuda_transpose_forward(const bt_op_call *call)
{
    const bt_matmul_config *cf = (const bt_matmul_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "transpose", call->out->dtype, &x));
    const int64_t mats = bt_ops_whole(&call->in[0], cf->m * cf->n); /* batch * lead but decoding */
    if (mats < 0) return bt_ops_matmul_rows_error("transpose");
    BT_K_TRY(bt_k_transpose, x->stream, call->out->dtype, call->in[0].data, call->out->data, mats,
             cf->m, cf->n, 0);
    return BT_OK;
}

extern "C" bt_status bt_cuda_transpose_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_matmul_config *cf = (const bt_matmul_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "transpose", call->out_grad->dtype, &x));
    BT_K_TRY(bt_k_transpose, x->stream, call->out_grad->dtype, call->out_grad->data,
             call->in_grad[0].data, call->batch * cf->lead, cf->n, cf->m, 1);
    return BT_OK;
}
