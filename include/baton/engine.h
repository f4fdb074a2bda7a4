/* baton/engine.h: running a graph. An engine takes a graph (which must outlive it), cuts it into
 * stages on devices, allocates every buffer once, and then runs steps: forward for inference,
 * forward+backward (+ optimizer) for training, streaming micro-batches through the stages. */
#ifndef BATON_ENGINE_H
#define BATON_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "baton/api.h"
#include "baton/config.h"
#include "baton/graph.h"
#include "baton/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_engine bt_engine;

/* How activations and gradients cross a stage boundary (see docs/architecture.md, Transfers). */
typedef enum bt_transfer_mode {
    BT_TRANSFER_AUTO = 0,     /* the fastest path each pair of devices has */
    BT_TRANSFER_STAGED = 1,   /* force double-buffered staging through pinned host memory */
    BT_TRANSFER_HOST = 2,     /* force the synchronous copy through host memory (debugging); across
                                 processes a GPU side stages through pinned host memory (mpi-staged) */
    BT_TRANSFER_NCCL = 3      /* across processes: NCCL between GPU stages on different ranks (an
                                 error where the build has no NCCL or a remote boundary has a CPU side) */
} bt_transfer_mode;

/* The largest watchdog (about 31 years): in practice, no watchdog. */
#define BT_WATCHDOG_MAX_S 1e9

typedef struct bt_engine_params {
    bt_parallel_config parallel;
    bt_optimizer_config optimizer;
    bt_lr_schedule_config lr_schedule;
    double clip_norm;         /* 0: none */
    int64_t total_steps;      /* for lr schedules that need the horizon (cosine); 0: unknown */
    int64_t batch;            /* samples per step; the micro-batch is batch / microbatches */
    uint64_t seed;            /* parameter initialisation and dropout */
    bt_dtype dtype;           /* compute and parameter type on the CPU: BT_F32 or BT_F64 */
    int training;             /* 1: allocate gradients and optimizer state */
    int threads;              /* BLAS threads per device; 0: cores / devices */
    double watchdog_s;        /* seconds a stage may wait, or run one instruction, before the run
                                 stops with BT_ERR_TIMEOUT; 0: 60 s; at most BT_WATCHDOG_MAX_S
                                 (bt_engine_create refuses anything else, NaN included) */
    size_t device_memory;     /* bytes each device may hold; 0: what the device reports free.
                                 A plan that needs more is refused before anything is allocated.
                                 The limit is per memory pool (every cpu:N shares the host's one)
                                 unless device_memory_each is set */
    int device_memory_each;   /* 1: device_memory limits each device name (cpu:0, cpu:1, cuda:0)
                                 separately, as `baton plan --memory` prices them (the CLI's
                                 --memory sets this) */
    bt_dtype precision;       /* BT_F32 (default), BT_BF16 or BT_F16: compute precision with f32
                                 master weights (dtype must be BT_F32); see docs/c-api.md */
    double loss_scale;        /* BT_F16: initial dynamic loss scale; 0: 65536 */
    bt_transfer_mode transfer;
} bt_engine_params;

/* Defaults: one stage on cpu:0, 1 micro-batch, batch 32, seed 0, f32, training, AdamW. */
BT_API void bt_engine_params_init(bt_engine_params *params);

/* Builds an engine for graph. The caller owns *out (free with bt_engine_destroy). */
BT_API bt_status bt_engine_create(const bt_graph *graph, const bt_engine_params *params, bt_engine **out);
/* Stops the workers and frees everything; accepts NULL and half-built engines. */
BT_API void bt_engine_destroy(bt_engine *engine);

/* One model input for a step: batch samples of the input's per-sample shape, contiguous. */
typedef struct bt_feed {
    const char *name;
    const void *data;
    bt_dtype dtype;
} bt_feed;

typedef struct bt_step_result {
    double loss;              /* mean loss over the batch (training) */
    double step_ms;
    double samples_per_s;
    double bubble;            /* idle fraction of the step across stages, 0..1 */
    double lr;                /* learning rate used by this step */
    double grad_norm;         /* global gradient norm before clipping (unscaled) */
    int64_t samples;
    int skipped;              /* f16: 1 when the gradients overflowed and the step was skipped */
    double loss_scale;        /* f16: the loss scale this step used; 1 otherwise */
} bt_step_result;

/* Forward and backward over one batch, gradients accumulated over its micro-batches; parameters
 * are left unchanged. Gradients are readable afterwards with bt_engine_read_grad. */
BT_API bt_status bt_engine_compute_grads(bt_engine *engine, const bt_feed *feeds, int n_feeds,
                                         bt_step_result *result);
/* bt_engine_compute_grads followed by the optimizer step on every stage. */
BT_API bt_status bt_engine_train_step(bt_engine *engine, const bt_feed *feeds, int n_feeds,
                                      bt_step_result *result);
/* Forward only (inference schedule). output, if not NULL, receives batch times the last layer's
 * per-sample elements, in the engine's dtype. When the last layer is a loss (a training graph,
 * fed its labels too), result->loss is the mean loss over the batch, as a training step reports
 * it. */
BT_API bt_status bt_engine_forward(bt_engine *engine, const bt_feed *feeds, int n_feeds, void *output,
                                   bt_step_result *result);

/* Forward only, copying the output of the named layer (batch times its per-sample elements) into
 * output: for example the logits before a loss, for accuracy. */
BT_API bt_status bt_engine_forward_layer(bt_engine *engine, const bt_feed *feeds, int n_feeds,
                                         const char *layer, void *output, bt_step_result *result);

/* Forward only on one batch (the forward-only schedule, across every stage and device), for
 * serving: output, if not NULL, receives the output of the named layer (NULL: the last layer),
 * batch times its per-sample elements in the engine's dtype (i32 for an integer output);
 * losses, if not NULL, receives each sample's loss (batch values in the engine's dtype) and is
 * only allowed when the last layer is a loss, whose labels must then be fed too. result->loss is
 * their mean, result->step_ms the batch's latency. The engine may be an inference engine
 * (training = 0) or a training one; nothing in it changes. */
BT_API bt_status bt_engine_predict(bt_engine *engine, const bt_feed *feeds, int n_feeds, const char *layer,
                                   void *output, void *losses, bt_step_result *result);

/* Which rows of every global batch this engine's stages read: [*first, *first + *count). In one
 * process the whole batch; one rank of a job across processes the shard of its replica (batch / D
 * rows). */
BT_API void bt_engine_feed_rows(const bt_engine *engine, int64_t *first, int64_t *count);
/* 1 when the engine's stages read model input name: in one process every input; one rank of a
 * job across processes those its own stage reads (the first stage the images, the last the
 * labels, say). */
BT_API int bt_engine_reads_input(const bt_engine *engine, const char *name);
/* on = 1: the feeds of the following steps hold only the rows bt_engine_feed_rows names, and only
 * the inputs bt_engine_reads_input says yes to are needed (others may be left out). on = 0, the
 * default: each feed holds the whole global batch, and every input the stages read is needed. */
BT_API bt_status bt_engine_set_local_feeds(bt_engine *engine, int on);

/* Page-locked host memory for feeds, from the engine's devices (cudaHostAlloc when a stage is on a
 * GPU, ordinary aligned memory otherwise). Inputs fed from it reach a GPU by asynchronous copies;
 * fed from ordinary memory they are correct but the copy waits for the device. Free it with
 * bt_engine_host_free before destroying the engine. */
BT_API bt_status bt_engine_host_alloc(bt_engine *engine, size_t bytes, void **out);
BT_API void bt_engine_host_free(bt_engine *engine, void *ptr);

/* Copy a parameter (or its gradient) by name in the engine's dtype; bytes must match exactly. */
BT_API bt_status bt_engine_read_param(const bt_engine *engine, const char *name, void *dst, size_t bytes);
BT_API bt_status bt_engine_write_param(bt_engine *engine, const char *name, const void *src, size_t bytes);
BT_API bt_status bt_engine_read_grad(const bt_engine *engine, const char *name, void *dst, size_t bytes);

/* Optimizer state of a parameter: slot 0..bt_engine_optimizer_slots()-1 (AdamW: 0 = exp_avg,
 * 1 = exp_avg_sq; SGD with momentum: 0 = momentum_buffer), in the engine's dtype. */
BT_API int bt_engine_optimizer_slots(const bt_engine *engine);
/* The PyTorch name of slot ("exp_avg", "exp_avg_sq", "momentum_buffer"). */
BT_API const char *bt_engine_optimizer_slot_name(const bt_engine *engine, int slot);
BT_API bt_status bt_engine_read_state(const bt_engine *engine, const char *name, int slot, void *dst,
                                      size_t bytes);
BT_API bt_status bt_engine_write_state(bt_engine *engine, const char *name, int slot, const void *src,
                                       size_t bytes);
/* Sets the optimizer step counter (resuming: bias correction, lr schedule and dropout seeds all
 * depend on it). */
BT_API bt_status bt_engine_set_step(bt_engine *engine, int64_t step);
/* precision f16's dynamic loss scale (docs/model-format.md, train.loss_scale): *scale, what the
 * next step seeds the loss gradient with, and *clean_steps, the steps applied since it last
 * changed (it doubles when they reach 2000); returns 1, or 0 (scale 1, clean_steps 0) when the
 * engine does not scale (f32, bf16). A checkpoint records both, so a resumed f16 run continues bit
 * for bit. Setting them is refused outside f16, for a scale outside [1, 2^64] and for clean_steps
 * outside [0, 2000). */
BT_API int bt_engine_loss_scale(const bt_engine *engine, double *scale, int64_t *clean_steps);
BT_API bt_status bt_engine_set_loss_scale(bt_engine *engine, double scale, int64_t clean_steps);
/* Sets the number of steps the run will take (the horizon of a cosine schedule). */
BT_API bt_status bt_engine_set_total_steps(bt_engine *engine, int64_t total_steps);
/* The engine's compute dtype and samples per step. */
BT_API bt_dtype bt_engine_dtype(const bt_engine *engine);
BT_API int64_t bt_engine_batch(const bt_engine *engine);

typedef struct bt_memory_stats {
    size_t weights, gradients, optimizer, activations, workspace; /* bytes reserved per class */
    size_t current;           /* bytes reserved now */
    size_t peak;              /* the most reserved at once */
    size_t activation_peak;   /* the most activation-slot bytes holding live micro-batches */
    int peak_microbatches;    /* the most micro-batches held at once */
    /* precision bf16 on a CPU stage keeps activations as bf16 (2 bytes an element, plus f32
     * working copies of the values the running node needs; docs/architecture.md, Memory):
     * bf16_kept is 1 there, and activation_peak_f32 is what activation_peak would be with f32
     * slots (equal to it elsewhere) */
    int bf16_kept;
    size_t activation_peak_f32;
} bt_memory_stats;

typedef struct bt_stage_info {
    int first_layer, n_layers;
    const char *device;       /* "cpu:0" */
    int64_t n_params;
    size_t send_bytes;        /* bytes this stage sends downstream per micro-batch */
} bt_stage_info;

/* Where a stage's time went, summed over every step since the engine was created. */
typedef struct bt_time_stats {
    int64_t steps;
    double wall_ms;           /* the steps' wall-clock time */
    double busy_ms;           /* forward, backward, optimizer */
    double transfer_ms;       /* sending, and copying what was received */
    double idle_ms;           /* the rest: waiting for other stages */
} bt_time_stats;

BT_API bt_status bt_engine_time(const bt_engine *engine, int stage, bt_time_stats *out);

/* The way a boundary's messages travel. */
typedef enum bt_transfer_path {
    BT_PATH_HOST = 0,         /* device -> host buffer -> device, synchronous (different backends) */
    BT_PATH_LOCAL = 1,        /* both stages share memory (cpu:N, or logical stages on one GPU):
                                 one device-local copy into the receiver's buffer */
    BT_PATH_PEER = 2,         /* GPU to GPU with peer access: cudaMemcpyPeerAsync */
    BT_PATH_STAGED = 3,       /* GPU to GPU through pinned host memory, double-buffered */
    BT_PATH_MPI = 4,          /* CPU stages on different ranks of a job under mpirun: MPI messages */
    BT_PATH_MPI_STAGED = 5,   /* different ranks, a GPU on either side: device <-> pinned host memory on
                                 the GPU's streams, MPI messages between the host buffers */
    BT_PATH_NCCL = 6,         /* GPU stages on different ranks: ncclSend / ncclRecv, device to device */
    BT_PATH_SHM = 7           /* data-parallel replicas of a CPU stage on one machine: loads and stores
                                 through an MPI shared window (gradient reductions only) */
} bt_transfer_path;

/* "host", "local", "peer", "staged", "mpi", "mpi-staged", "nccl", "shm" */
BT_API const char *bt_transfer_path_name(bt_transfer_path path);

/* One direction of one stage boundary, with what it has moved since the engine was created. */
typedef struct bt_boundary_stats {
           int from, to;             /* sending and receiving stage */
           int grad;                 /* 0: activations going forward; 1: gradients going back */
           bt_transfer_path path;
    size_t message_bytes;     /* one micro-batch's message */
    int64_t messages;         /* messages sent */
    double bytes;             /* bytes moved */
    double copy_ms;           /* time the copies took, from device events (host clock on a CPU) */
} bt_boundary_stats;

BT_API int bt_engine_num_boundaries(const bt_engine *engine);
BT_API bt_status bt_engine_boundary(const bt_engine *engine, int index, bt_boundary_stats *out);

BT_API int bt_engine_num_stages(const bt_engine *engine);
BT_API bt_status bt_engine_stage(const bt_engine *engine, int stage, bt_stage_info *out);
BT_API bt_status bt_engine_memory(const bt_engine *engine, int stage, bt_memory_stats *out);
/* Step counter (optimizer steps taken). */
BT_API int64_t bt_engine_step(const bt_engine *engine);

/* A job across processes (`baton run` under mpirun: each rank runs one stage of one replica, see
 * docs/distributed.md): this rank's number, 0 in one process. */
BT_API int bt_engine_rank(const bt_engine *engine);
/* Across processes every rank must call it (a checkpoint): afterwards rank 0 holds a copy of every
 * stage's current weights and optimizer state (replica 0's rank of each stage sends its own), so
 * it can read or save the whole model; the copy is dropped at the next step. A rank holds its own
 * stage's tensors only: another stage's read elsewhere is an error naming its rank, and a write of
 * one is dropped (its own rank writes it, so every rank may load the same file). In one process:
 * nothing to do. */
BT_API bt_status bt_engine_sync_params(bt_engine *engine);
/* Between steps, on every rank alike: *stop = 1 when local is nonzero on any rank of the job (a
 * signal reached one of them), so every rank stops after the same step. In one process *stop is
 * local (nonzero: 1). */
BT_API bt_status bt_engine_agree_stop(bt_engine *engine, int local, int *stop);

/* ---- checkpoints across processes (docs/checkpoints.md; src/exec/engine_ckpt.c) ---- */
/* Processes in the job: 1 in one process. */
BT_API int bt_engine_ranks(const bt_engine *engine);
/* The stage that holds parameter name (*stage), or BT_ERR_INVALID_ARG naming it. */
BT_API bt_status bt_engine_param_stage(const bt_engine *engine, const char *name, int *stage);
/* 1 when this process runs stage and holds its memory (a resume writes its tensors here): in one
 * process every stage, across processes every replica of its own stage. */
BT_API int bt_engine_runs_stage(const bt_engine *engine, int stage);
/* 1 when this process writes stage's tensors into a checkpoint: in one process every stage, across
 * processes replica 0 of each stage (the replicas hold the same weights). */
BT_API int bt_engine_owns_stage(const bt_engine *engine, int stage);
/* Collective across processes (every rank calls it): with parallel.zero: 1 each stage's optimizer
 * state, spread over its replicas, is gathered whole on each of them, so its owner can read every
 * tensor (the next step spreads it again). Otherwise, and in one process, nothing to do. */
BT_API bt_status bt_engine_gather_state(bt_engine *engine);
/* Collective across processes: each rank gives its status (and, when it failed, its message from
 * bt_last_error); every rank gets BT_OK when all succeeded, or else the status of the lowest
 * failing rank with its message, prefixed "rank R (stage S, replica D): " on the other ranks.
 * Waits at most timeout_s (<= 0: the engine's watchdog). In one process: returns mine. */
BT_API bt_status bt_engine_agree(bt_engine *engine, bt_status mine, double timeout_s);

#ifdef __cplusplus
}
#endif
#endif
