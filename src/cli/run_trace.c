/* cli/run_trace.c: `baton run --trace FILE.json --timeline FILE.svg`. Turns the engine's
 * per-instruction recording on, adds every training (or inference) step to a bt_trace, prints at
 * the end the step time predicted from the measured per-stage costs beside the measured one and
 * each stage's busy / transfer / idle shares, and writes the Chrome/Perfetto JSON and the SVG of
 * the last step. Every function accepts a NULL tracer (no tracing asked for) and does nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "cli/cli.h"
#include "core/strutil.h"
#include "trace/trace.h"

struct bt_cli_tracer {
    bt_engine *engine;
    bt_trace *trace;
    const char *json_path, *svg_path;
};

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
    *out = t;
    return BT_EXIT_OK;
}

void bt_cli_tracer_destroy(bt_cli_tracer *t)
{
    if (!t) return;
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

int bt_cli_tracer_write(bt_cli_tracer *t, int jsonl)
{
    if (!t) return BT_EXIT_OK;
    if (bt_trace_num_steps(t->trace) == 0) return BT_EXIT_OK;
    bt_status st = BT_OK;
    if (t->json_path) st = bt_trace_write_json(t->trace, t->json_path);
    if (st == BT_OK && t->svg_path) st = bt_trace_write_svg(t->trace, t->svg_path);
    if (st != BT_OK) {
        bt_cli_print_error("run");
        return BT_EXIT_RUNTIME;
    }
    if (!jsonl) {
        if (t->json_path)
            printf("wrote %s (open it in https://ui.perfetto.dev or chrome://tracing)\n", t->json_path);
        if (t->svg_path) printf("wrote %s (the last step)\n", t->svg_path);
    }
    return BT_EXIT_OK;
}
