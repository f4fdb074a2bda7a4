/* exec/worker_step.c: a stage's optimizer step, the STEP instruction of worker.c. A step is all or
 * nothing: each stage waits for its device (a kernel error from the backward surfaces there), adds
 * up the squares of its gradients and meets the others at a barrier; only then does any stage
 * update, with the global gradient norm (clipping, f16 loss-scale skips). A non-finite norm stops
 * the step on every stage before any update, the stage whose own gradients are not finite naming
 * the first such parameter. Tied parameters (bt_tie) exchange their gradients first, at one more
 * meeting of the stages (exchange_tied). Split from worker.c along the instruction it implements. */
#include <math.h>
#include <stdio.h>

#include "core/error.h"
#include "exec/exec_internal.h"
#include "optim/optim.h"

/* Every stage arrives here at STEP; returns when all have, or on abort. */
static bt_status stage_barrier(bt_engine *e, bt_worker *w)
{
    bt_status st = BT_OK;
    pthread_mutex_lock(&e->mu);
    uint64_t gen = e->barrier_generation;
    if (++e->barrier_count == e->local_stages) {
        e->barrier_count = 0;
        e->barrier_generation++;
        pthread_cond_broadcast(&e->cv_barrier);
    } else {
        atomic_store(&w->waiting, 1);
        while (gen == e->barrier_generation && !atomic_load(&e->abort)) pthread_cond_wait(&e->cv_barrier, &e->mu);
        atomic_store(&w->waiting, 0);
        if (gen == e->barrier_generation) st = BT_ERR_INTERNAL;
    }
    pthread_mutex_unlock(&e->mu);
    if (st != BT_OK) return bt_error(st, "stopped at the optimizer step (another stage failed)");
    return BT_OK;
}

/* Refreshes the rounded compute copy of a parameter after its master weights changed. */
bt_status bt_worker_refresh_lowp(bt_engine *e, bt_stage *st, bt_param_store *p)
{
    if (!p->w_lp) return BT_OK; /* exists only with f32 master weights (engine.c) */
    return bt_backend_refresh_copy(st->be, st->dev, e->params.precision, p->w_lp, p->w, p->numel);
}

/* The first of st's parameters whose gradient is not finite, or -1 when each is but their sum of
 * squares overflowed. The failure path only: one wait for the device per parameter. */
static int first_nonfinite_grad(bt_engine *e, bt_stage *st, double *sumsq)
{
    for (int i = 0; i < st->n_params; i++) {
        double v = 0;
        if (st->be->sum_squares(st->dev, e->dtype, &st->sq_ptr[i], &st->sq_n[i], 1, &v) != BT_OK) continue;
        if (!isfinite(v)) {
            *sumsq = v;
            return i;
        }
    }
    return -1;
}

/* Every stage sees the same non-finite global sum and stops before its update. The stage whose own
 * gradients are not finite names the first such parameter (collect_failure reports the lowest
 * such stage: the first non-finite gradient in the graph's order); the others say why they stopped. */
static bt_status nonfinite_grads(bt_engine *e, bt_stage *st)
{
    long long step = (long long)e->step + 1;
    double own = e->sumsq[st->index];
    int culprit = -1;
    for (int s = 0; s < e->stages && culprit < 0; s++)
        if (!isfinite(e->sumsq[s])) culprit = s;
    if (culprit < 0) { /* every stage's sum is finite but not their total: stage 0 says so */
        if (st->index != 0) return bt_error(BT_ERR_INTERNAL, "stopped at the optimizer step of step %lld", step);
        return bt_error(BT_ERR_NUMERIC,
                        "step %lld: the global gradient norm overflowed; no stage applied the update", step);
    }
    if (isfinite(own))
        return bt_error(BT_ERR_INTERNAL, "stopped at the optimizer step of step %lld: stage %d's gradients are "
                        "not finite", step, culprit);
    double v = own;
    int i = first_nonfinite_grad(e, st, &v);
    const char *what = isnan(v) ? "NaN" : "infinite";
    if (i < 0)
        return bt_error(BT_ERR_NUMERIC, "step %lld, stage %d (%s): the gradients' sum of squares is %s; no stage "
                        "applied the update", step, st->index, st->device_name, what);
    return bt_error(BT_ERR_NUMERIC,
                    "step %lld, stage %d (%s): the gradient of '%s' is not finite (%s); no stage applied the "
                    "update (look for NaN or infinity in the data, or lower the learning rate)",
                    step, st->index, st->device_name, e->graph->params[st->params[i].param].name, what);
}

/* Tied parameters (bt_tie): every stage meets the others once more at STEP when the model has
 * ties; the gradients of both copies are added on the host in the same order on both sides.
 * Across processes a side whose other side is on another rank trades its gradient with that rank
 * first (bt_dist_tie_exchange; with data parallelism both are sums over the replicas already). */
static bt_status exchange_tied(bt_engine *e, bt_worker *w, bt_stage *st)
{
    for (int k = 0; k < e->n_ties; k++)
        for (int side = 0; side < 2; side++) {
            bt_tie *t = &e->ties[k];
            if (t->stage[side] != st) continue;
            BT_TRY(st->be->to_host(st->dev, t->host[side], t->store[side]->g, t->bytes));
            if (!bt_stage_is_local(e, t->stage[1 - side]->index)) BT_TRY(e->ranks->tie_exchange(e, w, t, side));
        }
    BT_TRY(stage_barrier(e, w));
    BT_TRY(e->ranks->ties_summing(e, w));
    for (int k = 0; k < e->n_ties; k++)
        for (int side = 0; side < 2; side++) {
            bt_tie *t = &e->ties[k];
            if (t->stage[side] != st) continue;
            const size_t n = t->store[side]->numel;
            if (e->dtype == BT_F64) {
                const double *a = t->host[0], *b = t->host[1];
                double *y = t->sum[side];
                for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
            } else {
                const float *a = t->host[0], *b = t->host[1];
                float *y = t->sum[side];
                for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
            }
            BT_TRY(st->be->from_host(st->dev, t->store[side]->g, t->sum[side], t->bytes));
        }
    return BT_OK;
}

/* The optimizer step of one stage. A step is all or nothing: each stage first waits for its
 * device (so an error a kernel raised during backward surfaces here), adds up the squares of its
 * gradients and meets the others at a barrier; no stage updates before every stage's backward
 * has succeeded, so a step that fails anywhere changes no weights and can be retried. The total
 * is the global gradient norm: when it is not finite, f16 loss scaling skips the step on every
 * stage (and halves the scale); otherwise the step stops, naming the first parameter whose
 * gradient is not finite. Clipping scales by it. The gradients are scaled by the loss scale,
 * which the update divides out (grad_scale). */
bt_status bt_worker_stage_sumsq(bt_engine *e, bt_stage *st, double *out)
{
    *out = 0;
    if (st->n_params == 0) return BT_OK;
    return st->be->sum_squares(st->dev, e->dtype, st->sq_ptr, st->sq_n, st->n_params, out);
}

bt_status bt_worker_run_step(bt_engine *e, bt_worker *w, bt_stage *st)
{
    double sumsq = 0;
    BT_TRY(st->be->sync(st->dev));
    if (e->n_ties) BT_TRY(exchange_tied(e, w, st));
    BT_TRY(e->ranks->sumsq(e, st, &sumsq)); /* across processes: the replicas' shares */
    e->sumsq[st->index] = sumsq;
    BT_TRY(stage_barrier(e, w));
    BT_TRY(e->ranks->exchange(e, w, st)); /* across processes: every stage's sum, and the loss */
    double total = 0;
    for (int s = 0; s < e->stages; s++) total += e->sumsq[s];
    if (!isfinite(total)) {
        if (e->params.precision != BT_F16) return nonfinite_grads(e, st);
        w->skipped = 1; /* every stage sees the same total: all skip */
        return BT_OK;
    }
    double unscale = 1.0 / e->loss_scale, scale = unscale;
    if (e->params.clip_norm > 0) scale *= bt_optim_clip_scale(sqrt(total) * unscale, e->params.clip_norm);
    return e->ranks->update(e, st, scale);
}

bt_status bt_worker_stage_update(bt_engine *e, bt_stage *st, double scale)
{
    if (st->n_params == 0) return BT_OK;
    if (st->grad_arena) { /* data parallel in place (dist_dp.c): gradients in bucket order, not packed */
        for (int i = 0; i < st->n_params; i++) {
            bt_param_store *p = &st->params[i];
            BT_TRY(st->be->optimizer_update(st->dev, &e->params.optimizer, e->dtype, p->w, p->g,
                                            p->state, p->numel, e->lr, e->step + 1, scale));
            BT_TRY(bt_worker_refresh_lowp(e, st, p));
        }
        return BT_OK;
    }
    /* one pass over all of the stage's parameters (layout.c packs them into flat arrays): the
     * update is elementwise with the same coefficients for every tensor, so this is the per-tensor
     * loop's arithmetic exactly */
    bt_param_store all = {.param = -1, .numel = st->flat_numel, .w = st->flat_w,
                          .g = st->flat_g, .w_lp = st->flat_w_lp,
                          .state = {st->flat_state[0], st->flat_state[1]}};
    BT_TRY(st->be->optimizer_update(st->dev, &e->params.optimizer, e->dtype, all.w, all.g,
                                    all.state, all.numel, e->lr, e->step + 1, scale));
    return bt_worker_refresh_lowp(e, st, &all);
}
