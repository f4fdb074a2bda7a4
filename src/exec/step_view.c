/* exec/step_view.c: the read-only view of the last step that exec exports (see step_view.h). The
 * STEP of every training step is a barrier across stages (worker.c: a step is all or nothing).
 * Across processes it also shows the last step's gradient reductions (dist_dp.c times them). */
#include <string.h>

#include "core/error.h"
#include "exec/exec_internal.h"

bt_status bt_engine_step_view(const bt_engine *e, bt_step_view *out)
{
    if (!e || !out) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_step_view: NULL argument");
    memset(out, 0, sizeof *out);
    const bt_schedule *sched = bt_engine_last_schedule(e);
    if (!sched) return bt_error(BT_ERR_INVALID_ARG, "the engine has not run a step yet");
    out->stages = e->stages;
    out->schedule = sched;
    out->t0_ms = e->step_t0_ms;
    out->training = sched->training && e->job != BT_JOB_FORWARD;
    out->step_barrier = e->job == BT_JOB_TRAIN; /* every optimizer step waits for all stages */
    return BT_OK;
}

bt_status bt_engine_step_stage(const bt_engine *e, int s, bt_step_stage *out)
{
    if (!e || !out) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_step_stage: NULL argument");
    if (s < 0 || s >= e->stages)
        return bt_error(BT_ERR_INVALID_ARG, "stage %d: the engine has %d stages", s, e->stages);
    const bt_stage *st = &e->stage[s];
    const bt_graph *g = e->graph;
    int first = e->plan->first_layer[s], last = first + e->plan->n_stage_layers[s] - 1;
    memset(out, 0, sizeof *out);
    out->device = st->device_name;
    out->first_layer = g->layers[first].name;
    out->last_layer = g->layers[last].name;
    out->slot_bytes = st->slot_bytes;
    for (int c = 0; c < st->n_out_act; c++) out->act_to[out->n_act_to++] = st->out_act[c]->to;
    for (int c = 0; c < st->n_out_grad; c++) out->grad_to[out->n_grad_to++] = st->out_grad[c]->to;
    return BT_OK;
}

int bt_engine_collectives(const bt_engine *e, bt_coll_rec *out, int cap)
{
    if (!e || !e->dist.on) return 0;
    const bt_engine_dist *d = &e->dist;
    int n = 0;
    size_t dsz = bt_dtype_size(e->dtype);
    for (int b = 0; b < d->n_buckets; b++) {
        const bt_dp_bucket *k = &d->buckets[b];
        if (k->start_ms < e->step_t0_ms || k->done_ms < k->start_ms) continue; /* not this step's */
        if (n < cap)
            out[n] = (bt_coll_rec){b, (d->zero ? k->chunk * (size_t)d->layout.data : k->count) * dsz, d->zero,
                                   k->start_ms - e->step_t0_ms, k->done_ms - e->step_t0_ms,
                                   d->reduce_wait_t0_ms - e->step_t0_ms};
        n++;
    }
    return n;
}
