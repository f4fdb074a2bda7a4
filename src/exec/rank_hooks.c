/* exec/rank_hooks.c: the rank hooks of one process (exec/rank_hooks.h). Nothing here meets another
 * process: the steps a job across processes adds do nothing, and the entries that replace a
 * computation (the sum of squares, the update) run the single-process one. An engine starts with
 * this table; the distributed one replaces it when the engine becomes one rank of a job. */
#include <stdio.h>

#include "core/error.h"
#include "exec/exec_internal.h"

static bt_status check_stages(const bt_engine *e)
{
    if (e->params.transfer == BT_TRANSFER_NCCL)
        return bt_error(BT_ERR_INVALID_ARG, "--transfer nccl: NCCL joins GPU stages on different ranks, and this "
                        "run is one process (start it under mpirun with stages on GPUs)");
    return BT_OK;
}

/* every stage is local in one process, so no pair of stages asks for this */
static bt_transfer_path remote_path(const bt_engine *e, int a, int b)
{
    (void)e, (void)a, (void)b;
    return BT_PATH_HOST;
}

static bt_status created(bt_engine *e)
{
    (void)e;
    return BT_OK;
}

static void release(bt_engine *e) { (void)e; }

static bt_status job_start(bt_engine *e, bt_stage *st, int grads)
{
    (void)e, (void)st, (void)grads;
    return BT_OK;
}

static bt_status job_end(bt_engine *e, bt_stage *st, int ok)
{
    (void)e, (void)st, (void)ok;
    return BT_OK;
}

static int last_backward(const bt_engine *e, bt_instr_kind kind, int instr)
{
    (void)e, (void)kind, (void)instr;
    return 0; /* no buckets in one process */
}

static bt_status grads_final(bt_engine *e, bt_stage *st, int k)
{
    (void)e, (void)st, (void)k;
    return BT_OK;
}

static bt_status stage_step(bt_engine *e, bt_worker *w, bt_stage *st)
{
    (void)e, (void)w, (void)st;
    return BT_OK;
}

static bt_status tie_exchange(bt_engine *e, bt_worker *w, bt_tie *t, int side)
{
    (void)e, (void)w, (void)t, (void)side;
    return bt_error(BT_ERR_INTERNAL, "engine: a tied parameter's other side is on another process in a "
                    "single-process engine");
}

static bt_status ties_summing(bt_engine *e, bt_worker *w)
{
    (void)e, (void)w;
    return BT_OK;
}

static void job_begin(bt_engine *e) { (void)e; }

static bt_status job_failed(const bt_engine *e, bt_status failed)
{
    (void)e;
    return failed;
}

static bt_status gather_state(bt_engine *e)
{
    (void)e;
    return BT_OK;
}

static bt_status job_done(bt_engine *e, bt_job_kind job, double *loss_sum)
{
    (void)e, (void)job, (void)loss_sum;
    return BT_OK;
}

/* every stage is local in one process: a stage without a store is a bug */
static bt_status mirror_read(const bt_engine *e, int s, int param, int slot, void *dst, size_t bytes)
{
    (void)slot, (void)dst, (void)bytes;
    return bt_error(BT_ERR_INTERNAL, "engine: parameter '%s' of stage %d has no store", e->graph->params[param].name, s);
}

static bt_status state_buffer(bt_engine *e, bt_stage *st, bt_param_store *ps, int slot, int write)
{
    (void)st, (void)write;
    if (ps->state[slot]) return BT_OK;
    return bt_error(BT_ERR_INTERNAL, "parameter '%s' has no optimizer state buffer", e->graph->params[ps->param].name);
}

static void describe_stage(const bt_engine *e, int s, char *buf, size_t size)
{
    (void)e;
    snprintf(buf, size, "stage %d", s);
}

const bt_rank_hooks bt_rank_hooks_local = {
    .check_stages = check_stages,
    .remote_path = remote_path,
    .created = created,
    .release_devices = release,
    .teardown = release,
    .job_start = job_start,
    .job_end = job_end,
    .last_backward = last_backward,
    .grads_final = grads_final,
    .grads_reduce = stage_step,
    .grads_step = stage_step,
    .sumsq = bt_worker_stage_sumsq,
    .exchange = stage_step,
    .update = bt_worker_stage_update,
    .tie_exchange = tie_exchange,
    .ties_summing = ties_summing,
    .job_begin = job_begin,
    .job_failed = job_failed,
    .job_done = job_done,
    .gather_state = gather_state,
    .mirror_read = mirror_read,
    .state_buffer = state_buffer,
    .describe_stage = describe_stage,
};
