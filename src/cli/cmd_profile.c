/* cli/cmd_profile.c: `baton profile MODEL.yaml --devices cpu:0,cpu:1`: measures every layer's
 * forward, backward and optimizer-step time for one micro-batch on each device kind listed, and
 * the transfer rate between every pair of listed devices; prints them as a table and writes the
 * profile file `baton plan --profile` reads (default `<model-name>.profile.json`).
 * Exit codes: 0 ok, 2 usage or model errors, 1 runtime failures (measuring, writing). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "profile/measure.h"

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
            "writes a profile file for `baton plan --profile`.\n"
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
    printf("profile of %s: batch %lld in %d micro-batch%s of %lld samples, %s, optimizer %s, "
           "%d repeats after %d warm-ups, %d thread%s\n",
           bt_cli_escape(p->model, name, sizeof name), (long long)p->batch, p->microbatches, p->microbatches == 1 ? "" : "es",
           (long long)p->microbatch_size, p->training ? "training" : "forward only", p->optimizer,
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
    bt_profile_params pp;
    bt_profile_params_init(&pp);
    pp.devices = default_devices(o, m);
    pp.batch = o->batch > 0 ? o->batch : m->train.batch;
    pp.microbatches = o->microbatches > 0 ? o->microbatches : m->parallel.microbatches;
    pp.training = m->train.enabled && bt_graph_is_trainable(m->graph);
    pp.optimizer = m->train.optimizer;
    if (o->repeats > 0) pp.repeats = o->repeats;
    if (o->warmup >= 0) pp.warmup = o->warmup;
    pp.threads = o->threads;
    bt_profile *p = NULL;
    bt_status st = bt_profile_measure(m->graph, m->name, &pp, &p);
    if (st != BT_OK) return bt_cli_fail("profile", st);
    print_profile(p);
    st = bt_profile_save(p, path);
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
        {NULL, 0, NULL, 0}};
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
