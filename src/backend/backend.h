/* backend/backend.h: what the executor may ask of a device, as a table of function pointers.
 * cpu/ and cuda/ implement it; backend/registry.c alone knows which backends this build has. The
 * executor never includes a device header: it allocates, copies, zeroes and runs ops through this
 * table. Every entry reports failure as a bt_status with a message. Pointers returned by alloc
 * belong to the device; host pointers are plain memory. */
#ifndef BT_BACKEND_H
#define BT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "baton/config.h"
#include "baton/op.h"

typedef struct bt_device bt_device; /* a backend's per-device state */

typedef struct bt_backend {
    const char *name;                                 /* "cpu", "cuda" */
    /* Opens device index; threads is the compute threads it may use (CPU: BLAS threads). */
    bt_status (*open)(int index, int threads, bt_device **out);
    void (*close)(bt_device *dev);
    /* Called once on the worker thread that will drive the device (thread binding, BLAS threads). */
    bt_status (*bind_thread)(bt_device *dev);
    bt_status (*alloc)(bt_device *dev, size_t bytes, void **out);
    void (*free)(bt_device *dev, void *ptr);
    bt_status (*zero)(bt_device *dev, void *ptr, size_t bytes);
    bt_status (*copy)(bt_device *dev, void *dst, const void *src, size_t bytes);      /* on device */
    bt_status (*to_host)(bt_device *dev, void *dst, const void *src, size_t bytes);
    bt_status (*from_host)(bt_device *dev, void *dst, const void *src, size_t bytes);
    /* dst += src, n elements of dtype (gradient accumulation across stages). */
    bt_status (*accumulate)(bt_device *dev, bt_dtype dtype, void *dst, const void *src, size_t n);
    bt_status (*run_op)(bt_device *dev, const bt_op_def *op, int backward, bt_op_call *call);
    /* Sum of squares of n elements (global-norm clipping). */
    bt_status (*sum_squares)(bt_device *dev, bt_dtype dtype, const void *x, size_t n, double *out);
    /* One optimizer update of n weights; state[] holds the optimizer's buffers (see train/optim.h);
     * grad_scale multiplies the gradient first (clipping). step is 1-based. */
    bt_status (*optimizer_update)(bt_device *dev, const bt_optimizer_config *cfg, bt_dtype dtype,
                                  void *w, const void *g, void *const *state, size_t n, double lr,
                                  int64_t step, double grad_scale);
    /* Bytes the device can still allocate, and its size (CPU: the machine's available and
     * physical memory, which every cpu:N device shares). */
    bt_status (*memory_info)(bt_device *dev, size_t *free_bytes, size_t *total_bytes);
    /* Waits until everything queued on the device has finished. */
    bt_status (*sync)(bt_device *dev);
    /* "cpu:0 (OpenBLAS SkylakeX kernels, 1 thread)". */
    const char *(*describe)(bt_device *dev);
    /* Optional (NULL: none): mark the start and end of one instruction ("1F3") for an external
     * profiler; the CUDA backend emits NVTX ranges that Nsight Systems shows. */
    void (*range_begin)(bt_device *dev, const char *name);
    void (*range_end)(bt_device *dev);
} bt_backend;

/* The backend for a device kind ("cpu", "cuda"), or NULL with a message when this build or
 * machine has none. */
const bt_backend *bt_backend_find(const char *kind);

/* Parses "cpu:1" into kind ("cpu") and index (1). */
bt_status bt_device_parse(const char *spec, char *kind, size_t kind_size, int *index);

const bt_backend *bt_cpu_backend(void);

#endif
