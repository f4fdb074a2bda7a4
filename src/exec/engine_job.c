/* exec/engine_job.c: running a job on an engine. A job (a training step, gradients only, a
 * forward pass, a decoding step, ...) binds the caller's feeds, posts the job to every stage's
 * worker (worker.c) and waits for all of them; the first failure's message is handed back to
 * the caller's thread. While it waits, the host watches the workers' progress: a worker stuck
 * inside an instruction makes the engine unusable ("stuck workers" below). The engine's
 * lifecycle is engine.c's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "core/error.h"
#include "exec/engine_dist.h"
#include "exec/exec_internal.h"
#include "optim/lr_schedule.h"

/* ---- stuck workers ---------------------------------------------------------------------------
 * A stage stuck inside an instruction (a kernel that never returns, a device that hangs in its
 * final wait) cannot be interrupted: threads are not cancelled. The host notices it (no
 * instruction completed anywhere for longer than the watchdog while that worker is not waiting
 * on another stage), stops the other workers, marks the engine unusable and returns
 * BT_ERR_TIMEOUT. From then on every call on the engine fails with that message, and destroying
 * it joins the workers that stopped, detaches the stuck ones and deliberately leaks everything
 * they may still touch (the engine, its devices and memory): should the stuck call ever return,
 * its worker sees the abandoned flag, leaves without reading the graph and exits. */

/* After the channels' own watchdogs, which fire first when a stage merely waits. */
#define BT_STUCK_MARGIN_S 0.25
/* How often the host looks at the workers' progress while it waits for them. */
#define BT_STUCK_POLL_S 0.1
/* How long the host gives the other workers to stop once a stuck one was found. */
#define BT_STUCK_STOP_S 0.5

static struct timespec monotonic_after(double s)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long ns = ts.tv_nsec + (long)(s * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    return ts;
}

/* Waits until every worker finished the job. Returns 0, or 1 when a worker is stuck: then the
 * engine is marked unusable, with a BT_ERR_TIMEOUT message naming the stuck stages. Called and
 * returns with e->mu held. */
static int wait_for_workers(bt_engine *e)
{
    double limit_ms = (e->params.watchdog_s + BT_STUCK_MARGIN_S) * 1000.0;
    unsigned seen = atomic_load(&e->progress);
    double since = bt_now_ms();
    while (e->done_count < e->stages) {
        struct timespec tick = monotonic_after(BT_STUCK_POLL_S);
        pthread_cond_timedwait(&e->cv_done, &e->mu, &tick);
        if (e->done_count == e->stages) break;
        unsigned now_seen = atomic_load(&e->progress);
        double now = bt_now_ms();
        if (now_seen != seen) {
            seen = now_seen;
            since = now;
            continue;
        }
        if (now - since <= limit_ms) continue;
        int stuck = 0;
        for (int s = 0; s < e->stages; s++)
            if (!e->worker[s].job_done && !atomic_load(&e->worker[s].waiting)) stuck = 1;
        if (stuck) break;
    }
    if (e->done_count == e->stages) return 0;
    /* stop the others: they may wait at a channel or the barrier */
    double stuck_s = (bt_now_ms() - since) / 1000.0;
    atomic_store(&e->abandoned, 1);
    atomic_store(&e->abort, 1);
    pthread_cond_broadcast(&e->cv_barrier);
    pthread_mutex_unlock(&e->mu);
    bt_channels_wake_all(e);
    bt_engine_wake_turns(e);
    pthread_mutex_lock(&e->mu);
    struct timespec until = monotonic_after(BT_STUCK_STOP_S);
    while (e->done_count < e->stages && pthread_cond_timedwait(&e->cv_done, &e->mu, &until) == 0) {
    }
    size_t used = (size_t)snprintf(e->unusable, sizeof e->unusable, "watchdog: after %.1f s without progress,",
                                   stuck_s);
    const char *sep = "";
    for (int s = 0; s < e->stages && used < sizeof e->unusable; s++) {
        const bt_worker *w = &e->worker[s];
        if (w->job_done) continue;
        char ins[32] = "";
        int i = atomic_load(&w->cur_instr);
        if (i >= 0 && e->job != BT_JOB_DECODE) bt_instr_format(s, &e->job_sched->list[s][i], ins, sizeof ins);
        if (e->job == BT_JOB_DECODE)
            used += (size_t)snprintf(e->unusable + used, sizeof e->unusable - used, "%s stage %d (%s) is stuck decoding",
                                     sep, s, e->stage[s].device_name);
        else if (i >= 0)
            used += (size_t)snprintf(e->unusable + used, sizeof e->unusable - used,
                                     "%s stage %d (%s) is stuck in instruction %d (%s)", sep, s,
                                     e->stage[s].device_name, i, ins);
        else
            used += (size_t)snprintf(e->unusable + used, sizeof e->unusable - used,
                                     "%s stage %d (%s) is stuck in its final wait for the device", sep, s,
                                     e->stage[s].device_name);
        sep = ";";
    }
    if (used < sizeof e->unusable)
        snprintf(e->unusable + used, sizeof e->unusable - used,
                 ": the engine is unusable (a stuck worker cannot be stopped); destroy it");
    return 1;
}

bt_status bt_engine_check_usable(const bt_engine *e)
{
    if (!e) return bt_error(BT_ERR_INVALID_ARG, "engine is NULL");
    if (atomic_load(&e->abandoned))
        return bt_error(BT_ERR_TIMEOUT, "the engine is unusable since a stage got stuck: %s", e->unusable);
    return BT_OK;
}

/* ---- steps ------------------------------------------------------------------------------------ */

static bt_status bind_feeds(bt_engine *e, const bt_feed *feeds, int n_feeds)
{
    const bt_graph *g = e->graph;
    for (int i = 0; i < g->n_inputs; i++) e->feed_ptr[i] = NULL;
    for (int f = 0; f < n_feeds; f++) {
        int v = feeds[f].name ? bt_graph_find_value(g, feeds[f].name) : -1;
        if (v < 0 || g->values[v].producer >= 0)
            return bt_error(BT_ERR_INVALID_ARG, "feed '%s' is not an input of the model",
                            feeds[f].name ? feeds[f].name : "(null)");
        const bt_value *val = &g->values[v];
        bt_dtype want = val->dtype == BT_I32 ? BT_I32 : e->dtype;
        if (feeds[f].dtype != want)
            return bt_error(BT_ERR_INVALID_ARG, "feed '%s' is %s but the engine expects %s",
                            feeds[f].name, bt_dtype_name(feeds[f].dtype), bt_dtype_name(want));
        if (!feeds[f].data) return bt_error(BT_ERR_INVALID_ARG, "feed '%s' has no data", feeds[f].name);
        e->feed_ptr[val->input_index] = feeds[f].data;
        if (e->dist.on && !e->local_feeds) /* each replica reads its own shard of the global batch */
            e->feed_ptr[val->input_index] = (const unsigned char *)feeds[f].data +
                                            (size_t)e->dist.layout.replica * (size_t)e->mb_size *
                                                (size_t)e->params.parallel.microbatches *
                                                (size_t)bt_shape_numel(&val->shape) * bt_dtype_size(want);
    }
    for (int c = 0; c < e->plan->n_crossings; c++) {
        const bt_crossing *x = &e->plan->crossings[c];
        if (x->src != -1 || !bt_stage_is_local(e, x->dst)) continue; /* only what this rank's stages read */
        const bt_value *val = &g->values[x->value];
        if (!e->feed_ptr[val->input_index])
            return bt_error(BT_ERR_INVALID_ARG, "input '%s' was not fed", val->name);
    }
    return BT_OK;
}

/* The first real failure is the cause; stages stopped by its abort are context. A watchdog
 * timeout lists every stage that was stuck, since the cause of a hang is the cycle, not one wait. */
static bt_status collect_failure(bt_engine *e)
{
    int first = -1;
    for (int s = 0; s < e->stages; s++) {
        bt_status ws = e->worker[s].status;
        if (ws == BT_OK) continue;
        if (first < 0 || (e->worker[first].status == BT_ERR_INTERNAL && ws != BT_ERR_INTERNAL)) first = s;
    }
    if (first < 0) return BT_OK;
    bt_status status = e->worker[first].status;
    if (status != BT_ERR_TIMEOUT) return bt_error(status, "%s", e->worker[first].error);
    char msg[2048];
    size_t used = (size_t)snprintf(msg, sizeof msg, "%s", e->worker[first].error);
    for (int s = 0; s < e->stages && used < sizeof msg; s++) {
        if (s == first || e->worker[s].status == BT_OK) continue;
        const char *other = e->worker[s].error;
        if (strncmp(other, "watchdog: ", 10) == 0) other = strchr(other, ',') ? strchr(other, ',') + 2 : other;
        else if (strncmp(other, "stopped while ", 14) == 0) other += 14;
        used += (size_t)snprintf(msg + used, sizeof msg - used, "; meanwhile %s", other);
    }
    return bt_error(status, "%s", msg);
}

/* Empties every mailbox before a job. After a successful job each is empty already; a failed job
 * can leave a message posted that no stage received, and its flag would let the next job's
 * receiver read the buffer before the sender rewrote it (a step retried after a failure then
 * trained on the failed step's gradients). The workers are idle here. */
static void clear_mailboxes(bt_engine *e)
{
    for (int c = 0; c < e->n_channels; c++)
        for (int mb = 0; mb < e->channels[c].microbatches; mb++)
            atomic_store_explicit(&e->channels[c].ready[mb], 0, memory_order_relaxed);
}

/* Posts job to every worker and waits until all have finished it; BT_ERR_TIMEOUT (the engine
 * now unusable) when one got stuck. */
static bt_status post_job(bt_engine *e, bt_job_kind job)
{
    pthread_mutex_lock(&e->mu);
    e->job = job;
    e->done_count = 0;
    for (int s = 0; s < e->stages; s++) e->worker[s].job_done = 0;
    e->generation++;
    pthread_cond_broadcast(&e->cv_job);
    int stuck = wait_for_workers(e);
    pthread_mutex_unlock(&e->mu);
    if (stuck) return bt_error(BT_ERR_TIMEOUT, "%s", e->unusable);
    return BT_OK;
}

static bt_status run_job(bt_engine *e, bt_job_kind job, const bt_feed *feeds, int n_feeds,
                         int out_value, void *out, void *losses, bt_step_result *result)
{
    BT_TRY(bt_engine_check_usable(e));
    e->loss_out = job == BT_JOB_FORWARD ? losses : NULL;
    if (job != BT_JOB_FORWARD && !e->train_sched)
        return bt_error(BT_ERR_INVALID_ARG, "this engine was created for inference (training = 0)");
    BT_TRY(bind_feeds(e, feeds, n_feeds));
    e->job_sched = job == BT_JOB_FORWARD ? e->infer_sched : e->train_sched;
    e->out_value = out_value;
    e->out_ptr = out;
    if (e->dist.on && out) { /* this replica's rows of the output; bt_dist_after_job shares them */
        const bt_value *ov = &e->graph->values[out_value];
        e->out_ptr = (unsigned char *)out + (size_t)e->dist.layout.replica * (size_t)e->mb_size *
                                                (size_t)e->params.parallel.microbatches *
                                                (size_t)bt_shape_numel(&ov->shape) *
                                                bt_dtype_size(ov->dtype == BT_I32 ? BT_I32 : e->dtype);
    }
    if (e->dist.on && e->loss_out) /* likewise this replica's rows of the per-sample losses */
        e->loss_out = (unsigned char *)e->loss_out + (size_t)e->dist.layout.replica * (size_t)e->mb_size *
                                                         (size_t)e->params.parallel.microbatches *
                                                         bt_dtype_size(e->dtype);
    e->lr = bt_lr_at(&e->params.lr_schedule, e->params.optimizer.lr, e->step, e->params.total_steps);
    e->loss_scale = e->params.precision == BT_F16 ? e->scaler.scale : 1.0;
    atomic_store(&e->abort, 0);
    e->ranks->job_begin(e); /* across processes: rank 0's checkpoint copy of the other stages is stale now */
    clear_mailboxes(e);
    e->barrier_count = 0;
    for (int d = 0; d < e->turn_devices; d++) bt_turns_reset(e->turns[d]); /* workers are idle */
    e->grad_norm = 0;
    for (int s = 0; s < e->stages; s++) e->sumsq[s] = 0;

    double t0 = bt_now_ms();
    e->step_t0_ms = t0;
    BT_TRY(post_job(e, job));
    double ms = bt_now_ms() - t0;

    bt_status failed = collect_failure(e);
    double loss_sum = job != BT_JOB_FORWARD || e->has_loss ? e->worker[e->stages - 1].loss_sum : 0;
    if (failed == BT_OK) failed = e->ranks->job_done(e, job, &loss_sum); /* the loss over replicas, traces */
    if (failed != BT_OK) return e->ranks->job_failed(e, failed);

    double busy = 0, sumsq = 0;
    int skipped = 0;
    for (int s = 0; s < e->stages; s++) sumsq += e->sumsq[s];
    if (job == BT_JOB_TRAIN) e->grad_norm = sqrt(sumsq) / e->loss_scale;
    if (job == BT_JOB_TRAIN && e->params.precision == BT_F16) {
        int finite = 1;
        for (int s = 0; s < e->stages; s++) finite &= !e->worker[s].skipped;
        skipped = !bt_loss_scale_update(&e->scaler, finite);
    }
    for (int s = 0; s < e->stages; s++) {
        busy += e->worker[s].busy_ms;
        bt_memory_stats *m = &e->stage[s].mem;
        int live = e->worker[s].peak_live;
        if (live > m->peak_microbatches) m->peak_microbatches = live;
        const bt_stage_memory *need = &e->stage[s].need; /* the shared regions: recomputation, bf16's work */
        size_t act = bt_memory_activations_live(need, live);
        if (act > m->activation_peak) m->activation_peak = act;
        size_t act_f32 = (size_t)live * need->slot_bytes_f32 + (live > 0 ? need->recompute_bytes : 0);
        if (act_f32 > m->activation_peak_f32) m->activation_peak_f32 = act_f32;
        m->bf16_kept = need->bf16_kept;
    }
    for (int s = 0; s < e->stages; s++) {
        bt_time_stats *t = &e->stage[s].time;
        t->steps++;
        t->wall_ms += ms;
        t->busy_ms += e->worker[s].busy_ms;
        t->transfer_ms += e->worker[s].transfer_ms;
        t->idle_ms = t->wall_ms - t->busy_ms - t->transfer_ms;
        if (t->idle_ms < 0) t->idle_ms = 0;
    }
    if (job == BT_JOB_TRAIN && !skipped) e->step++;
    if (result) {
        memset(result, 0, sizeof *result);
        result->samples = e->params.batch;
        result->step_ms = ms;
        result->samples_per_s = ms > 0 ? (double)e->params.batch * 1000.0 / ms : 0;
        /* idle share of the devices: several stages of one device (interleaved) share its time */
        int devices = e->job_sched->devices > 0 ? e->job_sched->devices : e->stages;
        if (e->dist.on) devices = e->local_stages; /* this rank's own */
        result->bubble = ms > 0 ? 1.0 - busy / ((double)devices * ms) : 0;
        if (result->bubble < 0) result->bubble = 0;
        result->lr = e->lr;
        result->grad_norm = e->grad_norm;
        result->skipped = skipped;
        result->loss_scale = e->loss_scale;
        if (job != BT_JOB_FORWARD || e->has_loss)
            result->loss = loss_sum / (double)e->params.batch;
    }
    return BT_OK;
}

bt_status bt_engine_run_plain_job(bt_engine *e, bt_job_kind job)
{
    BT_TRY(bt_engine_check_usable(e));
    atomic_store(&e->abort, 0);
    BT_TRY(post_job(e, job));
    return collect_failure(e);
}

bt_status bt_engine_compute_grads(bt_engine *e, const bt_feed *feeds, int n_feeds,
                                  bt_step_result *result)
{
    return run_job(e, BT_JOB_GRADS, feeds, n_feeds, -1, NULL, NULL, result);
}

bt_status bt_engine_train_step(bt_engine *e, const bt_feed *feeds, int n_feeds,
                               bt_step_result *result)
{
    return run_job(e, BT_JOB_TRAIN, feeds, n_feeds, -1, NULL, NULL, result);
}

bt_status bt_engine_forward(bt_engine *e, const bt_feed *feeds, int n_feeds, void *output,
                            bt_step_result *result)
{
    if (!e) return bt_error(BT_ERR_INVALID_ARG, "engine is NULL");
    return run_job(e, BT_JOB_FORWARD, feeds, n_feeds, e->loss_value, output, NULL, result);
}

bt_status bt_engine_forward_layer(bt_engine *e, const bt_feed *feeds, int n_feeds,
                                  const char *layer, void *output, bt_step_result *result)
{
    if (!e || !layer) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_forward_layer: NULL argument");
    return bt_engine_predict(e, feeds, n_feeds, layer, output, NULL, result);
}

bt_status bt_engine_predict(bt_engine *e, const bt_feed *feeds, int n_feeds, const char *layer, void *output,
                            void *losses, bt_step_result *result)
{
    if (!e) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_predict: engine is NULL");
    int value = e->loss_value;
    if (layer) {
        int l = bt_graph_find_layer(e->graph, layer);
        if (l < 0) return bt_error(BT_ERR_INVALID_ARG, "no layer named '%s'", layer);
        const bt_layer *ly = &e->graph->layers[l];
        value = e->graph->nodes[ly->first_node + ly->n_nodes - 1].out;
    }
    if (losses && !e->has_loss)
        return bt_error(BT_ERR_INVALID_ARG, "bt_engine_predict: the model's last layer is not a loss, so there "
                        "are no losses to return");
    return run_job(e, BT_JOB_FORWARD, feeds, n_feeds, value, output, losses, result);
}
