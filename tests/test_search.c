/* tests/test_search.c: the layout search (plan/search.h). Profiles are measured for real at every
 * point the search lists (so their bytes are the graph's), then their times are replaced by
 * synthetic costs with a known answer: GEMM efficiency that falls with smaller micro-batches and
 * a second thread worth 1.8x makes one stage fastest, and the search says so with the predicted
 * step of one stage by hand; perfectly linear costs and no gain from threads make a pipeline
 * fastest; a memory limit between a layout's memory with and without recomputation makes the
 * search choose recomputation; the points cover every micro-batch size and thread count tried;
 * with 2 micro-batches and no W to defer, interleaving wins with its chunk count chosen, and the
 * layout it hands to the engine builds; a costly turn hand-off (the profile's handoff_ms) makes
 * the search leave interleaving alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton.h"
#include "bt_test.h"
#include "plan/plan.h"
#include "plan/search.h"
#include "profile/auto_layout.h"
#include "sched/sched.h"
#include "test_models.h"

#define BATCH 64

/* Per layer, per sample: forward 1 ms at full efficiency, backward 2 ms; efficiency
 * mbs / (mbs + knee) (knee 0: perfect); threads t speed up by `gain` for t = 2. */
typedef struct cost_model {
    double knee, gain, step_ms;
} cost_model;

static void synth_times(bt_profile *p, int threads, const cost_model *cm)
{
    double mbs = (double)p->microbatch_size;
    double eff = mbs / (mbs + cm->knee);
    p->handoff_ms = 0; /* measured for real (noise on a busy machine): the tests that want one set it */
    double speed = threads == 2 ? cm->gain : 1.0;
    for (int l = 0; l < p->n_layers; l++) {
        bt_profile_time *t = &p->times[l * p->n_kinds];
        int has = p->layers[l].params > 0;
        t->fwd_ms = has ? 0.01 * mbs / eff / speed : 0.0001;
        t->bwd_ms = 2 * t->fwd_ms;
        t->b_ms = has ? t->fwd_ms : t->bwd_ms; /* split backward: B and W a forward each */
        t->w_ms = has ? t->fwd_ms : 0;
        t->step_ms = has ? cm->step_ms : 0;
    }
}

typedef struct measured {
    bt_search_point pts[BT_SEARCH_MAX_POINTS];
    bt_profile *prof[BT_SEARCH_MAX_POINTS];
    int n;
} measured;

static void measure_all(const bt_graph *g, const bt_search_params *sp, const cost_model *cm, measured *ms)
{
    CU_ASSERT_FATAL(bt_search_points(sp, ms->pts, BT_SEARCH_MAX_POINTS, &ms->n) == BT_OK);
    for (int i = 0; i < ms->n; i++) {
        bt_profile_params pp;
        bt_profile_params_init(&pp);
        pp.devices = "cpu:0,cpu:1";
        pp.batch = sp->batch;
        pp.microbatches = (int)(sp->batch / ms->pts[i].microbatch_size);
        pp.threads = 1;
        pp.repeats = 1;
        pp.warmup = 0;
        pp.transfer_bytes = 4096;
        pp.handoff_repeats = 0; /* synthetic costs: the tests that want a hand-off set one */
        ms->prof[i] = NULL;
        CU_ASSERT_FATAL(bt_profile_measure(g, "search", &pp, &ms->prof[i]) == BT_OK);
        synth_times(ms->prof[i], ms->pts[i].threads, cm);
        for (int k = 0; k < ms->prof[i]->n_transfers; k++) ms->prof[i]->transfers[k].gb_per_s = 1e6; /* ~free */
    }
}

static void free_all(measured *ms)
{
    for (int i = 0; i < ms->n; i++) bt_profile_destroy(ms->prof[i]);
}

static void params(const bt_graph *g, bt_search_params *sp)
{
    bt_search_params_init(sp);
    sp->graph = g;
    sp->batch = BATCH;
    sp->devices = "cpu:0,cpu:1";
    sp->cores = 2;
    sp->optimizer_slots = 2;
}

static void test_points(void)
{
    bt_graph *g = bt_test_residual_graph(8, 16, 4);
    bt_search_params sp;
    params(g, &sp);
    bt_search_point pts[BT_SEARCH_MAX_POINTS];
    int n = 0;
    CU_ASSERT_FATAL(bt_search_points(&sp, pts, BT_SEARCH_MAX_POINTS, &n) == BT_OK);
    /* micro-batches 1..32 (sizes 64..2) x threads 1 and 2 (one stage may have both cores) */
    CU_ASSERT_EQUAL(n, 12);
    int seen[7][3] = {{0}};
    for (int i = 0; i < n; i++) {
        int lg = (int)log2((double)pts[i].microbatch_size);
        CU_ASSERT(lg >= 1 && lg <= 6 && (1 << lg) == pts[i].microbatch_size);
        CU_ASSERT(pts[i].threads == 1 || pts[i].threads == 2);
        if (lg >= 0 && lg < 7 && pts[i].threads >= 1 && pts[i].threads <= 2) seen[lg][pts[i].threads]++;
    }
    for (int lg = 1; lg <= 6; lg++) CU_ASSERT(seen[lg][1] == 1 && seen[lg][2] == 1);
    /* a fixed thread count, one device: threads 2 only, one stage */
    sp.threads = 2;
    sp.devices = "cpu:0";
    CU_ASSERT_FATAL(bt_search_points(&sp, pts, BT_SEARCH_MAX_POINTS, &n) == BT_OK);
    CU_ASSERT_EQUAL(n, 6);
    for (int i = 0; i < n; i++) CU_ASSERT_EQUAL(pts[i].threads, 2);
    /* nothing divides */
    sp.batch = 0;
    CU_ASSERT(bt_search_points(&sp, pts, BT_SEARCH_MAX_POINTS, &n) == BT_ERR_INVALID_ARG);
    bt_graph_destroy(g);
}

/* Small micro-batches are inefficient and two threads give 1.8x: one stage with both cores and the
 * whole batch wins, and the search says by how much the best pipeline is slower. */
static void test_one_stage_fastest(void)
{
    bt_graph *g = bt_test_residual_graph(8, 16, 4);
    bt_search_params sp;
    params(g, &sp);
    cost_model cm = {32.0, 1.8, 0.05};
    measured ms;
    measure_all(g, &sp, &cm, &ms);
    bt_search_result r;
    bt_status st = bt_search_layouts(&sp, ms.pts, (const bt_profile *const *)ms.prof, ms.n, &r);
    if (st != BT_OK) printf("\n%s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    const bt_search_candidate *b = &r.cand[r.best];
    CU_ASSERT_EQUAL(b->stages, 1);
    CU_ASSERT_EQUAL(b->threads, 2);
    CU_ASSERT_EQUAL(b->microbatches, 1);
    CU_ASSERT_EQUAL(b->recompute, 0);
    CU_ASSERT_EQUAL(r.best_single, r.best);
    CU_ASSERT_FATAL(r.best_multi >= 0);
    CU_ASSERT(r.cand[r.best_multi].stages == 2 && r.cand[r.best_multi].step_ms > b->step_ms);
    CU_ASSERT_STRING_EQUAL(r.devices, "cpu:0");
    /* by hand: layers with parameters (fc1, fc2, head: 3) at 64 samples, efficiency 64/96, 1.8x */
    double f = 0.01 * 64 / (64.0 / 96.0) / 1.8, per_layer = f + 2 * f;
    int with_params = 0;
    for (int l = 0; l < bt_graph_num_layers(g); l++) {
        bt_layer_info li;
        bt_graph_layer(g, l, &li);
        with_params += li.n_params > 0;
    }
    double other = (bt_graph_num_layers(g) - with_params) * 3 * 0.0001;
    double expect = with_params * per_layer + other + with_params * 0.05;
    CU_ASSERT_DOUBLE_EQUAL(b->step_ms, expect, 1e-9);
    CU_ASSERT_EQUAL(r.placement.stages, 1);
    bt_search_result_clear(&r);
    free_all(&ms);
    bt_graph_destroy(g);
}

/* Linear costs, no gain from a second thread: a 2-stage pipeline with many micro-batches wins. */
static void test_pipeline_fastest(void)
{
    bt_graph *g = bt_test_residual_graph(8, 16, 4);
    bt_search_params sp;
    params(g, &sp);
    cost_model cm = {0.0, 1.0, 0.0};
    measured ms;
    measure_all(g, &sp, &cm, &ms);
    bt_search_result r;
    CU_ASSERT_FATAL(bt_search_layouts(&sp, ms.pts, (const bt_profile *const *)ms.prof, ms.n, &r) == BT_OK);
    const bt_search_candidate *b = &r.cand[r.best];
    CU_ASSERT_EQUAL(b->stages, 2);
    CU_ASSERT_EQUAL(b->threads, 1);
    CU_ASSERT_EQUAL(b->microbatches, 32); /* the smallest bubble */
    CU_ASSERT(r.best_single >= 0 && r.cand[r.best_single].step_ms > b->step_ms);
    CU_ASSERT_STRING_EQUAL(r.devices, "cpu:0,cpu:1");
    /* the schedules came from src/sched: every training kind was tried, interleaving with v >= 2,
     * zbv with its 2 chunks */
    bt_schedule_kind kinds[BT_SEARCH_MAX_CHOICES];
    int nk = bt_schedule_kinds(1, kinds, BT_SEARCH_MAX_CHOICES);
    CU_ASSERT(nk >= 2);
    for (int k = 0; k < nk; k++) {
        int tried = 0;
        for (int i = 0; i < r.n; i++) {
            tried |= r.cand[i].schedule == kinds[k];
            bt_schedule_kind sk = r.cand[i].schedule;
            CU_ASSERT(sk == BT_SCHEDULE_INTERLEAVED_1F1B ? r.cand[i].chunks >= 2
                      : sk == BT_SCHEDULE_ZBV           ? r.cand[i].chunks == 2
                                                         : r.cand[i].chunks == 1);
        }
        CU_ASSERT(tried);
    }
    bt_search_result_clear(&r);
    free_all(&ms);
    bt_graph_destroy(g);
}

/* One stage, GPipe, 32 micro-batches: 32 slots. A memory limit between the layout's bytes with
 * and without recomputation leaves only the recomputing candidate. */
static void test_recompute_when_memory_is_short(void)
{
    bt_graph *g = bt_test_residual_graph(64, 256, 4);
    bt_search_params sp;
    params(g, &sp);
    sp.devices = "cpu:0";
    sp.n_microbatches = 1;
    sp.microbatches[0] = 32;
    sp.n_schedules = 1;
    sp.schedules[0] = BT_SCHEDULE_GPIPE;
    sp.threads = 1;
    cost_model cm = {0.0, 1.0, 0.0};
    measured ms;
    measure_all(g, &sp, &cm, &ms);
    bt_search_result r;
    CU_ASSERT_FATAL(bt_search_layouts(&sp, ms.pts, (const bt_profile *const *)ms.prof, ms.n, &r) == BT_OK);
    CU_ASSERT_EQUAL_FATAL(r.n, 2);
    CU_ASSERT(r.cand[0].recompute == 0 && r.cand[1].recompute == 1);
    CU_ASSERT(r.cand[0].fits && r.cand[1].fits);
    uint64_t plain = r.cand[0].peak_bytes, rec = r.cand[1].peak_bytes;
    CU_ASSERT(rec < plain);
    CU_ASSERT(r.cand[1].step_ms > r.cand[0].step_ms); /* recomputation costs a forward */
    CU_ASSERT_EQUAL(r.best, 0);
    bt_search_result_clear(&r);
    sp.memory = (plain + rec) / 2;
    CU_ASSERT_FATAL(bt_search_layouts(&sp, ms.pts, (const bt_profile *const *)ms.prof, ms.n, &r) == BT_OK);
    CU_ASSERT(!r.cand[0].fits && r.cand[1].fits);
    CU_ASSERT(strstr(r.cand[0].why, "memory") != NULL);
    CU_ASSERT_EQUAL(r.best, 1);
    bt_search_result_clear(&r);
    sp.memory = rec / 2; /* nothing fits: an error that says so, every candidate listed */
    CU_ASSERT(bt_search_layouts(&sp, ms.pts, (const bt_profile *const *)ms.prof, ms.n, &r) == BT_ERR_NOMEM);
    CU_ASSERT(strstr(bt_last_error(), "no layout fits") != NULL);
    CU_ASSERT_EQUAL(r.n, 2);
    CU_ASSERT_EQUAL(r.best, -1);
    bt_search_result_clear(&r);
    free_all(&ms);
    bt_graph_destroy(g);
}

/* p = 2, m = 2: 1F1B idles a third of the step; interleaving shrinks that by its chunk count, and
 * with W free ZB-H1 has nothing to defer. Linear costs, one thread. */
static void test_interleaving_chosen(void)
{
    bt_graph *g = bt_test_residual_graph(8, 16, 4); /* 7 layers: v up to 3 on 2 devices */
    bt_search_params sp;
    params(g, &sp);
    sp.threads = 1;
    sp.n_microbatches = 1;
    sp.microbatches[0] = 2;
    sp.recompute = 0;
    cost_model cm = {0.0, 1.0, 0.0};
    measured ms;
    measure_all(g, &sp, &cm, &ms);
    for (int i = 0; i < ms.n; i++) {
        ms.prof[i]->handoff_ms = 0; /* measured for real: free here */
        for (int l = 0; l < ms.prof[i]->n_layers; l++) {
            bt_profile_time *t = &ms.prof[i]->times[l * ms.prof[i]->n_kinds];
            t->b_ms = t->bwd_ms;
            t->w_ms = 0;
        }
    }
    bt_search_result r;
    CU_ASSERT_FATAL(bt_search_layouts(&sp, ms.pts, (const bt_profile *const *)ms.prof, ms.n, &r) == BT_OK);
    const bt_search_candidate *b = &r.cand[r.best];
    CU_ASSERT_EQUAL(b->schedule, BT_SCHEDULE_INTERLEAVED_1F1B);
    CU_ASSERT(b->stages == 2 && b->chunks >= 2 && b->chunks <= 3);
    int seen[4] = {0};
    for (int i = 0; i < r.n; i++)
        if (r.cand[i].schedule == BT_SCHEDULE_INTERLEAVED_1F1B && r.cand[i].chunks <= 3) seen[r.cand[i].chunks]++;
    CU_ASSERT(seen[2] && seen[3]); /* 2 x 4 logical stages would not fit 7 layers: not tried */
    /* the layout it hands on builds: 2 x v logical stages on two devices */
    bt_parallel_config cfg;
    memset(&cfg, 0, sizeof cfg);
    int threads = 0, rec = 0;
    char *devices = NULL, *layout = NULL;
    CU_ASSERT_FATAL(bt_auto_apply(g, &r, r.best, &cfg, &threads, &rec, &devices, &layout) == BT_OK);
    CU_ASSERT_EQUAL(cfg.virtual_stages, b->chunks);
    CU_ASSERT_EQUAL(cfg.stages, 2 * b->chunks);
    CU_ASSERT_STRING_EQUAL(cfg.devices, "cpu:0,cpu:1");
    bt_plan *plan = NULL;
    CU_ASSERT(bt_plan_build(g, &cfg, &plan) == BT_OK);
    if (plan)
        for (int s = 0; s < cfg.stages; s++) CU_ASSERT_EQUAL(plan->first_layer[s], b->first_layer[s]);
    bt_plan_destroy(plan);
    free(devices);
    free(layout);
    bt_search_result_clear(&r);
    /* a turn hand-off as dear as a layer's forward and backward: interleaving no longer pays */
    for (int i = 0; i < ms.n; i++) ms.prof[i]->handoff_ms = 3 * ms.prof[i]->times[0].fwd_ms;
    CU_ASSERT_FATAL(bt_search_layouts(&sp, ms.pts, (const bt_profile *const *)ms.prof, ms.n, &r) == BT_OK);
    CU_ASSERT(r.cand[r.best].schedule != BT_SCHEDULE_INTERLEAVED_1F1B);
    bt_search_result_clear(&r);
    free_all(&ms);
    bt_graph_destroy(g);
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"points: every micro-batch size and thread count", test_points},
        {"one stage with both cores wins when small GEMMs are slow", test_one_stage_fastest},
        {"a pipeline wins when costs are linear", test_pipeline_fastest},
        {"recomputation chosen when memory is short", test_recompute_when_memory_is_short},
        {"interleaving chosen with its chunk count; not when hand-offs cost", test_interleaving_chosen},
        {NULL, NULL},
    };
    return bt_test_main("search", cases);
}
