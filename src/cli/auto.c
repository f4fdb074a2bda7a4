/* cli/auto.c: `parallel: auto` for the commands that run or check a model, and the report the
 * layout search prints (shared with `baton plan --schedule auto`). The search measures the model
 * at every micro-batch size and thread count it considers (profile/auto_layout.h), tries stages x
 * threads x micro-batches x schedule x recomputation (plan/search.h) and the model then runs the
 * fastest that fits: devices, stages, cuts, micro-batches, schedule, BLAS threads, recomputation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "optim/optim.h"
#include "profile/auto_layout.h"

static const char *rec_name(int r) { return r ? "stage" : "none"; }

static void describe(const bt_search_candidate *k, char *buf, size_t size)
{
    snprintf(buf, size, "%d stage%s x %d thread%s, %d micro-batch%s, %s%s", k->stages, k->stages == 1 ? "" : "s",
             k->threads, k->threads == 1 ? "" : "s", k->microbatches, k->microbatches == 1 ? "" : "es",
             bt_schedule_name(k->schedule), k->recompute ? ", recompute" : "");
}

void bt_cli_auto_report(const bt_search_result *r, int64_t batch, int full)
{
    if (full) {
        printf("  %-6s %-7s %-13s %-17s %-9s %14s %8s\n", "stages", "threads", "micro-batches", "schedule",
               "recompute", "predicted step", "bubble");
        /* the best of each (stages, schedule, recompute) */
        for (int i = 0; i < r->n; i++) {
            const bt_search_candidate *k = &r->cand[i];
            if (!k->fits) continue;
            int better = 0;
            for (int j = 0; j < r->n && !better; j++) {
                const bt_search_candidate *o = &r->cand[j];
                better = j != i && o->fits && o->stages == k->stages && o->schedule == k->schedule &&
                         o->recompute == k->recompute && (o->step_ms < k->step_ms || (o->step_ms == k->step_ms && j < i));
            }
            if (better && !getenv("BATON_PLAN_ALL")) continue;
            printf("  %-6d %-7d %-13d %-17s %-9s %11.3f ms %7.1f%%%s\n", k->stages, k->threads, k->microbatches,
                   bt_schedule_name(k->schedule), rec_name(k->recompute), k->step_ms, 100 * k->bubble,
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
    sp->precision = sp->training ? m->train.precision : BT_F32;
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
    sp->recompute = any ? 1 : -1;
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
    if (st != BT_OK) return bt_cli_fail(cmd, st);
    return BT_EXIT_OK;
}

int bt_cli_resolve_auto(const char *cmd, bt_model *m, int threads, int verbose, bt_cli_auto *a)
{
    memset(a, 0, sizeof *a);
    if (!m->parallel.auto_layout) return BT_EXIT_OK;
    bt_search_params sp;
    bt_cli_auto_params(m, NULL, threads, &sp);
    bt_search_result r;
    int rc = bt_cli_auto_search(cmd, m, &sp, 0, &r);
    if (rc == BT_EXIT_OK) {
        int rec = 0;
        char *old_devices = (char *)m->parallel.devices, *old_layout = (char *)m->parallel.layout;
        bt_status st = bt_auto_apply(&r, &m->parallel, &a->threads, &rec, &a->devices, &a->layout);
        if (st == BT_OK) { /* the model owns its config's strings */
            free(old_devices);
            free(old_layout);
            a->devices = a->layout = NULL;
        }
        if (st == BT_OK && rec) st = bt_graph_set_recompute(m->graph, -1, 1);
        if (st != BT_OK) rc = bt_cli_fail(cmd, st);
        if (rc == BT_EXIT_OK && verbose) {
            printf("parallel: auto (%d layouts predicted from %s, measured now)\n", r.n, sp.devices);
            bt_cli_auto_report(&r, sp.batch, 0);
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
