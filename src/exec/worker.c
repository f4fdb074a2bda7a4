/* exec/worker.c: the interpreter each stage's thread runs. A worker waits for a job (compute
 * gradients, train, or forward), walks its stage's instruction list from the schedule, and
 * executes each instruction through the backend table: FWD/BWD (and W, the deferred weight
 * gradients of a split backward) run the stage's nodes on the micro-batch's slot
 * (worker_nodes.c), SEND/RECV move
 * activations and gradients through channels, STEP applies the optimizer once every stage has
 * finished its backward and the global gradient norm is finite (a barrier: a step is all or
 * nothing; worker_step.c). Where a device runs several stages (interleaved), their workers take
 * turns in the schedule's order. On any failure it records the message, raises the engine's abort
 * flag and wakes everyone, so no stage is left waiting. The steps of a job across processes are
 * the engine's rank hooks (rank_hooks.h), called where their instructions run; in one process
 * they do nothing (rank_hooks.c), and engine_dist.c and dist_dp.c hold what they do across them. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/util.h"
#include "core/error.h"
#include "exec/exec_internal.h"
#include "graph/op_call.h"
#include "optim/optim.h"

static int dropped(const bt_engine *e, const bt_stage *st, int mb)
{
    return e->drop_send_stage == st->index && e->drop_send_mb == mb;
}

static int any_device_path(bt_channel *const *channels, int n)
{
    for (int c = 0; c < n; c++)
        if (bt_channel_has_events(channels[c])) return 1;
    return 0;
}

/* SEND: queues micro-batch mb's message on each channel, then tells the receivers. Device paths
 * copy on the copy stream once the compute stream has written the values; the instruction's
 * begin and end events go on that stream, so its slice is the copy itself. */
static bt_status send_instr(bt_engine *e, bt_stage *st, bt_channel *const *channels, int n, int mb,
                            int instr)
{
    const bt_backend *be = st->be;
    bt_stream_id stream = BT_STREAM_COMPUTE;
    for (int c = 0; c < n; c++) /* values kept as bf16: their working copies hold mb's */
        for (int k = 0; k < channels[c]->n_values && !channels[c]->grad; k++)
            BT_TRY(bt_store_load(e, st, mb, channels[c]->values[k]));
    if (any_device_path(channels, n)) {
        stream = BT_STREAM_COPY;
        BT_TRY(be->event_record(st->dev, st->ev_ready, BT_STREAM_COMPUTE));
        BT_TRY(be->stream_wait(st->dev, BT_STREAM_COPY, st->ev_ready));
    }
    BT_TRY(be->event_record(st->dev, st->ev_begin[instr], stream));
    for (int c = 0; c < n; c++) BT_TRY(bt_transfer_send(e, st, channels[c], mb));
    BT_TRY(be->event_record(st->dev, st->ev_end[instr], stream));
    if (!dropped(e, st, mb))
        for (int c = 0; c < n; c++)
            if (!bt_channel_is_remote(channels[c])) bt_channel_post(channels[c], mb); /* MPI: the message is */
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
    if (bt_channel_is_remote(ch)) { /* the peer is another process: what it last did is not known here */
        char who[96];
        e->ranks->describe_stage(e, peer, who, sizeof who);
        snprintf(buf, size, "stage %d (%s) at instruction %d (%s) waits for %s of micro-batch %d from %s (lost, "
                 "or stuck: see that rank's own message)",
                 st->index, st->device_name, w->cur_instr, ins, ch->grad ? "gradients" : "activations", mb, who);
        return;
    }
    int done = atomic_load_explicit(&e->worker[peer].last_done, memory_order_relaxed);
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
    if (s != BT_ERR_INTERNAL) return bt_error_context(s, "%s", what); /* the wait itself failed */
    return bt_error(BT_ERR_INTERNAL, "stopped while %s", what);
}

/* RECV: waits (on the host) until every channel's message was queued, then makes the device wait
 * for its arrival; gradients are added into the stage's own. The slice starts after the host
 * wait, so on a CPU it is the copying, on a GPU the time the compute stream stood waiting. */
static bt_status recv_instr(bt_engine *e, bt_worker *w, bt_stage *st, bt_channel *const *channels, int n,
                            int grad, int mb, int instr)
{
    for (int c = 0; c < n; c++) {
        atomic_store(&w->waiting, 1);
        bt_status s = bt_transfer_wait(e, channels[c], mb);
        atomic_store(&w->waiting, 0);
        if (s != BT_OK) return wait_error(e, st, w, channels[c], mb, s);
    }
    BT_TRY(st->be->event_record(st->dev, st->ev_begin[instr], BT_STREAM_COMPUTE));
    if (grad) BT_TRY(st->be->zero(st->dev, st->grads, st->outgoing_grad_bytes));
    for (int c = 0; c < n; c++) {
        BT_TRY(grad ? bt_transfer_recv_grad(e, st, channels[c], mb)
                    : bt_transfer_recv_act(st, channels[c], mb));
        for (int k = 0; k < channels[c]->n_values && !grad; k++) /* host path: copied into the slot */
            BT_TRY(bt_store_wrote(e, st, mb, channels[c]->values[k]));
    }
    return st->be->event_record(st->dev, st->ev_end[instr], BT_STREAM_COMPUTE);
}

static bt_status compute_instr(bt_engine *e, bt_worker *w, bt_stage *st, const bt_instr *ins, int instr)
{
    int training = e->job != BT_JOB_FORWARD;
    BT_TRY(st->be->event_record(st->dev, st->ev_begin[instr], BT_STREAM_COMPUTE));
    bt_status s = BT_OK;
    switch (ins->kind) {
    case BT_I_FWD:
        s = bt_worker_forward(e, st, ins->mb, training);
        if (training && ++w->live > w->peak_live) w->peak_live = w->live;
        if (!training) w->peak_live = 1;
        break;
    case BT_I_BWD:
        s = bt_worker_backward(e, st, ins->mb, e->ranks->last_backward(e, BT_I_BWD, instr));
        if (!e->job_sched->split_backward) w->live--; /* else the slot is held until W */
        break;
    case BT_I_WGT:
        s = bt_worker_weight_grads(e, st, ins->mb, e->ranks->last_backward(e, BT_I_WGT, instr));
        w->live--;
        break;
    case BT_I_STEP:
        s = e->ranks->grads_reduce(e, w, st); /* data parallel: the replicas' gradients, summed */
        if (s == BT_OK && e->job == BT_JOB_TRAIN) s = bt_worker_run_step(e, w, st);
        else if (s == BT_OK) s = e->ranks->grads_step(e, w, st); /* gradients only */
        break;
    default:
        s = bt_error(BT_ERR_INTERNAL, "not a compute instruction: kind %d", (int)ins->kind);
    }
    BT_TRY(s);
    return st->be->event_record(st->dev, st->ev_end[instr], BT_STREAM_COMPUTE);
}

static bt_status run_instr(bt_engine *e, bt_worker *w, bt_stage *st, const bt_instr *ins, int instr)
{
    if (ins->slot >= 0) st->slot_of[ins->mb] = ins->slot; /* where mb's activations live */
    switch (ins->kind) {
    case BT_I_SEND_ACT: return send_instr(e, st, st->out_act, st->n_out_act, ins->mb, instr);
    case BT_I_SEND_GRAD: return send_instr(e, st, st->out_grad, st->n_out_grad, ins->mb, instr);
    case BT_I_RECV_ACT: return recv_instr(e, w, st, st->in_act, st->n_in_act, 0, ins->mb, instr);
    case BT_I_RECV_GRAD: return recv_instr(e, w, st, st->in_grad, st->n_in_grad, 1, ins->mb, instr);
    default: return compute_instr(e, w, st, ins, instr);
    }
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
    atomic_store(&e->abort, 1);
    pthread_cond_broadcast(&e->cv_barrier);
    pthread_mutex_unlock(&e->mu);
    bt_channels_wake_all(e);
    bt_engine_wake_turns(e);
}

/* Once the device is idle: the instructions' times from their events, where the stage's time went,
 * the losses, and the channels' copy statistics. */
static bt_status finish_job(bt_engine *e, bt_worker *w, bt_stage *st)
{
    const bt_schedule *sched = e->job_sched;
    double offset = w->step0_host_ms - e->step_t0_ms;
    for (int i = 0; i < w->n_trace; i++) {
        bt_trace_rec *r = &w->trace[i];
        const bt_instr *ins = &sched->list[st->index][r->instr];
        double a = 0, b = 0;
        BT_TRY(st->be->event_elapsed(st->dev, st->ev_step0, st->ev_begin[r->instr], &a));
        BT_TRY(st->be->event_elapsed(st->dev, st->ev_step0, st->ev_end[r->instr], &b));
        if (b < a) b = a;
        r->start_ms = offset + a;
        r->end_ms = offset + b;
        double d = b - a;
        switch (ins->kind) {
        case BT_I_FWD:
        case BT_I_BWD:
        case BT_I_WGT:
        case BT_I_STEP: w->busy_ms += d; break;
        case BT_I_SEND_ACT:
        case BT_I_SEND_GRAD:
            if (!st->be->copies_overlap) w->transfer_ms += d; /* else beside compute, not instead */
            break;
        default: w->transfer_ms += d; break;
        }
    }
    if ((e->job != BT_JOB_FORWARD || e->has_loss) && st->index == e->stages - 1) {
        size_t n = (size_t)e->mb_size * (size_t)e->params.parallel.microbatches;
        if (e->job == BT_JOB_FORWARD && e->loss_out) memcpy(e->loss_out, st->loss_host, n * bt_dtype_size(e->dtype));
        w->loss_sum = bt_worker_loss_sum(e, st);
    }
    for (int c = 0; c < st->n_out_act; c++) BT_TRY(bt_transfer_account(e, st->out_act[c]));
    for (int c = 0; c < st->n_out_grad; c++) BT_TRY(bt_transfer_account(e, st->out_grad[c]));
    return BT_OK;
}

double bt_worker_loss_sum(const bt_engine *e, const bt_stage *st)
{
    if (st->index != e->stages - 1) return 0;
    size_t n = (size_t)e->mb_size * (size_t)e->params.parallel.microbatches;
    double sum = 0;
    if (e->dtype == BT_F64)
        for (size_t i = 0; i < n; i++) sum += ((const double *)st->loss_host)[i];
    else
        for (size_t i = 0; i < n; i++) sum += ((const float *)st->loss_host)[i];
    return sum;
}

/* Sets the loss gradient's seed: 1 / (samples per step), times the loss scale. Written again only
 * when the scale changed (f16), so a step normally queues nothing for it. */
static bt_status set_seed(bt_engine *e, bt_stage *st)
{
    size_t n = (size_t)e->mb_size;
    int replicas = e->dist.on ? e->dist.layout.data : 1; /* 1 / (the global batch) */
    double v = e->loss_scale / (double)(e->mb_size * e->params.parallel.microbatches * replicas);
    if (v == st->seed_value) return BT_OK;
    st->seed_value = v;
    for (size_t i = 0; i < n; i++) {
        if (e->dtype == BT_F64) ((double *)st->seed_host)[i] = v;
        else ((float *)st->seed_host)[i] = (float)v;
    }
    return st->be->copy_async(st->dev, BT_STREAM_COMPUTE, BT_COPY_H2D, st->seed_dev, st->seed_host,
                              n * bt_dtype_size(e->dtype));
}

/* A failed job can leave copies uncounted; the next one starts clean (the devices were synced). */
static void reset_channels(bt_channel *const *channels, int n)
{
    for (int c = 0; c < n; c++) {
        if (!bt_channel_has_events(channels[c])) continue;
        memset(channels[c]->pending, 0, (size_t)channels[c]->microbatches * sizeof *channels[c]->pending);
        channels[c]->last_sent = -1;
    }
}

/* The step's start event, and the host time it stands for: every record of the job is placed on
 * the host's timeline from it (finish_job). Where the backend's events keep the host clock, that
 * is the event's own time; two separate clock reads would shift the whole stage by whatever
 * preempted the thread between them, and a receive could then seem to end before its send. */
static bt_status record_step0(bt_engine *e, bt_worker *w, bt_stage *st)
{
    if (e->test_start_delay_stage == st->index) {
        double ms = e->test_start_delay_ms;
        struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000.0) * 1e6)};
        nanosleep(&ts, NULL);
    }
    BT_TRY(st->be->event_record(st->dev, st->ev_step0, BT_STREAM_COMPUTE));
    w->step0_host_ms = st->be->event_host_ms ? st->be->event_host_ms(st->dev, st->ev_step0) : bt_now_ms();
    return BT_OK;
}

static bt_status start_job(bt_engine *e, bt_worker *w, bt_stage *st)
{
    reset_channels(st->out_act, st->n_out_act);
    reset_channels(st->out_grad, st->n_out_grad);
    for (int k = 0; k < st->n_slots; k++) st->slot_owner[k] = -1;
    bt_store_forget(st);
    BT_TRY(e->ranks->job_start(e, st, e->job != BT_JOB_FORWARD));
    BT_TRY(record_step0(e, w, st));
    if (e->job == BT_JOB_FORWARD) return BT_OK;
    if (st->flat_g) /* every gradient, back to back (layout.c): one pass */
        BT_TRY(st->be->zero(st->dev, st->flat_g, st->flat_numel * bt_dtype_size(e->dtype)));
    else
        for (int i = 0; i < st->n_params; i++)
            BT_TRY(st->be->zero(st->dev, st->params[i].g, st->params[i].numel * bt_dtype_size(e->dtype)));
    if (st->index == e->stages - 1) BT_TRY(set_seed(e, st));
    return BT_OK;
}

/* Several stages on one device: waits until it is this instruction's turn on the device (the
 * schedule's order, which the validator proved cannot hang), or the job aborts. The device's turns
 * (core/turns.h) wake only the thread whose turn comes next; a thread running consecutive turns
 * goes on without a lock. A STEP hands the turn on before it runs, since its barrier waits for the
 * device's other stages. */
static bt_status wait_turn(bt_engine *e, bt_worker *w, const bt_instr *ins)
{
    bt_turns *turns = e->turns[e->train_sched->device[w->stage]];
    atomic_store(&w->waiting, 1);
    int ok = bt_turns_wait(turns, w->chunk, ins->turn);
    atomic_store(&w->waiting, 0);
    if (!ok)
        return bt_error(BT_ERR_INTERNAL, "stage %d stopped waiting for its device's turn %d (another stage failed)",
                        w->stage, ins->turn);
    if (ins->kind == BT_I_STEP) bt_turns_pass(turns, ins->turn);
    return BT_OK;
}

static void pass_turn(bt_engine *e, bt_worker *w, const bt_instr *ins)
{
    if (ins->kind == BT_I_STEP) return; /* handed on before it ran */
    bt_turns_pass(e->turns[e->train_sched->device[w->stage]], ins->turn);
}

void bt_engine_wake_turns(bt_engine *e)
{
    for (int d = 0; d < e->turn_devices; d++) bt_turns_wake(e->turns[d]);
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
    w->skipped = 0;
    w->status = BT_OK;
    w->error[0] = '\0';
    w->n_trace = 0;
    atomic_store_explicit(&w->last_done, -1, memory_order_relaxed);
    bt_status s = start_job(e, w, st);
    if (s != BT_OK) fail_job(e, w, s);
    int turns = e->turn_devices > 0 && sched == e->train_sched;
    for (int i = 0; i < sched->len[st->index] && !atomic_load(&e->abort); i++) {
        w->cur_instr = i;
        const bt_instr *ins = &sched->list[st->index][i];
        if (turns && (s = wait_turn(e, w, ins)) != BT_OK) {
            fail_job(e, w, s);
            break;
        }
        if (st->be->range_begin) {
            char name[32];
            bt_instr_format(st->index, ins, name, sizeof name);
            st->be->range_begin(st->dev, name);
        }
        s = run_instr(e, w, st, ins, i);
        if (st->be->range_end) st->be->range_end(st->dev);
        if (s != BT_OK) {
            fail_job(e, w, s);
            break;
        }
        if (turns) pass_turn(e, w, ins);
        bt_trace_rec *r = &w->trace[w->n_trace++];
        r->instr = i;
        r->bytes = instr_bytes(st, ins);
        r->live = w->live;
        atomic_store_explicit(&w->last_done, i, memory_order_relaxed);
        atomic_fetch_add_explicit(&e->progress, 1, memory_order_relaxed);
    }
    w->cur_instr = -1; /* the host's watchdog: "stuck in its final device wait" */
    atomic_store(&w->waiting, 1);
    s = e->ranks->job_end(e, st, w->status == BT_OK && !atomic_load(&e->abort));
    atomic_store(&w->waiting, 0);
    if (s != BT_OK && w->status == BT_OK) fail_job(e, w, s);
    s = st->be->sync(st->dev);
    if (s != BT_OK && w->status == BT_OK) fail_job(e, w, s);
    if (w->status == BT_OK && !atomic_load(&e->abort)) {
        s = finish_job(e, w, st);
        if (s != BT_OK) fail_job(e, w, s);
    }
}

void *bt_worker_main(void *arg)
{
    bt_worker *w = arg;
    bt_engine *e = w->engine;
    bt_stage *st = &e->stage[w->stage];
    uint64_t seen = 0;
    /* a thread the device could not be bound to fails every job it is given, with the reason */
    char bind_error[sizeof w->error] = "";
    bt_status bound = bt_stage_is_local(e, w->stage) ? st->be->bind_thread(st->dev) : BT_OK;
    if (bound != BT_OK)
        snprintf(bind_error, sizeof bind_error, "stage %d (%s): cannot bind the worker thread: %s", st->index,
                 st->device_name, bt_last_error());
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (e->generation == seen) pthread_cond_wait(&e->cv_job, &e->mu);
        seen = e->generation;
        bt_job_kind job = e->job;
        pthread_mutex_unlock(&e->mu);
        if (job == BT_JOB_EXIT) break;
        if (!bt_stage_is_local(e, w->stage)) { /* another rank runs it */
        } else if (bound != BT_OK) fail_job(e, w, bt_error(bound, "%s", bind_error));
        else if (job == BT_JOB_DECODE) bt_decode_worker(e, w);
        else run_job(e, w);
        pthread_mutex_lock(&e->mu);
        w->job_done = 1;
        e->done_count++;
        pthread_cond_broadcast(&e->cv_done);
        pthread_mutex_unlock(&e->mu);
    }
    return NULL;
}
