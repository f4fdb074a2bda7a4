/* cli/cmd_predict.c: `baton predict MODEL.yaml --weights CKPT --input x.npy [--output y.npy]
 * [--output-layer NAME] [--labels y.npy]`: loads trained weights into an inference engine (the
 * forward-only schedule across the model's stages and devices), streams the npy inputs through it
 * in batches (train/predict.c), writes the chosen layer's outputs, and reports accuracy and loss
 * when labels are given, throughput and per-batch latency (p50, p99). A file that does not exist
 * is a usage error (exit 2), as is data that does not fit the model.
 *
 * Under mpirun -np N it runs as `baton run` serves (run_dist.c): one rank per stage of D = N / P
 * replicas, each loading only its own stage's weights, each replica computing its share of every
 * batch; the engine hands the outputs and per-sample losses to every rank, and rank 0 alone
 * prints and writes --output (the others' output goes to /dev/null). The ranks first compare what
 * they were given (cli/agree.h), and refuse at start-up, exit 2, naming the first field that
 * differs; parallel: auto is refused (every rank would measure and choose its own layout). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/agree.h"
#include "cli/cli.h"
#include "cli/outputs.h"
#include "cli/run.h"
#include "cli/run_dist.h"
#include "core/strutil.h"
#include "dist/dist.h"
#include "exec/engine_dist.h"
#include "train/checkpoint.h"
#include "train/lm.h"
#include "train/predict.h"

static void predict_usage(FILE *f)
{
    fprintf(f,
            "usage: baton predict MODEL.yaml --weights CKPT --input X.npy [KEY=VALUE ...] [options]\n"
            "\n"
            "Runs trained weights forward on npy inputs through the model's pipeline (forward-only\n"
            "schedule), writes the outputs, and reports accuracy and loss when labels are given, and\n"
            "samples/s and per-batch latency (p50, p99).\n"
            "\n"
            "options:\n"
            "  --weights PATH        a checkpoint directory or a safetensors file (PyTorch names)\n"
            "  --input [NAME=]FILE   an npy file of inputs, shaped (N, *the input's shape); NAME= picks\n"
            "                        the input (repeat for each); without it, the model's one input\n"
            "                        besides its labels\n"
            "  --labels FILE         npy labels for the loss's label input: report accuracy and loss\n"
            "  --data train|eval     instead of --input: the model's own data.train or data.eval\n"
            "                        (IDX, npy or synthetic), labels included\n"
            "  --output FILE         write the outputs (N, *the layer's shape) as npy\n"
            "  --output-layer NAME   the layer whose outputs are gathered (default: the logits a\n"
            "                        classifier's loss reads, else the last layer)\n"
            "  --batch N             samples per batch (default train.batch)\n"
            "  --devices LIST        devices, one per stage\n"
            "  --stages N            pipeline stages\n"
            "  --microbatches M      micro-batches per batch\n"
            "  --threads N           BLAS threads of each CPU stage\n"
            "  --seed N              seed of parameter initialisation (before the weights load)\n"
            "  --log-format F        text (default) | jsonl: one JSON record at the end\n"
            "  --plugin LIB.so       load a library of custom ops first (its\n"
            "                        baton_plugin_register registers them)\n"
            "  -h, --help            this help\n"
            "Under mpirun -np N: one rank per stage of N / P replicas, each with its own stage's\n"
            "weights; rank 0 prints and writes --output. Every rank must be given the same options\n"
            "and inputs (exit 2 naming the first that differs).\n");
}

static int missing(const char *what, const char *path)
{
    if (access(path, R_OK) == 0) return 0;
    char shown[512];
    fprintf(stderr, "baton predict: %s %s: no such file or not readable\n", what,
            bt_cli_escape(path, shown, sizeof shown));
    return 1;
}

static void print_report(const bt_predict_report *r, const char *output, bt_dtype precision, int jsonl)
{
    if (jsonl) { /* one record, built with jansson: a layer or path with '"' or '\\' stays valid */
        json_t *rec = json_pack("{s:b, s:I, s:I, s:o, s:o, s:o, s:s, s:s}", "predict", 1, "samples", (json_int_t)r->samples,
                                "batches", (json_int_t)r->batches, "samples_per_s", bt_cli_json_num(r->samples_per_s),
                                "p50_ms", bt_cli_json_num(r->p50_ms), "p99_ms", bt_cli_json_num(r->p99_ms),
                                "output_layer", r->output_layer, "precision", bt_dtype_name(precision));
        if (rec && r->has_loss) json_object_set_new(rec, "loss", bt_cli_json_num(r->loss));
        if (rec && !isnan(r->accuracy)) json_object_set_new(rec, "accuracy", bt_cli_json_num(r->accuracy));
        if (rec && output) json_object_set_new(rec, "output", json_string(output));
        if (rec) {
            json_dumpf(rec, stdout, JSON_REAL_PRECISION(9) | JSON_ENSURE_ASCII);
            printf("\n");
        }
        json_decref(rec);
        return;
    }
    char shape[64], name[128];
    printf("predicted %lld samples in %lld batches: %.0f samples/s, latency p50 %.2f ms, p99 %.2f ms%s%s%s\n",
           (long long)r->samples, (long long)r->batches, r->samples_per_s, r->p50_ms, r->p99_ms,
           precision != BT_F32 ? " (precision " : "", precision != BT_F32 ? bt_dtype_name(precision) : "",
           precision != BT_F32 ? ")" : "");
    if (r->has_loss) {
        printf("  ");
        if (!isnan(r->accuracy)) printf("accuracy %.2f%%  ", 100 * r->accuracy);
        printf("loss %.4f\n", r->loss);
    }
    if (output)
        printf("  outputs of '%s' (%s per sample) -> %s\n", bt_cli_escape(r->output_layer, name, sizeof name),
               bt_shape_format(&r->output_shape, shape, sizeof shape), output);
}

/* --output may not be a file predict reads (cli/outputs.h): the model, the weights, --input,
 * --labels, or the data files of --data (section: "data.eval" or "data.train"; NULL without). */
static int check_output(const bt_cli_model_opts *mo, const char *weights, const bt_predict_opts *po,
                        const char *section)
{
    bt_cli_inputs in;
    bt_cli_inputs_init(&in, "predict");
    bt_cli_inputs_add_model(&in, mo);
    bt_cli_inputs_add_checkpoint(&in, "--weights", weights, 0);
    for (int i = 0; i < po->n_inputs; i++) bt_cli_inputs_add(&in, "--input", po->input_files[i]);
    bt_cli_inputs_add(&in, "--labels", po->labels);
    if (po->source) bt_cli_inputs_add_data(&in, section, po->source);
    int rc = bt_cli_outputs_check(&in, "--output", po->output_path);
    bt_cli_inputs_free(&in);
    return rc;
}

/* What every rank of a predict job must share: the weights and every input file by content, the
 * options, then the engine's fields (the outputs are rank 0's to write, but one command line for
 * every rank is the rule). */
static void predict_record(const bt_model *m, const bt_engine_params *p, const char *weights, const char *data,
                           const bt_predict_opts *po, int jsonl, bt_agree *a)
{
    bt_agree_str(a, "command", "predict");
    bt_cli_agree_weights(a, "--weights", weights);
    bt_agree_int(a, "--input (how many)", po->n_inputs);
    for (int i = 0; i < po->n_inputs; i++) {
        char field[64];
        snprintf(field, sizeof field, "--input %d (its input)", i + 1);
        bt_agree_str(a, field, po->input_names[i] ? po->input_names[i] : "(the model's one input)");
        snprintf(field, sizeof field, "--input %d", i + 1);
        bt_agree_file(a, field, po->input_files[i], 0);
    }
    if (po->labels) bt_agree_file(a, "--labels", po->labels, 0);
    else bt_agree_str(a, "--labels", NULL);
    bt_agree_str(a, "--data", data);
    if (po->source) bt_cli_agree_data(a, po->source == &m->data.eval ? "data.eval" : "data.train", po->source);
    bt_agree_str(a, "--output-layer", po->output_layer);
    bt_agree_str(a, "--output", po->output_path);
    bt_agree_str(a, "--log-format", jsonl ? "jsonl" : "text");
    bt_engine_agree_fields(a, m->graph, p);
}

int bt_cmd_predict(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"weights", required_argument, NULL, 'W'},      {"input", required_argument, NULL, 'i'},
        {"labels", required_argument, NULL, 'y'},       {"output", required_argument, NULL, 'o'},
        {"output-layer", required_argument, NULL, 'O'}, {"batch", required_argument, NULL, 'b'},
        {"devices", required_argument, NULL, 'd'},      {"stages", required_argument, NULL, 's'},
        {"microbatches", required_argument, NULL, 'm'}, {"threads", required_argument, NULL, 't'},
        {"seed", required_argument, NULL, 'r'},         {"log-format", required_argument, NULL, 'l'},
        {"data", required_argument, NULL, 'D'},         {"help", no_argument, NULL, 'h'},
        {"plugin", required_argument, NULL, 'U'},       {NULL, 0, NULL, 0}};
    bt_cli_model_opts mo;
    bt_predict_opts po;
    const char *weights = NULL, *data = NULL, *section = NULL;
    long long batch = 0;
    int threads = 0, jsonl = 0, rc, c;
    unsigned long long seed = 0;
    memset(&mo, 0, sizeof mo);
    memset(&po, 0, sizeof po);
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'W': weights = optarg; break;
        case 'i': {
            if (po.n_inputs == BT_DATA_MAX_INPUTS) {
                fprintf(stderr, "baton predict: --input: at most %d files\n", BT_DATA_MAX_INPUTS);
                return BT_EXIT_USAGE;
            }
            char *eq = strchr(optarg, '=');
            po.input_names[po.n_inputs] = NULL;
            po.input_files[po.n_inputs] = optarg;
            if (eq && eq != optarg) {
                *eq = '\0';
                po.input_names[po.n_inputs] = optarg;
                po.input_files[po.n_inputs] = eq + 1;
            }
            po.n_inputs++;
            break;
        }
        case 'y': po.labels = optarg; break;
        case 'D':
            if (strcmp(optarg, "train") != 0 && strcmp(optarg, "eval") != 0)
                return bt_cli_bad_value("predict", "--data", "train or eval", optarg);
            data = optarg;
            break;
        case 'o': po.output_path = optarg; break;
        case 'O': po.output_layer = optarg; break;
        case 'b': rc = bt_cli_parse_int("predict", "--batch", optarg, 1, BT_CLI_MAX_BATCH, &batch); if (rc != BT_EXIT_OK) return rc; mo.batch = batch; break;
        case 'd': mo.devices = optarg; break;
        case 's': rc = bt_cli_parse_int32("predict", "--stages", optarg, 1, BT_MAX_STAGES, &mo.stages); if (rc != BT_EXIT_OK) return rc; break;
        case 'm': rc = bt_cli_parse_int32("predict", "--microbatches", optarg, 1, BT_MAX_MICROBATCHES, &mo.microbatches); if (rc != BT_EXIT_OK) return rc; break;
        case 't': rc = bt_cli_parse_int32("predict", "--threads", optarg, 1, BT_CLI_MAX_THREADS, &threads); if (rc != BT_EXIT_OK) return rc; break;
        case 'r': rc = bt_cli_parse_u64("predict", "--seed", optarg, &seed); if (rc != BT_EXIT_OK) return rc; break;
        case 'l':
            if (strcmp(optarg, "jsonl") == 0) jsonl = 1;
            else if (strcmp(optarg, "text") != 0)
                return bt_cli_bad_value("predict", "--log-format", "text or jsonl", optarg);
            break;
        case 'U': rc = bt_cli_add_plugin("predict", &mo, optarg); if (rc != BT_EXIT_OK) return rc; break;
        case 'h': predict_usage(stdout); return BT_EXIT_OK;
        default: return bt_cli_bad_option("predict", argc, argv, c);
        }
    }
    if ((rc = bt_cli_take_positional("predict", argc, argv, optind, &mo)) != BT_EXIT_OK) return rc;
    if (!weights) {
        fprintf(stderr, "baton predict: --weights is required (a checkpoint directory or a safetensors file): "
                        "predicting with untrained weights means nothing\n");
        return BT_EXIT_USAGE;
    }
    if (po.n_inputs == 0 && !data) {
        fprintf(stderr, "baton predict: --input is required (an npy file of inputs), or --data train|eval\n");
        return BT_EXIT_USAGE;
    }
    if (data && (po.n_inputs > 0 || po.labels)) {
        fprintf(stderr, "baton predict: --data reads the model's data: section; it cannot be combined with %s\n",
                po.labels ? "--labels" : "--input");
        return BT_EXIT_USAGE;
    }
    if (missing("--weights", weights) || (po.labels && missing("--labels", po.labels))) return BT_EXIT_USAGE;
    for (int i = 0; i < po.n_inputs; i++)
        if (missing("--input", po.input_files[i])) return BT_EXIT_USAGE;
    bt_model *m = NULL;
    if ((rc = bt_cli_load_model("predict", &mo, &m)) != BT_EXIT_OK) return rc;
    if ((rc = bt_cli_refuse_hf_weights("predict", &m, 0)) != BT_EXIT_OK) return rc;
    if (data) {
        po.source = strcmp(data, "eval") == 0 ? &m->data.eval : &m->data.train;
        section = strcmp(data, "eval") == 0 ? "data.eval" : "data.train";
        po.seed = seed;
        if (bt_lm_wanted(m)) { /* text data: the validation windows the run evaluated (train/lm.h) */
            if (strcmp(data, "eval") != 0) {
                fprintf(stderr, "baton predict: --data train: a language model's text data is predicted on its "
                        "validation windows, as the run evaluated them: --data eval\n");
                bt_model_destroy(m);
                return BT_EXIT_USAGE;
            }
            po.source = &m->data.train;
            section = "data.train";
        }
        if (po.source->kind == BT_DATA_NONE) {
            char path[512];
            fprintf(stderr, "baton predict: --data %s: %s has no data.%s\n", data,
                    bt_cli_escape(m->path, path, sizeof path), data);
            bt_model_destroy(m);
            return BT_EXIT_USAGE;
        }
    }
    if ((rc = check_output(&mo, weights, &po, section)) != BT_EXIT_OK) {
        bt_model_destroy(m);
        return rc;
    }
    if ((rc = bt_cli_dist_refuse_auto("predict", m, 0)) != BT_EXIT_OK) {
        bt_model_destroy(m);
        return rc;
    }
    bt_cli_auto au; /* parallel: auto: chosen for forward-only serving of this batch, measured now */
    rc = bt_cli_resolve_auto_for("predict", m, threads, !jsonl, 0, 1, batch > 0 ? batch : m->train.batch, 0, &au);
    if (rc != BT_EXIT_OK) {
        bt_model_destroy(m);
        return rc;
    }
    if (threads == 0) threads = au.threads;
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel = m->parallel;
    p.parallel.schedule = BT_SCHEDULE_STREAM; /* serving is forward-only, whatever the model trains with */
    p.training = 0;
    p.batch = batch > 0 ? batch : m->train.batch;
    p.dtype = m->dtype;
    p.seed = seed;
    p.threads = threads;
    p.precision = m->train.precision; /* as the run trained and evaluated it (train.precision=f32 overrides) */
    bt_cli_dist dist; /* under mpirun: this rank's stage of one replica (run_dist.c) */
    bt_agree rec;
    bt_agree_init(&rec);
    if (bt_dist_launched(NULL) > 1) predict_record(m, &p, weights, data, &po, jsonl, &rec);
    rc = bt_cli_dist_setup_serving("predict", m, &p, &rec, p.watchdog_s > 0 ? p.watchdog_s : 60, &dist);
    bt_agree_free(&rec);
    if (rc != BT_EXIT_OK) {
        bt_model_destroy(m);
        return bt_cli_dist_finish(&dist, rc);
    }
    const char *output = po.output_path;
    if (dist.on && dist.layout.rank != 0) po.output_path = NULL; /* every rank has the outputs: rank 0 writes */
    bt_engine *e = NULL;
    bt_predict_report rep;
    bt_status st = bt_cli_dist_create_engine(&dist, m, &p, &e);
    if (st == BT_OK) st = bt_checkpoint_load_weights(e, m->graph, weights);
    if (st == BT_OK) st = bt_predict_run(m, e, &po, NULL, NULL, &rep);
    if (st == BT_OK) {
        print_report(&rep, output, p.precision, jsonl);
        rc = BT_EXIT_OK;
    } else {
        rc = bt_cli_fail("predict", st);
    }
    if (rc != BT_EXIT_OK) bt_cli_dist_finish(&dist, rc); /* a failed rank ends the job before anything waits */
    bt_engine_destroy(e);
    bt_model_destroy(m);
    return bt_cli_dist_finish(&dist, rc);
}
