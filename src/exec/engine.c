/* exec/engine.c: an engine's lifecycle and its jobs. Creation checks the parameters, plans the
 * stages, builds and validates the schedules, opens one device per stage, chooses the paths
 * between stages (topology.c), lays out, checks and allocates every stage's memory from the one
 * memory model (layout.c, which initialises the parameters through param_init.c), builds the
 * channels (topology.c) and starts one worker thread per stage. One rank of a job across
 * processes opens and allocates its own stage only (bt_stage_is_local): the other stages keep
 * their plan data (nodes, memory layout, channels without buffers) and idle workers. A step posts a job to the workers
 * and waits for all of them; the first failure's message is handed back to the caller's thread.
 * Accessors live in engine_query.c. */
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

void bt_engine_params_init(bt_engine_params *p)
{
    memset(p, 0, sizeof *p);
    bt_parallel_config_init(&p->parallel);
    bt_train_config tc;
    bt_train_config_init(&tc);
    p->optimizer = tc.optimizer;
    p->lr_schedule = tc.lr_schedule;
    p->batch = 32;
    p->dtype = BT_F32;
    p->training = 1;
    p->watchdog_s = 60;
}

/* The watchdog's default when watchdog_s is 0. */
#define BT_WATCHDOG_DEFAULT_S 60.0

/* ---- creation -------------------------------------------------------------------------------- */

static bt_status check_params(const bt_graph *g, const bt_engine_params *p)
{
    if (!g) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_create: graph is NULL");
    if (g->n_layers == 0) return bt_error(BT_ERR_MODEL, "the model has no layers");
    int m = p->parallel.microbatches;
    if (m < 1 || m > BT_MAX_MICROBATCHES)
        return bt_error(BT_ERR_INVALID_ARG, "microbatches must be 1 to %d, got %d", BT_MAX_MICROBATCHES, m);
    if (p->batch < 1) return bt_error(BT_ERR_INVALID_ARG, "batch must be >= 1, got %lld", (long long)p->batch);
    if (p->batch % m != 0)
        return bt_error(BT_ERR_INVALID_ARG,
                        "batch %lld does not split into %d equal micro-batches", (long long)p->batch, m);
    if (p->dtype != BT_F32 && p->dtype != BT_F64)
        return bt_error(BT_ERR_UNSUPPORTED, "the CPU backend computes in f32 or f64, not %s",
                        bt_dtype_name(p->dtype));
    if (p->precision != BT_F32 && p->precision != BT_BF16 && p->precision != BT_F16)
        return bt_error(BT_ERR_INVALID_ARG, "precision must be f32, bf16 or f16, not %s",
                        bt_dtype_name(p->precision));
    if (p->precision != BT_F32 && p->dtype != BT_F32)
        return bt_error(BT_ERR_INVALID_ARG,
                        "precision %s keeps f32 master weights: the engine's dtype must be f32, not %s",
                        bt_dtype_name(p->precision), bt_dtype_name(p->dtype));
    if (p->loss_scale < 0 || !isfinite(p->loss_scale))
        return bt_error(BT_ERR_INVALID_ARG, "loss_scale must be a positive number (0: the default), not %g",
                        p->loss_scale);
    if (p->transfer != BT_TRANSFER_AUTO && p->transfer != BT_TRANSFER_STAGED && p->transfer != BT_TRANSFER_HOST &&
        p->transfer != BT_TRANSFER_NCCL)
        return bt_error(BT_ERR_INVALID_ARG, "unknown transfer mode %d", (int)p->transfer);
    if (p->watchdog_s != 0 && !(p->watchdog_s > 0 && p->watchdog_s <= BT_WATCHDOG_MAX_S))
        return bt_error(BT_ERR_INVALID_ARG,
                        "watchdog_s must be seconds above 0 and at most %g (0: the default %g s), not %g",
                        BT_WATCHDOG_MAX_S, BT_WATCHDOG_DEFAULT_S, p->watchdog_s);
    if (p->training && !bt_graph_is_trainable(g))
        return bt_error(BT_ERR_MODEL,
                        "cannot train: the last layer must be a loss (one scalar per sample)");
    if (p->training && p->parallel.schedule == BT_SCHEDULE_STREAM)
        return bt_error(BT_ERR_INVALID_ARG, "the stream schedule is forward-only: use gpipe, 1f1b, interleaved-1f1b, zb-h1 or zbv to train");
    if (g->n_inputs > 64) return bt_error(BT_ERR_UNSUPPORTED, "more than 64 graph inputs");
    return BT_OK;
}

static bt_status open_stage(bt_engine *e, int s)
{
    bt_stage *st = &e->stage[s];
    char kind[16];
    int index;
    st->index = s;
    st->first_node = e->plan->first_node[s];
    st->n_nodes = e->plan->n_stage_nodes[s];
    snprintf(st->device_name, sizeof st->device_name, "%s", e->plan->device[s]);
    BT_TRY(bt_device_parse(st->device_name, kind, sizeof kind, &index));
    st->device_index = index;
    st->be = bt_backend_find(kind);
    if (!st->be) return bt_error_context(BT_ERR_UNSUPPORTED, "stage %d", s);
    int threads = e->params.threads;
    if (threads < 1) { /* auto: the machine's cores shared out among the devices, a preference
                          * (the stages of one device take turns: interleaved) */
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        int devices = e->train_sched ? e->train_sched->devices : e->stages;
        if (e->dist.on) devices = e->dist.layout.local_size * e->local_stages; /* the ranks on this machine */
        threads = -(cpus > devices ? (int)(cpus / devices) : 1);
    }
    /* across processes only this rank's stage is opened and allocated: the others are plan data
     * (their ranks hold their tensors; their workers idle) */
    if (bt_stage_is_local(e, s)) BT_TRY(st->be->open(index, threads, &st->dev));
    /* as many activation slots as the schedules this engine runs name (see sched.h) */
    int slots = bt_schedule_max_inflight(e->infer_sched, s);
    if (e->train_sched && bt_schedule_max_inflight(e->train_sched, s) > slots)
        slots = bt_schedule_max_inflight(e->train_sched, s);
    st->n_slots = slots < 1 ? 1 : slots;
    st->slot_of = malloc((size_t)e->params.parallel.microbatches * sizeof *st->slot_of);
    st->slot_owner = malloc((size_t)st->n_slots * sizeof *st->slot_owner);
    if (!st->slot_of || !st->slot_owner) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    return BT_OK;
}

static bt_status start_workers(bt_engine *e)
{
    pthread_condattr_t attr; /* the host's wait for its workers has a CLOCK_MONOTONIC deadline */
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv_job, NULL);
    pthread_cond_init(&e->cv_done, &attr);
    pthread_cond_init(&e->cv_barrier, NULL);
    pthread_condattr_destroy(&attr);
    e->mu_ready = 1;
    for (int s = 0; s < e->stages; s++) {
        bt_worker *w = &e->worker[s];
        w->engine = e;
        w->stage = s;
        w->chunk = e->train_sched ? bt_schedule_stage_chunk(e->train_sched, s) : 0;
        atomic_init(&w->cur_instr, -1);
        atomic_init(&w->waiting, 0);
        atomic_init(&w->last_done, -1);
        int cap = 0;
        if (e->train_sched) cap = e->train_sched->len[s];
        if (e->infer_sched->len[s] > cap) cap = e->infer_sched->len[s];
        w->trace = calloc((size_t)cap + 1, sizeof *w->trace);
        if (!w->trace) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
        w->trace_cap = cap;
        if (pthread_create(&w->thread, NULL, bt_worker_main, w) != 0)
            return bt_error(BT_ERR_NOMEM, "cannot start the worker thread of stage %d", s);
        w->started = 1;
    }
    return BT_OK;
}

/* Several stages per device: each device's turns in its order, turn t owned by the thread of the
 * stage that runs it (its slot: the stage's chunk). */
static bt_status build_turns(bt_engine *e)
{
    const bt_schedule *sched = e->train_sched;
    e->turn_devices = sched->devices;
    e->turns = calloc((size_t)sched->devices, sizeof *e->turns);
    if (!e->turns) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    for (int d = 0; d < sched->devices; d++) {
        int n = 0, *stage = NULL, *index = NULL;
        BT_TRY(bt_schedule_device_order(sched, d, &n, &stage, &index));
        for (int t = 0; t < n; t++) stage[t] = bt_schedule_stage_chunk(sched, stage[t]); /* owners */
        bt_status st = bt_turns_create(n, stage, sched->chunks, &e->abort, &e->turns[d]);
        free(stage);
        free(index);
        BT_TRY(st);
    }
    return BT_OK;
}

/* The stage that holds graph param p (by its node, so across processes for another rank's stage
 * too) and, where that stage is this rank's, its store (NULL otherwise). */
static bt_param_store *find_store(bt_engine *e, int p, bt_stage **where)
{
    int node = e->graph->params[p].node;
    *where = NULL;
    for (int s = 0; s < e->stages; s++)
        if (node >= e->stage[s].first_node && node < e->stage[s].first_node + e->stage[s].n_nodes)
            *where = &e->stage[s];
    for (int s = 0; s < e->stages; s++)
        for (int i = 0; i < e->stage[s].n_params; i++)
            if (e->stage[s].params[i].param == p) return &e->stage[s].params[i];
    return NULL;
}

/* The tied pairs of the graph (bt_graph_tie) with their host buffers; see bt_tie. */
static bt_status build_ties(bt_engine *e)
{
    const bt_graph *g = e->graph;
    int n = 0;
    for (int p = 0; p < g->n_params; p++) n += g->params[p].tied_to >= 0;
    if (n == 0) return BT_OK;
    e->ties = calloc((size_t)n, sizeof *e->ties);
    if (!e->ties) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    for (int p = 0; p < g->n_params; p++) {
        if (g->params[p].tied_to < 0) continue;
        bt_tie *t = &e->ties[e->n_ties++];
        t->store[0] = find_store(e, g->params[p].tied_to, &t->stage[0]);
        t->store[1] = find_store(e, p, &t->stage[1]);
        for (int side = 0; side < 2; side++) /* another rank's stage has no store here */
            if (!t->stage[side] || (!t->store[side] && bt_stage_is_local(e, t->stage[side]->index)))
                return bt_error(BT_ERR_INTERNAL, "engine: tied parameter '%s' has no store", g->params[p].name);
        t->bytes = (size_t)bt_shape_numel(&g->params[p].shape) * bt_dtype_size(e->dtype);
        for (int side = 0; side < 2; side++) {
            t->host[side] = malloc(t->bytes + 1);
            t->sum[side] = malloc(t->bytes + 1);
            if (!t->host[side] || !t->sum[side]) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
        }
    }
    return BT_OK;
}

static bt_status create_engine(const bt_graph *graph, const bt_engine_params *params, const bt_dist_layout *layout,
                               bt_engine **out)
{
    bt_status st = BT_OK;
    if (!params || !out) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_create: NULL argument");
    BT_TRY(check_params(graph, params));
    bt_engine *e = calloc(1, sizeof *e);
    if (!e) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    e->graph = graph;
    e->params = *params;
    if (e->params.watchdog_s == 0) e->params.watchdog_s = BT_WATCHDOG_DEFAULT_S;
    e->dtype = params->dtype;
    e->mb_size = params->batch / params->parallel.microbatches;
    e->loss_value = bt_graph_output_value(graph);
    e->has_loss = bt_graph_is_trainable(graph);
    e->drop_send_stage = -1;
    e->test_start_delay_stage = -1;
    e->drop_send_mb = -1;
    e->staging_chunk = bt_transfer_default_chunk();
    bt_loss_scale_init(&e->scaler, params->loss_scale, 0);
    e->loss_scale = 1.0;
    BT_TRY_GOTO(st, bt_plan_build(graph, &params->parallel, &e->plan), fail);
    e->stages = e->plan->stages;
    int m = params->parallel.microbatches;
    if (params->training) {
        int v = params->parallel.virtual_stages > 1 ? params->parallel.virtual_stages : 1;
        BT_TRY_GOTO(st, bt_schedule_build_virtual(params->parallel.schedule, e->stages, m, v, &e->train_sched),
                    fail);
        BT_TRY_GOTO(st, bt_schedule_validate(e->train_sched), fail);
        if (e->train_sched->devices < e->stages) /* several stages per device take turns */
            BT_TRY_GOTO(st, build_turns(e), fail);
    } else if (params->parallel.virtual_stages > 1) {
        st = bt_error(BT_ERR_INVALID_ARG, "virtual %d: interleaving is a training schedule; inference "
                      "streams each stage on its own", params->parallel.virtual_stages);
        goto fail;
    }
    BT_TRY_GOTO(st, bt_schedule_build(BT_SCHEDULE_STREAM, e->stages, m, &e->infer_sched), fail);
    BT_TRY_GOTO(st, bt_schedule_validate(e->infer_sched), fail);
    e->local_stages = e->stages;
    if (layout) { /* one rank of a job across processes: it runs one stage of one replica */
        BT_TRY_GOTO(st, bt_dist_setup(e, layout), fail);
        e->local_stages = 1;
        e->mb_size = params->batch / ((int64_t)layout->data * m);
    }

    e->stage = calloc((size_t)e->stages, sizeof *e->stage);
    e->worker = calloc((size_t)e->stages, sizeof *e->worker);
    e->sumsq = calloc((size_t)e->stages, sizeof *e->sumsq);
    if (!e->stage || !e->worker || !e->sumsq) {
        st = bt_error(BT_ERR_NOMEM, "engine: out of memory");
        goto fail;
    }
    for (int s = 0; s < e->stages; s++) BT_TRY_GOTO(st, open_stage(e, s), fail);
    BT_TRY_GOTO(st, bt_dist_check_gpu(e), fail); /* GPU stages across processes: what runs */
    BT_TRY_GOTO(st, bt_remote_check_mode(e), fail);
    BT_TRY_GOTO(st, bt_topology_paths(e), fail);
    BT_TRY_GOTO(st, bt_layout_memory_params(e), fail);
    for (int s = 0; s < e->stages; s++) BT_TRY_GOTO(st, bt_layout_stage(e, &e->stage[s]), fail);
    BT_TRY_GOTO(st, bt_layout_check_memory(e), fail);
    for (int s = 0; s < e->stages; s++)
        if (bt_stage_is_local(e, s)) BT_TRY_GOTO(st, bt_layout_alloc_stage(e, &e->stage[s]), fail);
    if (params->training) BT_TRY_GOTO(st, build_ties(e), fail);
    if (e->n_ties && e->dist.zero) { /* zero's chunks cut across tensors: no copy's whole sum on one rank */
        st = bt_error(BT_ERR_INVALID_ARG, "tied parameters (shared weights) do not run with parallel.zero: 1 across "
                      "processes yet (the replicas' gradient chunks do not follow tensors); use parallel.zero: 0");
        goto fail;
    }
    BT_TRY_GOTO(st, bt_topology_build_channels(e), fail);
    bt_layout_verify(e);
    if (e->dist.on) {
        BT_TRY_GOTO(st, bt_dist_setup_channels(e), fail);
        BT_TRY_GOTO(st, bt_dist_setup_buckets(e), fail);
        BT_TRY_GOTO(st, bt_dist_check_agreement(e), fail);
    }
    for (int s = 0; s < e->stages; s++) {
        bt_memory_stats *mem = &e->stage[s].mem;
        mem->current = mem->weights + mem->gradients + mem->optimizer + mem->activations + mem->workspace;
        mem->peak = mem->current;
    }
    BT_TRY_GOTO(st, start_workers(e), fail);
    *out = e;
    return BT_OK;
fail:
    bt_engine_destroy(e);
    return st;
}

bt_status bt_engine_create(const bt_graph *graph, const bt_engine_params *params, bt_engine **out)
{
    return create_engine(graph, params, NULL, out);
}

bt_status bt_engine_create_dist(const bt_graph *graph, const bt_engine_params *params,
                                const bt_dist_layout *layout, bt_engine **out)
{
    if (!layout) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_create_dist: layout is NULL");
    return create_engine(graph, params, layout, out);
}

static void release_abandoned(bt_engine *e);

void bt_engine_destroy(bt_engine *e)
{
    if (!e) return;
    if (atomic_load(&e->abandoned)) {
        release_abandoned(e);
        return;
    }
    if (e->mu_ready) {
        pthread_mutex_lock(&e->mu);
        e->job = BT_JOB_EXIT;
        e->generation++;
        pthread_cond_broadcast(&e->cv_job);
        pthread_mutex_unlock(&e->mu);
        for (int s = 0; s < e->stages; s++)
            if (e->worker[s].started) pthread_join(e->worker[s].thread, NULL);
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv_job);
        pthread_cond_destroy(&e->cv_done);
        pthread_cond_destroy(&e->cv_barrier);
    }
    bt_dist_nccl_dp_teardown(e); /* device buffers and the communicator, while the devices are open */
    for (int c = 0; c < e->n_channels; c++) {
        if (e->stage) bt_transfer_teardown(e, &e->channels[c]);
        bt_channel_destroy(&e->channels[c]);
    }
    free(e->channels);
    free(e->paths);
    free(e->stage_slots);
    free(e->host_path);
    for (int s = 0; e->stage && s < e->stages; s++) bt_layout_free_stage(&e->stage[s]);
    free(e->stage);
    for (int s = 0; e->worker && s < e->stages; s++) free(e->worker[s].trace);
    free(e->worker);
    free(e->sumsq);
    bt_dist_teardown(e);
    for (int k = 0; k < e->n_ties; k++)
        for (int side = 0; side < 2; side++) {
            free(e->ties[k].host[side]);
            free(e->ties[k].sum[side]);
        }
    free(e->ties);
    for (int d = 0; e->turns && d < e->turn_devices; d++) bt_turns_destroy(e->turns[d]);
    free(e->turns);
    bt_schedule_destroy(e->train_sched);
    bt_schedule_destroy(e->infer_sched);
    bt_plan_destroy(e->plan);
    free(e);
}

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

static void release_abandoned(bt_engine *e)
{
    int done[BT_MAX_STAGES];
    pthread_mutex_lock(&e->mu);
    e->job = BT_JOB_EXIT;
    e->generation++;
    pthread_cond_broadcast(&e->cv_job);
    for (int s = 0; s < e->stages; s++) done[s] = e->worker[s].job_done;
    pthread_mutex_unlock(&e->mu);
    for (int s = 0; s < e->stages; s++) {
        if (!e->worker[s].started) continue;
        if (done[s]) pthread_join(e->worker[s].thread, NULL);
        else pthread_detach(e->worker[s].thread);
    }
    /* everything else stays allocated: a stuck worker may still use it */
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
    if (e->dist.on) bt_dist_mirror_drop(e); /* rank 0's checkpoint copy of the other stages: stale now */
    clear_mailboxes(e);
    e->barrier_count = 0;
    for (int d = 0; d < e->turn_devices; d++) bt_turns_reset(e->turns[d]); /* workers are idle */
    e->grad_norm = 0;
    for (int s = 0; s < e->stages; s++) e->sumsq[s] = 0;

    double t0 = bt_now_ms();
    e->step_t0_ms = t0;
    pthread_mutex_lock(&e->mu);
    e->job = job;
    e->done_count = 0;
    for (int s = 0; s < e->stages; s++) e->worker[s].job_done = 0;
    e->generation++;
    pthread_cond_broadcast(&e->cv_job);
    int stuck = wait_for_workers(e);
    pthread_mutex_unlock(&e->mu);
    if (stuck) return bt_error(BT_ERR_TIMEOUT, "%s", e->unusable);
    double ms = bt_now_ms() - t0;

    bt_status failed = collect_failure(e);
    double loss_sum = job != BT_JOB_FORWARD || e->has_loss ? e->worker[e->stages - 1].loss_sum : 0;
    if (failed == BT_OK) failed = bt_dist_after_job(e, job, &loss_sum); /* the loss over replicas */
    if (failed == BT_OK) failed = bt_dist_gather_trace(e); /* when tracing: the other ranks' records */
    if (failed != BT_OK && e->dist.on)
        return bt_error_context(failed, "rank %d (stage %d, replica %d)", e->dist.layout.rank, e->dist.layout.stage,
                                e->dist.layout.replica);
    BT_TRY(failed);

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
        size_t act = (size_t)live * e->stage[s].slot_bytes + (live > 0 ? e->stage[s].need.recompute_bytes : 0);
        if (act > m->activation_peak) m->activation_peak = act;
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
    pthread_mutex_lock(&e->mu);
    e->job = job;
    e->done_count = 0;
    for (int s = 0; s < e->stages; s++) e->worker[s].job_done = 0;
    e->generation++;
    pthread_cond_broadcast(&e->cv_job);
    int stuck = wait_for_workers(e);
    pthread_mutex_unlock(&e->mu);
    if (stuck) return bt_error(BT_ERR_TIMEOUT, "%s", e->unusable);
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
