/* kernels/dropout.cu: dropout with the CPU kernel's mask (src/ops/dropout.c), bit for bit: the
 * keep decision of element i is a pure function of (seed, i). Element pair (2j, 2j+1) takes the
 * low and high 32 bits of splitmix64(splitmix64(seed) + j); an element is kept where its draw is
 * >= threshold. One thread per pair. */
#include "kernel_util.cuh"

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
