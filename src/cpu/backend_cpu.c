/* cpu/backend_cpu.c: the CPU implementation of the backend table. A cpu:N device is a worker
 * thread's view of host memory: allocation is aligned malloc, copies are memcpy, ops run their
 * cpu_forward/cpu_backward kernels on the calling thread with the device's BLAS thread count, and
 * sync has nothing to wait for (every call completes before it returns). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/error.h"
#include "cpu/blas.h"
#include "train/optim.h"

struct bt_device {
    int index;
    int threads;
    char desc[160];
};

static bt_status cpu_open(int index, int threads, bt_device **out)
{
    bt_device *d = calloc(1, sizeof *d);
    if (!d) return bt_error(BT_ERR_NOMEM, "cpu:%d: out of memory", index);
    d->index = index;
    d->threads = threads < 1 ? 1 : threads;
    bt_blas_init();
    snprintf(d->desc, sizeof d->desc, "cpu:%d (%s, %d thread%s)", index, bt_blas_describe(),
             d->threads, d->threads == 1 ? "" : "s");
    *out = d;
    return BT_OK;
}

static void cpu_close(bt_device *dev) { free(dev); }

static bt_status cpu_bind_thread(bt_device *dev)
{
    bt_blas_set_threads(dev->threads);
    return BT_OK;
}

static bt_status cpu_alloc(bt_device *dev, size_t bytes, void **out)
{
    size_t rounded = (bytes + 63) & ~(size_t)63;
    *out = aligned_alloc(64, rounded ? rounded : 64);
    if (!*out)
        return bt_error(BT_ERR_NOMEM, "cpu:%d: cannot allocate %zu bytes", dev->index, bytes);
    return BT_OK;
}

static void cpu_free(bt_device *dev, void *ptr) { free(ptr); }

static bt_status cpu_zero(bt_device *dev, void *ptr, size_t bytes)
{
    if (bytes) memset(ptr, 0, bytes);
    return BT_OK;
}

static bt_status cpu_copy(bt_device *dev, void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src) memcpy(dst, src, bytes);
    return BT_OK;
}

static bt_status cpu_accumulate(bt_device *dev, bt_dtype dtype, void *dst, const void *src,
                                size_t n)
{
    if (dtype == BT_F32) {
        float *restrict d = dst;
        const float *restrict s = src;
        for (size_t i = 0; i < n; i++) d[i] += s[i];
    } else if (dtype == BT_F64) {
        double *restrict d = dst;
        const double *restrict s = src;
        for (size_t i = 0; i < n; i++) d[i] += s[i];
    } else {
        return bt_error(BT_ERR_INTERNAL, "accumulate: dtype %s", bt_dtype_name(dtype));
    }
    return BT_OK;
}

static bt_status cpu_run_op(bt_device *dev, const bt_op_def *op, int backward, bt_op_call *call)
{
    call->threads = dev->threads;
    call->stream = NULL;
    return backward ? op->cpu_backward(call) : op->cpu_forward(call);
}

static bt_status cpu_sum_squares(bt_device *dev, bt_dtype dtype, const void *x, size_t n,
                                 double *out)
{
    if (dtype == BT_F32) *out = bt_optim_sumsq_f32(x, (int64_t)n);
    else if (dtype == BT_F64) *out = bt_optim_sumsq_f64(x, (int64_t)n);
    else return bt_error(BT_ERR_INTERNAL, "sum_squares: dtype %s", bt_dtype_name(dtype));
    return BT_OK;
}

static bt_status cpu_optimizer_update(bt_device *dev, const bt_optimizer_config *cfg,
                                      bt_dtype dtype, void *w, const void *g, void *const *state,
                                      size_t n, double lr, int64_t step, double grad_scale)
{
    return bt_optim_update(cfg, dtype, w, g, state, n, lr, step, grad_scale);
}

static bt_status cpu_memory_info(bt_device *dev, size_t *free_bytes, size_t *total_bytes)
{
    long page = sysconf(_SC_PAGESIZE), avail = sysconf(_SC_AVPHYS_PAGES), phys = sysconf(_SC_PHYS_PAGES);
    if (page <= 0 || avail < 0 || phys <= 0)
        return bt_error(BT_ERR_BACKEND, "cpu:%d: cannot read the machine's memory size", dev->index);
    *free_bytes = (size_t)avail * (size_t)page;
    *total_bytes = (size_t)phys * (size_t)page;
    return BT_OK;
}

static bt_status cpu_sync(bt_device *dev) { return BT_OK; }

static const char *cpu_describe(bt_device *dev) { return dev->desc; }

static const bt_backend cpu_backend = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .bind_thread = cpu_bind_thread,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .to_host = cpu_copy,
    .from_host = cpu_copy,
    .accumulate = cpu_accumulate,
    .run_op = cpu_run_op,
    .sum_squares = cpu_sum_squares,
    .optimizer_update = cpu_optimizer_update,
    .memory_info = cpu_memory_info,
    .sync = cpu_sync,
    .describe = cpu_describe,
};

const bt_backend *bt_cpu_backend(void) { return &cpu_backend; }
