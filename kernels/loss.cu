/* kernels/loss.cu: mse and cross_entropy, one value per sample (src/ops/loss_tmpl.h). mse's
 * forward runs one block per sample; cross_entropy runs one block per row of logits (a sample
 * has `positions` rows) writing the row's loss to the device's reduction scratch, then sums each
 * sample's rows in position order (deterministic, no atomics). A label outside [0, classes) is
 * recorded in the fault record (see kernels.h) and the row is skipped. */
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

/* Cross-entropy forward, deterministically, in two ordered passes over rows [q0, q0 + rows) (whole
 * samples): k_ce_rows writes each row's loss (lse - x[label], double) to part[q - q0], one block
 * per row; k_ce_samples then sums each sample's rows in position order, in double, as the CPU
 * kernel does, and divides by the positions. No atomics. */
template <typename T>
__global__ void k_ce_rows(const T *x, const int32_t *label, double *part, int64_t q0, int64_t rows,
                          int64_t c, bt_k_fault *fault)
{
    BT_K_FOR_BLOCK(r, rows) {
        const int64_t q = q0 + r;
        const int32_t lab = label[q]; /* the same for the whole block */
        if (lab < 0 || lab >= c) {
            if (threadIdx.x == 0) {
                bt_k_raise(fault, BT_K_FAULT_LABEL, lab, q, c);
                part[r] = 0;
            }
            continue;
        }
        const T *xr = x + q * c;
        const double lse = row_logsumexp(xr, c);
        if (threadIdx.x == 0) part[r] = lse - (double)xr[lab];
    }
}

template <typename T>
__global__ void k_ce_samples(const double *part, T *y, int64_t n0, int64_t samples, int64_t np)
{
    BT_K_FOR(i, samples) {
        double sum = 0;
        for (int64_t k = 0; k < np; k++) sum += part[i * np + k];
        y[n0 + i] = (T)(sum / (double)np);
    }
}

/* Samples longer than the scratch: one block per sample walks its positions in order. */
template <typename T>
__global__ void k_ce_long(const T *x, const int32_t *label, T *y, int64_t batch, int64_t np,
                          int64_t c, bt_k_fault *fault)
{
    BT_K_FOR_BLOCK(n, batch) {
        double sum = 0;
        for (int64_t q = n * np; q < (n + 1) * np; q++) {
            const int32_t lab = label[q];
            if (lab < 0 || lab >= c) {
                if (threadIdx.x == 0) bt_k_raise(fault, BT_K_FAULT_LABEL, lab, q, c);
                continue;
            }
            const T *xr = x + q * c;
            const double lse = row_logsumexp(xr, c);
            sum += lse - (double)xr[lab];
        }
        if (threadIdx.x == 0) y[n] = (T)(sum / (double)np);
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
                                                  double *part, int64_t part_n, bt_k_fault *fault)
{
    if (batch <= 0) return cudaSuccess;
    if (dt != BT_F32 && dt != BT_F64) return cudaErrorInvalidValue;
    const size_t size = dt == BT_F32 ? sizeof(float) : sizeof(double);
    if (positions <= 0 || classes <= 0) return cudaMemsetAsync(y, 0, (size_t)batch * size, s);
    const unsigned threads = bt_k_row_threads(classes);
    const int64_t per_chunk = part_n / positions; /* whole samples per pass */
    if (per_chunk < 1) {
        BT_K_DISPATCH(dt, k_ce_long<T><<<bt_k_blocks_per_item(batch), threads, 0, s>>>(
                              (const T *)x, label, (T *)y, batch, positions, classes, fault););
        return cudaGetLastError();
    }
    for (int64_t n0 = 0; n0 < batch; n0 += per_chunk) {
        const int64_t samples = batch - n0 < per_chunk ? batch - n0 : per_chunk;
        const int64_t rows = samples * positions;
        BT_K_DISPATCH(dt, k_ce_rows<T><<<bt_k_blocks_per_item(rows), threads, 0, s>>>(
                              (const T *)x, label, part, n0 * positions, rows, classes, fault););
        BT_K_DISPATCH(dt, k_ce_samples<T><<<bt_k_blocks(samples), BT_K_THREADS, 0, s>>>(
                              part, (T *)y, n0, samples, positions););
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
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
             cf->classes, x->reduce, x->reduce_n, x->fault);
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
