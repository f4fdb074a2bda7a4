/* kernels/embedding.cu: table lookups by int32 index, one thread per output element. The
 * backward gives each table row to one block (the first position holding its index), which adds
 * the rows of dy in position order: no atomics, the CPU's sums bit for bit (up to 16384 positions
 * per micro-batch; beyond, atomics in no fixed order); the forward is exact. An index outside
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

/* Deterministic backward by row ownership: block t handles position t; if t is the first position
 * holding its index, the block owns that table row and thread j adds dy[t'][j] for every later
 * position t' with the same index, in position order, just as the CPU kernel does (so the result
 * is the CPU's, bit for bit). Other positions' blocks do nothing. The ownership test and the walk
 * read the indices (the walk through shared memory): O(n^2) index reads in all against O(n dim)
 * additions, cheap up to BT_K_EMB_DET_MAX positions per call. */
#define BT_K_EMB_TILE 256
template <typename T>
__global__ void k_embedding_backward(const int32_t *ids, const T *dy, T *dw, int64_t n,
                                     int64_t num, int64_t dim, bt_k_fault *fault)
{
    __shared__ int32_t tile[BT_K_EMB_TILE];
    __shared__ int owner;
    BT_K_FOR_BLOCK(t, n) {
        const int32_t id = ids[t];
        if (id < 0 || id >= num) {
            if (threadIdx.x == 0) bt_k_raise(fault, BT_K_FAULT_EMBEDDING_INDEX, id, t, num);
            continue; /* uniform across the block: every thread read the same id */
        }
        if (threadIdx.x == 0) owner = 1;
        __syncthreads();
        for (int64_t u = threadIdx.x; u < t; u += blockDim.x)
            if (ids[u] == id) owner = 0; /* a benign race: every writer writes 0 */
        __syncthreads();
        const int own = owner;
        __syncthreads(); /* everyone read owner before the next position's thread 0 resets it */
        if (!own) continue;
        T acc[4];
        for (int64_t base = 0; base < dim; base += (int64_t)blockDim.x * 4) {
            for (int k = 0; k < 4; k++) {
                const int64_t j = base + (int64_t)k * blockDim.x + threadIdx.x;
                acc[k] = j < dim ? dw[(int64_t)id * dim + j] : (T)0;
            }
            for (int64_t u0 = t; u0 < n; u0 += BT_K_EMB_TILE) {
                const int64_t m = n - u0 < BT_K_EMB_TILE ? n - u0 : BT_K_EMB_TILE;
                __syncthreads();
                for (int64_t q = threadIdx.x; q < m; q += blockDim.x) tile[q] = ids[u0 + q];
                __syncthreads();
                for (int64_t q = 0; q < m; q++) {
                    if (tile[q] != id) continue;
                    for (int k = 0; k < 4; k++) {
                        const int64_t j = base + (int64_t)k * blockDim.x + threadIdx.x;
                        if (j < dim) acc[k] += dy[(u0 + q) * dim + j];
                    }
                }
            }
            for (int k = 0; k < 4; k++) {
                const int64_t j = base + (int64_t)k * blockDim.x + threadIdx.x;
                if (j < dim) dw[(int64_t)id * dim + j] = acc[k];
            }
        }
    }
}

/* Past BT_K_EMB_DET_MAX positions in one call the ownership walk would cost too much: each
 * element adds atomically, in no fixed order (docs/gpu.md says so). */
#define BT_K_EMB_DET_MAX 16384
template <typename T>
__global__ void k_embedding_backward_atomic(const int32_t *ids, const T *dy, T *dw, int64_t n,
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
    if (n > BT_K_EMB_DET_MAX) {
        BT_K_DISPATCH(dt, k_embedding_backward_atomic<T><<<bt_k_blocks(n * dim), BT_K_THREADS, 0,
                                                           s>>>(ids, (const T *)dy, (T *)dw, n,
                                                                num, dim, fault););
        return cudaGetLastError();
    }
    BT_K_DISPATCH(dt, k_embedding_backward<T><<<bt_k_blocks_per_item(n), bt_k_row_threads(dim),
                                                0, s>>>(ids, (const T *)dy, (T *)dw, n, num, dim,
                                                        fault););
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

/* ---- pos_embedding: y = x + w[0:T], per sample (tc = T C elements) ------------------------- */

template <typename T>
__global__ void k_pos_embedding_forward(const T *x, const T *w, T *y, int64_t n, int64_t tc)
{
    BT_K_FOR(e, n) y[e] = x[e] + w[e % tc];
}

extern "C" cudaError_t bt_k_pos_embedding_forward(cudaStream_t s, bt_dtype dt, const void *x,
                                                  const void *w, void *y, int64_t n, int64_t tc)
{
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_pos_embedding_forward<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          (const T *)x, (const T *)w, (T *)y, n, tc););
    return cudaGetLastError();
}

extern "C" bt_status bt_cuda_pos_embedding_forward(const bt_op_call *call)
{
    const bt_pos_embedding_config *cf = (const bt_pos_embedding_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "pos_embedding", call->out->dtype, &x));
    BT_K_TRY(bt_k_pos_embedding_forward, x->stream, call->out->dtype, call->in[0].data,
             call->param[0].data, call->out->data, bt_tensor_numel(call->out), cf->t * cf->c);
    return BT_OK;
}

/* dx += dy; dw[0:T] += the sum of dy over the batch (a deterministic column sum) */
extern "C" bt_status bt_cuda_pos_embedding_backward(const bt_op_call *call)
{
    const bt_pos_embedding_config *cf = (const bt_pos_embedding_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "pos_embedding", call->out_grad->dtype, &x));
    const bt_dtype dt = call->out_grad->dtype;
    if (BT_OPS_WANTS(&call->in_grad[0]))
        BT_K_TRY(bt_k_acc, x->stream, dt, call->out_grad->data, call->in_grad[0].data,
                 bt_tensor_numel(call->out_grad));
    if (call->param_grad && BT_OPS_WANTS(&call->param_grad[0]))
        BT_K_TRY(bt_k_colsum_acc, x->stream, dt, call->out_grad->data, call->param_grad[0].data,
                 call->batch, cf->t * cf->c);
    return BT_OK;
}

/* One position (decoding): y (C) = x + w[position], the CPU's pos_embedding_decode. */
extern "C" bt_status bt_cuda_pos_embedding_decode(const bt_op_call *call)
{
    const bt_pos_embedding_config *cf = (const bt_pos_embedding_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "pos_embedding", call->out->dtype, &x));
    if (call->position < 0 || call->position >= cf->num)
        return bt_op_error(BT_ERR_INVALID_ARG, "pos_embedding: position %lld is outside the table of %lld",
                           (long long)call->position, (long long)cf->num);
    BT_K_TRY(bt_k_pos_embedding_forward, x->stream, call->out->dtype, call->in[0].data,
             bt_cuda_at(call->param[0].data, call->position * cf->c, call->out->dtype), call->out->data,
             cf->c, cf->c);
    return BT_OK;
}
