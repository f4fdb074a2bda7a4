/* exec/engine.c: building an engine and the public engine API. Creation plans the stages,
 * builds and validates the schedules, opens one device per stage, lays out and allocates every
 * buffer (see exec_internal.h), initialises parameters deterministically from the seed and each
 * parameter's name (so placement never changes the initial weights), builds the channels and
 * starts one worker thread per stage. A step posts a job to the workers and waits for all of
 * them; the first failure's message is handed back to the caller's thread. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "core/error.h"
#include "exec/exec_internal.h"
#include "train/lr_schedule.h"
#include "train/optim.h"

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

/* ---- deterministic initialisation ------------------------------------------------------------- */

static double next_unit(uint64_t *state)
{
    *state = bt_mix64(*state);
    return (double)(*state >> 11) * 0x1.0p-53;
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static double init_value(const bt_param *p, uint64_t *rng)
{
    switch (p->init) {
    case BT_INIT_ZEROS: return 0;
    case BT_INIT_ONES: return 1;
    case BT_INIT_UNIFORM_FAN_IN: {
        double bound = p->fan_in > 0 ? 1.0 / sqrt((double)p->fan_in) : 0;
        return (2 * next_unit(rng) - 1) * bound;
    }
    case BT_INIT_NORMAL: {
        double u1 = next_unit(rng), u2 = next_unit(rng);
        if (u1 < 1e-300) u1 = 1e-300;
        double std = p->init_arg > 0 ? p->init_arg : 1.0;
        return std * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
    }
    }
    return 0;
}

static bt_status init_param(bt_engine *e, bt_stage *st, bt_param_store *ps)
{
    const bt_param *p = &e->graph->params[ps->param];
    size_t bytes = ps->numel * bt_dtype_size(e->dtype);
    void *host = malloc(bytes ? bytes : 1);
    if (!host) return bt_error(BT_ERR_NOMEM, "initialising '%s': out of memory", p->name);
    uint64_t rng = bt_mix64(e->params.seed) ^ name_hash(p->name);
    for (size_t i = 0; i < ps->numel; i++) {
        double v = init_value(p, &rng);
        if (e->dtype == BT_F64) ((double *)host)[i] = v;
        else ((float *)host)[i] = (float)v;
    }
    bt_status s = st->be->from_host(st->dev, ps->w, host, bytes);
    free(host);
    return s;
}

/* ---- layout ----------------------------------------------------------------------------------- */

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static size_t value_bytes(const bt_engine *e, int value)
{
    const bt_value *v = &e->graph->values[value];
    bt_dtype dt = v->dtype == BT_I32 ? BT_I32 : e->dtype;
    return (size_t)e->mb_size * (size_t)bt_shape_numel(&v->shape) * bt_dtype_size(dt);
}

static int is_outgoing(const bt_engine *e, int stage, int value)
{
    for (int c = 0; c < e->plan->n_crossings; c++)
        if (e->plan->crossings[c].src == stage && e->plan->crossings[c].value == value) return 1;
    return 0;
}

static bt_transfer_path stage_path(const bt_engine *e, int from, int to)
{
    return e->paths[from * e->stages + to];
}

static bt_status stage_alloc(bt_stage *st, size_t bytes, void **out, size_t *counter)
{
    BT_TRY(st->be->alloc(st->dev, bytes ? bytes : 64, out));
    if (counter) *counter += bytes;
    return BT_OK;
}

static bt_status layout_stage(bt_engine *e, bt_stage *st)
{
    const bt_graph *g = e->graph;
    int nv = g->n_values;
    st->value_offset = malloc((size_t)nv * sizeof *st->value_offset);
    st->grad_offset = malloc((size_t)nv * sizeof *st->grad_offset);
    st->node_saved_offset = calloc((size_t)st->n_nodes + 1, sizeof *st->node_saved_offset);
    if (!st->value_offset || !st->grad_offset || !st->node_saved_offset)
        return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    for (int v = 0; v < nv; v++) st->value_offset[v] = st->grad_offset[v] = -1;

    size_t off = 0, ws = 0;
    for (int c = 0; c < e->plan->n_crossings; c++) {
        const bt_crossing *x = &e->plan->crossings[c];
        if (x->dst != st->index) continue;
        st->value_offset[x->value] = (int)off;
        /* read in place from the channel's buffer (see bt_slot_value) */
        if (x->src >= 0 && stage_path(e, x->src, st->index) != BT_PATH_HOST) continue;
        off = align64(off + value_bytes(e, x->value));
    }
    for (int k = 0; k < st->n_nodes; k++) {
        const bt_node *n = &g->nodes[st->first_node + k];
        st->value_offset[n->out] = (int)off;
        off = align64(off + value_bytes(e, n->out));
        size_t w = n->ws_per_sample * (size_t)e->mb_size + n->ws_fixed;
        if (w > ws) ws = w;
    }
    for (int k = 0; k < st->n_nodes; k++) {
        const bt_node *n = &g->nodes[st->first_node + k];
        st->node_saved_offset[k] = off;
        off = align64(off + n->saved_per_sample * (size_t)e->mb_size);
    }
    st->slot_bytes = off;
    st->ws_bytes = ws;

    /* gradients: outgoing values first (received from later stages), then the rest */
    size_t goff = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int v = 0; v < nv; v++) {
            const bt_value *val = &g->values[v];
            if (st->value_offset[v] < 0 || val->producer < 0 || val->dtype == BT_I32) continue;
            int out = is_outgoing(e, st->index, v);
            if (out != (pass == 0)) continue;
            st->grad_offset[v] = (int)goff;
            goff = align64(goff + value_bytes(e, v));
        }
        if (pass == 0) st->outgoing_grad_bytes = goff;
    }
    st->grad_bytes = goff;
    return BT_OK;
}

/* The events a worker records: a begin and an end per instruction of the longest schedule, the
 * job's start, and "values written" for the copy stream of a SEND to wait for. */
static bt_status alloc_events(bt_engine *e, bt_stage *st)
{
    int cap = e->infer_sched->len[st->index];
    if (e->train_sched && e->train_sched->len[st->index] > cap) cap = e->train_sched->len[st->index];
    st->ev_begin = calloc((size_t)cap + 1, sizeof *st->ev_begin);
    st->ev_end = calloc((size_t)cap + 1, sizeof *st->ev_end);
    if (!st->ev_begin || !st->ev_end) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    st->n_events = cap;
    for (int i = 0; i < cap; i++) {
        BT_TRY(st->be->event_create(st->dev, &st->ev_begin[i]));
        BT_TRY(st->be->event_create(st->dev, &st->ev_end[i]));
    }
    BT_TRY(st->be->event_create(st->dev, &st->ev_step0));
    return st->be->event_create(st->dev, &st->ev_ready);
}

static bt_status alloc_stage(bt_engine *e, bt_stage *st)
{
    const bt_graph *g = e->graph;
    int training = e->params.training;
    bt_memory_stats *m = &st->mem;
    BT_TRY(stage_alloc(st, st->slot_bytes * (size_t)st->n_slots, (void **)&st->slots, &m->activations));
    if (training) BT_TRY(stage_alloc(st, st->grad_bytes, (void **)&st->grads, &m->workspace));
    BT_TRY(stage_alloc(st, st->ws_bytes, &st->workspace, &m->workspace));
    size_t dsz = bt_dtype_size(e->dtype), mb_bytes = (size_t)e->mb_size * dsz;
    BT_TRY(st->be->host_alloc(st->dev, mb_bytes * (size_t)e->params.parallel.microbatches, &st->loss_host));
    BT_TRY(st->be->host_alloc(st->dev, mb_bytes, &st->seed_host));
    BT_TRY(stage_alloc(st, mb_bytes, &st->seed_dev, &m->workspace));
    BT_TRY(alloc_events(e, st));

    for (int p = 0; p < g->n_params; p++) {
        int node = g->params[p].node;
        if (node >= st->first_node && node < st->first_node + st->n_nodes) st->n_params++;
    }
    st->params = calloc((size_t)st->n_params + 1, sizeof *st->params);
    st->node_params = calloc((size_t)st->n_nodes + 1, sizeof *st->node_params);
    if (!st->params || !st->node_params) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    st->sq_ptr = calloc((size_t)st->n_params + 1, sizeof *st->sq_ptr);
    st->sq_n = calloc((size_t)st->n_params + 1, sizeof *st->sq_n);
    if (!st->sq_ptr || !st->sq_n) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    int n_state = training ? bt_optim_state_count(&e->params.optimizer) : 0;
    int k = 0;
    for (int p = 0; p < g->n_params; p++) {
        int node = g->params[p].node;
        if (node < st->first_node || node >= st->first_node + st->n_nodes) continue;
        bt_param_store *ps = &st->params[k++];
        ps->param = p;
        const bt_node *owner = &g->nodes[node];
        for (int j = 0; j < owner->n_params; j++)
            if (owner->params[j] == p) st->node_params[node - st->first_node][j] = ps;
        ps->numel = (size_t)bt_shape_numel(&g->params[p].shape);
        BT_TRY(stage_alloc(st, ps->numel * dsz, &ps->w, &m->weights));
        BT_TRY(init_param(e, st, ps));
        if (e->params.precision != BT_F32) {
            BT_TRY(stage_alloc(st, ps->numel * dsz, &ps->w_lp, &m->weights));
            BT_TRY(bt_worker_refresh_lowp(e, st, ps));
        }
        if (training) {
            BT_TRY(stage_alloc(st, ps->numel * dsz, &ps->g, &m->gradients));
            st->sq_ptr[k - 1] = ps->g;
            st->sq_n[k - 1] = ps->numel;
            BT_TRY(st->be->zero(st->dev, ps->g, ps->numel * dsz));
            for (int j = 0; j < n_state; j++) {
                BT_TRY(stage_alloc(st, ps->numel * dsz, &ps->state[j], &m->optimizer));
                BT_TRY(st->be->zero(st->dev, ps->state[j], ps->numel * dsz));
            }
        }
    }
    return BT_OK;
}

/* One channel per direction between every pair of stages that exchange values, and always
 * between neighbours (possibly empty), so the chain order the validator assumes holds. */
static bt_status build_channels(bt_engine *e)
{
    int p = e->stages, m = e->params.parallel.microbatches;
    int cap = 2 * p * p + 2;
    e->channels = calloc((size_t)cap, sizeof *e->channels);
    if (!e->channels) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    for (int s = 0; s < p; s++) {
        bt_stage *st = &e->stage[s];
        st->recv_from = calloc((size_t)e->graph->n_values + 1, sizeof *st->recv_from);
        st->recv_off = calloc((size_t)e->graph->n_values + 1, sizeof *st->recv_off);
        if (!st->recv_from || !st->recv_off) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    }
    for (int a = 0; a < p; a++) {
        for (int b = a + 1; b < p; b++) {
            int n_values = 0, values[BT_MAX_CHANNEL_VALUES];
            for (int c = 0; c < e->plan->n_crossings; c++) {
                const bt_crossing *x = &e->plan->crossings[c];
                if (x->src != a || x->dst != b) continue;
                if (n_values == BT_MAX_CHANNEL_VALUES)
                    return bt_error(BT_ERR_UNSUPPORTED, "more than %d values cross from stage %d to %d",
                                    BT_MAX_CHANNEL_VALUES, a, b);
                values[n_values++] = x->value;
            }
            if (n_values == 0 && b != a + 1) continue;
            for (int dir = 0; dir < (e->params.training ? 2 : 1); dir++) {
                bt_channel *ch = &e->channels[e->n_channels];
                BT_TRY(bt_channel_init(ch, dir ? b : a, dir ? a : b, dir, m));
                e->n_channels++;
                ch->path = stage_path(e, ch->from, ch->to);
                for (int k = 0; k < n_values; k++) {
                    const bt_value *v = &e->graph->values[values[k]];
                    if (dir && v->dtype == BT_I32) continue;
                    ch->value_off[ch->n_values] = ch->msg_bytes;
                    ch->values[ch->n_values++] = values[k];
                    ch->msg_bytes += value_bytes(e, values[k]);
                }
                BT_TRY(bt_transfer_setup(e, ch));
                bt_stage *from = &e->stage[ch->from], *to = &e->stage[ch->to];
                if (!dir) {
                    from->out_act[from->n_out_act++] = ch;
                    to->in_act[to->n_in_act++] = ch;
                    for (int k = 0; k < ch->n_values && ch->path != BT_PATH_HOST; k++) {
                        to->recv_from[ch->values[k]] = ch;
                        to->recv_off[ch->values[k]] = ch->value_off[k];
                    }
                } else {
                    from->out_grad[from->n_out_grad++] = ch;
                    to->in_grad[to->n_in_grad++] = ch;
                    if (ch->path == BT_PATH_HOST && ch->msg_bytes > to->recv_scratch_bytes)
                        to->recv_scratch_bytes = ch->msg_bytes;
                }
            }
        }
    }
    for (int s = 0; s < p; s++) {
        bt_stage *st = &e->stage[s];
        if (st->recv_scratch_bytes)
            BT_TRY(stage_alloc(st, st->recv_scratch_bytes, &st->recv_scratch, &st->mem.workspace));
    }
    return BT_OK;
}

/* ---- memory check before allocating ---------------------------------------------------------- */

typedef struct stage_need {
    size_t weights, gradients, optimizer, activations, total;
} stage_need;

/* What stage st will allocate, from its layout (before anything is allocated). */
static stage_need stage_bytes(const bt_engine *e, const bt_stage *st)
{
    stage_need n = {0};
    const bt_graph *g = e->graph;
    size_t dsz = bt_dtype_size(e->dtype), params = 0;
    int training = e->params.training;
    for (int p = 0; p < g->n_params; p++) {
        int node = g->params[p].node;
        if (node >= st->first_node && node < st->first_node + st->n_nodes)
            params += (size_t)bt_shape_numel(&g->params[p].shape);
    }
    n.weights = params * dsz * (e->params.precision != BT_F32 ? 2 : 1);
    n.gradients = training ? params * dsz : 0;
    n.optimizer = training ? params * dsz * (size_t)bt_optim_state_count(&e->params.optimizer) : 0;
    n.activations = st->slot_bytes * (size_t)st->n_slots + (training ? st->grad_bytes : 0) + st->ws_bytes;
    /* channel buffers: on the receiving device, or host memory for the host path */
    size_t per_step = (size_t)e->mb_size * (size_t)e->params.parallel.microbatches;
    for (int c = 0; c < e->plan->n_crossings; c++) {
        const bt_crossing *x = &e->plan->crossings[c];
        if (x->src < 0) continue;
        size_t bytes = x->bytes_per_sample * per_step;
        if (x->dst == st->index && stage_path(e, x->src, x->dst) != BT_PATH_HOST) n.activations += bytes;
        if (training && x->src == st->index && stage_path(e, x->dst, x->src) != BT_PATH_HOST &&
            e->graph->values[x->value].dtype != BT_I32)
            n.activations += bytes;
    }
    n.total = n.weights + n.gradients + n.optimizer + n.activations;
    return n;
}

static double mib(size_t bytes) { return (double)bytes / 1048576.0; }

/* Refuses a plan whose stages need more memory than their devices have, naming the stage. All
 * cpu:N devices share the machine's memory; each GPU is its own pool. */
static bt_status check_memory(bt_engine *e)
{
    for (int s = 0; s < e->stages; s++) {
        bt_stage *st = &e->stage[s];
        int cpu = strncmp(st->device_name, "cpu", 3) == 0;
        int first = -1;
        size_t need = 0;
        for (int k = 0; k < e->stages; k++) {
            int same = cpu ? strncmp(e->stage[k].device_name, "cpu", 3) == 0
                           : strcmp(e->stage[k].device_name, st->device_name) == 0;
            if (!same) continue;
            if (first < 0) first = k;
            need += stage_bytes(e, &e->stage[k]).total;
        }
        if (first != s) continue; /* each pool once, from its first stage */
        size_t free_bytes = e->params.device_memory, total = 0;
        if (!free_bytes && st->be->memory_info) BT_TRY(st->be->memory_info(st->dev, &free_bytes, &total));
        if (!free_bytes || need <= free_bytes) continue;
        int worst = s;
        for (int k = 0; k < e->stages; k++) {
            int same = cpu ? strncmp(e->stage[k].device_name, "cpu", 3) == 0
                           : strcmp(e->stage[k].device_name, st->device_name) == 0;
            if (same && stage_bytes(e, &e->stage[k]).total > stage_bytes(e, &e->stage[worst]).total) worst = k;
        }
        stage_need w = stage_bytes(e, &e->stage[worst]);
        return bt_error(BT_ERR_NOMEM,
                        "the plan does not fit in memory: stage %d (%s) needs %.1f MiB (weights %.1f, "
                        "gradients %.1f, optimizer state %.1f, activations and buffers %.1f MiB) and the "
                        "stages on %s need %.1f MiB in all, but %s has %.1f MiB free",
                        worst, e->stage[worst].device_name, mib(w.total), mib(w.weights), mib(w.gradients),
                        mib(w.optimizer), mib(w.activations), cpu ? "the CPU" : st->device_name, mib(need),
                        cpu ? "the machine" : st->device_name, mib(free_bytes));
    }
    return BT_OK;
}

static bt_status check_params(const bt_graph *g, const bt_engine_params *p)
{
    if (!g) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_create: graph is NULL");
    if (g->n_layers == 0) return bt_error(BT_ERR_MODEL, "the model has no layers");
    int m = p->parallel.microbatches;
    if (m < 1 || m > 4096) return bt_error(BT_ERR_INVALID_ARG, "microbatches must be 1 to 4096, got %d", m);
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
    if (p->transfer != BT_TRANSFER_AUTO && p->transfer != BT_TRANSFER_STAGED && p->transfer != BT_TRANSFER_HOST)
        return bt_error(BT_ERR_INVALID_ARG, "unknown transfer mode %d", (int)p->transfer);
    if (p->training && !bt_graph_is_trainable(g))
        return bt_error(BT_ERR_MODEL,
                        "cannot train: the last layer must be a loss (one scalar per sample)");
    if (p->training && p->parallel.schedule == BT_SCHEDULE_STREAM)
        return bt_error(BT_ERR_INVALID_ARG, "the stream schedule is forward-only: use gpipe or 1f1b to train");
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
    st->be = bt_backend_find(kind);
    if (!st->be) return bt_error_context(BT_ERR_UNSUPPORTED, "stage %d", s);
    int threads = e->params.threads;
    if (threads < 1) { /* auto: the machine's cores shared out among the stages */
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cpus > e->stages ? (int)(cpus / e->stages) : 1;
    }
    BT_TRY(st->be->open(index, threads, &st->dev));
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
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv_job, NULL);
    pthread_cond_init(&e->cv_done, NULL);
    pthread_cond_init(&e->cv_barrier, NULL);
    e->mu_ready = 1;
    for (int s = 0; s < e->stages; s++) {
        bt_worker *w = &e->worker[s];
        w->engine = e;
        w->stage = s;
        w->cur_instr = -1;
        w->last_done = -1;
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

bt_status bt_engine_create(const bt_graph *graph, const bt_engine_params *params, bt_engine **out)
{
    bt_status st = BT_OK;
    if (!params || !out) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_create: NULL argument");
    BT_TRY(check_params(graph, params));
    bt_engine *e = calloc(1, sizeof *e);
    if (!e) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    e->graph = graph;
    e->params = *params;
    if (e->params.watchdog_s <= 0) e->params.watchdog_s = 60;
    e->dtype = params->dtype;
    e->mb_size = params->batch / params->parallel.microbatches;
    e->loss_value = bt_graph_output_value(graph);
    e->drop_send_stage = -1;
    e->drop_send_mb = -1;
    e->staging_chunk = bt_transfer_default_chunk();
    bt_loss_scale_init(&e->scaler, params->loss_scale, 0);
    e->loss_scale = 1.0;
    BT_TRY_GOTO(st, bt_plan_build(graph, &params->parallel, &e->plan), fail);
    e->stages = e->plan->stages;
    int m = params->parallel.microbatches;
    if (params->training) {
        BT_TRY_GOTO(st, bt_schedule_build(params->parallel.schedule, e->stages, m, &e->train_sched), fail);
        BT_TRY_GOTO(st, bt_schedule_validate(e->train_sched), fail);
    }
    BT_TRY_GOTO(st, bt_schedule_build(BT_SCHEDULE_STREAM, e->stages, m, &e->infer_sched), fail);
    BT_TRY_GOTO(st, bt_schedule_validate(e->infer_sched), fail);

    e->stage = calloc((size_t)e->stages, sizeof *e->stage);
    e->worker = calloc((size_t)e->stages, sizeof *e->worker);
    e->sumsq = calloc((size_t)e->stages, sizeof *e->sumsq);
    if (!e->stage || !e->worker || !e->sumsq) {
        st = bt_error(BT_ERR_NOMEM, "engine: out of memory");
        goto fail;
    }
    for (int s = 0; s < e->stages; s++) BT_TRY_GOTO(st, open_stage(e, s), fail);
    e->paths = calloc((size_t)e->stages * (size_t)e->stages, sizeof *e->paths);
    if (!e->paths) {
        st = bt_error(BT_ERR_NOMEM, "engine: out of memory");
        goto fail;
    }
    for (int a = 0; a < e->stages; a++)
        for (int b = 0; b < e->stages; b++)
            if (a != b) e->paths[a * e->stages + b] = bt_transfer_path_for(e, a, b);
    for (int s = 0; s < e->stages; s++) BT_TRY_GOTO(st, layout_stage(e, &e->stage[s]), fail);
    BT_TRY_GOTO(st, check_memory(e), fail);
    for (int s = 0; s < e->stages; s++) BT_TRY_GOTO(st, alloc_stage(e, &e->stage[s]), fail);
    BT_TRY_GOTO(st, build_channels(e), fail);
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

static void stage_free(bt_stage *st)
{
    if (st->dev) {
        for (int i = 0; st->params && i < st->n_params; i++) {
            bt_param_store *ps = &st->params[i];
            if (ps->w) st->be->free(st->dev, ps->w);
            if (ps->g) st->be->free(st->dev, ps->g);
            for (int j = 0; j < 2; j++)
                if (ps->state[j]) st->be->free(st->dev, ps->state[j]);
        }
        for (int i = 0; st->params && i < st->n_params; i++)
            if (st->params[i].w_lp) st->be->free(st->dev, st->params[i].w_lp);
        if (st->slots) st->be->free(st->dev, st->slots);
        if (st->grads) st->be->free(st->dev, st->grads);
        if (st->workspace) st->be->free(st->dev, st->workspace);
        if (st->recv_scratch) st->be->free(st->dev, st->recv_scratch);
        if (st->seed_dev) st->be->free(st->dev, st->seed_dev);
        if (st->loss_host) st->be->host_free(st->dev, st->loss_host);
        if (st->seed_host) st->be->host_free(st->dev, st->seed_host);
        for (int i = 0; i < st->n_events; i++) {
            if (st->ev_begin[i]) st->be->event_destroy(st->dev, st->ev_begin[i]);
            if (st->ev_end[i]) st->be->event_destroy(st->dev, st->ev_end[i]);
        }
        if (st->ev_step0) st->be->event_destroy(st->dev, st->ev_step0);
        if (st->ev_ready) st->be->event_destroy(st->dev, st->ev_ready);
        st->be->close(st->dev);
    }
    free(st->ev_begin);
    free(st->ev_end);
    free(st->recv_from);
    free(st->recv_off);
    free(st->sq_ptr);
    free(st->sq_n);
    free(st->params);
    free(st->node_params);
    free(st->value_offset);
    free(st->grad_offset);
    free(st->node_saved_offset);
    free(st->slot_of);
    free(st->slot_owner);
}

void bt_engine_destroy(bt_engine *e)
{
    if (!e) return;
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
    for (int c = 0; c < e->n_channels; c++) {
        if (e->stage) bt_transfer_teardown(e, &e->channels[c]);
        bt_channel_destroy(&e->channels[c]);
    }
    free(e->channels);
    free(e->paths);
    for (int s = 0; e->stage && s < e->stages; s++) stage_free(&e->stage[s]);
    free(e->stage);
    for (int s = 0; e->worker && s < e->stages; s++) free(e->worker[s].trace);
    free(e->worker);
    free(e->sumsq);
    bt_schedule_destroy(e->train_sched);
    bt_schedule_destroy(e->infer_sched);
    bt_plan_destroy(e->plan);
    free(e);
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
    }
    for (int c = 0; c < e->plan->n_crossings; c++) {
        const bt_crossing *x = &e->plan->crossings[c];
        if (x->src != -1) continue;
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

static bt_status run_job(bt_engine *e, bt_job_kind job, const bt_feed *feeds, int n_feeds,
                         int out_value, void *out, bt_step_result *result)
{
    if (!e) return bt_error(BT_ERR_INVALID_ARG, "engine is NULL");
    if (job != BT_JOB_FORWARD && !e->train_sched)
        return bt_error(BT_ERR_INVALID_ARG, "this engine was created for inference (training = 0)");
    BT_TRY(bind_feeds(e, feeds, n_feeds));
    e->job_sched = job == BT_JOB_FORWARD ? e->infer_sched : e->train_sched;
    e->out_value = out_value;
    e->out_ptr = out;
    e->lr = bt_lr_at(&e->params.lr_schedule, e->params.optimizer.lr, e->step, e->params.total_steps);
    e->loss_scale = e->params.precision == BT_F16 ? e->scaler.scale : 1.0;
    e->abort = 0;
    e->barrier_count = 0;
    e->grad_norm = 0;
    for (int s = 0; s < e->stages; s++) e->sumsq[s] = 0;

    double t0 = bt_now_ms();
    e->step_t0_ms = t0;
    pthread_mutex_lock(&e->mu);
    e->job = job;
    e->done_count = 0;
    e->generation++;
    pthread_cond_broadcast(&e->cv_job);
    while (e->done_count < e->stages) pthread_cond_wait(&e->cv_done, &e->mu);
    pthread_mutex_unlock(&e->mu);
    double ms = bt_now_ms() - t0;

    BT_TRY(collect_failure(e));

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
        size_t act = (size_t)live * e->stage[s].slot_bytes;
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
        result->bubble = ms > 0 ? 1.0 - busy / ((double)e->stages * ms) : 0;
        if (result->bubble < 0) result->bubble = 0;
        result->lr = e->lr;
        result->grad_norm = e->grad_norm;
        result->skipped = skipped;
        result->loss_scale = e->loss_scale;
        if (job != BT_JOB_FORWARD)
            result->loss = e->worker[e->stages - 1].loss_sum / (double)e->params.batch;
    }
    return BT_OK;
}

bt_status bt_engine_compute_grads(bt_engine *e, const bt_feed *feeds, int n_feeds,
                                  bt_step_result *result)
{
    return run_job(e, BT_JOB_GRADS, feeds, n_feeds, -1, NULL, result);
}

bt_status bt_engine_train_step(bt_engine *e, const bt_feed *feeds, int n_feeds,
                               bt_step_result *result)
{
    return run_job(e, BT_JOB_TRAIN, feeds, n_feeds, -1, NULL, result);
}

bt_status bt_engine_forward(bt_engine *e, const bt_feed *feeds, int n_feeds, void *output,
                            bt_step_result *result)
{
    if (!e) return bt_error(BT_ERR_INVALID_ARG, "engine is NULL");
    return run_job(e, BT_JOB_FORWARD, feeds, n_feeds, e->loss_value, output, result);
}

bt_status bt_engine_forward_layer(bt_engine *e, const bt_feed *feeds, int n_feeds,
                                  const char *layer, void *output, bt_step_result *result)
{
    if (!e || !layer) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_forward_layer: NULL argument");
    int l = bt_graph_find_layer(e->graph, layer);
    if (l < 0) return bt_error(BT_ERR_INVALID_ARG, "no layer named '%s'", layer);
    const bt_layer *ly = &e->graph->layers[l];
    int value = e->graph->nodes[ly->first_node + ly->n_nodes - 1].out;
    return run_job(e, BT_JOB_FORWARD, feeds, n_feeds, value, output, result);
}

/* ---- parameters and statistics ---------------------------------------------------------------- */

static bt_status find_param(const bt_engine *e, const char *name, bt_stage **st, bt_param_store **ps)
{
    if (!e || !name) return bt_error(BT_ERR_INVALID_ARG, "NULL engine or parameter name");
    for (int s = 0; s < e->stages; s++)
        for (int i = 0; i < e->stage[s].n_params; i++)
            if (strcmp(e->graph->params[e->stage[s].params[i].param].name, name) == 0) {
                *st = &e->stage[s];
                *ps = &e->stage[s].params[i];
                return BT_OK;
            }
    return bt_error(BT_ERR_INVALID_ARG, "the model has no parameter '%s'", name);
}

static bt_status check_bytes(const bt_engine *e, const bt_param_store *ps, const char *name, size_t bytes)
{
    size_t want = ps->numel * bt_dtype_size(e->dtype);
    if (bytes != want)
        return bt_error(BT_ERR_INVALID_ARG, "parameter '%s' holds %zu bytes (%zu %s), not %zu", name,
                        want, ps->numel, bt_dtype_name(e->dtype), bytes);
    return BT_OK;
}

bt_status bt_engine_read_param(const bt_engine *e, const char *name, void *dst, size_t bytes)
{
    bt_stage *st;
    bt_param_store *ps;
    BT_TRY(find_param(e, name, &st, &ps));
    BT_TRY(check_bytes(e, ps, name, bytes));
    return st->be->to_host(st->dev, dst, ps->w, bytes);
}

bt_status bt_engine_write_param(bt_engine *e, const char *name, const void *src, size_t bytes)
{
    bt_stage *st;
    bt_param_store *ps;
    BT_TRY(find_param(e, name, &st, &ps));
    BT_TRY(check_bytes(e, ps, name, bytes));
    BT_TRY(st->be->from_host(st->dev, ps->w, src, bytes));
    if (!ps->w_lp) return BT_OK;
    BT_TRY(bt_worker_refresh_lowp(e, st, ps));
    return st->be->sync(st->dev);
}

bt_status bt_engine_read_grad(const bt_engine *e, const char *name, void *dst, size_t bytes)
{
    bt_stage *st;
    bt_param_store *ps;
    BT_TRY(find_param(e, name, &st, &ps));
    BT_TRY(check_bytes(e, ps, name, bytes));
    if (!ps->g) return bt_error(BT_ERR_INVALID_ARG, "the engine was created without gradients");
    return st->be->to_host(st->dev, dst, ps->g, bytes);
}

int bt_engine_optimizer_slots(const bt_engine *e)
{
    return e && e->params.training ? bt_optim_state_count(&e->params.optimizer) : 0;
}

const char *bt_engine_optimizer_slot_name(const bt_engine *e, int slot)
{
    if (!e || slot < 0 || slot >= bt_engine_optimizer_slots(e)) return NULL;
    if (e->params.optimizer.kind == BT_OPT_ADAMW) return slot == 0 ? "exp_avg" : "exp_avg_sq";
    return "momentum_buffer";
}

static bt_status find_state(const bt_engine *e, const char *name, int slot, size_t bytes, bt_stage **st,
                            bt_param_store **ps)
{
    BT_TRY(find_param(e, name, st, ps));
    BT_TRY(check_bytes(e, *ps, name, bytes));
    if (slot < 0 || slot >= bt_engine_optimizer_slots(e))
        return bt_error(BT_ERR_INVALID_ARG, "parameter '%s': the optimizer has no state slot %d", name, slot);
    return BT_OK;
}

bt_status bt_engine_read_state(const bt_engine *e, const char *name, int slot, void *dst, size_t bytes)
{
    bt_stage *st;
    bt_param_store *ps;
    BT_TRY(find_state(e, name, slot, bytes, &st, &ps));
    return st->be->to_host(st->dev, dst, ps->state[slot], bytes);
}

bt_status bt_engine_write_state(bt_engine *e, const char *name, int slot, const void *src, size_t bytes)
{
    bt_stage *st;
    bt_param_store *ps;
    BT_TRY(find_state(e, name, slot, bytes, &st, &ps));
    return st->be->from_host(st->dev, ps->state[slot], src, bytes);
}

bt_status bt_engine_set_step(bt_engine *e, int64_t step)
{
    if (!e || step < 0) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_set_step: bad engine or step");
    e->step = step;
    return BT_OK;
}

bt_status bt_engine_set_total_steps(bt_engine *e, int64_t total_steps)
{
    if (!e || total_steps < 0) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_set_total_steps: bad arguments");
    e->params.total_steps = total_steps;
    return BT_OK;
}

bt_dtype bt_engine_dtype(const bt_engine *e) { return e ? e->dtype : BT_F32; }

int64_t bt_engine_batch(const bt_engine *e) { return e ? e->params.batch : 0; }

int bt_engine_num_stages(const bt_engine *e) { return e ? e->stages : 0; }

bt_status bt_engine_stage(const bt_engine *e, int s, bt_stage_info *out)
{
    if (!e || !out || s < 0 || s >= e->stages)
        return bt_error(BT_ERR_INVALID_ARG, "bt_engine_stage: no stage %d", s);
    memset(out, 0, sizeof *out);
    out->first_layer = e->plan->first_layer[s];
    out->n_layers = e->plan->n_stage_layers[s];
    out->device = e->stage[s].device_name;
    for (int i = 0; i < e->stage[s].n_params; i++) out->n_params += (int64_t)e->stage[s].params[i].numel;
    out->send_bytes = bt_plan_send_bytes(e->plan, s) * (size_t)e->mb_size;
    return BT_OK;
}

bt_status bt_engine_memory(const bt_engine *e, int s, bt_memory_stats *out)
{
    if (!e || !out || s < 0 || s >= e->stages)
        return bt_error(BT_ERR_INVALID_ARG, "bt_engine_memory: no stage %d", s);
    *out = e->stage[s].mem;
    return BT_OK;
}

bt_status bt_engine_time(const bt_engine *e, int s, bt_time_stats *out)
{
    if (!e || !out || s < 0 || s >= e->stages)
        return bt_error(BT_ERR_INVALID_ARG, "bt_engine_time: no stage %d", s);
    *out = e->stage[s].time;
    return BT_OK;
}

int64_t bt_engine_step(const bt_engine *e) { return e ? e->step : 0; }

const bt_schedule *bt_engine_last_schedule(const bt_engine *e) { return e->job_sched; }

const bt_trace_rec *bt_engine_trace(const bt_engine *e, int stage, int *n)
{
    if (stage < 0 || stage >= e->stages) {
        *n = 0;
        return NULL;
    }
    *n = e->worker[stage].n_trace;
    return e->worker[stage].trace;
}

/* The stage whose device provides host memory: the first on a backend whose copies overlap
 * compute (a GPU), else stage 0. */
static const bt_stage *host_memory_stage(const bt_engine *e)
{
    for (int s = 0; s < e->stages; s++)
        if (e->stage[s].be->copies_overlap) return &e->stage[s];
    return &e->stage[0];
}

bt_status bt_engine_host_alloc(bt_engine *e, size_t bytes, void **out)
{
    if (!e || !out) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_host_alloc: NULL argument");
    const bt_stage *st = host_memory_stage(e);
    return st->be->host_alloc(st->dev, bytes, out);
}

void bt_engine_host_free(bt_engine *e, void *ptr)
{
    if (!e || !ptr) return;
    const bt_stage *st = host_memory_stage(e);
    st->be->host_free(st->dev, ptr);
}

int bt_engine_num_boundaries(const bt_engine *e) { return e ? e->n_channels : 0; }

bt_status bt_engine_boundary(const bt_engine *e, int i, bt_boundary_stats *out)
{
    if (!e || !out || i < 0 || i >= e->n_channels)
        return bt_error(BT_ERR_INVALID_ARG, "bt_engine_boundary: no boundary %d", i);
    const bt_channel *ch = &e->channels[i];
    out->from = ch->from;
    out->to = ch->to;
    out->grad = ch->grad;
    out->path = ch->path;
    out->message_bytes = ch->msg_bytes;
    out->messages = ch->messages;
    out->bytes = ch->bytes;
    out->copy_ms = ch->copy_ms;
    return BT_OK;
}

void bt_engine_test_drop_send(bt_engine *e, int stage, int mb)
{
    e->drop_send_stage = stage;
    e->drop_send_mb = mb;
}
