/* exec/exec_internal.h: the engine's state, shared by engine.c (set-up, public API), worker.c
 * (the instruction interpreter each stage's thread runs) and channel.c (stage-to-stage transfers).
 *
 * Memory is planned at creation and never allocated in the step loop: per stage, `n_slots`
 * activation slots (one per micro-batch the schedule keeps in flight) each holding every value the
 * stage reads or produces plus the nodes' saved state; one set of value gradients; parameters,
 * their gradients and optimizer state; the largest workspace any node asks for; and per channel a
 * buffer with room for every micro-batch of a step. Micro-batch mb lives in slot mb % n_slots, which
 * is safe because every schedule retires micro-batches in the order it admits them. */
#ifndef BT_EXEC_INTERNAL_H
#define BT_EXEC_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "backend/backend.h"
#include "baton/engine.h"
#include "graph/graph_internal.h"
#include "plan/plan.h"
#include "sched/sched.h"

#define BT_MAX_CHANNEL_VALUES 32

/* Messages for one (src -> dst) pair in one direction: activations of the values src produces
 * for dst, or the gradients of those values going back from dst to src. */
typedef struct bt_channel {
    int from, to;              /* sending and receiving stage */
    int grad;                  /* 0: activations (from < to); 1: gradients (from > to) */
    int n_values;
    int values[BT_MAX_CHANNEL_VALUES];
    size_t msg_bytes;          /* one micro-batch's message */
    unsigned char *buf;        /* [microbatches][msg_bytes], host memory */
    int *ready;                /* [microbatches] 1 once sent, 0 once received */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int sync_ready;
} bt_channel;

typedef struct bt_param_store {
    int param;                 /* graph param id */
    size_t numel;
    void *w, *g;               /* device memory */
    void *state[2];            /* optimizer buffers or NULL */
} bt_param_store;

typedef struct bt_stage {
    int index;
    int first_node, n_nodes;
    const bt_backend *be;
    bt_device *dev;
    char device_name[32];
    int n_slots;               /* training schedule's activation slots */
    int *value_offset;         /* [graph n_values] offset in a slot, or -1 if not local */
    size_t *node_saved_offset; /* [n_nodes] */
    size_t slot_bytes;
    unsigned char *slots;      /* [n_slots][slot_bytes] */
    int *grad_offset;          /* [graph n_values] offset in grads, or -1 */
    size_t grad_bytes;
    unsigned char *grads;
    size_t ws_bytes;
    size_t outgoing_grad_bytes; /* grads of outgoing values come first in `grads` */
    void *recv_scratch;        /* device buffer for one received gradient message */
    size_t recv_scratch_bytes;
    double *loss_host;         /* [mb_size] host copy of per-sample losses */
    void *workspace;
    int n_params;
    bt_param_store *params;
    bt_param_store *(*node_params)[BT_MAX_PARAMS]; /* [n_nodes]: each node's stores, in order */
    int n_in_act, n_out_act, n_in_grad, n_out_grad;
    bt_channel *in_act[BT_MAX_STAGES], *out_act[BT_MAX_STAGES];
    bt_channel *in_grad[BT_MAX_STAGES], *out_grad[BT_MAX_STAGES];
    bt_memory_stats mem;
    bt_time_stats time;        /* cumulative over steps */
} bt_stage;

typedef enum bt_job_kind { BT_JOB_NONE, BT_JOB_GRADS, BT_JOB_TRAIN, BT_JOB_FORWARD, BT_JOB_EXIT } bt_job_kind;

/* What a worker measured for one instruction of the last step (times in ms from the step's
 * start); kept for every instruction when the engine traces, so the timeline is the real run. */
typedef struct bt_trace_rec {
    int instr;                 /* index into the job schedule's list for this stage */
    double start_ms, end_ms;
    size_t bytes;              /* SEND/RECV: bytes moved */
    int live;                  /* micro-batches held after the instruction */
} bt_trace_rec;

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
    int cur_instr;             /* instruction being executed, -1 when idle */
    int last_done;             /* index of the last completed instruction */
    bt_status status;
    char error[2048];
    bt_trace_rec *trace;       /* [trace_cap], filled when engine->tracing */
    int n_trace, trace_cap;
} bt_worker;

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
    int out_value;
    void *out_ptr;
    double lr;
    /* cross-stage reductions at STEP */
    double *sumsq;             /* [stages] */
    int barrier_count;
    uint64_t barrier_generation;
    pthread_cond_t cv_barrier;
    double grad_norm;
    /* timeline of the last step (see bt_trace_rec) */
    int tracing;
    double step_t0_ms;         /* CLOCK_MONOTONIC ms at the step's start */
    /* failure */
    volatile int abort;
    /* test hook: a stage that silently skips one send (watchdog tests) */
    int drop_send_stage, drop_send_mb;
};

/* worker.c */
void *bt_worker_main(void *arg);

/* channel.c */
bt_status bt_channel_init(bt_channel *ch, int from, int to, int grad, int microbatches);
void bt_channel_destroy(bt_channel *ch);
/* Marks micro-batch mb as sent and wakes the receiver. */
void bt_channel_post(bt_channel *ch, int mb);
/* Waits for micro-batch mb; BT_ERR_TIMEOUT after timeout_s, BT_ERR_INTERNAL on abort. */
bt_status bt_channel_wait(bt_engine *e, bt_channel *ch, int mb, double timeout_s);
/* Wakes every waiter (abort). */
void bt_channels_wake_all(bt_engine *e);

/* Turns per-instruction recording on or off (off by default; it costs two clock reads). */
void bt_engine_set_tracing(bt_engine *engine, int on);
/* The last job's schedule and stage's records; valid until the next step. */
const bt_schedule *bt_engine_last_schedule(const bt_engine *engine);
const bt_trace_rec *bt_engine_trace(const bt_engine *engine, int stage, int *n);

/* Test hook: stage skips its send of micro-batch mb (activations or gradients) in later steps. */
void bt_engine_test_drop_send(bt_engine *engine, int stage, int mb);

#endif
