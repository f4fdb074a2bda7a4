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
typedef struct bt_event bt_event;   /* a marker in one of a device's streams */

/* Each device has two ordered queues: compute (ops, optimizer, zero, accumulate) and copy
 * (outgoing transfers). Work on one stream runs in call order; across streams and devices only
 * events order it. On the CPU everything runs at the call, so events only keep timestamps. */
typedef enum bt_stream_id { BT_STREAM_COMPUTE = 0, BT_STREAM_COPY = 1 } bt_stream_id;

typedef enum bt_copy_kind { BT_COPY_D2D = 0, BT_COPY_D2H = 1, BT_COPY_H2D = 2 } bt_copy_kind;

/* run_op's third argument for the weight-gradient half of a split backward (op->*_backward_weight) */
#define BT_RUN_WEIGHT 2
/* run_op's third argument for one position of one sequence (the op's decode kernel for this
 * backend where the op has one, else its forward; call->position and call->cache set): only for
 * ops the backend's runs_decode accepts */
#define BT_RUN_DECODE 3

/* Communication between processes straight from device memory (the CUDA backend's NCCL): a
 * communicator joins nranks processes, one device each, from a unique id that the caller shares
 * (over MPI: exec/dist_nccl.c). It owns a stream of its own on its device, so what waits there for
 * other ranks never holds up the device's compute or copy stream. Every call reports the library's
 * own message as a bt_status. */
typedef struct bt_backend_comm bt_backend_comm;

typedef struct bt_backend_comms {
    const char *name;                                 /* "nccl" */
    size_t id_bytes;                                  /* the unique id's size */
    bt_status (*unique_id)(void *id);
    /* Collective over the nranks processes (each calls it with the same id). */
    bt_status (*create)(bt_device *dev, const void *id, int nranks, int rank, bt_backend_comm **out);
    /* Waits for the communicator's work (abort = 0) or aborts it (abort = 1: a failed job, where
     * waiting could hang); accepts NULL. */
    void (*destroy)(bt_backend_comm *c, int abort);
    /* Sends bytes to peer on dev's copy stream (queued behind what that stream holds). */
    bt_status (*send)(bt_device *dev, bt_backend_comm *c, const void *buf, size_t bytes, int peer);
    /* Receives bytes from peer on the communicator's stream and records done there (dev's event). */
    bt_status (*recv)(bt_device *dev, bt_backend_comm *c, void *buf, size_t bytes, int peer, bt_event *done);
    /* In-place sum of count elements over the communicator, on its stream once after (an event of
     * dev) completed; done is recorded after it. */
    bt_status (*allreduce_sum)(bt_device *dev, bt_backend_comm *c, void *buf, size_t count, bt_dtype dtype,
                               bt_event *after, bt_event *done);
    /* An error raised asynchronously (a peer lost) as a status; BT_OK while healthy. */
    bt_status (*check)(bt_backend_comm *c);
} bt_backend_comms;

typedef struct bt_backend {
    const char *name;                                 /* "cpu", "cuda" */
    int copies_overlap;       /* 1: the copy stream runs beside compute (CUDA); 0: in turn (CPU) */
    /* 1: every device of this backend allocates from the machine's memory (cpu:N), so together
     * with host buffers they form one memory pool; 0: each device index is its own pool (a GPU,
     * shared by the logical stages opened on it). The engine's admission check groups stages by
     * this, never by device name. */
    int shares_host_memory;
    /* Whether run_op(BT_RUN_DECODE) can run op here: 1 where the op has a decode kernel for this
     * backend (attention's KV cache: cpu_decode, cuda_decode), or has none and its forward runs
     * here; 0 otherwise, and exec/decode.c refuses the stage, naming the layer. NULL: the
     * backend cannot decode at all. */
    int (*runs_decode)(const bt_op_def *op);
    /* Opens device index; threads is the compute threads it may use (CPU: BLAS threads). A
     * negative count is a preference (-threads) the backend may replace by a count already in
     * effect (CPU: OpenBLAS's one count per process); a positive one is required. */
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
    /* backward: 0 forward, 1 backward, BT_RUN_WEIGHT the op's weight gradient (backward_weight),
     * BT_RUN_DECODE one decoding position (ops runs_decode accepts) */
    bt_status (*run_op)(bt_device *dev, const bt_op_def *op, int backward, bt_op_call *call);
    /* Sum of squares of every element of count arrays (global-norm clipping): one wait for the
     * device. Infinity or NaN in the input gives a non-finite sum (f16 overflow checks). */
    bt_status (*sum_squares)(bt_device *dev, bt_dtype dtype, const void *const *x, const size_t *n,
                             int count, double *out);
    /* One optimizer update of n weights; state[] holds the optimizer's buffers (see optim/optim.h);
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

    /* ---- asynchronous work, for the executor's transfers and timing ---- */
    bt_status (*event_create)(bt_device *dev, bt_event **out);
    /* Optional (NULL: event_create): an event only ever recorded and waited on, never timed (the
     * executor's transfer ordering). The CUDA backend creates it with cudaEventDisableTiming, which
     * makes recording and waiting cheaper; event_elapsed on it is an error there. */
    bt_status (*event_create_untimed)(bt_device *dev, bt_event **out);
    void (*event_destroy)(bt_device *dev, bt_event *ev);
    /* Marks the current end of a stream of dev; a later wait or elapsed time refers to it. */
    bt_status (*event_record)(bt_device *dev, bt_event *ev, bt_stream_id stream);
    /* Work queued on dev's stream after this call starts once ev (of any device of this backend)
     * has completed. */
    bt_status (*stream_wait)(bt_device *dev, bt_stream_id stream, bt_event *ev);
    /* Milliseconds from one recorded event to another of the same device, once both completed
     * (after sync). */
    bt_status (*event_elapsed)(bt_device *dev, bt_event *from, bt_event *to, double *ms);
    /* Optional: the host clock (bt_now_ms) at which a recorded event completed, for backends whose
     * events are read from the host's clock (CPU). Timing anchors each device's events to the
     * host with it: one clock read, so no preemption can fall between two. NULL: the executor
     * reads the host clock right after recording (CUDA, where the event completes later). */
    double (*event_host_ms)(bt_device *dev, bt_event *ev);
    /* Page-locked host memory for asynchronous copies (CPU: ordinary aligned memory). */
    bt_status (*host_alloc)(bt_device *dev, size_t bytes, void **out);
    void (*host_free)(bt_device *dev, void *ptr);
    /* Queues a copy on dev's stream. Host pointers should come from host_alloc; they must stay
     * valid and unchanged until the copy completes. */
    bt_status (*copy_async)(bt_device *dev, bt_stream_id stream, bt_copy_kind kind, void *dst,
                            const void *src, size_t bytes);
    /* Queues a copy of src (on src_dev) into dst (on dst_dev) on src_dev's copy stream. Only for
     * pairs that peer_access reported as 1. */
    bt_status (*copy_peer)(bt_device *dst_dev, void *dst, bt_device *src_dev, const void *src,
                           size_t bytes);
    /* How two devices of this backend can exchange memory: 2 = they are the same memory (cpu:N,
     * or two logical stages on one GPU), 1 = direct peer access (enabled by this call), 0 = only
     * through the host. */
    int (*peer_access)(bt_device *a, bt_device *b);
    /* Rounds n f32 values in place to the precision BT_BF16 or BT_F16 (round to nearest even,
     * f16 overflow becomes infinity); the values stay f32. On the compute stream. */
    bt_status (*round_to)(bt_device *dev, bt_dtype precision, float *x, size_t n);
    /* Optional (NULL: a copy, then round_to). dst = src rounded as round_to does, n f32 values in
     * one pass (dst and src do not overlap): the refresh of a parameter's compute copy. On the
     * compute stream. */
    bt_status (*round_copy)(bt_device *dev, bt_dtype precision, float *dst, const float *src,
                            size_t n);
    /* Optional (NULL: the backend keeps activations in f32 under bf16: cuda). Storage of values
     * that are bf16 already (exec/bf16_store.c): store_bf16 writes the upper 16 bits of n f32
     * values into dst, and fails with BT_ERR_INTERNAL when a dropped lower half is not zero (the
     * value was not rounded: a bug, never a silent change of the value); load_bf16 writes n bf16
     * values back as f32. Both on the compute stream, both exact. */
    bt_status (*store_bf16)(bt_device *dev, void *dst, const float *src, size_t n);
    bt_status (*load_bf16)(bt_device *dev, float *dst, const void *src, size_t n);
    /* Optional (NULL: none in this build): communication between processes from device memory. */
    const bt_backend_comms *comms;
} bt_backend;

/* The backend for a device kind ("cpu", "cuda"), or NULL with a message when this build or
 * machine has none. */
const bt_backend *bt_backend_find(const char *kind);

/* Parses "cpu:1" into kind ("cpu") and index (1); "cuda:local" is cuda:<this rank's local rank>
 * under a launcher (mpirun, srun), cuda:0 in one process (docs/distributed.md). */
bt_status bt_device_parse(const char *spec, char *kind, size_t kind_size, int *index);

const bt_backend *bt_cpu_backend(void);

/* be->run_op(dev, op, mode, call), and where it fails without a message (a custom op's kernel
 * that never called bt_op_error) a message naming the op and the status, never an empty or an
 * older one (run_op.c). Everyone who runs an op calls this, not be->run_op. */
bt_status bt_backend_run_op(const bt_backend *be, bt_device *dev, const bt_op_def *op, int mode, bt_op_call *call);

/* A parameter's rounded compute copy refreshed from its f32 master weights: the backend's
 * round_copy where it has one, else a copy and round_to. The engine's refresh and the
 * profiler's use it, so both time and run the same passes. */
static inline bt_status bt_backend_refresh_copy(const bt_backend *be, bt_device *dev, bt_dtype precision,
                                                float *w_lp, const float *w, size_t n)
{
    if (be->round_copy) return be->round_copy(dev, precision, w_lp, w, n);
    bt_status st = be->copy_async(dev, BT_STREAM_COMPUTE, BT_COPY_D2D, w_lp, w, n * sizeof *w);
    return st != BT_OK ? st : be->round_to(dev, precision, w_lp, n);
}

#endif
