/* cli/auto.c: `parallel: auto` for the commands that run or check a model, and the report the
 * layout search prints (shared with `baton plan --schedule auto`). The search measures the model
 * at every micro-batch size and thread count it considers (profile/auto_layout.h), tries stages x
 * threads x micro-batches x schedule x recomputation (plan/search.h) and the model then runs the
 * fastest that fits: devices, stages, cuts, micro-batches, schedule, BLAS threads, recomputation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/run.h"
#include "core/error.h"
#include "core/strutil.h"
#include "optim/optim.h"
#include "profile/auto_layout.h"

static const char *rec_name(int r) { return r > 0 ? "stage" : r < 0 ? "file's" : "none"; }

static void describe(const bt_search_candidate *k, char *buf, size_t size)
{
    char virt[32] = "";
    if (k->chunks > 1) snprintf(virt, sizeof virt, " (virtual %d)", k->chunks);
    snprintf(buf, size, "%d stage%s x %d thread%s, %d micro-batch%s, %s%s%s", k->stages, k->stages == 1 ? "" : "s",
             k->threads, k->threads == 1 ? "" : "s", k->microbatches, k->microbatches == 1 ? "" : "es",
             bt_schedule_name(k->schedule), virt, k->recompute > 0 ? ", recompute" : "");
}

void bt_cli_auto_report(const bt_search_result *r, int64_t batch, int full)
{
    if (full) {
        printf("  %-6s %-7s %-13s %-17s %-7s %-9s %14s %8s\n", "stages", "threads", "micro-batches", "schedule",
               "virtual", "recompute", "predicted step", "bubble");
        /* the best of each (stages, schedule, virtual, recompute) */
        for (int i = 0; i < r->n; i++) {
            const bt_search_candidate *k = &r->cand[i];
            if (!k->fits) continue;
            int better = 0;
            for (int j = 0; j < r->n && !better; j++) {
                const bt_search_candidate *o = &r->cand[j];
                better = j != i && o->fits && o->stages == k->stages && o->schedule == k->schedule &&
                         o->chunks == k->chunks &&
                         o->recompute == k->recompute && (o->step_ms < k->step_ms || (o->step_ms == k->step_ms && j < i));
            }
            if (better && !getenv("BATON_PLAN_ALL")) continue;
            printf("  %-6d %-7d %-13d %-17s %-7d %-9s %11.3f ms %7.1f%%%s\n", k->stages, k->threads, k->microbatches,
                   bt_schedule_name(k->schedule), k->chunks, rec_name(k->recompute), k->step_ms, 100 * k->bubble,
                   i == r->best ? "  <- best" : "");
        }
    }
    if (r->best < 0) return;
    const bt_search_candidate *b = &r->cand[r->best];
    char what[160];
    describe(b, what, sizeof what);
    printf("best: %s on %s: predicted %.3f ms per step (%.0f samples/s)\n", what, r->devices, b->step_ms,
           b->step_ms > 0 ? (double)batch * 1000.0 / b->step_ms : 0);
    if (b->stages == 1 && r->best_multi >= 0) {
        const bt_search_candidate *o = &r->cand[r->best_multi];
        describe(o, what, sizeof what);
        printf("one stage is fastest: the best pipeline (%s) is predicted %.2fx slower (%.3f ms)\n", what,
               o->step_ms / b->step_ms, o->step_ms);
    } else if (b->stages > 1 && r->best_single >= 0) {
        const bt_search_candidate *o = &r->cand[r->best_single];
        describe(o, what, sizeof what);
        printf("pipelining pays: the best single stage (%s) is predicted %.2fx slower (%.3f ms)\n", what,
               o->step_ms / b->step_ms, o->step_ms);
    } else if (b->stages == 1) {
        printf("one stage: no pipelined layout fits or was possible\n");
    }
}

void bt_cli_auto_params(const bt_model *m, const char *devices, int threads, bt_search_params *sp)
{
    static char list[BT_MAX_STAGES * 12];
    bt_search_params_init(sp);
    sp->graph = m->graph;
    sp->training = m->train.enabled && bt_graph_is_trainable(m->graph);
    sp->batch = m->train.batch;
    sp->dtype = m->dtype;
    sp->precision = m->train.precision; /* forward-only serving computes at it too */
    sp->optimizer_slots = sp->training ? bt_optim_state_count(&m->train.optimizer) : 0;
    sp->cores = bt_auto_cores();
    bt_auto_devices(devices, sp->cores, list, sizeof list);
    sp->devices = list;
    sp->threads = threads;
    /* a model whose file chose recomputation keeps it; otherwise the search may choose it */
    int any = 0;
    for (int l = 0; l < bt_graph_num_layers(m->graph); l++) {
        bt_layer_info li;
        if (bt_graph_layer(m->graph, l, &li) == BT_OK) any |= li.recompute;
    }
    sp->recompute = any ? -1 : -2;
}

int bt_cli_auto_search(const char *cmd, const bt_model *m, const bt_search_params *sp, int repeats,
                       bt_search_result *r)
{
    bt_profile_params pp;
    bt_profile_params_init(&pp);
    pp.optimizer = m->train.optimizer;
    pp.repeats = repeats > 0 ? repeats : 5;
    pp.warmup = 1;
    pp.fastest = 1; /* the machine may be shared: contention only adds time */
    pp.transfer_bytes = (size_t)1 << 20;
    int measured = 0;
    bt_status st = bt_auto_search(m->graph, m->name, sp, &pp, r, &measured);
    if (st == BT_ERR_NOMEM && sp->memory > 0)
        st = bt_error_context(st, "parallel: auto, under the limit given for each device (--memory) of %s",
                              bt_bytes_text_of((double)sp->memory).s);
    if (st == BT_ERR_NOMEM && strcmp(cmd, "plan") == 0) { /* plan: no placement fits is a usage error */
        bt_cli_print_error(cmd);
        return BT_EXIT_USAGE;
    }
    if (st != BT_OK) return bt_cli_fail(cmd, st);
    return BT_EXIT_OK;
}

/* The fastest prediction not yet in idx[0..n) with a distinct layout (stages, threads,
 * micro-batches, interleaved's chunks: schedule and recomputation variants of one layout differ
 * only as predicted, while v chunks per device bring hand-offs the simulator may misjudge),
 * within 1.5x of the best; kind 0: one stage only, 1: pipelines only, -1: either. -1 if none. */
static int next_fastest(const bt_search_result *r, const int *idx, int n, int kind)
{
    int pick = -1;
    for (int i = 0; i < r->n; i++) {
        const bt_search_candidate *k = &r->cand[i];
        if (!k->fits || k->step_ms > 1.5 * r->cand[r->best].step_ms) continue;
        if (kind >= 0 && (k->stages > 1) != kind) continue;
        int dup = 0;
        for (int j = 0; j < n && !dup; j++) {
            const bt_search_candidate *o = &r->cand[idx[j]];
            dup = o->stages == k->stages && o->threads == k->threads && o->microbatches == k->microbatches &&
                  o->chunks == k->chunks;
        }
        if (!dup && (pick < 0 || k->step_ms < r->cand[pick].step_ms ||
                     (k->step_ms == r->cand[pick].step_ms && k->peak_bytes < r->cand[pick].peak_bytes)))
            pick = i;
    }
    return pick;
}

/* The plainest layout: one stage, the most threads, the whole batch at once (no pipelining at
 * all), if it fits and is not in idx[0..n) already; -1 otherwise. */
static int whole_batch(const bt_search_result *r, const int *idx, int n)
{
    int pick = -1;
    for (int i = 0; i < r->n; i++) {
        const bt_search_candidate *k = &r->cand[i];
        if (!k->fits || k->stages != 1 || k->microbatches != 1) continue;
        if (pick < 0 || k->threads > r->cand[pick].threads ||
            (k->threads == r->cand[pick].threads && k->step_ms < r->cand[pick].step_ms))
            pick = i;
    }
    for (int j = 0; j < n && pick >= 0; j++) {
        const bt_search_candidate *o = &r->cand[idx[j]];
        if (o->stages == 1 && o->microbatches == 1 && o->threads == r->cand[pick].threads) pick = -1;
    }
    return pick;
}

/* The candidates worth running for real, best first: the fastest prediction, the fastest of the
 * other kind (one stage against a pipeline), the whole batch on one stage with every core, then
 * the next fastest; at most max. */
static int top_candidates(const bt_search_result *r, int *idx, int max)
{
    int n = 0, k;
    idx[n++] = r->best;
    if (n < max && (k = next_fastest(r, idx, n, r->cand[r->best].stages == 1)) >= 0) idx[n++] = k;
    if (n < max && (k = whole_batch(r, idx, n)) >= 0) idx[n++] = k;
    while (n < max && (k = next_fastest(r, idx, n, -1)) >= 0) idx[n++] = k;
    return n;
}

/* Builds candidate `which` as an engine and times `steps` steps (after `warmup`) on synthetic
 * data; *best_ms keeps the fastest seen. The graph's recomputation flags are left as the
 * candidate wants them. */
static bt_status trial(bt_model *m, const bt_search_result *r, int which, int threads, int64_t batch,
                       uint64_t memory, int warmup, int steps, const bt_cli_synth *data, double *best_ms)
{
    bt_parallel_config cfg = m->parallel;
    char *devices = NULL, *layout = NULL;
    int t = 0, rec = 0;
    bt_engine *e = NULL;
    BT_TRY(bt_auto_apply(m->graph, r, which, &cfg, &t, &rec, &devices, &layout));
    bt_status st = BT_OK;
    if (rec >= 0) st = bt_graph_set_recompute(m->graph, -1, rec);
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel = cfg;
    p.training = m->train.enabled;
    if (!p.training) p.parallel.schedule = BT_SCHEDULE_STREAM;
    p.optimizer = m->train.optimizer;
    p.batch = batch;
    p.dtype = m->dtype;
    p.device_memory = (size_t)memory;
    p.threads = threads > 0 ? threads : t;
    p.precision = m->train.precision;
    if (p.training) p.loss_scale = m->train.loss_scale;
    if (st == BT_OK) st = bt_engine_create(m->graph, &p, &e);
    for (int i = 0; st == BT_OK && i < warmup + steps; i++) {
        bt_step_result res;
        st = p.training ? bt_engine_train_step(e, data->feeds, data->n, &res)
                        : bt_engine_forward(e, data->feeds, data->n, NULL, &res);
        if (st == BT_OK && i >= warmup && (*best_ms <= 0 || res.step_ms < *best_ms)) *best_ms = res.step_ms;
    }
    bt_engine_destroy(e);
    free(devices);
    free(layout);
    return st;
}

#define TRIALS 4       /* candidates run for real */
#define TRIAL_PASSES 2 /* alternating passes over them */
#define TRIAL_STEPS 2  /* timed steps per pass */

/* Runs the top predictions for real, alternating, and returns the fastest measured (the
 * simulator does not see the executor's own costs: thread hand-offs, waits on a busy machine). */
static int measure_top(const char *cmd, bt_model *m, const bt_search_result *r, int threads, int64_t batch,
                       uint64_t memory, int verbose)
{
    int idx[TRIALS], n = top_candidates(r, idx, TRIALS);
    double ms[TRIALS] = {0};
    if (n <= 1) return r->best;
    bt_cli_synth data;
    if (bt_cli_synth_make(m->graph, batch, 1, &data) != 0) {
        bt_cli_synth_free(&data);
        return r->best;
    }
    for (int pass = 0; pass < TRIAL_PASSES; pass++)
        for (int i = 0; i < n; i++)
            if (ms[i] >= 0 && trial(m, r, idx[i], threads, batch, memory, pass == 0, TRIAL_STEPS, &data, &ms[i]) != BT_OK) {
                fprintf(stderr, "baton %s: parallel: auto: trying a layout failed (%s); it is left out\n", cmd,
                        bt_last_error());
                ms[i] = -1;
            }
    bt_cli_synth_free(&data);
    int pick = -1;
    for (int i = 0; i < n; i++)
        if (ms[i] > 0 && (pick < 0 || ms[i] < ms[pick])) pick = i;
    if (verbose) {
        printf("tried the %d fastest predictions for real (fastest of %d steps each, alternating):\n", n,
               TRIAL_PASSES * TRIAL_STEPS);
        for (int i = 0; i < n; i++) {
            char what[160];
            describe(&r->cand[idx[i]], what, sizeof what);
            printf("  %-52s predicted %9.3f ms  measured %9.3f ms%s\n", what, r->cand[idx[i]].step_ms, ms[i],
                   i == pick ? "  <- runs" : "");
        }
    }
    return pick < 0 ? r->best : idx[pick];
}

int bt_cli_resolve_auto(const char *cmd, bt_model *m, int threads, int verbose, int try_top, bt_cli_auto *a)
{
    return bt_cli_resolve_auto_for(cmd, m, threads, verbose, try_top, 0, 0, 0, a);
}

int bt_cli_resolve_auto_for(const char *cmd, bt_model *m, int threads, int verbose, int try_top, int forward_only,
                            int64_t batch, uint64_t memory, bt_cli_auto *a)
{
    memset(a, 0, sizeof *a);
    if (!m->parallel.auto_layout) return BT_EXIT_OK;
    bt_search_params sp;
    bt_cli_auto_params(m, NULL, threads, &sp);
    if (forward_only) sp.training = 0;
    if (batch > 0) sp.batch = batch;
    sp.memory = memory;
    if (forward_only) try_top = 0; /* the trials train */
    bt_search_result r;
    int rc = bt_cli_auto_search(cmd, m, &sp, 0, &r);
    if (rc == BT_EXIT_OK) {
        if (verbose) {
            printf("parallel: auto (%d layouts predicted from %s, measured now)\n", r.n, sp.devices);
            bt_cli_auto_report(&r, sp.batch, 0);
        }
        int which = try_top ? measure_top(cmd, m, &r, threads, sp.batch, memory, verbose) : r.best;
        int rec = 0;
        char *old_devices = (char *)m->parallel.devices, *old_layout = (char *)m->parallel.layout;
        bt_status st = bt_auto_apply(m->graph, &r, which, &m->parallel, &a->threads, &rec, &a->devices, &a->layout);
        if (st == BT_OK) { /* the model owns its config's strings */
            free(old_devices);
            free(old_layout);
            a->devices = a->layout = NULL;
        }
        if (st == BT_OK && rec >= 0) st = bt_graph_set_recompute(m->graph, -1, rec);
        a->recompute = rec;
        if (st != BT_OK) rc = bt_cli_fail(cmd, st);
        if (rc == BT_EXIT_OK && verbose && which != r.best) {
            char what[160];
            describe(&r.cand[which], what, sizeof what);
            printf("runs: %s (measured fastest)\n", what);
        }
    }
    bt_search_result_clear(&r);
    return rc;
}

void bt_cli_auto_clear(bt_cli_auto *a)
{
    free(a->devices);
    free(a->layout);
    memset(a, 0, sizeof *a);
}
