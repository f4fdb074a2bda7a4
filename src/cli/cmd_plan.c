/* cli/cmd_plan.c: `baton plan MODEL.yaml --devices cpu:0,cpu:1`: chooses the cut points (and,
 * with --permute, the device order) that minimise the slowest stage within each device's memory,
 * from a profile file or from a quick measurement, then prints the per-stage table, the predicted
 * step time and bubble (the schedule simulated on the chosen stages' costs), the uniform split for
 * comparison, and the `parallel:` YAML to paste into the model file; --json prints all of it as one
 * JSON object. --devices goes through the model (parallel.devices), so its shorthands (cpu*4,
 * cpu:0-3) and the one-stage-per-device rule are the same as check's and run's.
 * Exit codes: 0 ok, 2 usage, model or profile-file errors (and no placement fitting in memory),
 * 1 runtime failures while measuring. */
#include <ctype.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/plan_ranks.h"
#include "plan/partition.h"
#include "plan/placement.h"
#include "profile/measure.h"
#include "plan/profile.h"
#include "optim/optim.h"
#include "plan/search.h"
#include "sched/sched.h"

typedef struct plan_opts {
    bt_cli_model_opts model;
    const char *profile;
    const char *schedule;
    int microbatches, repeats, permute, json, threads, virtual_stages;
    int ranks;                 /* --ranks N: the D x P split of a job of N ranks (plan_ranks.c) */
    unsigned long long memory;
} plan_opts;

static void plan_usage(FILE *f)
{
    fprintf(f,
            "usage: baton plan MODEL.yaml [KEY=VALUE ...] [options]\n"
            "\n"
            "Chooses the pipeline cut points that minimise the slowest stage within each device's\n"
            "memory, predicts step time and bubble, and prints the placement as YAML to paste.\n"
            "\n"
            "options:\n"
            "  --devices LIST        devices, one per stage: cpu:0,cpu:1 (default: the model's)\n"
            "  --profile FILE        costs from `baton profile` (default: measure now)\n"
            "  --microbatches M      micro-batches per step (default: the model's)\n"
            "  --schedule S          gpipe | 1f1b | interleaved-1f1b | zb-h1 | zbv | stream (default:\n"
            "                        the model's), or auto: plan the whole layout: stages (one\n"
            "                        included), BLAS threads, micro-batches, schedule with\n"
            "                        interleaved's virtual chunks, and recomputation, each measured\n"
            "                        (the default for a model with parallel: auto, unless\n"
            "                        --profile is given)\n"
            "  --threads T           auto: only this BLAS thread count per stage\n"
            "  --virtual V           interleaved-1f1b: model chunks per device (default: the\n"
            "                        model's pipeline.virtual); the devices are the physical ones\n"
            "  --recompute R         none | stage | LAYER,LAYER: price activation recomputation\n"
            "                        (beats train.recompute; auto then keeps it)\n"
            "  --memory BYTES        memory each device offers, e.g. 2G or 512M (default: the\n"
            "                        device's own; cpu devices share the machine's memory)\n"
            "  --permute             let the planner choose the order of the devices too\n"
            "  --ranks N             a job of N ranks under mpirun: every split N = D x P (D\n"
            "                        replicas of P stages, a stage per rank) priced with the\n"
            "                        links between ranks in --profile (from mpirun -np 2 baton\n"
            "                        profile), the fastest chosen\n"
            "  --repeats R           timed runs per measurement when measuring (default 5)\n"
            "  --plugin LIB.so       load a library of custom ops first (its\n"
            "                        baton_plugin_register registers them)\n"
            "  --json                print the plan as one JSON object (the YAML in it)\n"
            "  -h, --help            this help\n"
            "KEY=VALUE overrides any field of the model file, e.g. train.batch=512\n");
}

/* "1048576", "512M", "2G", "1.5GiB" (powers of 1024). */

static int parse_schedule(const char *name, bt_schedule_kind *out)
{
    bt_schedule_kind kinds[BT_SEARCH_MAX_CHOICES + 1];
    int n = bt_schedule_kinds(1, kinds, BT_SEARCH_MAX_CHOICES);
    n += bt_schedule_kinds(0, kinds + n, 1);
    for (int i = 0; i < n; i++)
        if (strcmp(name, bt_schedule_name(kinds[i])) == 0) {
            *out = kinds[i];
            return 1;
        }
    return 0;
}

/* --devices, else the model's list, else cpu:0..cpu:(stages-1) for devices: auto. */
static const char *plan_devices(const plan_opts *o, const bt_model *m, char *buf, size_t size)
{
    if (m->parallel.devices && strcmp(m->parallel.devices, "auto") != 0) return m->parallel.devices;
    int n = m->parallel.stages > 0 ? m->parallel.stages : 1;
    size_t len = 0;
    buf[0] = '\0';
    for (int s = 0; s < n && len + 12 < size; s++)
        len += (size_t)snprintf(buf + len, size - len, "%scpu:%d", s ? "," : "", s);
    return buf;
}

/* The profile: the file given, checked against the model (its layers, and the precision it computes
 * at: f32 costs do not price a bf16 model), or a measurement now at that precision. */
static int get_profile(const plan_opts *o, const bt_model *m, const char *devices, int microbatches,
                       bt_dtype precision, bt_profile **out)
{
    bt_status st;
    if (o->profile) {
        st = bt_profile_load(o->profile, out);
        if (st == BT_OK) st = bt_profile_check_graph(*out, m->graph, o->profile);
        if (st == BT_OK) st = bt_profile_check_precision(*out, precision, o->profile);
        if (st != BT_OK) {
            bt_profile_destroy(*out);
            *out = NULL;
            bt_cli_print_error("plan");
            return BT_EXIT_USAGE;
        }
        return BT_EXIT_OK;
    }
    bt_profile_params pp;
    bt_profile_params_init(&pp);
    pp.devices = devices;
    pp.batch = m->train.batch;
    pp.microbatches = microbatches;
    pp.training = m->train.enabled && bt_graph_is_trainable(m->graph);
    pp.optimizer = m->train.optimizer;
    pp.repeats = o->repeats > 0 ? o->repeats : 5;
    pp.warmup = 1;
    pp.precision = precision;
    st = bt_profile_measure(m->graph, m->name, &pp, out);
    if (st != BT_OK) return bt_cli_fail("plan", st);
    return BT_EXIT_OK;
}

static void stage_layers(const bt_profile *p, const bt_placement_stage *s, char *buf, size_t size)
{
    const char *first = p->layers[s->first_layer].name;
    const char *last = p->layers[s->first_layer + s->n_layers - 1].name;
    if (s->n_layers == 1) snprintf(buf, size, "%s", first);
    else snprintf(buf, size, "%s .. %s (%d)", first, last, s->n_layers);
}

static void print_stages(const bt_profile *p, const bt_placement *pl)
{
    printf("  %-5s %-8s %-32s %12s %12s %9s %9s %7s\n", "stage", "device", "layers", "params", "peak memory",
           "fwd ms", "bwd ms", "idle");
    for (int k = 0; k < pl->stages; k++) {
        const bt_placement_stage *s = &pl->stage[k];
        char layers[160], num[32], mem[32];
        stage_layers(p, s, layers, sizeof layers);
        printf("  %-5d %-8s %-32s %12s %12s %9.4f %9.4f %6.1f%%\n", k, s->device, layers,
               bt_cli_group(s->params, num, sizeof num), bt_cli_bytes((double)s->peak_bytes, mem, sizeof mem),
               s->fwd_ms, s->bwd_ms, 100 * s->idle);
    }
}

static void print_costs_source(const plan_opts *o, const bt_profile *p, const bt_placement *pl)
{
    if (o->profile) printf("costs: %s (measured on", o->profile);
    else printf("costs: measured now (%d repeats, on", p->repeats);
    for (int k = 0; k < p->n_kinds; k++) printf(" %s", p->measured_on[k]);
    printf(")");
    if (pl->time_scale != 1.0)
        printf(", scaled from micro-batches of %lld samples to %lld", (long long)p->microbatch_size,
               (long long)pl->microbatch_size);
    printf("\n");
}

static void print_memory_note(const plan_opts *o, const bt_placement *pl)
{
    char b[32];
    const bt_placement_stage *s = &pl->stage[0];
    if (o->memory) printf("memory: %s per device (--memory)\n", bt_cli_bytes((double)o->memory, b, sizeof b));
    else if (s->capacity != UINT64_MAX)
        printf("memory: %s per device (the machine's memory shared by its cpu devices)\n",
               bt_cli_bytes((double)s->capacity, b, sizeof b));
    else printf("memory: device capacity unknown, not limited (give --memory)\n");
}

/* --json: the plan as one object (jansson). */
static void print_plan_json(const plan_opts *o, const bt_model *m, const bt_profile *p, const bt_placement *pl,
                            const bt_placement *uniform, int worst)
{
    json_t *stages = json_array(), *kinds = json_array();
    for (int k = 0; k < pl->stages; k++) {
        const bt_placement_stage *s = &pl->stage[k];
        json_t *names = json_array();
        for (int l = s->first_layer; l < s->first_layer + s->n_layers; l++)
            json_array_append_new(names, json_string(p->layers[l].name));
        json_array_append_new(stages, json_pack("{s:i, s:s, s:o, s:I, s:I, s:f, s:f, s:f}", "stage", k, "device",
                                                s->device, "layers", names, "params", (json_int_t)s->params,
                                                "peak_bytes", (json_int_t)s->peak_bytes, "fwd_ms", s->fwd_ms,
                                                "bwd_ms", s->bwd_ms, "idle", s->idle));
    }
    for (int k = 0; k < p->n_kinds; k++) json_array_append_new(kinds, json_string(p->measured_on[k]));
    const bt_placement_stage *s0 = &pl->stage[0];
    json_t *memory = o->memory ? json_pack("{s:I, s:s}", "bytes_per_device", (json_int_t)o->memory, "source", "--memory")
                     : s0->capacity != UINT64_MAX
                         ? json_pack("{s:I, s:s}", "bytes_per_device", (json_int_t)s0->capacity, "source",
                                     "the machine's memory shared by its cpu devices")
                         : json_pack("{s:n, s:s}", "bytes_per_device", "source", "unknown: not limited");
    json_t *j = json_pack("{s:s, s:i, s:i, s:I, s:s, s:{s:s, s:o, s:i}, s:o, s:o, s:i, s:f, s:f, s:f, s:s}", "model",
                          m->name ? m->name : "", "n_stages", pl->stages, "microbatches", pl->microbatches,
                          "microbatch_samples", (json_int_t)pl->microbatch_size, "schedule",
                          bt_schedule_name(pl->schedule), "costs", "source", o->profile ? o->profile : "measured now",
                          "measured_on", kinds, "repeats", p->repeats, "memory", memory, "stages", stages,
                          "bottleneck_stage", worst, "bottleneck_ms", pl->bottleneck_ms, "step_ms", pl->step_ms,
                          "bubble", pl->bubble, "yaml", pl->yaml);
    if (j && uniform)
        json_object_set_new(j, "uniform", json_pack("{s:f, s:f}", "bottleneck_ms", uniform->bottleneck_ms, "step_ms",
                                                    uniform->step_ms));
    if (j) {
        json_dumpf(j, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII);
        printf("\n");
    }
    json_decref(j);
}

static void print_plan(const plan_opts *o, const bt_model *m, const bt_profile *p, const bt_placement *pl,
                       const bt_placement *uniform)
{
    int worst = 0;
    char name[256];
    for (int k = 1; k < pl->stages; k++)
        if (pl->stage[k].stage_ms > pl->stage[worst].stage_ms) worst = k;
    if (o->json) {
        print_plan_json(o, m, p, pl, uniform, worst);
        return;
    }
    printf("plan for %s: %d stage%s, %d micro-batch%s of %lld samples, schedule %s\n",
           bt_cli_escape(m->name ? m->name : "model", name, sizeof name),
           pl->stages, pl->stages == 1 ? "" : "s", pl->microbatches, pl->microbatches == 1 ? "" : "es",
           (long long)pl->microbatch_size, bt_schedule_name(pl->schedule));
    print_costs_source(o, p, pl);
    print_memory_note(o, pl);
    printf("\n");
    print_stages(p, pl);
    printf("\n  bottleneck: stage %d, %.4f ms per micro-batch (compute + transfer)\n", worst, pl->bottleneck_ms);
    printf("  predicted step %.3f ms, bubble %.1f%% (%s simulated on these stage costs)\n", pl->step_ms,
           100 * pl->bubble, bt_schedule_name(pl->schedule));
    if (uniform)
        printf("  uniform split for comparison: bottleneck %.4f ms, predicted step %.3f ms (%.2fx)\n",
               uniform->bottleneck_ms, uniform->step_ms, pl->step_ms > 0 ? uniform->step_ms / pl->step_ms : 0);
    if (pl->recompute) {
        printf("  recomputation: bwd ms includes rerunning the recomputed layers' forward (");
        for (int k = 0; k < pl->stages; k++) printf("%sstage %d %.4f ms", k ? ", " : "", k, pl->stage[k].recompute_ms);
        printf("); peak memory keeps one copy of their activations per stage\n");
    }
    if (pl->unknown_rates)
        printf("  note: the profile has no transfer rate between some of these devices; transfers counted free\n");
    printf("\npaste into the model file:\n\n%s", pl->yaml);
}

/* --schedule auto (or parallel: auto): the whole layout searched from measured costs. Devices are
 * the candidates (--devices, the model's list, else one cpu:N per core). */
static int plan_auto(const plan_opts *o, const bt_model *m)
{
    if (o->profile) {
        fprintf(stderr, "baton plan: --schedule auto measures at every micro-batch size and thread count it "
                        "tries; --profile (one size) cannot be used with it\n");
        return BT_EXIT_USAGE;
    }
    if (o->permute) {
        fprintf(stderr, "baton plan: --permute does not apply to --schedule auto (its devices are interchangeable cpu:N)\n");
        return BT_EXIT_USAGE;
    }
    if (o->virtual_stages > 0) {
        fprintf(stderr, "baton plan: --virtual does not apply to --schedule auto (it chooses interleaved's chunks itself)\n");
        return BT_EXIT_USAGE;
    }
    bt_search_params sp;
    const char *given = o->model.devices ? o->model.devices : (m->parallel.auto_layout ? NULL : m->parallel.devices);
    bt_cli_auto_params(m, given, o->threads, &sp);
    sp.memory = o->memory;
    if (o->microbatches > 0) sp.n_microbatches = 1, sp.microbatches[0] = o->microbatches;
    bt_search_result r;
    int rc = bt_cli_auto_search("plan", m, &sp, o->repeats, &r);
    char name[256];
    if (rc == BT_EXIT_OK) {
        printf("layout search for %s: batch %lld, candidate devices %s (%d cores), %d layouts tried\n",
               bt_cli_escape(m->name ? m->name : "model", name, sizeof name), (long long)sp.batch, sp.devices,
               sp.cores, r.n);
        printf("costs: measured now at each micro-batch size and thread count (fastest of %d repeats)\n\n",
               o->repeats > 0 ? o->repeats : 5);
        bt_cli_auto_report(&r, sp.batch, 1);
        const bt_search_candidate *b = &r.cand[r.best];
        printf("\npaste into the model file (or keep parallel: auto, which runs this choice):\n\n%s",
               r.placement.yaml);
        if (b->threads > 1 || b->recompute)
            printf("# and run with --threads %d%s\n", b->threads, b->recompute ? " --recompute stage" : "");
    }
    bt_search_result_clear(&r);
    return rc;
}

static int plan_model(const plan_opts *o, const bt_model *m)
{
    /* a parallel: auto model plans the whole layout unless a schedule or a profile file is given */
    if (o->ranks > 1 && o->schedule && strcmp(o->schedule, "auto") == 0) {
        fprintf(stderr, "baton plan: --ranks prices the splits of a job from a profile file: it does not combine with "
                        "--schedule auto\n");
        return BT_EXIT_USAGE;
    }
    if ((o->schedule && strcmp(o->schedule, "auto") == 0) || (!o->schedule && !o->profile && m->parallel.auto_layout))
        return plan_auto(o, m);
    if (o->threads > 0) {
        fprintf(stderr, "baton plan: --threads applies to --schedule auto (profile with baton profile --threads)\n");
        return BT_EXIT_USAGE;
    }
    char dev_buf[BT_MAX_STAGES * 12];
    const char *devices = plan_devices(o, m, dev_buf, sizeof dev_buf);
    char parsed[BT_MAX_STAGES][BT_PROFILE_DEVICE_LEN];
    int n_parsed = 0;
    bt_status dst = bt_profile_parse_devices(devices, parsed, BT_MAX_STAGES, &n_parsed);
    if (dst != BT_OK) return bt_cli_fail("plan", dst); /* placement splits names only */
    int training = m->train.enabled && bt_graph_is_trainable(m->graph);
    bt_placement_params lp;
    bt_placement_params_init(&lp);
    lp.devices = devices;
    /* a parallel: auto model has no micro-batch count of its own: the profile's */
    lp.microbatches = o->microbatches > 0 ? o->microbatches : m->parallel.auto_layout ? 0 : m->parallel.microbatches;
    lp.schedule = training ? m->parallel.schedule : BT_SCHEDULE_STREAM;
    if (o->schedule && !parse_schedule(o->schedule, &lp.schedule)) {
        return bt_cli_bad_value("plan", "--schedule", "gpipe, 1f1b, interleaved-1f1b, zb-h1, zbv, stream or auto", o->schedule);
    }
    if (training && lp.schedule == BT_SCHEDULE_STREAM) {
        fprintf(stderr, "baton plan: the stream schedule is forward-only: use gpipe or 1f1b for a model that trains\n");
        return BT_EXIT_USAGE;
    }
    lp.virtual_stages = o->virtual_stages > 0 ? o->virtual_stages : m->parallel.virtual_stages;
    if (lp.schedule == BT_SCHEDULE_ZBV) { /* its own two chunks, whatever the model's schedule had */
        lp.virtual_stages = o->virtual_stages > 0 ? o->virtual_stages : 2;
        if (lp.virtual_stages != 2) {
            fprintf(stderr, "baton plan: --virtual %d: zbv runs exactly 2 chunks per device\n", lp.virtual_stages);
            return BT_EXIT_USAGE;
        }
    } else if (lp.virtual_stages > 1 && lp.schedule != BT_SCHEDULE_INTERLEAVED_1F1B) {
        fprintf(stderr, "baton plan: %s %d applies to interleaved-1f1b only (the schedule is %s)\n",
                o->virtual_stages > 0 ? "--virtual" : "pipeline.virtual", lp.virtual_stages,
                bt_schedule_name(lp.schedule));
        return BT_EXIT_USAGE;
    }
    if (lp.virtual_stages > 1 && o->permute) {
        fprintf(stderr, "baton plan: --permute does not apply to %s with virtual chunks (the schedule places stage k "
                        "on its device)\n", bt_schedule_name(lp.schedule));
        return BT_EXIT_USAGE;
    }
    lp.memory = o->memory;
    lp.permute = o->permute;
    /* stage memory from the model the engine allocates by */
    lp.graph = m->graph;
    lp.precision = m->train.precision; /* serving computes at it too */
    lp.optimizer_slots = training ? bt_optim_state_count(&m->train.optimizer) : 0;
    if (o->ranks > 1 && lp.virtual_stages > 1) {
        fprintf(stderr, "baton plan: --ranks prices one stage per rank: it does not combine with %s's virtual chunks\n",
                bt_schedule_name(lp.schedule));
        return BT_EXIT_USAGE;
    }
    if (o->ranks > 1 && (!o->profile || o->permute)) {
        fprintf(stderr, "baton plan: --ranks %d %s\n", o->ranks,
                o->permute ? "puts each stage on its own rank: --permute does not apply"
                           : "needs --profile with the links between ranks (mpirun -np 2 baton profile MODEL.yaml)");
        return BT_EXIT_USAGE;
    }
    bt_profile *p = NULL;
    int rc = get_profile(o, m, devices, lp.microbatches > 0 ? lp.microbatches : 1, lp.precision, &p);
    if (rc != BT_EXIT_OK) return rc;
    if (o->ranks > 1) {
        rc = bt_cli_plan_ranks(m, p, &lp, o->ranks, o->json);
        bt_profile_destroy(p);
        return rc;
    }
    bt_placement pl, uniform;
    memset(&uniform, 0, sizeof uniform);
    bt_status st = bt_placement_plan(p, &lp, &pl);
    if (st != BT_OK) {
        bt_profile_destroy(p);
        return bt_cli_fail("plan", st);
    }
    int first[BT_MAX_STAGES + 1], have_uniform = 0;
    if (pl.stages > 1 && bt_placement_uniform_cuts(m->graph, p->n_layers, pl.stages, first) == BT_OK) {
        bt_placement_params up = lp;
        up.permute = 0;
        have_uniform = bt_placement_evaluate(p, &up, first, &uniform) == BT_OK;
    }
    print_plan(o, m, p, &pl, have_uniform ? &uniform : NULL);
    bt_placement_clear(&pl);
    bt_placement_clear(&uniform);
    bt_profile_destroy(p);
    return BT_EXIT_OK;
}

int bt_cmd_plan(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"devices", required_argument, NULL, 'd'}, {"profile", required_argument, NULL, 'p'},
        {"microbatches", required_argument, NULL, 'm'}, {"schedule", required_argument, NULL, 'S'},
        {"memory", required_argument, NULL, 'M'}, {"permute", no_argument, NULL, 'P'},
        {"repeats", required_argument, NULL, 'r'}, {"plugin", required_argument, NULL, 'U'}, {"json", no_argument, NULL, 'J'}, {"help", no_argument, NULL, 'h'},
        {"threads", required_argument, NULL, 't'}, {"recompute", required_argument, NULL, 'Q'},
        {"virtual", required_argument, NULL, 'V'},
        {"ranks", required_argument, NULL, 'R'},
        {NULL, 0, NULL, 0}};
    plan_opts o;
    memset(&o, 0, sizeof o);
    int c, rc;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': o.model.devices = optarg; break; /* through the model: shorthands, one stage per device */
        case 'J': o.json = 1; break;
        case 'p': o.profile = optarg; break;
        case 'm': rc = bt_cli_parse_int32("plan", "--microbatches", optarg, 1, BT_MAX_MICROBATCHES, &o.microbatches); if (rc != BT_EXIT_OK) return rc; break;
        case 'S': o.schedule = optarg; break;
        case 'M': if (!bt_cli_parse_bytes(optarg, &o.memory)) goto bad; break;
        case 'P': o.permute = 1; break;
        case 'V': rc = bt_cli_parse_int32("plan", "--virtual", optarg, 1, 64, &o.virtual_stages); if (rc != BT_EXIT_OK) return rc; break;
        case 'R': rc = bt_cli_parse_int32("plan", "--ranks", optarg, 1, 4096, &o.ranks); if (rc != BT_EXIT_OK) return rc; break;
        case 'Q': o.model.recompute = optarg; break;
        case 't': rc = bt_cli_parse_int32("plan", "--threads", optarg, 1, BT_CLI_MAX_THREADS, &o.threads); if (rc != BT_EXIT_OK) return rc; break;
        case 'r': rc = bt_cli_parse_int32("plan", "--repeats", optarg, 1, BT_CLI_MAX_REPEATS, &o.repeats); if (rc != BT_EXIT_OK) return rc; break;
        case 'U': rc = bt_cli_add_plugin("plan", &o.model, optarg); if (rc != BT_EXIT_OK) return rc; break;
        case 'h': plan_usage(stdout); return BT_EXIT_OK;
        default: return bt_cli_bad_option("plan", argc, argv, c);
        }
    }
    int prc = bt_cli_take_positional("plan", argc, argv, optind, &o.model);
    if (prc != BT_EXIT_OK) return prc;
    bt_model *m = NULL;
    rc = bt_cli_load_model("plan", &o.model, &m);
    if (rc != BT_EXIT_OK) return rc;
    rc = plan_model(&o, m);
    bt_model_destroy(m);
    return rc;
bad:
    return bt_cli_bad_value("plan", "--memory", "a byte count per device such as 512M or 2G", optarg);
}
