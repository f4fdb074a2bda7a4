/* plan/placement.c: profile -> partition problem -> optimal cuts -> simulated report (see
 * placement.h for the cost model). The problem's arrays are built once; the optimal and the
 * hand-made placements are described by the same code, so their figures compare exactly.
 *
 * Data flow: profile.h in, partition.h and sched.h (simulator) used, strings out. Never prints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/strutil.h"
#include "graph/graph_internal.h"
#include "plan/memory.h"
#include "plan/placement.h"
#include "plan/plan.h"
#include "sched/sched.h"

void bt_placement_params_init(bt_placement_params *p)
{
    memset(p, 0, sizeof *p);
    p->devices = "cpu:0";
    p->schedule = BT_SCHEDULE_1F1B;
    p->dtype = BT_F32;
    p->precision = BT_F32;
    p->recompute = -1;
}

void bt_placement_problem_free(bt_placement_problem *pb)
{
    if (!pb) return;
    free(pb->cost);
    free(pb->xfer);
    free(pb->static_bytes);
    free(pb->act_bytes);
    free(pb->no_cut);
    pb->no_cut = NULL;
    pb->cost = pb->xfer = NULL;
    pb->static_bytes = pb->act_bytes = NULL;
}

void bt_placement_clear(bt_placement *pl)
{
    if (!pl) return;
    free(pl->layout);
    free(pl->yaml);
    pl->layout = pl->yaml = NULL;
}

static void kind_of(const char *device, char *kind, size_t size)
{
    size_t n = strcspn(device, ":");
    if (n >= size) n = size - 1;
    memcpy(kind, device, n);
    kind[n] = '\0';
}

static uint64_t physical_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return BT_PARTITION_UNLIMITED;
    return (uint64_t)pages * (uint64_t)page;
}

static void set_capacities(const bt_placement_params *pp, bt_placement_problem *pb)
{
    int n_cpu = 0, v = pb->chunks; /* v slots of one device share it */
    char kind[16];
    for (int d = 0; d < pb->n_devices; d++) {
        kind_of(pb->devices[d], kind, sizeof kind);
        n_cpu += strcmp(kind, "cpu") == 0;
    }
    uint64_t host = physical_memory();
    for (int d = 0; d < pb->n_devices; d++) {
        kind_of(pb->devices[d], kind, sizeof kind);
        pb->capacity[d] = BT_PARTITION_UNLIMITED;
        pb->capacity_known[d] = 0;
        if (pp->memory > 0) {
            pb->capacity[d] = pp->memory / (uint64_t)v;
            pb->capacity_known[d] = 1;
        } else if (strcmp(kind, "cpu") == 0 && host != BT_PARTITION_UNLIMITED) {
            pb->capacity[d] = host / (uint64_t)n_cpu; /* n_cpu counts the slots: v per device */
            pb->capacity_known[d] = 1;
        }
    }
}

/* The slowest measured rate between any two planned devices (0: none known). */
static double slowest_rate(const bt_profile *prof, const bt_placement_problem *pb, int *unknown)
{
    double slowest = 0;
    *unknown = 0;
    for (int a = 0; a < pb->n_devices; a++)
        for (int b = 0; b < pb->n_devices; b++) {
            if (a == b || strcmp(pb->devices[a], pb->devices[b]) == 0) continue; /* v slots of one device */
            double r = bt_profile_rate(prof, pb->devices[a], pb->devices[b]);
            if (r <= 0) *unknown = 1;
            else if (slowest == 0 || r < slowest) slowest = r;
        }
    return slowest;
}

static double bytes_ms(double bytes, double gb_per_s)
{
    return gb_per_s > 0 ? bytes / (gb_per_s * 1e6) : 0;
}

/* Whether layer l, on a stage ending at layer `last` (not the final stage: `sends`), is
 * recomputed: the params' choice or the graph's flag, except the stage's last layer, whose output
 * goes on to the next stage and is kept (the engine keeps every value sent on; a skip connection's
 * source is kept too, which this per-layer model counts as recomputed). */
static int layer_recomputed(const bt_placement_params *pp, int l, int last, int sends)
{
    int on = pp->recompute >= 0 ? pp->recompute : 0;
    if (pp->recompute < 0 && pp->graph) {
        bt_layer_info li;
        on = bt_graph_layer(pp->graph, l, &li) == BT_OK && li.recompute;
    }
    return on && !(sends && l == last);
}

static bt_status fill_arrays(const bt_profile *prof, const bt_placement_params *pp, bt_placement_problem *pb)
{
    int L = prof->n_layers, D = pb->n_devices;
    pb->cost = calloc((size_t)D * (size_t)L, sizeof *pb->cost);
    pb->xfer = calloc((size_t)L, sizeof *pb->xfer);
    pb->static_bytes = calloc((size_t)L, sizeof *pb->static_bytes);
    pb->act_bytes = calloc((size_t)L, sizeof *pb->act_bytes);
    if (!pb->cost || !pb->xfer || !pb->static_bytes || !pb->act_bytes)
        return bt_error(BT_ERR_NOMEM, "placement: out of memory");
    double mbs = (double)pb->microbatch_size;
    int unknown;
    pb->xfer_gb_per_s = D > 1 ? slowest_rate(prof, pb, &unknown) : 0;
    for (int l = 0; l < L; l++) {
        const bt_profile_layer *pl = &prof->layers[l];
        for (int d = 0; d < D; d++) {
            const bt_profile_time *t = bt_profile_time_at(prof, l, pb->kind[d]);
            double c = t->fwd_ms + (pb->training ? t->bwd_ms : 0);
            pb->cost[(size_t)d * L + l] = c * pb->time_scale;
        }
        double cut = (double)pl->cut_bytes_per_sample * mbs * (pb->training ? 2 : 1);
        pb->xfer[l] = bytes_ms(cut, pb->xfer_gb_per_s);
        if (pb->cross_rank) /* one message each way over the link between ranks */
            pb->xfer[l] += (pb->training ? 2 : 1) * bt_profile_link_ms(pb->link_latency_ms, pb->link_gb_per_s,
                                                                       (double)pl->cut_bytes_per_sample * mbs);
        pb->static_bytes[l] = pl->param_bytes + (pb->training ? pl->grad_bytes + pl->optimizer_bytes : 0);
        /* recomputing every layer keeps only a stage's inputs and what it sends on per
         * micro-batch in flight, which depends on the cuts: the search's per-layer sum counts
         * nothing for it, and the chosen cuts are priced (and refused) by the memory model */
        int rec = pb->training && layer_recomputed(pp, l, -1, 0);
        uint64_t per = rec ? 0 : pl->activation_bytes_per_sample;
        pb->act_bytes[l] = per * (uint64_t)pb->microbatch_size;
        if (rec)
            for (int d = 0; d < D; d++)
                pb->cost[(size_t)d * L + l] += bt_profile_time_at(prof, l, pb->kind[d])->fwd_ms * pb->time_scale;
    }
    return BT_OK;
}

bt_status bt_placement_problem_build(const bt_profile *prof, const bt_placement_params *pp,
                                     bt_placement_problem *pb)
{
    bt_status st = BT_OK;
    memset(pb, 0, sizeof *pb);
    if (!prof || !pp) return bt_error(BT_ERR_INVALID_ARG, "placement: NULL argument");
    pb->n_devices = bt_plan_split_devices(pp->devices ? pp->devices : "", pb->devices, BT_MAX_STAGES);
    if (pb->n_devices < 1)
        return bt_error(BT_ERR_INVALID_ARG, "devices '%s': expected a list like cpu:0,cpu:1 (at most %d)",
                        pp->devices ? pp->devices : "", BT_MAX_STAGES);
    int v = pp->virtual_stages > 1 ? pp->virtual_stages : 1;
    pb->physical = pb->n_devices;
    pb->chunks = v;
    if (v > 1) { /* interleaved: slot k is logical stage k, on device k mod P; zbv: in a V */
        int m = pp->microbatches > 0 ? pp->microbatches : prof->microbatches;
        if ((long)pb->physical * v > BT_MAX_STAGES)
            return bt_error(BT_ERR_INVALID_ARG, "%d devices x virtual %d: more than %d stages", pb->physical, v,
                            BT_MAX_STAGES);
        BT_TRY(bt_schedule_check_shape(pp->schedule, pb->physical * v, m, v));
        for (int k = pb->physical; k < pb->physical * v; k++)
            memcpy(pb->devices[k], pb->devices[bt_schedule_stage_device(pp->schedule, pb->physical * v, v, k)],
                   sizeof pb->devices[k]);
        pb->n_devices = pb->physical * v;
    }
    for (int d = 0; d < pb->n_devices; d++) {
        char kind[16];
        kind_of(pb->devices[d], kind, sizeof kind);
        pb->kind[d] = bt_profile_kind_index(prof, kind);
        if (pb->kind[d] < 0)
            return bt_error(BT_ERR_INVALID_ARG,
                            "device %s: the profile has no %s measurements (profile on a %s device)",
                            pb->devices[d], kind, kind);
    }
    if (pb->n_devices > prof->n_layers)
        return bt_error(BT_ERR_INVALID_ARG, "%d devices (one stage each) but the model has only %d layers",
                        pb->n_devices, prof->n_layers);
    int m = pp->microbatches > 0 ? pp->microbatches : prof->microbatches;
    int64_t batch = pp->batch > 0 ? pp->batch : prof->batch;
    if (m > 4096 || batch % m != 0)
        return bt_error(BT_ERR_INVALID_ARG, "the %s batch of %lld samples does not split into %d micro-batches",
                        pp->batch > 0 ? "planned" : "profile's", (long long)batch, m);
    pb->batch = batch;
    pb->microbatch_size = batch / m;
    pb->cross_rank = pp->cross_rank && pb->n_devices > 1;
    if (pb->cross_rank && !bt_profile_link_model(prof, &pb->link_latency_ms, &pb->link_gb_per_s))
        return bt_error(BT_ERR_INVALID_ARG,
                        "planning stages on different ranks needs the link between ranks, and this profile has "
                        "none: measure it under mpirun (mpirun -np 2 baton profile MODEL.yaml)");
    pb->time_scale = (double)pb->microbatch_size / (double)prof->microbatch_size;
    pb->training = prof->training && pp->schedule != BT_SCHEDULE_STREAM;
    set_capacities(pp, pb);
    BT_TRY_GOTO(st, fill_arrays(prof, pp, pb), fail);
    bt_partition_problem_init(&pb->pr);
    pb->pr.layers = prof->n_layers;
    pb->pr.devices = pb->n_devices;
    pb->pr.stages = pb->n_devices;
    pb->pr.cost = pb->cost;
    pb->pr.xfer = pb->xfer;
    pb->pr.static_bytes = pb->static_bytes;
    pb->pr.act_bytes = pb->act_bytes;
    pb->pr.capacity = pb->capacity;
    pb->pr.microbatches = m;
    pb->pr.schedule = pp->schedule;
    pb->pr.permute = pp->permute && v == 1 && pb->n_devices <= BT_PARTITION_MAX_PERMUTED_DEVICES;
    pb->pr.chunks = v;
    BT_TRY_GOTO(st, bt_placement_block_cuts(pp->graph, prof->n_layers, &pb->no_cut), fail);
    pb->pr.no_cut = pb->no_cut;
    return BT_OK;
fail:
    bt_placement_problem_free(pb);
    return st;
}

bt_status bt_placement_block_cuts(const bt_graph *g, int n_layers, unsigned char **no_cut)
{
    *no_cut = NULL;
    if (!g) return BT_OK;
    if (g->n_layers != n_layers)
        return bt_error(BT_ERR_INVALID_ARG, "placement: the graph has %d layers, the profile %d", g->n_layers, n_layers);
    int any = 0;
    for (int l = 1; l < n_layers; l++) any |= g->layers[l].joins_previous;
    if (!any) return BT_OK;
    unsigned char *nc = calloc((size_t)n_layers, 1);
    if (!nc) return bt_error(BT_ERR_NOMEM, "placement: out of memory");
    for (int l = 0; l + 1 < n_layers; l++) nc[l] = g->layers[l + 1].joins_previous ? 1 : 0;
    *no_cut = nc;
    return BT_OK;
}

bt_status bt_placement_uniform_cuts(const bt_graph *g, int n_layers, int stages, int *first_layer)
{
    unsigned char *nc = NULL;
    BT_TRY(bt_placement_block_cuts(g, n_layers, &nc));
    int *unit_first = malloc(((size_t)n_layers + 1) * sizeof *unit_first), n = 0, cut[BT_MAX_STAGES + 1];
    if (!unit_first) {
        free(nc);
        return bt_error(BT_ERR_NOMEM, "placement: out of memory");
    }
    for (int l = 0; l < n_layers; l++)
        if (l == 0 || !nc || !nc[l - 1]) unit_first[n++] = l;
    unit_first[n] = n_layers;
    free(nc);
    bt_status st = bt_partition_uniform(n, stages, cut);
    if (st == BT_OK)
        for (int k = 0; k <= stages; k++) first_layer[k] = unit_first[cut[k]];
    free(unit_first);
    return st;
}

/* ---- describing a placement ------------------------------------------------------------------- */

static void fill_stage(const bt_profile *prof, const bt_placement_params *pp, const bt_placement_problem *pb,
                       const bt_partition_plan *plan, int k, bt_placement_stage *out)
{
    int d = plan->device[k], a = plan->first_layer[k], b = plan->first_layer[k + 1];
    memset(out, 0, sizeof *out);
    out->first_layer = a;
    out->n_layers = b - a;
    snprintf(out->device, sizeof out->device, "%s", pb->devices[d]);
    for (int l = a; l < b; l++) {
        const bt_profile_time *t = bt_profile_time_at(prof, l, pb->kind[d]);
        out->params += prof->layers[l].params;
        out->static_bytes += pb->static_bytes[l];
        out->activation_bytes += pb->act_bytes[l];
        out->fwd_ms += t->fwd_ms * pb->time_scale;
        if (pb->training) {
            out->bwd_ms += t->bwd_ms * pb->time_scale;
            out->b_ms += t->b_ms * pb->time_scale;
            out->w_ms += t->w_ms * pb->time_scale;
            out->step_ms += t->step_ms;
            if (layer_recomputed(pp, l, b - 1, k + 1 < plan->stages))
                out->recompute_ms += t->fwd_ms * pb->time_scale;
        }
    }
    out->bwd_ms += out->recompute_ms;
    out->b_ms += out->recompute_ms;
    out->w_ms += out->recompute_ms; /* a split backward's W recomputes again (worker.c) */
    out->inflight = plan->inflight[k];
    out->peak_bytes = plan->stage_bytes[k];
    out->capacity = pb->capacity_known[d] ? pb->capacity[d] : UINT64_MAX;
    out->stage_ms = plan->stage_time[k];
}

/* Transfer times between neighbours at the measured rate of each directed pair. */
static void fill_transfers(const bt_profile *prof, const bt_placement_problem *pb, bt_placement *pl)
{
    double mbs = (double)pb->microbatch_size;
    for (int k = 0; k < pl->stages; k++) {
        bt_placement_stage *s = &pl->stage[k];
        if (k + 1 < pl->stages) {
            double r = bt_profile_rate(prof, s->device, pl->stage[k + 1].device);
            pl->unknown_rates |= r <= 0;
            int last = s->first_layer + s->n_layers - 1;
            s->send_act_ms = bytes_ms((double)prof->layers[last].cut_bytes_per_sample * mbs, r);
            if (pb->cross_rank)
                s->link_act_ms = bt_profile_link_ms(pb->link_latency_ms, pb->link_gb_per_s,
                                                    (double)prof->layers[last].cut_bytes_per_sample * mbs);
            s->send_act_ms += s->link_act_ms;
        }
        if (k > 0 && pb->training) {
            double r = bt_profile_rate(prof, s->device, pl->stage[k - 1].device);
            pl->unknown_rates |= r <= 0;
            s->send_grad_ms =
                bytes_ms((double)prof->layers[s->first_layer - 1].cut_bytes_per_sample * mbs, r);
            if (pb->cross_rank)
                s->link_grad_ms = bt_profile_link_ms(pb->link_latency_ms, pb->link_gb_per_s,
                                                     (double)prof->layers[s->first_layer - 1].cut_bytes_per_sample * mbs);
            s->send_grad_ms += s->link_grad_ms;
        }
    }
}

static bt_status simulate(bt_placement *pl, int training, double handoff)
{
    int p = pl->stages;
    double fwd[BT_MAX_STAGES], bwd[BT_MAX_STAGES], sa[BT_MAX_STAGES], sg[BT_MAX_STAGES], step = 0;
    double b[BT_MAX_STAGES], w[BT_MAX_STAGES];
    for (int k = 0; k < p; k++) {
        fwd[k] = pl->stage[k].fwd_ms;
        bwd[k] = pl->stage[k].bwd_ms;
        b[k] = pl->stage[k].b_ms;
        w[k] = pl->stage[k].w_ms;
        sa[k] = pl->stage[k].send_act_ms;
        sg[k] = pl->stage[k].send_grad_ms;
        if (pl->stage[k].step_ms > step) step = pl->stage[k].step_ms;
    }
    bt_schedule *sched = NULL;
    bt_sim_result res;
    memset(&res, 0, sizeof res);
    bt_sim_costs costs = {fwd, training ? bwd : NULL, sa, sg, training ? step : 0, NULL, handoff};
    bt_status st = bt_schedule_build_virtual(pl->schedule, p, pl->microbatches, pl->chunks > 1 ? pl->chunks : 1, &sched);
    if (st == BT_OK && training && sched->split_backward) { /* zb-h1: B and W measured apart */
        costs.bwd = b;
        costs.wgt = w;
    }
    if (st == BT_OK) st = bt_simulate(sched, &costs, &res);
    if (st == BT_OK) {
        pl->step_ms = res.step_time;
        pl->bubble = res.bubble;
        for (int k = 0; k < p; k++)
            pl->stage[k].idle = res.step_time > 0 ? 1.0 - res.busy[k] / res.step_time : 0;
    }
    bt_sim_result_free(&res);
    bt_schedule_destroy(sched);
    return st;
}

/* Appends s to a growing string; returns 0 on allocation failure. */
static int cat(char **buf, size_t *len, size_t *cap, const char *s)
{
    size_t n = strlen(s);
    if (*len + n + 1 > *cap) {
        size_t c = (*cap ? *cap * 2 : 256) + n;
        char *b = realloc(*buf, c);
        if (!b) return 0;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, s, n + 1);
    *len += n;
    return 1;
}

static bt_status render(const bt_profile *prof, bt_placement *pl)
{
    char *layout = NULL, *yaml = NULL, line[512];
    size_t ll = 0, lc = 0, yl = 0, yc = 0;
    int ok = cat(&layout, &ll, &lc, "");
    for (int k = 0; k < pl->stages && ok; k++)
        for (int l = pl->stage[k].first_layer; l < pl->stage[k].first_layer + pl->stage[k].n_layers && ok; l++) {
            if (l > 0) ok = cat(&layout, &ll, &lc, l == pl->stage[k].first_layer ? "|" : ",");
            for (const char *c = prof->layers[l].name; *c && ok; c++) {
                char esc[3] = {*c, 0, 0};
                if (*c == '"' || *c == '\\') esc[0] = '\\', esc[1] = *c;
                ok = cat(&layout, &ll, &lc, esc);
            }
        }
    ok = ok && cat(&yaml, &yl, &yc, "parallel:\n  devices: [");
    int v = pl->chunks > 1 ? pl->chunks : 1;
    for (int k = 0; k < pl->stages / v && ok; k++) { /* interleaved: the P devices, each once */
        snprintf(line, sizeof line, "%s%s", k ? ", " : "", pl->stage[k].device);
        ok = cat(&yaml, &yl, &yc, line);
    }
    char virt[32] = "";
    if (v > 1) snprintf(virt, sizeof virt, "    virtual: %d\n", v);
    snprintf(line, sizeof line,
             "]\n  pipeline:\n    stages: %d\n    microbatches: %d\n    schedule: %s\n%s"
             "    partition: {layout: \"",
             pl->stages, pl->microbatches, bt_schedule_name(pl->schedule), virt);
    ok = ok && cat(&yaml, &yl, &yc, line) && cat(&yaml, &yl, &yc, layout) && cat(&yaml, &yl, &yc, "\"}\n");
    if (!ok) {
        free(layout);
        free(yaml);
        return bt_error(BT_ERR_NOMEM, "placement: out of memory");
    }
    pl->layout = layout;
    pl->yaml = yaml;
    return BT_OK;
}

/* With the graph: every stage priced by the memory model the engine allocates from. Messages
 * between devices of different kinds go through host memory, as the engine's transfers do. */
static bt_status model_memory(const bt_placement_params *pp, const bt_placement_problem *pb,
                              const bt_partition_plan *plan, bt_placement *out)
{
    int p = plan->stages, slots[BT_MAX_STAGES], keep_mode = BT_KEEP_F32;
    unsigned char host[BT_MAX_STAGES * BT_MAX_STAGES], keep[BT_MAX_STAGES];
    BT_TRY(bt_memory_bf16_mode(&keep_mode));
    for (int a = 0; a < p; a++) {
        char kind[16];
        kind_of(pb->devices[plan->device[a]], kind, sizeof kind);
        /* bf16 activations as the engine keeps them: on CPU stages (exec/layout.c) */
        keep[a] = strcmp(kind, "cpu") == 0 ? (unsigned char)keep_mode : BT_KEEP_F32;
        slots[a] = pb->training ? plan->inflight[a] : 1;
        for (int b = 0; b < p; b++)
            host[a * p + b] = pb->kind[plan->device[a]] != pb->kind[plan->device[b]];
    }
    bt_plan *cut = NULL;
    BT_TRY(bt_plan_from_cuts(pp->graph, p, plan->first_layer, &cut));
    bt_memory_params mp;
    bt_memory_params_init(&mp);
    mp.microbatch_size = pb->microbatch_size;
    mp.microbatches = pb->pr.microbatches;
    mp.dtype = pp->dtype;
    mp.precision = pp->precision;
    mp.training = pb->training;
    mp.split_backward = pb->training && bt_schedule_splits_backward(pb->pr.schedule); /* W stashes */
    mp.optimizer_slots = pb->training ? pp->optimizer_slots : 0;
    mp.n_slots = slots;
    mp.host_path = host;
    mp.bf16_kept = keep;
    unsigned char *rec = NULL;
    if (pp->recompute >= 0) { /* the params' choice, else the graph's own flags */
        int n = bt_graph_num_layers(pp->graph);
        rec = malloc((size_t)n + 1);
        if (!rec) {
            bt_plan_destroy(cut);
            return bt_error(BT_ERR_NOMEM, "placement: out of memory");
        }
        memset(rec, pp->recompute ? 1 : 0, (size_t)n + 1);
        mp.recompute = rec;
    }
    for (int k = 0; k < p; k++) {
        bt_stage_memory sm;
        bt_memory_stage(pp->graph, cut, &mp, k, &sm, NULL);
        bt_placement_stage *s = &out->stage[k];
        s->static_bytes = sm.weights + sm.gradients + sm.optimizer;
        s->activation_bytes = sm.slot_bytes;
        s->peak_bytes = sm.device_total;
    }
    free(rec);
    bt_plan_destroy(cut);
    return BT_OK;
}

/* A chosen placement whose stages, priced by the memory model, exceed a known capacity. */
static bt_status check_fits(const bt_placement *pl)
{
    for (int k = 0; k < pl->stages; k++) {
        const bt_placement_stage *s = &pl->stage[k];
        if (s->capacity != UINT64_MAX && s->peak_bytes > s->capacity)
            return bt_error(BT_ERR_INVALID_ARG,
                            "no placement fits in memory: the best cut puts %llu bytes on stage %d (%s), "
                            "which offers %llu",
                            (unsigned long long)s->peak_bytes, k, s->device, (unsigned long long)s->capacity);
    }
    return BT_OK;
}

static bt_status describe(const bt_profile *prof, const bt_placement_params *pp, const bt_placement_problem *pb,
                          const bt_partition_plan *plan, bt_placement *out)
{
    memset(out, 0, sizeof *out);
    out->stages = plan->stages;
    out->chunks = pb->chunks;
    out->microbatches = pb->pr.microbatches;
    out->batch = pb->batch;
    out->microbatch_size = pb->microbatch_size;
    out->schedule = pb->pr.schedule;
    out->time_scale = pb->time_scale;
    out->bottleneck_ms = plan->bottleneck;
    out->unknown_rates = pb->n_devices > 1 && pb->xfer_gb_per_s <= 0;
    for (int k = 0; k < plan->stages; k++) {
        fill_stage(prof, pp, pb, plan, k, &out->stage[k]);
        out->recompute |= out->stage[k].recompute_ms > 0;
    }
    if (pp->graph) BT_TRY(model_memory(pp, pb, plan, out));
    fill_transfers(prof, pb, out);
    BT_TRY(simulate(out, pb->training, prof->handoff_ms));
    return render(prof, out);
}

bt_status bt_placement_plan(const bt_profile *prof, const bt_placement_params *pp, bt_placement *out)
{
    bt_placement_problem pb;
    bt_partition_plan plan;
    if (!out) return bt_error(BT_ERR_INVALID_ARG, "bt_placement_plan: out is NULL");
    memset(out, 0, sizeof *out);
    BT_TRY(bt_placement_problem_build(prof, pp, &pb));
    bt_status st = bt_partition_optimal(&pb.pr, &plan);
    if (st == BT_OK) st = describe(prof, pp, &pb, &plan, out);
    if (st == BT_OK && pp->graph) st = check_fits(out);
    if (st != BT_OK) bt_placement_clear(out);
    bt_placement_problem_free(&pb);
    return st;
}

bt_status bt_placement_evaluate(const bt_profile *prof, const bt_placement_params *pp,
                                const int *first_layer, bt_placement *out)
{
    bt_placement_problem pb;
    bt_partition_plan plan;
    if (!out || !first_layer) return bt_error(BT_ERR_INVALID_ARG, "bt_placement_evaluate: NULL argument");
    memset(out, 0, sizeof *out);
    BT_TRY(bt_placement_problem_build(prof, pp, &pb));
    memset(&plan, 0, sizeof plan);
    plan.stages = pb.pr.stages;
    for (int k = 0; k <= plan.stages; k++) plan.first_layer[k] = first_layer[k];
    for (int k = 0; k < plan.stages; k++) plan.device[k] = k;
    bt_status st = bt_partition_evaluate(&pb.pr, &plan);
    if (st == BT_OK) st = describe(prof, pp, &pb, &plan, out);
    bt_placement_problem_free(&pb);
    return st;
}

bt_status bt_placement_cut(const bt_profile *prof, const bt_graph *graph, const bt_parallel_config *cfg,
                           const char (*devices)[32], int n, int *first_layer)
{
    char list[BT_MAX_STAGES * 33] = "";
    if (n < 1 || n > BT_MAX_STAGES) return bt_error(BT_ERR_INVALID_ARG, "placement: %d devices", n);
    first_layer[0] = 0;
    first_layer[n] = prof->n_layers;
    if (n == 1) return BT_OK;
    bt_plan_join_devices(devices, n, list, sizeof list);
    bt_placement_params lp;
    bt_placement_params_init(&lp);
    lp.devices = list;
    lp.schedule = cfg->schedule;
    lp.graph = graph; /* cuts fall between block copies; costs stay the profile's */
    bt_placement_problem pb;
    bt_partition_plan plan;
    bt_status st = bt_placement_problem_build(prof, &lp, &pb);
    if (st == BT_OK) st = bt_partition_optimal(&pb.pr, &plan);
    if (st == BT_OK)
        for (int k = 0; k <= n; k++) first_layer[k] = plan.first_layer[k];
    bt_placement_problem_free(&pb);
    if (st != BT_OK) return bt_error_context(st, "partition: profile");
    return BT_OK;
}
