/* cli/run_trace.c: `baton run --trace FILE.json --timeline FILE.svg`. Turns the engine's
 * per-instruction recording on, adds every training (or inference) step to a bt_trace, prints at
 * the end the step time predicted from the measured per-stage costs beside the measured one and
 * each stage's busy / transfer / idle shares, and writes the Chrome/Perfetto JSON and the SVG of
 * the last step. Every function accepts a NULL tracer (no tracing asked for) and does nothing.
 *
 * Under mpirun every rank traces (start and write are collective): at the start and at the end
 * each rank measures its clock against rank 0's (Cristian's ping-pongs, dist/clock.c, on a
 * communicator of the tracer's own), and at the end rank 0 gathers every rank's own stage
 * (bt_trace_pack_stage, MPI gather) and writes one trace of the whole job: each rank a process,
 * flows across ranks, the gradient reductions as slices (trace/trace_job.c). A rank's offset is
 * the mean of the two measurements; its uncertainty the larger of the two plus half their
 * difference (the drift over the run). The SVG timeline stays rank 0's view of replica 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "cli/cli.h"
#include "core/error.h"
#include "core/strutil.h"
#include "dist/dist.h"
#include "exec/engine_dist.h"
#include "trace/trace.h"

/* Ping-pongs per rank and clock measurement; how long the tracer's collectives may wait. */
#define BT_TRACE_SYNC_ROUNDS 16
#define BT_TRACE_DIST_TIMEOUT_S 120.0

struct bt_cli_tracer {
    bt_engine *engine;
    bt_trace *trace;
    const char *json_path, *svg_path;
    const bt_dist_layout *layout; /* under mpirun: this rank's place; NULL in one process */
    bt_comm *comm;             /* the tracer's own duplicate of the world */
    bt_clock_sync sync0;       /* this rank's clock against rank 0's at the start */
};

/* Collective under mpirun: the tracer's communicator and the first clock measurement. */
static bt_status dist_start(bt_cli_tracer *t)
{
    t->layout = bt_engine_dist_layout(t->engine);
    if (!t->layout || !t->json_path) return BT_OK; /* --timeline alone: rank 0's view, as before */
    BT_TRY(bt_comm_world(&t->comm));
    return bt_dist_clock_sync(t->comm, 0, BT_TRACE_SYNC_ROUNDS, BT_TRACE_DIST_TIMEOUT_S, &t->sync0);
}

int bt_cli_tracer_start(bt_engine *e, const char *json_path, const char *svg_path, bt_cli_tracer **out)
{
    *out = NULL;
    if (!json_path && !svg_path) return BT_EXIT_OK;
    bt_cli_tracer *t = calloc(1, sizeof *t);
    if (!t || bt_trace_create(&t->trace) != BT_OK) {
        free(t);
        fprintf(stderr, "baton run: out of memory for the trace\n");
        return BT_EXIT_RUNTIME;
    }
    t->engine = e;
    t->json_path = json_path;
    t->svg_path = svg_path;
    bt_status st = dist_start(t);
    if (st != BT_OK) {
        bt_cli_tracer_destroy(t);
        return bt_cli_fail("run", st);
    }
    *out = t;
    return BT_EXIT_OK;
}

void bt_cli_tracer_destroy(bt_cli_tracer *t)
{
    if (!t) return;
    bt_comm_free(t->comm);
    bt_trace_destroy(t->trace);
    free(t);
}

int bt_cli_tracer_step(bt_cli_tracer *t)
{
    if (!t) return BT_EXIT_OK;
    bt_status st = bt_trace_add_step(t->trace, t->engine);
    return st == BT_OK ? BT_EXIT_OK : bt_cli_fail("run", st);
}

/* A JSON number, or null when it is not finite. */
static json_t *json_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

void bt_cli_tracer_summary(const bt_cli_tracer *t, int jsonl, double measured_ms)
{
    if (!t || bt_trace_num_steps(t->trace) == 0) return;
    double predicted = 0, traced = 0;
    int have_prediction = bt_trace_predict(t->trace, &predicted, &traced) == BT_OK;
    int p = bt_trace_num_stages(t->trace);
    if (jsonl) {
        json_t *rec = json_pack("{s:b, s:i}", "trace", 1, "steps", bt_trace_num_steps(t->trace)), *stages = json_array();
        if (rec && have_prediction) json_object_set_new(rec, "predicted_step_ms", json_num(predicted));
        if (rec) json_object_set_new(rec, "measured_step_ms", json_num(measured_ms));
        for (int s = 0; stages && s < p; s++) {
            bt_trace_stage_stats ss;
            if (bt_trace_stage_summary(t->trace, s, &ss) != BT_OK) continue;
            json_array_append_new(stages, json_pack("{s:i, s:o, s:o, s:o, s:o, s:o}", "stage", s, "busy",
                                                    json_num(ss.busy), "transfer", json_num(ss.transfer), "idle",
                                                    json_num(ss.idle), "fwd_ms", json_num(ss.fwd_ms), "bwd_ms",
                                                    json_num(ss.bwd_ms)));
        }
        if (rec && stages) json_object_set_new(rec, "stages", stages);
        else json_decref(stages);
        if (rec) {
            json_dumpf(rec, stdout, JSON_REAL_PRECISION(9) | JSON_ENSURE_ASCII);
            printf("\n");
        }
        json_decref(rec);
        return;
    }
    printf("\ntraced %d step%s:", bt_trace_num_steps(t->trace), bt_trace_num_steps(t->trace) == 1 ? "" : "s");
    if (have_prediction)
        printf(" predicted step %.2f ms (simulated from measured per-stage costs) vs measured %.2f ms\n", predicted,
               measured_ms);
    else
        printf(" no prediction (%s)\n", bt_last_error());
    printf("  %-5s %-8s %8s %9s %8s %10s %10s\n", "stage", "device", "busy", "transfer", "idle", "fwd ms",
           "bwd ms");
    for (int s = 0; s < p; s++) {
        bt_trace_stage_stats ss;
        if (bt_trace_stage_summary(t->trace, s, &ss) != BT_OK) continue;
        printf("  %-5d %-8s %7.1f%% %8.1f%% %7.1f%% %10.4f %10.4f\n", s, t->trace->stage[s].device,
               100 * ss.busy, 100 * ss.transfer, 100 * ss.idle, ss.fwd_ms, ss.bwd_ms);
    }
    printf("  (busy: forward, backward, optimizer; transfer: sends and the copy part of receives;\n"
           "   idle: waiting for a neighbour)\n");
}

/* Collective under mpirun: the second clock measurement, every rank's own stage gathered to rank
 * 0, which writes the job's trace; *worst_us gets the largest clock uncertainty (rank 0). */
static bt_status write_job(bt_cli_tracer *t, double *worst_us)
{
    const bt_dist_layout *l = t->layout;
    bt_clock_sync s1;
    void *pack = NULL, *all = NULL, *infos = NULL;
    size_t pack_len = 0, *lens = NULL, *info_lens = NULL;
    const void **parts = NULL;
    bt_status st = bt_dist_clock_sync(t->comm, 0, BT_TRACE_SYNC_ROUNDS, BT_TRACE_DIST_TIMEOUT_S, &s1);
    bt_trace_rank me = {l->rank, l->replica, l->stage, 0.5 * (t->sync0.offset_ms + s1.offset_ms),
                        (t->sync0.uncertainty_ms > s1.uncertainty_ms ? t->sync0.uncertainty_ms : s1.uncertainty_ms) +
                            0.5 * fabs(t->sync0.offset_ms - s1.offset_ms)};
    if (st == BT_OK) st = bt_trace_pack_stage(t->trace, l->stage, &pack, &pack_len);
    if (st == BT_OK && l->rank == 0) {
        lens = calloc((size_t)l->size, sizeof *lens);
        info_lens = calloc((size_t)l->size, sizeof *info_lens);
        parts = calloc((size_t)l->size, sizeof *parts);
        if (!lens || !info_lens || !parts) st = bt_error(BT_ERR_NOMEM, "trace: out of memory");
    }
    /* every rank enters both gathers, so a rank that failed above cannot leave the others waiting */
    bt_status g = bt_comm_gather_bytes(t->comm, &me, sizeof me, 0, &infos, info_lens, BT_TRACE_DIST_TIMEOUT_S);
    if (g == BT_OK) g = bt_comm_gather_bytes(t->comm, pack, pack_len, 0, &all, lens, BT_TRACE_DIST_TIMEOUT_S);
    if (st == BT_OK) st = g;
    if (st == BT_OK && l->rank == 0) {
        const bt_trace_rank *info = infos;
        const unsigned char *at = all;
        *worst_us = 0;
        for (int r = 0; r < l->size; r++) {
            if (info_lens[r] != sizeof me || info[r].rank != r) {
                st = bt_error(BT_ERR_INTERNAL, "trace: rank %d sent no place in the job", r);
                break;
            }
            parts[r] = at;
            at += lens[r];
            if (info[r].uncertainty_ms * 1e3 > *worst_us) *worst_us = info[r].uncertainty_ms * 1e3;
        }
        if (st == BT_OK) st = bt_trace_write_job_json(parts, lens, info, l->size, l->stages, t->json_path);
    }
    free(pack);
    free(all);
    free(infos);
    free(lens);
    free(info_lens);
    free(parts);
    return st;
}

int bt_cli_tracer_write(bt_cli_tracer *t, int jsonl)
{
    if (!t) return BT_EXIT_OK;
    double worst_us = 0;
    if (t->layout && t->json_path) {
        bt_status st = write_job(t, &worst_us);
        if (st != BT_OK) return bt_cli_fail("run", st);
        if (!jsonl)
            printf("wrote %s: the whole job, %d ranks, each a process; clocks aligned to rank 0's within +- %.1f us "
                   "(open it in https://ui.perfetto.dev or chrome://tracing)\n",
                   t->json_path, t->layout->size, worst_us);
    }
    if (bt_trace_num_steps(t->trace) == 0) return BT_EXIT_OK;
    bt_status st = BT_OK;
    if (t->json_path && !t->layout) st = bt_trace_write_json(t->trace, t->json_path);
    if (st == BT_OK && t->svg_path) st = bt_trace_write_svg(t->trace, t->svg_path);
    if (st != BT_OK) {
        bt_cli_print_error("run");
        return BT_EXIT_RUNTIME;
    }
    if (!jsonl) {
        if (t->json_path && !t->layout)
            printf("wrote %s (open it in https://ui.perfetto.dev or chrome://tracing)\n", t->json_path);
        if (t->svg_path) printf("wrote %s (the last step)\n", t->svg_path);
    }
    return BT_EXIT_OK;
}
