/* tests/cuda_emu/emu_runtime.h: the CUDA runtime stand-in's own interface (test harness only,
 * never installed). cudart_emu.c implements the CUDA runtime entry points baton uses, against the
 * real CUDA headers, with checks; cublas_emu.c does the same for cuBLAS; the thread model
 * (emu_threads.c, emu_kernel.h) hands kernel launches to bt_emu_stream_enqueue. See
 * /work/notes/emu-interface.md and docs/gpu.md for the whole emulator.
 *
 * Environment of the test process: BT_EMU_MODE=sync|async (default sync), BT_EMU_GPUS=N pretend
 * GPUs (default 1, at most 8), BT_EMU_SEED=S (random delays in async mode), BT_EMU_DELAY_US=D (the
 * longest random delay before a task in async mode, default 200; 0 for none), BT_EMU_MEM_MB=M
 * (memory of each pretend GPU, default 4096), BT_EMU_FAULTS_FATAL=0 (do not end the process with
 * status 1 at exit when faults were recorded and never taken). Under AddressSanitizer the guard
 * zones are also poisoned, so ASan reports an out-of-bounds access where it happens. */
#ifndef BT_EMU_RUNTIME_H
#define BT_EMU_RUNTIME_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*bt_emu_task_fn)(void *arg);

/* Runs fn(arg) in stream order (stream 0 = the legacy default stream of the current device): at
 * once in synchronous mode, on the stream's own host thread in asynchronous mode. Then calls
 * free(arg). Returns cudaErrorInvalidResourceHandle (and records a fault) for a stream of another
 * device than the current one, or a destroyed stream; arg is then freed without running fn. */
cudaError_t bt_emu_stream_enqueue(cudaStream_t stream, bt_emu_task_fn fn, void *arg);

/* 1 if [p, p + bytes) lies inside one live device allocation of device dev (dev < 0: any). */
int bt_emu_is_device_range(const void *p, size_t bytes, int dev);

/* The calling host thread's current device (cudaSetDevice). */
int bt_emu_current_device(void);

/* Records a fault found by the emulator (bad pointer, partial barrier, ...) with a message: it is
 * printed to stderr at once, the next runtime call that reports errors returns it
 * (cudaErrorLaunchFailure), and, unless a test took it with bt_emu_faults_take, the process exits
 * with status 1 at exit. Usable from kernel code and from any thread. */
void bt_emu_fault(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* For tests of the emulator itself: the number of faults recorded since the last call (and the
 * last message, into msg when msg_size > 0); clears them, including the pending error. */
unsigned bt_emu_faults_take(char *msg, size_t msg_size);

/* Failure injection, for tests of error paths: the nth call from now (1: the next) to the runtime
 * or cuBLAS function named api (e.g. "cudaSetDevice", "cudaMalloc", "cublasCreate") fails with
 * the error CUDA would give for the likely cause (cudaSetDevice: cudaErrorInvalidDevice,
 * cudaMalloc and cudaHostAlloc: cudaErrorMemoryAllocation, cudaGetDeviceCount: cudaErrorNoDevice,
 * cuBLAS: CUBLAS_STATUS_NOT_INITIALIZED or _EXECUTION_FAILED, others: cudaErrorUnknown); not a
 * fault. One injection at a time; api NULL or nth <= 0 cancels it. BT_EMU_FAIL=api:n in the
 * environment sets one at start-up. bt_emu_injected is the check each stand-in makes (1: fail). */
void bt_emu_fail_call(const char *api, int nth);
int bt_emu_injected(const char *api);

/* Helpers shared by the stand-ins. The device a stream belongs to (stream 0: the current device),
 * or -1 for an invalid or destroyed stream. */
int bt_emu_stream_device(cudaStream_t stream);
/* 1 once device from has enabled peer access to device to (cudaDeviceEnablePeerAccess). */
int bt_emu_peer_enabled(int from, int to);
/* 1 in asynchronous mode (BT_EMU_MODE=async). */
int bt_emu_async(void);

#ifdef __cplusplus
}
#endif

#endif
