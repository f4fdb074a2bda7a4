/* cli/cmd_profile.c: `baton profile MODEL.yaml --devices cpu:0,cpu:1`: measures every layer's
 * forward, backward and optimizer-step time for one micro-batch on each device kind listed, and
 * the transfer rate between every pair of listed devices; prints them as a table and writes the
 * profile file `baton plan --profile` reads (default `<model-name>.profile.json`).
 *
 * Under mpirun (or srun) with N > 1 ranks it also measures the links between ranks: rank 0
 * measures the layers alone (the others wait, so nothing competes for its cores), then every rank
 * r > 0 ping-pongs with rank 0 at a few message sizes (dist/clock.c), and rank 0 writes the
 * one-way times into the profile's "links"; `baton plan --ranks` prices a boundary between ranks
 * with them. Only rank 0 prints and writes; a rank that fails ends the job (MPI_Abort). The ranks
 * first compare their model and options (cli/agree.h): ranks started differently are refused at
 * start-up, exit 2, naming the first field that differs.
 * Exit codes: 0 ok, 2 usage or model errors, 1 runtime failures (measuring, writing). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/agree.h"
#include "cli/cli.h"
#include "cli/outputs.h"
#include "cli/run.h"
#include "core/error.h"
#include "dist/dist.h"
#include "exec/engine_dist.h"
#include "plan/profile.h"
#include "profile/measure.h"

/* The link ping-pongs: message sizes, timed round trips of each, and how long a rank waits for
 * rank 0 (which measures every layer meanwhile). */
static const size_t link_sizes[] = {8, 4096, 65536, (size_t)1 << 20, (size_t)8 << 20};
#define LINK_REPS 9
#define LINK_WAIT_S 3600.0
#define AGREE_WAIT_S 60.0 /* the start-up comparison: every rank is about to measure or wait */

typedef struct profile_opts {
    bt_cli_model_opts model;
    const char *output;
    long long batch;
    int microbatches, repeats, warmup, threads;
} profile_opts;

static void profile_usage(FILE *f)
{
    fprintf(f,
            "usage: baton profile MODEL.yaml [KEY=VALUE ...] [options]\n"
            "\n"
            "Measures each layer's forward, backward and optimizer-step time for one micro-batch on\n"
            "each kind of device listed, and the transfer rate between every pair of devices, then\n"
            "writes a profile file for `baton plan --profile`. Under mpirun -np N (N > 1) it also\n"
            "measures the link from rank 0 to every other rank (ping-pongs at 8 B to 8 MiB), for\n"
            "`baton plan --ranks`.\n"
            "\n"
            "options:\n"
            "  --devices LIST        devices to measure: cpu:0,cpu:1 (default: the model's, else cpu:0)\n"
            "  --batch N             samples per step (default: train.batch)\n"
            "  --microbatches M      micro-batches per step (default: the model's); the\n"
            "                        micro-batch measured holds N / M samples\n"
            "  --repeats R           timed runs per measurement, median kept (default 10)\n"
            "  --warmup W            untimed runs first (default 2)\n"
            "  --threads T           compute threads per device (default 1)\n"
            "  -o, --output FILE     profile file to write (default: <model-name>.profile.json)\n"
            "  --plugin LIB.so       load a library of custom ops first (its\n"
            "                        baton_plugin_register registers them)\n"
            "  -h, --help            this help\n"
            "KEY=VALUE overrides any field of the model file, e.g. train.optimizer.type=sgd\n");
}

/* The devices to measure: --devices (given to the model as parallel.devices, so cpu*2 and
 * cpu:0-1 expand as for run), else the model's list, else cpu:0. */
static const char *default_devices(const profile_opts *o, const bt_model *m)
{
    if (m->parallel.devices && strcmp(m->parallel.devices, "auto") != 0) return m->parallel.devices;
    return "cpu:0";
}

static void print_layers(const bt_profile *p, int k)
{
    char num[32], act[32], outb[32], opname[96];
    double fwd = 0, bwd = 0, step = 0, b = 0, w = 0;
    printf("\nlayers on %s (measured on %s), times per micro-batch of %lld samples:\n\n", p->kinds[k],
           p->measured_on[k], (long long)p->microbatch_size);
    printf("  %-3s %-20s %-18s %9s %9s %9s %9s %9s %12s %12s %12s\n", "#", "layer", "op", "fwd ms", "bwd ms",
           "B ms", "W ms", "step ms", "params", "act/sample", "out/sample");
    for (int l = 0; l < p->n_layers; l++) {
        const bt_profile_layer *pl = &p->layers[l];
        const bt_profile_time *t = bt_profile_time_at(p, l, k);
        snprintf(opname, sizeof opname, "%s%s%s", pl->op, pl->act ? "+" : "", pl->act ? pl->act : "");
        printf("  %-3d %-20s %-18s %9.4f %9.4f %9.4f %9.4f %9.4f %12s %12s %12s\n", l, pl->name, opname, t->fwd_ms,
               t->bwd_ms, t->b_ms, t->w_ms, t->step_ms, bt_cli_group(pl->params, num, sizeof num),
               bt_cli_bytes((double)pl->activation_bytes_per_sample, act, sizeof act),
               bt_cli_bytes((double)pl->output_bytes_per_sample, outb, sizeof outb));
        fwd += t->fwd_ms, bwd += t->bwd_ms, step += t->step_ms, b += t->b_ms, w += t->w_ms;
    }
    printf("  %-3s %-20s %-18s %9.4f %9.4f %9.4f %9.4f %9.4f\n", "", "total", "", fwd, bwd, b, w, step);
    printf("  (B and W: the backward split as zb-h1 runs it, input gradients and deferred weight gradients)\n");
}

static void print_profile(const bt_profile *p)
{
    char name[256];
    printf("profile of %s: batch %lld in %d micro-batch%s of %lld samples, %s, precision %s, optimizer %s, "
           "%d repeats after %d warm-ups, %d thread%s\n",
           bt_cli_escape(p->model, name, sizeof name), (long long)p->batch, p->microbatches, p->microbatches == 1 ? "" : "es",
           (long long)p->microbatch_size, p->training ? "training" : "forward only", bt_dtype_name(p->precision),
           p->optimizer,
           p->repeats, p->warmup, p->threads, p->threads == 1 ? "" : "s");
    for (int k = 0; k < p->n_kinds; k++) print_layers(p, k);
    if (p->training)
        printf("\nturn hand-off between two stage threads of one device (interleaved 1F1B): %.4f ms\n", p->handoff_ms);
    if (p->n_transfers == 0) {
        printf("\ntransfers: none measured (one device)\n");
        return;
    }
    char b[32];
    printf("\ntransfers (device -> host buffer -> device, as a stage hands a message on; %s each):\n",
           bt_cli_bytes((double)p->transfers[0].bytes, b, sizeof b));
    for (int i = 0; i < p->n_transfers; i++)
        printf("  %-10s -> %-10s %8.2f GB/s\n", p->transfers[i].from, p->transfers[i].to, p->transfers[i].gb_per_s);
}

/* Collective: every rank r > 0 ping-pongs with rank 0 at each size; rank 0 appends the samples. */
static bt_status measure_links(const bt_comm *c, bt_profile *p)
{
    int n = bt_comm_size(c), me = bt_comm_rank(c);
    int sizes = (int)(sizeof link_sizes / sizeof *link_sizes);
    if (me == 0) {
        if ((n - 1) * sizes > BT_PROFILE_MAX_LINKS)
            return bt_error(BT_ERR_INVALID_ARG, "profile: %d ranks are more links than a profile holds (%d)", n,
                            BT_PROFILE_MAX_LINKS / sizes + 1);
        p->links = calloc((size_t)(n - 1) * (size_t)sizes + 1, sizeof *p->links);
        if (!p->links) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    }
    for (int r = 1; r < n; r++)
        for (int i = 0; i < sizes; i++) {
            double ms = 0;
            BT_TRY(bt_dist_link_pingpong(c, 0, r, link_sizes[i], LINK_REPS, LINK_WAIT_S, &ms));
            if (me == 0) p->links[p->n_links++] = (bt_profile_link){0, r, link_sizes[i], ms > 1e-9 ? ms : 1e-9};
        }
    return BT_OK;
}

static void print_links(const bt_profile *p)
{
    double lat, bw;
    if (!bt_profile_link_model(p, &lat, &bw)) return;
    printf("\nlinks between ranks (ping-pong, half the median round trip):\n");
    for (int i = 0; i < p->n_links; i++) {
        char b[32];
        const bt_profile_link *k = &p->links[i];
        printf("  rank %d -> %d %10s %10.4f ms %8.3f GB/s\n", k->from_rank, k->to_rank,
               bt_cli_bytes((double)k->bytes, b, sizeof b), k->oneway_ms, (double)k->bytes / k->oneway_ms / 1e6);
    }
    printf("  the planner's link: latency %.1f us, %.3f GB/s (the slowest pair)\n", lat * 1e3, bw);
}

/* What every rank of a profile job must share: rank 0 measures and writes, the others ping-pong
 * with it, but one command line for every rank is the rule (no rank's option is ignored). */
static void profile_record(const profile_opts *o, const bt_model *m, const bt_profile_params *pp, bt_agree *a)
{
    bt_engine_params ep; /* the model and its train: section, as a run of it would take them */
    bt_engine_params_init(&ep);
    ep.parallel = m->parallel;
    ep.training = pp->training;
    ep.optimizer = m->train.optimizer;
    ep.lr_schedule = m->train.lr_schedule;
    ep.clip_norm = m->train.clip_norm;
    ep.batch = pp->batch;
    ep.dtype = m->dtype;
    ep.precision = pp->precision;
    bt_agree_str(a, "command", "profile");
    bt_agree_str(a, "--devices (to measure)", pp->devices);
    bt_agree_int(a, "--microbatches", pp->microbatches);
    bt_agree_int(a, "--repeats", pp->repeats);
    bt_agree_int(a, "--warmup", pp->warmup);
    bt_agree_int(a, "--threads", pp->threads);
    bt_agree_str(a, "--output", o->output);
    bt_engine_agree_fields(a, m->graph, &ep);
}

static int profile_model(const profile_opts *o, const bt_model *m)
{
    char path[1024], shown[1024], model_path[1024];
    if (o->output) {
        snprintf(path, sizeof path, "%s", o->output);
    } else if (!bt_cli_plain_file_name(m->name)) { /* refused before measuring, not after */
        fprintf(stderr,
                "baton profile: the model's name '%s' is not a plain file name (it has a '/', '\\', a control\n"
                "character or a leading '.'), so it cannot name the profile file: give --output FILE\n",
                bt_cli_escape(m->name, shown, sizeof shown));
        return BT_EXIT_USAGE;
    } else {
        snprintf(path, sizeof path, "%s.profile.json", m->name);
    }
    bt_cli_inputs in; /* the profile may not replace the model file (cli/outputs.h) */
    bt_cli_inputs_init(&in, "profile");
    bt_cli_inputs_add_model(&in, &o->model);
    int crc = bt_cli_outputs_check(&in, o->output ? "--output" : "the profile file", path);
    bt_cli_inputs_free(&in);
    if (crc != BT_EXIT_OK) return crc;
    bt_profile_params pp;
    bt_profile_params_init(&pp);
    pp.devices = default_devices(o, m);
    pp.batch = o->batch > 0 ? o->batch : m->train.batch;
    pp.microbatches = o->microbatches > 0 ? o->microbatches : m->parallel.microbatches;
    pp.training = m->train.enabled && bt_graph_is_trainable(m->graph);
    pp.optimizer = m->train.optimizer;
    /* the precision the model computes at (train.precision, overrides included), training or
     * serving (baton run's inference, predict and generate compute at it too) */
    pp.precision = m->train.precision;
    if (o->repeats > 0) pp.repeats = o->repeats;
    if (o->warmup >= 0) pp.warmup = o->warmup;
    pp.threads = o->threads;
    bt_profile *p = NULL;
    const char *var = NULL;
    int launched = bt_dist_launched(&var), rank = 0, size = 1;
    bt_comm *world = NULL;
    bt_status st = BT_OK;
    if (launched > 1) { /* a job: rank 0 measures the layers, every rank its link with rank 0 */
        if (!bt_dist_built()) {
            fprintf(stderr, "baton profile: started as one of %d ranks (%s), but this baton was built without MPI: "
                    "install libopenmpi-dev and openmpi-bin (scripts/install-deps.sh) and configure again\n",
                    launched, var);
            return BT_EXIT_USAGE;
        }
        st = bt_dist_init(&rank, &size);
        if (st == BT_OK) { /* the first collective: every rank was started alike (cli/agree.h) */
            bt_agree agreed;
            bt_agree_init(&agreed);
            profile_record(o, m, &pp, &agreed);
            int mpi_up = 1, arc = bt_cli_agree("profile", &agreed, AGREE_WAIT_S, &mpi_up);
            bt_agree_free(&agreed);
            if (arc != BT_EXIT_OK && !mpi_up) return arc; /* the ranks differ: MPI ended cleanly */
            if (arc != BT_EXIT_OK) bt_dist_abort(arc);
        }
        if (st == BT_OK) st = bt_comm_world(&world);
        if (st == BT_OK && rank != 0 && !freopen("/dev/null", "w", stdout))
            st = bt_error(BT_ERR_IO, "rank %d: cannot redirect its output to /dev/null", rank);
    }
    if (st == BT_OK && rank == 0) st = bt_profile_measure(m->graph, m->name, &pp, &p);
    if (world) { /* rank 0 says whether it measured; the others wait for it, then all ping-pong */
        int ok = st == BT_OK;
        bt_status b = bt_comm_bcast(world, &ok, sizeof ok, 0, LINK_WAIT_S);
        if (st == BT_OK) st = b;
        if (st == BT_OK && !ok) st = bt_error(BT_ERR_INTERNAL, "rank 0 failed to measure the layers");
        if (st == BT_OK) st = measure_links(world, p);
    }
    if (st != BT_OK) {
        int rc = bt_cli_fail("profile", st);
        bt_profile_destroy(p);
        if (world) bt_dist_abort(rc);
        return rc;
    }
    if (rank != 0) {
        bt_comm_free(world);
        bt_dist_finalize();
        return BT_EXIT_OK;
    }
    print_profile(p);
    print_links(p);
    bt_cli_print_conv_choices(NULL, m->graph);
    st = bt_profile_save(p, path);
    bt_comm_free(world);
    if (world) bt_dist_finalize();
    bt_profile_destroy(p);
    if (st != BT_OK) {
        bt_cli_print_error("profile");
        return BT_EXIT_RUNTIME;
    }
    bt_cli_escape(path, shown, sizeof shown);
    printf("\nwrote %s (use it with: baton plan %s --profile %s)\n", shown,
           bt_cli_escape(o->model.path, model_path, sizeof model_path), shown);
    return BT_EXIT_OK;
}

int bt_cmd_profile(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"devices", required_argument, NULL, 'd'}, {"batch", required_argument, NULL, 'b'},
        {"microbatches", required_argument, NULL, 'm'}, {"repeats", required_argument, NULL, 'r'},
        {"warmup", required_argument, NULL, 'w'},  {"threads", required_argument, NULL, 't'},
        {"output", required_argument, NULL, 'o'},  {"help", no_argument, NULL, 'h'},
        {"plugin", required_argument, NULL, 'U'},  {NULL, 0, NULL, 0}};
    profile_opts o;
    memset(&o, 0, sizeof o);
    o.warmup = -1;
    o.threads = 1;
    int c, rc;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":ho:", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': o.model.devices = optarg; break; /* through the model: the same shorthands as run's */
        case 'b': rc = bt_cli_parse_int("profile", "--batch", optarg, 1, BT_CLI_MAX_BATCH, &o.batch); if (rc != BT_EXIT_OK) return rc; break;
        case 'm': rc = bt_cli_parse_int32("profile", "--microbatches", optarg, 1, BT_MAX_MICROBATCHES, &o.microbatches); if (rc != BT_EXIT_OK) return rc; break;
        case 'r': rc = bt_cli_parse_int32("profile", "--repeats", optarg, 1, BT_CLI_MAX_REPEATS, &o.repeats); if (rc != BT_EXIT_OK) return rc; break;
        case 'w': rc = bt_cli_parse_int32("profile", "--warmup", optarg, 0, BT_CLI_MAX_REPEATS, &o.warmup); if (rc != BT_EXIT_OK) return rc; break;
        case 't': rc = bt_cli_parse_int32("profile", "--threads", optarg, 1, BT_CLI_MAX_THREADS, &o.threads); if (rc != BT_EXIT_OK) return rc; break;
        case 'o': o.output = optarg; break;
        case 'U': rc = bt_cli_add_plugin("profile", &o.model, optarg); if (rc != BT_EXIT_OK) return rc; break;
        case 'h': profile_usage(stdout); return BT_EXIT_OK;
        default: return bt_cli_bad_option("profile", argc, argv, c);
        }
    }
    int prc = bt_cli_take_positional("profile", argc, argv, optind, &o.model);
    if (prc != BT_EXIT_OK) return prc;
    bt_model *m = NULL;
    rc = bt_cli_load_model("profile", &o.model, &m);
    if (rc != BT_EXIT_OK) return rc;
    rc = profile_model(&o, m);
    bt_model_destroy(m);
    return rc;
}
