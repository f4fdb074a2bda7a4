/* cpu/backend_cpu.c: the CPU implementation of the backend table. A cpu:N device is a worker
 * thread's view of host memory: allocation is aligned malloc, copies are memcpy, ops run their
 * cpu_forward/cpu_backward kernels on the calling thread with the device's thread count (per call
 * on oneDNN, f32 and bf16: gemm_f32.c, gemm_bf16.c; OpenBLAS has one per process), and
 * sync has nothing to wait for (every call completes before it returns). Both streams are the
 * calling thread, so an event is complete when recorded: it keeps the host clock's time, which is
 * what timing needs, and waiting for one is a no-op. Every cpu:N shares the machine's memory. */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/cpu_isa.h"
#include "core/error.h"
#include "core/half.h"
#include "core/util.h"
#include "cpu/bf16_params.h"
#include "cpu/blas.h"
#include "cpu/conv_onednn.h"
#include "optim/optim.h"

struct bt_device {
    int index;
    int threads;
    char desc[400];
};

static bt_status cpu_open(int index, int threads, bt_device **out)
{
    bt_device *d = calloc(1, sizeof *d);
    if (!d) return bt_error(BT_ERR_NOMEM, "cpu:%d: out of memory", index);
    d->index = index;
    int strict = threads > 0;
    d->threads = threads > 0 ? threads : threads < 0 ? -threads : 1;
    bt_status st = bt_cpu_bf16_init();
    if (st == BT_OK) st = bt_cpu_f32_init();
    if (st == BT_OK) st = bt_cpu_conv_init(); /* BATON_CPU_CONV: conv2d on oneDNN or im2col */
    if (st != BT_OK) {
        free(d);
        return bt_error_context(st, "cpu:%d", index);
    }
    st = bt_blas_claim_threads(&d->threads, strict);
    if (st != BT_OK) {
        free(d);
        return bt_error_context(st, "cpu:%d", index);
    }
    /* the instruction sets only where BATON_CPU_ISA capped them: then every line says so */
    char isa[160] = "";
    if (bt_cpu_isa_capped()) snprintf(isa, sizeof isa, "; kernels %s", bt_cpu_isa_describe());
    snprintf(d->desc, sizeof d->desc, "cpu:%d (%s, %d thread%s; %s%s)", index,
             bt_cpu_f32_onednn() ? bt_cpu_f32_describe() : bt_blas_describe(), d->threads,
             d->threads == 1 ? "" : "s", bt_cpu_bf16_describe(), isa);
    *out = d;
    return BT_OK;
}

static void cpu_close(bt_device *dev)
{
    if (!dev) return;
    bt_blas_release_threads();
    free(dev);
}

/* The BLAS thread count was set when the device opened (blas.c: one count per process). */
static bt_status cpu_bind_thread(bt_device *dev) { return BT_OK; }

static bt_status cpu_alloc(bt_device *dev, size_t bytes, void **out)
{
    size_t rounded = (bytes + 63) & ~(size_t)63;
    *out = aligned_alloc(64, rounded ? rounded : 64);
    if (!*out)
        return bt_error(BT_ERR_NOMEM, "cpu:%d: cannot allocate %zu bytes", dev->index, bytes);
    return BT_OK;
}

/* Every call that writes or frees memory tells gemm_bf16.c, which keeps bf16 conversions of
 * parameters until their memory changes (bt_gemm_bf16_forget). */
static void cpu_free(bt_device *dev, void *ptr)
{
    if (ptr) bt_gemm_bf16_release(ptr, malloc_usable_size(ptr));
    free(ptr);
}

/* Passes over memory run on the device's threads (BT_PARALLEL_FOR) in blocks of whole cache lines,
 * one block a thread, when there are at least PAR_MIN_BYTES (below that a parallel region costs
 * more than it saves). Each block does what the one-thread loop does to its elements, so the
 * results are the same bits whatever the thread count. cpu_blocks gives the block size in
 * elements of elem bytes and returns the block count. */
#define PAR_MIN_BYTES ((size_t)256 << 10)
static int64_t cpu_blocks(const bt_device *dev, size_t n, size_t elem, size_t *per)
{
    const int nt = dev->threads;
    const size_t line = 64 / elem;
    *per = nt > 1 && n * elem >= PAR_MIN_BYTES ? (n / (size_t)nt + line) / line * line : n;
    return *per ? (int64_t)((n + *per - 1) / *per) : 0;
}

static bt_status cpu_zero(bt_device *dev, void *ptr, size_t bytes)
{
    bt_gemm_bf16_forget(ptr, bytes);
    size_t per;
    const int64_t blocks = cpu_blocks(dev, bytes, 1, &per);
    BT_PARALLEL_FOR(blocks > 1 ? dev->threads : 1)
    for (int64_t b = 0; b < blocks; b++) {
        const size_t at = (size_t)b * per;
        memset((char *)ptr + at, 0, bytes - at < per ? bytes - at : per);
    }
    return BT_OK;
}

static bt_status cpu_copy(bt_device *dev, void *dst, const void *src, size_t bytes)
{
    bt_gemm_bf16_forget(dst, bytes);
    if (dst == src) return BT_OK;
    size_t per;
    const int64_t blocks = cpu_blocks(dev, bytes, 1, &per);
    BT_PARALLEL_FOR(blocks > 1 ? dev->threads : 1)
    for (int64_t b = 0; b < blocks; b++) {
        const size_t at = (size_t)b * per;
        memcpy((char *)dst + at, (const char *)src + at, bytes - at < per ? bytes - at : per);
    }
    return BT_OK;
}

static bt_status cpu_accumulate(bt_device *dev, bt_dtype dtype, void *dst, const void *src,
                                size_t n)
{
    bt_gemm_bf16_forget(dst, n * bt_dtype_size(dtype));
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
    bt_blas_bind_threads(dev->threads); /* f32 GEMMs on oneDNN: this device's count */
    bt_status st;
    if (backward == BT_RUN_DECODE) {
        st = op->cpu_decode ? op->cpu_decode(call) : op->cpu_forward(call);
    } else if (backward == BT_RUN_WEIGHT) {
        if (!op->cpu_backward_weight)
            return bt_error(BT_ERR_INTERNAL, "op '%s' has no weight-gradient kernel", op->name);
        st = op->cpu_backward_weight(call);
    } else {
        st = backward ? op->cpu_backward(call) : op->cpu_forward(call);
    }
    bt_status gemm = bt_gemm_take_error(); /* a bf16 GEMM on oneDNN failed inside the op */
    return st != BT_OK ? st : gemm;
}

/* Every op decodes on the CPU: with cpu_decode, or with cpu_forward (required of every op). */
static int cpu_runs_decode(const bt_op_def *op)
{
    (void)op;
    return 1;
}

static bt_status cpu_sum_squares(bt_device *dev, bt_dtype dtype, const void *const *x, const size_t *n,
                                 int count, double *out)
{
    if (dtype != BT_F32 && dtype != BT_F64)
        return bt_error(BT_ERR_INTERNAL, "sum_squares: dtype %s", bt_dtype_name(dtype));
    /* each tensor's sum on one of the device's threads, then added in order: the same bits as
     * one thread's loop over the tensors */
    double one[16], *part = count <= 16 ? one : malloc((size_t)count * sizeof *part);
    if (!part) return bt_error(BT_ERR_NOMEM, "sum_squares: out of memory");
    size_t total = 0;
    for (int i = 0; i < count; i++) total += n[i];
    const int nt = count > 1 && total * bt_dtype_size(dtype) >= PAR_MIN_BYTES ? dev->threads : 1;
    BT_PARALLEL_FOR_EACH(nt)
    for (int i = 0; i < count; i++)
        part[i] = dtype == BT_F32 ? bt_optim_sumsq_f32(x[i], (int64_t)n[i])
                                  : bt_optim_sumsq_f64(x[i], (int64_t)n[i]);
    double sum = 0;
    for (int i = 0; i < count; i++) sum += part[i];
    if (part != one) free(part);
    *out = sum;
    return BT_OK;
}

static bt_status cpu_optimizer_update(bt_device *dev, const bt_optimizer_config *cfg,
                                      bt_dtype dtype, void *w, const void *g, void *const *state,
                                      size_t n, double lr, int64_t step, double grad_scale)
{
    const size_t elem = bt_dtype_size(dtype);
    bt_gemm_bf16_forget(w, n * elem);
    size_t per;
    const int64_t blocks = elem ? cpu_blocks(dev, n, elem, &per) : 0;
    if (blocks <= 1) return bt_optim_update(cfg, dtype, w, g, state, n, lr, step, grad_scale);
    /* the arguments checked here, on the calling thread (an error's message is per thread): the
     * blocks, the same update on their own elements, then cannot fail */
    BT_TRY(bt_optim_check(cfg, dtype, w, g, state, n, step));
    const int k = bt_optim_state_count(cfg);
    BT_PARALLEL_FOR(dev->threads)
    for (int64_t b = 0; b < blocks; b++) {
        const size_t at = (size_t)b * per, len = n - at < per ? n - at : per;
        void *sb[2] = {NULL, NULL};
        for (int i = 0; i < k; i++) sb[i] = (char *)state[i] + at * elem;
        (void)bt_optim_update(cfg, dtype, (char *)w + at * elem, (const char *)g + at * elem, sb, len,
                              lr, step, grad_scale);
    }
    return BT_OK;
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

struct bt_event {
    double t_ms;
};

static bt_status cpu_event_create(bt_device *dev, bt_event **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return bt_error(BT_ERR_NOMEM, "cpu:%d: out of memory for an event", dev->index);
    return BT_OK;
}

static void cpu_event_destroy(bt_device *dev, bt_event *ev) { free(ev); }

static bt_status cpu_event_record(bt_device *dev, bt_event *ev, bt_stream_id stream)
{
    ev->t_ms = bt_now_ms();
    return BT_OK;
}

static bt_status cpu_stream_wait(bt_device *dev, bt_stream_id stream, bt_event *ev) { return BT_OK; }

static bt_status cpu_event_elapsed(bt_device *dev, bt_event *from, bt_event *to, double *ms)
{
    *ms = to->t_ms - from->t_ms;
    return BT_OK;
}

static double cpu_event_host_ms(bt_device *dev, bt_event *ev) { return ev->t_ms; }

static bt_status cpu_copy_async(bt_device *dev, bt_stream_id stream, bt_copy_kind kind, void *dst,
                                const void *src, size_t bytes)
{
    return cpu_copy(dev, dst, src, bytes);
}

static bt_status cpu_copy_peer(bt_device *dst_dev, void *dst, bt_device *src_dev, const void *src,
                               size_t bytes)
{
    return cpu_copy(src_dev, dst, src, bytes);
}

static int cpu_peer_access(bt_device *a, bt_device *b) { return 2; }

static bt_status cpu_round_to(bt_device *dev, bt_dtype precision, float *x, size_t n)
{
    if (precision != BT_BF16 && precision != BT_F16 && precision != BT_F32)
        return bt_error(BT_ERR_INVALID_ARG, "cpu:%d: cannot round to %s", dev->index, bt_dtype_name(precision));
    bt_gemm_bf16_forget(x, n * sizeof *x);
    size_t per;
    const int64_t blocks = cpu_blocks(dev, n, sizeof *x, &per);
    BT_PARALLEL_FOR(blocks > 1 ? dev->threads : 1)
    for (int64_t b = 0; b < blocks; b++) {
        const size_t at = (size_t)b * per;
        bt_round_array(precision, x + at, n - at < per ? n - at : per);
    }
    return BT_OK;
}

#define CHUNK ((size_t)4096) /* floats: 16 KiB */
static bt_status cpu_round_copy(bt_device *dev, bt_dtype precision, float *dst, const float *src,
                                size_t n)
{
    if (precision != BT_BF16 && precision != BT_F16 && precision != BT_F32)
        return bt_error(BT_ERR_INVALID_ARG, "cpu:%d: cannot round to %s", dev->index, bt_dtype_name(precision));
    /* the bf16 copies the GEMMs keep of these parameters are rewritten block by block as the
     * values are written (cpu/bf16_params.h), instead of converted again at their next GEMM */
    bt_bf16_refresh r;
    bt_bf16_refresh_begin(&r, dst, n);
    size_t per;
    const int64_t blocks = cpu_blocks(dev, n, sizeof *dst, &per);
    BT_PARALLEL_FOR(blocks > 1 ? dev->threads : 1)
    for (int64_t b = 0; b < blocks; b++) {
        const size_t at = (size_t)b * per, end = at + (n - at < per ? n - at : per);
        for (size_t c = at; c < end; c += CHUNK) { /* converted while the chunk is in L1 */
            const size_t len = end - c < CHUNK ? end - c : CHUNK;
            bt_round_copy(precision, dst + c, src + c, len);
            if (r.n) bt_bf16_refresh_block(&r, dst + c, len);
        }
    }
    bt_bf16_refresh_end(&r);
    return BT_OK;
}

static bt_status cpu_store_bf16(bt_device *dev, void *dst, const float *src, size_t n)
{
    bt_gemm_bf16_forget(dst, n * sizeof(uint16_t));
    if (bt_bf16_pack(dst, src, n) != 0)
        return bt_error(BT_ERR_INTERNAL, "cpu:%d: storing %zu values as bf16: some are not bf16 values "
                        "(not rounded), so the upper halves would not hold them", dev->index, n);
    return BT_OK;
}

static bt_status cpu_load_bf16(bt_device *dev, float *dst, const void *src, size_t n)
{
    (void)dev;
    bt_gemm_bf16_forget(dst, n * sizeof *dst);
    bt_bf16_unpack(dst, src, n);
    return BT_OK;
}

static const bt_backend cpu_backend = {
    .name = "cpu",
    .shares_host_memory = 1,
    .runs_decode = cpu_runs_decode,
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
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait = cpu_stream_wait,
    .event_elapsed = cpu_event_elapsed,
    .event_host_ms = cpu_event_host_ms,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .copy_async = cpu_copy_async,
    .copy_peer = cpu_copy_peer,
    .peer_access = cpu_peer_access,
    .round_to = cpu_round_to,
    .round_copy = cpu_round_copy,
    .store_bf16 = cpu_store_bf16,
    .load_bf16 = cpu_load_bf16,
};

const bt_backend *bt_cpu_backend(void) { return &cpu_backend; }
