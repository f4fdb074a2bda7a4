/* tests/cuda_emu/emu_kernel.h: force-included (g++ -include) into every kernels/ .cu file that the
 * emulator build compiles as C++ (test harness only). It takes the types from the real CUDA
 * headers (cuda_runtime.h, cuda_fp16.h, cuda_bf16.h: their host paths compile under g++), then
 * turns the CUDA language into C++ over the thread model of emu_threads.h:
 *   - __global__, __device__, __host__ vanish; __shared__ is static storage (kept from one block
 *     to the next: a read before the block's own write sees an earlier block's value or zero;
 *     g++ ignores section attributes on template statics, so it cannot be poisoned per block);
 *   - threadIdx, blockIdx, blockDim, gridDim are the running fiber's (thread-local);
 *   - __syncthreads, __syncwarp and the __shfl_*_sync family are collective points of the thread
 *     model; atomics are plain read-modify-writes (fibers never preempt, kernels never overlap);
 *   - the launch `k<<<grid, block, smem, stream>>>(args)`, which the build rewrites (sed) into
 *     `k<< bt_emu_make_cfg(grid, block, smem, stream) >> bt_emu_args(args)`, checks the launch
 *     limits and that every pointer argument is device memory the stream's device may use, then
 *     queues the grid on the stream (bt_emu_stream_enqueue, emu_runtime.h). */
#ifndef BT_EMU_KERNEL_H
#define BT_EMU_KERNEL_H

#ifdef __cplusplus

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

#include "emu_runtime.h"
#include "emu_threads.h"

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __constant__ static
#define __shared__ static
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)

#define threadIdx bt_emu_thread_idx
#define blockIdx bt_emu_block_idx
#define blockDim bt_emu_block_dim
#define gridDim bt_emu_grid_dim
#define warpSize 32

#define __syncthreads() bt_emu_syncthreads(__FILE__, __LINE__)

static inline void bt_emu_syncwarp_at(const char *file, int line, unsigned mask = 0xffffffffu)
{
    bt_emu_syncwarp(mask, file, line);
}
#define __syncwarp(...) bt_emu_syncwarp_at(__FILE__, __LINE__, ##__VA_ARGS__)

template <typename T>
static inline T bt_emu_shfl_at(const char *file, int line, int kind, unsigned mask, T v, int arg,
                               int width = 32)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "warp shuffles move at most 8 bytes");
    bt_emu_shfl(mask, &v, sizeof v, kind, arg, width, file, line);
    return v;
}
#define __shfl_sync(...) bt_emu_shfl_at(__FILE__, __LINE__, BT_EMU_SHFL_IDX, __VA_ARGS__)
#define __shfl_up_sync(...) bt_emu_shfl_at(__FILE__, __LINE__, BT_EMU_SHFL_UP, __VA_ARGS__)
#define __shfl_down_sync(...) bt_emu_shfl_at(__FILE__, __LINE__, BT_EMU_SHFL_DOWN, __VA_ARGS__)
#define __shfl_xor_sync(...) bt_emu_shfl_at(__FILE__, __LINE__, BT_EMU_SHFL_XOR, __VA_ARGS__)

/* ---- atomics: fibers switch only at collective points and kernels run one at a time ---------- */

template <typename T>
static inline T atomicAdd(T *p, T v)
{
    const T old = *p;
    *p = old + v;
    return old;
}
template <typename T>
static inline T atomicSub(T *p, T v)
{
    const T old = *p;
    *p = old - v;
    return old;
}
template <typename T>
static inline T atomicExch(T *p, T v)
{
    const T old = *p;
    *p = v;
    return old;
}
template <typename T>
static inline T atomicMax(T *p, T v)
{
    const T old = *p;
    if (v > old) *p = v;
    return old;
}
template <typename T>
static inline T atomicMin(T *p, T v)
{
    const T old = *p;
    if (v < old) *p = v;
    return old;
}
template <typename T>
static inline T atomicCAS(T *p, T compare, T v)
{
    const T old = *p;
    if (old == compare) *p = v;
    return old;
}

/* ---- device maths that has no host name ------------------------------------------------------ */

template <typename T>
static inline T __ldg(const T *p)
{
    return *p;
}
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* ---- the launch --------------------------------------------------------------------------------- */

struct bt_emu_cfg {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    const char *file; /* the launch's call site */
    int line;
};

static inline bt_emu_cfg bt_emu_make_cfg(dim3 grid, dim3 block, size_t smem = 0,
                                         cudaStream_t stream = 0,
                                         const char *file = __builtin_FILE(),
                                         int line = __builtin_LINE())
{
    bt_emu_cfg c;
    c.grid = grid;
    c.block = block;
    c.smem = smem;
    c.stream = stream;
    c.file = file;
    c.line = line;
    return c;
}

template <typename... P>
struct bt_emu_launch_t {
    void (*kernel)(P...);
    bt_emu_cfg cfg;
};

template <typename... P>
static inline bt_emu_launch_t<P...> operator<<(void (*kernel)(P...), bt_emu_cfg cfg)
{
    bt_emu_launch_t<P...> l;
    l.kernel = kernel;
    l.cfg = cfg;
    return l;
}

template <typename... A>
struct bt_emu_argpack_t {
    std::tuple<A...> args;
};

template <typename... A>
static inline bt_emu_argpack_t<typename std::decay<A>::type...> bt_emu_args(A &&...a)
{
    return bt_emu_argpack_t<typename std::decay<A>::type...>{
        std::tuple<typename std::decay<A>::type...>(std::forward<A>(a)...)};
}

/* One queued grid: the kernel, its parameters (converted to the kernel's types, as a launch
 * does), and the configuration. malloc'ed: bt_emu_stream_enqueue frees it after the run. */
template <typename... P>
struct bt_emu_grid_task {
    void (*kernel)(P...);
    std::tuple<typename std::decay<P>::type...> params;
    bt_emu_cfg cfg;
};

template <typename... P>
static void bt_emu_grid_body(void *ctx)
{
    bt_emu_grid_task<P...> *t = (bt_emu_grid_task<P...> *)ctx;
    /* every CUDA thread gets its own copy of the parameters, as on the device */
    std::tuple<typename std::decay<P>::type...> mine = t->params;
    std::apply(t->kernel, mine);
}

template <typename... P>
static void bt_emu_grid_run(void *arg)
{
    bt_emu_grid_task<P...> *t = (bt_emu_grid_task<P...> *)arg;
    bt_emu_run_grid(t->cfg.grid, t->cfg.block, t->cfg.smem, bt_emu_grid_body<P...>, t);
}

/* A pointer argument must be device memory (or null) that the stream's device may use: its own,
 * or a peer's once peer access is enabled. Returns 0 or records a fault and returns -1. */
template <typename T>
static inline int bt_emu_check_arg(const bt_emu_cfg &c, int index, const T &v)
{
    if constexpr (std::is_pointer<T>::value) {
        const void *p = (const void *)v;
        if (!p) return 0;
        const int sd = bt_emu_stream_device(c.stream);
        for (int d = 0; d < 64; d++) {
            if (!bt_emu_is_device_range(p, 1, d)) continue;
            if (d == sd || sd < 0 || bt_emu_peer_enabled(sd, d)) return 0;
            bt_emu_fault("kernel launched at %s:%d on a stream of device %d: argument %d (%p) is "
                         "memory of device %d without peer access",
                         c.file, c.line, sd, index, p, d);
            return -1;
        }
        bt_emu_fault("kernel launched at %s:%d: argument %d (%p) is not device memory", c.file,
                     c.line, index, p);
        return -1;
    } else {
        (void)c;
        (void)index;
        (void)v;
        return 0;
    }
}

/* A kernel argument becomes its parameter by implicit conversion, as in a launch. */
template <typename D, typename S>
static inline D bt_emu_param(const S &s)
{
    return s;
}

template <typename... P, typename... A, size_t... I>
static inline void bt_emu_launch_grid(bt_emu_launch_t<P...> l, bt_emu_argpack_t<A...> &a,
                                      std::index_sequence<I...>)
{
    typedef bt_emu_grid_task<P...> task_t;
    static_assert((std::is_trivially_copyable<typename std::decay<P>::type>::value && ...),
                  "kernel parameters must be trivially copyable");
    char where[512];
    snprintf(where, sizeof where, "the kernel launched at %s:%d", l.cfg.file, l.cfg.line);
    if (bt_emu_check_launch(l.cfg.grid, l.cfg.block, l.cfg.smem, where)) return;
    void *mem = malloc(sizeof(task_t));
    if (!mem) {
        bt_emu_fault("cuda emulator: out of memory for a launch");
        return;
    }
    task_t *t = new (mem) task_t{l.kernel,
                                 std::tuple<typename std::decay<P>::type...>(
                                     bt_emu_param<typename std::decay<P>::type>(std::get<I>(a.args))...),
                                 l.cfg};
    int bad = 0;
    ((bad |= bt_emu_check_arg(l.cfg, (int)I, std::get<I>(t->params))), ...);
    if (bad) {
        free(mem);
        return;
    }
    bt_emu_stream_enqueue(l.cfg.stream, bt_emu_grid_run<P...>, t);
}

template <typename... P, typename... A>
static inline void operator>>(bt_emu_launch_t<P...> l, bt_emu_argpack_t<A...> a)
{
    static_assert(sizeof...(P) == sizeof...(A), "wrong number of kernel arguments");
    bt_emu_launch_grid(l, a, std::index_sequence_for<P...>{});
}

#endif /* __cplusplus */

#endif
