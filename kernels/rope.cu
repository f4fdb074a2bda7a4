/* kernels/rope.cu: the rope op (src/ops/rope.c) on the GPU. One thread per element of the q | k |
 * v rows: an element of a rotated head (q, k) finds its pair (i, i + hd/2), its position (the
 * row's index in the sample, or the decoding call's position) and the pair's inverse frequency
 * from bt_rope_inv_freq (ops/op_configs.h, the CPU kernels' one definition), and computes the
 * rotation as the CPU does: angle, cosine and sine in double, the rotated value in double rounded
 * once; v's elements are copied (forward) or passed back (backward). The backward adds the
 * inverse rotation into dx. */
#include "kernel_util.cuh"

#include "cuda/op_glue.h"

/* cos and sin of the angle of element col (within a rotated head) at position pos; *pair the
 * offset of its partner (+half or -half) and *sign the sine's sign in y = x cos + sign x' sin. */
__device__ __forceinline__ void rope_turn(const bt_rope_config &cf, int64_t col, int64_t pos,
                                          double *c, double *s, int64_t *pair, double *sign)
{
    const int64_t half = cf.hd / 2, j = col % cf.hd, i = j < half ? j : j - half;
    const double a = (double)pos * bt_rope_inv_freq(&cf, i);
    *c = cos(a);
    *s = sin(a);
    *pair = j < half ? half : -half;
    *sign = j < half ? -1.0 : 1.0;
}

/* y (rows, width) = x rotated; row r sits at position pos (>= 0) or r mod t (pos < 0) */
template <typename T>
__global__ void k_rope_forward(const T *x, T *y, bt_rope_config cf, int64_t rows, int64_t pos)
{
    const int64_t turned = cf.rotated * cf.hd;
    BT_K_FOR(e, rows * cf.width) {
        const int64_t r = e / cf.width, col = e % cf.width;
        if (col >= turned) {
            y[e] = x[e];
            continue;
        }
        double c, s, sign;
        int64_t pair;
        rope_turn(cf, col, pos >= 0 ? pos : r % cf.t, &c, &s, &pair, &sign);
        const double x0 = x[e], x1 = x[e + pair];
        y[e] = (T)(sign < 0 ? x0 * c - x1 * s : x0 * c + x1 * s);
    }
}

/* dx (rows, width) += dy rotated back (row r at position r mod t) */
template <typename T>
__global__ void k_rope_backward(const T *dy, T *dx, bt_rope_config cf, int64_t rows)
{
    const int64_t turned = cf.rotated * cf.hd;
    BT_K_FOR(e, rows * cf.width) {
        const int64_t r = e / cf.width, col = e % cf.width;
        if (col >= turned) {
            dx[e] += dy[e];
            continue;
        }
        double c, s, sign;
        int64_t pair;
        rope_turn(cf, col, r % cf.t, &c, &s, &pair, &sign);
        const double g0 = dy[e], g1 = dy[e + pair];
        /* the transpose: the partner's sine term changes sign */
        dx[e] += (T)(sign < 0 ? g0 * c + g1 * s : g0 * c - g1 * s);
    }
}

static cudaError_t rope_forward(cudaStream_t s, bt_dtype dt, const void *x, void *y,
                                const bt_rope_config *cf, int64_t rows, int64_t pos)
{
    const int64_t n = rows * cf->width;
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_rope_forward<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          (const T *)x, (T *)y, *cf, rows, pos););
    return cudaGetLastError();
}

static cudaError_t rope_backward(cudaStream_t s, bt_dtype dt, const void *dy, void *dx,
                                 const bt_rope_config *cf, int64_t rows)
{
    const int64_t n = rows * cf->width;
    if (n <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_rope_backward<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          (const T *)dy, (T *)dx, *cf, rows););
    return cudaGetLastError();
}

/* ---- glue: the op's CUDA forward, backward and decode (bt_op_call -> launchers), C linkage --- */

extern "C" bt_status bt_cuda_rope_forward(const bt_op_call *call)
{
    const bt_rope_config *cf = (const bt_rope_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "rope", call->out->dtype, &x));
    BT_K_TRY(rope_forward, x->stream, call->out->dtype, call->in[0].data, call->out->data, cf,
             call->batch * cf->t, (int64_t)-1);
    return BT_OK;
}

extern "C" bt_status bt_cuda_rope_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_rope_config *cf = (const bt_rope_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "rope", call->out_grad->dtype, &x));
    BT_K_TRY(rope_backward, x->stream, call->out_grad->dtype, call->out_grad->data,
             call->in_grad[0].data, cf, call->batch * cf->t);
    return BT_OK;
}

/* One row at call->position (decoding); the CPU's rope_decode, refusing what it refuses. */
extern "C" bt_status bt_cuda_rope_decode(const bt_op_call *call)
{
    const bt_rope_config *cf = (const bt_rope_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "rope", call->out->dtype, &x));
    if (call->position < 0)
        return bt_op_error(BT_ERR_INVALID_ARG, "rope: position %lld is negative", (long long)call->position);
    BT_K_TRY(rope_forward, x->stream, call->out->dtype, call->in[0].data, call->out->data, cf,
             (int64_t)1, call->position);
    return BT_OK;
}
