/* plan/profile.c: measuring a model's layers on devices, and the profile file (see profile.h).
 *
 * A layer is measured alone: the profiler allocates, on the device, every value its nodes read
 * or write (inputs from outside the layer filled with small random floats, integer inputs such as
 * labels and indices with 0, which every op accepts), the value gradients the engine would keep
 * (float values produced by some node; graph inputs take none), the saved state, the parameters,
 * their gradients and optimizer state, and the largest workspace. Forward runs the nodes in
 * order, backward zeroes the gradients produced inside the layer (as the engine does per
 * micro-batch) and runs the nodes in reverse, step applies the optimizer to every parameter.
 * Each is timed `repeats` times after `warmup` untimed runs, with a device sync inside the timed
 * region, and the median is kept.
 *
 * The file is one JSON object (format "baton-profile", version 1); docs/profiling.md shows it.
 * Loading checks every field's presence, type and range and rejects unknown keys, so a profile
 * that loads is one the planner can use without further checks.
 *
 * Data flow: graph (internal view) + backend table -> bt_profile <-> file. Never prints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "core/util.h"
#include "backend/backend.h"
#include "core/error.h"
#include "core/strutil.h"
#include "graph/graph_internal.h"
#include "io/atomic_file.h"
#include "plan/profile.h"
#include "optim/optim.h"

void bt_profile_params_init(bt_profile_params *p)
{
    memset(p, 0, sizeof *p);
    p->devices = "cpu:0";
    p->batch = 32;
    p->microbatches = 1;
    p->training = 1;
    bt_train_config tc;
    bt_train_config_init(&tc);
    p->optimizer = tc.optimizer;
    p->repeats = 10;
    p->warmup = 2;
    p->threads = 1;
    p->transfer_bytes = (size_t)8 << 20;
}

void bt_profile_destroy(bt_profile *p)
{
    if (!p) return;
    for (int l = 0; p->layers && l < p->n_layers; l++) {
        free(p->layers[l].name);
        free(p->layers[l].op);
        free(p->layers[l].act);
    }
    free(p->layers);
    free(p->times);
    free(p->transfers);
    free(p->model);
    free(p);
}

bt_status bt_profile_parse_devices(const char *list, char (*devices)[BT_PROFILE_DEVICE_LEN], int max,
                                   int *n)
{
    *n = 0;
    if (!list || !*list) return bt_error(BT_ERR_INVALID_ARG, "no devices given (expected cpu:0,cpu:1)");
    const char *p = list;
    for (;;) {
        while (*p == ' ') p++;
        size_t len = strcspn(p, ",");
        size_t trimmed = len;
        while (trimmed > 0 && p[trimmed - 1] == ' ') trimmed--;
        if (trimmed == 0 || trimmed >= BT_PROFILE_DEVICE_LEN)
            return bt_error(BT_ERR_INVALID_ARG, "devices '%s': empty or overlong entry", list);
        if (*n >= max)
            return bt_error(BT_ERR_INVALID_ARG, "devices '%s': more than %d devices", list, max);
        memcpy(devices[*n], p, trimmed);
        devices[*n][trimmed] = '\0';
        char kind[16];
        int index;
        BT_TRY(bt_device_parse(devices[*n], kind, sizeof kind, &index));
        (*n)++;
        p += len;
        if (!*p) break;
        p++;
    }
    return BT_OK;
}

int bt_profile_kind_index(const bt_profile *p, const char *kind)
{
    for (int k = 0; k < p->n_kinds; k++)
        if (strcmp(p->kinds[k], kind) == 0) return k;
    return -1;
}

const bt_profile_time *bt_profile_time_at(const bt_profile *p, int layer, int kind)
{
    return &p->times[(size_t)layer * (size_t)p->n_kinds + (size_t)kind];
}

static void device_kind(const char *device, char *kind, size_t size)
{
    size_t n = strcspn(device, ":");
    if (n >= size) n = size - 1;
    memcpy(kind, device, n);
    kind[n] = '\0';
}

double bt_profile_rate(const bt_profile *p, const char *from, const char *to)
{
    char kf[16], kt[16], a[16], b[16];
    double slowest = 0;
    device_kind(from, kf, sizeof kf);
    device_kind(to, kt, sizeof kt);
    for (int i = 0; i < p->n_transfers; i++) {
        const bt_profile_transfer *t = &p->transfers[i];
        if (strcmp(t->from, from) == 0 && strcmp(t->to, to) == 0) return t->gb_per_s;
        device_kind(t->from, a, sizeof a);
        device_kind(t->to, b, sizeof b);
        if (strcmp(a, kf) == 0 && strcmp(b, kt) == 0 && (slowest == 0 || t->gb_per_s < slowest))
            slowest = t->gb_per_s;
    }
    return slowest;
}

bt_status bt_profile_check_graph(const bt_profile *p, const bt_graph *g, const char *what)
{
    const char *src = what ? what : "the profile";
    if (p->n_layers != g->n_layers)
        return bt_error(BT_ERR_MODEL, "%s has %d layers but the model has %d: profile this model again",
                        src, p->n_layers, g->n_layers);
    for (int l = 0; l < g->n_layers; l++) {
        const bt_layer *ly = &g->layers[l];
        if (strcmp(p->layers[l].name, ly->name) != 0 || strcmp(p->layers[l].op, ly->op_name) != 0)
            return bt_error(BT_ERR_MODEL,
                            "%s: layer %d is '%s' (%s) but the model's is '%s' (%s): profile this "
                            "model again",
                            src, l, p->layers[l].name, p->layers[l].op, ly->name, ly->op_name);
    }
    return BT_OK;
}

/* ---- measuring one layer ---------------------------------------------------------------------- */

/* Everything one layer's nodes touch, on one device. Values are indexed locally (0..n_vals). */
typedef struct layer_run {
    const bt_graph *g;
    const bt_layer *layer;
    const bt_backend *be;
    bt_device *dev;
    int64_t batch;
    const bt_optimizer_config *opt;
    int n_state;
    int n_vals;
    int *val;                  /* [n_vals] graph value ids */
    void **data, **grad;       /* [n_vals]; grad NULL where the engine keeps none */
    size_t *bytes;             /* [n_vals] */
    int *internal;             /* [n_vals] produced by a node of this layer */
    void **saved;              /* [n_nodes] */
    void **w, **gw;            /* [n_nodes * BT_MAX_PARAMS] */
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

static size_t value_row_bytes(const bt_value *v)
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
        r->bytes[i] = value_row_bytes(v) * (size_t)r->batch;
        BT_TRY(dev_alloc(r, r->bytes[i], &r->data[i]));
        if (v->dtype == BT_I32) BT_TRY(r->be->zero(r->dev, r->data[i], r->bytes[i]));
        else BT_TRY(fill_random(r, r->data[i], r->bytes[i] / sizeof(float), 0.5));
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
    r->numel = calloc(slots, sizeof *r->numel);
    r->state = calloc(slots * BT_OPTIM_MAX_STATE, sizeof *r->state);
    if (!r->saved || !r->w || !r->gw || !r->numel || !r->state)
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

static void make_tensor(bt_tensor *t, void *data, const bt_value *v, int64_t batch)
{
    memset(t, 0, sizeof *t);
    t->data = data;
    t->dtype = v->dtype == BT_I32 ? BT_I32 : BT_F32;
    t->ndim = v->shape.ndim + 1;
    t->dim[0] = batch;
    for (int i = 0; i < v->shape.ndim; i++) t->dim[i + 1] = v->shape.dim[i];
}

static void make_param_tensor(bt_tensor *t, void *data, const bt_param *p)
{
    memset(t, 0, sizeof *t);
    t->data = data;
    t->dtype = BT_F32;
    t->ndim = p->shape.ndim;
    for (int i = 0; i < p->shape.ndim; i++) t->dim[i] = p->shape.dim[i];
}

static bt_status run_node(layer_run *r, int k, int backward)
{
    const bt_graph *g = r->g;
    const bt_node *n = &g->nodes[r->layer->first_node + k];
    bt_tensor in[BT_MAX_INPUTS], out, param[BT_MAX_PARAMS], param_grad[BT_MAX_PARAMS];
    bt_tensor out_grad, in_grad[BT_MAX_INPUTS];
    bt_op_call call;
    memset(&call, 0, sizeof call);
    for (int i = 0; i < n->n_in; i++) {
        int v = local_value(r, n->in[i]);
        make_tensor(&in[i], r->data[v], &g->values[n->in[i]], r->batch);
        in_grad[i] = in[i];
        in_grad[i].data = (n->no_grad_mask & (1u << i)) ? NULL : r->grad[v];
    }
    int o = local_value(r, n->out);
    make_tensor(&out, r->data[o], &g->values[n->out], r->batch);
    make_tensor(&out_grad, r->grad[o], &g->values[n->out], r->batch);
    for (int j = 0; j < n->n_params; j++) {
        size_t slot = (size_t)k * BT_MAX_PARAMS + (size_t)j;
        make_param_tensor(&param[j], r->w[slot], &g->params[n->params[j]]);
        make_param_tensor(&param_grad[j], r->gw[slot], &g->params[n->params[j]]);
    }
    call.batch = r->batch;
    call.n_in = n->n_in;
    call.in = in;
    call.out = &out;
    call.n_params = n->n_params;
    call.param = param;
    call.saved = r->saved[k];
    call.workspace = r->ws;
    call.config = n->config;
    call.seed = bt_mix64((uint64_t)(r->layer->first_node + k));
    call.training = 1;
    if (backward) {
        call.param_grad = param_grad;
        call.out_grad = &out_grad;
        call.in_grad = in_grad;
    }
    bt_status st = r->be->run_op(r->dev, n->op, backward, &call);
    if (st != BT_OK)
        return bt_error_context(st, "profiling the %s of layer '%s'", backward ? "backward" : "forward",
                                r->layer->name);
    return BT_OK;
}

static bt_status run_forward(layer_run *r)
{
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

static bt_status run_step(layer_run *r)
{
    for (int k = 0; k < r->layer->n_nodes; k++) {
        const bt_node *n = &r->g->nodes[r->layer->first_node + k];
        for (int j = 0; j < n->n_params; j++) {
            size_t slot = (size_t)k * BT_MAX_PARAMS + (size_t)j;
            BT_TRY(r->be->optimizer_update(r->dev, r->opt, BT_F32, r->w[slot], r->gw[slot],
                                           &r->state[slot * BT_OPTIM_MAX_STATE], r->numel[slot],
                                           1e-6, 1, 1.0));
        }
    }
    return r->be->sync(r->dev);
}

/* Median time of fn over repeats runs after warmup runs. */
static bt_status time_median(bt_status (*fn)(layer_run *), layer_run *r, int warmup, int repeats,
                             double *out)
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
done:
    free(t);
    return st;
}

static bt_status measure_layer(const bt_graph *g, int l, const bt_backend *be, bt_device *dev,
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
    r.n_state = pp->training ? bt_optim_state_count(&pp->optimizer) : 0;
    r.rng = bt_mix64(pp->seed ^ (uint64_t)(l + 1));
    memset(out, 0, sizeof *out);
    BT_TRY_GOTO(st, collect_values(&r), done);
    BT_TRY_GOTO(st, alloc_values(&r), done);
    BT_TRY_GOTO(st, alloc_node_state(&r), done);
    BT_TRY_GOTO(st, time_median(run_forward, &r, pp->warmup, pp->repeats, &out->fwd_ms), done);
    if (pp->training) {
        int o = local_value(&r, g->nodes[r.layer->first_node + r.layer->n_nodes - 1].out);
        if (r.grad[o]) BT_TRY_GOTO(st, fill_random(&r, r.grad[o], r.bytes[o] / sizeof(float), 1e-2), done);
        BT_TRY_GOTO(st, time_median(run_backward, &r, pp->warmup, pp->repeats, &out->bwd_ms), done);
        int has_params = 0;
        for (int k = 0; k < r.layer->n_nodes; k++) has_params |= g->nodes[r.layer->first_node + k].n_params > 0;
        if (has_params) BT_TRY_GOTO(st, time_median(run_step, &r, pp->warmup, pp->repeats, &out->step_ms), done);
    }
done:
    run_free(&r);
    return st;
}

/* ---- bytes ------------------------------------------------------------------------------------ */

/* last_read[v]: the last layer reading value v (-1: none). */
static int *last_readers(const bt_graph *g)
{
    int *last = malloc(((size_t)g->n_values + 1) * sizeof *last);
    if (!last) return NULL;
    for (int v = 0; v < g->n_values; v++) last[v] = -1;
    for (int n = 0; n < g->n_nodes; n++)
        for (int i = 0; i < g->nodes[n].n_in; i++)
            if (g->nodes[n].layer > last[g->nodes[n].in[i]]) last[g->nodes[n].in[i]] = g->nodes[n].layer;
    return last;
}

static void layer_bytes(const bt_graph *g, int l, const int *last_read, const bt_profile_params *pp,
                        bt_profile_layer *out)
{
    const bt_layer *ly = &g->layers[l];
    int64_t params = 0;
    uint64_t act = 0;
    for (int k = 0; k < ly->n_nodes; k++) {
        const bt_node *n = &g->nodes[ly->first_node + k];
        for (int j = 0; j < n->n_params; j++) params += bt_shape_numel(&g->params[n->params[j]].shape);
        act += value_row_bytes(&g->values[n->out]) + n->saved_per_sample;
    }
    out->params = params;
    out->param_bytes = (uint64_t)params * sizeof(float);
    out->grad_bytes = pp->training ? out->param_bytes : 0;
    out->optimizer_bytes =
        pp->training ? out->param_bytes * (uint64_t)bt_optim_state_count(&pp->optimizer) : 0;
    out->activation_bytes_per_sample = act;
    out->output_bytes_per_sample = value_row_bytes(&g->values[g->nodes[ly->first_node + ly->n_nodes - 1].out]);
    uint64_t cut = 0;
    for (int v = 0; v < g->n_values; v++) {
        const bt_value *val = &g->values[v];
        if (val->producer >= 0 && g->nodes[val->producer].layer <= l && last_read[v] > l)
            cut += value_row_bytes(val);
    }
    out->cut_bytes_per_sample = cut;
}

static const char *optimizer_name(const bt_profile_params *pp)
{
    if (!pp->training) return "none";
    if (pp->optimizer.kind == BT_OPT_ADAMW) return "adamw";
    return pp->optimizer.momentum > 0 ? "sgd-momentum" : "sgd";
}

/* ---- transfers -------------------------------------------------------------------------------- */

typedef struct open_device {
    const bt_backend *be;
    bt_device *dev;
} open_device;

static bt_status open_one(const char *spec, int threads, open_device *out)
{
    char kind[16];
    int index;
    BT_TRY(bt_device_parse(spec, kind, sizeof kind, &index));
    out->be = bt_backend_find(kind);
    if (!out->be) return bt_error_context(BT_ERR_UNSUPPORTED, "profiling on %s", spec);
    BT_TRY(out->be->open(index, threads, &out->dev));
    return out->be->bind_thread(out->dev);
}

static void close_one(open_device *d)
{
    if (d->dev) d->be->close(d->dev);
    d->dev = NULL;
}

/* Device -> host buffer -> device, as a channel moves a message; GB/s of the whole path. */
static bt_status measure_transfer(open_device *from, open_device *to, const bt_profile_params *pp,
                                  double *gb_per_s)
{
    bt_status st = BT_OK;
    size_t bytes = pp->transfer_bytes;
    int repeats = pp->repeats < 3 ? 3 : pp->repeats;
    void *src = NULL, *dst = NULL;
    unsigned char *host = malloc(bytes);
    double *t = malloc((size_t)repeats * sizeof *t);
    if (!host || !t) {
        st = bt_error(BT_ERR_NOMEM, "profile: out of memory for a %zu-byte transfer", bytes);
        goto done;
    }
    BT_TRY_GOTO(st, from->be->alloc(from->dev, bytes, &src), done);
    BT_TRY_GOTO(st, to->be->alloc(to->dev, bytes, &dst), done);
    memset(host, 1, bytes);
    BT_TRY_GOTO(st, from->be->from_host(from->dev, src, host, bytes), done);
    for (int i = -1; i < repeats; i++) { /* i = -1: warm-up (first touch of the pages) */
        double t0 = bt_now_ms();
        BT_TRY_GOTO(st, from->be->to_host(from->dev, host, src, bytes), done);
        BT_TRY_GOTO(st, from->be->sync(from->dev), done);
        BT_TRY_GOTO(st, to->be->from_host(to->dev, dst, host, bytes), done);
        BT_TRY_GOTO(st, to->be->sync(to->dev), done);
        if (i >= 0) t[i] = bt_now_ms() - t0;
    }
    double ms = bt_median(t, repeats);
    *gb_per_s = (double)bytes / ((ms > 1e-6 ? ms : 1e-6) * 1e6);
done:
    if (src) from->be->free(from->dev, src);
    if (dst) to->be->free(to->dev, dst);
    free(host);
    free(t);
    return st;
}

static bt_status measure_transfers(bt_profile *prof, const bt_profile_params *pp)
{
    bt_status st = BT_OK;
    int n = prof->n_devices;
    open_device dev[BT_MAX_STAGES];
    memset(dev, 0, sizeof dev);
    prof->transfers = calloc((size_t)(n * n) + 1, sizeof *prof->transfers);
    if (!prof->transfers) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    for (int i = 0; i < n; i++) BT_TRY_GOTO(st, open_one(prof->devices[i], pp->threads, &dev[i]), done);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j) continue;
            bt_profile_transfer *t = &prof->transfers[prof->n_transfers];
            snprintf(t->from, sizeof t->from, "%s", prof->devices[i]);
            snprintf(t->to, sizeof t->to, "%s", prof->devices[j]);
            t->bytes = pp->transfer_bytes;
            BT_TRY_GOTO(st, measure_transfer(&dev[i], &dev[j], pp, &t->gb_per_s), done);
            prof->n_transfers++;
        }
done:
    for (int i = 0; i < n; i++) close_one(&dev[i]);
    return st;
}

/* ---- the whole model -------------------------------------------------------------------------- */

static bt_status check_params(const bt_graph *g, const bt_profile_params *pp)
{
    if (!g || !pp) return bt_error(BT_ERR_INVALID_ARG, "bt_profile_measure: NULL argument");
    if (g->n_layers == 0) return bt_error(BT_ERR_MODEL, "the model has no layers");
    if (pp->microbatches < 1 || pp->batch < 1 || pp->batch % pp->microbatches != 0)
        return bt_error(BT_ERR_INVALID_ARG, "batch %lld does not split into %d equal micro-batches",
                        (long long)pp->batch, pp->microbatches);
    if (pp->repeats < 1 || pp->warmup < 0 || pp->threads < 1)
        return bt_error(BT_ERR_INVALID_ARG, "profile: repeats must be >= 1, warm-ups >= 0, threads >= 1");
    if (pp->transfer_bytes < 4096)
        return bt_error(BT_ERR_INVALID_ARG, "profile: transfer size %zu is below 4096 bytes",
                        pp->transfer_bytes);
    if (pp->training && !bt_graph_is_trainable(g))
        return bt_error(BT_ERR_MODEL, "cannot profile training: the last layer must be a loss");
    return BT_OK;
}

static bt_status measure_kinds(const bt_graph *g, const bt_profile_params *pp, bt_profile *prof)
{
    for (int d = 0; d < prof->n_devices; d++) {
        char kind[16];
        device_kind(prof->devices[d], kind, sizeof kind);
        if (bt_profile_kind_index(prof, kind) >= 0) continue;
        if (prof->n_kinds == BT_PROFILE_MAX_KINDS)
            return bt_error(BT_ERR_INVALID_ARG, "profile: more than %d device kinds", BT_PROFILE_MAX_KINDS);
        snprintf(prof->kinds[prof->n_kinds], sizeof prof->kinds[0], "%s", kind);
        snprintf(prof->measured_on[prof->n_kinds], sizeof prof->measured_on[0], "%s", prof->devices[d]);
        prof->n_kinds++;
    }
    prof->times = calloc((size_t)prof->n_layers * (size_t)prof->n_kinds, sizeof *prof->times);
    if (!prof->times) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    for (int k = 0; k < prof->n_kinds; k++) {
        open_device dev = {0};
        bt_status st = open_one(prof->measured_on[k], pp->threads, &dev);
        for (int l = 0; st == BT_OK && l < prof->n_layers; l++)
            st = measure_layer(g, l, dev.be, dev.dev, pp, &prof->times[(size_t)l * prof->n_kinds + k]);
        close_one(&dev);
        BT_TRY(st);
    }
    return BT_OK;
}

bt_status bt_profile_measure(const bt_graph *g, const char *model_name, const bt_profile_params *pp,
                             bt_profile **out)
{
    bt_status st = BT_OK;
    int *last_read = NULL;
    BT_TRY(check_params(g, pp));
    bt_profile *prof = calloc(1, sizeof *prof);
    if (!prof) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    BT_TRY_GOTO(st, bt_profile_parse_devices(pp->devices, prof->devices, BT_MAX_STAGES, &prof->n_devices), fail);
    prof->model = bt_strdup(model_name ? model_name : "model");
    prof->layers = calloc((size_t)g->n_layers, sizeof *prof->layers);
    if (!prof->model || !prof->layers) {
        st = bt_error(BT_ERR_NOMEM, "profile: out of memory");
        goto fail;
    }
    prof->batch = pp->batch;
    prof->microbatches = pp->microbatches;
    prof->microbatch_size = pp->batch / pp->microbatches;
    prof->training = pp->training != 0;
    snprintf(prof->optimizer, sizeof prof->optimizer, "%s", optimizer_name(pp));
    prof->threads = pp->threads;
    prof->repeats = pp->repeats;
    prof->warmup = pp->warmup;
    prof->n_layers = g->n_layers;
    if (!(last_read = last_readers(g))) {
        st = bt_error(BT_ERR_NOMEM, "profile: out of memory");
        goto fail;
    }
    for (int l = 0; l < g->n_layers; l++) {
        bt_profile_layer *pl = &prof->layers[l];
        pl->name = bt_strdup(g->layers[l].name);
        pl->op = bt_strdup(g->layers[l].op_name);
        pl->act = g->layers[l].act ? bt_strdup(g->layers[l].act) : NULL;
        if (!pl->name || !pl->op || (g->layers[l].act && !pl->act)) {
            st = bt_error(BT_ERR_NOMEM, "profile: out of memory");
            goto fail;
        }
        layer_bytes(g, l, last_read, pp, pl);
    }
    BT_TRY_GOTO(st, measure_kinds(g, pp, prof), fail);
    BT_TRY_GOTO(st, measure_transfers(prof, pp), fail);
    free(last_read);
    *out = prof;
    return BT_OK;
fail:
    free(last_read);
    bt_profile_destroy(prof);
    return st;
}

/* ---- saving ----------------------------------------------------------------------------------- */

#define PROFILE_FORMAT "baton-profile"
#define PROFILE_VERSION 1

/* Sets obj[key] = v (stealing v); returns 1 on failure so callers can OR the results. */
static int put(json_t *obj, const char *key, json_t *v)
{
    return !obj || !v || json_object_set_new(obj, key, v) != 0;
}

static int append(json_t *arr, json_t *v)
{
    return !arr || !v || json_array_append_new(arr, v) != 0;
}

static json_t *layer_to_json(const bt_profile *p, int l)
{
    const bt_profile_layer *pl = &p->layers[l];
    json_t *o = json_object(), *times = json_object();
    int bad = 0;
    bad |= put(o, "name", json_string(pl->name));
    bad |= put(o, "op", json_string(pl->op));
    if (pl->act) bad |= put(o, "act", json_string(pl->act));
    bad |= put(o, "params", json_integer(pl->params));
    bad |= put(o, "param_bytes", json_integer((json_int_t)pl->param_bytes));
    bad |= put(o, "grad_bytes", json_integer((json_int_t)pl->grad_bytes));
    bad |= put(o, "optimizer_bytes", json_integer((json_int_t)pl->optimizer_bytes));
    bad |= put(o, "activation_bytes_per_sample", json_integer((json_int_t)pl->activation_bytes_per_sample));
    bad |= put(o, "output_bytes_per_sample", json_integer((json_int_t)pl->output_bytes_per_sample));
    bad |= put(o, "cut_bytes_per_sample", json_integer((json_int_t)pl->cut_bytes_per_sample));
    for (int k = 0; k < p->n_kinds; k++) {
        const bt_profile_time *t = bt_profile_time_at(p, l, k);
        json_t *tk = json_object();
        bad |= put(tk, "fwd_ms", json_real(t->fwd_ms));
        bad |= put(tk, "bwd_ms", json_real(t->bwd_ms));
        bad |= put(tk, "step_ms", json_real(t->step_ms));
        bad |= put(times, p->kinds[k], tk);
    }
    bad |= put(o, "times", times);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *profile_to_json(const bt_profile *p)
{
    json_t *root = json_object(), *devices = json_array(), *measured = json_object();
    json_t *layers = json_array(), *transfers = json_array();
    int bad = 0;
    bad |= put(root, "format", json_string(PROFILE_FORMAT));
    bad |= put(root, "version", json_integer(PROFILE_VERSION));
    bad |= put(root, "model", json_string(p->model));
    for (int d = 0; d < p->n_devices; d++) bad |= append(devices, json_string(p->devices[d]));
    bad |= put(root, "devices", devices);
    bad |= put(root, "batch", json_integer(p->batch));
    bad |= put(root, "microbatches", json_integer(p->microbatches));
    bad |= put(root, "microbatch_size", json_integer(p->microbatch_size));
    bad |= put(root, "dtype", json_string("f32"));
    bad |= put(root, "training", json_boolean(p->training));
    bad |= put(root, "optimizer", json_string(p->optimizer));
    bad |= put(root, "threads", json_integer(p->threads));
    bad |= put(root, "repeats", json_integer(p->repeats));
    bad |= put(root, "warmup", json_integer(p->warmup));
    for (int k = 0; k < p->n_kinds; k++) bad |= put(measured, p->kinds[k], json_string(p->measured_on[k]));
    bad |= put(root, "measured_on", measured);
    for (int l = 0; l < p->n_layers; l++) bad |= append(layers, layer_to_json(p, l));
    bad |= put(root, "layers", layers);
    for (int i = 0; i < p->n_transfers; i++) {
        const bt_profile_transfer *t = &p->transfers[i];
        json_t *o = json_object();
        bad |= put(o, "from", json_string(t->from));
        bad |= put(o, "to", json_string(t->to));
        bad |= put(o, "bytes", json_integer((json_int_t)t->bytes));
        bad |= put(o, "gb_per_s", json_real(t->gb_per_s));
        bad |= append(transfers, o);
    }
    bad |= put(root, "transfers", transfers);
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return root;
}

bt_status bt_profile_save(const bt_profile *p, const char *path)
{
    if (!p || !path) return bt_error(BT_ERR_INVALID_ARG, "bt_profile_save: NULL argument");
    json_t *root = profile_to_json(p);
    char *text = root ? json_dumps(root, JSON_INDENT(2)) : NULL;
    json_decref(root);
    if (!text) return bt_error(BT_ERR_NOMEM, "profile: out of memory writing %s", path);
    bt_atomic_file *f = NULL;
    bt_status st = bt_atomic_file_open(path, &f);
    if (st == BT_OK) st = bt_atomic_file_write(f, text, strlen(text));
    if (st == BT_OK) st = bt_atomic_file_write(f, "\n", 1);
    if (st == BT_OK) st = bt_atomic_file_commit(f);
    else bt_atomic_file_abort(f);
    free(text);
    return st;
}

/* ---- loading ---------------------------------------------------------------------------------- */

typedef struct reader {
    const char *file;
} reader;

static const char *field_name(char *buf, size_t size, const char *prefix, const char *key)
{
    if (*prefix) snprintf(buf, size, "%s.%s", prefix, key);
    else snprintf(buf, size, "%s", key);
    return buf;
}

static bt_status bad_field(const reader *r, const char *prefix, const char *key, const char *what)
{
    char f[256];
    return bt_error(BT_ERR_IO, "%s: field '%s': %s", r->file, field_name(f, sizeof f, prefix, key), what);
}

static bt_status member(const reader *r, const json_t *obj, const char *prefix, const char *key,
                        json_t **out)
{
    char f[256];
    *out = json_object_get(obj, key);
    if (!*out)
        return bt_error(BT_ERR_IO, "%s: missing field '%s'", r->file, field_name(f, sizeof f, prefix, key));
    return BT_OK;
}

static bt_status only_keys(const reader *r, json_t *obj, const char *prefix, const char *const *keys)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        int known = 0;
        for (const char *const *k = keys; *k; k++) known |= strcmp(*k, key) == 0;
        if (!known) return bad_field(r, prefix, key, "unknown field");
    }
    return BT_OK;
}

static bt_status read_string(const reader *r, const json_t *obj, const char *prefix, const char *key,
                             size_t max_len, const char **out)
{
    json_t *v;
    BT_TRY(member(r, obj, prefix, key, &v));
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= max_len)
        return bad_field(r, prefix, key, "expected a non-empty string");
    *out = json_string_value(v);
    return BT_OK;
}

static bt_status read_int(const reader *r, const json_t *obj, const char *prefix, const char *key,
                          int64_t min, int64_t max, int64_t *out)
{
    json_t *v;
    char what[96];
    BT_TRY(member(r, obj, prefix, key, &v));
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        snprintf(what, sizeof what, "expected an integer from %lld to %lld", (long long)min, (long long)max);
        return bad_field(r, prefix, key, what);
    }
    *out = json_integer_value(v);
    return BT_OK;
}

static bt_status read_bytes(const reader *r, const json_t *obj, const char *prefix, const char *key,
                            uint64_t *out)
{
    int64_t v;
    BT_TRY(read_int(r, obj, prefix, key, 0, INT64_MAX, &v));
    *out = (uint64_t)v;
    return BT_OK;
}

/* A finite number >= min_value (> 0 when positive is set). */
static bt_status read_real(const reader *r, const json_t *obj, const char *prefix, const char *key,
                           int positive, double *out)
{
    json_t *v;
    BT_TRY(member(r, obj, prefix, key, &v));
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!isfinite(x) || x < 0 || (positive && x == 0))
        return bad_field(r, prefix, key, positive ? "expected a finite number > 0" : "expected a finite number >= 0");
    *out = x;
    return BT_OK;
}

static bt_status read_devices(const reader *r, const json_t *root, bt_profile *p)
{
    json_t *arr;
    BT_TRY(member(r, root, "", "devices", &arr));
    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > BT_MAX_STAGES)
        return bad_field(r, "", "devices", "expected a list of 1 to 64 devices");
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *v = json_array_get(arr, i);
        char key[32], kind[16];
        int index;
        snprintf(key, sizeof key, "devices[%zu]", i);
        if (!json_is_string(v) || json_string_length(v) >= BT_PROFILE_DEVICE_LEN ||
            bt_device_parse(json_string_value(v), kind, sizeof kind, &index) != BT_OK)
            return bad_field(r, "", key, "expected a device like cpu:0");
        snprintf(p->devices[p->n_devices++], BT_PROFILE_DEVICE_LEN, "%s", json_string_value(v));
    }
    return BT_OK;
}

static int listed_device(const bt_profile *p, const char *device)
{
    for (int d = 0; d < p->n_devices; d++)
        if (strcmp(p->devices[d], device) == 0) return 1;
    return 0;
}

static bt_status read_measured_on(const reader *r, const json_t *root, bt_profile *p)
{
    json_t *obj, *v;
    const char *kind;
    BT_TRY(member(r, root, "", "measured_on", &obj));
    if (!json_is_object(obj) || json_object_size(obj) == 0 || json_object_size(obj) > BT_PROFILE_MAX_KINDS)
        return bad_field(r, "", "measured_on", "expected an object {kind: device} with 1 to 4 kinds");
    json_object_foreach(obj, kind, v) {
        char dk[16];
        if (!json_is_string(v) || !listed_device(p, json_string_value(v)))
            return bad_field(r, "measured_on", kind, "expected one of the profile's devices");
        device_kind(json_string_value(v), dk, sizeof dk);
        if (strcmp(dk, kind) != 0) return bad_field(r, "measured_on", kind, "the device is of another kind");
        snprintf(p->kinds[p->n_kinds], sizeof p->kinds[0], "%s", kind);
        snprintf(p->measured_on[p->n_kinds], sizeof p->measured_on[0], "%s", json_string_value(v));
        p->n_kinds++;
    }
    return BT_OK;
}

static bt_status read_times(const reader *r, const json_t *layer, const char *prefix, bt_profile *p, int l)
{
    static const char *const keys[] = {"fwd_ms", "bwd_ms", "step_ms", NULL};
    char tp[96];
    json_t *times;
    BT_TRY(member(r, layer, prefix, "times", &times));
    snprintf(tp, sizeof tp, "%s.times", prefix);
    if (!json_is_object(times)) return bad_field(r, prefix, "times", "expected an object {kind: {...}}");
    const char *kind;
    json_t *v;
    json_object_foreach(times, kind, v) {
        if (bt_profile_kind_index(p, kind) < 0)
            return bad_field(r, tp, kind, "a device kind measured_on does not name");
    }
    for (int k = 0; k < p->n_kinds; k++) {
        char kp[128];
        json_t *tk;
        bt_profile_time *t = &p->times[(size_t)l * p->n_kinds + k];
        BT_TRY(member(r, times, tp, p->kinds[k], &tk));
        snprintf(kp, sizeof kp, "%s.%s", tp, p->kinds[k]);
        if (!json_is_object(tk)) return bad_field(r, tp, p->kinds[k], "expected an object {fwd_ms, bwd_ms, step_ms}");
        BT_TRY(only_keys(r, tk, kp, keys));
        BT_TRY(read_real(r, tk, kp, "fwd_ms", 0, &t->fwd_ms));
        BT_TRY(read_real(r, tk, kp, "bwd_ms", 0, &t->bwd_ms));
        BT_TRY(read_real(r, tk, kp, "step_ms", 0, &t->step_ms));
    }
    return BT_OK;
}

static bt_status read_layer(const reader *r, json_t *o, int l, bt_profile *p)
{
    static const char *const keys[] = {"name", "op", "act", "params", "param_bytes", "grad_bytes",
                                       "optimizer_bytes", "activation_bytes_per_sample",
                                       "output_bytes_per_sample", "cut_bytes_per_sample", "times", NULL};
    char prefix[48];
    const char *name, *op, *act = NULL;
    bt_profile_layer *pl = &p->layers[l];
    snprintf(prefix, sizeof prefix, "layers[%d]", l);
    if (!json_is_object(o)) return bt_error(BT_ERR_IO, "%s: field '%s': expected an object", r->file, prefix);
    BT_TRY(only_keys(r, o, prefix, keys));
    BT_TRY(read_string(r, o, prefix, "name", 256, &name));
    BT_TRY(read_string(r, o, prefix, "op", 256, &op));
    if (json_object_get(o, "act")) BT_TRY(read_string(r, o, prefix, "act", 64, &act));
    for (int k = 0; k < l; k++)
        if (strcmp(p->layers[k].name, name) == 0)
            return bad_field(r, prefix, "name", "repeats an earlier layer's name");
    BT_TRY(read_int(r, o, prefix, "params", 0, INT64_MAX, &pl->params));
    BT_TRY(read_bytes(r, o, prefix, "param_bytes", &pl->param_bytes));
    BT_TRY(read_bytes(r, o, prefix, "grad_bytes", &pl->grad_bytes));
    BT_TRY(read_bytes(r, o, prefix, "optimizer_bytes", &pl->optimizer_bytes));
    BT_TRY(read_bytes(r, o, prefix, "activation_bytes_per_sample", &pl->activation_bytes_per_sample));
    BT_TRY(read_bytes(r, o, prefix, "output_bytes_per_sample", &pl->output_bytes_per_sample));
    BT_TRY(read_bytes(r, o, prefix, "cut_bytes_per_sample", &pl->cut_bytes_per_sample));
    BT_TRY(read_times(r, o, prefix, p, l));
    pl->name = bt_strdup(name);
    pl->op = bt_strdup(op);
    pl->act = act ? bt_strdup(act) : NULL;
    if (!pl->name || !pl->op || (act && !pl->act)) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    return BT_OK;
}

static bt_status read_layers(const reader *r, const json_t *root, bt_profile *p)
{
    json_t *arr;
    BT_TRY(member(r, root, "", "layers", &arr));
    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > 1000000)
        return bad_field(r, "", "layers", "expected a non-empty list of layers");
    size_t n = json_array_size(arr);
    p->layers = calloc(n, sizeof *p->layers);
    p->times = calloc(n * (size_t)p->n_kinds, sizeof *p->times);
    if (!p->layers || !p->times) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    for (size_t l = 0; l < n; l++) {
        p->n_layers = (int)l + 1; /* so destroy frees what read_layer copied */
        BT_TRY(read_layer(r, json_array_get(arr, l), (int)l, p));
    }
    return BT_OK;
}

static bt_status read_transfers(const reader *r, const json_t *root, bt_profile *p)
{
    static const char *const keys[] = {"from", "to", "bytes", "gb_per_s", NULL};
    json_t *arr;
    BT_TRY(member(r, root, "", "transfers", &arr));
    if (!json_is_array(arr) || json_array_size(arr) > (size_t)(BT_MAX_STAGES * BT_MAX_STAGES))
        return bad_field(r, "", "transfers", "expected a list of {from, to, bytes, gb_per_s}");
    size_t n = json_array_size(arr);
    p->transfers = calloc(n + 1, sizeof *p->transfers);
    if (!p->transfers) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        bt_profile_transfer *t = &p->transfers[i];
        const char *from, *to;
        char prefix[48];
        snprintf(prefix, sizeof prefix, "transfers[%zu]", i);
        if (!json_is_object(o)) return bt_error(BT_ERR_IO, "%s: field '%s': expected an object", r->file, prefix);
        BT_TRY(only_keys(r, o, prefix, keys));
        BT_TRY(read_string(r, o, prefix, "from", BT_PROFILE_DEVICE_LEN, &from));
        BT_TRY(read_string(r, o, prefix, "to", BT_PROFILE_DEVICE_LEN, &to));
        if (!listed_device(p, from)) return bad_field(r, prefix, "from", "not one of the profile's devices");
        if (!listed_device(p, to)) return bad_field(r, prefix, "to", "not one of the profile's devices");
        snprintf(t->from, sizeof t->from, "%s", from);
        snprintf(t->to, sizeof t->to, "%s", to);
        BT_TRY(read_bytes(r, o, prefix, "bytes", &t->bytes));
        BT_TRY(read_real(r, o, prefix, "gb_per_s", 1, &t->gb_per_s));
        p->n_transfers++;
    }
    return BT_OK;
}

static bt_status read_header(const reader *r, const json_t *root, bt_profile *p)
{
    const char *s;
    int64_t v;
    json_t *b;
    BT_TRY(read_string(r, root, "", "format", 64, &s));
    if (strcmp(s, PROFILE_FORMAT) != 0) return bad_field(r, "", "format", "expected \"" PROFILE_FORMAT "\"");
    BT_TRY(read_int(r, root, "", "version", PROFILE_VERSION, PROFILE_VERSION, &v));
    BT_TRY(read_string(r, root, "", "model", 256, &s));
    if (!(p->model = bt_strdup(s))) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    BT_TRY(read_int(r, root, "", "batch", 1, INT32_MAX, &p->batch));
    BT_TRY(read_int(r, root, "", "microbatches", 1, 4096, &v));
    p->microbatches = (int)v;
    BT_TRY(read_int(r, root, "", "microbatch_size", 1, INT32_MAX, &p->microbatch_size));
    if (p->batch % p->microbatches != 0 || p->batch / p->microbatches != p->microbatch_size)
        return bad_field(r, "", "microbatch_size", "must equal batch / microbatches");
    BT_TRY(read_string(r, root, "", "dtype", 8, &s));
    if (strcmp(s, "f32") != 0) return bad_field(r, "", "dtype", "expected \"f32\"");
    BT_TRY(member(r, root, "", "training", &b));
    if (!json_is_boolean(b)) return bad_field(r, "", "training", "expected true or false");
    p->training = json_is_true(b);
    BT_TRY(read_string(r, root, "", "optimizer", sizeof p->optimizer, &s));
    if (strcmp(s, "adamw") && strcmp(s, "sgd") && strcmp(s, "sgd-momentum") && strcmp(s, "none"))
        return bad_field(r, "", "optimizer", "expected adamw, sgd, sgd-momentum or none");
    snprintf(p->optimizer, sizeof p->optimizer, "%s", s);
    BT_TRY(read_int(r, root, "", "threads", 1, 4096, &v));
    p->threads = (int)v;
    BT_TRY(read_int(r, root, "", "repeats", 1, 1000000, &v));
    p->repeats = (int)v;
    BT_TRY(read_int(r, root, "", "warmup", 0, 1000000, &v));
    p->warmup = (int)v;
    return BT_OK;
}

bt_status bt_profile_load(const char *path, bt_profile **out)
{
    static const char *const keys[] = {"format", "version", "model", "devices", "batch",
                                       "microbatches", "microbatch_size", "dtype", "training",
                                       "optimizer", "threads", "repeats", "warmup", "measured_on",
                                       "layers", "transfers", NULL};
    bt_status st = BT_OK;
    if (!path || !out) return bt_error(BT_ERR_INVALID_ARG, "bt_profile_load: NULL argument");
    reader r = {path};
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        if (err.line < 1) return bt_error(BT_ERR_IO, "%s: %s", path, err.text);
        return bt_error(BT_ERR_IO, "%s:%d:%d: %s", path, err.line, err.column, err.text);
    }
    bt_profile *p = calloc(1, sizeof *p);
    if (!p) {
        json_decref(root);
        return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    }
    if (!json_is_object(root)) {
        st = bt_error(BT_ERR_IO, "%s: expected a JSON object at the top", path);
        goto fail;
    }
    BT_TRY_GOTO(st, only_keys(&r, root, "", keys), fail);
    BT_TRY_GOTO(st, read_header(&r, root, p), fail);
    BT_TRY_GOTO(st, read_devices(&r, root, p), fail);
    BT_TRY_GOTO(st, read_measured_on(&r, root, p), fail);
    BT_TRY_GOTO(st, read_layers(&r, root, p), fail);
    BT_TRY_GOTO(st, read_transfers(&r, root, p), fail);
    json_decref(root);
    *out = p;
    return BT_OK;
fail:
    json_decref(root);
    bt_profile_destroy(p);
    return st;
}
