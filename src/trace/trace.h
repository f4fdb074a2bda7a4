/* trace/trace.h: timelines of real runs. A bt_trace collects, step after step, what an engine's
 * workers recorded for every instruction they executed (from device events, every step), and writes it as
 * a Chrome/Perfetto trace (JSON) or draws the last step as an SVG; it also summarises where each
 * stage's time went and predicts the step time from the measured per-stage costs.
 *
 * What the trace shows (docs/profiling.md):
 *   - one process per stage, "stage S (device)", with a compute thread (F, B, STEP) and a
 *     transfers thread (SEND, RECV); one slice per executed instruction named in the `1F3`
 *     notation, args {microbatch, layers, bytes, step};
 *   - a flow arrow from each SEND to the RECV of the same kind and micro-batch on every stage
 *     the send reaches (skip connections reach more than one);
 *   - per stage an "activations" counter: micro-batches held x the stage's slot bytes.
 * Timestamps are microseconds from the first traced step's start; later steps sit at their own
 * start relative to it. A worker runs its instructions one after another, so slices of one stage
 * never overlap; times are rounded to whole nanoseconds so that stays true in the file.
 *
 * Invariants: every added step has the same stage count as the first; the records are copies, so
 * the trace outlives the engine.
 *
 * Data flow: exec/step_view.h (records, schedule, stages, channels, the STEP barrier) -> here ->
 * files and the CLI's summary. Reads exec's step view, never its internals; nothing lower
 * includes this. Never prints. */
#ifndef BT_TRACE_H
#define BT_TRACE_H

#include <stddef.h>

#include "baton/engine.h"
#include "baton/status.h"
#include "sched/sched.h"

typedef struct bt_trace bt_trace;

/* Creates an empty trace owned by the caller (bt_trace_destroy). */
bt_status bt_trace_create(bt_trace **out);
/* Frees a trace; accepts NULL. */
void bt_trace_destroy(bt_trace *trace);

/* Appends the engine's last step: its schedule, every stage's records, and the stage facts the
 * files show (device, layers, slot bytes, which stages each send reaches). The engine must have
 * completed a step: BT_ERR_INVALID_ARG otherwise, or when the stage count differs from earlier
 * steps'. */
bt_status bt_trace_add_step(bt_trace *trace, const bt_engine *engine);
int bt_trace_num_steps(const bt_trace *trace);

/* Writes {"traceEvents": [...]} for every step to path (atomically). */
bt_status bt_trace_write_json(const bt_trace *trace, const char *path);
/* Draws the last step as a standalone SVG 1.1 file (trace/timeline_svg.c). */
bt_status bt_trace_write_svg(const bt_trace *trace, const char *path);

/* Where one stage's time went over all traced steps, as shares of the steps' wall time:
 * busy = forward, backward and optimizer compute; transfer = sends, plus the part of each receive
 * after its data was posted (the copy); idle = the rest (waiting for data, the STEP barrier under
 * clipping or f16 loss scaling, gaps). Medians are per instruction over all steps; send/recv are
 * the copy times. */
typedef struct bt_trace_stage_stats {
    double busy, transfer, idle;
    double fwd_ms, bwd_ms, step_ms;
    double wgt_ms;             /* split backward: the weight-gradient W (bwd_ms is then B) */
    double send_act_ms, recv_act_ms, send_grad_ms, recv_grad_ms;
} bt_trace_stage_stats;

int bt_trace_num_stages(const bt_trace *trace);
bt_status bt_trace_stage_summary(const bt_trace *trace, int stage, bt_trace_stage_stats *out);

/* Predicts the step time by simulating the last step's schedule (bt_simulate) on the per-stage
 * medians above (each stage's copies are added to the compute they follow: on the CPU the stage
 * itself performs them), and gives the median wall time of the traced steps beside it. */
bt_status bt_trace_predict(const bt_trace *trace, double *predicted_ms, double *measured_ms);

/* ---- a job across processes (trace_job.c) ---------------------------------------------------- */

/* Where a rank sits in the job and how its clock reads against rank 0's (add offset_ms to its
 * times; the truth lies within +- uncertainty_ms). */
typedef struct bt_trace_rank {
    int rank, replica, stage;
    double offset_ms, uncertainty_ms;
} bt_trace_rank;

/* Serializes what stage `stage` recorded in trace (the one stage the calling rank runs), every
 * step with its gradient reductions, on this process's clock, for bt_trace_write_job_json on
 * another rank of the same build. *buf is malloc'd (the caller frees). */
bt_status bt_trace_pack_stage(const bt_trace *trace, int stage, void **buf, size_t *len);

/* Writes one Chrome/Perfetto trace of the whole job: parts[r] (lens[r] bytes) is rank r's
 * bt_trace_pack_stage, ranks[r] its place and clock. Each rank is a process (pid r, "rank r
 * (replica i, stage s)") with a compute, a transfers and an all-reduce thread; every send has a
 * flow arrow to the matching receive on the rank it reached; times are on rank 0's clock. The
 * file's otherData records every rank's clock offset and uncertainty. */
bt_status bt_trace_write_job_json(const void *const *parts, const size_t *lens, const bt_trace_rank *ranks,
                                  int n_ranks, int stages, const char *path);

/* ---- the collected data (shared by trace.c and timeline_svg.c; not for other modules) ---------- */

typedef struct bt_trace_ev {
    bt_instr ins;
    double start_ms, end_ms;    /* from the start of the step */
    size_t bytes;               /* SEND/RECV: bytes moved */
    int live;                   /* micro-batches held after the instruction */
} bt_trace_ev;

/* One gradient reduction of a data-parallel bucket (jobs across processes: exec's bt_coll_rec). */
typedef struct bt_trace_coll {
    int bucket;
    size_t bytes;
    int scatter;                /* 1: reduce-scatter (parallel.zero: 1), 0: all-reduce */
    double start_ms, end_ms;    /* from the start of the step */
    double wait_ms;             /* when STEP began to wait for it: the part before is hidden */
} bt_trace_coll;

typedef struct bt_trace_stage {
    char device[32];
    char layers[160];           /* "fc1..fc2" */
    size_t slot_bytes;          /* activation bytes of one micro-batch */
    int n_act_to, act_to[BT_MAX_STAGES];   /* stages a SEND_ACT reaches */
    int n_grad_to, grad_to[BT_MAX_STAGES]; /* stages a SEND_GRAD reaches */
} bt_trace_stage;

typedef struct bt_trace_step {
    double t0_ms;               /* start relative to the first traced step's start */
    double wall_ms;             /* latest instruction end, from the step's start */
    bt_schedule_kind kind;
    int chunks;                 /* model chunks per device (interleaved: virtual) */
    int microbatches, training;
    int barrier;                /* STEP waited for every stage (exec says: clipping, f16 loss scaling) */
    int *n;                     /* [stages] */
    bt_trace_ev **ev;           /* [stages][n[s]], in execution order */
    int n_coll;                 /* this rank's gradient reductions (none in one process) */
    bt_trace_coll *coll;        /* [n_coll] */
} bt_trace_step;

struct bt_trace {
    int stages;
    bt_trace_stage *stage;      /* [stages] */
    double first_t0_ms;         /* CLOCK_MONOTONIC ms of the first step's start */
    int n_steps, cap_steps;
    bt_trace_step *steps;
};

#endif
