/* exec/engine_query.c: the engine's accessors: reading and writing parameters, gradients and
 * optimizer state by name (checkpoints, tests), the step counter, per-stage placement, memory and
 * time statistics, boundaries, page-locked host memory for feeds, and the private views trace/
 * reads. Nothing here runs a job; every call is for the thread that owns the engine, between
 * steps. Once a stuck worker made the engine unusable (engine.c), the calls that touch its
 * parameters, gradients, state or step fail with that reason; statistics stay readable. */
#include <string.h>

#include "core/error.h"
#include "exec/exec_internal.h"
#include "optim/optim.h"


/* The store of parameter name, or (across processes) *ps = NULL when another rank holds it: *st is
 * then its stage (plan data only here) and *param its graph id. */
static bt_status find_param(const bt_engine *e, const char *name, bt_stage **st, bt_param_store **ps, int *param)
{
    if (!e || !name) return bt_error(BT_ERR_INVALID_ARG, "NULL engine or parameter name");
    BT_TRY(bt_engine_check_usable(e)); /* a stuck worker may still be writing them */
    const bt_graph *g = e->graph;
    for (int p = 0; p < g->n_params; p++) {
        if (strcmp(g->params[p].name, name) != 0) continue;
        *param = p;
        *ps = NULL;
        for (int s = 0; s < e->stages; s++) {
            bt_stage *k = &e->stage[s];
            if (g->params[p].node < k->first_node || g->params[p].node >= k->first_node + k->n_nodes) continue;
            *st = k;
            for (int i = 0; i < k->n_params; i++)
                if (k->params[i].param == p) *ps = &k->params[i];
            return BT_OK;
        }
    }
    return bt_error(BT_ERR_INVALID_ARG, "the model has no parameter '%s'", name);
}

static bt_status check_bytes(const bt_engine *e, const bt_graph *g, int param, const char *name, size_t bytes)
{
    size_t numel = (size_t)bt_shape_numel(&g->params[param].shape);
    size_t want = numel * bt_dtype_size(e->dtype);
    if (bytes != want)
        return bt_error(BT_ERR_INVALID_ARG, "parameter '%s' holds %zu bytes (%zu %s), not %zu", name,
                        want, numel, bt_dtype_name(e->dtype), bytes);
    return BT_OK;
}

/* Across processes a rank holds its own stage's tensors only: another stage's are readable on rank
 * 0 after bt_engine_sync_params (its copy for a checkpoint), and a write of them is dropped (its
 * own rank writes them: every rank loads the same file). */
bt_status bt_engine_read_param(const bt_engine *e, const char *name, void *dst, size_t bytes)
{
    bt_stage *st;
    bt_param_store *ps;
    int p;
    BT_TRY(find_param(e, name, &st, &ps, &p));
    BT_TRY(check_bytes(e, e->graph, p, name, bytes));
    if (!ps) return e->ranks->mirror_read(e, st->index, p, -1, dst, bytes);
    return st->be->to_host(st->dev, dst, ps->w, bytes);
}

bt_status bt_engine_write_param(bt_engine *e, const char *name, const void *src, size_t bytes)
{
    bt_stage *st;
    bt_param_store *ps;
    int p;
    BT_TRY(find_param(e, name, &st, &ps, &p));
    BT_TRY(check_bytes(e, e->graph, p, name, bytes));
    if (!ps) return BT_OK; /* another rank's (see above) */
    BT_TRY(st->be->from_host(st->dev, ps->w, src, bytes));
    if (!ps->w_lp) return BT_OK;
    BT_TRY(bt_worker_refresh_lowp(e, st, ps));
    return st->be->sync(st->dev);
}

bt_status bt_engine_read_grad(const bt_engine *e, const char *name, void *dst, size_t bytes)
{
    bt_stage *st;
    bt_param_store *ps;
    int p;
    BT_TRY(find_param(e, name, &st, &ps, &p));
    BT_TRY(check_bytes(e, e->graph, p, name, bytes));
    if (!ps) {
        char who[96];
        e->ranks->describe_stage(e, st->index, who, sizeof who);
        return bt_error(BT_ERR_INVALID_ARG, "the gradient of '%s' is held by %s, not by this rank", name, who);
    }
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
                            bt_param_store **ps, int *param)
{
    BT_TRY(find_param(e, name, st, ps, param));
    BT_TRY(check_bytes(e, e->graph, *param, name, bytes));
    if (slot < 0 || slot >= bt_engine_optimizer_slots(e))
        return bt_error(BT_ERR_INVALID_ARG, "parameter '%s': the optimizer has no state slot %d", name, slot);
    return BT_OK;
}

bt_status bt_engine_read_state(const bt_engine *e, const char *name, int slot, void *dst, size_t bytes)
{
    bt_stage *st;
    bt_param_store *ps;
    int p;
    BT_TRY(find_state(e, name, slot, bytes, &st, &ps, &p));
    if (!ps) return e->ranks->mirror_read(e, st->index, p, slot, dst, bytes);
    BT_TRY(e->ranks->state_buffer((bt_engine *)e, st, ps, slot, 0)); /* parallel.zero: sharded */
    return st->be->to_host(st->dev, dst, ps->state[slot], bytes);
}

bt_status bt_engine_write_state(bt_engine *e, const char *name, int slot, const void *src, size_t bytes)
{
    bt_stage *st;
    bt_param_store *ps;
    int p;
    BT_TRY(find_state(e, name, slot, bytes, &st, &ps, &p));
    if (!ps) return BT_OK; /* another rank's */
    BT_TRY(e->ranks->state_buffer(e, st, ps, slot, 1)); /* parallel.zero: held in full until the next job */
    return st->be->from_host(st->dev, ps->state[slot], src, bytes);
}

bt_status bt_engine_set_step(bt_engine *e, int64_t step)
{
    if (!e || step < 0) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_set_step: bad engine or step");
    BT_TRY(bt_engine_check_usable(e));
    e->step = step;
    return BT_OK;
}

int bt_engine_loss_scale(const bt_engine *e, double *scale, int64_t *clean_steps)
{
    const int scaled = e && e->params.precision == BT_F16;
    *scale = scaled ? e->scaler.scale : 1.0;
    *clean_steps = scaled ? e->scaler.clean : 0;
    return scaled;
}

bt_status bt_engine_set_loss_scale(bt_engine *e, double scale, int64_t clean_steps)
{
    if (!e) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_set_loss_scale: NULL engine");
    const bt_loss_scale *s = &e->scaler;
    if (e->params.precision != BT_F16)
        return bt_error(BT_ERR_INVALID_ARG, "a loss scale was given to an engine of precision %s; only f16 scales",
                        bt_dtype_name(e->params.precision));
    if (!(scale >= s->min_scale && scale <= s->max_scale))
        return bt_error(BT_ERR_INVALID_ARG, "loss scale %.17g is outside [%.17g, %.17g]", scale, s->min_scale,
                        s->max_scale);
    if (clean_steps < 0 || clean_steps >= s->growth_interval)
        return bt_error(BT_ERR_INVALID_ARG, "%lld steps since the loss scale last changed: it grows after %lld, so "
                        "the count is 0 to %lld", (long long)clean_steps, (long long)s->growth_interval,
                        (long long)s->growth_interval - 1);
    e->scaler.scale = scale;
    e->scaler.used = scale;
    e->scaler.clean = clean_steps;
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
    for (int p = 0; p < e->graph->n_params; p++) /* from the graph: another rank may hold the stage */
        if (e->graph->params[p].node >= e->stage[s].first_node &&
            e->graph->params[p].node < e->stage[s].first_node + e->stage[s].n_nodes)
            out->n_params += bt_shape_numel(&e->graph->params[p].shape);
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
        if (bt_stage_is_local(e, s) && e->stage[s].be->copies_overlap) return &e->stage[s];
    return &e->stage[e->dist.on ? e->dist.layout.stage : 0];
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

void bt_engine_feed_rows(const bt_engine *e, int64_t *first, int64_t *count)
{
    int64_t rows = e ? e->mb_size * e->params.parallel.microbatches : 0;
    *first = e && e->dist.on ? (int64_t)e->dist.layout.replica * rows : 0;
    *count = rows;
}

int bt_engine_reads_input(const bt_engine *e, const char *name)
{
    if (!e || !name) return 0;
    int v = bt_graph_find_value(e->graph, name);
    for (int c = 0; v >= 0 && c < e->plan->n_crossings; c++) {
        const bt_crossing *x = &e->plan->crossings[c];
        if (x->src == -1 && x->value == v && bt_stage_is_local(e, x->dst)) return 1;
    }
    return 0;
}

bt_status bt_engine_set_local_feeds(bt_engine *e, int on)
{
    BT_TRY(bt_engine_check_usable(e));
    e->local_feeds = on != 0;
    return BT_OK;
}
