/* profile/auto_layout.c: the measuring half of the layout search (plan/search.h) behind
 * `parallel: auto` and `baton plan --schedule auto`: measures the model at every (micro-batch
 * size, thread count) point the search considers, since GEMM efficiency falls with smaller
 * micro-batches and nothing is scaled from another size, then runs the search on those profiles.
 *
 * Data flow: graph + search params -> bt_profile_measure per point -> bt_search_layouts -> result.
 * Never prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/strutil.h"
#include "plan/plan.h"
#include "profile/auto_layout.h"

int bt_auto_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 && n <= 4096 ? (int)n : 1;
}

void bt_auto_devices(const char *given, int cores, char *list, size_t size)
{
    if (given && *given && strcmp(given, "auto") != 0) {
        snprintf(list, size, "%s", given);
        return;
    }
    size_t len = 0;
    list[0] = '\0';
    for (int d = 0; d < cores && d < BT_MAX_STAGES && len + 12 < size; d++)
        len += (size_t)snprintf(list + len, size - len, "%scpu:%d", d ? "," : "", d);
}

bt_status bt_auto_search(const bt_graph *g, const char *name, const bt_search_params *sp,
                         const bt_profile_params *base, bt_search_result *out, int *n_measured)
{
    bt_search_point pts[BT_SEARCH_MAX_POINTS];
    bt_profile *profs[BT_SEARCH_MAX_POINTS] = {NULL};
    int n = 0;
    bt_status st = BT_OK;
    memset(out, 0, sizeof *out);
    out->best = out->best_single = out->best_multi = -1;
    *n_measured = 0;
    BT_TRY(bt_search_points(sp, pts, BT_SEARCH_MAX_POINTS, &n));
    /* transfer rates: between the first two candidates when there are two (cpu:N pairs all move
     * through the same memory; the planner falls back to the slowest rate of the same kinds) */
    char devs[BT_MAX_STAGES][32], pair[80];
    int n_dev = bt_plan_split_devices(sp->devices, devs, BT_MAX_STAGES);
    if (n_dev < 1) return bt_error(BT_ERR_INVALID_ARG, "layout search: no devices in '%s'", sp->devices);
    bt_plan_join_devices((const char (*)[32])devs, n_dev > 1 && sp->max_stages != 1 ? 2 : 1, pair, sizeof pair);
    for (int i = 0; i < n; i++) {
        bt_profile_params pp = *base;
        pp.devices = pair;
        pp.batch = sp->batch;
        pp.microbatches = (int)(sp->batch / pts[i].microbatch_size);
        pp.threads = pts[i].threads;
        pp.training = sp->training;
        pp.precision = sp->precision; /* the model's: bf16 costs are not f32's */
        if (i > 0) pp.handoff_repeats = 0; /* one measurement serves every point (it has no size) */
        BT_TRY_GOTO(st, bt_profile_measure(g, name, &pp, &profs[i]), done);
        if (i > 0) profs[i]->handoff_ms = profs[0]->handoff_ms;
        (*n_measured)++;
    }
    st = bt_search_layouts(sp, pts, (const bt_profile *const *)profs, n, out);
done:
    for (int i = 0; i < n; i++) bt_profile_destroy(profs[i]);
    return st;
}

/* "a,b|c,d" from the cuts; caller frees. */
static char *layout_of(const bt_graph *g, const bt_search_candidate *k)
{
    size_t cap = 16, len = 0;
    for (int l = 0; l < bt_graph_num_layers(g); l++) {
        bt_layer_info li;
        if (bt_graph_layer(g, l, &li) == BT_OK) cap += strlen(li.name) + 1;
    }
    char *out = malloc(cap);
    if (!out) return NULL;
    out[0] = '\0';
    int logical = k->stages * (k->chunks > 1 ? k->chunks : 1);
    for (int s = 0; s < logical; s++)
        for (int l = k->first_layer[s]; l < k->first_layer[s + 1]; l++) {
            bt_layer_info li;
            if (bt_graph_layer(g, l, &li) != BT_OK) continue;
            len += (size_t)snprintf(out + len, cap - len, "%s%s", l == 0 ? "" : l == k->first_layer[s] ? "|" : ",",
                                    li.name);
        }
    return out;
}

bt_status bt_auto_apply(const bt_graph *g, const bt_search_result *r, int which, bt_parallel_config *cfg,
                        int *threads, int *recompute, char **devices, char **layout)
{
    if (which < 0 || which >= r->n || !r->cand[which].fits)
        return bt_error(BT_ERR_INVALID_ARG, "layout search: no layout chosen");
    const bt_search_candidate *k = &r->cand[which];
    char devs[BT_MAX_STAGES][32], list[BT_MAX_STAGES * 33];
    int n = bt_plan_split_devices(r->candidates, devs, BT_MAX_STAGES);
    if (n < k->stages) return bt_error(BT_ERR_INVALID_ARG, "layout search: %d devices for %d stages", n, k->stages);
    bt_plan_join_devices((const char (*)[32])devs, k->stages, list, sizeof list);
    *devices = bt_strdup(list);
    *layout = k->stages > 1 ? layout_of(g, k) : NULL;
    if (!*devices || (k->stages > 1 && !*layout)) {
        free(*devices), free(*layout);
        *devices = *layout = NULL;
        return bt_error(BT_ERR_NOMEM, "out of memory");
    }
    cfg->auto_layout = 0;
    cfg->devices = *devices;
    cfg->virtual_stages = k->chunks > 1 ? k->chunks : 1;
    cfg->stages = k->stages * cfg->virtual_stages; /* logical stages */
    cfg->microbatches = k->microbatches;
    cfg->schedule = k->schedule;
    cfg->partition = k->stages > 1 ? BT_PARTITION_LAYOUT : BT_PARTITION_UNIFORM;
    cfg->layout = *layout;
    cfg->n_balance = 0;
    *threads = k->threads;
    *recompute = k->recompute;
    return BT_OK;
}
