/* kernels/precision.cu: rounding f32 values in place to bf16 or f16 for mixed precision (the
 * values stay f32). The conversions are the hardware's round to nearest even (cvt.rn): the same
 * results as src/core/half.c on the CPU, overflow to infinity included, except that a NaN comes
 * back as the canonical NaN rather than with its payload. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernel_util.cuh"

__global__ void k_round_bf16(float *x, int64_t n)
{
    BT_K_FOR(i, n) x[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
}

__global__ void k_round_f16(float *x, int64_t n)
{
    BT_K_FOR(i, n) x[i] = __half2float(__float2half_rn(x[i]));
}

extern "C" cudaError_t bt_k_round(cudaStream_t s, bt_dtype precision, float *x, int64_t n)
{
    if (precision == BT_F32 || n <= 0) return cudaSuccess;
    if (precision == BT_BF16)
        k_round_bf16<<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(x, n);
    else if (precision == BT_F16)
        k_round_f16<<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(x, n);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}
