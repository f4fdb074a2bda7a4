/* profile/layer_run.c: one layer measured alone on one open device (see measure.h): a small
 * executor of its own, because a layer timed alone must not wait on channels or neighbours.
 *
 * The profiler allocates, on the device, every value the layer's nodes read or write (inputs from
 * outside the layer filled with small random floats, integer inputs such as labels and indices
 * with 0, which every op accepts), the value gradients the engine would keep (float values
 * produced by some node; graph inputs take none), the saved state, the parameters, their
 * gradients and optimizer state, and the largest workspace. Forward runs the nodes in order,
 * backward zeroes the gradients produced inside the layer (as the engine does per micro-batch)
 * and runs the nodes in reverse, step applies the optimizer to every parameter; the backward is
 * also timed split as zero-bubble schedules run it, B (no parameter gradients for the nodes whose
 * op has a weight kernel) and W (those nodes' weight gradients only). Each is timed
 * `repeats` times after `warmup` untimed runs, with a device sync inside the timed region, and
 * the median is kept. Op calls come from bt_op_call_build, the worker's builder.
 *
 * Precision (bt_profile_params.precision) is run as the worker runs it (src/exec/worker_nodes.c),
 * so that bf16 costs are bf16's: every op call carries it (call.precision: the CPU's bf16 GEMMs
 * and convolutions on AMX or AVX512-BF16 through oneDNN, the GPU's bf16/f16 GEMMs). Under
 * bf16/f16 the forward rounds each output a node wrote (not the graph's output, the loss) and each
 * fed graph input; the backward rounds a node's output gradient just before that node's backward
 * reads it (the loss's excepted); the ops read the parameters through a rounded compute copy (the
 * engine's w_lp), which the step refreshes after updating the f32 master weights (copy and round,
 * as bt_worker_refresh_lowp does; the engine refreshes a stage's flat arrays at once, the profile
 * each layer's tensors). Values arriving from other layers are rounded once before timing (the
 * engine's arrive rounded). W rounds nothing, as in the worker. The roundings the worker skips as
 * exact (graph/lowp_exact.h) are skipped here too (unless BATON_ROUND_SKIP=0), a value's only
 * consumer taken to be on its stage (where a plan cuts between them, the engine rounds that
 * gradient after all).
 * Not reproduced: the bf16 activation store of a CPU stage under bf16 (exec/bf16_store.c: a
 * store after each forward write and loads before later reads, whose number depends on the
 * schedule's slot reuse); and the once-a-step conversion of a refreshed weight copy to bf16 in the
 * CPU's parameter cache (gemm_bf16.c): the warm-up runs convert it and the timed forward and
 * backward read the cached copy, as every micro-batch after the step's first does. Tensors stay
 * f32 (dtype), as the engine's do under mixed precision.
 *
 * Data flow: graph (internal view) + backend table -> bt_profile_time. Never prints. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/util.h"
#include "graph/lowp_exact.h"
#include "graph/op_call.h"
#include "optim/optim.h"
#include "plan/memory.h"
#include "profile/measure.h"

/* Everything one layer's nodes touch, on one device. Values are indexed locally (0..n_vals). */
typedef struct layer_run {
    const bt_graph *g;
    const bt_layer *layer;
    const bt_backend *be;
    bt_device *dev;
    int64_t batch;
    const bt_optimizer_config *opt;
    bt_dtype precision;        /* the compute precision (worker_nodes.c: e->params.precision) */
    int out_value;             /* the graph's output (the loss): never rounded */
    int skip_exact;            /* BATON_ROUND_SKIP: skip the roundings the worker skips */
    int n_state;
    int n_vals;
    int *val;                  /* [n_vals] graph value ids */
    void **data, **grad;       /* [n_vals]; grad NULL where the engine keeps none */
    size_t *bytes;             /* [n_vals] */
    int *internal;             /* [n_vals] produced by a node of this layer */
    void **saved;              /* [n_nodes] */
    void **w, **gw;            /* [n_nodes * BT_MAX_PARAMS] */
    void **w_lp;               /* [n_nodes * BT_MAX_PARAMS] the rounded compute copies, or NULL
                                  entries under f32 (the engine's bt_param_store.w_lp) */
    void **state;              /* [n_nodes * BT_MAX_PARAMS * BT_OPTIM_MAX_STATE] */
    size_t *numel;             /* [n_nodes * BT_MAX_PARAMS] */
    void *ws;
    uint64_t rng;
} layer_run;

static int local_value(const layer_run *r, int value)
{
    for (int i = 0; i < r->n_vals; i++)
        if (r->val[i] == value) return i;
    return -1;
}

static bt_status dev_alloc(layer_run *r, size_t bytes, void **out)
{
    return r->be->alloc(r->dev, bytes ? bytes : 64, out);
}

static void dev_free(layer_run *r, void *p)
{
    if (p) r->be->free(r->dev, p);
}

/* Fills n f32 elements with values uniform in [-scale, scale]. */
static bt_status fill_random(layer_run *r, void *dst, size_t n, double scale)
{
    float *host = malloc(n * sizeof *host + 1);
    if (!host) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    for (size_t i = 0; i < n; i++) {
        r->rng = bt_mix64(r->rng);
        host[i] = (float)((((double)(r->rng >> 11) * 0x1.0p-53) * 2 - 1) * scale);
    }
    bt_status st = r->be->from_host(r->dev, dst, host, n * sizeof *host);
    free(host);
    return st;
}

/* Mixed precision: rounds n f32 elements to the compute precision (worker_nodes.c: round_value). */
static bt_status round_data(layer_run *r, void *data, size_t n)
{
    if (r->precision == BT_F32 || !data) return BT_OK;
    return r->be->round_to(r->dev, r->precision, data, n);
}

/* Elements of local value i in the micro-batch. */
static size_t value_elements(const layer_run *r, int i)
{
    return (size_t)r->batch * (size_t)bt_shape_numel(&r->g->values[r->val[i]].shape);
}

/* Whether local value i is rounded when written: a float value other than the graph's output. */
static int value_rounds(const layer_run *r, int i)
{
    return r->g->values[r->val[i]].dtype != BT_I32 && r->val[i] != r->out_value;
}

/* The rounded compute copy of a parameter refreshed from its master weights, as the engine's
 * bt_worker_refresh_lowp does it. */
static bt_status refresh_lowp(layer_run *r, size_t slot)
{
    if (!r->w_lp[slot]) return BT_OK;
    return bt_backend_refresh_copy(r->be, r->dev, r->precision, r->w_lp[slot], r->w[slot], r->numel[slot]);
}

size_t bt_profile_value_row_bytes(const bt_value *v)
{
    return (size_t)bt_shape_numel(&v->shape) * (v->dtype == BT_I32 ? 4 : sizeof(float));
}

static void run_free(layer_run *r)
{
    int slots = r->layer ? r->layer->n_nodes * BT_MAX_PARAMS : 0;
    for (int i = 0; i < r->n_vals; i++) {
        if (r->data) dev_free(r, r->data[i]);
        if (r->grad) dev_free(r, r->grad[i]);
    }
    for (int k = 0; r->saved && k < r->layer->n_nodes; k++) dev_free(r, r->saved[k]);
    for (int j = 0; j < slots; j++) {
        if (r->w) dev_free(r, r->w[j]);
        if (r->gw) dev_free(r, r->gw[j]);
        if (r->w_lp) dev_free(r, r->w_lp[j]);
        for (int s = 0; r->state && s < BT_OPTIM_MAX_STATE; s++)
            dev_free(r, r->state[j * BT_OPTIM_MAX_STATE + s]);
    }
    dev_free(r, r->ws);
    free(r->val);
    free(r->data);
    free(r->grad);
    free(r->bytes);
    free(r->internal);
    free(r->saved);
    free(r->w);
    free(r->gw);
    free(r->w_lp);
    free(r->state);
    free(r->numel);
}

/* Collects every value the layer's nodes read or write, in the order they first name them. */
static bt_status collect_values(layer_run *r)
{
    const bt_graph *g = r->g;
    const bt_layer *ly = r->layer;
    int cap = ly->n_nodes * (BT_MAX_INPUTS + 1);
    r->val = calloc((size_t)cap, sizeof *r->val);
    r->internal = calloc((size_t)cap, sizeof *r->internal);
    if (!r->val || !r->internal) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    for (int k = 0; k < ly->n_nodes; k++) {
        const bt_node *n = &g->nodes[ly->first_node + k];
        for (int i = 0; i < n->n_in; i++)
            if (local_value(r, n->in[i]) < 0) r->val[r->n_vals++] = n->in[i];
        int o = local_value(r, n->out);
        if (o < 0) o = r->n_vals++, r->val[o] = n->out;
        r->internal[o] = 1;
    }
    return BT_OK;
}

static bt_status alloc_values(layer_run *r)
{
    const bt_graph *g = r->g;
    size_t nv = (size_t)r->n_vals;
    r->data = calloc(nv, sizeof *r->data);
    r->grad = calloc(nv, sizeof *r->grad);
    r->bytes = calloc(nv, sizeof *r->bytes);
    if (!r->data || !r->grad || !r->bytes) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    for (int i = 0; i < r->n_vals; i++) {
        const bt_value *v = &g->values[r->val[i]];
        r->bytes[i] = bt_profile_value_row_bytes(v) * (size_t)r->batch;
        BT_TRY(dev_alloc(r, r->bytes[i], &r->data[i]));
        if (v->dtype == BT_I32) BT_TRY(r->be->zero(r->dev, r->data[i], r->bytes[i]));
        else BT_TRY(fill_random(r, r->data[i], r->bytes[i] / sizeof(float), 0.5));
        /* what arrives from another layer or the data is a value of the precision already */
        if (value_rounds(r, i)) BT_TRY(round_data(r, r->data[i], value_elements(r, i)));
        if (v->dtype != BT_I32 && v->producer >= 0) {
            BT_TRY(dev_alloc(r, r->bytes[i], &r->grad[i]));
            BT_TRY(r->be->zero(r->dev, r->grad[i], r->bytes[i]));
        }
    }
    return BT_OK;
}

static bt_status alloc_node_state(layer_run *r)
{
    const bt_graph *g = r->g;
    const bt_layer *ly = r->layer;
    size_t slots = (size_t)ly->n_nodes * BT_MAX_PARAMS;
    size_t ws = 0;
    r->saved = calloc((size_t)ly->n_nodes, sizeof *r->saved);
    r->w = calloc(slots, sizeof *r->w);
    r->gw = calloc(slots, sizeof *r->gw);
    r->w_lp = calloc(slots, sizeof *r->w_lp);
    r->numel = calloc(slots, sizeof *r->numel);
    r->state = calloc(slots * BT_OPTIM_MAX_STATE, sizeof *r->state);
    if (!r->saved || !r->w || !r->gw || !r->w_lp || !r->numel || !r->state)
        return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    for (int k = 0; k < ly->n_nodes; k++) {
        const bt_node *n = &g->nodes[ly->first_node + k];
        BT_TRY(dev_alloc(r, n->saved_per_sample * (size_t)r->batch, &r->saved[k]));
        size_t w = n->ws_per_sample * (size_t)r->batch + n->ws_fixed;
        if (w > ws) ws = w;
        for (int j = 0; j < n->n_params; j++) {
            const bt_param *p = &g->params[n->params[j]];
            size_t slot = (size_t)k * BT_MAX_PARAMS + (size_t)j;
            size_t numel = (size_t)bt_shape_numel(&p->shape), bytes = numel * sizeof(float);
            double scale = p->fan_in > 0 ? 1.0 / sqrt((double)p->fan_in) : 0.1;
            r->numel[slot] = numel;
            BT_TRY(dev_alloc(r, bytes, &r->w[slot]));
            BT_TRY(fill_random(r, r->w[slot], numel, scale));
            if (r->precision != BT_F32) { /* layout.c: a compute copy under mixed precision */
                BT_TRY(dev_alloc(r, bytes, &r->w_lp[slot]));
                BT_TRY(refresh_lowp(r, slot));
            }
            BT_TRY(dev_alloc(r, bytes, &r->gw[slot]));
            BT_TRY(fill_random(r, r->gw[slot], numel, 1e-3));
            for (int s = 0; s < r->n_state; s++) {
                void **st = &r->state[slot * BT_OPTIM_MAX_STATE + (size_t)s];
                BT_TRY(dev_alloc(r, bytes, st));
                BT_TRY(r->be->zero(r->dev, *st, bytes));
            }
        }
    }
    return dev_alloc(r, ws, &r->ws);
}

/* backward: 0 forward, 1 the fused backward, BT_RUN_WEIGHT W; split: B, the backward without the
 * parameter gradients of the nodes whose W comes later (the engine's split backward). */
static bt_status run_node_split(layer_run *r, int k, int backward, int split)
{
    const bt_graph *g = r->g;
    const bt_node *n = &g->nodes[r->layer->first_node + k];
    bt_op_call_data d;
    bt_op_call_tensors t;
    bt_op_call call;
    memset(&d, 0, sizeof d);
    for (int i = 0; i < n->n_in; i++) {
        int v = local_value(r, n->in[i]);
        d.in[i] = r->data[v];
        d.in_grad[i] = (n->no_grad_mask & (1u << i)) ? NULL : r->grad[v];
    }
    int o = local_value(r, n->out);
    d.out = r->data[o];
    d.out_grad = r->grad[o];
    int defers = bt_memory_node_has_wgrad(g, r->layer->first_node + k);
    if (backward == BT_RUN_WEIGHT)
        for (int i = 0; i < n->n_in; i++) d.in_grad[i] = NULL;
    for (int j = 0; j < n->n_params; j++) {
        size_t slot = (size_t)k * BT_MAX_PARAMS + (size_t)j;
        d.param[j] = r->w_lp[slot] ? r->w_lp[slot] : r->w[slot];
        d.param_grad[j] = backward == 1 && split && defers ? NULL : r->gw[slot];
    }
    d.saved = r->saved[k];
    d.workspace = r->ws;
    bt_op_call_build(g, r->layer->first_node + k, r->batch, BT_F32, backward, &d, &t, &call);
    call.precision = r->precision;
    call.seed = bt_mix64((uint64_t)(r->layer->first_node + k));
    call.training = 1;
    bt_status st = BT_OK;
    /* worker_nodes.c: an output gradient is rounded once complete, as its producer's backward
     * reads it, unless one exact consumer alone wrote it (taken to be on the same stage) */
    const int node = r->layer->first_node + k;
    if (backward == 1 && value_rounds(r, o) &&
        !(r->skip_exact && bt_lowp_grad_writer(g, n->out, r->precision, r->be->name) >= 0))
        st = round_data(r, r->grad[o], value_elements(r, o));
    if (st == BT_OK) st = bt_backend_run_op(r->be, r->dev, n->op, backward, &call);
    /* and an activation once its op wrote it, unless the op writes it exact */
    if (st == BT_OK && backward == 0 && value_rounds(r, o) &&
        !(r->skip_exact && bt_lowp_output_exact(g, node, r->precision, r->be->name)))
        st = round_data(r, r->data[o], value_elements(r, o));
    if (st != BT_OK)
        return bt_error_context(st, "profiling the %s of layer '%s'",
                                backward == BT_RUN_WEIGHT ? "weight gradient" : backward ? "backward" : "forward",
                                r->layer->name);
    return BT_OK;
}

static bt_status run_node(layer_run *r, int k, int backward) { return run_node_split(r, k, backward, 0); }

static bt_status run_forward(layer_run *r)
{
    /* worker_nodes.c, feed_inputs: a graph input the layer reads is rounded as it is copied in */
    for (int i = 0; i < r->n_vals; i++)
        if (r->g->values[r->val[i]].producer < 0 && value_rounds(r, i))
            BT_TRY(round_data(r, r->data[i], value_elements(r, i)));
    for (int k = 0; k < r->layer->n_nodes; k++) BT_TRY(run_node(r, k, 0));
    return r->be->sync(r->dev);
}

static bt_status run_backward(layer_run *r)
{
    /* the layer's own output gradient stands for what the next layer hands back; the rest is
     * zeroed each time, like the engine's per-micro-batch gradient buffer */
    int out = local_value(r, r->g->nodes[r->layer->first_node + r->layer->n_nodes - 1].out);
    for (int i = 0; i < r->n_vals; i++)
        if (r->internal[i] && i != out && r->grad[i]) BT_TRY(r->be->zero(r->dev, r->grad[i], r->bytes[i]));
    for (int k = r->layer->n_nodes - 1; k >= 0; k--) BT_TRY(run_node(r, k, 1));
    return r->be->sync(r->dev);
}

/* B of a split backward: input gradients only where a node's W comes later. */
static bt_status run_backward_input(layer_run *r)
{
    int out = local_value(r, r->g->nodes[r->layer->first_node + r->layer->n_nodes - 1].out);
    for (int i = 0; i < r->n_vals; i++)
        if (r->internal[i] && i != out && r->grad[i]) BT_TRY(r->be->zero(r->dev, r->grad[i], r->bytes[i]));
    for (int k = r->layer->n_nodes - 1; k >= 0; k--) BT_TRY(run_node_split(r, k, 1, 1));
    return r->be->sync(r->dev);
}

/* W: the weight gradients of the nodes that defer them (the output gradients B left in place). */
static bt_status run_weight(layer_run *r)
{
    for (int k = r->layer->n_nodes - 1; k >= 0; k--)
        if (bt_memory_node_has_wgrad(r->g, r->layer->first_node + k)) BT_TRY(run_node_split(r, k, BT_RUN_WEIGHT, 1));
    return r->be->sync(r->dev);
}

static bt_status run_step(layer_run *r)
{
    for (int k = 0; k < r->layer->n_nodes; k++) {
        const bt_node *n = &r->g->nodes[r->layer->first_node + k];
        for (int j = 0; j < n->n_params; j++) {
            size_t slot = (size_t)k * BT_MAX_PARAMS + (size_t)j;
            BT_TRY(r->be->optimizer_update(r->dev, r->opt, BT_F32, r->w[slot], r->gw[slot],
                                           &r->state[slot * BT_OPTIM_MAX_STATE], r->numel[slot],
                                           1e-6, 1, 1.0));
            BT_TRY(refresh_lowp(r, slot));
        }
    }
    return r->be->sync(r->dev);
}

/* Median time of fn over repeats runs after warmup runs (the fastest run with `fastest`). */
static bt_status time_median(bt_status (*fn)(layer_run *), layer_run *r, int warmup, int repeats,
                             int fastest, double *out)
{
    double *t = malloc((size_t)repeats * sizeof *t);
    if (!t) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    bt_status st = BT_OK;
    for (int i = 0; i < warmup; i++) BT_TRY_GOTO(st, fn(r), done);
    for (int i = 0; i < repeats; i++) {
        double t0 = bt_now_ms();
        BT_TRY_GOTO(st, fn(r), done);
        t[i] = bt_now_ms() - t0;
    }
    *out = bt_median(t, repeats);
    for (int i = 0; fastest && i < repeats; i++)
        if (t[i] < *out) *out = t[i];
done:
    free(t);
    return st;
}

bt_status bt_profile_measure_layer(const bt_graph *g, int l, const bt_backend *be, bt_device *dev,
                                   const bt_profile_params *pp, bt_profile_time *out)
{
    bt_status st = BT_OK;
    layer_run r;
    memset(&r, 0, sizeof r);
    r.g = g;
    r.layer = &g->layers[l];
    r.be = be;
    r.dev = dev;
    r.batch = pp->batch / pp->microbatches;
    r.opt = &pp->optimizer;
    r.precision = pp->precision;
    r.out_value = bt_graph_output_value(g);
    BT_TRY(bt_lowp_skip_enabled(&r.skip_exact));
    r.n_state = pp->training ? bt_optim_state_count(&pp->optimizer) : 0;
    r.rng = bt_mix64(pp->seed ^ (uint64_t)(l + 1));
    memset(out, 0, sizeof *out);
    BT_TRY_GOTO(st, collect_values(&r), done);
    BT_TRY_GOTO(st, alloc_values(&r), done);
    BT_TRY_GOTO(st, alloc_node_state(&r), done);
    BT_TRY_GOTO(st, time_median(run_forward, &r, pp->warmup, pp->repeats, pp->fastest, &out->fwd_ms), done);
    if (pp->training) {
        int o = local_value(&r, g->nodes[r.layer->first_node + r.layer->n_nodes - 1].out);
        if (r.grad[o]) BT_TRY_GOTO(st, fill_random(&r, r.grad[o], r.bytes[o] / sizeof(float), 1e-2), done);
        BT_TRY_GOTO(st, time_median(run_backward, &r, pp->warmup, pp->repeats, pp->fastest, &out->bwd_ms), done);
        BT_TRY_GOTO(st, time_median(run_backward_input, &r, pp->warmup, pp->repeats, pp->fastest, &out->b_ms), done);
        int has_w = 0;
        for (int k = 0; k < r.layer->n_nodes; k++) has_w |= bt_memory_node_has_wgrad(g, r.layer->first_node + k);
        if (has_w) BT_TRY_GOTO(st, time_median(run_weight, &r, pp->warmup, pp->repeats, pp->fastest, &out->w_ms), done);
        int has_params = 0;
        for (int k = 0; k < r.layer->n_nodes; k++) has_params |= g->nodes[r.layer->first_node + k].n_params > 0;
        if (has_params) BT_TRY_GOTO(st, time_median(run_step, &r, pp->warmup, pp->repeats, pp->fastest, &out->step_ms), done);
    }
done:
    run_free(&r);
    return st;
}

/* ---- bytes ------------------------------------------------------------------------------------ */
