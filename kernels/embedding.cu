/* kernels/embedding.cu: table lookups by int32 index, one thread per output element. The
 * backward adds rows of dy into the table's gradient atomically (an index may repeat within a
 * micro-batch), so its sums are not bitwise reproducible; the forward is exact. An index outside
 * [0, num) is recorded in the fault record (see kernels.h) instead of failing the call. */
#include "kernel_util.cuh"

#include "cuda/op_glue.h"

template <typename T>
__global__ void k_embedding_forward(const int32_t *ids, const T *w, T *y, int64_t n, int64_t num,
                                    int64_t dim, bt_k_fault *fault)
{
    BT_K_FOR(i, n * dim) {
        const int64_t t = i / dim, j = i - t * dim;
        const int32_t id = ids[t];
        if (id < 0 || id >= num) {
            y[i] = 0;
            if (j == 0) bt_k_raise(fault, BT_K_FAULT_EMBEDDING_INDEX, id, t, num);
        } else {
            y[i] = w[(int64_t)id * dim + j];
        }
    }
}

template <typename T>
__global__ void k_embedding_backward(const int32_t *ids, const T *dy, T *dw, int64_t n,
                                     int64_t num, int64_t dim, bt_k_fault *fault)
{
    BT_K_FOR(i, n * dim) {
        const int64_t t = i / dim, j = i - t * dim;
        const int32_t id = ids[t];
        if (id < 0 || id >= num) {
            if (j == 0) bt_k_raise(fault, BT_K_FAULT_EMBEDDING_INDEX, id, t, num);
        } else {
            atomicAdd(&dw[(int64_t)id * dim + j], dy[i]);
        }
    }
}

extern "C" cudaError_t bt_k_embedding_forward(cudaStream_t s, bt_dtype dt, const int32_t *ids,
                                              const void *w, void *y, int64_t n, int64_t num,
                                              int64_t dim, bt_k_fault *fault)
{
    if (n <= 0 || dim <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_embedding_forward<T><<<bt_k_blocks(n * dim), BT_K_THREADS, 0, s>>>(
                          ids, (const T *)w, (T *)y, n, num, dim, fault););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_embedding_backward(cudaStream_t s, bt_dtype dt, const int32_t *ids,
                                               const void *dy, void *dw, int64_t n, int64_t num,
                                               int64_t dim, bt_k_fault *fault)
{
    if (n <= 0 || dim <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_embedding_backward<T><<<bt_k_blocks(n * dim), BT_K_THREADS, 0, s>>>(
                          ids, (const T *)dy, (T *)dw, n, num, dim, fault););
    return cudaGetLastError();
}

/* ---- glue: the ops' CUDA forward and backward (bt_op_call -> launchers), C linkage ---------- */

extern "C" bt_status bt_cuda_embedding_forward(const bt_op_call *call)
{
    const bt_embedding_config *cf = (const bt_embedding_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "embedding", call->out->dtype, &x));
    x->fault_armed = 1;
    BT_K_TRY(bt_k_embedding_forward, x->stream, call->out->dtype, (const int32_t *)call->in[0].data,
             call->param[0].data, call->out->data, bt_tensor_numel(&call->in[0]), cf->num,
             cf->dim, x->fault);
    return BT_OK;
}

extern "C" bt_status bt_cuda_embedding_backward(const bt_op_call *call)
{
    if (!call->param_grad || !BT_OPS_WANTS(&call->param_grad[0])) return BT_OK;
    const bt_embedding_config *cf = (const bt_embedding_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "embedding", call->out_grad->dtype, &x));
    x->fault_armed = 1;
    BT_K_TRY(bt_k_embedding_backward, x->stream, call->out_grad->dtype,
             (const int32_t *)call->in[0].data,
             call->out_grad->data, call->param_grad[0].data, bt_tensor_numel(&call->in[0]),
             cf->num, cf->dim, x->fault);
    return BT_OK;
}
