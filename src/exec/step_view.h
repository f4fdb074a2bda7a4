/* exec/step_view.h: a read-only view of the engine's last step, exported by exec for src/trace
 * (and tests) so that nothing above exec reads the engine's internals (exec_internal.h).
 *
 * What it shows: per stage the instruction records of the last job (device-timed begin and end,
 * bytes moved, micro-batches held), the schedule the job ran, the stage's device, layers and slot
 * bytes, the stages its sends reach (its boundary channels), and facts of the step that only
 * exec knows: whether backward ran and whether the STEP instruction was a barrier across stages
 * (every training step's is: no stage updates before all have finished backward).
 *
 * Invariants: everything returned points into the engine and stays valid until its next step or
 * its destruction; nothing here changes the engine.
 *
 * Data flow: exec (worker records, schedule, channels) -> this view -> trace/. */
#ifndef BT_EXEC_STEP_VIEW_H
#define BT_EXEC_STEP_VIEW_H

#include <stddef.h>

#include "baton/config.h"
#include "baton/engine.h"
#include "baton/status.h"
#include "sched/sched.h"

/* One executed instruction of the last job. */
typedef struct bt_trace_rec {
    int instr;                 /* index into the job schedule's list for this stage */
    double start_ms, end_ms;
    size_t bytes;              /* SEND/RECV: bytes moved */
    int live;                  /* micro-batches held after the instruction */
} bt_trace_rec;

/* The last step as a whole. */
typedef struct bt_step_view {
    int stages;
    const bt_schedule *schedule; /* the schedule the job ran */
    double t0_ms;              /* CLOCK_MONOTONIC ms at the step's start */
    int training;              /* 1: backward ran (gradients or a training step) */
    int step_barrier;          /* 1: STEP waited for every stage (every training step) */
} bt_step_view;

/* One stage of the engine. */
typedef struct bt_step_stage {
    const char *device;        /* "cpu:1" */
    const char *first_layer, *last_layer; /* names of the stage's first and last layers */
    size_t slot_bytes;         /* activation bytes of one micro-batch */
    int n_act_to, act_to[BT_MAX_STAGES];   /* stages this stage's SEND_ACT reaches */
    int n_grad_to, grad_to[BT_MAX_STAGES]; /* stages this stage's SEND_GRAD reaches */
} bt_step_stage;

/* One gradient reduction (a data-parallel bucket) of the last step on this rank, in ms from the
 * step's start on the host clock: started once the bucket's gradients were final, ended when it
 * was first seen complete (MPI reports completion only when asked: at most the polling late). */
typedef struct bt_coll_rec {
    int bucket;
    size_t bytes;              /* this rank's gradients in the bucket */
    int scatter;               /* 1: a reduce-scatter (parallel.zero: 1), 0: an all-reduce */
    double start_ms, end_ms;
    double wait_ms;            /* when STEP began to wait for the buckets (the rest is hidden) */
} bt_coll_rec;

/* The last step; BT_ERR_INVALID_ARG when the engine has not run one yet. */
bt_status bt_engine_step_view(const bt_engine *engine, bt_step_view *out);
/* Stage s's device, layers and boundary channels; BT_ERR_INVALID_ARG for a bad stage. */
bt_status bt_engine_step_stage(const bt_engine *engine, int stage, bt_step_stage *out);

/* The gradient reductions of the last step (none in one process, without replicas, or in a step
 * without an optimizer update): writes up to cap of them to out, returns how many there were. */
int bt_engine_collectives(const bt_engine *engine, bt_coll_rec *out, int cap);

/* The last job's schedule and stage's records; valid until the next step. */
const bt_schedule *bt_engine_last_schedule(const bt_engine *engine);
const bt_trace_rec *bt_engine_trace(const bt_engine *engine, int stage, int *n);

#endif
