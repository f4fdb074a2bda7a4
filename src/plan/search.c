/* plan/search.c: the layout search (see search.h): stages x threads x micro-batches x schedule
 * (interleaved 1F1B with each virtual chunk count that fits) x recomputation, each cut optimally and simulated by placement.c from the profile measured at its
 * micro-batch size and thread count; the fastest that fits wins.
 *
 * Data flow: profiles in, placement.h (partition DP + simulator) used, candidates out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "plan/plan.h"
#include "plan/search.h"
#include "sched/sched.h"

void bt_search_params_init(bt_search_params *p)
{
    memset(p, 0, sizeof *p);
    p->training = 1;
    p->dtype = BT_F32;
    p->precision = BT_F32;
    p->devices = "cpu:0";
    p->cores = 1;
    p->recompute = -2;
}

static int all_cpu(const char (*dev)[32], int n)
{
    for (int d = 0; d < n; d++)
        if (strncmp(dev[d], "cpu:", 4) != 0) return 0;
    return 1;
}

/* The choices the search walks, resolved from the params. */
typedef struct choices {
    char dev[BT_MAX_STAGES][32];
    int n_dev, max_p, cpu;
    int mb[BT_SEARCH_MAX_CHOICES], n_mb;
    bt_schedule_kind sched[BT_SEARCH_MAX_CHOICES];
    int n_sched;
    int rec[2], n_rec;
    int units;                  /* layers, block copies counted once: the most logical stages */
} choices;

static bt_status resolve(const bt_search_params *sp, choices *c)
{
    memset(c, 0, sizeof *c);
    if (!sp->graph || sp->batch < 1) return bt_error(BT_ERR_INVALID_ARG, "layout search: no graph or batch");
    c->n_dev = bt_plan_split_devices(sp->devices ? sp->devices : "", c->dev, BT_MAX_STAGES);
    if (c->n_dev < 1) return bt_error(BT_ERR_INVALID_ARG, "layout search: no candidate devices in '%s'",
                                      sp->devices ? sp->devices : "");
    c->cpu = all_cpu((const char (*)[32])c->dev, c->n_dev);
    int layers = bt_graph_num_layers(sp->graph);
    c->units = 0;
    unsigned char *nc = NULL;
    BT_TRY(bt_placement_block_cuts(sp->graph, layers, &nc));
    for (int l = 0; l < layers; l++) c->units += l == 0 || !nc || !nc[l - 1];
    free(nc);
    c->max_p = c->n_dev < layers ? c->n_dev : layers;
    if (sp->max_stages > 0 && sp->max_stages < c->max_p) c->max_p = sp->max_stages;
    if (sp->n_microbatches > 0) {
        for (int i = 0; i < sp->n_microbatches && c->n_mb < BT_SEARCH_MAX_CHOICES; i++)
            if (sp->microbatches[i] >= 1 && sp->batch % sp->microbatches[i] == 0) c->mb[c->n_mb++] = sp->microbatches[i];
    } else {
        for (int m = 1; m <= 32 && m <= sp->batch; m *= 2)
            if (sp->batch % m == 0) c->mb[c->n_mb++] = m;
    }
    if (c->n_mb == 0)
        return bt_error(BT_ERR_INVALID_ARG, "layout search: no micro-batch count to try divides the batch of %lld",
                        (long long)sp->batch);
    if (!sp->training) {
        c->sched[c->n_sched++] = BT_SCHEDULE_STREAM;
    } else if (sp->n_schedules > 0) {
        for (int i = 0; i < sp->n_schedules; i++) c->sched[c->n_sched++] = sp->schedules[i];
    } else {
        bt_schedule_kind all[BT_SEARCH_MAX_CHOICES];
        int n = bt_schedule_kinds(1, all, BT_SEARCH_MAX_CHOICES);
        for (int i = 0; i < n; i++) c->sched[c->n_sched++] = all[i];
    }
    if (!sp->training || sp->recompute == 0) c->rec[c->n_rec++] = 0;
    else if (sp->recompute == 1 || sp->recompute == -1) c->rec[c->n_rec++] = sp->recompute;
    else c->rec[c->n_rec++] = 0, c->rec[c->n_rec++] = 1;
    return BT_OK;
}

/* Thread counts for p stages: CPU stages share the cores (p x t <= cores); others take 1. */
static int max_threads(const bt_search_params *sp, const choices *c, int p)
{
    if (!c->cpu) return 1;
    int t = (sp->cores > 0 ? sp->cores : 1) / p;
    return t < 1 ? 1 : t;
}

static int thread_ok(const bt_search_params *sp, const choices *c, int p, int t)
{
    if (sp->threads > 0) return t == sp->threads;
    return t <= max_threads(sp, c, p);
}

static int top_threads(const bt_search_params *sp, const choices *c)
{
    int t = max_threads(sp, c, 1);
    return sp->threads > t ? sp->threads : t;
}

bt_status bt_search_points(const bt_search_params *sp, bt_search_point *out, int max, int *n)
{
    choices c;
    *n = 0;
    BT_TRY(resolve(sp, &c));
    for (int i = 0; i < c.n_mb; i++)
        for (int t = 1; t <= top_threads(sp, &c); t++) {
            int used = 0;
            for (int p = 1; p <= c.max_p && !used; p++) used = thread_ok(sp, &c, p, t);
            if (!used) continue;
            if (*n >= max) return bt_error(BT_ERR_INVALID_ARG, "layout search: more than %d measurements", max);
            out[(*n)++] = (bt_search_point){sp->batch / c.mb[i], t};
        }
    return BT_OK;
}

static const bt_profile *profile_for(const bt_search_point *pts, const bt_profile *const *profs, int n,
                                     int64_t mbs, int t)
{
    for (int i = 0; i < n; i++)
        if (pts[i].microbatch_size == mbs && pts[i].threads == t) return profs[i];
    return NULL;
}

/* Whether the search tries schedule kind on p devices with m micro-batches and v chunks each:
 * interleaved 1F1B takes v >= 2 on two devices or more, within the units of the model and
 * Megatron's groups (m a multiple of p); zbv v = 2 exactly, on two devices or more, within the
 * units (any m); every other kind v = 1 only. */
static int virtual_ok(const choices *c, bt_schedule_kind kind, int p, int m, int v)
{
    if (kind != BT_SCHEDULE_INTERLEAVED_1F1B && kind != BT_SCHEDULE_ZBV) return v == 1;
    if (kind == BT_SCHEDULE_ZBV && v != 2) return 0;
    if (v < 2 || p < 2 || p * v > c->units || p * v > BT_MAX_STAGES) return 0;
    return bt_schedule_check_shape(kind, p * v, m, v) == BT_OK ? 1 : (bt_clear_error(), 0);
}

static bt_status grow(bt_search_result *r, int *cap)
{
    if (r->n < *cap) return BT_OK;
    int c = *cap ? *cap * 2 : 64;
    bt_search_candidate *p = realloc(r->cand, (size_t)c * sizeof *p);
    if (!p) return bt_error(BT_ERR_NOMEM, "layout search: out of memory");
    r->cand = p;
    *cap = c;
    return BT_OK;
}

/* Places one candidate; on success *pl holds it (the caller keeps or clears it). */
static void try_one(const bt_search_params *sp, const choices *c, const bt_profile *prof,
                    bt_search_candidate *k, bt_placement *pl)
{
    char list[BT_MAX_STAGES * 33];
    bt_plan_join_devices((const char (*)[32])c->dev, k->stages, list, sizeof list);
    bt_placement_params lp;
    bt_placement_params_init(&lp);
    lp.devices = list;
    lp.microbatches = k->microbatches;
    lp.schedule = k->schedule;
    lp.memory = sp->memory;
    lp.graph = sp->graph;
    lp.dtype = sp->dtype;
    lp.precision = sp->precision;
    lp.optimizer_slots = sp->optimizer_slots;
    lp.recompute = k->recompute;
    lp.virtual_stages = k->chunks;
    memset(pl, 0, sizeof *pl);
    if (!prof) {
        snprintf(k->why, sizeof k->why, "no measurement at %lld samples, %d threads",
                 (long long)(sp->batch / k->microbatches), k->threads);
        return;
    }
    bt_status st = bt_placement_plan(prof, &lp, pl);
    if (st != BT_OK) {
        snprintf(k->why, sizeof k->why, "%s", bt_last_error());
        return;
    }
    k->fits = 1;
    k->step_ms = pl->step_ms;
    k->bubble = pl->bubble;
    for (int s = 0; s < pl->stages; s++) {
        if (pl->stage[s].peak_bytes > k->peak_bytes) k->peak_bytes = pl->stage[s].peak_bytes;
        k->first_layer[s] = pl->stage[s].first_layer;
    }
    k->first_layer[pl->stages] = bt_graph_num_layers(sp->graph);
}

/* a beats b (index -1: nothing yet): faster, or as fast with less memory. */
static int beats(const bt_search_result *r, const bt_search_candidate *a, int b)
{
    if (b < 0) return 1;
    const bt_search_candidate *o = &r->cand[b];
    if (a->step_ms < o->step_ms * (1 - 1e-9)) return 1;
    return a->step_ms <= o->step_ms * (1 + 1e-9) && a->peak_bytes < o->peak_bytes;
}

bt_status bt_search_layouts(const bt_search_params *sp, const bt_search_point *pts,
                            const bt_profile *const *profs, int n_points, bt_search_result *r)
{
    choices c;
    int cap = 0;
    memset(r, 0, sizeof *r);
    r->best = r->best_single = r->best_multi = -1;
    BT_TRY(resolve(sp, &c));
    bt_plan_join_devices((const char (*)[32])c.dev, c.n_dev, r->candidates, sizeof r->candidates);
    for (int p = 1; p <= c.max_p; p++)
        for (int t = 1; t <= top_threads(sp, &c); t++) {
            if (!thread_ok(sp, &c, p, t)) continue;
            for (int i = 0; i < c.n_mb; i++)
                for (int s = 0; s < c.n_sched; s++)
                    for (int v = 1; v <= BT_SEARCH_MAX_VIRTUAL; v++) /* interleaved's chunks; 1 for the rest */
                    for (int q = 0; q < c.n_rec && virtual_ok(&c, c.sched[s], p, c.mb[i], v); q++) {
                        BT_TRY(grow(r, &cap));
                        bt_search_candidate *k = &r->cand[r->n];
                        memset(k, 0, sizeof *k);
                        *k = (bt_search_candidate){.stages = p, .threads = t, .microbatches = c.mb[i], .chunks = v,
                                                   .recompute = c.rec[q], .schedule = c.sched[s]};
                        bt_placement pl;
                        try_one(sp, &c, profile_for(pts, profs, n_points, sp->batch / c.mb[i], t), k, &pl);
                        int idx = r->n++;
                        if (!k->fits) continue;
                        /* ties go to less memory, then to the earlier: fewer stages, threads,
                         * micro-batches */
                        if (p == 1 && beats(r, k, r->best_single)) r->best_single = idx;
                        if (p > 1 && beats(r, k, r->best_multi)) r->best_multi = idx;
                        if (beats(r, k, r->best)) {
                            bt_placement_clear(&r->placement);
                            r->placement = pl;
                            r->best = idx;
                            snprintf(r->devices, sizeof r->devices, "%s", "");
                            bt_plan_join_devices((const char (*)[32])c.dev, p, r->devices, sizeof r->devices);
                        } else {
                            bt_placement_clear(&pl);
                        }
                    }
        }
    if (r->best < 0) {
        const char *why = r->n ? r->cand[0].why : "nothing to try";
        return bt_error(BT_ERR_NOMEM, "no layout fits: %d tried; one stage, 1 micro-batch: %s", r->n, why);
    }
    return BT_OK;
}

void bt_search_result_clear(bt_search_result *r)
{
    if (!r) return;
    free(r->cand);
    r->cand = NULL;
    r->n = 0;
    bt_placement_clear(&r->placement);
}
