/* exec/engine.c: an engine's lifecycle. Creation checks the parameters, plans the
 * stages, builds and validates the schedules, opens one device per stage, chooses the paths
 * between stages (topology.c), lays out, checks and allocates every stage's memory from the one
 * memory model (layout.c, which initialises the parameters through param_init.c), builds the
 * channels (topology.c) and starts one worker thread per stage. One rank of a job across
 * processes opens and allocates its own stage only (bt_stage_is_local): the other stages keep
 * their plan data (nodes, memory layout, channels without buffers) and idle workers. A step posts a job to the workers
 * and waits for all of them (engine_job.c); accessors live in engine_query.c. */
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
#include "baton/profile.h"
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
    /* partition: profile cuts by the measured costs: they must be this engine's precision's */
    if (p->parallel.partition == BT_PARTITION_PROFILE && p->parallel.profile)
        BT_TRY(bt_profile_check_precision(p->parallel.profile, p->precision, "the parallel config's profile"));
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
    bt_transport_table_init(e->transport);
    e->ranks = &bt_rank_hooks_local; /* bt_dist_setup installs the distributed table */
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
    BT_TRY_GOTO(st, e->ranks->check_stages(e), fail); /* e.g. GPU stages across processes: what runs */
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
    BT_TRY_GOTO(st, e->ranks->created(e), fail);
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

/* A stuck worker (engine_job.c, "stuck workers") abandoned the engine: the workers that stopped
 * are joined, the stuck ones detached, and everything else stays allocated, since a stuck worker
 * may still use it. */
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
}

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
    e->ranks->release_devices(e); /* e.g. NCCL's buffers and communicator, while the devices are open */
    for (int c = 0; c < e->n_channels; c++) {
        if (e->stage) bt_transfer_teardown(e, &e->channels[c]);
        bt_channel_destroy(&e->channels[c]);
    }
    free(e->channels);
    free(e->paths);
    free(e->stage_slots);
    free(e->host_path);
    free(e->bf16_kept);
    for (int s = 0; e->stage && s < e->stages; s++) bt_layout_free_stage(&e->stage[s]);
    free(e->stage);
    for (int s = 0; e->worker && s < e->stages; s++) free(e->worker[s].trace);
    free(e->worker);
    free(e->sumsq);
    e->ranks->teardown(e);
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
