/* kernels/dropout.cu: dropout with the CPU kernel's mask (src/ops/dropout.c), bit for bit: the
 * keep decision of element i is a pure function of (seed, i). Element pair (2j, 2j+1) takes the
 * low and high 32 bits of splitmix64(splitmix64(seed) + j); an element is kept where its draw is
 * >= threshold. One thread per pair. */
#include "kernel_util.cuh"

#include "cuda/op_glue.h"

/* splitmix64's output function, as src/ops/dropout.c. */
__host__ __device__ static inline uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

template <typename T>
__global__ void k_dropout_forward(const T *x, unsigned char *mask, T *y, int64_t n, uint64_t key,
                                  uint32_t threshold, T scale)
{
    BT_K_FOR(j, (n + 1) / 2) {
        const uint64_t h = splitmix64(key + (uint64_t)j);
        const int64_t i = 2 * j;
        const unsigned char m0 = (uint32_t)h >= threshold;
        mask[i] = m0;
        y[i] = x[i] * (scale * (T)m0);
        if (i + 1 < n) {
            const unsigned char m1 = (uint32_t)(h >> 32) >= threshold;
            mask[i + 1] = m1;
            y[i + 1] = x[i + 1] * (scale * (T)m1);
        }
    }
}

template <typename T>
__global__ void k_dropout_backward(const T *dy, const unsigned char *mask, T *dx, int64_t n,
                                   T scale)
{
    BT_K_FOR(i, n) dx[i] += dy[i] * (scale * (T)mask[i]);
}

extern "C" cudaError_t bt_k_dropout_forward(cudaStream_t s, bt_dtype dt, const void *x,
                                            unsigned char *mask, void *y, int64_t n,
                                            uint64_t seed, uint32_t threshold, double scale)
{
    if (n <= 0) return cudaSuccess;
    const uint64_t key = splitmix64(seed);
    BT_K_DISPATCH(dt, k_dropout_forward<T><<<bt_k_blocks((n + 1) / 2), BT_K_THREADS, 0, s>>>(
                          (const T *)x, mask, (T *)y, n, key, threshold, (T)scale););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_dropout_backward(cudaStream_t s, bt_dtype dt, const void *dy,
                                             const unsigned char *mask, void *dx, int64_t n,
                                             double scale)
{
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_dropout_backward<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          (const T *)dy, mask, (T *)dx, n, (T)scale););
    return cudaGetLastError();
}

/* ---- glue: the ops' CUDA forward and backward (bt_op_call -> launchers), C linkage ---------- */

extern "C" bt_status bt_cuda_dropout_forward(const bt_op_call *call)
{
    const double p = ((const bt_dropout_config *)call->config)->p;
    const bt_dtype dt = call->out->dtype;
    const int64_t n = bt_tensor_numel(call->out);
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "dropout", dt, &x));
    if (!call->training || p == 0)
        return bt_cuda_copy(x, call->out->data, call->in[0].data, (size_t)n * bt_cuda_esize(dt));
    if (!call->saved)
        return bt_op_error(BT_ERR_INTERNAL, "dropout: training forward without a saved buffer");
    const uint32_t threshold = (uint32_t)(p * 4294967296.0); /* p < 1, so < 2^32 */
    BT_K_TRY(bt_k_dropout_forward, x->stream, dt, call->in[0].data, (unsigned char *)call->saved,
             call->out->data, n, call->seed, threshold, 1.0 / (1.0 - p));
    return BT_OK;
}

extern "C" bt_status bt_cuda_dropout_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const double p = ((const bt_dropout_config *)call->config)->p;
    const bt_dtype dt = call->out_grad->dtype;
    const int64_t n = bt_tensor_numel(call->out_grad);
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "dropout", dt, &x));
    if (!call->training || p == 0) {
        BT_K_TRY(bt_k_acc, x->stream, dt, call->out_grad->data, call->in_grad[0].data, n);
        return BT_OK;
    }
    if (!call->saved)
        return bt_op_error(BT_ERR_INTERNAL, "dropout: training backward without the mask");
    BT_K_TRY(bt_k_dropout_backward, x->stream, dt, call->out_grad->data,
             (const unsigned char *)call->saved, call->in_grad[0].data, n, 1.0 / (1.0 - p));
    return BT_OK;
}
