/* cuda/backend_cuda.c: the CUDA implementation of the backend table (backend/backend.h). A
 * cuda:N device is one GPU driven by one worker thread through two non-blocking streams: compute
 * (zero, copy, accumulate, op kernels, optimizer updates, rounding) and copy (the stage's outgoing
 * transfers, and the host-to-device half of staged transfers into it). Everything is queued and
 * returns at once; to_host, from_host, sum_squares and sync wait for the device. Several
 * bt_device may share one GPU (logical stages on cuda:0): each has its own streams and handles. The device holds a cuBLAS handle (with its own workspace, so GEMMs never
 * allocate), a cuDNN handle where the build has cuDNN (BATON_CUDNN=0 in the environment at open
 * leaves it out, for tests and comparisons; where cudnnCreate fails the device opens without it,
 * with a warning, and conv2d takes the GEMM path), a small device scratch block (the fault record
 * kernels write data errors into, the sum-of-squares accumulator and its partial sums) and a
 * reduction scratch for the kernels' ordered (deterministic) reductions.
 *
 * Data errors (an embedding index or a label out of range) cannot fail the op call that queued
 * the kernel without stalling the stream; they are reported, with the CPU kernel's message, by
 * the next to_host or sync as BT_ERR_INVALID_ARG, and the record is cleared.
 *
 * Host buffers passed to to_host/from_host are ordinary (pageable) memory and are free to reuse
 * when the call returns. copy_async wants pinned memory from host_alloc to be asynchronous; with
 * pageable memory the CUDA runtime stages it and the call returns once the data left the buffer.
 * Events are created with timing on; an event belongs to the GPU it was created on. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvtx3/nvToolsExt.h>

#include "backend/backend.h"
#include "cuda/backend_cuda.h"
#include "cuda/conv_cudnn.h"
#include "cuda/cuda_check.h"
#include "cuda/devices.h"
#include "cuda/ops_cuda.h"
#include "optim/optim.h"

/* Doubles of scratch for the kernels' ordered reductions (exec.reduce): 512 KiB. */
#define BT_REDUCE_SCRATCH ((int64_t)1 << 16)

/* cuBLAS workspace per device (NVIDIA's recommendation for Hopper is 32 MiB). */
#define BT_CUBLAS_WORKSPACE ((size_t)32 << 20)

/* The device scratch block, and its pinned host mirror for reading it back. */
typedef struct cuda_scratch {
    bt_k_fault fault;
    double sumsq;
    double sumsq_parts[BT_K_SUMSQ_PARTS]; /* bt_k_sum_squares' partial sums (device only) */
} cuda_scratch;

struct bt_device {
    int index;
    bt_cuda_exec exec;          /* exec.stream is the compute stream */
    cudaStream_t copy_stream;
    void *cublas_workspace;
    cuda_scratch *scratch;      /* device */
    cuda_scratch *host;         /* pinned host */
    char cudnn_note[160];       /* why cuDNN is not used although wanted; "" otherwise */
    char desc[460];
};

const bt_backend *bt_cuda_backend(void);

/* Makes dev's GPU the calling thread's current device. */
static bt_status use_device(bt_device *dev)
{
    BT_CUDA_TRY(cudaSetDevice(dev->index));
    return BT_OK;
}

/* Checks that GPU index exists, with a message naming the device otherwise. */
static bt_status check_index(int index)
{
    int n = 0;
    bt_status st = bt_gpu_count(&n);
    if (st != BT_OK) return bt_error_context(st, "cuda:%d", index);
    if (index < 0 || index >= n) {
        if (n == 1)
            return bt_error(BT_ERR_INVALID_ARG, "cuda:%d: this machine has 1 CUDA GPU (cuda:0)",
                            index);
        return bt_error(BT_ERR_INVALID_ARG,
                        "cuda:%d: this machine has %d CUDA GPUs (cuda:0 to cuda:%d)", index, n,
                        n - 1);
    }
    return BT_OK;
}

/* Whether to create a cuDNN handle: the build has cuDNN and BATON_CUDNN is not "0" (BATON_CUDNN=
 * broken makes open_cudnn act as if cudnnCreate failed, for tests). */
static int cudnn_wanted(void)
{
#ifdef BATON_HAVE_CUDNN
    const char *v = getenv("BATON_CUDNN");
    return !(v && strcmp(v, "0") == 0);
#else
    return 0;
#endif
}

/* Creates dev's cuDNN handle. Where cuDNN cannot start (cudnnCreate fails: a missing or
 * mismatched library, no memory), the device stays usable without it: conv2d takes the im2col +
 * cuBLAS path, a warning says so on stderr (once per process) and the device's description
 * carries it (dev->cudnn_note). Never a silent change. */
static void open_cudnn(bt_device *dev)
{
#ifdef BATON_HAVE_CUDNN
    static atomic_int warned;
    cudnnHandle_t h = NULL;
    const char *call = "cudnnCreate";
    /* BATON_CUDNN=broken: behave as if cudnnCreate failed (tests of this fallback) */
    const char *v = getenv("BATON_CUDNN");
    cudnnStatus_t e =
        v && strcmp(v, "broken") == 0 ? CUDNN_STATUS_NOT_INITIALIZED : cudnnCreate(&h);
    if (e == CUDNN_STATUS_SUCCESS) {
        e = cudnnSetStream(h, dev->exec.stream);
        call = "cudnnSetStream";
        if (e != CUDNN_STATUS_SUCCESS) cudnnDestroy(h);
    }
    (void)cudaGetLastError();
    if (e == CUDNN_STATUS_SUCCESS) {
        dev->exec.cudnn = h;
        return;
    }
    snprintf(dev->cudnn_note, sizeof dev->cudnn_note,
             "cuDNN unusable (%s: %s): conv2d takes the GEMM path", call, cudnnGetErrorString(e));
    if (!atomic_exchange(&warned, 1))
        fprintf(stderr, "baton: warning: cuda:%d: %s\n", dev->index, dev->cudnn_note);
#else
    (void)dev;
#endif
}

static void cuda_close(bt_device *dev)
{
    if (!dev) return;
    (void)cudaSetDevice(dev->index);
    if (dev->exec.stream) (void)cudaStreamSynchronize(dev->exec.stream);
    if (dev->copy_stream) (void)cudaStreamSynchronize(dev->copy_stream);
#ifdef BATON_HAVE_CUDNN
    bt_cudnn_plans_free(&dev->exec);
    if (dev->exec.cudnn) cudnnDestroy((cudnnHandle_t)dev->exec.cudnn);
#endif
    if (dev->exec.cublas) cublasDestroy(dev->exec.cublas);
    if (dev->cublas_workspace) (void)cudaFree(dev->cublas_workspace);
    if (dev->scratch) (void)cudaFree(dev->scratch);
    if (dev->exec.reduce) (void)cudaFree(dev->exec.reduce);
    if (dev->host) (void)cudaFreeHost(dev->host);
    if (dev->exec.stream) (void)cudaStreamDestroy(dev->exec.stream);
    if (dev->copy_stream) (void)cudaStreamDestroy(dev->copy_stream);
    (void)cudaGetLastError();
    free(dev);
}

static bt_status describe_device(bt_device *d)
{
    struct cudaDeviceProp prop;
    BT_CUDA_TRY(cudaGetDeviceProperties(&prop, d->index));
    snprintf(d->desc, sizeof d->desc, "cuda:%d (%s, sm_%d%d, %.1f GiB%s%s)", d->index, prop.name,
             prop.major, prop.minor, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
             d->cudnn_note[0] ? "; " : "", d->cudnn_note);
    return BT_OK;
}

static bt_status cuda_open(int index, int threads, bt_device **out)
{
    bt_device *d = NULL;
    bt_status st = BT_OK;
    *out = NULL;
    BT_TRY(bt_cuda_attach_kernels());
    BT_TRY(check_index(index));
    if (!(d = calloc(1, sizeof *d))) return bt_error(BT_ERR_NOMEM, "cuda:%d: out of memory", index);
    d->index = index;
    d->exec.device = index;
    BT_CUDA_TRY_GOTO(st, cudaSetDevice(index), fail);
    BT_CUDA_TRY_GOTO(st, cudaStreamCreateWithFlags(&d->exec.stream, cudaStreamNonBlocking), fail);
    BT_CUDA_TRY_GOTO(st, cudaStreamCreateWithFlags(&d->copy_stream, cudaStreamNonBlocking), fail);
    BT_CUBLAS_TRY_GOTO(st, cublasCreate(&d->exec.cublas), fail);
    BT_CUBLAS_TRY_GOTO(st, cublasSetStream(d->exec.cublas, d->exec.stream), fail);
    BT_CUBLAS_TRY_GOTO(st, cublasSetMathMode(d->exec.cublas, CUBLAS_DEFAULT_MATH), fail);
    BT_CUDA_TRY_GOTO(st, cudaMalloc(&d->cublas_workspace, BT_CUBLAS_WORKSPACE), fail);
    BT_CUBLAS_TRY_GOTO(st,
                       cublasSetWorkspace(d->exec.cublas, d->cublas_workspace,
                                          BT_CUBLAS_WORKSPACE),
                       fail);
    if (cudnn_wanted()) open_cudnn(d);
    BT_CUDA_TRY_GOTO(st, cudaMalloc((void **)&d->scratch, sizeof *d->scratch), fail);
    BT_CUDA_TRY_GOTO(st, cudaMallocHost((void **)&d->host, sizeof *d->host), fail);
    BT_CUDA_TRY_GOTO(st,
                     cudaMalloc((void **)&d->exec.reduce,
                                (size_t)BT_REDUCE_SCRATCH * sizeof *d->exec.reduce),
                     fail);
    d->exec.reduce_n = BT_REDUCE_SCRATCH;
    BT_CUDA_TRY_GOTO(st, cudaMemsetAsync(d->scratch, 0, sizeof *d->scratch, d->exec.stream), fail);
    BT_CUDA_TRY_GOTO(st, cudaStreamSynchronize(d->exec.stream), fail);
    d->exec.fault = &d->scratch->fault;
    BT_TRY_GOTO(st, describe_device(d), fail);
    *out = d;
    return BT_OK;
fail:
    bt_error_context(st, "cuda:%d: opening the device", index);
    cuda_close(d);
    return st;
}

static bt_status cuda_bind_thread(bt_device *dev) { return use_device(dev); }

static bt_status cuda_alloc(bt_device *dev, size_t bytes, void **out)
{
    *out = NULL;
    BT_TRY(use_device(dev));
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 256);
    if (e == cudaSuccess) return BT_OK;
    *out = NULL;
    (void)cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        free_bytes = total_bytes = 0;
    }
    return bt_error(e == cudaErrorMemoryAllocation ? BT_ERR_NOMEM : BT_ERR_BACKEND,
                    "cuda:%d: cannot allocate %zu bytes (%.1f MiB; %.1f MiB free of %.1f MiB): "
                    "cudaMalloc: %s",
                    dev->index, bytes, (double)bytes / 1048576.0, (double)free_bytes / 1048576.0,
                    (double)total_bytes / 1048576.0, cudaGetErrorString(e));
}

static void cuda_free(bt_device *dev, void *ptr)
{
    if (!ptr) return;
    (void)cudaSetDevice(dev->index);
    if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
}

static bt_status cuda_zero(bt_device *dev, void *ptr, size_t bytes)
{
    if (bytes == 0) return BT_OK;
    BT_TRY(use_device(dev));
    BT_CUDA_TRY(cudaMemsetAsync(ptr, 0, bytes, dev->exec.stream));
    return BT_OK;
}

static bt_status cuda_copy(bt_device *dev, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || dst == src) return BT_OK;
    BT_TRY(use_device(dev));
    BT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, dev->exec.stream));
    return BT_OK;
}

/* Reads the fault record back if a kernel that may raise one ran since the last check; returns
 * the first fault as BT_ERR_INVALID_ARG (with the CPU kernel's wording) and clears the record.
 * The stream must be idle (the callers synchronise first). */
static bt_status check_faults(bt_device *dev)
{
    if (!dev->exec.fault_armed) return BT_OK;
    BT_CUDA_TRY(cudaMemcpyAsync(&dev->host->fault, &dev->scratch->fault, sizeof dev->host->fault,
                                cudaMemcpyDeviceToHost, dev->exec.stream));
    BT_CUDA_TRY(cudaStreamSynchronize(dev->exec.stream));
    dev->exec.fault_armed = 0;
    const bt_k_fault f = dev->host->fault;
    if (f.kind == BT_K_FAULT_NONE) return BT_OK;
    BT_CUDA_TRY(cudaMemsetAsync(&dev->scratch->fault, 0, sizeof dev->scratch->fault,
                                dev->exec.stream));
    BT_CUDA_TRY(cudaStreamSynchronize(dev->exec.stream));
    return bt_cuda_fault_status(dev->index, &f);
}

static bt_status cuda_memory_info(bt_device *dev, size_t *free_bytes, size_t *total_bytes)
{
    BT_TRY(use_device(dev));
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return bt_error(BT_ERR_BACKEND, "cuda:%d: cudaMemGetInfo: %s", dev->index, cudaGetErrorString(e));
    }
    return BT_OK;
}

static bt_status cuda_sync(bt_device *dev)
{
    BT_TRY(use_device(dev));
    BT_CUDA_TRY(cudaStreamSynchronize(dev->copy_stream));
    BT_CUDA_TRY(cudaStreamSynchronize(dev->exec.stream));
    return check_faults(dev);
}

static bt_status cuda_to_host(bt_device *dev, void *dst, const void *src, size_t bytes)
{
    BT_TRY(use_device(dev));
    if (bytes)
        BT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, dev->exec.stream));
    BT_CUDA_TRY(cudaStreamSynchronize(dev->exec.stream));
    return check_faults(dev);
}

static bt_status cuda_from_host(bt_device *dev, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0) return BT_OK;
    BT_TRY(use_device(dev));
    BT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dev->exec.stream));
    BT_CUDA_TRY(cudaStreamSynchronize(dev->exec.stream));
    return BT_OK;
}

static bt_status float_dtype(const char *what, bt_dtype dtype)
{
    if (dtype == BT_F32 || dtype == BT_F64) return BT_OK;
    return bt_error(BT_ERR_UNSUPPORTED, "cuda: %s: dtype %s is not supported (f32 or f64)", what,
                    bt_dtype_name(dtype));
}

static bt_status cuda_accumulate(bt_device *dev, bt_dtype dtype, void *dst, const void *src,
                                 size_t n)
{
    BT_TRY(float_dtype("accumulate", dtype));
    BT_TRY(use_device(dev));
    BT_K_TRY(bt_k_acc, dev->exec.stream, dtype, src, dst, (int64_t)n);
    return BT_OK;
}

/* The kernel run_op(BT_RUN_DECODE) calls: the op's own decode (its KV cache) where it has a CPU
 * one, else its forward on the one position. */
static bt_op_fn decode_kernel(const bt_op_def *op)
{
    return op->cpu_decode ? op->cuda_decode : op->cuda_forward;
}

static int cuda_runs_decode(const bt_op_def *op) { return decode_kernel(op) != NULL; }

static bt_status cuda_run_op(bt_device *dev, const bt_op_def *op, int backward, bt_op_call *call)
{
    bt_op_fn fn = backward == BT_RUN_DECODE   ? decode_kernel(op)
                  : backward == BT_RUN_WEIGHT ? op->cuda_backward_weight
                  : backward                  ? op->cuda_backward
                                              : op->cuda_forward;
    if (!fn)
        return bt_error(BT_ERR_UNSUPPORTED, "op '%s' has no CUDA %s kernel", op->name,
                        backward == BT_RUN_DECODE   ? "decode"
                        : backward == BT_RUN_WEIGHT ? "weight-gradient (W)"
                        : backward                  ? "backward"
                                                    : "forward");
    BT_TRY(use_device(dev));
    call->stream = dev->exec.stream;
    call->threads = 1;
    call->backend_ctx = &dev->exec;
    return fn(call);
}

static bt_status cuda_sum_squares(bt_device *dev, bt_dtype dtype, const void *const *x,
                                  const size_t *n, int count, double *out)
{
    BT_TRY(float_dtype("sum_squares", dtype));
    BT_TRY(use_device(dev));
    BT_CUDA_TRY(cudaMemsetAsync(&dev->scratch->sumsq, 0, sizeof(double), dev->exec.stream));
    for (int i = 0; i < count; i++)
        BT_K_TRY(bt_k_sum_squares, dev->exec.stream, dtype, x[i], (int64_t)n[i],
                 dev->scratch->sumsq_parts, &dev->scratch->sumsq);
    BT_CUDA_TRY(cudaMemcpyAsync(&dev->host->sumsq, &dev->scratch->sumsq, sizeof(double),
                                cudaMemcpyDeviceToHost, dev->exec.stream));
    BT_CUDA_TRY(cudaStreamSynchronize(dev->exec.stream));
    *out = dev->host->sumsq;
    return BT_OK;
}

static bt_status cuda_optimizer_update(bt_device *dev, const bt_optimizer_config *cfg,
                                       bt_dtype dtype, void *w, const void *g, void *const *state,
                                       size_t n, double lr, int64_t step, double grad_scale)
{
    BT_TRY(float_dtype("optimizer", dtype));
    if (step < 1)
        return bt_error(BT_ERR_INVALID_ARG, "optimizer step: t is %lld, must be >= 1",
                        (long long)step);
    const int k = bt_optim_state_count(cfg);
    for (int i = 0; i < k; i++)
        if (!state || (n > 0 && !state[i]))
            return bt_error(BT_ERR_INVALID_ARG, "optimizer step: state array %d missing", i);
    if (n == 0) return BT_OK;
    BT_TRY(use_device(dev));
    switch (cfg->kind) {
    case BT_OPT_SGD:
        BT_K_TRY(bt_k_sgd, dev->exec.stream, dtype, w, g, k > 0 ? state[0] : NULL, (int64_t)n, lr,
                 cfg->weight_decay, cfg->momentum, cfg->nesterov, step == 1, grad_scale);
        return BT_OK;
    case BT_OPT_ADAMW:
        BT_K_TRY(bt_k_adamw, dev->exec.stream, dtype, w, g, state[0], state[1], (int64_t)n, lr,
                 cfg->weight_decay, cfg->beta1, cfg->beta2, cfg->eps, step, grad_scale);
        return BT_OK;
    }
    return bt_error(BT_ERR_INVALID_ARG, "optimizer step: unknown kind %d", (int)cfg->kind);
}

static const char *cuda_describe(bt_device *dev) { return dev->desc; }

const bt_cuda_exec *bt_cuda_device_exec(const bt_device *dev) { return &dev->exec; }

/* NVTX ranges around each instruction, for Nsight Systems (header-only NVTX3: a no-op unless a
 * profiler injects itself). */
static void cuda_range_begin(bt_device *dev, const char *name)
{
    (void)dev;
    nvtxRangePushA(name);
}

static void cuda_range_end(bt_device *dev)
{
    (void)dev;
    nvtxRangePop();
}

/* ---- events, streams and transfers ---------------------------------------------------------- */

struct bt_event {
    cudaEvent_t ev;
    int device;
};

static cudaStream_t stream_of(bt_device *dev, bt_stream_id stream)
{
    return stream == BT_STREAM_COPY ? dev->copy_stream : dev->exec.stream;
}

static bt_status event_create_flags(bt_device *dev, unsigned flags, bt_event **out)
{
    *out = NULL;
    BT_TRY(use_device(dev));
    bt_event *e = calloc(1, sizeof *e);
    if (!e) return bt_error(BT_ERR_NOMEM, "cuda:%d: out of memory for an event", dev->index);
    cudaError_t err = cudaEventCreateWithFlags(&e->ev, flags);
    if (err != cudaSuccess) {
        free(e);
        return bt_cuda_status(err, "cudaEventCreateWithFlags", __FILE__, __LINE__);
    }
    e->device = dev->index;
    *out = e;
    return BT_OK;
}

static bt_status cuda_event_create(bt_device *dev, bt_event **out)
{
    return event_create_flags(dev, cudaEventDefault, out);
}

static bt_status cuda_event_create_untimed(bt_device *dev, bt_event **out)
{
    return event_create_flags(dev, cudaEventDisableTiming, out);
}

static void cuda_event_destroy(bt_device *dev, bt_event *ev)
{
    if (!ev) return;
    (void)cudaSetDevice(ev->device);
    if (cudaEventDestroy(ev->ev) != cudaSuccess) (void)cudaGetLastError();
    free(ev);
}

int bt_cuda_device_index(bt_device *dev) { return dev->index; }
void *bt_cuda_stream(bt_device *dev, bt_stream_id stream) { return stream_of(dev, stream); }
void *bt_cuda_event_handle(bt_event *ev) { return ev->ev; }

static bt_status cuda_event_record(bt_device *dev, bt_event *ev, bt_stream_id stream)
{
    BT_TRY(use_device(dev));
    BT_CUDA_TRY(cudaEventRecord(ev->ev, stream_of(dev, stream)));
    return BT_OK;
}

static bt_status cuda_stream_wait(bt_device *dev, bt_stream_id stream, bt_event *ev)
{
    BT_TRY(use_device(dev));
    BT_CUDA_TRY(cudaStreamWaitEvent(stream_of(dev, stream), ev->ev, 0));
    return BT_OK;
}

static bt_status cuda_event_elapsed(bt_device *dev, bt_event *from, bt_event *to, double *ms)
{
    float f = 0;
    BT_TRY(use_device(dev));
    BT_CUDA_TRY(cudaEventElapsedTime(&f, from->ev, to->ev));
    *ms = f;
    return BT_OK;
}

static bt_status cuda_host_alloc(bt_device *dev, size_t bytes, void **out)
{
    *out = NULL;
    BT_TRY(use_device(dev));
    /* portable: pinned for every GPU's context, since any stage may copy from it */
    cudaError_t e = cudaHostAlloc(out, bytes ? bytes : 64, cudaHostAllocPortable);
    if (e == cudaSuccess) return BT_OK;
    *out = NULL;
    (void)cudaGetLastError();
    return bt_error(BT_ERR_NOMEM, "cuda:%d: cannot allocate %zu bytes of pinned host memory: %s",
                    dev->index, bytes, cudaGetErrorString(e));
}

static void cuda_host_free(bt_device *dev, void *ptr)
{
    (void)dev;
    if (ptr && cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
}

static bt_status cuda_copy_async(bt_device *dev, bt_stream_id stream, bt_copy_kind kind, void *dst,
                                 const void *src, size_t bytes)
{
    static const enum cudaMemcpyKind kinds[] = {cudaMemcpyDeviceToDevice, cudaMemcpyDeviceToHost,
                                                cudaMemcpyHostToDevice};
    if (bytes == 0 || dst == src) return BT_OK;
    BT_TRY(use_device(dev));
    BT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kinds[kind], stream_of(dev, stream)));
    return BT_OK;
}

static bt_status cuda_copy_peer(bt_device *dst_dev, void *dst, bt_device *src_dev, const void *src,
                                size_t bytes)
{
    if (bytes == 0) return BT_OK;
    BT_TRY(use_device(src_dev));
    BT_CUDA_TRY(cudaMemcpyPeerAsync(dst, dst_dev->index, src, src_dev->index, bytes,
                                    src_dev->copy_stream));
    return BT_OK;
}

/* Peer access enabled by this process, per direction (from, to): cudaDeviceEnablePeerAccess is
 * called once per direction, since a repeat is an API error (cudaErrorPeerAccessAlreadyEnabled,
 * which compute-sanitizer reports). GPUs past BT_PEER_MAX are enabled every time. */
#define BT_PEER_MAX 64
static pthread_mutex_t peer_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char peer_enabled[BT_PEER_MAX][BT_PEER_MAX];

/* Lets GPU `from` map GPU `to`'s memory; 1 on success (or where it already could), 0 otherwise.
 * Leaves `from` current. */
static int enable_peer(int from, int to)
{
    const int tracked = from < BT_PEER_MAX && to < BT_PEER_MAX;
    int ok = 0;
    pthread_mutex_lock(&peer_lock);
    if (tracked && peer_enabled[from][to]) {
        ok = 1;
    } else if (cudaSetDevice(from) == cudaSuccess) {
        cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
        /* already enabled (by someone else in this process) is not an error */
        ok = e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled;
        if (ok && tracked) peer_enabled[from][to] = 1;
    }
    (void)cudaGetLastError();
    pthread_mutex_unlock(&peer_lock);
    return ok;
}

/* Same GPU: 2. Different GPUs: 1 when each can map the other's memory (enabled here, once per
 * direction for the process), else 0; also 0 where switching to either GPU fails. */
static int cuda_peer_access(bt_device *a, bt_device *b)
{
    if (a->index == b->index) return 2;
    int ab = 0, ba = 0;
    if (cudaDeviceCanAccessPeer(&ab, a->index, b->index) != cudaSuccess ||
        cudaDeviceCanAccessPeer(&ba, b->index, a->index) != cudaSuccess || !ab || !ba) {
        (void)cudaGetLastError();
        return 0;
    }
    return enable_peer(a->index, b->index) && enable_peer(b->index, a->index) ? 1 : 0;
}

static bt_status cuda_round_to(bt_device *dev, bt_dtype precision, float *x, size_t n)
{
    if (precision == BT_F32 || n == 0) return BT_OK;
    BT_TRY(use_device(dev));
    BT_K_TRY(bt_k_round, dev->exec.stream, precision, x, (int64_t)n);
    return BT_OK;
}

static const bt_backend cuda_backend = {
    .name = "cuda",
    .copies_overlap = 1,
    .shares_host_memory = 0,
    .runs_decode = cuda_runs_decode,
    .open = cuda_open,
    .close = cuda_close,
    .bind_thread = cuda_bind_thread,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .zero = cuda_zero,
    .copy = cuda_copy,
    .to_host = cuda_to_host,
    .from_host = cuda_from_host,
    .accumulate = cuda_accumulate,
    .run_op = cuda_run_op,
    .sum_squares = cuda_sum_squares,
    .optimizer_update = cuda_optimizer_update,
    .sync = cuda_sync,
    .describe = cuda_describe,
    .memory_info = cuda_memory_info,
    .range_begin = cuda_range_begin,
    .range_end = cuda_range_end,
    .event_create = cuda_event_create,
    .event_create_untimed = cuda_event_create_untimed,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait = cuda_stream_wait,
    .event_elapsed = cuda_event_elapsed,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .copy_async = cuda_copy_async,
    .copy_peer = cuda_copy_peer,
    .peer_access = cuda_peer_access,
    .round_to = cuda_round_to,
#ifdef BATON_HAVE_NCCL
    .comms = &bt_cuda_nccl_comms, /* nccl_transfer.c */
#endif
};

/* Attaches the kernels already here (open does it again and reports a failure), so that anyone
 * who looked the backend up sees which ops can run on a GPU before a device is opened. */
const bt_backend *bt_cuda_backend(void)
{
    (void)bt_cuda_attach_kernels();
    return &cuda_backend;
}
