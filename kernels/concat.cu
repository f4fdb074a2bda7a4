/* kernels/concat.cu: split and concat on the last dimension (src/ops/concat.c): one strided copy
 * (or accumulation) of a piece's columns between the narrow side (rows, w) and the wide side
 * (rows, d) at column offset `at`. */
#include "kernel_util.cuh"

#include "cuda/op_glue.h"

/* to_wide 0: narrow (rows, w) = (or +=) wide[:, at:at+w]; 1: wide[:, at:at+w] = (or +=) narrow */
template <typename T>
__global__ void k_piece(const T *src, T *dst, int64_t rows, int64_t w, int64_t d, int64_t at,
                        int to_wide, int acc)
{
    BT_K_FOR(e, rows * w) {
        const int64_t r = e / w, j = e % w;
        const int64_t wide = r * d + at + j;
        const T v = to_wide ? src[e] : src[wide];
        T *p = to_wide ? dst + wide : dst + e;
        if (acc)
            *p += v;
        else
            *p = v;
    }
}

extern "C" cudaError_t bt_k_piece(cudaStream_t s, bt_dtype dt, const void *src, void *dst,
                                  int64_t rows, int64_t w, int64_t d, int64_t at, int to_wide,
                                  int acc)
{
    if (rows <= 0 || w <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_piece<T><<<bt_k_blocks(rows * w), BT_K_THREADS, 0, s>>>(
                          (const T *)src, (T *)dst, rows, w, d, at, to_wide, acc););
    return cudaGetLastError();
}

extern "C" bt_status bt_cuda_split_forward(const bt_op_call *call)
{
    const bt_concat_config *cf = (const bt_concat_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "split", call->out->dtype, &x));
    /* rows from the tensor: batch * rows but decoding (ops/op_configs.h) */
    BT_K_TRY(bt_k_piece, x->stream, call->out->dtype, call->in[0].data, call->out->data,
             bt_ops_whole(&call->in[0], cf->d), cf->width[0], cf->d, cf->offset[0], 0, 0);
    return BT_OK;
}

extern "C" bt_status bt_cuda_split_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_concat_config *cf = (const bt_concat_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "split", call->out_grad->dtype, &x));
    BT_K_TRY(bt_k_piece, x->stream, call->out_grad->dtype, call->out_grad->data,
             call->in_grad[0].data, call->batch * cf->rows, cf->width[0], cf->d, cf->offset[0], 1,
             1);
    return BT_OK;
}

extern "C" bt_status bt_cuda_concat_forward(const bt_op_call *call)
{
    const bt_concat_config *cf = (const bt_concat_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "concat", call->out->dtype, &x));
    const int64_t rows = bt_ops_whole(call->out, cf->d); /* batch * rows but decoding */
    for (int p = 0; p < cf->n; p++)
        BT_K_TRY(bt_k_piece, x->stream, call->out->dtype, call->in[p].data, call->out->data, rows,
                 cf->width[p], cf->d, cf->offset[p], 1, 0);
    return BT_OK;
}

extern "C" bt_status bt_cuda_concat_backward(const bt_op_call *call)
{
    const bt_concat_config *cf = (const bt_concat_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "concat", call->out_grad->dtype, &x));
    for (int p = 0; p < cf->n; p++) {
        if (!BT_OPS_WANTS(&call->in_grad[p])) continue;
        BT_K_TRY(bt_k_piece, x->stream, call->out_grad->dtype, call->out_grad->data,
                 call->in_grad[p].data, call->batch * cf->rows, cf->width[p], cf->d,
                 cf->offset[p], 0, 1);
    }
    return BT_OK;
}
