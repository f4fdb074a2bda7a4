/* kernels/optim.cu: the optimizer updates and the sum of squares of src/optim/optim.h, one
 * thread per weight. The per-type arithmetic follows src/optim/optim.c exactly (the scalar
 * coefficients are computed once in double on the host and cast to T), so an f32 GPU step
 * differs from the CPU's only by the GPU's fused multiply-adds. */
#include "kernel_util.cuh"

template <typename T>
__global__ void k_sgd_plain(T *w, const T *g, int64_t n, T lr, T wd, T scale)
{
    BT_K_FOR(i, n) w[i] -= lr * (g[i] * scale + wd * w[i]);
}

template <typename T>
__global__ void k_sgd_momentum(T *w, const T *g, T *buf, int64_t n, T lr, T wd, T mom,
                               int nesterov, int first, T scale)
{
    BT_K_FOR(i, n) {
        const T gi = g[i] * scale + wd * w[i];
        const T b = first ? gi : mom * buf[i] + gi;
        buf[i] = b;
        w[i] -= lr * (nesterov ? gi + mom * b : b);
    }
}

template <typename T>
__global__ void k_adamw(T *w, const T *g, T *m, T *v, int64_t n, T b1, T b2, T one_b1, T one_b2,
                        T decay, T step_size, T bc2_sqrt, T eps, T scale)
{
    BT_K_FOR(i, n) {
        const T gi = g[i] * scale;
        const T wi = w[i] * decay;
        const T mi = b1 * m[i] + one_b1 * gi;
        const T vi = b2 * v[i] + one_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] = wi - step_size * mi / (bt_k_sqrt(vi) / bc2_sqrt + eps);
    }
}

/* Sum of squares in two ordered passes (deterministic, no atomics): block b of a grid whose size
 * depends on n only writes its partial sum to part[b]; one block then adds the partials in a
 * fixed order to *out. */
template <typename T>
__global__ void k_sum_squares_part(const T *x, int64_t n, double *part)
{
    __shared__ double shm[32];
    double s = 0;
    BT_K_FOR(i, n) s += (double)x[i] * (double)x[i];
    s = bt_k_block_sum(s, shm);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void k_sum_parts(const double *part, int n, double *out)
{
    __shared__ double shm[32];
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += part[i];
    s = bt_k_block_sum(s, shm);
    if (threadIdx.x == 0) *out += s;
}

extern "C" cudaError_t bt_k_sgd(cudaStream_t s, bt_dtype dt, void *w, const void *g, void *buf,
                                int64_t n, double lr, double weight_decay, double momentum,
                                int nesterov, int first, double grad_scale)
{
    if (n <= 0) return cudaSuccess;
    if (!(momentum > 0)) {
        BT_K_DISPATCH(dt, k_sgd_plain<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                              (T *)w, (const T *)g, n, (T)lr, (T)weight_decay, (T)grad_scale););
    } else {
        if (!buf) return cudaErrorInvalidValue;
        BT_K_DISPATCH(dt, k_sgd_momentum<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                              (T *)w, (const T *)g, (T *)buf, n, (T)lr, (T)weight_decay,
                              (T)momentum, nesterov, first, (T)grad_scale););
    }
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_adamw(cudaStream_t s, bt_dtype dt, void *w, const void *g, void *m,
                                  void *v, int64_t n, double lr, double weight_decay,
                                  double beta1, double beta2, double eps, int64_t t,
                                  double grad_scale)
{
    if (n <= 0) return cudaSuccess;
    if (!m || !v || t < 1) return cudaErrorInvalidValue;
    const double bc1 = 1.0 - pow(beta1, (double)t);
    const double bc2 = 1.0 - pow(beta2, (double)t);
    BT_K_DISPATCH(dt, k_adamw<T><<<bt_k_blocks(n), BT_K_THREADS, 0, s>>>(
                          (T *)w, (const T *)g, (T *)m, (T *)v, n, (T)beta1, (T)beta2,
                          (T)(1.0 - beta1), (T)(1.0 - beta2), (T)(1.0 - lr * weight_decay),
                          (T)(lr / bc1), (T)sqrt(bc2), (T)eps, (T)grad_scale););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_sum_squares(cudaStream_t s, bt_dtype dt, const void *x, int64_t n,
                                        double *part, double *out)
{
    if (dt != BT_F32 && dt != BT_F64) return cudaErrorInvalidValue;
    if (n <= 0) return cudaSuccess;
    unsigned blocks = bt_k_blocks(n);
    if (blocks > BT_K_SUMSQ_PARTS) blocks = BT_K_SUMSQ_PARTS;
    BT_K_DISPATCH(dt, k_sum_squares_part<T><<<blocks, BT_K_THREADS, 0, s>>>((const T *)x, n,
                                                                           part););
    k_sum_parts<<<1, BT_K_THREADS, 0, s>>>(part, (int)blocks, out);
    return cudaGetLastError();
}
