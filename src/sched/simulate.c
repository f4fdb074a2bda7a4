/* sched/simulate.c: predicting a schedule's timing from per-stage costs.
 *
 * Semantics (those of sched.h): each device executes its instructions in order (one stage's list,
 * or the turns of its stages), each instruction starting when the previous one on the same device
 * ended (the first at 0). FWD, BWD, W and STEP take costs->fwd[s], costs->bwd[s], costs->wgt[s]
 * and costs->step; an instruction of a different stage than the one its device ran last starts
 * costs->handoff later (the turn hand-off between stage threads; idle, not busy). A SEND takes no time on its stage (sends never
 * block); its data arrives at the peer transfer time later (send_act[s] towards s+1, send_grad[s]
 * towards s-1). A RECV completes at the later of its own start and that arrival. busy[s] is the
 * compute time (FWD + BWD + W + STEP) of stage s, step_time the latest end of any instruction,
 * and bubble = 1 - sum(busy) / (devices * step_time) (0 for an empty run).
 *
 * The schedule is validated first, so pairing is exact and the run cannot hang; instructions are
 * processed device by device as far as their receives allow, which yields the unique times above.
 *
 * Data flow: plan/ predicts step time and bubble with it, schedule.c draws the grid from a
 * unit-cost run, `baton schedule` prints its bubble. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "sched/sched.h"

static bt_status check_cost(const double *v, int n, const char *name)
{
    for (int s = 0; s < n; s++)
        if (!isfinite(v[s]) || v[s] < 0)
            return bt_error(BT_ERR_INVALID_ARG, "simulator: %s[%d] = %g is not a finite time >= 0",
                            name, s, v[s]);
    return BT_OK;
}

static bt_status check_costs(const bt_schedule *sched, const bt_sim_costs *costs)
{
    int p = sched->stages;
    if (!costs || !costs->fwd)
        return bt_error(BT_ERR_INVALID_ARG, "simulator: forward costs are missing");
    if (sched->training && !costs->bwd)
        return bt_error(BT_ERR_INVALID_ARG, "simulator: backward costs are missing");
    BT_TRY(check_cost(costs->fwd, p, "fwd"));
    if (costs->bwd) BT_TRY(check_cost(costs->bwd, p, "bwd"));
    if (sched->split_backward && sched->training && !costs->wgt)
        return bt_error(BT_ERR_INVALID_ARG, "simulator: the schedule splits the backward: weight-gradient "
                        "(W) costs are missing");
    if (costs->wgt) BT_TRY(check_cost(costs->wgt, p, "wgt"));
    if (costs->send_act) BT_TRY(check_cost(costs->send_act, p, "send_act"));
    if (costs->send_grad) BT_TRY(check_cost(costs->send_grad, p, "send_grad"));
    if (!isfinite(costs->handoff) || costs->handoff < 0)
        return bt_error(BT_ERR_INVALID_ARG, "simulator: handoff = %g is not a finite time >= 0", costs->handoff);
    if (!isfinite(costs->step) || costs->step < 0)
        return bt_error(BT_ERR_INVALID_ARG, "simulator: step = %g is not a finite time >= 0",
                        costs->step);
    return BT_OK;
}

void bt_sim_result_free(bt_sim_result *res)
{
    if (!res) return;
    for (int s = 0; s < res->stages; s++) {
        if (res->start) free(res->start[s]);
        if (res->end) free(res->end[s]);
    }
    free(res->start);
    free(res->end);
    free(res->busy);
    memset(res, 0, sizeof *res);
}

static bt_status alloc_result(const bt_schedule *sched, bt_sim_result *res)
{
    int p = sched->stages;
    memset(res, 0, sizeof *res);
    res->busy = calloc((size_t)p, sizeof *res->busy);
    res->start = calloc((size_t)p, sizeof *res->start);
    res->end = calloc((size_t)p, sizeof *res->end);
    if (!res->busy || !res->start || !res->end) goto nomem;
    res->stages = p;
    for (int s = 0; s < p; s++) {
        size_t n = sched->len[s] > 0 ? (size_t)sched->len[s] : 1;
        res->start[s] = calloc(n, sizeof **res->start);
        res->end[s] = calloc(n, sizeof **res->end);
        if (!res->start[s] || !res->end[s]) goto nomem;
    }
    return BT_OK;

nomem:
    res->stages = p;
    bt_sim_result_free(res);
    return bt_error(BT_ERR_NOMEM, "out of memory for a simulation of %d stages", p);
}

bt_status bt_simulate(const bt_schedule *sched, const bt_sim_costs *costs, bt_sim_result *out)
{
    bt_status st = BT_OK;
    int *pos = NULL, *n = NULL, **order_stage = NULL, **order_index = NULL, *last_stage = NULL;
    double *device_free_at = NULL, *act_arrives = NULL, *grad_arrives = NULL;

    if (!out) return bt_error(BT_ERR_INVALID_ARG, "bt_simulate: out is NULL");
    memset(out, 0, sizeof *out);
    BT_TRY(bt_schedule_validate(sched));
    BT_TRY(check_costs(sched, costs));
    BT_TRY(alloc_result(sched, out));

    int p = sched->stages, m = sched->microbatches, D = sched->devices;
    out->devices = D;
    size_t cells = (size_t)p * (size_t)m;
    pos = calloc((size_t)D, sizeof *pos);
    n = calloc((size_t)D, sizeof *n);
    order_stage = calloc((size_t)D, sizeof *order_stage);
    order_index = calloc((size_t)D, sizeof *order_index);
    device_free_at = calloc((size_t)D, sizeof *device_free_at);
    last_stage = malloc((size_t)D * sizeof *last_stage);
    /* act_arrives[s * m + mb]: when stage s's activations of mb reach s+1 (NAN: not sent yet);
     * grad_arrives likewise for gradients reaching s-1. */
    act_arrives = malloc(cells * sizeof *act_arrives);
    grad_arrives = malloc(cells * sizeof *grad_arrives);
    if (!pos || !n || !order_stage || !order_index || !device_free_at || !act_arrives || !grad_arrives ||
        !last_stage) {
        st = bt_error(BT_ERR_NOMEM, "out of memory simulating a schedule");
        goto fail;
    }
    for (int d = 0; d < D; d++)
        BT_TRY_GOTO(st, bt_schedule_device_order(sched, d, &n[d], &order_stage[d], &order_index[d]), fail);
    for (size_t c = 0; c < cells; c++) act_arrives[c] = grad_arrives[c] = NAN;
    for (int d = 0; d < D; d++) last_stage[d] = -1;

    for (;;) {
        int progress = 0, done = 1;
        for (int d = 0; d < D; d++) {
            int blocked = 0;
            while (pos[d] < n[d]) {
                int s = order_stage[d][pos[d]], i = order_index[d][pos[d]];
                const bt_instr *ins = &sched->list[s][i];
                double start = device_free_at[d], cost = 0;
                if (last_stage[d] >= 0 && last_stage[d] != s) start += costs->handoff;
                double end = start;
                switch (ins->kind) {
                case BT_I_FWD: cost = costs->fwd[s]; break;
                case BT_I_BWD: cost = costs->bwd[s]; break;
                case BT_I_WGT: cost = costs->wgt[s]; break;
                case BT_I_STEP: cost = costs->step; break;
                case BT_I_SEND_ACT:
                    act_arrives[(size_t)s * m + ins->mb] =
                        start + (costs->send_act ? costs->send_act[s] : 0.0);
                    break;
                case BT_I_SEND_GRAD:
                    grad_arrives[(size_t)s * m + ins->mb] =
                        start + (costs->send_grad ? costs->send_grad[s] : 0.0);
                    break;
                case BT_I_RECV_ACT:
                case BT_I_RECV_GRAD: {
                    const double *arrives = ins->kind == BT_I_RECV_ACT ? act_arrives : grad_arrives;
                    double at = arrives[(size_t)ins->peer * m + ins->mb];
                    blocked = isnan(at); /* its SEND has not run yet */
                    end = at > start ? at : start;
                    break;
                }
                }
                if (blocked) break;
                end += cost;
                out->busy[s] += cost;
                out->start[s][i] = start;
                out->end[s][i] = end;
                device_free_at[d] = end;
                last_stage[d] = s;
                if (end > out->step_time) out->step_time = end;
                pos[d]++;
                progress = 1;
            }
            if (pos[d] < n[d]) done = 0;
        }
        if (done) break;
        if (!progress) {
            st = bt_error(BT_ERR_INTERNAL, "simulator: a validated schedule did not complete");
            goto fail;
        }
    }

    double total_busy = 0;
    for (int s = 0; s < p; s++) total_busy += out->busy[s];
    out->bubble = out->step_time > 0 ? 1.0 - total_busy / ((double)D * out->step_time) : 0.0;
    goto done;

fail:
    bt_sim_result_free(out);
done:
    for (int d = 0; d < D && order_stage && order_index; d++) {
        free(order_stage[d]);
        free(order_index[d]);
    }
    free(order_stage);
    free(order_index);
    free(last_stage);
    free(n);
    free(grad_arrives);
    free(act_arrives);
    free(device_free_at);
    free(pos);
    return st;
}
