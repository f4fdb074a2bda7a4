/* graph/graph.c: building a layer graph. bt_graph_add_layer resolves the layer's inputs among the
 * values that exist (so references can only point backwards), checks arguments and infers shapes
 * through the op's shape rule (graph/infer.c), lowers `act:` into a second node (or, for `act:
 * relu` on linear and conv2d, into their own `act` argument: the relu is fused into the op's
 * output pass, see ops/op_configs.h), and declares the layer's parameters as "<layer>.<suffix>".
 * A failing call leaves the graph as it was. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/strutil.h"
#include "graph/graph_internal.h"
#include "graph/infer.h"
#include "graph/op_registry.h"

void bt_layer_desc_init(bt_layer_desc *desc)
{
    memset(desc, 0, sizeof *desc);
    desc->stage = -1;
}

bt_status bt_graph_create(bt_graph **out)
{
    if (!out) return bt_error(BT_ERR_INVALID_ARG, "bt_graph_create: out is NULL");
    BT_TRY(bt_op_registry_init());
    *out = calloc(1, sizeof **out);
    if (!*out) return bt_error(BT_ERR_NOMEM, "bt_graph_create: out of memory");
    return BT_OK;
}

static void layer_free(bt_layer *l)
{
    free(l->name);
    free(l->op_name);
    free(l->act);
    free(l->file);
    for (int i = 0; i < l->n_inputs; i++) free(l->inputs[i]);
}

void bt_graph_destroy(bt_graph *g)
{
    if (!g) return;
    for (int i = 0; i < g->n_values; i++) free(g->values[i].name);
    for (int i = 0; i < g->n_nodes; i++) bt_args_clear(&g->nodes[i].args);
    for (int i = 0; i < g->n_layers; i++) layer_free(&g->layers[i]);
    for (int i = 0; i < g->n_params; i++) free(g->params[i].name);
    free(g->values);
    free(g->nodes);
    free(g->layers);
    free(g->params);
    free(g);
}

/* Grows *arr to hold at least need elements of size elem. */
static bt_status grow(void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap) return BT_OK;
    int cap2 = *cap ? *cap * 2 : 16;
    while (cap2 < need) cap2 *= 2;
    void *p = realloc(*arr, (size_t)cap2 * elem);
    if (!p) return bt_error(BT_ERR_NOMEM, "graph: out of memory");
    memset((char *)p + (size_t)*cap * elem, 0, (size_t)(cap2 - *cap) * elem);
    *arr = p;
    *cap = cap2;
    return BT_OK;
}

int bt_graph_find_value(const bt_graph *g, const char *name)
{
    for (int i = g->n_values - 1; i >= 0; i--)
        if (strcmp(g->values[i].name, name) == 0) return i;
    return -1;
}

int bt_graph_output_value(const bt_graph *g)
{
    return g->n_nodes ? g->nodes[g->n_nodes - 1].out : -1;
}

static int valid_name(const char *name)
{
    if (!name || !*name || strlen(name) > 200) return 0;
    for (const char *p = name; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_' || *p == '.' || *p == '-')) return 0;
    return 1;
}

static bt_status located(bt_status st, const char *layer, bt_src_loc loc, const char *fmt,
                         const char *arg)
{
    char prefix[512];
    bt_format_layer_prefix(prefix, sizeof prefix, layer, loc);
    char msg[512];
    snprintf(msg, sizeof msg, fmt, arg);
    return bt_error(st, "%s%s", prefix, msg);
}

bt_status bt_graph_add_input(bt_graph *g, const char *name, int ndim, const int64_t *dims,
                             bt_dtype dtype)
{
    if (!g) return bt_error(BT_ERR_INVALID_ARG, "bt_graph_add_input: graph is NULL");
    if (!valid_name(name))
        return bt_error(BT_ERR_MODEL, "input name '%s' is not valid (letters, digits, _ . -)",
                        name ? name : "(null)");
    if (bt_graph_find_value(g, name) >= 0)
        return bt_error(BT_ERR_MODEL, "input '%s' is defined twice", name);
    if (ndim < 0 || ndim > BT_MAX_DIMS || (ndim > 0 && !dims))
        return bt_error(BT_ERR_MODEL, "input '%s': %d dimensions (0 to %d allowed)", name, ndim,
                        BT_MAX_DIMS);
    if (dtype != BT_F32 && dtype != BT_F64 && dtype != BT_I32)
        return bt_error(BT_ERR_MODEL, "input '%s': dtype %s (f32 or i32 expected)", name,
                        bt_dtype_name(dtype));
    if (g->n_nodes > 0)
        return bt_error(BT_ERR_MODEL, "input '%s' declared after the first layer", name);
    if (g->n_inputs >= (int)(sizeof g->inputs / sizeof g->inputs[0]))
        return bt_error(BT_ERR_MODEL, "too many inputs");
    bt_shape shape = {.ndim = ndim};
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 1)
            return bt_error(BT_ERR_MODEL, "input '%s': dimension %d is %lld (must be >= 1)", name,
                            i, (long long)dims[i]);
        shape.dim[i] = dims[i];
    }
    BT_TRY(grow((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof *g->values));
    bt_value *v = &g->values[g->n_values];
    v->name = bt_strdup(name);
    if (!v->name) return bt_error(BT_ERR_NOMEM, "graph: out of memory");
    v->shape = shape;
    v->dtype = dtype == BT_F64 ? BT_F32 : dtype;
    v->producer = -1;
    v->input_index = g->n_inputs;
    g->inputs[g->n_inputs++] = g->n_values++;
    return BT_OK;
}

/* Adds one node applying op to inputs, producing a value named value_name. On failure the value,
 * node and params added so far are rolled back by the caller (it restores the counts). */
static bt_status add_node(bt_graph *g, const bt_op_def *op, const int *in, int n_in,
                          const bt_args *args, const char *layer_name, const char *value_name,
                          bt_src_loc loc, int layer)
{
    bt_shape shapes[BT_MAX_INPUTS];
    bt_dtype dtypes[BT_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) {
        shapes[i] = g->values[in[i]].shape;
        dtypes[i] = g->values[in[i]].dtype;
    }
    bt_infer_ctx ctx;
    bt_infer_ctx_init(&ctx, op, args, n_in, shapes, dtypes, layer_name, loc);
    BT_TRY(bt_infer_ctx_run(&ctx));

    BT_TRY(grow((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof *g->values));
    BT_TRY(grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes));
    BT_TRY(grow((void **)&g->params, &g->cap_params, g->n_params + ctx.n_params,
                sizeof *g->params));

    bt_node *node = &g->nodes[g->n_nodes];
    memset(node, 0, sizeof *node);
    node->op = op;
    node->layer = layer;
    node->n_in = n_in;
    memcpy(node->in, in, (size_t)n_in * sizeof *in);
    node->out = g->n_values;
    node->saved_per_sample = ctx.saved_per_sample;
    node->ws_per_sample = ctx.ws_per_sample;
    node->ws_fixed = ctx.ws_fixed;
    memcpy(node->config, ctx.config, ctx.config_size);
    node->config_size = ctx.config_size;
    node->no_grad_mask = ctx.no_grad_mask;
    memcpy(node->int_hi, ctx.int_hi, sizeof node->int_hi);
    bt_status st = bt_args_copy(&node->args, args);
    if (st != BT_OK) {
        bt_args_clear(&node->args);
        return st;
    }

    bt_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = bt_strdup(value_name);
    v->shape = ctx.out_shape;
    v->dtype = ctx.out_dtype == BT_F64 ? BT_F32 : ctx.out_dtype;
    v->producer = g->n_nodes;
    v->input_index = -1;
    if (!v->name) {
        bt_args_clear(&node->args);
        return bt_error(BT_ERR_NOMEM, "graph: out of memory");
    }

    for (int k = 0; k < ctx.n_params; k++) {
        bt_param *p = &g->params[g->n_params + k];
        memset(p, 0, sizeof *p);
        p->name = bt_strfmt("%s.%s", layer_name, ctx.params[k].suffix);
        p->shape = ctx.params[k].shape;
        p->init = ctx.params[k].init;
        p->fan_in = ctx.params[k].fan_in;
        p->init_arg = ctx.params[k].init_arg;
        p->tied_to = -1;
        p->node = g->n_nodes;
        p->layer = layer;
        node->params[k] = g->n_params + k;
        if (!p->name) {
            for (int j = 0; j < k; j++) free(g->params[g->n_params + j].name);
            free(v->name);
            bt_args_clear(&node->args);
            return bt_error(BT_ERR_NOMEM, "graph: out of memory");
        }
    }
    node->n_params = ctx.n_params;
    g->n_params += ctx.n_params;
    g->n_values++;
    g->n_nodes++;
    return BT_OK;
}

/* Undoes nodes, values and params added after the given counts. */
static void rollback(bt_graph *g, int n_values, int n_nodes, int n_params)
{
    while (g->n_params > n_params) free(g->params[--g->n_params].name);
    while (g->n_nodes > n_nodes) bt_args_clear(&g->nodes[--g->n_nodes].args);
    while (g->n_values > n_values) free(g->values[--g->n_values].name);
}

static bt_status resolve_inputs(const bt_graph *g, const bt_layer_desc *d, int *in, int *n_in)
{
    if (d->n_inputs == 0) {
        int prev = g->n_nodes ? g->nodes[g->n_nodes - 1].out : (g->n_inputs ? g->inputs[0] : -1);
        if (prev < 0)
            return located(BT_ERR_MODEL, d->name, d->loc, "%s",
                           "has no input: the graph has no inputs and no earlier layer");
        in[0] = prev;
        *n_in = 1;
        return BT_OK;
    }
    if (d->n_inputs > BT_MAX_INPUTS)
        return located(BT_ERR_MODEL, d->name, d->loc, "has more than %s inputs", "8");
    for (int i = 0; i < d->n_inputs; i++) {
        const char *name = d->inputs[i];
        int id = name ? bt_graph_find_value(g, name) : -1;
        if (id < 0 || strchr(name, ':'))
            return located(BT_ERR_MODEL, d->name, d->loc,
                           "input '%s' is not a graph input or an earlier layer",
                           name ? name : "(null)");
        in[i] = id;
    }
    *n_in = d->n_inputs;
    return BT_OK;
}

static bt_status find_act(const bt_layer_desc *d, const bt_op_def **out)
{
    const bt_op_def *act = bt_op_find(d->act);
    if (!act || act->min_inputs != 1 || act->max_inputs != 1)
        return located(BT_ERR_MODEL, d->name, d->loc,
                       "unknown activation '%s' (any one-input op: relu, gelu, silu, ...; "
                       "`baton ops` lists them)",
                       d->act);
    *out = act;
    return BT_OK;
}

/* Whether the layer's op applies act itself: relu on the built-in linear and conv2d (their `act`
 * argument), one pass over the output instead of a second node and buffer. */
static int fuses_act(const bt_op_def *op, const bt_op_def *act)
{
    return strcmp(act->name, "relu") == 0 &&
           (strcmp(op->name, "linear") == 0 || strcmp(op->name, "conv2d") == 0);
}

/* *out (zeroed) = args plus act = act_name. */
static bt_status fused_args(bt_args *out, const bt_args *args, const char *act_name)
{
    bt_status st = bt_args_copy(out, args);
    if (st == BT_OK) st = bt_args_set_string(out, "act", act_name);
    if (st != BT_OK) bt_args_clear(out);
    return st;
}

static bt_status record_layer(bt_graph *g, const bt_layer_desc *d, const bt_op_def *op,
                              int first_node)
{
    BT_TRY(grow((void **)&g->layers, &g->cap_layers, g->n_layers + 1, sizeof *g->layers));
    bt_layer *l = &g->layers[g->n_layers];
    memset(l, 0, sizeof *l);
    l->name = bt_strdup(d->name);
    l->op_name = bt_strdup(op->name);
    l->act = d->act ? bt_strdup(d->act) : NULL;
    l->file = d->loc.file ? bt_strdup(d->loc.file) : NULL;
    l->line = d->loc.line;
    l->col = d->loc.col;
    l->stage = d->stage;
    l->first_node = first_node;
    l->n_nodes = g->n_nodes - first_node;
    l->n_inputs = d->n_inputs;
    int ok = l->name && l->op_name && (!d->act || l->act) && (!d->loc.file || l->file);
    for (int i = 0; i < d->n_inputs && ok; i++) ok = (l->inputs[i] = bt_strdup(d->inputs[i])) != NULL;
    if (!ok) {
        layer_free(l);
        return bt_error(BT_ERR_NOMEM, "graph: out of memory");
    }
    g->n_layers++;
    return BT_OK;
}

bt_status bt_graph_add_layer(bt_graph *g, const bt_layer_desc *d)
{
    if (!g || !d) return bt_error(BT_ERR_INVALID_ARG, "bt_graph_add_layer: NULL argument");
    if (!valid_name(d->name))
        return located(BT_ERR_MODEL, NULL, d->loc,
                       "layer name '%s' is not valid (letters, digits, _ . - only)",
                       d->name ? d->name : "(null)");
    if (bt_graph_find_value(g, d->name) >= 0)
        return located(BT_ERR_MODEL, d->name, d->loc, "%s",
                       "the name is already used by an input or an earlier layer");
    if (d->stage < -1 || d->stage >= BT_MAX_STAGES) {
        char prefix[512];
        bt_format_layer_prefix(prefix, sizeof prefix, d->name, d->loc);
        return bt_error(BT_ERR_MODEL, "%sstage must be 0 to %d, got %d", prefix, BT_MAX_STAGES - 1,
                        d->stage);
    }
    const bt_op_def *op = d->op ? bt_op_find(d->op) : NULL;
    if (!op) return located(BT_ERR_MODEL, d->name, d->loc, "unknown op '%s'", d->op ? d->op : "");
    const bt_op_def *act = NULL;
    if (d->act) BT_TRY(find_act(d, &act));

    int in[BT_MAX_INPUTS], n_in = 0;
    BT_TRY(resolve_inputs(g, d, in, &n_in));

    int n_values = g->n_values, n_nodes = g->n_nodes, n_params = g->n_params;
    bt_args fused = {0};
    const bt_args *args = d->args;
    if (act && fuses_act(op, act)) {
        if (d->args && bt_args_get(d->args, "act"))
            return located(BT_ERR_MODEL, d->name, d->loc, "%s",
                           "has both act: and args: {act: ...}; give one");
        BT_TRY(fused_args(&fused, d->args, act->name));
        args = &fused;
        act = NULL;
    }
    char *pre_name = act ? bt_strfmt("%s:pre", d->name) : NULL;
    if (act && !pre_name) {
        bt_args_clear(&fused);
        return bt_error(BT_ERR_NOMEM, "graph: out of memory");
    }
    bt_status st = add_node(g, op, in, n_in, args, d->name, act ? pre_name : d->name, d->loc,
                            g->n_layers);
    bt_args_clear(&fused);
    if (st == BT_OK && act) {
        int pre = g->n_values - 1;
        st = add_node(g, act, &pre, 1, NULL, d->name, d->name, d->loc, g->n_layers);
    }
    if (st == BT_OK) st = record_layer(g, d, op, n_nodes);
    free(pre_name);
    if (st != BT_OK) rollback(g, n_values, n_nodes, n_params);
    return st;
}

/* ---- queries ---------------------------------------------------------------------------------- */

int bt_graph_num_inputs(const bt_graph *g) { return g ? g->n_inputs : 0; }

bt_status bt_graph_input(const bt_graph *g, int i, bt_input_info *out)
{
    if (!g || !out || i < 0 || i >= g->n_inputs)
        return bt_error(BT_ERR_INVALID_ARG, "bt_graph_input: no input %d", i);
    const bt_value *v = &g->values[g->inputs[i]];
    out->name = v->name;
    out->shape = v->shape;
    out->dtype = v->dtype;
    return BT_OK;
}

int bt_graph_num_layers(const bt_graph *g) { return g ? g->n_layers : 0; }

bt_status bt_graph_layer(const bt_graph *g, int i, bt_layer_info *out)
{
    if (!g || !out || i < 0 || i >= g->n_layers)
        return bt_error(BT_ERR_INVALID_ARG, "bt_graph_layer: no layer %d", i);
    const bt_layer *l = &g->layers[i];
    const bt_node *last = &g->nodes[l->first_node + l->n_nodes - 1];
    memset(out, 0, sizeof *out);
    out->name = l->name;
    out->op = l->op_name;
    out->act = l->act;
    out->shape = g->values[last->out].shape;
    out->dtype = g->values[last->out].dtype;
    out->stage = l->stage;
    out->recompute = l->recompute;
    out->loc = (bt_src_loc){l->file, l->line, l->col};
    for (int k = 0; k < l->n_nodes; k++) {
        const bt_node *n = &g->nodes[l->first_node + k];
        for (int j = 0; j < n->n_params; j++)
            out->n_params += bt_shape_numel(&g->params[n->params[j]].shape);
    }
    const bt_node *first = &g->nodes[l->first_node];
    out->n_inputs = first->n_in;
    for (int k = 0; k < first->n_in && k < BT_MAX_INPUTS; k++) out->inputs[k] = g->values[first->in[k]].name;
    return BT_OK;
}

bt_status bt_graph_set_recompute(bt_graph *g, int layer, int on)
{
    if (!g) return bt_error(BT_ERR_INVALID_ARG, "bt_graph_set_recompute: NULL graph");
    if (layer < -1 || layer >= g->n_layers)
        return bt_error(BT_ERR_INVALID_ARG, "bt_graph_set_recompute: no layer %d (the graph has %d)", layer,
                        g->n_layers);
    for (int i = 0; i < g->n_layers; i++)
        if (layer < 0 || i == layer) g->layers[i].recompute = on != 0;
    return BT_OK;
}

int bt_graph_find_layer(const bt_graph *g, const char *name)
{
    if (!g || !name) return -1;
    for (int i = 0; i < g->n_layers; i++)
        if (strcmp(g->layers[i].name, name) == 0) return i;
    return -1;
}

int bt_graph_num_params(const bt_graph *g) { return g ? g->n_params : 0; }

void bt_graph_join_previous(bt_graph *g)
{
    if (g && g->n_layers > 1) g->layers[g->n_layers - 1].joins_previous = 1;
}

bt_status bt_graph_param(const bt_graph *g, int i, bt_param_info *out)
{
    if (!g || !out || i < 0 || i >= g->n_params)
        return bt_error(BT_ERR_INVALID_ARG, "bt_graph_param: no parameter %d", i);
    out->name = g->params[i].name;
    out->shape = g->params[i].shape;
    out->layer = g->params[i].layer;
    out->tied_to = g->params[i].tied_to >= 0 ? g->params[g->params[i].tied_to].name : NULL;
    return BT_OK;
}

bt_status bt_graph_tie(bt_graph *g, const char *param, const char *source)
{
    if (!g || !param || !source) return bt_error(BT_ERR_INVALID_ARG, "bt_graph_tie: NULL argument");
    int p = -1, s = -1;
    for (int i = 0; i < g->n_params; i++) {
        if (strcmp(g->params[i].name, param) == 0) p = i;
        if (strcmp(g->params[i].name, source) == 0) s = i;
    }
    if (p < 0) return bt_error(BT_ERR_MODEL, "tie: the model has no parameter '%s'", param);
    if (s < 0) return bt_error(BT_ERR_MODEL, "tie: the model has no parameter '%s' to tie '%s' to", source, param);
    if (s >= p) return bt_error(BT_ERR_MODEL, "tie: '%s' must come before '%s'", source, param);
    int busy = g->params[s].tied_to >= 0 || g->params[p].tied_to >= 0;
    for (int i = 0; i < g->n_params; i++) busy |= g->params[i].tied_to == s || g->params[i].tied_to == p;
    if (busy)
        return bt_error(BT_ERR_MODEL, "tie: '%s' or '%s' is already tied (ties are pairs: no chains)", source, param);
    int same = g->params[s].shape.ndim == g->params[p].shape.ndim;
    for (int k = 0; same && k < g->params[s].shape.ndim; k++) same = g->params[s].shape.dim[k] == g->params[p].shape.dim[k];
    if (!same) {
        char a[128], b[128];
        return bt_error(BT_ERR_MODEL, "tie: '%s' is shaped %s, '%s' %s", param,
                        bt_shape_format(&g->params[p].shape, a, sizeof a), source,
                        bt_shape_format(&g->params[s].shape, b, sizeof b));
    }
    g->params[p].tied_to = s;
    return BT_OK;
}

int64_t bt_graph_total_params(const bt_graph *g)
{
    int64_t n = 0;
    for (int i = 0; g && i < g->n_params; i++)
        if (g->params[i].tied_to < 0) n += bt_shape_numel(&g->params[i].shape); /* a tie counts once */
    return n;
}

int bt_graph_is_trainable(const bt_graph *g)
{
    int out = g ? bt_graph_output_value(g) : -1;
    return out >= 0 && g->values[out].shape.ndim == 0 && g->values[out].dtype != BT_I32;
}
