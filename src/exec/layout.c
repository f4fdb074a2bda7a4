/* exec/layout.c: a stage's memory, laid out and allocated from the one memory model
 * (plan/memory.h). bt_layout_stage asks the model for the stage's sizes and offsets;
 * bt_layout_check_memory adds the model's bytes up per memory pool and refuses a plan that does
 * not fit before anything is allocated; bt_layout_alloc_stage allocates exactly those buffers
 * (channel buffers come with the channels, exec/topology.c) and bt_layout_verify asserts, once
 * everything is allocated, that the engine holds exactly what the model said. One rank of a job
 * across processes lays out every stage (the plan is global) but checks and allocates its own
 * stage only (bt_stage_is_local). Pools come from the
 * backend table: every device of a backend that shares host memory (cpu:N) draws from the
 * machine's memory, together with host-path channel buffers; any other device index is its own
 * pool, shared by the logical stages opened on it. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/strutil.h"
#include "exec/exec_internal.h"
#include "optim/optim.h"

static bt_status stage_alloc(bt_stage *st, size_t bytes, void **out, size_t *counter)
{
    BT_TRY(st->be->alloc(st->dev, bytes ? bytes : 64, out));
    if (counter) *counter += bytes;
    return BT_OK;
}

bt_status bt_layout_memory_params(bt_engine *e)
{
    int p = e->stages;
    e->stage_slots = calloc((size_t)p, sizeof *e->stage_slots);
    e->host_path = calloc((size_t)p * (size_t)p, sizeof *e->host_path);
    e->bf16_kept = calloc((size_t)p, sizeof *e->bf16_kept);
    if (!e->stage_slots || !e->host_path || !e->bf16_kept) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    int keep = BT_KEEP_F32;
    BT_TRY(bt_memory_bf16_mode(&keep));
    /* activations kept as bf16 where the backend can store them (cpu; GPU stages keep f32) */
    for (int s = 0; s < p; s++) e->bf16_kept[s] = e->stage[s].be->store_bf16 ? (unsigned char)keep : BT_KEEP_F32;
    for (int s = 0; s < p; s++) e->stage_slots[s] = e->stage[s].n_slots;
    for (int a = 0; a < p; a++)
        for (int b = 0; b < p; b++)
            e->host_path[a * p + b] = a != b && bt_topology_path(e, a, b) == BT_PATH_HOST;
    bt_memory_params *mp = &e->memory;
    bt_memory_params_init(mp);
    mp->microbatch_size = e->mb_size;
    mp->microbatches = e->params.parallel.microbatches;
    mp->dtype = e->dtype;
    mp->precision = e->params.precision;
    mp->training = e->params.training;
    mp->optimizer_slots = e->params.training ? bt_optim_state_count(&e->params.optimizer) : 0;
    mp->n_slots = e->stage_slots;
    mp->host_path = e->host_path;
    mp->split_backward = e->train_sched && e->train_sched->split_backward;
    mp->bf16_kept = e->bf16_kept;
    /* a deferred W reads a micro-batch's activations after later micro-batches' B recomputed
     * theirs into the one shared region: W recomputes them again first (worker.c) */
    return BT_OK;
}

bt_status bt_layout_stage(bt_engine *e, bt_stage *st)
{
    int nv = e->graph->n_values;
    st->value_offset = malloc((size_t)nv * sizeof *st->value_offset + 1);
    st->grad_offset = malloc((size_t)nv * sizeof *st->grad_offset + 1);
    st->node_saved_offset = calloc((size_t)st->n_nodes + 1, sizeof *st->node_saved_offset);
    st->node_wgrad_offset = calloc((size_t)st->n_nodes + 1, sizeof *st->node_wgrad_offset);
    st->recomputed = calloc((size_t)st->n_nodes + 1, 1);
    st->exact = calloc((size_t)st->n_nodes + 1, 1);
    st->kept_offset = malloc((size_t)nv * sizeof *st->kept_offset + 1);
    if (!st->value_offset || !st->grad_offset || !st->node_saved_offset || !st->node_wgrad_offset ||
        !st->recomputed || !st->exact || !st->kept_offset)
        return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    bt_stage_layout layout = {st->value_offset, st->grad_offset, st->node_saved_offset,
                              st->node_wgrad_offset, st->kept_offset};
    bt_memory_stage(e->graph, e->plan, &e->memory, st->index, &st->need, &layout);
    for (int k = 0; k < st->n_nodes; k++)
        st->recomputed[k] = (unsigned char)bt_memory_node_recomputed(e->graph, e->plan, &e->memory, st->index,
                                                                     st->first_node + k);
    st->slot_bytes = st->need.slot_bytes;
    st->grad_bytes = st->need.value_grads;
    st->outgoing_grad_bytes = st->need.outgoing_grad_bytes;
    st->ws_bytes = st->need.workspace;
    st->recv_scratch_bytes = st->need.recv_scratch;
    BT_TRY(bt_worker_plan_exact(e, st));
    return bt_store_init(st, e->graph);
}

/* ---- admission -------------------------------------------------------------------------------- */

/* A figure of the messages below, in the unit that keeps it readable (a --memory of 1K is not
 * "0.0 MiB"). */
static const char *fig(size_t bytes, bt_bytes_text *t)
{
    *t = bt_bytes_text_of((double)bytes);
    return t->s;
}

/* Whether stages a and b draw from one memory pool. */
static int same_pool(const bt_stage *a, const bt_stage *b)
{
    if (a->be->shares_host_memory || b->be->shares_host_memory)
        return a->be->shares_host_memory && b->be->shares_host_memory;
    return a->be == b->be && a->device_index == b->device_index;
}

/* What the pool of stage s must hold: its stages' device memory, and for the host's pool every
 * host-path channel buffer. */
static size_t pool_need(const bt_engine *e, const bt_stage *st)
{
    size_t need = 0;
    for (int k = 0; k < e->stages; k++) {
        if (!bt_stage_is_local(e, k)) continue; /* another rank's */
        if (same_pool(&e->stage[k], st)) need += e->stage[k].need.device_total;
        if (st->be->shares_host_memory) need += e->stage[k].need.host_channels;
    }
    return need;
}

/* device_memory_each: every device name (its stages together) against the limit. */
static bt_status check_each_device(bt_engine *e)
{
    size_t limit = e->params.device_memory;
    for (int s = 0; s < e->stages; s++) {
        int seen = 0;
        size_t need = 0;
        if (!bt_stage_is_local(e, s)) continue;
        for (int k = 0; k < e->stages; k++) {
            if (!bt_stage_is_local(e, k)) continue;
            if (strcmp(e->stage[k].device_name, e->stage[s].device_name) != 0) continue;
            seen |= k < s;
            need += e->stage[k].need.device_total + e->stage[k].need.host_channels;
        }
        if (seen || need <= limit) continue;
        const bt_stage_memory *w = &e->stage[s].need;
        size_t other = w->device_total - w->weights - w->gradients - w->optimizer - w->activations;
        bt_bytes_text f[8];
        return bt_error(BT_ERR_NOMEM,
                        "the plan does not fit in memory: stage %d (%s) needs %s (weights %s, gradients %s, "
                        "optimizer state %s, activations %s, buffers and workspace %s) and %s holds %s in all, "
                        "but the limit given for each device (--memory; bt_engine_params.device_memory) is %s",
                        s, e->stage[s].device_name, fig(w->device_total, &f[0]), fig(w->weights, &f[1]),
                        fig(w->gradients, &f[2]), fig(w->optimizer, &f[3]), fig(w->activations, &f[4]),
                        fig(other, &f[5]), e->stage[s].device_name, fig(need, &f[6]), fig(limit, &f[7]));
    }
    return BT_OK;
}

bt_status bt_layout_check_memory(bt_engine *e)
{
    if (e->params.device_memory && e->params.device_memory_each) return check_each_device(e);
    for (int s = 0; s < e->stages; s++) {
        bt_stage *st = &e->stage[s];
        if (!bt_stage_is_local(e, s)) continue;
        int seen = 0;
        for (int k = 0; k < s; k++) seen |= bt_stage_is_local(e, k) && same_pool(&e->stage[k], st);
        if (seen) continue; /* each pool once, from its first stage */
        size_t need = pool_need(e, st);
        size_t free_bytes = e->params.device_memory, total = 0;
        if (!free_bytes && st->be->memory_info) BT_TRY(st->be->memory_info(st->dev, &free_bytes, &total));
        if (!free_bytes || need <= free_bytes) continue;
        int worst = s;
        for (int k = 0; k < e->stages; k++)
            if (bt_stage_is_local(e, k) && same_pool(&e->stage[k], st) &&
                e->stage[k].need.device_total > e->stage[worst].need.device_total)
                worst = k;
        const bt_stage_memory *w = &e->stage[worst].need;
        size_t other = w->device_total - w->weights - w->gradients - w->optimizer - w->activations;
        int host = st->be->shares_host_memory;
        bt_bytes_text f[8];
        return bt_error(BT_ERR_NOMEM,
                        "the plan does not fit in memory: stage %d (%s) needs %s (weights %s, gradients %s, "
                        "optimizer state %s, activations %s, buffers and workspace %s) and the stages on %s "
                        "need %s in all, but %s has %s free (%s)",
                        worst, e->stage[worst].device_name, fig(w->device_total, &f[0]), fig(w->weights, &f[1]),
                        fig(w->gradients, &f[2]), fig(w->optimizer, &f[3]), fig(w->activations, &f[4]),
                        fig(other, &f[5]), host ? "the host's memory" : st->device_name, fig(need, &f[6]),
                        host ? "the machine" : st->device_name, fig(free_bytes, &f[7]),
                        e->params.device_memory ? "the limit given: bt_engine_params.device_memory, for the pool"
                                                : "as its backend reports it now");
    }
    return BT_OK;
}

/* ---- allocation ------------------------------------------------------------------------------- */

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
    return bt_exec_ordering_event(st->be, st->dev, &st->ev_ready);
}

/* Parameters of the stage: master weights (initialised), compute copies, gradients, state. Each
 * class is one allocation holding every parameter of the stage back to back (st->flat_*), so the
 * optimizer and the compute-copy refresh run once over the stage, not once per tensor. */
static bt_status alloc_params(bt_engine *e, bt_stage *st)
{
    const bt_graph *g = e->graph;
    int training = e->params.training;
    bt_memory_stats *m = &st->mem;
    size_t dsz = bt_dtype_size(e->dtype);
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
    int n_state = e->memory.optimizer_slots;
    size_t total = 0;
    for (int p = 0; p < g->n_params; p++) {
        int node = g->params[p].node;
        if (node >= st->first_node && node < st->first_node + st->n_nodes)
            total += (size_t)bt_shape_numel(&g->params[p].shape);
    }
    st->flat_numel = total;
    if (st->n_params > 0) {
        BT_TRY(stage_alloc(st, total * dsz, &st->flat_w, &m->weights));
        if (e->params.precision != BT_F32) BT_TRY(stage_alloc(st, total * dsz, &st->flat_w_lp, &m->weights));
        if (training) {
            BT_TRY(stage_alloc(st, total * dsz, &st->flat_g, &m->gradients));
            BT_TRY(st->be->zero(st->dev, st->flat_g, total * dsz));
            for (int j = 0; j < n_state; j++) {
                BT_TRY(stage_alloc(st, total * dsz, &st->flat_state[j], &m->optimizer));
                BT_TRY(st->be->zero(st->dev, st->flat_state[j], total * dsz));
            }
        }
    }
    size_t off = 0; /* bytes into each flat array */
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
        ps->w = (unsigned char *)st->flat_w + off;
        BT_TRY(bt_param_init(e, st, ps));
        if (st->flat_w_lp) {
            ps->w_lp = (unsigned char *)st->flat_w_lp + off;
            BT_TRY(bt_worker_refresh_lowp(e, st, ps));
        }
        if (training) {
            ps->g = (unsigned char *)st->flat_g + off;
            st->sq_ptr[k - 1] = ps->g;
            /* a tied copy's gradient equals its source's after STEP's exchange: the norm counts
             * it once, through the source */
            st->sq_n[k - 1] = g->params[p].tied_to >= 0 ? 0 : ps->numel;
            for (int j = 0; j < n_state; j++) ps->state[j] = (unsigned char *)st->flat_state[j] + off;
        }
        off += ps->numel * dsz;
    }
    return BT_OK;
}

bt_status bt_layout_alloc_stage(bt_engine *e, bt_stage *st)
{
    bt_memory_stats *m = &st->mem;
    m->bf16_kept = st->need.bf16_kept;
    BT_TRY(stage_alloc(st, st->slot_bytes * (size_t)st->n_slots + st->need.recompute_bytes + st->need.work_bytes,
                       (void **)&st->slots, &m->activations));
    if (e->params.training) BT_TRY(stage_alloc(st, st->grad_bytes, (void **)&st->grads, &m->workspace));
    BT_TRY(stage_alloc(st, st->ws_bytes, &st->workspace, &m->workspace));
    if (st->recv_scratch_bytes)
        BT_TRY(stage_alloc(st, st->recv_scratch_bytes, &st->recv_scratch, &m->workspace));
    size_t mb_bytes = (size_t)e->mb_size * bt_dtype_size(e->dtype);
    BT_TRY(st->be->host_alloc(st->dev, mb_bytes * (size_t)e->params.parallel.microbatches, &st->loss_host));
    BT_TRY(st->be->host_alloc(st->dev, mb_bytes, &st->seed_host));
    BT_TRY(stage_alloc(st, mb_bytes, &st->seed_dev, &m->workspace));
    BT_TRY(alloc_events(e, st));
    return alloc_params(e, st);
}

void bt_layout_verify(const bt_engine *e)
{
    for (int s = 0; s < e->stages; s++) {
        const bt_stage *st = &e->stage[s];
        const bt_stage_memory *n = &st->need;
        const bt_memory_stats *m = &st->mem;
        if (!bt_stage_is_local(e, s)) { /* another rank's: nothing of it here */
            assert(m->weights + m->gradients + m->optimizer + m->activations + m->workspace == 0);
            continue;
        }
        /* the classes as bt_memory_stats groups them (baton/engine.h) */
        assert(m->weights == n->weights);
        assert(m->gradients == n->gradients);
        assert(m->optimizer == n->optimizer);
        assert(m->activations == n->activations + n->recv_buffers + st->mpi_send_bytes);
        assert(m->workspace == n->value_grads + n->workspace + n->loss_seed + n->recv_scratch);
        assert(st->host_channel_bytes == n->host_channels);
        (void)st, (void)n, (void)m;
    }
}

void bt_layout_free_stage(bt_stage *st)
{
    if (st->dev) {
        if (st->flat_w) st->be->free(st->dev, st->flat_w);
        if (st->flat_g) st->be->free(st->dev, st->flat_g);
        for (int j = 0; j < 2; j++) {
            if (st->flat_state[j]) {
                st->be->free(st->dev, st->flat_state[j]);
                continue;
            }
            /* zero's sharding freed the packed state (dist_dp.c): any left is a store's own */
            for (int i = 0; st->params && i < st->n_params; i++)
                if (st->params[i].state[j]) st->be->free(st->dev, st->params[i].state[j]);
        }
        if (st->flat_w_lp) st->be->free(st->dev, st->flat_w_lp);
        if (st->grad_arena && !st->grad_arena_shm) st->be->free(st->dev, st->grad_arena);
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
    free(st->node_wgrad_offset);
    free(st->recomputed);
    free(st->exact);
    free(st->kept_offset);
    free(st->kept_values);
    free(st->work_tag);
    free(st->slot_of);
    free(st->slot_owner);
}
