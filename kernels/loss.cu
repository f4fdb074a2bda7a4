/* kernels/loss.cu: mse and cross_entropy, one value per sample (src/ops/loss_tmpl.h). mse's
 * forward runs one block per sample; cross_entropy runs one block per row of logits (a sample
 * has `positions` rows) and adds each row's share of the sample's mean into y atomically, after
 * zeroing y on the stream. A label outside [0, classes) is recorded in the fault record (see
 * kernels.h) and the row is skipped. */
#include "kernel_util.cuh"

#include "cuda/op_glue.h"

template <typename T>
__global__ void k_mse_forward(const T *p, const T *t, T *y, int64_t batch, int64_t per)
{
    __shared__ double shm[32];
    BT_K_FOR_BLOCK(n, batch) {
        const T *pn = p + n * per, *tn = t + n * per;
        double sum = 0;
        for (int64_t i = threadIdx.x; i < per; i += blockDim.x) {
            const double d = (double)pn[i] - (double)tn[i];
            sum += d * d;
        }
        sum = bt_k_block_sum(sum, shm);
        if (threadIdx.x == 0) y[n] = (T)(sum / (double)per);
    }
}

template <typename T>
__global__ void k_mse_backward(const T *p, const T *t, const T *dy, T *dx, double sign,
                               int64_t batch, int64_t per)
{
    BT_K_FOR(i, batch * per) {
        const int64_t n = i / per;
        const T g = (T)(sign * 2.0 * (double)dy[n] / (double)per);
        dx[i] += g * (p[i] - t[i]);
    }
}

/* log sum exp of one row of c logits (stable), to every thread of the block. */
template <typename T>
__device__ double row_logsumexp(const T *xr, int64_t c)
{
    __shared__ T shm_max[32];
    __shared__ double shm_sum[32];
    T m = xr[0];
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) m = xr[j] > m ? xr[j] : m;
    m = bt_k_block_max(m, xr[0], shm_max);
    double sum = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) sum += (double)bt_k_exp(xr[j] - m);
    sum = bt_k_block_sum(sum, shm_sum);
    return (double)m + log(sum);
}

template <typename T>
__global__ void k_ce_forward(const T *x, const int32_t *label, T *y, int64_t rows, int64_t np,
                             int64_t c, bt_k_fault *fault)
{
    BT_K_FOR_BLOCK(q, rows) {
        const int32_t lab = label[q]; /* the same for the whole block */
        if (lab < 0 || lab >= c) {
            if (threadIdx.x == 0) bt_k_raise(fault, BT_K_FAULT_LABEL, lab, q, c);
            continue;
        }
        const T *xr = x + q * c;
        const double lse = row_logsumexp(xr, c);
        if (threadIdx.x == 0) atomicAdd(&y[q / np], (T)((lse - (double)xr[lab]) / (double)np));
    }
}

template <typename T>
__global__ void k_ce_backward(const T *x, const int32_t *label, const T *dy, T *dx, int64_t rows,
                              int64_t np, int64_t c, bt_k_fault *fault)
{
    BT_K_FOR_BLOCK(q, rows) {
        const int32_t lab = label[q];
        if (lab < 0 || lab >= c) {
            if (threadIdx.x == 0) bt_k_raise(fault, BT_K_FAULT_LABEL, lab, q, c);
            continue;
        }
        const T *xr = x + q * c;
        T *dxr = dx + q * c;
        const T lse = (T)row_logsumexp(xr, c);
        const T gr = (T)((double)dy[q / np] / (double)np);
        /* d/dx_j = g (softmax_j - [j == label]), added in the CPU kernel's order */
        for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
            dxr[j] += gr * bt_k_exp(xr[j] - lse);
            if (j == lab) dxr[j] -= gr;
        }
    }
}

extern "C" cudaError_t bt_k_mse_forward(cudaStream_t s, bt_dtype dt, const void *p, const void *t,
                                        void *y, int64_t batch, int64_t per)
{
    if (batch <= 0 || per <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_mse_forward<T><<<bt_k_blocks_per_item(batch), bt_k_row_threads(per), 0,
                                         s>>>((const T *)p, (const T *)t, (T *)y, batch, per););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_mse_backward(cudaStream_t s, bt_dtype dt, const void *p,
                                         const void *t, const void *dy, void *dx, double sign,
                                         int64_t batch, int64_t per)
{
    if (batch <= 0 || per <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_mse_backward<T><<<bt_k_blocks(batch * per), BT_K_THREADS, 0, s>>>(
                          (const T *)p, (const T *)t, (const T *)dy, (T *)dx, sign, batch, per););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_cross_entropy_forward(cudaStream_t s, bt_dtype dt, const void *x,
                                                  const int32_t *label, void *y, int64_t batch,
                                                  int64_t positions, int64_t classes,
                                                  bt_k_fault *fault)
{
    if (batch <= 0) return cudaSuccess;
    if (dt != BT_F32 && dt != BT_F64) return cudaErrorInvalidValue;
    const size_t size = dt == BT_F32 ? sizeof(float) : sizeof(double);
    cudaError_t e = cudaMemsetAsync(y, 0, (size_t)batch * size, s);
    if (e != cudaSuccess || positions <= 0 || classes <= 0) return e;
    const int64_t rows = batch * positions;
    BT_K_DISPATCH(dt, k_ce_forward<T><<<bt_k_blocks_per_item(rows), bt_k_row_threads(classes), 0,
                                        s>>>((const T *)x, label, (T *)y, rows, positions,
                                             classes, fault););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_cross_entropy_backward(cudaStream_t s, bt_dtype dt, const void *x,
                                                   const int32_t *label, const void *dy, void *dx,
                                                   int64_t batch, int64_t positions,
                                                   int64_t classes, bt_k_fault *fault)
{
    const int64_t rows = batch * positions;
    if (rows <= 0 || classes <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_ce_backward<T><<<bt_k_blocks_per_item(rows), bt_k_row_threads(classes), 0,
                                         s>>>((const T *)x, label, (const T *)dy, (T *)dx, rows,
                                              positions, classes, fault););
    return cudaGetLastError();
}

/* ---- glue: the ops' CUDA forward and backward (bt_op_call -> launchers), C linkage ---------- */

extern "C" bt_status bt_cuda_mse_forward(const bt_op_call *call)
{
    const int64_t per = call->batch ? bt_tensor_numel(&call->in[0]) / call->batch : 0;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "mse", call->out->dtype, &x));
    BT_K_TRY(bt_k_mse_forward, x->stream, call->out->dtype, call->in[0].data, call->in[1].data,
             call->out->data, call->batch, per);
    return BT_OK;
}

extern "C" bt_status bt_cuda_mse_backward(const bt_op_call *call)
{
    const int64_t per = call->batch ? bt_tensor_numel(&call->in[0]) / call->batch : 0;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "mse", call->out_grad->dtype, &x));
    for (int k = 0; k < 2; k++)
        if (BT_OPS_WANTS(&call->in_grad[k]))
            BT_K_TRY(bt_k_mse_backward, x->stream, call->out_grad->dtype, call->in[0].data,
                     call->in[1].data, call->out_grad->data, call->in_grad[k].data,
                     k == 0 ? 1.0 : -1.0, call->batch, per);
    return BT_OK;
}

extern "C" bt_status bt_cuda_cross_entropy_forward(const bt_op_call *call)
{
    const bt_cross_entropy_config *cf = (const bt_cross_entropy_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "cross_entropy", call->out->dtype, &x));
    x->fault_armed = 1;
    BT_K_TRY(bt_k_cross_entropy_forward, x->stream, call->out->dtype, call->in[0].data,
             (const int32_t *)call->in[1].data, call->out->data, call->batch, cf->positions,
             cf->classes, x->fault);
    return BT_OK;
}

extern "C" bt_status bt_cuda_cross_entropy_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_cross_entropy_config *cf = (const bt_cross_entropy_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "cross_entropy", call->out_grad->dtype, &x));
    x->fault_armed = 1;
    BT_K_TRY(bt_k_cross_entropy_backward, x->stream, call->out_grad->dtype, call->in[0].data,
             (const int32_t *)call->in[1].data, call->out_grad->data, call->in_grad[0].data,
             call->batch, cf->positions, cf->classes, x->fault);
    return BT_OK;
}
