/* cli/cmd_check.c: `baton check MODEL.yaml`: loads and validates a model, prints its layer table
 * and totals, then the pipeline plan (stage, device, layers, parameters, bytes each stage sends per
 * micro-batch, and the activation memory the schedule makes it hold). Nothing is allocated on a
 * device and nothing runs. The activations are the memory model's (plan/memory.h), laid out with
 * the parameters the engine takes (exec/layout.c), so they are the figure `baton run` reports for
 * the same flags, recomputation included. --json prints the same as one JSON object (jansson): "model", "layers"
 * [{index, name, op, act, shape, params}], the totals, and "plan" {stages, microbatches,
 * microbatch_samples, schedule, "n_stages", "stages": [{stage, device, layers: [names], params,
 * send_bytes_per_microbatch, in_flight, activation_bytes}], "crossings": [...]}. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "core/error.h"
#include "graph/graph_internal.h"
#include "optim/optim.h"
#include "plan/memory.h"
#include "plan/plan.h"
#include "plan/profile.h"
#include "sched/sched.h"

static void check_usage(FILE *f)
{
    fprintf(f,
            "usage: baton check MODEL.yaml [KEY=VALUE ...] [options]\n"
            "\n"
            "Validates a model file and prints its layers, parameters and pipeline plan.\n"
            "\n"
            "options:\n"
            "  --devices LIST        devices, one per stage: cpu:0,cpu:1 (beats parallel.devices)\n"
            "  --stages N            number of pipeline stages\n"
            "  --partition P         uniform | params | profile: how layers are cut into stages\n"
            "  --balance N,N,...     layers per stage, e.g. 3,2\n"
            "  --layout SPEC         layers per stage by name: \"fc1,fc2|head,loss\"\n"
            "  --recompute R         none | stage | LAYER,LAYER: activation recomputation\n"
            "  --microbatches M      micro-batches per step\n"
            "  --schedule S          gpipe | 1f1b | stream\n"
            "  --plugin LIB.so       load a library of custom ops first (its\n"
            "                        baton_plugin_register registers them)\n"
            "  --json                print the layers and the plan as one JSON object\n"
            "  -h, --help            this help\n"
            "KEY=VALUE overrides any field of the file, e.g. train.optimizer.lr=3e-4\n");
}

/* The layer table and totals: printed, or (j not NULL) added to j. */
static void print_layers(const bt_model *m, json_t *j)
{
    const bt_graph *g = m->graph;
    char shape[64], num[32], opname[64], name[256], path[1024];
    if (j) {
        json_t *layers = json_array();
        for (int i = 0; i < bt_graph_num_layers(g); i++) {
            bt_layer_info info;
            bt_graph_layer(g, i, &info);
            json_t *dims = json_array();
            for (int d = 0; d < info.shape.ndim; d++) json_array_append_new(dims, json_integer(info.shape.dim[d]));
            json_array_append_new(layers, json_pack("{s:i, s:s, s:s, s:o, s:o, s:I}", "index", i, "name", info.name,
                                                    "op", info.op, "act", info.act ? json_string(info.act) : json_null(),
                                                    "shape", dims, "params", (json_int_t)info.n_params));
        }
        json_object_set_new(j, "model", json_string(m->name ? m->name : ""));
        json_object_set_new(j, "path", json_string(m->path ? m->path : ""));
        json_object_set_new(j, "layers", layers);
        json_object_set_new(j, "inputs", json_integer(bt_graph_num_inputs(g)));
        json_object_set_new(j, "parameter_tensors", json_integer(bt_graph_num_params(g)));
        json_t *params = json_array(); /* each tensor: name, shape, the parameter it is tied to */
        for (int i = 0; i < bt_graph_num_params(g); i++) {
            bt_param_info p;
            bt_graph_param(g, i, &p);
            json_t *dims = json_array();
            for (int d = 0; d < p.shape.ndim; d++) json_array_append_new(dims, json_integer(p.shape.dim[d]));
            json_array_append_new(params, json_pack("{s:s, s:o, s:o}", "name", p.name, "shape", dims, "tied_to",
                                                    p.tied_to ? json_string(p.tied_to) : json_null()));
        }
        json_object_set_new(j, "parameters", params);
        json_object_set_new(j, "params", json_integer(bt_graph_total_params(g)));
        json_object_set_new(j, "trainable", json_boolean(bt_graph_is_trainable(g)));
        return;
    }
    printf("model %s (%s)\n\n", bt_cli_escape(m->name ? m->name : "?", name, sizeof name),
           bt_cli_escape(m->path, path, sizeof path));
    printf("  %-3s %-20s %-20s %-18s %12s\n", "#", "layer", "op", "output", "params");
    for (int i = 0; i < bt_graph_num_layers(g); i++) {
        bt_layer_info info;
        bt_graph_layer(g, i, &info);
        snprintf(opname, sizeof opname, "%s%s%s", info.op, info.act ? "+" : "", info.act ? info.act : "");
        printf("  %-3d %-20s %-20s %-18s %12s\n", i, info.name, opname,
               bt_shape_format(&info.shape, shape, sizeof shape),
               bt_cli_group(info.n_params, num, sizeof num));
    }
    printf("\n  %d inputs, %d layers, %d parameter tensors, %s parameters (%s as f32)\n",
           bt_graph_num_inputs(g), bt_graph_num_layers(g), bt_graph_num_params(g),
           bt_cli_group(bt_graph_total_params(g), num, sizeof num),
           bt_cli_bytes((double)bt_graph_total_params(g) * 4, shape, sizeof shape));
    printf("  %s\n", bt_graph_is_trainable(g) ? "trainable: the last layer is a loss"
                                              : "inference only: the last layer is not a loss");
}

/* Each stage's memory as the engine lays the plan out (exec/layout.c's parameters: the schedule's
 * slots, the model's dtype and precision, optimizer state, bf16 activations on CPU stages as
 * BATON_BF16_STASH says, the graph's recomputation), a boundary between devices of different
 * kinds going through host memory. out has plan->stages entries. */
static bt_status plan_memory(const bt_model *m, const bt_plan *plan, const bt_schedule *sched, int64_t mbs,
                             bt_stage_memory *out)
{
    int p = plan->stages, slots[BT_MAX_STAGES], keep_mode = BT_KEEP_F32;
    unsigned char host[BT_MAX_STAGES * BT_MAX_STAGES], keep[BT_MAX_STAGES];
    char kind[BT_MAX_STAGES][16];
    BT_TRY(bt_memory_bf16_mode(&keep_mode));
    for (int s = 0; s < p; s++) {
        bt_profile_device_kind(plan->device[s], kind[s], sizeof kind[s]);
        keep[s] = strcmp(kind[s], "cpu") == 0 ? (unsigned char)keep_mode : BT_KEEP_F32;
        slots[s] = bt_schedule_max_inflight(sched, s);
    }
    for (int a = 0; a < p; a++)
        for (int b = 0; b < p; b++) host[a * p + b] = strcmp(kind[a], kind[b]) != 0;
    bt_memory_params mp;
    bt_memory_params_init(&mp);
    mp.microbatch_size = mbs;
    mp.microbatches = m->parallel.microbatches;
    mp.dtype = m->dtype;
    mp.precision = m->train.precision;
    mp.training = m->train.enabled;
    mp.optimizer_slots = m->train.enabled ? bt_optim_state_count(&m->train.optimizer) : 0;
    mp.n_slots = slots;
    mp.host_path = host;
    mp.split_backward = sched->split_backward;
    mp.bf16_kept = keep;
    for (int s = 0; s < p; s++) bt_memory_stage(m->graph, plan, &mp, s, &out[s], NULL);
    return BT_OK;
}

/* The plan: printed, or (j not NULL) added to j as "plan". */
static int print_plan(const bt_model *m, json_t *j)
{
    const bt_graph *g = m->graph;
    bt_plan *plan = NULL;
    bt_schedule *sched = NULL;
    bt_parallel_config parallel = m->parallel;
    bt_profile *costs = NULL; /* partition: profile: measured here, before the plan is built */
    bt_dtype precision = m->train.precision; /* training or serving, the engine computes at it */
    bt_status st = bt_profile_measure_for_plan(g, &parallel, precision, &costs);
    parallel.profile = costs;
    if (st == BT_OK) st = bt_plan_build(g, &parallel, &plan);
    bt_profile_destroy(costs);
    if (st != BT_OK) return bt_cli_fail("check", st);
    int mb = m->parallel.microbatches;
    bt_schedule_kind kind = m->train.enabled ? m->parallel.schedule : BT_SCHEDULE_STREAM;
    int v = m->train.enabled ? bt_schedule_default_virtual(kind, m->parallel.virtual_stages) : 1;
    st = bt_schedule_build_virtual(kind, plan->stages, mb, v, &sched);
    if (st == BT_OK) st = bt_schedule_validate(sched);
    if (st != BT_OK) {
        bt_plan_destroy(plan);
        bt_schedule_destroy(sched);
        return bt_cli_fail("check", st);
    }
    int64_t mbs = m->train.batch / mb > 0 ? m->train.batch / mb : 1;
    bt_stage_memory mem[BT_MAX_STAGES];
    if ((st = plan_memory(m, plan, sched, mbs, mem)) != BT_OK) {
        bt_plan_destroy(plan);
        bt_schedule_destroy(sched);
        return bt_cli_fail("check", st);
    }
    json_t *jstages = json_array(), *jcross = json_array();
    if (j) {
        json_object_set_new(j, "plan", json_pack("{s:i, s:i, s:I, s:s, s:o, s:o}", "n_stages", plan->stages,
                                                 "microbatches", mb, "microbatch_samples", (json_int_t)mbs,
                                                 "schedule", bt_schedule_name(kind), "stages", jstages,
                                                 "crossings", jcross));
    } else {
        json_decref(jstages);
        json_decref(jcross);
        jstages = jcross = NULL;
    }
    if (!j) printf("\nplan: %d stage%s, %d micro-batch%s of %lld samples, schedule %s\n\n", plan->stages,
           plan->stages == 1 ? "" : "s", mb, mb == 1 ? "" : "es", (long long)mbs, bt_schedule_name(kind));
    if (!j)
        printf("  %-5s %-8s %-34s %12s %14s %9s %14s\n", "stage", "device", "layers", "params", "sends/mb",
               "in flight", "activations");
    for (int s = 0; s < plan->stages; s++) {
        char layers[128], num[32], sends[32], acts[32];
        const char *first = g->layers[plan->first_layer[s]].name;
        const char *last = g->layers[plan->first_layer[s] + plan->n_stage_layers[s] - 1].name;
        if (plan->n_stage_layers[s] == 1) snprintf(layers, sizeof layers, "%s", first);
        else snprintf(layers, sizeof layers, "%s .. %s (%d)", first, last, plan->n_stage_layers[s]);
        int64_t params = 0;
        for (int l = plan->first_layer[s]; l < plan->first_layer[s] + plan->n_stage_layers[s]; l++) {
            bt_layer_info info;
            bt_graph_layer(g, l, &info);
            params += info.n_params;
        }
        int inflight = bt_schedule_max_inflight(sched, s);
        if (j) {
            json_t *names = json_array();
            for (int l = plan->first_layer[s]; l < plan->first_layer[s] + plan->n_stage_layers[s]; l++)
                json_array_append_new(names, json_string(g->layers[l].name));
            json_array_append_new(
                jstages, json_pack("{s:i, s:s, s:o, s:I, s:I, s:i, s:I}", "stage", s, "device", plan->device[s],
                                   "layers", names, "params", (json_int_t)params, "send_bytes_per_microbatch",
                                   (json_int_t)((double)bt_plan_send_bytes(plan, s) * (double)mbs), "in_flight",
                                   inflight, "activation_bytes", (json_int_t)mem[s].activations));
            continue;
        }
        printf("  %-5d %-8s %-34s %12s %14s %9d %14s\n", s, plan->device[s], layers,
               bt_cli_group(params, num, sizeof num),
               bt_cli_bytes((double)bt_plan_send_bytes(plan, s) * (double)mbs, sends, sizeof sends),
               inflight,
               bt_cli_bytes((double)mem[s].activations, acts, sizeof acts));
    }
    int shown = 0;
    for (int c = 0; c < plan->n_crossings; c++) {
        const bt_crossing *x = &plan->crossings[c];
        if (x->src < 0) continue;
        if (j) {
            json_array_append_new(jcross, json_pack("{s:s, s:i, s:i, s:I}", "value", g->values[x->value].name, "from",
                                                    x->src, "to", x->dst, "bytes_per_microbatch",
                                                    (json_int_t)((double)x->bytes_per_sample * (double)mbs)));
            continue;
        }
        if (!shown++) printf("\n  values crossing cuts (per micro-batch):\n");
        char b[32];
        printf("    %-20s stage %d -> stage %d  %s%s\n", g->values[x->value].name, x->src, x->dst,
               bt_cli_bytes((double)x->bytes_per_sample * (double)mbs, b, sizeof b),
               x->dst > x->src + 1 ? "  (skips stages, sent directly)" : "");
    }
    bt_plan_destroy(plan);
    bt_schedule_destroy(sched);
    return BT_EXIT_OK;
}

int bt_cmd_check(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"devices", required_argument, NULL, 'd'},   {"stages", required_argument, NULL, 's'},
        {"partition", required_argument, NULL, 'P'}, {"balance", required_argument, NULL, 'B'},
        {"layout", required_argument, NULL, 'L'},    {"recompute", required_argument, NULL, 'Q'},
        {"microbatches", required_argument, NULL, 'm'}, {"schedule", required_argument, NULL, 'S'},
        {"plugin", required_argument, NULL, 'U'}, {"json", no_argument, NULL, 'J'}, {"help", no_argument, NULL, 'h'},             {NULL, 0, NULL, 0}};
    bt_cli_model_opts o;
    memset(&o, 0, sizeof o);
    int c, rc, json = 0;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': o.devices = optarg; break;
        case 's': rc = bt_cli_parse_int32("check", "--stages", optarg, 1, BT_MAX_STAGES, &o.stages); if (rc != BT_EXIT_OK) return rc; break;
        case 'm': rc = bt_cli_parse_int32("check", "--microbatches", optarg, 1, BT_MAX_MICROBATCHES, &o.microbatches); if (rc != BT_EXIT_OK) return rc; break;
        case 'S': o.schedule = optarg; break;
        case 'P': o.partition = optarg; break;
        case 'B': o.balance = optarg; break;
        case 'L': o.layout = optarg; break;
        case 'Q': o.recompute = optarg; break;
        case 'J': json = 1; break;
        case 'U': rc = bt_cli_add_plugin("check", &o, optarg); if (rc != BT_EXIT_OK) return rc; break;
        case 'h': check_usage(stdout); return BT_EXIT_OK;
        default: return bt_cli_bad_option("check", argc, argv, c);
        }
    }
    int prc = bt_cli_take_positional("check", argc, argv, optind, &o);
    if (prc != BT_EXIT_OK) return prc;
    bt_model *m = NULL;
    rc = bt_cli_load_model("check", &o, &m);
    if (rc != BT_EXIT_OK) return rc;
    json_t *j = json ? json_object() : NULL;
    print_layers(m, j);
    bt_cli_auto au; /* parallel: auto: measured and chosen now (quietly under --json), then checked */
    rc = bt_cli_resolve_auto("check", m, 0, !json, 0, &au);
    if (rc == BT_EXIT_OK) rc = print_plan(m, j);
    bt_cli_auto_clear(&au);
    if (j && rc == BT_EXIT_OK) {
        json_dumpf(j, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII);
        printf("\n");
    }
    json_decref(j);
    bt_model_destroy(m);
    return rc;
}
