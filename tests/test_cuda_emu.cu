/* tests/test_cuda_emu.cu: the CUDA emulator's own test (built only with --enable-cuda-emulator,
 * compiled like kernels/ through tests/cuda_emu/emu_kernel.h). Healthy kernels must give exact
 * results in every thread order with no fault; each planted fault must be caught: a removed
 * barrier in a block reduction (wrong sums when one warp runs ahead), a barrier inside a divergent
 * branch, two different barriers, a full-mask shuffle in a partial warp, launch limits, a host
 * pointer as a kernel argument, and an out-of-bounds write into device memory (the runtime
 * stand-in's guard zones). Plain main: exit 0 when every check holds, 1 otherwise. */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

static int failures;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                          \
        }                                                                        \
    } while (0)

static const char *order_name[] = {"forward", "reverse", "random"};

/* ---- kernels ------------------------------------------------------------------------------- */

__device__ double warp_sum(double v)
{
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

/* out[blockIdx.x] = sum of in over the block's slice; with_barrier = 0 plants the missing
 * barrier between the warps' partial sums and warp 0 reading them. */
__global__ void k_block_sum(const double *in, double *out, int with_barrier)
{
    __shared__ double shm[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    double v = warp_sum(in[blockIdx.x * blockDim.x + threadIdx.x]);
    if (lane == 0) shm[warp] = v;
    if (with_barrier) __syncthreads();
    if (warp == 0) {
        v = lane < warps ? shm[lane] : 0.0;
        v = warp_sum(v);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

__global__ void k_divergent_barrier(int *out, int limit)
{
    if ((int)threadIdx.x < limit) __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void k_two_barriers(int *out)
{
    if (threadIdx.x & 32)
        __syncthreads();
    else
        __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void k_partial_warp_shuffle(double *out)
{
    out[threadIdx.x] = warp_sum(1.0);
}

/* Every shuffle kind, and 2-D indices: out[i] packs what lane i received. */
__global__ void k_shuffles(int *out)
{
    const int t = threadIdx.y * blockDim.x + threadIdx.x, lane = t & 31;
    const int base = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x * blockDim.y;
    const int x = __shfl_xor_sync(0xffffffffu, lane, 5);
    const int u = __shfl_up_sync(0xffffffffu, lane, 3);
    const int d = __shfl_down_sync(0xffffffffu, lane, 3, 8);
    const int b = __shfl_sync(0xffffffffu, lane * 10, 7);
    out[base + t] = x * 1000000 + u * 10000 + d * 100 + b / 10;
}

__global__ void k_write(int *p, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) p[i] = 7; /* planted: <= writes one past the end */
}

__global__ void k_nothing(int *p) { (void)p; }

/* ---- helpers ------------------------------------------------------------------------------- */

/* The faults recorded since the last call, and whether the last message contains what. */
static unsigned faults(const char *what, int *matched)
{
    char msg[1024] = "";
    cudaDeviceSynchronize();
    cudaGetLastError();
    const unsigned n = bt_emu_faults_take(msg, sizeof msg);
    if (matched) *matched = what && strstr(msg, what) != NULL;
    if (n && matched && !*matched) fprintf(stderr, "unexpected fault message: %s\n", msg);
    return n;
}

/* ---- tests --------------------------------------------------------------------------------- */

static void test_block_sum(void)
{
    const int blocks = 5, threads = 256, n = blocks * threads;
    double host[1280], sums[5], *in, *out;
    for (int i = 0; i < n; i++) host[i] = (double)(i % 97) + 0.25;
    CHECK(cudaMalloc((void **)&in, n * sizeof(double)) == cudaSuccess);
    CHECK(cudaMalloc((void **)&out, blocks * sizeof(double)) == cudaSuccess);
    cudaMemcpy(in, host, n * sizeof(double), cudaMemcpyHostToDevice);
    int wrong_without = 0;
    for (int order = 0; order < 3; order++) {
        for (int with = 1; with >= 0; with--) {
            bt_emu_set_order(order, 42);
            k_block_sum<<<blocks, threads>>>(in, out, with);
            CHECK(cudaDeviceSynchronize() == cudaSuccess);
            cudaMemcpy(sums, out, sizeof sums, cudaMemcpyDeviceToHost);
            int exact = 1;
            for (int b = 0; b < blocks; b++) {
                double want = 0;
                for (int i = 0; i < threads; i++) want += host[b * threads + i];
                /* sums of integers and quarters: exact in any order */
                exact &= sums[b] == want;
            }
            if (with) {
                if (!exact) fprintf(stderr, "block sum wrong in %s order\n", order_name[order]);
                CHECK(exact);
            } else if (!exact) {
                wrong_without++;
            }
            CHECK(faults(NULL, NULL) == 0);
        }
    }
    /* forward order lets warp 0 read the partial sums before the other warps wrote them */
    CHECK(wrong_without >= 1);
    cudaFree(in);
    cudaFree(out);
}

static void test_barrier_faults(void)
{
    int *out, m;
    CHECK(cudaMalloc((void **)&out, 1024 * sizeof(int)) == cudaSuccess);
    for (int order = 0; order < 3; order++) {
        bt_emu_set_order(order, 7);
        k_divergent_barrier<<<2, 128>>>(out, 128);
        CHECK(faults(NULL, NULL) == 0);
        k_divergent_barrier<<<2, 128>>>(out, 100);
        CHECK(faults("partial barrier", &m) >= 1 && m);
        k_two_barriers<<<1, 64>>>(out);
        CHECK(faults("barrier divergence", &m) >= 1 && m);
    }
    cudaFree(out);
}

static void test_shuffles(void)
{
    int *out, host[2 * 64], m;
    double *dout;
    CHECK(cudaMalloc((void **)&out, sizeof host) == cudaSuccess);
    CHECK(cudaMalloc((void **)&dout, 64 * sizeof(double)) == cudaSuccess);
    for (int order = 0; order < 3; order++) {
        bt_emu_set_order(order, 3);
        k_shuffles<<<dim3(2, 1), dim3(16, 4)>>>(out);
        CHECK(faults(NULL, NULL) == 0);
        cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
        for (int i = 0; i < 2 * 64; i++) {
            const int lane = i % 64 & 31;
            const int x = lane ^ 5, u = lane >= 3 ? lane - 3 : lane;
            const int d = (lane & 7) + 3 < 8 ? lane + 3 : lane;
            CHECK(host[i] == x * 1000000 + u * 10000 + d * 100 + 7);
        }
        /* 48 threads: the second warp has 16 lanes, the full mask names 32 */
        k_partial_warp_shuffle<<<1, 48>>>(dout);
        CHECK(faults("partial warp", &m) >= 1 && m);
        k_partial_warp_shuffle<<<1, 64>>>(dout);
        CHECK(faults(NULL, NULL) == 0);
    }
    cudaFree(out);
    cudaFree(dout);
}

static void test_launch_limits(void)
{
    int *p, m;
    CHECK(cudaMalloc((void **)&p, 64) == cudaSuccess);
    k_nothing<<<1, 1024>>>(p);
    CHECK(faults(NULL, NULL) == 0);
    k_nothing<<<1, 1025>>>(p);
    CHECK(faults("above its limit", &m) >= 1 && m);
    k_nothing<<<1, dim3(33, 32)>>>(p);
    CHECK(faults("1024 threads", &m) >= 1 && m);
    k_nothing<<<dim3(1, 70000), 32>>>(p);
    CHECK(faults("grid dimension", &m) >= 1 && m);
    k_nothing<<<1, 32, 64 * 1024>>>(p);
    CHECK(faults("shared memory", &m) >= 1 && m);
    k_nothing<<<0, 32>>>(p);
    CHECK(faults("is 0", &m) >= 1 && m);
    /* a bad launch is reported by cudaGetLastError, as on a GPU */
    k_nothing<<<1, 2048>>>(p);
    CHECK(cudaGetLastError() != cudaSuccess);
    bt_emu_faults_take(NULL, 0);
    cudaFree(p);
}

static void test_memory_faults(void)
{
    int *p, host[4], m;
    CHECK(cudaMalloc((void **)&p, 100 * sizeof(int)) == cudaSuccess);
    k_write<<<1, 128>>>(p, 99); /* writes p[0..99]: in bounds */
    CHECK(faults(NULL, NULL) == 0);
#if !defined(__SANITIZE_ADDRESS__)
    /* under AddressSanitizer the guard zones are poisoned for ASan, which aborts on this write
     * itself (the emu_asan job): planted only without it */
    k_write<<<1, 128>>>(p, 100); /* writes p[100]: one past the end */
    CHECK(faults(NULL, NULL) >= 1);
#endif
    k_nothing<<<1, 32>>>(host);
    CHECK(faults("not device memory", &m) >= 1 && m);
    cudaFree(p);
    faults(NULL, NULL);
}

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        fprintf(stderr, "test_cuda_emu: the emulator reports no device\n");
        return 1;
    }
    test_block_sum();
    test_barrier_faults();
    test_shuffles();
    test_launch_limits();
    test_memory_faults();
    printf("test_cuda_emu: %s (%lu grids run)\n", failures ? "FAILED" : "passed",
           bt_emu_grids_run());
    return failures ? 1 : 0;
}
