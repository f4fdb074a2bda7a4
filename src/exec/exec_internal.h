/* exec/exec_internal.h: the engine's state, shared by the files of exec/:
 *   engine.c        lifecycle (create, destroy)
 *   engine_job.c    job dispatch (a step posts a job, waits; stuck workers)
 *   param_init.c    deterministic initial weights
 *   layout.c        each stage's memory, from the memory model; the admission check
 *   bf16_store.c    precision bf16 on a CPU stage: activations kept as bf16 in the slots, worked
 *                   on in f32 working copies (plan/memory.h)
 *   topology.c      transfer paths between stages and the channels that follow the crossings
 *   engine_query.c  accessors: parameters and state by name, statistics, boundaries
 *   worker.c        the instruction interpreter each stage's thread runs
 *   worker_nodes.c  its FWD, BWD and W on the stage's nodes (op calls, rounding, recomputation)
 *   worker_step.c   its STEP instruction: the barrier, the global norm, the optimizer update
 *   transfer.c      how a message crosses a stage boundary, through the table of transports
 *                   (exec/transport.h: one entry per path)
 *   rank_hooks.c    the rank hooks of one process (exec/rank_hooks.h: the steps of a job that
 *                   meet other processes, through one table the engine holds)
 *   channel.c       the mailbox that tells the receiver a message is there
 *   engine_dist.c   one rank of a job across processes: the mpi path, STEP's exchange, statistics
 *   dist_dp.c       data parallelism across processes: gradient buckets, parallel.zero
 *   dist_shm.c      the same through a shared window when a stage's replicas share one machine
 *   decode.c        autoregressive decoding through the stages (exec/decode.h): per-stage KV
 *                   caches, one position's rows streaming stage to stage, several sequences at once
 *   dist_sync.c     across processes, between steps: rank 0's checkpoint copy, agreeing to stop
 *   step_view.c     the read-only view of the last step exported to trace/ (nothing outside exec
 *                   includes this header)
 * The functions of the files that span processes are declared in exec/exec_dist_internal.h,
 * which this header includes at its end.
 *
 * Memory is planned at creation and never allocated in the step loop. plan/memory.h is the one
 * model of it: per stage, `n_slots` activation slots (one per micro-batch the schedule keeps in
 * flight) each holding every value the stage reads or produces plus the nodes' saved state; one
 * set of value gradients; parameters, their gradients and optimizer state; the largest workspace
 * any node asks for; and per channel a buffer on the receiving device with room for every
 * micro-batch of a step. Each instruction
 * names the slot its micro-batch lives in (the schedule assigns slots and the validator proves no
 * micro-batch takes a slot another still holds); the worker records it in slot_of before running
 * the instruction. A value received over a device-to-device channel is read in place from the
 * channel's buffer, so it takes no slot space.
 *
 * Ordering: a worker only queues work on its device's streams; the host waits for its device once
 * per step and once more at STEP, where every stage meets the others (all or nothing). Across stages, a channel's
 * host flag says a message was queued and an event says when it has arrived. */
#ifndef BT_EXEC_INTERNAL_H
#define BT_EXEC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "backend/backend.h"
#include "baton/engine.h"
#include "core/turns.h"
#include "graph/graph_internal.h"
#include "plan/memory.h"
#include "plan/plan.h"
#include "exec/engine_dist.h"
#include "exec/step_view.h"
#include "sched/sched.h"
#include "optim/loss_scale.h"
#include "dist/dist.h"

#define BT_MAX_CHANNEL_VALUES 32

/* Messages for one (src -> dst) pair in one direction: activations of the values src produces
 * for dst, or the gradients of those values going back from dst to src. */
typedef struct bt_channel {
    int from, to;              /* sending and receiving stage */
    int grad;                  /* 0: activations (from < to); 1: gradients (from > to) */
    int n_values;
    int values[BT_MAX_CHANNEL_VALUES];
    size_t value_off[BT_MAX_CHANNEL_VALUES]; /* offset of each value in a message */
    size_t msg_bytes;          /* one micro-batch's message */
    int microbatches;
    bt_transfer_path path;
    const struct bt_transport *tp; /* the path's entry in the engine's table (exec/transport.h) */
    /* [microbatches][msg_bytes]: host memory (BT_PATH_HOST), else on the receiving device */
    unsigned char *buf;
    /* device paths: per micro-batch, recorded on the sender's copy stream when the copy starts
     * and when the message has arrived; the receiver's compute stream waits for `sent` */
    bt_event **begin, **sent;
    int *pending;              /* [microbatches] sent this step, copy time not yet counted */
    /* BT_PATH_STAGED: two pinned host chunks used in turn; `filled[k]` is recorded when chunk k
     * holds data, `drained[k]` when the receiver's device has read it */
    size_t chunk_bytes;
    void *stage_buf[2];
    bt_event *filled[2], *drained[2];
    int drained_used[2];
    int last_sent_chunk;       /* the chunk used last (starts at 1, so chunk 0 goes first) */
    int last_sent;             /* last micro-batch sent this step, -1: none */
    /* BT_PATH_MPI (engine_dist.c): per micro-batch the posted receive (this rank receives) or the
     * send (this rank sends); the message's tag is tag_base + mb */
    bt_comm_req *req;
    int tag_base;
    double *sent_at;           /* [microbatches] host ms when each send was posted */
    /* BT_PATH_MPI_STAGED (transfer_staged.c) where this rank's side is a GPU: the pinned host copy
     * of every micro-batch's message that MPI sends from or receives into, and (receiving) the
     * events recorded on this device's copy stream once a message was copied into `buf` */
    unsigned char *mpi_buf;
    bt_event **landed;
    /* BT_PATH_NCCL (dist_nccl.c): the channel's own two-rank communicator (sender rank 0) */
    struct bt_backend_comm *comm;
    /* mailbox */
    atomic_int *ready;         /* [microbatches] 1 once sent (release), 0 once received */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int sync_ready;
    /* statistics since creation */
    int64_t messages;
    double bytes, copy_ms;
} bt_channel;

/* Data parallelism: a run of a stage's parameter gradients, in the order backward finishes them,
 * all-reduced over the stage's replicas as one message once the last of them is final. */
typedef struct bt_dp_bucket {
    int first, n;              /* stores order[first .. first + n) */
    size_t count;              /* elements */
    void *flat;                /* host copy of the gradients, reduced in place */
    int pending;               /* parameters not final yet this step */
    bt_comm_req req;
    int in_place;              /* flat is the stores' gradients themselves (in the stage's grad_arena) */
    double start_ms, done_ms;  /* this step's reduction: started, first seen complete (host ms; 0: not) */
    /* parallel.zero: 1: the bucket is D chunks of `chunk` elements (flat and wflat are padded to
     * D x chunk); this rank keeps the optimizer state of its chunk only */
    size_t chunk;
    void *wflat;               /* the bucket's weights, packed, for the all-gather */
    void *state[2];            /* [chunk] the optimizer state of this rank's chunk */
    /* NCCL all-reduce (dist_nccl.c): the bucket packed on the device; `packed` recorded on the
     * compute stream once packed, `reduced` on the communicator's stream once summed */
    void *dflat;
    bt_event *packed, *reduced;
    /* the shm path (dist_shm.c): where the bucket's gradients (and, zero, its master weights)
     * start in every rank's segment of the shared window, the slice each rank sums, and how far
     * this step got (0 not started, 1 final here, 2 own slice summed, 3 every slice here) */
    size_t shm_off, shm_woff, shm_slice;
    int shm_phase;
} bt_dp_bucket;

/* What a job across processes adds to an engine (engine_dist.c). Off (on = 0) in one process,
 * where every stage is local. */
typedef struct bt_engine_dist {
    int on;
    bt_dist_layout layout;
    bt_comm *world;            /* every rank */
    bt_comm *pipe;             /* the P ranks of this replica, ranked by stage */
    bt_comm *dp;               /* the D ranks running this stage, ranked by replica */
    /* data parallel (D > 1): the local stage's buckets */
    int n_buckets;
    bt_dp_bucket *buckets;
    int *order;                /* [n_params] the local stage's stores in the order they become final */
    int *bucket_of;            /* [n_params] the bucket of store i */
    int *final_after;          /* [n_params] the node (stage-local index) whose backward finishes store i */
    size_t bucket_bytes;
    int zero;                  /* parallel.zero: 1 with D > 1: optimizer state sharded over replicas */
    int trace;                 /* after each job, the replica's stages share their instruction records */
    int full_state;            /* zero: the local stage's full state buffers are allocated (gathered
                                * for a checkpoint, or written by a resume) and hold the truth */
    int last_bwd;              /* the local stage's last BWD in the training schedule */
    int last_wgt;              /* its last W (split backward), or -1 */
    struct bt_backend_comm *nccl_dp; /* GPU replicas with NCCL: the stage's communicator over them */
    int reduce_mode;           /* BATON_DP_REDUCE: BT_DP_REDUCE_AUTO, _MPI or _SHM */
    struct bt_shm_win *shm;    /* the shm path (dist_shm.c): the replicas' shared window, or NULL */
    unsigned char **shm_base;  /* [D] each replica's segment of it, in this process */
    uint64_t shm_gen;          /* gradient jobs so far: the value this job's flags reach */
    size_t shm_sq_off;         /* without zero: where each rank's per-tensor sums of squares lie */
    int *shm_sq_owner;         /* [n_params] the replica that sums the squares of store i */
    int failed;                /* a job failed: communicators are aborted, not waited for */
    /* STEP's exchange of gradient norms and the loss (bt_dist_step_exchange), preallocated */
    int *xpeer;
    double *xbuf;
    bt_comm_req *xsend, *xrecv;
    double loss_sum;           /* the last step's loss summed over every replica */
    /* rank 0, from bt_engine_sync_params to the next job: the other stages' weights and optimizer
     * state (replica 0's), for a checkpoint; per stage, parameter by parameter in graph order, its
     * weights then each state slot (NULL: not held) */
    unsigned char **mirror;    /* [stages] */
    struct bt_rank_stats {
        bt_time_stats time;
        bt_memory_stats mem;
        bt_dist_reduce_stats reduce;
    } *rank_stats;             /* [size] each rank's own stage, once gathered (bt_engine_dist_gather_stats) */
    double *rank_channels;     /* [size][n_channels][3]: messages, bytes, copy ms of each rank's channels */
    /* statistics since creation */
    int64_t reductions, early_reductions; /* early: started before STEP, during the backward work */
    double reduced_bytes, reduce_wait_ms, reduce_ms;
    double reduce_hidden_ms;   /* the part of reduce_ms before STEP began to wait (behind compute) */
    double reduce_wait_t0_ms;  /* this step's: when STEP began to wait for the buckets (host ms) */
} bt_engine_dist;

typedef struct bt_param_store {
    int param;                 /* graph param id */
    size_t numel;
    void *w, *g;               /* device memory: master weights and their gradient */
    void *w_lp;                /* mixed precision: the weights rounded to it, what ops read; or NULL */
    void *state[2];            /* optimizer buffers or NULL */
} bt_param_store;

typedef struct bt_stage {
    int index;
    int first_node, n_nodes;
    const bt_backend *be;
    bt_device *dev;
    char device_name[32];
    int device_index;          /* N of "kind:N": with shares_host_memory, which pool it draws from */
    int n_slots;               /* activation slots: the most either schedule names */
    int *slot_of;              /* [microbatches]: the slot each micro-batch's instructions name */
    int *slot_owner;           /* [n_slots]: the micro-batch last forwarded into each slot this
                                * job, -1: none yet */
    bt_stage_memory need;      /* the memory model's bytes; the fields below are laid out from it */
    int *value_offset;         /* [graph n_values] offset in a slot, or -1 if not local */
    size_t *node_saved_offset; /* [n_nodes] */
    size_t *node_wgrad_offset; /* [n_nodes]: the output-gradient stash a deferred W reads (split
                                * backward), or BT_MEMORY_NO_WGRAD */
    unsigned char *recomputed; /* [n_nodes]: 1 where the node is recomputed before backward */
    unsigned char *exact;      /* [n_nodes]: mixed precision, the rounding passes skipped as exact
                                * (BT_EXACT_OUT, BT_EXACT_GRAD; worker_nodes.c) */
    /* bf16 storage (need.bf16_kept, bf16_store.c): [graph n_values] the offset of a value's bf16
     * copy in a slot or -1 (value_offset is then its f32 working copy's, in the work region); the
     * kept values; and per value the micro-batch whose values its working copy holds, or -1 */
    int *kept_offset;
    int *kept_values, n_kept;
    int *work_tag;
    size_t slot_bytes;
    /* [n_slots][slot_bytes], then the recompute region (need.recompute_bytes): one shared copy of
     * the values and state of recomputed nodes, rebuilt before each backward (run_backward) */
    unsigned char *slots;
    int *grad_offset;          /* [graph n_values] offset in grads, or -1 */
    size_t grad_bytes;
    unsigned char *grads;
    size_t ws_bytes;
    size_t outgoing_grad_bytes; /* grads of outgoing values come first in `grads` */
    void *recv_scratch;        /* BT_PATH_HOST: device buffer for one received gradient message */
    size_t recv_scratch_bytes;
    size_t host_channel_bytes; /* host-path channel buffers this stage sends into (host memory) */
    size_t mpi_send_bytes;     /* mpi path: the sender's own copy of its outgoing messages (counted
                                * in mem.activations; the memory model counts receive buffers) */
    bt_channel **recv_from;    /* [graph n_values]: the device channel a value arrives by, or NULL */
    size_t *recv_off;          /* [graph n_values]: its offset in that channel's messages */
    const void **sq_ptr;       /* [n_params]: the gradients and their sizes, for one sum_squares call */
    size_t *sq_n;
    void *loss_host;           /* [microbatches][mb_size] pinned copy of per-sample losses */
    void *seed_host;           /* [mb_size] pinned: the loss gradient's seed */
    void *seed_dev;            /* [mb_size] on the device */
    double seed_value;         /* what seed_dev holds (0: not written yet) */
    bt_event *ev_ready;        /* compute stream: a message's values are written */
    /* per instruction of the longest schedule, and the step's start: timing from device events */
    bt_event **ev_begin, **ev_end, *ev_step0;
    int n_events;
    void *workspace;
    int n_params;
    bt_param_store *params;
    void *grad_arena;          /* data parallel on a CPU stage: every store's gradient, in bucket order
                                * (dist_dp.c); the stores' g point into it */
    int grad_arena_shm;        /* grad_arena lies in the shm path's window (dist_shm.c frees it) */
    /* The stage's parameters as flat arrays, in params order, each store's w, w_lp, g and state
     * pointing into them (packed, no gaps): the optimizer updates all of them in one call. */
    size_t flat_numel;
    void *flat_w, *flat_w_lp, *flat_g, *flat_state[2];
    bt_param_store *(*node_params)[BT_MAX_PARAMS]; /* [n_nodes]: each node's stores, in order */
    int n_in_act, n_out_act, n_in_grad, n_out_grad;
    bt_channel *in_act[BT_MAX_STAGES], *out_act[BT_MAX_STAGES];
    bt_channel *in_grad[BT_MAX_STAGES], *out_grad[BT_MAX_STAGES];
    bt_memory_stats mem;
    bt_time_stats time;        /* cumulative over steps */
} bt_stage;

/* BT_JOB_DECODE: no schedule; every stage runs decode.c's loop (bt_decode_worker) until the
 * engine's decode run (e->decode) is finished or aborted. */
typedef enum bt_job_kind {
    BT_JOB_NONE,
    BT_JOB_GRADS,
    BT_JOB_TRAIN,
    BT_JOB_FORWARD,
    BT_JOB_DECODE,
    BT_JOB_EXIT
} bt_job_kind;

/* What a worker measured for one instruction of the last step, in ms from the step's start. The
 * times come from events on the device's streams, so on a GPU they say when the work ran, not
 * when it was queued (each device's clock is aligned to the host's at the step's start). */
typedef struct bt_worker {
    struct bt_engine *engine;
    int stage;
    pthread_t thread;
    int started;
    /* per step */
    double busy_ms;
    double transfer_ms;
    double loss_sum;
    int live, peak_live;
    atomic_int cur_instr;      /* instruction being executed, -1 when idle (read by the host) */
    atomic_int waiting;        /* 1 while waiting on another stage (a channel, the barrier, its turn) */
    int chunk;                 /* its stage's chunk on its device: its slot in the device's turns */
    int job_done;              /* finished the current job (under the engine's mu) */
    atomic_int last_done;      /* index of the last completed instruction (read by the watchdog) */
    bt_status status;
    char error[2048];
    bt_trace_rec *trace;       /* [trace_cap]: every instruction of the last job, device-timed */
    int n_trace, trace_cap;
    double step0_host_ms;      /* host clock when the job's start event was recorded */
    int skipped;               /* f16: this step's gradients overflowed and it was not applied */
} bt_worker;

/* A tied pair of parameters (bt_graph_tie): side 0 the source, side 1 the tied copy, each on the
 * stage that owns its layer (possibly the same one). At STEP each side copies its gradient into
 * host[side], the stages meet, and each side writes host[0] + host[1] (computed alike on both
 * sides, into sum[side]) back as its gradient, so both copies take the same update. */
typedef struct bt_tie {
    bt_stage *stage[2];
    bt_param_store *store[2];
    size_t bytes;
    void *host[2], *sum[2];    /* host memory, malloc'ed */
} bt_tie;

struct bt_engine {
    const bt_graph *graph;
    bt_engine_params params;
    bt_plan *plan;
    bt_schedule *train_sched, *infer_sched;
    int stages;
    int64_t mb_size;           /* samples per micro-batch */
    bt_dtype dtype;
    bt_stage *stage;           /* [stages] */
    bt_worker *worker;         /* [stages] */
    int n_channels;
    bt_channel *channels;
    int loss_value;            /* graph output value */
    int has_loss;              /* the last layer is a loss: forward jobs report it too */
    void *loss_out;            /* forward: each sample's loss goes here too (bt_engine_predict), or NULL */
    int64_t step;              /* optimizer steps taken */
    /* the job workers run */
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
    int mu_ready;
    uint64_t generation;
    int done_count;
    bt_job_kind job;
    const bt_schedule *job_sched;
    const bt_feed *feeds;
    int n_feeds;
    const void *feed_ptr[64];  /* per graph input: the caller's rows, or NULL */
    int local_feeds;           /* feeds hold this rank's rows only (bt_engine_set_local_feeds) */
    int out_value;
    void *out_ptr;
    double lr;
    /* cross-stage reductions at STEP */
    double *sumsq;             /* [stages] */
    int n_ties;
    bt_tie *ties;              /* [n_ties], training only */
    int barrier_count;
    uint64_t barrier_generation;
    pthread_cond_t cv_barrier;
    double grad_norm;
    /* several stages per device (interleaved, zbv): device d's turns (bt_instr.turn) in its order,
     * each owned by the stage thread of one chunk (core/turns.h: a pass wakes only the next
     * turn's owner); every abort wakes them (bt_engine_wake_waiters) */
    int turn_devices;          /* the training schedule's devices when below its stages, else 0 */
    bt_turns **turns;          /* [turn_devices] */
    /* timeline of the last step (see bt_trace_rec) */
    double step_t0_ms;         /* CLOCK_MONOTONIC ms at the step's start */
    /* failure: raised by the first failing worker, read by every waiter */
    atomic_bool abort;
    /* instructions completed by all workers (the host's watchdog sees a stage stuck inside one) */
    atomic_uint progress;
    /* set when a worker stayed stuck past the watchdog: the engine is unusable, its stuck
     * workers are abandoned (engine_job.c, "stuck workers") and never touch the graph again */
    atomic_bool abandoned;
    char unusable[2048];       /* why (the timeout's message), for every later call */
    /* test hook: a stage whose job starts late, as if preempted (trace tests); -1: none */
    int test_start_delay_stage;
    double test_start_delay_ms;
    /* test hook: a stage that silently skips one send (watchdog tests) */
    int drop_send_stage, drop_send_mb;
    /* the transports by path (exec/transport.h): transfer.c's in one process, the ranks' added
     * when the engine is one rank of a job across processes; NULL: no such path here */
    const struct bt_transport *transport[BT_PATH_NCCL + 1];
    bt_transfer_path *paths;   /* [stages * stages]: the path from stage a to b at [a * stages + b] */
    /* the memory model's inputs (plan/memory.h): slots per stage, host paths */
    bt_memory_params memory;
    int *stage_slots;          /* [stages] */
    unsigned char *host_path;  /* [stages * stages] */
    unsigned char *bf16_kept;  /* [stages]: BT_KEEP_* (BATON_BF16_STASH, on backends with store_bf16) */
    size_t staging_chunk;      /* BT_PATH_STAGED chunk bytes (BATON_STAGING_CHUNK, default 4 MiB) */
    /* mixed precision */
    double loss_scale;         /* the scale this job seeds the loss gradient with (1 unless f16) */
    bt_loss_scale scaler;      /* f16: dynamic loss scaling */
    bt_engine_dist dist;       /* across processes (engine_dist.c); off in one process */
    const struct bt_rank_hooks *ranks; /* the rank hooks (exec/rank_hooks.h): the local table in one process */
    int local_stages;          /* stages this process runs (all of them in one process) */
    struct bt_decode_run *decode; /* the decode job's state (decode.c), during a BT_JOB_DECODE */
};

/* Offset off of micro-batch mb's slot, or of the recompute region for offsets from slot_bytes on
 * (plan/memory.h: recomputed nodes' values and state are not kept per micro-batch). */
static inline unsigned char *bt_slot_at(const bt_stage *st, int mb, size_t off)
{
    if (off >= st->slot_bytes) return st->slots + (size_t)st->n_slots * st->slot_bytes + (off - st->slot_bytes);
    return st->slots + (size_t)st->slot_of[mb] * st->slot_bytes + off;
}

/* Whether this process runs stage s (every stage in one process). */
static inline int bt_stage_is_local(const bt_engine *e, int s)
{
    return !e->dist.on || s == e->dist.layout.stage;
}

/* Whether a path's messages travel as MPI messages between host buffers. */
static inline int bt_path_uses_mpi(bt_transfer_path path)
{
    return path == BT_PATH_MPI || path == BT_PATH_MPI_STAGED;
}

/* Where MPI sends micro-batch mb's message from, or receives it into: the pinned host copy where
 * this rank's side is a GPU (mpi-staged), else the channel's buffer (host memory). */
static inline unsigned char *bt_channel_mpi_msg(const bt_channel *ch, int mb)
{
    return (ch->mpi_buf ? ch->mpi_buf : ch->buf) + (size_t)mb * ch->msg_bytes;
}

/* Where value lives for micro-batch mb on stage st: in place in a device channel's buffer when it
 * arrived by one, else in the micro-batch's slot (slot_of, set from the running instruction), or
 * in the recompute region for a recomputed node's output. */
static inline void *bt_slot_value(const bt_stage *st, int mb, int value)
{
    const bt_channel *ch = st->recv_from ? st->recv_from[value] : NULL;
    if (ch) return ch->buf + (size_t)mb * ch->msg_bytes + st->recv_off[value];
    return bt_slot_at(st, mb, (size_t)st->value_offset[value]);
}

/* Where value k of channel ch's message comes from on the sending stage st (a gradient, or the
 * micro-batch's value), and its bytes in the message (transfer.c, transfer_staged.c, dist_nccl.c). */
static inline const void *bt_channel_value_source(const bt_stage *st, const bt_channel *ch, int k, int mb)
{
    if (ch->grad) return st->grads + st->grad_offset[ch->values[k]];
    return bt_slot_value(st, mb, ch->values[k]);
}

static inline size_t bt_channel_value_bytes(const bt_channel *ch, int k)
{
    return (k + 1 < ch->n_values ? ch->value_off[k + 1] : ch->msg_bytes) - ch->value_off[k];
}

/* engine_job.c: BT_ERR_INVALID_ARG for NULL; BT_ERR_TIMEOUT, naming the stuck stage, once a worker
 * got stuck past the watchdog (the engine is then unusable: every call but destroy fails). */
bt_status bt_engine_check_usable(const bt_engine *e);

/* param_init.c */
/* Writes ps's initial values (from the seed and the parameter's name) into its master weights. */
bt_status bt_param_init(bt_engine *e, bt_stage *st, bt_param_store *ps);

/* layout.c */
/* Fills e->memory from the opened stages and their paths. */
bt_status bt_layout_memory_params(bt_engine *e);
/* Asks the memory model for st's sizes and offsets. */
bt_status bt_layout_stage(bt_engine *e, bt_stage *st);
/* BT_ERR_NOMEM naming the largest stage when a memory pool cannot hold its stages. */
bt_status bt_layout_check_memory(bt_engine *e);
/* Allocates st's buffers, events and parameters (initialised). */
bt_status bt_layout_alloc_stage(bt_engine *e, bt_stage *st);
/* Asserts every stage holds exactly what the memory model said (after the channels are built). */
void bt_layout_verify(const bt_engine *e);
/* Frees everything a stage holds and closes its device; accepts a half-built stage. */
void bt_layout_free_stage(bt_stage *st);

/* bf16_store.c: activations kept as bf16 in the slots (plan/memory.h), each worked on in its f32
 * working copy. All are no-ops on a stage without bf16 storage, and for values it keeps in f32. */
/* Fills the stage's kept-value list and tags (after bt_layout_stage). */
bt_status bt_store_init(bt_stage *st, const bt_graph *g);
/* At a job's start: no working copy is known to hold any micro-batch's value. */
void bt_store_forget(bt_stage *st);
/* Before a read of value v of micro-batch mb: its working copy holds mb's values. */
bt_status bt_store_load(bt_engine *e, bt_stage *st, int mb, int v);
/* Before node k (stage-local) runs on mb: its inputs, and with_out its output too (backward). */
bt_status bt_store_load_node(bt_engine *e, bt_stage *st, int k, int mb, int with_out);
/* After mb's value v was written into its working copy (and rounded): stored as bf16 in the slot. */
bt_status bt_store_wrote(bt_engine *e, bt_stage *st, int mb, int v);
/* Whether node k's W stash is kept as bf16 (its output is). */
int bt_store_stash_kept(const bt_stage *st, const bt_graph *g, int k);
/* B of a split backward: node k's output gradient grad (rounded) into mb's bf16 stash. */
bt_status bt_store_stash(bt_engine *e, bt_stage *st, int k, int mb, const float *grad);
/* W: mb's stash of node k expanded into the working copy of k's output (W never reads the output),
 * where the W call finds it (bt_slot_value of the output). */
bt_status bt_store_load_stash(bt_engine *e, bt_stage *st, int k, int mb);

/* topology.c */
/* Chooses the path between every ordered pair of stages (devices open). */
bt_status bt_topology_paths(bt_engine *e);
bt_transfer_path bt_topology_path(const bt_engine *e, int from, int to);
/* Builds the channels and their buffers (see topology.c). */
bt_status bt_topology_build_channels(bt_engine *e);

/* worker_nodes.c: FWD, BWD and W of micro-batch mb on stage st's nodes (last: the stage's last
 * backward of the step, which starts the data-parallel reduction of what is left) */
bt_status bt_worker_forward(bt_engine *e, bt_stage *st, int mb, int training);
bt_status bt_worker_backward(bt_engine *e, bt_stage *st, int mb, int last);
bt_status bt_worker_weight_grads(bt_engine *e, bt_stage *st, int mb, int last);
/* Mixed precision: which of node k's roundings cannot change a bit (op.h, lowp_exact), so the
 * worker skips them: BT_EXACT_OUT its output as its forward writes it, BT_EXACT_GRAD its output's
 * complete gradient. Fills st->exact (after bt_layout_stage); BATON_ROUND_SKIP=0 turns it off
 * (the tests' reference), another value than 0 or 1 is an error naming it. */
#define BT_EXACT_OUT 1
#define BT_EXACT_GRAD 2
bt_status bt_worker_plan_exact(const bt_engine *e, bt_stage *st);

/* worker.c */
void *bt_worker_main(void *arg);
/* The per-sample losses of the step on the last stage, summed (device idle). */
double bt_worker_loss_sum(const bt_engine *e, const bt_stage *st);
/* worker_step.c */
/* Mixed precision: copies p's master weights into its compute copy, rounded (queued). */
bt_status bt_worker_refresh_lowp(bt_engine *e, bt_stage *st, bt_param_store *p);
/* The STEP instruction of stage st: barrier, global norm, update. */
bt_status bt_worker_run_step(bt_engine *e, bt_worker *w, bt_stage *st);

/* decode.c: a worker's part of a BT_JOB_DECODE job (sets w->status and w->error). */
void bt_decode_worker(bt_engine *e, bt_worker *w);
/* engine_job.c: posts a job without a schedule (BT_JOB_DECODE) to every worker and waits for them,
 * with the host's watchdog; the first failure's status and message. */
bt_status bt_engine_run_plain_job(bt_engine *e, bt_job_kind job);

/* transfer.c: through the channel's transport (exec/transport.h) */
#include "exec/transport.h"

/* Whether a channel's copies are ordered by events (the device paths; across processes, the
 * sender's side of mpi-staged and nccl, whose events stay unrecorded on a CPU side). */
static inline int bt_channel_has_events(const bt_channel *ch)
{
    return (ch->tp->flags & BT_TRANSPORT_EVENTS) != 0;
}

/* Whether a channel joins stages on different ranks. */
static inline int bt_channel_is_remote(const bt_channel *ch)
{
    return (ch->tp->flags & BT_TRANSPORT_REMOTE) != 0;
}

/* The path between stages a and b (devices open), given the engine's transfer mode. */
bt_transfer_path bt_transfer_path_for(bt_engine *e, int a, int b);
/* Fixes the channel's transport from its path (an internal error when the engine has none) and
 * sets it up: its buffer, staging chunks and events. */
bt_status bt_transfer_setup(bt_engine *e, bt_channel *ch);
void bt_transfer_teardown(bt_engine *e, bt_channel *ch);
/* Queues micro-batch mb's message on ch (the sender's values must be written, ev_ready marks it). */
bt_status bt_transfer_send(bt_engine *e, bt_stage *st, bt_channel *ch, int mb);
/* The receiver's host thread, until mb's message on ch was queued or arrived (the transport's
 * wait: the mailbox in one process); the errors of bt_channel_wait. */
bt_status bt_transfer_wait(bt_engine *e, bt_channel *ch, int mb);
/* Makes st's compute stream wait until mb's message on ch has arrived (device paths), or copies it
 * from host memory into the stage (BT_PATH_HOST activations). */
bt_status bt_transfer_recv_act(bt_stage *st, bt_channel *ch, int mb);
/* Adds mb's gradient message on ch into st's gradients. */
bt_status bt_transfer_recv_grad(bt_engine *e, bt_stage *st, bt_channel *ch, int mb);
/* After the sender's device is idle: adds this step's copy times to the channel's statistics. */
bt_status bt_transfer_account(bt_engine *e, bt_channel *ch);
/* Staging chunk bytes: BATON_STAGING_CHUNK from the environment (>= 64), else 4 MiB. */
size_t bt_transfer_default_chunk(void);

/* channel.c */
bt_status bt_channel_init(bt_channel *ch, int from, int to, int grad, int microbatches);
void bt_channel_destroy(bt_channel *ch);
/* Marks micro-batch mb as sent and wakes the receiver. */
void bt_channel_post(bt_channel *ch, int mb);
/* Waits for micro-batch mb; BT_ERR_TIMEOUT after timeout_s (clamped to 0..BT_WATCHDOG_MAX_S),
 * BT_ERR_INTERNAL on abort (no message), BT_ERR_BACKEND with a message when the wait itself
 * failed. */
bt_status bt_channel_wait(bt_engine *e, bt_channel *ch, int mb, double timeout_s);
/* Wakes every waiter (abort). */
void bt_channels_wake_all(bt_engine *e);
/* Wakes every stage thread waiting for its device's turn (after the abort flag was raised). */
void bt_engine_wake_turns(bt_engine *e);

/* Test hook: stage skips its send of micro-batch mb (activations or gradients) in later steps. */
void bt_engine_test_drop_send(bt_engine *engine, int stage, int mb);

/* An event that only orders streams (never timed): the backend's untimed kind where it has one. */
static inline bt_status bt_exec_ordering_event(const bt_backend *be, bt_device *dev, bt_event **out)
{
    return be->event_create_untimed ? be->event_create_untimed(dev, out) : be->event_create(dev, out);
}

/* the steps of a job that meet other processes, through the engine's table */
#include "exec/rank_hooks.h"

/* the parts of a job across processes (engine_dist.c, dist_*.c, transfer_staged.c) */
#include "exec/exec_dist_internal.h"

#endif
