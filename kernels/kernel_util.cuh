/* kernels/kernel_util.cuh: what the .cu files share: launch sizing, grid-stride loops, float/double
 * math overloads, block reductions and the fault record. Included by .cu files only (it holds
 * templates and device code); every function here is static or inline, so each .cu file is a
 * self-contained translation unit and no relocatable device code is needed.
 *
 * Reductions (bt_k_block_sum, bt_k_block_max) must be called by every thread of the block, with
 * blockDim.x a multiple of 32 and at most 1024; they return the result to every thread. */
#ifndef BT_KERNEL_UTIL_CUH
#define BT_KERNEL_UTIL_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels.h"

#define BT_K_THREADS 256
#define BT_K_MAX_BLOCKS 65535

/* Blocks for a grid-stride loop over n items with BT_K_THREADS threads each. */
static inline unsigned bt_k_blocks(int64_t n)
{
    int64_t b = (n + BT_K_THREADS - 1) / BT_K_THREADS;
    if (b < 1) b = 1;
    if (b > BT_K_MAX_BLOCKS) b = BT_K_MAX_BLOCKS;
    return (unsigned)b;
}

/* Blocks for a loop with one block per item (rows, samples), capped like bt_k_blocks. */
static inline unsigned bt_k_blocks_per_item(int64_t items)
{
    if (items < 1) return 1;
    return (unsigned)(items > BT_K_MAX_BLOCKS ? BT_K_MAX_BLOCKS : items);
}

/* Threads for one block working on a row of d elements: d rounded up to a warp, 32 to 256. */
static inline unsigned bt_k_row_threads(int64_t d)
{
    int64_t t = (d + 31) / 32 * 32;
    if (t < 32) t = 32;
    if (t > BT_K_THREADS) t = BT_K_THREADS;
    return (unsigned)t;
}

/* Grid-stride loop of the calling thread over [0, n). */
#define BT_K_FOR(i, n)                                                       \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)gridDim.x * blockDim.x)

/* Block-stride loop of the calling block over items [0, n) (one block per item). */
#define BT_K_FOR_BLOCK(r, n) for (int64_t r = blockIdx.x; r < (n); r += gridDim.x)

/* Runs the statements that follow with T as float or double by dt; returns
 * cudaErrorInvalidValue for other dtypes. Usage: BT_K_DISPATCH(dt, k<T><<<g, b, 0, s>>>(...););
 */
#define BT_K_DISPATCH(dt, ...)                       \
    do {                                             \
        if ((dt) == BT_F32) {                        \
            typedef float T;                         \
            __VA_ARGS__                              \
        } else if ((dt) == BT_F64) {                 \
            typedef double T;                        \
            __VA_ARGS__                              \
        } else {                                     \
            return cudaErrorInvalidValue;            \
        }                                            \
    } while (0)

/* ---- math for float and double (the CPU reference uses expf/exp and so on by type) ---------- */

__device__ __forceinline__ float bt_k_exp(float x) { return expf(x); }
__device__ __forceinline__ double bt_k_exp(double x) { return exp(x); }
__device__ __forceinline__ float bt_k_log(float x) { return logf(x); }
__device__ __forceinline__ double bt_k_log(double x) { return log(x); }
__device__ __forceinline__ float bt_k_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double bt_k_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float bt_k_erf(float x) { return erff(x); }
__device__ __forceinline__ double bt_k_erf(double x) { return erf(x); }
__device__ __forceinline__ float bt_k_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double bt_k_sqrt(double x) { return sqrt(x); }

/* ---- reductions ----------------------------------------------------------------------------- */

__device__ __forceinline__ double bt_k_warp_sum(double v)
{
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

template <typename T>
__device__ __forceinline__ T bt_k_warp_max(T v)
{
    for (int off = 16; off > 0; off >>= 1) {
        const T o = __shfl_down_sync(0xffffffffu, v, off);
        v = o > v ? o : v;
    }
    return v;
}

/* Sum of v over the block, to every thread; shm: 32 doubles of shared memory. */
__device__ __forceinline__ double bt_k_block_sum(double v, double *shm)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    v = bt_k_warp_sum(v);
    __syncthreads(); /* a previous reduction may still be reading shm[0] */
    if (lane == 0) shm[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? shm[lane] : 0.0;
        v = bt_k_warp_sum(v);
        if (lane == 0) shm[0] = v;
    }
    __syncthreads();
    return shm[0];
}

/* Maximum of v over the block, to every thread; shm: 32 T of shared memory. Threads without an
 * element pass lowest. */
template <typename T>
__device__ __forceinline__ T bt_k_block_max(T v, T lowest, T *shm)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    v = bt_k_warp_max(v);
    __syncthreads();
    if (lane == 0) shm[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? shm[lane] : lowest;
        v = bt_k_warp_max(v);
        if (lane == 0) shm[0] = v;
    }
    __syncthreads();
    return shm[0];
}

/* Adds v to *p: atomically where other blocks add to the same element, plainly otherwise (the
 * plain path keeps single-block sums deterministic). */
template <typename T>
__device__ __forceinline__ void bt_k_add_to(T *p, T v, bool atomic)
{
    if (atomic)
        atomicAdd(p, v);
    else
        *p += v;
}

/* ---- faults --------------------------------------------------------------------------------- */

/* Records a fault unless one is already recorded (the first one wins). */
__device__ __forceinline__ void bt_k_raise(bt_k_fault *f, int kind, int value, long long position,
                                           long long limit)
{
    if (!f) return;
    if (atomicCAS(&f->kind, 0, kind) == 0) {
        f->value = value;
        f->position = position;
        f->limit = limit;
    }
}

#endif
