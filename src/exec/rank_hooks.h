/* exec/rank_hooks.h: the table of rank hooks, the steps of a job where the executor meets other
 * processes. The engine holds one table (bt_engine.ranks) and calls its entries where the steps
 * run, without asking whether it is distributed: in one process the table is bt_rank_hooks_local
 * (rank_hooks.c: no-ops, and the plain single-process computation where a hook replaces one, such
 * as the sum of squares and the update); an engine that becomes one rank of a job across
 * processes gets the distributed table at its setup (engine_dist.c). Every entry is set in every
 * table: no call site tests for NULL.
 *
 * Worker-side entries run on a stage's thread; the host-side ones (job_begin, job_done, the state
 * reads and writes) on the caller's thread between jobs. Included by exec_internal.h, whose types
 * it uses. */
#ifndef BT_EXEC_RANK_HOOKS_H
#define BT_EXEC_RANK_HOOKS_H

typedef struct bt_rank_hooks {
    /* Creation, once the devices are open: what the stages and the transfer mode allow. */
    bt_status (*check_stages)(const bt_engine *e);
    /* The path between stages a and b when one of them runs on another rank. */
    bt_transfer_path (*remote_path)(const bt_engine *e, int a, int b);
    /* Creation, once the channels exist: the messages' tags and requests, the data-parallel
     * buckets, and the ranks' agreement on the engine. */
    bt_status (*created)(bt_engine *e);
    /* Destruction, the workers joined and the devices still open; then after the stages are
     * freed. Each accepts an engine whose creation failed part-way. */
    void (*release_devices)(bt_engine *e);
    void (*teardown)(bt_engine *e);
    /* The worker at its job's start (before the gradients are zeroed; grads: not a forward job):
     * posts the receives of every micro-batch on st's channels from other ranks. */
    bt_status (*job_start)(bt_engine *e, bt_stage *st, int grads);
    /* After the job's instructions: waits for this rank's sends (ok = 1) or cancels what is
     * pending. */
    bt_status (*job_end)(bt_engine *e, bt_stage *st, int ok);
    /* Whether the BWD or W at instruction instr of the stage's list is the step's last of its
     * kind after which the data-parallel buckets start (its `last` argument). */
    int (*last_backward)(const bt_engine *e, bt_instr_kind kind, int instr);
    /* Backward of node k in the stage's last backward of the step (or its last W): starts the
     * data-parallel buckets whose gradients are now final. */
    bt_status (*grads_final)(bt_engine *e, bt_stage *st, int k);
    /* At STEP, before the update: waits for the replicas' gradients, summed (w->waiting is set
     * around it). */
    bt_status (*grads_reduce)(bt_engine *e, bt_worker *w, bt_stage *st);
    /* STEP of a gradients-only job: the loss still comes from the last stage (device idle). */
    bt_status (*grads_step)(bt_engine *e, bt_worker *w, bt_stage *st);
    /* STEP: the stage's sum of squared gradients into *out (the device idle; ties summed). */
    bt_status (*sumsq)(bt_engine *e, bt_stage *st, double *out);
    /* STEP after the barrier: every stage's sum into e->sumsq and the loss over the replicas (the
     * local sums already in e->sumsq). */
    bt_status (*exchange)(bt_engine *e, bt_worker *w, bt_stage *st);
    /* STEP: the optimizer update of the stage with the gradients scaled by scale. */
    bt_status (*update)(bt_engine *e, bt_stage *st, double scale);
    /* Tied parameters at STEP: side `side` of tie t (its gradient in host[side]) trades with the
     * other side's rank; called only for a side whose other side is not local. */
    bt_status (*tie_exchange)(bt_engine *e, bt_worker *w, bt_tie *t, int side);
    /* Tied parameters after their barrier, before the sums are written back. */
    bt_status (*ties_summing)(bt_engine *e, bt_worker *w);
    /* The host, before a job is posted (the copies of other ranks' tensors are stale then). */
    void (*job_begin)(bt_engine *e);
    /* The host after a failed job: the failure's status, its message naming this rank. */
    bt_status (*job_failed)(const bt_engine *e, bt_status failed);
    /* The host after a successful job: the loss over replicas into *loss_sum, and the other
     * ranks' trace records. */
    bt_status (*job_done)(bt_engine *e, bt_job_kind job, double *loss_sum);
    /* For a checkpoint: the stage's full optimizer state on this rank (parallel.zero shards it). */
    bt_status (*gather_state)(bt_engine *e);
    /* Parameter param of stage s held by another rank: its weights (slot -1) or a state slot. */
    bt_status (*mirror_read)(const bt_engine *e, int s, int param, int slot, void *dst, size_t bytes);
    /* The full state buffer of ps's slot for a read (write = 0) or a write. */
    bt_status (*state_buffer)(bt_engine *e, bt_stage *st, bt_param_store *ps, int slot, int write);
    /* Who runs stage s: "stage 1" in one process, "rank 3 (stage 1, replica 1)" across them. */
    void (*describe_stage)(const bt_engine *e, int s, char *buf, size_t size);
} bt_rank_hooks;

/* rank_hooks.c: the table of one process. */
extern const bt_rank_hooks bt_rank_hooks_local;

/* worker_step.c: the single-process sum of squares and update, for the tables that wrap them. */
bt_status bt_worker_stage_sumsq(bt_engine *e, bt_stage *st, double *out);
bt_status bt_worker_stage_update(bt_engine *e, bt_stage *st, double scale);

#endif
