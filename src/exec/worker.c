/* exec/worker.c: the interpreter each stage's thread runs. A worker waits for a job (compute
 * gradients, train, or forward), walks its stage's instruction list from the schedule, and
 * executes each instruction through the backend table: FWD/BWD run the stage's nodes on the
 * micro-batch's slot, SEND/RECV move activations and gradients through channels, STEP applies
 * the optimizer after a cross-stage reduction of the gradient norm. On any failure it records
 * the message, raises the engine's abort flag and wakes everyone, so no stage is left waiting. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/util.h"
#include "core/error.h"
#include "exec/exec_internal.h"
#include "train/optim.h"

static bt_dtype value_dtype(const bt_engine *e, const bt_value *v)
{
    return v->dtype == BT_I32 ? BT_I32 : e->dtype;
}

static size_t value_row_bytes(const bt_engine *e, const bt_value *v)
{
    return (size_t)bt_shape_numel(&v->shape) * bt_dtype_size(value_dtype(e, v));
}

static void *slot_value(const bt_stage *st, int mb, int value)
{
    return st->slots + (size_t)(mb % st->n_slots) * st->slot_bytes + st->value_offset[value];
}

static void make_tensor(const bt_engine *e, bt_tensor *t, void *data, const bt_value *v)
{
    t->data = data;
    t->dtype = value_dtype(e, v);
    t->ndim = v->shape.ndim + 1;
    t->dim[0] = e->mb_size;
    for (int i = 0; i < v->shape.ndim; i++) t->dim[i + 1] = v->shape.dim[i];
}

static void make_param_tensor(const bt_engine *e, bt_tensor *t, void *data, const bt_param *p)
{
    t->data = data;
    t->dtype = e->dtype;
    t->ndim = p->shape.ndim;
    for (int i = 0; i < p->shape.ndim; i++) t->dim[i] = p->shape.dim[i];
}

/* Fills the parts of a call shared by forward and backward of node k on micro-batch mb. */
static void prepare_call(bt_engine *e, bt_stage *st, int k, int mb, bt_op_call *call,
                         bt_tensor *in, bt_tensor *out, bt_tensor *param, bt_tensor *param_grad)
{
    const bt_graph *g = e->graph;
    const bt_node *n = &g->nodes[st->first_node + k];
    memset(call, 0, sizeof *call);
    for (int i = 0; i < n->n_in; i++)
        make_tensor(e, &in[i], slot_value(st, mb, n->in[i]), &g->values[n->in[i]]);
    make_tensor(e, out, slot_value(st, mb, n->out), &g->values[n->out]);
    for (int j = 0; j < n->n_params; j++) {
        bt_param_store *ps = st->node_params[k][j];
        make_param_tensor(e, &param[j], ps->w, &g->params[n->params[j]]);
        make_param_tensor(e, &param_grad[j], ps->g, &g->params[n->params[j]]);
    }
    call->batch = e->mb_size;
    call->n_in = n->n_in;
    call->in = in;
    call->out = out;
    call->n_params = n->n_params;
    call->param = param;
    call->saved = st->slots + (size_t)(mb % st->n_slots) * st->slot_bytes + st->node_saved_offset[k];
    call->workspace = st->workspace;
    call->config = n->config;
    call->seed = bt_mix64(e->params.seed ^ bt_mix64((uint64_t)e->step * 1000003ULL +
                                                        (uint64_t)mb * 7919ULL +
                                                        (uint64_t)(st->first_node + k)));
}

static bt_status feed_inputs(bt_engine *e, bt_stage *st, int mb)
{
    for (int c = 0; c < e->plan->n_crossings; c++) {
        const bt_crossing *x = &e->plan->crossings[c];
        if (x->dst != st->index || x->src != -1) continue;
        const bt_value *v = &e->graph->values[x->value];
        size_t row = value_row_bytes(e, v);
        const unsigned char *src = e->feed_ptr[v->input_index];
        BT_TRY(st->be->from_host(st->dev, slot_value(st, mb, x->value),
                                 src + (size_t)mb * (size_t)e->mb_size * row,
                                 (size_t)e->mb_size * row));
    }
    return BT_OK;
}

static bt_status run_forward(bt_engine *e, bt_worker *w, bt_stage *st, int mb, int training)
{
    const bt_graph *g = e->graph;
    BT_TRY(feed_inputs(e, st, mb));
    for (int k = 0; k < st->n_nodes; k++) {
        const bt_node *n = &g->nodes[st->first_node + k];
        bt_tensor in[BT_MAX_INPUTS], out, param[BT_MAX_PARAMS], param_grad[BT_MAX_PARAMS];
        bt_op_call call;
        prepare_call(e, st, k, mb, &call, in, &out, param, param_grad);
        call.training = training;
        bt_status s = st->be->run_op(st->dev, n->op, 0, &call);
        if (s != BT_OK)
            return bt_error_context(s, "stage %d, forward of layer '%s' (micro-batch %d)",
                                    st->index, g->layers[n->layer].name, mb);
    }
    if (e->out_ptr && st->value_offset[e->out_value] >= 0 &&
        g->values[e->out_value].producer >= st->first_node &&
        g->values[e->out_value].producer < st->first_node + st->n_nodes) {
        size_t row = value_row_bytes(e, &g->values[e->out_value]);
        size_t bytes = (size_t)e->mb_size * row;
        BT_TRY(st->be->to_host(st->dev, (unsigned char *)e->out_ptr + (size_t)mb * bytes,
                               slot_value(st, mb, e->out_value), bytes));
    }
    if (training && st->index == e->stages - 1) {
        const void *loss = slot_value(st, mb, e->loss_value);
        double sum = 0;
        if (e->dtype == BT_F64) {
            BT_TRY(st->be->to_host(st->dev, st->loss_host, loss, (size_t)e->mb_size * 8));
            for (int64_t i = 0; i < e->mb_size; i++) sum += st->loss_host[i];
        } else {
            float *tmp = (float *)st->loss_host;
            BT_TRY(st->be->to_host(st->dev, tmp, loss, (size_t)e->mb_size * 4));
            for (int64_t i = 0; i < e->mb_size; i++) sum += tmp[i];
        }
        w->loss_sum += sum;
    }
    return BT_OK;
}

static int node_input_wants_grad(const bt_engine *e, const bt_stage *st, const bt_node *n, int i)
{
    if (n->no_grad_mask & (1u << i)) return 0;
    return st->grad_offset[n->in[i]] >= 0;
}

static bt_status run_backward(bt_engine *e, bt_stage *st, int mb)
{
    const bt_graph *g = e->graph;
    BT_TRY(st->be->zero(st->dev, st->grads + st->outgoing_grad_bytes,
                        st->grad_bytes - st->outgoing_grad_bytes));
    if (st->index == e->stages - 1) {
        /* d(mean loss)/d(per-sample loss) = 1 / batch */
        size_t n = (size_t)e->mb_size;
        double scale = 1.0 / (double)(e->mb_size * e->params.parallel.microbatches);
        if (e->dtype == BT_F64) {
            for (size_t i = 0; i < n; i++) st->loss_host[i] = scale;
        } else {
            float *tmp = (float *)st->loss_host;
            for (size_t i = 0; i < n; i++) tmp[i] = (float)scale;
        }
        BT_TRY(st->be->from_host(st->dev, st->grads + st->grad_offset[e->loss_value],
                                 st->loss_host, n * bt_dtype_size(e->dtype)));
    }
    for (int k = st->n_nodes - 1; k >= 0; k--) {
        const bt_node *n = &g->nodes[st->first_node + k];
        bt_tensor in[BT_MAX_INPUTS], out, param[BT_MAX_PARAMS], param_grad[BT_MAX_PARAMS];
        bt_tensor out_grad, in_grad[BT_MAX_INPUTS];
        bt_op_call call;
        prepare_call(e, st, k, mb, &call, in, &out, param, param_grad);
        call.training = 1;
        make_tensor(e, &out_grad, st->grads + st->grad_offset[n->out], &g->values[n->out]);
        for (int i = 0; i < n->n_in; i++) {
            in_grad[i] = in[i];
            in_grad[i].data = node_input_wants_grad(e, st, n, i)
                                  ? st->grads + st->grad_offset[n->in[i]]
                                  : NULL;
        }
        call.out_grad = &out_grad;
        call.in_grad = in_grad;
        call.param_grad = param_grad;
        bt_status s = st->be->run_op(st->dev, n->op, 1, &call);
        if (s != BT_OK)
            return bt_error_context(s, "stage %d, backward of layer '%s' (micro-batch %d)",
                                    st->index, g->layers[n->layer].name, mb);
    }
    return BT_OK;
}

static int dropped(const bt_engine *e, const bt_stage *st, int mb)
{
    return e->drop_send_stage == st->index && e->drop_send_mb == mb;
}

/* Posts micro-batch mb on each channel: the values' activations (from the slot) or, for the
 * gradient channels, their gradients. */
static bt_status post_channels(bt_engine *e, bt_stage *st, bt_channel *const *channels, int n, int mb)
{
    for (int c = 0; c < n; c++) {
        bt_channel *ch = channels[c];
        unsigned char *msg = ch->buf + (size_t)mb * ch->msg_bytes;
        for (int k = 0; k < ch->n_values; k++) {
            int value = ch->values[k];
            size_t bytes = (size_t)e->mb_size * value_row_bytes(e, &e->graph->values[value]);
            const void *src = ch->grad ? (const void *)(st->grads + st->grad_offset[value]) : slot_value(st, mb, value);
            BT_TRY(st->be->to_host(st->dev, msg, src, bytes));
            msg += bytes;
        }
        if (!dropped(e, st, mb)) bt_channel_post(ch, mb);
    }
    return BT_OK;
}

/* Describes what stage st is waiting for at its current instruction, and what the peer last did. */
static void describe_wait(bt_engine *e, bt_stage *st, bt_worker *w, bt_channel *ch, int mb, char *buf,
                          size_t size)
{
    char ins[32], peer_ins[32] = "nothing yet";
    const bt_schedule *sched = e->job_sched;
    bt_instr_format(st->index, &sched->list[st->index][w->cur_instr], ins, sizeof ins);
    int peer = ch->from;
    int done = __atomic_load_n(&e->worker[peer].last_done, __ATOMIC_RELAXED);
    if (done >= 0) bt_instr_format(peer, &sched->list[peer][done], peer_ins, sizeof peer_ins);
    snprintf(buf, size,
             "stage %d (%s) at instruction %d (%s) waits for %s of micro-batch %d from stage %d; "
             "stage %d last completed %s",
             st->index, st->device_name, w->cur_instr, ins, ch->grad ? "gradients" : "activations", mb,
             peer, peer, peer_ins);
}

/* A failed channel wait: the watchdog's timeout, or an abort raised by another stage. */
static bt_status wait_error(bt_engine *e, bt_stage *st, bt_worker *w, bt_channel *ch, int mb, bt_status s)
{
    char what[512];
    describe_wait(e, st, w, ch, mb, what, sizeof what);
    if (s == BT_ERR_TIMEOUT)
        return bt_error(BT_ERR_TIMEOUT, "watchdog: after %.1f s, %s", e->params.watchdog_s, what);
    return bt_error(BT_ERR_INTERNAL, "stopped while %s", what);
}

static bt_status recv_act(bt_engine *e, bt_worker *w, bt_stage *st, int mb)
{
    for (int c = 0; c < st->n_in_act; c++) {
        bt_channel *ch = st->in_act[c];
        bt_status s = bt_channel_wait(e, ch, mb, e->params.watchdog_s);
        if (s != BT_OK) return wait_error(e, st, w, ch, mb, s);
        double t0 = bt_now_ms();
        const unsigned char *msg = ch->buf + (size_t)mb * ch->msg_bytes;
        for (int k = 0; k < ch->n_values; k++) {
            const bt_value *v = &e->graph->values[ch->values[k]];
            size_t bytes = (size_t)e->mb_size * value_row_bytes(e, v);
            BT_TRY(st->be->from_host(st->dev, slot_value(st, mb, ch->values[k]), msg, bytes));
            msg += bytes;
        }
        w->transfer_ms += bt_now_ms() - t0;
    }
    return BT_OK;
}

static bt_status recv_grad(bt_engine *e, bt_worker *w, bt_stage *st, int mb)
{
    BT_TRY(st->be->zero(st->dev, st->grads, st->outgoing_grad_bytes));
    for (int c = 0; c < st->n_in_grad; c++) {
        bt_channel *ch = st->in_grad[c];
        bt_status s = bt_channel_wait(e, ch, mb, e->params.watchdog_s);
        if (s != BT_OK) return wait_error(e, st, w, ch, mb, s);
        double t0 = bt_now_ms();
        const unsigned char *msg = ch->buf + (size_t)mb * ch->msg_bytes;
        for (int k = 0; k < ch->n_values; k++) {
            const bt_value *v = &e->graph->values[ch->values[k]];
            size_t n = (size_t)e->mb_size * (size_t)bt_shape_numel(&v->shape);
            size_t bytes = n * bt_dtype_size(e->dtype);
            BT_TRY(st->be->from_host(st->dev, st->recv_scratch, msg, bytes));
            BT_TRY(st->be->accumulate(st->dev, e->dtype, st->grads + st->grad_offset[ch->values[k]],
                                      st->recv_scratch, n));
            msg += bytes;
        }
        w->transfer_ms += bt_now_ms() - t0;
    }
    return BT_OK;
}

/* Every stage arrives here at STEP; returns when all have, or on abort. */
static bt_status stage_barrier(bt_engine *e)
{
    bt_status st = BT_OK;
    pthread_mutex_lock(&e->mu);
    uint64_t gen = e->barrier_generation;
    if (++e->barrier_count == e->stages) {
        e->barrier_count = 0;
        e->barrier_generation++;
        pthread_cond_broadcast(&e->cv_barrier);
    } else {
        while (gen == e->barrier_generation && !e->abort) pthread_cond_wait(&e->cv_barrier, &e->mu);
        if (gen == e->barrier_generation) st = BT_ERR_INTERNAL;
    }
    pthread_mutex_unlock(&e->mu);
    if (st != BT_OK) return bt_error(st, "stopped at the optimizer step (another stage failed)");
    return BT_OK;
}

/* The optimizer step of one stage. Clipping needs the global norm, so only then do the stages
 * meet at a barrier to add their sums of squares; otherwise each stage updates at once and the
 * engine adds the sums for the report after the step. */
static bt_status run_step(bt_engine *e, bt_stage *st)
{
    double sumsq = 0;
    for (int i = 0; i < st->n_params; i++) {
        double s = 0;
        BT_TRY(st->be->sum_squares(st->dev, e->dtype, st->params[i].g, st->params[i].numel, &s));
        sumsq += s;
    }
    e->sumsq[st->index] = sumsq;
    double scale = 1.0;
    if (e->params.clip_norm > 0) {
        BT_TRY(stage_barrier(e));
        double total = 0;
        for (int s = 0; s < e->stages; s++) total += e->sumsq[s];
        scale = bt_optim_clip_scale(sqrt(total), e->params.clip_norm);
    }
    for (int i = 0; i < st->n_params; i++) {
        bt_param_store *p = &st->params[i];
        BT_TRY(st->be->optimizer_update(st->dev, &e->params.optimizer, e->dtype, p->w, p->g,
                                        p->state, p->numel, e->lr, e->step + 1, scale));
    }
    return BT_OK;
}

static bt_status run_instr(bt_engine *e, bt_worker *w, bt_stage *st, const bt_instr *ins)
{
    int training = e->job != BT_JOB_FORWARD;
    double t0;
    bt_status s = BT_OK;
    switch (ins->kind) {
    case BT_I_FWD:
        t0 = bt_now_ms();
        s = run_forward(e, w, st, ins->mb, training);
        w->busy_ms += bt_now_ms() - t0;
        if (training && ++w->live > w->peak_live) w->peak_live = w->live;
        if (!training) w->peak_live = 1;
        return s;
    case BT_I_BWD:
        t0 = bt_now_ms();
        s = run_backward(e, st, ins->mb);
        w->busy_ms += bt_now_ms() - t0;
        w->live--;
        return s;
    case BT_I_SEND_ACT:
        t0 = bt_now_ms();
        s = post_channels(e, st, st->out_act, st->n_out_act, ins->mb);
        w->transfer_ms += bt_now_ms() - t0;
        return s;
    case BT_I_RECV_ACT: return recv_act(e, w, st, ins->mb);
    case BT_I_SEND_GRAD:
        t0 = bt_now_ms();
        s = post_channels(e, st, st->out_grad, st->n_out_grad, ins->mb);
        w->transfer_ms += bt_now_ms() - t0;
        return s;
    case BT_I_RECV_GRAD: return recv_grad(e, w, st, ins->mb);
    case BT_I_STEP:
        if (e->job != BT_JOB_TRAIN) return BT_OK;
        t0 = bt_now_ms();
        s = run_step(e, st);
        w->busy_ms += bt_now_ms() - t0;
        return s;
    }
    return bt_error(BT_ERR_INTERNAL, "unknown instruction kind %d", (int)ins->kind);
}

/* Bytes a SEND or RECV instruction moves (0 for compute). */
static size_t instr_bytes(const bt_stage *st, const bt_instr *ins)
{
    size_t bytes = 0;
    bt_channel *const *ch = NULL;
    int n = 0;
    switch (ins->kind) {
    case BT_I_SEND_ACT: ch = st->out_act, n = st->n_out_act; break;
    case BT_I_RECV_ACT: ch = st->in_act, n = st->n_in_act; break;
    case BT_I_SEND_GRAD: ch = st->out_grad, n = st->n_out_grad; break;
    case BT_I_RECV_GRAD: ch = st->in_grad, n = st->n_in_grad; break;
    default: return 0;
    }
    for (int c = 0; c < n; c++) bytes += ch[c]->msg_bytes;
    return bytes;
}

static void fail_job(bt_engine *e, bt_worker *w, bt_status s)
{
    w->status = s;
    snprintf(w->error, sizeof w->error, "%s", bt_last_error());
    pthread_mutex_lock(&e->mu);
    e->abort = 1;
    pthread_cond_broadcast(&e->cv_barrier);
    pthread_mutex_unlock(&e->mu);
    bt_channels_wake_all(e);
}

static void run_job(bt_engine *e, bt_worker *w)
{
    bt_stage *st = &e->stage[w->stage];
    const bt_schedule *sched = e->job_sched;
    w->busy_ms = 0;
    w->transfer_ms = 0;
    w->loss_sum = 0;
    w->live = 0;
    w->peak_live = 0;
    w->status = BT_OK;
    w->error[0] = '\0';
    __atomic_store_n(&w->last_done, -1, __ATOMIC_RELAXED);
    if (e->job != BT_JOB_FORWARD) {
        for (int i = 0; i < st->n_params; i++) {
            bt_status s = st->be->zero(st->dev, st->params[i].g,
                                       st->params[i].numel * bt_dtype_size(e->dtype));
            if (s != BT_OK) {
                fail_job(e, w, s);
                return;
            }
        }
    }
    w->n_trace = 0;
    for (int i = 0; i < sched->len[st->index] && !e->abort; i++) {
        w->cur_instr = i;
        const bt_instr *ins = &sched->list[st->index][i];
        double t0 = e->tracing ? bt_now_ms() : 0;
        if (st->be->range_begin) {
            char name[32];
            bt_instr_format(st->index, ins, name, sizeof name);
            st->be->range_begin(st->dev, name);
        }
        bt_status s = run_instr(e, w, st, ins);
        if (st->be->range_end) st->be->range_end(st->dev);
        if (e->tracing && w->n_trace < w->trace_cap) {
            bt_trace_rec *r = &w->trace[w->n_trace++];
            r->instr = i;
            r->start_ms = t0 - e->step_t0_ms;
            r->end_ms = bt_now_ms() - e->step_t0_ms;
            r->bytes = instr_bytes(st, ins);
            r->live = w->live;
        }
        if (s != BT_OK) {
            fail_job(e, w, s);
            break;
        }
        __atomic_store_n(&w->last_done, i, __ATOMIC_RELAXED);
    }
    bt_status s = st->be->sync(st->dev);
    if (s != BT_OK && w->status == BT_OK) fail_job(e, w, s);
    w->cur_instr = -1;
}

void *bt_worker_main(void *arg)
{
    bt_worker *w = arg;
    bt_engine *e = w->engine;
    bt_stage *st = &e->stage[w->stage];
    uint64_t seen = 0;
    st->be->bind_thread(st->dev);
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (e->generation == seen) pthread_cond_wait(&e->cv_job, &e->mu);
        seen = e->generation;
        bt_job_kind job = e->job;
        pthread_mutex_unlock(&e->mu);
        if (job == BT_JOB_EXIT) break;
        run_job(e, w);
        pthread_mutex_lock(&e->mu);
        e->done_count++;
        pthread_cond_broadcast(&e->cv_done);
        pthread_mutex_unlock(&e->mu);
    }
    return NULL;
}
