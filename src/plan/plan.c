/* plan/plan.c: turning a parallel config into stage assignments (see plan.h). The partition kinds
 * all lower to one array, layer -> stage, which is then checked the same way whatever produced
 * it: every layer in exactly one stage, stages non-empty and in graph order (user input: a status
 * and a message). Once built, the plan's invariants are asserted (our own bugs): the stage ranges
 * of layers and nodes tile the graph, and the crossings are exactly the values a stage reads from
 * elsewhere, each once, from the stage that produces it. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "graph/graph_internal.h"
#include "plan/partition.h"
#include "plan/placement.h"
#include "plan/plan.h"
#include "sched/sched.h"

void bt_plan_destroy(bt_plan *plan)
{
    if (!plan) return;
    free(plan->layer_stage);
    free(plan->crossings);
    free(plan);
}

int bt_plan_split_devices(const char *list, char (*device)[32], int max)
{
    int n = 0;
    const char *p = list;
    while (*p) {
        while (*p == ' ') p++;
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && p[len - 1] == ' ') len--;
        if (len == 0 || len >= sizeof device[0] || n >= max) return -1;
        memcpy(device[n], p, len);
        device[n][len] = '\0';
        n++;
        if (!end) break;
        p = end + 1;
    }
    return n;
}

void bt_plan_join_devices(const char (*device)[32], int n, char *list, size_t size)
{
    size_t used = 0;
    if (size == 0) return;
    list[0] = '\0';
    for (int d = 0; d < n && used < size; d++) {
        int w = snprintf(list + used, size - used, "%s%.31s", d ? "," : "", device[d]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

bt_status bt_plan_resolve_devices(const bt_parallel_config *cfg, int n_layers, char (*device)[32],
                                  int *n_stages)
{
    const char *devices = cfg->devices ? cfg->devices : "auto";
    int stages = cfg->stages;
    /* interleaved: each device runs v logical stages, stage l on the l mod P-th device; zbv: 2, in
     * a V (bt_schedule_stage_device says which) */
    int v = cfg->virtual_stages > 1 ? cfg->virtual_stages : 1;
    if (cfg->schedule == BT_SCHEDULE_ZBV && v != 2)
        return bt_error(BT_ERR_MODEL, "schedule zbv runs 2 chunks per device: virtual must be 2, got %d", v);
    if (v > 1 && (stages < 0 || stages % v != 0))
        return bt_error(BT_ERR_MODEL, "%d stages do not split into virtual %d chunks per device (stages "
                        "counts logical stages: devices x virtual)", stages, v);
    if (strcmp(devices, "auto") == 0) {
        if (stages == 0) stages = v;
        for (int s = 0; s < stages && s < BT_MAX_STAGES; s++)
            snprintf(device[s], sizeof device[s], "cpu:%d", bt_schedule_stage_device(cfg->schedule, stages, v, s));
    } else {
        int n = bt_plan_split_devices(devices, device, BT_MAX_STAGES);
        if (n < 1)
            return bt_error(BT_ERR_MODEL, "devices '%s': expected a list like cpu:0,cpu:1 (at most %d)",
                            devices, BT_MAX_STAGES);
        if (stages == 0) stages = n * v;
        if (stages != n * v) {
            if (v > 1)
                return bt_error(BT_ERR_MODEL, "%d stages with virtual %d need %d devices, but %d are "
                                "given (%s)", stages, v, stages / v, n, devices);
            return bt_error(BT_ERR_MODEL, "%d stages but %d devices (%s): give one device per stage",
                            stages, n, devices);
        }
        if (n * v > BT_MAX_STAGES)
            return bt_error(BT_ERR_MODEL, "stages must be 1 to %d, got %d", BT_MAX_STAGES, n * v);
        for (int s = n; s < stages; s++)
            snprintf(device[s], sizeof device[s], "%s", device[bt_schedule_stage_device(cfg->schedule, stages, v, s)]);
    }
    *n_stages = stages;
    return BT_OK;
}

static int any_layer_pinned(const bt_graph *g)
{
    int any = 0;
    for (int l = 0; l < g->n_layers; l++) any |= g->layers[l].stage >= 0;
    return any;
}

int bt_plan_needs_profile(const bt_graph *g, const bt_parallel_config *cfg)
{
    char device[BT_MAX_STAGES][32];
    int stages = 0;
    if (!g || !cfg || cfg->partition != BT_PARTITION_PROFILE || any_layer_pinned(g)) return 0;
    if (bt_plan_resolve_devices(cfg, g->n_layers, device, &stages) != BT_OK) {
        bt_clear_error();
        return 0; /* bt_plan_build reports the device list's error */
    }
    return stages > 1;
}

/* Partitioning units: a layer, or a block copy of the model file (bt_graph_join_previous).
 * unit_first[u] is the first layer of unit u, unit_first[n] = the layer count. Caller frees. */
static bt_status units_of(const bt_graph *g, int **unit_first, int *n)
{
    int *first = malloc(((size_t)g->n_layers + 1) * sizeof *first);
    if (!first) return bt_error(BT_ERR_NOMEM, "plan: out of memory");
    *n = 0;
    for (int l = 0; l < g->n_layers; l++)
        if (l == 0 || !g->layers[l].joins_previous) first[(*n)++] = l;
    first[*n] = g->n_layers;
    *unit_first = first;
    return BT_OK;
}

/* Stage cuts over units (first_unit[s]) to cuts over layers. */
static void units_to_stages(const int *first_unit, const int *unit_first, int stages, bt_plan *plan)
{
    for (int s = 0; s < stages; s++)
        for (int l = unit_first[first_unit[s]]; l < unit_first[first_unit[s + 1]]; l++) plan->layer_stage[l] = s;
}

static bt_status too_few_units(const bt_plan *plan, int n_units, const bt_graph *g)
{
    return bt_error(BT_ERR_MODEL, "%d stages but the model has only %d %s", plan->stages, n_units,
                    n_units == g->n_layers ? "layers" : "units to cut between (layers, and block copies as one)");
}

static bt_status partition_uniform(const bt_graph *g, bt_plan *plan)
{
    int *unit_first = NULL, n = 0, first[BT_MAX_STAGES + 1];
    BT_TRY(units_of(g, &unit_first, &n));
    bt_status st = plan->stages > n ? too_few_units(plan, n, g) : bt_partition_uniform(n, plan->stages, first);
    if (st == BT_OK) units_to_stages(first, unit_first, plan->stages, plan);
    free(unit_first);
    return st;
}

static bt_status counts_to_stages(const bt_graph *g, const int *counts, int stages, bt_plan *plan)
{
    int *unit_first = NULL, n = 0, first[BT_MAX_STAGES + 1] = {0};
    BT_TRY(units_of(g, &unit_first, &n));
    for (int s = 0; s < stages; s++) first[s + 1] = first[s] + counts[s];
    units_to_stages(first, unit_first, stages, plan);
    free(unit_first);
    return BT_OK;
}

/* balance counts units: layers, and block copies as one */
static bt_status partition_balance(const bt_graph *g, const bt_parallel_config *cfg, bt_plan *plan)
{
    if (cfg->n_balance != plan->stages)
        return bt_error(BT_ERR_MODEL, "balance has %d entries but there are %d stages",
                        cfg->n_balance, plan->stages);
    int sum = 0;
    for (int s = 0; s < cfg->n_balance; s++) {
        if (cfg->balance[s] < 1)
            return bt_error(BT_ERR_MODEL, "balance entry %d is %d: every stage needs a layer", s,
                            cfg->balance[s]);
        sum += cfg->balance[s];
    }
    int *unit_first = NULL, n = 0;
    BT_TRY(units_of(g, &unit_first, &n));
    free(unit_first);
    if (sum != n) {
        if (n == plan->n_layers)
            return bt_error(BT_ERR_MODEL, "balance sums to %d layers but the model has %d", sum, plan->n_layers);
        return bt_error(BT_ERR_MODEL, "balance sums to %d but the model has %d units (layers outside blocks, and "
                        "block copies, count one each)", sum, n);
    }
    return counts_to_stages(g, cfg->balance, plan->stages, plan);
}

/* layout "a,b|c|d": stages separated by '|', layers by ','; must list every layer in order. */
static bt_status partition_layout(const bt_graph *g, const bt_parallel_config *cfg, bt_plan *plan)
{
    const char *p = cfg->layout ? cfg->layout : "";
    int stage = 0, next_layer = 0;
    while (*p) {
        char name[256];
        size_t len = strcspn(p, ",|");
        while (len > 0 && *p == ' ') p++, len--;
        size_t trimmed = len;
        while (trimmed > 0 && p[trimmed - 1] == ' ') trimmed--;
        if (trimmed == 0 || trimmed >= sizeof name)
            return bt_error(BT_ERR_MODEL, "layout '%s': empty or overlong layer name", cfg->layout);
        memcpy(name, p, trimmed);
        name[trimmed] = '\0';
        int l = bt_graph_find_layer(g, name), span = 1;
        if (l < 0 && next_layer < plan->n_layers) { /* a prefix: "h.3" names h.3.ln_1 .. h.3.res_2 */
            const size_t n = strlen(name);
            span = 0;
            while (next_layer + span < plan->n_layers &&
                   strncmp(g->layers[next_layer + span].name, name, n) == 0 &&
                   g->layers[next_layer + span].name[n] == '.')
                span++;
            if (span > 0) l = next_layer;
        }
        if (l < 0)
            return bt_error(BT_ERR_MODEL, "layout '%s': no layer named '%s'", cfg->layout, name);
        if (l != next_layer)
            return bt_error(BT_ERR_MODEL,
                            "layout '%s': layer '%s' is out of order (expected '%s'): each layer "
                            "must appear exactly once, in model order",
                            cfg->layout, name, g->layers[next_layer < g->n_layers ? next_layer : 0].name);
        for (int k = 0; k < span; k++) plan->layer_stage[l + k] = stage;
        next_layer += span;
        p += len;
        if (*p == '|') stage++;
        if (*p) p++;
    }
    if (next_layer != plan->n_layers)
        return bt_error(BT_ERR_MODEL, "layout '%s' places %d of %d layers (missing '%s')",
                        cfg->layout, next_layer, plan->n_layers, g->layers[next_layer].name);
    if (stage + 1 != plan->stages)
        return bt_error(BT_ERR_MODEL, "layout '%s' has %d stages but %d were asked for",
                        cfg->layout, stage + 1, plan->stages);
    return BT_OK;
}

static bt_status partition_pinned(const bt_graph *g, bt_plan *plan)
{
    for (int l = 0; l < g->n_layers; l++) {
        if (g->layers[l].stage < 0)
            return bt_error(BT_ERR_MODEL, "layer '%s' has no stage: pin every layer or none",
                            g->layers[l].name);
        plan->layer_stage[l] = g->layers[l].stage;
    }
    return BT_OK;
}

static void first_to_stages(const int *first_layer, int stages, bt_plan *plan)
{
    for (int s = 0; s < stages; s++)
        for (int l = first_layer[s]; l < first_layer[s + 1]; l++) plan->layer_stage[l] = s;
}

static bt_status partition_params(const bt_graph *g, bt_plan *plan)
{
    int *unit_first = NULL, n = 0, first[BT_MAX_STAGES + 1];
    BT_TRY(units_of(g, &unit_first, &n));
    double *weights = calloc((size_t)n + 1, sizeof *weights);
    if (!weights) {
        free(unit_first);
        return bt_error(BT_ERR_NOMEM, "plan: out of memory");
    }
    for (int u = 0; u < n; u++)
        for (int l = unit_first[u]; l < unit_first[u + 1]; l++) {
            bt_layer_info info;
            bt_graph_layer(g, l, &info);
            /* A layer without parameters still costs something: count its output as weight. */
            weights[u] += (double)info.n_params + (double)bt_shape_numel(&info.shape);
        }
    bt_status st = plan->stages > n ? too_few_units(plan, n, g) : bt_partition_by_weight(n, weights, plan->stages, first);
    if (st == BT_OK) units_to_stages(first, unit_first, plan->stages, plan);
    free(weights);
    free(unit_first);
    return st;
}

/* partition: profile: the optimal cut for the costs the caller measured (or loaded) and handed
 * over in cfg->profile; planning never measures. One stage has no cut to choose. */
static bt_status partition_profile(const bt_graph *g, const bt_parallel_config *cfg, bt_plan *plan)
{
    int first[BT_MAX_STAGES + 1];
    if (plan->stages == 1) {
        for (int l = 0; l < g->n_layers; l++) plan->layer_stage[l] = 0;
        return BT_OK;
    }
    if (!cfg->profile)
        return bt_error(BT_ERR_INVALID_ARG,
                        "partition: profile on %d stages needs measured costs, and none were given "
                        "(bt_parallel_config.profile is NULL): measure first with "
                        "bt_profile_measure_for_plan, or load a `baton profile` file with bt_profile_load",
                        plan->stages);
    BT_TRY(bt_profile_check_graph(cfg->profile, g, NULL));
    BT_TRY(bt_placement_cut(cfg->profile, g, cfg, (const char(*)[32])plan->device, plan->stages, first));
    first_to_stages(first, plan->stages, plan);
    return BT_OK;
}

static bt_status check_stages(const bt_graph *g, bt_plan *plan)
{
    int prev = 0;
    for (int l = 0; l < plan->n_layers; l++) {
        int s = plan->layer_stage[l];
        if (s < 0 || s >= plan->stages)
            return bt_error(BT_ERR_MODEL, "layer '%s' is on stage %d, but there are %d stages",
                            g->layers[l].name, s, plan->stages);
        if (s < prev || s > prev + 1 || (l == 0 && s != 0))
            return bt_error(BT_ERR_MODEL,
                            "layer '%s' is on stage %d after a layer on stage %d: stages must "
                            "hold contiguous layers in order, none empty",
                            g->layers[l].name, s, prev);
        prev = s;
    }
    if (prev != plan->stages - 1)
        return bt_error(BT_ERR_MODEL, "the layers fill %d stages but %d were asked for", prev + 1,
                        plan->stages);
    for (int s = 0; s < plan->stages; s++) plan->n_stage_layers[s] = 0;
    for (int l = plan->n_layers - 1; l >= 0; l--) {
        int s = plan->layer_stage[l];
        plan->first_layer[s] = l;
        plan->n_stage_layers[s]++;
        plan->first_node[s] = g->layers[l].first_node;
    }
    for (int s = 0; s < plan->stages; s++) {
        const bt_layer *last = &g->layers[plan->first_layer[s] + plan->n_stage_layers[s] - 1];
        plan->n_stage_nodes[s] = last->first_node + last->n_nodes - plan->first_node[s];
    }
    return BT_OK;
}

static bt_status find_crossings(const bt_graph *g, bt_plan *plan)
{
    int cap = 16;
    plan->crossings = malloc((size_t)cap * sizeof *plan->crossings);
    if (!plan->crossings) return bt_error(BT_ERR_NOMEM, "plan: out of memory");
    for (int s = 0; s < plan->stages; s++) {
        for (int k = 0; k < plan->n_stage_nodes[s]; k++) {
            const bt_node *n = &g->nodes[plan->first_node[s] + k];
            for (int i = 0; i < n->n_in; i++) {
                const bt_value *v = &g->values[n->in[i]];
                int src = v->producer < 0 ? -1 : plan->layer_stage[g->nodes[v->producer].layer];
                if (src == s) continue;
                int seen = 0;
                for (int c = 0; c < plan->n_crossings; c++)
                    seen |= plan->crossings[c].value == n->in[i] && plan->crossings[c].dst == s;
                if (seen) continue;
                if (plan->n_crossings == cap) {
                    cap *= 2;
                    bt_crossing *c = realloc(plan->crossings, (size_t)cap * sizeof *c);
                    if (!c) return bt_error(BT_ERR_NOMEM, "plan: out of memory");
                    plan->crossings = c;
                }
                plan->crossings[plan->n_crossings++] = (bt_crossing){
                    .value = n->in[i],
                    .src = src,
                    .dst = s,
                    .bytes_per_sample =
                        (size_t)bt_shape_numel(&v->shape) * bt_dtype_size(v->dtype),
                };
            }
        }
    }
    return BT_OK;
}

/* The stage that produces value v (-1: a graph input). */
static int producer_stage(const bt_graph *g, const bt_plan *plan, int v)
{
    int producer = g->values[v].producer;
    return producer < 0 ? -1 : plan->layer_stage[g->nodes[producer].layer];
}

/* Asserts what every consumer of a plan relies on; a failure is a bug in this file. */
static void assert_invariants(const bt_graph *g, const bt_plan *plan)
{
    assert(plan->stages >= 1 && plan->stages <= BT_MAX_STAGES && plan->n_layers == g->n_layers);
    int next_layer = 0, next_node = 0;
    for (int s = 0; s < plan->stages; s++) {
        /* contiguous, non-empty, in order: the stages tile the layers and the nodes */
        assert(plan->first_layer[s] == next_layer && plan->n_stage_layers[s] >= 1);
        assert(plan->first_node[s] == next_node && plan->n_stage_nodes[s] >= 1);
        for (int l = next_layer; l < next_layer + plan->n_stage_layers[s]; l++) {
            assert(plan->layer_stage[l] == s);
            assert(g->layers[l].first_node >= plan->first_node[s] &&
                   g->layers[l].first_node + g->layers[l].n_nodes <= plan->first_node[s] + plan->n_stage_nodes[s]);
        }
        next_layer += plan->n_stage_layers[s];
        next_node += plan->n_stage_nodes[s];
    }
    assert(next_layer == g->n_layers && next_node == g->n_nodes); /* every layer in exactly one stage */
    for (int c = 0; c < plan->n_crossings; c++) {
        const bt_crossing *x = &plan->crossings[c];
        /* from the producing stage (or a graph input) forward to a stage that reads it, once */
        assert(x->value >= 0 && x->value < g->n_values);
        assert(x->dst >= 0 && x->dst < plan->stages && x->src < x->dst);
        assert(x->src == producer_stage(g, plan, x->value));
        int read = 0;
        for (int k = 0; k < plan->n_stage_nodes[x->dst]; k++) {
            const bt_node *n = &g->nodes[plan->first_node[x->dst] + k];
            for (int i = 0; i < n->n_in; i++) read |= n->in[i] == x->value;
        }
        assert(read);
        for (int d = 0; d < c; d++)
            assert(plan->crossings[d].value != x->value || plan->crossings[d].dst != x->dst);
    }
    /* and every value a stage reads from elsewhere crosses */
    for (int s = 0; s < plan->stages; s++)
        for (int k = 0; k < plan->n_stage_nodes[s]; k++) {
            const bt_node *n = &g->nodes[plan->first_node[s] + k];
            for (int i = 0; i < n->n_in; i++) {
                if (producer_stage(g, plan, n->in[i]) == s) continue;
                int found = 0;
                for (int c = 0; c < plan->n_crossings; c++)
                    found |= plan->crossings[c].value == n->in[i] && plan->crossings[c].dst == s;
                assert(found);
                (void)found;
            }
        }
    (void)g, (void)plan;
}

/* What every way of building a plan ends with: the user-facing stage checks, the crossings, then
 * the invariants (our own bugs) asserted. */
static bt_status finish(const bt_graph *g, bt_plan *plan)
{
    BT_TRY(check_stages(g, plan));
    BT_TRY(find_crossings(g, plan));
    assert_invariants(g, plan);
    return BT_OK;
}

bt_status bt_plan_from_cuts(const bt_graph *g, int stages, const int *first_layer, bt_plan **out)
{
    bt_status st = BT_OK;
    if (!g || !first_layer || !out) return bt_error(BT_ERR_INVALID_ARG, "bt_plan_from_cuts: NULL argument");
    if (stages < 1 || stages > BT_MAX_STAGES || stages > g->n_layers || first_layer[0] != 0 ||
        first_layer[stages] != g->n_layers)
        return bt_error(BT_ERR_INVALID_ARG, "bt_plan_from_cuts: %d stages do not cut %d layers", stages,
                        g->n_layers);
    bt_plan *plan = calloc(1, sizeof *plan);
    if (!plan) return bt_error(BT_ERR_NOMEM, "plan: out of memory");
    plan->n_layers = g->n_layers;
    plan->stages = stages;
    plan->layer_stage = calloc((size_t)g->n_layers, sizeof *plan->layer_stage);
    if (!plan->layer_stage) {
        st = bt_error(BT_ERR_NOMEM, "plan: out of memory");
        goto fail;
    }
    for (int s = 0; s < stages; s++)
        if (first_layer[s + 1] <= first_layer[s]) {
            st = bt_error(BT_ERR_INVALID_ARG, "bt_plan_from_cuts: stage %d is empty", s);
            goto fail;
        }
    first_to_stages(first_layer, stages, plan);
    BT_TRY_GOTO(st, finish(g, plan), fail);
    *out = plan;
    return BT_OK;
fail:
    bt_plan_destroy(plan);
    return st;
}

bt_status bt_plan_build(const bt_graph *g, const bt_parallel_config *cfg, bt_plan **out)
{
    bt_status st = BT_OK;
    if (!g || !cfg || !out) return bt_error(BT_ERR_INVALID_ARG, "bt_plan_build: NULL argument");
    if (g->n_layers == 0) return bt_error(BT_ERR_MODEL, "the model has no layers");
    if (cfg->auto_layout)
        return bt_error(BT_ERR_INVALID_ARG, "parallel: auto is chosen by measuring before a plan is built "
                        "(baton run and baton plan do it; see docs/planner.md): it cannot be built as it is");
    bt_plan *plan = calloc(1, sizeof *plan);
    if (!plan) return bt_error(BT_ERR_NOMEM, "plan: out of memory");
    plan->n_layers = g->n_layers;
    plan->layer_stage = calloc((size_t)g->n_layers, sizeof *plan->layer_stage);
    if (!plan->layer_stage) {
        st = bt_error(BT_ERR_NOMEM, "plan: out of memory");
        goto fail;
    }
    BT_TRY_GOTO(st, bt_plan_resolve_devices(cfg, g->n_layers, plan->device, &plan->stages), fail);
    bt_partition_kind kind = any_layer_pinned(g) ? BT_PARTITION_PINNED : cfg->partition;
    switch (kind) {
    case BT_PARTITION_UNIFORM: st = partition_uniform(g, plan); break;
    case BT_PARTITION_PROFILE: st = partition_profile(g, cfg, plan); break;
    case BT_PARTITION_PARAMS: st = partition_params(g, plan); break;
    case BT_PARTITION_BALANCE: st = partition_balance(g, cfg, plan); break;
    case BT_PARTITION_LAYOUT: st = partition_layout(g, cfg, plan); break;
    case BT_PARTITION_PINNED: st = partition_pinned(g, plan); break;
    }
    if (st != BT_OK) goto fail;
    BT_TRY_GOTO(st, finish(g, plan), fail);
    *out = plan;
    return BT_OK;
fail:
    bt_plan_destroy(plan);
    return st;
}

size_t bt_plan_send_bytes(const bt_plan *plan, int stage)
{
    size_t bytes = 0;
    for (int c = 0; c < plan->n_crossings; c++)
        if (plan->crossings[c].src == stage) bytes += plan->crossings[c].bytes_per_sample;
    return bytes;
}

