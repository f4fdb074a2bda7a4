/* exec/engine_dist.h: creating an engine that is one rank of a job across processes (baton run
 * under mpirun). The CLI calls it after MPI is up; every rank calls it at the same time (creation
 * is collective: it builds the communicators and checks that every rank built the same schedule).
 * Each rank runs stage layout->stage of replica layout->replica; the rest of the engine's API is
 * the same as in one process (docs/distributed.md). */
#ifndef BT_EXEC_ENGINE_DIST_H
#define BT_EXEC_ENGINE_DIST_H

#include "baton/engine.h"
#include "dist/agree.h"
#include "dist/dist.h"

/* params->batch is the global batch: each replica takes its shard (batch / D samples) of every
 * fed batch. layout->stages must equal the plan's stage count (an error naming N, D and P). */
bt_status bt_engine_create_dist(const bt_graph *graph, const bt_engine_params *params,
                                const bt_dist_layout *layout, bt_engine **out);

/* Adds to a what every rank of a job must agree on about an engine of graph with params
 * (exec/engine_agree.c: the graph layer by layer, the parallel section, the optimizer, lr
 * schedule, clipping, batch, seed, precision, transfer mode; not threads, watchdog, memory limit or
 * device indices, which are each rank's). bt_engine_create_dist compares them, with the plan and
 * schedules, before any step; the CLI compares them first, with its own options and inputs. */
void bt_engine_agree_fields(bt_agree *a, const bt_graph *graph, const bt_engine_params *params);

/* The layout a distributed engine runs (NULL in one process). */
const bt_dist_layout *bt_engine_dist_layout(const bt_engine *e);

/* Every rank calls it alike: after each job the ranks of a replica share their instruction
 * records, so a trace or timeline drawn on rank 0 shows every stage of replica 0 (one machine's
 * clock: across machines the stages' offsets are as far off as the machines' clocks). */
void bt_engine_dist_trace(bt_engine *e, int on);

/* Collective: this rank's local stage's time and memory statistics (and its boundaries') copied
 * into rank 0's engine for the stages of replica 0, so rank 0's summary shows every stage. */
bt_status bt_engine_dist_gather_stats(bt_engine *e);

/* Rank r's own stage's statistics, from the last bt_engine_dist_gather_stats. */
bt_status bt_engine_dist_rank_stats(const bt_engine *e, int rank, bt_time_stats *time, bt_memory_stats *mem);

/* A rank's gradient reductions over its stage's replicas since the start: bucket reductions, bytes
 * (this rank's gradients), the time from each start to its completion, the part of it before STEP
 * began to wait (hidden behind the backward work), and STEP's wait for them. */
typedef struct bt_dist_reduce_stats {
    int64_t reductions;
    double bytes, total_ms, hidden_ms, wait_ms;
    int scatter;               /* 1: reduce-scatter (parallel.zero: 1) */
    bt_transfer_path path;     /* BT_PATH_MPI, BT_PATH_SHM (the replicas share one machine: loads
                                * through a shared window, exec/dist_shm.c), BT_PATH_MPI_STAGED (a GPU
                                * through host memory) or BT_PATH_NCCL (whose times are on the device
                                * and not counted) */
} bt_dist_reduce_stats;

/* Rank r's gradient reductions, from the last bt_engine_dist_gather_stats. */
bt_status bt_engine_dist_rank_reduce(const bt_engine *e, int rank, bt_dist_reduce_stats *out);

/* Boundary i (as bt_engine_boundary numbers them) of replica q, as the rank that sends on it
 * counted (from the last bt_engine_dist_gather_stats): the rows of replicas other than 0. */
bt_status bt_engine_dist_replica_boundary(const bt_engine *e, int replica, int i, bt_boundary_stats *out);

/* Data-parallel all-reduce statistics of the local stage: reductions (early: those started during
 * the backward work, before STEP), bytes, the time spent waiting for them at STEP, and the time
 * from start to completion. */
void bt_engine_dist_reduce_stats(const bt_engine *e, int64_t *reductions, int64_t *early, double *bytes,
                                 double *wait_ms, double *total_ms);
/* How the local stage's gradients are all-reduced: BT_PATH_SHM (CPU, replicas on one machine),
 * BT_PATH_MPI (CPU), BT_PATH_MPI_STAGED (a GPU
 * through host memory) or BT_PATH_NCCL (exec/dist_nccl.c). */
bt_transfer_path bt_engine_dist_reduce_path(const bt_engine *e);

#endif
